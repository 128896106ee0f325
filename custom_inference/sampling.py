r"""Weighted sampling without replacement, per row, with excluded items (numpy, exact, bounded work).

Problem. For every row m (a user) draw ``k_m`` distinct items from ``0..J-1`` by *successive
sampling* with weights ``w`` (J,): the first item with probability ``w_n / sum w``, each next one
with probability proportional to ``w`` among the items not yet drawn, never an item of the
row's excluded set ``X_m`` (its observed items) and never an item of weight 0. This is the
"sample d_m negative edges from M(pi) without replacement" of ``003_203f63200c0d7157.txt``
sec. 4.1, and the distribution of numpy's ``Generator.choice(replace=False, p=...)`` and of
Efraimidis-Spirakis / Gumbel-top-k keys.

Algorithm (ours; exact, no I x J array, no unbounded loop):

1. *Rounds of i.i.d. draws.* Draw candidates i.i.d. from ``w`` (inverse CDF, O(log J) each), for
   every unfinished row about ``oversample`` times its remaining need, in order. The sequence of
   *first occurrences of admissible items* (not excluded, not already taken) in an i.i.d. stream
   is exactly successive sampling: given the prefix S already taken, the stream runs on until it
   hits an item outside ``S u X_m``, and that item is distributed as ``w`` restricted to the
   complement, normalized. So each row keeps the first admissible distinct candidates, in stream
   order, up to its need; later rounds continue the same stream. Expected work
   O(k_m log J / (1 - excluded mass)) per row.
2. *Bounded fallback.* Rows still unfinished after ``rounds`` rounds (their excluded plus taken
   mass is close to 1, so the stream would need many draws) finish with Gumbel-top-k keys
   ``log w_n + Gumbel`` over their admissible items: successive sampling is Markov in the taken
   set, and Gumbel-top-r over the complement is successive sampling of the remaining r items.
   This costs O(J) for each such row only.

Rows whose admissible set is smaller than ``k_m`` get all of it (the count is capped).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sample_without_replacement", "successive_inclusion_probabilities"]


def _check(weights, indptr, indices, n_draws):
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"weights must be a non-empty 1-D array, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
        raise ValueError("indptr must be a CSR row pointer: starts at 0, non-decreasing, ends at len(indices)")
    if indices.size and (indices.min() < 0 or indices.max() >= w.size):
        raise ValueError(f"indices (excluded items) out of range [0, {w.size - 1}]")
    n = np.asarray(n_draws, dtype=np.int64)
    if n.shape != (indptr.size - 1,) or np.any(n < 0):
        raise ValueError(f"n_draws must be non-negative integers of shape ({indptr.size - 1},), got {n.shape}")
    return w, indptr, indices, n


def sample_without_replacement(rng: np.random.Generator, weights, indptr, indices, n_draws, *,
                               rounds: int = 4, oversample: float = 2.0):
    """Successive weighted sampling without replacement, one independent draw per row.

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness (same state, same result).
    weights : array-like, shape (J,), float
        Item weights, >= 0 and finite; items of weight 0 are never drawn.
    indptr : array-like, shape (I + 1,), int
        CSR row pointer of the excluded items.
    indices : array-like, shape (nnz,), int in [0, J)
        Excluded items: those of row m are ``indices[indptr[m]:indptr[m+1]]`` (duplicates allowed).
    n_draws : array-like, shape (I,), int >= 0
        Requested number of items per row.
    rounds : int >= 0, keyword-only, default 4
        Rounds of i.i.d. draws before the Gumbel-top-k fallback (0: fallback only).
    oversample : float >= 1, keyword-only, default 2.0
        Candidates per remaining item in a round.

    Returns
    -------
    rows : numpy.ndarray, shape (S,), int64
        Row of each drawn item, non-decreasing.
    items : numpy.ndarray, shape (S,), int64
        The drawn items. Row m holds ``min(n_draws[m], #admissible items of m)`` distinct items,
        in the order they were drawn.

    Raises
    ------
    ValueError
        Malformed ``weights`` (not a non-empty 1-D array of finite values >= 0), CSR arrays
        (``indptr`` not starting at 0, decreasing or not ending at ``len(indices)``; ``indices``
        out of [0, J)), ``n_draws`` (wrong shape or negative), ``rounds`` < 0 or
        ``oversample`` < 1.

    Source: ``003_203f63200c0d7157.txt`` sec. 4.1 (the sampler of q(H)); module docstring for
    the algorithm and its exactness.
    """
    w, indptr, indices, n = _check(weights, indptr, indices, n_draws)
    if rounds < 0 or oversample < 1:
        raise ValueError(f"rounds must be >= 0 and oversample >= 1, got {rounds}, {oversample}")
    I, J = indptr.size - 1, w.size
    excl_rows = np.repeat(np.arange(I), np.diff(indptr))
    excl_keys = np.unique(excl_rows * J + indices)
    positive = w > 0
    # admissible count per row: positive-weight items minus positive-weight excluded ones
    ex_pos = np.bincount(excl_keys // J, weights=positive[excl_keys % J], minlength=I).astype(np.int64)
    need = np.minimum(n, int(positive.sum()) - ex_pos)
    taken_keys = np.empty(0, np.int64)
    out_rows, out_items = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    cdf = np.cumsum(w)
    total = cdf[-1]
    for _ in range(rounds):
        active = np.flatnonzero(need > 0)
        if active.size == 0:
            break
        per = np.ceil(oversample * need[active]).astype(np.int64) + 2
        cand_rows = np.repeat(active, per)
        cand_items = np.minimum(np.searchsorted(cdf, rng.random(cand_rows.size) * total, side="right"), J - 1)
        keys = cand_rows * J + cand_items
        # first occurrence of each (row, item) in stream order (rows are contiguous, stream order within)
        _, first = np.unique(keys, return_index=True)
        first.sort()
        keys_f = keys[first]
        ok = ~_isin_sorted(keys_f, excl_keys) & ~_isin_sorted(keys_f, np.sort(taken_keys))
        keys_f = keys_f[ok]
        r = keys_f // J
        # rank within row (keys_f is in stream order, rows contiguous and increasing)
        starts = np.searchsorted(r, r, side="left")
        rank = np.arange(r.size) - starts
        keep = rank < need[r]
        keys_k = keys_f[keep]
        out_rows.append(keys_k // J)
        out_items.append(keys_k % J)
        taken_keys = np.concatenate([taken_keys, keys_k])
        need = need - np.bincount(keys_k // J, minlength=I)
    # Gumbel-top-k fallback for the rows still short
    taken_sorted = np.sort(taken_keys)
    logw = np.where(positive, np.log(np.where(positive, w, 1.0)), -np.inf)
    for m in np.flatnonzero(need > 0):
        blocked = np.concatenate([indices[indptr[m]:indptr[m + 1]],
                                  taken_sorted[(taken_sorted >= m * J) & (taken_sorted < (m + 1) * J)] - m * J])
        keys_m = logw + rng.gumbel(size=J)
        keys_m[blocked] = -np.inf
        top = np.argsort(-keys_m, kind="stable")[: need[m]]
        out_rows.append(np.full(top.size, m, np.int64))
        out_items.append(top.astype(np.int64))
    rows = np.concatenate(out_rows)
    items = np.concatenate(out_items)
    order = np.argsort(rows, kind="stable")
    return rows[order], items[order]


def _isin_sorted(x, sorted_ref):
    if sorted_ref.size == 0:
        return np.zeros(x.shape, bool)
    pos = np.minimum(np.searchsorted(sorted_ref, x), sorted_ref.size - 1)
    return sorted_ref[pos] == x


def successive_inclusion_probabilities(weights, excluded, k: int) -> np.ndarray:
    """Exact inclusion probability of every item under successive sampling of ``k`` items.

    By enumeration of all ordered draws (tiny J only: reference for the property tests).

    Parameters
    ----------
    weights : array-like, shape (J,), float >= 0
        Item weights (not checked).
    excluded : iterable of int
        Items never drawn (their weight is set to 0).
    k : int >= 0
        Number of items drawn.

    Returns
    -------
    numpy.ndarray, shape (J,), float64
        P(item n is among the k drawn); sums to min(k, #admissible).

    Raises
    ------
    IndexError
        Not of its own (no value checks): numpy raises it for an ``excluded`` index outside
        0..J-1.

    Source: project addition (an exact reference for the sampler of
    ``003_203f63200c0d7157.txt`` sec. 4.1; module docstring).
    """
    w = np.asarray(weights, dtype=np.float64).copy()
    w[list(excluded)] = 0.0
    out = np.zeros(w.size)

    def rec(avail, p, depth):
        if depth == k or avail.sum() == 0:
            return
        tot = avail.sum()
        for j in np.flatnonzero(avail > 0):
            pj = p * avail[j] / tot
            out[j] += pj
            nxt = avail.copy()
            nxt[j] = 0.0
            rec(nxt, pj, depth + 1)

    rec(w, 1.0, 0)
    return out
