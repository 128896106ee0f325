"""The shared blocked per-row loop (`custom_inference.row_blocks`, issue 28) against plain per-row sums.

`over_row_blocks` visits every pair of every block once (sorted order, chunks that straddle block
boundaries, a clamped last chunk, padding weight 0) and hands each block's sums to ``finish``. The
reference here sums the same terms per row with numpy in float64 (no block, no chunk, no sort).
Tolerance: each entry of a row's sums is a sum of at most N = 40 products in another order: relative
error <= N u of the sum of absolute terms (u = 2^-53); 1e-13 relative to the largest absolute term
sum is far above that (40 x 1.1e-16 = 4.4e-15) and far below what a pair counted twice, dropped or
given to the wrong row does (O(1) relative).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import row_blocks

jax.config.update("jax_enable_x64", True)

I, J, K, N = 7, 5, 3, 40


@pytest.fixture(scope="module")
def pairs():
    """40 pairs of a 7 x 5 matrix in random order (repeats allowed: rows are sums), user 2 and item 4
    without pairs, and per-pair terms w, g (N,), X, V (N, K); the last 3 pairs are padding (weight 0)."""
    rng = np.random.default_rng(11)
    rows = rng.choice([0, 1, 3, 4, 5, 6], N)
    cols = rng.choice([0, 1, 2, 3], N)
    weight = np.r_[np.ones(N - 3), np.zeros(3)]
    return rows, cols, rng.standard_normal(N), rng.standard_normal(N), rng.standard_normal((N, K)), \
        rng.standard_normal((N, K)), weight


def _reference(own, n_own, w, g, X, V, weight):
    P, dg, h = np.zeros((n_own, K, K)), np.zeros((n_own, K)), np.zeros((n_own, K))
    scale = np.zeros(n_own)
    for e in np.flatnonzero(weight > 0):
        P[own[e]] += w[e] * np.outer(X[e], X[e])
        dg[own[e]] += w[e] * V[e]
        h[own[e]] += g[e] * X[e]
        scale[own[e]] += abs(w[e]) * np.max(X[e] ** 2) + abs(g[e] * X[e]).max() + abs(w[e] * V[e]).max()
    return P, dg, h, scale


def _blocked(pairs, order, own_is_user, chunk):
    rows, cols, w, g, X, V, weight = (jnp.asarray(a) for a in pairs)
    own_ids = rows if own_is_user else cols
    n_own = I if own_is_user else J

    def pair_terms(take, m):
        return take(own_ids), take(w) * m, take(g) * m, take(X), take(V)  # take: along the first axis

    def finish(acc, ids):
        return acc

    out = (jnp.zeros((n_own, K, K)), jnp.zeros((n_own, K)), jnp.zeros((n_own, K)))
    return row_blocks.over_row_blocks(order, own_is_user, N, chunk, pair_terms, finish, out, K=K, dtype=jnp.float64,
                                      weight=weight)


@pytest.mark.parametrize("row_major", [False, True])
@pytest.mark.parametrize("block", [1, 3, (2, 4), 100])
@pytest.mark.parametrize("chunk", [1, 6, 64])
def test_blocked_sums_equal_the_per_row_sums(pairs, row_major, block, chunk):
    if row_major:
        key = np.lexsort((pairs[1], pairs[0]))
        pairs = tuple(a[key] for a in pairs[:6]) + (pairs[6],)  # the padding weight stays at the end
    rows, cols, w, g, X, V, weight = pairs
    order = row_blocks.host_order(rows, cols, I, J, K, dtype=np.float64, block=block)
    assert (order.user_perm is None) == row_major
    for own_is_user, own, n_own in ((True, rows, I), (False, cols, J)):
        got = _blocked(pairs, order, own_is_user, chunk)
        *ref, scale = _reference(own, n_own, w, g, X, V, weight)
        for a, b in zip(got, ref):
            tol = 1e-13 * scale.reshape((-1,) + (1,) * (b.ndim - 1))
            assert np.all(np.abs(np.asarray(a) - b) <= tol), (own_is_user, block, chunk)


def test_traced_order_equals_the_host_order(pairs):
    rows, cols = pairs[:2]
    host = row_blocks.host_order(rows, cols, I, J, K, dtype=np.float32, block=(3, 2), host_chunk=7)
    traced = jax.jit(lambda r, c: row_blocks.traced_order(r, c, I, J, K, np.float32, block=(3, 2)))(
        jnp.asarray(rows, jnp.int32), jnp.asarray(cols, jnp.int32))
    for a, b in zip(jax.tree_util.tree_leaves(host), jax.tree_util.tree_leaves(traced)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert (host.user_block, host.item_block) == (traced.user_block, traced.item_block) == (3, 2)


def test_cached_order_is_built_once_per_live_object():
    class Data:
        pass

    cache, calls, d = {}, [], Data()
    build = lambda: calls.append(1) or len(calls)  # noqa: E731
    assert row_blocks.cached_order(cache, d, (3, "f4"), build) == 1
    assert row_blocks.cached_order(cache, d, (3, "f4"), build) == 1  # hit
    assert row_blocks.cached_order(cache, d, (4, "f4"), build) == 2  # another spec: rebuilt
    del d
    assert not cache  # dropped with its object


def test_default_chunk_and_block_sizes():
    assert row_blocks.default_chunk(50, np.float32) == 2**25 // (2500 * 4)
    assert row_blocks.default_chunk(1000, np.float64) == 64
    assert row_blocks.block_sizes(480_189, 17_770, 50, np.float32) == (8947, 8947)
