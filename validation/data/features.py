"""Feature designs: MovieLens 100K side data and the factorization-machine designs of P2 splits.

- `load_movielens_users` (``u.user``) and `load_movielens_genres` (``items.tsv`` or
  ``u.item``): the side information of MovieLens 100K.
- `AGE_BUCKETS` (MovieLens 1M's published age groups), `ML100K_GENRES`, `FM_GROUPS`.
- `fm_features`: the FM designs (004_90693a0965f06816.txt eq. 2.17, fig. 2.1) of a
  `validation.data.splits.split_p2` split: user and item one-hots, optionally with genres,
  age bucket, gender and occupation.

When no ``data_dir`` is given, the side files are looked for where
`validation.data.datasets.find_movielens_100k` looks (imported lazily: `validation.data.datasets`
re-exports this module).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np
import pandas as pd
import scipy.sparse as sp

from custom_inference.data import Observations

from validation.data.loaders import _HOW_TO_GET, _integer_ids as _as_integer_ids
from validation.data.splits import RatingsSplit, _lookup

__all__ = [
    "AGE_BUCKETS",
    "ML100K_GENRES",
    "FM_GROUPS",
    "load_movielens_users",
    "load_movielens_genres",
    "fm_features",
]

PathLike = Union[str, "os.PathLike[str]"]


#: Age buckets of the "rich" FM design: MovieLens 1M's published age groups
#: (README of ml-1m: "Under 18", 18-24, 25-34, 35-44, 45-49, 50-55, "56+"), as
#: half-open intervals [low, high) of the age in years.
AGE_BUCKETS = ((0, 18), (18, 25), (25, 35), (35, 45), (45, 50), (50, 56), (56, 1000))

#: The 19 genres of MovieLens 100K in the order of ``u.genre`` / the ``u.item`` flags.
ML100K_GENRES = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
    "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi",
    "Thriller", "War", "Western",
)

#: Feature groups of `fm_features`, in column order.
FM_GROUPS = {"ids": ("user", "item"), "rich": ("user", "item", "genre", "age", "gender", "occupation")}


def _side_data_dir(data_dir) -> Path:
    if data_dir is not None:
        p = Path(data_dir).expanduser()
        if not p.is_dir():
            raise ValueError(f"data_dir: {str(p)!r} is not a directory")
        return p
    from validation.data.datasets import _candidate_dirs  # lazy: datasets re-exports this module

    for d in _candidate_dirs():
        if (d / "u.user").is_file() and ((d / "items.tsv").is_file() or (d / "u.item").is_file()):
            return d
    raise ValueError(
        "data_dir: no directory with u.user and items.tsv (or u.item) found at "
        f"{[str(d) for d in _candidate_dirs()]}; pass data_dir=... . {_HOW_TO_GET}"
    )


def load_movielens_users(data_dir: PathLike) -> pd.DataFrame:
    """Read MovieLens 100K ``u.user`` (``user_id|age|gender|occupation|zip_code``, no header).

    Parameters
    ----------
    data_dir : str or os.PathLike
        Directory holding ``u.user`` (``~`` is expanded).

    Returns
    -------
    pandas.DataFrame, one row per user (file order)
        ``user`` (int64), ``age`` (int64, years), ``gender`` (str, "M"/"F"),
        ``occupation`` (str), ``zip_code`` (str).

    Raises
    ------
    ValueError
        ``u.user`` missing in ``data_dir``; wrong number of fields; NaN or
        non-integer user id or age; duplicate user ids.

    Source: project addition (MovieLens 100K README, u.user layout).
    """
    p = Path(data_dir).expanduser() / "u.user"
    if not p.is_file():
        raise ValueError(f"data_dir: {str(p)!r} not found (MovieLens 100K users file). {_HOW_TO_GET}")
    raw = pd.read_csv(p, sep="|", header=None, dtype=str, keep_default_na=False, encoding="latin-1")
    if raw.shape[1] != 5:
        raise ValueError(f"{str(p)!r}: expected 5 '|'-separated fields per line, found {raw.shape[1]}")
    src = repr(str(p))
    out = pd.DataFrame({
        "user": _as_integer_ids(raw[0], "user_id", src),
        "age": _as_integer_ids(raw[1], "age", src),
        "gender": raw[2].str.strip().to_numpy(),
        "occupation": raw[3].str.strip().to_numpy(),
        "zip_code": raw[4].str.strip().to_numpy(),
    })
    if out["user"].duplicated().any():
        raise ValueError(f"{src}: duplicate user ids, e.g. {out['user'][out['user'].duplicated()].iloc[0]}")
    return out


def load_movielens_genres(data_dir: PathLike) -> pd.DataFrame:
    """Item genres of MovieLens 100K, from ``items.tsv`` or else the original ``u.item``.

    - ``items.tsv`` (the layout of ../shared/data and of `fetch_movielens_100k`'s
      recbole route): tab separated, header ``item_id title release_year genres``,
      genres joined by ``|``.
    - ``u.item`` (the GroupLens zip): ``|`` separated, latin-1, the last 19 fields
      are 0/1 flags of `ML100K_GENRES` in that order.

    Parameters
    ----------
    data_dir : str or os.PathLike
        Directory holding ``items.tsv`` or ``u.item`` (``~`` is expanded); ``items.tsv`` wins when
        both are there.

    Returns
    -------
    pandas.DataFrame, one row per (item, genre) pair
        ``item`` (int64, original id), ``genre`` (str). An item without any
        genre has no row.

    Raises
    ------
    ValueError
        Neither file in ``data_dir``; a missing column or bad flag count; NaN or
        non-integer item ids; duplicate item ids.

    Source: project addition (MovieLens 100K README; recbole atomic item file).
    """
    d = Path(data_dir).expanduser()
    tsv, uitem = d / "items.tsv", d / "u.item"
    if tsv.is_file():
        raw = pd.read_csv(tsv, sep="\t", dtype=str, keep_default_na=False, quoting=3, encoding="utf-8")
        for col in ("item_id", "genres"):
            if col not in raw.columns:
                raise ValueError(f"{str(tsv)!r}: no column {col!r}; header is {list(raw.columns)}")
        src = repr(str(tsv))
        items = _as_integer_ids(raw["item_id"], "item_id", src)
        genre_lists = [[g.strip() for g in s.split("|") if g.strip()] for s in raw["genres"]]
    elif uitem.is_file():
        raw = pd.read_csv(uitem, sep="|", header=None, dtype=str, keep_default_na=False, encoding="latin-1")
        if raw.shape[1] < 5 + len(ML100K_GENRES):
            raise ValueError(f"{str(uitem)!r}: expected 5 + {len(ML100K_GENRES)} '|'-separated fields, found {raw.shape[1]}")
        src = repr(str(uitem))
        items = _as_integer_ids(raw[0], "item_id", src)
        flags = raw.iloc[:, -len(ML100K_GENRES):].to_numpy()
        genre_lists = [[g for g, f in zip(ML100K_GENRES, row) if f.strip() == "1"] for row in flags]
    else:
        raise ValueError(f"data_dir: neither {str(tsv)!r} nor {str(uitem)!r} exists (MovieLens 100K item genres). {_HOW_TO_GET}")
    if len(np.unique(items)) != len(items):
        raise ValueError(f"{src}: duplicate item ids")
    rows = [(int(it), g) for it, gl in zip(items, genre_lists) for g in gl]
    out = pd.DataFrame(rows, columns=["item", "genre"])
    out["item"] = out["item"].astype(np.int64)
    out.attrs["items"] = np.asarray(items, dtype=np.int64)  # every listed item, with or without genre
    return out


def _age_bucket(age: np.ndarray) -> np.ndarray:
    lows = np.array([lo for lo, _ in AGE_BUCKETS])
    b = np.searchsorted(lows, age, side="right") - 1
    if np.any(age < 0) or np.any(age >= AGE_BUCKETS[-1][1]):
        raise ValueError(f"age: values outside [0, {AGE_BUCKETS[-1][1]}): {age[(age < 0) | (age >= AGE_BUCKETS[-1][1])][:5].tolist()}")
    return b


def fm_features(split: RatingsSplit, kind: str = "ids", data_dir: PathLike | None = None, *, dtype=np.float64):
    """FM designs (004_90693a0965f06816.txt eq. 2.17, fig. 2.1) of a P2 split, train and test.

    One design row per rating, in the order of ``split.train`` / ``split.test``
    (row-major (u, i)), response ``y`` = the rating. Columns, in this order,
    each a feature group (the ``c_i`` of eqs. 4.3-4.4):

    ``kind="ids"`` (plain MF with biases: w_0 + w_u + w_i + <v_u, v_i>), D = I + J:

    - ``user``: one-hot of the user index, I columns (column ``u``);
    - ``item``: one-hot of the item index, J columns (column ``I + i``).

    ``kind="rich"`` (the user/song/genre design of fig. 2.1, with MovieLens side
    information), D = I + J + 19 + 7 + 2 + n_occupations (2,674 on MovieLens 100K):

    - ``user``, ``item`` as above;
    - ``genre``: multi-hot (value 1 per genre of the item) over the genres in
      items.tsv / u.item, sorted by name (19 on MovieLens 100K, "unknown"
      included); an item without genre has no genre nonzero;
    - ``age``: one-hot of the user's age bucket, `AGE_BUCKETS` (MovieLens 1M's
      groups: <18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+), all 7 columns kept;
    - ``gender``: one-hot over the genders present, sorted ("F", "M");
    - ``occupation``: one-hot over the occupations present in u.user, sorted
      (21 on MovieLens 100K).

    Side information comes from ``data_dir/u.user`` and ``data_dir/items.tsv``
    (or ``u.item``); see `load_movielens_users`, `load_movielens_genres`. The
    train and test designs have the same D columns (all I users and J items),
    whether or not a feature occurs in training.

    Parameters
    ----------
    split : RatingsSplit
        From `split_p2`.
    kind : {"ids", "rich"}
    data_dir : path-like, optional
        Directory of ``u.user`` and ``items.tsv``; only read for ``"rich"``.
        Default: the first of ``$FACTORBAYES_DATA_DIR/ml-100k``,
        ``<repo>/../shared/data/ml-100k``, the user cache that has both files.
    dtype : numpy float dtype
        Of the design values and y.

    Returns
    -------
    (train, test) : tuple of custom_inference.fm_design.FMDesign
        ``train``: N_train rows, ``test``: N_test rows, both D columns;
        ``group_names`` = ``FM_GROUPS[kind]``; ``y`` = the ratings. Every row
        has exactly 2 (ids) or 5 + n_genres(item) (rich) nonzeros, all 1.

    Raises
    ------
    ValueError
        ``split`` not a RatingsSplit; unknown ``kind``; side-information files
        missing; users of the split absent from u.user or items absent from the
        item file (the message lists the ids); an age outside the buckets.

    Source: 004_90693a0965f06816.txt eq. 2.17 and fig. 2.1 (design); MovieLens side data.
    """
    from custom_inference.fm_design import FMDesign  # local: keeps `import validation.data.datasets` light

    if not isinstance(split, RatingsSplit):
        raise ValueError(f"split must be a RatingsSplit from split_p2, got {type(split).__name__}")
    if kind not in FM_GROUPS:
        raise ValueError(f"kind must be one of {sorted(FM_GROUPS)}, got {kind!r}")
    I, J = split.shape
    blocks = []  # per group: (n_columns, u_to_cols or i_to_cols as a CSR (I or J, n_columns), "user"/"item")
    eye = lambda n: sp.identity(n, dtype=np.float64, format="csr")  # noqa: E731
    blocks.append((eye(I), "user"))
    blocks.append((eye(J), "item"))
    if kind == "rich":
        d = _side_data_dir(data_dir)
        users = load_movielens_users(d)
        genres = load_movielens_genres(d)
        missing_u = np.setdiff1d(split.user_ids, users["user"].to_numpy())
        if missing_u.size:
            raise ValueError(f"u.user: {missing_u.size} user id(s) of the ratings are absent: {missing_u[:20].tolist()}")
        missing_i = np.setdiff1d(split.item_ids, genres.attrs["items"])
        if missing_i.size:
            raise ValueError(f"item file: {missing_i.size} item id(s) of the ratings are absent: {missing_i[:20].tolist()}")
        # item -> genres (multi-hot)
        g = genres[np.isin(genres["item"].to_numpy(), split.item_ids)]
        names = np.array(sorted(genres["genre"].unique()))
        gi = _lookup(split.item_ids, g["item"].to_numpy(), "item")
        gc = np.searchsorted(names, g["genre"].to_numpy())
        blocks.append((sp.csr_matrix((np.ones(gi.size), (gi, gc)), shape=(J, names.size)), "item"))
        # user -> age bucket, gender, occupation (one-hot)
        us = users.set_index("user").loc[split.user_ids]
        age_b = _age_bucket(us["age"].to_numpy())
        for codes, n in (
            (age_b, len(AGE_BUCKETS)),
            *[(np.searchsorted(np.array(sorted(users[c].unique())), us[c].to_numpy()), users[c].nunique())
              for c in ("gender", "occupation")],
        ):
            blocks.append((sp.csr_matrix((np.ones(I), (np.arange(I), codes)), shape=(I, n)), "user"))
    group = np.concatenate([np.full(m.shape[1], k, dtype=np.int64) for k, (m, _) in enumerate(blocks)])
    names_ = FM_GROUPS[kind]

    def design(obs: Observations, frame: pd.DataFrame):
        u = np.asarray(obs.rows, dtype=np.int64)
        i = np.asarray(obs.cols, dtype=np.int64)
        if not (np.array_equal(u, frame["u"].to_numpy()) and np.array_equal(i, frame["i"].to_numpy())):
            raise ValueError("split: Observations and frame rows are not aligned (not a split_p2 result?)")
        parts = [(m[u] if side == "user" else m[i]) for m, side in blocks]  # row-gathers of sparse maps
        X = sp.hstack(parts, format="csr")
        return FMDesign.from_scipy(X, np.asarray(obs.values), group, group_names=names_, dtype=dtype)

    return design(split.train, split.train_frame), design(split.test, split.test_frame)
