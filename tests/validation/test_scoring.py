"""The scoring engine (`validation.frontdoor.scoring`): the same recommendations and predictions as the
definition (per-draw E[y_ui] from each adapter's mean over all pairs, then mean / sd / quantiles over
the draws, as `FittedModel.recommend` / `predict` computed them before issue 24), whichever chunking
the memory bound forces; the chunk planner never plans more than ``max_bytes``; `api_models._dot`
equals the old one-line einsum."""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd
import pytest

from validation.frontdoor import api, api_models, scoring, tables

jax.config.update("jax_enable_x64", True)

FAST = {
    "hpf": {"max_iter": 15, "n_draws": 50},
    "bpmf": {"num_chains": 2, "num_warmup": 10, "num_samples": 20},
    "vbfm": {"max_iter": 10},
    "sibm": {"max_iter": 10},
    "rg": {"max_iter": 10},
    "bpr": {"n_epochs": 3},
    "psm": {"max_iter": 10},
}
# HPF CAVI (draws from q), a sampler (BPMF), an FM (VBFM), the sigmoid link (SIBM, RG), a point
# estimate in float32 (BPR) and PSM's normalised link
MODELS = tuple(FAST)

# Tolerance of scores: the engine sums the same products in another order (one GEMM over draws x
# components instead of per-draw dot products, then a mean), so in float64 it differs from the
# definition by float rounding: a few ulps of the largest term summed, far below 1e-12 relative.
# BPR's posterior is float32; the old path summed its K products in float32, the engine in float64,
# so there the difference is float32 rounding (~1e-7 relative).
RTOL = {"bpr": 1e-5}


@pytest.fixture(scope="module")
def fitted(request):
    rng = np.random.default_rng(0)
    I, J = 24, 18
    mask = rng.random((I, J)) < 0.45
    u, i = np.nonzero(mask)
    stars = rng.integers(1, 6, size=u.size).astype(float)
    ratings = pd.DataFrame({"reader": [f"u{k}" for k in u], "book": [f"b{k}" for k in i], "stars": stars})
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = api.fit(name, ratings, K=2, seed=0, user_col="reader", item_col="book",
                                  value_col="stars", progress=False, **FAST[name])
        return cache[name]

    return get


# ------------------------------------------------------------------------------------------
# the definition, written out as FittedModel computed it before the engine (issue 24)


def _draws(m, rows, cols):
    post = tables._posterior(m.idata)
    return np.asarray(m.adapter.mean(post, rows, cols, dict(m.idata.posterior.attrs)), dtype=np.float64)


def _reference_recommend(m, users, N, exclude_seen):
    rows = m._index(users, "user")
    J = len(m.item_ids)
    out = []
    for n_u, u in enumerate(rows):
        draws = _draws(m, np.full(J, u), np.arange(J))
        mean = draws.mean(axis=0)
        sd = draws.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros_like(mean)
        score = mean.copy()
        if exclude_seen:
            score[m.seen.indices[m.seen.indptr[u]:m.seen.indptr[u + 1]]] = -np.inf
        n = min(int(N), int(np.isfinite(score).sum()))
        for rank, i in enumerate(np.argsort(-score, kind="stable")[:n], start=1):
            out.append((users[n_u], rank, m.item_ids[i], float(mean[i]), float(sd[i])))
    return pd.DataFrame(out, columns=["user", "rank", "item", "score", "sd"])


