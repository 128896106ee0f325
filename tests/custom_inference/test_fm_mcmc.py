"""MCMC-FM sampler: hyperparameter draws, log joint, driver (reproducibility, running predictions), errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from numpyro.infer.util import log_density

from custom_inference import fm_mcmc as mc
from custom_inference import gaussian
from custom_inference.fm_design import FMDesign
from ppl_models import fm as ppl


def _design(I=10, J=8, N=40, seed=0, K=2, hyper=ppl.FMHierHyper(alpha_0p=5.0, beta_0p=5.0, alpha_0=5.0, beta_0=1.0)):
    rng = np.random.default_rng(seed)
    u, i, ar = rng.integers(0, I, N), rng.integers(0, J, N), np.arange(N)
    X = sp.hstack([sp.csr_matrix((np.ones(N), (ar, u)), shape=(N, I)),
                   sp.csr_matrix((np.ones(N), (ar, i)), shape=(N, J))]).tocoo()
    group = np.r_[[0] * I, [1] * J]
    truth, y = ppl.simulate(jax.random.PRNGKey(seed), X.row, X.col, X.data, N, group, K, hyper)
    return FMDesign.from_scipy(X, np.asarray(y), group), truth, hyper


def test_grouped_normal_gamma_draws_equal_shared_helpers_for_one_group():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(9, 3)))
    mean, prec = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.gamma(2.0, 1.0, 3))
    key = jax.random.PRNGKey(4)
    g = jnp.zeros(9, jnp.int32)
    a = mc.sample_group_precision(key, x, g, 1, mean[None], 0.2, 1.5, 2.0, 0.7)[0]
    b = gaussian.sample_ng_precision(key, x, mean, 0.2, 1.5, 2.0, 0.7)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    a = mc.sample_group_mean(key, x, g, 1, prec[None], 0.2, 1.5)[0]
    b = gaussian.sample_ng_mean(key, x, prec, 0.2, 1.5)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_log_joint_equals_numpyro_log_density():
    d, truth, hyper = _design()
    dj = mc._as_jax(d, np.float64)
    st = mc.FMMCMCState(*(jnp.asarray(truth[n]) for n in mc.PARAMS), jnp.zeros(d.n_rows), jnp.zeros((d.n_rows, 2)))
    st = mc.caches(st, dj)
    args = (d.rows, d.cols, d.values, d.n_rows, d.n_features, d.group, 2, hyper, jnp.asarray(d.y))
    ref, _ = log_density(ppl.model_hier, args, {}, {n: truth[n] for n in mc.PARAMS})
    np.testing.assert_allclose(mc.log_joint(st, dj, hyper), ref, rtol=1e-12)


def test_sample_reproducible_with_running_test_predictions():
    d, _, hyper = _design()
    kw = dict(num_chains=2, num_warmup=4, num_samples=6, thin=2, progress=False, predict_at=d)
    a = mc.sample(jax.random.PRNGKey(0), d, 2, hyper, **kw)
    b = mc.sample(jax.random.PRNGKey(0), d, 2, hyper, **kw)
    np.testing.assert_array_equal(a.posterior["V"].values, b.posterior["V"].values)
    assert a.posterior["V"].shape == (2, 6, d.n_features, 2) and a.posterior["sigma_v"].shape == (2, 6, 2, 2)
    assert a.sample_stats["lp"].shape == (2, 6) and a.sample_stats["rmse"].shape == (2, 6)
    mean, sd = mc.predict(a, d)
    # running sums vs stored draws: float64 rounding of 12 draws; predict's sd has ddof 0, the driver's ddof 1
    np.testing.assert_allclose(a.predictions["pred_mean"].values, mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(a.predictions["pred_sd"].values, sd * np.sqrt(12 / 11), rtol=1e-6, atol=1e-7)


def _update_block_reference(key, st, design, hyper, b):
    """The straightforward column-by-column form of `update_block` with libFM's stored cache (a
    fori_loop over k on the row-major (N, K) q and (D, K) V, as first written, q kept current by
    increments): same conditionals, same keys. The v conditional is written out here from the stored
    q (h_n = x_nl (q_nk - x_nl v_lk)), independent of the sampler's q-free form."""
    K = st.V.shape[1]
    r, c, x = mc._block_entries(design, b)
    in_block = design.block == b
    k_w, k_v = jax.random.split(key)
    P, h = mc.w_block_conditional(st, design, hyper, b)
    w_new = jnp.where(in_block, gaussian.sample_normal_natural(k_w, P, h), st.w)
    st = st._replace(w=w_new, e=st.e.at[r].add(-x * (w_new - st.w)[c]))
    keys_v = jax.random.split(k_v, K)

    g, D = design.group, design.n_features

    def body(k, st):
        vk = st.V[:, k]
        hn = x * (st.q[r, k] - x * vk[c])
        s, m = st.sigma_v[g, k], st.mu_v[g, k]
        P = s + st.alpha * jax.ops.segment_sum(hn * hn, c, num_segments=D)
        h = s * m + st.alpha * jax.ops.segment_sum(hn * (st.e[r] + hn * vk[c]), c, num_segments=D)
        vk_new = jnp.where(in_block, gaussian.sample_normal_natural(keys_v[k], P, h), vk)
        d = (vk_new - vk)[c]
        return st._replace(V=st.V.at[:, k].set(vk_new), e=st.e.at[r].add(-hn * d), q=st.q.at[r, k].add(x * d))

    return jax.lax.fori_loop(0, K, body, st)


