"""Model selection on a validation split of the training part (`validation.evaluation.selection`, issue 27 item 2).

The planted problem: 160 users and 48 items in 4 communities (a user meets an item of its own community with
probability 0.4, another with 0.02; counts 1 + Poisson(2)), so HPF needs K = 4 components to tell the
communities apart. Measured on it (seed 0, 100 CAVI sweeps, 153 validation users): validation recall@5 K = 1
0.098 (se 0.024), K = 2 0.196 (0.032), K = 4 0.444 (0.040): K = 4 is ahead of the next by 6 standard errors,
so the choice is not a coin flip. K = 4 sits in the middle of the grid's order (2, 4, 1), so a search that
returned the first or the last point would fail.

Source: project addition (issue 27 item 2).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import factorbayes as fb
from validation.evaluation import holdout, selection
from validation.frontdoor import api, cli

GRID = {"K": (2, 4, 1), "shape": 0.3, "scale": 1.0}
OPTIONS = {"max_iter": 100, "n_draws": 10}
CLI_GRID = ["--grid", "K=2,4,1", "shape=0.3", "scale=1", "--max-iter", "100", "--draws", "10", "-N", "5"]


def _declared(model: str) -> selection.Grid:
    """The grid declared with ``model`` (its front-door adapter's ``grid``)."""
    api.models()  # registers the adapters
    return api.ADAPTERS[model].grid


def _planted(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    I, J, B = 160, 48, 4
    p = np.where((np.arange(I) % B)[:, None] == (np.arange(J) % B)[None, :], 0.4, 0.02)
    u, i = np.nonzero(rng.random((I, J)) < p)
    return pd.DataFrame({"user": [f"u{k}" for k in u], "item": [f"i{k}" for k in i],
                         "count": rng.poisson(2.0, u.size) + 1})


@pytest.fixture(scope="module")
def planted():
    df = _planted()
    train, test = fb.split(df, "loo", seed=0)
    return df, train, test


@pytest.fixture(scope="module")
def python_choice(planted):
    _, train, _ = planted
    return fb.select("hpf", train, grid=GRID, options=OPTIONS, N=(5,), seed=0, progress=False, refit=False)


@pytest.fixture(scope="module")
def cli_choice(planted, tmp_path_factory):
    return _cli(tmp_path_factory.mktemp("cli"), planted[0], "plain")


def _cli(tmp_path, df, name):
    path = tmp_path / f"{name}.csv"
    df.to_csv(path, index=False)
    out = tmp_path / name
    assert cli.main(["evaluate", "hpf", "--data", str(path), "--user-col", "user", "--item-col", "item", "--value-col",
                     "count", "--select", *CLI_GRID, "--out", str(out), "--no-progress"]) == 0
    return pd.read_csv(out / "selection.csv"), (out / "report.md").read_text()


def test_the_planted_k_is_chosen(python_choice):
    t = python_choice.table
    assert python_choice.chosen == {"K": 4, "shape": 0.3, "scale": 1.0}
    assert list(t["K"]) == [2, 4, 1] and t["chosen"].sum() == 1 and bool(t.loc[t["K"] == 4, "chosen"].iloc[0])
    assert python_choice.metric == "recall@5" and (t["users"] >= selection.MIN_VALIDATION_USERS).all()
    # a real margin, not a tie broken by order: every other point behind K = 4 by more than 3 standard errors of
    # the paired difference over the same validation users (diff = point - chosen)
    rest = t[~t["chosen"]]
    assert (-rest["diff"] > 3 * rest["diff_se"]).all() and np.isnan(t.loc[t["chosen"], "diff"]).all()
    assert "the runner-up (K = 2, shape = 0.3, scale = 1) is" in "\n".join(python_choice.lines())
    assert set(python_choice.seconds) == {"validation split", "search"} and python_choice.fitted is None


def test_cli_and_python_make_the_same_choice(python_choice, cli_choice):
    table, report = cli_choice
    assert list(table["K"]) == list(python_choice.table["K"])
    np.testing.assert_allclose(table["recall@5"], python_choice.table["recall@5"], rtol=1e-9)
    assert list(table["chosen"]) == list(python_choice.table["chosen"])
    assert "select: chosen K = 4, shape = 0.3, scale = 1" in report and "search " in report and "refit " in report


def test_the_test_part_is_never_seen(planted, python_choice, cli_choice, tmp_path):
    df, train, test = planted
    # 1. the search: no fit and no validation score ever gets a test entry
    fitted_on, scored_on = [], []
    real_metrics = holdout.model_metrics

    def spy_fit(model, data, **kw):
        fitted_on.append(data)
        return api.fit(model, data, **kw)

    def spy_metrics(fitted, test_part, **kw):
        scored_on.append(test_part)
        return real_metrics(fitted, test_part, **kw)

    holdout.model_metrics = spy_metrics
    try:
        sel = selection.select(spy_fit, "hpf", train, declared=_declared("hpf"), grid=GRID, options=OPTIONS, N=(5,),
                               progress=False)
    finally:
        holdout.model_metrics = real_metrics
    pairs = set(zip(test["user"], test["item"]))
    assert len(fitted_on) == 4 and len(scored_on) == 3  # three grid points, one refit
    for part in fitted_on + scored_on:
        assert not pairs & set(zip(part["user"], part["item"]))
    assert len(fitted_on[-1]) == len(train) and sel.chosen == python_choice.chosen
    # 2. poisoned test rows (counts x 100): the same rows are held out, the choice and every validation score
    # stay; a pipeline that let the test rows into any fit of the search would see other counts
    poisoned = df.copy()
    held = pd.MultiIndex.from_frame(df[["user", "item"]]).isin(pd.MultiIndex.from_frame(test[["user", "item"]]))
    poisoned.loc[held, "count"] *= 100
    assert fb.split(poisoned, "loo", seed=0).test[["user", "item"]].equals(test[["user", "item"]])
    dirty, report = _cli(tmp_path, poisoned, "dirty")
    pd.testing.assert_frame_equal(cli_choice[0].drop(columns="seconds"), dirty.drop(columns="seconds"))
    assert "K = 4 (chosen by --select)" in report


def test_a_training_part_too_small_is_refused_before_any_fit(tmp_path, capsys):
    rng = np.random.default_rng(0)
    small = pd.DataFrame([(f"u{u}", f"i{i}", 1) for u in range(8) for i in rng.choice(6, 3, replace=False)],
                         columns=["user", "item", "count"])
    train, _ = fb.split(small, "loo", seed=0)

    def no_fit(*a, **k):
        raise AssertionError("fitted although the validation split was refused")

    with pytest.raises(ValueError, match="too small to carve a validation split.*min_users = 10"):
        selection.select(no_fit, "hpf", train, declared=_declared("hpf"), progress=False)
    one_each = pd.DataFrame({"user": [f"u{k}" for k in range(20)], "item": [f"i{k % 5}" for k in range(20)]})
    with pytest.raises(ValueError, match="too small to carve a validation split"):
        selection.select(no_fit, "bpr", one_each, declared=_declared("bpr"), progress=False)
    path = tmp_path / "small.csv"
    small.to_csv(path, index=False)
    assert cli.main(["evaluate", "hpf", "--data", str(path), "--user-col", "user", "--item-col", "item",
                     "--value-col", "count", "--select", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "too small to carve a validation split" in capsys.readouterr().err


def test_every_model_declares_one_grid_with_its_reasons():
    for model in api.models():
        g = _declared(model)
        assert isinstance(g, selection.Grid) and g.why and len(g.K) >= 2, model
        assert not g.search_options or g.search_why, model
        points = selection.grid_points(g, model=model)
        assert len(points) == len(g.K) * int(np.prod([len(a.values) for a in g.axes])) <= 18, model
        for a in g.axes:  # every axis reaches the fit: a solver option or a field of the model's hyper class
            if a.option:
                assert a.option in api.valid_options(model), (model, a.option)
            else:
                assert set(a.fields) <= set(selection._resolve(g.hyper)._fields), (model, a.fields)
    assert {a.name for a in _declared("psm").axes} == {"r"} and {a.name for a in _declared("rg").axes} == {"r"}
    assert {a.name for a in _declared("bpr").axes} == {"learning_rate", "reg"}
    assert {a.name for a in _declared("sgd-fm").axes} == {"learning_rate", "reg"}
    assert {a.name for a in _declared("hpf").axes} == {"shape", "scale"}
    # the search options: HPF's fits score the exact q mean (the test below); no other model has any
    assert {m: dict(_declared(m).search_options) for m in api.models() if _declared(m).search_options} == {
        "hpf": {"n_draws": 0}}


def test_grid_points_become_fit_options():
    g = selection._grid(_declared("hpf"), None, "hpf")
    opts = selection._point_options(g, {"K": 5, "shape": 1.0, "scale": 0.1}, {"max_iter": 3})
    h = opts["hyper"]
    assert (h.a, h.c, h.b_prime, h.d_prime, h.a_prime, opts["max_iter"]) == (1.0, 1.0, 0.1, 0.1, 0.3, 3)
    g = selection._grid(_declared("sgd-fm"), None, "sgd-fm")
    h = selection._point_options(g, {"K": 10, "learning_rate": 0.03, "reg": 0.04}, {})
    assert h["learning_rate"] == 0.03 and (h["hyper"].lambda_w, h["hyper"].lambda_v, h["hyper"].lambda_0) == (0.04, 0.04, 0.0)
    assert selection._point_options(_declared("psm"), {"K": 10, "r": 8.0}, {}) == {"r": 8.0}
    rg = selection._point_options(_declared("rg"), {"K": 10, "r": 1.0}, {})["hyper"]
    assert rg.r == 1.0 and rg.alpha == 0.01
    assert [p["K"] for p in selection.grid_points(_declared("psm"), {"K": 7, "r": (1, 2)})] == [7, 7]


@pytest.mark.parametrize("kwargs, message", [
    ({"grid": {"lr": (0.1,)}}, "hpf searches K, shape, scale; not 'lr'"),
    ({"grid": {"K": (0, 2)}}, "K must be integers >= 1"),
    ({"grid": {"K": ()}}, "K needs at least one value"),
    ({"options": {"K": 3}}, "select searches them"),
    ({"metric": "recall@7"}, "metric must be one of"),
])
def test_bad_selection_settings_are_refused(planted, kwargs, message):
    _, train, _ = planted
    with pytest.raises(ValueError, match=message):
        selection.select(lambda *a, **k: None, "hpf", train, declared=_declared("hpf"), N=(5,), progress=False, **kwargs)
    with pytest.raises(ValueError, match="searches them"):
        selection.select(lambda *a, **k: None, "psm", train, declared=_declared("psm"), options={"r": 2.0},
                         progress=False)
    with pytest.raises(ValueError, match="no selection grid for model 'nope'; models with one: hpf, hpf-gibbs"):
        api.select("nope", train)
    with pytest.raises(ValueError, match="grid: psm searches K, r; not 'shape'"):
        selection.grid_points(_declared("psm"), {"shape": 1.0}, model="psm")
    with pytest.raises(TypeError, match="psm: the declared grid must be a validation.evaluation.selection.Grid"):
        selection.grid_points({"K": (5,)}, model="psm")


def test_an_adapter_without_a_grid_is_reported(planted, monkeypatch):
    """The grid is a declared part (`ADAPTER_PARTS`): an adapter with none and no reason, a grid without its
    reason, or search options without theirs are reported by `adapter_problems`; a declared absence conforms,
    and `api.select` refuses the model with that reason, naming the models that have a grid."""
    import dataclasses

    from validation.frontdoor import api_models

    api.models()  # registers the adapters
    hpf = api.ADAPTERS["hpf"]
    monkeypatch.setitem(api.ADAPTERS, "mine", dataclasses.replace(hpf, name="mine", grid=None))
    assert [p for p in api_models.adapter_problems() if "'mine'" in p] == [
        "front-door adapter 'mine': no grid, and no reason declared for its absence"]
    assert dataclasses.replace(hpf, grid=dataclasses.replace(hpf.grid, why=" ")).problems() == [
        "front-door adapter 'hpf': its grid gives no reason for its values (Grid.why)"]
    assert dataclasses.replace(hpf, grid=dataclasses.replace(hpf.grid, search_why="")).problems() == [
        "front-door adapter 'hpf': its grid's search_options {'n_draws': 0} give no reason (Grid.search_why)"]
    absent = dataclasses.replace(hpf, name="mine", grid=None, absent={**hpf.absent, "grid": "a reason of mine"})
    monkeypatch.setitem(api.ADAPTERS, "mine", absent)
    assert api_models.adapter_problems() == []
    with pytest.raises(ValueError, match=r"no selection grid for model 'mine' \(declared absent: a reason of mine\); "
                                         r"models with one: hpf, "):
        api.select("mine", planted[1])


def test_hpf_validation_fits_score_the_exact_q_mean(planted):
    """The search's HPF fits keep the means of q (n_draws = 0: E_q[theta] . E_q[beta], exact under the
    mean-field q) whatever the user's n_draws; the refit keeps the user's options (issue 27 item 4). The
    validation score of the point is that of the same fit on the same validation split, to 1e-12."""
    _, train, _ = planted
    calls = []

    def spy_fit(model, data, **kw):
        calls.append((data, kw))
        return api.fit(model, data, **kw)

    sel = selection.select(spy_fit, "hpf", train, declared=_declared("hpf"), grid={"K": (4,), "shape": 0.3, "scale": 1.0},
                           options=OPTIONS, N=(5,), progress=False)
    assert [kw["n_draws"] for _, kw in calls] == [0, OPTIONS["n_draws"]]  # the search's one fit, then the refit
    data, kw = calls[0]
    val = holdout.split(train, how="loo", seed=1)
    assert val.train.equals(data)
    ref = holdout.model_metrics(api.fit("hpf", data, **kw), val.test, N=(5,))
    np.testing.assert_allclose(sel.table["recall@5"].iloc[0], ref["recall@5"], rtol=1e-12)


def test_a_reused_out_folder_loses_an_earlier_runs_selection_table(planted, tmp_path, capsys):
    """`evaluate` without --select into a folder where an earlier --select run wrote selection.csv: the
    stale table sat beside the new report (a new-user trial); it is now removed, and the run says so."""
    path = tmp_path / "plain.csv"
    planted[0].to_csv(path, index=False)
    out = tmp_path / "eval"
    out.mkdir()
    (out / "selection.csv").write_text("K,score\n2,0.1\n")  # what an earlier --select run left
    assert cli.main(["evaluate", "hpf", "--data", str(path), "--user-col", "user", "--item-col", "item", "--value-col",
                     "count", "--k", "2", "--max-iter", "3", "--out", str(out), "--no-progress"]) == 0
    assert not (out / "selection.csv").exists() and (out / "report.md").exists()
    assert "an earlier run's" in capsys.readouterr().err
