"""Model selection without the test set: K and a model's main hyperparameters chosen on a validation
split carved from the TRAINING part only, then a refit on the whole training part.

    from validation.frontdoor import api
    train, test = api.split(df, how="loo", seed=0)
    sel = api.select("psm", train, N=(10,), seed=0)    # = selection.select(api.fit, "psm", train,
                                                       #     declared=api.ADAPTERS["psm"].grid, ...)
    print(sel.table)                                   # every grid point with its validation score
    print(sel.chosen, sel.seconds)                     # {"K": 10, "r": 8.0}; seconds per phase
    print(sel.evaluate(test))                          # the refitted model on the test part, as `holdout.evaluate`

How (`select`):

1. **Validation split.** The training part is split again with `validation.evaluation.holdout.split`, the
   same function and protocol (``how``: "loo", "fraction", "time", "basket") as the outer split, with
   seed ``seed + 1`` (the outer split uses ``seed``). For "loo" this is the P1 draw
   (`validation.data.splits.split_leave_one_out`), the same draw EASE^R's lambda search uses on its
   training matrix (`validation.evaluation.baselines.ease_system` via
   `validation.evaluation.model_studies.validation_split`); no second splitting code. The test part is
   not an argument: nothing of it can reach the search. A training part on which fewer than
   ``min_users`` users (`MIN_VALIDATION_USERS`) get a validation entry is refused (ValueError) before any fit.
2. **Search.** Every point of the model's declared `Grid` (``declared``: the front door passes the
   ``grid`` of the model's adapter, `validation.frontdoor.api_models.ModelAdapter`; ``grid=`` overrides an
   axis's values) is fitted on the inner training part and scored on the validation entries by
   `validation.evaluation.holdout.model_metrics`, the metrics `holdout.evaluate` reports; the criterion is
   ``metric`` (default ``recall@N`` at the smallest cut-off N, the metric the evaluation's intervals are
   computed on; ``rmse`` is minimised, the others maximised; ties: the first point in grid order).
   A tqdm bar runs over the grid points. A grid's ``search_options`` (HPF: ``n_draws=0``) override the
   caller's fit options in the search only: HPF is scored from the means of q, exact under its mean-field
   q, instead of draws.
3. **Refit** on the whole training part with the chosen values (``refit=True``).

Every step's seconds are in `Selection.seconds` ("validation split", "search", "refit"; `Selection.evaluate`
adds "evaluate"), each grid point's in the table's ``seconds`` column.

Source: project addition (issue 27 item 2: model selection never on test; issue 25: the grids declared
with each model); each declared grid cites the sources of its values in its ``why``.
"""

from __future__ import annotations

import importlib
import itertools
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

__all__ = ["Axis", "Grid", "MIN_VALIDATION_USERS", "Selection", "grid_points", "select"]

#: fewest users with a validation entry that `select` accepts: below it one user moves recall@10 of the
#: validation set by 0.1 or more, more than the differences between grid points it is meant to resolve
MIN_VALIDATION_USERS = 10


#: the messages of `holdout.split` (and the `validation.data.splits` it calls) when nothing can be held out
_NOTHING_TO_HOLD_OUT = ("nothing to hold out", "the test set is empty", "so there are no positives")


@dataclass(frozen=True)
class Axis:
    """One searched hyperparameter of a `Grid`: its name, its values, and where a value goes.

    Parameters
    ----------
    name : str
        As reported in the table and `Selection.chosen`; the key of ``grid=`` overrides.
    values : tuple of float
        The values, in search order.
    option : str, optional
        A keyword of `validation.frontdoor.api.fit` that receives the value (e.g. ``"r"``,
        ``"learning_rate"``); None: the value goes to ``fields``.
    fields : tuple of str, default ()
        Fields of the model's ``hyper`` NamedTuple set to the value (e.g. ``("a", "c")``).

    Raises
    ------
    None of its own (the fields are not checked; `grid_points` / `select` check the values).

    Source: project addition.
    """

    name: str
    values: tuple
    option: str | None = None
    fields: tuple = ()


