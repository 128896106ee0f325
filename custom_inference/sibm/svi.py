"""SIBM stochastic VI (seed 002_5408d341cb9fc544.txt Algorithm 1): per-cell targets of the noisy bound (9),
minibatch averaging (11)-(12), Robbins-Monro steps, the automatic minibatch size (13), the jitted
`lax.scan` blocks and the driver `fit_svi` (derivations in the package docstring)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import base, vi_driver
from ..data import Observations
from ..logistic import jj_lambda, optimal_xi
from ..schedules import check_robbins_monro
from .cells import Minibatch, Sampler, _pad_size, _rm, _segment_avg, make_sampler, sample_cells
from .common import (STATE_DIMS, SIBMState, _key_to_data, _Prior, _mom, _prior, as_binary, elbo, fit_output, init,
                     q_posterior)

__all__ = ["SVIState", "SVIInfo", "svi_state", "svi_init", "cell_targets", "auto_minibatch_size", "svi_step",
           "svi_scan", "svi_elbo", "fit_svi", "DEFAULT_SCAN_BLOCK", "ALGORITHM"]


class SVIState(NamedTuple):
    """SVI state: q, Robbins-Monro counters and the moving averages of the targets for eq. (13).

    Parameters
    ----------
    params : SIBMState
        q, natural parameters (K columns).
    u_count : jax.Array, shape (I,), float
        Updates of each row so far.
    v_count : jax.Array, shape (J,), float
        Updates of each column so far.
    z_count : jax.Array, shape (), float
        Updates of z so far.
    u_m1, u_m2 : jax.Array, shape (I, K, 2), float
        EWMA of the per-cell targets (precision, h) of the rows and of their squares (eq. 13's E and
        Var).
    v_m1, v_m2 : jax.Array, shape (J, K, 2), float
        The same for the columns.
    S : jax.Array, shape (), float
        The current minibatch size.

    Raises
    ------
    None of its own (a NamedTuple; `svi_state` builds one).

    Source: ``002_5408d341cb9fc544.txt`` Algorithm 1, eqs. (11)-(13).
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


class SVIInfo(NamedTuple):
    """Diagnostics of one SVI minibatch.

    The full-data ELBO costs O(I J K): `fit_svi` records it every ``elbo_every`` minibatches instead.

    Parameters
    ----------
    S : jax.Array, shape (), int32
        The number of cells the minibatch drew.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition.
    """

    S: jax.Array


def svi_init(key, data: Observations, K: int, hyper, *, S: int | None = None, **init_kwargs) -> SVIState:
    """The protocol init: `init` wrapped by `svi_state` with initial minibatch size ``S``.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed.
    data : Observations
        The ones, shape (I, J).
    K : int >= 1
        Latent factors (the seed's D).
    hyper : SIBMHyper-like
        Prior means and variances, ``biases``.
    S : int >= 1, optional
        Initial minibatch size (default max(I, J), the seed's S_min).
    **init_kwargs
        ``init_mean_sd``, ``init_var``, ``dtype`` of `init`.

    Returns
    -------
    SVIState
        Counters and moving averages at zero.

    Raises
    ------
    ValueError
        As `init` and `svi_state` (K, hyper, data, init values, S < 1).
    TypeError
        As `init` (key).

    Source: seed 002 Algorithm 1 (initialization); project addition.
    """
    params = init(key, data, K, hyper, **init_kwargs)
    return svi_state(params, max(data.shape) if S is None else S)


def svi_state(params: SIBMState, S: int) -> SVIState:
    """Wrap a q (e.g. from `init`) for SVI: counters and moving averages at zero.

    Parameters
    ----------
    params : SIBMState
        q, with u_prec (I, K) and v_prec (J, K).
    S : int >= 1
        Initial minibatch size.

    Returns
    -------
    SVIState
        Of the dtype of ``params``.

    Raises
    ------
    ValueError
        For S not an integer >= 1.

    Source: ``002_5408d341cb9fc544.txt`` Algorithm 1.
    """
    if isinstance(S, bool) or int(S) != S or S < 1:
        raise ValueError(f"S must be an integer >= 1, got {S!r}")
    I, K = params.u_prec.shape
    J = params.v_prec.shape[0]
    dt = params.u_h.dtype
    z = lambda *s: jnp.zeros(s, dt)  # noqa: E731
    return SVIState(params, z(I), z(J), z(), z(I, K, 2), z(I, K, 2), z(J, K, 2), z(J, K, 2), jnp.asarray(float(S), dt))


