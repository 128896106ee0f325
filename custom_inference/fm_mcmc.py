r"""MCMC-FM: the Gibbs sampler of the Bayesian factorization machine.

Source: ``004_90693a0965f06816.txt`` eqs. 2.17, 2.22-2.30 (model; Freudenthaler, Schmidt-
Thieme, Rendle 2011), with the hyperparameters shared per feature group as in the
published sampler (see `ppl_models.fm`, `FMHierHyper`). The thesis prints no conditionals
("refer to [C. Freudenthaler, 2011]"); the ones below are derived here and checked against
the NumPyro program's log density in `validation.models.fm_mcmc`.

Derivation. yhat_n (eq. 2.17) is linear in every single parameter theta:
yhat_n = h_n(theta) theta + (terms free of theta), with

    theta = w0:    h_n = 1
    theta = w_l:   h_n = x_nl
    theta = v_lk:  h_n = x_nl (q_nk - x_nl v_lk),     q_nk = sum_m x_nm v_mk

With the residual e_n = y_n - yhat_n and a N(m, 1/s) prior, the complete conditional is
N(h / P, 1 / P) with

    P = s + alpha sum_n h_n^2,    h = s m + alpha sum_n h_n (e_n + h_n theta_current).

After a draw, e_n -= h_n (theta_new - theta_old) and, for v_lk, q_nk += x_nl (new - old).
The sums run over the nonzeros of column l only, so a sweep costs O(nnz(X) K).

Blocks. `FMDesign` colours the features so that two features of one block never share a
row; then h_n of feature l involves no other feature m of the block (q_nk - x_nl v_lk only
contains features of *other* blocks in row n), the rows touched by the features of a
block are disjoint, and the conditionals of all features of a block are independent given
the rest: the whole block is drawn at once, exactly as if one feature after the other
(checked in `validation.models.fm_mcmc`). Blocks are visited in a static Python loop (inside
jit) over ``design.block_ptr``: w of the block, then v_{.k} for k = 1..K (a lax.scan over the
rows of the factor-major V.T; see `_update_block_t`).

No stored q (issue 28). For a feature l of block b, q_nk - x_nl v_lk is the sum of the *other*
blocks' terms in row n (no other feature of block b is nonzero in row n):

    q_nk - x_nl v_lk = sum_{b' != b} sum_{m in b'} x_nm v_mk =: q^(-b)_nk,

so the draw of v_{.k} of block b needs only column k of V: q^(-b)_{.k} is recomputed from V[:, k]
when the draw starts (O(nnz - nnz_b)), then dropped. The sweep keeps e (N,) and one (N,) column at a
time instead of the (N, K) q of libFM's cache (20 GB at N = 1e8, K = 50, float32). Same
conditionals, same random numbers in the same order as the cached form (draws equal to rounding,
tests/custom_inference/test_fm_mcmc.py). Cost: sum_b (nnz - nnz_b) K = (B - 1) nnz K per sweep for
the columns (B blocks; the ids design has B = 2: nnz K, as much as the cached form's q updates).

Hyperparameters (normal-gamma, eqs. 2.27-2.30 per group g and factor k), with n_g the
number of features of group g:

    sigma_w[g] | mu_w, w ~ Gamma(alpha_0' + (n_g + 1)/2,
                                beta_0' + (nu_0 (mu_w[g] - mu_0)^2 + sum_{l in g} (w_l - mu_w[g])^2) / 2)
    mu_w[g] | sigma_w, w ~ N((nu_0 mu_0 + sum_{l in g} w_l) / (nu_0 + n_g), 1 / ((nu_0 + n_g) sigma_w[g]))

(the same for sigma_v[g, k], mu_v[g, k] with v_lk), i.e. `custom_inference.gaussian`'s
sample_ng_precision / sample_ng_mean applied per group (written here with segment sums
because groups differ in size). alpha | e ~ Gamma(alpha_0 + N/2, beta_0 + sum e^2 / 2);
w0 as above with prior N(mu_0, 1/sigma_0).

Caches. `step` recomputes e from the parameters at the start of each sweep (one O(nnz K) pass,
factor by factor: only an (N,) column is live), so rounding in the incremental updates never
accumulates (float32). The state's ``q`` is either the (N, K) cache q = X V (``init(keep_q=True)``,
the default, or `caches` of such a state: `step` and `update_block` then return it current, at the
cost of one more O(nnz K) pass and N K numbers) or an (N, 0) placeholder (``keep_q=False``, what
`sample` runs: nothing of size N K exists during the sweep). The sweep never reads q. A full block
(one nonzero in every row, e.g. a one-hot user or item group) needs no scatter (its nonzeros sorted
by row are rows 0..N-1).

Sharded (issue 14). With a `fm_design.ShardedFMDesign` (``sample(mesh=...)``), `step` runs the
same sweep under `jax.shard_map`: each device holds a contiguous range of instances (rows of X)
with their nonzeros and the matching parts of e and q; w, V, the hyperparameters and the keys are
replicated. Every sum over rows or nonzeros (alpha's sum e^2, w0's sum e, the per-feature sums of
the w and v conditionals, the log joint's e term) is the per-device sum followed by `jax.lax.psum`
(`sharding.Reducer`); e-sums are masked by the row weight (padding rows: y = 0, weight 0; padding
nonzeros have value 0 and add 0 to every per-feature sum, and to the columns q^(-b)). The draws are the same as on one device
(replicated keys, replicated sums), up to the order of the floating-point additions.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import stats as jstats

from . import arviz_io, base, mcmc_driver
from .fm_design import FMDesign, ShardedFMDesign
from .gaussian import normal_natural_to_moments, sample_normal_natural
from .sharding import LOCAL

__all__ = [
    "FMMCMCState",
    "FMMCMCInfo",
    "PARAMS",
    "init",
    "fm_mean",
    "caches",
    "log_joint",
    "alpha_conditional",
    "w0_conditional",
    "w_block_conditional",
    "v_block_conditional",
    "group_precision_conditional",
    "sample_group_precision",
    "sample_group_mean",
    "update_block",
    "step",
    "sample",
    "predict",
    "ALGORITHM",
    "SPEC",
]

PARAMS = ("w0", "w", "V", "alpha", "mu_w", "sigma_w", "mu_v", "sigma_v")


class FMMCMCState(NamedTuple):
    """Current draws and caches of one chain (float32 or float64), a NamedTuple (a JAX pytree).

    Parameters
    ----------
    w0 : jax.Array, shape (), float
        Global bias.
    w : jax.Array, shape (D,), float
        Feature weights.
    V : jax.Array, shape (D, K), float
        Feature factors.
    alpha : jax.Array, shape (), float
        Noise precision.
    mu_w, sigma_w : jax.Array, shape (G,), float
        Group means and precisions of w.
    mu_v, sigma_v : jax.Array, shape (G, K), float
        Group means and precisions of V.
    e : jax.Array, shape (N,), float
        The residual cache y - yhat.
    q : jax.Array, shape (N, K) or (N, 0), float
        The cache q = X V, or an (N, 0) placeholder when q is not kept (``init(keep_q=False)``, as
        `sample` runs: module docstring, "Caches").

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.17, 2.22-2.30 (the parameters); caches: project
    addition.
    """

    w0: jax.Array
    w: jax.Array
    V: jax.Array
    alpha: jax.Array
    mu_w: jax.Array
    sigma_w: jax.Array
    mu_v: jax.Array
    sigma_v: jax.Array
    e: jax.Array
    q: jax.Array


class FMMCMCInfo(NamedTuple):
    """Per-sweep diagnostics of the state the sweep *returns*.

    Parameters
    ----------
    log_joint : jax.Array, shape (), float
        Exact log p(y, all latents), as NumPyro's ``log_density`` of `ppl_models.fm.model_hier`,
        from the incrementally updated caches.
    rmse : jax.Array, shape (), float
        Training RMSE of yhat.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    log_joint: jax.Array
    rmse: jax.Array


