"""SIBM shared pieces: binary data, hyperparameters, the state of q, its moments, row chunks and the
bounded ELBO (7) (seed 002_5408d341cb9fc544.txt; the derivations are in the package docstring,
`custom_inference.sibm`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from .. import base, vi_driver
from ..data import Observations
from ..logistic import jj_expected_log_bound, optimal_xi

__all__ = ["SIBMState", "SIBMInfo", "DEFAULT_CHUNK_CELLS", "as_binary", "prior_arrays", "init", "moments",
           "cell_moments", "elbo", "draws_from_q", "fit_output", "q_posterior", "STATE_DIMS"]

DEFAULT_CHUNK_CELLS = 1 << 18  # cells per row chunk in batch sweeps and the ELBO


# ---------------------------------------------------------------------------------------------
# data and hyperparameters


def as_binary(X, *, dtype=np.float64) -> Observations:
    """Validate a fully observed binary matrix and keep its ones (`Observations`, values 1).

    Parameters
    ----------
    X : Observations, scipy.sparse matrix or array_like, shape (I, J)
        An `Observations` (its entries must be 0/1; zeros are dropped), a scipy.sparse matrix, or a
        dense 2-D array of 0/1 (bool, int or float).
    dtype : numpy.float32 or numpy.float64, default numpy.float64
        Storage dtype of the values.

    Returns
    -------
    Observations
        The ones: rows, cols int32 (N,), values (N,) all 1, shape (I, J).

    Raises
    ------
    ValueError
        Naming the field: ``X`` not 2-D, non-numeric, ``values`` outside {0, 1} or NaN/inf, an index
        out of range, duplicates, an all-zero matrix (no ones: nothing to learn from).
    TypeError
        As `Observations.from_coo` (e.g. a ``dtype`` other than float32 / float64).

    Source: project addition (the data of ``002_5408d341cb9fc544.txt``: a fully observed binary
    matrix X, eqs. (1)-(2)).
    """
    if isinstance(X, Observations):
        return Observations.from_coo(np.asarray(X.rows), np.asarray(X.cols), np.asarray(X.values), X.shape,
                                     kind="binary", dtype=dtype)
    if sp.issparse(X):
        return Observations.from_scipy(X, kind="binary", dtype=dtype)
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise ValueError(f"X must be a 2-D (I, J) binary matrix, got shape {arr.shape}")
    if arr.dtype == bool:
        arr = arr.astype(np.int8)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"X: values must be numeric 0/1, got dtype {arr.dtype}")
    if np.any(~np.isfinite(arr)):
        raise ValueError("X: values contain NaN or infinite entries")
    if np.any((arr != 0) & (arr != 1)):
        raise ValueError("X: values must be 0 or 1 (binary matrix)")
    return Observations.from_dense(arr, kind="binary", dtype=dtype)


class _Prior(NamedTuple):
    u_bar0: jax.Array
    u_tilde0: jax.Array
    v_bar0: jax.Array
    v_tilde0: jax.Array
    z_bar0: jax.Array
    z_tilde0: jax.Array


def _check_hyper(hyper) -> bool:
    for name in ("u_bar0", "u_tilde0", "v_bar0", "v_tilde0", "z_bar0", "z_tilde0", "biases"):
        if not hasattr(hyper, name):
            raise ValueError(f"hyper has no field {name!r} (use ppl_models.sibm.SIBMHyper)")
    for name in ("u_bar0", "v_bar0", "z_bar0", "u_tilde0", "v_tilde0", "z_tilde0"):
        value = float(getattr(hyper, name))
        if not np.isfinite(value) or (name.endswith("tilde0") and value <= 0):
            raise ValueError(f"hyper.{name} must be finite{' and > 0' if name.endswith('tilde0') else ''}, got {value!r}")
    return bool(hyper.biases)


def _prior(hyper, dtype) -> _Prior:
    """The prior means and variances of ``hyper`` as scalar arrays of ``dtype`` (validated).

    Public as ``prior_arrays``.

    Parameters
    ----------
    hyper : SIBMHyper-like
        Fields u_bar0, u_tilde0, v_bar0, v_tilde0, z_bar0, z_tilde0, biases.
    dtype : jax or numpy float dtype
        Dtype of the returned arrays.

    Returns
    -------
    _Prior
        NamedTuple of 0-d jax arrays ``u_bar0``, ``u_tilde0``, ``v_bar0``, ``v_tilde0``, ``z_bar0``,
        ``z_tilde0`` (variances, not sds).

    Raises
    ------
    ValueError
        A missing field, a non-finite value, a variance <= 0.

    Source: ``002_5408d341cb9fc544.txt``, text after eq. (1) (the Gaussian priors).
    """
    _check_hyper(hyper)
    return _Prior(*(jnp.asarray(float(getattr(hyper, f)), dtype) for f in _Prior._fields))


prior_arrays = _prior


def _check_K(K) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    return int(K)


def _check_data(data) -> Observations:
    if not isinstance(data, Observations):
        raise TypeError(f"data must be an Observations of the ones (use custom_inference.sibm.as_binary), got {type(data).__name__}")
    return data


def _hkey(hyper):
    return tuple(float(getattr(hyper, f)) for f in _Prior._fields) + (bool(hyper.biases),)


class _H(NamedTuple):  # hashable stand-in for any hyper object inside jit
    u_bar0: float
    u_tilde0: float
    v_bar0: float
    v_tilde0: float
    z_bar0: float
    z_tilde0: float
    biases: bool


def _static_hyper(hyper) -> _H:
    _check_hyper(hyper)
    return _H(*_hkey(hyper))


# ---------------------------------------------------------------------------------------------
# state and moments


class SIBMState(NamedTuple):
    """Variational parameters of q (eq. 4) as natural parameters.

    K = D + 2 with biases, D without. Float32 or float64.

    Parameters
    ----------
    u_prec, u_h : jax.Array, shape (I, K), float
        q(u_id) = N(u_h / u_prec, 1 / u_prec) (seed: u-ddot, u-dot).
    v_prec, v_h : jax.Array, shape (J, K), float
        q(v_jd), the same.
    z_prec, z_h : jax.Array, shape (), float
        q(z), the same.
    u_fixed, v_fixed : jax.Array, shape (K,), float
        1.0 where the column is fixed to ones (biases), else 0.0.
    last_elbo : jax.Array, shape (), float
        ELBO after the previous batch step (nan before the first).

    Raises
    ------
    None of its own (a NamedTuple; `init` builds one).

    Source: ``002_5408d341cb9fc544.txt`` eq. (4) (stored as natural parameters: project addition).
    """

    u_prec: jax.Array
    u_h: jax.Array
    v_prec: jax.Array
    v_h: jax.Array
    z_prec: jax.Array
    z_h: jax.Array
    u_fixed: jax.Array
    v_fixed: jax.Array
    last_elbo: jax.Array


class SIBMInfo(NamedTuple):
    """Per-step diagnostics of batch VB.

    Parameters
    ----------
    elbo : jax.Array, shape (), float
        The ELBO of the new state (nats).
    rel_change : jax.Array, shape (), float
        |dL| / |L_old|.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition.
    """

    elbo: jax.Array
    rel_change: jax.Array


def _layout(D: int, biases: bool):
    K = D + 2 if biases else D
    u_fixed = np.zeros(K)
    v_fixed = np.zeros(K)
    if biases:
        v_fixed[D] = 1.0  # V's column of ones: U's column D is the row bias
        u_fixed[D + 1] = 1.0  # U's column of ones: V's column D + 1 is the column bias
    return K, u_fixed, v_fixed


def init(key, data: Observations, K: int, hyper, *, init_mean_sd: float = 0.1, init_var: float = 0.1,
         dtype=None) -> SIBMState:
    """Initial q: means N(0, init_mean_sd^2) around the prior mean, variances ``init_var``.

    z starts at the log-odds of the fraction of ones (a cheap, data-aware start); the fixed (bias)
    columns have mean 1.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed (`base.as_key`).
    data : Observations
        The ones (`as_binary`), shape (I, J).
    K : int >= 1
        Latent factors (the seed's D; the state has K + 2 columns with biases).
    hyper : SIBMHyper-like
        Fields u_bar0, u_tilde0, v_bar0, v_tilde0, z_bar0, z_tilde0, biases.
    init_mean_sd : float >= 0, default 0.1
        Sd of the initial means around the prior mean.
    init_var : float > 0, default 0.1
        Initial variance of every free entry and of z.
    dtype : numpy.float32 or numpy.float64, optional
        Float dtype of the state (default that of ``data.values`` as JAX holds it).

    Returns
    -------
    SIBMState
        The start, of ``dtype``.

    Raises
    ------
    ValueError
        For K, hyper fields, init values, a dtype other than float32 / float64.
    TypeError
        ``data`` not an Observations; a ``key`` that is neither a key nor an int (`base.as_key`).

    Source: ``002_5408d341cb9fc544.txt`` eq. (4) (the family); the start itself: project addition.
    """
    D = _check_K(K)
    key = base.as_key(key)
    data = _check_data(data)
    biases = _check_hyper(hyper)
    if not (init_var > 0) or not (init_mean_sd >= 0):
        raise ValueError(f"init_var must be > 0 and init_mean_sd >= 0, got {init_var}, {init_mean_sd}")
    # default: the data's dtype as JAX holds it (float32 unless x64 is on), so no truncation warnings
    dtype = jnp.dtype(base.compute_dtype(dtype, jax.dtypes.canonicalize_dtype(np.asarray(data.values).dtype)))
    I, J = data.shape
    K, uf, vf = _layout(D, biases)
    k1, k2 = jax.random.split(key)
    prec = 1.0 / init_var
    um = float(hyper.u_bar0) + init_mean_sd * np.asarray(jax.random.normal(k1, (I, K)), np.float64)
    vm = float(hyper.v_bar0) + init_mean_sd * np.asarray(jax.random.normal(k2, (J, K)), np.float64)
    um[:, uf > 0] = 1.0
    vm[:, vf > 0] = 1.0
    frac = min(max(data.nnz / (I * J), 1e-6), 1 - 1e-6)
    zm = math.log(frac / (1 - frac))
    return SIBMState(
        u_prec=jnp.full((I, K), prec, dtype), u_h=jnp.asarray(prec * um, dtype),
        v_prec=jnp.full((J, K), prec, dtype), v_h=jnp.asarray(prec * vm, dtype),
        z_prec=jnp.asarray(prec, dtype), z_h=jnp.asarray(prec * zm, dtype),
        u_fixed=jnp.asarray(uf, dtype), v_fixed=jnp.asarray(vf, dtype),
        last_elbo=jnp.asarray(jnp.nan, dtype),
    )


def _mom(prec, h, fixed):
    fx = fixed > 0
    return jnp.where(fx, 1.0, h / prec), jnp.where(fx, 0.0, 1.0 / prec)


def moments(state: SIBMState):
    """Means and variances under q. Fixed (bias) columns have mean 1 and variance 0.

    Parameters
    ----------
    state : SIBMState
        Natural parameters of q.

    Returns
    -------
    (u_bar, u_tilde) : tuple of jax.Array, shape (I, K), float
        Means and variances of U.
    (v_bar, v_tilde) : tuple of jax.Array, shape (J, K), float
        Means and variances of V.
    (z_bar, z_tilde) : tuple of jax.Array, shape (), float
        Mean and variance of z. Every array has the state's dtype.

    Raises
    ------
    None of its own.

    Source: ``002_5408d341cb9fc544.txt`` eq. (4) (q fully factorized Gaussians; stored as natural
    parameters, package docstring).
    """
    return (_mom(state.u_prec, state.u_h, state.u_fixed), _mom(state.v_prec, state.v_h, state.v_fixed),
            (state.z_h / state.z_prec, 1.0 / state.z_prec))


def _cells(ub, ut, vb, vt, zb, zt):
    """mu (n, m) and s2 (n, m) of a block of cells from row moments (n, K) and column moments (m, K)."""
    mu = ub @ vb.T + zb
    s2 = (ub * ub) @ vt.T + ut @ (vb * vb + vt).T + zt
    return mu, s2


def cell_moments(state: SIBMState, rows, cols):
    """mu_ij = E_q[u_i . v_j + z] and s2_ij = Var_q[u_i . v_j + z] for given cells. Work O(n K).

    Parameters
    ----------
    state : SIBMState
        Natural parameters of q.
    rows, cols : jax.Array, shape (n,), int
        The cells.

    Returns
    -------
    mu : jax.Array, shape (n,), float
        The means, in the state's dtype.
    s2 : jax.Array, shape (n,), float
        The variances.

    Raises
    ------
    None of its own (no index checks: traced code).

    Source: ``002_5408d341cb9fc544.txt``, text before eq. (5).
    """
    (ub, ut), (vb, vt), (zb, zt) = moments(state)
    u_b, u_t, v_b, v_t = ub[rows], ut[rows], vb[cols], vt[cols]
    mu = jnp.sum(u_b * v_b, axis=-1) + zb
    s2 = jnp.sum(u_b * u_b * v_t + u_t * (v_b * v_b + v_t), axis=-1) + zt
    return mu, s2


def _kl_terms(state: SIBMState, prior: _Prior):
    """-KL(q || prior) summed over free entries of U, V and z (the seed's beta, gamma, kappa, corrected sign)."""
    (ub, ut), (vb, vt), (zb, zt) = moments(state)

    def neg_kl(mean, var, m0, v0, free):
        safe = jnp.where(free, var, 1.0)
        val = 0.5 + 0.5 * jnp.log(safe / v0) - ((mean - m0) ** 2 + safe) / (2.0 * v0)
        return jnp.sum(jnp.where(free, val, 0.0))

    return (neg_kl(ub, ut, prior.u_bar0, prior.u_tilde0, state.u_fixed[None, :] == 0)
            + neg_kl(vb, vt, prior.v_bar0, prior.v_tilde0, state.v_fixed[None, :] == 0)
            + neg_kl(zb, zt, prior.z_bar0, prior.z_tilde0, True))


# ---------------------------------------------------------------------------------------------
# row chunks (no I x J array: chunk x J at a time)


def _chunk_rows(n_rows: int, n_cols: int, chunk_cells: int) -> int:
    return int(max(1, min(n_rows, chunk_cells // max(n_cols, 1))))


def _pad_rows(x, n_pad, value=0.0):
    pad = n_pad - x.shape[0]
    if pad == 0:
        return x
    return jnp.concatenate([x, jnp.full((pad,) + x.shape[1:], value, x.dtype)], axis=0)


def _map_row_chunks(fn, arrays, n_rows: int, chunk: int):
    """Apply ``fn(chunk_arrays, valid (c,))`` to row chunks of (n_rows, ...) arrays; stack the outputs."""
    n_chunks = -(-n_rows // chunk)
    n_pad = n_chunks * chunk
    padded = [_pad_rows(a, n_pad, 1.0).reshape((n_chunks, chunk) + a.shape[1:]) for a in arrays]
    valid = (jnp.arange(n_pad) < n_rows).reshape(n_chunks, chunk)
    return jax.lax.map(lambda args: fn(args[:-1], args[-1]), (*padded, valid))


# ---------------------------------------------------------------------------------------------
# the bounded ELBO (7)


def elbo(state: SIBMState, data: Observations, hyper, *, xi_state: SIBMState | None = None,
         chunk_cells: int = DEFAULT_CHUNK_CELLS) -> jax.Array:
    """The bounded ELBO L' of seed 002 eq. (7) (nats), with KL terms of the corrected sign.

    L' = sum_ij alpha_ij(xi_ij) - KL(q(U) || p(U)) - KL(q(V) || p(V)) - KL(q(z) || p(z)). Work
    O(I J K) in chunks of ``chunk_cells`` cells; the x-dependent part is a sum over the N ones only.

    Parameters
    ----------
    state : SIBMState
        Differentiable in every float field.
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    xi_state : SIBMState, optional
        None: xi at its optimum (8) for ``state`` (so the value is max_Xi L'(Phi, Xi)); else
        xi_ij = sqrt(mu^2 + s2) of ``xi_state``, held fixed (no gradient through it): the objective
        each coordinate update maximizes.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per row chunk.

    Returns
    -------
    jax.Array, shape (), float
        L', in the state's dtype.

    Raises
    ------
    ValueError
        For a bad ``hyper`` (a missing field, a non-finite value, a variance <= 0).

    Source: seed 002 eqs. (6)-(8) (lambda sign: see the module docstring).
    """
    return _elbo_jit(state, data, _static_hyper(hyper), xi_state, chunk_cells)


def _elbo_impl(state, data, hyper, xi_state, chunk_cells):
    prior = _prior(hyper, state.u_h.dtype)
    (ub, ut), (vb, vt), (zb, zt) = moments(state)
    I, J = data.shape
    chunk = _chunk_rows(I, J, chunk_cells)
    if xi_state is None:
        rub, rut = ub, ut
        rv = (vb, vt, zb, zt)
    else:
        (rub, rut), (rvb, rvt), (rzb, rzt) = jax.tree_util.tree_map(jax.lax.stop_gradient, moments(xi_state))
        rv = (rvb, rvt, rzb, rzt)

    def chunk_sum(arrs, valid):
        cub, cut, crub, crut = arrs
        mu, s2 = _cells(cub, cut, vb, vt, zb, zt)
        if xi_state is None:
            xi = optimal_xi(mu * mu + s2)
        else:
            rmu, rs2 = _cells(crub, crut, *rv)
            xi = optimal_xi(rmu * rmu + rs2)
        val = jj_expected_log_bound(mu, mu * mu + s2, xi, 0)  # the x = 0 bound; + mu on the ones below
        return jnp.sum(jnp.where(valid[:, None], val, 0.0))

    dense = jnp.sum(_map_row_chunks(chunk_sum, (ub, ut, rub, rut), I, chunk))
    mu_pos, _ = cell_moments(state, data.rows, data.cols)
    return dense + jnp.sum(mu_pos) + _kl_terms(state, prior)


_elbo_jit = jax.jit(_elbo_impl, static_argnames=("hyper", "chunk_cells"))



# ---------------------------------------------------------------------------------------------
def _fold_in_data(data, n_users: int, n_items: int, max_iter, tol) -> Observations:
    """The fold-in's ones (`as_binary`, keeping an Observations' dtype), checked against the fit's
    I x J and ``max_iter`` >= 1, ``tol`` >= 0; ValueError otherwise (written once for MAP and VB)."""
    data = as_binary(data, dtype=np.asarray(data.values).dtype) if isinstance(data, Observations) else as_binary(data)
    if n_users != data.n_rows or n_items != data.n_cols:
        raise ValueError(f"state has {n_users} users x {n_items} items, data {data.shape}")
    if int(max_iter) < 1 or not tol >= 0:
        raise ValueError(f"max_iter must be >= 1 and tol >= 0, got {max_iter!r}, {tol!r}")
    return data


# PRNG keys in checkpoints (a typed key cannot be written to .npz: its raw key data is)


def _key_to_data(key):
    """(raw uint32 key data, a function mapping key data back to a key of the same kind as ``key``)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = jax.random.key_impl(key)
        return jax.random.key_data(key), lambda d: jax.random.wrap_key_data(d, impl=impl)
    return key, lambda d: d


# ---------------------------------------------------------------------------------------------
# ArviZ output shared by the three drivers

#: ArviZ dims of every SIBMState field (K columns: "component").
STATE_DIMS = {"u_prec": ("user", "component"), "u_h": ("user", "component"), "v_prec": ("item", "component"),
              "v_h": ("item", "component"), "z_prec": (), "z_h": (), "u_fixed": ("component",),
              "v_fixed": ("component",), "last_elbo": ()}

_DIMS = {"U": ["user", "component"], "V": ["item", "component"],
         **{f: list(d) for f, d in STATE_DIMS.items() if f != "last_elbo"}}


def draws_from_q(seed: int, state: SIBMState, n_draws: int) -> dict[str, np.ndarray]:
    """Independent draws from q (eq. 4); fixed (bias) columns are 1 in every draw.

    Parameters
    ----------
    seed : int
        Seed of the numpy Generator.
    state : SIBMState
        Natural parameters of q.
    n_draws : int >= 0
        Draws; 0 gives the means of q as one draw.

    Returns
    -------
    dict of str to numpy.ndarray, float
        ``U`` (1, n_draws, I, K), ``V`` (1, n_draws, J, K), ``z`` (1, n_draws) (n_draws = 1 for the
        means), of the state's dtype.

    Raises
    ------
    None of its own; a negative ``n_draws`` makes numpy raise ValueError.

    Source: seed 002 eq. (4); project addition.
    """
    (ub, ut), (vb, vt), (zb, zt) = (tuple(np.asarray(a, np.float64) for a in p) for p in moments(state))
    dtype = np.asarray(state.u_h).dtype
    if not n_draws:
        return {k: v.astype(dtype)[None, None] for k, v in (("U", ub), ("V", vb), ("z", np.asarray(zb)))}
    rng = np.random.default_rng(seed)
    out = {"U": ub + np.sqrt(ut) * rng.standard_normal((n_draws, *ub.shape)),
           "V": vb + np.sqrt(vt) * rng.standard_normal((n_draws, *vb.shape)),
           "z": zb + np.sqrt(zt) * rng.standard_normal(n_draws)}
    return {k: v.astype(dtype)[None] for k, v in out.items()}


def fit_output(shape: tuple[int, int], n_components: int, method: str, posterior, *, params=None,
               trace_names=("elbo", "rel_change"), **fields):
    """The result layout (`vi_driver.Output`) of the SIBM drivers.

    ``posterior`` U (user, component), V (item, component), z; the variational parameters (or
    point-estimate fields) ``params``; the trace arrays ``trace_names`` (dim iteration); attrs model
    "sibm", source seed 002.

    Parameters
    ----------
    shape : tuple of 2 int
        (I, J).
    n_components : int
        The state's columns K' (K plus the bias columns).
    method : str
        Attrs ``method``.
    posterior : callable
        State -> (dict of arrays, posterior_kind str).
    params : callable, optional
        State -> dict, default the SIBMState fields but ``last_elbo``.
    trace_names : tuple of str, default ("elbo", "rel_change")
        The trace variables.
    **fields
        Further `vi_driver.Output` fields (trace, result_trace, final, attrs).

    Returns
    -------
    vi_driver.Output
        The layout.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    I, J = shape
    dims = dict(_DIMS, **{k: ["iteration"] for k in trace_names})
    if params is None:
        params = lambda s: {f: v for f, v in s._asdict().items() if f != "last_elbo"}  # noqa: E731
    return vi_driver.Output(
        "sibm", method, posterior, dims=dims,
        coords={"user": np.arange(I), "item": np.arange(J), "component": np.arange(n_components)}, params=params,
        source="002_5408d341cb9fc544.txt", **fields)


def q_posterior(seed: int, n_draws: int):
    """The ``posterior`` of a SIBM VI fit (`vi_driver.Output`): draws from q.

    Parameters
    ----------
    seed : int
        Seed of the draws (`draws_from_q`).
    n_draws : int >= 0
        Draws (0: the means of q as one draw).

    Returns
    -------
    callable
        State -> (`draws_from_q` (seed, state, n_draws), posterior_kind str).

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    return lambda state: (draws_from_q(seed, state, n_draws), "draws from q" if n_draws else "mean of q (n_draws=0)")
