"""The bridge: each Gibbs block of a hand-derived sampler as a NumPyro ``CustomGibbs`` block beside NUTS.

DESIGN.md: "Each Gibbs block's conditional is also usable as a NumPyro `CustomGibbs` block, so it
can be checked on its own next to NUTS on the same model." For one block (one or several sites
of the NumPyro program), `run_hybrid` runs NumPyro's composite kernel

    Gibbs([(CustomGibbs(our conditional), block sites), (NUTS(program), every other site)])

so the block is drawn by the sampler's own public conditional functions and everything else by
NUTS on the program's conditional. The chain leaves the program's posterior invariant exactly when
the block draws from the right conditional; `compare` then puts its identified quantities (rates,
predictions, hyperparameters; never raw factor coordinates) next to the model's stored, gated
NUTS reference (`validation.checks.references`, not re-run): every posterior mean must agree within
Monte Carlo error, |mean_hybrid - mean_NUTS| <= z sqrt(mcse_hybrid^2 + mcse_NUTS^2) with z the
Bonferroni threshold of `validation.checks.crosscheck.compare_exact` (1% false alarm per group). A wrong
conditional (try `run` with a perturbed ``block_hyper``) moves the stationary distribution and
shows up in its block alone.

Gates: the stored NUTS reference must pass the project's ArviZ gates (`validation.checks.gates`), or the
verdict is "inconclusive"; the hybrid run is gated as an exact sampler is in the cross-checks
(rank R-hat, bulk and tail ESS on the compared quantities), since its MCSEs mean something only
if it mixes. Its NUTS block's divergent transitions are counted and reported (``BridgeResult.
settings["divergences"]``, `agreement_table`), not gated: that block adapts to a conditional that
moves with every Gibbs draw, and 1-5 divergences in 4 x 4000 transitions were measured on SBMF's
and HPF's theta blocks, whose means agree with NUTS (max |z| 1.5-2.2). Each model declares a `BridgeSpec` (its problem and its blocks) in its validation
module; the declaration's ``bridge`` (`validation.checks.registry.ModelSpec`) names it, and `run(model, block)` is the Python entry.

One compiled program per block: `run` gives the block's hyperparameters to its conditional as a traced
input of the chain program (`HyperGibbs`: the conditional is rebuilt from ``Block.make`` inside the
trace, with the hyperparameters read from a model keyword that the chains receive as an argument,
not as constants), so the agreement run and a wrong-conditional run of the same block lower to the
same XLA program, and the second is served by JAX's compilation cache (the persistent cache that
tests/conftest.py sets up; `validation.checks.nuts_sbc.compile_counter` counts the compilations).

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
from numpyro.infer import CustomGibbs

from custom_inference import arviz_io

from validation.checks import crosscheck as xc
from validation.checks.gates import nuts_gates

__all__ = ["Block", "Problem", "BridgeSpec", "BridgeResult", "HyperGibbs", "TracedBlock", "run_hybrid", "compare",
           "run", "run_all", "agreement_table", "HYPER_KWARG"]

HYPER_KWARG = "_bridge_block_hyper"
"""The model keyword through which `HyperGibbs` receives its block's hyperparameters (traced)."""


@dataclass(frozen=True)
class Block:
    """One Gibbs block of a hand-derived sampler.

    Parameters
    ----------
    sites : tuple of str
        The program's latent sites the block owns.
    make : callable
        ``make(data, hyper) -> gibbs_fn``, the factory of the ``gibbs_fn(rng_key, gibbs_sites,
        hmc_sites) -> {site: array}`` that `numpyro.infer.CustomGibbs` calls (built on the sampler's
        public conditionals; the arrays have the sites' shapes, constrained values).

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition.
    """

    sites: tuple
    make: Callable


