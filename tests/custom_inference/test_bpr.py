"""Tests of custom_inference.bpr: gradient, sampler, reproducibility, learning, input checks."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

from custom_inference import bpr
from custom_inference.data import Observations


def _random_obs(rng, I, J, density):
    dense = (rng.random((I, J)) < density).astype(float)
    dense[np.arange(I), rng.integers(J, size=I)] = 1.0  # no empty row
    return Observations.from_dense(dense, kind="binary"), dense


# ---------------------------------------------------------------------------
# gradient of the objective
# ---------------------------------------------------------------------------


def test_triple_gradients_equal_jax_grad_of_objective():
    rng = np.random.default_rng(0)
    I, J, K, B = 5, 7, 3, 40  # B >> I, J: many rows repeat, so the scatter-adds are exercised
    params = bpr.BPRParams(
        jnp.asarray(rng.normal(size=(I, K))), jnp.asarray(rng.normal(size=(J, K))), jnp.asarray(rng.normal(size=J))
    )
    u = jnp.asarray(rng.integers(I, size=B))
    i = jnp.asarray(rng.integers(J, size=B))
    j = jnp.asarray(rng.integers(J, size=B))
    w = jnp.asarray((rng.random(B) < 0.8).astype(float))  # some triples dropped (weight 0)
    reg, bias_reg = 0.3, 0.07
    auto = jax.jit(jax.grad(bpr.objective))(params, u, i, j, w, reg, bias_reg)
    hand = jax.jit(bpr.triple_gradients)(params, u, i, j, w, reg, bias_reg)
    for name, a, h in zip(bpr.BPRParams._fields, auto, hand):
        assert a.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(h), np.asarray(a), rtol=1e-12, atol=1e-12, err_msg=name)


def test_objective_is_log_sigmoid_minus_penalty_for_one_triple():
    W = jnp.array([[1.0, 2.0]])
    H = jnp.array([[0.5, -1.0], [2.0, 0.0]])
    b = jnp.array([0.3, -0.2])
    f = bpr.objective(bpr.BPRParams(W, H, b), jnp.array([0]), jnp.array([1]), jnp.array([0]), jnp.ones(1), 0.1, 0.2)
    d = (1 * 2 + 2 * 0 + -0.2) - (1 * 0.5 + 2 * -1.0 + 0.3)
    pen = 0.05 * (5.0 + 4.0 + 1.25) + 0.1 * (0.04 + 0.09)
    assert float(f) == pytest.approx(-np.log1p(np.exp(-d)) - pen, rel=1e-12)


# ---------------------------------------------------------------------------
# sampler
# ---------------------------------------------------------------------------


def test_is_positive_matches_dense_pattern():
    rng = np.random.default_rng(1)
    obs, dense = _random_obs(rng, 30, 50, 0.2)
    data = bpr.bpr_data(obs)
    uu, ii = np.meshgrid(np.arange(30), np.arange(50), indexing="ij")
    got = np.asarray(bpr.is_positive(data, jnp.asarray(uu), jnp.asarray(ii)))
    np.testing.assert_array_equal(got, dense > 0)


# Tiny case: J = 6 items; user 0's positives are {0, 2}; user 1's are {0, 1, 2, 3, 5}, so the
# item popularities n_j are (2, 1, 2, 1, 0, 1). User 0's admissible negatives are {1, 3, 4, 5}.
_TINY = np.array([[1, 0, 1, 0, 0, 0], [1, 1, 1, 1, 0, 1]], dtype=float)


@pytest.mark.parametrize(
    "sampling, expected",
    [
        ("uniform", {1: 0.25, 3: 0.25, 4: 0.25, 5: 0.25}),  # uniform over non-positives
        ("popularity", {1: 1 / 3, 3: 1 / 3, 4: 0.0, 5: 1 / 3}),  # n_j restricted to non-positives
    ],
)
def test_negative_frequencies_follow_the_scheme(sampling, expected):
    """Pearson chi-square goodness of fit of M = 60,000 negatives of user 0.

    Test: the statistic over the cells with positive expected count, df = cells - 1, fails
    only if its p-value is below 1e-4 (false-alarm rate 1e-4 for the fixed seed). Cells with
    expected probability 0 (positives of the user, item 4 under popularity) must be empty.
    """
    data = bpr.bpr_data(Observations.from_dense(_TINY, kind="binary"))
    M = 60_000
    neg, ok = bpr.sample_negatives(jax.random.key(3), data, jnp.zeros(M, jnp.int32), sampling, max_tries=32)
    neg, ok = np.asarray(neg), np.asarray(ok)
    # P(all 32 draws positive) <= (2/3)^32 ~ 2e-6 per triple under popularity (1/3 uniform)
    assert ok.all()
    counts = np.bincount(neg, minlength=6)
    p = np.array([expected.get(j, 0.0) for j in range(6)])
    assert counts[p == 0].sum() == 0
    obs, exp = counts[p > 0], M * p[p > 0]
    chi2 = float(np.sum((obs - exp) ** 2 / exp))
    assert st.chi2.sf(chi2, df=obs.size - 1) > 1e-4, (counts, chi2)


def test_epoch_end_evaluation_in_chunks_equals_one_chunk():
    # log_sigmoid_after sums the epoch's N triples in chunks of eval_chunk (issue 14: no (N, K)
    # gathers); the parameters do not depend on it and the sum only through the order of N float64
    # additions of O(1) terms: relative error ~ N eps ~ 1e-13
    rng = np.random.default_rng(4)
    obs, _ = _random_obs(rng, 30, 20, 0.3)
    data = bpr.bpr_data(obs)
    p0 = bpr.init(jax.random.key(0), data, 3, dtype=np.float64)
    args = (jax.random.key(1), p0, data, 0.05, 0.01)
    p_one, info_one = bpr.epoch(*args, batch_size=16, eval_chunk=obs.nnz + 16)
    p_chunk, info_chunk = bpr.epoch(*args, batch_size=16, eval_chunk=7)
    for x, y in zip(p_one, p_chunk):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert float(info_one.mean_log_sigmoid) == float(info_chunk.mean_log_sigmoid)
    assert np.isclose(float(info_chunk.log_sigmoid_after), float(info_one.log_sigmoid_after), rtol=1e-12, atol=0)
    assert float(info_one.rejected) == float(info_chunk.rejected)


def test_sampler_never_returns_a_positive_and_rejects_boundedly():
    rng = np.random.default_rng(2)
    obs, dense = _random_obs(rng, 40, 25, 0.5)
    dense[7] = 1.0  # user 7 likes every item: no admissible negative
    obs = Observations.from_dense(dense, kind="binary")
    data = bpr.bpr_data(obs)
    users = jnp.asarray(np.repeat(np.arange(40), 200).astype(np.int32))
    n_j = dense.sum(axis=0)
    for sampling in bpr.SAMPLING:
        neg, ok = bpr.sample_negatives(jax.random.key(5), data, users, sampling, max_tries=8)
        neg, ok, u = np.asarray(neg), np.asarray(ok), np.asarray(users)
        assert not np.any(dense[u[ok], neg[ok]] > 0), sampling
        assert not ok[u == 7].any(), sampling  # rejected after 8 draws, the loop ended
        # A triple of user u is rejected with probability q_u^8, q_u = P(one draw is a
        # positive of u): |pos(u)| / J (uniform) or sum_{j in pos(u)} n_j / N (popularity).
        # The rejection count is a sum of independent Bernoullis: allow 5 sd (+1) around its mean.
        q = dense.mean(axis=1) if sampling == "uniform" else dense @ n_j / n_j.sum()
        p_rej = q[u] ** 8
        mean, sd = p_rej.sum(), np.sqrt(np.sum(p_rej * (1 - p_rej)))
        assert abs((~ok).sum() - mean) <= 5 * sd + 1, (sampling, (~ok).sum(), mean, sd)
    # an epoch runs through such a user and reports the rejected triples
    p0 = bpr.init(jax.random.key(0), data, 4, dtype=np.float64)
    assert p0.user_factors.shape == (data.n_rows, 4) and p0.item_factors.shape == (data.n_cols, 4)
    _, info = bpr.epoch(jax.random.key(1), p0, data, 0.05, 0.01, sampling="uniform", batch_size=64, max_tries=4)
    assert float(info.rejected) >= 25 / obs.nnz - 1e-12
    assert np.isfinite(float(info.mean_log_sigmoid))
    # the protocol step is that epoch, and its Info describes the parameters it returns
    new, info2 = bpr.step(jax.random.key(1), p0, data, bpr.BPRHyper(0.01), learning_rate=0.05, batch_size=64,
                          max_tries=4)
    assert float(info2.rejected) == float(info.rejected)
    # with a vanishing step the parameters barely move, so the new state's value on the epoch's triples
    # equals the running one (a change of 1e-12 in the parameters moves ln sigma by < 1e-10)
    _, tiny = bpr.step(jax.random.key(1), p0, data, bpr.BPRHyper(0.01), learning_rate=1e-12, batch_size=64)
    assert abs(float(tiny.log_sigmoid_after) - float(tiny.mean_log_sigmoid)) < 1e-10
    assert np.isfinite(float(bpr.bpr_opt(new, data, bpr.BPRHyper(0.01))))


# ---------------------------------------------------------------------------
# fit
# ---------------------------------------------------------------------------


def _planted(seed=0, I=120, J=60, groups=3):
    """Users and items in ``groups`` blocks; P(positive) = 0.35 inside a block, 0.02 outside."""
    rng = np.random.default_rng(seed)
    gu = np.arange(I) % groups
    gi = np.arange(J) % groups
    p = np.where(gu[:, None] == gi[None, :], 0.35, 0.02)
    dense = (rng.random((I, J)) < p).astype(float)
    return dense, gu, gi


def _planted_split():
    dense, _, _ = _planted()
    rng = np.random.default_rng(1)
    test_items = np.array([rng.choice(np.flatnonzero(r)) for r in dense])
    train = dense.copy()
    train[np.arange(dense.shape[0]), test_items] = 0
    return dense, train, test_items


# the fits below share one compiled epoch (same data shape, K, batch size and dtype)
_FIT = dict(learning_rate=0.05, batch_size=64, dtype=np.float64)
_K, _HYPER = 8, bpr.BPRHyper(reg=0.01)


def test_fit_is_reproducible_by_key():
    _, train, _ = _planted_split()
    obs = Observations.from_dense(train, kind="binary")
    a = bpr.fit(jax.random.key(11), obs, _K, _HYPER, n_epochs=3, sampling="popularity", **_FIT)
    b = bpr.fit(jax.random.key(11), obs, _K, _HYPER, n_epochs=3, sampling="popularity", **_FIT)
    c = bpr.fit(jax.random.key(12), obs, _K, _HYPER, n_epochs=3, sampling="popularity", **_FIT)
    for x, y in zip(a.state, b.state):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not np.allclose(np.asarray(a.state.item_factors), np.asarray(c.state.item_factors))
    assert a.idata.posterior.user_factors.shape == (1, 1, obs.n_rows, _K)


@pytest.mark.parametrize("sampling", bpr.SAMPLING)
def test_fit_ranks_planted_blocks_above_chance(sampling):
    """Held-out positives (one per user) must rank high among the user's non-positives.

    Chance gives a mean rank score of 0.5 with sd ~0.29 per user, so over 120 users its
    standard error is ~0.026; 0.75 is ~10 standard errors above chance. With the blocks, the
    best possible ranking puts the held-out item (in the user's block with probability
    ~0.35*20/(0.35*20+0.02*40) ~ 0.9) in the first third: a good fit scores ~0.85-0.9.
    """
    dense, train, test_items = _planted_split()
    obs = Observations.from_dense(train, kind="binary")
    fit = bpr.fit(jax.random.key(0), obs, _K, _HYPER, n_epochs=40, sampling=sampling, **_FIT)
    mls = fit.idata.sgd_trace.mean_log_sigmoid.values
    assert mls[-1] > mls[0] and fit.trace[-1] > fit.trace[0]
    s = np.asarray(bpr.score_users(fit.state, np.arange(dense.shape[0])))
    assert s.shape == dense.shape
    ranks = []
    for u, j in enumerate(test_items):
        cand = (train[u] == 0) & (np.arange(dense.shape[1]) != j)
        ranks.append(np.mean(s[u, cand] < s[u, j]))
    assert np.mean(ranks) > 0.75, np.mean(ranks)


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


def test_bad_input_raises_naming_the_field():
    obs = Observations.from_dense(_TINY, kind="binary")
    key = jax.random.key(0)
    for kwargs, field in [
        (dict(K=0), "K"),
        (dict(K=2.5), "K"),
        (dict(n_epochs=0), "n_epochs"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(hyper=bpr.BPRHyper(reg=-1.0)), "reg"),
        (dict(hyper=bpr.BPRHyper(bias_reg=-1.0)), "bias_reg"),
        (dict(sampling="pop"), "sampling"),
        (dict(batch_size=0), "batch_size"),
        (dict(max_tries=0), "max_tries"),
        (dict(init_scale=0.0), "init_scale"),
        (dict(dtype=np.int32), "dtype"),
    ]:
        with pytest.raises(ValueError, match=field):
            bpr.fit(key, obs, **kwargs)
    with pytest.raises(TypeError, match="train must be"):
        bpr.fit(key, _TINY)
    neg = Observations.from_coo([0, 1], [0, 1], [1.0, -1.0], (2, 2), kind="real")
    with pytest.raises(ValueError, match="train.values"):
        bpr.fit(key, neg)
    params = bpr.init(key, Observations.from_dense(np.ones((2, 6)), kind="binary"), 3)
    with pytest.raises(ValueError, match="users"):
        bpr.score_users(params, [0, 2])
    with pytest.raises(ValueError, match="users"):
        bpr.score_users(params, [[0]])
    with pytest.raises(ValueError, match="sampling"):
        bpr.sample_negatives(key, bpr.bpr_data(obs), jnp.zeros(3, jnp.int32), "zipf")


@contextlib.contextmanager
def _interrupted_at_second_checkpoint():
    """Run the block with a checkpoint hook that interrupts the fit at its second checkpoint (as SIGINT would);
    yields the list of the epochs checkpointed."""
    from custom_inference import base

    writes = []

    def hook(path, n_done):
        writes.append(n_done)
        if len(writes) == 2:
            raise base.Interrupted("stop")

    with base.on_checkpoint(hook), pytest.raises(base.Interrupted):
        yield writes


def test_stopped_and_resumed_fit_equals_the_uninterrupted_one(tmp_path):
    """Checkpoints every 2 epochs (`vi_driver.run`), stopped after the 2nd (epoch 4 of 5), resumed:
    parameters and per-epoch diagnostics equal the run without checkpoints bit for bit."""
    _, train, _ = _planted_split()
    obs = Observations.from_dense(train, kind="binary")
    full = bpr.fit(jax.random.key(11), obs, _K, _HYPER, n_epochs=5, sampling="popularity", **_FIT)
    ckpt = tmp_path / "bpr.npz"
    with _interrupted_at_second_checkpoint() as writes:
        bpr.fit(jax.random.key(11), obs, _K, _HYPER, n_epochs=5, sampling="popularity", checkpoint=ckpt,
                checkpoint_every=2, **_FIT)
    assert writes == [2, 4]
    resumed = bpr.fit(jax.random.key(11), obs, _K, _HYPER, n_epochs=5, sampling="popularity", checkpoint=ckpt,
                      checkpoint_every=2, resume=True, **_FIT)
    for x, y in zip(full.state, resumed.state):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for f in ("mean_log_sigmoid", "rejected", "log_sigmoid_after"):
        np.testing.assert_array_equal(full.idata.sgd_trace[f].values, resumed.idata.sgd_trace[f].values)


# ---------------------------------------------------------------------------
# the stopping rule on held-out positives (issue 27)
# ---------------------------------------------------------------------------


def _pairs(rows, cols, J):
    return set((np.asarray(rows, np.int64) * J + np.asarray(cols, np.int64)).tolist())


def test_hold_out_validation_removes_one_positive_per_user_and_draws_true_negatives():
    rng = np.random.default_rng(3)
    obs, dense = _random_obs(rng, 60, 25, 0.15)
    dense[0] = 1.0  # a user with every item: not eligible (no negative)
    obs = Observations.from_dense(dense, kind="binary")
    reduced, v = bpr.hold_out_validation(obs, n_users=40, n_negatives=30, seed=5)
    J = obs.n_cols
    full, kept, held = _pairs(obs.rows, obs.cols, J), _pairs(reduced.rows, reduced.cols, J), _pairs(v.users, v.positives, J)
    assert v.users.size == 40 and np.all(np.diff(v.users) > 0) and 0 not in v.users
    assert len(held) == 40 and kept.isdisjoint(held) and kept | held == full  # exactly the held-out ones removed
    assert reduced.shape == obs.shape and reduced.nnz == obs.nnz - 40
    deg = dense.sum(1)
    assert np.all(deg[v.users] >= 2)  # each validation user keeps a training positive
    assert v.negatives.shape == (40, 30) and not np.any(dense[v.users[:, None], v.negatives] == 1)
    again = bpr.hold_out_validation(obs, n_users=40, n_negatives=30, seed=5)[1]
    for a, b in zip(v, again):
        np.testing.assert_array_equal(a, b)
    few = bpr.hold_out_validation(obs, n_users=10_000, n_negatives=2, seed=0)[1]
    assert few.users.size == int(np.sum((deg >= 2) & (deg < J)))  # all eligible users when fewer than asked
    with pytest.raises(ValueError, match="cannot hold out"):
        bpr.hold_out_validation(Observations.from_dense(np.eye(4), kind="binary"))
    with pytest.raises(ValueError, match="validation_negatives"):
        bpr.hold_out_validation(obs, n_negatives=0)


def test_negatives_are_uniform_over_the_non_positives():
    """One user with 3 positives among J = 8: its 5 non-positives must each get 1/5 of the draws.
    Chi-square goodness of fit at a 1e-3 false-alarm rate (fixed seed)."""
    dense = np.zeros((2, 8))
    dense[0, [1, 4, 6]] = 1.0
    dense[1, [0, 2]] = 1.0
    _, v = bpr.hold_out_validation(Observations.from_dense(dense, kind="binary"), n_users=2, n_negatives=5000, seed=1)
    row = v.negatives[v.users == 0][0]
    counts = np.bincount(row, minlength=8)
    assert counts[[1, 4, 6]].sum() == 0
    assert st.chisquare(counts[[0, 2, 3, 5, 7]]).pvalue > 1e-3


def test_validation_auc_counts_ties_as_half():
    W = jnp.asarray([[1.0], [1.0]])
    H = jnp.asarray([[2.0], [1.0], [0.0], [1.0]])
    p = bpr.BPRParams(W, H, jnp.zeros(4))
    v = bpr.ValidationSet(np.array([0, 1]), np.array([0, 1]), np.array([[1, 2], [3, 0]]))
    np.testing.assert_array_equal(bpr.validation_auc(p, v), [1.0, 0.25])  # user 1: a tie (1/2) and a loss


def test_rule_stops_on_a_plateau_after_patience_checks_and_keeps_the_best():
    """A planted AUC path: 4 checks rising by 0.05 for every user, then flat (gain 0, se 0: no gain
    beyond noise), so the rule is met exactly ``patience`` checks into the plateau; the best check is
    the first of the plateau (ties keep the earlier)."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0.3, 0.6, 500)
    rule = bpr.AUCStoppingRule(patience=3)
    path = [base + 0.05 * min(c, 3) for c in range(10)]
    stops = [rule.update(a, epoch=5 * (c + 1), params=c)["stop"] for c, a in enumerate(path)]
    assert stops.index(True) == 3 + 3  # checks 0..3 rise, 4, 5, 6 are flat: met at the 3rd flat one
    assert rule.best_epoch == 20 and rule.best_params == 3
    assert rule.best_auc == pytest.approx(float(path[3].mean()), rel=1e-12)


