"""Factorization machine (FM) with Gaussian likelihood as NumPyro programs.

Source: ``004_90693a0965f06816.txt`` eq. 2.17 / 4.1 (model equation), eqs. 2.22-2.30
(MCMC-FM priors, Freudenthaler et al. 2011) and eqs. 4.2-4.4 (VBFM priors).

    y_n ~ N(w0 + sum_l x_nl w_l + sum_{l<m} x_nl x_nm v_l . v_m, 1 / alpha)     (2.17, 2.22, 4.1)

The pairwise term is computed with the O(D K) identity (eq. 4.22)

    sum_{l<m} x_nl x_nm v_l . v_m = 1/2 sum_k [(sum_l x_nl v_lk)^2 - sum_l x_nl^2 v_lk^2]

over the nonzeros of X, given as COO arrays (``rows``, ``cols``, ``values``); X is never
dense. Features carry a group id ``group[l]`` (users, items, genres, ...; the ``c_l`` of
eqs. 4.3-4.4).

Two prior variants, chosen by the type of ``hyper``:

`FMHierHyper` (MCMC-FM, eqs. 2.23-2.30, grouped as in Freudenthaler et al. 2011 / libFM):

    alpha            ~ Gamma(alpha_0, beta_0)                          (2.26, shape/rate)
    w0               ~ N(mu_0, 1 / sigma_0)                            (2.23)
    sigma_w[g]       ~ Gamma(alpha_0p, beta_0p)                        (2.28)
    mu_w[g]          ~ N(mu_0, 1 / (nu_0 sigma_w[g]))                  (2.27)
    w_l              ~ N(mu_w[c_l], 1 / sigma_w[c_l])                  (2.24)
    sigma_v[g, k]    ~ Gamma(alpha_0p, beta_0p)                        (2.30)
    mu_v[g, k]       ~ N(mu_0, 1 / (nu_0 sigma_v[g, k]))               (2.29)
    v_lk             ~ N(mu_v[c_l, k], 1 / sigma_v[c_l, k])            (2.25)

The thesis prints the hyperparameters with a feature index (mu_i, sigma_i, mu_ik, sigma_ik);
MCMC-FM as published (and libFM, myFM) shares one (mean, precision) pair per feature group
(and per factor k), which is what makes the hyperpriors learnable; we follow the
published sampler. Precisions, never variances, are the second Normal parameter.

`FMFlatHyper` (VBFM, eqs. 4.1-4.4): no hyperpriors; alpha, sigma_0, sigma_w[g] and
sigma_v[g, k] are fixed parameters (chapter 4 estimates them as point values, "VBFM does
not incorporate hyperpriors over the model hyperparameters", and places no prior on
alpha):

    w0   ~ N(0, 1 / sigma_0)                                           (4.2)
    w_l  ~ N(0, 1 / sigma_w[c_l])                                      (4.3)
    v_lk ~ N(0, 1 / sigma_v[c_l, k])                                   (4.4)
    y_n  ~ N(yhat_n, 1 / alpha)                                        (4.1)

Sites: ``w0`` (), ``w`` (D,), ``V`` (D, K), ``y`` (N,); hierarchical variant also ``alpha``
(), ``mu_w`` (G,), ``sigma_w`` (G,), ``mu_v`` (G, K), ``sigma_v`` (G, K).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["FMHierHyper", "FMFlatHyper", "model", "model_hier", "model_flat", "predict_mean", "simulate",
           "n_groups_of"]


class FMHierHyper(NamedTuple):
    """Hyperprior parameters of MCMC-FM (eqs. 2.23-2.30), thesis names.

    Defaults follow libFM / myFM (alpha_0 = beta_0 = 1, alpha_0' = beta_0' = 1, mu_0 = 0,
    nu_0 = 1) with a unit prior precision sigma_0 on the global bias w0.

    Parameters
    ----------
    mu_0 : float, default 0.0
        Prior mean of w0 and of every group mean mu_w, mu_v (2.23, 2.27, 2.29).
    sigma_0 : float > 0, default 1.0
        Prior precision of w0 (2.23).
    nu_0 : float > 0, default 1.0
        Prior precision scale of the group means (2.27, 2.29).
    alpha_0p : float > 0, default 1.0
        Shape alpha_0' of the group precisions (2.28, 2.30).
    beta_0p : float > 0, default 1.0
        Rate beta_0' of the group precisions (2.28, 2.30).
    alpha_0 : float > 0, default 1.0
        Shape of the noise precision alpha (2.26).
    beta_0 : float > 0, default 1.0
        Rate of the noise precision alpha (2.26).

    Raises
    ------
    None of its own (a NamedTuple; the values are not checked).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.23-2.30; defaults: project addition (libFM / myFM).
    """

    mu_0: float = 0.0
    """Prior mean of w0 and of every group mean mu_w, mu_v (2.23, 2.27, 2.29)."""
    sigma_0: float = 1.0
    """Prior precision of w0 (2.23)."""
    nu_0: float = 1.0
    """Prior precision scale of the group means (2.27, 2.29)."""
    alpha_0p: float = 1.0
    """Shape alpha_0' of the group precisions (2.28, 2.30)."""
    beta_0p: float = 1.0
    """Rate beta_0' of the group precisions (2.28, 2.30)."""
    alpha_0: float = 1.0
    """Shape of the noise precision alpha (2.26)."""
    beta_0: float = 1.0
    """Rate of the noise precision alpha (2.26)."""


