"""The front door's adapters: one declaration per model (see `validation.frontdoor.api.Adapter`).

Each adapter says what values its model takes, how its solver is called on an `Observations`
(I users x J items), and E[y_ui | parameters] as a function of posterior draws, vectorised over
the S draws (chains stacked) and M (row, col) pairs. Nothing here computes a posterior: the
solvers in `custom_inference` do. Source of each mean: the seed equation named beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from validation.checks.registry import MissingDeclaration, part_problems
from validation.evaluation.selection import Axis, Grid
from validation.frontdoor import api_fold_in as fold
from validation.frontdoor.adapters import ADAPTERS, Adapter, _register
from validation.frontdoor.scoring import LinearScore

__all__ = ["ADAPTER_PARTS", "ModelAdapter", "Likelihood", "likelihood_of", "adapter_problems", "log_likelihood",
           "observation_draws", "plug_in_precision", "ids_design"]


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
    hyper = hyper or BPMFHyper()
    idata = bpmf.sample(key, centered, K, hyper, progress=progress, keep=("U", "V", "mu_U", "Lambda_U"), **opts)
    return _stamp(idata, front_door_offset=offset, front_door_alpha=float(hyper.alpha))  # alpha: the likelihood's


_GIBBS = {"num_chains": 2, "num_warmup": 200, "num_samples": 200}


# -- factorization machines on the ids design (seed 004 ch. 2, 4) ---------------------------


def ids_design(obs, *, dtype=np.float64):
    """The FM design of plain MF with biases: one-hot user | one-hot item (004 eq. 2.17, fig. 2.1).

    Built by `custom_inference.fm_design.FMDesign.from_ids` in O(N) memory (no sort; the same arrays as
    `FMDesign.from_scipy` on the same X).

    Parameters
    ----------
    obs : custom_inference.data.Observations
        I users x J items with N entries: ``rows``, ``cols`` int (N,), ``values`` float (N,).
    dtype : numpy float dtype, default numpy.float64
        Dtype of X's values and of y (float32 when the solver computes in float32, so that no float64
        copy is made).

    Returns
    -------
    custom_inference.fm_design.FMDesign
        N rows, D = I + J features in the groups ("user", "item"): ``rows``, ``cols``, ``order`` int32
        (2N,), the values of X ones (2N,) and ``y`` = ``obs.values`` (N,), both in ``dtype``.

    Raises
    ------
    ValueError
        From `FMDesign.from_ids`: ``obs`` has no entries (N = 0), an index out of range or a non-finite value.

    Source: 004_90693a0965f06816.txt eq. 2.17.
    """
    from custom_inference.fm_design import FMDesign

    return FMDesign.from_ids(obs.rows, obs.cols, obs.values, tuple(obs.shape), dtype=dtype,
                             group_names=("user", "item"))


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


def _check_n_batches(obs, options):
    """OVBFM splits the N entries into ``n_batches`` minibatches: refuse more batches than entries."""
    nb = options.get("n_batches", 10)  # vbfm.fit_svi's default
    if isinstance(nb, (int, np.integer)) and not isinstance(nb, bool) and nb > obs.nnz:
        raise ValueError(f"n_batches={int(nb)} is larger than the number of entries to fit ({obs.nnz}): every "
                         f"minibatch needs at least one entry; pass n_batches between 1 and {obs.nnz}")


#: SGD-FM's learning rate unless given: eta = 0.01, the learning_rate its ratings runner declares
#: (`validation.models.vbfm.SPEC`) for one instance per step on MovieLens ratings (libFM's SGD examples use 0.01 too).
SGD_FM_LEARNING_RATE = 0.01



# -- one-class logistic MF: SIBM (seed 002) --------------------------------------------------

#: Batch SIBM's every sweep is dense in users x items: seconds per cell per factor per sweep, measured on
#: this project's 2-core CPU machine through `fit` (float64, K = 10, 1% density): 4.7e-8 s at 1,000 x 1,000
#: and 4.6e-8 s at 2,000 x 2,000, compilation left out (issue 24 saw 56 s per sweep on 21,891 x 10,487
#: cells, 2.4e-8 s at K = 10); `fit` warns before a long fit and names SIBM-SVI.
DENSE_SIBM_PER_SWEEP = 4.6e-8


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




# -- one-class: RG (seed 003), BPR (Rendle et al. 2009) ----------------------------------------


def _rg_mean(post, rows, cols, attrs):
    """p(g = 1 | h = 1, u, v, b) = sigma(u_m . v_n + b_m + b_n) (003_203f63200c0d7157.txt, the like
    probability of an edge; its mean over draws from q is the integral eq. 19 approximates)."""
    return _sigmoid(_dot(post["u"], post["v"], rows, cols) + post["b_user"][:, rows] + post["b_item"][:, cols])


def _run_rg(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import rg
    from ppl_models.rg import RGHyper

    return _idata(rg.fit(key, obs, K, hyper or RGHyper(), progress=progress, **opts))




def _bpr_mean(post, rows, cols, attrs):
    """x_ui = w_u . h_i + b_i (Rendle et al. 2009, BPR-MF score; a ranking score, not a probability)."""
    return _dot(post["user_factors"], post["item_factors"], rows, cols) + post["item_bias"][:, cols]


def _run_bpr(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import bpr

    return _idata(bpr.fit(key, obs, K, hyper, progress=progress, **opts))




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




# -- scoring forms: each model's mean as a `validation.frontdoor.scoring.LinearScore` ------------------------
#
# The same E[y_ui | draw] as each ``_*_mean`` above, declared as
# link(offset + c_s + a_s[u] + b_s[i] + sum_k w_sk P_s[u, k] Q_s[i, k]) so that `validation.frontdoor.scoring`
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




# -- observation models: the likelihood of one observed entry and draws of a new one (issue 24) ------
#
# Each model's likelihood of an observed entry y_ui given one posterior draw, from its generative
# program in `ppl_models`, as used by `validation.frontdoor.api_arviz` (pointwise ``log_likelihood``, ``observed_data``,
# ``posterior_predictive``) and by `validation.frontdoor.scoring.predict(kind="observation")`. The observations are
# the N entries the front door fitted (count and one-class models drop zeros, so: the non-zero counts,
# the positives); where a program's likelihood also has terms for the unobserved cells (Poisson and
# Bernoulli over the full I x J matrix, PSM's censored events), those terms are left out: they hold no
# observed value, and `az.compare` needs every model scored on the same N observations.


@dataclass(frozen=True)
class Likelihood:
    """The observation model of one entry y_ui given one posterior draw.

    Parameters
    ----------
    family : {"poisson", "normal", "bernoulli", "psm-events"}
        ``"poisson"``: rate = the adapter's mean; ``"normal"``: mean = the adapter's mean, precision
        ``precision``; ``"bernoulli"``: logit = the identity-link score of the adapter's `LinearScore` (the
        observed entries are the positives, y = 1); ``"psm-events"`` (PSM): D_ui observed events, each with
        log pi_u + log psi_i + log sigma(x_ui).
    terms : str
        Which terms of the program's likelihood are included (stored in the group's attrs).
    source : str
        Seed file and equation of the likelihood.
    precision : callable or "plug-in", optional
        For "normal": ``precision(post, attrs) -> (S,) float64`` noise precision per draw (``post``: dict
        name -> (S, ...) draws; ``attrs``: the posterior attrs), or ``"plug-in"`` for a point estimate
        without a noise model (`plug_in_precision`: 1 / the mean squared training residual). None otherwise.
    predictive : bool, default True
        Whether new observations can be drawn (`observation_draws`).
    no_predictive : str, default ""
        Why not, when ``predictive`` is False (the ValueError of `observation_draws`).

    Raises
    ------
    None of its own (a record; the fields are not checked).

    Source: project addition (issue 24); each adapter's ``likelihood.source`` names its seed equation.
    """

    family: str
    terms: str
    source: str
    precision: Any = None
    predictive: bool = True
    no_predictive: str = ""


#: The parts every front-door adapter of this module declares, each present or declared absent with its reason
#: (`ModelAdapter.absent`; ``fold_in`` is absent when it is the string saying why): the fold-in of new users,
#: the mean as a `validation.frontdoor.scoring.LinearScore`, the observation model of one entry, the
#: closed-form mean under q (``means="q"``) and the grid `validation.frontdoor.api.select` searches.
ADAPTER_PARTS = ("fold_in", "score_form", "likelihood", "q_mean_form", "grid")


@dataclass(frozen=True)
class ModelAdapter(Adapter):
    """A front-door `validation.frontdoor.api.Adapter` with every per-model fact the front door uses.

    Declared in one place: one `_register` call per front-door name, at the end of this module.
    `adapter_problems` lists what does not conform: each part of `ADAPTER_PARTS` present or declared absent
    with its reason.

    Parameters
    ----------
    name : str
        Front-door name (``"hpf"``, ``"sbmf"``, ...), as `validation.frontdoor.adapters.Adapter`.
    values : {"count", "real", "binary"}
        What the model needs (`validation.frontdoor.adapters.VALUE_KINDS`).
    run : callable
        ``run(key, obs, K, **options) -> arviz.InferenceData`` with a ``posterior`` group.
    mean : callable
        ``mean(posterior, rows, cols, attrs) -> (S, M) float64``: E[y | parameters] of the M (row, col)
        pairs (``rows``, ``cols`` int (M,)) for each of the S draws (``posterior``: dict name -> (S, ...)).
    uncertainty : str
        How the draws were obtained ("posterior draws (Gibbs)", "draws from q (CAVI)", ...).
    source : str
        Seed file and equation of ``mean``.
    fold_in : callable or str, optional
        Part "fold_in": ``fold_in(fitted, obs_new)``, a function of `validation.frontdoor.api_fold_in`, or
        the string saying why there is none (its declared absence; what ``FittedModel.fold_in`` raises).
    resumable : bool, default False
        As `Adapter`: ``fit(..., resume_from=DIR)`` works.
    defaults : mapping str -> object, default {}
        Solver options used unless the caller gives them.
    not_resumable : str, default ""
        Why a non-resumable model cannot resume.
    iterations : str, default "max_iter"
        The solver option counting its iterations (``factorbayes fit --max-iter``).
    draws : str, optional
        The solver option with the number of draws from q (``factorbayes fit --draws``); None: none.
    solver : str, optional
        ``"module:function"`` of the solver, whose keyword parameters are the options `fit` accepts.
    faster : tuple (str, float), optional
        (faster model name, seconds per user-item cell per factor per sweep) for a dense solver's warning.
    precheck : callable, optional
        ``precheck(obs, options)`` raising ValueError for data or options the solver cannot fit.
    score_form : callable, optional
        Part "score_form": ``(posterior dict, attrs) -> LinearScore``, the mean as link(offset + c_s + a_s[u]
        + b_s[i] + sum_k w_sk P_s[u, k] Q_s[i, k]) (`validation.frontdoor.scoring` scores every item of
        many users with matrix products; tests/validation/test_scoring.py checks it against ``mean``).
    q_mean_form : callable, optional
        Part "q_mean_form": ``(idata, attrs) -> LinearScore`` of the mean in closed form under the fit's q
        (``means="q"``; only where q makes it exact).
    likelihood : Likelihood, optional
        Part "likelihood": the observation model of one observed entry.
    grid : validation.evaluation.selection.Grid, optional
        Part "grid": what `validation.frontdoor.api.select` searches (K and the main hyperparameters), with
        ``why`` its values and, where the search fits differently from the user's fit, its
        ``search_options`` with their reason ``search_why`` (HPF: ``n_draws=0``, the exact mean of q).
    absent : mapping str -> str, default {}
        Part (one of `ADAPTER_PARTS` but "fold_in") -> the reason it has none.

    Raises
    ------
    None of its own: the fields are not checked on construction (`_register` checks ``values``;
    `problems` / `adapter_problems` check the parts).

    Source: project addition (issue 25).
    """

    score_form: Callable | None = None
    q_mean_form: Callable | None = None
    likelihood: Likelihood | None = None
    grid: Grid | None = None
    absent: Mapping[str, str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Every way this declaration fails to conform.

        A part of `ADAPTER_PARTS` neither present nor declared absent with a reason, or both; a ``fold_in``
        that is neither callable nor a reason, or whose absence is declared in ``absent``; a ``grid`` without
        the reason for its values (``Grid.why``) or with ``search_options`` without theirs (``Grid.search_why``).

        Returns
        -------
        list of str
            One message per problem, each naming the adapter (empty: conforms).

        Raises
        ------
        None of its own.

        Source: project addition (issue 25).
        """
        fold_reason = self.fold_in.strip() if isinstance(self.fold_in, str) else ""
        absent = {**self.absent, **({"fold_in": fold_reason} if fold_reason else {})}
        present = {"fold_in": callable(self.fold_in), "score_form": callable(self.score_form),
                   "q_mean_form": callable(self.q_mean_form), "likelihood": isinstance(self.likelihood, Likelihood),
                   "grid": isinstance(self.grid, Grid)}
        out = part_problems(f"front-door adapter {self.name!r}", present, absent, ADAPTER_PARTS)
        if present["grid"] and not self.grid.why.strip():
            out.append(f"front-door adapter {self.name!r}: its grid gives no reason for its values (Grid.why)")
        if present["grid"] and self.grid.search_options and not self.grid.search_why.strip():
            out.append(f"front-door adapter {self.name!r}: its grid's search_options "
                       f"{dict(self.grid.search_options)} give no reason (Grid.search_why)")
        if "fold_in" in self.absent:
            out.append(f"front-door adapter {self.name!r}: declare fold-in's absence as fold_in='<reason>' "
                       "(what FittedModel.fold_in raises), not in absent")
        return out

    def part(self, name: str):
        """The declared part ``name``.

        Parameters
        ----------
        name : str
            One of `ADAPTER_PARTS`.

        Returns
        -------
        object
            The part: a callable (``fold_in``, ``score_form``, ``q_mean_form``), a `Likelihood` or a
            `validation.evaluation.selection.Grid`.

        Raises
        ------
        ValueError
            ``name`` is not one of `ADAPTER_PARTS`.
        validation.checks.registry.MissingDeclaration
            The adapter has no such part: the message names the adapter, the part and its declared reason.

        Source: project addition (issue 25).
        """
        if name not in ADAPTER_PARTS:
            raise ValueError(f"part must be one of {ADAPTER_PARTS}, got {name!r}")
        value = getattr(self, name)
        if value is None or isinstance(value, str):
            why = value if isinstance(value, str) and value.strip() else self.absent.get(name)
            raise MissingDeclaration(f"front-door adapter {self.name!r}: no {name} declared"
                                     + (f" (declared absent: {why})" if why else ""))
        return value


