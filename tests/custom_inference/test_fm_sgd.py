"""SGD-FM (Algorithm 1): gradients, loss decrease, recovery of a planted low-noise FM."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from custom_inference import fm_sgd
from custom_inference.fm_design import FMDesign
from ppl_models.fm import FMFlatHyper, predict_mean, simulate


def _full_design(I=30, J=20, noise_precision=400.0, seed=0, K=2):
    """All I x J (user, item) pairs, one-hot | one-hot; y from the flat FM prior with small noise."""
    u, i = np.divmod(np.arange(I * J), J)
    N = I * J
    X = sp.hstack([sp.csr_matrix((np.ones(N), (np.arange(N), u)), shape=(N, I)),
                   sp.csr_matrix((np.ones(N), (np.arange(N), i)), shape=(N, J))]).tocoo()
    group = np.r_[[0] * I, [1] * J]
    hyper = FMFlatHyper(alpha=noise_precision, sigma_0=1.0, sigma_w=4.0, sigma_v=1.0)
    truth, y = simulate(jax.random.PRNGKey(seed), X.row, X.col, X.data, N, group, K, hyper)
    return FMDesign.from_scipy(X, np.asarray(y), group), truth, X


def test_instance_gradients_equal_autodiff_of_algorithm1_objective():
    """One instance: the step direction is grad of l_n + sum over the instance's parameters of lambda theta^2."""
    d, _, X = _full_design(I=4, J=3)
    C, Xv = fm_sgd.padded_rows(d)
    rng = np.random.default_rng(0)
    p = fm_sgd.FMParams(jnp.asarray(0.3), jnp.asarray(rng.normal(size=7)), jnp.asarray(rng.normal(size=(7, 2))))
    lam = (jnp.asarray(0.2), jnp.asarray([0.1, 0.3]), jnp.asarray([[0.05, 0.5], [0.7, 0.2]]))
    n = 5
    g = fm_sgd.instance_gradients(p, C[n:n + 1], Xv[n:n + 1], d.y[n:n + 1], d.group, lam)
    x = X.toarray()[n]
    on = x != 0

    def obj(p):
        yhat = predict_mean(p._asdict(), np.zeros(2, int), np.flatnonzero(on), x[on], 1)[0]
        gr = d.group
        return ((yhat - d.y[n]) ** 2 + lam[0] * p.w0 ** 2 + jnp.sum(on * lam[1][gr] * p.w ** 2)
                + jnp.sum(on[:, None] * lam[2][gr] * p.V ** 2))

    ref = jax.grad(obj)(p)
    for a, b in zip(g, ref):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_sgd_lowers_loss_and_recovers_planted_fm():
    """Low noise (sd 0.05), every pair observed: SGD's fit must reach the noise floor.

    Tolerance: the RMSE between SGD's yhat and the true mean function must be below 0.15, three
    times the noise sd (an FM fitting the noise exactly could not do better than ~0 nor worse than
    the noise sd by more than the regularization bias; a wrong gradient stalls near the prior
    sd of y, here > 1)."""
    d, truth, X = _full_design()
    res = fm_sgd.fit(jax.random.PRNGKey(1), d, 2, fm_sgd.SGDReg(0.0, 1e-4, 1e-4), learning_rate=0.02,
                     n_epochs=150, init_std=0.1)
    train_mse, objective = res.idata.sgd_trace.train_mse.values, res.trace
    assert train_mse[-1] < 0.5 * train_mse[0]
    # the objective Algorithm 1 descends decreases over the run (noisy per epoch: compare thirds)
    t = len(objective) // 3
    assert objective[-t:].mean() < objective[:t].mean()
    np.testing.assert_allclose(objective[-1], fm_sgd.objective(res.state, d, fm_sgd.SGDReg(0.0, 1e-4, 1e-4)),
                               rtol=1e-12)
    f_true = np.asarray(predict_mean(truth, X.row, X.col, X.data, d.n_rows))
    f_sgd = np.asarray(fm_sgd.predict(res.state, d))
    rmse = np.sqrt(np.mean((f_sgd - f_true) ** 2))
    assert rmse < 0.15, (rmse, np.std(f_true))