def _reference_predict(m, users, items, interval):
    rows, cols = m._index(users, "user"), m._index(items, "item")
    draws = _draws(m, rows, cols)
    lo, hi = np.quantile(draws, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
    return pd.DataFrame({"user": users, "item": items, "mean": draws.mean(axis=0),
                         "sd": draws.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros(len(rows)),
                         "lower": lo, "upper": hi, "method": m.uncertainty})


def _assert_same_recommendations(got, want, rtol):
    assert list(got.columns) == list(want.columns)
    assert got[["user", "rank", "item"]].equals(want[["user", "rank", "item"]])  # items exactly, same order
    scale = max(1.0, float(np.abs(want["score"]).max()))  # absolute part: rounding of the summed terms
    np.testing.assert_allclose(got["score"], want["score"], rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(got["sd"], want["sd"], rtol=rtol, atol=rtol * scale)


# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_forms_equal_adapter_means(name, fitted):
    # each model's LinearScore gives the adapter's per-draw E[y_ui] on any pairs (both written from the
    # seed equation, independently)
    m = fitted(name)
    form, post, attrs = scoring._form(m)
    assert form is not None
    I, J = m.shape
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(0, I, 50), rng.integers(0, J, 50)
    want = _draws(m, rows, cols)
    norm = None
    if form.link == "psm":
        uniq, inv = np.unique(rows, return_inverse=True)
        norm = scoring._psm_norms(form, uniq, scoring.ItemsPlan(1, 3, 0))[:, inv]
    got = form.pair_draws(rows, cols, norm, block_bytes=1)  # 1 byte: one draw and one pair per block
    rtol = RTOL.get(name, 1e-12)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max()))


