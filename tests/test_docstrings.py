"""Every public function of the three packages documents what it raises and where it comes from.

Public: listed in the module's ``__all__`` (or, without one, a top-level ``def`` whose name does
not start with an underscore). Each docstring must name what the function raises (a line with
"Raises" / "raises", which may say that it raises nothing of its own) and its source: a line
"Source:" giving the seed file and equation (e.g. ``001_30a2018ec18c20b9.txt, batch algorithm
figure``) or "project addition". Shapes and dtypes cannot be checked mechanically; reviewers do.
The check reads the source with `ast` (nothing is imported), so it is fast and has no side effects.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ppl_models", "custom_inference", "validation")
MODULES = sorted(str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
RAISES = re.compile(r"\braise[sd]?\b", re.IGNORECASE)
SOURCE = re.compile(r"\bsource\b", re.IGNORECASE)


def public_functions(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    exported = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            # string entries only: re-exported lists (``*loaders.__all__``) are checked in their module
            exported = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return [node for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
            and (exported is None or node.name in exported)]


def missing_sections(node: ast.FunctionDef) -> list[str]:
    doc = ast.get_docstring(node) or ""
    out = []
    if not doc:
        return ["docstring"]
    if not RAISES.search(doc):
        out.append("raises")
    if not SOURCE.search(doc):
        out.append("source")
    return out


def test_the_check_can_fail():
    bad = ast.parse('def f(x):\n    """Adds one."""\n    return x + 1\n').body[0]
    good = ast.parse('def f(x):\n    """Adds one. Raises nothing. Source: project addition."""\n').body[0]
    assert missing_sections(bad) == ["raises", "source"] and missing_sections(good) == []


@pytest.mark.parametrize("module", MODULES)
def test_public_functions_say_what_they_raise_and_their_source(module):
    gaps = {node.name: missing for node in public_functions(ROOT / module) if (missing := missing_sections(node))}
    assert not gaps, f"{module}: public functions whose docstring lacks a section: {gaps}"
