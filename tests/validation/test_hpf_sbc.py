"""Simulation-based calibration of the HPF solvers (Talts et al. 2018).

The default suite runs a small version (L = 39 ranked draws, short chains: 40 simulations
for the Gibbs sampler, 15 for the sampler with the printed conditionals, whose failure needs
far fewer); `pytest -m slow` runs the full one (200 simulations, L = 99) for Gibbs, NUTS,
CAVI and the Gibbs sampler with the seed's printed xi/eta conditionals. Uniformity is
judged by the ECDF simultaneous band (Säilynoja et al. 2022) at alpha = 0.05 with a
Bonferroni correction over the 10 scalars: false-alarm rate at most 5% per run, and the
runs are deterministic (fixed master seed).

SMALL's Gibbs draws (2 chains x 200 kept, 4 sweeps apart, after 200 warm-up sweeps; thinned
evenly to L = 39, i.e. about 41 sweeps apart) were checked for the "L + 1 roughly independent
draws" that rank uniformity needs, on the 40 data sets of the default test: bulk and tail ESS
of every scalar over the 400 draws >= 141 in 95% of (simulation, scalar) pairs, smallest 28
(one pair, R-hat 1.055). Halving the kept draws with L = 19 keeps that ratio (ESS 5% quantile
67-74 of 200 draws) but was not adopted: on the same 40 data sets it fails on log_total_rate
(p 0.0035 < 0.005), which leans low at this master seed in SMALL too (p 0.028, mean rank 16.4
of 39) and passes at 120 simulations (p 0.052). NUTS on the same 40 data sets leans the same way
(the first 40 simulations of the 200-simulation NUTS SBC: mean rank 40.1 of 99, p 0.093): a
property of these data sets, not of the sampler.
"""

import pytest

from validation.models import hpf_gibbs as vg
from validation.checks import sbc

SMALL = vg.SBCConfig(gibbs_warmup=200, gibbs_samples=200, gibbs_thin=4, cavi_max_iter=1000)


def _run(solver, config, n_sims, n_draws, tmp_path=None):
    simulate, fit, functionals = vg.sbc_adapters(solver, config)
    return sbc.run_sbc(simulate, fit, functionals, n_sims=n_sims, master_seed=0, n_draws=n_draws,
                       progress=False, method=solver, cache_dir=tmp_path)


def test_gibbs_passes_small_sbc(tmp_path):
    result = _run("gibbs", SMALL, 40, 39, tmp_path)
    assert result.passed(alpha=0.05), result.uniformity()
    paths = sbc.plot_ranks(result, tmp_path / "plots")
    assert paths and all(p.endswith(".png") for p in map(str, paths))


def test_sampler_with_printed_conditionals_fails_small_sbc():
    # 15 simulations (was 40): measured at master seed 0, the three log_xi scalars fail at 15
    # simulations with ECDF p 0.0004, 0.0012 and < 0.0001 (smallest pointwise p 1.3e-6; mean
    # ranks 7.5, 9.9, 6.3 of 39) against the Bonferroni level 0.005, and log_xi_1 already at 10
    # (p 0.0002); at 40 the smallest p is < 0.0001 as well. The margin is > 50x in p.
    result = _run("gibbs-printed", SMALL, 15, 39)
    table = result.uniformity(alpha=0.05)
    assert not result.passed(alpha=0.05)
    failing = set(table[(table.kind == "scalar") & ~table.ecdf_pass].functional)
    assert "log_xi" in failing or "log_eta" in failing, table


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["gibbs", "nuts"])
def test_exact_samplers_pass_full_sbc(solver):
    result = _run(solver, vg.SBCConfig(), 200, 99)
    assert result.passed(alpha=0.05), result.uniformity()


@pytest.mark.slow
def test_printed_conditionals_fail_full_sbc():
    assert not _run("gibbs-printed", vg.SBCConfig(), 200, 99).passed(alpha=0.05)


@pytest.mark.slow
def test_cavi_fails_full_sbc_as_mean_field_should():
    """Mean-field q is too narrow on the expected rates: their ranks pile up at both ends."""
    result = _run("cavi", vg.SBCConfig(), 200, 99)
    table = result.uniformity(alpha=0.05)
    assert not result.passed(alpha=0.05)
    assert not table[(table.functional == "rate") & (table.kind == "family")].ecdf_pass.item()