def adapter_problems(names=None) -> list[str]:
    """Every way the registered front-door adapters fail to conform.

    An adapter that is not a `ModelAdapter` (it cannot declare the parts), and each `ModelAdapter.problems`.

    Parameters
    ----------
    names : sequence of str, optional
        Registered front-door names (default: every registered adapter, `validation.frontdoor.adapters.ADAPTERS`).

    Returns
    -------
    list of str
        One message per problem, each naming its adapter (empty: all conform).

    Raises
    ------
    KeyError
        A name of ``names`` is not registered.

    Source: project addition (issue 25).
    """
    out = []
    for name in (names or tuple(ADAPTERS)):
        a = ADAPTERS[name]
        out.extend(a.problems() if isinstance(a, ModelAdapter) else
                   [f"front-door adapter {name!r} is a plain Adapter: declare it as a ModelAdapter with its parts "
                    f"{ADAPTER_PARTS}, each present or absent with its reason"])
    return out


def _sbmf_precision(post, attrs):
    return np.asarray(post["tau"], np.float64).reshape(-1)


def _fm_precision(post, attrs):
    return np.asarray(post["alpha"], np.float64).reshape(-1)


def _bpmf_precision(post, attrs):
    from ppl_models.bpmf import BPMFHyper

    S = next(iter(post.values())).shape[0]
    return np.full(S, float(attrs.get("front_door_alpha", BPMFHyper().alpha)))


