"""Tests of the generic update-level checks: each must pass the right thing and fail the wrong one."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from validation.checks import updates


def _quadratic(p):
    # maximum at x = 2, y = -1
    return -((p["x"] - 2.0) ** 2).sum() - ((p["y"] + 1.0) ** 2).sum()


def test_stationarity_accepts_exact_and_rejects_wrong_update():
    before = {"x": jnp.array([0.0, 5.0]), "y": jnp.array([3.0])}
    exact = {"x": jnp.array([2.0, 2.0]), "y": before["y"]}
    wrong = {"x": jnp.array([2.1, 2.0]), "y": before["y"]}
    ok = updates.stationarity(_quadratic, before, exact, ["x"], block="x")
    bad = updates.stationarity(_quadratic, before, wrong, ["x"], block="x")
    assert ok.passed and ok.grad_after == 0.0 and ok.grad_before == pytest.approx(6.0)
    assert not bad.passed and bad.grad_after == pytest.approx(0.2)
    # only the named block is checked: y is not stationary but is not asked about
    assert updates.stationarity(_quadratic, before, exact, ["y"]).passed is False


def test_monotone():
    assert updates.monotone([1.0, 2.0, 2.0, 3.0]) == (True, 0.0)
    ok, worst = updates.monotone([-100.0, -50.0, -60.0])
    assert not ok and worst == pytest.approx(0.2)
    assert updates.monotone([-1e6, -1e6 - 1e-5])[0]  # a 1e-11 relative drop is rounding


def test_monotone_sweeps_runs_the_loop_and_catches_a_decrease():
    # coordinate ascent on -(x - 2)^2 by halving the distance: increasing, converging to 0
    obj = lambda x: -((x - 2.0) ** 2)  # noqa: E731
    ok, worst, trace = updates.monotone_sweeps(obj, lambda x: (x + 0.5 * (2.0 - x), obj(x + 0.5 * (2.0 - x))), 0.0, 4)
    assert ok and worst == 0.0 and np.allclose(trace, [-4.0, -1.0, -0.25, -0.0625, -0.015625])
    # overshooting past the maximum lowers the objective: caught, largest drop (-4 - -1) / 1 = 3
    bad, worst, trace = updates.monotone_sweeps(obj, lambda x: (x + 3.0 * (2.0 - x), obj(x + 3.0 * (2.0 - x))), 1.0, 2)
    assert not bad and worst == pytest.approx(3.0) and trace.shape == (3,)
    with pytest.raises(ValueError, match="sweeps"):
        updates.monotone_sweeps(obj, None, 0.0, -1)


def test_max_relative_difference():
    assert updates.max_relative_difference([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert updates.max_relative_difference([1.1, 2.0], [1.0, 2.0]) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="shapes"):
        updates.max_relative_difference([1.0], [1.0, 2.0])


def test_conditional_distance_separates_exact_from_wrong_gamma():
    # Gamma(2, 3) prior times Poisson(4 | 2 x) likelihood: conditional Gamma(6, 5)
    grid = np.geomspace(1e-6, 40, 20001)
    log_unnorm = lambda x: stats.gamma.logpdf(x, 2.0, scale=1 / 3) + stats.poisson.logpmf(4, 2 * x)  # noqa: E731
    exact = updates.conditional_distance(log_unnorm, lambda x: stats.gamma.logpdf(x, 6.0, scale=1 / 5), grid)
    wrong = updates.conditional_distance(log_unnorm, lambda x: stats.gamma.logpdf(x, 6.0, scale=1 / 5.5), grid)
    assert exact < 1e-6
    assert wrong > 0.05
