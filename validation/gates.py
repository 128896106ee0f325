"""ArviZ convergence gates: when may a NUTS run serve as ground truth?

A NUTS reference counts only if, on the quantities that are compared, ArviZ
reports rank-normalized split R-hat <= 1.01 with >= 4 chains, bulk and tail ESS
>= 400, no divergent transitions and E-BFMI >= 0.3 in every chain (Vehtari et
al. 2021; Betancourt 2016; ../shared/DESIGN.md "Validation", level 2). Otherwise
the verdict of any comparison against it is "inconclusive", never "pass".
NumPyro's printed R-hat is the classic one; these gates use ArviZ's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from custom_inference import arviz_io

__all__ = ["Thresholds", "GateResult", "nuts_gates"]


@dataclass(frozen=True)
class Thresholds:
    """The gate thresholds (defaults from the DESIGN, ArviZ and Stan practice)."""

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


def nuts_gates(
    quantities: dict[str, np.ndarray],
    *,
    divergences: int,
    bfmi: np.ndarray,
    thresholds: Thresholds = Thresholds(),
) -> GateResult:
    """Apply the convergence gates to the compared quantities of a NUTS run.

    Parameters
    ----------
    quantities : dict group name -> array (chain, draw, Q)
        The identifiable quantities that will be compared (e.g. expected rates).
    divergences : int
        Total divergent transitions over all chains (after warmup).
    bfmi : array (chain,)
        E-BFMI of each chain (`custom_inference.arviz_io.bfmi`).
    thresholds : Thresholds

    Returns
    -------
    GateResult
    """
    rows = []
    failures = []
    n_chains = min(np.asarray(v).shape[0] for v in quantities.values())
    if n_chains < thresholds.min_chains:
        failures.append(f"{n_chains} chains < {thresholds.min_chains}")
    for name, draws in quantities.items():
        d = arviz_io.diagnostics(draws)
        row = {
            "quantity": name,
            "Q": int(np.asarray(draws).shape[2]),
            "max_r_hat": float(np.max(d["r_hat"])),
            "min_ess_bulk": float(np.min(d["ess_bulk"])),
            "min_ess_tail": float(np.min(d["ess_tail"])),
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
