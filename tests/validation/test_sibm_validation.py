"""SIBM validation (seed 002): update level (stationarity, optimal xi, monotone ELBO, dense twins,
sampler, unbiasedness by enumeration), SVI vs batch VB, errata; NUTS cross-check under -m slow."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from custom_inference import sibm  # noqa: E402
from validation.models import sibm as vs  # noqa: E402
from validation.checks.errata import run_errata  # noqa: E402

D = 2


@pytest.fixture(scope="module")
def problem():
    return vs.small_problem(0)  # X (8, 6), 25% ones, rows without ones included


def test_small_problem_refuses_instead_of_looping_for_ever():
    """A 1 x 1 matrix can never hold both a 0 and a 1 (the loop had no exit); a prior whose global bias
    makes every cell 1 is refused after MAX_SIMULATION_TRIES draws."""
    with pytest.raises(ValueError, match="cannot hold both a 0 and a 1"):
        vs.small_problem(0, I=1, J=1)
    with pytest.raises(ValueError, match="no 3 x 2 simulation with both"):
        vs.small_problem(0, I=3, J=2, z=1e6)
    X, data = vs.small_problem(0)
    assert 0 < X.sum() < X.size and int(np.asarray(data.values).sum()) == X.sum()


def test_every_block_update_is_a_stationary_point(problem):
    """Each batch block (z, each free column of V, each free column of U) zeroes the gradient of the
    bounded ELBO at the xi it was computed with: float64 rounding (rtol 1e-7 of the gradient before)."""
    _, data = problem
    table = vs.update_checks(data, D)
    assert len(table) == 1 + 3 + 3  # z, V columns 0, 1, 3 (2 is the ones), U columns 0, 1, 2 (3 is the ones)
    assert table.passed.all(), table
    assert (table.grad_before > 1e-3).all()  # the check had something to remove


def test_a_wrong_update_fails_stationarity(problem):
    """Negative control: the precision of the v update without the factor 2 of 2 sum lambda E[u^2]."""
    _, data = problem

    def wrong_v(state, d, hyper, columns=None):
        new = sibm.update_v(state, d, hyper, columns=columns)
        k = columns[0]
        prior_prec = 1.0 / hyper.v_tilde0
        half = prior_prec + 0.5 * (new.v_prec[:, k] - prior_prec)
        return new._replace(v_prec=new.v_prec.at[:, k].set(half))

    table = vs.update_checks(data, D, v_update=wrong_v)
    v_rows = table[table.block.str.startswith("v")]
    assert not v_rows.passed.any()


def test_optimal_xi_and_a_wrong_xi(problem):
    """Eq. (8) xi = sqrt(mu^2 + s2) is the maximizer of the bound; xi = |mu| (ignoring s2) is not."""
    X, data = problem
    assert vs.xi_check(X, data, D)["passed"]
    assert not vs.xi_check(X, data, D, xi_form=lambda mu, s2: np.abs(mu))["passed"]


def test_elbo_never_decreases(problem):
    _, data = problem
    ok, worst, trace = vs.monotone_check(data, D, sweeps=30)
    assert ok, worst
    assert trace[-1] > trace[0]


def test_sparse_and_chunked_computations_equal_dense_twins(problem):
    X, data = problem
    table = vs.dense_twin_checks(X, data, D)
    assert (table.max_rel_diff < 1e-12).all(), table


@pytest.mark.parametrize("strategy", sibm.STRATEGIES)
def test_sampler_matches_the_strategy_definition(problem, strategy):
    """pmf, marginals and rescaling constants exact; 100000 draws pass a chi-square test with false-alarm rate 1e-4."""
    X, data = problem
    r = vs.sampler_checks(X, data, strategy)
    assert r["passed"], r


@pytest.mark.parametrize("strategy", sibm.STRATEGIES)
def test_noisy_natural_gradient_is_unbiased_by_enumeration(problem, strategy):
    """E_{p(i,j)} of the per-cell targets of (9) = the batch coordinate targets, to 1e-10 (float64)."""
    X, data = problem
    r = vs.unbiasedness(X, data, D, strategy)
    assert max(r.values()) < 1e-10, r


def test_wrong_rescaling_is_biased(problem):
    """Negative control: c = p(i, j) for every block (instead of p(j|i), p(i|j)) biases u and v."""
    X, data = problem
    r = vs.unbiasedness(X, data, D, "biased", rescale=lambda p, pj_i, pi_j: (p, p, p))
    assert r["u"] > 1e-2 and r["v"] > 1e-2 and r["z"] < 1e-10


def test_svi_reaches_the_batch_fixed_point_biased(problem):
    """S-Biased SIBM (S = 200, tau = 10, kappa = 0.7): same fixed point as batch VB (restart within 1e-4
    RMS), distance shrinking from 300 to 1200 minibatches, and below 0.1 posterior sd of the logit."""
    X, _ = problem
    r = vs.svi_vs_batch(X, D, "biased")
    assert r["passed"], r


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["uniform", "balanced"])
def test_svi_reaches_the_batch_fixed_point_other_strategies(problem, strategy):
    X, _ = problem
    r = vs.svi_vs_batch(X, D, strategy)
    assert r["passed"], r


@pytest.mark.slow
def test_svi_with_wrong_rescaling_misses_the_fixed_point(problem):
    """Negative control: S-Biased draws rescaled as if uniform (the bias of Paq13-like subsampling)."""
    X, data = problem
    sam = sibm.make_sampler(data, "biased", dtype=np.float64)
    un = sibm.make_sampler(data, "uniform", dtype=np.float64)
    bad = sam._replace(p_row=un.p_row, p_col=un.p_col, norm_one=un.norm_one, norm_zero=un.norm_zero,
                       w_one_row=un.w_one_row, w_one_col=un.w_one_col, w_zero_row=un.w_zero_row,
                       w_zero_col=un.w_zero_col)
    r = vs.svi_vs_batch(X, D, "biased", sampler=bad)
    assert not r["close"], r


def test_elbo_prior_terms_match_the_numpyro_program(problem):
    """-KL(q || prior) of the solver's ELBO = E_q[log p_program(X, theta) - log p(X | theta) - log q] by
    Monte Carlo (4000 draws), within 4 standard errors (false-alarm probability 6e-5)."""
    X, data = problem
    r = vs.monte_carlo_kl_check(X, data, D)
    assert r["z"] < 4.0, r


def test_errata_printed_fails_corrected_passes():
    table = run_errata(vs.ERRATA)
    assert table.ok.all(), table[["location", "printed_value", "corrected_value"]]


@pytest.mark.slow
def test_crosscheck_against_nuts():
    """Batch VB vs gated NUTS on a 20 x 15 matrix, D = 2 with biases: predicted probabilities per cell.

    A pass needs the NUTS gates (else inconclusive, reported, not failed) and the VI thresholds of
    `validation.checks.crosscheck.VIThresholds` (median standardized error <= 0.5, corr of log means >= 0.99)."""
    res = vs.run_crosscheck(progress=False, reference="stored")  # the stored NUTS reference passed its gates
    assert res.verdict.gates.passed, res.verdict.gates.failures
    assert res.verdict.status == "pass", (res.verdict.reasons, res.verdict.table, res.extra["mackay_vs_nuts"])
