"""The bridge: every Gibbs block of every sampler as a NumPyro CustomGibbs block beside NUTS.

Each hybrid run (one block drawn by the sampler's own conditional, NUTS on the rest of the
program) is compared with the model's stored, gated NUTS reference on identified quantities:
every posterior mean within the Bonferroni threshold of |mean diff| / sqrt(mcse_a^2 + mcse_b^2)
(`validation.checks.crosscheck.compare_exact`, 1% false alarm per group), the reference gated by the ArviZ
gates, the hybrid on R-hat and ESS as an exact sampler is in the cross-checks (its NUTS block's
divergences are reported). Default run: each sampler's default block (`BridgeSpec.default`) at the
short length below (HPF's in test_hpf_gibbs_validation), and BPMF's wrong conditional (its wrong block is
its default block: the wrong run reuses the agreement run's compiled program, checked by counting XLA
compilations); every block of every model at the specs' lengths, and every model's wrong conditional,
under ``-m slow``.
"""

import jax
import numpy as np
import pytest

from validation.checks import bridge
from validation.checks.nuts_sbc import compile_counter
from validation.models import catalog

# The default runs: 4 chains x (500 warm-up + 1000 draws), the length at which each model's default
# block was measured to pass its gates (hybrid R-hat <= 1.01 and bulk / tail ESS >= 400 on every
# compared quantity; the blocks and their margins are in BridgeSpec.default's comment of each model).
# Each hybrid's first run costs 10-15 s of CPU compiling NumPyro's Gibbs(CustomGibbs, NUTS) program; a
# wrong-conditional run of the same block is the same program (its hyperparameters are a traced input,
# `bridge.HyperGibbs`) and is served by the test run's JAX compilation cache (tests/conftest.py).
# Under -m slow every block runs at the specs' lengths (1000 warm-up + 4000 draws per chain: hybrids mix
# more slowly than full NUTS, and the hybrid's ESS gate >= 400 is what shorter runs miss first).
SHORT = {"num_warmup": 500, "num_samples": 1000, "seed": 1}
RUN = {"seed": 1}
# HPF's default block runs in test_hpf_gibbs_validation (agreement and wrong conditional); SBMF's under -m slow:
# at SHORT every SBMF block tried is inconclusive on tau (hybrid R-hat 1.012, bulk ESS 218-390; validation/models/sbmf.py).
# PPFM's too: its best block at SHORT (beta) passed with a tail ESS of 401 against the gate's 400, a margin
# that another CPU's floating-point rounding could flip; NPFM's default block runs the same pfm_bridge code
SLOW_ONLY = ("hpf", "sbmf", "ppfm")
DEFAULT_MODELS = [m if m not in SLOW_ONLY else pytest.param(m, marks=pytest.mark.slow) for m in catalog.bridge_models()]
# the models whose wrong conditional runs by default (HPF's in test_hpf_gibbs_validation): their wrong block is
# their default block, so the wrong run reuses the agreement run's compiled program (7 CPU s against 31).
# NPFM's wrong alpha_w block at SHORT is inconclusive (hybrid rate bulk ESS 357 < 400) and MCMC-FM's costs
# 29 CPU s of sampling: with the other models' at the specs' lengths, under -m slow
WRONG_BY_DEFAULT = ("bpmf",)
WRONG_MODELS = [m if m in WRONG_BY_DEFAULT else pytest.param(m, marks=pytest.mark.slow)
                for m in catalog.bridge_models() if m != "hpf"]


@pytest.fixture(scope="module")
def default_runs():
    """model -> (BridgeResult of its default block at SHORT (SLOW_ONLY models: at the spec's length), the compile
    times of that run): run once per module."""
    done = {}

    def get(model):
        if model not in done:
            with compile_counter() as compiles:
                result = bridge.run(catalog.bridge(model), **(RUN if model in SLOW_ONLY else SHORT))
            done[model] = (result, list(compiles))
        return done[model]

    return get


