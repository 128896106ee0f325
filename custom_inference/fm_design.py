"""The data container of the factorization-machine solvers: a sparse design X and responses y.

A factorization machine (``004_90693a0965f06816.txt`` eq. 2.17) sees N instances, each a
sparse feature row ``x_n`` of length D, grouped into feature groups (user ids, item ids,
genres, ...; the ``c_i`` of eqs. 4.3-4.4). `FMDesign` stores the nonzeros of X once, in
COO form, plus what every coordinate-wise solver (MCMC-FM, VBFM, OVBFM) needs to update
many features at once and still be exact:

- ``group[l]``: the group of feature l (priors and hyperparameters are per group);
- ``block[l]``: a colour such that two features of one block never both appear in one
  row. The complete conditional (or CAVI update) of ``w_l`` or ``v_lk`` depends on the
  other features only through the rows where feature l is nonzero, so all features of a
  block can be updated at once and the result is the same as updating them one after
  the other. A one-hot group (user ids, item ids) is a single block; a multi-hot group
  (genres) is split by greedy colouring of its co-occurrence graph. Blocks never span
  groups.
- ``order`` and the static ``block_ptr``: the nonzeros sorted by block, so block b owns
  ``order[block_ptr[b]:block_ptr[b + 1]]`` (a static slice inside jitted code).

Everything scales with the number of nonzeros M of X, never with N x D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

__all__ = ["FMDesign", "greedy_blocks", "ShardedFMDesign", "shard_fm_design", "fm_yhat"]


def fm_yhat(w0, w, V, rows, cols, values, n_rows: int):
    """yhat (N,) of the factorization machine over the COO nonzeros of X, one factor at a time.

    yhat_n = w0 + sum_l x_nl w_l + 1/2 sum_k ((sum_l x_nl v_lk)^2 - sum_l (x_nl v_lk)^2) (eq. 2.17 in
    the O(nnz K) form of eq. 4.22). The sum over k runs in a `lax.scan` over the columns of V, so the
    largest temporaries are (M,) and (N,): memory O(M + N + D K), never (M, K) or (N, K) (the
    all-factors form held x_nl v_l. (M, K), its square and q (N, K): 1.4 kB per instance at K = 50,
    float32, two nonzeros a row; issue 28). Differentiable (reverse mode through the scan).

    Parameters
    ----------
    w0 : jax.Array, shape (), float
        Global bias.
    w : jax.Array, shape (D,), float
        Feature biases.
    V : jax.Array, shape (D, K), float
        Factor loadings.
    rows, cols : jax.Array, shape (M,), int
        Row n and feature l of each nonzero of X.
    values : jax.Array, shape (M,), float
        x_nl.
    n_rows : int, static
        N.

    Returns
    -------
    jax.Array, shape (N,), the result dtype of the parameters and ``values``
        yhat.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17, computed as eq. 4.22 factor by factor (project
    addition: the loop order).
    """
    lin = jax.ops.segment_sum(values * w[cols], rows, num_segments=n_rows)

    def factor(pair, vk):
        xv = values * vk[cols]
        qk = jax.ops.segment_sum(xv, rows, num_segments=n_rows)
        s2k = jax.ops.segment_sum(xv * xv, rows, num_segments=n_rows)
        return pair + (qk * qk - s2k), None

    pair, _ = jax.lax.scan(factor, jnp.zeros((n_rows,), lin.dtype), jnp.asarray(V).T)
    return w0 + lin + 0.5 * pair


def greedy_blocks(X: sp.spmatrix, group: np.ndarray) -> np.ndarray:
    """Colour the features so that no two features of one colour share a row.

    Parameters
    ----------
    X : scipy.sparse matrix, shape (N, D)
        The design (only its pattern of nonzeros is used).
    group : array_like, shape (D,), int
        Group of each feature; colours never span groups.

    Returns
    -------
    numpy.ndarray, shape (D,), int32
        Block index of each feature, numbered 0..B-1, blocks of group 0 first (groups in sorted
        order). Greedy colouring in feature order within each group (Welsh-Powell style without
        the sort); a one-hot group gets exactly one block.

    A group with at most one nonzero in every row (one-hot ids) has no co-occurring pair, so the
    colouring gives all its features colour 0: that is found from the per-row counts, without the
    co-occurrence product and the loop over the group's features (at 1e6 instances of Netflix's
    shape the two took 26 s and 81 bytes per instance; issue 28).

    Raises
    ------
    None of its own (no checks); a ``group`` longer than D, or too short for a column that holds a
    nonzero, makes numpy raise IndexError.

    Source: project addition (module docstring: blocks of features that the coordinate-wise
    updates of ``004_90693a0965f06816.txt`` ch. 4 may update at once; groups as in eqs. 4.3-4.4).
    """
    coo = sp.coo_matrix(X)
    group = np.asarray(group)
    entry_group = group[coo.col]
    Xb = None  # the 0/1 pattern, built for the first group that needs the co-occurrence counts
    block = np.empty(X.shape[1], dtype=np.int32)
    next_block = 0
    for g in np.unique(group):
        feats = np.flatnonzero(group == g)
        if np.bincount(coo.row[entry_group == g], minlength=X.shape[0]).max(initial=0) <= 1:
            block[feats] = next_block  # no row holds two features of g: one colour
            next_block += 1 if len(feats) else 0
            continue
        if Xb is None:
            Xb = sp.csc_matrix(X, copy=True)
            Xb.data = np.ones_like(Xb.data)
        co = (Xb[:, feats].T @ Xb[:, feats]).tocsr()  # (D_g, D_g) co-occurrence counts
        colour = -np.ones(len(feats), dtype=np.int64)
        for a in range(len(feats)):
            nbrs = co.indices[co.indptr[a]:co.indptr[a + 1]]
            used = set(colour[nbrs[nbrs != a]].tolist())
            c = 0
            while c in used:
                c += 1
            colour[a] = c
        block[feats] = next_block + colour
        next_block += int(colour.max()) + 1 if len(feats) else 0
    return block


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class FMDesign:
    """Sparse FM design matrix X (N x D), responses y, feature groups and exact update blocks.

    Build with `FMDesign.from_scipy` (any X) or `FMDesign.from_ids` (the one-hot user | item design, in
    O(N) memory), which validate; the plain constructor does not. A frozen dataclass and a JAX
    pytree: the arrays are leaves (numpy or jax), the rest static (auxiliary) data.

    Parameters
    ----------
    rows : array, shape (M,), int32
        Instance index n of each nonzero of X.
    cols : array, shape (M,), int32
        Feature index l of each nonzero.
    values : array, shape (M,), float
        x_nl.
    y : array, shape (N,), float
        Responses.
    group : array, shape (D,), int32
        Group c_l of each feature (0..G-1; the c_i of eqs. 4.3-4.4).
    block : array, shape (D,), int32
        Update block of each feature (0..B-1), see the module docstring.
    order : array, shape (M,), int32
        Nonzero positions sorted by block.
    n_rows : int
        N.
    n_features : int
        D.
    n_groups : int
        G.
    block_ptr : tuple of int
        B + 1 offsets into ``order``: block b owns ``order[block_ptr[b]:block_ptr[b + 1]]``.
    group_names : tuple of str
        G names.

    Raises
    ------
    None of its own (the constructor does not check its fields).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17, fig. 2.1 (X, y and the groups c_i of eqs. 4.3-4.4);
    project addition (the update blocks and their order, module docstring).
    """

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    y: np.ndarray
    group: np.ndarray
    block: np.ndarray
    order: np.ndarray
    n_rows: int
    n_features: int
    n_groups: int
    block_ptr: tuple
    group_names: tuple

    def tree_flatten(self):
        leaves = (self.rows, self.cols, self.values, self.y, self.group, self.block, self.order)
        return leaves, (self.n_rows, self.n_features, self.n_groups, self.block_ptr, self.group_names)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @classmethod
    def from_scipy(
        cls,
        X,
        y,
        group: Sequence[int],
        *,
        group_names: Sequence[str] | None = None,
        dtype=np.float64,
    ) -> "FMDesign":
        """Validate a design and build the container.

        Duplicate entries of X are summed and explicit zeros dropped; the nonzeros are stored
        row-major (sorted by row, then column).

        Parameters
        ----------
        X : scipy.sparse matrix or array_like, shape (N, D)
            Finite feature values.
        y : array_like, shape (N,)
            Finite responses.
        group : array_like, shape (D,), int
            Values 0..G-1, every group non-empty.
        group_names : sequence of str, keyword-only, optional
            G names (default ``group0``, ...).
        dtype : numpy dtype, keyword-only
            Float dtype of ``values`` and ``y`` (default float64).

        Returns
        -------
        FMDesign
            Fields in the class docstring; blocks by `greedy_blocks`.

        Raises
        ------
        ValueError
            Naming the field: shape mismatches, non-finite X or y, empty X, rows of X without any
            nonzero, group ids not integers or not 0..G-1 or an empty group, wrong number of names.

        Source: ``004_90693a0965f06816.txt`` fig. 2.1 (the design); project addition (the checks and
        blocks).
        """
        X = sp.coo_matrix(X)
        N, D = X.shape
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != N:
            raise ValueError(f"y: expected shape ({N},) to match X's {N} rows, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("y: contains NaN or infinite values")
        if X.nnz == 0:
            raise ValueError("X: has no nonzero entries")
        if not np.all(np.isfinite(X.data)):
            raise ValueError("X: contains NaN or infinite values")
        X.sum_duplicates()
        X.eliminate_zeros()
        empty = np.flatnonzero(np.bincount(X.row, minlength=N) == 0)
        if empty.size:
            raise ValueError(f"X: rows without any nonzero feature, e.g. {empty[:5].tolist()}")
        group = np.asarray(group)
        if group.shape != (D,) or not np.issubdtype(group.dtype, np.integer):
            raise ValueError(f"group: expected an integer array of shape ({D},), got {group.dtype} {group.shape}")
        G = int(group.max()) + 1 if D else 0
        if group.min() < 0 or np.setdiff1d(np.arange(G), group).size:
            raise ValueError(f"group: ids must be 0..G-1 with every group used, got {np.unique(group).tolist()}")
        names = tuple(group_names) if group_names is not None else tuple(f"group{g}" for g in range(G))
        if len(names) != G:
            raise ValueError(f"group_names: expected {G} names, got {len(names)}")
        order_rows = np.lexsort((X.col, X.row))
        rows = X.row[order_rows].astype(np.int32)
        cols = X.col[order_rows].astype(np.int32)
        values = X.data[order_rows].astype(dtype)
        block = greedy_blocks(sp.coo_matrix((values, (rows, cols)), shape=(N, D)), group)
        entry_block = block[cols]
        order = np.argsort(entry_block, kind="stable").astype(np.int32)
        ptr = np.concatenate([[0], np.cumsum(np.bincount(entry_block, minlength=int(block.max()) + 1))])
        return cls(rows, cols, values, y.astype(dtype), group.astype(np.int32), block, order,
                   int(N), int(D), G, tuple(int(p) for p in ptr), names)

    @classmethod
    def from_ids(
        cls,
        rows,
        cols,
        values,
        shape,
        *,
        dtype=np.float64,
        group_names: Sequence[str] = ("user", "item"),
    ) -> "FMDesign":
        """The one-hot user | one-hot item design of N (user, item, response) triples, built in O(N).

        Instance n has exactly two nonzeros, x_(n, u_n) = 1 (group 0, users) and x_(n, I + i_n) = 1
        (group 1, items): plain MF with biases as a factorization machine (``004_90693a0965f06816.txt``
        eq. 2.17, fig. 2.1). Every field equals `from_scipy` on the same X, y and groups (tested), but
        nothing is sorted: the row-major nonzeros are (n, u_n), (n, I + i_n) in that order; each group
        is one block (one nonzero per row), so ``order`` (nonzeros sorted by block, stably) is the even
        positions then the odd ones and ``block_ptr`` is (0, N, 2N). Memory: the result (4 int32 or
        ``dtype`` arrays of 2N entries, y of N, group and block of I + J) plus one (N,) int32 temporary;
        no int64 copy of an N-sized array (`from_scipy` on the same data: ~215 bytes a triple in
        passing; float64 values and int64 indices, sums of duplicates and sorts).

        Parameters
        ----------
        rows : int array (N,), user index of each triple in 0..I-1 (int32 or int64).
        cols : int array (N,), item index of each triple in 0..J-1.
        values : real array (N,), the responses y, finite.
        shape : (I, J), two integers >= 1: D = I + J features. Users and items without a triple are
            allowed (their features have no nonzero).
        dtype : float dtype of ``values`` (the ones of X) and ``y``; float32 when the solver computes
            in float32, so that no float64 copy exists.
        group_names : the two group names (default ``("user", "item")``).

        Returns
        -------
        FMDesign with N rows and D = I + J features: rows, cols, order int32 (2N,), values ``dtype``
        (2N,) ones, y ``dtype`` (N,), group and block int32 (D,) (0 for users, 1 for items), two groups,
        two blocks.

        Raises
        ------
        ValueError naming the argument: ``shape`` not two integers >= 1; rows, cols or values not
        1-D or of different lengths; no triples (X would have no nonzero entries); an index out of
        range (naming the allowed range); NaN or infinite values (first entry named); a non-float
        ``dtype``; 2N or I + J beyond the int32 range; not two group names.
        TypeError: rows or cols not integers.

        Source: project addition (the ids design of ``004_90693a0965f06816.txt`` eq. 2.17 built without
        the generic path; issue 28).
        """
        if (not isinstance(shape, (tuple, list)) or len(shape) != 2
                or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or s < 1
                       for s in shape)):
            raise ValueError(f"shape: expected two integers >= 1 (n_users I, n_items J), got {shape!r}")
        I, J = int(shape[0]), int(shape[1])
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise ValueError(f"dtype: expected a float dtype (float32 or float64), got {dtype}")
        names = tuple(group_names)
        if len(names) != 2:
            raise ValueError(f"group_names: expected 2 names (users, items), got {len(names)}")
        arrays = {"rows": np.asarray(rows), "cols": np.asarray(cols), "values": np.asarray(values)}
        for name, arr in arrays.items():
            if arr.ndim != 1:
                raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
        rows, cols, values = arrays["rows"], arrays["cols"], arrays["values"]
        N = values.shape[0]
        if not rows.shape[0] == cols.shape[0] == N:
            raise ValueError(f"rows, cols and values must have the same length, got {rows.shape[0]}, "
                             f"{cols.shape[0]}, {N}")
        if N == 0:
            raise ValueError("values: no entries (rows, cols and values have length 0), so X would have no "
                             "nonzero entries")
        i32 = np.iinfo(np.int32).max
        if 2 * N > i32 or I + J > i32:
            raise ValueError(f"the design has 2N = {2 * N} nonzeros and I + J = {I + J} features; both must fit "
                             f"in int32 (at most {i32})")
        for name, arr, bound, what in (("rows", rows, I, "n_users I"), ("cols", cols, J, "n_items J")):
            if not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"{name}: expected integer indices (int32 or int64), got dtype {arr.dtype}")
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= bound:
                raise ValueError(f"{name}: index out of range: found [{lo}, {hi}], allowed [0, {bound - 1}] "
                                 f"({what} = {bound})")
        y = values.astype(dtype)  # a copy: the design never aliases the caller's array
        bad = ~np.isfinite(y)
        if bad.any():
            raise ValueError(f"values: {int(bad.sum())} NaN or infinite entries (first at entry "
                             f"{int(np.flatnonzero(bad)[0])}); the responses y must be finite")
        del bad
        # row-major nonzeros: (n, u_n) then (n, I + i_n); the int64 -> int32 casts happen element-wise
        # in the strided assignments (no N-sized int64 temporary)
        n_idx = np.arange(N, dtype=np.int32)
        r = np.empty(2 * N, np.int32)
        r[0::2] = n_idx
        r[1::2] = n_idx
        del n_idx
        c = np.empty(2 * N, np.int32)
        c[0::2] = rows
        c[1::2] = cols
        c[1::2] += np.int32(I)
        # nonzeros sorted by block (users = block 0 at the even positions, items = block 1 at the odd)
        order = np.empty(2 * N, np.int32)
        order[:N] = np.arange(0, 2 * N, 2, dtype=np.int32)
        order[N:] = np.arange(1, 2 * N, 2, dtype=np.int32)
        group = np.zeros(I + J, np.int32)
        group[I:] = 1
        return cls(r, c, np.ones(2 * N, dtype), y, group, group.copy(), order, int(N), I + J, 2, (0, int(N), 2 * int(N)),
                   names)

    @property
    def n_blocks(self) -> int:
        """B, the number of update blocks (``len(block_ptr) - 1``), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return len(self.block_ptr) - 1

    @property
    def nnz(self) -> int:
        """M, the number of stored nonzeros of X, an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.values.shape[0])

    def block_groups(self) -> np.ndarray:
        """The group of each update block (blocks never span groups).

        Returns
        -------
        numpy.ndarray, shape (B,), int32
            ``out[b]`` the group of the features of block b.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        out = np.empty(self.n_blocks, dtype=np.int32)
        out[np.asarray(self.block)] = np.asarray(self.group)
        return out

    def to_scipy(self) -> sp.csr_matrix:
        """X as a CSR matrix.

        Returns
        -------
        scipy.sparse.csr_matrix, shape (N, D), the dtype of ``values``
            X (duplicates, if a hand-built design has any, summed).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return sp.csr_matrix((np.asarray(self.values), (np.asarray(self.rows), np.asarray(self.cols))),
                             shape=(self.n_rows, self.n_features))

    def to_dense(self) -> np.ndarray:
        """X as a dense array: for brute-force references in tests only (N x D memory).

        Returns
        -------
        numpy.ndarray, shape (N, D), the dtype of ``values``
            X.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.to_scipy().toarray()

    def __repr__(self) -> str:
        return (f"FMDesign(N={self.n_rows}, D={self.n_features}, nnz={self.nnz}, "
                f"groups={list(self.group_names)}, blocks={self.n_blocks})")


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class ShardedFMDesign:
    """An `FMDesign` whose instances (rows of X) are split into equal contiguous ranges, one per
    device of a mesh axis (`shard_fm_design`); the features' arrays are replicated.

    ``n_rows`` is S B (the padded length of the per-row caches e, q); the real rows are 0..N-1
    (padding rows sit at the end, after the last real row). S devices, B rows per device, M_S
    nonzeros per device. A frozen dataclass and a JAX pytree (the seven arrays are leaves).

    Parameters
    ----------
    rows : jax.Array, shape (S M_S,), int32
        *Local* row (0..B-1) of each nonzero, device d's entries at d M_S.., in block order (block
        b at ``block_ptr[b]:block_ptr[b + 1]`` of them).
    cols : jax.Array, shape (S M_S,), int32
        Feature of each nonzero.
    values : jax.Array, shape (S M_S,), float
        x_nl, 0 at padding entries.
    y : jax.Array, shape (S B,), float
        Responses (0 at padding rows).
    weight : jax.Array, shape (S B,), float
        1 for the N real rows, 0 for padding rows.
    group, block : jax.Array, shape (D,), int32
        As in `FMDesign`, replicated.
    n_real : int
        N.
    rows_per_device : int
        B.
    n_features : int
        D.
    n_groups : int
        G.
    block_ptr : tuple of int
        The per-device offsets of the blocks (B_blocks + 1 ints).
    full : tuple of bool
        Per block: one nonzero in every row (on every device).
    group_names : tuple of str
        G names.
    mesh : jax.sharding.Mesh
        The device mesh.
    axis : str
        The mesh axis the rows are split over.

    Raises
    ------
    None of its own (built by `shard_fm_design`, which checks).

    Source: project addition (issue 14, "sharded over devices").
    """

    rows: Any
    cols: Any
    values: Any
    y: Any
    weight: Any
    group: Any
    block: Any
    n_real: int
    rows_per_device: int
    n_features: int
    n_groups: int
    block_ptr: tuple
    full: tuple
    group_names: tuple
    mesh: Any
    axis: str

    def tree_flatten(self):
        return ((self.rows, self.cols, self.values, self.y, self.weight, self.group, self.block),
                (self.n_real, self.rows_per_device, self.n_features, self.n_groups, self.block_ptr, self.full,
                 self.group_names, self.mesh, self.axis))

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def n_shards(self) -> int:
        """S, the number of devices on the mesh axis, an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.mesh.shape[self.axis])

    @property
    def n_rows(self) -> int:
        """S B, the padded number of rows (length of the caches e and q), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.n_shards * self.rows_per_device

    @property
    def n_blocks(self) -> int:
        """The number of update blocks (``len(block_ptr) - 1``), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return len(self.block_ptr) - 1

    @property
    def nnz(self) -> int:
        """The padded total S M_S, an int (the real number of nonzeros is not kept).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.values.shape[0])

    def astype(self, dtype) -> "ShardedFMDesign":
        """A copy with values, y and weight as ``dtype`` (sharding kept).

        Parameters
        ----------
        dtype : numpy dtype
            float32 or float64 (not checked).

        Returns
        -------
        ShardedFMDesign
            Same fields; ``values``, ``y``, ``weight`` cast.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return ShardedFMDesign(self.rows, self.cols, self.values.astype(dtype), self.y.astype(dtype),
                               self.weight.astype(dtype), self.group, self.block, self.n_real,
                               self.rows_per_device, self.n_features, self.n_groups, self.block_ptr, self.full,
                               self.group_names, self.mesh, self.axis)

    def local(self, rows, cols, values, y) -> FMDesign:
        """One device's part as an `FMDesign` (inside `jax.shard_map`, from the local arrays).

        Parameters
        ----------
        rows, cols : jax.Array, shape (M_S,), int32
            The device's block of ``self.rows`` (local rows 0..B-1) and ``self.cols``.
        values : jax.Array, shape (M_S,), float
            The device's block of ``self.values``.
        y : jax.Array, shape (B,), float
            The device's block of ``self.y``.

        Returns
        -------
        FMDesign
            B rows, its nonzeros in block order (``order`` the identity), the replicated group and
            block, ``block_ptr`` the per-device offsets.

        Raises
        ------
        None of its own (no checks: traced code).

        Source: project addition.
        """
        return FMDesign(rows, cols, values, y, self.group, self.block, jnp.arange(rows.shape[0], dtype=jnp.int32),
                        self.rows_per_device, self.n_features, self.n_groups, self.block_ptr, self.group_names)

    def __repr__(self) -> str:
        return (f"ShardedFMDesign(N={self.n_real}, D={self.n_features}, shards={self.n_shards}, "
                f"rows/device={self.rows_per_device}, nnz/device={self.block_ptr[-1]}, blocks={self.n_blocks})")


def shard_fm_design(design: FMDesign, mesh, *, axis: str = "nnz") -> ShardedFMDesign:
    """Split the instances of ``design`` over the mesh axis ``axis``: device d gets rows
    d B .. (d + 1) B - 1 (B = ceil(N / S)) and their nonzeros, block by block.

    Padding, all neutral in MCMC-FM's sums (`custom_inference.fm_mcmc`, "Sharded"): rows N .. S B - 1
    (y = 0, weight 0); in a full block (one nonzero per row, e.g. a one-hot group) every padding
    row gets one entry of value 0, so the block stays full on every device; other blocks are padded
    to the largest per-device count with value-0 entries at local row 0 (one more where that count
    would equal B, so that a padded block is never mistaken for a full one). An entry of value 0
    adds 0 to every sum over a feature's nonzeros and changes no cache.

    Parameters
    ----------
    design : FMDesign (N x D), numpy or jax arrays.
    mesh : jax.sharding.Mesh with an axis ``axis`` (``custom_inference.sharding.nnz_mesh``).
    axis : str, default ``"nnz"``.

    Returns
    -------
    ShardedFMDesign: per-entry and per-row arrays sharded ``PartitionSpec(axis)``, group and block
    replicated; values keep the design's dtype.

    Raises
    ------
    TypeError: ``design`` not an FMDesign. ValueError: ``mesh`` without an axis ``axis``.

    Source: project addition (issue 14, "sharded over devices"; the blocks of this module).
    """
    from jax.sharding import NamedSharding, PartitionSpec

    if not isinstance(design, FMDesign):
        raise TypeError(f"design must be an FMDesign, got {type(design).__name__}")
    if axis not in getattr(mesh, "axis_names", ()):
        raise ValueError(f"mesh has no axis {axis!r} (its axes: {tuple(getattr(mesh, 'axis_names', ()))})")
    S = int(mesh.shape[axis])
    N, D = int(design.n_rows), int(design.n_features)
    B = max(-(-N // S), 1)
    rows, cols, values = (np.asarray(a) for a in (design.rows, design.cols, design.values))
    order, block = np.asarray(design.order), np.asarray(design.block)
    dtype = values.dtype
    per_dev = [[] for _ in range(S)]  # (rows_local, cols, values) per block
    sizes, full = [], []
    for b in range(design.n_blocks):
        idx = order[design.block_ptr[b]:design.block_ptr[b + 1]]
        r, c, x = rows[idx], cols[idx], values[idx]
        is_full = idx.size == N
        feat0 = int(np.flatnonzero(block == b)[0])
        parts = []
        for d in range(S):
            sel = (r >= d * B) & (r < (d + 1) * B)
            pr, pc, px = r[sel] - d * B, c[sel], x[sel]
            if is_full:  # padding rows of this device get a value-0 entry: rows 0..B-1 in order
                extra = np.arange(pr.size, B)
                pr = np.concatenate([pr, extra])
                pc = np.concatenate([pc, np.full(extra.size, feat0)])
                px = np.concatenate([px, np.zeros(extra.size, dtype)])
            parts.append((pr, pc, px))
        m = max(p[0].size for p in parts)
        if not is_full and m == B:
            m += 1
        for d, (pr, pc, px) in enumerate(parts):
            pad = m - pr.size
            per_dev[d].append((np.concatenate([pr, np.zeros(pad, pr.dtype)]),
                               np.concatenate([pc, np.full(pad, feat0)]), np.concatenate([px, np.zeros(pad, dtype)])))
        sizes.append(m)
        full.append(bool(is_full))
    ptr = tuple(int(p) for p in np.concatenate([[0], np.cumsum(sizes)]))
    def cat(i, t):  # device by device, block by block
        return np.concatenate([np.concatenate([blk[i] for blk in per_dev[d]]) for d in range(S)]).astype(t)

    y = np.zeros(S * B, dtype)
    y[:N] = np.asarray(design.y)
    weight = np.zeros(S * B, dtype)
    weight[:N] = 1
    host = {"rows": cat(0, np.int32), "cols": cat(1, np.int32), "values": cat(2, dtype), "y": y, "weight": weight}
    sharded = NamedSharding(mesh, PartitionSpec(axis))
    replicated = NamedSharding(mesh, PartitionSpec())
    with jax.enable_x64(dtype == np.float64):
        placed = {k: jax.make_array_from_callback(a.shape, sharded, lambda index, a=a: a[index])
                  for k, a in host.items()}
        grp = jax.device_put(np.asarray(design.group, np.int32), replicated)
        blk = jax.device_put(block.astype(np.int32), replicated)
    return ShardedFMDesign(placed["rows"], placed["cols"], placed["values"], placed["y"], placed["weight"], grp, blk,
                           N, B, D, int(design.n_groups), ptr, tuple(full), tuple(design.group_names), mesh, axis)
