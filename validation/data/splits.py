"""Indexing and the evaluation splits of the seed papers.

- `index_ratings` / `IndexedRatings`: contiguous 0-based indices ``u`` (0 .. I-1) and ``i``
  (0 .. J-1) of a ratings table (see `validation.data.loaders`), assigned in increasing id order
  (numeric order for int64 ids, lexicographic order for string ids), with the maps back to
  the original ids; `to_observations` gives the `Observations` container.
- Splits:

  * ``"P1"``, `split_leave_one_out`: the held-out-item protocol of
    000_619a0297b9d686b2.txt (section 6, "for each user, one item was randomly
    removed to create a test set", evaluated with the rank of eq. 12) and
    003_203f63200c0d7157.txt (section 6.1.2, eq. 20), on ratings binarized at a
    threshold (the "Netflix (4 and 5 stars)" construction of seed 000).
  * `split_leave_one_item_out_baskets`: the same protocol on basket data (baskets are
    users): one item of every basket with at least 2 distinct items is held out.
  * ``"P3"``, `split_random_holdout`: the 80/20 random holdout of
    004_90693a0965f06816.txt, section 5.4.4 ("a held out set consisting of 20%
    data instances randomly selected"), with ratings used as counts.
  * ``"P2"``, `split_p2`: the 90:10 random split of explicit ratings of
    004_90693a0965f06816.txt, section 3.3.1 (RMSE of the Gaussian models,
    chapters 3-4), ratings kept as real values (`validation.data.features.fm_features`
    builds its factorization-machine designs).
  * `dense_submatrix`: a small dense block of the most active users and most
    popular items, for NUTS-sized cross-checks on real data.

Shapes follow the project convention: I users (rows), J items (columns), N ratings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from custom_inference.data import Observations

from validation.data.loaders import _canonical, ratings_from_dataframe

__all__ = [
    "IndexedRatings",
    "index_ratings",
    "to_observations",
    "ImplicitSplit",
    "HoldoutSplit",
    "RatingsSplit",
    "split_leave_one_out",
    "split_leave_one_item_out_baskets",
    "split_random_holdout",
    "split_p2",
    "dense_submatrix",
]


# ---------------------------------------------------------------------------
# Indexing
# ---------------------------------------------------------------------------


class _IdMaps:
    """The id maps of a re-indexed table (needs ``user_ids`` (I,) and ``item_ids`` (J,) fields):
    sizes and lookups of original ids, written once for `IndexedRatings` and `RatingsSplit`."""

    @property
    def n_users(self) -> int:
        """I, the number of users (an int).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.user_ids.shape[0])

    @property
    def n_items(self) -> int:
        """J, the number of items (an int).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.item_ids.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """(I, J), a tuple of two ints.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return (self.n_users, self.n_items)

    def user_index(self, ids) -> np.ndarray:
        """Indices ``u`` of original user ids.

        Parameters
        ----------
        ids : array_like, shape (M,)
            Original user ids (int or str, the kind of ``user_ids``).

        Returns
        -------
        numpy.ndarray, shape (M,), int64
            ``u`` with ``user_ids[u] == ids``.

        Raises
        ------
        ValueError
            An id that is not in ``user_ids`` (also an id of the other kind: a string looked up among
            int64 ids, or the reverse).

        Source: project addition.
        """
        return _lookup(self.user_ids, ids, "user")

    def item_index(self, ids) -> np.ndarray:
        """Indices ``i`` of original item ids.

        Parameters
        ----------
        ids : array_like, shape (M,)
            Original item ids (int or str, the kind of ``item_ids``).

        Returns
        -------
        numpy.ndarray, shape (M,), int64
            ``i`` with ``item_ids[i] == ids``.

        Raises
        ------
        ValueError
            An id that is not in ``item_ids`` (or of the other kind).

        Source: project addition.
        """
        return _lookup(self.item_ids, ids, "item")


