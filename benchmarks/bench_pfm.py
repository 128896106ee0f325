"""Seconds per Gibbs sweep of NPFM / PPFM against K and against the number of nonzeros, next to
HPF Gibbs and MCMC-FM on the same data (MovieLens 100K ratings as counts, ids only).

Run by hand (not part of the test suite):

    .venv/bin/python benchmarks/bench_pfm.py [--ml100k DIR] [--ks 10 25 50] [--fractions 0.25 0.5 1]
                                             [--sweeps 10] [--dtype float32] [--scale-rounds N]

Each cell: one chain, two driver blocks of ``--sweeps`` sweeps each; the first block compiles
and is left out, so ``seconds_per_sweep`` (`custom_inference.mcmc_driver`) is the second block's
wall time per sweep, compilation excluded (the script checks ``per_sweep_includes_compile``; up to
commit d8eb4bf it ran one block of ``--sweeps`` for NPFM / PPFM, so their numbers in the README
before the issue-13 profile included the compilation). ``--methods`` picks a subset. NPFM / PPFM
treat every user-item cell as a training row (zeros="all", cached sums); HPF Gibbs the same
(its zeros are implicit); MCMC-FM sees only the rated entries (Gaussian FM). ``--fractions``
keep that fraction of the users (all their ratings). ``--scale-rounds`` sets NPFM / PPFM's
per-factor scale-move steps per sweep (`custom_inference.pfm_scale`; default: the sampler's
default; 0: the sweep alone, as before the move). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def _time(fn, sweeps):
    idata = fn(2 * sweeps, sweeps)
    attrs = idata.posterior.attrs
    if int(attrs["per_sweep_includes_compile"]):
        raise RuntimeError("every block compiled: seconds_per_sweep would include compilation")
    return float(attrs["seconds_per_sweep"])


METHODS = ("NPFM", "PPFM", "HPF Gibbs", "MCMC-FM")


def main() -> None:
    repo = Path(__file__).resolve().parents[1]
    default = Path(os.environ.get("FACTORBAYES_DATA_DIR", repo.parent / "shared" / "data")) / "ml-100k"
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ml100k", type=Path, default=default)
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 25, 50])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--scale-rounds", type=int, default=None)
    args = parser.parse_args()

    from custom_inference import fm_mcmc, hpf_gibbs, pfm
    from custom_inference.data import Observations
    from custom_inference.fm_design import FMDesign
    from ppl_models.fm import FMHierHyper
    from ppl_models.hpf import HPFHyper
    from ppl_models.pfm import PFMHyper
    from validation.data import datasets

    dtype = np.dtype(args.dtype)
    obs = datasets.to_observations(datasets.index_ratings(datasets.load_movielens(args.ml100k)))
    Y = sp.csr_matrix((np.asarray(obs.values), (np.asarray(obs.rows), np.asarray(obs.cols))),
                      shape=(obs.n_rows, obs.n_cols))
    rng = np.random.default_rng(0)
    rows = []
    for frac in args.fractions:
        users = np.sort(rng.permutation(Y.shape[0])[: max(1, int(round(frac * Y.shape[0])))])
        Ys = Y[users]
        Ys = Ys[:, np.flatnonzero(np.asarray(Ys.sum(0)).ravel() > 0)]
        I, J = Ys.shape
        c = Ys.tocoo()
        data = pfm.PFMData.from_matrix(Ys, dtype=dtype)
        o = Observations.from_coo(c.row, c.col, c.data.astype(float), (I, J))
        X = sp.hstack([sp.csr_matrix((np.ones(c.nnz), (np.arange(c.nnz), c.row)), shape=(c.nnz, I)),
                       sp.csr_matrix((np.ones(c.nnz), (np.arange(c.nnz), c.col)), shape=(c.nnz, J))]).tocsr()
        design = FMDesign.from_scipy(X, c.data.astype(float), np.r_[np.zeros(I, int), np.ones(J, int)], dtype=dtype)
        for K in args.ks:
            common = dict(num_chains=1, num_warmup=0, thin=1, progress=False, dtype=dtype)
            sr = dict(scale_rounds=args.scale_rounds)
            runs = {
                "NPFM": lambda n, b: pfm.sample(0, data, K, PFMHyper(), variant="npfm", num_samples=n, keep=("w0",),
                                                block=b, **sr, **common),
                "PPFM": lambda n, b: pfm.sample(0, data, K, PFMHyper(), variant="ppfm", num_samples=n, keep=("w0",),
                                                block=b, **sr, **common),
                "HPF Gibbs": lambda n, b: hpf_gibbs.sample(0, o, K, HPFHyper(), num_samples=n, keep=("xi",), block=b,
                                                           **common),
                "MCMC-FM": lambda n, b: fm_mcmc.sample(0, design, K, FMHierHyper(), num_samples=n, keep=("w0",),
                                                       block=b, **common),
            }
            res = {m: _time(runs[m], args.sweeps) for m in args.methods}
            rows.append((frac, I, J, c.nnz, int(c.data.sum()), K, res))
            print(rows[-1], flush=True)
    print(f"\nMovieLens 100K (ratings as counts), {dtype}, 1 chain, {platform.processor() or platform.machine()}, "
          f"seconds per sweep (compilation excluded), scale_rounds {args.scale_rounds}\n")
    print("| users | I x J | nnz | total count T | K | " + " | ".join(args.methods) + " |")
    print("|---|---|---|---|---|" + "---|" * len(args.methods))
    for frac, I, J, nnz, T, K, res in rows:
        print(f"| {frac:.0%} | {I} x {J} | {nnz} | {T} | {K} | " + " | ".join(f"{res[m]:.4f}" for m in args.methods)
              + " |")
    print(f"\n1-minute load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
