"""ArviZ output of the front door (`validation.frontdoor.api_arviz`, issue 24 finding 5): coordinates in the user's
ids, pointwise log_likelihood and observed_data that az.loo / az.compare use, and posterior predictive
intervals for a new observation (`FittedModel.predict(kind="observation")`)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats as st

from validation.frontdoor import api, api_arviz, api_models, tables

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az


def _quiet_fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return api.fit(*args, progress=False, **kwargs)


@pytest.fixture(scope="module")
def counts() -> pd.DataFrame:
    """Counts 1..4 with int64 ids (users 1001.., items 7, 14, ..): 12 users x 10 items, ~50% of cells."""
    rng = np.random.default_rng(1)
    mask = rng.random((12, 10)) < 0.5
    u, i = np.nonzero(mask)
    return pd.DataFrame({"user": (1001 + u).astype(np.int64), "item": (7 * (i + 1)).astype(np.int64),
                         "count": rng.integers(1, 5, size=u.size)})


@pytest.fixture(scope="module")
def count_fits(counts):
    return {"hpf": _quiet_fit("hpf", counts, K=2, seed=0, max_iter=15, n_draws=60),
            "hpf-gibbs": _quiet_fit("hpf-gibbs", counts, K=2, seed=0, num_chains=2, num_warmup=20, num_samples=30)}


# a real-valued truth: y_ui = 3 + a_u . b_i + N(0, SIGMA^2), known, for the Normal and coverage checks
SIGMA = 0.5


@pytest.fixture(scope="module")
def truth():
    rng = np.random.default_rng(2)
    I, J = 30, 20
    A, B = rng.normal(0, 0.7, (I, 2)), rng.normal(0, 0.7, (J, 2))
    mean = 3.0 + A @ B.T
    mask = rng.random((I, J)) < 0.6
    u, i = np.nonzero(mask)
    y = mean[u, i] + SIGMA * rng.standard_normal(u.size)
    df = pd.DataFrame({"user": [f"r{k}" for k in u], "item": [f"m{k}" for k in i], "rating": y})
    return df, mean


@pytest.fixture(scope="module")
def vbfm_fit(truth):
    return _quiet_fit("vbfm", truth[0], K=2, seed=0, max_iter=200, n_draws=200)


def test_coordinates_are_the_users_ids_int_and_str_and_survive_save_load(count_fits, vbfm_fit, tmp_path):
    m = count_fits["hpf-gibbs"]
    assert m.user_ids.dtype == np.int64
    theta = m.idata.posterior["theta"]
    np.testing.assert_array_equal(theta.coords["user"].values, m.user_ids)
    np.testing.assert_array_equal(m.idata.posterior["beta"].coords["item"].values, m.item_ids)
    assert theta.coords["user"].values[0] == 1001 and theta.coords["user"].dtype == np.int64
    # selecting by the user's id gives that user's row
    np.testing.assert_array_equal(theta.sel(user=1001).values, theta.values[:, :, 0])
    back = api.load(m.save(tmp_path / "g.nc"))
    np.testing.assert_array_equal(back.idata.posterior["theta"].coords["user"].values, m.user_ids)
    assert back.idata.posterior["theta"].coords["user"].dtype == np.int64
    # string ids; the FM's one-hot features are labelled "user <id>" then "item <id>"
    f = vbfm_fit.idata.posterior["w"].coords["feature"].values
    I = len(vbfm_fit.user_ids)
    assert list(f[:2]) == [f"user {vbfm_fit.user_ids[0]}", f"user {vbfm_fit.user_ids[1]}"]
    assert f[I] == f"item {vbfm_fit.item_ids[0]}" and len(f) == I + len(vbfm_fit.item_ids)
    back = api.load(vbfm_fit.save(tmp_path / "v.nc"))
    np.testing.assert_array_equal(back.idata.posterior["w"].coords["feature"].values, f)
    # the entries of observed_data carry the ids of their user and item
    d = vbfm_fit.inference_data(log_likelihood=False)
    obs = d.observed_data
    seen = vbfm_fit.seen.tocoo()
    pairs = {(vbfm_fit.user_ids[r], vbfm_fit.item_ids[c]): v for r, c, v in zip(seen.row, seen.col, seen.data)}
    got = {(u, i): v for u, i, v in zip(obs["user"].values, obs["item"].values, obs["y"].values)}
    assert got == pairs


def test_loo_runs_on_a_sampler_and_a_vi_fit_and_states_its_draws(count_fits):
    for name, word in (("hpf-gibbs", "posterior draws"), ("hpf", "variational q")):
        d = count_fits[name].inference_data()
        assert {"log_likelihood", "observed_data", "posterior"} <= set(d.groups())
        assert word in d.log_likelihood.attrs["draws"]
        assert "zero cells" in d.log_likelihood.attrs["terms"]  # the Poisson terms left out are said
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pareto k warnings on a 60-entry toy
            loo = az.loo(d)
        assert np.isfinite(loo.elpd_loo) and loo.n_data_points == count_fits[name].seen.nnz


def test_compare_two_models_on_one_data_set(count_fits):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = az.compare({k: m.inference_data() for k, m in count_fits.items()})
    print(table)
    assert set(table.index) == {"hpf", "hpf-gibbs"} and np.all(np.isfinite(table["elpd_loo"]))


def test_fb_compare_runs_on_one_data_set_and_refuses_other_data_or_units(count_fits, counts):
    """`api.compare` is az.compare after two checks that ArviZ does not make (a new-user trial ranked
    a model fitted on doubled counts against one on rounded counts, and a Poisson pmf against a Normal
    density, without a warning): the same entries and values, and all mass functions or all densities."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = api.compare(count_fits)
        assert set(table.index) == {"hpf", "hpf-gibbs"} and np.all(np.isfinite(table["elpd_loo"]))
        doubled = _quiet_fit("hpf", counts.assign(count=2 * counts["count"]), K=2, seed=0, max_iter=3, n_draws=5)
        fewer = _quiet_fit("hpf", counts.iloc[1:], K=2, seed=0, max_iter=3, n_draws=5)
        normal = _quiet_fit("vbfm", counts, K=2, seed=0, max_iter=3, n_draws=5)  # the same counts, a density
    with pytest.raises(ValueError, match=r"fitted other values on \d+ of \d+ entries"):
        api.compare({"hpf": count_fits["hpf"], "doubled": doubled})
    with pytest.raises(ValueError, match="fitted on .* entries"):
        api.compare({"hpf": count_fits["hpf"], "fewer": fewer})
    with pytest.raises(ValueError, match="different units"):
        api.compare({"hpf": count_fits["hpf"], "vbfm": normal})
    with pytest.raises(ValueError, match="two or more"):
        api.compare({"hpf": count_fits["hpf"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sgd = _quiet_fit("sgd-fm", counts, K=2, seed=0, n_epochs=2)
    with pytest.raises(ValueError, match="one draw .*point estimate"):  # az.loo raised IndexError inside ArviZ
        api.compare({"vbfm": normal, "sgd-fm": sgd})
    with pytest.raises(TypeError, match="FittedModel"):
        api.compare({"hpf": count_fits["hpf"], "x": object()})


def test_log_likelihood_is_chunked_and_not_in_the_artifact(count_fits, tmp_path):
    m = count_fits["hpf"]
    whole = api_arviz.pointwise_log_likelihood(m)
    tiny = api_arviz.pointwise_log_likelihood(m, max_bytes=1)  # one entry per chunk
    np.testing.assert_array_equal(whole, tiny)
    m.inference_data()
    path = m.save(tmp_path / "h.nc")
    assert "log_likelihood" not in api.load(path).idata.groups()


def _ll(m, users, items):
    """The stored pointwise log-likelihood (chain, draw, pick) at the entries (user id, item id)."""
    ll = m.inference_data().log_likelihood["y"]
    ent = [int(np.flatnonzero((ll["user"].values == u) & (ll["item"].values == i))[0]) for u, i in zip(users, items)]
    return ll.values[:, :, ent], m.inference_data().observed_data["y"].values[ent]


def test_poisson_log_likelihood_equals_scipy(count_fits, counts):
    m = count_fits["hpf-gibbs"]
    pick = counts.iloc[[0, 5, 17]]
    ll, y = _ll(m, pick["user"], pick["item"])
    post = m.idata.posterior
    for n, (u, i, c) in enumerate(pick.itertuples(index=False)):
        rate = (post["theta"].sel(user=u).values * post["beta"].sel(item=i).values).sum(-1)  # (chain, draw)
        assert y[n] == c
        np.testing.assert_allclose(ll[:, :, n], st.poisson.logpmf(c, rate), rtol=1e-10)


def test_normal_log_likelihood_equals_scipy(vbfm_fit, truth):
    df = truth[0]
    pick = df.iloc[[0, 9, 40]]
    ll, y = _ll(vbfm_fit, pick["user"], pick["item"])
    post = vbfm_fit.idata.posterior
    for n, (u, i, r) in enumerate(pick.itertuples(index=False)):
        fu, fi = f"user {u}", f"item {i}"
        mean = (post["w0"].values + post["w"].sel(feature=fu).values + post["w"].sel(feature=fi).values
                + (post["V"].sel(feature=fu).values * post["V"].sel(feature=fi).values).sum(-1))
        sd = 1.0 / np.sqrt(post["alpha"].values)
        np.testing.assert_allclose(ll[:, :, n], st.norm.logpdf(r, mean, sd), rtol=1e-10)
        assert y[n] == r


def test_bernoulli_log_likelihood_equals_scipy():
    rng = np.random.default_rng(3)
    u, i = np.nonzero(rng.random((10, 8)) < 0.4)
    df = pd.DataFrame({"user": [f"p{k}" for k in u], "item": [f"q{k}" for k in i]})  # one-class: no value column
    m = _quiet_fit("sibm", df, K=2, seed=0, max_iter=10, n_draws=40)
    pick = df.iloc[[0, 3, 11]]
    ll, y = _ll(m, pick["user"], pick["item"])
    post = m.idata.posterior
    for n, (a, b) in enumerate(pick.itertuples(index=False)):
        x = (post["U"].sel(user=a).values * post["V"].sel(item=b).values).sum(-1) + post["z"].values
        assert y[n] == 1.0
        np.testing.assert_allclose(ll[:, :, n], st.bernoulli.logpmf(1, 1.0 / (1.0 + np.exp(-x))), rtol=1e-9)


def test_observation_intervals_are_wider_and_cover_new_observations(vbfm_fit, truth):
    df, mean = truth
    I, J = mean.shape
    users = [f"r{k}" for k in range(I) for _ in range(J)]
    items = [f"m{k}" for _ in range(I) for k in range(J)]
    pairs = pd.DataFrame({"user": users, "item": items})
    mp = vbfm_fit.predict(pairs, kind="mean")
    op = vbfm_fit.predict(pairs, kind="observation", seed=1)
    np.testing.assert_allclose(op["mean"], mp["mean"])  # the predictive mean is the mean of E[y]
    assert np.all(op["upper"] - op["lower"] > mp["upper"] - mp["lower"])
    new = mean.ravel() + SIGMA * np.random.default_rng(4).standard_normal(I * J)  # a new y per cell, from the truth
    cover = np.mean((op["lower"].to_numpy() <= new) & (new <= op["upper"].to_numpy()))
    # 600 new observations, independent given the fit: binomial sd sqrt(0.9 * 0.1 / 600) = 0.012; tolerance 3 sd
    # plus 0.02 for the fit's own error (a K = 2 VI fit of 360 ratings); the E[y] intervals cover far less
    assert abs(cover - 0.9) <= 3 * np.sqrt(0.09 / (I * J)) + 0.02, cover
    cover_mean = np.mean((mp["lower"].to_numpy() <= new) & (new <= mp["upper"].to_numpy()))
    assert cover_mean < 0.7, cover_mean


def test_models_without_an_observation_model_say_why():
    with pytest.raises(ValueError, match="pairwise orders"):
        api_models.likelihood_of("bpr")
    assert not api_models.LIKELIHOODS["psm"].predictive and "not a count per entry" in api_models.LIKELIHOODS["psm"].no_predictive
    assert set(api_models.LIKELIHOODS) | set(api_models.NO_LIKELIHOOD) == set(api.models())


def test_point_estimate_is_one_draw_said_so_and_its_observation_interval_is_the_noise(truth):
    df = truth[0]
    m = _quiet_fit("sgd-fm", df, K=2, seed=0, n_epochs=5)
    d = m.inference_data(posterior_predictive=True)
    assert d.log_likelihood["y"].shape == (1, 1, len(df)) and "point estimate" in d.log_likelihood.attrs["draws"]
    assert "plug-in" in d.log_likelihood.attrs["terms"]
    p = m.predict([("r0", "m0"), ("r1", "m3")], kind="observation")
    prec = api_models.plug_in_precision(m, tables._posterior(m.idata), dict(m.idata.posterior.attrs))
    # 1000 draws of N(mean, 1/prec): the 90% interval is 2 * 1.645 / sqrt(prec) within a few % (MC sd of a
    # 5% / 95% quantile of 1000 normal draws ~ 0.07 sd each)
    np.testing.assert_allclose(p["upper"] - p["lower"], 2 * 1.6449 / np.sqrt(prec), rtol=0.12)