@dataclass(frozen=True)
class IndexedRatings(_IdMaps):
    """A ratings table re-indexed to contiguous 0-based user and item indices.

    Made by `index_ratings`; the fields are not checked on construction.

    Parameters
    ----------
    frame : pandas.DataFrame, N rows
        Columns ``u`` (int64, 0 .. I-1), ``i`` (int64, 0 .. J-1), ``rating``
        (float64) and ``timestamp`` (int64); rows sorted by (``u``, ``i``),
        index 0 .. N-1. Each (u, i) pair occurs once.
    user_ids : numpy.ndarray, shape (I,), int64 or object (str)
        Original user ids, increasing: ``user_ids[u]`` is the id of user ``u``.
        int64 when the table's user column is int64, else an object array of
        Python str sorted lexicographically (the id dtype rule of `validation.data.loaders`).
    item_ids : numpy.ndarray, shape (J,), int64 or object (str)
        Original item ids, increasing: ``item_ids[i]`` is the id of item ``i``
        (dtype as for ``user_ids``).

    Raises
    ------
    None of its own (a frozen dataclass; `user_index` / `item_index` raise ValueError for an
    unknown id).

    Source: project addition.
    """

    frame: pd.DataFrame
    user_ids: np.ndarray
    item_ids: np.ndarray


def _comparable(universe: np.ndarray, ids: np.ndarray):
    """``ids`` cast to the kind of ``universe`` (int64 or str objects), or None if they cannot be."""
    if ids.size == 0:
        return ids.astype(universe.dtype)
    if universe.dtype == object:  # string ids
        if ids.dtype.kind in "US":
            return ids.astype(object)
        if ids.dtype == object and all(isinstance(x, str) for x in ids.ravel()):
            return ids
        return None
    if ids.dtype.kind in "iu":
        return ids if ids.dtype.kind == "i" or ids.max() <= np.iinfo(np.int64).max else None
    if ids.dtype.kind == "f":
        return ids
    if ids.dtype == object and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in ids.ravel()):
        try:
            return ids.astype(np.int64)
        except OverflowError:
            return None
    return None


def _lookup(universe: np.ndarray, ids, name: str) -> np.ndarray:
    raw = np.asarray(ids)
    ids = _comparable(universe, raw)
    if ids is None:
        kind = "strings" if universe.dtype == object else "int64 integers"
        raise ValueError(
            f"{name} id(s) not in the data: {raw.ravel()[:5].tolist()}; the {name} ids of the data are {kind}"
        )
    if universe.size == 0:
        raise ValueError(f"{name} id(s) not in the data: {raw.ravel()[:5].tolist()} (no {name}s)")
    pos = np.searchsorted(universe, ids)
    ok = (pos < universe.size) & (universe[np.minimum(pos, universe.size - 1)] == ids)
    if not np.all(ok):
        raise ValueError(f"{name} id(s) not in the data: {np.asarray(ids)[~ok][:5].tolist()}")
    return pos.astype(np.int64)


