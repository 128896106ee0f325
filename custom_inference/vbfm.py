r"""VBFM (batch CAVI) and OVBFM (stochastic VI) for the factorization machine with flat priors.

Source: ``004_90693a0965f06816.txt`` ch. 4: model eqs. 4.1-4.4, mean-field family 4.8-4.11,
ELBO 4.12-4.18, updates 4.20-4.24 and Algorithm 3 (VBFM); stochastic VI 4.25-4.33 and
Algorithm 4 (OVBFM). Every update below is our own derivation; `validation.models.vbfm` checks
each against ``jax.grad`` of `elbo` and lists the printed equations that fail
(``validation.models.vbfm.ERRATA``).

Model (precisions, never variances, as second Normal parameter)::

    y_n ~ N(yhat_n, 1/alpha),  yhat_n = w0 + sum_l x_nl w_l + sum_{l<m} x_nl x_nm v_l . v_m
    w0 ~ N(0, 1/sigma_0),  w_l ~ N(0, 1/sigma_w[c_l]),  v_lk ~ N(0, 1/sigma_v[c_l, k])

q = q(w0) prod_l q(w_l) prod_lk q(v_lk), all univariate Gaussians, **stored as natural
parameters** (precision P and precision-times-mean h; mean h/P, variance 1/P). alpha is
either a point estimate (the thesis: "no hyperpriors", ``alpha_prior=None``) or has a
Gamma(a0, b0) prior and a Gamma variational factor (``alpha_prior=(a0, b0)``). In both
cases the state holds ``alpha_shape, alpha_rate`` and E[alpha] = shape / rate; in point mode
the "shape/rate" pair is just N/2 and half the expected squared error, E log alpha = log E alpha,
and there is no prior or entropy term. sigma_0, sigma_w (G,), sigma_v (G, K) are point
estimates (Algorithm 3 lines 33-42) living in the state.

Exact expected squared error. With m, s the means and variances under q, per row n and factor k
(a_l = x_nl v_lk independent, mean x m_lk, variance x^2 s_lk):

    S1_nk = sum_l x_nl mu_lk,  S2_nk = sum_l x_nl^2 s_lk,  S3_nk = sum_l x_nl^3 s_lk mu_lk
    E[yhat_n] = m0 + sum_l x_nl m_l + 1/2 sum_k (S1_nk^2 - sum_l x_nl^2 mu_lk^2)          (4.22)
    Var[yhat_n] = s0 + sum_l x_nl^2 s_l
                  + sum_k [ sum_l x_nl^2 s_lk (S1_nk - x_nl mu_lk)^2 + 1/2 (S2_nk^2 - sum_l x_nl^4 s_lk^2) ]
    E[(y_n - yhat_n)^2] = R_n^2 + T_n,  R_n = y_n - E[yhat_n],  T_n = Var[yhat_n].

Coordinate updates (expected complete conditionals, alpha -> E[alpha]). For v_lk write
yhat_n = b_n + v_lk h_n with h_n = x_nl sum_{m != l} x_nm v_mk; b_n and h_n share v_mk, so
E[(y - b) h] = (y - E b) E h - Cov(b, h) and, with A = S1_nk - x_nl mu_lk (= S1(i,k) of 4.23),

    P_lk = sigma_v[c_l, k] + E[alpha] sum_n x_nl^2 (A^2 + S2_nk - x_nl^2 s_lk)
    h_lk = E[alpha] sum_n x_nl [ A (R_n + x_nl mu_lk A) - (A (S2_nk - x_nl^2 s_lk) - (S3_nk - x_nl^3 s_lk mu_lk)) ]

The last bracket, Cov(b_n, h_n) = x_nl sum_{m != l} x_nm^2 s_mk (A - x_nm mu_mk), is missing from
the printed 4.21 / 4.24 / Algorithm 3 line 26 (it vanishes only for rows with at most two
active features, e.g. a pure user x item design). Biases: P_l = sigma_w[c_l] + E[alpha]
sum_n x_nl^2, h_l = E[alpha] sum_n x_nl (R_n + x_nl m_l); w0: P = sigma_0 + E[alpha] N,
h = E[alpha] sum_n (R_n + m0). alpha: point N / sum(R^2 + T) (Algorithm 3) or
Gamma(a0 + N/2, b0 + sum(R^2 + T)/2). Hyperparameters: sigma_0 = 1/(m0^2 + s0),
sigma_w[g] = n_g / sum_{l in g} (m_l^2 + s_l), sigma_v[g, k] = n_g / sum_{l in g} (mu_lk^2 + s_lk).

Caches (4.22-4.24): R (N,) is computed once per sweep in O(M K) (M nonzeros of X) and S1, S2,
S3 of factor k, (N,) each, when the loop over factors reaches k (v_.k has not changed since the
sweep began, and only factor k's own updates change them); both are updated incrementally after
each block: after new (mu', s') of v_lk, R_n -= x dmu A, S1 += x dmu, S2 += x^2 ds,
S3 += x^3 d(s mu); after w_l, R_n -= x dm. So the sweep holds O(N + M) row and nonzero arrays
besides the state, never an (N, K) or (M, K) one (`FactorCaches`; the (N, K) `Caches` are for
the checks). All features of one `FMDesign` block never share a row, so a block is updated at
once exactly (segment sums over the block's nonzeros). One sweep: w0, every w block, then for
k = 1..K every v block (so R always reflects the latest means), then alpha, then the
hyperparameters. Work O(M K + D K B) per sweep, never N x D.

OVBFM (Algorithm 4, as stochastic VI, Hoffman et al. 2013): a minibatch of rows gives a noisy
target natural parameter = prior part + (N / |batch|) x the batch's likelihood statistics, and
q moves there with step rho_t = (1 + t)^(-lam) in natural parameters. The batch and the full
data go through the same code (`_block_target` and `_sweep`): CAVI is scale 1, rho 1, all rows.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma

from . import base, vi_driver
from .fm_design import FMDesign
from .gamma import expected_gamma_logpdf, gamma_entropy
from .gaussian import normal_natural_to_moments
from .schedules import robbins_monro

__all__ = [
    "VBFMState",
    "VBFMInfo",
    "OVBFMInfo",
    "Caches",
    "Minibatch",
    "init",
    "step",
    "elbo",
    "moments",
    "compute_caches",
    "sweep_with_caches",
    "update_w0",
    "update_w_block",
    "update_v_block",
    "update_v_factor",
    "FactorCaches",
    "row_moments",
    "update_alpha",
    "update_hyper",
    "minibatch",
    "make_batches",
    "iter_batches",
    "svi_step",
    "fit",
    "fit_svi",
    "predict",
    "draws_from_q",
    "ALGORITHMS",
]

_LOG_2PI = math.log(2.0 * math.pi)


class VBFMState(NamedTuple):
    """Variational parameters (natural: precision P, precision x mean h) and point hyperparameters.

    A NamedTuple (a JAX pytree); every field float32 or float64, one dtype.

    Parameters
    ----------
    w0_prec, w0_h : jax.Array, shape ()
        q(w0) = N(w0_h / w0_prec, 1 / w0_prec).
    w_prec, w_h : jax.Array, shape (D,)
        q(w_l), the same way.
    v_prec, v_h : jax.Array, shape (D, K)
        q(v_lk), the same way.
    alpha_shape, alpha_rate : jax.Array, shape ()
        q(alpha) = Gamma(shape, rate), or the point E[alpha] = shape / rate (module docstring).
    alpha_prior_shape, alpha_prior_rate : jax.Array, shape ()
        Gamma prior (a0, b0) of alpha; (0, 0): alpha a point estimate.
    sigma_0 : jax.Array, shape ()
        Prior precision of w0 (point estimate).
    sigma_w : jax.Array, shape (G,)
        Prior precision of w_l by group (point estimate).
    sigma_v : jax.Array, shape (G, K)
        Prior precision of v_lk by group and factor (point estimate).
    last_elbo : jax.Array, shape ()
        ELBO (nats) after the previous step (nan before the first).

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.2-4.4 and 4.8-4.11 (priors, mean-field family);
    natural parameters and the Gamma q(alpha): project addition (module docstring).
    """

    w0_prec: jax.Array
    w0_h: jax.Array
    w_prec: jax.Array
    w_h: jax.Array
    v_prec: jax.Array
    v_h: jax.Array
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    alpha_prior_shape: jax.Array
    alpha_prior_rate: jax.Array
    sigma_0: jax.Array
    sigma_w: jax.Array
    sigma_v: jax.Array
    last_elbo: jax.Array


class VBFMInfo(NamedTuple):
    """Per-step diagnostics of `step` (of the new state).

    Parameters
    ----------
    elbo : jax.Array, shape (), the state's float dtype
        The ELBO (nats) of the state after the step.
    rel_change : jax.Array, shape (), same dtype
        |L_new - L_old| / |L_old| (inf at the first step, when ``last_elbo`` is nan).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    elbo: jax.Array
    rel_change: jax.Array


