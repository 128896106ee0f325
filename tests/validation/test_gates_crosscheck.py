"""Tests of the ArviZ gates and the posterior comparisons, on draws with known properties."""

import numpy as np
import pytest

from validation.checks import crosscheck, gates


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


def test_compare_vi_gates_a_group_of_one_scalar_on_its_standardized_error():
    """corr(log means) is undefined for one quantity (it failed every one-scalar group before); such a
    group passes or fails on its standardized error alone (threshold 0.5 NUTS sd)."""
    nuts = {"alpha": _iid(0, q=1)}
    g = gates.nuts_gates(nuts, divergences=0, bfmi=np.ones(4))
    same = crosscheck.compare_vi(nuts, {"alpha": _iid(9, q=1, chains=1, draws=4000, scale=0.7)}, g)
    assert same.status == "pass", same.reasons
    assert np.isnan(same.table.corr_log_mean[0])
    # a shift of 0.3 on the log scale is one NUTS sd (sd 0.3 on the log scale): median standardized error ~1 > 0.5
    biased = crosscheck.compare_vi(nuts, {"alpha": _iid(9, q=1, chains=1, draws=4000, shift=0.3)}, g)
    assert biased.status == "fail" and "standardized error" in biased.reasons[0]


def test_compare_exact_detects_a_shift_of_a_few_mcse():
    a = {"q": _iid(0, q=40)}
    g = gates.nuts_gates(a, divergences=0, bfmi=np.ones(4))
    same = crosscheck.compare_exact(a, {"q": _iid(1, q=40)}, g)
    assert same.status == "pass", same.reasons
    # iid draws: MCSE of the mean ~ 0.3 * m / sqrt(4000); a 10% shift is ~ 20 MCSE
    shifted = crosscheck.compare_exact(a, {"q": _iid(1, q=40, shift=0.1)}, g)
    assert shifted.status == "fail"


def test_summaries_stand_in_for_draws():
    """A stored reference keeps ArviZ summaries of its draws: gates and both comparisons give the same
    results on the summaries as on the draws (exactly: the same numbers enter)."""
    a, b = {"q": _iid(0, q=40)}, {"q": _iid(1, q=40)}
    sa = {"q": gates.summarize(a["q"])}
    g_draws = gates.nuts_gates(a, divergences=0, bfmi=np.ones(4))
    g_sum = gates.nuts_gates(sa, divergences=0, bfmi=np.ones(4))
    assert g_sum.passed == g_draws.passed and g_sum.n_chains == 4
    assert g_sum.table.equals(g_draws.table)
    assert crosscheck.compare_exact(b, sa, g_sum).table.equals(crosscheck.compare_exact(b, a, g_draws).table)
    vi = {"q": _iid(9, q=40, chains=1, draws=4000, scale=0.7)}
    assert crosscheck.compare_vi(sa, vi, g_sum).table.equals(crosscheck.compare_vi(a, vi, g_draws).table)


def test_vi_gap_is_the_table_behind_compare_vi():
    nuts = _iid(0, q=50)
    vi = _iid(9, q=50, chains=1, draws=4000, scale=0.7)
    gap = crosscheck.vi_gap(nuts, vi, "rate")
    assert list(gap.columns) == ["quantity", "nuts_mean", "vi_mean", "nuts_sd", "vi_sd", "std_error", "sd_ratio",
                                 "nuts_mean_in_vi90"]
    assert gap.quantity[0] == "rate[0]" and len(gap) == 50
    g = gates.nuts_gates({"rate": nuts}, divergences=0, bfmi=np.ones(4))
    row = crosscheck.compare_vi({"rate": nuts}, {"rate": vi}, g).table.iloc[0]
    assert row.median_std_error == pytest.approx(gap.std_error.median())
    assert row.coverage90 == pytest.approx(gap.nuts_mean_in_vi90.mean())
    with pytest.raises(ValueError, match="chain, draw, Q"):
        crosscheck.vi_gap(nuts, vi[0], "rate")
