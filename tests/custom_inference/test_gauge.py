"""The scale-gauge random walk (custom_inference.gauge) is a valid Metropolis group move.

Toy model: x > 0 with pi = Gamma(shape 3, rate 2) and the group action x -> c x, c = e^s, whose
Jacobian is c. The move's target is log pi(e^s x) + s. If x ~ pi, x' = e^{s*} x after the
walk must again be ~ pi (invariance); dropping the Jacobian term must break it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from custom_inference.gauge import scale_walk

SHAPE, RATE = 3.0, 2.0
N = 20000


def _moved(with_jacobian: bool, n_rounds: int = 5):
    with jax.enable_x64(True):
        x = jax.random.gamma(jax.random.PRNGKey(0), SHAPE, (N,), dtype=jnp.float64) / RATE

        def one(key, xi):
            def log_density(s):
                y = jnp.exp(s[0]) * xi
                lp = (SHAPE - 1.0) * jnp.log(y) - RATE * y
                return lp + (s[0] if with_jacobian else 0.0)

            s, acc = scale_walk(key, log_density, 1, n_rounds, jnp.float64)
            return xi * jnp.exp(s[0]), acc

        y, acc = jax.vmap(one)(jax.random.split(jax.random.PRNGKey(1), N), x)
        return np.asarray(x), np.asarray(y), np.asarray(acc)


def test_walk_leaves_the_target_invariant():
    x, y, acc = _moved(True)
    # the move really moves: a mean acceptance of ~0.5 over the three proposal scales
    assert 0.2 < acc.mean() < 0.95
    assert np.mean(np.abs(np.log(y / x)) > 1e-3) > 0.5
    # KS test of the moved draws against the target; 20000 draws, false alarm 1e-3
    assert stats.kstest(y, stats.gamma(SHAPE, scale=1.0 / RATE).cdf).pvalue > 1e-3


def test_walk_without_jacobian_is_detected():
    # target pi(e^s x) without the +s: stationary law Gamma(SHAPE - 1, RATE), visibly different
    _, y, _ = _moved(False, n_rounds=20)
    assert stats.kstest(y, stats.gamma(SHAPE, scale=1.0 / RATE).cdf).pvalue < 1e-6


def test_zero_rounds_is_identity():
    s, acc = scale_walk(jax.random.PRNGKey(0), lambda s: -jnp.sum(s ** 2), 3, 0, jnp.float32)
    assert np.all(np.asarray(s) == 0) and float(acc) == 0.0
