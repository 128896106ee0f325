"""Real recommender data: loaders, re-indexing and the evaluation splits of the seeds.

Everything here turns what users have on disk or in memory into one canonical
ratings table, re-indexes it, and splits it the way the seed papers evaluate:

- Loaders: MovieLens in its three layouts (``u.data``, ``ratings.dat``,
  ``ratings.csv``), a (user, item, value) `pandas.DataFrame`, a `scipy.sparse`
  matrix. All return the same *ratings table*: a DataFrame with columns
  ``user`` (int64, original id), ``item`` (int64, original id), ``rating``
  (float64) and ``timestamp`` (int64, 0 where the source has none).
- `index_ratings`: contiguous 0-based indices ``u`` (0 .. I-1) and ``i``
  (0 .. J-1), assigned in increasing numeric id order, with the maps back to
  the original ids.
- Splits:

  * ``"P1"``, `split_leave_one_out`: the held-out-item protocol of
    000_619a0297b9d686b2.txt (section 6, "for each user, one item was randomly
    removed to create a test set", evaluated with the rank of eq. 12) and
    003_203f63200c0d7157.txt (section 6.1.2, eq. 20), on ratings binarized at a
    threshold (the "Netflix (4 and 5 stars)" construction of seed 000).
  * ``"P3"``, `split_random_holdout`: the 80/20 random holdout of
    004_90693a0965f06816.txt, section 5.4.4 ("a held out set consisting of 20%
    data instances randomly selected"), with ratings used as counts.
  * ``"P2"``, `split_p2`: the 90:10 random split of explicit ratings of
    004_90693a0965f06816.txt, section 3.3.1 (RMSE of the Gaussian models,
    chapters 3-4), ratings kept as real values; `fm_features` builds its
    factorization-machine designs (ids only, or ids + genres + user
    demographics as in fig. 2.1).
  * `dense_submatrix`: a small dense block of the most active users and most
    popular items, for NUTS-sized cross-checks on real data.

- Data location: `find_movielens_100k` and `fetch_movielens_100k` (environment
  variable ``FACTORBAYES_DATA_DIR``, the shared data beside the checkout, the
  user cache, then a download).

Shapes follow the project convention: I users (rows), J items (columns),
N ratings.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np
import pandas as pd
import scipy.sparse as sp

from custom_inference.data import Observations

__all__ = [
    "DATA_DIR_ENV",
    "RATINGS_COLUMNS",
    "load_movielens",
    "ratings_from_dataframe",
    "ratings_from_scipy",
    "IndexedRatings",
    "index_ratings",
    "to_observations",
    "find_movielens_100k",
    "fetch_movielens_100k",
    "user_cache_dir",
    "ImplicitSplit",
    "HoldoutSplit",
    "split_leave_one_out",
    "split_random_holdout",
    "dense_submatrix",
    "RatingsSplit",
    "split_p2",
    "AGE_BUCKETS",
    "ML100K_GENRES",
    "FM_GROUPS",
    "load_movielens_users",
    "load_movielens_genres",
    "fm_features",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Environment variable naming a directory that contains ``ml-100k/``.
DATA_DIR_ENV = "FACTORBAYES_DATA_DIR"

#: Columns of the canonical ratings table, in order.
RATINGS_COLUMNS = ("user", "item", "rating", "timestamp")

_MOVIELENS_FILES = ("u.data", "ratings.dat", "ratings.csv")

_GROUPLENS_100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
_RECBOLE_REQUIREMENT = "recbole==1.2.1"
_RECBOLE_PREFIX = "recbole/dataset_example/ml-100k/"
# SHA-256 of the u.data written from the recbole 1.2.1 wheel: it is byte for byte
# the body of ml-100k.inter (header line dropped), identical to ../shared/data/ml-100k/u.data.
_RECBOLE_UDATA_SHA256 = "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490"
_ML100K_SIZES = (100_000, 943, 1682)  # ratings, users, items

_HOW_TO_GET = (
    "Get MovieLens 100K with `python -c \"from validation.datasets import "
    "fetch_movielens_100k; fetch_movielens_100k()\"` (GroupLens, or the copy inside the "
    "recbole==1.2.1 wheel on PyPI), or download "
    f"{_GROUPLENS_100K_URL}, unzip it and point ${DATA_DIR_ENV} at the directory that "
    "contains ml-100k/."
)


# ---------------------------------------------------------------------------
# Loaders
# ---------------------------------------------------------------------------


def load_movielens(path: PathLike) -> pd.DataFrame:
    """Read MovieLens ratings in any of their published layouts.

    Parameters
    ----------
    path : str or path-like
        Either a directory that contains one of ``u.data``, ``ratings.dat``,
        ``ratings.csv`` (looked for in that order), or the path of a ratings file:

        - ``*.data`` (MovieLens 100K ``u.data``): tab separated, no header,
          ``user item rating timestamp``;
        - ``*.dat`` (MovieLens 1M / 10M ``ratings.dat``): ``::`` separated,
          no header, ``user::item::rating::timestamp``;
        - ``*.csv`` (MovieLens 20M / 25M / latest ``ratings.csv``): comma
          separated with the header ``userId,movieId,rating,timestamp``
          (a header ``user,item,rating[,timestamp]`` is accepted too).

        Any other file name is recognised by its first line (``::``, comma or tab).

    Returns
    -------
    pandas.DataFrame
        The ratings table, N rows in file order, columns ``user`` (int64, the
        original user id), ``item`` (int64, the original movie id), ``rating``
        (float64, stars) and ``timestamp`` (int64, Unix seconds).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist, or is a directory without a ratings file; the
        message names the path and says how to get the data.
    ValueError
        The file cannot be parsed as ratings: wrong number of columns, an
        unknown CSV header, NaN or non-integer ids, NaN ratings, no rows.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"MovieLens ratings not found: {str(p)!r} does not exist. {_HOW_TO_GET}")
    if p.is_dir():
        for name in _MOVIELENS_FILES:
            if (p / name).is_file():
                p = p / name
                break
        else:
            raise FileNotFoundError(
                f"no MovieLens ratings file ({', '.join(_MOVIELENS_FILES)}) in directory {str(p)!r}. "
                f"{_HOW_TO_GET}"
            )
    fmt = _movielens_format(p)
    try:
        if fmt == "data":
            raw = pd.read_csv(p, sep="\t", header=None)
            raw = _positional(raw, p, "tab-separated u.data")
        elif fmt == "dat":
            # '::' split on ':' gives empty fields at odd positions; this keeps the
            # fast C parser (sep='::' would force the slow Python engine).
            raw = pd.read_csv(p, sep=":", header=None)
            if raw.shape[1] not in (5, 7) or raw.iloc[:, 1::2].notna().to_numpy().any():
                raise ValueError(
                    f"{str(p)!r}: expected 'user::item::rating[::timestamp]' lines, got "
                    f"{raw.shape[1]} ':'-separated fields"
                )
            raw = _positional(raw.iloc[:, 0::2], p, "'::'-separated ratings.dat")
        else:
            raw = pd.read_csv(p, sep=",")
            cols = {c.strip().lower(): c for c in raw.columns}
            names = {}
            for canon, options in (
                ("user", ("userid", "user", "user_id")),
                ("item", ("movieid", "item", "item_id", "movie_id")),
                ("rating", ("rating",)),
                ("timestamp", ("timestamp",)),
            ):
                for o in options:
                    if o in cols:
                        names[canon] = cols[o]
                        break
            missing = [c for c in ("user", "item", "rating") if c not in names]
            if missing:
                raise ValueError(
                    f"{str(p)!r}: CSV header {list(raw.columns)} lacks column(s) for {missing}; "
                    "expected userId,movieId,rating,timestamp"
                )
            raw = pd.DataFrame({canon: raw[orig] for canon, orig in names.items()})
    except pd.errors.ParserError as err:
        raise ValueError(f"{str(p)!r} is not a MovieLens ratings file: {err}") from None
    except pd.errors.EmptyDataError:
        raise ValueError(f"{str(p)!r} is empty: no ratings") from None
    return _canonical(raw, source=repr(str(p)))


