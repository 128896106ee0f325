"""Tests of the SIBM NumPyro program (seed 002 sec. 2) and its prior predictive."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpyro.infer.util import log_density  # noqa: E402
from scipy import stats  # noqa: E402

from ppl_models.sibm import SEC4_SYNTHETIC, SIBMHyper, augmented_factors, logits, model, simulate  # noqa: E402

HYPER = SIBMHyper(u_bar0=0.1, u_tilde0=0.8, v_bar0=-0.2, v_tilde0=1.3, z_bar0=-0.5, z_tilde0=2.0)


def test_log_density_matches_scipy_hand_written_joint():
    """Eq. (1) with Gaussian priors (variances) and biases from the columns of ones."""
    rng = np.random.default_rng(0)
    I, J, D = 5, 4, 2
    p = {"U": rng.normal(size=(I, D)), "V": rng.normal(size=(J, D)), "a": rng.normal(size=I),
         "b": rng.normal(size=J), "z": np.array(0.3)}
    X = rng.integers(0, 2, (I, J)).astype(float)
    h = HYPER
    eta = p["U"] @ p["V"].T + p["a"][:, None] + p["b"][None, :] + p["z"]
    expected = (stats.norm.logpdf(p["U"], h.u_bar0, np.sqrt(h.u_tilde0)).sum()
                + stats.norm.logpdf(p["a"], h.u_bar0, np.sqrt(h.u_tilde0)).sum()
                + stats.norm.logpdf(p["V"], h.v_bar0, np.sqrt(h.v_tilde0)).sum()
                + stats.norm.logpdf(p["b"], h.v_bar0, np.sqrt(h.v_tilde0)).sum()
                + stats.norm.logpdf(p["z"], h.z_bar0, np.sqrt(h.z_tilde0))
                + stats.bernoulli.logpmf(X, 1 / (1 + np.exp(-eta))).sum())
    got, _ = log_density(model, (jnp.asarray(X), h, D), {}, {k: jnp.asarray(v) for k, v in p.items()})
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)


def test_bias_layout_is_columns_of_ones():
    """U_aug = [U, a, 1], V_aug = [V, 1, b]: u_i . v_j = U V^T + a_i + b_j (text after eq. 1)."""
    rng = np.random.default_rng(2)
    U, V, a, b = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=4), rng.normal(size=5)
    Ua, Va = augmented_factors(jnp.asarray(U), jnp.asarray(V), jnp.asarray(a), jnp.asarray(b))
    assert Ua.shape == (4, 5) and Va.shape == (5, 5)
    np.testing.assert_array_equal(np.asarray(Ua[:, -1]), 1.0)
    np.testing.assert_array_equal(np.asarray(Va[:, -2]), 1.0)
    np.testing.assert_allclose(np.asarray(logits(U, V, 0.7, a, b)), U @ V.T + a[:, None] + b[None, :] + 0.7, rtol=1e-12)


def test_simulate_shapes_reproducibility_and_errors():
    # the shapes of validation.models.sibm.small_problem (8 x 6, D = 2): eager ops compiled once per session
    p1, X1 = simulate(jax.random.PRNGKey(3), 8, 6, 2, HYPER, z=-1.0)
    p2, X2 = simulate(jax.random.PRNGKey(3), 8, 6, 2, HYPER, z=-1.0)
    assert p1["U"].shape == (8, 2) and p1["V"].shape == (6, 2) and p1["a"].shape == (8,) and p1["b"].shape == (6,)
    assert X1.shape == (8, 6) and X1.dtype == jnp.int32 and float(p1["z"]) == -1.0
    np.testing.assert_array_equal(X1, X2)
    assert set(np.unique(np.asarray(X1))) <= {0, 1}
    with pytest.raises(ValueError, match="D must be"):
        simulate(jax.random.PRNGKey(0), 5, 4, 0, HYPER)
    with pytest.raises(ValueError, match="I must be"):
        simulate(jax.random.PRNGKey(0), 0, 4, 2, HYPER)
    with pytest.raises(ValueError, match="u_tilde0"):
        simulate(jax.random.PRNGKey(0), 5, 4, 2, HYPER._replace(u_tilde0=-1.0))
    with pytest.raises(ValueError, match="z must be finite"):
        simulate(jax.random.PRNGKey(0), 5, 4, 2, HYPER, z=float("nan"))
    with pytest.raises(ValueError, match="shape"):
        model(None, HYPER, 2)


@pytest.mark.slow
def test_log_density_without_biases_has_no_bias_sites():
    rng = np.random.default_rng(1)
    h = HYPER._replace(biases=False)
    p = {"U": rng.normal(size=(3, 2)), "V": rng.normal(size=(4, 2)), "z": np.array(-0.4)}
    X = rng.integers(0, 2, (3, 4)).astype(float)
    eta = p["U"] @ p["V"].T + p["z"]
    expected = (stats.norm.logpdf(p["U"], h.u_bar0, np.sqrt(h.u_tilde0)).sum()
                + stats.norm.logpdf(p["V"], h.v_bar0, np.sqrt(h.v_tilde0)).sum()
                + stats.norm.logpdf(p["z"], h.z_bar0, np.sqrt(h.z_tilde0))
                + stats.bernoulli.logpmf(X, 1 / (1 + np.exp(-eta))).sum())
    got, _ = log_density(model, (jnp.asarray(X), h, 2), {}, {k: jnp.asarray(v) for k, v in p.items()})
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)


def test_sec4_synthetic_setting_fixes_z_and_has_no_biases():
    params, X = simulate(jax.random.PRNGKey(0), 8, 6, **SEC4_SYNTHETIC)
    assert set(params) == {"U", "V", "z"} and float(params["z"]) == -7.5
    assert params["U"].shape == (8, 10) and params["V"].shape == (6, 10) and X.shape == (8, 6)


@pytest.mark.slow
def test_sec4_synthetic_setting_has_about_98_percent_zeros():
    """Seed 002 sec. 4: D = 10, N(0, 1) factors, z = -7.5, "about 98% sparsity".

    The prior-predictive fraction of ones p* = E[sigma(u . v - 7.5)] (u, v independent N(0, I_10)) is
    computed by plain Monte Carlo with 10^6 draws (standard error < 2e-4). The fraction in one simulated
    matrix varies mostly through the shared factors, so its spread is measured over R = 8 matrices:
    their mean must be within 4 standard errors (sd / sqrt(R)) plus 4 MC errors of p*.
    """
    rng = np.random.default_rng(0)
    n = 1_000_000
    dots = np.einsum("nd,nd->n", rng.standard_normal((n, 10)), rng.standard_normal((n, 10)))
    vals = 1 / (1 + np.exp(-(dots - 7.5)))
    p_star, p_se = vals.mean(), vals.std() / np.sqrt(n)
    assert 0.97 < 1 - p_star < 0.99  # "about 98%"
    fracs = []
    sim = jax.jit(lambda key: simulate(key, 50, 40, **SEC4_SYNTHETIC))
    for r in range(8):
        params, X = sim(jax.random.PRNGKey(r))
        assert set(params) == {"U", "V", "z"} and float(params["z"]) == -7.5
        fracs.append(float(np.mean(np.asarray(X))))
    fracs = np.asarray(fracs)
    se = fracs.std(ddof=1) / np.sqrt(fracs.size)
    assert abs(fracs.mean() - p_star) <= 4 * se + 4 * p_se