_POISSON_TERMS = ("log Poisson(y_ui | rate_ui) of the N observed (non-zero) counts; the program's terms of the "
                  "unobserved zero cells, -rate_ui, are left out")
_BERNOULLI_TERMS = ("log Bernoulli(y_ui = 1 | sigma(logit_ui)) = log sigma(logit_ui) of the N observed positives; "
                    "the program's terms log(1 - sigma) of the unobserved cells are left out")
_NORMAL_TERMS = "log Normal(y_ui | mean_ui, 1 / precision) of the N observed ratings (all of the program's terms)"




def likelihood_of(name: str) -> Likelihood:
    """The `Likelihood` of the registered model ``name``.

    Parameters
    ----------
    name : str
        A front-door name (`validation.frontdoor.api.models`).

    Returns
    -------
    Likelihood
        The adapter's ``likelihood`` (`ModelAdapter`).

    Raises
    ------
    ValueError
        The model has none, naming the reason: BPR's declared ``absent["likelihood"]``, a user's own adapter
        without one, an unknown name.

    Source: project addition (issue 24); each adapter's ``likelihood.source`` names its seed equation.
    """
    adapter = ADAPTERS.get(name)
    lik = getattr(adapter, "likelihood", None)
    if lik is not None:
        return lik
    why = getattr(adapter, "absent", {}).get("likelihood") or "its adapter declares no observation model (ModelAdapter.likelihood)"
    raise ValueError(f"{name}: no pointwise likelihood: {why}")


