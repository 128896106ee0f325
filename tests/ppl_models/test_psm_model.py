"""PSM generative program (seed 000 sec. 2): the NumPyro log density is eq. (2) with the censored
identities summed out, the event-by-event simulator matches the story, bad input is refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats

from ppl_models import psm

jax.config.update("jax_enable_x64", True)

HYPER = psm.PSMHyper(alpha0=1.3, beta0=0.8, tau_u=1.5, tau_v=0.7, tau_b=1.2)


def test_log_density_is_eq2_with_censored_identities_summed_out():
    rng = np.random.default_rng(0)
    I, J, K, Dp = 4, 3, 2, 7.5
    rows, cols = np.array([0, 0, 1, 3, 3]), np.array([0, 2, 1, 0, 2])
    counts = np.array([2.0, 1.0, 4.0, 1.0, 3.0])
    p = {"pi": rng.dirichlet(np.ones(I)), "psi": rng.dirichlet(np.ones(J)), "u": rng.standard_normal((I, K)),
         "v": rng.standard_normal((J, K)), "b_user": rng.standard_normal(I), "b_item": rng.standard_normal(J)}
    args = (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(counts), I, J, K, Dp, HYPER)
    lp = jax.jit(lambda q: log_density(psm.model, args, {}, q)[0])({k: jnp.asarray(v) for k, v in p.items()})
    a = p["u"] @ p["v"].T + p["b_user"][:, None] + p["b_item"][None, :]
    sig = 1.0 / (1.0 + np.exp(-a))
    # brute force: observed events pi_i psi_j sigma(a_ij), c_ij times; D' censored events each with
    # probability sum_ij pi_i psi_j (1 - sigma(a_ij)); the priors
    want = np.sum(counts * np.log(p["pi"][rows] * p["psi"][cols] * sig[rows, cols]))
    want += Dp * np.log(np.sum(np.outer(p["pi"], p["psi"]) * (1.0 - sig)))
    want += stats.dirichlet.logpdf(p["pi"], np.full(I, HYPER.alpha0)) + stats.dirichlet.logpdf(p["psi"], np.full(J, HYPER.beta0))
    want += stats.norm.logpdf(p["u"], 0, HYPER.tau_u**-0.5).sum() + stats.norm.logpdf(p["v"], 0, HYPER.tau_v**-0.5).sum()
    want += stats.norm.logpdf(p["b_user"], 0, HYPER.tau_b**-0.5).sum() + stats.norm.logpdf(p["b_item"], 0, HYPER.tau_b**-0.5).sum()
    assert abs(float(lp) - want) < 1e-10 * abs(want)  # same sum in another order (float64 rounding)


def test_simulate_runs_the_stream_and_is_seeded():
    sizes = psm.PSMSizes(6, 5, 2, 2000)
    params, ev = psm.simulate(jax.random.PRNGKey(1), sizes, HYPER)
    _, ev2 = psm.simulate(jax.random.PRNGKey(1), sizes, HYPER)
    assert np.array_equal(ev["rows"], ev2["rows"]) and ev["n_censored"] == ev2["n_censored"]
    assert ev["rows"].shape == (2000,) and ev["n_draws"] == 2000 + ev["n_censored"]
    # kept fraction D / (D + D') against p_acc = sum_ij pi_i psi_j sigma(a_ij); the stopping rule makes
    # D + D' negative binomial, the kept fraction's sd ~ sqrt(p (1 - p) / n): 4 sd (false alarm 6e-5)
    a = params["u"] @ params["v"].T + params["b_user"][:, None] + params["b_item"][None, :]
    p_acc = float(jnp.sum(jnp.outer(params["pi"], params["psi"]) * jax.nn.sigmoid(a)))
    n = ev["n_draws"]
    assert abs(2000 / n - p_acc) < 4 * np.sqrt(p_acc * (1 - p_acc) / n)
    # kept events: pair frequencies against pi_i psi_j sigma(a_ij) / p_acc (chi-square, 30 cells)
    counts = np.zeros((6, 5))
    np.add.at(counts, (np.asarray(ev["rows"]), np.asarray(ev["cols"])), 1)
    expected = 2000 * np.asarray(jnp.outer(params["pi"], params["psi"]) * jax.nn.sigmoid(a)) / p_acc
    keep = expected > 5
    chi2 = np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep])
    assert stats.chi2.sf(chi2, keep.sum() - 1) > 1e-4, chi2  # false alarm 1e-4 (cells dropped: conservative)


def test_aggregate_groups_events():
    r, c, n = psm.aggregate([1, 0, 1, 1], [2, 0, 2, 0], 2, 3)
    assert r.tolist() == [0, 1, 1] and c.tolist() == [0, 0, 2] and n.tolist() == [1.0, 1.0, 2.0]


@pytest.mark.parametrize("sizes", [(0, 3, 2, 10), (3, 3, 2, 0), (3, 3, 1.5, 10), (3, -1, 2, 10)])
def test_bad_sizes(sizes):
    with pytest.raises(ValueError, match="sizes"):
        psm.simulate(jax.random.PRNGKey(0), sizes)


@pytest.mark.parametrize("field", psm.PSMHyper._fields)
def test_bad_hyper(field):
    with pytest.raises(ValueError, match=field):
        psm.simulate(jax.random.PRNGKey(0), (3, 3, 2, 10), psm.PSMHyper()._replace(**{field: -1.0}))
