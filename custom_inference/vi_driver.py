"""The one loop that runs a variational solver's sweeps (the thin driver behind every solver's ``fit``).

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

import numbers
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from . import base

__all__ = ["VIRun", "run", "check_fit_args", "host_seed", "point_posterior", "save_checkpoint", "load_checkpoint"]


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
    """Validate a driver's arguments before any computation (every solver's ``fit`` checks its
    arguments first, so a bad one fails fast instead of after compilation).

    max_iter : int >= 1 (not bool); tol : float >= 0 (not NaN); n_draws : int >= 0 (not bool), or
    None to skip. Returns None. Raises ValueError naming the field (``max_iter_name`` for the first,
    e.g. "max_epochs"); a ``tol`` that cannot be compared with 0 is a ValueError too.
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
    checkpoint=None,
    checkpoint_every: int = 10,
    resume: bool = False,
    save_extra: Callable[[], dict] | None = None,
    restore_extra: Callable[[dict], None] | None = None,
    fingerprint: dict | None = None,
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
        check, before the tolerance test): held-out metrics.
    checkpoint : path of a ``.npz`` checkpoint (None: none). Written atomically (`save_checkpoint`)
        after every ``checkpoint_every``-th sweep and once after the loop (before ``final_elbo``):
        the state, the recorded trace, the sweeps done, whether the run converged, and
        ``save_extra()`` (host-side state of the sweep, e.g. a numpy RNG as JSON text).
    resume : with ``checkpoint`` and an existing file there, start from it instead of ``state``
        (``init_elbo`` is not recorded again; ``restore_extra(extra)`` hands back what
        ``save_extra`` stored): the sweeps continue at the saved index, so a deterministic sweep
        gives the uninterrupted run's states and trace bit for bit (tested). Saved float64 arrays
        stay float64 (run under ``jax.enable_x64`` to compute in them). A resume is announced on
        stderr ("resuming from iteration N of M", with ``progress``).
    fingerprint : mapping str -> JSON value describing the run (data hash, K, options, ...), stored
        in every checkpoint and compared on resume; default the one installed by
        `base.run_fingerprint` (None outside one: nothing stored or checked).

    Returns
    -------
    VIRun (state, elbo, rel_change, iteration, n_iter, converged, seconds, sweep_seconds).

    Raises
    ------
    ValueError for bad max_iter or tol (`check_fit_args`), for ``checkpoint_every`` not an integer
    >= 1 when ``checkpoint`` is given, and (from `load_checkpoint`, before any sweep) when a resumed
    checkpoint's state does not match ``state`` (structure or shapes), when its fingerprint differs
    from this run's (every differing field named), or when the file is damaged (the file named).
    base.RunInterrupted (a KeyboardInterrupt) when SIGINT or SIGTERM arrives during a checkpointed
    run: the sweep in progress finishes, its checkpoint is written, and the message names it.
    FloatingPointError when a recorded ELBO is not finite ("ELBO became nan at sweep 3; try float64").
    OSError when the checkpoint cannot be written (`save_checkpoint`).
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
    converged = False
    first = 0
    t_start = time.perf_counter()
    if resume and checkpoint is not None and Path(checkpoint).exists():
        saved, first, tr, extra = load_checkpoint(checkpoint, state, fingerprint=fp)
        base.note(f"{desc}: resuming from iteration {first} of {max_iter} ({checkpoint})", progress)
        state = jax.tree_util.tree_map(lambda like, x: jax.numpy.asarray(x, dtype=x.dtype), state, saved)
        elbos, rels = [float(v) for v in tr["elbo"]], [float(v) for v in tr["rel_change"]]
        iters, sweep_seconds = [int(v) for v in tr["iteration"]], [float(v) for v in tr["sweep_seconds"]]
        converged = bool(extra.pop("converged__"))
        if restore_extra is not None:
            restore_extra(extra)
        init_elbo = None

    def save(n_done: int, conv: bool) -> None:
        trace = {"elbo": np.asarray(elbos, np.float64), "rel_change": np.asarray(rels, np.float64),
                 "iteration": np.asarray(iters, np.int64), "sweep_seconds": np.asarray(sweep_seconds, np.float64)}
        extra = {"converged__": np.asarray(conv), **(save_extra() if save_extra is not None else {})}
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
    with base.interruptible(desc, max_iter, enabled=checkpoint is not None) as guard:
        try:
            for t in range(first, max_iter if not converged else first):
                t0 = time.perf_counter()
                state, report = sweep(state, t)
                jax.block_until_ready(state)
                sweep_seconds.append(time.perf_counter() - t0)
                bar.update(1)
                rel = None
                if evaluate is not None or report is not None:
                    value, given = (float(evaluate(state)), None) if evaluate is not None else _unpack(report)
                    rel = record(value, given, t + 1, f"at sweep {t + 1}")
                    last_rel = rel
                    bar.set_postfix(elbo=f"{value:.6g}", rel_change=f"{rel:.2e}")
                if callback is not None:
                    callback(t, state, report)
                if rel is not None and rel < tol:
                    converged = True
                    break
                if checkpoint is not None and ((t + 1) % checkpoint_every == 0 or guard.signum is not None):
                    save(t + 1, False)  # a signal: the sweep just finished is checkpointed, then we stop
                if t + 1 < max_iter:  # (a signal during the last sweep: the run ends normally)
                    guard.check()
        finally:
            bar.close()
    n_iter = len(sweep_seconds)
    if checkpoint is not None:
        save(n_iter, converged)
    if final_elbo is not None:
        record(float(final_elbo(state)), None, n_iter, f"after sweep {n_iter}")
    seconds = time.perf_counter() - start
    base.report_run(driver="vi", desc=desc, n_iter=n_iter, max_iter=int(max_iter), converged=bool(converged),
                    tol=float(tol), last_rel_change=float(last_rel), resumed_from=int(first),
                    checkpoint=None if checkpoint is None else str(checkpoint), seconds=float(seconds),
                    first_iteration_seconds=float(sweep_seconds[first]) if len(sweep_seconds) > first else 0.0,
                    t_start=t_start, t_end=time.perf_counter())
    return VIRun(state, np.asarray(elbos, dtype=np.float64), np.asarray(rels, dtype=np.float64),
                 np.asarray(iters, dtype=np.int64), n_iter, converged, seconds,
                 np.asarray(sweep_seconds, dtype=np.float64))


