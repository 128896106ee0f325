"""Synthetic recommender matrices of Netflix's shape, built in COO chunks without any dense array.

`netflix_like(n_nonzeros)` draws a 480,189 x 17,770 matrix (the Netflix Prize shape) with exactly
``n_nonzeros`` distinct (user, item) pairs:

- items with Zipf-like popularity, p_j ∝ rank_j^(-item_exponent), the ranks shuffled over the item ids;
- users with log-normal activity, p_u ∝ exp(user_sigma Z_u), Z_u ~ N(0, 1);
- pairs drawn independently (u ~ p_user, j ~ p_item), duplicates dropped, and the draw topped up:
  the kept pairs are the first ``n_nonzeros`` *distinct* pairs of one stream of independent draws
  (in draw order), i.e. a sample without replacement from the product distribution;
- values: ``"counts"`` Geometric on 1, 2, ... (mean 1 / count_p), ``"ratings"`` 1..5 with ``rating_probs``,
  ``"binary"`` all ones.

Defaults are calibrated (roughly) to two public facts of the Netflix Prize data: its most-rated
title holds about 0.23 % of the ~100.5M ratings (p_1 = 1 / H(s) gives s ~ 0.45 for 17,770 items)
and the mean number of ratings per user (~209) is about 2.2 times the median (~96), which a
log-normal gives with sigma ~ 1.25 (mean / median = exp(sigma^2 / 2)). Ratings default to the
approximate Netflix star distribution (mean ~3.6).

Memory: the draw holds one int64 key (user * n_items + item) per pair, sorted and deduplicated in
place, plus the output (int32 rows, int32 cols, float32 values: 12 bytes per pair); the peak is about
(8 + 12) / 12 ~ 1.7 times the output plus one chunk (measured in ``benchmarks/README.md``). Nothing
of size n_users x n_items is ever allocated.

Also used by ``bench_hpf.py`` (`synthetic_counts`, 50,000 x 5,000 with 2M pairs) and
``bench_scale.py`` (the scaling table).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["netflix_like", "NETFLIX_SHAPE", "NETFLIX_RATING_PROBS", "KINDS"]

#: (users, items) of the Netflix Prize training data.
NETFLIX_SHAPE = (480_189, 17_770)
#: Approximate share of 1..5 stars in the Netflix Prize ratings (mean ~3.6).
NETFLIX_RATING_PROBS = (0.046, 0.101, 0.287, 0.336, 0.230)
#: Value kinds `netflix_like` can draw.
KINDS = ("counts", "ratings", "binary")


def _cdf(p: np.ndarray) -> np.ndarray:
    c = np.cumsum(p / p.sum())
    c[-1] = 1.0
    return c


def _draw_keys(rng, m: int, cdf_user, cdf_item, n_items: int, out: np.ndarray | None = None, chunk: int = 1 << 22,
               bar=None) -> np.ndarray:
    """``m`` independent pair keys user * n_items + item (int64), drawn in chunks of ``chunk``."""
    out = np.empty(m, np.int64) if out is None else out
    n_users = cdf_user.size
    for s in range(0, m, chunk):
        e = min(m, s + chunk)
        u = np.minimum(np.searchsorted(cdf_user, rng.random(e - s), side="right"), n_users - 1)
        j = np.minimum(np.searchsorted(cdf_item, rng.random(e - s), side="right"), n_items - 1)
        np.multiply(u, n_items, out=out[s:e])
        out[s:e] += j
        if bar is not None:
            bar.update(e - s)
    return out


def _dedupe_sorted_inplace(keys: np.ndarray) -> np.ndarray:
    """Sort ``keys`` in place and return its distinct values (a new array, sorted)."""
    keys.sort()
    keep = np.empty(keys.size, bool)
    if keys.size:
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def netflix_like(
    n_nonzeros: int,
    *,
    n_users: int = NETFLIX_SHAPE[0],
    n_items: int = NETFLIX_SHAPE[1],
    kind: str = "counts",
    seed: int = 0,
    chunk: int = 1 << 22,
    item_exponent: float = 0.45,
    user_sigma: float = 1.25,
    count_p: float = 0.5,
    rating_probs=NETFLIX_RATING_PROBS,
    max_rounds: int = 60,
    progress: bool = False,
    cache_dir=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sparse users x items matrix of Netflix's shape in COO form: ``(rows, cols, values)``.

    Parameters
    ----------
    n_nonzeros : int >= 1, the exact number of distinct (user, item) pairs returned.
    n_users, n_items : matrix shape (default 480,189 x 17,770, Netflix's).
    kind : ``"counts"`` (Geometric(count_p) on 1, 2, ..., mean 1 / count_p),
        ``"ratings"`` (1..5 with probabilities ``rating_probs``) or ``"binary"`` (all 1).
    seed : seed of the one `numpy.random.Generator` every draw comes from (same seed, same matrix).
    chunk : pairs drawn (and converted) per chunk; bounds the temporaries besides the key array.
    item_exponent : s of the Zipf-like item popularity p_j ∝ rank_j^(-s) (ranks shuffled).
    user_sigma : sigma of the log-normal user activity.
    max_rounds : top-up rounds before giving up (the matrix is too dense for the popularity law).
    progress : show a tqdm bar over the pairs drawn (its total grows by each top-up round).
    cache_dir : optional directory (str or Path): the arrays are kept there as ``.npy`` files and
        returned memory-mapped read-only (``np.load(mmap_mode="r")``); a later call with the same
        arguments reads them instead of drawing again. The pairs (rows, cols) do not depend on
        ``kind``: they are stored once with the generator's state after the pair draws, from which
        any kind's values are drawn (so every kind gives the same arrays as without a cache).
        Files are written under a temporary name and renamed, so a killed run leaves no partial
        file behind.

    Returns
    -------
    rows : int32 (n_nonzeros,), cols : int32 (n_nonzeros,), values : float32 (n_nonzeros,);
    row-major order (rows sorted, then cols), no duplicate pairs.

    Raises
    ------
    ValueError
        ``n_nonzeros`` < 1 or more than half of n_users * n_items; a bad ``kind``, shape,
        ``count_p`` or ``rating_probs``; the top-up not reaching ``n_nonzeros`` distinct pairs in
        ``max_rounds`` rounds.
    OSError
        ``cache_dir`` cannot be created or written.

    Source: project convention (issue 14: Zipf-like item popularity, log-normal user activity, COO
    chunks; the Netflix Prize shape 480,189 x 17,770).
    """
    n = int(n_nonzeros)
    if n < 1 or n > n_users * n_items // 2:
        raise ValueError(f"n_nonzeros must be in [1, n_users * n_items / 2 = {n_users * n_items // 2}], "
                         f"got {n_nonzeros}")
    if n_users < 1 or n_items < 1 or n_users * n_items >= 2**62:
        raise ValueError(f"bad shape ({n_users}, {n_items})")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not 0 < count_p <= 1:
        raise ValueError(f"count_p must be in (0, 1], got {count_p}")
    probs = np.asarray(rating_probs, np.float64)
    if kind == "ratings" and (probs.shape != (5,) or np.any(probs < 0) or not probs.sum() > 0):
        raise ValueError(f"rating_probs must be 5 non-negative numbers, got {rating_probs!r}")
    chunk = max(1, int(chunk))
    if cache_dir is not None:
        return _cached(n, n_users, n_items, kind, seed, chunk, item_exponent, user_sigma, count_p, probs,
                       max_rounds, progress, Path(cache_dir))
    rows, cols, rng = _pairs(n, n_users, n_items, seed, chunk, item_exponent, user_sigma, max_rounds, progress)
    return rows, cols, _values(rng, n, kind, chunk, count_p, probs)


