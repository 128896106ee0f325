"""Where the data lives, and the one import name for everything about data.

This module used to hold every data concern; it is now split by concern, and re-exports
the public names of the three modules so that ``validation.data.datasets.X`` keeps working:

- `validation.data.loaders`: every file and in-memory format -> the canonical ratings table
  (``user``, ``item``, ``rating``, ``timestamp``; the id dtype rule: int64 ids when every
  id is an integer that fits int64, else strings). `load_movielens` (``u.data``,
  ``ratings.dat``, ``ratings.csv``), `load_delimited` (any header names, sniffed
  separator), `load_fimi` and `load_basket_csv` (baskets as one-class data), `load`
  (``format="auto"`` detection), `ratings_from_dataframe`, `ratings_from_scipy`,
  `transform` (round / double / binarize / error, for count models).
- `validation.data.splits`: `index_ratings` / `IndexedRatings`, `to_observations`, the splits
  of the seeds (`split_leave_one_out` P1, `split_random_holdout` P3, `split_p2` P2,
  `split_leave_one_item_out_baskets` for basket files), `dense_submatrix` and the split
  dataclasses (`ImplicitSplit`, `HoldoutSplit`, `RatingsSplit`).
- `validation.data.features`: MovieLens 100K side data (`load_movielens_users`,
  `load_movielens_genres`, `AGE_BUCKETS`, `ML100K_GENRES`) and the FM designs
  (`fm_features`, `FM_GROUPS`).
- Here, data location: `find_movielens_100k` and `fetch_movielens_100k` (environment
  variable ``FACTORBAYES_DATA_DIR``, the shared data beside the checkout, the user cache
  `user_cache_dir`, then a download), `DATA_DIR_ENV`.

Source: project addition.
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
from pathlib import Path
from typing import Union

from validation.data import features as _features
from validation.data import loaders as _loaders
from validation.data import splits as _splits
from validation.data.features import *  # noqa: F401,F403 - re-exported, see the module docstring
from validation.data.loaders import *  # noqa: F401,F403
from validation.data.loaders import _HOW_TO_GET, load_movielens
from validation.data.splits import *  # noqa: F401,F403

__all__ = [
    "DATA_DIR_ENV",
    "find_movielens_100k",
    "fetch_movielens_100k",
    "user_cache_dir",
    *_loaders.__all__,
    *_splits.__all__,
    *_features.__all__,
]

PathLike = Union[str, "os.PathLike[str]"]

#: Environment variable naming a directory that contains ``ml-100k/``.
DATA_DIR_ENV = "FACTORBAYES_DATA_DIR"

_GROUPLENS_100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
_RECBOLE_REQUIREMENT = "recbole==1.2.1"
_RECBOLE_PREFIX = "recbole/dataset_example/ml-100k/"
# SHA-256 of the u.data written from the recbole 1.2.1 wheel: it is byte for byte
# the body of ml-100k.inter (header line dropped), identical to ../shared/data/ml-100k/u.data.
_RECBOLE_UDATA_SHA256 = "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490"
_ML100K_SIZES = (100_000, 943, 1682)  # ratings, users, items


def user_cache_dir() -> Path:
    """The user cache directory, ``$XDG_CACHE_HOME/factorbayes`` (default ``~/.cache/factorbayes``).

    Returns
    -------
    pathlib.Path
        ``$XDG_CACHE_HOME/factorbayes`` when that variable is set and non-empty, else
        ``~/.cache/factorbayes``; the directory is not created.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "factorbayes"


def _candidate_dirs() -> list[Path]:
    out = []
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        out.append(Path(env).expanduser() / "ml-100k")
    repo_root = Path(__file__).resolve().parents[2]
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

    Source: project addition.
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
    OSError
        ``cache_dir`` cannot be created or written.

    Source: project addition (data access; the data set of the seeds' MovieLens experiments).
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
