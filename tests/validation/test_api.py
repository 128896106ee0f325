"""The front door (`validation.frontdoor.api`): every registered model fits a DataFrame with string ids,
recommends and predicts in those ids with a posterior sd, survives save/load unchanged, and (where
resumable) resumes from a checkpoint to the same result as an uninterrupted fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from validation.frontdoor import api, tables

# small, fast settings per model (the defaults are for real data)
FAST = {
    "hpf": {"max_iter": 15, "n_draws": 50},
    "hpf-gibbs": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
    "sbmf": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
    "bpmf": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
    "mcmc-fm": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
    "vbfm": {"max_iter": 10},
    "ovbfm": {"max_epochs": 3},
    "sgd-fm": {"n_epochs": 3},
    "sibm": {"max_iter": 10},
    "sibm-svi": {"n_iter": 20},
    "sibm-map": {"n_iter": 20},
    "rg": {"max_iter": 10},
    "bpr": {"n_epochs": 3},
    "psm": {"max_iter": 10},
    "npfm": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
    "ppfm": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
}


def _fit(name, ratings, **kw):
    return api.fit(name, ratings, K=2, seed=0, user_col="reader", item_col="book", value_col="stars",
                   progress=False, **{**FAST.get(name, {}), **kw})


# PPFM is NPFM's adapter with variant="ppfm" (`validation.frontdoor.api_models._pfm_runner`, `_pfm_mean`): the same
# front-door code, another compiled sampler (about 9 CPU s here), so its run is under -m slow; the front door
# is covered by default by [npfm], the PPFM sampler by tests/custom_inference/test_pfm.py
# (test_sample_compiles_once_runs_float32_and_accumulates_predictions runs variant="ppfm").
SLOW_FIT = ("ppfm",)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_FIT else n
                                  for n in api.models()])
def test_fit_recommend_predict_save_load(name, ratings, tmp_path):
    m = _fit(name, ratings)
    rec = m.recommend(["u3", "u7"], N=5)
    assert list(rec.columns) == ["user", "rank", "item", "score", "sd"]
    assert set(rec["user"]) == {"u3", "u7"} and rec.groupby("user").size().max() <= 5
    assert all(str(x).startswith("b") for x in rec["item"])  # original ids out
    seen = set(ratings.loc[ratings.reader == "u3", "book"])
    if m.adapter.values != "binary":  # binary models drop the low stars, so their "seen" is smaller
        assert not seen & set(rec.loc[rec.user == "u3", "item"])
    assert np.all(np.diff(rec.loc[rec.user == "u3", "score"].to_numpy()) <= 0)
    pred = m.predict([("u3", "b1"), ("u5", "b2")])
    assert np.all(pred["lower"] <= pred["mean"] + 1e-12) and np.all(pred["mean"] <= pred["upper"] + 1e-12)
    if "point estimate" in m.uncertainty:
        assert np.all(pred["sd"] == 0)
    else:
        assert np.all(pred["sd"] > 0)
    path = m.save(tmp_path / f"{name}.nc")
    m2 = api.load(path)
    assert m2.model == name
    pd.testing.assert_frame_equal(m2.recommend(["u3", "u7"], N=5), rec)
    with pytest.raises(KeyError, match="unknown user id"):
        m.recommend(["nobody"])
    if not callable(m.adapter.fold_in):  # the reason is in the message, before any computation (the
        # models that fold in are tested in tests/validation/test_fold_in.py)
        with pytest.raises(NotImplementedError, match="fold_in is not available: .{20,}"):
            m.fold_in(pd.DataFrame({"user": ["new"], "item": ["b1"], "rating": [5.0]}))
    if not m.adapter.resumable:
        with pytest.raises(ValueError, match="cannot resume"):
            _fit(name, ratings, resume_from=tmp_path / "ckpt")


# NPFM / PPFM compile the slowest (about a minute each here): their resume runs under `pytest -m slow`;
# the shared sampling driver's resume is tested in the default run by hpf-gibbs, sbmf, bpmf and mcmc-fm
SLOW_RESUME = ("npfm", "ppfm")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_RESUME else n
                                  for n in api.models() if api.ADAPTERS[n].resumable])
def test_resume_equals_uninterrupted(name, ratings, tmp_path):
    full = _fit(name, ratings)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(api.Interrupted, match="stopped after checkpoint 2"):
        _fit(name, ratings, resume_from=ckpt, checkpoint_every=1, _stop_after=2)
    assert (ckpt / f"{name}.npz").exists()
    resumed = _fit(name, ratings, resume_from=ckpt, checkpoint_every=1)
    a, b = tables._posterior(full.idata), tables._posterior(resumed.idata)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_bad_input_is_named(ratings):
    with pytest.raises(ValueError, match="unknown model"):
        api.fit("nope", ratings)
    with pytest.raises(ValueError, match="transform"):
        api.fit("hpf", ratings.assign(stars=ratings.stars + 0.5), user_col="reader", item_col="book",
                value_col="stars", progress=False)
    with pytest.raises(ValueError, match="K"):
        api.fit("hpf", ratings, K=0, user_col="reader", item_col="book", value_col="stars")
    with pytest.raises(ValueError, match="reader|user"):
        api.fit("hpf", ratings)  # no column named user: the message asks for user_col
    with pytest.raises(TypeError):
        api.fit("hpf", [1, 2, 3])


def test_checkpoint_every_without_resume_from_is_refused(ratings):
    with pytest.raises(ValueError, match="resume_from"):
        _fit("hpf", ratings, checkpoint_every=1)
    with pytest.raises(ValueError, match="resume_from"):
        _fit("hpf", ratings, _stop_after=1)


def test_resume_from_on_a_model_without_checkpoints_names_the_reason(ratings, monkeypatch, tmp_path):
    """Every registered model resumes now; the refusal path stays for adapters that cannot."""
    import dataclasses

    monkeypatch.setitem(api.ADAPTERS, "bpr", dataclasses.replace(api.ADAPTERS["bpr"], resumable=False,
                                                                 not_resumable="its loop keeps no checkpoints"))
    with pytest.raises(ValueError, match=r"bpr cannot resume from a checkpoint \(its loop keeps no checkpoints\)"):
        _fit("bpr", ratings, resume_from=tmp_path / "ckpt")
