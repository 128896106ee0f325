"""NumPyro NUTS as the ``fit`` of a simulation-based calibration: compiled once per data shape, gated per simulation.

An SBC runs hundreds of fits of one program on data sets of one shape. `NutsSBCFit` builds, once per
shape (and dtype) of the model's array arguments, one ``jax.jit``-compiled function of (key, data)
that initializes, adapts and samples every chain with NumPyro's own NUTS kernel
(``numpyro.infer.hmc.hmc(potential_fn_gen=..., algo="NUTS")`` with the potential of
``initialize_model(..., dynamic_args=True)``: the data are arguments of the compiled function, not
constants baked into it), so the first simulation compiles and no later one does. NumPyro's
``MCMC(jit_model_args=True)``, reused, is not enough: NumPyro 0.22 on JAX 0.10 compiles its sampling
loop again at every ``run`` (one program per run for one chain; two, about 30 s, for BPMF's two
vectorized chains), and that per-simulation compilation made a 200-simulation NUTS SBC die of
``LLVM ERROR: Unable to allocate section memory`` after about 80 simulations (issue 11).
`compile_counter` counts XLA compilations so that tests can assert that a later simulation compiles
nothing. The algorithm is NumPyro NUTS with its defaults (diagonal mass matrix and step size adapted
during warm-up, tree depth <= 10, NumPyro's ``init_to_uniform``: unconstrained coordinates uniform
on (-2, 2)); chains run one after another (``lax.map``), each paying for its own trees.

Each simulation's run is gated as `validation.checks.gates.nuts_gates` gates a NUTS reference (no
divergent transitions, rank-normalized split R-hat, bulk and tail ESS, E-BFMI), on the SBC's own
functionals evaluated at every draw, with SBC thresholds (`NutsSBCSettings`): the ranks need about
L + 1 = 100 roughly independent draws (bulk and tail ESS >= 100 over the S = chains x samples draws,
which `validation.checks.sbc.run_sbc` thins evenly to L), not the 400 of a reference. A failed gate is
recorded (`GateRecord`, optionally appended to a JSON-lines log so that a resumed run keeps it) and
the simulation is KEPT in the ranks: the SBC judges what the sampler returns, and dropping the
simulations that fail would select on the sampled draws (`gate_notes` states the count and the
choice in the report; `passed_subset` gives the ranks of the gated simulations only, as a check).

Source: project addition (Talts et al. 2018 for the thinning to about the ESS; Vehtari et al.
2021 for the diagnostics; NumPyro's NUTS kernel, Hoffman & Gelman 2014).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from validation.checks import gates

__all__ = ["NutsSBCSettings", "GateRecord", "NutsSBCFit", "compile_counter", "gate_notes", "passed_subset"]


@dataclass(frozen=True)
class NutsSBCSettings:
    """NUTS run and gate settings of one SBC simulation.

    ``num_chains`` chains x ``num_samples`` kept draws after ``num_warmup`` adaptation steps (the
    S = chains x samples draws go to `validation.checks.sbc.run_sbc`, which thins them evenly to L), NUTS
    ``target_accept``; gates: no more than ``max_divergences`` divergent transitions, R-hat <=
    ``max_r_hat``, bulk and tail ESS >= ``min_ess`` for every scalar of every functional, E-BFMI >=
    ``min_bfmi`` in every chain.

    Parameters
    ----------
    num_chains : int, default 2
        Chains per simulation (run one after another).
    num_warmup : int, default 500
        Adaptation steps per chain.
    num_samples : int, default 500
        Kept draws per chain.
    target_accept : float, default 0.8
        NUTS target acceptance probability.
    max_r_hat : float, default 1.01
        Gate: largest rank-normalized split R-hat.
    min_ess : float, default 100.0
        Gate: smallest bulk and tail ESS (over the S = chains x samples draws).
    max_divergences : int, default 0
        Gate: most divergent transitions.
    min_bfmi : float, default 0.3
        Gate: smallest E-BFMI of a chain.

    Raises
    ------
    None of its own (a frozen dataclass; the values are not checked).

    Source: project addition (validation level 3; Vehtari et al. 2021 for the gates).
    """

    num_chains: int = 2
    num_warmup: int = 500
    num_samples: int = 500
    target_accept: float = 0.8
    max_r_hat: float = 1.01
    min_ess: float = 100.0
    max_divergences: int = 0
    min_bfmi: float = 0.3

    def thresholds(self) -> gates.Thresholds:
        """The `validation.checks.gates.Thresholds` of these settings (min_chains = num_chains).

        Returns
        -------
        validation.checks.gates.Thresholds
            ``min_ess`` as both the bulk and the tail ESS gate.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return gates.Thresholds(max_r_hat=self.max_r_hat, min_ess_bulk=self.min_ess, min_ess_tail=self.min_ess,
                                min_chains=self.num_chains, max_divergences=self.max_divergences,
                                min_bfmi=self.min_bfmi)