@dataclass(frozen=True)
class Problem:
    """A bridge problem: the program, its data on both sides, and its stored NUTS reference.

    Parameters
    ----------
    model : callable
        The NumPyro program.
    args : tuple
        Its positional arguments (the data as the program takes it).
    data : object
        The sampler-side data the block factories read (``Block.make(data, hyper)``).
    hyper : object
        The sampler-side hyperparameters (a pytree) the block factories read.
    quantities : callable
        ``quantities(idata) -> dict group -> float array (chain, draw, Q)``: identified quantities, the
        groups of the reference.
    reference : callable
        ``reference() -> validation.checks.references.Reference``: the stored, gated NUTS run of this
        problem.
    kwargs : mapping, default {}
        The program's keyword arguments.
    target_accept : float, default 0.8
        Target acceptance probability of the hybrid's NUTS block.
    description : str, default ""
        One line for reports.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition.
    """

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
    """What a model declares for the bridge: its problem and its Gibbs blocks.

    Parameters
    ----------
    problem : callable
        ``problem() -> Problem``.
    blocks : mapping str -> Block
        Block name -> `Block`, every Gibbs block of the sampler.
    default : str
        The block the default test suite runs.
    wrong_hyper : callable, optional
        ``wrong_hyper(hyper) -> hyper``: a perturbed hyperparameter set given to one block to show that
        a wrong conditional is caught (None: none declared).
    wrong_block : str, optional
        The block ``wrong_hyper`` is given to.
    num_warmup : int, default 1000
        Warmup of the hybrid run per chain.
    num_samples : int, default 4000
        Kept draws of the hybrid run per chain (a hybrid mixes more slowly than full NUTS: its NUTS
        block adapts to a conditional that moves with every Gibbs draw, and the Gibbs block alternates
        with NUTS on strongly coupled sites).
    model : str, default ""
        The model's name in results and reports (`validation.models.catalog.bridge` fills it in).

    Raises
    ------
    None of its own (a frozen dataclass; `block` checks names when used).

    Source: project addition.
    """

    problem: Callable
    blocks: Mapping[str, Block]
    default: str
    wrong_hyper: Callable | None = None
    wrong_block: str | None = None
    num_warmup: int = 1000
    num_samples: int = 4000
    model: str = ""

    def block(self, name: str) -> tuple[str, Block]:
        """The block named ``name``, or the one block owning the site ``name``.

        Parameters
        ----------
        name : str
            A block name or a site owned by exactly one block.

        Returns
        -------
        tuple (str, Block)
            The block's name and the `Block`.

        Raises
        ------
        ValueError
            ``name`` is neither a block nor a site of exactly one block (the message lists the blocks).

        Source: project addition.
        """
        if name in self.blocks:
            return name, self.blocks[name]
        owners = [b for b, blk in self.blocks.items() if name in blk.sites]
        if len(owners) == 1:
            return owners[0], self.blocks[owners[0]]
        raise ValueError(f"unknown block or site {name!r}; blocks: "
                         + ", ".join(f"{b} {tuple(blk.sites)}" for b, blk in self.blocks.items()))


