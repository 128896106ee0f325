"""Fold-in through the front door (`validation.frontdoor.api.FittedModel.fold_in`, `validation.frontdoor.api_fold_in`).

The twin idea: a new user whose rows are exactly those of a fitted user u7 ("twin") shares u7's
frozen item side, so fold-in must reproduce u7's posterior:
- samplers: per kept item draw both are draws from the same conditional, so the per-draw
  difference of E[y | twin] and E[y | u7] has mean 0 up to Monte Carlo error (z-test below);
- variational fits at convergence: the twin's q is the unique fixed point of the user block's
  coordinate updates given the frozen rest of q, which u7's converged q also is (equality up to the
  fit's convergence, tolerance stated at each assertion);
- fits whose u7 is not at the optimum (stochastic VI of SIBM, SGD, stochastic MAP): the fold-in
  must be the exact optimum of the solver's own objective in the new user's parameters, checked by
  ``jax.grad`` of that objective (an independent code path from the hand-derived updates).
Every test also checks that the old users' and the items' posterior is untouched.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from validation.frontdoor import api

COLS = dict(user_col="reader", item_col="book", value_col="stars")
FAST_GIBBS = {"num_chains": 2, "num_warmup": 10, "num_samples": 20}
ITEMS = ["b0", "b1", "b2", "b5", "b9"]


def _fit(name, ratings, **kw):
    return api.fit(name, ratings, K=2, seed=0, progress=False, **COLS, **kw)


def _twin(ratings, name="twin"):
    return ratings[ratings.reader == "u7"].assign(reader=name)


def _old_part(m, m2, da_new, da_old):
    """The part of a folded-in variable that existed before: the old users on the ``user`` axis, or the
    features without the inserted new users (FM ids design: inserted after the fitted users)."""
    if "user" in da_old.dims:
        return da_new.isel(user=slice(0, m.shape[0]))
    if "feature" in da_old.dims and "front_door_n_users" in m.idata.posterior.attrs:
        I, n_new = int(m.idata.posterior.attrs["front_door_n_users"]), m2.shape[0] - m.shape[0]
        keep = np.r_[0:I, I + n_new:da_new.sizes["feature"]]
        return da_new.isel(feature=keep)
    return da_new


def _assert_old_unchanged(m, m2):
    for g in m.idata.groups():
        for k, da in m.idata[g].data_vars.items():
            np.testing.assert_array_equal(_old_part(m, m2, m2.idata[g][k], da), da, err_msg=f"{g}.{k}")


def test_hpf_fold_in_matches_the_fitted_user_and_keeps_the_others(ratings, tmp_path):
    """A new user with exactly the entries of a fitted user gets (at convergence) that user's posterior:
    fold-in runs the same CAVI user blocks with the items' q held fixed (seed 001)."""
    m = _fit("hpf", ratings, max_iter=500, tol=1e-12, n_draws=4000)
    twin = _twin(ratings)
    m2 = m.fold_in(twin, **COLS)
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
        m.fold_in(ratings[ratings.reader == "u3"], **COLS)
    with pytest.raises(KeyError, match="unknown item id"):
        m.fold_in(pd.DataFrame({"user": ["x"], "item": ["no-such-book"], "rating": [2.0]}))


# NPFM / PPFM compile slowly (about 20 s of CPU each for the fit and the fold-in): under `-m slow`.
@pytest.mark.parametrize("name", ["bpmf", "sbmf", "hpf-gibbs", "mcmc-fm",
                                  pytest.param("npfm", marks=pytest.mark.slow),
                                  pytest.param("ppfm", marks=pytest.mark.slow)])
