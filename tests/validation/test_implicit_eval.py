"""Tests of validation.evaluation.implicit_eval: the SIBM split, recall@N, evaluate_implicit, baselines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from custom_inference.data import Observations
from validation.evaluation import implicit_eval as ie
from validation.evaluation import metrics
from validation.data.datasets import ImplicitSplit, index_ratings, split_leave_one_out


def _synthetic_ratings(seed=0, I=60, J=40):
    """Stars 1-5 on a random subset of cells; ids shuffled and non-contiguous."""
    rng = np.random.default_rng(seed)
    mask = rng.random((I, J)) < 0.45
    # users' activity varies, so some fall below 10 ones
    mask &= rng.random((I, 1)) < np.linspace(0.15, 1.0, I)[:, None] + 0.0
    u, i = np.nonzero(mask)
    stars = rng.integers(1, 6, size=u.size).astype(float)
    user_ids = rng.permutation(I) * 3 + 100
    item_ids = rng.permutation(J) * 7 + 5
    return pd.DataFrame({"user": user_ids[u], "item": item_ids[i], "rating": stars})


def _ones_by_original_ids(df, threshold=4.0):
    ones = df[df["rating"] >= threshold]
    return set(zip(ones["user"].tolist(), ones["item"].tolist()))


# ---------------------------------------------------------------------------
# SIBM split
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_columns", [None, 25])
def test_sibm_split_properties(n_columns):
    df = _synthetic_ratings()
    split = ie.split_sibm(df, seed=3, n_columns=n_columns)
    assert isinstance(split, ImplicitSplit)
    I, J = split.train.shape
    uid, iid = split.indexed.user_ids, split.indexed.item_ids
    ones = _ones_by_original_ids(df)
    # kept columns: the n_columns items with most ones (ties: smaller index = smaller id)
    per_item = pd.Series([i for _, i in ones]).value_counts()
    if n_columns is None:
        assert set(iid) == set(per_item.index)
    else:
        assert J == n_columns
        ranked = sorted(per_item.index, key=lambda it: (-per_item[it], it))
        assert set(iid) == set(ranked[:n_columns])
    kept_items = set(iid.tolist())
    # kept rows: exactly the users with >= 10 ones within the kept columns
    per_user = pd.Series([u for u, i in ones if i in kept_items]).value_counts()
    assert set(uid) == set(per_user.index[per_user >= 10])
    assert np.all(np.diff(uid) > 0) and np.all(np.diff(iid) > 0)
    # one held-out positive per row, not in train; train + test = the row's ones
    np.testing.assert_array_equal(split.test_users, np.arange(I))
    dense = split.train.to_dense()
    assert set(np.unique(dense)) <= {0.0, 1.0}
    assert np.all(dense[np.arange(I), split.test_items] == 0)
    full = dense.copy()
    full[np.arange(I), split.test_items] = 1
    expected = np.zeros((I, J))
    for u, i in ones:
        if u in set(uid.tolist()) and i in kept_items:
            expected[np.searchsorted(uid, u), np.searchsorted(iid, i)] = 1
    np.testing.assert_array_equal(full, expected)
    assert np.all(full.sum(axis=1) >= 10)
    # the indexed ratings are those of the kept users and items
    f = split.indexed.frame
    assert f["u"].max() < I and f["i"].max() < J
    assert len(f) == int(np.sum(df["user"].isin(uid) & df["item"].isin(iid)))


def test_sibm_split_is_reproducible_by_seed():
    df = _synthetic_ratings()
    a, b, c = (ie.split_sibm(df, seed=s, n_columns=None) for s in (5, 5, 6))
    np.testing.assert_array_equal(a.test_items, b.test_items)
    np.testing.assert_array_equal(np.asarray(a.train.cols), np.asarray(b.train.cols))
    assert not np.array_equal(a.test_items, c.test_items)
    # the held-out draw is P1's: when no row or column is dropped, the two splits coincide
    rng = np.random.default_rng(0)
    stars = np.where(rng.random((15, 20)) < 0.7, 5.0, 1.0)
    stars[:, :10] = 5.0  # every row has >= 10 ones
    stars[np.arange(15), np.arange(15)] = 5.0  # every item has a one
    stars[np.arange(5), 15 + np.arange(5)] = 5.0
    u, i = np.nonzero(stars)
    full = pd.DataFrame({"user": u, "item": i, "rating": stars[u, i]})
    assert (stars >= 4).sum(axis=1).min() >= 10
    s, p1 = ie.split_sibm(full, seed=5, n_columns=None), split_leave_one_out(full, seed=5)
    assert s.train.shape == p1.train.shape == (15, 20)
    np.testing.assert_array_equal(s.test_items, p1.test_items)
    np.testing.assert_array_equal(s.train.to_dense(), p1.train.to_dense())


def test_sibm_split_rejects_bad_arguments():
    df = _synthetic_ratings()
    with pytest.raises(ValueError, match="min_ones"):
        ie.split_sibm(df, min_ones=1)
    with pytest.raises(ValueError, match="n_columns"):
        ie.split_sibm(df, n_columns=0)
    with pytest.raises(ValueError, match="rating"):
        ie.split_sibm(df, min_ones=10_000)


def test_sibm_split_on_movielens_100k(ml100k):
    split = ie.split_sibm(ml100k, seed=0)
    I, J = split.train.shape
    assert J == 1000
    ones = split.train.to_scipy().sum(axis=1).A1 + 1
    assert ones.min() >= 10
    assert len(split.test_items) == I
    assert np.asarray(split.train.values).sum() == split.train.nnz
    # seed 002 keeps at most 1000 columns and rows with >= 10 ones: most ML-100K users qualify
    assert 600 < I <= 943


# ---------------------------------------------------------------------------
# recall@N
# ---------------------------------------------------------------------------


def test_recall_at_matches_brute_force():
    rng = np.random.default_rng(4)
    I, J = 30, 20
    dense = (rng.random((I, J)) < 0.3).astype(float)
    dense[:, 0] = 1.0
    dense[:, 1] = 1.0  # every row has >= 2 ones
    test_items = np.array([rng.choice(np.flatnonzero(r)) for r in dense])
    train = dense.copy()
    train[np.arange(I), test_items] = 0
    split = ImplicitSplit(
        train=Observations.from_dense(train, kind="binary"),
        test_users=np.arange(I, dtype=np.int64),
        test_items=test_items.astype(np.int64),
        indexed=None,
    )
    scores = rng.normal(size=(I, J))  # continuous: no ties
    score_fn = lambda users: scores[np.asarray(users)]  # noqa: E731
    for n in (1, 3, 10):
        hits = []
        for u in range(I):
            cand = np.flatnonzero(train[u] == 0)  # the row's zeros, test item included
            top = cand[np.argsort(-scores[u, cand])][:n]
            hits.append(test_items[u] in top)
        assert ie.recall_at(score_fn, split, n=n) == pytest.approx(np.mean(hits), abs=0)
        assert ie.recall_at(score_fn, split, n=n, batch_size=7) == pytest.approx(np.mean(hits), abs=0)


# ---------------------------------------------------------------------------
# evaluate_implicit
# ---------------------------------------------------------------------------


def test_evaluate_implicit_on_synthetic_data(tmp_path):
    df = _synthetic_ratings(I=80, J=40)
    systems = ie.baseline_systems(n_factors=4, n_epochs=2, batch_size=64)
    assert list(systems) == ["popularity", "ease", "BPR-uniform", "BPR-popularity"]
    seen = []

    def oracle(train, seed):  # a user-written system: the signature is (train, seed)
        seen.append((train.shape, seed))
        return lambda users: np.zeros((len(users), train.n_cols))

    systems["constant"] = oracle
    res = ie.evaluate_implicit(df, systems, protocols=("P1", "SIBM"), seed=2, out_dir=tmp_path)
    t = res.table
    assert list(t.columns) == [
        "protocol", "system", "recall@10", "rank_score_users", "rank_score_items", "ndcg@10",
        "fit_seconds", "fit_cpu_seconds", "n_users", "n_items", "I", "J", "like_error", "setting", "converged", "iterations",
        "recall@10_se",
        "rank_score_users_se", "ndcg@10_se", "vs", "diff", "ci_low", "ci_high", "verdict",
    ]
    assert t["like_error"].isna().all() and len(res.like_error_by_degree) == 0  # no like-probability system
    assert len(t) == 2 * 5
    # EASE^R chose its lambda on each protocol's training matrix and says which
    assert set(res.tuning) == {("P1", "ease"), ("SIBM", "ease")}
    assert t[t["system"] == "ease"]["setting"].str.startswith("lambda = ").all()
    # every non-baseline row is compared with the better baseline by recall@10
    for p in ("P1", "SIBM"):
        sub = t[t["protocol"] == p].set_index("system")
        best = max(("popularity", "ease"), key=lambda b: sub.loc[b, "recall@10"])
        assert (sub["vs"] == best).all() and np.isnan(sub.loc[best, "diff"])
        other = sub.drop(index=best)
        np.testing.assert_allclose(other["diff"], other["recall@10"] - sub.loc[best, "recall@10"], atol=1e-12)
        assert (other["ci_low"] <= other["diff"]).all() and (other["diff"] <= other["ci_high"]).all()
    assert list(t["protocol"].unique()) == ["P1", "SIBM"]
    assert t[["recall@10", "rank_score_users", "rank_score_items", "ndcg@10"]].apply(
        lambda c: c.between(0, 1).all()
    ).all()
    assert (t["fit_seconds"] >= 0).all() and (t["fit_cpu_seconds"] >= 0).all()
    assert [s for _, s in seen] == [2, 2]
    # a constant score never ranks the held-out item above anything (pessimistic ties)
    const = t[t["system"] == "constant"]
    assert (const["recall@10"] == 0).all() and (const["rank_score_users"] == 0).all()
    # popularity row equals the metrics module on the same split
    p1 = split_leave_one_out(df, seed=2)
    pop = metrics.summarize(metrics.leave_one_out_metrics(metrics.popularity_score_fn(p1.train), p1, n=10))
    row = t[(t["protocol"] == "P1") & (t["system"] == "popularity")].iloc[0]
    assert row["rank_score_users"] == pytest.approx(pop["rank_score"])
    assert row["recall@10"] == pytest.approx(pop["hit"])
    for b in (res.by_user_degree, res.by_item_degree):
        assert {"protocol", "system", "bucket_low", "bucket_high", "n_users", "mean", "sem"} <= set(b.columns)
        assert set(b["system"]) == set(systems)
    # bucket sizes add up to the test rows (users) per protocol and system
    sizes = res.by_user_degree.groupby(["protocol", "system"])["n_users"].sum()
    for (p, s), n in sizes.items():
        assert n == t[(t["protocol"] == p) & (t["system"] == s)]["n_users"].iloc[0]
    for name in ("rank_by_user_degree.png", "rank_by_item_degree.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert res.plots["user_degree"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_implicit_accepts_ready_splits_and_rejects_bad_input():
    df = _synthetic_ratings()
    split = split_leave_one_out(df, seed=0)
    pop = {"popularity": lambda train, seed: metrics.popularity_score_fn(train)}
    res = ie.evaluate_implicit(None, pop, protocols={"mine": split})
    assert list(res.table["protocol"]) == ["mine"]
    with pytest.raises(ValueError, match="systems"):
        ie.evaluate_implicit(df, {})
    with pytest.raises(ValueError, match="systems"):
        ie.evaluate_implicit(df, {"x": 3})
    with pytest.raises(ValueError, match="protocols"):
        ie.evaluate_implicit(df, pop, protocols=("P9",))
    with pytest.raises(ValueError, match="bpr_kwargs"):
        ie.baseline_systems(n_factor=3)


def test_popularity_on_movielens_100k_p1_matches_reference(ml100k):
    """Independently measured on P1 with seed 0: R = 0.869, HR@10 = 0.118 (3 decimals)."""
    pop = {"popularity": ie.baseline_systems()["popularity"]}
    res = ie.evaluate_implicit(ml100k, pop, protocols=("P1",), seed=0)
    row = res.table.iloc[0]
    assert round(row["rank_score_users"], 3) == 0.869
    assert round(row["recall@10"], 3) == 0.118
    assert row["n_users"] == 942


@pytest.mark.slow
def test_bpr_baselines_on_movielens_100k(ml100k, tmp_path):
    """Full BPR fits (K = 64, 100 epochs) on both protocols; BPR-uniform, which optimizes the
    rank score directly (003 sec. 6.1.2), must beat popularity on it."""
    res = ie.evaluate_implicit(ml100k, ie.baseline_systems(), seed=0, out_dir=tmp_path, progress=True)
    t = res.table.set_index(["protocol", "system"])
    print(t.to_string())
    for p in ("P1", "SIBM"):
        assert t.loc[(p, "BPR-uniform"), "rank_score_users"] > t.loc[(p, "popularity"), "rank_score_users"]
        assert t.loc[(p, "BPR-uniform"), "recall@10"] > t.loc[(p, "popularity"), "recall@10"]


# ---------------------------------------------------------------------------
# recall versus entries observed (seed 002 figs. 2-3)
# ---------------------------------------------------------------------------


def _planted_binary(seed=0, I=90, J=60, groups=3, p_in=0.5, p_out=0.02):
    """Users and items in ``groups`` groups; a cell is a one with p_in inside the user's group, p_out outside."""
    rng = np.random.default_rng(seed)
    gu, gi = rng.integers(0, groups, I), rng.integers(0, groups, J)
    p = np.where(gu[:, None] == gi[None, :], p_in, p_out)
    return (rng.random((I, J)) < p).astype(np.int8)


