"""Protocol P2 (`split_p2`) and the FM designs of `fm_features`, on MovieLens 100K and small tables."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from custom_inference.data import Observations
from custom_inference.fm_design import FMDesign
from validation.data.datasets import (
    AGE_BUCKETS,
    FM_GROUPS,
    ML100K_GENRES,
    RatingsSplit,
    fm_features,
    index_ratings,
    load_movielens_genres,
    load_movielens_users,
    split_p2,
)


@pytest.fixture(scope="module")
def p2(ml100k):
    return split_p2(ml100k, seed=0)


def _pairs(frame, a="user", b="item"):
    return set(zip(frame[a].to_numpy().tolist(), frame[b].to_numpy().tolist()))


# ---------------------------------------------------------------------------
# split_p2
# ---------------------------------------------------------------------------


def test_p2_sizes_partition_and_universe(ml100k, p2):
    assert isinstance(p2, RatingsSplit)
    assert p2.shape == (943, 1682)  # all users and items, train and test together
    assert p2.train.nnz == 90_000 and p2.test.nnz == 10_000
    assert p2.train.shape == p2.test.shape == (943, 1682)
    tr, te = _pairs(p2.train_frame), _pairs(p2.test_frame)
    assert not tr & te
    assert tr | te == _pairs(ml100k)
    np.testing.assert_array_equal(p2.user_ids, np.sort(ml100k["user"].unique()))
    np.testing.assert_array_equal(p2.item_ids, np.sort(ml100k["item"].unique()))


def test_p2_is_the_documented_permutation_of_file_rows(ml100k, p2):
    # independent re-implementation of the protocol: permute the rows as read, first 10 % test
    perm = np.random.default_rng(0).permutation(len(ml100k))
    expected_test = ml100k.iloc[perm[:10_000]]
    assert _pairs(p2.test_frame) == _pairs(expected_test)
    # ratings and timestamps travel with their rows
    merged = p2.test_frame.merge(expected_test, on=["user", "item"], suffixes=("", "_ref"))
    assert len(merged) == 10_000
    np.testing.assert_array_equal(merged["rating"], merged["rating_ref"])
    np.testing.assert_array_equal(merged["timestamp"], merged["timestamp_ref"])


def test_p2_alignment_of_observations_frames_and_ids(p2):
    for obs, frame in ((p2.train, p2.train_frame), (p2.test, p2.test_frame)):
        np.testing.assert_array_equal(np.asarray(obs.rows), frame["u"])
        np.testing.assert_array_equal(np.asarray(obs.cols), frame["i"])
        np.testing.assert_array_equal(np.asarray(obs.values), frame["rating"])
        np.testing.assert_array_equal(p2.user_ids[frame["u"]], frame["user"])
        np.testing.assert_array_equal(p2.item_ids[frame["i"]], frame["item"])
        np.testing.assert_array_equal(p2.user_index(frame["user"]), frame["u"])
        np.testing.assert_array_equal(p2.item_index(frame["item"]), frame["i"])
    with pytest.raises(ValueError, match="user id"):
        p2.user_index([10_000])


def test_p2_seeds_and_row_order(ml100k, p2):
    again = split_p2(ml100k, seed=0)
    assert _pairs(again.test_frame) == _pairs(p2.test_frame)
    other = split_p2(ml100k, seed=1)
    assert _pairs(other.test_frame) != _pairs(p2.test_frame)
    # the permutation indexes rows in input order: reversing the file changes the split
    rev = split_p2(ml100k.iloc[::-1].reset_index(drop=True), seed=0)
    assert _pairs(rev.test_frame) != _pairs(p2.test_frame)
    assert split_p2(ml100k, seed=0, test_fraction=0.25).test.nnz == 25_000


def test_p2_real_values_and_users_only_in_test():
    # 4 ratings, one 0 and one negative (centred ratings are legal for kind="real")
    df = pd.DataFrame({"user": [5, 5, 9, 7], "item": [2, 30, 2, 30], "rating": [0.0, -1.5, 4.0, 2.5]})
    s = split_p2(df, seed=3, test_fraction=0.25)
    assert s.train.nnz + s.test.nnz == 4  # the 0 rating is kept, not dropped
    assert s.shape == (3, 2)
    np.testing.assert_array_equal(s.user_ids, [5, 7, 9])
    assert sorted(s.train_frame["rating"].tolist() + s.test_frame["rating"].tolist()) == [-1.5, 0.0, 2.5, 4.0]
    f32 = split_p2(df, seed=3, test_fraction=0.25, dtype=np.float32)
    assert np.asarray(f32.train.values).dtype == np.float32


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(test_fraction=0.0), "test_fraction"),
        (dict(test_fraction=1.0), "test_fraction"),
        (dict(test_fraction=0.01), "test_fraction"),  # rounds to 0 test ratings of 4
    ],
)
def test_p2_bad_fraction(kwargs, match):
    df = pd.DataFrame({"user": [1, 1, 2, 2], "item": [1, 2, 1, 2], "rating": [1.0, 2, 3, 4]})
    with pytest.raises(ValueError, match=match):
        split_p2(df, **kwargs)


def test_p2_bad_tables():
    with pytest.raises(ValueError, match="DataFrame"):
        split_p2(np.zeros((3, 3)))
    df = pd.DataFrame({"user": [1, 1, 2], "item": [1, 1, 2], "rating": [1.0, 2, 3]})
    with pytest.raises(ValueError, match="duplicate"):
        split_p2(df)
    with pytest.raises(ValueError, match="IndexedRatings"):
        split_p2(index_ratings(df.iloc[1:]))
    with pytest.raises(ValueError, match="rating"):
        split_p2(pd.DataFrame({"user": [1, 2], "item": [1, 2], "rating": [np.nan, 1.0]}))


# ---------------------------------------------------------------------------
# fm_features on MovieLens 100K
# ---------------------------------------------------------------------------


def test_fm_ids_design(p2):
    train, test = fm_features(p2, "ids")
    I, J = p2.shape
    for dsg, obs in ((train, p2.train), (test, p2.test)):
        assert isinstance(dsg, FMDesign)
        assert dsg.n_rows == obs.nnz and dsg.n_features == I + J
        assert dsg.group_names == FM_GROUPS["ids"] == ("user", "item")
        assert dsg.n_blocks == 2  # one-hot groups are one block each
        np.testing.assert_array_equal(np.asarray(dsg.y), np.asarray(obs.values))
        X = dsg.to_scipy().tocoo()
        assert X.nnz == 2 * obs.nnz and np.all(X.data == 1.0)
        # row n: column u_n and column I + i_n, nothing else
        expected = np.sort(np.stack([np.asarray(obs.rows), I + np.asarray(obs.cols)], axis=1), axis=1)
        order = np.lexsort((X.col, X.row))
        got = X.col[order].reshape(-1, 2)
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.asarray(train.group), np.r_[np.zeros(I), np.ones(J)].astype(np.int32))


def _raw_side_info(ml100k_dir):
    """Side information parsed independently of validation.data.datasets (csv module, plain text)."""
    users = {}
    with open(ml100k_dir / "u.user", encoding="latin-1") as fh:
        for line in fh:
            uid, age, gender, occ, _ = line.rstrip("\n").split("|")
            users[int(uid)] = (int(age), gender, occ)
    genres = {}
    with open(ml100k_dir / "items.tsv", encoding="utf-8", newline="") as fh:
        rd = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rd)
        k = header.index("genres")
        for row in rd:
            genres[int(row[0])] = [g for g in row[k].split("|") if g]
    return users, genres


def test_fm_rich_design_against_raw_files(p2, ml100k_dir):
    users, genres = _raw_side_info(ml100k_dir)
    train, test = fm_features(p2, "rich", data_dir=ml100k_dir)
    I, J = p2.shape
    genre_names = sorted({g for gl in genres.values() for g in gl})
    occs = sorted({v[2] for v in users.values()})
    genders = sorted({v[1] for v in users.values()})
    assert len(genre_names) == 19 and set(genre_names) == set(ML100K_GENRES)
    D = I + J + 19 + len(AGE_BUCKETS) + len(genders) + len(occs)
    assert train.n_features == test.n_features == D == 2674
    assert train.group_names == FM_GROUPS["rich"]
    off = np.cumsum([0, I, J, 19, len(AGE_BUCKETS), len(genders)])

    def age_col(a):
        return [k for k, (lo, hi) in enumerate(AGE_BUCKETS) if lo <= a < hi][0]

    rng = np.random.default_rng(1)
    for dsg, frame in ((train, p2.train_frame), (test, p2.test_frame)):
        X = dsg.to_scipy()
        for n in rng.choice(dsg.n_rows, size=300, replace=False):
            uid, iid = int(frame["user"][n]), int(frame["item"][n])
            age, gender, occ = users[uid]
            expected = {int(frame["u"][n]), I + int(frame["i"][n])}
            expected |= {off[2] + genre_names.index(g) for g in genres[iid]}
            expected |= {off[3] + age_col(age), off[4] + genders.index(gender), off[5] + occs.index(occ)}
            row = X.getrow(n)
            assert set(row.indices.tolist()) == expected, (n, uid, iid)
            assert np.all(row.data == 1.0)
        np.testing.assert_array_equal(np.asarray(dsg.y), frame["rating"])
    # the age buckets are half-open: 17 -> "<18", 18 and 24 -> "18-24", 56 -> "56+"
    assert [age_col(a) for a in (17, 18, 24, 25, 49, 50, 55, 56, 73)] == [0, 1, 1, 2, 4, 5, 5, 6, 6]


def test_side_info_loaders(ml100k_dir):
    u = load_movielens_users(ml100k_dir)
    assert len(u) == 943 and list(u.columns) == ["user", "age", "gender", "occupation", "zip_code"]
    assert set(u["gender"]) == {"F", "M"} and u["occupation"].nunique() == 21
    g = load_movielens_genres(ml100k_dir)
    assert g["item"].nunique() == 1682 and set(g["genre"]) == set(ML100K_GENRES)


# ---------------------------------------------------------------------------
# fm_features on a tiny hand-made data directory
# ---------------------------------------------------------------------------


def _tiny(tmp_path, users_lines, items_lines, item_file="items.tsv"):
    (tmp_path / "u.user").write_text("".join(l + "\n" for l in users_lines), encoding="latin-1")
    if item_file == "items.tsv":
        text = "item_id\ttitle\trelease_year\tgenres\n" + "".join(l + "\n" for l in items_lines)
        (tmp_path / "items.tsv").write_text(text, encoding="utf-8")
    elif item_file == "u.item":
        (tmp_path / "u.item").write_text("".join(l + "\n" for l in items_lines), encoding="latin-1")
    return tmp_path


TINY_RATINGS = pd.DataFrame(
    {"user": [1, 1, 2, 3, 3, 2], "item": [10, 20, 10, 20, 30, 30], "rating": [5.0, 3, 4, 1, 2, 3]}
)
TINY_USERS = ["1|17|F|student|00000", "2|56|M|writer|11111", "3|30|M|student|22222"]
TINY_ITEMS = ["10\tA\t1995\tDrama|Comedy", "20\tB\t1996\tDrama", "30\t\"C, the\"\t1997\tunknown"]


def test_fm_rich_tiny(tmp_path):
    d = _tiny(tmp_path, TINY_USERS, TINY_ITEMS)
    s = split_p2(TINY_RATINGS, seed=0, test_fraction=1 / 3)
    train, test = fm_features(s, "rich", data_dir=d)
    # D = 3 users + 3 items + 3 genres (Comedy, Drama, unknown) + 7 ages + 2 genders + 2 occupations
    assert train.n_features == 3 + 3 + 3 + 7 + 2 + 2
    X = np.vstack([train.to_dense(), test.to_dense()])
    frame = pd.concat([s.train_frame, s.test_frame], ignore_index=True)
    row = X[np.flatnonzero((frame["user"] == 1) & (frame["item"] == 10))[0]]
    # user 1 (index 0), item 10 (index 0), genres Comedy+Drama, age 17 -> bucket 0, F, student
    expected = np.zeros(20)
    expected[[0, 3, 6, 7, 9, 16, 18]] = 1.0
    np.testing.assert_array_equal(row, expected)
    # test design has the same columns even though it has only 2 rows
    assert test.n_rows == 2 and test.n_features == train.n_features


def test_fm_genres_from_u_item(tmp_path):
    flags = lambda names: "|".join("1" if g in names else "0" for g in ML100K_GENRES)  # noqa: E731
    items = [f"10|A (1995)|01-Jan-1995||http://x|{flags({'Drama', 'Comedy'})}",
             f"20|B (1996)|01-Jan-1996||http://x|{flags({'Drama'})}",
             f"30|C (1997)|01-Jan-1997||http://x|{flags({'unknown'})}"]
    (tmp_path / "a").mkdir()
    d_item = _tiny(tmp_path / "a", TINY_USERS, items, "u.item")
    (tmp_path / "b").mkdir()
    d_tsv = _tiny(tmp_path / "b", TINY_USERS, TINY_ITEMS)
    g1 = load_movielens_genres(d_item).sort_values(["item", "genre"]).reset_index(drop=True)
    g2 = load_movielens_genres(d_tsv).sort_values(["item", "genre"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(g1, g2)
    s = split_p2(TINY_RATINGS, seed=0, test_fraction=1 / 3)
    a, b = fm_features(s, "rich", data_dir=d_item), fm_features(s, "rich", data_dir=d_tsv)
    np.testing.assert_array_equal(a[0].to_dense(), b[0].to_dense())


def test_fm_errors(tmp_path, p2):
    s = split_p2(TINY_RATINGS, seed=0, test_fraction=1 / 3)
    with pytest.raises(ValueError, match="kind"):
        fm_features(s, "users")
    with pytest.raises(ValueError, match="RatingsSplit"):
        fm_features(Observations.from_coo([0], [0], [1.0], (1, 1), kind="real"), "ids")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="u.user"):
        fm_features(s, "rich", data_dir=tmp_path / "empty")
    with pytest.raises(ValueError, match="data_dir"):
        fm_features(s, "rich", data_dir=tmp_path / "nope")
    (tmp_path / "no_items").mkdir()
    _tiny(tmp_path / "no_items", TINY_USERS, [], item_file=None)
    with pytest.raises(ValueError, match="items.tsv"):
        fm_features(s, "rich", data_dir=tmp_path / "no_items")
    (tmp_path / "miss_u").mkdir()
    _tiny(tmp_path / "miss_u", TINY_USERS[:2], TINY_ITEMS)
    with pytest.raises(ValueError, match=r"user id.*\[3\]"):
        fm_features(s, "rich", data_dir=tmp_path / "miss_u")
    (tmp_path / "miss_i").mkdir()
    _tiny(tmp_path / "miss_i", TINY_USERS, TINY_ITEMS[1:])
    with pytest.raises(ValueError, match=r"item id.*\[10\]"):
        fm_features(s, "rich", data_dir=tmp_path / "miss_i")
    (tmp_path / "old").mkdir()
    _tiny(tmp_path / "old", ["1|1200|F|student|0"] + TINY_USERS[1:], TINY_ITEMS)
    with pytest.raises(ValueError, match="age"):
        fm_features(s, "rich", data_dir=tmp_path / "old")
    # "ids" never reads side information
    assert fm_features(s, "ids", data_dir=tmp_path / "empty")[0].n_features == 6
