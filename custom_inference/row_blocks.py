r"""Per-row K-variate Gaussian updates solved in blocks of rows: the pair order, the block sizes
from a memory bound, and the loop that accumulates and solves (or samples) one block at a time.

Three solvers update every user (then every item) r through a K-variate Gaussian whose natural
parameters are sums over r's observed pairs (or edges) e::

    P_r = sum_{e in r} w_e x_e x_e^T + diag(sum_{e in r} w_e v_e) + (the model's own terms)
    h_r = sum_{e in r} g_e x_e + (the model's own terms)

- PSM (``000_619a0297b9d686b2.txt`` appendix B.2, `custom_inference.psm`): w = 2 (c lam + k),
  x = E[v_j], v = Var[v_j]; then the mean P^-1 h and diag P.
- BPMF (``004_90693a0965f06816.txt`` eqs. (2.12)-(2.13), `custom_inference.bpmf`): w = 1, x = v_j,
  g = r_ij, no v; then one draw from N(P^-1 h, P^-1).
- RG (``003_203f63200c0d7157.txt`` eqs. (13), (15), `custom_inference.rg`): w = 2 lam_e,
  x = mu_v, v = s_v; then the mean P^-1 c and diag P, blended with the previous q.

Formed for all rows at once, P is an (I, K, K) array: 4.6 GB at Netflix's 480,189 users and
K = 50 in float32, whatever the number of pairs. Here the rows are taken B at a time: the pairs of
a block of users are contiguous in the user-sorted order of the pairs (no permutation stored when
the pairs are already row-major), those of a block of items in the item-sorted order (`PairOrder`,
a stable counting sort on the host, `host_order`, or an argsort inside the trace, `traced_order`);
each block sums its pairs' terms in chunks of ``chunk`` pairs into a (B, K, K) array
(`accumulate`), the model finishes and solves them, and the results are written into the (n, K)
outputs (`over_row_blocks`). Memory O(chunk K^2 + B K^2 + n K) with B from a memory bound
(`block_sizes`, `DEFAULT_BLOCK_BYTES`); the sums of each row are the same terms in the same order
(the sorts are stable), so the result equals the unblocked one up to the rounding of the solves.

Source: project addition (issue 28; the blocks of PSM's vector updates, moved here for BPMF and RG).
"""

from __future__ import annotations

import weakref
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "BLOCK_COPIES",
    "HOST_CHUNK",
    "block_sizes",
    "PairOrder",
    "local_order",
    "traced_order",
    "host_order",
    "cached_order",
    "default_chunk",
    "zeros",
    "accumulate",
    "solve_rows",
    "over_row_blocks",
]

#: default memory bound (bytes) of the (block, K, K) matrices of one block (`block_sizes`)
DEFAULT_BLOCK_BYTES = 256 * 2**20
#: (block, K, K) arrays counted against the bound: the accumulated sums, the finished precisions,
#: their Cholesky factors
BLOCK_COPIES = 3
#: pairs per chunk of the host passes (`host_order`): chunk-sized numpy temporaries only
HOST_CHUNK = 1 << 22


