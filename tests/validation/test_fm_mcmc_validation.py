"""Validation levels of MCMC-FM: conditionals, caches, blocks, errata (fast); NUTS cross-check and SBC (slow)."""

import pytest

from validation.models import fm_mcmc as v
from validation.checks.sbc import run_sbc


def test_every_conditional_matches_numpyro_and_wrong_one_fails():
    df = v.conditional_checks()
    assert set(df["site"]) == {"w0", "w", "V", "alpha", "sigma_w", "mu_w", "sigma_v", "mu_v"}
    assert (df["expected"] == "wrong").sum() == 1
    # exact rows: log-density differences agree to rounding (<= 1e-6); the wrong row is off by > 1e-6
    assert df["passed"].all(), df[~df["passed"]]
    assert df.loc[df["expected"] == "wrong", "max_error"].min() > 1e-2


def test_caches_after_sweeps_equal_dense_recomputation():
    # K = 2 (cache_check's default is 3): the K of the other checks, whose compiled simulation of the shared
    # design is reused; the caches e (N,) and q (N, K) are checked column by column either way
    assert v.cache_check(K=2) < 1e-10  # float64 rounding over a few hundred updates


def test_block_update_equals_sequential_one_feature_updates():
    df = v.block_check()
    assert (df["n_features"] > 1).any()  # the one-hot blocks have several features
    assert df["max_abs_diff"].max() < 1e-10


def test_errata_printed_fails_corrected_passes():
    for e in v.ERRATA:
        ok_p, val_p = e.check("printed")
        ok_c, val_c = e.check("corrected")
        assert not ok_p and ok_c, (e.location, val_p, val_c)


@pytest.mark.slow
def test_mcmc_fm_agrees_with_nuts():
    """Against the stored NUTS reference of the embedded problem, which passed its gates (so the
    verdict must be "pass"; an MCMC-FM run that fails its own R-hat/ESS gates fails the test)."""
    r = v.run_crosscheck(reference="stored")
    assert r.reference.provenance["diagnostics"]["gates_passed"]
    assert r.verdict.status == "pass", (r.verdict.reasons, r.verdict.table)


@pytest.mark.slow
def test_mcmc_fm_sbc_50():
    """50 simulations, L = 99: every scalar of every functional passes the ECDF test at 0.05 / Q_total
    (Bonferroni family: false-alarm rate <= 5%)."""
    sim, fit, fun = v.sbc_adapters()
    res = run_sbc(sim, fit, fun, n_sims=50, n_draws=99, master_seed=0, progress=False, method="mcmc-fm")
    assert res.passed(alpha=0.05), res.uniformity(alpha=0.05)
