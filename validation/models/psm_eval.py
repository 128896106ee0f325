"""PSM's part of the one-class evaluation (`validation.evaluation.implicit_eval`): the system factory
(`implicit_system`), its settings (`PSM_DEFAULTS`) and the runner PSM declares for "implicit"
(``SolverSpec.evaluations``; contract as `validation.models.sibm_eval`: ``runner(run) -> {system name:
factory}``). Moved from `validation.evaluation.model_studies` (which re-exports `PSM_DEFAULTS` and
`implicit_system`); nothing here imports the evaluation layer.

Source: ``000_619a0297b9d686b2.txt`` sec. 5, eq. (5); the runner interface is a project addition (issue 25).
"""

from __future__ import annotations

import jax
import numpy as np

from custom_inference import psm
from custom_inference.data import Observations
from ppl_models import psm as psm_ppl

__all__ = ["PSM_DEFAULTS", "implicit_system", "implicit_runner"]


#: K = 20, r = 1 (D' = D) and unit hyperparameters: the paper's fig. 2 setting (sec. 5). Measured on
#: MovieLens 100K P1 (seed 0, float32, tol 1e-6; 942 test users), 2026-11-23 -- rank score (eq. 12) /
#: HR@10 / NDCG@10: popularity 0.869 / 0.118 / 0.064; PSM K=20: r=1/4 0.901 / 0.153 / 0.080, r=1/2
#: 0.902 / 0.177 / 0.091, r=1 0.909 / 0.230 / 0.130, r=2 0.914 / 0.249 / 0.140, r=4 0.917 / 0.258 / 0.144;
#: r=1: K=10 0.916 / 0.243 / 0.132, K=30 0.904 / 0.222 / 0.125, K=50 0.892 / 0.185 / 0.103 (200 sweeps,
#: not converged); K=10 r=4 0.921 / 0.261 / 0.148. Acceptance sigma(x_ij) alone (K=20, r=1): 0.760 / 0.055.
#: RG popularity x like (`implicit_eval.model_systems` defaults) on the same split: 0.911 / 0.217 / 0.114.
#: Selected on `validation_split` (seed 1, carved from the P1 training matrix; K in {10, 20}, r in {1, ..., 64}):
#: K = 10, r = 8 (validation R 0.925); on the test split (2026-11-25): P1 0.921 / 0.260 / 0.147, SIBM 0.884 /
#: 0.239 / 0.131. The defaults below stay the paper's fig. 2 setting; pass ``psm={"K": 10, "r": 8.0}``.
PSM_DEFAULTS = {"K": 20, "r": 1.0, "max_iter": 200, "tol": 1e-6}


def implicit_system(K: int = 20, r: float = 1.0, *, kind: str = "predictive", hyper=psm_ppl.PSMHyper(),
                    dtype=np.float32, **fit_kwargs):
    """A system for `validation.evaluation.implicit_eval.evaluate_implicit`: ``factory(train, seed) -> score_fn``.

    ``train`` (binary Observations: one event per observed pair) is fitted by `custom_inference.psm.fit` with key
    ``seed``, K, r (D' = r D), ``hyper`` and ``fit_kwargs`` (progress off, 10 draws from q by default);
    ``score_fn(users)`` returns `custom_inference.psm.score_users` of ``kind``. The factory keeps its last fit as
    ``factory.last_fit``; an "acceptance" factory carries ``scores_like_probability``.

    Parameters
    ----------
    K : int
        Latent dimension.
    r : float
        D' = r D.
    kind : {"predictive", "acceptance"}
        "predictive": E[psi_j] sigma(x_ij), eq. 5; "acceptance": sigma(x_ij).
    hyper : ppl_models.psm.PSMHyper
        Hyperparameters (default: all one).
    dtype : numpy dtype
        Of the fit and the scores.
    **fit_kwargs
        Further arguments of `custom_inference.psm.fit` (e.g. max_iter, tol; defaults from `PSM_DEFAULTS`).

    Returns
    -------
    callable
        ``factory(train: Observations, seed: int) -> score_fn``, ``score_fn(users (B,) int) -> (B, J)`` numpy
        array of ``dtype``.

    Raises
    ------
    ValueError
        For a bad ``kind`` (here, at once). The factory raises what `custom_inference.psm.fit` raises when called
        (ValueError for bad data, K, r or fit arguments; FloatingPointError for a non-finite ELBO), and
        ``score_fn`` ValueError for user indices out of range.

    Source: ``000_619a0297b9d686b2.txt`` eq. (5) (the scores) and sec. 5 (K = 20, D' = D, hyperparameters
    one: the fig. 2 setting); the factory interface is a project addition.
    """
    if kind not in ("predictive", "acceptance"):
        raise ValueError(f"kind must be 'predictive' or 'acceptance', got {kind!r}")
    kw = {"max_iter": PSM_DEFAULTS["max_iter"], "tol": PSM_DEFAULTS["tol"], "progress": False, "n_draws": 10, **fit_kwargs}

    def factory(train: Observations, seed: int):
        res = psm.fit(jax.random.PRNGKey(int(seed)), train.astype(dtype), K, hyper, r=r, dtype=dtype, **kw)
        factory.last_fit = res
        return lambda users: psm.score_users(res.state, np.asarray(users), kind=kind)

    factory.scores_like_probability = kind == "acceptance"
    return factory


def implicit_runner(run) -> dict:
    """``{"PSM": factory}``: `custom_inference.psm.fit` (Algorithm 1 of seed 000) on the training pairs.

    Each pair is one event; ``run.settings`` (`PSM_DEFAULTS` with the overrides: K, r (D' = r D), at most
    ``max_iter`` sweeps, relative tolerance ``tol``; the large settings' ``psm_tol`` on a large matrix); scored by
    the paper's predictive (eq. 5), E_q[psi_j] sigma(x_ij) (`implicit_system`).

    Parameters
    ----------
    run : validation.evaluation.implicit_eval.ImplicitRun
        The evaluation's context (settings, dtype, large_cells, is_large, large, fit_info, estimator).

    Returns
    -------
    dict
        System name -> factory, as `implicit_system`'s (score functions carrying ``fit_info``).

    Raises
    ------
    KeyError
        When ``run.settings`` lacks K, r, max_iter or tol (only a hand-made ``run``); calling the factory raises
        what `implicit_system`'s factory raises.

    Source: ``000_619a0297b9d686b2.txt`` Algorithm 1, eq. (5).
    """
    p = run.settings
    kw = dict(dtype=run.dtype, max_iter=p["max_iter"])
    small = implicit_system(p["K"], p["r"], tol=p["tol"], **kw)
    large = implicit_system(p["K"], p["r"], tol=run.large["psm_tol"], **kw)

    def factory(train: Observations, seed: int):
        f = large if run.is_large(train) else small
        score_fn = f(train, seed)
        score_fn.fit_info = run.fit_info(f.last_fit, "sweeps")
        return score_fn

    factory.large_cells = run.large_cells
    factory.estimate = run.estimator(4.0e-6, "positive", lambda train: p["max_iter"])
    return {"PSM": factory}