class Caches(NamedTuple):
    """Row caches of eqs. 4.22-4.24 (module docstring) over the n rows in use, for the checks.

    Parameters
    ----------
    R : jax.Array, shape (n,), float
        R_n = y_n - E_q[yhat_n].
    S1, S2, S3 : jax.Array, shape (n, K), float, or None
        S1_nk = sum_l x_nl mu_lk, S2_nk = sum_l x_nl^2 s_lk, S3_nk = sum_l x_nl^3 s_lk mu_lk; None
        inside the sweep, which holds one factor's at a time (`FactorCaches`).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.22-4.24 (R_n, S1, S2; S3 for the corrected update:
    module docstring).
    """

    R: jax.Array
    S1: jax.Array
    S2: jax.Array
    S3: jax.Array


class Minibatch(NamedTuple):
    """A padded minibatch of rows for OVBFM (built by `minibatch`).

    nb rows (padded), cap nonzeros (padded).

    Parameters
    ----------
    row_ids : jax.Array, shape (nb,), int32
        Global row index (padding: 0).
    row_w : jax.Array, shape (nb,), float
        1 for real rows, 0 for padding.
    y : jax.Array, shape (nb,), float
        Responses (0 for padding).
    nz_rows : jax.Array, shape (cap,), int32
        Local row (0..nb-1) of each nonzero.
    nz_cols : jax.Array, shape (cap,), int32
        Feature of each nonzero.
    nz_x : jax.Array, shape (cap,), float
        x_nl (0 on padding).
    scale : jax.Array, shape (), float
        N / number of real rows (the likelihood rescaling of stochastic VI).

    Raises
    ------
    None of its own (a NamedTuple; `minibatch` checks).

    Source: project addition (the minibatches of ``004_90693a0965f06816.txt`` Algorithm 4).
    """

    row_ids: jax.Array
    row_w: jax.Array
    y: jax.Array
    nz_rows: jax.Array
    nz_cols: jax.Array
    nz_x: jax.Array
    scale: jax.Array


class OVBFMInfo(NamedTuple):
    """Diagnostics of one OVBFM step (`svi_step`).

    The full-data ELBO costs a pass over all rows: `fit_svi` records it per epoch.

    Parameters
    ----------
    rho : jax.Array, shape (), the state's float dtype
        The step size used, (1 + t)^(-lam).
    scale : jax.Array, shape (), float
        The likelihood rescaling N / |batch|.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.27-4.28 (rho); project addition (the Info).
    """

    rho: jax.Array
    scale: jax.Array


# ---------------------------------------------------------------------------------------------
# helpers


def _hyper_arrays(hyper, G: int, K: int, dtype):
    for name in ("alpha", "sigma_0", "sigma_w", "sigma_v"):
        if not hasattr(hyper, name):
            raise ValueError(f"hyper has no field {name!r} (use ppl_models.fm.FMFlatHyper)")
    alpha = float(hyper.alpha)
    s0 = float(hyper.sigma_0)
    sw = np.asarray(hyper.sigma_w, dtype=np.float64)
    sv = np.asarray(hyper.sigma_v, dtype=np.float64)
    if sv.ndim == 1:
        sv = sv[:, None]
    try:
        sw = np.broadcast_to(sw, (G,))
        sv = np.broadcast_to(sv, (G, K))
    except ValueError as err:
        raise ValueError(f"hyper.sigma_w / hyper.sigma_v: cannot broadcast to ({G},) / ({G}, {K}): {err}") from None
    for name, val in (("alpha", np.asarray(alpha)), ("sigma_0", np.asarray(s0)), ("sigma_w", sw), ("sigma_v", sv)):
        if not np.all(np.isfinite(val)) or np.any(val <= 0):
            raise ValueError(f"hyper.{name} must be positive and finite, got {val}")
    return (jnp.asarray(alpha, dtype), jnp.asarray(s0, dtype), jnp.asarray(sw, dtype), jnp.asarray(sv, dtype))


def moments(state: VBFMState):
    """Means and variances of q.

    Parameters
    ----------
    state : VBFMState
        Natural parameters.

    Returns
    -------
    tuple of three (mean, variance) pairs of jax.Array, the state's dtype
        (m0, s0) shape (), (m, s) shape (D,), (mu, sv) shape (D, K).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.8-4.11 (the mean-field family; natural parameters:
    module docstring).
    """
    m0, s0 = normal_natural_to_moments(state.w0_prec, state.w0_h)
    m, s = normal_natural_to_moments(state.w_prec, state.w_h)
    mu, sv = normal_natural_to_moments(state.v_prec, state.v_h)
    return (m0, s0), (m, s), (mu, sv)


def _gamma_mode(state):
    return state.alpha_prior_shape > 0


def _alpha_expectations(state):
    """E[alpha] and E[log alpha] (point mode: log E[alpha])."""
    e = state.alpha_shape / state.alpha_rate
    elog = jnp.where(_gamma_mode(state), digamma(state.alpha_shape) - jnp.log(state.alpha_rate), jnp.log(e))
    return e, elog


def _segsum(x, idx, n):
    return jax.ops.segment_sum(x, idx, num_segments=n)


#: Nonzeros per chunk of the per-factor sums (`_factor_sums`, `_factor_moments`): their per-nonzero
#: terms exist for one chunk at a time (XLA materializes each segment sum's operand), so the
#: temporaries are O(chunk) instead of several (M,) arrays. Read when a function is traced.
NZ_CHUNK = 1 << 20


def _chunked_loop(fn, carry, arrays):
    """``carry = fn(carry, *chunk)`` over consecutive chunks of ``NZ_CHUNK`` entries of ``arrays`` (each
    (M,)): a loop over the full chunks (dynamic slices) and one static slice for the remainder."""
    M = arrays[0].shape[0]
    chunk = max(1, min(int(NZ_CHUNK), M))
    n_full = M // chunk

    def body(i, c):
        return fn(c, *(jax.lax.dynamic_slice_in_dim(a, i * chunk, chunk) for a in arrays))

    if n_full > 1:
        carry = jax.lax.fori_loop(0, n_full, body, carry)
    elif n_full == 1:
        carry = fn(carry, *(a[:chunk] for a in arrays))
    if M % chunk:
        carry = fn(carry, *(a[n_full * chunk:] for a in arrays))
    return carry


def _chunked_sum(fn, init, arrays):
    """The sum over chunks (`_chunked_loop`) of ``fn(*chunk)``, a pytree like ``init``."""
    return _chunked_loop(lambda acc, *part: jax.tree_util.tree_map(jnp.add, acc, fn(*part)), init, arrays)


def _factor_sums(mu_k, s_k, rows, cols, x, n_rows: int):
    """S1, S2, S3 (n_rows,) of one factor k from its means ``mu_k`` and variances ``s_k`` (D,), O(M)."""
    def part(r, c, xx):
        ml, sl = mu_k[c], s_k[c]
        return _segsum(xx * ml, r, n_rows), _segsum(xx**2 * sl, r, n_rows), _segsum(xx**3 * sl * ml, r, n_rows)

    zeros = jnp.zeros(n_rows, jnp.result_type(mu_k.dtype, x.dtype))
    return _chunked_sum(part, (zeros, zeros, zeros), (rows, cols, x))


def _factor_moments(mu_k, s_k, rows, cols, x, n_rows: int, variance: bool):
    """Factor k's part of E[yhat_n] and (``variance``) of Var[yhat_n] (module docstring), each (n_rows,)."""
    def first(r, c, xx):
        ml, sl = mu_k[c], s_k[c]
        return _segsum(xx * ml, r, n_rows), _segsum(xx**2 * ml**2, r, n_rows), _segsum(xx**2 * sl, r, n_rows)

    zeros = jnp.zeros(n_rows, jnp.result_type(mu_k.dtype, x.dtype))
    S1, Q, S2 = _chunked_sum(first, (zeros, zeros, zeros), (rows, cols, x))
    mean = 0.5 * (S1**2 - Q)
    if not variance:
        return mean, None

    def second(r, c, xx):
        ml, sl = mu_k[c], s_k[c]
        A = S1[r] - xx * ml
        return _segsum(xx**2 * sl * A**2, r, n_rows), _segsum(xx**4 * sl**2, r, n_rows)

    pair, quartic = _chunked_sum(second, (zeros, zeros), (rows, cols, x))
    return mean, pair + 0.5 * (S2**2 - quartic)


