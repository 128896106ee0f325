"""The HPF Gibbs sampler against the NumPyro program: conditionals, CustomGibbs blocks, NUTS."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_models import hpf as ppl
from validation import crosscheck as xc
from validation import gates
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
    _, y = ppl.simulate(jax.random.PRNGKey(3), 12, 10, 2, HYPER)
    y = np.asarray(y)
    nuts = xc.run_nuts(ppl.model, jnp.asarray(y), 2, HYPER, seed=0, num_warmup=500, num_samples=1000, progress=False)
    q = identifiable_quantities(nuts.idata)
    g = gates.nuts_gates(q, divergences=nuts.divergences, bfmi=nuts.bfmi)
    assert g.passed, g.failures
    return y, nuts, q, g


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


def test_gibbs_agrees_with_nuts_within_monte_carlo_error(small_nuts, tmp_path):
    y, nuts, _, _ = small_nuts
    cfg = vhpf.CrosscheckConfig(n_users=12, n_items=10, n_components=2)
    result = vg.run_gibbs_crosscheck(y, cfg, vg.GibbsCrosscheckConfig(num_warmup=1000, num_samples=1000, thin=5), nuts=nuts)
    verdict = result.verdict
    assert result.extra["update_table"].passed.all()
    assert verdict.gates.passed, verdict.gates.failures
    assert verdict.status == "pass", (verdict.reasons, verdict.table)
    report = crosscheck_report(result, tmp_path).read_text()
    assert "**Verdict: PASS**" in report and "two exact methods" in report
