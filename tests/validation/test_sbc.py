"""Tests of the generic SBC runner (`validation.checks.sbc`) on a conjugate model with a known posterior.

Model: mu_d ~ N(0, 1) independently for d = 1..3, y_1..y_n | mu ~ N(mu, I) (n = 5), so the
posterior is mu_d | y ~ N(sum_i y_id / (n + 1), 1 / (n + 1)) and an exact sampler is one call
to the normal generator. All tests use fixed seeds, so they are deterministic; the comments
give the probability that a correct implementation fails each assertion (false-alarm rate)
and the values observed with these seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

from validation.checks import sbc

N_OBS = 5
DIM = 3


def simulate(seed):
    rng = np.random.default_rng(seed)
    mu = rng.normal(0.0, 1.0, DIM)
    y = rng.normal(mu, 1.0, (N_OBS, DIM))
    return {"mu": mu}, y


def make_fit(sd_factor=1.0, bias_sd=0.0, n_samples=200):
    """Posterior sampler; sd_factor != 1 or bias_sd != 0 makes it deliberately wrong."""

    def fit(y, seed):
        rng = np.random.default_rng(seed)
        mean = y.sum(axis=0) / (N_OBS + 1)
        sd = np.sqrt(1.0 / (N_OBS + 1))
        return {"mu": rng.normal(mean + bias_sd * sd, sd_factor * sd, (n_samples, DIM))}

    return fit


FUNCTIONALS = {
    "mu": lambda p: p["mu"],  # Q = 3
    "mu0_sq": lambda p: np.array([p["mu"][0] ** 2]),  # Q = 1, a non-monotone transform
}


@pytest.fixture(scope="module")
def exact_result():
    return sbc.run_sbc(simulate, make_fit(), FUNCTIONALS, n_sims=200, master_seed=11, n_draws=99, progress=False,
                       method="exact")


# ------------------------------------------------------------------------------
# seeds


def test_seeds_prefix_stable_and_deterministic():
    long, short = sbc.sbc_seeds(2024, 200), sbc.sbc_seeds(2024, 20)
    assert long.shape == (200,) and short.shape == (20,)
    np.testing.assert_array_equal(long[:20], short)
    np.testing.assert_array_equal(sbc.sbc_seeds(2024, 200), long)
    assert not np.array_equal(sbc.sbc_seeds(2025, 20), short)
    assert len(np.unique(long)) == 200  # 32-bit seeds: a collision among 200 has probability ~5e-6
    assert long.min() >= 0 and long.max() < 2**32
    with pytest.raises(ValueError, match="master_seed"):
        sbc.sbc_seeds(-1, 3)


def test_simulation_s_is_the_same_in_a_longer_run(exact_result):
    short = sbc.run_sbc(simulate, make_fit(), FUNCTIONALS, n_sims=20, master_seed=11, progress=False, method="exact")
    for name in FUNCTIONALS:
        np.testing.assert_array_equal(short.ranks[name], exact_result.ranks[name][:20])
    np.testing.assert_array_equal(short.fit_seeds, exact_result.fit_seeds[:20])


# ------------------------------------------------------------------------------
# the ECDF band itself


@pytest.mark.parametrize("n, n_draws", [(200, 99), (50, 19)])
def test_band_false_alarm_rate_is_alpha(n, n_draws):
    """500 data sets of n uniform ranks (a seed unrelated to the band's): the fraction leaving the
    simultaneous band must be within 3 binomial standard errors of alpha = 0.05 (sd = sqrt(0.05 *
    0.95 / 500) = 0.0097; the band's own Monte Carlo error with 10,000 simulations adds 0.0022,
    and discreteness can only lower the rate). A correct band fails this with probability ~0.003.
    Observed: 0.046 for both (200, 99) and (50, 19) (2,000 data sets with another seed gave 0.052 and
    0.048). Leaving the band must also be exactly the test's `p <= alpha`."""
    alpha, m = 0.05, 500
    band = sbc.ecdf_band(n, n_draws, alpha)
    assert band.lower[0] == band.upper[0] == 0 and band.lower[-1] == band.upper[-1] == n
    assert np.all(band.lower <= band.upper)
    rng = np.random.default_rng(987)
    left = 0
    for _ in range(m):
        r = rng.integers(0, n_draws + 1, n)
        counts = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n_draws + 1))[:n_draws], [n]])
        out = bool(np.any((counts < band.lower) | (counts > band.upper)))
        assert out == (sbc.ecdf_test(r, n_draws)[1] <= alpha)
        left += out
    se = np.sqrt(alpha * (1 - alpha) / m)
    assert abs(left / m - alpha) <= 3 * se, (left / m, se)


