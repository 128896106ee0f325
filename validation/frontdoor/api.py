"""The front door: fit any model by name on the data users have, then recommend, predict,
save and load in the users' own ids.

    from validation.frontdoor import api
    m = api.fit("hpf", df, K=20, seed=0)       # DataFrame (user, item, value), scipy.sparse or Observations
    m.recommend(["u196", "u186"], N=10)        # original ids in and out, seen items excluded
    m.predict(pairs)                           # posterior mean, sd and 90% interval per (user, item)
    m.save("hpf.nc"); m2 = api.load("hpf.nc")  # one netCDF artifact: posterior, id maps, settings
    m.fold_in(new_user_rows)                   # new users without refitting (all but RG and PSM, which say why not)
    api.fit("hpf", df, K=20, resume_from="ckpt/")  # checkpoints; resumed == uninterrupted, bit for bit

Where it sits: on the top floor of `validation` (it uses the loaders, the solvers and the
registry of front-door adapters below); nothing in the package imports it.

Every model is declared once as an `Adapter` in `ADAPTERS`: how its data are prepared (counts,
real ratings, or one-class 0/1), how its solver is called, and the function that maps posterior
draws to the expected value of an entry, E[y_ui | parameters], for any (user, item) pairs.
Uncertainty is computed the same way for every model from the ``posterior`` group of its result:
kept draws for samplers, draws from q for VI (the method is stated in each output's ``method``
column and in `FittedModel.uncertainty`), and none for point estimates (MAP, SGD: sd = 0).

Source: project addition (issue 10); each adapter names the seed equation of its mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from validation.frontdoor import api_run as _run
from validation.frontdoor.adapters import ADAPTERS, VALUE_KINDS, Adapter, _adapter, _ensure_adapters, models  # noqa: F401
from validation.frontdoor.api_run import (_check_options, _dropped, _no_drops, _phases, _refuse_duplicates, _run_summary,
                      _solver_parameters, _warn_dropped, _warn_if_slow, _warn_summary)
from validation.frontdoor.api_arviz import compare
from validation.frontdoor.fitted import FittedModel, load
from validation.frontdoor.tables import _observations_table, _table_named, _user_terms, _values

__all__ = ["Adapter", "ADAPTERS", "FittedModel", "Interrupted", "RunInterrupted", "fit", "load", "models",
           "run_fingerprint", "valid_options", "checkpoint_path", "split", "select", "compare"]



def __getattr__(name):
    # `Interrupted` lives in custom_inference.base (the drivers raise it through their checkpoint
    # hook); imported lazily so that `import validation.frontdoor.api` stays free of JAX (CLI start-up).
    if name in ("Interrupted", "RunInterrupted"):
        from custom_inference import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fit(model: str, data, K: int = 10, seed: int = 0, *, user_col: str | None = None, item_col: str | None = None,
        value_col: str | None = None, transform: str = "none", threshold: float = 4.0,
        resume_from=None, checkpoint_every: int | None = None, progress: bool = True, **options) -> FittedModel:
    """Fit ``model`` on the user's data and keep the id maps.

    Parameters
    ----------
    model : str
        A name from `models`: counts "hpf", "hpf-gibbs", "npfm", "ppfm", "psm"; real ratings
        "sbmf", "bpmf", "mcmc-fm", "vbfm", "ovbfm", "sgd-fm"; one-class (binary) "sibm", "sibm-svi",
        "sibm-map", "rg", "bpr".
    data : pandas.DataFrame, scipy.sparse matrix or Observations
        A table with a user, an item and (optionally) a value column (no value column means one-class
        data, every row a 1); a users x items scipy.sparse matrix; or an `Observations` (ids 0..I-1,
        0..J-1). Each (user, item) pair at most once.
    K : int >= 1, default 10
        The latent dimension.
    seed : int, default 0
        Fixes every random choice of the fit.
    user_col, item_col, value_col : str, optional
        Column names of ``data`` (default "user", "item" and the first of "rating", "value", "count"
        present).
    transform : {"none", "round", "double", "binarize", "error"}, default "none"
        What to do with values the model cannot take: "none" (values as given; count models refuse
        non-integers, binary models binarize at ``threshold``), "round", "double" (half stars ->
        integer counts), "binarize" (value >= ``threshold`` -> 1, else dropped), "error" (refuse
        anything the model cannot take as is). Users or items left without entries are dropped: a
        warning names how many and a few of their ids (also in `FittedModel.summary`).
    threshold : float, default 4.0
        The binarization threshold, in the units of the values.
    resume_from : str or pathlib.Path, optional
        A folder for checkpoints (the file is ``resume_from/<model>.npz``, `checkpoint_path`): the
        fit writes its state there every ``checkpoint_every`` iterations (atomically) and, when a
        checkpoint exists, continues from it ("resuming from iteration N of M" on stderr with
        ``progress``); an interrupted and resumed fit equals the uninterrupted one bit for bit
        (tests/validation/test_api.py, test_api_run.py). Every checkpoint holds the run's fingerprint
        (`run_fingerprint`); a checkpoint of any other run is refused before anything is computed.
        SIGINT / SIGTERM during the fit finish the iteration in progress, checkpoint it and raise
        `RunInterrupted` naming the file. Only for models whose adapter is resumable.
    checkpoint_every : int >= 1, optional
        In the driver's unit: VI sweeps or epochs (`custom_inference.vi_driver`), blocks of sampler
        units (`custom_inference.mcmc_driver`); default the solver's (10). Needs ``resume_from``.
    progress : bool, default True
        Progress bars and notes on stderr.
    **options
        Passed to the model's solver (e.g. ``num_samples``, ``max_iter``, ``hyper``) over the
        adapter's ``defaults``; `valid_options` lists them. ``_stop_after=n`` (testing aid, with
        ``resume_from``) raises `Interrupted` right after the n-th checkpoint write, through the
        drivers' hook (`custom_inference.base.on_checkpoint`), as a killed run would stop.

    Returns
    -------
    FittedModel
        Its `FittedModel.summary` describes the run (iterations, convergence, R-hat / ESS for
        samplers, dropped users and items, seconds per phase).

    Warns
    -----
    UserWarning
        When users or items were dropped, when a VI fit stopped at its iteration cap without
        reaching its tolerance, when a sampler's R-hat on predictions exceeds 1.01, and before a fit
        whose every sweep is dense in users x items on a large matrix (batch SIBM: an estimate, and
        the faster model to use).

    Raises
    ------
    ValueError
        Bad input, before any computation, in the user's terms: the user's column names (NaN,
        non-numeric values), duplicate (user, item) pairs with their ids, unknown options with the
        valid ones listed; a ratings model on values that are all equal (one-class data, with the
        models that fit it); ``resume_from`` with a non-resumable model (the reason),
        ``checkpoint_every`` / ``_stop_after`` without ``resume_from``, a checkpoint written by
        another run (every differing field named, with how to start fresh) or damaged (the file
        named), before anything is compiled.
    TypeError
        Data of a type the front door cannot read, values of a non-numeric type.
    Interrupted
        ``_stop_after`` reached (testing aid).
    RunInterrupted
        SIGINT / SIGTERM during a checkpointed fit (the checkpoint named).

    Source: project addition (issues 10, 24).
    """
    import time

    from custom_inference import base
    from custom_inference.base import check_latent_dim
    from custom_inference.data import Observations

    t0 = time.perf_counter()
    adapter = _adapter(model)
    K = check_latent_dim(K)
    if transform not in ("none", "round", "double", "binarize", "error"):
        raise ValueError(f"transform must be one of none, round, double, binarize, error; got {transform!r}")
    _check_options(adapter, options)
    if options.get("dtype") is not None:  # float16 / bfloat16 refused before anything else (shared check)
        base.compute_dtype(options["dtype"])
    if isinstance(data, Observations):
        table = _observations_table(data, adapter.values, transform)
        names = {"user": "row", "item": "column", "rating": "value"}
        user_ids, item_ids = np.arange(data.n_rows), np.arange(data.n_cols)
    else:
        table, names = _table_named(data, user_col=user_col, item_col=item_col, value_col=value_col)
        _refuse_duplicates(table, names)
        user_ids = item_ids = None
    given = table
    try:
        table = _values(table, adapter.values, transform, threshold)
    except ValueError as exc:  # in the DataFrame's column names (a matrix's messages stay as they are)
        raise ValueError(_user_terms(str(exc), names if isinstance(data, pd.DataFrame) else {})) from None
    if table.empty:
        raise ValueError(_nothing_left(model, adapter.values, given, transform, threshold, names))
    if adapter.values == "real" and len(table) > 1 and table["rating"].nunique() == 1:  # nothing to fit
        of_kind = {k: ", ".join(n for n in models() if ADAPTERS[n].values == k) for k in ("binary", "count")}
        raise ValueError(
            f"{model} models ratings (a Gaussian likelihood), but all {len(table)} values of column "
            f"{names.get('rating', 'rating')!r} are {table['rating'].iloc[0]:g}: one-class data (baskets, clicks, "
            f"purchases) has no rating to fit. Choose a one-class model ({of_kind['binary']}) or a count model "
            f"({of_kind['count']})")
    dropped = _dropped(given, table) if user_ids is None else _no_drops(len(given) - len(table))
    if user_ids is None:
        user_ids, u = np.unique(table["user"].to_numpy(), return_inverse=True)
        item_ids, i = np.unique(table["item"].to_numpy(), return_inverse=True)
    else:
        u, i = table["user"].to_numpy(np.int64), table["item"].to_numpy(np.int64)
    obs = Observations.from_coo(np.asarray(u).reshape(-1), np.asarray(i).reshape(-1), table["rating"].to_numpy(),
                                (len(user_ids), len(item_ids)), kind=adapter.values, dtype=np.float64)
    _warn_dropped(model, dropped, names, transform, threshold)
    stop_after = options.pop("_stop_after", None)
    run_options = {**adapter.defaults, **options}
    fingerprint = None
    if resume_from is not None:
        if not adapter.resumable:
            raise ValueError(f"{model} cannot resume from a checkpoint ({adapter.not_resumable or 'its solver has no checkpoints'}); "
                             "fit it without resume_from")
        ckpt = checkpoint_path(resume_from, model)
        fingerprint = run_fingerprint(adapter, obs, K, seed, run_options, transform=transform, threshold=threshold)
        if ckpt.exists():  # refuse another run's checkpoint before anything is compiled
            saved, _ = base.read_checkpoint_fingerprint(ckpt)
            base.check_fingerprint(ckpt, saved, fingerprint)
        run_options.update(checkpoint=str(ckpt), resume=True)
        if checkpoint_every is not None:
            run_options["checkpoint_every"] = int(checkpoint_every)
    elif checkpoint_every is not None:
        raise ValueError("checkpoint_every needs resume_from (the folder the checkpoints go to)")
    if stop_after is not None and resume_from is None:
        raise ValueError("_stop_after needs resume_from")
    if adapter.precheck is not None:
        adapter.precheck(obs, run_options)
    _warn_if_slow(adapter, obs, K, run_options)
    t1 = time.perf_counter()
    with base.collect_runs() as runs, base.run_fingerprint(fingerprint):
        if stop_after is not None:
            idata = _run_until(adapter, stop_after, seed, obs, K, progress, run_options)
        else:
            idata = adapter.run(seed, obs, K, progress=progress, **run_options)
    t2 = time.perf_counter()
    settings = {"K": K, "seed": int(seed), "transform": transform, "threshold": float(threshold),
                "options": {k: v for k, v in options.items() if isinstance(v, (int, float, str, bool))}}
    if isinstance(data, pd.DataFrame):  # the user's column names: predict / evaluate read them by default
        settings["columns"] = {k: v for k, v in names.items() if isinstance(v, str)}
    fitted = FittedModel(model, idata, np.asarray(user_ids), np.asarray(item_ids), obs.to_scipy().tocsr(), settings)
    summary = _run_summary(fitted, obs, runs[-1] if runs else None, dropped)
    t3 = time.perf_counter()
    summary["seconds"] = _phases(t0, t1, t2, t3, runs[-1] if runs else None)
    settings["summary"] = summary
    _warn_summary(fitted, summary)
    return fitted


def _nothing_left(model: str, kind: str, given: pd.DataFrame, transform: str, threshold: float,
                  names: Mapping[str, str]) -> str:
    """The message of a fit whose value transform left no entry: for a binarization, the threshold,
    how many entries were below it, the largest value and the options that change it."""
    v = given["rating"].to_numpy(np.float64)
    binarized = kind == "binary" and (transform == "binarize" or
                                      (transform == "none" and not np.all(np.isin(v, (0.0, 1.0)))))
    if binarized:
        below = int(np.count_nonzero(v < threshold))
        return (f"data: binarizing the {names['rating']} values at threshold={threshold:g} (values >= "
                f"{threshold:g} become 1, the rest 0, which {model} drops) left no entries: {below} of "
                f"{v.size} entries are below {threshold:g} (largest value {v.max():g}); pass a lower "
                f"threshold (e.g. threshold={v.max():g}), or values that are already 0/1")
    return (f"data: no entries left to fit ({model} drops zero {kind} values; {v.size} entries given, "
            f"{int(np.count_nonzero(v == 0))} of them zero; transform={transform!r}, threshold={threshold!r})")


def valid_options(model: str) -> tuple[str, ...]:
    """The keyword options `fit` passes on to ``model``'s solver, sorted.

    The solver's keyword parameters (and its ``init``'s, where the solver forwards
    ``**init_kwargs``), plus ``hyper``.

    Parameters
    ----------
    model : str
        A name from `models`.

    Returns
    -------
    tuple of str
        Empty when the adapter names no solver, in which case `fit` checks nothing.

    Raises
    ------
    ValueError
        An unknown model.

    Source: project addition (issue 24).
    """
    return tuple(sorted(_solver_parameters(_adapter(model))))


def run_fingerprint(adapter: Adapter | str, obs, K: int, seed: int, options: Mapping[str, Any], *,
                    transform: str = "none", threshold: float = 4.0) -> dict:
    """The fingerprint a checkpoint of this run carries (`validation.frontdoor.api_run.run_fingerprint`).

    Parameters
    ----------
    adapter : Adapter or str
        The front-door adapter, or a model name.
    obs : custom_inference.data.Observations
        The prepared data (hashed).
    K : int
        Latent dimension.
    seed : int
        The fit's seed.
    options : mapping
        Solver options as `fit` passes them.
    transform : str, default "none"
        The value transform (`fit`).
    threshold : float, default 4.0
        The binarization threshold (`fit`).

    Returns
    -------
    dict
        Field -> JSON value (data hash, model, solver, K, seed, options, transform, threshold, dtype,
        package version).

    Raises
    ------
    ValueError
        An unknown model name.

    Source: project addition (issue 24).
    """
    adapter = _adapter(adapter) if isinstance(adapter, str) else adapter
    return _run.run_fingerprint(adapter, obs, K, seed, options, transform=transform, threshold=threshold)


def checkpoint_path(folder, model: str) -> Path:
    """The checkpoint file of ``model`` in the folder ``resume_from``: ``folder/<model>.npz``.

    Parameters
    ----------
    folder : str or pathlib.Path
        The folder (created when the first checkpoint is written).
    model : str
        A name from `models`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        When ``folder`` is an existing file (pass a folder).

    Source: project addition (issue 24).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"resume_from: {folder} is a file; pass a folder (the checkpoint goes to FOLDER/{model}.npz)")
    return folder / f"{model}.npz"


