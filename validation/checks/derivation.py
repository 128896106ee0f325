"""Validate a derivation of your own: declare the model once, run every check that applies, read one report.

Public and stable (project addition, issue 25 item 1). A researcher who has written a NumPyro program
and a hand-derived Gibbs sampler or CAVI solver for it declares both in one `Derivation` and calls
`check`; every check of `validation.checks` that the declaration makes possible runs, each with a
pass / fail verdict and a reason in words, and one Markdown report is written:

=====================  ===============================================================  ==========
check                  what it does (generic piece it runs)                            needs
=====================  ===============================================================  ==========
``conditional[SITE]``  the candidate complete conditional of SITE against the           ``conditionals``
                       program's own log joint (`numpyro.infer.util.log_density`),
                       one coordinate at a time along a grid, total variation
                       (`validation.checks.updates.conditional_distance`)
``stationarity[B]``    after CAVI block B's closed-form update, the gradient of the      ``elbo``,
                       ELBO with respect to that block's parameters is ~0               ``cavi_blocks``,
                       (`validation.checks.updates.stationarity`, ``jax.grad``)         ``vi_init``
``monotone``           CAVI sweeps never lower the ELBO                                 the same
                       (`validation.checks.updates.monotone_sweeps`)
``bridge[B]``          Gibbs block B as a NumPyro ``CustomGibbs`` block beside NUTS on   ``conditionals`` or
                       the other sites, against NUTS within Monte Carlo error            ``gibbs_blocks``
                       (`validation.checks.bridge.run_hybrid`, `~bridge.compare`)
``crosscheck``         the solver against a fresh NUTS run of the program on the         always
                       identified quantities, ArviZ-gated (exact:
                       `validation.checks.crosscheck.exact_crosscheck`; VI:
                       `~crosscheck.vi_crosscheck`)
``sbc``                simulation-based calibration of the sampler                       exact method,
                       (`validation.checks.sbc.run_sbc`)                                ``sbc_sims`` > 0
``vsbc``               VSBC of q (`validation.checks.vi_evidence.run_vsbc`); evidence,   VI method,
                       not counted in the verdict (a correct mean-field q may be biased) ``sbc_sims`` > 0
``khat``               PSIS k-hat of q against the program's posterior                   VI method, ``q``
                       (`validation.checks.vi_evidence.khat`); evidence, not counted
=====================  ===============================================================  ==========

A check the declaration does not make possible is listed as "not declared" with the field that
would enable it; a check left out by ``check(..., checks=...)`` is listed as "not selected". Nothing
is skipped silently.

Conventions (the user's functions take the program's arguments exactly as the program does:
``program(*args, **kwargs)``):

- site values are dicts site name -> array of the site's shape (constrained values, as NumPyro
  samples them); the functions given to the sampler and the CAVI sweeps are traced by ``jax.jit``,
  so they are written in ``jax.numpy``; array arguments of the program are traced inputs (the same
  compiled program serves every SBC data set), other arguments (ints, strings) are static;
- ``conditionals[site](values, *args, **kwargs)`` returns a ``numpyro.distributions.Distribution``
  whose samples have the site's shape: the claimed p(site | every other site, data). It is both
  checked on a grid and, unless ``gibbs_blocks`` names the site, used as the sampler's block;
- ``gibbs_blocks[block](key, values, *args, **kwargs)`` returns ``{site: new value}`` for the sites
  of ``block`` (a site name or a tuple of site names): a block that is not a plain conditional (an
  augmentation step, a joint draw of several sites);
- CAVI parameters are a dict (or NamedTuple) of float arrays; ``cavi_blocks[fields](params, *args,
  **kwargs)`` returns the parameters with ``fields`` (a name or a tuple of names) updated;
  ``elbo(params, *args, **kwargs)`` is the ELBO as a differentiable JAX function; ``q(params)``
  returns site -> ``numpyro.distributions.Distribution`` (mean-field factors on the program's
  latent sites);
- ``identified(draws)`` maps site -> draws (chain, draw, *site shape) to group -> (chain, draw, Q):
  identified quantities only (predictions, rates, hyperparameters; never raw factor coordinates,
  which are defined up to rotation, scale and permutation). For the VI cross-check the groups must
  be positive (`validation.checks.crosscheck.compare_vi` compares log means).

Example (the tests' Gamma-Poisson model; `tests/validation/test_derivation.py`, and
``notebooks/your_own_model.py`` for a factorization model)::

    d = Derivation(name="gamma-poisson", program=model, method="exact",
                   kwargs={"y": y, "item": item, "n_items": 5}, observed={"y": "y"},
                   identified=lambda s: {"lam": s["lam"], "b": s["b"][..., None]},
                   conditionals={"lam": lam_conditional, "b": b_conditional})
    report = check(d, sbc_sims=50, out_dir="derivation-report")
    report.status            # "pass", "fail" or "inconclusive"
    report.table()           # one row per check

Source: project addition (validation levels 1-3 of the design, behind one declaration); the checks'
references: Talts et al. (2018) and Säilynoja et al. (2022) for SBC; Yao, Vehtari, Simpson, Gelman
(2018) for k-hat and VSBC; Vehtari et al. (2021) for the ArviZ gates.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import arviz_io

from validation.checks import crosscheck as xc
from validation.checks import updates
from validation.checks.references import NutsSettings, Reference, from_run, problem_key

__all__ = ["Derivation", "DeclarationError", "CheckSettings", "CheckOutcome", "DerivationReport", "check",
           "nuts_reference", "solver_fit", "prior_simulator", "CHECKS"]

#: The checks `check` knows, in the order they run and are reported.
CHECKS = ("conditional", "stationarity", "monotone", "bridge", "crosscheck", "sbc", "vsbc", "khat")

METHODS = ("exact", "vi")


class DeclarationError(ValueError):
    """A `Derivation` field is wrong; the message starts with ``Derivation.<field>``.

    A subclass of ValueError, raised at construction of a `Derivation` and when `solver_fit` builds
    or runs the declared blocks.

    Raises
    ------
    None (it is the exception).

    Source: project addition (issue 25 item 1).
    """


# ---------------------------------------------------------------------------------------------
# the declaration


def _block_sites(key) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _block_label(key) -> str:
    return key if isinstance(key, str) else ",".join(key)


@dataclass(frozen=True)
class Derivation:
    """One model and its hand-derived solver, declared once (see the module docstring for conventions).

    Parameters
    ----------
    name : str
        A short label for reports and cache keys (non-empty).
    program : callable
        The NumPyro program, called as ``program(*args, **kwargs)`` with the observed data bound.
    method : {"exact", "vi"}
        "exact": a sampler (agreement with NUTS within Monte Carlo error, SBC); "vi": the VI gap
        against NUTS, with VSBC and k-hat as evidence.
    identified : callable
        ``identified(draws) -> dict group -> float array (chain, draw, Q)``; ``draws``: site ->
        (chain, draw, *site shape). numpy or jax.numpy. Identified quantities only (predictions,
        rates, hyperparameters; never raw factor coordinates).
    args : tuple, default ()
        The small problem: the program's positional arguments with the observed data (a few dozen
        observations: NUTS runs on it several times).
    kwargs : mapping, default {}
        The program's keyword arguments of the small problem.
    observed : mapping, default {}
        Observed site -> the keyword (str) or position (int) of ``args`` holding its data. With it,
        SBC / VSBC draw data sets from the program's prior predictive (`prior_simulator`).
    simulate : callable, optional
        ``simulate(seed) -> (truth, args, kwargs)`` with ``truth`` site -> array drawn from the prior
        and the data drawn given it; overrides ``observed`` for SBC / VSBC.
    fit : callable, optional
        ``fit(seed, *args, **kwargs) -> dict site -> (chain, draw, *site shape)`` (exact: posterior
        draws; VI: draws from q). Default: built from the declared blocks (`solver_fit`).
    conditionals : mapping, default {}
        Site -> ``conditional(values, *args, **kwargs) -> numpyro Distribution``: the claimed
        complete conditional of the site, samples of the site's shape.
    gibbs_blocks : mapping, default {}
        Site or tuple of sites -> ``block(key, values, *args, **kwargs) -> {site: value}``. Sweep
        order: ``gibbs_blocks`` in order, then the ``conditionals`` of sites no block owns.
    vi_init : callable, optional
        ``vi_init(seed, *args, **kwargs) -> params`` (dict or NamedTuple of float arrays).
    cavi_blocks : mapping, default {}
        Field or tuple of fields -> ``update(params, *args, **kwargs) -> params``; a sweep applies
        them in order.
    elbo : callable, optional
        ``elbo(params, *args, **kwargs) -> scalar`` (differentiable, JAX).
    q : callable, optional
        ``q(params) -> dict site -> numpyro Distribution`` on the program's latent sites.
    description : str, default ""
        One line for the report.

    Raises
    ------
    DeclarationError
        (A ValueError) at construction when a field has the wrong type or the fields do not make a
        solver (exact without ``fit`` and without blocks; VI without ``fit`` and without ``vi_init`` /
        ``cavi_blocks`` / ``q``); its message names the field.

    Source: project addition (issue 25 item 1).
    """

    name: str
    program: Callable
    method: str
    identified: Callable
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)
    observed: Mapping = field(default_factory=dict)
    simulate: Callable | None = None
    fit: Callable | None = None
    conditionals: Mapping = field(default_factory=dict)
    gibbs_blocks: Mapping = field(default_factory=dict)
    vi_init: Callable | None = None
    cavi_blocks: Mapping = field(default_factory=dict)
    elbo: Callable | None = None
    q: Callable | None = None
    description: str = ""

    def __post_init__(self):
        def fail(f, msg):
            raise DeclarationError(f"Derivation.{f}: {msg}")

        if not isinstance(self.name, str) or not self.name:
            fail("name", f"must be a non-empty str, got {self.name!r}")
        for f in ("program", "identified"):
            if not callable(getattr(self, f)):
                fail(f, f"must be callable, got {type(getattr(self, f)).__name__}")
        if self.method not in METHODS:
            fail("method", f"must be one of {METHODS}, got {self.method!r}")
        if not isinstance(self.args, tuple):
            fail("args", f"must be a tuple (the program's positional arguments), got {type(self.args).__name__}")
        for f in ("kwargs", "observed", "conditionals", "gibbs_blocks", "cavi_blocks"):
            if not isinstance(getattr(self, f), Mapping):
                fail(f, f"must be a mapping, got {type(getattr(self, f)).__name__}")
        for f in ("simulate", "fit", "vi_init", "elbo", "q"):
            v = getattr(self, f)
            if v is not None and not callable(v):
                fail(f, f"must be callable or None, got {type(v).__name__}")
        for site, where in self.observed.items():
            if not isinstance(where, (str, int)) or isinstance(where, bool):
                fail(f"observed[{site!r}]", f"must be a keyword name (str) or a position in args (int), got {where!r}")
            if isinstance(where, str) and where not in self.kwargs:
                fail(f"observed[{site!r}]", f"names keyword {where!r}, which kwargs does not hold ({sorted(self.kwargs)})")
            if isinstance(where, int) and not 0 <= where < len(self.args):
                fail(f"observed[{site!r}]", f"position {where} is outside args (length {len(self.args)})")
        for site, fn in self.conditionals.items():
            if not isinstance(site, str) or not callable(fn):
                fail(f"conditionals[{site!r}]", "keys must be site names and values callables")
        for f in ("gibbs_blocks", "cavi_blocks"):
            for key, fn in getattr(self, f).items():
                names = _block_sites(key)
                if not names or not all(isinstance(n, str) for n in names) or not callable(fn):
                    fail(f"{f}[{key!r}]", "keys must be a name or a tuple of names, values callables")
        owned = [s for k in self.gibbs_blocks for s in _block_sites(k)]
        if len(owned) != len(set(owned)):
            fail("gibbs_blocks", f"a site is owned by two blocks: {owned}")
        if self.method == "exact" and self.fit is None and not (self.conditionals or self.gibbs_blocks):
            fail("fit", "an exact derivation needs fit, or conditionals / gibbs_blocks to build the sampler from")
        if self.method == "vi" and self.fit is None:
            for f in ("vi_init", "q"):
                if getattr(self, f) is None:
                    fail(f, "a VI derivation without fit needs vi_init, cavi_blocks and q (to run CAVI and draw from q)")
            if not self.cavi_blocks:
                fail("cavi_blocks", "a VI derivation without fit needs vi_init, cavi_blocks and q")
        if self.cavi_blocks and self.vi_init is None:
            fail("vi_init", "cavi_blocks need vi_init (the starting parameters)")

    def sampler_blocks(self) -> list[tuple[tuple[str, ...], str, Callable]]:
        """The sweep of the sampler, one entry per block in sweep order.

        Every declared Gibbs block, then one per conditional of a site no block owns (a draw from the
        conditional).

        Returns
        -------
        list of (tuple of str, str, callable)
            (sites, label, ``block(key, values, *args, **kwargs) -> {site: value}``).

        Raises
        ------
        None.

        Source: project addition.
        """
        out = [(_block_sites(k), _block_label(k), fn) for k, fn in self.gibbs_blocks.items()]
        owned = {s for sites, _, _ in out for s in sites}
        for site, cond in self.conditionals.items():
            if site not in owned:
                out.append(((site,), site, _conditional_block(site, cond)))
        return out


def _conditional_block(site: str, cond: Callable) -> Callable:
    def block(key, values, *args, **kwargs):
        return {site: cond(values, *args, **kwargs).sample(key)}

    block.__name__ = f"draw_{site}"
    return block


# ---------------------------------------------------------------------------------------------
# settings, outcomes, report


@dataclass(frozen=True)
class CheckSettings:
    """Run lengths and tolerances of `check` (defaults: a small problem, a few minutes on 2 cores).

    Parameters
    ----------
    nuts_chains, nuts_warmup, nuts_draws : int, default 4, 500, 1000
        The NUTS reference: chains x (warm-up + draws), gated by ArviZ
        (`validation.checks.gates.Thresholds`: R-hat <= 1.01 with >= 4 chains, bulk and tail ESS >=
        400, no divergences, E-BFMI >= 0.3).
    target_accept : float, default 0.8
        NUTS's target acceptance probability.
    solver_chains, solver_warmup, solver_draws, solver_thin : int, default 4, 500, 1000, 1
        The default sampler (`solver_fit`): chains x (warm-up + draws x thin sweeps).
    bridge_chains, bridge_warmup, bridge_draws : int, default 4, 300, 1000
        The CustomGibbs bridge: chains x (warm-up + draws).
    vi_max_sweeps : int, default 1000
        CAVI: at most this many sweeps.
    vi_tol : float, default 1e-10
        CAVI stops when the relative ELBO change is below it.
    vi_draws : int, default 2000
        Draws from q.
    tv_tol : float, default 1e-4
        The conditional check's total-variation tolerance (quadrature error of the 20001-point grid is
        ~1e-8; a wrong conditional gives > 1e-2).
    n_coords : int, default 3
        Coordinates per site in the conditional check.
    stationarity_rtol : float, default 1e-7
        Relative gradient tolerance of the stationarity check (float64 rounding of an exact update is
        ~1e-10).
    warm_sweeps : int, default 1
        CAVI sweeps before the stationarity check.
    monotone_sweeps : int, default 20
        CAVI sweeps of the monotonicity check.
    sbc_draws : int, default 99
        L, the draws per SBC simulation.
    alpha : float, default 0.05
        Family false-alarm rate of SBC / VSBC.
    khat_draws : int, default 4000
        Draws from q for k-hat.
    false_alarm : float, default 0.01
        Per group of the exact comparisons (Bonferroni, `validation.checks.crosscheck.compare_exact`).

    Raises
    ------
    None of its own (the values are used as given).

    Source: project addition.
    """

    nuts_chains: int = 4
    nuts_warmup: int = 500
    nuts_draws: int = 1000
    target_accept: float = 0.8
    solver_chains: int = 4
    solver_warmup: int = 500
    solver_draws: int = 1000
    solver_thin: int = 1
    bridge_chains: int = 4
    bridge_warmup: int = 300
    bridge_draws: int = 1000
    vi_max_sweeps: int = 1000
    vi_tol: float = 1e-10
    vi_draws: int = 2000
    tv_tol: float = 1e-4
    n_coords: int = 3
    stationarity_rtol: float = 1e-7
    warm_sweeps: int = 1
    monotone_sweeps: int = 20
    sbc_draws: int = 99
    alpha: float = 0.05
    khat_draws: int = 4000
    false_alarm: float = 0.01

    def nuts(self, seed: int) -> NutsSettings:
        """The `validation.checks.references.NutsSettings` of the NUTS reference.

        Parameters
        ----------
        seed : int
            NUTS's seed.

        Returns
        -------
        validation.checks.references.NutsSettings

        Raises
        ------
        None.

        Source: project addition.
        """
        return NutsSettings(self.nuts_chains, self.nuts_warmup, self.nuts_draws, int(seed), self.target_accept)


@dataclass(frozen=True)
class CheckOutcome:
    """One row of the report.

    Parameters
    ----------
    check : str
        E.g. "conditional[b]", "crosscheck".
    level : str
        "update", "bridge", "posterior", "calibration" or "evidence".
    status : str
        "pass", "fail", "inconclusive", "reported", "not declared", "not applicable" or
        "not selected".
    gating : bool
        Whether the check counts toward the verdict.
    reason : str
        The verdict in words.
    statistic : float, default NaN
        The headline number (NaN when none).
    statistic_name : str, default ""
        What ``statistic`` is.
    table : pandas.DataFrame, optional
        Details.

    Raises
    ------
    None.

    Source: project addition.
    """

    check: str
    level: str
    status: str
    gating: bool
    reason: str
    statistic: float = float("nan")
    statistic_name: str = ""
    table: pd.DataFrame | None = field(default=None, repr=False)

    def row(self) -> dict:
        """The outcome as a table row (without ``table``).

        Returns
        -------
        dict
            check, level, status, counts ("yes" / "no"), statistic (its name), value, reason.

        Raises
        ------
        None.

        Source: project addition.
        """
        return {"check": self.check, "level": self.level, "status": self.status,
                "counts": "yes" if self.gating else "no", "statistic": self.statistic_name,
                "value": self.statistic, "reason": self.reason}


@dataclass(frozen=True)
class DerivationReport:
    """What `check` returns.

    ``status``: "fail" when a counted check fails, else "inconclusive" when a counted check is
    inconclusive (NUTS failed its gates) or none passed, else "pass".

    Parameters
    ----------
    name : str
        The derivation's name.
    method : str
        "exact" or "vi".
    outcomes : list of CheckOutcome
        In `CHECKS` order.
    path : pathlib.Path, optional
        The Markdown report (None without ``out_dir``).
    results : dict
        The raw objects: "reference" (`validation.checks.references.Reference`), "crosscheck"
        (`validation.checks.crosscheck.CrosscheckResult`), "bridge" (block ->
        `validation.checks.bridge.BridgeResult` or InferenceData), "sbc"
        (`validation.checks.sbc.SBCResult`), "vsbc", "khat", "elbo".
    seconds : float
        Wall seconds of `check`.

    Raises
    ------
    None.

    Source: project addition.
    """

    name: str
    method: str
    outcomes: list
    path: Path | None = None
    results: dict = field(default_factory=dict, repr=False)
    seconds: float = 0.0

    @property
    def status(self) -> str:
        """The verdict over the counted checks: "pass", "fail" or "inconclusive".

        Returns
        -------
        str
            "fail" when a counted check fails, else "inconclusive" when a counted check is inconclusive
            or none passed, else "pass".

        Raises
        ------
        None.

        Source: project addition.
        """
        counted = [o.status for o in self.outcomes if o.gating]
        if "fail" in counted:
            return "fail"
        if "inconclusive" in counted or "pass" not in counted:
            return "inconclusive"
        return "pass"

    def table(self) -> pd.DataFrame:
        """One row per check (`CheckOutcome.row`).

        Returns
        -------
        pandas.DataFrame

        Raises
        ------
        None.

        Source: project addition.
        """
        return pd.DataFrame([o.row() for o in self.outcomes])

    def outcome(self, check: str) -> CheckOutcome:
        """The outcome named ``check``.

        Parameters
        ----------
        check : str
            "crosscheck", "conditional[b]", ...

        Returns
        -------
        CheckOutcome

        Raises
        ------
        KeyError
            For a name no outcome has (the message lists the names).

        Source: project addition.
        """
        for o in self.outcomes:
            if o.check == check:
                return o
        raise KeyError(f"no check {check!r}; checks: {[o.check for o in self.outcomes]}")

    def failed(self) -> list[str]:
        """Names of the counted checks that failed.

        Returns
        -------
        list of str

        Raises
        ------
        None.

        Source: project addition.
        """
        return [o.check for o in self.outcomes if o.gating and o.status == "fail"]

    def __repr__(self) -> str:
        return (f"DerivationReport({self.name!r}, {self.method!r}, status={self.status!r}, "
                f"failed={self.failed()}, checks={len(self.outcomes)})")

    def _repr_markdown_(self) -> str:
        from validation.checks.report import markdown_table

        return f"**{self.name} ({self.method}): {self.status.upper()}**\n\n" + markdown_table(
            self.table().drop(columns=["level"]))


# ---------------------------------------------------------------------------------------------
# program helpers


def _trace(program, args, kwargs, seed: int, *, uncondition: bool = False):
    from numpyro import handlers

    with jax.enable_x64(True):
        m = handlers.seed(program, jax.random.PRNGKey(int(seed)))
        if uncondition:
            m = handlers.uncondition(m)
        return handlers.trace(m).get_trace(*args, **kwargs)


def _latent(tr) -> dict:
    return {n: s for n, s in tr.items() if s["type"] == "sample" and not s.get("is_observed", False)
            and not s.get("infer", {}).get("was_observed", False)}


def _program_sites(d: Derivation):
    """(latent site -> trace entry, observed site names) of the declared problem."""
    try:
        tr = _trace(d.program, d.args, d.kwargs, 0)
    except Exception as exc:  # noqa: BLE001 (re-raised naming the fields)
        raise DeclarationError(f"Derivation.program: calling program(*args, **kwargs) failed: "
                               f"{type(exc).__name__}: {exc}") from exc
    latent = _latent(tr)
    observed = [n for n, s in tr.items() if s["type"] == "sample" and s.get("is_observed", False)]
    return latent, observed


def _check_sites(d: Derivation, latent, observed) -> None:
    for f in ("conditionals", "gibbs_blocks"):
        for key in getattr(d, f):
            for s in _block_sites(key):
                if s not in latent:
                    raise DeclarationError(f"Derivation.{f}[{key!r}]: {s!r} is not a latent site of the program "
                                           f"(latent: {sorted(latent)})")
    for s in d.observed:
        if s not in observed:
            raise DeclarationError(f"Derivation.observed[{s!r}]: not an observed site of the program "
                                   f"(observed: {sorted(observed)})")


def prior_simulator(program, args: tuple, kwargs: Mapping, observed: Mapping) -> Callable:
    """``simulate(seed) -> (truth, args, kwargs)`` drawing from the program's prior predictive.

    The program runs under ``numpyro.handlers.uncondition`` with the problem's arguments: latent sites
    from the prior, observed sites from their distributions given them; each observed site's draw
    replaces its data in ``args`` / ``kwargs``, cast to the data's dtype and shape.

    Parameters
    ----------
    program : callable
        The NumPyro program.
    args : tuple
        Its positional arguments (the small problem).
    kwargs : mapping
        Its keyword arguments.
    observed : mapping
        Observed site -> keyword name (str) or position in ``args`` (int) of its data.

    Returns
    -------
    callable
        ``simulate(seed: int) -> (truth, args, kwargs)``; ``truth``: latent site -> numpy array.

    Raises
    ------
    KeyError
        When called, for an observed site the trace lacks.

    Source: project addition (SBC's simulation step, Talts et al. 2018, with NumPyro's
    ``uncondition``).
    """
    args, kwargs = tuple(args), dict(kwargs)

    def simulate(seed: int):
        tr = _trace(program, args, kwargs, seed, uncondition=True)
        truth = {n: np.asarray(s["value"]) for n, s in _latent(tr).items()}
        new_args, new_kwargs = list(args), dict(kwargs)
        for site, where in observed.items():
            old = new_kwargs[where] if isinstance(where, str) else new_args[where]
            value = np.asarray(tr[site]["value"]).astype(np.asarray(old).dtype).reshape(np.shape(old))
            if isinstance(where, str):
                new_kwargs[where] = value
            else:
                new_args[where] = value
        return truth, tuple(new_args), new_kwargs

    return simulate


def _simulator(d: Derivation):
    if d.simulate is not None:
        return d.simulate
    if d.observed:
        return prior_simulator(d.program, d.args, d.kwargs, d.observed)
    return None


# -- compiled functions of the program's arguments: arrays traced, the rest static ---------------

_JIT: dict = {}


def _is_traced_leaf(x) -> bool:
    return isinstance(x, (np.ndarray, jax.Array, np.generic, float)) and not isinstance(x, (bool, np.bool_))


def _split(args, kwargs):
    leaves, treedef = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    traced = tuple(jnp.asarray(x) for x in leaves if _is_traced_leaf(x))
    static = (treedef, tuple(None if _is_traced_leaf(x) else x for x in leaves))
    return static, traced


def _join(static, traced):
    treedef, leaves = static
    it = iter(traced)
    return jax.tree_util.tree_unflatten(treedef, [next(it) if x is None else x for x in leaves])


def _compiled(key, build, static):
    """``build(static)`` jitted, cached under (key, static) when static is hashable."""
    try:
        cache_key = (key, static)
        hash(cache_key)
    except TypeError:
        return build(static)
    if cache_key not in _JIT:
        _JIT[cache_key] = build(static)
    return _JIT[cache_key]


# ---------------------------------------------------------------------------------------------
# the solver


def _gibbs_run(blocks, chains: int, warmup: int, draws: int, thin: int):
    def build(static):
        def sweep(values, key, args, kwargs):
            for sites, label, fn in blocks:
                key, sub = jax.random.split(key)
                new = fn(sub, values, *args, **kwargs)
                if not isinstance(new, Mapping) or set(new) - set(sites):
                    raise DeclarationError(f"Derivation.gibbs_blocks[{label!r}] (or conditionals): must return "
                                           f"{{site: value}} for its sites {sites}, got "
                                           f"{sorted(new) if isinstance(new, Mapping) else type(new).__name__}")
                out = dict(values)
                for s, v in new.items():
                    v = jnp.asarray(v)
                    if v.shape != values[s].shape:
                        raise DeclarationError(f"Derivation.gibbs_blocks[{label!r}] (or conditionals[{s!r}]): drew shape "
                                               f"{v.shape} for {s!r}, the program's site has shape {values[s].shape}")
                    out[s] = v.astype(values[s].dtype)
                values = out
            return values

        def unit(values, key, args, kwargs):
            for k in jax.random.split(key, thin):
                values = sweep(values, k, args, kwargs)
            return values

        def one_chain(key, values, traced):
            args, kwargs = _join(static, traced)
            k_warm, k_keep = jax.random.split(key)
            values, _ = jax.lax.scan(lambda v, k: (unit(v, k, args, kwargs), None), values,
                                     jax.random.split(k_warm, max(warmup, 1))[:warmup])
            _, kept = jax.lax.scan(lambda v, k: (lambda n: (n, n))(unit(v, k, args, kwargs)), values,
                                   jax.random.split(k_keep, draws))
            return kept

        return jax.jit(jax.vmap(one_chain, in_axes=(0, 0, None)))

    return build


def solver_fit(d: Derivation, settings: CheckSettings = CheckSettings()) -> Callable:
    """The solver of a derivation as ``fit(seed, *args, **kwargs) -> dict site -> (chain, draw, ...)``.

    ``d.fit`` when declared. Otherwise, exact: a Gibbs sampler sweeping `Derivation.sampler_blocks` in
    order (``settings.solver_chains`` chains from independent prior draws of the program, each
    ``solver_warmup`` + ``solver_draws`` kept units of ``solver_thin`` sweeps, one jitted and vmapped
    program reused for every data set of the same shapes); the blocks must cover every latent site.
    VI: CAVI sweeps of ``d.cavi_blocks`` from ``d.vi_init(seed, ...)`` until the relative ELBO change is
    below ``settings.vi_tol`` (or ``vi_max_sweeps``; without ``elbo``: ``vi_max_sweeps`` sweeps), then
    ``settings.vi_draws`` draws from ``d.q`` as one chain. float64.

    Parameters
    ----------
    d : Derivation
        The declaration.
    settings : CheckSettings, default CheckSettings()
        Run lengths.

    Returns
    -------
    callable
        ``fit(seed, *args, **kwargs) -> dict site -> numpy array (chain, draw, *site shape)``.

    Raises
    ------
    DeclarationError
        When building, if the exact blocks miss a latent site of the program; when called, if a
        block returns other sites or shapes (the field named).

    Source: project addition.
    """
    if d.fit is not None:
        return d.fit
    if d.method == "exact":
        latent, _ = _program_sites(d)
        blocks = d.sampler_blocks()
        covered = {s for sites, _, _ in blocks for s in sites}
        if set(latent) - covered:
            raise DeclarationError(f"Derivation.conditionals / gibbs_blocks: the sampler's blocks miss the latent "
                                   f"sites {sorted(set(latent) - covered)} (declare fit, or a block for each)")
        s = settings
        build = _gibbs_run(tuple(blocks), s.solver_chains, s.solver_warmup, s.solver_draws, s.solver_thin)

        def fit(seed, *args, **kwargs):
            inits = [{n: jnp.asarray(v["value"]) for n, v in _latent(_trace(d.program, args, kwargs, 7919 * int(seed) + c)).items()}
                     for c in range(s.solver_chains)]
            with jax.enable_x64(True):
                stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *inits)
                static, traced = _split(args, kwargs)
                run = _compiled(("gibbs", d.name, tuple(blocks), s), build, static)
                keys = jax.random.split(jax.random.PRNGKey(int(seed)), s.solver_chains)
                out = run(keys, stacked, traced)
            return {k: np.asarray(v) for k, v in out.items()}

        return fit

    def fit(seed, *args, **kwargs):
        params, _ = _cavi(d, settings, seed, args, kwargs)
        return _q_draws(d, params, seed, settings.vi_draws)

    return fit


def _sweep_fn(d: Derivation):
    def build(static):
        def sweep(params, traced):
            args, kwargs = _join(static, traced)
            for key, update in d.cavi_blocks.items():
                params = update(params, *args, **kwargs)
            value = d.elbo(params, *args, **kwargs) if d.elbo is not None else jnp.nan
            return params, value

        return jax.jit(sweep)

    return build


def _cavi(d: Derivation, s: CheckSettings, seed, args, kwargs, *, sweeps: int | None = None):
    """Run CAVI from ``vi_init``: (params, ELBO trace float64 (T + 1,))."""
    with jax.enable_x64(True):
        params = d.vi_init(int(seed), *args, **kwargs)
        static, traced = _split(args, kwargs)
        sweep = _compiled(("cavi", d.name, tuple(d.cavi_blocks.items()), d.elbo), _sweep_fn(d), static)
        trace = [float(d.elbo(params, *args, **kwargs)) if d.elbo is not None else np.nan]
        n = s.vi_max_sweeps if sweeps is None else sweeps
        for _ in range(n):
            params, value = sweep(params, traced)
            trace.append(float(value))
            if sweeps is None and d.elbo is not None and np.isfinite(trace[-2]) and \
                    abs(trace[-1] - trace[-2]) <= s.vi_tol * abs(trace[-1]):
                break
    return params, np.asarray(trace)


def _q_dists(d: Derivation, params) -> dict:
    qs = d.q(params)
    if not isinstance(qs, Mapping):
        raise DeclarationError(f"Derivation.q: must return dict site -> numpyro Distribution, got {type(qs).__name__}")
    return qs


def _q_draws(d: Derivation, params, seed, n: int) -> dict:
    with jax.enable_x64(True):
        qs = _q_dists(d, params)
        keys = jax.random.split(jax.random.PRNGKey(int(seed)), len(qs))
        return {site: np.asarray(dist.sample(k, (n,)))[None] for k, (site, dist) in zip(keys, qs.items())}


def _khat_problem(d: Derivation, params):
    from validation.checks import vi_evidence

    def draw(seed: int, n: int) -> vi_evidence.QSample:
        with jax.enable_x64(True):
            qs = _q_dists(d, params)
            keys = jax.random.split(jax.random.PRNGKey(int(seed)), len(qs))
            sites, log_q = {}, np.zeros(n)
            for k, (site, dist) in zip(keys, qs.items()):
                x = dist.sample(k, (n,))
                lp = dist.log_prob(x)
                log_q += np.asarray(lp.reshape(n, -1).sum(axis=1), np.float64)
                sites[site] = np.asarray(x, np.float64)
        return vi_evidence.QSample(sites, log_q)

    return vi_evidence.KhatProblem(draw, vi_evidence.numpyro_log_joint(d.program, d.args, d.kwargs),
                                   "q's factors on the program's latent sites (Derivation.q)")


def _identified(d: Derivation, draws: Mapping) -> dict:
    try:
        out = d.identified({k: np.asarray(v) for k, v in draws.items()})
    except Exception as exc:  # noqa: BLE001 (re-raised naming the field)
        raise DeclarationError(f"Derivation.identified: failed on draws of shapes "
                               f"{ {k: np.shape(v) for k, v in draws.items()} }: {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, Mapping) or not out:
        raise DeclarationError("Derivation.identified: must return a non-empty dict group -> (chain, draw, Q)")
    res = {}
    for g, v in out.items():
        v = np.asarray(v, np.float64)
        if v.ndim != 3:
            raise DeclarationError(f"Derivation.identified: group {g!r} has shape {v.shape}, expected (chain, draw, Q)")
        res[g] = v
    return res


# ---------------------------------------------------------------------------------------------
# the NUTS reference


def nuts_reference(d: Derivation, settings: CheckSettings = CheckSettings(), *, seed: int = 0,
                   progress: bool = False) -> Reference:
    """A fresh NUTS run of ``d.program`` on the declared problem, as a reference on ``d.identified``.

    ``settings.nuts_chains`` x (``nuts_warmup`` + ``nuts_draws``), float64,
    `validation.checks.crosscheck.run_nuts`. Pass it to `check` (``nuts=``) to reuse it across calls
    on the same program and problem (a derivation and its planted-error variant).

    Parameters
    ----------
    d : Derivation
        The declaration.
    settings : CheckSettings, default CheckSettings()
        Run lengths.
    seed : int, default 0
        NUTS's seed.
    progress : bool, default False
        NumPyro's progress bar.

    Returns
    -------
    validation.checks.references.Reference
        The identified groups' draws, gates and settings.

    Raises
    ------
    DeclarationError
        When ``identified`` returns something else than 3-D groups.
    RuntimeError
        Not of its own: what NumPyro raises propagates.

    Source: project addition (validation level 2).
    """
    run = xc.run_nuts(d.program, *d.args, seed=seed, num_chains=settings.nuts_chains,
                      num_warmup=settings.nuts_warmup, num_samples=settings.nuts_draws,
                      target_accept=settings.target_accept, progress=progress, **d.kwargs)
    nuts_settings = settings.nuts(seed)
    data = tuple(x for x in jax.tree_util.tree_leaves((d.args, dict(d.kwargs))) if isinstance(x, np.ndarray))
    key = problem_key(data, d.name, nuts_settings)
    return from_run(d.name, run, lambda idata: _identified(d, arviz_io.group_arrays(idata)), nuts_settings, key)


# ---------------------------------------------------------------------------------------------
# the checks


_T = np.linspace(-35.0, 35.0, 20001)  # the coarse grid of t (x = exp t, sinh t or expit t)


def _support(site_entry) -> str:
    from numpyro.distributions import constraints

    c = site_entry["fn"].support
    while hasattr(c, "base_constraint"):
        c = c.base_constraint
    if isinstance(c, constraints._Real):
        return "real"
    if isinstance(c, constraints._Interval) and float(c.lower_bound) == 0.0 and float(c.upper_bound) == 1.0:
        return "unit"
    if isinstance(c, constraints._GreaterThan) and float(c.lower_bound) == 0.0:
        return "positive"
    return f"unsupported ({c})"


def _to_x(kind: str, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x(t) and log |dx/dt| of the grid's change of variables."""
    if kind == "positive":
        return np.exp(t), t
    if kind == "real":
        return np.sinh(t), np.log(np.cosh(t))
    x = 1.0 / (1.0 + np.exp(-t))
    return x, np.log(x) + np.log1p(-x)