def block_sizes(n_rows: int, n_cols: int, K: int, dtype, block_bytes: int = DEFAULT_BLOCK_BYTES, block=None):
    """(users per block, items per block) of the blocked per-row updates.

    Default: the largest B with `BLOCK_COPIES` (3) x B x K x K x itemsize <= ``block_bytes`` (the
    accumulated sums, the finished precisions, their Cholesky factors), at least 1 and at most I
    (J). At K = 50, float32 and the default 256 MiB: 8,947 users per block (55 blocks at Netflix's
    480,189 users; 2 item blocks for 17,770 items).

    Parameters
    ----------
    n_rows : int
        I, the number of users (rows).
    n_cols : int
        J, the number of items (columns).
    K : int
        The latent dimension.
    dtype : numpy dtype or str
        The state's float dtype (its itemsize enters the bound).
    block_bytes : int >= 1, default `DEFAULT_BLOCK_BYTES` (256 MiB)
        Memory bound in bytes of the `BLOCK_COPIES` (B, K, K) arrays of one block.
    block : None, int >= 1 or pair (users, items) of ints >= 1, default None
        Overrides the bound (an int: both sides); each is capped at I, J. None: from ``block_bytes``.

    Returns
    -------
    users_per_block : int
        B_u, a Python int in [1, I] (0 only when I = 0).
    items_per_block : int
        B_i, a Python int in [1, J] (0 only when J = 0).

    Raises
    ------
    ValueError
        ``block_bytes`` < 1 or not an integer (with ``block`` None), or a ``block`` that is not a
        positive integer or a pair of them.
    TypeError
        Not of its own: ``numpy.dtype`` raises it for a ``dtype`` that is not a dtype.

    Source: project addition (issue 28).
    """
    if block is None:
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, (int, np.integer)) or block_bytes < 1:
            raise ValueError(f"block_bytes must be a positive integer, got {block_bytes!r}")
        b = max(1, int(block_bytes) // (BLOCK_COPIES * int(K) ** 2 * np.dtype(dtype).itemsize))
        pair = (b, b)
    else:
        pair = (block, block) if np.ndim(block) == 0 else tuple(block)
        if len(pair) != 2 or any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in pair):
            raise ValueError(f"block must be a positive integer or a pair (users, items) of them, got {block!r}")
    return min(int(pair[0]), int(n_rows)), min(int(pair[1]), int(n_cols))


@jax.tree_util.register_pytree_node_class
class PairOrder:
    """Where each block of users / items finds its pairs: a JAX pytree.

    Parameters
    ----------
    user_perm : jax.Array, shape (N,), int32, or None
        Positions of the pairs sorted by user (stable), or None when the pairs are already
        row-major (users contiguous: positions are the pairs' own).
    item_perm : jax.Array, shape (N,), int32
        Positions of the pairs sorted by item (stable).
    user_ptr : jax.Array, shape (S, n_user_blocks + 1), int32
        ``user_ptr[0, b]`` the first sorted position of user block b (users b B_u .. (b + 1) B_u - 1),
        the last entry N; S = 1 on one device, the number of blocks of pairs on a mesh (each
        device's own positions in its own block: `custom_inference.psm`).
    item_ptr : jax.Array, shape (S, n_item_blocks + 1), int32
        The same over items.
    user_block : int
        B_u, users per block (static, auxiliary data of the pytree).
    item_block : int
        B_i, items per block (static).

    Raises
    ------
    TypeError
        Not of its own: ``int(user_block)`` / ``int(item_block)`` raise it for non-numbers (and
        ValueError for strings that are not integers); the arrays are not checked.

    Source: project addition (issue 28).
    """

    def __init__(self, user_perm, item_perm, user_ptr, item_ptr, user_block: int, item_block: int):
        self.user_perm, self.item_perm, self.user_ptr, self.item_ptr = user_perm, item_perm, user_ptr, item_ptr
        self.user_block, self.item_block = int(user_block), int(item_block)

    def tree_flatten(self):
        """The pytree protocol: the four arrays as children, the two block sizes as auxiliary data.

        Returns
        -------
        children : tuple
            ``(user_perm, item_perm, user_ptr, item_ptr)`` (``user_perm`` may be None).
        aux : tuple of int
            ``(user_block, item_block)``.

        Raises
        ------
        None of its own.

        Source: project addition (jax.tree_util's pytree protocol).
        """
        return (self.user_perm, self.item_perm, self.user_ptr, self.item_ptr), (self.user_block, self.item_block)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    def __repr__(self) -> str:
        return (f"PairOrder(user_block={self.user_block}, item_block={self.item_block}, "
                f"user_sorted={self.user_perm is None})")


