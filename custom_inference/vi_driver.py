"""The one loop that runs a variational solver's sweeps (DESIGN.md: "a thin driver `fit(...)`").

Every coordinate-ascent or stochastic VI driver of the package does the same things around its
sweeps: run up to ``max_iter`` of them, record the ELBO and its relative change, refuse a
non-finite ELBO, show a tqdm bar, stop on a tolerance, and time the sweeps with the compiling
first sweep told apart. `run` does this once; a solver's ``fit`` supplies the sweep (a closure
over its data and hyperparameters) and builds its own result object from the returned `VIRun`.

Conventions (the same for every solver that uses `run`):

- Every sweep counts as an iteration, the first (which compiles under ``jax.jit``) included:
  ``n_iter`` is the number of ``sweep`` calls made.
- ``sweep(state, t) -> (state, report)``, t = 0, 1, ... the sweep's index. ``report`` is one of
  ``None`` (nothing to record after this sweep), a scalar ELBO (float or 0-d array), or an
  object with a field ``elbo`` and optionally ``rel_change`` (a solver's ``Info`` NamedTuple).
  When the report carries ``rel_change`` it is used as is; otherwise the relative change is
  |L - L_prev| / |L_prev| against the previously recorded value (inf for the first).
  ``evaluate(state)``, when given, replaces the report's ELBO and is computed outside the sweep's
  timing (SVI epochs, whose sweep does not compute the full-data ELBO).
- Stopping rule: after a recorded value, stop when its relative change < ``tol`` (tol = 0 never
  stops early, since a relative change is >= 0); ``converged`` says whether that happened.
- Every recorded value is checked: a non-finite one raises FloatingPointError naming the sweep.
- Timing: ``sweep_seconds[t]`` is the wall time of sweep t alone (the call and
  ``jax.block_until_ready`` on the new state; not ``evaluate``, the callback or the bar);
  ``seconds`` is the wall time of the whole run (compilation, evaluations, callbacks and
  ``final_elbo`` included). `VIRun.seconds_after_compile` and `VIRun.seconds_per_iter` leave out
  the first sweep.

`robbins_monro` step sizes for stochastic sweeps live in `custom_inference.schedules`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

__all__ = ["VIRun", "run", "check_fit_args"]


class VIRun(NamedTuple):
    """What `run` returns.

    state : the solver state after the last sweep (any pytree).
    elbo : float64 (n_rec,) the recorded ELBO values, in order: ``init_elbo`` (if given), one per
        sweep that reported one, then ``final_elbo`` (if given).
    rel_change : float64 (n_rec,) relative change of each recorded value (inf where there is no
        previous value, unless the report carried its own).
    iteration : int64 (n_rec,) number of sweeps done when each value was recorded (0: ``init_elbo``;
        ``n_iter``: ``final_elbo``).
    n_iter : int, sweeps run (1 <= n_iter <= max_iter).
    converged : bool, whether the tolerance stopped the run.
    seconds : float, wall seconds of the whole run.
    sweep_seconds : float64 (n_iter,) wall seconds of each sweep (the first one compiles).
    """

    state: Any
    elbo: np.ndarray
    rel_change: np.ndarray
    iteration: np.ndarray
    n_iter: int
    converged: bool
    seconds: float
    sweep_seconds: np.ndarray

    @property
    def seconds_after_compile(self) -> float:
        """Wall seconds of the sweeps after the first (compiling) one; 0.0 when only one ran."""
        return float(np.sum(self.sweep_seconds[1:]))

    @property
    def seconds_per_iter(self) -> float:
        """Mean wall seconds of a sweep after the first (compiling) one: seconds_after_compile /
        max(n_iter - 1, 1), so 0.0 when only one sweep ran (none was timed without compilation)."""
        return self.seconds_after_compile / max(self.n_iter - 1, 1)


def check_fit_args(max_iter, tol, n_draws=None, *, max_iter_name: str = "max_iter") -> None:
    """Validate a driver's arguments before any computation (DESIGN.md conventions).

    max_iter : int >= 1 (not bool); tol : float >= 0 (not NaN); n_draws : int >= 0 (not bool), or
    None to skip. Raises ValueError naming the field (``max_iter_name`` for the first, e.g.
    "max_epochs").
    """
    if isinstance(max_iter, bool) or not _is_integral(max_iter) or max_iter < 1:
        raise ValueError(f"{max_iter_name} must be an integer >= 1, got {max_iter!r}")
    try:
        tol_ok = tol >= 0
    except TypeError:
        tol_ok = False
    if not tol_ok:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    if n_draws is not None and (isinstance(n_draws, bool) or not _is_integral(n_draws) or n_draws < 0):
        raise ValueError(f"n_draws must be an integer >= 0, got {n_draws!r}")


def _is_integral(x) -> bool:
    try:
        return int(x) == x
    except (TypeError, ValueError, OverflowError):
        return False


def _unpack(report):
    """(elbo, rel_change or None) from a sweep's report (scalar, or object with .elbo[, .rel_change])."""
    if hasattr(report, "elbo"):
        rel = getattr(report, "rel_change", None)
        return float(report.elbo), (None if rel is None else float(rel))
    return float(report), None


