"""The catalog of the project's model declarations: which models exist, where each is declared, and
the lookups every iterating caller uses (the CLI, the evidence table, the errata table, the bridge
runs, the stored references' regeneration, the parametrised tests).

Each model's module in `validation.models` ends with ``SPEC = registry.ModelSpec(...)`` (the
declaration types live in `validation.checks.registry`); `MODULES` maps each model name to that module
and is imported only when a spec is asked for. Everything else about a model (its solvers' Algorithms,
front-door adapter names, k-hat / VSBC adapters and measured VI evidence, its bridge, notebook, and the
parts it declares absent with their reasons) is in its declaration, and the lookups here read it from
there (`conformance` lists what a declaration lacks). `MODULES` is the only table in `validation` that
says which models exist: `validation.checks` never imports a model module (the layering test,
``tests/test_layout.py``, fails on an arrow from checks to models). Which solvers a held-out evaluation runs
is each solver's ``evaluations`` (`evaluation_systems`), and each declares there the runner the evaluation calls
(`validation.checks.registry.EvaluationEntry`: the model's code, in ``validation.models.MODEL`` or a sibling
``MODEL_eval`` module; the measuring stays in the evaluation). `evaluation_runner` raises MissingDeclaration for a
declared evaluation without a runner, and the conformance check resolves every declared runner.

Source: project addition (issue 25: one place that names the models; BlackJAX's algorithm records and
posteriordb's model/data/reference split for the registry).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING

from validation.checks.registry import ModelSpec, ReferenceSpec, lazy, resolve

if TYPE_CHECKING:
    import pandas as pd

# validation.checks.references / vi_evidence / report (NumPy, SciPy, JAX, matplotlib) are imported inside
# the functions that use them: the CLI builds its parser from `names()` and should start fast.

__all__ = ["MODULES", "names", "vi_pairs", "measured", "conformance", "get", "specs", "all_errata", "by_reference",
           "solver_names", "sbc_models", "bridge", "bridge_models", "evidence_adapter", "has_adapter",
           "measure_vi", "regenerate_reference", "evidence_table", "evidence_lines", "evaluation_systems",
           "evaluation_declarations", "evaluation_entry", "evaluation_runner"]

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

#: What a solver's ``measured`` evidence holds (`validation.checks.registry.SolverSpec`; each VI solver's
#: declaration carries its own numbers):
#: Measured 2026-11-26 (numpyro 0.22, arviz 0.23, float64): k-hat on each solver's cross-check problem (default
#: config, stored NUTS reference; S = 4000 draws from q, seed = the config's), VSBC with master seed 0 on the
#: adapters' problems (`run_vsbc` defaults: 4000 reflections, family false-alarm rate 0.05). Written by hand
#: from ``python -m validation.checks.vi_evidence MODEL:SOLVER --vsbc N`` runs; ``factorbayes evidence`` shows them and
#: the slow tests check that the readings and verdicts reproduce.
#: Function-specific k-hat (2026-11-28, ``python -m validation.models.catalog``, the same 4000 draws as the k-hat):
#: ``fn_khat`` counts the quantities the cross-check compares by `validation.checks.vi_evidence.function_khat` band
#: (< 0.7 / 0.7-1 / > 1 of n), the worst (where) and best k-hat, ``hr_min`` the smallest k-hat of the numerator
#: h r alone, and ``read`` where a user reads them from. Every one inherits the ratios' k-hat (the self-normalizing
#: denominator), so best = the joint's k-hat; the numerators alone are no lighter (hr_min > 1.2 everywhere).
#: khat, n_latent, vsbc (one line), vsbc_sims, vsbc_passed, fn_khat. A failed VSBC that is explained
#: (the exact posterior of the same simulations predicts the measured p; `validation.models.meanfield_bias`,
#: 2026-11-28) reads "documented property" with its numbers; vsbc_passed stays the test's outcome.


def vi_pairs() -> tuple[tuple[str, str], ...]:
    """(model, solver) of every solver that declares a k-hat or VSBC adapter, in registry order.

    Returns
    -------
    tuple of (str, str)
        The model name and the solver's name (``--solver``) of each such solver.

    Raises
    ------
    None of its own; what `specs` raises propagates.

    Source: project addition.
    """
    return tuple((spec.name, s.name) for spec in specs() for s in spec.solvers if s.khat is not None or s.vsbc is not None)


def measured(model: str, solver: str) -> dict:
    """The VI evidence recorded in the solver's declaration (``SolverSpec.measured``).

    Parameters
    ----------
    model : str
        A registered model name (`names`).
    solver : str
        One of the model's solver names.

    Returns
    -------
    dict
        A copy of ``measured`` (keys as in the comment above `vi_pairs`: khat, n_latent, vsbc, vsbc_sims,
        vsbc_passed, fn_khat); empty when none is recorded.

    Raises
    ------
    KeyError
        An unknown model (`get`).
    ValueError
        An unknown solver (`validation.checks.registry.ModelSpec.solver`).

    Source: project addition.
    """
    return dict(get(model).solver(solver).measured)



def evidence_adapter(model: str, solver: str, kind: str):
    """The adapter function of ``kind`` for a model's solver (its declaration's ``khat`` / ``vsbc``), imported on use.

    Parameters
    ----------
    model : str
        A registered model name.
    solver : str
        One of the model's solver names.
    kind : {"khat", "vsbc"}
        Which adapter.

    Returns
    -------
    callable or None
        The adapter (``khat_problem`` / ``vsbc_adapters`` of the declaring module), or None when the solver
        declares none.

    Raises
    ------
    ValueError
        Another ``kind``; an unknown solver.
    KeyError
        An unknown model.
    ImportError, AttributeError
        A declared adapter whose module or attribute does not exist.

    Source: project addition.
    """
    if kind not in ("khat", "vsbc"):
        raise ValueError(f"kind must be 'khat' or 'vsbc', got {kind!r}")
    return resolve(getattr(get(model).solver(solver), kind))


def has_adapter(model: str, solver: str, kind: str) -> bool:
    """Whether the solver declares an adapter of ``kind`` and it resolves (imports).

    Parameters
    ----------
    model : str
        A registered model name.
    solver : str
        One of the model's solver names.
    kind : {"khat", "vsbc"}
        Which adapter.

    Returns
    -------
    bool
        False when none is declared or the declared one does not import.

    Raises
    ------
    ValueError
        Another ``kind``; an unknown solver.
    KeyError
        An unknown model.

    Source: project addition.
    """
    try:
        return evidence_adapter(model, solver, kind) is not None
    except (ImportError, AttributeError):
        return False


def measure_vi(model: str, solver: str, *, vsbc_sims: int = 0, master_seed: int = 0, alpha: float = 0.05,
            progress: bool = False) -> dict:
    """k-hat of a VI solver on its cross-check problem and, optionally, its VSBC.

    The registry's cross-check of that solver at its default config (NUTS from the stored reference) gives the
    k-hat; with ``vsbc_sims`` > 0 and a VSBC adapter, `validation.checks.vi_evidence.run_vsbc` runs on the
    adapter's problem. What the cross-check and the VSBC fits raise propagates.

    Parameters
    ----------
    model : str
        A registered model name.
    solver : str
        One of the model's solver names (a VI solver with a cross-check).
    vsbc_sims : int, keyword-only, default 0
        VSBC simulations; 0: no VSBC.
    master_seed : int, keyword-only, default 0
        The VSBC's master seed.
    alpha : float, keyword-only, default 0.05
        The VSBC's family false-alarm rate.
    progress : bool, keyword-only, default False
        Show progress bars.

    Returns
    -------
    dict
        model, solver, khat (`validation.checks.vi_evidence.KhatResult` or None), verdict (the cross-check's
        status, str), vsbc (`VSBCResult` or None), vsbc_setting (str; "" without VSBC), result (the
        `validation.checks.crosscheck.CrosscheckResult`).

    Raises
    ------
    KeyError
        An unknown model.
    ValueError
        An unknown solver.
    validation.checks.registry.MissingDeclaration
        A solver without a cross-check (`SolverSpec.run`).

    Source: project addition.
    """
    spec = get(model).solver(solver)
    result = spec.run(progress=progress)
    out = {"model": model, "solver": solver, "khat": result.extra.get("khat"), "verdict": result.verdict.status,
           "vsbc": None, "vsbc_setting": "", "result": result}
    adapters = evidence_adapter(model, solver, "vsbc") if vsbc_sims else None
    if adapters is not None:
        simulate, fit, functionals, text = adapters(solver)
        from validation.checks.vi_evidence import run_vsbc

        out["vsbc"] = run_vsbc(simulate, fit, functionals, n_sims=vsbc_sims, master_seed=master_seed, alpha=alpha,
                               method=f"{model}-{solver}", progress=progress)
        out["vsbc_setting"] = text
    return out



def evaluation_systems(evaluation: str) -> tuple[str, ...]:
    """The front-door names of the solvers that declare ``evaluation``, in registry order.

    The systems a held-out evaluation runs besides its own baselines, from each solver's ``SolverSpec.evaluations``
    (imports every declaration).

    Parameters
    ----------
    evaluation : str
        One of `validation.checks.registry.EVALUATIONS` ("counts", "counts+side", "ratings", "implicit").

    Returns
    -------
    tuple of str
        The front-door names.

    Raises
    ------
    ValueError
        Another ``evaluation``.
    validation.checks.registry.MissingDeclaration
        A solver that declares the evaluation but no front-door name (the evaluations know a system by that name).

    Source: project addition (issue 25).
    """
    from validation.checks.registry import EVALUATIONS, MissingDeclaration

    if evaluation not in EVALUATIONS:
        raise ValueError(f"evaluation must be one of {tuple(EVALUATIONS)}, got {evaluation!r}")
    out = []
    for spec in specs():
        for s in spec.solvers:
            if evaluation in s.evaluations:
                if not s.frontdoor:
                    raise MissingDeclaration(f"{spec.name} {s.name}: declares the {evaluation!r} evaluation but no "
                                             "front-door name, the name the evaluation runs it under")
                out.append(s.frontdoor)
    return tuple(out)


def evaluation_declarations(evaluation: str) -> tuple:
    """(model name, front-door name, entry) of every solver that declares ``evaluation``, in registry order.

    Imports every declaration.

    Parameters
    ----------
    evaluation : str
        As in `evaluation_systems`.

    Returns
    -------
    tuple of (str, str, validation.checks.registry.EvaluationEntry)
        One triple per declaring solver.

    Raises
    ------
    ValueError
        Another ``evaluation`` (as `evaluation_systems`).
    validation.checks.registry.MissingDeclaration
        A declaring solver without a front-door name (as `evaluation_systems`).

    Source: project addition (issue 25).
    """
    evaluation_systems(evaluation)  # checks the evaluation's name and the solvers' front-door names
    return tuple((spec.name, s.frontdoor, s.evaluations[evaluation]) for spec in specs() for s in spec.solvers
                 if evaluation in s.evaluations)


def evaluation_entry(evaluation: str, system: str):
    """The `validation.checks.registry.EvaluationEntry` that solver ``system`` declares for ``evaluation``.

    Its ``SolverSpec.evaluations[evaluation]``; imports every declaration.

    Parameters
    ----------
    evaluation : str
        As in `evaluation_systems`.
    system : str
        The solver's front-door name (e.g. "bpmf", "mcmc-fm").

    Returns
    -------
    validation.checks.registry.EvaluationEntry
        The declared entry (runner, data, setting, defaults).

    Raises
    ------
    ValueError
        An unknown ``evaluation``.
    validation.checks.registry.MissingDeclaration
        No solver declares ``evaluation`` under that front-door name (the message lists the declared ones).

    Source: project addition (issue 25).
    """
    from validation.checks.registry import EVALUATIONS, MissingDeclaration

    if evaluation not in EVALUATIONS:
        raise ValueError(f"evaluation must be one of {tuple(EVALUATIONS)}, got {evaluation!r}")
    for spec in specs():
        for s in spec.solvers:
            if s.frontdoor == system and evaluation in s.evaluations:
                return s.evaluations[evaluation]
    raise MissingDeclaration(f"{system}: no solver declares the {evaluation!r} evaluation under this front-door name "
                             f"(declared: {', '.join(evaluation_systems(evaluation))})")


def evaluation_runner(evaluation: str, system: str):
    """The runner that solver ``system`` declares for ``evaluation`` (`evaluation_entry`), resolved.

    Parameters
    ----------
    evaluation : str
        As in `evaluation_systems`.
    system : str
        The solver's front-door name.

    Returns
    -------
    callable
        What the evaluation's runner contract says (`validation.evaluation.ratings_eval.RatingsRun`,
        `validation.evaluation.counts_eval.CountsRun`, `validation.evaluation.implicit_eval.ImplicitRun`).

    Raises
    ------
    ValueError
        An unknown ``evaluation``.
    validation.checks.registry.MissingDeclaration
        The solver declares ``evaluation`` without a runner (a 14th model that declared the evaluation before
        writing its runner), or no solver declares it under that name; the message names the evaluation and the
        system.
    ImportError, AttributeError
        A declared runner that does not resolve.

    Source: project addition (issue 25).
    """
    from validation.checks.registry import MissingDeclaration

    entry = evaluation_entry(evaluation, system)
    if entry.runner is None:
        raise MissingDeclaration(f"{system}: declares the {evaluation!r} evaluation, which has no runner for it; "
                                 f"declare one (SolverSpec(evaluations={{{evaluation!r}: EvaluationEntry(runner)}}), "
                                 "the contract in the evaluation's module docstring) or drop "
                                 f"{evaluation!r} from the solver's evaluations and declare the part absent with its reason")
    return entry.get_runner()


def names() -> tuple[str, ...]:
    """The registered model names (the keys of `MODULES`), in registry order; imports nothing.

    Returns
    -------
    tuple of str
        The names ("hpf", "sbmf", ...).

    Raises
    ------
    None.

    Source: project addition.
    """
    return tuple(MODULES)


def get(name: str) -> ModelSpec:
    """The declaration of model ``name`` (imports its validation module).

    An ImportError (or any error) of the module's import propagates.

    Parameters
    ----------
    name : str
        A registered model name (a key of `MODULES`).

    Returns
    -------
    validation.checks.registry.ModelSpec
        The module's ``SPEC`` (or the attribute `MODULES` names).

    Raises
    ------
    KeyError
        An unknown name (the message lists the registered ones).
    AttributeError
        The module declares no ``SPEC``.
    ValueError
        The spec's ``name`` differs from the registered one.

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
    """Every model's declaration, in registry order (imports every validation module in `MODULES`).

    Returns
    -------
    tuple of validation.checks.registry.ModelSpec
        One per registered model.

    Raises
    ------
    None of its own; what `get` raises propagates (ImportError, AttributeError, ValueError).

    Source: project addition.
    """
    return tuple(get(n) for n in MODULES)