def local_order(rows, cols, n_rows: int, n_cols: int, user_block: int, item_block: int, users_sorted: bool):
    """The `PairOrder` arrays of one set of pairs, traced.

    An XLA stable argsort (~50 bytes a pair while it runs).

    Parameters
    ----------
    rows : jax.Array, shape (N,), int32
        User of each pair, in [0, n_rows).
    cols : jax.Array, shape (N,), int32
        Item of each pair, in [0, n_cols).
    n_rows : int
        I (Python int).
    n_cols : int
        J (Python int).
    user_block : int
        B_u, users per block (Python int >= 1).
    item_block : int
        B_i, items per block (Python int >= 1).
    users_sorted : bool
        Static: the caller knows the rows are non-decreasing (no user permutation is built).

    Returns
    -------
    user_perm : jax.Array, shape (N,), int32, or None
        None when ``users_sorted``.
    item_perm : jax.Array, shape (N,), int32
        The stable item order.
    user_ptr : jax.Array, shape (1, nb_u + 1), int32
        Block pointers over users, nb_u = ceil(I / B_u).
    item_ptr : jax.Array, shape (1, nb_i + 1), int32
        Block pointers over items.

    Raises
    ------
    None of its own (traced code).

    Source: project addition (issue 28).
    """
    def perm(keys):
        return jnp.argsort(keys, stable=True).astype(jnp.int32)

    def ptr(keys, n_own, block):
        nb = -(-n_own // block)
        counts = jnp.zeros(n_own, jnp.int32).at[keys].add(1)
        cum = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts, dtype=jnp.int32)])
        return cum[jnp.minimum(jnp.arange(nb + 1) * block, n_own)][None]

    return (None if users_sorted else perm(rows), perm(cols), ptr(rows, n_rows, user_block),
            ptr(cols, n_cols, item_block))


def traced_order(rows, cols, n_rows: int, n_cols: int, K: int, dtype, block=None) -> PairOrder:
    """A `PairOrder` built inside the trace, for an update called without a host order.

    Both permutations (sortedness is not known there): an O(N log N) sort per call.

    Parameters
    ----------
    rows : jax.Array, shape (N,), int32
        User of each pair.
    cols : jax.Array, shape (N,), int32
        Item of each pair.
    n_rows : int
        I.
    n_cols : int
        J.
    K : int
        The latent dimension.
    dtype : numpy dtype
        The state's float dtype.
    block : None, int or pair of ints, default None
        As in `block_sizes` (None: the default memory bound).

    Returns
    -------
    PairOrder
        With a user permutation (never None here).

    Raises
    ------
    ValueError
        From `block_sizes`, for a ``block`` that is not a positive integer (or pair of them).

    Source: project addition (issue 28).
    """
    ub, ib = block_sizes(n_rows, n_cols, K, dtype, block=block)
    return PairOrder(*local_order(rows, cols, n_rows, n_cols, ub, ib, False), ub, ib)


def host_order(rows, cols, n_rows: int, n_cols: int, K: int, *, dtype, block_bytes: int = DEFAULT_BLOCK_BYTES,
               block=None, host_chunk: int = HOST_CHUNK) -> PairOrder:
    """The pair order, computed once per data set on the host: a stable counting sort in chunks of
    ``host_chunk`` pairs (O(N); memory the N int32 result and chunk temporaries; an XLA argsort of
    1e8 keys took ~5 GiB here). Users that are already contiguous (row-major pairs) store no
    permutation.

    Parameters
    ----------
    rows : numpy.ndarray or jax.Array, shape (N,), integer
        User of each pair, in [0, n_rows) (read with ``np.asarray``: a copy from an accelerator).
    cols : numpy.ndarray or jax.Array, shape (N,), integer
        Item of each pair, in [0, n_cols).
    n_rows : int
        I.
    n_cols : int
        J.
    K : int
        The latent dimension.
    dtype : numpy dtype, keyword-only
        The state's float dtype.
    block_bytes : int, keyword-only, default `DEFAULT_BLOCK_BYTES`
        As in `block_sizes`.
    block : None, int or pair of ints, keyword-only, default None
        As in `block_sizes`.
    host_chunk : int >= 1, keyword-only, default `HOST_CHUNK`
        Pairs per chunk of the host passes.

    Returns
    -------
    PairOrder
        With jax arrays; ``user_perm`` None when the rows are already non-decreasing.

    Raises
    ------
    ValueError
        From `block_sizes` (a bad ``block_bytes`` or ``block``); from numpy's ``bincount`` for a
        negative id, and from the count accumulation for an id >= ``n_rows`` / ``n_cols``.

    Source: project addition (issue 28).
    """
    ub, ib = block_sizes(n_rows, n_cols, K, dtype, block_bytes, block)
    rows, cols = np.asarray(rows), np.asarray(cols)
    users_sorted = all(bool(np.all(np.diff(rows[a:a + host_chunk + 1]) >= 0)) for a in range(0, rows.size, host_chunk))
    user_perm, user_ptr = _counting_order(rows, n_rows, ub, not users_sorted, host_chunk)
    item_perm, item_ptr = _counting_order(cols, n_cols, ib, True, host_chunk)
    return PairOrder(user_perm, item_perm, user_ptr, item_ptr, ub, ib)