def test_rule_does_not_stop_while_the_auc_rises_beyond_noise():
    """Mean AUC rises 0.01 per check; each user's AUC has independent noise sd 0.03, so the paired gain
    has standard error ~0.03 sqrt(2) / sqrt(400) = 0.0021, and a check fails to exceed it with
    probability P(Z < (0.0021 - 0.01) / 0.0021) ~ 1e-4; 3 consecutive failures (the next gain, against
    the same reference, is twice as large) over 30 checks: < 1e-9."""
    rng = np.random.default_rng(1)
    base = rng.uniform(0.4, 0.5, 400)
    rule = bpr.AUCStoppingRule(patience=3)
    out = [rule.update(base + 0.01 * c + rng.normal(0, 0.03, 400), epoch=c + 1) for c in range(30)]
    assert not any(o["stop"] for o in out)
    gains = np.array([o["gain"] for o in out[1:]])
    ses = np.array([o["se"] for o in out[1:]])
    assert np.all(gains > ses)
    # a slow rise (gain below one se each check) accumulates against the fixed reference and resets it
    rule = bpr.AUCStoppingRule(patience=3)
    slow = [rule.update(base + 0.0015 * c + rng.normal(0, 0.03, 400), epoch=c + 1) for c in range(30)]
    assert any(o["beyond_noise"] for o in slow[2:])