def conformance(models=None) -> list[str]:
    """Every way the declarations of ``models`` fail to conform.

    Each solver's Algorithm, front-door adapter name, stored reference and SBC or VSBC adapter, each model's bridge
    and notebook, present or declared absent with its reason (`validation.checks.registry.ModelSpec.problems`). The
    checks that need the upper layers (the front-door name is registered, the notebook file exists) are in
    ``tests/validation/test_registry.py``. What importing a declaration raises propagates.

    Parameters
    ----------
    models : iterable of str or None, default None
        Model names; None (or empty): every registered model.

    Returns
    -------
    list of str
        One message per problem; empty: all conform.

    Raises
    ------
    KeyError
        An unknown model.

    Source: project addition (issue 25).
    """
    return [p for name in (models or names()) for p in get(name).problems()]


def all_errata() -> tuple:
    """Every model's errata rows, model by model (no row twice).

    Returns
    -------
    tuple of validation.checks.errata.Erratum
        The rows, `lazy` entries resolved.

    Raises
    ------
    None of its own; errors of `specs` and of resolving a `lazy` errata entry (ImportError, AttributeError) propagate.

    Source: project addition.
    """
    seen, out = set(), []
    for spec in specs():
        for e in spec.errata_rows():
            if id(e) not in seen:
                seen.add(id(e))
                out.append(e)
    return tuple(out)


