"""Logistic-Gaussian math shared by the logistic factorization solvers (SIBM, RG).

Written once here and used by every solver whose likelihood has a sigmoid:
``002_5408d341cb9fc544.txt`` (SIBM, eqs. 6-8) and ``003_203f63200c0d7157.txt``
(random graphs, eqs. 11-16, 19).

Jaakkola-Jordan bound
---------------------
For every real ``x`` and every ``xi``,

    log sigma(x) >= log sigma(xi) + (x - xi) / 2 - lambda(xi) (x^2 - xi^2),

    lambda(xi) = (sigma(xi) - 1/2) / (2 xi) = tanh(xi / 2) / (4 xi)   (> 0; lambda(0) = 1/8).

Proof sketch (derived here, not copied): ``f(x) = log sigma(x) - x/2 = -log(2 cosh(x/2))`` is
even and convex in ``x^2``, so it lies above its tangent in ``x^2`` at ``xi^2``, whose slope
is ``df/d(x^2) = f'(x) / (2x) = -tanh(x/2) / (4x) = -lambda(x)``. For a binary ``g`` the bound
on ``log sigma(x)^g sigma(-x)^(1-g) = g x + log sigma(-x)`` follows from ``log sigma(-x)`` =
``log sigma(x) - x``:

    g x + log sigma(-x) >= log sigma(xi) + (g - 1/2) x - xi/2 - lambda(xi) (x^2 - xi^2).

Sign convention. This module uses the positive ``lambda`` above, as seed 003 writes it
(after its eq. 11). Seed 002 writes ``lambda(xi) = (1/2 - sigma(xi)) / (2 xi)`` (after its
eq. 6), the negative of ours, with ``+ lambda (a^2 - xi^2)`` in the exponent: the same bound.
Code that follows seed 002 uses ``-jj_lambda``.

Optimal xi. For a Gaussian (or any) ``q`` over ``x``, the expected bound is maximized over
``xi`` at ``xi^2 = E_q[x^2]`` (the derivative in ``xi`` is ``-lambda'(xi) (E[x^2] - xi^2)``
with ``lambda' < 0`` for ``xi > 0``); the bound is even in ``xi``, and ``xi >= 0`` is returned.

MacKay's approximation. ``E[sigma(x)]`` for ``x ~ N(m, s2)`` is approximated by
``sigma(m / sqrt(1 + pi s2 / 8))`` (MacKay 1992), as seed 003 eq. (19) uses for the like
probability.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "jj_lambda",
    "jj_log_bound",
    "jj_expected_log_bound",
    "optimal_xi",
    "mackay_probit",
]

# below this |xi| the series 1/8 - xi^2/96 is used (relative error < 1e-12 there)
_SMALL_XI = 1e-3


def jj_lambda(xi):
    """lambda(xi) = (sigma(xi) - 1/2) / (2 xi) = tanh(xi/2) / (4 xi), elementwise.

    Parameters
    ----------
    xi : jax.Array or array-like, any shape, float
        The variational parameter (its sign does not matter).

    Returns
    -------
    jax.Array, the shape and dtype of ``xi``
        Values in (0, 1/8]; the limit 1/8 at ``xi = 0`` (series ``1/8 - xi^2/96`` for
        ``|xi| < 1e-3``, so ``jax.grad`` is finite there too).

    Raises
    ------
    None of its own (no value checks: traced code).

    Source: ``003_203f63200c0d7157.txt`` after eq. (11); the negative of ``002`` after eq. (6).
    """
    xi = jnp.asarray(xi)
    small = jnp.abs(xi) < _SMALL_XI
    safe = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.125 - xi * xi / 96.0, jnp.tanh(0.5 * safe) / (4.0 * safe))


def jj_log_bound(x, xi, g=1):
    """The Jaakkola-Jordan lower bound of ``g x + log sigma(-x)`` (= log Bernoulli(g | sigma(x))).

    Parameters
    ----------
    x : jax.Array or array-like, any shape, float
        The logit.
    xi : jax.Array, broadcasting with ``x``, float
        The bound's variational parameter.
    g : int or array of 0/1, broadcasting with ``x``, default 1
        The binary observation (1: the bound of ``log sigma(x)``).

    Returns
    -------
    jax.Array, the broadcast shape, float
        ``log sigma(xi) + (g - 1/2) x - xi/2 - lambda(xi) (x^2 - xi^2)`` (<= the exact value,
        equal where ``|x| = |xi|``).

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast.

    Source: ``003`` eq. (11) (bound of one edge's likelihood); ``002`` eq. (6).
    """
    x = jnp.asarray(x)
    return jax.nn.log_sigmoid(xi) + (g - 0.5) * x - 0.5 * xi - jj_lambda(xi) * (x * x - xi * xi)


def jj_expected_log_bound(mean, second_moment, xi, g=1):
    """E_q of `jj_log_bound` for a logit with ``E[x] = mean`` and ``E[x^2] = second_moment``.

    The bound is quadratic in ``x``, so only the first two moments of ``q`` enter:
    ``log sigma(xi) + (g - 1/2) mean - xi/2 - lambda(xi) (second_moment - xi^2)``.

    Parameters
    ----------
    mean : jax.Array, any shape, float
        E_q[x] of the logit.
    second_moment : jax.Array, broadcasting with ``mean``, float
        E_q[x^2] (>= mean^2; not checked).
    xi : jax.Array, broadcasting, float
        The bound's variational parameter.
    g : int or array of 0/1, broadcasting, default 1
        The binary observation.

    Returns
    -------
    jax.Array, the broadcast shape, float
        ``log sigma(xi) + (g - 1/2) mean - xi/2 - lambda(xi) (second_moment - xi^2)``.

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast (numpy raises ValueError when all operands are numpy arrays).

    Source: ``002`` eq. (7); ``003`` eq. (12).
    """
    return jax.nn.log_sigmoid(xi) + (g - 0.5) * mean - 0.5 * xi - jj_lambda(xi) * (second_moment - xi * xi)


def optimal_xi(second_moment):
    """The xi that maximizes the expected bound: ``sqrt(E_q[x^2])`` (>= 0).

    Parameters
    ----------
    second_moment : jax.Array or array-like, any shape, float
        E_q[x^2] of the logit (>= 0; negative values are clipped to 0).

    Returns
    -------
    jax.Array, the shape and dtype of ``second_moment``
        ``sqrt(max(second_moment, 0))``.

    Raises
    ------
    None of its own (no value checks: traced code).

    Source: ``002`` eq. (8); ``003`` eq. (16).
    """
    return jnp.sqrt(jnp.maximum(jnp.asarray(second_moment), 0.0))


def mackay_probit(mean, variance):
    """MacKay's approximation of ``E[sigma(x)]``, ``x ~ N(mean, variance)``.

    ``sigma(mean / sqrt(1 + pi variance / 8))``: exact at ``variance = 0``, error below 0.02
    everywhere (the probit approximation sigma(a) ~ Phi(a sqrt(pi/8)) made exact in the
    Gaussian integral).

    Parameters
    ----------
    mean : jax.Array or array-like, any shape, float
        The Gaussian's mean.
    variance : jax.Array or array-like, broadcasting with ``mean``, float
        The Gaussian's variance (>= 0; not checked).

    Returns
    -------
    jax.Array, the broadcast shape, float
        Values in (0, 1).

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast.

    Source: ``003_203f63200c0d7157.txt`` eq. (19).
    """
    mean = jnp.asarray(mean)
    return jax.nn.sigmoid(mean / jnp.sqrt(1.0 + jnp.pi * jnp.asarray(variance) / 8.0))