def _slice_tv(log_p, log_q, kind: str) -> tuple[float, float, float]:
    """TV distance of two 1-D log densities (callables x (G,) -> (G,)) along a grid adapted to both:
    a coarse grid of t finds where either is within 40 nats of its maximum (in t), a 20001-point grid
    over that region is handed to `validation.checks.updates.conditional_distance` (x = exp(t) there,
    the change of variables written into both densities alike; TV does not depend on it).
    Returns (tv, x_low, x_high)."""
    def in_t(fn, t):
        x, jac = _to_x(kind, t)
        v = np.asarray(fn(x), np.float64) + jac
        return np.where(np.isfinite(v), v, -np.inf)

    lp, lq = in_t(log_p, _T), in_t(log_q, _T)
    if not np.isfinite(lp.max()):
        raise FloatingPointError("the program's log joint is not finite anywhere on the grid")
    if not np.isfinite(lq.max()):
        return 1.0, np.nan, np.nan
    keep = (lp > lp.max() - 40) | (lq > lq.max() - 40)
    idx = np.flatnonzero(keep)
    step = _T[1] - _T[0]
    lo, hi = _T[idx[0]] - 3 * step, _T[idx[-1]] + 3 * step
    t = np.linspace(lo, hi, 20001)
    g = np.exp(t)
    tv = updates.conditional_distance(lambda gg: in_t(log_p, np.log(gg)) - np.log(gg),
                                      lambda gg: in_t(log_q, np.log(gg)) - np.log(gg), g)
    x = _to_x(kind, np.array([lo, hi]))[0]
    return float(tv), float(x[0]), float(x[1])