def by_reference(name: str) -> ReferenceSpec:
    """The stored-reference declaration named ``name``, across all models.

    Parameters
    ----------
    name : str
        The reference's name (file stem in ``validation/checks/reference_posteriors``, e.g. "hpf-bridge").

    Returns
    -------
    validation.checks.registry.ReferenceSpec
        The first declaration of that name, in registry order.

    Raises
    ------
    KeyError
        No model declares it.

    Source: project addition.
    """
    for spec in specs():
        for r in spec.references:
            if r.name == name:
                return r
    raise KeyError(f"no model declares the reference {name!r}")


def solver_names() -> tuple[str, ...]:
    """Every solver name of every model (the CLI's ``--solver`` choices) and every SBC adapter label.

    Without repeats, in registry order.

    Returns
    -------
    tuple of str
        The names.

    Raises
    ------
    None of its own; what `specs` raises propagates.

    Source: project addition.
    """
    out = []
    for spec in specs():
        out.extend(s.name for s in spec.solvers if s.name not in out)
        out.extend(s for s in spec.sbc if s not in out)
    return tuple(out)


def sbc_models() -> tuple[str, ...]:
    """The names of the models with SBC adapters (non-empty ``sbc``), in registry order.

    Returns
    -------
    tuple of str
        The model names.

    Raises
    ------
    None of its own; what `specs` raises propagates.

    Source: project addition.
    """
    return tuple(s.name for s in specs() if s.sbc)