def host_seed(key) -> int:
    """An integer seed for host-side `numpy.random.Generator` streams (draws from q, minibatch
    partitions, hidden graphs), from the same argument that gives the PRNG key.

    key : an integer seed (returned as is) or a JAX PRNG key (raw uint32 (2,) or typed): the big-endian
        integer of its key data, so ``host_seed(jax.random.PRNGKey(s)) == s`` for 0 <= s < 2^32 and an
        integer seed and its key give the same host stream.
    Returns a Python int >= 0. Raises TypeError as `base.as_key`. Source: project addition.
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
    """A point estimate as a posterior of one chain and one draw: each array gets leading axes
    (1, 1). arrays : mapping name -> array (...). Returns dict name -> numpy array (1, 1, ...).
    Dtypes are kept. Raises nothing of its own (``arrays.items()`` / `numpy.asarray` errors
    propagate, e.g. AttributeError for a non-mapping).
    Source: project addition (the protocol's MAP / SGD posterior group)."""
    return {k: np.asarray(v)[None, None] for k, v in arrays.items()}


_CKPT_STATE = "state__"
_CKPT_TRACE = ("elbo", "rel_change", "iteration", "sweep_seconds")


def save_checkpoint(path, state, *, n_iter: int, trace: dict | None = None, extra: dict | None = None,
                    fingerprint: dict | None = None) -> Path:
    """Write a run's state (any pytree of arrays), its trace and extra arrays to ``path`` (``.npz``)
    atomically: a temporary file in the same folder, then `os.replace`, so a reader sees the old or
    the new checkpoint, never half of one. Arrays keep their dtype (float64 stays float64).

    path : str or Path; state : pytree of arrays; n_iter : sweeps done; trace : name -> 1-D array;
    extra : name -> array or scalar (e.g. a host RNG state as JSON text); fingerprint : the run's
    fingerprint (mapping str -> JSON value), stored as JSON under `base.FINGERPRINT_KEY`; default the
    one installed by `base.run_fingerprint` (None outside one: none stored). Returns the Path.
    Raises OSError when the folder cannot be written; TypeError for a fingerprint that is not
    JSON-serializable. Source: project addition.
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

    path : str or Path; like : a pytree with the structure and leaf shapes of the saved state (e.g.
    the initial state); fingerprint : this run's fingerprint (mapping str -> JSON value), default the
    one installed by `base.run_fingerprint`; None outside one: not checked.
    Returns (state, n_iter, trace dict, extra dict). The state's leaves are numpy arrays of the saved
    dtypes (float64 is kept even with jax_enable_x64 off: the caller decides when to move them to
    the device).
    Raises FileNotFoundError; ValueError (naming the file) when the file is damaged or not a
    checkpoint (`base.checkpoint_damaged`; read with ``allow_pickle=False``), when its fingerprint
    differs from ``fingerprint`` (every differing field named, `base.check_fingerprint`), or when its
    state's structure or array shapes do not match ``like`` (another K or other data sizes).
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
