"""Robbins-Monro step sizes (`custom_inference.schedules`): values, the conventions they replace, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference.schedules import check_robbins_monro, robbins_monro, robbins_monro_array


def test_values():
    assert robbins_monro(0) == 1.0  # tau0 = 1: the first step jumps to the target
    assert robbins_monro(3, 1.0, 0.5) == 0.5
    assert robbins_monro(0, 4.0, 1.0) == 0.25
    assert robbins_monro(10, 2.0, 0.0) == 1.0  # kappa = 0: constant step
    assert robbins_monro(6, 2.0, 1.0 / 3.0) == pytest.approx(0.5, rel=1e-15)
    assert isinstance(robbins_monro(np.int64(2), np.float32(1.0), 0.7), float)


def test_same_bits_as_the_formulas_it_replaces():
    """rg: (t + tau0) ** -kappa; vbfm OVBFM (004 eqs. 4.27-4.28): (1.0 + float(t)) ** -float(lam)."""
    for t in range(200):
        for kappa in (0.0, 0.5, 0.51, 0.6, 0.7, 1.0):
            assert robbins_monro(t, 1.0, kappa) == (1.0 + float(t)) ** (-float(kappa))
            assert robbins_monro(t, 2.5, kappa) == (t + 2.5) ** (-kappa)


def test_decreasing_and_robbins_monro_sums():
    t = np.arange(20000)
    eps = np.array([robbins_monro(int(i), 1.0, 0.7) for i in t])
    assert np.all(np.diff(eps) < 0) and eps[0] == 1.0
    # partial sums of (t + 1)^-0.7 grow like t^0.3 / 0.3 (divergent); of the squares converge (zeta(1.4) = 3.1055)
    assert eps.sum() > 0.9 * (20000**0.3 - 1) / 0.3
    assert (eps**2).sum() < 3.106


def test_array_form_matches_and_traces():
    counts = jnp.arange(6.0)
    got = jax.jit(robbins_monro_array)(counts, 1.0, 0.7)
    np.testing.assert_allclose(got, [robbins_monro(int(c), 1.0, 0.7) for c in counts], rtol=1e-6)
    assert got.shape == (6,)


@pytest.mark.parametrize("t, tau0, kappa, field", [(-1, 1.0, 0.7, "t"), (0, 0.0, 0.7, "tau0"), (0, -1.0, 0.7, "tau0"),
                                                    (0, 1.0, -0.1, "kappa"), (np.nan, 1.0, 0.7, "t"),
                                                    (0, np.inf, 0.7, "tau0"), (0, 1.0, True, "kappa"),
                                                    ("1", 1.0, 0.7, "t must be a real number"), (0, None, 0.7, "tau0")])
def test_argument_errors(t, tau0, kappa, field):
    with pytest.raises(ValueError, match=field):
        robbins_monro(t, tau0, kappa)


def test_check_robbins_monro():
    check_robbins_monro(1.0, 0.7)
    check_robbins_monro(0.5, 1.0)
    with pytest.raises(ValueError, match="tau0 must be > 0"):
        check_robbins_monro(0.0, 0.7)
    for kappa in (0.5, 1.01, 0.0, np.nan):
        with pytest.raises(ValueError, match=r"kappa must be in \(0.5, 1\]"):
            check_robbins_monro(1.0, kappa)
