"""Loaders: every file and in-memory format users have -> one canonical *ratings table*.

The ratings table
-----------------
A `pandas.DataFrame`, N rows, with exactly the columns `RATINGS_COLUMNS`:

- ``user``, ``item``: the original ids, as given. **Id dtype rule**: a column is
  ``int64`` when every id in it is an integer that fits int64 (written in a file as a
  plain decimal: ``0`` or ``-?[1-9][0-9]*``, surrounding spaces ignored); otherwise the
  whole column is kept as strings (pandas' string dtype; the ids exactly as written,
  surrounding spaces stripped). So ``196`` is the integer 196, while ``u196``, ``007``,
  ``1.0`` or ``92233720368547758070`` (beyond int64) stay strings and never wrap or
  collide. The user and item columns are decided separately. MovieLens files
  (`load_movielens`) keep their historic rule: integer ids only, refused otherwise (an id
  beyond int64 is refused, never wrapped).
- ``rating``: float64, finite (1.0 for one-class data such as baskets).
- ``timestamp``: int64 (Unix seconds where the source has them, else 0).

Loaders
-------
- `load_movielens`: MovieLens ``u.data`` / ``ratings.dat`` / ``ratings.csv`` (behaviour as
  before the split of ``validation/data/datasets.py``).
- `load_delimited`: any delimited (user, item[, value][, timestamp]) file, columns named
  by header name or position, separator sniffed or given.
- `load_fimi`: FIMI transaction files (one basket a line, space-separated integer item ids).
- `load_basket_csv`: named-item baskets (items separated by commas, one basket a line).
- `load`: one entry point with ``format="auto"`` detection.
- `ratings_from_dataframe`, `ratings_from_scipy`: in-memory tables and sparse matrices.
- `transform`: value transforms for count models (round, double half stars, binarize).

The parsing helpers (file checks, line lookup for messages, the id dtype rule and value checks)
live in `validation.data.parsing`.

Every malformed file raises a `ValueError` whose message names the file, the line (or the
column) and what was expected; binary or non-UTF-8 files included (never a raw
`UnicodeDecodeError`). A path that does not exist raises `FileNotFoundError`.

Source: project addition (file formats: MovieLens READMEs, GroupLens; FIMI repository
format, fimi.uantwerpen.be; Groceries of the R package arules).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import pandas as pd
import scipy.sparse as sp

from validation.data.parsing import (  # noqa: F401 (splits and features import _canonical / _integer_ids from here)
    PathLike,
    _INT64_MAX,
    _SNIFF_BYTES,
    _NOT_REAL,
    _canonical,
    _check_text,
    _data_line_finder,
    _decode_error_anywhere,
    _existing_file,
    _first_bad,
    _ids,
    _integer_ids,
    _line_col,
    _read_text,
    _sniff_check,
    _src,
    _string_tokens_to_ids,
    _values,
)

__all__ = [
    "RATINGS_COLUMNS",
    "FORMATS",
    "TRANSFORMS",
    "load",
    "load_movielens",
    "load_delimited",
    "load_fimi",
    "load_basket_csv",
    "values_for",
    "ratings_from_dataframe",
    "ratings_from_scipy",
    "transform",
]


#: Columns of the canonical ratings table, in order.
RATINGS_COLUMNS = ("user", "item", "rating", "timestamp")

#: Formats accepted by `load` (``"auto"`` detects one of the others).
FORMATS = ("auto", "movielens", "csv", "fimi", "basket-csv")

#: Value transforms of `transform`.
TRANSFORMS = ("none", "round", "double", "binarize", "error")

_MOVIELENS_FILES = ("u.data", "ratings.dat", "ratings.csv")

_HOW_TO_GET = (
    "Get MovieLens 100K with `python -c \"from validation.data.datasets import "
    "fetch_movielens_100k; fetch_movielens_100k()\"` (GroupLens, or the copy inside the "
    "recbole==1.2.1 wheel on PyPI), or download "
    "https://files.grouplens.org/datasets/movielens/ml-100k.zip, unzip it and point "
    "$FACTORBAYES_DATA_DIR at the directory that contains ml-100k/."
)

_SEPARATORS = ("\t", ",", ";", "|", "::", " ")

# the column aliases of the MovieLens ratings.csv header (also used by `load`'s detection)
_ML_CSV_ALIASES = (
    ("user", ("userid", "user", "user_id")),
    ("item", ("movieid", "item", "item_id", "movie_id")),
    ("rating", ("rating",)),
    ("timestamp", ("timestamp",)),
)


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
        (float64, stars) and ``timestamp`` (int64, Unix seconds; 0 when the
        file has no timestamp column).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist, or is a directory without a ratings file; the
        message names the path and says how to get the data.
    ValueError
        The file cannot be parsed as ratings; the message names the file and the
        line or column: wrong number of columns, an unknown CSV header, NaN or
        non-integer ids, ids beyond the int64 range (refused, never wrapped), NaN
        ratings, no rows, binary or non-UTF-8 content.

    Source: project addition (MovieLens README formats).
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
    _sniff_check(p)
    fmt = _movielens_format(p)
    raw, line_of = _read_movielens(p, fmt, None)
    if any(raw[c].dtype.kind not in "iu" for c in ("user", "item")):
        # pandas could not hold an id column as integers (an id beyond int64 next to a negative one
        # gives float64, which is inexact beyond 2**53; text gives object): read the exact digits
        # again, so that a valid id is never refused for another's sake and the line reported is right
        raw, line_of = _read_movielens(p, fmt, str)
    return _canonical(raw, source=repr(str(p)), integer_ids=True, line_of=line_of)


def _read_movielens(p: Path, fmt: str, dtype):
    """The raw user/item/rating[/timestamp] columns of a MovieLens file and its line finder."""
    try:
        if fmt == "data":
            raw = pd.read_csv(p, sep="\t", header=None, dtype=dtype)
            raw = _positional(raw, p, "tab-separated u.data", lambda ln: len(ln.split("\t")))
            line_of = _data_line_finder(p, "\t", 0)
        elif fmt == "dat":
            # '::' split on ':' gives empty fields at odd positions; this keeps the
            # fast C parser (sep='::' would force the slow Python engine).
            raw = pd.read_csv(p, sep=":", header=None, dtype=dtype)
            if raw.shape[1] not in (5, 7) or raw.iloc[:, 1::2].notna().to_numpy().any():
                n = raw.shape[1]
                bad = _first_line(p, 0, lambda ln: ln.count(":") != n - 1 or ":::" in ln
                                  or any(f == "" for f in ln.split("::")) or len(ln.split("::")) not in (3, 4))
                where = f"line {bad[0]} ({bad[1][:80]!r})" if bad else "line 1"
                raise ValueError(
                    f"{str(p)!r}: {where}: expected 'user::item::rating[::timestamp]' lines (3 or 4 fields "
                    f"separated by '::', the same number on every line), got {n} ':'-separated fields"
                )
            raw = _positional(raw.iloc[:, 0::2], p, "'::'-separated ratings.dat", lambda ln: len(ln.split("::")))
            line_of = _data_line_finder(p, ":", 0)
        else:
            raw = pd.read_csv(p, sep=",", dtype=dtype)
            cols = {str(c).strip().lower(): c for c in raw.columns}
            names = {}
            for canon, options in _ML_CSV_ALIASES:
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
            line_of = _data_line_finder(p, ",", 1)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{str(p)!r} is empty: no ratings") from None
    except pd.errors.ParserError as err:
        raise ValueError(f"{str(p)!r} is not a MovieLens ratings file: {str(err).strip()}") from None
    except UnicodeDecodeError:
        raise _decode_error_anywhere(p) from None
    except (ValueError, OverflowError) as err:
        if str(p) in str(err):
            raise
        raise ValueError(f"{str(p)!r} is not a MovieLens ratings file: {str(err).strip()}") from None
    return raw, line_of


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


def _first_line(p: Path, header_lines: int, bad: Callable[[str], bool]) -> Optional[tuple[int, str]]:
    """(1-based line number, text) of the first non-blank line after the header for which ``bad`` is
    true, or None. Reads the file again: for error messages only."""
    with open(p, "r", encoding="utf-8", errors="replace", newline="") as fh:
        for n, line in enumerate(fh, start=1):
            body = line.rstrip("\r\n")
            if n > header_lines and body.strip() and bad(body):
                return n, body
    return None


def _positional(raw: pd.DataFrame, p: Path, what: str, n_fields: Callable[[str], int]) -> pd.DataFrame:
    if raw.shape[1] not in (3, 4):
        bad = _first_line(p, 0, lambda ln: n_fields(ln) != raw.shape[1] or n_fields(ln) not in (3, 4))
        where = f"line {bad[0]} ({bad[1][:80]!r})" if bad else "line 1"
        raise ValueError(
            f"{str(p)!r}: {where}: a {what} file has 3 or 4 fields per line (user, item, rating[, timestamp]); "
            f"expected that, found {raw.shape[1]} fields"
        )
    raw = raw.copy()
    raw.columns = list(RATINGS_COLUMNS[: raw.shape[1]])
    return raw


# ---------------------------------------------------------------------------
# delimited files with any header
# ---------------------------------------------------------------------------


def _sample_lines(p: Path, n: int = 50) -> list[str]:
    with open(p, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    partial = len(head) == _SNIFF_BYTES
    _check_text(p, head, final=not partial)
    text = head.decode("utf-8-sig", errors="ignore")
    lines = text.splitlines()
    if partial and lines:
        lines = lines[:-1]  # possibly cut
    return [ln for ln in lines if ln.strip()][:n]


def _fields(line: str, sep: str) -> int:
    return len(line.split()) if sep == " " else line.count(sep) + 1


def _sniff_separator(lines: list[str]) -> Optional[str]:
    """The first of tab, comma, semicolon, pipe, '::', space that splits every sample line into
    the same number (>= 2) of fields; else the only one of them present in the first line."""
    if not lines:
        return None
    for sep in _SEPARATORS:
        counts = {_fields(ln, sep) for ln in lines}
        if len(counts) == 1 and counts.pop() >= 2:
            return sep
    present = [s for s in _SEPARATORS if _fields(lines[0], s) >= 2]
    present = [s for s in present if not (s == ":" and "::" in present)]
    return present[0] if len(present) == 1 else None


def _resolve_column(spec, role: str, header: Optional[list[str]], n_fields: int, p: Path, sep: str) -> int:
    if isinstance(spec, (bool, np.bool_)):
        raise ValueError(f"{role} must be a column name (str) or a 0-based position (int), got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        if not 0 <= int(spec) < n_fields:
            raise ValueError(
                f"{_src(p)}: {role}={int(spec)} is out of range: the file has {n_fields} fields per line "
                f"(separator {sep!r}); positions are 0-based"
            )
        return int(spec)
    if not isinstance(spec, str):
        raise ValueError(f"{role} must be a column name (str) or a 0-based position (int), got {type(spec).__name__}")
    if header is None:
        raise ValueError(f"{_src(p)}: {role}={spec!r} names a column but header=False; pass header=True or a position")
    if spec in header:
        return header.index(spec)
    folded = [h.strip().lower() for h in header]
    hits = [k for k, h in enumerate(folded) if h == spec.strip().lower()]
    if len(hits) == 1:
        return hits[0]
    raise ValueError(
        f"{_src(p)}: no column {spec!r} ({role}) in the header; the header found is {header} "
        f"(separator {sep!r}). Pass {role} as one of these names, or a 0-based position"
    )


def load_delimited(
    path: PathLike,
    *,
    user_col: Union[str, int],
    item_col: Union[str, int],
    value_col: Union[str, int, None] = None,
    timestamp_col: Union[str, int, None] = None,
    sep: Optional[str] = None,
    header: Optional[bool] = None,
) -> pd.DataFrame:
    """Read a delimited (user, item[, value][, timestamp]) file with any column names.

    Parameters
    ----------
    path : str or path-like
        A UTF-8 text file, one record a line. Lines whose fields are all empty are
        skipped like blank lines.
    user_col, item_col : str or int
        The user and item columns: a header name (exact, else case- and
        space-insensitive if that is unique) or a 0-based position.
    value_col : str, int or None
        The value column (any finite number); None for one-class data (every value 1.0).
    timestamp_col : str, int or None
        An integer timestamp column; None gives timestamps 0.
    sep : str or None
        The separator. None sniffs it from the first 50 non-blank lines: the first of
        tab, ``,``, ``;``, ``|``, ``::``, space that splits every line into the same number
        (>= 2) of fields; ``" "`` means any run of white space.
    header : bool or None
        Whether the first line is a header. None: True when any column is given by name,
        False when all are positions.

    Returns
    -------
    pandas.DataFrame
        The ratings table, N rows in file order: ``user``, ``item`` (int64 or strings,
        see the module's id dtype rule), ``rating`` (float64), ``timestamp`` (int64).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Naming the file and the line or column: a named column missing (the message
        lists the header found), a position out of range, an unknown separator, a row
        with too many fields, an empty id (short row), a non-numeric or non-finite
        value, a non-integer timestamp, no data rows, binary or non-UTF-8 content.

    Source: project addition.
    """
    p = _existing_file(path, "delimited ratings file")
    lines = _sample_lines(p)
    if not lines:
        raise ValueError(f"{_src(p)} is empty: no data lines")
    if sep is None:
        sep = _sniff_separator(lines)
        if sep is None:
            raise ValueError(
                f"{_src(p)}: cannot tell the separator from the first lines (line 1: {lines[0][:80]!r}); "
                "pass sep=',' (or ';', '\\t', '|', ' ')"
            )
    if not isinstance(sep, str) or sep == "":
        raise ValueError(f"sep must be a non-empty string, got {sep!r}")
    specs = {"user_col": user_col, "item_col": item_col, "value_col": value_col, "timestamp_col": timestamp_col}
    if header is None:
        header = any(isinstance(v, str) for v in specs.values())
    pd_sep = r"\s+" if sep == " " else sep
    engine = "python" if len(sep) > 1 and sep != " " else "c"
    try:
        raw = pd.read_csv(
            p, sep=pd_sep, header=0 if header else None, dtype=str, keep_default_na=False, na_filter=False,
            skip_blank_lines=False, engine=engine, encoding="utf-8-sig",
        )
    except pd.errors.EmptyDataError:
        raise ValueError(f"{_src(p)} is empty: no data lines") from None
    except (pd.errors.ParserError, csv.Error) as err:
        raise ValueError(f"{_src(p)}: not a delimited table with separator {sep!r}: {str(err).strip()}") from None
    except UnicodeDecodeError:
        raise _decode_error_anywhere(p) from None
    except (ValueError, OverflowError) as err:
        raise ValueError(f"{_src(p)}: not a delimited table with separator {sep!r}: {str(err).strip()}") from None
    names = [str(c) for c in raw.columns] if header else None
    n_fields = raw.shape[1]
    cols = {}
    for role, spec in specs.items():
        if spec is not None:
            cols[role] = _resolve_column(spec, role, names, n_fields, p, sep)
    header_lines = 1 if header else 0
    cells = raw.to_numpy(dtype=object)
    blank = np.all((cells == "") | pd.isna(cells), axis=1) if cells.size else np.zeros(len(raw), dtype=bool)
    keep = np.flatnonzero(~blank)
    if keep.size == 0:
        raise ValueError(f"{_src(p)}: no data lines" + (" below the header" if header else ""))

    def line_of(k: int) -> str:
        return f"line {header_lines + int(keep[k]) + 1}"

    source = _src(p)

    def col(role):
        return cells[keep, cols[role]]

    out = {
        "user": _ids(col("user_col"), _colname(names, cols["user_col"]), source, line_of),
        "item": _ids(col("item_col"), _colname(names, cols["item_col"]), source, line_of),
    }
    if value_col is not None:
        out["rating"] = _values(col("value_col"), _colname(names, cols["value_col"]), source, line_of)
    else:
        out["rating"] = np.ones(keep.size, dtype=np.float64)
    if timestamp_col is not None:
        ts = np.array([x.strip() for x in col("timestamp_col")], dtype=object)
        out["timestamp"] = _integer_ids(ts, _colname(names, cols["timestamp_col"]), source, line_of)
    else:
        out["timestamp"] = np.zeros(keep.size, dtype=np.int64)
    return pd.DataFrame(out, columns=list(RATINGS_COLUMNS))


def _colname(names, pos) -> str:
    """The label of a column in messages: its header name, else its 0-based position."""
    return names[pos] if names is not None else str(pos)


# ---------------------------------------------------------------------------
# baskets
# ---------------------------------------------------------------------------


def _basket_table(basket: np.ndarray, item: np.ndarray) -> pd.DataFrame:
    t = pd.DataFrame({"user": basket, "item": item})
    t = t[~t.duplicated(["user", "item"])].reset_index(drop=True)
    t["rating"] = np.ones(len(t), dtype=np.float64)
    t["timestamp"] = np.zeros(len(t), dtype=np.int64)
    return t


def load_fimi(path: PathLike) -> pd.DataFrame:
    """Read a FIMI transaction file as one-class (basket, item, 1.0) data.

    The FIMI repository's format: one basket (transaction) a line, its items as
    non-negative integer ids separated by spaces (tabs and trailing white space
    allowed; ``\\r\\n`` line ends allowed). A blank line is an empty basket and has no row.

    Parameters
    ----------
    path : str or path-like
        For example ``../shared/data/baskets/T10I4D100K.dat``.

    Returns
    -------
    pandas.DataFrame
        One row per distinct (basket, item) pair, in file order (an item repeated within
        a basket is kept once, at its first occurrence): ``user`` (int64, the basket id:
        the basket's 1-based line number), ``item`` (int64 item id; strings when an id
        has leading zeros or is beyond int64, per the module's id rule), ``rating``
        (float64, all 1.0), ``timestamp`` (int64, all 0).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Naming the file, line and column: a character other than digits and white space
        (a negative id, a name, a separator other than white space), binary or non-UTF-8
        content, no item at all.

    Source: project addition (FIMI workshop data format, fimi.uantwerpen.be/data).
    """
    p = _existing_file(path, "FIMI basket file")
    raw = p.read_bytes()
    b = np.frombuffer(raw, dtype=np.uint8)
    isdig = (b >= 48) & (b <= 57)
    allowed = isdig | (b == 32) | (b == 9) | (b == 13) | (b == 10)
    if not allowed.all():
        off = _first_bad(~allowed)
        _check_text(p, raw)  # binary or non-UTF-8 content gets its own message
        line, col = _line_col(raw, off)
        ch = raw[off:off + 4].decode("utf-8", errors="replace")[:1]
        raise ValueError(
            f"{_src(p)}: line {line}, column {col}: unexpected character {ch!r}; expected non-negative integer "
            "item ids separated by spaces, one basket a line (the FIMI format)"
        )
    edges = np.diff(np.concatenate(([0], isdig.view(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    if starts.size == 0:
        raise ValueError(f"{_src(p)}: no item ids (empty file or only blank lines); expected one basket a line")
    newlines = np.flatnonzero(b == 10)
    basket = np.searchsorted(newlines, starts).astype(np.int64) + 1  # 1-based line of each token
    lengths = ends - starts
    leading_zero = (b[starts] == 48) & (lengths > 1)
    too_long = lengths >= 19
    if leading_zero.any() or (too_long.any() and any(int(raw[s:e]) > _INT64_MAX for s, e in zip(starts[too_long], ends[too_long]))):
        item = np.array([raw[s:e].decode("ascii") for s, e in zip(starts, ends)], dtype=object)
    else:
        if too_long.any():  # 19 digits that fit int64: exact Python ints for those tokens
            item = np.array([int(raw[s:e]) for s, e in zip(starts, ends)], dtype=np.int64)
        else:
            digit_pos = np.flatnonzero(isdig)
            exponent = np.repeat(ends, lengths) - 1 - digit_pos
            digits = (b[digit_pos] - 48).astype(np.int64) * (10 ** exponent.astype(np.int64))
            first_digit = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            item = np.add.reduceat(digits, first_digit).astype(np.int64)
    return _basket_table(basket, item)


def load_basket_csv(path: PathLike) -> pd.DataFrame:
    """Read named-item baskets (one basket a line, item names separated by commas).

    The layout of the Groceries data (arules): ``citrus fruit,semi-finished bread,margarine``.
    Names are stripped of surrounding spaces; CSV quoting is honoured (a quoted name may
    hold a comma); empty fields (a trailing comma) are ignored; a blank line is an empty
    basket and has no row.

    Parameters
    ----------
    path : str or path-like
        For example ``../shared/data/baskets/groceries.csv``.

    Returns
    -------
    pandas.DataFrame
        One row per distinct (basket, item) pair, in file order (a name repeated within a
        basket is kept once): ``user`` (int64, the basket id: the 1-based line number the
        basket ends on), ``item`` (the item names as strings; int64 if every name is an
        integer, per the module's id rule), ``rating`` (float64, all 1.0), ``timestamp``
        (int64, all 0).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Naming the file and line: binary or non-UTF-8 content, a CSV syntax error (an
        unterminated quote), no item at all.

    Source: project addition (Hahsler, Hornik and Reutterer 2006, Groceries data layout).
    """
    p = _existing_file(path, "basket CSV file")
    text = _read_text(p)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    baskets, items = [], []
    try:
        for row in reader:
            line = reader.line_num
            for name in row:
                name = name.strip()
                if name:
                    baskets.append(line)
                    items.append(name)
    except csv.Error as err:
        raise ValueError(
            f"{_src(p)}: line {reader.line_num}: {err}; expected item names separated by commas, one basket a line"
        ) from None
    if not items:
        raise ValueError(f"{_src(p)}: no item names (empty file or only blank lines); expected one basket a line")
    item = _string_tokens_to_ids(np.array(items, dtype=object), "item", _src(p), None)
    return _basket_table(np.asarray(baskets, dtype=np.int64), item)


# ---------------------------------------------------------------------------
# one entry point
# ---------------------------------------------------------------------------

_SPACE_INTS = re.compile(r" *[0-9]+( +[0-9]+)* *")


def _detect_format(p: Path) -> str:
    """The format of ``p`` for ``format="auto"``, or ValueError saying what was ambiguous."""
    if p.is_dir():
        return "movielens"
    name = p.name.lower()
    lines = _sample_lines(p)
    if not lines:
        raise ValueError(f"{_src(p)} is empty (no non-blank line): nothing to load; expected ratings or baskets, "
                         "one a line")
    first = lines[0]
    if name in _MOVIELENS_FILES:
        return "movielens"
    if "::" in first:
        return "movielens"  # ratings.dat layout
    if name.endswith(".data") and "\t" in first:
        return "movielens"
    if name.endswith(".csv") or "," in first:
        head = {h.strip().lower() for h in first.split(",")}
        if all(any(o in head for o in opts) for canon, opts in _ML_CSV_ALIASES[:3]):
            return "movielens"
    if all(_SPACE_INTS.fullmatch(ln) for ln in lines):
        counts = {len(ln.split()) for ln in lines}
        if name.endswith(".dat") or len(counts) > 1:
            return "fimi"
        raise ValueError(
            f"{_src(p)}: ambiguous format: every sampled line (line 1: {first[:80]!r}) holds {counts.pop()} "
            "space-separated integers, which could be FIMI baskets (one basket of item ids a line) or a (user, "
            "item, value) table; expected the format to be named. "
            "Pass format='fimi' (CLI --format fimi), or format='csv' with sep=' ', user_col=0, item_col=1, "
            "value_col=2 (CLI --format csv --sep ' ' --user-col 0 --item-col 1 --value-col 2)"
        )
    if "," in first:
        counts = {_fields(ln, ",") for ln in lines}
        if len(counts) > 1:
            return "basket-csv"
        raise ValueError(
            f"{_src(p)}: ambiguous format: a comma-separated file with {counts.pop()} fields on every sampled "
            f"line, line 1 {first[:80]!r} being neither a MovieLens ratings.csv header nor clearly a basket; "
            "expected the format to be named. Pass format='csv' with user_col=, item_col=, value_col= (header names or 0-based "
            "positions; CLI --format csv --user-col C --item-col C --value-col C), or format='basket-csv' "
            "(CLI --format basket-csv) if each line is a basket of item names"
        )
    if "\t" in first:
        raise ValueError(
            f"{_src(p)}: ambiguous format: a tab-separated file not named *.data (line 1: {first[:80]!r}); "
            "expected the format to be named. Pass format='movielens' for u.data layout (user, item, rating, timestamp), or format='csv' with "
            "sep='\\t' and user_col=, item_col=, value_col= (CLI --format csv --sep TAB --user-col ...)"
        )
    raise ValueError(
        f"{_src(p)}: cannot tell the format from the name and line 1 ({first[:80]!r}); expected a MovieLens, "
        "delimited, FIMI or basket CSV file, or the format named. Pass "
        "format='movielens', 'csv' (with user_col=, item_col=, value_col=, sep=), 'fimi' or 'basket-csv' "
        "(CLI --format ...)"
    )


def load(path: PathLike, format: str = "auto", **column_options) -> pd.DataFrame:
    """Load any supported ratings or basket file as the canonical ratings table.

    Parameters
    ----------
    path : str or path-like
        A file, or (for MovieLens) a directory holding ``u.data``, ``ratings.dat`` or
        ``ratings.csv``.
    format : {"auto", "movielens", "csv", "fimi", "basket-csv"}
        ``"movielens"``: `load_movielens`; ``"csv"``: `load_delimited`; ``"fimi"``:
        `load_fimi`; ``"basket-csv"``: `load_basket_csv`. ``"auto"`` decides, in this
        order: column options given -> ``"csv"``; a directory, a file named ``u.data``,
        ``ratings.dat`` or ``ratings.csv``, a first line with ``::``, a ``*.data`` file
        with tabs, or a comma header with MovieLens names (userId/user, movieId/item,
        rating) -> ``"movielens"``; lines of space-separated non-negative integers in a
        ``*.dat`` file, or with varying counts -> ``"fimi"``; comma-separated lines with
        varying field counts -> ``"basket-csv"``. Anything else is ambiguous: a
        ValueError says what was ambiguous and which format (and CLI flag) to pass.
    **column_options
        For ``"csv"`` only: ``user_col``, ``item_col``, ``value_col``,
        ``timestamp_col``, ``sep``, ``header`` of `load_delimited`.

    Returns
    -------
    pandas.DataFrame
        The ratings table (see the module docstring); for baskets one row per distinct
        (basket, item) pair with rating 1.0.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist (or a directory without a MovieLens ratings file).
    ValueError
        Unknown format; column options with a format other than ``"csv"`` or missing
        ``user_col``/``item_col`` for ``"csv"``; an ambiguous ``"auto"`` detection;
        everything the chosen loader raises for a malformed file.

    Source: project addition.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {list(FORMATS)}, got {format!r}")
    allowed = {"user_col", "item_col", "value_col", "timestamp_col", "sep", "header"}
    unknown = sorted(set(column_options) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; column options are {sorted(allowed)}")
    opts = {k: v for k, v in column_options.items() if v is not None}
    p = Path(path).expanduser()
    if format == "auto":
        if not p.exists():
            raise FileNotFoundError(f"data file not found: {str(p)!r} does not exist")
        format = "csv" if opts else _detect_format(p)
    if format != "csv" and opts:
        raise ValueError(f"column options {sorted(opts)} apply to format='csv' only, not format={format!r}")
    if format == "movielens":
        return load_movielens(p)
    if format == "fimi":
        return load_fimi(p)
    if format == "basket-csv":
        return load_basket_csv(p)
    missing = [k for k in ("user_col", "item_col") if k not in opts]
    if missing:
        raise ValueError(
            f"format='csv' needs {missing} (header names or 0-based positions; CLI --user-col, --item-col)"
        )
    return load_delimited(p, **opts)


# ---------------------------------------------------------------------------
# in-memory inputs
# ---------------------------------------------------------------------------


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
        Names of the columns with the original user and item ids: integers (integer
        valued floats accepted) or strings, per the module's id dtype rule.
    value : str
        Name of the column with the rating (any finite number).
    timestamp : str or None
        Name of an integer timestamp column; used when present in ``df``,
        otherwise (or when None) the timestamps are 0.

    Returns
    -------
    pandas.DataFrame
        N rows in the input order, columns ``user`` (int64 or strings), ``item``
        (int64 or strings), ``rating`` (float64), ``timestamp`` (int64).

    Raises
    ------
    ValueError
        ``df`` is not a DataFrame or has no rows; a named column is missing;
        NaN or non-integer numeric ids, float ids beyond 2**53; NaN, infinite or
        non-numeric values, complex, datetime or timedelta values (real dtypes such as
        float16, integers or bool are converted to float64); non-integer timestamps.

    Source: project addition.
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


def ratings_from_scipy(matrix, *, duplicates: str = "error") -> pd.DataFrame:
    """Normalize a users-by-items `scipy.sparse` matrix to the ratings table.

    Row index becomes the user id, column index the item id, the stored value
    the rating. Explicit zeros are dropped (a zero in a sparse ratings matrix
    means "not rated"). A (row, column) pair stored more than once (possible in
    COO, and in CSR / CSC built from raw arrays) is refused by default, since
    scipy would sum it silently (a one-class matrix with a duplicated 1 becomes
    a 2); ``duplicates="sum"`` sums them. No dense copy is made; the caller's
    matrix is never modified.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array, shape (I, J)
    duplicates : {"error", "sum"}
        What to do with a pair stored more than once (default "error").

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
        ``matrix`` is not scipy.sparse; NaN or infinite values; complex or object values; no
        nonzero entry; with ``duplicates="error"``, a pair stored more than once (the message
        names the first ones, as (row, column), and how to sum them); an unknown ``duplicates``.

    Source: project addition (duplicates: issue 24).
    """
    if not sp.issparse(matrix):
        raise ValueError(f"matrix must be a scipy.sparse matrix or array, got {type(matrix).__name__}")
    if duplicates not in ("error", "sum"):
        raise ValueError(f"duplicates must be 'error' or 'sum', got {duplicates!r}")
    coo = sp.coo_matrix(matrix, copy=True)
    if duplicates == "error":
        _refuse_stored_duplicates(coo)
    coo.sum_duplicates()
    if coo.data.dtype.kind in _NOT_REAL or coo.data.dtype.kind == "O":
        raise ValueError(f"matrix.data: stored values of dtype {coo.data.dtype}; expected real numbers")
    data = np.asarray(coo.data, dtype=np.float64)
    if np.any(~np.isfinite(data)):
        raise ValueError(f"matrix.data: {int(np.sum(~np.isfinite(data)))} stored values are NaN or infinite")
    keep = data != 0
    row, col, data = coo.row[keep], coo.col[keep], data[keep]
    order = np.lexsort((col, row))
    raw = pd.DataFrame({"user": row[order], "item": col[order], "rating": data[order]})
    return _canonical(raw, source="matrix")


def _refuse_stored_duplicates(coo) -> None:
    """ValueError naming up to 5 (row, column) pairs stored more than once in a COO matrix."""
    key = coo.row.astype(np.int64) * int(coo.shape[1]) + coo.col.astype(np.int64)
    uniq, counts = np.unique(key, return_counts=True)
    if uniq.size == key.size:
        return
    dup = uniq[counts > 1]
    times = counts[counts > 1]
    show = ", ".join(f"(row {int(k // coo.shape[1])}, column {int(k % coo.shape[1])}) x{int(t)}"
                     for k, t in zip(dup[:5], times[:5]))
    raise ValueError(f"matrix: {dup.size} (row, column) pair(s) are stored more than once, e.g. {show}; "
                     "scipy would sum them silently. If summing is meant, sum them first "
                     "(matrix.sum_duplicates(), or matrix.tocsr()); otherwise keep one entry per pair")


# ---------------------------------------------------------------------------
# value transforms for count models
# ---------------------------------------------------------------------------


def transform(table: pd.DataFrame, how: str = "none", threshold: float = 4.0) -> pd.DataFrame:
    """Make a ratings table's values usable by count (Poisson) or one-class models.

    Parameters
    ----------
    table : pandas.DataFrame, N rows
        A ratings table (columns ``user``, ``item``, ``rating``[, ``timestamp``]).
    how : {"none", "round", "double", "binarize", "error"}
        - ``"none"``: values unchanged (no check).
        - ``"round"``: each value rounded to the nearest integer, halves up
          (``floor(x + 0.5)``: 3.5 -> 4, 2.5 -> 3, 0.5 -> 1).
        - ``"double"``: each value times 2, for half-star scales (0.5 .. 5 stars ->
          1 .. 10); values that are still not integers after doubling are refused.
        - ``"binarize"``: 1.0 where ``value >= threshold``, else 0.0 (rows are kept;
          `Observations` drops the zeros of count and binary data).
        - ``"error"``: values unchanged, but a non-integer value is refused with a message
          that names these options.
        ``"round"``, ``"double"`` and ``"error"`` refuse negative values (not counts).
    threshold : float
        The binarization threshold (default 4.0: the "4 and 5 stars" positives of
        000_619a0297b9d686b2.txt); only used by ``"binarize"``.

    Returns
    -------
    pandas.DataFrame
        A copy of ``table`` (N rows, same columns and dtypes) with ``rating`` (float64)
        transformed.

    Raises
    ------
    ValueError
        Unknown ``how``; ``table`` not a DataFrame or without a ``rating`` column; a
        non-finite ``threshold``; non-integer values with ``how="error"`` or after
        ``"double"``; negative values with ``"round"``, ``"double"``, ``"error"``.

    Source: project addition.
    """
    if how not in TRANSFORMS:
        raise ValueError(f"how must be one of {list(TRANSFORMS)}, got {how!r}")
    if not isinstance(table, pd.DataFrame) or "rating" not in table.columns:
        raise ValueError("table must be a ratings table (a DataFrame with a 'rating' column)")
    out = table.copy()
    v = _values(out["rating"].to_numpy(), "rating", "table")
    options = (
        "choose a transform: 'round' (nearest integer, halves up), 'double' (half stars -> "
        "integers 1..10) or 'binarize' with threshold=... (value >= threshold -> 1) "
        "(validation.frontdoor.api.fit(..., transform=...), loaders.transform(table, how=...), "
        "CLI --transform round|double|binarize), or convert the values yourself"
    )

    def _at(k):  # "user 186, item 302" in the table's own ids (numpy scalars shown as plain values)
        ids = [x.item() if isinstance(x, np.generic) else x for x in (out["user"].iat[k], out["item"].iat[k])]
        return f"user {ids[0]!r}, item {ids[1]!r}"

    def _refuse_negative(x, label):
        neg = x < 0
        if neg.any():
            k = _first_bad(neg)
            raise ValueError(
                f"rating: {int(neg.sum())} negative values{label} (first {x[k]:g} at "
                f"{_at(k)}); counts must be >= 0"
            )

    if how == "none":
        return out
    if how == "binarize":
        if not np.isfinite(float(threshold)):
            raise ValueError(f"threshold must be finite, got {threshold}")
        out["rating"] = (v >= float(threshold)).astype(np.float64)
        return out
    if how == "round":
        v = np.floor(v + 0.5)
        _refuse_negative(v, " after rounding")
    elif how == "double":
        v = 2.0 * v
        frac = v != np.round(v)
        if frac.any():
            k = _first_bad(frac)
            raise ValueError(
                f"rating: {int(frac.sum())} values are not integers even after doubling (first {v[k] / 2:g} at "
                f"{_at(k)}): not a half-star scale; pass "
                "how='round' or how='binarize' with threshold=..."
            )
        _refuse_negative(v, " after doubling")
    else:  # error
        frac = v != np.round(v)
        if frac.any():
            k = _first_bad(frac)
            raise ValueError(
                f"rating: count models need integer counts, found {int(frac.sum())} non-integer values "
                f"(first {v[k]:g} at {_at(k)}); {options}"
            )
        _refuse_negative(v, "")
    out["rating"] = v
    return out



def values_for(table: pd.DataFrame, kind: str, transform_how: str = "none", threshold: float = 4.0) -> pd.DataFrame:
    """The table's values made what a model of value ``kind`` needs: `transform`, then the kind's check.

    Parameters
    ----------
    table : pandas.DataFrame, N rows
        A ratings table (columns ``user``, ``item``, ``rating``[, ``timestamp``]).
    kind : {"count", "real", "binary"}
        What the model observes: non-negative integers, real values, or one-class 0/1.
    transform_how : {"none", "round", "double", "binarize", "error"}
        As `transform`. With ``"none"``: binary models binarize at ``threshold`` unless every value is
        already 0 or 1; count models refuse non-integers (the message names the transforms).
    threshold : float
        Binarization threshold (default 4.0).

    Returns
    -------
    pandas.DataFrame
        At most N rows: the transformed table, zeros dropped for count and binary models.

    Raises
    ------
    ValueError
        ``transform_how`` other than "none" for a real-valued model; what `transform` raises.

    Source: project addition (the front door's and the held-out evaluation's one data preparation).
    """
    if kind == "binary" and transform_how == "none":
        v = table["rating"].to_numpy(dtype=np.float64)
        transform_how = "none" if np.all(np.isin(v, (0.0, 1.0))) else "binarize"
    elif kind == "count" and transform_how == "none":
        transform_how = "error"
    elif kind == "real" and transform_how != "none":
        raise ValueError(f"transform={transform_how!r} applies to count and binary models only")
    out = transform(table, transform_how, threshold)
    return out[out["rating"] != 0] if kind in ("count", "binary") else out