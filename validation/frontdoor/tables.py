"""The front door's data in and ids out: the canonical ratings table of what a user passes (a pandas
DataFrame with their column names, a scipy.sparse matrix or `Observations`), the values prepared for a
model, the posterior as stacked arrays, and the id lists as JSON for artifacts.

Private helpers of `validation.frontdoor.api` and `validation.frontdoor.fitted` (and of the scoring
engine, `_posterior`); nothing here is public API.

Source: project addition (issues 10 and 24; split out of `validation.frontdoor.api`, issue 25).
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np
import pandas as pd


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
