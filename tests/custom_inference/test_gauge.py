"""The gauge random walk (custom_inference.gauge) is a valid Metropolis group move.

Toy models: (1) x > 0 with pi = Gamma(shape 3, rate 2) and the action x -> c x (A = (c,)),
whose Jacobian is c: the target is log pi(c x) + log c. (2) x in R^2 with pi = N(0, S) and the
action x -> A^T x of the whole GL(2) (scalings and shears), Jacobian |det A|. If x ~ pi, the
moved x after the walk must again be ~ pi (invariance); dropping the Jacobian must break it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from custom_inference.gauge import gauge_walk

SHAPE, RATE = 3.0, 2.0
N = 20000


def _moved(with_jacobian: bool, n_rounds: int = 5):
    with jax.enable_x64(True):
        x = jax.random.gamma(jax.random.PRNGKey(0), SHAPE, (N,), dtype=jnp.float64) / RATE

        def one(key, xi):
            def log_density(h, A):
                lp = (SHAPE - 1.0) * jnp.log(h) - RATE * h
                return lp + (jnp.log(A[0, 0]) if with_jacobian else 0.0)

            A, h, acc = gauge_walk(key, xi, log_density, lambda h, k, l, z: h * jnp.exp(z), 1, n_rounds,
                                   dtype=jnp.float64)
            return h, acc

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


COV = np.array([[1.0, 0.6], [0.6, 2.0]])


def _moved_linear(with_jacobian: bool, n_rounds: int = 5):
    prec = jnp.asarray(np.linalg.inv(COV))
    with jax.enable_x64(True):
        x = jax.random.multivariate_normal(jax.random.PRNGKey(2), jnp.zeros(2), jnp.asarray(COV), (N,))

        def act(h, k, l, z):  # h -> G^T h for the generator G of (k, l, z)
            return jnp.where(k == l, h.at[k].multiply(jnp.exp(z)), h.at[l].add(z * h[k]))

        def one(key, xi):
            def log_density(h, A):
                return -0.5 * h @ prec @ h + (jnp.linalg.slogdet(A)[1] if with_jacobian else 0.0)

            A, h, acc = gauge_walk(key, xi, log_density, act, 2, n_rounds, shears=True, dtype=jnp.float64)
            return h, A.T @ xi, acc

        h, ax, acc = jax.vmap(one)(jax.random.split(jax.random.PRNGKey(3), N), x)
        return np.asarray(x), np.asarray(h), np.asarray(ax), np.asarray(acc)


def test_linear_walk_leaves_a_gaussian_invariant():
    x, y, ax, acc = _moved_linear(True)
    np.testing.assert_allclose(y, ax, rtol=1e-9, atol=1e-12)  # the tracked h is A^T x
    assert 0.2 < acc.mean() < 0.95
    # the moved draws keep the covariance: each entry within 4 standard errors
    # (se of a sample covariance entry ~ sqrt((S_ii S_jj + S_ij^2) / N))
    cov = np.cov(y.T)
    se = np.sqrt((np.outer(np.diag(COV), np.diag(COV)) + COV ** 2) / N)
    assert np.all(np.abs(cov - COV) < 4 * se), (cov, COV)
    # and the moves are not trivial: draws moved by more than 1 % of their norm
    assert np.mean(np.linalg.norm(y - x, axis=1) > 0.01 * np.linalg.norm(x, axis=1)) > 0.5


def test_linear_walk_without_jacobian_is_detected():
    _, y, _, _ = _moved_linear(False, n_rounds=20)
    cov = np.cov(y.T)
    se = np.sqrt((np.outer(np.diag(COV), np.diag(COV)) + COV ** 2) / N)
    assert np.any(np.abs(cov - COV) > 10 * se), (cov, COV)


def test_zero_rounds_is_identity():
    A, h, acc = gauge_walk(jax.random.PRNGKey(0), jnp.ones(3), lambda h, A: -jnp.sum(h ** 2), lambda h, k, l, z: h,
                           3, 0, dtype=jnp.float32)
    assert np.all(np.asarray(A) == np.eye(3)) and float(acc) == 0.0