def cell_targets(params: SIBMState, prior: _Prior, i, j, x, c_u, c_v, c_z, rho_z, rho_v, rho_u):
    """Per-cell targets of Algorithm 1 (maximizers of the noisy bound (9)), for one cell.

    Order: z, then v_j1..v_jK, then u_i1..u_iK, xi re-optimized (8) before each. Fixed (bias) columns
    return their current natural parameters.

    Parameters
    ----------
    params : SIBMState
        u_prec, u_h (I, K), v_prec, v_h (J, K), z_prec, z_h (), u_fixed, v_fixed (K,); one float dtype.
    prior : _Prior
        0-d arrays of that dtype (already validated by `common.prior_arrays`).
    i, j : int or jax.Array, shape ()
        The cell (0-d int arrays under `jax.vmap`).
    x : float or jax.Array, shape ()
        0/1, its value.
    c_u, c_v, c_z : jax.Array, shape (), float
        p(j|i), p(i|j) and p(i, j): the rescaling of (9).
    rho_z, rho_v, rho_u : jax.Array, shape (), float
        The temporary step sizes of Algorithm 1's "update ... using (10)" inside the cell (the entries for
        z, column j and row i; 0: every target at the saved state, the pure noisy natural gradient).

    Returns
    -------
    z_target : jax.Array, shape (2,), float
        (precision, h) for z.
    v_target : jax.Array, shape (K, 2), float
        (precision, h) for each entry of v_j.
    u_target : jax.Array, shape (K, 2), float
        (precision, h) for each entry of u_i; all in the state's float dtype.

    Raises
    ------
    None of its own (pure JAX arithmetic, traceable; out-of-range i, j are clamped by JAX indexing,
    not reported).

    Source: seed 002_5408d341cb9fc544.txt Algorithm 1 (per-cell targets), eqs. (8)-(10).
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
    """Eq. (13): the automatic minibatch size.

    S_{i,d} = ||Var[target]||_1 / (theta delta p(i) ||E[target]||_2^2), E and Var the moving averages of
    the per-cell targets; the mean over the free (i, d) and (j, d) updated at least once.

    Parameters
    ----------
    st : SVIState
        u_m1, u_m2 (I, K, 2), v_m1, v_m2 (J, K, 2), u_count (I,), v_count (J,), float.
    sampler : Sampler
        Of the data (p_row (I,), p_col (J,)).
    theta_delta : float > 0, default 2.0
        The seed's theta delta.

    Returns
    -------
    jax.Array, shape (), float
        S, of the state's dtype (nan if nothing has been seen; inf where a target mean is zero).

    Raises
    ------
    None of its own (JAX arithmetic: divisions by zero give inf / nan, not exceptions).

    Source: seed 002_5408d341cb9fc544.txt eq. (13) and the text after.
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


def svi_step(key, st: SVIState, data: Observations, hyper, *, sampler: Sampler | None = None, S: int | None = None,
             tau: float = 1.0, kappa: float = 0.7, ewma: float = 0.1, nudge: bool = True) -> tuple[SVIState, SVIInfo]:
    """One SIBM minibatch (Algorithm 1 body): draw S cells, per-cell targets, averages (12), steps (11).

    Cost O(S K^2).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key (the cells).
    st : SVIState
        The current state.
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    sampler : Sampler, optional
        `make_sampler` of ``data`` (None: S-Biased, built on the host at every call: pass one).
    S : int >= 1, optional
        Minibatch size (default ``st.S``); padded to a power of two (padding has weight 0).
    tau : float > 0, default 1.0
        Robbins-Monro rho = (tau + n)^(-kappa), n the number of earlier updates of that row, column or z.
    kappa : float in (0.5, 1], default 0.7
        The Robbins-Monro exponent.
    ewma : float, default 0.1
        Weight of the newest minibatch in the moving averages of eq. (13).
    nudge : bool, default True
        Apply Algorithm 1's temporary in-cell steps (10) before the next block's target.

    Returns
    -------
    state : SVIState
        The new state (S unchanged: see `auto_minibatch_size` / `fit_svi`).
    info : SVIInfo
        ``S``.

    Raises
    ------
    ValueError
        For tau, kappa outside the Robbins-Monro conditions, S < 1, a bad ``hyper`` (and, with
        ``sampler`` None, as `make_sampler`).

    Source: seed 002 Algorithm 1, eqs. (9)-(12).
    """
    if sampler is None:
        sampler = make_sampler(data, "biased", dtype=st.params.u_h.dtype)
    check_robbins_monro(tau, kappa)  # the seed's tau is the schedule's tau0
    S = int(st.S) if S is None else int(S)
    if S < 1:
        raise ValueError(f"S must be >= 1, got {S}")
    prior = _prior(hyper, st.params.u_h.dtype)
    dt = st.params.u_h.dtype
    new = _svi_jit(key, st, sampler, data.shape, _pad_size(S), jnp.asarray(S), prior,
                   jnp.asarray(tau, dt), jnp.asarray(kappa, dt), jnp.asarray(ewma, dt), bool(nudge),
                   int(sampler.code) == 0)
    return new, SVIInfo(jnp.asarray(S, jnp.int32))


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