def _latent_sites(problem):
    import numpyro

    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a) if isinstance(a, np.ndarray) else a, problem.args)
        tr = numpyro.handlers.trace(numpyro.handlers.seed(problem.model, 0)).get_trace(*args, **problem.kwargs)
    return {n: s["value"] for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}


# simulating each problem and tracing its program costs 3-15 s of CPU per model (42 s for all six):
# BPMF's by default, the others under -m slow
@pytest.mark.parametrize("model", [m if m == "bpmf" else pytest.param(m, marks=pytest.mark.slow)
                                   for m in catalog.bridge_models()])
def test_blocks_partition_the_programs_latent_sites(model):
    """Every latent site of the program belongs to exactly one block: every Gibbs block has its bridge."""
    spec = catalog.bridge(model)
    sites = _latent_sites(spec.problem())
    owned = [s for b in spec.blocks.values() for s in b.sites]
    assert sorted(owned) == sorted(sites), (sorted(owned), sorted(sites))
    assert spec.default in spec.blocks and spec.wrong_block in spec.blocks


@pytest.mark.slow
@pytest.mark.parametrize("model", catalog.bridge_models())
def test_every_blocks_conditional_draws_its_sites(model):
    """Each block's gibbs_fn, called at a prior draw, returns finite values of its sites' shapes
    (10-40 s per model, eager: under -m slow)."""
    spec = catalog.bridge(model)
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
        catalog.bridge("bpmf").block("W")
    assert catalog.bridge("bpmf").block("Lambda_U")[0] == "hyper_U"  # a site finds its block
    with pytest.raises(KeyError, match="no bridge"):
        catalog.bridge("vbfm")


@pytest.mark.parametrize("model", DEFAULT_MODELS)
def test_one_block_of_each_sampler_agrees_with_stored_nuts(model, default_runs):
    result, _ = default_runs(model)
    assert result.block == catalog.bridge(model).default
    v = result.verdict
    assert v.gates.passed, v.gates.failures  # reference gated (R-hat, ESS, divergences, E-BFMI), hybrid (R-hat, ESS)
    assert v.status == "pass", (v.reasons, v.table)  # Bonferroni, 1% false alarm per group


@pytest.mark.parametrize("model", WRONG_MODELS)
def test_a_wrong_conditional_is_caught(model, default_runs):
    """The model's wrong block given a perturbed hyperparameter set (BPMF: the (mu_U, Lambda_U) block given
    nu0 + 5 instead of nu0, a wrongly derived Normal-Wishart conditional): the chain's stationary
    distribution moves and the comparison fails. When the wrong block is the default block, the run
    reuses the agreement run's compiled program: at most 2 XLA compilations (measured: 1, against
    30-170 for a model's first run)."""
    spec = catalog.bridge(model)
    shared = model in WRONG_BY_DEFAULT and spec.wrong_block == spec.default
    if shared:
        default_runs(model)  # the agreement run compiles the program first
    with compile_counter() as compiles:
        result = bridge.run(catalog.bridge(model), spec.wrong_block, block_hyper=spec.wrong_hyper(spec.problem().hyper),
                            **(SHORT if model in WRONG_BY_DEFAULT else RUN))
    assert result.verdict.status == "fail", (result.verdict.reasons, result.verdict.table)
    if model == "bpmf":
        assert any(r.startswith("logdet_Lambda") for r in result.verdict.reasons), result.verdict.reasons
    if shared:
        assert len(compiles) <= 2, compiles


def _all_blocks():
    out = []
    for model in catalog.bridge_models():
        spec = catalog.bridge(model)
        out += [pytest.param(model, b, marks=pytest.mark.slow, id=f"{model}-{b}") for b in spec.blocks]
    return out


@pytest.mark.parametrize("model,block", _all_blocks())
def test_every_block_agrees_with_stored_nuts(model, block):
    result = bridge.run(catalog.bridge(model), block, **RUN)
    v = result.verdict
    assert v.gates.passed, v.gates.failures
    assert v.status == "pass", (v.reasons, v.table)
