"""RMSE (protocol P2) and RMSE by user-degree bucket."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from custom_inference.data import Observations
from validation.data.datasets import split_p2
from validation.evaluation.metrics import by_degree, rmse, rmse_by_degree


def test_rmse_matches_brute_force_and_shift():
    rng = np.random.default_rng(0)
    truth = rng.integers(1, 6, size=500).astype(float)
    pred = truth + rng.normal(size=500)
    brute = np.sqrt(sum((p - t) ** 2 for p, t in zip(pred.tolist(), truth.tolist())) / 500)
    assert rmse(pred, truth) == pytest.approx(brute, rel=1e-12)
    assert rmse(truth, truth) == 0.0
    assert rmse(truth + 0.7, truth) == pytest.approx(0.7, rel=1e-12)
    assert rmse(pred, truth) == pytest.approx(rmse(truth, pred), rel=1e-15)  # symmetric


@pytest.mark.parametrize(
    "pred, truth, match",
    [
        (np.ones(3), np.ones(4), "equal length"),
        (np.ones((2, 2)), np.ones((2, 2)), "1-D"),
        (np.array([]), np.array([]), "length 0"),
        (np.array([1.0, np.nan]), np.ones(2), "pred"),
        (np.ones(2), np.array([np.inf, 1.0]), "truth"),
    ],
)
def test_rmse_errors(pred, truth, match):
    with pytest.raises(ValueError, match=match):
        rmse(pred, truth)


def test_rmse_global_mean_identity_on_p2(ml100k):
    # predicting the training mean m: RMSE^2 = var(test) + (mean(test) - m)^2, exactly
    s = split_p2(ml100k, seed=0)
    y_tr, y_te = np.asarray(s.train.values), np.asarray(s.test.values)
    m = y_tr.mean()
    assert rmse(np.full(y_te.shape, m), y_te) ** 2 == pytest.approx(y_te.var() + (y_te.mean() - m) ** 2, rel=1e-12)


def _synthetic(seed=0, I=60, n=800):
    rng = np.random.default_rng(seed)
    degree = np.floor(np.exp(rng.uniform(0, np.log(300), size=I))).astype(np.int64)
    degree[:3] = 0  # users without training ratings
    users = rng.integers(0, I, size=n)
    truth = rng.integers(1, 6, size=n).astype(float)
    pred = truth + rng.normal(scale=0.3 + 1.0 / np.sqrt(1 + degree[users]))
    return pred, truth, users, degree


@pytest.mark.parametrize("n_buckets", [None, 3])
def test_rmse_by_degree_brute_force(n_buckets):
    pred, truth, users, degree = _synthetic()
    out = rmse_by_degree(pred, truth, users, degree, n_buckets=n_buckets)
    assert list(out.columns) == ["bucket_low", "bucket_high", "n_users", "n_ratings", "rmse", "sem"]
    # brute force over the stated edges
    for _, row in out.iterrows():
        sel = (degree[users] >= row["bucket_low"]) & (degree[users] < row["bucket_high"])
        assert row["n_ratings"] == sel.sum()
        assert row["n_users"] == np.unique(users[sel]).size
        assert row["rmse"] == pytest.approx(np.sqrt(np.mean((pred[sel] - truth[sel]) ** 2)), rel=1e-12)
    # the buckets partition the ratings: pooled MSE is the overall MSE
    assert out["n_ratings"].sum() == pred.size
    pooled = np.sum(out["n_ratings"] * out["rmse"] ** 2) / pred.size
    assert np.sqrt(pooled) == pytest.approx(rmse(pred, truth), rel=1e-12)
    # degree-0 users get their own [0, 1) bucket; edges are powers of two
    assert out["bucket_low"].iloc[0] == 0 and out["bucket_high"].iloc[0] == 1
    lows = out["bucket_low"].to_numpy()[1:]
    assert np.all(lows & (lows - 1) == 0)
    if n_buckets is not None:
        assert (out["bucket_low"] > 0).sum() <= n_buckets


def test_rmse_by_degree_uses_by_degree_buckets():
    pred, truth, users, degree = _synthetic(seed=1)
    out = rmse_by_degree(pred, truth, users, degree, n_buckets=4)
    per_user = pd.DataFrame({"user": np.unique(users)})
    per_user["degree"] = degree[per_user["user"]]
    per_user["x"] = 0.0
    ref = by_degree(per_user, "x", n_buckets=4)
    np.testing.assert_array_equal(out["bucket_low"], ref["bucket_low"])
    np.testing.assert_array_equal(out["bucket_high"], ref["bucket_high"])
    np.testing.assert_array_equal(out["n_users"], ref["n_users"])


def test_rmse_by_degree_from_observations_and_on_p2(ml100k):
    s = split_p2(ml100k, seed=0)
    y_te = np.asarray(s.test.values)
    # user-mean predictor from training ratings (global mean for users without any)
    rows = np.asarray(s.train.rows)
    sums = np.bincount(rows, weights=np.asarray(s.train.values), minlength=s.n_users)
    counts = np.bincount(rows, minlength=s.n_users)
    user_mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.asarray(s.train.values).mean())
    pred = user_mean[np.asarray(s.test.rows)]
    a = rmse_by_degree(pred, y_te, np.asarray(s.test.rows), s.train)
    b = rmse_by_degree(pred, y_te, np.asarray(s.test.rows), counts)
    pd.testing.assert_frame_equal(a, b)
    assert a["n_ratings"].sum() == 10_000
    assert np.sqrt(np.sum(a["n_ratings"] * a["rmse"] ** 2) / 10_000) == pytest.approx(rmse(pred, y_te), rel=1e-12)
    # lowest bucket starts at the octave of the smallest training degree among test users
    d_min = counts[np.unique(np.asarray(s.test.rows))].min()
    assert a["bucket_low"].min() == 2 ** int(np.floor(np.log2(d_min))) and d_min > 0
    # delta-method sem: sem(squared error) / (2 rmse) with independent ratings, checked on one bucket
    row = a.iloc[len(a) // 2]
    u = np.asarray(s.test.rows)
    sel = (counts[u] >= row["bucket_low"]) & (counts[u] < row["bucket_high"])
    se2 = (pred[sel] - y_te[sel]) ** 2
    assert row["sem"] == pytest.approx(se2.std(ddof=1) / np.sqrt(se2.size) / (2 * row["rmse"]), rel=1e-12)


def test_rmse_by_degree_errors():
    pred, truth, users, degree = _synthetic()
    with pytest.raises(ValueError, match="users"):
        rmse_by_degree(pred, truth, users[:-1], degree)
    with pytest.raises(ValueError, match="users"):
        rmse_by_degree(pred, truth, np.where(users == 0, degree.size, users), degree)
    with pytest.raises(ValueError, match="users"):
        rmse_by_degree(pred, truth, users + 0.5, degree)
    with pytest.raises(ValueError, match="degree"):
        rmse_by_degree(pred, truth, users, -degree - 1)
    with pytest.raises(ValueError, match="degree"):
        rmse_by_degree(pred, truth, users, degree.reshape(6, 10))
    with pytest.raises(ValueError, match="n_buckets"):
        rmse_by_degree(pred, truth, users, degree, n_buckets=0)
    with pytest.raises(ValueError, match="pred"):
        rmse_by_degree(pred[:-1], truth, users, degree)
    obs = Observations.from_coo([0, 1], [0, 0], [1.0, 2.0], (2, 1), kind="real")
    out = rmse_by_degree([1.0, 2.0], [1.0, 3.0], [0, 1], obs)
    assert out["n_ratings"].tolist() == [2] and out["rmse"].iloc[0] == pytest.approx(np.sqrt(0.5))
