"""SIBM MAP by stochastic gradient ascent (the seed's "MAP" baseline, seed 002_5408d341cb9fc544.txt
sec. 4.2; preconditioning by the Boehning bound: our choice, see the package docstring)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import base, vi_driver
from ..data import Observations
from ..schedules import check_robbins_monro
from .cells import Minibatch, Sampler, _pad_size, _rm, _segment_avg, make_sampler, sample_cells
from .common import (DEFAULT_CHUNK_CELLS, _fold_in_data, _chunk_rows, _key_to_data, _map_row_chunks, _prior, _Prior, _static_hyper,
                     as_binary, fit_output, init, moments)

__all__ = ["MAPState", "MAPInfo", "map_init", "log_joint", "map_cell_gradients", "map_curvature_bound", "map_step",
           "fit_map", "fold_in_map", "ALGORITHM"]




class MAPState(NamedTuple):
    """Point estimates of the MAP baseline, with its Robbins-Monro counters. K' = K + 2 with biases.

    Parameters
    ----------
    U : jax.Array, shape (I, K'), float
        Row factors (fixed columns 1).
    V : jax.Array, shape (J, K'), float
        Column factors.
    z : jax.Array, shape (), float
        Global bias.
    u_fixed, v_fixed : jax.Array, shape (K',), float
        1.0 where the column is fixed to ones (biases), else 0.0, as in `SIBMState`.
    u_count : jax.Array, shape (I,), float
        Updates of each row so far.
    v_count : jax.Array, shape (J,), float
        Updates of each column so far.
    z_count : jax.Array, shape (), float
        Updates of z so far.

    Raises
    ------
    None of its own (a NamedTuple; `map_init` builds one).

    Source: ``002_5408d341cb9fc544.txt`` sec. 4.2 (the MAP baseline); the counters: project addition.
    """

    U: jax.Array
    V: jax.Array
    z: jax.Array
    u_fixed: jax.Array
    v_fixed: jax.Array
    u_count: jax.Array
    v_count: jax.Array
    z_count: jax.Array


class MAPInfo(NamedTuple):
    """Diagnostics of one MAP minibatch.

    The log joint costs O(I J K): `fit_map` records it every ``log_joint_every`` minibatches instead.

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


def map_init(key, data: Observations, K: int, hyper, *, init_mean_sd: float = 0.1, dtype=None) -> MAPState:
    """Initial MAP point: the means of `init` (key, data, K, hyper), counters at zero.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed.
    data : Observations
        The ones (`as_binary`), shape (I, J).
    K : int >= 1
        Latent factors (the seed's D).
    hyper : SIBMHyper-like
        Prior means and variances, ``biases``.
    init_mean_sd : float >= 0, default 0.1
        Sd of the initial means around the prior mean.
    dtype : numpy.float32 or numpy.float64, optional
        Float dtype (default that of ``data.values``).

    Returns
    -------
    MAPState
        U (I, K'), V (J, K'), z (); K' = K + 2 with biases.

    Raises
    ------
    ValueError
        As `init` (K, hyper, data, dtype).
    TypeError
        As `init` (key).

    Source: project addition (the seed's MAP baseline has no published initialization).
    """
    q = init(key, data, K, hyper, init_mean_sd=init_mean_sd, dtype=dtype)
    (ub, _), (vb, _), (zb, _) = moments(q)
    dt = ub.dtype
    return MAPState(ub, vb, zb, q.u_fixed, q.v_fixed, jnp.zeros(ub.shape[0], dt), jnp.zeros(vb.shape[0], dt),
                    jnp.zeros((), dt))


def log_joint(state: MAPState, data: Observations, hyper, *, chunk_cells: int = DEFAULT_CHUNK_CELLS) -> jax.Array:
    """log p(X, U, V, z) (eqs. 1-2) at a point, up to the Normal constants; chunked, O(I J K).

    Parameters
    ----------
    state : MAPState
        U (I, K'), V (J, K') and z () float (K' = K, plus 2 bias columns with biases).
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per row chunk.

    Returns
    -------
    jax.Array, shape (), float
        The log joint (JAX-differentiable), in the state's dtype.

    Raises
    ------
    ValueError
        For a bad ``hyper`` (a missing field, a non-finite value, a variance <= 0).

    Source: ``002_5408d341cb9fc544.txt`` eqs. (1)-(2) (the seed's MAP baseline, sec. 4.2).
    """
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
    """Noisy gradients and curvature bounds of the MAP objective for cells (i, j).

    The noisy objective is (1/c) log p(x_ij | u_i, v_j, z) + log p(u_i) + log p(v_j) + log p(z) with
    c = p(j|i) for u_i, p(i|j) for v_j, p(i, j) for z (as eq. 9), so that E_{j|i}[g_u] is the gradient
    of log p(X, U, V, z) in u_i (and likewise for v_j, z). Curvature bounds use sigma' <= 1/4
    (Boehning); fixed columns get zero gradient. (`map_step` uses the gradients only; its
    preconditioner is `map_curvature_bound`.)

    Parameters
    ----------
    st : MAPState
        The current point.
    prior : _Prior
        `common.prior_arrays` of the hyperparameters.
    i, j : jax.Array, shape (n,), int
        The cells.
    x : jax.Array, shape (n,), float
        0/1, their values.
    c_u, c_v, c_z : jax.Array, shape (n,), float
        p(j|i), p(i|j) and p(i, j) of each cell.

    Returns
    -------
    g_u, h_u : jax.Array, shape (n, K'), float
        Gradient and curvature bound in u_i.
    g_v, h_v : jax.Array, shape (n, K'), float
        The same in v_j.
    g_z, h_z : jax.Array, shape (n,), float
        The same in z. All in the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: package docstring (MAP baseline of ``002_5408d341cb9fc544.txt`` sec. 4.2; the rescaling
    c as in eq. (9); the Boehning curvature bound is a project addition).
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

    With sigma' <= 1/4, -d^2/du_i^2 log p = sum_j sigma'(a_ij) v_j v_j^T + I / prior_var <=
    (1/4) B^T B + I / prior_var (Boehning and Lindsay 1988; our choice for the seed's unpublished MAP
    baseline, seed 002 sec. 4.2), the same (K, K) matrix for every row. O(J K^2).

    Parameters
    ----------
    B : jax.Array, shape (J, K), float
        The other side's factors (V for a row of U; U for a column of V).
    free : jax.Array, shape (K,), bool
        The free columns of the side being updated.
    prior_var : jax.Array or float, shape ()
        Its prior variance.

    Returns
    -------
    jax.Array, shape (K, K), float
        A: the bound on the free block, the identity on fixed columns (so a solve leaves them
        unchanged); the dtype of ``B``.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: project addition (Boehning and Lindsay 1988) for the MAP baseline of
    ``002_5408d341cb9fc544.txt`` sec. 4.2.
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


def map_step(key, st: MAPState, data: Observations, hyper, *, sampler: Sampler | None = None, S: int = 1000,
             tau: float = 1.0, kappa: float = 0.7) -> tuple[MAPState, MAPInfo]:
    """One stochastic-gradient-ascent minibatch on log p(U, V, z | X) (the seed's "MAP" baseline).

    Blocks z, V, U in turn, on the same S cells: each row / column moves by rho * A^-1 g, g the
    per-row (column) average of the gradients of the noisy objective (1/c) log p(x_ij | .) + log priors
    with c as in eq. (9) (unbiased for the full gradient), A = `map_curvature_bound` (deterministic);
    rho = (tau + n)^(-kappa) per row, column and z (n: its updates so far). Cost O(S K + (I + J) K^2).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key (the cells).
    st : MAPState
        The current point.
    data : Observations
        The ones, shape (I, J).
    hyper : SIBMHyper-like
        Prior means and variances.
    sampler : Sampler, optional
        `make_sampler` of ``data`` (None: S-Biased, built on the host at every call: pass one).
    S : int >= 1, default 1000
        Cells per minibatch.
    tau : float > 0, default 1.0
        Robbins-Monro delay.
    kappa : float in (0.5, 1], default 0.7
        Robbins-Monro forgetting rate.

    Returns
    -------
    state : MAPState
        The new point (counters advanced).
    info : MAPInfo
        ``S``.

    Raises
    ------
    ValueError
        For tau, kappa outside the Robbins-Monro conditions, S < 1, a bad ``hyper`` (and, with
        ``sampler`` None, as `make_sampler`).

    Source: seed 002 sec. 4.2 ("MAP"); the preconditioner: project addition.
    """
    check_robbins_monro(tau, kappa)
    if sampler is None:
        sampler = make_sampler(data, "biased", dtype=st.U.dtype)
    if int(S) < 1:
        raise ValueError(f"S must be >= 1, got {S}")
    prior = _prior(hyper, st.U.dtype)
    dt = st.U.dtype
    new = _map_jit(key, st, sampler, data.shape, _pad_size(S), jnp.asarray(int(S)), prior,
                   jnp.asarray(tau, dt), jnp.asarray(kappa, dt), int(sampler.code) == 0)
    return new, MAPInfo(jnp.asarray(int(S), jnp.int32))


def fit_map(key, data, K: int, hyper, *, n_iter: int = 200, progress: bool = True, strategy: str = "biased",
            S: int = 1000, tau: float = 1.0, kappa: float = 0.7, log_joint_every: int = 0, checkpoint=None,
            checkpoint_every: int = 10, resume: bool = False, **init_kwargs) -> base.FitResult:
    """MAP by stochastic gradient ascent (the seed's "MAP" baseline): ``n_iter`` minibatches of S cells.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed (`base.as_key`).
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
        Cell sampling (`make_sampler`).
    S : int >= 1, default 1000
        Cells per minibatch (`map_step`).
    tau : float > 0, default 1.0
        Robbins-Monro delay.
    kappa : float in (0.5, 1], default 0.7
        Robbins-Monro forgetting rate.
    log_joint_every : int >= 0, default 0
        Record the log joint (O(I J K)) every this many minibatches (0: only at the end).
    checkpoint : str or path-like, optional
        A `vi_driver.fit` checkpoint (atomic ``.npz``), written every ``checkpoint_every`` minibatches
        and at the end: the MAPState (its Robbins-Monro counters included), the key stream and the
        log-joint trace.
    checkpoint_every : int >= 1, default 10
        Minibatches between checkpoints.
    resume : bool, default False
        Continue from an existing checkpoint, bit for bit the uninterrupted run
        (tests/custom_inference/test_sibm.py).
    **init_kwargs
        ``init_mean_sd`` and ``dtype`` of `map_init`.

    Returns
    -------
    base.FitResult
        The MAPState, the log joint at the recorded iterations (every ``log_joint_every``, and at the
        end), InferenceData with the point estimate as ``posterior`` (U, V, z; one chain, one draw), the
        MAPState fields (``variational_parameters``) and vi_trace (log_joint).

    Raises
    ------
    ValueError
        For bad inputs (data, K, hyper, n_iter, strategy, S, tau, kappa); ``checkpoint_every`` not an
        integer >= 1 with a ``checkpoint``; a checkpoint whose state does not match.
    TypeError
        For a bad key.
    OSError
        When the checkpoint is not writable.

    Source: seed 002 sec. 4.2; project addition.
    """
    vi_driver.check_fit_args(n_iter, 0.0, max_iter_name="n_iter")
    data = as_binary(data) if not isinstance(data, Observations) else as_binary(data, dtype=np.asarray(data.values).dtype)
    k_init, k_run = jax.random.split(base.as_key(key))
    st = map_init(k_init, data, K, hyper, **init_kwargs)
    sampler = make_sampler(data, strategy, dtype=np.asarray(st.U).dtype)
    data = jax.tree_util.tree_map(jnp.asarray, data)
    lj = functools.partial(log_joint, hyper=hyper)
    k_data, as_key = _key_to_data(k_run)  # the key stream travels in the checkpoint as raw key data

    def sweep(carry, t):
        st, k_data = carry
        k_run, k = jax.random.split(as_key(k_data))
        st, _ = map_step(k, st, data, hyper, sampler=sampler, S=S, tau=tau, kappa=kappa)
        record = (log_joint_every and (t + 1) % log_joint_every == 0) or t == n_iter - 1
        return (st, _key_to_data(k_run)[0]), (vi_driver.Report(elbo=lj(st, data)) if record else None)

    output = fit_output(data.shape, st.U.shape[1], "sibm_map_sga",
                        lambda st: (vi_driver.point_posterior({"U": st.U, "V": st.V, "z": st.z}), "point estimate"),
                        params=lambda st: st._asdict(), trace_names=("log_joint", "rel_change"),
                        final=lambda carry, res: carry[0], attrs={"strategy": strategy})
    options = vi_driver.FitOptions(max_iter=n_iter, progress=progress, checkpoint=checkpoint,
                                   checkpoint_every=checkpoint_every, resume=resume)
    return vi_driver.fit(ALGORITHM, data, options=options, output=output, key=key, K=K, hyper=hyper,
                         state=(st, k_data), sweep=sweep, desc=f"SIBM MAP ({strategy}, K={K})")


#: Newton step lengths tried per iteration of `fold_in_map` (the best one is taken per row).
_STEPS = tuple(0.5 ** n for n in range(10))


def _fold_in_map_impl(U, V, z, u_fixed, pos_sum, n_pos, prior, max_iter, tol, chunk):
    free = u_fixed == 0
    K = U.shape[1]
    steps = jnp.asarray(_STEPS, U.dtype)

    def rows(arrs, valid):
        u, ps, npos = arrs

        def objective(uu):  # (..., K) -> (...,): log p(x_u | u, V, z) + log N(u; prior), free columns
            a = uu @ V.T + z
            lik = jnp.sum(uu * ps, axis=-1) + npos * z - jnp.sum(jax.nn.softplus(a), axis=-1)
            return lik - jnp.sum(jnp.where(free, (uu - prior.u_bar0) ** 2, 0.0), axis=-1) / (2 * prior.u_tilde0)

        def body(carry):
            u, it, _ = carry
            a = u @ V.T + z
            s = jax.nn.sigmoid(a)
            g = jnp.where(free, ps - s @ V - (u - prior.u_bar0) / prior.u_tilde0, 0.0)
            H = jnp.einsum("cj,jk,jl->ckl", s * (1 - s), V, V) + jnp.eye(K, dtype=u.dtype) / prior.u_tilde0
            ff = free[:, None] & free[None, :]
            H = jnp.where(ff, H, 0.0) + jnp.diag(jnp.where(free, 0.0, 1.0).astype(u.dtype))
            d = jnp.linalg.solve(H, g[..., None])[..., 0]
            cand = u[None] + steps[:, None, None] * d[None]  # (n_steps, c, K)
            f = objective(cand)
            best = jnp.argmax(f, axis=0)
            up = f[best, jnp.arange(u.shape[0])] > objective(u)
            new = jnp.where(up[:, None], cand[best, jnp.arange(u.shape[0])], u)
            return new, it + 1, jnp.max(jnp.where(valid[:, None], jnp.abs(new - u), 0.0))

        init = (u, jnp.asarray(0), jnp.asarray(jnp.inf, u.dtype))
        u, it, ch = jax.lax.while_loop(lambda c: (c[1] < max_iter) & (c[2] > tol), body, init)
        return u, it, ch

    n = U.shape[0]
    out, its, chs = _map_row_chunks(rows, (U, pos_sum, n_pos), n, chunk)
    return out.reshape(-1, K)[:n], jnp.max(its), jnp.max(chs)


_fold_in_map_jit = jax.jit(_fold_in_map_impl, static_argnames=("chunk",))


def fold_in_map(state: MAPState, data: Observations, hyper, *, max_iter: int = 100, tol: float = 1e-12,
                chunk_cells: int = DEFAULT_CHUNK_CELLS):
    """MAP rows of U for new users (the rows of ``data``) with V and z of ``state`` held fixed.

    Each row maximizes log p(x_u | u, V, z) + log p(u) = sum_j [x_uj a_uj - log(1 + e^a_uj)]
    - |u - u_bar0|^2 / (2 u_tilde0) (free columns; a_uj = u . v_j + z), the part of `log_joint` that
    depends on u. That is strictly concave (a logistic regression with a Gaussian prior), so its
    maximizer is unique; found by Newton steps (exact gradient and Hessian, K x K per row) with the
    best of the step lengths 1, 1/2, ..., 1/512 (a step is taken only if it increases the objective),
    until no coordinate moves more than ``tol``. Fixed (bias) columns stay 1.

    Parameters
    ----------
    state : MAPState
        U (I_new, K) the start for the new users (e.g. the prior mean) and V (J, K), z, u_fixed,
        v_fixed of the fit (the counters are not read).
    data : Observations
        The new users' ones, shape (I_new, J).
    hyper : SIBMHyper-like
        The fit's priors.
    max_iter : int >= 1, default 100
        Newton iterations at most.
    tol : float >= 0, default 1e-12
        Stop when no coordinate moves more than this.
    chunk_cells : int, default DEFAULT_CHUNK_CELLS
        Cells per row chunk.

    Returns
    -------
    state : MAPState
        ``state`` with the new U.
    n_iter : int
        The most iterations any row chunk ran.
    last_change : float
        The largest coordinate move of the last iteration.

    Raises
    ------
    ValueError
        For a shape mismatch between ``state`` and ``data``, ``max_iter`` < 1, ``tol`` < 0, a bad
        ``hyper``, or data that is not binary (`as_binary`).

    Source: ``002_5408d341cb9fc544.txt`` eqs. (1)-(2) (the log joint of the MAP baseline, sec. 4.2);
    the fold-in and its Newton solver are a project addition.
    """
    data = _fold_in_data(data, state.U.shape[0], state.V.shape[0], max_iter, tol)
    prior = _prior(hyper, state.U.dtype)
    I, J = data.shape
    rows, cols = jnp.asarray(data.rows), jnp.asarray(data.cols)
    pos_sum = jax.ops.segment_sum(state.V[cols], rows, num_segments=I)
    n_pos = jax.ops.segment_sum(jnp.ones(rows.shape, state.U.dtype), rows, num_segments=I)
    U, it, ch = _fold_in_map_jit(state.U, state.V, state.z, state.u_fixed, pos_sum, n_pos, prior,
                                 jnp.asarray(int(max_iter)), jnp.asarray(tol, state.U.dtype),
                                 _chunk_rows(I, J, chunk_cells // max(state.U.shape[1], 1)))
    return state._replace(U=U), int(it), float(ch)


#: The protocol declaration (`custom_inference.base`).
ALGORITHM = base.Algorithm("sibm-map", "map", map_init, map_step, log_joint, "log_joint",
                           {"U": ("user", "component"), "V": ("item", "component"), "z": (),
                            "u_fixed": ("component",), "v_fixed": ("component",), "u_count": ("user",),
                            "v_count": ("item",), "z_count": ()},
                           "002_5408d341cb9fc544.txt sec. 4.2 (MAP baseline; preconditioned SGA: ours)").check()
