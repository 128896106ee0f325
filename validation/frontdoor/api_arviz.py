"""The front door's ArviZ output: InferenceData in the user's ids, with ``observed_data``,
pointwise ``log_likelihood`` and ``posterior_predictive`` groups built on demand.

`custom_inference.arviz_io` is the one module where the solvers build and read ArviZ objects; it
cannot know the front door's id maps or the models' observation models (custom_inference never
imports validation). This module is its front-door twin and the only place in `validation.frontdoor.api*`
that builds ArviZ objects (it builds them through `arviz_io.to_inference_data`'s xarray layout, so
a move to ArviZ 1.x touches these two modules):

* `with_id_coords`: every ``user`` / ``item`` dimension of every group gets the user's original
  ids as coordinate values (int64 or str); the factorization machines' ``feature`` dimension (one-hot
  users, then items) gets ``"user <id>"`` / ``"item <id>"`` labels. `validation.frontdoor.api.FittedModel`
  applies it whenever it is built (fit, load, fold_in), so ``FittedModel.idata`` is in the user's ids.
* `inference_data`: the fitted posterior plus, on demand, ``observed_data`` (the N fitted entries,
  dim ``entry`` with ``user`` / ``item`` coordinates in the user's ids), ``log_likelihood`` (S draws x
  N entries, from `validation.frontdoor.api_models.log_likelihood`) and ``posterior_predictive`` (one new
  observation per draw and entry). These are not stored in artifacts (S x N float64 is 160 MB at
  200 draws and 1e5 entries); they are computed in chunks of entries (no I x J array), and the
  result is cached on the FittedModel (`validation.frontdoor.api.FittedModel.inference_data`).

Which draws: samplers' kept draws; VI fits' draws from q (the log-likelihood is then averaged under
q, not under the posterior: said in the group's attrs, and PSIS-LOO's k-hat shows how far q is from
the posterior); point estimates (SGD-FM, SIBM-MAP) are one "draw": the group holds the plug-in training
log-likelihood per entry, and az.loo / az.waic (which need at least 2 draws) do not run on it. Every group
states this in its ``draws`` attr.

Source: project addition (issue 24, "ArviZ as ArviZ users expect").
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["with_id_coords", "inference_data", "pointwise_log_likelihood", "compare", "DEFAULT_CHUNK_BYTES"]

#: Bound, in bytes, on the per-chunk temporaries of the pointwise computations (the (S, N) result not counted).
DEFAULT_CHUNK_BYTES = 64 * 2**20


def _coord_ids(ids) -> np.ndarray:
    """Ids as a netCDF-writable coordinate: int64 when all are integers, else str."""
    ids = np.asarray(ids, dtype=object)
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in ids):
        return ids.astype(np.int64)
    return np.asarray([str(x) for x in ids], dtype=object)


def with_id_coords(idata, user_ids, item_ids):
    """``idata`` with the user's ids as coordinate values of its ``user`` and ``item`` dimensions.

    Parameters
    ----------
    idata : arviz.InferenceData
        Any groups.
    user_ids : array_like, shape (I,), int64 or str
        The user's original user ids, in index order.
    item_ids : array_like, shape (J,), int64 or str
        The user's original item ids, in index order.

    Returns
    -------
    arviz.InferenceData
        A new InferenceData sharing the arrays (no copy): every group with a ``user`` dim of length I
        gets ``user = user_ids`` (int64 when every id is an int, else str), likewise ``item``; a
        ``feature`` dim of length I + J with a ``front_door_n_users`` = I attr (the factorization
        machines' one-hot design) gets the labels ``"user <id>"`` then ``"item <id>"``. Dims of another
        length (e.g. a user's own group) are left as they are.

    Raises
    ------
    None of its own.

    Source: project addition (issue 24).
    """
    import warnings

    import arviz as az

    users, items = _coord_ids(user_ids), _coord_ids(item_ids)
    I, J = users.size, items.size
    n_users = idata.posterior.attrs.get("front_door_n_users") if "posterior" in idata.groups() else None
    features = None
    if n_users is not None and int(n_users) == I:
        features = np.asarray([f"user {x}" for x in users] + [f"item {x}" for x in items], dtype=object)
    out = {}
    for g in idata.groups():
        ds = idata[g]
        new = {}
        if ds.sizes.get("user") == I:
            new["user"] = users
        if ds.sizes.get("item") == J:
            new["item"] = items
        if features is not None and ds.sizes.get("feature") == I + J:
            new["feature"] = features
        out[g] = ds.assign_coords(new) if new else ds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # custom group names are intended
        return az.InferenceData(**out)


def _draw_layout(fitted) -> tuple[dict, dict, int, int]:
    """(posterior dict name -> (S, ...) array, posterior attrs, chains C, draws per chain D)."""
    from custom_inference import arviz_io

    post = arviz_io.group_arrays(fitted.idata, "posterior")
    C, D = next(iter(post.values())).shape[:2]
    return {k: v.reshape((-1, *v.shape[2:])) for k, v in post.items()}, dict(fitted.idata.posterior.attrs), C, D


def _entries(fitted) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows (N,), cols (N,), values (N,)) of the fitted entries, row-major order, int64 / float64."""
    seen = fitted.seen.tocsr()
    seen.sort_indices()
    coo = seen.tocoo()
    return coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float64)


def _chunk(S: int, K: int, max_bytes: int) -> int:
    """Entries per chunk so that about 6 (S, m) float64 temporaries and the gathered factors fit ``max_bytes``."""
    per_entry = 8 * S * (6 + 3 * max(K, 1))
    return int(max(1, max_bytes // max(per_entry, 1)))


def pointwise_log_likelihood(fitted, *, max_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """log p(y_n | draw s) of each fitted entry n under each stored draw s.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        A fit with S stored draws (chains stacked) and N fitted entries.
    max_bytes : int, default DEFAULT_CHUNK_BYTES
        Bound, in bytes, on the temporaries of one chunk of entries (the result not counted;
        keyword-only).

    Returns
    -------
    numpy.ndarray, shape (S, N), float64
        Entries in row-major (user, item) order (`_entries`).

    Raises
    ------
    ValueError
        A model without a pointwise likelihood (BPR; `validation.frontdoor.api_models.likelihood_of`).

    Source: the model's `validation.frontdoor.api_models.LIKELIHOODS` entry (its seed equation).
    """
    from validation.frontdoor import api_models

    lik = api_models.likelihood_of(fitted.model)
    post, attrs, C, D = _draw_layout(fitted)
    rows, cols, y = _entries(fitted)
    S, N = C * D, rows.size
    K = max([v.shape[-1] for v in post.values() if v.ndim >= 3] or [1])
    prec = None
    if lik.family == "normal":
        prec = api_models._precision(fitted, lik, post, attrs, S)
    out = np.empty((S, N), dtype=np.float64)
    m = _chunk(S, K, max_bytes)
    for a in range(0, N, m):
        out[:, a:a + m] = api_models.log_likelihood(fitted, post, attrs, rows[a:a + m], cols[a:a + m], y[a:a + m],
                                                    precision=prec)
    return out


def _draws_note(fitted) -> str:
    u = fitted.uncertainty
    if u.startswith("none"):
        return (f"one draw: the point estimate ({u}); the group holds the training log-likelihood per entry at that "
                "point (plug-in); az.loo / az.waic need at least 2 draws and do not run on it")
    if u.startswith("draws from q"):
        return (f"draws from the variational q ({u}), not from the posterior: the log-likelihood is averaged "
                "under q; PSIS k-hat says how far q is from the posterior")
    return f"kept posterior draws ({u})"


def inference_data(fitted, *, log_likelihood: bool = True, posterior_predictive: bool = False,
                   observed_data: bool = True, seed: int = 0, max_bytes: int = DEFAULT_CHUNK_BYTES):
    """The fitted model as an `arviz.InferenceData` for `az.loo`, `az.waic`, `az.compare`, `az.plot_ppc`.

    Every added group has dim ``entry`` (N) with coordinates ``user`` and ``item`` (entry,) in the
    user's ids, and attrs ``draws`` (which draws: posterior, q, or a point estimate), ``terms`` (which
    terms of the model's likelihood are included), ``likelihood_source`` (seed file and equation)
    and ``model``. Every model's observed variable is called ``y``, so models fitted on the same data
    compare with `az.compare` (ArviZ needs the same N observations in each).
    Memory: the (S, N) float64 arrays themselves (8 S N bytes each), plus temporaries of at most
    about ``max_bytes`` per chunk of entries.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit (S = C chains x D draws, N fitted entries).
    log_likelihood : bool, default True
        Add the ``log_likelihood`` group: variable ``y`` (chain, draw, entry) float64,
        log p(y_n | draw) (`pointwise_log_likelihood`). Keyword-only, like the rest.
    posterior_predictive : bool, default False
        Add the ``posterior_predictive`` group: variable ``y`` (chain, draw, entry), one new
        observation per draw and entry (`validation.frontdoor.api_models.observation_draws`, numpy
        Generator seeded with ``seed``).
    observed_data : bool, default True
        Add ``observed_data``: variable ``y`` (entry,) float64, the fitted values.
    seed : int, default 0
        Seed of the posterior predictive draws.
    max_bytes : int, default DEFAULT_CHUNK_BYTES
        Bound, in bytes, on the temporaries of one chunk of entries.

    Returns
    -------
    arviz.InferenceData
        A new InferenceData: the fitted groups (in the user's ids) plus those asked for.

    Raises
    ------
    ValueError
        A model without a pointwise likelihood (BPR) when ``log_likelihood`` or
        ``posterior_predictive`` is asked for, and PSM's ``posterior_predictive`` (the reason is in the
        message).

    Source: project addition (issue 24); the likelihoods are `validation.frontdoor.api_models.LIKELIHOODS`.
    """
    import warnings

    import arviz as az
    import xarray as xr

    from validation.frontdoor import api_models

    groups = {g: fitted.idata[g] for g in fitted.idata.groups()}
    if not (log_likelihood or posterior_predictive or observed_data):
        return with_id_coords(fitted.idata, fitted.user_ids, fitted.item_ids)
    rows, cols, y = _entries(fitted)
    users, items = _coord_ids(fitted.user_ids), _coord_ids(fitted.item_ids)
    coords = {"entry": np.arange(rows.size), "user": ("entry", users[rows]), "item": ("entry", items[cols])}
    attrs: dict[str, Any] = {"model": fitted.model, "draws": _draws_note(fitted)}
    try:
        lik = api_models.likelihood_of(fitted.model)
        attrs.update(terms=lik.terms, likelihood_source=lik.source, likelihood_family=lik.family)
    except ValueError:
        if log_likelihood or posterior_predictive:
            raise
    _, _, C, D = _draw_layout(fitted)
    if observed_data:
        obs_attrs = {k: v for k, v in attrs.items() if k != "draws"}
        obs_attrs["values"] = "the values as fitted (after the fit's transform; count and one-class models drop zeros)"
        groups["observed_data"] = xr.Dataset({"y": ("entry", y)}, coords=coords, attrs=obs_attrs)
    if log_likelihood:
        ll = pointwise_log_likelihood(fitted, max_bytes=max_bytes).reshape(C, D, -1)
        groups["log_likelihood"] = xr.Dataset({"y": (("chain", "draw", "entry"), ll)},
                                              coords={"chain": np.arange(C), "draw": np.arange(D), **coords},
                                              attrs=attrs)
    if posterior_predictive:
        pp = _predictive(fitted, rows, cols, seed, max_bytes).reshape(C, D, -1)
        groups["posterior_predictive"] = xr.Dataset({"y": (("chain", "draw", "entry"), pp)},
                                                    coords={"chain": np.arange(C), "draw": np.arange(D), **coords},
                                                    attrs={**attrs, "seed": int(seed)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        idata = az.InferenceData(**groups)
    return with_id_coords(idata, fitted.user_ids, fitted.item_ids)


def _predictive(fitted, rows, cols, seed, max_bytes) -> np.ndarray:
    """(S, N) one new observation per draw and fitted entry, in chunks of entries."""
    from validation.frontdoor import api_models

    lik = api_models.likelihood_of(fitted.model)
    if not lik.predictive:
        raise ValueError(f"{fitted.model}: no posterior_predictive: {lik.no_predictive}")
    post, attrs, C, D = _draw_layout(fitted)
    S = C * D
    K = max([v.shape[-1] for v in post.values() if v.ndim >= 3] or [1])
    prec = api_models._precision(fitted, lik, post, attrs, S) if lik.family == "normal" else None
    rng = np.random.default_rng(seed)
    out = np.empty((S, rows.size), dtype=np.float64)
    m = _chunk(S, K, max_bytes)
    for a in range(0, rows.size, m):
        out[:, a:a + m] = api_models.observation_draws(fitted, post, attrs, rows[a:a + m], cols[a:a + m], rng,
                                                       precision=prec)
    return out


#: Likelihood families whose log-likelihood is a probability mass (counts, 0/1, events) or a density.
_DISCRETE = frozenset({"poisson", "bernoulli", "psm-events"})


def _observed_table(fitted):
    """The fitted entries as a DataFrame (user, item, y), by the user's ids, sorted."""
    import pandas as pd

    rows, cols, y = _entries(fitted)
    t = pd.DataFrame({"user": np.asarray(fitted.user_ids)[rows], "item": np.asarray(fitted.item_ids)[cols], "y": y})
    return t.sort_values(["user", "item"], kind="stable", ignore_index=True)


def compare(models, **kwargs):
    """`arviz.compare` (PSIS-LOO by default) of fitted models, after checking that it means something.

    ArviZ compares whatever it is given: models fitted on different observations (another transform,
    another file, another split) or with a mass function against a density get a ranking without a
    warning. This refuses both before computing anything: every model must have fitted the same entries
    (the same user and item ids) with the same values, and the likelihoods must all be mass functions
    (Poisson, Bernoulli, PSM's events) or all densities (Normal).

    Parameters
    ----------
    models : mapping str -> validation.frontdoor.fitted.FittedModel
        Two or more fitted models, by the names the table shows.
    **kwargs
        Passed to `arviz.compare` (``ic``, ``method``, ``scale``, ...).

    Returns
    -------
    pandas.DataFrame
        `arviz.compare`'s table, one row per model, best first.

    Raises
    ------
    ValueError
        Fewer than two models; models fitted on other entries or values (the first difference named:
        the entry counts, an entry one has and the other lacks, or a value that differs, e.g. another
        ``transform``); a mass function compared with a density; a model without a pointwise
        likelihood (BPR: `inference_data`'s reason); a point estimate (one draw: SGD-FM, SIBM-MAP).
    TypeError
        A value of ``models`` that is not a FittedModel.

    Source: project addition (issue 24: `az.compare` across the models fitted on one data set).
    """
    import arviz as az

    from validation.frontdoor.api_models import likelihood_of
    from validation.frontdoor.fitted import FittedModel

    models = dict(models)
    if len(models) < 2:
        raise ValueError(f"compare needs two or more fitted models, got {len(models)}")
    for name, m in models.items():
        if not isinstance(m, FittedModel):
            raise TypeError(f"models[{name!r}] must be a FittedModel (from fit or load), got {type(m).__name__}")
    (first, ref), *others = models.items()
    want = _observed_table(ref)
    for name, m in others:
        got = _observed_table(m)
        if len(got) != len(want):
            raise ValueError(f"compare: {name!r} was fitted on {len(got)} entries and {first!r} on {len(want)}: "
                             "the models must be fitted on the same observations (same data, same transform)")
        keys = ["user", "item"]
        same_keys = (got[keys].astype(str).to_numpy() == want[keys].astype(str).to_numpy()).all(axis=1)
        if not same_keys.all():
            k = int(np.flatnonzero(~same_keys)[0])
            raise ValueError(f"compare: {name!r} and {first!r} were fitted on other entries (e.g. {first!r} has "
                             f"user {want.user[k]!r}, item {want.item[k]!r} where {name!r} has user {got.user[k]!r}, "
                             f"item {got.item[k]!r}): the models must be fitted on the same observations")
        diff = got.y.to_numpy() != want.y.to_numpy()
        if diff.any():
            k = int(np.flatnonzero(diff)[0])
            raise ValueError(f"compare: {name!r} and {first!r} fitted other values on {int(diff.sum())} of {len(want)} "
                             f"entries (e.g. user {want.user[k]!r}, item {want.item[k]!r}: {got.y[k]:g} vs "
                             f"{want.y[k]:g}; another transform or value column?): their log-likelihoods are of "
                             "different data")
    kinds = {name: ("mass" if likelihood_of(m.model).family in _DISCRETE else "density")
             for name, m in models.items()}
    point = [name for name, m in models.items() if np.prod(_draw_layout(m)[2:]) < 2]
    if point:
        raise ValueError(f"compare: {', '.join(map(repr, point))} hold(s) one draw (a point estimate: MAP or SGD); "
                         "PSIS-LOO and WAIC need draws from a posterior or from q")
    if len(set(kinds.values())) > 1:
        raise ValueError("compare: " + ", ".join(f"{n} ({k})" for n, k in kinds.items()) + ": a probability mass "
                         "and a density are in different units; compare count / one-class models with each other "
                         "and ratings models with each other")
    return az.compare({name: m.inference_data() for name, m in models.items()}, **kwargs)
