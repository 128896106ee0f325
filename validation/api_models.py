"""The front door's adapters: one declaration per model (see `validation.api.Adapter`).

Each adapter says what values its model takes, how its solver is called on an `Observations`
(I users x J items), and E[y_ui | parameters] as a function of posterior draws, vectorised over
the S draws (chains stacked) and M (row, col) pairs. Nothing here computes a posterior: the
solvers in `custom_inference` do. Source of each mean: the seed equation named beside it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from . import api_fold_in as fold
from .api import Adapter, _register
from .scoring import LinearScore

__all__: list[str] = []


#: Bytes of the gathered factor blocks `_dot` holds at once (its (S, M) result not counted).
DOT_BLOCK_BYTES = 32 * 2**20


def _dot(A, B, rows, cols, weight=None, *, block_bytes: int = DOT_BLOCK_BYTES):
    """sum_k A[s, rows_m, k] B[s, cols_m, k] (times weight[s, k] when given) for every draw s and pair m.

    A : (S, I, K) and B : (S, J, K) arrays (any real dtype; views such as ``V[:, I:]`` are fine);
    rows, cols : (M,) integer indices into axis 1 of A and B; weight : optional (S, K).
    Returns an (S, M) float64 array. The gathered factors are taken in blocks of draws and pairs
    whose three (s, m, K) float64 temporaries stay under ``block_bytes`` (at least one draw and one
    pair per block), so memory beyond the (S, M) result is bounded whatever M is: no (S, M, K)
    array is built (the old one-line einsum built two, 3.1 GB for one user of a 9,724-item HPF fit).
    Raises IndexError for an index out of range (numpy's). Source: project addition (issue 24).
    """
    rows, cols = np.asarray(rows), np.asarray(cols)
    S, K, M = A.shape[0], A.shape[-1], rows.shape[0]
    out = np.empty((S, M), dtype=np.float64)
    per_pair = 3 * 8 * max(K, 1)
    mb = int(min(max(M, 1), max(1, block_bytes // per_pair)))
    sb = int(min(S, max(1, block_bytes // (per_pair * mb))))
    for m0 in range(0, M, mb):
        r, c = rows[m0:m0 + mb], cols[m0:m0 + mb]
        for s0 in range(0, S, sb):
            a = A[s0:s0 + sb, r].astype(np.float64)  # (sb, mb, K), a fresh copy
            if weight is not None:
                a *= np.asarray(weight[s0:s0 + sb], dtype=np.float64)[:, None, :]
            out[s0:s0 + sb, m0:m0 + mb] = np.einsum("smk,smk->sm", a, B[s0:s0 + sb, c])
    return out


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
                  fold_in=fold.hpf, resumable=True, defaults={"max_iter": 100, "n_draws": 200}, iterations="max_iter", draws="n_draws"))
_register(Adapter("hpf-gibbs", "count", _run_hpf_gibbs, _hpf_mean, "posterior draws (Gibbs)",
                  "001 (Poisson rate theta_u . beta_i)", resumable=True, fold_in=fold.hpf_gibbs,
                  defaults={"num_chains": 2, "num_warmup": 200, "num_samples": 200}, iterations="num_samples"))


# -- real ratings: SBMF, BPMF (seed 004 ch. 2-3) -------------------------------------------


def _sbmf_mean(post, rows, cols, attrs):
    """E[r_ij] = mu + alpha_i + beta_j + u_i . v_j (004_90693a0965f06816.txt eq. 3.1)."""
    return (post["mu"][:, None] + post["alpha"][:, rows] + post["beta"][:, cols]
            + _dot(post["U"], post["V"], rows, cols))


def _run_sbmf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import sbmf
    from ppl_models.sbmf import SBMFHyper

    keep = ("mu", "alpha", "beta", "U", "V", "tau", "mu_alpha", "sigma_alpha", "mu_u", "sigma_u")  # the last 4: fold-in
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
    idata = bpmf.sample(key, centered, K, hyper or BPMFHyper(), progress=progress, keep=("U", "V", "mu_U", "Lambda_U"), **opts)
    return _stamp(idata, front_door_offset=offset)


_GIBBS = {"num_chains": 2, "num_warmup": 200, "num_samples": 200}
_register(Adapter("sbmf", "real", _run_sbmf, _sbmf_mean, "posterior draws (Gibbs)", "004 eq. 3.1",
                  resumable=True, fold_in=fold.sbmf, defaults=_GIBBS, iterations="num_samples"))
_register(Adapter("bpmf", "real", _run_bpmf, _bpmf_mean, "posterior draws (Gibbs)", "004 ch. 2 (BPMF)",
                  resumable=True, fold_in=fold.bpmf, defaults=_GIBBS, iterations="num_samples"))


# -- factorization machines on the ids design (seed 004 ch. 2, 4) ---------------------------


def ids_design(obs):
    """The FM design of plain MF with biases: one-hot user | one-hot item (004 eq. 2.17, fig. 2.1).

    obs : Observations (I, J), N entries (rows, cols int (N,), values (N,) float). Returns FMDesign
    with N rows, D = I + J features in the groups ("user", "item"): X values float64 ones, y =
    obs.values as float64 (N,).
    Raises ValueError from `FMDesign.from_scipy` when ``obs`` has no entries (N = 0) or a
    non-finite value. Source: 004_90693a0965f06816.txt eq. 2.17.
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
            out = fm_mcmc.sample(key, design, K, hyper or FMHierHyper(), progress=progress, keep=fold.MCMC_FM_KEEP, **opts)
        elif solver == "vbfm":
            out = vbfm.fit(key, design, K, hyper or FMFlatHyper(), progress=progress, **opts)
        elif solver == "ovbfm":
            out = vbfm.fit_svi(key, design, K, hyper or FMFlatHyper(), progress=progress, **opts)
        else:
            reg = hyper or fm_sgd.SGDReg()
            out = fm_sgd.fit(key, design, K, reg, progress=progress, **opts)
            return _stamp(_idata(out), front_door_n_users=obs.shape[0], **fold.sgd_reg_attrs(reg, design.n_groups, K))
        return _stamp(_idata(out), front_door_n_users=obs.shape[0])

    return run


_register(Adapter("mcmc-fm", "real", _fm_runner("mcmc-fm"), _fm_mean, "posterior draws (Gibbs)", "004 eq. 2.17",
                  resumable=True, fold_in=fold.mcmc_fm, defaults=_GIBBS, iterations="num_samples"))
_register(Adapter("vbfm", "real", _fm_runner("vbfm"), _fm_mean, "draws from q (CAVI)", "004 eq. 2.17",
                  resumable=True, fold_in=fold.vbfm, iterations="max_iter", draws="n_draws"))
_register(Adapter("ovbfm", "real", _fm_runner("ovbfm"), _fm_mean, "draws from q (stochastic VI)", "004 eq. 2.17",
                  resumable=True, fold_in=fold.vbfm, iterations="max_epochs", draws="n_draws"))
#: SGD-FM's learning rate unless given: eta = 0.01, the value of `validation.ratings_eval.RatingsConfig`
#: (sgd_learning_rate) for one instance per step on MovieLens ratings (libFM's SGD examples use 0.01 too).
SGD_FM_LEARNING_RATE = 0.01
_register(Adapter("sgd-fm", "real", _fm_runner("sgd-fm"), _fm_mean, "none (point estimate, SGD)", "004 eq. 2.17",
                  fold_in=fold.sgd_fm, resumable=True, defaults={"learning_rate": SGD_FM_LEARNING_RATE, "n_epochs": 20}, iterations="n_epochs"))



# -- one-class logistic MF: SIBM (seed 002) --------------------------------------------------


def _sibm_mean(post, rows, cols, attrs):
    """p(x_ij = 1 | U, V, z) = sigma(u_i . v_j + z) (002_5408d341cb9fc544.txt eqs. 1-2; the bias
    columns are in U and V). Its mean over draws from q is the integral that eq. (5) approximates
    (MacKay); for MAP it is sigma at the point estimate."""
    return _sigmoid(_dot(post["U"], post["V"], rows, cols) + post["z"][:, None])


def _sibm_runner(kind: str):
    def run(key, obs, K, *, progress=True, hyper=None, **opts):
        from custom_inference import sibm
        from ppl_models.sibm import SIBMHyper

        fn = {"vb": sibm.fit, "svi": sibm.fit_svi, "map": sibm.fit_map}[kind]
        hyper = hyper or SIBMHyper()
        return _stamp(_idata(fn(key, obs, K, hyper, progress=progress, **opts)), **fold.sibm_hyper_attrs(hyper))

    return run


_register(Adapter("sibm", "binary", _sibm_runner("vb"), _sibm_mean, "draws from q (batch VB)", "002 eqs. 1-2, 5",
                  resumable=True, fold_in=fold.sibm, defaults={"max_iter": 200}, iterations="max_iter", draws="n_draws"))
_register(Adapter("sibm-svi", "binary", _sibm_runner("svi"), _sibm_mean, "draws from q (SVI)", "002 eqs. 1-2, 5",
                  fold_in=fold.sibm, defaults={"n_iter": 200}, resumable=True, iterations="n_iter", draws="n_draws"))
_register(Adapter("sibm-map", "binary", _sibm_runner("map"), _sibm_mean, "none (point estimate, MAP)",
                  "002 eqs. 1-2", fold_in=fold.sibm_map, defaults={"n_iter": 200}, resumable=True, iterations="n_iter"))


# -- one-class: RG (seed 003), BPR (Rendle et al. 2009) ----------------------------------------


def _rg_mean(post, rows, cols, attrs):
    """p(g = 1 | h = 1, u, v, b) = sigma(u_m . v_n + b_m + b_n) (003_203f63200c0d7157.txt, the like
    probability of an edge; its mean over draws from q is the integral eq. 19 approximates)."""
    return _sigmoid(_dot(post["u"], post["v"], rows, cols) + post["b_user"][:, rows] + post["b_item"][:, cols])


def _run_rg(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import rg
    from ppl_models.rg import RGHyper

    return _idata(rg.fit(key, obs, K, hyper or RGHyper(), progress=progress, **opts))


_register(Adapter("rg", "binary", _run_rg, _rg_mean, "draws from q (VB over random hidden graphs)", "003 eq. 19",
                  resumable=True, defaults={"max_iter": 200},
                  fold_in=("not available: a new user changes the hidden-graph sampler q(H) of every user (its "
                           "popularity histogram, sec. 4.1), so the items' posterior is not held fixed by the math"), iterations="max_iter", draws="n_draws"))


def _bpr_mean(post, rows, cols, attrs):
    """x_ui = w_u . h_i + b_i (Rendle et al. 2009, BPR-MF score; a ranking score, not a probability)."""
    return _dot(post["user_factors"], post["item_factors"], rows, cols) + post["item_bias"][:, cols]


def _run_bpr(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import bpr

    return _idata(bpr.fit(key, obs, K, hyper, progress=progress, **opts))


_register(Adapter("bpr", "binary", _run_bpr, _bpr_mean, "none (point estimate, SGD)", "Rendle et al. 2009 (BPR-MF x_ui)",
                  defaults={"n_epochs": 50}, resumable=True,
                  fold_in=fold.bpr, iterations="n_epochs"))


# -- counts: NPFM / PPFM (seed 004 ch. 5), PSM (seed 000) --------------------------------------


def _pfm_mean(post, rows, cols, attrs):
    """Poisson rate w0 + w_u + w_(I+i) + sum_k r_k v_uk v_(I+i)k on the one-hot ids design
    (004_90693a0965f06816.txt eqs. 5.6 (NPFM) / 5.20 (PPFM: r_k = 1))."""
    I = int(attrs["front_door_n_users"])
    V = post["V"]
    pair = _dot(V, V, rows, I + np.asarray(cols), post["r"] if "r" in post else None)
    return post["w0"][:, None] + post["w"][:, rows] + post["w"][:, I + cols] + pair


def _pfm_runner(variant: str):
    def run(key, obs, K, *, progress=True, hyper=None, checkpoint_every=None, **opts):
        from custom_inference import pfm
        from ppl_models.pfm import PFMHyper

        data = pfm.PFMData.from_matrix(obs, zeros="all")
        keep = ("w0", "w", "V", "delta") + (("r",) if variant == "npfm" else ())  # delta: for fold_in
        if checkpoint_every is not None:
            opts["checkpoint_every"] = int(checkpoint_every)
        idata = pfm.sample(key, data, K, hyper or PFMHyper(), variant=variant, keep=keep, progress=progress, **opts)
        return _stamp(idata, front_door_n_users=obs.shape[0])

    return run


for _variant in ("npfm", "ppfm"):
    _register(Adapter(_variant, "count", _pfm_runner(_variant), _pfm_mean, "posterior draws (Gibbs)",
                      "004 eq. 5.6" if _variant == "npfm" else "004 eq. 5.20", resumable=True, fold_in=fold.pfm,
                      defaults=_GIBBS, iterations="num_samples"))


def _psm_mean(post, rows, cols, attrs, *, block_cells: int = 4_000_000):
    """p(z_j = 1 | o = T, y_i = 1, parameters) = psi_j sigma(x_ij) / sum_j' psi_j' sigma(x_ij'),
    x_ij = u_i . v_j + b_i + b_j (000_619a0297b9d686b2.txt eq. 5: which item a user picks, given an
    event of that user); the normaliser runs over all J items per draw and user, in blocks of users
    (never an I x J array). Its mean over draws from q is what `custom_inference.psm.predictive_probability`
    approximates with MacKay's probit."""
    u, v, bu, bv, psi = post["u"], post["v"], post["b_user"], post["b_item"], post["psi"]
    S, J = v.shape[0], v.shape[1]
    users, inv = np.unique(rows, return_inverse=True)
    norm = np.empty((S, users.size))
    per = max(1, block_cells // max(S * J, 1))
    for start in range(0, users.size, per):
        b = users[start:start + per]
        x = np.matmul(u[:, b], np.swapaxes(v, 1, 2)) + bu[:, b][:, :, None] + bv[:, None, :]
        norm[:, start:start + per] = np.sum(psi[:, None, :] * _sigmoid(x), axis=2)
    x = _dot(u, v, rows, cols) + bu[:, rows] + bv[:, cols]
    return psi[:, cols] * _sigmoid(x) / norm[:, inv.reshape(-1)]


def _run_psm(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    return _idata(psm.fit(key, obs, K, hyper or PSMHyper(), progress=progress, **opts))


_register(Adapter("psm", "count", _run_psm, _psm_mean, "draws from q (VB)", "000 eq. 5", resumable=True,
                  defaults={"max_iter": 100},
                  fold_in=("not available: users share the event-source distribution pi (Dir over users) and the "
                           "censored events D' = r D, so a new user changes every user's q; refit"), iterations="max_iter", draws="n_draws"))


# -- scoring forms: each model's mean as a `validation.scoring.LinearScore` ------------------------
#
# The same E[y_ui | draw] as each ``_*_mean`` above, declared as
# link(offset + c_s + a_s[u] + b_s[i] + sum_k w_sk P_s[u, k] Q_s[i, k]) so that `validation.scoring`
# can score every item of many users with matrix products (one GEMM for the identity link)
# instead of per-pair gathers. tests/validation/test_scoring.py checks each form against its mean.


def _hpf_form(post, attrs):
    return LinearScore(P=post["theta"], Q=post["beta"])


def _sbmf_form(post, attrs):
    return LinearScore(P=post["U"], Q=post["V"], const=post["mu"], user_bias=post["alpha"], item_bias=post["beta"])


def _bpmf_form(post, attrs):
    return LinearScore(P=post["U"], Q=post["V"], offset=float(attrs.get("front_door_offset", 0.0)))


def _fm_form(post, attrs):
    I = int(attrs["front_door_n_users"])
    V, w = post["V"], post["w"]
    return LinearScore(P=V[:, :I], Q=V[:, I:], const=post["w0"], user_bias=w[:, :I], item_bias=w[:, I:])


def _sibm_form(post, attrs):
    return LinearScore(P=post["U"], Q=post["V"], const=post["z"], link="sigmoid")


def _rg_form(post, attrs):
    return LinearScore(P=post["u"], Q=post["v"], user_bias=post["b_user"], item_bias=post["b_item"], link="sigmoid")


def _bpr_form(post, attrs):
    return LinearScore(P=post["user_factors"], Q=post["item_factors"], item_bias=post["item_bias"])


def _pfm_form(post, attrs):
    I = int(attrs["front_door_n_users"])
    V, w = post["V"], post["w"]
    return LinearScore(P=V[:, :I], Q=V[:, I:], const=post["w0"], user_bias=w[:, :I], item_bias=w[:, I:],
                       weight=post.get("r"))


def _psm_form(post, attrs):
    return LinearScore(P=post["u"], Q=post["v"], user_bias=post["b_user"], item_bias=post["b_item"], link="psm",
                       psi=post["psi"])


#: adapter mean function -> form maker ``(posterior, attrs) -> LinearScore``; an adapter whose mean is
#: not here (a user's own model) is scored by `validation.scoring` through its mean, in chunks.
SCORE_FORMS = {_hpf_mean: _hpf_form, _sbmf_mean: _sbmf_form, _bpmf_mean: _bpmf_form, _fm_mean: _fm_form,
               _sibm_mean: _sibm_form, _rg_mean: _rg_form, _bpr_mean: _bpr_form, _pfm_mean: _pfm_form,
               _psm_mean: _psm_form}


def _hpf_q_form(idata, attrs):
    """E_q[theta_u . beta_i] = E_q[theta_u] . E_q[beta_i] = sum_k (gamma_shp / gamma_rte)_uk (lambda_shp / lambda_rte)_ik:
    exact under HPF's mean-field q (theta and beta independent Gammas; 001_30a2018ec18c20b9.txt, the
    CAVI's q(theta_uk) = Gamma(gamma_uk), q(beta_ik) = Gamma(lambda_ik)), as one draw; the mean over
    the stored draws from q is a Monte Carlo estimate of it."""
    from custom_inference import arviz_io

    vp = arviz_io.group_arrays(idata, "variational_parameters")
    theta = np.asarray(vp["gamma_shape"], np.float64) / np.asarray(vp["gamma_rate"], np.float64)
    beta = np.asarray(vp["lambda_shape"], np.float64) / np.asarray(vp["lambda_rate"], np.float64)
    return LinearScore(P=theta[None], Q=beta[None])


#: adapter name -> ``(idata, attrs) -> LinearScore`` of the posterior mean in closed form under the fit's
#: q (`validation.scoring`'s ``means="q"``); only where q makes it exact.
Q_MEAN_FORMS = {"hpf": _hpf_q_form}
