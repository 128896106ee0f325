"""EASE^R beside every protocol and differences with intervals (validation/evaluation/baselines.py,
validation/evaluation/intervals.py): the closed form against a brute-force dense solve, the size bound,
lambda chosen without the test split, bootstrap coverage on scorers with a known difference, and the
CLI's basket evaluation with the ease row and the interval columns."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from custom_inference.data import Observations
from validation.data.splits import ImplicitSplit
from validation.evaluation import baselines, implicit_eval, intervals, metrics, model_studies
from validation.frontdoor import cli


def _binary(X) -> Observations:
    return Observations.from_scipy(sp.csr_matrix(np.asarray(X, float)), kind="binary")


def _planted(seed=0, I=120, J=40, groups=4, p_in=0.45, p_out=0.03):
    """Users and items in ``groups`` blocks: a one with p_in inside the user's block, p_out outside."""
    rng = np.random.default_rng(seed)
    gu, gi = rng.integers(0, groups, I), np.arange(J) % groups
    X = (rng.random((I, J)) < np.where(gu[:, None] == gi[None, :], p_in, p_out)).astype(float)
    X[np.arange(I), rng.integers(0, J, I)] = 1.0
    X[np.arange(I), (np.arange(I) * 7) % J] = 1.0  # at least 2 ones a row (almost always more)
    return X


# ------------------------------------------------------------------------------
# EASE^R