# slow (about 50 s of compilation): the default run checks the same update through
# validation.models.fm_mcmc's block_check (block update == sequential one-feature updates) and cache_check
@pytest.mark.slow
def test_update_block_equals_column_reference_and_keeps_caches_and_dtypes():
    """The factor-major scan of `update_block` / `step` is the same chain as the column-by-column
    reference (same numbers up to rounding, float64), keeps the public (N, K) / (D, K) layouts and the dtype of V
    and q (float32 state, float64 hyper), and leaves e, q equal to their recomputation."""
    d, _, hyper = _design(N=60, K=3)
    dj = mc._as_jax(d, np.float64)
    st = mc.init(jax.random.PRNGKey(3), dj, 3, hyper, keep_q=True)
    st, _ = mc.step_jit(jax.random.PRNGKey(4), st, dj, hyper)
    for b in range(d.n_blocks):
        key = jax.random.PRNGKey(10 + b)
        new = jax.jit(mc.update_block, static_argnums=4)(key, st, dj, hyper, b)
        ref = jax.jit(_update_block_reference, static_argnums=4)(key, st, dj, hyper, b)
        for name in mc.FMMCMCState._fields:
            # the same conditionals, keys and noise; full blocks (every row has one of the block's
            # nonzeros, as here) add to e and q elementwise instead of by scatter, where XLA may fuse a
            # multiply-add into one rounding: each operation then differs by at most 1 ulp
            # (u = 1.1e-16), and a sum over the N = 60 rows by at most N u = 7e-15 relative; rtol
            # 1e-12 (140 x that) / atol 1e-13 (values near 0). A wrong conditional moves values by O(0.1).
            np.testing.assert_allclose(getattr(new, name), getattr(ref, name), rtol=1e-12, atol=1e-13, err_msg=name)
        st = new
    for dtype, tol in ((np.float64, 1e-10), (np.float32, 1e-4)):
        dj = mc._as_jax(d, dtype)
        st = mc.init(jax.random.PRNGKey(0), dj, 3, hyper, dtype=dtype)
        for i in range(3):
            st, _ = mc.step_jit(jax.random.PRNGKey(i), st, dj, hyper)
        assert st.V.shape == (d.n_features, 3) and st.q.shape == (d.n_rows, 3)
        assert st.V.dtype == st.q.dtype == np.dtype(dtype)
        fresh = mc.caches(st, dj)
        np.testing.assert_allclose(st.q, fresh.q, rtol=tol, atol=tol)
        np.testing.assert_allclose(st.e, fresh.e, rtol=tol, atol=tol)


def _tagged_design(N=50, I=7, J=5, T=6, K=2, seed=3):
    """One-hot user | one-hot item | multi-hot tags (0-3 of T per row, real values): the tags split
    into several blocks that miss some rows, so both the elementwise (full) and the scatter paths of
    the columns q^(-b) run, with B - 1 >= 3 other blocks per column."""
    rng = np.random.default_rng(seed)
    u, i = rng.integers(0, I, N), rng.integers(0, J, N)
    tags = [rng.choice(T, rng.integers(0, 4), replace=False) for _ in range(N)]
    tr = np.repeat(np.arange(N), [len(t) for t in tags])
    tc = np.concatenate(tags).astype(int)
    rows = np.r_[np.arange(N), np.arange(N), tr]
    cols = np.r_[u, I + i, I + J + tc]
    vals = np.r_[np.ones(2 * N), rng.uniform(0.5, 1.5, tr.size)]
    X = sp.coo_matrix((vals, (rows, cols)), shape=(N, I + J + T))
    group = np.r_[[0] * I, [1] * J, [2] * T]
    hyper = ppl.FMHierHyper(alpha_0p=5.0, beta_0p=5.0, alpha_0=5.0, beta_0=1.0)
    _, y = ppl.simulate(jax.random.PRNGKey(seed), X.row, X.col, X.data, N, group, K, hyper)
    return FMDesign.from_scipy(X, np.asarray(y), group), hyper


