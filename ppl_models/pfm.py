r"""Poisson factorization machines (NPFM, PPFM) as NumPyro programs.

Source: ``004_90693a0965f06816.txt`` ch. 5: eq. 5.6 (NPFM likelihood), sec. 5.3.1 (priors),
sec. 5.3.2 (truncation r_k ~ Gamma(gamma_0 / K, 1/c), hyperpriors on gamma_0 and c), eq. 5.20
(PPFM). The thesis writes Gamma(shape, scale) with scale 1/rate; here every Gamma is
shape/rate. The hyperparameters a_i .. f_i and g_k, h_k are shared by all features i and
factors k (the thesis initialises them all to 1, sec. 5.4.6); the latent shapes and rates
alpha_i, beta_i, zeta_i are per feature and delta_k per factor, as printed.

    alpha0 ~ Ga(a_0, b_0),  beta0 ~ Ga(c_0, d_0),  w0 ~ Ga(alpha0, beta0)
    alpha_i ~ Ga(a, b),     beta_i ~ Ga(c, d),     w_i ~ Ga(alpha_i, beta_i)        i = 1..D
    zeta_i ~ Ga(e, f),      delta_k ~ Ga(g, h),    v_ik ~ Ga(zeta_i, delta_k)       k = 1..K
    NPFM only: gamma0 ~ Ga(e_0, f_0), c ~ Ga(g_0, h_0), r_k ~ Ga(gamma0 / K, c)    (truncated gamma process)
    y_n ~ Poisson(w0 + sum_i x_ni w_i + sum_k r_k sum_{i<j} x_ni x_nj v_ik v_jk)  (5.6; PPFM: r_k = 1, 5.20)

Latent counts. The chapter's z_n (z1_n ~ Pois(w0), z2_ni ~ Pois(x_ni w_i),
z3_nijk ~ Pois(x_ni x_nj r_k v_ik v_jk)) are marginalised: by Poisson superposition the sum of
independent Poissons is Poisson with the summed rate, so y_n = z1_n + sum z2 + sum z3 ~
Poisson(total rate) exactly and NUTS sees only continuous latents. The pairwise term uses
sum_{i<j} x_i x_j v_i v_j = sum_i x_i v_i (sum_{j<i} x_j v_j) (no cancellation).

Design. The program takes the training rows as COO nonzeros of X (rows, cols, values), like
`ppl_models.fm`; `cells_design` builds the rows of a user-item matrix (all cells, ids one-hot,
optional side features; the layout of `custom_inference.pfm.PFMData.from_matrix`).

Sites: ``alpha0, beta0, w0`` (); ``alpha, beta, w, zeta`` (D,); ``delta`` (K,); ``V`` (D, K);
NPFM also ``gamma0, c`` () and ``r`` (K,); ``y`` (N,).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import scipy.sparse as sp

__all__ = ["PFMHyper", "PFMSizes", "model", "cells_design", "rates", "simulate", "VARIANTS"]

VARIANTS = ("npfm", "ppfm")


class PFMHyper(NamedTuple):
    """Hyperparameters (thesis names, sec. 5.3.1-5.3.2; all Gamma shape/rate).

    Defaults 1: the thesis initialises "all the hyperprior parameters" to 1 (sec. 5.4.6).

    Parameters
    ----------
    a_0, b_0 : float > 0, default 1.0
        Shape and rate of alpha0 (the shape of w0).
    c_0, d_0 : float > 0, default 1.0
        Shape and rate of beta0 (the rate of w0).
    a, b : float > 0, default 1.0
        Shape and rate of alpha_i (the shape of w_i).
    c, d : float > 0, default 1.0
        Shape and rate of beta_i (the rate of w_i).
    e, f : float > 0, default 1.0
        Shape and rate of zeta_i (the shape of v_ik).
    g, h : float > 0, default 1.0
        Shape and rate of delta_k (the rate of v_ik).
    e_0, f_0 : float > 0, default 1.0
        Shape and rate of gamma0 (the gamma-process mass; NPFM).
    g_0, h_0 : float > 0, default 1.0
        Shape and rate of c (the gamma-process rate; NPFM).

    Raises
    ------
    None of its own (a NamedTuple; `simulate` checks the values are finite and > 0).

    Source: ``004_90693a0965f06816.txt`` sec. 5.3.1-5.3.2 (the priors), sec. 5.4.6 (the defaults).
    """

    a_0: float = 1.0
    """Shape of alpha0 (shape of w0)."""
    b_0: float = 1.0
    """Rate of alpha0."""
    c_0: float = 1.0
    """Shape of beta0 (rate of w0)."""
    d_0: float = 1.0
    """Rate of beta0."""
    a: float = 1.0
    """Shape of alpha_i (shape of w_i)."""
    b: float = 1.0
    """Rate of alpha_i."""
    c: float = 1.0
    """Shape of beta_i (rate of w_i)."""
    d: float = 1.0
    """Rate of beta_i."""
    e: float = 1.0
    """Shape of zeta_i (shape of v_ik)."""
    f: float = 1.0
    """Rate of zeta_i."""
    g: float = 1.0
    """Shape of delta_k (rate of v_ik)."""
    h: float = 1.0
    """Rate of delta_k."""
    e_0: float = 1.0
    """Shape of gamma0 (gamma-process mass; NPFM)."""
    f_0: float = 1.0
    """Rate of gamma0."""
    g_0: float = 1.0
    """Shape of c (gamma-process rate; NPFM)."""
    h_0: float = 1.0
    """Rate of c."""


class PFMSizes(NamedTuple):
    """Sizes for `simulate`: an I x J user-item count matrix with one-hot ids (D = I + J).

    Parameters
    ----------
    n_users : int >= 1
        I, the number of users.
    n_items : int >= 1
        J, the number of items.
    K : int >= 1
        Number of factors (the truncation level for NPFM).
    variant : {"npfm", "ppfm"}, default "npfm"
        Which model.

    Raises
    ------
    None of its own (a NamedTuple; `simulate` checks the values).

    Source: project addition.
    """

    n_users: int
    n_items: int
    K: int
    variant: str = "npfm"


def _check_hyper(hyper):
    if not isinstance(hyper, PFMHyper):
        raise ValueError(f"hyper: expected PFMHyper, got {type(hyper).__name__}")
    for name, v in hyper._asdict().items():
        if not (np.isfinite(float(v)) and float(v) > 0):
            raise ValueError(f"hyper.{name} must be finite and > 0, got {v}")


def rates(params, rows, cols, values, n_rows: int, variant: str = "npfm"):
    """Poisson rates of eq. 5.6 (NPFM) / 5.20 (PPFM) from COO nonzeros of X. Pure jnp.

    Parameters
    ----------
    params : mapping
        ``w0`` (), ``w`` (D,), ``V`` (D, K) and, for NPFM, ``r`` (K,); float jax arrays.
    rows, cols : jax.Array, shape (M,), int
        Instance and feature index of each nonzero of X, sorted by row.
    values : jax.Array, shape (M,), float
        x_ni >= 0 at each nonzero.
    n_rows : int
        N, the number of instances (static).
    variant : str, default "npfm"
        "npfm" or "ppfm" (anything else is treated as "ppfm": r_k = 1).

    Returns
    -------
    jax.Array, shape (N,), float
        The Poisson rate of each instance, in the parameters' dtype.

    Raises
    ------
    KeyError
        NPFM ``params`` without ``r`` (or any without ``w0``, ``w``, ``V``); no index checks.

    Source: ``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20.
    """
    w0, w, V = params["w0"], params["w"], params["V"]
    r = params["r"] if variant == "npfm" else jnp.ones(V.shape[-1], V.dtype)
    values = jnp.asarray(values, dtype=jnp.result_type(w))
    lin = jax.ops.segment_sum(values * w[cols], rows, num_segments=n_rows)
    u = values[:, None] * V[cols]  # (M, K)
    # sum_{i<j} u_i u_j = sum_i u_i * (sum of u over earlier entries of the same row)
    cum = jnp.cumsum(u, axis=0)
    start = (cum - u)[jnp.searchsorted(rows, rows, side="left")]
    before = cum - u - start
    pair = jax.ops.segment_sum(u * before, rows, num_segments=n_rows)
    return w0 + lin + pair @ r


def model(rows, cols, values, n_rows: int, n_features: int, K: int, hyper: PFMHyper = PFMHyper(), y=None, *,
          variant: str = "npfm", likelihood: bool = True):
    """NumPyro program of NPFM / PPFM (module docstring).

    Parameters
    ----------
    rows, cols : jax.Array, shape (M,), int
        Nonzeros of X (instance n, feature i), rows sorted ascending.
    values : jax.Array, shape (M,), float
        x_ni >= 0 at each nonzero.
    n_rows : int
        N, the number of training rows.
    n_features : int
        D.
    K : int >= 1
        Number of factors (the truncation level for NPFM).
    hyper : PFMHyper, default PFMHyper()
        Hyperparameters.
    y : jax.Array, shape (N,), int or float, optional
        Observed counts; None draws them (prior predictive).
    variant : {"npfm", "ppfm"}, default "npfm"
        Which model.
    likelihood : bool, default True
        False drops the y site (the prior alone, used by the validation's augmented-likelihood checks).

    Returns
    -------
    None
        A NumPyro program: sites ``alpha0, beta0, w0`` (); ``alpha, beta, w, zeta`` (D,); ``delta``
        (K,); ``V`` (D, K); NPFM also ``gamma0, c`` () and ``r`` (K,); ``y`` (N,); float.

    Raises
    ------
    ValueError
        For an unknown ``variant``.

    Source: ``004_90693a0965f06816.txt`` eq. 5.6, sec. 5.3.1-5.3.2 (NPFM), eq. 5.20 (PPFM); Gammas
    as shape/rate.
    """
    h = hyper
    alpha0 = numpyro.sample("alpha0", dist.Gamma(h.a_0, h.b_0))
    beta0 = numpyro.sample("beta0", dist.Gamma(h.c_0, h.d_0))
    w0 = numpyro.sample("w0", dist.Gamma(alpha0, beta0))
    with numpyro.plate("features", n_features, dim=-1):
        alpha = numpyro.sample("alpha", dist.Gamma(h.a, h.b))
        beta = numpyro.sample("beta", dist.Gamma(h.c, h.d))
        w = numpyro.sample("w", dist.Gamma(alpha, beta))
        zeta = numpyro.sample("zeta", dist.Gamma(h.e, h.f))
    with numpyro.plate("factors", K, dim=-1):
        delta = numpyro.sample("delta", dist.Gamma(h.g, h.h))
    with numpyro.plate("features_v", n_features, dim=-2), numpyro.plate("factors_v", K, dim=-1):
        V = numpyro.sample("V", dist.Gamma(zeta[:, None], delta[None, :]))
    params = {"w0": w0, "w": w, "V": V}
    if variant == "npfm":
        gamma0 = numpyro.sample("gamma0", dist.Gamma(h.e_0, h.f_0))
        c = numpyro.sample("c", dist.Gamma(h.g_0, h.h_0))
        with numpyro.plate("factors_r", K, dim=-1):
            params["r"] = numpyro.sample("r", dist.Gamma(gamma0 / K, c))
    elif variant != "ppfm":
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    if likelihood:
        lam = rates(params, rows, cols, values, n_rows, variant)
        with numpyro.plate("rows", n_rows, dim=-1):
            numpyro.sample("y", dist.Poisson(lam), obs=y)


def cells_design(n_users: int, n_items: int, *, user_features=None, item_features=None, exclude=None):
    """COO design of the training cells of an I x J user-item matrix (small problems only).

    Rows are all cells (u, j) in row-major order minus ``exclude``; features: user id one-hot, item id
    one-hot, then the user side features and the item side features, the layout of
    `custom_inference.pfm.PFMData.from_matrix`.

    Parameters
    ----------
    n_users, n_items : int >= 1
        I and J.
    user_features : array_like or scipy.sparse matrix, shape (I, D_u), float >= 0, optional
        User side features (None: none).
    item_features : array_like or scipy.sparse matrix, shape (J, D_v), float >= 0, optional
        Item side features (None: none).
    exclude : tuple of two array_like, shape (E,), int, optional
        (users, items) of cells left out (e.g. held out).

    Returns
    -------
    rows, cols : numpy.ndarray, shape (M,), int32
        Row (cell) and feature index of each nonzero, sorted by row then column.
    values : numpy.ndarray, shape (M,), float64
        The feature values.
    n_rows : int
        N, the number of cells kept.
    n_features : int
        D = I + J + D_u + D_v.
    cell_users, cell_items : numpy.ndarray, shape (N,), int
        The user and item of each row.

    Raises
    ------
    ValueError
        On sizes < 1 or negative feature values.

    Source: project addition (the design of ``004_90693a0965f06816.txt`` ch. 2, eq. 2.17 / fig. 2.1,
    for a user-item matrix).
    """
    if int(n_users) < 1 or int(n_items) < 1:
        raise ValueError(f"n_users and n_items must be >= 1, got {n_users}, {n_items}")
    I, J = int(n_users), int(n_items)
    Uf = sp.csr_matrix(user_features if user_features is not None else (I, 0), dtype=np.float64)
    Vf = sp.csr_matrix(item_features if item_features is not None else (J, 0), dtype=np.float64)
    for name, M in (("user_features", Uf), ("item_features", Vf)):
        if M.nnz and np.any(M.data < 0):
            raise ValueError(f"{name}: feature values must be >= 0")
    Du, Dv = Uf.shape[1], Vf.shape[1]
    cu, cj = np.indices((I, J)).reshape(2, -1)
    if exclude is not None:
        ex = set(zip(np.asarray(exclude[0]).tolist(), np.asarray(exclude[1]).tolist()))
        keep = np.array([(a, b) not in ex for a, b in zip(cu, cj)], dtype=bool)
        cu, cj = cu[keep], cj[keep]
    N = cu.size
    Xu = sp.hstack([sp.identity(I, format="csr"), sp.csr_matrix((I, J)), Uf, sp.csr_matrix((I, Dv))]).tocsr()
    Xi = sp.hstack([sp.csr_matrix((J, I)), sp.identity(J, format="csr"), sp.csr_matrix((J, Du)), Vf]).tocsr()
    X = (Xu[cu] + Xi[cj]).tocoo()
    order = np.lexsort((X.col, X.row))
    return (X.row[order].astype(np.int32), X.col[order].astype(np.int32), X.data[order].astype(np.float64), int(N),
            int(I + J + Du + Dv), cu, cj)


def simulate(key, sizes: PFMSizes, hyper: PFMHyper = PFMHyper()):
    """Draw parameters and an I x J count matrix from the prior predictive (all cells are rows, ids only).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    sizes : PFMSizes
        n_users, n_items, K >= 1 and the variant.
    hyper : PFMHyper, default PFMHyper()
        Hyperparameters (finite and > 0).

    Returns
    -------
    truth : dict of str to numpy.ndarray, float
        The latent sites of `model` (float64 under x64).
    y : numpy.ndarray, shape (I, J), float64
        Counts.

    Raises
    ------
    ValueError
        For K < 1 or not an integer, n_users or n_items < 1, an unknown variant, or a ``hyper`` that is
        not a PFMHyper or has a value that is not finite and > 0.

    Source: ``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20 (prior predictive of `model`).
    """
    _check_hyper(hyper)
    I, J, K, variant = int(sizes.n_users), int(sizes.n_items), int(sizes.K), sizes.variant
    if K < 1 or K != sizes.K:
        raise ValueError(f"K must be an integer >= 1, got {sizes.K!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    rows, cols, values, N, D, cu, cj = cells_design(I, J)
    trace = numpyro.handlers.trace(numpyro.handlers.seed(model, key)).get_trace(
        jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values), N, D, K, hyper, None, variant=variant)
    truth = {n: np.asarray(s["value"]) for n, s in trace.items() if s["type"] == "sample" and n != "y"}
    y = np.zeros((I, J))
    y[cu, cj] = np.asarray(trace["y"]["value"])
    return truth, y