# max_bytes small enough to force several user chunks (the last one partial: 24 users) and, for the
# identity link, several draw chunks; None: the default (one chunk)
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("max_bytes", [None, "small"])
def test_recommend_equals_definition(name, max_bytes, fitted):
    m = fitted(name)
    users = [m.user_ids[k].item() if hasattr(m.user_ids[k], "item") else m.user_ids[k] for k in (0, 3, 5, 7, 9, 2, 11)]
    I, J = m.shape
    form, post, _ = scoring._form(m)
    S, K = form.n_draws, form.K
    kw = {}
    if max_bytes == "small":
        # room for 2 users of 7 and few draws: 4 user chunks, the last one partial
        d = max(1, S // 3) if form.link == "identity" else 1  # other links: at least min(users, 64) users if it fits
        kw["max_bytes"] = scoring.items_bytes(form.link, 2, d, n_items=J, n_draws=S, K=K, N=30)
        kw["max_bytes"] = max(kw["max_bytes"], scoring.pairs_bytes(1, n_draws=S, K=K, block_bytes=3 * 8 * K)
                              + 8 * (4 * 2 * 30 + S * 2) + 1)
        plan = scoring.plan_items(form.link, n_users=len(users), n_items=J, n_draws=S, K=K, N=30, **kw)
        assert plan.users < len(users) and len(users) % plan.users != 0  # several chunks, a partial last one
        if S > 1:
            assert plan.draws < S  # several draw chunks
    rtol = RTOL.get(name, 1e-12)
    for N in (3, 30):  # 30 > the 18 items: every unseen item, then every item
        for exclude_seen in (True, False):
            got = scoring.recommend(m, users, N, exclude_seen=exclude_seen, **kw)
            want = _reference_recommend(m, users, N, exclude_seen)
            _assert_same_recommendations(got, want, rtol)
            if N == 30:
                n_seen = np.diff(m.seen.indptr)[m._index(users, "user")]
                assert got.groupby("user", sort=False).size().tolist() == (
                    list(J - n_seen) if exclude_seen else [J] * len(users))
    for u in users[:3]:  # one user a call: the serving path (`_seen_cells` / `_top_chunk` one-row branches)
        for N in (3, 30):
            got = scoring.recommend(m, [u], N, **kw)
            _assert_same_recommendations(got, _reference_recommend(m, [u], N, True), rtol)


@pytest.mark.parametrize("name", MODELS)
def test_predict_equals_definition(name, fitted):
    m = fitted(name)
    I, J = m.shape
    rng = np.random.default_rng(2)
    users = [m.user_ids[k] for k in rng.integers(0, I, 40)]
    items = [m.item_ids[k] for k in rng.integers(0, J, 40)]
    want = _reference_predict(m, users, items, 0.8)
    form, _, _ = scoring._form(m)
    small = 8 * 6 * form.n_draws * 7 + 3 * 8 * form.K + 8 * 6 * form.n_draws * 2 * J  # a few pairs per chunk
    rtol = RTOL.get(name, 1e-12)
    for kw in ({}, {"max_bytes": small}):
        got = scoring.predict(m, pd.DataFrame({"user": users, "item": items}), interval=0.8, **kw)
        assert list(got.columns) == list(want.columns)
        assert got[["user", "item", "method"]].equals(want[["user", "item", "method"]])
        for col in ("mean", "sd", "lower", "upper"):
            scale = max(1.0, float(np.abs(want[col]).max()))
            np.testing.assert_allclose(got[col], want[col], rtol=rtol, atol=rtol * scale, err_msg=col)
    got = scoring.predict(m, list(zip(users[:3], items[:3])))
    assert got.shape == (3, 7) and np.all(got["lower"] <= got["upper"])


def test_adapter_without_form_is_scored_through_its_mean(fitted, monkeypatch):
    # a user's own adapter (its mean is not in SCORE_FORMS): the engine calls the mean on chunks of pairs
    hpf = fitted("hpf")
    custom = api.Adapter("hpf-custom", "count", api.ADAPTERS["hpf"].run,
                         lambda post, rows, cols, attrs: api_models._hpf_mean(post, rows, cols, attrs),
                         "draws from q (CAVI)", "test")
    monkeypatch.setitem(api.ADAPTERS, "hpf-custom", custom)
    m = api.FittedModel("hpf-custom", hpf.idata, hpf.user_ids, hpf.item_ids, hpf.seen, hpf.settings)
    assert scoring._form(m)[0] is None
    users = list(m.user_ids[:5])
    S, K = 50, 2
    small = 8 * (2 * 18 + 4 * 18 + 5 + (2 * K + 12) * S * 4)  # 4 pairs per call of the mean
    for kw in ({}, {"max_bytes": small}):
        got = scoring.recommend(m, users, 4, **kw)
        _assert_same_recommendations(got, _reference_recommend(m, users, 4, True), 1e-12)
    want = _reference_predict(m, users, list(m.item_ids[:5]), 0.9)
    got = scoring.predict(m, list(zip(users, m.item_ids[:5])), max_bytes=small)
    np.testing.assert_allclose(got[["mean", "sd", "lower", "upper"]], want[["mean", "sd", "lower", "upper"]],
                               rtol=1e-12)


def test_bad_input(fitted):
    m = fitted("hpf")
    with pytest.raises(ValueError, match="N must be"):
        scoring.recommend(m, [m.user_ids[0]], 0)
    with pytest.raises(KeyError, match="unknown user id"):
        scoring.recommend(m, ["nobody"])
    with pytest.raises(ValueError, match="interval"):
        scoring.predict(m, [(m.user_ids[0], m.item_ids[0])], interval=1.0)
    with pytest.raises(ValueError, match="max_bytes=100 is too small"):
        scoring.recommend(m, [m.user_ids[0]], max_bytes=100)
    one = scoring.recommend(m, m.user_ids[0], 2)  # a single id, not a list
    assert one["rank"].tolist() == [1, 2]
    empty = scoring.recommend(m, [], 2)
    assert list(empty.columns) == ["user", "rank", "item", "score", "sd"] and len(empty) == 0
    assert len(scoring.predict(m, [])) == 0


# ------------------------------------------------------------------------------------------
# the planner (pure functions)


@pytest.mark.parametrize("link", scoring.LINKS)
def test_planner_never_plans_more_than_max_bytes(link):
    rng = np.random.default_rng(3)
    for _ in range(300):
        I, J, S, K, N = (int(rng.integers(1, 5_000)), int(rng.integers(1, 20_000)), int(rng.integers(1, 500)),
                         int(rng.integers(1, 64)), int(rng.integers(1, 50)))
        need = scoring.items_bytes(link, 1, 1, n_items=J, n_draws=S, K=K, N=N)
        max_bytes = int(need * rng.uniform(0.5, 200))
        if max_bytes < need:
            with pytest.raises(ValueError, match="too small"):
                scoring.plan_items(link, n_users=I, n_items=J, n_draws=S, K=K, max_bytes=max_bytes, N=N)
            continue
        plan = scoring.plan_items(link, n_users=I, n_items=J, n_draws=S, K=K, max_bytes=max_bytes, N=N)
        assert 1 <= plan.users <= I and 1 <= plan.draws <= S
        assert plan.bytes == scoring.items_bytes(link, plan.users, plan.draws, n_items=J, n_draws=S, K=K, N=N)
        assert plan.bytes <= max_bytes
        # not needlessly small: with all draws in one chunk, one more user would not fit
        if plan.users < I and plan.draws == S and (link not in ("sigmoid", "psm") or plan.users >= min(I, 64)):
            assert scoring.items_bytes(link, plan.users + 1, S, n_items=J, n_draws=S, K=K, N=N) > max_bytes


def test_pair_planner_never_plans_more_than_max_bytes():
    rng = np.random.default_rng(4)
    for _ in range(300):
        M, S, K = int(rng.integers(1, 10**6)), int(rng.integers(1, 500)), int(rng.integers(1, 64))
        max_bytes = int(rng.choice([rng.integers(1, 2**17), rng.integers(1, 2**30)]))
        try:
            m, block = scoring.plan_pairs(M, n_draws=S, K=K, max_bytes=max_bytes)
        except ValueError as err:  # refused only when one pair with the smallest `_dot` block cannot fit
            assert "too small" in str(err)
            assert max_bytes < scoring.pairs_bytes(1, n_draws=S, K=K, block_bytes=3 * 8 * K)
            continue
        assert 1 <= m <= M
        assert scoring.pairs_bytes(m, n_draws=S, K=K, block_bytes=block) <= max_bytes
        m2, _ = scoring.plan_pairs(M, n_draws=S, K=K, max_bytes=max_bytes, adapter=True) if \
            8 * (2 * K + 12) * S <= max_bytes else (None, None)
        if m2 is not None:
            assert 1 <= m2 <= M and m2 * 8 * (2 * K + 12) * S <= max_bytes


def test_planner_default_fits_the_issue_size():
    # the issue's fit: 610 users x 9,724 items, K 20, 200 draws from q: all users in one chunk under the
    # default bound, three draw chunks
    plan = scoring.plan_items("identity", n_users=610, n_items=9_724, n_draws=200, K=20, max_bytes=scoring.MAX_BYTES)
    assert plan.users == 610 and plan.bytes <= scoring.MAX_BYTES < 500e6


# ------------------------------------------------------------------------------------------
# api_models._dot


def test_dot_equals_the_einsum_without_its_blowup():
    rng = np.random.default_rng(5)
    S, I, J, K, M = 7, 11, 13, 4, 200
    A, B, w = rng.normal(size=(S, I, K)), rng.normal(size=(S, J, K)), rng.gamma(1.0, size=(S, K))
    rows, cols = rng.integers(0, I, M), rng.integers(0, J, M)
    old = np.einsum("smk,smk->sm", A[:, rows], B[:, cols])
    weighted = np.einsum("smk,smk,sk->sm", A[:, rows], B[:, cols], w)
    for block in (1, 100, 10**9):  # one (draw, pair) per block; a few pairs; everything at once
        got = api_models._dot(A, B, rows, cols, block_bytes=block)
        assert got.shape == (S, M) and got.dtype == np.float64
        np.testing.assert_allclose(got, old, rtol=1e-13, atol=1e-13)  # the same K products summed
        np.testing.assert_allclose(api_models._dot(A, B, rows, cols, w, block_bytes=block), weighted,
                                   rtol=1e-13, atol=1e-13)
    assert api_models._dot(A, B, rows[:0], cols[:0]).shape == (S, 0)


def _synthetic_posterior(mean_fn, rng, S=6, I=5, J=7, K=3):
    """A random posterior dict with the variables (and shapes) each adapter mean reads, and its attrs."""
    g = lambda *shape: rng.gamma(2.0, size=shape)  # noqa: E731  (positive, for HPF / PFM / PSM)
    n = lambda *shape: rng.normal(size=shape)  # noqa: E731
    D = I + J
    table = {
        api_models._hpf_mean: {"theta": g(S, I, K), "beta": g(S, J, K)},
        api_models._sbmf_mean: {"mu": n(S), "alpha": n(S, I), "beta": n(S, J), "U": n(S, I, K), "V": n(S, J, K)},
        api_models._bpmf_mean: {"U": n(S, I, K), "V": n(S, J, K)},
        api_models._fm_mean: {"w0": n(S), "w": n(S, D), "V": n(S, D, K)},
        api_models._sibm_mean: {"U": n(S, I, K), "V": n(S, J, K), "z": n(S)},
        api_models._rg_mean: {"u": n(S, I, K), "v": n(S, J, K), "b_user": n(S, I), "b_item": n(S, J)},
        api_models._bpr_mean: {"user_factors": n(S, I, K), "item_factors": n(S, J, K), "item_bias": n(S, J)},
        api_models._pfm_mean: {"w0": g(S), "w": g(S, D), "V": g(S, D, K), "r": g(S, K)},
        api_models._psm_mean: {"u": n(S, I, K), "v": n(S, J, K), "b_user": n(S, I), "b_item": n(S, J), "psi": g(S, J)},
    }
    return table[mean_fn], {"front_door_n_users": I, "front_door_offset": 3.5}


@pytest.mark.parametrize("mean_fn", list(api_models.SCORE_FORMS), ids=lambda f: f.__name__)
def test_every_registered_form_equals_its_mean_on_a_synthetic_posterior(mean_fn):
    # all nine forms (SBMF, NPFM with its weights r, the FMs, ...: the fitted tests above cover seven
    # models), on random draws; PPFM is NPFM without r
    rng = np.random.default_rng(6)
    post, attrs = _synthetic_posterior(mean_fn, rng)
    variants = [post] + ([{k: v for k, v in post.items() if k != "r"}] if "r" in post else [])
    for p in variants:
        form = api_models.SCORE_FORMS[mean_fn](p, attrs)
        rows, cols = rng.integers(0, 5, 40), rng.integers(0, 7, 40)
        norm = None
        if form.link == "psm":
            norm = scoring._psm_norms(form, np.arange(5), scoring.ItemsPlan(5, 4, 0))[:, rows]
        want = mean_fn(p, rows, cols, attrs)
        np.testing.assert_allclose(form.pair_draws(rows, cols, norm), want, rtol=1e-12, atol=1e-12)
        # and the all-items means of the engine's first pass (2 draws per chunk) against the same mean
        plan = scoring.ItemsPlan(3, 2, 0)
        ib = None if form.item_bias is None else form.item_bias.mean(axis=0)
        c = 0.0 if form.const is None else float(np.mean(form.const))
        got, _ = scoring._item_means(form, np.array([0, 2, 4]), plan, ib, c)
        full = mean_fn(p, np.repeat([0, 2, 4], 7), np.tile(np.arange(7), 3), attrs).mean(axis=0).reshape(3, 7)
        np.testing.assert_allclose(got, full, rtol=1e-12, atol=1e-12)


def test_means_q_is_hpf_closed_form_and_the_draws_estimate_it(fitted):
    from custom_inference import arviz_io

    m = fitted("hpf")
    vp = arviz_io.group_arrays(m.idata, "variational_parameters")
    exact = (vp["gamma_shape"] / vp["gamma_rate"]) @ (vp["lambda_shape"] / vp["lambda_rate"]).T  # (I, J), tiny
    users = list(m.user_ids[:6])
    rows = m._index(users, "user")
    for kw in ({}, {"max_bytes": 20_000}):
        got = scoring.recommend(m, users, 30, means="q", **kw)
        draws_rec = scoring.recommend(m, users, 30, **kw)
        for n_u, u in enumerate(rows):
            mine = got[got.user == users[n_u]]
            score = exact[u].copy()
            score[m.seen.indices[m.seen.indptr[u]:m.seen.indptr[u + 1]]] = -np.inf
            order = np.argsort(-score, kind="stable")[:len(mine)]
            assert mine["item"].tolist() == list(m.item_ids[order])
            np.testing.assert_allclose(mine["score"], exact[u, order], rtol=1e-12)  # a K-term dot product
        # the sd is the draws' sd either way
        both = got.merge(draws_rec, on=["user", "item"], suffixes=("_q", "_d"))
        assert len(both) == len(got)
        np.testing.assert_allclose(both["sd_q"], both["sd_d"], rtol=1e-12)
    # the stored draws' mean is a Monte Carlo estimate of the closed form: every cell within 5 Monte Carlo
    # standard errors (sd / sqrt(S), S independent draws from q; two-sided 5 sigma over 24 x 18 cells:
    # false alarm < 3e-4)
    I, J = m.shape
    pairs = [(a, b) for a in m.user_ids for b in m.item_ids]
    d = scoring.predict(m, pairs)
    q = scoring.predict(m, pairs, means="q")
    S = scoring._form(m)[0].n_draws
    z = (d["mean"] - q["mean"]) / (d["sd"] / np.sqrt(S))
    assert np.all(np.abs(z) < 5), float(np.abs(z).max())
    np.testing.assert_allclose(q["mean"], exact.ravel(), rtol=1e-12)
    np.testing.assert_array_equal(q[["sd", "lower", "upper"]], d[["sd", "lower", "upper"]])
    # sd=False: the mean alone (q's closed form without a pass over the draws; the draws' mean likewise)
    q_only = scoring.predict(m, pairs, means="q", sd=False)
    assert list(q_only.columns) == ["user", "item", "mean", "method"]
    np.testing.assert_array_equal(q_only["mean"], q["mean"])
    np.testing.assert_array_equal(m.predict(pairs[:5], sd=False)["mean"], d["mean"][:5])
    with pytest.raises(ValueError, match="sd=False needs kind='mean'"):
        m.predict(pairs[:2], kind="observation", sd=False)


def test_means_q_is_refused_without_a_closed_form(fitted):
    m = fitted("bpmf")
    with pytest.raises(ValueError, match="no closed-form mean.*hpf"):
        scoring.recommend(m, [m.user_ids[0]], means="q")
    with pytest.raises(ValueError, match="means must be one of"):
        scoring.predict(m, [(m.user_ids[0], m.item_ids[0])], means="mean")


def test_top_n_keeps_the_stable_tie_rule():
    # many exact ties (integer scores), -inf, NaN and seen items: the partition-based top-N is the head of
    # np.argsort(-score, kind="stable") over the finite, unseen scores, as the old path ordered them
    rng = np.random.default_rng(7)
    for _ in range(500):
        J = int(rng.integers(1, 40))
        score = rng.integers(0, 4, J).astype(float)
        score[rng.random(J) < 0.1] = -np.inf
        score[rng.random(J) < 0.1] = np.nan
        seen = np.flatnonzero(rng.random(J) < 0.3)
        N = int(rng.integers(1, 45))
        ref = score.copy()
        ref[seen] = -np.inf
        n = min(N, int(np.isfinite(ref).sum()))
        want = np.argsort(-ref, kind="stable")[:n]
        np.testing.assert_array_equal(scoring._top(score, N, seen), want)


@pytest.mark.parametrize("name", ["hpf", "sibm"])
def test_iter_item_scores_are_the_draw_means_in_chunks(name, fitted):
    m = fitted(name)
    I, J = m.shape
    rows = np.array([4, 0, 7, 2, 9])
    form = scoring._form(m)[0]
    small = scoring.items_bytes(form.link, 2, 1, n_items=J, n_draws=form.n_draws, K=form.K, N=0)
    got = list(scoring.iter_item_scores(m, rows, max_bytes=small))
    assert len(got) > 1 and np.concatenate([b for b, _ in got]).tolist() == rows.tolist()  # chunks, in order
    want = np.stack([_draws(m, np.full(J, u), np.arange(J)).mean(axis=0) for u in rows])
    np.testing.assert_allclose(np.concatenate([s for _, s in got]), want, rtol=1e-12, atol=1e-12)


def test_chunk_top_n_equals_the_one_row_rule():
    # the chunked top-N (one argpartition per chunk, exact fallback on boundary ties / too few finite)
    # gives, row by row, what `_top` gives: ties, -inf, +inf, NaN and seen items included
    rng = np.random.default_rng(8)
    for _ in range(300):
        U, J = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        score = rng.integers(0, 4, (U, J)).astype(float)
        score[rng.random((U, J)) < 0.1] = -np.inf
        score[rng.random((U, J)) < 0.05] = np.inf
        score[rng.random((U, J)) < 0.1] = np.nan
        seen = [np.flatnonzero(rng.random(J) < 0.3) for _ in range(U)]
        N = int(rng.integers(1, 45))
        cells = (np.repeat(np.arange(U), [s.size for s in seen]), np.concatenate(seen).astype(np.int64))
        got = scoring._top_chunk(score.copy(), N, cells)
        for b in range(U):
            np.testing.assert_array_equal(got[b], scoring._top(score[b], N, seen[b]))


@pytest.mark.parametrize("name", ["hpf", "bpr"])
def test_second_call_reuses_the_cache_and_sd_false_drops_only_the_sd(name, fitted):
    m = fitted(name)
    users = list(m.user_ids[:5])
    means = "q" if name == "hpf" else "draws"
    first = m.recommend(users, 7, means=means)
    prep = scoring._prepared(m, means)
    again = m.recommend(users, 7, means=means)
    assert scoring._prepared(m, means) is prep  # nothing rebuilt
    pd.testing.assert_frame_equal(first, again)
    no_sd = m.recommend(users, 7, means=means, sd=False)
    assert list(no_sd.columns) == ["user", "rank", "item", "score"]
    pd.testing.assert_frame_equal(no_sd, first.drop(columns="sd"))
    # a single-draw score (q's means, BPR's point estimate) is scored by the GEMM path; the kept bytes
    # are within the documented bound 8 ((I + J) (K + 1)) per means used
    assert prep.point is not None
    I, J = m.shape
    assert 0 < scoring.cache_bytes(m) <= 8 * (I + J) * (prep.K + 1) * len(m.__dict__["_scoring_cache"])


def test_recommend_columns_hold_the_models_ids_whatever_form_they_were_asked_in():
    """`recommend`'s user and item columns are the model's ids (gathered from arrays kept on the model,
    `scoring._id_arrays`): integer ids stay int64 when a user is asked for as the string "5", string ids
    keep pandas' string dtype, and a second call (cached arrays) gives the same frame."""
    rng = np.random.default_rng(1)
    u, i = np.nonzero(rng.random((12, 9)) < 0.5)
    df = pd.DataFrame({"user": u + 100, "item": i * 10, "value": rng.integers(1, 4, u.size)})
    m = api.fit("hpf", df, K=2, seed=0, max_iter=5, n_draws=5, progress=False)
    rec = m.recommend(["105", 103], N=3, means="q", sd=False)
    assert rec["user"].dtype == np.int64 and rec["item"].dtype == np.int64, rec.dtypes
    assert rec["user"].tolist()[:3] == [105] * 3 and set(rec["user"]) == {105, 103}
    assert set(rec["item"]) <= set(df["item"])
    pd.testing.assert_frame_equal(rec, m.recommend(["105", 103], N=3, means="q", sd=False))
    strs = df.assign(user="u" + df["user"].astype(str))
    ms = api.fit("hpf", strs, K=2, seed=0, max_iter=5, n_draws=5, progress=False)
    rs = ms.recommend("u105", N=2)
    assert isinstance(rs["user"].dtype, pd.StringDtype) and rs["user"].tolist() == ["u105"] * len(rs)


@pytest.mark.parametrize("name", ["hpf", "bpmf"])
def test_as_frame_false_returns_the_frames_columns_as_arrays(name, fitted):
    """``as_frame=False`` (`scoring.Recommendations`) holds exactly the DataFrame's columns, for one
    user (the one-user path) and several, with and without sd; an unknown user is refused the same way."""
    m = fitted(name)
    means = "q" if name == "hpf" else "draws"
    for users in (m.user_ids[3], list(m.user_ids[:6])):
        for sd in (True, False):
            frame = m.recommend(users, 5, means=means, sd=sd)
            arrays = m.recommend(users, 5, means=means, sd=sd, as_frame=False)
            assert isinstance(arrays, scoring.Recommendations)
            assert (arrays.sd is None) == (not sd)
            assert arrays.rank.dtype == np.int64 and arrays.score.dtype == np.float64
            got = pd.DataFrame({k: v for k, v in arrays._asdict().items() if v is not None})
            pd.testing.assert_frame_equal(got, frame, check_dtype=False)
            assert arrays.user.dtype == np.asarray(m.user_ids).dtype
    with pytest.raises(KeyError):
        m.recommend("no such user", 5, as_frame=False)
