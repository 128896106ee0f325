"""What `validation.checks.derivation.check` knows and returns: `CHECKS`, `CheckSettings`, `CheckOutcome`,
`DerivationReport`, and the Markdown report (`write_report`).

Part of the `validation.checks.derivation` package; moved here from the former single module unchanged.

Source: project addition (issue 25 items 1 and 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from validation.checks.derivation.declaration import Derivation, _block_label
from validation.checks.references import NutsSettings

#: The checks `check` knows, in the order they run and are reported.
CHECKS = ("conditional", "stationarity", "monotone", "bridge", "crosscheck", "sbc", "vsbc", "khat")


# ---------------------------------------------------------------------------------------------
# settings, outcomes, report


@dataclass(frozen=True)
class CheckSettings:
    """Run lengths and tolerances of `check` (defaults: a small problem, a few minutes on 2 cores).

    Parameters
    ----------
    nuts_chains, nuts_warmup, nuts_draws : int, default 4, 500, 1000
        The NUTS reference: chains x (warm-up + draws), gated by ArviZ
        (`validation.checks.gates.Thresholds`: R-hat <= 1.01 with >= 4 chains, bulk and tail ESS >=
        400, no divergences, E-BFMI >= 0.3).
    target_accept : float, default 0.8
        NUTS's target acceptance probability.
    solver_chains, solver_warmup, solver_draws, solver_thin : int, default 4, 500, 1000, 1
        The default sampler (`solver_fit`): chains x (warm-up + draws x thin sweeps).
    bridge_chains, bridge_warmup, bridge_draws : int, default 4, 300, 1000
        The CustomGibbs bridge: chains x (warm-up + draws).
    vi_max_sweeps : int, default 1000
        CAVI: at most this many sweeps.
    vi_tol : float, default 1e-10
        CAVI stops when the relative ELBO change is below it.
    vi_draws : int, default 2000
        Draws from q.
    tv_tol : float, default 1e-4
        The conditional check's total-variation tolerance (quadrature error of the 20001-point grid is
        ~1e-8; a wrong conditional gives > 1e-2).
    n_coords : int, default 3
        Coordinates per site in the conditional check.
    stationarity_rtol : float, default 1e-7
        Relative gradient tolerance of the stationarity check (float64 rounding of an exact update is
        ~1e-10).
    warm_sweeps : int, default 1
        CAVI sweeps before the stationarity check.
    monotone_sweeps : int, default 20
        CAVI sweeps of the monotonicity check.
    sbc_draws : int, default 99
        L, the draws per SBC simulation.
    alpha : float, default 0.05
        Family false-alarm rate of SBC / VSBC.
    khat_draws : int, default 4000
        Draws from q for k-hat.
    false_alarm : float, default 0.01
        Per group of the exact comparisons (Bonferroni, `validation.checks.crosscheck.compare_exact`).

    Raises
    ------
    None of its own (the values are used as given).

    Source: project addition.
    """

    nuts_chains: int = 4
    nuts_warmup: int = 500
    nuts_draws: int = 1000
    target_accept: float = 0.8
    solver_chains: int = 4
    solver_warmup: int = 500
    solver_draws: int = 1000
    solver_thin: int = 1
    bridge_chains: int = 4
    bridge_warmup: int = 300
    bridge_draws: int = 1000
    vi_max_sweeps: int = 1000
    vi_tol: float = 1e-10
    vi_draws: int = 2000
    tv_tol: float = 1e-4
    n_coords: int = 3
    stationarity_rtol: float = 1e-7
    warm_sweeps: int = 1
    monotone_sweeps: int = 20
    sbc_draws: int = 99
    alpha: float = 0.05
    khat_draws: int = 4000
    false_alarm: float = 0.01

    def nuts(self, seed: int) -> NutsSettings:
        """The `validation.checks.references.NutsSettings` of the NUTS reference.

        Parameters
        ----------
        seed : int
            NUTS's seed.

        Returns
        -------
        validation.checks.references.NutsSettings

        Raises
        ------
        None.

        Source: project addition.
        """
        return NutsSettings(self.nuts_chains, self.nuts_warmup, self.nuts_draws, int(seed), self.target_accept)


@dataclass(frozen=True)
class CheckOutcome:
    """One row of the report.

    Parameters
    ----------
    check : str
        E.g. "conditional[b]", "crosscheck".
    level : str
        "update", "bridge", "posterior", "calibration" or "evidence".
    status : str
        "pass", "fail", "inconclusive", "reported", "not declared", "not applicable" or
        "not selected".
    gating : bool
        Whether the check counts toward the verdict.
    reason : str
        The verdict in words.
    statistic : float, default NaN
        The headline number (NaN when none).
    statistic_name : str, default ""
        What ``statistic`` is.
    table : pandas.DataFrame, optional
        Details.

    Raises
    ------
    None.

    Source: project addition.
    """

    check: str
    level: str
    status: str
    gating: bool
    reason: str
    statistic: float = float("nan")
    statistic_name: str = ""
    table: pd.DataFrame | None = field(default=None, repr=False)

    def row(self) -> dict:
        """The outcome as a table row (without ``table``).

        Returns
        -------
        dict
            check, level, status, counts ("yes" / "no"), statistic (its name), value, reason.

        Raises
        ------
        None.

        Source: project addition.
        """
        return {"check": self.check, "level": self.level, "status": self.status,
                "counts": "yes" if self.gating else "no", "statistic": self.statistic_name,
                "value": self.statistic, "reason": self.reason}


@dataclass(frozen=True)
class DerivationReport:
    """What `check` returns.

    ``status``: "fail" when a counted check fails, else "inconclusive" when a counted check is
    inconclusive (NUTS failed its gates) or none passed, else "pass".

    Parameters
    ----------
    name : str
        The derivation's name.
    method : str
        "exact" or "vi".
    outcomes : list of CheckOutcome
        In `CHECKS` order.
    path : pathlib.Path, optional
        The Markdown report (None without ``out_dir``).
    results : dict
        The raw objects: "reference" (`validation.checks.references.Reference`), "crosscheck"
        (`validation.checks.crosscheck.CrosscheckResult`), "bridge" (block ->
        `validation.checks.bridge.BridgeResult` or InferenceData), "sbc"
        (`validation.checks.sbc.SBCResult`), "vsbc", "khat", "elbo".
    seconds : float
        Wall seconds of `check`.

    Raises
    ------
    None.

    Source: project addition.
    """

    name: str
    method: str
    outcomes: list
    path: Path | None = None
    results: dict = field(default_factory=dict, repr=False)
    seconds: float = 0.0

    @property
    def status(self) -> str:
        """The verdict over the counted checks: "pass", "fail" or "inconclusive".

        Returns
        -------
        str
            "fail" when a counted check fails, else "inconclusive" when a counted check is inconclusive
            or none passed, else "pass".

        Raises
        ------
        None.

        Source: project addition.
        """
        counted = [o.status for o in self.outcomes if o.gating]
        if "fail" in counted:
            return "fail"
        if "inconclusive" in counted or "pass" not in counted:
            return "inconclusive"
        return "pass"

    def table(self) -> pd.DataFrame:
        """One row per check (`CheckOutcome.row`).

        Returns
        -------
        pandas.DataFrame

        Raises
        ------
        None.

        Source: project addition.
        """
        return pd.DataFrame([o.row() for o in self.outcomes])

    def outcome(self, check: str) -> CheckOutcome:
        """The outcome named ``check``.

        Parameters
        ----------
        check : str
            "crosscheck", "conditional[b]", ...

        Returns
        -------
        CheckOutcome

        Raises
        ------
        KeyError
            For a name no outcome has (the message lists the names).

        Source: project addition.
        """
        for o in self.outcomes:
            if o.check == check:
                return o
        raise KeyError(f"no check {check!r}; checks: {[o.check for o in self.outcomes]}")

    def failed(self) -> list[str]:
        """Names of the counted checks that failed.

        Returns
        -------
        list of str

        Raises
        ------
        None.

        Source: project addition.
        """
        return [o.check for o in self.outcomes if o.gating and o.status == "fail"]

    def __repr__(self) -> str:
        return (f"DerivationReport({self.name!r}, {self.method!r}, status={self.status!r}, "
                f"failed={self.failed()}, checks={len(self.outcomes)})")

    def _repr_markdown_(self) -> str:
        from validation.checks.report import markdown_table

        return f"**{self.name} ({self.method}): {self.status.upper()}**\n\n" + markdown_table(
            self.table().drop(columns=["level"]))


def _band_sims(result, alpha: float) -> int:
    """Band simulations enough for >= 10 simulated exceedances at the Bonferroni level alpha / Q."""
    from validation.checks import sbc

    q = sum(r.shape[1] for r in result.ranks.values())
    return max(sbc.N_BAND_SIMS, int(np.ceil(10 * q / alpha)))


# ---------------------------------------------------------------------------------------------
# the report


_LEVEL_TEXT = {
    "update": "Update level: each derived formula against the program itself (no sampling error).",
    "bridge": "Bridge: each Gibbs block as NumPyro CustomGibbs beside NUTS on the other sites; the chain keeps "
              "the program's posterior exactly when the block draws from the right conditional.",
    "posterior": "Posterior level: the solver against a fresh, ArviZ-gated NUTS run on the identified quantities.",
    "calibration": "Calibration: SBC ranks of the identified quantities over data sets drawn from the prior.",
    "evidence": "VI evidence (reported, not counted): VSBC and PSIS k-hat of q.",
}


def write_report(report: DerivationReport, d: Derivation, latent, observed, out_dir) -> Path:
    """Write ``report.md`` (and plots; the SBC sub-report in ``sbc/``) to ``out_dir``.

    The verdict, one table of every check, the declaration, then each check's details (called by
    `check` with ``out_dir``).

    Parameters
    ----------
    report : DerivationReport
        The outcomes of `check`.
    d : Derivation
        The declaration checked.
    latent : dict str -> dict
        Latent site -> its NumPyro trace entry (``entry["value"]`` gives the site's shape).
    observed : list of str
        The program's observed sites.
    out_dir : str or pathlib.Path
        Folder of the report (created if missing).

    Returns
    -------
    pathlib.Path
        ``out_dir/report.md``.

    Raises
    ------
    OSError
        ``out_dir`` cannot be created or written.
    ImportError
        ``tabulate`` is not installed (`validation.checks.report.markdown_table`).

    Source: project addition.
    """
    from validation.checks import report as rp

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = rp._header(f"Derivation check: {d.name} ({d.method})")
    failed = report.failed()
    lines += [f"**Verdict: {report.status.upper()}**" + (f" (failed: {', '.join(failed)})" if failed else ""), "",
              "A counted check (`counts` = yes) that fails makes the verdict FAIL; an inconclusive one (NUTS failed "
              "its ArviZ gates) makes it INCONCLUSIVE. Checks that do not apply are listed with the reason.", "",
              rp.markdown_table(report.table()), "",
              "## Declaration", "",
              f"- program: `{getattr(d.program, '__name__', d.program)}`; {d.description}",
              "- latent sites: " + ", ".join(f"{n} {tuple(np.shape(v['value']))}" for n, v in latent.items()),
              f"- observed sites: {', '.join(observed) or 'none'}",
              f"- conditionals: {', '.join(d.conditionals) or 'none'}; gibbs_blocks: "
              f"{', '.join(_block_label(k) for k in d.gibbs_blocks) or 'none'}; cavi_blocks: "
              f"{', '.join(_block_label(k) for k in d.cavi_blocks) or 'none'}; elbo: {'yes' if d.elbo else 'no'}; "
              f"q: {'yes' if d.q else 'no'}; fit: {'declared' if d.fit else 'built from the blocks'}",
              f"- settings: `{report.results.get('settings', CheckSettings())}`; seed {report.results.get('seed', 0)}; "
              f"total {report.seconds:.1f} s", ""]
    if "reference" in report.results:
        lines += [f"- NUTS: {report.results['reference'].line()}", ""]
    for level in ("update", "bridge", "posterior", "calibration", "evidence"):
        rows = [o for o in report.outcomes if o.level == level]
        if not rows:
            continue
        lines += [f"## {level.capitalize()}", "", _LEVEL_TEXT[level], ""]
        for o in rows:
            lines += [f"### {o.check}: {o.status}", "", o.reason, ""]
            if o.table is not None and o.check not in ("monotone",):
                lines += [rp.markdown_table(o.table), ""]
        if level == "update" and "elbo" in report.results and report.results["elbo"] is not None:
            lines += [f"![ELBO]({rp._elbo_curve(np.asarray(report.results['elbo']), out)})", ""]
        if level == "posterior" and "crosscheck" in report.results:
            r = report.results["crosscheck"]
            lines += [f"![posterior means]({rp._means_scatter(r, out, r.solver)})", "",
                      f"![NUTS rank plots]({rp._rank_plots(r, out)})", ""]
        if level == "calibration" and "sbc" in report.results:
            from validation.checks import sbc

            alpha = report.results.get("settings", CheckSettings()).alpha
            res = report.results["sbc"]
            sub = sbc.sbc_report(res, out / "sbc", f"SBC of {d.name}", alpha=alpha, n_band_sims=_band_sims(res, alpha))
            lines += [f"Full SBC report with rank plots: [sbc/report.md]({sub.relative_to(out)})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