def row_moments(state: VBFMState, rows, cols, x, y, n_rows: int, *, variance: bool = True):
    """R_n = y_n - E_q[yhat_n] and T_n = Var_q[yhat_n] (module docstring), from scratch, one factor at a time.

    Work O(M K); memory O(M + n_rows) beside the state (a loop over the K factors: no (M, K) or
    (n_rows, K) array).

    Parameters
    ----------
    state : VBFMState
        q.
    rows, cols : jax.Array, shape (M,), int
        Row (0..n_rows-1) and feature of each nonzero.
    x : jax.Array, shape (M,), float
        x_nl (0 for padding).
    y : jax.Array, shape (n_rows,), float
        Responses.
    n_rows : int, static
        Number of rows.
    variance : bool, keyword-only
        Also compute T (default True).

    Returns
    -------
    R : jax.Array, shape (n_rows,), the state's dtype
        y_n - E_q[yhat_n].
    T : jax.Array, shape (n_rows,), or None
        Var_q[yhat_n]; None when ``variance`` is False.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eq. 4.22 (E[yhat]); T derived in the module docstring
    (corrects eqs. 4.13-4.15); the loop over factors is a project addition.
    """
    m0, s0 = normal_natural_to_moments(state.w0_prec, state.w0_h)
    m, s = normal_natural_to_moments(state.w_prec, state.w_h)
    precT, hT = state.v_prec.T, state.v_h.T  # factor-major: factor k is one contiguous row
    zeros = jnp.zeros(n_rows, jnp.result_type(hT.dtype, x.dtype))  # as the sums promote

    def over_k(k, acc):
        mu_k, s_k = normal_natural_to_moments(precT[k], hT[k])
        mean_k, var_k = _factor_moments(mu_k, s_k, rows, cols, x, n_rows, variance)
        return (acc[0] + mean_k, acc[1] + var_k if variance else None)

    pair_mean, pair_var = jax.lax.fori_loop(0, hT.shape[0], over_k, (zeros, zeros if variance else None))
    R = y - (m0 + _segsum(x * m[cols], rows, n_rows) + pair_mean)
    if not variance:
        return R, None
    return R, s0 + _segsum(x**2 * s[cols], rows, n_rows) + pair_var


def compute_caches(state: VBFMState, rows, cols, x, y, n_rows: int):
    """R, S1, S2, S3 (`Caches`) and T (n_rows,) from scratch, O(M K).

    rows, cols : int (M,); x : float (M,) (0 for padding); y : (n_rows,). T_n = Var_q[yhat_n]
    (module docstring), so E[(y_n - yhat_n)^2] = R_n^2 + T_n (eqs. 4.13-4.15, corrected).
    For the checks of the caches (`validation.models.vbfm`): the sweep itself never forms the
    (n_rows, K) caches (it holds one factor's at a time) and R, T come from `row_moments`.

    Parameters
    ----------
    state : VBFMState
        q.
    rows, cols : jax.Array, shape (M,), int
        Row and feature of each nonzero.
    x : jax.Array, shape (M,), float
        x_nl (0 for padding).
    y : jax.Array, shape (n_rows,), float
        Responses.
    n_rows : int, static
        N.

    Returns
    -------
    caches : Caches
        R (N,), S1, S2, S3 (N, K), the state's dtype.
    T : jax.Array, shape (N,)
        Var_q[yhat_n].

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.22-4.24 (caches); T derived in the module docstring
    (corrects eqs. 4.13-4.15).
    """
    R, T = row_moments(state, rows, cols, x, y, n_rows)
    _, _, (mu, sv) = moments(state)
    S1, S2, S3 = jax.vmap(lambda a, b: _factor_sums(a, b, rows, cols, x, n_rows), in_axes=1, out_axes=1)(mu, sv)
    return Caches(R, S1, S2, S3), T


# ---------------------------------------------------------------------------------------------
# the one target / blend rule shared by CAVI (scale 1, rho 1) and SVI (scale N/|batch|, rho_t)


def _block_target(prior_prec, stat_prec, stat_h, e_alpha, scale):
    """Target natural parameters of a Gaussian block: prior + scale * E[alpha] * likelihood statistics.

    CAVI: scale 1 over all rows (exact coordinate maximizer). SVI: scale N / |batch| over the batch
    (an unbiased estimate of the CAVI target, eq. 4.25 read as Hoffman et al.'s noisy natural parameter).
    """
    return prior_prec + scale * e_alpha * stat_prec, scale * e_alpha * stat_h


def _blend(old, target, rho, mask=None):
    new = (1.0 - rho) * old + rho * target
    return new if mask is None else jnp.where(mask, new, old)


def update_w0(state, caches, row_w, scale, rho):
    """Update q(w0) (Algorithm 3 lines 3-8 as natural parameters) and R. Returns (state, caches).

    Parameters
    ----------
    state : VBFMState
        q before the update.
    caches : Caches
        Over the n rows in use; only R (n,) is read and updated (S1, S2, S3 may be None).
    row_w : jax.Array, shape (n,), float, or None
        Row weights (0 for padding); None: all n rows count.
    scale : float or jax.Array, shape ()
        Likelihood rescaling (1 for CAVI, N / |batch| for SVI).
    rho : float or jax.Array, shape ()
        Step in natural parameters (1 for CAVI).

    Returns
    -------
    state : VBFMState
        With new ``w0_prec``, ``w0_h``.
    caches : Caches
        With R updated for the new mean of w0.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 lines 3-8 (Algorithm 4 with ``scale`` and
    ``rho``).
    """
    e_alpha, _ = _alpha_expectations(state)
    m_old = state.w0_h / state.w0_prec
    n_eff = caches.R.shape[0] if row_w is None else jnp.sum(row_w)
    r = caches.R + m_old
    stat_h = jnp.sum(r if row_w is None else row_w * r)
    P, h = _block_target(state.sigma_0, n_eff, stat_h, e_alpha, scale)
    P, h = _blend(state.w0_prec, P, rho), _blend(state.w0_h, h, rho)
    caches = caches._replace(R=caches.R - (h / P - m_old))
    return state._replace(w0_prec=P, w0_h=h), caches


def update_w_block(state, caches, nz, in_block, group, scale, rho):
    """Update q(w_l) for every feature of one block (Algorithm 3 lines 11-18) and R.

    Parameters
    ----------
    state : VBFMState
        q before the update.
    caches : Caches
        Over the n rows in use; only R (n,) is read and updated.
    nz : tuple of jax.Array
        (rows int (M_b,), cols int (M_b,), x float (M_b,)) of the block's nonzeros (x = 0 on
        entries outside the block).
    in_block : jax.Array, shape (D,), bool
        The block's features (the others keep their q).
    group : jax.Array, shape (D,), int
        Group of each feature.
    scale, rho : float or jax.Array, shape ()
        As in `update_w0`.

    Returns
    -------
    state : VBFMState
        With new ``w_prec``, ``w_h`` for the block's features.
    caches : Caches
        With R updated.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 lines 11-18 (Algorithm 4 with ``scale`` and
    ``rho``).
    """
    rows, cols, x = nz
    D = state.w_prec.shape[0]
    e_alpha, _ = _alpha_expectations(state)
    m_old = state.w_h / state.w_prec
    stat_p = _segsum(x**2, cols, D)
    stat_h = _segsum(x * (caches.R[rows] + x * m_old[cols]), cols, D)
    P, h = _block_target(state.sigma_w[group], stat_p, stat_h, e_alpha, scale)
    P = _blend(state.w_prec, P, rho, in_block)
    h = _blend(state.w_h, h, rho, in_block)
    dm = h / P - m_old
    R = caches.R.at[rows].add(-x * dm[cols])
    return state._replace(w_prec=P, w_h=h), caches._replace(R=R)


class FactorCaches(NamedTuple):
    """The row caches of one factor k, as the sweep over k holds them.

    The sweep computes factor k's S caches from scratch when it reaches k (they change only in
    factor k's own updates), updates them through factor k's blocks and drops them: O(n) memory
    where the (n, K) caches took O(n K).

    Parameters
    ----------
    R : jax.Array, shape (n,), float
        R_n, shared by all factors.
    S1, S2, S3 : jax.Array, shape (n,), float
        Column k of `Caches`' (n, K) fields.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (layout only; the caches of ``004_90693a0965f06816.txt`` eqs. 4.22-4.24).
    """

    R: jax.Array
    S1: jax.Array
    S2: jax.Array
    S3: jax.Array


