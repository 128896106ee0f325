"""Gamma-distribution helpers shared by every Gamma-Poisson and Gamma-hyperprior model.

All Gammas are in the shape/rate parameterisation: density
``x^(shape-1) exp(-rate x) rate^shape / Gamma(shape)``. These are the expectations
that coordinate-ascent VI needs (E[x], E[log x]), the entropy, and the expected log
density of a Gamma prior whose rate is itself random (E_q[log Gamma(x; a, r)] for
independent q(x), q(r)). Written once here and used by every solver.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln

__all__ = [
    "gamma_mean",
    "gamma_log_mean",
    "gamma_entropy",
    "expected_gamma_logpdf",
    "gamma_natural_params",
    "gamma_from_natural",
]


def gamma_mean(shape, rate):
    """E[x] = shape / rate for x ~ Gamma(shape, rate), elementwise.

    Parameters
    ----------
    shape : jax.Array or numpy.ndarray, any shape (e.g. (I, K)), float
        Gamma shape parameters (> 0; not checked).
    rate : jax.Array or numpy.ndarray, shape broadcasting with ``shape``, float
        Gamma rate parameters (> 0, inverse units of x; not checked).

    Returns
    -------
    jax.Array, the broadcast shape, float (the operands' dtype)
        E[x]; a numpy array when both operands are numpy arrays.

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast (numpy raises ValueError when both operands are numpy arrays).

    Source: ``001_30a2018ec18c20b9.txt``, "Variational algorithm" section (the expectation of a
    Gamma variable is the shape divided by the rate, used in the rate updates).
    """
    return shape / rate


def gamma_log_mean(shape, rate):
    """E[log x] = digamma(shape) - log(rate) for x ~ Gamma(shape, rate), elementwise.

    Parameters
    ----------
    shape : jax.Array, any shape (e.g. (I, K)), float
        Gamma shape parameters (> 0; not checked).
    rate : jax.Array, shape broadcasting with ``shape``, float
        Gamma rate parameters (> 0; not checked).

    Returns
    -------
    jax.Array, the broadcast shape, float (the operands' dtype)
        E[log x].

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast.

    Source: ``001_30a2018ec18c20b9.txt``, "Variational algorithm" section
    (``E_q[log theta_uk] = Psi(gamma_shp) - log gamma_rte``, in the phi update).
    """
    return digamma(shape) - jnp.log(rate)


def gamma_entropy(shape, rate):
    """Differential entropy of Gamma(shape, rate), elementwise.

    H = shape - log(rate) + log Gamma(shape) + (1 - shape) digamma(shape), in nats.

    Parameters
    ----------
    shape : jax.Array, any shape, float
        Gamma shape parameters (> 0; not checked).
    rate : jax.Array, shape broadcasting with ``shape``, float
        Gamma rate parameters (> 0; not checked).

    Returns
    -------
    jax.Array, the broadcast shape, float (the operands' dtype)
        The entropy of each Gamma, in nats.

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast.

    Source: project addition (the standard Gamma entropy, for the ELBO terms of the VI solvers).
    """
    return shape - jnp.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)


def expected_gamma_logpdf(prior_shape, e_log_rate, e_rate, e_log_x, e_x):
    """E_q[log Gamma(x; prior_shape, r)] with x and r independent under q.

    ``prior_shape * E[log r] - log Gamma(prior_shape) + (prior_shape - 1) E[log x] - E[r] E[x]``.
    For a fixed rate r0 pass ``e_log_rate = log r0`` and ``e_rate = r0``.

    Parameters
    ----------
    prior_shape : float or jax.Array, broadcasting shape, float
        The prior's fixed shape a (> 0; not checked).
    e_log_rate : float or jax.Array, broadcasting shape, float
        E_q[log r] of the prior's rate.
    e_rate : float or jax.Array, broadcasting shape, float
        E_q[r].
    e_log_x : jax.Array, broadcasting shape (e.g. (I, K)), float
        E_q[log x].
    e_x : jax.Array, broadcasting shape (e.g. (I, K)), float
        E_q[x].

    Returns
    -------
    jax.Array, the broadcast shape of the five arguments, float
        The expected log density, elementwise (sum it for an ELBO term).

    Raises
    ------
    TypeError
        Not of its own (no value checks: traced code): jax raises it for operands that do not
        broadcast (numpy raises ValueError when all operands are numpy arrays).

    Source: project addition (derived: the expected log Gamma prior in the ELBO of the
    Gamma-hyperprior models, e.g. ``001_30a2018ec18c20b9.txt`` hierarchy and ``003`` eq. (17)).
    """
    return (
        prior_shape * e_log_rate
        - gammaln(prior_shape)
        + (prior_shape - 1.0) * e_log_x
        - e_rate * e_x
    )


def gamma_natural_params(shape, rate):
    """Natural parameters (shape - 1, -rate) of Gamma(shape, rate), sufficient statistics (log x, x).

    Parameters
    ----------
    shape : jax.Array or numpy.ndarray, any shape, float
        Gamma shape parameters.
    rate : jax.Array or numpy.ndarray, any shape, float
        Gamma rate parameters.

    Returns
    -------
    eta1 : array, the shape and dtype of ``shape``
        ``shape - 1``, the natural parameter of log x.
    eta2 : array, the shape and dtype of ``rate``
        ``-rate``, the natural parameter of x.

    Raises
    ------
    None of its own.

    Source: project addition (exponential-family form; ``001_30a2018ec18c20b9.txt``,
    "Variational algorithm" footnote on the natural parameterization).
    """
    return shape - 1.0, -rate


def gamma_from_natural(eta1, eta2):
    """Inverse of `gamma_natural_params`: (shape, rate) = (eta1 + 1, -eta2).

    Parameters
    ----------
    eta1 : jax.Array or numpy.ndarray, any shape, float
        Natural parameter of log x (shape - 1).
    eta2 : jax.Array or numpy.ndarray, any shape, float
        Natural parameter of x (-rate).

    Returns
    -------
    shape : array, the shape and dtype of ``eta1``
        ``eta1 + 1``.
    rate : array, the shape and dtype of ``eta2``
        ``-eta2``.

    Raises
    ------
    None of its own.

    Source: project addition (inverse of `gamma_natural_params`).
    """
    return eta1 + 1.0, -eta2
