"""Seconds per CAVI iteration of our HPF solver next to hpfrec 0.2.14.

Measures one `custom_inference.hpf.sweep` (a full sweep as `hpf.fit` runs it: phi, gamma, kappa,
lambda, tau, plus the ELBO of the incoming state) in float32 and float64, on

1. MovieLens 100K (``u.data``; the 1-5 star ratings used as counts), and
2. a synthetic 50,000 x 5,000 count matrix with 2,000,000 nonzeros
   (popularity-skewed, built in COO form without any dense I x J array),

and hpfrec's full-batch ``HPF.fit`` on the same triplets with the same K and
hyperparameters (run in its own virtual env through ``hpfrec_peer.py``).

Our timing: one warm-up call of the jitted ``step`` (compiles), then ``--steps``
timed calls, each ``jax.block_until_ready``-ed, the state fed forward; the median
is reported. hpfrec's timing: wall time of ``fit(maxiter=M, stop_crit='maxiter',
verbose=False)`` divided by M, nothing subtracted (see ``hpfrec_peer.py``).

Writes ``hpf_bench.csv``, ``hpf_bench.md`` and ``hpf_bench.json`` under ``--out``.
See ``benchmarks/README.md`` for the peer env set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

DEFAULT_PEER_PYTHON = REPO / "benchmarks" / ".venv-peer" / "bin" / "python"
PEER_SCRIPT = REPO / "benchmarks" / "hpfrec_peer.py"
DEFAULT_OUT = Path(tempfile.gettempdir()) / "factorbayes-bench"
COLUMNS = ("dataset", "shape", "nnz", "method", "dtype", "sec_per_iter", "ratio_to_hpfrec", "note")


def default_ml100k_dir() -> Path:
    """``$FACTORBAYES_DATA_DIR/ml-100k`` if that variable is set, else ``<repo>/../shared/data/ml-100k``."""
    env = os.environ.get("FACTORBAYES_DATA_DIR")
    if env:
        return Path(env) / "ml-100k"
    return REPO.parent / "shared" / "data" / "ml-100k"


# ---------------------------------------------------------------------------------
# data


def load_ml100k(path: Path):
    """(rows, cols, values, shape) from MovieLens 100K ``u.data`` (ids from 1 -> 0-based)."""
    path = Path(path)
    if path.is_dir():
        path = path / "u.data"
    if not path.is_file():
        raise SystemExit(f"MovieLens 100K not found at {path} (use --ml100k or FACTORBAYES_DATA_DIR)")
    raw = np.loadtxt(path, dtype=np.int64, delimiter="\t", usecols=(0, 1, 2))
    rows, cols, values = raw[:, 0] - 1, raw[:, 1] - 1, raw[:, 2].astype(np.float64)
    return rows, cols, values, (int(rows.max()) + 1, int(cols.max()) + 1)


def synthetic_counts(n_users=50_000, n_items=5_000, nnz=2_000_000, seed=0, item_exponent=0.8, user_sigma=1.0):
    """A sparse count matrix that looks like implicit-feedback data, in COO form.

    Items are chosen with Zipf-like popularity p_j ∝ rank_j^(-item_exponent) (ranks
    shuffled over the item ids), users with log-normal activity (sigma
    ``user_sigma``); (user, item) pairs are drawn independently, duplicates
    dropped, and the draw topped up until exactly ``nnz`` distinct pairs exist.
    Counts are uniform on 1..5. Nothing of size I x J is ever allocated. The draw
    is `synthetic_scale.netflix_like` (the generator of ``bench_scale.py``) at this
    shape, with uniform 1..5 values.

    Returns (rows int64, cols int64, values float64, (n_users, n_items)).
    Raises ValueError (from `netflix_like`) when ``nnz`` exceeds half of the cells.
    Source: project convention (benchmark data).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synthetic_scale import netflix_like

    rows, cols, values = netflix_like(nnz, n_users=n_users, n_items=n_items, kind="ratings", seed=seed,
                                      item_exponent=item_exponent, user_sigma=user_sigma, rating_probs=(0.2,) * 5)
    return rows.astype(np.int64), cols.astype(np.int64), values.astype(np.float64), (n_users, n_items)