def _check_hier(hyper):
    for name in ("mu_0", "sigma_0", "nu_0", "alpha_0p", "beta_0p", "alpha_0", "beta_0"):
        if not hasattr(hyper, name):
            raise ValueError(f"hyper: missing field {name!r} (expected ppl_models.fm.FMHierHyper)")
    for name in ("sigma_0", "nu_0", "alpha_0p", "beta_0p", "alpha_0", "beta_0"):
        v = float(getattr(hyper, name))
        if not v > 0:
            raise ValueError(f"hyper.{name} must be > 0, got {v}")


def _check_K(K):
    if int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    return int(K)


def fm_mean(w0, w, V, rows, cols, values, n_rows: int):
    """yhat (N,) of eq. 2.17 via eq. 4.22 over COO nonzeros; also returns q = X V (N, K).

    Parameters
    ----------
    w0 : jax.Array, shape (), float
        Global bias.
    w : jax.Array, shape (D,), float
        Feature weights.
    V : jax.Array, shape (D, K), float
        Feature factors.
    rows : jax.Array, shape (M,), int
        Instance of each nonzero of X, in [0, N).
    cols : jax.Array, shape (M,), int
        Feature of each nonzero, in [0, D).
    values : jax.Array, shape (M,), float
        x_nl of each nonzero.
    n_rows : int
        N, the number of instances.

    Returns
    -------
    yhat : jax.Array, shape (N,), the operands' float dtype
        The FM prediction of each instance.
    q : jax.Array, shape (N, K), same dtype
        X V.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17, computed as eq. 4.22.
    """
    lin = jax.ops.segment_sum(values * w[cols], rows, num_segments=n_rows)
    xv = values[:, None] * V[cols]
    q = jax.ops.segment_sum(xv, rows, num_segments=n_rows)
    s2 = jax.ops.segment_sum(xv * xv, rows, num_segments=n_rows)
    return w0 + lin + 0.5 * jnp.sum(q * q - s2, axis=-1), q


def _block_rows_add(acc, u, design: FMDesign, b: int):
    """acc (..., N) + the (..., M_b) updates u of block ``b``'s nonzeros added into their rows
    (last axis): a plain add for a full block (rows 0..N-1 in order), else a scatter-add with
    rows."""
    if _full_block(design, b):
        return acc + u
    r = design.rows[design.order[design.block_ptr[b]:design.block_ptr[b + 1]]]
    return acc.at[..., r].add(u)


def _keeps_q(state: FMMCMCState) -> bool:
    """Static: the state carries the (N, K) cache q (not the (N, 0) placeholder)."""
    return state.q.shape[-1] != 0


def _caches_t(state: FMMCMCState, design: FMDesign, keep_q: bool = True):
    """(e (N,), qT = q.T (K, N)) recomputed from the parameters, factor-major (see `caches`);
    qT is None without ``keep_q`` (then only one (N,) column is live at a time)."""
    N = design.n_rows
    ents = [_block_entries(design, b) for b in range(design.n_blocks)]
    lin = jnp.zeros((N,), state.w.dtype)
    for b, (_, c, x) in enumerate(ents):
        lin = _block_rows_add(lin, x * state.w[c], design, b)

    def factor(pair, vk):
        # one row of q.T: q_nk = sum_l x_nl v_lk and s2_nk = sum_l (x_nl v_lk)^2, block by block
        qk = jnp.zeros((N,), vk.dtype)
        s2k = jnp.zeros((N,), vk.dtype)
        for b, (_, c, x) in enumerate(ents):
            xv = x * vk[c]
            qk = _block_rows_add(qk, xv, design, b)
            s2k = _block_rows_add(s2k, xv * xv, design, b)
        return pair + (qk * qk - s2k), (qk if keep_q else None)

    # (zeros shaped like y: under shard_map they vary over the devices, as the carry does)
    pair, qT = jax.lax.scan(factor, jax.lax.full_like(design.y, 0, state.V.dtype), state.V.T)
    return design.y - (state.w0 + lin + 0.5 * pair), qT


