"""Top-N from counts on P3 (`validation.evaluation.counts_eval`): EASE^R against a brute-force solve and a
planted structure, tuning that never sees the test split, the FM entity scores against the FM
itself, the whole evaluation on a small count table, and the CLI dispatch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from custom_inference.data import Observations
from validation.frontdoor import cli
from validation.evaluation import counts_eval


def _obs(X) -> Observations:
    return Observations.from_scipy(sp.csr_matrix(np.asarray(X, float)), kind="count")


def _block_table(seed=0, n_users=48, n_items=160, density=0.35):
    """Two user groups, each rating a random ``density`` share of its half of the items (counts 1-5),
    plus a few ratings outside its half."""
    rng = np.random.default_rng(seed)
    rows = []
    half = n_items // 2
    for u in range(n_users):
        own = np.arange(half) if u < n_users // 2 else np.arange(half, n_items)
        items = own[rng.random(own.size) < density]
        other = np.setdiff1d(np.arange(n_items), own)
        items = np.r_[items, rng.choice(other, 2, replace=False)]
        rows += [(f"u{u}", 1000 + int(i), int(rng.integers(1, 6))) for i in items]
    rng.shuffle(rows)
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


# ------------------------------------------------------------------------------
# EASE^R


def test_ease_equals_the_brute_force_ridge_solve_per_column():
    rng = np.random.default_rng(3)
    X = (rng.random((30, 8)) < 0.4) * rng.integers(1, 4, (30, 8))
    for values, Xv in (("binary", (X > 0).astype(float)), ("count", X.astype(float))):
        lam = 2.5
        B = counts_eval.ease_fit(_obs(X), lam, values=values)
        assert B.shape == (8, 8) and np.all(np.diag(B) == 0)
        for j in range(8):  # min ||x_j - X_-j b||^2 + lam ||b||^2, independently per column
            o = np.delete(np.arange(8), j)
            b = np.linalg.solve(Xv[:, o].T @ Xv[:, o] + lam * np.eye(7), Xv[:, o].T @ Xv[:, j])
            np.testing.assert_allclose(B[o, j], b, rtol=1e-10, atol=1e-12)
        S = counts_eval.ease_scores(_obs(X), B, np.array([4, 0]), values=values)
        np.testing.assert_allclose(S, Xv[[4, 0]] @ B)


def test_ease_recovers_the_planted_items():
    # users 0-19 consume 4 of items 0-5, users 20-39 4 of items 6-11: the 2 unconsumed items of the
    # user's own block must be the top-2 unconsumed items
    rng = np.random.default_rng(0)
    X = np.zeros((40, 12))
    for u in range(40):
        block = np.arange(6) if u < 20 else np.arange(6, 12)
        X[u, rng.choice(block, 4, replace=False)] = 1
    fn = counts_eval.ease_score_fn(_obs(X), 1.0)
    S = fn(np.arange(40))
    for u in range(40):
        cand = np.flatnonzero(X[u] == 0)
        top2 = cand[np.argsort(-S[u, cand], kind="stable")[:2]]
        block = set(range(6)) if u < 20 else set(range(6, 12))
        assert set(top2) <= block and set(top2) == block - set(np.flatnonzero(X[u]))
    with pytest.raises(ValueError, match="lam"):
        counts_eval.ease_fit(_obs(X), 0.0)
    with pytest.raises(ValueError, match="values"):
        counts_eval.ease_fit(_obs(X), 1.0, values="stars")


def test_validation_split_is_carved_from_the_training_entries():
    obs = _obs(np.random.default_rng(1).integers(0, 3, (20, 15)))
    vs = counts_eval.validation_split(obs, fraction=0.25, seed=4)
    tr = set(zip(np.asarray(vs.train.rows), np.asarray(vs.train.cols)))
    va = set(zip(np.asarray(vs.test.rows), np.asarray(vs.test.cols)))
    assert not tr & va and tr | va == set(zip(np.asarray(obs.rows), np.asarray(obs.cols)))
    assert len(va) == round(0.25 * obs.nnz)
    again = counts_eval.validation_split(obs, fraction=0.25, seed=4)
    np.testing.assert_array_equal(np.asarray(again.test.rows), np.asarray(vs.test.rows))
    with pytest.raises(ValueError, match="fraction"):
        counts_eval.validation_split(obs, fraction=1.0)


def test_lambda_is_chosen_without_the_test_split():
    df = _block_table(seed=2)
    n = len(df)
    test_rows = np.random.default_rng(0).permutation(n)[: round(0.2 * n)]  # P3, seed 0, file order
    # move every test rating to another item the user never rated: same training split, other test split
    df2 = df.copy()
    rng = np.random.default_rng(5)
    rated = {u: set(g) for u, g in df.groupby("user")["item"]}
    for r in test_rows:
        u = df2.at[r, "user"]
        free = sorted(set(df["item"]) - rated[u])
        new = free[rng.integers(len(free))]
        rated[u].add(new)
        df2.at[r, "item"] = new
    assert set(df2["item"]) == set(df["item"]) and not df2.duplicated(["user", "item"]).any()
    kw = dict(systems=["ease"], K=3, progress=False, ease_lambdas=(0.3, 3.0, 30.0, 300.0))
    a = counts_eval.evaluate_counts(df, **kw)
    b = counts_eval.evaluate_counts(df2, **kw)
    pd.testing.assert_frame_equal(a.tuning["ease"].drop(columns="seconds"), b.tuning["ease"].drop(columns="seconds"))
    assert a.table["setting"].iloc[0] == b.table["setting"].iloc[0]
    assert a.tuning["ease"]["chosen"].sum() == 1
    assert a.table["recall"].iloc[0] != b.table["recall"].iloc[0]  # the test split did change
    # the planted blocks make EASE^R beat popularity on the test split
    c = counts_eval.evaluate_counts(df, **{**kw, "systems": ["popularity", "ease"]})
    rec = c.table.set_index("system")["recall"]
    assert rec["ease"] > rec["popularity"]


# ------------------------------------------------------------------------------
# factorization machines


def test_fm_entity_scores_equal_the_fm_prediction_averaged_over_draws():
    from custom_inference import fm_sgd

    rng = np.random.default_rng(0)
    I, J, S, K = 5, 7, 3, 2
    Uf = sp.csr_matrix((rng.random((I, 3)) < 0.5) * 1.0)
    Vf = sp.csr_matrix((rng.random((J, 2)) < 0.5) * rng.uniform(0.5, 2, (J, 2)))
    ent = counts_eval.entity_features(I, J, (Uf, np.array([0, 0, 1]), Vf, np.array([0, 0]),
                                             ("user", "item", "a", "b", "genre")))
    A, B, group, names = ent
    D = A.shape[1]
    assert D == I + J + 5 and group.max() == 4 and len(names) == 5
    w0, w, V = rng.normal(size=S), rng.normal(size=(S, D)), rng.normal(size=(S, D, K))
    users = np.array([3, 0, 4])
    got = counts_eval.fm_score_fn(w0, w, V, ent)(users)
    u, i = np.repeat(users, J), np.tile(np.arange(J), users.size)
    X = sp.coo_matrix(A[u] + B[i])
    want = np.mean([np.asarray(fm_sgd.predict({"w0": w0[s], "w": w[s], "V": V[s]},
                                              (X.row, X.col, X.data, u.size))) for s in range(S)], axis=0)
    np.testing.assert_allclose(got, want.reshape(users.size, J), rtol=1e-9, atol=1e-9)
    obs = Observations.from_coo(np.array([0, 2]), np.array([1, 6]), np.array([3.0, 1.0]), (I, J))
    design = counts_eval.fm_design(obs, ent)
    np.testing.assert_allclose(design.to_dense(), (A[[0, 2]] + B[[1, 6]]).toarray())
    np.testing.assert_array_equal(np.asarray(design.y), [3.0, 1.0])


# ------------------------------------------------------------------------------
# the whole evaluation


def test_evaluate_counts_runs_end_to_end_on_a_small_count_table(tmp_path):
    df = _block_table(seed=1, n_users=30, n_items=150)
    # every system but PPFM (the NPFM runner with variant="ppfm"; `validation.evaluation.pfm_experiments.evaluate_p3` is tested there)
    systems = [s for s in counts_eval.SYSTEMS if s != "ppfm"]
    settings = {"npfm": {"warmup": 2, "samples": 2, "thin": 1}, "hpf": {"max_iter": 3},
                "mcmc-fm": {"warmup": 1, "samples": 2}, "sgd-fm": {"epochs": 1, "learning_rates": (0.01,),
                                                                  "regs": (0.01, 0.1)}}
    res = counts_eval.evaluate_counts(df, systems=systems, K=3, seed=0, out_dir=tmp_path, progress=False,
                                      settings=settings, ease_lambdas=(1.0, 10.0))
    t = res.table
    assert list(t["system"].unique()) == systems
    assert (t["system"] == "npfm").sum() == 2  # posterior mean, plug-in
    for col in ("precision", "recall", "f_measure", "ndcg", "ndcg_log2k1"):
        assert t[col].between(0, 1).all(), col
    assert (t["n_users"] == t["n_users"].iloc[0]).all() and (t["fit_seconds"] >= 0).all()
    assert set(res.tuning) == {"ease", "sgd-fm"} and len(res.tuning["sgd-fm"]) == 2
    assert all(tab["chosen"].sum() == 1 for tab in res.tuning.values())
    assert "n_active_mean" in res.extras["npfm"]
    # the overrides reached the runners (their rows and settings texts), the declared defaults the rest
    it = t.set_index("method")["iterations"]
    assert it["HPF (CAVI)"] == 3 and it["MCMC-FM"] == 3 and it["SGD-FM"] == 1
    assert (t[t.system == "npfm"]["iterations"] == 2 + 2).all()  # warmup 2 + 2 samples x thin 1
    assert "SGD-FM searched eta in [0.01] x lambda_w = lambda_v in [0.01, 0.1], 1 epochs, batch 1" in res.notes
    report = res.report.read_text()
    assert "EASE^R" in report and "validation split" in report and "SGD-FM" in report
    with pytest.raises(ValueError, match="unknown"):
        counts_eval.evaluate_counts(df, systems=["ease", "bpr"], progress=False)
    with pytest.raises(ValueError, match="unknown settings"):
        counts_eval.evaluate_counts(df, systems=["ease"], progress=False, warmup=3)
    with pytest.raises(ValueError, match="ease_lambdas"):
        counts_eval.evaluate_counts(df, systems=["ease"], progress=False, ease_lambdas=(-1.0,))
    with pytest.raises(ValueError, match=r"npfm: unknown settings \['pfm_warmup'\].*'warmup'"):
        counts_eval.evaluate_counts(df, systems=["ease"], progress=False, settings={"npfm": {"pfm_warmup": 2}})
    with pytest.raises(ValueError, match=r"settings for \['ease'\]"):  # a baseline declares no settings
        counts_eval.CountsConfig(settings={"ease": {"lam": 1.0}})
    with pytest.raises(ValueError, match="learning_rates"):
        counts_eval.tune_sgd_fm(_obs(np.ones((4, 5))), None, settings={"learning_rates": (), "regs": (0.1,),
                                                                     "epochs": 1, "batch_size": 1})


def test_a_configs_K_and_seed_win_unless_the_caller_passes_them():
    """Before: ``evaluate_counts(config=CountsConfig(K=10))`` ran with K = 50 (the keyword's default replaced the
    config's); now K and seed replace the config's only when given."""
    df = _block_table(seed=1, n_users=20, n_items=60)
    kw = dict(systems=["popularity"], progress=False)
    res = counts_eval.evaluate_counts(df, config=counts_eval.CountsConfig(K=10, seed=3), **kw)
    assert "K = 10;" in res.notes[1] and res.notes[0].startswith("P3, seed 3:")
    res = counts_eval.evaluate_counts(df, config=counts_eval.CountsConfig(K=10, seed=3), K=7, seed=0, **kw)
    assert "K = 7;" in res.notes[1] and res.notes[0].startswith("P3, seed 0:")
    res = counts_eval.evaluate_counts(df, **kw)
    assert "K = 50;" in res.notes[1] and res.notes[0].startswith("P3, seed 0:")  # no config: CountsConfig()'s


def test_counts_settings_are_declared_once_for_both_feature_sets():
    """Every counts runner declares its settings; a NAME+side run declares (and gets) NAME's."""
    from validation.models import catalog

    declared = counts_eval.declared_settings()
    assert list(declared) == list(counts_eval.systems()[len(counts_eval.BASELINES):])
    for _, system, entry in catalog.evaluation_declarations("counts+side"):
        assert entry.get_defaults() == declared[system]
    for _, system, entry in catalog.evaluation_declarations("counts"):
        assert declared[system] and set(entry.flags.values()) <= set(declared[system])
    cfg = counts_eval.CountsConfig(settings={"mcmc-fm": {"samples": 7}})
    assert cfg.settings_for("mcmc-fm+side") == cfg.settings_for("mcmc-fm") == {**declared["mcmc-fm"], "samples": 7}


def test_side_feature_systems_are_added_after_their_base():
    assert counts_eval._resolve_systems(["ease", "npfm", "mcmc-fm"], True) == [
        "ease", "npfm", "npfm+side", "mcmc-fm", "mcmc-fm+side"]
    assert counts_eval._resolve_systems(["npfm+side"], False) == ["npfm+side"]


# ------------------------------------------------------------------------------
# command line


def test_cli_dispatches_evaluate_counts(tmp_path, capsys, monkeypatch):
    seen = {}

    def fake(df, **kw):
        seen.update(kw)
        table = pd.DataFrame([{"method": "EASE^R", "system": "ease", "features": "ids", "precision": 0.5,
                               "recall": 0.25}])
        return counts_eval.CountsEvaluation(table=table, tuning={"ease": pd.DataFrame({"lam": [1.0]})},
                                            report=tmp_path / "report.md")

    df = _block_table(n_users=6, n_items=20)
    monkeypatch.setattr(cli, "_load_data", lambda spec: (df, str(tmp_path)))
    monkeypatch.setattr(counts_eval, "evaluate_counts", fake)
    code = cli.main(["evaluate", "counts", "--data", "ml-100k", "--systems", "ease", "npfm", "--k", "50",
                     "--side-features", "--pfm-warmup", "7", "--ease-lambdas", "1", "10", "--out", str(tmp_path),
                     "--fm-samples", "3", "--sgd-regs", "0.5", "--epochs", "4", "--max-iter", "9",
                     "--set", "ppfm.thin=5", "--set", "npfm.samples=11", "--no-progress"])
    assert code == 0
    assert seen["systems"] == ["ease", "npfm"] and seen["K"] == 50 and seen["side_features"] is True
    # each old flag reaches the runners that used its field (npfm and ppfm for --pfm-*), --set any setting
    assert seen["settings"] == {"hpf": {"max_iter": 9}, "mcmc-fm": {"samples": 3},
                                "sgd-fm": {"epochs": 4, "regs": (0.5,)}, "npfm": {"warmup": 7, "samples": 11},
                                "ppfm": {"warmup": 7, "thin": 5}}
    assert seen["ease_lambdas"] == (1.0, 10.0) and seen["out_dir"] == tmp_path
    counts_eval.CountsConfig(settings=seen["settings"])  # what the CLI builds is a valid config
    out = capsys.readouterr().out
    assert "EASE^R" in out and "validation split" in out and "Report:" in out
    # the real evaluation refuses an unknown system name with exit status 2, before any fit
    monkeypatch.undo()
    monkeypatch.setattr(cli, "_load_data", lambda spec: (df, str(tmp_path)))
    assert cli.main(["evaluate", "counts", "--systems", "nope", "--no-progress"]) == 2
    assert "unknown" in capsys.readouterr().err
