"""Uncertainty of evaluation tables: standard errors over test users and paired bootstrap intervals.

Every evaluation table of the project (P1, SIBM and baskets in `validation.evaluation.implicit_eval`, P3
in `validation.evaluation.counts_eval`, P2 in `validation.evaluation.ratings_eval`, the front door's
`validation.evaluation.holdout.evaluate`) reports a metric as a mean over test users. The per-user values
come from `validation.evaluation.metrics` (`leave_one_out_metrics`, `holdout_metrics`, one row per user);
this module turns them into

- a standard error per (system, metric): ``std(ddof=1) / sqrt(T)`` over the T test users with a value
  (for RMSE, which pools ratings and is not a mean of per-user values: the standard deviation of the
  bootstrap replicates below);
- for each system against the *best baseline* (the baseline with the better value of the table's main
  metric, e.g. the better of popularity and EASE^R), a paired bootstrap interval of the difference
  (system minus baseline): the same resampled test users for both systems, `N_RESAMPLES` resamples with
  a fixed seed, percentile interval at `LEVEL`. The verdict says "better" / "worse" only when the
  interval excludes 0 (for RMSE, lower is better), "no difference" otherwise.

One resampling scheme serves every statistic: each column is a ratio of per-user sums,
``stat = sum_t w_t num_t / sum_t w_t den_t`` with bootstrap weights w (the multiplicities of the users in
a resample; w = 1 gives the estimate itself), optionally square-rooted. A mean metric has
``num = value``, ``den = 1`` (users whose value is NaN get num = den = 0); RMSE has ``num`` = the user's
sum of squared errors and ``den`` = the user's number of test ratings, and ``sqrt``.

Source: project addition (issue 27, item 4: "differences with uncertainty"); the bootstrap is Efron's
nonparametric bootstrap with the percentile interval, resampling test users (the unit the metrics
average over).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = ["N_RESAMPLES", "LEVEL", "SEED", "standard_error", "squared_errors", "bootstrap_stats", "paired_interval", "verdict",
           "Comparison", "compare", "annotate"]

#: resamples of every paired bootstrap (the percentile interval's Monte Carlo error at 95 % is a few
#: thousandths of the interval's width at this count)
N_RESAMPLES = 2000
#: level of the intervals
LEVEL = 0.95
#: seed of the resampling (`numpy.random.default_rng`)
SEED = 0
_CHUNK_CELLS = 4_000_000  # resamples x users generated at once


def standard_error(values) -> float:
    """Standard error of a mean over users: ``std(ddof=1) / sqrt(n)`` of the n non-NaN entries.

    Parameters
    ----------
    values : array_like, shape (T,), float
        One value per test user (NaN: the user has none; dropped).

    Returns
    -------
    float
        The standard error; NaN when fewer than 2 values are not NaN.

    Raises
    ------
    ValueError
        ``values`` is not 1-D.

    Source: project addition (issue 27).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {v.shape}")
    v = v[~np.isnan(v)]
    return float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else np.nan


def squared_errors(users, pred, truth) -> pd.DataFrame:
    """Per-user sums of squared errors, the per-user form of RMSE that `compare` takes (``rmse=``).

    Parameters
    ----------
    users : array_like of int, shape (M,)
        The user of each test rating.
    pred : array_like of float, shape (M,)
        Predicted ratings (cast to float64).
    truth : array_like of float, shape (M,)
        Observed test ratings, in the units of ``pred``.

    Returns
    -------
    pandas.DataFrame
        One row per distinct user (increasing): ``user``, ``rmse`` (float64: the SUM of the user's squared
        errors, units of the ratings squared), ``n_ratings`` (float64: the user's number of test ratings).

    Raises
    ------
    ValueError
        The three arrays are not 1-D of one length.

    Source: project addition (RMSE of 004 chs. 3-4 split by user).
    """
    u, p, t = np.asarray(users), np.asarray(pred, np.float64), np.asarray(truth, np.float64)
    if not (u.shape == p.shape == t.shape) or u.ndim != 1:
        raise ValueError(f"users, pred, truth must be 1-D of one length, got {u.shape}, {p.shape}, {t.shape}")
    return pd.DataFrame({"user": u, "rmse": (p - t) ** 2, "n_ratings": 1.0}).groupby("user", as_index=False).sum()


