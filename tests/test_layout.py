"""The package layout: every module imports, and imports point one way.

Floors (lowest first): ``ppl_models`` and ``custom_inference`` (the programs and the solvers: they never
import `validation` or `factorbayes`, nor each other), then inside `validation`: ``data`` (loaders,
splits), ``checks`` (update checks, references, gates, cross-check, SBC, bridge, errata), ``models`` (one
declaration per model, and the catalog that names them), ``evaluation`` (held-out protocols and
metrics), ``frontdoor`` (fit by name, scoring, CLI), and last the `factorbayes` import package. A module
may import from its own floor or any floor below. Every import counts, at module level or inside a
function, and so do the ``"module:attribute"`` strings the declarations resolve lazily
(`validation.checks.registry.lazy`): an arrow up is an arrow up whether or not it runs at import time.
Strict floors also mean no circle between subpackages.

Source: project addition (issue 25, item 3).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ppl_models", "custom_inference", "validation", "factorbayes")
FLOORS = {"validation.data": 1, "validation.checks": 2, "validation.models": 3, "validation.evaluation": 4,
          "validation.frontdoor": 5, "factorbayes": 6}
LAZY = re.compile(r"^((?:ppl_models|custom_inference|validation|factorbayes)(?:\.\w+)*):\w+$")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return out


def _unit(module: str) -> str:
    """The layering unit of a module: its top package, or validation's subpackage."""
    parts = module.split(".")
    if parts[0] == "validation" and len(parts) > 1 and f"validation.{parts[1]}" in FLOORS:
        return f"validation.{parts[1]}"
    return parts[0]


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement and lazy reference string in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out += [(f"{base}.{a.name}" if not node.module or node.level else base, node.lineno) for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY.match(node.value):
            out.append((LAZY.match(node.value).group(1), node.lineno))
    return [(name, line) for name, line in out if name.split(".")[0] in PACKAGES]


def _floor(unit: str) -> int:
    return FLOORS.get(unit, 0)


MODULES = _modules()


@pytest.mark.parametrize("module", [m for m, _ in MODULES])
def test_every_module_imports(module):
    importlib.import_module(module)


def test_imports_point_down():
    """No arrow up between floors, no arrow between the two bottom packages, and the layering units
    named in FLOORS exist (a renamed subpackage must be renamed here too)."""
    units = {_unit(m) for m, _ in MODULES}
    assert set(FLOORS) <= units, f"FLOORS names units that do not exist: {set(FLOORS) - units}"
    assert all(u in FLOORS or u in ("ppl_models", "custom_inference", "validation") for u in units), units
    bad = []
    for module, path in MODULES:
        src = _unit(module)
        for target, line in _imports(module, path):
            dst = _unit(target)
            if dst == src or (src == "validation" and dst.startswith("validation")):
                continue
            if src in ("ppl_models", "custom_inference") and dst != src:
                bad.append(f"{path.relative_to(ROOT)}:{line} {src} -> {target} (the bottom packages import no one)")
            elif _floor(dst) > _floor(src):
                bad.append(f"{path.relative_to(ROOT)}:{line} {src} (floor {_floor(src)}) -> {target} (floor {_floor(dst)})")
    assert not bad, "imports pointing up:\n" + "\n".join(bad)


def test_the_layering_test_can_fail(tmp_path):
    """The parser sees a function-level import, a relative import and a lazy string."""
    p = tmp_path / "x.py"
    p.write_text("def f():\n    from validation.frontdoor import api\n\nfrom . import gates\nX = 'validation.models.hpf:SPEC'\n")
    got = {name for name, _ in _imports("validation.checks.x", p)}
    assert got == {"validation.frontdoor", "validation.checks.gates", "validation.models.hpf"}
    assert _floor(_unit("validation.frontdoor")) > _floor(_unit("validation.checks.x"))
