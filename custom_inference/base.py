"""The algorithm protocol: what every solver module of `custom_inference` exports.

Learned from BlackJAX (``SamplingAlgorithm(init, step)``, ``VIAlgorithm``) and NumPyro
(``MCMCKernel``): a solver is a small record of pure functions over explicit state, and the
drivers (`custom_inference.vi_driver` for sweeps of coordinate-ascent or stochastic VI,
`custom_inference.mcmc_driver` for multi-chain samplers) do everything around the steps.

One convention for every model (project addition; ../seeds have no API):

- Argument order: the PRNG key first, then the data, then the latent dimension, always named
  ``K``, then the hyperparameters: ``init(key, data, K, hyper, **options) -> State`` and
  ``step(key, state, data, hyper, **options) -> (State, Info)``.
- ``Info`` describes the *new* state: a VI step's ``Info.elbo`` is the ELBO after the step, a
  sampler's ``Info.log_joint`` is the log joint of the state it returns.
- ``target(state, data, hyper) -> scalar`` is the function the solver climbs or samples: the
  ELBO for VI (its own function, so tests can differentiate it), the log joint density for
  samplers and MAP, the training objective for SGD baselines.
- ``dims`` names the ArviZ dimensions of every State field (without ``chain`` and ``draw``),
  so drivers and the front door build `arviz.InferenceData` with the same coordinates.
- Run options (progress, checkpoints, resume, dtype, callback) are one dataclass shared by both
  drivers, `RunOptions`; each driver adds its own fields (`vi_driver.FitOptions`: max_iter, tol;
  `mcmc_driver.SampleOptions`: chains, warm-up, draws, thinning, ...).
- Public ``fit`` functions of VI, MAP and SGD solvers return `FitResult`; samplers return
  `arviz.InferenceData`; both carry a ``posterior`` group (draws from q for VI, the point
  estimate as one draw for MAP and SGD).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import numbers
import signal
import sys
import threading
from typing import Any, Callable, Mapping, NamedTuple

import jax
import numpy as np

__all__ = ["Algorithm", "FitResult", "Interrupted", "KINDS", "RunInterrupted", "RunOptions", "TARGETS", "as_key", "check_positive_hyper",
           "check_fingerprint", "check_latent_dim", "hyper_attrs", "checkpoint_damaged", "checkpoint_written", "collect_runs",
           "current_fingerprint", "fingerprint_differences", "interruptible", "note", "on_checkpoint",
           "read_checkpoint_fingerprint", "report_run", "run_fingerprint", "FINGERPRINT_KEY", "usual_file_mode"]

KINDS = ("vi", "mcmc", "map", "sgd")
TARGETS = ("elbo", "log_joint", "objective")


class Algorithm(NamedTuple):
    """One solver, declared once in its module (``ALGORITHM = Algorithm(...)``).

    Parameters
    ----------
    name : str
        The registry name, e.g. ``"hpf-cavi"``, ``"sbmf-gibbs"``.
    kind : str
        One of `KINDS` ("vi", "mcmc", "map", "sgd").
    init : callable
        ``init(key, data, K, hyper, **options) -> State`` (State: NamedTuple of arrays).
    step : callable
        ``step(key, state, data, hyper, **options) -> (State, Info)``; Info of the new state.
    target : callable
        ``target(state, data, hyper) -> float scalar`` (ELBO, log joint or objective).
    target_name : str
        One of `TARGETS`, what ``target`` computes.
    dims : mapping
        State field -> tuple of ArviZ dimension names (``("user", "component")``).
    source : str
        Seed file and section (or "project addition").

    Raises
    ------
    None on construction; `check` validates the declaration.

    Source: project addition (issue 25).
    """

    name: str
    kind: str
    init: Callable
    step: Callable
    target: Callable
    target_name: str
    dims: Mapping[str, tuple[str, ...]]
    source: str

    def check(self) -> "Algorithm":
        """Validate the declaration.

        Returns
        -------
        Algorithm
            ``self``.

        Raises
        ------
        ValueError
            An unknown ``kind`` or ``target_name``, or ``init`` / ``step`` / ``target`` not callable.

        Source: project addition (issue 25).
        """
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.target_name not in TARGETS:
            raise ValueError(f"{self.name}: target_name must be one of {TARGETS}, got {self.target_name!r}")
        for f in ("init", "step", "target"):
            if not callable(getattr(self, f)):
                raise ValueError(f"{self.name}: {f} must be callable")
        return self


class FitResult(NamedTuple):
    """What the ``fit`` function of every VI, MAP and SGD solver returns.

    Parameters
    ----------
    state : NamedTuple of jax arrays
        The solver's final State.
    trace : numpy.ndarray, float64, shape (n_rec,)
        The recorded target values (ELBO for VI, log joint for MAP, objective for SGD), in order.
    idata : arviz.InferenceData
        A ``posterior`` group (draws from q for VI, the point estimate as one chain of one draw for
        MAP/SGD), plus the solver's own groups (e.g. ``variational_parameters``, ``vi_trace``) and
        attrs (model, method, source, settings).

    Raises
    ------
    None.

    Source: project addition (issue 25).
    """

    state: Any
    trace: np.ndarray
    idata: Any

    @property
    def elbo(self) -> np.ndarray:
        """Alias of `trace` (the ELBO trace for VI solvers).

        Returns
        -------
        numpy.ndarray
            ``trace``.

        Raises
        ------
        None.

        Source: project addition.
        """
        return self.trace


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The run options every driver takes (`vi_driver.fit` / `vi_driver.FitOptions`,
    `mcmc_driver.sample` / `mcmc_driver.SampleOptions` add their own fields to these).

    Build one with keywords, or with `of` from an options object and keyword overrides.

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
        Float dtype of the state (None: the solver's default); anything `numpy.dtype` takes.
    callback : callable, optional
        Called after each iteration or block (its arguments are the driver's: see `vi_driver.run` and
        `mcmc_driver.sample`); an exception raised there stops the run.

    Raises
    ------
    ValueError
        On construction, for a ``dtype`` other than float32 / float64 (`compute_dtype`); the other
        fields are checked by the drivers.

    Source: project addition (issue 25).
    """

    progress: bool = True
    checkpoint: Any = None
    checkpoint_every: int = 10
    resume: bool = False
    dtype: Any = None
    callback: Callable | None = None

    def __post_init__(self):
        compute_dtype(self.dtype)  # ValueError for float16, bfloat16, integers (`compute_dtype`)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in order.

        Returns
        -------
        tuple of str
            The dataclass field names.

        Raises
        ------
        None.

        Source: project addition.
        """
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def of(cls, options: "RunOptions | None" = None, **overrides) -> "RunOptions":
        """An options object of this class from ``options`` with ``overrides`` applied.

        Parameters
        ----------
        options : RunOptions, optional
            None: the defaults; an instance of this, a parent or a sibling class: its shared fields.
        **overrides
            Field name -> value, applied on top.

        Returns
        -------
        RunOptions
            An instance of ``cls``.

        Raises
        ------
        TypeError
            Naming every keyword that is not a field (and the valid names).
        ValueError
            For a bad ``dtype`` (from the constructor, `compute_dtype`).

        Source: project addition (issue 25).
        """
        valid = cls.names()
        unknown = sorted(set(overrides) - set(valid))
        if unknown:
            raise TypeError(f"{cls.__name__}: unexpected option(s) {unknown}; valid options are {list(valid)}")
        base_values = {} if options is None else {f.name: getattr(options, f.name)
                                                  for f in dataclasses.fields(options) if f.name in valid}
        return cls(**{**base_values, **overrides})


#: The float dtypes a solver computes in (validation in float64, speed in float32).
COMPUTE_DTYPES = ("float32", "float64")


def compute_dtype(dtype, default=None):
    """The numpy dtype a solver computes in, checked: ``dtype`` if given, else ``default``.

    Parameters
    ----------
    dtype : numpy dtype-like, optional
        Anything `numpy.dtype` takes (np.float32, "float64", jnp.float32, ...) or None.
    default : numpy dtype-like, optional
        The same, used when ``dtype`` is None (e.g. the data's storage dtype).

    Returns
    -------
    numpy.dtype or None
        float32 or float64; None when both are None.

    Raises
    ------
    ValueError
        Naming the accepted dtypes, for anything else (float16, bfloat16, integers, float128, a string
        numpy does not know): the solvers never compute in lower precision, and silently computing in
        float16 gives wrong posteriors.

    Source: project addition (issue 24 audit).
    """
    chosen = dtype if dtype is not None else default
    if chosen is None:
        return None
    try:
        dt = np.dtype(chosen)
    except TypeError:
        raise ValueError(f"dtype must be one of {list(COMPUTE_DTYPES)}, got {chosen!r}") from None
    if dt.name not in COMPUTE_DTYPES:
        raise ValueError(f"dtype must be one of {list(COMPUTE_DTYPES)} (the solvers compute only in these), "
                         f"got {dt.name}")
    return dt


def as_key(key) -> jax.Array:
    """A JAX PRNG key from a key or an integer seed.

    Parameters
    ----------
    key : jax.Array or int
        A ``jax.random.PRNGKey`` (uint32, shape (2,)), a new-style typed key, or a Python / numpy
        integer seed (gives ``jax.random.PRNGKey(seed)``).

    Returns
    -------
    jax.Array
        The key (uint32 (2,) or typed, as given).

    Raises
    ------
    TypeError
        For anything else (floats, strings, None, bools, arrays of another shape or dtype).

    Source: project addition.
    """
    if isinstance(key, (bool, np.bool_)):
        raise TypeError(f"key must be a jax PRNG key or an integer seed, got {key!r}")
    if isinstance(key, numbers.Integral):
        return jax.random.PRNGKey(int(key))
    if isinstance(key, (jax.Array, np.ndarray)):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            return key
        if key.shape == (2,) and key.dtype == np.uint32:
            return key
    raise TypeError(f"key must be a jax PRNG key or an integer seed, got {type(key).__name__} {key!r}"[:200])


def check_latent_dim(K, name: str = "K") -> int:
    """The latent dimension as a Python int >= 1.

    Parameters
    ----------
    K : int-like
        The latent dimension (not bool, not a non-integral float).
    name : str, default "K"
        Its name in the messages.

    Returns
    -------
    int
        int(K).

    Raises
    ------
    TypeError
        For a non-number (bools included).
    ValueError
        For K < 1 or a non-integral value.

    Source: project addition.
    """
    if isinstance(K, (bool, np.bool_)) or not isinstance(K, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"{name} must be an integer >= 1, got {K!r}")
    if not float(K).is_integer() or K < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {K!r}")
    return int(K)


def check_positive_hyper(hyper, fields, expected: str, positive=None) -> None:
    """Check that ``hyper`` has every field in ``fields`` and that the positive ones are finite and > 0.

    Parameters
    ----------
    hyper : object
        The hyperparameters (a NamedTuple of floats, or anything with those attributes).
    fields : sequence of str
        The names ``hyper`` must have.
    expected : str
        The class to point the user at in the message, e.g. ``"ppl_models.hpf.HPFHyper"``.
    positive : sequence of str, optional
        The names whose values must be positive finite numbers (None: all of ``fields``).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        Naming the first missing field (``hyper has no field 'x' (use <expected>)``), or the first
        value that is not a positive finite number.
    TypeError, ValueError
        From ``float`` for a value that is not a number.

    Source: project addition (the hyperparameter checks of HPF, PSM and RG, written once).
    """
    def check_value(name):
        value = float(getattr(hyper, name))
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"hyper.{name} must be a positive finite number, got {value}")

    for name in fields:
        if not hasattr(hyper, name):
            raise ValueError(f"hyper has no field {name!r} (use {expected})")
        if positive is None:
            check_value(name)
    for name in positive or ():
        check_value(name)


def hyper_attrs(hyper) -> dict:
    """``hyper_<field>`` attrs of a NamedTuple of hyperparameters.

    Parameters
    ----------
    hyper : NamedTuple
        Fields None, scalars or arrays of any shape (any numeric dtype); anything without ``_fields``
        gives {}.

    Returns
    -------
    dict of str to float or str
        ``hyper_<field>`` -> a float for scalars, "None", or the nested list as a string for arrays.

    Raises
    ------
    None of its own; ``float`` raises TypeError / ValueError for a 0-d field that is not numeric.

    Source: project addition.
    """
    out = {}
    for f in getattr(hyper, "_fields", ()):
        v = getattr(hyper, f)
        if v is None:
            out[f"hyper_{f}"] = "None"
        elif np.ndim(v) == 0:
            out[f"hyper_{f}"] = float(v)
        else:
            out[f"hyper_{f}"] = str(np.asarray(v).tolist())
    return out


# -- checkpoint hooks (project addition, issue 10) ---------------------------------------------


class Interrupted(RuntimeError):
    """A fit stopped on purpose right after writing a checkpoint.

    The checkpoint stays; fitting again with ``resume=True`` continues from it. Raised by the hook of
    `on_checkpoint` that ``validation.frontdoor.api.fit(..., _stop_after=n)`` installs to test
    resume == uninterrupted. A RuntimeError; constructed with the message, like any exception.

    Raises
    ------
    None (it is the exception).

    Source: project addition.
    """


_CHECKPOINT_HOOKS: contextvars.ContextVar[tuple] = contextvars.ContextVar("checkpoint_hooks", default=())


@contextlib.contextmanager
def on_checkpoint(hook: Callable[[Any, int], None]):
    """Within the block, call ``hook(path, n_done)`` each time a driver has written a checkpoint.

    The drivers are `vi_driver.run` and `mcmc_driver.sample`; ``path`` is the file, ``n_done`` the sweeps
    (VI) or units (samplers) it holds. An exception raised by the hook stops the fit with the checkpoint
    in place. Context-local (contextvars), so concurrent fits do not see each other's hooks.

    Parameters
    ----------
    hook : callable
        ``hook(path, n_done: int) -> None``.

    Yields
    ------
    None
        The block runs with the hook installed.

    Raises
    ------
    None of its own (the hook's exceptions propagate out of the driver).

    Source: project addition.
    """
    token = _CHECKPOINT_HOOKS.set(_CHECKPOINT_HOOKS.get() + (hook,))
    try:
        yield
    finally:
        _CHECKPOINT_HOOKS.reset(token)


def checkpoint_written(path, n_done: int) -> None:
    """Tell the hooks of `on_checkpoint` that the checkpoint at ``path`` is on disk.

    Called by the drivers after every atomic checkpoint write.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file (passed to the hooks as given).
    n_done : int
        The iterations (VI sweeps or sampler units) it holds.

    Returns
    -------
    None

    Raises
    ------
    None of its own: an exception raised by a hook propagates (later hooks then do not run).

    Source: project addition.
    """
    for hook in _CHECKPOINT_HOOKS.get():
        hook(path, int(n_done))


# -- run fingerprints (project addition, issue 24) ---------------------------------------------
#
# A checkpoint is bound to the run that wrote it: the front door (`validation.frontdoor.api.fit`) computes a
# fingerprint of the run (data hash, model, K, options, transform, dtype, version: a flat mapping
# name -> JSON value) and installs it with `run_fingerprint`; both drivers store it in every
# checkpoint under `FINGERPRINT_KEY` (a JSON string) and refuse to resume from a checkpoint whose
# fingerprint differs, naming every differing field (`fingerprint_differences`).

#: The key of the run fingerprint (a 0-d unicode array holding JSON) in both drivers' ``.npz`` files.
FINGERPRINT_KEY = "run_fingerprint__"

_RUN_FINGERPRINT: contextvars.ContextVar[Mapping | None] = contextvars.ContextVar("run_fingerprint", default=None)


@contextlib.contextmanager
def run_fingerprint(fingerprint: Mapping[str, Any] | None):
    """Within the block, the drivers write ``fingerprint`` into every checkpoint and refuse to resume
    from one with another fingerprint (`check_fingerprint`). Context-local (contextvars).

    Parameters
    ----------
    fingerprint : mapping of str to JSON value, or None
        One entry per field of the run (values str, int, float, bool, None, lists), e.g.
        ``{"model": "hpf", "K": 5, "data_sha256": "..."}``; None: nothing is written or checked.

    Yields
    ------
    None
        The block runs with the fingerprint installed.

    Raises
    ------
    TypeError
        From `json.dumps`, when a value is not JSON-serializable.

    Source: project addition (issue 24).
    """
    fp = None if fingerprint is None else json.loads(json.dumps(dict(fingerprint), sort_keys=True))
    token = _RUN_FINGERPRINT.set(fp)
    try:
        yield
    finally:
        _RUN_FINGERPRINT.reset(token)


def current_fingerprint() -> dict | None:
    """The fingerprint installed by the innermost `run_fingerprint` block.

    Returns
    -------
    dict of str to JSON value, or None
        A copy of the fingerprint; None outside a block.

    Raises
    ------
    None.

    Source: project addition (issue 24).
    """
    fp = _RUN_FINGERPRINT.get()
    return None if fp is None else dict(fp)


def fingerprint_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Every field on which two run fingerprints differ, as readable lines.

    A field present in only one of them counts as a difference ("(absent)" on the other side); values are
    compared as JSON text (NaN equals NaN, 1 and 1.0 differ as written).

    Parameters
    ----------
    saved : mapping of str to JSON value
        The checkpoint's fingerprint.
    current : mapping of str to JSON value
        This run's fingerprint.

    Returns
    -------
    list of str
        One line per differing field in sorted order, e.g. ``"K: checkpoint 5, this run 10"``; empty
        when they are equal.

    Raises
    ------
    None of its own.

    Source: project addition (issue 24).
    """
    out = []
    for k in sorted(set(saved) | set(current)):
        a, b = saved.get(k, _ABSENT), current.get(k, _ABSENT)
        if _key(a) != _key(b):  # compared as JSON text: NaN equals NaN, 1 and 1.0 differ as written
            out.append(f"{k}: checkpoint {_show(a)}, this run {_show(b)}")
    return out


def _key(v) -> str:
    return "(absent)" if v is _ABSENT else json.dumps(v, sort_keys=True)


class _Absent:
    def __repr__(self):
        return "(absent)"


_ABSENT = _Absent()


def _show(v) -> str:
    text = repr(v) if isinstance(v, (str, _Absent)) else json.dumps(v)
    return text if len(text) <= 120 else text[:117] + "..."


def check_fingerprint(path, saved: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> None:
    """Refuse to resume from the checkpoint at ``path`` when its fingerprint is not this run's.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file (named in the message).
    saved : mapping of str to JSON value, or None
        The checkpoint's fingerprint (None: it has none).
    current : mapping of str to JSON value, or None
        This run's fingerprint (None: nothing to check, returns).

    Returns
    -------
    None
        Returns only when the fingerprints agree (or ``current`` is None).

    Raises
    ------
    ValueError
        Naming every differing field with both values (`fingerprint_differences`), or saying the
        checkpoint has no fingerprint, and how to start fresh (delete the file or choose another folder).

    Source: project addition (issue 24).
    """
    if current is None:
        return
    fresh = (f"To start fresh, delete {path} or choose another checkpoint folder (resume_from=..., CLI --resume-from); "
             "to continue that run, fit again with exactly its data and settings.")
    if saved is None:
        raise ValueError(f"checkpoint {path} holds no run fingerprint (written by an older factorbayes or by a "
                         f"solver called directly), so it cannot be tied to this run. {fresh}")
    diffs = fingerprint_differences(saved, current)
    if diffs:
        raise ValueError(f"checkpoint {path} was written by another run; it differs in "
                         f"{len(diffs)} field(s):\n  " + "\n  ".join(diffs) + f"\n{fresh}")


def checkpoint_damaged(path, exc: BaseException) -> ValueError:
    """The ValueError for a checkpoint file that cannot be read (damaged, truncated, or not a
    factorbayes checkpoint): names the file, what went wrong, and how to start fresh.

    Parameters
    ----------
    path : str or path-like
        The file.
    exc : BaseException
        The reader's exception (BadZipFile, KeyError, OSError, ValueError, ...).

    Returns
    -------
    ValueError
        The exception, not raised (the caller raises it ``from exc``).

    Raises
    ------
    None.

    Source: project addition (issue 24).
    """
    what = f"{type(exc).__name__}: {exc}"
    return ValueError(f"checkpoint {path} is damaged or is not a factorbayes checkpoint ({what[:200]}); "
                      f"delete {path} (or choose another checkpoint folder) to start fresh")


def read_checkpoint_fingerprint(path) -> tuple[dict | None, int | None]:
    """The run fingerprint and the iterations done of a driver checkpoint, read without loading the state.

    Reads a `vi_driver` or `mcmc_driver` ``.npz`` with ``allow_pickle=False``.

    Parameters
    ----------
    path : str or path-like
        An existing checkpoint file.

    Returns
    -------
    fingerprint : dict or None
        The stored fingerprint; None when the file has none.
    n_done : int
        Iterations done (VI sweeps or sampler units).

    Raises
    ------
    ValueError
        Naming the file (`checkpoint_damaged`) when it is not a readable checkpoint (missing, not a zip,
        truncated, pickled objects, no iteration counter, a fingerprint that is not a JSON mapping).

    Source: project addition (issue 24).
    """
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as f:
            files = set(f.files)
            if not files & {"n_iter__", "__done"}:
                raise KeyError("no iteration counter (n_iter__ or __done)")
            done = int(f["n_iter__"] if "n_iter__" in files else f["__done"])
            fp = json.loads(str(f[FINGERPRINT_KEY])) if FINGERPRINT_KEY in files else None
    except Exception as exc:  # zipfile.BadZipFile, KeyError, OSError, ValueError (pickled data), EOFError, JSON
        raise checkpoint_damaged(path, exc) from exc
    if fp is not None and not isinstance(fp, dict):
        raise checkpoint_damaged(path, ValueError("its fingerprint is not a mapping"))
    return fp, done


# -- run reports and progress notes (project addition, issue 24) -------------------------------

_RUN_REPORTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("run_reports", default=None)


@contextlib.contextmanager
def collect_runs():
    """Within the block, every driver run appends a dict describing itself to the yielded list.

    The runs are those of `vi_driver.run` and `mcmc_driver.sample` (through `report_run`): ``driver``
    ("vi" or "mcmc"), iterations run and the most, convergence (VI), whether and from where it resumed,
    wall seconds of the loop and of its first (compiling) iteration, ``t_start`` / ``t_end``
    (``time.perf_counter``). Used by the front door's run summary. Context-local.

    Yields
    ------
    list of dict
        The run descriptions, appended as the runs end.

    Raises
    ------
    None.

    Source: project addition (issue 24).
    """
    runs: list = []
    token = _RUN_REPORTS.set(runs)
    try:
        yield runs
    finally:
        _RUN_REPORTS.reset(token)


def report_run(**info) -> None:
    """Hand a driver run's description to the enclosing `collect_runs` blocks; nothing happens outside one.

    Parameters
    ----------
    **info
        Keyword -> value, the description (see `collect_runs`).

    Returns
    -------
    None

    Raises
    ------
    None.

    Source: project addition (issue 24).
    """
    runs = _RUN_REPORTS.get()
    if runs is not None:
        runs.append(dict(info))


def note(message: str, progress: bool = True) -> None:
    """Print a one-line progress note to stderr when ``progress`` is true.

    Printed through tqdm, so an open bar is not broken; e.g. "resuming from iteration 20 of 50".

    Parameters
    ----------
    message : str
        The note.
    progress : bool, default True
        False prints nothing.

    Returns
    -------
    None

    Raises
    ------
    None of its own.

    Source: project addition (issue 24).
    """
    if progress:
        from tqdm.auto import tqdm

        tqdm.write(message, file=sys.stderr)


# -- SIGINT / SIGTERM during a checkpointed run (project addition, issue 24) --------------------


class RunInterrupted(KeyboardInterrupt):
    """A checkpointed run stopped by SIGINT (Ctrl-C) or SIGTERM.

    The message names the last consistent checkpoint (written atomically) and how to resume. A
    KeyboardInterrupt, so ``except Exception`` does not swallow it.

    Raises
    ------
    None (it is the exception).

    Source: project addition (issue 24).
    """


class _Guard:
    """What `interruptible` yields: ``signum`` (None until a signal arrives), and the driver's record
    of its last checkpoint (``written(path, n_done)``; ``message()`` the stop message)."""

    def __init__(self, what: str, total: int | None):
        self.what, self.total = what, total
        self.signum: int | None = None
        self.path, self.n_done = None, None

    def written(self, path, n_done: int) -> None:
        self.path, self.n_done = path, int(n_done)

    def message(self) -> str:
        name = signal.Signals(self.signum).name if self.signum is not None else "a signal"
        if self.path is None:
            where = "before its first checkpoint was written (nothing to resume from)"
        else:
            of = f" of {self.total}" if self.total is not None else ""
            where = (f"after iteration {self.n_done}{of}; the last consistent checkpoint is {self.path}. "
                     "Run the same fit again with the same checkpoint (validation.frontdoor.api.fit(..., resume_from=FOLDER), "
                     "the same `factorbayes fit ... --resume-from FOLDER` command, or resume=True) to continue from it")
        return f"{self.what} stopped by {name} {where}."

    def check(self) -> None:
        """Raise RunInterrupted if a signal has arrived (the driver calls this between iterations,
        right after writing the checkpoint of the iteration just finished)."""
        if self.signum is not None:
            raise RunInterrupted(self.message())


@contextlib.contextmanager
def interruptible(what: str, total: int | None = None, enabled: bool = True):
    """Within the block, SIGINT and SIGTERM do not kill the run mid-write.

    The first signal sets ``guard.signum``; the driver then writes a checkpoint of the iteration in
    progress as soon as it ends and calls ``guard.check()``, which raises `RunInterrupted` naming that
    checkpoint. A second signal raises `RunInterrupted` at once (naming the last checkpoint written).
    The previous handlers are restored when the block ends, however it ends.

    Parameters
    ----------
    what : str
        The run's name in the message.
    total : int, optional
        The iterations it would run (for "N of M").
    enabled : bool, default True
        False (no checkpoint) yields a guard that never fires and installs nothing; so does a call
        outside the main thread.

    Yields
    ------
    guard
        ``signum`` (None until a signal arrives), ``written(path, n_done)`` to record the last
        checkpoint, ``check()`` to raise when a signal has arrived.

    Raises
    ------
    RunInterrupted
        As above (from the signal handler or ``guard.check()``).

    Source: project addition (issue 24).
    """
    guard = _Guard(what, total)
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield guard
        return

    def handler(signum, frame):
        if guard.signum is not None:
            raise RunInterrupted(guard.message())
        guard.signum = signum

    previous = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            previous[s] = signal.signal(s, handler)
        yield guard
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def usual_file_mode(file) -> None:
    """Give ``file`` the mode a plain ``open()`` would: 0o666 less the process umask.

    Atomic writes go through ``tempfile.mkstemp``, whose file is 0o600 (readable by its owner
    only); after `os.replace` the checkpoint or artifact would keep that mode, unlike every other
    file the user writes. Call it on the temporary file before replacing.

    Parameters
    ----------
    file : int or str or path-like
        An open file descriptor, or a path.

    Returns
    -------
    None

    Raises
    ------
    OSError
        From ``os.fchmod`` / ``os.chmod``.

    Source: project addition (issue 24).
    """
    import os

    mask = os.umask(0)
    os.umask(mask)
    (os.fchmod if isinstance(file, int) else os.chmod)(file, 0o666 & ~mask)
