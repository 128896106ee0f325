"""The catalog of the project's model declarations: which models exist, where each is declared, and
the lookups every iterating caller uses (the CLI, the evidence table, the errata table, the bridge
runs, the stored references' regeneration, the parametrised tests).

Each model's module in `validation.models` ends with ``SPEC = registry.ModelSpec(...)`` (the
declaration types live in `validation.checks.registry`); `MODULES` maps each model name to that module
and is imported only when a spec is asked for. `BRIDGES` names each sampler's
`validation.checks.bridge.BridgeSpec`, `VI_ADAPTERS` each VI solver's k-hat and VSBC adapters,
`MEASURED` the VI evidence recorded for the README. This is the only table in `validation` that names
the models: `validation.checks` never imports a model module (the layering test,
``tests/test_layout.py``, fails on an arrow from checks to models).

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

__all__ = ["MODULES", "BRIDGES", "VI_ADAPTERS", "MEASURED", "names", "get", "specs", "all_errata", "by_reference",
           "solver_names", "sbc_models", "bridge", "bridge_models", "evidence_adapter", "has_adapter",
           "measure_vi", "regenerate_reference", "evidence_table", "evidence_lines"]

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



#: (model, solver) -> ``"module:function"`` names of the k-hat and VSBC adapters: ``khat`` is the
#: model's ``khat_problem(fitted state, data, ...)`` that its ``run_crosscheck`` passes to
#: `validation.checks.crosscheck.vi_crosscheck` (so the cross-check of that solver reports k-hat), ``vsbc`` is
#: ``vsbc_adapters(solver) -> (simulate, fit, functionals, description)`` for `run_vsbc`. None: none yet.
VI_ADAPTERS: dict[tuple[str, str], dict] = {
    ("hpf", "cavi"): {"khat": "validation.models.hpf:khat_problem", "vsbc": "validation.models.hpf:vsbc_adapters"},
    ("vbfm", "cavi"): {"khat": "validation.models.vbfm:khat_problem", "vsbc": "validation.models.vbfm:vsbc_adapters"},
    ("vbfm", "ovbfm"): {"khat": "validation.models.vbfm:khat_problem", "vsbc": "validation.models.vbfm:vsbc_adapters"},
    ("sibm", "vb"): {"khat": "validation.models.sibm:khat_problem", "vsbc": "validation.models.sibm:vsbc_adapters"},
    ("rg", "vb"): {"khat": "validation.models.rg:khat_problem", "vsbc": "validation.models.rg:vsbc_adapters"},
    ("psm", "vb"): {"khat": "validation.models.psm_evidence:khat_problem", "vsbc": "validation.models.psm_evidence:vsbc_adapters"},
}

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
#: (model, solver) -> khat, n_latent, vsbc (one line), vsbc_sims, vsbc_passed, fn_khat. A failed VSBC that is explained
#: (the exact posterior of the same simulations predicts the measured p; `validation.models.meanfield_bias`,
#: 2026-11-28) reads "documented property" with its numbers; vsbc_passed stays the test's outcome.
MEASURED: dict[tuple[str, str], dict] = {
    ("hpf", "cavi"): {"khat": 3.16, "n_latent": 400, "vsbc_sims": 200, "vsbc_passed": True,
                      "vsbc": "pass (200 sims; smallest p 0.055, log eta_1)",
                      "fn_khat": {"n": 2500, "below_0.7": 0, "0.7_to_1": 0, "above_1": 2500, "worst": 3.47,
                          "worst_at": "rate[184]", "best": 3.16, "hr_min": 2.79,
                          "read": "none from q even with PSIS: "
                                  "read rates, xi and eta from HPF Gibbs (q's means only within the cross-check's gap)"}},
    ("vbfm", "cavi"): {"khat": 2.49, "n_latent": 164, "vsbc_sims": 200, "vsbc_passed": False,
                       "vsbc": "documented property (mean-field bias, docs/statistical_verdicts.md): log alpha fails "
                               "(p < 0.0003, mean p 0.99; 200 sims) as the exact posterior predicts (exact Gibbs on "
                               "VSBC's sims: predicted mean p 0.987, measured 0.984, 80 sims); E_q[alpha] / "
                               "E[alpha | y] median 0.375 (0.13-0.69); read alpha from MCMC-FM or NUTS",
                       "fn_khat": {"n": 201, "below_0.7": 0, "0.7_to_1": 0, "above_1": 201, "worst": 2.57,
                           "worst_at": "pred[21]", "best": 2.49, "hr_min": 2.38,
                           "read": "none from q even with PSIS: "
                                   "read yhat and alpha from MCMC-FM or NUTS (q's means only within the cross-check's gap)"}},
    ("vbfm", "ovbfm"): {"khat": 2.61, "n_latent": 164, "vsbc_sims": 200, "vsbc_passed": False,
                        "vsbc": "documented property (mean-field bias, docs/statistical_verdicts.md): log alpha fails "
                                "(p < 0.0003, mean p 0.99; 200 sims) as the exact posterior predicts (exact Gibbs: "
                                "predicted mean p 0.975, measured 0.957, 10 sims); E_q[alpha] / E[alpha | y] median "
                                "0.43; read alpha from MCMC-FM or NUTS",
                        "fn_khat": {"n": 201, "below_0.7": 0, "0.7_to_1": 0, "above_1": 201, "worst": 2.75,
                            "worst_at": "pred[154]", "best": 2.61, "hr_min": 2.52,
                            "read": "none from q even with PSIS: "
                                    "read yhat and alpha from MCMC-FM or NUTS (q's means only within the cross-check's gap)"}},
    ("sibm", "vb"): {"khat": 1.52, "n_latent": 106, "vsbc_sims": 200, "vsbc_passed": True,
                     "vsbc": "pass (200 sims; smallest p 0.041, logit of cell (1, 2))",
                     "fn_khat": {"n": 300, "below_0.7": 0, "0.7_to_1": 0, "above_1": 300, "worst": 1.86,
                         "worst_at": "prob[166]", "best": 1.52, "hr_min": 1.25,
                         "read": "none from q even with PSIS: "
                                 "read the cell probabilities from NUTS (q's means only within the cross-check's gap)"}},
    ("rg", "vb"): {"khat": 1.84, "n_latent": 133, "vsbc_sims": 200, "vsbc_passed": False,
                   "vsbc": "documented property (mean-field collapse of the factors, docs/statistical_verdicts.md): "
                           "log tau_u, tau_v, tau_bv fail (p < 0.0003, mean p 0.11, 0.07, 0.27; 200 sims); u = v = 0 "
                           "in 78% of the fits, q(tau_u) then data-free (E_q 2.37; prior-predicted p 0.081, measured "
                           "0.112); NUTS on 30 sims predicts the measured p (0.09, 0.09, 0.28 vs 0.11, 0.14, 0.18), "
                           "E_q / E_post 2.3, 2.3, 1.4; read the precisions from NUTS",
                   "fn_khat": {"n": 633, "below_0.7": 0, "0.7_to_1": 0, "above_1": 633, "worst": 4.57,
                       "worst_at": "b_item_centered[6]", "best": 1.84, "hr_min": 1.46,
                       "read": "none from q even with PSIS: "
                               "read the edge probabilities, biases and tau from NUTS (q's means only within the cross-check's gap)"}},
    ("psm", "vb"): {"khat": 2.19, "n_latent": 56, "vsbc_sims": 200, "vsbc_passed": True,
                    "vsbc": "pass (200 sims; smallest p 0.077, pi_0)",
                    "fn_khat": {"n": 110, "below_0.7": 0, "0.7_to_1": 0, "above_1": 110, "worst": 2.32,
                        "worst_at": "acceptance[44]", "best": 2.19, "hr_min": 1.92,
                        "read": "none from q even with PSIS: "
                                "read acceptance, pi, psi and the predictive from NUTS (q's means only within the cross-check's gap)"}},
}


def evidence_adapter(model: str, solver: str, kind: str):
    """The adapter function of ``kind`` ("khat" or "vsbc") for a model's solver, imported on use,
    or None when `VI_ADAPTERS` has none. Raises ValueError for another ``kind``; ImportError /
    AttributeError when a listed adapter is missing. Source: project addition."""
    if kind not in ("khat", "vsbc"):
        raise ValueError(f"kind must be 'khat' or 'vsbc', got {kind!r}")
    target = VI_ADAPTERS.get((model, solver), {}).get(kind)
    if target is None:
        return None
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def has_adapter(model: str, solver: str, kind: str) -> bool:
    """Whether `VI_ADAPTERS` lists an adapter of ``kind`` for the solver and it resolves (imports).
    Raises ValueError for another ``kind`` than "khat" / "vsbc". Source: project addition."""
    try:
        return evidence_adapter(model, solver, kind) is not None
    except (ImportError, AttributeError):
        return False


def measure_vi(model: str, solver: str, *, vsbc_sims: int = 0, master_seed: int = 0, alpha: float = 0.05,
            progress: bool = False) -> dict:
    """k-hat of a VI solver on its cross-check problem (the registry's cross-check of that solver, NUTS
    from the stored reference) and, with ``vsbc_sims`` > 0 and a VSBC adapter, its VSBC.

    Returns dict: model, solver, khat (`KhatResult` or None), verdict (the cross-check's status),
    vsbc (`VSBCResult` or None), vsbc_setting (str), result (the `validation.checks.crosscheck.CrosscheckResult`).
    Raises KeyError / ValueError for an unknown model or solver (`validation.checks.registry`); what the
    cross-check and the VSBC fits raise propagates. Source: project addition.
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
    spec = resolve(lazy(BRIDGES[name]))
    return spec if spec.model else dataclasses.replace(spec, model=name)


def bridge_models() -> tuple[str, ...]:
    """The names of the models with a bridge (the keys of `BRIDGES`), in order; imports nothing.
    Raises nothing. Source: project addition."""
    return tuple(BRIDGES)


def regenerate_reference(name: str, *, directory=None, progress: bool = False):
    """Re-run NUTS on the default cross-check problem of stored reference ``name`` and rewrite its files
    (``validation/checks/reference_posteriors/NAME.{npz,json}``, or under ``directory``).

    The problem comes from the `ReferenceSpec` named ``name`` (`by_reference`). Returns the fresh
    `validation.checks.references.Reference`. Raises KeyError for an unknown name; what NUTS and
    `validation.checks.references.save_reference` raise propagates. Source: project addition.
    """
    from validation.checks import references

    spec = by_reference(name)
    config = spec.default_config()
    ref = resolve(spec.nuts_reference)(config, reference="rerun", progress=progress)
    ref = dataclasses.replace(ref, name=name)
    references.save_reference(ref, config=config, directory=directory)
    return ref


def _bridge_text(name: str) -> str:
    """"yes (N blocks)" when the registry declares the model's bridge (`BRIDGES`),
    else "no"."""
    if name in BRIDGES:
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
            vi = s.method == "vi"
            measured = MEASURED.get((name, s.name), {})
            has = {kind: has_adapter(name, s.name, kind) for kind in ("khat", "vsbc")}
            rows.append({
                "model": name, "solver": s.name, "method": s.method,
                "update checks": ", ".join(spec.checks) or "none",
                "bridge (CustomGibbs)": "n/a (VI)" if vi else _bridge_text(name),
                "NUTS agreement": (f"stored `{s.reference}`" if s.reference in stored else "re-run only")
                + (" (VI gap)" if vi else " (within MCSE)"),
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
    """Which evidence exists, per model and solver, read from the declarations (and, for the VI
    evidence, `VI_ADAPTERS` / `MEASURED`): update checks (the spec's ``checks``),
    bridge (a non-empty ``bridge``: each Gibbs block as a NumPyro CustomGibbs block beside NUTS; exact
    solvers), NUTS agreement (a stored reference of the solver's problem), SBC (an SBC adapter under the
    solver's name; "+ NUTS SBC" where the model also has a NUTS SBC of the same problem, the
    reference that tells a sampler defect from a property of the test problem), k-hat and VSBC (VI solvers: "yes" where the adapter exists, and the numbers recorded in
    `MEASURED`: k-hat on the solver's *default* cross-check problem, VSBC verdict), and the function-specific
    k-hat (`validation.checks.vi_evidence.function_khat` of every quantity the cross-check compares, on the same
    draws: how many read < 0.7 (reliable from q with PSIS), 0.7-1, > 1, the worst and best, and where to read
    them from).

    ``models``: names (default every registered model). Returns a DataFrame, one row per solver.
    Raises KeyError for an unknown model; what importing a model's validation module raises propagates.
    Source: project addition.
    """
    import pandas as pd

    return pd.DataFrame(_registry_rows(models))


def evidence_lines(model: str) -> list[str]:
    """The "Evidence for MODEL" section of a report (cross-check and SBC reports): `evidence_table` of the
    model's solvers as Markdown lines. Raises KeyError for an unknown model; ImportError without
    ``tabulate``. Source: project addition."""
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
    ap.add_argument("pairs", nargs="*", default=[f"{m}:{s}" for m, s in VI_ADAPTERS])
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