@dataclass(frozen=True)
class BridgeResult:
    """One hybrid run against its reference (made by `run`).

    Parameters
    ----------
    model : str
        The model's name.
    block : str
        The block's name.
    sites : tuple of str
        The block's sites.
    verdict : validation.checks.crosscheck.Verdict
        "pass" / "fail" / "inconclusive"; its ``table`` has one row per group with ``max_z`` and the
        Bonferroni ``threshold``.
    quantities : dict group name -> numpy.ndarray, shape (chain, draw, Q)
        The hybrid's draws of the identified quantities.
    idata : arviz.InferenceData
        The hybrid's draws.
    reference : validation.checks.references.Reference
        The stored NUTS reference compared against.
    seconds : float
        Wall-clock seconds of the hybrid run.
    settings : dict
        chains, warmup, draws, seed, block_hyper, divergences (of the NUTS block, or None), problem.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (validation level 2).
    """

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
        """The largest |difference of means| / MCSE over every compared quantity (a float).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return float(self.verdict.table.max_z.max())


def _draws_and_divergences(mcmc, nuts_index: int):
    try:
        div = mcmc.get_extra_fields(group_by_chain=True).get(f"block_states.{nuts_index}.diverging")
    except Exception:  # noqa: BLE001 (a NumPyro without addressable block fields: reported as unknown)
        div = None
    return None if div is None else int(np.sum(np.asarray(div)))


def _is_float_leaf(x) -> bool:
    return isinstance(x, (float, np.floating)) or (
        isinstance(x, (np.ndarray, jax.Array)) and jnp.issubdtype(x.dtype, jnp.floating))


@dataclass(frozen=True)
class TracedBlock:
    """A block's conditional given as its factory, for `run_hybrid`.

    `run_hybrid` passes the floating-point leaves of ``hyper`` to the chains as a traced input
    (`HyperGibbs`), so runs that differ only in them share one compiled program.

    Parameters
    ----------
    make : callable
        ``make(data, hyper) -> gibbs_fn`` (a `Block`'s ``make``).
    data : object
        The sampler-side data.
    hyper : object
        The hyperparameters (a pytree) the conditional is given.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition.
    """

    make: Callable
    data: object
    hyper: object

    def split(self):
        """Split ``hyper`` into its static part and its traced (floating-point) part.

        Returns
        -------
        tuple (tuple, tuple)
            ``(static, traced)``: ``static`` is (treedef, leaves with None at the floating leaves);
            ``traced`` the floating leaves as float64 jax arrays (a tuple, in leaf order).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        leaves, treedef = jax.tree_util.tree_flatten(self.hyper)
        traced = tuple(jnp.asarray(x, jnp.float64) for x in leaves if _is_float_leaf(x))
        static = tuple(None if _is_float_leaf(x) else x for x in leaves)
        return (treedef, static), traced


class HyperGibbs(CustomGibbs):
    """`numpyro.infer.CustomGibbs` whose conditional is built inside the trace from ``make(data, hyper)``,
    the floating-point leaves of ``hyper`` read from the model keyword `HYPER_KWARG` (a traced input
    of the chain program, not constants folded into it). Constructed by `run_hybrid`.

    Parameters
    ----------
    make : callable
        ``make(data, hyper) -> gibbs_fn`` (a `Block`'s ``make``).
    data : object
        The sampler-side data given to ``make``.
    static : tuple
        The first part of `TracedBlock.split`: (treedef, leaves with None at the floating leaves).

    Raises
    ------
    None of its own (``sample`` raises NumPyro's ValueError when the conditional returns other sites).

    Source: project addition (NumPyro's ``CustomGibbs``).
    """

    def __init__(self, make: Callable, data, static):
        super().__init__(make)  # the callable is not called as such: `sample` builds the conditional
        self._make, self._data, self._static = make, data, static

    def sample(self, state, model_args, model_kwargs):
        """One draw of the block from ``make(data, hyper)`` with ``hyper`` rebuilt from `HYPER_KWARG`.

        Parameters
        ----------
        state : numpyro.infer.gibbs.CustomGibbsState
            The block's state (its sites' current values ``z`` and ``rng_key``), as NumPyro's ``Gibbs``
            passes it.
        model_args : tuple
            The model's positional arguments.
        model_kwargs : dict
            The model's keywords; ``model_kwargs[HYPER_KWARG]`` holds the traced floating leaves.

        Returns
        -------
        numpyro.infer.gibbs.CustomGibbsState
            The new state, with the block's sites redrawn and the key advanced.

        Raises
        ------
        ValueError
            NumPyro's, when the conditional returns other sites.
        KeyError
            ``model_kwargs`` lacks `HYPER_KWARG`.

        Source: project addition.
        """
        treedef, leaves = self._static
        traced = iter(model_kwargs[HYPER_KWARG])
        hyper = jax.tree_util.tree_unflatten(treedef, [next(traced) if x is None else x for x in leaves])
        return CustomGibbs(self._make(self._data, hyper)).sample(state, model_args, model_kwargs)


def _bound_model(model, args: tuple, kwargs: Mapping):
    """``model`` with its arguments bound (constants of the program), taking only keywords: the
    conditioning values NumPyro's ``Gibbs`` adds and `HYPER_KWARG` (dropped)."""
    def bound(**kw):
        kw.pop(HYPER_KWARG, None)
        return model(*args, **kwargs, **kw)

    return bound


def _parallel_chains(partial_map_fn):
    """A ``chain_method`` for `numpyro.infer.MCMC`: ``pmap`` over the chains with the model arguments and
    keywords as (broadcast) inputs of the program instead of constants closed over by NumPyro's
    per-chain function (a ``functools.partial`` with ``args`` and ``kwargs``; anything else is pmapped
    as it is)."""
    import functools

    kw = getattr(partial_map_fn, "keywords", None)
    if not isinstance(partial_map_fn, functools.partial) or not kw or not {"args", "kwargs"} <= set(kw):
        return jax.pmap(partial_map_fn)
    rest = {k: v for k, v in kw.items() if k not in ("args", "kwargs")}

    def one_chain(map_args, args, kwargs):
        return partial_map_fn.func(*partial_map_fn.args, map_args, args=args, kwargs=kwargs, **rest)

    return lambda map_args: jax.pmap(one_chain, in_axes=(0, None, None))(map_args, kw["args"], kw["kwargs"])


def run_hybrid(model, model_args: tuple, sites, gibbs_fn, *, model_kwargs=None, seed: int = 0, num_chains: int = 4,
               num_warmup: int = 500, num_samples: int = 1000, target_accept: float = 0.8, progress: bool = False,
               label: str | None = None, divergences: bool = False):
    """NumPyro MCMC with ``sites`` drawn by ``gibbs_fn`` (`CustomGibbs`) and NUTS on every other site.

    The block's conditional is a ``gibbs_fn`` or a `TracedBlock` (the conditional's factory, data and
    hyperparameters: the hyperparameters become a traced input of the chain program, `HyperGibbs`, so
    that runs differing only in them compile once). The program's arguments are bound into the model
    (constants of the program, as before). Chains run in parallel when JAX has enough devices, else one
    after the other (NumPyro's ``Gibbs`` does not vectorize chains); float64.

    Parameters
    ----------
    model : callable
        The NumPyro program, called ``model(*model_args, **model_kwargs)``.
    model_args : tuple
        Its positional arguments (numpy arrays among them become float64 / int64 jax arrays inside the
        run).
    sites : str or sequence of str
        The block's site names.
    gibbs_fn : callable or TracedBlock
        ``gibbs_fn(rng_key, gibbs_sites, hmc_sites) -> dict site -> new value`` (constrained), or a
        `TracedBlock`.
    model_kwargs : mapping, optional
        The program's keyword arguments (keyword-only, like the rest).
    seed : int, default 0
        Seed of the run's ``jax.random.PRNGKey``.
    num_chains : int, default 4
        Number of chains.
    num_warmup : int, default 500
        Warmup per chain.
    num_samples : int, default 1000
        Kept draws per chain.
    target_accept : float, default 0.8
        Target acceptance probability of the NUTS block.
    progress : bool, default False
        Show NumPyro's progress bar.
    label : str, optional
        ``idata.attrs["method"]`` (default ``"gibbs[SITES]+nuts"``).
    divergences : bool, default False
        Record the NUTS block's divergent transitions in ``idata.attrs["divergences"]`` (an int, or
        None when NumPyro does not expose them).

    Returns
    -------
    arviz.InferenceData
        Posterior draws (chain, draw, *site shape) of every latent site.

    Raises
    ------
    ValueError
        NumPyro's, when ``sites`` are not latent sites of the program.

    Source: project addition (validation level 2: one Gibbs block beside NUTS).
    """
    from numpyro.infer import MCMC, NUTS, Gibbs

    sites = [sites] if isinstance(sites, str) else list(sites)
    method = _parallel_chains if jax.local_device_count() >= num_chains else "sequential"
    label = label or f"gibbs[{','.join(sites)}]+nuts"
    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, tuple(model_args))
        bound = _bound_model(model, args, dict(model_kwargs or {}))
        nuts = NUTS(bound) if target_accept == 0.8 else NUTS(bound, target_accept_prob=target_accept)
        if isinstance(gibbs_fn, TracedBlock):
            static, traced = gibbs_fn.split()
            block = HyperGibbs(gibbs_fn.make, gibbs_fn.data, static)
        else:
            block, traced = CustomGibbs(gibbs_fn), ()
        kernel = Gibbs([(block, sites), (nuts, None)])
        # NumPyro's Gibbs takes one key per chain: parallel chains over host devices (the CLI and the tests
        # force 4), else one after the other; jit_model_args: the keywords (the block's hyperparameters) are
        # arguments of the compiled chain, not constants
        mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                    chain_method=method, progress_bar=progress, jit_model_args=True)
        extra = {"extra_fields": ("block_states.1.diverging",)} if divergences else {}
        mcmc.run(jax.random.PRNGKey(seed), **extra, **{HYPER_KWARG: traced})
        idata = arviz_io.from_numpyro(mcmc, attrs={"method": label, "seed": seed})
    if divergences:
        idata.attrs["divergences"] = _draws_and_divergences(mcmc, 1)
    return idata


