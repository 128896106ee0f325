"""`FittedModel`, the fitted model a user recommends, predicts, evaluates, folds in and saves with,
in the user's own ids, and `load`, which reads it back from its netCDF artifact.

`validation.frontdoor.api.fit` builds it; `factorbayes` re-exports both names.

Source: project addition (issue 10; issue 24: scoring, ArviZ groups, artifacts; split out of
`validation.frontdoor.api`, issue 25).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from validation.frontdoor.adapters import Adapter, _adapter
from validation.frontdoor.tables import _ids_from_json, _ids_json, _posterior, _table, _values

__all__ = ["FittedModel", "load"]


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
            if "warmup" in it:  # a sampler: the count is of sweeps per chain, warm-up included
                per = "sweeps per chain" if it.get("thin", 1) == 1 else f"units of {it['thin']} sweeps per chain"
                line = (f"  iterations: {it['run']} of {it.get('max')} {per} ({it['warmup']} warm-up, "
                        f"{it['chains']} chain(s); {it['option']} counts the kept ones)")
            else:
                line = f"  iterations: {it['run']} of {it.get('max')} ({it['option']})"
            if it.get("resumed_from"):
                line += f", resumed from {it['resumed_from']}"
            if it.get("tol") == 0:  # a fixed number of epochs / sweeps: nothing to converge by
                line += "; ran the set number (no convergence test: tol 0)"
            elif "converged" in it:
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
                seed: int = 0, sd: bool = True) -> pd.DataFrame:
        """Posterior mean, sd and a central credible interval of E[y_ui], or of a new y_ui, per pair.

        Computed by `validation.frontdoor.scoring.predict` in chunks of bounded memory.

        Parameters
        ----------
        pairs : pandas.DataFrame or sequence of (user, item) tuples
            M pairs in original ids (a DataFrame with columns ``user`` and ``item``, or the column
            names the model was fitted with).
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
        sd : bool, default True
            False: the mean only (no sd, lower, upper); with ``means="q"`` no pass over the draws.

        Returns
        -------
        pandas.DataFrame
            M rows: user, item, mean, sd, lower, upper (float64, in the units of the fitted values; the
            last three only with ``sd=True``), method (how the draws were obtained). For point estimates
            (MAP, SGD) sd = 0 and the interval is the point.

        Raises
        ------
        KeyError
            An unknown user or item id.
        ValueError
            A bad ``interval``, ``means`` or ``kind``; ``kind="observation"`` for a model without an
            observation model (BPR, PSM), or with ``sd=False``.

        Source: project addition (issue 24).
        """
        from validation.frontdoor import scoring

        return scoring.predict(self, pairs, interval=interval, means=means, kind=kind, seed=seed, sd=sd)

    def recommend(self, users, N: int = 10, *, exclude_seen: bool = True, means: str = "draws",
                  max_bytes: int | None = None, sd: bool = True, as_frame: bool = True):
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
        as_frame : bool, default True
            False returns the same columns as NumPy arrays
            (`validation.frontdoor.scoring.Recommendations`), the lean form for one user at a time.

        Returns
        -------
        pandas.DataFrame or validation.frontdoor.scoring.Recommendations
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
                                 max_bytes=scoring.MAX_BYTES if max_bytes is None else max_bytes,
                                 as_frame=as_frame)

    def evaluate(self, test, **kwargs) -> pd.DataFrame:
        """Held-out metrics of this model next to popularity and EASE^R on its own training data.

        With standard errors and paired bootstrap intervals against the better baseline:
        `validation.evaluation.holdout.evaluate`.

        Parameters
        ----------
        test : pandas.DataFrame
            The held-out part of `split` (original ids; users unknown to the model are reported); its
            columns may carry the names the model was fitted with (``user_col`` etc. then default to them).
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

        if isinstance(test, pd.DataFrame):  # the column names the model was fitted with, where the test has them
            for role, key in (("user", "user_col"), ("item", "item_col"), ("rating", "value_col")):
                name = self.settings.get("columns", {}).get(role)
                if name is not None and name in test.columns and role not in test.columns:
                    kwargs.setdefault(key, name)
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