@dataclass(frozen=True)
class Grid:
    """A model's search: the K values and the axes of its main hyperparameters.

    Parameters
    ----------
    K : tuple of int
        Numbers of latent factors searched (each >= 1).
    axes : tuple of Axis, default ()
        The other searched hyperparameters.
    hyper : str, optional
        ``"module:Class"`` of the ``hyper`` NamedTuple the axes' ``fields`` belong to (None if none do).
    fixed : mapping str -> object, default {}
        Hyper fields held at a value other than the class default (e.g. SGD-FM's lambda_0), unless the
        caller gives a ``hyper``.
    why : str, default ""
        The reason for the values (printed by `Selection.lines`; a front-door adapter's grid must give one).
    search_options : mapping str -> object, default {}
        Fit options of the search's validation fits only, over the caller's (the refit keeps the caller's):
        e.g. HPF's ``{"n_draws": 0}``, the score from the means of q where that is exact.
    search_why : str, default ""
        The reason for ``search_options`` (a front-door adapter's grid must give one when there are any).

    Raises
    ------
    None of its own (the fields are not checked; `grid_points` / `select` check overrides,
    `validation.frontdoor.api_models.adapter_problems` the reasons).

    Source: project addition.
    """

    K: tuple
    axes: tuple = ()
    hyper: str | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""
    search_options: Mapping[str, Any] = field(default_factory=dict)
    search_why: str = ""

    @property
    def names(self) -> tuple:
        """The axis names in search order, ``"K"`` first.

        Returns
        -------
        tuple of str
            ``("K",)`` followed by the names of ``axes``.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return ("K",) + tuple(a.name for a in self.axes)


def _resolve(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _grid(g: Grid, overrides: Mapping[str, Any] | None, model: str) -> Grid:
    """The declared grid ``g`` of ``model`` with ``overrides`` (axis name -> value or values) applied."""
    if not isinstance(g, Grid):
        raise TypeError(f"{model}: the declared grid must be a validation.evaluation.selection.Grid, got "
                        f"{type(g).__name__}")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(g.names))
    if unknown:
        raise ValueError(f"grid: {model} searches {', '.join(g.names)}; not {', '.join(map(repr, unknown))}")

    def values(name, default):
        v = overrides.get(name, default)
        v = tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else (v,)
        if not v:
            raise ValueError(f"grid: {name} needs at least one value")
        return tuple(dict.fromkeys(v))

    K = values("K", g.K)
    if any(isinstance(k, bool) or int(k) != k or k < 1 for k in K):
        raise ValueError(f"grid: K must be integers >= 1, got {K!r}")
    axes = tuple(Axis(a.name, tuple(float(x) for x in values(a.name, a.values)), a.option, a.fields) for a in g.axes)
    for a in axes:
        if any(not np.isfinite(x) or x < 0 for x in a.values):
            raise ValueError(f"grid: {a.name} must be finite numbers >= 0, got {a.values!r}")
    return replace(g, K=tuple(int(k) for k in K), axes=axes)


def grid_points(declared: Grid, grid: Mapping[str, Any] | None = None, *, model: str = "the model") -> list[dict]:
    """The points `select` searches on the grid ``declared``, in order (the product of the axes, K outermost).

    Parameters
    ----------
    declared : Grid
        The model's declared grid (for the front door's models: ``ModelAdapter.grid`` of
        `validation.frontdoor.api_models`, which `validation.frontdoor.api.grid_of` returns by name).
    grid : mapping str -> value or sequence of values, optional
        Overrides of axis values, e.g. ``{"K": (5, 10), "r": 8}`` (repeats dropped, order kept).
    model : str, default "the model"
        The model's name, used in error messages only.

    Returns
    -------
    list of dict
        One dict per point: axis name -> value (``"K"`` first, int; the other axes float).

    Raises
    ------
    ValueError
        An axis the model does not search (the message names the model and its axes), an empty axis or bad
        values (K not integers >= 1, others not finite numbers >= 0).
    TypeError
        ``declared`` is not a `Grid`.

    Source: project addition.
    """
    g = _grid(declared, grid, model)
    return [dict(zip(g.names, p)) for p in itertools.product(g.K, *(a.values for a in g.axes))]


def _point_options(g: Grid, point: Mapping[str, Any], options: Mapping[str, Any]) -> dict:
    """The fit options of one grid point over the user's ``options`` (whose ``hyper``, if any, is the base
    of the point's hyper fields)."""
    out = dict(options)
    fields = {}
    for a in g.axes:
        if a.option is not None:
            out[a.option] = point[a.name]
        for f in a.fields:
            fields[f] = point[a.name]
    if g.hyper is not None and fields:
        base = out.get("hyper")
        base = _resolve(g.hyper)() if base is None else base
        out["hyper"] = base._replace(**{**{k: v for k, v in g.fixed.items() if "hyper" not in options}, **fields})
    return out