def caches(state: FMMCMCState, design: FMDesign) -> FMMCMCState:
    """State with e = y - yhat and q = X V recomputed from the parameters (O(nnz K)).

    Computed factor-major (q.T, (K, N), one factor at a time in a `lax.scan`) and block by block:
    a full block (one nonzero in every row, e.g. a one-hot group) adds its terms to every row
    without a scatter; other blocks scatter-add (rows unique within a block). This is `fm_mean`'s
    yhat up to rounding (each row sums its terms in block order, `fm_mean` in column order; the
    sum over k runs factor by factor). A `ShardedFMDesign` does the same on every device's rows.

    Why: this refresh was about a third of a sweep (profile of issue 14: scatters over rows, the
    (N, K) transposes and a small-axis reduction); factor by factor it needs none of them.

    Parameters
    ----------
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign or ShardedFMDesign
        N instances, D features, B blocks.

    Returns
    -------
    FMMCMCState
        With e (N,) and q (N, K) recomputed, dtype of the state; a state whose q is the (N, 0)
        placeholder (``init(keep_q=False)``) keeps it (only e is recomputed).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: project addition (module docstring, "Caches"; yhat of ``004_90693a0965f06816.txt``
    eq. 2.17).
    """
    if isinstance(design, ShardedFMDesign):
        return _sharded_call(lambda st, d, red: caches(st, d), design, (state,), _state_specs(design))
    keep = _keeps_q(state)
    e, qT = _caches_t(state, design, keep)
    return state._replace(e=e, q=qT.T if keep else state.q)


def init(key, design: FMDesign, K: int, hyper, *, init_std: float = 0.1, dtype=jnp.float64,
         keep_q: bool = True) -> FMMCMCState:
    """Initial state: w0 = 0, w = 0, V ~ N(0, init_std^2), alpha = 1, mu = 0, sigma = 1 (libFM's
    defaults), caches computed. ``design`` arrays may be numpy or jax.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    design : FMDesign
        N instances, D features, G groups (arrays numpy or jax).
    K : int >= 1
        Number of factors.
    hyper : ppl_models.fm.FMHierHyper
        Not read (the signature of the protocol).
    init_std : float, keyword-only, default 0.1
        Standard deviation of the initial V.
    dtype : numpy dtype, keyword-only, default float64
        The state's float dtype.
    keep_q : bool, keyword-only, default True
        Carry the (N, K) cache q = X V (True), or an (N, 0) placeholder (False: the sweep needs no
        q, module docstring "No stored q"; `sample` runs this way). The draws do not depend on it.

    Returns
    -------
    FMMCMCState
        Shapes in its docstring, of ``dtype``, caches computed.

    Raises
    ------
    None of its own (no value checks on K).

    Source: project addition (libFM's defaults).
    """
    D, G = design.n_features, design.n_groups
    V = init_std * jax.random.normal(key, (D, K), dtype=dtype)
    z = lambda *s: jnp.zeros(s, dtype=dtype)  # noqa: E731
    o = lambda *s: jnp.ones(s, dtype=dtype)  # noqa: E731
    state = FMMCMCState(z(), z(D), V, o(), z(G), o(G), z(G, K), o(G, K), z(design.n_rows),
                        z(design.n_rows, K if keep_q else 0))
    return caches(state, _as_jax(design, dtype))


def log_joint(state: FMMCMCState, design: FMDesign, hyper, red=LOCAL) -> jax.Array:
    """Exact log p(y, w0, w, V, alpha, mu_w, sigma_w, mu_v, sigma_v) of eqs. 2.22-2.30, using the
    cached residual e (so the caches must be current). O(N + D K).

    Parameters
    ----------
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign
        N instances, D features, G groups, B blocks; M nonzeros of X (a `ShardedFMDesign` inside
        a sharded sweep).
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).
    red : sharding.Reducer, default `sharding.LOCAL`
        How sums over rows are combined (one device: plain sums; a sharded block: psum-ed, padding
        rows masked).

    Returns
    -------
    jax.Array, shape (), the state's dtype
        The log joint in nats.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.22-2.30 (hyperparameters shared per feature group,
    see `ppl_models.fm`).
    """
    g = design.group
    norm = lambda x, m, prec: jstats.norm.logpdf(x, m, 1.0 / jnp.sqrt(prec))  # noqa: E731
    gam = lambda x, a, b: jstats.gamma.logpdf(x, a, scale=1.0 / b)  # noqa: E731
    h = hyper
    lp = gam(state.alpha, h.alpha_0, h.beta_0) + norm(state.w0, h.mu_0, h.sigma_0)
    lp += jnp.sum(gam(state.sigma_w, h.alpha_0p, h.beta_0p)) + jnp.sum(norm(state.mu_w, h.mu_0, h.nu_0 * state.sigma_w))
    lp += jnp.sum(gam(state.sigma_v, h.alpha_0p, h.beta_0p)) + jnp.sum(norm(state.mu_v, h.mu_0, h.nu_0 * state.sigma_v))
    lp += jnp.sum(norm(state.w, state.mu_w[g], state.sigma_w[g]))
    lp += jnp.sum(norm(state.V, state.mu_v[g], state.sigma_v[g]))
    lp += red.sum(red.mask(norm(state.e, 0.0, state.alpha)))
    return lp


# ---------------------------------------------------------------------------------------
# complete conditionals (natural parameters; module docstring)


def alpha_conditional(state: FMMCMCState, design: FMDesign, hyper, red=LOCAL):
    """(shape, rate) of alpha | rest: Gamma(alpha_0 + N/2, beta_0 + sum_n e_n^2 / 2).

    Parameters
    ----------
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign
        N instances, D features, G groups, B blocks; M nonzeros of X (a `ShardedFMDesign` inside
        a sharded sweep).
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).
    red : sharding.Reducer, default `sharding.LOCAL`
        How sums over rows are combined (one device: plain sums; a sharded block: psum-ed, padding
        rows masked).

    Returns
    -------
    shape : jax.Array, shape (), the state's dtype
        alpha_0 + N/2.
    rate : jax.Array, shape (), the state's dtype
        beta_0 + sum_n e_n^2 / 2.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: derived (module docstring) from ``004_90693a0965f06816.txt`` eqs. 2.22 and 2.26.
    """
    return hyper.alpha_0 + 0.5 * red.count(design.n_rows), hyper.beta_0 + 0.5 * red.sum(red.mask(state.e ** 2))