def _linear_predictor(fitted, post, attrs, rows, cols, *, identity: bool):
    """(S, M) float64: the adapter's mean (``identity=False``) or its score before the link (logit)."""
    import dataclasses

    make = getattr(fitted.adapter, "score_form", None)
    if make is None:
        raise ValueError(f"{fitted.model}: its adapter declares no score_form (ModelAdapter.score_form)")
    form = make(post, attrs)
    if identity:
        form = dataclasses.replace(form, link="identity", psi=None)
    return form.pair_draws(rows, cols)


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def plug_in_precision(fitted, post, attrs, *, chunk: int = 65536) -> float:
    """1 / (mean squared training residual) at the point estimate (SGD-FM's plug-in noise precision).

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        The fit; its ``seen`` entries (N, scipy.sparse) are the training residuals' positions and values.
    post : dict str -> numpy.ndarray
        Posterior draws, name -> (S, ...) array (one draw for a point estimate).
    attrs : dict
        The posterior group's attrs (what the adapter's ``run`` stamped).
    chunk : int, default 65536
        Entries per block: work memory (S, chunk) float64.

    Returns
    -------
    float
        > 0 (in 1 / the squared units of the fitted values); 1e12 when the residuals are all zero.

    Raises
    ------
    ValueError
        The adapter declares no ``score_form`` (`ModelAdapter.score_form`).

    Source: project addition (the Gaussian maximum-likelihood estimate of the noise variance).
    """
    seen = fitted.seen.tocoo()
    sq, n = 0.0, seen.nnz
    for a in range(0, n, chunk):
        r, c = seen.row[a:a + chunk].astype(np.int64), seen.col[a:a + chunk].astype(np.int64)
        mu = _linear_predictor(fitted, post, attrs, r, c, identity=False)
        sq += float(np.sum((seen.data[a:a + chunk][None, :] - mu) ** 2)) / mu.shape[0]
    mse = sq / max(n, 1)
    return 1.0 / mse if mse > 0 else 1e12


def log_likelihood(fitted, post, attrs, rows, cols, y, *, precision=None):
    """Pointwise log-likelihood of observed entries, per posterior draw.

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        The fit (its ``model`` names the `Likelihood`, its ``adapter`` the ``score_form``).
    post : dict str -> numpy.ndarray
        Posterior draws, name -> (S, ...) array.
    attrs : dict
        The posterior group's attrs.
    rows : numpy.ndarray of int64, shape (M,)
        User positions.
    cols : numpy.ndarray of int64, shape (M,)
        Item positions.
    y : numpy.ndarray of float64, shape (M,)
        Observed values: counts, ratings, 1 for one-class positives, event counts D_ui for PSM.
    precision : numpy.ndarray of float64, shape (S,), optional
        Noise precision per draw for "normal" models (default: the `Likelihood`'s own; `plug_in_precision`
        for SGD-FM).

    Returns
    -------
    numpy.ndarray of float64, shape (S, M)
        log p(y_m | draw s) (`Likelihood.terms` says which terms of the program's likelihood).

    Raises
    ------
    ValueError
        The model has no likelihood (`likelihood_of`) or its adapter no ``score_form``.

    Source: each model's adapter's ``likelihood`` (Poisson: y log rate - rate - log y!; Normal:
    -0.5 log(2 pi / prec) - 0.5 prec (y - mean)^2; Bernoulli: log sigma(logit)).
    """
    from scipy.special import gammaln

    lik = likelihood_of(fitted.model)
    y = np.asarray(y, np.float64)[None, :]
    if lik.family == "poisson":
        rate = _linear_predictor(fitted, post, attrs, rows, cols, identity=False)
        return y * np.log(rate) - rate - gammaln(y + 1.0)
    if lik.family == "normal":
        mu = _linear_predictor(fitted, post, attrs, rows, cols, identity=False)
        prec = _precision(fitted, lik, post, attrs, mu.shape[0]) if precision is None else precision
        prec = np.asarray(prec, np.float64)[:, None]
        return 0.5 * (np.log(prec) - np.log(2.0 * np.pi)) - 0.5 * prec * (y - mu) ** 2
    if lik.family == "bernoulli":
        x = _linear_predictor(fitted, post, attrs, rows, cols, identity=True)
        return y * _log_sigmoid(x) + (1.0 - y) * _log_sigmoid(-x)
    # psm-events: D (log pi_u + log psi_i + log sigma(x_ui))
    x = _linear_predictor(fitted, post, attrs, rows, cols, identity=True)
    return y * (np.log(post["pi"][:, rows]) + np.log(post["psi"][:, cols]) + _log_sigmoid(x))


