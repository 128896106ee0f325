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
    """Mean and variance of ``N`` given its natural parameters.

    ``precision`` (P > 0) and ``precision_times_mean`` (h) broadcast; returns
    ``(h / P, 1 / P)`` with their broadcast shape and dtype.

    Raises nothing of its own (no value checks: traced code); operands that do not broadcast make
    jax raise TypeError
    (numpy raises ValueError when all operands are numpy arrays).

    Source: project addition (precision parameterization of ``004_90693a0965f06816.txt``,
    ``N(x | mu, sigma^-1)``; module docstring).
    """
    return precision_times_mean / precision, 1.0 / precision


def sample_normal_natural(key, precision, precision_times_mean):
    """One draw of ``x ~ N(h / P, 1 / P)`` per element (a univariate complete conditional).

    Parameters
    ----------
    key : jax PRNG key
    precision : array, any shape, float; P > 0 (not checked: traced code)
    precision_times_mean : array broadcasting with ``precision``, same dtype

    Returns
    -------
    array of the broadcast shape and dtype.

    Raises nothing of its own (no value checks: traced code); operands that do not broadcast make
    jax raise TypeError
    (numpy raises ValueError when all operands are numpy arrays).

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
    x : array, float; the values whose common precision is drawn, reduced over ``axis``
        (e.g. shape (I, K) with axis=0: one precision per factor column k).
    mean : array broadcasting with the reduced shape; the current mean mu.
    mu0, nu0, alpha0, beta0 : scalars; the normal-gamma prior (alpha0/beta0 shape/rate).

    Returns
    -------
    array of the reduced shape: one Gamma draw per reduced column.

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 lines 2, 4, 7, 9 (corrected).

    Raises nothing of its own (no value checks: traced code); an ``axis`` outside ``x.ndim``
    raises IndexError (from ``x.shape[axis]``).
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
    x : array, float, reduced over ``axis`` as in `sample_ng_precision`.
    precision : array of the reduced shape; the current precision lam.
    mu0, nu0 : scalars.

    Returns
    -------
    array of the reduced shape.

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 lines 3, 5, 8, 10.

    Raises nothing of its own (no value checks: traced code); an ``axis`` outside ``x.ndim``
    raises IndexError (from ``x.shape[axis]``).
    """
    n = x.shape[axis]
    post_precision = (nu0 + n) * precision
    return sample_normal_natural(key, post_precision, precision * (nu0 * mu0 + jnp.sum(x, axis=axis)))
