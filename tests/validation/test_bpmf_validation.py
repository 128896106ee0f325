"""BPMF Gibbs sampler against its NumPyro program: conditionals, draw moments, chunked sums,
errata, SBC adapters (fast); NUTS cross-check and 200-simulation SBC under -m slow."""

import numpy as np
import pytest

from validation.models import bpmf as vb
from validation.checks import sbc
from validation.checks.errata import Erratum

HYPER = vb.CROSSCHECK_HYPER


def test_every_block_conditional_matches_the_programs_log_joint():
    table = vb.conditional_checks(HYPER)
    assert table.passed.all(), table  # relative 1e-7; float64 rounding is ~1e-12


def test_a_wrongly_derived_conditional_is_rejected():
    wrong = HYPER._replace(alpha=2.5, beta0=3.0, nu0=6.0)  # every block's conditional is changed
    table = vb.conditional_checks(HYPER, sampler_hyper=wrong)
    assert not table.passed.any(), table


def test_draws_have_the_conditional_moments():
    # z-tests on 4000 draws; Bonferroni over all scalars: false alarm <= 1e-3 for the whole table
    table = vb.moment_checks(n_draws=4000, false_alarm=1e-3)
    assert table.passed.all(), table


@pytest.mark.parametrize("mu0", [0.0, 0.7])  # mu0 != 0 exercises the means' term of the target
def test_gauge_move_target_equals_program_plus_jacobian(mu0):
    table = vb.gauge_check(HYPER._replace(mu0=mu0))
    assert table.passed.all(), table  # relative 1e-7, float64 rounding ~1e-14 here


@pytest.mark.parametrize("wrong", [{"W0": 0.3}, {"beta0": 3.0}])
def test_a_wrong_gauge_target_is_rejected(wrong):
    hyper = HYPER._replace(mu0=0.7)
    table = vb.gauge_check(hyper, sampler_hyper=hyper._replace(**wrong)).set_index("block")
    assert not table.loc["gauge target", "passed"], table


def test_chunked_sums_equal_the_dense_brute_force():
    # the problem sizes of conditional_checks' (6 x 5, K = 3, N = 18: 3 chunks of 7, the last one padded), so the
    # simulation's eager ops are compiled once in this file (stats_check's default 9 x 7 problem: 8 CPU s more)
    table = vb.stats_check(chunk_sizes=(7,), n_rows=6, n_cols=5, n_components=3, n_obs=18)
    assert table.passed.all(), table


def test_errata_rows_printed_fail_corrected_pass():
    assert isinstance(vb.ERRATA, tuple)
    for e in vb.ERRATA:  # empty for BPMF: eqs. 2.9-2.15 are printed correctly (see validation.models.bpmf)
        assert isinstance(e, Erratum)
        assert not e.check("printed")[0] and e.check("corrected")[0]


def test_sbc_adapters_give_ranks_in_range():
    cfg = vb.SBCConfig(gibbs_chains=1, gibbs_warmup=10, gibbs_samples=20, gibbs_thin=1)
    simulate, fit, functionals = vb.sbc_adapters(cfg)
    res = sbc.run_sbc(simulate, fit, functionals, n_sims=2, n_draws=19, progress=False)
    for name, ranks in res.ranks.items():
        assert ranks.shape[0] == 2 and ranks.min() >= 0 and ranks.max() <= 19, name
    assert res.ranks["pred"].shape[1] == 4 and res.ranks["logdet_Lambda"].shape[1] == 2


@pytest.mark.slow
def test_gibbs_agrees_with_gated_nuts():
    """Against the stored, gated NUTS reference of the embedded problem (the Gibbs run is the slow part)."""
    result = vb.run_crosscheck(reference="stored")
    assert result.extra["update_table"].passed.all()
    assert result.verdict.gates.passed, result.verdict.gates.failures
    assert result.verdict.status == "pass", (result.verdict.reasons, result.verdict.table)


@pytest.mark.slow
def test_sbc_200_simulations_uniform_ranks():
    simulate, fit, functionals = vb.sbc_adapters()
    # master seed 0, as every SBC run of the project; the paper's plain sampler (gauge_rounds=0)
    # fails this run on the scale functionals (see validation.models.bpmf), the gauge moves fix it
    res = sbc.run_sbc(simulate, fit, functionals, n_sims=200, master_seed=0, n_draws=99, progress=False)
    # Bonferroni family over all 10 scalars at alpha = 0.05 (ECDF band test, Säilynoja et al. 2022)
    assert res.passed(0.05), res.uniformity(0.05)
