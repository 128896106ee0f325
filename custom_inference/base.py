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
- Public ``fit`` functions of VI, MAP and SGD solvers return `FitResult`; samplers return
  `arviz.InferenceData`; both carry a ``posterior`` group (draws from q for VI, the point
  estimate as one draw for MAP and SGD).
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
from typing import Any, Callable, Mapping, NamedTuple

import jax
import numpy as np

__all__ = ["Algorithm", "FitResult", "Interrupted", "KINDS", "TARGETS", "as_key", "check_latent_dim",
           "checkpoint_written", "on_checkpoint"]

KINDS = ("vi", "mcmc", "map", "sgd")
TARGETS = ("elbo", "log_joint", "objective")


class Algorithm(NamedTuple):
    """One solver, declared once in its module (``ALGORITHM = Algorithm(...)``).

    Fields
    ------
    name : str, the registry name, e.g. ``"hpf-cavi"``, ``"sbmf-gibbs"``.
    kind : one of `KINDS` ("vi", "mcmc", "map", "sgd").
    init : ``init(key, data, K, hyper, **options) -> State`` (State: NamedTuple of arrays).
    step : ``step(key, state, data, hyper, **options) -> (State, Info)``; Info of the new state.
    target : ``target(state, data, hyper) -> float scalar`` (ELBO, log joint or objective).
    target_name : one of `TARGETS`, what ``target`` computes.
    dims : mapping State field -> tuple of ArviZ dimension names (``("user", "component")``).
    source : seed file and section (or "project addition").
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
        """Validate the declaration; returns self. Raises ValueError on an unknown kind/target."""
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

    state : the solver's final State (NamedTuple of jax arrays).
    trace : float64 numpy array (n_rec,), the recorded target values (ELBO for VI, log joint for
        MAP, objective for SGD), in order.
    idata : `arviz.InferenceData` with a ``posterior`` group (draws from q for VI, the point
        estimate as one chain of one draw for MAP/SGD), plus the solver's own groups (e.g.
        ``variational_parameters``, ``vi_trace``) and attrs (model, method, source, settings).
    """

    state: Any
    trace: np.ndarray
    idata: Any

    @property
    def elbo(self) -> np.ndarray:
        """Alias of `trace` (the ELBO trace for VI solvers)."""
        return self.trace


def as_key(key) -> jax.Array:
    """A JAX PRNG key from a key or an integer seed.

    key : a ``jax.random.PRNGKey`` (uint32 (2,)), a new-style typed key, or a Python / numpy
        integer seed (``jax.random.PRNGKey(seed)``).
    Returns the key. Raises TypeError for anything else (floats, strings, None, bools).
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

    K : int-like (not bool, not a non-integral float). Returns int(K).
    Raises TypeError for a non-number, ValueError for K < 1 or a non-integral value.
    Source: project addition.
    """
    if isinstance(K, (bool, np.bool_)) or not isinstance(K, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"{name} must be an integer >= 1, got {K!r}")
    if not float(K).is_integer() or K < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {K!r}")
    return int(K)


# -- checkpoint hooks (project addition, issue 10) ---------------------------------------------


class Interrupted(RuntimeError):
    """A fit stopped on purpose right after writing a checkpoint (the checkpoint stays; fitting
    again with ``resume=True`` continues from it). Raised by the hook of `on_checkpoint` that
    ``validation.api.fit(..., _stop_after=n)`` installs to test resume == uninterrupted.
    Source: project addition."""


_CHECKPOINT_HOOKS: contextvars.ContextVar[tuple] = contextvars.ContextVar("checkpoint_hooks", default=())


@contextlib.contextmanager
def on_checkpoint(hook: Callable[[Any, int], None]):
    """Within the block, call ``hook(path, n_done)`` each time a driver (`vi_driver.run`,
    `mcmc_driver.sample`) has written a checkpoint: ``path`` the file, ``n_done`` the sweeps
    (VI) or units (samplers) it holds. An exception raised by the hook stops the fit with the
    checkpoint in place. Context-local (contextvars), so concurrent fits do not see each other's
    hooks. Source: project addition."""
    token = _CHECKPOINT_HOOKS.set(_CHECKPOINT_HOOKS.get() + (hook,))
    try:
        yield
    finally:
        _CHECKPOINT_HOOKS.reset(token)


def checkpoint_written(path, n_done: int) -> None:
    """Tell the hooks of `on_checkpoint` that the checkpoint at ``path`` (holding ``n_done``
    iterations) is on disk. Called by the drivers after every atomic checkpoint write.

    Parameters: ``path`` a str or path-like (passed to the hooks as given); ``n_done`` an int.

    Raises nothing of its own: an exception raised by a hook propagates (later hooks then do not run).

    Source: project addition.
    """
    for hook in _CHECKPOINT_HOOKS.get():
        hook(path, int(n_done))