@dataclass
class Selection:
    """What `select` returns.

    Parameters
    ----------
    model : str
        The front-door model name.
    metric : str
        The criterion (a column of ``table``).
    chosen : dict str -> int or float
        Axis name -> chosen value (``"K"`` first, int).
    options : dict
        The fit options of the choice (over the caller's; ``hyper`` with the chosen fields).
    table : pandas.DataFrame
        One row per grid point: the axes, the criterion ``metric`` and its ``<metric>_se``, every metric of
        `validation.evaluation.holdout.model_metrics`, ``seconds`` (fit + scoring), ``note`` (the first
        warning or error of the fit, "" if none), ``chosen`` (bool), ``diff`` / ``diff_se`` (the point's
        criterion minus the chosen point's, paired over the same validation users, and its standard error:
        how far the choice is from a coin flip; NaN for the chosen point, failed points and RMSE).
    seconds : dict str -> float
        Phase -> seconds ("validation split", "search", "refit", "evaluate" once `evaluate` ran).
    split : dict
        The validation split's summary (`validation.evaluation.holdout.split`).
    grid : Grid
        The grid searched (with the caller's overrides).
    fitted : validation.frontdoor.fitted.FittedModel, optional
        The model refitted on the whole training part (None with ``refit=False``).

    Raises
    ------
    None of its own (the fields are not checked; `select` builds it).

    Source: project addition (issue 27 item 2).
    """

    model: str
    metric: str
    chosen: dict
    options: dict
    table: pd.DataFrame
    seconds: dict
    split: dict
    grid: Grid
    fitted: Any = None

    def evaluate(self, test, **kwargs) -> pd.DataFrame:
        """`validation.evaluation.holdout.evaluate` of the refitted model on ``test``, timed.

        The seconds go into ``seconds["evaluate"]``; the table's ``attrs["selection"]`` holds `lines`.

        Parameters
        ----------
        test : pandas.DataFrame
            The held-out rows (`validation.evaluation.holdout.split`'s second value), as `holdout.evaluate`.
        **kwargs
            Keyword arguments of `holdout.evaluate` (``N``, ``ease``, ``batch_users``, column names, ...).

        Returns
        -------
        pandas.DataFrame
            `holdout.evaluate`'s table (one row per system), with ``attrs["selection"]`` (list of str).

        Raises
        ------
        ValueError
            There is no refitted model (``select(..., refit=False)``); what `holdout.evaluate` raises.
        TypeError
            From `holdout.evaluate`: ``test`` is not a DataFrame.

        Source: project addition.
        """
        from validation.evaluation import holdout

        if self.fitted is None:
            raise ValueError("no refitted model: select(..., refit=True) first")
        t0 = time.perf_counter()
        out = holdout.evaluate(self.fitted, test, **kwargs)
        self.seconds["evaluate"] = time.perf_counter() - t0
        out.attrs["selection"] = self.lines()
        return out

    def lines(self) -> list[str]:
        """The selection as lines of text.

        The grid and why its values, the validation split (`validation.evaluation.holdout.describe`), the
        criterion, the choice with its validation score +- standard error (and whether it lies at the edge of
        the grid, and how far behind the runner-up is in paired standard errors) and the seconds per phase.

        Returns
        -------
        list of str
            The lines, each starting with ``select``.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        from validation.evaluation import holdout

        grid = "; ".join([f"K in {list(self.grid.K)}"] + [f"{a.name} in {list(a.values)}" for a in self.grid.axes])
        row = self.table[self.table["chosen"]].iloc[0]
        chosen = ", ".join(f"{k} = {v:g}" for k, v in self.chosen.items())
        edge = [a for a in self.grid.names if len(self._values(a)) > 2 and self.chosen[a] in (self._values(a)[0], self._values(a)[-1])]
        return ([f"select: {self.model} over {len(self.table)} grid points ({grid}); why: {self.grid.why}"]
                + ["select " + line for line in holdout.describe(self.split)]
                + [f"select: criterion {self.metric} on the validation entries ({'smaller' if self.metric == 'rmse' else 'larger'}"
                   " is better; ties: the first point in grid order)",
                   f"select: chosen {chosen} (validation {self.metric} {row[self.metric]:.4f} +- {row[self.metric + '_se']:.4f})"
                   + (f"; at the edge of the grid in {', '.join(edge)}" if edge else "") + self._runner_up(),
                   "select: seconds " + ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items())])

    def _runner_up(self) -> str:
        t = self.table[np.isfinite(self.table["diff"].to_numpy(dtype=float))]
        if t.empty:
            return ""
        r = t.loc[t["diff"].idxmax()]
        point = ", ".join(f"{k} = {r[k]:g}" for k in self.grid.names)
        return (f"; the runner-up ({point}) is {-r['diff']:.4f} behind (paired se {r['diff_se']:.4f}, "
                f"{-r['diff'] / r['diff_se'] if r['diff_se'] > 0 else np.inf:.1f} se)")

    def _values(self, name):
        return self.grid.K if name == "K" else next(a.values for a in self.grid.axes if a.name == name)


def _paired(per_user: Mapping[int, pd.Series], best: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(diff, diff_se), float (n,): each point's mean per-user criterion minus the chosen point's over the
    validation users both scored, and the standard error of that paired difference (sd / sqrt(users)); NaN
    for the chosen point, failed points and RMSE (it pools ratings: no per-user form)."""
    diff, se = np.full(n, np.nan), np.full(n, np.nan)
    if best not in per_user:
        return diff, se
    for k, s in per_user.items():
        if k == best:
            continue
        d = (s - per_user[best]).dropna().to_numpy(dtype=float)
        if d.size > 1:
            diff[k], se[k] = d.mean(), d.std(ddof=1) / np.sqrt(d.size)
    return diff, se


