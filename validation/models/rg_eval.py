"""RG's part of the one-class evaluation (`validation.evaluation.implicit_eval`): the runner RG declares for
"implicit" (``SolverSpec.evaluations``) and its settings (`RG_DEFAULTS`); the runner contract is that of
`validation.models.sibm_eval` (``runner(run) -> {system name: factory}``). Nothing here imports the evaluation layer.

Source: ``003_203f63200c0d7157.txt`` secs. 5.1 and 6.1, eq. (19); the defaults are project choices.
"""

from __future__ import annotations

from custom_inference import rg as rg_solver
from ppl_models.rg import RGHyper

__all__ = ["RG_DEFAULTS", "implicit_runner"]

#: RG: ``r`` is the paper's r = 1/2 (eq. 8); ``second_r`` adds the same systems at another r (named
#: "RG like (r=1)" ...): r = 1 gives gamma = 1, pi_n = d_n, the "effectively uniform" histogram of
#: seed 003 sec. 4.1 (None: no second r). ``warm_start``: `custom_inference.rg.fit`'s fixed-graph
#: sweeps before the Robbins-Monro averaging (its default; 0 is the paper's cold start).
RG_DEFAULTS = {"K": 10, "max_iter": 100, "second_r": 1.0, "warm_start": 30}


def implicit_runner(run) -> dict:
    """The RG systems of the one-class evaluation: like, and popularity x like, at r = 1/2 and at ``second_r``.

    ``"RG like"`` and ``"RG popularity x like"``: `custom_inference.rg.fit` with the paper's hyperparameters
    (r = 1/2, user biases clamped at zero, sec. 6.1), ``warm_start`` fixed-graph sweeps then a fresh hidden graph
    per sweep with Robbins-Monro averaging (sec. 5.1), scored by the like probability (19) or by pi_n times it;
    the two share one fit per (training matrix, seed, r). ``"RG like (r=R)"`` and ``"RG popularity x like
    (r=R)"``: the same at ``second_r`` (sec. 6.1.2 evaluates two settings of r; None: none). The like systems
    carry ``scores_like_probability = True``. On a large matrix the fit stops on its ELBO (the large settings'
    ``rg_warm_start``, ``rg_max_iter``, ``rg_tol``).

    Parameters
    ----------
    run : validation.evaluation.implicit_eval.ImplicitRun
        The evaluation's context: ``settings`` (`RG_DEFAULTS` with the user's overrides), ``dtype``,
        ``large_cells``, ``is_large(train)``, ``large``, ``fit_info``, ``estimator``.

    Returns
    -------
    dict
        System name -> ``factory(train: Observations, seed: int) -> score_fn``, ``score_fn(users (B,) int) ->
        (B, J)`` numpy scores carrying ``fit_info``.

    Raises
    ------
    KeyError
        When ``run.settings`` lacks K, max_iter, second_r or warm_start (only a hand-made ``run``); calling a
        factory raises what `custom_inference.rg.fit` raises.

    Source: ``003_203f63200c0d7157.txt`` secs. 5.1, 6.1, eq. (19); the runner interface is a project addition.
    """
    r, large, dtype = run.settings, run.large, run.dtype
    fits: dict = {}  # (id(train), seed, r) -> (train, FitResult): one RG fit per r serves both scores

    def rg_fit(train, seed: int, r_value: float):
        key = (id(train), int(seed), float(r_value))
        if key not in fits or fits[key][0] is not train:
            stop = (dict(max_iter=large["rg_max_iter"], tol=large["rg_tol"],
                         warm_start=large["rg_warm_start"]) if run.is_large(train)
                    else dict(max_iter=r["max_iter"], warm_start=r["warm_start"]))
            res = rg_solver.fit(int(seed), train, r["K"], RGHyper(r=float(r_value)), dtype=dtype, n_draws=0,
                                progress=False, **stop)
            fits[key] = (train, res)
        return fits[key][1]

    def rg_sweeps(train) -> int:
        if run.is_large(train):
            return large["rg_max_iter"] + large["rg_warm_start"]
        return r["max_iter"] + r["warm_start"]

    def rg_system(kind: str, r_value: float):
        def factory(train, seed: int):
            res = rg_fit(train, seed, r_value)
            score_fn = lambda users: rg_solver.score_users(res.state, users, kind=kind,  # noqa: E731
                                                           pi=rg_solver.histogram_of(res)[0])
            score_fn.fit_info = run.fit_info(res, "Robbins-Monro sweeps (after the warm start)")
            return score_fn

        factory.scores_like_probability = kind == "like"
        factory.large_cells = run.large_cells
        # the popularity x like entry shares the like entry's fit (same training matrix, seed and r)
        factory.estimate = run.estimator(3.0e-6, "positive", rg_sweeps) if kind == "like" else (lambda train: 0.0)
        return factory

    out = {"RG like": rg_system("like", 0.5), "RG popularity x like": rg_system("popularity_like", 0.5)}
    if r["second_r"] is not None:
        tag = f"r={float(r['second_r']):g}"
        out[f"RG like ({tag})"] = rg_system("like", r["second_r"])
        out[f"RG popularity x like ({tag})"] = rg_system("popularity_like", r["second_r"])
    return out
