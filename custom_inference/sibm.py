r"""SIBM: variational Bayes (batch and stochastic) and stochastic MAP for logistic binary MF.

Source: ``002_5408d341cb9fc544.txt`` (Hernandez-Lobato, Houlsby, Ghahramani, ICML 2014):
model eqs. (1)-(2), mean-field family (4), prediction (5), Jaakkola-Jordan bound (6), bounded
ELBO (7), optimal xi (8), noisy bound (9), natural-gradient step (10), minibatch averaging
(11)-(12), automatic minibatch size (13), sampling strategies (sec. 2.3), Algorithm 1. Every
update below is our own derivation; `validation.sibm` checks each against ``jax.grad`` of
`elbo` and lists the printed equations that fail (``validation.sibm.ERRATA``).

Model (I x J fully observed binary X, variances as second Normal parameter, as the seed)::

    x_ij ~ Bernoulli(sigma(a_ij)),  a_ij = u_i . v_j + z,
    u_id ~ N(u_bar0, u_tilde0),  v_jd ~ N(v_bar0, v_tilde0),  z ~ N(z_bar0, z_tilde0).

Biases (``hyper.biases``): U and V get K = D + 2 columns; column D of V and column D + 1 of U
are fixed to ones (so column D of U is the row bias and column D + 1 of V the column bias),
the layout of `ppl_models.sibm.augmented_factors`. A fixed entry has q = point mass at 1: the
state marks it in ``u_fixed`` / ``v_fixed`` (K,) and it has no prior or entropy term.

q (eq. 4): fully factorized Gaussians (diagonal, as the seed), **stored as natural parameters**
(precision P = 1 / u_tilde, precision-times-mean h = u_bar / u_tilde; the seed's u-dot, u-ddot).

Bound (eq. 6 / 7). With lambda(xi) = (sigma(xi) - 1/2) / (2 xi) > 0, the POSITIVE convention
of `custom_inference.logistic.jj_lambda` (the seed writes lambda_002 = -lambda), and
mu_ij = E[a_ij], s2_ij = Var[a_ij] = sum_d (u_bar^2 v_tilde + u_tilde v_bar^2 + u_tilde v_tilde) + z_tilde,

    alpha_ij = log sigma(xi) + (x_ij - 1/2) mu_ij - xi / 2 - lambda(xi) (mu_ij^2 + s2_ij - xi^2),
    L'(Phi, Xi) = sum_ij alpha_ij - sum KL(q(u_id) || p) - sum KL(q(v_jd) || p) - KL(q(z) || p).

The optimal xi (eq. 8) is xi_ij = sqrt(mu_ij^2 + s2_ij); there alpha_ij = log sigma(xi) - xi/2 +
(x - 1/2) mu. `elbo` returns max_Xi L'(Phi, Xi) (or L' at the xi of another state).

Coordinate updates (ours). Write a_ij = u_id v_jd + r_ij with r independent of (u_id, v_jd) under
q, so E[a^2] = E[u_id^2] E[v_jd^2] + 2 u_bar_id v_bar_jd E[r] + E[r^2]. L' is linear in
(E u_id, E u_id^2), so the maximizer is Gaussian with

    P(u_id) = 1/u_tilde0 + 2 sum_j lambda_ij E[v_jd^2]
    h(u_id) = u_bar0/u_tilde0 + sum_j (x_ij - 1/2) v_bar_jd - 2 sum_j lambda_ij v_bar_jd (mu_ij - u_bar_id v_bar_jd)
    P(z)    = 1/z_tilde0 + 2 sum_ij lambda_ij
    h(z)    = z_bar0/z_tilde0 + sum_ij (x_ij - 1/2) - 2 sum_ij lambda_ij (mu_ij - z_bar)

and symmetrically for v_jd. The linear sums are aggregated: sum_j (x_ij - 1/2) v_bar_jd =
sum_{j: x_ij = 1} v_bar_jd - (1/2) sum_j v_bar_jd (positives plus one column sum). The lambda
sums need every cell (each has its own xi): batch VB is O(I J K) time per sweep, as in the
seed ("each iteration requires the examination of all of the entries in X"), but it never
holds an I x J array: rows are processed in chunks of ``chunk`` x J cells. (A common-xi
trick, sum_j E[v_j v_j^T] once, would need lambda shared by all cells: not the seed's bound.)

Batch VB (`step`): z, then every column d of V (all j at once, xi re-optimized before each d),
then every column d of U: each block is the exact maximizer of L'(Phi, Xi*(Phi_before)), so
L'(Phi) = max_Xi L' never decreases.

SVI (Algorithm 1). A cell (i, j) ~ p(i, j) gives the noisy bound (9), whose maximizer in u_id is
the formula above with the sum over j replaced by the single term divided by c = p(j|i)
(v_jd: c = p(i|j); z: c = p(i, j)). Then E_{j|i}[target] = batch target exactly (the targets are
linear in the per-cell statistics), which is what the seed's choice of c guarantees; it is
checked by enumeration in `validation.sibm`. Per cell, as Algorithm 1: save, nudge z by (10),
then v_j1..v_jD, then u_i1..u_iD (xi recomputed before each), keep the targets, restore; after
S cells, average the targets per row / column (12) and step (11) with Robbins-Monro
rho = (tau + n_updates)^(-kappa) per row, column and z. The cells of a minibatch start from the
same saved state, so they are computed in parallel (vmap): cost O(S K^2) per minibatch.
Automatic S (13): S = ||Var[target]||_1 / (theta delta p(i) ||E[target]||^2), E and Var of the
per-cell targets tracked by exponentially weighted moving averages, averaged over the (i, d)
and (j, d) seen so far, clipped below at ``S_min`` (the seed: max(I, J)).

Sampling strategies (sec. 2.3): S-Uniform p = 1/(IJ); S-Balanced p = 1/(2 n_x) with n_x the
number of cells with value x; S-Biased p(i, j) = r_i c_j / (2 W_x), with (r_i, c_j) the number
of zeros of row i and column j for a one, of ones for a zero (thresholded at 1), W_x the sum of
those products over cells with value x. Zeros are drawn by rejection (a candidate from the
product distribution, rejected if it is a one), so nothing over all cells is ever built.

MAP ("MAP" baseline of sec. 4.2; its details are in the seed's supplement, not in the seed):
stochastic gradient ascent on log p(U, V, z | X) with the same sampling, the same rescaling c and
minibatch averaging (unbiased gradients), blocks z, V, U in turn, each gradient multiplied by the
inverse of the block's Boehning bound (1/4) B^T B + I / prior_var (B = V for rows of U, U for
columns of V; (K, K), shared by all rows, O((I + J) K^2) per minibatch), Robbins-Monro steps.
At rho = 1 with exact gradients that is a block MM step (monotone). (An earlier version divided
each coordinate's one-cell gradient by that cell's own diagonal bound: a ratio of noisy estimates
whose joint step over K coordinates moves a_ij by ~4 K (x - sigma); on MovieLens 100K it stopped at
log joint -6.7e5 against -1.116e5 at the MAP, and ranked below popularity.)
"""

from __future__ import annotations

import functools
import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from . import arviz_io, vi_driver
from .data import Observations
from .logistic import jj_expected_log_bound, jj_lambda, mackay_probit, optimal_xi
from .schedules import check_robbins_monro, robbins_monro_array

__all__ = [
    "SIBMState",
    "SIBMInfo",
    "SVIState",
    "MAPState",
    "Sampler",
    "Minibatch",
    "FitResult",
    "STRATEGIES",
    "as_binary",
    "prior_arrays",
    "init",
    "moments",
    "cell_moments",
    "elbo",
    "update_z",
    "update_v",
    "update_u",
    "step",
    "make_sampler",
    "pmf",
    "sample_cells",
    "cell_targets",
    "svi_init",
    "svi_step",
    "auto_minibatch_size",
    "map_init",
    "map_step",
    "map_cell_gradients",
    "map_curvature_bound",
    "log_joint",
    "score_users",
    "predict_proba",
    "fit",
    "fit_svi",
    "svi_scan",
    "fit_map",
]

STRATEGIES = ("uniform", "balanced", "biased")
DEFAULT_CHUNK_CELLS = 1 << 18  # cells per row chunk in batch sweeps and the ELBO


# ---------------------------------------------------------------------------------------------
# data and hyperparameters