def _run_until(adapter: Adapter, stop_after, seed, obs, K, progress, run_options):
    """Run the adapter and raise `Interrupted` right after the ``stop_after``-th checkpoint write
    (through `custom_inference.base.on_checkpoint`, the drivers' hook): the checkpoint stays, so
    fitting again with the same ``resume_from`` continues from it. Testing aid (``_stop_after``)."""
    from custom_inference import base

    stop_after = int(stop_after)
    if stop_after < 1:
        raise ValueError(f"_stop_after must be an integer >= 1, got {stop_after!r}")
    writes = []

    def hook(path, n_done):
        writes.append(n_done)
        if len(writes) >= stop_after:
            raise base.Interrupted(f"{adapter.name}: stopped after checkpoint {len(writes)} ({n_done} iterations "
                                   f"done, written to {path})")

    with base.on_checkpoint(hook):
        return adapter.run(seed, obs, K, progress=progress, **run_options)


from validation.evaluation.holdout import split  # noqa: E402  (the held-out split of `validation.evaluation.holdout`, as api.split)


def select(model: str, train, **kwargs):
    """Choose K and ``model``'s main hyperparameters on a validation split of ``train``, then refit.

    The validation split is carved from ``train`` (the training part of `split`, never the test
    part); the refit on all of ``train`` uses the choice: `validation.evaluation.selection.select`
    with this module's `fit` and the grid declared with the model (``ModelAdapter.grid`` of
    `validation.frontdoor.api_models`, with its search options). ``select(...).evaluate(test)``
    evaluates the refitted model as `FittedModel.evaluate` does.

    Parameters
    ----------
    model : str
        A name from `models`.
    train : pandas.DataFrame
        The training part of `split`.
    **kwargs
        Grid overrides, split and fit settings of `validation.evaluation.selection.select` (listed
        there; not ``declared``, which is the model's own).

    Returns
    -------
    validation.evaluation.selection.Selection
        The refitted model, the chosen settings and the validation table.

    Raises
    ------
    ValueError
        A model without a declared grid (the message names the models with one), and as
        `validation.evaluation.selection.select` (an axis the model does not search, an empty grid, a
        validation split with no users) and `fit`.

    Source: project addition (issue 27 item 2; issue 25: the grid declared with the model).
    """
    from validation.evaluation.selection import select as _select

    return _select(fit, model, train, declared=_declared_grid(model), **kwargs)


def _declared_grid(model: str):
    """The `validation.evaluation.selection.Grid` declared by ``model``'s adapter; ValueError naming the models
    that declare one (and the declared reason, if ``model`` declares its absence) otherwise."""
    from validation.evaluation.selection import Grid

    _ensure_adapters()
    grid = getattr(ADAPTERS.get(model), "grid", None)
    if isinstance(grid, Grid):
        return grid
    why = getattr(ADAPTERS.get(model), "absent", {}).get("grid")
    with_one = [n for n, a in ADAPTERS.items() if isinstance(getattr(a, "grid", None), Grid)]
    raise ValueError(f"no selection grid for model {model!r}" + (f" (declared absent: {why})" if why else "")
                     + f"; models with one: {', '.join(with_one)}")
