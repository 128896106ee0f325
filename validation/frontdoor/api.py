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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from validation.frontdoor import api_run as _run
from validation.frontdoor.api_run import (_check_options, _dropped, _no_drops, _phases, _refuse_duplicates, _run_summary,
                      _solver_parameters, _warn_dropped, _warn_if_slow, _warn_summary)

__all__ = ["Adapter", "ADAPTERS", "FittedModel", "Interrupted", "RunInterrupted", "fit", "load", "models",
           "run_fingerprint", "valid_options", "checkpoint_path", "split", "select"]

VALUE_KINDS = ("count", "real", "binary")


def __getattr__(name):
    # `Interrupted` lives in custom_inference.base (the drivers raise it through their checkpoint
    # hook); imported lazily so that `import validation.frontdoor.api` stays free of JAX (CLI start-up).
    if name in ("Interrupted", "RunInterrupted"):
        from custom_inference import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Adapter:
    """How the front door drives one model.

    name : registry name (``"hpf"``, ``"hpf-gibbs"``, ``"sbmf"``, ...).
    values : what the model needs, one of ``"count"`` (non-negative integers), ``"real"``
        (any finite rating) or ``"binary"`` (one-class 0/1; positives only are stored).
    run : ``run(key, obs, K, **options) -> arviz.InferenceData`` with a ``posterior`` group.
    mean : ``mean(posterior, rows, cols) -> (S, M) float array``: E[y | parameters] of the M
        (row, col) pairs for each of the S posterior draws (chains stacked); ``posterior`` is a
        dict name -> array (S, ...).
    uncertainty : how the draws were obtained ("posterior draws (Gibbs)", "draws from q (CAVI)",
        "none (point estimate)").
    fold_in : ``fold_in(fitted, obs_new) -> {group: {variable: array}}`` (a callable from
        `validation.frontdoor.api_fold_in`: the new-user parts of the I_new new users, per group of the
        fitted InferenceData, appended by `_extend_users`; the item side unchanged), or a string
        saying why fold-in is not available (see `FittedModel.fold_in`).
    resumable : whether ``fit(..., resume_from=DIR)`` works (the solver writes checkpoints through
        `custom_inference.vi_driver` or `custom_inference.mcmc_driver`; every registered model does).
    defaults : solver options used unless the caller gives them (stated in the README table).
    not_resumable : why a non-resumable model cannot resume (the ValueError of ``resume_from``).
    iterations : the solver option that counts its iterations (``max_iter``, ``n_epochs``, ``n_iter``,
        ``num_samples``): what ``factorbayes fit --max-iter`` sets.
    draws : the solver option with the number of draws from q (VI), or None (samplers keep their
        sweeps; point estimates have one): what ``factorbayes fit --draws`` sets.
    source : seed file and equation of ``mean``.
    solver : ``"module:function"`` of the solver ``run`` calls, whose keyword parameters are the
        options `fit` accepts (listed when an unknown option is given); None: options are not checked.
    faster : for a solver whose every sweep is dense in users x items (batch SIBM), a pair
        (faster model name, seconds per user-item cell per factor per sweep measured here) used to warn
        before a long fit; None: no estimate.
    precheck : ``precheck(obs, options)`` run by `fit` on the prepared `Observations` and the solver
        options before anything is compiled, raising ValueError for data or options the solver cannot
        fit (PSM's fully observed matrix, OVBFM's n_batches above the entries); None: no check.
    """

    name: str
    values: str
    run: Callable
    mean: Callable
    uncertainty: str
    source: str
    fold_in: Any = None
    resumable: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)
    not_resumable: str = ""
    iterations: str = "max_iter"
    draws: str | None = None
    solver: str | None = None
    faster: tuple | None = None
    precheck: Callable | None = None


ADAPTERS: dict[str, Adapter] = {}


def _register(adapter: Adapter) -> Adapter:
    if adapter.values not in VALUE_KINDS:
        raise ValueError(f"{adapter.name}: values must be one of {VALUE_KINDS}")
    ADAPTERS[adapter.name] = adapter
    return adapter


def models() -> tuple[str, ...]:
    """Names accepted by `fit` (and by ``factorbayes fit MODEL``), in registration order.

    Imports `validation.frontdoor.api_models` on first use, which declares the adapters.

    Returns
    -------
    tuple of str
        The model names, e.g. ``("hpf", "hpf-gibbs", "sbmf", ...)``.

    Raises
    ------
    ImportError
        Not of its own: an import error of `validation.frontdoor.api_models` propagates.
    ValueError
        `_register`'s error for an adapter declared with an unknown ``values`` kind (a programming
        error of a declaration, never of the caller).

    Source: project addition (issue 10).
    """
    _ensure_adapters()
    return tuple(ADAPTERS)


