"""The HPF Gibbs sampler against the NumPyro program: conditionals, CustomGibbs blocks, NUTS."""

import pytest

from validation import crosscheck as xc
from validation import hpf_gibbs as vg
from validation import hpf as vhpf
from validation.report import crosscheck_report
from validation.hpf import CROSSCHECK_DEFAULT, identifiable_quantities

HYPER = CROSSCHECK_DEFAULT.hyper  # a' = 2, b' = 1: prior rate a'/b' = 2 differs from the printed b' = 1


def test_conditionals_equal_the_programs_normalized_conditionals():
    table = vg.conditional_checks(HYPER)
    assert table.passed.all(), table


def test_printed_xi_and_eta_conditionals_are_rejected():
    table = vg.conditional_checks(HYPER, sampler_hyper=vg.printed_conditionals_hyper(HYPER)).set_index("site")
    assert not table.loc["xi", "passed"] and not table.loc["eta", "passed"]
    assert table.loc["theta", "passed"] and table.loc["beta", "passed"]  # untouched by the change


@pytest.fixture(scope="module")
def small_nuts():
    """The stored, gated NUTS reference "hpf-bridge" (12 x 10, K = 2, data key 3, NUTS seed 0; `validation.references`):
    its summaries stand in for the draws in `compare_exact`, so NUTS is not re-run here."""
    ref = vhpf.nuts_reference(vhpf.CROSSCHECK_BRIDGE, reference="stored")
    g = ref.gates()
    assert g.passed, g.failures
    return vhpf.simulated_data(vhpf.CROSSCHECK_BRIDGE), ref, ref.summary, g


# one block in the default run (each hybrid costs a NUTS run); all four under -m slow
@pytest.mark.parametrize("site", ["xi", pytest.param("theta", marks=pytest.mark.slow),
                                  pytest.param("beta", marks=pytest.mark.slow), pytest.param("eta", marks=pytest.mark.slow)])
def test_each_block_as_customgibbs_beside_nuts_agrees_with_all_nuts(small_nuts, site):
    y, _, nq, g = small_nuts
    hybrid = vg.run_hybrid(y, 2, HYPER, site, seed=1, num_warmup=500, num_samples=1000)
    verdict = xc.compare_exact(identifiable_quantities(hybrid), nq, g)  # Bonferroni, false alarm 1% per group
    assert verdict.status == "pass", (verdict.reasons, verdict.table)


def test_a_wrong_block_fails_beside_nuts(small_nuts):
    y, _, nq, g = small_nuts
    wrong = vg.run_hybrid(y, 2, HYPER, "xi", block_hyper=vg.printed_conditionals_hyper(HYPER), seed=1,
                          num_warmup=500, num_samples=1000)
    verdict = xc.compare_exact(identifiable_quantities(wrong), nq, g)
    assert verdict.status == "fail"
    assert any(r.startswith("xi") for r in verdict.reasons)


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