def test_sweep_without_stored_q_equals_the_cached_sampler():
    """issue 28: the sweep recomputes the column q^(-b)_{.k} from V[:, k] instead of carrying the
    (N, K) q. Against the former sampler with libFM's stored cache (sweep = the caches recomputed, the
    same global draws, then every block by `_update_block_reference`, which reads and increments the
    stored q), same keys, 3 sweeps, float64, on a design with full and partial blocks:

    the two compute h_n = x_nl (q_nk - x_nl v_lk) once as a difference of a running sum, once as the
    sum of the other blocks' terms: each h_n differs by a few ulps of |q_nk| (u = 1.1e-16, |q| ~ 1),
    each conditional's sums by <= N u |.| ~ 1e-14, and each draw passes that on (and into e). Over
    3 sweeps of 1 + 3 + 6 + 3 + 6 + 1 + B (K + 1) draws, with no amplification beyond O(1) per draw
    on these well-conditioned posteriors, the states agree to ~1e-12: atol = rtol = 1e-9 leaves
    1000 x that and is far below a wrong conditional, key or order (which move draws by O(0.1)).
    The kept q (``keep_q=True``) equals X V; the q-free state carries the (N, 0) placeholder."""
    d, hyper = _tagged_design()
    assert d.n_blocks >= 4
    full = [d.block_ptr[b + 1] - d.block_ptr[b] == d.n_rows for b in range(d.n_blocks)]
    assert any(full) and not all(full)
    dj = mc._as_jax(d, np.float64)
    lean = mc.init(jax.random.PRNGKey(1), dj, 2, hyper, keep_q=False)
    kept = mc.init(jax.random.PRNGKey(1), dj, 2, hyper, keep_q=True)
    assert lean.q.shape == (d.n_rows, 0) and kept.q.shape == (d.n_rows, 2)

    @jax.jit
    def old_sweep(key, st):
        st, block_keys = mc._draw_globals(key, mc.caches(st, dj), dj, hyper)
        for b in range(d.n_blocks):
            st = _update_block_reference(block_keys[b], st, dj, hyper, b)
        return st

    old = kept
    for i in range(3):
        key = jax.random.PRNGKey(20 + i)
        old = old_sweep(key, old)
        lean, _ = mc.step_jit(key, lean, dj, hyper)
        kept, _ = mc.step_jit(key, kept, dj, hyper)
    diffs = {n: float(np.max(np.abs(np.asarray(getattr(lean, n)) - np.asarray(getattr(old, n)))))
             for n in mc.PARAMS + ("e",)}
    for name in mc.PARAMS + ("e",):
        np.testing.assert_allclose(getattr(lean, name), getattr(old, name), rtol=1e-9, atol=1e-9, err_msg=name)
        # the kept-q mode draws the same numbers (q is not read by the sweep)
        np.testing.assert_array_equal(getattr(kept, name), getattr(lean, name), err_msg=name)
    print("max abs difference to the cached sampler:", diffs)
    np.testing.assert_allclose(kept.q, d.to_dense() @ np.asarray(kept.V), rtol=1e-12, atol=1e-12)
    assert lean.q.shape == (d.n_rows, 0)
    # update_block on a kept q keeps it current (increments of the block's rows)
    new = jax.jit(mc.update_block, static_argnums=4)(jax.random.PRNGKey(9), kept, dj, hyper, 3)
    np.testing.assert_allclose(new.q, d.to_dense() @ np.asarray(new.V), rtol=1e-12, atol=1e-12)


def test_errors():
    d, _, hyper = _design()  # the default design: its simulation is compiled by the tests above
    with pytest.raises(ValueError, match="K"):
        mc.sample(jax.random.PRNGKey(0), d, 0, hyper)
    with pytest.raises(ValueError, match="keep"):
        mc.sample(jax.random.PRNGKey(0), d, 2, hyper, keep=("U",))
    with pytest.raises(ValueError, match="hyper.beta_0"):
        mc.sample(jax.random.PRNGKey(0), d, 2, hyper._replace(beta_0=0.0))
    with pytest.raises(ValueError, match="hyper"):
        mc.sample(jax.random.PRNGKey(0), d, 2, ppl.FMFlatHyper())
    with pytest.raises(ValueError, match="num_samples"):
        mc.sample(jax.random.PRNGKey(0), d, 2, hyper, num_samples=0)
    with pytest.raises(ValueError, match="draws"):
        mc.predict({"w0": np.zeros(3)}, d)


