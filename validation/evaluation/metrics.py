"""Ranking metrics of the seed papers, computed batch by batch over users.

A model enters only through a *score function*::

    score_fn(users: np.ndarray (B,) int) -> np.ndarray (B, J) float

giving, for each user index in ``users``, a score for every item (higher =
recommended first). The metrics call it on batches of at most ``batch_size``
users, so memory is O(batch_size * J), never O(I * J); results do not depend on
``batch_size``.

Protocol "P1" (`validation.data.datasets.split_leave_one_out`, one held-out positive
per user):

- rank score R(i, j*), 000_619a0297b9d686b2.txt eq. (12) and
  003_203f63200c0d7157.txt eq. (20);
- hit rate HR@n and NDCG@n of the held-out item, with ties broken
  pessimistically.

Protocol "P3" (`validation.data.datasets.split_random_holdout`, 20 % of ratings
held out): precision@P, recall@P, F-measure and NDCG@P of
004_90693a0965f06816.txt, section 5.4.4, eqs. (5.21)-(5.28).

Protocol "P2" (`validation.data.datasets.split_p2`, 10 % of explicit ratings held
out): `rmse` of 004_90693a0965f06816.txt chapters 3-4, and `rmse_by_degree`
(RMSE pooled over the ratings of the users in each log2 degree bucket of
`by_degree`).

P1 and P3 give one row per evaluated user (`leave_one_out_metrics`,
`holdout_metrics`), which `summarize` averages and `by_degree` averages in
log2-spaced buckets of the user's training degree, as the seeds plot them
(000 figs. 2-3, 003 fig. 6).

Popularity baseline and reference numbers
-----------------------------------------
`popularity_scores` ranks items by their number of training entries (the
"popularity c_j" baseline of 000 section 6 and "popularity s_mn = pi_n" of 003
section 6.1.2). On MovieLens 100K (``u.data``) with seed 0 it gives, to three
decimals, the independently measured reference numbers:

- P1 (threshold 4): mean rank score R = 0.869 (0.86892), HR@10 = 0.118 (0.11783),
  NDCG@10 = 0.0636, over 942 test users;
- P3 with ``row_order="input"`` (the permutation indexes the rows in file
  order): precision@100 = 0.087 (0.08695), recall@100 = 0.429 (0.42854), over
  942 users. With the default ``row_order="sorted"`` the split differs and
  popularity gives 0.08774 and 0.43035. Popularity as the *count* of training
  entries reproduces the references; the *sum* of training stars does not
  (0.08648 / 0.41965 in file order).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import scipy.sparse as sp

from custom_inference.data import Observations

from validation.data.datasets import HoldoutSplit, ImplicitSplit

__all__ = [
    "ScoreFn",
    "rank_score",
    "hit_rate_at",
    "ndcg_at",
    "leave_one_out_metrics",
    "holdout_metrics",
    "p3_metrics",
    "summarize",
    "by_degree",
    "popularity_scores",
    "popularity_score_fn",
    "rmse",
    "rmse_by_degree",
]

ScoreFn = Callable[[np.ndarray], np.ndarray]

#: Per-user columns that `summarize` averages.
METRIC_COLUMNS = ("rank_score", "hit", "ndcg", "precision", "recall")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _check_batch_size(batch_size) -> int:
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def _scores(score_fn: ScoreFn, users: np.ndarray, n_items: int) -> np.ndarray:
    s = np.asarray(score_fn(users), dtype=np.float64)
    if s.shape != (users.size, n_items):
        raise ValueError(
            f"score_fn returned shape {s.shape} for {users.size} users; expected (B, J) = ({users.size}, {n_items})"
        )
    if np.isnan(s).any():
        raise ValueError(f"score_fn returned {int(np.isnan(s).sum())} NaN scores")
    return s


def _pattern(obs: Observations) -> sp.csr_matrix:
    """CSR of the stored entries of ``obs`` (values set to 1)."""
    rows = np.asarray(obs.rows)
    cols = np.asarray(obs.cols)
    return sp.csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=obs.shape)


def _row_mask(csr: sp.csr_matrix, users: np.ndarray) -> np.ndarray:
    """Dense (B, J) bool mask of the stored entries of rows ``users``."""
    sub = csr[users]
    mask = np.zeros(sub.shape, dtype=bool)
    r = np.repeat(np.arange(sub.shape[0]), np.diff(sub.indptr))
    mask[r, sub.indices] = True
    return mask


# ---------------------------------------------------------------------------
# P1: one held-out positive per user
# ---------------------------------------------------------------------------


def _loo_counts(score_fn: ScoreFn, split: ImplicitSplit, batch_size: int):
    """Per test user: (#candidates below, #other candidates >= test score, #candidates)."""
    batch_size = _check_batch_size(batch_size)
    J = split.n_items
    users = np.asarray(split.test_users, dtype=np.int64)
    items = np.asarray(split.test_items, dtype=np.int64)
    if users.shape != items.shape or users.ndim != 1:
        raise ValueError(f"test_users and test_items must be 1-D of equal length, got {users.shape} and {items.shape}")
    csr = _pattern(split.train)
    below = np.empty(users.size, dtype=np.int64)
    ge = np.empty(users.size, dtype=np.int64)
    n_cand = np.empty(users.size, dtype=np.int64)
    for start in range(0, users.size, batch_size):
        bu = users[start : start + batch_size]
        bi = items[start : start + batch_size]
        b = np.arange(bu.size)
        s = _scores(score_fn, bu, J)
        cand = ~_row_mask(csr, bu)
        if not cand[b, bi].all():
            bad = bu[~cand[b, bi]][0]
            raise ValueError(f"test_items: the test item of user {bad} is also one of its training positives")
        cand[b, bi] = False
        s_test = s[b, bi][:, None]
        below[start : start + bu.size] = np.sum(cand & (s < s_test), axis=1)
        ge[start : start + bu.size] = np.sum(cand & (s >= s_test), axis=1)
        n_cand[start : start + bu.size] = cand.sum(axis=1)
    return below, ge, n_cand


def rank_score(score_fn: ScoreFn, split: ImplicitSplit, batch_size: int = 256) -> np.ndarray:
    """Rank score of each held-out item on a [0, 1] scale (protocol P1).

    000_619a0297b9d686b2.txt eq. (12),
    ``R(i, j*) = 1 / (J - |G(i)|) * sum_{j not in G(i)} I[f_ij* > f_ij]``, and
    003_203f63200c0d7157.txt eq. (20),
    ``S_rank(m, n') = sum_{n: g_mn = 0} I[s_mn' > s_mn] / sum_{n: g_mn = 0} 1``:
    the fraction of the user's candidate items that the model scores strictly
    below the held-out item. Candidates are the items that are not training
    positives of the user, with the held-out item itself excluded (the
    reference value 0.869 for popularity on MovieLens 100K needs this; keeping
    j* in the denominator, as (12) can be read, gives 0.868). Ties count as not
    below. 0.5 is random guessing, 1 puts the held-out item first.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores.
    split : ImplicitSplit
        From `validation.data.datasets.split_leave_one_out`.
    batch_size : int
        Users per call of ``score_fn``; does not change the result.

    Returns
    -------
    numpy.ndarray, shape (T,), float64
        ``R`` of each test user, in the order of ``split.test_users``; NaN for a
        user without candidates.

    Raises
    ------
    ValueError
        Scores of the wrong shape or NaN; a test item that is a training
        positive; ``split.test_users`` / ``test_items`` not 1-D of one length; a
        bad ``batch_size``.

    Source: 000_619a0297b9d686b2.txt, eq. 12; 003_203f63200c0d7157.txt, eq. 20.
    """
    below, _, n_cand = _loo_counts(score_fn, split, batch_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_cand > 0, below / np.maximum(n_cand, 1), np.nan)


def _pessimistic_rank(ge: np.ndarray) -> np.ndarray:
    return 1 + ge


def hit_rate_at(score_fn: ScoreFn, split: ImplicitSplit, n: int = 10, batch_size: int = 256) -> np.ndarray:
    """HR@n of each held-out item (protocol P1), ties broken pessimistically.

    ``rank = 1 + #{candidates j != j* : f_ij >= f_ij*}`` (candidates as in
    `rank_score`), ``HR@n = 1[rank <= n]``. A model that scores every item the
    same therefore never hits unless there are fewer than n candidates.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores (higher = recommended first).
    split : ImplicitSplit
        From `validation.data.datasets.split_leave_one_out` (T test users).
    n : int >= 1, default 10
        The cut-off: the length of the recommended list.
    batch_size : int >= 1, default 256
        Users per call of ``score_fn``; does not change the result.

    Returns
    -------
    numpy.ndarray, shape (T,), float64
        0.0 or 1.0 per test user, in the order of ``split.test_users``.

    Raises
    ------
    ValueError
        As `rank_score` (scores of the wrong shape or NaN; a test item that is a training
        positive; a bad ``batch_size``); ``n`` not an integer >= 1.

    Source: project addition (HR@n on protocol P1 of 000_619a0297b9d686b2.txt, section 6; the
    seeds report no hit rate).
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    _, ge, _ = _loo_counts(score_fn, split, batch_size)
    return (_pessimistic_rank(ge) <= n).astype(np.float64)


def ndcg_at(score_fn: ScoreFn, split: ImplicitSplit, n: int = 10, batch_size: int = 256) -> np.ndarray:
    """NDCG@n of each held-out item (protocol P1), ties broken pessimistically.

    With one relevant item the ideal DCG is 1, so
    ``NDCG@n = 1 / log2(rank + 1)`` if ``rank <= n`` else 0, with the
    pessimistic ``rank`` of `hit_rate_at`.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores (higher = recommended first).
    split : ImplicitSplit
        From `validation.data.datasets.split_leave_one_out` (T test users).
    n : int >= 1, default 10
        The cut-off: the length of the recommended list.
    batch_size : int >= 1, default 256
        Users per call of ``score_fn``; does not change the result.

    Returns
    -------
    numpy.ndarray, shape (T,), float64
        NDCG@n in [0, 1] per test user, in the order of ``split.test_users``.

    Raises
    ------
    ValueError
        As `hit_rate_at`.

    Source: project addition (NDCG@n on protocol P1 of 000_619a0297b9d686b2.txt, section 6; the
    seeds use NDCG only on P3).
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    _, ge, _ = _loo_counts(score_fn, split, batch_size)
    rank = _pessimistic_rank(ge)
    return np.where(rank <= n, 1.0 / np.log2(rank + 1.0), 0.0)


def leave_one_out_metrics(
    score_fn: ScoreFn, split: ImplicitSplit, n: int = 10, batch_size: int = 256
) -> pd.DataFrame:
    """All P1 metrics per test user, in one pass over the scores.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores.
    split : ImplicitSplit
        From `validation.data.datasets.split_leave_one_out`.
    n : int
        Cut-off of HR@n and NDCG@n.
    batch_size : int
        Users per call of ``score_fn``; does not change the result.

    Returns
    -------
    pandas.DataFrame, T rows (``split.test_users`` order)
        ``user`` (int64 index), ``item`` (held-out item index), ``degree``
        (number of training positives of the user), ``n_candidates``,
        ``rank`` (pessimistic, 1-based), ``rank_score`` (`rank_score`,
        000 eq. 12 / 003 eq. 20), ``hit`` (HR@n), ``ndcg`` (NDCG@n).
        ``df.attrs`` holds ``{"protocol": "P1", "n": n}``.

    Raises
    ------
    ValueError
        As `rank_score`; n < 1.
    Source: 000_619a0297b9d686b2.txt, eq. 12 and 003_203f63200c0d7157.txt, eq. 20 (rank score);
    HR@n and NDCG@n are a project addition.
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    below, ge, n_cand = _loo_counts(score_fn, split, batch_size)
    rank = _pessimistic_rank(ge)
    users = np.asarray(split.test_users, dtype=np.int64)
    degree = np.bincount(np.asarray(split.train.rows), minlength=split.n_users)[users]
    with np.errstate(invalid="ignore", divide="ignore"):
        rs = np.where(n_cand > 0, below / np.maximum(n_cand, 1), np.nan)
    out = pd.DataFrame(
        {
            "user": users,
            "item": np.asarray(split.test_items, dtype=np.int64),
            "degree": degree.astype(np.int64),
            "n_candidates": n_cand,
            "rank": rank,
            "rank_score": rs,
            "hit": (rank <= n).astype(np.float64),
            "ndcg": np.where(rank <= n, 1.0 / np.log2(rank + 1.0), 0.0),
        }
    )
    out.attrs.update(protocol="P1", n=int(n))
    return out


# ---------------------------------------------------------------------------
# P3: random holdout, top-P lists
# ---------------------------------------------------------------------------


def _discounts(p: int, discount: str) -> np.ndarray:
    k = np.arange(1, p + 1, dtype=np.float64)
    if discount == "eq5.26":
        return np.where(k == 1, 1.0, 1.0 / np.log2(np.maximum(k, 2.0)))
    if discount == "log2(k+1)":
        return 1.0 / np.log2(k + 1.0)
    raise ValueError(f"discount must be 'eq5.26' or 'log2(k+1)', got {discount!r}")


def holdout_metrics(
    score_fn: ScoreFn,
    split: HoldoutSplit,
    p: int = 100,
    batch_size: int = 256,
    discount: str = "eq5.26",
) -> pd.DataFrame:
    """Precision@P, recall@P and NDCG@P per user (protocol P3).

    004_90693a0965f06816.txt, section 5.4.4. For each user u with at least one
    test entry: the candidates are the items with no training entry for u
    (M - T_u); the *retrieved* set is the top ``p`` candidates by score, ties
    broken by smaller item index (``np.argsort(-score, kind="stable")``
    restricted to the candidates); the *relevant* set is the user's test items,
    whatever their rating (Relevant_u = P_u). Then

    - eq. (5.21): ``precision = |Relevant ∩ Retrieved| / p``;
    - eq. (5.22): ``recall = |Relevant ∩ Retrieved| / |Relevant|``;
    - eq. (5.26): ``DCG = rel(1) + sum_{k=2}^{p} rel(k) / log2(k)`` with binary
      gain ``rel(k) = 1`` if the k-th retrieved item is a test item;
    - eq. (5.27): ``NDCG = DCG / IDCG``, IDCG being the DCG of the ideal list
      (all ``min(|Relevant|, p)`` relevant items first).

    Means over users (eqs. 5.23, 5.24, 5.28) and the F-measure (5.25) are in
    `summarize`.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores.
    split : HoldoutSplit
        From `validation.data.datasets.split_random_holdout`.
    p : int
        List length P (100 in the thesis).
    batch_size : int
        Users per call of ``score_fn``; does not change the result.
    discount : {"eq5.26", "log2(k+1)"}
        ``"eq5.26"`` is the thesis' discount (positions 1 and 2 both weigh 1);
        ``"log2(k+1)"`` the now more common ``1 / log2(k + 1)``.

    Returns
    -------
    pandas.DataFrame, one row per user with test entries (increasing user index)
        ``user`` (int64), ``degree`` (training entries of the user), ``n_test``
        (|Relevant_u|), ``hits`` (|Relevant ∩ Retrieved|), ``precision``,
        ``recall``, ``ndcg`` (float64). ``df.attrs`` holds
        ``{"protocol": "P3", "p": p, "discount": discount}``.

    Raises
    ------
    ValueError
        Scores of the wrong shape or NaN; train and test sharing an entry;
        train and test of different shapes; p < 1; a bad ``batch_size`` or
        ``discount``.
    Source: 004_90693a0965f06816.txt, section 5.4.4, eqs. (5.21), (5.22), (5.26), (5.27).
    """
    if int(p) != p or p < 1:
        raise ValueError(f"p must be a positive integer, got {p!r}")
    p = int(p)
    batch_size = _check_batch_size(batch_size)
    w = _discounts(p, discount)
    if split.train.shape != split.test.shape:
        raise ValueError(f"train shape {split.train.shape} differs from test shape {split.test.shape}")
    I, J = split.train.shape
    train = _pattern(split.train)
    test = _pattern(split.test)
    if train.multiply(test).nnz:
        raise ValueError("test: some (user, item) entries are in both train and test")
    n_test_all = np.diff(test.indptr)
    users = np.flatnonzero(n_test_all > 0).astype(np.int64)
    degree = np.diff(train.indptr)[users].astype(np.int64)
    n_test = n_test_all[users].astype(np.int64)
    hits = np.empty(users.size, dtype=np.int64)
    dcg = np.empty(users.size, dtype=np.float64)
    cols = np.arange(J)
    for start in range(0, users.size, batch_size):
        bu = users[start : start + batch_size]
        s = _scores(score_fn, bu, J)
        in_train = _row_mask(train, bu)
        relevant = _row_mask(test, bu)
        # candidates first, then higher score, then smaller index
        order = np.lexsort((np.broadcast_to(cols, s.shape), -s, in_train), axis=-1)[:, :p]
        b = np.arange(bu.size)[:, None]
        rel = relevant[b, order] & ~in_train[b, order]
        hits[start : start + bu.size] = rel.sum(axis=1)
        dcg[start : start + bu.size] = rel @ w[: order.shape[1]]
    idcg = np.cumsum(w)[np.minimum(n_test, p) - 1]
    out = pd.DataFrame(
        {
            "user": users,
            "degree": degree,
            "n_test": n_test,
            "hits": hits,
            "precision": hits / p,
            "recall": hits / n_test,
            "ndcg": dcg / idcg,
        }
    )
    out.attrs.update(protocol="P3", p=p, discount=discount)
    return out


def p3_metrics(score_fn: ScoreFn, split: HoldoutSplit, p: int = 100, batch_size: int = 256) -> pd.DataFrame:
    """`holdout_metrics` per user with both NDCG discounts: the thesis's and ``1 / log2(k + 1)``.

    The score function is called twice per batch (once per discount).

    Parameters
    ----------
    score_fn : callable
        ``score_fn(users (B,) int64) -> (B, J)`` float scores (higher = recommended first).
    split : HoldoutSplit
        From `validation.data.datasets.split_random_holdout`.
    p : int >= 1, default 100
        List length P (100 in the thesis).
    batch_size : int >= 1, default 256
        Users per call of ``score_fn``; does not change the result.

    Returns
    -------
    pandas.DataFrame
        The DataFrame of `holdout_metrics` (``discount="eq5.26"``; one row per user with test entries) with
        one more column, ``ndcg_log2k1`` (float64): the NDCG@p of the same list with the discount
        ``1 / log2(k + 1)``.

    Raises
    ------
    ValueError
        As `holdout_metrics`.

    Source: 004_90693a0965f06816.txt, sec. 5.4.4, eqs. (5.21)-(5.27); the second discount is a project
    addition.
    """
    pu = holdout_metrics(score_fn, split, p=p, batch_size=batch_size)
    pu2 = holdout_metrics(score_fn, split, p=p, batch_size=batch_size, discount="log2(k+1)")
    pu["ndcg_log2k1"] = pu2["ndcg"].to_numpy()
    return pu


# ---------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------


def summarize(per_user: pd.DataFrame) -> pd.Series:
    """Average the per-user metrics of `leave_one_out_metrics` or `holdout_metrics`.

    Means over users of the columns ``rank_score``, ``hit``, ``ndcg``,
    ``precision``, ``recall`` that are present (NaN entries skipped): eqs.
    (5.23), (5.24), (5.28) of 004_90693a0965f06816.txt for P3. With precision
    and recall present, adds ``f_measure = 2 P R / (P + R)`` of the means
    (eq. 5.25; 0 when both are 0). Always adds ``n_users``.

    Parameters
    ----------
    per_user : pandas.DataFrame
        One row per evaluated user, with some of the metric columns above.

    Returns
    -------
    pandas.Series of float64
        Indexed by the metric columns present, then ``f_measure`` (with precision and recall) and
        ``n_users`` (the number of rows, as a float).

    Raises
    ------
    ValueError
        No metric column, or no rows.

    Source: 004_90693a0965f06816.txt, eqs. (5.23)-(5.25), (5.28) (P3); the P1 means are a project
    addition.
    """
    present = [c for c in METRIC_COLUMNS if c in per_user.columns]
    if not present:
        raise ValueError(f"per_user has none of the metric columns {METRIC_COLUMNS}")
    if len(per_user) == 0:
        raise ValueError("per_user has no rows")
    out = per_user[present].astype(np.float64).mean(axis=0)
    if "precision" in out and "recall" in out:
        P, R = out["precision"], out["recall"]
        out["f_measure"] = 2 * P * R / (P + R) if P + R > 0 else 0.0
    out["n_users"] = float(len(per_user))
    return out


def by_degree(
    per_user: pd.DataFrame, column: str, n_buckets: int | None = None, degree: str = "degree"
) -> pd.DataFrame:
    """Average a per-user metric in log-scale buckets of the user's degree.

    The seeds plot their metrics "grouped logarithmically" by the user's
    number of observations (000_619a0297b9d686b2.txt figs. 2-3,
    003_203f63200c0d7157.txt fig. 6). Bucket edges are powers of 2: by
    default one bucket per octave, ``[2^k, 2^(k+1))``; with ``n_buckets``,
    each bucket spans ``ceil(n_octaves / n_buckets)`` consecutive octaves
    (starting at the lowest octave present), so there are at most
    ``n_buckets`` buckets of positive degree. Degree 0, if present, is its own
    bucket ``[0, 1)``. Empty buckets are left out.

    Parameters
    ----------
    per_user : pandas.DataFrame
        One row per user, with columns ``column`` and ``degree``.
    column : str
        The metric to average (e.g. ``"rank_score"``, ``"recall"``).
    n_buckets : int, optional
        Maximum number of buckets of positive degree.
    degree : str
        Name of the degree column.

    Returns
    -------
    pandas.DataFrame, one row per non-empty bucket, increasing degree
        ``bucket_low`` (int, inclusive), ``bucket_high`` (int, exclusive),
        ``n_users`` (int), ``mean`` and ``sem`` (standard error of the mean,
        ``std(ddof=1) / sqrt(n_users)``, NaN for a single user) of ``column``.

    Raises
    ------
    ValueError
        A missing column, negative or non-integer degrees, ``n_buckets < 1``.
    Source: 000_619a0297b9d686b2.txt, figs. 2-3; 003_203f63200c0d7157.txt, fig. 6 (degree buckets).
    """
    for c in (column, degree):
        if c not in per_user.columns:
            raise ValueError(f"per_user has no column {c!r}; its columns are {list(per_user.columns)}")
    if n_buckets is not None and (int(n_buckets) != n_buckets or n_buckets < 1):
        raise ValueError(f"n_buckets must be a positive integer or None, got {n_buckets!r}")
    d = per_user[degree].to_numpy()
    if np.any(d < 0) or np.any(d != np.round(d)):
        raise ValueError(f"column {degree!r} must hold non-negative integers")
    d = d.astype(np.int64)
    values = per_user[column].to_numpy(dtype=np.float64)
    octave = np.full(d.shape, -1, dtype=np.int64)
    pos = d > 0
    octave[pos] = np.floor(np.log2(d[pos])).astype(np.int64)
    # guard against floating-point log2 at exact powers of two
    octave[pos] += (2 ** (octave[pos] + 1) <= d[pos]).astype(np.int64)
    octave[pos] -= (2 ** octave[pos] > d[pos]).astype(np.int64)
    if pos.any():
        k0, k1 = int(octave[pos].min()), int(octave[pos].max())
        width = 1 if n_buckets is None else int(np.ceil((k1 - k0 + 1) / int(n_buckets)))
    else:
        k0, width = 0, 1
    bucket = np.where(pos, (octave - k0) // width, -1)
    rows = []
    for b in np.unique(bucket):
        sel = bucket == b
        v = values[sel]
        v = v[~np.isnan(v)]
        if b < 0:
            low, high = 0, 1
        else:
            low, high = 2 ** (k0 + width * int(b)), 2 ** (k0 + width * (int(b) + 1))
        nv = v.size
        rows.append(
            {
                "bucket_low": low,
                "bucket_high": high,
                "n_users": int(sel.sum()),
                "mean": float(v.mean()) if nv else np.nan,
                "sem": float(v.std(ddof=1) / np.sqrt(nv)) if nv > 1 else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["bucket_low", "bucket_high", "n_users", "mean", "sem"])


# ---------------------------------------------------------------------------
# popularity baseline
# ---------------------------------------------------------------------------


def popularity_scores(train: Observations) -> np.ndarray:
    """Item popularity: the number of training entries of each item.

    The "popularity c_j" baseline of 000_619a0297b9d686b2.txt section 6 and
    "popularity s_mn = pi_n" of 003_203f63200c0d7157.txt section 6.1.2. For
    count data (P3) it counts the entries, not the sum of their values: the
    count reproduces the reference precision/recall@100 on MovieLens 100K, the
    sum of stars does not (see the module docstring).

    Parameters
    ----------
    train : Observations, shape (I, J)
        The training entries.

    Returns
    -------
    numpy.ndarray, shape (J,), float64
        The number of training entries of each item.

    Raises
    ------
    ValueError
        ``train`` is not `Observations`.

    Source: 000_619a0297b9d686b2.txt, section 6; 003_203f63200c0d7157.txt, section 6.1.2.
    """
    if not isinstance(train, Observations):
        raise ValueError(f"train must be Observations, got {type(train).__name__}")
    return np.bincount(np.asarray(train.cols), minlength=train.n_cols).astype(np.float64)


def popularity_score_fn(train: Observations) -> ScoreFn:
    """A score function giving every user the item popularity of `popularity_scores`.

    Parameters
    ----------
    train : Observations, shape (I, J)
        The training entries; an item's popularity is its number of entries.

    Returns
    -------
    callable
        ``fn(users (B,) int) -> (B, J) float64``, each row equal to
        ``popularity_scores(train)``.

    Raises
    ------
    ValueError
        ``train`` is not `Observations` (from `popularity_scores`).

    Source: 000_619a0297b9d686b2.txt, section 6; 003_203f63200c0d7157.txt, section 6.1.2.
    """
    pop = popularity_scores(train)

    def score_fn(users: np.ndarray) -> np.ndarray:
        users = np.asarray(users)
        return np.broadcast_to(pop, (users.shape[0], pop.shape[0])).copy()

    return score_fn


# ---------------------------------------------------------------------------
# P2: rating prediction, RMSE
# ---------------------------------------------------------------------------


def _check_pred_truth(pred, truth) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(truth, dtype=np.float64)
    if p.ndim != 1 or t.ndim != 1 or p.shape != t.shape:
        raise ValueError(f"pred and truth must be 1-D of equal length, got shapes {p.shape} and {t.shape}")
    if p.size == 0:
        raise ValueError("pred: no predictions (length 0)")
    for name, a in (("pred", p), ("truth", t)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: {int(np.sum(~np.isfinite(a)))} NaN or infinite entries")
    return p, t


def rmse(pred, truth) -> float:
    """Root mean square error of rating predictions (protocol P2).

    ``RMSE = sqrt(1/N * sum_n (pred_n - truth_n)^2)``: the metric of the
    Gaussian models of 004_90693a0965f06816.txt (chapter 3, section 3.3.2,
    after eq. 3.18, where ``pred`` is the prediction averaged over the kept
    samples; chapter 4, section 4.4.3), citing Koren et al. (2009).

    Parameters
    ----------
    pred : array_like, shape (N,)
        Predicted ratings (e.g. ``predict`` on the test design of
        `validation.data.datasets.fm_features`).
    truth : array_like, shape (N,)
        Observed ratings in the same order (e.g. ``split.test.values``).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Shapes not 1-D and equal; length 0; NaN or infinite entries.
    Source: 004_90693a0965f06816.txt, ch. 3, section 3.3.2 (after eq. 3.18); ch. 4, section 4.4.3.
    """
    p, t = _check_pred_truth(pred, truth)
    return float(np.sqrt(np.mean((p - t) ** 2)))


def rmse_by_degree(pred, truth, users, degree, n_buckets: int | None = None) -> pd.DataFrame:
    """RMSE in log2-spaced buckets of the user's training degree (protocol P2).

    The buckets are those of `by_degree` (one per octave ``[2^k, 2^(k+1))``, or
    at most ``n_buckets`` of whole octaves; degree 0 is ``[0, 1)``), computed
    from the degrees of the users that have test ratings, so the same users
    fall in the same bucket as in `by_degree` of a per-user table. Within a
    bucket, the RMSE pools the *ratings* of its users:
    ``sqrt(mean over the bucket's test ratings of (pred - truth)^2)``, which
    is the overall `rmse` restricted to those ratings (not a mean of per-user
    RMSEs).

    Parameters
    ----------
    pred, truth : array_like, shape (N,)
        Predicted and observed test ratings.
    users : array_like, shape (N,), int
        User index (0 .. I-1) of each test rating (e.g. ``split.test.rows``).
    degree : Observations or array_like
        Either the training `Observations` (I, J), whose row counts are the
        degrees, or an int array (I,) of per-user training degrees.
    n_buckets : int, optional
        As in `by_degree`.

    Returns
    -------
    pandas.DataFrame, one row per non-empty bucket, increasing degree
        ``bucket_low`` (inclusive), ``bucket_high`` (exclusive), ``n_users``
        (users with test ratings in the bucket), ``n_ratings``, ``rmse``, and
        ``sem``: a delta-method standard error ``sem(sq. error) / (2 rmse)``
        that treats the bucket's ratings as independent (ratings of one user
        are correlated, so it is a rough guide, NaN for a single rating).

    Raises
    ------
    ValueError
        As `rmse`; ``users`` of the wrong shape, non-integer or outside
        0 .. I-1; negative degrees; ``n_buckets < 1``.
    Source: project addition (the `rmse` of 004_90693a0965f06816.txt, ch. 3-4, in the degree
    buckets of `by_degree`).
    """
    p, t = _check_pred_truth(pred, truth)
    if isinstance(degree, Observations):
        deg = np.bincount(np.asarray(degree.rows), minlength=degree.n_rows)
    else:
        deg = np.asarray(degree)
        if deg.ndim != 1 or (deg.size and not np.issubdtype(deg.dtype, np.integer)
                             and np.any(deg != np.round(deg))):
            raise ValueError(f"degree: expected Observations or a 1-D integer array (I,), got shape {deg.shape}")
        if np.any(deg < 0):
            raise ValueError("degree: negative degrees")
        deg = deg.astype(np.int64)
    u = np.asarray(users)
    if u.shape != p.shape:
        raise ValueError(f"users: expected shape {p.shape} (one user per rating), got {u.shape}")
    if not np.issubdtype(u.dtype, np.integer):
        if np.any(u != np.round(u)):
            raise ValueError("users: must hold integer user indices")
        u = u.astype(np.int64)
    if u.min() < 0 or u.max() >= deg.size:
        raise ValueError(f"users: indices must be in [0, {deg.size - 1}], found [{u.min()}, {u.max()}]")
    per_rating = pd.DataFrame({"sq_err": (p - t) ** 2, "degree": deg[u]})
    per_user = pd.DataFrame({"user": np.unique(u)})
    per_user["degree"] = deg[per_user["user"].to_numpy()]
    per_user["one"] = 1.0
    # the same bucket edges: both tables hold exactly the same set of degrees
    mse = by_degree(per_rating, "sq_err", n_buckets=n_buckets)
    users_b = by_degree(per_user, "one", n_buckets=n_buckets)
    r = np.sqrt(mse["mean"].to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        sem = np.where(r > 0, mse["sem"].to_numpy() / (2.0 * r), np.nan)
    return pd.DataFrame({
        "bucket_low": mse["bucket_low"].to_numpy(),
        "bucket_high": mse["bucket_high"].to_numpy(),
        "n_users": users_b["n_users"].to_numpy(),
        "n_ratings": mse["n_users"].to_numpy(),
        "rmse": r,
        "sem": sem,
    })
