"""SIBM batch VB (the seed's "batch" baseline): exact coordinate updates of q(z), q(V), q(U) on the bounded
ELBO (7) at optimal xi (8), the sweep `step` and the driver `fit` (seed 002_5408d341cb9fc544.txt;
derivations in the package docstring, `custom_inference.sibm`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import base, vi_driver

__all__ = ["update_z", "update_v", "update_u", "step", "fit", "fold_in", "ALGORITHM"]
from ..data import Observations
from ..logistic import jj_lambda, optimal_xi
from .common import (DEFAULT_CHUNK_CELLS, _fold_in_data, SIBMInfo, SIBMState, _cells, _chunk_rows, _elbo_impl,
                     _map_row_chunks, _mom, _prior, _static_hyper, as_binary, elbo, fit_output, init, moments,
                     q_posterior)
from .common import STATE_DIMS




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

    Parameters
    ----------
    state : SIBMState
        q (v_prec, v_h (J, K) are updated).
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    columns : iterable of int, optional
        Columns d in 0..K-1 to update (None: all).
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per chunk.

    Returns
    -------
    SIBMState
        The new state, of the same dtype.

    Raises
    ------
    ValueError
        For columns out of range or a bad ``hyper``.

    Source: ``002_5408d341cb9fc544.txt`` eqs. (6)-(8) (batch VB on the bounded ELBO (7) at optimal
    xi (8)); the update is derived in the package docstring.
    """
    return _update_v_jit(state, data, _static_hyper(hyper), _columns(state, columns), chunk_cells)


def update_u(state: SIBMState, data: Observations, hyper, columns=None, *,
             chunk_cells: int = DEFAULT_CHUNK_CELLS) -> SIBMState:
    """Batch coordinate update of q(u_id) for every i, for each d in ``columns`` (default all, in order).

    As `update_v` with the roles of U and V exchanged: sums over the columns j of X; rows of U in
    chunks. Work O(I J) per column.

    Parameters
    ----------
    state : SIBMState
        q (u_prec, u_h (I, K) are updated).
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    columns : iterable of int, optional
        Columns d in 0..K-1 to update (None: all).
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per chunk.

    Returns
    -------
    SIBMState
        The new state, of the same dtype.

    Raises
    ------
    ValueError
        For columns out of range or a bad ``hyper``.

    Source: ``002_5408d341cb9fc544.txt`` eqs. (6)-(8); the update is derived in the package
    docstring.
    """
    return _update_u_jit(state, data, _static_hyper(hyper), _columns(state, columns), chunk_cells)


