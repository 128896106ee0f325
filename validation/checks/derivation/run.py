"""`check`: run every check a `Derivation` makes possible and write one report.

Part of the `validation.checks.derivation` package; moved here from the former single module unchanged.

Source: project addition (issue 25 items 1 and 3).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from validation.checks.derivation.declaration import Derivation, _block_sites
from validation.checks.derivation.levels import (_bridge_outcomes, _conditional_outcome, _crosscheck_outcome,
                                                 _khat_outcome, _monotone_outcome, _sbc_outcome,
                                                 _stationarity_outcomes, _vsbc_outcome)
from validation.checks.derivation.outcomes import CHECKS, CheckOutcome, CheckSettings, DerivationReport, write_report
from validation.checks.derivation.solver import (_cavi, _check_sites, _program_sites, _simulator, nuts_reference,
                                                 solver_fit)
from validation.checks.references import Reference

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