def update_v_factor(prec_k, h_k, fc: FactorCaches, prior_prec, e_alpha, nz, in_block, scale, rho):
    """Update q(v_lk) for every feature l of one block and one factor k (eqs. 4.20-4.24, corrected).

    See the module docstring for the derivation (the covariance term is the correction).

    Parameters
    ----------
    prec_k, h_k : jax.Array, shape (D,), float
        Column k of `VBFMState` ``v_prec``, ``v_h``.
    fc : FactorCaches
        R and factor k's S1, S2, S3, each (n,).
    prior_prec : jax.Array, shape (D,), float
        sigma_v[c_l, k].
    e_alpha : jax.Array, shape (), float
        E_q[alpha].
    nz : tuple of jax.Array
        (rows int (M_b,), cols int (M_b,), x float (M_b,)), x = 0 outside the block.
    in_block : jax.Array, shape (D,), bool
        The block's features.
    scale, rho : float or jax.Array, shape ()
        As in `update_w0`.

    Returns
    -------
    prec_k, h_k : jax.Array, shape (D,), the dtype of the inputs
        The new natural parameters of factor k.
    fc : FactorCaches
        R and factor k's S1, S2, S3 updated.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.20-4.24 and Algorithm 3 line 26 (corrected: module
    docstring).
    """
    D = prec_k.shape[0]
    mu_old, s_old = h_k / prec_k, 1.0 / prec_k

    def stats(rows, cols, x):  # the block's likelihood statistics, summed over chunks of nonzeros
        ml, sl = mu_old[cols], s_old[cols]
        A = fc.S1[rows] - x * ml
        S2m = fc.S2[rows] - x**2 * sl
        S3m = fc.S3[rows] - x**3 * sl * ml
        cov = A * S2m - S3m
        return _segsum(x**2 * (A**2 + S2m), cols, D), _segsum(x * (A * (fc.R[rows] + x * ml * A) - cov), cols, D)

    zeros = jnp.zeros(D, jnp.result_type(prec_k.dtype, nz[2].dtype))
    stat_p, stat_h = _chunked_sum(stats, (zeros, zeros), nz)
    P, h = _block_target(prior_prec, stat_p, stat_h, e_alpha, scale)
    P = _blend(prec_k, P, rho, in_block)
    h = _blend(h_k, h, rho, in_block)
    mu_new, s_new = h / P, 1.0 / P
    d_mu, d_s, d_sm = mu_new - mu_old, s_new - s_old, s_new * mu_new - s_old * mu_old

    def caches(c, rows, cols, x):
        # A reads S1 before this nonzero's own change: a row has at most one nonzero of the block (x = 0
        # on the others), so the chunks before did not touch it
        A = c.S1[rows] - x * mu_old[cols]
        dmu = d_mu[cols]
        return FactorCaches(c.R.at[rows].add(-x * dmu * A), c.S1.at[rows].add(x * dmu),
                            c.S2.at[rows].add(x**2 * d_s[cols]), c.S3.at[rows].add(x**3 * d_sm[cols]))

    return P, h, _chunked_loop(caches, fc, nz)


def update_v_block(state, caches, nz, in_block, group, k, scale, rho):
    """`update_v_factor` on the state's own layout: one block, one factor k. Returns (state, caches).

    The update-level checks call this; the sweep holds one factor's caches at a time instead
    (`FactorCaches`).

    Parameters
    ----------
    state : VBFMState
        q before the update (v_prec, v_h (D, K)).
    caches : Caches
        R (n,), S1, S2, S3 (n, K), all required.
    nz : tuple of jax.Array
        (rows, cols, x) of the block's nonzeros, as in `update_v_factor`.
    in_block : jax.Array, shape (D,), bool
        The block's features.
    group : jax.Array, shape (D,), int
        Group of each feature.
    k : int
        The factor, in 0..K-1.
    scale, rho : float or jax.Array, shape ()
        As in `update_w0`.

    Returns
    -------
    state : VBFMState
        With column k of ``v_prec``, ``v_h`` updated for the block's features.
    caches : Caches
        R and column k of S1, S2, S3 updated.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.20-4.24 and Algorithm 3 line 26 (corrected: module
    docstring).
    """
    e_alpha, _ = _alpha_expectations(state)
    fc = FactorCaches(caches.R, caches.S1[:, k], caches.S2[:, k], caches.S3[:, k])
    P, h, fc = update_v_factor(state.v_prec[:, k], state.v_h[:, k], fc, state.sigma_v[group, k], e_alpha, nz,
                               in_block, scale, rho)
    return (state._replace(v_prec=state.v_prec.at[:, k].set(P), v_h=state.v_h.at[:, k].set(h)),
            Caches(fc.R, caches.S1.at[:, k].set(fc.S1), caches.S2.at[:, k].set(fc.S2), caches.S3.at[:, k].set(fc.S3)))


def update_alpha(state, R, T, row_w, scale, rho):
    """q(alpha) (Gamma mode) or the point alpha (Algorithm 3 line 33): shape a0 + N/2, rate b0 + sum(R^2+T)/2.

    Point mode (prior (0, 0)): shape N/2, rate sum(R^2 + T)/2, so E[alpha] = N / sum(R^2 + T).

    Parameters
    ----------
    state : VBFMState
        q; its alpha prior selects the mode.
    R, T : jax.Array, shape (n,), float
        R_n and T_n of the state (`row_moments`).
    row_w : jax.Array, shape (n,), float, or None
        Row weights (0 for padding); None: all rows.
    scale, rho : float or jax.Array, shape ()
        As in `update_w0` (N counts ``scale`` x the weighted rows).

    Returns
    -------
    VBFMState
        With new ``alpha_shape``, ``alpha_rate`` (shape ()).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 line 33 (point alpha); the Gamma q(alpha) is
    a project addition.
    """
    sq = R**2 + T
    n_eff = R.shape[0] if row_w is None else jnp.sum(row_w)
    sq = jnp.sum(sq if row_w is None else row_w * sq)
    shape = state.alpha_prior_shape + 0.5 * scale * n_eff
    rate = state.alpha_prior_rate + 0.5 * scale * sq
    return state._replace(alpha_shape=_blend(state.alpha_shape, shape, rho), alpha_rate=_blend(state.alpha_rate, rate, rho))


def update_hyper(state, group, n_groups: int):
    """Point updates maximizing the ELBO (Algorithm 3 lines 34-42): sigma_0, sigma_w (G,), sigma_v (G, K).

    sigma_0 = 1/(m0^2 + s0), sigma_w[g] = n_g / sum_{l in g} (m_l^2 + s_l), sigma_v[g, k] = n_g /
    sum_{l in g} (mu_lk^2 + s_lk).

    Parameters
    ----------
    state : VBFMState
        q.
    group : jax.Array, shape (D,), int
        Group of each feature, in 0..G-1.
    n_groups : int, static
        G.

    Returns
    -------
    VBFMState
        With new ``sigma_0`` (), ``sigma_w`` (G,), ``sigma_v`` (G, K), the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 lines 34-42.
    """
    (m0, s0), (m, s), (mu, sv) = moments(state)
    counts = _segsum(jnp.ones_like(m), group, n_groups)
    sigma_w = counts / _segsum(m**2 + s, group, n_groups)
    sigma_v = counts[:, None] / _segsum(mu**2 + sv, group, n_groups)
    return state._replace(sigma_0=1.0 / (m0**2 + s0), sigma_w=sigma_w, sigma_v=sigma_v)


def _sweep(state, y, row_w, nz_all, nz_blocks, block_masks, group, n_rows, n_groups, scale, rho, hyper_update,
           keep_caches=False):
    """One sweep over all blocks, shared by CAVI and SVI.

    Returns (state, caches after the v updates, (R, T) of the new state or None). The caches are
    `Caches` with S1, S2, S3 (n, K) when ``keep_caches`` (the dense-twin check), else with S1, S2,
    S3 None: the loop over k holds one factor's `FactorCaches` at a time. (R, T) are computed for
    alpha (None when ``hyper_update`` is "none"); they do not depend on alpha or the prior
    precisions, so they are also those of the returned state (its ELBO reuses them).
    """
    rows, cols, x = nz_all
    R, _ = row_moments(state, rows, cols, x, y, n_rows, variance=False)
    caches = Caches(R, None, None, None)
    state, caches = update_w0(state, caches, row_w, scale, rho)
    for nz, mask in zip(nz_blocks, block_masks):
        state, caches = update_w_block(state, caches, nz, mask, group, scale, rho)

    e_alpha, _ = _alpha_expectations(state)  # alpha is not touched by the v updates
    sigma_vT = state.sigma_v.T  # (K, G)

    def over_k(k, carry):
        prec, h, R, kept = carry
        Pk, hk = prec[k], h[k]
        fc = FactorCaches(R, *_factor_sums(hk / Pk, 1.0 / Pk, rows, cols, x, n_rows))
        for nz, mask in zip(nz_blocks, block_masks):
            Pk, hk, fc = update_v_factor(Pk, hk, fc, sigma_vT[k][group], e_alpha, nz, mask, scale, rho)
        if keep_caches:
            kept = tuple(a.at[k].set(v) for a, v in zip(kept, (fc.S1, fc.S2, fc.S3)))
        return prec.at[k].set(Pk), h.at[k].set(hk), fc.R, kept

    K = state.v_prec.shape[1]
    kept = tuple(jnp.zeros((K, n_rows), R.dtype) for _ in range(3)) if keep_caches else None
    prec, h, R, kept = jax.lax.fori_loop(0, K, over_k, (state.v_prec.T, state.v_h.T, caches.R, kept))
    state = state._replace(v_prec=prec.T, v_h=h.T)
    v_caches = Caches(R, *(a.T for a in kept)) if keep_caches else Caches(R, None, None, None)
    fresh = None
    if hyper_update != "none":
        fresh = row_moments(state, rows, cols, x, y, n_rows)
        if hyper_update == "all":
            state = update_alpha(state, *fresh, row_w, scale, rho)
        else:  # "alpha_gamma": only a Gamma q(alpha) is updated
            new = update_alpha(state, *fresh, row_w, scale, rho)
            g = _gamma_mode(state)
            state = state._replace(alpha_shape=jnp.where(g, new.alpha_shape, state.alpha_shape),
                                   alpha_rate=jnp.where(g, new.alpha_rate, state.alpha_rate))
        if hyper_update == "all":
            state = update_hyper(state, group, n_groups)
    return state, v_caches, fresh


