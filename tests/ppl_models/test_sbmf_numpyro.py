"""The NumPyro twin of the SBMF program (`ppl_models.sbmf.numpyro_model`) equals the PyMC program.

The bridge (`validation.checks.bridge`) runs SBMF's Gibbs blocks beside NUTS on the NumPyro twin, so the
twin must define the same density: equal log densities (constants included, no Jacobians) at random
points of the parameter space, not only at prior draws, under two hyperparameter sets.
"""

import jax
import numpy as np
import pytest
from numpyro.infer.util import log_density

from ppl_models import sbmf


def _random_point(rng, n_rows, n_cols, K):
    """A random point: precisions log-normal, means and factors normal (not prior draws)."""
    pos = lambda *s: np.exp(rng.normal(0.0, 1.0, size=s))  # noqa: E731
    return {"mu": rng.normal(0, 3), "sigma_alpha": pos(), "mu_alpha": rng.normal(), "alpha": rng.normal(size=n_rows),
            "sigma_beta": pos(), "mu_beta": rng.normal(), "beta": rng.normal(size=n_cols), "sigma_u": pos(K),
            "mu_u": rng.normal(size=K), "U": rng.normal(size=(n_rows, K)), "sigma_v": pos(K),
            "mu_v": rng.normal(size=K), "V": rng.normal(size=(n_cols, K)), "tau": pos()}


# each case compiles a PyMC log density (5-10 s of CPU): the thesis's hyperparameters by default, a second
# set with every field distinct (a swapped symbol shows) under -m slow
@pytest.mark.parametrize("hyper", [sbmf.SBMFHyper(), pytest.param(
    sbmf.SBMFHyper(mu_g=3.0, sigma_g=0.5, a0=2.0, b0=0.5, mu0=0.3, nu0=2.0, alpha0=1.5, beta0=3.0), marks=pytest.mark.slow)])
def test_numpyro_twin_log_density_equals_the_pymc_programs(hyper):
    n_rows, n_cols, K = 5, 4, 2
    _, r, c, v = sbmf.simulate(3, n_rows, n_cols, K, hyper, n_obs=12)
    m = sbmf.model(r, c, v, n_rows, n_cols, K, hyper)
    logp = m.compile_logp(jacobian=False)
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for _ in range(5):
            point = _random_point(rng, n_rows, n_cols, K)
            pymc_point = {}
            for rv in m.free_RVs:
                name = m.rvs_to_values[rv].name
                pymc_point[name] = np.log(point[rv.name]) if name.endswith("_log__") else point[rv.name]
            twin = float(log_density(sbmf.numpyro_model, (r, c, v, n_rows, n_cols, K, hyper), {}, point)[0])
            # PyMC keeps Python-float hyperparameters that float32 represents exactly (1.5, 3.0) as float32
            # constants, so terms such as gammaln(alpha0) carry float32 rounding: agreement to ~1e-8
            # relative (measured 4e-9); a wrong or missing term is O(1)
            assert np.isclose(twin, float(logp(pymc_point)), rtol=1e-7, atol=0), (twin, float(logp(pymc_point)))
            # against the float64 NumPy log joint (eq. 3.13, itself checked against PyMC): rounding only
            assert np.isclose(twin, sbmf.log_joint(point, r, c, v, hyper), rtol=1e-12, atol=1e-9)


@pytest.mark.slow
def test_numpyro_twin_has_the_pymc_programs_sites():
    _, r, c, v = sbmf.simulate(0, 4, 3, 2, n_obs=6)
    m = sbmf.model(r, c, v, 4, 3, 2)
    import numpyro

    with jax.enable_x64(True):
        tr = numpyro.handlers.trace(numpyro.handlers.seed(sbmf.numpyro_model, 0)).get_trace(r, c, v, 4, 3, 2)
    latent = {n: s["value"].shape for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}
    assert latent == {rv.name: tuple(m.initial_point()[m.rvs_to_values[rv].name].shape) for rv in m.free_RVs}
