"""The bridge: each Gibbs block of a hand-derived sampler as a NumPyro ``CustomGibbs`` block beside NUTS.

DESIGN.md: "Each Gibbs block's conditional is also usable as a NumPyro `CustomGibbs` block, so it
can be checked on its own next to NUTS on the same model." For one block (one or several sites
of the NumPyro program), `run_hybrid` runs NumPyro's composite kernel

    Gibbs([(CustomGibbs(our conditional), block sites), (NUTS(program), every other site)])

so the block is drawn by the sampler's own public conditional functions and everything else by
NUTS on the program's conditional. The chain leaves the program's posterior invariant exactly when
the block draws from the right conditional; `compare` then puts its identified quantities (rates,
predictions, hyperparameters; never raw factor coordinates) next to the model's stored, gated
NUTS reference (`validation.references`, not re-run): every posterior mean must agree within
Monte Carlo error, |mean_hybrid - mean_NUTS| <= z sqrt(mcse_hybrid^2 + mcse_NUTS^2) with z the
Bonferroni threshold of `validation.crosscheck.compare_exact` (1% false alarm per group). A wrong
conditional (try `run` with a perturbed ``block_hyper``) moves the stationary distribution and
shows up in its block alone.

Gates: the stored NUTS reference must pass the project's ArviZ gates (`validation.gates`), or the
verdict is "inconclusive"; the hybrid run is gated as an exact sampler is in the cross-checks
(rank R-hat, bulk and tail ESS on the compared quantities), since its MCSEs mean something only
if it mixes. Its NUTS block's divergent transitions are counted and reported (``BridgeResult.
settings["divergences"]``, `agreement_table`), not gated: that block adapts to a conditional that
moves with every Gibbs draw, and 1-5 divergences in 4 x 4000 transitions were measured on SBMF's
and HPF's theta blocks, whose means agree with NUTS (max |z| 1.5-2.2). Each model declares a `BridgeSpec` (its problem and its blocks) in its validation
module; `validation.registry.BRIDGES` lists them, and `run(model, block)` is the Python entry.

Source: project addition (validation level 2; NumPyro's composable ``Gibbs`` / ``CustomGibbs``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import arviz_io

from . import crosscheck as xc
from .gates import nuts_gates

__all__ = ["Block", "Problem", "BridgeSpec", "BridgeResult", "run_hybrid", "compare", "run", "run_all",
           "agreement_table"]


@dataclass(frozen=True)
class Block:
    """One Gibbs block: the program's ``sites`` it owns and ``make(data, hyper) -> gibbs_fn``, the
    factory of the ``gibbs_fn(rng_key, gibbs_sites, hmc_sites) -> {site: array}`` that
    `numpyro.infer.CustomGibbs` calls (built on the sampler's public conditionals).
    Source: project addition."""

    sites: tuple
    make: Callable


@dataclass(frozen=True)
class Problem:
    """A bridge problem: the NumPyro ``model`` with ``args`` / ``kwargs`` (the data as the program
    takes it), the sampler-side ``data`` and ``hyper`` the block factories read,
    ``quantities(idata) -> dict group -> (chain, draw, Q)`` (the groups of the reference),
    ``reference() -> validation.references.Reference`` (the stored, gated NUTS run of this problem),
    ``target_accept`` of the hybrid's NUTS block and a one-line ``description``.
    Source: project addition."""

    model: Callable
    args: tuple
    data: object
    hyper: object
    quantities: Callable
    reference: Callable
    kwargs: Mapping = field(default_factory=dict)
    target_accept: float = 0.8
    description: str = ""


@dataclass(frozen=True)
class BridgeSpec:
    """What a model declares: ``problem()`` -> `Problem`; ``blocks``: block name -> `Block` (every
    Gibbs block of the sampler); ``default``: the block the default test suite runs; ``wrong_hyper``:
    hyper -> a perturbed hyperparameter set given to one block to show that a wrong conditional
    is caught (None: none declared); ``wrong_block``: the block it is given to; ``num_warmup``,
    ``num_samples``: the hybrid run's length per chain (a hybrid mixes more slowly than full NUTS:
    its NUTS block adapts to a conditional that moves with every Gibbs draw, and the Gibbs block
    alternates with NUTS on strongly coupled sites).
    Source: project addition."""

    problem: Callable
    blocks: Mapping[str, Block]
    default: str
    wrong_hyper: Callable | None = None
    wrong_block: str | None = None
    num_warmup: int = 1000
    num_samples: int = 4000

    def block(self, name: str) -> tuple[str, Block]:
        """(block name, `Block`) for a block name or a site owned by exactly one block.
        Raises ValueError for anything else."""
        if name in self.blocks:
            return name, self.blocks[name]
        owners = [b for b, blk in self.blocks.items() if name in blk.sites]
        if len(owners) == 1:
            return owners[0], self.blocks[owners[0]]
        raise ValueError(f"unknown block or site {name!r}; blocks: "
                         + ", ".join(f"{b} {tuple(blk.sites)}" for b, blk in self.blocks.items()))


@dataclass(frozen=True)
class BridgeResult:
    """One hybrid run against its reference: ``model``, ``block``, ``sites``; ``verdict``
    (`validation.crosscheck.Verdict`: "pass" / "fail" / "inconclusive"; its ``table`` has one row per
    group with ``max_z`` and the Bonferroni ``threshold``); ``quantities`` (group -> hybrid draws
    (chain, draw, Q)); ``idata`` (the hybrid's InferenceData); ``reference``; ``seconds`` (hybrid
    run); ``settings`` (chains, warmup, draws, seed, block_hyper)."""

    model: str
    block: str
    sites: tuple
    verdict: xc.Verdict
    quantities: dict = field(repr=False)
    idata: object = field(repr=False)
    reference: object = field(repr=False)
    seconds: float
    settings: dict

    @property
    def max_z(self) -> float:
        """The largest |difference of means| / MCSE over every compared quantity."""
        return float(self.verdict.table.max_z.max())


def _draws_and_divergences(mcmc, nuts_index: int):
    try:
        div = mcmc.get_extra_fields(group_by_chain=True).get(f"block_states.{nuts_index}.diverging")
    except Exception:  # noqa: BLE001 (a NumPyro without addressable block fields: reported as unknown)
        div = None
    return None if div is None else int(np.sum(np.asarray(div)))


def run_hybrid(model, model_args: tuple, sites, gibbs_fn, *, model_kwargs=None, seed: int = 0, num_chains: int = 4,
               num_warmup: int = 500, num_samples: int = 1000, target_accept: float = 0.8, progress: bool = False,
               label: str | None = None, divergences: bool = False):
    """NumPyro MCMC with ``sites`` drawn by ``gibbs_fn`` (`CustomGibbs`) and NUTS on every other site.

    ``model(*model_args, **model_kwargs)``: the NumPyro program; ``sites``: the block's site names;
    ``gibbs_fn(rng_key, gibbs_sites, hmc_sites)`` -> dict site -> new value (constrained); numpy
    arrays among ``model_args`` become float64 / int64 jax arrays inside the run. Chains run
    in parallel when JAX has enough devices, else one after the other (NumPyro's ``Gibbs`` does
    not vectorize chains); float64. With ``divergences`` the
    NUTS block's divergent transitions are recorded (``idata.attrs["divergences"]``, None when
    NumPyro does not expose them). Returns the InferenceData (posterior (chain, draw, ...)).
    Raises ValueError (NumPyro's) when ``sites`` are not latent sites of the program.
    Source: project addition (validation level 2: one Gibbs block beside NUTS).
    """
    from numpyro.infer import MCMC, NUTS, CustomGibbs, Gibbs

    sites = [sites] if isinstance(sites, str) else list(sites)
    nuts = NUTS(model) if target_accept == 0.8 else NUTS(model, target_accept_prob=target_accept)
    kernel = Gibbs([(CustomGibbs(gibbs_fn), sites), (nuts, None)])
    # NumPyro's Gibbs takes one key per chain: parallel chains over host devices (the CLI and the tests
    # force 4), else one after the other
    method = "parallel" if jax.local_device_count() >= num_chains else "sequential"
    label = label or f"gibbs[{','.join(sites)}]+nuts"
    with jax.enable_x64(True):
        mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                    chain_method=method, progress_bar=progress)
        extra = {"extra_fields": ("block_states.1.diverging",)} if divergences else {}
        args = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, tuple(model_args))
        mcmc.run(jax.random.PRNGKey(seed), *args, **extra, **dict(model_kwargs or {}))
        idata = arviz_io.from_numpyro(mcmc, attrs={"method": label, "seed": seed})
    if divergences:
        idata.attrs["divergences"] = _draws_and_divergences(mcmc, 1)
    return idata


def compare(quantities: dict, reference, *, divergences: int | None = 0, gate_divergences: bool = False,
            false_alarm: float = 0.01) -> xc.Verdict:
    """The hybrid's quantities against a NUTS reference within Monte Carlo error.

    ``quantities``: group -> hybrid draws (chain, draw, Q) (groups of the reference); ``reference``: a
    `validation.references.Reference`. Gates (`validation.crosscheck.combined_gates`): the
    reference's (R-hat, ESS, divergences, E-BFMI: the ground truth) and the hybrid's R-hat / ESS, as
    `validation.crosscheck.exact_gates` gates an exact sampler (its MCSEs mean something only if it
    mixes). The divergent transitions of the hybrid's NUTS block (``divergences``) are reported by
    `run`, and gated only with ``gate_divergences``: the NUTS block adapts its step size to a
    conditional that moves with every Gibbs draw, and a few divergences in 4 x 4000 transitions
    were measured on blocks whose means agree (module docstring). Verdict of
    `validation.crosscheck.compare_exact` (Bonferroni per group, ``false_alarm`` per group).
    Raises KeyError when the reference lacks a group, ValueError when draws are not 3-D.
    Source: project addition (validation level 2).
    """
    nq = {g: reference.summary[g] for g in quantities}
    ref_gates = nuts_gates(nq, divergences=reference.divergences, bfmi=reference.bfmi)
    hybrid_div = int(divergences or 0) if gate_divergences else 0
    hybrid_gates = nuts_gates(quantities, divergences=hybrid_div, bfmi=np.array([]))
    gates = xc.combined_gates(ref_gates, hybrid_gates, "hybrid")
    return xc.compare_exact(quantities, nq, gates, false_alarm=false_alarm)

def _spec(model: str) -> BridgeSpec:
    from . import registry

    return registry.bridge(model)


def run(model: str, site: str | None = None, *, block_hyper=None, seed: int = 1, num_chains: int = 4,
        num_warmup: int | None = None, num_samples: int | None = None, problem: Problem | None = None,
        progress: bool = False) -> BridgeResult:
    """Run one block of ``model``'s sampler as ``CustomGibbs`` beside NUTS and compare with its stored NUTS reference.

    ``model``: a name of `validation.registry.BRIDGES` ("hpf", "sbmf", "bpmf", "mcmc-fm", "npfm",
    "ppfm"); ``site``: a block name or a site owned by one block (default the spec's ``default``);
    ``block_hyper``: the hyperparameters the block's conditional is given (default the problem's:
    pass another to simulate a wrong conditional); ``problem``: default the spec's; ``num_warmup``,
    ``num_samples``: per chain, default the spec's (1000 and 4000 unless it says otherwise). Returns a
    `BridgeResult`. Raises KeyError for an unknown model, ValueError for an unknown block, and
    ValueError when no stored reference matches the problem.
    Source: project addition (validation level 2).
    """
    spec = _spec(model)
    name, block = spec.block(site or spec.default)
    p = problem or spec.problem()
    hyper = p.hyper if block_hyper is None else block_hyper
    num_warmup = spec.num_warmup if num_warmup is None else num_warmup
    num_samples = spec.num_samples if num_samples is None else num_samples
    start = time.perf_counter()
    with jax.enable_x64(True):  # the factories may convert the data to jax arrays: keep float64
        gibbs_fn = block.make(p.data, hyper)
    idata = run_hybrid(p.model, p.args, block.sites, gibbs_fn, model_kwargs=p.kwargs, seed=seed,
                       num_chains=num_chains, num_warmup=num_warmup, num_samples=num_samples,
                       target_accept=p.target_accept, progress=progress, divergences=True)
    seconds = time.perf_counter() - start
    quantities = p.quantities(idata)
    ref = p.reference()
    verdict = compare(quantities, ref, divergences=idata.attrs.get("divergences"))
    settings = {"chains": num_chains, "warmup": num_warmup, "draws": num_samples, "seed": seed,
                "block_hyper": "problem's" if block_hyper is None else repr(block_hyper),
                "divergences": idata.attrs.get("divergences"), "problem": p.description}
    return BridgeResult(model, name, tuple(block.sites), verdict, quantities, idata, ref, seconds, settings)


def run_all(model: str, **kwargs) -> list[BridgeResult]:
    """`run` for every block of ``model`` (kwargs go to `run`). Raises what `run` raises.
    Source: project addition."""
    spec = _spec(model)
    problem = kwargs.pop("problem", None) or spec.problem()
    return [run(model, b, problem=problem, **kwargs) for b in spec.blocks]


def agreement_table(results) -> pd.DataFrame:
    """One row per `BridgeResult`: model, block, sites, status, max_z (over all groups), the smallest
    Bonferroni threshold, chains, draws, hybrid_divergences, gates_passed, failures, seconds. Raises nothing of its own.
    Source: project addition."""
    rows = []
    for r in results:
        v = r.verdict
        rows.append({"model": r.model, "block": r.block, "sites": ",".join(r.sites), "status": v.status,
                     "max_z": r.max_z, "threshold": float(v.table.threshold.min()),
                     "chains": r.settings["chains"], "draws": r.settings["draws"],
                     "hybrid_divergences": r.settings["divergences"],
                     "gates_passed": v.gates.passed, "failures": "; ".join(v.gates.failures + v.reasons),
                     "seconds": round(r.seconds, 1)})
    return pd.DataFrame(rows)