def update_z(state: SIBMState, data: Observations, hyper, *, chunk_cells: int = DEFAULT_CHUNK_CELLS) -> SIBMState:
    """Batch update of q(z) at optimal xi.

    P = 1/z_tilde0 + 2 sum_ij lambda_ij, h = z_bar0/z_tilde0 + (N - I J / 2) - 2 sum_ij lambda_ij
    (mu_ij - z_bar). Work O(I J K), chunked.

    Parameters
    ----------
    state : SIBMState
        q (z_prec, z_h are updated).
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per chunk.

    Returns
    -------
    SIBMState
        The new state, of the same dtype.

    Raises
    ------
    ValueError
        For a bad ``hyper`` (a missing field, a non-finite value, a variance <= 0).

    Source: ``002_5408d341cb9fc544.txt`` eqs. (6)-(8); the update is derived in the package
    docstring.
    """
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

    Every block is an exact coordinate maximizer, so the ELBO never decreases. Work O(I J K) per sweep,
    memory O(chunk_cells).

    Parameters
    ----------
    key : jax.Array
        Unused (the sweep is deterministic); the protocol's signature.
    state : SIBMState
        q.
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per chunk.

    Returns
    -------
    state : SIBMState
        The new q, with ``last_elbo`` set.
    info : SIBMInfo
        The ELBO of the new state and the relative change (scalars of the state's dtype).

    Raises
    ------
    ValueError
        For a bad ``hyper`` (a missing field, a non-finite value, a variance <= 0).

    Source: ``002_5408d341cb9fc544.txt`` (the seed's batch VB baseline; eqs. (6)-(8)), sweep order in
    the package docstring.
    """
    del key
    return _step_jit(state, data, _static_hyper(hyper), chunk_cells)



def fit(key, data, K: int, hyper, *, max_iter: int = 200, tol: float = 1e-7, progress: bool = True,
        init_state: SIBMState | None = None, chunk_cells: int = DEFAULT_CHUNK_CELLS, callback=None,
        n_draws: int = 100, checkpoint=None, checkpoint_every: int = 10, resume: bool = False,
        **init_kwargs) -> base.FitResult:
    """Batch VB (the seed's "batch" baseline): `step` until |dL| / |L| < ``tol``.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed (`base.as_key`): the initialization; `vi_driver.host_seed` (key)
        seeds the draws from q.
    data : Observations, scipy.sparse matrix or array_like, shape (I, J)
        The binary matrix (anything `as_binary` takes).
    K : int >= 1
        Latent factors (the seed's D).
    hyper : SIBMHyper-like
        Prior means and variances, ``biases``.
    max_iter : int >= 1, default 200
        Sweeps at most.
    tol : float >= 0, default 1e-7
        Stop when the relative change of the ELBO is below ``tol``.
    progress : bool, default True
        Show a tqdm bar.
    init_state : SIBMState, optional
        Start here instead of `init`.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per chunk.
    callback : callable, optional
        ``callback(t, state)`` after sweep t (0-based; each sweep touches all I J cells), e.g. held-out
        recall for `validation.evaluation.implicit_eval.sibm_recall_curves`; return value ignored.
    n_draws : int >= 0, default 100
        Draws from q in the ``posterior`` group (0: the means of q as one draw).
    checkpoint : str or path-like, optional
        A `vi_driver.fit` checkpoint (atomic ``.npz``; a resumed run is bit for bit the uninterrupted one).
    checkpoint_every : int >= 1, default 10
        Sweeps between checkpoints.
    resume : bool, default False
        Continue from an existing checkpoint.
    **init_kwargs
        ``init_mean_sd``, ``init_var``, ``dtype`` of `init`.

    Returns
    -------
    base.FitResult
        The SIBMState, the ELBO trace (n_iter + 1,) starting at the initial state, InferenceData with
        groups posterior (U (user, component), V (item, component), z), variational_parameters and
        vi_trace; attrs: the layout of `vi_driver.fit` (method, converged, n_iter, seconds, ...).

    Raises
    ------
    ValueError
        For bad inputs (data, K, hyper, max_iter, tol, n_draws, init values, checkpoint options, a
        checkpoint that does not match).
    TypeError
        For a bad key.
    FloatingPointError
        For a non-finite ELBO.

    Source: seed 002 sec. 4 ("batch"), eqs. (6)-(8); driver: project addition.
    """
    vi_driver.check_fit_args(max_iter, tol, n_draws)
    seed = vi_driver.host_seed(key)
    if not isinstance(data, Observations):
        data = as_binary(data)
    else:
        data = as_binary(data, dtype=np.asarray(data.values).dtype)
    state = init(key, data, K, hyper, **init_kwargs) if init_state is None else init_state
    data = jax.tree_util.tree_map(jnp.asarray, data)
    first = float(elbo(state, data, hyper, chunk_cells=chunk_cells))
    state = state._replace(last_elbo=jnp.asarray(first, state.u_h.dtype))
    options = vi_driver.FitOptions(max_iter=max_iter, tol=tol, progress=progress, checkpoint=checkpoint,
                                   checkpoint_every=checkpoint_every, resume=resume,
                                   callback=None if callback is None else (lambda t, s, info: callback(t, s)))
    output = fit_output(data.shape, state.u_prec.shape[1], "sibm_batch_vb", q_posterior(seed, n_draws))
    return vi_driver.fit(ALGORITHM, data, options=options, output=output, key=key,
                         K=K, hyper=hyper, state=state, step_options={"chunk_cells": chunk_cells}, init_elbo=first,
                         desc=f"SIBM batch VB (K={K})", seed=seed)


def _fold_in_impl(state, data, hyper, max_iter, tol, chunk_cells):
    K = state.u_prec.shape[1]
    free = state.u_fixed[None, :] == 0

    def body(carry):
        st, it, _ = carry
        nxt = _update_u_impl(st, data, hyper, jnp.ones(K, bool), chunk_cells)
        (m0, _), _, _ = moments(st)
        (m1, _), _, _ = moments(nxt)
        dm = jnp.abs(m1 - m0) * jnp.sqrt(nxt.u_prec)
        dp = jnp.abs(nxt.u_prec - st.u_prec) / nxt.u_prec
        return nxt, it + 1, jnp.max(jnp.where(free, jnp.maximum(dm, dp), 0.0))

    inf = jnp.asarray(jnp.inf, state.u_h.dtype)
    return jax.lax.while_loop(lambda c: (c[1] < max_iter) & (c[2] > tol), body, (state, jnp.asarray(0), inf))


_fold_in_jit = jax.jit(_fold_in_impl, static_argnames=("hyper", "chunk_cells"))


def fold_in(state: SIBMState, data: Observations, hyper, *, max_iter: int = 1000, tol: float = 1e-10,
            chunk_cells: int = DEFAULT_CHUNK_CELLS):
    """q(u_i.) of new users (the rows of ``data``) with q(V) and q(z) of ``state`` held fixed.

    Batch `update_u` sweeps (columns d = 0..K-1, xi re-optimized before each) until the largest change
    of a sweep is below ``tol`` (a mean's move in units of its new posterior sd, or a precision's
    relative move). Each row's update reads only that row's cells, so the new users do not move each
    other. With q(V), q(z) fixed, each sweep is a block maximization of the bounded ELBO (7) at optimal
    xi (8) in the rows' q: the bound never decreases, and at a converged fit a copy of a fitted user
    reaches that user's q (tests/validation/test_fold_in.py).

    Parameters
    ----------
    state : SIBMState
        u_prec, u_h (I_new, K) for the new users (any start, e.g. the prior) and v_prec, v_h (J, K),
        z_prec, z_h, u_fixed, v_fixed of the fit.
    data : Observations
        The new users' ones, shape (I_new, J); every other cell is a zero.
    hyper : SIBMHyper-like
        The fit's priors.
    max_iter : int >= 1, default 1000
        Sweeps at most.
    tol : float >= 0, default 1e-10
        The stopping threshold on the largest change.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per row chunk.

    Returns
    -------
    state : SIBMState
        u_prec, u_h updated (the rest unchanged).
    n_sweeps : int
        The sweeps run.
    last_change : float
        The last change (> ``tol`` when ``max_iter`` was reached first).

    Raises
    ------
    ValueError
        For a shape mismatch between ``state`` and ``data``, ``max_iter`` < 1, ``tol`` < 0, a bad
        ``hyper``, or data that is not binary (`as_binary`).

    Source: ``002_5408d341cb9fc544.txt`` eqs. (6)-(8) (the U updates of batch VB, derived in the
    package docstring); the fold-in itself is a project addition.
    """
    data = _fold_in_data(data, state.u_prec.shape[0], state.v_prec.shape[0], max_iter, tol)
    data = jax.tree_util.tree_map(jnp.asarray, data)
    st, it, ch = _fold_in_jit(state, data, _static_hyper(hyper), jnp.asarray(int(max_iter)),
                              jnp.asarray(tol, state.u_h.dtype), chunk_cells)
    return st, int(it), float(ch)


def _target(state: SIBMState, data: Observations, hyper) -> jax.Array:
    """`elbo` at optimal xi (the protocol's target(state, data, hyper))."""
    return elbo(state, data, hyper)


#: The protocol declaration (`custom_inference.base`).
ALGORITHM = base.Algorithm("sibm-vb", "vi", init, step, _target, "elbo", STATE_DIMS,
                           "002_5408d341cb9fc544.txt eqs. (4)-(8), batch coordinate ascent (ours)").check()
