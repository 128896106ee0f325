"""The executable errata table's runner: printed equations of the seeds that are wrong.

Each `Erratum` pairs an equation as printed in a seed with the corrected one and
names the check that tells them apart. `run_errata` runs every check on both
forms: a row passes when the printed form fails its check and the corrected form
passes it. ``factorbayes errata`` prints the table.

The rows live with their model: each model's validation module declares ``ERRATA``
(HPF's CAVI rows in `validation.models.hpf`, its complete conditionals in `validation.models.hpf_gibbs`,
then `validation.models.sbmf`, `validation.models.vbfm`, ...) and its ``SPEC`` lists them;
`validation.models.catalog.all_errata` collects every model's rows. This module imports no model
module, so there is no import cycle.

Checks used by the rows (see `validation.checks.updates`):
- "stationarity": the update, applied inside a CAVI sweep on a small simulated
  data set, must leave zero gradient of the ELBO in its block (``jax.grad``);
- "conditional": the closed-form complete conditional must equal the brute-force
  normalized conditional on a grid (total-variation distance).
Hyperparameters are chosen distinct (a != a' != c ...) so that a swapped symbol
shows; a check that cannot tell two forms apart would not be a check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import pandas as pd

__all__ = ["Erratum", "run_errata"]


@dataclass(frozen=True)
class Erratum:
    """One row of the errata table.

    Parameters
    ----------
    seed_file : str
        The seed the printed equation is in (e.g. ``"001_30a2018ec18c20b9.txt"``).
    location : str
        Where in the seed (section, equation or figure).
    printed : str
        The equation as printed.
    corrected : str
        The corrected equation.
    why : str
        Why the printed form is wrong, in words.
    check_name : str
        The check that tells the forms apart ("stationarity", "conditional", ...).
    check : callable
        ``check(form) -> (passed, measured value)``: runs the check on ``form`` in
        {"printed", "corrected"}; ``passed`` a bool, the value a float.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (the rows cite their seed).
    """

    seed_file: str
    location: str
    printed: str
    corrected: str
    why: str
    check_name: str
    check: Callable[[str], tuple[bool, float]]


def run_errata(entries: Iterable[Erratum]) -> pd.DataFrame:
    """Run every erratum's check on the printed and the corrected form.

    Parameters
    ----------
    entries : iterable of Erratum
        The rows to run (every model's: `validation.models.catalog.all_errata()`).

    Returns
    -------
    pandas.DataFrame
        One row per entry: seed_file, location, printed, corrected, check, printed_value,
        corrected_value, printed_passes, corrected_passes, ok (= printed fails and corrected passes).

    Raises
    ------
    None of its own
        Whatever a row's check raises propagates.

    Source: project addition.
    """
    entries = tuple(entries)
    rows = []
    for e in entries:
        p_ok, p_val = e.check("printed")
        c_ok, c_val = e.check("corrected")
        rows.append(
            {
                "seed_file": e.seed_file,
                "location": e.location,
                "printed": e.printed,
                "corrected": e.corrected,
                "check": e.check_name,
                "printed_value": p_val,
                "corrected_value": c_val,
                "printed_passes": p_ok,
                "corrected_passes": c_ok,
                "ok": (not p_ok) and c_ok,
            }
        )
    return pd.DataFrame(rows, columns=["seed_file", "location", "printed", "corrected", "check", "printed_value",
                                       "corrected_value", "printed_passes", "corrected_passes", "ok"])

