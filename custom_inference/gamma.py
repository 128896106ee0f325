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
    """E[x] = shape / rate for x ~ Gamma(shape, rate). Arrays broadcast.

    Shapes: ``shape`` and ``rate`` are float arrays of any broadcasting shapes (e.g. (I, K));
    returns a float array of the broadcast shape and dtype.

    Raises nothing of its own (no value checks: traced code); operands that do not broadcast make
    jax raise TypeError
    (numpy raises ValueError when all operands are numpy arrays).

    Source: ``001_30a2018ec18c20b9.txt``, "Variational algorithm" section (the expectation of a
    Gamma variable is the shape divided by the rate, used in the rate updates).
    """
    return shape / rate


def gamma_log_mean(shape, rate):
    """E[log x] = digamma(shape) - log(rate) for x ~ Gamma(shape, rate).

    Shapes: ``shape`` and ``rate`` are float arrays of any broadcasting shapes (e.g. (I, K));
    returns a float array of the broadcast shape and dtype.

    Raises nothing of its own (no value checks: traced code); operands that do not broadcast make
    jax raise TypeError.

    Source: ``001_30a2018ec18c20b9.txt``, "Variational algorithm" section
    (``E_q[log theta_uk] = Psi(gamma_shp) - log gamma_rte``, in the phi update).
    """
    return digamma(shape) - jnp.log(rate)


def gamma_entropy(shape, rate):
    """Differential entropy of Gamma(shape, rate), elementwise.

    H = shape - log(rate) + log Gamma(shape) + (1 - shape) digamma(shape).

    Shapes: ``shape`` and ``rate`` are float arrays of any broadcasting shapes; returns a float
    array of the broadcast shape and dtype.

    Raises nothing of its own (no value checks: traced code); operands that do not broadcast make
    jax raise TypeError.

    Source: project addition (the standard Gamma entropy, for the ELBO terms of the VI solvers).
    """
    return shape - jnp.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)


def expected_gamma_logpdf(prior_shape, e_log_rate, e_rate, e_log_x, e_x):
    """E_q[log Gamma(x; prior_shape, r)] with x and r independent under q.

    ``prior_shape * E[log r] - log Gamma(prior_shape) + (prior_shape - 1) E[log x] - E[r] E[x]``.
    For a fixed rate r0 pass ``e_log_rate = log r0`` and ``e_rate = r0``.

    Shapes: all five arguments are float arrays (or scalars) of broadcasting shapes; returns a
    float array of the broadcast shape and dtype.

    Raises nothing of its own (no value checks: traced code); operands that do not broadcast make
    jax raise TypeError
    (numpy raises ValueError when all operands are numpy arrays).

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

    Shapes: ``shape`` and ``rate`` are float arrays of any shapes; returns a pair of arrays of
    those shapes and dtypes.

    Raises nothing of its own.

    Source: project addition (exponential-family form; ``001_30a2018ec18c20b9.txt``,
    "Variational algorithm" footnote on the natural parameterization).
    """
    return shape - 1.0, -rate


def gamma_from_natural(eta1, eta2):
    """Inverse of `gamma_natural_params`: (shape, rate) = (eta1 + 1, -eta2).

    Shapes: ``eta1`` and ``eta2`` are float arrays of any shapes; returns a pair ``(shape, rate)``
    of arrays of those shapes and dtypes.

    Raises nothing of its own.

    Source: project addition (inverse of `gamma_natural_params`).
    """
    return eta1 + 1.0, -eta2