def test_rule_rejects_bad_input():
    with pytest.raises(ValueError, match="patience"):
        bpr.AUCStoppingRule(0)
    rule = bpr.AUCStoppingRule(2)
    rule.update(np.full(5, 0.5), 1)
    with pytest.raises(ValueError, match="auc"):
        rule.update(np.full(4, 0.5), 2)


_VAL = dict(validate_every=2, patience=3, validation_users=60, validation_negatives=20)


def test_fit_with_validation_stops_returns_the_best_check_and_never_trains_on_held_out(monkeypatch):
    from custom_inference import vi_driver

    _, train, _ = _planted_split()
    obs = Observations.from_dense(train, kind="binary")
    seen = []
    real = bpr._epoch_jit

    def spy(key, params, data, *args, **kw):
        seen.append(_pairs(data.rows, data.cols, data.n_cols))
        return real(key, params, data, *args, **kw)

    monkeypatch.setattr(bpr, "_epoch_jit", spy)
    key = jax.random.key(4)
    res = bpr.fit(key, obs, _K, _HYPER, n_epochs=200, sampling="uniform", **_VAL, **dict(_FIT, learning_rate=0.2))
    a = res.idata.posterior.attrs
    assert a["converged"] == 1 and a["n_iter"] < 200 and a["n_iter"] % 2 == 0  # the planted AUC plateaus
    _, v = bpr.hold_out_validation(obs, 60, 20, seed=vi_driver.host_seed(key))  # the fit's own split
    held = _pairs(v.users, v.positives, obs.n_cols)
    assert len(seen) == a["n_iter"] and all(s.isdisjoint(held) for s in seen)  # never trained on
    assert a["n_train_positives"] == obs.nnz - 60 == len(seen[0])
    auc = res.idata.sgd_trace.validation_auc.values
    checks = np.flatnonzero(~np.isnan(auc))
    np.testing.assert_array_equal(checks + 1, np.arange(2, a["n_iter"] + 1, 2))
    assert a["best_validation_auc"] == np.max(auc[checks]) and auc[a["best_epoch"] - 1] == np.max(auc[checks])
    # the returned parameters are the best check's: their AUC is the best one, recomputed
    assert float(bpr.validation_auc(res.state, v).mean()) == pytest.approx(a["best_validation_auc"], abs=1e-12)
    assert a["stopping_rule"].startswith("held-out AUC")