def test_ease_equals_a_brute_force_dense_solve_of_the_constrained_problem():
    """B minimises ||X - X B||^2 + lam ||B||^2 with diag(B) = 0: solved here as one dense KKT system over
    all J^2 entries (Lagrange multipliers for the diagonal), independent of the closed form."""
    rng = np.random.default_rng(7)
    X = (rng.random((25, 6)) < 0.45).astype(float)
    X[0] = 1.0
    J, lam = X.shape[1], 1.7
    G = X.T @ X
    # vec(B) column-major: the gradient 2 (G + lam I) B - 2 G + diag multipliers = 0, diag(B) = 0
    H = np.kron(np.eye(J), G + lam * np.eye(J))
    diag = np.zeros((J, J * J))
    diag[np.arange(J), np.arange(J) * J + np.arange(J)] = 1.0
    kkt = np.block([[H, diag.T], [diag, np.zeros((J, J))]])
    rhs = np.r_[G.reshape(-1, order="F"), np.zeros(J)]
    B_ref = np.linalg.solve(kkt, rhs)[: J * J].reshape(J, J, order="F")
    B = baselines.ease_fit(_binary(X), lam)
    np.testing.assert_allclose(B, B_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(baselines.ease_score_fn(_binary(X), lam)(np.array([3, 1])), X[[3, 1]] @ B_ref,
                               rtol=1e-9, atol=1e-12)


def test_ease_above_the_item_bound_is_skipped_with_its_reason():
    X = _planted(I=30, J=12)
    with pytest.raises(baselines.SkippedSystem, match="J = 12 items > 10"):
        baselines.ease_fit(_binary(X), 10.0, max_items=10)
    assert baselines.ease_skip_reason(baselines.EASE_MAX_ITEMS) is None
    assert "20001" in baselines.ease_skip_reason(baselines.EASE_MAX_ITEMS + 1)
    train = _binary(X)
    split = ImplicitSplit(train, np.array([0]), np.array([int(np.flatnonzero(X[0] == 0)[0])]), None)
    systems = {"popularity": lambda tr, s: metrics.popularity_score_fn(tr), "ease": baselines.ease_system(max_items=10)}
    res = implicit_eval.evaluate_implicit(None, systems, protocols={"P": split})
    row = res.table.set_index("system").loc["ease"]
    assert np.isnan(row["recall@10"]) and "skipped" in row["setting"] and any("skipped" in n for n in res.notes)
    assert res.table.set_index("system").loc["popularity", "vs"] == "popularity"


def test_lambda_search_extends_past_the_edges_of_the_grid_only_while_an_edge_wins():
    crit = lambda peak: (lambda fn: {"v": -abs(np.log(fn) / np.log(10) - peak)})  # noqa: E731
    lam, t = baselines.tune_lambda(lambda lam: lam, crit(4.7), (10.0, 100.0, 1000.0), "v", extend=2)
    assert list(t["lam"]) == [10.0, 100.0, 1000.0, 1e4, 1e5] and lam == 1e5  # still at the edge: stops at 2 more
    lam, t = baselines.tune_lambda(lambda lam: lam, crit(3.2), (10.0, 100.0, 1000.0), "v", extend=2)
    assert list(t["lam"]) == [10.0, 100.0, 1000.0, 1e4] and lam == 1e3 and t["chosen"].sum() == 1  # 1e4 lost
    lam, t = baselines.tune_lambda(lambda lam: lam, crit(2.2), (10.0, 100.0, 1000.0), "v", extend=2)
    assert len(t) == 3 and lam == 100.0
    lam, t = baselines.tune_lambda(lambda lam: lam, crit(0.4), (10.0, 100.0, 1000.0), "v", extend=2)
    assert list(t["lam"]) == [10.0, 100.0, 1000.0, 1.0, 0.1] and lam == 1.0  # the lower edge: 1 won, 0.1 lost
    # ... and stops when the extension loses (crit 0.8: 10 wins the grid, 1 loses)
    assert list(baselines.tune_lambda(lambda lam: lam, crit(0.8), (10.0, 100.0, 1000.0), "v", extend=2)[1]["lam"]) == [
        10.0, 100.0, 1000.0, 1.0]
    with pytest.raises(ValueError, match="select_by"):
        baselines.tune_lambda(lambda lam: lam, crit(2.0), (1.0,), "w")


def test_lambda_is_chosen_without_reading_the_test_split():
    """Two splits with the same training matrix and different (poisoned) test items: the same lambda and
    the same validation curve, while the test metrics do change."""
    X = _planted(seed=3)
    I, J = X.shape
    rng = np.random.default_rng(0)
    users = np.arange(I)
    test_items = np.array([rng.choice(np.flatnonzero(X[u] == 1)) for u in users])
    Xtr = X.copy()
    Xtr[users, test_items] = 0.0
    train = _binary(Xtr)
    poisoned = np.array([rng.choice(np.flatnonzero(Xtr[u] == 0)) for u in users])  # other non-training items
    assert np.any(poisoned != test_items)
    splits = {"true": ImplicitSplit(train, users, test_items, None), "poisoned": ImplicitSplit(train, users, poisoned, None)}
    grid = (0.3, 3.0, 30.0, 300.0)
    res = implicit_eval.evaluate_implicit(None, {"ease": baselines.ease_system(grid)}, protocols=splits, seed=4)
    a, b = res.tuning[("true", "ease")], res.tuning[("poisoned", "ease")]
    pd.testing.assert_frame_equal(a.drop(columns="seconds"), b.drop(columns="seconds"))
    assert a["chosen"].sum() == 1
    t = res.table.set_index("protocol")
    assert t.loc["true", "setting"] == t.loc["poisoned", "setting"]
    assert t.loc["true", "rank_score_users"] != t.loc["poisoned", "rank_score_users"]
    # and the validation split is carved from train: its pairs are training ones, none of the test pairs
    val = model_studies.validation_split(train, seed=[4, 1])
    assert np.all(Xtr[val.test_users, val.test_items] == 1) and val.indexed is None


# ------------------------------------------------------------------------------
# intervals


def _pair_of_scorers(rng, T, J, p_a, p_b, share):
    """Per-user tables of two scorers on a split of T users x J items: scorer a ranks the held-out item
    first with probability p_a (else last), b with p_b, coupled through a shared uniform for a ``share``
    of the users. Each per-user rank score / HR@10 is 1 or 0; the true mean difference is p_a - p_b."""
    train = Observations.from_coo(np.arange(T), np.zeros(T, int), np.ones(T), (T, J), kind="binary")
    split = ImplicitSplit(train, np.arange(T), np.full(T, 1), None)
    u = rng.random(T)
    v = np.where(rng.random(T) < share, u, rng.random(T))
    out = {}
    for name, hit in (("model", u < p_a), ("popularity", v < p_b)):
        S = np.tile(np.linspace(1, 0, J), (T, 1))  # item 1 second from the top ...
        S[:, 1] = np.where(hit, 2.0, -1.0)  # ... moved to the top or the bottom
        out[name] = metrics.leave_one_out_metrics(lambda users, S=S: S[users], split, n=10)
    return out


def test_paired_bootstrap_interval_covers_a_known_difference_at_the_nominal_rate():
    rng = np.random.default_rng(11)
    n_rep, T = 800, 150
    p_a, p_b = 0.5, 0.35
    covered = 0
    for r in range(n_rep):
        pu = _pair_of_scorers(rng, T, 15, p_a, p_b, share=0.9)
        comp = intervals.compare(pu, ["hit", "rank_score"], main="hit", baselines=("popularity",),
                                 n_resamples=500, seed=r)
        d = comp.differences.set_index("metric").loc["hit"]
        covered += d["ci_low"] <= p_a - p_b <= d["ci_high"]
    cov = covered / n_rep
    print(f"coverage {cov:.4f} over {n_rep} replications")
    # binomial MC error of the coverage at 95 %: sqrt(0.95 * 0.05 / 800) = 0.0077; 3.5 of it (0.027) either
    # side, and below another 0.01 for the percentile interval's small-sample undercoverage at T = 150:
    # [0.913, 0.977]. Unpaired resampling fails it: with 90 % of the users coupled the per-user variance of
    # the difference is 0.1625 against 0.4775 unpaired, so the unpaired interval is ~1.7 times as wide
    # and covers ~0.999 (measured 0.987 with 80 % coupled, 300 replications)
    mc = 3.5 * np.sqrt(0.95 * 0.05 / n_rep)
    assert 0.95 - mc - 0.01 <= cov <= 0.95 + mc, cov


def test_compare_estimates_standard_errors_verdicts_and_refusals():
    rng = np.random.default_rng(2)
    pu = _pair_of_scorers(rng, 400, 12, 0.6, 0.2, share=0.5)
    comp = intervals.compare(pu, ["hit", "rank_score", "ndcg"], main="hit", baselines=("popularity", "ease"))
    s = comp.summary.set_index("system")
    for name, df in pu.items():
        assert s.loc[name, "hit"] == pytest.approx(df["hit"].mean())
        assert s.loc[name, "hit_se"] == pytest.approx(df["hit"].std(ddof=1) / np.sqrt(len(df)))
    d = comp.differences.set_index("metric").loc["hit"]
    assert comp.best_baseline == "popularity" and d["verdict"] == "better" and d["ci_low"] > 0
    # RMSE pooled over ratings: the estimate is the RMSE of all test ratings, lower is better
    users = np.repeat(np.arange(50), 3)
    truth = rng.normal(size=users.size)
    sq = {"model": intervals.squared_errors(users, truth + 0.1 * rng.normal(size=users.size), truth),
          "item mean": intervals.squared_errors(users, np.zeros(users.size), truth)}
    rc = intervals.compare(sq, ["rmse"], main="rmse", baselines=("item mean",), lower_is_better=("rmse",),
                           rmse={"rmse": "n_ratings"})
    assert rc.summary.set_index("system").loc["item mean", "rmse"] == pytest.approx(metrics.rmse(np.zeros(150), truth))
    assert rc.differences["verdict"].iloc[0] == "better" and rc.differences["ci_high"].iloc[0] < 0
    assert intervals.verdict(-0.1, 0.2) == "no difference"
    with pytest.raises(ValueError, match="not paired"):
        intervals.compare({"a": pu["model"], "b": pu["popularity"].iloc[1:]}, ["hit"], main="hit")
    with pytest.raises(ValueError, match="main"):
        intervals.compare(pu, ["hit"], main="ndcg")


# ------------------------------------------------------------------------------
# the CLI on a basket file


def test_cli_evaluate_implicit_on_a_basket_file_prints_ease_and_the_intervals(tmp_path, capsys):
    rng = np.random.default_rng(5)
    lines = []
    for b in range(240):  # three kinds of baskets over 30 items, plus a random extra item
        g = b % 3
        items = set(rng.choice(np.arange(10 * g, 10 * g + 10), rng.integers(2, 6), replace=False)) | {rng.integers(30)}
        lines.append(" ".join(str(i) for i in sorted(items)) + " ")
    path = tmp_path / "baskets.dat"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code = cli.main(["evaluate", "implicit", "--data", str(path), "--systems", "popularity", "ease",
                     "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    table = next(line for line in printed.splitlines() if line.startswith("| protocol"))
    for col in ("recall@10_se", "rank_score_users_se", "vs", "diff", "ci_low", "ci_high", "verdict"):
        assert f" {col} " in table
    ease = next(line for line in printed.splitlines() if line.startswith("| baskets") and "| ease " in line)
    assert "baskets ease: lambda = " in printed and "paired bootstrap" in printed
    pop = next(line for line in printed.splitlines() if line.startswith("| baskets") and "| popularity " in line)
    assert ("better" in pop or "worse" in pop or "no difference" in pop) and ease
    report = (out / "report.md").read_text()
    assert "| ease " in report and "validation split of the training matrix" in report
