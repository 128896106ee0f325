"""Shared Jaakkola-Jordan and MacKay math (custom_inference.logistic)."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, special

from custom_inference import logistic as lg

jax.config.update("jax_enable_x64", True)


def test_lambda_matches_definition_and_limit():
    xi = np.array([-3.0, -0.5, 1e-4, 0.7, 5.0])
    want = (special.expit(xi) - 0.5) / (2 * xi)
    np.testing.assert_allclose(lg.jj_lambda(xi), want, rtol=1e-10)
    assert float(lg.jj_lambda(0.0)) == 0.125
    # the series branch joins the closed form (continuity at the switch |xi| = 1e-3)
    np.testing.assert_allclose(lg.jj_lambda(1e-3 - 1e-12), lg.jj_lambda(1e-3 + 1e-12), rtol=1e-11)
    assert np.isfinite(jax.grad(lambda x: lg.jj_lambda(x))(0.0))


def test_bound_below_exact_and_tight_at_xi():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 4, 2000)
    xi = rng.normal(0, 4, 2000)
    g = rng.integers(0, 2, 2000)
    exact = g * x + special.log_expit(-x)
    bound = np.asarray(lg.jj_log_bound(x, xi, g))
    assert np.all(bound <= exact + 1e-12)
    np.testing.assert_allclose(lg.jj_log_bound(x, np.abs(x), g), exact, atol=1e-10)
    np.testing.assert_allclose(lg.jj_log_bound(x, -x, g), exact, atol=1e-10)  # even in xi


def test_expected_bound_is_mean_of_bound_and_optimal_xi_is_stationary():
    m, v = 0.8, 1.7
    xi0 = 0.4
    # quadratic in x: the expectation under N(m, v) uses only two moments
    f = lambda x: np.asarray(lg.jj_log_bound(x, xi0, 1)) * np.exp(-(x - m) ** 2 / (2 * v)) / np.sqrt(2 * np.pi * v)
    num, _ = integrate.quad(f, -40, 40)
    np.testing.assert_allclose(lg.jj_expected_log_bound(m, m * m + v, xi0, 1), num, rtol=1e-9)
    xs = lg.optimal_xi(m * m + v)
    d = jax.grad(lambda t: lg.jj_expected_log_bound(m, m * m + v, t, 1))(xs)
    assert abs(float(d)) < 1e-12
    grid = np.linspace(0.01, 5, 500)
    assert float(lg.jj_expected_log_bound(m, m * m + v, xs, 1)) >= np.max(
        np.asarray(lg.jj_expected_log_bound(m, m * m + v, grid, 1))) - 1e-12


def test_mackay_close_to_quadrature():
    for m, v in [(0.0, 1.0), (2.0, 0.5), (-1.5, 4.0), (3.0, 0.0)]:
        if v == 0:
            exact = special.expit(m)
        else:
            exact, _ = integrate.quad(lambda x: special.expit(x) * np.exp(-(x - m) ** 2 / (2 * v)) / np.sqrt(2 * np.pi * v),
                                      m - 12 * np.sqrt(v), m + 12 * np.sqrt(v))
        assert abs(float(lg.mackay_probit(m, v)) - exact) < 0.02  # MacKay's stated accuracy
    assert float(lg.mackay_probit(0.0, 3.0)) == 0.5
