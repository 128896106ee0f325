"""Seconds per epoch of every one-class solver on MovieLens 100K (SIBM, RG, BPR).

Run by hand (not part of the test suite):

    .venv/bin/python benchmarks/bench_implicit.py [--ml100k DIR] [--repeats 5] [--dtype float32]
        [--out /tmp/factorbayes-bench/implicit] [--only NAME ...] [--scan-block 256]

What one "epoch" is, per solver (the units of seed 002 fig. 3 and of the BPR literature):

- SIBM batch VB (`custom_inference.sibm.step`, seed 002 "batch"): one sweep (z, every column of V,
  every column of U, then the ELBO), which touches all I J cells;
- SIBM SVI with S-Uniform / S-Balanced / S-Biased (`custom_inference.sibm.svi_scan`, Algorithm 1):
  ceil(I J / S) minibatches of S = max(I, J) cells (fixed S, the seed's minimum), i.e. as many
  sampled cells as one batch sweep touches, run as `fit_svi` runs them: ``--scan-block`` (256)
  minibatches per jitted `lax.scan` call, a host round trip only between blocks;
- SIBM MAP (`custom_inference.sibm.map_step`): the same number of S-Biased minibatches;
- RG VB (`custom_inference.rg.step`, seed 003 sec. 5.1): one sweep on a freshly sampled hidden graph
  H_t ~ q(H), the numpy sampling of H_t (`sample_hidden_graph`) and its transfer included;
- BPR-uniform / BPR-popularity (`custom_inference.bpr.epoch`): one epoch, one triple per training
  positive, `validation.evaluation.implicit_eval.BPR_DEFAULTS` (K = 64, minibatches of 256).

Data (never copied into the repository): MovieLens 100K ``u.data``. SIBM runs on the SIBM protocol
of seed 002 sec. 4 (`validation.evaluation.implicit_eval.split_sibm`: ratings >= 4, 1000 most popular columns,
rows with >= 10 ones, one held-out one per row: 893 x 1000), D = 10 (K = 12 with the two bias
columns); RG and BPR on P1 (`validation.data.datasets.split_leave_one_out`: 943 x 1682), RG with K = 10
and the paper's hyperparameters (`ppl_models.rg.RGHyper`, r = 1/2).

Timing: for each solver one warm-up epoch (compilation; excluded), then ``--repeats`` timed epochs
with the state fed forward, each ended by ``jax.block_until_ready``; the table gives the median
(the JSON keeps every sample). The 1-minute load average (``os.getloadavg``) is recorded before and
after each solver: on a shared machine, read the numbers with it.

Output (``--out``; nothing is written into the repository): ``implicit_bench.json`` (rows, samples,
settings, load averages, machine) and ``implicit_bench.md`` (the table).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SOLVERS = ("SIBM batch VB", "SIBM S-Uniform", "SIBM S-Balanced", "SIBM S-Biased", "SIBM MAP", "RG VB",
           "BPR-uniform", "BPR-popularity")


def _default_ml100k() -> Path:
    env = os.environ.get("FACTORBAYES_DATA_DIR")
    if env and (Path(env) / "ml-100k").exists():
        return Path(env) / "ml-100k"
    return REPO.parent / "shared" / "data" / "ml-100k"


def _load() -> float:
    return float(os.getloadavg()[0])


def _time_epochs(epoch, state, repeats: int):
    """One warm-up call (compiles; excluded), then ``repeats`` timed calls, state fed forward."""
    state = jax.block_until_ready(epoch(state, -1))
    samples = []
    for r in range(repeats):
        start = time.perf_counter()
        state = jax.block_until_ready(epoch(state, r))
        samples.append(time.perf_counter() - start)
    return samples, state


def bench_sibm(split, repeats: int, dtype, only, scan_block: int = 256):
    from custom_inference import sibm
    from ppl_models.sibm import SIBMHyper

    hyper, D = SIBMHyper(), 10
    train = split.train.astype(dtype)
    I, J = train.shape
    data = jax.tree_util.tree_map(jnp.asarray, train)
    q0 = sibm.init(jax.random.PRNGKey(0), train, D, hyper, dtype=dtype)
    S = max(I, J)
    n_mb = math.ceil(I * J / S)
    rows = []

    def add(name, samples, unit, extra):
        rows.append({"solver": name, "epoch": unit, "median_s": float(np.median(samples)), "min_s": float(min(samples)),
                     "samples": samples, **extra})

    if "SIBM batch VB" in only:
        l0 = _load()
        q = q0._replace(last_elbo=jnp.asarray(float(sibm.elbo(q0, data, hyper)), q0.u_h.dtype))
        samples, _ = _time_epochs(lambda s, r: sibm.step(None, s, data, hyper)[0], q, repeats)
        add("SIBM batch VB", samples, f"1 sweep = I J = {I * J} cells (ELBO included)",
            {"I": I, "J": J, "K": D + 2, "load_before": l0, "load_after": _load()})
    for strategy, name in (("uniform", "SIBM S-Uniform"), ("balanced", "SIBM S-Balanced"), ("biased", "SIBM S-Biased")):
        if name not in only:
            continue
        l0 = _load()
        sampler = sibm.make_sampler(train, strategy, dtype=dtype)
        st0 = sibm.svi_state(q0, S)

        def epoch(st, r, sampler=sampler):  # the warm-up epoch (r = -1) compiles the scanned block
            return sibm.svi_scan(jax.random.PRNGKey(1000 + r), st, data, hyper, n_mb, sampler=sampler,
                                 scan_block=scan_block)[1]

        samples, _ = _time_epochs(epoch, st0, repeats)
        add(name, samples, f"{n_mb} minibatches of S = {S} (I J cells)",
            {"I": I, "J": J, "K": D + 2, "S": S, "minibatches": n_mb, "scan_block": scan_block,
             "per_minibatch_ms": 1e3 * float(np.median(samples)) / n_mb, "load_before": l0, "load_after": _load()})
    if "SIBM MAP" in only:
        l0 = _load()
        sampler = sibm.make_sampler(train, "biased", dtype=dtype)
        m0 = sibm.map_init(jax.random.PRNGKey(0), train, D, hyper, dtype=dtype)

        def epoch(st, r):
            key = jax.random.PRNGKey(2000 + r)
            for t in range(n_mb if r >= 0 else 2):
                st, _ = sibm.map_step(jax.random.fold_in(key, t), st, data, hyper, sampler=sampler, S=S)
            return st

        samples, _ = _time_epochs(epoch, m0, repeats)
        add("SIBM MAP", samples, f"{n_mb} S-Biased minibatches of S = {S} (I J cells)",
            {"I": I, "J": J, "K": D + 2, "S": S, "minibatches": n_mb,
             "per_minibatch_ms": 1e3 * float(np.median(samples)) / n_mb, "load_before": l0, "load_after": _load()})
    return rows


def bench_rg(p1, repeats: int, dtype):
    from custom_inference import rg
    from ppl_models.rg import RGHyper

    hyper, K = RGHyper(), 10
    train = p1.train
    pi, _ = rg.popularity_weights(train, hyper.r)
    rng = np.random.default_rng(0)
    l0 = _load()
    g0 = jax.tree_util.tree_map(jnp.asarray, rg.sample_hidden_graph(rng, train, pi, dtype=dtype))
    state = rg.init(jax.random.PRNGKey(0), g0, K, hyper, dtype=dtype)

    def epoch(s, r):
        g = jax.tree_util.tree_map(jnp.asarray, rg.sample_hidden_graph(rng, train, pi, dtype=dtype))
        return rg.step(None, s, g, hyper, rg.robbins_monro(r + 1))[0]

    samples, _ = _time_epochs(epoch, state, repeats)
    return [{"solver": "RG VB", "epoch": f"1 sweep on a fresh H ({g0.n_edges} edges, sampling included)",
             "median_s": float(np.median(samples)), "min_s": float(min(samples)), "samples": samples,
             "I": train.n_rows, "J": train.n_cols, "K": K, "load_before": l0, "load_after": _load()}]


def bench_bpr(p1, repeats: int, dtype, only):
    from custom_inference import bpr
    from validation.evaluation.implicit_eval import BPR_DEFAULTS

    data = bpr.bpr_data(p1.train)
    rows = []
    for sampling, name in (("uniform", "BPR-uniform"), ("popularity", "BPR-popularity")):
        if name not in only:
            continue
        kw = BPR_DEFAULTS[sampling]
        l0 = _load()
        params = bpr.init(jax.random.PRNGKey(0), p1.train, kw["n_factors"], dtype=dtype)

        def epoch(p, r, kw=kw, sampling=sampling):
            return bpr.epoch(jax.random.PRNGKey(3000 + r), p, data, kw["learning_rate"], kw["reg"], sampling=sampling,
                             batch_size=kw["batch_size"], max_tries=kw["max_tries"])[0]

        samples, _ = _time_epochs(epoch, params, repeats)
        rows.append({"solver": name, "epoch": f"1 epoch = N = {p1.train.nnz} triples, minibatches of {kw['batch_size']}",
                     "median_s": float(np.median(samples)), "min_s": float(min(samples)), "samples": samples,
                     "I": p1.train.n_rows, "J": p1.train.n_cols, "K": kw["n_factors"], "load_before": l0,
                     "load_after": _load()})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ml100k", type=Path, default=_default_ml100k(), help="folder with u.data")
    ap.add_argument("--repeats", type=int, default=5, help="timed epochs per solver (median reported)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--out", type=Path, default=Path("/tmp/factorbayes-bench/implicit"))
    ap.add_argument("--only", nargs="+", choices=SOLVERS, default=list(SOLVERS), metavar="NAME",
                    help=f"a subset of {list(SOLVERS)}")
    ap.add_argument("--scan-block", type=int, default=256,
                    help="SIBM SVI: minibatches per jitted lax.scan call (fit_svi's scan_block)")
    args = ap.parse_args(argv)
    if args.scan_block < 1:
        ap.error("--scan-block must be >= 1")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if not (args.ml100k / "u.data").exists():
        ap.error(f"--ml100k {args.ml100k}: no u.data there")
    dtype = np.float32 if args.dtype == "float32" else np.float64
    from validation.data import datasets
    from validation.evaluation.implicit_eval import split_sibm

    df = datasets.load_movielens(args.ml100k)
    started = _dt.datetime.now().isoformat(timespec="seconds")
    with jax.enable_x64(dtype == np.float64):
        rows = bench_sibm(split_sibm(df, seed=0, dtype=dtype), args.repeats, dtype, args.only, args.scan_block)
        p1 = datasets.split_leave_one_out(df, seed=0)
        if "RG VB" in args.only:
            rows += bench_rg(p1, args.repeats, dtype)
        rows += bench_bpr(p1, args.repeats, dtype, args.only)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"started": started, "finished": _dt.datetime.now().isoformat(timespec="seconds"), "dtype": args.dtype,
            "repeats": args.repeats, "data": str(args.ml100k), "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count(), "machine": platform.platform()}
    (args.out / "implicit_bench.json").write_text(json.dumps({"rows": rows, "settings": meta}, indent=2))
    lines = [f"One-class solvers on MovieLens 100K, {args.dtype}, median of {args.repeats} epochs after a warm-up "
             f"({started}; {os.cpu_count()} CPUs)", "",
             "| solver | epoch | I x J | K | median s / epoch | min s | load avg (1 min) before / after |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['solver']} | {r['epoch']} | {r['I']} x {r['J']} | {r['K']} | {r['median_s']:.3f} | "
                     f"{r['min_s']:.3f} | {r['load_before']:.2f} / {r['load_after']:.2f} |")
    table = "\n".join(lines)
    (args.out / "implicit_bench.md").write_text(table + "\n")
    print(table)
    print(f"\nwritten: {args.out / 'implicit_bench.json'}, {args.out / 'implicit_bench.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
