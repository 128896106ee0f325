"""HPF CAVI and SBMF Gibbs with the nonzeros split over devices equal their single-device runs.

The test process has four CPU host devices (``tests/conftest.py`` sets
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` before JAX loads). Every comparison runs
the same solver on the same data and key with 1, 2 and 4 devices (`sharding.nnz_mesh`) and
without a mesh. The sizes are odd (N = 301 HPF counts, N = 203 SBMF ratings), so 2 and 4 devices
get padded blocks (`sharding.shard_observations`) and the padding's neutrality is exercised.

Tolerances. The only difference between a sharded and a single-device sweep is the order of the
floating-point additions (per-block partial sums, then the psum across blocks). Reordering a sum
of n terms changes it by at most (n - 1) u sum |x_i|, u = 2^-53 = 1.1e-16 (float64). HPF's sums
are of positive terms, so each statistic moves by at most N u = 301 x 1.1e-16 = 3.3e-14
relatively; one sweep is checked at rtol 1e-13 (3 x that bound), a 20-sweep fit at rtol 1e-12
(20 sweeps x the bound = 6.7e-13, if each sweep's rounding is carried forward without damping;
CAVI contracts towards its fixed point, so this is an upper estimate). SBMF's sums mix signs
(residuals), so the bound is relative to the sum of magnitudes, and each draw carries the
differences forward (a draw is mean + sd x noise with the same noise): after 10 sweeps of
2 (K + 1) draws each, with sums of up to N = 203 terms, the accumulated rounding is below
10 x 2 (K + 1) x 203 x 1.1e-16 x (magnitude) = 3.6e-12 x (magnitude) for K = 3; the check is
rtol = atol = 1e-10 (atol for values near 0), 30 times above it. A real bug (a padded entry
counted, a missing psum, a shard's sum counted twice, another key) moves values by O(1).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from custom_inference import hpf, sbmf, sharding
from custom_inference.data import Observations
from ppl_models.hpf import HPFHyper
from ppl_models.sbmf import SBMFHyper

ROOT = Path(__file__).resolve().parents[2]
DEVICES = (1, 2, 4)
# the one-device mesh (no psum partner, no padding) is the trivial case; 2 and 4 devices run the same
# code (both get padded blocks: 301 = 2 x 151 - 1 = 4 x 76 - 3), so the default run checks 4 devices
# and all three run under -m slow (each device count is another compilation of the sweep and of the
# fit's kernels). Two devices stay in the default run through
# test_hpf_statistics_over_several_chunks_per_block (the per-block sums and their psum, 2 blocks).
SWEEP_DEVICES = (pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 4)
K = 3


def _counts() -> Observations:
    rng = np.random.default_rng(14)
    flat = rng.choice(40 * 30, 301, replace=False)
    return Observations.from_coo(flat // 30, flat % 30, rng.poisson(2.0, 301) + 1, (40, 30))


def _ratings() -> Observations:
    rng = np.random.default_rng(15)
    flat = rng.choice(35 * 25, 203, replace=False)
    return Observations.from_coo(flat // 25, flat % 25, rng.normal(3.0, 1.0, 203), (35, 25), kind="real",
                                 drop_zeros=False)


@pytest.fixture(scope="module")
def counts():
    return _counts()


@pytest.fixture(scope="module")
def ratings():
    return _ratings()


@pytest.fixture(scope="module")
def hpf_reference(counts):
    """Unsharded: one `hpf.step` from the initial state, and a 20-sweep `hpf.fit`."""
    state0 = hpf.init(0, counts, K, HPFHyper())
    data = jax.tree_util.tree_map(jnp.asarray, counts)
    state1, info1 = hpf.step(None, state0, data, HPFHyper())
    fit = hpf.fit(0, counts, K, HPFHyper(), max_iter=20, tol=0, n_draws=0, progress=False)
    return state0, state1, info1, fit


def _assert_states_close(sharded, single, rtol, atol=0.0):
    for name, a, b in zip(type(single)._fields, sharded, single):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("n_devices", DEVICES)
def test_blocks_are_equal_padded_and_placed_one_per_device(counts, n_devices):
    mesh = sharding.nnz_mesh(n_devices)
    sd = sharding.shard_observations(counts, mesh)
    n, d = counts.nnz, n_devices
    b = -(-n // d)
    assert (sd.nnz, sd.n_shards, sd.block_size, sd.shape) == (n, d, b, counts.shape)
    assert sd.values.sharding.spec == P("nnz") and len(sd.values.sharding.device_set) == d
    rows, cols, values, weight = (np.asarray(x) for x in (sd.rows, sd.cols, sd.values, sd.weight))
    np.testing.assert_array_equal(rows[:n], counts.rows)
    np.testing.assert_array_equal(values[:n], counts.values)
    assert np.all(values[n:] == 0) and np.all(weight[n:] == 0) and np.all(weight[:n] == 1)
    assert np.all(rows[n:] == counts.n_rows - 1) and np.all(cols[n:] == counts.n_cols - 1)
    assert (d * b - n > 0) == (n_devices > 1)  # 301 entries: 2 and 4 devices get padding
    for shard in sd.rows.addressable_shards:  # each device holds one contiguous block, rows sorted
        block = np.asarray(shard.data)
        assert block.shape == (b,) and np.all(np.diff(block) >= 0)


@pytest.mark.parametrize("n_devices", SWEEP_DEVICES)
def test_hpf_sweep_sharded_equals_single_device(counts, hpf_reference, n_devices):
    state0, state1, info1, _ = hpf_reference
    sd = sharding.shard_observations(counts, sharding.nnz_mesh(n_devices))
    state, info = hpf.step(None, sharding.replicate(state0, sd), sd, HPFHyper())
    # rtol 1e-13: 3 x the reordering bound N u = 3.3e-14 of positive sums (module docstring)
    _assert_states_close(state, state1, rtol=1e-13)
    np.testing.assert_allclose(float(info.elbo), float(info1.elbo), rtol=1e-13)
    assert state.gamma_shape.sharding.spec == P()  # the factors stay replicated
    # the public ELBO on sharded data (per block, psum-ed) equals the single-device one
    np.testing.assert_allclose(float(hpf.elbo(state1, sd, HPFHyper())), float(info1.elbo), rtol=1e-13)


def test_hpf_statistics_over_several_chunks_per_block(counts, hpf_reference):
    """The per-block sums loop over chunks of nonzeros (``fori_loop``; 16384 per chunk in a real
    run): with chunks of 32, each of the 2 blocks (151 entries) runs 4 whole chunks and a tail."""
    state0 = hpf_reference[0]
    sd = sharding.shard_observations(counts, sharding.nnz_mesh(2))
    data = jax.tree_util.tree_map(jnp.asarray, counts)
    stats = jax.jit(lambda s, d: (hpf._sweep_statistics(s, d, chunk=32), hpf._y_log_z(s, d, chunk=32)))
    (user, item, ylz), ylz2 = stats(sharding.replicate(state0, sd), sd)
    (user1, item1, ylz1), _ = stats(state0, data)
    for a, b in ((user, user1), (item, item1), (ylz, ylz1), (ylz2, ylz1)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13)  # the one-sweep tolerance


@pytest.mark.parametrize("n_devices", SWEEP_DEVICES)
def test_hpf_fit_sharded_equals_single_device(counts, hpf_reference, n_devices):
    fit = hpf_reference[3]
    res = hpf.fit(0, counts, K, HPFHyper(), max_iter=20, tol=0, n_draws=0, progress=False,
                  mesh=sharding.nnz_mesh(n_devices))
    # rtol 1e-12: 20 sweeps x the per-sweep reordering bound 3.3e-14 (module docstring)
    _assert_states_close(res.state, fit.state, rtol=1e-12)
    assert res.trace.shape == fit.trace.shape == (21,)
    np.testing.assert_allclose(res.trace, fit.trace, rtol=1e-12)  # the ELBO after every sweep
    assert res.idata.posterior.attrs["n_devices"] == n_devices
    assert "n_devices" not in fit.idata.posterior.attrs


# All device counts under -m slow (test time): the default run checks the sharded SBMF sweep through
# test_sbmf_sample_with_a_mesh_equals_a_single_device_loop_of_step (4 devices, through the driver).
@pytest.mark.slow
@pytest.mark.parametrize("n_devices", [1, 2, 4])
def test_sbmf_chain_sharded_equals_single_device(ratings, n_devices):
    hyper = SBMFHyper()
    key0 = jax.random.PRNGKey(3)
    keys = jax.random.split(jax.random.PRNGKey(4), 10)
    sd = sharding.shard_observations(ratings, sharding.nnz_mesh(n_devices))
    single = sbmf.init(key0, jax.tree_util.tree_map(jnp.asarray, ratings), K, hyper)
    sharded = sbmf.init(key0, sd, K, hyper)
    data = jax.tree_util.tree_map(jnp.asarray, ratings)
    n = ratings.nnz
    for k in keys:  # 10 sweeps, the same key for both chains
        single, info1 = sbmf.step(k, single, data, hyper)
        sharded, info = sbmf.step(k, sharded, sd, hyper)
    e = np.asarray(sharded.e)
    assert e.shape == (sd.n_shards * sd.block_size,) and np.all(e[n:] == 0)  # padding stays neutral
    # rtol = atol = 1e-10: 30 x the accumulated reordering bound 3.6e-12 (module docstring)
    _assert_states_close(sharded._replace(e=e[:n]), single, rtol=1e-10, atol=1e-10)
    for a, b in zip(info, info1):
        np.testing.assert_allclose(float(a), float(b), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(float(sbmf.log_joint(sharded, sd, hyper)), float(info1.log_joint), rtol=1e-10)
    np.testing.assert_allclose(float(sbmf.log_joint(sharded, sd, hyper, from_cache=False)),
                               float(sbmf.log_joint(single, data, hyper, from_cache=False)), rtol=1e-10)


def test_sbmf_sample_with_a_mesh_equals_a_single_device_loop_of_step(ratings):
    """Through the sampling driver (chains under vmap, units under jit/scan, the sweep under
    shard_map), against a plain loop of the single-device `sbmf.step` under the driver's key
    schedule (`mcmc_driver` module docstring; thin = 1): init from split(init_key, C)[c], then per
    unit key, sub = split(key) and chain c's sweep key split(split(sub, C)[c], 1)[0]."""
    C, n_warm, n_keep, seed = 2, 2, 3, 5
    idata = sbmf.sample(seed, ratings, K, SBMFHyper(), num_chains=C, num_warmup=n_warm, num_samples=n_keep,
                        block=n_warm + n_keep, progress=False, mesh=sharding.nnz_mesh(2))  # one compiled block
    assert idata.posterior.attrs["n_devices"] == 2 and idata.posterior.attrs["nnz"] == ratings.nnz
    data = jax.tree_util.tree_map(jnp.asarray, ratings)
    key, init_key = jax.random.split(jax.random.PRNGKey(seed))
    states = [sbmf.init(k, data, K, SBMFHyper()) for k in jax.random.split(init_key, C)]
    kept = []
    for unit in range(n_warm + n_keep):
        key, sub = jax.random.split(key)
        for c, chain_key in enumerate(jax.random.split(sub, C)):
            states[c], _ = sbmf.step(jax.random.split(chain_key, 1)[0], states[c], data, SBMFHyper())
        if unit >= n_warm:
            kept.append([s for s in states])
    for name in ("mu", "tau", "alpha", "U", "V", "sigma_u"):
        expected = np.stack([np.stack([np.asarray(getattr(kept[t][c], name)) for t in range(n_keep)])
                             for c in range(C)])
        # 5 sweeps: the bound of test_sbmf_chain_sharded_equals_single_device (10 sweeps) applies
        np.testing.assert_allclose(idata.posterior[name].values, expected, rtol=1e-10, atol=1e-10, err_msg=name)