def w0_conditional(state: FMMCMCState, design: FMDesign, hyper, red=LOCAL):
    """(precision P, precision x mean h) of w0 | rest (h_n = 1).

    Parameters
    ----------
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign
        N instances, D features, G groups, B blocks; M nonzeros of X (a `ShardedFMDesign` inside
        a sharded sweep).
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).
    red : sharding.Reducer, default `sharding.LOCAL`
        How sums over rows are combined (one device: plain sums; a sharded block: psum-ed, padding
        rows masked).

    Returns
    -------
    precision : jax.Array, shape (), the state's dtype
        P = sigma_0 + alpha N.
    precision_times_mean : jax.Array, shape (), the state's dtype
        h = sigma_0 mu_0 + alpha sum_n (e_n + w0).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: derived (module docstring) from ``004_90693a0965f06816.txt`` eqs. 2.22-2.23.
    """
    P = hyper.sigma_0 + state.alpha * red.count(design.n_rows)
    h = hyper.sigma_0 * hyper.mu_0 + state.alpha * red.sum(red.mask(state.e + state.w0))
    return P, h


def _block_entries(design: FMDesign, b: int):
    lo, hi = design.block_ptr[b], design.block_ptr[b + 1]
    idx = design.order[lo:hi]
    return design.rows[idx], design.cols[idx], design.values[idx]


def w_block_conditional(state: FMMCMCState, design: FMDesign, hyper, b: int, red=LOCAL):
    """(P, h), each (D,), of w_l | rest for the features l of block ``b`` (static int); entries of
    features outside the block are meaningless. h_n = x_nl.

    Parameters
    ----------
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign
        N instances, D features, G groups, B blocks; M nonzeros of X (a `ShardedFMDesign` inside
        a sharded sweep).
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).
    b : int
        The block, in 0..B-1 (static).
    red : sharding.Reducer, default `sharding.LOCAL`
        How sums over rows are combined (one device: plain sums; a sharded block: psum-ed, padding
        rows masked).

    Returns
    -------
    precision : jax.Array, shape (D,), the state's dtype
        P of each w_l.
    precision_times_mean : jax.Array, shape (D,), the state's dtype
        h of each w_l.

    Raises
    ------
    IndexError
        Not of its own: a block index ``b`` outside 0..n_blocks-1 (from ``design.block_ptr``).

    Source: derived (module docstring) from ``004_90693a0965f06816.txt`` eqs. 2.22 and 2.24.
    """
    r, c, x = _block_entries(design, b)
    g = design.group
    D = design.n_features
    s, m = state.sigma_w[g], state.mu_w[g]
    P = s + state.alpha * red.seg(x * x, c, D, False)
    h = s * m + state.alpha * red.seg(x * (state.e[r] + x * state.w[c]), c, D, False)
    return P, h


def _q_other(vk, design: FMDesign, b: int):
    """q^(-b)_{.k} at block ``b``'s nonzeros (M_b,), or at every row (N,) for a full block: the sum of
    the other blocks' terms x_nm v_mk in each row (module docstring, "No stored q"), from column
    ``vk`` = V[:, k] (D,) alone. Full blocks add elementwise, others scatter-add into their rows."""
    # (zeros shaped like y: under shard_map they vary over the devices)
    acc = jax.lax.full_like(design.y, 0, vk.dtype)
    for b2 in range(design.n_blocks):
        if b2 != b:
            _, c2, x2 = _block_entries(design, b2)
            acc = _block_rows_add(acc, x2 * vk[c2], design, b2)
    if _full_block(design, b):
        return acc
    return acc[_block_entries(design, b)[0]]


def v_block_conditional(state: FMMCMCState, design: FMDesign, hyper, b: int, k):
    """(P, h), each (D,), of v_lk | rest for the features of block ``b``; ``k`` may be traced.
    h_n = x_nl (q_nk - x_nl v_lk) = x_nl q^(-b)_nk, computed from V[:, k] (``state.q`` is not read).

    Parameters
    ----------
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign
        N instances, D features, B blocks (one device).
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).
    b : int
        The block, in 0..B-1 (static).
    k : int or jax.Array, shape (), int
        The factor, in 0..K-1 (may be traced).

    Returns
    -------
    precision : jax.Array, shape (D,), the state's dtype
        P of each v_lk (meaningful on the block's features).
    precision_times_mean : jax.Array, shape (D,), the state's dtype
        h of each v_lk.

    Raises
    ------
    IndexError
        Not of its own: a block index ``b`` outside 0..n_blocks-1 (from ``design.block_ptr``).

    Source: derived (module docstring) from ``004_90693a0965f06816.txt`` eqs. 2.22 and 2.25.
    """
    r, c, x = _block_entries(design, b)
    g = design.group
    D = design.n_features
    vk = state.V[:, k]
    s, m = state.sigma_v[g, k], state.mu_v[g, k]
    hn = x * _q_other(vk, design, b)  # at the block's nonzeros (a full block's are rows 0..N-1)
    P = s + state.alpha * jax.ops.segment_sum(hn * hn, c, num_segments=D)
    h = s * m + state.alpha * jax.ops.segment_sum(hn * (state.e[r] + hn * vk[c]), c, num_segments=D)
    return P, h


