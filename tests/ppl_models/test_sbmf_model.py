"""The SBMF PyMC program (thesis ch. 3, eqs. 3.1-3.13): simulation, log joint, input checks."""

import numpy as np
import pytest

from ppl_models import sbmf


def test_simulate_draws_distinct_cells_covering_every_row_and_column():
    truth, r, c, v = sbmf.simulate(0, 7, 5, 3, n_obs=20)
    assert r.shape == c.shape == v.shape == (20,)
    assert len(set(zip(r.tolist(), c.tolist()))) == 20
    assert set(r.tolist()) == set(range(7)) and set(c.tolist()) == set(range(5))
    assert truth["U"].shape == (7, 3) and truth["V"].shape == (5, 3) and truth["sigma_u"].shape == (3,)
    assert np.all(np.isfinite(v))
    again = sbmf.simulate(0, 7, 5, 3, n_obs=20)
    np.testing.assert_array_equal(again[3], v)  # a seed fixes the result


def test_simulated_ratings_follow_the_likelihood():
    # with the truth known, standardized residuals are N(0, 1): mean within 4 / sqrt(N) of 0
    truth, r, c, v = sbmf.simulate(1, 40, 30, 2, n_obs=1000)
    z = (v - sbmf.predicted_mean(truth, r, c)) * np.sqrt(truth["tau"])
    assert abs(z.mean()) < 4 / np.sqrt(z.size)
    assert abs(z.var() - 1) < 4 * np.sqrt(2 / z.size)


def test_log_joint_equals_the_pymc_programs_logp():
    truth, r, c, v = sbmf.simulate(2, 5, 4, 2, n_obs=12)
    m = sbmf.model(r, c, v, 5, 4, 2)
    logp = m.compile_logp(jacobian=False)
    point = {}
    for rv in m.free_RVs:
        name = m.rvs_to_values[rv].name
        point[name] = np.log(truth[rv.name]) if name.endswith("_log__") else truth[rv.name]
    assert np.isclose(logp(point), sbmf.log_joint(truth, r, c, v), rtol=1e-12, atol=1e-9)


def test_input_errors_name_the_field():
    _, r, c, v = sbmf.simulate(0, 4, 3, 1, n_obs=6)
    with pytest.raises(ValueError, match="K"):
        sbmf.model(r, c, v, 4, 3, 0)
    with pytest.raises(ValueError, match="sigma_g"):
        sbmf.model(r, c, v, 4, 3, 1, sbmf.SBMFHyper(sigma_g=0.0))
    with pytest.raises(ValueError, match="rows"):
        sbmf.model(r + 10, c, v, 4, 3, 1)
    with pytest.raises(ValueError, match="values"):
        sbmf.model(r, c, np.where(np.arange(v.size) == 0, np.nan, v), 4, 3, 1)
    with pytest.raises(ValueError, match="n_obs"):
        sbmf.simulate(0, 2, 2, 1, n_obs=5)
    with pytest.raises(ValueError, match="beta0"):
        sbmf.simulate(0, 2, 2, 1, sbmf.SBMFHyper(beta0=-1.0))