def _design_blocks(design: FMDesign):
    """Per-block (rows, cols, x) from the static ``block_ptr`` slices, and the (D,) masks."""
    nz_blocks, masks = [], []
    for b in range(design.n_blocks):
        idx = design.order[design.block_ptr[b]:design.block_ptr[b + 1]]
        nz_blocks.append((design.rows[idx], design.cols[idx], design.values[idx]))
        masks.append(design.block == b)
    return nz_blocks, masks


def _mode(update_hyper_flag: bool) -> str:
    return "all" if update_hyper_flag else "alpha_gamma"


def sweep_with_caches(state: VBFMState, design: FMDesign, *, update_hyper: bool = True):
    """One CAVI sweep, also returning the incrementally maintained caches (for the dense-twin check).

    The caches are those right after the last v block (before alpha and the hyperparameters).

    Parameters
    ----------
    state : VBFMState
        q before the sweep.
    design : FMDesign
        N rows, D features.
    update_hyper : bool, keyword-only
        As in `step` (default True).

    Returns
    -------
    state : VBFMState
        After the sweep.
    caches : Caches
        R (N,), S1, S2, S3 (N, K), the state's dtype.

    Raises
    ------
    None of its own (no value checks).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 (corrected, module docstring).
    """
    return _cavi_sweep(state, design, update_hyper, keep_caches=True)[:2]


def _cavi_sweep(state, design, update_hyper, keep_caches):
    nz_blocks, masks = _design_blocks(design)
    return _sweep(state, design.y, None, (design.rows, design.cols, design.values), nz_blocks, masks,
                  design.group, design.n_rows, design.n_groups, 1.0, 1.0, _mode(update_hyper), keep_caches)


# ---------------------------------------------------------------------------------------------
# ELBO


def elbo(params: VBFMState, design: FMDesign, hyper=None) -> jax.Array:
    """The ELBO (nats), eqs. 4.12-4.18 with the exact E_q[(y_n - yhat_n)^2] = R_n^2 + T_n.

    L = sum_n [ (E log alpha - log 2 pi) / 2 - E[alpha] (R_n^2 + T_n) / 2 ]
        + sum over w0, w_l, v_lk of [ 1/2 + 1/2 log(sigma s') - sigma/2 (m'^2 + s') ]     (4.16-4.18)
        + E log Gamma(alpha; a0, b0) + H[q(alpha)]     (Gamma mode only)

    Work O(M K).

    Parameters
    ----------
    params : VBFMState
        q and the point hyperparameters (differentiable in every field; ``last_elbo`` is ignored).
    design : FMDesign
        N rows.
    hyper : object, optional
        Unused (the current prior precisions live in ``params``); kept for the common signature.

    Returns
    -------
    jax.Array, shape (), the state's dtype
        The ELBO in nats.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.12-4.18, with the exact expected squared error
    (module docstring).
    """
    del hyper
    R, T = row_moments(params, design.rows, design.cols, design.values, design.y, design.n_rows)
    return _elbo_from_rows(params, R, T, design.group, design.n_rows)


def _elbo_from_rows(params, R, T, group, n):
    """`elbo` given R, T (n,) of ``params`` (`row_moments`)."""
    e_alpha, elog_alpha = _alpha_expectations(params)
    lik = 0.5 * n * (elog_alpha - _LOG_2PI) - 0.5 * e_alpha * jnp.sum(R**2 + T)
    (m0, s0), (m, s), (mu, sv) = moments(params)

    def gauss(prec, mean, var):
        return jnp.sum(0.5 + 0.5 * jnp.log(prec * var) - 0.5 * prec * (mean**2 + var))

    total = lik + gauss(params.sigma_0, m0, s0)
    total = total + gauss(params.sigma_w[group], m, s) + gauss(params.sigma_v[group], mu, sv)
    g = _gamma_mode(params)
    a0 = jnp.where(g, params.alpha_prior_shape, 1.0)
    b0 = jnp.where(g, params.alpha_prior_rate, 1.0)
    shape = jnp.where(g, params.alpha_shape, 1.0)
    rate = jnp.where(g, params.alpha_rate, 1.0)
    e_a = shape / rate
    elog_a = digamma(shape) - jnp.log(rate)
    alpha_terms = expected_gamma_logpdf(a0, jnp.log(b0), b0, elog_a, e_a) + gamma_entropy(shape, rate)
    return total + jnp.where(g, alpha_terms, 0.0)


# ---------------------------------------------------------------------------------------------
# init / step


def _check_k(K) -> int:
    if isinstance(K, bool) or int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    return int(K)


def init(key, design: FMDesign, K: int, hyper, *, alpha_prior=None, init_mean_sd: float = 0.1,
         init_var: float = 0.02, dtype=None) -> VBFMState:
    """Initial state (thesis sec. 4.4.3: random means, variances 0.02, hyperparameters from ``hyper``).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed (`base.as_key`).
    design : FMDesign
        N rows, D features, G groups.
    K : int >= 1
        Number of factors.
    hyper : ppl_models.fm.FMFlatHyper or object
        Fields alpha, sigma_0 (positive floats), sigma_w (scalar or (G,)), sigma_v (scalar, (G,) or
        (G, K)), all positive and finite.
    alpha_prior : tuple of two floats, keyword-only, optional
        None (default: alpha a point estimate, initial value hyper.alpha) or (a0, b0) > 0, a Gamma
        prior (shape, rate) with q(alpha) Gamma, initialized with mean hyper.alpha.
    init_mean_sd : float >= 0, keyword-only
        sd of the N(0, sd^2) initial means of w and v (default 0.1; the thesis uses 1; 0.1 keeps the
        initial interactions of long rows small). w0 starts at mean(y).
    init_var : float > 0, keyword-only
        Initial variance of every Gaussian factor (default and thesis: 0.02).
    dtype : numpy dtype, keyword-only, optional
        float32 or float64 (default that of ``design.values``, float32 when JAX's x64 mode is off).

    Returns
    -------
    VBFMState
        Shapes in its docstring, dtype ``dtype``; ``last_elbo`` nan.

    Raises
    ------
    ValueError
        K not an integer >= 1; ``hyper`` lacking a field, a precision not positive and finite or
        sigma_w / sigma_v not broadcastable to (G,) / (G, K); ``alpha_prior`` not two positive finite
        numbers; ``init_var`` <= 0 or ``init_mean_sd`` < 0; a ``dtype`` other than float32 / float64
        (`base.compute_dtype`).
    TypeError
        ``key`` neither a PRNG key nor an integer (`base.as_key`); K or a hyperparameter of a type
        ``int`` / ``float`` does not take.

    Source: ``004_90693a0965f06816.txt`` sec. 4.4.3 (initialization); natural parameters: project addition.
    """
    K = _check_k(K)
    key = base.as_key(key)
    if not (init_var > 0) or not (init_mean_sd >= 0):
        raise ValueError(f"init_var must be > 0 and init_mean_sd >= 0, got {init_var}, {init_mean_sd}")
    # default: the design's dtype as JAX holds it (float32 unless x64 is on), so no truncation warnings
    dtype = jnp.dtype(base.compute_dtype(dtype, jax.dtypes.canonicalize_dtype(design.values.dtype)))
    alpha, s0, sw, sv = _hyper_arrays(hyper, design.n_groups, K, dtype)
    if alpha_prior is None:
        a0 = b0 = 0.0
    else:
        a0, b0 = (float(v) for v in alpha_prior)
        if not (a0 > 0 and b0 > 0 and np.isfinite(a0) and np.isfinite(b0)):
            raise ValueError(f"alpha_prior must be (shape, rate) > 0, got {alpha_prior}")
    D, N = design.n_features, design.n_rows
    k1, k2 = jax.random.split(key)
    prec = jnp.asarray(1.0 / init_var, dtype)
    w_mean = init_mean_sd * jax.random.normal(k1, (D,), dtype=jnp.float32).astype(dtype)
    v_mean = init_mean_sd * jax.random.normal(k2, (D, K), dtype=jnp.float32).astype(dtype)
    shape = jnp.asarray(0.5 * N, dtype)
    return VBFMState(
        w0_prec=prec, w0_h=prec * jnp.mean(jnp.asarray(design.y, dtype)),
        w_prec=jnp.full((D,), prec), w_h=prec * w_mean,
        v_prec=jnp.full((D, K), prec), v_h=prec * v_mean,
        alpha_shape=shape, alpha_rate=shape / alpha,
        alpha_prior_shape=jnp.asarray(a0, dtype), alpha_prior_rate=jnp.asarray(b0, dtype),
        sigma_0=s0, sigma_w=sw, sigma_v=sv, last_elbo=jnp.asarray(jnp.nan, dtype),
    )


def _info(state, new_elbo):
    rel = jnp.abs(new_elbo - state.last_elbo) / jnp.abs(state.last_elbo)
    return VBFMInfo(new_elbo, jnp.where(jnp.isnan(rel), jnp.inf, rel))


def _cavi_step(state, design, update_hyper):
    new, _, (R, T) = _cavi_sweep(state, design, update_hyper, keep_caches=False)
    value = _elbo_from_rows(new, R, T, design.group, design.n_rows)  # R, T of `new` (`_sweep`)
    return new._replace(last_elbo=value), _info(state, value)