@dataclass
class GateRecord:
    """The gate outcome of one simulation's NUTS run (JSON-serializable).

    Parameters
    ----------
    fit_seed : int
        The seed `validation.checks.sbc.run_sbc` gave ``fit``.
    passed : bool
        True when every gate passed.
    failures : list of str, default []
        The failed gates in words.
    divergences : int, default 0
        Divergent transitions of the run (all chains).
    max_r_hat : float, default nan
        Largest R-hat over all scalars of all functionals.
    min_ess_bulk, min_ess_tail : float, default nan
        Smallest bulk / tail ESS over all scalars of all functionals.
    min_bfmi : float, default nan
        Smallest E-BFMI over chains.
    seconds : float, default nan
        NUTS wall time (compilation included on a data shape's first run).

    Raises
    ------
    None of its own (a dataclass).

    Source: project addition (validation level 3).
    """

    fit_seed: int
    passed: bool
    failures: list[str] = field(default_factory=list)
    divergences: int = 0
    max_r_hat: float = float("nan")
    min_ess_bulk: float = float("nan")
    min_ess_tail: float = float("nan")
    min_bfmi: float = float("nan")
    seconds: float = float("nan")


@contextlib.contextmanager
def compile_counter():
    """Count XLA backend compilations while the block runs.

    Yields a list that receives one float (the compile time in seconds) per compilation reported
    by JAX's ``/jax/core/compile/backend_compile_duration`` monitoring event; ``len`` of it is the
    count. The listener is removed on exit.

    Yields
    ------
    list of float
        Compile times in seconds, one per XLA compilation during the block.

    Raises
    ------
    None of its own.

    Source: project addition (``jax.monitoring``).
    """
    events: list[float] = []

    def listener(event: str, duration: float, **_kw) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(float(duration))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def _shape_key(args) -> tuple:
    return tuple((np.shape(a), np.asarray(a).dtype.str) for a in args)


