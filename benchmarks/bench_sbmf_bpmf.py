"""Seconds per Gibbs sweep: SBMF (thesis ch. 3) versus BPMF, on MovieLens 100K, K = 10..100.

Run by hand (not part of the test suite):

    .venv/bin/python benchmarks/bench_sbmf_bpmf.py [--ml100k DIR] [--ks 10 20 50 100]
        [--sweeps 10] [--dtype float32] [--out /tmp/factorbayes-bench] [--skip-sbmf]
        [--gauge-rounds 0]

What is timed: one chain; for each method the module's own jitted ``step`` (one full sweep:
every block drawn once; with ``--gauge-rounds`` scale-gauge moves per sweep, default 0 = the
thesis's samplers, whose costs Table 3.1 states) under ``lax.scan`` for ``--sweeps`` sweeps in one compiled call, after
a compiling warm-up call (the data are an argument, not compile-time constants); the per-sweep ``Info`` is discarded, so XLA drops the log joint that
both steps compute, and only the sampling work is timed. Median of ``--repeats`` timed calls.

Data: ``u.data`` of MovieLens 100K (943 x 1682, 100,000 ratings) via
`validation.data.datasets.load_movielens`; SBMF gets the raw 1-5 stars (it has a global mean and
biases); BPMF, which has neither, gets the ratings minus their mean (as in Salakhutdinov &
Mnih's code). The timing does not depend on the values.

Thesis claim (seed 004, Table 3.1): SBMF O(|Omega| K), BPMF O(|Omega| K^2 + (I + J) K^3) per
sweep. The script fits log(seconds) = a + b log(K) over the K grid for each method and reports
the slope b next to the table.

Output (in ``--out``; nothing is written into the repository): ``sbmf_bpmf_bench.csv``,
``sbmf_bpmf_bench.json`` (rows, slopes, settings, machine), ``sbmf_bpmf_bench.png``
(log-log plot of seconds per sweep against K).
"""

from __future__ import annotations

import argparse
import json
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


def _timed(run, state, key, repeats):
    jax.block_until_ready(run(state, key))  # compile + first run
    times = []
    for r in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(state, jax.random.fold_in(key, r + 1)))
        times.append(time.perf_counter() - start)
    return times


def bench_bpmf(obs, k, sweeps, repeats, dtype, gauge_rounds):
    from custom_inference import bpmf
    from ppl_models.bpmf import BPMFHyper

    hyper = BPMFHyper()
    values = np.asarray(obs.values, np.float64)
    o = obs.__class__(jnp.asarray(obs.rows), jnp.asarray(obs.cols), jnp.asarray((values - values.mean()).astype(dtype)),
                      obs.n_rows, obs.n_cols)
    chunk = bpmf.default_chunk_size(k)
    state = bpmf.init(jax.random.PRNGKey(0), o, k, hyper, dtype=dtype)

    @jax.jit
    def run(s, key, o):
        return jax.lax.scan(lambda c, kk: (bpmf.step(kk, c, o, hyper, chunk, gauge_rounds)[0], None), s, jax.random.split(key, sweeps))[0]

    return _timed(lambda s, kk: run(s, kk, o), state, jax.random.PRNGKey(1), repeats), {"chunk_size": chunk}


def bench_sbmf(obs, k, sweeps, repeats, dtype, gauge_rounds):
    from custom_inference import sbmf
    from ppl_models.sbmf import SBMFHyper

    hyper = SBMFHyper()
    o = obs.__class__(jnp.asarray(obs.rows), jnp.asarray(obs.cols), jnp.asarray(np.asarray(obs.values).astype(dtype)),
                      obs.n_rows, obs.n_cols)
    state = sbmf.init(jax.random.PRNGKey(0), o, k, hyper, dtype=dtype)

    @jax.jit
    def run(s, key, o):
        return jax.lax.scan(lambda c, kk: (sbmf.step(kk, c, o, hyper, gauge_rounds)[0], None), s, jax.random.split(key, sweeps))[0]

    return _timed(lambda s, kk: run(s, kk, o), state, jax.random.PRNGKey(1), repeats), {}


def main() -> None:
    default = Path(os.environ.get("FACTORBAYES_DATA_DIR", REPO.parent / "shared" / "data")) / "ml-100k"
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ml100k", type=Path, default=default)
    p.add_argument("--ks", type=int, nargs="+", default=[10, 20, 50, 100])
    p.add_argument("--sweeps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--out", type=Path, default=Path("/tmp/factorbayes-bench"))
    p.add_argument("--skip-sbmf", action="store_true", help="time BPMF only")
    p.add_argument("--gauge-rounds", type=int, default=0, help="scale-gauge rounds per sweep (0: the thesis's samplers)")
    args = p.parse_args()

    from validation.data import datasets

    df = datasets.load_movielens(args.ml100k)
    obs = datasets.to_observations(datasets.index_ratings(df), kind="real")
    dtype = np.dtype(args.dtype)
    methods = {"bpmf": bench_bpmf} if args.skip_sbmf else {"sbmf": bench_sbmf, "bpmf": bench_bpmf}
    rows = []
    with jax.enable_x64(dtype == np.float64):
        for k in args.ks:
            for name, fn in methods.items():
                times, extra = fn(obs, k, args.sweeps, args.repeats, dtype, args.gauge_rounds)
                sec = float(np.median(times)) / args.sweeps
                rows.append({"method": name, "K": k, "seconds_per_sweep": sec,
                             "min_seconds_per_sweep": float(min(times)) / args.sweeps,
                             "samples": [t / args.sweeps for t in times], **extra})
                print(f"{name:5s} K={k:4d}  {sec * 1e3:10.2f} ms / sweep", flush=True)
    slopes = {}
    for name in methods:
        ks = np.array([r["K"] for r in rows if r["method"] == name], float)
        sec = np.array([r["seconds_per_sweep"] for r in rows if r["method"] == name])
        if ks.size >= 2:
            slopes[name] = float(np.polyfit(np.log(ks), np.log(sec), 1)[0])
    args.out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    table = pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in rows])
    if len(methods) == 2:
        wide = table.pivot(index="K", columns="method", values="seconds_per_sweep")
        wide["bpmf_over_sbmf"] = wide["bpmf"] / wide["sbmf"]
        print("\n" + wide.to_string())
    table.to_csv(args.out / "sbmf_bpmf_bench.csv", index=False)
    meta = {"dataset": f"MovieLens 100K ({obs.n_rows} x {obs.n_cols}, {obs.nnz} ratings)", "dtype": dtype.name,
            "sweeps_per_call": args.sweeps, "repeats": args.repeats, "gauge_rounds": args.gauge_rounds,
            "slopes_loglog": slopes,
            "jax": jax.__version__, "device": str(jax.devices()[0]), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "loadavg": os.getloadavg(), "rows": rows}
    (args.out / "sbmf_bpmf_bench.json").write_text(json.dumps(meta, indent=2))
    print(f"\nlog-log slopes of seconds per sweep vs K: {slopes}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for name in methods:
        sub = table[table.method == name]
        ax.loglog(sub.K, sub.seconds_per_sweep, "o-", label=f"{name.upper()} (slope {slopes.get(name, float('nan')):.2f})")
    ax.set_xlabel("K")
    ax.set_ylabel("seconds per Gibbs sweep")
    ax.set_title(f"MovieLens 100K, {dtype.name}, {jax.devices()[0].platform}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "sbmf_bpmf_bench.png", dpi=120)
    print(f"wrote {args.out}/sbmf_bpmf_bench.{{csv,json,png}}")


if __name__ == "__main__":
    main()
