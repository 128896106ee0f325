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


# ---------------------------------------------------------------------------------------------
# The public and stable API (issue 25 item 5): numpydoc sections, checked by numpydoc itself.
#
# Everything `import factorbayes` exports (the front door), `validation.checks.derivation`'s `__all__`
# (validate a derivation of your own) and the solver protocol (`STABLE_NAMES`), classes with their
# public methods and properties:
# each documents every parameter by name (numpydoc's PR01 / PR02), has a Returns section where it
# returns (RT01; not for classes and properties), a numpydoc "Raises" section and a "Source:" line.
# Every other module: the same standard, below (`NOT_YET` lists the modules still in prose).

STABLE_MODULES = ("factorbayes", "validation.checks.derivation")
# the solver protocol a researcher writes a solver against (an Algorithm run by one of the two drivers)
STABLE_NAMES = ("custom_inference.base.Algorithm", "custom_inference.base.FitResult",
                "custom_inference.vi_driver.fit", "custom_inference.vi_driver.run", "custom_inference.vi_driver.FitOptions",
                "custom_inference.vi_driver.Output", "custom_inference.vi_driver.Report", "custom_inference.vi_driver.VIRun",
                "custom_inference.mcmc_driver.sample", "custom_inference.mcmc_driver.SamplerSpec",
                "custom_inference.mcmc_driver.SampleOptions")
NUMPYDOC_CODES = {"GL08": "no docstring", "PR01": "parameters not documented", "PR02": "unknown parameters",
                  "RT01": "no Returns section"}
SOURCE_LINE = re.compile(r"^\s*Source:", re.MULTILINE)


def stable_objects() -> dict[str, object]:
    """Dotted name (where it is defined) -> object, for every stable name and its public members."""
    import importlib
    import inspect

    out = {}
    listed = [getattr(mod, name) for mod_name in STABLE_MODULES
              for mod in [importlib.import_module(mod_name)] for name in mod.__all__]
    listed += [getattr(importlib.import_module(dotted.rsplit(".", 1)[0]), dotted.rsplit(".", 1)[1])
               for dotted in STABLE_NAMES]
    for obj in listed:
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants (CHECKS, __version__)
        qual = f"{obj.__module__}.{obj.__qualname__}"
        out[qual] = obj
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
                    out[f"{qual}.{member}"] = value
    return out


def numpydoc_gaps(dotted: str) -> list[str]:
    """The gaps of one object's docstring: numpydoc's codes above, then "Raises" / "Source"."""
    import warnings

    from numpydoc.docscrape import NumpyDocString
    from numpydoc.validate import validate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpydoc warns about sections it does not know
        result = validate(dotted)
        parsed = NumpyDocString(result["docstring"] or "")
    gaps = [f"{code} {NUMPYDOC_CODES[code]}: {msg}" for code, msg in result["errors"] if code in NUMPYDOC_CODES]
    if result["docstring"]:
        if not parsed["Raises"]:
            gaps.append("no numpydoc Raises section")
        if not SOURCE_LINE.search(result["docstring"]):
            gaps.append('no "Source:" line')
    return gaps


def _undocumented_example(x, y=1):
    """Adds.

    Parameters
    ----------
    x : int
        A number.
    z : int
        Not a parameter.

    Raises nothing (prose, not a section). Source: project addition.
    """
    return x + y


def test_the_numpydoc_check_can_fail():
    gaps = numpydoc_gaps(f"{__name__}._undocumented_example")
    assert any(g.startswith("PR01") and "y" in g for g in gaps), gaps
    assert any(g.startswith("PR02") and "z" in g for g in gaps), gaps
    assert any(g.startswith("RT01") for g in gaps), gaps
    assert "no numpydoc Raises section" in gaps, gaps
    assert numpydoc_gaps("validation.checks.derivation.check") == []


def test_the_stable_api_is_listed():
    names = stable_objects()
    # the front door's names and the derivation API's, with the methods users call
    for expected in ("validation.frontdoor.api.fit", "validation.frontdoor.fitted.FittedModel.recommend",
                     "validation.evaluation.holdout.split", "validation.checks.derivation.run.check",
                     "validation.checks.derivation.declaration.Derivation", "custom_inference.base.RunInterrupted",
                     "custom_inference.base.Algorithm.check", "custom_inference.mcmc_driver.sample"):
        assert expected in names, sorted(names)


def test_the_stable_api_has_numpydoc_sections():
    gaps = {name: g for name in stable_objects() if (g := numpydoc_gaps(name))}
    assert not gaps, "stable-API docstrings with gaps:\n" + "\n".join(f"{k}: {v}" for k, v in gaps.items())


# ---------------------------------------------------------------------------------------------
# Every module (issue 25 item 5): the stable API's standard (numpydoc sections checked by numpydoc,
# a Raises section, a "Source:" line) for every public object of every module of the packages, except
# the modules in `NOT_YET`, whose docstrings are still prose. A module leaves `NOT_YET` when it passes
# (`test_not_yet_lists_only_modules_with_gaps` fails otherwise), so the list says what is left.
# Public: the names in the module's ``__all__`` (else its top-level functions and classes without a
# leading underscore defined there), jitted functions included (checked through ``__wrapped__``),
# and classes' public methods, properties, class- and static methods defined in the class body (JAX's
# pytree hooks ``tree_flatten`` / ``tree_unflatten`` are a protocol, like dunders, and not checked).

NOT_YET = frozenset({
})
DOTTED = sorted({m[:-3].replace("/", ".").removesuffix(".__init__") for m in MODULES}
                | {"factorbayes"})


PYTREE = ("tree_flatten", "tree_unflatten")


def _function_like(value) -> bool:
    import inspect

    return inspect.isfunction(value) or inspect.isfunction(getattr(value, "__wrapped__", None))


def public_objects(modname: str) -> list[str]:
    """Dotted names of the public objects of ``modname`` (see the comment above `NOT_YET`)."""
    import importlib
    import inspect

    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mod).items() if not n.startswith("_")
                 and (_function_like(v) or inspect.isclass(v)) and getattr(v, "__module__", None) == modname]
    out = []
    for name in names:
        value = getattr(mod, name, None)
        if not (_function_like(value) or inspect.isclass(value)) or getattr(value, "__module__", None) != modname:
            continue  # constants, and names re-exported from the module that defines them
        qual = f"{modname}.{value.__qualname__}"
        out.append(qual)
        if inspect.isclass(value):
            out += [f"{qual}.{m}" for m, v in vars(value).items() if not m.startswith("_") and m not in PYTREE
                    and (_function_like(v) or isinstance(v, (property, classmethod, staticmethod)))]
    return out


def test_the_public_objects_include_jitted_functions_and_classmethods():
    names = public_objects("custom_inference.hpf")
    assert "custom_inference.hpf.step" in names  # a jax.jit-wrapped function
    assert "custom_inference.data.Observations.from_scipy" in public_objects("custom_inference.data")


@pytest.mark.parametrize("module", [m for m in DOTTED if m not in NOT_YET])
def test_every_public_object_has_numpydoc_sections(module):
    gaps = {name: g for name in public_objects(module) if (g := numpydoc_gaps(name))}
    assert not gaps, f"{module}: docstrings with gaps:\n" + "\n".join(f"{k}: {v}" for k, v in gaps.items())


def test_not_yet_lists_only_modules_with_gaps():
    assert NOT_YET <= set(DOTTED), sorted(NOT_YET - set(DOTTED))
    passing = sorted(m for m in NOT_YET if not any(numpydoc_gaps(name) for name in public_objects(m)))
    assert not passing, f"these modules pass now: remove them from NOT_YET: {passing}"