class NutsSBCFit:
    """``fit(data, seed) -> draws`` for `validation.checks.sbc.run_sbc`: NumPyro NUTS on ``model``.

    Calling it (``fit(data, seed)``) runs `run`, records its `GateRecord` (appending it to
    ``log_path``) and returns dict name -> float64 array (S, ...) with S = chains x samples (chains
    concatenated). Attributes: ``records`` (list of `GateRecord`, this process's runs in order),
    ``n_mcmc`` (number of compiled samplers built: one per data shape), ``last_num_steps`` (int
    (chain, draw), leapfrog steps of the last run's kept iterations).

    Parameters
    ----------
    model : callable
        NumPyro model whose positional arguments are arrays only (bind the static sizes and
        hyperparameters with ``functools.partial``).
    model_args : callable
        ``model_args(data) -> tuple of arrays``, the model's positional arguments for one data set
        (e.g. int32 (N,) rows and cols, float64 (N,) values).
    draws : callable
        ``draws(dict site -> array (chain, draw, ...)) -> dict name -> array (chain, draw, ...)``,
        the layout the functionals read (derive deterministic quantities here).
    functionals : mapping str -> callable
        ``functional(draw) -> array (Q,)``, the SBC functionals (gated on); ``draw`` maps each
        name of ``draws`` to one draw.
    settings : NutsSBCSettings, default NutsSBCSettings()
        The NUTS run and its gates.
    log_path : str or pathlib.Path, optional
        Each simulation's `GateRecord` is appended there as one JSON line.

    Raises
    ------
    None of its own
        NumPyro's and the model's errors propagate (at the first call); ``log_path`` errors
        (OSError) when a record is appended.

    Source: project addition (validation level 3).
    """

    def __init__(self, model: Callable, model_args: Callable[[Any], tuple], draws: Callable[[dict], dict],
                 functionals: Mapping[str, Callable], settings: NutsSBCSettings = NutsSBCSettings(),
                 log_path: str | Path | None = None):
        self.model = model
        self.model_args = model_args
        self.draws = draws
        self.functionals = dict(functionals)
        self.settings = settings
        self.log_path = None if log_path is None else Path(log_path)
        self.records: list[GateRecord] = []
        self.last_num_steps = None
        self._mcmc: dict[tuple, Any] = {}

    @property
    def n_mcmc(self) -> int:
        """Number of compiled samplers built so far (one per data shape and dtype), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return len(self._mcmc)

    def _get_run(self, args):
        """The jitted sampler for arrays of ``args``' shapes and dtypes, built on first use."""
        key = _shape_key(args)
        if key not in self._mcmc:
            self._mcmc[key] = self._build(args)
        return self._mcmc[key]

    def _build(self, args):
        from numpyro.infer.hmc import hmc
        from numpyro.infer.util import initialize_model

        s = self.settings
        # the model's structure (sites, supports) from the first data set; the data stay arguments
        info = initialize_model(jax.random.PRNGKey(0), self.model, model_args=args, dynamic_args=True)
        potential_gen, postprocess_gen = info.potential_fn, info.postprocess_fn
        init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")
        leaves, tree = jax.tree_util.tree_flatten(info.param_info.z)
        shapes = [(jnp.shape(x), jnp.result_type(x)) for x in leaves]

        def one_chain(key, args):
            k_init, k_run = jax.random.split(key)
            keys = jax.random.split(k_init, len(shapes))
            # NumPyro's init_to_uniform: every unconstrained coordinate uniform on (-2, 2)
            z = jax.tree_util.tree_unflatten(tree, [jax.random.uniform(k, sh, dt, -2.0, 2.0)
                                                    for k, (sh, dt) in zip(keys, shapes)])
            state = init_kernel(z, s.num_warmup, target_accept_prob=s.target_accept, model_args=args, rng_key=k_run)
            state = jax.lax.fori_loop(0, s.num_warmup, lambda i, st: sample_kernel(st, model_args=args), state)

            def body(st, _):
                st = sample_kernel(st, model_args=args)
                return st, (postprocess_gen(*args)(st.z), st.diverging, st.energy, st.num_steps)

            return jax.lax.scan(body, state, None, length=s.num_samples)[1]

        @jax.jit
        def run(key, args):
            # chains one after another (lax.map): each pays for its own trees, not the largest of all
            return jax.lax.map(lambda k: one_chain(k, args), jax.random.split(key, s.num_chains))

        return run

    def run(self, data, seed: int) -> tuple[dict, GateRecord]:
        """One NUTS run and its gates, not recorded in ``records`` (calling the object records it).

        Parameters
        ----------
        data : object
            One data set, as ``model_args`` takes it.
        seed : int
            Seed of the run's ``jax.random.PRNGKey``.

        Returns
        -------
        tuple (dict, GateRecord)
            The draws, dict name -> float64 (chain, draw, ...) (the layout of ``draws``), and the
            run's `GateRecord`.

        Raises
        ------
        None of its own
            NumPyro's and the model's errors propagate.

        Source: project addition.
        """
        import arviz as az

        start = time.perf_counter()
        with jax.enable_x64(True):
            args = tuple(self.model_args(data))
            sampler = self._get_run(args)
            samples, diverging, energy, num_steps = sampler(jax.random.PRNGKey(int(seed)), args)
            samples = {k: np.asarray(v, np.float64) for k, v in samples.items()}
            diverging, energy = np.asarray(diverging), np.asarray(energy, np.float64)
            self.last_num_steps = np.asarray(num_steps)
        seconds = time.perf_counter() - start
        draws = {k: np.asarray(v, np.float64) for k, v in self.draws(samples).items()}
        n_chains, n_draws = next(iter(draws.values())).shape[:2]
        quantities = {}
        for name, f in self.functionals.items():
            vals = [np.atleast_1d(np.asarray(f({k: v[c, d] for k, v in draws.items()}), np.float64))
                    for c in range(n_chains) for d in range(n_draws)]
            quantities[name] = np.stack(vals).reshape(n_chains, n_draws, -1)
        bfmi = np.asarray(az.bfmi(energy), np.float64)
        g = gates.nuts_gates(quantities, divergences=int(diverging.sum()), bfmi=bfmi,
                             thresholds=self.settings.thresholds())
        rec = GateRecord(fit_seed=int(seed), passed=bool(g.passed), failures=list(g.failures),
                         divergences=int(g.divergences), max_r_hat=float(g.table["max_r_hat"].max()),
                         min_ess_bulk=float(g.table["min_ess_bulk"].min()),
                         min_ess_tail=float(g.table["min_ess_tail"].min()), min_bfmi=float(np.min(bfmi)),
                         seconds=seconds)
        return draws, rec

    def __call__(self, data, seed: int) -> dict:
        draws, rec = self.run(data, seed)
        self.records.append(rec)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(json.dumps(asdict(rec)) + "\n")
        return {k: v.reshape(-1, *v.shape[2:]) for k, v in draws.items()}

    def gate_records(self, fit_seeds=None) -> dict[int, GateRecord]:
        """fit_seed -> `GateRecord`: this process's runs and the lines of ``log_path``.

        Parameters
        ----------
        fit_seeds : array_like, shape (n_sims,), int, optional
            Keep only these seeds (default: every recorded seed).

        Returns
        -------
        dict int -> GateRecord
            The latest record of each seed (this process's runs win over the log).

        Raises
        ------
        OSError
            ``log_path`` exists but cannot be read.
        ValueError
            A line of the log is not JSON (``json.JSONDecodeError``).
        TypeError
            A line of the log has fields `GateRecord` does not know.

        Source: project addition.
        """
        out: dict[int, GateRecord] = {}
        if self.log_path is not None and self.log_path.exists():
            for line in self.log_path.read_text().splitlines():
                if line.strip():
                    rec = GateRecord(**json.loads(line))
                    out[rec.fit_seed] = rec
        for rec in self.records:
            out[rec.fit_seed] = rec
        if fit_seeds is not None:
            wanted = {int(s) for s in np.asarray(fit_seeds).tolist()}
            out = {k: v for k, v in out.items() if k in wanted}
        return out


