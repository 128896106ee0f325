"""PSM's user and item vector updates in blocks (issue 28): the same result as the unblocked solve.

`psm.update_users` / `psm.update_items` solve the users (items) in blocks of B over the row-major
(item-sorted) order of the pairs (`psm.PairOrder`), so at most (B, K, K) precisions exist. The
reference is the unblocked form: every P_i and m_i at once (`psm.user_update_targets`), solved here
with numpy's LU solver in float64.

Tolerance (float64, u = 2^-53 = 1.1e-16). The blocked and the reference computation differ in (a)
the order of the additions of each P_i, m_i (at most n_i + 3 terms, n_i <= N = 59 pairs of one
user or item: relative error <= (N + 3) u of the sum of absolute terms) and (b) Cholesky against
LU, both backward stable: a relative error of the solution <= c K u cond(P_i) with a small c. The
bound used is 10 (N + 3 + K) u max_i cond(P_i) relative to max |mean| (computed from the data below;
cond ~ 10-100 here, so ~1e-12), and 10 (N + 3) u for the precisions (diag P_i, sums only). A
wrong block boundary, a pair counted in two blocks or dropped, or a background term applied to
the wrong user moves results by O(1 / n_i) = O(0.1) relative, 10 orders above the bound.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import psm, sharding
from custom_inference.data import Observations
from ppl_models.psm import PSMHyper

jax.config.update("jax_enable_x64", True)

HYPER = PSMHyper()
I, J, K = 13, 11, 3
EPS = np.finfo(np.float64).eps / 2  # unit roundoff u


@pytest.fixture(scope="module")
def events():
    """59 distinct pairs of a 13 x 11 matrix, counts 1-3, stored in a shuffled (not row-major) order;
    user 4 and item 7 have no pairs (their P is the prior and background part alone)."""
    rng = np.random.default_rng(5)
    keep = [f for f in rng.permutation(I * J) if f // J != 4 and f % J != 7][:59]
    flat = np.asarray(keep)
    counts = rng.integers(1, 4, flat.size).astype(float)
    return Observations(flat // J, flat % J, counts, I, J)


@pytest.fixture(scope="module")
def state_xi(events):
    """A state one sweep away from the initial one (s, t, biases, xi* all away from their start)."""
    st = psm.init(3, events, K, HYPER, r=1.5)
    st, _ = psm.step(None, st, events, HYPER, order=psm.pair_order(events, K, block=I))
    d = psm._as_jax(events, np.float64)
    return st, d, psm.pair_xi(st, d)


def _reference(targets):
    P, m = (np.asarray(a) for a in targets)
    mean = np.linalg.solve(P, m[..., None])[..., 0]
    cond = max(np.linalg.cond(p) for p in P)
    return mean, np.diagonal(P, axis1=1, axis2=2), cond


def _check(got_mean, got_prec, ref, n_pairs):
    mean, prec, cond = ref
    tol_mean = 10 * (n_pairs + 3 + K) * EPS * cond * np.max(np.abs(mean))
    assert np.max(np.abs(np.asarray(got_mean) - mean)) <= tol_mean
    np.testing.assert_allclose(np.asarray(got_prec), prec, rtol=10 * (n_pairs + 3) * EPS, atol=0)


# blocks that split nothing (>= I and J), one symbol per block, uneven last blocks (5 and 4 do not
# divide 13 and 11), and different user / item block sizes
@pytest.mark.parametrize("block", [100, 1, 5, (4, 3)])
@pytest.mark.parametrize("chunk", [4, 16384])
def test_blocked_vector_updates_equal_the_unblocked_solve(events, state_xi, block, chunk):
    st, d, xi = state_xi
    order = psm.pair_order(events, K, block=block)
    assert order.user_perm is not None  # the shuffled pairs need the user permutation
    n = events.rows.size
    ref_u = _reference(psm.user_update_targets(st, d, HYPER, xi))
    ref_v = _reference(psm.item_update_targets(st, d, HYPER, xi))
    new_u = psm.update_users(st, d, HYPER, xi, chunk=chunk, order=order)
    new_v = psm.update_items(st, d, HYPER, xi, chunk=chunk, order=order)
    _check(new_u.u_mu, new_u.u_prec, ref_u, n)
    _check(new_v.v_mu, new_v.v_prec, ref_v, n)
    # every other field untouched
    for name in psm.PSMState._fields:
        if name not in ("u_mu", "u_prec"):
            assert np.array_equal(np.asarray(getattr(new_u, name)), np.asarray(getattr(st, name)))


def test_row_major_pairs_store_no_user_permutation(events, state_xi):
    """Row-major pairs (users contiguous): no user permutation, same blocked result."""
    st, _, _ = state_xi
    key = np.lexsort((np.asarray(events.cols), np.asarray(events.rows)))
    sorted_events = Observations(*(np.asarray(a)[key] for a in (events.rows, events.cols, events.values)), I, J)
    d = psm._as_jax(sorted_events, np.float64)
    xi = psm.pair_xi(st, d)
    order = psm.pair_order(sorted_events, K, block=5)
    assert order.user_perm is None and order.item_perm.dtype == jnp.int32
    assert np.asarray(order.user_ptr).tolist() == [[0] + np.cumsum(
        np.bincount(np.asarray(sorted_events.rows), minlength=15).reshape(3, 5).sum(1)).tolist()]
    _check(psm.update_users(st, d, HYPER, xi, chunk=4, order=order).u_mu,
           psm.update_users(st, d, HYPER, xi, chunk=4, order=order).u_prec,
           _reference(psm.user_update_targets(st, d, HYPER, xi)), events.rows.size)


def test_sweep_with_blocks_equals_one_block_and_the_traced_order(events):
    """Two whole sweeps: blocks of 1 and 5 against one block; `update_users` without an order (built
    in the trace) against the order passed. Tolerance: two sweeps of 8 blocks, each feeding the next,
    the bias means differences of sums (up to ~100x cancellation): 2 x 8 x 100 x the per-update bound
    above (~1e-12) = 2e-9, so rtol 1e-8, atol 1e-12 (values near 0)."""
    st0 = psm.init(1, events, K, HYPER, r=1.0)
    runs = {}
    for block in (I, 1, 5):
        st, order = st0, psm.pair_order(events, K, block=block)
        for _ in range(2):
            st, info = psm.step(None, st, events, HYPER, chunk=7, order=order)
        runs[block] = (st, info)
    for block in (1, 5):
        for a, b in zip(runs[block][0], runs[I][0]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(float(runs[block][1].elbo), float(runs[I][1].elbo), rtol=1e-8)
    d = psm._as_jax(events, np.float64)
    xi = psm.pair_xi(st0, d)
    a = psm.update_items(st0, d, HYPER, xi)
    b = psm.update_items(st0, d, HYPER, xi, order=psm.pair_order(events, K))
    np.testing.assert_array_equal(np.asarray(a.v_mu), np.asarray(b.v_mu))


def test_step_builds_the_order_once_per_data_object(events):
    st = psm.init(0, events, K, HYPER)
    d = psm._as_jax(events, np.float64)
    psm.step(None, st, d, HYPER)
    first = psm._ORDERS[id(d)][2]
    psm.step(None, st, d, HYPER)
    assert psm._ORDERS[id(d)][2] is first
    key = id(d)
    del d
    assert key not in psm._ORDERS  # dropped with its data


def test_sharded_blocked_sweep_equals_single_device(events):
    """2 devices, blocks of 4 users / 3 items, chunks of 5: the blocked sweep on each device's pairs
    (its own order), psum-ed per block, against the single-device blocked sweep. Tolerance as in
    tests/custom_inference/test_sharding.py (order of additions; rtol 1e-9)."""
    if len(jax.devices()) < 2:
        pytest.skip("needs 2 host devices (tests/conftest.py sets 4)")
    st = psm.init(2, events, K, HYPER, r=1.0)
    d = psm._as_jax(events, np.float64)
    sd = sharding.shard_observations(d, sharding.nnz_mesh(2))
    one = psm.step(None, st, d, HYPER, chunk=5, order=psm.pair_order(d, K, block=(4, 3)))
    two = psm.step(None, sharding.replicate(st, sd), sd, HYPER, chunk=5, order=psm.pair_order(sd, K, block=(4, 3)))
    for a, b in zip(two[0], one[0]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(two[1].elbo), float(one[1].elbo), rtol=1e-9)


def test_block_sizes_from_the_memory_bound():
    # 3 copies of (B, K, K): at K = 50, float32 and 256 MiB, B = 2^28 // (3 * 2500 * 4) = 8947
    assert psm.block_sizes(480_189, 17_770, 50, np.float32) == (8947, 8947)
    assert psm.block_sizes(10, 7, 50, np.float64, block_bytes=1) == (1, 1)
    assert psm.block_sizes(10, 7, 2, np.float64, block=(20, 3)) == (10, 3)
    for bad in (0, -1, 2.5, (1, 0), (1, 2, 3), True):
        with pytest.raises(ValueError, match="block"):
            psm.block_sizes(10, 7, 2, np.float64, block=bad)
    with pytest.raises(ValueError, match="block_bytes"):
        psm.block_sizes(10, 7, 2, np.float64, block_bytes=0)
    with pytest.raises(TypeError, match="Observations"):
        psm.pair_order("data", 2)


@pytest.mark.parametrize("row_major", [False, True])
def test_host_counting_order_equals_the_traced_argsort(monkeypatch, events, row_major):
    """`pair_order` on an Observations sorts on the host by counting, in chunks (here of 7 pairs, so
    keys repeat across chunks); the permutations and pointers equal the traced stable argsort's."""
    monkeypatch.setattr(psm, "_CHECK_CHUNK", 7)
    r, c = np.asarray(events.rows), np.asarray(events.cols)
    if row_major:
        key = np.lexsort((c, r))
        r, c = r[key], c[key]
    order = psm.pair_order(Observations(r, c, np.ones(r.size), I, J), K, block=(4, 3))
    ref = psm._local_order(jnp.asarray(r, jnp.int32), jnp.asarray(c, jnp.int32), I, J, 4, 3, row_major)
    assert (order.user_perm is None) == row_major
    for got, want in zip((order.user_perm, order.item_perm, order.user_ptr, order.item_ptr), ref):
        if want is not None:
            assert got.dtype == want.dtype and np.array_equal(np.asarray(got), np.asarray(want))