def _ensure_adapters() -> None:
    if not ADAPTERS:
        from validation.frontdoor import api_models  # noqa: F401  (declares the adapters on import)


def _adapter(name: str) -> Adapter:
    _ensure_adapters()
    if name not in ADAPTERS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(ADAPTERS)}")
    return ADAPTERS[name]


# ------------------------------------------------------------------------------------------
# data in


def _table(data, *, user_col=None, item_col=None, value_col=None) -> pd.DataFrame:
    """The canonical ratings table of a DataFrame, a scipy.sparse matrix or Observations."""
    return _table_named(data, user_col=user_col, item_col=item_col, value_col=value_col)[0]


_ROLES = {"user": "user", "item": "item", "rating": "value"}


def _user_terms(message: str, names: Mapping[str, str]) -> str:
    """A loader's message about the canonical columns (``user``, ``item``, ``rating``) in the user's
    column names: "column 'rating'" -> "column 'stars' (the value column)", a leading "rating:" ->
    "column 'stars' (the value column):"."""
    for internal, theirs in names.items():
        label = f"column {theirs!r} (the {_ROLES[internal]} column)"
        message = message.replace(f"column {internal!r}", label)
        if message.startswith(f"{internal}:"):
            message = label + message[len(internal):]
    return message


def _table_named(data, *, user_col=None, item_col=None, value_col=None) -> tuple[pd.DataFrame, dict]:
    """(canonical ratings table, {"user": the user's user column, "item": ..., "rating": ...}); the
    names are the canonical ones for a matrix or Observations (rows / columns / stored values).
    Loader errors about the columns are rewritten in the user's column names (`_user_terms`)."""
    import scipy.sparse as sp

    from custom_inference.data import Observations

    from validation.data import datasets

    if isinstance(data, pd.DataFrame):
        cols = list(data.columns)
        user = user_col or ("user" if "user" in cols else None)
        item = item_col or ("item" if "item" in cols else None)
        value = value_col or next((c for c in ("rating", "value", "count") if c in cols), None)
        if user is None or item is None:
            raise ValueError(f"cannot tell the user and item columns of the DataFrame (columns {cols}); "
                             "pass user_col=..., item_col=... (and value_col=...)")
        if value is None:
            df = data.assign(_value=1.0)
            value = "_value"
        else:
            df = data
        names = {"user": user, "item": item, "rating": value}
        try:
            return datasets.ratings_from_dataframe(df, user=user, item=item, value=value, timestamp=None), names
        except ValueError as exc:
            raise ValueError(_user_terms(str(exc), names)) from None
    names = {"user": "row", "item": "column", "rating": "value"}
    if sp.issparse(data):
        return datasets.ratings_from_scipy(data), names
    if isinstance(data, Observations):
        return datasets.ratings_from_scipy(data.to_scipy()), names
    raise TypeError(f"data must be a pandas DataFrame, a scipy.sparse matrix or an Observations, "
                    f"got {type(data).__name__}")


def _observations_table(obs, kind: str, transform: str) -> pd.DataFrame:
    """The ratings table of an `Observations` (ids 0..I-1, 0..J-1), checked in full first (however
    the container was built: `Observations.validate`): ids in range, finite real values of any real
    dtype (converted to float64 here, never computed in float16), no duplicates, not empty; with
    ``transform="none"`` the values must already be what the model takes (counts: non-negative
    integers; binary: 0/1, never binarized silently). Zeros are kept here (real models fit them)."""
    obs.validate("real" if transform != "none" else kind, name="data", float_only=False)
    return pd.DataFrame({"user": np.asarray(obs.rows).astype(np.int64), "item": np.asarray(obs.cols).astype(np.int64),
                         "rating": np.asarray(obs.values).astype(np.float64),
                         "timestamp": np.zeros(obs.nnz, dtype=np.int64)})


def _values(table: pd.DataFrame, kind: str, transform: str, threshold: float) -> pd.DataFrame:
    """`validation.data.loaders.values_for` (the one data preparation, shared with the held-out evaluation)."""
    from validation.data import loaders

    return loaders.values_for(table, kind, transform, threshold)


