"""The BPMF Gibbs sampler: log joint, sweeps in float32/float64, chunking, driver, predict, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density

from custom_inference import arviz_io
from custom_inference import bpmf
from custom_inference.data import Observations
from ppl_models import bpmf as ppl

HYPER = ppl.BPMFHyper(alpha=2.0, mu0=0.0, beta0=2.0, nu0=5.0, W0=0.2)
K = 2


@pytest.fixture(scope="module")
def data():
    truth, rows, cols, values = ppl.simulate(jax.random.PRNGKey(0), 8, 6, K, HYPER, n_obs=25)
    obs = Observations.from_coo(np.asarray(rows), np.asarray(cols), np.asarray(values), (8, 6), kind="real",
                                drop_zeros=False)
    return truth, obs


def test_log_joint_equals_the_programs_log_density(data):
    truth, obs = data
    state = bpmf.BPMFState(*(jnp.asarray(truth[n]) for n in bpmf.BPMFState._fields))
    ours = float(bpmf.log_joint(state, obs, HYPER, chunk_size=7))
    ref = float(log_density(ppl.model, (obs.rows, obs.cols, obs.values, 8, 6, K, HYPER), {}, truth)[0])
    assert abs(ours - ref) <= 1e-10 * abs(ref)  # same density, float64 rounding only


def test_sweep_does_not_depend_on_the_chunk_size(data):
    _, obs = data
    state = bpmf.init(jax.random.PRNGKey(1), obs, K, HYPER)
    a, _ = bpmf.step(jax.random.PRNGKey(2), state, obs, HYPER, chunk_size=4)
    b, _ = bpmf.step(jax.random.PRNGKey(2), state, obs, HYPER, chunk_size=1000)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)  # summation order only


# float32 under -m slow (test time: another compilation of the sampler's block): the float32 twin of
# the float64 run (same code, other dtype); every dtype-dependent line is exercised by float64 here
@pytest.mark.parametrize("dtype", [pytest.param(np.float32, marks=pytest.mark.slow), np.float64])
def test_sample_returns_draws_of_the_right_shape_and_dtype(data, dtype):
    _, obs = data
    # the run length of test_same_seed_same_draws_and_predict, so float64 reuses its compiled blocks
    idata = bpmf.sample(3, obs, K, HYPER, num_chains=2, num_warmup=2, num_samples=4, thin=2, dtype=dtype,
                        progress=False)
    post = arviz_io.group_arrays(idata)
    assert post["U"].shape == (2, 4, 8, K) and post["V"].shape == (2, 4, 6, K)
    assert post["Lambda_U"].shape == (2, 4, K, K) and post["mu_V"].shape == (2, 4, K)
    assert post["U"].dtype == np.dtype(dtype)
    assert all(np.all(np.isfinite(v)) for v in post.values())
    assert np.all(np.linalg.eigvalsh(post["Lambda_V"].astype(np.float64)) > 0)
    assert idata.posterior.attrs["seconds_per_sweep"] > 0


def test_same_seed_same_draws_and_predict(data):
    _, obs = data
    a = bpmf.sample(5, obs, K, HYPER, num_chains=2, num_warmup=2, num_samples=4, thin=2, progress=False)
    b = bpmf.sample(5, obs, K, HYPER, num_chains=2, num_warmup=2, num_samples=4, thin=2, progress=False)
    np.testing.assert_array_equal(a.posterior.U.values, b.posterior.U.values)
    mean, sd = bpmf.predict(a, [0, 7], [0, 5])
    U, V = a.posterior.U.values.reshape(8, 8, K), a.posterior.V.values.reshape(8, 6, K)
    p = np.einsum("sk,sk->s", U[:, 7], V[:, 5])
    np.testing.assert_allclose(mean[1], p.mean(), rtol=1e-12)
    np.testing.assert_allclose(sd[1], p.std(ddof=1), rtol=1e-10)
    _, sd_noise = bpmf.predict(a, [0, 7], [0, 5], include_noise=True)
    np.testing.assert_allclose(sd_noise ** 2, sd ** 2 + 1 / HYPER.alpha, rtol=1e-12)
    with pytest.raises(ValueError, match="rows"):
        bpmf.predict(a, [8], [0])


@pytest.mark.parametrize(
    "kwargs, field",
    [({"hyper": HYPER._replace(nu0=0.5)}, "nu0"), ({"hyper": HYPER._replace(beta0=-1.0)}, "beta0"),
     ({"hyper": HYPER._replace(W0=np.eye(3))}, "W0"), ({"keep": ("U", "Z")}, "keep"), ({"num_samples": 0}, "num_samples"),
     ({"gauge_rounds": -1}, "gauge_rounds"), ({"chunk_size": 0}, "chunk_size")],
)
def test_bad_input_raises_naming_the_field(data, kwargs, field):
    _, obs = data
    args = {"hyper": HYPER, **kwargs}
    hyper = args.pop("hyper")
    with pytest.raises(ValueError, match=field):
        bpmf.sample(0, obs, K, hyper, progress=False, **args)


def test_non_observations_input_raises():
    with pytest.raises(TypeError, match="data must be an Observations"):  # as hpf and the other solvers
        bpmf.sample(0, np.ones((3, 3)), K, HYPER, progress=False)


def _unblocked_rows(key, state, obs, hyper, chunk):
    """U and V of one sweep by the unblocked sampler: every user's (I, K, K) precision at once
    (`entry_stats`, `factor_conditional`, `sample_factor_rows`), with `step`'s key schedule."""
    k_hu, k_hv, k_u, k_v, _ = jax.random.split(key, 5)
    alpha = jnp.asarray(hyper.alpha, state.U.dtype)
    mu_U, lam_U = bpmf.sample_normal_wishart(k_hu, bpmf.normal_wishart_posterior(state.U, hyper))
    mu_V, lam_V = bpmf.sample_normal_wishart(k_hv, bpmf.normal_wishart_posterior(state.V, hyper))
    rows, cols, values = (jnp.asarray(a) for a in (obs.rows, obs.cols, obs.values))
    P_u, h_u = bpmf.factor_conditional(*bpmf.entry_stats(rows, cols, values, state.V, obs.n_rows, chunk), mu_U, lam_U, alpha)
    U = bpmf.sample_factor_rows(k_u, P_u, h_u)
    P_v, h_v = bpmf.factor_conditional(*bpmf.entry_stats(cols, rows, values, U, obs.n_cols, chunk), mu_V, lam_V, alpha)
    return U, bpmf.sample_factor_rows(k_v, P_v, h_v), max(np.linalg.cond(np.asarray(P)).max() for P in (P_u, P_v))


