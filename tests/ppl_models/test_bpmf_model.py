"""The BPMF NumPyro program: simulation, input checks, and its density against scipy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from scipy import stats

from ppl_models import bpmf as ppl

HYPER = ppl.BPMFHyper(alpha=2.0, mu0=0.3, beta0=1.5, nu0=4.0, W0=0.5)


def test_simulate_shapes_distinct_sorted_cells():
    truth, rows, cols, values = ppl.simulate(jax.random.PRNGKey(0), 7, 5, 3, HYPER, n_obs=20)
    assert truth["U"].shape == (7, 3) and truth["V"].shape == (5, 3)
    assert truth["Lambda_U"].shape == (3, 3) and truth["mu_V"].shape == (3,)
    flat = np.asarray(rows) * 5 + np.asarray(cols)
    assert values.shape == (20,) and np.unique(flat).size == 20 and np.all(np.diff(flat) > 0)
    assert np.all(np.linalg.eigvalsh(np.asarray(truth["Lambda_U"])) > 0)


@pytest.mark.parametrize(
    "kwargs, field",
    [({"n_obs": 0}, "n_obs"), ({"n_obs": 36}, "n_obs"), ({"hyper": ppl.BPMFHyper(nu0=1.5)}, "nu0"),
     ({"hyper": ppl.BPMFHyper(W0=-1.0)}, "W0"), ({"hyper": ppl.BPMFHyper(W0=np.ones((2, 2)))}, "W0"),
     ({"hyper": ppl.BPMFHyper(alpha=0.0)}, "alpha"), ({"hyper": ppl.BPMFHyper(mu0=np.zeros(2))}, "mu0")],
)
def test_bad_input_raises_naming_the_field(kwargs, field):
    args = {"n_obs": 10, "hyper": ppl.BPMFHyper(), **kwargs}
    with pytest.raises(ValueError, match=field):
        ppl.simulate(jax.random.PRNGKey(0), 7, 5, 3, args["hyper"], n_obs=args["n_obs"])


def test_log_density_equals_scipy_joint():
    # the sizes of test_simulate_shapes_distinct_sorted_cells (its eagerly compiled operations are reused)
    k = 3
    truth, rows, cols, values = ppl.simulate(jax.random.PRNGKey(1), 7, 5, k, HYPER, n_obs=20)
    t = {n: np.asarray(v, np.float64) for n, v in truth.items()}
    lp = float(log_density(ppl.model, (rows, cols, values, 7, 5, k, HYPER), {}, truth)[0])
    w0 = HYPER.W0 * np.eye(k)
    mu0 = np.full(k, HYPER.mu0)
    ref = stats.norm.logpdf(np.asarray(values), np.sum(t["U"][rows] * t["V"][cols], 1), HYPER.alpha ** -0.5).sum()
    for s in ("U", "V"):
        lam = t[f"Lambda_{s}"]
        ref += stats.wishart(df=HYPER.nu0, scale=w0).logpdf(lam)
        ref += stats.multivariate_normal(mu0, np.linalg.inv(HYPER.beta0 * lam)).logpdf(t[f"mu_{s}"])
        ref += stats.multivariate_normal(t[f"mu_{s}"], np.linalg.inv(lam)).logpdf(t[s]).sum()
    assert abs(lp - ref) <= 1e-9 * abs(ref)  # float64 rounding of sums of ~40 terms


def test_prior_moments_of_the_hyperparameters():
    # E[Lambda] = nu0 W0 and E[mu] = mu0 under the program's prior; z-tests with n = 4000
    n, k = 4000, 2
    rows = jnp.array([0, 1]); cols = jnp.array([0, 1])
    draws = Predictive(ppl.model, num_samples=n)(jax.random.PRNGKey(2), rows, cols, None, 3, 2, k, HYPER)
    lam = np.asarray(draws["Lambda_U"])
    w = HYPER.W0 * np.eye(k)
    sd = np.sqrt(HYPER.nu0 * (w ** 2 + np.outer(np.diag(w), np.diag(w))) / n)  # Wishart element variance
    z = (lam.mean(0) - HYPER.nu0 * w) / sd
    assert np.max(np.abs(z)) < 4.0  # Bonferroni over 3 distinct entries at ~1e-4
    mu = np.asarray(draws["mu_U"])
    assert np.all(np.abs(mu.mean(0) - HYPER.mu0) < 4.0 * mu.std(0) / np.sqrt(n))