def _precision(fitted, lik, post, attrs, S):
    if lik.precision == "plug-in":
        return np.full(S, plug_in_precision(fitted, post, attrs))
    return lik.precision(post, attrs)


def observation_draws(fitted, post, attrs, rows, cols, rng, *, reps: int = 1, precision=None):
    """Draws of a new observation y_ui from the model's observation model, ``reps`` per posterior draw.

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        As `log_likelihood`.
    post : dict str -> numpy.ndarray
        Posterior draws, name -> (S, ...) array.
    attrs : dict
        The posterior group's attrs.
    rows : numpy.ndarray of int64, shape (M,)
        User positions.
    cols : numpy.ndarray of int64, shape (M,)
        Item positions.
    rng : numpy.random.Generator
        The source of the draws.
    reps : int >= 1, default 1
        New observations per posterior draw.
    precision : numpy.ndarray of float64, shape (S,), optional
        As `log_likelihood`.

    Returns
    -------
    numpy.ndarray of float64, shape (S * reps, M)
        Draw-major (the reps of draw 0 first): Poisson counts, Normal ratings (in the fitted units) or
        Bernoulli 0/1 values.

    Raises
    ------
    ValueError
        The model has no likelihood, no predictive (PSM: `Likelihood.no_predictive`) or its adapter no
        ``score_form``.

    Source: each model's adapter's ``likelihood``.
    """
    lik = likelihood_of(fitted.model)
    if not lik.predictive:
        raise ValueError(f"{fitted.model}: no draws of a new observation: {lik.no_predictive}")
    mu = _linear_predictor(fitted, post, attrs, rows, cols, identity=False)
    S, M = mu.shape
    if lik.family == "normal":
        prec = np.asarray(_precision(fitted, lik, post, attrs, S) if precision is None else precision, np.float64)
        sd = np.repeat(1.0 / np.sqrt(prec), reps)[:, None]
    mu = np.repeat(mu, reps, axis=0)
    if lik.family == "poisson":
        return rng.poisson(mu).astype(np.float64)
    if lik.family == "normal":
        return mu + sd * rng.standard_normal(mu.shape)
    return (rng.random(mu.shape) < mu).astype(np.float64)  # bernoulli: mu is the probability


# -- the declarations: one `ModelAdapter` per front-door name, every per-model fact of the front door in it ------
#
# Each names the same model as its declaration in `validation.models` (``SolverSpec.frontdoor``); BPR is a baseline
# with no generative program to declare there. tests/validation/test_registry.py checks that every adapter
# conforms (`adapter_problems`) and that each declared solver's front-door name is registered here.

#: why an adapter has no closed-form mean under q (``q_mean_form``), by the kind of fit
_NO_Q_SAMPLER = "a sampler: there is no q; means='draws' averages the posterior draws"
_NO_Q_POINT = "a point estimate: there is no q; its one draw is the estimate"
_NO_Q_VI = ("not written: the mean under q is not declared in closed form; means='draws' is the Monte Carlo "
            "mean over the stored draws from q")

# The grids `validation.frontdoor.api.select` searches (``grid``): K always, and the model's main hyperparameters;
# each says why its values.
_K_SAMPLERS = ("K only: the samplers draw their prior precisions from hyperpriors (no scale to choose); "
               "K in {10, 32}: `validation.evaluation.ratings_eval.RatingsConfig` ranks (004 ch. 3's MovieLens runs)")
_K_SIBM = ("K only: the priors are seed 002's unit variances (sec. 5, 'priors with zero means and unit variances'); "
           "K in {5, 10, 20} around the seed's MovieLens runs")
_K_PFM = ("K only: NPFM / PPFM draw their precisions and r_k from hyperpriors (004 ch. 5); K in {10, 20, 50}: "
          "004 ch. 5's P3 runs use K = 50, the smaller values for smaller files")
_K_VBFM = "K only: the prior precisions are updated by the solver (update_hyper, 004 ch. 4); K: ratings_eval's ranks"
_GIBBS_GRID = Grid((10, 32), why=_K_SAMPLERS)
_VBFM_GRID = Grid((10, 32), why=_K_VBFM)
_SIBM_GRID = Grid((5, 10, 20), why=_K_SIBM)
_PFM_GRID = Grid((10, 20, 50), why=_K_PFM)

