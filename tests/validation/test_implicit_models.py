"""The SIBM and RG systems of the one-class comparison, and `factorbayes evaluate implicit`."""

import numpy as np
import pandas as pd
import pytest

from ppl_models import rg as ppl_rg
from validation.frontdoor import cli
from validation.data import datasets
from validation.evaluation import implicit_eval as ie


def _planted_ratings(seed=0, I=40, J=30):
    """Two user groups x two item groups; ratings 5 inside a user's own group, 2 elsewhere, on 40% of cells."""
    rng = np.random.default_rng(seed)
    gu, gi = rng.integers(0, 2, I), rng.integers(0, 2, J)
    u, i = np.nonzero(rng.random((I, J)) < 0.4)
    r = np.where(gu[u] == gi[i], 5.0, 2.0)
    return pd.DataFrame({"user": u + 1, "item": i + 1, "rating": r, "timestamp": 0})


def test_model_systems_names_and_bad_overrides():
    names = list(ie.model_systems())
    assert names == ["SIBM batch VB", "SIBM S-Uniform", "SIBM S-Balanced", "SIBM S-Biased", "SIBM MAP", "RG like",
                     "RG popularity x like", "RG like (r=1)", "RG popularity x like (r=1)", "PSM"]
    assert list(ie.model_systems(rg={"second_r": None}))[-3:-1] == ["RG like", "RG popularity x like"]
    assert list(ie.model_systems(rg={"second_r": 0.25}))[-2] == "RG popularity x like (r=0.25)"
    with pytest.raises(ValueError, match="sibm"):
        ie.model_systems(sibm={"rank": 3})
    with pytest.raises(ValueError, match="rg"):
        ie.model_systems(rg={"D": 3})


def test_sibm_system_ranks_a_planted_structure_above_chance():
    split = datasets.split_leave_one_out(_planted_ratings(), seed=0)
    systems = ie.model_systems(sibm={"D": 2, "batch_max_iter": 30}, dtype=np.float64)
    ev = ie.evaluate_implicit(None, {"SIBM batch VB": systems["SIBM batch VB"]}, protocols={"planted": split})
    # a held-out positive lies in the user's own item group: a model that found the groups scores about 0.75;
    # chance is 0.5 with a standard error of about 0.29 / sqrt(40) = 0.05: "> 0.65" is 3 standard errors above chance
    assert float(ev.table.rank_score_users.iloc[0]) > 0.65, ev.table


def test_rg_systems_score_like_and_popularity_times_like():
    # (RG's VB shrinks every factor to zero on data this small -- see validation.models.rg -- so only the glue is
    # checked here; RG against popularity on MovieLens is the slow test of test_rg_validation.py)
    from custom_inference import rg

    split = datasets.split_leave_one_out(_planted_ratings(), seed=0)
    systems = ie.model_systems(rg={"K": 2, "max_iter": 5}, dtype=np.float64)
    users = np.arange(5)
    like = systems["RG like"](split.train, 0)(users)
    both = systems["RG popularity x like"](split.train, 0)(users)
    assert like.shape == both.shape == (5, split.train.n_cols) and np.all((like > 0) & (like < 1))
    pi, _ = rg.popularity_weights(split.train, 0.5)
    np.testing.assert_allclose(both, like * pi[None, :], rtol=1e-12)  # same seed: the same fit under both names


def test_cli_evaluate_implicit_with_a_subset(tmp_path, capsys):
    path = tmp_path / "u.data"
    _planted_ratings(seed=1).to_csv(path, sep="\t", header=False, index=False)
    out = tmp_path / "out"
    code = cli.main(["evaluate", "implicit", "--data", str(path), "--protocols", "P1", "--systems", "popularity",
                     "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "popularity" in printed and "recall@10" in printed
    assert (out / "report.md").exists()
    assert cli.main(["evaluate", "implicit", "--data", str(path), "--systems", "ALS", "--no-progress"]) == 2
    assert "--systems" in capsys.readouterr().err


def test_rg_like_error_by_user_degree_and_the_second_r(tmp_path):
    """Seed 003 fig. 4 glue: the classification error of the held-out (liked) edges, p(g = 1 | h = 1) < 1/2,
    per user and by user degree, for the like systems only; and the systems at the second r are other fits."""
    from custom_inference import rg

    df = _planted_ratings(seed=2, I=60, J=30)
    split = datasets.split_leave_one_out(df, seed=0)
    systems = ie.model_systems(rg={"K": 2, "max_iter": 5, "warm_start": 5}, dtype=np.float64)
    names = ["RG like", "RG popularity x like", "RG like (r=1)"]
    ev = ie.evaluate_implicit(None, {k: systems[k] for k in names}, protocols={"planted": split}, out_dir=tmp_path)
    t = ev.table.set_index("system")
    assert np.isnan(t.loc["RG popularity x like", "like_error"])  # pi_n p(like) is not a probability of liking
    b = ev.like_error_by_degree
    assert list(dict.fromkeys(b["system"])) == ["RG like", "RG like (r=1)"]
    for name in ("RG like", "RG like (r=1)"):
        pu = ev.per_user[("planted", name)]
        # brute force: the like probability of each held-out item, from a fit with the same settings
        res = rg.fit(0, split.train, 2, ppl_rg.RGHyper(r=0.5 if name == "RG like" else 1.0), max_iter=5,
                     dtype=np.float64, n_draws=0, progress=False, warm_start=5)
        p = np.asarray(rg.like_probability(res.state, split.test_users, split.test_items))
        np.testing.assert_allclose(pu["like"].to_numpy(), p, rtol=1e-10)
        np.testing.assert_array_equal(pu["like_error"].to_numpy(), (p < 0.5).astype(float))
        sub = b[b["system"] == name]
        assert np.all(np.diff(sub["bucket_low"].to_numpy()) > 0) and sub["mean"].between(0, 1).all()
        assert sub["n_users"].sum() == len(split.test_users)
        # the table's error is the bucket means weighted by bucket sizes
        assert t.loc[name, "like_error"] == pytest.approx((sub["n_users"] * sub["mean"]).sum() / sub["n_users"].sum())
        assert t.loc[name, "like_error"] == pytest.approx(float(np.mean(p < 0.5)))
    # r = 1 draws its negatives from pi_n = d_n: another fit, other predictions
    assert not np.allclose(ev.per_user[("planted", "RG like")]["like"], ev.per_user[("planted", "RG like (r=1)")]["like"])
    assert (tmp_path / "like_error_by_user_degree.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "003 fig. 4" in (tmp_path / "report.md").read_text()