def test_fit_with_validation_runs_to_n_epochs_when_the_rule_is_not_met():
    _, train, _ = _planted_split()
    obs = Observations.from_dense(train, kind="binary")
    res = bpr.fit(jax.random.key(4), obs, _K, _HYPER, n_epochs=4, **dict(_VAL, patience=50), **_FIT)
    a = res.idata.posterior.attrs
    assert a["converged"] == 0 and a["n_iter"] == 4 and a["patience"] == 50
    plain = bpr.fit(jax.random.key(4), obs, _K, _HYPER, n_epochs=2, **_FIT)
    assert plain.idata.posterior.attrs["stopping_rule"] == "none: a fixed 2 epochs"
    assert "best_epoch" not in plain.idata.posterior.attrs


def test_validated_fit_resumes_bit_for_bit(tmp_path):
    _, train, _ = _planted_split()
    obs = Observations.from_dense(train, kind="binary")
    kw = dict(n_epochs=6, **dict(_VAL, validate_every=1, patience=50), **_FIT)
    full = bpr.fit(jax.random.key(2), obs, _K, _HYPER, **kw)
    ckpt = tmp_path / "bpr.npz"
    with _interrupted_at_second_checkpoint():
        bpr.fit(jax.random.key(2), obs, _K, _HYPER, checkpoint=ckpt, checkpoint_every=2, **kw)
    resumed = bpr.fit(jax.random.key(2), obs, _K, _HYPER, checkpoint=ckpt, checkpoint_every=2, resume=True, **kw)
    for x, y in zip(full.state, resumed.state):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(full.idata.sgd_trace.validation_auc.values, resumed.idata.sgd_trace.validation_auc.values)
    assert full.idata.posterior.attrs["best_epoch"] == resumed.idata.posterior.attrs["best_epoch"]


@pytest.mark.parametrize("field", ["validate_every", "patience", "validation_users", "validation_negatives"])
def test_validation_settings_are_checked(field):
    obs = Observations.from_dense(_TINY, kind="binary")
    kw = {"validate_every": 1, field: 0}
    with pytest.raises(ValueError, match=field):
        bpr.fit(jax.random.key(0), obs, 2, n_epochs=1, **kw)