def svi_scan(key, st: SVIState, data: Observations, hyper, n_steps: int, *, sampler: Sampler,
             scan_block: int = 256, tau: float = 1.0, kappa: float = 0.7, ewma: float = 0.1,
             nudge: bool = True) -> tuple[jax.Array, SVIState]:
    """``n_steps`` minibatches of fixed S = ``st.S`` cells, ``scan_block`` per jitted `lax.scan` call.

    The same as ``for _ in range(n_steps): key, k = jax.random.split(key); st, _ = svi_step(k, st, ...)``
    (same cells, same updates; no host round trip inside a block).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key (split once per minibatch).
    st : SVIState
        The current state.
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    n_steps : int >= 0
        Minibatches.
    sampler : Sampler
        `make_sampler` of ``data``.
    scan_block : int >= 1, default 256
        Minibatches per jitted call.
    tau : float > 0, default 1.0
        Robbins-Monro delay (`svi_step`).
    kappa : float in (0.5, 1], default 0.7
        Robbins-Monro exponent.
    ewma : float, default 0.1
        Weight of the newest minibatch in the moving averages.
    nudge : bool, default True
        Algorithm 1's in-cell steps (10).

    Returns
    -------
    key : jax.Array
        The key after the splits.
    state : SVIState
        The new state.

    Raises
    ------
    ValueError
        For tau, kappa, n_steps, scan_block, S < 1 or a bad ``hyper``.

    Source: seed 002 Algorithm 1; project addition.
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


def fit_svi(key, data, K: int, hyper, *, n_iter: int = 200, progress: bool = True, strategy: str = "biased",
            S: int | str = "auto", S_min: int | None = None, S_max: int = 1 << 20, theta_delta: float = 2.0,
            tau: float = 1.0, kappa: float = 0.7, ewma: float = 0.1, nudge: bool = True, elbo_every: int = 0,
            tol: float = 0.0, init_state: SIBMState | None = None, max_cells: int | None = None,
            callback=None, scan_block: int | None = None, n_draws: int = 100, checkpoint=None,
            checkpoint_every: int = 10, resume: bool = False, **init_kwargs) -> base.FitResult:
    """SIBM (Algorithm 1): ``n_iter`` minibatches of S cells drawn by ``strategy``.

    Execution. The minibatches run in blocks under one `lax.scan` (`_svi_block_impl`) with no host
    round trip per minibatch; the key stream, the cells drawn and the updates are the same as one
    `svi_step` per minibatch with ``k_run, k = jax.random.split(k_run)`` (the former Python loop;
    `tests/custom_inference/test_sibm.py` checks it). S = "auto" keeps this exactness without masking:
    the cells a minibatch draws depend on its padded size (`_pad_size`, a power of two), so padding every
    minibatch to the padded S_max would change the random stream; instead a block runs only while eq. (13)
    keeps S within the block's power of two, and the host starts the next block at the new padding (a
    few extra blocks while S settles).

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed (`base.as_key`): initialization and sampling;
        `vi_driver.host_seed` (key) seeds the draws from q.
    data : Observations, scipy.sparse matrix or array_like, shape (I, J)
        The binary matrix (anything `as_binary` takes).
    K : int >= 1
        Latent factors (the seed's D).
    hyper : SIBMHyper-like
        Prior means and variances, ``biases``.
    n_iter : int >= 1, default 200
        Minibatches.
    progress : bool, default True
        Show a tqdm bar.
    strategy : {"uniform", "balanced", "biased"}, default "biased"
        Cell sampling (sec. 2.3).
    S : int >= 1 or "auto", default "auto"
        Minibatch size; "auto" uses eq. (13) with ``theta_delta``, clipped to [S_min, S_max]; the first
        minibatch then has S_min cells.
    S_min : int, optional
        Smallest automatic size (default max(I, J), the seed's choice).
    S_max : int, default 2**20
        Largest automatic size.
    theta_delta : float > 0, default 2.0
        Eq. (13)'s theta delta (the seed fixes 2).
    tau : float > 0, default 1.0
        Robbins-Monro delay (`svi_step`).
    kappa : float in (0.5, 1], default 0.7
        Robbins-Monro exponent.
    ewma : float, default 0.1
        Weight of the newest minibatch in the moving averages of eq. (13).
    nudge : bool, default True
        Algorithm 1's temporary in-cell steps (10).
    elbo_every : int >= 0, default 0
        Record the full ELBO (O(I J K)) every this many minibatches (0: only at the end).
    tol : float >= 0, default 0.0
        With elbo_every > 0, stop when the relative change of the recorded ELBO falls below tol.
    init_state : SIBMState or SVIState, optional
        Start from this q (SIBMState), or resume a previous run (its SVIState: Robbins-Monro counters and
        moving averages carry on; pass a new ``key`` for fresh draws).
    max_cells : int >= 1, optional
        Stop once this many cells have been sampled in all (the x-axis of seed 002 figs. 2-3, "number of
        entries observed"); None: only ``n_iter`` limits the run.
    callback : callable, optional
        ``callback(t, st, n_cells)`` after minibatch t (0-based) with the SVIState and the cells sampled
        so far (e.g. held-out recall for `validation.evaluation.implicit_eval.sibm_recall_curves`); its
        return value is ignored. Called at block boundaries (see ``scan_block``): t is the last minibatch
        of the block.
    scan_block : int >= 1, optional
        Minibatches per jitted `lax.scan` call (default `DEFAULT_SCAN_BLOCK` = 256; 1 when a ``callback``
        is given, so that it still sees every minibatch). The host only acts between blocks: ELBO records
        (blocks end at multiples of ``elbo_every``), the ``tol`` test, the ``max_cells`` budget (checked
        inside the block per minibatch), callbacks, progress bar.
    n_draws : int >= 0, default 100
        Draws from q in the ``posterior`` group (0: the means of q as one draw).
    checkpoint : str or path-like, optional
        A ``.npz`` path: after every block that ends at a multiple of ``checkpoint_every`` minibatches
        (blocks are cut there) and at the end, the SVIState (q, the per-row / per-column / z
        Robbins-Monro counters, the moving averages of eq. 13 and the current S), the key stream, the ELBO
        trace, the minibatch sizes and the cell count are written atomically
        (`vi_driver.save_checkpoint`; then the hooks of `base.on_checkpoint`).
    checkpoint_every : int >= 1, default 10
        Minibatches between checkpoints.
    resume : bool, default False
        Continue from an existing checkpoint (it replaces ``init_state``): the same minibatches follow,
        so the result equals the uninterrupted run bit for bit (cutting a block does not change the key
        stream or the updates; tests/custom_inference/test_sibm.py).
    **init_kwargs
        ``init_mean_sd``, ``init_var``, ``dtype`` of `init`.

    Returns
    -------
    base.FitResult
        The SVIState, the ELBO trace at the recorded iterations, InferenceData with the posterior draws
        from q, the variational parameters and vi_trace (elbo, elbo_iteration; attr mean_S).

    Raises
    ------
    ValueError
        For bad inputs (data, K, hyper, n_iter, tol, n_draws, strategy, S, S_min < 1, scan_block, tau,
        kappa); max_cells < 1; checkpoint_every not an integer >= 1 with a checkpoint; a checkpoint whose
        state does not match.
    TypeError
        For a bad key.
    FloatingPointError
        For a non-finite ELBO.
    OSError
        When the checkpoint is not writable.
    RuntimeError
        If a block runs no minibatch (a guard against an endless loop; not expected).

    Source: seed 002 Algorithm 1, eqs. (9)-(13), sec. 2.3.
    """
    vi_driver.check_fit_args(n_iter, tol, n_draws, max_iter_name="n_iter")
    if checkpoint is not None and (isinstance(checkpoint_every, bool) or int(checkpoint_every) != checkpoint_every
                                   or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
    seed = vi_driver.host_seed(key)
    key = base.as_key(key)
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
        params = init(k_init, data, K, hyper, **init_kwargs) if init_state is None else init_state
        st = svi_state(params, S_min if auto else int(S))
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
    host = {"sizes": [], "n_cells": 0}  # the minibatch sizes so far and the cells they sampled

    def sweep(carry, t):  # one block of minibatches t, t + 1, ...: as many units as it ran
        st, k_data = carry
        stop_at = min(n_iter, t + length)
        if elbo_every:
            stop_at = min(stop_at, (t // elbo_every + 1) * elbo_every)
        if checkpoint is not None:  # blocks end at the checkpoints (cutting a block changes nothing: Execution)
            stop_at = min(stop_at, (t // checkpoint_every + 1) * checkpoint_every)
        size = int(st.S)  # one host read per block: the block's padding
        cells_left = (1 << 30) if max_cells is None else min(max_cells - host["n_cells"], 1 << 30)
        k_run, st, ys = _svi_block_jit(as_key(k_data), st, sampler, data.shape, _pad_size(size), length,
                                       nudge=bool(nudge), uniform=uniform, auto=bool(auto),
                                       n_active=jnp.int32(stop_at - t), cells_left=jnp.int32(cells_left), **consts)
        ys = np.asarray(ys)
        ran = ys[ys > 0].tolist()
        if not ran:  # cannot happen (the block's first minibatch always fits); guards an endless loop
            raise RuntimeError("fit_svi: a block ran no minibatch")
        host["sizes"] += ran
        host["n_cells"] += int(np.sum(ran, dtype=np.int64))
        t += len(ran)
        if callback is not None:
            callback(t - 1, st, host["n_cells"])
        done = max_cells is not None and host["n_cells"] >= max_cells
        record = (elbo_every and t % elbo_every == 0) or t == n_iter or done
        value = elbo_fn(st.params, data) if record else None
        return (st, _key_to_data(k_run)[0]), vi_driver.Report(elbo=value, units=len(ran), stop=done)

    def save_extra():
        return {"sizes": np.asarray(host["sizes"], np.int64), "n_cells": np.asarray(host["n_cells"], np.int64)}

    def restore_extra(extra):
        host["sizes"], host["n_cells"] = [int(v) for v in extra["sizes"]], int(extra["n_cells"])

    def final(carry, res):
        st = carry[0]
        return st._replace(params=st.params._replace(last_elbo=jnp.asarray(res.elbo[-1], st.params.u_h.dtype)))

    q = q_posterior(seed, n_draws)
    output = fit_output(
        data.shape, params.u_prec.shape[1], "sibm_svi", lambda st: q(st.params), trace_names=("elbo", "elbo_iteration"),
        params=lambda st: {f: v for f, v in st.params._asdict().items() if f != "last_elbo"}, final=final,
        trace=lambda res: {"elbo": res.elbo, "elbo_iteration": res.iteration},
        attrs=lambda res: {"strategy": strategy, "auto_S": int(auto), "n_cells": int(np.sum(host["sizes"])),
                           "tau": tau, "kappa": kappa, "mean_S": float(np.mean(host["sizes"]))})
    options = vi_driver.FitOptions(max_iter=n_iter, tol=tol, progress=progress, checkpoint=checkpoint,
                                   checkpoint_every=checkpoint_every, resume=resume)
    k_data, as_key = _key_to_data(k_run)
    return vi_driver.fit(ALGORITHM, data, options=options, output=output, key=key, K=K, hyper=hyper,
                         state=(st, k_data), sweep=sweep, save_extra=save_extra, restore_extra=restore_extra,
                         desc=f"SIBM SVI ({strategy}, K={K})", seed=seed)


def svi_elbo(st: SVIState, data: Observations, hyper) -> jax.Array:
    """The protocol target of SVI: `elbo` of ``st.params`` at optimal xi (O(I J K)).

    Parameters
    ----------
    st : SVIState
        The state.
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.

    Returns
    -------
    jax.Array, shape (), float
        The ELBO (nats), of the state's float dtype.

    Raises
    ------
    ValueError
        For a bad ``hyper`` (from `elbo`: a missing field, a non-finite value, a variance <= 0).

    Source: seed 002_5408d341cb9fc544.txt eq. (7).
    """
    return elbo(st.params, data, hyper)


#: The protocol declaration (`custom_inference.base`); the state is an SVIState (q in ``params``).
ALGORITHM = base.Algorithm("sibm-svi", "vi", svi_init, svi_step, svi_elbo, "elbo",
                           {**{f"params.{k}": v for k, v in STATE_DIMS.items()},
                            "u_count": ("user",), "v_count": ("item",), "z_count": (),
                            "u_m1": ("user", "component", "natural"), "u_m2": ("user", "component", "natural"),
                            "v_m1": ("item", "component", "natural"), "v_m2": ("item", "component", "natural"),
                            "S": ()},
                           "002_5408d341cb9fc544.txt Algorithm 1, eqs. (9)-(13), sec. 2.3").check()