def test_minibatch_runs_and_errors():
    d, _, _ = _full_design(I=6, J=5)
    res = fm_sgd.fit(jax.random.PRNGKey(0), d, 2, learning_rate=0.05, n_epochs=3, batch_size=4, dtype=np.float32)
    mse = res.idata.sgd_trace.train_mse.values
    assert mse.shape == (3,) and np.all(np.isfinite(mse))
    assert res.idata.posterior.V.shape == (1, 1, d.n_features, 2)
    with pytest.raises(ValueError, match="learning_rate"):
        fm_sgd.fit(jax.random.PRNGKey(0), d, 2, learning_rate=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        fm_sgd.fit(jax.random.PRNGKey(0), d, 2, learning_rate=0.1, batch_size=0)


def _stop_after(n):
    """A `base.on_checkpoint` hook that interrupts the fit right after its n-th checkpoint write."""
    from custom_inference import base

    writes = []

    def hook(path, n_done):
        writes.append(n_done)
        if len(writes) >= n:
            raise base.Interrupted(f"stopped after {n_done}")

    return base.on_checkpoint(hook)


def test_checkpointed_and_resumed_fit_equals_the_single_scan_fit(tmp_path):
    """With a checkpoint the epochs run one compiled epoch at a time (the same scan body) through
    `vi_driver.run`; the result must equal the single-scan fit bit for bit, uninterrupted and when
    stopped after the 2nd checkpoint (epoch 4 of 7) and resumed."""
    from custom_inference import base

    d, _, _ = _full_design(I=6, J=5)
    kw = dict(learning_rate=0.05, n_epochs=7, batch_size=4)
    full = fm_sgd.fit(jax.random.PRNGKey(3), d, 2, **kw)
    ckpt = tmp_path / "sgd.npz"
    with _stop_after(2), pytest.raises(base.Interrupted):
        fm_sgd.fit(jax.random.PRNGKey(3), d, 2, checkpoint=ckpt, checkpoint_every=2, resume=True, **kw)
    resumed = fm_sgd.fit(jax.random.PRNGKey(3), d, 2, checkpoint=ckpt, checkpoint_every=2, resume=True, **kw)
    for a, b in zip(full.state, resumed.state):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for f in ("train_mse", "objective"):
        np.testing.assert_array_equal(full.idata.sgd_trace[f].values, resumed.idata.sgd_trace[f].values)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sgd.npz"]  # atomic writes leave no temp file


def _tagged_design(N=40, I=6, J=5, T=4, seed=2):
    """One-hot user | one-hot item | 0-3 real-valued tags per row (rows of 2 to 5 nonzeros, so the
    padded rows have padding), y arbitrary."""
    rng = np.random.default_rng(seed)
    tags = [rng.choice(T, rng.integers(0, 4), replace=False) for _ in range(N)]
    tr = np.repeat(np.arange(N), [len(t) for t in tags])
    rows = np.r_[np.arange(N), np.arange(N), tr]
    cols = np.r_[rng.integers(0, I, N), I + rng.integers(0, J, N), I + J + np.concatenate(tags).astype(int)]
    vals = np.r_[np.ones(2 * N), rng.uniform(0.5, 1.5, tr.size)]
    X = sp.coo_matrix((vals, (rows, cols)), shape=(N, I + J + T))
    return FMDesign.from_scipy(X, rng.normal(3.0, 1.0, N), np.r_[[0] * I, [1] * J, [2] * T]), X.toarray()


def test_epoch_is_algorithm1_over_the_shuffle_and_its_info_is_the_dense_objective():
    """issue 28: the epoch's memory was its diagnostics (yhat with (M, K) temporaries); they now sum the
    factors one at a time (`fm_design.fm_yhat`). Checks, float64, batch size 1:

    - `step`'s parameters equal a plain Python loop of Algorithm 1 (`instance_gradients`, one instance at a time, in
      the order of ``jax.random.permutation(key, N)``; not bit for bit: XLA fuses the compiled epoch
      differently, seen 8e-17 against the same kernel compiled without the diagnostics): 40 steps, each |theta| ~ 1 changed by rounding
      of a few ulps (u = 1.1e-16); 40 x a few ulps, and a step size of 0.05 that does not amplify,
      stays below 1e-13; rtol = atol = 1e-11 is 100 x that, and one instance out of order or a wrong
      gradient moves parameters by ~eta |g| ~ 1e-2;
    - `SGDInfo` (train MSE and the frequency-weighted objective) equals its dense brute force:
      sums of N = 40 terms of size ~10, relative rounding <= N u ~ 5e-15; rtol 1e-12."""
    d, Xd = _tagged_design()
    K, eta = 3, 0.05
    reg = fm_sgd.SGDReg(0.01, 0.02, 0.03)
    p0 = fm_sgd.init(jax.random.PRNGKey(0), d, K, dtype=np.float64)
    key = jax.random.PRNGKey(7)
    new, info = fm_sgd.step(key, p0, d, reg, learning_rate=eta)

    C, Xv = fm_sgd.padded_rows(d)
    lam = fm_sgd._reg_arrays(reg, d.n_groups, K, np.float64)
    y, group = jnp.asarray(d.y), jnp.asarray(d.group)
    p = p0
    for n in np.asarray(jax.random.permutation(key, d.n_rows)):
        g0, gw, gV = fm_sgd.instance_gradients(p, C[n:n + 1], Xv[n:n + 1], y[n:n + 1], group, lam)
        p = fm_sgd.FMParams(p.w0 - eta * g0, p.w - eta * gw, p.V - eta * gV)
    for a, b in zip(new, p):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-11, atol=1e-11)

    w0, w, V = (np.asarray(a) for a in new)
    xv = Xd[:, :, None] * V[None]
    yhat = w0 + Xd @ w + 0.5 * np.sum(xv.sum(1) ** 2 - (xv ** 2).sum(1), axis=-1)
    np.testing.assert_allclose(fm_sgd.predict(new, d), yhat, rtol=1e-12, atol=1e-12)
    n_l = (Xd != 0).sum(0)
    gl = np.asarray(d.group)
    lw, lv = np.asarray(lam[1])[gl], np.asarray(lam[2])[gl]
    obj = (np.sum((d.y - yhat) ** 2) + reg.lambda_0 * d.n_rows * w0 ** 2 + np.sum(lw * n_l * w ** 2)
           + np.sum(lv * n_l[:, None] * V ** 2))
    np.testing.assert_allclose(float(info.train_mse), np.mean((d.y - yhat) ** 2), rtol=1e-12)
    np.testing.assert_allclose(float(info.objective), obj, rtol=1e-12)