def group_precision_conditional(x, group, n_groups: int, mean, mu0, nu0, alpha0, beta0):
    """(shape, rate) of the normal-gamma precision per group: x (D,) or (D, K), group (D,),
    mean (G,) or (G, K); both outputs have mean's shape:
    Gamma(alpha0 + (n_g + 1)/2, beta0 + (nu0 (mean - mu0)^2 + sum_{l in g} (x_l - mean)^2)/2).

    Parameters
    ----------
    x : jax.Array, shape (D,) or (D, K), float
        The values (w, or V) whose group precisions are drawn.
    group : jax.Array, shape (D,), int
        The group of each feature, in 0..G-1.
    n_groups : int
        G.
    mean : jax.Array, shape (G,) or (G, K), float
        The current group means.
    mu0, nu0, alpha0, beta0 : float
        The normal-gamma prior.

    Returns
    -------
    shape : jax.Array, the shape of ``mean``, dtype of the rate
        alpha0 + (n_g + 1)/2.
    rate : jax.Array, the shape of ``mean``, float
        beta0 + (nu0 (mean - mu0)^2 + sum_{l in g} (x_l - mean)^2)/2.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.27-2.30 (normal-gamma conditional derived in
    `custom_inference.gaussian`; per group as in the published sampler).
    """
    n = jax.ops.segment_sum(jnp.ones(x.shape[0], x.dtype), group, num_segments=n_groups)
    n = n.reshape((n_groups,) + (1,) * (x.ndim - 1))
    sq = jax.ops.segment_sum((x - mean[group]) ** 2, group, num_segments=n_groups)
    shape = alpha0 + 0.5 * (n + 1)
    rate = beta0 + 0.5 * (nu0 * (mean - mu0) ** 2 + sq)
    return jnp.broadcast_to(shape, rate.shape).astype(rate.dtype), rate


def sample_group_precision(key, x, group, n_groups: int, mean, mu0, nu0, alpha0, beta0):
    """One draw from `group_precision_conditional`; for one group it is
    `gaussian.sample_ng_precision` (same key, same draw).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    x : jax.Array, shape (D,) or (D, K), float
        The values.
    group : jax.Array, shape (D,), int
        The group of each feature, in 0..G-1.
    n_groups : int
        G.
    mean : jax.Array, shape (G,) or (G, K), float
        The current group means.
    mu0, nu0, alpha0, beta0 : float
        The normal-gamma prior.

    Returns
    -------
    jax.Array, the shape of ``mean``, float
        One precision per group (and factor).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.27-2.30 (see `group_precision_conditional`).
    """
    shape, rate = group_precision_conditional(x, group, n_groups, mean, mu0, nu0, alpha0, beta0)
    return jax.random.gamma(key, shape) / rate


def sample_group_mean(key, x, group, n_groups: int, precision, mu0, nu0):
    """Normal-gamma mean draw per group: N((nu0 mu0 + sum x) / (nu0 + n_g), 1 / ((nu0 + n_g) precision)).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    x : jax.Array, shape (D,) or (D, K), float
        The values.
    group : jax.Array, shape (D,), int
        The group of each feature, in 0..G-1.
    n_groups : int
        G.
    precision : jax.Array, shape (G,) or (G, K), float
        The current group precisions.
    mu0, nu0 : float
        The normal-gamma prior's mean and precision multiplier.

    Returns
    -------
    jax.Array, the shape of ``precision``, float
        One mean per group (and factor).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 2.27 and 2.29 (normal-gamma conditional derived in
    `custom_inference.gaussian`).
    """
    n = jax.ops.segment_sum(jnp.ones(x.shape[0], x.dtype), group, num_segments=n_groups)
    n = n.reshape((n_groups,) + (1,) * (x.ndim - 1))
    sx = jax.ops.segment_sum(x, group, num_segments=n_groups)
    return sample_normal_natural(key, (nu0 + n) * precision, precision * (nu0 * mu0 + sx))


# ---------------------------------------------------------------------------------------
# sweep


def _full_block(design: FMDesign, b: int) -> bool:
    """Static: block ``b`` has one nonzero in every row, so its rows are 0..N-1 in order."""
    return design.block_ptr[b + 1] - design.block_ptr[b] == design.n_rows


def _update_block_t(key, state: FMMCMCState, VT, design: FMDesign, hyper, b: int, red=LOCAL):
    """`update_block` on the factor-major VT = V.T (K, D): returns (state with w, e updated; VT).
    ``state.q`` and ``state.V`` are neither read nor written.

    Layout: the draw of v_.k reads and writes only column k of V, so the factor loop is a
    `lax.scan` over the rows VT[k] (contiguous, in as xs, out as ys) with only e carried. The
    column q^(-b)_{.k} (module docstring, "No stored q") is recomputed inside the scan body from
    VT[k]: O(nnz - nnz_b + N) per k, and nothing of size N K exists. (The former form carried the
    (K, N) q.T through the scan as xs -> ys: with q of the state, the sweep held up to three N K
    buffers, 6 GiB at 1e7 instances, K 50, float32.)

    Full blocks (a one-hot group: one nonzero of the block in every row, `_full_block`): the
    block's nonzeros are sorted by row, so r = 0..N-1 and the gathers e[r] and the scatter-adds
    into e are plain elementwise operations (the same floating-point operations on the same
    operands; XLA may contract a multiply-add into one fused multiply-add there, so float results
    can differ from the scatter form by rounding).
    """
    K = VT.shape[0]
    D = design.n_features
    r, c, x = _block_entries(design, b)
    full = _full_block(design, b)
    rows_of = (lambda a: a) if full else (lambda a: a[r])  # noqa: E731

    def add_rows(a, u):
        return a + u if full else a.at[r].add(u)

    g = design.group
    in_block = design.block == b
    k_w, k_v = jax.random.split(key)
    P, h = w_block_conditional(state, design, hyper, b, red)
    w_new = jnp.where(in_block, sample_normal_natural(k_w, P, h), state.w)
    delta = (w_new - state.w)[c]
    e = add_rows(state.e, -x * delta)
    keys_v = jax.random.split(k_v, K)
    s_all, m_all = state.sigma_v.T[:, g], state.mu_v.T[:, g]  # (K, D) priors of v_lk
    alpha = state.alpha
    dt = jnp.result_type(s_all, m_all, alpha, x, VT, state.e)  # the dtype of the draw's mean
    # the standard normals of all K draws at once: the same numbers as
    # sample_normal_natural(keys_v[k], P, h) draws inside the loop (vmap of jax.random.normal over
    # keys), without K separate generator loops
    z_all = jax.vmap(lambda kk: jax.random.normal(kk, (D,), dtype=dt))(keys_v)

    def body(e, row):
        # factor k reads and writes only its own row VT[k]: it goes through the scan as xs -> ys,
        # and only e is carried
        z, vk, s, m = row
        vc = vk[c]
        hn = x * _q_other(vk, design, b)  # x_nl (q_nk - x_nl v_lk), at the block's nonzeros
        P = s + alpha * red.seg(hn * hn, c, D, False)
        h = s * m + alpha * red.seg(hn * (rows_of(e) + hn * vc), c, D, False)
        mean, var = normal_natural_to_moments(P, h)  # sample_normal_natural with the drawn z
        vk_new = jnp.where(in_block, mean + jnp.sqrt(var) * z, vk)
        d = (vk_new - vk)[c]
        # (stored in V's dtype, as .at[].set did; d keeps the draw's precision)
        return add_rows(e, (-hn * d).astype(e.dtype)), vk_new.astype(vk.dtype)

    e, VT = jax.lax.scan(body, e, (z_all, VT, s_all, m_all))
    return state._replace(w=w_new, e=e), VT


