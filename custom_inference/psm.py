r"""Paired symbol modelling ("PSM"): mean-field VB with Jaakkola-Jordan bounds and background caches.

Source: ``000_619a0297b9d686b2.txt`` (Paquet, Koenigstein, Winther), secs. 3-4, Algorithm 1 and
appendix B. The generative program is `ppl_models.psm.model`. Every update below is our own
derivation from the bounded ELBO; `validation.models.psm` checks each against its dense I x J twin and
with ``jax.grad`` of the dense bound, and lists the printed formulas that disagree (``ERRATA``).

Notation. Data: distinct observed pairs G with counts c_ij (``data.values``), c_i = sum_j c_ij,
c_j = sum_i c_ij, D = sum c_ij; D' = r D censored events. Logit a_ij = u_i . v_j + b_i + b_j.
q = prod_i N(b_i) prod_ik N(u_ik) prod_j N(b_j) prod_jk N(v_jk) Dir(pi; alpha) Dir(psi; beta)
prod_d' Cat(y_d'; s) Cat(z_d'; t) (eq. 4 with the tying of sec. 3). Jaakkola-Jordan parameters:
xi_ij for (i, j) in G (always at their optimum xi_ij^2 = E a_ij^2, eq. 11, "computed and
discarded"), one shared xi* (a state field) for every pair outside G; lam = `jj_lambda`.

Bounded ELBO (derived; the printed expansion (13) has -E log p where -E log q belongs)::

    L = sum_G c_ij JJ1_ij + D' sum_ij s_i t_j Omega_ij
        + sum_i (c_i + D' s_i) E log pi_i + sum_j (c_j + D' t_j) E log psi_j
        + E log p(pi) - E log q(pi) + E log p(psi) - E log q(psi)
        + E log p(U, V, b) + H[q(U, V, b)] - D' sum_i s_i log s_i - D' sum_j t_j log t_j

    JJ1_ij   = log s(xi) + E a / 2 - xi / 2 - lam(xi) (E a^2 - xi^2)        (observed event bound)
    Omega_ij = log s(xi) - E a / 2 - xi / 2 - lam(xi) (E a^2 - xi^2)        (censored event bound)

with xi = xi_ij on G and xi* outside. Background caches (B.1; t-weighted over items, s over users)::

    P- = sum_j t_j E[v_j v_j^T]   m-dag = sum_j t_j E[b_j] E[v_j]   m-ddag = sum_j t_j E[v_j]
    nu- = sum_j t_j E[b_j]        kappa- = sum_j t_j E[b_j^2]        (and P+, m+dag, ... over users)

Sums that use them (derived here; `validation.models.psm` checks each against the I x J sum)::

    sum_j t_j E a_ij^2 = tr(E[u_i u_i^T] P-) + 2 E[b_i] E[u_i].m-ddag + 2 E[u_i].m-dag
                         + E[b_i^2] + 2 E[b_i] nu- + kappa-
    sum_j t_j E a_ij   = E[u_i].m-ddag + E[b_i] + nu-
    S2 = sum_ij s_i t_j E a_ij^2 = tr(P+ P-) + 2 m+ddag.m-dag + 2 m+dag.m-ddag + 2 nu+ nu- + kappa+ + kappa-
    S1 = sum_ij s_i t_j E a_ij   = m+ddag.m-ddag + nu+ + nu-
    sum_j t_j Omega*_ij = log s(xi*) - xi*/2 + lam* xi*^2 - lam* sum_j t_j E a_ij^2 - sum_j t_j E a_ij / 2

(the last uses sum_j t_j = 1); the censored part of L is D' [S-form of Omega* + sum_G s_i t_j
(Omega_ij - Omega*_ij)].

Updates (users; items mirror them with s <-> t, P- <-> P+, ...), each the exact maximiser of L in
its block with the other factors and xi held fixed:

- q(pi) = Dir(alpha), alpha_i = alpha0 + c_i + D' s_i (and beta_j = beta0 + c_j + D' t_j).
- s_i propto exp(E log pi_i + sum_j t_j Omega_ij), sum_j t_j Omega_ij = sum_j t_j Omega*_ij +
  sum_{j in G(i)} t_j (Omega_ij - Omega*_ij)   (eq. 17 with B.4.1).
- q(b_i) = N(nu_i / rho_i, 1 / rho_i) with w_ij = 2 (c_ij lam_ij + D' s_i t_j (lam_ij - lam*)):
  rho_i = tau_b + 2 lam* D' s_i + sum_{G(i)} w_ij,
  nu_i  = D' s_i (-1/2 - 2 lam* (nu- + E[u_i].m-ddag))
          + sum_{G(i)} [c_ij (1/2 - 2 lam_ij r_ij) - 2 D' s_i t_j (lam_ij - lam*) r_ij],  r_ij = E[u_i.v_j + b_j].
- prod_k q(u_ik) through the full-covariance intermediate N(P_i^-1 m_i, P_i^-1) (B.2):
  P_i = tau_u I + 2 lam* D' s_i P- + sum_{G(i)} w_ij E[v_j v_j^T],
  m_i = D' s_i ((-1/2 - 2 lam* E b_i) m-ddag - 2 lam* m-dag)
        + sum_{G(i)} [c_ij (1/2 - 2 lam_ij e_ij) - 2 D' s_i t_j (lam_ij - lam*) e_ij] E[v_j],  e_ij = E[b_i + b_j];
  mean mu_i = P_i^-1 m_i (batched Cholesky) and precisions diag(P_i): for the factorised q the terms
  in u_i are -1/2 (mu^T P mu + sum_k P_kk / omega_k) + m^T mu + 1/2 sum log(1/omega_k), maximised
  jointly at mu = P^-1 m, omega = diag P.
- xi*^2 = (S2 - sum_G s_i t_j E a_ij^2) / (1 - sum_G s_i t_j)   (eq. 16 with the caches).

Sweep (Algorithm 1): q(pi), q(psi); item caches, s; user biases, user vectors; user caches, xi*,
t; item biases, item vectors. xi on G is recomputed from the current q before each Gaussian block.
Every block is an exact coordinate maximiser of L at fixed xi, and L at the optimal xi_G is what
`elbo` returns, so a sweep never lowers it.

Cost per sweep O(|G| K^2 + (I + J) K^3): pair sums run in chunks of ``chunk`` pairs (a fori_loop
over slices of the pair arrays, nothing padded or copied), each accumulated into per-user / per-item
sums or scalars, so the only (N,) arrays a sweep holds are the data, xi and the item order;
nothing of size I x J is built (`score_users` returns the (B, J) block of the B users asked for). The
vector updates solve the users (items) in blocks of B (issue 28, `row_blocks`; the pair order,
`pair_order`, built once per data set): one block's (B, K, K) precisions at a time, B from a memory
bound (`block_sizes`), never the (I, K, K) of all users (4.5 GiB at Netflix's 480,189 users and
K = 50). `user_update_targets` / `item_update_targets` still give the unblocked form.

Sharded over devices (issue 14): on a `sharding.ShardedObservations` (``fit(mesh=)``) the sweep runs
under `jax.shard_map` on every device's block of pairs, the state and the background caches
replicated, each sum over pairs psum-ed and padded pairs weighted 0 (`psm_sharded`); on one device
the code is the same and its result unchanged bit for bit.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import arviz_io, base, row_blocks, sharding, vi_driver
from .chunks import over_chunks
from .psm_sharded import block_arrays, psum as _psum, reducer as _red, run_on_blocks, vary as _vary, weight as _weight
from .data import Observations
from .logistic import jj_expected_log_bound, jj_lambda, optimal_xi
from .row_blocks import DEFAULT_BLOCK_BYTES, PairOrder, block_sizes
from .psm_predict import (  # noqa: F401 (predictions and draws from q: part of this module's public API)
    _pair_mean_var, _pair_moments_chunk, acceptance_probability, draws_from_q, predictive_probability, score_users)
from .psm_caches import (  # noqa: F401 (the caches are part of this module's public API)
    Background,
    moments,
    _s_t,
    item_background,
    user_background,
    background_sums,
    user_background_terms,
    item_background_terms,
    _omega_star,
    omega_star_user_sums,
    omega_star_item_sums,
)

__all__ = [
    "PSMState",
    "PSMInfo",
    "Background",
    "DEFAULT_CHUNK",
    "check_data",
    "init",
    "moments",
    "pair_moments",
    "pair_xi",
    "item_background",
    "user_background",
    "background_sums",
    "user_background_terms",
    "item_background_terms",
    "omega_star_user_sums",
    "omega_star_item_sums",
    "elbo",
    "update_dirichlet",
    "update_s",
    "update_t",
    "update_user_bias",
    "update_item_bias",
    "update_users",
    "update_items",
    "update_xi_star",
    "DEFAULT_BLOCK_BYTES",
    "block_sizes",
    "PairOrder",
    "pair_order",
    "user_update_targets",
    "item_update_targets",
    "BLOCKS",
    "step",
    "fit",
    "acceptance_probability",
    "predictive_probability",
    "score_users",
    "draws_from_q",
    "ALGORITHM",
]

#: pairs per chunk of the O(|G| K^2) sums (memory chunk K^2 floats per temporary)
DEFAULT_CHUNK = 16384
_HYPER_FIELDS = ("alpha0", "beta0", "tau_u", "tau_v", "tau_b")


class PSMState(NamedTuple):
    """Variational parameters (all arrays of one float dtype).

    Parameters
    ----------
    u_mu, u_prec : jax.Array, shape (I, K), float
        Means and precisions of q(u_ik).
    v_mu, v_prec : jax.Array, shape (J, K), float
        Means and precisions of q(v_jk).
    bu_mu, bu_prec : jax.Array, shape (I,), float
        Mean and precision of q(b_i).
    bv_mu, bv_prec : jax.Array, shape (J,), float
        Mean and precision of q(b_j).
    alpha : jax.Array, shape (I,), float
        q(pi) = Dir(alpha).
    beta : jax.Array, shape (J,), float
        q(psi) = Dir(beta).
    log_s : jax.Array, shape (I,), float
        The tied user categorical's log probabilities (s = softmax(log_s)).
    log_t : jax.Array, shape (J,), float
        The tied item categorical's log probabilities.
    xi_star : jax.Array, shape (), float
        The shared Jaakkola-Jordan parameter of the pairs outside G.
    d_prime : jax.Array, shape (), float
        D', the number of censored events (fixed; r D).

    Raises
    ------
    None of its own (a NamedTuple; `init` builds one).

    Source: ``000_619a0297b9d686b2.txt`` sec. 3 (the mean-field family, tied s and t, xi*).
    """

    u_mu: jax.Array
    u_prec: jax.Array
    v_mu: jax.Array
    v_prec: jax.Array
    bu_mu: jax.Array
    bu_prec: jax.Array
    bv_mu: jax.Array
    bv_prec: jax.Array
    alpha: jax.Array
    beta: jax.Array
    log_s: jax.Array
    log_t: jax.Array
    xi_star: jax.Array
    d_prime: jax.Array


class PSMInfo(NamedTuple):
    """Diagnostics of the state a `step` returns.

    Parameters
    ----------
    elbo : jax.Array, shape (), float
        The bounded ELBO (`elbo`), nats.
    xi_star : jax.Array, shape (), float
        xi* of the new state.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition.
    """

    elbo: jax.Array
    xi_star: jax.Array


# ---------------------------------------------------------------------------------------------
# input checks


def _check_hyper(hyper) -> None:
    """ValueError naming the field unless ``hyper`` has every field of `ppl_models.psm.PSMHyper`, each > 0."""
    base.check_positive_hyper(hyper, _HYPER_FIELDS, "ppl_models.psm.PSMHyper")


def _check_r(r) -> float:
    try:
        value = float(r)
    except (TypeError, ValueError):
        raise ValueError(f"r must be a positive finite number, got {r!r}") from None
    if isinstance(r, bool) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"r must be a positive finite number (D' = r D), got {r!r}")
    return value


def check_data(data) -> None:
    """Validate the event counts before any computation.

    Runs in chunks of 4M pairs (no O(N) temporaries); duplicates of row-major pairs are found from
    neighbours, other orders sort an int64 copy of the keys.

    Parameters
    ----------
    data : Observations
        Shape (I, J); ``values`` (N,) are the counts c_ij of the distinct observed pairs.

    Returns
    -------
    None
        Returns only when the data are valid.

    Raises
    ------
    TypeError
        ``data`` not an Observations.
    ValueError
        Naming the field: no pairs; a negative, non-integer or non-finite count; all counts zero; a
        duplicate (row, col) pair; an index out of range.

    Source: project addition (the counts c_ij of ``000_619a0297b9d686b2.txt`` eq. (2)).
    """
    if not isinstance(data, Observations):
        raise TypeError(f"data must be a custom_inference.data.Observations, got {type(data).__name__}")
    values = np.asarray(data.values)
    rows, cols = np.asarray(data.rows), np.asarray(data.cols)
    if values.size == 0:
        raise ValueError("data: no observed events (empty data)")
    # in chunks of _CHECK_CHUNK pairs: no O(N) temporaries (at 1e8 pairs a float64 or int64 copy is 0.8 GB)
    any_positive, row_major = False, True
    for a in range(0, values.size, _CHECK_CHUNK):
        v = values[a:a + _CHECK_CHUNK]
        if not np.all(np.isfinite(v)):
            raise ValueError("data.values: event counts must be finite")
        if np.any(v < 0):
            raise ValueError(f"data.values: event counts must be non-negative, found {v.min()}")
        if np.any(v != np.round(v)):
            raise ValueError("data.values: event counts must be integers (found a non-integer count)")
        any_positive = any_positive or bool(np.any(v > 0))
        for name, arr, bound in (("rows", rows, data.n_rows), ("cols", cols, data.n_cols)):
            x = arr[a:a + _CHECK_CHUNK]
            if x.min() < 0 or x.max() >= bound:
                raise ValueError(f"data.{name} index out of range [0, {bound - 1}]")
        if row_major:  # strictly increasing (row, col) keys, this chunk and the first pair of the next
            r = rows[a:a + _CHECK_CHUNK + 1].astype(np.int64)
            c = cols[a:a + _CHECK_CHUNK + 1].astype(np.int64)
            dr = np.diff(r)
            row_major = bool(np.all((dr > 0) | ((dr == 0) & (np.diff(c) > 0))))
    if not any_positive:
        raise ValueError("data.values: every count is zero (no observed events)")
    if not row_major:  # no order to exploit: sort the keys (O(N log N), 8 N bytes and more)
        flat = rows.astype(np.int64) * data.n_cols + cols
        if np.unique(flat).size != flat.size:
            raise ValueError("data: duplicate (row, col) pairs; sum their counts first")


#: pairs per chunk of `check_data`
_CHECK_CHUNK = 1 << 22


def _as_jax(data: Observations, dtype) -> Observations:
    return Observations(jnp.asarray(data.rows, jnp.int32), jnp.asarray(data.cols, jnp.int32),
                        jnp.asarray(np.asarray(data.values), dtype), data.n_rows, data.n_cols)


# ---------------------------------------------------------------------------------------------
# init


def init(key, data: Observations, K: int, hyper, *, r: float = 1.0, dtype=None, init_scale: float = 0.1) -> PSMState:
    """Initial q (Algorithm 1: xi* = 1, s = 1/I, t = 1/J).

    Factor means ``init_scale`` N(0, 1) (symmetry breaking) with variances ``init_scale^2``, bias
    means 0 with variance ``init_scale^2``, q(pi), q(psi) at their update from s, t.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed.
    data : Observations
        Shape (I, J), the counts c_ij (N,).
    K : int >= 1
        Latent dimension.
    hyper : ppl_models.psm.PSMHyper
        Hyperparameters.
    r : float > 0, default 1.0
        D' = r D (sec. 2).
    dtype : numpy.float32 or numpy.float64, optional
        Float dtype of the state (default: that of ``data.values``).
    init_scale : float > 0, default 0.1
        Scale of the initial means and sd of every factor and bias.

    Returns
    -------
    PSMState
        The start, of ``dtype``.

    Raises
    ------
    ValueError
        Bad counts, empty data, r <= 0, K < 1 or not integral, hyperparameters, init_scale, dtype;
        before any computation.
    TypeError
        A key that is neither a key nor an int; a non-numeric K.

    Source: ``000_619a0297b9d686b2.txt`` Algorithm 1, "initialize".
    """
    key = base.as_key(key)
    check_data(data)
    _check_hyper(hyper)
    K = base.check_latent_dim(K)
    r = _check_r(r)
    if not (np.isfinite(init_scale) and init_scale > 0):
        raise ValueError(f"init_scale must be positive, got {init_scale!r}")
    dtype = base.compute_dtype(dtype, np.asarray(data.values).dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    D = float(np.sum(np.asarray(data.values), dtype=np.float64))
    d = _as_jax(data, dtype)
    return _init(key, d, _hyper_arrays(hyper, dtype), jnp.asarray(r * D, dtype), jnp.asarray(init_scale, dtype), K)


def _hyper_arrays(hyper, dtype):
    return type(hyper)(*(jnp.asarray(float(getattr(hyper, f)), dtype) for f in _HYPER_FIELDS))


@functools.partial(jax.jit, static_argnums=(5,))
def _init(key, data, hyper, d_prime, scale, K):
    I, J = data.n_rows, data.n_cols
    dtype = data.values.dtype
    ku, kv = jax.random.split(key)
    # float32 normals in every dtype: a seed gives the same start in float32 and float64
    mu = scale * jax.random.normal(ku, (I, K), dtype=jnp.float32).astype(dtype)
    mv = scale * jax.random.normal(kv, (J, K), dtype=jnp.float32).astype(dtype)
    prec = 1.0 / scale**2
    state = PSMState(mu, jnp.full((I, K), prec, dtype), mv, jnp.full((J, K), prec, dtype),
                     jnp.zeros(I, dtype), jnp.full(I, prec, dtype), jnp.zeros(J, dtype), jnp.full(J, prec, dtype),
                     jnp.ones(I, dtype), jnp.ones(J, dtype), jnp.full(I, -jnp.log(I), dtype).astype(dtype),
                     jnp.full(J, -jnp.log(J), dtype).astype(dtype), jnp.asarray(1.0, dtype), d_prime.astype(dtype))
    return update_dirichlet(state, data, hyper)


# ---------------------------------------------------------------------------------------------
# moments, pair sums in chunks


def _chunk_size(n: int, chunk: int) -> int:
    return max(1, min(int(chunk), int(n)))


def _chunk_view(data, start, size, extra):
    """The pairs [start, start + size) of ``data``: rows, cols, counts, mask (the padding weight of a
    sharded block, else ones) and the same slice of each (N,) array in ``extra``."""
    def sl(x):
        return jax.lax.dynamic_slice_in_dim(x, start, size)

    w = _weight(data)  # a sharded block's padding weight (psm_sharded); None on one device
    mask = jnp.ones(size, data.values.dtype) if w is None else sl(w)
    return (sl(data.rows), sl(data.cols), sl(data.values), mask, *(sl(e) for e in extra))


def _scan_pairs(fn, init, data, chunk, *extra):
    """Accumulate ``fn(acc, rows, cols, counts, mask, *extra_chunks) -> acc`` over the pairs in chunks
    (`chunks.over_chunks`: whole chunks in a fori_loop, then the tail; nothing padded or copied)."""
    n = data.rows.shape[0]
    return over_chunks(n, _chunk_size(n, chunk), lambda start, size, acc: fn(acc, *_chunk_view(data, start, size, extra)),
                       init)


def _map_pairs(fn, data, chunk, *extra):
    """``fn(rows, cols, counts, mask, *extra_chunks) -> tuple of (c,) arrays`` over chunks; returns
    the (N,) arrays (each chunk written into its slice). ``extra`` are (N,) arrays chunked alongside."""
    n = data.rows.shape[0]
    c = _chunk_size(n, chunk)
    shapes = jax.eval_shape(lambda: fn(*_chunk_view(data, 0, c, extra)))
    out = _vary(_red(data), tuple(jnp.zeros((n,), o.dtype) for o in shapes))

    def body(start, size, out):
        vals = fn(*_chunk_view(data, start, size, extra))
        return tuple(jax.lax.dynamic_update_slice_in_dim(o, v, start, 0) for o, v in zip(out, vals))

    return over_chunks(n, c, body, out)


def pair_moments(state: PSMState, data: Observations, chunk: int = DEFAULT_CHUNK):
    """E_q[a_ij] and E_q[a_ij^2] on the N observed pairs of ``data``.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The pairs: int ``rows``, ``cols`` (N,).
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    mean : jax.Array, shape (N,), float
        E_q[a_ij], the state's float dtype.
    second : jax.Array, shape (N,), float
        E_q[a_ij^2].

    Raises
    ------
    None of its own (no checks: traced code; out-of-range indices are clamped by JAX's gather, not
    reported).

    Source: ``000_619a0297b9d686b2.txt`` eq. (11) (E_q[a_ij^2] is the optimal xi_ij^2).
    """
    return _map_pairs(lambda r, c, n, m: _pair_moments_chunk(state, r, c), data, chunk)


def pair_xi(state: PSMState, data: Observations, chunk: int = DEFAULT_CHUNK):
    """The optimal xi_ij = sqrt(E_q[a_ij^2]) on the observed pairs.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The pairs: int ``rows``, ``cols`` (N,).
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    jax.Array, shape (N,), float
        xi, the state's float dtype.

    Raises
    ------
    None of its own (no checks: traced code; see `pair_moments`).

    Source: ``000_619a0297b9d686b2.txt`` eq. (11), positive root.
    """
    (xi,) = _map_pairs(lambda r, c, n, m: (optimal_xi(_pair_moments_chunk(state, r, c)[1]),), data, chunk)
    return xi


# ---------------------------------------------------------------------------------------------
# the bounded ELBO


def _dirichlet_terms(conc, prior, counts):
    """E log p(x) - E log q(x) + sum counts E log x for x ~ q = Dir(conc), prior Dir(prior 1)."""
    from jax.scipy.special import digamma, gammaln

    n = conc.shape[0]
    elog = digamma(conc) - digamma(jnp.sum(conc))
    log_p = gammaln(n * prior) - n * gammaln(prior) + (prior - 1.0) * jnp.sum(elog)
    log_q = gammaln(jnp.sum(conc)) - jnp.sum(gammaln(conc)) + jnp.sum((conc - 1.0) * elog)
    return log_p - log_q + jnp.sum(counts * elog)


def _gauss_terms(mean, var, tau):
    """sum E log N(x; 0, 1/tau) + H[N(mean, var)] (the 1/2 log 2 pi terms cancel)."""
    return jnp.sum(0.5 * (jnp.log(tau) + jnp.log(var) + 1.0) - 0.5 * tau * (mean**2 + var))


def elbo(state: PSMState, data: Observations, hyper, xi=None, *, chunk: int = DEFAULT_CHUNK):
    """The bounded ELBO L (module docstring), in nats, O(|G| K + (I + J) K^2).

    Differentiable in every field of ``state`` and in ``xi``. No value checks (traced code; shapes and
    values are trusted, checked by `init` / `fit`).

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations or sharding.ShardedObservations
        The counts c_ij (N,); a `sharding.ShardedObservations` sums the pairs per device block, psum-ed
        (``xi`` must then be None).
    hyper : ppl_models.psm.PSMHyper
        Hyperparameters.
    xi : jax.Array, shape (N,), float, optional
        Jaakkola-Jordan parameters of the observed pairs; None for their optimum (11), where L equals
        its maximum over xi_G (what `step` reports). xi* is ``state.xi_star``.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    jax.Array, shape (), float
        L, of the state's float dtype.

    Raises
    ------
    ValueError
        For ``xi`` given with sharded ``data``; a ``hyper`` without the PSMHyper fields raises
        AttributeError (not its own).

    Source: ``000_619a0297b9d686b2.txt`` eq. (3) with the bound of sec. 3, derived (the printed (13)
    is corrected in ERRATA).
    """
    if isinstance(data, sharding.ShardedObservations):
        if xi is not None:
            raise ValueError("elbo on sharded data takes xi=None (the optimal xi of the observed pairs)")
        return run_on_blocks(lambda st, hy, block: elbo(st, block, hy, chunk=chunk), data, (state, hyper))
    s, t = _s_t(state)
    counts = data.values
    Dp = state.d_prime

    def pair_terms(acc, rows, cols, c, m, *x):
        mean, second = _pair_moments_chunk(state, rows, cols)
        x = optimal_xi(second) if xi is None else x[0]
        st = s[rows] * t[cols] * m
        obs = c * jj_expected_log_bound(mean, second, x, 1)
        corr = st * (jj_expected_log_bound(mean, second, x, 0) - jj_expected_log_bound(mean, second, state.xi_star, 0))
        return acc[0] + jnp.sum(obs), acc[1] + jnp.sum(corr)

    red = _red(data)
    zero = jnp.zeros((), counts.dtype)
    obs, corr = _psum(red, _scan_pairs(pair_terms, _vary(red, (zero, zero)), data, chunk, *(() if xi is None else (xi,))))
    s1, s2 = background_sums(user_background(state), item_background(state))
    censored = Dp * (_omega_star(state.xi_star, s1, s2) + corr)
    c_i = red.seg(counts, data.rows, data.n_rows, False)
    c_j = red.seg(counts, data.cols, data.n_cols, False)
    total = obs + censored
    total = total + _dirichlet_terms(state.alpha, hyper.alpha0, c_i + Dp * s)
    total = total + _dirichlet_terms(state.beta, hyper.beta0, c_j + Dp * t)
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = moments(state)
    total = total + _gauss_terms(mu, vu, hyper.tau_u) + _gauss_terms(mv, vv, hyper.tau_v)
    total = total + _gauss_terms(mbu, vbu, hyper.tau_b) + _gauss_terms(mbv, vbv, hyper.tau_b)
    total = total - Dp * (jnp.sum(s * jax.nn.log_softmax(state.log_s)) + jnp.sum(t * jax.nn.log_softmax(state.log_t)))
    return total


# ---------------------------------------------------------------------------------------------
# block updates (each exact at fixed xi)


def update_dirichlet(state: PSMState, data: Observations, hyper) -> PSMState:
    """q(pi) = Dir(alpha0 + c_i + D' s_i), q(psi) = Dir(beta0 + c_j + D' t_j) (sec. 4, "Dirichlet updates").

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij.
    hyper : ppl_models.psm.PSMHyper
        ``alpha0``, ``beta0``.

    Returns
    -------
    PSMState
        With alpha (I,) and beta (J,) replaced (the state's float dtype).

    Raises
    ------
    None of its own (no checks: traced code); a ``hyper`` without alpha0 / beta0 raises AttributeError.

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, "Dirichlet updates"; Algorithm 1, "update q(pi); update q(psi)".
    """
    s, t = _s_t(state)
    red = _red(data)
    c_i = red.seg(data.values, data.rows, data.n_rows, False)
    c_j = red.seg(data.values, data.cols, data.n_cols, False)
    return state._replace(alpha=hyper.alpha0 + c_i + state.d_prime * s, beta=hyper.beta0 + c_j + state.d_prime * t)


def _omega_corrections(state, data, xi, chunk, own_is_user: bool):
    """sum over G(own) of w_other (Omega_ij - Omega*_ij), w_other = t_j (users) or s_i (items)."""
    s, t = _s_t(state)

    def fn(acc, rows, cols, c, m, *x):
        mean, second = _pair_moments_chunk(state, rows, cols)
        x = x[0] if x else optimal_xi(second)
        d = jj_expected_log_bound(mean, second, x, 0) - jj_expected_log_bound(mean, second, state.xi_star, 0)
        return acc.at[rows if own_is_user else cols].add((t[cols] if own_is_user else s[rows]) * d * m)

    red = _red(data)
    zeros = _vary(red, jnp.zeros(data.n_rows if own_is_user else data.n_cols, s.dtype))
    return _psum(red, _scan_pairs(fn, zeros, data, chunk, *_given(xi)))


def _elog_dirichlet(conc):
    from jax.scipy.special import digamma

    return digamma(conc) - digamma(jnp.sum(conc))


def update_s(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK) -> PSMState:
    """s_i propto exp(E log pi_i + sum_j t_j Omega_ij), via the item cache and a sparse correction (eq. 17, B.4.1).

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        Unused (block signature).
    xi : jax.Array, shape (N,), float, or None
        The observed pairs' bound parameters (held fixed), the state's float dtype; None: their optimum
        for ``state``, computed chunk by chunk.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    PSMState
        With log_s (I,) replaced.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.4 eq. (17) with the caches of B.4.1 (corrected);
    Algorithm 1, "update s".
    """
    logits = _elog_dirichlet(state.alpha) + omega_star_user_sums(state) + _omega_corrections(state, data, xi, chunk, True)
    return state._replace(log_s=jax.nn.log_softmax(logits))


def update_t(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK) -> PSMState:
    """t_j propto exp(E log psi_j + sum_i s_i Omega_ij): the item twin of `update_s`.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        Unused (block signature).
    xi : jax.Array, shape (N,), float, or None
        As in `update_s`.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    PSMState
        With log_t (J,) replaced.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` eq. (17) and B.4.1 mirrored for t; Algorithm 1, "update t".
    """
    logits = _elog_dirichlet(state.beta) + omega_star_item_sums(state) + _omega_corrections(state, data, xi, chunk, False)
    return state._replace(log_t=jax.nn.log_softmax(logits))


def update_xi_star(state: PSMState, data: Observations, hyper, xi=None, *, chunk: int = DEFAULT_CHUNK) -> PSMState:
    """xi*^2 = (S2 - sum_G s_i t_j E a_ij^2) / (1 - sum_G s_i t_j) (eq. 16 with the caches).

    The cross terms are corrected (see ERRATA). When every (user, item) pair is observed, the pairs
    outside G have q-weight 1 - sum_G s_i t_j = 0, xi* does not enter L, and the current xi* is kept
    (the formula would be 0 / 0).

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        Unused (block signature).
    xi : jax.Array, optional
        Unused (xi* does not depend on xi_G); kept for the block signature.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    PSMState
        With xi_star () replaced (the state's float dtype).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.3 eq. (16) and its cached form in sec. 4 (corrected);
    Algorithm 1, "update xi*".
    """
    del xi
    s, t = _s_t(state)

    def fn(acc, rows, cols, c, m):
        _, second = _pair_moments_chunk(state, rows, cols)
        st = s[rows] * t[cols] * m
        return acc[0] + jnp.sum(st * second), acc[1] + jnp.sum(st)

    red = _red(data)
    zero = jnp.zeros((), s.dtype)
    sec, st = _psum(red, _scan_pairs(fn, _vary(red, (zero, zero)), data, chunk))
    _, s2 = background_sums(user_background(state), item_background(state))
    # 1 - st is the q-weight of the pairs outside G; when every (user, item) pair is observed it is 0 (to
    # rounding) and xi* weighs nothing in L: keep the current xi* instead of 0 / 0
    outside = 1.0 - st
    has_outside = outside > 64 * jnp.finfo(s.dtype).eps
    xi_new = optimal_xi((s2 - sec) / jnp.where(has_outside, outside, 1.0))
    return state._replace(xi_star=jnp.where(has_outside, xi_new, state.xi_star))


def _given(xi):
    """``(xi,)`` for the chunked passes, or () when xi is None (then each chunk computes its own)."""
    return () if xi is None else (xi,)


def _chunk_xi(state, rows, cols, x):
    """xi of a chunk's pairs: the given chunk of xi (``x = (xi_chunk,)``), or for ``x = ()`` the
    optimum sqrt(E_q a_ij^2) of ``state`` (eq. 11), computed here, so no (N,) xi is stored."""
    return x[0] if x else optimal_xi(_pair_moments_chunk(state, rows, cols)[1])


def _chunk_coefficients(state, s, t, lam_star, rows, cols, c, m, x):
    """Per pair of a chunk: w_ij = 2 (c lam_ij + k_ij) (quadratic weight), k_ij = D' s_i t_j (lam_ij -
    lam*) (for the linear terms; 0 at a sharded block's padding, mask ``m``) and lam_ij = lam(xi_ij)."""
    lam = jj_lambda(x)
    k = state.d_prime * s[rows] * t[cols] * (lam - lam_star) * m
    return 2.0 * (c * lam + k), k, lam


class _VectorContext(NamedTuple):
    """What every pair term and the finishing step of one side's vector update read from the state."""

    s: jax.Array
    t: jax.Array
    lam_star: jax.Array
    mbu: jax.Array
    mbv: jax.Array
    other_mu: jax.Array  # (n_other, K) means of the other side's vectors
    other_var: jax.Array  # (n_other, K) their variances
    own_w: jax.Array  # (n_own,) D' s_i (users) or D' t_j (items)
    own_bmu: jax.Array  # (n_own,) own-side bias means
    bg: Background  # the other side's background cache


def _vector_context(state, own_is_user: bool) -> _VectorContext:
    s, t = _s_t(state)
    (mu, vu), (mv, vv), (mbu, _), (mbv, _) = moments(state)
    lam_star = jj_lambda(state.xi_star)
    if own_is_user:
        return _VectorContext(s, t, lam_star, mbu, mbv, mv, vv, state.d_prime * s, mbu, item_background(state))
    return _VectorContext(s, t, lam_star, mbu, mbv, mu, vu, state.d_prime * t, mbv, user_background(state))


def _vector_pair_terms(state, ctx: _VectorContext, own_is_user, rows, cols, c, m, x):
    """Per pair of a chunk: own index, quadratic weight w_ij, linear coefficient g_ij (both masked),
    the other side's mean vector E[x] (c, K) and variances (c, K)."""
    w, k, lam = _chunk_coefficients(state, ctx.s, ctx.t, ctx.lam_star, rows, cols, c, m, x)
    e_b = ctx.mbu[rows] + ctx.mbv[cols]
    g = c * (0.5 - 2.0 * lam * e_b) - 2.0 * k * e_b  # linear coefficient of each pair
    own, other = (rows, cols) if own_is_user else (cols, rows)
    return own, w * m, g * m, ctx.other_mu[other], ctx.other_var[other]


def _finish(ctx: _VectorContext, acc, own_w, own_bmu, tau):
    """The natural parameters (P (n, K, K) with tau I, m (n, K)) from the pair sums ``acc`` and the
    background terms of the n own-side symbols whose D' s (or D' t) and bias means are given."""
    P, dg, h = acc
    K = P.shape[-1]
    P = P + jax.vmap(jnp.diag)(dg) + 2.0 * ctx.lam_star * own_w[:, None, None] * ctx.bg.P[None]
    P = P + tau * jnp.eye(K, dtype=P.dtype)
    h = h + own_w[:, None] * ((-0.5 - 2.0 * ctx.lam_star * own_bmu)[:, None] * ctx.bg.m_ddag[None]
                              - 2.0 * ctx.lam_star * ctx.bg.m_dag[None])
    return P, h


def _zeros_acc(red, n, K, dtype):
    return _vary(red, row_blocks.zeros(n, K, dtype))


def _targets(state, data, xi, chunk, own_is_user: bool, tau):
    """Natural parameters of the full-covariance intermediate q~ of every own-side vector:
    P (n, K, K) (tau I included) and m (n, K) (module docstring), one chunked pass over G. The
    unblocked form (every P at once): `user_update_targets` / `item_update_targets`."""
    ctx = _vector_context(state, own_is_user)
    n_own, K = ctx.own_w.shape[0], ctx.other_mu.shape[1]

    def fn(acc, rows, cols, c, m, *x):
        return row_blocks.accumulate(acc, *_vector_pair_terms(state, ctx, own_is_user, rows, cols, c, m, _chunk_xi(state, rows, cols, x)))

    red = _red(data)
    acc = _psum(red, _scan_pairs(fn, _zeros_acc(red, n_own, K, ctx.s.dtype), data, chunk, *_given(xi)))
    return _finish(ctx, acc, ctx.own_w, ctx.own_bmu, tau)


def user_update_targets(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK):
    """P_i (with tau_u I) and m_i of the intermediate q~(u_i) = N(P^-1 m, P^-1) (eqs. 6-8, corrected).

    Every user's P_i at once (I K^2 floats): the reference form; `update_users` solves the same
    systems in blocks of users (`PairOrder`) and never holds them all.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        ``tau_u``.
    xi : jax.Array, shape (N,), float, or None
        The observed pairs' bound parameters (None: their optimum for ``state``).
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    P : jax.Array, shape (I, K, K), float
        The precisions, in the state's float dtype.
    m : jax.Array, shape (I, K), float
        The precision-times-mean vectors.

    Raises
    ------
    None of its own (no checks: traced code); a ``hyper`` without tau_u raises AttributeError.

    Source: ``000_619a0297b9d686b2.txt`` eqs. (6)-(8) and appendix B.2.1 (m_i corrected: ERRATA in
    `validation.models.psm`).
    """
    return _targets(state, data, xi, chunk, True, hyper.tau_u)


def item_update_targets(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK):
    """P_j (with tau_v I) and m_j of the intermediate q~(v_j): all items at once, as `user_update_targets`.

    `update_items` works in blocks instead.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        ``tau_v``.
    xi : jax.Array, shape (N,), float, or None
        As in `user_update_targets`.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    P : jax.Array, shape (J, K, K), float
        The precisions, in the state's float dtype.
    m : jax.Array, shape (J, K), float
        The precision-times-mean vectors.

    Raises
    ------
    None of its own (no checks: traced code); a ``hyper`` without tau_v raises AttributeError.

    Source: ``000_619a0297b9d686b2.txt`` eqs. (6)-(8) mirrored for items, appendix B.2.1 (corrected).
    """
    return _targets(state, data, xi, chunk, False, hyper.tau_v)


_solve = row_blocks.solve_rows


# ---------------------------------------------------------------------------------------------
# the vector updates in blocks of users / items (issue 28, `row_blocks`): no (I, K, K) array

_local_order = row_blocks.local_order


def _traced_order(state, data):
    """`row_blocks.traced_order` of ``data`` (default block sizes), for an update called without an order."""
    return row_blocks.traced_order(data.rows, data.cols, data.n_rows, data.n_cols, state.u_mu.shape[1], state.u_mu.dtype)


@jax.jit
def _rows_sorted(rows):
    return jnp.all(rows[1:] >= rows[:-1])


def pair_order(data, K: int, *, dtype=None, block_bytes: int = DEFAULT_BLOCK_BYTES, block=None) -> PairOrder:
    """The pair order of the blocked vector updates: compute once per data set, pass to `step`.

    On an `Observations` it is `row_blocks.host_order` (users contiguous in row-major pairs store
    no permutation; items through a stable counting sort on the host, N int32, in chunks of 4M
    pairs); on a `sharding.ShardedObservations` a stable argsort of each device's block (XLA; ~50
    bytes a pair while it runs).

    Parameters
    ----------
    data : Observations or sharding.ShardedObservations
        The pairs (jax or numpy leaves); sharded: per device block, positions local to it (the blocks
        of a sharded `step`).
    K : int
        Latent dimension.
    dtype : numpy float dtype, optional
        The state's float dtype (default that of ``data.values``).
    block_bytes : int, default DEFAULT_BLOCK_BYTES
        Memory bound of one block's precisions (`block_sizes`).
    block : int or tuple of int, optional
        Explicit block sizes (`block_sizes`).

    Returns
    -------
    PairOrder
        The permutation arrays and the user and item block sizes.

    Raises
    ------
    ValueError
        From `block_sizes`.
    TypeError
        For ``data`` of another type.

    Source: project addition (issue 28).
    """
    if not isinstance(data, (Observations, sharding.ShardedObservations)):
        raise TypeError(f"data must be an Observations or a ShardedObservations, got {type(data).__name__}")
    dtype = np.dtype(dtype or data.values.dtype)
    if isinstance(data, sharding.ShardedObservations):
        ub, ib = block_sizes(data.n_rows, data.n_cols, K, dtype, block_bytes, block)
        users_sorted = bool(_rows_sorted(data.rows))
        arrays = block_arrays(lambda r, c: _local_order(r, c, data.n_rows, data.n_cols, ub, ib, users_sorted), data)
        return PairOrder(*arrays, ub, ib)
    return row_blocks.host_order(data.rows, data.cols, data.n_rows, data.n_cols, K, dtype=dtype,
                                 block_bytes=block_bytes, block=block, host_chunk=_CHECK_CHUNK)


def _blocked_update(state, data, xi, chunk, own_is_user: bool, tau, order: PairOrder):
    """(mean, precision) (n_own, K) of every own-side vector, solved block by block
    (`row_blocks.over_row_blocks`): each block's pair sums psum-ed on a mesh, finished with the
    background terms and solved; at most one block's precisions exist at a time."""
    ctx = _vector_context(state, own_is_user)
    n_own, K = ctx.own_w.shape[0], ctx.other_mu.shape[1]
    dtype = ctx.s.dtype
    red = _red(data)

    def pair_terms(take, m):
        rows, cols = take(data.rows), take(data.cols)
        return _vector_pair_terms(state, ctx, own_is_user, rows, cols, take(data.values), m,
                                  _chunk_xi(state, rows, cols, () if xi is None else (take(xi),)))

    def finish(acc, ids):
        return _solve(*_finish(ctx, acc, ctx.own_w[ids], ctx.own_bmu[ids], tau))

    out = (jnp.zeros((n_own, K), dtype), jnp.zeros((n_own, K), dtype))
    return row_blocks.over_row_blocks(order, own_is_user, data.rows.shape[0], _chunk_size(data.rows.shape[0], chunk),
                                      pair_terms, finish, out, K=K, dtype=dtype, weight=_weight(data),
                                      vary=lambda t: _vary(red, t), psum=lambda t: _psum(red, t))


def update_users(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK,
                 order: PairOrder | None = None) -> PSMState:
    """prod_k q(u_ik) for every user: mean P_i^-1 m_i (batched Cholesky), precisions diag P_i (sec. 4, B.2).

    The users are solved in blocks of ``order.user_block`` (`pair_order`, `block_sizes`): only one
    block's (B, K, K) precisions exist at a time; the result equals the unblocked solve of
    `user_update_targets` up to the order of the additions.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        ``tau_u``.
    xi : jax.Array, shape (N,), float, or None
        The observed pairs' bound parameters (None: their optimum for ``state``).
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.
    order : PairOrder, optional
        `pair_order` of ``data`` (None: built here, inside the trace, an O(N log N) sort per call).

    Returns
    -------
    PSMState
        With u_mu, u_prec (I, K) replaced.

    Raises
    ------
    None of its own (no checks: traced code); a P_i that is not positive definite gives NaN from the
    Cholesky factor, not an exception.

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, "Gaussian updates for q(u_ik)"; appendix B.2.2
    (eq. (15): means of q~, precisions diag P_i); Algorithm 1, "update prod_k q(u_ik)"; blocks: project
    addition (issue 28).
    """
    order = _traced_order(state, data) if order is None else order
    mean, prec = _blocked_update(state, data, xi, chunk, True, hyper.tau_u, order)
    return state._replace(u_mu=mean, u_prec=prec)


def update_items(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK,
                 order: PairOrder | None = None) -> PSMState:
    """prod_k q(v_jk) for every item: the twin of `update_users`.

    In blocks of ``order.item_block`` items over the item-sorted permutation of the pairs.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        ``tau_v``.
    xi : jax.Array, shape (N,), float, or None
        As in `update_users`.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.
    order : PairOrder, optional
        As in `update_users`.

    Returns
    -------
    PSMState
        With v_mu, v_prec (J, K) replaced.

    Raises
    ------
    None of its own (as `update_users`: a non-positive-definite P_j gives NaN).

    Source: ``000_619a0297b9d686b2.txt`` sec. 4 and appendix B.2 mirrored for items; Algorithm 1,
    "update prod_k q(v_jk)"; blocks: project addition (issue 28).
    """
    order = _traced_order(state, data) if order is None else order
    mean, prec = _blocked_update(state, data, xi, chunk, False, hyper.tau_v, order)
    return state._replace(v_mu=mean, v_prec=prec)


def _bias_update(state, data, hyper, xi, chunk, own_is_user: bool):
    s, t = _s_t(state)
    (mu, _), (mv, _), (mbu, _), (mbv, _) = moments(state)
    lam_star = jj_lambda(state.xi_star)

    def fn(acc, rows, cols, c, m, *x):
        w, k, lam = _chunk_coefficients(state, s, t, lam_star, rows, cols, c, m, _chunk_xi(state, rows, cols, x))
        rest = jnp.sum(mu[rows] * mv[cols], axis=-1) + (mbv[cols] if own_is_user else mbu[rows])
        g = c * (0.5 - 2.0 * lam * rest) - 2.0 * k * rest
        own = rows if own_is_user else cols
        return acc[0].at[own].add(w), acc[1].at[own].add(g)

    n_own = data.n_rows if own_is_user else data.n_cols
    red = _red(data)
    zeros = _vary(red, (jnp.zeros(n_own, s.dtype), jnp.zeros(n_own, s.dtype)))
    w_sum, g_sum = _psum(red, _scan_pairs(fn, zeros, data, chunk, *_given(xi)))
    own_w = state.d_prime * (s if own_is_user else t)
    bg = item_background(state) if own_is_user else user_background(state)
    own_mu = mu if own_is_user else mv
    rho = hyper.tau_b + 2.0 * lam_star * own_w + w_sum
    nu = own_w * (-0.5 - 2.0 * lam_star * (bg.nu + own_mu @ bg.m_ddag)) + g_sum
    return nu / rho, rho


def update_user_bias(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK) -> PSMState:
    """q(b_i) = N(nu_i / rho_i, 1 / rho_i) (sec. 4, "Gaussian updates for q(b_i)", corrected: see ERRATA).

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        ``tau_b``.
    xi : jax.Array, shape (N,), float, or None
        The observed pairs' bound parameters (None: their optimum for ``state``).
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    PSMState
        With bu_mu, bu_prec (I,) replaced.

    Raises
    ------
    None of its own (no checks: traced code); a ``hyper`` without tau_b raises AttributeError.

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, "Gaussian updates for q(b_i)" (nu_i corrected);
    Algorithm 1, "update q(b_i)".
    """
    mean, prec = _bias_update(state, data, hyper, xi, chunk, True)
    return state._replace(bu_mu=mean, bu_prec=prec)


def update_item_bias(state: PSMState, data: Observations, hyper, xi, *, chunk: int = DEFAULT_CHUNK) -> PSMState:
    """q(b_j): the twin of `update_user_bias`.

    Parameters
    ----------
    state : PSMState
        q.
    data : Observations
        The counts c_ij (N,).
    hyper : ppl_models.psm.PSMHyper
        ``tau_b``.
    xi : jax.Array, shape (N,), float, or None
        As in `update_user_bias`.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.

    Returns
    -------
    PSMState
        With bv_mu, bv_prec (J,) replaced.

    Raises
    ------
    None of its own (as `update_user_bias`).

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, "Gaussian updates for q(b_i)" mirrored for items;
    Algorithm 1, "update q(b_j)".
    """
    mean, prec = _bias_update(state, data, hyper, xi, chunk, False)
    return state._replace(bv_mu=mean, bv_prec=prec)


def _update_dirichlet_block(state, data, hyper, xi, *, chunk=DEFAULT_CHUNK):
    del xi, chunk
    return update_dirichlet(state, data, hyper)


#: The blocks of one sweep in Algorithm 1's order: (name, update(state, data, hyper, xi), fields).
#: ``xi`` is the observed pairs' optimal xi for the state the block starts from.
BLOCKS = (
    ("dirichlet", _update_dirichlet_block, ("alpha", "beta")),
    ("s", update_s, ("log_s",)),
    ("user_bias", update_user_bias, ("bu_mu", "bu_prec")),
    ("users", update_users, ("u_mu", "u_prec")),
    ("xi_star", update_xi_star, ("xi_star",)),
    ("t", update_t, ("log_t",)),
    ("item_bias", update_item_bias, ("bv_mu", "bv_prec")),
    ("items", update_items, ("v_mu", "v_prec")),
)

_TRACES = {"step": 0}


_ORDERED = ("users", "items")  # the blocks that take the pair order


def _step(state, data, hyper, chunk, order):
    _TRACES["step"] += 1  # Python side effect: runs once per trace (compile-once test)
    if isinstance(data, sharding.ShardedObservations):  # the same sweep on every device's block, sums psum-ed
        return run_on_blocks(lambda st, hy, od, block: _sweep(st, block, hy, chunk, od), data, (state, hyper), (order,))
    return _sweep(state, data, hyper, chunk, order)


def _sweep(state, data, hyper, chunk, order):
    for name, update, _ in BLOCKS:
        extra = {"order": order} if name in _ORDERED else {}
        # xi None: each pass computes the optimal xi of the block's incoming state chunk by chunk
        # (= pair_xi(state, data), never stored: no (N,) array besides the data and the item order)
        state = update(state, data, hyper, None, chunk=chunk, **extra)
    return state, PSMInfo(elbo(state, data, hyper, chunk=chunk), state.xi_star)


_step_jit = jax.jit(_step, static_argnums=(3,))
_elbo_jit = jax.jit(lambda state, data, hyper, chunk: elbo(state, data, hyper, chunk=chunk), static_argnums=(3,))

#: id(data) -> (weak reference to data, (K, dtype), PairOrder): `step` builds a data set's order once
_ORDERS: dict = {}


def _order_for(data, K: int, dtype) -> PairOrder:
    """`pair_order` of ``data`` with the default block sizes, cached while ``data`` is alive."""
    return row_blocks.cached_order(_ORDERS, data, (int(K), np.dtype(dtype)), lambda: pair_order(data, K, dtype=dtype))


def step(key, state: PSMState, data: Observations, hyper, *, chunk: int = DEFAULT_CHUNK,
         order: PairOrder | None = None):
    """One sweep of Algorithm 1 (module docstring), jitted once per (shapes, dtype, chunk, blocks).

    Parameters
    ----------
    key : jax.Array or None
        Unused (the sweep is deterministic); kept for the common solver signature.
    state : PSMState
        q.
    data : Observations or sharding.ShardedObservations
        Jax or numpy leaves, ``values`` of the state's dtype (cast here otherwise); or a
        `sharding.ShardedObservations` (`sharding.shard_observations`, the state replicated:
        `sharding.replicate`): the sweep then runs under `jax.shard_map` on every device's block of
        pairs, each sum over pairs psum-ed (`psm_sharded`).
    hyper : ppl_models.psm.PSMHyper
        Hyperparameters (traced: new values do not recompile).
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk of the O(|G| K^2) sums (static).
    order : PairOrder, optional
        `pair_order` of ``data`` (the blocks of the user and item vector updates and their memory
        bound). None: built on the first call for this ``data`` object with the default bound
        (`DEFAULT_BLOCK_BYTES`) and kept while the object lives, so a loop of steps on one data set
        sorts its pairs once.

    Returns
    -------
    state : PSMState
        The new q.
    info : PSMInfo
        Its bounded ELBO and xi* (scalars ()).

    Raises
    ------
    None of its own (no value checks: ``state`` and ``data`` are trusted, checked by `init` / `fit`); a
    ``hyper`` without the PSMHyper fields raises AttributeError, and a non-numeric field TypeError /
    ValueError from ``float``.

    Source: ``000_619a0297b9d686b2.txt`` Algorithm 1; updates of sec. 4 and appendix B (derived,
    corrected where ERRATA says); blocks: project addition (issue 28).
    """
    del key
    dtype = state.u_mu.dtype
    order = _order_for(data, state.u_mu.shape[1], dtype) if order is None else order
    if isinstance(data, sharding.ShardedObservations):
        data = data if data.values.dtype == dtype else data.astype(dtype)
    elif jnp.asarray(data.values).dtype != dtype:
        data = _as_jax(data, dtype)
    return _step_jit(state, data, _hyper_arrays(hyper, dtype), int(chunk), order)


# ---------------------------------------------------------------------------------------------
# driver (the predictions of eq. (5) and the draws from q: `psm_predict`)


def fit(key, data: Observations, K: int, hyper, max_iter: int = 100, tol: float = 1e-6, progress: bool = True, *,
        r: float = 1.0, dtype=np.float64, n_draws: int = 100, init_state: PSMState | None = None,
        chunk: int = DEFAULT_CHUNK, init_scale: float = 0.1, callback=None, checkpoint=None,
        checkpoint_every: int = 10, resume: bool = False, mesh=None) -> base.FitResult:
    """Fit PSM by Algorithm 1 sweeps on `custom_inference.vi_driver.run` until |dL| / |L| < ``tol``.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed (initialisation and draws from q).
    data : Observations
        Shape (I, J), the event counts c_ij (N,).
    K : int >= 1
        Latent dimension.
    hyper : ppl_models.psm.PSMHyper
        Hyperparameters.
    max_iter : int >= 1, default 100
        Sweeps at most.
    tol : float >= 0, default 1e-6
        Stop when the relative change of the ELBO is below ``tol``.
    progress : bool, default True
        Show a tqdm bar.
    r : float > 0, default 1.0
        D' = r D.
    dtype : numpy.float32 or numpy.float64, default numpy.float64
        Float dtype (float64 runs under jax.enable_x64).
    n_draws : int >= 1, default 100
        Draws from q in the ``posterior`` group.
    init_state : PSMState, optional
        Start here (e.g. to resume); its shapes must match.
    chunk : int, default DEFAULT_CHUNK
        Pairs per chunk.
    init_scale : float > 0, default 0.1
        See `init`.
    callback : callable, optional
        ``callback(t, state, info)`` after sweep t.
    checkpoint : str or path-like, optional
        A `vi_driver.run` checkpoint (atomic ``.npz`` every ``checkpoint_every`` sweeps and at the end).
    checkpoint_every : int >= 1, default 10
        Sweeps between checkpoints.
    resume : bool, default False
        Continue from an existing checkpoint, bit for bit the uninterrupted run (the sweeps are
        deterministic; the draws from q use a key of their own).
    mesh : jax.sharding.Mesh, optional
        Split the observed pairs over the devices of the mesh axis ``"nnz"`` (`sharding.nnz_mesh`,
        `sharding.shard_observations`); the variational parameters and the background caches stay
        replicated and every sum over pairs is psum-ed (`psm_sharded`). The result equals the
        single-device fit up to the order of the additions (attrs ``n_devices``). None: one device,
        unchanged.

    Returns
    -------
    base.FitResult
        The state, the ELBO trace (n_iter + 1,) from the initial state, InferenceData with groups
        posterior (draws from q: u, v, b_user, b_item, pi, psi), variational_parameters, vi_trace (elbo,
        rel_change, sweep_seconds); attrs model, method, source, K, r, d_prime, dtype, converged,
        n_iter, seconds.

    Raises
    ------
    ValueError
        Bad data, r, K, hyper, max_iter, tol, n_draws, dtype, init_state shapes (before computing);
        ``mesh`` without an axis named ``"nnz"``; a checkpoint that does not match.
    TypeError
        ``mesh`` not a jax.sharding.Mesh; a bad key.
    FloatingPointError
        A non-finite ELBO (try float64).

    Source: ``000_619a0297b9d686b2.txt`` Algorithm 1; driver and ``mesh``: project addition (issue 14).
    """
    key = base.as_key(key)
    vi_driver.check_fit_args(max_iter, tol, n_draws)
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1 (the posterior group holds draws from q), got {n_draws!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    K = base.check_latent_dim(K)
    if mesh is not None:
        sharding.check_mesh(mesh)
    k_init, k_draw = jax.random.split(key)
    with jax.enable_x64(dtype == np.float64):
        state = init(k_init, data, K, hyper, r=r, dtype=dtype, init_scale=init_scale)
        if init_state is not None:
            state = vi_driver.given_state(init_state, state, dtype)
        d = _as_jax(data, dtype)
        if mesh is not None:  # the pairs split over the devices; the state replicated (module `sharding`)
            d = sharding.shard_observations(d, mesh)
            state = sharding.replicate(state, d)
        h = _hyper_arrays(hyper, dtype)
        first = float(_elbo_jit(state, d, h, int(chunk)))
        run = vi_driver.run(lambda s, t: step(None, s, d, hyper, chunk=chunk), state, max_iter=max_iter, tol=tol,
                            progress=progress, desc=f"PSM VB (K={K})", init_elbo=first, callback=callback,
                            checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
        state = run.state
        posterior = draws_from_q(k_draw, state, int(n_draws))
    I, J = data.shape
    dims = {"u": ["user", "factor"], "v": ["item", "factor"], "b_user": ["user"], "b_item": ["item"],
            "pi": ["user"], "psi": ["item"], **{f: list(ALGORITHM.dims[f]) for f in PSMState._fields},
            "elbo": ["record"], "rel_change": ["record"], "sweep_seconds": ["sweep"]}
    idata = arviz_io.to_inference_data(
        posterior, dims=dims, coords={"user": np.arange(I), "item": np.arange(J), "factor": np.arange(K)},
        extra_groups={"variational_parameters": {f: np.asarray(v) for f, v in state._asdict().items()},
                      "vi_trace": {"elbo": run.elbo, "rel_change": run.rel_change, "sweep_seconds": run.sweep_seconds}},
        attrs={"model": "psm", "method": "vb-algorithm-1", "source": "000_619a0297b9d686b2.txt Algorithm 1, sec. 4, app. B",
               "K": K, "r": float(r), "d_prime": float(state.d_prime), "dtype": str(dtype),
               "converged": int(run.converged), "n_iter": run.n_iter, "seconds": float(run.seconds),
               **({} if mesh is None else {"n_devices": d.n_shards}),
               **{f"hyper_{f}": float(getattr(hyper, f)) for f in _HYPER_FIELDS}})
    return base.FitResult(state, run.elbo, idata)


ALGORITHM = base.Algorithm(
    name="psm-vb",
    kind="vi",
    init=init,
    step=step,
    target=elbo,
    target_name="elbo",
    dims={"u_mu": ("user", "factor"), "u_prec": ("user", "factor"), "v_mu": ("item", "factor"),
          "v_prec": ("item", "factor"), "bu_mu": ("user",), "bu_prec": ("user",), "bv_mu": ("item",),
          "bv_prec": ("item",), "alpha": ("user",), "beta": ("item",), "log_s": ("user",), "log_t": ("item",),
          "xi_star": (), "d_prime": ()},
    source="000_619a0297b9d686b2.txt secs. 3-4, Algorithm 1, appendix B",
).check()