def test_sampler_fold_in_of_a_twin_matches_the_fitted_user(name, ratings, tmp_path):
    """Fold-in conditions the new users on each kept draw of the frozen item side (one helper,
    `api_fold_in._fold_in_per_draw`, with the samplers' own conditionals). A twin of a fitted user u7
    (same rows) then targets exactly u7's posterior marginal: per kept draw s, both are draws from the
    same conditional given the draw's items. So the per-draw difference d_s = E[y | twin_s] - E[y | u7_s]
    has mean 0 up to Monte Carlo error: |mean(d)| < 4 sd(d) / sqrt(ESS(d)) per item (ESS by arviz over
    the chains; 4 standard errors: a false alarm has probability ~6e-5 per item). The old users' and
    the items' posterior is untouched (bit for bit), and the folded-in model survives save / load."""
    import arviz as az

    m = _fit(name, ratings, **FAST_GIBBS)
    twin = _twin(ratings)
    m2 = m.fold_in(twin, **COLS)
    assert m2.shape == (m.shape[0] + 1, m.shape[1]) and m2.user_ids[-1] == "twin"
    _assert_old_unchanged(m, m2)
    pd.testing.assert_frame_equal(m2.recommend(["u7", "u3"], N=5), m.recommend(["u7", "u3"], N=5))
    draws = m2._draw_means(m2._index(["twin"] * 5 + ["u7"] * 5, "user"), m2._index(ITEMS * 2, "item"))
    C, S = m2.idata.posterior.sizes["chain"], m2.idata.posterior.sizes["draw"]
    d = (draws[:, :5] - draws[:, 5:]).reshape(C, S, 5)
    se = d.reshape(C * S, 5).std(axis=0, ddof=1) / np.sqrt([az.ess(d[:, :, k]) for k in range(5)])
    assert np.all(np.abs(d.mean(axis=(0, 1))) < 4 * se), (d.mean(axis=(0, 1)), se)
    assert np.all(m2.predict([("twin", b) for b in ITEMS])["sd"] > 0)  # the twin's own uncertainty is drawn
    assert not set(m2.recommend("twin", N=20)["item"]) & set(twin["book"])
    if name in ("bpmf", "mcmc-fm"):  # mcmc-fm: the inserted features and n_users survive the file
        m3 = api.load(m2.save(tmp_path / "folded.nc"))
        pd.testing.assert_frame_equal(m3.recommend(["twin", "u7"], N=5), m2.recommend(["twin", "u7"], N=5))


def _q_moments(m, user, name):
    """(means, precisions) of a user's q: SIBM rows of (u_h / u_prec, u_prec) on the free columns; FM
    the user's one-hot feature (w, then v_1..v_K)."""
    vp = m.idata["variational_parameters"]
    k = int(m._index([user], "user")[0])
    if name == "sibm":
        free = vp["u_fixed"].values == 0
        P, h = vp["u_prec"].values[k, free], vp["u_h"].values[k, free]
    else:
        # feature k is user row k: the fitted users, then the folded-in ones, then the items
        P = np.r_[vp["w_prec"].values[k], vp["v_prec"].values[k]]
        h = np.r_[vp["w_h"].values[k], vp["v_h"].values[k]]
    return h / P, P