def update_block(key, state: FMMCMCState, design: FMDesign, hyper, b: int) -> FMMCMCState:
    """Draw w_l, then v_l1, ..., v_lK for all features l of block ``b`` (static), updating e (and q,
    when the state keeps it).

    Keys: ``k_w, k_v = split(key)``; factor k uses ``split(k_v, K)[k]``; each draw is
    `sample_normal_natural` over all D features, kept where ``block == b``.
    (Computed by `_update_block_t` on V.T; `step` keeps that layout across blocks. q is not read:
    a kept (N, K) q gets the block's change x_nl (v_new - v_old)_l. added to its rows.)

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign
        N instances, D features, B blocks (one device).
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).
    b : int
        The block, in 0..B-1 (static).

    Returns
    -------
    FMMCMCState
        With new w (D,), V (D, K), e (N,), q (N, K) or the (N, 0) placeholder, dtype of the state.

    Raises
    ------
    IndexError
        Not of its own: a block index ``b`` outside 0..n_blocks-1 (from ``design.block_ptr``).

    Source: derived conditionals (module docstring, "Blocks") for ``004_90693a0965f06816.txt``
    eqs. 2.22-2.25.
    """
    state, VT = _update_block_t(key, state, state.V.T, design, hyper, b)
    V = VT.T
    q = state.q
    if _keeps_q(state):
        _, c, x = _block_entries(design, b)
        q = _block_rows_add(q.T, (x * (V - state.V)[c].T).astype(q.dtype), design, b).T
    return state._replace(q=q, V=V)


def step(key, state: FMMCMCState, design: FMDesign, hyper) -> tuple[FMMCMCState, FMMCMCInfo]:
    """One systematic-scan sweep: caches refreshed; (alpha, sigma_w, sigma_v) jointly (they are
    conditionally independent); mu_w; mu_v; w0; then every block (w, then v_.1..v_.K). Jit-able (the block loop is static).

    A `ShardedFMDesign` (`fm_design.shard_fm_design`) runs the same sweep under `jax.shard_map`:
    e and q split by rows over the devices, the sums over rows psum-ed (module docstring, "Sharded").

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    state : FMMCMCState
        The current draws and caches (shapes in its docstring).
    design : FMDesign or ShardedFMDesign
        N instances, D features, G groups, B blocks.
    hyper : ppl_models.fm.FMHierHyper
        Fields mu_0, sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 (floats).

    Returns
    -------
    state : FMMCMCState
        The new state (e updated incrementally; a kept q recomputed from the new V, an (N, 0) q
        left as it is).
    info : FMMCMCInfo
        Of the new state.

    Raises
    ------
    None of its own (no value checks).

    Source: derived conditionals (module docstring).
    """
    if isinstance(design, ShardedFMDesign):
        return _step_sharded(key, state, design, hyper)
    return _step(key, state, design, hyper, LOCAL)


def _step(key, state: FMMCMCState, design: FMDesign, hyper, red):
    e, _ = _caches_t(state, design, keep_q=False)  # e alone (q is never read by the sweep)
    state, block_keys = _draw_globals(key, state._replace(e=e), design, hyper, red)
    VT = state.V.T  # factor-major while the blocks run (see _update_block_t)
    for b in range(design.n_blocks):
        state, VT = _update_block_t(block_keys[b], state, VT, design, hyper, b, red)
    state = state._replace(V=VT.T)
    if _keeps_q(state):  # the kept cache, recomputed from the new V (one more O(nnz K) pass)
        state = state._replace(q=_caches_t(state, design)[1].T.astype(state.q.dtype))
    if red is LOCAL:
        rmse = jnp.sqrt(jnp.mean(state.e ** 2))
    else:
        rmse = jnp.sqrt(red.sum(red.mask(state.e ** 2)) / red.count(design.n_rows))
    return state, FMMCMCInfo(log_joint(state, design, hyper, red), rmse)


def _draw_globals(key, state: FMMCMCState, design: FMDesign, hyper, red=LOCAL):
    """The sweep's draws before the blocks, from a current e: (alpha, sigma_w, sigma_v), mu_w, mu_v,
    w0 (e updated). Returns (state, the B block keys): ``keys = split(key, 6 + B)``, block b's key
    ``keys[6 + b]``."""
    G, g, h = design.n_groups, design.group, hyper
    keys = jax.random.split(key, 6 + design.n_blocks)
    # alpha, sigma_w, sigma_v are independent given (e, w, mu_w, V, mu_v): one block, one
    # Gamma call (jax.random.gamma is slow to compile)
    a_s, a_r = alpha_conditional(state, design, hyper, red)
    w_s, w_r = group_precision_conditional(state.w, g, G, state.mu_w, h.mu_0, h.nu_0, h.alpha_0p, h.beta_0p)
    v_s, v_r = group_precision_conditional(state.V, g, G, state.mu_v, h.mu_0, h.nu_0, h.alpha_0p, h.beta_0p)
    dt = state.e.dtype
    shapes = jnp.concatenate([jnp.reshape(a_s, (1,)).astype(dt), w_s, v_s.reshape(-1)])
    rates = jnp.concatenate([jnp.reshape(a_r, (1,)).astype(dt), w_r, v_r.reshape(-1)])
    prec = jax.random.gamma(keys[0], shapes) / rates
    alpha, sw, sv = prec[0], prec[1:1 + G], prec[1 + G:].reshape(v_r.shape)
    mw = sample_group_mean(keys[2], state.w, g, G, sw, h.mu_0, h.nu_0)
    mv = sample_group_mean(keys[4], state.V, g, G, sv, h.mu_0, h.nu_0)
    state = state._replace(alpha=alpha, sigma_w=sw, mu_w=mw, sigma_v=sv, mu_v=mv)
    P, hh = w0_conditional(state, design, hyper, red)
    w0 = sample_normal_natural(keys[5], P, hh)
    return state._replace(w0=w0, e=state.e - (w0 - state.w0)), keys[6:]