def bootstrap_stats(num, den=None, *, sqrt=False, n_resamples: int = N_RESAMPLES, seed: int = SEED):
    """Bootstrap replicates of ratio statistics over users, all columns on the same resamples.

    Each statistic is ``sum_t w_t num_t / sum_t w_t den_t`` (optionally square-rooted), with w the
    multiplicities of the T users in a resample of T users drawn with replacement.

    Parameters
    ----------
    num : array_like, shape (T, M), float
        Per-user numerators of M statistics (T users).
    den : array_like, shape (T, M) or (T,), float, optional
        Per-user denominators (a (T,) array serves every column); None: every user 1.
    sqrt : bool or array_like of bool, shape (M,), default False
        Square-root the ratio (RMSE); a scalar applies to every column.
    n_resamples : int >= 1, default `N_RESAMPLES`
        Number of bootstrap resamples R.
    seed : int, default `SEED`
        Seed of `numpy.random.default_rng` that draws the resamples.

    Returns
    -------
    estimate : numpy.ndarray, shape (M,), float64
        ``sum num / sum den`` on the data (square-rooted where ``sqrt``).
    replicates : numpy.ndarray, shape (n_resamples, M), float64
        The same statistic on each resample (the same resamples for every column, so that differences of
        columns are paired); all NaN for a single user (nothing to resample).

    Raises
    ------
    ValueError
        ``num`` not 2-D, ``den`` of another shape than (T,) or (T, M), no user (T = 0), NaN in ``num`` or
        ``den``, ``n_resamples`` not an integer >= 1, or a column whose total denominator is zero.

    Source: project addition (Efron's bootstrap over test users).
    """
    num = np.asarray(num, dtype=np.float64)
    if num.ndim != 2:
        raise ValueError(f"num must be (T, M), got shape {num.shape}")
    T, M = num.shape
    den = np.ones((T, M)) if den is None else np.asarray(den, dtype=np.float64)
    if den.ndim == 1:
        den = np.repeat(den[:, None], M, axis=1)
    if den.shape != (T, M):
        raise ValueError(f"den must be (T,) or (T, M) = {(T, M)}, got {den.shape}")
    if T < 1:
        raise ValueError("num: no user")
    if np.isnan(num).any() or np.isnan(den).any():
        raise ValueError("num / den: NaN entries (give NaN users num = den = 0)")
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be an integer >= 1, got {n_resamples!r}")
    root = np.broadcast_to(np.asarray(sqrt, dtype=bool), (M,))

    def ratio(n, d):
        with np.errstate(invalid="ignore", divide="ignore"):
            r = n / d
        return np.where(root, np.sqrt(np.maximum(r, 0.0)), r)

    tot = den.sum(0)
    if np.any(tot == 0):
        raise ValueError("den: a column with zero total")
    est = ratio(num.sum(0), tot)
    if T == 1:  # one user: nothing to resample
        return est, np.full((int(n_resamples), M), np.nan)
    rng = np.random.default_rng(seed)
    reps = np.empty((int(n_resamples), M))
    step = max(1, _CHUNK_CELLS // T)
    for start in range(0, int(n_resamples), step):
        c = min(step, int(n_resamples) - start)
        idx = rng.integers(T, size=(c, T))
        W = np.bincount((idx + T * np.arange(c)[:, None]).ravel(), minlength=c * T).reshape(c, T).astype(np.float64)
        reps[start:start + c] = ratio(W @ num, W @ den)
    return est, reps


def paired_interval(est_a: float, est_b: float, reps_a, reps_b, level: float = LEVEL) -> tuple[float, float, float]:
    """Difference a - b and its percentile bootstrap interval from paired replicates.

    Parameters
    ----------
    est_a : float
        Statistic of system a on the data.
    est_b : float
        Statistic of system b on the data.
    reps_a : array_like, shape (R,), float
        Replicates of a (`bootstrap_stats`).
    reps_b : array_like, shape (R,), float
        Replicates of b on the same resamples as ``reps_a``.
    level : float in (0, 1), default `LEVEL`
        Coverage of the interval: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of
        ``reps_a - reps_b``.

    Returns
    -------
    diff : float
        ``est_a - est_b``.
    low : float
        Lower end of the interval (NaN when the replicates are NaN).
    high : float
        Upper end of the interval.

    Raises
    ------
    ValueError
        ``level`` outside (0, 1), or replicate arrays of different shapes.

    Source: project addition (percentile interval).
    """
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    a, b = np.asarray(reps_a, np.float64), np.asarray(reps_b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"replicates of different shapes {a.shape} and {b.shape}")
    d = a - b
    alpha = (1.0 - float(level)) / 2.0
    lo, hi = np.quantile(d, [alpha, 1.0 - alpha])
    return float(est_a - est_b), float(lo), float(hi)


def verdict(low: float, high: float, higher_is_better: bool = True) -> str:
    """The verdict of a difference (system - baseline) from its interval [low, high].

    Parameters
    ----------
    low : float
        Lower end of the interval of the difference.
    high : float
        Upper end.
    higher_is_better : bool, default True
        False for metrics where smaller is better (RMSE).

    Returns
    -------
    str
        "better" when the interval lies above 0 (below 0 when lower is better), "worse" when on the other
        side, "no difference" when it holds 0 or an end is not finite (NaN).

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    if not (np.isfinite(low) and np.isfinite(high)):
        return "no difference"
    if low > 0:
        return "better" if higher_is_better else "worse"
    if high < 0:
        return "worse" if higher_is_better else "better"
    return "no difference"


@dataclass
class Comparison:
    """What `compare` returns.

    Parameters
    ----------
    summary : pandas.DataFrame
        One row per system: ``system``, then per metric m its estimate ``m`` and standard error ``m_se``
        (float64).
    differences : pandas.DataFrame
        One row per (system other than the best baseline, metric): ``system``, ``baseline``, ``metric``,
        ``diff`` (system - baseline), ``ci_low``, ``ci_high`` (float64) and ``verdict`` (str, `verdict`);
        empty when there is no baseline.
    best_baseline : str or None
        The baseline with the better main metric (None when no baseline was given).
    main : str
        The main metric.
    n_users : int
        Test users (the unit resampled).
    n_resamples : int
        Bootstrap resamples.
    level : float
        Level of the intervals.
    seed : int
        Seed of the resampling.

    Raises
    ------
    None of its own (the fields are not checked; `compare` builds it).

    Source: project addition (issue 27, item 4).
    """

    summary: pd.DataFrame
    differences: pd.DataFrame
    best_baseline: str | None
    main: str
    n_users: int
    n_resamples: int
    level: float
    seed: int

    def note(self, main_label: str | None = None) -> str:
        """One line that says how the intervals were made.

        Parameters
        ----------
        main_label : str, optional
            How the table names the main metric (default: its per-user column, ``main``).

        Returns
        -------
        str
            The sentence, for a table's footnote.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return (f"intervals: paired bootstrap over the {self.n_users} test users ({self.n_resamples} resamples, "
                f"seed {self.seed}, {100 * self.level:g} % percentile interval) of system - {self.best_baseline} "
                f"(the better baseline on {main_label or self.main}); 'better' / 'worse' only where the interval "
                f"excludes 0; _se: standard error over test users")