_step_all = jax.jit(lambda state, design: _cavi_step(state, design, True))
_step_fixed = jax.jit(lambda state, design: _cavi_step(state, design, False))


def step(key, state: VBFMState, design: FMDesign, hyper=None, *, update_hyper: bool = True):
    """One VBFM sweep (Algorithm 3, corrected): w0, w blocks, v blocks per k, alpha, hyperparameters.

    Each block update is the exact coordinate maximizer of `elbo`, so the ELBO never decreases.
    ``update_hyper=False`` keeps sigma_0, sigma_w, sigma_v and a point alpha fixed (a Gamma
    q(alpha) is still updated). ``key`` and ``hyper`` are unused (CAVI is deterministic and the
    hyperparameters live in the state).

    Parameters
    ----------
    key : object
        Unused (the protocol's signature).
    state : VBFMState
        q before the sweep.
    design : FMDesign
        N instances, D features (jitted: one compilation per shape).
    hyper : object, optional
        Unused.
    update_hyper : bool, keyword-only
        Update sigma_0, sigma_w, sigma_v and a point alpha (default True).

    Returns
    -------
    state : VBFMState
        After the sweep, ``last_elbo`` its ELBO.
    info : VBFMInfo
        ELBO of the new state (shape (), the state's dtype) and its relative change.

    Raises
    ------
    None of its own (jitted; no value checks).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 (corrected, module docstring).
    """
    del key, hyper
    return (_step_all if update_hyper else _step_fixed)(state, design)


# ---------------------------------------------------------------------------------------------
# OVBFM


