"""Seconds per Gibbs sweep of the HPF sampler on MovieLens 100K (ratings as counts).

Run by hand (not part of the test suite):

    .venv/bin/python benchmarks/bench_hpf_gibbs.py [--ml100k DIR] [--k 20] [--chains 1 4] [--sweeps 20]

Times `custom_inference.hpf_gibbs` sweeps under `lax.scan` (one compiled call of
``--sweeps`` sweeps, after a compiling warm-up), for 1 chain and for 4 chains vectorized,
in float64 and float32, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np


def _chain_sweeps(keys, states, units, hyper, n_sweeps: int):
    """``n_sweeps`` sweeps of every chain (``jax.vmap`` of a ``lax.scan`` of `hpf_gibbs.step`)."""
    from custom_inference import hpf_gibbs as gibbs

    def one(key, state):
        return jax.lax.scan(lambda s, k: (gibbs.step(k, s, units, hyper)[0], None), state,
                            jax.random.split(key, n_sweeps))[0]

    return jax.vmap(one)(keys, states)


_chain_sweeps = jax.jit(_chain_sweeps, static_argnums=4)


def main() -> None:
    repo = Path(__file__).resolve().parents[1]
    default = Path(os.environ.get("FACTORBAYES_DATA_DIR", repo.parent / "shared" / "data")) / "ml-100k"
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ml100k", type=Path, default=default)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--sweeps", type=int, default=20)
    args = parser.parse_args()

    from custom_inference import hpf_gibbs as gibbs
    from custom_inference.data import CountUnits
    from ppl_models.hpf import HPFHyper
    from validation.data import datasets

    df = datasets.load_movielens(args.ml100k)
    obs = datasets.to_observations(datasets.index_ratings(df))
    units = CountUnits.from_observations(obs)
    hyper = HPFHyper()
    rows = []
    for dtype in (np.float64, np.float32):
        with jax.enable_x64(dtype == np.float64):
            u = jax.tree_util.tree_map(jnp.asarray, units)
            u = u.__class__(u.rows, u.cols, u.weight.astype(dtype), u.n_rows, u.n_cols)
            for chains in args.chains:
                keys = jax.random.split(jax.random.PRNGKey(0), chains)
                state = jax.vmap(lambda kk: gibbs.init(kk, u, args.k, hyper, dtype=dtype))(keys)
                run = lambda s, kk: _chain_sweeps(jax.random.split(kk, chains), s, u, hyper, args.sweeps)  # noqa: E731
                jax.block_until_ready(run(state, jax.random.PRNGKey(1)))  # compile
                start = time.perf_counter()
                jax.block_until_ready(run(state, jax.random.PRNGKey(2)))
                sec = (time.perf_counter() - start) / args.sweeps
                rows.append((np.dtype(dtype).name, chains, sec, sec / chains))
    print(f"HPF Gibbs on MovieLens 100K: {obs.nnz} ratings, {units.n_units} count units "
          f"(padded to {units.rows.shape[0]}), K = {args.k}; jax {jax.__version__}, "
          f"{os.cpu_count()} cores, {platform.machine()}\n")
    print("| dtype | chains | seconds per sweep (all chains) | seconds per sweep per chain |")
    print("|---|---|---|---|")
    for dtype, chains, sec, per in rows:
        print(f"| {dtype} | {chains} | {sec:.4f} | {per:.4f} |")


if __name__ == "__main__":
    main()
