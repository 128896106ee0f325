"""Rating prediction on protocol P2: every Gaussian solver of the thesis, RMSE versus time.

``factorbayes evaluate ratings --data ml-100k`` calls `evaluate_ratings`. Source:
``004_90693a0965f06816.txt`` ch. 3 (SBMF vs BPMF, fig. 3.2) and ch. 4 (VBFM, OVBFM vs
MCMC-FM and SGD-FM, fig. 4.2). Protocol P2 (`validation.data.datasets.split_p2`): a random 90/10
split of the ratings; RMSE (`validation.evaluation.metrics.rmse`) on the 10 %.

What each solver predicts, and what its curve shows (RMSE on the test ratings against the
wall-clock seconds spent in sweeps, compilation excluded):

- ``sbmf``, ``bpmf``, ``mcmc-fm`` (Gibbs): the posterior-mean prediction averaged over the kept
  samples (eq. 3.18); the curve is that running average after each kept sample. BPMF has no
  biases (r_ij ~ N(u_i . v_j, 1/alpha)), so it is fitted to the ratings minus their training
  mean, which is added back (as the BPMF authors' code does).
- ``vbfm`` (CAVI) and ``ovbfm`` (stochastic VI): the mean of q (eq. 4.22) after each sweep or
  epoch.
- ``sgd-fm``: the point estimate after each epoch.

Each solver's code (fit it with these settings, predict the test ratings) is declared in its model's
declaration (``SolverSpec.evaluations["ratings"]``: `validation.models.sbmf.ratings_runner`,
`validation.models.bpmf.ratings_runner`, `validation.models.fm_eval`); the contract is `RatingsRun`.

The table reports, per solver and rank K: the final RMSE, seconds per sweep (or epoch), the
sweeps run, and "iterations to 1 %": the first iteration from which the curve stays within
1 % of its final RMSE (the same rule for every solver, so it reads as "iterations to
convergence" for VI and SGD and "samples until the average settles" for the samplers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jax
import numpy as np
import pandas as pd

from validation.checks import registry
from validation.data import datasets
from validation.evaluation import intervals
from validation.evaluation.metrics import rmse

__all__ = ["solvers", "declared_settings", "RatingsRun", "RatingsConfig", "RatingsEvaluation", "evaluate_ratings", "plot_curves", "iterations_to_within"]



def solvers() -> tuple[str, ...]:
    """The solvers of the evaluation, in registry order.

    The front-door names of every solver whose declaration lists the "ratings" evaluation
    (`validation.models.catalog.evaluation_systems`); today sbmf, bpmf, mcmc-fm, vbfm, ovbfm, sgd-fm.

    Returns
    -------
    tuple of str
        The names `RatingsConfig` ``solvers`` accepts.

    Raises
    ------
    MissingDeclaration
        Not of its own: `validation.models.catalog.evaluation_systems` raises it for a declaration of the
        evaluation without a front-door name.

    Source: project addition (issue 25).
    """
    from validation.models import catalog

    return catalog.evaluation_systems("ratings")


def __getattr__(name):
    # SOLVERS: read from the declarations on use (no table here names a model)
    if name == "SOLVERS":
        return solvers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def declared_settings() -> dict[str, dict]:
    """Every ratings solver's declared settings: front-door name -> its runner's ``EvaluationEntry.defaults``.

    Returns
    -------
    dict of str to dict
        E.g. ``{"sbmf": {"warmup": 50, "samples": 150}, ..., "sgd-fm": {"epochs": 30, ...}}``, in registry order
        (new dicts).

    Raises
    ------
    MissingDeclaration
        As `solvers`.

    Source: project addition (issue 25: the per-model settings live in the declarations).
    """
    from validation.models import catalog

    return {system: entry.get_defaults() for _, system, entry in catalog.evaluation_declarations("ratings")}


@dataclass(frozen=True)
class RatingsConfig:
    """Settings of `evaluate_ratings` (defaults: the full MovieLens 100K run); frozen, checked on construction.

    The evaluation owns the ranks, the solvers, the features, the dtype and the seed; each solver's own settings
    (sweeps, epochs, step sizes) are declared with its runner (``EvaluationEntry.defaults`` in its model's
    ``SPEC``, `declared_settings`) and overridden through ``settings``.

    Parameters
    ----------
    ranks : tuple of int >= 1, default (10, 32)
        The K values (the issue asks for 10 and 32).
    solvers : tuple of str, optional
        Front-door names of the solvers to fit (None: `solvers`, every solver declaring "ratings").
    features : {"ids", "rich"}, default "ids"
        FM features: user and item one-hot (MF with biases), or with genres and demographics (fig. 2.1);
        SBMF and BPMF always use ids.
    dtype : {"float64", "float32"}, default "float64"
        Float dtype of the data and the solvers.
    seed : int, default 0
        The split's seed and every solver's.
    settings : mapping of str to mapping, default {}
        Per solver, keyed by its front-door name: overrides of its declared settings, e.g.
        ``{"sbmf": {"warmup": 20}, "sgd-fm": {"epochs": 10, "learning_rate": 0.02}}``. Declared today: sbmf, bpmf,
        mcmc-fm ``warmup`` 50, ``samples`` 150 (one chain; 50 + 150 is the myFM comparison's 200 sweeps with
        the last 150 averaged); vbfm ``max_iter`` 100, ``tol`` 1e-5 (relative ELBO change); ovbfm ``batches`` 10,
        ``epochs`` 30, ``lam`` 0.6 (step sizes (1 + t)^-lam, Algorithm 4); sgd-fm ``epochs`` 30,
        ``learning_rate`` 0.01, ``reg`` (0.0, 0.04, 0.04) (lambda_0, lambda_w, lambda_v). Stored as a dict of
        dicts; `settings_for` gives a solver's merged settings.

    Raises
    ------
    ValueError
        On construction: an unknown solver name, ranks empty or not integers >= 1, an unknown ``dtype`` or
        ``features``; ``settings`` for a name that declares no ratings runner, or a setting its runner does not
        declare (`validation.checks.registry.merge_settings`: the message names the solver and its settings).
    MissingDeclaration
        As `solvers` (called on construction).

    Source: project addition (the settings of ``004_90693a0965f06816.txt`` figs. 3.2 and 4.2, shortened).
    """

    ranks: tuple[int, ...] = (10, 32)
    solvers: tuple[str, ...] | None = None
    features: str = "ids"
    dtype: str = "float64"
    seed: int = 0
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self):
        declared = solvers()
        if self.solvers is None:
            object.__setattr__(self, "solvers", declared)
        unknown = set(self.solvers) - set(declared)
        if unknown:
            raise ValueError(f"solvers: unknown {sorted(unknown)}; choose from {declared}")
        if not self.ranks or any(int(k) != k or k < 1 for k in self.ranks):
            raise ValueError(f"ranks: need integers >= 1, got {self.ranks!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype: 'float32' or 'float64', got {self.dtype!r}")
        if self.features not in ("ids", "rich"):
            raise ValueError(f"features: 'ids' or 'rich', got {self.features!r}")
        merged = registry.merge_settings(declared_settings(), self.settings, "ratings")
        object.__setattr__(self, "settings", {k: dict(v) for k, v in (self.settings or {}).items()})
        object.__setattr__(self, "_merged", merged)

    def settings_for(self, solver: str) -> dict:
        """A solver's settings: its declared defaults with this config's overrides.

        Parameters
        ----------
        solver : str
            A front-door name of `solvers`.

        Returns
        -------
        dict
            Setting name -> value (a new dict).

        Raises
        ------
        KeyError
            A name that declares no ratings runner.

        Source: project addition (issue 25).
        """
        return dict(self._merged[solver])


@dataclass
class RatingsEvaluation:
    """Result of `evaluate_ratings`.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (solver, K), the baseline "item mean" (each item's mean training rating) first at
        every K: rmse, seconds_per_iteration, iterations, iterations_to_1pct, seconds (sweeps only),
        ``rmse_se`` (bootstrap standard error over test users), and against the item mean ``vs``,
        ``diff`` (RMSE, solver - item mean), ``ci_low``, ``ci_high`` (95 % paired bootstrap interval over
        the same test users, `validation.evaluation.intervals`), ``verdict`` ("better" when the whole
        interval is below 0).
    curves : pandas.DataFrame
        Long format, one row per (solver, K, iteration): seconds (cumulative), rmse.
    notes : list of str, default []
        Lines describing the data and settings.
    differences : pandas.DataFrame, default empty
        The same intervals as a long table (system, baseline, metric, diff, ci_low, ci_high, verdict, K).
    per_user : dict of (str, int) to pandas.DataFrame, default {}
        (solver, K) -> per-user DataFrame (`validation.evaluation.intervals.squared_errors`): user, rmse
        (the user's SUM of squared errors), n_ratings.

    Raises
    ------
    None on construction (a dataclass; the fields are not checked).

    Source: project addition.
    """

    table: pd.DataFrame
    curves: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    differences: pd.DataFrame = field(default_factory=pd.DataFrame)
    per_user: dict = field(default_factory=dict, repr=False)


def iterations_to_within(curve, rel: float = 0.01) -> int:
    """First iteration (1-based) from which ``curve`` stays within ``rel`` of its last value.

    Parameters
    ----------
    curve : array-like, shape (n,), float
        E.g. the RMSE per iteration.
    rel : float, default 0.01
        Relative tolerance: entries with ``|c - c[-1]| <= rel * |c[-1]|`` are within.

    Returns
    -------
    int
        In [1, n]: one more than the last iteration outside the band (1 when none is).

    Raises
    ------
    ValueError
        An empty curve (or one that does not convert to float).

    Source: project addition ("iterations to 1 %" of the ratings table).
    """
    c = np.asarray(curve, dtype=float)
    if c.size == 0:
        raise ValueError("curve: empty")
    outside = np.abs(c - c[-1]) > rel * abs(c[-1])
    idx = np.nonzero(outside)[0]
    return int(idx[-1] + 2) if idx.size else 1


def _running_rmse(per_draw_pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """RMSE of the running average over draws: per_draw_pred (S, M) -> (S,)."""
    running = np.cumsum(per_draw_pred, axis=0) / np.arange(1, per_draw_pred.shape[0] + 1)[:, None]
    return np.sqrt(np.mean((running - truth[None, :]) ** 2, axis=1))


def _gibbs_curve(per_draw_pred, truth, warmup, per_sweep):
    """(iterations, seconds, running RMSE, seconds per sweep, final prediction (M,): the mean over draws)."""
    r = _running_rmse(per_draw_pred, truth)
    it = warmup + np.arange(1, r.size + 1)
    return it, it * per_sweep, r, per_sweep, np.asarray(per_draw_pred, np.float64).mean(0)


@dataclass(frozen=True)
class RatingsRun:
    """What the evaluation hands a solver's ratings runner besides its data and K (the runner contract).

    A runner is declared in the solver's declaration (``SolverSpec.evaluations["ratings"]``, an
    `validation.checks.registry.EvaluationEntry` whose ``data`` is "split": the P2 `RatingsSplit`, or "fm": the
    (train, test) FM designs of `validation.data.datasets.fm_features`) and called as
    ``runner(data, K, run) -> (iterations (n,) int, seconds (n,) cumulative, rmse (n,), seconds per iteration,
    final prediction (M,) float64 in the order of the test ratings)``. Besides the fields a run offers the
    evaluation's metric `rmse` and `gibbs_curve` (the running-average RMSE curve of a sampler, returned as the
    runner's tuple), both static methods. Frozen.

    Parameters
    ----------
    config : RatingsConfig
        The evaluation's settings.
    settings : mapping of str to object
        The runner's own settings: its declared ``EvaluationEntry.defaults`` with the config's overrides
        (`RatingsConfig.settings_for`).
    key : jax.Array
        The solver's PRNG key (``jax.random.PRNGKey``-style, split per solver and K).
    progress : bool
        Whether the runner shows progress bars.

    Raises
    ------
    None on construction.

    Source: project addition (issue 25: the runners live in the declarations).
    """

    config: RatingsConfig
    settings: Mapping
    key: object
    progress: bool

    @staticmethod
    def rmse(pred, truth) -> float:
        """`validation.evaluation.metrics.rmse` of ``pred`` against ``truth``.

        Parameters
        ----------
        pred : array-like, shape (M,), float
            Predicted ratings.
        truth : array-like, shape (M,), float
            Test ratings.

        Returns
        -------
        float
            sqrt(mean((pred - truth)^2)), in rating units.

        Raises
        ------
        ValueError
            As `validation.evaluation.metrics.rmse` (shapes not 1-D and equal, length 0, non-finite
            entries).

        Source: 004_90693a0965f06816.txt sec. 3.3.2 (RMSE).
        """
        return rmse(pred, truth)

    @staticmethod
    def gibbs_curve(per_draw_pred, truth, warmup, per_sweep):
        """A sampler's curve: the RMSE of the running average of its kept draws' predictions.

        Parameters
        ----------
        per_draw_pred : numpy.ndarray, shape (S, M), float
            The prediction of each kept draw at the M test ratings.
        truth : numpy.ndarray, shape (M,), float
            The test ratings.
        warmup : int
            Sweeps run before the first kept draw.
        per_sweep : float
            Seconds per sweep.

        Returns
        -------
        tuple
            (iterations (S,) int: warmup + 1 ... warmup + S, seconds (S,) float: iterations x per_sweep,
            RMSE of the running average after each draw (S,) float64, per_sweep, final prediction (M,)
            float64: the mean over draws), the runner's tuple.

        Raises
        ------
        ValueError
            Not of its own: NumPy raises it for mismatched shapes (broadcasting).

        Source: 004_90693a0965f06816.txt eq. 3.18.
        """
        return _gibbs_curve(per_draw_pred, truth, warmup, per_sweep)


def evaluate_ratings(df: pd.DataFrame, config: RatingsConfig = RatingsConfig(), *, data_dir=None,
                     progress: bool = True) -> RatingsEvaluation:
    """Fit every solver of ``config.solvers`` at every K of ``config.ranks`` on protocol P2.

    Parameters
    ----------
    df : pandas.DataFrame
        Ratings (columns user, item, rating[, timestamp]) as `validation.data.datasets.load_movielens`
        returns.
    config : RatingsConfig, default RatingsConfig()
        The settings.
    data_dir : str or path-like, optional
        Folder with MovieLens side files (``u.user``, ``items.tsv``/``u.item``); needed only for
        ``config.features == "rich"``.
    progress : bool, default True
        tqdm bars and one line per fit.

    Returns
    -------
    RatingsEvaluation
        (table, curves, notes, differences, per_user): the table starts each K with the "item mean"
        baseline and carries ``rmse_se`` and the paired bootstrap interval of each solver's RMSE minus
        the item mean's (`validation.evaluation.intervals`, over the test users).

    Raises
    ------
    ValueError
        From `validation.data.datasets.split_p2`, `validation.data.datasets.fm_features` or a solver for
        bad data; a declaration whose ratings ``data`` is neither "split" nor "fm".
    MissingDeclaration
        A declared solver without a runner (its ``SolverSpec.evaluations["ratings"]``).
    AssertionError
        The FM test design is not in the order of ``split.test`` (a broken `fm_features` contract).

    Source: 004_90693a0965f06816.txt, ch. 3 (SBMF vs BPMF, fig. 3.2) and ch. 4 (VBFM, OVBFM vs
    MCMC-FM and SGD-FM, fig. 4.2); protocol P2 and RMSE.
    """
    from validation.models import catalog

    entries = {s: catalog.evaluation_entry("ratings", s) for s in config.solvers}
    runners = {s: catalog.evaluation_runner("ratings", s) for s in config.solvers}  # before any work
    bad = {s: e.data for s, e in entries.items() if e.data not in ("split", "fm")}
    if bad:
        raise ValueError(f"ratings runners take data 'split' or 'fm', declared: {bad}")
    split = datasets.split_p2(df, seed=config.seed, dtype=np.dtype(config.dtype))
    need_fm = any(entries[s].data == "fm" for s in config.solvers)
    designs = datasets.fm_features(split, config.features, data_dir, dtype=np.dtype(config.dtype)) if need_fm else None
    rows, curves, per_user = [], [], {}
    key = jax.random.PRNGKey(config.seed)
    users = np.asarray(split.test.rows, np.int64)
    truth = np.asarray(split.test.values, np.float64)
    if designs is not None and not np.allclose(np.asarray(designs[1].y, np.float64), truth):
        raise AssertionError("the FM test design is not in the order of split.test")  # fm_features' contract
    base = _item_mean_prediction(split)
    for K in config.ranks:
        per_user[("item mean", int(K))] = intervals.squared_errors(users, base, truth)
        rows.append({"solver": "item mean", "K": int(K), "rmse": rmse(base, truth), "seconds_per_iteration": np.nan,
                     "iterations": 0, "iterations_to_1pct": 0, "seconds": 0.0})
        for name in config.solvers:
            key, sub = jax.random.split(key)
            data = split if entries[name].data == "split" else designs
            run = RatingsRun(config, config.settings_for(name), sub, progress)
            its, secs, rm, per, pred = runners[name](data, int(K), run)
            final = float(rm[-1])
            per_user[(name, int(K))] = intervals.squared_errors(users, pred, truth)
            rows.append({"solver": name, "K": int(K), "rmse": final, "seconds_per_iteration": per,
                         "iterations": int(its[-1]), "iterations_to_1pct": int(its[iterations_to_within(rm) - 1]),
                         "seconds": float(secs[-1])})
            curves.append(pd.DataFrame({"solver": name, "K": int(K), "iteration": its, "seconds": secs, "rmse": rm}))
            if progress:
                print(f"  {name:8s} K={K:3d}  RMSE {final:.4f}  {per:.4g} s/iteration", flush=True)
    table = pd.DataFrame(rows)
    diffs = []
    for K in config.ranks:
        comp = intervals.compare({s: pu for (s, k), pu in per_user.items() if k == int(K)}, ["rmse"], main="rmse",
                                 baselines=("item mean",), lower_is_better=("rmse",), rmse={"rmse": "n_ratings"})
        table = intervals.annotate(table, comp, system_col="solver", where={"K": int(K)})
        diffs.append(comp.differences.assign(K=int(K)))
    notes = [f"P2: {split.train.nnz} training and {split.test.nnz} test ratings (seed {config.seed}), "
             f"I = {split.n_users}, J = {split.n_items}",
             f"FM features: {config.features}; {config.dtype}",
             "; ".join(t for t in (entries[s].setting_text(config.settings_for(s)) for s in config.solvers) if t),
             "item mean: each item's mean training rating (the global mean for an item without one)",
             "RMSE " + comp.note().split("; _se")[0] + "; rmse_se: the bootstrap standard error (RMSE pools the "
             "test ratings; the users are resampled)"]
    notes = [n for n in notes if n]
    return RatingsEvaluation(table, pd.concat(curves, ignore_index=True), notes,
                             pd.concat(diffs, ignore_index=True), per_user)


def _item_mean_prediction(split) -> np.ndarray:
    """(M,) float64: each test rating's item mean over the training ratings (the global mean for an item
    without training ratings)."""
    tr = split.train
    cols, vals = np.asarray(tr.cols), np.asarray(tr.values, np.float64)
    n = np.bincount(cols, minlength=tr.n_cols)
    mean = np.where(n > 0, np.bincount(cols, weights=vals, minlength=tr.n_cols) / np.maximum(n, 1), vals.mean())
    return mean[np.asarray(split.test.cols)]


def plot_curves(curves: pd.DataFrame, out_dir) -> list[str]:
    """RMSE versus seconds, one PNG per K (thesis figs. 3.2 and 4.2), log time axis.

    Parameters
    ----------
    curves : pandas.DataFrame
        `RatingsEvaluation.curves` (columns solver, K, iteration, seconds, rmse).
    out_dir : str or path-like
        Folder for ``rmse_vs_time_K{K}.png`` (created if missing).

    Returns
    -------
    list of str
        The file names written, one per K in increasing order.

    Raises
    ------
    OSError
        ``out_dir`` cannot be created or written.
    KeyError
        A column is missing.

    Source: 004_90693a0965f06816.txt, figs. 3.2 and 4.2 (the plots reproduced).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for K, sub in curves.groupby("K"):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for solver, c in sub.groupby("solver", sort=False):
            ax.plot(c["seconds"], c["rmse"], marker=".", ms=3, label=solver)
        ax.set_xscale("log")
        ax.set_xlabel("seconds (sweeps only, log scale)")
        ax.set_ylabel("test RMSE (P2)")
        ax.set_title(f"RMSE versus time, K = {K}")
        lo = sub.groupby("solver")["rmse"].min().min()
        ax.set_ylim(lo - 0.02, min(sub["rmse"].max(), lo + 0.4))
        ax.grid(alpha=0.3)
        ax.legend()
        name = f"rmse_vs_time_K{K}.png"
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)
    return names
