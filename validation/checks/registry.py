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

__all__ = ["lazy", "resolve", "SolverSpec", "ReferenceSpec", "ModelSpec"]

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