def gate_notes(fit: NutsSBCFit, result) -> list[str]:
    """Report lines on the gates of ``result``'s simulations (a `validation.checks.sbc.SBCResult` whose
    ``fit`` was ``fit``): how many failed which gate, how many have no record (cached by another
    process without a log), and that failed simulations are kept in the ranks.

    Parameters
    ----------
    fit : NutsSBCFit
        The fit the SBC ran.
    result : validation.checks.sbc.SBCResult
        The SBC's result (its ``fit_seeds`` select the records).

    Returns
    -------
    list of str
        Two or three report lines (settings, failure counts, medians of the gates' statistics).

    Raises
    ------
    None of its own (an unreadable log raises as `NutsSBCFit.gate_records`).

    Source: project addition.
    """
    s = fit.settings
    recs = fit.gate_records(result.fit_seeds)
    known = [recs[int(k)] for k in result.fit_seeds if int(k) in recs]
    failed = [r for r in known if not r.passed]
    n_div = sum(r.divergences > s.max_divergences for r in known)
    n_rhat = sum(not r.max_r_hat <= s.max_r_hat for r in known)
    n_ess = sum(not min(r.min_ess_bulk, r.min_ess_tail) >= s.min_ess for r in known)
    n_bfmi = sum(not r.min_bfmi >= s.min_bfmi for r in known)
    lines = [
        f"NUTS: {s.num_chains} chains x {s.num_samples} draws after {s.num_warmup} warm-up, target accept "
        f"{s.target_accept}; per-simulation gates on the functionals: divergences <= {s.max_divergences}, "
        f"R-hat <= {s.max_r_hat}, bulk and tail ESS >= {s.min_ess:g}, E-BFMI >= {s.min_bfmi}",
        f"gates: {len(failed)} of {len(known)} recorded simulations FAILED (divergences {n_div}, R-hat {n_rhat}, "
        f"ESS {n_ess}, E-BFMI {n_bfmi}); {result.n_sims - len(known)} without a record. Failed simulations are "
        "KEPT in the ranks (the SBC judges what the sampler returns; dropping them would select on the draws).",
    ]
    if known:
        lines.append(f"median min bulk ESS {np.median([r.min_ess_bulk for r in known]):.0f}, median max R-hat "
                     f"{np.median([r.max_r_hat for r in known]):.4f}, total divergences "
                     f"{sum(r.divergences for r in known)}")
    return lines


def passed_subset(result, fit: NutsSBCFit):
    """``result`` (a `validation.checks.sbc.SBCResult`) restricted to the simulations whose gate record
    passed: a sensitivity check of the choice to keep failed ones.

    Parameters
    ----------
    result : validation.checks.sbc.SBCResult
        The SBC's result.
    fit : NutsSBCFit
        The fit the SBC ran (its gate records).

    Returns
    -------
    validation.checks.sbc.SBCResult
        A copy whose arrays are indexed by the kept simulations (``seconds`` too, when present).

    Raises
    ------
    ValueError
        No simulation passed its gate (or none has a record).

    Source: project addition.
    """
    from dataclasses import replace

    recs = fit.gate_records(result.fit_seeds)
    keep = np.array([int(k) in recs and recs[int(k)].passed for k in result.fit_seeds])
    if not keep.any():
        raise ValueError("no simulation passed its gate")
    sub = lambda d: {k: v[keep] for k, v in d.items()}  # noqa: E731
    return replace(result, ranks=sub(result.ranks), seeds=result.seeds[keep], fit_seeds=result.fit_seeds[keep],
                   truth=sub(result.truth), post_mean=sub(result.post_mean), post_sd=sub(result.post_sd),
                   seconds=None if result.seconds is None else result.seconds[keep])
