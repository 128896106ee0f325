"""VBFM / OVBFM solver: input checks, ELBO ascent, float32, prediction, drivers (small designs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import arviz_io, vbfm
from ppl_models.fm import FMFlatHyper, predict_mean
from validation.models.vbfm import SMALL_DESIGN, simulated_design

HYPER = FMFlatHyper()


@pytest.fixture(scope="module")
def design():
    return simulated_design(**SMALL_DESIGN)


def test_init_rejects_bad_input(design):
    with pytest.raises(ValueError, match="K must be"):
        vbfm.init(jax.random.PRNGKey(0), design, 0, HYPER)
    with pytest.raises(ValueError, match="sigma_w"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER._replace(sigma_w=-1.0))
    with pytest.raises(ValueError, match="sigma_v"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER._replace(sigma_v=np.ones((5, 7))))
    with pytest.raises(ValueError, match="alpha_prior"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER, alpha_prior=(0.0, 1.0))
    with pytest.raises(ValueError, match="hyper has no field"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, object())
    with pytest.raises(ValueError, match="batch"):
        vbfm.minibatch(design, [design.n_rows])
    with pytest.raises(ValueError, match="n_batches"):
        vbfm.make_batches(0, design, 0)


def test_expected_prediction_at_zero_variance_equals_the_program_mean(design):
    """E_q[yhat] (the solver's caches) at vanishing variances is the NumPyro program's mean at the means."""
    state = vbfm.init(jax.random.PRNGKey(1), design, 3, HYPER, init_mean_sd=0.7, init_var=1e-300)
    (m0, _), (m, _), (mu, _) = vbfm.moments(state)
    d = jax.tree_util.tree_map(jnp.asarray, design)
    mean, sd = vbfm.predict(state, d, noise=False)
    ref = predict_mean({"w0": m0, "w": m, "V": mu}, d.rows, d.cols, d.values, d.n_rows)
    np.testing.assert_allclose(mean, ref, rtol=1e-12, atol=1e-12)  # float64 rounding of < 10 terms
    assert np.all(sd < 1e-100)


def test_cavi_raises_the_elbo_and_converges(design):
    d = jax.tree_util.tree_map(jnp.asarray, design)
    state = vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER)
    prev = float(vbfm.elbo(state, d))
    for _ in range(10):
        state, info = vbfm.step(None, state, d)
        assert float(info.elbo) >= prev - 1e-9 * abs(prev)  # rounding of a sum of ~100 terms
        prev = float(info.elbo)
    assert float(info.rel_change) < 0.05


def test_float32_runs_and_matches_float64(design):
    res64 = vbfm.fit(jax.random.PRNGKey(0), design, 2, HYPER, max_iter=30, tol=0.0, progress=False, n_draws=0)
    with jax.enable_x64(False):
        d32 = design.__class__(*(np.asarray(getattr(design, f)).astype(np.float32) if f in ("values", "y")
                                 else getattr(design, f) for f in design.__dataclass_fields__))
        res32 = vbfm.fit(jax.random.PRNGKey(0), d32, 2, HYPER, max_iter=30, tol=0.0, progress=False, n_draws=0)
        assert res32.state.v_h.dtype == jnp.float32
        assert np.all(np.isfinite(res32.elbo))
    # 30 sweeps of float32 rounding (1e-7 relative per operation) on an ELBO of ~100 nats
    np.testing.assert_allclose(res32.elbo[-1], res64.elbo[-1], rtol=1e-3)


def test_fit_and_fit_svi_return_inference_data(design):
    res = vbfm.fit(jax.random.PRNGKey(0), design, 2, HYPER, max_iter=60, tol=1e-4, progress=False, n_draws=50,
                   alpha_prior=(2.0, 0.5))
    post = arviz_io.group_arrays(res.idata)
    assert post["V"].shape == (1, 50, design.n_features, 2)
    assert post["w"].shape == (1, 50, design.n_features)
    assert post["alpha"].shape == (1, 50) and np.all(post["alpha"] > 0)
    attrs = res.idata.vi_trace.attrs
    assert attrs["n_iter"] == len(res.elbo) and attrs["converged"] == int(res.idata.vi_trace.rel_change.values[-1] < 1e-4)
    assert np.all(np.diff(res.elbo) >= -1e-9 * np.abs(res.elbo[:-1]))
    vp = arviz_io.group_arrays(res.idata, "variational_parameters")
    np.testing.assert_allclose(vp["v_prec"], res.state.v_prec)
    svi = vbfm.fit_svi(jax.random.PRNGKey(0), design, 2, HYPER, n_batches=4, max_epochs=5, progress=False, n_draws=10)
    assert svi.elbo.shape == (5,) and np.all(np.isfinite(svi.elbo))
    assert arviz_io.group_arrays(svi.idata)["w0"].shape == (1, 10)


def test_predict_gives_mean_and_predictive_sd(design):
    res = vbfm.fit(jax.random.PRNGKey(0), design, 2, HYPER, max_iter=50, tol=1e-8, progress=False, n_draws=0)
    d = jax.tree_util.tree_map(jnp.asarray, design)
    mean, sd = vbfm.predict(res.state, d)
    _, sd_f = vbfm.predict(res.state, d, noise=False)
    alpha = float(res.state.alpha_shape / res.state.alpha_rate)
    np.testing.assert_allclose(sd**2, sd_f**2 + 1.0 / alpha, rtol=1e-12)
    assert mean.shape == (design.n_rows,)
    # the fit explains the data better than the grand mean
    assert np.mean((design.y - mean) ** 2) < np.var(design.y)
    other = simulated_design(**{**SMALL_DESIGN, "multi_hot": False})
    with pytest.raises(ValueError, match="features"):
        vbfm.predict(res.state, other)
