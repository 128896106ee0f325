r"""One-class collaborative filtering with random graphs ("RG") as a NumPyro program.

Source: ``003_203f63200c0d7157.txt`` (Paquet and Koenigstein), sec. 3: likelihood eqs. (2)-(5),
Gaussian vertex priors and Gamma hyperpriors (sec. 3.2, eq. 5), the hidden graph H (sec. 3, 4).

Generative process given the hidden graph H (edges (m, n) with h_mn = 1), Gammas shape/rate::

    tau_u, tau_v, tau_bu, tau_bv ~ Gamma(alpha, beta)                  (sec. 3.2, eq. 5)
    u_m ~ N(0, tau_u^-1 I_K),   b_m ~ N(0, tau_bu^-1)                  users m = 0..I-1
    v_n ~ N(0, tau_v^-1 I_K),   b_n ~ N(0, tau_bv^-1)                  items n = 0..J-1
    g_mn | h_mn = 1 ~ Bernoulli(sigma(u_m . v_n + b_m + b_n))           (eq. 2)
    g_mn = 0 where h_mn = 0                                             (eq. 3)

H is not a random site of the program: the paper defines its prior and its posterior factor
q(H) algorithmically (sec. 4.1, `custom_inference.rg.sample_hidden_graph`); given H the joint
(5) is this program times p(H), and the pairs with h_mn = 0 contribute the factor
``(1 - g)^(1 - h) = 1`` (eq. 3 with g = 0), so only the edges of H appear. ``g`` on the edges
of H is 1 for the observed graph G and 0 for the sampled "negative" edges.

With ``clamp_user_bias`` (sec. 6.1: "the user biases were clamped at zero") b_m = 0 and
tau_bu is absent.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["RGHyper", "model", "simulate", "check_hyper", "check_edges"]


class RGHyper(NamedTuple):
    """RG hyperparameters, named as in the paper; defaults are those of its experiments (sec. 6.1).

    All four precisions tau_u, tau_v, tau_bu, tau_bv share the hyperprior Gamma(alpha, beta)
    (shape/rate; mean alpha/beta = 1, variance alpha/beta^2 = 100 at the defaults).

    Parameters
    ----------
    alpha : float > 0, default 0.01
        Shape of the Gamma hyperprior of every precision tau (sec. 3.2; sec. 6.1: 0.01).
    beta : float > 0, default 0.01
        Rate of the Gamma hyperprior (sec. 3.2; sec. 6.1: 0.01).
    r : float > 0, default 0.5
        Rate parameter of the negative-item histogram, pi_max = r d_max (eq. 8; sec. 6.1 uses 1/2).
    clamp_user_bias : bool, default True
        b_m = 0 for every user (sec. 6.1 experiments); False gives the full model (5).

    Raises
    ------
    None of its own (a NamedTuple; `check_hyper` checks the values).

    Source: ``003_203f63200c0d7157.txt`` sec. 3.2, eq. (8), sec. 6.1 (defaults).
    """

    alpha: float = 0.01
    """Shape of the Gamma hyperprior of every precision tau (sec. 3.2; sec. 6.1: 0.01)."""
    beta: float = 0.01
    """Rate of the Gamma hyperprior (sec. 3.2; sec. 6.1: 0.01)."""
    r: float = 0.5
    """Rate parameter of the negative-item histogram, pi_max = r d_max (eq. 8; sec. 6.1 uses 1/2)."""
    clamp_user_bias: bool = True
    """b_m = 0 for every user (sec. 6.1 experiments); False gives the full model (5)."""


def check_hyper(hyper) -> None:
    """Check that ``hyper`` is a valid `RGHyper`.

    Traced ``alpha``, ``beta``, ``r`` are skipped.

    Parameters
    ----------
    hyper : RGHyper
        The hyperparameters (any object with the `RGHyper` fields).

    Returns
    -------
    None
        Returns only when the check passes.

    Raises
    ------
    ValueError
        Naming the field: a missing field, ``alpha``, ``beta`` or ``r`` not finite and > 0 (or, from
        ``float``, a string that is not a number), ``clamp_user_bias`` not a bool.
    TypeError
        From ``float``, for a non-numeric ``alpha``, ``beta`` or ``r``.

    Source: project addition (the hyperparameters of ``003_203f63200c0d7157.txt`` sec. 3.2, eq. 5,
    and sec. 6.1).
    """
    for name in RGHyper._fields:
        if not hasattr(hyper, name):
            raise ValueError(f"hyper has no field {name!r} (use ppl_models.rg.RGHyper)")
    for name in ("alpha", "beta", "r"):
        value = getattr(hyper, name)
        if isinstance(value, jax.core.Tracer):
            continue
        value = float(value)
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"hyper.{name} must be a positive finite number, got {value}")
    if not isinstance(hyper.clamp_user_bias, (bool, np.bool_)):
        raise ValueError(f"hyper.clamp_user_bias must be a bool, got {hyper.clamp_user_bias!r}")


def check_edges(users, items, n_users: int, n_items: int, K: int, g=None):
    """Validate the edge list of a hidden graph H.

    Parameters
    ----------
    users, items : array_like, shape (E,), int
        The edges (m, n) of H, E >= 1, no duplicates.
    n_users, n_items : int >= 1
        I and J (the index bounds).
    K : int >= 1
        The number of factors (checked only).
    g : array_like, shape (E,), 0/1, optional
        The like/dislike outcome of each edge.

    Returns
    -------
    users, items : numpy.ndarray, shape (E,), int32
        The edges.

    Raises
    ------
    ValueError
        Naming the field: sizes not positive integers, edge arrays not 1-D, not integer or of different
        lengths, empty, indices out of range, duplicate edges, ``g`` not 0/1 or of the wrong length.

    Source: project addition (the hidden graph H of ``003_203f63200c0d7157.txt`` sec. 3-4).
    """
    for name, value in (("n_users", n_users), ("n_items", n_items), ("K", K)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    users = np.asarray(users)
    items = np.asarray(items)
    for name, arr, bound in (("users", users, n_users), ("items", items, n_items)):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must hold integer indices, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= bound):
            raise ValueError(f"{name} index out of range: found [{arr.min()}, {arr.max()}], allowed [0, {bound - 1}]")
    if users.shape != items.shape:
        raise ValueError(f"users and items must have the same length, got {users.size} and {items.size}")
    if users.size == 0:
        raise ValueError("users: the hidden graph has no edges")
    keys = users.astype(np.int64) * n_items + items
    if np.unique(keys).size != keys.size:
        raise ValueError("users/items: duplicate edges (m, n) in H")
    if g is not None:
        g = np.asarray(g)
        if g.shape != users.shape:
            raise ValueError(f"g must have shape {users.shape}, got {g.shape}")
        if np.any((g != 0) & (g != 1)):
            raise ValueError("g: values must be 0 or 1")
    return users.astype(np.int32), items.astype(np.int32)


def model(users, items, g, n_users: int, n_items: int, K: int, hyper: RGHyper = RGHyper()):
    """NumPyro program of RG given a fixed hidden graph H (eqs. 2-5).

    Work O(E K): no I x J array.

    Parameters
    ----------
    users, items : jax.Array, shape (E,), int
        The edges (m, n) of H (h_mn = 1); no duplicates.
    g : jax.Array, shape (E,), float or int, or None
        0/1 (1: observed in G, 0: a sampled negative edge); None samples g from the prior predictive.
    n_users, n_items, K : int
        I, J and the number of factors.
    hyper : RGHyper, default RGHyper()
        ``alpha``, ``beta`` and ``clamp_user_bias``; ``r`` is not used here (it only shapes q(H)).

    Returns
    -------
    None
        A NumPyro program: sites ``tau_u``, ``tau_v``, ``tau_bv`` (), ``tau_bu`` () unless clamped;
        ``u`` (I, K), ``v`` (J, K), ``b_item`` (J,), ``b_user`` (I,) unless clamped; ``g`` (E,)
        observed; float.

    Raises
    ------
    None of its own (no checks; `simulate` validates its inputs with `check_edges`).

    Source: ``003_203f63200c0d7157.txt`` eqs. (2)-(5), sec. 3.2.
    """
    a0, b0 = hyper.alpha, hyper.beta
    # hyperpriors (sec. 3.2, last lines of eq. 5)
    tau_u = numpyro.sample("tau_u", dist.Gamma(a0, b0))
    tau_v = numpyro.sample("tau_v", dist.Gamma(a0, b0))
    tau_bv = numpyro.sample("tau_bv", dist.Gamma(a0, b0))
    if not hyper.clamp_user_bias:
        tau_bu = numpyro.sample("tau_bu", dist.Gamma(a0, b0))
    # user vertices: N(u_m; 0, tau_u^-1 I) N(b_m; 0, tau_bu^-1) (eq. 5)
    with numpyro.plate("users", n_users):
        u = numpyro.sample("u", dist.Normal(0.0, 1.0 / jnp.sqrt(tau_u)).expand([K]).to_event(1))
        if hyper.clamp_user_bias:
            b_user = jnp.zeros(n_users)
        else:
            b_user = numpyro.sample("b_user", dist.Normal(0.0, 1.0 / jnp.sqrt(tau_bu)))
    # item vertices (eq. 5)
    with numpyro.plate("items", n_items):
        v = numpyro.sample("v", dist.Normal(0.0, 1.0 / jnp.sqrt(tau_v)).expand([K]).to_event(1))
        b_item = numpyro.sample("b_item", dist.Normal(0.0, 1.0 / jnp.sqrt(tau_bv)))
    # likelihood on the edges of H: sigma(u.v + b)^g (1 - sigma)^(1-g) (eqs. 2, 3, 5)
    a = jnp.sum(u[users] * v[items], axis=-1) + b_user[users] + b_item[items]
    with numpyro.plate("edges", users.shape[0]):
        numpyro.sample("g", dist.Bernoulli(logits=a), obs=g)


def simulate(key, users, items, n_users: int, n_items: int, K: int, hyper: RGHyper = RGHyper()):
    """Draw parameters and g on the edges of a given H from the prior predictive (eqs. 2-5).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    users, items : array_like, shape (E,), int
        The edges of H (validated by `check_edges`).
    n_users, n_items, K : int >= 1
        I, J and the number of factors.
    hyper : RGHyper, default RGHyper()
        Hyperparameters (validated by `check_hyper`).

    Returns
    -------
    params : dict of str to jax.Array, float
        ``tau_u``, ``tau_v``, ``tau_bv`` (), ``u`` (I, K), ``v`` (J, K), ``b_item`` (J,), ``b_user``
        (I,) (zeros when clamped; ``tau_bu`` () otherwise).
    g : jax.Array, shape (E,), float
        0/1, the like/dislike outcome of each edge of H.

    Raises
    ------
    ValueError
        Bad sizes, edges or hyperparameters (before any computation).

    Source: ``003_203f63200c0d7157.txt`` eqs. (2)-(5) (prior predictive of `model`).
    """
    check_hyper(hyper)
    users, items = check_edges(users, items, n_users, n_items, K)
    return _simulate(key, jnp.asarray(users), jnp.asarray(items), jnp.asarray(float(hyper.alpha)),
                     jnp.asarray(float(hyper.beta)), int(n_users), int(n_items), int(K), bool(hyper.clamp_user_bias))


@functools.partial(jax.jit, static_argnums=(5, 6, 7, 8))
def _simulate(key, users, items, alpha, beta, n_users, n_items, K, clamp):
    """`simulate` after validation, compiled once per (sizes, clamp); alpha and beta are traced."""
    hyper = RGHyper(alpha, beta, 1.0, clamp)
    tr = numpyro.handlers.trace(numpyro.handlers.seed(model, key)).get_trace(
        users, items, None, n_users, n_items, K, hyper)
    names = ["tau_u", "tau_v", "tau_bv", "u", "v", "b_item"] + ([] if hyper.clamp_user_bias else ["tau_bu", "b_user"])
    params = {k: tr[k]["value"] for k in names}
    if hyper.clamp_user_bias:
        params["b_user"] = jnp.zeros(n_users, dtype=params["u"].dtype)
    return params, tr["g"]["value"].astype(params["u"].dtype)
