"""Top-10 for 1, 100 and all users of an HPF CAVI fit of MovieLens-latest-small's size, old scoring path
vs `validation.frontdoor.scoring`, with peak extra memory, next to hpfrec's and implicit's top-N (issue 24).

    .venv/bin/python benchmarks/bench_scoring.py                  # 610 x 9,724, ~100k nonzeros, K 20, 200 draws
    .venv/bin/python benchmarks/bench_scoring.py --old-users 1 10 # the old path is slow: time it on few users
    .venv/bin/python benchmarks/bench_scoring.py --skip-peer --skip-old

Data: `synthetic_scale.netflix_like` at shape (610, 9,724) with 100,836 nonzero counts (the size of
MovieLens latest-small), topped up so that every user and every item has an entry (so the fitted
model keeps the full shape). Fit: `api.fit("hpf", ..., K=20, max_iter=--max-iter)` with the default
200 draws from q (untimed). Each timing is the best of --repeats calls (wall seconds); peak extra
memory is tracemalloc's peak during one call (numpy registers its buffers with tracemalloc; BLAS's
internal work space and the interpreter's are not seen).

Paths timed:
* old: `FittedModel.recommend` as it was before issue 24 (copied below: per-draw E[y] of every
  (user, item) pair through the adapter's mean with the einsum `_dot` that gathers (S, M, K) arrays).
* engine, means="draws": `FittedModel.recommend` (the default; mean over the 200 stored draws by GEMM),
  with the sd column and with ``sd=False``; "first call" is the call that builds what the model keeps.
* engine, means="q": `FittedModel.recommend(..., means="q")` (E_q[theta] . E_q[beta], draws for the sd only).
* engine, ``as_frame=False``: the same calls returning the columns as NumPy arrays
  (`scoring.Recommendations`) instead of a DataFrame, as the peers return arrays.
* peers (subprocess in `benchmarks/.venv-peer`, `scoring_peer.py`): hpfrec 0.2.14 `topN` per user,
  implicit ALS `recommend` (batch for 100 and all users), each on its own short fit of the same
  triplets with K 20.

Output: a Markdown table on stdout and ``scoring_bench.json`` under --out (default
/tmp/factorbayes-bench; nothing is written into the repository). --users/--items/--nnz shrink the
problem (the smoke test runs a tiny one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from synthetic_scale import netflix_like  # noqa: E402

PEER_PY = HERE / ".venv-peer" / "bin" / "python"


def counts(n_users: int, n_items: int, nnz: int, seed: int = 0):
    """COO counts (rows, cols, values) with ``nnz`` pairs plus one entry for every empty user / item."""
    rows, cols, vals = netflix_like(nnz, n_users=n_users, n_items=n_items, kind="counts", seed=seed)
    rng = np.random.default_rng(seed + 1)
    eu = np.setdiff1d(np.arange(n_users), rows)
    ei = np.setdiff1d(np.arange(n_items), cols)
    r = np.concatenate([rows, eu, rng.integers(0, n_users, ei.size)]).astype(np.int64)
    c = np.concatenate([cols, rng.integers(0, n_items, eu.size), ei]).astype(np.int64)
    v = np.concatenate([vals, np.ones(eu.size + ei.size, np.float32)]).astype(np.float64)
    key, first = np.unique(r * n_items + c, return_index=True)
    return r[first], c[first], v[first]


def old_recommend(m, users, N=10, batch_cells=20_000_000):
    """`FittedModel.recommend` before issue 24, with the einsum `_dot` of that time (for timing only)."""
    from validation.frontdoor import tables

    post = tables._posterior(m.idata)
    attrs = dict(m.idata.posterior.attrs)

    def draw_means(r, c):  # _hpf_mean with the old _dot: two (S, M, K) gathers
        return np.einsum("smk,smk->sm", post["theta"][:, r], post["beta"][:, c])

    rows = m._index(users, "user")
    J = len(m.item_ids)
    S = post["theta"].shape[0]
    per = max(1, int(batch_cells // max(S * J, 1)))
    out = []
    for start in range(0, len(rows), per):
        block = rows[start:start + per]
        draws = draw_means(np.repeat(block, J), np.tile(np.arange(J), block.size)).reshape(-1, block.size, J)
        mean, sd = draws.mean(axis=0), draws.std(axis=0, ddof=1)
        for b, u in enumerate(block):
            score = mean[b].copy()
            score[m.seen.indices[m.seen.indptr[u]:m.seen.indptr[u + 1]]] = -np.inf
            for rank, i in enumerate(np.argsort(-score, kind="stable")[:N], start=1):
                out.append((users[start + b], rank, m.item_ids[i], float(mean[b, i]), float(sd[b, i])))
    del attrs
    return out


def measure(fn, repeats):
    """(best wall seconds over ``repeats`` calls, tracemalloc peak bytes of one call)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=610)
    p.add_argument("--items", type=int, default=9_724)
    p.add_argument("--nnz", type=int, default=100_836)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--draws", type=int, default=None, help="draws from q (default: the adapter's, 200)")
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--old-users", type=int, nargs="*", default=[1, 10])
    p.add_argument("--skip-old", action="store_true")
    p.add_argument("--skip-peer", action="store_true")
    p.add_argument("--out", default="/tmp/factorbayes-bench")
    args = p.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import scipy.sparse as sp

    from validation.frontdoor import api, scoring

    r, c, v = counts(args.users, args.items, args.nnz)
    X = sp.csr_matrix((v, (r, c)), shape=(args.users, args.items))
    opts = {"max_iter": args.max_iter} | ({"n_draws": args.draws} if args.draws else {})
    t0 = time.perf_counter()
    m = api.fit("hpf", X, K=args.k, seed=0, progress=False, **opts)
    fit_s = time.perf_counter() - t0
    I, J = m.shape
    S = scoring._form(m)[0].n_draws
    print(f"fit: HPF CAVI {I} x {J}, {X.nnz} nonzeros, K {args.k}, {S} draws from q, {fit_s:.1f} s", flush=True)
    ids = list(m.user_ids)
    groups = {"1": ids[:1], "100": ids[:100], "all": ids}
    rows = []

    def add(path, n, secs, peak):
        rows.append({"path": path, "users": n, "seconds": secs, "ms_per_user": 1e3 * secs / n,
                     "tracemalloc_peak_MB": None if peak is None else peak / 2**20})
        print(f"{path:28s} {n:5d} users  {secs:8.4f} s  {1e3 * secs / n:8.3f} ms/user  "
              f"peak {'' if peak is None else f'{peak / 2**20:8.1f} MB'}", flush=True)

    for means in ("draws", "q"):
        t0 = time.perf_counter()
        m.recommend(ids[:1], 10, means=means)  # first call: builds what the model keeps (scoring.cache_bytes)
        add(f"first call means={means}", 1, time.perf_counter() - t0, None)
        for sd in (True, False):
            for g, us in groups.items():
                secs, peak = measure(lambda: m.recommend(us, 10, means=means, sd=sd), args.repeats)
                add(f"engine means={means}{'' if sd else ', sd=False'}", len(us), secs, peak)
        # the same without building a DataFrame: the columns as arrays (scoring.Recommendations)
        for g, us in groups.items():
            secs, peak = measure(lambda: m.recommend(us, 10, means=means, sd=False, as_frame=False), args.repeats)
            add(f"engine means={means}, sd=False, as_frame=False", len(us), secs, peak)
    cache_mb = scoring.cache_bytes(m) / 2**20
    print(f"kept on the model between calls (scoring.cache_bytes): {cache_mb:.2f} MB", flush=True)
    # the answers agree: same items for every user (draws vs the old path checked on the first users)
    if not args.skip_old:
        for n in args.old_users:
            us = ids[:n]
            secs, peak = measure(lambda: old_recommend(m, us), 1)
            add("old FittedModel.recommend", len(us), secs, peak)
            old = old_recommend(m, us)
            new = scoring.recommend(m, us, 10)
            assert [x[2] for x in old] == new["item"].tolist(), "old and new paths disagree"
            np.testing.assert_allclose([x[3] for x in old], new["score"], rtol=1e-10)
    peer = {}
    if not args.skip_peer:
        if PEER_PY.exists():
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "data.npz"
                np.savez(path, rows=r, cols=c, values=v, shape=np.array([args.users, args.items]))
                res = subprocess.run([str(PEER_PY), str(HERE / "scoring_peer.py"), str(path), "--k", str(args.k),
                                      "--repeats", str(args.repeats)], capture_output=True, text=True)
            if res.returncode == 0:
                peer = json.loads(res.stdout.strip().splitlines()[-1])
                for name in ("hpfrec", "implicit"):
                    info = peer.get(name, {})
                    if "error" in info:
                        print(f"{name}: {info['error']}")
                        continue
                    for g, us in groups.items():
                        add(f"{name} {info['version']}", len(us), info[g], None)
            else:
                print(f"peer run failed: {res.stderr[-2000:]}")
        else:
            print(f"no peer env at {PEER_PY} (see benchmarks/README.md, 'The peer environment'); peers skipped")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"shape": [I, J], "nnz": int(X.nnz), "K": args.k, "draws": S, "max_iter": args.max_iter,
            "fit_seconds": fit_s, "load_average": os.getloadavg(), "cache_MB": cache_mb, "peer": peer, "rows": rows}
    (out / "scoring_bench.json").write_text(json.dumps(meta, indent=1))
    print("\n| path | users | seconds | ms per user | tracemalloc peak (MB) |\n|---|---|---|---|---|")
    for row in rows:
        tm = "" if row["tracemalloc_peak_MB"] is None else f"{row['tracemalloc_peak_MB']:.0f}"
        print(f"| {row['path']} | {row['users']} | {row['seconds']:.4g} | {row['ms_per_user']:.3g} | {tm} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
