"""The front door (`validation.api`): every registered model fits a DataFrame with string ids,
recommends and predicts in those ids with a posterior sd, survives save/load unchanged, and (where
resumable) resumes from a checkpoint to the same result as an uninterrupted fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from validation import api

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


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    I, J = 24, 18
    mask = rng.random((I, J)) < 0.45
    u, i = np.nonzero(mask)
    stars = rng.integers(1, 6, size=u.size).astype(float)
    return pd.DataFrame({"reader": [f"u{k}" for k in u], "book": [f"b{k}" for k in i], "stars": stars})


def _fit(name, ratings, **kw):
    return api.fit(name, ratings, K=2, seed=0, user_col="reader", item_col="book", value_col="stars",
                   progress=False, **{**FAST.get(name, {}), **kw})


@pytest.mark.parametrize("name", api.models())
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
    if not callable(m.adapter.fold_in):  # the reason is in the message, before any computation
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
    a, b = api._posterior(full.idata), api._posterior(resumed.idata)
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


def test_hpf_fold_in_matches_the_fitted_user_and_keeps_the_others(ratings, tmp_path):
    """A new user with exactly the entries of a fitted user gets (at convergence) that user's posterior:
    fold-in runs the same CAVI user blocks with the items' q held fixed (seed 001)."""
    m = _fit("hpf", ratings, max_iter=500, tol=1e-12, n_draws=4000)
    twin = ratings[ratings.reader == "u7"].assign(reader="twin")
    m2 = m.fold_in(twin, user_col="reader", item_col="book", value_col="stars")
    assert m2.shape == (m.shape[0] + 1, m.shape[1]) and m2.user_ids[-1] == "twin"
    pd.testing.assert_frame_equal(m2.recommend(["u7", "u3"], N=5), m.recommend(["u7", "u3"], N=5))
    a = m2.predict([("twin", b) for b in ("b0", "b1", "b2", "b5")])
    b = m2.predict([("u7", b) for b in ("b0", "b1", "b2", "b5")])
    np.testing.assert_allclose(a["mean"], b["mean"], rtol=0.05)  # Monte Carlo (4000 draws) and CAVI tolerance
    rec = m2.recommend("twin", N=20)
    assert not set(rec["item"]) & set(twin["book"])  # the folded-in entries count as seen
    m3 = api.load(m2.save(tmp_path / "folded.nc"))
    pd.testing.assert_frame_equal(m3.recommend(["twin"], N=5), m2.recommend(["twin"], N=5))
    with pytest.raises(ValueError, match="already in the model"):
        m.fold_in(ratings[ratings.reader == "u3"], user_col="reader", item_col="book", value_col="stars")
    with pytest.raises(KeyError, match="unknown item id"):
        m.fold_in(pd.DataFrame({"user": ["x"], "item": ["no-such-book"], "rating": [2.0]}))


def test_checkpoint_every_without_resume_from_is_refused(ratings):
    with pytest.raises(ValueError, match="resume_from"):
        _fit("hpf", ratings, checkpoint_every=1)
    with pytest.raises(ValueError, match="resume_from"):
        _fit("hpf", ratings, _stop_after=1)


@pytest.mark.parametrize("name", ["bpmf", "sbmf", "hpf-gibbs"])
def test_sampler_fold_in_of_a_twin_matches_the_fitted_user(name, ratings, tmp_path):
    """Fold-in conditions the new users on each kept draw of the frozen item side (one helper,
    `api_models._fold_in_per_draw`, with the samplers' own conditionals). A twin of a fitted user u7
    (same rows) then targets exactly u7's posterior marginal: per kept draw s, both are draws from the
    same conditional given the draw's items. So the per-draw difference d_s = E[y | twin_s] - E[y | u7_s]
    has mean 0 up to Monte Carlo error: |mean(d)| < 4 sd(d) / sqrt(ESS(d)) per item (ESS by arviz over
    the chains; 4 standard errors: a false alarm has probability ~6e-5 per item). The old users'
    posterior is untouched (bit for bit), and the folded-in model survives save / load."""
    import arviz as az

    m = _fit(name, ratings)
    twin = ratings[ratings.reader == "u7"].assign(reader="twin")
    m2 = m.fold_in(twin, user_col="reader", item_col="book", value_col="stars")
    assert m2.shape == (m.shape[0] + 1, m.shape[1]) and m2.user_ids[-1] == "twin"
    for k, da in m.idata.posterior.data_vars.items():  # every old user's draws and every item-side draw unchanged
        got = m2.idata.posterior[k]
        np.testing.assert_array_equal(got.isel(user=slice(0, m.shape[0])) if "user" in da.dims else got, da, err_msg=k)
    pd.testing.assert_frame_equal(m2.recommend(["u7", "u3"], N=5), m.recommend(["u7", "u3"], N=5))
    items = ["b0", "b1", "b2", "b5", "b9"]
    draws = m2._draw_means(m2._index(["twin"] * 5 + ["u7"] * 5, "user"), m2._index(items * 2, "item"))
    C, S = m2.idata.posterior.sizes["chain"], m2.idata.posterior.sizes["draw"]
    d = (draws[:, :5] - draws[:, 5:]).reshape(C, S, 5)
    se = d.reshape(C * S, 5).std(axis=0, ddof=1) / np.sqrt([az.ess(d[:, :, k]) for k in range(5)])
    assert np.all(np.abs(d.mean(axis=(0, 1))) < 4 * se), (d.mean(axis=(0, 1)), se)
    assert np.all(m2.predict([("twin", b) for b in items])["sd"] > 0)  # the twin's own uncertainty is drawn
    assert not set(m2.recommend("twin", N=20)["item"]) & set(twin["book"])
    if name == "bpmf":
        m3 = api.load(m2.save(tmp_path / "folded.nc"))
        pd.testing.assert_frame_equal(m3.recommend(["twin"], N=5), m2.recommend(["twin"], N=5))


def test_resume_from_on_a_model_without_checkpoints_names_the_reason(ratings, monkeypatch, tmp_path):
    """Every registered model resumes now; the refusal path stays for adapters that cannot."""
    import dataclasses

    monkeypatch.setitem(api.ADAPTERS, "bpr", dataclasses.replace(api.ADAPTERS["bpr"], resumable=False,
                                                                 not_resumable="its loop keeps no checkpoints"))
    with pytest.raises(ValueError, match=r"bpr cannot resume from a checkpoint \(its loop keeps no checkpoints\)"):
        _fit("bpr", ratings, resume_from=tmp_path / "ckpt")
