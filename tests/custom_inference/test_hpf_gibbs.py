"""Tests of the HPF Gibbs sampler: unit expansion, allocation, driver, result object."""

import jax
import numpy as np
import pytest

from custom_inference import hpf_gibbs as gibbs
from custom_inference.data import CountUnits, Observations
from ppl_models.hpf import HPFHyper, simulate
from validation.hpf_gibbs import allocation_check

HYPER = HPFHyper(a=0.5, a_prime=2.0, b_prime=1.0, c=0.5, c_prime=2.0, d_prime=1.0)


def test_count_units_expand_each_count():
    obs = Observations.from_dense(np.array([[2.0, 0.0], [0.0, 3.0]]))
    units = CountUnits.from_observations(obs, min_units=1)
    assert units.n_units == 5 and units.rows.shape == (8,)  # padded to a power of two
    np.testing.assert_array_equal(units.rows[:5], [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(units.cols[:5], [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(units.weight, [1, 1, 1, 1, 1, 0, 0, 0])
    assert CountUnits.from_observations(obs).rows.shape == (4096,)  # at least min_units
    with pytest.raises(ValueError, match="max_units"):
        CountUnits.from_observations(obs, max_units=4)


def test_allocation_has_multinomial_frequencies():
    p_value, observed, expected = allocation_check(seed=0, n_draws=20000)
    assert observed.sum() == 20000
    assert p_value > 1e-3  # chi-square, 3 degrees of freedom; false alarm 0.1%


def test_sample_result_shapes_seed_and_lp():
    _, y = simulate(jax.random.PRNGKey(0), 9, 7, 2, HYPER)
    obs = Observations.from_dense(np.asarray(y))
    a = gibbs.sample(4, obs, 2, HYPER, num_chains=3, num_warmup=20, num_samples=15, thin=2, progress=False)
    b = gibbs.sample(4, obs, 2, HYPER, num_chains=3, num_warmup=20, num_samples=15, thin=2, progress=False)
    assert a.posterior.theta.dims == ("chain", "draw", "user", "component")
    assert a.posterior.theta.shape == (3, 15, 9, 2) and a.posterior.eta.shape == (3, 15, 7)
    np.testing.assert_array_equal(a.posterior.beta.values, b.posterior.beta.values)
    # chains differ from each other
    assert not np.allclose(a.posterior.xi.values[0], a.posterior.xi.values[1])
    # lp is the log joint of each kept draw
    from jax import numpy as jnp

    units = jax.tree_util.tree_map(jnp.asarray, CountUnits.from_observations(obs))
    c, d = 1, 7
    state = gibbs.HPFGibbsState(*(jnp.asarray(a.posterior[n].values[c, d]) for n in ("theta", "xi", "beta", "eta")))
    np.testing.assert_allclose(a.sample_stats.lp.values[c, d], float(gibbs.log_joint(state, units, HYPER)), rtol=1e-12)


def test_step_reports_log_joint_of_the_new_state():
    from jax import numpy as jnp

    _, y = simulate(jax.random.PRNGKey(1), 6, 5, 2, HYPER)
    units = jax.tree_util.tree_map(jnp.asarray, CountUnits.from_observations(Observations.from_dense(np.asarray(y))))
    state = gibbs.init(jax.random.PRNGKey(0), units, 2, HYPER)
    new, info = gibbs.step(jax.random.PRNGKey(1), state, units, HYPER)
    np.testing.assert_allclose(info.log_joint, gibbs.log_joint(new, units, HYPER), rtol=1e-12)
    assert np.all(np.asarray(new.theta) > 0) and np.all(np.asarray(new.eta) > 0)


def test_bad_arguments():
    obs = Observations.from_dense(np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="num_chains"):
        gibbs.sample(0, obs, 2, HYPER, num_chains=0, progress=False)
    with pytest.raises(ValueError, match="keep"):
        gibbs.sample(0, obs, 2, HYPER, keep=("z",), progress=False)
    with pytest.raises(ValueError, match="n_components"):
        gibbs.sample(0, obs, 0, HYPER, progress=False)
