"""SBMF validation levels: conditionals, hyper draws, residual cache, errata, NUTS, SBC."""

import numpy as np
import pytest

from validation.models import sbmf as vs


def test_conditionals_equal_the_log_joints():
    table = vs.conditional_checks()
    assert table.passed.all(), table


@pytest.mark.parametrize("site", ["tau", "U"])
def test_a_wrong_conditional_is_rejected(site):
    table = vs.conditional_checks(bug=site, sites=(site,))
    assert not table.passed.any(), table


def test_gauge_move_target_equals_program_plus_jacobian():
    table = vs.gauge_check()
    assert table.passed.all(), table  # relative 1e-7 of the log-joint changes


@pytest.mark.parametrize("field", ["beta0", "nu0"])
def test_a_wrong_gauge_target_is_rejected(field):
    wrong = vs.CHECK_HYPER._replace(**{field: 1.5 * getattr(vs.CHECK_HYPER, field)})
    table = vs.gauge_check(fit_hyper=wrong).set_index("check")
    assert not table.loc["gauge target", "passed"], table


def test_normal_gamma_draws_match_the_brute_force_conditionals():
    table = vs.hyper_checks(n_draws=5000)
    assert table.passed.all(), table  # each KS test at false-alarm 1e-4


def test_residual_cache_equals_its_dense_twin():
    table = vs.cache_check(n_sweeps=5)
    assert table.passed.all(), table


@pytest.mark.parametrize("entry", vs.ERRATA, ids=lambda e: e.location)
def test_printed_algorithm_lines_fail_and_corrections_pass(entry):
    printed_ok, printed_value = entry.check("printed")
    corrected_ok, corrected_value = entry.check("corrected")
    assert not printed_ok and corrected_ok, (printed_value, corrected_value)


def test_input_errors():
    with pytest.raises(ValueError, match="bug"):
        vs.conditional_checks(bug="theta")
    with pytest.raises(ValueError, match="sites"):
        vs.conditional_checks(sites=("xi",))


@pytest.mark.slow
def test_printed_hyper_lines_fail_by_sampling():
    table = vs.hyper_checks(printed=True).set_index("site")
    assert not table.loc[["sigma_alpha", "sigma_beta", "sigma_u", "sigma_v"], "passed"].any(), table


@pytest.mark.slow
def test_gibbs_agrees_with_nuts_on_a_tiny_problem():
    cfg = vs.CrosscheckConfig(n_rows=6, n_cols=5, K=1, n_obs=20, n_unobserved=3, num_warmup=1000, num_samples=1000,
                              target_accept=0.99, gibbs_warmup=500, gibbs_samples=1000, gibbs_thin=2, data_seed=0)
    res = vs.run_crosscheck(cfg, reference="rerun")  # no stored reference for this problem: NUTS runs
    assert res.verdict.status == "pass", (res.verdict.reasons, res.verdict.table)


@pytest.mark.slow
def test_gibbs_agrees_with_nuts():
    """Gibbs on the embedded problem against its stored, gated NUTS reference (the Gibbs run is the slow part)."""
    res = vs.run_crosscheck(reference="stored")
    assert res.verdict.gates.passed, res.verdict.gates.failures
    assert res.verdict.status == "pass", (res.verdict.reasons, res.verdict.table)


@pytest.mark.slow
def test_sbc_1000_simulations():
    """1000 simulations (~7 CPU-minutes). At 200 (master seed 0) log tau failed (ECDF p 0.0004 against the
    Bonferroni 0.0083, mean rank 55.8), and NUTS on the same 200 data sets failed the same way (55.2,
    p 0.0018; paired posterior means equal within 0.012 sd): an excursion of those data sets, which the
    family test allows 5% of the time. 1000 simulations (the first 200 included) have the same 5% family
    false-alarm rate and more power against a real bias (measured: log tau mean rank 49.99, p 0.98)."""
    from validation.checks.sbc import run_sbc

    simulate, fit, functionals = vs.sbc_adapters()
    res = run_sbc(simulate, fit, functionals, n_sims=1000, master_seed=0, n_draws=99, progress=False, method="sbmf-gibbs")
    assert res.passed(), res.uniformity()  # alpha = 0.05 per family, as validation.checks.sbc states
