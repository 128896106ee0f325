"""Tests of the FM NumPyro programs: predict_mean, log densities, prior predictive."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats

from ppl_models.fm import FMFlatHyper, FMHierHyper, model, predict_mean, simulate


def _design(seed=0, N=12, D=7):
    rng = np.random.default_rng(seed)
    X = np.zeros((N, D))
    for n in range(N):
        idx = rng.choice(D, size=3, replace=False)
        X[n, idx] = rng.normal(size=3)
    rows, cols = np.nonzero(X)
    return X, rows, cols, X[rows, cols]


def _dense_fm(X, w0, w, V):
    N, D = X.shape
    out = w0 + X @ w
    for n in range(N):
        for i in range(D):
            for j in range(i + 1, D):
                out[n] += X[n, i] * X[n, j] * V[i] @ V[j]
    return out


def test_predict_mean_equals_double_sum():
    X, rows, cols, vals = _design()
    rng = np.random.default_rng(1)
    w0, w, V = 0.3, rng.normal(size=7), rng.normal(size=(7, 3))
    got = predict_mean({"w0": w0, "w": jnp.asarray(w), "V": jnp.asarray(V)}, rows, cols, vals, X.shape[0])
    np.testing.assert_allclose(got, _dense_fm(X, w0, w, V), rtol=1e-10, atol=1e-12)


def test_log_densities_match_scipy():
    X, rows, cols, vals = _design(2)
    N, D, K = X.shape[0], X.shape[1], 2
    group = np.array([0, 0, 0, 1, 1, 2, 2])
    rng = np.random.default_rng(3)
    p = {"alpha": 2.3, "w0": 0.4, "sigma_w": rng.gamma(2, 1, 3), "mu_w": rng.normal(size=3),
         "sigma_v": rng.gamma(2, 1, (3, K)), "mu_v": rng.normal(size=(3, K)),
         "w": rng.normal(size=D), "V": rng.normal(size=(D, K))}
    y = rng.normal(size=N)
    h = FMHierHyper(mu_0=0.2, sigma_0=1.5, nu_0=2.0, alpha_0p=1.3, beta_0p=0.7, alpha_0=2.0, beta_0=0.5)
    sd = lambda prec: 1 / np.sqrt(prec)  # noqa: E731
    mean = _dense_fm(X, p["w0"], p["w"], p["V"])
    expected = (stats.gamma.logpdf(p["alpha"], h.alpha_0, scale=1 / h.beta_0)
                + stats.norm.logpdf(p["w0"], h.mu_0, sd(h.sigma_0))
                + stats.gamma.logpdf(p["sigma_w"], h.alpha_0p, scale=1 / h.beta_0p).sum()
                + stats.norm.logpdf(p["mu_w"], h.mu_0, sd(h.nu_0 * p["sigma_w"])).sum()
                + stats.norm.logpdf(p["w"], p["mu_w"][group], sd(p["sigma_w"][group])).sum()
                + stats.gamma.logpdf(p["sigma_v"], h.alpha_0p, scale=1 / h.beta_0p).sum()
                + stats.norm.logpdf(p["mu_v"], h.mu_0, sd(h.nu_0 * p["sigma_v"])).sum()
                + stats.norm.logpdf(p["V"], p["mu_v"][group], sd(p["sigma_v"][group])).sum()
                + stats.norm.logpdf(y, mean, sd(p["alpha"])).sum())
    args = (rows, cols, vals, N, D, group, K, h, jnp.asarray(y))
    got, _ = log_density(model, args, {}, {k: jnp.asarray(v) for k, v in p.items()})
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)

    f = FMFlatHyper(alpha=1.7, sigma_0=0.5, sigma_w=np.array([1.0, 2.0, 3.0]), sigma_v=rng.gamma(2, 1, (3, K)))
    expected = (stats.norm.logpdf(p["w0"], 0, sd(f.sigma_0))
                + stats.norm.logpdf(p["w"], 0, sd(f.sigma_w[group])).sum()
                + stats.norm.logpdf(p["V"], 0, sd(f.sigma_v[group])).sum()
                + stats.norm.logpdf(y, mean, sd(f.alpha)).sum())
    args = (rows, cols, vals, N, D, group, K, f, jnp.asarray(y))
    got, _ = log_density(model, args, {}, {k: jnp.asarray(p[k]) for k in ("w0", "w", "V")})
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)


def test_simulate_shapes_reproducible_and_errors():
    X, rows, cols, vals = _design(4)
    group = np.array([0, 0, 0, 1, 1, 2, 2])
    t1, y1 = simulate(jax.random.PRNGKey(0), rows, cols, vals, 12, group, 2, FMHierHyper())
    t2, y2 = simulate(jax.random.PRNGKey(0), rows, cols, vals, 12, group, 2, FMHierHyper())
    np.testing.assert_array_equal(y1, y2)
    assert t1["V"].shape == (7, 2) and t1["mu_v"].shape == (3, 2) and y1.shape == (12,)
    t3, y3 = simulate(jax.random.PRNGKey(0), rows, cols, vals, 12, group, 2, FMFlatHyper())
    assert set(t3) == {"w0", "w", "V"}
    with pytest.raises(ValueError, match="hyper"):
        simulate(jax.random.PRNGKey(0), rows, cols, vals, 12, group, 2, object())
    with pytest.raises(ValueError, match="cols"):
        simulate(jax.random.PRNGKey(0), rows, cols + 7, vals, 12, group, 2, FMHierHyper())
    with pytest.raises(ValueError, match="K"):
        simulate(jax.random.PRNGKey(0), rows, cols, vals, 12, group, 0, FMHierHyper())


def test_prior_predictive_noise_variance():
    """Var(y - yhat) = E[1/alpha] under FMFlatHyper (fixed alpha): check the noise scale."""
    X, rows, cols, vals = _design(5, N=4000)
    group = np.zeros(7, dtype=int)
    f = FMFlatHyper(alpha=4.0)
    t, y = simulate(jax.random.PRNGKey(1), rows, cols, vals, 4000, group, 2, f)
    resid = np.asarray(y) - np.asarray(predict_mean(t, rows, cols, vals, 4000))
    se = 0.25 * np.sqrt(2 / 4000)  # sd of a sample variance of N normals with variance 1/4
    assert abs(resid.var() - 0.25) < 4 * se
