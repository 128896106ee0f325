"""Write tests/data/sampler_draws_v0.npz: draws of the four Gibbs samplers' *old* drivers.

Run once, before the samplers moved onto `custom_inference.mcmc_driver` (commit 8571c06):

    .venv/bin/python tests/data/make_sampler_draws_v0.py

It calls the former signatures (``hpf_gibbs.sample(data, hyper, n_components, seed=...)``,
``fm_mcmc.sample(..., test=...)``), so it only runs against that commit's ``custom_inference``
(e.g. ``git archive 8571c06 custom_inference ppl_models | tar -x -C /tmp/v0`` and put /tmp/v0
first on ``sys.path``); the test imports only its problem builders.

Each sampler runs on a tiny problem (2 chains, num_warmup=3, num_samples=4, thin=2, float64,
gauge moves on for SBMF and BPMF); the file stores the problem's data (so the test rebuilds
exactly the same inputs) and every kept draw, ``lp`` and sampler statistic, under
``<model>/<name>`` keys. `tests/custom_inference/test_mcmc_driver.py` compares the new
driver's chains with them bit for bit. Project addition.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import scipy.sparse as sp

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from custom_inference import arviz_io  # noqa: E402
from custom_inference.data import Observations  # noqa: E402
from custom_inference.fm_design import FMDesign  # noqa: E402

OUT = Path(__file__).with_name("sampler_draws_v0.npz")
SETTINGS = dict(num_chains=2, num_warmup=3, num_samples=4, thin=2)
SEED = 3


def problems():
    """The four tiny problems as plain numpy arrays (stored in the npz)."""
    from ppl_models import bpmf as ppl_bpmf
    from ppl_models import fm as ppl_fm
    from ppl_models import hpf as ppl_hpf
    from ppl_models import sbmf as ppl_sbmf

    out = {}
    _, y = ppl_hpf.simulate(jax.random.PRNGKey(0), 6, 5, 2, ppl_hpf.HPFHyper(a=0.5, a_prime=2.0, b_prime=1.0, c=0.5,
                                                                              c_prime=2.0, d_prime=1.0))
    y = np.asarray(y)
    r, c = np.nonzero(y)
    out["hpf"] = dict(rows=r, cols=c, values=y[r, c].astype(np.float64), shape=np.array(y.shape))
    _, r, c, v = ppl_sbmf.simulate(0, 8, 6, 2, ppl_sbmf.SBMFHyper(), n_obs=30)
    out["sbmf"] = dict(rows=np.asarray(r), cols=np.asarray(c), values=np.asarray(v, np.float64), shape=np.array([8, 6]),
                       pred_rows=np.array([0, 3, 7]), pred_cols=np.array([0, 5, 2]))
    bh = ppl_bpmf.BPMFHyper(alpha=2.0, mu0=0.0, beta0=2.0, nu0=5.0, W0=0.2)
    _, r, c, v = ppl_bpmf.simulate(jax.random.PRNGKey(0), 8, 6, 2, bh, n_obs=25)
    out["bpmf"] = dict(rows=np.asarray(r), cols=np.asarray(c), values=np.asarray(v, np.float64), shape=np.array([8, 6]))
    rng = np.random.default_rng(0)
    I, J, N = 10, 8, 40
    u, i, ar = rng.integers(0, I, N), rng.integers(0, J, N), np.arange(N)
    X = sp.hstack([sp.csr_matrix((np.ones(N), (ar, u)), shape=(N, I)),
                   sp.csr_matrix((np.ones(N), (ar, i)), shape=(N, J))]).tocoo()
    group = np.r_[[0] * I, [1] * J]
    fh = ppl_fm.FMHierHyper(alpha_0p=5.0, beta_0p=5.0, alpha_0=5.0, beta_0=1.0)
    _, yy = ppl_fm.simulate(jax.random.PRNGKey(0), X.row, X.col, X.data, N, group, 2, fh)
    out["fm"] = dict(rows=X.row.astype(np.int64), cols=X.col.astype(np.int64), values=X.data, y=np.asarray(yy),
                     group=group, shape=np.array([N, I + J]))
    return out


def hyper(model):
    from ppl_models import bpmf as ppl_bpmf
    from ppl_models import fm as ppl_fm
    from ppl_models import hpf as ppl_hpf
    from ppl_models import sbmf as ppl_sbmf

    return {"hpf": ppl_hpf.HPFHyper(a=0.5, a_prime=2.0, b_prime=1.0, c=0.5, c_prime=2.0, d_prime=1.0),
            "sbmf": ppl_sbmf.SBMFHyper(),
            "bpmf": ppl_bpmf.BPMFHyper(alpha=2.0, mu0=0.0, beta0=2.0, nu0=5.0, W0=0.2),
            "fm": ppl_fm.FMHierHyper(alpha_0p=5.0, beta_0p=5.0, alpha_0=5.0, beta_0=1.0)}[model]


def build(model, p):
    """The sampler's data object from the stored arrays."""
    if model == "hpf":
        return Observations.from_coo(p["rows"], p["cols"], p["values"], tuple(p["shape"]))
    if model in ("sbmf", "bpmf"):
        return Observations.from_coo(p["rows"], p["cols"], p["values"], tuple(p["shape"]), kind="real",
                                     dtype=np.float64, drop_zeros=False)
    X = sp.coo_matrix((p["values"], (p["rows"], p["cols"])), shape=tuple(p["shape"]))
    return FMDesign.from_scipy(X, p["y"], p["group"])


def main():
    from custom_inference import bpmf, fm_mcmc, hpf_gibbs, sbmf

    probs = problems()
    arrays = {}
    runs = {
        "hpf": lambda d: hpf_gibbs.sample(d, hyper("hpf"), 2, seed=SEED, progress=False, **SETTINGS),
        "sbmf": lambda d: sbmf.sample(SEED, d, 2, hyper("sbmf"), progress=False, gauge_rounds=5,
                                      predict_at=(probs["sbmf"]["pred_rows"], probs["sbmf"]["pred_cols"]), **SETTINGS),
        "bpmf": lambda d: bpmf.sample(d, hyper("bpmf"), 2, seed=SEED, progress=False, gauge_rounds=5, **SETTINGS),
        "fm": lambda d: fm_mcmc.sample(jax.random.PRNGKey(SEED), d, 2, hyper("fm"), progress=False, test=d, **SETTINGS),
    }
    for model, p in probs.items():
        for name, value in p.items():
            arrays[f"{model}/data/{name}"] = np.asarray(value)
        idata = runs[model](build(model, p))
        for group in ("posterior", "sample_stats", "predictions"):
            if group in idata.groups():
                for name, value in arviz_io.group_arrays(idata, group).items():
                    arrays[f"{model}/{group}/{name}"] = value
    np.savez_compressed(OUT, **arrays)
    print(OUT, OUT.stat().st_size, "bytes,", len(arrays), "arrays")


if __name__ == "__main__":
    main()