def _movielens_format(p: Path) -> str:
    name = p.name.lower()
    if name.endswith(".data"):
        return "data"
    if name.endswith(".dat"):
        return "dat"
    if name.endswith(".csv"):
        return "csv"
    with open(p, "r", encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    if "::" in first:
        return "dat"
    if "," in first:
        return "csv"
    if "\t" in first:
        return "data"
    raise ValueError(
        f"{str(p)!r}: cannot tell the MovieLens layout from the name or the first line "
        "(expected u.data, ratings.dat or ratings.csv)"
    )


def _positional(raw: pd.DataFrame, p: Path, what: str) -> pd.DataFrame:
    if raw.shape[1] not in (3, 4):
        raise ValueError(
            f"{str(p)!r}: a {what} file has 3 or 4 fields per line (user, item, rating[, timestamp]), "
            f"found {raw.shape[1]}"
        )
    raw = raw.copy()
    raw.columns = list(RATINGS_COLUMNS[: raw.shape[1]])
    return raw


def _as_integer_ids(values, name: str, source: str) -> np.ndarray:
    s = pd.to_numeric(pd.Series(np.asarray(values)), errors="coerce")
    if s.dtype.kind in "iu":
        return s.to_numpy().astype(np.int64)
    v = s.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        raise ValueError(f"{source}: column {name!r} has {int(bad.sum())} NaN or non-numeric entries")
    if np.any(v != np.round(v)):
        raise ValueError(f"{source}: column {name!r} must hold integer ids, found non-integer values")
    return v.astype(np.int64)


def _canonical(raw: pd.DataFrame, source: str) -> pd.DataFrame:
    """Columns user/item/rating[/timestamp] of any dtype -> checked ratings table."""
    if len(raw) == 0:
        raise ValueError(f"{source}: no ratings (0 rows)")
    user = _as_integer_ids(raw["user"], "user", source)
    item = _as_integer_ids(raw["item"], "item", source)
    rating = pd.to_numeric(pd.Series(np.asarray(raw["rating"])), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(rating)
    if bad.any():
        raise ValueError(f"{source}: column 'rating' has {int(bad.sum())} NaN, infinite or non-numeric entries")
    if "timestamp" in raw.columns:
        timestamp = _as_integer_ids(raw["timestamp"], "timestamp", source)
    else:
        timestamp = np.zeros(len(raw), dtype=np.int64)
    return pd.DataFrame({"user": user, "item": item, "rating": rating, "timestamp": timestamp})


def ratings_from_dataframe(
    df: pd.DataFrame,
    user: str = "user",
    item: str = "item",
    value: str = "rating",
    timestamp: str | None = "timestamp",
) -> pd.DataFrame:
    """Normalize a (user, item, value) table to the canonical ratings table.

    Parameters
    ----------
    df : pandas.DataFrame, N rows
        One row per rating.
    user, item : str
        Names of the columns with the original user and item ids (integer valued).
    value : str
        Name of the column with the rating (any finite number).
    timestamp : str or None
        Name of an integer timestamp column; used when present in ``df``,
        otherwise (or when None) the timestamps are 0.

    Returns
    -------
    pandas.DataFrame
        N rows in the input order, columns ``user`` (int64), ``item`` (int64),
        ``rating`` (float64), ``timestamp`` (int64).

    Raises
    ------
    ValueError
        ``df`` is not a DataFrame or has no rows; a named column is missing;
        NaN (or non-integer) ids; NaN, infinite or non-numeric values.
    """
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    missing = [f"{role}={name!r}" for role, name in (("user", user), ("item", item), ("value", value)) if name not in df.columns]
    if missing:
        raise ValueError(f"df has no column(s) {', '.join(missing)}; its columns are {list(df.columns)}")
    raw = {"user": df[user], "item": df[item], "rating": df[value]}
    if timestamp is not None and timestamp in df.columns:
        raw["timestamp"] = df[timestamp]
    return _canonical(pd.DataFrame({k: np.asarray(v) for k, v in raw.items()}), source="DataFrame")


def ratings_from_scipy(matrix) -> pd.DataFrame:
    """Normalize a users-by-items `scipy.sparse` matrix to the ratings table.

    Row index becomes the user id, column index the item id, the stored value
    the rating. Duplicate stored entries are summed and explicit zeros are
    dropped (a zero in a sparse ratings matrix means "not rated"). No dense
    copy is made.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array, shape (I, J)

    Returns
    -------
    pandas.DataFrame
        N rows (the nonzero entries, sorted by row then column), columns
        ``user`` (int64 row index), ``item`` (int64 column index), ``rating``
        (float64), ``timestamp`` (int64, all 0). Rows or columns without
        entries do not appear, so `index_ratings` of the result has no empty
        user or item.

    Raises
    ------
    ValueError
        ``matrix`` is not scipy.sparse; NaN or infinite values; no nonzero entry.
    """
    if not sp.issparse(matrix):
        raise ValueError(f"matrix must be a scipy.sparse matrix or array, got {type(matrix).__name__}")
    coo = sp.coo_matrix(matrix)
    coo.sum_duplicates()
    data = np.asarray(coo.data, dtype=np.float64)
    if np.any(~np.isfinite(data)):
        raise ValueError(f"matrix: {int(np.sum(~np.isfinite(data)))} stored values are NaN or infinite")
    keep = data != 0
    row, col, data = coo.row[keep], coo.col[keep], data[keep]
    order = np.lexsort((col, row))
    raw = pd.DataFrame({"user": row[order], "item": col[order], "rating": data[order]})
    return _canonical(raw, source="matrix")


# ---------------------------------------------------------------------------
# Indexing
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexedRatings:
    """A ratings table re-indexed to contiguous 0-based user and item indices.

    Attributes
    ----------
    frame : pandas.DataFrame, N rows
        Columns ``u`` (int64, 0 .. I-1), ``i`` (int64, 0 .. J-1), ``rating``
        (float64) and ``timestamp`` (int64); rows sorted by (``u``, ``i``),
        index 0 .. N-1. Each (u, i) pair occurs once.
    user_ids : numpy.ndarray, shape (I,), int64
        Original user ids, increasing: ``user_ids[u]`` is the id of user ``u``.
    item_ids : numpy.ndarray, shape (J,), int64
        Original item ids, increasing: ``item_ids[i]`` is the id of item ``i``.
    """

    frame: pd.DataFrame
    user_ids: np.ndarray
    item_ids: np.ndarray

    @property
    def n_users(self) -> int:
        """I, the number of users."""
        return int(self.user_ids.shape[0])

    @property
    def n_items(self) -> int:
        """J, the number of items."""
        return int(self.item_ids.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """(I, J)."""
        return (self.n_users, self.n_items)

    def user_index(self, ids) -> np.ndarray:
        """Indices ``u`` of original user ids (array_like (M,) -> int64 (M,)).

        Raises `ValueError` for an id that is not in ``user_ids``.
        """
        return _lookup(self.user_ids, ids, "user")

    def item_index(self, ids) -> np.ndarray:
        """Indices ``i`` of original item ids (array_like (M,) -> int64 (M,)).

        Raises `ValueError` for an id that is not in ``item_ids``.
        """
        return _lookup(self.item_ids, ids, "item")


def _lookup(universe: np.ndarray, ids, name: str) -> np.ndarray:
    ids = np.asarray(ids)
    pos = np.searchsorted(universe, ids)
    ok = (pos < universe.size) & (universe[np.minimum(pos, universe.size - 1)] == ids)
    if not np.all(ok):
        raise ValueError(f"{name} id(s) not in the data: {np.asarray(ids)[~ok][:5].tolist()}")
    return pos.astype(np.int64)


def index_ratings(df: pd.DataFrame) -> IndexedRatings:
    """Re-index a ratings table to users 0..I-1 and items 0..J-1.

    The user universe is every user in ``df`` and the item universe every item
    in ``df``; both are numbered in increasing numeric id order, so the result
    does not depend on the row order of ``df``.

    Parameters
    ----------
    df : pandas.DataFrame, N rows
        A ratings table (columns ``user``, ``item``, ``rating``, optional
        ``timestamp``), as returned by the loaders above.

    Returns
    -------
    IndexedRatings
        ``frame`` sorted by (u, i); ``user_ids`` (I,) and ``item_ids`` (J,).

    Raises
    ------
    ValueError
        Not a ratings table (missing column, NaN, non-integer ids), no rows,
        or a (user, item) pair that occurs more than once.
    """
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in ("user", "item", "rating") if c not in df.columns]
    if missing:
        raise ValueError(
            f"df has no column(s) {missing}; pass it through ratings_from_dataframe(df, user=..., item=..., value=...) first"
        )
    df = _canonical(df, source="ratings table")
    user_ids, u = np.unique(df["user"].to_numpy(), return_inverse=True)
    item_ids, i = np.unique(df["item"].to_numpy(), return_inverse=True)
    u = u.reshape(-1).astype(np.int64)
    i = i.reshape(-1).astype(np.int64)
    order = np.lexsort((i, u))
    u, i = u[order], i[order]
    dup = (np.diff(u) == 0) & (np.diff(i) == 0)
    if dup.any():
        k = int(np.flatnonzero(dup)[0])
        raise ValueError(
            f"ratings: {int(dup.sum())} duplicate (user, item) pairs, e.g. user {user_ids[u[k]]} item "
            f"{item_ids[i[k]]}; deduplicate (or sum) them first"
        )
    frame = pd.DataFrame(
        {
            "u": u,
            "i": i,
            "rating": df["rating"].to_numpy()[order],
            "timestamp": df["timestamp"].to_numpy()[order],
        }
    )
    return IndexedRatings(frame=frame, user_ids=user_ids.astype(np.int64), item_ids=item_ids.astype(np.int64))


def to_observations(
    frame_or_indexed,
    values: str = "rating",
    shape: tuple[int, int] | None = None,
    kind: str = "count",
    dtype=np.float64,
) -> Observations:
    """The `Observations` container of an indexed ratings frame.

    Parameters
    ----------
    frame_or_indexed : IndexedRatings or pandas.DataFrame
        An `IndexedRatings`, or a DataFrame with integer columns ``u``, ``i``
        (0-based indices) and the column ``values``.
    values : str
        Column holding the entries (``"rating"``: stars used as counts).
    shape : (int, int), optional
        (I, J). Defaults to ``(n_users, n_items)`` of an `IndexedRatings`;
        required for a DataFrame.
    kind : {"count", "binary", "real"}
        Passed to `Observations.from_coo`, which checks the values.
    dtype : numpy float dtype
        Storage dtype of the values.

    Returns
    -------
    Observations
        Shape (I, J), N entries (zeros dropped).

    Raises
    ------
    ValueError
        Missing columns or shape; and everything `Observations.from_coo`
        raises (for example non-integer stars with ``kind="count"``, as in
        MovieLens 10M's half stars).
    """
    if isinstance(frame_or_indexed, IndexedRatings):
        frame = frame_or_indexed.frame
        if shape is None:
            shape = frame_or_indexed.shape
    elif isinstance(frame_or_indexed, pd.DataFrame):
        frame = frame_or_indexed
        if shape is None:
            raise ValueError("shape=(I, J) is required when passing a DataFrame")
    else:
        raise ValueError(f"expected IndexedRatings or DataFrame, got {type(frame_or_indexed).__name__}")
    missing = [c for c in ("u", "i", values) if c not in frame.columns]
    if missing:
        raise ValueError(f"frame has no column(s) {missing}; its columns are {list(frame.columns)}")
    return Observations.from_coo(
        frame["u"].to_numpy(), frame["i"].to_numpy(), frame[values].to_numpy(), tuple(shape), kind=kind, dtype=dtype
    )


# ---------------------------------------------------------------------------
# Where the data lives
# ---------------------------------------------------------------------------


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/factorbayes`` (default ``~/.cache/factorbayes``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "factorbayes"


def _candidate_dirs() -> list[Path]:
    out = []
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        out.append(Path(env).expanduser() / "ml-100k")
    repo_root = Path(__file__).resolve().parent.parent
    out.append(repo_root.parent / "shared" / "data" / "ml-100k")
    out.append(user_cache_dir() / "ml-100k")
    return out


def find_movielens_100k() -> Path:
    """Locate the MovieLens 100K directory, fetching it if it is nowhere.

    Looks, in order, for a directory holding ``u.data`` at

    1. ``$FACTORBAYES_DATA_DIR/ml-100k``;
    2. ``<repo root>/../shared/data/ml-100k`` (repo root: the parent of the
       ``validation`` package directory);
    3. the user cache, ``$XDG_CACHE_HOME/factorbayes/ml-100k`` (default
       ``~/.cache/factorbayes/ml-100k``);

    and otherwise calls `fetch_movielens_100k` (which downloads into the user
    cache and prints progress to stderr).

    Returns
    -------
    pathlib.Path
        The ``ml-100k`` directory; ``load_movielens`` accepts it.

    Raises
    ------
    RuntimeError
        Not found and the download failed (see `fetch_movielens_100k`).
    """
    for d in _candidate_dirs():
        if (d / "u.data").is_file():
            return d
    return fetch_movielens_100k()


def fetch_movielens_100k(cache_dir: PathLike | None = None, *, force: bool = False) -> Path:
    """Download MovieLens 100K into a cache and return its directory.

    Sources, in order:

    1. GroupLens, ``https://files.grouplens.org/datasets/movielens/ml-100k.zip``
       (5 s timeout, so an unreachable host fails fast); the zip's ``ml-100k/``
       files are extracted as they are.
    2. The copy inside the ``recbole==1.2.1`` wheel on PyPI, fetched with
       ``python -m pip download --no-deps --only-binary=:all:`` (the running
       interpreter's pip, so proxies and indexes configured for pip apply). The
       wheel's atomic files are rewritten in the original layout:
       ``ml-100k.inter`` (tab separated, typed header
       ``user_id:token item_id:token rating:float timestamp:float``) becomes
       ``u.data`` (the same lines without the header, fields in the order
       user, item, rating, timestamp: byte for byte the original 100K
       ``u.data``, checked by SHA-256); ``ml-100k.user`` becomes ``u.user``
       (``|`` separated, no header); ``ml-100k.item`` becomes ``items.tsv``
       (header ``item_id title release_year genres``, genres joined by ``|``,
       UTF-8).

    Both routes check 100,000 ratings from 943 users on 1,682 items.
    Progress lines go to stderr.

    Parameters
    ----------
    cache_dir : path-like, optional
        Directory in which ``ml-100k/`` is created; default `user_cache_dir`
        (``$XDG_CACHE_HOME/factorbayes``).
    force : bool
        Download again even when ``cache_dir/ml-100k/u.data`` exists.

    Returns
    -------
    pathlib.Path
        ``cache_dir/ml-100k``, containing at least ``u.data``.

    Raises
    ------
    RuntimeError
        Both sources failed; the message gives each error and the manual way.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else user_cache_dir()
    target = cache / "ml-100k"
    if (target / "u.data").is_file() and not force:
        _progress(f"MovieLens 100K already cached at {target}")
        return target
    cache.mkdir(parents=True, exist_ok=True)
    errors = []
    for name, fetch in (("GroupLens", _fetch_grouplens), ("recbole wheel on PyPI", _fetch_recbole)):
        with tempfile.TemporaryDirectory(dir=cache, prefix=".ml-100k-") as tmp:
            staging = Path(tmp) / "ml-100k"
            staging.mkdir()
            try:
                _progress(f"fetching MovieLens 100K from {name} ...")
                fetch(Path(tmp), staging)
                _check_ml100k(staging / "u.data")
            except Exception as err:  # noqa: BLE001 - any failure means: try the next source
                msg = f"{name}: {type(err).__name__}: {err}"
                errors.append(msg)
                _progress(f"  failed ({msg})")
                continue
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        _progress(f"MovieLens 100K ready at {target}")
        return target
    raise RuntimeError(
        "could not fetch MovieLens 100K:\n  " + "\n  ".join(errors) + f"\n{_HOW_TO_GET}"
    )


def _progress(msg: str) -> None:
    print(f"[factorbayes] {msg}", file=sys.stderr, flush=True)


def _fetch_grouplens(tmp: Path, staging: Path) -> None:
    zpath = tmp / "ml-100k.zip"
    with urllib.request.urlopen(_GROUPLENS_100K_URL, timeout=5) as resp, open(zpath, "wb") as fh:
        shutil.copyfileobj(resp, fh)
    _progress(f"  downloaded {zpath.stat().st_size} bytes")
    with zipfile.ZipFile(zpath) as zf:
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith("ml-100k/"):
                continue
            name = info.filename[len("ml-100k/") :]
            if "/" in name or not name:
                continue
            (staging / name).write_bytes(zf.read(info))


def _fetch_recbole(tmp: Path, staging: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--dest", str(tmp), _RECBOLE_REQUIREMENT,
    ]
    _progress("  running: " + " ".join(cmd[1:]))
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"pip download exited with {res.returncode}: {' | '.join(tail)}")
    wheels = sorted(tmp.glob("recbole-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download produced no recbole wheel in {tmp}")
    _progress(f"  got {wheels[0].name}; converting recbole atomic files to the MovieLens layout")
    with zipfile.ZipFile(wheels[0]) as zf:
        inter = zf.read(_RECBOLE_PREFIX + "ml-100k.inter").decode("utf-8")
        (staging / "u.data").write_bytes(_inter_to_udata(inter).encode("utf-8"))
        names = set(zf.namelist())
        if _RECBOLE_PREFIX + "ml-100k.user" in names:
            user = _atomic_rows(zf.read(_RECBOLE_PREFIX + "ml-100k.user").decode("utf-8"))[1]
            (staging / "u.user").write_text("".join("|".join(r) + "\n" for r in user), encoding="utf-8")
        if _RECBOLE_PREFIX + "ml-100k.item" in names:
            head, rows = _atomic_rows(zf.read(_RECBOLE_PREFIX + "ml-100k.item").decode("utf-8"))
            lines = ["item_id\ttitle\trelease_year\tgenres\n"]
            for r in rows:
                r = r + [""] * (4 - len(r))
                lines.append("\t".join([r[0], r[1], r[2], "|".join(r[3].split())]) + "\n")
            (staging / "items.tsv").write_text("".join(lines), encoding="utf-8")
    digest = hashlib.sha256((staging / "u.data").read_bytes()).hexdigest()
    if digest != _RECBOLE_UDATA_SHA256:
        raise RuntimeError(f"u.data converted from the wheel has SHA-256 {digest}, expected {_RECBOLE_UDATA_SHA256}")


def _atomic_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """RecBole atomic file: a typed header ``name:type`` per field, then tab-separated rows."""
    lines = [ln for ln in text.split("\n") if ln]
    header = [h.split(":")[0] for h in lines[0].split("\t")]
    return header, [ln.split("\t") for ln in lines[1:]]


def _inter_to_udata(text: str) -> str:
    header, rows = _atomic_rows(text)
    want = ["user_id", "item_id", "rating", "timestamp"]
    if any(w not in header for w in want):
        raise RuntimeError(f"ml-100k.inter header {header} lacks one of {want}")
    idx = [header.index(w) for w in want]
    return "".join("\t".join(r[k] for k in idx) + "\n" for r in rows)


def _check_ml100k(udata: Path) -> None:
    df = load_movielens(udata)
    sizes = (len(df), df["user"].nunique(), df["item"].nunique())
    if sizes != _ML100K_SIZES:
        raise RuntimeError(f"{udata}: expected (ratings, users, items) = {_ML100K_SIZES}, got {sizes}")


# ---------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ImplicitSplit:
    """Leave-one-out split of binarized ratings (protocol "P1").

    Attributes
    ----------
    train : Observations
        Shape (I, J), ``kind="binary"``, every stored value 1: the training
        positives.
    test_users : numpy.ndarray, shape (T,), int64
        Increasing user indices, one per user with a held-out item.
    test_items : numpy.ndarray, shape (T,), int64
        ``test_items[t]`` is the held-out positive of ``test_users[t]``.
    indexed : IndexedRatings
        The full re-indexed ratings (I users, J items).
    """

    train: Observations
    test_users: np.ndarray
    test_items: np.ndarray
    indexed: IndexedRatings

    @property
    def n_users(self) -> int:
        """I."""
        return self.train.n_rows

    @property
    def n_items(self) -> int:
        """J."""
        return self.train.n_cols


@dataclass(frozen=True)
class HoldoutSplit:
    """Random holdout of ratings used as counts (protocol "P3").

    Attributes
    ----------
    train, test : Observations
        Both shape (I, J), ``kind="count"`` (ratings as counts); disjoint
        entries whose union is every rating.
    indexed : IndexedRatings
        The full re-indexed ratings (I users, J items).
    """

    train: Observations
    test: Observations
    indexed: IndexedRatings

    @property
    def n_users(self) -> int:
        """I."""
        return self.train.n_rows

    @property
    def n_items(self) -> int:
        """J."""
        return self.train.n_cols


def _indexed(df) -> IndexedRatings:
    return df if isinstance(df, IndexedRatings) else index_ratings(df)


def split_leave_one_out(df, seed: int = 0, threshold: float = 4.0, dtype=np.float64) -> ImplicitSplit:
    """Protocol "P1": binarize, then hold out one positive per user.

    The held-out-item evaluation of 000_619a0297b9d686b2.txt, section 6 ("for
    each user, one item was randomly removed to create a test set"; metric
    eq. 12) and 003_203f63200c0d7157.txt, section 6.1.2 (eq. 20), on the
    "4 and 5 stars" binarization of seed 000.

    Algorithm (exactly):

    1. Re-index with `index_ratings` (users and items in increasing id order;
       the item universe is every item of ``df``, including items that end up
       with no positive).
    2. Positives: ratings with ``rating >= threshold``.
    3. ``rng = numpy.random.default_rng(seed)``, one generator for the whole
       split. Go through the users in index order ``u = 0, 1, ..., I-1``; for
       each user with ``n_positives >= 2``, let ``pos`` be that user's positive
       item indices sorted increasingly and draw ``k = rng.integers(n_positives)``;
       ``pos[k]`` is the user's test item and the other positives go to
       training. Users with 0 or 1 positive draw nothing (their single
       positive, if any, stays in training) and have no test item.

    Parameters
    ----------
    df : pandas.DataFrame or IndexedRatings
        A ratings table (see `load_movielens`) or its re-indexed form.
    seed : int
        Seed of the generator; the same seed gives the same split.
    threshold : float
        A rating ``>= threshold`` is a positive.
    dtype : numpy float dtype
        Storage dtype of ``train.values``.

    Returns
    -------
    ImplicitSplit
        ``train`` (I, J) binary; ``test_users``, ``test_items`` (T,) int64.

    Raises
    ------
    ValueError
        Bad ratings table (see `index_ratings`); no positive at the threshold;
        no user with two positives (empty test set).
    """
    indexed = _indexed(df)
    frame = indexed.frame
    pos = frame[frame["rating"].to_numpy() >= threshold]
    u = pos["u"].to_numpy()
    i = pos["i"].to_numpy()  # sorted by (u, i): frame is
    if u.size == 0:
        raise ValueError(f"rating: no rating >= threshold={threshold}, so there are no positives")
    starts = np.searchsorted(u, np.arange(indexed.n_users), side="left")
    ends = np.searchsorted(u, np.arange(indexed.n_users), side="right")
    rng = np.random.default_rng(seed)
    keep = np.ones(u.size, dtype=bool)
    test_users, test_items = [], []
    for user in range(indexed.n_users):
        n = int(ends[user] - starts[user])
        if n >= 2:
            k = int(rng.integers(n))
            test_users.append(user)
            test_items.append(int(i[starts[user] + k]))
            keep[starts[user] + k] = False
    if not test_users:
        raise ValueError(f"rating: no user has two or more positives at threshold={threshold}; the test set is empty")
    train = Observations.from_coo(
        u[keep], i[keep], np.ones(int(keep.sum())), indexed.shape, kind="binary", dtype=dtype
    )
    return ImplicitSplit(
        train=train,
        test_users=np.asarray(test_users, dtype=np.int64),
        test_items=np.asarray(test_items, dtype=np.int64),
        indexed=indexed,
    )


def split_random_holdout(
    df,
    seed: int = 0,
    test_fraction: float = 0.2,
    *,
    row_order: str = "sorted",
    dtype=np.float64,
) -> HoldoutSplit:
    """Protocol "P3": hold out a random fraction of all ratings.

    The evaluation of 004_90693a0965f06816.txt, section 5.4.4: "a held out set
    consisting of 20% data instances randomly selected. Training is done on the
    remaining 80%". Ratings (stars) are used as counts.

    Algorithm (exactly): with N ratings, ``perm =
    numpy.random.default_rng(seed).permutation(N)`` indexes the rows; the rows
    ``perm[:round(test_fraction * N)]`` are the test set, the rest training
    (Python's ``round``, half to even). Which rows ``perm`` indexes is set by
    ``row_order``:

    - ``"sorted"`` (default): the rows of ``index_ratings(df).frame``, sorted
      by (user, item) index; the split then depends only on the set of
      ratings, not on how a file happens to order them.
    - ``"input"``: the rows of ``df`` in the order given (file order for
      `load_movielens`). This is what ``rng.permutation(len(df))`` over a
      freshly loaded file does; the popularity reference numbers quoted in
      ``validation.metrics`` were measured that way.

    Parameters
    ----------
    df : pandas.DataFrame (or IndexedRatings with ``row_order="sorted"``)
        A ratings table.
    seed : int
        Seed of the permutation.
    test_fraction : float
        Fraction of ratings held out, in (0, 1).
    row_order : {"sorted", "input"}
        See above.
    dtype : numpy float dtype
        Storage dtype of the values.

    Returns
    -------
    HoldoutSplit
        ``train`` and ``test``: (I, J) count `Observations`, disjoint, union =
        all ratings; I and J count every user and item of ``df`` (a user or
        item may have no training entry).

    Raises
    ------
    ValueError
        Bad ratings table; ``test_fraction`` not in (0, 1) or giving an
        empty train or test set; non-integer ratings (not counts); bad
        ``row_order``.
    """
    if not (0.0 < float(test_fraction) < 1.0):
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if row_order not in ("sorted", "input"):
        raise ValueError(f"row_order must be 'sorted' or 'input', got {row_order!r}")
    indexed = _indexed(df)
    if row_order == "sorted":
        u = indexed.frame["u"].to_numpy()
        i = indexed.frame["i"].to_numpy()
        r = indexed.frame["rating"].to_numpy()
    else:
        if isinstance(df, IndexedRatings):
            raise ValueError("row_order='input' needs the ratings table itself, not an IndexedRatings")
        table = _canonical(df, source="ratings table")
        u = indexed.user_index(table["user"].to_numpy())
        i = indexed.item_index(table["item"].to_numpy())
        r = table["rating"].to_numpy()
    n = u.size
    n_test = round(float(test_fraction) * n)
    if n_test < 1 or n_test > n - 1:
        raise ValueError(f"test_fraction={test_fraction} of {n} ratings gives {n_test} test ratings; train and test must both be non-empty")
    perm = np.random.default_rng(seed).permutation(n)
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    mk = lambda idx: Observations.from_coo(u[idx], i[idx], r[idx], indexed.shape, kind="count", dtype=dtype)  # noqa: E731
    return HoldoutSplit(train=mk(train_idx), test=mk(test_idx), indexed=indexed)


def dense_submatrix(df, n_users: int = 60, n_items: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dense block of the most active users and the most popular items.

    Users are ranked by their number of ratings (ties: smaller id first), items
    by their number of ratings (ties: smaller id first), both counted on the
    whole of ``df``; the block keeps the top ``n_users`` x ``n_items``, with
    ratings used as counts and 0 where a user did not rate the item. Rows and
    columns are in increasing id order. A small real-data block for NUTS-sized
    cross-checks of count models.

    Parameters
    ----------
    df : pandas.DataFrame or IndexedRatings
        A ratings table.
    n_users, n_items : int
        Block size, each at least 1 and at most the number of users / items.

    Returns
    -------
    counts : numpy.ndarray, shape (n_users, n_items), float64
        ``counts[a, b]`` is the rating of user ``user_ids[a]`` for item ``item_ids[b]``, or 0.
    user_ids : numpy.ndarray, shape (n_users,), int64
        Original ids of the rows, increasing.
    item_ids : numpy.ndarray, shape (n_items,), int64
        Original ids of the columns, increasing.

    Raises
    ------
    ValueError
        Bad ratings table; ``n_users`` or ``n_items`` below 1 or above what the data has.
    """
    indexed = _indexed(df)
    for name, k, avail in (("n_users", n_users, indexed.n_users), ("n_items", n_items, indexed.n_items)):
        if int(k) != k or not 1 <= k <= avail:
            raise ValueError(f"{name} must be an integer in [1, {avail}], got {k}")
    f = indexed.frame
    u, i, r = f["u"].to_numpy(), f["i"].to_numpy(), f["rating"].to_numpy()
    ucount = np.bincount(u, minlength=indexed.n_users)
    icount = np.bincount(i, minlength=indexed.n_items)
    # indices are in increasing id order, so a stable sort on -count breaks ties by smaller id
    top_u = np.sort(np.argsort(-ucount, kind="stable")[: int(n_users)])
    top_i = np.sort(np.argsort(-icount, kind="stable")[: int(n_items)])
    row_of = np.full(indexed.n_users, -1)
    row_of[top_u] = np.arange(top_u.size)
    col_of = np.full(indexed.n_items, -1)
    col_of[top_i] = np.arange(top_i.size)
    sel = (row_of[u] >= 0) & (col_of[i] >= 0)
    counts = np.zeros((top_u.size, top_i.size), dtype=np.float64)
    counts[row_of[u[sel]], col_of[i[sel]]] = r[sel]
    return counts, indexed.user_ids[top_u], indexed.item_ids[top_i]


# ---------------------------------------------------------------------------
# Protocol P2: explicit ratings, 90:10 random split, and FM designs
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RatingsSplit:
    """Random 90:10 split of explicit ratings (protocol "P2"), ratings kept as real values.

    Row ``n`` of ``train_frame`` is entry ``n`` of ``train`` (both in row-major
    ``(u, i)`` order, the order `Observations` stores), and likewise for test;
    `fm_features` builds design row ``n`` from the same entry, so
    ``train.values``, ``train_frame["rating"]`` and the design's ``y`` agree
    element by element.

    Attributes
    ----------
    train, test : Observations
        Both shape (I, J), ``kind="real"`` (stars as real numbers, zeros kept);
        disjoint entries whose union is every rating. A user or item may have no
        training entry (it then has one only in ``test``).
    user_ids : numpy.ndarray, shape (I,), int64
        Original user ids, increasing: ``user_ids[u]`` is the id of index ``u``.
    item_ids : numpy.ndarray, shape (J,), int64
        Original item ids, increasing: ``item_ids[i]`` is the id of index ``i``.
    train_frame, test_frame : pandas.DataFrame
        The raw rows of each side: columns ``user``, ``item`` (original ids,
        int64), ``rating`` (float64), ``timestamp`` (int64), ``u``, ``i``
        (indices, int64); sorted by (``u``, ``i``), index 0 .. N-1.
    seed : int
        Seed of the permutation.
    test_fraction : float
        Fraction of ratings held out.
    """

    train: Observations
    test: Observations
    user_ids: np.ndarray
    item_ids: np.ndarray
    train_frame: pd.DataFrame
    test_frame: pd.DataFrame
    seed: int
    test_fraction: float

    @property
    def n_users(self) -> int:
        """I."""
        return int(self.user_ids.shape[0])

    @property
    def n_items(self) -> int:
        """J."""
        return int(self.item_ids.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """(I, J)."""
        return (self.n_users, self.n_items)

    def user_index(self, ids) -> np.ndarray:
        """Indices ``u`` of original user ids; `ValueError` for an unknown id."""
        return _lookup(self.user_ids, ids, "user")

    def item_index(self, ids) -> np.ndarray:
        """Indices ``i`` of original item ids; `ValueError` for an unknown id."""
        return _lookup(self.item_ids, ids, "item")


def split_p2(df, seed: int = 0, test_fraction: float = 0.1, *, dtype=np.float64) -> RatingsSplit:
    """Protocol "P2": hold out a random 10 % of the ratings, ratings as real values.

    The rating-prediction evaluation of the Gaussian models of
    004_90693a0965f06816.txt (chapter 3, section 3.3.1: "90:10 split is used to
    create their train and test sets" for MovieLens, evaluated by RMSE; the
    same RMSE protocol in chapter 4), applied to MovieLens 100K.

    Algorithm (exactly):

    1. ``table = ratings_from_dataframe(df)`` checks the ratings table; rows
       stay in the order given (file order for `load_movielens`).
    2. Users and items are re-indexed over ALL users and items of ``df``
       (train and test together), ``0 .. I-1`` and ``0 .. J-1`` in increasing
       numeric id order (as `index_ratings`, which also rejects duplicate
       (user, item) pairs).
    3. With N ratings, ``perm = numpy.random.default_rng(seed).permutation(N)``
       indexes the rows of ``table`` in that input order; the rows
       ``perm[:round(test_fraction * N)]`` (Python's ``round``, half to even)
       are the test set, the others the training set. On MovieLens 100K:
       10,000 test and 90,000 training ratings.
    4. Each side is stored as ``kind="real"`` `Observations` of shape (I, J)
       (zeros kept), and its rows as a frame, both in row-major (u, i) order.

    Parameters
    ----------
    df : pandas.DataFrame
        A ratings table (see `load_movielens`), or any DataFrame with columns
        ``user``, ``item``, ``rating`` (``timestamp`` optional).
    seed : int
        Seed of the permutation; the same seed gives the same split.
    test_fraction : float
        Fraction held out, in (0, 1); 0.1 is the thesis' 90:10.
    dtype : numpy float dtype
        Storage dtype of the `Observations` values.

    Returns
    -------
    RatingsSplit

    Raises
    ------
    ValueError
        ``df`` not a DataFrame or not a ratings table (missing column, NaN,
        non-integer ids, duplicate (user, item) pairs, no rows);
        ``test_fraction`` outside (0, 1) or leaving train or test empty.
    """
    if not (0.0 < float(test_fraction) < 1.0):
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if isinstance(df, IndexedRatings):
        raise ValueError("df: split_p2 needs the ratings table itself (input row order), not an IndexedRatings")
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    table = ratings_from_dataframe(df)
    indexed = index_ratings(table)  # checks duplicates; the universe is all users/items
    u = indexed.user_index(table["user"].to_numpy())
    i = indexed.item_index(table["item"].to_numpy())
    n = len(table)
    n_test = round(float(test_fraction) * n)
    if n_test < 1 or n_test > n - 1:
        raise ValueError(
            f"test_fraction={test_fraction} of {n} ratings gives {n_test} test ratings; "
            "train and test must both be non-empty"
        )
    perm = np.random.default_rng(seed).permutation(n)
    full = table.assign(u=u, i=i)

    def side(idx):
        idx = idx[np.lexsort((i[idx], u[idx]))]
        frame = full.iloc[idx].reset_index(drop=True)
        obs = Observations.from_coo(
            frame["u"].to_numpy(), frame["i"].to_numpy(), frame["rating"].to_numpy(), indexed.shape,
            kind="real", dtype=dtype, drop_zeros=False,
        )
        return obs, frame

    test, test_frame = side(perm[:n_test])
    train, train_frame = side(perm[n_test:])
    return RatingsSplit(
        train=train, test=test, user_ids=indexed.user_ids, item_ids=indexed.item_ids,
        train_frame=train_frame, test_frame=test_frame, seed=int(seed), test_fraction=float(test_fraction),
    )


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
    for d in _candidate_dirs():
        if (d / "u.user").is_file() and ((d / "items.tsv").is_file() or (d / "u.item").is_file()):
            return d
    raise ValueError(
        "data_dir: no directory with u.user and items.tsv (or u.item) found at "
        f"{[str(d) for d in _candidate_dirs()]}; pass data_dir=... . {_HOW_TO_GET}"
    )


def load_movielens_users(data_dir: PathLike) -> pd.DataFrame:
    """Read MovieLens 100K ``u.user`` (``user_id|age|gender|occupation|zip_code``, no header).

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
    """
    from custom_inference.fm_design import FMDesign  # local: keeps `import validation.datasets` light

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