class FMFlatHyper(NamedTuple):
    """Fixed parameters of the VBFM prior (eqs. 4.1-4.4); all are precisions.

    Parameters
    ----------
    alpha : float > 0, default 1.0
        Noise precision of y (a parameter, no prior, as in ch. 4), eq. 4.1.
    sigma_0 : float > 0, default 1.0
        Prior precision of the global bias w0, eq. 4.2.
    sigma_w : float or array_like, shape (G,), float, default 1.0
        Prior precision of the linear weights of each feature group, eq. 4.3.
    sigma_v : float or array_like, shape (G,) or (G, K), float, default 1.0
        Prior precision of the factor entries of each feature group (and factor k), eq. 4.4.

    Raises
    ------
    None of its own (a NamedTuple; shapes are broadcast, and fail, inside `model_flat`).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.1-4.4.
    """

    alpha: float = 1.0
    sigma_0: float = 1.0
    sigma_w: object = 1.0
    sigma_v: object = 1.0


def n_groups_of(group) -> int:
    """G = max(group) + 1 for a concrete int array ``group``.

    Parameters
    ----------
    group : array_like, shape (D,), int
        Group id c_l of each feature (concrete, not traced).

    Returns
    -------
    int
        G, a Python int (0 for an empty ``group``).

    Raises
    ------
    None of its own: a traced ``group`` makes JAX raise TracerArrayConversionError (a TypeError; pass
    ``n_groups`` to the programs then).

    Source: project addition.
    """
    g = np.asarray(group)
    return int(g.max()) + 1 if g.size else 0


def _flat_precisions(hyper: FMFlatHyper, G: int, K: int):
    sw = jnp.broadcast_to(jnp.asarray(hyper.sigma_w, dtype=float), (G,))
    sv = jnp.asarray(hyper.sigma_v, dtype=float)
    if sv.ndim == 1:
        sv = sv[:, None]
    sv = jnp.broadcast_to(sv, (G, K))
    return sw, sv


