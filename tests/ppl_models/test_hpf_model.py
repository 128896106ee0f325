"""Tests of the HPF NumPyro program: its log density and its prior predictive."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats

from ppl_models.hpf import HPFHyper, expected_rates, model, simulate

HYPER = HPFHyper(a=0.6, a_prime=2.0, b_prime=1.5, c=0.8, c_prime=3.0, d_prime=0.7)


def test_log_density_matches_scipy_hand_written_joint():
    """The program is the generative process of seed 001 (shape/rate; prior rate a'/b')."""
    rng = np.random.default_rng(0)
    i, j, k = 4, 3, 2
    params = {
        "xi": rng.gamma(2.0, 1.0, i),
        "theta": rng.gamma(1.0, 1.0, (i, k)),
        "eta": rng.gamma(2.0, 1.0, j),
        "beta": rng.gamma(1.0, 1.0, (j, k)),
    }
    y = rng.poisson(1.0, (i, j)).astype(float)
    h = HYPER
    expected = (
        stats.gamma.logpdf(params["xi"], h.a_prime, scale=h.b_prime / h.a_prime).sum()
        + stats.gamma.logpdf(params["theta"], h.a, scale=1.0 / params["xi"][:, None]).sum()
        + stats.gamma.logpdf(params["eta"], h.c_prime, scale=h.d_prime / h.c_prime).sum()
        + stats.gamma.logpdf(params["beta"], h.c, scale=1.0 / params["eta"][:, None]).sum()
        + stats.poisson.logpmf(y, params["theta"] @ params["beta"].T).sum()
    )
    got, _ = log_density(model, (jnp.asarray(y), k, h), {}, params)
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)


def test_simulate_shapes_reproducibility_and_errors():
    p1, y1 = simulate(jax.random.PRNGKey(3), 5, 4, 2, HYPER)
    p2, y2 = simulate(jax.random.PRNGKey(3), 5, 4, 2, HYPER)
    assert p1["theta"].shape == (5, 2) and p1["beta"].shape == (4, 2)
    assert p1["xi"].shape == (5,) and p1["eta"].shape == (4,) and y1.shape == (5, 4)
    np.testing.assert_array_equal(y1, y2)
    assert np.all(np.asarray(y1) >= 0) and np.all(np.asarray(y1) == np.round(np.asarray(y1)))
    np.testing.assert_allclose(expected_rates(p1["theta"], p1["beta"]), p1["theta"] @ p1["beta"].T)
    with pytest.raises(ValueError, match="n_components"):
        simulate(jax.random.PRNGKey(0), 5, 4, 0, HYPER)


def test_prior_means_of_activity_and_popularity():
    """E[xi] = b' and E[eta] = d': the prior rate is a'/b' (c'/d'), not b' (d')."""
    n_users, n_items = 3000, 3000
    params, _ = simulate(jax.random.PRNGKey(1), n_users, n_items, 1, HYPER)
    for name, mean, shape in (("xi", HYPER.b_prime, HYPER.a_prime), ("eta", HYPER.d_prime, HYPER.c_prime)):
        draws = np.asarray(params[name])
        se = mean / np.sqrt(shape) / np.sqrt(draws.size)  # sd of Gamma(s, s/m) is m / sqrt(s)
        assert abs(draws.mean() - mean) < 4 * se, (name, draws.mean(), mean, se)
