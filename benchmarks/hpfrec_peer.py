"""Time hpfrec's full-batch CAVI on one count matrix and print the result as JSON.

Runs inside the peer virtual env (``benchmarks/.venv-peer``, which holds
``hpfrec==0.2.14``), never in the project's env; `bench_hpf.py` calls it in a
subprocess. Reads an ``.npz`` with ``rows``, ``cols``, ``values`` (0-based COO
triplets, no duplicates, no zeros) and ``shape`` (I, J).

Timing: wall time of ``HPF.fit`` with ``stop_crit='maxiter'``, ``maxiter=M`` and
``verbose=False`` (which also switches off every likelihood evaluation),
divided by M. Nothing is subtracted: the time includes hpfrec's data checks and
casts, its parameter initialisation, the (N, K) phi allocation and the post-fit
bookkeeping. A second fit with ``maxiter=1`` is run first, which gives a
differential estimate ``(t_M - t_1) / (M - 1)`` that excludes that fixed cost.

Usage::

    benchmarks/.venv-peer/bin/python benchmarks/hpfrec_peer.py data.npz --k 20 --maxiter 10 --ncores 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings


def _fit_once(hpfrec, sp, np, data, args, maxiter):
    model = hpfrec.HPF(
        k=args.k,
        a=args.a,
        a_prime=args.a_prime,
        b_prime=args.b_prime,
        c=args.c,
        c_prime=args.c_prime,
        d_prime=args.d_prime,
        ncores=args.ncores,
        stop_crit="maxiter",
        maxiter=maxiter,
        check_every=None,  # no likelihood checks (verbose=False with 'maxiter' sets this too)
        use_float=not args.double,
        verbose=False,
        random_seed=args.seed,
    )
    # A COO matrix keeps the I x J shape (no reindexing, empty rows/columns stay).
    # fit may modify its input in place, so each fit gets a fresh one.
    coo = sp.coo_matrix((data["values"].copy(), (data["rows"].copy(), data["cols"].copy())), shape=data["shape"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu0 = time.process_time()
        start = time.perf_counter()
        model.fit(coo)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu0
    finite = bool(np.all(np.isfinite(model.Theta)) and np.all(np.isfinite(model.Beta)))
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "poisson_llk": _poisson_llk(np, model.Theta, model.Beta, data),
        # fit_hpf returns the last loop index, so niter + 1 sweeps were run
        "sweeps_run": int(model.niter) + 1,
        "finite": finite,
        "theta_dtype": str(model.Theta.dtype),
        "warnings": [str(w.message) for w in caught],
    }


def _poisson_llk(np, theta, beta, data):
    """Full Poisson log-likelihood of the matrix (zeros included) at the point estimates
    Theta, Beta that hpfrec returns; computed after the timed fit, as a sanity check."""
    from scipy.special import gammaln

    theta = np.asarray(theta, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    y = data["values"]
    rate = np.einsum("nk,nk->n", theta[data["rows"]], beta[data["cols"]])
    return float(np.sum(y * np.log(rate) - gammaln(y + 1.0)) - theta.sum(axis=0) @ beta.sum(axis=0))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("npz", help="file with rows, cols, values, shape")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--maxiter", type=int, default=10, help="M, sweeps of the timed fit")
    parser.add_argument("--ncores", type=int, default=2)
    parser.add_argument("--double", action="store_true", help="use_float=False (C double) instead of float32")
    parser.add_argument("--seed", type=int, default=1)
    for name, default in (("a", 0.3), ("a_prime", 0.3), ("b_prime", 1.0), ("c", 0.3), ("c_prime", 0.3), ("d_prime", 1.0)):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float, default=default)
    args = parser.parse_args(argv)
    if args.maxiter < 2:
        parser.error("--maxiter must be >= 2")

    import hpfrec
    import numpy as np
    import scipy.sparse as sp
    from hpfrec import _check_openmp

    with np.load(args.npz) as f:
        data = {
            "rows": f["rows"].astype(np.int64),
            "cols": f["cols"].astype(np.int64),
            "values": f["values"].astype(np.float64),
            "shape": tuple(int(s) for s in f["shape"]),
        }

    one = _fit_once(hpfrec, sp, np, data, args, 1)
    full = _fit_once(hpfrec, sp, np, data, args, args.maxiter)
    out = {
        "hpfrec_version": getattr(hpfrec, "__version__", None) or _dist_version("hpfrec"),
        "numpy_version": np.__version__,
        "openmp": bool(_check_openmp.get()),
        "precision": "float64" if args.double else "float32",
        "k": args.k,
        "ncores": args.ncores,
        "nnz": int(data["values"].size),
        "shape": list(data["shape"]),
        "maxiter": args.maxiter,
        "fit_seconds": full["seconds"],
        "fit_seconds_maxiter1": one["seconds"],
        "seconds_per_iter": full["seconds"] / args.maxiter,
        "seconds_per_iter_differential": (full["seconds"] - one["seconds"]) / (args.maxiter - 1),
        "sweeps_run": full["sweeps_run"],
        "finite": full["finite"] and one["finite"],
        "poisson_llk_maxiter1": one["poisson_llk"],
        "poisson_llk": full["poisson_llk"],
        "cpu_seconds_per_iter": full["cpu_seconds"] / args.maxiter,
        "theta_dtype": full["theta_dtype"],
        "warnings": sorted(set(full["warnings"] + one["warnings"])),
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _dist_version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main())