#: HPF's search fits keep the means of q (issue 27 item 4): HPF's q is mean-field, theta_u and beta_i independent
#: Gammas, so E_q[theta_u . beta_i] = E_q[theta_u] . E_q[beta_i]; with ``n_draws=0`` the fit keeps those means
#: (one "draw") and the validation score is the exact q mean (what the front door's ``means="q"`` computes), not a
#: Monte Carlo average of 200 draws. They override the user's ``n_draws`` for the search only; the refit keeps
#: the user's options.
_HPF_SEARCH_WHY = ("HPF's q is mean-field (theta_u, beta_i independent Gammas), so E_q[theta_u . beta_i] = "
                   "E_q[theta_u] . E_q[beta_i]: n_draws=0 keeps those means and the validation score is the exact "
                   "q mean, not a Monte Carlo average of draws; the search only, the refit keeps the user's n_draws")

_HPF_LIKELIHOOD = Likelihood("poisson", _POISSON_TERMS, "001_30a2018ec18c20b9.txt: y_ui ~ Poisson(theta_u . beta_i)")
_register(ModelAdapter("hpf", "count", _run_hpf, _hpf_mean, "draws from q (CAVI)", "001 (Poisson rate theta_u . beta_i)",
                       fold_in=fold.hpf, resumable=True, defaults={"max_iter": 100, "n_draws": 200}, iterations="max_iter",
                       draws="n_draws", solver="custom_inference.hpf:fit",
                       score_form=_hpf_form, q_mean_form=_hpf_q_form, likelihood=_HPF_LIKELIHOOD,
                       grid=Grid((5, 10, 20), (Axis("shape", (0.1, 0.3, 1.0), fields=("a", "c")),
                                               Axis("scale", (0.1, 1.0), fields=("b_prime", "d_prime"))),
                                 "ppl_models.hpf:HPFHyper",
                                 why="shape = a = c of theta, beta: 0.3 is Gopalan et al. 2015's and hpfrec's setting "
                                     "(HPFHyper default), 0.1 sparser, 1.0 an exponential prior; scale = b' = d', the "
                                     "prior means of user activity and item popularity (their Gammas' scales are b'/a', "
                                     "d'/c'): 1 (default) and 0.1; K around 001's MovieLens runs",
                                 search_options={"n_draws": 0}, search_why=_HPF_SEARCH_WHY)))
_register(ModelAdapter("hpf-gibbs", "count", _run_hpf_gibbs, _hpf_mean, "posterior draws (Gibbs)",
                       "001 (Poisson rate theta_u . beta_i)", resumable=True, fold_in=fold.hpf_gibbs,
                       defaults={"num_chains": 2, "num_warmup": 200, "num_samples": 200}, iterations="num_samples",
                       solver="custom_inference.hpf_gibbs:sample",
                       score_form=_hpf_form, likelihood=_HPF_LIKELIHOOD, absent={"q_mean_form": _NO_Q_SAMPLER},
                       grid=Grid((5, 10, 20), (Axis("shape", (0.3, 1.0), fields=("a", "c")),), "ppl_models.hpf:HPFHyper",
                                 why="as hpf, with fewer points (a sampler fit costs more)")))

_register(ModelAdapter("sbmf", "real", _run_sbmf, _sbmf_mean, "posterior draws (Gibbs)", "004 eq. 3.1",
                       resumable=True, fold_in=fold.sbmf, defaults=_GIBBS, iterations="num_samples",
                       solver="custom_inference.sbmf:sample", score_form=_sbmf_form,
                       likelihood=Likelihood("normal", _NORMAL_TERMS, "004_90693a0965f06816.txt eqs. 3.1-3.2: "
                                             "r ~ N(mu + alpha_i + beta_j + u_i . v_j, 1/tau)", precision=_sbmf_precision),
                       grid=_GIBBS_GRID, absent={"q_mean_form": _NO_Q_SAMPLER}))
_register(ModelAdapter("bpmf", "real", _run_bpmf, _bpmf_mean, "posterior draws (Gibbs)", "004 ch. 2 (BPMF)",
                       resumable=True, fold_in=fold.bpmf, defaults=_GIBBS, iterations="num_samples",
                       solver="custom_inference.bpmf:sample", score_form=_bpmf_form,
                       likelihood=Likelihood("normal", _NORMAL_TERMS + " (precision alpha fixed by the hyperparameters)",
                                             "004_90693a0965f06816.txt eq. 2.9: r ~ N(u_i . v_j, 1/alpha) (ratings "
                                             "centred at their training mean)", precision=_bpmf_precision),
                       grid=_GIBBS_GRID, absent={"q_mean_form": _NO_Q_SAMPLER}))

_register(ModelAdapter("mcmc-fm", "real", _fm_runner("mcmc-fm"), _fm_mean, "posterior draws (Gibbs)", "004 eq. 2.17",
                       resumable=True, fold_in=fold.mcmc_fm, defaults=_GIBBS, iterations="num_samples",
                       solver="custom_inference.fm_mcmc:sample", score_form=_fm_form,
                       likelihood=Likelihood("normal", _NORMAL_TERMS, "004_90693a0965f06816.txt eq. 2.22: "
                                             "y ~ N(yhat(x), 1/alpha)", precision=_fm_precision),
                       grid=_GIBBS_GRID, absent={"q_mean_form": _NO_Q_SAMPLER}))