def test_band_rejects_a_u_shape():
    """A clearly U-shaped rank sample of size 200 (ranks piled in the outer fifths) leaves the band."""
    rng = np.random.default_rng(3)
    r = np.where(rng.random(200) < 0.5, rng.integers(0, 20, 200), rng.integers(80, 100, 200))
    _, p = sbc.ecdf_test(r, 99)
    assert p == 0.0


# ------------------------------------------------------------------------------
# run_sbc on exact and wrong samplers


def test_exact_sampler_passes(exact_result):
    """Exact posterior draws: ranks are uniform. Per scalar the ECDF test has false-alarm rate
    0.05; the assertion is on the Bonferroni family over all 4 scalars (alpha / 4 each), whose
    false-alarm rate is <= 0.05. With master seed 11 the smallest per-scalar ECDF p-value is
    0.67 and the smallest chi-square (20 bins) p-value 0.56 (against 0.0125): nowhere near the edge."""
    table = exact_result.uniformity(alpha=0.05)
    scalars = table[table.kind == "scalar"]
    assert len(scalars) == 4 and set(table.kind) == {"scalar", "pooled", "family"}
    assert exact_result.passed(alpha=0.05)
    assert table.iloc[-1]["functional"] == "all" and table.iloc[-1]["alpha_used"] == pytest.approx(0.05 / 4)
    # chi-square second opinion, Bonferroni over 4 scalars: false-alarm rate <= 0.05
    assert scalars.chi2_p.min() > 0.05 / 4
    assert set(scalars.chi2_bins) == {20}
    ranks = exact_result.ranks["mu"]
    assert ranks.shape == (200, 3) and ranks.min() >= 0 and ranks.max() <= 99
    # z-scores of an exact posterior have sd about 1 (sd of the sd over 600 scalars ~ 0.03; 0.2 is > 6 sd)
    assert abs(np.std(exact_result.z_scores()["mu"]) - 1.0) < 0.2


@pytest.mark.parametrize("wrong, kwargs", [("sd too small by half", dict(sd_factor=0.5)),
                                           ("mean biased by 0.5 sd", dict(bias_sd=0.5))])
def test_wrong_sampler_fails(wrong, kwargs):
    """A deliberately wrong sampler must fail. The assertion is on the family verdict at alpha =
    0.05 (the same test as above); the error it guards against is a miss, not a false alarm. With
    master seed 11 every scalar of "mu" has ECDF p-value 0 (< 1e-4) in both cases (smallest pointwise
    tail probabilities 1e-15..1e-23 for the halved sd, 1e-8..1e-12 for the bias; chi-square p <= 1e-5).
    The bias is invisible in mu0_sq = mu_0^2 (p = 0.48): a non-monotone functional can hide a shift
    (Modrak et al. 2023), which is why several functionals are ranked."""
    result = sbc.run_sbc(simulate, make_fit(**kwargs), FUNCTIONALS, n_sims=200, master_seed=11, progress=False)
    assert not result.passed(alpha=0.05), wrong
    table = result.uniformity(alpha=0.05)
    mu = table[(table.functional == "mu") & (table.kind == "scalar")]
    assert (mu.ecdf_p < 1e-3).all() and not mu.chi2_pass.any()
    if "sd_factor" in kwargs:  # U shape: ranks pile up at both ends, z-scores too wide
        r = result.ranks["mu"]
        assert np.mean((r < 10) | (r > 89)) > 0.4  # 0.2 expected if uniform
        assert np.std(result.z_scores()["mu"]) > 1.5
    else:  # bias upwards: the truth is too often below the draws
        assert result.ranks["mu"].mean() < 40  # 49.5 expected if uniform


# ------------------------------------------------------------------------------
# resume, ties, input checks, report


