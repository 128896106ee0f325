"""Held-out evaluation of any front-door model on the user's own data: `split`, then `evaluate`.

    from validation.frontdoor import api
    from validation.evaluation import holdout
    train, test = holdout.split(df, how="loo", seed=0, user_col="reader", item_col="book", value_col="stars")
    m = api.fit("hpf", train, K=10, seed=0, user_col="reader", item_col="book", value_col="stars")
    print(holdout.evaluate(m, test, N=(10, 20)))     # the model next to popularity on the same train data

`split` chooses the held-out entries (``how``):

- ``"loo"``: one entry per user, drawn uniformly (the P1 algorithm of
  `validation.data.splits.split_leave_one_out`, which it calls: 000_619a0297b9d686b2.txt sec. 6);
- ``"fraction"``: a random ``test_fraction`` of each user's entries (at least one, and at least one
  left in train; `_per_user_fraction`, a project addition: seed 004's P3 holds out 20 % of all
  entries, not of each user's);
- ``"time"``: each user's ``n_test`` latest entries by the timestamp column (project addition);
- ``"basket"``: one item of every basket of >= 2 distinct items
  (`validation.data.splits.split_leave_one_item_out_baskets`, which it calls).

Every user keeps at least one training entry; users with too few entries keep them all in train
and are not evaluated; a held-out entry whose item has no training entry left would be an item no
model (popularity included) can score, so it goes back to train. Both are counted in the split's
``summary`` (`describe` prints it). The result unpacks as ``train, test`` (DataFrames with the
input's own columns) and carries ``summary``; ``test.attrs`` holds the summary and the column names,
so `evaluate` needs no column arguments.

`evaluate` scores the fitted model's posterior-mean E[y_ui] and popularity (the number of training
entries of the item, `validation.evaluation.metrics.popularity_score_fn`) on the model's own training matrix
(``FittedModel.seen``) and computes, with `validation.evaluation.metrics`: recall@N and NDCG@N
(`metrics.holdout_metrics`: 004_90693a0965f06816.txt eqs. 5.22, 5.26-5.27, with the
``1/log2(k+1)`` discount), the rank score (`metrics.leave_one_out_metrics`: 000 eq. 12 / 003 eq.
20, per held-out entry against the user's candidates that are not held out, averaged per user then
over users) and, for rating models, RMSE
(`metrics.rmse`, 004 ch. 3-4; next to an item-mean baseline).

The front door delegates here: ``api.split = holdout.split``; ``FittedModel.evaluate(test, **kw)``
is ``holdout.evaluate(self, test, **kw)``.

Source: project addition (issue 24, "Evaluate on your own data"); the metrics' sources are above.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["HOWS", "HeldOut", "split", "evaluate", "model_metrics", "describe"]

#: the held-out protocols of `split`
HOWS = ("loo", "fraction", "time", "basket")

_SUMMARY_KEY = "holdout"
_COLUMNS_KEY = "holdout_columns"


class HeldOut(tuple):
    """What `split` returns: the pair ``(train, test)`` with the split's counts attached.

    A 2-tuple of DataFrames, so ``train, test = holdout.split(...)`` works; ``.train`` and ``.test`` name
    the two, ``.summary`` holds the counts (also in ``test.attrs["holdout"]``; `describe` prints them).

    Parameters
    ----------
    train : pandas.DataFrame
        The rows kept for fitting, in the input's own columns and order.
    test : pandas.DataFrame
        The held-out rows, same columns; ``attrs`` carries the summary and the column names for `evaluate`.
    summary : dict
        The split's counts (keys listed in `split`'s Returns).

    Raises
    ------
    None of its own (the parts are not checked; `split` builds it).

    Source: project addition (issue 24).
    """

    def __new__(cls, train: pd.DataFrame, test: pd.DataFrame, summary: dict):
        obj = super().__new__(cls, (train, test))
        obj.summary = summary
        return obj

    @property
    def train(self) -> pd.DataFrame:
        """The training rows (``self[0]``): fit the model on these.

        Returns
        -------
        pandas.DataFrame
            The input's columns, rows in input order.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self[0]

    @property
    def test(self) -> pd.DataFrame:
        """The held-out rows (``self[1]``): pass them to `evaluate`.

        Returns
        -------
        pandas.DataFrame
            The input's columns, rows in input order; ``attrs["holdout"]`` is the summary and
            ``attrs["holdout_columns"]`` the column names `evaluate` reads.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self[1]


# ------------------------------------------------------------------------------------------
# split


def _columns(df: pd.DataFrame, user_col, item_col, value_col, time_col) -> dict:
    """The roles of a DataFrame's columns: given names, else the front door's defaults
    (user, item, rating|value|count; timestamp when present). value None: one-class rows."""
    cols = list(df.columns)
    user = user_col if user_col is not None else ("user" if "user" in cols else None)
    item = item_col if item_col is not None else ("item" if "item" in cols else None)
    if user is None or item is None:
        raise ValueError(f"cannot tell the user and item columns of the DataFrame (columns {cols}); "
                         "pass user_col=..., item_col=... (and value_col=...)")
    value = value_col if value_col is not None else next((c for c in ("rating", "value", "count") if c in cols), None)
    time = time_col if time_col is not None else ("timestamp" if "timestamp" in cols else None)
    for role, name in (("user_col", user), ("item_col", item), ("value_col", value), ("time_col", time)):
        if name is not None and name not in cols:
            raise ValueError(f"{role}={name!r} is not a column of the DataFrame (columns {cols})")
    return {"user_col": user, "item_col": item, "value_col": value, "time_col": time}


def _canonical(data, user_col, item_col, value_col, time_col):
    """(rows, table, columns): the input as a DataFrame in its own columns (N rows), the canonical
    table of the same N rows in the same order (user, item, rating, timestamp) and the column roles."""
    import scipy.sparse as sp

    from custom_inference.data import Observations

    from validation.data import loaders

    if isinstance(data, Observations):
        data = data.to_scipy()
    if sp.issparse(data):
        table = loaders.ratings_from_scipy(data)
        return table[["user", "item", "rating"]], table, {"user_col": "user", "item_col": "item",
                                                          "value_col": "rating", "time_col": None}
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, a scipy.sparse matrix or an Observations, "
                        f"got {type(data).__name__}")
    cols = _columns(data, user_col, item_col, value_col, time_col)
    raw = pd.DataFrame({"user": data[cols["user_col"]].to_numpy(), "item": data[cols["item_col"]].to_numpy(),
                        "rating": (data[cols["value_col"]].to_numpy() if cols["value_col"] is not None
                                   else np.ones(len(data)))})
    if cols["time_col"] is not None:
        t = data[cols["time_col"]]
        raw["timestamp"] = t.astype("int64").to_numpy() if t.dtype.kind == "M" else t.to_numpy()
    table = loaders.ratings_from_dataframe(raw, timestamp="timestamp")
    return data.reset_index(drop=True), table, cols


def _codes(table: pd.DataFrame):
    """Contiguous user / item indices in increasing id order (`validation.data.splits.index_ratings`'s rule)."""
    user_ids, u = np.unique(table["user"].to_numpy(), return_inverse=True)
    item_ids, i = np.unique(table["item"].to_numpy(), return_inverse=True)
    return user_ids, np.asarray(u).reshape(-1), item_ids, np.asarray(i).reshape(-1)


def _refuse_duplicates(table: pd.DataFrame, u: np.ndarray, i: np.ndarray) -> None:
    key = u.astype(np.int64) * (int(i.max()) + 1) + i
    _, first, counts = np.unique(key, return_index=True, return_counts=True)
    if np.any(counts > 1):
        k = first[np.argmax(counts > 1)]
        raise ValueError(f"data: {int(np.sum(counts - 1))} repeated (user, item) pairs, e.g. user "
                         f"{table['user'].iat[k]!r} item {table['item'].iat[k]!r}: a held-out copy would also be in "
                         "train; deduplicate (or sum) them first")


def _positions(table: pd.DataFrame, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Row positions in ``table`` of the (user id, item id) pairs (each present exactly once)."""
    index = pd.MultiIndex.from_arrays([table["user"].to_numpy(), table["item"].to_numpy()])
    pos = index.get_indexer(pd.MultiIndex.from_arrays([users, items]))
    assert np.all(pos >= 0)
    return pos


def _per_user_fraction(u: np.ndarray, eligible: np.ndarray, order: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Held-out mask (N,) bool: of each user's ``n`` eligible rows (n >= 2), ``min(n - 1,
    max(1, round(fraction n)))`` chosen uniformly without replacement.

    ``u`` (N,) user indices; ``eligible`` (N,) bool; ``order`` (N,) a permutation listing the rows
    by (user, item) index, so the draw depends on the set of entries, not on the file's row order.
    One ``numpy.random.default_rng(seed).random`` key per eligible row in that order; a user's rows
    with the smallest keys are held out."""
    rows = order[eligible[order]]
    keys = np.random.default_rng(seed).random(rows.size)
    uu = u[rows]
    by = np.lexsort((keys, uu))  # by user, then key
    rows, uu = rows[by], uu[by]
    n = np.bincount(uu, minlength=int(u.max()) + 1)
    take = np.minimum(n - 1, np.maximum(1, np.round(fraction * n).astype(np.int64)))
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    rank = np.arange(rows.size) - start[uu]
    mask = np.zeros(u.size, dtype=bool)
    mask[rows[(rank < take[uu]) & (n[uu] >= 2)]] = True
    return mask


def _latest(u: np.ndarray, t: np.ndarray, eligible: np.ndarray, n_test: int) -> np.ndarray:
    """Held-out mask (N,) bool: each user's ``min(n_test, n - 1)`` eligible rows with the largest
    timestamps ``t`` (ties: the later row of the input is the later one)."""
    rows = np.flatnonzero(eligible)
    by = np.lexsort((rows, t[rows], u[rows]))  # by user, then time, then row
    rows = rows[by]
    uu = u[rows]
    n = np.bincount(uu, minlength=int(u.max()) + 1)
    end = np.cumsum(n)
    from_end = end[uu] - 1 - np.arange(rows.size)  # 0 for the user's latest row
    mask = np.zeros(u.size, dtype=bool)
    mask[rows[from_end < np.minimum(n_test, n - 1)[uu]]] = True
    return mask


def split(data, how: str = "loo", *, seed: int = 0, test_fraction: float = 0.2, n_test: int = 1,
          min_value: float | None = None, user_col=None, item_col=None, value_col=None, time_col=None) -> HeldOut:
    """Hold out entries of your data for `evaluate`: fit on ``train``, evaluate on ``test``.

    Every user keeps at least one training entry. Users with too few eligible entries keep them all in
    train and are not evaluated; a held-out entry whose item has no other eligible entry (an item no model
    fitted on train could score) goes back to train. Both are counted in ``summary``.

    Parameters
    ----------
    data : pandas.DataFrame, scipy.sparse matrix or custom_inference.data.Observations
        Your entries, each (user, item) pair once. A DataFrame has N rows with the columns named by
        ``user_col`` / ``item_col`` / ``value_col`` / ``time_col``, else ``user``, ``item``,
        ``rating`` | ``value`` | ``count``, ``timestamp`` (no value column: every row is a 1; ids may be
        ints or strings). A users x items sparse matrix or Observations: its N stored entries, the row and
        column indices as ids.
    how : {"loo", "fraction", "time", "basket"}, default "loo"
        Which entries are held out (`HOWS`):

        - ``"loo"``: one entry of each user with >= 2 eligible entries, drawn uniformly (exactly
          `validation.data.splits.split_leave_one_out` at threshold ``min_value``);
        - ``"fraction"``: of each user's n >= 2 eligible entries, ``min(n - 1, max(1, round(test_fraction
          n)))`` drawn uniformly;
        - ``"time"``: each user's ``min(n_test, n - 1)`` latest eligible entries by the time column (ties:
          the later input row counts as later);
        - ``"basket"``: rows are baskets (users) of items; one item of every basket of >= 2 distinct items
          with value > 0 (exactly `validation.data.splits.split_leave_one_item_out_baskets`).
    seed : int, default 0
        The same seed gives the same split (``numpy.random.default_rng(seed)``; "time" draws nothing).
    test_fraction : float in (0, 1), default 0.2
        Share of each user's eligible entries held out, for "fraction" (ignored otherwise).
    n_test : int >= 1, default 1
        Latest entries held out per user, for "time" (ignored otherwise).
    min_value : float, optional
        Only entries with value >= ``min_value`` may be held out (None: all); the other entries stay in
        train. A one-class model fitted with ``transform="binarize"`` at threshold t should be evaluated with
        ``min_value=t`` (the P1 protocol: positives held out). "basket" ignores it (eligible: value > 0).
    user_col : str, optional
        Column of the user ids of a DataFrame ``data`` (default ``user``).
    item_col : str, optional
        Column of the item ids (default ``item``).
    value_col : str, optional
        Column of the values (default the first of ``rating``, ``value``, ``count`` present, else none).
    time_col : str, optional
        Column of the timestamps, for "time" (default ``timestamp`` when present; numbers or datetimes).

    Returns
    -------
    HeldOut
        ``train, test``: DataFrames with the input's columns (sparse / Observations input: columns user,
        item, rating), rows in input order, disjoint, together all of ``data``. ``.summary`` (also
        ``test.attrs["holdout"]``) is a dict: how, seed, rows, users, items, train_rows, test_rows,
        test_users (users with a held-out entry), users_not_held_out (users without one: all their
        entries in train, not evaluated), users_too_few (of those, the users with fewer than two eligible
        entries; the others lost theirs to returned_to_train), not_eligible_rows (value < min_value),
        returned_to_train (held-out entries put back because their item had no other eligible entry),
        returned_items (those items), plus test_fraction / n_test / time_col for their protocols.
        ``test.attrs["holdout_columns"]`` names the columns for `evaluate`.

    Raises
    ------
    ValueError
        An unknown ``how``; ``test_fraction`` outside (0, 1) (for "fraction") or ``n_test`` not an
        integer >= 1 (for "time"); "time" without a time column or with every timestamp equal; a repeated
        (user, item) pair; user / item columns that cannot be told or a named column that does not exist;
        no rows or bad entries (NaN or non-integer numeric ids, NaN or non-numeric values:
        `validation.data.loaders.ratings_from_dataframe`); nothing to hold out (no user has two
        eligible entries whose items also occur elsewhere).
    TypeError
        ``data`` is not a DataFrame, a scipy.sparse matrix or an Observations.

    Source: project addition ("loo" and "basket" are the held-out-item protocol of
    000_619a0297b9d686b2.txt sec. 6 via `validation.data.splits`).
    """
    from validation.data import splits

    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(HOWS)}; got {how!r}")
    if how == "fraction" and not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    if how == "time" and (isinstance(n_test, bool) or int(n_test) != n_test or n_test < 1):
        raise ValueError(f"n_test must be an integer >= 1, got {n_test!r}")
    rows, table, cols = _canonical(data, user_col, item_col, value_col, time_col)
    user_ids, u, item_ids, i = _codes(table)
    _refuse_duplicates(table, u, i)
    values = table["rating"].to_numpy()
    eligible = np.ones(len(table), dtype=bool) if min_value is None else values >= float(min_value)
    if how == "basket":
        eligible = values > 0
    summary = {"how": how, "seed": int(seed)}
    if how == "loo":
        threshold = -np.inf if min_value is None else float(min_value)
        s = splits.split_leave_one_out(table, seed=seed, threshold=threshold)
        held = np.zeros(len(table), dtype=bool)
        held[_positions(table, s.indexed.user_ids[s.test_users], s.indexed.item_ids[s.test_items])] = True
    elif how == "basket":
        s = splits.split_leave_one_item_out_baskets(table, seed=seed)
        held = np.zeros(len(table), dtype=bool)
        held[_positions(table, s.indexed.user_ids[s.test_users], s.indexed.item_ids[s.test_items])] = True
    elif how == "fraction":
        held = _per_user_fraction(u, eligible, np.lexsort((i, u)), float(test_fraction), seed)
        summary["test_fraction"] = float(test_fraction)
    else:
        t = table["timestamp"].to_numpy()
        if cols["time_col"] is None or np.all(t == t[0]):
            raise ValueError("how='time' needs a timestamp column (time_col=...; CLI --time-col)"
                             if cols["time_col"] is None else
                             f"how='time': every timestamp in column {cols['time_col']!r} is {t[0]}, so nothing is "
                             "later than anything else (a file without a time column? time_col=...; CLI --time-col)")
        held = _latest(u, t, eligible, int(n_test))
        summary.update(n_test=int(n_test), time_col=cols["time_col"])
    # an item with no eligible training entry left (a binarizing fit drops the others) cannot be scored by
    # any model fitted on train: its held-out entries go back to train
    in_train = np.bincount(i[~held & eligible], minlength=item_ids.size) > 0
    cold = held & ~in_train[i]
    held &= ~cold
    if not held.any():
        raise ValueError(f"how={how!r}: nothing to hold out (no user has two eligible entries whose items "
                         "also occur elsewhere)")
    test_users = np.unique(u[held]).size
    too_few = int(np.sum(np.bincount(u[eligible], minlength=user_ids.size) < 2))
    summary.update(rows=int(len(table)), users=int(user_ids.size), items=int(item_ids.size),
                   train_rows=int((~held).sum()), test_rows=int(held.sum()), test_users=int(test_users),
                   users_not_held_out=int(user_ids.size - test_users), users_too_few=too_few,
                   not_eligible_rows=int((~eligible).sum()), returned_to_train=int(cold.sum()),
                   returned_items=int(np.unique(i[cold]).size))
    train, test = rows[~held], rows[held]
    test.attrs[_SUMMARY_KEY] = dict(summary)
    test.attrs[_COLUMNS_KEY] = {k: v for k, v in cols.items() if k != "time_col"}
    return HeldOut(train, test, summary)


def describe(summary: dict) -> list[str]:
    """Lines of text for a split's ``summary`` (`split`) or an evaluation's counts (`evaluate`).

    Parameters
    ----------
    summary : dict
        ``HeldOut.summary`` (or ``test.attrs["holdout"]``), or `evaluate`'s ``attrs["evaluation"]``
        (users, held_out, not_relevant, unknown_user, unknown_item).

    Returns
    -------
    list of str
        For a split: two to four lines (the protocol and sizes, the users not held out, then the rows not
        eligible and those returned to train when there are any); for evaluation counts: one line.

    Raises
    ------
    KeyError
        A dict of neither kind (a key of the kind it resembles is missing, or an unknown ``how``).

    Source: project addition.
    """
    if "train_rows" in summary:
        extra = {"fraction": f", {summary.get('test_fraction', 0):g} of each user's entries",
                 "time": f", each user's latest {summary.get('n_test', 1)} by {summary.get('time_col')!r}",
                 "loo": ", one entry per user", "basket": ", one item per basket"}[summary["how"]]
        who = "baskets" if summary["how"] == "basket" else "users"
        lines = [f"split: {summary['how']}{extra} (seed {summary['seed']}): {summary['rows']} rows, "
                 f"{summary['users']} {who} x {summary['items']} items; train {summary['train_rows']} rows, "
                 f"held out {summary['test_rows']} rows of {summary['test_users']} {who}",
                 f"not held out (all in train, not evaluated): {summary['users_not_held_out']} {who}, of which "
                 f"{summary['users_too_few']} with fewer than two eligible entries"]
        if summary["not_eligible_rows"]:
            lines.append(f"not eligible: {summary['not_eligible_rows']} rows below min_value (kept in train)")
        if summary["returned_to_train"]:
            lines.append(f"returned to train: {summary['returned_to_train']} held-out rows of "
                         f"{summary['returned_items']} items with no other eligible entry (no model could score them)")
        return lines
    return [f"evaluated: {summary['users']} users, {summary['held_out']} held-out entries; "
            f"skipped: {summary['not_relevant']} entries the model's transform drops (not positives), "
            f"{summary['unknown_user']} entries of users and {summary['unknown_item']} of items the model does not know"]


# ------------------------------------------------------------------------------------------
# evaluate


def _test_table(test, fitted, user_col, item_col, value_col) -> pd.DataFrame:
    from validation.data import loaders

    if not isinstance(test, pd.DataFrame):
        raise TypeError(f"test must be a pandas DataFrame (split's second value), got {type(test).__name__}")
    known = {"user_col": None, "item_col": None, "value_col": None, **test.attrs.get(_COLUMNS_KEY, {})}
    given = {k: v for k, v in (("user_col", user_col), ("item_col", item_col), ("value_col", value_col)) if v is not None}
    cols = _columns(test, **{**known, **given, "time_col": None})
    raw = pd.DataFrame({"user": test[cols["user_col"]].to_numpy(), "item": test[cols["item_col"]].to_numpy(),
                        "rating": (test[cols["value_col"]].to_numpy() if cols["value_col"] is not None
                                   else np.ones(len(test)))})
    return loaders.ratings_from_dataframe(raw, timestamp=None)


def _index_of(universe: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions of ``ids`` in ``universe`` (-1 where absent); int64 and str ids never match each other."""
    return pd.Index(np.asarray(universe, dtype=object)).get_indexer(np.asarray(ids, dtype=object))


def _model_score_fn(fitted, batch_cells: int):
    """``users (B,) int64 -> (B, J)`` posterior-mean E[y_ui] of every item (the mean that
    `FittedModel.recommend` ranks by), computed in blocks of at most ``batch_cells`` draw x cell values."""
    J = len(fitted.item_ids)

    def score_fn(users):
        users = np.asarray(users, dtype=np.int64)
        out = np.empty((users.size, J))
        S = None
        per = 1
        start = 0
        while start < users.size:
            block = users[start:start + per]
            draws = fitted._draw_means(np.repeat(block, J), np.tile(np.arange(J), block.size))
            out[start:start + block.size] = draws.reshape(draws.shape[0], block.size, J).mean(axis=0)
            if S is None:
                S = draws.shape[0]
                per = max(1, int(batch_cells // max(S * J, 1)))
            start += block.size
        return out

    return score_fn


def _item_mean_score_fn(seen):
    """Every user gets each item's mean training value (items without one: the global mean)."""
    coo = seen.tocoo()
    J = seen.shape[1]
    n = np.bincount(coo.col, minlength=J)
    total = np.bincount(coo.col, weights=coo.data, minlength=J)
    mean = np.where(n > 0, total / np.maximum(n, 1), coo.data.mean() if coo.nnz else 0.0)
    return lambda users: np.broadcast_to(mean, (np.asarray(users).size, J)).copy()


def _ranking(score_fn, train, users, items, N, batch_users):
    """Per evaluated user: recall@N and NDCG@N (`metrics.holdout_metrics`) and the mean rank score of
    the user's held-out entries (`metrics.leave_one_out_metrics`, one call per "round": the r-th held-out
    entry of every user, with the user's other held-out entries excluded from the candidates, so that a
    rank score compares each relevant item with the non-relevant ones only). ``train`` a CSR (I, J);
    one ``score_fn`` call per block of ``batch_users`` users."""
    from custom_inference.data import Observations

    from validation.evaluation import metrics
    from validation.data.splits import HoldoutSplit, ImplicitSplit

    I, J = train.shape
    order = np.lexsort((items, users))
    users, items = users[order], items[order]
    todo = np.unique(users)
    parts = []
    for start in range(0, todo.size, batch_users):
        block = todo[start:start + batch_users]
        lo, hi = np.searchsorted(users, block[0], "left"), np.searchsorted(users, block[-1], "right")
        bu, bi = users[lo:hi], items[lo:hi]
        scores = np.asarray(score_fn(block), dtype=np.float64)
        where = np.full(I, -1, dtype=np.int64)
        where[block] = np.arange(block.size)
        fn = lambda us, s=scores, w=where: s[w[np.asarray(us)]]  # noqa: E731
        sub = train[block].tocoo()  # only the block's rows are read by the metrics
        tr_u, tr_i = block[sub.row], sub.col
        mk = lambda r, c: Observations.from_coo(r, c, np.ones(r.size), (I, J), kind="binary")  # noqa: E731
        tr, test = mk(tr_u, tr_i), mk(bu, bi)
        part = None
        for n in N:
            pu = metrics.holdout_metrics(fn, HoldoutSplit(tr, test, None), p=n, batch_size=block.size,
                                         discount="log2(k+1)")
            cols = pu[["user", "recall", "ndcg"]].rename(columns={"recall": f"recall@{n}", "ndcg": f"ndcg@{n}"})
            part = cols if part is None else part.merge(cols, on="user")
        first = np.searchsorted(bu, bu, "left")
        rnd = np.arange(bu.size) - first  # 0 for the user's first held-out entry, 1 for the second, ...
        rs = []
        for r in range(int(rnd.max()) + 1):
            now = rnd == r
            others = mk(np.concatenate([tr_u, bu[~now]]), np.concatenate([tr_i, bi[~now]]))
            rs.append(metrics.leave_one_out_metrics(fn, ImplicitSplit(others, bu[now], bi[now], None), n=1,
                                                    batch_size=int(now.sum()))[["user", "rank_score"]])
        rs = pd.concat(rs).groupby("user", sort=True)["rank_score"].mean()
        parts.append(part.merge(pd.DataFrame({"user": rs.index.to_numpy(), "rank_score": rs.to_numpy()}), on="user"))
    return pd.concat(parts, ignore_index=True)


def _ease_system(train, N, seed):
    """EASE^R on the model's training pattern (binary Observations), lambda by validation HR@N[0] on one
    training entry per user held out (`validation.evaluation.baselines.ease_system`): (score_fn, None), or
    (None, reason) when it is skipped (J above the bound)."""
    from validation.evaluation import baselines

    try:
        return baselines.ease_system(n=N[0])(train, seed), None
    except baselines.SkippedSystem as e:
        return None, str(e)


def evaluate(fitted, test, *, N=(10, 20), user_col=None, item_col=None, value_col=None,
             batch_cells: int = 500_000, batch_users: int | None = None, ease: bool = True,
             seed: int | None = None) -> pd.DataFrame:
    """Held-out metrics of a fitted model next to popularity and EASE^R fitted on the same training data.

    Scores the model's posterior-mean E[y_ui] of every item for each evaluated user (the mean that
    ``recommend`` ranks by) and compares it with the baselines on the same users, with standard errors
    and paired bootstrap intervals (`validation.evaluation.intervals`). The scores take O(batch_users x J)
    memory, never a users x items array; EASE^R's two J x J float64 matrices are the largest arrays
    (8 J^2 bytes each, at most `validation.evaluation.baselines.EASE_MAX_ITEMS` items).

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        The model, fitted on ``split``'s train (or on any data disjoint from ``test``): I users x J items,
        its training entries ``fitted.seen`` (I, J).
    test : pandas.DataFrame
        Held-out (user, item[, value]) rows in your own ids (``split``'s second value; its ``attrs`` name
        the columns, else ``user_col`` / ``item_col`` / ``value_col`` or the defaults user, item,
        rating | value | count). The model's value transform (``settings``: transform, threshold) is applied
        first: for one-class and count models the rows it maps to 0 are not relevant (not positives) and
        are skipped; rows of users or items the model does not know are skipped (all counted in
        ``attrs["evaluation"]``).
    N : int or sequence of int >= 1, default (10, 20)
        The cut-offs of recall@N and NDCG@N (sorted, repeats dropped).
    user_col : str, optional
        Column of the user ids of ``test`` when its ``attrs`` do not name it.
    item_col : str, optional
        Column of the item ids, likewise.
    value_col : str, optional
        Column of the values, likewise.
    batch_cells : int, default 500_000
        Bound on the draw x cell values of one block of model scores (memory: ~ 8 batch_cells K bytes for
        dot-product models).
    batch_users : int, optional
        Users per block of scores (default ``max(1, 4_000_000 // J)``; memory O(batch_users J)).
    ease : bool, default True
        Add the EASE^R row (`validation.evaluation.baselines.ease_system` on the binarized training entries
        ``fitted.seen``: lambda chosen by HR@N[0] on one training entry per user held out of them, never on
        ``test``; skipped, with the reason in ``attrs["notes"]``, above
        `validation.evaluation.baselines.EASE_MAX_ITEMS` items).
    seed : int, optional
        Seed of EASE^R's validation split (default the fit's ``settings["seed"]``, else 0).

    Returns
    -------
    pandas.DataFrame
        One row per system: ``system`` (the model's name, ``"popularity"``, ``"ease"`` (EASE^R) and, for
        rating models, ``"item mean"``: each item's mean training value), then

        - ``recall@N``, ``ndcg@N`` per N (float64, means over the evaluated users: relevant = the user's
          held-out entries, candidates = the items not in the user's training entries, ties broken by the
          smaller item index);
        - ``rank_score`` (for each held-out entry, the fraction of the user's other candidates that are
          not held out scored strictly below it; averaged over the user's held-out entries, then over
          users; 0.5 is random, 1 every held-out item above every other candidate);
        - ``rmse`` (rating models: of the posterior-mean prediction of each held-out value; NaN otherwise
          and for popularity and EASE^R);
        - ``users``, ``held_out`` (int: users and entries evaluated);
        - ``<metric>_se``: the standard error over the evaluated users of every metric (RMSE's: bootstrap,
          it pools ratings);
        - against the better of popularity and EASE^R by recall@N (the smallest N): ``vs``, ``diff``
          (recall@N, system - baseline), ``ci_low``, ``ci_high`` (95 % paired bootstrap interval over the
          same users) and ``verdict`` ("better" / "worse" only when the interval excludes 0).

        ``attrs``: ``"evaluation"`` (counts: users, held_out, not_relevant, unknown_user, unknown_item,
        test_rows; `describe` prints them), ``"split"`` (the test's split summary, if any), ``"N"``,
        ``"differences"`` (list of dicts: system, baseline, metric, diff, ci_low, ci_high, verdict, for
        every metric; RMSE against the item mean), ``"ease"`` (dict: setting (the chosen lambda) and curve
        (list of dicts: the validation search), or reason when skipped), ``"notes"`` (list of str).

    Raises
    ------
    ValueError
        ``N`` not positive integers; a test entry that is one of the model's training entries (a leak:
        evaluate on data the model was not fitted on); no test entry left to evaluate; user / item columns
        that cannot be told or do not exist; no rows or bad test entries (NaN or non-integer numeric ids,
        NaN or non-numeric values: `validation.data.loaders.ratings_from_dataframe`), or what the model's
        transform refuses.
    TypeError
        ``test`` is not a DataFrame.

    Source: project addition (the harness), computing recall@N and NDCG@N of 004_90693a0965f06816.txt
    sec. 5.4.4 eqs. (5.22), (5.26)-(5.27) (discount 1/log2(k+1)), the rank score of
    000_619a0297b9d686b2.txt eq. (12) / 003_203f63200c0d7157.txt eq. (20) and RMSE (004 chs. 3-4),
    all through `validation.evaluation.metrics`; popularity is 000 sec. 6's baseline.
    """
    from validation.evaluation import intervals, metrics

    N = _cutoffs(N)
    kind = fitted.adapter.values
    u, i, truth, seen, train, counts = _prepare(fitted, test, user_col, item_col, value_col)
    J = seen.shape[1]
    batch_users = batch_users or max(1, 4_000_000 // max(J, 1))
    systems = {fitted.model: _model_score_fn(fitted, batch_cells), "popularity": metrics.popularity_score_fn(train)}
    notes, ease_info = [], {}
    if ease:
        fn, reason = _ease_system(train, N, int(fitted.settings.get("seed", 0)) if seed is None else int(seed))
        if fn is None:
            notes.append(reason)
            ease_info["reason"] = reason
        else:
            systems["ease"] = fn
            ease_info.update(setting=fn.setting, curve=fn.tuning.to_dict("records"))
    if kind == "real":
        systems["item mean"] = _item_mean_score_fn(seen)
    rows, per_user, sq = [], {}, {}
    for name, fn in systems.items():
        pu = _ranking(fn, seen, u, i, N, batch_users)
        per_user[name] = pu
        row = {"system": name}
        for n in N:
            row[f"recall@{n}"] = float(pu[f"recall@{n}"].mean())
            row[f"ndcg@{n}"] = float(pu[f"ndcg@{n}"].mean())
        row["rank_score"] = float(pu["rank_score"].mean())
        row["rmse"] = np.nan
        if kind == "real" and name in (fitted.model, "item mean"):  # popularity, EASE^R: no rating scale
            pred = _predict_means(fitted, u, i) if name == fitted.model else fn(np.zeros(1, dtype=np.int64))[0][i]
            row["rmse"] = metrics.rmse(pred, truth)
            sq[name] = intervals.squared_errors(u, pred, truth)
        row["users"] = int(len(pu))
        row["held_out"] = int(u.size)
        rows.append(row)
    out = pd.DataFrame(rows)
    ranking = [m for n in N for m in (f"recall@{n}", f"ndcg@{n}")] + ["rank_score"]
    comp = intervals.compare(per_user, ranking, main=f"recall@{N[0]}", baselines=("popularity", "ease"))
    out = intervals.annotate(out, comp)
    diffs = comp.differences
    notes.insert(0, comp.note() + f"; diff / ci_low / ci_high / verdict: recall@{N[0]}")
    if len(sq) == 2:
        rc = intervals.compare(sq, ["rmse"], main="rmse", baselines=("item mean",), lower_is_better=("rmse",),
                               rmse={"rmse": "n_ratings"})
        out["rmse_se"] = out["system"].map(rc.summary.set_index("system")["rmse_se"])
        diffs = pd.concat([diffs, rc.differences], ignore_index=True)
        notes.append("RMSE: " + rc.note().split("; _se")[0] + " (RMSE pools the held-out ratings: its _se is the "
                     "bootstrap one)")
    counts.update(users=int(np.unique(u).size), held_out=int(u.size))
    out.attrs.update(evaluation=counts, N=N, differences=diffs.to_dict("records"), ease=ease_info, notes=notes)
    if _SUMMARY_KEY in test.attrs:
        out.attrs["split"] = dict(test.attrs[_SUMMARY_KEY])
    return out


def _cutoffs(N) -> tuple:
    """The cut-offs as a sorted tuple of distinct ints >= 1 (ValueError otherwise)."""
    N = (N,) if isinstance(N, (int, np.integer)) and not isinstance(N, bool) else tuple(N)
    if not N or any(isinstance(n, bool) or int(n) != n or n < 1 for n in N):
        raise ValueError(f"N must be positive integers, got {N!r}")
    return tuple(sorted({int(n) for n in N}))


def _prepare(fitted, test, user_col, item_col, value_col):
    """(u, i, truth, seen, train, counts) of a test DataFrame against a fitted model: the M evaluated
    held-out entries as model indices u, i (int (M,)) with their values ``truth`` (float (M,), after the
    model's transform), the model's training entries ``seen`` (CSR (I, J)), the same as binary
    Observations ``train`` (popularity's and EASE^R's input) and the skip counts (`evaluate`'s
    ``attrs["evaluation"]`` less users / held_out). Raises as `evaluate`."""
    from custom_inference.data import Observations

    from validation.data import loaders

    table = _test_table(test, fitted, user_col, item_col, value_col)
    n_rows = len(table)
    settings = fitted.settings
    table = loaders.values_for(table, fitted.adapter.values, settings.get("transform", "none"),
                               float(settings.get("threshold", 4.0)))
    not_relevant = n_rows - len(table)
    u = _index_of(fitted.user_ids, table["user"].to_numpy())
    i = _index_of(fitted.item_ids, table["item"].to_numpy())
    known = (u >= 0) & (i >= 0)
    counts = {"test_rows": int(n_rows), "not_relevant": int(not_relevant), "unknown_user": int((u < 0).sum()),
              "unknown_item": int(((u >= 0) & (i < 0)).sum())}
    u, i, truth = u[known], i[known], table["rating"].to_numpy()[known]
    if u.size == 0:
        raise ValueError(f"test: no entry left to evaluate ({describe({**counts, 'users': 0, 'held_out': 0})[0]})")
    seen = fitted.seen.tocsr()
    hits = _in_seen(seen, u, i)
    if hits.any():
        k = int(np.flatnonzero(hits)[0])
        raise ValueError(f"test: {int(hits.sum())} held-out entries are training entries of the model, e.g. user "
                         f"{fitted.user_ids[u[k]]!r} item {fitted.item_ids[i[k]]!r}: evaluate on entries the model "
                         "was not fitted on (holdout.split's test)")
    coo = seen.tocoo()
    train = Observations.from_coo(coo.row, coo.col, np.ones(coo.nnz), seen.shape, kind="binary")
    return u, i, truth, seen, train, counts


def model_metrics(fitted, test, *, N=(10, 20), user_col=None, item_col=None, value_col=None,
                  batch_cells: int = 500_000, batch_users: int | None = None, per_user: bool = False):
    """The fitted model's own row of `evaluate` (no baselines, no intervals).

    What model selection scores each grid point by (`validation.evaluation.selection`).

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        As `evaluate`.
    test : pandas.DataFrame
        As `evaluate`.
    N : int or sequence of int >= 1, default (10, 20)
        As `evaluate`.
    user_col : str, optional
        As `evaluate`.
    item_col : str, optional
        As `evaluate`.
    value_col : str, optional
        As `evaluate`.
    batch_cells : int, default 500_000
        As `evaluate`.
    batch_users : int, optional
        As `evaluate`.
    per_user : bool, default False
        Also return the per-user table.

    Returns
    -------
    dict or (dict, pandas.DataFrame)
        The dict: ``recall@N``, ``ndcg@N`` per N and ``rank_score`` (float, means over the evaluated users,
        computed exactly as `evaluate` computes them), with ``<metric>_se`` (std(ddof=1) over users /
        sqrt(users); NaN for one user); ``rmse`` (rating models, else NaN; ``rmse_se``: NaN, RMSE pools
        ratings); ``users``, ``held_out`` (int). With ``per_user``: ``(dict, DataFrame)``, the DataFrame one
        row per evaluated user (``user``: the model's user index, and the ranking metrics), for paired
        comparisons.

    Raises
    ------
    ValueError
        As `evaluate`: bad ``N``, a test entry the model was fitted on, nothing to evaluate, columns or
        values it refuses.
    TypeError
        ``test`` is not a DataFrame.

    Source: project addition (issue 27 item 2), the metrics of `evaluate` (004 eqs. 5.22, 5.26-5.27; 000 eq. 12).
    """
    from validation.evaluation import metrics

    N = _cutoffs(N)
    u, i, truth, seen, _, _ = _prepare(fitted, test, user_col, item_col, value_col)
    batch_users = batch_users or max(1, 4_000_000 // max(seen.shape[1], 1))
    pu = _ranking(_model_score_fn(fitted, batch_cells), seen, u, i, N, batch_users)
    out = {}
    for col in [m for n in N for m in (f"recall@{n}", f"ndcg@{n}")] + ["rank_score"]:
        x = pu[col].to_numpy(dtype=float)
        out[col] = float(x.mean())
        out[f"{col}_se"] = float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")
    out["rmse"] = metrics.rmse(_predict_means(fitted, u, i), truth) if fitted.adapter.values == "real" else float("nan")
    out["rmse_se"] = float("nan")
    out.update(users=int(len(pu)), held_out=int(u.size))
    return (out, pu) if per_user else out


def _in_seen(seen, u: np.ndarray, i: np.ndarray) -> np.ndarray:
    """(M,) bool: whether each (u, i) is a stored entry of ``seen`` (I, J) (explicit zeros included)."""
    coo = seen.tocoo()
    J = seen.shape[1]
    return np.isin(u.astype(np.int64) * J + i, coo.row.astype(np.int64) * J + coo.col)


def _predict_means(fitted, u: np.ndarray, i: np.ndarray, chunk: int = 2000) -> np.ndarray:
    """Posterior means of E[y] at the (u, i) index pairs, through `FittedModel.predict` in chunks."""
    out = np.empty(u.size)
    for start in range(0, u.size, chunk):
        pairs = pd.DataFrame({"user": fitted.user_ids[u[start:start + chunk]],
                              "item": fitted.item_ids[i[start:start + chunk]]})
        out[start:start + len(pairs)] = fitted.predict(pairs)["mean"].to_numpy()
    return out
