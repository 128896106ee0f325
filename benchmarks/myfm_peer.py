"""Peer comparison for the Gaussian FM: myFM 0.4.0 (Bayesian FM by Gibbs sampling, C++) on protocol P2.

Two roles in one file:

- **Driver** (run with the project's ``.venv`` python): builds the P2 split of
  MovieLens 100K (`validation.data.datasets.split_p2`, seed 0, 10 % test) and its FM
  design (`validation.data.datasets.fm_features`, ``--kind ids`` = one-hot user | one-hot
  item, i.e. MF with biases), writes X/y of train and test and the group sizes to
  an ``.npz`` in a temporary directory, and runs this same file with
  ``--worker`` under ``benchmarks/.venv-myfm/bin/python`` once per rank. It also
  runs our MCMC-FM (`custom_inference.fm_mcmc`) on the same designs when that
  module exists (see `run_ours`). Results: a table on stdout and
  ``myfm_peer.json`` in ``--out`` (default ``/tmp/factorbayes-bench``).
- **Worker** (``--worker data.npz``, inside the myFM venv; imports only numpy,
  scipy and myfm, never factorbayes or jax): fits
  ``myfm.MyFMRegressor(rank=R, random_seed=seed).fit(X, y, n_iter=200,
  n_kept_samples=150, group_shapes=[I, J])`` (myFM's default priors and
  ``init_stdev=0.1``), predicts the test rows with the average over the 150 kept
  samples, and prints one JSON line: test RMSE, wall seconds of ``fit`` and of
  ``predict``, seconds per Gibbs sweep (= fit seconds / n_iter, nothing
  subtracted: includes myFM's input conversion and set-up).

The myFM env (gitignored, separate from ``.venv``)::

    python3 -m venv benchmarks/.venv-myfm
    benchmarks/.venv-myfm/bin/pip install "setuptools<81" myfm==0.4.0 numpy scipy pandas

Usage::

    .venv/bin/python benchmarks/myfm_peer.py                     # ranks 10 and 32, ids design
    .venv/bin/python benchmarks/myfm_peer.py --ranks 10 --kind rich
    .venv/bin/python benchmarks/myfm_peer.py --skip-ours         # myFM only
    .venv/bin/python benchmarks/myfm_peer.py --dtypes float32 --repeats 3 --pin-cpu 1   # side by side, one core

``--repeats R`` times each method R times per rank, interleaved (myFM, ours, myFM, ours, ...),
after one untimed run of ours that compiles its sampler; the summary table gives medians of
wall and CPU (process) seconds per sweep, both = whole fit or ``sample`` call / n_iter.
``--pin-cpu C`` pins this process and (by inherited affinity) the myFM worker to CPU C.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PEER_PYTHON = REPO / "benchmarks" / ".venv-myfm" / "bin" / "python"
DEFAULT_OUT = Path(tempfile.gettempdir()) / "factorbayes-bench"


# ---------------------------------------------------------------------------
# worker (myFM venv): numpy, scipy, myfm only
# ---------------------------------------------------------------------------


def worker(argv=None) -> None:
    parser = argparse.ArgumentParser(description="fit myFM on an .npz design and print JSON")
    parser.add_argument("--worker", type=Path, required=True, help=".npz written by the driver")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--n-iter", type=int, default=200)
    parser.add_argument("--n-kept", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import numpy as np
    import scipy.sparse as sp
    import myfm

    d = np.load(args.worker)

    def csr(prefix):
        return sp.csr_matrix(
            (d[prefix + "_values"], (d[prefix + "_rows"], d[prefix + "_cols"])),
            shape=(int(d[prefix + "_n"]), int(d["n_features"])),
        )

    X_train, X_test = csr("train"), csr("test")
    y_train, y_test = d["train_y"], d["test_y"]
    group_shapes = [int(g) for g in d["group_shapes"]]
    model = myfm.MyFMRegressor(rank=args.rank, random_seed=args.seed)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    model.fit(X_train, y_train, n_iter=args.n_iter, n_kept_samples=args.n_kept, group_shapes=group_shapes)
    fit_s = time.perf_counter() - t0
    fit_cpu = time.process_time() - cpu0
    t0 = time.perf_counter()
    pred = np.asarray(model.predict(X_test), dtype=np.float64)  # mean over the kept samples
    predict_s = time.perf_counter() - t0
    rmse = float(np.sqrt(np.mean((pred - y_test) ** 2)))
    print(json.dumps({
        "method": f"myFM {myfm.__version__}",
        "rank": args.rank,
        "n_iter": args.n_iter,
        "n_kept_samples": args.n_kept,
        "seed": args.seed,
        "group_shapes": group_shapes,
        "rmse": rmse,
        "fit_seconds": fit_s,
        "fit_cpu_seconds": fit_cpu,
        "predict_seconds": predict_s,
        "seconds_per_sweep": fit_s / args.n_iter,
        "call_seconds_per_sweep": fit_s / args.n_iter,
        "cpu_seconds_per_sweep": fit_cpu / args.n_iter,
        "n_train": int(X_train.shape[0]),
        "n_test": int(X_test.shape[0]),
        "n_features": int(X_train.shape[1]),
    }))


# ---------------------------------------------------------------------------
# driver (project .venv)
# ---------------------------------------------------------------------------


def write_npz(path: Path, train, test) -> None:
    """X/y of two FMDesigns -> .npz (COO triplets, y, group sizes in column order)."""
    import numpy as np

    group = np.asarray(train.group)
    if np.any(np.diff(group) < 0):
        raise ValueError("group: features of a group must be contiguous for myFM's group_shapes")
    arrays = {"n_features": np.int64(train.n_features),
              "group_shapes": np.bincount(group, minlength=train.n_groups).astype(np.int64)}
    for name, dsg in (("train", train), ("test", test)):
        arrays[name + "_rows"] = np.asarray(dsg.rows, dtype=np.int64)
        arrays[name + "_cols"] = np.asarray(dsg.cols, dtype=np.int64)
        arrays[name + "_values"] = np.asarray(dsg.values, dtype=np.float64)
        arrays[name + "_y"] = np.asarray(dsg.y, dtype=np.float64)
        arrays[name + "_n"] = np.int64(dsg.n_rows)
    np.savez(path, **arrays)


def run_myfm(peer_python: Path, npz: Path, rank: int, n_iter: int, n_kept: int, seed: int, timeout: float) -> dict:
    cmd = [str(peer_python), str(Path(__file__).resolve()), "--worker", str(npz), "--rank", str(rank),
           "--n-iter", str(n_iter), "--n-kept", str(n_kept), "--seed", str(seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"myFM worker failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_ours(train, test, rank: int, n_iter: int, n_kept: int, seed: int, dtype: str = "float64",
             block: int | None = None) -> dict:
    """Our MCMC-FM (`custom_inference.fm_mcmc.sample`) on the same designs, rank and sweeps.

    One chain, ``num_warmup = n_iter - n_kept`` sweeps, then ``num_samples = n_kept``
    kept sweeps (``thin=1``); the test prediction is the mean of yhat over the kept
    sweeps, accumulated during sampling (``test=`` argument, as myFM does), and scored
    with `validation.evaluation.metrics.rmse`. Hyperpriors: `ppl_models.fm.FMHierHyper()`
    defaults (libFM / myFM's alpha_0 = beta_0 = alpha_0' = beta_0' = nu_0 = 1,
    mu_0 = 0), init sd of V 0.1 (myFM's ``init_stdev``). Times: ``seconds_per_sweep``
    as `sample` reports it (all sweeps, compile excluded), the wall and CPU (process) time of
    the whole `sample` call (compile included on the first call of a configuration only:
    `mcmc_driver`'s compiled block is reused by later calls) and those divided by ``n_iter``
    (``call_seconds_per_sweep``, ``cpu_seconds_per_sweep``, comparable with myFM's fit / n_iter).

    Raises `NotImplementedError` when ``custom_inference.fm_mcmc`` cannot be imported.
    """
    try:
        import jax
        from custom_inference import fm_mcmc
        from ppl_models.fm import FMHierHyper
    except ImportError as err:  # the module is written by another helper
        raise NotImplementedError(f"custom_inference.fm_mcmc not importable: {err}") from None
    from validation.evaluation.metrics import rmse

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    idata = fm_mcmc.sample(
        jax.random.PRNGKey(seed), train, rank, FMHierHyper(), num_chains=1,
        num_warmup=n_iter - n_kept, num_samples=n_kept, thin=1, progress=False,
        dtype=dtype, keep=("alpha",), predict_at=test, init_std=0.1, block=block,
    )
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    pred = idata.predictions["pred_mean"].values
    attrs = idata.posterior.attrs  # provenance is stored on every group
    return {
        "method": "factorbayes MCMC-FM",
        "dtype": dtype,
        "rank": rank,
        "n_iter": n_iter,
        "n_kept_samples": n_kept,
        "seed": seed,
        "rmse": rmse(pred, test.y),
        "sample_wall_seconds": wall,
        "sample_cpu_seconds": cpu,
        "call_seconds_per_sweep": wall / n_iter,
        "cpu_seconds_per_sweep": cpu / n_iter,
        "seconds_per_sweep": float(attrs["seconds_per_sweep"]),
        "sampling_seconds": float(attrs["seconds"]),
        "backend": jax.default_backend(),
    }


def summarize(rows) -> str:
    """Markdown table: per rank and method, the median over repeats of test RMSE, wall and CPU
    seconds per sweep (whole fit / sample call divided by the sweeps), and our ratios to myFM."""
    import statistics

    groups = {}
    for r in rows:
        if "rmse" not in r:
            continue
        name = r["method"] + (f" {r['dtype']}" if "dtype" in r else "")
        groups.setdefault((r["rank"], name), []).append(r)
    out = ["| K | method | test RMSE | wall s/sweep | CPU s/sweep | wall ratio | CPU ratio | repeats | load |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (rank, name), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], "myFM" not in kv[0][1], kv[0][1])):
        med = lambda key: statistics.median(x[key] for x in rs)  # noqa: E731
        peer = groups.get(next((k for k in groups if k[0] == rank and "myFM" in k[1]), None))
        pw = statistics.median(x["call_seconds_per_sweep"] for x in peer) if peer else float("nan")
        pc = statistics.median(x["cpu_seconds_per_sweep"] for x in peer) if peer else float("nan")
        loads = [x.get("load_average_1min") for x in rs if x.get("load_average_1min") is not None]
        out.append(f"| {rank} | {name} | {med('rmse'):.4f} | {med('call_seconds_per_sweep'):.4f} | "
                   f"{med('cpu_seconds_per_sweep'):.4f} | {med('call_seconds_per_sweep') / pw:.2f} | "
                   f"{med('cpu_seconds_per_sweep') / pc:.2f} | {len(rs)} | "
                   f"{min(loads):.1f}-{max(loads):.1f} |" if loads else "|")
    return "\n".join(out)


def _load1():
    """1-minute load average (None where unavailable), recorded after each fit: the timings are
    only comparable at similar load."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--ml100k", type=Path, default=None,
                        help="MovieLens 100K directory (default: $FACTORBAYES_DATA_DIR/ml-100k or ../shared/data/ml-100k)")
    parser.add_argument("--kind", default="ids", choices=("ids", "rich"), help="FM design (validation.data.datasets.fm_features)")
    parser.add_argument("--ranks", default="10,32", help="comma-separated ranks")
    parser.add_argument("--n-iter", type=int, default=200, help="Gibbs sweeps")
    parser.add_argument("--n-kept", type=int, default=150, help="last sweeps kept and averaged for prediction")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (P2) and of the samplers")
    parser.add_argument("--peer-python", type=Path, default=DEFAULT_PEER_PYTHON, help="python of the myFM venv")
    parser.add_argument("--skip-peer", action="store_true", help="do not run myFM")
    parser.add_argument("--skip-ours", action="store_true", help="do not run our MCMC-FM")
    parser.add_argument("--dtypes", default="float64,float32", help="our MCMC-FM's precisions")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per myFM fit")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for myfm_peer.json")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed fits per rank and method, interleaved (myFM, ours, myFM, ours, ...)")
    parser.add_argument("--warmup", action="store_true",
                        help="one untimed run of ours per rank and dtype first (implied by --repeats > 1)")
    parser.add_argument("--pin-cpu", type=int, default=None,
                        help="pin this process and the myFM worker (inherited affinity) to this one CPU")
    parser.add_argument("--block", type=int, default=None, help="our driver's sweeps per compiled call")
    args = parser.parse_args(argv)
    if args.pin_cpu is not None:  # before jax starts its thread pools
        os.sched_setaffinity(0, {args.pin_cpu})

    sys.path.insert(0, str(REPO))
    from validation.data.datasets import find_movielens_100k, fm_features, load_movielens, split_p2

    data_dir = args.ml100k if args.ml100k is not None else find_movielens_100k()
    t0 = time.perf_counter()
    split = split_p2(load_movielens(data_dir), seed=args.seed)
    train, test = fm_features(split, args.kind, data_dir=data_dir if Path(data_dir).is_dir() else None)
    build_s = time.perf_counter() - t0
    print(f"P2 split seed {args.seed}: {train.n_rows} train / {test.n_rows} test ratings, "
          f"D = {train.n_features} ({args.kind}: {', '.join(train.group_names)}); built in {build_s:.1f} s",
          flush=True)
    ranks = [int(r) for r in args.ranks.split(",") if r.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="factorbayes-myfm-") as tmp:
        npz = Path(tmp) / "p2_design.npz"
        write_npz(npz, train, test)
        dtypes = [] if args.skip_ours else [d.strip() for d in args.dtypes.split(",") if d.strip()]
        if not args.skip_peer and not args.peer_python.exists():
            raise SystemExit(f"myFM venv not found at {args.peer_python}; create it (see the module docstring)")
        for rank in ranks:
            if args.repeats > 1 or args.warmup:
                for dtype in dtypes:  # compile our sampler's block once, outside the timed calls
                    try:
                        run_ours(train, test, rank, args.n_iter, args.n_kept, args.seed, dtype, block=args.block)
                    except NotImplementedError:
                        pass
            for rep in range(args.repeats):  # interleaved: myFM, then ours, per repeat
                if not args.skip_peer:
                    res = run_myfm(args.peer_python, npz, rank, args.n_iter, args.n_kept, args.seed, args.timeout)
                    res["load_average_1min"] = _load1()
                    res["repeat"] = rep
                    rows.append(res)
                    print(f"  {res['method']:>14} rank {rank:3d} rep {rep}: RMSE {res['rmse']:.4f}  fit "
                          f"{res['fit_seconds']:.1f} s ({res['seconds_per_sweep']:.4f} s/sweep, CPU "
                          f"{res['cpu_seconds_per_sweep']:.4f}; load {res['load_average_1min']})", flush=True)
                for dtype in dtypes:
                    try:
                        res = run_ours(train, test, rank, args.n_iter, args.n_kept, args.seed, dtype, block=args.block)
                    except NotImplementedError as err:
                        res = {"method": "factorbayes MCMC-FM", "rank": rank, "status": "not run", "reason": str(err)}
                        print(f"  factorbayes MCMC-FM rank {rank:3d}: not run ({err})", flush=True)
                        rows.append(res)
                        break
                    res["load_average_1min"] = _load1()
                    res["repeat"] = rep
                    print(f"  MCMC-FM {dtype} rank {rank:3d} rep {rep}: RMSE {res['rmse']:.4f}  "
                          f"{res['sample_wall_seconds']:.1f} s ({res['call_seconds_per_sweep']:.4f} s/sweep, CPU "
                          f"{res['cpu_seconds_per_sweep']:.4f}; driver {res['seconds_per_sweep']:.4f}; "
                          f"load {res['load_average_1min']})", flush=True)
                    rows.append(res)
    summary = summarize(rows)
    print(summary, flush=True)
    load = _load1()
    out = {
        "protocol": "P2 (validation.data.datasets.split_p2): MovieLens 100K, 90:10, permutation of file rows",
        "seed": args.seed,
        "kind": args.kind,
        "n_iter": args.n_iter,
        "n_kept_samples": args.n_kept,
        "n_train": train.n_rows,
        "n_test": test.n_rows,
        "n_features": train.n_features,
        "load_average_1min_at_end": load,
        "pinned_cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "repeats": args.repeats,
        "summary_markdown": summary,
        "results": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "myfm_peer.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        worker()
    else:
        main()
