"""The HPF Gibbs sampler against the NumPyro program: conditionals, CustomGibbs blocks, NUTS."""

import pytest

from validation.checks import bridge
from validation.models import hpf_gibbs as vg
from validation.models import hpf as vhpf
from validation.checks.report import crosscheck_report
from validation.models.hpf import CROSSCHECK_DEFAULT
from validation.checks.nuts_sbc import compile_counter
from validation.models import catalog

HYPER = CROSSCHECK_DEFAULT.hyper  # a' = 2, b' = 1: prior rate a'/b' = 2 differs from the printed b' = 1
SHORT = {"num_warmup": 500, "num_samples": 1000, "seed": 1}  # the bridge's default length (test_bridge.py)


def test_conditionals_equal_the_programs_normalized_conditionals():
    table = vg.conditional_checks(HYPER)
    assert table.passed.all(), table


def test_printed_xi_and_eta_conditionals_are_rejected():
    table = vg.conditional_checks(HYPER, sampler_hyper=vg.printed_conditionals_hyper(HYPER)).set_index("site")
    assert not table.loc["xi", "passed"] and not table.loc["eta", "passed"]
    assert table.loc["theta", "passed"] and table.loc["beta", "passed"]  # untouched by the change


@pytest.fixture(scope="module")
def xi_run():
    """HPF's default bridge block (xi, `validation.models.hpf_gibbs.BRIDGE`) as CustomGibbs beside NUTS on the
    bridge problem (12 x 10, K = 2, data key 3), 4 chains x (500 warm-up + 1000 draws), seed 1, against
    the stored, gated NUTS reference "hpf-bridge" (`validation.checks.bridge.run`; NUTS is not re-run), and the
    compile times of the run (`validation.checks.nuts_sbc.compile_counter`)."""
    with compile_counter() as compiles:
        result = bridge.run(catalog.bridge("hpf"), "xi", **SHORT)
    return result, list(compiles)


# one block in the default run (measured at SHORT: max |z| 2.38 against a Bonferroni threshold of 3.29,
# hybrid R-hat <= 1.003, bulk ESS >= 1578); all four under -m slow, at the same length
@pytest.mark.parametrize("site", ["xi", pytest.param("theta", marks=pytest.mark.slow),
                                  pytest.param("beta", marks=pytest.mark.slow), pytest.param("eta", marks=pytest.mark.slow)])
def test_each_block_as_customgibbs_beside_nuts_agrees_with_all_nuts(xi_run, site):
    result = xi_run[0] if site == "xi" else bridge.run(catalog.bridge("hpf"), site, **SHORT)
    verdict = result.verdict  # Bonferroni, false alarm 1% per group; reference and hybrid gated
    assert verdict.gates.passed, verdict.gates.failures
    assert verdict.status == "pass", (verdict.reasons, verdict.table)


def test_a_wrong_block_fails_beside_nuts(xi_run):
    """The xi block given the printed conditional's hyperparameters fails on xi; it is the same compiled
    program as the correct block's run (the hyperparameters are a traced input, `validation.checks.bridge.HyperGibbs`),
    so it compiles (almost) nothing: measured 1 compilation against 30 for the first run."""
    with compile_counter() as compiles:
        wrong = bridge.run(catalog.bridge("hpf"), "xi", block_hyper=vg.printed_conditionals_hyper(HYPER), **SHORT)
    verdict = wrong.verdict
    assert verdict.status == "fail"
    assert any(r.startswith("xi") for r in verdict.reasons)
    assert len(compiles) <= 2, compiles


def test_gibbs_agrees_with_nuts_within_monte_carlo_error(tmp_path):
    """Gibbs against the stored NUTS reference of the bridge problem (both gated)."""
    result = vg.run_crosscheck(vhpf.CROSSCHECK_BRIDGE, vg.GibbsCrosscheckConfig(num_warmup=1000, num_samples=1000, thin=5),
                               reference="stored")
    verdict = result.verdict
    assert result.reference.stored
    assert result.extra["update_table"].passed.all()
    assert verdict.gates.passed, verdict.gates.failures
    assert verdict.status == "pass", (verdict.reasons, verdict.table)
    report = crosscheck_report(result, tmp_path).read_text()
    assert "**Verdict: PASS**" in report and "two exact methods" in report