# ------------------------------------------------------------------------------------------
# the fitted model


def _posterior(idata) -> dict[str, np.ndarray]:
    """Posterior arrays with (chain, draw) stacked into one leading axis S."""
    from custom_inference import arviz_io

    arrays = arviz_io.group_arrays(idata, "posterior")
    return {k: v.reshape((-1, *v.shape[2:])) for k, v in arrays.items()}


def _ids_json(ids: np.ndarray) -> str:
    return json.dumps([x.item() if hasattr(x, "item") else x for x in np.asarray(ids, dtype=object)])


def _ids_from_json(text: str) -> np.ndarray:
    ids = json.loads(text)
    if all(isinstance(x, int) for x in ids):
        return np.asarray(ids, dtype=np.int64)
    return np.asarray(ids, dtype=object)


@dataclass
class FittedModel:
    """A fitted model that keeps the users' own ids from loading to recommending.

    Build with `fit` or `load`; the fields are what `save` writes.

    Parameters
    ----------
    model : str
        The front-door name of the fitted model (one of `models`).
    idata : arviz.InferenceData
        The fit, with a ``posterior`` group of S draws in all (chains x draws).
    user_ids : numpy.ndarray, shape (I,)
        Original user ids (int64 or object for str); ``user_ids[u]`` is row u.
    item_ids : numpy.ndarray, shape (J,)
        Original item ids, as ``user_ids``.
    seen : scipy.sparse.csr_matrix, shape (I, J)
        The training entries, values as fitted (after the transform).
    settings : dict
        K, seed, options, transform, threshold and the run's ``summary``; stored with the artifact.

    Raises
    ------
    None of its own (the fields are not checked on construction; `fit` and `load` build them).

    Source: project addition.
    """

    model: str
    idata: Any
    user_ids: np.ndarray
    item_ids: np.ndarray
    seen: Any
    settings: dict

    def __post_init__(self):
        # the user's ids as the coordinates of every user / item dim (`validation.frontdoor.api_arviz.with_id_coords`)
        from validation.frontdoor import api_arviz

        self.idata = api_arviz.with_id_coords(self.idata, self.user_ids, self.item_ids)

    @property
    def adapter(self) -> Adapter:
        """The front-door `Adapter` of ``model`` (how it is run, scored, folded in).

        Returns
        -------
        Adapter

        Raises
        ------
        ValueError
            For a model name no adapter declares (an artifact of another package version).

        Source: project addition.
        """
        return _adapter(self.model)

    def inference_data(self, *, log_likelihood: bool = True, posterior_predictive: bool = False,
                       observed_data: bool = True, seed: int = 0):
        """The fit as an `arviz.InferenceData` that `az.loo`, `az.waic`, `az.compare` and `az.plot_ppc` use.

        Built on demand in chunks of entries by `validation.frontdoor.api_arviz.inference_data` (shapes
        and attrs there) and cached on this object per argument set; never written into the artifact by
        `save`. Memory: 8 S N bytes per (S, N) group (S draws, N fitted entries).

        Parameters
        ----------
        log_likelihood : bool, default True
            Add the pointwise ``log_likelihood`` group (variable ``y``, dims chain, draw, entry); for VI
            fits it is evaluated under the draws from q (said in the group's attrs).
        posterior_predictive : bool, default False
            Add ``posterior_predictive`` draws of a new y per entry (the model's observation model given
            each draw).
        observed_data : bool, default True
            Add the ``observed_data`` group (the fitted values, dim ``entry`` with ``user`` / ``item``
            coordinates in the user's ids).
        seed : int, default 0
            numpy seed of the posterior-predictive draws.

        Returns
        -------
        arviz.InferenceData
            The posterior (coordinates in the user's ids) plus the groups asked for.

        Raises
        ------
        ValueError
            For a model without a pointwise likelihood (BPR) when ``log_likelihood``, and for PSM's
            ``posterior_predictive``.

        Source: project addition (issue 24); the likelihood of each model is named in
        `validation.frontdoor.api_models.LIKELIHOODS`.
        """
        from validation.frontdoor import api_arviz

        cache = self.__dict__.setdefault("_arviz_cache", {})
        key = (bool(log_likelihood), bool(posterior_predictive), bool(observed_data), int(seed))
        if key not in cache:
            cache.clear()  # one cached object at a time (they can be large)
            cache[key] = api_arviz.inference_data(self, log_likelihood=log_likelihood,
                                                  posterior_predictive=posterior_predictive,
                                                  observed_data=observed_data, seed=seed)
        return cache[key]

    @property
    def uncertainty(self) -> str:
        """How the posterior draws behind every sd and interval were obtained.

        Returns
        -------
        str
            E.g. "posterior draws (Gibbs)", "draws from q (CAVI)", "none (point estimate)".

        Raises
        ------
        ValueError
            As `adapter`.

        Source: project addition.
        """
        return self.adapter.uncertainty

    @property
    def shape(self) -> tuple[int, int]:
        """Users and items known to the model.

        Returns
        -------
        tuple of int
            (I, J).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return (len(self.user_ids), len(self.item_ids))

    def summary(self) -> dict:
        """What the fit did, as written by `fit` (kept in ``settings["summary"]``, so it survives `save` / `load`).

        Returns
        -------
        dict
            A deep copy, JSON values:

            - ``model``, ``K``, ``uncertainty``;
            - ``data``: ``users``, ``items``, ``entries`` fitted; ``dropped_users`` / ``dropped_items``
              (count) and ``dropped_user_ids`` / ``dropped_item_ids`` (up to 5, the user's ids) left
              without entries by the value transform, ``dropped_entries``;
            - ``iterations``: ``option`` (the solver option that counts them), ``driver`` ("vi",
              "mcmc", or "solver" for a loop outside the drivers), ``run`` and ``max`` (VI sweeps or
              epochs; sampler units of ``thin`` sweeps per chain, warm-up included), ``resumed_from``
              (iterations read from a checkpoint; 0 for a fresh fit); VI: ``converged`` (the tolerance
              stopped it) or not (stopped at the cap), ``tol``, ``last_rel_change``; samplers:
              ``warmup``, ``chains``, ``thin``;
            - ``diagnostics`` (samplers): rank-normalized split ``rhat_max`` and ``ess_bulk_min`` /
              ``ess_tail_min`` (ArviZ) over the predicted E[y] at up to `DIAGNOSTIC_CELLS` training
              cells (identified quantities, not the factors), ``cells_rhat_over_1_01``;
            - ``seconds``: wall seconds per phase: ``prepare_data`` (table, transform, checks,
              fingerprint), ``fit`` (the solver call, compilation included), within it ``before_loop``
              (initialisation), ``loop`` (the driver's iterations), ``first_iteration_with_compilation``
              and ``after_loop`` (draws from q, building the InferenceData), then ``summary`` (the
              diagnostics) and ``total``.

            An empty dict for a model loaded from an artifact written before the summary existed.

        Raises
        ------
        None.

        Source: project addition (issue 24).
        """
        return json.loads(json.dumps(self.settings.get("summary", {}), default=str))

    def summary_text(self) -> str:
        """`summary` as a few lines of text for a terminal (the CLI prints it).

        Returns
        -------
        str
            One line per part of the summary (data, iterations and convergence, diagnostics, seconds).

        Raises
        ------
        None.

        Source: project addition (issue 24).
        """
        s = self.summary()
        if not s:
            return f"{self.model}: no run summary (an artifact from before factorbayes wrote one)"
        d, it, sec = s["data"], s["iterations"], s.get("seconds", {})
        lines = [f"{s['model']} K={s['K']}: {d['users']} users x {d['items']} items, {d['entries']} entries; "
                 f"uncertainty: {s['uncertainty']}"]
        for w in ("user", "item"):
            if d[f"dropped_{w}s"]:
                lines.append(f"  dropped by the transform: {d[f'dropped_{w}s']} {w}(s), e.g. {d[f'dropped_{w}_ids']}")
        if it.get("run") is not None:
            line = f"  iterations: {it['run']} of {it.get('max')} ({it['option']})"
            if it.get("resumed_from"):
                line += f", resumed from {it['resumed_from']}"
            if "converged" in it:
                line += ("; converged" if it["converged"] else "; NOT converged (stopped at the cap)")
            if "last_rel_change" in it:
                line += f", last relative change {it['last_rel_change']:.3g} (tol {it['tol']:g})"
            lines.append(line)
        diag = s.get("diagnostics")
        if diag and "rhat_max" in diag:
            lines.append(f"  R-hat max {diag['rhat_max']:.3f}, bulk ESS min {diag['ess_bulk_min']:.0f}, tail ESS min "
                         f"{diag['ess_tail_min']:.0f} ({diag['quantity']}; {diag['chains']} chains x "
                         f"{diag['draws_per_chain']} draws)")
        if sec:
            lines.append("  seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in sec.items()))
        return "\n".join(lines)

    def _lookup(self, which: str) -> dict:
        """id -> position of the users or items, built once per fitted model (ids as Python scalars)."""
        cache = self.__dict__.setdefault("_lookups", {})
        if which not in cache:
            universe = self.user_ids if which == "user" else self.item_ids
            cache[which] = {(x.item() if hasattr(x, "item") else x): k for k, x in enumerate(universe)}
        return cache[which]

    def _index(self, ids, which: str) -> np.ndarray:
        universe = self.user_ids if which == "user" else self.item_ids
        lookup = self._lookup(which)
        out = np.empty(len(ids), dtype=np.int64)
        for n, x in enumerate(ids):
            key = x.item() if hasattr(x, "item") else x
            if key not in lookup and isinstance(key, str) and key.lstrip("-").isdigit():
                key = int(key)
            if key not in lookup and not isinstance(key, str):
                key = str(key)
            if key not in lookup:
                raise KeyError(f"unknown {which} id {x!r} (the model knows {len(universe)} {which}s, "
                               f"e.g. {[u.item() if hasattr(u, 'item') else u for u in universe[:3]]})")
            out[n] = lookup[key]
        return out

    def _draw_means(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        post = _posterior(self.idata)
        return np.asarray(self.adapter.mean(post, rows, cols, dict(self.idata.posterior.attrs)), dtype=np.float64)

    def predict(self, pairs, *, interval: float = 0.9, means: str = "draws", kind: str = "mean",
                seed: int = 0) -> pd.DataFrame:
        """Posterior mean, sd and a central credible interval of E[y_ui], or of a new y_ui, per pair.

        Computed by `validation.frontdoor.scoring.predict` in chunks of bounded memory.

        Parameters
        ----------
        pairs : pandas.DataFrame or sequence of (user, item) tuples
            M pairs in original ids (a DataFrame with columns ``user`` and ``item``).
        interval : float in (0, 1), default 0.9
            Mass of the central credible interval.
        means : {"draws", "q"}, default "draws"
            "draws": over the stored draws; "q": the closed-form mean under q where it exists (HPF
            CAVI); sd and interval still come from the draws.
        kind : {"mean", "observation"}, default "mean"
            "mean": E[y_ui] given the parameters; "observation": a new observation y_ui (the posterior
            predictive: draws of y from the model's observation model given each draw; wider, since it
            adds the observation noise).
        seed : int, default 0
            numpy seed of the observation draws (``kind="observation"``).

        Returns
        -------
        pandas.DataFrame
            M rows: user, item, mean, sd, lower, upper (float64, in the units of the fitted values),
            method (how the draws were obtained). For point estimates (MAP, SGD) sd = 0 and the
            interval is the point.

        Raises
        ------
        KeyError
            An unknown user or item id.
        ValueError
            A bad ``interval``, ``means`` or ``kind``; ``kind="observation"`` for a model without an
            observation model (BPR, PSM).

        Source: project addition (issue 24).
        """
        from validation.frontdoor import scoring

        return scoring.predict(self, pairs, interval=interval, means=means, kind=kind, seed=seed)

    def recommend(self, users, N: int = 10, *, exclude_seen: bool = True, means: str = "draws",
                  max_bytes: int | None = None, sd: bool = True) -> pd.DataFrame:
        """Top-``N`` items per user by posterior mean score, with the score's posterior sd.

        Work: per user one pass over the J items (`validation.frontdoor.scoring.recommend`, chunked over
        users); never an I x J array. Memory kept between calls: `validation.frontdoor.scoring.cache_bytes`
        (no copy of the draws).

        Parameters
        ----------
        users : user id or list of user ids
            Original ids.
        N : int >= 1, default 10
            Items per user.
        exclude_seen : bool, default True
            Leave out the user's training items.
        means : {"draws", "q"}, default "draws"
            "draws": mean over the stored draws; "q": the closed form under q where it exists (HPF CAVI).
        max_bytes : int, optional
            Bound on the scoring's temporary arrays, in bytes (default
            `validation.frontdoor.scoring.MAX_BYTES`, 256 MiB).
        sd : bool, default True
            Compute the sd column (False skips the pass over the draws and leaves the column out).

        Returns
        -------
        pandas.DataFrame
            One row per (user, rank): user (the model's id, in its dtype), rank (1..N), item (original
            id), score (posterior mean of E[y_ui]), sd (its posterior sd).

        Raises
        ------
        KeyError
            An unknown user id.
        ValueError
            N < 1, a bad ``means``, or a ``max_bytes`` too small for one user.

        Source: project addition (issue 24).
        """
        from validation.frontdoor import scoring

        return scoring.recommend(self, users, N, exclude_seen=exclude_seen, means=means, sd=sd,
                                 max_bytes=scoring.MAX_BYTES if max_bytes is None else max_bytes)

    def evaluate(self, test, **kwargs) -> pd.DataFrame:
        """Held-out metrics of this model next to popularity and EASE^R on its own training data.

        With standard errors and paired bootstrap intervals against the better baseline:
        `validation.evaluation.holdout.evaluate`.

        Parameters
        ----------
        test : pandas.DataFrame
            The held-out part of `split` (original ids; users unknown to the model are reported).
        **kwargs
            Passed to `validation.evaluation.holdout.evaluate` (list length N, metrics, bootstrap
            settings; listed there).

        Returns
        -------
        pandas.DataFrame
            One row per system and metric, as `validation.evaluation.holdout.evaluate` returns.

        Raises
        ------
        ValueError
            As `validation.evaluation.holdout.evaluate`: a bad N, a test entry the model was fitted
            on, nothing left to evaluate.
        TypeError
            ``test`` not a pandas DataFrame.

        Source: project addition (issues 24, 27).
        """
        from validation.evaluation.holdout import evaluate

        return evaluate(self, test, **kwargs)

    def fold_in(self, new_user_rows, *, user_col: str | None = None, item_col: str | None = None,
                value_col: str | None = None) -> "FittedModel":
        """Add new users to the fitted model without refitting the items.

        The new users' user-side posterior comes from the adapter's fold-in
        (`validation.frontdoor.api_fold_in`); the item side and the global parameters are the fitted ones.
        Per kind of fit:

        - samplers (HPF Gibbs, BPMF, SBMF, MCMC-FM, NPFM, PPFM): per kept draw, the new users drawn from
          the sampler's own complete conditionals given that draw's item side and hyperparameters
          (`validation.frontdoor.api_fold_in._fold_in_per_draw`; BPMF one exact Gaussian draw, the others
          `FOLD_IN_SWEEPS` Gibbs sweeps of the new users' block);
        - variational fits (HPF CAVI, VBFM, OVBFM, SIBM batch VB and SVI): the new users' q by the
          solver's own coordinate updates with the rest of q frozen, to convergence, then as many draws
          from q as the fitted posterior holds;
        - point estimates (SGD-FM, SIBM MAP, BPR): the unique optimum of the fit's objective in the new
          users' parameters (ridge solve; Newton).

        RG and PSM cannot fold in (their adapters give the reason).

        Parameters
        ----------
        new_user_rows : pandas.DataFrame
            The new users' entries: a user, an item and optionally a value column, in original ids;
            every user must be new, every item known to the model. Values go through the fit's transform
            (``settings["transform"]``, ``settings["threshold"]``).
        user_col, item_col, value_col : str, optional
            Column names, as in `fit`.

        Returns
        -------
        FittedModel
            Over the I + I_new users (the old users first, unchanged; for the factorization machines the
            new users' one-hot features are inserted after the fitted users' and
            ``front_door_n_users`` grows).

        Raises
        ------
        NotImplementedError
            For models whose adapter has no fold-in (``Adapter.fold_in`` is a string: the reason).
        ValueError
            A user id the model already knows, no entries, or (from the adapter) an artifact that lacks
            what its fold-in reads.
        KeyError
            An unknown item id.

        Source: project addition; the updates are the seeds' (each function of
        `validation.frontdoor.api_fold_in` names its equations).
        """
        from custom_inference.data import Observations

        how = self.adapter.fold_in
        if not callable(how):
            raise NotImplementedError(f"{self.model}: fold_in is not available: {how or 'not implemented'}")
        table = _table(new_user_rows, user_col=user_col, item_col=item_col, value_col=value_col)
        table = _values(table, self.adapter.values, self.settings.get("transform", "none"),
                        float(self.settings.get("threshold", 4.0)))
        if table.empty:
            raise ValueError("new_user_rows: no entries left to fold in (after the value transform)")
        new_ids, u = np.unique(table["user"].to_numpy(), return_inverse=True)
        old = {(x.item() if hasattr(x, "item") else x) for x in self.user_ids}
        known = [x for x in new_ids.tolist() if x in old]
        if known:
            raise ValueError(f"new_user_rows: user ids already in the model: {known[:5]}; fold_in adds new users only")
        cols = self._index(table["item"].tolist(), "item")
        I_new, J = len(new_ids), len(self.item_ids)
        obs = Observations.from_coo(np.asarray(u).reshape(-1), cols, table["rating"].to_numpy(), (I_new, J),
                                    kind=self.adapter.values, dtype=np.float64)
        groups = how(self, obs)  # group name -> {variable: array with the new users on the "user" axis}
        idata = _extend_users(self.idata, groups, I_new)
        seen = _stack_rows(self.seen, obs.to_scipy().tocsr())
        user_ids = np.concatenate([np.asarray(self.user_ids, dtype=object), np.asarray(new_ids, dtype=object)])
        if all(isinstance(x, (int, np.integer)) for x in user_ids):
            user_ids = user_ids.astype(np.int64)
        settings = {**self.settings, "folded_in_users": int(self.settings.get("folded_in_users", 0)) + I_new}
        return FittedModel(self.model, idata, user_ids, self.item_ids, seen, settings)

    def save(self, path) -> Path:
        """Write one netCDF artifact: the InferenceData plus a ``front_door`` group.

        The group holds the id maps, the training entries, the model name, the settings and the package
        version. Atomic (temp file + rename); the file is readable as the user's umask allows.

        Parameters
        ----------
        path : str or pathlib.Path
            The file to write (its folder must exist).

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        OSError
            If it cannot be written.

        Source: project addition (issues 10, 24).
        """
        import importlib.metadata
        import os
        import tempfile

        from custom_inference import base

        import xarray as xr

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        seen = self.seen.tocoo()
        fd = xr.Dataset({"seen_row": ("entry", seen.row.astype(np.int64)),
                         "seen_col": ("entry", seen.col.astype(np.int64)),
                         "seen_value": ("entry", seen.data.astype(np.float64))})
        try:
            version = importlib.metadata.version("factorbayes")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        fd.attrs.update({"model": self.model, "user_ids": _ids_json(self.user_ids),
                         "item_ids": _ids_json(self.item_ids), "settings": json.dumps(self.settings, default=str),
                         "factorbayes_version": version})
        idata = self.idata.copy()
        with _quiet():
            idata.add_groups({"front_door": fd})
        for group in idata.groups():
            ds = idata[group]
            for k, v in list(ds.attrs.items()):
                if isinstance(v, (bool, np.bool_)):
                    ds.attrs[k] = int(v)
        fd_handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        os.close(fd_handle)
        try:
            idata.to_netcdf(tmp)
            base.usual_file_mode(tmp)  # mkstemp's 0o600 -> 0o666 less the umask, as for any file the user writes
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path


def _stack_rows(a, b):
    import scipy.sparse as sp

    return sp.vstack([a, b]).tocsr()


def _extend_users(idata, groups: Mapping[str, Mapping[str, np.ndarray]], n_new: int):
    """A copy of ``idata`` whose groups in ``groups`` hold the ``n_new`` new users too: every variable
    with a ``user`` dim gets the given array (same dims, the new users on the ``user`` axis) appended;
    for the factorization machines' one-hot ids design (a ``front_door_n_users`` attr I on the
    posterior: features 0..I-1 are the users, the items follow), every variable with a ``feature`` dim
    gets the new users' features inserted after the I fitted users, and ``front_door_n_users``
    becomes I + n_new in every group that carries it. Variables with neither dim are unchanged.
    Raises ValueError when a user-side variable has no new part."""
    import arviz as az
    import xarray as xr

    n_users = idata.posterior.attrs.get("front_door_n_users")
    out = {}
    for g in idata.groups():
        ds = idata[g]
        attrs = dict(ds.attrs)
        if "front_door_n_users" in attrs:
            attrs["front_door_n_users"] = int(attrs["front_door_n_users"]) + n_new
        if g not in groups:
            out[g] = ds.assign_attrs(attrs) if attrs != dict(ds.attrs) else ds
            continue
        new = groups[g]
        data_vars, sizes = {}, {}
        for name, da in ds.data_vars.items():
            dim = "user" if "user" in da.dims else ("feature" if "feature" in da.dims and n_users is not None else None)
            if dim is None:
                data_vars[name] = (da.dims, da.values)
                continue
            if name not in new:
                raise ValueError(f"fold_in: no new-user part of {g}.{name}")
            add = np.asarray(new[name], dtype=da.dtype)
            axis = da.dims.index(dim)
            at = da.shape[axis] if dim == "user" else int(n_users)
            vals = da.values
            data_vars[name] = (da.dims, np.concatenate([np.take(vals, np.arange(at), axis=axis), add,
                                                        np.take(vals, np.arange(at, vals.shape[axis]), axis=axis)], axis=axis))
            sizes[dim] = data_vars[name][1].shape[axis]
        coords = {d: ds.coords[d].values for d in ds.coords if d not in sizes}
        coords.update({d: np.arange(n) for d, n in sizes.items()})
        out[g] = xr.Dataset(data_vars, coords=coords, attrs=attrs)
    with _quiet():
        return az.InferenceData(**out)


def _quiet():
    import warnings

    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")

    class _C:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            ctx.__exit__(*exc)

    return _C()


def load(path) -> FittedModel:
    """Read an artifact written by `FittedModel.save`.

    Parameters
    ----------
    path : str or pathlib.Path
        The netCDF file.

    Returns
    -------
    FittedModel
        Same recommendations and predictions as before saving: ``user_ids`` (I,) and ``item_ids``
        (J,) int64 when every saved id is an int, else object arrays; ``seen`` a
        scipy.sparse.csr_matrix (I, J) of the saved training values.

    Raises
    ------
    FileNotFoundError
        No such file, or a folder.
    ValueError
        Naming the file, when it is not a factorbayes artifact (not netCDF / HDF5 at all, or a netCDF
        file without a ``front_door`` group) or is damaged (unreadable, truncated, or a
        ``front_door`` group missing its parts).

    Source: project addition (issue 10; messages issue 24).
    """
    import scipy.sparse as sp

    from custom_inference import arviz_io

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise FileNotFoundError(f"{path} is a folder; pass the artifact file (e.g. {path}/<model>.nc)")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if not (head.startswith(b"\x89HDF\r\n\x1a\n") or head.startswith(b"CDF")):
        raise ValueError(f"{path} is not a factorbayes artifact (not a netCDF file; artifacts are written by "
                         "FittedModel.save or `factorbayes fit --out`)")
    try:
        idata = arviz_io.load(path)
    except Exception as exc:  # h5py / netCDF4 errors: OSError, RuntimeError, ValueError, KeyError
        raise ValueError(f"{path}: a damaged factorbayes artifact or another netCDF file that cannot be read "
                         f"({type(exc).__name__}: {str(exc)[:200]}); write it again with FittedModel.save") from exc
    if "front_door" not in idata.groups():
        raise ValueError(f"{path} is not a factorbayes artifact (a netCDF file without a front_door group); "
                         "write it with FittedModel.save")
    try:
        fd = idata["front_door"]
        user_ids, item_ids = _ids_from_json(fd.attrs["user_ids"]), _ids_from_json(fd.attrs["item_ids"])
        seen = sp.csr_matrix((np.asarray(fd["seen_value"]), (np.asarray(fd["seen_row"]), np.asarray(fd["seen_col"]))),
                             shape=(len(user_ids), len(item_ids)))
        model = str(fd.attrs["model"])
        settings = json.loads(fd.attrs["settings"])
    except Exception as exc:  # KeyError (a missing part), ValueError / JSON (damaged attrs), OSError (reads)
        raise ValueError(f"{path}: a damaged factorbayes artifact ({type(exc).__name__}: {str(exc)[:200]} in its "
                         "front_door group); write it again with FittedModel.save") from exc
    with _quiet():
        del idata["front_door"]
    return FittedModel(model, idata, user_ids, item_ids, seen, settings)


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
        valid ones listed; ``resume_from`` with a non-resumable model (the reason),
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
    with this module's `fit`. ``select(...).evaluate(test)`` evaluates the refitted model as
    `FittedModel.evaluate` does.

    Parameters
    ----------
    model : str
        A name from `models`.
    train : pandas.DataFrame
        The training part of `split`.
    **kwargs
        Grids, split and fit settings of `validation.evaluation.selection.select` (listed there).

    Returns
    -------
    validation.evaluation.selection.Selection
        The refitted model, the chosen settings and the validation table.

    Raises
    ------
    ValueError
        As `validation.evaluation.selection.select` (an empty grid, a validation split with no
        users) and `fit`.

    Source: project addition (issue 27 item 2).
    """
    from validation.evaluation.selection import select as _select

    return _select(fit, model, train, **kwargs)
