"""Seconds per HPF CAVI sweep and per SBMF Gibbs sweep with the nonzeros split over 1, 2, 4 devices.

Issue 14 ("sharded over devices"). On a synthetic I x J matrix with ``--nnz`` entries (default
1,000,000; built in COO form, never dense) and ``--K`` components (default 20), for each device
count D in ``--devices`` (default 1,2,4) it shards the data over ``custom_inference.sharding.nnz_mesh(D)``
and times

- HPF CAVI: ``hpf.sweep`` (the fused sweep `hpf.fit` runs: phi sums, gamma, kappa, lambda, tau and
  the ELBO of the incoming state), counts 1..5;
- SBMF Gibbs: ``sbmf.step`` (one chain, the default 5 gauge rounds), ratings ~ N(3, 1);
- MCMC-FM (``--models ...,fm``): ``fm_mcmc.step`` on the one-hot user | item design of the same
  ratings (N = nnz instances, 2 nonzeros each), the instances split over the devices by
  ``fm_design.shard_fm_design``;

plus the same two without a mesh (row ``devices = none``: the single-device code path). Each is
one call that compiles, then ``--sweeps`` timed calls (each ``jax.block_until_ready``-ed, the state
fed forward); the table shows the median and the JSON keeps every sample and the compile call.

Devices: on CPU the devices are XLA host devices; the script sets
``XLA_FLAGS=--xla_force_host_platform_device_count=max(--devices)`` before importing JAX (unless
XLA_FLAGS already sets a count). Host devices share the machine's cores, so on CPU expect overhead,
not speed-up: the CPU run checks that sharding costs little. On GPU it uses ``jax.devices()``.

Usage::

    .venv/bin/python benchmarks/bench_sharding.py                       # 1e6 nonzeros, K=20, D=1,2,4
    .venv/bin/python benchmarks/bench_sharding.py --nnz 100000 --sweeps 3 --out /tmp/bench

Writes ``sharding_bench.json`` and ``sharding_bench.md`` under ``--out`` (default
``<tmp>/factorbayes-bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(tempfile.gettempdir()) / "factorbayes-bench"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nnz", type=int, default=1_000_000, help="nonzeros of the synthetic matrix")
    p.add_argument("--rows", type=int, default=None, help="I (default nnz / 20)")
    p.add_argument("--cols", type=int, default=None, help="J (default nnz / 100)")
    p.add_argument("--K", type=int, default=20)
    p.add_argument("--devices", default="1,2,4", help="comma-separated device counts")
    p.add_argument("--sweeps", type=int, default=5, help="timed sweeps after the compiling one")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--models", default="hpf,sbmf", help="comma-separated subset of hpf,sbmf,fm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p.parse_args(argv)


def synthetic(n_rows: int, n_cols: int, nnz: int, seed: int):
    """(rows, cols) of ``nnz`` distinct cells, uniformly at random, in COO form (no dense array)."""
    rng = np.random.default_rng(seed)
    got = np.zeros(0, np.int64)
    while got.size < nnz:
        got = np.unique(np.concatenate([got, rng.integers(0, n_rows * n_cols, int(1.1 * (nnz - got.size)) + 16)]))
    flat = rng.permutation(got)[:nnz]
    return flat // n_cols, flat % n_cols, rng


def time_calls(fn, state, n: int):
    """(compile-call seconds, list of n timed seconds), feeding the state forward."""
    import jax

    t0 = time.perf_counter()
    state = jax.block_until_ready(fn(state))
    first = time.perf_counter() - t0
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        state = jax.block_until_ready(fn(state))
        out.append(time.perf_counter() - t0)
    return first, out



def _timed_row(model: str, label: str, fn, state, sweeps: int) -> dict:
    """Time ``sweeps`` calls of ``fn`` after a first (compiling) one; print and return the row."""
    first, times = time_calls(fn, state, sweeps)
    row = {"model": model, "devices": label, "median_s": statistics.median(times), "min_s": min(times),
           "samples_s": times, "first_call_s": first}
    print(f"{model:5s} devices={label:4s} median {row['median_s']:.4f} s/sweep  (first call {first:.1f} s)",
          flush=True)
    return row

def main(argv=None) -> int:
    args = parse_args(argv)
    devices = [int(d) for d in args.devices.split(",")]
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={max(devices)}").strip()
    sys.path.insert(0, str(REPO))
    import jax
    import jax.numpy as jnp

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    from custom_inference import hpf, sbmf, sharding
    from custom_inference.data import Observations
    from ppl_models.hpf import HPFHyper
    from ppl_models.sbmf import SBMFHyper

    n_rows = args.rows or max(args.nnz // 20, 10)
    n_cols = args.cols or max(args.nnz // 100, 10)
    rows, cols, rng = synthetic(n_rows, n_cols, args.nnz, args.seed)
    dtype = np.dtype(args.dtype)
    counts = Observations.from_coo(rows, cols, rng.integers(1, 6, args.nnz), (n_rows, n_cols), dtype=dtype)
    ratings = Observations.from_coo(rows, cols, rng.normal(3.0, 1.0, args.nnz), (n_rows, n_cols), kind="real",
                                    drop_zeros=False, dtype=dtype)
    models = args.models.split(",")
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    if "fm" in models:
        import scipy.sparse as sp

        from custom_inference import fm_mcmc
        from custom_inference.fm_design import FMDesign, shard_fm_design
        from ppl_models.fm import FMHierHyper

        n = args.nnz
        X = sp.coo_matrix((np.ones(2 * n), (np.r_[np.arange(n), np.arange(n)], np.r_[rows, n_rows + cols])),
                          shape=(n, n_rows + n_cols))
        fm_design = FMDesign.from_scipy(X, np.asarray(ratings.values, np.float64),
                                        np.r_[np.zeros(n_rows, int), np.ones(n_cols, int)], dtype=dtype)
    results = []
    for d in [None, *devices]:
        label = "none" if d is None else str(d)
        for model in models:
            obs = counts if model == "hpf" else ratings
            if model == "fm":
                data = (fm_mcmc._as_jax(fm_design, dtype) if d is None
                        else shard_fm_design(fm_design, sharding.nnz_mesh(d)))
                state = fm_mcmc.init(jax.random.PRNGKey(0), data, args.K, FMHierHyper(), dtype=dtype)
                hyper = fm_mcmc._prepare_hyper(FMHierHyper(), dtype)
                keys = iter(jax.random.split(jax.random.PRNGKey(1), args.sweeps + 1))
                fn = lambda s, data=data, keys=keys, h=hyper: fm_mcmc.step_jit(next(keys), s, data, h)[0]  # noqa: E731
                results.append(_timed_row(model, label, fn, state, args.sweeps))
                continue
            if d is None:
                data = jax.tree_util.tree_map(jnp.asarray, obs)
            else:
                data = sharding.shard_observations(obs, sharding.nnz_mesh(d))
            if model == "hpf":
                state = hpf.init(0, data, args.K, HPFHyper(), dtype=dtype)
                fn = lambda s, data=data: hpf.sweep(s, data, HPFHyper())[0]  # noqa: E731
            else:
                state = sbmf.init(jax.random.PRNGKey(0), data, args.K, SBMFHyper(), dtype=dtype)
                keys = iter(jax.random.split(jax.random.PRNGKey(1), args.sweeps + 1))
                fn = lambda s, data=data, keys=keys: sbmf.step(next(keys), s, data, SBMFHyper())[0]  # noqa: E731
            if d is not None:
                state = sharding.replicate(state, data)
                if model == "sbmf":  # the cache lives with the blocks
                    state = state._replace(e=jax.device_put(state.e, data.values.sharding))
            results.append(_timed_row(model, label, fn, state, args.sweeps))

    meta = {"nnz": args.nnz, "shape": [n_rows, n_cols], "K": args.K, "dtype": args.dtype, "sweeps": args.sweeps,
            "backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
            "n_devices_available": jax.device_count(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "jax": jax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None, "loadavg_start": load_start}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sharding_bench.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    base = {r["model"]: r["median_s"] for r in results if r["devices"] == "none"}
    lines = [f"nnz {args.nnz:,}, {n_rows:,} x {n_cols:,}, K {args.K}, {args.dtype}, {meta['backend']} "
             f"({meta['device_kind']}), median of {args.sweeps} sweeps; load average (1, 5, 15 min) at start "
             f"{load_start}, at end {meta['loadavg']}", "",
             "| model | devices | s / sweep | vs no mesh |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['devices']} | {r['median_s']:.4f} | {r['median_s'] / base[r['model']]:.2f} |")
    table = "\n".join(lines)
    (args.out / "sharding_bench.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