def test_binary_split_properties_and_errors():
    X = _planted_binary()
    split = ie.binary_split(X, seed=1, min_ones=8)
    kept = np.flatnonzero(X.sum(1) >= 8)
    np.testing.assert_array_equal(split.indexed.user_ids, kept)
    I, J = split.train.shape
    assert (I, J) == (kept.size, X.shape[1])
    np.testing.assert_array_equal(split.test_users, np.arange(I))
    train = np.zeros((I, J), np.int8)
    train[np.asarray(split.train.rows), np.asarray(split.train.cols)] = 1
    assert np.all(train[np.arange(I), split.test_items] == 0)  # the held-out one left the training matrix
    train[np.arange(I), split.test_items] = 1
    np.testing.assert_array_equal(train, X[kept])  # train + test = the kept rows' ones
    again = ie.binary_split(X, seed=1, min_ones=8)
    np.testing.assert_array_equal(again.test_items, split.test_items)
    with pytest.raises(ValueError, match="min_ones"):
        ie.binary_split(X, min_ones=1)
    with pytest.raises(ValueError, match="no row"):
        ie.binary_split(X, min_ones=J + 1)
    with pytest.raises(ValueError, match="values"):
        ie.binary_split(2 * X)


def test_sibm_recall_curves_structure_and_planted_signal():
    X = _planted_binary()
    split = ie.binary_split(X, seed=0, min_ones=4)
    I, J = split.train.shape
    pop = metrics.popularity_score_fn(split.train)
    passes, S = 4, max(I, J)
    # one strategy (S-Uniform compiles its own sampler; the strategies themselves are tested in test_sibm)
    c = ie.sibm_recall_curves(split, D=2, strategies=("biased",), passes=passes, n_points=3,
                              auto_S_max=256, references={"popularity": pop}, seed=0)
    assert list(c.columns) == ["method", "figure", "iteration", "entries", "recall", "S", "seconds", "n"]
    assert list(dict.fromkeys(c["method"])) == ["S-Biased", "SIBM-auto", "batch VB", "popularity"]
    assert c["recall"].between(0, 1).all()
    budget = c.attrs["budget"]
    assert budget == passes * I * J
    for method, sub in c[c["figure"] != "reference"].groupby("method"):
        e = sub["entries"].to_numpy()
        assert np.all(np.diff(e) > 0) and np.all(np.diff(sub["iteration"].to_numpy()) > 0), method
        assert np.all(np.diff(sub["seconds"].to_numpy()) >= 0), method
        if method == "batch VB":  # every sweep touches all I J entries
            np.testing.assert_array_equal(e, np.arange(1, passes + 1) * I * J)
        else:  # stops at the first minibatch that reaches the budget
            assert budget <= e[-1] < budget + sub["S"].to_numpy()[-1]
            assert 2 <= len(sub) <= 3 + 1
    assert set(c.loc[c["method"].str.startswith("S-"), "figure"]) == {"fig2"}
    assert set(c.loc[c["method"].isin(["SIBM-auto", "batch VB"]), "figure"]) == {"fig3"}
    assert (c.loc[c["method"] == "S-Biased", "S"] == S).all()
    ref = c[c["method"] == "popularity"]
    assert ref["entries"].isna().all() and ref["recall"].iloc[0] == pytest.approx(ie.recall_at(pop, split))
    # Planted groups: a held-out one lies in the user's own item group with probability
    # p_in * 20 / (p_in * 20 + p_out * 40) ~ 0.93; after ~10 training ones of that group, ~10 of its items
    # remain candidates, so a model that found the groups puts it in the top 10 most of the time, while
    # popularity (items about equally popular) ranks it near chance. Per row the hit difference
    # d_i in {-1, 0, 1} has variance <= 1, so the standard error of the mean difference is <= 1 / sqrt(I):
    # the margin below is 3 such standard errors (I = number of test rows).
    margin = 3.0 / np.sqrt(I)
    final = c[c["figure"] != "reference"].groupby("method")["recall"].last()
    for method in ("S-Biased", "SIBM-auto", "batch VB"):
        assert final[method] > ref["recall"].iloc[0] + margin, (method, final.to_dict(), margin)
    with pytest.raises(ValueError, match="strategies"):
        ie.sibm_recall_curves(split, strategies=("stratified",))
    with pytest.raises(ValueError, match="passes"):
        ie.sibm_recall_curves(split, passes=0)


