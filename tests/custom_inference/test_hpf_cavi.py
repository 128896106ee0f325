"""Tests of the HPF CAVI solver: updates, ELBO, driver, result object, checkpoints."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import arviz_io
from custom_inference import hpf
from custom_inference.data import Observations
from ppl_models.hpf import HPFHyper, simulate
from validation.checks import updates

HYPER = HPFHyper(a=0.5, a_prime=2.0, b_prime=1.0, c=0.7, c_prime=1.5, d_prime=2.0)


@pytest.fixture(scope="module")
def small():
    _, y = simulate(jax.random.PRNGKey(4), 15, 12, 3, HYPER)
    return Observations.from_dense(np.asarray(y))


def test_init_shapes_and_fixed_activity_shapes(small):
    state = hpf.init(jax.random.PRNGKey(0), small, 3, HYPER)
    assert state.gamma_shape.shape == (15, 3) and state.lambda_rate.shape == (12, 3)
    assert state.kappa_rate.shape == (15,) and state.tau_shape.shape == (12,)
    np.testing.assert_allclose(state.kappa_shape, HYPER.a_prime + 3 * HYPER.a)
    np.testing.assert_allclose(state.tau_shape, HYPER.c_prime + 3 * HYPER.c)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_number_of_components(small, k):
    with pytest.raises(ValueError, match="n_components"):
        hpf.fit(0, small, k, HYPER, progress=False)


def test_key_first_protocol_and_seed_equals_key(small):
    """fit(key, data, K, hyper): an int seed is the same as PRNGKey(seed); anything else as key raises."""
    a = hpf.fit(4, small, 2, HYPER, max_iter=3, tol=0, n_draws=2, progress=False).idata
    b = hpf.fit(jax.random.PRNGKey(4), small, 2, HYPER, max_iter=3, tol=0, n_draws=2, progress=False).idata
    np.testing.assert_array_equal(a.posterior.theta.values, b.posterior.theta.values)
    with pytest.raises(TypeError, match="key"):
        hpf.fit("seed", small, 2, HYPER, progress=False)
    with pytest.raises(TypeError, match="key"):
        hpf.fit(small, HYPER, 2, progress=False)  # the pre-protocol argument order


def test_bad_hyper_and_driver_arguments(small):
    with pytest.raises(ValueError, match="hyper.a"):
        hpf.fit(0, small, 2, HYPER._replace(a=-1.0), progress=False)
    with pytest.raises(ValueError, match="max_iter"):
        hpf.fit(0, small, 2, HYPER, max_iter=0, progress=False)
    with pytest.raises(ValueError, match="dtype"):
        hpf.fit(0, small, 2, HYPER, dtype=np.int32, progress=False)


def test_elbo_never_decreases_and_step_reports_the_new_states_elbo(small):
    data = jax.tree_util.tree_map(jnp.asarray, small)
    state = hpf.init(jax.random.PRNGKey(1), data, 3, HYPER)
    values = []
    for _ in range(60):
        swept, incoming = hpf.sweep(state, data, HYPER)
        assert float(incoming) == pytest.approx(float(hpf.elbo(state, data, HYPER)), rel=1e-12)
        state, info = hpf.step(None, state, data, HYPER)
        np.testing.assert_array_equal(state.gamma_shape, swept.gamma_shape)  # step and sweep: one update
        # Info describes the new state (float64 rounding of two summation orders of ~100 terms)
        assert float(info.elbo) == pytest.approx(float(hpf.elbo(state, data, HYPER)), rel=1e-12)
        values.append(float(info.elbo))
    ok, worst = updates.monotone(values)
    assert ok, f"ELBO decreased by a relative {worst:.2e}"
    assert values[-1] > values[0]


def test_elbo_with_optimal_phi_equals_collapsed_form(small):
    data = jax.tree_util.tree_map(jnp.asarray, small)
    state = hpf.init(jax.random.PRNGKey(2), data, 3, HYPER)
    phi = hpf.optimal_phi(state, data)
    np.testing.assert_allclose(phi.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(hpf.elbo(state, data, HYPER, phi), hpf.elbo(state, data, HYPER), rtol=1e-12)
    # any other phi gives a lower bound
    uniform = jnp.full_like(phi, 1.0 / phi.shape[1])
    assert float(hpf.elbo(state, data, HYPER, uniform)) < float(hpf.elbo(state, data, HYPER))


def test_fit_result_is_inference_data_with_draws_from_q(small):
    idata = hpf.fit(5, small, 3, HYPER, max_iter=300, tol=1e-10, n_draws=4000, progress=False).idata
    assert {"posterior", "variational_parameters", "vi_trace"} <= set(idata.groups())
    post = idata.posterior
    assert post.theta.dims == ("chain", "draw", "user", "component")
    assert post.beta.shape == (1, 4000, 12, 3) and post.xi.shape == (1, 4000, 15)
    state = hpf.state_from_inference_data(idata)
    # draws from q have the q means: |mean - shape/rate| <= 5 sd/sqrt(n) for every xi_u
    mean = np.asarray(state.kappa_shape / state.kappa_rate)
    se = mean / np.sqrt(np.asarray(state.kappa_shape)) / np.sqrt(4000)
    assert np.all(np.abs(post.xi.values[0].mean(axis=0) - mean) < 5 * se)
    assert idata.posterior.attrs["method"] == "cavi"
    assert idata.posterior.attrs["n_iter"] == len(idata.vi_trace.elbo) - 1


def test_same_seed_same_result_and_float32(small):
    a = hpf.fit(7, small, 3, HYPER, max_iter=20, tol=0, n_draws=5, progress=False).idata
    b = hpf.fit(jax.random.PRNGKey(7), small, 3, HYPER, max_iter=20, tol=0, n_draws=5, progress=False).idata
    c = hpf.fit(8, small, 3, HYPER, max_iter=20, tol=0, n_draws=5, progress=False).idata
    np.testing.assert_array_equal(a.posterior.theta.values, b.posterior.theta.values)
    assert not np.array_equal(a.posterior.theta.values, c.posterior.theta.values)
    f32 = hpf.fit(7, small, 3, HYPER, max_iter=20, tol=0, dtype=np.float32, n_draws=5, progress=False).idata
    assert f32.variational_parameters.gamma_shape.dtype == np.float32
    # float32 follows the float64 path to single precision over 20 sweeps
    np.testing.assert_allclose(f32.vi_trace.elbo.values, a.vi_trace.elbo.values, rtol=1e-4)


def test_tolerance_stops_early(small):
    idata = hpf.fit(1, small, 3, HYPER, max_iter=5000, tol=1e-4, n_draws=0, progress=False).idata
    assert idata.posterior.theta.shape == (1, 1, 15, 3)  # n_draws=0: the means of q as one draw
    attrs = idata.vi_trace.attrs
    assert attrs["converged"] == 1 and 2 < attrs["n_iter"] < 5000
    rel = idata.vi_trace.rel_change.values  # rel[t] compares ELBO t with t-1; the last entry is the final state
    assert rel[-2] < 1e-4  # the sweep that stopped it
    assert np.all(rel[1:-2] >= 1e-4)  # and no earlier one


def test_checkpoint_and_resume_equal_an_uninterrupted_run(small, tmp_path):
    full = hpf.fit(3, small, 3, HYPER, max_iter=30, tol=0, n_draws=0, progress=False)
    ckpt = tmp_path / "state.npz"
    part = hpf.fit(3, small, 3, HYPER, max_iter=12, tol=0, n_draws=0, progress=False, checkpoint=ckpt,
                   checkpoint_every=5)
    resumed = hpf.fit(3, small, 3, HYPER, max_iter=30, tol=0, n_draws=0, progress=False, checkpoint=ckpt,
                      resume=True)
    assert part.idata.vi_trace.attrs["n_iter"] == 12 and resumed.idata.vi_trace.attrs["n_iter"] == 30
    for a, b in zip(resumed.state, full.state):  # stopped part-way, resumed: bit for bit the same run
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(resumed.trace, full.trace)
    # the explicit state round trip (save_state / init_state) still starts where it left off
    hpf.save_state(part.state, tmp_path / "s.npz", n_iter=12)
    state, meta = hpf.load_state(tmp_path / "s.npz")
    assert meta["n_iter"] == 12
    again = hpf.fit(3, small, 3, HYPER, max_iter=18, tol=0, n_draws=0, progress=False, init_state=state)
    np.testing.assert_allclose(again.state.gamma_shape, full.state.gamma_shape, rtol=1e-10)
    with pytest.raises(FileNotFoundError):
        hpf.load_state(tmp_path / "missing.npz")
    # a name without .npz: the returned path is the file numpy wrote, and it loads
    written = hpf.save_state(part.state, tmp_path / "ckpt" / "state", n_iter=12)
    assert written == tmp_path / "ckpt" / "state.npz" and written.exists()
    np.testing.assert_array_equal(hpf.load_state(written)[0].gamma_shape, state.gamma_shape)
    with pytest.raises(ValueError, match="init_state.gamma_shape"):
        bad = state._replace(gamma_shape=state.gamma_shape[:, :2])
        hpf.fit(0, small, 3, HYPER, max_iter=2, init_state=bad, progress=False)


def test_saved_result_round_trips(small, tmp_path):
    idata = hpf.fit(0, small, 2, HYPER, max_iter=10, tol=0, n_draws=3, progress=False).idata
    path = arviz_io.save(idata, tmp_path / "fit.nc")
    back = arviz_io.load(path)
    np.testing.assert_array_equal(back.posterior.theta.values, idata.posterior.theta.values)
    state = hpf.state_from_inference_data(back)
    scores = hpf.score_users(state, np.array([0, 3]))
    assert scores.shape == (2, 12)
    np.testing.assert_allclose(scores[1, 5], hpf.expected_rate(state, [3], [5])[0], rtol=1e-12)


# slow (2,000 sweeps on 80 x 60): a recovery run; correctness is checked by default through the
# update checks and the cross-check against the stored NUTS reference
@pytest.mark.slow
def test_recovers_simulated_rates():
    """On data simulated from the model, posterior mean rates track the true rates."""
    params, y = simulate(jax.random.PRNGKey(11), 80, 60, 3, HYPER)
    obs = Observations.from_dense(np.asarray(y))
    idata = hpf.fit(0, obs, 3, HYPER, max_iter=2000, tol=1e-9, n_draws=0, progress=False).idata
    state = hpf.state_from_inference_data(idata)
    est = hpf.score_users(state, np.arange(80))
    true = np.asarray(params["theta"] @ params["beta"].T)
    # log-scale correlation across 4800 cells; fails for a solver that ignores the data
    assert np.corrcoef(np.log(est).ravel(), np.log(true).ravel())[0, 1] > 0.8


def test_fold_in_recovers_the_fitted_users_posterior(small):
    """Folding in training users against the fitted items lands on the fit's own user posterior.

    On the module's `small` data (15 x 12, K = 3: the shapes of the other fits here, so the fit
    reuses their compiled sweep; a 40 x 30, K = 2 problem cost a compilation). Converges in ~330
    sweeps at tol 1e-12; measured max relative gap of the rates 1.8e-7 (rtol 1e-4 below)."""
    idata = hpf.fit(0, small, 3, HYPER, max_iter=3000, tol=1e-12, n_draws=0, progress=False).idata
    assert idata.vi_trace.attrs["converged"] == 1  # at the fixed point (the premise of the check)
    state = hpf.state_from_inference_data(idata)
    users = np.array([0, 7, 14])
    new_rows = Observations.from_dense(small.to_dense()[users])
    folded = hpf.fold_in(state, new_rows, HYPER, seed=5, tol=1e-10, max_iter=5000)
    # at a CAVI fixed point each user's block is at its optimum given the items; fold-in
    # reaches the same optimum from another start (to the convergence tolerance)
    np.testing.assert_allclose(hpf.score_users(folded, np.arange(3)), hpf.score_users(state, users), rtol=1e-4)
    with pytest.raises(ValueError, match="items"):
        hpf.fold_in(state, Observations.from_dense(np.ones((2, 5))), HYPER)