@pytest.mark.slow
def test_recovers_planted_low_noise_fm_in_float32_and_float64():
    """All 20 x 15 pairs observed, noise sd 0.1: the posterior mean of yhat must be within 0.1 RMSE
    of the true mean function (the posterior sd of yhat is of the order of the noise sd, 0.1 / sqrt(#obs
    per parameter) ~ 0.03; 0.1 leaves room for the prior's shrinkage), in both precisions."""
    I, J = 20, 15
    u, i = np.divmod(np.arange(I * J), J)
    N = I * J
    X = sp.hstack([sp.csr_matrix((np.ones(N), (np.arange(N), u)), shape=(N, I)),
                   sp.csr_matrix((np.ones(N), (np.arange(N), i)), shape=(N, J))]).tocoo()
    group = np.r_[[0] * I, [1] * J]
    truth, y = ppl.simulate(jax.random.PRNGKey(5), X.row, X.col, X.data, N, group, 2,
                            ppl.FMFlatHyper(alpha=100.0, sigma_w=4.0, sigma_v=1.0))
    d = FMDesign.from_scipy(X, np.asarray(y), group)
    f_true = np.asarray(ppl.predict_mean(truth, X.row, X.col, X.data, N))
    for dtype in (np.float64, np.float32):
        idata = mc.sample(jax.random.PRNGKey(1), d, 2, ppl.FMHierHyper(), num_chains=2, num_warmup=500,
                          num_samples=300, thin=2, progress=False, dtype=dtype, predict_at=d, keep=("alpha", "w0"))
        rmse = np.sqrt(np.mean((idata.predictions["pred_mean"].values - f_true) ** 2))
        assert rmse < 0.1, (dtype, rmse)
        assert idata.posterior["alpha"].values.dtype == np.dtype(dtype)


def _greedy_reference(X, group):
    """The colouring as first written: co-occurrence counts for every group, greedy in feature order."""
    Xb = sp.csc_matrix(X, copy=True)
    Xb.data = np.ones_like(Xb.data)
    block, nxt = np.empty(X.shape[1], np.int32), 0
    for g in np.unique(group):
        feats = np.flatnonzero(group == g)
        co = (Xb[:, feats].T @ Xb[:, feats]).tocsr()
        colour = -np.ones(len(feats), np.int64)
        for a in range(len(feats)):
            nbrs = co.indices[co.indptr[a]:co.indptr[a + 1]]
            used = set(colour[nbrs[nbrs != a]].tolist())
            c = 0
            while c in used:
                c += 1
            colour[a] = c
        block[feats] = nxt + colour
        nxt += int(colour.max()) + 1
    return block


def test_greedy_blocks_shortcut_for_one_hot_groups_gives_the_same_colouring():
    """`greedy_blocks` skips the co-occurrence product for a group with <= 1 nonzero per row (issue 28:
    26 s at 1e6 Netflix-shaped instances): the colouring must equal the full greedy one (integers,
    exactly), on one-hot groups, a one-hot group that misses rows, and a multi-hot group; and no block
    holds two features of one row."""
    from custom_inference.fm_design import greedy_blocks

    d, _ = _tagged_design()
    X = d.to_scipy().tocoo()
    # a 4th group: one feature in about half the rows (at most one per row, not full)
    rng = np.random.default_rng(0)
    extra = np.flatnonzero(rng.random(d.n_rows) < 0.5)
    X = sp.hstack([X, sp.coo_matrix((np.ones(extra.size), (extra, rng.integers(0, 3, extra.size))),
                                    shape=(d.n_rows, 3))]).tocoo()
    group = np.r_[np.asarray(d.group), [3] * 3]
    got = greedy_blocks(X, group)
    np.testing.assert_array_equal(got, _greedy_reference(X, group))
    Xc = sp.csr_matrix(X)
    Xc.data[:] = 1
    for b in np.unique(got):
        assert (Xc[:, got == b].sum(1) <= 1).all()
    assert len(np.unique(got[group == 2])) >= 2  # the multi-hot tags took the full path
