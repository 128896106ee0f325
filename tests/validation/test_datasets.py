"""Tests of the MovieLens loaders, re-indexing, the P1/P3 splits and data location, through
``validation.data.datasets`` (which re-exports `validation.data.loaders` and `validation.data.splits`).
The new loaders (baskets, delimited files, `load`, transforms, fuzzing) are tested in
test_loaders.py."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from custom_inference.data import Observations
from validation.data import datasets as ds
from validation.data.datasets import (
    HoldoutSplit,
    ImplicitSplit,
    dense_submatrix,
    fetch_movielens_100k,
    find_movielens_100k,
    index_ratings,
    load_movielens,
    ratings_from_dataframe,
    ratings_from_scipy,
    split_leave_one_out,
    split_random_holdout,
    to_observations,
)

# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


# A small ratings table with unordered, non-contiguous ids and a half star.
SMALL = pd.DataFrame(
    {
        "user": [30, 10, 20, 10, 30, 20, 10],
        "item": [7, 5, 100, 7, 5, 7, 100],
        "rating": [4.0, 3.5, 1.0, 5.0, 2.0, 4.0, 3.0],
        "timestamp": [1000, 1001, 1002, 1003, 1004, 1005, 1006],
    }
)


def _write_three_formats(tmp_path: Path, df: pd.DataFrame) -> dict[str, Path]:
    paths = {}
    for fmt in ("u.data", "ratings.dat", "ratings.csv"):
        d = tmp_path / fmt.replace(".", "_")
        d.mkdir()
        p = d / fmt
        lines = []
        if fmt == "ratings.csv":
            lines.append("userId,movieId,rating,timestamp")
        sep = {"u.data": "\t", "ratings.dat": "::", "ratings.csv": ","}[fmt]
        for r in df.itertuples(index=False):
            rating = f"{r.rating:g}"
            lines.append(sep.join([str(r.user), str(r.item), rating, str(r.timestamp)]))
        p.write_text("\n".join(lines) + "\n")
        paths[fmt] = p
    return paths


# ---------------------------------------------------------------------------
# loaders
# ---------------------------------------------------------------------------


def test_three_movielens_formats_give_identical_frames(tmp_path):
    paths = _write_three_formats(tmp_path, SMALL)
    frames = {}
    for fmt, p in paths.items():
        by_file = load_movielens(p)
        by_dir = load_movielens(p.parent)
        pd.testing.assert_frame_equal(by_file, by_dir)
        frames[fmt] = by_file
    for fmt, f in frames.items():
        assert list(f.columns) == ["user", "item", "rating", "timestamp"], fmt
        assert [str(t) for t in f.dtypes] == ["int64", "int64", "float64", "int64"], fmt
        pd.testing.assert_frame_equal(f, SMALL, check_dtype=True)


def test_format_sniffed_from_first_line(tmp_path):
    p = tmp_path / "my_ratings.txt"
    p.write_text("1::2::3::4\n5::6::1.5::7\n")
    f = load_movielens(p)
    assert f["user"].tolist() == [1, 5]
    assert f["item"].tolist() == [2, 6]
    assert f["rating"].tolist() == [3.0, 1.5]
    assert f["timestamp"].tolist() == [4, 7]


def test_csv_without_timestamp_gets_zero(tmp_path):
    p = tmp_path / "ratings.csv"
    p.write_text("userId,movieId,rating\n1,2,4.5\n3,4,1\n")
    f = load_movielens(p)
    assert f["timestamp"].tolist() == [0, 0]
    assert f["rating"].tolist() == [4.5, 1.0]


def test_directory_prefers_u_data(tmp_path):
    (tmp_path / "u.data").write_text("1\t2\t3\t4\n")
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n9,9,9,9\n")
    assert load_movielens(tmp_path)["user"].tolist() == [1]


def test_missing_path_raises_file_not_found_naming_it(tmp_path):
    missing = tmp_path / "nope" / "u.data"
    with pytest.raises(FileNotFoundError) as e:
        load_movielens(missing)
    assert str(missing) in str(e.value)
    assert "fetch_movielens_100k" in str(e.value)


def test_directory_without_ratings_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="u.data"):
        load_movielens(tmp_path)


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("ratings.csv", "userId,movieId,rating,timestamp\n1,2,,4\n", "rating"),
        ("ratings.csv", "a,b,c\n1,2,3\n", "header"),
        ("u.data", "1\t2\t3\t4\t5\n", "fields"),
        ("u.data", "1\t2.5\t3\t4\n", "integer"),
        ("ratings.dat", "1::2::x::4\n", "rating"),
        ("u.data", "", "empty"),
    ],
)
def test_bad_files_raise_value_error(tmp_path, name, text, match):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_movielens(p)


def test_ratings_from_dataframe_custom_columns():
    df = pd.DataFrame({"uid": [3, 1], "mid": [10.0, 20.0], "stars": [4, 2]})
    f = ratings_from_dataframe(df, user="uid", item="mid", value="stars")
    assert f["user"].tolist() == [3, 1]
    assert f["item"].tolist() == [10, 20]
    assert f["rating"].dtype == np.float64 and f["rating"].tolist() == [4.0, 2.0]
    assert f["timestamp"].tolist() == [0, 0]
    f2 = ratings_from_dataframe(SMALL)
    pd.testing.assert_frame_equal(f2, SMALL)


@pytest.mark.parametrize(
    "df, kwargs, match",
    [
        (pd.DataFrame({"user": [1], "item": [2]}), {}, "value='rating'"),
        (pd.DataFrame({"u": [1], "item": [2], "rating": [1.0]}), {}, "user='user'"),
        (pd.DataFrame({"user": [1, 2], "item": [2, 3], "rating": [1.0, np.nan]}), {}, "rating"),
        (pd.DataFrame({"user": [1, np.nan], "item": [2, 3], "rating": [1.0, 2.0]}), {}, "user"),
        (pd.DataFrame({"user": [1, 2], "item": [2.5, 3], "rating": [1.0, 2.0]}), {}, "integer"),
        (pd.DataFrame({"user": [1], "item": [2], "rating": [np.inf]}), {}, "rating"),
    ],
)
def test_ratings_from_dataframe_errors(df, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ratings_from_dataframe(df, **kwargs)


def test_ratings_from_dataframe_rejects_non_frame():
    with pytest.raises(ValueError, match="DataFrame"):
        ratings_from_dataframe({"user": [1]})


def test_ratings_from_scipy():
    # a CSR made from a COO with duplicates (tocsr sums them; a COO with duplicates is refused:
    # test_bad_input_audit.py), explicit zeros dropped, row -> user, col -> item
    m = sp.coo_matrix(([2.0, 3.0, 0.0, 1.0, 1.0], ([2, 0, 1, 2, 0], [1, 3, 0, 1, 0])), shape=(4, 5))
    f = ratings_from_scipy(m.tocsr())
    assert f["user"].tolist() == [0, 0, 2]
    assert f["item"].tolist() == [0, 3, 1]
    assert f["rating"].tolist() == [1.0, 3.0, 3.0]
    assert f["timestamp"].tolist() == [0, 0, 0]
    # the same as going through a DataFrame
    g = ratings_from_dataframe(pd.DataFrame({"user": [0, 0, 2], "item": [0, 3, 1], "rating": [1, 3, 3]}))
    pd.testing.assert_frame_equal(f, g)


def test_ratings_from_scipy_errors():
    with pytest.raises(ValueError, match="scipy.sparse"):
        ratings_from_scipy(np.eye(3))
    with pytest.raises(ValueError, match="NaN"):
        ratings_from_scipy(sp.csr_matrix(np.array([[np.nan, 1.0]])))


# ---------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------


def test_index_ratings_order_and_round_trip():
    ix = index_ratings(SMALL)
    np.testing.assert_array_equal(ix.user_ids, [10, 20, 30])
    np.testing.assert_array_equal(ix.item_ids, [5, 7, 100])
    assert (ix.n_users, ix.n_items) == (3, 3)
    f = ix.frame
    # sorted by (u, i), contiguous from 0
    assert list(zip(f.u, f.i)) == sorted(zip(f.u, f.i))
    assert f.u.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert f.i.tolist() == [0, 1, 2, 1, 2, 0, 1]
    # user 10 rated item 5 -> 3.5, item 7 -> 5.0, item 100 -> 3.0
    assert f.rating.tolist()[:3] == [3.5, 5.0, 3.0]
    # the round trip recovers every original (user, item, rating)
    back = set(zip(ix.user_ids[f.u], ix.item_ids[f.i], f.rating))
    assert back == set(zip(SMALL.user, SMALL.item, SMALL.rating))
    np.testing.assert_array_equal(ix.user_index([30, 10]), [2, 0])
    np.testing.assert_array_equal(ix.item_index([100]), [2])
    with pytest.raises(ValueError, match="not in the data"):
        ix.user_index([11])


def test_index_ratings_with_string_ids_maps_back():
    df = pd.DataFrame({"user": ["u2", "u10", "u2", "a"], "item": [7, 5, 5, 7], "rating": [1.0, 2.0, 3.0, 4.0]})
    t = ratings_from_dataframe(df)
    assert t["user"].tolist() == ["u2", "u10", "u2", "a"] and t["item"].dtype == np.int64
    ix = index_ratings(t)
    assert ix.user_ids.tolist() == ["a", "u10", "u2"]  # lexicographic order
    assert ix.user_ids.dtype == object and ix.item_ids.dtype == np.int64
    f = ix.frame
    back = set(zip(ix.user_ids[f.u].tolist(), ix.item_ids[f.i].tolist(), f.rating.tolist()))
    assert back == set(zip(df.user, df.item, df.rating))
    np.testing.assert_array_equal(ix.user_index(["u2", "a"]), [2, 0])
    np.testing.assert_array_equal(ix.user_index(np.array(["u10"])), [1])
    with pytest.raises(ValueError, match="not in the data"):
        ix.user_index(["u3"])
    with pytest.raises(ValueError, match="strings"):
        ix.user_index([2])  # an integer among string ids
    with pytest.raises(ValueError, match="int64"):
        ix.item_index(["7"])  # a string among integer ids
    # string ids of integers that fit int64 become int64; others (or beyond int64) stay strings
    assert ratings_from_dataframe(df.assign(user=["1", "2", "3", "4"]))["user"].dtype == np.int64
    big = df.assign(user=np.array([2**63, 1, 2, 3], dtype=np.uint64))
    assert ratings_from_dataframe(big)["user"].tolist() == [str(2**63), "1", "2", "3"]
    with pytest.raises(ValueError, match="too large"):
        ratings_from_dataframe(df.assign(user=[1e19, 1.0, 2.0, 3.0]))
    # the splits run on string ids too
    s = split_leave_one_out(df.assign(rating=5.0), seed=0)
    assert s.indexed.user_ids.tolist() == ["a", "u10", "u2"] and s.test_users.tolist() == [2]


def test_index_ratings_ignores_row_order():
    a = index_ratings(SMALL)
    b = index_ratings(SMALL.sample(frac=1.0, random_state=3))
    pd.testing.assert_frame_equal(a.frame, b.frame)
    np.testing.assert_array_equal(a.user_ids, b.user_ids)


def test_index_ratings_errors():
    with pytest.raises(ValueError, match="duplicate"):
        index_ratings(pd.DataFrame({"user": [1, 1], "item": [2, 2], "rating": [1.0, 2.0]}))
    with pytest.raises(ValueError, match="rating"):
        index_ratings(pd.DataFrame({"user": [1], "item": [2]}))


def test_to_observations():
    ix = index_ratings(SMALL.assign(rating=[4.0, 3.0, 1.0, 5.0, 2.0, 4.0, 3.0]))
    obs = to_observations(ix)
    assert isinstance(obs, Observations)
    assert obs.shape == (3, 3) and obs.nnz == 7
    dense = obs.to_dense()
    assert dense[0, 1] == 5.0  # user 10, item 7
    assert dense[2, 0] == 2.0  # user 30, item 5
    assert dense[1, 0] == 0.0  # user 20 did not rate item 5
    with pytest.raises(ValueError, match="shape"):
        to_observations(ix.frame)
    # half stars are not counts
    with pytest.raises(ValueError, match="integer"):
        to_observations(index_ratings(SMALL))
    assert to_observations(index_ratings(SMALL), kind="real", dtype=np.float32).values.dtype == np.float32


# ---------------------------------------------------------------------------
# data location and fetch
# ---------------------------------------------------------------------------


def test_find_uses_env_var_first(tmp_path, monkeypatch):
    d = tmp_path / "ml-100k"
    d.mkdir()
    (d / "u.data").write_text("1\t2\t3\t4\n")
    monkeypatch.setenv("FACTORBAYES_DATA_DIR", str(tmp_path))
    assert find_movielens_100k() == d


def test_find_falls_back_to_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FACTORBAYES_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "factorbayes" / "ml-100k"
    cached.mkdir(parents=True)
    (cached / "u.data").write_text("1\t2\t3\t4\n")
    repo_root = Path(__file__).resolve().parents[2]  # tests/validation/<this file>
    shared = repo_root.parent / "shared" / "data" / "ml-100k"
    expected = shared if (shared / "u.data").is_file() else cached
    assert find_movielens_100k() == expected
    assert ds.user_cache_dir() == tmp_path / "cache" / "factorbayes"


def test_fetch_returns_cached_copy_without_network(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("must not download")

    monkeypatch.setattr(ds, "_fetch_grouplens", boom)
    monkeypatch.setattr(ds, "_fetch_recbole", boom)
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "u.data").write_text("1\t2\t3\t4\n")
    assert fetch_movielens_100k(tmp_path) == tmp_path / "ml-100k"


def test_fetch_reports_both_failures(tmp_path, monkeypatch):
    def fail(name):
        def f(*a, **k):
            raise OSError(f"{name} unreachable")

        return f

    monkeypatch.setattr(ds, "_fetch_grouplens", fail("grouplens"))
    monkeypatch.setattr(ds, "_fetch_recbole", fail("pypi"))
    with pytest.raises(RuntimeError) as e:
        fetch_movielens_100k(tmp_path)
    assert "grouplens unreachable" in str(e.value) and "pypi unreachable" in str(e.value)
    assert not (tmp_path / "ml-100k").exists()


def test_recbole_inter_conversion_reorders_by_header():
    text = "rating:float\tuser_id:token\ttimestamp:float\titem_id:token\n3\t196\t881250949\t242\n"
    assert ds._inter_to_udata(text) == "196\t242\t3\t881250949\n"


@pytest.mark.slow
def test_fetch_movielens_100k_matches_shared_copy(tmp_path, ml100k):
    d = fetch_movielens_100k(tmp_path)
    assert d == tmp_path / "ml-100k"
    fetched = load_movielens(d / "u.data")
    assert len(fetched) == 100_000
    key = ["user", "item", "rating", "timestamp"]
    assert set(map(tuple, fetched[key].to_numpy())) == set(map(tuple, ml100k[key].to_numpy()))


# ---------------------------------------------------------------------------
# real data
# ---------------------------------------------------------------------------


def test_movielens_100k_sizes(ml100k):
    assert len(ml100k) == 100_000
    assert ml100k["user"].nunique() == 943 and ml100k["item"].nunique() == 1682
    assert set(np.unique(ml100k["rating"])) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert ml100k.groupby("user").size().min() == 20  # README: every user rated at least 20


# ---------------------------------------------------------------------------
# P1: leave one out
# ---------------------------------------------------------------------------


def _positives(df, threshold=4.0):
    ix = index_ratings(df)
    f = ix.frame[ix.frame.rating >= threshold]
    return set(zip(f.u.tolist(), f.i.tolist())), ix


def _check_p1(split: ImplicitSplit, df, threshold=4.0):
    positives, ix = _positives(df, threshold)
    assert split.n_users == ix.n_users and split.n_items == ix.n_items
    train = set(zip(np.asarray(split.train.rows).tolist(), np.asarray(split.train.cols).tolist()))
    test = list(zip(split.test_users.tolist(), split.test_items.tolist()))
    assert np.all(np.asarray(split.train.values) == 1.0)
    # exactly one test item per user with >= 2 positives
    n_pos = pd.Series([u for u, _ in positives]).value_counts()
    eligible = sorted(n_pos[n_pos >= 2].index.tolist())
    assert split.test_users.tolist() == eligible
    assert len(set(split.test_users.tolist())) == len(test)
    # test items are positives not in train, and train + test = all positives
    assert set(test) <= positives
    assert not (set(test) & train)
    assert train | set(test) == positives
    assert len(train) + len(test) == len(positives)


def test_p1_small_by_hand():
    df = pd.DataFrame(
        {
            "user": [1, 1, 1, 2, 2, 3, 3, 3],
            "item": [10, 20, 30, 10, 40, 20, 30, 40],
            "rating": [5, 4, 3, 5, 1, 4, 4, 4],
        }
    )
    split = split_leave_one_out(df, seed=0)
    _check_p1(split, df)
    # user 0 positives [0, 1], user 1 has one positive (no test), user 2 positives [1, 2, 3]
    rng = np.random.default_rng(0)
    k0 = rng.integers(2)
    k2 = rng.integers(3)
    assert split.test_users.tolist() == [0, 2]
    assert split.test_items.tolist() == [[0, 1][k0], [1, 2, 3][k2]]
    # user 1 keeps its single positive (item 10 -> index 0) in training; the 3-star rating is not a positive
    dense = split.train.to_dense()
    assert dense[1].tolist() == [1, 0, 0, 0]
    assert dense[0, 2] == 0


def test_p1_threshold_changes_positives():
    # positives at 4: one per user -> nobody can hold one out
    df = SMALL.assign(rating=[4.0, 3.0, 1.0, 5.0, 2.0, 4.0, 3.0])
    with pytest.raises(ValueError, match="two or more positives"):
        split_leave_one_out(df, threshold=4.0)
    # at 3, user 10 (index 0) has three positives (items 5, 7, 100)
    s3 = split_leave_one_out(df, threshold=3.0)
    _check_p1(s3, df, threshold=3.0)
    assert s3.test_users.tolist() == [0]
    assert s3.train.nnz == 4


def test_p1_errors():
    df = pd.DataFrame({"user": [1, 2], "item": [1, 2], "rating": [1.0, 2.0]})
    with pytest.raises(ValueError, match="positives"):
        split_leave_one_out(df)
    df = pd.DataFrame({"user": [1, 2], "item": [1, 2], "rating": [5.0, 5.0]})
    with pytest.raises(ValueError, match="two or more positives"):
        split_leave_one_out(df)


def test_p1_real_data_properties(ml100k):
    a = split_leave_one_out(ml100k, seed=0)
    _check_p1(a, ml100k)
    assert a.train.shape == (943, 1682)
    assert len(a.test_users) == 942  # one user has fewer than 2 ratings >= 4
    b = split_leave_one_out(ml100k, seed=0)
    np.testing.assert_array_equal(a.test_items, b.test_items)
    np.testing.assert_array_equal(a.train.rows, b.train.rows)
    np.testing.assert_array_equal(a.train.cols, b.train.cols)
    c = split_leave_one_out(ml100k, seed=1)
    np.testing.assert_array_equal(a.test_users, c.test_users)
    assert np.mean(a.test_items != c.test_items) > 0.5
    # the split does not depend on the row order of the input
    d = split_leave_one_out(ml100k.iloc[::-1].reset_index(drop=True), seed=0)
    np.testing.assert_array_equal(a.test_items, d.test_items)


# ---------------------------------------------------------------------------
# P3: random holdout
# ---------------------------------------------------------------------------


def _entries(obs):
    return set(zip(np.asarray(obs.rows).tolist(), np.asarray(obs.cols).tolist(), np.asarray(obs.values).tolist()))


def _check_p3(split: HoldoutSplit, df, test_fraction=0.2):
    ix = index_ratings(df)
    everything = set(zip(ix.frame.u.tolist(), ix.frame.i.tolist(), ix.frame.rating.tolist()))
    tr, te = _entries(split.train), _entries(split.test)
    assert split.train.shape == split.test.shape == ix.shape
    assert len(te) == round(test_fraction * len(everything))
    assert len(tr) + len(te) == len(everything)
    assert not ({(u, i) for u, i, _ in tr} & {(u, i) for u, i, _ in te})
    assert tr | te == everything


def test_p3_small_by_hand():
    df = SMALL.assign(rating=[4.0, 3.0, 1.0, 5.0, 2.0, 4.0, 3.0])
    split = split_random_holdout(df, seed=5, test_fraction=0.3)
    _check_p3(split, df, 0.3)
    # the documented algorithm, re-done by hand on the (u, i)-sorted rows
    f = index_ratings(df).frame
    perm = np.random.default_rng(5).permutation(7)
    test_rows = f.iloc[perm[: round(0.3 * 7)]]
    assert _entries(split.test) == set(zip(test_rows.u, test_rows.i, test_rows.rating))
    # and on the rows in input order
    split_in = split_random_holdout(df, seed=5, test_fraction=0.3, row_order="input")
    ix = index_ratings(df)
    rows = df.iloc[perm[:2]]
    assert _entries(split_in.test) == set(
        zip(ix.user_index(rows.user).tolist(), ix.item_index(rows.item).tolist(), rows.rating.tolist())
    )


def test_p3_real_data_properties(ml100k):
    a = split_random_holdout(ml100k, seed=0)
    assert (a.train.nnz, a.test.nnz) == (80_000, 20_000)
    _check_p3(a, ml100k)
    b = split_random_holdout(ml100k, seed=0)
    assert _entries(a.test) == _entries(b.test)
    c = split_random_holdout(ml100k, seed=1)
    assert len(_entries(a.test) & _entries(c.test)) < 0.3 * 20_000  # ~0.2 * 20000 expected by chance
    # the default ignores the row order of the input; row_order="input" does not
    d = split_random_holdout(ml100k.iloc[::-1].reset_index(drop=True), seed=0)
    assert _entries(a.test) == _entries(d.test)
    e = split_random_holdout(ml100k, seed=0, row_order="input")
    _check_p3(e, ml100k)
    assert _entries(a.test) != _entries(e.test)


@pytest.mark.parametrize("kwargs, match", [({"test_fraction": 0.0}, "test_fraction"), ({"test_fraction": 1.0}, "test_fraction"), ({"test_fraction": 0.01}, "non-empty"), ({"row_order": "file"}, "row_order")])
def test_p3_errors(kwargs, match):
    df = SMALL.assign(rating=[4.0, 3.0, 1.0, 5.0, 2.0, 4.0, 3.0])
    with pytest.raises(ValueError, match=match):
        split_random_holdout(df, **kwargs)


def test_p3_rejects_non_count_ratings():
    with pytest.raises(ValueError, match="integer"):
        split_random_holdout(SMALL)  # 3.5 stars


# ---------------------------------------------------------------------------
# dense submatrix
# ---------------------------------------------------------------------------


def test_dense_submatrix_by_hand():
    # user 10: 3 ratings, user 20: 2, user 30: 2 (tie with 20 -> smaller id wins)
    # item 7: 3 ratings, items 5 and 100: 2 each (tie -> 5)
    df = SMALL.assign(rating=[4.0, 3.0, 1.0, 5.0, 2.0, 4.0, 3.0])
    counts, users, items = dense_submatrix(df, n_users=2, n_items=2)
    np.testing.assert_array_equal(users, [10, 20])
    np.testing.assert_array_equal(items, [5, 7])
    np.testing.assert_array_equal(counts, [[3.0, 5.0], [0.0, 4.0]])
    assert counts.dtype == np.float64
    with pytest.raises(ValueError, match="n_users"):
        dense_submatrix(df, n_users=4, n_items=2)
    with pytest.raises(ValueError, match="n_items"):
        dense_submatrix(df, n_users=1, n_items=0)


def test_dense_submatrix_real(ml100k):
    counts, users, items = dense_submatrix(ml100k)
    assert counts.shape == (60, 40)
    ucount = ml100k.groupby("user").size()
    icount = ml100k.groupby("item").size()
    # every chosen user is at least as active as every user left out
    assert ucount[users].min() >= ucount.drop(users).max()
    assert icount[items].min() >= icount.drop(items).max()
    lookup = ml100k.set_index(["user", "item"])["rating"]
    for a, b in [(0, 0), (7, 13), (59, 39)]:
        expected = lookup.get((users[a], items[b]), 0.0)
        assert counts[a, b] == expected
    assert counts.sum() == ml100k[ml100k.user.isin(users) & ml100k.item.isin(items)].rating.sum()
