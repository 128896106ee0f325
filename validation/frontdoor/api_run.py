"""The front door's run record: option checks, the fingerprint that binds a checkpoint to its run,
what a transform dropped, and the run summary with its warnings (`validation.frontdoor.api.fit` calls these).

Nothing here imports `validation.frontdoor.api` (it receives the adapter and the fitted model), so the front
door imports this module, not the reverse. Source: project addition (issue 24).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # annotations only: this module never imports the front door at run time
    from validation.frontdoor.adapters import Adapter
    from validation.frontdoor.fitted import FittedModel


# -- options, the run fingerprint, the run summary (issue 24) --------------------------------------

# what the front door sets itself (resume_from, checkpoint_every, the data), never an option
_NOT_OPTIONS = frozenset(
    {"key", "data", "obs", "design", "train", "K", "checkpoint", "resume", "self", "options", "output"}
)
# options that change nothing in the result (left out of the fingerprint)
_NOT_IN_FINGERPRINT = frozenset({"progress", "checkpoint", "checkpoint_every", "resume", "block", "callback"})


def _solver_parameters(adapter: Adapter) -> dict:
    """name -> default (``inspect.Parameter.empty`` when none) of the options of ``adapter``'s solver
    (`valid_options`); {} when the solver is unknown."""
    import importlib
    import inspect

    where = adapter.solver
    if where is None:
        return {}
    module, name = where.split(":")
    fn = getattr(importlib.import_module(module), name)
    out = {"hyper": None}
    forwards = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    init = getattr(fn, "__globals__", {}).get("init") if forwards else None
    for f in (init, fn):  # the solver's own defaults win
        if f is None:
            continue
        for p in inspect.signature(f).parameters.values():
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in _NOT_OPTIONS:
                out[p.name] = p.default
    return out


def _check_options(adapter: Adapter, options: Mapping[str, Any]) -> None:
    """Refuse unknown options before any computation, listing the valid ones (and the closest)."""
    import difflib

    valid = tuple(sorted(_solver_parameters(adapter)))  # `validation.frontdoor.api.valid_options`
    if not valid:
        return
    unknown = sorted(k for k in options if k not in valid and k != "_stop_after")
    if unknown:
        near = {k: difflib.get_close_matches(k, valid, n=1) for k in unknown}
        hints = "; ".join(f"{k!r}: did you mean {v[0]!r}?" for k, v in near.items() if v)
        raise ValueError(f"{adapter.name}: unknown option(s) {unknown}{' (' + hints + ')' if hints else ''}; "
                         f"valid options are {list(valid)} (the fit's own: user_col, item_col, value_col, transform, "
                         "threshold, resume_from, checkpoint_every, progress)")


def _refuse_duplicates(table: pd.DataFrame, names: Mapping[str, str]) -> None:
    """ValueError when a (user, item) pair occurs more than once, with up to 5 pairs in the user's ids."""
    dup = table.duplicated(["user", "item"], keep=False).to_numpy()
    if dup.any():
        pairs = table.loc[dup, ["user", "item"]].drop_duplicates()
        show = [(_plain(a), _plain(b)) for a, b in pairs.head(5).itertuples(index=False)]
        raise ValueError(f"data: {len(pairs)} ({names['user']}, {names['item']}) pair(s) occur more than once "
                         f"({int(dup.sum())} rows), e.g. {show}; sum or deduplicate them first (e.g. "
                         f"df.groupby([{names['user']!r}, {names['item']!r}], as_index=False).sum() or "
                         f"df.drop_duplicates([{names['user']!r}, {names['item']!r}]))")


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


def _dropped(before: pd.DataFrame, after: pd.DataFrame) -> dict:
    """Users, items and entries of ``before`` that the value transform left without entries."""
    out = {"entries": int(len(before) - len(after))}
    for which in ("user", "item"):
        gone = np.setdiff1d(before[which].unique(), after[which].unique())
        out[f"{which}s"] = int(gone.size)
        out[f"{which}_ids"] = [_plain(x) for x in gone[:5]]
    return out