def _counting_order(keys, n_own: int, block: int, need_perm: bool, host_chunk: int):
    """Host counting sort of ``keys`` (N,) in [0, n_own), in chunks: the stable permutation (jax
    (N,) int32; None unless ``need_perm``) and the block pointers (jax (1, nb + 1) int32)."""
    n = keys.size
    counts = np.zeros(n_own, np.int64)
    for a in range(0, n, host_chunk):
        counts += np.bincount(keys[a:a + host_chunk], minlength=n_own)
    starts = np.concatenate([[0], np.cumsum(counts)])
    ptr = starts[np.minimum(np.arange(-(-n_own // block) + 1) * block, n_own)].astype(np.int32)[None]
    if not need_perm:
        return None, jnp.asarray(ptr)
    nxt = starts[:-1].copy()  # next free sorted position of each key
    perm = np.empty(n, np.int32)
    for a in range(0, n, host_chunk):
        k = keys[a:a + host_chunk]
        o = np.argsort(k, kind="stable")
        ks = k[o]
        rank = np.arange(ks.size) - np.searchsorted(ks, ks, side="left")  # place among equal keys
        perm[nxt[ks] + rank] = a + o
        nxt += np.bincount(k, minlength=n_own)
    return jnp.asarray(perm), jnp.asarray(ptr)


def cached_order(cache: dict, data, spec, build: Callable):
    """``build()`` (a `PairOrder`) of the object ``data``, cached while ``data`` is alive.

    Kept in ``cache`` while ``data`` is alive and asked for with the same ``spec``, so a loop of
    sweeps on one data set sorts its pairs once; an object that cannot be weakly referenced is
    not cached.

    Parameters
    ----------
    cache : dict
        ``id(data) -> (weak reference, spec, order)``, owned by the calling module.
    data : object
        The data set the order belongs to (e.g. a model's data pytree).
    spec : hashable
        What else the order depends on, e.g. ``(K, dtype)``.
    build : callable
        ``build() -> PairOrder``, called on a miss.

    Returns
    -------
    PairOrder
        What ``build`` returns (the cached one on a hit).

    Raises
    ------
    None of its own; what ``build`` raises propagates.

    Source: project addition (issue 28).
    """
    key = id(data)
    hit = cache.get(key)
    if hit is not None and hit[0]() is data and hit[1] == spec:
        return hit[2]
    order = build()
    try:
        ref = weakref.ref(data, lambda _, key=key: cache.pop(key, None))
    except TypeError:  # not weak-referenceable: no cache
        return order
    cache[key] = (ref, spec, order)
    return order


def default_chunk(K: int, dtype, budget_bytes: int = 1 << 25) -> int:
    """Pairs per chunk such that a chunk's (c, K, K) outer products take about ``budget_bytes``.

    max(64, budget / (K^2 itemsize)); 3,355 at K = 50 in float32 with the default 32 MiB.

    Parameters
    ----------
    K : int >= 1
        The latent dimension.
    dtype : numpy dtype
        The float dtype of the outer products.
    budget_bytes : int, default 2**25 (32 MiB)
        Memory of one chunk's (c, K, K) temporary, in bytes.

    Returns
    -------
    int
        Pairs per chunk, a Python int >= 64.

    Raises
    ------
    ZeroDivisionError
        Not of its own: for K = 0.

    Source: project addition (issue 28).
    """
    return int(max(64, budget_bytes // (int(K) ** 2 * np.dtype(dtype).itemsize)))


def zeros(n: int, K: int, dtype):
    """An empty accumulator of `accumulate`: zeros of ``dtype``.

    Parameters
    ----------
    n : int
        Rows of the accumulator (e.g. B, the rows of one block).
    K : int
        The latent dimension.
    dtype : numpy dtype
        Float dtype.

    Returns
    -------
    P : jax.Array, shape (n, K, K), ``dtype``
        Zeros.
    diagonal : jax.Array, shape (n, K), ``dtype``
        Zeros.
    h : jax.Array, shape (n, K), ``dtype``
        Zeros.

    Raises
    ------
    None of its own.

    Source: project addition (issue 28).
    """
    return jnp.zeros((n, K, K), dtype), jnp.zeros((n, K), dtype), jnp.zeros((n, K), dtype)


def accumulate(acc, own, w, g, X, V=None):
    """Add the pairs' terms to the accumulator ``acc``, in the pairs' order.

    P[own] += w X X^T, diagonal[own] += w V (skipped for V None), h[own] += g X; an ``own`` index
    out of range [0, n) is dropped (the masked pairs of a block). Memory: one (c, K, K) temporary.

    Parameters
    ----------
    acc : tuple of jax.Array
        ``(P (n, K, K), diagonal (n, K), h (n, K))``, float.
    own : jax.Array, shape (c,), int
        The accumulator row of each pair.
    w : jax.Array, shape (c,), float
        Weight of each pair's outer product (and of V).
    g : jax.Array, shape (c,), float
        Weight of each pair's X in h.
    X : jax.Array, shape (c, K), float
        The other side's vector of each pair.
    V : jax.Array, shape (c, K), float, or None
        Added (times w) to the diagonal; None skips the diagonal.

    Returns
    -------
    tuple of jax.Array
        The updated accumulator (same shapes and dtype).

    Raises
    ------
    None of its own (traced code).

    Source: ``000_619a0297b9d686b2.txt`` B.2 (P_i, m_i), ``004_90693a0965f06816.txt`` eq. (2.13),
    ``003_203f63200c0d7157.txt`` eqs. (13), (15): the sums over a row's pairs (module docstring).
    """
    P, dg, h = acc
    P = P.at[own].add(w[:, None, None] * X[:, :, None] * X[:, None, :], mode="drop")
    if V is not None:
        dg = dg.at[own].add(w[:, None] * V, mode="drop")
    h = h.at[own].add(g[:, None] * X, mode="drop")
    return P, dg, h


def solve_rows(P, h):
    """Batched Cholesky solve: the means P^-1 h and the diagonals of P.

    Parameters
    ----------
    P : jax.Array, shape (n, K, K), float
        Symmetric positive definite precisions.
    h : jax.Array, shape (n, K), float of P's dtype
        Precision-times-mean vectors.

    Returns
    -------
    mean : jax.Array, shape (n, K), P's dtype
        P^-1 h.
    diag : jax.Array, shape (n, K), P's dtype
        The diagonal of each P.

    Raises
    ------
    None of its own (a P that is not positive definite gives NaN, not an exception).

    Source: ``000_619a0297b9d686b2.txt`` eq. (15) and ``003_203f63200c0d7157.txt`` sec. 4 (means of
    the full-covariance q~, diagonal precisions).
    """
    chol = jnp.linalg.cholesky(P)
    mean = jax.scipy.linalg.cho_solve((chol, True), h[..., None])[..., 0]
    return mean, jnp.diagonal(P, axis1=1, axis2=2)


def _identity(tree):
    return tree


def over_row_blocks(order: PairOrder, own_is_user: bool, n_pairs: int, chunk: int, pair_terms: Callable,
                    finish: Callable, out: tuple, *, K: int, dtype, weight=None, vary: Callable = _identity,
                    psum: Callable = _identity):
    """The per-row results of one side (users or items), block by block: for block b the pairs at
    sorted positions ptr[b] .. ptr[b + 1] - 1 are visited in chunks of ``chunk`` (a while_loop; the
    start of the last chunk is clamped to N - chunk and the pairs before the chunk's own start
    masked, so nothing is padded or copied), their terms summed into a (B, K, K) accumulator
    (`accumulate`), which ``psum`` reduces (over a mesh) and ``finish`` turns into the block's rows;
    at most one block's (B, K, K) arrays exist at a time.

    Parameters
    ----------
    order : PairOrder
        Where each block finds its pairs.
    own_is_user : bool
        True for the user side (rows), False for items.
    n_pairs : int
        N, Python int >= 1.
    chunk : int
        Pairs per chunk (Python int >= 1, capped at N).
    pair_terms : callable
        ``(take, mask) -> (own, w, g, X, V)`` for one chunk: ``take(x)`` gives the chunk's (c,)
        part of any (N,) array in the side's sorted order, ``mask`` (c,) float is 1 on the block's
        pairs and 0 elsewhere (times ``weight``); w and g must be masked by the caller's use of
        ``mask`` (a masked pair's ``own`` is dropped here in any case); V may be None.
    finish : callable
        ``(acc, ids) -> tuple of (B, ...) arrays``, the block's rows from its summed accumulator;
        ``ids`` (B,) int32 are the block's row ids clamped to n - 1 (rows past n, in the last
        block, are computed and dropped).
    out : tuple of jax.Array
        The (n, ...) arrays the rows are written into (n = I or J).
    K : int, keyword-only
        The accumulator's latent dimension.
    dtype : numpy dtype, keyword-only
        The accumulator's float dtype.
    weight : jax.Array, shape (N,), float, or None, keyword-only
        In the pairs' own order (0 drops a pair: padding); None: all 1.
    vary : callable, keyword-only
        Applied to the empty accumulator (a mesh's pcast; identity on one device).
    psum : callable, keyword-only
        Applied to the summed accumulator (a mesh's psum; identity on one device).

    Returns
    -------
    tuple of jax.Array
        ``out`` with every row written (same shapes and dtypes).

    Raises
    ------
    None of its own (traced code).

    Source: project addition (issue 28).
    """
    B = order.user_block if own_is_user else order.item_block
    perm = order.user_perm if own_is_user else order.item_perm
    ptr = (order.user_ptr if own_is_user else order.item_ptr).reshape(-1)
    n = int(n_pairs)
    c = max(1, min(int(chunk), n))
    n_own = out[0].shape[0]

    def block_body(b, out):
        first, hi = b * B, ptr[b + 1]

        def chunk_body(carry):
            start, acc = carry
            s0 = jnp.minimum(start, n - c)
            pos = s0 + jnp.arange(c)
            if perm is None:
                def take(x):
                    return jax.lax.dynamic_slice_in_dim(x, s0, c)
            else:
                idx = jax.lax.dynamic_slice_in_dim(perm, s0, c)

                def take(x):
                    return x[idx]
            m = ((pos >= start) & (pos < hi)).astype(dtype)
            m = m if weight is None else m * take(weight)
            own, w, g, X, V = pair_terms(take, m)
            local = jnp.where(m > 0, own - first, B)  # masked pairs: out of range, dropped
            return start + c, accumulate(acc, local, w, g, X, V)

        _, acc = jax.lax.while_loop(lambda cr: cr[0] < hi, chunk_body, (ptr[b], vary(zeros(B, K, dtype))))
        ids = first + jnp.arange(B)
        rows = finish(psum(acc), jnp.minimum(ids, n_own - 1))  # the last block may reach past n_own
        target = jnp.where(ids < n_own, ids, n_own)
        return tuple(o.at[target].set(r, mode="drop") for o, r in zip(out, rows))

    return jax.lax.fori_loop(0, ptr.shape[0] - 1, block_body, tuple(out))
