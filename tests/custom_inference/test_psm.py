"""PSM VB solver (seed 000 Algorithm 1): protocol, compile-once step, float32, chunking, predictions,
bad input. The derivation itself is checked in tests/validation/test_psm_validation.py."""

import jax
import numpy as np
import pytest

from custom_inference import base, psm
from custom_inference.data import Observations
from ppl_models.psm import PSMHyper

jax.config.update("jax_enable_x64", True)

HYPER = PSMHyper()


@pytest.fixture(scope="module")
def obs():
    rng = np.random.default_rng(0)
    dense = rng.poisson(rng.gamma(1.0, 1.0, (12, 1)) * rng.gamma(1.0, 1.0, (1, 9)))
    dense[np.arange(12), rng.integers(0, 9, 12)] += 1
    return Observations.from_dense(dense.astype(float))


def test_algorithm_declaration():
    assert psm.ALGORITHM.kind == "vi" and psm.ALGORITHM.target_name == "elbo"
    assert set(psm.ALGORITHM.dims) == set(psm.PSMState._fields)
    psm.ALGORITHM.check()


def test_step_compiles_once(obs):
    state = psm.init(0, obs, 3, HYPER, r=1.0)
    d = psm._as_jax(obs, np.float64)
    state, info = psm.step(None, state, d, HYPER)
    traces = psm._TRACES["step"]
    size = psm._step_jit._cache_size()
    state, info2 = psm.step(None, state, d, HYPER._replace(tau_u=2.0))  # new hyper values: traced, no retrace
    assert psm._TRACES["step"] == traces and psm._step_jit._cache_size() == size
    assert float(info2.elbo) == float(info2.elbo)


def test_info_is_the_new_states_elbo(obs):
    state = psm.init(1, obs, 3, HYPER, r=0.5)
    new, info = psm.step(None, state, obs, HYPER)
    recomputed = float(psm._elbo_jit(new, psm._as_jax(obs, np.float64), psm._hyper_arrays(HYPER, np.float64), psm.DEFAULT_CHUNK))
    assert abs(float(info.elbo) - recomputed) < 1e-9 * abs(float(info.elbo))
    assert float(info.xi_star) == float(new.xi_star)


def test_chunked_pair_sums_equal_one_chunk(obs):
    """The O(|G| K^2) sums run in chunks with padding; 7 pairs per chunk (several chunks, a partial
    last one) gives the same sweep as one chunk, to float64 rounding."""
    state = psm.init(2, obs, 3, HYPER, r=2.0)
    a, ia = psm.step(None, state, obs, HYPER, chunk=7)
    b, ib = psm.step(None, state, obs, HYPER)  # default chunk: all 12 x 9 pairs in one
    for x, y in zip(a, b):
        assert np.allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)
    assert abs(float(ia.elbo) - float(ib.elbo)) < 1e-10 * abs(float(ib.elbo))


def test_fit_result_and_idata(obs):
    res = psm.fit(0, obs, 3, HYPER, max_iter=40, tol=1e-8, progress=False, r=1.0, n_draws=5)
    assert isinstance(res, base.FitResult)
    assert {"posterior", "variational_parameters", "vi_trace"} <= set(res.idata.groups())
    post = res.idata.posterior
    assert post["u"].shape == (1, 5, 12, 3) and post["pi"].shape == (1, 5, 12) and post["psi"].shape == (1, 5, 9)
    assert np.all(np.diff(res.trace) >= -1e-10 * np.abs(res.trace[:-1]))  # monotone up to float64 rounding
    assert res.idata.posterior.attrs["model"] == "psm"


def test_float32_run_tracks_float64(obs):
    r32 = psm.fit(0, obs, 3, HYPER, max_iter=15, tol=0.0, progress=False, dtype=np.float32, n_draws=1)
    r64 = psm.fit(0, obs, 3, HYPER, max_iter=15, tol=0.0, progress=False, dtype=np.float64, n_draws=1)
    assert r32.state.u_mu.dtype == np.float32 and r32.state.alpha.dtype == np.float32
    assert np.all(np.isfinite(r32.trace))
    # float32 rounding (eps 6e-8) of O(10^2) terms over 15 sweeps; 1e-4 relative is ~1000x that
    assert np.max(np.abs(r32.trace - r64.trace) / np.abs(r64.trace)) < 1e-4


