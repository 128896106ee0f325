"""Tests of the ArviZ gates and the posterior comparisons, on draws with known properties."""

import numpy as np
import pytest

from validation import crosscheck, gates


def _iid(seed, shift=0.0, scale=1.0, chains=4, draws=1000, q=5):
    rng = np.random.default_rng(seed)
    return np.exp(shift + scale * 0.3 * rng.standard_normal((chains, draws, q)) + np.linspace(0, 2, q))


def test_gates_pass_iid_chains_and_fail_stuck_ones():
    good = gates.nuts_gates({"rate": _iid(0)}, divergences=0, bfmi=np.array([1.0] * 4))
    assert good.passed, good.failures
    stuck = _iid(1)
    stuck[0] += 1.0  # one chain elsewhere: R-hat far above 1.01
    bad = gates.nuts_gates({"rate": stuck}, divergences=0, bfmi=np.array([1.0] * 4))
    assert not bad.passed and any("R-hat" in f for f in bad.failures)
    few = gates.nuts_gates({"rate": _iid(2, chains=2)}, divergences=3, bfmi=np.array([0.2, 1.0]))
    text = " ".join(few.failures)
    assert "2 chains" in text and "divergent" in text and "E-BFMI" in text


def test_gates_fail_on_low_ess():
    rng = np.random.default_rng(3)
    # AR(1) with rho = 0.99: ESS about 4000 * 0.01 / 1.99 ~ 20
    x = np.zeros((4, 1000, 1))
    for t in range(1, 1000):
        x[:, t] = 0.99 * x[:, t - 1] + rng.standard_normal((4, 1))
    res = gates.nuts_gates({"q": np.exp(x)}, divergences=0, bfmi=np.ones(4))
    assert not res.passed and any("ESS" in f for f in res.failures)


def test_compare_vi_pass_fail_inconclusive():
    nuts = {"rate": _iid(0, q=50)}
    g = gates.nuts_gates(nuts, divergences=0, bfmi=np.ones(4))
    same = crosscheck.compare_vi(nuts, {"rate": _iid(9, q=50, chains=1, draws=4000, scale=0.7)}, g)
    assert same.status == "pass", same.reasons
    assert same.table.median_sd_ratio[0] == pytest.approx(0.7, rel=0.05)
    biased = crosscheck.compare_vi(nuts, {"rate": _iid(9, q=50, chains=1, draws=4000, shift=0.3)}, g)
    assert biased.status == "fail"  # a shift of one posterior sd
    failed_gates = gates.nuts_gates(nuts, divergences=5, bfmi=np.ones(4))
    assert crosscheck.compare_vi(nuts, nuts, failed_gates).status == "inconclusive"


def test_compare_exact_detects_a_shift_of_a_few_mcse():
    a = {"q": _iid(0, q=40)}
    g = gates.nuts_gates(a, divergences=0, bfmi=np.ones(4))
    same = crosscheck.compare_exact(a, {"q": _iid(1, q=40)}, g)
    assert same.status == "pass", same.reasons
    # iid draws: MCSE of the mean ~ 0.3 * m / sqrt(4000); a 10% shift is ~ 20 MCSE
    shifted = crosscheck.compare_exact(a, {"q": _iid(1, q=40, shift=0.1)}, g)
    assert shifted.status == "fail"