_VBFM_LIKELIHOOD = Likelihood("normal", _NORMAL_TERMS, "004_90693a0965f06816.txt eq. 4.1: y ~ N(yhat(x), 1/alpha)",
                              precision=_fm_precision)
_register(ModelAdapter("vbfm", "real", _fm_runner("vbfm"), _fm_mean, "draws from q (CAVI)", "004 eq. 2.17",
                       resumable=True, fold_in=fold.vbfm, iterations="max_iter", draws="n_draws",
                       solver="custom_inference.vbfm:fit", score_form=_fm_form, likelihood=_VBFM_LIKELIHOOD,
                       grid=_VBFM_GRID, absent={"q_mean_form": _NO_Q_VI}))
_register(ModelAdapter("ovbfm", "real", _fm_runner("ovbfm"), _fm_mean, "draws from q (stochastic VI)", "004 eq. 2.17",
                       resumable=True, fold_in=fold.vbfm, iterations="max_epochs", draws="n_draws",
                       solver="custom_inference.vbfm:fit_svi", precheck=_check_n_batches, score_form=_fm_form,
                       likelihood=_VBFM_LIKELIHOOD, grid=_VBFM_GRID, absent={"q_mean_form": _NO_Q_VI}))
_register(ModelAdapter("sgd-fm", "real", _fm_runner("sgd-fm"), _fm_mean, "none (point estimate, SGD)", "004 eq. 2.17",
                       fold_in=fold.sgd_fm, resumable=True, defaults={"learning_rate": SGD_FM_LEARNING_RATE, "n_epochs": 20},
                       iterations="n_epochs", solver="custom_inference.fm_sgd:fit", score_form=_fm_form,
                       likelihood=Likelihood("normal", _NORMAL_TERMS + "; SGD fits no noise model: the precision is the "
                                             "plug-in 1 / (mean squared training residual) at the point estimate",
                                             "004_90693a0965f06816.txt eq. 2.22 (Gaussian FM likelihood; plug-in "
                                             "precision)", precision="plug-in"),
                       grid=Grid((10, 32), (Axis("learning_rate", (0.003, 0.01, 0.03), option="learning_rate"),
                                            Axis("reg", (0.01, 0.04), fields=("lambda_w", "lambda_v"))),
                                 "custom_inference.fm_sgd:SGDReg", fixed={"lambda_0": 0.0},
                                 why="learning rates and lambda_w = lambda_v of SGD-FM's declared counts search "
                                     "(0.003-0.03, 0.01-0.04; 0.01 is libFM's and ratings_eval's rate); K: ratings_eval's "
                                     "ranks"),
                       absent={"q_mean_form": _NO_Q_POINT}))

_SIBM_LIKELIHOOD = Likelihood("bernoulli", _BERNOULLI_TERMS,
                              "002_5408d341cb9fc544.txt eqs. 1-2: x_ij ~ Bernoulli(sigma(u_i . v_j + z))")
_register(ModelAdapter("sibm", "binary", _sibm_runner("vb"), _sibm_mean, "draws from q (batch VB)", "002 eqs. 1-2, 5",
                       resumable=True, fold_in=fold.sibm, defaults={"max_iter": 200}, iterations="max_iter",
                       draws="n_draws", solver="custom_inference.sibm:fit", faster=("sibm-svi", DENSE_SIBM_PER_SWEEP),
                       score_form=_sibm_form, likelihood=_SIBM_LIKELIHOOD, grid=_SIBM_GRID, absent={"q_mean_form": _NO_Q_VI}))
_register(ModelAdapter("sibm-svi", "binary", _sibm_runner("svi"), _sibm_mean, "draws from q (SVI)", "002 eqs. 1-2, 5",
                       fold_in=fold.sibm, defaults={"n_iter": 200}, resumable=True, iterations="n_iter", draws="n_draws",
                       solver="custom_inference.sibm:fit_svi", score_form=_sibm_form, likelihood=_SIBM_LIKELIHOOD,
                       grid=_SIBM_GRID, absent={"q_mean_form": _NO_Q_VI}))
_register(ModelAdapter("sibm-map", "binary", _sibm_runner("map"), _sibm_mean, "none (point estimate, MAP)",
                       "002 eqs. 1-2", fold_in=fold.sibm_map, defaults={"n_iter": 200}, resumable=True,
                       iterations="n_iter", solver="custom_inference.sibm:fit_map", score_form=_sibm_form,
                       likelihood=_SIBM_LIKELIHOOD, grid=_SIBM_GRID, absent={"q_mean_form": _NO_Q_POINT}))