@pytest.mark.parametrize("name, opts", [
    # update_hyper=False: with its empirical-Bayes point updates VBFM's sigma_w grows without bound on
    # these data (measured: still moving after 20,000 sweeps), so the fit never reaches a fixed point
    ("vbfm", {"max_iter": 5000, "tol": 1e-13, "update_hyper": False}),
    # one batch of all rows and lam = 0 (step 1): OVBFM's update is the CAVI update (its docstring)
    pytest.param("ovbfm", {"max_epochs": 5000, "tol": 1e-13, "n_batches": 1, "lam": 0.0, "update_hyper": False},
                 marks=pytest.mark.slow),
    ("sibm", {"max_iter": 5000, "tol": 1e-13}),
])
def test_vi_fold_in_of_a_twin_reaches_the_fitted_users_q(name, opts, ratings, tmp_path):
    """At a converged fit u7's q is the fixed point of its block's coordinate updates given the rest
    of q; the fold-in of its twin runs the same updates with the rest frozen (from the prior) to
    that fixed point, which is unique (the user block's objective is a concave quadratic in its
    moments for VBFM; for SIBM the JJ bound at optimal xi, monotone). Tolerance: relative 1e-5 on the
    means and precisions. The fit stops at a relative ELBO change < 1e-13, i.e. |dL| < 1e-13 |L|
    (|L| ~ 1e2 here); its distance to the fixed point is of order sqrt(|dL| / curvature) ~ 1e-5 at
    worst, and the fold-in's own stopping rule (1e-10 posterior sd) is negligible. Measured: 3e-7
    (VBFM), 4e-8 (SIBM); fits stopped at 1e-10 (VBFM) or 1e-8 (SIBM) instead give 1.2e-5, so the
    tolerance bites."""
    m = _fit(name, ratings, **opts)
    assert int(m.idata.posterior.attrs["converged"]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the fold-in converged too
        m2 = m.fold_in(_twin(ratings), **COLS)
    _assert_old_unchanged(m, m2)
    kind = "sibm" if name.startswith("sibm") else "fm"
    (mt, Pt), (m7, P7) = _q_moments(m2, "twin", kind), _q_moments(m2, "u7", kind)
    np.testing.assert_allclose(Pt, P7, rtol=1e-5)
    np.testing.assert_allclose(mt, m7, rtol=1e-5, atol=1e-5 * np.max(np.abs(m7)))
    pred = m2.predict([(u, b) for u in ("twin", "u7") for b in ITEMS])
    np.testing.assert_allclose(pred["mean"][:5], pred["mean"][5:], rtol=0.1)  # draws from q: Monte Carlo only
    if name == "vbfm":  # a second fold-in on a folded-in model (the FM feature layout moved by one user)
        m3 = api.load(m2.save(tmp_path / "folded.nc")).fold_in(_twin(ratings, "twin2"), **COLS)
        (m2t, P2t) = _q_moments(m3, "twin2", kind)
        np.testing.assert_allclose(P2t, Pt, rtol=1e-12)
        np.testing.assert_allclose(m2t, mt, rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # the same fold-in as "sibm" (tested by default); this adds the stationarity check for SVI fits
def test_sibm_svi_fold_in_is_a_stationary_point_of_the_bounded_elbo(ratings):
    """SVI's u7 is a stochastic iterate, not the fixed point, so the twin cannot be compared with it.
    Instead: the twin's q must maximize the bounded ELBO (7) at optimal xi in its own parameters with
    q(V), q(z) frozen, so ``jax.grad`` of `sibm.elbo` (autodiff of the objective, independent of the
    hand-derived updates) vanishes there. Tolerance 1e-6 nats per unit of a natural parameter: the
    fold-in stops when no mean moves by 1e-10 posterior sd; at u7's SVI q the same gradient is
    > 1e-3 (asserted), so the test separates an optimum from a non-optimum."""
    import jax
    import jax.numpy as jnp

    from custom_inference import sibm
    from custom_inference.data import Observations
    from ppl_models.sibm import SIBMHyper

    m = _fit("sibm-svi", ratings, n_iter=50)
    m2 = m.fold_in(_twin(ratings), **COLS)
    _assert_old_unchanged(m, m2)
    vp = m2.idata["variational_parameters"]
    J = m2.shape[1]
    cols = m2._index(ratings.loc[(ratings.reader == "u7") & (ratings.stars >= 4), "book"].tolist(), "item")
    data = Observations(jnp.zeros(cols.size, jnp.int32), jnp.asarray(cols, jnp.int32), jnp.ones(cols.size), 1, J)
    g = {f: jnp.asarray(vp[f].values) for f in ("v_prec", "v_h", "z_prec", "z_h", "u_fixed", "v_fixed")}
    free = vp["u_fixed"].values == 0

    def grad_at(user):
        k = int(m2._index([user], "user")[0])
        up, uh = jnp.asarray(vp["u_prec"].values[k:k + 1]), jnp.asarray(vp["u_h"].values[k:k + 1])
        f = lambda p, h: sibm.elbo(sibm.SIBMState(p, h, last_elbo=jnp.nan, **g), data, SIBMHyper())  # noqa: E731
        gp, gh = jax.grad(f, argnums=(0, 1))(up, uh)
        return np.abs(np.r_[np.asarray(gp)[0, free], np.asarray(gh)[0, free]]).max()

    assert grad_at("twin") < 1e-6, grad_at("twin")
    assert grad_at("u7") > 1e-3, grad_at("u7")


def _sgd_fm_grad(m2, ratings, user):
    """|grad| of `fm_sgd.objective` on u7's rows in (w, v) of ``user``'s one-hot feature, the rest at the fit."""
    import jax
    import jax.numpy as jnp

    from custom_inference import fm_sgd
    from custom_inference.data import Observations
    from validation.frontdoor.api_models import ids_design

    rows = ratings[ratings.reader == "u7"]
    post = {k: np.asarray(v.values)[0, 0] for k, v in m2.idata.posterior.data_vars.items()}
    I = int(m2.idata.posterior.attrs["front_door_n_users"])
    cols = m2._index(rows["book"].tolist(), "item")
    design = ids_design(Observations(np.zeros(cols.size, np.int32), cols.astype(np.int32), rows["stars"].to_numpy(),
                                     1, m2.shape[1]))
    k = int(m2._index([user], "user")[0])
    w = jnp.asarray(np.r_[post["w"][k], post["w"][I:]])
    V = jnp.asarray(np.vstack([post["V"][k:k + 1], post["V"][I:]]))
    objective = lambda w, V: fm_sgd.objective(fm_sgd.FMParams(jnp.asarray(post["w0"]), w, V), design,  # noqa: E731
                                              fm_sgd.SGDReg())
    gw, gV = jax.grad(objective, argnums=(0, 1))(w, V)
    return max(abs(float(gw[0])), float(jnp.abs(gV[0]).max()))


def _u7_positives(m2, ratings):
    return m2._index(ratings.loc[(ratings.reader == "u7") & (ratings.stars >= 4), "book"].tolist(), "item")


def _sibm_map_grad(m2, ratings, user):
    """|grad| of `sibm.log_joint` in ``user``'s free U columns, on u7's row of X, V and z at the fit."""
    import jax
    import jax.numpy as jnp

    from custom_inference import sibm
    from custom_inference.data import Observations
    from ppl_models.sibm import SIBMHyper

    vp = m2.idata["variational_parameters"]
    pos = _u7_positives(m2, ratings)
    data = Observations(jnp.zeros(pos.size, jnp.int32), jnp.asarray(pos, jnp.int32), jnp.ones(pos.size), 1, m2.shape[1])
    k = int(m2._index([user], "user")[0])
    st = sibm.MAPState(*(jnp.asarray(vp[f].values) for f in sibm.MAPState._fields))
    st = st._replace(U=st.U[k:k + 1], u_count=st.u_count[k:k + 1])
    gU = jax.grad(lambda U: sibm.log_joint(st._replace(U=U), data, SIBMHyper()))(st.U)
    return float(jnp.abs(gU[0, vp["u_fixed"].values == 0]).max())


def _bpr_grad(m2, ratings, user):
    """|grad| in w_u of `bpr.objective` summed over every (i, j) pair of u7's positives i and
    non-positives j, weighted by the uniform negative distribution 1 / |N_u| (the expected LearnBPR
    objective of that user, `api_fold_in.bpr`)."""
    import jax
    import jax.numpy as jnp

    from custom_inference import bpr

    post = {k: jnp.asarray(np.asarray(v.values)[0, 0]) for k, v in m2.idata.posterior.data_vars.items()}
    P = _u7_positives(m2, ratings)
    N = np.setdiff1d(np.arange(m2.shape[1]), P)
    pos, neg = np.repeat(P, N.size), np.tile(N, P.size)
    k = int(m2._index([user], "user")[0])
    W = post["user_factors"][k:k + 1]
    f = lambda W: bpr.objective(bpr.BPRParams(W, post["item_factors"], post["item_bias"]),  # noqa: E731
                                jnp.zeros(pos.size, jnp.int32), jnp.asarray(pos), jnp.asarray(neg),
                                jnp.full(pos.size, 1.0 / N.size), float(m2.idata.posterior.attrs["reg"]),
                                float(m2.idata.posterior.attrs["bias_reg"]))
    return float(jnp.abs(jax.grad(f)(W)).max())


@pytest.mark.parametrize("name, opts, grad", [("sgd-fm", {"n_epochs": 3}, _sgd_fm_grad),
                                              ("sibm-map", {"n_iter": 20}, _sibm_map_grad),
                                              # BPR fits in float32 unless told: the stored w_u would round at 6e-8
                                              ("bpr", {"n_epochs": 3, "dtype": np.float64}, _bpr_grad)])
def test_point_estimate_fold_in_is_the_exact_optimum(name, opts, grad, ratings):
    """SGD-FM, SIBM MAP and BPR: the fold-in must be the unique optimum, in the new user's parameters,
    of the objective the fit itself optimizes with the items held (SGD-FM: `fm_sgd.objective`, a ridge
    regression in (w_u, v_u): strictly convex; SIBM MAP: `sibm.log_joint`, a logistic regression with
    a Gaussian prior in u: strictly concave; BPR: the expected LearnBPR objective, `bpr.objective` over
    all pairs weighted by the negative-sampling distribution: strictly concave for reg > 0), so
    ``jax.grad`` of that objective (autodiff, independent of the fold-in's closed form or Newton
    steps) vanishes there. Tolerance 1e-8 (float64 solves leave ~1e-13 on objectives of size ~1e2);
    at u7's own SGD / SGA point the gradient is > 1e-3 (asserted): the fit's u7 is not the optimum,
    which is why the twin is not compared with it."""
    m = _fit(name, ratings, **opts)
    m2 = m.fold_in(_twin(ratings), **COLS)
    _assert_old_unchanged(m, m2)
    assert grad(m2, ratings, "twin") < 1e-8, grad(m2, ratings, "twin")
    assert grad(m2, ratings, "u7") > 1e-3, grad(m2, ratings, "u7")
    assert np.all(m2.predict([("twin", b) for b in ITEMS])["sd"] == 0)  # a point estimate