def _conditional_outcome(d: Derivation, site: str, latent, s: CheckSettings, seed: int) -> CheckOutcome:
    from numpyro.infer.util import log_density

    name = f"conditional[{site}]"
    kind = _support(latent[site])
    if kind.startswith("unsupported"):
        return CheckOutcome(name, "update", "not applicable", False,
                            f"site support {kind}: the grid check handles positive, real and unit-interval sites")
    tr = _trace(d.program, d.args, d.kwargs, seed)
    values = {n: jnp.asarray(v["value"]) for n, v in _latent(tr).items()}
    shape = values[site].shape
    size = int(np.prod(shape, dtype=int))
    coords = sorted({0, size // 2, size - 1})[: max(1, s.n_coords)]
    rows = []
    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, d.args)
        kwargs = {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in d.kwargs.items()}
        try:
            cand = d.conditionals[site](values, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 (re-raised naming the field)
            raise DeclarationError(f"Derivation.conditionals[{site!r}]: failed at a prior draw: "
                                   f"{type(exc).__name__}: {exc}") from exc
        if not hasattr(cand, "log_prob"):
            raise DeclarationError(f"Derivation.conditionals[{site!r}]: must return a numpyro Distribution, "
                                   f"got {type(cand).__name__}")
        if tuple(cand.batch_shape + cand.event_shape) != tuple(shape):
            raise DeclarationError(f"Derivation.conditionals[{site!r}]: its distribution has shape "
                                   f"{tuple(cand.batch_shape + cand.event_shape)}, the site has shape {tuple(shape)}")

        def put(x, i):
            return values[site].reshape(-1).at[i].set(x).reshape(shape)

        joint = jax.jit(jax.vmap(lambda x, i: log_density(d.program, args, kwargs, {**values, site: put(x, i)})[0],
                                 in_axes=(0, None)))
        claimed = jax.jit(jax.vmap(lambda x, i: jnp.sum(cand.log_prob(put(x, i))), in_axes=(0, None)))
        for i in coords:
            tv, lo, hi = _slice_tv(lambda x: np.asarray(joint(jnp.asarray(x), i)),
                                   lambda x: np.asarray(claimed(jnp.asarray(x), i)), kind)
            rows.append({"site": site, "coordinate": str(np.unravel_index(i, shape)) if shape else "()",
                         "tv_distance": tv, "grid_low": lo, "grid_high": hi, "passed": tv < s.tv_tol})
    table = pd.DataFrame(rows)
    worst = float(table.tv_distance.max())
    ok = bool(table.passed.all())
    reason = (f"max TV {worst:.2g} over {len(rows)} coordinates {'<' if ok else '>='} {s.tv_tol:g} "
              f"(candidate vs the program's log joint on a grid, at a prior draw, seed {seed})")
    return CheckOutcome(name, "update", "pass" if ok else "fail", True, reason, worst, "max TV", table)


def _stationarity_outcomes(d: Derivation, s: CheckSettings, seed: int) -> list[CheckOutcome]:
    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, d.args)
        kwargs = {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in d.kwargs.items()}
        warm, _ = _cavi(d, s, seed, d.args, d.kwargs, sweeps=s.warm_sweeps)
        objective = lambda p: d.elbo(p, *args, **kwargs)  # noqa: E731
        out = []
        for key, update in d.cavi_blocks.items():
            label, fields = _block_label(key), list(_block_sites(key))
            try:
                # every other block moves first, so that this one starts away from its optimum
                before = warm
                for other, other_update in d.cavi_blocks.items():
                    if other != key:
                        before = other_update(before, *args, **kwargs)
                after = update(before, *args, **kwargs)
                r = updates.stationarity(objective, before, after, fields, block=label, rtol=s.stationarity_rtol)
            except (KeyError, AttributeError) as exc:
                raise DeclarationError(f"Derivation.cavi_blocks[{key!r}]: the parameters have no field {exc} "
                                       "(keys name the fields the update sets)") from exc
            ratio = r.grad_after / max(r.grad_before, 1.0)
            table = pd.DataFrame([{"block": label, "grad_before": r.grad_before, "grad_after": r.grad_after,
                                   "ratio": ratio, "rtol": r.rtol, "passed": r.passed}])
            reason = (f"max abs dELBO/d({label}) after the update {r.grad_after:.2g} "
                      f"({'<=' if r.passed else '>'} {r.rtol:g} x max(before {r.grad_before:.2g}, 1)); at "
                      f"{s.warm_sweeps} warm sweeps from vi_init, then the other blocks' updates")
            out.append(CheckOutcome(f"stationarity[{label}]", "update", "pass" if r.passed else "fail", True,
                                    reason, ratio, "grad after / max(before, 1)", table))
    return out


def _monotone_outcome(d: Derivation, s: CheckSettings, seed: int) -> CheckOutcome:
    _, trace = _cavi(d, s, seed, d.args, d.kwargs, sweeps=s.monotone_sweeps)
    ok, worst = updates.monotone(trace)
    table = pd.DataFrame({"sweep": np.arange(len(trace)), "elbo": trace})
    reason = (f"{s.monotone_sweeps} sweeps from vi_init: largest relative ELBO decrease {worst:.2g} "
              f"({'<=' if ok else '>'} 1e-9, rounding)")
    return CheckOutcome("monotone", "update", "pass" if ok else "fail", True, reason, worst,
                        "largest relative decrease", table)


def _verdict_reason(v: xc.Verdict, what: str) -> str:
    t = v.table
    if v.status == "pass":
        if "max_z" in t:
            worst = t.loc[(t.max_z / t.threshold).idxmax()]
            return (f"{what}: every group within Monte Carlo error (closest to its threshold: {worst.quantity}, "
                    f"max z {worst.max_z:.2f} <= Bonferroni threshold {worst.threshold:.2f} for "
                    f"{int(worst.Q)} quantities)")
        corr = (f", corr(log means) {t.corr_log_mean.min():.4f} >= 0.99" if "corr_log_mean" in t and
                t.corr_log_mean.notna().any() else "")
        return (f"{what}: median standardized error {t.median_std_error.max():.3f} <= 0.5{corr} in every group "
                "(one-scalar groups: their standardized error)")
    return f"{what}: " + "; ".join(v.reasons)


def _bridge_outcomes(d: Derivation, latent, ref: Reference, s: CheckSettings, seed: int, results: dict, blocks=None):
    from validation.checks import bridge

    out = []
    args, kwargs = d.args, dict(d.kwargs)
    for sites, label, fn in d.sampler_blocks():
        name = f"bridge[{label}]"
        if blocks is not None and label not in blocks:
            out.append(CheckOutcome(name, "bridge", "not selected", False, "left out by check(..., blocks=...)"))
            continue
        if set(sites) >= set(latent):
            out.append(CheckOutcome(name, "bridge", "not applicable", False,
                                    "the block owns every latent site (no site left to NUTS): the crosscheck covers it"))
            continue

        def gibbs_fn(rng_key, gibbs_sites, hmc_sites, fn=fn):
            return fn(rng_key, {**hmc_sites, **gibbs_sites}, *args, **kwargs)

        start = time.perf_counter()
        idata = bridge.run_hybrid(d.program, args, list(sites), gibbs_fn, model_kwargs=kwargs, seed=seed + 1,
                                  num_chains=s.bridge_chains, num_warmup=s.bridge_warmup, num_samples=s.bridge_draws,
                                  target_accept=s.target_accept, divergences=True, label=f"gibbs[{label}]+nuts")
        seconds = time.perf_counter() - start
        quantities = _identified(d, arviz_io.group_arrays(idata))
        divergences = idata.attrs.get("divergences")
        v = bridge.compare(quantities, ref, divergences=divergences, false_alarm=s.false_alarm)
        results[label] = idata
        table = v.table.assign(block=label, hybrid_divergences=divergences, seconds=round(seconds, 1))
        out.append(CheckOutcome(name, "bridge", v.status, True,
                                _verdict_reason(v, f"block {label} as CustomGibbs beside NUTS"),
                                float(v.table.max_z.max()), "max z", pd.concat([table, v.gates.table], axis=0,
                                                                                ignore_index=True)))
    return out


def _crosscheck_outcome(d: Derivation, fit, ref: Reference, s: CheckSettings, seed: int, results: dict):
    start = time.perf_counter()
    params = None
    if d.method == "vi" and d.fit is None:
        params, elbo_trace = _cavi(d, s, seed, d.args, d.kwargs)
        draws = _q_draws(d, params, seed, s.vi_draws)
        results["elbo"] = elbo_trace
    else:
        draws = fit(seed, *d.args, **d.kwargs)
    seconds = time.perf_counter() - start
    quantities = _identified(d, draws)
    missing = set(quantities) - set(ref.summary)
    if missing:
        raise DeclarationError(f"Derivation.identified: groups {sorted(missing)} of the solver are not in NUTS's")
    settings = {"problem": d.description or d.name, "solver": f"{d.method} solver, {seconds:.1f} s"}
    if d.method == "exact":
        r = xc.exact_crosscheck(model=d.name, solver=f"{d.name} sampler", ref=ref, solver_quantities=quantities,
                                solver_seconds=seconds, config=s, settings=settings, solver_name="solver")
    else:
        bad = [g for g, v in quantities.items() if not np.all(v > 0)]
        if bad:
            raise DeclarationError(f"Derivation.identified: the VI cross-check compares log means, so every group "
                                   f"must be positive; {bad} are not (give e.g. rates, variances, exp of a real quantity)")
        multi = [g for g, v in quantities.items() if v.shape[-1] >= 2]
        r = xc.vi_crosscheck(model=d.name, solver=f"{d.name} VI (q)", ref=ref, solver_quantities=quantities,
                             solver_seconds=seconds, config=s, settings=settings, verdict_groups=multi or None,
                             plotted=list(quantities), gap_groups={g: None for g in quantities},
                             extra={"elbo": results.get("elbo")})
        r = dataclasses.replace(r, verdict=_vi_verdict(r, ref, quantities, multi))
    results["crosscheck"] = r
    stat = float(r.verdict.table.max_z.max()) if d.method == "exact" else float(r.verdict.table.median_std_error.max())
    return CheckOutcome("crosscheck", "posterior", r.verdict.status, True,
                        _verdict_reason(r.verdict, "solver vs NUTS on the identified quantities"), stat,
                        "max z" if d.method == "exact" else "max median std error",
                        pd.concat([r.verdict.table, r.verdict.gates.table.assign(gate="yes")], axis=0,
                                  ignore_index=True)), params


def _vi_verdict(r, ref: Reference, quantities: dict, multi: list) -> xc.Verdict:
    """`compare_vi`'s verdict on the groups of two or more scalars (a correlation needs them), and the
    same standardized-error threshold on each scalar of the one-scalar groups (the median of one)."""
    singles = [g for g in quantities if g not in multi]
    if not singles:
        return r.verdict
    th = xc.VIThresholds()
    gate = ref.gates(list(quantities))
    rows, reasons = ([], []) if not multi else (r.verdict.table.to_dict("records"), list(r.verdict.reasons))
    if multi and r.verdict.status == "inconclusive":
        reasons = [x for x in reasons if not x.startswith("NUTS reference failed")]
    for g in singles:
        gap = r.extra[f"{g}_table"]
        err = float(gap.std_error.iloc[0])
        rows.append({"quantity": g, "Q": 1, "median_std_error": err, "p90_std_error": err,
                     "median_sd_ratio": float(gap.sd_ratio.iloc[0]), "coverage90": float(gap.nuts_mean_in_vi90.iloc[0])})
        if err > th.max_median_std_error:
            reasons.append(f"{g}: standardized error {err:.3f} > {th.max_median_std_error}")
    table = pd.DataFrame(rows)
    if not gate.passed:
        return xc.Verdict("inconclusive", ["NUTS reference failed its gates: " + "; ".join(gate.failures)] + reasons,
                          table, gate)
    return xc.Verdict("fail" if reasons else "pass", reasons, table, gate)


def _functionals(d: Derivation) -> dict:
    groups = list(d.identified({k: np.zeros((1, 1, *np.shape(v["value"]))) for k, v in
                                _latent(_trace(d.program, d.args, d.kwargs, 0)).items()}))

    def make(g):
        return lambda p: np.asarray(d.identified({k: np.asarray(v)[None, None] for k, v in p.items()})[g]).reshape(-1)

    return {g: make(g) for g in groups}


def _band_sims(result, alpha: float) -> int:
    """Band simulations enough for >= 10 simulated exceedances at the Bonferroni level alpha / Q."""
    from validation.checks import sbc

    q = sum(r.shape[1] for r in result.ranks.values())
    return max(sbc.N_BAND_SIMS, int(np.ceil(10 * q / alpha)))


def _sbc_outcome(d: Derivation, fit, simulate, s: CheckSettings, n_sims: int, seed: int, results: dict):
    from validation.checks import sbc

    def sim(seed_):
        truth, args, kwargs = simulate(seed_)
        return truth, (args, kwargs)

    def fit_flat(data, seed_):
        args, kwargs = data
        draws = fit(seed_, *args, **kwargs)
        return {k: np.asarray(v).reshape(-1, *np.shape(v)[2:]) for k, v in draws.items()}

    r = sbc.run_sbc(sim, fit_flat, _functionals(d), n_sims=n_sims, master_seed=seed, n_draws=s.sbc_draws,
                    progress=False, method=d.name)
    results["sbc"] = r
    table = r.uniformity(s.alpha, n_band_sims=_band_sims(r, s.alpha))
    fam = table[table.kind == "family"]
    overall = table.iloc[-1]
    ok = bool(overall.ecdf_pass)
    worst = fam.iloc[:-1].sort_values("ecdf_p").iloc[0] if len(fam) > 1 else overall
    reason = (f"{n_sims} simulations, L = {s.sbc_draws}: smallest ECDF p {overall.ecdf_p:.3g} "
              f"({worst.functional}) {'>' if ok else '<='} alpha / Q = {overall.alpha_used:.3g} (Bonferroni, "
              f"false-alarm rate {s.alpha})")
    return CheckOutcome("sbc", "calibration", "pass" if ok else "fail", True, reason, float(overall.ecdf_p),
                        "smallest ECDF p", fam.reset_index(drop=True))


def _vsbc_outcome(d: Derivation, fit, simulate, s: CheckSettings, n_sims: int, seed: int, results: dict):
    from validation.checks import vi_evidence

    def sim(seed_):
        truth, args, kwargs = simulate(seed_)
        return truth, (args, kwargs)

    def fit_flat(data, seed_):
        args, kwargs = data
        draws = fit(seed_, *args, **kwargs)
        return {k: np.asarray(v).reshape(-1, *np.shape(v)[2:]) for k, v in draws.items()}

    r = vi_evidence.run_vsbc(sim, fit_flat, _functionals(d), n_sims=n_sims, master_seed=seed, alpha=s.alpha,
                             method=d.name)
    results["vsbc"] = r
    return CheckOutcome("vsbc", "evidence", "pass" if r.passed else "fail", False,
                        "VSBC " + r.verdict() + " (evidence about q, not counted: a correct mean-field q may be biased)",
                        r.smallest_p, "smallest flip p", r.table)


def _khat_outcome(d: Derivation, params, s: CheckSettings, seed: int, results: dict):
    from validation.checks import vi_evidence

    try:
        r = vi_evidence.khat(_khat_problem(d, params), n_draws=s.khat_draws, seed=seed)
    except ValueError as exc:
        raise DeclarationError(f"Derivation.q: {exc}") from exc
    results["khat"] = r
    return CheckOutcome("khat", "evidence", "reported", False,
                        f"PSIS k-hat {r.khat:.2f} ({r.reading}) of q against the program's posterior, "
                        f"{r.n_latent} latent scalars, PSIS ESS {r.ess:.0f} of {r.n_draws} (not counted)",
                        r.khat, "k-hat", pd.DataFrame([r.row()]))


def _absent(name, level, why) -> CheckOutcome:
    return CheckOutcome(name, level, "not declared", False, why)


def check(derivation: Derivation, *, sbc_sims: int = 0, nuts: Reference | CheckSettings | None = None,
          settings: CheckSettings = CheckSettings(), seed: int = 0, out_dir: str | Path | None = None,
          checks=None, blocks=None, progress: bool = False) -> DerivationReport:
    """Run every check that applies to ``derivation`` and write one report.

    Parameters
    ----------
    derivation : `Derivation`
    sbc_sims : int >= 0, simulations of SBC (exact) or VSBC (VI); 0: not run (listed "not selected").
        50-200 for a real verdict (the tests run a few).
    nuts : a `validation.checks.references.Reference` from `nuts_reference` (reused: no NUTS run), or
        None (a fresh run with ``settings``).
    settings : `CheckSettings` (run lengths and tolerances).
    seed : int, seeds every check (NUTS ``seed``, the bridge ``seed + 1``, SBC's master seed ``seed``).
    out_dir : folder for ``report.md`` (and the SBC sub-report and plots), or None (no files).
    checks : names of `CHECKS` to run (default all); the others are listed as "not selected".
    blocks : labels of the sampler's blocks (`Derivation.sampler_blocks`) whose bridge runs (default
        all; each bridge is a NumPyro program of its own to compile); the others are "not selected".
    progress : NUTS progress bars.

    Returns
    -------
    `DerivationReport`: ``status`` "pass" / "fail" / "inconclusive", one `CheckOutcome` per check.

    Raises
    ------
    DeclarationError (a ValueError naming the ``Derivation`` field) when the program cannot be called
    on the problem, a declared site is not in the program, a block returns other sites or shapes,
    ``identified`` does not return (chain, draw, Q) groups (positive ones for VI), ``q`` is not on the
    program's latent sites. ValueError for an unknown name in ``checks`` or ``blocks``, or a negative
    ``sbc_sims``.
    Source: project addition (validation levels 1-3); Talts et al. (2018); Yao et al. (2018); Vehtari
    et al. (2021).
    """
    d = derivation
    if not isinstance(d, Derivation):
        raise ValueError(f"check takes a Derivation, got {type(d).__name__}")
    selected = set(CHECKS if checks is None else checks)
    if selected - set(CHECKS):
        raise ValueError(f"unknown checks {sorted(selected - set(CHECKS))}; known: {CHECKS}")
    if isinstance(sbc_sims, bool) or int(sbc_sims) != sbc_sims or sbc_sims < 0:
        raise ValueError(f"sbc_sims must be an integer >= 0, got {sbc_sims!r}")
    labels = [label for _, label, _ in d.sampler_blocks()]
    if blocks is not None and set(blocks) - set(labels):
        raise ValueError(f"unknown blocks {sorted(set(blocks) - set(labels))}; the sampler's blocks: {labels}")
    if isinstance(nuts, CheckSettings):
        settings, nuts = nuts, None
    t0 = time.perf_counter()
    latent, observed = _program_sites(d)
    _check_sites(d, latent, observed)
    s = settings
    exact, vi = d.method == "exact", d.method == "vi"
    out: list[CheckOutcome] = []
    results: dict = {"settings": s, "seed": seed}

    def skipped(name, level):
        return CheckOutcome(name, level, "not selected", False, "left out by check(..., checks=...)")

    # update level
    if "conditional" not in selected:
        out.append(skipped("conditional", "update"))
    elif not d.conditionals:
        out.append(_absent("conditional", "update", "no Derivation.conditionals: no candidate conditional to check on a grid"))
    else:
        for site in d.conditionals:
            out.append(_conditional_outcome(d, site, latent, s, seed))
    for site in [x for x in latent if exact and x not in d.conditionals and "conditional" in selected and d.conditionals]:
        owner = [k for k in d.gibbs_blocks if site in _block_sites(k)]
        out.append(_absent(f"conditional[{site}]", "update",
                           f"drawn by gibbs_blocks[{owner[0]!r}]: declare conditionals[{site!r}] to check it on a grid"
                           if owner else f"no conditionals[{site!r}]"))
    has_cavi = bool(d.cavi_blocks) and d.elbo is not None
    why_cavi = ("needs Derivation.elbo and cavi_blocks" if not has_cavi else "")
    if "stationarity" not in selected:
        out.append(skipped("stationarity", "update"))
    elif not has_cavi:
        out.append(_absent("stationarity", "update", why_cavi))
    else:
        out += _stationarity_outcomes(d, s, seed)
    if "monotone" not in selected:
        out.append(skipped("monotone", "update"))
    elif not has_cavi:
        out.append(_absent("monotone", "update", why_cavi))
    else:
        out.append(_monotone_outcome(d, s, seed))

    # NUTS, only when a check needs it
    needs_ref = ("crosscheck" in selected) or ("bridge" in selected and exact and d.sampler_blocks())
    ref = nuts
    if needs_ref and ref is None:
        ref = nuts_reference(d, s, seed=seed, progress=progress)
    if ref is not None:
        results["reference"] = ref

    # bridge
    if "bridge" not in selected:
        out.append(skipped("bridge", "bridge"))
    elif not exact:
        out.append(CheckOutcome("bridge", "bridge", "not applicable", False, "VI solver: no Gibbs blocks"))
    elif not d.sampler_blocks():
        out.append(_absent("bridge", "bridge", "no Derivation.conditionals or gibbs_blocks (the sampler is an opaque fit)"))
    else:
        results["bridge"] = {}
        out += _bridge_outcomes(d, latent, ref, s, seed, results["bridge"], None if blocks is None else set(blocks))

    # posterior level
    fit = solver_fit(d, s)
    params = None
    if "crosscheck" not in selected:
        out.append(skipped("crosscheck", "posterior"))
    else:
        o, params = _crosscheck_outcome(d, fit, ref, s, seed, results)
        out.append(o)

    # calibration and evidence
    simulate = _simulator(d)
    for name, applies, runner in (("sbc", exact, _sbc_outcome), ("vsbc", vi, _vsbc_outcome)):
        level = "calibration" if name == "sbc" else "evidence"
        if not applies:
            out.append(CheckOutcome(name, level, "not applicable", False,
                                    "exact sampler (SBC applies)" if name == "vsbc" else "VI solver (VSBC applies)"))
        elif name not in selected or sbc_sims == 0:
            out.append(CheckOutcome(name, level, "not selected", False,
                                    "sbc_sims = 0" if name in selected else "left out by check(..., checks=...)"))
        elif simulate is None:
            out.append(_absent(name, level, "no Derivation.observed or simulate: cannot draw data sets from the prior"))
        else:
            out.append(runner(d, fit, simulate, s, int(sbc_sims), seed, results))
    if not vi:
        out.append(CheckOutcome("khat", "evidence", "not applicable", False, "exact sampler"))
    elif "khat" not in selected:
        out.append(skipped("khat", "evidence"))
    elif d.q is None or d.vi_init is None:
        out.append(_absent("khat", "evidence", "needs Derivation.q, vi_init and cavi_blocks (q's density)"))
    else:
        if params is None:
            params, results["elbo"] = _cavi(d, s, seed, d.args, d.kwargs)
        out.append(_khat_outcome(d, params, s, seed, results))
        if "crosscheck" in results:
            results["crosscheck"].extra["khat"] = results["khat"]
    if "crosscheck" in results and "vsbc" in results:
        results["crosscheck"].extra["vsbc"] = results["vsbc"]

    report = DerivationReport(d.name, d.method, out, None, results, time.perf_counter() - t0)
    if out_dir is not None:
        path = write_report(report, d, latent, observed, out_dir)
        report = dataclasses.replace(report, path=path)
    return report


# ---------------------------------------------------------------------------------------------
# the report


_LEVEL_TEXT = {
    "update": "Update level: each derived formula against the program itself (no sampling error).",
    "bridge": "Bridge: each Gibbs block as NumPyro CustomGibbs beside NUTS on the other sites; the chain keeps "
              "the program's posterior exactly when the block draws from the right conditional.",
    "posterior": "Posterior level: the solver against a fresh, ArviZ-gated NUTS run on the identified quantities.",
    "calibration": "Calibration: SBC ranks of the identified quantities over data sets drawn from the prior.",
    "evidence": "VI evidence (reported, not counted): VSBC and PSIS k-hat of q.",
}


def write_report(report: DerivationReport, d: Derivation, latent, observed, out_dir) -> Path:
    """Write ``report.md`` (and plots; the SBC sub-report in ``sbc/``) to ``out_dir``.

    The verdict, one table of every check, the declaration, then each check's details (called by
    `check` with ``out_dir``).

    Parameters
    ----------
    report : DerivationReport
        The outcomes of `check`.
    d : Derivation
        The declaration checked.
    latent : dict str -> dict
        Latent site -> its NumPyro trace entry (``entry["value"]`` gives the site's shape).
    observed : list of str
        The program's observed sites.
    out_dir : str or pathlib.Path
        Folder of the report (created if missing).

    Returns
    -------
    pathlib.Path
        ``out_dir/report.md``.

    Raises
    ------
    OSError
        ``out_dir`` cannot be created or written.
    ImportError
        ``tabulate`` is not installed (`validation.checks.report.markdown_table`).

    Source: project addition.
    """
    from validation.checks import report as rp

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = rp._header(f"Derivation check: {d.name} ({d.method})")
    failed = report.failed()
    lines += [f"**Verdict: {report.status.upper()}**" + (f" (failed: {', '.join(failed)})" if failed else ""), "",
              "A counted check (`counts` = yes) that fails makes the verdict FAIL; an inconclusive one (NUTS failed "
              "its ArviZ gates) makes it INCONCLUSIVE. Checks that do not apply are listed with the reason.", "",
              rp.markdown_table(report.table()), "",
              "## Declaration", "",
              f"- program: `{getattr(d.program, '__name__', d.program)}`; {d.description}",
              "- latent sites: " + ", ".join(f"{n} {tuple(np.shape(v['value']))}" for n, v in latent.items()),
              f"- observed sites: {', '.join(observed) or 'none'}",
              f"- conditionals: {', '.join(d.conditionals) or 'none'}; gibbs_blocks: "
              f"{', '.join(_block_label(k) for k in d.gibbs_blocks) or 'none'}; cavi_blocks: "
              f"{', '.join(_block_label(k) for k in d.cavi_blocks) or 'none'}; elbo: {'yes' if d.elbo else 'no'}; "
              f"q: {'yes' if d.q else 'no'}; fit: {'declared' if d.fit else 'built from the blocks'}",
              f"- settings: `{report.results.get('settings', CheckSettings())}`; seed {report.results.get('seed', 0)}; "
              f"total {report.seconds:.1f} s", ""]
    if "reference" in report.results:
        lines += [f"- NUTS: {report.results['reference'].line()}", ""]
    for level in ("update", "bridge", "posterior", "calibration", "evidence"):
        rows = [o for o in report.outcomes if o.level == level]
        if not rows:
            continue
        lines += [f"## {level.capitalize()}", "", _LEVEL_TEXT[level], ""]
        for o in rows:
            lines += [f"### {o.check}: {o.status}", "", o.reason, ""]
            if o.table is not None and o.check not in ("monotone",):
                lines += [rp.markdown_table(o.table), ""]
        if level == "update" and "elbo" in report.results and report.results["elbo"] is not None:
            lines += [f"![ELBO]({rp._elbo_curve(np.asarray(report.results['elbo']), out)})", ""]
        if level == "posterior" and "crosscheck" in report.results:
            r = report.results["crosscheck"]
            lines += [f"![posterior means]({rp._means_scatter(r, out, r.solver)})", "",
                      f"![NUTS rank plots]({rp._rank_plots(r, out)})", ""]
        if level == "calibration" and "sbc" in report.results:
            from validation.checks import sbc

            alpha = report.results.get("settings", CheckSettings()).alpha
            res = report.results["sbc"]
            sub = sbc.sbc_report(res, out / "sbc", f"SBC of {d.name}", alpha=alpha, n_band_sims=_band_sims(res, alpha))
            lines += [f"Full SBC report with rank plots: [sbc/report.md]({sub.relative_to(out)})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
