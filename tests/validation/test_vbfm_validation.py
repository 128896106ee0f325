"""VBFM / OVBFM through the validation levels: stationarity, monotone ELBO, dense twins, Monte Carlo
ELBO, OVBFM vs VBFM, errata; the NUTS cross-check under -m slow."""

import jax
import numpy as np
import pytest

from custom_inference import vbfm
from validation.models import vbfm as vv
from validation.checks.errata import run_errata

ALPHA_PRIOR = (2.0, 0.5)


@pytest.fixture(scope="module")
def design():
    # rows have 3-4 active features (one-hot user and item, 1-3 genres of value 0.5)
    return vv.simulated_design(**vv.SMALL_DESIGN)


@pytest.mark.parametrize("alpha_prior", [None, ALPHA_PRIOR])
def test_every_block_update_is_a_stationary_point(design, alpha_prior):
    table = vv.update_checks(design, 2, alpha_prior=alpha_prior)
    assert len(table) == 1 + 2 * design.n_blocks + design.n_blocks + 1 + 3
    assert table.passed.all(), table[~table.passed]  # rtol 1e-7 of the gradient before (float64)
    assert (table.grad_before > 1e-3).all(), table  # every check started away from its optimum


def test_elbo_never_decreases(design):
    ok, worst, trace = vv.monotone_check(design, 2, sweeps=25)
    assert ok, worst  # drops below 1e-10 relative are rounding
    assert trace[-1] > trace[0]
    with pytest.raises(ValueError, match="sweeps must be an integer >= 0"):  # as rg, sibm, psm
        vv.monotone_check(design, 2, sweeps=-1)


@pytest.mark.parametrize("alpha_prior", [None, ALPHA_PRIOR])
def test_caches_and_elbo_equal_dense_brute_force(design, alpha_prior):
    table = vv.dense_twin_checks(design, 2, alpha_prior=alpha_prior)
    # incremental float64 updates over one sweep: rounding far below 1e-10
    assert (table.max_rel_diff < 1e-10).all(), table


@pytest.mark.parametrize("alpha_prior", [None, ALPHA_PRIOR])
def test_elbo_equals_monte_carlo_estimate_from_the_numpyro_program(design, alpha_prior):
    state = vv.warm_state(design, 2, alpha_prior=alpha_prior)
    est, se = vv.monte_carlo_elbo(state, design, n_draws=4000, seed=11)
    exact = float(vbfm.elbo(state, vv._jnp(design)))
    assert abs(est - exact) < 4 * se, (est, se, exact)  # 4 standard errors: false alarm 6e-5


@pytest.mark.parametrize("alpha_prior", [None, ALPHA_PRIOR])
def test_ovbfm_with_one_full_batch_and_unit_step_is_cavi(design, alpha_prior):
    # same code path on the same numbers: equal to float64 rounding
    assert vv.svi_cavi_exact(design, 2, alpha_prior=alpha_prior) < 1e-9


def test_ovbfm_with_minibatches_reaches_the_vbfm_fixed_point(design):
    out = vv.svi_cavi_close(design, 2, n_batches=4, epochs=(50, 200))
    assert out["passed"], out  # criteria and their justification: validation.models.vbfm.svi_cavi_close


def test_errata_printed_fails_corrected_passes():
    table = run_errata(vv.ERRATA)
    assert (~table.printed_passes).all(), table[table.printed_passes]
    assert table.corrected_passes.all(), table[~table.corrected_passes]


@pytest.mark.slow
def test_printed_v_mean_is_exact_without_multi_hot_rows():
    """Scope of the erratum: with two active features per row the covariance term is zero."""
    d = vv.simulated_design(**{**vv.SMALL_DESIGN, "multi_hot": False})
    table = vv.update_checks(d, 2, v_update=vv.printed_update_v_block)
    assert table.passed.all(), table[~table.passed]


@pytest.mark.slow
def test_crosscheck_against_nuts():
    cfg = vv.CrosscheckConfig()
    result = vv.run_crosscheck(cfg, progress=False, reference="stored")  # the stored, gated NUTS reference
    assert result.verdict.gates.passed, result.verdict.gates.failures
    assert result.verdict.status == "pass", (result.verdict.reasons, result.verdict.table)
    assert result.extra["update_table"].passed.all()
    assert (result.extra["dense_table"].max_rel_diff < 1e-10).all()
    # the alpha gap (VI mean about 2 NUTS sds low) is reported in result.extra["alpha_table"], not gated
    assert result.extra["alpha_table"].shape == (1, 9)  # validation.checks.crosscheck.vi_gap + its own NUTS gate
    assert result.extra["alpha_table"].nuts_gates_passed.all()