def as_binary(X, *, dtype=np.float64) -> Observations:
    """Validate a fully observed binary matrix and keep its ones (`Observations`, values 1).

    Parameters
    ----------
    X : `Observations` (its entries must be 0/1; zeros are dropped), a scipy.sparse matrix, or a
        dense 2-D array (I, J) of 0/1 (bool, int or float).
    dtype : float dtype of the stored values.

    Returns
    -------
    Observations of the ones: rows, cols int32 (N,), values (N,) all 1, shape (I, J).

    Raises
    ------
    ValueError naming the field: ``X`` not 2-D, ``values`` outside {0, 1} or NaN/inf, an index out
    of range, duplicates, an all-zero matrix (no ones: nothing to learn from).
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
    """The prior means and variances of ``hyper`` as scalar arrays of ``dtype`` (validated)."""
    _check_hyper(hyper)
    return _Prior(*(jnp.asarray(float(getattr(hyper, f)), dtype) for f in _Prior._fields))


prior_arrays = _prior


def _check_D(D) -> int:
    if isinstance(D, bool) or not isinstance(D, (int, np.integer)) or D < 1:
        raise ValueError(f"D must be an integer >= 1, got {D!r}")
    return int(D)


def _check_data(data) -> Observations:
    if not isinstance(data, Observations):
        raise ValueError(f"data must be an Observations of the ones (use custom_inference.sibm.as_binary), got {type(data).__name__}")
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

    u_prec, u_h : (I, K)   q(u_id) = N(u_h / u_prec, 1 / u_prec)  (seed: u-ddot, u-dot)
    v_prec, v_h : (J, K)   q(v_jd)
    z_prec, z_h : ()       q(z)
    u_fixed, v_fixed : (K,) 1.0 where the column is fixed to ones (biases), else 0.0
    last_elbo : ()         ELBO after the previous batch step (nan before the first)
    K = D + 2 with biases, D without. Float32 or float64.
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
    """Per-step diagnostics: ``elbo`` of the new state and ``rel_change`` |dL| / |L_old|."""

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


def init(key, data: Observations, hyper, D: int, *, init_mean_sd: float = 0.1, init_var: float = 0.1,
         dtype=None) -> SIBMState:
    """Initial q: means N(0, init_mean_sd^2) around the prior mean, variances ``init_var``; z at the
    prior mean shifted to the log-odds of the fraction of ones (a cheap, data-aware start).

    Parameters
    ----------
    key : jax PRNG key
    data : Observations of the ones (`as_binary`), shape (I, J)
    hyper : SIBMHyper-like (fields u_bar0, u_tilde0, v_bar0, v_tilde0, z_bar0, z_tilde0, biases)
    D : int >= 1, latent factors (K = D + 2 columns with biases)
    init_mean_sd, init_var : > 0
    dtype : float dtype (default that of ``data.values``)

    Returns SIBMState. Raises ValueError (D, hyper fields, data type, init values).
    """
    D = _check_D(D)
    data = _check_data(data)
    biases = _check_hyper(hyper)
    if not (init_var > 0) or not (init_mean_sd >= 0):
        raise ValueError(f"init_var must be > 0 and init_mean_sd >= 0, got {init_var}, {init_mean_sd}")
    dtype = jnp.dtype(dtype or np.asarray(data.values).dtype)
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
    """Means and variances under q: ((u_bar, u_tilde) (I, K), (v_bar, v_tilde) (J, K), (z_bar, z_tilde) ()).

    Fixed (bias) columns have mean 1 and variance 0.
    """
    return (_mom(state.u_prec, state.u_h, state.u_fixed), _mom(state.v_prec, state.v_h, state.v_fixed),
            (state.z_h / state.z_prec, 1.0 / state.z_prec))


def _cells(ub, ut, vb, vt, zb, zt):
    """mu (n, m) and s2 (n, m) of a block of cells from row moments (n, K) and column moments (m, K)."""
    mu = ub @ vb.T + zb
    s2 = (ub * ub) @ vt.T + ut @ (vb * vb + vt).T + zt
    return mu, s2


def cell_moments(state: SIBMState, rows, cols):
    """mu_ij = E_q[u_i . v_j + z] and s2_ij = Var_q[u_i . v_j + z] for given cells (text before eq. 5).

    rows, cols : int arrays (n,). Returns two float arrays (n,). Work O(n K).
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

    L' = sum_ij alpha_ij(xi_ij) - KL(q(U) || p(U)) - KL(q(V) || p(V)) - KL(q(z) || p(z)).

    Parameters
    ----------
    state : SIBMState (differentiable in every float field)
    data : Observations of the ones, shape (I, J)
    hyper : SIBMHyper-like (prior means and variances)
    xi_state : None: xi at its optimum (8) for ``state`` (so the value is max_Xi L'(Phi, Xi));
        else xi_ij = sqrt(mu^2 + s2) of ``xi_state``, held fixed (no gradient through it): the
        objective each coordinate update maximizes.
    chunk_cells : cells per row chunk.

    Returns
    -------
    scalar (dtype of the state). Work O(I J K) in chunks of ``chunk_cells`` cells; the x-dependent
    part is a sum over the N ones only.

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
# batch coordinate updates


def _linear_stats(data: Observations, b_mean, a_side: str):
    """sum_b (x_ab - 1/2) b_bar_bd for every a: (n_a, K). a_side 'u': sum over columns j; 'v': over rows i."""
    rows, cols = data.rows, data.cols
    if a_side == "u":
        pos = jax.ops.segment_sum(b_mean[cols], rows, num_segments=data.n_rows)
    else:
        pos = jax.ops.segment_sum(b_mean[rows], cols, num_segments=data.n_cols)
    return pos - 0.5 * jnp.sum(b_mean, axis=0)[None, :]


def _side_update(a_prec, a_h, a_fixed, b_mean, b_var, zb, zt, lin, p_mean, p_var, upd, chunk):
    """Exact coordinate updates of the columns d with ``upd[d]`` (in order d = 0..K-1) of one side.

    a_* (n_a, K) natural parameters of the updated side; b_* (n_b, K) moments of the other side;
    lin (n_a, K) linear statistics; upd (K,) bool; xi re-optimized before each column. Rows in
    chunks of ``chunk`` (memory O(chunk n_b)).
    """
    n_a, K = a_prec.shape
    eb2 = b_mean * b_mean + b_var  # (n_b, K)

    def body(arrs, valid):
        P, h, lc = arrs
        m, v = _mom(P, h, a_fixed[None, :])
        mu, s2 = _cells(m, v, b_mean, b_var, zb, zt)

        def one(d, carry):
            P, h, m, v, mu, s2 = carry
            bd, bvd, eb2d = b_mean[:, d], b_var[:, d], eb2[:, d]
            md, vd = m[:, d], v[:, d]
            # positive lambda (custom_inference.logistic); seed 002 writes lambda_002 = -lambda, so its
            # "-2 sum lambda_002 E[b^2]" in the precision is our "+2 sum lambda E[b^2]"
            lam = jj_lambda(optimal_xi(mu * mu + s2))
            Pn = 1.0 / p_var + 2.0 * lam @ eb2d
            er = mu - md[:, None] * bd[None, :]
            hn = p_mean / p_var + lc[:, d] - 2.0 * (lam * er) @ bd
            keep = (a_fixed[d] > 0) | ~upd[d]
            Pn = jnp.where(keep, P[:, d], Pn)
            hn = jnp.where(keep, h[:, d], hn)
            m_new, v_new = _mom(Pn, hn, a_fixed[d])
            mu = mu + (m_new - md)[:, None] * bd[None, :]
            s2 = s2 + (m_new**2 - md**2)[:, None] * bvd[None, :] + (v_new - vd)[:, None] * eb2d[None, :]
            return (P.at[:, d].set(Pn), h.at[:, d].set(hn), m.at[:, d].set(m_new), v.at[:, d].set(v_new), mu, s2)

        P, h, *_ = jax.lax.fori_loop(0, K, one, (P, h, m, v, mu, s2))
        return P, h

    P, h = _map_row_chunks(body, (a_prec, a_h, lin), n_a, chunk)
    return P.reshape(-1, K)[:n_a], h.reshape(-1, K)[:n_a]


def _columns(state, columns):
    K = state.u_prec.shape[1]
    if columns is None:
        return jnp.ones(K, bool)
    cols = np.asarray(columns, dtype=np.int64).ravel()
    if cols.size and (cols.min() < 0 or cols.max() >= K):
        raise ValueError(f"columns must be in 0..{K - 1}, got {columns!r}")
    mask = np.zeros(K, bool)
    mask[cols] = True
    return jnp.asarray(mask)


def _update_v_impl(state, data, hyper, mask, chunk_cells):
    prior = _prior(hyper, state.u_h.dtype)
    (ub, ut), _, (zb, zt) = moments(state)
    I, J = data.shape
    lin = _linear_stats(data, ub, "v")
    P, h = _side_update(state.v_prec, state.v_h, state.v_fixed, ub, ut, zb, zt, lin, prior.v_bar0, prior.v_tilde0,
                        mask, _chunk_rows(J, I, chunk_cells))
    return state._replace(v_prec=P, v_h=h)


def _update_u_impl(state, data, hyper, mask, chunk_cells):
    prior = _prior(hyper, state.u_h.dtype)
    _, (vb, vt), (zb, zt) = moments(state)
    I, J = data.shape
    lin = _linear_stats(data, vb, "u")
    P, h = _side_update(state.u_prec, state.u_h, state.u_fixed, vb, vt, zb, zt, lin, prior.u_bar0, prior.u_tilde0,
                        mask, _chunk_rows(I, J, chunk_cells))
    return state._replace(u_prec=P, u_h=h)


def _update_z_impl(state, data, hyper, chunk_cells):
    prior = _prior(hyper, state.u_h.dtype)
    (ub, ut), (vb, vt), (zb, zt) = moments(state)
    I, J = data.shape

    def sums(arrs, valid):
        cub, cut = arrs
        mu, s2 = _cells(cub, cut, vb, vt, zb, zt)
        lam = jnp.where(valid[:, None], jj_lambda(optimal_xi(mu * mu + s2)), 0.0)
        return jnp.stack([jnp.sum(lam), jnp.sum(lam * (mu - zb))])

    s = jnp.sum(_map_row_chunks(sums, (ub, ut), I, _chunk_rows(I, J, chunk_cells)), axis=0)
    n = jnp.asarray(data.nnz, ub.dtype)
    P = 1.0 / prior.z_tilde0 + 2.0 * s[0]
    h = prior.z_bar0 / prior.z_tilde0 + (n - 0.5 * I * J) - 2.0 * s[1]
    return state._replace(z_prec=P, z_h=h)


_update_v_jit = jax.jit(_update_v_impl, static_argnames=("hyper", "chunk_cells"))
_update_u_jit = jax.jit(_update_u_impl, static_argnames=("hyper", "chunk_cells"))
_update_z_jit = jax.jit(_update_z_impl, static_argnames=("hyper", "chunk_cells"))


def update_v(state: SIBMState, data: Observations, hyper, columns=None, *,
             chunk_cells: int = DEFAULT_CHUNK_CELLS) -> SIBMState:
    """Batch coordinate update of q(v_jd) for every j, for each d in ``columns`` (default all, in order).

    Before each d, xi is set to its optimum (8); then v_{., d} maximizes L'(Phi, Xi) exactly
    (module docstring: P = 1/v_tilde0 + 2 sum_i lambda_ij E[u_id^2], h = v_bar0/v_tilde0 +
    sum_i (x_ij - 1/2) u_bar_id - 2 sum_i lambda_ij u_bar_id (mu_ij - u_bar_id v_bar_jd)). Fixed
    columns are left alone. Work O(I J) per column, in chunks of columns of X.

    Parameters: state SIBMState; data Observations of the ones (I, J); hyper SIBMHyper-like;
    columns: iterable of ints in 0..K-1 or None. Returns the new SIBMState. Raises ValueError for
    columns out of range or a bad hyper.
    """
    return _update_v_jit(state, data, _static_hyper(hyper), _columns(state, columns), chunk_cells)


def update_u(state: SIBMState, data: Observations, hyper, columns=None, *,
             chunk_cells: int = DEFAULT_CHUNK_CELLS) -> SIBMState:
    """Batch coordinate update of q(u_id) for every i, for each d in ``columns`` (as `update_v`,
    sums over the columns j of X; rows of U in chunks)."""
    return _update_u_jit(state, data, _static_hyper(hyper), _columns(state, columns), chunk_cells)


def update_z(state: SIBMState, data: Observations, hyper, *, chunk_cells: int = DEFAULT_CHUNK_CELLS) -> SIBMState:
    """Batch update of q(z) at optimal xi: P = 1/z_tilde0 + 2 sum_ij lambda_ij,
    h = z_bar0/z_tilde0 + (N - I J / 2) - 2 sum_ij lambda_ij (mu_ij - z_bar). Work O(I J K), chunked."""
    return _update_z_jit(state, data, _static_hyper(hyper), chunk_cells)


def _sweep(state, data, hyper, chunk_cells):
    K = state.u_prec.shape[1]
    state = _update_z_impl(state, data, hyper, chunk_cells)
    state = _update_v_impl(state, data, hyper, jnp.ones(K, bool), chunk_cells)
    return _update_u_impl(state, data, hyper, jnp.ones(K, bool), chunk_cells)


def _step_impl(state, data, hyper, chunk_cells):
    new = _sweep(state, data, hyper, chunk_cells)
    value = _elbo_impl(new, data, hyper, None, chunk_cells)
    rel = jnp.abs(value - state.last_elbo) / jnp.abs(state.last_elbo)
    return new._replace(last_elbo=value), SIBMInfo(value, jnp.where(jnp.isnan(rel), jnp.inf, rel))


_step_jit = jax.jit(_step_impl, static_argnames=("hyper", "chunk_cells"))


def step(key, state: SIBMState, data: Observations, hyper, *, chunk_cells: int = DEFAULT_CHUNK_CELLS):
    """One batch VB sweep (coordinate ascent on eq. 7 with optimal xi (8)): z, V columns, U columns.

    Every block is an exact coordinate maximizer, so the ELBO never decreases. ``key`` is unused
    (deterministic). Returns (SIBMState, SIBMInfo(elbo of the new state, rel_change)).
    Work O(I J K) per sweep, memory O(chunk_cells).
    """
    del key
    return _step_jit(state, data, _static_hyper(hyper), chunk_cells)


# ---------------------------------------------------------------------------------------------
# sampling strategies (sec. 2.3)


class Sampler(NamedTuple):
    """Everything needed to draw cells under one strategy and to know p(i, j), p(i), p(j).

    keys : (N,) int, sorted i * J + j of the ones (membership tests by binary search)
    one_cdf : (N,) cumulative probabilities of the ones (drawn given "a one")
    zero_row_cdf : (I,), zero_col_cdf : (J,) the product proposal of the zeros (rejection)
    p_one : () probability that a draw is a one (0.5 for balanced / biased; N/(IJ) uniform is
        handled by drawing a cell uniformly, see `sample_cells`)
    w_one_row, w_one_col, w_zero_row, w_zero_col : (I,), (J,) per-row / column weights with
        p(i, j) = w_x_row[i] w_x_col[j] / norm_x for a cell of value x
    norm_one, norm_zero : ()
    p_row : (I,), p_col : (J,) marginals p(i) = sum_j p(i, j), p(j)
    code : () int, 0 uniform, 1 balanced, 2 biased
    """

    keys: jax.Array
    pos_rows: jax.Array
    pos_cols: jax.Array
    one_cdf: jax.Array
    zero_row_cdf: jax.Array
    zero_col_cdf: jax.Array
    w_one_row: jax.Array
    w_one_col: jax.Array
    w_zero_row: jax.Array
    w_zero_col: jax.Array
    norm_one: jax.Array
    norm_zero: jax.Array
    p_row: jax.Array
    p_col: jax.Array
    code: jax.Array


def make_sampler(data: Observations, strategy: str = "biased", *, dtype=None) -> Sampler:
    """Build the sampler of one strategy of seed 002 sec. 2.3 (host side, O(N + I + J)).

    ``strategy``: "uniform" (S-Uniform, p = 1/(IJ)), "balanced" (S-Balanced, p = 1/(2 n_x)),
    "biased" (S-Biased, p proportional to r_i^(1-x) c_j^(1-x), counts thresholded at 1).

    Raises ValueError for an unknown strategy, or (balanced / biased) a matrix without zeros.
    """
    data = _check_data(data)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    I, J = data.shape
    N = data.nnz
    Z = I * J - N
    if strategy != "uniform" and Z == 0:
        raise ValueError("data: S-Balanced / S-Biased need at least one zero in X")
    if I * J >= 2**31 and not jax.config.jax_enable_x64:
        raise ValueError("data: I * J >= 2^31 needs jax_enable_x64 for the cell keys")
    rows = np.asarray(data.rows, np.int64)
    cols = np.asarray(data.cols, np.int64)
    ones_row = np.bincount(rows, minlength=I).astype(np.float64)
    ones_col = np.bincount(cols, minlength=J).astype(np.float64)
    if strategy == "biased":
        r0 = np.maximum(J - ones_row, 1.0)  # zeros per row, thresholded at 1
        c0 = np.maximum(I - ones_col, 1.0)
        r1 = np.maximum(ones_row, 1.0)  # ones per row, thresholded at 1
        c1 = np.maximum(ones_col, 1.0)
        w1r, w1c, w0r, w0c = r0, c0, r1, c1
    else:
        w1r, w1c, w0r, w0c = np.ones(I), np.ones(J), np.ones(I), np.ones(J)
    w_pos = w1r[rows] * w1c[cols]
    norm1 = float(w_pos.sum()) if N else 1.0
    norm0 = float(w0r.sum() * w0c.sum() - (w0r[rows] * w0c[cols]).sum())
    if strategy == "uniform":
        p_one = N / (I * J)
        s1, s0 = p_one, 1.0 - p_one  # mass of the ones / zeros
        norm1, norm0 = (float(N) if N else 1.0), float(Z) if Z else 1.0
    else:
        s1, s0 = (0.5, 0.5) if N else (0.0, 1.0)
    # marginals: p(i) = s1 sum_{j in ones(i)} w1 / norm1 + s0 (w0r_i sum_{j} w0c_j - sum_{j in ones(i)} w0) / norm0
    one_row_mass = np.bincount(rows, weights=w_pos, minlength=I)
    one_col_mass = np.bincount(cols, weights=w_pos, minlength=J)
    w0_pos = w0r[rows] * w0c[cols]
    zero_row_mass = w0r * w0c.sum() - np.bincount(rows, weights=w0_pos, minlength=I)
    zero_col_mass = w0c * w0r.sum() - np.bincount(cols, weights=w0_pos, minlength=J)
    p_row = s1 * one_row_mass / norm1 + s0 * zero_row_mass / norm0
    p_col = s1 * one_col_mass / norm1 + s0 * zero_col_mass / norm0
    dtype = jnp.dtype(dtype or np.asarray(data.values).dtype)
    key_dtype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    keys = np.sort(rows * J + cols)
    one_cdf = np.cumsum(w_pos) / norm1 if N else np.ones(1)
    f = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    return Sampler(
        keys=jnp.asarray(keys if N else np.full(1, -1), key_dtype),
        pos_rows=jnp.asarray(rows if N else np.zeros(1), jnp.int32),
        pos_cols=jnp.asarray(cols if N else np.zeros(1), jnp.int32),
        one_cdf=f(one_cdf), zero_row_cdf=f(np.cumsum(w0r) / w0r.sum()), zero_col_cdf=f(np.cumsum(w0c) / w0c.sum()),
        w_one_row=f(w1r), w_one_col=f(w1c), w_zero_row=f(w0r), w_zero_col=f(w0c),
        norm_one=f(norm1 / s1 if s1 > 0 else np.inf), norm_zero=f(norm0 / s0 if s0 > 0 else np.inf),
        p_row=f(p_row), p_col=f(p_col), code=jnp.asarray(STRATEGIES.index(strategy), jnp.int32),
    )


def _is_one(sampler: Sampler, i, j, J):
    key = i.astype(sampler.keys.dtype) * J + j.astype(sampler.keys.dtype)
    idx = jnp.clip(jnp.searchsorted(sampler.keys, key), 0, sampler.keys.shape[0] - 1)
    return sampler.keys[idx] == key


def pmf(sampler: Sampler, i, j, x):
    """p(i, j) of the sampler's strategy for cells (i, j) with values x (arrays (n,)): (n,) float.

    p(i, j) = w_x_row[i] w_x_col[j] / norm_x (norm_x includes the 1/2 of the class mass).
    """
    one = x > 0
    w = jnp.where(one, sampler.w_one_row[i] * sampler.w_one_col[j], sampler.w_zero_row[i] * sampler.w_zero_col[j])
    return w / jnp.where(one, sampler.norm_one, sampler.norm_zero)


def _draw(cdf, u):
    return jnp.clip(jnp.searchsorted(cdf, u * cdf[-1], side="right"), 0, cdf.shape[0] - 1)


def sample_cells(key, sampler: Sampler, shape: tuple[int, int], n: int, *, uniform: bool | None = None):
    """Draw ``n`` cells from p(i, j) (seed 002 sec. 2.3).

    Returns (i int32 (n,), j int32 (n,), x (n,) float 0/1, p_ij (n,), p(j|i) (n,), p(i|j) (n,)).
    Uniform: i, j uniform. Balanced / biased: a one with probability 1/2 (drawn from the ones
    by their weights), else a zero by rejection from the product proposal w0_row x w0_col.
    ``uniform``: the strategy is S-Uniform (default: read from ``sampler.code``, which must then be
    concrete; pass it under jit).
    """
    if uniform is None:
        uniform = int(sampler.code) == 0
    I, J = shape
    dtype = sampler.p_row.dtype
    k_class, k_one, k_zero = jax.random.split(key, 3)

    n_try = 16  # candidates per draw before falling back to a rejection loop

    def draw_zeros(k):
        k1, k2, k3 = jax.random.split(k, 3)
        ci = _draw(sampler.zero_row_cdf, jax.random.uniform(k1, (n, n_try), dtype=dtype))
        cj = _draw(sampler.zero_col_cdf, jax.random.uniform(k2, (n, n_try), dtype=dtype))
        ok = ~_is_one(sampler, ci, cj, J)
        first = jnp.argmax(ok, axis=1)
        i0 = jnp.take_along_axis(ci, first[:, None], axis=1)[:, 0]
        j0 = jnp.take_along_axis(cj, first[:, None], axis=1)[:, 0]
        found = jnp.any(ok, axis=1)

        def one(k, i, j, done):
            def body(c):
                k, _, _, _ = c
                k, ka, kb = jax.random.split(k, 3)
                i = _draw(sampler.zero_row_cdf, jax.random.uniform(ka, dtype=dtype))
                j = _draw(sampler.zero_col_cdf, jax.random.uniform(kb, dtype=dtype))
                return k, i, j, ~_is_one(sampler, i, j, J)

            _, i, j, _ = jax.lax.while_loop(lambda c: ~c[3], body, (k, i, j, done))
            return i, j

        return jax.vmap(one)(jax.random.split(k3, n), i0, j0, found)

    def uniform_cells(_):
        ki, kj = jax.random.split(k_zero)
        i = jax.random.randint(ki, (n,), 0, I)
        j = jax.random.randint(kj, (n,), 0, J)
        return i.astype(jnp.int32), j.astype(jnp.int32)

    def classes(_):
        is_one = jax.random.uniform(k_class, (n,), dtype=dtype) < 0.5
        idx = _draw(sampler.one_cdf, jax.random.uniform(k_one, (n,), dtype=dtype))
        zi, zj = draw_zeros(k_zero)
        i = jnp.where(is_one, sampler.pos_rows[idx], zi)
        j = jnp.where(is_one, sampler.pos_cols[idx], zj)
        return i.astype(jnp.int32), j.astype(jnp.int32)

    i, j = uniform_cells(None) if uniform else classes(None)
    x = _is_one(sampler, i, j, J).astype(dtype)
    p = pmf(sampler, i, j, x)
    return i, j, x, p, p / sampler.p_row[i], p / sampler.p_col[j]


# ---------------------------------------------------------------------------------------------
# SVI (Algorithm 1)


class Minibatch(NamedTuple):
    """S sampled cells (padded): i, j int32 (S,); x, p_ij, p_j_given_i, p_i_given_j, weight (S,) float
    (weight 0 marks padding)."""

    i: jax.Array
    j: jax.Array
    x: jax.Array
    p_ij: jax.Array
    p_j_given_i: jax.Array
    p_i_given_j: jax.Array
    weight: jax.Array


class SVIState(NamedTuple):
    """SVI state: q, Robbins-Monro counters and the moving averages of the targets for eq. (13).

    params : SIBMState
    u_count (I,), v_count (J,), z_count () : number of updates so far (float)
    u_m1, u_m2 (I, K, 2), v_m1, v_m2 (J, K, 2) : EWMA of the per-cell targets (precision, h) and
        of their squares (eq. 13's E and Var)
    S : () the current minibatch size
    """

    params: SIBMState
    u_count: jax.Array
    v_count: jax.Array
    z_count: jax.Array
    u_m1: jax.Array
    u_m2: jax.Array
    v_m1: jax.Array
    v_m2: jax.Array
    S: jax.Array


def svi_init(params: SIBMState, S: int) -> SVIState:
    """Wrap a q (e.g. from `init`) for SVI with initial minibatch size ``S`` (>= 1)."""
    if isinstance(S, bool) or int(S) != S or S < 1:
        raise ValueError(f"S must be an integer >= 1, got {S!r}")
    I, K = params.u_prec.shape
    J = params.v_prec.shape[0]
    dt = params.u_h.dtype
    z = lambda *s: jnp.zeros(s, dt)  # noqa: E731
    return SVIState(params, z(I), z(J), z(), z(I, K, 2), z(I, K, 2), z(J, K, 2), z(J, K, 2), jnp.asarray(float(S), dt))


def cell_targets(params: SIBMState, prior: _Prior, i, j, x, c_u, c_v, c_z, rho_z, rho_v, rho_u):
    """Per-cell targets of Algorithm 1 (maximizers of the noisy bound (9)), for one cell.

    i, j : int scalars; x : 0/1; c_u = p(j|i), c_v = p(i|j), c_z = p(i, j) (the rescaling of (9));
    rho_* : the temporary step sizes of Algorithm 1's "update ... using (10)" inside the cell
    (0: every target at the saved state, the pure noisy natural gradient). Order: z, then
    v_j1..v_jK, then u_i1..u_iK, xi re-optimized (8) before each.

    Returns (z_target (2,), v_target (K, 2), u_target (K, 2)), each row (precision, h).
    Fixed (bias) columns return their current natural parameters.
    """
    um, uv = _mom(params.u_prec[i], params.u_h[i], params.u_fixed)
    vm, vv = _mom(params.v_prec[j], params.v_h[j], params.v_fixed)
    zp, zh = params.z_prec, params.z_h
    zm, zv = zh / zp, 1.0 / zp
    mu = jnp.dot(um, vm) + zm
    s2 = jnp.sum(um * um * vv + uv * (vm * vm + vv)) + zv
    xm = x - 0.5
    # z
    lam = jj_lambda(optimal_xi(mu * mu + s2))
    zt = jnp.stack([1.0 / prior.z_tilde0 + 2.0 * lam / c_z,
                    prior.z_bar0 / prior.z_tilde0 + (xm - 2.0 * lam * (mu - zm)) / c_z])
    zp2, zh2 = (1 - rho_z) * zp + rho_z * zt[0], (1 - rho_z) * zh + rho_z * zt[1]
    mu = mu + zh2 / zp2 - zm
    s2 = s2 + 1.0 / zp2 - zv

    def side(a_prec, a_h, a_fixed, am, av, bm, bv, mu, s2, p_mean, p_var, c, rho):
        K = a_prec.shape[0]

        def one(d, carry):
            am, av, mu, s2, targets = carry
            lam = jj_lambda(optimal_xi(mu * mu + s2))  # positive convention (seed 002: lambda_002 = -lambda)
            eb2 = bm[d] ** 2 + bv[d]
            tp = 1.0 / p_var + 2.0 * lam * eb2 / c
            th = p_mean / p_var + (xm * bm[d] - 2.0 * lam * bm[d] * (mu - am[d] * bm[d])) / c
            fx = a_fixed[d] > 0
            tp = jnp.where(fx, a_prec[d], tp)
            th = jnp.where(fx, a_h[d], th)
            np_, nh = (1 - rho) * a_prec[d] + rho * tp, (1 - rho) * a_h[d] + rho * th
            m_new, v_new = _mom(np_, nh, a_fixed[d])
            mu = mu + (m_new - am[d]) * bm[d]
            s2 = s2 + (m_new**2 - am[d] ** 2) * bv[d] + (v_new - av[d]) * eb2
            return am.at[d].set(m_new), av.at[d].set(v_new), mu, s2, targets.at[d].set(jnp.stack([tp, th]))

        init = (am, av, mu, s2, jnp.zeros((K, 2), am.dtype))
        _, _, mu, s2, targets = jax.lax.fori_loop(0, K, one, init)
        return targets, mu, s2

    vt, mu, s2 = side(params.v_prec[j], params.v_h[j], params.v_fixed, vm, vv, um, uv, mu, s2,
                      prior.v_bar0, prior.v_tilde0, c_v, rho_v)
    ut, _, _ = side(params.u_prec[i], params.u_h[i], params.u_fixed, um, uv, vm, vv, mu, s2,
                    prior.u_bar0, prior.u_tilde0, c_u, rho_u)
    return zt, vt, ut


def _rm(count, tau, kappa):
    """rho = (tau + count)^(-kappa) per row / column / z (`custom_inference.schedules`)."""
    return robbins_monro_array(count, tau, kappa)


def _segment_avg(t, idx, w, n):
    shape = (-1,) + (1,) * (t.ndim - 1)
    cnt = jax.ops.segment_sum(w, idx, num_segments=n)
    s1 = jax.ops.segment_sum(w.reshape(shape) * t, idx, num_segments=n)
    s2 = jax.ops.segment_sum(w.reshape(shape) * t * t, idx, num_segments=n)
    safe = jnp.maximum(cnt, 1.0).reshape(shape)
    return cnt, s1 / safe, s2 / safe


def _svi_update(st: SVIState, batch: Minibatch, prior: _Prior, tau, kappa, ewma, nudge: bool):
    p = st.params
    I, J = p.u_prec.shape[0], p.v_prec.shape[0]
    rz = _rm(st.z_count, tau, kappa)
    rv = _rm(st.v_count, tau, kappa)
    ru = _rm(st.u_count, tau, kappa)
    scale = 1.0 if nudge else 0.0
    zt, vt, ut = jax.vmap(lambda i, j, x, cu, cv, cz: cell_targets(
        p, prior, i, j, x, cu, cv, cz, scale * rz, scale * rv[j], scale * ru[i]))(
        batch.i, batch.j, batch.x, batch.p_j_given_i, batch.p_i_given_j, batch.p_ij)
    w = batch.weight
    # eq. (12): averages per row / column; eq. (11): the step
    nu, u_avg, u_sq = _segment_avg(ut, batch.i, w, I)
    nv, v_avg, v_sq = _segment_avg(vt, batch.j, w, J)
    z_avg = jnp.sum(w[:, None] * zt, axis=0) / jnp.sum(w)

    def blend(prec, h, avg, n, rho, fixed):
        touched = (n > 0)[:, None] & (fixed[None, :] == 0)
        r = rho[:, None]
        return (jnp.where(touched, (1 - r) * prec + r * avg[..., 0], prec),
                jnp.where(touched, (1 - r) * h + r * avg[..., 1], h))

    u_prec, u_h = blend(p.u_prec, p.u_h, u_avg, nu, ru, p.u_fixed)
    v_prec, v_h = blend(p.v_prec, p.v_h, v_avg, nv, rv, p.v_fixed)
    z_prec = (1 - rz) * p.z_prec + rz * z_avg[0]
    z_h = (1 - rz) * p.z_h + rz * z_avg[1]

    def moving(m1, m2, avg, sq, n, count):
        first = (count == 0)[:, None, None]
        om = jnp.where(first, 1.0, ewma)
        touched = (n > 0)[:, None, None]
        return (jnp.where(touched, (1 - om) * m1 + om * avg, m1), jnp.where(touched, (1 - om) * m2 + om * sq, m2))

    u_m1, u_m2 = moving(st.u_m1, st.u_m2, u_avg, u_sq, nu, st.u_count)
    v_m1, v_m2 = moving(st.v_m1, st.v_m2, v_avg, v_sq, nv, st.v_count)
    params = p._replace(u_prec=u_prec, u_h=u_h, v_prec=v_prec, v_h=v_h, z_prec=z_prec, z_h=z_h)
    return st._replace(params=params, u_count=st.u_count + (nu > 0), v_count=st.v_count + (nv > 0),
                       z_count=st.z_count + 1.0, u_m1=u_m1, u_m2=u_m2, v_m1=v_m1, v_m2=v_m2)


def auto_minibatch_size(st: SVIState, sampler: Sampler, theta_delta: float = 2.0) -> jax.Array:
    """Eq. (13): S_{i,d} = ||Var[target]||_1 / (theta delta p(i) ||E[target]||_2^2), E and Var the moving
    averages of the per-cell targets; the mean over the free (i, d) and (j, d) updated at least once.

    Returns a float scalar (nan if nothing has been seen). Source: seed 002 eq. (13) and the text after.
    """
    def per(m1, m2, count, p_marg, fixed):
        var = jnp.sum(jnp.maximum(m2 - m1 * m1, 0.0), axis=-1)
        norm2 = jnp.sum(m1 * m1, axis=-1)
        s = var / (theta_delta * p_marg[:, None] * norm2)
        ok = (count > 0)[:, None] & (fixed[None, :] == 0)
        return jnp.sum(jnp.where(ok, s, 0.0)), jnp.sum(ok)

    a, na = per(st.u_m1, st.u_m2, st.u_count, sampler.p_row, st.params.u_fixed)
    b, nb = per(st.v_m1, st.v_m2, st.v_count, sampler.p_col, st.params.v_fixed)
    return (a + b) / (na + nb)


def _svi_impl(key, st, sampler, shape, n_pad, n_real, prior, tau, kappa, ewma, nudge, uniform):
    i, j, x, p, cu, cv = sample_cells(key, sampler, shape, n_pad, uniform=uniform)
    w = (jnp.arange(n_pad) < n_real).astype(p.dtype)
    return _svi_update(st, Minibatch(i, j, x, p, cu, cv, w), prior, tau, kappa, ewma, nudge)


_svi_jit = jax.jit(_svi_impl, static_argnames=("shape", "n_pad", "nudge", "uniform"))


def _pad_size(S: int) -> int:
    """Minibatches are padded to a power of two (at least 256) so that few sizes are compiled."""
    return max(256, 1 << (int(S) - 1).bit_length())


def svi_step(key, st: SVIState, sampler: Sampler, data: Observations, hyper, *, S: int | None = None,
             tau: float = 1.0, kappa: float = 0.7, ewma: float = 0.1, nudge: bool = True) -> SVIState:
    """One SIBM minibatch (Algorithm 1 body): draw S cells, per-cell targets, averages (12), steps (11).

    Parameters
    ----------
    key : jax PRNG key (the cells)
    st : SVIState; sampler : `make_sampler` of ``data``; data : Observations of the ones
    hyper : SIBMHyper-like
    S : minibatch size (default ``st.S``); padded to a power of two (padding has weight 0)
    tau, kappa : Robbins-Monro rho = (tau + n)^(-kappa), n the number of earlier updates of that row,
        column or z; kappa in (0.5, 1]
    ewma : weight of the newest minibatch in the moving averages of eq. (13)
    nudge : apply Algorithm 1's temporary in-cell steps (10) before the next block's target

    Returns the new SVIState (S unchanged: see `auto_minibatch_size` / `fit_svi`). Cost O(S K^2).
    """
    check_robbins_monro(tau, kappa)  # the seed's tau is the schedule's tau0
    S = int(st.S) if S is None else int(S)
    if S < 1:
        raise ValueError(f"S must be >= 1, got {S}")
    prior = _prior(hyper, st.params.u_h.dtype)
    dt = st.params.u_h.dtype
    return _svi_jit(key, st, sampler, data.shape, _pad_size(S), jnp.asarray(S), prior,
                    jnp.asarray(tau, dt), jnp.asarray(kappa, dt), jnp.asarray(ewma, dt), bool(nudge),
                    int(sampler.code) == 0)


def _svi_block_impl(k_run, st, sampler, shape, n_pad, length, prior, tau, kappa, ewma, nudge, uniform, auto,
                    n_active, cells_left, S_min, S_max, theta_delta):
    """Up to ``length`` minibatches (static) under one `lax.scan`, exactly as `fit_svi`'s former Python loop
    ran them: per minibatch ``k_run, k = split(k_run)``, `_svi_impl` with S = st.S cells padded to ``n_pad``,
    then (``auto``) S <- clip(round(eq. 13), S_min, S_max) (S_min where eq. 13 is not finite).

    A minibatch runs only while fewer than ``n_active`` have run in this block, fewer than ``cells_left``
    cells have been drawn in it, and its S pads to ``n_pad`` (the draws of a minibatch depend on its padded
    size, so a block stops where eq. 13 moves S to another power of two and the host starts the next block
    with the new padding). Skipped steps leave key and state untouched (`lax.cond`).

    Returns (k_run, st, sizes (length,) int32: S of each minibatch run, 0 for the skipped ones).
    """
    def body(carry, _):
        k_run, st, n_done, cells, stopped = carry
        size = st.S.astype(jnp.int32)
        fits = (size <= n_pad) & ((n_pad == 256) | (size > n_pad // 2))
        go = ~stopped & (n_done < n_active) & (cells < cells_left) & fits

        def run(c):
            k_run, st = c
            k_run, k = jax.random.split(k_run)
            st = _svi_impl(k, st, sampler, shape, n_pad, size, prior, tau, kappa, ewma, nudge, uniform)
            if auto:
                s_new = auto_minibatch_size(st, sampler, theta_delta)
                s_new = jnp.where(jnp.isfinite(s_new), jnp.clip(jnp.round(s_new), S_min, S_max), S_min)
                st = st._replace(S=s_new.astype(st.S.dtype))
            return k_run, st

        k_run, st = jax.lax.cond(go, run, lambda c: c, (k_run, st))
        step = go.astype(jnp.int32)
        return (k_run, st, n_done + step, cells + step * size, ~go), size * step

    init = (k_run, st, jnp.int32(0), jnp.int32(0), jnp.asarray(False))
    (k_run, st, _, _, _), sizes = jax.lax.scan(body, init, None, length=length)
    return k_run, st, sizes


_svi_block_jit = jax.jit(_svi_block_impl, static_argnames=("shape", "n_pad", "length", "nudge", "uniform", "auto"))


def svi_scan(key, st: SVIState, sampler: Sampler, data: Observations, hyper, n_steps: int, *,
             scan_block: int = 256, tau: float = 1.0, kappa: float = 0.7, ewma: float = 0.1,
             nudge: bool = True) -> tuple[jax.Array, SVIState]:
    """``n_steps`` minibatches of fixed S = ``st.S`` cells, ``scan_block`` per jitted `lax.scan` call.

    The same as ``for _ in range(n_steps): key, k = jax.random.split(key); st = svi_step(k, st, ...)``
    (same cells, same updates; no host round trip inside a block). Returns (key after the splits, st).
    """
    check_robbins_monro(tau, kappa)
    if isinstance(n_steps, bool) or int(n_steps) != n_steps or n_steps < 0:
        raise ValueError(f"n_steps must be an integer >= 0, got {n_steps!r}")
    if isinstance(scan_block, bool) or int(scan_block) != scan_block or scan_block < 1:
        raise ValueError(f"scan_block must be a positive integer, got {scan_block!r}")
    S = int(st.S)
    if S < 1:
        raise ValueError(f"S must be >= 1, got {S}")
    dt = st.params.u_h.dtype
    a = lambda v: jnp.asarray(v, dt)  # noqa: E731
    length = int(min(scan_block, max(n_steps, 1)))
    done = 0
    while done < n_steps:
        todo = min(length, n_steps - done)
        key, st, _ = _svi_block_jit(key, st, sampler, data.shape, _pad_size(S), length, _prior(hyper, dt), a(tau),
                                    a(kappa), a(ewma), bool(nudge), int(sampler.code) == 0, False, jnp.int32(todo),
                                    jnp.int32(1 << 30), a(S), a(S), a(1.0))
        done += todo
    return key, st


#: minibatches per `lax.scan` call of `fit_svi` (ML-100K at S = 1000: ~4 host round trips per epoch)
DEFAULT_SCAN_BLOCK = 256


# ---------------------------------------------------------------------------------------------
# MAP by stochastic gradient ascent


class MAPState(NamedTuple):
    """Point estimates U (I, K), V (J, K), z (); fixed columns as in SIBMState; RM counters."""

    U: jax.Array
    V: jax.Array
    z: jax.Array
    u_fixed: jax.Array
    v_fixed: jax.Array
    u_count: jax.Array
    v_count: jax.Array
    z_count: jax.Array


def map_init(key, data: Observations, hyper, D: int, *, init_mean_sd: float = 0.1, dtype=None) -> MAPState:
    """Initial MAP point: the means of `init`. Raises as `init`."""
    q = init(key, data, hyper, D, init_mean_sd=init_mean_sd, dtype=dtype)
    (ub, _), (vb, _), (zb, _) = moments(q)
    dt = ub.dtype
    return MAPState(ub, vb, zb, q.u_fixed, q.v_fixed, jnp.zeros(ub.shape[0], dt), jnp.zeros(vb.shape[0], dt),
                    jnp.zeros((), dt))


def log_joint(state: MAPState, data: Observations, hyper, *, chunk_cells: int = DEFAULT_CHUNK_CELLS) -> jax.Array:
    """log p(X, U, V, z) (eqs. 1-2) at a point, up to the Normal constants; chunked, O(I J K).

    state MAPState; data Observations of the ones (I, J); returns a scalar (jax-differentiable)."""
    return _log_joint_jit(state, data, _static_hyper(hyper), chunk_cells)


def _log_joint_impl(state, data, hyper, chunk_cells):
    prior = _prior(hyper, state.U.dtype)
    I, J = data.shape

    def chunk_sum(arrs, valid):
        (u,) = arrs
        a = u @ state.V.T + state.z
        return jnp.sum(jnp.where(valid[:, None], jax.nn.log_sigmoid(-a), 0.0))

    dense = jnp.sum(_map_row_chunks(chunk_sum, (state.U,), I, _chunk_rows(I, J, chunk_cells)))
    a_pos = jnp.sum(state.U[data.rows] * state.V[data.cols], axis=1) + state.z
    lp = lambda x, m, v, free: jnp.sum(jnp.where(free, -0.5 * (x - m) ** 2 / v, 0.0))  # noqa: E731
    return (dense + jnp.sum(a_pos)
            + lp(state.U, prior.u_bar0, prior.u_tilde0, state.u_fixed[None, :] == 0)
            + lp(state.V, prior.v_bar0, prior.v_tilde0, state.v_fixed[None, :] == 0)
            + lp(state.z, prior.z_bar0, prior.z_tilde0, True))


def map_cell_gradients(st: MAPState, prior: _Prior, i, j, x, c_u, c_v, c_z):
    """Noisy gradients and curvature bounds of the MAP objective for cells (i, j) (arrays (n,)).

    The noisy objective is (1/c) log p(x_ij | u_i, v_j, z) + log p(u_i) + log p(v_j) + log p(z) with
    c = p(j|i) for u_i, p(i|j) for v_j, p(i, j) for z (as eq. 9), so that E_{j|i}[g_u] is the gradient
    of log p(X, U, V, z) in u_i (and likewise for v_j, z). Curvature bounds use sigma' <= 1/4
    (Boehning). Returns (g_u (n, K), h_u (n, K), g_v, h_v (n, K), g_z (n,), h_z (n,)); fixed columns
    get zero gradient. (`map_step` uses the gradients only; its preconditioner is `map_curvature_bound`.)
    """
    u, v = st.U[i], st.V[j]
    a = jnp.sum(u * v, axis=1) + st.z
    g = x - jax.nn.sigmoid(a)
    cu, cv, cz = c_u[:, None], c_v[:, None], c_z
    free_u = (st.u_fixed == 0)[None, :]
    free_v = (st.v_fixed == 0)[None, :]
    gu = jnp.where(free_u, g[:, None] * v / cu - (u - prior.u_bar0) / prior.u_tilde0, 0.0)
    hu = 0.25 * v * v / cu + 1.0 / prior.u_tilde0
    gv = jnp.where(free_v, g[:, None] * u / cv - (v - prior.v_bar0) / prior.v_tilde0, 0.0)
    hv = 0.25 * u * u / cv + 1.0 / prior.v_tilde0
    gz = g / cz - (st.z - prior.z_bar0) / prior.z_tilde0
    hz = 0.25 / cz + 1.0 / prior.z_tilde0
    return gu, hu, gv, hv, gz, hz


_log_joint_jit = jax.jit(_log_joint_impl, static_argnames=("hyper", "chunk_cells"))


def map_curvature_bound(B, free, prior_var):
    """Boehning bound of the negative Hessian of log p(X, U, V, z) in one row u_i (or one column v_j).

    B (J, K) the other side's factors (V for a row of U; U for a column of V); free (K,) bool, the
    free columns of the side being updated; prior_var () its prior variance. With sigma' <= 1/4,
    -d^2/du_i^2 log p = sum_j sigma'(a_ij) v_j v_j^T + I / prior_var <= (1/4) B^T B + I / prior_var
    (Boehning and Lindsay 1988; our choice for the seed's unpublished MAP baseline, seed 002 sec. 4.2),
    the same (K, K) matrix for every row. Returns A (K, K): that bound on the free block, the identity
    on fixed columns (so a solve leaves them unchanged). O(J K^2).
    """
    K = B.shape[1]
    A = 0.25 * (B.T @ B) + jnp.eye(K, dtype=B.dtype) / prior_var
    ff = free[:, None] & free[None, :]
    return jnp.where(ff, A, 0.0) + jnp.diag(jnp.where(free, 0.0, 1.0).astype(B.dtype))


def _map_update(st: MAPState, batch: Minibatch, prior: _Prior, tau, kappa):
    """Blocks z, then V, then U (each on the same cells, gradients at the current point): the
    averaged rescaled gradient of each block times the inverse of its Boehning bound, Robbins-Monro
    steps. With rho = 1 and the exact gradient each block step maximizes a quadratic minorizer of the
    log joint (an MM step, monotone); the noisy gradient is unbiased and the preconditioner is
    deterministic, so the expected step is rho times that MM step."""
    I, J = st.U.shape[0], st.V.shape[0]
    w = batch.weight
    free_u, free_v = st.u_fixed == 0, st.v_fixed == 0
    grads = lambda s: map_cell_gradients(s, prior, batch.i, batch.j, batch.x, batch.p_j_given_i,  # noqa: E731
                                         batch.p_i_given_j, batch.p_ij)
    # z: d^2/dz^2 bound (1/4) I J + 1 / z_tilde0
    gz = grads(st)[4]
    hz = 0.25 * I * J + 1.0 / prior.z_tilde0
    st = st._replace(z=st.z + _rm(st.z_count, tau, kappa) * (jnp.sum(w * gz) / jnp.sum(w)) / hz)
    # V (all columns at once: given U and z they are independent blocks)
    gv = grads(st)[2]
    nv, gv_avg, _ = _segment_avg(gv, batch.j, w, J)
    dv = jnp.linalg.solve(map_curvature_bound(st.U, free_v, prior.v_tilde0), gv_avg.T).T
    rv = _rm(st.v_count, tau, kappa)[:, None]
    st = st._replace(V=jnp.where((nv > 0)[:, None] & free_v[None, :], st.V + rv * dv, st.V))
    # U
    gu = grads(st)[0]
    nu, gu_avg, _ = _segment_avg(gu, batch.i, w, I)
    du = jnp.linalg.solve(map_curvature_bound(st.V, free_u, prior.u_tilde0), gu_avg.T).T
    ru = _rm(st.u_count, tau, kappa)[:, None]
    st = st._replace(U=jnp.where((nu > 0)[:, None] & free_u[None, :], st.U + ru * du, st.U))
    return st._replace(u_count=st.u_count + (nu > 0), v_count=st.v_count + (nv > 0), z_count=st.z_count + 1.0)


def _map_impl(key, st, sampler, shape, n_pad, n_real, prior, tau, kappa, uniform):
    i, j, x, p, cu, cv = sample_cells(key, sampler, shape, n_pad, uniform=uniform)
    w = (jnp.arange(n_pad) < n_real).astype(p.dtype)
    return _map_update(st, Minibatch(i, j, x, p, cu, cv, w), prior, tau, kappa)


_map_jit = jax.jit(_map_impl, static_argnames=("shape", "n_pad", "uniform"))


def map_step(key, st: MAPState, sampler: Sampler, data: Observations, hyper, *, S: int = 1000,
             tau: float = 1.0, kappa: float = 0.7) -> MAPState:
    """One stochastic-gradient-ascent minibatch on log p(U, V, z | X) (the seed's "MAP" baseline).

    Blocks z, V, U in turn, on the same S cells: each row / column moves by rho * A^-1 g, g the
    per-row (column) average of the gradients of the noisy objective (1/c) log p(x_ij | .) + log priors
    with c as in eq. (9) (unbiased for the full gradient), A = `map_curvature_bound` (deterministic);
    rho = (tau + n)^(-kappa) per row, column and z (n: its updates so far).
    Returns the new MAPState. Cost O(S K + (I + J) K^2). Raises ValueError (tau, kappa, S).
    """
    check_robbins_monro(tau, kappa)
    if int(S) < 1:
        raise ValueError(f"S must be >= 1, got {S}")
    prior = _prior(hyper, st.U.dtype)
    dt = st.U.dtype
    return _map_jit(key, st, sampler, data.shape, _pad_size(S), jnp.asarray(int(S)), prior,
                    jnp.asarray(tau, dt), jnp.asarray(kappa, dt), int(sampler.code) == 0)


# ---------------------------------------------------------------------------------------------
# prediction


def _check_users(users, I):
    users = np.asarray(users)
    if users.ndim != 1 or users.size == 0:
        raise ValueError("users must be a non-empty 1-D array of row indices")
    if not np.issubdtype(users.dtype, np.integer):
        raise ValueError(f"users must be integers, got dtype {users.dtype}")
    if users.min() < 0 or users.max() >= I:
        raise ValueError(f"users: row index out of range 0..{I - 1}")
    return jnp.asarray(users, jnp.int32)


def score_users(state, users, *, kind: str = "mean") -> np.ndarray:
    """Scores of every item for the given users, for ranking: (len(users), J) float numpy array.

    ``state``: SIBMState (or SVIState) or MAPState. ``kind``: "mean" gives E_q[u_i . v_j] + E_q[z]
    (MAP: u_i . v_j + z); "probability" gives MacKay's p(x_ij = 1 | X) of eq. (5) (MAP: sigma).
    Raises ValueError for bad users or kind.
    """
    if kind not in ("mean", "probability"):
        raise ValueError(f"kind must be 'mean' or 'probability', got {kind!r}")
    if isinstance(state, SVIState):
        state = state.params
    if isinstance(state, MAPState):
        u = _check_users(users, state.U.shape[0])
        a = state.U[u] @ state.V.T + state.z
        return np.asarray(a if kind == "mean" else jax.nn.sigmoid(a))
    u = _check_users(users, state.u_prec.shape[0])
    (ub, ut), (vb, vt), (zb, zt) = moments(state)
    mu, s2 = _cells(ub[u], ut[u], vb, vt, zb, zt)
    return np.asarray(mu if kind == "mean" else mackay_probit(mu, s2))


def predict_proba(state: SIBMState, rows, cols) -> jax.Array:
    """p(x_ij = 1 | X) by eq. (5) (MacKay) for given cells: (n,) float. rows, cols int (n,)."""
    mu, s2 = cell_moments(state, jnp.asarray(rows), jnp.asarray(cols))
    return mackay_probit(mu, s2)


# ---------------------------------------------------------------------------------------------
# drivers


class FitResult(NamedTuple):
    """What the drivers return: the final state, the ELBO trace (numpy; log joint for MAP), the
    InferenceData (variational parameters / point estimates plus the trace)."""

    state: object
    elbo: np.ndarray
    idata: object


def _check_fit(max_iter, tol):
    if isinstance(max_iter, bool) or int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if not (tol >= 0):
        raise ValueError(f"tol must be >= 0, got {tol!r}")


def _idata(arrays: dict, trace: dict, **attrs):
    dims = {"u_prec": ["row", "k"], "u_h": ["row", "k"], "v_prec": ["col", "k"], "v_h": ["col", "k"],
            "U": ["row", "k"], "V": ["col", "k"], "u_fixed": ["k"], "v_fixed": ["k"]}
    dims.update({k: ["iteration"] for k in trace})
    return arviz_io.to_inference_data(
        None, dims=dims, extra_groups={"variational_parameters": arrays, "vi_trace": trace},
        attrs={"model": "sibm", "source": "002_5408d341cb9fc544.txt", **attrs})


def fit(key, data, D: int, hyper, max_iter: int = 200, tol: float = 1e-7, progress: bool = True, *,
        init_state: SIBMState | None = None, chunk_cells: int = DEFAULT_CHUNK_CELLS, callback=None,
        **init_kwargs) -> FitResult:
    """Batch VB (the seed's "batch" baseline): `step` until |dL| / |L| < ``tol``.

    Parameters
    ----------
    key : jax PRNG key (initialization); data : binary matrix (anything `as_binary` takes)
    D : int >= 1; hyper : SIBMHyper-like; max_iter, tol : sweeps and stopping rule
    progress : tqdm bar; init_state : start here instead of `init`; init kwargs: see `init`
    callback : ``callback(t, state)`` after sweep t (0-based; each sweep touches all I J cells), e.g.
        held-out recall for `validation.implicit_eval.sibm_recall_curves`; return value ignored

    Returns FitResult(SIBMState, ELBO trace (n_iter + 1,) starting at the initial state, InferenceData
    with groups variational_parameters and vi_trace; attrs method, converged, n_iter, seconds).
    Raises ValueError (inputs), FloatingPointError (non-finite ELBO).
    """
    _check_fit(max_iter, tol)
    if not isinstance(data, Observations):
        data = as_binary(data)
    else:
        data = as_binary(data, dtype=np.asarray(data.values).dtype)
    state = init(key, data, hyper, D, **init_kwargs) if init_state is None else init_state
    data = jax.tree_util.tree_map(jnp.asarray, data)
    first = float(elbo(state, data, hyper, chunk_cells=chunk_cells))
    state = state._replace(last_elbo=jnp.asarray(first, state.u_h.dtype))
    run = vi_driver.run(lambda s, t: step(None, s, data, hyper, chunk_cells=chunk_cells), state, max_iter=max_iter,
                        tol=tol, progress=progress, desc=f"SIBM batch VB (D={D})", init_elbo=first,
                        callback=None if callback is None else (lambda t, s, info: callback(t, s)))
    state, trace, rels, converged, seconds = run.state, run.elbo, run.rel_change, run.converged, run.seconds
    vp = {f: np.asarray(v) for f, v in state._asdict().items() if f != "last_elbo"}
    idata = _idata(vp, {"elbo": np.asarray(trace), "rel_change": np.asarray(rels)}, method="sibm_batch_vb",
                   converged=int(converged), n_iter=len(trace) - 1, seconds=seconds, D=D)
    return FitResult(state, np.asarray(trace), idata)


def fit_svi(key, data, D: int, hyper, n_iter: int = 200, progress: bool = True, *, strategy: str = "biased",
            S: int | str = "auto", S_min: int | None = None, S_max: int = 1 << 20, theta_delta: float = 2.0,
            tau: float = 1.0, kappa: float = 0.7, ewma: float = 0.1, nudge: bool = True, elbo_every: int = 0,
            tol: float = 0.0, init_state: SIBMState | None = None, seed: int = 0, max_cells: int | None = None,
            callback=None, scan_block: int | None = None, **init_kwargs) -> FitResult:
    """SIBM (Algorithm 1): ``n_iter`` minibatches of S cells drawn by ``strategy``.

    Parameters
    ----------
    key : jax PRNG key (initialization and sampling)
    data : binary matrix (anything `as_binary` takes); D : int >= 1; hyper : SIBMHyper-like
    strategy : "uniform" | "balanced" | "biased" (sec. 2.3)
    S : int, or "auto" for eq. (13) with ``theta_delta`` (the seed fixes theta delta = 2), clipped to
        [S_min, S_max]; S_min default max(I, J) (the seed's choice); the first minibatch has S_min cells
    tau, kappa, ewma, nudge : see `svi_step`
    elbo_every : record the full ELBO (O(I J K)) every this many minibatches (0: only at the end)
    tol : with elbo_every > 0, stop when the relative change of the recorded ELBO falls below tol
    init_state : start from this q (SIBMState), or resume a previous run (its SVIState: Robbins-Monro
        counters and moving averages carry on; pass a new ``key`` for fresh draws)
    seed : unused (kept for a common signature with `fit`)
    max_cells : stop once this many cells have been sampled in all (the x-axis of seed 002 figs. 2-3,
        "number of entries observed"); None: only ``n_iter`` limits the run
    callback : ``callback(t, st, n_cells)`` after minibatch t (0-based) with the SVIState and the
        cells sampled so far (e.g. held-out recall for `validation.implicit_eval.sibm_recall_curves`);
        its return value is ignored. Called at block boundaries (see ``scan_block``): t is the last
        minibatch of the block
    scan_block : minibatches per jitted `lax.scan` call (default `DEFAULT_SCAN_BLOCK` = 256; 1 when a
        ``callback`` is given, so that it still sees every minibatch). The host only acts between
        blocks: ELBO records (blocks end at multiples of ``elbo_every``), the ``tol`` test, the
        ``max_cells`` budget (checked inside the block per minibatch, as before), callbacks, progress bar.

    Execution. The minibatches run in blocks under one `lax.scan` (`_svi_block_impl`) with no host
    round trip per minibatch; the key stream, the cells drawn and the updates are the same as one
    `svi_step` per minibatch with ``k_run, k = jax.random.split(k_run)`` (the former Python loop;
    `tests/custom_inference/test_sibm.py` checks it). S = "auto" keeps this exactness without masking:
    the cells a minibatch draws depend on its padded size (`_pad_size`, a power of two), so padding every
    minibatch to the padded S_max would change the random stream; instead a block runs only while eq. (13)
    keeps S within the block's power of two, and the host starts the next block at the new padding (a
    few extra blocks while S settles).

    Returns FitResult(SVIState, ELBO trace at the recorded iterations, InferenceData with the
    variational parameters and vi_trace (elbo, iteration, S per minibatch)).
    Raises ValueError (inputs; max_cells < 1), FloatingPointError (non-finite ELBO).
    """
    del seed
    _check_fit(n_iter, tol)
    data = as_binary(data) if not isinstance(data, Observations) else as_binary(data, dtype=np.asarray(data.values).dtype)
    I, J = data.shape
    S_min = max(I, J) if S_min is None else int(S_min)
    auto = S == "auto"
    if max_cells is not None and (isinstance(max_cells, bool) or int(max_cells) != max_cells or max_cells < 1):
        raise ValueError(f"max_cells must be a positive integer or None, got {max_cells!r}")
    if not auto and (isinstance(S, bool) or int(S) != S or S < 1):
        raise ValueError(f"S must be a positive integer or 'auto', got {S!r}")
    k_init, k_run = jax.random.split(key)
    if isinstance(init_state, SVIState):  # resume: counters and moving averages carry on
        st = init_state if auto else init_state._replace(S=jnp.asarray(float(S), init_state.S.dtype))
        params = st.params
    else:
        params = init(k_init, data, hyper, D, **init_kwargs) if init_state is None else init_state
        st = svi_init(params, S_min if auto else int(S))
    sampler = make_sampler(data, strategy, dtype=np.asarray(params.u_h).dtype)
    data = jax.tree_util.tree_map(jnp.asarray, data)
    check_robbins_monro(tau, kappa)
    if scan_block is None:
        scan_block = 1 if callback is not None else DEFAULT_SCAN_BLOCK
    if isinstance(scan_block, bool) or int(scan_block) != scan_block or scan_block < 1:
        raise ValueError(f"scan_block must be a positive integer or None, got {scan_block!r}")
    if auto and S_min < 1:  # svi_step raised this before, at the first minibatch of size 0
        raise ValueError(f"S must be >= 1, got S_min={S_min}")
    length = int(min(scan_block, n_iter, elbo_every or n_iter))
    elbo_fn = functools.partial(elbo, hyper=hyper)
    dt = params.u_h.dtype
    prior = _prior(hyper, dt)
    a = lambda v: jnp.asarray(v, dt)  # noqa: E731
    consts = dict(prior=prior, tau=a(tau), kappa=a(kappa), ewma=a(ewma), S_min=a(S_min), S_max=a(S_max),
                  theta_delta=a(theta_delta))
    uniform = int(sampler.code) == 0
    trace, iters, sizes, converged, n_cells, t = [], [], [], False, 0, 0
    bar = tqdm(total=n_iter, desc=f"SIBM SVI ({strategy}, D={D})", disable=not progress, leave=False)
    start = time.perf_counter()
    while t < n_iter:
        stop_at = min(n_iter, t + length)
        if elbo_every:
            stop_at = min(stop_at, (t // elbo_every + 1) * elbo_every)
        size = int(st.S)  # one host read per block: the block's padding
        cells_left = (1 << 30) if max_cells is None else min(max_cells - n_cells, 1 << 30)
        k_run, st, ys = _svi_block_jit(k_run, st, sampler, data.shape, _pad_size(size), length, nudge=bool(nudge),
                                       uniform=uniform, auto=bool(auto), n_active=jnp.int32(stop_at - t),
                                       cells_left=jnp.int32(cells_left), **consts)
        ys = np.asarray(ys)
        ran = ys[ys > 0].tolist()
        if not ran:  # cannot happen (the block's first minibatch always fits); guards an endless loop
            raise RuntimeError("fit_svi: a block ran no minibatch")
        sizes += ran
        n_cells += int(np.sum(ran, dtype=np.int64))
        t += len(ran)
        bar.update(len(ran))
        if callback is not None:
            callback(t - 1, st, n_cells)
        done = max_cells is not None and n_cells >= max_cells
        record = (elbo_every and t % elbo_every == 0) or t == n_iter or done
        if record:
            value = float(elbo_fn(st.params, data))
            if not np.isfinite(value):
                bar.close()
                raise FloatingPointError(f"ELBO became {value} after minibatch {t}")
            rel = abs(value - trace[-1]) / abs(trace[-1]) if trace else np.inf
            trace.append(value), iters.append(t)
            bar.set_postfix(elbo=f"{value:.6g}", S=ran[-1])
            if tol > 0 and rel < tol:
                converged = True
                break
        if done:
            break
    bar.close()
    seconds = time.perf_counter() - start
    vp = {f: np.asarray(v) for f, v in st.params._asdict().items() if f != "last_elbo"}
    idata = _idata(vp, {"elbo": np.asarray(trace), "elbo_iteration": np.asarray(iters)}, method="sibm_svi",
                   strategy=strategy, auto_S=int(auto), converged=int(converged), n_iter=len(sizes),
                   n_cells=int(np.sum(sizes)), seconds=seconds, D=D, tau=tau, kappa=kappa)
    idata_sizes = np.asarray(sizes)
    idata.vi_trace.attrs["mean_S"] = float(idata_sizes.mean())
    st = st._replace(params=st.params._replace(last_elbo=jnp.asarray(trace[-1], st.params.u_h.dtype)))
    return FitResult(st, np.asarray(trace), idata)


def fit_map(key, data, D: int, hyper, n_iter: int = 200, progress: bool = True, *, strategy: str = "biased",
            S: int = 1000, tau: float = 1.0, kappa: float = 0.7, log_joint_every: int = 0, **init_kwargs) -> FitResult:
    """MAP by stochastic gradient ascent (the seed's "MAP" baseline): ``n_iter`` minibatches of S cells.

    Returns FitResult(MAPState, log joint at the recorded iterations (every ``log_joint_every``, and at
    the end), InferenceData with the point estimates).
    """
    _check_fit(n_iter, 0.0)
    data = as_binary(data) if not isinstance(data, Observations) else as_binary(data, dtype=np.asarray(data.values).dtype)
    k_init, k_run = jax.random.split(key)
    st = map_init(k_init, data, hyper, D, **init_kwargs)
    sampler = make_sampler(data, strategy, dtype=np.asarray(st.U).dtype)
    data = jax.tree_util.tree_map(jnp.asarray, data)
    lj = functools.partial(log_joint, hyper=hyper)
    trace = []
    bar = tqdm(total=n_iter, desc=f"SIBM MAP ({strategy}, D={D})", disable=not progress, leave=False)
    for t in range(n_iter):
        k_run, k = jax.random.split(k_run)
        st = map_step(k, st, sampler, data, hyper, S=S, tau=tau, kappa=kappa)
        bar.update(1)
        if (log_joint_every and (t + 1) % log_joint_every == 0) or t == n_iter - 1:
            trace.append(float(lj(st, data)))
    bar.close()
    arrays = {"U": np.asarray(st.U), "V": np.asarray(st.V), "z": np.asarray(st.z)}
    idata = _idata(arrays, {"log_joint": np.asarray(trace)}, method="sibm_map_sga", strategy=strategy, D=D)
    return FitResult(st, np.asarray(trace), idata)