def predict_mean(params, rows, cols, values, n_rows: int):
    """FM mean yhat_n (eq. 2.17) over COO nonzeros, in O(nnz K) via eq. 4.22.

    Pure jnp: jit- and vmap-able (vmap over stacked draws).

    Parameters
    ----------
    params : mapping
        ``w0`` (), ``w`` (D,) and ``V`` (D, K), float jax arrays.
    rows, cols : jax.Array, shape (M,), int
        Instance and feature index of each nonzero of X.
    values : jax.Array, shape (M,), float
        x_nl at each nonzero.
    n_rows : int
        N, the number of instances (static).

    Returns
    -------
    jax.Array, shape (N,), float
        yhat_n, in the dtype of ``w``.

    Raises
    ------
    KeyError
        ``params`` without ``w0``, ``w`` or ``V`` (no index checks).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17, computed as eq. 4.22.
    """
    w0, w, V = params["w0"], params["w"], params["V"]
    values = jnp.asarray(values, dtype=jnp.result_type(w))
    lin = jax.ops.segment_sum(values * w[cols], rows, num_segments=n_rows)
    xv = values[:, None] * V[cols]
    q = jax.ops.segment_sum(xv, rows, num_segments=n_rows)
    s2 = jax.ops.segment_sum(xv * xv, rows, num_segments=n_rows)
    return w0 + lin + 0.5 * jnp.sum(q * q - s2, axis=-1)


def model_hier(rows, cols, values, n_rows: int, n_features: int, group, K: int,
               hyper: FMHierHyper = FMHierHyper(), y=None, *, n_groups: int | None = None):
    """MCMC-FM generative program (eqs. 2.22-2.30, grouped hyperparameters; module docstring).

    Parameters
    ----------
    rows, cols : jax.Array, shape (M,), int
        Nonzeros of X (instance n, feature l).
    values : jax.Array, shape (M,), float
        x_nl at each nonzero.
    n_rows, n_features : int
        N and D.
    group : array_like, shape (D,), int
        Group c_l of each feature, ids 0..G-1.
    K : int >= 1
        Number of factors.
    hyper : FMHierHyper, default FMHierHyper()
        Hyperprior parameters.
    y : jax.Array, shape (N,), float, optional
        Observed responses; None draws them (prior predictive).
    n_groups : int, optional
        G; must be given when ``group`` is traced (default ``n_groups_of(group)``).

    Returns
    -------
    None
        A NumPyro program: sites ``alpha`` (), ``w0`` (), ``mu_w``, ``sigma_w`` (G,), ``w`` (D,),
        ``mu_v``, ``sigma_v`` (G, K), ``V`` (D, K), ``y`` (N,); float.

    Raises
    ------
    None of its own (no checks; `simulate` validates its inputs); a traced ``group`` without
    ``n_groups`` makes JAX raise TracerArrayConversionError (a TypeError).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.17, 2.22-2.30 (grouped as in Freudenthaler et al.
    2011).
    """
    G = n_groups if n_groups is not None else n_groups_of(group)
    group = jnp.asarray(group)
    alpha = numpyro.sample("alpha", dist.Gamma(hyper.alpha_0, hyper.beta_0))             # 2.26
    w0 = numpyro.sample("w0", dist.Normal(hyper.mu_0, 1.0 / jnp.sqrt(hyper.sigma_0)))    # 2.23
    with numpyro.plate("groups_w", G):
        sigma_w = numpyro.sample("sigma_w", dist.Gamma(hyper.alpha_0p, hyper.beta_0p))   # 2.28
        mu_w = numpyro.sample("mu_w", dist.Normal(hyper.mu_0, 1.0 / jnp.sqrt(hyper.nu_0 * sigma_w)))  # 2.27
    with numpyro.plate("features_w", n_features):
        w = numpyro.sample("w", dist.Normal(mu_w[group], 1.0 / jnp.sqrt(sigma_w[group])))  # 2.24
    with numpyro.plate("groups_v", G, dim=-2), numpyro.plate("factors_g", K, dim=-1):
        sigma_v = numpyro.sample("sigma_v", dist.Gamma(hyper.alpha_0p, hyper.beta_0p))   # 2.30
        mu_v = numpyro.sample("mu_v", dist.Normal(hyper.mu_0, 1.0 / jnp.sqrt(hyper.nu_0 * sigma_v)))  # 2.29
    with numpyro.plate("features_v", n_features, dim=-2), numpyro.plate("factors", K, dim=-1):
        V = numpyro.sample("V", dist.Normal(mu_v[group], 1.0 / jnp.sqrt(sigma_v[group])))  # 2.25
    mean = predict_mean({"w0": w0, "w": w, "V": V}, rows, cols, values, n_rows)          # 2.17
    with numpyro.plate("instances", n_rows):
        numpyro.sample("y", dist.Normal(mean, 1.0 / jnp.sqrt(alpha)), obs=y)             # 2.22


