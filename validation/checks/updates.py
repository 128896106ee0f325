"""Update-level validation: generic checks that a hand-derived solver's updates are right.

These functions know nothing about a particular model; the model glue (for HPF:
`validation.models.hpf`) supplies the objective (the ELBO as a function of a pytree of
variational parameters), the updates and the dense brute-force twins.

- `stationarity`: after a closed-form coordinate update, the gradient of the ELBO
  with respect to the updated block (``jax.grad``) must vanish.
- `monotone`: a CAVI sweep never lowers the ELBO; `monotone_sweeps` runs the sweeps and checks.
- `max_relative_difference`: a cached / sparse computation equals its dense twin.

Source: project addition (validation level 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["StationarityResult", "stationarity", "monotone", "monotone_sweeps", "max_relative_difference"]


@dataclass(frozen=True)
class StationarityResult:
    """Gradient of the objective with respect to one updated block (made by `stationarity`).

    Parameters
    ----------
    block : str
        Label of the updated block (for reports; may be empty).
    grad_after : float
        max |d objective / d param| over the block's fields at the updated point.
    grad_before : float
        The same at the point before the update (the scale the update had to remove).
    rtol : float
        Relative tolerance of `passed`.

    Raises
    ------
    None of its own (a frozen dataclass; the fields are not checked).

    Source: project addition (validation level 1).
    """

    block: str
    grad_after: float
    grad_before: float
    rtol: float

    @property
    def passed(self) -> bool:
        """Whether ``grad_after <= rtol * max(grad_before, 1)`` (a bool).

        Raises
        ------
        None of its own.

        Source: project addition (validation level 1).
        """
        return bool(self.grad_after <= self.rtol * max(self.grad_before, 1.0))


def _max_abs_grad(objective, params, fields) -> float:
    grads = jax.jit(jax.grad(objective))(params)
    leaves = [getattr(grads, f) if hasattr(grads, f) else grads[f] for f in fields]
    return float(max(jnp.max(jnp.abs(g)) for g in leaves))


def stationarity(
    objective: Callable,
    before,
    after,
    fields: Sequence[str],
    *,
    block: str = "",
    rtol: float = 1e-7,
) -> StationarityResult:
    """Check that ``after`` is a stationary point of ``objective`` in ``fields``.

    Parameters
    ----------
    objective : callable pytree -> scalar
        The ELBO as a differentiable function of the parameter pytree (a NamedTuple
        or dict; all other fields are held fixed by the gradient being taken per field).
    before, after : pytree
        Parameters before and after the coordinate update (float arrays of the shapes
        ``objective`` takes).
    fields : sequence of str
        Names of the updated fields (NamedTuple attributes or dict keys).
    block : str, default ""
        Label copied into the result (keyword-only).
    rtol : float, default 1e-7
        Pass if the gradient after the update is at most ``rtol`` times the gradient
        before (or ``rtol`` in absolute terms when that is below 1). In float64 an
        exact update leaves a gradient at rounding level (1e-10 relative or less);
        a wrong update leaves a gradient of the order of the one it started from.

    Returns
    -------
    StationarityResult
        The max absolute gradient over ``fields`` after and before the update, as Python floats.

    Raises
    ------
    AttributeError or KeyError
        Not raised explicitly: a name in ``fields`` that is not in the pytree fails the lookup.

    Source: project addition (validation level 1).
    """
    return StationarityResult(
        block=block,
        grad_after=_max_abs_grad(objective, after, fields),
        grad_before=_max_abs_grad(objective, before, fields),
        rtol=rtol,
    )


def monotone(values: Iterable[float], *, rtol: float = 1e-9) -> tuple[bool, float]:
    """Whether a sequence of ELBO values never decreases.

    A decrease smaller than ``rtol * |value|`` (floating-point rounding of a sum
    of many terms) is tolerated.

    Parameters
    ----------
    values : iterable of float
        The ELBO trace, compared as a float64 array of shape (T,).
    rtol : float, default 1e-9
        Tolerated relative decrease ``(v[t] - v[t+1]) / |v[t]|`` (keyword-only).

    Returns
    -------
    tuple (bool, float)
        ``(ok, worst)``: ``worst`` is the largest relative decrease (0.0 when none, or when
        T < 2), ``ok`` is ``worst <= rtol``.

    Raises
    ------
    None of its own.

    Source: project addition (validation level 1: CAVI never lowers the ELBO).
    """
    v = np.asarray(list(values), dtype=np.float64)
    if v.size < 2:
        return True, 0.0
    drops = (v[:-1] - v[1:]) / np.maximum(np.abs(v[:-1]), 1e-300)
    worst = float(max(drops.max(), 0.0))
    return worst <= rtol, worst


def monotone_sweeps(
    objective: Callable,
    sweep: Callable,
    state,
    sweeps: int,
    *,
    rtol: float = 1e-9,
) -> tuple[bool, float, np.ndarray]:
    """Run ``sweeps`` batch sweeps from ``state`` and check that the objective never decreases.

    The loop shared by the models' ``monotone_check`` (`validation.models.sibm`, `validation.models.rg`): the
    trace is ``[objective(state)]`` followed by the value after each sweep, then `monotone`.

    Run it inside ``jax.enable_x64(True)`` for a float64 check (the caller's context is kept).

    Parameters
    ----------
    objective : callable
        ``objective(state) -> scalar``, the ELBO at the starting state.
    sweep : callable
        ``sweep(state) -> (new_state, value)``, one exact coordinate-ascent sweep and the
        objective of the new state (e.g. ``lambda s: (lambda r: (r[0], r[1].elbo))(step(s))``).
    state : pytree
        The starting state (any pytree the two callables accept).
    sweeps : int
        Number of sweeps, >= 0.
    rtol : float, default 1e-9
        Tolerated relative decrease (floating-point rounding), as `monotone` (keyword-only).

    Returns
    -------
    tuple (bool, float, numpy.ndarray)
        ``(ok, worst, trace)``: as `monotone`, and the trace, float64 of shape (sweeps + 1,).

    Raises
    ------
    ValueError
        ``sweeps`` is not an integer >= 0 (a bool counts as not an integer).

    Source: project addition (validation level 1).
    """
    if isinstance(sweeps, bool) or int(sweeps) != sweeps or sweeps < 0:
        raise ValueError(f"sweeps must be an integer >= 0, got {sweeps!r}")
    trace = [float(objective(state))]
    for _ in range(int(sweeps)):
        state, value = sweep(state)
        trace.append(float(value))
    ok, worst = monotone(trace, rtol=rtol)
    return ok, worst, np.asarray(trace)


def max_relative_difference(a, b) -> float:
    """max |a - b| / max(|b|, tiny), elementwise over arrays of the same shape.

    Parameters
    ----------
    a : array_like
        The computation under test (e.g. the cached / sparse one), any shape, cast to float64.
    b : array_like
        Its reference (the dense twin), the same shape as ``a``, cast to float64.

    Returns
    -------
    float
        The largest elementwise ``|a - b| / max(|b|, 1e-300)`` (a Python float).

    Raises
    ------
    ValueError
        The shapes of ``a`` and ``b`` differ.

    Source: project addition (validation level 1: sparse vs dense twins).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


def conditional_distance(log_unnormalized, log_candidate, grid) -> float:
    """Total-variation distance between a brute-force conditional and a claimed one, on a grid.

    Parameters
    ----------
    log_unnormalized : callable array (G,) -> array (G,)
        log of the unnormalized complete conditional (log prior + log likelihood of
        everything that depends on the variable), evaluated pointwise.
    log_candidate : callable array (G,) -> array (G,)
        log density of the claimed (closed-form) conditional.
    grid : array (G,), increasing, positive
        Points of the variable's support. Both densities are moved to the log scale
        (density of log x = p(x) x), where Gamma densities with shape < 1 stay
        bounded, normalized numerically by the trapezoid rule and compared.

    Returns
    -------
    float
        In [0, 1]: 0.5 * integral |p - q|. An exact conditional gives a distance
        at the level of the quadrature error (below 1e-6 on a fine grid); a wrong one
        gives a distance of the order of the error in its parameters.

    Raises
    ------
    None of its own.

    Source: project addition (validation level 1).
    """
    grid = np.asarray(grid, dtype=np.float64)
    t = np.log(grid)
    out = []
    for fn in (log_unnormalized, log_candidate):
        lp = np.asarray(fn(grid), dtype=np.float64) + t  # log density of log x
        p = np.exp(lp - lp.max())
        out.append(p / np.trapezoid(p, t))
    return float(0.5 * np.trapezoid(np.abs(out[0] - out[1]), t))