def _pairs(n, n_users, n_items, seed, chunk, item_exponent, user_sigma, max_rounds, progress):
    """(rows, cols, rng): the ``n`` distinct pairs of `netflix_like` and its generator after them."""
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(n_items) + 1.0
    cdf_item = _cdf(ranks ** (-float(item_exponent)))
    cdf_user = _cdf(rng.lognormal(0.0, float(user_sigma), n_users))

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc=f"netflix_like {n:,} pairs: draw", unit="pair", unit_scale=True)
    # round 1: n draws, sorted and deduplicated in place
    keys = _dedupe_sorted_inplace(_draw_keys(rng, n, cdf_user, cdf_item, n_items, chunk=chunk, bar=bar))
    rounds = 1
    accept = keys.size / n
    while keys.size < n:
        if rounds >= max_rounds:
            raise ValueError(f"netflix_like: only {keys.size} distinct pairs after {rounds} rounds "
                             f"(wanted {n}); the matrix is too dense for this popularity law")
        need = n - keys.size
        # draw enough for the observed acceptance rate, keep the first `need` new distinct pairs
        m = int(need / max(accept, 0.05) * 1.2) + 1024
        if bar is not None:
            bar.total += m
        cand = _draw_keys(rng, m, cdf_user, cdf_item, n_items, chunk=chunk, bar=bar)
        pos = np.searchsorted(keys, cand)
        present = keys[np.minimum(pos, keys.size - 1)] == cand
        cand = cand[~present]
        uniq, first = np.unique(cand, return_index=True)
        accept = max(uniq.size / m, 1e-3)
        new = uniq[np.sort(np.argsort(first, kind="stable")[:need])]
        keys = np.concatenate([keys, new])
        keys.sort()
        rounds += 1
    if bar is not None:
        bar.set_description(f"netflix_like {n:,} pairs: convert")

    rows = np.empty(n, np.int32)
    cols = np.empty(n, np.int32)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        q, r = np.divmod(keys[s:e], n_items)
        rows[s:e] = q
        cols[s:e] = r
    if bar is not None:
        bar.close()
    return rows, cols, rng


