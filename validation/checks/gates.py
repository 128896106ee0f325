"""ArviZ convergence gates: when may a NUTS run serve as ground truth?

A NUTS reference counts only if, on the quantities that are compared, ArviZ
reports rank-normalized split R-hat <= 1.01 with >= 4 chains, bulk and tail ESS
>= 400, no divergent transitions and E-BFMI >= 0.3 in every chain (Vehtari et
al. 2021; Betancourt 2016; the project's validation level 2). Otherwise
the verdict of any comparison against it is "inconclusive", never "pass".
NumPyro's printed R-hat is the classic one; these gates use ArviZ's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from custom_inference import arviz_io

__all__ = ["Thresholds", "GateResult", "QuantitySummary", "summarize", "nuts_gates"]


@dataclass(frozen=True)
class Thresholds:
    """The gate thresholds (defaults from the project's validation level 2, ArviZ and Stan practice)."""

    max_r_hat: float = 1.01
    min_ess_bulk: float = 400.0
    min_ess_tail: float = 400.0
    min_chains: int = 4
    max_divergences: int = 0
    min_bfmi: float = 0.3


@dataclass(frozen=True)
class GateResult:
    """Outcome of `nuts_gates`: ``passed``, the failed gates in words, and a table
    (one row per quantity group: Q, max R-hat, min bulk ESS, min tail ESS)."""

    passed: bool
    failures: list[str]
    table: pd.DataFrame
    divergences: int
    bfmi: np.ndarray = field(repr=False)
    n_chains: int = 0


@dataclass(frozen=True)
class QuantitySummary:
    """ArviZ summaries of Q scalar quantities drawn by an MCMC run: what the gates and the
    comparisons need, so that a stored reference (`validation.checks.references`) can stand in for its draws.

    Fields: ``mean``, ``sd``, ``mcse_mean``, ``r_hat`` (rank-normalized split), ``ess_bulk``,
    ``ess_tail``: float64 arrays (Q,); ``n_chains``, ``n_draws``: ints (draws per chain).
    Source: project addition (Vehtari et al. 2021 for the diagnostics).
    """

    mean: np.ndarray
    sd: np.ndarray
    mcse_mean: np.ndarray
    r_hat: np.ndarray
    ess_bulk: np.ndarray
    ess_tail: np.ndarray
    n_chains: int
    n_draws: int

    FIELDS = ("mean", "sd", "mcse_mean", "r_hat", "ess_bulk", "ess_tail")

    @property
    def size(self) -> int:
        return int(np.asarray(self.mean).size)


def summarize(draws) -> QuantitySummary:
    """`QuantitySummary` of draws (chain, draw, Q) (a summary is returned as is).

    Raises ValueError when ``draws`` is not 3-dimensional. Source: project addition
    (`custom_inference.arviz_io.diagnostics`: ArviZ's rank R-hat, bulk/tail ESS, MCSE).
    """
    if isinstance(draws, QuantitySummary):
        return draws
    draws = np.asarray(draws, dtype=np.float64)
    d = arviz_io.diagnostics(draws)
    return QuantitySummary(**{f: np.asarray(d[f], np.float64) for f in QuantitySummary.FIELDS},
                           n_chains=int(draws.shape[0]), n_draws=int(draws.shape[1]))


def nuts_gates(
    quantities: dict,
    *,
    divergences: int,
    bfmi: np.ndarray,
    thresholds: Thresholds = Thresholds(),
) -> GateResult:
    """Apply the convergence gates to the compared quantities of a NUTS run.

    Parameters
    ----------
    quantities : dict group name -> array (chain, draw, Q) or `QuantitySummary`
        The identifiable quantities that will be compared (e.g. expected rates), as draws or
        as the summaries of a stored reference (`validation.checks.references`).
    divergences : int
        Total divergent transitions over all chains (after warmup).
    bfmi : array (chain,)
        E-BFMI of each chain (`custom_inference.arviz_io.bfmi`).
    thresholds : Thresholds

    Returns
    -------
    GateResult

    Raises ValueError when draws are not (chain, draw, Q) or ``quantities`` is empty.
    Source: project addition (validation level 2; Vehtari et al. 2021; Betancourt 2016).
    """
    rows = []
    failures = []
    summaries = {name: summarize(q) for name, q in quantities.items()}
    n_chains = min(s.n_chains for s in summaries.values())
    if n_chains < thresholds.min_chains:
        failures.append(f"{n_chains} chains < {thresholds.min_chains}")
    for name, d in summaries.items():
        row = {
            "quantity": name,
            "Q": d.size,
            "max_r_hat": float(np.max(d.r_hat)),
            "min_ess_bulk": float(np.min(d.ess_bulk)),
            "min_ess_tail": float(np.min(d.ess_tail)),
        }
        rows.append(row)
        if not row["max_r_hat"] <= thresholds.max_r_hat:
            failures.append(f"{name}: max R-hat {row['max_r_hat']:.4f} > {thresholds.max_r_hat}")
        if not row["min_ess_bulk"] >= thresholds.min_ess_bulk:
            failures.append(f"{name}: min bulk ESS {row['min_ess_bulk']:.0f} < {thresholds.min_ess_bulk:.0f}")
        if not row["min_ess_tail"] >= thresholds.min_ess_tail:
            failures.append(f"{name}: min tail ESS {row['min_ess_tail']:.0f} < {thresholds.min_ess_tail:.0f}")
    if divergences > thresholds.max_divergences:
        failures.append(f"{divergences} divergent transitions")
    bfmi = np.asarray(bfmi)
    if bfmi.size and np.min(bfmi) < thresholds.min_bfmi:
        failures.append(f"min E-BFMI {np.min(bfmi):.3f} < {thresholds.min_bfmi}")
    return GateResult(
        passed=not failures,
        failures=failures,
        table=pd.DataFrame(rows),
        divergences=int(divergences),
        bfmi=bfmi,
        n_chains=int(n_chains),
    )
