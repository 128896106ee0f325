"""Gaussian and normal-gamma helpers shared by every Gaussian factorization solver.

Written once here and used by the SBMF and MCMC-FM Gibbs samplers (univariate normal
complete conditionals, normal-gamma hyperparameter conditionals) and by the VI solvers
(Gaussian natural parameters). Precisions, never variances, are the second parameter
throughout, as in ``004_90693a0965f06816.txt`` (``N(x | mu, sigma^-1)`` with ``sigma`` a
precision).

Derivation of the normal-gamma conditionals. With prior
``mu, lam ~ NG(mu0, nu0, alpha0, beta0)``, i.e. ``lam ~ Gamma(alpha0, beta0)`` (shape/rate)
and ``mu | lam ~ N(mu0, (nu0 lam)^-1)``, and n values ``x_1..x_n ~ N(mu, lam^-1)``:

- ``lam | mu, x ~ Gamma(alpha0 + (n + 1) / 2, beta0 + (nu0 (mu - mu0)^2 + sum (x - mu)^2) / 2)``
  (the ``+1`` and the ``nu0`` term come from the density of mu given lam);
- ``mu | lam, x ~ N((nu0 mu0 + sum x) / (nu0 + n), ((nu0 + n) lam)^-1)``.

These two are the conditionals Algorithm 2 of the thesis samples in turn (lines 2-10,
with the errors listed in the errata table corrected).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "sample_normal_natural",
    "normal_natural_to_moments",
    "sample_ng_precision",
    "sample_ng_mean",
]


def normal_natural_to_moments(precision, precision_times_mean):
    """Mean and variance of ``N`` given its natural parameters: ``(h / P, 1 / P)``.

    Parameters
    ----------
    precision : jax.Array or numpy.ndarray, any shape, float
        P > 0, the precision (inverse variance; not checked: traced code).
    precision_times_mean : jax.Array or numpy.ndarray, broadcasting with ``precision``, float
        h = P * mean.

    Returns
    -------
    mean : array, the broadcast shape and dtype
        ``h / P``.
    variance : array, the shape and dtype of ``precision``
        ``1 / P``.

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast (numpy raises ValueError when both operands are numpy arrays).

    Source: project addition (precision parameterization of ``004_90693a0965f06816.txt``,
    ``N(x | mu, sigma^-1)``; module docstring).
    """
    return precision_times_mean / precision, 1.0 / precision


def sample_normal_natural(key, precision, precision_times_mean):
    """One draw of ``x ~ N(h / P, 1 / P)`` per element (a univariate complete conditional).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    precision : jax.Array, any shape, float
        P > 0, the conditional's precision (not checked: traced code).
    precision_times_mean : jax.Array, broadcasting with ``precision``, same dtype
        h = P * mean.

    Returns
    -------
    jax.Array, the broadcast shape, the dtype of ``h / P``
        One independent draw per element.

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast (numpy raises ValueError when both operands are numpy arrays).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 (the univariate normal complete conditionals
    it samples); module docstring.
    """
    mean, var = normal_natural_to_moments(precision, precision_times_mean)
    shape = jnp.broadcast_shapes(jnp.shape(precision), jnp.shape(precision_times_mean))
    return mean + jnp.sqrt(var) * jax.random.normal(key, shape, dtype=jnp.result_type(mean))


def sample_ng_precision(key, x, mean, mu0, nu0, alpha0, beta0, axis=0):
    """Draw ``lam | mu, x`` under a normal-gamma prior (module docstring, first line).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    x : jax.Array, float
        The values whose common precision is drawn, reduced over ``axis`` (e.g. shape (I, K) with
        axis=0: one precision per factor column k).
    mean : jax.Array, broadcasting with the reduced shape (e.g. (K,)), float
        The current mean mu.
    mu0, nu0, alpha0, beta0 : float
        The normal-gamma prior (alpha0 / beta0 shape / rate of lam; nu0 scales lam for mu).
    axis : int, default 0
        The axis of ``x`` over which the values share one precision.

    Returns
    -------
    jax.Array, the reduced shape (``x`` without ``axis``, broadcast with ``mean``), float
        One Gamma draw of the precision lam per reduced column.

    Raises
    ------
    IndexError
        Not of its own (no value checks: traced code): ``x.shape[axis]`` raises it for an
        ``axis`` outside ``x.ndim``.

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 lines 2, 4, 7, 9 (corrected).
    """
    n = x.shape[axis]
    sq = jnp.sum((x - jnp.expand_dims(mean, axis)) ** 2, axis=axis)
    shape = alpha0 + 0.5 * (n + 1)
    rate = beta0 + 0.5 * (nu0 * (mean - mu0) ** 2 + sq)
    g = jax.random.gamma(key, jnp.broadcast_to(shape, rate.shape).astype(rate.dtype))
    return g / rate


def sample_ng_mean(key, x, precision, mu0, nu0, axis=0):
    """Draw ``mu | lam, x`` under a normal-gamma prior (module docstring, second line).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    x : jax.Array, float
        The values, reduced over ``axis`` as in `sample_ng_precision` (e.g. (I, K), axis=0).
    precision : jax.Array, the reduced shape (e.g. (K,)), float
        The current precision lam.
    mu0, nu0 : float
        The normal-gamma prior's mean and its precision multiplier.
    axis : int, default 0
        The axis of ``x`` over which the values share one mean.

    Returns
    -------
    jax.Array, the reduced shape, float
        One normal draw of the mean mu per reduced column.

    Raises
    ------
    IndexError
        Not of its own (no value checks: traced code): ``x.shape[axis]`` raises it for an
        ``axis`` outside ``x.ndim``.

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 lines 3, 5, 8, 10.
    """
    n = x.shape[axis]
    post_precision = (nu0 + n) * precision
    return sample_normal_natural(key, post_precision, precision * (nu0 * mu0 + jnp.sum(x, axis=axis)))