# blocks of 1 row, uneven blocks (3 does not divide 8 or 6), other sizes per side, one block
@pytest.mark.parametrize("row_block", [1, 3, (5, 2), None])
def test_blocked_draws_equal_the_unblocked_draws(data, row_block):
    """Same key, same draws: the rows' sums are the same terms in the same order (stable sorts), the
    normals are drawn for all rows at once as before; only the batched Cholesky may round otherwise.
    Tolerance: backward-stable Cholesky and triangular solves, relative error <= c (n_i + K) u cond(P)
    per draw (n_i <= 25 entries, K = 2, u = 1.1e-16, cond(P) from the data, c = 10), relative to max
    |draw|; the V draws inherit the U rounding through their sums (x cond again). A changed key, a
    pair in the wrong block or a missing term moves draws at O(1)."""
    _, obs = data
    state = bpmf.init(jax.random.PRNGKey(4), obs, K, HYPER)
    key = jax.random.PRNGKey(6)
    U, V, cond = _unblocked_rows(key, state, obs, HYPER, 4)
    order = None if row_block is None else bpmf.pair_order(obs, K, dtype=np.float64, row_block=row_block)
    new, _ = bpmf.step(key, state, obs, HYPER, chunk_size=4, gauge_rounds=0, order=order)
    tol = 10 * (25 + K) * np.finfo(np.float64).eps * cond
    assert np.max(np.abs(np.asarray(new.U) - np.asarray(U))) <= tol * np.max(np.abs(U))
    assert np.max(np.abs(np.asarray(new.V) - np.asarray(V))) <= tol * cond * np.max(np.abs(V))
    # the traced order (row_block passed, no order) gives the same draws as the host order
    traced, _ = bpmf.step(key, state, obs, HYPER, chunk_size=4, gauge_rounds=0, row_block=row_block)
    np.testing.assert_allclose(np.asarray(traced.V), np.asarray(new.V), rtol=0, atol=tol * cond * np.max(np.abs(V)))


def test_no_whole_precision_array_in_the_sweep(data):
    """With blocks of 3 rows and chunks of 4 entries, the compiled sweep holds no (I, K, K), (J, K, K)
    or (N, K, K) array (shapes read from the jaxpr, inner loops included); the unblocked sums do."""
    _, obs = data
    state = bpmf.init(jax.random.PRNGKey(4), obs, K, HYPER)
    text = str(jax.make_jaxpr(lambda s: bpmf.step(jax.random.PRNGKey(0), s, obs, HYPER, chunk_size=4, row_block=3))(state))
    whole = [f"f64[{n},{K},{K}]" for n in (obs.n_rows, obs.n_cols, obs.nnz)]
    assert not [w for w in whole if w in text]
    assert "f64[3,2,2]" in text
    ref = str(jax.make_jaxpr(lambda V: bpmf.entry_stats(obs.rows, obs.cols, obs.values, V, obs.n_rows, 4))(state.V))
    assert whole[0] in ref  # the check can fail: the unblocked sums hold every user's gram


def test_row_block_option_of_sample(data):
    _, obs = data
    a = bpmf.sample(5, obs, K, HYPER, num_chains=2, num_warmup=2, num_samples=4, thin=2, progress=False)
    b = bpmf.sample(5, obs, K, HYPER, num_chains=2, num_warmup=2, num_samples=4, thin=2, progress=False, row_block=(3, 2))
    # same draws to rounding (see test_blocked_draws_equal_the_unblocked_draws: ~1e-13 here after 6 sweeps)
    np.testing.assert_allclose(b.posterior.U.values, a.posterior.U.values, rtol=1e-9, atol=1e-9)
    assert b.posterior.attrs["row_block"] is not None
    with pytest.raises(ValueError, match="row_block"):
        bpmf.sample(5, obs, K, HYPER, num_chains=1, num_samples=1, progress=False, row_block=0)
