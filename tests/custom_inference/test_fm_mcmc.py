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
    """The straightforward column-by-column form of `update_block` (a fori_loop over k on the
    row-major (N, K) q and (D, K) V, as first written): same conditionals, same keys."""
    K = st.V.shape[1]
    r, c, x = mc._block_entries(design, b)
    in_block = design.block == b
    k_w, k_v = jax.random.split(key)
    P, h = mc.w_block_conditional(st, design, hyper, b)
    w_new = jnp.where(in_block, gaussian.sample_normal_natural(k_w, P, h), st.w)
    st = st._replace(w=w_new, e=st.e.at[r].add(-x * (w_new - st.w)[c]))
    keys_v = jax.random.split(k_v, K)

    def body(k, st):
        P, h = mc.v_block_conditional(st, design, hyper, b, k)
        vk = st.V[:, k]
        vk_new = jnp.where(in_block, gaussian.sample_normal_natural(keys_v[k], P, h), vk)
        d = (vk_new - vk)[c]
        hn = x * (st.q[r, k] - x * st.V[c, k])
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
    st = mc.init(jax.random.PRNGKey(3), dj, 3, hyper)
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