def compare(quantities: dict, reference, *, divergences: int | None = 0, gate_divergences: bool = False,
            false_alarm: float = 0.01) -> xc.Verdict:
    """The hybrid's quantities against a NUTS reference within Monte Carlo error.

    Gates (`validation.checks.crosscheck.combined_gates`): the
    reference's (R-hat, ESS, divergences, E-BFMI: the ground truth) and the hybrid's R-hat / ESS, as
    `validation.checks.crosscheck.exact_gates` gates an exact sampler (its MCSEs mean something only if it
    mixes). The divergent transitions of the hybrid's NUTS block (``divergences``) are reported by
    `run`, and gated only with ``gate_divergences``: the NUTS block adapts its step size to a
    conditional that moves with every Gibbs draw, and a few divergences in 4 x 4000 transitions
    were measured on blocks whose means agree (module docstring). Verdict of
    `validation.checks.crosscheck.compare_exact` (Bonferroni per group, ``false_alarm`` per group).

    Parameters
    ----------
    quantities : dict group name -> array (chain, draw, Q)
        The hybrid's draws (groups of the reference).
    reference : validation.checks.references.Reference
        The stored, gated NUTS reference.
    divergences : int or None, default 0
        Divergent transitions of the hybrid's NUTS block (keyword-only, like the rest).
    gate_divergences : bool, default False
        Gate on ``divergences`` (any divergence then fails the hybrid's gates).
    false_alarm : float, default 0.01
        False-alarm probability per group.

    Returns
    -------
    validation.checks.crosscheck.Verdict
        "pass" / "fail" / "inconclusive", one table row per group.

    Raises
    ------
    KeyError
        The reference lacks a group.
    ValueError
        Draws that are not 3-D.

    Source: project addition (validation level 2).
    """
    nq = {g: reference.summary[g] for g in quantities}
    ref_gates = nuts_gates(nq, divergences=reference.divergences, bfmi=reference.bfmi)
    hybrid_div = int(divergences or 0) if gate_divergences else 0
    hybrid_gates = nuts_gates(quantities, divergences=hybrid_div, bfmi=np.array([]))
    gates = xc.combined_gates(ref_gates, hybrid_gates, "hybrid")
    return xc.compare_exact(quantities, nq, gates, false_alarm=false_alarm)

