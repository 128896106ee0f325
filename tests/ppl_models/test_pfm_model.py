"""Tests of the NPFM / PPFM NumPyro programs (`ppl_models.pfm`): log density, rates, simulate, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from numpyro.infer.util import log_density
from scipy import stats

from ppl_models.pfm import PFMHyper, PFMSizes, cells_design, model, rates, simulate

HYPER = PFMHyper(a_0=1.3, b_0=0.7, c_0=2.1, d_0=1.6, a=0.9, b=1.4, c=1.8, d=1.1, e=1.2, f=0.8, g=2.4, h=1.9,
                 e_0=2.2, f_0=1.5, g_0=1.7, h_0=0.6)


def _design(side=True):
    Uf = sp.csr_matrix(np.array([[1.5], [0.0], [2.0]])) if side else None
    Vf = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0]])) if side else None
    return cells_design(3, 2, user_features=Uf, item_features=Vf, exclude=(np.array([1]), np.array([0])))


def _params(rng, D, K, variant):
    p = {"alpha0": 1.2, "beta0": 0.8, "w0": 0.7, "alpha": rng.gamma(2, 1, D), "beta": rng.gamma(2, 1, D),
         "w": rng.gamma(1, 1, D), "zeta": rng.gamma(2, 1, D), "delta": rng.gamma(2, 1, K),
         "V": rng.gamma(1, 1, (D, K))}
    if variant == "npfm":
        p.update(gamma0=1.5, c=0.9, r=rng.gamma(1, 1, K))
    return p


@pytest.mark.parametrize("variant", ["npfm", "ppfm"])
def test_log_density_matches_hand_written_joint(variant):
    """Eq. 5.6 / 5.20 with dense pairwise sums and every Gamma prior (shape/rate) by scipy."""
    rng = np.random.default_rng(0)
    rows, cols, vals, N, D, cu, cj = _design()
    K = 3
    p = _params(rng, D, K, variant)
    X = np.zeros((N, D))
    X[rows, cols] = vals
    y = rng.poisson(2.0, N).astype(float)
    r = p["r"] if variant == "npfm" else np.ones(K)
    pair = sum(X[:, i] * X[:, j] * (p["V"][i] * p["V"][j] * r).sum() for i in range(D) for j in range(i + 1, D))
    lam = p["w0"] + X @ p["w"] + pair
    h = HYPER
    lg = lambda x, a, b: stats.gamma.logpdf(x, a, scale=1 / b).sum()  # noqa: E731
    expected = (lg(p["alpha0"], h.a_0, h.b_0) + lg(p["beta0"], h.c_0, h.d_0) + lg(p["w0"], p["alpha0"], p["beta0"])
                + lg(p["alpha"], h.a, h.b) + lg(p["beta"], h.c, h.d) + lg(p["w"], p["alpha"], p["beta"])
                + lg(p["zeta"], h.e, h.f) + lg(p["delta"], h.g, h.h)
                + lg(p["V"], p["zeta"][:, None], p["delta"][None, :]) + stats.poisson.logpmf(y, lam).sum())
    if variant == "npfm":
        expected += lg(p["gamma0"], h.e_0, h.f_0) + lg(p["c"], h.g_0, h.h_0) + lg(p["r"], p["gamma0"] / K, p["c"])
    got, _ = log_density(model, (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(vals), N, D, K, h, jnp.asarray(y)),
                         {"variant": variant}, {k: jnp.asarray(v) for k, v in p.items()})
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(rates({k: jnp.asarray(v) for k, v in p.items()}, jnp.asarray(rows),
                                                jnp.asarray(cols), jnp.asarray(vals), N, variant)), lam, rtol=1e-12)


def test_cells_design_layout_and_exclusion():
    rows, cols, vals, N, D, cu, cj = _design()
    assert N == 5 and D == 3 + 2 + 1 + 2
    assert (1, 0) not in set(zip(cu.tolist(), cj.tolist()))
    X = np.zeros((N, D))
    X[rows, cols] = vals
    n = list(zip(cu, cj)).index((0, 1))
    np.testing.assert_array_equal(X[n], [1, 0, 0, 0, 1, 1.5, 1, 1])


@pytest.mark.parametrize("variant", ["npfm", "ppfm"])
def test_simulate_shapes_and_reproducibility(variant):
    t1, y1 = simulate(jax.random.PRNGKey(4), PFMSizes(4, 3, 2, variant), HYPER)
    t2, y2 = simulate(jax.random.PRNGKey(4), PFMSizes(4, 3, 2, variant), HYPER)
    np.testing.assert_array_equal(y1, y2)
    assert y1.shape == (4, 3) and np.all(y1 >= 0) and np.all(y1 == np.round(y1))
    assert t1["V"].shape == (7, 2) and t1["w"].shape == (7,)
    assert ("r" in t1) == (variant == "npfm")


def test_bad_inputs():
    with pytest.raises(ValueError, match="hyper.b"):
        simulate(jax.random.PRNGKey(0), PFMSizes(2, 2, 2), HYPER._replace(b=0.0))
    with pytest.raises(ValueError, match="K"):
        simulate(jax.random.PRNGKey(0), PFMSizes(2, 2, 0), HYPER)
    with pytest.raises(ValueError, match="variant"):
        simulate(jax.random.PRNGKey(0), PFMSizes(2, 2, 1, "pfm"), HYPER)
    with pytest.raises(ValueError, match="user_features"):
        cells_design(2, 2, user_features=np.array([[1.0], [-1.0]]))
