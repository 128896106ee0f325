"""Evaluation on the user's own data (validation/evaluation/holdout.py): the split's properties, the metrics of an
oracle and of popularity on a toy case computed by hand, and a real fit on a file with its own column
names and half stars."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from validation.frontdoor import api
from validation.evaluation import holdout
from validation.data import loaders, splits


@pytest.fixture(scope="module")
def shop() -> pd.DataFrame:
    """(customer, product, stars, when): 30 customers x 25 products, 3-12 products each, half stars,
    distinct times per customer; string ids."""
    rng = np.random.default_rng(3)
    rows = []
    for u in range(30):
        for t, i in enumerate(rng.choice(25, size=rng.integers(3, 13), replace=False)):
            rows.append((f"c{u}", f"p{i}", rng.integers(1, 11) / 2, 1000 + 7 * t + int(rng.integers(0, 5))))
    return pd.DataFrame(rows, columns=["customer", "product", "stars", "when"])


COLS = dict(user_col="customer", item_col="product", value_col="stars")


def _pairs(df, u="customer", i="product"):
    return set(zip(df[u], df[i]))


@pytest.mark.parametrize("how", ["loo", "fraction", "time"])
def test_split_is_disjoint_covers_the_data_and_reproduces_with_its_seed(shop, how):
    train, test = holdout.split(shop, how, seed=1, time_col="when", **COLS)
    assert list(train.columns) == list(shop.columns) == list(test.columns)  # the user's own columns
    assert not _pairs(train) & _pairs(test)  # no held-out item is in train for the same user
    assert len(train) + len(test) == len(shop) and _pairs(train) | _pairs(test) == _pairs(shop)
    assert set(train["customer"]) == set(shop["customer"])  # every user keeps a training entry
    again = holdout.split(shop, how, seed=1, time_col="when", **COLS)
    assert again.test.equals(test) and again.summary == test.attrs["holdout"]
    if how != "time":  # time draws nothing
        other = holdout.split(shop, how, seed=2, time_col="when", **COLS)
        assert _pairs(other.test) != _pairs(test)


def test_loo_is_the_p1_algorithm_and_basket_the_basket_protocol(shop):
    table = loaders.ratings_from_dataframe(shop, user="customer", item="product", value="stars", timestamp=None)
    p1 = splits.split_leave_one_out(table, seed=4, threshold=3.5)
    expected = set(zip(p1.indexed.user_ids[p1.test_users], p1.indexed.item_ids[p1.test_items]))
    test = holdout.split(shop, "loo", seed=4, min_value=3.5, **COLS).test
    assert _pairs(test) == expected and (test["stars"] >= 3.5).all()
    b = splits.split_leave_one_item_out_baskets(table.assign(rating=1.0), seed=2)
    expected = set(zip(b.indexed.user_ids[b.test_users], b.indexed.item_ids[b.test_items]))
    assert _pairs(holdout.split(shop, "basket", seed=2, **COLS).test) == expected


def test_fraction_holds_out_a_share_of_each_user_whatever_the_row_order(shop):
    held = holdout.split(shop, "fraction", seed=0, test_fraction=0.3, **COLS)
    n = shop.groupby("customer").size()
    k = held.test.groupby("customer").size().reindex(n.index, fill_value=0)
    assert (k == np.minimum(n - 1, np.maximum(1, np.round(0.3 * n)))).all()  # no item returned in this data
    assert held.summary["returned_to_train"] == 0
    shuffled = shop.sample(frac=1.0, random_state=5)
    assert _pairs(holdout.split(shuffled, "fraction", seed=0, test_fraction=0.3, **COLS).test) == _pairs(held.test)


def test_time_split_holds_out_the_latest_and_reads_datetimes(shop):
    train, test = holdout.split(shop, "time", n_test=2, time_col="when", **COLS)
    last_train = train.groupby("customer")["when"].max()
    first_test = test.groupby("customer")["when"].min()
    assert (first_test > last_train[first_test.index]).all()
    assert (test.groupby("customer").size() == 2).all()
    dated = shop.assign(when=pd.to_datetime(shop["when"], unit="D"))
    assert _pairs(holdout.split(dated, "time", n_test=2, time_col="when", **COLS).test) == _pairs(test)
    with pytest.raises(ValueError, match="timestamp column"):
        holdout.split(shop, "time", **COLS)
    with pytest.raises(ValueError, match="every timestamp"):
        holdout.split(shop.assign(when=5), "time", time_col="when", **COLS)


def test_items_and_users_that_cannot_be_evaluated_are_handled_and_counted():
    # user a: x then z (z only a's, latest): the time split would hold out z, an item no model can score
    df = pd.DataFrame({"user": ["a", "a", "b", "b", "c"], "item": ["x", "z", "x", "y", "y"],
                       "t": [1, 2, 1, 2, 1]})
    held = holdout.split(df, "time", time_col="t")
    s = held.summary
    assert _pairs(held.test, "user", "item") == {("b", "y")}
    assert s["returned_to_train"] == 1 and s["returned_items"] == 1
    assert s["users_not_held_out"] == 2 and s["users_too_few"] == 1  # c has one entry; a's went back
    assert s["test_users"] == 1
    assert any("returned to train: 1" in line for line in holdout.describe(s))
    with pytest.raises(ValueError, match="repeated"):
        holdout.split(pd.concat([df, df.iloc[:1]]), "loo")
    with pytest.raises(ValueError, match="how must be"):
        holdout.split(df, "random")
    with pytest.raises(ValueError, match="user_col"):
        holdout.split(df.rename(columns={"user": "who"}), "loo")
    m = sp.random(20, 15, density=0.4, random_state=0, format="csr")
    train, test = holdout.split(m, "loo")
    assert list(train.columns) == ["user", "item", "rating"] and len(train) + len(test) == m.nnz


# --------------------------------------------------------------------------------------------
# metrics by hand


def _fixed_model(monkeypatch, scores: np.ndarray, seen: sp.csr_matrix, kind: str = "binary") -> api.FittedModel:
    """A FittedModel whose posterior is one draw of the given (I, J) scores (E[y_ui] = scores[u, i])."""
    import arviz as az

    api.models()  # the real adapters first
    adapter = api.Adapter(name="fixed", values=kind, run=None, uncertainty="none (point estimate)", source="test",
                          mean=lambda post, rows, cols, attrs: post["score"][:, rows, cols])
    monkeypatch.setitem(api.ADAPTERS, "fixed", adapter)
    idata = az.from_dict(posterior={"score": scores[None, None]})
    I, J = scores.shape
    return api.FittedModel("fixed", idata, np.array([f"u{k}" for k in range(I)], dtype=object),
                           np.array([f"i{k}" for k in range(J)], dtype=object), seen, {"transform": "none"})


# train: u0 {0, 1}, u1 {0, 2}, u2 {0, 1, 3}: popularity (3, 2, 1, 1, 0); held out: u0 {3, 4}, u1 {4}, u2 {2}
TRAIN = sp.csr_matrix((np.ones(7), ([0, 0, 1, 1, 2, 2, 2], [0, 1, 0, 2, 0, 1, 3])), shape=(3, 5))
TEST = pd.DataFrame({"user": ["u0", "u0", "u1", "u2"], "item": ["i3", "i4", "i4", "i2"]})


def test_oracle_and_popularity_metrics_equal_the_hand_computed_values(monkeypatch):
    oracle = np.zeros((3, 5))
    oracle[[0, 0, 1, 2], [3, 4, 4, 2]] = 1.0
    table = holdout.evaluate(_fixed_model(monkeypatch, oracle, TRAIN), TEST, N=(1, 2)).set_index("system")
    # the oracle: u0's two held-out items tie at the top (recall@1 = 1/2), every other list is perfect
    assert table.loc["fixed", "recall@1"] == pytest.approx((0.5 + 1 + 1) / 3)
    for col in ("recall@2", "ndcg@1", "ndcg@2", "rank_score"):
        assert table.loc["fixed", col] == pytest.approx(1.0)
    # popularity, candidates = items outside the user's train, ties by smaller index:
    # u0 ranks (2, 3, 4): hits@1 0, hits@2 1 of 2, NDCG@2 = (1/log2 3) / (1 + 1/log2 3); rank scores: 3 vs {2}: 0, 4 vs {2}: 0
    # u1 ranks (1, 3, 4): nothing in the top 2; rank score 4 vs {1, 3}: 0
    # u2 ranks (2, 4): a hit at 1; rank score 2 vs {4}: 1
    pop = table.loc["popularity"]
    g = 1 / np.log2(3)
    assert pop["recall@1"] == pytest.approx(1 / 3) and pop["ndcg@1"] == pytest.approx(1 / 3)
    assert pop["recall@2"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert pop["ndcg@2"] == pytest.approx((g / (1 + g) + 0 + 1) / 3)
    assert pop["rank_score"] == pytest.approx(1 / 3)
    assert np.isnan(pop["rmse"]) and (table["users"] == 3).all() and (table["held_out"] == 4).all()
    # a constant model is never better than chance on the rank score (ties are not below)
    flat = holdout.evaluate(_fixed_model(monkeypatch, np.ones((3, 5)), TRAIN), TEST, N=2).set_index("system")
    assert flat.loc["fixed", "rank_score"] == 0.0


def test_evaluate_counts_what_it_skips_and_refuses_a_leak(monkeypatch):
    model = _fixed_model(monkeypatch, np.zeros((3, 5)), TRAIN)
    extra = pd.concat([TEST, pd.DataFrame({"user": ["stranger", "u1"], "item": ["i1", "new-item"]})])
    table = holdout.evaluate(model, extra, N=2)
    assert table.attrs["evaluation"] == {"test_rows": 6, "not_relevant": 0, "unknown_user": 1, "unknown_item": 1,
                                         "users": 3, "held_out": 4}
    with pytest.raises(ValueError, match="training entries of the model"):
        holdout.evaluate(model, pd.DataFrame({"user": ["u0"], "item": ["i1"]}))
    with pytest.raises(ValueError, match="no entry left"):
        holdout.evaluate(model, pd.DataFrame({"user": ["nobody"], "item": ["i1"]}))
    with pytest.raises(ValueError, match="N must be"):
        holdout.evaluate(model, TEST, N=(0,))


def test_rmse_of_a_rating_model_is_the_rmse_of_its_means(monkeypatch):
    truth = np.array([4.0, 2.0, 5.0, 3.0])
    scores = np.full((3, 5), 3.0)
    scores[[0, 0, 1, 2], [3, 4, 4, 2]] = [3.5, 2.0, 4.0, 3.0]
    seen = TRAIN.multiply(4.0).tocsr()  # every training value 4: the item-mean baseline predicts 4 (3 for item 4)
    model = _fixed_model(monkeypatch, scores, seen, kind="real")
    table = holdout.evaluate(model, TEST.assign(rating=truth), N=2).set_index("system")
    assert table.loc["fixed", "rmse"] == pytest.approx(np.sqrt(np.mean([0.25, 0.0, 1.0, 0.0])))
    item_mean = np.array([4.0, 4.0, 4.0, 4.0, 4.0])  # item 4 has no training value: the global mean, 4
    assert table.loc["item mean", "rmse"] == pytest.approx(np.sqrt(np.mean((item_mean[[3, 4, 4, 2]] - truth) ** 2)))
    assert np.isnan(table.loc["popularity", "rmse"])


# --------------------------------------------------------------------------------------------
# a real fit on a file of the user's shape


def test_hpf_on_a_half_star_file_with_its_own_columns(shop, tmp_path):
    path = tmp_path / "shop.csv"
    shop.to_csv(path, sep=";", index=False)
    table = loaders.load(path, format="csv", sep=";", **COLS)
    train, test = holdout.split(table, "loo", seed=0)
    m = api.fit("hpf", train, K=2, seed=0, transform="double", max_iter=10, n_draws=5, progress=False)
    out = holdout.evaluate(m, test, N=(5, 10))
    assert list(out["system"]) == ["hpf", "popularity", "ease"]
    assert list(out.columns) == ["system", "recall@5", "ndcg@5", "recall@10", "ndcg@10", "rank_score", "rmse",
                                 "users", "held_out", "recall@5_se", "ndcg@5_se", "recall@10_se", "ndcg@10_se",
                                 "rank_score_se", "vs", "diff", "ci_low", "ci_high", "verdict"]
    assert out.attrs["ease"]["setting"].startswith("lambda = ") and len(out.attrs["ease"]["curve"]) == 6
    best = max(("popularity", "ease"), key=lambda b: out.set_index("system").loc[b, "recall@5"])
    assert (out["vs"] == best).all() and {d["baseline"] for d in out.attrs["differences"]} == {best}
    assert out["rank_score"].between(0, 1).all() and (out["recall@10"] >= out["recall@5"]).all()
    assert out.attrs["split"]["how"] == "loo" and out.attrs["evaluation"]["held_out"] == len(test) == 30