def minibatch(design: FMDesign, row_ids, *, n_pad: int | None = None, nz_pad: int | None = None) -> Minibatch:
    """Gather rows of ``design`` into a padded `Minibatch` (host side).

    Parameters
    ----------
    design : FMDesign
        N rows, sorted by row (as `FMDesign.from_scipy` / ``from_ids`` build them).
    row_ids : array_like, shape (nb,), int
        The batch's rows, in 0..N-1.
    n_pad : int, keyword-only, optional
        Pad the rows to this number (>= nb; default nb), so that batches share one compiled program.
    nz_pad : int, keyword-only, optional
        Pad the nonzeros likewise (>= the batch's nonzeros; default their number).

    Returns
    -------
    Minibatch
        Device arrays, float dtype of ``design.values`` as JAX holds it; ``scale`` = N / nb.

    Raises
    ------
    ValueError
        An empty or not 1-D ``row_ids``, rows out of range, or pads smaller than the batch.

    Source: project addition (the minibatches of ``004_90693a0965f06816.txt`` Algorithm 4).
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)
    N = design.n_rows
    if row_ids.ndim != 1 or row_ids.size == 0:
        raise ValueError("batch: expected a non-empty 1-D array of row indices")
    if row_ids.min() < 0 or row_ids.max() >= N:
        raise ValueError(f"batch: row indices must be in 0..{N - 1}")
    return _gather_batch(_HostRows(design), row_ids, n_pad, nz_pad)


class _HostRows:
    """The design's arrays on the host (numpy views where they are numpy already) and its row
    pointer: row n owns nonzeros ptr[n]:ptr[n + 1] (the rows are sorted, `FMDesign.from_scipy`)."""

    def __init__(self, design: FMDesign):
        self.n_rows = design.n_rows
        self.cols = np.asarray(design.cols)
        self.values = np.asarray(design.values)
        self.y = np.asarray(design.y)
        self.ptr = np.searchsorted(np.asarray(design.rows), np.arange(design.n_rows + 1))


def _gather_batch(host: _HostRows, row_ids, n_pad, nz_pad) -> Minibatch:
    ptr = host.ptr
    lengths = ptr[row_ids + 1] - ptr[row_ids]
    total = int(lengths.sum())
    starts = np.repeat(ptr[row_ids], lengths)
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    idx = starts + offsets
    nb = row_ids.size
    n_pad = nb if n_pad is None else int(n_pad)
    nz_pad = total if nz_pad is None else int(nz_pad)
    if n_pad < nb or nz_pad < total:
        raise ValueError(f"batch: n_pad {n_pad} < {nb} rows or nz_pad {nz_pad} < {total} nonzeros")
    dtype = jax.dtypes.canonicalize_dtype(host.values.dtype)
    local = np.zeros(nz_pad, np.int32)
    local[:total] = np.repeat(np.arange(nb), lengths)
    cols = np.zeros(nz_pad, np.int32)
    cols[:total] = host.cols[idx]
    x = np.zeros(nz_pad, dtype)
    x[:total] = host.values[idx]
    rid = np.zeros(n_pad, np.int32)
    rid[:nb] = row_ids
    w = np.zeros(n_pad, dtype)
    w[:nb] = 1.0
    y = np.zeros(n_pad, dtype)
    y[:nb] = host.y[row_ids]
    return Minibatch(jnp.asarray(rid), jnp.asarray(w), jnp.asarray(y), jnp.asarray(local), jnp.asarray(cols),
                     jnp.asarray(x), jnp.asarray(host.n_rows / nb, dtype))


def iter_batches(seed_or_rng, design: FMDesign, n_batches: int):
    """`make_batches` one batch at a time: the partition is drawn now, each padded `Minibatch` is
    gathered when the iteration reaches it (so an epoch holds one batch, not ``n_batches``).

    Parameters
    ----------
    seed_or_rng : int or numpy.random.Generator
        One permutation is drawn from it at the call, as `make_batches` draws it.
    design : FMDesign
        N rows (numpy arrays are used in place; device arrays are copied to the host once).
    n_batches : int
        B, in 1..N.

    Returns
    -------
    iterator of Minibatch
        B batches, equal to ``make_batches``'s list (padded as there).

    Raises
    ------
    ValueError
        ``n_batches`` not an integer in 1..N.

    Source: ``004_90693a0965f06816.txt`` Algorithm 4 (random partition of the rows into batches);
    padding and the lazy gather: project addition.
    """
    if int(n_batches) != n_batches or n_batches < 1 or n_batches > design.n_rows:
        raise ValueError(f"n_batches must be an integer in 1..{design.n_rows}, got {n_batches!r}")
    rng = np.random.default_rng(seed_or_rng)
    perm = rng.permutation(design.n_rows)
    parts = np.array_split(perm, int(n_batches))
    host = _HostRows(design)
    counts = np.diff(host.ptr)
    nz_max = max(int(counts[p].sum()) for p in parts)
    nz_pad = nz_max if n_batches == 1 else int(-(-nz_max // 256) * 256)
    n_pad = max(p.size for p in parts)
    return (_gather_batch(host, np.sort(p), n_pad, nz_pad) for p in parts)


def make_batches(seed_or_rng, design: FMDesign, n_batches: int) -> list[Minibatch]:
    """Partition the rows at random into ``n_batches`` batches of (almost) equal size (Algorithm 4).

    Pads rows to ceil(N / B) and nonzeros to the largest batch, rounded up to a multiple of 256 when
    B > 1.
    (`fit_svi` iterates `iter_batches`, the same batches built one at a time.)

    Parameters
    ----------
    seed_or_rng : int or numpy.random.Generator
        The source of the random partition.
    design : FMDesign
        N rows.
    n_batches : int
        B, in 1..N.

    Returns
    -------
    list of Minibatch
        B batches (padded arrays as in `minibatch`).

    Raises
    ------
    ValueError
        ``n_batches`` not an integer in 1..N.

    Source: ``004_90693a0965f06816.txt`` Algorithm 4 (random partition of the rows into batches);
    padding: project addition.
    """
    return list(iter_batches(seed_or_rng, design, n_batches))


def _svi_update(state, batch: Minibatch, block, group, n_blocks: int, n_groups: int, rho, hyper_update: str):
    x_all = batch.nz_x
    nz_block = block[batch.nz_cols]
    nz_blocks, masks = [], []
    for b in range(n_blocks):
        nz_blocks.append((batch.nz_rows, batch.nz_cols, jnp.where(nz_block == b, x_all, 0.0)))
        masks.append(block == b)
    new, _, _ = _sweep(state, batch.y, batch.row_w, (batch.nz_rows, batch.nz_cols, x_all), nz_blocks, masks,
                    group, batch.y.shape[0], n_groups, batch.scale, rho, hyper_update)
    return new


_svi_jit = jax.jit(_svi_update, static_argnames=("n_blocks", "n_groups", "hyper_update"))


def svi_step(key, state: VBFMState, design: FMDesign, hyper=None, batch=None, t=0, *, lam: float = 0.6,
             update_hyper: bool = True, n_batches: int = 10) -> tuple[VBFMState, OVBFMInfo]:
    """One OVBFM update on a minibatch (Algorithm 4 as stochastic VI; module docstring).

    Parameters
    ----------
    key : jax.Array or int
        PRNG key or int seed; used only when ``batch`` is None (a random batch of about
        N / ``n_batches`` rows, drawn on the host from `vi_driver.host_seed` (key)).
    state : VBFMState
        q before the update.
    design : FMDesign
        The full data (block structure and groups).
    hyper : object, optional
        Unused (hyperparameters live in the state).
    batch : Minibatch or array_like of int, optional
        A `Minibatch`, an int array of row indices, or None (random rows, see ``key``).
    t : int >= 0
        The update counter; step rho_t = (1 + t)^(-lam) (eqs. 4.27-4.28; rho_0 = 1), i.e.
        `custom_inference.schedules.robbins_monro` with tau0 = 1, kappa = lam.
    lam : float, keyword-only
        Forgetting rate in (0.5, 1] for Robbins-Monro convergence (default 0.6; the thesis uses 0.5,
        at the boundary where sum rho_t^2 diverges); lam = 0 gives rho = 1.
    update_hyper : bool, keyword-only
        Also update alpha (point) and sigma_0, sigma_w, sigma_v (exact point updates given q after
        the batch; a Gamma q(alpha) is always updated with rho_t). Default True.
    n_batches : int, keyword-only
        With ``batch`` None: the random batch has max(1, N // n_batches) rows (default 10).

    Returns
    -------
    state : VBFMState
        After the update (``last_elbo`` unchanged: the ELBO needs a pass over all data, see
        `fit_svi`, which records it per epoch).
    info : OVBFMInfo
        rho and scale.

    Raises
    ------
    ValueError
        t < 0 or lam < 0 or not finite (`robbins_monro`); a bad batch (`minibatch`); with ``batch``
        None, ``n_batches`` not an integer >= 1.
    TypeError
        With ``batch`` None, a ``key`` neither a PRNG key nor an integer (`vi_driver.host_seed`).

    Source: ``004_90693a0965f06816.txt`` eqs. 4.25-4.33 and Algorithm 4 (as stochastic VI, module
    docstring).
    """
    del hyper
    if batch is None:
        if isinstance(n_batches, bool) or int(n_batches) != n_batches or n_batches < 1:
            raise ValueError(f"n_batches must be an integer >= 1, got {n_batches!r}")
        rng = np.random.default_rng(vi_driver.host_seed(key))
        size = max(1, design.n_rows // int(n_batches))
        batch = np.sort(rng.choice(design.n_rows, size=size, replace=False))
    if not isinstance(batch, Minibatch):
        batch = minibatch(design, batch)
    rho = jnp.asarray(robbins_monro(t, 1.0, lam), state.w0_prec.dtype)  # (1 + t)^(-lam), eqs. 4.27-4.28
    new = _svi_jit(state, batch, design.block, design.group, design.n_blocks, design.n_groups, rho,
                   _mode(update_hyper))
    return new, OVBFMInfo(rho, batch.scale)


# ---------------------------------------------------------------------------------------------
# prediction and drivers


@jax.jit
def _predict(state, rows, cols, x, n_rows_dummy_y):
    R, T = row_moments(state, rows, cols, x, n_rows_dummy_y, n_rows_dummy_y.shape[0])
    mean = n_rows_dummy_y - R
    return mean, T


def predict(state: VBFMState, design_new: FMDesign, *, noise: bool = True):
    """Posterior predictive mean and sd for the rows of ``design_new`` (its y is ignored).

    mean_n = E_q[yhat_n] (eq. 4.22); sd_n = sqrt(Var_q[yhat_n] + E_q[1/alpha]) with ``noise``
    (E[1/alpha] = rate / (shape - 1) for a Gamma q, 1/alpha for a point alpha), else sqrt(Var_q[yhat_n]).

    Parameters
    ----------
    state : VBFMState
        The fitted q.
    design_new : FMDesign
        N_new rows with the fitted number of features D.
    noise : bool, keyword-only
        Add the observation noise E_q[1/alpha] to the variance (default True).

    Returns
    -------
    mean : numpy.ndarray, shape (N_new,), the state's dtype
        E_q[yhat_n].
    sd : numpy.ndarray, shape (N_new,), the state's dtype
        The predictive standard deviation.

    Raises
    ------
    ValueError
        ``design_new`` does not have the fitted number of features D.

    Source: ``004_90693a0965f06816.txt`` eq. 4.22 (the mean); the sd is a project addition.
    """
    D = state.w_prec.shape[0]
    if design_new.n_features != D:
        raise ValueError(f"design_new has {design_new.n_features} features, the fitted model has {D}")
    zeros = jnp.zeros(design_new.n_rows, state.w_prec.dtype)
    mean, T = _predict(state, design_new.rows, design_new.cols, jnp.asarray(design_new.values, zeros.dtype), zeros)
    if noise:
        g = bool(state.alpha_prior_shape > 0)
        inv = state.alpha_rate / (state.alpha_shape - 1.0) if g else state.alpha_rate / state.alpha_shape
        T = T + inv
    return np.asarray(mean), np.asarray(jnp.sqrt(T))


def draws_from_q(seed: int, state: VBFMState, n_draws: int) -> dict[str, np.ndarray]:
    """Independent draws from q, each (1, n_draws, ...): w0 (), w (D,), V (D, K), alpha ()
    (a point alpha is repeated). Names match the NumPyro sites of `ppl_models.fm`.

    Parameters
    ----------
    seed : int
        Seed of a numpy Generator.
    state : VBFMState
        q.
    n_draws : int >= 0
        Number of draws.

    Returns
    -------
    dict of str to numpy.ndarray, the state's float dtype
        ``w0`` (1, n_draws), ``w`` (1, n_draws, D), ``V`` (1, n_draws, D, K), ``alpha`` (1, n_draws).

    Raises
    ------
    None of its own; a negative ``n_draws`` makes numpy raise ValueError.

    Source: project addition (draws from q of ``004_90693a0965f06816.txt`` eqs. 4.8-4.11).
    """
    rng = np.random.default_rng(seed)
    (m0, s0), (m, s), (mu, sv) = (tuple(np.asarray(a, np.float64) for a in pair) for pair in moments(state))
    out = {
        "w0": m0 + np.sqrt(s0) * rng.standard_normal(n_draws),
        "w": m + np.sqrt(s) * rng.standard_normal((n_draws, *m.shape)),
        "V": mu + np.sqrt(sv) * rng.standard_normal((n_draws, *mu.shape)),
    }
    shape, rate = float(state.alpha_shape), float(state.alpha_rate)
    if float(state.alpha_prior_shape) > 0:
        out["alpha"] = rng.standard_gamma(shape, n_draws) / rate
    else:
        out["alpha"] = np.full(n_draws, shape / rate)
    dtype = np.asarray(state.w_prec).dtype
    return {k: v.astype(dtype)[None] for k, v in out.items()}


_DIMS = {"w": ["feature"], "V": ["feature", "factor"], "w_prec": ["feature"], "w_h": ["feature"],
         "v_prec": ["feature", "factor"], "v_h": ["feature", "factor"], "sigma_w": ["group"],
         "sigma_v": ["group", "factor"], "elbo": ["iteration"], "rel_change": ["iteration"]}


def _output(design, K, n_draws, seed, method, source, attrs=None) -> vi_driver.Output:
    """The result layout of `fit` and `fit_svi` (`vi_driver.Output`)."""
    def posterior(state):
        if n_draws:
            return draws_from_q(seed, state, n_draws), "draws from q"
        (m0, _), (m, _), (mu, _) = moments(state)
        return (vi_driver.point_posterior({"w0": m0, "w": m, "V": mu, "alpha": state.alpha_shape / state.alpha_rate}),
                "mean of q (n_draws=0)")

    return vi_driver.Output(
        "fm_flat", method, posterior, dims=_DIMS,
        coords={"feature": np.arange(design.n_features), "factor": np.arange(K), "group": list(design.group_names)},
        params=lambda s: {f: v for f, v in s._asdict().items() if f != "last_elbo"}, source=source,
        attrs=lambda res: {"n_components": K, **(attrs(res) if callable(attrs) else attrs or {})})


def fit(key, design: FMDesign, K: int, hyper, *, max_iter: int = 100, tol: float = 1e-6, progress: bool = True,
        alpha_prior=None, update_hyper: bool = True, n_draws: int = 100, init_state: VBFMState | None = None,
        checkpoint=None, checkpoint_every: int = 10, resume: bool = False, **init_kwargs) -> base.FitResult:
    """Fit by VBFM (batch CAVI) until the relative ELBO change falls below ``tol``.

    Parameters
    ----------
    key : jax.Array or int
        PRNG key or int seed (`base.as_key`): the initialization; `vi_driver.host_seed` (key) seeds the
        draws from q.
    design : FMDesign
        N rows, D features.
    K : int >= 1
        Number of factors.
    hyper : ppl_models.fm.FMFlatHyper or object
        As in `init`.
    max_iter : int >= 1, keyword-only
        Most sweeps (default 100).
    tol : float >= 0, keyword-only
        Stop when |L_t - L_{t-1}| / |L_{t-1}| < tol (default 1e-6).
    progress : bool, keyword-only
        tqdm bar with the ELBO (default True).
    alpha_prior : tuple of two floats, keyword-only, optional
        As in `init`.
    update_hyper : bool, keyword-only
        As in `step` (default True).
    n_draws : int >= 0, keyword-only
        Draws from q in the ``posterior`` group (default 100; 0: the means of q as one draw).
    init_state : VBFMState, keyword-only, optional
        Start here instead of `init` (then ``alpha_prior`` and ``init_kwargs`` are not used).
    checkpoint : str or path-like, keyword-only, optional
        A ``.npz`` path for `vi_driver.fit` checkpoints (atomic).
    checkpoint_every : int >= 1, keyword-only
        Sweeps between checkpoints (default 10).
    resume : bool, keyword-only
        Continue from ``checkpoint``; bit for bit the uninterrupted run (default False).
    **init_kwargs
        ``init_mean_sd``, ``init_var``, ``dtype`` of `init`.

    Returns
    -------
    base.FitResult
        state VBFMState; trace float64 (n_iter,) the ELBO after each sweep; idata with groups
        posterior (w0, w (feature), V (feature, factor), alpha), variational_parameters, vi_trace;
        attrs: the layout of `vi_driver.fit` (method, converged, n_iter, seconds, seconds_per_iter,
        ...) and n_components.

    Raises
    ------
    ValueError
        Bad K, hyper, max_iter, tol, n_draws (`init`, `vi_driver.check_fit_args`), bad
        ``checkpoint_every`` or a checkpoint of another run (`vi_driver.fit`).
    TypeError
        A bad key.
    FloatingPointError
        The ELBO is not finite.
    OSError
        The checkpoint cannot be written.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`vi_driver.fit`).

    Source: ``004_90693a0965f06816.txt`` Algorithm 3 (corrected); driver: project addition.
    """
    vi_driver.check_fit_args(max_iter, tol, n_draws)
    seed = vi_driver.host_seed(key)
    state = init(key, design, K, hyper, alpha_prior=alpha_prior, **init_kwargs) if init_state is None else init_state
    design = jax.tree_util.tree_map(jnp.asarray, design)
    options = vi_driver.FitOptions(max_iter=max_iter, tol=tol, progress=progress, checkpoint=checkpoint,
                                   checkpoint_every=checkpoint_every, resume=resume)
    output = _output(design, K, n_draws, seed, "vbfm_cavi", "004_90693a0965f06816.txt Algorithm 3 (corrected)")
    return vi_driver.fit(ALGORITHMS["vbfm"], design, options=options, output=output, key=key, K=K, hyper=hyper,
                         state=state, step_options={"update_hyper": update_hyper}, desc=f"VBFM (K={K})", seed=seed)


def fit_svi(key, design: FMDesign, K: int, hyper, *, n_batches: int = 10, max_epochs: int = 20, progress: bool = True,
            lam: float = 0.6, alpha_prior=None, update_hyper: bool = True, n_draws: int = 100,
            init_state: VBFMState | None = None, tol: float = 0.0, checkpoint=None, checkpoint_every: int = 10,
            resume: bool = False, **init_kwargs) -> base.FitResult:
    """Fit by OVBFM: each epoch partitions the rows into ``n_batches`` random batches (Algorithm 4)
    and applies `svi_step` to each with a global counter t. The full-data ELBO is recorded after
    every epoch (one O(M K) pass). Stops early when its relative change falls below ``tol`` (> 0).

    A checkpoint also holds the partition RNG and the update counter t, so a resumed run is bit for
    bit the uninterrupted one.

    Parameters
    ----------
    key : jax.Array or int
        PRNG key or int seed: the initialization (`base.as_key`); `vi_driver.host_seed` (key) seeds
        the batch partitions and the draws from q.
    design : FMDesign
        N rows, D features.
    K : int >= 1
        Number of factors.
    hyper : ppl_models.fm.FMFlatHyper or object
        As in `init`.
    n_batches : int, keyword-only
        B in 1..N, batches per epoch (default 10).
    max_epochs : int >= 1, keyword-only
        Epochs (default 20).
    progress : bool, keyword-only
        tqdm bar (default True).
    lam : float, keyword-only
        Forgetting rate of `svi_step` (default 0.6).
    alpha_prior : tuple of two floats, keyword-only, optional
        As in `init`.
    update_hyper : bool, keyword-only
        As in `svi_step` (default True).
    n_draws : int >= 0, keyword-only
        As in `fit` (default 100).
    init_state : VBFMState, keyword-only, optional
        As in `fit`.
    tol : float >= 0, keyword-only
        Stop early when the relative change of the epoch ELBO falls below ``tol`` (default 0: never).
    checkpoint, checkpoint_every, resume : keyword-only
        As in `fit` (``checkpoint_every`` counts epochs).
    **init_kwargs
        ``init_mean_sd``, ``init_var``, ``dtype`` of `init`.

    Returns
    -------
    base.FitResult
        As `fit` (trace: the ELBO after each epoch); attrs add n_batches, lam and seconds_per_epoch
        (the mean wall time of an epoch after the first, compiling, one; it counts building the
        batches and the updates, not the ELBO passes).

    Raises
    ------
    ValueError
        Bad K, hyper, n_batches, max_epochs, tol, n_draws, lam (before any work), checkpoint
        options or a checkpoint of another run (`vi_driver.fit`).
    TypeError
        A bad key.
    FloatingPointError
        The epoch ELBO is not finite.
    OSError
        The checkpoint cannot be written.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`vi_driver.fit`).

    Source: ``004_90693a0965f06816.txt`` Algorithm 4 (as stochastic VI, Hoffman et al. 2013).
    """
    vi_driver.check_fit_args(max_epochs, tol, n_draws, max_iter_name="max_epochs")
    if not (np.isfinite(lam) and lam >= 0):  # what `robbins_monro` refuses at the first update, before init
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    seed = vi_driver.host_seed(key)
    state = init(key, design, K, hyper, alpha_prior=alpha_prior, **init_kwargs) if init_state is None else init_state
    host = jax.tree_util.tree_map(np.asarray, design)  # the batches are gathered from it (no copy of numpy)
    design = jax.tree_util.tree_map(jnp.asarray, design)  # for the ELBO of each epoch
    rng = np.random.default_rng(seed)
    n_updates = [0]  # the global update counter t of rho_t

    def epoch(state, _):
        for b in iter_batches(rng, host, n_batches):
            state, _ = svi_step(None, state, design, None, b, n_updates[0], lam=lam, update_hyper=update_hyper)
            n_updates[0] += 1
        return state, None

    def save_extra():
        return {"rng": np.asarray(json.dumps(rng.bit_generator.state)), "n_updates": np.asarray(n_updates[0])}

    def restore_extra(extra):
        rng.bit_generator.state = json.loads(str(extra["rng"]))
        n_updates[0] = int(extra["n_updates"])

    elbo_fn = jax.jit(elbo)
    options = vi_driver.FitOptions(max_iter=max_epochs, tol=tol, progress=progress, checkpoint=checkpoint,
                                   checkpoint_every=checkpoint_every, resume=resume)
    output = _output(design, K, n_draws, seed, "ovbfm_svi", "004_90693a0965f06816.txt Algorithm 4 (as stochastic VI)",
                     lambda res: {"n_batches": n_batches, "lam": lam, "seconds_per_epoch": res.seconds_per_iter})
    output = output._replace(final=lambda s, res: s._replace(last_elbo=jnp.asarray(res.elbo[-1], s.w0_prec.dtype)))
    return vi_driver.fit(ALGORITHMS["ovbfm"], design, options=options, output=output, key=key, K=K, hyper=hyper,
                         state=state, sweep=epoch, evaluate=lambda s: elbo_fn(s, design), save_extra=save_extra,
                         restore_extra=restore_extra, desc=f"OVBFM (K={K}, B={n_batches})", seed=seed)


#: ArviZ dims of every VBFMState field (the protocol's ``dims``).
STATE_DIMS = {"w0_prec": (), "w0_h": (), "w_prec": ("feature",), "w_h": ("feature",),
              "v_prec": ("feature", "factor"), "v_h": ("feature", "factor"), "alpha_shape": (), "alpha_rate": (),
              "alpha_prior_shape": (), "alpha_prior_rate": (), "sigma_0": (), "sigma_w": ("group",),
              "sigma_v": ("group", "factor"), "last_elbo": ()}


def _svi_protocol_step(key, state, design, hyper=None, **options):
    """`svi_step` with every option by keyword (batch, t, lam, update_hyper, n_batches)."""
    return svi_step(key, state, design, hyper, **options)


#: The protocol declarations (`custom_inference.base`): batch CAVI and stochastic VI.
ALGORITHMS = {
    "vbfm": base.Algorithm("vbfm-cavi", "vi", init, step, elbo, "elbo", STATE_DIMS,
                           "004_90693a0965f06816.txt ch. 4, Algorithm 3 (corrected)").check(),
    "ovbfm": base.Algorithm("ovbfm-svi", "vi", init, _svi_protocol_step, elbo, "elbo", STATE_DIMS,
                            "004_90693a0965f06816.txt ch. 4, Algorithm 4 (as stochastic VI)").check(),
}