def test_padded_rows_equal_the_dense_rows_sorted_or_not():
    """`padded_rows` skips the sort for row-sorted nonzeros (issue 28): on a design whose nonzeros are
    shuffled it must give the same arrays as on the sorted one, and each row must hold that row's
    nonzeros of the dense X in column order, zero-padded (exact: integers and copied values)."""
    d, Xd = _tagged_design()
    C, Xv = fm_sgd.padded_rows(d)
    perm = np.random.default_rng(0).permutation(d.nnz)
    shuffled = FMDesign(d.rows[perm], d.cols[perm], d.values[perm], d.y, d.group, d.block, d.order, d.n_rows,
                        d.n_features, d.n_groups, d.block_ptr, d.group_names)
    C2, Xv2 = fm_sgd.padded_rows(shuffled)
    assert C.shape == (d.n_rows, 5) and C.dtype == np.int32 and Xv.dtype == d.values.dtype
    for n in range(d.n_rows):
        nz = np.flatnonzero(Xd[n])
        np.testing.assert_array_equal(C[n, :nz.size], nz)
        np.testing.assert_array_equal(Xv[n, :nz.size], Xd[n, nz])
        assert not Xv[n, nz.size:].any()
        # the stable sort of the shuffled entries keeps their shuffled order within a row
        assert sorted(zip(C2[n, :nz.size], Xv2[n, :nz.size])) == list(zip(C[n, :nz.size], Xv[n, :nz.size]))


def test_step_with_padded_rows_built_once_equals_the_step_that_builds_them():
    """`step(..., padded=(C, Xv))` with the padded rows and the design placed on the device once (as a caller
    running many epochs does, like `fit`) gives the same parameters and info bit for bit as the default
    step, which builds them on the host at every call: the same arrays enter the same compiled epoch.
    Two chained epochs, batch sizes 1 and 3, float64; a wrong-shaped ``padded`` is refused."""
    d, _ = _tagged_design()
    reg = fm_sgd.SGDReg(0.01, 0.02, 0.03)
    p_ref = p_once = fm_sgd.init(jax.random.PRNGKey(0), d, 3, dtype=np.float64)
    dev = jax.tree_util.tree_map(jnp.asarray, d)
    C, Xv = fm_sgd.padded_rows(d)
    padded = (jnp.asarray(C), jnp.asarray(Xv))
    for t, bs in enumerate((1, 3)):
        key = jax.random.PRNGKey(10 + t)
        p_ref, info_ref = fm_sgd.step(key, p_ref, d, reg, learning_rate=0.05, batch_size=bs)
        p_once, info_once = fm_sgd.step(key, p_once, dev, reg, learning_rate=0.05, batch_size=bs, padded=padded)
        for a, b in zip((*p_ref, *info_ref), (*p_once, *info_once)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match=r"padded: expected \(C, Xv\) of one shape"):
        fm_sgd.step(key, p_once, dev, reg, learning_rate=0.05, padded=(padded[0][1:], padded[1][1:]))


def test_init_checks_init_std_and_dtype():
    """`init` refuses a negative or non-finite init_std and a float16 dtype (as every solver's
    `base.compute_dtype`), before drawing anything."""
    design = _design_for_init_checks()
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="init_std must be finite and >= 0"):
            fm_sgd.init(0, design, 2, init_std=bad)
    with pytest.raises(ValueError, match="dtype must be one of"):
        fm_sgd.init(0, design, 2, dtype=np.float16)
    assert fm_sgd.init(0, design, 2, dtype=np.float32).V.dtype == np.float32


def _design_for_init_checks():
    X = sp.csr_matrix(np.eye(3))
    return FMDesign.from_scipy(X, np.ones(3), np.zeros(3, int))
