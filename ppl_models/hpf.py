"""Hierarchical Poisson factorization (HPF) as a NumPyro program.

Source: ``001_30a2018ec18c20b9.txt`` (Gopalan, Hofman, Blei, "Hierarchical Poisson
Factorization", variational-inference section; the generative process is the one
whose complete conditionals that section lists). All Gammas are shape/rate.

    xi_u      ~ Gamma(a', a'/b')        user activity            (u = 1..I)
    theta_uk  ~ Gamma(a, xi_u)          user weights             (k = 1..K)
    eta_i     ~ Gamma(c', c'/d')        item popularity          (i = 1..J)
    beta_ik   ~ Gamma(c, eta_i)         item weights
    y_ui      ~ Poisson(theta_u . beta_i)

Prior rate of the activity: the seed's complete conditional for xi_u,
``Gamma(a' + K a, b' + sum_k theta_uk)``, implies a prior rate of b'. We use
a'/b' as the published paper (Gopalan et al., UAI 2015, sec. 2) and hpfrec do, so
that E[xi_u] = b' and comparisons with hpfrec are like for like; the same holds
for eta_i with c'/d'. The errata table (`validation.checks.errata`) records this.

The auxiliary counts z_uik of the seed are not in the program: summing the K
Poisson(theta_uk beta_ik) variables gives y_ui ~ Poisson(theta_u . beta_i)
exactly, so NUTS sees only continuous latents.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

__all__ = ["HPFHyper", "model", "simulate", "expected_rates"]


class HPFHyper(NamedTuple):
    """HPF hyperparameters, named as in the paper (all Gammas shape/rate).

    Defaults a = a' = c = c' = 0.3, b' = d' = 1: the settings used in the
    published HPF experiments (Gopalan et al. 2015) and hpfrec's defaults, so
    results compare with hpfrec directly. The seed itself prints no values.

    Parameters
    ----------
    a : float > 0, default 0.3
        Shape of the user weights theta_uk.
    a_prime : float > 0, default 0.3
        Shape a' of the user activity xi_u.
    b_prime : float > 0, default 1.0
        Prior mean b' of xi_u (the prior rate is a'/b').
    c : float > 0, default 0.3
        Shape of the item weights beta_ik.
    c_prime : float > 0, default 0.3
        Shape c' of the item popularity eta_i.
    d_prime : float > 0, default 1.0
        Prior mean d' of eta_i (the prior rate is c'/d').

    Raises
    ------
    None of its own (a NamedTuple; the values are not checked).

    Source: ``001_30a2018ec18c20b9.txt``, sec. "Variational Inference" (the hyperparameters of the
    generative process; module docstring); defaults: project addition (Gopalan et al. 2015, hpfrec).
    """

    a: float = 0.3
    """Shape of the user weights theta_uk."""
    a_prime: float = 0.3
    """Shape of the user activity xi_u."""
    b_prime: float = 1.0
    """Prior mean of xi_u (the prior rate is a'/b')."""
    c: float = 0.3
    """Shape of the item weights beta_ik."""
    c_prime: float = 0.3
    """Shape of the item popularity eta_i."""
    d_prime: float = 1.0
    """Prior mean of eta_i (the prior rate is c'/d')."""


def model(y, n_components: int, hyper: HPFHyper = HPFHyper()):
    """NumPyro program of HPF over a full (small, dense) count matrix.

    Intended for NUTS on small matrices: it builds the dense I x J rate matrix.

    Parameters
    ----------
    y : array_like, shape (I, J), float or int
        Non-negative counts: the whole matrix, zeros included (the zeros are data). Its shape
        gives I and J, so it cannot be None here: draw from the prior predictive with `simulate`.
    n_components : int
        K, the number of latent components.
    hyper : HPFHyper, default HPFHyper()
        Hyperparameters.

    Returns
    -------
    None
        A NumPyro program: sites ``xi`` (I,), ``theta`` (I, K), ``eta`` (J,), ``beta`` (J, K),
        ``y`` (I, J); float.

    Raises
    ------
    None of its own; ``y=None`` raises AttributeError (its shape is read).

    Source: ``001_30a2018ec18c20b9.txt``, sec. "Variational Inference" (the generative process
    whose complete conditionals it lists), with the prior rates a'/b', c'/d' (module docstring).
    """
    n_users, n_items = y.shape
    _hpf_body(n_users, n_items, n_components, hyper, y)


def _hpf_body(n_users, n_items, n_components, hyper, y):
    with numpyro.plate("users", n_users, dim=-1):
        xi = numpyro.sample("xi", dist.Gamma(hyper.a_prime, hyper.a_prime / hyper.b_prime))
    with numpyro.plate("users_k", n_users, dim=-2), numpyro.plate("components_u", n_components, dim=-1):
        theta = numpyro.sample("theta", dist.Gamma(hyper.a, xi[:, None]))
    with numpyro.plate("items", n_items, dim=-1):
        eta = numpyro.sample("eta", dist.Gamma(hyper.c_prime, hyper.c_prime / hyper.d_prime))
    with numpyro.plate("items_k", n_items, dim=-2), numpyro.plate("components_i", n_components, dim=-1):
        beta = numpyro.sample("beta", dist.Gamma(hyper.c, eta[:, None]))
    rate = theta @ beta.T
    with numpyro.plate("rows", n_users, dim=-2), numpyro.plate("cols", n_items, dim=-1):
        numpyro.sample("y", dist.Poisson(rate), obs=y)


def simulate(key, n_users: int, n_items: int, n_components: int, hyper: HPFHyper = HPFHyper()):
    """Draw parameters and a count matrix from the HPF prior predictive.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    n_users, n_items, n_components : int
        I, J and K; each must be >= 1.
    hyper : HPFHyper, default HPFHyper()
        Hyperparameters.

    Returns
    -------
    params : dict of str to jax.Array
        ``xi`` (I,), ``theta`` (I, K), ``eta`` (J,), ``beta`` (J, K), float.
    y : jax.Array, shape (I, J), float
        Counts.

    Raises
    ------
    ValueError
        If a size is not an integer >= 1.

    Source: ``001_30a2018ec18c20b9.txt`` (prior predictive of `model`; module docstring).
    """
    for name, value in (("n_users", n_users), ("n_items", n_items), ("n_components", n_components)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    trace = numpyro.handlers.trace(numpyro.handlers.seed(_hpf_body, key)).get_trace(
        n_users, n_items, n_components, hyper, None
    )
    params = {name: trace[name]["value"] for name in ("xi", "theta", "eta", "beta")}
    return params, trace["y"]["value"]


def expected_rates(theta, beta):
    """The Poisson rates theta @ beta.T.

    Parameters
    ----------
    theta : jax.Array, shape (..., I, K), float
        User weights (leading axes, e.g. chains and draws, broadcast).
    beta : jax.Array, shape (..., J, K), float
        Item weights.

    Returns
    -------
    jax.Array, shape (..., I, J), float
        The rate of each cell, in the dtype of the inputs.

    Raises
    ------
    None of its own; factor matrices whose K differ make JAX raise ValueError.

    Source: ``001_30a2018ec18c20b9.txt`` (y_ui ~ Poisson(theta_u . beta_i); module docstring).
    """
    return jnp.einsum("...uk,...ik->...ui", theta, beta)
