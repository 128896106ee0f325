"""Tests of the HPF Gibbs sampler: unit expansion, allocation, driver, result object."""

import jax
import numpy as np
import pytest

from custom_inference import hpf_gibbs as gibbs
from custom_inference.data import CountUnits, Observations
from ppl_models.hpf import HPFHyper, simulate
from validation.models.hpf_gibbs import allocation_check

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
    # an infinite count (a container built without the Observations constructors' checks) is refused
    # by name, before numpy's expansion would fail or cast it to int64
    from types import SimpleNamespace

    bad = SimpleNamespace(rows=np.array([0, 1]), cols=np.array([0, 1]), values=np.array([2.0, np.inf]))
    with pytest.raises(ValueError, match="finite non-negative integer counts"):
        CountUnits.from_observations(bad, min_units=1)


def test_count_units_built_in_chunks_and_capped_by_memory(monkeypatch):
    # the expansion runs over the entries in chunks into preallocated int32 arrays (issue 14); any
    # chunk size gives the same units; without max_units the cap is the memory available
    rng = np.random.default_rng(0)
    y = rng.geometric(0.5, size=(30, 20)) * (rng.random((30, 20)) < 0.4)
    obs = Observations.from_dense(y.astype(np.float32))
    ref = CountUnits.from_observations(obs, min_units=1, chunk=len(obs.values))
    assert ref.n_units == int(y.sum()) and ref.rows.dtype == np.int32 and ref.cols.dtype == np.int32
    np.testing.assert_array_equal(ref.rows[:ref.n_units], np.repeat(obs.rows, obs.values.astype(int)))
    for chunk in (1, 7):
        units = CountUnits.from_observations(obs, min_units=1, chunk=chunk)
        for a, b in zip((units.rows, units.cols, units.weight), (ref.rows, ref.cols, ref.weight)):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype
    monkeypatch.setattr("custom_inference.data._mem_available_bytes", lambda: 1000)
    with pytest.raises(ValueError, match="available"):
        CountUnits.from_observations(obs)
    assert CountUnits.from_observations(obs, max_units=10**6).n_units == ref.n_units  # explicit cap: no check


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

    # the data of test_sample_result_shapes_seed_and_lp (its compiled log joint and simulation are reused)
    _, y = simulate(jax.random.PRNGKey(0), 9, 7, 2, HYPER)
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


def test_chunked_allocation_and_log_joint_equal_the_unchunked_ones():
    """`allocate` and `log_joint` visit the units in chunks (no (T, K) array). The allocation must
    not depend on the chunk size at all (one uniform per unit drawn up front; integer counts sum
    exactly in any order) and must equal the former one-pass formula, written out here; the log
    joint may differ only by float64 summation order (relative 1e-12: ~50 terms of O(1) each)."""
    from jax import numpy as jnp

    with jax.enable_x64(True):
        _, y = simulate(jax.random.PRNGKey(2), 7, 6, 3, HYPER)
        units = jax.tree_util.tree_map(
            jnp.asarray, CountUnits.from_observations(Observations.from_dense(np.asarray(y)), min_units=1))
        n, k = units.rows.shape[0], 3
        assert n > 20  # several chunks below
        state = gibbs.init(jax.random.PRNGKey(0), units, k, HYPER)
        key = jax.random.PRNGKey(5)
        whole = gibbs.allocate(key, state, units, chunk=n)
        for chunk in (5, n + 3):
            part = gibbs.allocate(key, state, units, chunk=chunk)
            for a, b in zip(part, whole):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        # the former unchunked allocation: (T, K) rates, one inverse-CDF draw per unit
        rates = state.theta[units.rows] * state.beta[units.cols]
        cum = jnp.cumsum(rates, axis=1)
        u = jax.random.uniform(key, (n,), dtype=rates.dtype) * cum[:, -1]
        comp = np.minimum(np.sum(np.asarray(cum) <= np.asarray(u)[:, None], axis=1), k - 1)
        w = np.asarray(units.weight)
        ref_user, ref_item = np.zeros((units.n_rows, k)), np.zeros((units.n_cols, k))
        np.add.at(ref_user, (np.asarray(units.rows), comp), w)
        np.add.at(ref_item, (np.asarray(units.cols), comp), w)
        np.testing.assert_array_equal(np.asarray(whole[0]), ref_user)
        np.testing.assert_array_equal(np.asarray(whole[1]), ref_item)
        assert ref_user.sum() == units.n_units
        lj = float(gibbs.log_joint(state, units, HYPER, chunk=n))
        for chunk in (7,):
            assert float(gibbs.log_joint(state, units, HYPER, chunk=chunk)) == pytest.approx(lj, rel=1e-12)
