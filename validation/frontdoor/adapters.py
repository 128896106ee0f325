"""The front door's model adapters: how `validation.frontdoor.api.fit` drives each model by name.

Every model the front door fits is declared once as an `Adapter` (its data kind, its solver call, the
map from posterior draws to E[y_ui], its fold-in) in `validation.frontdoor.api_models`, which registers
it in `ADAPTERS` on import; `models` and `_adapter` import it on first use, so that importing this
module (and the CLI's parser) stays free of JAX.

Source: project addition (issue 10; split out of `validation.frontdoor.api`, issue 25).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["Adapter", "ADAPTERS", "VALUE_KINDS", "models"]

VALUE_KINDS = ("count", "real", "binary")


@dataclass(frozen=True)
class Adapter:
    """How the front door drives one model.

    Parameters
    ----------
    name : str
        Registry name (``"hpf"``, ``"hpf-gibbs"``, ``"sbmf"``, ...).
    values : str
        What the model needs, one of `VALUE_KINDS`: ``"count"`` (non-negative integers), ``"real"``
        (any finite rating) or ``"binary"`` (one-class 0/1; positives only are stored).
    run : callable
        ``run(key, obs, K, **options) -> arviz.InferenceData`` with a ``posterior`` group.
    mean : callable
        ``mean(posterior, rows, cols, attrs) -> (S, M) float array``: E[y | parameters] of the M
        (row, col) pairs for each of the S posterior draws (chains stacked); ``posterior`` is a
        dict name -> array (S, ...); ``rows``, ``cols`` int arrays (M,); ``attrs`` the posterior
        group's attrs as a dict (what `run` stamped, e.g. ``front_door_offset``).
    uncertainty : str
        How the draws were obtained ("posterior draws (Gibbs)", "draws from q (CAVI)",
        "none (point estimate)").
    source : str
        Seed file and equation of ``mean``.
    fold_in : callable or str, optional
        ``fold_in(fitted, obs_new) -> {group: {variable: array}}`` (a callable from
        `validation.frontdoor.api_fold_in`: the new-user parts of the I_new new users, per group of the
        fitted InferenceData, appended by `_extend_users`; the item side unchanged), or a string
        saying why fold-in is not available (see `FittedModel.fold_in`). Default None.
    resumable : bool, default False
        Whether ``fit(..., resume_from=DIR)`` works (the solver writes checkpoints through
        `custom_inference.vi_driver` or `custom_inference.mcmc_driver`; every registered model does).
    defaults : mapping str -> object, default {}
        Solver options used unless the caller gives them (stated in the README table).
    not_resumable : str, default ""
        Why a non-resumable model cannot resume (the ValueError of ``resume_from``).
    iterations : str, default "max_iter"
        The solver option that counts its iterations (``max_iter``, ``n_epochs``, ``n_iter``,
        ``num_samples``): what ``factorbayes fit --max-iter`` sets.
    draws : str, optional
        The solver option with the number of draws from q (VI), or None (samplers keep their
        sweeps; point estimates have one): what ``factorbayes fit --draws`` sets.
    solver : str, optional
        ``"module:function"`` of the solver ``run`` calls, whose keyword parameters are the
        options `fit` accepts (listed when an unknown option is given); None: options are not checked.
    faster : tuple (str, float), optional
        For a solver whose every sweep is dense in users x items (batch SIBM), a pair
        (faster model name, seconds per user-item cell per factor per sweep measured here) used to warn
        before a long fit; None: no estimate.
    precheck : callable, optional
        ``precheck(obs, options)`` run by `fit` on the prepared `Observations` and the solver
        options before anything is compiled, raising ValueError for data or options the solver cannot
        fit (PSM's fully observed matrix, OVBFM's n_batches above the entries); None: no check.

    Raises
    ------
    None of its own: the fields are not checked on construction (`_register` checks ``values``
    against `VALUE_KINDS` and raises ValueError when an adapter is registered).

    Source: project addition (issue 10).
    """

    name: str
    values: str
    run: Callable
    mean: Callable
    uncertainty: str
    source: str
    fold_in: Any = None
    resumable: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)
    not_resumable: str = ""
    iterations: str = "max_iter"
    draws: str | None = None
    solver: str | None = None
    faster: tuple | None = None
    precheck: Callable | None = None


ADAPTERS: dict[str, Adapter] = {}


def _register(adapter: Adapter) -> Adapter:
    if adapter.values not in VALUE_KINDS:
        raise ValueError(f"{adapter.name}: values must be one of {VALUE_KINDS}")
    ADAPTERS[adapter.name] = adapter
    return adapter


def models() -> tuple[str, ...]:
    """Names accepted by `fit` (and by ``factorbayes fit MODEL``), in registration order.

    Imports `validation.frontdoor.api_models` on first use, which declares the adapters.

    Returns
    -------
    tuple of str
        The model names, e.g. ``("hpf", "hpf-gibbs", "sbmf", ...)``.

    Raises
    ------
    ImportError
        Not of its own: an import error of `validation.frontdoor.api_models` propagates.
    ValueError
        `_register`'s error for an adapter declared with an unknown ``values`` kind (a programming
        error of a declaration, never of the caller).

    Source: project addition (issue 10).
    """
    _ensure_adapters()
    return tuple(ADAPTERS)


def _ensure_adapters() -> None:
    if not ADAPTERS:
        from validation.frontdoor import api_models  # noqa: F401  (declares the adapters on import)


def _adapter(name: str) -> Adapter:
    _ensure_adapters()
    if name not in ADAPTERS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(ADAPTERS)}")
    return ADAPTERS[name]