def run(spec: BridgeSpec, site: str | None = None, *, block_hyper=None, seed: int = 1, num_chains: int = 4,
        num_warmup: int | None = None, num_samples: int | None = None, problem: Problem | None = None,
        progress: bool = False) -> BridgeResult:
    """Run one block of a sampler as ``CustomGibbs`` beside NUTS and compare with its stored NUTS reference.

    Parameters
    ----------
    spec : BridgeSpec
        The model's declaration (the project's: ``validation.models.catalog.bridge(name)`` for "hpf",
        "sbmf", "bpmf", "mcmc-fm", "npfm", "ppfm").
    site : str, optional
        A block name or a site owned by one block (default the spec's ``default``).
    block_hyper : object, optional
        The hyperparameters the block's conditional is given (default the problem's: pass another to
        simulate a wrong conditional). Keyword-only, like the rest.
    seed : int, default 1
        Seed of the hybrid run.
    num_chains : int, default 4
        Number of chains.
    num_warmup, num_samples : int, optional
        Per chain, default the spec's (1000 and 4000 unless it says otherwise).
    problem : Problem, optional
        Default ``spec.problem()``.
    progress : bool, default False
        Show NumPyro's progress bar.

    Returns
    -------
    BridgeResult
        The hybrid's draws, its verdict against the stored reference and the run's settings.

    Raises
    ------
    ValueError
        An unknown block or site (`BridgeSpec.block`); no stored reference matches the problem.

    Source: project addition (validation level 2).
    """
    name, block = spec.block(site or spec.default)
    p = problem or spec.problem()
    hyper = p.hyper if block_hyper is None else block_hyper
    num_warmup = spec.num_warmup if num_warmup is None else num_warmup
    num_samples = spec.num_samples if num_samples is None else num_samples
    start = time.perf_counter()
    idata = run_hybrid(p.model, p.args, block.sites, TracedBlock(block.make, p.data, hyper), model_kwargs=p.kwargs, seed=seed,
                       num_chains=num_chains, num_warmup=num_warmup, num_samples=num_samples,
                       target_accept=p.target_accept, progress=progress, divergences=True)
    seconds = time.perf_counter() - start
    quantities = p.quantities(idata)
    ref = p.reference()
    verdict = compare(quantities, ref, divergences=idata.attrs.get("divergences"))
    settings = {"chains": num_chains, "warmup": num_warmup, "draws": num_samples, "seed": seed,
                "block_hyper": "problem's" if block_hyper is None else repr(block_hyper),
                "divergences": idata.attrs.get("divergences"), "problem": p.description}
    return BridgeResult(spec.model, name, tuple(block.sites), verdict, quantities, idata, ref, seconds, settings)


def run_all(spec: BridgeSpec, **kwargs) -> list[BridgeResult]:
    """`run` for every block of the sampler declared by ``spec``, on one problem.

    Parameters
    ----------
    spec : BridgeSpec
        The model's declaration.
    **kwargs
        Keywords of `run` (``problem`` is built once, default ``spec.problem()``).

    Returns
    -------
    list of BridgeResult
        One per block, in the order of ``spec.blocks``.

    Raises
    ------
    ValueError
        As `run` (no stored reference matches the problem).

    Source: project addition.
    """
    problem = kwargs.pop("problem", None) or spec.problem()
    return [run(spec, b, problem=problem, **kwargs) for b in spec.blocks]


def agreement_table(results) -> pd.DataFrame:
    """The bridge's summary table.

    Parameters
    ----------
    results : iterable of BridgeResult
        The runs to list.

    Returns
    -------
    pandas.DataFrame
        One row per result: model, block, sites, status, max_z (over all groups), threshold (the
        smallest Bonferroni threshold), chains, draws, hybrid_divergences, gates_passed, failures,
        seconds.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
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