def bridge(name: str):
    """The `validation.checks.bridge.BridgeSpec` of model ``name``, from its declaration's ``bridge``.

    Its bridge problem and every Gibbs block as a ``CustomGibbs`` factory; ``model`` set to ``name`` when the
    declaring module left it empty.

    Parameters
    ----------
    name : str
        A registered model name.

    Returns
    -------
    validation.checks.bridge.BridgeSpec
        The model's bridge.

    Raises
    ------
    KeyError
        An unknown model, or a model without a bridge (the message names its declared reason and the models
        with one).
    ImportError, AttributeError
        The declaring module or attribute does not resolve.

    Source: project addition.
    """
    decl = get(name)
    if decl.bridge is None:
        raise KeyError(f"model {name!r} has no bridge ({decl.absent.get('bridge', 'none declared')}); "
                       f"bridges: {', '.join(bridge_models())}")
    spec = decl.get_bridge()
    return spec if spec.model else dataclasses.replace(spec, model=name)


def bridge_models() -> tuple[str, ...]:
    """The names of the models whose declaration carries a bridge, in registry order.

    Imports the declarations, not the bridges.

    Returns
    -------
    tuple of str
        The model names.

    Raises
    ------
    None of its own; what `specs` raises propagates.

    Source: project addition.
    """
    return tuple(s.name for s in specs() if s.bridge is not None)