def model_flat(rows, cols, values, n_rows: int, n_features: int, group, K: int,
               hyper: FMFlatHyper = FMFlatHyper(), y=None, *, n_groups: int | None = None):
    """VBFM generative program (eqs. 4.1-4.4; fixed precisions, module docstring).

    Parameters
    ----------
    rows, cols : jax.Array, shape (M,), int
        Nonzeros of X (instance n, feature l).
    values : jax.Array, shape (M,), float
        x_nl at each nonzero.
    n_rows, n_features : int
        N and D.
    group : array_like, shape (D,), int
        Group c_l of each feature, ids 0..G-1.
    K : int >= 1
        Number of factors.
    hyper : FMFlatHyper, default FMFlatHyper()
        The fixed precisions.
    y : jax.Array, shape (N,), float, optional
        Observed responses; None draws them (prior predictive).
    n_groups : int, optional
        G; must be given when ``group`` is traced (default ``n_groups_of(group)``).

    Returns
    -------
    None
        A NumPyro program: sites ``w0`` (), ``w`` (D,), ``V`` (D, K), ``y`` (N,), float.

    Raises
    ------
    None of its own; ``hyper.sigma_w`` / ``sigma_v`` that do not broadcast to (G,) / (G, K) make JAX
    raise ValueError; a traced ``group`` without ``n_groups`` raises TracerArrayConversionError (a
    TypeError).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.1-4.4.
    """
    G = n_groups if n_groups is not None else n_groups_of(group)
    group = jnp.asarray(group)
    sw, sv = _flat_precisions(hyper, G, K)
    w0 = numpyro.sample("w0", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.sigma_0)))           # 4.2
    with numpyro.plate("features_w", n_features):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0 / jnp.sqrt(sw[group])))              # 4.3
    with numpyro.plate("features_v", n_features, dim=-2), numpyro.plate("factors", K, dim=-1):
        V = numpyro.sample("V", dist.Normal(0.0, 1.0 / jnp.sqrt(sv[group])))              # 4.4
    mean = predict_mean({"w0": w0, "w": w, "V": V}, rows, cols, values, n_rows)
    with numpyro.plate("instances", n_rows):
        numpyro.sample("y", dist.Normal(mean, 1.0 / jnp.sqrt(hyper.alpha)), obs=y)       # 4.1


def _check(rows, cols, values, n_rows, n_features, group, K):
    rows_np, cols_np, values_np = np.asarray(rows), np.asarray(cols), np.asarray(values)
    if not (rows_np.shape == cols_np.shape == values_np.shape) or rows_np.ndim != 1:
        raise ValueError(f"rows/cols/values: expected equal 1-D shapes, got {rows_np.shape}, "
                         f"{cols_np.shape}, {values_np.shape}")
    if rows_np.size and (rows_np.min() < 0 or rows_np.max() >= n_rows):
        raise ValueError(f"rows: indices must be in 0..{n_rows - 1}")
    if cols_np.size and (cols_np.min() < 0 or cols_np.max() >= n_features):
        raise ValueError(f"cols: indices must be in 0..{n_features - 1}")
    if not np.all(np.isfinite(values_np)):
        raise ValueError("values: contains NaN or infinite values")
    if np.asarray(group).shape != (n_features,):
        raise ValueError(f"group: expected shape ({n_features},), got {np.asarray(group).shape}")
    if int(K) != K or K < 1:
        raise ValueError(f"K: must be a positive integer, got {K!r}")