def test_scores_and_predictive(obs):
    res = psm.fit(0, obs, 3, HYPER, max_iter=20, progress=False, n_draws=1)
    sc = psm.score_users(res.state, np.array([0, 3, 5]))
    assert sc.shape == (3, 9) and np.allclose(sc.sum(1), 1.0)
    acc = psm.score_users(res.state, np.array([0, 3, 5]), kind="acceptance")
    pop = psm.score_users(res.state, np.array([0, 3, 5]), kind="popularity")
    f = acc * pop
    assert np.allclose(sc, f / f.sum(1, keepdims=True))  # eq. (5): popularity times acceptance, normalised
    pp = psm.predictive_probability(res.state, np.array([0, 3, 5]), np.array([1, 2, 8]))
    assert np.allclose(pp, sc[np.arange(3), [1, 2, 8]])
    ap = psm.acceptance_probability(res.state, np.array([0, 3]), np.array([1, 2]))
    assert np.allclose(ap, acc[[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="users"):
        psm.score_users(res.state, np.array([12]))
    with pytest.raises(ValueError, match="kind"):
        psm.score_users(res.state, np.array([0]), kind="like")


def _raw(values, rows=(0, 1), cols=(0, 1)):
    return Observations(np.asarray(rows, np.int32), np.asarray(cols, np.int32), np.asarray(values, float), 3, 3)


@pytest.mark.parametrize(
    "data, kwargs, match",
    [
        (_raw([1.0, -2.0]), {}, "non-negative"),
        (_raw([1.0, 1.5]), {}, "integer"),
        (_raw([1.0, np.nan]), {}, "finite"),
        (_raw([], rows=(), cols=()), {}, "empty"),
        (_raw([0.0, 0.0]), {}, "zero"),
        (_raw([1.0, 1.0], rows=(0, 0), cols=(1, 1)), {}, "duplicate"),
        (_raw([1.0, 1.0]), {"r": 0.0}, "r must"),
        (_raw([1.0, 1.0]), {"r": -1.0}, "r must"),
        (_raw([1.0, 1.0]), {"r": float("inf")}, "r must"),
        (_raw([1.0, 1.0]), {"K": 0}, "K must"),
        (_raw([1.0, 1.0]), {"hyper": PSMHyper(tau_b=0.0)}, "tau_b"),
        (_raw([1.0, 1.0]), {"dtype": np.int32}, "dtype"),
    ],
)
def test_bad_input_is_refused_before_computing(data, kwargs, match):
    args = {"K": 2, "hyper": HYPER, **kwargs}
    K, hyper = args.pop("K"), args.pop("hyper")
    with pytest.raises(ValueError, match=match):
        psm.init(0, data, K, hyper, **args)
    with pytest.raises(ValueError, match=match):
        psm.fit(0, data, K, hyper, max_iter=2, progress=False, **args)


def _zero_point_operator(state, obs):
    """Dense numpy twin of one Algorithm 1 sweep linearised at E[u] = E[v] = 0 (benchmarks/basket_collapse.py,
    `psm_zero_spectrum`): dE[u] = P^-1 Y dE[v], then dE[v] = Q^-1 Y^T dE[u], with
    Y_ij = c_ij (1/2 - 2 lam_ij e_ij) - D' s_i t_j (1/2 + 2 lam_ij e_ij) (lam_ij = lam* off G, e_ij = E[b_i + b_j]),
    P_i = tau_u + sum_j W_ij Var v_j, Q_j = tau_v + sum_i W_ij Var u_i, W_ij = 2 (c_ij lam_ij + D' s_i t_j lam_ij)."""
    from custom_inference.logistic import jj_lambda

    rows, cols, c = np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values, float)
    lam = np.full(obs.shape, float(jj_lambda(state.xi_star)))
    lam[rows, cols] = np.asarray(jj_lambda(psm.pair_xi(state, obs)))
    C = np.zeros(obs.shape)
    C[rows, cols] = c
    e = np.asarray(state.bu_mu)[:, None] + np.asarray(state.bv_mu)[None, :]
    st = float(state.d_prime) * np.exp(np.asarray(state.log_s))[:, None] * np.exp(np.asarray(state.log_t))[None, :]
    Y = C * (0.5 - 2 * lam * e) - st * (0.5 + 2 * lam * e)
    W = 2 * lam * (C + st)
    P = HYPER.tau_u + W @ (1 / np.asarray(state.v_prec))  # (I, K): one column per factor
    Q = HYPER.tau_v + W.T @ (1 / np.asarray(state.u_prec))
    return Y, P, Q


def test_zero_factors_are_a_fixed_point_and_the_sweep_linearises_as_derived(obs):
    """u = v = 0 (factor means) is an exact fixed point of Algorithm 1 (m_i, m_j are linear in E[v], E[u]),
    so a symmetric zero start never leaves it; a small perturbation dv of E[v] moves, in one sweep, as the
    derived linear map (the basis of the basket-collapse analysis, issue 27): E[u] = P^-1 Y dv at the state
    the user block starts from, then E[v] = Q^-1 Y^T E[u] at the state the item block starts from, up to
    O(|dv|) relative (|dv| ~ 1e-6; tolerance 1e-4): the other blocks move at second order only."""
    import jax.numpy as jnp

    st = psm.init(0, obs, 3, HYPER, r=1.0)
    st = st._replace(u_mu=jnp.zeros_like(st.u_mu), v_mu=jnp.zeros_like(st.v_mu))
    for _ in range(30):
        st, _ = psm.step(None, st, obs, HYPER)
    assert float(jnp.max(jnp.abs(st.u_mu))) == 0.0 and float(jnp.max(jnp.abs(st.v_mu))) == 0.0
    d = psm._as_jax(obs, np.float64)
    h = psm._hyper_arrays(HYPER, np.float64)
    before, cur = {}, st
    for name, update, _ in psm.BLOCKS:  # the unperturbed sweep, block by block: each block's start state
        before[name] = cur
        cur = update(cur, d, h, psm.pair_xi(cur, d))
    dv = 1e-6 * np.random.default_rng(1).standard_normal(st.v_mu.shape)
    new, _ = psm.step(None, st._replace(v_mu=jnp.asarray(dv)), obs, HYPER)
    Y, P, _ = _zero_point_operator(before["users"], obs)
    u_lin = (Y @ dv) / P
    Y, _, Q = _zero_point_operator(before["items"], obs)  # its u_prec: the user block's
    v_lin = (Y.T @ u_lin) / Q
    assert np.abs(u_lin).max() > 1e-8 and np.abs(v_lin).max() > 1e-9  # the map is not trivially 0
    assert np.allclose(np.asarray(new.u_mu), u_lin, rtol=1e-4, atol=1e-4 * np.abs(u_lin).max())
    assert np.allclose(np.asarray(new.v_mu), v_lin, rtol=1e-4, atol=1e-4 * np.abs(v_lin).max())


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 22])
def test_check_data_in_chunks(monkeypatch, chunk):
    """`check_data` runs in chunks: a duplicate of row-major pairs straddling a chunk boundary, a
    duplicate of unsorted pairs (found by the key sort), a bad count and index in a later chunk."""
    monkeypatch.setattr(psm, "_CHECK_CHUNK", chunk)
    ok = Observations(np.array([0, 0, 1, 2]), np.array([0, 2, 1, 0]), np.ones(4), 3, 3)
    psm.check_data(ok)
    psm.check_data(Observations(np.array([2, 0, 1, 0]), np.array([0, 2, 1, 0]), np.ones(4), 3, 3))
    cases = [(([0, 0, 1, 1], [0, 2, 1, 1], [1, 1, 1, 1]), "duplicate"),
             (([1, 0, 1, 2], [1, 2, 1, 0], [1, 1, 1, 1]), "duplicate"),
             (([0, 0, 1, 2], [0, 2, 1, 0], [1, 1, 1, 2.5]), "integer"),
             (([0, 0, 1, 3], [0, 2, 1, 0], [1, 1, 1, 1]), "rows index"),
             (([0, 0, 1, 2], [0, 2, 1, 0], [0, 0, 0, 0]), "zero")]
    for (r, c, v), match in cases:
        with pytest.raises(ValueError, match=match):
            psm.check_data(Observations(np.array(r), np.array(c), np.array(v, float), 3, 3))


@pytest.mark.parametrize("shape", [(1, 5), (3, 2)])
def test_a_fully_observed_matrix_fits(shape):
    """Every (user, item) pair observed (always so for one user who chose every item): the pairs outside G have
    q-weight 1 - sum_G s_i t_j = 0, so xi* does not enter L and keeps its value; before, eq. (16) gave 0 / 0 and
    the ELBO was NaN at sweep 1 in float64 too. The ELBO is finite and never falls (CAVI in float64: a fall
    beyond 1e-9 relative would be a wrong update, not rounding)."""
    I, J = shape
    rows, cols = np.divmod(np.arange(I * J), J)
    vals = np.random.default_rng(0).integers(1, 4, I * J).astype(float)
    import jax.numpy as jnp

    data = Observations(jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(vals, jnp.float64), I, J)
    r = psm.fit(jax.random.PRNGKey(0), data, 2, PSMHyper(), max_iter=15, progress=False)
    elbo = np.asarray(r.elbo)
    assert np.isfinite(elbo).all()
    assert np.all(np.diff(elbo) >= -1e-9 * np.abs(elbo[1:])), elbo
    assert float(r.state.xi_star) == 1.0  # the initial xi* (Algorithm 1), kept: it weighs nothing