def test_recall_curves_write_csv_png_and_the_cli_runs_them(tmp_path, monkeypatch, capsys):
    import functools

    from validation.frontdoor import cli

    df = _synthetic_ratings(I=80, J=40)
    small = dict(D=2, strategies=("biased",), auto=False, n_points=2)  # the compiled code of the test above
    res = ie.recall_curves(df, data=("ratings",), passes=1, out_dir=tmp_path, **small)
    assert set(res.curves["data"]) == {"ratings"}
    assert list(res.summary["method"]) == ["S-Biased", "batch VB", "popularity"]
    back = pd.read_csv(res.csv)
    assert len(back) == len(res.curves) and np.allclose(back["recall"], res.curves["recall"])
    assert res.plots["ratings"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "recall_curves_ratings.png" in res.report.read_text()
    with pytest.raises(ValueError, match="data"):
        ie.recall_curves(df, data=("netflix",))
    with pytest.raises(ValueError, match="df"):
        ie.recall_curves(None, data=("ratings",))
    # the CLI calls exactly recall_curves (made cheap here) and stops after it with --curves-only
    monkeypatch.setattr(ie, "recall_curves", functools.partial(ie.recall_curves, **small))
    path = tmp_path / "u.data"
    df.assign(timestamp=0).to_csv(path, sep="\t", header=False, index=False)
    out = tmp_path / "cli"
    code = cli.main(["evaluate", "implicit", "--data", str(path), "--curves-only", "--curve-data", "ratings",
                     "--curve-passes", "1", "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "S-Biased" in printed and "batch VB" in printed and "recall_curves.csv" in printed
    assert (out / "recall_curves.csv").exists() and (out / "recall_curves_ratings.png").exists()
    assert not (out / "report.md").exists()  # no comparison table with --curves-only


# ---------------------------------------------------------------------------
# basket data (issue 12): load_implicit_data, the "baskets" protocol, the PSM system
# ---------------------------------------------------------------------------


def _planted_baskets(seed=0, n_baskets=120, n_items=24):
    """Two basket kinds x two item groups: a basket holds 3-6 items, each from its own group with
    probability 0.9; item popularity within a group is Zipf-like. Returns list of lists of item ids."""
    rng = np.random.default_rng(seed)
    group = np.arange(n_items) % 2
    w = 1.0 / (1.0 + np.arange(n_items) // 2)
    out = []
    for b in range(n_baskets):
        kind = b % 2
        p = w * np.where(group == kind, 0.9, 0.1)
        out.append(sorted(rng.choice(n_items, size=int(rng.integers(3, 7)), replace=False, p=p / p.sum()).tolist()))
    return out, group


def test_load_implicit_data_reads_fimi_and_basket_csv(tmp_path):
    fimi = tmp_path / "tiny.dat"
    fimi.write_text("1 2 3 \n2 5\n7\n1 3 5 7\n")
    table, label, is_baskets = ie.load_implicit_data(str(fimi))  # auto: a .dat of integers is FIMI
    assert is_baskets and label == str(fimi)
    assert list(table.columns) == ["user", "item", "rating", "timestamp"]
    assert len(table) == 3 + 2 + 1 + 4 and (table["rating"] == 1.0).all()
    assert ie.load_implicit_data(str(fimi), format="fimi")[2]
    sub, label, _ = ie.load_implicit_data(str(fimi), max_baskets=2, seed=1)
    assert sub["user"].nunique() == 2 and "random 2 of 4 baskets, seed 1" in label
    again, _, _ = ie.load_implicit_data(str(fimi), max_baskets=2, seed=1)
    pd.testing.assert_frame_equal(sub, again)  # seeded
    csv = tmp_path / "shop.csv"
    csv.write_text("milk,bread\nbeer\nmilk,eggs,beer\n")
    table, _, is_baskets = ie.load_implicit_data(str(csv))  # varying field counts: named-item baskets
    assert is_baskets and table["user"].nunique() == 3 and set(table["item"]) == {"milk", "bread", "beer", "eggs"}
    with pytest.raises(FileNotFoundError):
        ie.load_implicit_data(str(tmp_path / "missing.dat"))
    with pytest.raises(ValueError, match="format"):
        ie.load_implicit_data(str(fimi), format="parquet")
    with pytest.raises(ValueError, match="ml-100k"):
        ie.load_implicit_data("ml-100k", format="fimi")
    with pytest.raises(ValueError, match="max_baskets"):
        ie.load_implicit_data(str(fimi), max_baskets=0)


def test_ratings_files_are_not_baskets(tmp_path):
    udata = tmp_path / "u.data"
    udata.write_text("1\t10\t5\t881250949\n1\t20\t4\t881250950\n2\t10\t3\t881250951\n")
    table, _, is_baskets = ie.load_implicit_data(str(udata))
    assert not is_baskets and len(table) == 3


def test_evaluate_implicit_on_baskets_with_psm(tmp_path):
    """The leave-one-item-out protocol on baskets, with PSM (eq. 5 scores) next to popularity: on a planted
    two-kind structure PSM's rank score must beat popularity's (popularity ignores the basket's kind)."""
    baskets, _ = _planted_baskets()
    path = tmp_path / "planted.dat"
    path.write_text("\n".join(" ".join(str(i) for i in b) for b in baskets) + "\n")
    table, _, is_baskets = ie.load_implicit_data(str(path))
    assert is_baskets
    psm_system = ie.model_systems(psm={"K": 2, "max_iter": 60, "tol": 1e-7}, dtype=np.float64)["PSM"]
    systems = {"popularity": lambda train, seed: metrics.popularity_score_fn(train), "PSM": psm_system}
    res = ie.evaluate_implicit(table, systems, baskets=True, seed=0, out_dir=tmp_path / "out")
    t = res.table.set_index("system")
    assert list(t["protocol"].unique()) == ["baskets"]
    assert (t["n_users"] == len(baskets)).all()  # every planted basket has >= 3 distinct items
    assert (t["J"] == 24).all()
    assert t.loc["PSM", "rank_score_users"] > t.loc["popularity", "rank_score_users"] + 0.05, t
    assert (tmp_path / "out" / "rank_by_user_degree.png").stat().st_size > 0
    with pytest.raises(ValueError, match="need ratings"):
        ie.evaluate_implicit(table, systems, protocols=("P1",), baskets=True)


def test_model_systems_include_psm():
    systems = ie.model_systems()
    assert list(systems)[-1] == "PSM"
    assert not getattr(systems["PSM"], "scores_like_probability", False)  # eq. 5 is not a like probability
    with pytest.raises(ValueError, match="psm"):
        ie.model_systems(psm={"D": 3})
