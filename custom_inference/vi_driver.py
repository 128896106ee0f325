"""The VI driver: `fit` runs any VI, MAP or SGD solver declared as a `base.Algorithm`; `run` is its loop.

The counterpart of `mcmc_driver` for the solvers that climb a target instead of sampling. A solver's
public ``fit`` validates its inputs, prepares its data and initial state, and calls `fit` with its
``ALGORITHM`` (init, step, target), a `FitOptions` (max_iter, tol and the options every driver
shares, `base.RunOptions`) and an `Output` (how its result is laid out: posterior, variational
parameters, trace group). Everything around the steps is written once, here: the loop, the
tolerance stop and the "not converged" report, the progress bar, checkpoints bound to their run,
SIGINT / SIGTERM, the timing of each phase, and one metadata layout for every result
(`DRIVER_ATTRS`, listed in `fit`'s docstring). Solvers whose iteration is not one ``step`` (HPF's
fused sweep, OVBFM's epochs of minibatches, RG's fresh hidden graph per sweep, SIBM SVI's blocks of
minibatches under one `lax.scan`) pass their ``sweep``; host-side state of a sweep (a numpy RNG, a
counter) travels in the checkpoints through ``save_extra`` / ``restore_extra``.

Conventions of `run` (and so of every solver):

- Every sweep counts as an iteration, the first (which compiles under ``jax.jit``) included:
  ``n_iter`` is the number of ``sweep`` calls made (of units, when a sweep reports several: a
  `Report` with ``units``, e.g. a block of minibatches).
- ``sweep(state, t) -> (state, report)``, t = 0, 1, ... the iterations done before it. ``report`` is
  one of ``None`` (nothing to record after this sweep), a scalar ELBO (float or 0-d array), an
  object with a field ``elbo`` and optionally ``rel_change`` (a solver's ``Info`` NamedTuple), or a
  `Report` (target value, statistics such as an SGD epoch's losses, units, an early stop).
  When the report carries ``rel_change`` it is used as is; otherwise the relative change is
  |L - L_prev| / |L_prev| against the previously recorded value (inf for the first).
  ``evaluate(state)``, when given, replaces the report's ELBO and is computed outside the sweep's
  timing (SVI epochs, whose sweep does not compute the full-data ELBO).
- Stopping rule: after a recorded value, stop when its relative change < ``tol`` (tol = 0 never
  stops early, since a relative change is >= 0), or when a `Report` says ``converged`` (a solver's
  own rule, e.g. BPR's held-out AUC); ``converged`` says whether either happened.
- Every recorded value is checked: a non-finite one raises FloatingPointError naming the sweep.
- Timing: ``sweep_seconds[t]`` is the wall time of sweep t alone (the call and
  ``jax.block_until_ready`` on the new state; not ``evaluate``, the callback or the bar);
  ``seconds`` is the wall time of the whole run (compilation, evaluations, callbacks and
  ``final_elbo`` included). `VIRun.seconds_after_compile` and `VIRun.seconds_per_iter` leave out
  the first sweep.

- Checkpoints: with ``checkpoint=PATH`` the state, the trace so far and the sweep index are written
  every ``checkpoint_every`` sweeps and at the end, atomically (a temporary file in the same folder,
  then `os.replace`); ``resume=True`` starts from an existing checkpoint, and a solver whose sweep
  keeps host-side state (a numpy RNG, an update counter) passes ``save_extra`` / ``restore_extra``.
  A resumed run equals the uninterrupted one bit for bit (tests/custom_inference/test_vi_driver.py,
  test_vi_protocol.py). Saved arrays keep their dtype (`load_checkpoint` returns numpy arrays).
  After every write the hooks of `base.on_checkpoint` are called (``validation.frontdoor.api`` stops a fit
  there to test resume == uninterrupted).
- Checkpoints are bound to their run (issue 24): a run fingerprint (``fingerprint=`` or the one the
  front door installs with `base.run_fingerprint`) is stored in every checkpoint, and resuming with
  another one raises ValueError naming every differing field before the first sweep; a resume says
  "resuming from iteration N of M" on stderr (with ``progress``); a damaged or foreign file is a
  ValueError naming it; a checkpoint whose arrays have other shapes (another K, other data sizes) is
  refused. SIGINT / SIGTERM during a checkpointed run finish the sweep in progress, write its
  checkpoint and raise `base.RunInterrupted` naming it (handlers restored afterwards). Each run is
  described to `base.collect_runs` (the front door's run summary).
- `host_seed` turns the key or int seed of a ``fit`` into the seed of its host-side numpy streams;
  `point_posterior` wraps a MAP / SGD point estimate as a one-chain, one-draw posterior.

`robbins_monro` step sizes for stochastic sweeps live in `custom_inference.schedules`.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from . import arviz_io, base

__all__ = ["FitOptions", "Output", "Report", "VIRun", "fit", "run", "check_fit_args", "given_state", "host_seed", "point_posterior",
           "save_checkpoint", "load_checkpoint", "default_trace", "DRIVER_ATTRS"]


class VIRun(NamedTuple):
    """What `run` returns.

    Parameters
    ----------
    state : pytree
        The solver state after the last sweep.
    elbo : numpy.ndarray, float64, shape (n_rec,)
        The recorded ELBO values, in order: ``init_elbo`` (if given), one per sweep that reported
        one, then ``final_elbo`` (if given).
    rel_change : numpy.ndarray, float64, shape (n_rec,)
        Relative change of each recorded value (inf where there is no previous value, unless the
        report carried its own).
    iteration : numpy.ndarray, int64, shape (n_rec,)
        Number of sweeps done when each value was recorded (0: ``init_elbo``; ``n_iter``:
        ``final_elbo``).
    n_iter : int
        Iterations (units) done, those of a resumed checkpoint included (<= max_iter).
    converged : bool
        Whether the tolerance (or a `Report` with ``converged``) stopped the run.
    seconds : float
        Wall seconds of the run in this process (a resumed run: since the resume).
    sweep_seconds : numpy.ndarray, float64, shape (n_sweeps,)
        Wall seconds of each sweep call (the first one compiles; a resumed run keeps the
        checkpoint's); n_sweeps = n_iter when every sweep is one unit.
    stats : dict, default {}
        Name -> float64 (n_reports,), the statistics recorded (`run`'s ``stats``, `Report`).
    stopped : bool, default False
        Whether a sweep's `Report` stopped the run (its own budget spent).
    resumed_from : int, default 0
        The iterations the resumed checkpoint held (0: a fresh run).
    sweeps_before : int, default 0
        The sweep calls the resumed checkpoint held (``sweep_seconds[sweeps_before:]`` are this
        process's).
    last_rel_change : float, default NaN
        The relative change of the last sweep's recorded value: the number the tolerance was tested
        on (``rel_change[-1]`` is the ``final_elbo`` record's when there is one).

    Raises
    ------
    None.

    Source: project addition (issue 25).
    """

    state: Any
    elbo: np.ndarray
    rel_change: np.ndarray
    iteration: np.ndarray
    n_iter: int
    converged: bool
    seconds: float
    sweep_seconds: np.ndarray
    stats: dict = {}
    stopped: bool = False
    resumed_from: int = 0
    sweeps_before: int = 0
    last_rel_change: float = float("nan")

    @property
    def seconds_after_compile(self) -> float:
        """Wall seconds of the sweeps after the first (compiling) one; 0.0 when only one ran.

        Returns
        -------
        float

        Raises
        ------
        None.

        Source: project addition.
        """
        return float(np.sum(self.sweep_seconds[1:]))

    @property
    def seconds_per_iter(self) -> float:
        """Mean wall seconds of a sweep after the first (compiling) one.

        ``seconds_after_compile / max(n_sweeps - 1, 1)``, so 0.0 when only one sweep ran (none was timed
        without compilation).

        Returns
        -------
        float

        Raises
        ------
        None.

        Source: project addition.
        """
        return self.seconds_after_compile / max(len(self.sweep_seconds) - 1, 1)


def check_fit_args(max_iter, tol, n_draws=None, *, max_iter_name: str = "max_iter") -> None:
    """Validate a driver's arguments before any computation.

    Every solver's ``fit`` checks its arguments first, so a bad one fails fast instead of after
    compilation.

    Parameters
    ----------
    max_iter : int >= 1
        The most iterations (not bool).
    tol : float >= 0
        The relative-change tolerance (not NaN).
    n_draws : int >= 0, optional
        Draws from q (not bool); None skips the check.
    max_iter_name : str, default "max_iter"
        The name of ``max_iter`` in the message (e.g. "max_epochs").

    Returns
    -------
    None
        Returns only when every argument is valid.

    Raises
    ------
    ValueError
        Naming the field; a ``tol`` that cannot be compared with 0 is a ValueError too.

    Source: project addition.
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


def given_state(init_state, like, dtype):
    """A user's ``init_state`` as the solver's State, checked field by field against a fresh one.

    Parameters
    ----------
    init_state : sequence of array_like
        The fields of a State, in its order (e.g. the ``state`` of an earlier fit).
    like : NamedTuple of jax.Array
        A State of the right shapes (the solver's ``init`` on the same data and K).
    dtype : numpy.float32 or numpy.float64
        The dtype the fields are cast to.

    Returns
    -------
    NamedTuple of jax.Array
        ``type(like)`` holding ``init_state``'s fields as ``dtype`` arrays.

    Raises
    ------
    ValueError
        ``init_state.<field> has shape ..., expected ...`` for the first field whose shape differs.
    TypeError
        When ``init_state`` has the wrong number of fields (from the NamedTuple).

    Source: project addition (written once for HPF, PSM and RG).
    """
    cls = type(like)
    given = cls(*(jnp.asarray(x, dtype) for x in init_state))
    for name, a, b in zip(cls._fields, given, like):
        if a.shape != b.shape:
            raise ValueError(f"init_state.{name} has shape {a.shape}, expected {b.shape}")
    return given


def _is_integral(x) -> bool:
    try:
        return int(x) == x
    except (TypeError, ValueError, OverflowError):
        return False


class Report(NamedTuple):
    """What a sweep may report to `run` when a scalar or an Info with ``elbo`` does not say enough.

    Parameters
    ----------
    elbo : float, optional
        The target (ELBO, log joint) of the new state, or None (nothing recorded this sweep).
    rel_change : float, optional
        Its relative change as the solver computed it, or None (the driver computes it).
    stats : mapping, optional
        Name -> scalar, recorded each time a report carries them (`VIRun.stats`, the trace group of
        `fit`): per-epoch diagnostics of SGD solvers, for example.
    units : int >= 1, default 1
        The iterations this sweep advanced (a block of minibatches counts as its minibatches;
        ``max_iter``, ``checkpoint_every`` and `VIRun.n_iter` count units).
    stop : bool, default False
        True when the sweep's own budget is spent (e.g. SIBM SVI's ``max_cells``): the run ends after
        this sweep (`VIRun.stopped`) and a resumed run does not go on.
    converged : bool, default False
        True when the solver's own convergence rule is met after this sweep (e.g. BPR's held-out AUC
        rule, `custom_inference.bpr.fit`): the run ends after it with `VIRun.converged` True (attrs
        ``converged`` 1), as when the tolerance stops it; a resumed run does not go on.

    Raises
    ------
    None.

    Source: project addition (issue 25; ``converged``: issue 27).
    """

    elbo: Any = None
    rel_change: Any = None
    stats: Any = None
    units: int = 1
    stop: bool = False
    converged: bool = False


def _unpack(report, stat_names):
    """(elbo or None, rel_change or None, stats dict, units, stop, converged) from a sweep's report."""
    if report is None:
        return None, None, {}, 1, False, False
    if isinstance(report, Report):
        value = None if report.elbo is None else float(report.elbo)
        rel = None if report.rel_change is None else float(report.rel_change)
        stats = {k: float(v) for k, v in dict(report.stats or {}).items()}
        return value, rel, stats, int(report.units), bool(report.stop), bool(report.converged)
    stats = {n: float(getattr(report, n)) for n in stat_names}
    if hasattr(report, "elbo"):
        rel = getattr(report, "rel_change", None)
        return float(report.elbo), (None if rel is None else float(rel)), stats, 1, False, False
    if stat_names:
        return None, None, stats, 1, False, False
    return float(report), None, {}, 1, False, False


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
    checkpoint=None,
    checkpoint_every: int = 10,
    resume: bool = False,
    save_extra: Callable[[], dict] | None = None,
    restore_extra: Callable[[dict], None] | None = None,
    fingerprint: dict | None = None,
    stats: tuple[str, ...] = (),
) -> VIRun:
    """Run ``sweep`` up to ``max_iter`` times with ELBO tracking, a progress bar and a tolerance stop.

    Parameters
    ----------
    sweep : callable (state, t) -> (state, report); t the iterations (units) done before this sweep
        (0-based; the sweep's index when every sweep is one unit). ``report``: None, a scalar ELBO, an
        Info with ``elbo`` (and ``rel_change``), or a `Report` (module docstring). Closes over data,
        hyperparameters, keys and step sizes.
    state : the initial state (any pytree of arrays).
    max_iter : int >= 1, the most iterations (units).
    tol : float >= 0, stop when the relative change of a recorded ELBO is < tol.
    progress : show a tqdm bar (ELBO and relative change as postfix).
    desc : the bar's label.
    init_elbo : ELBO of the initial state, recorded first (iteration 0, rel_change inf); use it when
        the sweep reports the ELBO *after* itself and the trace should start at the initial state.
    evaluate : state -> ELBO, called after each sweep outside its timing; overrides the report's ELBO.
    final_elbo : state -> ELBO, recorded once after the loop (iteration n_iter); use it when the
        sweep reports the ELBO of its *incoming* state, so the trace ends at the returned state.
    callback : (t, state, report) -> None after each sweep (after recording and the finiteness
        check, before the tolerance test): held-out metrics.
    checkpoint : path of a ``.npz`` checkpoint (None: none). Written atomically (`save_checkpoint`)
        each time the iterations done reach a multiple of ``checkpoint_every`` and once after the loop
        (before ``final_elbo``): the state, the recorded trace and statistics, the iterations done,
        whether the run converged or stopped, and ``save_extra()`` (host-side state of the sweep, e.g.
        a numpy RNG as JSON text).
    resume : with ``checkpoint`` and an existing file there, start from it instead of ``state``
        (``init_elbo`` is not recorded again; ``restore_extra(extra)`` hands back what
        ``save_extra`` stored): the sweeps continue at the saved index, so a deterministic sweep
        gives the uninterrupted run's states and trace bit for bit (tested). Saved float64 arrays
        stay float64 (run under ``jax.enable_x64`` to compute in them). A resume is announced on
        stderr ("resuming from iteration N of M", with ``progress``).
    checkpoint_every : int >= 1, default 10, iterations between checkpoints.
    save_extra : optional () -> dict of host-side state stored with each checkpoint (JSON-able).
    restore_extra : optional (dict) -> None, handed back what ``save_extra`` stored when resuming.
    fingerprint : mapping str -> JSON value describing the run (data hash, K, options, ...), stored
        in every checkpoint and compared on resume; default the one installed by
        `base.run_fingerprint` (None outside one: nothing stored or checked).
    stats : names of report fields (of an Info without ``elbo``, or beside it) recorded as floats each
        time a sweep reports (`VIRun.stats`); a `Report` brings its own ``stats``.

    Returns
    -------
    VIRun (state, elbo, rel_change, iteration, n_iter, converged, seconds, sweep_seconds, stats,
    stopped).

    Raises
    ------
    ValueError
        Bad max_iter or tol (`check_fit_args`), ``checkpoint_every`` not an integer >= 1 when
        ``checkpoint`` is given, and (from `load_checkpoint`, before any sweep) a resumed
        checkpoint whose state does not match ``state`` (structure or shapes), whose fingerprint
        differs from this run's (every differing field named), or a damaged file (the file named).
    base.RunInterrupted
        (A KeyboardInterrupt) when SIGINT or SIGTERM arrives during a checkpointed run: the sweep
        in progress finishes, its checkpoint is written, and the message names it.
    FloatingPointError
        A recorded ELBO that is not finite ("ELBO became nan at sweep 3; try float64").
    OSError
        The checkpoint cannot be written (`save_checkpoint`).
    Exception
        Whatever ``sweep``, ``evaluate``, ``final_elbo``, ``callback``, ``save_extra`` or
        ``restore_extra`` raise (the bar is closed first).

    Source: project addition.
    """
    check_fit_args(max_iter, tol)
    if checkpoint is not None and (isinstance(checkpoint_every, bool) or not _is_integral(checkpoint_every)
                                   or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
    fp = base.current_fingerprint() if fingerprint is None else dict(fingerprint)
    elbos: list[float] = []
    rels: list[float] = []
    iters: list[int] = []
    sweep_seconds: list[float] = []
    recorded: dict[str, list[float]] = {}
    converged = stopped = False
    first = 0
    t_start = time.perf_counter()
    if resume and checkpoint is not None and Path(checkpoint).exists():
        saved, first, tr, extra = load_checkpoint(checkpoint, state, fingerprint=fp)
        base.note(f"{desc}: resuming from iteration {first} of {max_iter} ({checkpoint})", progress)
        state = jax.tree_util.tree_map(lambda like, x: jax.numpy.asarray(x, dtype=x.dtype), state, saved)
        elbos, rels = [float(v) for v in tr["elbo"]], [float(v) for v in tr["rel_change"]]
        iters, sweep_seconds = [int(v) for v in tr["iteration"]], [float(v) for v in tr["sweep_seconds"]]
        recorded = {k[len(_STAT):]: [float(v) for v in a] for k, a in tr.items() if k.startswith(_STAT)}
        converged = bool(extra.pop("converged__"))
        stopped = bool(extra.pop("stopped__", False))
        if restore_extra is not None:
            restore_extra(extra)
        init_elbo = None
    calls_before = len(sweep_seconds)

    def save(n_done: int) -> None:
        trace = {"elbo": np.asarray(elbos, np.float64), "rel_change": np.asarray(rels, np.float64),
                 "iteration": np.asarray(iters, np.int64), "sweep_seconds": np.asarray(sweep_seconds, np.float64),
                 **{f"{_STAT}{k}": np.asarray(v, np.float64) for k, v in recorded.items()}}
        extra = {"converged__": np.asarray(converged), "stopped__": np.asarray(stopped),
                 **(save_extra() if save_extra is not None else {})}
        save_checkpoint(checkpoint, state, n_iter=n_done, trace=trace, extra=extra, fingerprint=fp)
        guard.written(checkpoint, n_done)
        base.checkpoint_written(checkpoint, n_done)

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
    bar.update(first)
    last_rel = rels[-1] if rels else float("nan")
    t = first
    with base.interruptible(desc, max_iter, enabled=checkpoint is not None) as guard:
        try:
            while t < max_iter and not (converged or stopped):
                t0 = time.perf_counter()
                state, report = sweep(state, t)
                jax.block_until_ready(state)
                sweep_seconds.append(time.perf_counter() - t0)
                value, given, values, units, stop, own_rule = _unpack(report, stats)
                done = t + units
                bar.update(units)
                rel = None
                if evaluate is not None or value is not None:
                    value, given = (float(evaluate(state)), None) if evaluate is not None else (value, given)
                    rel = record(value, given, done, f"at sweep {done}")
                    last_rel = rel
                    bar.set_postfix(elbo=f"{value:.6g}", rel_change=f"{rel:.2e}")
                for k, v in values.items():
                    recorded.setdefault(k, []).append(v)
                if callback is not None:
                    callback(t, state, report)
                before, t = t, done
                converged, stopped = (rel is not None and rel < tol) or own_rule, stop
                if converged or stopped:
                    break
                if checkpoint is not None and (t // checkpoint_every > before // checkpoint_every
                                               or guard.signum is not None):
                    save(t)  # a signal: the sweep just finished is checkpointed, then we stop
                if t < max_iter:  # (a signal during the last sweep: the run ends normally)
                    guard.check()
        finally:
            bar.close()
    if checkpoint is not None:
        save(t)
    if final_elbo is not None:
        record(float(final_elbo(state)), None, t, f"after sweep {t}")
    seconds = time.perf_counter() - start
    base.report_run(driver="vi", desc=desc, n_iter=t, max_iter=int(max_iter), converged=bool(converged),
                    tol=float(tol), last_rel_change=float(last_rel), resumed_from=int(first),
                    checkpoint=None if checkpoint is None else str(checkpoint), seconds=float(seconds),
                    first_iteration_seconds=float(sweep_seconds[calls_before])
                    if len(sweep_seconds) > calls_before else 0.0,
                    t_start=t_start, t_end=time.perf_counter())
    return VIRun(state, np.asarray(elbos, dtype=np.float64), np.asarray(rels, dtype=np.float64),
                 np.asarray(iters, dtype=np.int64), t, converged, seconds,
                 np.asarray(sweep_seconds, dtype=np.float64),
                 {k: np.asarray(v, np.float64) for k, v in recorded.items()}, stopped, first, calls_before,
                 float(last_rel))


_STAT = "stat__"


@dataclasses.dataclass(frozen=True)
class FitOptions(base.RunOptions):
    """The run options of `fit`: those of every driver (`base.RunOptions`) and the tolerance stop.

    Parameters
    ----------
    progress : bool, default True
        Show a tqdm bar.
    checkpoint : str or path-like, optional
        A ``.npz`` checkpoint (None: none written).
    checkpoint_every : int >= 1, default 10
        Iterations (VI sweeps) or blocks (samplers) between checkpoints.
    resume : bool, default False
        Continue from ``checkpoint`` when the file exists.
    dtype : numpy.float32 or numpy.float64, optional
        Float dtype of the state (None: the solver's default).
    callback : callable, optional
        Called after each iteration or block (its arguments are the driver's: see `vi_driver.run`
        and `mcmc_driver.sample`); an exception raised there stops the run.
    max_iter : int >= 1, default 100
        The most iterations (sweeps, epochs or minibatches: the solver says which).
    tol : float >= 0, default 0.0
        Stop when the relative change of a recorded target value is < tol (0: never).

    Raises
    ------
    None of its own: `check_fit_args` checks ``max_iter`` and ``tol`` when `fit` runs.

    Source: project addition (issue 25).
    """

    max_iter: int = 100
    tol: float = 0.0


class Output(NamedTuple):
    """How a solver's result is laid out: what a VI / MAP / SGD solver declares for `fit` besides its
    `base.Algorithm` (the counterpart of `mcmc_driver.SamplerSpec`).

    Parameters
    ----------
    model : str
        Attrs ``model`` (e.g. "hpf").
    method : str
        Attrs ``method`` (e.g. "cavi").
    posterior : callable
        Final state -> (dict name -> array (1, n_draws, ...), posterior_kind str): draws from q for
        VI ("draws from q" or "mean of q (n_draws=0)"), the point estimate as one draw for MAP and SGD
        ("point estimate").
    dims : mapping, default {}
        Variable -> list of ArviZ dims (posterior, parameters and trace variables).
    coords : mapping, default {}
        Dim -> coordinate values.
    params : callable, optional
        Final state -> dict name -> array, the ``variational_parameters`` group.
    groups : mapping, optional
        Further groups (name -> dict of arrays), e.g. RG's ``histogram``.
    trace_group : str, default "vi_trace"
        Name of the trace group ("sgd_trace" for SGD solvers).
    trace : callable, optional
        VIRun -> dict name -> 1-D array, the trace group's content (default `default_trace`: the
        target under the algorithm's ``target_name``, ``rel_change`` and the recorded statistics).
    result_trace : callable, optional
        VIRun -> float64 array, `base.FitResult.trace` (default the recorded target).
    final : callable, optional
        (state, VIRun) -> state, the result's state from the loop's (e.g. the State out of a (state,
        key) carry); applied before ``posterior`` and ``params``.
    source : str, optional
        Attrs ``source`` (None: the algorithm's).
    attrs : mapping or callable, optional
        The solver's own attrs (mapping, or VIRun -> mapping); must not repeat `DRIVER_ATTRS`.

    Raises
    ------
    None on construction; `fit` raises ValueError for ``attrs`` that repeat a driver attr.

    Source: project addition (issue 25).
    """

    model: str
    method: str
    posterior: Callable
    dims: Mapping = {}
    coords: Mapping = {}
    params: Callable | None = None
    groups: Mapping | None = None
    trace_group: str = "vi_trace"
    trace: Callable | None = None
    result_trace: Callable | None = None
    final: Callable | None = None
    source: str | None = None
    attrs: Any = None


#: The attrs `fit` writes on every group of every VI / MAP / SGD result (one layout; `fit`'s docstring
#: says what each holds), besides ``hyper_<field>`` for every hyperparameter and the solver's own.
DRIVER_ATTRS = ("model", "method", "algorithm", "kind", "target", "source", "posterior_kind", "K", "seed", "dtype",
                "converged", "stopped", "n_iter", "max_iter", "tol", "last_rel_change", "resumed_from", "seconds",
                "seconds_init", "seconds_first_iter", "seconds_per_iter", "seconds_output")


def default_trace(res: VIRun, target_name: str = "elbo") -> dict[str, np.ndarray]:
    """The trace group of a run.

    The recorded target values under ``target_name`` with their ``rel_change`` (when any was recorded,
    or when no statistic was) and every recorded statistic.

    Parameters
    ----------
    res : VIRun
        The driver's result.
    target_name : str, default "elbo"
        The name of the target in the group (e.g. "log_joint", "objective").

    Returns
    -------
    dict of str to numpy.ndarray, shape (T,), float64
        Name -> 1-D array over the recorded iterations.

    Raises
    ------
    None.

    Source: project addition (issue 25).
    """
    out = {target_name: res.elbo, "rel_change": res.rel_change} if res.elbo.size or not res.stats else {}
    return {**out, **res.stats}


def _as_callable(x, default):
    return default if x is True else (x if callable(x) else None)


def _state_dtype(state) -> str:
    for leaf in jax.tree_util.tree_leaves(state):
        if np.issubdtype(np.asarray(leaf).dtype, np.floating):
            return str(np.asarray(leaf).dtype)
    return "None"


def fit(algorithm: base.Algorithm, data, *, options: FitOptions, output: Output, key, K: int, hyper,
        state=None, sweep: Callable | None = None, init_options: Mapping | None = None,
        step_options: Mapping | None = None, init_elbo=False, evaluate=False, final_elbo=False,
        save_extra: Callable | None = None, restore_extra: Callable | None = None, stats: tuple = (),
        desc: str | None = None, seed: int | None = None) -> base.FitResult:
    """Run a VI, MAP or SGD solver declared as ``algorithm`` and return its `base.FitResult`.

    The algorithm supplies the steps, the driver everything around them: the loop, the tolerance stop
    and the "not converged" signal (attrs ``converged``), the progress bar, checkpoints bound to their
    run (`base.run_fingerprint`; a resumed run equals the uninterrupted one bit for bit), SIGINT /
    SIGTERM (`base.RunInterrupted` naming the last checkpoint), the timing of each phase and one
    metadata layout (all through `run`).

    Parameters
    ----------
    algorithm : base.Algorithm (kind "vi", "map" or "sgd").
    data : the data that ``algorithm.step`` and ``algorithm.target`` take (already validated and
        converted by the solver's ``fit``).
    options : FitOptions (max_iter, tol, progress, checkpoint, checkpoint_every, resume, callback;
        ``dtype`` is the solver's business).
    output : Output, the result's layout.
    key : jax PRNG key or int seed: ``algorithm.init``'s key (`base.as_key`); `host_seed` (key) is
        attrs ``seed`` unless ``seed`` is given.
    K : int >= 1
        The latent dimension.
    hyper : the hyperparameters (passed to init, step, target; ``hyper_<field>`` attrs).
    state : the initial state (default ``algorithm.init(as_key(key), data, K, hyper, **init_options)``).
    sweep : (state, t) -> (state, report) (`run`); default one ``algorithm.step(None, state, data,
        hyper, **step_options)`` whose Info is the report.
    init_options : mapping, keyword options of ``algorithm.init`` (default none).
    step_options : mapping, keyword options of ``algorithm.step`` in the default sweep (default none).
    init_elbo : True: record ``algorithm.target`` of the initial state first; a float: record that.
    evaluate : True: ``algorithm.target`` after each sweep replaces the report's value; or a callable
        state -> value.
    final_elbo : the same, recorded once after the loop.
    save_extra, restore_extra, stats : host-side state and recorded statistics (`run`).
    desc : the progress bar's label (default the algorithm's name and K).
    seed : attrs ``seed`` (default `host_seed` (key)).

    Returns
    -------
    `base.FitResult` (state: ``output.final`` of the loop's state; trace: ``output.result_trace`` or
    the recorded target values; idata). idata groups: ``posterior`` (``output.posterior``),
    ``variational_parameters`` (``output.params``), the trace group (``output.trace_group``, dim
    ``iteration`` or as ``output.dims`` says) and ``output.groups``. Attrs on every group, the same
    keys for every solver (`DRIVER_ATTRS`): model, method, algorithm (the Algorithm's name), kind,
    target (its target_name), source, posterior_kind, K, seed (an int; its decimal string when >= 2^63,
    which netCDF cannot store as an integer), dtype (of the state), converged (0/1:
    the tolerance stopped the run; 0 is the "not converged" report, also said on stderr with
    ``progress`` when tol > 0), stopped (0/1: the solver's own budget ended it), n_iter (iterations
    done, a resumed checkpoint's included), max_iter, tol, last_rel_change (of the last sweep's
    recorded target value, the one the tolerance was tested on; NaN when none was recorded),
    resumed_from (iterations the resumed checkpoint held; 0 for a fresh run), seconds (wall seconds
    of the loop in this process, the compiling first sweep included), seconds_init (the initial state
    and its target), seconds_first_iter (the first sweep of this process: compilation), seconds_per_iter
    (mean of the later sweeps; 0.0 when only one ran), seconds_output (draws from q and the result);
    then ``hyper_<field>`` of every hyperparameter (`base.hyper_attrs`) and ``output.attrs``.

    Raises
    ------
    ValueError
        Bad options (`check_fit_args`, ``checkpoint_every``), a checkpoint of another run or a
        damaged one (`run`), ``output.attrs`` that repeat a driver attr.
    TypeError
        A bad key.
    FloatingPointError
        A non-finite recorded target.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run.
    OSError
        The checkpoint cannot be written.
    Exception
        Whatever the algorithm's functions, ``sweep`` or the callbacks raise.

    Source: project addition (issue 25; after `mcmc_driver.sample`).
    """
    algorithm.check()
    check_fit_args(options.max_iter, options.tol)
    K = base.check_latent_dim(K)
    seed = host_seed(key) if seed is None else int(seed)
    target = lambda s: algorithm.target(s, data, hyper)  # noqa: E731
    t0 = time.perf_counter()
    if state is None:
        state = algorithm.init(base.as_key(key), data, K, hyper, **dict(init_options or {}))
    if sweep is None:
        opts = dict(step_options or {})

        def sweep(s, t):
            return algorithm.step(None, s, data, hyper, **opts)
    if init_elbo is True:
        first = float(target(state))
    else:
        first = None if init_elbo is False or init_elbo is None else float(init_elbo)
    seconds_init = time.perf_counter() - t0
    res = run(sweep, state, max_iter=options.max_iter, tol=options.tol, progress=options.progress,
              desc=desc or f"{algorithm.name} (K={K})", init_elbo=first, evaluate=_as_callable(evaluate, target),
              final_elbo=_as_callable(final_elbo, target), callback=options.callback, checkpoint=options.checkpoint,
              checkpoint_every=options.checkpoint_every, resume=options.resume, save_extra=save_extra,
              restore_extra=restore_extra, stats=stats)
    t1 = time.perf_counter()
    last_rel = res.last_rel_change  # the value the tolerance was tested on, as `run` reports it
    if options.tol > 0 and not (res.converged or res.stopped):  # the "not converged" report (also attrs converged)
        base.note(f"{desc or algorithm.name}: not converged after {res.n_iter} iterations (last relative change "
                  f"{last_rel:.2e} >= tol {options.tol:g}); fit again with a larger max_iter (a checkpoint "
                  "resumes only a run of the same settings)",
                  options.progress)
    final = res.state if output.final is None else output.final(res.state, res)
    posterior, kind = output.posterior(final)
    groups = {}
    if output.params is not None:
        groups["variational_parameters"] = {k: np.asarray(v) for k, v in output.params(final).items()}
    trace = default_trace(res, algorithm.target_name) if output.trace is None else output.trace(res)
    groups[output.trace_group] = {k: np.asarray(v) for k, v in trace.items()}
    groups.update(output.groups or {})
    own = dict((output.attrs(res) if callable(output.attrs) else output.attrs) or {})
    clash = sorted(set(own) & set(DRIVER_ATTRS))
    if clash:
        raise ValueError(f"{algorithm.name}: output.attrs repeat the driver's attrs {clash}")
    mine = res.sweep_seconds[res.sweeps_before:]  # the sweeps of this process
    attrs = {
        "model": output.model, "method": output.method, "algorithm": algorithm.name, "kind": algorithm.kind,
        "target": algorithm.target_name, "source": output.source or algorithm.source, "posterior_kind": kind,
        "K": K, "seed": seed if seed < 2**63 else str(seed), "dtype": _state_dtype(final),
        "converged": int(res.converged), "stopped": int(res.stopped), "n_iter": int(res.n_iter),
        "max_iter": int(options.max_iter), "tol": float(options.tol), "last_rel_change": last_rel,
        "resumed_from": int(res.resumed_from), "seconds": float(res.seconds),
        "seconds_init": float(seconds_init), "seconds_first_iter": float(mine[0]) if mine.size else 0.0,
        "seconds_per_iter": float(mine[1:].mean()) if mine.size > 1 else 0.0,
    }
    idata = arviz_io.to_inference_data(posterior, dims={k: list(v) for k, v in output.dims.items()},
                                       coords=dict(output.coords), extra_groups=groups,
                                       attrs={**attrs, **base.hyper_attrs(hyper), **own})
    for group in idata.groups():
        idata[group].attrs["seconds_output"] = float(time.perf_counter() - t1)
    result_trace = res.elbo if output.result_trace is None else output.result_trace(res)
    return base.FitResult(final, np.asarray(result_trace, np.float64), idata)


def host_seed(key) -> int:
    """An integer seed for host-side `numpy.random.Generator` streams, from the argument that gives the PRNG key.

    The host streams are draws from q, minibatch partitions and hidden graphs.

    Parameters
    ----------
    key : int or jax.Array
        An integer seed (returned as is) or a JAX PRNG key (raw uint32 (2,) or typed): the big-endian
        integer of its key data, so ``host_seed(jax.random.PRNGKey(s)) == s`` for 0 <= s < 2^32 and an
        integer seed and its key give the same host stream.

    Returns
    -------
    int
        A Python int >= 0.

    Raises
    ------
    TypeError
        As `base.as_key`, for anything that is neither an integer nor a key.

    Source: project addition.
    """
    if isinstance(key, numbers.Integral) and not isinstance(key, (bool, np.bool_)):
        return int(key)
    key = base.as_key(key)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    words = np.asarray(key).astype(np.uint64).ravel()
    out = 0
    for w in words:
        out = (out << 32) | int(w)
    return out


def point_posterior(arrays) -> dict[str, np.ndarray]:
    """A point estimate as a posterior of one chain and one draw: each array gets leading axes (1, 1).

    Parameters
    ----------
    arrays : mapping of str to array_like
        Name -> array of any shape (...) and dtype.

    Returns
    -------
    dict of str to numpy.ndarray
        Name -> array of shape (1, 1, ...), dtypes kept.

    Raises
    ------
    None of its own (``arrays.items()`` / `numpy.asarray` errors propagate, e.g. AttributeError for a
    non-mapping).

    Source: project addition (the protocol's MAP / SGD posterior group).
    """
    return {k: np.asarray(v)[None, None] for k, v in arrays.items()}


_CKPT_STATE = "state__"
_CKPT_TRACE = ("elbo", "rel_change", "iteration", "sweep_seconds")


def save_checkpoint(path, state, *, n_iter: int, trace: dict | None = None, extra: dict | None = None,
                    fingerprint: dict | None = None) -> Path:
    """Write a run's state, its trace and extra arrays to ``path`` (``.npz``) atomically.

    A temporary file in the same folder, then `os.replace`, so a reader sees the old or the new
    checkpoint, never half of one. Arrays keep their dtype (float64 stays float64). The folder is
    created when missing.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file.
    state : pytree of arrays
        The solver state (any shapes and dtypes).
    n_iter : int
        Sweeps done.
    trace : dict of str to array_like, shape (T,), optional
        Name -> 1-D trace array.
    extra : dict of str to array_like, optional
        Name -> array or scalar (e.g. a host RNG state as JSON text).
    fingerprint : mapping of str to JSON value, optional
        The run's fingerprint, stored as JSON under `base.FINGERPRINT_KEY`; default the one installed by
        `base.run_fingerprint` (None outside one: none stored).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    OSError
        When the folder cannot be created or written.
    TypeError
        For a fingerprint that is not JSON-serializable.

    Source: project addition.
    """
    import json

    fingerprint = base.current_fingerprint() if fingerprint is None else fingerprint
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    leaves, _ = jax.tree_util.tree_flatten(state)
    arrays = {f"{_CKPT_STATE}{i}": np.asarray(v) for i, v in enumerate(leaves)}
    arrays.update({f"trace__{k}": np.asarray(v) for k, v in (trace or {}).items()})
    arrays.update({f"extra__{k}": np.asarray(v) for k, v in (extra or {}).items()})
    arrays["n_iter__"] = np.asarray(int(n_iter), np.int64)
    arrays["n_leaves__"] = np.asarray(len(leaves), np.int64)
    if fingerprint is not None:
        arrays[base.FINGERPRINT_KEY] = np.asarray(json.dumps(dict(fingerprint), sort_keys=True))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        base.usual_file_mode(fd)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path, like, *, fingerprint: dict | None = None):
    """Read a checkpoint written by `save_checkpoint`, checking it belongs to this run first.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file.
    like : pytree of arrays
        The structure and leaf shapes of the saved state (e.g. the initial state).
    fingerprint : mapping of str to JSON value, optional
        This run's fingerprint; default the one installed by `base.run_fingerprint` (None outside
        one: not checked).

    Returns
    -------
    state : pytree of numpy.ndarray
        The state, structured as ``like``; leaves of the saved dtypes (float64 is kept even with
        jax_enable_x64 off: the caller decides when to move them to the device).
    n_iter : int
        Sweeps done.
    trace : dict of str to numpy.ndarray
        The saved trace arrays.
    extra : dict of str to numpy.ndarray
        The saved extra arrays.

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path``.
    ValueError
        Naming the file: when it is damaged or not a checkpoint (`base.checkpoint_damaged`; read with
        ``allow_pickle=False``), when its fingerprint differs from ``fingerprint`` (every differing
        field named, `base.check_fingerprint`), or when its state's structure or array shapes do not
        match ``like`` (another K or other data sizes).

    Source: project addition.
    """
    import json

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    fingerprint = base.current_fingerprint() if fingerprint is None else fingerprint
    treedef = jax.tree_util.tree_structure(like)
    try:
        with np.load(path, allow_pickle=False) as f:
            saved_fp = json.loads(str(f[base.FINGERPRINT_KEY])) if base.FINGERPRINT_KEY in f.files else None
            n = int(f["n_leaves__"])
            leaves = [f[f"{_CKPT_STATE}{i}"] for i in range(n)]
            trace = {k[len("trace__"):]: f[k] for k in f.files if k.startswith("trace__")}
            extra = {k[len("extra__"):]: f[k] for k in f.files if k.startswith("extra__")}
            n_iter = int(f["n_iter__"])
    except Exception as exc:  # BadZipFile, KeyError (not our layout), OSError, ValueError (pickled data), JSON
        raise base.checkpoint_damaged(path, exc) from exc
    base.check_fingerprint(path, saved_fp, fingerprint)
    if n != treedef.num_leaves:
        raise ValueError(f"checkpoint {path} holds {n} state arrays, the solver's state has {treedef.num_leaves}; "
                         f"it was written by another solver: delete {path} to start fresh")
    for i, (a, b) in enumerate(zip(leaves, jax.tree_util.tree_leaves(like))):
        if np.shape(a) != np.shape(b):
            raise ValueError(f"checkpoint {path}: state array {i} has shape {np.shape(a)}, this run's has "
                             f"{np.shape(b)} (written with another K or other data sizes); delete {path} or "
                             "choose another checkpoint folder to start fresh")
    return jax.tree_util.tree_unflatten(treedef, leaves), n_iter, trace, extra
