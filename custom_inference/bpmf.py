r"""Blocked Gibbs sampler for Bayesian probabilistic matrix factorization (BPMF).

Source: ``004_90693a0965f06816.txt`` section 2.2.3, eqs. (2.9), (2.12)-(2.16) (lines
~370-392), i.e. Salakhutdinov & Mnih (ICML 2008), section 3.3 (eqs. 11-14). The
generative program is `ppl_models.bpmf`; we call the observation precision ``alpha``
(the thesis's tau). The hyperparameter object is duck-typed: any object with fields
``alpha, mu0, beta0, nu0, W0`` (e.g. `ppl_models.bpmf.BPMFHyper`); ``nu0=None`` means K and
a scalar ``W0`` means ``W0 * identity``.

Derivation (ours; checked in `validation.models.bpmf` against the program's log joint and by
moment tests of the draws). W(Lambda | W, nu) has E[Lambda] = nu W.

Hyperparameters. With X the (n, K) factor matrix (U or V), xbar its row mean and
S = sum_n (x_n - xbar)(x_n - xbar)^T, the Normal-Wishart prior is conjugate:

    mu, Lambda | X ~ N(mu | mu*, (beta* Lambda)^-1) W(Lambda | W*, nu*)
    beta* = beta0 + n,   nu* = nu0 + n,   mu* = (beta0 mu0 + n xbar) / (beta0 + n)
    (W*)^-1 = W0^-1 + S + beta0 n / (beta0 + n) (xbar - mu0)(xbar - mu0)^T

drawn jointly: Lambda from its marginal W(W*, nu*) (Bartlett decomposition), then mu | Lambda.

Factor vectors. Given V and the hyperparameters, the u_i are independent Gaussians:

    u_i | . ~ N(P_i^-1 h_i, P_i^-1),  P_i = Lambda_U + alpha sum_{j in Omega_i} v_j v_j^T,
                                      h_i = Lambda_U mu_U + alpha sum_{j in Omega_i} r_ij v_j

drawn as u_i = L_i^-T (L_i^-1 h_i + z), P_i = L_i L_i^T, z ~ N(0, I), batched over all i;
then the v_j in the same way given the new U.

Cost per sweep: O(N K^2) for the sums of outer products, plus O((I + J) K^3) for the Cholesky
factorizations (the O(|Omega| K^2 + (I+J) K^3) of the thesis's Table 3.1). The rows are drawn in
blocks (issue 28, `custom_inference.row_blocks`): the entries of a block of users (items) are
visited in the user- (item-) sorted order (`pair_order`), in chunks of ``chunk_size``, and summed
into that block's (B, K, K) precisions only, which are factored and drawn from; B comes from a
memory bound (``row_block``, default `row_blocks.DEFAULT_BLOCK_BYTES`: 8,947 rows at K = 50 in
float32). Memory O((I + J) K + B K^2 + chunk_size K^2): neither the (I, K, K) nor the (J, K, K)
precisions exist whole (10.3 GiB at Netflix's shape and K = 50 before), and nothing of size I x J.
The normals z of all rows are drawn at once ((I, K), as the unblocked sampler draws them), so the
draws equal the unblocked ones (`entry_stats`, `factor_conditional`, `sample_factor_rows`) for the
same key, up to rounding.

Style: `init` / `step` over a `BPMFState` of current draws, public conditionals,
``ALGORITHM`` / ``SPEC`` (declarations for `custom_inference.mcmc_driver`) and `sample`, a
thin call of that driver returning `arviz.InferenceData`; `predict` averages
u_i . v_j over the kept draws (eq. 2.16) and reports its sd.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import multigammaln

from . import arviz_io, base, mcmc_driver, row_blocks
from .data import Observations
from .gauge import gauge_walk

__all__ = [
    "BPMFState",
    "BPMFInfo",
    "NWPosterior",
    "check_hyper",
    "default_chunk_size",
    "init",
    "normal_wishart_posterior",
    "sample_wishart",
    "sample_normal_wishart",
    "entry_stats",
    "factor_conditional",
    "sample_factor_rows",
    "pair_order",
    "GaugeHyper",
    "gauge_log_density",
    "gauge_act",
    "apply_gauge",
    "step",
    "log_joint",
    "sample",
    "predict",
    "BPMF_DIMS",
    "ALGORITHM",
    "SPEC",
]

BPMF_DIMS = {
    "U": ["user", "component"],
    "V": ["item", "component"],
    "mu_U": ["component"],
    "mu_V": ["component"],
    "Lambda_U": ["component", "component_bis"],
    "Lambda_V": ["component", "component_bis"],
}


class BPMFState(NamedTuple):
    """Current draws of one chain (float32 or float64), a NamedTuple (a JAX pytree).

    Parameters
    ----------
    U : jax.Array, shape (I, K), float
        User factors.
    V : jax.Array, shape (J, K), float
        Item factors.
    mu_U : jax.Array, shape (K,), float
        Mean of the user factors' prior.
    Lambda_U : jax.Array, shape (K, K), float
        Precision of the user factors' prior (symmetric positive definite).
    mu_V : jax.Array, shape (K,), float
        Mean of the item factors' prior.
    Lambda_V : jax.Array, shape (K, K), float
        Precision of the item factors' prior.

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.9), (2.12)-(2.15) (the model's parameters).
    """

    U: jax.Array
    V: jax.Array
    mu_U: jax.Array
    Lambda_U: jax.Array
    mu_V: jax.Array
    Lambda_V: jax.Array


class BPMFInfo(NamedTuple):
    """Per-sweep diagnostics of `step`, of the state the sweep returns.

    Parameters
    ----------
    log_joint : jax.Array, shape (), float
        log p(r, U, V, mu_U, Lambda_U, mu_V, Lambda_V) (`log_joint`).
    gauge_accept : jax.Array, shape (), float
        Acceptance rate of the sweep's gauge moves (0 when off).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    log_joint: jax.Array
    gauge_accept: jax.Array


class NWPosterior(NamedTuple):
    """Normal-Wishart parameters N(mu | mu, (beta Lambda)^-1) W(Lambda | W_inv^-1, nu), a NamedTuple.

    Parameters
    ----------
    mu : jax.Array, shape (K,), float
        Mean of mu.
    beta : jax.Array, shape (), float
        Precision multiplier of mu.
    W_inv : jax.Array, shape (K, K), float
        Inverse Wishart scale (symmetric positive definite).
    nu : jax.Array, shape (), float
        Wishart degrees of freedom (> K - 1).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.14)-(2.15) (the Normal-Wishart prior; its conjugate
    posterior is derived in the module docstring).
    """

    mu: jax.Array
    beta: jax.Array
    W_inv: jax.Array
    nu: jax.Array


# ------------------------------------------------------------------------------
# Hyperparameters


def check_hyper(hyper, n_components: int) -> None:
    """Raise ValueError naming the field if ``hyper`` is unusable for K = ``n_components``.

    Parameters
    ----------
    hyper : ppl_models.bpmf.BPMFHyper or object
        Needs alpha, beta0 > 0 (scalars); nu0 None or > K - 1; W0 a positive scalar or a symmetric
        positive definite (K, K) matrix; mu0 a scalar or a (K,) vector.
    n_components : int >= 1
        K.

    Returns
    -------
    None
        Returns only when ``hyper`` is usable.

    Raises
    ------
    ValueError
        Naming the field that breaks a constraint above, or K < 1.
    AttributeError
        Not of its own: ``hyper`` lacks one of the fields.
    TypeError
        Not of its own: a non-numeric field or K (from ``float`` / ``int``; ValueError for a
        non-numeric string).

    Source: project addition (the constraints of the Gaussian-Wishart prior of
    ``004_90693a0965f06816.txt`` eqs. (2.14)-(2.15)).
    """
    k = int(n_components)
    if k < 1:
        raise ValueError(f"n_components must be >= 1, got {n_components!r}")
    for name in ("alpha", "beta0"):
        if not np.ndim(getattr(hyper, name)) == 0 or not float(getattr(hyper, name)) > 0:
            raise ValueError(f"{name} must be a positive scalar, got {getattr(hyper, name)!r}")
    if hyper.nu0 is not None and not float(hyper.nu0) > k - 1:
        raise ValueError(f"nu0 must be > K - 1 = {k - 1}, got {hyper.nu0!r}")
    w0 = np.asarray(hyper.W0, dtype=np.float64)
    if w0.ndim == 0:
        if not w0 > 0:
            raise ValueError(f"W0 as a scalar must be > 0, got {hyper.W0!r}")
    elif w0.shape != (k, k) or not np.allclose(w0, w0.T) or np.any(np.linalg.eigvalsh(w0) <= 0):
        raise ValueError(f"W0 must be a positive scalar or a symmetric positive definite ({k}, {k}) matrix")
    if np.ndim(hyper.mu0) not in (0, 1) or (np.ndim(hyper.mu0) == 1 and np.shape(hyper.mu0) != (k,)):
        raise ValueError(f"mu0 must be a scalar or a ({k},) vector, got shape {np.shape(hyper.mu0)}")


def _resolved(hyper, k: int, dtype):
    """(alpha, mu0 (K,), beta0, nu0, W0 (K, K), W0^-1 (K, K)) as arrays; traceable."""
    w0 = jnp.asarray(hyper.W0, dtype)
    w0 = w0 * jnp.eye(k, dtype=dtype) if w0.ndim == 0 else w0
    mu0 = jnp.broadcast_to(jnp.asarray(hyper.mu0, dtype), (k,))
    nu0 = jnp.asarray(k if hyper.nu0 is None else hyper.nu0, dtype)
    return (jnp.asarray(hyper.alpha, dtype), mu0, jnp.asarray(hyper.beta0, dtype), nu0, w0, jnp.linalg.inv(w0))


def default_chunk_size(n_components: int, budget_bytes: int = 1 << 25) -> int:
    """Entries per chunk such that the chunk's (C, K, K) outer products take ~``budget_bytes``
    in float64 (32 MiB by default): C = max(64, budget / (8 K^2)).

    Parameters
    ----------
    n_components : int >= 1
        K.
    budget_bytes : int, default 2**25 (32 MiB)
        Memory of one chunk's outer products, in bytes.

    Returns
    -------
    int
        Entries per chunk, a Python int >= 64.

    Raises
    ------
    ZeroDivisionError
        Not of its own: for K = 0.

    Source: project addition.
    """
    return int(max(64, budget_bytes // (8 * n_components * n_components)))


# ------------------------------------------------------------------------------
# Conditionals


def normal_wishart_posterior(X, hyper) -> NWPosterior:
    """Normal-Wishart posterior of (mu, Lambda) given the factor rows X (n, K) (module docstring).

    Parameters
    ----------
    X : jax.Array, shape (n, K), float
        The factor rows (U or V).
    hyper : ppl_models.bpmf.BPMFHyper or object
        BPMF hyperparameters: fields alpha, mu0 (scalar or (K,)), beta0, nu0 (None: K), W0 (scalar
        or (K, K)) (module docstring).

    Returns
    -------
    NWPosterior
        mu (K,), beta (), W_inv (K, K), nu () of X's dtype.

    Raises
    ------
    ValueError
        Not of its own (no value checks; validate ``hyper`` with `check_hyper`): an ``X`` that is
        not 2-D (unpacking its shape).

    Source: Salakhutdinov & Mnih (2008) eq. (14); seed 004 eq. (2.14)-(2.15) with (2.12)-(2.13).
    """
    n, k = X.shape
    _, mu0, beta0, nu0, _, w0_inv = _resolved(hyper, k, X.dtype)
    xbar = jnp.mean(X, axis=0)
    xc = X - xbar
    scatter = xc.T @ xc
    d = xbar - mu0
    beta = beta0 + n
    w_inv = w0_inv + scatter + (beta0 * n / beta) * jnp.outer(d, d)
    return NWPosterior((beta0 * mu0 + n * xbar) / beta, beta, 0.5 * (w_inv + w_inv.T), nu0 + n)


def sample_wishart(key, W_inv, nu):
    """One draw Lambda ~ W(W, nu) (E = nu W) given the *inverse* scale W_inv (K, K), nu > K - 1.

    Bartlett decomposition: A lower triangular with A_kk = sqrt(chi2(nu - k)), k = 0..K-1,
    A_kl ~ N(0, 1) below the diagonal, so A A^T ~ W(I, nu); with W_inv = C C^T (Cholesky),
    L = C^-T satisfies L L^T = W and Lambda = L A A^T L^T ~ W(W, nu).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    W_inv : jax.Array, shape (K, K), float
        The inverse scale, symmetric positive definite.
    nu : float or jax.Array, shape ()
        Degrees of freedom, > K - 1.

    Returns
    -------
    jax.Array, shape (K, K), dtype of ``W_inv``
        Lambda, symmetrized.

    Raises
    ------
    None of its own (no checks: traced code; a W_inv that is not positive definite gives
    NaN, not an error).

    Source: project addition (Bartlett decomposition), for the Wishart draws of
    ``004_90693a0965f06816.txt`` eqs. (2.14)-(2.15).
    """
    k = W_inv.shape[-1]
    dtype = W_inv.dtype
    k_chi, k_norm = jax.random.split(key)
    dof = nu - jnp.arange(k, dtype=dtype)
    diag = jnp.sqrt(2.0 * jax.random.gamma(k_chi, 0.5 * dof, dtype=dtype))
    a = jnp.tril(jax.random.normal(k_norm, (k, k), dtype=dtype), -1) + jnp.diag(diag)
    c = jnp.linalg.cholesky(W_inv)
    b = solve_triangular(c, a, lower=True, trans="T")  # C^-T A
    lam = b @ b.T
    return 0.5 * (lam + lam.T)


def sample_normal_wishart(key, post: NWPosterior):
    """(mu, Lambda) ~ N(mu | post.mu, (post.beta Lambda)^-1) W(Lambda | post.W_inv^-1, post.nu).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    post : NWPosterior
        mu (K,), beta (), W_inv (K, K), nu ().

    Returns
    -------
    mu : jax.Array, shape (K,), dtype of ``post.mu``
        The drawn mean.
    Lambda : jax.Array, shape (K, K), same dtype
        The drawn precision.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.14)-(2.15) (the conjugate posterior, module
    docstring; Salakhutdinov & Mnih 2008 eq. 14).
    """
    k_lam, k_mu = jax.random.split(key)
    lam = sample_wishart(k_lam, post.W_inv, post.nu)
    chol = jnp.linalg.cholesky(lam)
    z = jax.random.normal(k_mu, post.mu.shape, dtype=post.mu.dtype)
    mu = post.mu + solve_triangular(chol, z, lower=True, trans="T") / jnp.sqrt(post.beta)
    return mu, lam


def _chunks(x, chunk: int, fill):
    n = x.shape[0]
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    return jnp.concatenate([x, jnp.full((pad,), fill, x.dtype)]).reshape(n_chunks, chunk)


def entry_stats(targets, sources, values, other, n_targets: int, chunk_size: int):
    """Sums over observed entries: gram_t = sum_{e: target_e = t} x_e x_e^T, rhs_t = sum r_e x_e,
    with x_e = other[source_e].

    For the u_i update: targets = rows, sources = cols, other = V (J, K). The N entries are
    processed ``chunk_size`` at a time under ``lax.scan`` (padding entries carry weight 0), so
    at most a (chunk_size, K, K) array of outer products exists. O(N K^2) work.

    Parameters
    ----------
    targets : jax.Array, shape (N,), int
        The row summed into, in [0, n_targets).
    sources : jax.Array, shape (N,), int
        The row of ``other`` of each entry.
    values : jax.Array, shape (N,), float
        The rating r_e of each entry.
    other : jax.Array, shape (n_other, K), float
        The other side's factors.
    n_targets : int
        Rows of the output.
    chunk_size : int >= 1
        Entries per chunk (capped at N).

    Returns
    -------
    gram : jax.Array, shape (n_targets, K, K), dtype of ``other``
        sum x_e x_e^T per target.
    rhs : jax.Array, shape (n_targets, K), dtype of ``other``
        sum r_e x_e per target.

    Raises
    ------
    ZeroDivisionError
        Not of its own (no index checks: traced code): N = 0 entries (zero chunk length).

    Source: ``004_90693a0965f06816.txt`` sec. 2.2.3 (the sums of the factor conditionals, module
    docstring; chunking: project addition).
    """
    k = other.shape[1]
    dtype = other.dtype
    n = targets.shape[0]
    chunk = int(min(chunk_size, n))
    t = _chunks(targets, chunk, 0)
    s = _chunks(sources, chunk, 0)
    r = _chunks(values.astype(dtype), chunk, 0)
    w = _chunks(jnp.ones((n,), dtype), chunk, 0)

    def body(carry, xs):
        gram, rhs = carry
        t_c, s_c, r_c, w_c = xs
        x = other[s_c] * w_c[:, None]
        gram = gram.at[t_c].add(x[:, :, None] * x[:, None, :])
        rhs = rhs.at[t_c].add(r_c[:, None] * x)
        return (gram, rhs), None

    init = (jnp.zeros((n_targets, k, k), dtype), jnp.zeros((n_targets, k), dtype))
    (gram, rhs), _ = jax.lax.scan(body, init, (t, s, r, w))
    return gram, rhs


def factor_conditional(gram, rhs, mu, Lambda, alpha):
    """Natural parameters of the factor rows' conditional: precision P (n, K, K) = Lambda +
    alpha gram, and h (n, K) = Lambda mu + alpha rhs (module docstring; S&M 2008 eqs. 12-13).

    Parameters
    ----------
    gram : jax.Array, shape (n, K, K), float
        sum_{j in Omega_i} v_j v_j^T per row (`entry_stats`).
    rhs : jax.Array, shape (n, K), float
        sum_{j in Omega_i} r_ij v_j per row.
    mu : jax.Array, shape (K,), float
        The prior mean (mu_U or mu_V).
    Lambda : jax.Array, shape (K, K), float
        The prior precision.
    alpha : float or jax.Array, shape ()
        The observation precision.

    Returns
    -------
    precision : jax.Array, shape (n, K, K), the inputs' dtype
        P = Lambda + alpha gram.
    h : jax.Array, shape (n, K), the inputs' dtype
        Lambda mu + alpha rhs.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.9), (2.12)-(2.13) (conditional derived in the
    module docstring).
    """
    return Lambda[None] + alpha * gram, (Lambda @ mu)[None] + alpha * rhs


def sample_factor_rows(key, precision, h):
    """Independent draws x_n ~ N(P_n^-1 h_n, P_n^-1), batched: precision (n, K, K), h (n, K).

    x = L^-T (L^-1 h + z) with P = L L^T, z ~ N(0, I): mean P^-1 h, covariance L^-T L^-1 = P^-1.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    precision : jax.Array, shape (n, K, K), float
        P_n, symmetric positive definite.
    h : jax.Array, shape (n, K), float
        P_n times the mean.

    Returns
    -------
    jax.Array, shape (n, K), dtype of ``h``
        One draw per row.

    Raises
    ------
    None of its own (no checks: traced code; a precision that is not positive definite
    gives NaN).

    Source: ``004_90693a0965f06816.txt`` sec. 2.2.3 (the Gaussian factor conditionals, module
    docstring).
    """
    return _draw_rows(precision, h, jax.random.normal(key, h.shape, dtype=h.dtype))


def _draw_rows(precision, h, z):
    """x = L^-T (L^-1 h + z) for the given standard normals z (n, K) (`sample_factor_rows`)."""
    chol = jnp.linalg.cholesky(precision)
    y = solve_triangular(chol, h[..., None], lower=True)[..., 0]
    return solve_triangular(chol, (y + z)[..., None], lower=True, trans="T")[..., 0]


def pair_order(data: Observations, K: int, *, dtype=None, block_bytes: int = row_blocks.DEFAULT_BLOCK_BYTES,
               row_block=None) -> row_blocks.PairOrder:
    """The order of the entries for the blocked row draws of `step` (``order=``): computed once per
    data set on the host (`row_blocks.host_order`: a stable counting sort, O(N), N int32 for the
    items and for the users unless the entries are row-major), instead of two argsorts inside
    every sweep.

    Parameters
    ----------
    data : Observations, shape (I, J)
        N entries (numpy or jax leaves).
    K : int
        The latent dimension.
    dtype : numpy dtype, keyword-only, optional
        The state's float dtype (default that of ``data.values``).
    block_bytes : int >= 1, keyword-only, default `row_blocks.DEFAULT_BLOCK_BYTES`
        Memory bound of one block's (B, K, K) arrays.
    row_block : None, int or pair (users, items), keyword-only
        Overrides the bound (`row_blocks.block_sizes`).

    Returns
    -------
    row_blocks.PairOrder
        The order to pass to `step` as ``order=``.

    Raises
    ------
    ValueError
        From `row_blocks.block_sizes` (a bad ``block_bytes`` or ``row_block``).

    Source: project addition (issue 28).
    """
    dtype = np.dtype(dtype or np.asarray(data.values[:1]).dtype)
    return row_blocks.host_order(data.rows, data.cols, data.n_rows, data.n_cols, K, dtype=dtype,
                                 block_bytes=block_bytes, block=row_block)


def _sample_rows_blocked(key, data: Observations, own_is_user: bool, other, mu, Lambda, alpha, chunk: int,
                         order: row_blocks.PairOrder):
    """All rows of one side (U for ``own_is_user``, else V) drawn from their conditionals block by
    block (`row_blocks.over_row_blocks`): the block's gram and rhs sums (`entry_stats`' terms in the
    same order), `factor_conditional`, then the draw with the block's rows of z ~ N(0, I) (n, K)."""
    n_own = data.n_rows if own_is_user else data.n_cols
    k, dtype = other.shape[1], other.dtype
    z = jax.random.normal(key, (n_own, k), dtype=dtype)  # all rows at once: the unblocked draw's normals
    own_ids, other_ids = (data.rows, data.cols) if own_is_user else (data.cols, data.rows)

    def pair_terms(take, m):
        return take(own_ids), m, take(data.values).astype(dtype) * m, other[take(other_ids)], None

    def finish(acc, ids):
        gram, _, rhs = acc
        return (_draw_rows(*factor_conditional(gram, rhs, mu, Lambda, alpha), z[ids]),)

    (X,) = row_blocks.over_row_blocks(order, own_is_user, data.rows.shape[0], chunk, pair_terms, finish,
                                      (jnp.zeros((n_own, k), dtype),), K=k, dtype=dtype)
    return X


# ------------------------------------------------------------------------------
# State, log joint, sweep


def init(key, data: Observations, K: int, hyper, *, dtype=jnp.float64, scale: float | None = None) -> BPMFState:
    """A dispersed start: U, V ~ N(0, scale^2) elementwise (default scale = K^-1/2, so that
    u_i . v_j starts at O(K^-1/2)); mu = mu0 and Lambda = nu0 W0 (the prior means; the
    first sweep redraws them from U and V). Different keys give different starts.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    data : Observations, shape (I, J)
        Only ``n_rows`` and ``n_cols`` are read.
    K : int >= 1
        Number of components.
    hyper : ppl_models.bpmf.BPMFHyper or object
        BPMF hyperparameters: fields alpha, mu0 (scalar or (K,)), beta0, nu0 (None: K), W0 (scalar
        or (K, K)) (module docstring).
    dtype : numpy dtype, keyword-only, default float64
        The state's float dtype.
    scale : float, keyword-only, optional
        Standard deviation of U, V (default K^-1/2).

    Returns
    -------
    BPMFState
        U (I, K), V (J, K), mu_U, mu_V (K,), Lambda_U, Lambda_V (K, K), of ``dtype``.

    Raises
    ------
    None of its own (no value checks; validate ``hyper`` with `check_hyper`).

    Source: project addition (starting point).
    """
    k = int(K)
    scale = k ** -0.5 if scale is None else scale
    k1, k2 = jax.random.split(key)
    _, mu0, _, nu0, w0, _ = _resolved(hyper, k, dtype)
    U = scale * jax.random.normal(k1, (data.n_rows, k), dtype=dtype)
    V = scale * jax.random.normal(k2, (data.n_cols, k), dtype=dtype)
    return BPMFState(U, V, mu0, nu0 * w0, mu0, nu0 * w0)


def _log_wishart(lam, w0_inv, nu0):
    k = lam.shape[-1]
    _, logdet_lam = jnp.linalg.slogdet(lam)
    _, logdet_w0inv = jnp.linalg.slogdet(w0_inv)
    return (0.5 * (nu0 - k - 1) * logdet_lam - 0.5 * jnp.trace(w0_inv @ lam) - 0.5 * nu0 * k * jnp.log(2.0)
            + 0.5 * nu0 * logdet_w0inv - multigammaln(0.5 * nu0, k))


def _log_mvn_rows(X, mu, lam):
    """sum_n log N(x_n | mu, lam^-1)."""
    n, k = X.shape
    _, logdet = jnp.linalg.slogdet(lam)
    xc = X - mu
    quad = jnp.sum((xc @ lam) * xc)
    return 0.5 * n * logdet - 0.5 * n * k * jnp.log(2.0 * jnp.pi) - 0.5 * quad


def _sum_sq_residuals(state: BPMFState, data: Observations, chunk_size: int):
    n = data.rows.shape[0]
    chunk = int(min(chunk_size, n))
    dtype = state.U.dtype
    xs = (_chunks(data.rows, chunk, 0), _chunks(data.cols, chunk, 0), _chunks(data.values.astype(dtype), chunk, 0),
          _chunks(jnp.ones((n,), dtype), chunk, 0))

    def body(acc, x):
        r, c, v, w = x
        e = v - jnp.sum(state.U[r] * state.V[c], axis=1)
        return acc + jnp.sum(w * e * e), None

    acc, _ = jax.lax.scan(body, jnp.zeros((), dtype), xs)
    return acc


def log_joint(state: BPMFState, data: Observations, hyper, chunk_size: int | None = None) -> jax.Array:
    """log p(r, U, V, mu_U, Lambda_U, mu_V, Lambda_V), all normalizing constants included
    (the density of `ppl_models.bpmf.model` with respect to Lebesgue measure on the
    symmetric matrices' lower triangles). O(N K + (I + J) K^2 + K^3).

    Parameters
    ----------
    state : BPMFState
        U (I, K), V (J, K), mu (K,), Lambda (K, K).
    data : Observations, shape (I, J)
        The N ratings.
    hyper : ppl_models.bpmf.BPMFHyper or object
        BPMF hyperparameters: fields alpha, mu0 (scalar or (K,)), beta0, nu0 (None: K), W0 (scalar
        or (K, K)) (module docstring).
    chunk_size : int, optional
        Entries per chunk of the residual sum (default `default_chunk_size`).

    Returns
    -------
    jax.Array, shape (), the state's dtype
        The log joint in nats.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.9), (2.12)-(2.15).
    """
    k = state.U.shape[1]
    dtype = state.U.dtype
    chunk = default_chunk_size(k) if chunk_size is None else chunk_size
    alpha, mu0, beta0, nu0, _, w0_inv = _resolved(hyper, k, dtype)
    n = data.rows.shape[0]
    lik = 0.5 * n * (jnp.log(alpha) - jnp.log(2.0 * jnp.pi)) - 0.5 * alpha * _sum_sq_residuals(state, data, chunk)
    out = lik
    for X, mu, lam in ((state.U, state.mu_U, state.Lambda_U), (state.V, state.mu_V, state.Lambda_V)):
        out = out + _log_wishart(lam, w0_inv, nu0) + _log_mvn_rows(mu[None], mu0, beta0 * lam) + _log_mvn_rows(X, mu, lam)
    return out


class GaugeHyper(NamedTuple):
    """The hyperparameters a gauge move changes, a NamedTuple (a JAX pytree).

    Parameters
    ----------
    mu_U : jax.Array, shape (K,), float
        Mean of the user factors' prior.
    Lambda_U : jax.Array, shape (K, K), float
        Precision of the user factors' prior.
    mu_V : jax.Array, shape (K,), float
        Mean of the item factors' prior.
    Lambda_V : jax.Array, shape (K, K), float
        Precision of the item factors' prior.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (see `gauge_log_density`).
    """

    mu_U: jax.Array
    Lambda_U: jax.Array
    mu_V: jax.Array
    Lambda_V: jax.Array


def gauge_log_density(hyper):
    r"""Log density of the linear gauge at the moved hyperparameters, for `custom_inference.gauge`.

    The gauge group is GL(K) acting by T_A: U -> U A, V -> V A^-T (so u_i . v_j is unchanged),
    mu_U -> A^T mu_U, Lambda_U -> A^-1 Lambda_U A^-T, mu_V -> A^-1 mu_V, Lambda_V -> A^T Lambda_V A
    (the factors' priors given the hyperparameters move along). In
    log p(T_A x) + log|det J_A| - log p(x) (derivation, ours) the likelihood is invariant;
    sum_i log N(u_i | mu_U, Lambda_U^-1) changes by -I log|det A| through its log det and the
    Jacobian of U is +I log|det A|; on the item side +J and -J; the means' Jacobians
    (+-log|det A|) cancel the log dets of N(mu | mu0, (beta0 Lambda)^-1); X -> A^-1 X A^-T on
    symmetric matrices has Jacobian |det A|^-(K+1), cancelled by its item-side twin, as are the
    two Wishart log det terms (nu0 - K - 1)/2 (-+2 log|det A|). What is left depends on the
    moved hyperparameters only:

        log_density = -1/2 tr(W0^-1 Lambda_U') - 1/2 tr(W0^-1 Lambda_V')
                      - beta0/2 (mu_U' - mu0)^T Lambda_U' (mu_U' - mu0) - (same for V),

    O(K^2). Checked against `log_joint` plus a ``jax.jacfwd`` Jacobian in
    `validation.models.bpmf.gauge_check`.

    Parameters
    ----------
    hyper : ppl_models.bpmf.BPMFHyper or object
        BPMF hyperparameters: fields alpha, mu0 (scalar or (K,)), beta0, nu0 (None: K), W0 (scalar
        or (K, K)) (module docstring).

    Returns
    -------
    callable
        ``log_density(h, A) -> jax.Array`` of shape () (traceable): ``h`` a `GaugeHyper` (mu (K,),
        Lambda (K, K)), ``A`` (K, K) float (unused: the target depends on h only).

    Raises
    ------
    None of its own.

    Source: project addition (the gauge move of `custom_inference.gauge`; derivation above).
    """

    def log_density(h: GaugeHyper, A):
        k = h.mu_U.shape[0]
        _, mu0, beta0, _, _, w0_inv = _resolved(hyper, k, h.mu_U.dtype)
        out = jnp.zeros((), h.mu_U.dtype)
        for lam, mu in ((h.Lambda_U, h.mu_U), (h.Lambda_V, h.mu_V)):
            d = mu - mu0
            out = out - 0.5 * jnp.sum(w0_inv * lam) - 0.5 * beta0 * d @ lam @ d
        return out

    return log_density


def gauge_act(h: GaugeHyper, k, l, z) -> GaugeHyper:
    """One generator G of `custom_inference.gauge.gauge_walk` applied to the hyperparameters, O(K):
    k == l: G scales column k by c = e^z; k != l: G = I + z e_k e_l^T (column l += z column k).
    mu_U <- G^T mu_U, Lambda_U <- G^-1 Lambda_U G^-T, mu_V <- G^-1 mu_V, Lambda_V <- G^T Lambda_V G.

    Parameters
    ----------
    h : GaugeHyper
        mu_U, mu_V (K,), Lambda_U, Lambda_V (K, K), float.
    k : jax.Array, shape (), int
        First index of the generator.
    l : jax.Array, shape (), int
        Second index (``l == k``: a scaling).
    z : jax.Array, shape (), float
        The generator's size.

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
    # scaling of column k
    sc = GaugeHyper(h.mu_U.at[k].multiply(c), h.Lambda_U.at[k, :].divide(c).at[:, k].divide(c),
                    h.mu_V.at[k].divide(c), h.Lambda_V.at[k, :].multiply(c).at[:, k].multiply(c))
    # shear: G^-1 = I - z e_k e_l^T, G^T = I + z e_l e_k^T
    lu = h.Lambda_U.at[k, :].add(-z * h.Lambda_U[l, :])
    lu = lu.at[:, k].add(-z * lu[:, l])
    lv = h.Lambda_V.at[l, :].add(z * h.Lambda_V[k, :])
    lv = lv.at[:, l].add(z * lv[:, k])
    sh = GaugeHyper(h.mu_U.at[l].add(z * h.mu_U[k]), lu, h.mu_V.at[k].add(-z * h.mu_V[l]), lv)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(k == l, a, b), sc, sh)


def apply_gauge(state: BPMFState, A) -> BPMFState:
    """T_A of `gauge_log_density` applied to the whole state, A (K, K) invertible; O((I + J) K^2 + K^3).
    All predictions u_i . v_j are unchanged.

    Parameters
    ----------
    state : BPMFState
        The current draws.
    A : jax.Array, shape (K, K), float
        An invertible group element (from `custom_inference.gauge.gauge_walk`).

    Returns
    -------
    BPMFState
        The same shapes and dtype.

    Raises
    ------
    None of its own (a singular A gives inf/NaN, not an error).

    Source: project addition (see `gauge_log_density`).
    """
    a_inv = jnp.linalg.inv(A)
    lu = a_inv @ state.Lambda_U @ a_inv.T
    lv = A.T @ state.Lambda_V @ A
    return BPMFState(state.U @ A, state.V @ a_inv.T, A.T @ state.mu_U, 0.5 * (lu + lu.T), a_inv @ state.mu_V,
                     0.5 * (lv + lv.T))


@functools.partial(jax.jit, static_argnames=("chunk_size", "gauge_rounds", "row_block"))
def step(key, state: BPMFState, data: Observations, hyper, chunk_size: int | None = None,
         gauge_rounds: int = 5, *, row_block=None, order: row_blocks.PairOrder | None = None
         ) -> tuple[BPMFState, BPMFInfo]:
    """One systematic-scan sweep (S&M 2008, section 3.3): (mu_U, Lambda_U) | U, (mu_V, Lambda_V) | V,
    then all u_i | V, mu_U, Lambda_U in parallel, then all v_j | U (new), mu_V, Lambda_V; then
    ``gauge_rounds`` rounds of linear-gauge Metropolis moves (`custom_inference.gauge`: column
    scalings and shears of U A, V A^-T; not in the paper, which is ``gauge_rounds=0``; they cost
    O(rounds K^3 + (I + J) K^2) and fix the slow mixing of the factor scales that SBC finds,
    see `validation.models.bpmf`).

    Each block is drawn exactly from its complete conditional and each gauge move is a
    Metropolis-Hastings step, so the sweep leaves the posterior invariant.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    state : BPMFState
        The current draws.
    data : Observations, shape (I, J)
        Kind "real"; values any float.
    hyper : ppl_models.bpmf.BPMFHyper or object
        BPMF hyperparameters: fields alpha, mu0 (scalar or (K,)), beta0, nu0 (None: K), W0 (scalar
        or (K, K)) (module docstring).
    chunk_size : int, optional
        Entries per chunk of the O(N K^2) sums (static; default `default_chunk_size`).
    gauge_rounds : int >= 0, default 5
        Rounds of gauge moves (static).
    row_block : None, int or pair (users, items), keyword-only
        Rows per block of the factor draws (static; None: the memory bound
        `row_blocks.DEFAULT_BLOCK_BYTES`).
    order : row_blocks.PairOrder, keyword-only, optional
        `pair_order` of ``data`` (None: built inside the trace, two O(N log N) argsorts per sweep;
        its block sizes then override ``row_block``).

    Returns
    -------
    state : BPMFState
        The new state.
    info : BPMFInfo
        Of the new state.

    Raises
    ------
    None of its own (jitted; no value checks).

    Source: ``004_90693a0965f06816.txt`` sec. 2.2.3 (Gibbs sampling of eqs. (2.9), (2.12)-(2.15);
    Salakhutdinov & Mnih 2008 sec. 3.3); the gauge moves and the blocks of rows are project additions.
    """
    k = state.U.shape[1]
    dtype = state.U.dtype
    chunk = default_chunk_size(k) if chunk_size is None else chunk_size
    alpha = jnp.asarray(hyper.alpha, dtype)
    k_hu, k_hv, k_u, k_v, k_g = jax.random.split(key, 5)
    mu_U, Lambda_U = sample_normal_wishart(k_hu, normal_wishart_posterior(state.U, hyper))
    mu_V, Lambda_V = sample_normal_wishart(k_hv, normal_wishart_posterior(state.V, hyper))
    if order is None:
        order = row_blocks.traced_order(data.rows, data.cols, data.n_rows, data.n_cols, k, dtype, block=row_block)
    U = _sample_rows_blocked(k_u, data, True, state.V, mu_U, Lambda_U, alpha, chunk, order)
    V = _sample_rows_blocked(k_v, data, False, U, mu_V, Lambda_V, alpha, chunk, order)
    new = BPMFState(U, V, mu_U, Lambda_U, mu_V, Lambda_V)
    if gauge_rounds == 0:
        return new, BPMFInfo(log_joint(new, data, hyper, chunk), jnp.zeros((), dtype))
    A, _, accept = gauge_walk(k_g, GaugeHyper(mu_U, Lambda_U, mu_V, Lambda_V), gauge_log_density(hyper), gauge_act,
                              k, gauge_rounds, shears=True, dtype=dtype)
    new = apply_gauge(new, A)
    return new, BPMFInfo(log_joint(new, data, hyper, chunk), accept)


# ------------------------------------------------------------------------------
# Declarations for the sampling driver


def _prepare(data: Observations, dtype):
    return Observations(jnp.asarray(data.rows), jnp.asarray(data.cols), jnp.asarray(np.asarray(data.values, dtype)),
                        data.n_rows, data.n_cols)


def _predict(state: BPMFState, data, at):
    rows, cols = at
    return jnp.sum(state.U[rows] * state.V[cols], axis=1)


_SOURCE = "004_90693a0965f06816.txt eqs. 2.9, 2.12-2.16; Salakhutdinov & Mnih 2008 sec. 3.3"

ALGORITHM = base.Algorithm(
    name="bpmf-gibbs", kind="mcmc", init=init, step=step, target=log_joint, target_name="log_joint",
    dims={k: tuple(v) for k, v in BPMF_DIMS.items()}, source=_SOURCE,
).check()

SPEC = mcmc_driver.SamplerSpec(
    algorithm=ALGORITHM, model="bpmf", method="gibbs", variables=BPMFState._fields, prepare=_prepare,
    sizes=lambda data: (data.n_rows, data.n_cols, data.nnz),
    coords=lambda data, K: {"user": np.arange(data.n_rows), "item": np.arange(data.n_cols), "component": np.arange(K),
                            "component_bis": np.arange(K)},
    predict=_predict, predict_prepare=mcmc_driver.prepare_cells, mean_stats=("gauge_accept",),
)


@mcmc_driver.run_options(num_warmup=200, num_samples=500)
def sample(
    key,
    data: Observations,
    K: int,
    hyper,
    *,
    chunk_size: int | None = None,
    init_scale: float | None = None,
    gauge_rounds: int = 5,
    row_block=None,
    options: mcmc_driver.SampleOptions,
) -> "arviz_io.InferenceData":
    """Run ``num_chains`` BPMF Gibbs chains through `custom_inference.mcmc_driver` and return the draws.

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed; the same key gives the same draws.
    data : Observations, shape (I, J)
        Real-valued entries (build with ``kind="real", drop_zeros=False`` so that zero ratings
        stay data).
    K : int >= 1
        Number of components.
    hyper : ppl_models.bpmf.BPMFHyper or object
        BPMF hyperparameters: fields alpha, mu0 (scalar or (K,)), beta0, nu0 (None: K), W0 (scalar
        or (K, K)) (module docstring).
    chunk_size : int >= 1, keyword-only, optional
        Entries per chunk (`entry_stats`); default `default_chunk_size(K)`.
    init_scale : float, keyword-only, optional
        Standard deviation of the starting U, V (see `init`).
    gauge_rounds : int >= 0, keyword-only, default 5
        Rounds of linear-gauge Metropolis moves per sweep (`step`); 0 is the paper's plain Gibbs
        sampler, which SBC shows mixing slowly in the factor scales (`validation.models.bpmf`).
    row_block : None, int or pair (users, items) of ints >= 1, keyword-only
        Rows per block of the factor draws (`step`; None: blocks from the memory bound
        `row_blocks.DEFAULT_BLOCK_BYTES`); the draws do not depend on it beyond rounding.
    num_chains : int >= 1, keyword-only, default 4
        Independent chains (each from its own key).
    num_warmup : int >= 0, keyword-only, default 200
        Warm-up sweeps per chain, discarded (rounded up to a multiple of ``thin``).
    num_samples : int >= 1, keyword-only, default 500
        Kept draws per chain.
    thin : int >= 1, keyword-only, default 1
        Sweeps per kept draw.
    keep : sequence of str, keyword-only, optional
        Names to store per draw: state fields (default all; U and V cost I K and J K per draw)
        and ``"pred"`` (with ``predict_at``).
    predict_at : tuple (rows, cols) of int arrays, shape (M,) each, keyword-only, optional
        Cells at which the running posterior mean and sd of u_i . v_j are kept (``predictions``
        group; eq. 2.16).
    dtype : numpy.float32 or numpy.float64, keyword-only, optional
        Float dtype of the state (None: float64).
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
        ``posterior`` with the kept variables, dims (chain, draw, user|item [, component[,
        component_bis]]); ``sample_stats`` with ``lp`` (the log joint of each kept state) and
        ``gauge_accept`` (mean acceptance over the draw's sweeps); attrs of `mcmc_driver` plus
        chunk_size and gauge_rounds.

    Raises
    ------
    ValueError
        Bad hyperparameters (`check_hyper`); K < 1 or not integral; bad chain/draw counts,
        chunk_size, gauge_rounds or row_block; unknown names in ``keep``; ``data`` with an index out
        of range, a NaN or infinite value, duplicates or no entries (`Observations.validate`, before any compilation); ``predict_at`` out of range;
        a checkpoint of other settings, of another run or damaged.
    TypeError
        ``data`` not an `Observations`; a non-numeric K (`base.check_latent_dim`); a bad key; an
        unknown keyword.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`mcmc_driver.sample`).

    Source: S&M 2008 sec. 3.3 (sweep); the driver is a project addition.
    """
    if not isinstance(data, Observations):
        raise TypeError(f"data must be an Observations, got {type(data).__name__}")
    data.validate("real", name="data", float_only=False)  # however built: ids in range, finite values
    k = base.check_latent_dim(K)
    check_hyper(hyper, k)
    gauge_rounds = mcmc_driver.check_count("gauge_rounds", gauge_rounds, 0)
    chunk = default_chunk_size(k) if chunk_size is None else mcmc_driver.check_count("chunk_size", chunk_size, 1)
    step_options = {"chunk_size": chunk, "gauge_rounds": gauge_rounds}
    if row_block is not None:  # (absent otherwise: the attrs and checkpoint fingerprints of runs without it)
        try:
            row_blocks.block_sizes(data.n_rows, data.n_cols, k, np.float64, block=row_block)
        except ValueError as err:
            raise ValueError(f"row_block: {err}") from None
        step_options["row_block"] = row_block if np.ndim(row_block) == 0 else tuple(int(b) for b in row_block)
    return mcmc_driver.sample(SPEC, key, data, k, hyper, options=options, init_options={"scale": init_scale},
                              step_options=step_options)


def predict(idata, rows, cols, *, include_noise: bool = False, alpha: float | None = None, batch: int = 64):
    """Posterior mean and sd of the prediction at the cells (rows, cols), over all kept draws.

    The mean is eq. (2.16) of seed 004: (1/C) sum_c u_i^c . v_j^c over the C = chains x draws
    kept draws. The sd is that of u_i . v_j over the draws (uncertainty of the mean rating);
    with ``include_noise`` the observation noise 1/alpha is added to the variance (the
    posterior predictive sd of a new rating; ``alpha`` defaults to the run's hyper_alpha).

    Parameters
    ----------
    idata : arviz.InferenceData
        From `sample`, with ``U`` and ``V`` kept (C = chains x draws).
    rows : array-like, shape (M,), int
        Users of the cells, in [0, I).
    cols : array-like, shape (M,), int
        Items of the cells, in [0, J).
    include_noise : bool, keyword-only, default False
        Add the observation noise 1/alpha to the variance (posterior predictive sd of a new rating).
    alpha : float, keyword-only, optional
        The observation precision for ``include_noise`` (default the run's ``hyper_alpha`` attr).
    batch : int >= 1, keyword-only, default 64
        Draws processed at a time (memory batch x M x K).

    Returns
    -------
    mean : numpy.ndarray, shape (M,), float64
        (1/C) sum_c u_i^c . v_j^c.
    sd : numpy.ndarray, shape (M,), float64
        The sd of u_i . v_j over the draws (plus 1/alpha in the variance with ``include_noise``).

    Raises
    ------
    ValueError
        U or V not kept; rows/cols of different lengths or out of range; no ``posterior`` group.
    KeyError
        Not of its own: with ``include_noise`` and no ``alpha``, an ``idata`` without the
        ``hyper_alpha`` attribute.

    Source: ``004_90693a0965f06816.txt`` eq. (2.16) (the mean); the sd is a project addition.
    """
    post = arviz_io.group_arrays(idata)
    if "U" not in post or "V" not in post:
        raise ValueError("idata: predict needs U and V in the posterior (keep=('U', 'V', ...))")
    U = post["U"].reshape(-1, *post["U"].shape[2:])
    V = post["V"].reshape(-1, *post["V"].shape[2:])
    rows, cols = np.asarray(rows), np.asarray(cols)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(f"rows and cols must be 1-D of equal length, got {rows.shape} and {cols.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= U.shape[1]):
        raise ValueError(f"rows: index out of range [0, {U.shape[1] - 1}]")
    if cols.size and (cols.min() < 0 or cols.max() >= V.shape[1]):
        raise ValueError(f"cols: index out of range [0, {V.shape[1] - 1}]")
    s1 = np.zeros(rows.size)
    s2 = np.zeros(rows.size)
    for start in range(0, U.shape[0], batch):
        p = np.einsum("smk,smk->sm", U[start:start + batch][:, rows], V[start:start + batch][:, cols])
        s1 += p.sum(axis=0)
        s2 += (p * p).sum(axis=0)
    c = U.shape[0]
    mean = s1 / c
    var = np.maximum(s2 / c - mean ** 2, 0.0) * (c / max(c - 1, 1))
    if include_noise:
        a = float(idata.posterior.attrs["hyper_alpha"]) if alpha is None else float(alpha)
        var = var + 1.0 / a
    return mean, np.sqrt(var)
