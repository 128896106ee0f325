"""PSM (seed 000, Algorithm 1) scale benchmark: seconds per sweep and peak RSS against |G|.

Synthetic event streams with Zipf-like popularities: users and items drawn with probabilities
proportional to rank^-0.8 (I = |G| / 10 users, J = 20000 items), events aggregated into distinct pairs
until |G| distinct pairs exist; counts are the aggregated event counts. K = 20, r = 1, float32.
Each size runs in its own subprocess (so ``ru_maxrss`` is that size's peak): init, one compiling
sweep, then ``--sweeps`` timed sweeps (median reported). The log-log slope of seconds per sweep
against |G| is fitted between consecutive sizes and over the sizes >= 1e6 (the issue's target:
<= 1.1). The paper's figure: 69 s (items) + 83 s (users) per sweep on 24 cores for 5.6e7 events.

Usage::

    nice -n 10 .venv/bin/python benchmarks/bench_psm.py --sizes 1e5 3e5 1e6 [--sweeps 3] [--out /tmp/bench_psm.json]

Prints a Markdown table and writes JSON (one record per size plus the slopes; each record holds the JAX
backend, device, core count and 1-minute load average). Set ``JAX_PLATFORMS=cpu`` to time the CPU
backend where a GPU is present.

Measured 2026-11-25 (16-core device machine, CPU backend, ``--sizes 1e5 1e6 1e7 --sweeps 2``): 0.29 /
1.56 / 14.3 s per sweep, peak RSS 0.93 / 1.33 / 5.4 GB; log-log slope 1e6 -> 1e7 = 0.96. On its H100:
0.019 s (1e6) and 0.16 s (1e7), slope 0.93. See benchmarks/README.md.
Source: project addition (benchmark of ``custom_inference.psm``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def zipf_pairs(n_pairs: int, n_users: int, n_items: int, seed: int = 0, exponent: float = 0.8):
    """Distinct (row, col, count) with Zipf-like user and item popularities; numpy arrays (G,)."""
    rng = np.random.default_rng(seed)
    pu = np.arange(1, n_users + 1, dtype=np.float64) ** -exponent
    pv = np.arange(1, n_items + 1, dtype=np.float64) ** -exponent
    pu, pv = pu / pu.sum(), pv / pv.sum()
    keys = np.empty(0, np.int64)
    counts = np.empty(0, np.int64)
    while keys.size < n_pairs:
        m = max(int(1.2 * (n_pairs - keys.size)), 1000)
        new = rng.choice(n_users, m, p=pu).astype(np.int64) * n_items + rng.choice(n_items, m, p=pv)
        allk = np.concatenate([np.repeat(keys, counts), new])
        keys, counts = np.unique(allk, return_counts=True)
    keep = np.sort(rng.choice(keys.size, n_pairs, replace=False))
    keys, counts = keys[keep], counts[keep]
    return (keys // n_items).astype(np.int32), (keys % n_items).astype(np.int32), counts.astype(np.float32)


def run_one(n_pairs: int, K: int, sweeps: int, chunk: int) -> dict:
    """One size, in this process: returns the record (seconds per sweep, peak RSS, sizes)."""
    import jax

    sys.path.insert(0, str(ROOT))
    from custom_inference import psm
    from custom_inference.data import Observations
    from ppl_models.psm import PSMHyper

    I, J = max(n_pairs // 10, 100), 20000
    t0 = time.perf_counter()
    r, c, n = zipf_pairs(n_pairs, I, J)
    obs = Observations(r, c, n, I, J)  # distinct, sorted, positive integer counts by construction
    gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = psm.init(0, obs, K, PSMHyper(), r=1.0, dtype=np.float32)
    d = psm._as_jax(obs, np.float32)
    jax.block_until_ready(state)
    t_init = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, info = psm.step(None, state, d, PSMHyper(), chunk=chunk)
    jax.block_until_ready(state)
    first = time.perf_counter() - t0
    times = []
    for _ in range(sweeps):
        t0 = time.perf_counter()
        state, info = psm.step(None, state, d, PSMHyper(), chunk=chunk)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return {"pairs": int(n_pairs), "events": float(n.sum()), "I": I, "J": J, "K": K, "chunk": chunk,
            "seconds_per_sweep": float(np.median(times)), "sweep_seconds": times,
            "first_sweep_seconds": first, "init_seconds": t_init, "generate_seconds": gen,
            "elbo": float(info.elbo), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "backend": jax.default_backend(), "device": str(jax.devices()[0]), "cpus": os.cpu_count(),
            "loadavg_1min": os.getloadavg()[0]}


def slope(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", type=float, default=[1e5, 3e5, 1e6])
    p.add_argument("--K", type=int, default=20)
    p.add_argument("--sweeps", type=int, default=3)
    p.add_argument("--chunk", type=int, default=16384)
    p.add_argument("--out", default="/tmp/bench_psm.json")
    p.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one is not None:
        print(json.dumps(run_one(int(a.one), a.K, a.sweeps, a.chunk)))
        return 0
    records = []
    for size in a.sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(size), "--K", str(a.K), "--sweeps", str(a.sweeps),
                              "--chunk", str(a.chunk)], capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            break
        rec = json.loads(out.stdout.strip().splitlines()[-1])
        records.append(rec)
        print(f"|G| = {rec['pairs']:.0e}: {rec['seconds_per_sweep']:.2f} s/sweep, peak RSS {rec['peak_rss_mb']:.0f} MB",
              flush=True)
    xs = [r["pairs"] for r in records]
    ys = [r["seconds_per_sweep"] for r in records]
    for i, r in enumerate(records):
        r["slope_from_previous"] = slope(xs[i - 1:i + 1], ys[i - 1:i + 1]) if i else None
    big = [(x, y) for x, y in zip(xs, ys) if x >= 1e6]
    summary = {"records": records, "slope_all": slope(xs, ys) if len(xs) > 1 else None,
               "slope_ge_1e6": slope(*zip(*big)) if len(big) > 1 else None}
    lines = ["| pairs |G| | events | I | J | backend | s / sweep | first sweep (s) | peak RSS (MB) | slope vs previous |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        sl = "" if r["slope_from_previous"] is None else f"{r['slope_from_previous']:.2f}"
        lines.append(f"| {r['pairs']:.0e} | {r['events']:.3g} | {r['I']} | {r['J']} | {r['backend']} | {r['seconds_per_sweep']:.2f} | "
                     f"{r['first_sweep_seconds']:.1f} | {r['peak_rss_mb']:.0f} | {sl} |")
    print("\n".join(lines))
    print(f"log-log slope (all sizes): {summary['slope_all']}; sizes >= 1e6: {summary['slope_ge_1e6']}")
    Path(a.out).write_text(json.dumps(summary, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
