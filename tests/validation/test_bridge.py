"""The bridge: every Gibbs block of every sampler as a NumPyro CustomGibbs block beside NUTS.

Each hybrid run (one block drawn by the sampler's own conditional, NUTS on the rest of the
program) is compared with the model's stored, gated NUTS reference on identified quantities:
every posterior mean within the Bonferroni threshold of |mean diff| / sqrt(mcse_a^2 + mcse_b^2)
(`validation.crosscheck.compare_exact`, 1% false alarm per group), the reference gated by the ArviZ
gates, the hybrid on R-hat and ESS as an exact sampler is in the cross-checks (its NUTS block's
divergences are reported). Default run: every latent site of BPMF's program in one block and a
wrong conditional of BPMF's hyperparameter block caught (HPF's xi block runs in test_hpf_gibbs_validation); one block per model,
every block of every model, and every model's wrong conditional under ``-m slow``.
"""

import jax
import numpy as np
import pytest

from validation import bridge, registry

# The default suite runs one wrong conditional (BPMF's (mu_U, Lambda_U) block; its agreement run is slow), 4
# chains x (500 warm-up + 1000 draws) (measured: hybrid min bulk ESS 1173, max R-hat 1.002 on the compared
# quantities); each hybrid costs 20-40 s of CPU, most of it compiling NumPyro's Gibbs(CustomGibbs, NUTS)
# program, so the other models' blocks run under -m slow (HPF's xi block runs by default in
# test_hpf_gibbs_validation), at the specs' lengths (1000 warm-up + 4000 draws per chain: hybrids mix
# more slowly than full NUTS, and the hybrid's ESS gate >= 400 is what shorter runs miss first).
SHORT = {"num_warmup": 500, "num_samples": 1000, "seed": 1}
RUN = {"seed": 1}
# Test time: BPMF's agreement run is under -m slow too (HPF's agreement and wrong-block runs go through
# the same `bridge.run_hybrid` by default in test_hpf_gibbs_validation); BPMF's wrong conditional below
# stays in the default run as the second model's check that the bridge can fail.
ONE_BLOCK_PER_MODEL = [pytest.param(m, b, marks=pytest.mark.slow) for m, b in
                       (("bpmf", "hyper_U"), ("sbmf", "U"), ("mcmc-fm", "w"), ("npfm", "alpha_w"),
                        ("ppfm", "zeta_V"), ("hpf", "xi"))]

def _latent_sites(problem):
    import numpyro

    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a) if isinstance(a, np.ndarray) else a, problem.args)
        tr = numpyro.handlers.trace(numpyro.handlers.seed(problem.model, 0)).get_trace(*args, **problem.kwargs)
    return {n: s["value"] for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}


# simulating each problem and tracing its program costs 3-15 s of CPU per model (42 s for all six):
# BPMF's by default, the others under -m slow
@pytest.mark.parametrize("model", [m if m == "bpmf" else pytest.param(m, marks=pytest.mark.slow)
                                   for m in registry.bridge_models()])
def test_blocks_partition_the_programs_latent_sites(model):
    """Every latent site of the program belongs to exactly one block: every Gibbs block has its bridge."""
    spec = registry.bridge(model)
    sites = _latent_sites(spec.problem())
    owned = [s for b in spec.blocks.values() for s in b.sites]
    assert sorted(owned) == sorted(sites), (sorted(owned), sorted(sites))
    assert spec.default in spec.blocks and spec.wrong_block in spec.blocks


@pytest.mark.slow
@pytest.mark.parametrize("model", registry.bridge_models())
def test_every_blocks_conditional_draws_its_sites(model):
    """Each block's gibbs_fn, called at a prior draw, returns finite values of its sites' shapes
    (10-40 s per model, eager: under -m slow)."""
    spec = registry.bridge(model)
    problem = spec.problem()
    sites = _latent_sites(problem)
    with jax.enable_x64(True):
        for name, block in spec.blocks.items():
            fn = block.make(problem.data, problem.hyper)
            mine = {s: sites[s] for s in block.sites}
            rest = {s: v for s, v in sites.items() if s not in block.sites}
            out = fn(jax.random.PRNGKey(0), mine, rest)
            assert set(out) == set(block.sites), name
            for s in block.sites:
                assert np.shape(out[s]) == np.shape(sites[s]), (name, s)
                assert np.all(np.isfinite(np.asarray(out[s]))), (name, s)

def test_unknown_block_and_model_are_named():
    with pytest.raises(ValueError, match="unknown block or site"):
        registry.bridge("bpmf").block("W")
    assert registry.bridge("bpmf").block("Lambda_U")[0] == "hyper_U"  # a site finds its block
    with pytest.raises(KeyError, match="no bridge"):
        registry.bridge("vbfm")


@pytest.mark.parametrize("model,block", ONE_BLOCK_PER_MODEL)
def test_one_block_of_each_sampler_agrees_with_stored_nuts(model, block):
    result = bridge.run(model, block, **(SHORT if model == "bpmf" else RUN))
    v = result.verdict
    assert v.gates.passed, v.gates.failures  # reference gated (R-hat, ESS, divergences, E-BFMI), hybrid (R-hat, ESS)
    assert v.status == "pass", (v.reasons, v.table)  # Bonferroni, 1% false alarm per group


def test_a_wrong_conditional_is_caught():
    """BPMF's (mu_U, Lambda_U) block given nu0 + 5 instead of nu0 (a wrongly derived Normal-Wishart
    conditional): the chain's stationary distribution moves and the comparison fails on log det Lambda."""
    spec = registry.bridge("bpmf")
    wrong = spec.wrong_hyper(spec.problem().hyper)
    result = bridge.run("bpmf", spec.wrong_block, block_hyper=wrong, **SHORT)
    assert result.verdict.status == "fail", (result.verdict.reasons, result.verdict.table)
    assert any(r.startswith("logdet_Lambda") for r in result.verdict.reasons), result.verdict.reasons

def _all_blocks():
    out = []
    for model in registry.bridge_models():
        spec = registry.bridge(model)
        out += [pytest.param(model, b, marks=pytest.mark.slow, id=f"{model}-{b}") for b in spec.blocks]
    return out


@pytest.mark.parametrize("model,block", _all_blocks())
def test_every_block_agrees_with_stored_nuts(model, block):
    result = bridge.run(model, block, **RUN)
    v = result.verdict
    assert v.gates.passed, v.gates.failures
    assert v.status == "pass", (v.reasons, v.table)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sbmf", "mcmc-fm", "npfm", "ppfm", "hpf"])
def test_each_models_wrong_conditional_is_caught(model):
    spec = registry.bridge(model)
    wrong = spec.wrong_hyper(spec.problem().hyper)
    result = bridge.run(model, spec.wrong_block, block_hyper=wrong, **RUN)
    assert result.verdict.status == "fail", (result.verdict.reasons, result.verdict.table)