def _sharded_call(fn, design: ShardedFMDesign, args: tuple, out_specs):
    """``fn(*args, local_design, red)`` on every device's rows under `jax.shard_map`: ``args`` are
    replicated except a state's e and q (split by rows); ``red`` psums over the mesh axis."""
    from jax.sharding import PartitionSpec as P

    from .sharding import Reducer

    rows_spec = P(design.axis)

    def arg_spec(a):
        if isinstance(a, FMMCMCState):
            return FMMCMCState(*([P()] * 8), rows_spec, rows_spec)
        return P()

    def local(args, rows, cols, values, y, weight, group, block):
        d = FMDesign(rows, cols, values, y, group, block, jnp.arange(rows.shape[0], dtype=jnp.int32),
                     design.rows_per_device, design.n_features, design.n_groups, design.block_ptr,
                     design.group_names)
        return fn(*args, d, Reducer(design.axis, weight, design.n_real))

    specs = (tuple(arg_spec(a) for a in args), rows_spec, rows_spec, rows_spec, rows_spec, rows_spec, P(), P())
    return jax.shard_map(local, mesh=design.mesh, in_specs=specs, out_specs=out_specs)(
        tuple(args), design.rows, design.cols, design.values, design.y, design.weight, design.group, design.block)


def _state_specs(design: ShardedFMDesign):
    from jax.sharding import PartitionSpec as P

    return FMMCMCState(*([P()] * 8), P(design.axis), P(design.axis))


def _step_sharded(key, state: FMMCMCState, design: ShardedFMDesign, hyper):
    from jax.sharding import PartitionSpec as P

    return _sharded_call(lambda k, st, h, d, red: _step(k, st, d, h, red), design, (key, state, hyper),
                         (_state_specs(design), FMMCMCInfo(P(), P())))


step_jit = jax.jit(step)


def _as_jax(design: FMDesign, dtype) -> FMDesign:
    if isinstance(design, ShardedFMDesign):
        return design.astype(dtype)
    d = jax.tree_util.tree_map(jnp.asarray, design)
    return d.__class__(d.rows, d.cols, d.values.astype(dtype), d.y.astype(dtype), d.group, d.block, d.order,
                       d.n_rows, d.n_features, d.n_groups, d.block_ptr, d.group_names)


def _coo(test, dtype):
    if isinstance(test, FMDesign):
        return (jnp.asarray(test.rows), jnp.asarray(test.cols), jnp.asarray(test.values, dtype), int(test.n_rows))
    rows, cols, values, n_rows = test
    return jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values, dtype), int(n_rows)


def _prepare_hyper(hyper, dtype):
    return type(hyper)(*(jnp.asarray(v, dtype) for v in hyper))


def _predict(state: FMMCMCState, design, at):
    rows, cols, values, n = at
    return fm_mean(state.w0, state.w, state.V, rows, cols, values, n)[0]


def _predict_prepare(predict_at, design: FMDesign, dtype):
    rows, cols, values, n = _coo(predict_at, dtype)
    if rows.shape != cols.shape or rows.shape != values.shape or rows.ndim != 1:
        raise ValueError("predict_at: rows, cols and values must be 1-D of one length")
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n):
        raise ValueError(f"predict_at rows out of range [0, {n - 1}]")
    if cols.size and (int(cols.min()) < 0 or int(cols.max()) >= design.n_features):
        raise ValueError(f"predict_at cols (features) out of range [0, {design.n_features - 1}]")
    return (rows, cols, values, _Static(n)), n


class _Static(int):
    """The number of test instances, a static int inside the pytree of ``predict_at``."""


jax.tree_util.register_pytree_node(_Static, lambda x: ((), int(x)), lambda aux, _: _Static(aux))

FM_DIMS = {"w": ("feature",), "V": ("feature", "factor"), "mu_w": ("group",), "sigma_w": ("group",),
           "mu_v": ("group", "factor"), "sigma_v": ("group", "factor")}
_SOURCE = "004_90693a0965f06816.txt eqs. 2.17, 2.22-2.30 (grouped), derived conditionals"

ALGORITHM = base.Algorithm(
    name="fm-mcmc", kind="mcmc", init=init, step=step, target=log_joint, target_name="log_joint", dims=FM_DIMS,
    source=_SOURCE,
).check()

def _init_without_q(key, design, K, hyper, **options):
    """`init` with ``keep_q=False``: the chains of `sample` carry no (N, K) q (module docstring)."""
    return init(key, design, K, hyper, keep_q=False, **options)


SPEC = mcmc_driver.SamplerSpec(
    algorithm=ALGORITHM._replace(init=_init_without_q), model="fm", method="mcmc-fm", variables=PARAMS, prepare=lambda d, dtype: _as_jax(d, dtype),
    sizes=lambda d: (d.n_rows, d.n_features, d.nnz),
    coords=lambda d, K: {"feature": np.arange(d.n_features), "factor": np.arange(K), "group": list(d.group_names)},
    predict=_predict, predict_prepare=_predict_prepare, last_stats=("rmse",), prepare_hyper=_prepare_hyper,
)


