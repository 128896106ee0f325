"""VBFM / OVBFM solver: input checks, ELBO ascent, float32, prediction, drivers (small designs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import arviz_io, vbfm
from ppl_models.fm import FMFlatHyper, predict_mean
from validation.models.vbfm import SMALL_DESIGN, simulated_design

HYPER = FMFlatHyper()


@pytest.fixture(scope="module")
def design():
    return simulated_design(**SMALL_DESIGN)


def test_init_rejects_bad_input(design):
    with pytest.raises(ValueError, match="K must be"):
        vbfm.init(jax.random.PRNGKey(0), design, 0, HYPER)
    with pytest.raises(ValueError, match="sigma_w"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER._replace(sigma_w=-1.0))
    with pytest.raises(ValueError, match="sigma_v"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER._replace(sigma_v=np.ones((5, 7))))
    with pytest.raises(ValueError, match="alpha_prior"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER, alpha_prior=(0.0, 1.0))
    with pytest.raises(ValueError, match="hyper has no field"):
        vbfm.init(jax.random.PRNGKey(0), design, 2, object())
    with pytest.raises(ValueError, match="batch"):
        vbfm.minibatch(design, [design.n_rows])
    with pytest.raises(ValueError, match="n_batches"):
        vbfm.make_batches(0, design, 0)


def test_expected_prediction_at_zero_variance_equals_the_program_mean(design):
    """E_q[yhat] (the solver's caches) at vanishing variances is the NumPyro program's mean at the means."""
    state = vbfm.init(jax.random.PRNGKey(1), design, 3, HYPER, init_mean_sd=0.7, init_var=1e-300)
    (m0, _), (m, _), (mu, _) = vbfm.moments(state)
    d = jax.tree_util.tree_map(jnp.asarray, design)
    mean, sd = vbfm.predict(state, d, noise=False)
    ref = predict_mean({"w0": m0, "w": m, "V": mu}, d.rows, d.cols, d.values, d.n_rows)
    np.testing.assert_allclose(mean, ref, rtol=1e-12, atol=1e-12)  # float64 rounding of < 10 terms
    assert np.all(sd < 1e-100)


def test_cavi_raises_the_elbo_and_converges(design):
    d = jax.tree_util.tree_map(jnp.asarray, design)
    state = vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER)
    prev = float(vbfm.elbo(state, d))
    for _ in range(10):
        state, info = vbfm.step(None, state, d)
        assert float(info.elbo) >= prev - 1e-9 * abs(prev)  # rounding of a sum of ~100 terms
        prev = float(info.elbo)
    assert float(info.rel_change) < 0.05


def test_float32_runs_and_matches_float64(design):
    res64 = vbfm.fit(jax.random.PRNGKey(0), design, 2, HYPER, max_iter=30, tol=0.0, progress=False, n_draws=0)
    with jax.enable_x64(False):
        d32 = design.__class__(*(np.asarray(getattr(design, f)).astype(np.float32) if f in ("values", "y")
                                 else getattr(design, f) for f in design.__dataclass_fields__))
        res32 = vbfm.fit(jax.random.PRNGKey(0), d32, 2, HYPER, max_iter=30, tol=0.0, progress=False, n_draws=0)
        assert res32.state.v_h.dtype == jnp.float32
        assert np.all(np.isfinite(res32.elbo))
    # 30 sweeps of float32 rounding (1e-7 relative per operation) on an ELBO of ~100 nats
    np.testing.assert_allclose(res32.elbo[-1], res64.elbo[-1], rtol=1e-3)


def test_fit_and_fit_svi_return_inference_data(design):
    res = vbfm.fit(jax.random.PRNGKey(0), design, 2, HYPER, max_iter=60, tol=1e-4, progress=False, n_draws=50,
                   alpha_prior=(2.0, 0.5))
    post = arviz_io.group_arrays(res.idata)
    assert post["V"].shape == (1, 50, design.n_features, 2)
    assert post["w"].shape == (1, 50, design.n_features)
    assert post["alpha"].shape == (1, 50) and np.all(post["alpha"] > 0)
    attrs = res.idata.vi_trace.attrs
    assert attrs["n_iter"] == len(res.elbo) and attrs["converged"] == int(res.idata.vi_trace.rel_change.values[-1] < 1e-4)
    assert np.all(np.diff(res.elbo) >= -1e-9 * np.abs(res.elbo[:-1]))
    vp = arviz_io.group_arrays(res.idata, "variational_parameters")
    np.testing.assert_allclose(vp["v_prec"], res.state.v_prec)
    svi = vbfm.fit_svi(jax.random.PRNGKey(0), design, 2, HYPER, n_batches=4, max_epochs=5, progress=False, n_draws=10)
    assert svi.elbo.shape == (5,) and np.all(np.isfinite(svi.elbo))
    assert arviz_io.group_arrays(svi.idata)["w0"].shape == (1, 10)


def test_predict_gives_mean_and_predictive_sd(design):
    res = vbfm.fit(jax.random.PRNGKey(0), design, 2, HYPER, max_iter=50, tol=1e-8, progress=False, n_draws=0)
    d = jax.tree_util.tree_map(jnp.asarray, design)
    mean, sd = vbfm.predict(res.state, d)
    _, sd_f = vbfm.predict(res.state, d, noise=False)
    alpha = float(res.state.alpha_shape / res.state.alpha_rate)
    np.testing.assert_allclose(sd**2, sd_f**2 + 1.0 / alpha, rtol=1e-12)
    assert mean.shape == (design.n_rows,)
    # the fit explains the data better than the grand mean
    assert np.mean((design.y - mean) ** 2) < np.var(design.y)
    other = simulated_design(**{**SMALL_DESIGN, "multi_hot": False})
    with pytest.raises(ValueError, match="features"):
        vbfm.predict(res.state, other)


def _reference_sweep(state, d, update_hyper):
    """The sweep with the (N, K) caches computed once and updated incrementally (the layout before the
    per-factor caches), from the public block updates."""
    nz_blocks, masks = vbfm._design_blocks(d)
    caches, _ = vbfm.compute_caches(state, d.rows, d.cols, d.values, d.y, d.n_rows)
    state, caches = vbfm.update_w0(state, caches, None, 1.0, 1.0)
    for nz, mask in zip(nz_blocks, masks):
        state, caches = vbfm.update_w_block(state, caches, nz, mask, d.group, 1.0, 1.0)
    for k in range(state.v_prec.shape[1]):
        for nz, mask in zip(nz_blocks, masks):
            state, caches = vbfm.update_v_block(state, caches, nz, mask, d.group, k, 1.0, 1.0)
    fresh, T = vbfm.compute_caches(state, d.rows, d.cols, d.values, d.y, d.n_rows)
    new = vbfm.update_alpha(state, fresh.R, T, None, 1.0, 1.0)
    if update_hyper:
        new = vbfm.update_hyper(new, d.group, d.n_groups)
    elif float(state.alpha_prior_shape) == 0:  # a point alpha stays fixed without update_hyper
        new = state
    return new, caches


@pytest.mark.parametrize("update_hyper", [True, False])
@pytest.mark.parametrize("alpha_prior", [None, (2.0, 0.5)])
def test_sweep_with_per_factor_caches_equals_the_n_by_k_cache_sweep(design, update_hyper, alpha_prior):
    """`step` (one factor's caches at a time, ELBO from the sweep's own R, T) against the sweep with the
    (N, K) caches held throughout, three sweeps from the initial state, float64."""
    with jax.enable_x64(True):
        d = jax.tree_util.tree_map(jnp.asarray, design)
        state = ref = vbfm.init(jax.random.PRNGKey(3), design, 3, HYPER, alpha_prior=alpha_prior)
        for _ in range(3):
            state, info = vbfm.step(None, state, d, update_hyper=update_hyper)
            ref, ref_caches = _reference_sweep(ref, d, update_hyper)
            for f in vbfm.VBFMState._fields[:-1]:
                # same operations but the order of the sums over k: float64 rounding, far below 1e-10
                np.testing.assert_allclose(getattr(state, f), getattr(ref, f), rtol=1e-10, atol=0, err_msg=f)
            np.testing.assert_allclose(info.elbo, vbfm.elbo(ref, d), rtol=1e-12)
        _, caches = vbfm.sweep_with_caches(ref, d, update_hyper=update_hyper)
        _, ref_caches = _reference_sweep(ref, d, update_hyper)
        for f in vbfm.Caches._fields:  # the incrementally kept caches the dense-twin check reads
            np.testing.assert_allclose(getattr(caches, f), getattr(ref_caches, f), rtol=1e-10, atol=1e-12, err_msg=f)


def test_lazy_batches_partition_the_rows_and_gather_their_nonzeros(design):
    """`iter_batches` (one batch gathered at a time, from host or device arrays) is `make_batches`'s list: a
    random partition of the rows, each batch holding exactly its rows of X and y, padded to common sizes."""
    d = jax.tree_util.tree_map(jnp.asarray, design)
    lazy = vbfm.iter_batches(5, d, 3)
    assert not isinstance(lazy, list)
    lazy, eager = list(lazy), vbfm.make_batches(5, design, 3)
    X, seen = design.to_dense(), []
    for a, b in zip(lazy, eager, strict=True):
        for f in vbfm.Minibatch._fields:
            np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), err_msg=f)
        real = np.asarray(a.row_w) > 0
        ids = np.asarray(a.row_ids)[real]
        sub = np.zeros((a.row_w.shape[0], design.n_features))
        np.add.at(sub, (np.asarray(a.nz_rows), np.asarray(a.nz_cols)), np.asarray(a.nz_x))
        np.testing.assert_array_equal(sub[real], X[ids])  # the batch's rows of X, nothing else
        assert not sub[~real].any()
        np.testing.assert_array_equal(np.asarray(a.y)[real], np.asarray(design.y)[ids])
        assert float(a.scale) == design.n_rows / ids.size
        assert a.nz_x.shape[0] % 256 == 0 and a.row_w.shape[0] == -(-design.n_rows // 3)
        seen.append(ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(design.n_rows))
    with pytest.raises(ValueError, match="n_batches"):
        vbfm.iter_batches(0, design, design.n_rows + 1)


@pytest.mark.parametrize("chunk", [7, 40])  # many full chunks and a remainder; two full chunks (one for a block)
def test_chunked_sums_over_nonzeros_equal_the_whole_sums(design, monkeypatch, chunk):
    """The per-factor sums over nonzeros in chunks of `NZ_CHUNK` (un-jitted calls trace anew) against one
    chunk holding every nonzero, float64: the same terms summed in another order."""
    with jax.enable_x64(True):
        d = jax.tree_util.tree_map(jnp.asarray, design)
        state = vbfm.init(jax.random.PRNGKey(4), design, 3, HYPER, init_mean_sd=0.5)
        assert design.nnz > chunk * 2
        whole = (vbfm.row_moments(state, d.rows, d.cols, d.values, d.y, d.n_rows),
                 vbfm.sweep_with_caches(state, d))
        monkeypatch.setattr(vbfm, "NZ_CHUNK", chunk)
        parts = (vbfm.row_moments(state, d.rows, d.cols, d.values, d.y, d.n_rows),
                 vbfm.sweep_with_caches(state, d))
    flat_w, flat_p = jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(parts)
    assert len(flat_w) == len(flat_p)
    for a, b in zip(flat_w, flat_p):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)  # float64 rounding of sums of < 100 terms


def test_svi_step_and_fit_svi_check_n_batches_and_lam_first():
    """A random minibatch needs n_batches >= 1 (0 divided by zero); fit_svi checks lam before init and
    compilation instead of at the first update."""
    design = simulated_design(**SMALL_DESIGN)
    state = vbfm.init(jax.random.PRNGKey(0), design, 2, HYPER)
    with pytest.raises(ValueError, match="n_batches must be an integer >= 1"):
        vbfm.svi_step(0, state, design, n_batches=0)
    with pytest.raises(ValueError, match="lam must be finite and >= 0"):
        vbfm.fit_svi(0, design, 2, HYPER, lam=-1.0, progress=False)