def compare(per_user: Mapping[str, pd.DataFrame], metrics: Sequence[str], *, main: str,
            baselines: Sequence[str] = ("popularity", "ease"), key: str = "user",
            lower_is_better: Sequence[str] = (), rmse: Mapping[str, str] | None = None,
            n_resamples: int = N_RESAMPLES, level: float = LEVEL, seed: int = SEED) -> Comparison:
    """Standard errors and paired intervals of every system against the best baseline.

    Parameters
    ----------
    per_user : mapping str -> pandas.DataFrame
        System -> one row per test user (column ``key``) and the metric columns (float; from
        `validation.evaluation.metrics`); every system must have the same users.
    metrics : sequence of str
        The metric columns to summarise (means over users with a non-NaN value).
    main : str
        The metric (one of ``metrics``) that picks the best baseline and whose difference tables show.
    baselines : sequence of str, default ("popularity", "ease")
        Names of the baseline systems; those present in ``per_user`` compete for "best".
    key : str, default "user"
        The column that identifies a test user (the pairing of the systems).
    lower_is_better : sequence of str, default ()
        Metrics where smaller is better (RMSE).
    rmse : mapping str -> str, optional
        Metric -> name of a per-user column holding that user's number of test ratings: the metric
        column then holds the user's SUM of squared errors (`squared_errors`) and the statistic is
        sqrt(sum / count) (pooled over ratings), its standard error the bootstrap one.
    n_resamples : int >= 1, default `N_RESAMPLES`
        Bootstrap resamples (`bootstrap_stats`).
    level : float in (0, 1), default `LEVEL`
        Level of the intervals (`paired_interval`).
    seed : int, default `SEED`
        Seed of the resampling.

    Returns
    -------
    Comparison
        The summary (estimates and standard errors), the differences against the best baseline with their
        intervals and verdicts, and the settings.

    Raises
    ------
    ValueError
        No system; ``main`` not in ``metrics``; a missing column; systems with different users or
        repeated users; what `bootstrap_stats` / `paired_interval` raise (e.g. ``level`` outside (0, 1)).

    Source: project addition (issue 27, item 4).
    """
    rmse = dict(rmse or {})
    metrics = list(metrics)
    if not per_user:
        raise ValueError("per_user: no system")
    if main not in metrics:
        raise ValueError(f"main {main!r} is not one of the metrics {metrics}")
    names = list(per_user)
    ref = None
    for name in names:
        df = per_user[name]
        for c in [key] + metrics + [rmse[m] for m in metrics if m in rmse]:
            if c not in df.columns:
                raise ValueError(f"per_user[{name!r}] has no column {c!r}")
        users = np.sort(df[key].to_numpy())
        if np.any(users[1:] == users[:-1]):
            raise ValueError(f"per_user[{name!r}]: repeated {key}s")
        if ref is None:
            ref = users
        elif users.shape != ref.shape or np.any(users != ref):
            raise ValueError(f"per_user[{name!r}] holds other {key}s than per_user[{names[0]!r}]: not paired")
    cols_num, cols_den, cols_sqrt = [], [], []
    for name in names:
        df = per_user[name].sort_values(key)
        for m in metrics:
            v = df[m].to_numpy(dtype=np.float64)
            ok = ~np.isnan(v)
            cols_num.append(np.where(ok, v, 0.0))
            cols_den.append(df[rmse[m]].to_numpy(dtype=np.float64) * ok if m in rmse else ok.astype(np.float64))
            cols_sqrt.append(m in rmse)
    est, reps = bootstrap_stats(np.stack(cols_num, 1), np.stack(cols_den, 1), sqrt=np.array(cols_sqrt),
                                n_resamples=n_resamples, seed=seed)
    M = len(metrics)
    col = {(n, m): k * M + j for k, n in enumerate(names) for j, m in enumerate(metrics)}
    rows = []
    for n in names:
        row = {"system": n}
        for m in metrics:
            c = col[(n, m)]
            row[m] = float(est[c])
            row[f"{m}_se"] = (float(reps[:, c].std(ddof=1)) if m in rmse
                              else standard_error(per_user[n][m].to_numpy(dtype=np.float64)))
        rows.append(row)
    summary = pd.DataFrame(rows)
    sign = -1.0 if main in lower_is_better else 1.0
    present = [b for b in baselines if b in per_user]
    best = max(present, key=lambda b: sign * est[col[(b, main)]]) if present else None
    diffs = []
    if best is not None:
        for n in names:
            if n == best:
                continue
            for m in metrics:
                d, lo, hi = paired_interval(est[col[(n, m)]], est[col[(best, m)]], reps[:, col[(n, m)]],
                                            reps[:, col[(best, m)]], level)
                diffs.append({"system": n, "baseline": best, "metric": m, "diff": d, "ci_low": lo, "ci_high": hi,
                              "verdict": verdict(lo, hi, m not in lower_is_better)})
    differences = pd.DataFrame(diffs, columns=["system", "baseline", "metric", "diff", "ci_low", "ci_high", "verdict"])
    return Comparison(summary, differences, best, main, int(ref.size), int(n_resamples), float(level), int(seed))