def _values(rng, n, kind, chunk, count_p, probs):
    """The float32 (n,) values of `netflix_like`, drawn chunk by chunk from ``rng``."""
    values = np.empty(n, np.float32)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        if kind == "counts":
            values[s:e] = rng.geometric(count_p, e - s)
        elif kind == "ratings":
            values[s:e] = np.searchsorted(_cdf(probs), rng.random(e - s), side="right") + 1
        else:
            values[s:e] = 1.0
    return values


def _save(path: Path, arr) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, arr)
    os.replace(tmp, path)


def _cached(n, n_users, n_items, kind, seed, chunk, item_exponent, user_sigma, count_p, probs, max_rounds,
            progress, cache_dir: Path):
    """`netflix_like` through the ``.npy`` cache in ``cache_dir`` (its docstring)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    pair_args = json.dumps([n, n_users, n_items, seed, chunk, float(item_exponent), float(user_sigma)])
    tag = f"netflix_{n}_{n_users}x{n_items}_s{seed}_" + hashlib.sha1(pair_args.encode()).hexdigest()[:10]
    rows_p, cols_p, state_p = (cache_dir / f"{tag}_{x}" for x in ("rows.npy", "cols.npy", "rng.json"))
    if not (rows_p.exists() and cols_p.exists() and state_p.exists()):
        rows, cols, rng = _pairs(n, n_users, n_items, seed, chunk, item_exponent, user_sigma, max_rounds, progress)
        _save(rows_p, rows)
        _save(cols_p, cols)
        tmp = state_p.with_name(f".{state_p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rng.bit_generator.state))
        os.replace(tmp, state_p)
        del rows, cols
    value_args = json.dumps([kind, float(count_p), [float(p) for p in probs]])
    values_p = cache_dir / f"{tag}_values_{kind}_{hashlib.sha1(value_args.encode()).hexdigest()[:10]}.npy"
    if not values_p.exists():
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(state_p.read_text())
        _save(values_p, _values(rng, n, kind, chunk, count_p, probs))
    return tuple(np.load(p, mmap_mode="r") for p in (rows_p, cols_p, values_p))
