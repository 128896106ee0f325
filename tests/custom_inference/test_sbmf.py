"""SBMF Gibbs sampler (custom_inference.sbmf): cache, driver, prediction, float32, input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import sbmf
from custom_inference.data import Observations
from ppl_models import sbmf as ppl

I, J, K, N = 8, 6, 2, 30  # one shape for the whole file: one compiled sampler
HYPER = ppl.SBMFHyper()


def _obs(seed=0, dtype=np.float64):
    _, r, c, v = ppl.simulate(seed, I, J, K, HYPER, n_obs=N)
    return Observations.from_coo(r, c, v, (I, J), kind="real", dtype=dtype, drop_zeros=False)


@pytest.fixture(scope="module")
def run():
    obs = _obs()
    cells = (np.array([0, 3, 7]), np.array([0, 5, 2]))
    idata = sbmf.sample(0, obs, K, HYPER, num_chains=2, num_warmup=50, num_samples=100, thin=2, progress=False,
                        predict_at=cells)
    return obs, cells, idata


def test_cache_stays_equal_to_residuals_from_scratch():
    obs = jax.tree_util.tree_map(jnp.asarray, _obs())
    state = sbmf.init(jax.random.PRNGKey(0), obs, K, HYPER)
    for t in range(10):
        state, info = sbmf.step(jax.random.PRNGKey(t), state, obs, HYPER)
    # float64 rounding of O(10) residuals updated ~ (2K + 3) x 10 times: << 1e-10
    assert np.max(np.abs(state.e - sbmf.residuals(state, obs))) < 1e-10
    assert np.isclose(info.log_joint, sbmf.log_joint(state, obs, HYPER, from_cache=False), rtol=1e-12)
    params = {k: np.asarray(getattr(state, k)) for k in sbmf.ALL_VARS}
    assert np.isclose(float(info.log_joint), ppl.log_joint(params, *(np.asarray(a) for a in (obs.rows, obs.cols, obs.values)), HYPER), rtol=1e-12)


def test_chunked_entry_loops_equal_one_chunk():
    # the sweep visits the entries in chunks (sbmf.ENTRY_CHUNK; issue 14): each entry's arithmetic
    # and the entry order of the segment sums are those of one pass, so the chain is the same bit
    # for bit for any chunk size (7 < N = 30: four whole chunks and a tail)
    obs = jax.tree_util.tree_map(jnp.asarray, _obs())
    state = sbmf.init(jax.random.PRNGKey(0), obs, K, HYPER)
    # residuals from scratch: only the order of the K-term sum u_i . v_j may differ (vectorized by
    # shape), a few ulps of O(10) values in float64
    np.testing.assert_allclose(sbmf.residuals(state, obs, chunk=7), sbmf.residuals(state, obs, chunk=N),
                               rtol=0, atol=1e-13)
    assert sbmf.ENTRY_CHUNK >= N  # the default: one chunk (the compiled sweep of the test above)
    one, _ = sbmf.step(jax.random.PRNGKey(3), state, obs, HYPER)
    chunked, _ = sbmf.step(jax.random.PRNGKey(3), state, obs, HYPER, chunk=7)
    for name in sbmf.State._fields:
        np.testing.assert_array_equal(np.asarray(getattr(chunked, name)), np.asarray(getattr(one, name)), err_msg=name)


def test_driver_layout_and_seed(run):
    obs, cells, idata = run
    post = idata.posterior
    assert post["U"].shape == (2, 100, I, K) and post["pred"].shape == (2, 100, 3)
    assert post["tau"].dims == ("chain", "draw") and idata.sample_stats["lp"].shape == (2, 100)
    assert np.all(post["tau"].values > 0)
    again = sbmf.sample(0, obs, K, HYPER, num_chains=2, num_warmup=50, num_samples=100, thin=2, progress=False,
                        predict_at=cells)
    np.testing.assert_array_equal(again.posterior["pred"].values, post["pred"].values)


def test_predict_averages_the_kept_draws(run):
    obs, cells, idata = run
    mean, sd = sbmf.predict(idata, *cells)
    stored = idata.posterior["pred"].values.reshape(-1, 3)  # the same function recorded in the sampler
    np.testing.assert_allclose(mean, stored.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(sd, stored.std(axis=0, ddof=1), rtol=1e-8)


def test_float32_runs():
    with jax.enable_x64(False):
        obs = jax.tree_util.tree_map(jnp.asarray, _obs(dtype=np.float32))
        state = sbmf.init(jax.random.PRNGKey(0), obs, K, HYPER)
        for t in range(3):
            state, info = sbmf.step(jax.random.PRNGKey(t), state, obs, HYPER)
        assert state.U.dtype == jnp.float32 and np.isfinite(float(info.log_joint))
        # float32 cache drift after 3 sweeps: a few ulps of O(10) residuals
        assert np.max(np.abs(state.e - sbmf.residuals(state, obs))) < 1e-3


@pytest.mark.slow
def test_float32_driver():
    obs = _obs(dtype=np.float32)
    idata = sbmf.sample(1, obs, K, HYPER, num_chains=1, num_warmup=10, num_samples=20, progress=False, keep=("tau", "mu"))
    assert idata.posterior["tau"].dtype == np.float32 and np.all(np.isfinite(idata.posterior["mu"].values))


def test_input_errors_name_the_field():
    obs = _obs()
    with pytest.raises(TypeError, match="obs must be"):
        sbmf.sample(0, obs.to_dense(), K, HYPER)
    with pytest.raises(ValueError, match="K"):
        sbmf.sample(0, obs, 0, HYPER)
    with pytest.raises(ValueError, match="num_chains"):
        sbmf.sample(0, obs, K, HYPER, num_chains=0)
    with pytest.raises(ValueError, match="keep"):
        sbmf.sample(0, obs, K, HYPER, keep=("theta",))
    with pytest.raises(ValueError, match="nu0"):
        sbmf.sample(0, obs, K, HYPER._replace(nu0=0.0))
    with pytest.raises(ValueError, match="predict_at"):
        sbmf.sample(0, obs, K, HYPER, predict_at=([I], [0]))
    with pytest.raises(ValueError, match="U"):
        sbmf.predict({"mu": np.zeros(3)}, [0], [0])