def index_ratings(df: pd.DataFrame) -> IndexedRatings:
    """Re-index a ratings table to users 0..I-1 and items 0..J-1.

    The user universe is every user in ``df`` and the item universe every item
    in ``df``; both are numbered in increasing id order (numeric for int64 ids,
    lexicographic for string ids: "u10" < "u2"), so the result does not depend
    on the row order of ``df``.

    Parameters
    ----------
    df : pandas.DataFrame, N rows
        A ratings table (columns ``user``, ``item``, ``rating``, optional
        ``timestamp``), as returned by the loaders above.

    Returns
    -------
    IndexedRatings
        ``frame`` sorted by (u, i); ``user_ids`` (I,) and ``item_ids`` (J,),
        int64 or str objects (the id dtype rule of `validation.data.loaders`).

    Raises
    ------
    ValueError
        Not a ratings table (missing column, NaN or non-integer numeric ids),
        no rows, or a (user, item) pair that occurs more than once.

    Source: project addition.
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
    return IndexedRatings(frame=frame, user_ids=_id_array(user_ids), item_ids=_id_array(item_ids))


def _id_array(ids: np.ndarray) -> np.ndarray:
    return ids if ids.dtype == object else ids.astype(np.int64)


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

    Source: project addition.
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
# Splits
# ---------------------------------------------------------------------------


class _TrainSizes:
    """I and J of a split, read from its ``train`` Observations field; written once for
    `ImplicitSplit` and `HoldoutSplit`."""

    @property
    def n_users(self) -> int:
        """I, the number of users (rows of ``train``), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.train.n_rows

    @property
    def n_items(self) -> int:
        """J, the number of items (columns of ``train``), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.train.n_cols


@dataclass(frozen=True)
class ImplicitSplit(_TrainSizes):
    """Leave-one-out split of binarized ratings (protocol "P1") or of baskets.

    Made by `split_leave_one_out` (users and their positives),
    `split_leave_one_item_out_baskets` (baskets as users, their items as positives),
    and `validation.evaluation.implicit_eval.split_sibm` / ``binary_split``.

    Parameters
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

    Raises
    ------
    None of its own (a frozen dataclass; the fields are not checked on construction).

    Source: 000_619a0297b9d686b2.txt, section 6 (one held-out item per user, rank metric eq. 12) and
    003_203f63200c0d7157.txt, section 6.1.2 (eq. 20).
    """

    train: Observations
    test_users: np.ndarray
    test_items: np.ndarray
    indexed: IndexedRatings


@dataclass(frozen=True)
class HoldoutSplit(_TrainSizes):
    """Random holdout of ratings used as counts (protocol "P3").

    Made by `split_random_holdout`.

    Parameters
    ----------
    train, test : Observations
        Both shape (I, J), ``kind="count"`` (ratings as counts); disjoint
        entries whose union is every rating.
    indexed : IndexedRatings
        The full re-indexed ratings (I users, J items).

    Raises
    ------
    None of its own (a frozen dataclass; the fields are not checked on construction).

    Source: 004_90693a0965f06816.txt, section 5.4.4 (20 % of the data instances held out at random).
    """

    train: Observations
    test: Observations
    indexed: IndexedRatings


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

    Source: 000_619a0297b9d686b2.txt section 6 and 003_203f63200c0d7157.txt section 6.1.2 (protocol).
    """
    indexed = _indexed(df)
    frame = indexed.frame
    pos = frame[frame["rating"].to_numpy() >= threshold]
    u = pos["u"].to_numpy()
    i = pos["i"].to_numpy()  # sorted by (u, i): frame is
    if u.size == 0:
        raise ValueError(f"rating: no rating >= threshold={threshold}, so there are no positives")
    split = _hold_out_one(indexed, u, i, 2, seed, dtype)
    if split is None:
        raise ValueError(f"rating: no user has two or more positives at threshold={threshold}; the test set is empty")
    return split


def _hold_out_one(indexed: IndexedRatings, u: np.ndarray, i: np.ndarray, min_n: int, seed: int, dtype):
    """One uniformly drawn positive of every row with at least ``min_n`` positives goes to the test set.

    ``u``, ``i``: int64 (N,) positives sorted by (u, i). One generator, rows visited in index
    order, one ``rng.integers(n)`` per eligible row (the P1 algorithm). None if no row is eligible.
    """
    starts = np.searchsorted(u, np.arange(indexed.n_users), side="left")
    ends = np.searchsorted(u, np.arange(indexed.n_users), side="right")
    rng = np.random.default_rng(seed)
    keep = np.ones(u.size, dtype=bool)
    test_users, test_items = [], []
    for user in np.flatnonzero(ends - starts >= min_n):
        n = int(ends[user] - starts[user])
        k = int(rng.integers(n))
        test_users.append(int(user))
        test_items.append(int(i[starts[user] + k]))
        keep[starts[user] + k] = False
    if not test_users:
        return None
    train = Observations.from_coo(
        u[keep], i[keep], np.ones(int(keep.sum())), indexed.shape, kind="binary", dtype=dtype
    )
    return ImplicitSplit(
        train=train,
        test_users=np.asarray(test_users, dtype=np.int64),
        test_items=np.asarray(test_items, dtype=np.int64),
        indexed=indexed,
    )


