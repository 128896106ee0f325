"""The front door: fit any model by name on the data users have, then recommend, predict,
save and load in the users' own ids.

    from validation import api
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

__all__ = ["Adapter", "ADAPTERS", "FittedModel", "Interrupted", "fit", "load", "models"]

VALUE_KINDS = ("count", "real", "binary")


def __getattr__(name):
    # `Interrupted` lives in custom_inference.base (the drivers raise it through their checkpoint
    # hook); imported lazily so that `import validation.api` stays free of JAX (CLI start-up).
    if name == "Interrupted":
        from custom_inference.base import Interrupted

        return Interrupted
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
        `validation.api_fold_in`: the new-user parts of the I_new new users, per group of the
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


ADAPTERS: dict[str, Adapter] = {}


def _register(adapter: Adapter) -> Adapter:
    if adapter.values not in VALUE_KINDS:
        raise ValueError(f"{adapter.name}: values must be one of {VALUE_KINDS}")
    ADAPTERS[adapter.name] = adapter
    return adapter


def models() -> tuple[str, ...]:
    """Names accepted by `fit` (and by ``factorbayes fit MODEL``): a tuple of str, in registration
    order (imports `validation.api_models` on first use, which declares the adapters).

    Raises nothing of its own; an import error of `validation.api_models` propagates, and so does
    `_register`'s ValueError for an adapter declared with an unknown ``values`` kind (a programming
    error). Source: project addition (issue 10).
    """
    _ensure_adapters()
    return tuple(ADAPTERS)


def _ensure_adapters() -> None:
    if not ADAPTERS:
        from . import api_models  # noqa: F401  (declares the adapters on import)


def _adapter(name: str) -> Adapter:
    _ensure_adapters()
    if name not in ADAPTERS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(ADAPTERS)}")
    return ADAPTERS[name]


# ------------------------------------------------------------------------------------------
# data in


def _table(data, *, user_col=None, item_col=None, value_col=None) -> pd.DataFrame:
    """The canonical ratings table of a DataFrame, a scipy.sparse matrix or Observations."""
    import scipy.sparse as sp

    from custom_inference.data import Observations

    from . import datasets

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
        return datasets.ratings_from_dataframe(df, user=user, item=item, value=value, timestamp=None)
    if sp.issparse(data):
        return datasets.ratings_from_scipy(data)
    if isinstance(data, Observations):
        return datasets.ratings_from_scipy(data.to_scipy())
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
    """The table's values made what the model needs (`validation.loaders.transform`, then the
    model's own check): binary models binarize at ``threshold`` unless the values are already
    0/1; count models refuse non-integers (the error names the transforms); zeros are dropped."""
    from . import datasets

    if kind == "binary" and transform == "none":
        v = table["rating"].to_numpy(dtype=np.float64)
        transform = "none" if np.all(np.isin(v, (0.0, 1.0))) else "binarize"
    elif kind == "count" and transform == "none":
        transform = "error"
    elif kind == "real" and transform != "none":
        raise ValueError(f"transform={transform!r} applies to count and binary models only")
    out = datasets.transform(table, transform, threshold)
    return out[out["rating"] != 0] if kind in ("count", "binary") else out


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

    model : registry name; idata : arviz.InferenceData (``posterior`` group with S draws in all);
    user_ids : (I,) original user ids (int64 or str), ``user_ids[u]`` is row u; item_ids : (J,);
    seen : scipy.sparse.csr_matrix (I, J) of the training entries (values as fitted);
    settings : dict (K, seed, options, transform) stored with the artifact.

    Build with `fit` or `load`. Source: project addition.
    """

    model: str
    idata: Any
    user_ids: np.ndarray
    item_ids: np.ndarray
    seen: Any
    settings: dict

    @property
    def adapter(self) -> Adapter:
        return _adapter(self.model)

    @property
    def uncertainty(self) -> str:
        """How the posterior draws behind every sd and interval were obtained."""
        return self.adapter.uncertainty

    @property
    def shape(self) -> tuple[int, int]:
        """(I, J): users and items known to the model."""
        return (len(self.user_ids), len(self.item_ids))

    def _index(self, ids, which: str) -> np.ndarray:
        universe = self.user_ids if which == "user" else self.item_ids
        lookup = {(x.item() if hasattr(x, "item") else x): k for k, x in enumerate(universe)}
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

    def predict(self, pairs, *, interval: float = 0.9) -> pd.DataFrame:
        """Posterior mean, sd and a central ``interval`` credible interval of E[y_ui] per pair.

        pairs : DataFrame with columns ``user`` and ``item`` (original ids), or a sequence of
            (user, item) tuples; M pairs.
        Returns a DataFrame (M rows): user, item, mean, sd, lower, upper (float64, in the units
        of the fitted values), method (how the draws were obtained). For point estimates
        (MAP, SGD) sd = 0 and the interval is the point.
        Raises KeyError for an unknown id, ValueError for a bad interval.
        """
        if not 0 < interval < 1:
            raise ValueError(f"interval must be in (0, 1), got {interval!r}")
        if isinstance(pairs, pd.DataFrame):
            users, items = pairs["user"].tolist(), pairs["item"].tolist()
        else:
            pairs = list(pairs)
            users, items = [p[0] for p in pairs], [p[1] for p in pairs]
        rows, cols = self._index(users, "user"), self._index(items, "item")
        draws = self._draw_means(rows, cols)
        lo, hi = np.quantile(draws, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
        return pd.DataFrame({"user": users, "item": items, "mean": draws.mean(axis=0),
                             "sd": draws.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros(len(rows)),
                             "lower": lo, "upper": hi, "method": self.uncertainty})

    def recommend(self, users, N: int = 10, *, exclude_seen: bool = True, batch_cells: int = 20_000_000) -> pd.DataFrame:
        """Top-``N`` items per user by posterior mean score, with the score's posterior sd.

        users : one id or a list of original user ids; N : int >= 1 items per user;
        exclude_seen : leave out the user's training items (default True).
        Returns a DataFrame, one row per (user, rank): user, rank (1..N), item (original id),
        score (posterior mean of E[y_ui]), sd (its posterior sd). Work: O(S J K) per user, in
        batches of at most ``batch_cells`` draw-cells; never an I x J array.
        Raises KeyError for an unknown user id, ValueError for N < 1.
        """
        if isinstance(users, (str, int, np.integer)):
            users = [users]
        users = list(users)
        if isinstance(N, bool) or int(N) != N or N < 1:
            raise ValueError(f"N must be an integer >= 1, got {N!r}")
        rows = self._index(users, "user")
        J = len(self.item_ids)
        S = _posterior(self.idata)[next(iter(self.idata.posterior.data_vars))].shape[0]
        per = max(1, int(batch_cells // max(S * J, 1)))
        out = []
        for start in range(0, len(rows), per):
            block = rows[start:start + per]
            r = np.repeat(block, J)
            c = np.tile(np.arange(J), block.size)
            draws = self._draw_means(r, c).reshape(-1, block.size, J)
            mean = draws.mean(axis=0)
            sd = draws.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros_like(mean)
            for b, u in enumerate(block):
                score = mean[b].copy()
                if exclude_seen:
                    lo, hi = self.seen.indptr[u], self.seen.indptr[u + 1]
                    score[self.seen.indices[lo:hi]] = -np.inf
                n = min(int(N), int(np.isfinite(score).sum()))
                top = np.argsort(-score, kind="stable")[:n]
                for rank, i in enumerate(top, start=1):
                    out.append((users[start + b], rank, self.item_ids[i], float(mean[b, i]), float(sd[b, i])))
        df = pd.DataFrame(out, columns=["user", "rank", "item", "score", "sd"])
        return df

    def fold_in(self, new_user_rows, *, user_col: str | None = None, item_col: str | None = None,
                value_col: str | None = None) -> "FittedModel":
        """Add new users to the fitted model without refitting the items.

        new_user_rows : DataFrame of the new users' entries (a user, an item and optionally a value
            column, named as in `fit`: ``user_col`` / ``item_col`` / ``value_col``), in original ids;
            every user must be new, every item known to the model. Values go through the fit's
            transform (``settings["transform"]``, ``settings["threshold"]``).
        Returns a new FittedModel over the I + I_new users (the old users first, unchanged; for the
        factorization machines the new users' one-hot features are inserted after the fitted users'
        and ``front_door_n_users`` grows): the new users' user-side posterior comes from the
        adapter's fold-in (`validation.api_fold_in`), the item side and the global parameters are
        the fitted ones. Per kind of fit:

        - samplers (HPF Gibbs, BPMF, SBMF, MCMC-FM, NPFM, PPFM): per kept draw, the new users drawn
          from the sampler's own complete conditionals given that draw's item side and
          hyperparameters (`validation.api_fold_in._fold_in_per_draw`; BPMF one exact Gaussian draw,
          the others `FOLD_IN_SWEEPS` Gibbs sweeps of the new users' block);
        - variational fits (HPF CAVI, VBFM, OVBFM, SIBM batch VB and SVI): the new users' q by the
          solver's own coordinate updates with the rest of q frozen, to convergence, then as many
          draws from q as the fitted posterior holds;
        - point estimates (SGD-FM, SIBM MAP, BPR): the unique optimum of the fit's objective in the
          new users' parameters (ridge solve; Newton).

        RG and PSM cannot fold in (their adapters give the reason).

        Raises NotImplementedError naming the reason for models whose adapter has no fold-in
        (``Adapter.fold_in`` is a string), ValueError for a user id the model already knows or no
        entries (and from the adapter, e.g. an artifact that lacks what its fold-in reads), KeyError
        for an unknown item id. Source: project addition; the updates are the seeds' (each function
        of `validation.api_fold_in` names its equations).
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
        """Write one netCDF artifact: the InferenceData plus a ``front_door`` group (id maps, the
        training entries, model name, settings, package version). Atomic (temp file + rename).
        Returns the path. Raises OSError if it cannot be written."""
        import importlib.metadata
        import os
        import tempfile

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

    path : str or Path of the netCDF file.
    Returns the FittedModel (same recommendations and predictions as before saving): user_ids (I,)
    and item_ids (J,) int64 when every saved id is an int, else object arrays; ``seen`` a
    scipy.sparse.csr_matrix (I, J) of the saved training values.
    Raises FileNotFoundError (no such file), ValueError (a netCDF file without a front_door group);
    a file that is not netCDF propagates the reader's error from `arviz.from_netcdf` (OSError or
    ValueError), and a front_door group missing its attrs a KeyError.
    Source: project addition (issue 10).
    """
    import scipy.sparse as sp

    from custom_inference import arviz_io

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    idata = arviz_io.load(path)
    if "front_door" not in idata.groups():
        raise ValueError(f"{path}: not a factorbayes model artifact (no front_door group); write it with FittedModel.save")
    fd = idata["front_door"]
    user_ids, item_ids = _ids_from_json(fd.attrs["user_ids"]), _ids_from_json(fd.attrs["item_ids"])
    seen = sp.csr_matrix((np.asarray(fd["seen_value"]), (np.asarray(fd["seen_row"]), np.asarray(fd["seen_col"]))),
                         shape=(len(user_ids), len(item_ids)))
    model = str(fd.attrs["model"])
    settings = json.loads(fd.attrs["settings"])
    with _quiet():
        del idata["front_door"]
    return FittedModel(model, idata, user_ids, item_ids, seen, settings)


def fit(model: str, data, K: int = 10, seed: int = 0, *, user_col: str | None = None, item_col: str | None = None,
        value_col: str | None = None, transform: str = "none", threshold: float = 4.0,
        resume_from=None, checkpoint_every: int | None = None, progress: bool = True, **options) -> FittedModel:
    """Fit ``model`` on the user's data and keep the id maps.

    Parameters
    ----------
    model : a name from `models()`: counts "hpf", "hpf-gibbs", "npfm", "ppfm", "psm"; real ratings
        "sbmf", "bpmf", "mcmc-fm", "vbfm", "ovbfm", "sgd-fm"; one-class (binary) "sibm", "sibm-svi",
        "sibm-map", "rg", "bpr".
    data : pandas DataFrame with a user, an item and (optionally) a value column (names from
        ``user_col`` / ``item_col`` / ``value_col``, else "user", "item", "rating"|"value"|"count";
        no value column means one-class data, every row a 1); a users x items scipy.sparse matrix;
        or an `Observations` (ids 0..I-1, 0..J-1).
    K : int >= 1, the latent dimension. seed : int, fixes every random choice of the fit.
    transform : what to do with values the model cannot take: "none" (values as given; count
        models refuse non-integers, binary models binarize at ``threshold``), "round", "double"
        (half stars -> integer counts), "binarize" (value >= ``threshold`` -> 1, else dropped),
        "error" (refuse anything the model cannot take as is).
    resume_from : a folder for checkpoints (the file is ``resume_from/<model>.npz``, `checkpoint_path`):
        the fit writes its state there every ``checkpoint_every`` iterations (atomically) and, when
        a checkpoint exists, continues from it; an interrupted and resumed fit equals the
        uninterrupted one bit for bit (tests/validation/test_api.py). Only for models whose
        adapter is resumable (``ADAPTERS[name].resumable``; the others raise ValueError with the
        reason). checkpoint_every : int >= 1, in the driver's unit: VI sweeps or epochs
        (`custom_inference.vi_driver`), blocks of sampler units (`custom_inference.mcmc_driver`);
        default the solver's (10).
    options : passed to the model's solver (e.g. ``num_samples``, ``max_iter``, ``hyper``) over
        the adapter's ``defaults``. ``_stop_after=n`` (testing aid, with ``resume_from``) raises
        `Interrupted` right after the n-th checkpoint write, through the drivers' hook
        (`custom_inference.base.on_checkpoint`), as a killed run would stop.

    Returns FittedModel. Raises ValueError / TypeError for bad input (naming the field and the
    fix), before any computation; ValueError for ``resume_from`` with a non-resumable model, or
    ``checkpoint_every`` / ``_stop_after`` without ``resume_from``; `Interrupted` (``_stop_after``).
    Source: project addition.
    """
    from custom_inference.base import check_latent_dim
    from custom_inference.data import Observations

    from . import datasets

    adapter = _adapter(model)
    K = check_latent_dim(K)
    if transform not in ("none", "round", "double", "binarize", "error"):
        raise ValueError(f"transform must be one of none, round, double, binarize, error; got {transform!r}")
    if isinstance(data, Observations):
        table = _observations_table(data, adapter.values, transform)
        user_ids, item_ids = np.arange(data.n_rows), np.arange(data.n_cols)
    else:
        table = _table(data, user_col=user_col, item_col=item_col, value_col=value_col)
        user_ids = item_ids = None
    table = _values(table, adapter.values, transform, threshold)
    if table.empty:
        raise ValueError(f"data: no entries left to fit ({model} drops zero {adapter.values} values; "
                         f"transform={transform!r}, threshold={threshold!r})")
    if user_ids is None:
        user_ids, u = np.unique(table["user"].to_numpy(), return_inverse=True)
        item_ids, i = np.unique(table["item"].to_numpy(), return_inverse=True)
    else:
        u, i = table["user"].to_numpy(np.int64), table["item"].to_numpy(np.int64)
    obs = Observations.from_coo(np.asarray(u).reshape(-1), np.asarray(i).reshape(-1), table["rating"].to_numpy(),
                                (len(user_ids), len(item_ids)), kind=adapter.values, dtype=np.float64)
    stop_after = options.pop("_stop_after", None)
    run_options = {**adapter.defaults, **options}
    if resume_from is not None:
        if not adapter.resumable:
            raise ValueError(f"{model} cannot resume from a checkpoint ({adapter.not_resumable or 'its solver has no checkpoints'}); "
                             "fit it without resume_from")
        run_options.update(checkpoint=str(checkpoint_path(resume_from, model)), resume=True)
        if checkpoint_every is not None:
            run_options["checkpoint_every"] = int(checkpoint_every)
    elif checkpoint_every is not None:
        raise ValueError("checkpoint_every needs resume_from (the folder the checkpoints go to)")
    if stop_after is not None:
        if resume_from is None:
            raise ValueError("_stop_after needs resume_from")
        idata = _run_until(adapter, stop_after, seed, obs, K, progress, run_options)
    else:
        idata = adapter.run(seed, obs, K, progress=progress, **run_options)
    settings = {"K": K, "seed": int(seed), "transform": transform, "threshold": float(threshold),
                "options": {k: v for k, v in options.items() if isinstance(v, (int, float, str, bool))}}
    return FittedModel(model, idata, np.asarray(user_ids), np.asarray(item_ids), obs.to_scipy().tocsr(), settings)


def checkpoint_path(folder, model: str) -> Path:
    """The checkpoint file of ``model`` in the folder ``resume_from``: ``folder/<model>.npz``.

    folder : str or Path (created when the first checkpoint is written). Raises ValueError when
    ``folder`` is an existing file (pass a folder). Source: project addition."""
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