def model(rows, cols, values, n_rows: int, n_features: int, group, K: int, hyper, y=None,
          *, n_groups: int | None = None):
    """FM program; dispatches on the type of ``hyper``.

    Parameters
    ----------
    rows, cols : jax.Array, shape (M,), int
        Nonzeros of X (instance n, feature l).
    values : jax.Array, shape (M,), float
        x_nl at each nonzero.
    n_rows, n_features : int
        N and D.
    group : array_like, shape (D,), int
        Group c_l of each feature, ids 0..G-1.
    K : int >= 1
        Number of factors.
    hyper : FMHierHyper or FMFlatHyper
        `FMHierHyper` -> `model_hier` (MCMC-FM); `FMFlatHyper` -> `model_flat` (VBFM).
    y : jax.Array, shape (N,), float, optional
        Observed responses; None draws them (prior predictive).
    n_groups : int, optional
        G; must be given when ``group`` is traced.

    Returns
    -------
    None
        A NumPyro program (the sites of `model_hier` or `model_flat`).

    Raises
    ------
    ValueError
        If ``hyper`` is neither type.

    Source: ``004_90693a0965f06816.txt`` eqs. 2.17, 2.22-2.30 (`model_hier`) and 4.1-4.4
    (`model_flat`).
    """
    if isinstance(hyper, FMHierHyper):
        return model_hier(rows, cols, values, n_rows, n_features, group, K, hyper, y, n_groups=n_groups)
    if isinstance(hyper, FMFlatHyper):
        return model_flat(rows, cols, values, n_rows, n_features, group, K, hyper, y, n_groups=n_groups)
    raise ValueError(f"hyper: expected FMHierHyper or FMFlatHyper, got {type(hyper).__name__}")


def simulate(key, rows, cols, values, n_rows: int, group, K: int, hyper):
    """Draw parameters and responses from the FM prior predictive for a given design.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    rows, cols : array_like, shape (M,), int
        Nonzeros of X (instance n, feature l).
    values : array_like, shape (M,), float
        x_nl at each nonzero (finite).
    n_rows : int
        N.
    group : array_like, shape (D,), int
        Group c_l of each feature.
    K : int >= 1
        Number of factors.
    hyper : FMHierHyper or FMFlatHyper
        Chooses the program (see `model`).

    Returns
    -------
    truth : dict of str to jax.Array, float
        Every latent site of the chosen program.
    y : jax.Array, shape (N,), float
        The drawn responses.

    Raises
    ------
    ValueError
        Malformed indices (out of range), unequal or non-1-D shapes, non-finite values, a ``group`` that is
        not 1-D, K not a positive integer, or a ``hyper`` of neither type.

    Source: ``004_90693a0965f06816.txt`` eqs. 2.17, 2.22-2.30 / 4.1-4.4 (prior predictive of
    `model`).
    """
    if not isinstance(hyper, (FMHierHyper, FMFlatHyper)):
        raise ValueError(f"hyper: expected FMHierHyper or FMFlatHyper, got {type(hyper).__name__}")
    group = np.asarray(group)
    D = group.shape[0]
    _check(rows, cols, values, n_rows, D, group, K)
    return _simulate_jit(key, jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values), jnp.asarray(group), hyper,
                         n_rows=int(n_rows), n_features=D, n_groups=n_groups_of(group), K=int(K))


@functools.partial(jax.jit, static_argnames=("n_rows", "n_features", "n_groups", "K"))
def _simulate_jit(key, rows, cols, values, group, hyper, *, n_rows, n_features, n_groups, K):
    # one compiled program (op-by-op tracing of the program compiles every primitive separately)
    trace = numpyro.handlers.trace(numpyro.handlers.seed(model, key)).get_trace(
        rows, cols, values, n_rows, n_features, group, K, hyper, None, n_groups=n_groups)
    truth = {name: site["value"] for name, site in trace.items()
             if site["type"] == "sample" and name != "y"}
    return truth, trace["y"]["value"]