def select(fit: Callable, model: str, train, *, declared: Grid, how: str = "loo", seed: int = 0, N=(10, 20), metric: str | None = None,
           grid: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None, min_value: float | None = None,
           test_fraction: float = 0.2, n_test: int = 1, min_users: int = MIN_VALIDATION_USERS, refit: bool = True,
           progress: bool = True, user_col=None, item_col=None, value_col=None, time_col=None,
           transform: str = "none", threshold: float = 4.0) -> Selection:
    """Choose K and ``model``'s main hyperparameters on a validation split carved from ``train``; refit.

    The test part is not an argument: nothing of it can reach the search (see the module docstring for
    the three steps: validation split, search, refit).

    Parameters
    ----------
    fit : callable
        ``fit(model, data, K=, seed=, progress=, user_col=, item_col=, value_col=, transform=, threshold=,
        **options) -> FittedModel`` (`validation.frontdoor.api.fit`; the front door's ``api.select`` passes it).
    model : str
        The model's name, passed to ``fit`` (a front-door name, `validation.frontdoor.api.models`).
    train : pandas.DataFrame
        The TRAINING part only (`validation.evaluation.holdout.split`'s first value): N rows in the columns
        named by ``user_col`` ... ``time_col``, else the defaults of `holdout.split`.
    declared : Grid
        The model's declared grid, with its ``search_options`` (for the front door's models:
        ``ModelAdapter.grid``; `validation.frontdoor.api.select` passes it).
    how : {"loo", "fraction", "time", "basket"}, default "loo"
        Protocol of the validation split (`holdout.split` of ``train``); use the outer split's.
    seed : int, default 0
        The validation split uses ``seed + 1`` (the outer split ``seed``); ``seed`` also seeds every fit.
    N : int or sequence of int >= 1, default (10, 20)
        Cut-offs of recall@N / NDCG@N.
    metric : str, optional
        The criterion: one of ``recall@n``, ``ndcg@n`` (n in N), ``rank_score``, ``rmse`` (rating models;
        minimised, the others maximised); default ``recall@min(N)``. Ties: the first point in grid order.
    grid : mapping str -> value or sequence of values, optional
        Overrides of ``declared``'s values, axis name -> value(s), e.g. ``{"K": (5, 10), "r": (1, 8)}``.
    options : mapping str -> object, optional
        Fit options held fixed (e.g. ``max_iter``; a ``hyper`` is the base the searched fields replace).
    min_value : float, optional
        As `holdout.split` (use the outer split's).
    test_fraction : float in (0, 1), default 0.2
        As `holdout.split`, for ``how="fraction"``.
    n_test : int >= 1, default 1
        As `holdout.split`, for ``how="time"``.
    min_users : int, default `MIN_VALIDATION_USERS`
        Fewest users with a validation entry accepted.
    refit : bool, default True
        Fit the choice on the whole ``train`` (``Selection.fitted``).
    progress : bool, default True
        A tqdm bar over the grid points (and the refit's own bar).
    user_col : str, optional
        As `validation.frontdoor.api.fit` / `holdout.split`.
    item_col : str, optional
        As `validation.frontdoor.api.fit` / `holdout.split`.
    value_col : str, optional
        As `validation.frontdoor.api.fit` / `holdout.split`.
    time_col : str, optional
        As `holdout.split` (for ``how="time"``).
    transform : str, default "none"
        As `validation.frontdoor.api.fit` (the value transform of every fit).
    threshold : float, default 4.0
        As `validation.frontdoor.api.fit`.

    Returns
    -------
    Selection
        The table of every grid point's validation scores, the chosen values and options, the seconds per
        phase and the refitted model.

    Raises
    ------
    TypeError
        ``declared`` is not a `Grid`.
    ValueError
        A grid axis the model does not search, bad grid values or ``metric``, bad ``N``, an option the grid searches
        (it would be overwritten), a training part too small to carve a validation split (`holdout.split`
        finds nothing to hold out, or fewer than ``min_users`` users get a validation entry), every grid
        point failing (the first error named). Other errors of `holdout.split` and ``fit`` for bad input
        propagate; a point whose fit or scoring raises ValueError, FloatingPointError or
        numpy.linalg.LinAlgError is recorded in the table's ``note`` and skipped.

    Source: project addition (issue 27 item 2).
    """
    from tqdm.auto import tqdm

    from validation.evaluation import holdout

    g = _grid(declared, grid, model)
    points = grid_points(declared, grid, model=model)
    N = holdout._cutoffs(N)
    metric = metric or f"recall@{N[0]}"
    allowed = [m for n in N for m in (f"recall@{n}", f"ndcg@{n}")] + ["rank_score", "rmse"]
    if metric not in allowed:
        raise ValueError(f"metric must be one of {', '.join(allowed)}; got {metric!r}")
    options = dict(options or {})
    taken = sorted({a.option for a in g.axes if a.option} & set(options) | {"K"} & set(options))
    if taken:
        raise ValueError(f"options {taken}: select searches them ({', '.join(g.names)}); drop them, or fix a "
                         f"value with grid={{'{taken[0]}': value}}")
    cols = dict(user_col=user_col, item_col=item_col, value_col=value_col)
    seconds = {}
    t0 = time.perf_counter()
    try:
        val = holdout.split(train, how=how, seed=int(seed) + 1, test_fraction=test_fraction, n_test=n_test,
                            min_value=min_value, time_col=time_col, **cols)
    except ValueError as e:
        if not any(m in str(e) for m in _NOTHING_TO_HOLD_OUT):
            raise
        raise ValueError(f"select: the training part is too small to carve a validation split from it ({e}); "
                         f"evaluate without selection, or with more data") from None
    if val.summary["test_users"] < min_users:
        raise ValueError(f"select: the training part is too small to carve a validation split from it: "
                         f"{val.summary['test_users']} users get a validation entry (how={how!r}), fewer than "
                         f"min_users = {min_users}; evaluate without selection, or with more data")
    seconds["validation split"] = time.perf_counter() - t0
    rows, per_user = [], {}
    bar = tqdm(points, desc=f"select {model}", unit="point", disable=not progress, leave=False)
    for point in bar:
        bar.set_postfix_str(", ".join(f"{k}={v:g}" for k, v in point.items()))
        t1 = time.perf_counter()
        row = dict(point)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                m = fit(model, val.train, K=int(point["K"]), seed=int(seed), progress=False, transform=transform,
                        threshold=threshold, **cols, **{**_point_options(g, point, options), **g.search_options})
                means, pu = holdout.model_metrics(m, val.test, N=N, per_user=True, **cols)
                row.update(means)
                if metric != "rmse":
                    per_user[len(rows)] = pu.set_index("user")[metric]
                row["note"] = str(caught[0].message).splitlines()[0] if caught else ""
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as e:
                row.update({metric: np.nan, f"{metric}_se": np.nan, "note": f"{type(e).__name__}: {e}"})
        row["seconds"] = time.perf_counter() - t1
        rows.append(row)
    seconds["search"] = time.perf_counter() - t0 - seconds["validation split"]
    table = pd.DataFrame(rows)
    score = table[metric].to_numpy(dtype=float)
    if np.all(np.isnan(score)):
        raise ValueError(f"select: every grid point failed; the first: {table['note'].iloc[0]}")
    best = int(np.nanargmin(score) if metric == "rmse" else np.nanargmax(score))
    table["chosen"] = np.arange(len(table)) == best
    table["diff"], table["diff_se"] = _paired(per_user, best, len(table))
    front = list(g.names) + [metric, f"{metric}_se"]
    table = table[front + [c for c in table.columns if c not in front]]
    chosen = {k: (int(v) if k == "K" else float(v)) for k, v in points[best].items()}
    fit_options = _point_options(g, chosen, options)
    out = Selection(model, metric, chosen, fit_options, table, seconds, dict(val.summary), g)
    if refit:
        t2 = time.perf_counter()
        out.fitted = fit(model, train, K=chosen["K"], seed=int(seed), progress=progress, transform=transform,
                         threshold=threshold, **cols, **fit_options)
        seconds["refit"] = time.perf_counter() - t2
    return out
