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

__all__ = ["lazy", "resolve", "vi_evidence", "MissingDeclaration", "SOLVER_PARTS", "MODEL_PARTS", "METHODS", "EVALUATIONS",
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
    """A part of a declaration was asked for that the declaration neither carries nor declares absent
    (or declares absent: the message then gives the declared reason). Source: project addition."""


@dataclass(frozen=True)
class lazy:  # noqa: N801 (used like a function in declarations)
    """A reference ``"package.module:attribute"`` resolved on use (`resolve`).

    With ``args``/``kwargs`` the attribute is called with them on resolution
    (``lazy("validation.models.hpf_gibbs:sbc_adapters", "gibbs")``); without, it is returned as is.
    ``"module:TABLE[key]"`` stands for one entry of a dict (``lazy("custom_inference.vbfm:ALGORITHMS[ovbfm]")``).
    Raises ValueError for a target without ``:``; (on resolution) ImportError / AttributeError for a missing
    module or attribute, KeyError for a missing table entry.
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

    Raises nothing of its own; resolving a `lazy` propagates ImportError / AttributeError for a missing
    module or attribute, and whatever the referenced callable raises when ``lazy`` carries arguments.
    Source: project addition.
    """
    return x() if isinstance(x, lazy) else x


def vi_evidence(module: str, measured: Mapping | None = None) -> dict:
    """The k-hat / VSBC part of a VI solver's declaration, for ``SolverSpec(..., **vi_evidence(...))``:
    ``khat`` = ``lazy("MODULE:khat_problem")``, ``vsbc`` = ``lazy("MODULE:vsbc_adapters")`` and ``measured``.
    Returns a dict of those three keywords. Raises nothing (the references resolve on use).
    Source: project addition."""
    return {"khat": lazy(f"{module}:khat_problem"), "vsbc": lazy(f"{module}:vsbc_adapters"),
            "measured": dict(measured or {})}


@dataclass(frozen=True)
class EvaluationEntry:
    """How a solver takes part in one held-out evaluation (a value of ``SolverSpec.evaluations``).

    ``runner``: None (not declared yet), or the model's part of the evaluation (fit the solver with the evaluation's settings, return
    its predictions or score function), a callable or, usually, ``lazy("validation.models.MODEL:NAME")``; its
    arguments and return value are the evaluation's runner contract, written in the evaluation module's
    docstring (`validation.evaluation.ratings_eval`, `validation.evaluation.counts_eval`,
    `validation.evaluation.implicit_eval`); everything measured from them (metrics, intervals, tables) stays
    in the evaluation. ``data``: which of the evaluation's inputs the runner takes (a name the evaluation
    defines, e.g. "split" or "fm" for the ratings; "" where it has one). ``setting``: None, or
    ``setting(config) -> str``, the text of the runner's settings for the evaluation's notes (``config``: the
    evaluation's config object, read by attribute). ``defaults``: None, or the runner's own settings (a dict, or a
    `lazy` reference to one) that the evaluation merges with a user's overrides keyed by the model's name (e.g.
    ``implicit_eval.model_systems(rg={"K": 20})``) and hands to the runner.
    Raises nothing on construction (the references resolve on use; `SolverSpec.problems` resolves them).
    Source: project addition (issue 25: the evaluations' per-model code lives in the declarations).
    """

    runner: object
    data: str = ""
    setting: object = None
    defaults: object = None

    def get_runner(self):
        """The runner, resolved. Raises ImportError / AttributeError for a `lazy` reference that does not
        resolve. Source: project addition."""
        return resolve(self.runner)

    def get_defaults(self) -> dict:
        """A copy of the declared ``defaults`` (resolved), or {} when none. Raises ImportError / AttributeError for
        a `lazy` reference that does not resolve. Source: project addition."""
        return dict(resolve(self.defaults) or {})

    def setting_text(self, config) -> str:
        """``setting(config)``, or "" when the entry declares none. Raises what ``setting`` raises (e.g.
        AttributeError for a config without a field it reads). Source: project addition."""
        fn = resolve(self.setting)
        return "" if fn is None else fn(config)


@dataclass(frozen=True)
class SolverSpec:
    """One solver of a model, as the CLI and the tests see it.

    ``name``: CLI name (``--solver``); ``algorithm``: the solver's `custom_inference.base.Algorithm`
    (usually ``lazy("custom_inference.X:ALGORITHM")``; None where the module has none yet);
    ``method``: one of `METHODS` ("exact", "vi": the cross-check skeleton used; "point": a point estimate);
    ``crosscheck``: ``run_crosscheck(config, *, progress, reference)`` ->
    `validation.checks.crosscheck.CrosscheckResult`, or None when declared absent;
    ``config``: the default cross-check config (or a zero-argument callable making it; None without a cross-check);
    ``reference``: the name of the stored NUTS reference it compares against (None: declared absent);
    ``frontdoor``: the name of the front-door adapter that fits this solver on a user's data
    (``factorbayes.fit(model=frontdoor)``), or None; ``khat``: the model's ``khat_problem(fitted state, data,
    ...)`` (VI: what its cross-check passes to `validation.checks.crosscheck.vi_crosscheck`), ``vsbc``:
    ``vsbc_adapters(solver) -> (simulate, fit, functionals, description)`` for
    `validation.checks.vi_evidence.run_vsbc` (both usually `lazy`, None: none); ``measured``: the VI evidence
    recorded by hand for the README (khat, n_latent, vsbc, vsbc_sims, vsbc_passed, fn_khat; see
    `validation.models.catalog.evidence_table`); ``evaluations``: the held-out evaluations that run this solver
    (part "evaluation"; empty: declare it absent with the reason), a mapping `EVALUATIONS` name ->
    `EvaluationEntry` (a bare callable or `lazy` stands for ``EvaluationEntry(runner)``; a tuple of names declares
    no runner, ``EvaluationEntry(None)``, which the evaluation refuses unless it still keeps one); stored as a dict, so
    ``name in spec.evaluations`` and iteration give the names; ``absent``: part (one of `SOLVER_PARTS`) -> the
    reason the solver has none (a part both absent and present is an error of the declaration, `problems`).
    Raises ValueError on construction for a ``method`` not in `METHODS`, ``evaluations`` given as a string,
    or an evaluation not in `EVALUATIONS`.
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
        """Run the cross-check (default config unless ``config``); kwargs go to the entry.

        Raises MissingDeclaration (with the declared reason) for a solver without a cross-check; what the
        entry raises propagates. Source: project addition."""
        entry = _required(self, "crosscheck", self.crosscheck)
        return entry(self.default_config() if config is None else config, **kwargs)

    def default_config(self):
        """The default cross-check config. Raises MissingDeclaration for a solver without a cross-check.
        Source: project addition."""
        c = _required(self, "crosscheck", self.config)
        return c() if isinstance(c, type) else c

    def get_algorithm(self):
        """The solver's `custom_inference.base.Algorithm`.

        Raises MissingDeclaration when the declaration has none (naming the declared reason when it is
        declared absent); ImportError / AttributeError / KeyError when the `lazy` reference names a module,
        attribute or table entry that does not exist. Source: project addition.
        """
        return _required(self, "algorithm", self.algorithm)

    def adapter(self, kind: str):
        """The solver's k-hat (``kind="khat"``) or VSBC (``kind="vsbc"``) adapter, resolved.

        Raises ValueError for another ``kind``; MissingDeclaration when the solver declares none;
        ImportError / AttributeError for a reference that does not resolve. Source: project addition.
        """
        if kind not in ("khat", "vsbc"):
            raise ValueError(f"kind must be 'khat' or 'vsbc', got {kind!r}")
        return _required(self, kind, getattr(self, kind))

    def problems(self, spec: "ModelSpec") -> list[str]:
        """What is wrong with this solver's declaration inside model ``spec``: each of `SOLVER_PARTS`
        missing without a declared reason, declared absent with an empty reason or while present, or
        present but not resolving (the error's text). Returns a list of str (empty: conforms).
        Raises nothing (errors of resolution are reported). Source: project addition."""
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
    """The conformance rule of every declaration (solvers, models, front-door adapters): each of ``parts``
    present (``present[part]`` true) or declared absent with a non-empty reason (``absent[part]``), never both,
    and no absent entry outside ``parts``. ``who`` prefixes each message. Returns a list of str (empty:
    conforms). Raises KeyError when ``present`` lacks one of ``parts``. Source: project addition (issue 25)."""
    out = [f"{who}: absent part {p!r} is not one of {parts}" for p in absent if p not in parts]
    for p in parts:
        if present[p] and p in absent:
            out.append(f"{who}: {p} is both present and declared absent")
        elif not present[p] and not str(absent.get(p, "")).strip():
            out.append(f"{who}: no {p}, and no reason declared for its absence")
    return out


@dataclass(frozen=True)
class ReferenceSpec:
    """A stored NUTS reference of a model: ``name`` (file stem in
    ``validation/checks/reference_posteriors``), ``nuts_reference(config, *, reference, progress)`` and the
    ``config`` of the problem it is stored for. Source: project addition."""

    name: str
    nuts_reference: object
    config: object

    def default_config(self):
        c = resolve(self.config)
        return c() if isinstance(c, type) else c


@dataclass(frozen=True)
class ModelSpec:
    """Everything the validation layer knows about one model, declared once as its module's ``SPEC``.

    ``name``: the CLI name; ``solvers``: `SolverSpec` tuple (the first is the default);
    ``references``: `ReferenceSpec` tuple; ``checks``: name -> zero-argument callable returning a
    DataFrame with a boolean ``passed`` column (update-level or conditional checks at their
    defaults); ``sbc``: solver label -> zero-argument callable returning ``(simulate, fit,
    functionals)`` for `validation.checks.sbc.run_sbc`; ``sbc_config``: what one SBC simulation is (for
    reports); ``errata``: tuple of `validation.checks.errata.Erratum` or `lazy` references to such tuples;
    ``real_data``: optional ``(ratings DataFrame, source text, config) -> (kwargs, config, text)``
    for ``crosscheck --data`` (None: the model cross-checks on its simulated problem only);
    ``bridge``: the sampler's `validation.checks.bridge.BridgeSpec` (every Gibbs block as a NumPyro
    CustomGibbs block beside NUTS; usually `lazy`), or None; ``notebook``: the teaching notebook's path
    from the repository root (``"notebooks/hpf.py"``), or None; ``absent``: part (one of `MODEL_PARTS`) ->
    the reason the model has none. `problems` lists what does not conform.
    Raises nothing on construction. Source: project addition.
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
        """The model's `validation.checks.bridge.BridgeSpec`, resolved. Raises MissingDeclaration when the
        model declares none (with its declared reason); what resolving the reference raises propagates.
        Source: project addition."""
        return _required(self, "bridge", self.bridge)

    def problems(self) -> list[str]:
        """Every way this declaration fails to conform: each of `MODEL_PARTS` and, for every solver, each of
        `SOLVER_PARTS` present or declared absent with a reason (`SolverSpec.problems`); a bridge reference
        that does not resolve. Returns a list of str (empty: conforms). Raises nothing.
        Source: project addition."""
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
        """The solver ``name`` (default the first). Raises ValueError for an unknown one."""
        if name is None:
            return self.solvers[0]
        for s in self.solvers:
            if s.name == name:
                return s
        raise ValueError(f"--solver: the {self.name} cross-check has solvers {[s.name for s in self.solvers]}, "
                         f"got {name!r}")

    def errata_rows(self) -> tuple:
        """The model's errata rows (lazy entries resolved), in order."""
        rows = []
        for e in self.errata:
            e = resolve(e)
            rows.extend(e if isinstance(e, (tuple, list)) else [e])
        return tuple(rows)

    def reference(self, name: str) -> ReferenceSpec:
        """The `ReferenceSpec` named ``name``. Raises KeyError when the model declares none of that name."""
        for r in self.references:
            if r.name == name:
                return r
        raise KeyError(f"{self.name} has no reference {name!r}")