_register(ModelAdapter("rg", "binary", _run_rg, _rg_mean, "draws from q (VB over random hidden graphs)", "003 eq. 19",
                       resumable=True, defaults={"max_iter": 200},
                       fold_in=("not available: a new user changes the hidden-graph sampler q(H) of every user (its "
                                "popularity histogram, sec. 4.1), so the items' posterior is not held fixed by the math"),
                       iterations="max_iter", draws="n_draws", solver="custom_inference.rg:fit", score_form=_rg_form,
                       likelihood=Likelihood("bernoulli", _BERNOULLI_TERMS.replace(
                           "unobserved cells", "unobserved cells (and the hidden graph's unliked edges)"),
                           "003_203f63200c0d7157.txt: g_mn ~ Bernoulli(sigma(u_m . v_n + b_m + b_n)) on the edges of "
                           "the hidden graph"),
                       grid=Grid((10, 20), (Axis("r", (0.5, 1.0), fields=("r",)),), "ppl_models.rg:RGHyper",
                                 why="r = 1/2 is 003 sec. 6.1's setting (RGHyper default); r = 1 the other value "
                                     "implicit_eval runs; K = 20 sec. 6.1's, 10 smaller"),
                       absent={"q_mean_form": _NO_Q_VI}))
_register(ModelAdapter("bpr", "binary", _run_bpr, _bpr_mean, "none (point estimate, SGD)", "Rendle et al. 2009 (BPR-MF x_ui)",
                       defaults={"n_epochs": 50}, resumable=True, fold_in=fold.bpr, iterations="n_epochs",
                       solver="custom_inference.bpr:fit", score_form=_bpr_form,
                       grid=Grid((16, 64), (Axis("learning_rate", (0.02, 0.05), option="learning_rate"),
                                            Axis("reg", (0.01, 0.03), fields=("reg",))), "custom_inference.bpr:BPRHyper",
                                 why="K = 64, learning rate 0.02, reg 0.01 (uniform) / 0.03 (popularity sampling) are "
                                     "implicit_eval's BPR settings; 0.05 is custom_inference.bpr.fit's default rate; "
                                     "K = 16 for small files"),
                       absent={"q_mean_form": _NO_Q_POINT,
                               "likelihood": "BPR's criterion (Rendle et al. 2009) is a likelihood of pairwise orders "
                                             "p(i >_u j) = sigma(x_ui - x_uj), not of single entries: it has no pointwise "
                                             "log-likelihood and no observation model to draw a new y_ui from"}))

for _variant, _eq in (("npfm", "5.6"), ("ppfm", "5.20")):
    _register(ModelAdapter(_variant, "count", _pfm_runner(_variant), _pfm_mean, "posterior draws (Gibbs)", f"004 eq. {_eq}",
                           resumable=True, fold_in=fold.pfm, defaults=_GIBBS, iterations="num_samples",
                           solver="custom_inference.pfm:sample", score_form=_pfm_form,
                           likelihood=Likelihood("poisson", _POISSON_TERMS,
                                                 f"004_90693a0965f06816.txt eq. {_eq}: y ~ Poisson(lambda(x))"),
                           grid=_PFM_GRID, absent={"q_mean_form": _NO_Q_SAMPLER}))
_register(ModelAdapter("psm", "count", _run_psm, _psm_mean, "draws from q (VB)", "000 eq. 5", resumable=True,
                       defaults={"max_iter": 100},
                       fold_in=("not available: users share the event-source distribution pi (Dir over users) and the "
                                "censored events D' = r D, so a new user changes every user's q; refit"),
                       iterations="max_iter", draws="n_draws", solver="custom_inference.psm:fit", score_form=_psm_form,
                       likelihood=Likelihood("psm-events", "D_ui (log pi_u + log psi_i + log sigma(x_ui)) for the D_ui "
                                             "observed events of each entry (who, which item, observed); the "
                                             "censored-events factor D' log p(o = F) couples every cell and is left out",
                                             "000_619a0297b9d686b2.txt eqs. 1-5 (ppl_models.psm: y ~ Cat(pi), "
                                             "z ~ Cat(psi), o ~ Bernoulli(sigma(x)))", predictive=False,
                                             no_predictive="PSM models who and which item each event is, given the "
                                             "number of events, not a count per entry: there is no draw of a new y_ui"),
                       grid=Grid((10, 20), (Axis("r", (1.0, 4.0, 8.0), option="r"),),
                                 why="K = 20, r = 1 is 000's fig. 2 setting; K = 10, r = 8 was chosen on a validation "
                                     "split of ML-100K P1 (validation.evaluation.model_studies.PSM_DEFAULTS: rank score "
                                     "0.909 -> 0.921 on test); r = 4 between"),
                       absent={"q_mean_form": _NO_Q_VI}))


# -- views of the declarations (read-only, derived: no table here names a model) -----------------------------

_DECLARED = tuple(a for a in ADAPTERS.values() if isinstance(a, ModelAdapter))
#: adapter mean function -> its ``score_form`` (an adapter whose mean is not here, a user's own, is scored by
#: `validation.frontdoor.scoring` through its mean, in chunks); derived from the declarations above.
SCORE_FORMS = {a.mean: a.score_form for a in _DECLARED if a.score_form is not None}
#: adapter name -> its ``q_mean_form`` (``means="q"``), where declared.
Q_MEAN_FORMS = {a.name: a.q_mean_form for a in _DECLARED if a.q_mean_form is not None}
#: adapter name -> its `Likelihood`, where declared; `likelihood_of` reads the adapter itself.
LIKELIHOODS = {a.name: a.likelihood for a in _DECLARED if a.likelihood is not None}
#: adapter name -> why it declares no `Likelihood`.
NO_LIKELIHOOD = {a.name: a.absent["likelihood"] for a in _DECLARED if "likelihood" in a.absent}
