"""Tests of the NPFM / PPFM Gibbs samplers' pieces (`custom_inference.pfm`): exact CRT draws,
small-shape Gamma draws, the data container and its cached sums, bad input, compile-once."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from custom_inference import base, pfm
from ppl_models.pfm import PFMHyper

HYPER = PFMHyper()


def _stirling_unsigned(m):
    s = np.zeros((m + 1, m + 1), dtype=object)
    s[0, 0] = 1
    for n in range(1, m + 1):
        for k in range(1, n + 1):
            s[n, k] = s[n - 1, k - 1] + (n - 1) * s[n - 1, k]
    return s


def test_crt_matches_lemma_5_2_1_pmf():
    """P(l = j | m, r) = Gamma(r) / Gamma(m + r) |s(m, j)| r^j (Lemma 5.2.1), chi-square over
    200,000 draws (false-alarm rate 1e-3); two elements with different (m, r) in one call."""
    n = 200_000
    counts = jnp.tile(jnp.array([6, 3]), n)
    conc = jnp.tile(jnp.array([0.7, 4.0]), n)
    draws = np.asarray(pfm.crt(jax.random.PRNGKey(0), counts, conc, 9 * n)).reshape(n, 2)
    for col, (m, r) in enumerate([(6, 0.7), (3, 4.0)]):
        s = _stirling_unsigned(m)
        pmf = np.array([float(s[m, j]) * r ** j for j in range(m + 1)])
        pmf *= math.exp(math.lgamma(r) - math.lgamma(m + r))
        np.testing.assert_allclose(pmf.sum(), 1.0, rtol=1e-12)
        obs = np.bincount(draws[:, col].astype(int), minlength=m + 1)
        keep = pmf * n > 5
        exp = pmf[keep] * n
        p = stats.chisquare(obs[keep], exp * obs[keep].sum() / exp.sum()).pvalue
        assert p > 1e-3, (m, r, obs, pmf * n)
        assert obs[0] == 0  # l >= 1 when m >= 1


def test_crt_zero_counts_and_shape():
    out = pfm.crt(jax.random.PRNGKey(1), jnp.zeros((3, 2)), 0.5, 10)
    assert out.shape == (3, 2) and float(jnp.abs(out).sum()) == 0.0
    big = pfm.crt(jax.random.PRNGKey(2), jnp.array([[50.0, 1.0]]), jnp.array([[1e-3, 10.0]]), 51)
    assert 1 <= float(big[0, 0]) <= 50 and float(big[0, 1]) == 1.0


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("shape", [1e-3, 0.05, 2.5])
def test_gamma_draw_small_shapes_do_not_underflow(dtype, shape):
    """log of the draws follows the log-gamma law (KS, false-alarm 1e-3) and no draw is 0,
    also in float32 where a plain Gamma(1e-3) draw is 0 most of the time."""
    n = 20_000
    lx = np.asarray(pfm.gamma_log_draw(jax.random.PRNGKey(3), jnp.full(n, shape, dtype), jnp.asarray(3.0, dtype)))
    assert np.all(np.isfinite(lx))
    assert stats.kstest(lx.astype(np.float64), stats.loggamma(shape, loc=-np.log(3.0)).cdf).pvalue > 1e-3
    x = np.asarray(pfm.gamma_draw(jax.random.PRNGKey(3), jnp.full(n, shape, dtype), jnp.asarray(3.0, dtype)))
    assert x.dtype == np.dtype(dtype) and np.all(x > 0)


def _data(mode="all", exclude=None, side=True, **kw):
    rng = np.random.default_rng(0)
    Y = rng.poisson(1.0, (4, 3)).astype(float)
    Y[0, 0] = 2
    if exclude is not None:
        Y[exclude] = 0
    Uf = sp.csr_matrix(np.array([[1.0, 0], [0, 2.0], [1.0, 1.0], [0, 0]])) if side else None
    Vf = sp.csr_matrix(np.array([[1.0], [0.5], [0.0]])) if side else None
    return Y, Uf, Vf, pfm.PFMData.from_matrix(sp.csr_matrix(Y) if mode == "all" else Y, user_features=Uf,
                                              user_groups=[0, 1] if side else None, item_features=Vf, zeros=mode,
                                              exclude=exclude, **kw)


def _dense_rows(Y, Uf, Vf, mode, exclude):
    I, J = Y.shape
    Uf = np.zeros((I, 0)) if Uf is None else Uf.toarray()
    Vf = np.zeros((J, 0)) if Vf is None else Vf.toarray()
    rows = []
    ex = set() if exclude is None else set(zip(*[np.asarray(a).tolist() for a in exclude]))
    for u in range(I):
        for j in range(J):
            if mode == "all" and (u, j) in ex:
                continue
            x = np.concatenate([np.eye(I)[u], np.eye(J)[j], Uf[u], Vf[j]])
            rows.append(x)
    return np.array(rows)


@pytest.mark.parametrize("mode,exclude", [("all", None), ("all", (np.array([1, 3]), np.array([2, 0]))),
                                          ("observed", None)])
def test_exposures_match_dense_twin(mode, exclude):
    """N, X_i, E_ik = sum_n x_ni (q_nk - x_ni v_ik), s_k = sum_n sum_{i<j} x_ni x_nj v_ik v_jk: cached vs dense."""
    Y, Uf, Vf, data = _data(mode, exclude)
    X = _dense_rows(Y, Uf, Vf, mode, exclude)
    D, K = X.shape[1], 3
    V = np.random.default_rng(1).gamma(1.0, 1.0, (D, K))
    st = pfm.init(jax.random.PRNGKey(0), data, K, HYPER)._replace(V=jnp.asarray(V))
    ex = pfm.exposures(st, jax.tree_util.tree_map(jnp.asarray, data))
    q = X @ V
    np.testing.assert_allclose(data.n_train, X.shape[0])
    np.testing.assert_allclose(np.asarray(data.x_sum), X.sum(0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ex.E), X.T @ q - (X ** 2).sum(0)[:, None] * V, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(ex.s), 0.5 * ((q ** 2).sum(0) - ((X ** 2) @ (V ** 2)).sum(0)), rtol=1e-10)


def test_padding_changes_nothing():
    _, _, _, d0 = _data()
    _, _, _, d1 = _data(pad_rows=40, pad_units=64)
    assert d1.n_listed == 40 and d1.n_units == 64 and d0.n_units < 64
    st = pfm.init(jax.random.PRNGKey(0), d0, 2, HYPER)
    j0, j1 = (jax.tree_util.tree_map(jnp.asarray, d) for d in (d0, d1))
    # jitted: one compilation per data shape (5 CPU s less than op-by-op dispatch of both functions)
    log_joint, allocate = jax.jit(pfm.log_joint), jax.jit(pfm.allocate)
    np.testing.assert_allclose(float(log_joint(st, j0, HYPER)), float(log_joint(st, j1, HYPER)), rtol=1e-12)
    s0, s1 = allocate(jax.random.PRNGKey(1), st, j0), allocate(jax.random.PRNGKey(1), st, j1)
    assert float(s0.z1 + s0.z2.sum() + s0.L.sum()) == float(s1.z1 + s1.z2.sum() + s1.L.sum()) == float(d0.row_y.sum())


def test_blocks_never_share_a_row():
    """Features of one update block never co-occur in a training row (entity rows in 'all' mode)."""
    Y, Uf, Vf, data = _data()
    X = _dense_rows(Y, Uf, Vf, "all", None)
    blk = np.asarray(data.block)
    for b in range(data.n_blocks):
        assert np.all((X[:, blk == b] > 0).sum(1) <= 1)


def test_bad_inputs_raise_before_computing():
    Y = np.array([[1.0, 0.0], [2.0, 3.0]])
    with pytest.raises(ValueError, match="y: counts must be >= 0"):
        pfm.PFMData.from_matrix(np.array([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="y: counts must be integers"):
        pfm.PFMData.from_matrix(np.array([[1.5, 1.0]]))
    with pytest.raises(ValueError, match="item_features"):
        pfm.PFMData.from_matrix(Y, item_features=np.array([[1.0], [-0.5]]))
    with pytest.raises(ValueError, match="zeros"):
        pfm.PFMData.from_matrix(Y, zeros="none")
    with pytest.raises(ValueError, match="exclude"):
        pfm.PFMData.from_matrix(Y, exclude=(np.array([1]), np.array([1])))
    data = pfm.PFMData.from_matrix(Y)
    with pytest.raises(ValueError, match="K"):
        pfm.init(jax.random.PRNGKey(0), data, 0, HYPER)
    with pytest.raises(ValueError, match="K"):
        pfm.sample(0, data, 0, HYPER)
    with pytest.raises(ValueError, match="hyper.e_0"):
        pfm.sample(0, data, 2, HYPER._replace(e_0=-1.0))
    with pytest.raises(ValueError, match="hyper.a"):
        pfm.init(jax.random.PRNGKey(0), data, 2, HYPER._replace(a=0.0))
    with pytest.raises(ValueError, match="keep"):
        pfm.sample(0, data, 2, HYPER, variant="ppfm", keep=("r",))


def test_algorithm_declarations():
    for name, alg in pfm.ALGORITHMS.items():
        assert alg.kind == "mcmc" and alg.target is pfm.log_joint and alg.name == f"{name}-gibbs"
        assert set(alg.dims) == set((pfm.NPFMState if name == "npfm" else pfm.PPFMState)._fields)
    assert base.check_latent_dim(3) == 3


def test_sample_compiles_once_runs_float32_and_accumulates_predictions():
    """Two runs with the same shapes trace the driver's block once; float32 runs are finite; the
    running mean of the requested rates equals the mean over kept draws' rates."""
    from custom_inference import mcmc_driver

    Y = np.array([[3.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    data = pfm.PFMData.from_matrix(sp.csr_matrix(Y))
    cells = (np.array([0, 1]), np.array([1, 2]))
    kw = dict(num_chains=2, num_warmup=4, num_samples=6, block=5, predict_at=cells)
    before = mcmc_driver.TRACES["npfm"]
    a = pfm.sample(0, data, 2, HYPER, keep=pfm.NPFMState._fields, **kw)
    mid = mcmc_driver.TRACES["npfm"]
    b = pfm.sample(1, data, 2, HYPER, keep=pfm.NPFMState._fields, **kw)  # same shapes and options
    assert mcmc_driver.TRACES["npfm"] == mid == before + 1
    assert a.posterior["V"].shape == (2, 6, 5, 2)
    assert not np.allclose(a.posterior["w0"].values, b.posterior["w0"].values)
    post = {n: np.asarray(a.posterior[n]).reshape((12,) + a.posterior[n].shape[2:]) for n in ("w0", "w", "V", "r")}
    pr = data.pair_rows(*cells)
    rates = np.stack([np.asarray(pfm.row_rates(pfm.NPFMState(post["w0"][s], 0, 0, post["w"][s], 0, 0, post["V"][s], 0,
                                                            0, post["r"][s], 0, 0), jnp.asarray(pr[0]),
                                               jnp.asarray(pr[1]))) for s in range(12)])
    np.testing.assert_allclose(np.asarray(a.predictions["pred_mean"]), rates.mean(0), rtol=1e-10)
    assert np.asarray(a.sample_stats["n_active"]).shape == (2, 6)
    c = pfm.sample(0, data, 2, HYPER, variant="ppfm", num_chains=1, num_warmup=3, num_samples=4, dtype=np.float32)
    assert np.all(np.isfinite(c.sample_stats["lp"].values)) and c.posterior["w0"].dtype == np.float32


def test_init_r_sets_the_starting_weights():
    """r_k = (0.5 + U) / K by default and init_r (0.5 + U) with init_r (NPFM); PPFM has no r and
    ignores it; sample passes init_r to init (its first kept draw after 0 warm-up sweeps differs)."""
    Y = np.array([[3.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    data = pfm.PFMData.from_matrix(sp.csr_matrix(Y))
    K = 4
    r0 = np.asarray(pfm.init(jax.random.PRNGKey(0), data, K, HYPER).r)
    r1 = np.asarray(pfm.init(jax.random.PRNGKey(0), data, K, HYPER, init_r=2.0).r)
    assert np.all((r0 >= 0.5 / K) & (r0 <= 1.5 / K)) and np.all((r1 >= 1.0) & (r1 <= 3.0))
    np.testing.assert_allclose(r1, 2.0 * K * r0, rtol=1e-12)  # same uniforms, other scale
    p = pfm.init(jax.random.PRNGKey(0), data, K, HYPER, variant="ppfm", init_r=2.0)
    assert isinstance(p, pfm.PPFMState)
    # the shapes and static options of test_sample_compiles_once_runs_float32_and_accumulates_predictions
    # (K = 2, one block of 5 units: its compiled block is reused), no warm-up: the first kept draw
    # is one sweep from the initial state
    from custom_inference import mcmc_driver

    kw = dict(num_chains=2, num_warmup=0, num_samples=5, block=5, predict_at=(np.array([0, 1]), np.array([1, 2])),
              keep=pfm.NPFMState._fields)
    traces = mcmc_driver.TRACES["npfm"]
    a = pfm.sample(0, data, 2, HYPER, **kw)
    b = pfm.sample(0, data, 2, HYPER, init_r=50.0, **kw)
    assert not np.allclose(a.posterior["r"].values[:, 0], b.posterior["r"].values[:, 0])
    assert mcmc_driver.TRACES["npfm"] - traces <= 1  # one block program (none when the test above ran first)


def test_crt_maps_customers_to_their_elements_across_zero_counts():
    """Zero counts between elements (the customer-to-element map counts element starts): with
    concentration 1e9 every customer opens a table (l = m), with 1e-9 only the first (l = 1 for
    m >= 1), 0 for m = 0; also with customers beyond the total (padding positions)."""
    m = jnp.array([0, 3, 0, 0, 2, 0, 1, 0], jnp.float64)
    for conc, want in ((1e9, [0, 3, 0, 0, 2, 0, 1, 0]), (1e-9, [0, 1, 0, 0, 1, 0, 1, 0])):
        for max_total in (6, 20):
            out = np.asarray(pfm.crt(jax.random.PRNGKey(4), m, jnp.full(8, conc), max_total))
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_pair_sums_keep_a_small_feature_next_to_a_large_one(dtype):
    """sum_{f<g} u_f u_g with u_1 << u_2: the former cumsum-minus-u form returned 0 in float32 for
    u_1 < 2^-24 u_2 ((u_1 + u_2) - u_2 = 0); the exclusive-prefix form keeps relative error ~eps.
    Checked through `row_rates` (one row, features 0 and 1, K = 2) against float64 arithmetic."""
    V = np.array([[1e-9, 3e-3], [1.0, 2.0]])
    with jax.enable_x64(dtype == jnp.float64):
        st = pfm.PPFMState(jnp.asarray(0.0, dtype), 1.0, 1.0, jnp.zeros(2, dtype), jnp.ones(2, dtype),
                           jnp.ones(2, dtype), jnp.asarray(V, dtype), jnp.ones(2, dtype), jnp.ones(2, dtype))
        rate = float(pfm.row_rates(st, jnp.array([[0, 1]]), jnp.ones((1, 2), dtype))[0])
    exact = float(np.sum(V[0] * V[1]))
    np.testing.assert_allclose(rate, exact, rtol=4 * float(jnp.finfo(dtype).eps))


def test_exposures_skip_rows_with_zero_weight_exactly():
    """In "all" mode the exposures sum only the listed rows with c_n != 0 (`weighted_rows`); a
    container without that index (built positionally, as older code does) sums every listed row:
    the results are identical bit for bit (the skipped terms are exactly 0), with and without
    excluded cells, and so is the log joint."""
    for exclude in (None, (np.array([1, 3]), np.array([2, 0]))):
        _, _, _, data = _data("all", exclude)
        assert data.weighted_rows is not None
        assert data.weighted_rows.size == (0 if exclude is None else 2)
        fields = [f for f in data.__dataclass_fields__ if f not in ("weighted_rows", "side", "bipartite")]
        plain = pfm.PFMData(*(getattr(data, f) for f in fields))
        assert plain.weighted_rows is None
        st = pfm.init(jax.random.PRNGKey(0), data, 3, HYPER)
        a, b = (jax.tree_util.tree_map(jnp.asarray, d) for d in (data, plain))
        ea, eb = pfm.exposures(st, a), pfm.exposures(st, b)
        np.testing.assert_array_equal(np.asarray(ea.E), np.asarray(eb.E))
        np.testing.assert_array_equal(np.asarray(ea.s), np.asarray(eb.s))
        assert float(pfm.log_joint(st, a, HYPER)) == float(pfm.log_joint(st, b, HYPER))
    _, _, _, obs = _data("observed")
    assert obs.weighted_rows is None


def test_scale_rounds_zero_is_the_sweep_alone():
    """step(scale_rounds=0) returns exactly the sweep of the sampler without the move (same keys,
    bit for bit; NPFM, side features; one jit holds both). The move's ratio, rates and invariance
    are checked in `validation.models.pfm_scale_checks` (tests/validation/test_pfm_validation.py)."""
    with jax.enable_x64(True):
        _, _, _, data = _data("all", side=True)
        d = jax.tree_util.tree_map(jnp.asarray, data)
        st = pfm.init(jax.random.PRNGKey(1), data, 2, HYPER, variant="npfm")
        run = jax.jit(lambda key, st: (pfm._sweep_valid(key, st, d, HYPER)[0],
                                       pfm.step(key, st, d, HYPER, scale_rounds=0)[0]))
        ref, s0 = run(jax.random.PRNGKey(2), st)
        for a, b in zip(jax.tree_util.tree_leaves(s0), jax.tree_util.tree_leaves(ref)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_scale_move_needs_bipartite_data_for_ppfm():
    """PPFM's move trades user-side against item-side columns: with side features (pairs inside
    one side) `sample` refuses scale_rounds > 0 and its default is 0 there; negative rounds are
    refused for both variants."""
    _, _, _, side = _data("all", side=True)
    assert not side.bipartite and np.array_equal(np.asarray(side.side)[:7], [1, 1, 1, 1, -1, -1, -1])
    with pytest.raises(ValueError, match="bipartite"):
        pfm.sample(0, side, 2, HYPER, variant="ppfm", scale_rounds=2)
    with pytest.raises(ValueError, match="scale_rounds"):
        pfm.sample(0, side, 2, HYPER, variant="npfm", scale_rounds=-1)


def test_global_and_trade_moves_keep_every_rate():
    """step with the global move (NPFM) and the side-feature trade (both variants) after the
    sweep: the sweep's keys are those of the sampler without them, and both moves keep every
    listed row's rate (relative 1e-10; float64 rounding ~1e-15) while moving V. Their log ratios
    and invariance are checked in `validation.models.pfm_scale_checks`."""
    with jax.enable_x64(True):
        _, _, _, data = _data("all", side=True)
        d = jax.tree_util.tree_map(jnp.asarray, data)
        for variant, glob in (("npfm", 3), ("ppfm", 0)):
            st = pfm.init(jax.random.PRNGKey(1), data, 2, HYPER, variant=variant)
            run = jax.jit(lambda key, st, g=glob: (pfm.step(key, st, d, HYPER)[0],
                                                   pfm.step(key, st, d, HYPER, global_rounds=g, trade_rounds=3)[0]))
            ref, moved = run(jax.random.PRNGKey(2), st)
            r0 = np.asarray(pfm.row_rates(ref, d.row_feat, d.row_val))
            r1 = np.asarray(pfm.row_rates(moved, d.row_feat, d.row_val))
            np.testing.assert_allclose(r1, r0, rtol=1e-10)
            assert not np.allclose(np.asarray(moved.V), np.asarray(ref.V))


def test_global_and_trade_options_are_validated():
    """global_rounds: PPFM has no global move and negative rounds are refused; trade_rounds needs
    sides and entity tables (zeros='all')."""
    _, _, _, side = _data("all", side=True)
    with pytest.raises(ValueError, match="global_rounds"):
        pfm.sample(0, side, 2, HYPER, variant="ppfm", global_rounds=2)
    with pytest.raises(ValueError, match="global_rounds"):
        pfm.sample(0, side, 2, HYPER, variant="npfm", global_rounds=-1)
    _, _, _, obs = _data("observed")
    with pytest.raises(ValueError, match="trade_rounds"):
        pfm.sample(0, obs, 2, HYPER, variant="ppfm", trade_rounds=2, scale_rounds=0)


def test_block_pointers_find_contiguous_blocks_only():
    _, _, _, ids = _data(side=False)
    blk = np.asarray(ids.block)
    ptr = pfm.block_pointers(ids)
    assert ptr is not None and len(ptr) == ids.n_blocks + 1 and ptr[0] == 0 and ptr[-1] == ids.n_features
    for b in range(ids.n_blocks):
        assert np.all(blk[ptr[b]:ptr[b + 1]] == b)
    shuffled = dataclasses.replace(ids, block=blk[::-1].copy())  # decreasing: blocks not in feature order
    assert pfm.block_pointers(shuffled) is None
    with pytest.raises(ValueError, match="block_ptr"):
        pfm.step(jax.random.PRNGKey(0), pfm.init(jax.random.PRNGKey(0), ids, 2, HYPER), ids, HYPER,
                 block_ptr=(0, 1))


@pytest.mark.parametrize("variant", ["npfm", "ppfm"])
def test_sliced_block_update_draws_from_the_masked_updates_conditionals(monkeypatch, variant):
    """With every Gamma draw replaced by its conditional mean (shape / rate, deterministic), the
    sweep with static block slices (`block_pointers`) gives the masked sweep's state to float64
    rounding: each block's zeta and V conditionals are the same, only the random numbers differ."""
    monkeypatch.setattr(pfm, "_draw", lambda key, sr: sr[0] / sr[1])
    with jax.enable_x64(True):
        _, _, _, data = _data("all", side=False)
        ptr = pfm.block_pointers(data)
        assert ptr is not None and data.n_blocks == 2
        d = jax.tree_util.tree_map(jnp.asarray, data)
        st = pfm.init(jax.random.PRNGKey(1), data, 3, HYPER, variant=variant)
        run = jax.jit(lambda key, st: (pfm._sweep_valid(key, st, d, HYPER)[0],
                                       pfm._sweep_valid(key, st, d, HYPER, ptr)[0]))
        masked, sliced = run(jax.random.PRNGKey(2), st)
        for name in masked._fields:
            a, b = np.asarray(getattr(masked, name)), np.asarray(getattr(sliced, name))
            # the same float64 operations on the block's entries (a slice instead of a mask): rounding only
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0, err_msg=name)
        assert not np.allclose(np.asarray(sliced.V), np.asarray(st.V))  # the sweep moved V


def _alloc_problem(I=6, J=5, lam=4.0, side=True, seed=3, **pad):
    """A small "all"-mode data set with side features (F = 5 slots) and a dispersed NPFM state."""
    rng = np.random.default_rng(seed)
    Y = rng.poisson(lam, (I, J)).astype(float)
    Uf = sp.csr_matrix(rng.random((I, 2)) * (rng.random((I, 2)) < 0.7)) if side else None
    Vf = sp.csr_matrix(rng.random((J, 1)) + 0.2) if side else None
    data = pfm.PFMData.from_matrix(sp.csr_matrix(Y), user_features=Uf, item_features=Vf, zeros="all", **pad)
    st = pfm.init(jax.random.PRNGKey(seed), data, 3, HYPER, init_scale=1.0, init_shape=0.5, init_r=1.0)
    return data, st


def _expected_stats(data, st):
    """Exact E[Z1], E[Z2_i], E[Z3_ik], E[L_k] given the state (eq. 5.7), in numpy float64: each of
    y_n units picks w0 w.p. w0 / rate_n, x_ni w_i / rate_n, factor k w.p. r_k P_nk / rate_n; a factor
    unit gives feature i of the row the share u_i (S_k - u_i) / P_nk of its pair (both endpoints)."""
    feat, val, y = np.asarray(data.row_feat), np.asarray(data.row_val), np.asarray(data.row_y)
    V, w, r, w0 = (np.asarray(a, np.float64) for a in (st.V, st.w, st.r, st.w0))
    D, K = V.shape
    u = val[..., None] * V[feat]  # (N, F, K)
    S = u.sum(1)
    P = 0.5 * (S ** 2 - (u ** 2).sum(1))  # sum_{f<g} u_f u_g
    lin = val * w[feat]
    rate = w0 + lin.sum(1) + P @ r
    g = y / rate
    z1 = float(np.sum(g * w0))
    z2 = np.bincount(feat.ravel(), (g[:, None] * lin).ravel(), minlength=D)
    L = (g[:, None] * P * r).sum(0)
    share = g[:, None, None] * r * u * (S[:, None, :] - u)  # (N, F, K)
    z3 = np.stack([np.bincount(feat.ravel(), share[..., k].ravel(), minlength=D) for k in range(K)], axis=1)
    return z1, z2, z3, L


# (rows per chunk, units per sub-chunk): several row chunks with several sub-chunks each (none of
# the sizes divides N_L = 30 or T; the last chunk and every chunk's last sub-chunk are partly
# masked), one row chunk with a loop over sub-chunks, and chunks of single rows
_CHUNKINGS = ((7, 32), (11, 64), (30, 32), (1, 32), (13, 96))


def test_allocation_is_the_same_for_every_chunking():
    """Unit t takes its uniforms from block t // RNG_BLOCK of the key and every row's terms are the
    same whatever chunk holds it, so every chunking gives the sums of the unchunked allocation (one
    chunk: the `allocate_chunks` default here) bit for bit, and the sums keep the invariants
    Z1 + sum Z2 + sum L = T, sum_i Z3_ik = 2 L_k. (Dropping the mask of a chunk's last sub-chunk
    allocates the next chunk's first units with this chunk's rows, twice: the total exceeds T.)"""
    data, st = _alloc_problem()
    d = jax.tree_util.tree_map(jnp.asarray, data)
    N, T, F = data.n_listed, data.n_units, data.row_feat.shape[1]
    assert N == 30 and T % 32 and T > 3 * 32
    ref_chunks = pfm.allocate_chunks(N, T, F, 3, np.float64)
    assert ref_chunks == (N, -(-T // 32) * 32)  # small data: one chunk, no loop
    alloc = jax.jit(pfm.allocate, static_argnames="chunks")
    key = jax.random.PRNGKey(7)
    ref = alloc(key, st, d)
    for chunks in _CHUNKINGS:
        s = alloc(key, st, d, chunks=chunks)
        for name, a, b in zip(pfm.SuffStats._fields, s, ref):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"{chunks} {name}")
    z1, z2, z3, L = (np.asarray(a) for a in ref)
    assert z1 + z2.sum() + L.sum() == data.row_y.sum() == T
    np.testing.assert_array_equal(z3.sum(0), 2 * L)
    assert all(np.all(a == np.round(a)) and np.all(a >= 0) for a in (z1, z2, z3, L))


def test_padding_units_and_rows_are_never_allocated():
    """``pad_units`` appends weight-0 units of row 0 after the real units (out of row order) and
    ``pad_rows`` appends y = 0 rows: the real units stay in row order (the chunks rely on it), and
    with the padding the sums equal those without it bit for bit, chunked or not."""
    data, st = _alloc_problem()
    padded, _ = _alloc_problem(pad_rows=45, pad_units=data.n_units + 70)
    T = data.n_units
    ur = np.asarray(padded.unit_row)
    assert np.all(np.diff(ur[:T]) >= 0) and np.all(ur[T:] == 0) and np.all(np.asarray(padded.unit_weight)[T:] == 0)
    np.testing.assert_array_equal(ur[:T], np.asarray(data.unit_row))
    d0, d1 = (jax.tree_util.tree_map(jnp.asarray, x) for x in (data, padded))
    alloc = jax.jit(pfm.allocate, static_argnames="chunks")
    key = jax.random.PRNGKey(5)
    ref = alloc(key, st, d0)
    for chunks in (None, (7, 32), (45, 64)):
        for name, a, b in zip(pfm.SuffStats._fields, alloc(key, st, d1, chunks=chunks), ref):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"{chunks} {name}")


def test_chunked_allocation_has_the_exact_conditional_means():
    """Over 4,000 keys, the mean sums of the allocation in chunks of 7 rows and 32 units (5 chunks,
    each with several sub-chunks, last ones masked) equal the exact expectations of eq. 5.7
    (`_expected_stats`) within 5 Monte Carlo standard errors, each estimated from the draws (per
    component two-sided false alarm 6e-7; ~70 components: < 5e-5 for the test); components with
    expectation 0 are exactly 0 in every draw. This also checks the random-number stream, which
    differs from the one before issue 28 (one uniform(key, (3, T)) call)."""
    data, st = _alloc_problem()
    d = jax.tree_util.tree_map(jnp.asarray, data)
    n = 4000
    keys = jax.random.split(jax.random.PRNGKey(11), n)
    ss = jax.jit(jax.vmap(lambda k: pfm.allocate(k, st, d, chunks=(7, 32))))(keys)
    for name, draws, exp in zip(pfm.SuffStats._fields, ss, _expected_stats(data, st)):
        draws = np.asarray(draws, np.float64).reshape(n, -1)
        exp = np.atleast_1d(np.asarray(exp)).ravel()
        mean, se = draws.mean(0), draws.std(0, ddof=1) / np.sqrt(n)
        zero = exp == 0
        assert np.all(draws[:, zero] == 0), name
        assert np.all(np.abs(mean - exp)[~zero] <= 5 * se[~zero]), (name, mean, exp, se)


def _max_intermediate_size(jaxpr):
    """The largest number of elements of any value computed in a jaxpr, sub-jaxprs (loop bodies,
    jitted calls) included."""
    best = 0
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            best = max(best, int(np.prod(getattr(v.aval, "shape", ()), dtype=np.int64)))
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    best = max(best, _max_intermediate_size(inner))
    return best


def test_allocation_builds_nothing_over_all_rows_or_units():
    """In chunks of 64 rows and 64 units, no value in the allocation's program has more elements
    than a chunk's largest temporary (64 x F x K gathered factors, 64 x (1 + F + K) terms, 3 x 96
    uniforms of a sub-chunk's blocks) or the (D x K) sums, far below N_L ~ 4,900 listed rows and
    T ~ 20,000 units (the allocation before issue 28 built (1 + F + K, N_L) running sums and (3, T)
    uniforms)."""
    data, st = _alloc_problem(I=100, J=50, lam=4.0, side=False)
    d = jax.tree_util.tree_map(jnp.asarray, data)
    F, K, D = data.row_feat.shape[1], 3, data.n_features
    assert data.n_listed > 4000 and data.n_units > 15000
    jaxpr = jax.make_jaxpr(lambda k: pfm.allocate(k, st, d, chunks=(64, 64)))(jax.random.PRNGKey(0)).jaxpr
    bound = max(64 * F * K, 64 * (1 + F + K), 3 * (64 + 32), D * K)
    assert _max_intermediate_size(jaxpr) <= bound < data.n_listed


def test_allocate_chunks_and_bad_chunks():
    """`allocate_chunks` gives one chunk when all rows and units fit the budget; otherwise rows per
    chunk x bytes per row within 3/4 of it, spread evenly, and units per sub-chunk a multiple of
    RNG_BLOCK within the rest; `allocate` refuses bad chunkings."""
    B = pfm.RNG_BLOCK
    rb, ub = pfm._row_bytes(2, 50, 4), pfm._unit_bytes(2, 4)
    assert pfm.allocate_chunks(1000, 3500, 2, 50, np.float32) == (1000, 3520)
    N, T, budget = 10 ** 8, 3 * 10 ** 8, 64 << 20
    R, W = pfm.allocate_chunks(N, T, 2, 50, np.float32, budget_bytes=budget)
    n_chunks = -(-N // R)
    assert R * rb <= budget * 3 // 4 and -(-N // (n_chunks - 1)) * rb > budget * 3 // 4  # fewest chunks
    assert W % B == 0 and W * ub <= budget // 4 and W <= -(-T * R // N) // 4 + B
    assert pfm.allocate_chunks(10 ** 8, 10 ** 8, 2, 50, np.float32, budget_bytes=1) == (1, B)
    with pytest.raises(ValueError, match="budget_bytes"):
        pfm.allocate_chunks(10, 10, 2, 50, np.float32, budget_bytes=0)
    data, st = _alloc_problem()
    d = jax.tree_util.tree_map(jnp.asarray, data)
    for bad in ((7, 0), (7, B + 1), (7, -B), (0, B)):
        with pytest.raises(ValueError, match="multiple of RNG_BLOCK"):
            pfm.allocate(jax.random.PRNGKey(0), st, d, chunks=bad)


def test_log_joint_likelihood_in_row_chunks():
    """The likelihood sum of `log_joint` over listed rows, in chunks of 32 or 64 rows (last chunk
    masked) or one chunk, equals sum_n y_n log rate_n - log y_n! computed in numpy float64 (rtol
    1e-12: only the order of the additions differs), and with chunks of 64 no value in its program
    is larger than a chunk's (64, F, K) gather."""
    from scipy.special import gammaln as np_gammaln

    data, st = _alloc_problem(I=30, J=20, lam=2.0)
    d = jax.tree_util.tree_map(jnp.asarray, data)
    feat, val, y = np.asarray(data.row_feat), np.asarray(data.row_val), np.asarray(data.row_y)
    u = val[..., None] * np.asarray(st.V)[feat]
    P = 0.5 * (u.sum(1) ** 2 - (u ** 2).sum(1))
    rate = float(st.w0) + (val * np.asarray(st.w)[feat]).sum(1) + P @ np.asarray(st.r)
    want = np.sum(np.where(y > 0, y * np.log(rate) - np_gammaln(y + 1), 0.0))
    N, F = feat.shape
    assert N % 32 and N > 64
    for rows in (32, 64, None):
        got = float(jax.jit(lambda s: pfm._listed_loglik(s, d, rows))(st))
        np.testing.assert_allclose(got, want, rtol=1e-12)
    jaxpr = jax.make_jaxpr(lambda s: pfm._listed_loglik(s, d, 64))(st).jaxpr
    assert _max_intermediate_size(jaxpr) <= 64 * F * 3 < N * F * 3


def test_init_sample_and_pair_rows_check_their_inputs():
    """`init` takes an integer seed (as the other solvers' init) and refuses a non-positive init scale
    and a float16 dtype; `sample` refuses a non-PFMData with TypeError; `pair_rows` refuses a negative
    index instead of wrapping to the last user."""
    Y, _, _, data = _data()
    by_seed = pfm.init(3, data, 2, PFMHyper())
    by_key = pfm.init(jax.random.PRNGKey(3), data, 2, PFMHyper())
    np.testing.assert_array_equal(by_seed.V, by_key.V)
    with pytest.raises(ValueError, match="init_scale must be finite and > 0"):
        pfm.init(0, data, 2, PFMHyper(), init_scale=0.0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        pfm.init(0, data, 2, PFMHyper(), dtype=np.float16)
    with pytest.raises(TypeError, match="expected PFMData"):
        pfm.sample(0, Y, 2, PFMHyper())
    with pytest.raises(IndexError, match="user indices must be in"):
        data.pair_rows([-1], [0])
    feat, _ = data.pair_rows([Y.shape[0] - 1], [0])
    assert feat.shape[0] == 1
