r"""Gibbs sampler of scalable Bayesian matrix factorization (SBMF), with the residual cache.

Source: ``004_90693a0965f06816.txt``, chapter 3: model eqs. (3.1)-(3.13), conditional of
u_ik eqs. (3.14)-(3.16), residual cache eq. (3.17), Algorithm 2 (with the hyperparameter
lines corrected: see `validation.models.sbmf.ERRATA`), prediction eq. (3.18).

Complete conditionals (ours, each checked against the brute-force normalized conditional
of the log joint in `validation.models.sbmf`). With e_ij = r_ij - (mu + alpha_i + beta_j + u_i . v_j)
cached for the N observed cells (eq. 3.17):

    sigma_x | mu_x, x  ~ Gamma(alpha0 + (n + 1)/2, beta0 + (nu0 (mu_x - mu0)^2 + sum (x - mu_x)^2)/2)
    mu_x | sigma_x, x  ~ N((nu0 mu0 + sum x)/(nu0 + n), 1/((nu0 + n) sigma_x))
          for x = alpha (n = I), beta (n = J), u_.k (n = I), v_.k (n = J)     (Alg. 2 lines 2-10)
    tau | -            ~ Gamma(a0 + N/2, b0 + sum e_ij^2 / 2)                  (line 12)
    mu | -             ~ N(h/P, 1/P), P = sigma_g + tau N, h = sigma_g mu_g + tau sum (e_ij + mu)   (line 14)
    alpha_i | -        ~ P = sigma_alpha + tau |Omega_i|, h = sigma_alpha mu_alpha + tau sum_j (e_ij + alpha_i)  (line 20)
    u_ik | -           ~ P = sigma_uk + tau sum_j v_jk^2, h = sigma_uk mu_uk + tau sum_j v_jk (e_ij + u_ik v_jk)  (3.15), (3.17)
    beta_j, v_jk likewise over the users who rated item j.

After each block the cache is updated in place (e += old - new, times v_jk for u_ik),
so a sweep costs O(N K + (I + J) K) time and O(N + (I + J) K) memory: every sum over
Omega_i is a segment sum (scatter-add in entry order) over the N entries, all users (items)
at once, visited in chunks of ``ENTRY_CHUNK`` entries together with the cache update of the
previous block, so that the cache is the only (N,) float array (issue 14: Netflix size, 1e8
ratings); `residuals` builds the cache in the same chunks (no (N, K) gather).

Style: `init` / `step` over a `State` of current draws (BlackJAX-like), the conditionals
as public functions, ``ALGORITHM`` / ``SPEC`` (declarations for `custom_inference.mcmc_driver`),
`sample` (a thin call of that driver, `arviz.InferenceData`) and `predict`.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jax.sharding import PartitionSpec as P

from . import arviz_io, base, mcmc_driver, sharding
from .chunks import over_chunks
from .data import Observations
from .gauge import gauge_walk
from .gaussian import sample_ng_mean, sample_ng_precision, sample_normal_natural

__all__ = [
    "State",
    "Info",
    "init",
    "residuals",
    "tau_conditional",
    "mu_conditional",
    "alpha_conditional",
    "beta_conditional",
    "u_conditional",
    "v_conditional",
    "GaugeHyper",
    "gauge_log_density",
    "gauge_act",
    "apply_gauge",
    "step",
    "log_joint",
    "sample",
    "predict",
    "HYPER_FIELDS",
    "ALGORITHM",
    "SPEC",
]

HYPER_FIELDS = ("mu_g", "sigma_g", "a0", "b0", "mu0", "nu0", "alpha0", "beta0")
_SOURCE = "004_90693a0965f06816.txt, ch. 3, eqs. 3.1-3.18, Algorithm 2 (corrected)"


class State(NamedTuple):
    """Current draws of one chain (float32 or float64), a NamedTuple (a JAX pytree).

    Parameters
    ----------
    mu : jax.Array, shape (), float
        Global bias.
    alpha : jax.Array, shape (I,), float
        User biases.
    beta : jax.Array, shape (J,), float
        Item biases.
    U : jax.Array, shape (I, K), float
        User factors.
    V : jax.Array, shape (J, K), float
        Item factors.
    tau : jax.Array, shape (), float
        Noise precision.
    mu_alpha, sigma_alpha : jax.Array, shape (), float
        Hyper mean and precision of the user biases.
    mu_beta, sigma_beta : jax.Array, shape (), float
        Hyper mean and precision of the item biases.
    mu_u, sigma_u : jax.Array, shape (K,), float
        Hyper means and precisions of the user factor columns.
    mu_v, sigma_v : jax.Array, shape (K,), float
        Hyper means and precisions of the item factor columns.
    e : jax.Array, shape (N,), float
        The residual cache r_ij - (mu + alpha_i + beta_j + u_i . v_j) in the order of the
        observations (sharded: the padded length D B, 0 at padded entries).

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``004_90693a0965f06816.txt`` eqs. (3.1)-(3.13) (the parameters) and (3.17) (the cache).
    """

    mu: jax.Array
    alpha: jax.Array
    beta: jax.Array
    U: jax.Array
    V: jax.Array
    tau: jax.Array
    mu_alpha: jax.Array
    sigma_alpha: jax.Array
    mu_beta: jax.Array
    sigma_beta: jax.Array
    mu_u: jax.Array
    sigma_u: jax.Array
    mu_v: jax.Array
    sigma_v: jax.Array
    e: jax.Array


class Info(NamedTuple):
    """Per-sweep diagnostics of `step`, of the state the sweep returns.

    Parameters
    ----------
    log_joint : jax.Array, shape (), float
        Eq. (3.13), constants included, computed from the cache.
    sse : jax.Array, shape (), float
        Sum of squared residuals.
    gauge_accept : jax.Array, shape (), float
        Acceptance rate of the sweep's gauge moves (0 when off).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info; log joint of
    ``004_90693a0965f06816.txt`` eq. (3.13)).
    """

    log_joint: jax.Array
    sse: jax.Array
    gauge_accept: jax.Array


# -- checks ----------------------------------------------------------------------


def _check_hyper(hyper) -> None:
    for name in HYPER_FIELDS:
        if not hasattr(hyper, name):
            raise ValueError(f"hyper must have field {name!r} (use ppl_models.sbmf.SBMFHyper)")
        value = getattr(hyper, name)
        if not np.isfinite(value):
            raise ValueError(f"hyper.{name} must be finite, got {value!r}")
    for name in ("sigma_g", "a0", "b0", "nu0", "alpha0", "beta0"):
        if not getattr(hyper, name) > 0:
            raise ValueError(f"hyper.{name} must be > 0, got {getattr(hyper, name)!r}")


def _check_K(K) -> int:
    if isinstance(K, bool) or int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    return int(K)


def _check_obs(obs) -> None:
    if not isinstance(obs, Observations):
        raise TypeError(f"obs must be custom_inference.data.Observations (kind='real'), got {type(obs).__name__}")


# -- state ---------------------------------------------------------------------------


#: Nonzeros per chunk in the loops over the entries (`residuals`, the sweep's sums and cache
#: updates): their (chunk,) and (chunk, K) temporaries stay small, so no (N, K) array and no
#: extra (N,) temporaries are formed however many ratings there are (issue 14).
ENTRY_CHUNK = 16384


def residuals(state: State, obs: Observations, *, chunk: int = ENTRY_CHUNK) -> jax.Array:
    """e_ij = r_ij - (mu + alpha_i + beta_j + u_i . v_j) from scratch, shape (N,). O(N K).

    The entries are visited in chunks (`chunks.over_chunks`), so the gathers u_i, v_j are
    (chunk, K), never (N, K); each entry's arithmetic does not depend on ``chunk``.

    Parameters
    ----------
    state : State
        Shapes in its docstring; its cache ``e`` is not read.
    obs : Observations, shape (I, J), or sharding.ShardedObservations
        The N ratings (sharded: each device computes its own block).
    chunk : int >= 1, keyword-only, default `ENTRY_CHUNK`
        Entries per chunk (static).

    Returns
    -------
    jax.Array, shape (N,) (sharded: (D B,), 0 at padded entries), the state's float dtype
        The residuals, in the order of the observations.

    Raises
    ------
    None of its own (no index checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eq. (3.17) (the residual cache).
    """
    factors = (state.mu, state.alpha, state.beta, state.U, state.V)
    if isinstance(obs, sharding.ShardedObservations):  # each device its block; 0 at padded entries
        def on_block(factors, block, red):
            return red.mask(_residuals_chunked(factors, block, chunk))

        return sharding.map_blocks(on_block, obs, (factors,), (P(),), obs.spec)
    return _residuals_chunked(factors, obs, chunk)


def _residuals_chunked(factors, obs: Observations, chunk: int) -> jax.Array:
    """`residuals` on one block of entries, in chunks of ``chunk`` written into one (N,) array."""
    mu, alpha, beta, U, V = factors
    n = jnp.shape(obs.values)[0]
    dt = jnp.result_type(mu, alpha, beta, U, V)

    def body(start, size, e):
        rows = jax.lax.dynamic_slice_in_dim(obs.rows, start, size)
        cols = jax.lax.dynamic_slice_in_dim(obs.cols, start, size)
        y = jax.lax.dynamic_slice_in_dim(obs.values, start, size)
        pred = mu + alpha[rows] + beta[cols] + jnp.sum(U[rows] * V[cols], axis=1)
        return jax.lax.dynamic_update_slice_in_dim(e, y.astype(pred.dtype) - pred, start, 0)

    # zeros_like the values: the same device-variance as the block inside shard_map
    return over_chunks(n, chunk, body, jnp.zeros_like(jnp.asarray(obs.values), dtype=dt))


def init(key, obs: Observations, K: int, hyper, *, scale: float = 0.1, dtype=None) -> State:
    """Starting point of thesis sec. 3.3.2: Theta = (mu, alpha, beta, U, V) ~ N(0, scale^2)
    with scale^2 = 0.01, hyper means 0; precisions 1 and tau = 1 (all of them are redrawn
    before they are first used in a sweep). Different keys give different starts.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    obs : Observations, shape (I, J)
        The N ratings.
    K : int >= 1
        Number of components.
    hyper : ppl_models.sbmf.SBMFHyper or object
        Not read (the signature of the protocol).
    scale : float, keyword-only, default 0.1
        Standard deviation of the starting Theta.
    dtype : numpy dtype, keyword-only, optional
        float32 or float64 (default: that of ``obs.values``).

    Returns
    -------
    State
        Shapes in its docstring, dtype ``dtype``, with the cache e computed from scratch.

    Raises
    ------
    ValueError
        K is not an integer >= 1 (a non-numeric K raises TypeError or ValueError from ``int``); a
        ``dtype`` other than float32 / float64 (`base.compute_dtype`).

    Source: ``004_90693a0965f06816.txt`` sec. 3.3.2 (initialization).
    """
    K = _check_K(K)
    dtype = base.compute_dtype(dtype, jnp.asarray(obs.values).dtype)
    I, J = obs.n_rows, obs.n_cols
    ks = jax.random.split(key, 5)
    z = lambda k, shape: (scale * jax.random.normal(k, shape)).astype(dtype)  # noqa: E731
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    state = State(
        mu=z(ks[0], ()), alpha=z(ks[1], (I,)), beta=z(ks[2], (J,)), U=z(ks[3], (I, K)), V=z(ks[4], (J, K)),
        tau=one, mu_alpha=zero, sigma_alpha=one, mu_beta=zero, sigma_beta=one,
        mu_u=jnp.zeros(K, dtype), sigma_u=jnp.ones(K, dtype), mu_v=jnp.zeros(K, dtype), sigma_v=jnp.ones(K, dtype),
        e=None,  # filled below, computed in chunks (no (N, K) gather)
    )
    return state._replace(e=residuals(state, obs))


# -- complete conditionals (natural parameters) --------------------------------------


def tau_conditional(state: State, obs: Observations, hyper, *, red: sharding.Reducer = sharding.LOCAL):
    """(shape, rate) of tau | - : Gamma(a0 + N/2, b0 + sum e^2 / 2). Algorithm 2 line 12.

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J)
        The N ratings (rows, cols int32 (N,), values float (N,)).
    hyper : ppl_models.sbmf.SBMFHyper or object
        SBMF hyperparameters Theta_0 (float fields mu_g, sigma_g, a0, b0, mu0, nu0, alpha0, beta0).
    red : sharding.Reducer, keyword-only, default `sharding.LOCAL`
        How sums over the entries are combined (one device: plain sums; a sharded block: psum-ed,
        padded entries masked).

    Returns
    -------
    shape : jax.Array, shape (), the state's dtype
        a0 + N/2.
    rate : jax.Array, shape (), the state's dtype
        b0 + sum e^2 / 2.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 line 12 (with eq. (3.13)).
    """
    n = red.count(state.e.shape[0])
    return jnp.asarray(hyper.a0 + 0.5 * n, state.e.dtype), hyper.b0 + 0.5 * red.sum(state.e**2)


def mu_conditional(state: State, obs: Observations, hyper, *, red: sharding.Reducer = sharding.LOCAL):
    """(precision, precision x mean) of mu | -: P = sigma_g + tau N, h = sigma_g mu_g + tau sum (e + mu).
    Algorithm 2 line 14.

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J)
        The N ratings (rows, cols int32 (N,), values float (N,)).
    hyper : ppl_models.sbmf.SBMFHyper or object
        SBMF hyperparameters Theta_0 (float fields mu_g, sigma_g, a0, b0, mu0, nu0, alpha0, beta0).
    red : sharding.Reducer, keyword-only, default `sharding.LOCAL`
        How sums over the entries are combined (one device: plain sums; a sharded block: psum-ed,
        padded entries masked).

    Returns
    -------
    precision : jax.Array, shape (), the state's dtype
        P = sigma_g + tau N.
    precision_times_mean : jax.Array, shape (), the state's dtype
        h = sigma_g mu_g + tau sum (e + mu).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 line 14.
    """
    n = red.count(state.e.shape[0])
    return hyper.sigma_g + state.tau * n, hyper.sigma_g * hyper.mu_g + state.tau * red.sum(red.mask(state.e + state.mu))


def _seg(x, ids, n, sorted_):
    return jax.ops.segment_sum(x, ids, num_segments=n, indices_are_sorted=sorted_)


def alpha_conditional(state: State, obs: Observations, hyper):
    """(precision, precision x mean), each (I,), of alpha_i | -: P = sigma_alpha + tau |Omega_i|,
    h = sigma_alpha mu_alpha + tau sum_{j in Omega_i} (e_ij + alpha_i). Algorithm 2 line 20.

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J)
        The N ratings (rows int32 (N,) non-decreasing (user-sorted), cols int32 (N,), values float (N,)).
    hyper : object
        Unused (the signature of the conditionals).

    Returns
    -------
    precision : jax.Array, shape (I,), the state's dtype
        P_i.
    precision_times_mean : jax.Array, shape (I,), the state's dtype
        h_i.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 line 20.
    """
    cnt = _seg(jnp.ones_like(state.e), obs.rows, obs.n_rows, True)
    s = _seg(state.e + state.alpha[obs.rows], obs.rows, obs.n_rows, True)
    return state.sigma_alpha + state.tau * cnt, state.sigma_alpha * state.mu_alpha + state.tau * s


def beta_conditional(state: State, obs: Observations, hyper):
    """(precision, precision x mean), each (J,), of beta_j | -; as `alpha_conditional` over the
    users of item j. Algorithm 2 line 32.

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J)
        The N ratings (rows, cols int32 (N,), values float (N,)).
    hyper : object
        Unused (the signature of the conditionals).

    Returns
    -------
    precision : jax.Array, shape (J,), the state's dtype
        P_j = sigma_beta + tau |Omega_j|.
    precision_times_mean : jax.Array, shape (J,), the state's dtype
        h_j = sigma_beta mu_beta + tau sum_{i in Omega_j} (e_ij + beta_j).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 line 32.
    """
    cnt = _seg(jnp.ones_like(state.e), obs.cols, obs.n_cols, False)
    s = _seg(state.e + state.beta[obs.cols], obs.cols, obs.n_cols, False)
    return state.sigma_beta + state.tau * cnt, state.sigma_beta * state.mu_beta + state.tau * s


def _factor_conditional(e, own, other, ids, n, sigma, mean, tau, k, sorted_):
    o = other[:, k]
    x = own[:, k][ids]
    prec = sigma[k] + tau * _seg(o * o, ids, n, sorted_)
    h = sigma[k] * mean[k] + tau * _seg(o * (e + x * o), ids, n, sorted_)
    return prec, h, o


def u_conditional(state: State, obs: Observations, hyper, k):
    """(precision, precision x mean), each (I,), of u_ik | - for one k (all users at once):
    eqs. (3.15) and (3.17): P = sigma_uk + tau sum_j v_jk^2, h = sigma_uk mu_uk + tau sum_j v_jk (e_ij + u_ik v_jk).

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J)
        The N ratings (rows int32 (N,) non-decreasing (user-sorted), cols int32 (N,), values float (N,)).
    hyper : object
        Unused (the signature of the conditionals).
    k : int or jax.Array, shape (), int
        The column, in 0..K-1 (may be traced).

    Returns
    -------
    precision : jax.Array, shape (I,), the state's dtype
        P of each u_ik.
    precision_times_mean : jax.Array, shape (I,), the state's dtype
        h of each u_ik.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. (3.14)-(3.17).
    """
    V_at = state.V[obs.cols]
    prec, h, _ = _factor_conditional(state.e, state.U, V_at, obs.rows, obs.n_rows, state.sigma_u, state.mu_u, state.tau, k, True)
    return prec, h


def v_conditional(state: State, obs: Observations, hyper, k):
    """(precision, precision x mean), each (J,), of v_jk | - for one k (all items at once). Algorithm 2 line 37.

    P = sigma_vk + tau sum_i u_ik^2, h = sigma_vk mu_vk + tau sum_i u_ik (e_ij + u_ik v_jk).

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J)
        The N ratings (rows, cols int32 (N,), values float (N,)).
    hyper : object
        Unused (the signature of the conditionals).
    k : int or jax.Array, shape (), int
        The column, in 0..K-1 (may be traced).

    Returns
    -------
    precision : jax.Array, shape (J,), the state's dtype
        P of each v_jk.
    precision_times_mean : jax.Array, shape (J,), the state's dtype
        h of each v_jk.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 line 37 (the item-side twin of eqs.
    (3.15)-(3.17)).
    """
    U_at = state.U[obs.rows]
    prec, h, _ = _factor_conditional(state.e, state.V, U_at, obs.cols, obs.n_cols, state.sigma_v, state.mu_v, state.tau, k, False)
    return prec, h


def _entry_pass(e, ids, n, sorted_, red: sharding.Reducer, change=None, terms=None, n_terms: int = 0,
                chunk: int = ENTRY_CHUNK):
    """One pass over the entries in chunks of ``chunk``: the cache is updated, e_c += change(at, mask)
    (when ``change`` is given), and the ``n_terms`` arrays terms(at, mask, e_c) of the updated chunk
    are segment-summed over ``ids`` into ``n`` segments (then psum-ed by ``red``).

    ``at(x)`` slices an entry array to the chunk, ``mask(x)`` zeroes the chunk's padded entries
    (`sharding.Reducer.mask` on the chunk). Each entry's arithmetic is that of one pass over all N
    entries at once, and a segment sum is a scatter-add in entry order either way, so the result
    does not depend on ``chunk``; the temporaries are (chunk,). Returns (e, tuple of (n,) sums).
    """
    def body(start, size, carry):
        e, sums = carry

        def at(x):
            return jax.lax.dynamic_slice_in_dim(x, start, size)

        w = None if red.weight is None else at(red.weight)

        def mask(x):
            return x if w is None else x * w

        if change is not None:
            e = jax.lax.dynamic_update_slice_in_dim(e, at(e) + change(at, mask), start, 0)
        # read back from the updated cache: nothing reads the old e after the update, so XLA
        # writes it in place (reusing the old chunk made it copy all of e per chunk: O(N^2 / chunk))
        e_c = at(e)
        if n_terms:
            ids_c = at(ids)
            sums = tuple(acc.at[ids_c].add(t, indices_are_sorted=sorted_, mode="drop")
                         for acc, t in zip(sums, terms(at, mask, e_c)))
        return e, sums

    # zeros_like e: the same device-variance as the block inside shard_map
    sums = tuple(jnp.zeros_like(e, shape=(n,)) for _ in range(n_terms))
    e, sums = over_chunks(e.shape[0], chunk, body, (e, sums))
    if red.axis is not None:
        sums = tuple(jax.lax.psum(x, red.axis) for x in sums)
    return e, sums


def _side(key, e, bias, F, other_F, sigma_b, mean_b, sigma_f, mean_f, tau, ids, other_ids, n, sorted_,
          red: sharding.Reducer = sharding.LOCAL, chunk: int = ENTRY_CHUNK):
    """Bias then the K factor columns of one side (users or items), all rows in parallel.

    ``red`` turns the sums over the entries at hand into sums over all entries (`sharding.Reducer`):
    `sharding.LOCAL` on one device (plain segment sums), psum-ed segment sums and padding masks
    on one block of a sharded run (`step` on a `sharding.ShardedObservations`).

    The bias is handled as column 0 of the factors whose partner column is all ones: its
    conditional (count, sum of e + alpha_i) is then the factors' formula with o = 1, exactly (o o = 1,
    o (e + a o) = e + a; at padded entries o = 0 and e = 0). The entries are visited in chunks
    (`_entry_pass`), K + 2 passes: column k's sums fused with the cache update of column k - 1,
    then the last update. Every value is that of the unchunked sweep (same operations per entry,
    the segment sums in entry order), and no (N,) temporary is formed besides the cache.
    """
    k_b, k_f = jax.random.split(key)
    K = F.shape[1]
    dt = F.dtype
    own = jnp.concatenate([jnp.reshape(bias, (-1, 1)).astype(dt), F], axis=1)  # (n, K + 1)
    other = jnp.concatenate([jnp.ones((other_F.shape[0], 1), dt), other_F], axis=1)
    sigma = jnp.concatenate([jnp.reshape(sigma_b, (1,)).astype(dt), sigma_f])
    mean = jnp.concatenate([jnp.reshape(mean_b, (1,)).astype(dt), mean_f])
    keys = jnp.concatenate([k_b[None], jax.vmap(lambda c: jax.random.fold_in(k_f, c))(jnp.arange(K))])

    def partner(k, at, mask):  # v_jk at each entry of the chunk (1 for the bias); 0 at padding
        return mask(jnp.take(other, k, axis=1)[at(other_ids)])

    def body(k, carry):
        own, e, delta = carry
        f_old = jnp.take(own, k, axis=1)

        def change(at, mask):  # column k - 1's update of the cache (delta = 0 before column 0)
            return partner(jnp.maximum(k - 1, 0), at, mask) * delta[at(ids)]

        def terms(at, mask, e_c):
            o = partner(k, at, mask)
            return o * o, o * (e_c + f_old[at(ids)] * o)

        e, (oo, oe) = _entry_pass(e, ids, n, sorted_, red, change, terms, 2, chunk)
        prec = jnp.take(sigma, k) + tau * oo
        h = jnp.take(sigma, k) * jnp.take(mean, k) + tau * oe
        f_new = sample_normal_natural(keys[k], prec, h)
        return own.at[:, k].set(f_new), e, f_old - f_new

    own, e, delta = jax.lax.fori_loop(0, K + 1, body, (own, e, jnp.zeros_like(own, shape=(own.shape[0],))))
    e, _ = _entry_pass(e, ids, n, sorted_, red, lambda at, mask: partner(K, at, mask) * delta[at(ids)], chunk=chunk)
    return own[:, 0].astype(jnp.result_type(bias)), own[:, 1:], e


def _norm_lp(x, mean, prec):
    return 0.5 * (jnp.log(prec) - jnp.log(2 * jnp.pi)) - 0.5 * prec * (x - mean) ** 2


def _gamma_lp(x, shape, rate):
    return shape * jnp.log(rate) - gammaln(shape) + (shape - 1) * jnp.log(x) - rate * x


def log_joint(state: State, obs, hyper, *, from_cache: bool = True) -> jax.Array:
    """log p(R, Theta, Theta_H | Theta_0), eq. (3.13), all constants included.

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J), or sharding.ShardedObservations
        The N ratings, or the same split over devices (the cache is then sharded, 0 at padded
        entries, and N the real count).
    hyper : ppl_models.sbmf.SBMFHyper or object
        SBMF hyperparameters Theta_0 (float fields mu_g, sigma_g, a0, b0, mu0, nu0, alpha0, beta0).
    from_cache : bool, keyword-only, default True
        True uses the cached residuals (O(N + (I+J)K)); False recomputes them (O(N K)).

    Returns
    -------
    jax.Array, shape (), the state's dtype
        The log joint in nats.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eq. (3.13).
    """
    e = state.e if from_cache else residuals(state, obs)
    n = obs.nnz if isinstance(obs, sharding.ShardedObservations) else e.shape[0]
    return _log_joint_given(state, hyper, n, jnp.sum(e**2))


def _log_joint_given(state: State, hyper, n, sse) -> jax.Array:
    """`log_joint` given N (``n``) and the sum of squared residuals ``sse``."""
    h = hyper
    lp = 0.5 * n * (jnp.log(state.tau) - jnp.log(2 * jnp.pi)) - 0.5 * state.tau * sse
    lp += _norm_lp(state.mu, h.mu_g, h.sigma_g)
    for x, m, s in ((state.alpha, state.mu_alpha, state.sigma_alpha), (state.beta, state.mu_beta, state.sigma_beta),
                    (state.U, state.mu_u, state.sigma_u), (state.V, state.mu_v, state.sigma_v)):
        lp += jnp.sum(_norm_lp(x, m, s)) + jnp.sum(_gamma_lp(s, h.alpha0, h.beta0)) + jnp.sum(_norm_lp(m, h.mu0, h.nu0 * s))
    return lp + _gamma_lp(state.tau, h.a0, h.b0)


def _hyper_block(key, state: State, hyper) -> State:
    """Algorithm 2 lines 2-10, corrected: each precision given its mean, then the mean given
    the new precision (shared helpers of `custom_inference.gaussian`).

    The pairs (mu_alpha, sigma_alpha), (mu_uk, sigma_uk) are conditionally independent of each
    other given alpha and U (and likewise on the item side), so the user-side pairs are drawn
    in one call on the (I, K + 1) array [alpha, U] and the item side on [beta, V]: the same
    distribution as the printed one-by-one order, with two Gamma samplers instead of 2K + 2
    (each one is a rejection loop that XLA compiles separately).
    """
    ks = jax.random.split(key, 4)
    h = hyper
    dt = state.e.dtype
    out = {}
    for side, (x, m, names), (k_s, k_m) in (
        ("user", (jnp.concatenate([state.alpha[:, None], state.U], axis=1), jnp.concatenate([state.mu_alpha[None], state.mu_u]),
                  ("alpha", "u")), (ks[0], ks[1])),
        ("item", (jnp.concatenate([state.beta[:, None], state.V], axis=1), jnp.concatenate([state.mu_beta[None], state.mu_v]),
                  ("beta", "v")), (ks[2], ks[3])),
    ):
        sigma = sample_ng_precision(k_s, x, m, h.mu0, h.nu0, h.alpha0, h.beta0, axis=0).astype(dt)
        mean = sample_ng_mean(k_m, x, sigma, h.mu0, h.nu0, axis=0).astype(dt)
        out[f"sigma_{names[0]}"], out[f"sigma_{names[1]}"] = sigma[0], sigma[1:]
        out[f"mu_{names[0]}"], out[f"mu_{names[1]}"] = mean[0], mean[1:]
    return state._replace(**out)


class GaugeHyper(NamedTuple):
    """The hyperparameters a gauge move changes, a NamedTuple (a JAX pytree).

    Parameters
    ----------
    mu_u, sigma_u : jax.Array, shape (K,), float
        Hyper means and precisions of the user factor columns.
    mu_v, sigma_v : jax.Array, shape (K,), float
        Hyper means and precisions of the item factor columns.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (see `gauge_log_density`).
    """

    mu_u: jax.Array
    sigma_u: jax.Array
    mu_v: jax.Array
    sigma_v: jax.Array


def gauge_log_density(hyper):
    r"""Log density of the scale gauge at the moved hyperparameters, for `custom_inference.gauge`.

    The gauge acts by column scalings A = diag(c) (SBMF's independent per-column priors are not
    invariant under shears): u_.k -> c_k u_.k, mu_uk -> c_k mu_uk, sigma_uk -> sigma_uk / c_k^2
    and v_.k -> v_.k / c_k, mu_vk -> mu_vk / c_k, sigma_vk -> c_k^2 sigma_vk; everything else
    (and the residual cache) unchanged. In log p(T_A x) + log|det J_A| - log p(x) (eq. 3.13;
    derivation ours) the likelihood and the factors' normal kernels are invariant; the factors'
    log precisions (-I log c_k, +J log c_k) cancel the Jacobian of U and V; those of the means'
    priors (-+log c_k) cancel the means' Jacobian; the Gamma (alpha0 - 1) log sigma terms and the
    sigmas' Jacobian (-+2 log c_k each) cancel between the user and item sides. What is left is

        log_density = sum_k [ -beta0 sigma_uk' - nu0/2 sigma_uk' (mu_uk' - mu0)^2
                              -beta0 sigma_vk' - nu0/2 sigma_vk' (mu_vk' - mu0)^2 ]

    with the primed values after the move; O(K). Checked against the program's log joint plus
    the Jacobian in `validation.models.sbmf.gauge_check`.

    Parameters
    ----------
    hyper : ppl_models.sbmf.SBMFHyper or object
        SBMF hyperparameters Theta_0 (float fields mu_g, sigma_g, a0, b0, mu0, nu0, alpha0, beta0).

    Returns
    -------
    callable
        ``log_density(g, A) -> jax.Array`` of shape () (traceable): ``g`` a `GaugeHyper`, ``A``
        (K, K) unused (the target is separable).

    Raises
    ------
    None of its own.

    Source: project addition (the gauge move of `custom_inference.gauge`; derivation above).
    """
    h = hyper

    def log_density(g: GaugeHyper, A):
        out = jnp.zeros((), g.mu_u.dtype)
        for sigma, mu in ((g.sigma_u, g.mu_u), (g.sigma_v, g.mu_v)):
            out = out - jnp.sum(h.beta0 * sigma + 0.5 * h.nu0 * sigma * (mu - h.mu0) ** 2)
        return out

    return log_density


def gauge_act(g: GaugeHyper, k, l, z) -> GaugeHyper:
    """Scale column k by c = e^z (``l`` is k: the walk runs without shears), O(1).

    Parameters
    ----------
    g : GaugeHyper
        Each field (K,) float.
    k : jax.Array, shape (), int
        The column scaled.
    l : jax.Array, shape (), int
        Equal to ``k`` (not read).
    z : jax.Array, shape (), float
        Log of the scale c.

    Returns
    -------
    GaugeHyper
        The same shapes and dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: project addition (see `gauge_log_density`).
    """
    c = jnp.exp(z)
    return GaugeHyper(g.mu_u.at[k].multiply(c), g.sigma_u.at[k].divide(c * c), g.mu_v.at[k].divide(c),
                      g.sigma_v.at[k].multiply(c * c))


def apply_gauge(state: State, A) -> State:
    """T_A of `gauge_log_density` for a diagonal A; the predictions and the cache e are unchanged.

    Parameters
    ----------
    state : State
        The current draws (shapes in its docstring).
    A : jax.Array, shape (K, K), float
        Only its diagonal c is read: U * c, V / c and the hyperparameters moved along.

    Returns
    -------
    State
        The same shapes and dtype.

    Raises
    ------
    None of its own (a zero on A's diagonal gives inf/NaN, not an error).

    Source: project addition (see `gauge_log_density`).
    """
    c = jnp.diag(A)
    return state._replace(U=state.U * c, V=state.V / c, mu_u=state.mu_u * c, sigma_u=state.sigma_u / (c * c),
                          mu_v=state.mu_v / c, sigma_v=state.sigma_v * (c * c))


@partial(jax.jit, static_argnames=("gauge_rounds", "chunk"))
def step(key, state: State, obs: Observations, hyper, gauge_rounds: int = 5,
         chunk: int = ENTRY_CHUNK) -> tuple[State, Info]:
    """One sweep of the corrected Algorithm 2: hyperparameters (lines 2-10), tau (12), mu (14-17),
    all users in parallel (alpha_i then u_i1..u_iK, lines 19-30), all items likewise (31-42);
    then ``gauge_rounds`` rounds of column-scaling gauge Metropolis moves (`custom_inference.gauge`; not in
    the thesis, which is ``gauge_rounds=0``; O(rounds K^2) with a separable target).

    Each block is drawn from its complete conditional given the current values of all others
    and the cache e is updated after each; each gauge move is a Metropolis-Hastings step; so the
    sweep leaves the posterior invariant. O(N K + (I + J) K) per sweep; memory
    O(N + (I + J) K + chunk), the cache being the only (N,) float array.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    state : State
        The current draws (shapes in its docstring).
    obs : Observations, shape (I, J), or sharding.ShardedObservations
        The N ratings, or the same split over devices (the cache ``e`` then has the padded length
        D B and the blocks' sharding, the rest of the state is replicated): the sweep runs on every
        device's block under `jax.shard_map`, each sum over entries psum-ed, every draw made on
        every device from the same key, so the chain equals the single-device one up to the order
        of the additions.
    hyper : ppl_models.sbmf.SBMFHyper
        A pytree of floats.
    gauge_rounds : int >= 0, default 5
        Rounds of gauge moves (static).
    chunk : int >= 1, default `ENTRY_CHUNK`
        Entries per chunk (static; `_side`); the draws do not depend on it.

    Returns
    -------
    state : State
        The new state.
    info : Info
        Float scalars of the state's dtype.

    Raises
    ------
    None of its own (jitted; no value checks).

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 (corrected, see `validation.models.sbmf.ERRATA`); the
    gauge moves are a project addition.
    """
    if isinstance(obs, sharding.ShardedObservations):
        # the whole sweep runs on every device's block of entries (its slice of the cache e), the
        # rest of the state replicated; every sum over entries is psum-ed (`sharding.Reducer`)
        state_spec = State(*([P()] * (len(State._fields) - 1)), e=obs.spec)
        def on_block(key, state, hyper, block, red):
            return _sweep(key, state, block, hyper, red=red, gauge_rounds=gauge_rounds, chunk=chunk)

        return sharding.map_blocks(on_block, obs, (key, state, hyper), (P(), state_spec, P()), (state_spec, P()))
    return _sweep(key, state, obs, hyper, red=sharding.LOCAL, gauge_rounds=gauge_rounds, chunk=chunk)


def _sweep(key, state: State, obs: Observations, hyper, red: sharding.Reducer, gauge_rounds: int,
           chunk: int = ENTRY_CHUNK):
    """`step` on the entries ``obs`` (all of them, or one device's block), ``red`` combining the sums."""
    k_h, k_tau, k_mu, k_users, k_items, k_g = jax.random.split(key, 6)
    dt = state.e.dtype
    state = _hyper_block(k_h, state, hyper)
    shape, rate = tau_conditional(state, obs, hyper, red=red)
    tau = (jax.random.gamma(k_tau, shape, dtype=dt) / rate).astype(dt)
    state = state._replace(tau=tau)
    prec, h = mu_conditional(state, obs, hyper, red=red)
    mu = sample_normal_natural(k_mu, prec, h).astype(dt)
    state = state._replace(mu=mu, e=state.e + red.mask(state.mu - mu))
    alpha, U, e = _side(k_users, state.e, state.alpha, state.U, state.V, state.sigma_alpha, state.mu_alpha,
                        state.sigma_u, state.mu_u, tau, obs.rows, obs.cols, obs.n_rows, True, red, chunk)
    state = state._replace(alpha=alpha, U=U, e=e)
    beta, V, e = _side(k_items, state.e, state.beta, state.V, state.U, state.sigma_beta, state.mu_beta,
                       state.sigma_v, state.mu_v, tau, obs.cols, obs.rows, obs.n_cols, False, red, chunk)
    state = state._replace(beta=beta, V=V, e=e)
    if gauge_rounds:
        A, _, accept = gauge_walk(k_g, GaugeHyper(state.mu_u, state.sigma_u, state.mu_v, state.sigma_v),
                                  gauge_log_density(hyper), gauge_act, state.U.shape[1], gauge_rounds, dtype=dt)
        state = apply_gauge(state, A)
    else:
        accept = jnp.zeros((), dt)
    sse = red.sum(e**2)
    return state, Info(_log_joint_given(state, hyper, red.count(e.shape[0]), sse), sse, accept)


# -- declarations for the sampling driver ---------------------------------------------------


_SCALARS = ("mu", "tau", "mu_alpha", "sigma_alpha", "mu_beta", "sigma_beta")
ALL_VARS = State._fields[:-1]  # everything but the cache
SBMF_DIMS = {"alpha": ("user",), "beta": ("item",), "U": ("user", "component"), "V": ("item", "component"),
             "mu_u": ("component",), "sigma_u": ("component",), "mu_v": ("component",), "sigma_v": ("component",)}


def _prepare(obs: Observations, dtype):
    return jax.tree_util.tree_map(jnp.asarray, obs.astype(dtype))


def _prepare_hyper(hyper, dtype):
    return type(hyper)(*(float(getattr(hyper, f)) for f in hyper._fields)) if hasattr(hyper, "_fields") else hyper


def _derived(state: State, obs, hyper) -> dict:
    return {"mean_level": state.mu + jnp.mean(state.alpha) + jnp.mean(state.beta)}


def _predict(state: State, obs, at):
    rows, cols = at
    return state.mu + state.alpha[rows] + state.beta[cols] + jnp.sum(state.U[rows] * state.V[cols], axis=1)


ALGORITHM = base.Algorithm(
    name="sbmf-gibbs", kind="mcmc", init=init, step=step, target=log_joint, target_name="log_joint",
    dims=SBMF_DIMS, source=_SOURCE,
).check()

SPEC = mcmc_driver.SamplerSpec(
    algorithm=ALGORITHM, model="sbmf", method="gibbs", variables=ALL_VARS, prepare=_prepare,
    sizes=lambda obs: (obs.n_rows, obs.n_cols, obs.nnz),
    coords=lambda obs, K: {"user": np.arange(obs.n_rows), "item": np.arange(obs.n_cols), "component": np.arange(K)},
    derived=_derived, predict=_predict, predict_prepare=mcmc_driver.prepare_cells, mean_stats=("gauge_accept",),
    extra_dims={"mean_level": ()}, prepare_hyper=_prepare_hyper,
)


@mcmc_driver.run_options()
def sample(
    key,
    obs: Observations,
    K: int,
    hyper,
    *,
    gauge_rounds: int = 5,
    mesh=None,
    options: mcmc_driver.SampleOptions,
) -> "arviz_io.InferenceData":
    """Run ``num_chains`` SBMF Gibbs chains through `custom_inference.mcmc_driver` and return the draws.

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed; the same key gives the same draws.
    obs : Observations, shape (I, J)
        N real-valued ratings (build with ``kind="real", drop_zeros=False`` so that ratings equal
        to 0 are kept).
    K : int >= 1
        Number of components.
    hyper : ppl_models.sbmf.SBMFHyper or object
        Any object with its fields (finite; sigma_g, a0, b0, nu0, alpha0, beta0 > 0).
    gauge_rounds : int >= 0, keyword-only, default 5
        Rounds of column-scaling gauge moves per sweep (`step`); 0 is the thesis's plain
        Algorithm 2.
    mesh : jax.sharding.Mesh, keyword-only, optional
        Split the ratings (and the residual cache) over the devices of the mesh axis ``"nnz"``
        (`sharding.nnz_mesh`); the factors stay replicated, the sums over ratings are psum-ed,
        and the draws equal the single-device ones up to the order of the additions (attrs
        ``n_devices``). None: one device, unchanged.
    num_chains : int >= 1, keyword-only, default 4
        Independent chains (each from its own key).
    num_warmup : int >= 0, keyword-only, default 500
        Warm-up sweeps per chain, discarded (rounded up to a multiple of ``thin``).
    num_samples : int >= 1, keyword-only, default 1000
        Kept draws per chain.
    thin : int >= 1, keyword-only, default 1
        Sweeps per kept draw.
    keep : sequence of str, keyword-only, optional
        Names to store per draw: State fields (U and V cost I K and J K per draw), ``mean_level``
        and, with ``predict_at``, ``pred`` (default all of them).
    predict_at : tuple (rows, cols) of int arrays, shape (M,) each, keyword-only, optional
        Cells at which the predicted mean mu + alpha_i + beta_j + u_i . v_j is computed: per draw
        as ``pred`` (chain, draw, M) when kept, and its running mean and sd over all kept draws in
        ``predictions`` (``pred_mean``, ``pred_sd``; eq. 3.18).
    dtype : numpy.float32 or numpy.float64, keyword-only, optional
        The state's dtype (None: that of ``obs.values``; float32 works).
    progress : bool, keyword-only, default True
        Show a tqdm bar.
    checkpoint : str or path-like, keyword-only, optional
        A ``.npz`` checkpoint written every ``checkpoint_every`` blocks and at the end (None: none).
    checkpoint_every : int >= 1, keyword-only, default 10
        Blocks between checkpoints.
    resume : bool, keyword-only, default False
        Continue from ``checkpoint`` when the file exists (the same draws as the uninterrupted run).
    block : int >= 1, keyword-only, optional
        Sweeps per compiled block (None: about min(50, total sweeps / 4), `mcmc_driver.sample`);
        the draws do not depend on it.
    callback : callable, keyword-only, optional
        Called after each block (after its checkpoint) with ``(sweeps done, states)``
        (`mcmc_driver.sample`); an exception raised there stops the run.
    options : mcmc_driver.SampleOptions, keyword-only, optional
        The same run options as one object (`mcmc_driver.run_options`); keywords given beside it
        override its fields.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` with the kept variables (dims user, item, component), ``mean_level`` =
        mu + mean(alpha) + mean(beta) (identifiable), and ``pred`` (dim cell) if asked;
        ``sample_stats``: ``lp`` (log joint, eq. 3.13) and ``gauge_accept``; attrs of
        `mcmc_driver` plus gauge_rounds.

    Raises
    ------
    ValueError
        ``obs`` with an index out of range, a NaN or infinite value, duplicates or no entries
        (`Observations.validate`, before any compilation); K < 1; bad
        counts (``gauge_rounds`` included); unknown ``keep`` names; bad hyperparameters;
        ``predict_at`` indices out of range; ``mesh`` without an axis ``"nnz"``; a checkpoint of
        other settings, of another run or damaged.
    TypeError
        ``obs`` not Observations; ``mesh`` not a jax.sharding.Mesh; a bad key; an unknown keyword.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`mcmc_driver.sample`).

    Source: seed 004, Algorithm 2 (sweep); the driver is a project addition.
    """
    _check_obs(obs)
    obs.validate("real", name="obs", float_only=False)  # however built: ids in range, finite values
    K = _check_K(K)
    _check_hyper(hyper)
    gauge_rounds = mcmc_driver.check_count("gauge_rounds", gauge_rounds, 0)
    if options.dtype is None:
        options = mcmc_driver.SampleOptions.of(options, dtype=np.asarray(obs.values).dtype)
    data, attrs = obs, None
    if mesh is not None:  # the ratings split over the devices (`step` dispatches on the container)
        sharding.check_mesh(mesh)
        data = sharding.shard_observations(obs, mesh)
        attrs = {"n_devices": data.n_shards}
    return mcmc_driver.sample(
        SPEC, key, data, K, hyper, options=options, step_options={"gauge_rounds": gauge_rounds},
        attrs=attrs,
    )


def predict(idata_or_draws, rows, cols, *, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Posterior-mean prediction averaged over kept samples (eq. 3.18) and its posterior sd.

    Parameters
    ----------
    idata_or_draws : arviz.InferenceData or dict
        The InferenceData from `sample` (kept ``mu, alpha, beta, U, V``), or a dict of arrays with
        those names and leading sample axes ((chain, draw, ...) or (S, ...)).
    rows : array-like, shape (M,), int
        Users of the cells to predict (observed or not), in [0, I).
    cols : array-like, shape (M,), int
        Items of the cells, in [0, J).
    chunk : int >= 1, keyword-only, default 256
        Draws processed at once (memory O(chunk M K)).

    Returns
    -------
    mean : numpy.ndarray, shape (M,), float64
        r_hat_ij = (1/C) sum_c (mu^c + alpha_i^c + beta_j^c + u_i^c . v_j^c) over the C kept draws.
    sd : numpy.ndarray, shape (M,), float64
        The posterior sd of that mean function over the draws (noise 1/tau not included).

    Raises
    ------
    ValueError
        A variable missing, indices out of range or of different lengths; no ``posterior`` group.

    Source: ``004_90693a0965f06816.txt`` eq. (3.18) (the mean); the sd is a project addition.
    """
    if isinstance(idata_or_draws, arviz_io.InferenceData):
        draws = arviz_io.group_arrays(idata_or_draws)
        lead = 2
    else:
        draws = dict(idata_or_draws)
        lead = np.ndim(draws.get("mu", 0))
    for name in ("mu", "alpha", "beta", "U", "V"):
        if name not in draws:
            raise ValueError(f"draws lack {name!r}: run sample() with keep including mu, alpha, beta, U, V")
    mu = np.asarray(draws["mu"], np.float64).reshape(-1)
    S = mu.size
    alpha = np.asarray(draws["alpha"]).reshape(S, -1)
    beta = np.asarray(draws["beta"]).reshape(S, -1)
    U = np.asarray(draws["U"]).reshape(S, alpha.shape[1], -1)
    V = np.asarray(draws["V"]).reshape(S, beta.shape[1], -1)
    del lead
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(f"rows and cols must be 1-D of one length, got {rows.shape} and {cols.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= alpha.shape[1]):
        raise ValueError(f"rows index out of range [0, {alpha.shape[1] - 1}]")
    if cols.size and (cols.min() < 0 or cols.max() >= beta.shape[1]):
        raise ValueError(f"cols index out of range [0, {beta.shape[1] - 1}]")
    total = np.zeros(rows.size)
    total2 = np.zeros(rows.size)
    for s0 in range(0, S, chunk):
        sl = slice(s0, s0 + chunk)
        p = (mu[sl, None] + alpha[sl][:, rows] + beta[sl][:, cols]
             + np.einsum("smk,smk->sm", U[sl][:, rows], V[sl][:, cols])).astype(np.float64)
        total += p.sum(axis=0)
        total2 += (p**2).sum(axis=0)
    mean = total / S
    var = np.maximum(total2 / S - mean**2, 0.0) * (S / max(S - 1, 1))
    return mean, np.sqrt(var)