def test_resume_from_cache_is_identical(tmp_path):
    calls = []

    def fit(y, seed):
        calls.append(seed)
        return make_fit()(y, seed)

    fresh = sbc.run_sbc(simulate, make_fit(), FUNCTIONALS, n_sims=10, master_seed=5, progress=False)
    first = sbc.run_sbc(simulate, fit, FUNCTIONALS, n_sims=6, master_seed=5, cache_dir=tmp_path, progress=False)
    assert len(calls) == 6 and len(list(tmp_path.glob("sim_*.npz"))) == 6
    resumed = sbc.run_sbc(simulate, fit, FUNCTIONALS, n_sims=10, master_seed=5, cache_dir=tmp_path, progress=False)
    assert len(calls) == 10  # the 6 cached simulations were not refitted
    for name in FUNCTIONALS:
        np.testing.assert_array_equal(first.ranks[name], fresh.ranks[name][:6])
        np.testing.assert_array_equal(resumed.ranks[name], fresh.ranks[name])
        np.testing.assert_array_equal(resumed.truth[name], fresh.truth[name])
        np.testing.assert_array_equal(resumed.post_mean[name], fresh.post_mean[name])
    np.testing.assert_array_equal(resumed.seeds, fresh.seeds)
    np.testing.assert_array_equal(resumed.fit_seeds, fresh.fit_seeds)
    with pytest.raises(ValueError, match="another SBC experiment"):
        sbc.run_sbc(simulate, fit, FUNCTIONALS, n_sims=3, master_seed=6, cache_dir=tmp_path, progress=False)


def test_ties_are_broken_uniformly():
    """A discrete functional whose draws all equal the truth: every rank is a tie among all L + 1
    positions, so ranks must be uniform on 0..L (L = 9, 500 simulations). Bonferroni over the two
    tests (ECDF, chi-square on 10 bins) at 0.01 / 2 each: false-alarm rate <= 0.01. Observed with
    seed 3: ECDF p = 0.80, chi-square p = 0.93; all 10 values occur (counts 42..56)."""

    def sim(seed):
        return {"k": np.array(3)}, None

    def fit(data, seed):
        return {"k": np.full(20, 3)}

    res = sbc.run_sbc(sim, fit, {"k": lambda p: p["k"]}, n_sims=500, master_seed=3, n_draws=9, progress=False)
    r = res.ranks["k"][:, 0]
    assert set(np.unique(r)) == set(range(10))
    table = res.uniformity(alpha=0.01)
    row = table[table.kind == "scalar"].iloc[0]
    assert row.ecdf_p > 0.005 and row.chi2_p > 0.005, (row.ecdf_p, row.chi2_p)
    assert row.chi2_bins == 10


def test_input_errors():
    with pytest.raises(ValueError, match="fewer than n_draws"):
        sbc.run_sbc(simulate, make_fit(n_samples=50), FUNCTIONALS, n_sims=1, n_draws=99, progress=False)
    with pytest.raises(ValueError, match="1-D"):
        sbc.run_sbc(simulate, make_fit(), {"bad": lambda p: np.outer(p["mu"], p["mu"])}, n_sims=1, progress=False)
    with pytest.raises(ValueError, match="NaN"):
        sbc.run_sbc(simulate, make_fit(), {"bad": lambda p: np.full(3, np.nan)}, n_sims=1, progress=False)
    with pytest.raises(ValueError, match="trailing shape"):
        sbc.run_sbc(simulate, lambda y, s: {"mu": np.zeros((200, 2))}, FUNCTIONALS, n_sims=1, progress=False)
    with pytest.raises(ValueError, match="n_sims"):
        sbc.run_sbc(simulate, make_fit(), FUNCTIONALS, n_sims=0, progress=False)
    with pytest.raises(ValueError, match="ranks must lie"):
        sbc.ecdf_test(np.array([0, 5, 100]), 99)
    with pytest.raises(ValueError, match="bins"):
        sbc.chi2_test(np.array([0, 5, 10]), 99, 1)


def test_report_writes_markdown_and_plots(exact_result, tmp_path):
    path = sbc.sbc_report(exact_result, tmp_path, "SBC: conjugate normal, exact sampler")
    text = path.read_text()
    assert "**Verdict: PASS**" in text and "Bonferroni" in text
    for name in ("sbc_mu.png", "sbc_mu0_sq.png"):
        assert (tmp_path / name).stat().st_size > 0 and f"({name})" in text