def test_bad_mesh_or_data_raise_clear_errors(counts, ratings):
    wrong_axis = Mesh(np.asarray(jax.devices()[:2], dtype=object), ("data",))
    with pytest.raises(ValueError, match="no axis 'nnz'.*'data'"):
        sharding.shard_observations(counts, wrong_axis)
    with pytest.raises(ValueError, match="no axis 'nnz'"):
        hpf.fit(0, counts, K, HPFHyper(), max_iter=1, progress=False, mesh=wrong_axis)
    with pytest.raises(ValueError, match="no axis 'nnz'"):
        sbmf.sample(0, ratings, K, SBMFHyper(), num_chains=1, num_warmup=0, num_samples=1, progress=False,
                    mesh=wrong_axis)
    with pytest.raises(TypeError, match="jax.sharding.Mesh"):
        hpf.fit(0, counts, K, HPFHyper(), max_iter=1, progress=False, mesh="nnz")
    with pytest.raises(TypeError, match="must be a custom_inference.data.Observations"):
        sharding.shard_observations(counts.to_scipy(), sharding.nnz_mesh(2))
    sd = sharding.shard_observations(counts, sharding.nnz_mesh(2))
    with pytest.raises(TypeError, match="must be a custom_inference.data.Observations"):
        sharding.shard_observations(sd, sharding.nnz_mesh(2))  # shard once
    with pytest.raises(TypeError, match="Observations or a ShardedObservations"):
        sharding.block_sums(lambda r, b: b.values.sum(), (), {"rows": counts.rows})
    with pytest.raises(ValueError, match="only 4 devices"):
        sharding.nnz_mesh(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_DISTRIBUTED = """
import json, sys
import jax
import numpy as np
from custom_inference import hpf, sharding
sharding.initialize_distributed()  # from FACTORBAYES_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID
jax.config.update("jax_enable_x64", True)
from custom_inference.data import Observations
from ppl_models.hpf import HPFHyper
with np.load(sys.argv[2]) as f:
    counts = Observations.from_coo(f["rows"], f["cols"], f["values"], tuple(f["shape"]))
res = hpf.fit(0, counts, int(sys.argv[3]), HPFHyper(), max_iter=20, tol=0, n_draws=0, progress=False,
              mesh=sharding.nnz_mesh())
json.dump({"processes": jax.process_count(), "devices": jax.device_count(), "trace": res.trace.tolist(),
           "gamma_shape": np.asarray(res.state.gamma_shape).tolist()}, open(sys.argv[1], "w"))
jax.distributed.shutdown()
"""


def test_multi_process_launch_in_its_single_process_form(counts, hpf_reference, tmp_path):
    """`sharding.initialize_distributed` (jax.distributed.initialize with a local coordinator, one
    process of four CPU devices), then a sharded fit over ``jax.devices()``, in a fresh interpreter:
    the README's launch line with FACTORBAYES_NUM_PROCESSES=1."""
    out, data = tmp_path / "out.json", tmp_path / "counts.npz"
    np.savez(data, rows=counts.rows, cols=counts.cols, values=counts.values, shape=np.asarray(counts.shape))
    env = dict(os.environ, FACTORBAYES_COORDINATOR=f"127.0.0.1:{_free_port()}", FACTORBAYES_NUM_PROCESSES="1",
               FACTORBAYES_PROCESS_ID="0", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _DISTRIBUTED, str(out), str(data), str(K)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    fit = hpf_reference[3]
    assert (got["processes"], got["devices"]) == (1, 4)
    # the tolerance of test_hpf_fit_sharded_equals_single_device
    np.testing.assert_allclose(got["trace"], fit.trace, rtol=1e-12)
    np.testing.assert_allclose(got["gamma_shape"], np.asarray(fit.state.gamma_shape), rtol=1e-12)


def _fm_design():
    """N = 37 instances (odd: 2 and 4 devices get padding rows): one-hot user (12) | a "tag" group
    (6 tags, 0 or 1 per row, real values), so the design has a full block (users) and a partial one
    (tags) -- both padding paths of `shard_fm_design`. (Two blocks only: each block is another
    loop in the compiled sweep, and compilation is most of this test's time.)"""
    import scipy.sparse as sp

    from custom_inference.fm_design import FMDesign

    rng = np.random.default_rng(16)
    N, I, T = 37, 12, 6
    user, tag = rng.integers(I, size=N), rng.integers(-T, T, size=N)  # about half the rows tagged
    has = tag >= 0
    rows = np.r_[np.arange(N), np.flatnonzero(has)]
    cols = np.r_[user, I + tag[has]]
    vals = np.r_[np.ones(N), rng.uniform(0.5, 1.5, has.sum())]
    X = sp.coo_matrix((vals, (rows, cols)), shape=(N, I + T))
    return FMDesign.from_scipy(X, rng.normal(3.0, 1.0, N), np.r_[[0] * I, [1] * T])


# 4 devices by default (2 under -m slow: each device count compiles the sweep again)
@pytest.mark.parametrize("n_devices", [pytest.param(2, marks=pytest.mark.slow), 4])
def test_fm_mcmc_sweep_sharded_equals_single_device(n_devices):
    """Two MCMC-FM sweeps with the instances split over the devices (`shard_fm_design`, the sweep
    under shard_map) against the single-device sweeps, same keys.

    Tolerance (float64): the draws use the same replicated keys, so the only difference is the order
    of the additions in the psum-ed sums over rows / nonzeros (at most N = 37 rows per sum):
    (n - 1) u sum |x| per sum, u = 1.1e-16, i.e. about 4e-15 relative to the terms' magnitude.
    Each of the 2 sweeps makes 1 + G + G K + G + G K + 1 + B (K + 1) = 26 draws (G = B = 2, K = 3)
    that carry the differences forward (through e and q); 2 x 26 x 4e-15 = 2e-13, so rtol = atol =
    1e-10 (500 x that) cannot be met by a real bug (a padding row or entry counted, a missing
    psum, a shard counted twice move values by O(1))."""
    from custom_inference import fm_mcmc as mc
    from custom_inference.fm_design import shard_fm_design
    from ppl_models.fm import FMHierHyper

    design = _fm_design()
    hyper = FMHierHyper(alpha_0=5.0, beta_0=1.0, alpha_0p=5.0, beta_0p=5.0)
    assert design.n_blocks == 2 and any(design.block_ptr[b + 1] - design.block_ptr[b] < design.n_rows
                                       for b in range(design.n_blocks))  # partial blocks present
    sd = shard_fm_design(design, sharding.nnz_mesh(n_devices))
    assert sd.n_shards == n_devices and sd.n_rows >= design.n_rows and sd.y.sharding.spec == P("nnz")
    single = mc.init(jax.random.PRNGKey(3), design, K, hyper)
    n, pad = design.n_rows, sd.n_rows - design.n_rows
    # the same parameters; e and q padded (their values do not matter: `step` recomputes them first;
    # `init` on `sd` would give the same state at the cost of another compilation)
    sharded = single._replace(e=jnp.pad(single.e, (0, pad)), q=jnp.pad(single.q, ((0, pad), (0, 0))))
    dj = mc._as_jax(design, np.float64)
    for i in range(2):
        single, info1 = mc.step_jit(jax.random.PRNGKey(i), single, dj, hyper)
        sharded, info = mc.step_jit(jax.random.PRNGKey(i), sharded, sd, hyper)
    assert sharded.e.shape == (sd.n_rows,) and sharded.q.shape == (sd.n_rows, K)
    _assert_states_close(sharded._replace(e=sharded.e[:n], q=sharded.q[:n]), single, rtol=1e-10, atol=1e-10)
    for a, b in zip(info, info1):  # log joint and RMSE: padding rows masked out of the sums
        np.testing.assert_allclose(float(a), float(b), rtol=1e-10, atol=1e-10)


def _psm_events() -> Observations:
    """PSM event counts: 151 distinct pairs of a 30 x 20 matrix (odd: 2 and 4 devices get padding)."""
    rng = np.random.default_rng(17)
    flat = rng.choice(30 * 20, 151, replace=False)
    return Observations.from_coo(flat // 20, flat % 20, rng.poisson(1.0, 151) + 1, (30, 20))


# 4 devices by default (2 under -m slow: each device count compiles the sweep again)
@pytest.mark.parametrize("n_devices", [pytest.param(2, marks=pytest.mark.slow), 4])
def test_psm_sweep_sharded_equals_single_device(n_devices):
    """Two PSM sweeps (Algorithm 1, deterministic) with the pairs split over the devices against the
    single-device sweeps; chunks of 16 pairs, so each block runs several chunks and a padded tail.

    Tolerance (float64): the only difference is the order of the additions in the psum-ed sums over
    pairs (at most N = 151 terms): (n - 1) u sum |x| per sum, u = 1.1e-16, about 1.7e-14 relative to
    the terms' magnitude. Each of the 2 sweeps has 8 blocks whose outputs feed the next, and the
    bias means are differences of such sums (bu_mu: nu / rho with nu a sum of signed terms, up to
    100 x cancellation on these data), so 2 x 8 x 100 x 1.7e-14 = 2.7e-11; rtol = 1e-9 with atol =
    1e-12 (for values near 0) is above it, while a real bug (a padded pair's censored term counted,
    a missing psum, a block counted twice) moves values by O(1 / N) = 7e-3 or more. Measured: at
    most 2.1e-13 relative (bu_mu), 1e-14 elsewhere."""
    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    events, hyper = _psm_events(), PSMHyper()
    with jax.enable_x64(True):
        data = psm._as_jax(events, np.float64)
        single = psm.init(0, events, K, hyper, r=1.0)
        sd = sharding.shard_observations(data, sharding.nnz_mesh(n_devices))
        assert sd.nnz == 151 and sd.n_shards * sd.block_size > 151  # padded blocks
        sharded = sharding.replicate(single, sd)
        for _ in range(2):
            single, info1 = psm.step(None, single, data, hyper, chunk=16)
            sharded, info = psm.step(None, sharded, sd, hyper, chunk=16)
        assert sharded.u_mu.sharding.spec == P()  # the factors stay replicated
        _assert_states_close(sharded, single, rtol=1e-9, atol=1e-12)
        for a, b in zip(info, info1):
            np.testing.assert_allclose(float(a), float(b), rtol=1e-9)
    with pytest.raises(ValueError, match="no axis 'nnz'"):  # fit's mesh check, before any computation
        psm.fit(0, events, K, hyper, max_iter=1, progress=False,
                mesh=Mesh(np.asarray(jax.devices()[:2], dtype=object), ("data",)))
    with pytest.raises(TypeError, match="jax.sharding.Mesh"):
        psm.fit(0, events, K, hyper, max_iter=1, progress=False, mesh="nnz")


@pytest.mark.slow
def test_psm_fit_sharded_equals_single_device():
    """`psm.fit(mesh=)` (the driver, the ELBO of the initial state on sharded data, n_devices attr)
    against the single-device fit, 5 sweeps; the tolerance of the sweep test (5 sweeps instead of 2:
    rtol 1e-8)."""
    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    events, hyper = _psm_events(), PSMHyper()
    one = psm.fit(0, events, K, hyper, max_iter=5, tol=0, n_draws=1, progress=False)
    res = psm.fit(0, events, K, hyper, max_iter=5, tol=0, n_draws=1, progress=False, mesh=sharding.nnz_mesh(4))
    _assert_states_close(res.state, one.state, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(res.trace, one.trace, rtol=1e-8)
    assert res.idata.posterior.attrs["n_devices"] == 4 and "n_devices" not in one.idata.posterior.attrs