@mcmc_driver.run_options()
def sample(
    key,
    design: FMDesign,
    K: int,
    hyper,
    *,
    init_std: float = 0.1,
    mesh=None,
    options: mcmc_driver.SampleOptions,
) -> "arviz_io.InferenceData":
    """Run ``num_chains`` MCMC-FM chains through `custom_inference.mcmc_driver` and return the draws.

    The chains carry no (N, K) cache q (``init(keep_q=False)``; module docstring, "No stored q"):
    the memory of a sweep is O(nnz + N + D K).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed; the same key gives the same draws.
    design : FMDesign
        Training data: N instances x D features, G groups, B blocks (`FMDesign.from_scipy`).
    K : int >= 1
        Number of factors.
    hyper : ppl_models.fm.FMHierHyper
        Hyperpriors (sigma_0, nu_0, alpha_0p, beta_0p, alpha_0, beta_0 > 0).
    init_std : float, keyword-only, default 0.1
        Standard deviation of the initial V.
    mesh : jax.sharding.Mesh, keyword-only, optional
        Split the instances (rows of X, with their nonzeros and the cache e) over the devices of
        the mesh axis ``"nnz"`` (`sharding.nnz_mesh`, `fm_design.shard_fm_design`); w, V and the
        hyperparameters stay replicated, the sums over rows are psum-ed. Same draws as without a
        mesh up to the order of float additions.
    num_chains : int >= 1, keyword-only, default 4
        Independent chains (each from its own key).
    num_warmup : int >= 0, keyword-only, default 500
        Warm-up sweeps per chain, discarded (rounded up to a multiple of ``thin``).
    num_samples : int >= 1, keyword-only, default 1000
        Kept draws per chain.
    thin : int >= 1, keyword-only, default 1
        Sweeps per kept draw.
    keep : sequence of str, keyword-only, optional
        Names to store per draw: `PARAMS` (V costs D K per draw: drop it on big data) and
        ``"pred"`` (yhat per draw at ``predict_at``).
    predict_at : FMDesign or tuple (rows, cols, values, n_rows), keyword-only, optional
        New instances, an FMDesign or (rows, cols, values, n_rows): the running mean and sd of yhat
        over all kept draws of all chains are accumulated during sampling (as myFM does), so no
        draw needs to be stored (``predictions`` group: ``pred_mean`` (N_test,), the posterior
        predictive mean, cf. eq. 2.16 / 3.18, and ``pred_sd``, the posterior sd of yhat; add
        E[1/alpha] to its square for a new y).
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
        ``posterior`` with ``keep`` (dims chain, draw, feature|group|factor); ``sample_stats``
        with ``lp`` (log joint of each kept state) and ``rmse`` (training RMSE of the kept state);
        ``predictions`` with ``predict_at``; attrs of `mcmc_driver` plus n_blocks and init_std.

    Raises
    ------
    ValueError
        K < 1 or not an integer; bad counts; unknown names in ``keep``; a hyper without the
        FMHierHyper fields or with non-positive precisions/shapes/rates; ``predict_at`` out of
        range or of unequal lengths; ``mesh`` without an axis ``"nnz"``; a checkpoint of other
        settings, of another run or damaged.
    TypeError
        ``mesh`` not a jax.sharding.Mesh; a bad key; an unknown keyword; a K or hyperparameter
        that ``int`` / ``float`` do not take.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`mcmc_driver.sample`).

    Source: derived conditionals (module docstring); the driver is a project addition.
    """
    K = _check_K(K)
    _check_hier(hyper)
    if mesh is not None:  # the rows split over the devices (`step` dispatches on the container)
        from .fm_design import shard_fm_design
        from .sharding import AXIS, check_mesh

        check_mesh(mesh)
        design = shard_fm_design(design, mesh, axis=AXIS)
    return mcmc_driver.sample(
        SPEC, key, design, K, hyper, options=options, init_options={"init_std": init_std},
        attrs={"n_blocks": int(design.n_blocks)},
    )


def predict(draws, test, *, dtype=np.float64):
    """Posterior mean and sd of yhat on new instances, averaged over stored draws.

    Parameters
    ----------
    draws : arviz.InferenceData or dict
        From `sample` (needs w0, w, V kept), or a dict with arrays w0 (S,), w (S, D), V (S, D, K)
        (any leading draw axes, flattened).
    test : FMDesign or tuple
        New instances: an FMDesign or (rows, cols, values, n_rows), M nonzeros of N_test rows.
    dtype : numpy dtype, keyword-only, default float64
        Precision of the computation.

    Returns
    -------
    mean : numpy.ndarray, shape (N_test,), ``dtype``
        yhat averaged over the S draws.
    sd : numpy.ndarray, shape (N_test,), ``dtype``
        Its standard deviation over the draws (ddof 0).

    Raises
    ------
    ValueError
        w0, w or V is missing; a ``test`` tuple that does not unpack into four values; an
        InferenceData without a ``posterior`` group.

    Source: ``004_90693a0965f06816.txt`` eq. 2.17 averaged over the draws (as eq. 2.16 does for
    BPMF); the sd is a project addition.
    """
    if not isinstance(draws, dict):
        draws = arviz_io.group_arrays(draws)
    missing = [n for n in ("w0", "w", "V") if n not in draws]
    if missing:
        raise ValueError(f"draws: missing {missing} (sample with keep including w0, w, V)")
    w0 = np.asarray(draws["w0"]).reshape(-1)
    S = w0.shape[0]
    w = np.asarray(draws["w"]).reshape(S, -1)
    V = np.asarray(draws["V"]).reshape(S, w.shape[1], -1)
    with jax.enable_x64(np.dtype(dtype) == np.float64):
        rows, cols, values, n = _coo(test, dtype)
        f = jax.jit(jax.vmap(lambda a, b, c: fm_mean(a, b, c, rows, cols, values, n)[0]))
        yh = np.asarray(f(jnp.asarray(w0, dtype), jnp.asarray(w, dtype), jnp.asarray(V, dtype)))
    return yh.mean(0), yh.std(0)