def annotate(table: pd.DataFrame, comparison: Comparison, columns: Mapping[str, str] | None = None, *,
             system_col: str = "system", where: Mapping | None = None) -> pd.DataFrame:
    """Add a comparison's standard errors and main-metric intervals to an evaluation table.

    Adds ``<column>_se`` per metric of the comparison, ``vs`` (the best baseline), ``diff`` (of the main
    metric, system - baseline), ``ci_low``, ``ci_high``, ``verdict`` (NaN / "" on the best baseline's row
    and on rows not compared); rows outside ``where`` keep their values (NaN / "" when the column is new).

    Parameters
    ----------
    table : pandas.DataFrame
        The evaluation table (one row per system, or per (protocol, system) with ``where``).
    comparison : Comparison
        `compare`'s result for the rows selected by ``where``.
    columns : mapping str -> str, optional
        Per-user metric -> the table's column of it (default: the same name).
    system_col : str, default "system"
        The table's column with the system names (matched to ``comparison``'s systems).
    where : mapping str -> object, optional
        Column -> value selecting the rows ``comparison`` is about (e.g. ``{"protocol": "P1"}``); None: every
        row.

    Returns
    -------
    pandas.DataFrame
        A new DataFrame (rows and order of ``table``) with the added columns.

    Raises
    ------
    ValueError
        ``system_col`` or a ``where`` column is missing from ``table``.

    Source: project addition (issue 27, item 4).
    """
    columns = dict(columns or {})
    out = table.copy()
    for c in [system_col] + list(where or {}):
        if c not in out.columns:
            raise ValueError(f"table has no column {c!r}")
    sel = np.ones(len(out), dtype=bool)
    for c, v in (where or {}).items():
        sel &= (out[c] == v).to_numpy()
    summ = comparison.summary.set_index("system")
    main_diff = comparison.differences[comparison.differences["metric"] == comparison.main].set_index("system")
    for m in [c[:-3] for c in summ.columns if c.endswith("_se")]:
        name = f"{columns.get(m, m)}_se"
        if name not in out.columns:
            out[name] = np.nan
        out.loc[sel, name] = out.loc[sel, system_col].map(summ[f"{m}_se"]).to_numpy(dtype=np.float64)
    for c in ("vs", "diff", "ci_low", "ci_high", "verdict"):
        if c not in out.columns:
            out[c] = "" if c in ("vs", "verdict") else np.nan
    if comparison.best_baseline is not None:
        out.loc[sel, "vs"] = comparison.best_baseline
    for c in ("diff", "ci_low", "ci_high", "verdict"):
        vals = out.loc[sel, system_col].map(main_diff[c]) if len(main_diff) else pd.Series(np.nan, index=out.index[sel])
        if c == "verdict":
            vals = vals.astype(object).where(vals.notna(), "")
        out.loc[sel, c] = vals.to_numpy()
    return out