def regenerate_reference(name: str, *, directory=None, progress: bool = False):
    """Re-run NUTS on the default cross-check problem of stored reference ``name`` and rewrite its files.

    The problem comes from the `validation.checks.registry.ReferenceSpec` named ``name`` (`by_reference`); the files
    are ``validation/checks/reference_posteriors/NAME.{npz,json}`` (or under ``directory``). What NUTS raises
    propagates.

    Parameters
    ----------
    name : str
        The reference's name.
    directory : path-like or None, keyword-only, default None
        Where to write; None: the package's ``reference_posteriors`` folder.
    progress : bool, keyword-only, default False
        Show NUTS's progress bar.

    Returns
    -------
    validation.checks.references.Reference
        The fresh reference (named ``name``).

    Raises
    ------
    KeyError
        An unknown name.
    OSError
        The files cannot be written (`validation.checks.references.save_reference`).

    Source: project addition.
    """
    from validation.checks import references

    spec = by_reference(name)
    config = spec.default_config()
    ref = resolve(spec.nuts_reference)(config, reference="rerun", progress=progress)
    ref = dataclasses.replace(ref, name=name)
    references.save_reference(ref, config=config, directory=directory)
    return ref


def _bridge_text(name: str) -> str:
    """"yes (N blocks)" when the model declares a bridge, else "no"."""
    if get(name).bridge is not None:
        try:
            return f"yes ({len(bridge(name).blocks)} blocks)"
        except (ImportError, AttributeError):
            return "declared (not importable)"
    return "no"


