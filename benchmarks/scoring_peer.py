"""Time the peers' top-N scoring on one count matrix and print the result as JSON.

Runs inside the peer virtual env (``benchmarks/.venv-peer``, with ``hpfrec==0.2.14`` and
``implicit``), never in the project's env; `bench_scoring.py` calls it in a subprocess. Reads an
``.npz`` with ``rows``, ``cols``, ``values`` (0-based COO triplets) and ``shape`` (I, J).

For each peer: a short fit (untimed; its cost is not what is measured), then the wall time of
top-10 with the user's seen items excluded for 1 user, 100 users and all users:

* hpfrec: ``HPF(k=K, maxiter=10, ...).fit(coo)``, then ``topN(user, n=10, exclude_seen=True)`` once
  per user (hpfrec has no batch top-N); its score is E_q[theta_u] . E_q[beta_i] (q's means).
* implicit: ``AlternatingLeastSquares(factors=K, iterations=5).fit(csr)``, then ``recommend(u,
  csr[u], N=10)`` for the single user and the batch call ``recommend(users, csr[users], N=10)``
  for 100 and all users.

Usage::

    benchmarks/.venv-peer/bin/python benchmarks/scoring_peer.py data.npz --k 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings


def _best(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ncores", type=int, default=2)
    args = p.parse_args(argv)

    import numpy as np
    import scipy.sparse as sp

    d = np.load(args.data)
    shape = tuple(int(x) for x in d["shape"])
    coo = sp.coo_matrix((d["values"].astype(np.float64), (d["rows"], d["cols"])), shape=shape)
    I = shape[0]
    some = np.arange(min(100, I))
    out = {"python": sys.version.split()[0]}

    try:
        import hpfrec

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = hpfrec.HPF(k=args.k, maxiter=10, stop_crit="maxiter", check_every=None, verbose=False,
                           random_seed=0, ncores=args.ncores, reindex=False)
            m.fit(coo.copy())
        out["hpfrec"] = {
            "version": hpfrec.__version__ if hasattr(hpfrec, "__version__") else "0.2.14",
            "1": _best(lambda: m.topN(0, n=10, exclude_seen=True), args.repeats),
            "100": _best(lambda: [m.topN(int(u), n=10, exclude_seen=True) for u in some], args.repeats),
            "all": _best(lambda: [m.topN(int(u), n=10, exclude_seen=True) for u in range(I)], 1),
        }
    except Exception as err:  # a missing or broken peer is reported, not fatal
        out["hpfrec"] = {"error": f"{type(err).__name__}: {err}"}

    try:
        import implicit
        from implicit.cpu.als import AlternatingLeastSquares

        csr = coo.tocsr()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            als = AlternatingLeastSquares(factors=args.k, iterations=5, random_state=0)
            als.fit(csr, show_progress=False)
        everyone = np.arange(I)
        out["implicit"] = {
            "version": implicit.__version__,
            "1": _best(lambda: als.recommend(0, csr[0], N=10), args.repeats),
            "100": _best(lambda: als.recommend(some, csr[some], N=10), args.repeats),
            "all": _best(lambda: als.recommend(everyone, csr, N=10), args.repeats),
        }
    except Exception as err:
        out["implicit"] = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
