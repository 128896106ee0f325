r"""Top-N recommendation from counts on protocol P3: NPFM, PPFM, HPF, the Gaussian FMs and two baselines.

``factorbayes evaluate counts --data ml-100k`` calls `evaluate_counts`. Source:
``004_90693a0965f06816.txt`` sec. 5.4 (NPFM / PPFM against SGD-FM and MCMC-FM, fig. 5.3), with
protocol P3 and metrics of sec. 5.4.4; HPF (``001_30a2018ec18c20b9.txt``) by CAVI, item
popularity and EASE^R (Steck 2019, "Embarrassingly shallow autoencoders for sparse data") are
added as reference points.

Protocol P3 (`validation.data.datasets.split_random_holdout`, ``row_order="input"``, the split of
`validation.evaluation.experiments.evaluate_hpf` and `validation.evaluation.pfm_experiments.evaluate_p3`): 20 % of the ratings,
drawn by a seeded permutation of the file's rows, are held out; ratings are counts. For every
user with a test rating the candidates are the items without a training rating, the retrieved
list the top P = 100 candidates by score (ties: smaller item index), the relevant set the user's
test items. Columns of the table (`validation.evaluation.metrics.holdout_metrics` / `summarize`):

- ``precision``, ``recall`` (eqs. 5.21-5.24), ``f_measure`` (eq. 5.25, of the means);
- ``ndcg``: eq. 5.26-5.28, the thesis's discount (positions 1 and 2 weigh 1, then 1 / log2 k);
- ``ndcg_log2k1``: the project's other discount, 1 / log2(k + 1) (the now common form);
- ``precision_se``, ``recall_se``, ``ndcg_se``, ``ndcg_log2k1_se``: standard errors over test users; ``vs``,
  ``diff``, ``ci_low``, ``ci_high``, ``verdict``: precision@100 against the better of popularity and
  EASE^R, with a 95 % paired bootstrap interval over the same users (`validation.evaluation.intervals`;
  the other metrics' intervals in ``differences``);
- ``fit_seconds``: wall time of the final fit, compilation included (tuning excluded: see the
  tuning tables), ``seconds_per_iteration`` where the solver reports one.

Systems (`systems`: the baselines and every solver whose declaration lists the "counts" evaluation;
``NAME+side`` adds the MovieLens side features, `side_systems`: those declaring "counts+side"):

- ``popularity``: number of training entries of the item (`validation.evaluation.metrics.popularity_score_fn`).
- ``ease``: EASE^R on the binarized training matrix (``ease_values="count"``: the counts):
  B = I - P diag(1 / diag P), P = (X^T X + lambda I)^-1, scores X_u B (`ease_fit`, `ease_scores`, from
  `validation.evaluation.baselines`, re-exported here; skipped with its reason above 20,000 items).
  lambda is chosen by `tune_ease` on a validation split carved from the TRAINING entries
  (`validation_split`), then B is refitted on all training entries.
- ``hpf``: HPF by CAVI (`custom_inference.hpf.fit`, scores E_q[theta_u] . E_q[beta_i]) as in
  `validation.evaluation.experiments.evaluate_hpf`.
- ``npfm``, ``ppfm``: `validation.evaluation.pfm_experiments.evaluate_p3` (every user-item cell a training row, y = 0 where
  unrated); two rows each, the posterior-mean rate over the kept draws and the thesis's plug-in
  rate at the posterior-mean parameters (sec. 5.3.4).
- ``mcmc-fm``: MCMC-FM (`custom_inference.fm_mcmc.sample`, Gaussian likelihood) trained, as in the
  thesis, on the observed training ratings only; score: the predicted rating averaged over the kept
  draws, for every candidate.
- ``sgd-fm``: SGD-FM (`custom_inference.fm_sgd.fit`, Algorithm 1) on the same design; learning rate
  and L2 constant chosen by `tune_sgd_fm` on the validation split of the training entries (grid: its
  declared settings ``learning_rates`` x ``regs``), then refitted on all training entries.

Each solver's code (fit it with its settings, return its score functions) and its settings (``defaults``, overridden
by ``CountsConfig.settings`` keyed by the front-door name) are declared in its model's declaration (``SolverSpec.evaluations["counts"]``: `validation.models.hpf.counts_runner`,
`validation.models.pfm_eval.counts_runner`, `validation.models.fm_eval`); the contract is `CountsRun`.

Tuning criterion. Both tuned baselines are chosen by the top-N metric the comparison reports
(``CountsConfig.select_by``, default the F-measure at P = 100) on the validation split, never on the
test split: `tune_ease` and `tune_sgd_fm` receive the training `Observations` only. The validation
split holds out ``validation_fraction`` (20 %) of the training entries with a permutation seeded by
(seed, 1); its "candidates" exclude only the inner training entries.

Side features (``NAME+side``): user age bucket, gender, occupation and item genres from ``u.user`` and
``items.tsv`` (`validation.evaluation.pfm_experiments.ml100k_side_features`), as further FM feature groups (user side and
item side) for NPFM, PPFM, MCMC-FM and SGD-FM.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from custom_inference.data import Observations

from validation.checks import registry
from validation.data import datasets
from validation.evaluation import baselines, intervals, metrics
from validation.evaluation.baselines import ease_fit, ease_score_fn, ease_scores
from validation.data.splits import HoldoutSplit
from validation.models import fm_eval
from validation.models.fm_eval import entity_features, fm_design, fm_score_fn

__all__ = [
    "BASELINES",
    "CountsRun",
    "systems",
    "side_systems",
    "declared_settings",
    "CountsConfig",
    "CountsEvaluation",
    "validation_split",
    "ranking_metrics",
    "summarize_p3",
    "ease_fit",
    "ease_scores",
    "ease_score_fn",
    "tune_ease",
    "entity_features",
    "fm_design",
    "fm_score_fn",
    "tune_sgd_fm",
    "evaluate_counts",
]

#: The evaluation's own baselines; the model systems are the solvers that declare the "counts" evaluation
#: (`systems`), the ``NAME+side`` ones those that declare "counts+side" (`side_systems`).
BASELINES = ("popularity", "ease")


def systems() -> tuple[str, ...]:
    """Every system of the evaluation, in order.

    `BASELINES`, then the front-door names of the solvers whose declaration lists the "counts" evaluation
    (`validation.models.catalog.evaluation_systems`), in registry order (today hpf, mcmc-fm, sgd-fm, npfm,
    ppfm).

    Returns
    -------
    tuple of str
        The system names ``evaluate_counts(systems=...)`` accepts (besides ``NAME+side``).

    Raises
    ------
    MissingDeclaration
        Not of its own: `validation.models.catalog.evaluation_systems` raises it for a declaration of the
        evaluation without a front-door name; what importing the declarations raises propagates.

    Source: project addition (issue 25).
    """
    from validation.models import catalog

    return BASELINES + catalog.evaluation_systems("counts")


def side_systems() -> tuple[str, ...]:
    """The systems that take the MovieLens side features (``NAME+side``): the solvers declaring "counts+side".

    Returns
    -------
    tuple of str
        Their front-door names, in registry order (today mcmc-fm, sgd-fm, npfm, ppfm).

    Raises
    ------
    MissingDeclaration
        As `systems`.

    Source: project addition (issue 25).
    """
    from validation.models import catalog

    return catalog.evaluation_systems("counts+side")


def __getattr__(name):
    # SYSTEMS / SIDE_SYSTEMS: read from the declarations on use (no table here names a model)
    if name == "SYSTEMS":
        return systems()
    if name == "SIDE_SYSTEMS":
        return side_systems()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: the per-user metrics whose standard errors and paired intervals the table reports, and the main one
#: (it picks the best baseline; its difference and interval are the table's diff / ci_low / ci_high)
_INTERVAL_METRICS = ("precision", "recall", "ndcg", "ndcg_log2k1")
MAIN_METRIC = "precision"
P_AT = 100  # the thesis's list length P (sec. 5.4.4); `validation.evaluation.pfm_experiments.evaluate_p3` fixes it too
_SELECT = ("f_measure", "precision", "recall", "ndcg", "ndcg_log2k1")


def declared_settings() -> dict[str, dict]:
    """Every counts solver's declared settings: front-door name -> its runner's ``EvaluationEntry.defaults``.

    The ``NAME+side`` run of a solver uses NAME's settings.

    Returns
    -------
    dict of str to dict
        E.g. ``{"hpf": {"max_iter": 100}, ..., "npfm": {"warmup": 300, ...}}``, in registry order (new dicts).

    Raises
    ------
    MissingDeclaration
        As `systems`.

    Source: project addition (issue 25: the per-model settings live in the declarations).
    """
    from validation.models import catalog

    return {system: entry.get_defaults() for _, system, entry in catalog.evaluation_declarations("counts")}


@dataclass(frozen=True)
class CountsConfig:
    """Settings of `evaluate_counts` (defaults: the run reported for ML-100K, shorter than the thesis's).

    Frozen; the fields are checked on construction. The evaluation owns K, the seed, the baselines, the tuning
    split and the dtypes; each solver's own settings (sweeps, grids) are declared with its runner
    (``EvaluationEntry.defaults`` in its model's ``SPEC``, `declared_settings`) and overridden through ``settings``.

    Parameters
    ----------
    K : int >= 1, default 50
        Latent dimension of every factor model (NPFM's truncation level); 50 in the thesis.
    seed : int, default 0
        Seed of the P3 split, of the validation split (with 1) and of every solver.
    ease_lambdas : tuple of float > 0, default `validation.evaluation.baselines.EASE_LAMBDAS`
        EASE^R's searched L2 constants (`tune_ease`).
    ease_values : {"binary", "count"}, default "binary"
        EASE^R's X: the binarized training matrix (Steck's) or the counts.
    validation_fraction : float in (0, 1), default 0.2
        Share of the training entries held out for tuning (`validation_split`).
    select_by : {"f_measure", "precision", "recall", "ndcg", "ndcg_log2k1"}, default "f_measure"
        Validation metric (a key of `ranking_metrics`) that chooses the tuned settings.
    dtype : {"float32", "float64"}, default "float32"
        Float dtype of NPFM / PPFM / HPF.
    fm_dtype : {"float32", "float64"}, default "float64"
        Float dtype of MCMC-FM / SGD-FM.
    settings : mapping of str to mapping, default {}
        Per solver, keyed by its front-door name (``NAME+side`` runs use NAME's): overrides of its declared
        settings, e.g. ``{"npfm": {"warmup": 1500}, "sgd-fm": {"regs": (0.01,)}}``. Declared today: hpf
        ``max_iter`` 100 (CAVI sweeps, all run); npfm, ppfm ``warmup`` 300, ``samples`` 100, ``thin`` 2,
        ``init_scale`` 1.0, ``chains`` 1 (the thesis: 1500 + 1000); mcmc-fm ``warmup`` 50, ``samples`` 100 (one
        chain); sgd-fm ``epochs`` 30 (the thesis: 300), ``learning_rates`` (0.003, 0.01, 0.03) x ``regs`` (0.01,
        0.04, 0.1) searched by `tune_sgd_fm` (lambda_w = lambda_v = reg, lambda_0 = 0), ``batch_size`` 1. Stored
        as a dict of dicts; `settings_for` gives a solver's merged settings.

    Raises
    ------
    ValueError
        On construction, for a field outside the range or set given above (an empty or non-finite grid, an
        unknown ``ease_values``, ``select_by`` or dtype); ``settings`` for a name that declares no counts
        runner, or a setting its runner does not declare (`validation.checks.registry.merge_settings`: the
        message names the solver and its settings).

    Source: project addition (the settings of ``004_90693a0965f06816.txt`` sec. 5.4.3-5.4.4, shortened).
    """

    K: int = 50
    seed: int = 0
    ease_lambdas: tuple = baselines.EASE_LAMBDAS
    ease_values: str = "binary"
    validation_fraction: float = 0.2
    select_by: str = "f_measure"
    dtype: str = "float32"
    fm_dtype: str = "float64"
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self):
        if int(self.K) != self.K or self.K < 1:
            raise ValueError(f"K: must be an integer >= 1, got {self.K!r}")
        v = tuple(self.ease_lambdas)
        if not v or any(not np.isfinite(x) for x in v):
            raise ValueError(f"ease_lambdas: need a non-empty tuple of finite numbers, got {v!r}")
        if any(x <= 0 for x in self.ease_lambdas):
            raise ValueError(f"ease_lambdas: must be > 0, got {self.ease_lambdas!r}")
        if self.ease_values not in ("binary", "count"):
            raise ValueError(f"ease_values: 'binary' or 'count', got {self.ease_values!r}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction: must be in (0, 1), got {self.validation_fraction!r}")
        if self.select_by not in _SELECT:
            raise ValueError(f"select_by: one of {_SELECT}, got {self.select_by!r}")
        for name in ("dtype", "fm_dtype"):
            if getattr(self, name) not in ("float32", "float64"):
                raise ValueError(f"{name}: 'float32' or 'float64', got {getattr(self, name)!r}")
        merged = registry.merge_settings(declared_settings(), self.settings, "counts")
        object.__setattr__(self, "settings", {k: dict(v) for k, v in (self.settings or {}).items()})
        object.__setattr__(self, "_merged", merged)

    def settings_for(self, system: str) -> dict:
        """A solver's settings: its declared defaults with this config's overrides (``NAME+side``: NAME's).

        Parameters
        ----------
        system : str
            A front-door name of `systems` (not a baseline), or ``NAME+side``.

        Returns
        -------
        dict
            Setting name -> value (a new dict).

        Raises
        ------
        KeyError
            A name that declares no counts runner (a baseline included).

        Source: project addition (issue 25).
        """
        return dict(self._merged[system.split("+")[0]])


@dataclass
class CountsEvaluation:
    """Result of `evaluate_counts`.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per method: method, system, features ("ids" | "ids+side"), precision, recall,
        f_measure, ndcg (eq. 5.26), ndcg_log2k1, n_users, fit_seconds, seconds_per_iteration,
        iterations, setting (str: what was run / chosen), then the interval columns of
        `evaluate_counts`.
    tuning : dict of str to pandas.DataFrame, default {}
        Validation-split searches, system name -> one row per setting tried (the validation metrics,
        seconds and ``chosen``).
    notes : list of str, default []
        Lines describing the data and settings.
    report : pathlib.Path or None, default None
        Path of ``report.md`` (None without ``out_dir``).
    extras : dict, default {}
        Per system, e.g. NPFM's mean number of active factors (``n_active_mean``).
    per_user : dict of str to pandas.DataFrame, default {}
        Method -> per-user DataFrame (`validation.evaluation.metrics.p3_metrics`) on the test split.
    differences : pandas.DataFrame, default empty
        `validation.evaluation.intervals.compare`'s differences: every method against the best
        baseline (popularity or EASE^R by precision@100), per metric, with the paired bootstrap interval.

    Raises
    ------
    None on construction (a dataclass; the fields are not checked).

    Source: project addition.
    """

    table: pd.DataFrame
    tuning: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    report: Path | None = None
    extras: dict = field(default_factory=dict)
    per_user: dict = field(default_factory=dict, repr=False)
    differences: pd.DataFrame = field(default_factory=pd.DataFrame)


# ------------------------------------------------------------------------------
# validation split and metrics


def validation_split(train: Observations, *, fraction: float = 0.2, seed: int = 0) -> HoldoutSplit:
    """Carve a validation split out of the TRAINING entries: a random ``fraction`` of them held out.

    The permutation is ``numpy.random.default_rng([seed, 1]).permutation(N)``; its first
    ``round(fraction * N)`` entries form ``test`` (the validation entries), the rest ``train``. Only
    ``train`` is seen, so the test split of the outer protocol cannot influence what is tuned here.

    Parameters
    ----------
    train : custom_inference.data.Observations
        Shape (I, J), N entries (the P3 training set).
    fraction : float in (0, 1), default 0.2
        Share of the entries held out.
    seed : int, default 0
        Seed of the permutation (with 1).

    Returns
    -------
    validation.data.splits.HoldoutSplit
        ``train`` and ``test`` Observations of shape (I, J), ``kind="count"``, the dtype of
        ``train.values``; ``indexed`` is None (the metrics do not use it).

    Raises
    ------
    ValueError
        ``train`` is not Observations, ``fraction`` is not in (0, 1), or it leaves either side empty.

    Source: project addition (the "validation split carved from the training data" of the tuning).
    """
    if not isinstance(train, Observations):
        raise ValueError(f"train must be Observations, got {type(train).__name__}")
    if not 0.0 < float(fraction) < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    rows, cols, vals = np.asarray(train.rows), np.asarray(train.cols), np.asarray(train.values)
    n = rows.size
    n_val = round(float(fraction) * n)
    if n_val < 1 or n_val > n - 1:
        raise ValueError(f"fraction={fraction} of {n} training entries leaves an empty side")
    perm = np.random.default_rng([int(seed), 1]).permutation(n)
    val, inner = perm[:n_val], perm[n_val:]

    def mk(idx):
        return Observations.from_coo(rows[idx], cols[idx], vals[idx], train.shape, kind="count", dtype=vals.dtype)

    return HoldoutSplit(train=mk(inner), test=mk(val), indexed=None)


def ranking_metrics(score_fn, split: HoldoutSplit, p: int = P_AT, batch_size: int = 256) -> dict:
    """Mean precision@p, recall@p, F-measure, NDCG@p (thesis discount) and NDCG@p with 1/log2(k+1).

    The score function is called twice per batch (once per discount).

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores (higher = recommended first).
    split : validation.data.splits.HoldoutSplit
        P3 (`validation.data.datasets.split_random_holdout`) or `validation_split`.
    p : int >= 1, default 100
        List length P.
    batch_size : int >= 1, default 256
        Users per call of ``score_fn``; does not change the result.

    Returns
    -------
    dict of str to float
        precision, recall, f_measure, ndcg, ndcg_log2k1, n_users (`summarize_p3`).

    Raises
    ------
    ValueError
        As `validation.evaluation.metrics.holdout_metrics` (scores of the wrong shape or NaN,
        overlapping train and test, bad p).

    Source: ``004_90693a0965f06816.txt`` sec. 5.4.4, eqs. 5.21-5.28 (through `validation.evaluation.metrics`);
    the log2(k + 1) column is a project addition.
    """
    return summarize_p3(metrics.p3_metrics(score_fn, split, p=p, batch_size=batch_size))


def summarize_p3(per_user: pd.DataFrame) -> dict:
    """The means over users of a `validation.evaluation.metrics.p3_metrics` table.

    Parameters
    ----------
    per_user : pandas.DataFrame
        One row per test user with the columns precision, recall, ndcg, ndcg_log2k1 (as
        `validation.evaluation.metrics.p3_metrics` returns).

    Returns
    -------
    dict of str to float
        precision, recall, f_measure (eq. 5.25, of the means), ndcg, ndcg_log2k1, n_users (a float).

    Raises
    ------
    ValueError
        As `validation.evaluation.metrics.summarize` (no metric column, no rows).
    KeyError
        ``per_user`` lacks ndcg_log2k1, precision, recall or ndcg.

    Source: ``004_90693a0965f06816.txt`` eqs. 5.23-5.25, 5.28.
    """
    out = {k: float(v) for k, v in metrics.summarize(per_user).items()}
    out["ndcg_log2k1"] = float(per_user["ndcg_log2k1"].mean())
    return {k: out[k] for k in ("precision", "recall", "f_measure", "ndcg", "ndcg_log2k1", "n_users")}


# ------------------------------------------------------------------------------
# EASE^R (the closed form lives in `validation.evaluation.baselines`; re-exported here)

def tune_ease(train: Observations, lambdas=CountsConfig.ease_lambdas, *, fraction: float = 0.2, seed: int = 0,
              select_by: str = "f_measure", values: str = "binary", p: int = P_AT):
    """Choose EASE^R's lambda on a validation split of the TRAINING entries (`validation_split`).

    For each lambda of ``lambdas``: fit on the inner training entries, score the validation entries
    (`ranking_metrics` at ``p``). The lambda with the largest ``select_by`` wins (ties: the first).

    Parameters
    ----------
    train : custom_inference.data.Observations
        Shape (I, J), the training entries (the test split is not an argument).
    lambdas : sequence of float > 0, default `CountsConfig`'s ``ease_lambdas``
        The L2 constants searched, in order.
    fraction : float in (0, 1), default 0.2
        As `validation_split`.
    seed : int, default 0
        As `validation_split`.
    select_by : str, default "f_measure"
        The deciding key of `ranking_metrics` (as `CountsConfig`'s).
    values : {"binary", "count"}, default "binary"
        EASE^R's X (as `CountsConfig`'s ``ease_values``).
    p : int >= 1, default 100
        List length of the validation metrics.

    Returns
    -------
    best_lambda : float
        The chosen lambda.
    table : pandas.DataFrame
        One row per lambda: lam, precision, recall, f_measure, ndcg, ndcg_log2k1, n_users, seconds,
        chosen (bool).

    Raises
    ------
    ValueError
        An empty ``lambdas`` or one not finite and > 0, an unknown ``select_by``, or as
        `validation_split` and `ease_fit`.

    Source: Steck 2019 (EASE^R); the validation-split search is a project addition (issue 13,
    "fair baselines").
    """
    if select_by not in _SELECT:
        raise ValueError(f"select_by: one of {_SELECT}, got {select_by!r}")
    if not tuple(lambdas):
        raise ValueError("lambdas: empty")
    vs = validation_split(train, fraction=fraction, seed=seed)
    return baselines.tune_lambda(lambda lam: ease_score_fn(vs.train, lam, values=values),
                                 lambda fn: ranking_metrics(fn, vs, p=p), lambdas, select_by)


# ------------------------------------------------------------------------------
# factorization-machine designs and scores


def tune_sgd_fm(train: Observations, entities, config: CountsConfig | None = None, *, settings: Mapping,
                progress: bool = False):
    """SGD-FM's learning rate and L2 constant chosen on `validation_split` of the TRAINING entries.

    `validation.models.fm_eval.tune_sgd_fm` with this evaluation's split and metrics (`ranking_metrics`).

    Parameters
    ----------
    train : custom_inference.data.Observations
        Shape (I, J), the training entries.
    entities : tuple
        From `entity_features`.
    config : CountsConfig, optional
        Read: ``K``, ``validation_fraction``, ``seed``, ``select_by``, ``fm_dtype`` (None: ``CountsConfig()``).
    settings : mapping
        SGD-FM's settings: the grid ``learning_rates`` x ``regs``, ``epochs``, ``batch_size`` (e.g.
        ``config.settings_for`` of its front-door name).
    progress : bool, default False
        One line per setting on stderr.

    Returns
    -------
    learning_rate : float
        The chosen learning rate.
    reg : float
        The chosen L2 constant.
    table : pandas.DataFrame
        One row per setting: learning_rate, reg, precision, recall, f_measure, ndcg, ndcg_log2k1,
        n_users, val_rmse, seconds, chosen.

    Raises
    ------
    ValueError
        An empty or invalid grid; as `validation_split`, `fm_design` and `custom_inference.fm_sgd.fit`.
    KeyError
        ``settings`` without one of the names read.

    Source: ``004_90693a0965f06816.txt`` sec. 5.4.3 ("learning rate and regularization ... chosen by cross
    validation"); the search here is a project addition (issue 13, "fair baselines").
    """
    return fm_eval.tune_sgd_fm(train, entities, CountsConfig() if config is None else config, settings,
                               validation_split=validation_split, ranking_metrics=ranking_metrics, progress=progress)

# ------------------------------------------------------------------------------
# the systems


def _row(method, system, features, m, fit_seconds, per_iter=np.nan, iterations=np.nan, setting=""):
    return {"method": method, "system": system, "features": features, **m, "fit_seconds": float(fit_seconds),
            "seconds_per_iteration": float(per_iter) if per_iter is not None else np.nan,
            "iterations": iterations, "setting": setting}


def _measure(ctx, method, fn) -> dict:
    """The P3 means of ``fn`` on the test split; its per-user table is kept in ctx["per_user"][method]."""
    pu = metrics.p3_metrics(fn, ctx["split"], p=P_AT)
    ctx["per_user"][method] = pu
    return summarize_p3(pu)


def _run_popularity(ctx, side):
    t0 = time.perf_counter()
    fn = metrics.popularity_score_fn(ctx["split"].train)
    secs = time.perf_counter() - t0
    return [_row("popularity", "popularity", "ids", _measure(ctx, "popularity", fn), secs,
                 setting="number of training entries of the item")]


def _run_ease(ctx, side):
    cfg, split = ctx["cfg"], ctx["split"]
    reason = baselines.ease_skip_reason(split.n_items)
    if reason:  # no dense J x J matrix: a row that says why
        nan = {k: np.nan for k in ("precision", "recall", "f_measure", "ndcg", "ndcg_log2k1")}
        return [_row("EASE^R", "ease", "ids", {**nan, "n_users": 0.0}, 0.0, setting=reason)]
    lam, table = tune_ease(split.train, cfg.ease_lambdas, fraction=cfg.validation_fraction, seed=cfg.seed,
                           select_by=cfg.select_by, values=cfg.ease_values)
    ctx["tuning"]["ease"] = table
    ctx["tuned"]["ease"] = "EASE^R: lambda"
    t0 = time.perf_counter()
    fn = ease_score_fn(split.train, lam, values=cfg.ease_values)
    secs = time.perf_counter() - t0
    return [_row("EASE^R", "ease", "ids", _measure(ctx, "EASE^R", fn), secs,
                 setting=f"lambda = {lam:g} (best validation {cfg.select_by} of {len(table)}"
                         f"{baselines.grid_edge_note(table['chosen'].to_numpy())}); X {cfg.ease_values}")]


@dataclass
class CountsRun:
    """What the evaluation hands a solver's counts runner (the runner contract).

    A runner is declared in the solver's declaration (``SolverSpec.evaluations["counts"]``, and the same for
    ``"counts+side"``) and called as ``runner(run, side) -> list of fit dicts``, one per table row: ``method``
    (the row's label, unique in the table), ``score_fn`` (``users (B,) int -> (B, J)`` scores over every item),
    ``fit_seconds``, ``seconds_per_iteration`` (None: not reported), ``iterations``, ``setting`` (text), and
    optionally ``tuning`` (a DataFrame of a validation-split search) with ``tuned`` (what it chose, for the
    report's title) and ``extras`` (a dict), both kept under the system's name (``NAME+side`` with ``side``).
    A declaration's ``EvaluationEntry.setting`` adds a line of its settings to the notes. The evaluation
    measures each score function on the test split. Besides the fields, a run offers `side_features` and
    the evaluation's tuning tools `validation_split` and `ranking_metrics` (static methods).

    Parameters
    ----------
    config : CountsConfig
        The evaluation's settings.
    split : validation.data.splits.HoldoutSplit
        The P3 split, (I, J).
    progress : bool, default False
        Whether runners show progress.
    data_dir : str or path-like, optional
        Folder of the MovieLens side files (as `evaluate_counts`).
    cache : dict, default {}
        Shared by the runners of one evaluation (e.g. FM designs, the side features).
    settings : mapping, default {}
        The runner's own settings: its declared ``EvaluationEntry.defaults`` with the config's overrides
        (`CountsConfig.settings_for`); the evaluation hands each runner a copy of the run with its own.

    Raises
    ------
    None on construction.

    Source: project addition (issue 25: the runners live in the declarations).
    """

    config: CountsConfig
    split: HoldoutSplit
    progress: bool = False
    data_dir: object = None
    cache: dict = field(default_factory=dict)
    settings: Mapping = field(default_factory=dict)

    validation_split = staticmethod(validation_split)
    ranking_metrics = staticmethod(ranking_metrics)

    def side_features(self):
        """The MovieLens side features of the split's users and items (computed on first use, then cached).

        Returns
        -------
        tuple
            As `validation.evaluation.pfm_experiments.ml100k_side_features`: (user_features (I, D_u) csr,
            user_groups (D_u,), item_features (J, D_v) csr, item_groups (D_v,), names).

        Raises
        ------
        ValueError
            As `validation.evaluation.pfm_experiments.ml100k_side_features` (the side files missing).

        Source: ``004_90693a0965f06816.txt`` sec. 5.4.4.
        """
        if "side_features" not in self.cache:
            from validation.evaluation.pfm_experiments import ml100k_side_features

            self.cache["side_features"] = ml100k_side_features(self.split, self.data_dir)
        return self.cache["side_features"]


def _model_rows(ctx, system: str, side: bool, runner) -> list[dict]:
    """The table rows of a declared solver: its runner's fits, each measured on the test split."""
    name = f"{system}+side" if side else system
    rows = []
    run = replace(ctx["run"], settings=ctx["cfg"].settings_for(system))  # shares the evaluation's cache
    for fit in runner(run, side):
        if "tuning" in fit:
            ctx["tuning"][name] = fit["tuning"]
            ctx["tuned"][name] = f"{fit['method']}: {fit.get('tuned', 'settings')}"
        if "extras" in fit:
            ctx["extras"][name] = fit["extras"]
        rows.append(_row(fit["method"], system, "ids+side" if side else "ids",
                         _measure(ctx, fit["method"], fit["score_fn"]), fit["fit_seconds"],
                         fit.get("seconds_per_iteration", np.nan), fit.get("iterations", np.nan), fit.get("setting", "")))
    return rows


_BASELINE_RUNNERS = {"popularity": _run_popularity, "ease": _run_ease}


def _runner(name: str, side: bool = False):
    """``(ctx, side) -> rows`` of a system: a baseline's own, or the declared solver's runner (its
    ``SolverSpec.evaluations["counts"]``, ``["counts+side"]`` with ``side``) measured by `_model_rows`.
    Raises MissingDeclaration for a solver that declares the evaluation without a runner."""
    from validation.models import catalog

    if name in _BASELINE_RUNNERS:
        return _BASELINE_RUNNERS[name]
    runner = catalog.evaluation_runner("counts+side" if side else "counts", name)
    return lambda ctx, side: _model_rows(ctx, name, side, runner)


def _setting(name: str, cfg: CountsConfig) -> str:
    """The settings text a run system's declaration gives for the notes ("" for a baseline or none declared)."""
    from validation.models import catalog

    base, side = name.split("+")[0], name.endswith("+side")
    if base in _BASELINE_RUNNERS:
        return ""
    return catalog.evaluation_entry("counts+side" if side else "counts", base).setting_text(cfg.settings_for(base))


def _resolve_systems(names, side_features: bool) -> list[str]:
    every, side = systems(), side_systems()
    names = list(every) if names is None else [str(s) for s in names]
    valid = list(every) + [f"{s}+side" for s in side]
    unknown = sorted(set(names) - set(valid))
    if unknown:
        raise ValueError(f"systems: unknown {unknown}; choose from {valid}")
    if not names:
        raise ValueError("systems: empty")
    out = []
    for s in names:
        if s not in out:
            out.append(s)
        if side_features and s in side and f"{s}+side" not in out:
            out.append(f"{s}+side")
    return out


def evaluate_counts(df: pd.DataFrame, *, systems=None, K: int | None = None, seed: int | None = None,
                    side_features: bool = False, config: CountsConfig | None = None, data_dir=None, out_dir=None,
                    progress: bool = True, **overrides) -> CountsEvaluation:
    """The thesis's top-N comparison on protocol P3 (module docstring), one table row per method.

    Parameters
    ----------
    df : pandas.DataFrame
        Ratings table (columns user, item, rating[, timestamp]; integer ratings used as counts), as
        `validation.data.datasets.load_movielens` returns; the P3 split permutes its rows in the order given.
    systems : sequence of str, optional
        Names of `systems` and ``NAME+side`` for NAME in `side_systems` (None: all of `systems`).
    K : int >= 1, optional
        Latent dimension; replaces ``config``'s ``K`` when given (None: ``config``'s, 50 without one).
    seed : int, optional
        Seed of the split, the tuning and every solver; replaces ``config``'s ``seed`` when given (None:
        ``config``'s, 0 without one).
    side_features : bool, default False
        Also run the ``+side`` variant of every selected system of `side_systems`.
    config : CountsConfig, optional
        The settings (None: its defaults).
    data_dir : str or path-like, optional
        Folder with ``u.user`` and ``items.tsv`` / ``u.item`` for the side features (None: the search of
        `validation.data.features`).
    out_dir : str or path-like, optional
        Write ``report.md`` (the tables and notes) there; None writes nothing.
    progress : bool, default True
        Progress bars and one line per system on stderr.
    **overrides
        `CountsConfig` fields to override, e.g. ``ease_lambdas=(10.0, 100.0)`` or
        ``settings={"npfm": {"warmup": 100}}`` (per-model settings keyed by the front-door name; replaces
        ``config``'s ``settings``).

    Returns
    -------
    CountsEvaluation
        ``table`` (method, system, features, precision, recall, f_measure, ndcg, ndcg_log2k1, n_users,
        fit_seconds, seconds_per_iteration, iterations, setting; float64 metrics; then the standard
        errors over test users ``precision_se``, ``recall_se``, ``ndcg_se``, ``ndcg_log2k1_se`` and,
        against the best baseline ``vs`` (popularity or EASE^R, by precision@100), ``diff``, ``ci_low``,
        ``ci_high`` (95 % paired bootstrap interval of the precision@100 difference,
        `validation.evaluation.intervals`) and ``verdict``), ``tuning`` ("ease", "sgd-fm", "sgd-fm+side":
        the validation-split searches), ``notes``, ``report``, ``extras``, ``per_user``, ``differences``.

    Raises
    ------
    ValueError
        Unknown systems or settings, bad settings (`CountsConfig`), a bad ratings table or non-integer
        ratings (`validation.data.datasets.split_random_holdout`), missing side files for a ``+side``
        system; what the solvers raise propagates (ValueError for bad input).
    FloatingPointError
        Not of its own: a non-finite HPF ELBO (`custom_inference.hpf.fit`).
    OSError
        Writing the report.
    MissingDeclaration
        A solver declares the "counts" evaluation without a runner (its ``SolverSpec.evaluations``).

    Source: ``004_90693a0965f06816.txt`` sec. 5.4 (the comparison of fig. 5.3; protocol and metrics
    sec. 5.4.4, eqs. 5.21-5.28); HPF ``001_30a2018ec18c20b9.txt``; EASE^R Steck 2019; the tuning on a
    validation split of the training data is a project addition.
    """
    known = {f.name for f in fields(CountsConfig)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise ValueError(f"unknown settings {bad}; CountsConfig has {sorted(known)} (a model's own settings go to "
                         f"settings={{NAME: {{...}}}}: {declared_settings()})")
    given = {"K": K, "seed": seed}
    cfg = replace(config or CountsConfig(), **{k: v for k, v in given.items() if v is not None}, **overrides)
    names = _resolve_systems(systems, side_features)
    split = datasets.split_random_holdout(df, seed=cfg.seed, row_order="input")
    ctx = {"cfg": cfg, "split": split, "df": df, "data_dir": data_dir, "progress": progress, "tuning": {},
           "tuned": {}, "extras": {}, "per_user": {}, "run": CountsRun(cfg, split, progress, data_dir)}
    runners = {name: _runner(name.split("+")[0], name.endswith("+side")) for name in names}  # before any work
    rows = []
    for name in names:
        side = name.endswith("+side")
        if progress:
            print(f"  {name}: fitting ...", file=sys.stderr, flush=True)
        out = runners[name](ctx, side)
        rows += out
        if progress:
            for r in out:
                print(f"  {r['method']:38s} P@100 {r['precision']:.4f}  R@100 {r['recall']:.4f}  "
                      f"NDCG {r['ndcg']:.4f}  {r['fit_seconds']:.1f} s", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    comparison = intervals.compare(ctx["per_user"], _INTERVAL_METRICS, main=MAIN_METRIC,
                                   baselines=("popularity", "EASE^R"))
    table = intervals.annotate(table, comparison, system_col="method")
    tr, te = split.train, split.test
    notes = [f"P3, seed {cfg.seed}: {tr.nnz} training and {te.nnz} test ratings, I = {split.n_users}, "
             f"J = {split.n_items}; top P = {P_AT}; {int(table['n_users'].iloc[0])} test users",
             f"K = {cfg.K}; NPFM/PPFM/HPF in {cfg.dtype}, MCMC-FM/SGD-FM in {cfg.fm_dtype}",
             f"tuning: validation split = {cfg.validation_fraction:g} of the training entries (seed ({cfg.seed}, 1)), "
             f"criterion validation {cfg.select_by}@{P_AT}; the test split is never used",
             f"EASE^R searched lambda in {list(cfg.ease_lambdas)} (X {cfg.ease_values})",
             *dict.fromkeys(t for t in (_setting(name, cfg) for name in names) if t),  # the solvers' own, once each
             "fit_seconds: the final fit (compilation included), tuning excluded; NPFM/PPFM: sampling only",
             comparison.note() + f"; diff / ci_low / ci_high / verdict: {MAIN_METRIC}@{P_AT}"]
    report = None
    if out_dir is not None:
        from validation.checks.report import evaluation_report

        tables = {f"P3 top-{P_AT} (test split)": table.drop(columns=["system"]),
                  f"Differences against {comparison.best_baseline} (paired bootstrap over test users)":
                      comparison.differences}
        for k, t in ctx["tuning"].items():
            tables[f"{ctx['tuned'][k]} on the validation split of the training data"] = t
        report = evaluation_report(tables, None, out_dir, title="Top-N from counts on MovieLens: protocol P3",
                                   notes=notes)
    return CountsEvaluation(table=table, tuning=ctx["tuning"], notes=notes, report=report, extras=ctx["extras"],
                            per_user=ctx["per_user"], differences=comparison.differences)