def _fn_khat_text(m: dict) -> str:
    """The evidence table's cell of a recorded function-specific k-hat (`MEASURED` ``fn_khat``)."""
    return (f"{m['below_0.7']} / {m['0.7_to_1']} / {m['above_1']} of {m['n']} (< 0.7 / 0.7-1 / > 1); worst "
            f"{m['worst']:.2f} ({m['worst_at']}), best {m['best']:.2f}; {m['read']}")


def _registry_rows(models=None) -> list[dict]:
    from validation.checks import references, vi_evidence

    stored = set(references.stored_names())
    rows = []
    for name in (models or names()):
        spec = get(name)
        for s in spec.solvers:
            vi, point = s.method == "vi", s.method == "point"
            measured = s.measured
            if point:  # a point estimate: no posterior, so none of the posterior's evidence applies
                rows.append({"model": name, "solver": s.name, "method": s.method,
                             "update checks": ", ".join(spec.checks) or "none", "bridge (CustomGibbs)": "n/a (point)",
                             "NUTS agreement": "n/a (point estimate)", "SBC": "n/a (point)",
                             "k-hat (recorded)": "n/a (point)", "VSBC (recorded)": "n/a (point)",
                             "function-specific k-hat (recorded)": "n/a (point)"})
                continue
            has = {kind: has_adapter(name, s.name, kind) for kind in ("khat", "vsbc")}
            rows.append({
                "model": name, "solver": s.name, "method": s.method,
                "update checks": ", ".join(spec.checks) or "none",
                "bridge (CustomGibbs)": "n/a (VI)" if vi else _bridge_text(name),
                "NUTS agreement": f"none: {s.absent.get('crosscheck', 'not declared')}" if s.crosscheck is None else (
                    (f"stored `{s.reference}`" if s.reference in stored else "re-run only")
                    + (" (VI gap)" if vi else " (within MCSE)")),
                "SBC": ("yes" if s.name in spec.sbc else "no")
                + (" (+ NUTS SBC, same problem)" if s.name in spec.sbc and "nuts" in spec.sbc and s.name != "nuts" else ""),
                "k-hat (recorded)": "n/a (exact)" if not vi else (
                    (f"{measured['khat']:.2f} ({vi_evidence.khat_reading(measured['khat']).split(':')[0]})"
                     if "khat" in measured else "yes") if has["khat"] else "no"),
                "VSBC (recorded)": "n/a (exact)" if not vi else (
                    measured.get("vsbc", "yes") if has["vsbc"] else "no"),
                "function-specific k-hat (recorded)": "n/a (exact)" if not vi else (
                    _fn_khat_text(measured["fn_khat"]) if "fn_khat" in measured else ("yes" if has["khat"] else "no")),
            })
    return rows