def run(
    sweep: Callable[[Any, int], tuple[Any, Any]],
    state,
    *,
    max_iter: int,
    tol: float = 0.0,
    progress: bool = True,
    desc: str = "VI",
    init_elbo: float | None = None,
    evaluate: Callable[[Any], Any] | None = None,
    final_elbo: Callable[[Any], Any] | None = None,
    callback: Callable[[int, Any, Any], None] | None = None,
) -> VIRun:
    """Run ``sweep`` up to ``max_iter`` times with ELBO tracking, a progress bar and a tolerance stop.

    Parameters
    ----------
    sweep : callable (state, t) -> (state, report); t the 0-based sweep index (module docstring
        for what ``report`` may be). Closes over data, hyperparameters, keys and step sizes.
    state : the initial state (any pytree of arrays).
    max_iter : int >= 1, the most sweeps; tol : float >= 0, stop when the relative change of a
        recorded ELBO is < tol.
    progress : show a tqdm bar (ELBO and relative change as postfix); desc : its label.
    init_elbo : ELBO of the initial state, recorded first (iteration 0, rel_change inf); use it when
        the sweep reports the ELBO *after* itself and the trace should start at the initial state.
    evaluate : state -> ELBO, called after each sweep outside its timing; overrides the report's ELBO.
    final_elbo : state -> ELBO, recorded once after the loop (iteration n_iter); use it when the
        sweep reports the ELBO of its *incoming* state, so the trace ends at the returned state.
    callback : (t, state, report) -> None after each sweep (after recording and the finiteness
        check, before the tolerance test): checkpoints, held-out metrics.

    Returns
    -------
    VIRun (state, elbo, rel_change, iteration, n_iter, converged, seconds, sweep_seconds).

    Raises
    ------
    ValueError for bad max_iter or tol (`check_fit_args`).
    FloatingPointError when a recorded ELBO is not finite ("ELBO became nan at sweep 3; try float64").
    Whatever ``sweep``, ``evaluate``, ``final_elbo`` or ``callback`` raise (the bar is closed first).
    """
    check_fit_args(max_iter, tol)
    elbos: list[float] = []
    rels: list[float] = []
    iters: list[int] = []
    sweep_seconds: list[float] = []
    converged = False

    def record(value: float, rel: float | None, it: int, where: str) -> float:
        if not np.isfinite(value):
            raise FloatingPointError(f"ELBO became {value} {where}; try float64")
        if rel is None:
            rel = abs(value - elbos[-1]) / abs(elbos[-1]) if elbos else np.inf
        elbos.append(value), rels.append(rel), iters.append(it)
        return rel

    if init_elbo is not None:
        record(float(init_elbo), np.inf, 0, "at the initial state")
    start = time.perf_counter()
    bar = tqdm(total=max_iter, desc=desc, disable=not progress, leave=False)
    try:
        for t in range(max_iter):
            t0 = time.perf_counter()
            state, report = sweep(state, t)
            jax.block_until_ready(state)
            sweep_seconds.append(time.perf_counter() - t0)
            bar.update(1)
            rel = None
            if evaluate is not None or report is not None:
                value, given = (float(evaluate(state)), None) if evaluate is not None else _unpack(report)
                rel = record(value, given, t + 1, f"at sweep {t + 1}")
                bar.set_postfix(elbo=f"{value:.6g}", rel_change=f"{rel:.2e}")
            if callback is not None:
                callback(t, state, report)
            if rel is not None and rel < tol:
                converged = True
                break
    finally:
        bar.close()
    n_iter = len(sweep_seconds)
    if final_elbo is not None:
        record(float(final_elbo(state)), None, n_iter, f"after sweep {n_iter}")
    seconds = time.perf_counter() - start
    return VIRun(state, np.asarray(elbos, dtype=np.float64), np.asarray(rels, dtype=np.float64),
                 np.asarray(iters, dtype=np.int64), n_iter, converged, seconds,
                 np.asarray(sweep_seconds, dtype=np.float64))