# ---------------------------------------------------------------------------------
# our solver


def time_ours(rows, cols, values, shape, *, k, dtype, steps, seed=0):
    """Median seconds of one jitted `hpf.sweep` (the sweep `fit` runs; after a compiling warm-up call),
    and all samples."""
    import jax
    import jax.numpy as jnp

    from custom_inference import hpf
    from custom_inference.data import Observations
    from ppl_models.hpf import HPFHyper

    hyper = HPFHyper()
    assert hyper == HPFHyper(0.3, 0.3, 1.0, 0.3, 0.3, 1.0), "HPFHyper defaults changed; pass the same to hpfrec"
    dtype = np.dtype(dtype)
    with jax.enable_x64(dtype == np.float64):
        obs = Observations.from_coo(rows, cols, values, shape, kind="count", dtype=dtype)
        data = jax.tree_util.tree_map(jnp.asarray, obs)
        key = jax.random.PRNGKey(seed)
        state = hpf.init(key, data, k, hyper, dtype=dtype)
        start = time.perf_counter()
        state, info = hpf.sweep(state, data, hyper)
        jax.block_until_ready((state, info))
        compile_seconds = time.perf_counter() - start
        samples, cpu_samples = [], []
        for _ in range(steps):
            cpu0 = time.process_time()
            start = time.perf_counter()
            state, info = hpf.sweep(state, data, hyper)
            jax.block_until_ready((state, info))
            samples.append(time.perf_counter() - start)
            cpu_samples.append(time.process_time() - cpu0)
        finite = bool(np.isfinite(float(info)))
        got_dtype = str(state.gamma_shape.dtype)
    return {
        "seconds_per_iter": statistics.median(samples),
        "min_seconds_per_iter": min(samples),
        "cpu_seconds_per_iter": statistics.median(cpu_samples),
        "samples": samples,
        "first_call_seconds": compile_seconds,
        "elbo_finite": finite,
        "state_dtype": got_dtype,
    }


# ---------------------------------------------------------------------------------
# hpfrec (subprocess in its own venv)


def time_hpfrec(rows, cols, values, shape, *, k, maxiter, ncores, peer_python, double=False, timeout=3600):
    """Run `hpfrec_peer.py` in the peer venv on these triplets; returns its JSON report."""
    peer_python = Path(peer_python)
    if not peer_python.exists():
        raise FileNotFoundError(
            f"peer interpreter {peer_python} not found; create the peer venv (benchmarks/README.md) or pass --skip-peer"
        )
    with tempfile.TemporaryDirectory(prefix="factorbayes-hpfrec-") as tmp:
        npz = Path(tmp) / "data.npz"
        np.savez(npz, rows=rows.astype(np.int64), cols=cols.astype(np.int64), values=values, shape=np.asarray(shape))
        cmd = [str(peer_python), str(PEER_SCRIPT), str(npz), "--k", str(k), "--maxiter", str(maxiter), "--ncores", str(ncores)]
        if double:
            cmd.append("--double")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"hpfrec peer failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"hpfrec peer printed no JSON:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------------
