"""One-class ("implicit") comparison: splits, recall@N and the evaluation table.

The comparison of the one-class systems of the seeds (SIBM of 002_5408d341cb9fc544.txt, the
random-graph model RG of 003_203f63200c0d7157.txt, the paired-symbol model PSM of
000_619a0297b9d686b2.txt, BPR-uniform, BPR-popularity and popularity) on binarized ratings, under
two protocols that share the `ImplicitSplit` type of `validation.data.datasets`:

- ``"P1"``: `validation.data.datasets.split_leave_one_out` (seeds 000 section 5, 003 section 6.1.2):
  all users with >= 2 positives (ratings >= 4), one positive held out per user;
- ``"SIBM"``: `split_sibm`, the protocol of 002_5408d341cb9fc544.txt section 4: ratings >= 4
  are ones, keep the 1000 columns with the most ones, discard rows with fewer than 10 ones,
  hold out one one per row;

and on market baskets (`load_implicit_data`: FIMI or named-item CSV files; baskets are the users)
under ``"baskets"``: `validation.data.splits.split_leave_one_item_out_baskets`, one item left out of
every basket with at least 2 distinct items (``evaluate_implicit(..., baskets=True)``).

Metrics (all with one held-out positive per row, candidates = the row's non-training items):

- recall@N of seed 002 section 4 (`recall_at`), which with one held-out item is the hit rate
  HR@N of `validation.evaluation.metrics.hit_rate_at` (and equals precision@N times N);
- rank score, 000_619a0297b9d686b2.txt eq. (12) / 003_203f63200c0d7157.txt eq. (20),
  averaged over users (000 fig. 2, 003 fig. 6 left) and over held-out items (003 fig. 6
  right: the mean rank score of each item's test rows, then the mean over items);
- NDCG@N (`validation.evaluation.metrics.ndcg_at`, pessimistic ties).

`evaluate_implicit` fits every system of a dict on every protocol's training matrix and returns
the table, per-user and by-degree tables, and (with ``out_dir``) PNG plots of the rank score by
user and by item degree on log axes and a Markdown report. For systems whose scores are like
probabilities (RG "like", at r = 1/2 and at the second r of `RG_DEFAULTS`) it adds the
classification error of the held-out edges by user degree (003 fig. 4).

Module layout: `split_sibm` and `recall_at` live in `validation.evaluation.implicit_protocols`, the recall
curves (`recall_curves`, `sibm_recall_curves`, `binary_split`, `sec4_synthetic`, `RecallCurves`,
`CURVE_DEFAULTS`, `CURVE_DATA`) in `validation.evaluation.recall_curves`; all are re-exported here.

`recall_curves` / `sibm_recall_curves` give seed 002 fig. 2 (top; recall@10 against the number of
entries sampled, for S-Uniform, S-Balanced and S-Biased) and fig. 3 (SIBM-auto against batch VB,
which touches I J entries per sweep) on the SIBM protocol and on the sec. 4 synthetic matrix
(`sec4_synthetic`, `binary_split`), as CSV, PNG and Markdown. `baseline_systems` gives the
"popularity", "ease" (EASE^R, `validation.evaluation.baselines`), "BPR-uniform" and "BPR-popularity"
entries; SIBM and RG systems are added to the same dict by their modules. Every table carries
standard errors over test users and paired bootstrap intervals against the better of popularity and
EASE^R (`validation.evaluation.intervals`; measured tables with intervals: docs/tour.md).

Large training matrices (issue 27: the basket evaluation of every system in under 15 minutes on 2
cores). Above `LARGE_CELLS` (5e6) training cells, `plan_systems` replaces batch SIBM VB (O(I J K) per
sweep) by SIBM SVI with S-Biased sub-sampling (row "SIBM SVI (batch VB skipped: I x J = ... > ...)"),
skips the other two SVI schemes (``evaluate_implicit(..., all_svi=True)`` runs them) and the solvers
stop on their own convergence (`LARGE_SETTINGS`); the table says per system whether the rule stopped
the fit (``converged``) and after how many ``iterations``, and with ``progress`` the run prints its plan
with an estimate of each fit's CPU seconds, then a line before and after every fit. T10I4D100K (8.7e7
cells) is large; MovieLens 100K and groceries (1.7e6) are not, and run as before.

Measured on MovieLens 100K (``u.data``), seed 0, `baseline_systems` defaults before BPR's held-out AUC
rule (K = 64, a fixed 100 epochs, i.e. ``validate_every=None`` now; float32; fit keys 0 / 1 / 2 for the
spread of BPR; the rule's numbers, before against after with paired intervals: docs/evaluation.md):

=========  ==============  =========  ========  ========  =======
protocol   system          recall@10  R users   R items   NDCG@10
=========  ==============  =========  ========  ========  =======
P1         popularity      0.118      0.869     0.801     0.064
P1         BPR-uniform     0.282      0.941     0.909     0.158
P1         BPR-popularity  0.207      0.897     0.884     0.113
SIBM       popularity      0.112      0.791     0.694     0.063
SIBM       BPR-uniform     0.264      0.909     0.870     0.148
SIBM       BPR-popularity  0.188      0.886     0.873     0.101
=========  ==============  =========  ========  ========  =======

P1 has 942 test users (I = 943, J = 1682); SIBM 893 rows (J = 1000). With fit keys 1 and 2,
P1 BPR-uniform gives R = 0.942 / 0.942, HR@10 = 0.300 / 0.285 and BPR-popularity R = 0.897 /
0.898, HR@10 = 0.212 / 0.211 (the binomial standard error of one HR@10 is ~0.015). For
reference, `implicit`'s BPR (64 factors, 100 epochs, its defaults) gives R = 0.890, HR@10 =
0.234 on P1 seed 0. Popularity reproduces the independent reference R = 0.869, HR@10 = 0.118.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence, Union

import numpy as np
import pandas as pd

from custom_inference import bpr
from custom_inference.data import Observations

from validation.checks import registry
from validation.data import datasets
from validation.evaluation import baselines, intervals, metrics
from validation.data.datasets import ImplicitSplit

__all__ = [
    "SystemFactory",
    "split_sibm",
    "recall_at",
    "ImplicitEvaluation",
    "evaluate_implicit",
    "load_implicit_data",
    "subsample_baskets",
    "RATING_PROTOCOLS",
    "BASKET_PROTOCOLS",
    "IMPLICIT_BASELINES",
    "baseline_systems",
    "BPR_DEFAULTS",
    "BPR_STOPPING",
    "model_systems",
    "plan_systems",
    "PlannedSystem",
    "LARGE_CELLS",
    "LARGE_SETTINGS",
    "SIBM_DEFAULTS",
    "RG_DEFAULTS",
    "ImplicitRun",
    "binary_split",
    "sec4_synthetic",
    "sibm_recall_curves",
    "recall_curves",
    "RecallCurves",
    "CURVE_DEFAULTS",
    "CURVE_DATA",
]

#: A system: ``factory(train, seed) -> score_fn``; fitting happens inside the call.
SystemFactory = Callable[[Observations, int], metrics.ScoreFn]


# ---------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------


@dataclass
class ImplicitEvaluation:
    """What `evaluate_implicit` returns.

    Parameters
    ----------
    table : pandas.DataFrame, one row per (protocol, system)
        ``protocol``, ``system``, ``recall@N`` (= HR@N), ``rank_score_users`` (mean over test
        rows), ``rank_score_items`` (mean over held-out items of their mean), ``ndcg@N``,
        ``fit_seconds`` (wall time of the system's fit, compilation included), ``fit_cpu_seconds`` (CPU
        time of the process during the fit, all threads: `time.process_time`), ``n_users``
        (test rows), ``n_items`` (distinct held-out items), ``I``, ``J``, ``like_error`` (seed 003
        fig. 4: share of held-out edges with p(g = 1 | h = 1) < 1/2; NaN unless the system's
        scores are like probabilities), ``setting`` (what a tuned system chose, e.g. EASE^R's lambda;
        or why a system was skipped: its metrics are then NaN), ``converged`` (True / False: whether the
        solver's own stopping rule ended the fit before its iteration cap; "" for systems without an
        iterative fit, "n/a" for a fixed count without a rule), ``iterations`` (sweeps, epochs or
        minibatches run, "" when not iterative), then the standard errors over test users
        ``recall@N_se``, ``rank_score_users_se``, ``ndcg@N_se`` and, against the protocol's best baseline
        ``vs`` (popularity or EASE^R, the better by recall@N), ``diff`` (recall@N, system - baseline),
        ``ci_low``, ``ci_high`` (95 % paired bootstrap interval over the same test users) and ``verdict``
        ("better" / "worse" only when the interval excludes 0, else "no difference").
    by_user_degree : pandas.DataFrame
        `validation.evaluation.metrics.by_degree` of the rank score by the user's training degree, with
        columns ``protocol``, ``system`` in front.
    by_item_degree : pandas.DataFrame
        The same by the held-out item's training degree (item means of the rank score).
    per_user : dict of (str, str) to pandas.DataFrame
        (protocol, system) -> the per-user table of `validation.evaluation.metrics.leave_one_out_metrics`
        (with ``like`` and ``like_error`` columns for like-probability systems).
    like_error_by_degree : pandas.DataFrame
        Seed 003 fig. 4: for the systems whose scores are like probabilities p(g = 1 | h = 1)
        (factories with ``scores_like_probability = True``: "RG like", "RG like (r=...)"), the
        classification error on the held-out edges (ground truth g = 1: an error when
        p(g = 1 | h = 1) < 1/2), by the user's training degree in log2 buckets
        (`validation.evaluation.metrics.by_degree`): ``protocol``, ``system``, ``bucket_low``,
        ``bucket_high``, ``n_users``, ``mean`` (the error rate), ``sem``, ``mean_like`` (mean
        p(g = 1 | h = 1) in the bucket). Empty when no such system ran.
    plots : dict of str to pathlib.Path, default {}
        The written PNG files (empty without ``out_dir``).
    report : pathlib.Path or None, default None
        The Markdown report (None without ``out_dir``).
    differences : pandas.DataFrame
        Per protocol, every system against the protocol's best baseline (popularity or EASE^R, by
        recall@N): ``protocol``, ``system``, ``baseline``, ``metric`` (recall@N, rank_score_users, ndcg@N),
        ``diff``, ``ci_low``, ``ci_high`` (95 % paired bootstrap over test users,
        `validation.evaluation.intervals.compare`), ``verdict``.
    tuning : dict of (str, str) to pandas.DataFrame, default {}
        (protocol, system) -> the validation curve of a system that chose a setting on its training
        matrix (EASE^R's lambda: `validation.evaluation.baselines.ease_system`).
    notes : list of str, default []
        How the intervals were made, and any system skipped (with the reason).

    Raises
    ------
    None on construction (a dataclass; the fields are not checked).

    Source: project addition (the tables of ``002_5408d341cb9fc544.txt`` sec. 4,
    ``000_619a0297b9d686b2.txt`` fig. 2 and ``003_203f63200c0d7157.txt`` figs. 4 and 6).
    """

    table: pd.DataFrame
    by_user_degree: pd.DataFrame
    by_item_degree: pd.DataFrame
    per_user: dict = field(repr=False)
    like_error_by_degree: pd.DataFrame = field(default_factory=pd.DataFrame)
    plots: dict = field(default_factory=dict)
    report: Path | None = None
    differences: pd.DataFrame = field(default_factory=pd.DataFrame)
    tuning: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


_SPLITTERS = {
    "P1": lambda df, seed: datasets.split_leave_one_out(df, seed=seed),
    "SIBM": lambda df, seed: split_sibm(df, seed=seed),
    "baskets": lambda df, seed: datasets.split_leave_one_item_out_baskets(df, seed=seed),
}

#: the protocols of ratings tables (the default of `evaluate_implicit`) and of basket tables
#: (``baskets=True``): P1 and SIBM binarize ratings >= 4, which basket tables (rating 1.0) do not have
RATING_PROTOCOLS = ("P1", "SIBM")
BASKET_PROTOCOLS = ("baskets",)
#: the baselines of every one-class table; the better of them by recall@N is the one every system is
#: compared with (`validation.evaluation.intervals.compare`)
IMPLICIT_BASELINES = ("popularity", "ease")


def _item_means(pu: pd.DataFrame, train: Observations) -> pd.DataFrame:
    item_degree = np.bincount(np.asarray(train.cols), minlength=train.n_cols)
    g = pu.groupby("item", sort=True)["rank_score"].mean()
    return pd.DataFrame(
        {"item": g.index.to_numpy(), "rank_score": g.to_numpy(), "degree": item_degree[g.index.to_numpy()]}
    )


#: Above this many training cells (I x J) a matrix is "large" (`plan_systems`, `LARGE_SETTINGS`). Batch SIBM VB
#: touches all I J cells per sweep (O(I J K)); on T10I4D100K (100,000 x 870 = 8.7e7 cells) its fit took
#: 3,100 s wall (~3.6e-5 s per cell, shared 2-core machine), so 5e6 cells bound it to ~180 s, an eighth of
#: the 15-minute budget of issue 27 for every system; MovieLens 100K (P1 1.6e6, SIBM 0.9e6) and groceries
#: (9,835 x 169 = 1.7e6) stay below and keep batch VB and the three SVI schemes.
LARGE_CELLS = 5_000_000
#: Settings on a large training matrix (issue 27: every system of the basket evaluation in under 15
#: minutes on 2 cores). ``svi_strategy``: the one SIBM SVI scheme run there, S-Biased, the best of the three
#: by recall@10 on groceries (seed 0, 2,000 minibatches: S-Biased 0.3786 / rank score 0.8299, S-Balanced
#: 0.3785 / 0.8305, S-Uniform 0.3775 / 0.8305; all within one standard error, ~0.006, of each other);
#: the rest are stopping rules on each solver's own target (relative change): SIBM SVI, the full ELBO
#: every ``svi_elbo_every`` minibatches, below ``svi_tol``; RG, the ELBO on the evaluation graph per
#: Robbins-Monro sweep below ``rg_tol`` after ``rg_warm_start`` fixed-graph sweeps (at most
#: ``rg_max_iter``); PSM, the ELBO per sweep below ``psm_tol``. The tolerances were set from the traces on
#: T10I4D100K (seed 0: SVI's ELBO moves 7 %, 3 %, 1.7 % per 128 minibatches; RG's 0.7 %, 0.4 %, 0.3 % per
#: sweep; PSM's 1e-4 per sweep after 3 sweeps). BPR stops on held-out positives everywhere (`BPR_STOPPING`):
#: the former rule here, a windowed relative change of the training ln sigma, never stopped in 100 epochs on
#: T10I4D100K (an item-bias plateau at epochs 1-5, then 2-6 % per epoch against 0.08 % sampling noise; commit
#: 8c96bef) and was removed.
#: ``map_iter``: SIBM MAP's minibatches there (`custom_inference.sibm.fit_map` has no stopping rule: a fixed
#: count, half the small-matrix one). Measured on T10I4D100K (seed 0; popularity 0.0622 / 0.7485):
#: SVI svi_tol 5e-3 stopped at 1,600 minibatches (recall@10 0.0606, rank score 0.7450), 1e-2 at 1,000
#: (0.0597 / 0.7433, 143 CPU s); MAP 2,000 minibatches 0.0511 / 0.7156 (~185 CPU s), 1,000 0.0486 /
#: 0.7090 (93 CPU s): a drop beyond the interval, below popularity either way. ``map_tau``: MAP's
#: Robbins-Monro delay there (issue 27): a row is drawn ~0.1 times per minibatch, so its first steps are
#: one-cell gradients with rho ~ 1, and with tau = 1 the log joint fell (first 30,000 baskets: -1.65e6 to
#: -4.25e6 in 225 minibatches, all in the U block); tau = 100 (first rho 0.04) raises it monotonically
#: (-1.62e6 to -1.47e6 in 300). Full file, 1,000 minibatches, tau 100: 0.0486 / 0.7090 (111 CPU s), the
#: same as tau 1: the ranking stays below popularity's either way.
LARGE_SETTINGS = {"svi_strategy": "biased", "svi_elbo_every": 200, "svi_tol": 1e-2, "rg_warm_start": 10,
                  "rg_max_iter": 40, "rg_tol": 1e-3, "psm_tol": 1e-4,
                  "map_iter": 1000, "map_tau": 100.0}


def _is_large(train: Observations, large_cells: int | None) -> bool:
    return large_cells is not None and int(train.n_rows) * int(train.n_cols) > int(large_cells)


@dataclass(frozen=True)
class PlannedSystem:
    """One row of a protocol's plan (`plan_systems`); frozen.

    Parameters
    ----------
    name : str
        The table's system name (a replacement's own, e.g. "SIBM SVI (batch VB skipped: ...)").
    factory : SystemFactory or None
        The factory to run; None: not run, ``reason`` says why.
    reason : str, default ""
        Why the system is not run ("" when it runs).
    estimate : float or None, default None
        CPU seconds of the fit at its iteration cap (the factory's ``estimate(train)``), or None where
        unknown.

    Raises
    ------
    None on construction.

    Source: project addition (issue 27).
    """

    name: str
    factory: SystemFactory | None
    reason: str = ""
    estimate: float | None = None


def plan_systems(systems: Mapping[str, SystemFactory], train: Observations, *, all_svi: bool = False) -> list[PlannedSystem]:
    """Which systems `evaluate_implicit` fits on one training matrix, in the order of ``systems``.

    The rules read attributes that `model_systems` puts on its factories (any other factory runs as is):

    - ``sibm_batch`` (batch SIBM VB) with I x J > the factory's ``large_cells``: replaced by its
      ``large_replacement`` (SIBM SVI with `LARGE_SETTINGS` ``"svi_strategy"``), in a row named
      ``"SIBM SVI (batch VB skipped: I x J = ... > ...)"``;
    - ``svi_strategy`` (SIBM S-Uniform / S-Balanced / S-Biased) with I x J > ``large_cells`` and not
      ``all_svi``: the scheme of `LARGE_SETTINGS` is not run again when the batch row already runs it
      (row kept, the reason names that row), the other schemes are skipped (reason: how to run them),
      unless no other SIBM batch or SVI system is in ``systems`` (then it runs).

    Parameters
    ----------
    systems : mapping of str to SystemFactory
        Name -> factory, in the order to run.
    train : custom_inference.data.Observations
        The protocol's training matrix, shape (I, J) (its shape is read here, and by the factories'
        ``estimate``).
    all_svi : bool, default False
        Run every SVI scheme on large matrices too.

    Returns
    -------
    list of PlannedSystem
        One per system, in order; ``estimate`` from the factory's ``estimate(train)`` if any.

    Raises
    ------
    ValueError
        Not of its own: when a factory's ``estimate`` raises it (a malformed matrix).

    Source: project addition (issue 27 target: the basket evaluation of every system in under 15 minutes).
    """
    I, J = int(train.n_rows), int(train.n_cols)
    cells = I * J
    sibm_names = [n for n, f in systems.items() if getattr(f, "sibm_batch", False) or getattr(f, "svi_strategy", None)]
    plan = []
    for name, f in systems.items():
        lc = getattr(f, "large_cells", None)
        large = lc is not None and cells > int(lc)
        if large and getattr(f, "sibm_batch", False) and getattr(f, "large_replacement", None) is not None:
            f, name = f.large_replacement, f"SIBM SVI (batch VB skipped: I x J = {cells:,} > {int(lc):,})"
        elif large and getattr(f, "svi_strategy", None) and not all_svi and len(sibm_names) > 1:
            chosen = LARGE_SETTINGS["svi_strategy"]
            batch = [n for n in sibm_names if getattr(systems[n], "sibm_batch", False)]
            if f.svi_strategy == chosen and not batch:
                pass  # the only SVI row of the large matrix
            elif f.svi_strategy == chosen:
                plan.append(PlannedSystem(name, None, f"run as the 'SIBM SVI' row (I x J = {cells:,} > {int(lc):,})"))
                continue
            else:
                plan.append(PlannedSystem(name, None, f"not run: I x J = {cells:,} > {int(lc):,}, where only "
                                                      f"S-{chosen.capitalize()} runs (all_svi=True runs all three)"))
                continue
        est = getattr(f, "estimate", None)
        plan.append(PlannedSystem(name, f, "", None if est is None else float(est(train))))
    return plan


def _print_plan(pname: str, train: Observations, plan: list) -> None:
    known = [p.estimate for p in plan if p.factory is not None and p.estimate is not None]
    unknown = [p.name for p in plan if p.factory is not None and p.estimate is None]
    print(f"[implicit_eval] {pname}: I x J = {train.n_rows:,} x {train.n_cols:,}, {len(plan)} systems; fit "
          f"estimate {sum(known):.0f} CPU s at most for {len(known)} of them (unknown: {', '.join(unknown) or 'none'}; "
          f"CPU rates of T10I4D100K on 2 cores, stated by each system, `implicit_eval._estimator`)", flush=True)
    for p in plan:
        if p.factory is None:
            print(f"[implicit_eval]   {p.name}: {p.reason}", flush=True)
        elif p.estimate is not None:
            print(f"[implicit_eval]   {p.name}: ~{p.estimate:.0f} CPU s at most", flush=True)


def _run_text(run: Mapping) -> str:
    if not run:
        return ""
    c = run.get("converged")
    state = "converged" if c is True else ("NOT converged" if c is False else "fixed count")
    return f" ({state}, {run.get('iterations')} {run.get('unit', 'iterations')})"


def _fit_info(res, unit: str) -> dict:
    """``converged`` / ``iterations`` / ``unit`` of a fit, for a score function's ``fit_info``.

    Reads the run attrs `custom_inference.vi_driver.fit` writes on the result's groups (tol, converged,
    n_iter; ``posterior`` and ``vi_trace`` over the InferenceData's own).

    Parameters
    ----------
    res : custom_inference.base.FitResult
        The fit (its ``idata`` and ``trace`` are read).
    unit : str
        What an iteration is ("sweeps", "epochs", "minibatches").

    Returns
    -------
    dict
        ``converged``: bool when the fit had a stopping rule (tol > 0, or PSM's ``converged`` attr without
        tol), else "n/a"; ``iterations``: int (``n_iter``, else the trace's length); ``unit``: ``unit``.

    Raises
    ------
    None of its own (AttributeError for a ``res`` without ``idata``).

    Source: project addition (issue 27).
    """
    attrs = dict(res.idata.attrs)
    for group in ("posterior", "vi_trace"):
        if hasattr(res.idata, group):
            attrs = {**attrs, **dict(getattr(res.idata, group).attrs)}
    tol = float(attrs.get("tol", 0.0) or 0.0)
    has_rule = tol > 0 or ("tol" not in attrs and "converged" in attrs)  # PSM's attrs carry converged, not tol
    converged = bool(attrs.get("converged", False)) if has_rule else "n/a"
    return {"converged": converged, "iterations": int(attrs.get("n_iter", len(res.trace))), "unit": unit}


def _estimator(rate: float, per: str, iterations: Callable[[Observations], int]):
    """A fit-time estimator: ``estimate(train)`` = rate x work x iteration cap, in CPU seconds.

    Each system states its ``rate``, measured on T10I4D100K (100,000 x 870, 910,356 training positives; 2
    shared cores, seed 0, compilation included).

    Parameters
    ----------
    rate : float
        CPU seconds per unit of work.
    per : {"positive", "row+col"}
        The unit of work: "positive" (per training positive and epoch / sweep: BPR, PSM, RG); anything
        else counts (I + J) per minibatch (SIBM SVI and MAP: "row+col").
    iterations : callable
        ``iterations(train) -> int``: the iteration cap on ``train``.

    Returns
    -------
    callable
        ``estimate(train: Observations) -> float`` CPU seconds.

    Raises
    ------
    None of its own.

    Source: project addition (issue 27).
    """
    def estimate(train: Observations) -> float:
        work = np.asarray(train.rows).size if per == "positive" else train.n_rows + train.n_cols
        return rate * work * iterations(train)

    return estimate


def evaluate_implicit(
    df,
    systems: Mapping[str, SystemFactory],
    protocols: Union[Sequence[str], Mapping[str, ImplicitSplit], None] = None,
    seed: int = 0,
    *,
    baskets: bool = False,
    n: int = 10,
    n_buckets: int | None = None,
    batch_size: int = 256,
    out_dir=None,
    progress: bool = False,
    all_svi: bool = False,
) -> ImplicitEvaluation:
    """Fit every system on every protocol's training matrix and evaluate the held-out items.

    Which systems run on a protocol is `plan_systems` (batch SIBM replaced by its SVI above
    ``large_cells``, one SVI scheme there); the skipped ones keep a row with the reason in ``setting``.

    Parameters
    ----------
    df : pandas.DataFrame or None
        Ratings table (`validation.data.datasets.load_movielens`) or basket table
        (`load_implicit_data`); None when ``protocols`` is a mapping of ready splits.
    systems : mapping of str to SystemFactory
        Name -> ``factory(train: Observations, seed: int) -> score_fn``: ``factory`` fits on ``train``
        (binary, I x J) and returns a score function ``(B,) int users -> (B, J)`` float scores; its wall
        time is ``fit_seconds``.
    protocols : sequence of str or mapping of str to ImplicitSplit, optional
        Names among ``"P1"`` (`validation.data.datasets.split_leave_one_out`), ``"SIBM"`` (`split_sibm`)
        and ``"baskets"`` (`validation.data.splits.split_leave_one_item_out_baskets`: one item left out of
        every basket with >= 2 distinct items), split with ``seed``; or a dict name -> `ImplicitSplit`.
        None: `RATING_PROTOCOLS` ("P1", "SIBM"), or `BASKET_PROTOCOLS` ("baskets",) with ``baskets=True``.
    seed : int, default 0
        Seeds the splits and is passed to every factory.
    baskets : bool, default False
        The table holds market baskets (`load_implicit_data`'s third value): baskets are the users, their
        items the positives; only the "baskets" protocol applies (P1 and SIBM binarize ratings >= 4).
    n : int >= 1, default 10
        Cut-off N of recall@N and NDCG@N.
    n_buckets : int, optional
        As `validation.evaluation.metrics.by_degree` (None: one bucket per octave).
    batch_size : int >= 1, default 256
        Users per score-function call.
    out_dir : str or path-like, optional
        Writes ``rank_by_user_degree.png``, ``rank_by_item_degree.png`` (and
        ``like_error_by_user_degree.png`` with like-probability systems) and ``report.md`` there.
    progress : bool, default False
        Print the plan of every protocol (which systems run, with an estimate of their fit time where
        `model_systems` / `baseline_systems` know one), a line before and one after every fit.
    all_svi : bool, default False
        On a training matrix above its factories' ``large_cells`` (`LARGE_CELLS`), run all three SIBM SVI
        sub-sampling schemes, not only `LARGE_SETTINGS` ``"svi_strategy"`` (`plan_systems`).

    Returns
    -------
    ImplicitEvaluation
        The table, per-user, by-degree, like-error and difference tables, tuning curves, notes, and the
        written files.

    Raises
    ------
    ValueError
        No system; a system that is not callable; a split of ``protocols`` that is not an ImplicitSplit;
        an unknown protocol name; "P1" or "SIBM" with ``baskets=True``; a system marked
        ``scores_like_probability`` whose held-out scores leave [0, 1]; and what the splits and metrics
        raise. Errors of a system's fit or score function propagate, except
        `validation.evaluation.baselines.SkippedSystem` (the row keeps the reason in ``setting``, NaN
        metrics).
    OSError
        ``out_dir`` cannot be written.

    Source: project addition (the comparison harness) computing recall@N of
    ``002_5408d341cb9fc544.txt`` sec. 4, the rank score of ``000_619a0297b9d686b2.txt`` eq. (12) /
    ``003_203f63200c0d7157.txt`` eq. (20) (by user: 000 fig. 2, 003 fig. 6 left; by item: 003 fig. 6
    right) and the like classification error of 003 fig. 4; NDCG@N is a project addition.
    """
    if protocols is None:
        protocols = BASKET_PROTOCOLS if baskets else RATING_PROTOCOLS
    if not systems:
        raise ValueError("systems: no system to evaluate")
    for name, f in systems.items():
        if not callable(f):
            raise ValueError(f"systems[{name!r}] must be callable (train, seed) -> score_fn")
    if isinstance(protocols, Mapping):
        splits = dict(protocols)
        for name, s in splits.items():
            if not isinstance(s, ImplicitSplit):
                raise ValueError(f"protocols[{name!r}] must be an ImplicitSplit, got {type(s).__name__}")
    else:
        unknown = [p for p in protocols if p not in _SPLITTERS]
        if unknown:
            raise ValueError(f"protocols: unknown {unknown}; known: {sorted(_SPLITTERS)} (or pass a dict of splits)")
        rating_only = [p for p in protocols if p in RATING_PROTOCOLS]
        if baskets and rating_only:
            raise ValueError(f"protocols {rating_only} need ratings (they binarize ratings >= 4); basket data "
                             f"uses {list(BASKET_PROTOCOLS)} (leave one item out of every basket of >= 2 items)")
        splits = {p: _SPLITTERS[p](df, seed) for p in protocols}
    if not splits:
        raise ValueError("protocols: none given")
    rows, per_user, by_user, by_item, like_err = [], {}, [], [], []
    tuning, notes, diffs = {}, [], []
    table_cols = {"hit": f"recall@{n}", "rank_score": "rank_score_users", "ndcg": f"ndcg@{n}"}
    for pname, split in splits.items():
        plan = plan_systems(systems, split.train, all_svi=all_svi)
        if progress:
            _print_plan(pname, split.train, plan)
        for k, planned in enumerate(plan, 1):
            sname, factory = planned.name, planned.factory
            if factory is None:
                notes.append(f"{pname} {sname}: {planned.reason}")
                rows.append({"protocol": pname, "system": sname, "n_users": 0, "n_items": 0, "I": split.n_users,
                             "J": split.n_items, "setting": planned.reason})
                continue
            if progress:
                est = "" if planned.estimate is None else f", estimate {planned.estimate:.0f} CPU s at most"
                print(f"[implicit_eval] {pname} {sname} ({k}/{len(plan)}): fitting{est} ...", flush=True)
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                score_fn = factory(split.train, seed)
            except baselines.SkippedSystem as e:
                notes.append(f"{pname} {sname}: {e}")
                rows.append({"protocol": pname, "system": sname, "n_users": 0, "n_items": 0, "I": split.n_users,
                             "J": split.n_items, "setting": str(e)})
                if progress:
                    print(f"[implicit_eval] {pname} {sname}: {e}", flush=True)
                continue
            secs, cpu = time.perf_counter() - t0, time.process_time() - c0
            run = getattr(score_fn, "fit_info", None) or {}
            if getattr(score_fn, "tuning", None) is not None:
                tuning[(pname, sname)] = score_fn.tuning
            pu = metrics.leave_one_out_metrics(score_fn, split, n=n, batch_size=batch_size)
            like_error = np.nan
            if getattr(factory, "scores_like_probability", False):
                pu = _with_like_error(pu, score_fn, batch_size)
                like_error = float(pu["like_error"].mean())
                b = metrics.by_degree(pu, "like_error", n_buckets=n_buckets)
                b["mean_like"] = metrics.by_degree(pu, "like", n_buckets=n_buckets)["mean"].to_numpy()
                b.insert(0, "system", sname)
                b.insert(0, "protocol", pname)
                like_err.append(b)
            per_user[(pname, sname)] = pu
            items = _item_means(pu, split.train)
            rows.append(
                {
                    "protocol": pname,
                    "system": sname,
                    f"recall@{n}": float(pu["hit"].mean()),
                    "rank_score_users": float(pu["rank_score"].mean()),
                    "rank_score_items": float(items["rank_score"].mean()),
                    f"ndcg@{n}": float(pu["ndcg"].mean()),
                    "fit_seconds": secs,
                    "fit_cpu_seconds": cpu,
                    "n_users": int(len(pu)),
                    "n_items": int(len(items)),
                    "I": split.n_users,
                    "J": split.n_items,
                    "like_error": like_error,
                    "setting": getattr(score_fn, "setting", ""),
                    "converged": run.get("converged", ""),
                    "iterations": run.get("iterations", ""),
                }
            )
            for acc, table in ((by_user, pu), (by_item, items)):
                b = metrics.by_degree(table, "rank_score", n_buckets=n_buckets)
                b.insert(0, "system", sname)
                b.insert(0, "protocol", pname)
                acc.append(b)
            if progress:
                r = rows[-1]
                print(
                    f"[implicit_eval] {pname} {sname}: recall@{n}={r[f'recall@{n}']:.4f} "
                    f"R={r['rank_score_users']:.4f} fit {secs:.1f}s wall, {cpu:.1f} CPU s{_run_text(run)}",
                    flush=True,
                )
    table = pd.DataFrame(rows)
    for col in ("setting", "converged", "iterations"):
        table[col] = table[col].fillna("") if col in table else ""
    for pname in splits:
        done = {s: pu for (p, s), pu in per_user.items() if p == pname}  # the planned rows (replacements too)
        if not done:
            continue
        comp = intervals.compare(done, list(table_cols), main="hit", baselines=IMPLICIT_BASELINES)
        table = intervals.annotate(table, comp, table_cols, where={"protocol": pname})
        d = comp.differences.assign(metric=comp.differences["metric"].map(table_cols))
        d.insert(0, "protocol", pname)
        diffs.append(d)
        notes.append(f"{pname}: {comp.note(f'recall@{n}')}; diff / ci_low / ci_high / verdict: recall@{n}")
    differences = pd.concat(diffs, ignore_index=True) if diffs else pd.DataFrame()
    result = ImplicitEvaluation(
        table=table,
        by_user_degree=pd.concat(by_user, ignore_index=True) if by_user else pd.DataFrame(),
        by_item_degree=pd.concat(by_item, ignore_index=True) if by_item else pd.DataFrame(),
        per_user=per_user,
        like_error_by_degree=pd.concat(like_err, ignore_index=True) if like_err else pd.DataFrame(
            columns=["protocol", "system", "bucket_low", "bucket_high", "n_users", "mean", "sem", "mean_like"]),
        differences=differences,
        tuning=tuning,
        notes=notes,
    )
    if out_dir is not None:
        _write(result, Path(out_dir), n)
    return result


def _with_like_error(pu: pd.DataFrame, score_fn: metrics.ScoreFn, batch_size: int) -> pd.DataFrame:
    """Add ``like`` (the score of the held-out item: p(g = 1 | h = 1)) and ``like_error``
    (1.0 if like < 1/2: the held-out edge, truly liked, is classified g = 0) to a per-user table.
    Seed 003 sec. 6.1.1 and fig. 4."""
    users = pu["user"].to_numpy()
    items = pu["item"].to_numpy()
    like = np.empty(users.size)
    for start in range(0, users.size, batch_size):
        bu, bi = users[start:start + batch_size], items[start:start + batch_size]
        like[start:start + bu.size] = np.asarray(score_fn(bu), np.float64)[np.arange(bu.size), bi]
    if np.any((like < 0) | (like > 1)):
        raise ValueError("score_fn: a system marked scores_like_probability returned scores outside [0, 1]")
    out = pu.copy()
    out["like"] = like
    out["like_error"] = (like < 0.5).astype(np.float64)
    out.attrs.update(pu.attrs)
    return out


def _plot_like_error(buckets: pd.DataFrame, path: Path) -> Path:
    return _plot_by_degree(buckets, "user's training degree (log2 buckets)", path,
                           ylabel="classification error on held-out edges",
                           title="{p}: p(g = 1 | h = 1) < 1/2 (003 fig. 4)", ylim_zero=True)


def _plot_by_degree(buckets: pd.DataFrame, xlabel: str, path: Path, *,
                    ylabel: str = "mean rank score (000 eq. 12 / 003 eq. 20)", title: str = "{p}",
                    ylim_zero: bool = False) -> Path:
    """One panel per protocol: the bucket means (with their s.e.m.) of every system against the
    geometric bucket centre ([0, 1) at 0.7), log x axis. ``title`` is formatted with ``p``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protocols = list(dict.fromkeys(buckets["protocol"]))
    fig, axes = plt.subplots(1, len(protocols), figsize=(5.2 * len(protocols), 3.8), squeeze=False)
    for ax, p in zip(axes[0], protocols):
        sub = buckets[buckets["protocol"] == p]
        for s in dict.fromkeys(sub["system"]):
            b = sub[sub["system"] == s]
            low = b["bucket_low"].to_numpy(dtype=float)
            high = b["bucket_high"].to_numpy(dtype=float)
            x = np.sqrt(np.maximum(low, 0.5) * high)
            ax.errorbar(x, b["mean"], yerr=b["sem"].fillna(0.0), marker="o", ms=3, capsize=2, label=s)
        ax.set_xscale("log")
        if ylim_zero:
            ax.set_ylim(0, None)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title.format(p=p) + " (bars: 1 s.e.m. of the bucket mean)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tuning_lines(tuning: dict) -> list[str]:
    """Markdown sections of the validation curves (EASE^R's lambda), one per (protocol, system)."""
    from validation.checks.report import markdown_table

    lines = []
    for (p, s), t in tuning.items():
        lines += [f"## {p} {s}: setting chosen on a validation split of the training matrix", "", markdown_table(t), ""]
    return lines


def _write(result: ImplicitEvaluation, out: Path, n: int) -> None:
    from validation.checks.report import markdown_table

    out.mkdir(parents=True, exist_ok=True)
    result.plots["user_degree"] = _plot_by_degree(
        result.by_user_degree, "user's training degree (log2 buckets)", out / "rank_by_user_degree.png"
    )
    result.plots["item_degree"] = _plot_by_degree(
        result.by_item_degree, "held-out item's training degree (log2 buckets)", out / "rank_by_item_degree.png"
    )
    lines = [
        "# One-class comparison",
        "",
        f"recall@{n} (seed 002 sec. 4, = HR@{n}), rank score (000 eq. 12 / 003 eq. 20) averaged over "
        f"test users and over held-out items, NDCG@{n}; fit time in seconds (compilation included).",
        "",
        markdown_table(result.table),
        "",
        *[f"- {line}" for line in result.notes],
        "",
        "## Differences against the best baseline (paired bootstrap over test users)",
        "",
        markdown_table(result.differences) if len(result.differences) else "(no system evaluated)",
        "",
        *_tuning_lines(result.tuning),
        "## Rank score by user degree",
        "",
        "![rank by user degree](rank_by_user_degree.png)",
        "",
        markdown_table(result.by_user_degree),
        "",
        "## Rank score by held-out item degree",
        "",
        "![rank by item degree](rank_by_item_degree.png)",
        "",
        markdown_table(result.by_item_degree),
        "",
    ]
    if len(result.like_error_by_degree):
        result.plots["like_error"] = _plot_like_error(result.like_error_by_degree, out / "like_error_by_user_degree.png")
        lines += [
            "## Like classification error by user degree (003 fig. 4)",
            "",
            "Held-out edges are liked (g = 1); an error is p(g = 1 | h = 1) < 1/2 (eq. 19). `mean` is the error "
            "rate, `mean_like` the mean predicted like probability.",
            "",
            "![like error by user degree](like_error_by_user_degree.png)",
            "",
            markdown_table(result.like_error_by_degree),
            "",
        ]
    result.report = out / "report.md"
    result.report.write_text("\n".join(lines))


# ---------------------------------------------------------------------------
# data: ratings or baskets
# ---------------------------------------------------------------------------

_BASKET_FORMATS = ("fimi", "basket-csv")


def load_implicit_data(data: str, format: str = "auto", *, max_baskets: int | None = None,
                       seed: int = 0, **column_options) -> tuple[pd.DataFrame, str, bool]:
    """The table `evaluate_implicit` takes, from the CLI's ``--data`` / ``--format``.

    Parameters
    ----------
    data : str
        ``"ml-100k"`` (`validation.data.datasets.find_movielens_100k`: ``FACTORBAYES_DATA_DIR``, the shared
        data beside the checkout, the user cache, then a download) or a path: a MovieLens file or
        directory, a FIMI basket file (``*.dat``, one basket of space-separated integer item ids a line), a
        named-item basket CSV, or any format of `validation.data.loaders.load`.
    format : {"auto", "movielens", "csv", "fimi", "basket-csv"}, default "auto"
        One of `validation.data.loaders.FORMATS`; "auto" detects it (`validation.data.loaders.load`; an
        ambiguous file raises, naming the flag). ``"ml-100k"`` takes "auto" or "movielens" only.
    max_baskets : int >= 1, optional
        Keep a uniformly random subset of this many baskets (`subsample_baskets`) when the file has more
        (for bounded run times on T10I4D100K); ignored for ratings.
    seed : int, default 0
        Seeds that subsample.
    **column_options
        For delimited files (``format="csv"``, or "auto" with any of them given: then the file is read as
        csv): ``user_col``, ``item_col``, ``value_col``, ``timestamp_col``, ``sep``, ``header`` of
        `validation.data.loaders.load_delimited` (CLI ``--user-col`` ...); None values are dropped.

    Returns
    -------
    table : pandas.DataFrame
        The canonical ratings table (`validation.data.loaders`: columns user, item, rating, timestamp;
        baskets: one row per distinct (basket, item) pair, rating 1.0).
    label : str
        For reports: the path, with the subsample if any.
    is_baskets : bool
        Whether the table holds baskets (then pass ``baskets=True`` to `evaluate_implicit`).

    Raises
    ------
    FileNotFoundError
        A missing path.
    ValueError
        An unknown or inapplicable format, a bad ``max_baskets``, column options with ``ml-100k``, and
        whatever the loader raises for a malformed file or an ambiguous format.
    RuntimeError
        Not of its own: ``"ml-100k"`` not found and its download failed
        (`validation.data.datasets.find_movielens_100k`).

    Source: project addition (issue 12: ``--data PATH [--format fimi|basket-csv]``).
    """
    from validation.data import loaders

    if format not in loaders.FORMATS:
        raise ValueError(f"format must be one of {list(loaders.FORMATS)}, got {format!r}")
    if max_baskets is not None and (isinstance(max_baskets, bool) or int(max_baskets) != max_baskets
                                    or max_baskets < 1):
        raise ValueError(f"max_baskets must be a positive integer or None, got {max_baskets!r}")
    column_options = {k: v for k, v in column_options.items() if v is not None}
    if data == "ml-100k":
        if column_options:
            raise ValueError(f"--data ml-100k is MovieLens ratings; column options {sorted(column_options)} do not apply")
        if format not in ("auto", "movielens"):
            raise ValueError(f"--data ml-100k is MovieLens ratings; format {format!r} does not apply")
        path = datasets.find_movielens_100k()
        return datasets.load_movielens(path), str(path), False
    path = Path(data).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"--data {data}: no such file or directory (use 'ml-100k', a MovieLens path or a "
                                f"basket file)")
    kind = format
    if format == "auto":  # the detection `loaders.load` itself runs (raises when ambiguous)
        kind = "csv" if column_options else loaders._detect_format(path)
    table = loaders.load(path, format=kind, **column_options)
    is_baskets = kind in _BASKET_FORMATS
    label = str(path)
    if is_baskets and max_baskets is not None:
        table, label = subsample_baskets(table, max_baskets, seed, label)
    return table, label, is_baskets


def subsample_baskets(table: pd.DataFrame, max_baskets: int, seed: int = 0, label: str = "") -> tuple[pd.DataFrame, str]:
    """A uniformly random subset of ``max_baskets`` baskets of a basket table (all rows of each kept basket).

    Parameters
    ----------
    table : pandas.DataFrame
        Canonical basket table (N rows; ``user`` = basket id).
    max_baskets : int >= 1
        How many baskets to keep.
    seed : int, default 0
        ``numpy.random.default_rng(seed).choice`` of basket positions (in increasing id order) without
        replacement; the kept baskets stay in id order.
    label : str, default ""
        Text to which the subsample's description is appended.

    Returns
    -------
    table : pandas.DataFrame
        The kept baskets' rows (index reset); ``table`` itself when it has at most ``max_baskets``
        baskets.
    label : str
        ``label`` with "(random M of B baskets, seed S)" appended (unchanged when nothing is dropped).

    Raises
    ------
    ValueError
        ``max_baskets`` is not a positive integer.
    KeyError
        ``table`` has no ``user`` column.

    Source: project addition.
    """
    if isinstance(max_baskets, bool) or int(max_baskets) != max_baskets or max_baskets < 1:
        raise ValueError(f"max_baskets must be a positive integer or None, got {max_baskets!r}")
    ids = np.unique(table["user"].to_numpy())
    if ids.size <= max_baskets:
        return table, label
    keep = np.sort(np.random.default_rng(seed).choice(ids.size, size=int(max_baskets), replace=False))
    table = table[table["user"].isin(ids[keep])].reset_index(drop=True)
    return table, f"{label} (random {int(max_baskets)} of {ids.size} baskets, seed {seed})"


# ---------------------------------------------------------------------------
# baselines
# ---------------------------------------------------------------------------

#: BPR settings of `baseline_systems`, per negative-sampling scheme. K = 64 and 100 epochs of
#: minibatches of 256 triples (about 0.07 s per epoch on MovieLens 100K, 2 CPU cores); the
#: learning rate and L2 constant were chosen on a validation split carved from the P1 training
#: data of MovieLens 100K (one more positive held out per user, seed 1), never on test items,
#: from lr in {0.02, 0.05, 0.1} x reg in {0.001, 0.01, 0.03, 0.05, 0.1} x {50, 100} epochs
#: (not a full grid). Validation rank score / HR@10: BPR-uniform 0.932 / 0.265 at
#: (0.02, 0.01); BPR-popularity 0.887 / 0.18 at (0.02, 0.03) (0.01 gave 0.859 / 0.149).
BPR_DEFAULTS = {
    "uniform": dict(n_factors=64, n_epochs=100, learning_rate=0.02, reg=0.01, batch_size=256, max_tries=16),
    "popularity": dict(n_factors=64, n_epochs=100, learning_rate=0.02, reg=0.03, batch_size=256, max_tries=16),
}

#: BPR's stopping rule in `baseline_systems` (`custom_inference.bpr.fit` ``validate_every`` / ``patience``; 2,000
#: validation users, 100 sampled negatives each): a check every 5 epochs, stop after ``patience`` checks
#: without a paired AUC gain beyond one standard error. Above `LARGE_CELLS` patience 3 (issue 27's budget);
#: below, where an epoch costs ~0.07 s and the validation set is small (at most the ~900 users of MovieLens
#: 100K, so its standard error is ~1.5x that of 2,000 users and a noise-level check is likelier), patience 5:
#: a plateau must last 25 epochs before the fit stops (measured numbers: docs/evaluation.md).
BPR_STOPPING = {
    "large": dict(validate_every=5, patience=3),
    "small": dict(validate_every=5, patience=5),
}


def baseline_systems(*, large_cells: int | None = LARGE_CELLS, **bpr_kwargs) -> dict[str, SystemFactory]:
    """The "popularity", "ease", "BPR-uniform" and "BPR-popularity" systems of the comparison.

    - ``"popularity"``: `validation.evaluation.metrics.popularity_score_fn` (the item's number of training
      positives; 000 section 5, 003 section 6.1.2).
    - ``"ease"``: EASE^R (Steck 2019), `validation.evaluation.baselines.ease_system`: lambda chosen by
      validation HR@10 on one training positive per user held out of the training matrix, then refitted
      on all of it; skipped (`validation.evaluation.baselines.SkippedSystem`) above
      `validation.evaluation.baselines.EASE_MAX_ITEMS` items.
    - ``"BPR-uniform"`` / ``"BPR-popularity"``: `custom_inference.bpr.fit` with
      ``sampling="uniform"`` / ``"popularity"``, key ``jax.random.key(seed)``, float32, and the
      settings of `BPR_DEFAULTS` (K = 64, 100 epochs, learning rate 0.02, L2 on factors and
      item biases 0.01 for uniform and 0.03 for popularity sampling, minibatches of 256
      triples, at most 16 negative draws), any of which ``bpr_kwargs`` overrides for both. The epochs stop
      on held-out positives (`custom_inference.bpr.fit` with ``validate_every``; `BPR_STOPPING`: every 5
      epochs, patience 3 above ``large_cells`` training cells (`LARGE_CELLS`; None: never large), every
      5 epochs, patience 5 below; 2,000 validation users with 100 sampled negatives each), ``n_epochs``
      at most; the best check's parameters score. ``bpr_kwargs`` ``validate_every=None`` runs exactly
      ``n_epochs`` (the fixed count of the former small-matrix default). The score function carries
      ``fit_info`` (converged, iterations, best_epoch, best_validation_auc).

    Parameters
    ----------
    large_cells : int or None, default `LARGE_CELLS`
        Training cells (I x J) above which BPR uses `BPR_STOPPING` ``"large"`` (None: never large); also
        set as the BPR factories' ``large_cells`` attribute.
    **bpr_kwargs
        Overrides of `BPR_DEFAULTS` and `BPR_STOPPING` for both BPR systems: ``n_factors``, ``n_epochs``,
        ``learning_rate``, ``reg``, ``bias_reg``, ``batch_size``, ``max_tries``, ``init_scale``, ``dtype``,
        ``validate_every``, ``patience``, ``validation_users``, ``validation_negatives``
        (`custom_inference.bpr.fit`).

    Returns
    -------
    dict of str to SystemFactory
        Name -> ``factory(train, seed) -> score_fn`` (insertion order as above); ``score_fn(users (B,)
        int) -> (B, J)`` numpy scores.

    Raises
    ------
    ValueError
        An unknown keyword (not among those above). A BPR factory raises, when called, what
        `custom_inference.bpr.fit` raises (e.g. ValueError for a bad setting).

    Source: ``000_619a0297b9d686b2.txt`` sec. 5 and ``003_203f63200c0d7157.txt`` sec. 6.1 (the
    popularity, BPR-uniform and BPR-pop baselines); EASE^R: Steck 2019; the settings of `BPR_DEFAULTS`
    are project choices.
    """
    allowed = {"n_factors", "n_epochs", "learning_rate", "reg", "bias_reg", "batch_size", "max_tries", "init_scale", "dtype",
               "validate_every", "patience", "validation_users", "validation_negatives"}
    unknown = sorted(set(bpr_kwargs) - allowed)
    if unknown:
        raise ValueError(f"bpr_kwargs: unknown {unknown}; allowed {sorted(allowed)}")

    def make(sampling: str) -> SystemFactory:
        def factory(train: Observations, seed: int) -> metrics.ScoreFn:
            import jax

            rule = BPR_STOPPING["large" if _is_large(train, large_cells) else "small"]
            kw = {**BPR_DEFAULTS[sampling], **rule, **bpr_kwargs}
            key = jax.random.key(int(seed))
            res = bpr.fit(key, train, kw["n_factors"], bpr.BPRHyper(kw["reg"], kw.get("bias_reg")), sampling=sampling,
                          **{k: v for k, v in kw.items() if k not in ("n_factors", "reg", "bias_reg")})
            params, attrs = res.state, dict(res.idata.posterior.attrs)
            info = {"converged": bool(attrs["converged"]) if kw["validate_every"] is not None else "n/a",
                    "iterations": int(attrs["n_iter"]), "unit": "epochs"}
            if kw["validate_every"] is not None:
                info.update(best_epoch=int(attrs["best_epoch"]), best_validation_auc=float(attrs["best_validation_auc"]))
            score_fn = lambda users: np.asarray(bpr.score_users(params, users))  # noqa: E731
            score_fn.fit_info = info
            return score_fn

        factory.large_cells = large_cells
        factory.estimate = _estimator(2.4e-6, "positive", lambda train: bpr_kwargs.get("n_epochs", BPR_DEFAULTS[sampling]["n_epochs"]))
        return factory

    return {
        "popularity": lambda train, seed: metrics.popularity_score_fn(train),
        "ease": baselines.ease_system(),
        "BPR-uniform": make("uniform"),
        "BPR-popularity": make("popularity"),
    }


@dataclass(frozen=True)
class ImplicitRun:
    """What the evaluation hands a solver's implicit runner (the runner contract); frozen.

    A runner is declared in the solver's declaration (``SolverSpec.evaluations["implicit"]``, an
    `validation.checks.registry.EvaluationEntry` with the model's ``defaults``) and called as ``runner(run) ->
    {system name: factory}``, ``factory(train, seed) -> score_fn`` (`SystemFactory`), each score function carrying
    ``fit_info`` and each factory the attributes `plan_systems` reads (``large_cells``, ``estimate``,
    ``sibm_batch`` / ``large_replacement``, ``svi_strategy``, ``scores_like_probability``). Besides the fields a
    run carries the evaluation's large-matrix rule and bookkeeping: `is_large`, ``large`` (`LARGE_SETTINGS`),
    `fit_info` and `estimator` (static methods).

    Parameters
    ----------
    settings : mapping
        The runner's settings: the declared defaults with the user's overrides (`model_systems`).
    dtype : numpy dtype, default numpy.float32
        Float dtype of the fits.
    large_cells : int or None, default `LARGE_CELLS`
        Training cells above which a matrix is large (None: never).

    Raises
    ------
    None on construction.

    Source: project addition (issue 25: the runners live in the declarations).
    """

    settings: Mapping
    dtype: object = np.float32
    large_cells: int | None = LARGE_CELLS

    large = LARGE_SETTINGS
    fit_info = staticmethod(_fit_info)
    estimator = staticmethod(_estimator)

    def is_large(self, train: Observations) -> bool:
        """Whether ``train`` has more than ``large_cells`` cells (never when ``large_cells`` is None).

        Parameters
        ----------
        train : custom_inference.data.Observations
            Shape (I, J); only the shape is read.

        Returns
        -------
        bool
            I x J > ``large_cells``.

        Raises
        ------
        None of its own.

        Source: project addition (issue 27).
        """
        return _is_large(train, self.large_cells)


def model_systems(*, dtype=np.float32, large_cells: int | None = LARGE_CELLS, **settings) -> dict[str, SystemFactory]:
    """The model entries of the comparison: the systems of every solver whose declaration lists the "implicit"
    evaluation (`validation.models.catalog.evaluation_declarations`), in registry order, each from the runner it
    declares (contract: `ImplicitRun`). Today: SIBM batch VB, S-Uniform, S-Balanced, S-Biased and MAP
    (`validation.models.sibm_eval`, seed 002 sec. 4), RG like and popularity x like at r = 1/2 and at a second r
    (`validation.models.rg_eval`, seed 003 sec. 6.1), PSM (`validation.models.psm_eval`, seed 000 sec. 5); what
    each system fits and scores is written in its runner's docstring.

    On a training matrix with more than ``large_cells`` cells (`LARGE_CELLS`; None: never) the fits stop on
    their own convergence with `LARGE_SETTINGS` (SVI: ELBO every ``svi_elbo_every`` minibatches, relative
    change below ``svi_tol``, ``svi_iter`` at most; RG: ``rg_warm_start`` warm sweeps, then at most
    ``rg_max_iter`` sweeps, ``rg_tol``; PSM: ``psm_tol``; MAP: ``map_iter`` minibatches, a fixed count,
    Robbins-Monro delay ``map_tau``), and `plan_systems` replaces batch VB (factory attributes
    ``sibm_batch``, ``large_replacement``, ``svi_strategy``, ``large_cells``). The model math is
    the same. Every score function carries ``fit_info`` (converged, iterations; MAP has no stopping rule in
    `custom_inference.sibm.fit_map`: "n/a"), every factory but batch VB an ``estimate(train)`` of its fit's
    CPU seconds at the iteration cap. SIBM fits keep the means of q (``n_draws=0``). The like systems carry
    ``scores_like_probability = True``, so `evaluate_implicit` also reports their classification error by user
    degree (seed 003 fig. 4).

    Parameters
    ----------
    dtype : numpy dtype, default numpy.float32
        Float dtype of the fits.
    large_cells : int or None, default `LARGE_CELLS`
        Training cells above which the large-matrix settings apply (None: never).
    **settings : dict
        Per model, keyed by the model's name (e.g. ``sibm={"D": 5}``, ``rg={"second_r": None}``,
        ``psm={"K": 10, "r": 8.0}``): overrides of the defaults its runners declare
        (``EvaluationEntry.defaults``; `SIBM_DEFAULTS`, `RG_DEFAULTS`,
        `validation.evaluation.model_studies.PSM_DEFAULTS`).

    Returns
    -------
    dict of str to SystemFactory
        Name -> ``factory(train, seed) -> score_fn``; ``score_fn(users (B,) int) -> (B, J)`` numpy scores.

    Raises
    ------
    ValueError
        Settings for a model that declares no implicit runner, or an unknown setting.
    MissingDeclaration
        A declared solver without a runner. A factory raises, when called, what its solver's fit raises
        (e.g. ValueError for a bad setting; PSM also FloatingPointError for a non-finite ELBO).

    Source: ``002_5408d341cb9fc544.txt`` sec. 4 and Algorithm 1 (SIBM batch VB, S-Uniform, S-Balanced,
    S-Biased, MAP); ``003_203f63200c0d7157.txt`` secs. 5.1 and 6.1, eq. (19) (RG); ``000_619a0297b9d686b2.txt``
    Algorithm 1 and eq. (5) (PSM); the defaults are project choices.
    """
    from validation.models import catalog

    declared = catalog.evaluation_declarations("implicit")
    defaults: dict[str, dict] = {}
    for model, _, entry in declared:
        defaults.setdefault(model, entry.get_defaults())
    merged = registry.merge_settings(defaults, settings, "implicit")  # ValueError naming the model and its settings
    runners = [(model, catalog.evaluation_runner("implicit", system)) for model, system, _ in declared]
    systems: dict[str, SystemFactory] = {}
    for model, runner in runners:
        systems.update(runner(ImplicitRun(merged[model], dtype, large_cells)))
    return systems


# the models' settings, kept importable from here (they live with the runners in the declarations)
from validation.models.rg_eval import RG_DEFAULTS  # noqa: E402
from validation.models.sibm_eval import SIBM_DEFAULTS  # noqa: E402


# the SIBM protocol and recall@N (`validation.evaluation.implicit_protocols`) and the recall curves
# (`validation.evaluation.recall_curves`) live in modules of their own; their names stay importable from here
from validation.evaluation.implicit_protocols import recall_at, split_sibm  # noqa: E402,F401
from validation.evaluation.recall_curves import (  # noqa: E402,F401
    CURVE_DATA,
    CURVE_DEFAULTS,
    RecallCurves,
    binary_split,
    recall_curves,
    sec4_synthetic,
    sibm_recall_curves,
)
