"""Parsing helpers of `validation.data.loaders`: text and binary checks of a file, line lookup for error
messages, and the conversion of raw id / value columns into the canonical ratings table (the id dtype
rule and the value checks that `validation.data.loaders` documents).

Every function raises `ValueError` with the file, the line (or column) and what was expected; none is
public API (the loaders are).

Source: project addition.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import pandas as pd

PathLike = Union[str, "os.PathLike[str]"]
LineOf = Optional[Callable[[int], str]]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CANONICAL_INT = r"0|-?[1-9][0-9]*"
_SNIFF_BYTES = 1 << 16


# ---------------------------------------------------------------------------
# text, binary and line helpers
# ---------------------------------------------------------------------------


def _src(p: Path) -> str:
    return repr(str(p))


def _line_col(raw: bytes, offset: int) -> tuple[int, int]:
    line = raw.count(b"\n", 0, offset) + 1
    col = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return line, col


def _binary_error(p: Path, raw: bytes, offset: int, what: str) -> ValueError:
    line, col = _line_col(raw, offset)
    return ValueError(
        f"{_src(p)}: line {line}, column {col} (byte offset {offset}): {what}; expected a UTF-8 text "
        "file (is it binary, compressed or in another encoding?)"
    )


def _check_text(p: Path, raw: bytes, final: bool = True) -> None:
    """Refuse NUL bytes and invalid UTF-8 in ``raw`` (the file's bytes, or its first part)."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise _binary_error(p, raw, nul, "a NUL byte (binary data)")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=final)
    except UnicodeDecodeError as err:
        raise _binary_error(p, raw, err.start, f"byte 0x{raw[err.start]:02x} is not valid UTF-8") from None


def _sniff_check(p: Path) -> None:
    """Check the first 64 KiB of a file that pandas will parse."""
    with open(p, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    _check_text(p, head, final=False)


def _decode_error_anywhere(p: Path) -> ValueError:
    """The ValueError for a UnicodeDecodeError met by pandas somewhere in the file."""
    raw = p.read_bytes()
    try:
        _check_text(p, raw)
    except ValueError as err:
        return err
    return ValueError(f"{_src(p)}: not a UTF-8 text file")  # pragma: no cover - pandas and codecs agree


def _read_text(p: Path) -> str:
    """The whole file as text (UTF-8, BOM dropped); ValueError naming line and byte if not text."""
    raw = p.read_bytes()
    _check_text(p, raw)
    return raw.decode("utf-8-sig")


def _existing_file(path: PathLike, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} not found: {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"{_src(p)} is not a file (a directory?); expected a {what}")
    return p


def _data_line_finder(p: Path, sep: str, header_lines: int) -> Callable[[int], str]:
    """Maps a 0-based data row of a file parsed by pandas (blank lines skipped) to 'line L'.

    pandas skips a line that holds only white space and no separator; the map replays that
    rule on the file's lines (computed on demand, only when an error is reported).
    """

    def line_of(k: int) -> str:
        seen = -1
        with open(p, "r", encoding="utf-8", errors="replace", newline="") as fh:
            for n, line in enumerate(fh, start=1):
                if n <= header_lines:
                    continue
                body = line.rstrip("\r\n")
                if body.strip() == "" and sep not in body:
                    continue
                seen += 1
                if seen == k:
                    return f"line {n}"
        return f"data row {k + 1}"

    return line_of


def _where(line_of: LineOf, k: int) -> str:
    return line_of(k) if line_of is not None else f"row {k}"


def _show(x) -> str:
    """An entry for a message: 'a missing field' for NaN, else its repr as a plain Python value."""
    if isinstance(x, (float, np.floating)) and np.isnan(x):
        return "a missing field"
    if isinstance(x, str) and x.strip() == "":
        return "an empty field"
    if isinstance(x, np.generic):
        x = x.item()
    return repr(x)


# ---------------------------------------------------------------------------
# ids and the canonical table
# ---------------------------------------------------------------------------


def _first_bad(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def _more(bad: np.ndarray) -> str:
    n = int(np.sum(bad))
    return f" ({n - 1} more such entries)" if n > 1 else ""


def _integer_ids(values, name: str, source: str, line_of: LineOf = None) -> np.ndarray:
    """Integer-only ids (MovieLens, timestamps, side files): int64, or ValueError. Never wraps."""
    arr = np.asarray(values)
    if arr.dtype.kind in "OUS" and arr.size and pd.api.types.infer_dtype(arr, skipna=False) == "string":
        # integers written as text: parsed exactly (never through a float), each range-checked
        s = pd.Series(arr, dtype=object).str.strip()
        if s.str.fullmatch(r"[+-]?[0-9]+").all():
            ints = [int(x) for x in s]
            big = np.array([not (_INT64_MIN <= x <= _INT64_MAX) for x in ints], dtype=bool)
            if big.any():
                k = _first_bad(big)
                raise ValueError(
                    f"{source}: column {name!r}, {_where(line_of, k)}: {s.iat[k]} is beyond the int64 range "
                    f"[{_INT64_MIN}, {_INT64_MAX}]{_more(big)}; expected integer ids that fit int64"
                )
            return np.array(ints, dtype=np.int64)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
            bad = arr > _INT64_MAX
            k = _first_bad(bad)
            raise ValueError(
                f"{source}: column {name!r}, {_where(line_of, k)}: {arr[k]} is beyond the int64 range "
                f"[{_INT64_MIN}, {_INT64_MAX}]{_more(bad)}; expected integer ids that fit int64"
            )
        return arr.astype(np.int64)
    if arr.dtype.kind == "O":
        # pandas leaves integers beyond uint64 (or mixed content) as Python objects
        s = pd.Series(arr, dtype=object)
        big = np.array(
            [isinstance(x, (int, np.integer)) and not isinstance(x, bool) and not (_INT64_MIN <= int(x) <= _INT64_MAX)
             for x in arr],
            dtype=bool,
        ) if arr.size else np.zeros(0, dtype=bool)
        if big.any():
            k = _first_bad(big)
            raise ValueError(
                f"{source}: column {name!r}, {_where(line_of, k)}: {arr[k]} is beyond the int64 range{_more(big)}; "
                "expected integer ids that fit int64"
            )
        s = pd.to_numeric(s, errors="coerce")
    else:
        s = pd.to_numeric(pd.Series(arr), errors="coerce")
    if s.dtype.kind in "iu":
        return _integer_ids(s.to_numpy(), name, source, line_of)
    v = s.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        k = _first_bad(bad)
        raise ValueError(
            f"{source}: column {name!r} has {int(bad.sum())} NaN or non-numeric entries, first at "
            f"{_where(line_of, k)} ({_show(arr[k])}); expected integer ids"
        )
    frac = v != np.round(v)
    if frac.any():
        k = _first_bad(frac)
        raise ValueError(
            f"{source}: column {name!r} must hold integer ids, found non-integer values, first at "
            f"{_where(line_of, k)} ({_show(arr[k])})"
        )
    # a float id beyond 2**53 is no longer exact; beyond int64 it would wrap
    big = np.abs(v) > 2.0**53
    if big.any():
        k = _first_bad(big)
        raise ValueError(
            f"{source}: column {name!r}, {_where(line_of, k)}: {_show(arr[k])} is too large to be held exactly "
            f"(beyond 2**53 as a float, or beyond the int64 range){_more(big)}; expected integer ids that fit int64"
        )
    return v.astype(np.int64)


def _string_tokens_to_ids(tokens: np.ndarray, name: str, source: str, line_of: LineOf) -> np.ndarray:
    """Stripped strings (object array) -> int64 if all canonical int64 integers, else the strings."""
    s = pd.Series(tokens, dtype=object)
    empty = (s == "").to_numpy()
    if empty.any():
        k = _first_bad(empty)
        raise ValueError(
            f"{source}: column {name!r}, {_where(line_of, k)}: empty {name} id{_more(empty)}; expected an id "
            "(a missing field or a short row?)"
        )
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    canonical = s.str.fullmatch(_CANONICAL_INT).to_numpy(dtype=bool)
    if not canonical.all():
        return s.to_numpy(dtype=object)
    lengths = s.str.len().to_numpy()
    long = np.flatnonzero(lengths >= 19)
    if any(not (_INT64_MIN <= int(s.iat[j]) <= _INT64_MAX) for j in long):
        return s.to_numpy(dtype=object)  # beyond int64: kept as strings, never wrapped
    return s.to_numpy(dtype=str).astype(np.int64)


def _ids(values, name: str, source: str, line_of: LineOf = None) -> np.ndarray:
    """Ids by the module's dtype rule: int64 when all are integers that fit int64, else str (object)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
            return np.array([str(int(x)) for x in arr], dtype=object)
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        return _integer_ids(arr, name, source, line_of)
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    if arr.size and pd.api.types.infer_dtype(arr, skipna=False) == "string":  # fast path: all str
        return _string_tokens_to_ids(pd.Series(arr, dtype=object).str.strip().to_numpy(dtype=object), name, source, line_of)
    # object (pandas strings, Python ints, mixed): missing values first
    missing = pd.isna(pd.Series(arr, dtype=object)).to_numpy(dtype=bool)
    if missing.any():
        k = _first_bad(missing)
        raise ValueError(
            f"{source}: column {name!r} has {int(missing.sum())} NaN or missing entries, first at "
            f"{_where(line_of, k)}; expected an id"
        )
    tokens = np.empty(arr.shape[0], dtype=object)
    for j, x in enumerate(arr):
        if isinstance(x, str):
            tokens[j] = x.strip()
        elif isinstance(x, (bool, np.bool_)):
            tokens[j] = str(int(x))
        elif isinstance(x, (int, np.integer)):
            tokens[j] = str(int(x))
        elif isinstance(x, (float, np.floating)):
            xf = float(x)
            if not np.isfinite(xf) or xf != round(xf) or abs(xf) > 2.0**53:
                raise ValueError(
                    f"{source}: column {name!r}, {_where(line_of, j)}: {x!r} is not an integer id that a float "
                    "holds exactly; expected integer or string ids"
                )
            tokens[j] = str(int(xf))
        elif isinstance(x, bytes):
            raise ValueError(f"{source}: column {name!r}, {_where(line_of, j)}: bytes {x!r}; expected str or int ids")
        else:
            tokens[j] = str(x)
    return _string_tokens_to_ids(tokens, name, source, line_of)


_NOT_REAL = {"c": "complex", "M": "datetime", "m": "timedelta"}


def _values(values, name: str, source: str, line_of: LineOf = None) -> np.ndarray:
    """Finite float64 values, or ValueError naming the first bad entry. Any real dtype (float16,
    integers, bool, numeric strings) is converted to float64; complex, datetime and timedelta
    values are refused (never cast silently)."""
    arr = np.asarray(values)
    if arr.dtype.kind in _NOT_REAL:
        raise ValueError(f"{source}: column {name!r} holds {_NOT_REAL[arr.dtype.kind]} values (dtype {arr.dtype}); "
                         "expected real numbers")
    if arr.dtype.kind in "OUS":
        s = pd.Series(arr, dtype=object)
        s = s.map(lambda x: x.strip() if isinstance(x, str) else x)
        num = pd.to_numeric(s, errors="coerce")
    else:
        num = pd.to_numeric(pd.Series(arr), errors="coerce")
    if num.dtype.kind in _NOT_REAL:
        raise ValueError(f"{source}: column {name!r} holds {_NOT_REAL[num.dtype.kind]} values; expected real numbers")
    v = num.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        k = _first_bad(bad)
        raise ValueError(
            f"{source}: column {name!r} has {int(bad.sum())} NaN, infinite or non-numeric entries, first at "
            f"{_where(line_of, k)} ({_show(arr[k])}); expected a finite number"
        )
    return v


def _canonical(raw: pd.DataFrame, source: str, *, integer_ids: bool = False, line_of: LineOf = None) -> pd.DataFrame:
    """Columns user/item/rating[/timestamp] of any dtype -> checked ratings table.

    ``integer_ids=True`` (MovieLens): ids must be integers that fit int64. Otherwise the
    module's id dtype rule (int64 or strings) applies to each id column.
    """
    if len(raw) == 0:
        raise ValueError(f"{source}: no ratings (0 rows)")
    id_fn = _integer_ids if integer_ids else _ids
    user = id_fn(raw["user"], "user", source, line_of)
    item = id_fn(raw["item"], "item", source, line_of)
    rating = _values(raw["rating"], "rating", source, line_of)
    if "timestamp" in raw.columns:
        timestamp = _integer_ids(raw["timestamp"], "timestamp", source, line_of)
    else:
        timestamp = np.zeros(len(raw), dtype=np.int64)
    return pd.DataFrame({"user": user, "item": item, "rating": rating, "timestamp": timestamp})


# ---------------------------------------------------------------------------
# MovieLens