def _no_drops(entries: int) -> dict:
    return {"entries": int(entries), "users": 0, "user_ids": [], "items": 0, "item_ids": []}


def _warn_dropped(model, dropped: Mapping, names: Mapping[str, str], transform, threshold) -> None:
    import warnings

    parts = [f"{dropped[w + 's']} {w}(s) (e.g. {names[w]} {dropped[w + '_ids']})" for w in ("user", "item")
             if dropped[w + "s"]]
    if parts:
        warnings.warn(f"{model}: the value transform (transform={transform!r}, threshold={threshold!r}) and the "
                      f"model's dropping of zero values left {' and '.join(parts)} without entries; they are not in "
                      f"the fitted model ({dropped['entries']} entries dropped in all)", UserWarning, stacklevel=3)


def _canonical_value(v):
    """A JSON value standing for an option's value in the fingerprint (NamedTuples field by field,
    arrays by shape, dtype and hash, callables by name, anything else by repr)."""
    import hashlib

    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    if hasattr(v, "_fields"):
        return {"type": type(v).__name__, **{f: _canonical_value(getattr(v, f)) for f in v._fields}}
    if isinstance(v, Mapping):
        return {str(k): _canonical_value(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_canonical_value(x) for x in v]
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        a = np.ascontiguousarray(np.asarray(v))
        if a.size <= 16:
            return {"dtype": str(a.dtype), "values": a.tolist()}
        return {"dtype": str(a.dtype), "shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
    if isinstance(v, type) or callable(v):
        return f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', repr(v))}"
    return repr(v)


def run_fingerprint(adapter: "Adapter", obs, K: int, seed: int, options: Mapping[str, Any], *,
                    transform: str = "none", threshold: float = 4.0) -> dict:
    """The fingerprint that binds a checkpoint to its run: everything that changes the result.

    Parameters
    ----------
    adapter : validation.frontdoor.api.Adapter
        The model's front-door adapter (its name, solver and uncertainty).
    obs : custom_inference.data.Observations
        The data exactly as the solver gets it (I x J, N entries: ``rows``, ``cols`` int, ``values``
        float).
    K : int
        Number of latent factors.
    seed : int
        The fit's seed.
    options : mapping str -> object
        The solver options as passed (the adapter's defaults merged with the caller's).
    transform : str, default "none"
        The value transform (keyword-only).
    threshold : float, default 4.0
        The transform's threshold (keyword-only).

    Returns
    -------
    dict str -> JSON value
        A flat dict: ``model``, ``solver`` (how its draws are made), ``K``, ``seed``, ``transform``,
        ``threshold``, ``dtype`` (the solver's ``dtype`` option or "default"), ``x64`` (whether JAX
        computes in float64), ``factorbayes_version``, ``data_users`` / ``data_items`` /
        ``data_entries`` and ``data_sha256`` (SHA-256 of the int64 rows, int64 columns and float64
        values of the entries, and the shape), and ``option <name>`` for every option that can change
        the result (all but progress, checkpoint, checkpoint_every, resume, block, callback;
        NamedTuples such as ``hyper`` field by field, arrays by hash), the solver's defaults filled in
        (so an option given at its default value is the same run).

    Raises
    ------
    None of its own.

    Source: project addition (issue 24).
    """
    import hashlib
    import importlib.metadata

    import jax

    rows, cols = np.asarray(obs.rows).astype(np.int64), np.asarray(obs.cols).astype(np.int64)
    vals = np.asarray(obs.values).astype(np.float64)
    h = hashlib.sha256()
    for a in (np.asarray(obs.shape, np.int64), rows, cols, vals):
        h.update(np.ascontiguousarray(a).tobytes())
    try:
        version = importlib.metadata.version("factorbayes")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    fp = {"model": adapter.name, "solver": adapter.uncertainty, "K": int(K), "seed": _canonical_value(seed),
          "transform": transform, "threshold": float(threshold), "dtype": str(options.get("dtype") or "default"),
          "x64": bool(jax.config.jax_enable_x64), "factorbayes_version": version,
          "data_users": int(obs.shape[0]), "data_items": int(obs.shape[1]), "data_entries": int(rows.size),
          "data_sha256": h.hexdigest()}
    import inspect

    defaults = {k: v for k, v in _solver_parameters(adapter).items() if v is not inspect.Parameter.empty}
    for k, v in {**defaults, **options}.items():  # an option left at its default counts as given
        if k not in _NOT_IN_FINGERPRINT and k != "dtype":
            fp[f"option {k}"] = _canonical_value(v)
    return fp


def _warn_if_slow(adapter: Adapter, obs, K: int, run_options: Mapping[str, Any]) -> None:
    """Before a fit whose every sweep is dense in users x items (batch SIBM) on a large matrix: a
    warning with the estimated time and the faster model (``Adapter.faster``).
    The estimate is I J K sweeps times the measured rate; it warns from an estimate of 10 minutes."""
    import warnings

    faster = adapter.faster
    if faster is None:
        return
    other, rate = faster
    I, J = obs.shape
    sweeps = int(run_options.get(adapter.iterations, 200))
    per_sweep = float(I) * float(J) * max(int(K), 1) * rate
    if per_sweep * sweeps >= 600.0:
        warnings.warn(f"{adapter.name}: every sweep of this solver is dense in users x items ({I:,} x {J:,} = "
                      f"{I * J:,} cells, K = {K}): about {per_sweep:,.0f} s per sweep, ~{per_sweep * sweeps / 3600:.1f} h "
                      f"for {adapter.iterations}={sweeps} (a rough estimate from a rate measured on a 2-core CPU; "
                      f"a GPU is faster). For a large sparse matrix fit {other!r} instead (its work grows with the "
                      f"entries sampled per step, not with I x J)", UserWarning, stacklevel=3)


def _attr(idata, name):
    """An attr of the solver's result (posterior attrs first, then the other groups'), or None."""
    for g in ["posterior", *[g for g in idata.groups() if g != "posterior"]]:
        attrs = idata[g].attrs
        if name in attrs:
            return attrs[name]
    return None


def _run_summary(fitted: "FittedModel", obs, run: Mapping | None, dropped: Mapping) -> dict:
    """The run summary of `fit` (without its seconds): see `FittedModel.summary`."""
    import time

    adapter = fitted.adapter
    it: dict[str, Any] = {"option": adapter.iterations}
    if run is not None:
        it.update(driver=run["driver"], run=int(run["n_iter"]), max=int(run["max_iter"]),
                  resumed_from=int(run["resumed_from"]))
        if run["driver"] == "vi":
            it.update(converged=bool(run["converged"]), tol=float(run["tol"]),
                      last_rel_change=float(run["last_rel_change"]))
        else:
            it.update(unit="units of thin sweeps per chain (warm-up included)", warmup=int(run["units_warmup"]),
                      chains=int(run["num_chains"]), thin=int(run["thin"]))
    else:  # a solver loop outside the drivers (SIBM SVI, SGD-FM without checkpoints): what its attrs say
        n_iter, conv = _attr(fitted.idata, "n_iter"), _attr(fitted.idata, "converged")
        it.update(driver="solver", run=None if n_iter is None else int(n_iter),
                  max=fitted.settings.get("options", {}).get(adapter.iterations, adapter.defaults.get(adapter.iterations)))
        if conv is not None:
            it["converged"] = bool(conv)
    summary: dict[str, Any] = {
        "model": fitted.model, "K": int(fitted.settings["K"]), "uncertainty": adapter.uncertainty,
        "data": {"users": int(obs.shape[0]), "items": int(obs.shape[1]), "entries": int(obs.nnz),
                 "dropped_users": int(dropped["users"]), "dropped_user_ids": list(dropped["user_ids"]),
                 "dropped_items": int(dropped["items"]), "dropped_item_ids": list(dropped["item_ids"]),
                 "dropped_entries": int(dropped["entries"])},
        "iterations": it,
    }
    if run is not None and run["driver"] == "mcmc":
        t = time.perf_counter()
        summary["diagnostics"] = _sampler_diagnostics(fitted, obs)
        summary["diagnostics"]["seconds"] = time.perf_counter() - t
    return summary


#: Training cells at which a sampler's predictions are diagnosed (a fixed sample; all when fewer).
DIAGNOSTIC_CELLS = 100


def _sampler_diagnostics(fitted: "FittedModel", obs) -> dict:
    """Rank-normalized split R-hat and bulk / tail ESS (ArviZ, `custom_inference.arviz_io.diagnostics`)
    of the predicted E[y] at up to `DIAGNOSTIC_CELLS` training cells drawn with seed 0: identified
    quantities, unlike the factors."""
    from custom_inference import arviz_io

    post = arviz_io.group_arrays(fitted.idata, "posterior")
    C, D = next(iter(post.values())).shape[:2]
    rng = np.random.default_rng(0)
    n = int(obs.nnz)
    pick = np.sort(rng.choice(n, size=min(DIAGNOSTIC_CELLS, n), replace=False))
    rows, cols = np.asarray(obs.rows)[pick].astype(np.int64), np.asarray(obs.cols)[pick].astype(np.int64)
    stacked = {k: v.reshape((-1, *v.shape[2:])) for k, v in post.items()}
    means = np.asarray(fitted.adapter.mean(stacked, rows, cols, dict(fitted.idata.posterior.attrs)), np.float64)
    out: dict[str, Any] = {"quantity": f"predicted E[y] at {rows.size} training cells (seed 0)", "chains": int(C),
                           "draws_per_chain": int(D)}
    if D < 4:
        out["note"] = "too few draws per chain for R-hat and ESS"
        return out
    d = arviz_io.diagnostics(means.reshape(C, D, -1))
    with np.errstate(invalid="ignore"):
        out.update(rhat_max=float(np.nanmax(d["r_hat"])), ess_bulk_min=float(np.nanmin(d["ess_bulk"])),
                   ess_tail_min=float(np.nanmin(d["ess_tail"])),
                   cells_rhat_over_1_01=int(np.sum(d["r_hat"] > 1.01)))
    return out


def _phases(t0, t1, t2, t3, run: Mapping | None) -> dict:
    """Wall seconds per phase of `fit` (see `FittedModel.summary`)."""
    out = {"prepare_data": t1 - t0, "fit": t2 - t1}
    if run is not None:
        out.update(before_loop=max(run["t_start"] - t1, 0.0), loop=run["t_end"] - run["t_start"],
                   first_iteration_with_compilation=float(run["first_iteration_seconds"]),
                   after_loop=max(t2 - run["t_end"], 0.0))
    out["summary"] = t3 - t2
    out["total"] = t3 - t0
    return {k: round(float(v), 4) for k, v in out.items()}


def _warn_summary(fitted: "FittedModel", summary: Mapping) -> None:
    import warnings

    it = summary["iterations"]
    if it.get("driver") == "vi" and not it["converged"] and it["tol"] > 0 and it["run"] >= it["max"]:
        warnings.warn(f"{fitted.model}: not converged: stopped at the cap of {it['max']} iterations with a last relative "
                      f"change of {it['last_rel_change']:.3g} against tol {it['tol']:g}; raise {it['option']} (or loosen "
                      "tol) and fit again", UserWarning, stacklevel=3)
    diag = summary.get("diagnostics", {})
    if diag.get("rhat_max", 0.0) > 1.01:
        warnings.warn(f"{fitted.model}: the chains disagree: R-hat up to {diag['rhat_max']:.3f} (> 1.01) on "
                      f"{diag['quantity']}, bulk ESS down to {diag['ess_bulk_min']:.0f}; run more warm-up and samples "
                      "(num_warmup, num_samples) or more chains", UserWarning, stacklevel=3)
