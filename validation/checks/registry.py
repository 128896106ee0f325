"""The validation registry: one `ModelSpec` per model, declared once in its validation module.

Each model's validation module ends with ``SPEC = registry.ModelSpec(...)``: its CLI name, its
solvers (`SolverSpec`: CLI name, the solver's `custom_inference.base.Algorithm`, the
cross-check entry and its default config, the stored NUTS reference it compares against), its
update or conditional checks, SBC adapters, errata rows and bridge blocks (NumPyro
``CustomGibbs`` blocks) where it has them. `MODULES` maps each model name to that module; the
registry imports a module only when its spec is asked for. The CLI (`validation.frontdoor.cli`), the
errata table (`all_errata`) and the parametrised tests (``tests/validation/test_registry.py``)
iterate over it, so adding a model is its ``SPEC`` plus one line in `MODULES`.

Entries that live in another module (HPF's Gibbs solver in `validation.models.hpf_gibbs`, the solvers'
``ALGORITHM`` in `custom_inference`) are written as `lazy` references ``"module:attribute"``
and resolved on use, so no module imports another's at import time.

Source: project addition (BlackJAX's algorithm records; posteriordb's model/data/reference split).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

__all__ = ["MODULES", "BRIDGES", "lazy", "resolve", "SolverSpec", "ReferenceSpec", "ModelSpec", "names", "get", "specs",
           "all_errata", "by_reference", "solver_names", "sbc_models", "bridge", "bridge_models"]

# model (CLI) name -> validation module declaring its SPEC ("module" or "module:ATTRIBUTE" where one
# module declares two models)
MODULES: dict[str, str] = {
    "hpf": "hpf",
    "sbmf": "sbmf",
    "bpmf": "bpmf",
    "mcmc-fm": "fm_mcmc",
    "vbfm": "vbfm",
    "sibm": "sibm",
    "rg": "rg",
    "npfm": "pfm:SPEC_NPFM",
    "ppfm": "pfm:SPEC_PPFM",
    "psm": "psm",
}

# model name -> "module:ATTRIBUTE" of its `validation.checks.bridge.BridgeSpec` (every Gibbs block of the model's
# sampler as a NumPyro CustomGibbs block beside NUTS); imported only when asked for (`bridge`)
BRIDGES: dict[str, str] = {
    "hpf": "validation.models.hpf_gibbs:BRIDGE",
    "sbmf": "validation.models.sbmf:BRIDGE",
    "bpmf": "validation.models.bpmf:BRIDGE",
    "mcmc-fm": "validation.models.fm_mcmc:BRIDGE",
    "npfm": "validation.models.pfm_bridge:BRIDGE_NPFM",
    "ppfm": "validation.models.pfm_bridge:BRIDGE_PPFM",
}


@dataclass(frozen=True)
class lazy:  # noqa: N801 (used like a function in declarations)
    """A reference ``"package.module:attribute"`` resolved on use (`resolve`).

    With ``args``/``kwargs`` the attribute is called with them on resolution
    (``lazy("validation.models.hpf_gibbs:sbc_adapters", "gibbs")``); without, it is returned as is.
    Raises (on resolution) ImportError / AttributeError for a missing module or attribute.
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
        value = getattr(importlib.import_module(module), attr)
        return value(*self.args, **self.kwargs) if (self.args or self.kwargs) else value


def resolve(x):
    """``x`` itself, or what a `lazy` reference stands for.

    Raises nothing of its own; resolving a `lazy` propagates ImportError / AttributeError for a missing
    module or attribute, and whatever the referenced callable raises when ``lazy`` carries arguments.
    Source: project addition.
    """
    return x() if isinstance(x, lazy) else x


