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
    """E[x] = shape / rate for x ~ Gamma(shape, rate). Arrays broadcast."""
    return shape / rate


def gamma_log_mean(shape, rate):
    """E[log x] = digamma(shape) - log(rate) for x ~ Gamma(shape, rate)."""
    return digamma(shape) - jnp.log(rate)


def gamma_entropy(shape, rate):
    """Differential entropy of Gamma(shape, rate), elementwise.

    H = shape - log(rate) + log Gamma(shape) + (1 - shape) digamma(shape).
    """
    return shape - jnp.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)


def expected_gamma_logpdf(prior_shape, e_log_rate, e_rate, e_log_x, e_x):
    """E_q[log Gamma(x; prior_shape, r)] with x and r independent under q.

    ``prior_shape * E[log r] - log Gamma(prior_shape) + (prior_shape - 1) E[log x] - E[r] E[x]``.
    For a fixed rate r0 pass ``e_log_rate = log r0`` and ``e_rate = r0``.
    """
    return (
        prior_shape * e_log_rate
        - gammaln(prior_shape)
        + (prior_shape - 1.0) * e_log_x
        - e_rate * e_x
    )


def gamma_natural_params(shape, rate):
    """Natural parameters (shape - 1, -rate) of Gamma(shape, rate), sufficient statistics (log x, x)."""
    return shape - 1.0, -rate


def gamma_from_natural(eta1, eta2):
    """Inverse of `gamma_natural_params`: (shape, rate) = (eta1 + 1, -eta2)."""
    return eta1 + 1.0, -eta2