def split_leave_one_item_out_baskets(table, seed: int = 0, min_items: int = 2, dtype=np.float64) -> ImplicitSplit:
    """Leave one item out of every basket with at least ``min_items`` distinct items.

    The held-out-item protocol of 000_619a0297b9d686b2.txt section 6 ("for each user, one
    item was randomly removed to create a test set"; metric eq. 12) applied to market-basket
    data: baskets play the users, their items the positives. The result is the
    `ImplicitSplit` of protocol P1, so `validation.evaluation.metrics` (rank score, HR@N, NDCG@N) and
    `validation.evaluation.implicit_eval.evaluate_implicit` (``protocols={"baskets": split}``) consume
    it unchanged.

    Algorithm (exactly):

    1. The table's (basket, item) pairs with ``rating > 0`` are the basket contents;
       repeated pairs count once (a basket holds distinct items).
    2. Re-index with `index_ratings`: baskets ``0 .. I-1`` and items ``0 .. J-1`` in
       increasing id order; the universe is every basket and item of ``table`` (also those
       whose rows all have rating 0).
    3. ``rng = numpy.random.default_rng(seed)``; baskets visited in index order; for each
       basket with ``n >= min_items`` distinct items (sorted by item index), draw
       ``k = rng.integers(n)``; item ``k`` is the basket's test item, the others train.
       Smaller baskets stay whole in training and have no test item.

    Parameters
    ----------
    table : pandas.DataFrame or IndexedRatings
        A ratings table of baskets, as `validation.data.loaders.load_fimi`,
        `load_basket_csv` or `load(..., format="fimi" | "basket-csv")` return
        (``user`` = basket id, ``item`` = item id, ``rating`` = 1.0); any ratings
        table is accepted, with ``rating > 0`` read as "in the basket".
    seed : int
        Seed of the generator; the same seed gives the same split.
    min_items : int
        Baskets with at least this many distinct items get a test item; >= 2 so that
        every such basket keeps at least one training item.
    dtype : numpy float dtype
        Storage dtype of ``train.values``.

    Returns
    -------
    ImplicitSplit
        ``train`` (I, J) binary (I baskets, J items); ``test_users`` (T,) int64, the
        increasing indices of the baskets with a test item; ``test_items`` (T,) int64;
        ``indexed`` the deduplicated baskets (rating 1.0 in, 0.0 out) with
        ``user_ids`` / ``item_ids`` the original basket and item ids.

    Raises
    ------
    ValueError
        Not a ratings table (see `index_ratings`); a negative rating; ``min_items``
        not an integer >= 2; no basket with ``min_items`` distinct items (empty test set).

    Source: 000_619a0297b9d686b2.txt section 6 (protocol), applied to baskets (project addition).
    """
    if isinstance(min_items, bool) or not isinstance(min_items, (int, np.integer)) or min_items < 2:
        raise ValueError(f"min_items must be an integer >= 2, got {min_items!r}")
    if isinstance(table, IndexedRatings):
        frame = table.frame
        t = pd.DataFrame({
            "user": table.user_ids[frame["u"].to_numpy()], "item": table.item_ids[frame["i"].to_numpy()],
            "rating": frame["rating"].to_numpy(), "timestamp": frame["timestamp"].to_numpy(),
        })
    elif isinstance(table, pd.DataFrame):
        missing = [c for c in ("user", "item", "rating") if c not in table.columns]
        if missing:
            raise ValueError(f"table has no column(s) {missing}; load baskets with validation.data.loaders.load_fimi / load_basket_csv")
        t = table
    else:
        raise ValueError(f"table must be a pandas DataFrame or IndexedRatings, got {type(table).__name__}")
    t = _canonical(t, source="basket table")
    r = t["rating"].to_numpy()
    if np.any(r < 0):
        raise ValueError(f"rating: {int(np.sum(r < 0))} negative values; a basket table holds 1 (in) or 0 (out)")
    t = t.assign(rating=(r > 0).astype(np.float64))
    # a pair is in the basket if any of its rows is: keep the largest rating of each pair
    t = t.sort_values("rating", ascending=False, kind="stable")
    t = t[~t.duplicated(["user", "item"])]
    indexed = index_ratings(t)
    frame = indexed.frame
    ones = frame["rating"].to_numpy() > 0
    u = frame["u"].to_numpy()[ones]
    i = frame["i"].to_numpy()[ones]
    split = _hold_out_one(indexed, u, i, int(min_items), seed, dtype)
    if split is None:
        raise ValueError(f"baskets: no basket has {int(min_items)} or more distinct items; the test set is empty")
    return split


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
      ``validation.evaluation.metrics`` were measured that way.

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

    Source: 004_90693a0965f06816.txt section 5.4.4 (protocol).
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
    user_ids : numpy.ndarray, shape (n_users,), int64 (or object str for string ids)
        Original ids of the rows, increasing.
    item_ids : numpy.ndarray, shape (n_items,), int64 (or object str for string ids)
        Original ids of the columns, increasing.

    Raises
    ------
    ValueError
        Bad ratings table; ``n_users`` or ``n_items`` below 1 or above what the data has.

    Source: project addition.
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
# Protocol P2: explicit ratings, 90:10 random split (FM designs: validation.data.features)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RatingsSplit(_IdMaps):
    """Random 90:10 split of explicit ratings (protocol "P2"), ratings kept as real values.

    Row ``n`` of ``train_frame`` is entry ``n`` of ``train`` (both in row-major
    ``(u, i)`` order, the order `Observations` stores), and likewise for test;
    `fm_features` builds design row ``n`` from the same entry, so
    ``train.values``, ``train_frame["rating"]`` and the design's ``y`` agree
    element by element. Made by `split_p2`.

    Parameters
    ----------
    train, test : Observations
        Both shape (I, J), ``kind="real"`` (stars as real numbers, zeros kept);
        disjoint entries whose union is every rating. A user or item may have no
        training entry (it then has one only in ``test``).
    user_ids : numpy.ndarray, shape (I,), int64 (or object str for string ids)
        Original user ids, increasing: ``user_ids[u]`` is the id of index ``u``.
    item_ids : numpy.ndarray, shape (J,), int64 (or object str for string ids)
        Original item ids, increasing: ``item_ids[i]`` is the id of index ``i``.
    train_frame, test_frame : pandas.DataFrame
        The raw rows of each side: columns ``user``, ``item`` (original ids,
        int64 or strings), ``rating`` (float64), ``timestamp`` (int64), ``u``, ``i``
        (indices, int64); sorted by (``u``, ``i``), index 0 .. N-1.
    seed : int
        Seed of the permutation.
    test_fraction : float
        Fraction of ratings held out.

    Raises
    ------
    None of its own (a frozen dataclass; `user_index` / `item_index` raise ValueError for an
    unknown id).

    Source: 004_90693a0965f06816.txt, section 3.3.1 (the 90:10 split of the Gaussian models).
    """

    train: Observations
    test: Observations
    user_ids: np.ndarray
    item_ids: np.ndarray
    train_frame: pd.DataFrame
    test_frame: pd.DataFrame
    seed: int
    test_fraction: float



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

    Source: 004_90693a0965f06816.txt section 3.3.1 (protocol).
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


