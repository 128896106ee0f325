"""The front door's adapters: one declaration per model (see `validation.api.Adapter`).

Each adapter says what values its model takes, how its solver is called on an `Observations`
(I users x J items), and E[y_ui | parameters] as a function of posterior draws, vectorised over
the S draws (chains stacked) and M (row, col) pairs. Nothing here computes a posterior: the
solvers in `custom_inference` do. Source of each mean: the seed equation named beside it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .api import Adapter, _register

__all__: list[str] = []


def _dot(A, B, rows, cols):
    """sum_k A[s, rows, k] B[s, cols, k] -> (S, M), batched over draws without an (S, M, K) blowup."""
    return np.einsum("smk,smk->sm", A[:, rows], B[:, cols])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _idata(result):
    """InferenceData of a solver's return value (FitResult or InferenceData)."""
    return getattr(result, "idata", result)


def _stamp(idata, **attrs):
    idata.posterior.attrs.update(attrs)
    return idata


# -- counts: HPF (seed 001) ---------------------------------------------------------------


def _hpf_mean(post, rows, cols, attrs):
    """E[y_ui] = theta_u . beta_i (001_30a2018ec18c20b9.txt, the Poisson rate of the model)."""
    return _dot(post["theta"], post["beta"], rows, cols)


def _run_hpf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import hpf
    from ppl_models.hpf import HPFHyper

    return _idata(hpf.fit(key, obs, K, hyper or HPFHyper(), progress=progress, **opts))


def _run_hpf_gibbs(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import hpf_gibbs
    from ppl_models.hpf import HPFHyper

    return hpf_gibbs.sample(key, obs, K, hyper or HPFHyper(), progress=progress, **opts)


_register(Adapter("hpf", "count", _run_hpf, _hpf_mean, "draws from q (CAVI)", "001 (Poisson rate theta_u . beta_i)",
                  resumable=True, defaults={"max_iter": 100, "n_draws": 200}))
_register(Adapter("hpf-gibbs", "count", _run_hpf_gibbs, _hpf_mean, "posterior draws (Gibbs)",
                  "001 (Poisson rate theta_u . beta_i)", resumable=True,
                  defaults={"num_chains": 2, "num_warmup": 200, "num_samples": 200}))


# -- real ratings: SBMF, BPMF (seed 004 ch. 2-3) -------------------------------------------


def _sbmf_mean(post, rows, cols, attrs):
    """E[r_ij] = mu + alpha_i + beta_j + u_i . v_j (004_90693a0965f06816.txt eq. 3.1)."""
    return (post["mu"][:, None] + post["alpha"][:, rows] + post["beta"][:, cols]
            + _dot(post["U"], post["V"], rows, cols))


def _run_sbmf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import sbmf
    from ppl_models.sbmf import SBMFHyper

    keep = ("mu", "alpha", "beta", "U", "V", "tau")
    return sbmf.sample(key, obs, K, hyper or SBMFHyper(), progress=progress, keep=keep, **opts)


def _bpmf_mean(post, rows, cols, attrs):
    """E[r_ij] = offset + u_i . v_j (004 ch. 2, BPMF on ratings centred at their training mean)."""
    return float(attrs.get("front_door_offset", 0.0)) + _dot(post["U"], post["V"], rows, cols)


def _run_bpmf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import bpmf
    from custom_inference.data import Observations
    from ppl_models.bpmf import BPMFHyper

    offset = float(np.mean(np.asarray(obs.values, np.float64)))
    centered = Observations.from_coo(np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values) - offset,
                                     obs.shape, kind="real", drop_zeros=False)
    idata = bpmf.sample(key, centered, K, hyper or BPMFHyper(), progress=progress, keep=("U", "V"), **opts)
    return _stamp(idata, front_door_offset=offset)


_GIBBS = {"num_chains": 2, "num_warmup": 200, "num_samples": 200}
_register(Adapter("sbmf", "real", _run_sbmf, _sbmf_mean, "posterior draws (Gibbs)", "004 eq. 3.1",
                  resumable=True, defaults=_GIBBS))
_register(Adapter("bpmf", "real", _run_bpmf, _bpmf_mean, "posterior draws (Gibbs)", "004 ch. 2 (BPMF)",
                  resumable=True, defaults=_GIBBS))


# -- factorization machines on the ids design (seed 004 ch. 2, 4) ---------------------------


def ids_design(obs):
    """The FM design of plain MF with biases: one-hot user | one-hot item (004 eq. 2.17, fig. 2.1).

    obs : Observations (I, J), N entries. Returns FMDesign with N rows, D = I + J features in
    the groups ("user", "item"); y = obs.values. Source: 004_90693a0965f06816.txt eq. 2.17.
    """
    from custom_inference.fm_design import FMDesign

    I, J = obs.shape
    rows, cols = np.asarray(obs.rows), np.asarray(obs.cols)
    N = rows.size
    X = sp.coo_matrix((np.ones(2 * N), (np.repeat(np.arange(N), 2), np.column_stack([rows, I + cols]).ravel())),
                      shape=(N, I + J))
    group = np.concatenate([np.zeros(I, np.int64), np.ones(J, np.int64)])
    return FMDesign.from_scipy(X, np.asarray(obs.values, np.float64), group, group_names=("user", "item"))


def _fm_mean(post, rows, cols, attrs):
    """E[y] = w0 + w_u + w_(I+i) + v_u . v_(I+i) on the ids design (004 eq. 2.17)."""
    I = int(attrs["front_door_n_users"])
    return (post["w0"][:, None] + post["w"][:, rows] + post["w"][:, I + cols]
            + _dot(post["V"], post["V"], rows, I + cols))


def _fm_runner(solver: str):
    def run(key, obs, K, *, progress=True, hyper=None, **opts):
        from custom_inference import fm_mcmc, fm_sgd, vbfm
        from ppl_models.fm import FMFlatHyper, FMHierHyper

        design = ids_design(obs)
        if solver == "mcmc-fm":
            out = fm_mcmc.sample(key, design, K, hyper or FMHierHyper(), progress=progress, keep=("w0", "w", "V"), **opts)
        elif solver == "vbfm":
            out = vbfm.fit(key, design, K, hyper or FMFlatHyper(), progress=progress, **opts)
        elif solver == "ovbfm":
            out = vbfm.fit_svi(key, design, K, hyper or FMFlatHyper(), progress=progress, **opts)
        else:
            out = fm_sgd.fit(key, design, K, progress=progress, **opts)
        return _stamp(_idata(out), front_door_n_users=obs.shape[0])

    return run


_register(Adapter("mcmc-fm", "real", _fm_runner("mcmc-fm"), _fm_mean, "posterior draws (Gibbs)", "004 eq. 2.17",
                  resumable=True, defaults=_GIBBS))
_register(Adapter("vbfm", "real", _fm_runner("vbfm"), _fm_mean, "draws from q (CAVI)", "004 eq. 2.17",
                  resumable=True))
_register(Adapter("ovbfm", "real", _fm_runner("ovbfm"), _fm_mean, "draws from q (stochastic VI)", "004 eq. 2.17"))
_register(Adapter("sgd-fm", "real", _fm_runner("sgd-fm"), _fm_mean, "none (point estimate, SGD)", "004 eq. 2.17"))
