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
    """The gate thresholds (defaults from the project's validation level 2, ArviZ and Stan practice).

    Parameters
    ----------
    max_r_hat : float, default 1.01
        Largest rank-normalized split R-hat allowed on any compared quantity.
    min_ess_bulk : float, default 400.0
        Smallest bulk effective sample size allowed (draws, all chains together).
    min_ess_tail : float, default 400.0
        Smallest tail effective sample size allowed.
    min_chains : int, default 4
        Fewest chains a reference may have.
    max_divergences : int, default 0
        Most divergent transitions allowed (all chains, after warmup).
    min_bfmi : float, default 0.3
        Smallest E-BFMI allowed in any chain.

    Raises
    ------
    None of its own (a frozen dataclass; the values are not checked).

    Source: project addition (validation level 2; Vehtari et al. 2021; Betancourt 2016).
    """

    max_r_hat: float = 1.01
    min_ess_bulk: float = 400.0
    min_ess_tail: float = 400.0
    min_chains: int = 4
    max_divergences: int = 0
    min_bfmi: float = 0.3


@dataclass(frozen=True)
class GateResult:
    """Outcome of `nuts_gates`: ``passed``, the failed gates in words, and a table.

    Parameters
    ----------
    passed : bool
        True when no gate failed.
    failures : list of str
        The failed gates in words (e.g. ``"rate: max R-hat 1.0213 > 1.01"``); empty when passed.
    table : pandas.DataFrame
        One row per quantity group: ``quantity`` (str), ``Q`` (int), ``max_r_hat``,
        ``min_ess_bulk``, ``min_ess_tail`` (float).
    divergences : int
        Divergent transitions of the run (all chains).
    bfmi : numpy.ndarray, shape (chain,), float
        E-BFMI of each chain.
    n_chains : int, default 0
        The fewest chains among the quantity groups.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (validation level 2).
    """

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

    Parameters
    ----------
    mean, sd, mcse_mean : numpy.ndarray, shape (Q,), float64
        Posterior mean, standard deviation and Monte Carlo standard error of the mean.
    r_hat : numpy.ndarray, shape (Q,), float64
        Rank-normalized split R-hat.
    ess_bulk, ess_tail : numpy.ndarray, shape (Q,), float64
        Bulk and tail effective sample sizes.
    n_chains : int
        Number of chains.
    n_draws : int
        Draws per chain.

    Raises
    ------
    None of its own (a frozen dataclass; the fields are not checked).

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
        """Q, the number of scalar quantities summarized (an int).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(np.asarray(self.mean).size)


def summarize(draws) -> QuantitySummary:
    """`QuantitySummary` of draws (chain, draw, Q) (a summary is returned as is).

    Parameters
    ----------
    draws : array_like, shape (chain, draw, Q), or QuantitySummary
        MCMC draws of Q scalar quantities (cast to float64), or a summary already made.

    Returns
    -------
    QuantitySummary
        ArviZ's rank R-hat, bulk / tail ESS, MCSE, mean and sd of each quantity, float64 (Q,).

    Raises
    ------
    ValueError
        ``draws`` is not 3-dimensional (from `custom_inference.arviz_io.diagnostics`).

    Source: project addition (`custom_inference.arviz_io.diagnostics`: ArviZ's rank R-hat, bulk/tail ESS,
    MCSE).
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
    thresholds : Thresholds, default Thresholds()
        The gates (keyword-only, like ``divergences`` and ``bfmi``).

    Returns
    -------
    GateResult
        ``passed`` with the failed gates in words and one table row per group.

    Raises
    ------
    ValueError
        Draws that are not (chain, draw, Q) (`summarize`), or an empty ``quantities`` (Python's
        ``min`` of no chains).

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