@dataclass(frozen=True)
class SolverSpec:
    """One solver of a model, as the CLI and the tests see it.

    ``name``: CLI name (``--solver``); ``algorithm``: the solver's `custom_inference.base.Algorithm`
    (usually ``lazy("custom_inference.X:ALGORITHM")``; None where the module has none yet);
    ``method``: "vi" or "exact" (the cross-check skeleton used); ``crosscheck``:
    ``run_crosscheck(config, *, progress, reference)`` -> `validation.checks.crosscheck.CrosscheckResult`;
    ``config``: the default cross-check config (or a zero-argument callable making it);
    ``reference``: the name of the stored NUTS reference it compares against.
    Source: project addition.
    """

    name: str
    method: str
    crosscheck: object
    config: object
    reference: str
    algorithm: object = None

    def run(self, config=None, **kwargs):
        """Run the cross-check (default config unless ``config``); kwargs go to the entry."""
        return resolve(self.crosscheck)(self.default_config() if config is None else config, **kwargs)

    def default_config(self):
        c = resolve(self.config)
        return c() if isinstance(c, type) else c

    def get_algorithm(self):
        """The solver's `Algorithm`, or None when not declared (or not importable yet)."""
        try:
            return resolve(self.algorithm)
        except (ImportError, AttributeError):
            return None


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
    (a sampler's bridge, its `validation.checks.bridge.BridgeSpec`, is registered in `BRIDGES` and read by `bridge`);
    ``real_data``: optional ``(ratings DataFrame, source text, config) -> (kwargs, config, text)``
    for ``crosscheck --data`` (None: the model cross-checks on its simulated problem only).
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
        for r in self.references:
            if r.name == name:
                return r
        raise KeyError(f"{self.name} has no reference {name!r}")


def names() -> tuple[str, ...]:
    """The registered model names (the keys of `MODULES`), in registry order; imports nothing.

    Raises nothing. Source: project addition.
    """
    return tuple(MODULES)


def get(name: str) -> ModelSpec:
    """The spec of model ``name`` (imports its validation module). Raises KeyError for an unknown name,
    AttributeError when the module declares no ``SPEC``, ValueError when the spec's ``name`` differs
    from the registered one; an ImportError (or any error) of the module's import propagates.
    Source: project addition.
    """
    if name not in MODULES:
        raise KeyError(f"unknown model {name!r}; registered: {', '.join(MODULES)}")
    module, _, attr = MODULES[name].partition(":")
    spec = getattr(importlib.import_module(f"validation.models.{module}"), attr or "SPEC")
    if spec.name != name:
        raise ValueError(f"validation.models.{MODULES[name]} is named {spec.name!r}, registered as {name!r}")
    return spec


def specs() -> tuple[ModelSpec, ...]:
    """Every model's spec, in registry order (imports every validation module in `MODULES`).

    Raises nothing of its own; what `get` raises propagates (ImportError of a module, AttributeError
    for a missing ``SPEC``, ValueError for a misnamed one). Source: project addition.
    """
    return tuple(get(n) for n in MODULES)


def all_errata() -> tuple:
    """Every model's errata rows (`validation.checks.errata.Erratum`), model by model (no row twice).

    Raises nothing of its own; what `specs` raises propagates, and ImportError / AttributeError from
    resolving a `lazy` errata entry. Source: project addition.
    """
    seen, out = set(), []
    for spec in specs():
        for e in spec.errata_rows():
            if id(e) not in seen:
                seen.add(id(e))
                out.append(e)
    return tuple(out)


def by_reference(name: str) -> ReferenceSpec:
    """The `ReferenceSpec` named ``name`` across all models. Raises KeyError when none is; what
    `specs` raises propagates. Source: project addition.
    """
    for spec in specs():
        for r in spec.references:
            if r.name == name:
                return r
    raise KeyError(f"no model declares the reference {name!r}")


def solver_names() -> tuple[str, ...]:
    """Every solver name of every model (the CLI's ``--solver`` choices) and every SBC adapter label,
    without repeats, in registry order.

    Raises nothing of its own; what `specs` raises propagates. Source: project addition.
    """
    out = []
    for spec in specs():
        out.extend(s.name for s in spec.solvers if s.name not in out)
        out.extend(s for s in spec.sbc if s not in out)
    return tuple(out)


def sbc_models() -> tuple[str, ...]:
    """The names of the models with SBC adapters (non-empty ``sbc``), in registry order.

    Raises nothing of its own; what `specs` raises propagates. Source: project addition.
    """
    return tuple(s.name for s in specs() if s.sbc)


def bridge(name: str):
    """The `validation.checks.bridge.BridgeSpec` of model ``name`` (its bridge problem and every Gibbs block
    as a ``CustomGibbs`` factory), from `BRIDGES`. Raises KeyError for a model without a bridge;
    ImportError / AttributeError of the declaring module propagate. Source: project addition.
    """
    if name not in BRIDGES:
        raise KeyError(f"model {name!r} has no bridge; bridges: {', '.join(BRIDGES)}")
    return resolve(lazy(BRIDGES[name]))


def bridge_models() -> tuple[str, ...]:
    """The names of the models with a bridge (the keys of `BRIDGES`), in order; imports nothing.
    Raises nothing. Source: project addition."""
    return tuple(BRIDGES)