def evidence_table(models=None) -> pd.DataFrame:
    """Which evidence exists, per model and solver, read from the declarations.

    Columns: update checks (the spec's ``checks``); bridge (a non-empty ``bridge``: each Gibbs block as a NumPyro
    CustomGibbs block beside NUTS; exact solvers); NUTS agreement (a stored reference of the solver's problem); SBC
    (an SBC adapter under the solver's name; "+ NUTS SBC" where the model also has a NUTS SBC of the same problem,
    the reference that tells a sampler defect from a property of the test problem); k-hat and VSBC (VI solvers:
    "yes" where the adapter exists, and the numbers recorded in ``measured``: k-hat on the solver's *default*
    cross-check problem, VSBC verdict); the function-specific k-hat (`validation.checks.vi_evidence.function_khat`
    of every quantity the cross-check compares, on the same draws: how many read < 0.7 (reliable from q with PSIS),
    0.7-1, > 1, the worst and best, and where to read them from).

    A point-estimate solver (``method="point"``: SGD-FM, SIBM MAP) has a row of "n/a (point ...)": no posterior,
    so no NUTS agreement, SBC or k-hat; a solver whose cross-check is declared absent reads "none: " and the
    declared reason. What importing a model's validation module raises propagates.

    Parameters
    ----------
    models : iterable of str or None, default None
        Model names; None (or empty): every registered model.

    Returns
    -------
    pandas.DataFrame
        One row per solver: model, solver, method, update checks, bridge (CustomGibbs), NUTS agreement, SBC,
        k-hat (recorded), VSBC (recorded), function-specific k-hat (recorded); all str.

    Raises
    ------
    KeyError
        An unknown model.

    Source: project addition.
    """
    import pandas as pd

    return pd.DataFrame(_registry_rows(models))


def evidence_lines(model: str) -> list[str]:
    """The "Evidence for MODEL" section of a report: `evidence_table` of the model's solvers as Markdown lines.

    Used by the cross-check and SBC reports.

    Parameters
    ----------
    model : str
        A registered model name.

    Returns
    -------
    list of str
        A heading, a pointer line, the Markdown table and blank separators.

    Raises
    ------
    KeyError
        An unknown model.
    ImportError
        ``tabulate`` is not installed (`validation.checks.report.markdown_table`).

    Source: project addition.
    """
    from validation.checks.report import markdown_table

    return [f"## Evidence for {model} (all solvers)", "",
            "From `validation.models.catalog` (`factorbayes evidence` prints it for every model).", "",
            markdown_table(evidence_table([model])), ""]


if __name__ == "__main__":  # python -m validation.models.catalog [MODEL:SOLVER ...] [--vsbc N]
    import argparse

    import jax
    import numpy as np

    from validation.checks import vi_evidence

    jax.config.update("jax_enable_x64", True)
    ap = argparse.ArgumentParser(description="measure k-hat (and VSBC) of the VI solvers")
    ap.add_argument("pairs", nargs="*", default=[f"{m}:{s}" for m, s in vi_pairs()])
    ap.add_argument("--vsbc", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for pair in a.pairs:
        m, s = pair.split(":")
        r = measure_vi(m, s, vsbc_sims=a.vsbc, master_seed=a.seed)
        k = r["khat"]
        print(f"{m}:{s} cross-check {r['verdict']}; k-hat {k.khat:.3f} ({k.reading}); PSIS ESS {k.ess:.1f} of "
              f"{k.n_draws}; {k.space}", flush=True)
        if k.functionals is not None:
            fs = vi_evidence.function_khat_summary(k.functionals)
            print(f"{m}:{s} function-specific k-hat: {fs['below_0.7']} / {fs['0.7_to_1']} / {fs['above_1']} of {fs['n']} "
                  f"(< 0.7 / 0.7-1 / > 1); worst {fs['worst']:.3f} ({fs['worst_at']}); k-hat of r {fs['khat_r']:.3f}; "
                  f"numerator h r alone < 0.7: {fs['hr_below_0.7']}; per group (n, < 0.7, worst): {fs['groups']}; "
                  f"h r k-hat quantiles (0, 0.5, 1): {np.round(np.quantile(k.functionals.khat_hr.dropna(), [0, 0.5, 1]), 3)}",
                  flush=True)
            print(f"{m}:{s} {fs['words']}", flush=True)
        if r["vsbc"] is not None:
            print(f"{m}:{s} VSBC: {r['vsbc'].verdict()} [{r['vsbc_setting']}]", flush=True)
            print(r["vsbc"].table.to_string(index=False), flush=True)
