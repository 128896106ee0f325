"""The declaration types of the validation layer: one `ModelSpec` per model, declared once in its module.

Each model's module in `validation.models` ends with ``SPEC = registry.ModelSpec(...)``: its CLI name,
its solvers (`SolverSpec`: CLI name, the solver's `custom_inference.base.Algorithm`, the cross-check
entry and its default config, the stored NUTS reference it compares against), its update or
conditional checks, SBC adapters and errata rows. Which models exist, and the lookups over them
(`names`, `get`, `all_errata`, `bridge`, ...), are in `validation.models.catalog`: this module names no
model, so that the checks never import the declarations above them (``tests/test_layout.py``).

Entries that live in another module (HPF's Gibbs solver in `validation.models.hpf_gibbs`, the solvers'
``ALGORITHM`` in `custom_inference`) are written as `lazy` references ``"module:attribute"``
and resolved on use, so no module imports another's at import time.

Source: project addition (BlackJAX's algorithm records; posteriordb's model/data/reference split).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

__all__ = ["lazy", "resolve", "vi_evidence", "merge_settings", "MissingDeclaration", "SOLVER_PARTS", "MODEL_PARTS", "METHODS", "EVALUATIONS",
           "POINT_ESTIMATE", "part_problems", "EvaluationEntry", "SolverSpec", "ReferenceSpec", "ModelSpec"]

#: The parts every solver declaration carries, each present or declared absent with its reason
#: (``SolverSpec.absent``): its ``Algorithm``; its front-door adapter (the name ``factorbayes.fit(model=...)``
#: takes); its cross-check against NUTS; a stored NUTS reference; an SBC adapter (samplers) or a VSBC adapter (VI);
#: the held-out evaluations it takes part in (``SolverSpec.evaluations``, names of `EVALUATIONS`).
SOLVER_PARTS = ("algorithm", "frontdoor", "crosscheck", "reference", "sbc", "evaluation")
#: The held-out evaluations of `validation.evaluation` a solver can declare (``SolverSpec.evaluations``): name ->
#: what it is. Each evaluation runs, besides its own baselines, every solver that declares it, under the
#: solver's front-door name, with the runner the solver declares for it (`EvaluationEntry`; the runner's
#: arguments are the evaluation's contract, written in the evaluation module's docstring). A declared evaluation
#: without a runner is an error: the evaluation raises `MissingDeclaration`, and
#: ``tests/validation/test_registry.py`` fails naming it.
EVALUATIONS = {
    "counts": "top-100 from counts on protocol P3 (validation.evaluation.counts_eval)",
    "counts+side": "the same with the MovieLens side features as further FM feature groups",
    "ratings": "RMSE of real ratings on protocol P2 (validation.evaluation.ratings_eval)",
    "implicit": "one-class top-N on P1 / SIBM / baskets (validation.evaluation.implicit_eval, model_systems)",
}
#: What a solver computes: "exact" (a sampler: draws from the posterior), "vi" (an approximation q of it),
#: "point" (one point: MAP or a regularized SGD fit, no posterior to compare with NUTS or to calibrate).
METHODS = ("exact", "vi", "point")
#: The reasons a point-estimate solver (``method="point"``) declares for the parts only a posterior has; for
#: ``SolverSpec(..., absent=POINT_ESTIMATE)``.
POINT_ESTIMATE = {
    "crosscheck": "a point estimate (MAP / regularized SGD): no posterior to compare with NUTS's; its "
                  "predictions are compared in the evaluations (validation.evaluation)",
    "reference": "no cross-check, so no stored NUTS reference of its own",
    "sbc": "a point estimate: SBC and VSBC calibrate posteriors, and there is none",
}
#: The parts every model declaration carries, present or declared absent (``ModelSpec.absent``): the
#: CustomGibbs bridge of its sampler's blocks, and its teaching notebook.
MODEL_PARTS = ("bridge", "notebook")


class MissingDeclaration(LookupError):
    """A part of a declaration was asked for that the declaration does not carry.

    Raised by `SolverSpec.run`, `SolverSpec.default_config`, `SolverSpec.get_algorithm`,
    `SolverSpec.adapter` and `ModelSpec.get_bridge` (and by the evaluations for a declared evaluation
    without a runner). The message names the declaration and the part, and either the reason declared
    in its ``absent`` or how to declare one. A `LookupError`; constructed with the message, like any
    exception.

    Raises
    ------
    None of its own: it is the exception raised.

    Source: project addition.
    """


@dataclass(frozen=True)
class lazy:  # noqa: N801 (used like a function in declarations)
    """A reference ``"package.module:attribute"`` resolved on use (`resolve`, or calling it).

    Resolution imports the module and returns the attribute; with ``args`` / ``kwargs`` it returns
    ``attribute(*args, **kwargs)`` instead (``lazy("validation.models.hpf_gibbs:sbc_adapters", "gibbs")``).
    ``"module:TABLE[key]"`` stands for one entry of a dict (``lazy("custom_inference.vbfm:ALGORITHMS[ovbfm]")``).
    Frozen; stored as the fields ``target``, ``args`` (tuple) and ``kwargs`` (dict).

    Parameters
    ----------
    target : str
        ``"package.module:attribute"`` or ``"package.module:TABLE[key]"`` (exactly one ``:``).
    *args
        Positional arguments the attribute is called with on resolution (none: it is not called).
    **kwargs
        Keyword arguments the attribute is called with on resolution.

    Raises
    ------
    ValueError
        On construction, for a ``target`` without ``:``; on resolution, for one with more than one
        ``:`` (unpacking fails).
    ImportError
        On resolution: the module does not exist (ModuleNotFoundError), or importing it fails.
    AttributeError
        On resolution: the module has no such attribute.
    KeyError
        On resolution: the table has no entry ``key``. What the called attribute raises propagates.

    Source: project addition.
    """

    target: str
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)

    def __init__(self, target: str, *args, **kwargs):
        if ":" not in target:
            raise ValueError(f"lazy target must be 'module:attribute', got {target!r}")
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", kwargs)

    def __call__(self):
        module, attr = self.target.split(":")
        attr, _, item = attr.partition("[")  # "module:TABLE[key]": one entry of a table
        value = getattr(importlib.import_module(module), attr)
        if item:
            value = value[item.rstrip("]")]
        return value(*self.args, **self.kwargs) if (self.args or self.kwargs) else value


def resolve(x):
    """``x`` itself, or what a `lazy` reference stands for.

    Parameters
    ----------
    x : object or lazy
        Any declared value; a `lazy` reference is resolved, anything else returned as is.

    Returns
    -------
    object
        ``x()`` for a `lazy`, else ``x``.

    Raises
    ------
    None of its own: resolving a `lazy` propagates its ImportError / AttributeError / KeyError for a
    missing module, attribute or table entry, and whatever the referenced callable raises when the
    `lazy` carries arguments.

    Source: project addition.
    """
    return x() if isinstance(x, lazy) else x


def vi_evidence(module: str, measured: Mapping | None = None) -> dict:
    """The k-hat / VSBC part of a VI solver's declaration, for ``SolverSpec(..., **vi_evidence(...))``.

    Parameters
    ----------
    module : str
        Dotted name of the model's module (e.g. "validation.models.hpf"); it must define
        ``khat_problem`` and ``vsbc_adapters`` (checked when they resolve, not here).
    measured : mapping, optional
        The VI evidence recorded by hand (see ``SolverSpec``'s ``measured``); None: {}.

    Returns
    -------
    dict
        ``{"khat": lazy("MODULE:khat_problem"), "vsbc": lazy("MODULE:vsbc_adapters"),
        "measured": dict(measured)}``, the keywords of `SolverSpec`.

    Raises
    ------
    None of its own (the references resolve on use).

    Source: project addition.
    """
    return {"khat": lazy(f"{module}:khat_problem"), "vsbc": lazy(f"{module}:vsbc_adapters"),
            "measured": dict(measured or {})}


@dataclass(frozen=True)
class EvaluationEntry:
    """How a solver takes part in one held-out evaluation (a value of ``SolverSpec.evaluations``).

    Everything measured from the runner's output (metrics, intervals, tables) stays in the evaluation.

    Parameters
    ----------
    runner : callable, lazy or None
        The model's part of the evaluation: fit the solver with the evaluation's settings, return its
        predictions or score function. Usually ``lazy("validation.models.MODEL:NAME")``; None: not
        declared yet (the evaluation refuses it, `SolverSpec.problems` reports it). Its arguments and
        return value are the evaluation's runner contract, written in the evaluation module's docstring
        (`validation.evaluation.ratings_eval`, `validation.evaluation.counts_eval`,
        `validation.evaluation.implicit_eval`).
    data : str, default ""
        Which of the evaluation's inputs the runner takes (a name the evaluation defines, e.g. "split"
        or "fm" for the ratings; "" where it has one).
    setting : callable, lazy or None, default None
        ``setting(settings) -> str``: the text of the runner's settings for the evaluation's notes
        (``settings``: the runner's settings, ``defaults`` merged with the user's overrides, `merge_settings`).
    defaults : dict, lazy or None, default None
        The runner's own settings (a dict, or a `lazy` reference to one) that the evaluation merges with
        a user's overrides keyed by the model's name (e.g. ``implicit_eval.model_systems(rg={"K": 20})``,
        ``RatingsConfig(settings={"sbmf": {"warmup": 20}})``) and hands to the runner.
    flags : dict, default {}
        The evaluation's command-line flags (argparse ``dest``, e.g. "pfm_warmup") that set one of these
        settings -> the setting's name (e.g. "warmup"): how ``factorbayes evaluate ratings|counts`` maps its
        own flags onto the declared settings (`validation.frontdoor.cli_evaluate`).

    Raises
    ------
    None on construction (the references resolve on use; `SolverSpec.problems` resolves them).

    Source: project addition (issue 25: the evaluations' per-model code lives in the declarations).
    """

    runner: object
    data: str = ""
    setting: object = None
    defaults: object = None
    flags: Mapping[str, str] = field(default_factory=dict)

    def get_runner(self):
        """The runner, resolved.

        Returns
        -------
        callable or None
            ``runner``, or what its `lazy` reference stands for (None when no runner is declared).

        Raises
        ------
        ImportError
            A `lazy` reference whose module does not import.
        AttributeError
            A `lazy` reference whose attribute does not exist (KeyError for a missing table entry).

        Source: project addition.
        """
        return resolve(self.runner)

    def get_defaults(self) -> dict:
        """A copy of the declared ``defaults`` (resolved), or {} when none.

        Returns
        -------
        dict
            A new dict (setting name -> value); the caller may change it.

        Raises
        ------
        ImportError
            A `lazy` reference whose module does not import.
        AttributeError
            A `lazy` reference whose attribute does not exist (KeyError for a missing table entry).

        Source: project addition.
        """
        return dict(resolve(self.defaults) or {})

    def setting_text(self, settings) -> str:
        """``setting(settings)``, or "" when the entry declares none.

        Parameters
        ----------
        settings : mapping of str to object
            The runner's settings: ``defaults`` merged with the user's overrides (`merge_settings`).

        Returns
        -------
        str
            The runner's settings, for the evaluation's notes.

        Raises
        ------
        KeyError
            Not of its own: what ``setting`` raises propagates (e.g. KeyError for settings without a name
            it reads), as do the errors of resolving a `lazy` ``setting``.

        Source: project addition.
        """
        fn = resolve(self.setting)
        return "" if fn is None else fn(settings)


def merge_settings(defaults: Mapping[str, Mapping], settings: Mapping | None, evaluation: str) -> dict[str, dict]:
    """Each system's declared settings merged with a user's overrides, both keyed by the system's name.

    The rule of every held-out evaluation's per-model settings (``EvaluationEntry.defaults``): a user
    overrides a declared setting of a declared system, nothing else.

    Parameters
    ----------
    defaults : mapping of str to mapping
        System name (e.g. a front-door name, "sbmf") -> its runner's declared defaults (setting name ->
        value; `EvaluationEntry.get_defaults`).
    settings : mapping of str to mapping, or None
        System name -> overrides (setting name -> value); None or {}: the defaults.
    evaluation : str
        The evaluation's name, for the messages (e.g. "ratings").

    Returns
    -------
    dict of str to dict
        Every system of ``defaults`` -> ``{**its defaults, **its overrides}`` (new dicts).

    Raises
    ------
    ValueError
        ``settings`` (or one system's overrides) is not a mapping; a system that ``defaults`` does not hold
        (the message lists those it holds); a setting its system does not declare (the message names the
        system and the settings it declares).

    Source: project addition (issue 25: the per-model settings live in the declarations).
    """
    settings = {} if settings is None else settings
    if not isinstance(settings, Mapping):
        raise ValueError(f"settings: a mapping system name -> {{setting: value}}, got {type(settings).__name__}")
    strays = sorted(set(settings) - set(defaults))
    if strays:
        raise ValueError(f"settings for {strays}: no solver declares the {evaluation!r} evaluation under that name; "
                         f"per-model settings go to {sorted(defaults)}")
    out = {}
    for name, declared in defaults.items():
        given = settings.get(name) or {}
        if not isinstance(given, Mapping):
            raise ValueError(f"settings[{name!r}]: a mapping setting name -> value, got {given!r}")
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise ValueError(f"{name}: unknown settings {unknown} for the {evaluation!r} evaluation; {name} declares "
                             f"{sorted(declared) or 'none'}")
        out[name] = {**declared, **given}
    return out


@dataclass(frozen=True)
class SolverSpec:
    """One solver of a model, as the CLI and the tests see it.

    Frozen. Each of `SOLVER_PARTS` is present or declared absent in ``absent`` with its reason
    (`problems` checks it).

    Parameters
    ----------
    name : str
        CLI name (``--solver``), e.g. "cavi".
    method : {"exact", "vi", "point"}
        One of `METHODS`: which cross-check skeleton is used ("exact": a sampler, "vi": an approximation
        q); "point": a point estimate (MAP / SGD).
    crosscheck : callable, lazy or None, default None
        ``run_crosscheck(config, *, progress, reference)`` ->
        `validation.checks.crosscheck.CrosscheckResult`; None: declared absent.
    config : object, type, lazy or None, default None
        The default cross-check config: an instance, or a config class (instantiated without arguments
        by `default_config`), or a `lazy` reference to either; None without a cross-check.
    reference : str or None, default None
        Name of the stored NUTS reference (a `ReferenceSpec` of the model) it compares against; None:
        declared absent.
    algorithm : custom_inference.base.Algorithm, lazy or None, default None
        The solver's Algorithm, usually ``lazy("custom_inference.X:ALGORITHM")``; None: declared absent.
    frontdoor : str or None, default None
        The front-door adapter that fits this solver on a user's data (``factorbayes.fit(model=frontdoor)``).
    khat : callable, lazy or None, default None
        The model's ``khat_problem(fitted state, data, ...)`` (VI: what its cross-check passes to
        `validation.checks.crosscheck.vi_crosscheck`); usually from `vi_evidence`.
    vsbc : callable, lazy or None, default None
        ``vsbc_adapters(solver) -> (simulate, fit, functionals, description)`` for
        `validation.checks.vi_evidence.run_vsbc`; usually from `vi_evidence`. Counts as the "sbc" part.
    measured : mapping, default {}
        The VI evidence recorded by hand for the README (khat, n_latent, vsbc, vsbc_sims, vsbc_passed,
        fn_khat; see `validation.models.catalog.evidence_table`).
    evaluations : mapping or tuple of str, default {}
        The held-out evaluations that run this solver (part "evaluation"; empty: declare it absent with
        the reason): `EVALUATIONS` name -> `EvaluationEntry` (a bare callable or `lazy` stands for
        ``EvaluationEntry(runner)``); a tuple of names declares no runner (``EvaluationEntry(None)``),
        which the evaluation refuses. Stored as a dict name -> `EvaluationEntry`.
    absent : mapping of str to str, default {}
        Part (one of `SOLVER_PARTS`) -> the reason the solver has none (`POINT_ESTIMATE` for point
        estimates). A part both absent and present is an error of the declaration (`problems`).

    Raises
    ------
    ValueError
        On construction: a ``method`` not in `METHODS`, ``evaluations`` given as a string, or an
        evaluation name not in `EVALUATIONS`.

    Source: project addition.
    """

    name: str
    method: str
    crosscheck: object = None
    config: object = None
    reference: str | None = None
    algorithm: object = None
    frontdoor: str | None = None
    khat: object = None
    vsbc: object = None
    measured: Mapping = field(default_factory=dict)
    evaluations: Mapping = field(default_factory=dict)
    absent: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"{self.name}: method must be one of {METHODS}, got {self.method!r}")
        if isinstance(self.evaluations, str):
            raise ValueError(f"{self.name}: evaluations must be a mapping name -> EvaluationEntry (or a tuple of "
                             f"names), got the string {self.evaluations!r}")
        if not isinstance(self.evaluations, Mapping):  # names only: no runner declared (`EvaluationEntry(None)`)
            object.__setattr__(self, "evaluations", {name: EvaluationEntry(None) for name in self.evaluations})
        object.__setattr__(self, "evaluations", {k: v if isinstance(v, EvaluationEntry) else EvaluationEntry(v)
                                                 for k, v in self.evaluations.items()})
        unknown = [e for e in self.evaluations if e not in EVALUATIONS]
        if unknown:
            raise ValueError(f"{self.name}: evaluations {unknown} are not among {tuple(EVALUATIONS)}")

    def run(self, config=None, **kwargs):
        """Run the cross-check of this solver against its stored NUTS reference.

        Parameters
        ----------
        config : object, optional
            The cross-check config (the model's config dataclass); None: `default_config`.
        **kwargs
            Passed to the cross-check entry (``progress``, ``reference``, as ``crosscheck`` above).

        Returns
        -------
        validation.checks.crosscheck.CrosscheckResult
            What the entry returns.

        Raises
        ------
        MissingDeclaration
            The solver declares no cross-check (the message gives the declared reason), or no default
            config while ``config`` is None (the message says "no config" and how to give one). What the
            entry raises propagates.

        Source: project addition.
        """
        entry = _required(self, "crosscheck", self.crosscheck)
        return entry(self.default_config() if config is None else config, **kwargs)

    def default_config(self):
        """The default cross-check config.

        Returns
        -------
        object
            ``config`` resolved, instantiated without arguments when it is a class.

        Raises
        ------
        MissingDeclaration
            The solver declares no cross-check (the message gives the declared reason), or a cross-check
            without a config (the message says "no config": pass one to `run`, or declare
            ``SolverSpec(config=...)``). Errors of resolving a `lazy` propagate.

        Source: project addition.
        """
        if self.config is None and self.crosscheck is not None:
            raise MissingDeclaration(f"{self.name}: no config declared for its cross-check; pass one "
                                     f"(run(config=...)) or declare SolverSpec(config=...), the default config")
        c = _required(self, "crosscheck", self.config)
        return c() if isinstance(c, type) else c

    def get_algorithm(self):
        """The solver's `custom_inference.base.Algorithm`.

        Returns
        -------
        custom_inference.base.Algorithm
            ``algorithm``, resolved.

        Raises
        ------
        MissingDeclaration
            The declaration has none (naming the declared reason when it is declared absent).
        ImportError
            The `lazy` reference names a module that does not import.
        AttributeError
            The `lazy` reference names an attribute that does not exist.
        KeyError
            The `lazy` reference names a table entry that does not exist.

        Source: project addition.
        """
        return _required(self, "algorithm", self.algorithm)

    def adapter(self, kind: str):
        """The solver's k-hat or VSBC adapter, resolved.

        Parameters
        ----------
        kind : {"khat", "vsbc"}
            Which adapter: ``khat_problem`` or ``vsbc_adapters`` (see ``khat`` / ``vsbc`` above).

        Returns
        -------
        callable
            The adapter.

        Raises
        ------
        ValueError
            ``kind`` is neither "khat" nor "vsbc".
        MissingDeclaration
            The solver declares no such adapter.
        ImportError
            Its `lazy` reference names a module that does not import (AttributeError: a missing
            attribute).

        Source: project addition.
        """
        if kind not in ("khat", "vsbc"):
            raise ValueError(f"kind must be 'khat' or 'vsbc', got {kind!r}")
        return _required(self, kind, getattr(self, kind))

    def problems(self, spec: "ModelSpec") -> list[str]:
        """What is wrong with this solver's declaration inside model ``spec``.

        Each of `SOLVER_PARTS` missing without a declared reason, declared absent with an empty reason or
        while present; a declared evaluation without a runner; a reference (algorithm, khat, vsbc, an
        evaluation's runner, setting or defaults) that does not resolve (the error's text); an evaluation's
        ``flags`` naming a setting its ``defaults`` do not declare. The reference
        part counts as present only when ``spec`` has a `ReferenceSpec` of that name.

        Parameters
        ----------
        spec : ModelSpec
            The model declaring this solver (its name prefixes the messages).

        Returns
        -------
        list of str
            One message per problem; empty: the declaration conforms.

        Raises
        ------
        None of its own: errors of resolution are reported, not raised.

        Source: project addition.
        """
        present = {"algorithm": self.algorithm is not None, "frontdoor": bool(self.frontdoor),
                   "crosscheck": self.crosscheck is not None,
                   "reference": self.reference is not None and any(r.name == self.reference for r in spec.references),
                   "sbc": self.name in spec.sbc or self.vsbc is not None,
                   "evaluation": bool(self.evaluations)}
        out = part_problems(f"{spec.name} {self.name}", present, self.absent, SOLVER_PARTS)
        out += [f"{spec.name} {self.name}: declares the {e!r} evaluation without a runner"
                for e, entry in self.evaluations.items() if entry.runner is None]
        refs = [("algorithm", self.algorithm), ("khat", self.khat), ("vsbc", self.vsbc)]
        refs += [(f"{e} runner", entry.runner) for e, entry in self.evaluations.items() if entry.runner is not None]
        refs += [(f"{e} {what}", ref) for e, entry in self.evaluations.items()
                 for what, ref in (("setting", entry.setting), ("defaults", entry.defaults)) if ref is not None]
        for part, ref in refs:
            if ref is not None:
                try:
                    resolve(ref)
                except Exception as e:  # noqa: BLE001 (reported, not raised)
                    out.append(f"{spec.name} {self.name}: {part} {getattr(ref, 'target', ref)!r} does not resolve: "
                               f"{type(e).__name__}: {e}")
        for e, entry in self.evaluations.items():
            try:
                undeclared = sorted(set(entry.flags.values()) - set(entry.get_defaults()))
            except Exception:  # noqa: BLE001 (an unresolved defaults reference is reported above)
                continue
            if undeclared:
                out.append(f"{spec.name} {self.name}: the {e!r} flags set settings {undeclared} that its defaults "
                           "do not declare")
        return out


def _required(owner, part: str, value):
    """``value`` resolved; MissingDeclaration naming ``owner``'s declared reason when it is None."""
    if value is None:
        reason = owner.absent.get(part)
        raise MissingDeclaration(f"{owner.name}: no {part} declared"
                                 + (f" (declared absent: {reason})" if reason else
                                    f"; declare it, or declare it absent with its reason (absent={{{part!r}: ...}})"))
    return resolve(value)


def part_problems(who: str, present: Mapping[str, bool], absent: Mapping[str, str], parts) -> list[str]:
    """The conformance rule of every declaration (solvers, models, front-door adapters).

    Each of ``parts`` is present or declared absent with a non-empty reason, never both, and no absent
    entry names a part outside ``parts``.

    Parameters
    ----------
    who : str
        Prefix of each message (e.g. "hpf cavi").
    present : mapping of str to bool
        Part -> whether the declaration carries it; must hold every part of ``parts``.
    absent : mapping of str to str
        Part -> the declared reason for its absence.
    parts : sequence of str
        The parts to check (e.g. `SOLVER_PARTS`, `MODEL_PARTS`).

    Returns
    -------
    list of str
        One message per problem; empty: conforms.

    Raises
    ------
    KeyError
        ``present`` lacks one of ``parts``.

    Source: project addition (issue 25).
    """
    out = [f"{who}: absent part {p!r} is not one of {parts}" for p in absent if p not in parts]
    for p in parts:
        if present[p] and p in absent:
            out.append(f"{who}: {p} is both present and declared absent")
        elif not present[p] and not str(absent.get(p, "")).strip():
            out.append(f"{who}: no {p}, and no reason declared for its absence")
    return out


@dataclass(frozen=True)
class ReferenceSpec:
    """A stored NUTS reference of a model (frozen).

    Parameters
    ----------
    name : str
        File stem in ``validation/checks/reference_posteriors`` (e.g. "hpf-small"); what
        ``SolverSpec.reference`` names.
    nuts_reference : callable or lazy
        ``nuts_reference(config, *, reference, progress)``: runs (or loads) NUTS on the problem.
    config : object, type or lazy
        The config of the problem the reference is stored for: an instance, a config class
        (instantiated without arguments by `default_config`), or a `lazy` reference to either.

    Raises
    ------
    None on construction.

    Source: project addition.
    """

    name: str
    nuts_reference: object
    config: object

    def default_config(self):
        """The config of the stored problem.

        Returns
        -------
        object
            ``config`` resolved, instantiated without arguments when it is a class.

        Raises
        ------
        None of its own: errors of resolving a `lazy` ``config`` (ImportError, AttributeError) and of
        the class's constructor propagate.

        Source: project addition.
        """
        c = resolve(self.config)
        return c() if isinstance(c, type) else c


@dataclass(frozen=True)
class ModelSpec:
    """Everything the validation layer knows about one model, declared once as its module's ``SPEC``.

    Frozen. Each of `MODEL_PARTS` is present or declared absent in ``absent`` with its reason;
    `problems` lists what does not conform.

    Parameters
    ----------
    name : str
        The CLI name (e.g. "hpf").
    solvers : tuple of SolverSpec
        The model's solvers; the first is the default (`solver`).
    references : tuple of ReferenceSpec, default ()
        Its stored NUTS references.
    checks : mapping of str to callable, default {}
        Name -> zero-argument callable returning a pandas DataFrame with a boolean ``passed`` column
        (update-level or conditional checks at their defaults).
    sbc : mapping of str to callable or lazy, default {}
        Solver label -> zero-argument callable returning ``(simulate, fit, functionals)`` for
        `validation.checks.sbc.run_sbc` (or a `lazy` reference resolving to that triple).
    sbc_config : object, optional
        What one SBC simulation is (a config class or a `lazy` reference to one), for reports.
    errata : tuple, default ()
        `validation.checks.errata.Erratum` rows, or `lazy` references to tuples of them.
    real_data : callable, optional
        ``(ratings DataFrame, source text, config) -> (kwargs, config, text)`` for ``crosscheck --data``;
        None: the model cross-checks on its simulated problem only.
    bridge : validation.checks.bridge.BridgeSpec, lazy or None, default None
        The sampler's bridge (every Gibbs block as a NumPyro CustomGibbs block beside NUTS; usually
        `lazy`); None: declared absent.
    notebook : str or None, default None
        The teaching notebook's path from the repository root (``"notebooks/hpf.py"``).
    absent : mapping of str to str, default {}
        Part (one of `MODEL_PARTS`) -> the reason the model has none.

    Raises
    ------
    None on construction (`problems` checks the declaration).

    Source: project addition.
    """

    name: str
    solvers: tuple
    references: tuple = ()
    checks: Mapping[str, Callable] = field(default_factory=dict)
    sbc: Mapping[str, Callable] = field(default_factory=dict)
    sbc_config: object = None
    errata: tuple = ()
    real_data: Callable | None = None
    bridge: object = None
    notebook: str | None = None
    absent: Mapping[str, str] = field(default_factory=dict)

    def get_bridge(self):
        """The model's `validation.checks.bridge.BridgeSpec`, resolved.

        Returns
        -------
        validation.checks.bridge.BridgeSpec
            ``bridge``, resolved.

        Raises
        ------
        MissingDeclaration
            The model declares no bridge (the message gives its declared reason). What resolving the
            reference raises (ImportError, AttributeError, or the called function's errors) propagates.

        Source: project addition.
        """
        return _required(self, "bridge", self.bridge)

    def problems(self) -> list[str]:
        """Every way this declaration fails to conform.

        Each of `MODEL_PARTS` and, for every solver, each of `SOLVER_PARTS` present or declared absent
        with a reason (`SolverSpec.problems`); a bridge reference that does not resolve.

        Returns
        -------
        list of str
            One message per problem; empty: conforms.

        Raises
        ------
        None of its own: errors of resolution are reported, not raised.

        Source: project addition.
        """
        out = part_problems(self.name, {"bridge": self.bridge is not None, "notebook": bool(self.notebook)},
                             self.absent, MODEL_PARTS)
        if self.bridge is not None:
            try:
                resolve(self.bridge)
            except Exception as e:  # noqa: BLE001 (reported)
                out.append(f"{self.name}: bridge does not resolve: {type(e).__name__}: {e}")
        for s in self.solvers:
            out.extend(s.problems(self))
        return out

    def solver(self, name: str | None = None) -> SolverSpec:
        """The solver named ``name``.

        Parameters
        ----------
        name : str, optional
            A solver's CLI name (``--solver``); None: the first (default) solver.

        Returns
        -------
        SolverSpec
            That solver's declaration.

        Raises
        ------
        ValueError
            The model has no solver of that name (the message lists those it has). IndexError when
            ``name`` is None and the model declares no solver.

        Source: project addition.
        """
        if name is None:
            return self.solvers[0]
        for s in self.solvers:
            if s.name == name:
                return s
        raise ValueError(f"--solver: the {self.name} cross-check has solvers {[s.name for s in self.solvers]}, "
                         f"got {name!r}")

    def errata_rows(self) -> tuple:
        """The model's errata rows, in order, `lazy` entries resolved and tuples flattened.

        Returns
        -------
        tuple of validation.checks.errata.Erratum
            The rows.

        Raises
        ------
        None of its own: errors of resolving a `lazy` entry propagate.

        Source: project addition.
        """
        rows = []
        for e in self.errata:
            e = resolve(e)
            rows.extend(e if isinstance(e, (tuple, list)) else [e])
        return tuple(rows)

    def reference(self, name: str) -> ReferenceSpec:
        """The `ReferenceSpec` named ``name``.

        Parameters
        ----------
        name : str
            A reference's name (e.g. "hpf-small").

        Returns
        -------
        ReferenceSpec
            The declared reference.

        Raises
        ------
        KeyError
            The model declares no reference of that name.

        Source: project addition.
        """
        for r in self.references:
            if r.name == name:
                return r
        raise KeyError(f"{self.name} has no reference {name!r}")
