r"""The one multi-chain sampling driver shared by every Gibbs / MCMC sampler of the package (issue 9).

A sampler module declares its algorithm (`base.Algorithm`: init, step, log joint, dims) and a
`SamplerSpec` (how to prepare its data, what it can keep, which Info fields are statistics,
how it predicts at cells); its public ``sample`` validates the model-specific inputs and calls
`sample` here. The run options are one `SampleOptions` (chains, warm-up, draws, thinning, keep,
predict_at, block and the options every driver shares, `base.RunOptions`); `run_options` lets a
sampler's ``sample`` take them as keywords without retyping them. Everything around the steps is written once, in this module:

- Chains: ``num_chains`` independent chains, vectorised with ``jax.vmap`` (every State of the
  package is a NamedTuple of fixed-shape arrays, so all chains run as one batched program).
- Units and blocks: the sampler runs in *units* of ``thin`` sweeps; a unit's last state is a
  draw. Warm-up is ``ceil(num_warmup / thin)`` units (``num_warmup_run`` = that times ``thin``
  sweeps), then ``num_samples`` kept units. Units run under ``lax.scan`` in blocks of ``block``
  units, one jitted program (`_block`, module level, so repeated calls with the same shapes,
  options and block size reuse the compiled program: SBC fits hundreds of data sets).
- Key schedule (the same for every sampler)::

      key = as_key(key_or_seed); key, init_key = split(key)
      chain c starts from init(split(init_key, C)[c], ...)
      for every unit u = 0, 1, ... (warm-up and kept alike):
          key, sub = split(key); chain c's unit key is split(sub, C)[c]
          its thin sweeps use split(unit_key, thin)

  The schedule depends on neither the block size nor where a run was interrupted, so a
  resumed run equals an uninterrupted one bit for bit. It is the schedule of the former
  HPF-Gibbs and BPMF drivers (their draws are unchanged, checked against draws saved from
  commit 8571c06 in ``tests/data/sampler_draws_v0.npz``). Two samplers' draws changed with
  the move onto this driver:

  * SBMF: its former driver split each block's key per chain, then per kept draw, then per
    sweep (a schedule tied to its block size of 50 draws); its warm-up was rounded up to whole
    blocks of ``50 * thin`` sweeps. Now: the schedule above and ``ceil(num_warmup / thin)``
    warm-up units.
  * MCMC-FM: its former driver spent one ``split`` of the key on the chain keys of the
    ahead-of-time compilation (never run), so every later unit key was shifted by one split.
    Its ``lp`` and ``rmse`` also described the state *before* each kept draw's last sweep;
    now they describe the kept state.

  Both are tested equal, bit for bit, to a plain Python loop of their public ``step`` under
  the schedule above (``tests/custom_inference/test_mcmc_driver.py``).
- Records of each kept unit: the kept State fields (``keep``), ``lp`` = the algorithm's
  ``target`` (log joint) of the kept state, the sampler's statistics from the unit's Infos
  (``mean_stats`` averaged over its ``thin`` sweeps, ``last_stats`` of its last sweep), the
  sampler's derived quantities, and with ``predict_at`` the running sums of the predicted mean
  function at the requested cells (accumulated on the device over the kept units, so no draw
  has to be stored; ``pred`` per draw is stored only when ``keep`` names it).
- Timing: wall seconds of each block (the call, ``block_until_ready`` and the copy of its
  records to the host). A block whose call compiled `_block` (its jit cache grew) is left out
  of ``seconds_per_sweep`` (seconds per sweep of all chains together); when every block
  compiled, ``seconds_per_sweep`` includes compilation (``attrs["per_sweep_includes_compile"]``).
- Checkpoints: with ``checkpoint`` (a path), every ``checkpoint_every`` blocks the driver
  writes the chains' states, the running key, the records so far and a fingerprint of the
  settings to ``<path>.tmp`` and moves it over ``path`` with `os.replace` (atomic), and once
  more at the end. ``resume=True`` continues from the file (a fingerprint mismatch raises
  ValueError naming every differing setting); a missing file starts afresh. The run fingerprint of
  the front door (`base.run_fingerprint`: data hash, transform, options, version) is stored beside
  the driver's settings and checked the same way (issue 24), before anything is compiled; a damaged
  or foreign file is a ValueError naming it; a resume says "resuming from unit N of M" on stderr
  (with ``progress``); SIGINT / SIGTERM during a checkpointed run finish the block in progress,
  write its checkpoint and raise `base.RunInterrupted` naming it. Each run is described to
  `base.collect_runs` (the front door's run summary).
  After every write the hooks of `base.on_checkpoint` are called (``validation.frontdoor.api`` stops a fit
  there to test resume == uninterrupted).
- Output: `arviz.InferenceData` through `custom_inference.arviz_io` with one attrs schema:
  model, method, source, seed (int seed, or the key's data as a string), num_chains,
  num_warmup, num_warmup_run, num_samples, thin, K, n_rows, n_cols, nnz, dtype, seconds,
  seconds_first_block, seconds_per_sweep, per_sweep_includes_compile, block, hyper_<field>
  for every hyperparameter, plus the sampler's own options. Groups: ``posterior`` (kept
  variables, derived quantities, ``pred``), ``sample_stats`` (``lp`` and the statistics),
  and with ``predict_at`` ``predictions`` (``pred_mean``, ``pred_sd``: mean and sd over all
  kept draws of all chains of the predicted mean function; dim ``cell``).

Source: project addition (after BlackJAX's scan-based ``run_inference_algorithm`` and
NumPyro's ``MCMC``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from . import arviz_io
from . import base
from .base import Algorithm, as_key, check_latent_dim, checkpoint_written, hyper_attrs

__all__ = ["SampleOptions", "SamplerSpec", "run_options", "sample", "check_count", "check_cells", "prepare_cells", "hyper_attrs",
           "seed_attr", "TRACES"]

#: Python-side trace counter of `_block`, by model name (the compile-once tests read it).
TRACES: collections.Counter = collections.Counter()


@dataclasses.dataclass(frozen=True)
class SampleOptions(base.RunOptions):
    """The run options of `sample` (and of every sampler's public ``sample``, through `run_options`).

    Those of every driver (`base.RunOptions`; ``checkpoint_every`` counts blocks, ``callback`` gets
    ``(units done, states)``) and the chains' lengths.

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
    num_chains : int >= 1, default 4
        Chains.
    num_warmup : int >= 0, default 500
        Sweeps (rounded up to a multiple of ``thin``).
    num_samples : int >= 1, default 1000
        Kept draws per chain.
    thin : int >= 1, default 1
        Sweeps per kept draw.
    keep : sequence of str, optional
        Names to store per draw (None: all, `sample`).
    predict_at : optional
        Cells to predict at, or None.
    block : int >= 1, optional
        Units per compiled block (None: `_default_block`).

    Raises
    ------
    None of its own: `sample` checks the counts (ValueError naming the field).

    Source: project addition (issue 25).
    """

    num_chains: int = 4
    num_warmup: int = 500
    num_samples: int = 1000
    thin: int = 1
    keep: Any = None
    predict_at: Any = None
    block: int | None = None


def run_options(**defaults):
    """Decorator of a sampler's public ``sample(key, data, K, hyper, *, <its own options>, options)``.

    The `SampleOptions` fields become keyword arguments of the decorated function (with ``defaults``
    over the class defaults), so ``sample(..., num_chains=2)``, ``sample(...,
    options=SampleOptions(num_chains=2))`` and both together (keywords override) all work; the function
    receives one ``options`` (a `SampleOptions`). The signature that `inspect` reports lists every field
    with the sampler's default (the front door reads it for the valid options).

    Parameters
    ----------
    **defaults
        `SampleOptions` field name -> the sampler's default.

    Returns
    -------
    callable
        The decorator: ``fn -> wrapper``; the wrapper carries ``wrapper.defaults`` (the `SampleOptions`
        built from ``defaults``).

    Raises
    ------
    TypeError
        At decoration, for a default that is not a field; the wrapper raises TypeError for an unknown
        keyword as any function does (and `SampleOptions.of` for a bad option value).

    Source: project addition (issue 25).
    """
    unknown = sorted(set(defaults) - set(SampleOptions.names()))
    if unknown:
        raise TypeError(f"run_options: {unknown} are not SampleOptions fields")
    base_options = SampleOptions(**defaults)

    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name != "options"]
        names = [n for n in SampleOptions.names() if n not in sig.parameters]

        @functools.wraps(fn)
        def wrapper(*args, options: SampleOptions | None = None, **kwargs):
            run = {n: kwargs.pop(n) for n in names if n in kwargs}
            return fn(*args, options=SampleOptions.of(base_options if options is None else options, **run), **kwargs)

        kw = inspect.Parameter.KEYWORD_ONLY
        fields = [inspect.Parameter(n, kw, default=getattr(base_options, n)) for n in names]
        tail = [p for p in own if p.kind is p.VAR_KEYWORD]
        head = [p for p in own if p.kind is not p.VAR_KEYWORD]
        wrapper.__signature__ = sig.replace(parameters=[*head, *fields, inspect.Parameter("options", kw, default=None),
                                                        *tail])
        wrapper.defaults = base_options
        return wrapper

    return decorate


class SamplerSpec(NamedTuple):
    """What a sampler module declares for the driver, besides its `base.Algorithm`.

    Parameters
    ----------
    algorithm : base.Algorithm
        Kind "mcmc"; target = log joint.
    model : str
        Attrs "model" (e.g. "sbmf").
    method : str
        Attrs "method" (e.g. "gibbs").
    variables : tuple of str
        State field names that may be kept (caches left out).
    prepare : callable
        (data, dtype) -> the data pytree that init/step take (jax arrays of ``dtype``); called
        inside the driver's x64 context.
    sizes : callable
        data -> (n_rows, n_cols, nnz) for the attrs.
    coords : callable
        (data, K) -> dict of ArviZ coordinates.
    derived : callable, optional
        (state, data, hyper) -> dict name -> array, per kept draw (e.g. SBMF's identifiable
        ``mean_level``); their dims in ``extra_dims``.
    predict : callable, optional
        (state, data, at) -> (M,) predicted mean function at the cells ``at``.
    predict_prepare : callable, optional
        (predict_at, data, dtype) -> (at pytree, M); validates ``predict_at`` (ValueError naming the
        field) and converts it.
    mean_stats : tuple of str, default ()
        Info fields averaged over a unit's sweeps (acceptance rates).
    last_stats : tuple of str, default ()
        Info fields of a unit's last sweep (describe the kept state).
    extra_dims : mapping, default {}
        Dims of the derived quantities (name -> tuple of dims).
    prepare_hyper : callable, optional
        (hyper, dtype) -> the hyperparameter pytree passed to init/step.

    Raises
    ------
    None on construction (a NamedTuple); `sample` uses the fields as declared.

    Source: project addition (issue 25).
    """

    algorithm: Algorithm
    model: str
    method: str
    variables: tuple
    prepare: Callable
    sizes: Callable
    coords: Callable
    derived: Callable | None = None
    predict: Callable | None = None
    predict_prepare: Callable | None = None
    mean_stats: tuple = ()
    last_stats: tuple = ()
    extra_dims: Mapping = {}
    prepare_hyper: Callable | None = None


# -- argument checks -------------------------------------------------------------------------


def check_count(name: str, value, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (not bool, integral).

    Parameters
    ----------
    name : str
        The argument's name in the message.
    value : int-like
        The count to check.
    minimum : int
        The smallest value allowed.

    Returns
    -------
    int
        int(value).

    Raises
    ------
    ValueError
        Naming ``name``, for a bool, a non-integral or non-numeric value, or one below ``minimum``.

    Source: project addition.
    """
    try:
        ok = not isinstance(value, (bool, np.bool_)) and int(value) == value and value >= minimum
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_cells(predict_at, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``predict_at = (rows, cols)``: two 1-D integer arrays of one length inside the matrix.

    Parameters
    ----------
    predict_at : tuple of two array_like, shape (M,), int
        (rows, cols) of the cells to predict.
    n_rows : int
        I: rows must lie in [0, I).
    n_cols : int
        J: cols must lie in [0, J).

    Returns
    -------
    rows, cols : numpy.ndarray, shape (M,), int64
        The cells.

    Raises
    ------
    ValueError
        Naming ``predict_at``: not a pair of arrays, shapes unequal or not 1-D, non-integer dtype,
        indices out of range.

    Source: project addition.
    """
    try:
        rows, cols = (np.asarray(a) for a in predict_at)
    except (TypeError, ValueError):
        raise ValueError("predict_at must be a pair (rows, cols) of 1-D integer arrays") from None
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(f"predict_at must be two 1-D index arrays of one length, got {rows.shape} and {cols.shape}")
    for name, a, n in (("rows", rows, n_rows), ("cols", cols, n_cols)):
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"predict_at {name} must be integers, got dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() >= n):
            raise ValueError(f"predict_at {name} out of range [0, {n - 1}]")
    return rows.astype(np.int64), cols.astype(np.int64)


def prepare_cells(predict_at, data, dtype=None) -> tuple[tuple[jax.Array, jax.Array], int]:
    """A `SamplerSpec`'s ``predict_prepare`` for (rows, cols) cells of a matrix: `check_cells`, then
    the cells as int32 device arrays.

    Parameters
    ----------
    predict_at : tuple of two array_like, shape (M,), int
        (rows, cols) of the cells to predict.
    data : object
        The prepared data; only its ``n_rows`` (I) and ``n_cols`` (J) are read.
    dtype : numpy dtype, optional
        Unused (the ``predict_prepare`` signature).

    Returns
    -------
    cells : tuple of two jax.Array, shape (M,), int32
        (rows, cols).
    n_cells : int
        M.

    Raises
    ------
    ValueError
        From `check_cells`.

    Source: project addition (written once for BPMF, SBMF and HPF-Gibbs).
    """
    rows, cols = check_cells(predict_at, data.n_rows, data.n_cols)
    return (jnp.asarray(rows, jnp.int32), jnp.asarray(cols, jnp.int32)), rows.size


def seed_attr(key):
    """The ``seed`` attr: the int seed itself, or a key's data as a string.

    Parameters
    ----------
    key : int or jax.Array
        A Python / NumPy int, a typed JAX PRNG key (dtype key<...>, any shape) or a raw uint32 key
        array (e.g. shape (2,)).

    Returns
    -------
    int or str
        The int seed, or the nested list of the key data as a string.

    Raises
    ------
    None of its own; an object that is neither an int nor an array propagates AttributeError (no
    ``dtype``).

    Source: project addition.
    """
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return int(key)
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    return str(np.asarray(data).tolist())


# -- the compiled block ----------------------------------------------------------------------


class _Static:
    """A static jit argument compared by identity (a SamplerSpec holds dicts, so it does not hash;
    specs are module-level constants, so identity is stable across calls)."""

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Static) and other.obj is self.obj


def _block_impl(key, states, data, hyper, at, start, n_warm, *, spec: _Static, n_units: int, thin: int,
                keep: tuple, step_options: tuple):
    """``n_units`` units of all chains; returns (key, states, records, running prediction sums)."""
    spec = spec.obj
    TRACES[spec.model] += 1  # Python side effect: runs once per trace
    step, target = spec.algorithm.step, spec.algorithm.target
    opts = dict(step_options)
    n_chains = jax.tree_util.tree_leaves(states)[0].shape[0]
    stat_names = tuple(spec.mean_stats) + tuple(spec.last_stats)

    def unit_keys(k, _):
        k, sub = jax.random.split(k)
        return k, jax.random.split(sub, n_chains)

    key, keys = jax.lax.scan(unit_keys, key, None, length=n_units)  # keys (n_units, C, 2)
    kept = (start + jnp.arange(n_units)) >= n_warm  # (n_units,)

    def sweep(s, k):
        s, info = step(k, s, data, hyper, **opts)
        return s, tuple(getattr(info, n) for n in stat_names)

    def run_chain(state, k):  # one chain's thin sweeps (the former drivers' vmapped program)
        return jax.lax.scan(sweep, state, jax.random.split(k, thin))

    def record(state, infos):  # one chain's record of its new state
        rec = {name: getattr(state, name) for name in keep if name in spec.variables}
        rec["lp"] = target(state, data, hyper)
        for n, v in zip(stat_names, infos):
            rec[n] = jnp.mean(v) if n in spec.mean_stats else v[-1]
        if spec.derived is not None:
            rec.update(spec.derived(state, data, hyper))  # always: small identifiable summaries
        if at is not None:
            rec["pred"] = spec.predict(state, data, at)
        return rec

    def unit(carry, xs):
        states, s1, s2 = carry
        ks, is_kept = xs
        states, infos = jax.vmap(run_chain)(states, ks)
        rec = jax.vmap(record)(states, infos)
        if at is not None:
            p = rec["pred"] if "pred" in keep else rec.pop("pred")
            w = is_kept.astype(p.dtype)
            s1, s2 = s1 + w * p, s2 + w * p * p
        return (states, s1, s2), rec

    if at is None:
        z = jnp.zeros((0,))
    else:
        shape = jax.eval_shape(lambda s: jax.vmap(lambda x: spec.predict(x, data, at))(s), states)
        z = jnp.zeros(shape.shape, shape.dtype)
    (states, s1, s2), recs = jax.lax.scan(unit, (states, z, z), (keys, kept))
    recs = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), recs)  # (C, n_units, ...)
    return key, states, recs, s1, s2


_block = jax.jit(_block_impl, static_argnames=("spec", "n_units", "thin", "keep", "step_options"))


def _default_block(total: int) -> int:
    """Units per block when ``block`` is not given: about min(50, ceil(total / 4)), preferring a
    divisor of ``total`` (not below half of that) so that every block has the same length and
    `_block` compiles once per run instead of twice (a shorter last block is another program)."""
    target = min(50, -(-total // 4))
    divisor = max(d for d in range(1, target + 1) if total % d == 0)
    return divisor if 2 * divisor >= target else target


# -- checkpoints -----------------------------------------------------------------------------


def _fingerprint(**settings) -> str:
    return json.dumps({k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
                       for k, v in sorted(settings.items())}, sort_keys=True)


def _save_checkpoint(path: Path, fingerprint: str, key, states, done: int, records: dict, s1, s2, seconds: float,
                     run_fingerprint: Mapping | None = None):
    arrays = {"__fingerprint": np.asarray(fingerprint), "__key": np.asarray(jax.random.key_data(key)
                                                                             if jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
                                                                             else key),
              "__done": np.asarray(done), "__seconds": np.asarray(seconds), "__s1": np.asarray(s1), "__s2": np.asarray(s2)}
    for name, value in states._asdict().items():
        arrays[f"state/{name}"] = np.asarray(value)
    for name, parts in records.items():
        arrays[f"rec/{name}"] = np.concatenate(parts, axis=1) if parts else np.zeros((0,))
    if run_fingerprint is not None:
        arrays[base.FINGERPRINT_KEY] = np.asarray(json.dumps(dict(run_fingerprint), sort_keys=True))
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)


def _check_checkpoint(path: Path, fingerprint: str, run_fingerprint: Mapping | None) -> int:
    """Refuse a checkpoint of another run before anything is computed: the driver's settings
    (`_fingerprint`, JSON) and the front door's run fingerprint are compared field by field
    (`base.check_fingerprint` names every difference); a damaged or foreign file is a ValueError
    naming it. Returns the units done."""
    try:
        with np.load(path, allow_pickle=False) as f:
            saved = json.loads(str(f["__fingerprint"]))
            saved_run = json.loads(str(f[base.FINGERPRINT_KEY])) if base.FINGERPRINT_KEY in f.files else None
            done = int(f["__done"])
    except Exception as exc:  # BadZipFile, KeyError (not a sampler checkpoint), pickled data, JSON
        raise base.checkpoint_damaged(path, exc) from exc
    base.check_fingerprint(path, saved, json.loads(fingerprint))
    base.check_fingerprint(path, saved_run, run_fingerprint)
    return done


def _load_checkpoint(path: Path, fingerprint: str, state_type, key_like, run_fingerprint: Mapping | None = None):
    _check_checkpoint(path, fingerprint, run_fingerprint)
    try:
        with np.load(path, allow_pickle=False) as f:
            key = jnp.asarray(f["__key"])
            if jnp.issubdtype(key_like.dtype, jax.dtypes.prng_key):
                key = jax.random.wrap_key_data(key)
            states = state_type(**{n[6:]: jnp.asarray(f[n]) for n in f.files if n.startswith("state/")})
            records = {n[4:]: [f[n]] for n in f.files if n.startswith("rec/")}
            return key, states, int(f["__done"]), records, f["__s1"], f["__s2"], float(f["__seconds"])
    except (KeyError, TypeError, OSError, EOFError) as exc:
        raise base.checkpoint_damaged(path, exc) from exc


# -- the driver ------------------------------------------------------------------------------


@run_options()
def sample(
    spec: SamplerSpec,
    key,
    data,
    K,
    hyper,
    *,
    init_options: Mapping | None = None,
    step_options: Mapping | None = None,
    source: str | None = None,
    attrs: Mapping | None = None,
    options: SampleOptions,
) -> "arviz_io.InferenceData":
    """Run ``num_chains`` chains of ``spec.algorithm`` and return the draws (module docstring).

    Parameters
    ----------
    spec : SamplerSpec of the sampler.
    key : jax PRNG key or int seed (`base.as_key`); the same key gives the same draws.
    data : the sampler's data (already validated by its ``sample``); ``spec.prepare`` converts it.
    K : int >= 1, the latent dimension.
    hyper : the sampler's hyperparameters (validated by its ``sample``).
    options : `SampleOptions` (or its fields by keyword, `run_options`):
    num_chains, num_samples, thin : int >= 1, default 4, 1000, 1
        Chains, kept draws per chain, sweeps per kept draw.
    num_warmup : int >= 0, default 500
        Sweeps, rounded up to a multiple of ``thin`` (attrs ``num_warmup_run``).
    keep : names to store per draw: State fields in ``spec.variables`` and ``"pred"`` (the
        predicted mean function per draw, with ``predict_at``); None = all of them. The derived
        quantities (``spec.extra_dims``, small) are always stored; naming them is allowed.
    predict_at : cells to predict at (``spec.predict_prepare`` validates it; (rows, cols) for
        matrix models); running mean and sd land in the ``predictions`` group.
    dtype : float dtype of the state (default float64); float64 runs with x64 enabled.
    progress : tqdm bar over units.
    checkpoint : optional path of the checkpoint file (.npz).
    checkpoint_every : int >= 1, default 10, blocks between checkpoints.
    resume : continue from ``checkpoint`` if it exists.
    block : units per compiled block (int >= 1); default about min(50, ceil(total units / 4)), a divisor of
        the total where one is near (`_default_block`: one compiled program per run).
        Results do not depend on it.
    callback : (units done, states) -> None after each block (after the checkpoint); an
        exception raised there stops the run (the checkpoint stays).
    init_options, step_options : keyword options of ``init`` and ``step`` (step options must
        be hashable: they are static in the compiled block).
    source : attrs "source" (default ``spec.algorithm.source``).
    attrs : mapping, extra attrs.

    Returns
    -------
    arviz.InferenceData (module docstring: groups and attrs).

    Raises
    ------
    ValueError
        Naming the field: bad counts, unknown ``keep`` names, ``"pred"`` kept without
        ``predict_at``, ``predict_at`` out of range, a checkpoint written with other settings or by
        another run (every differing field named) or damaged (the file named), ``resume`` without
        ``checkpoint``.
    TypeError
        A key that is neither a key nor an int.
    base.RunInterrupted
        (A KeyboardInterrupt) when SIGINT or SIGTERM arrives during a checkpointed run: the block
        in progress finishes, its checkpoint is written, and the message names it.

    Source: project addition (issue 25).
    """
    K = check_latent_dim(K)
    keep, predict_at, dtype, progress, checkpoint = (options.keep, options.predict_at, options.dtype, options.progress,
                                                    options.checkpoint)
    resume, block, callback = options.resume, options.block, options.callback
    num_chains = check_count("num_chains", options.num_chains, 1)
    num_warmup = check_count("num_warmup", options.num_warmup, 0)
    num_samples = check_count("num_samples", options.num_samples, 1)
    thin = check_count("thin", options.thin, 1)
    checkpoint_every = check_count("checkpoint_every", options.checkpoint_every, 1)
    if block is not None:
        block = check_count("block", block, 1)
    if resume and checkpoint is None:
        raise ValueError("resume=True needs checkpoint (a path)")
    key, seed = as_key(key), seed_attr(key)
    dtype = np.dtype(np.float64 if dtype is None else dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    derived_names = tuple(spec.extra_dims)
    allowed = tuple(spec.variables) + derived_names + (("pred",) if spec.predict is not None else ())
    if keep is None:
        keep = tuple(spec.variables) + derived_names + (("pred",) if predict_at is not None else ())
    else:
        keep = tuple(keep)
        unknown = sorted(set(keep) - set(allowed))
        if unknown:
            raise ValueError(f"keep: unknown variables {unknown}; choose from {allowed}")
    if "pred" in keep and predict_at is None:
        raise ValueError("keep: 'pred' needs predict_at")
    if predict_at is not None and spec.predict is None:
        raise ValueError(f"predict_at: the {spec.model} sampler does not predict")
    step_options = tuple(sorted((step_options or {}).items()))
    init_options = dict(init_options or {})
    n_rows, n_cols, nnz = spec.sizes(data)
    n_warm = -(-num_warmup // thin)
    total = n_warm + num_samples
    per_block = _default_block(total) if block is None else min(block, total)

    with jax.enable_x64(dtype == np.float64):
        at, n_cells = (None, 0)
        if predict_at is not None:
            at, n_cells = spec.predict_prepare(predict_at, data, dtype)
        d = spec.prepare(data, dtype)
        hyp = hyper if spec.prepare_hyper is None else spec.prepare_hyper(hyper, dtype)
        fingerprint = _fingerprint(model=spec.model, seed=seed, K=K, num_chains=num_chains, num_warmup=num_warmup,
                                   num_samples=num_samples, thin=thin, keep=keep, dtype=str(dtype), n_rows=n_rows,
                                   n_cols=n_cols, nnz=nnz, n_cells=n_cells, step_options=step_options,
                                   init_options=sorted(init_options.items()), hyper=hyper_attrs(hyper))
        ckpt = None if checkpoint is None else Path(checkpoint)
        run_fp = base.current_fingerprint()
        records: dict[str, list] = collections.defaultdict(list)
        s1 = s2 = None
        done, seconds_before = 0, 0.0
        t_start = time.perf_counter()
        if resume and ckpt.exists():
            base.note(f"{spec.algorithm.name}: resuming from unit {_check_checkpoint(ckpt, fingerprint, run_fp)} of "
                      f"{total} ({ckpt})", progress)
            state_type = type(jax.eval_shape(lambda k: spec.algorithm.init(k, d, K, hyp, dtype=dtype, **init_options),
                                             jax.random.PRNGKey(0)))
            key, states, done, loaded, s1, s2, seconds_before = _load_checkpoint(ckpt, fingerprint, state_type, key,
                                                                                 run_fp)
            records.update(loaded)
            s1 = None if s1.size == 0 else s1
            s2 = None if s2.size == 0 else s2
        else:
            key, init_key = jax.random.split(key)
            states = jax.vmap(lambda k: spec.algorithm.init(k, d, K, hyp, dtype=dtype, **init_options))(
                jax.random.split(init_key, num_chains))
        block_seconds, block_sweeps, block_compiled = [], [], []
        start = time.perf_counter()
        bar = tqdm(total=total, initial=done, desc=f"{spec.algorithm.name} ({num_chains} chains)", disable=not progress,
                   leave=False)
        n_blocks_run, first_done = 0, done
        with base.interruptible(f"{spec.algorithm.name} ({num_chains} chains)", total, enabled=ckpt is not None) as guard:
            try:
                while done < total:
                    n = min(per_block, total - done)
                    cache_before = _block._cache_size()
                    t0 = time.perf_counter()
                    key, states, recs, b1, b2 = _block(key, states, d, hyp, at, jnp.asarray(done, jnp.int32),
                                                       jnp.asarray(n_warm, jnp.int32), spec=_Static(spec), n_units=n,
                                                       thin=thin, keep=keep, step_options=step_options)
                    lo = max(n_warm - done, 0)  # first kept unit of this block
                    if lo < n:
                        for name, v in recs.items():
                            records[name].append(np.asarray(v)[:, lo:])
                    if at is not None:
                        b1, b2 = np.asarray(b1, np.float64), np.asarray(b2, np.float64)
                        s1, s2 = (b1, b2) if s1 is None else (s1 + b1, s2 + b2)
                    jax.block_until_ready(states)
                    block_seconds.append(time.perf_counter() - t0)
                    block_sweeps.append(n * thin)
                    block_compiled.append(_block._cache_size() > cache_before)
                    done += n
                    n_blocks_run += 1
                    bar.update(n)
                    if ckpt is not None and (n_blocks_run % checkpoint_every == 0 or done == total
                                             or guard.signum is not None):  # a signal: checkpoint this block, stop
                        _save_checkpoint(ckpt, fingerprint, key, states, done, records,
                                         np.zeros(0) if s1 is None else s1, np.zeros(0) if s2 is None else s2,
                                         seconds_before + time.perf_counter() - start, run_fp)
                        guard.written(ckpt, done)
                        checkpoint_written(ckpt, done)
                    if callback is not None:
                        callback(done, states)
                    if done < total and guard.signum is not None:
                        if ckpt is not None and guard.n_done != done:  # a signal during the callback
                            _save_checkpoint(ckpt, fingerprint, key, states, done, records,
                                             np.zeros(0) if s1 is None else s1, np.zeros(0) if s2 is None else s2,
                                             seconds_before + time.perf_counter() - start, run_fp)
                            guard.written(ckpt, done)
                        guard.check()
            finally:
                bar.close()
        seconds = seconds_before + time.perf_counter() - start
        base.report_run(driver="mcmc", desc=f"{spec.algorithm.name} ({num_chains} chains)", n_iter=int(done),
                        max_iter=int(total), units_warmup=int(n_warm), num_chains=int(num_chains), thin=int(thin),
                        resumed_from=int(first_done), checkpoint=None if ckpt is None else str(ckpt),
                        seconds=float(time.perf_counter() - start),
                        first_iteration_seconds=float(block_seconds[0]) if block_seconds else 0.0,
                        first_iteration_units=int(block_sweeps[0] // thin) if block_sweeps else 0,
                        t_start=t_start, t_end=time.perf_counter())

    bs, bw, bc = np.asarray(block_seconds), np.asarray(block_sweeps), np.asarray(block_compiled, bool)
    includes_compile = bool(bc.all()) if bs.size else False
    sel = bc if includes_compile else ~bc
    per_sweep = float(bs[sel].sum() / bw[sel].sum()) if bs.size else float("nan")
    out = {name: np.concatenate(parts, axis=1) for name, parts in records.items()}
    lp = out.pop("lp")
    stats = {"lp": lp, **{n: out.pop(n) for n in tuple(spec.mean_stats) + tuple(spec.last_stats)}}
    dims = {**{k: list(v) for k, v in spec.algorithm.dims.items()}, **{k: list(v) for k, v in spec.extra_dims.items()},
            "pred": ["cell"], "pred_mean": ["cell"], "pred_sd": ["cell"]}
    coords = dict(spec.coords(data, K))
    extra = None
    if at is not None:
        coords["cell"] = np.arange(n_cells)
        c = num_chains * num_samples
        mean = s1.sum(axis=0) / c
        var = np.maximum(s2.sum(axis=0) / c - mean ** 2, 0.0) * (c / max(c - 1, 1))
        extra = {"predictions": {"pred_mean": mean, "pred_sd": np.sqrt(var)}}
    all_attrs = {
        "model": spec.model, "method": spec.method, "source": source or spec.algorithm.source, "seed": seed,
        "num_chains": num_chains, "num_warmup": num_warmup, "num_warmup_run": n_warm * thin,
        "num_samples": num_samples, "thin": thin, "K": K, "n_rows": int(n_rows), "n_cols": int(n_cols),
        "nnz": int(nnz), "dtype": str(dtype), "seconds": float(seconds),
        "seconds_first_block": float(bs[0]) if bs.size else float("nan"), "seconds_per_sweep": per_sweep,
        "per_sweep_includes_compile": int(includes_compile), "block": int(per_block),
        **hyper_attrs(hyper), **dict(step_options), **init_options, **dict(attrs or {}),
    }
    all_attrs = {k: ("None" if v is None else v) for k, v in all_attrs.items()}
    return arviz_io.to_inference_data(out, dims=dims, coords=coords, sample_stats=stats, extra_groups=extra,
                                      attrs=all_attrs)