# output


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def markdown_table(rows) -> str:
    header = "| " + " | ".join(COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join([header, sep, *body])


def text_table(rows) -> str:
    cells = [list(COLUMNS)] + [[_fmt(r[c]) for c in COLUMNS] for r in rows]
    widths = [max(len(row[j]) for row in cells) for j in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_outputs(out: Path, rows, meta) -> None:
    import csv

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "hpf_bench.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow({c: r[c] for c in COLUMNS})
    (out / "hpf_bench.md").write_text(
        "# HPF CAVI: seconds per iteration\n\n"
        + markdown_table(rows)
        + "\n\n"
        + "\n".join(f"- {k}: {v}" for k, v in meta.items() if k != "details")
        + "\n"
    )
    (out / "hpf_bench.json").write_text(json.dumps({"rows": rows, "meta": meta}, indent=2, default=str))


# ---------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Seconds per HPF CAVI iteration: custom_inference.hpf.sweep (float32, float64) vs hpfrec 0.2.14.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--ml100k", type=Path, default=default_ml100k_dir(), help="MovieLens 100K directory (or its u.data)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for hpf_bench.{csv,md,json}")
    parser.add_argument("--datasets", default="ml100k,synthetic", help="comma-separated subset of ml100k,synthetic")
    parser.add_argument("--k", type=int, default=20, help="number of components K")
    parser.add_argument("--steps", type=int, default=10, help="timed steps of our solver (median reported)")
    parser.add_argument("--dtypes", default="float32,float64", help="our solver's precisions")
    parser.add_argument("--synthetic-shape", default="50000x5000", help="I x J of the synthetic matrix")
    parser.add_argument("--synthetic-nnz", type=int, default=2_000_000, help="nonzeros of the synthetic matrix")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data and of our init")
    parser.add_argument("--peer-python", type=Path, default=DEFAULT_PEER_PYTHON, help="python of the hpfrec venv")
    parser.add_argument("--peer-maxiter", type=int, default=10, help="M: hpfrec fit runs M sweeps; s/iter = wall/M")
    parser.add_argument("--peer-ncores", type=int, default=2, help="hpfrec ncores")
    parser.add_argument("--peer-double", action="store_true", help="also time hpfrec with use_float=False (float64)")
    parser.add_argument("--skip-peer", action="store_true", help="do not run hpfrec")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="repeat every measurement this many times, interleaved; rows report the best round (for a noisy machine)",
    )
    parser.add_argument(
        "--import-root", type=Path, default=REPO,
        help="directory from which custom_inference and ppl_models are imported (to time a candidate patch in a copy)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(args.import_root.resolve()))
    import jax

    import custom_inference

    print(f"[ours] custom_inference from {Path(custom_inference.__file__).parent}", file=sys.stderr)

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    for d in datasets:
        if d not in ("ml100k", "synthetic"):
            raise SystemExit(f"unknown dataset {d!r}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    n_users, n_items = (int(x) for x in args.synthetic_shape.lower().split("x"))

    rows_out = []
    details = {}
    for name in datasets:
        if name == "ml100k":
            r, c, v, shape = load_ml100k(args.ml100k)
            label = "MovieLens 100K"
        else:
            t0 = time.perf_counter()
            r, c, v, shape = synthetic_counts(n_users, n_items, args.synthetic_nnz, seed=args.seed)
            print(f"[synthetic] built {shape[0]}x{shape[1]}, nnz={v.size} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            label = f"synthetic {shape[0]}x{shape[1]}"
        nnz = int(v.size)
        base = {"dataset": label, "shape": f"{shape[0]}x{shape[1]}", "nnz": nnz}

        # Each round times every configuration once (hpfrec first, then ours), so that
        # all of them see similar machine load; rows report the best round.
        peer_reps = {}
        our_reps = {}
        for rnd in range(args.rounds):
            tag = f" round {rnd + 1}/{args.rounds}" if args.rounds > 1 else ""
            if not args.skip_peer:
                for double in [False] + ([True] if args.peer_double else []):
                    print(f"[{name}] hpfrec (double={double}){tag} ...", file=sys.stderr)
                    load_before = os.getloadavg()[0]
                    rep = time_hpfrec(
                        r, c, v, shape, k=args.k, maxiter=args.peer_maxiter, ncores=args.peer_ncores,
                        peer_python=args.peer_python, double=double,
                    )
                    rep["loadavg_1min_before"] = load_before
                    peer_reps.setdefault(rep["precision"], []).append(rep)
                    ok = (rep["finite"] and rep["sweeps_run"] == args.peer_maxiter
                          and rep["poisson_llk"] > rep["poisson_llk_maxiter1"])
                    if not ok:
                        print(f"WARNING hpfrec fit looks wrong: finite={rep['finite']} sweeps_run={rep['sweeps_run']} "
                              f"llk after 1 / {args.peer_maxiter} sweeps: {rep['poisson_llk_maxiter1']:.6g} / "
                              f"{rep['poisson_llk']:.6g}", file=sys.stderr)
            for dt in dtypes:
                print(f"[{name}] ours {dt}{tag} ...", file=sys.stderr)
                load_before = os.getloadavg()[0]
                rep = time_ours(r, c, v, shape, k=args.k, dtype=dt, steps=args.steps, seed=args.seed)
                rep["loadavg_1min_before"] = load_before
                our_reps.setdefault(dt, []).append(rep)

        rounds_note = f"; best of {args.rounds} rounds" if args.rounds > 1 else ""
        peer_rows = []
        for precision, reps in peer_reps.items():
            details[f"{name}/hpfrec/{precision}"] = reps if args.rounds > 1 else reps[0]
            best = min(reps, key=lambda x: x["seconds_per_iter"])
            peer_rows.append({
                **base, "method": f"hpfrec {best['hpfrec_version']}", "dtype": precision,
                "sec_per_iter": best["seconds_per_iter"],
                "note": (f"fit wall/{best['maxiter']}, ncores={best['ncores']}; "
                         f"differential {best['seconds_per_iter_differential']:.4g}{rounds_note}"),
            })
        ref = next((p_["sec_per_iter"] for p_ in peer_rows if p_["dtype"] == "float32"), None)
        for p_ in peer_rows:
            p_["ratio_to_hpfrec"] = p_["sec_per_iter"] / ref if ref else float("nan")
        rows_out.extend(peer_rows)
        for dt, reps in our_reps.items():
            details[f"{name}/ours/{dt}"] = reps if args.rounds > 1 else reps[0]
            best = min(reps, key=lambda x: x["seconds_per_iter"])
            rows_out.append({
                **base, "method": "factorbayes CAVI step", "dtype": best["state_dtype"],
                "sec_per_iter": best["seconds_per_iter"],
                "ratio_to_hpfrec": best["seconds_per_iter"] / ref if ref else float("nan"),
                "note": (f"median of {args.steps} (min {best['min_seconds_per_iter']:.4g}); "
                         f"first call (compiles) {reps[0]['first_call_seconds']:.3g}s{rounds_note}"),
            })
        print(text_table([x for x in rows_out if x["dataset"] == label]), file=sys.stderr)

    meta = {
        "K": args.k,
        "hyperparameters": "a=a'=c=c'=0.3, b'=d'=1 (HPFHyper defaults = hpfrec defaults)",
        "ratio_to_hpfrec": "our s/iter divided by hpfrec float32 s/iter on the same data (target <= 0.5 on the synthetic matrix)",
        "ours": "median of jitted step calls after a compiling warm-up; each sweep also computes the ELBO",
        "hpfrec": "wall time of fit(maxiter=M, stop_crit='maxiter', verbose=False) / M, nothing subtracted",
        "jax": f"{jax.__version__} ({jax.devices()[0].platform})",
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "machine": platform.platform(),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "import_root": str(args.import_root.resolve()),
        "loadavg_1min_at_end": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "details": details,
    }
    print()
    print(text_table(rows_out))
    for r_ in rows_out:
        if r_["dataset"].startswith("synthetic") and r_["method"].startswith("factorbayes"):
            verdict = "meets" if r_["ratio_to_hpfrec"] <= 0.5 else "MISSES"
            print(f"target (<= 0.5 x hpfrec on the synthetic matrix): {r_['dtype']} {verdict} it "
                  f"(ratio {r_['ratio_to_hpfrec']:.3f})")
    write_outputs(args.out, rows_out, meta)
    print(f"\nwrote {args.out}/hpf_bench.csv, .md, .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
