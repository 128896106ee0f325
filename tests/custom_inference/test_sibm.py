"""SIBM solvers (seed 002): input checks, the bound, batch VB, SVI, automatic S, MAP, scores, drivers."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from custom_inference import sibm  # noqa: E402
from custom_inference.data import Observations  # noqa: E402
from ppl_models.sibm import logits  # noqa: E402
from validation.models.sibm import CHECK_HYPER, dense_pmf, small_problem  # noqa: E402

HYPER = CHECK_HYPER
D = 2


@pytest.fixture(scope="module")
def problem():
    return small_problem(0)  # X (8, 6) with 25% ones, Observations of the ones


def test_as_binary_validates_before_any_computation():
    X = np.array([[0, 1, 0], [1, 1, 0]])
    obs = sibm.as_binary(X)
    assert obs.shape == (2, 3) and obs.nnz == 3 and np.all(np.asarray(obs.values) == 1)
    assert sibm.as_binary(sp.csr_matrix(X)).nnz == 3
    assert sibm.as_binary(X.astype(bool)).nnz == 3
    with pytest.raises(ValueError, match="0 or 1"):
        sibm.as_binary(np.array([[0, 2], [1, 0]]))
    with pytest.raises(ValueError, match="NaN"):
        sibm.as_binary(np.array([[0, np.nan], [1, 0]]))
    with pytest.raises(ValueError, match="2-D"):
        sibm.as_binary(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="no \\(nonzero\\) entries"):
        sibm.as_binary(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="binary data must be 0 or 1"):
        sibm.as_binary(Observations.from_coo([0], [1], [0.5], (2, 2), kind="real"))


def test_init_and_steps_reject_bad_arguments(problem):
    X, data = problem
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="K must be"):
        sibm.init(key, data, 0, HYPER)
    with pytest.raises(ValueError, match="K must be"):
        sibm.init(key, data, 1.5, HYPER)
    with pytest.raises(ValueError, match="u_tilde0"):
        sibm.init(key, data, D, HYPER._replace(u_tilde0=0.0))
    with pytest.raises(ValueError, match="hyper has no field"):
        sibm.init(key, data, D, object())
    with pytest.raises(TypeError, match="data must be an Observations"):
        sibm.init(key, X, D, HYPER)
    with pytest.raises(ValueError, match="strategy"):
        sibm.make_sampler(data, "stratified")
    state = sibm.init(key, data, D, HYPER)
    sam = sibm.make_sampler(data, "uniform")
    with pytest.raises(ValueError, match="kappa"):
        sibm.svi_step(key, sibm.svi_state(state, 10), data, HYPER, sampler=sam, kappa=0.5)
    with pytest.raises(ValueError, match="S must be"):
        sibm.svi_state(state, 0)
    with pytest.raises(ValueError, match="columns"):
        sibm.update_u(state, data, HYPER, columns=(7,))
    with pytest.raises(ValueError, match="users"):
        sibm.score_users(state, [8])
    with pytest.raises(ValueError, match="kind"):
        sibm.score_users(state, [0], kind="rank")
    with pytest.raises(ValueError, match="S must be"):
        sibm.fit_svi(key, X, D, HYPER, n_iter=1, S=0, progress=False)
    with pytest.raises(ValueError, match="need at least one zero"):
        sibm.make_sampler(sibm.as_binary(np.ones((2, 2))), "balanced")


def test_bias_columns_and_zero_variance_moments_equal_the_program(problem):
    """At vanishing variances E_q[u . v + z] is the NumPyro program's logit at the means, with the
    bias layout of `ppl_models.sibm` (V's column D and U's column D + 1 fixed to ones)."""
    X, data = problem
    state = sibm.init(jax.random.PRNGKey(1), data, D, HYPER, init_mean_sd=0.8, init_var=1e-300)
    (ub, _), (vb, _), (zb, zt) = sibm.moments(state)
    assert np.all(np.asarray(ub[:, D + 1]) == 1) and np.all(np.asarray(vb[:, D]) == 1)
    eta = logits(ub[:, :D], vb[:, :D], zb, ub[:, D], vb[:, D + 1])
    rows, cols = (jnp.asarray(a.ravel()) for a in np.meshgrid(np.arange(8), np.arange(6), indexing="ij"))
    mu, s2 = sibm.cell_moments(state, rows, cols)
    np.testing.assert_allclose(np.asarray(mu), np.asarray(eta).ravel(), rtol=1e-12)
    assert np.all(np.asarray(s2) < 1e-290)  # variances of order 1e-300
    np.testing.assert_allclose(sibm.score_users(state, np.arange(8)), np.asarray(eta), rtol=1e-12)


def test_bounded_elbo_is_below_the_exact_elbo(problem):
    """The Jaakkola-Jordan bound (6) is below log sigma, so L' (7) <= E_q[log p(X | U, V, z)] - KL.

    The right side is estimated by Monte Carlo with 4000 draws from q; the assertion allows 4
    standard errors (a false alarm has probability < 1e-4 for a correct bound)."""
    X, data = problem
    state = sibm.init(jax.random.PRNGKey(2), data, D, HYPER, init_mean_sd=0.8, init_var=0.5)
    bound = float(sibm.elbo(state, data, HYPER))
    rng = np.random.default_rng(0)
    (ub, ut), (vb, vt), (zb, zt) = (tuple(np.asarray(a) for a in p) for p in sibm.moments(state))
    n = 4000
    U = ub + np.sqrt(ut) * rng.standard_normal((n,) + ub.shape)
    V = vb + np.sqrt(vt) * rng.standard_normal((n,) + vb.shape)
    z = zb + np.sqrt(zt) * rng.standard_normal(n)
    a = np.einsum("sik,sjk->sij", U, V) + z[:, None, None]
    loglik = (X[None] * a - np.logaddexp(0, a)).sum(axis=(1, 2))
    neg_kl = bound - float(sibm.elbo(state, data, HYPER)) + float(sibm._kl_terms(state, sibm.prior_arrays(HYPER, jnp.float64)))
    exact, se = loglik.mean() + neg_kl, loglik.std(ddof=1) / np.sqrt(n)
    assert bound <= exact + 4 * se
    assert exact - bound > 4 * se  # the bound is not tight at a spread-out q (it is a strict bound)


def test_batch_fit_ascends_and_returns_inference_data(problem):
    X, data = problem
    r = sibm.fit(jax.random.PRNGKey(3), X, D, HYPER, max_iter=40, tol=0.0, progress=False, init_mean_sd=0.5)
    assert r.elbo.shape == (41,) and np.all(np.diff(r.elbo) >= -1e-9 * np.abs(r.elbo[:-1]))
    assert {"variational_parameters", "vi_trace"} <= set(r.idata.groups())
    np.testing.assert_allclose(r.idata.vi_trace["elbo"].values, r.elbo)
    assert r.idata.vi_trace.attrs["method"] == "sibm_batch_vb"
    r2 = sibm.fit(jax.random.PRNGKey(3), X, D, HYPER, max_iter=40, tol=0.0, progress=False, init_mean_sd=0.5)
    np.testing.assert_array_equal(r.elbo, r2.elbo)  # same key, same result
    r3 = sibm.fit(jax.random.PRNGKey(3), X, D, HYPER, max_iter=500, tol=1e-8, progress=False, init_mean_sd=0.5)
    assert r3.idata.vi_trace.attrs["converged"] == 1 and len(r3.elbo) - 1 < 500
    assert abs(r3.elbo[-1] - r3.elbo[-2]) < 1e-8 * abs(r3.elbo[-2])
    scores = sibm.score_users(r.state, [0, 3])
    assert scores.shape == (2, 6)
    probs = sibm.score_users(r.state, [0, 3], kind="probability")
    np.testing.assert_allclose(probs[1], np.asarray(sibm.predict_proba(r.state, np.full(6, 3), np.arange(6))), rtol=1e-12)


@pytest.mark.slow  # a second compilation of the sweep (float32): kept out of the 60 s default budget
def test_float32_batch_sweeps_stay_finite(problem):
    X, data = problem
    data32 = jax.tree_util.tree_map(jnp.asarray, data.astype(np.float32))
    state = sibm.init(jax.random.PRNGKey(3), data32, D, HYPER, dtype=np.float32)
    for _ in range(3):
        state, info = sibm.step(None, state, data32, HYPER)
    assert state.u_h.dtype == jnp.float32 and info.elbo.dtype == jnp.float32 and np.isfinite(float(info.elbo))


def _svi_matrix():
    """The 40 x 30 binary matrix (20% ones) of the SVI driver tests below."""
    return (np.random.default_rng(3).random((40, 30)) < 0.2).astype(float)


#: the S = 'auto' case of the SVI driver tests: S crosses the padding boundary 256 -> 512
_AUTO = dict(S="auto", n_iter=14, S_min=60, S_max=400, theta_delta=0.02)


def test_svi_with_automatic_minibatch_size():
    """fit_svi with S = 'auto' (eq. 13): S stays in [S_min, S_max], the ELBO rises from the initial q,
    and `auto_minibatch_size` is eq. (13) on the moving averages, recomputed here by hand. The data
    and options are those of the S = 'auto' case of test_block_scanned_svi_equals_one_minibatch_at_a_time
    (40 x 30, blocks of 4, ELBO every 3), so that both tests run the same compiled blocks."""
    X = _svi_matrix()
    data = sibm.as_binary(X)
    key = jax.random.PRNGKey(7)
    q0 = sibm.init(jax.random.split(key)[0], data, D, HYPER)
    r = sibm.fit_svi(key, X, D, HYPER, progress=False, strategy="biased", scan_block=4, elbo_every=3, **_AUTO)
    sizes_mean = r.idata.vi_trace.attrs["mean_S"]
    assert _AUTO["S_min"] <= sizes_mean <= _AUTO["S_max"]
    assert r.elbo[-1] > float(sibm.elbo(q0, data, HYPER))
    st, sam = r.state, sibm.make_sampler(data, "biased")
    m1, m2 = np.asarray(st.u_m1), np.asarray(st.u_m2)
    var = np.maximum(m2 - m1**2, 0).sum(-1)
    S_u = var / (2.0 * np.asarray(sam.p_row)[:, None] * (m1**2).sum(-1))
    ok_u = (np.asarray(st.u_count) > 0)[:, None] & (np.asarray(st.params.u_fixed) == 0)[None, :]
    m1, m2 = np.asarray(st.v_m1), np.asarray(st.v_m2)
    S_v = np.maximum(m2 - m1**2, 0).sum(-1) / (2.0 * np.asarray(sam.p_col)[:, None] * (m1**2).sum(-1))
    ok_v = (np.asarray(st.v_count) > 0)[:, None] & (np.asarray(st.params.v_fixed) == 0)[None, :]
    expected = (S_u[ok_u].sum() + S_v[ok_v].sum()) / (ok_u.sum() + ok_v.sum())
    np.testing.assert_allclose(float(sibm.auto_minibatch_size(st, sam, 2.0)), expected, rtol=1e-10)
    # resume: the counters carry on from the returned SVIState
    r2 = sibm.fit_svi(jax.random.PRNGKey(50), X, D, HYPER, progress=False, strategy="biased", scan_block=4,
                      elbo_every=3, **{**_AUTO, "n_iter": 5}, init_state=r.state)
    assert float(r2.state.z_count) == _AUTO["n_iter"] + 5


def test_svi_step_only_touches_sampled_rows_and_columns(problem):
    """A minibatch of S = 3 cells updates at most 3 rows and 3 columns (those it counts), never a fixed column."""
    X, data = problem
    q = sibm.init(jax.random.PRNGKey(6), data, D, HYPER)
    st = sibm.svi_state(q, 3)
    sam = sibm.make_sampler(data, "biased")
    new, info = sibm.svi_step(jax.random.PRNGKey(7), st, data, HYPER, sampler=sam, S=3)
    assert int(info.S) == 3
    counted_rows = set(np.flatnonzero(np.asarray(new.u_count) > 0).tolist())
    counted_cols = set(np.flatnonzero(np.asarray(new.v_count) > 0).tolist())
    assert 1 <= len(counted_rows) <= 3 and 1 <= len(counted_cols) <= 3 and float(new.z_count) == 1.0
    changed_rows = set(np.flatnonzero(np.any(np.asarray(new.params.u_h) != np.asarray(q.u_h), axis=1)).tolist())
    changed_cols = set(np.flatnonzero(np.any(np.asarray(new.params.v_h) != np.asarray(q.v_h), axis=1)).tolist())
    assert changed_rows and changed_rows <= counted_rows and changed_cols and changed_cols <= counted_cols
    np.testing.assert_array_equal(np.asarray(new.params.u_h)[:, D + 1], np.asarray(q.u_h)[:, D + 1])
    np.testing.assert_array_equal(np.asarray(new.params.v_h)[:, D], np.asarray(q.v_h)[:, D])


def test_map_noisy_gradient_is_unbiased_by_enumeration(problem):
    """E over p(i, j) of the rescaled per-cell MAP gradients equals jax.grad of log p(X, U, V, z)
    (rows: sum_j p(j|i) g_u(i, j); columns: sum_i p(i|j) g_v; z: sum_ij p(i, j) g_z), to 1e-10."""
    X, data = problem
    st = sibm.map_init(jax.random.PRNGKey(8), data, D, HYPER, init_mean_sd=0.7)
    grad = jax.jit(jax.grad(lambda s, d: sibm.log_joint(s, d, HYPER)))(st, data)
    prior = sibm.prior_arrays(HYPER, jnp.float64)
    I, J = X.shape
    for strategy in sibm.STRATEGIES:
        p = dense_pmf(X, strategy)
        pj_i, pi_j = p / p.sum(1, keepdims=True), p / p.sum(0, keepdims=True)
        ii, jj = (a.ravel() for a in np.meshgrid(np.arange(I), np.arange(J), indexing="ij"))
        gu, _, gv, _, gz, _ = sibm.map_cell_gradients(st, prior, jnp.asarray(ii), jnp.asarray(jj),
                                                      jnp.asarray(X.ravel(), jnp.float64), jnp.asarray(pj_i.ravel()),
                                                      jnp.asarray(pi_j.ravel()), jnp.asarray(p.ravel()))
        e_u = np.einsum("ij,ijk->ik", pj_i, np.asarray(gu).reshape(I, J, -1))
        e_v = np.einsum("ij,ijk->jk", pi_j, np.asarray(gv).reshape(I, J, -1))
        e_z = float((p.ravel() * np.asarray(gz)).sum())
        free_u, free_v = np.asarray(st.u_fixed) == 0, np.asarray(st.v_fixed) == 0
        np.testing.assert_allclose(e_u[:, free_u], np.asarray(grad.U)[:, free_u], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(e_v[:, free_v], np.asarray(grad.V)[:, free_v], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(e_z, float(grad.z), rtol=1e-10)


def test_map_curvature_bound_majorizes_the_row_hessian(problem):
    """(1/4) V^T V + I / u_tilde0 minus the exact negative Hessian of log p in a row u_i (jax.hessian)
    is positive semidefinite on the free block (sigma' <= 1/4), to 1e-10, for every row."""
    X, data = problem
    st = sibm.map_init(jax.random.PRNGKey(3), data, D, HYPER, init_mean_sd=0.7)
    free = np.asarray(st.u_fixed) == 0
    A = np.asarray(sibm.map_curvature_bound(st.V, jnp.asarray(free), HYPER.u_tilde0))
    np.testing.assert_array_equal(A[~free][:, ~free], np.eye(int((~free).sum())))
    for i in range(X.shape[0]):
        hess = jax.hessian(lambda u: sibm.log_joint(st._replace(U=st.U.at[i].set(u)), data, HYPER))(st.U[i])
        gap = A[free][:, free] + np.asarray(hess)[free][:, free]
        assert np.linalg.eigvalsh(gap).min() >= -1e-10


def test_fit_map_reaches_the_full_batch_map_objective():
    """On a planted 60 x 50 matrix (D = 2, biases, 17% ones) fit_map (1000 minibatches of 200 cells,
    the defaults tau = 1, kappa = 0.7, S-Biased) ends within sqrt(P / 2) of the log joint at the MAP
    (L-BFGS on the full objective, gradient tolerance 1e-8), P the number of free parameters. Why that
    tolerance: under the Laplace approximation, log p at a posterior draw is below its value at the mode
    by chi2_P / 2, whose sd is sqrt(P / 2) (= 12.9 here); a gap below it is smaller than the posterior's
    own spread of log density. Measured: gaps 6.0, 5.0, 4.8 for keys 0, 1, 2; the previous per-coordinate
    ratio scheme ended 233-246 below the MAP (and going down), so this test fails on it."""
    import scipy.optimize as so

    rng = np.random.default_rng(0)
    I, J, Dp = 60, 50, 2
    hyper = HYPER.__class__()  # SIBMHyper(): the seed's zero-mean unit-variance priors, biases on
    U, V = rng.normal(size=(I, Dp)), rng.normal(size=(J, Dp))
    X = rng.random((I, J)) < 1 / (1 + np.exp(-(U @ V.T - 2.0)))
    data = jax.tree_util.tree_map(jnp.asarray, sibm.as_binary(X.astype(float)))
    st0 = sibm.map_init(jax.random.PRNGKey(1), data, Dp, hyper)
    uf, vf = np.asarray(st0.u_fixed) > 0, np.asarray(st0.v_fixed) > 0
    K = uf.size

    def unpack(x):
        return st0._replace(U=jnp.where(uf[None], 1.0, x[:I * K].reshape(I, K)),
                            V=jnp.where(vf[None], 1.0, x[I * K:-1].reshape(J, K)), z=x[-1])

    f = jax.jit(jax.value_and_grad(lambda x: -sibm.log_joint(unpack(x), data, hyper)))
    x0 = np.concatenate([np.asarray(st0.U).ravel(), np.asarray(st0.V).ravel(), [float(st0.z)]])
    ref = so.minimize(lambda x: tuple(np.asarray(a, float) for a in f(jnp.asarray(x))), x0, jac=True,
                      method="L-BFGS-B", options=dict(maxiter=5000, gtol=1e-8, ftol=1e-15))
    map_value = -ref.fun
    P = (I + J) * (K - 1) + 1
    r = sibm.fit_map(jax.random.PRNGKey(0), X, Dp, hyper, n_iter=1000, S=200, progress=False)
    assert map_value - np.sqrt(P / 2) <= r.elbo[-1] <= map_value + 1e-6


def test_fit_map_raises_the_log_joint(problem):
    X, data = problem
    key = jax.random.PRNGKey(9)
    st0 = sibm.map_init(jax.random.split(key)[0], data, D, HYPER)
    r = sibm.fit_map(key, X, D, HYPER, n_iter=100, S=48, strategy="biased", progress=False)
    assert r.elbo[-1] > float(sibm.log_joint(st0, data, HYPER))
    assert sibm.score_users(r.state, [1, 2]).shape == (2, 6)


def _loop_fit_svi(key, X, strategy, S, n_iter, *, S_min=None, S_max=1 << 20, theta_delta=2.0, max_cells=None):
    """fit_svi's former driver: one `svi_step` per minibatch in a Python loop (host reads of S)."""
    data = sibm.as_binary(X)
    k_init, k_run = jax.random.split(key)
    params = sibm.init(k_init, data, D, HYPER)
    auto = S == "auto"
    st = sibm.svi_state(params, S_min if auto else S)
    sampler = sibm.make_sampler(data, strategy, dtype=np.asarray(params.u_h).dtype)
    data = jax.tree_util.tree_map(jnp.asarray, data)
    sizes = []
    for _ in range(n_iter):
        k_run, k = jax.random.split(k_run)
        size = int(st.S)
        st, _ = sibm.svi_step(k, st, data, HYPER, sampler=sampler, S=size)
        sizes.append(size)
        if auto:
            s = float(sibm.auto_minibatch_size(st, sampler, theta_delta))
            s = S_min if not np.isfinite(s) else int(min(max(round(s), S_min), S_max))
            st = st._replace(S=jnp.asarray(float(s), st.S.dtype))
        if max_cells is not None and sum(sizes) >= max_cells:
            break
    return st, sizes


# one strategy by default (the scan blocks do not depend on how cells are drawn); all three under -m slow
@pytest.mark.parametrize("strategy", [s if s == "biased" else pytest.param(s, marks=pytest.mark.slow)
                                      for s in sibm.STRATEGIES])
def test_block_scanned_svi_equals_one_minibatch_at_a_time(strategy):
    """fit_svi's lax.scan blocks draw the same cells and make the same updates as `svi_step` in a Python
    loop (same key stream): fixed S with a cell budget, and S = 'auto' (eq. 13) with S crossing powers of
    two (256 -> 512 -> ...: new blocks at the new padding); also `svi_scan` for fixed S."""
    X = _svi_matrix()
    key = jax.random.PRNGKey(7)
    leaves = lambda st: jax.tree_util.tree_leaves(st)  # noqa: E731
    cases = [dict(S=150, n_iter=11, max_cells=1300), _AUTO]
    for kw in cases:
        ref, sizes = _loop_fit_svi(key, X, strategy, **kw)
        if kw["S"] == "auto":
            assert len({sibm._pad_size(s) for s in sizes}) >= 2, sizes  # the case crosses a padding boundary
        r = sibm.fit_svi(key, X, D, HYPER, progress=False, strategy=strategy, scan_block=4, elbo_every=3, **kw)
        assert r.idata.vi_trace.attrs["n_iter"] == len(sizes) and r.idata.vi_trace.attrs["n_cells"] == sum(sizes)
        for a, b in zip(leaves(ref), leaves(r.state._replace(params=r.state.params._replace(last_elbo=ref.params.last_elbo)))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    data = sibm.as_binary(X)
    st0 = sibm.svi_state(sibm.init(jax.random.PRNGKey(1), data, D, HYPER), 100)
    sam = sibm.make_sampler(data, strategy)
    k, st = jax.random.PRNGKey(2), st0
    for _ in range(7):
        k, kk = jax.random.split(k)
        st, _ = sibm.svi_step(kk, st, data, HYPER, sampler=sam)
    k2, st2 = sibm.svi_scan(jax.random.PRNGKey(2), st0, data, HYPER, 7, sampler=sam, scan_block=3)
    np.testing.assert_array_equal(np.asarray(k), np.asarray(k2))
    for a, b in zip(leaves(st), leaves(st2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("which", ["svi", "map"])
def test_stopped_and_resumed_fit_equals_the_uninterrupted_one(which, tmp_path):
    """fit_svi (S = 'auto' crossing paddings, ELBO every 3, blocks of 4) and fit_map checkpoint every 2
    minibatches; stopped after the 3rd write and resumed, the state (q or the point, every Robbins-Monro
    counter, the moving averages and S), the key stream and the traces equal the uninterrupted run's bit
    for bit (SVI's blocks are cut at the checkpoints: the key stream and the updates do not change)."""
    from custom_inference import base

    X = _svi_matrix()
    if which == "svi":
        run = lambda **kw: sibm.fit_svi(jax.random.key(7), X, D, HYPER, progress=False, strategy="biased",  # noqa: E731
                                        scan_block=4, elbo_every=3, S="auto", n_iter=11, S_min=60, S_max=400,
                                        theta_delta=0.02, n_draws=3, **kw)
    else:
        run = lambda **kw: sibm.fit_map(jax.random.key(7), X, D, HYPER, progress=False, n_iter=9, S=64,  # noqa: E731
                                        log_joint_every=2, **kw)
    full = run()
    ckpt = tmp_path / f"{which}.npz"
    writes = []

    def hook(path, n_done):
        writes.append(n_done)
        if len(writes) == 3:
            raise base.Interrupted("stop")

    with base.on_checkpoint(hook), pytest.raises(base.Interrupted):
        run(checkpoint=ckpt, checkpoint_every=2)
    assert writes == [2, 4, 6]
    resumed = run(checkpoint=ckpt, checkpoint_every=2, resume=True)
    for a, b in zip(jax.tree_util.tree_leaves(full.state), jax.tree_util.tree_leaves(resumed.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(full.trace, resumed.trace)
    for name, da in full.idata.posterior.data_vars.items():
        np.testing.assert_array_equal(da.values, resumed.idata.posterior[name].values, err_msg=name)


def test_map_full_batch_blocks_are_autodiff_mm_steps_and_never_lower_the_log_joint(problem):
    """With every cell in the minibatch (c = p(j|i) = 1/J, p(i|j) = 1/I, p(i, j) = 1/(IJ): the exact
    gradient) and rho = 1, `map_step`'s blocks are exactly z + g_z / h_z, V + A_V^-1 g_V, U + A_U^-1 g_U
    with g = jax.grad of `log_joint` at the point each block starts from and A the Boehning bounds:
    block MM steps, so none may lower log p(X, U, V, z). Checked block by block for 6 steps (1e-9
    relative: float64 rounding; the increase >= -1e-9 |log p|). This pins the update itself; the
    decrease seen on T10I4D100K is the noise of one-cell row gradients (`custom_inference.sibm` docstring)."""
    from custom_inference.sibm import map as smap

    X, data = problem
    data = jax.tree_util.tree_map(jnp.asarray, data)
    I, J = X.shape
    ii, jj = (jnp.asarray(a.ravel()) for a in np.meshgrid(np.arange(I), np.arange(J), indexing="ij"))
    n = I * J
    batch = sibm.Minibatch(ii, jj, jnp.asarray(X.ravel(), jnp.float64), jnp.full(n, 1.0 / n), jnp.full(n, 1.0 / J),
                           jnp.full(n, 1.0 / I), jnp.ones(n))
    prior = sibm.prior_arrays(HYPER, jnp.float64)
    lj = lambda s: float(sibm.log_joint(s, data, HYPER))  # noqa: E731
    grad = jax.grad(lambda s: sibm.log_joint(s, data, HYPER))
    st = sibm.map_init(jax.random.PRNGKey(4), data, D, HYPER, init_mean_sd=0.7)
    free_u, free_v = st.u_fixed == 0, st.v_fixed == 0
    for _ in range(6):
        new = smap._map_update(st, batch, prior, 1.0, 0.7)
        s1 = st._replace(z=st.z + grad(st).z / (0.25 * I * J + 1.0 / HYPER.z_tilde0))
        s2 = s1._replace(V=s1.V + jnp.linalg.solve(sibm.map_curvature_bound(s1.U, free_v, HYPER.v_tilde0),
                                                   jnp.where(free_v, grad(s1).V, 0.0).T).T)
        s3 = s2._replace(U=s2.U + jnp.linalg.solve(sibm.map_curvature_bound(s2.V, free_u, HYPER.u_tilde0),
                                                   jnp.where(free_u, grad(s2).U, 0.0).T).T)
        for field in ("z", "V", "U"):
            np.testing.assert_allclose(np.asarray(getattr(new, field)), np.asarray(getattr(s3, field)), rtol=1e-9,
                                       atol=1e-12)
        values = [lj(s) for s in (st, s1, s2, s3)]
        assert all(b - a >= -1e-9 * abs(a) for a, b in zip(values, values[1:])), values
        st = new._replace(u_count=st.u_count, v_count=st.v_count, z_count=st.z_count)  # keep rho = 1
