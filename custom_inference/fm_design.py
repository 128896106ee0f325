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
from typing import Sequence

import jax
import numpy as np
import scipy.sparse as sp

__all__ = ["FMDesign", "greedy_blocks"]


def greedy_blocks(X: sp.spmatrix, group: np.ndarray) -> np.ndarray:
    """Colour the features so that no two features of one colour share a row.

    Parameters
    ----------
    X : scipy sparse matrix, shape (N, D)
    group : int array, shape (D,); colours never span groups.

    Returns
    -------
    int32 array, shape (D,): block index of each feature, numbered 0..B-1, blocks of
    group 0 first. Greedy colouring in feature order within each group (Welsh-Powell
    style without the sort); a one-hot group gets exactly one block.

    Raises nothing of its own (no checks); a ``group`` longer than D makes scipy raise IndexError.

    Source: project addition (module docstring: blocks of features that the coordinate-wise
    updates of ``004_90693a0965f06816.txt`` ch. 4 may update at once; groups as in eqs. 4.3-4.4).
    """
    Xb = sp.csc_matrix(X, copy=True)
    Xb.data = np.ones_like(Xb.data)
    block = np.empty(X.shape[1], dtype=np.int32)
    next_block = 0
    for g in np.unique(group):
        feats = np.flatnonzero(group == g)
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

    Attributes (array leaves)
    -------------------------
    rows : int32 (M,)   instance index n of each nonzero of X.
    cols : int32 (M,)   feature index l of each nonzero.
    values : float (M,) x_nl.
    y : float (N,)      responses.
    group : int32 (D,)  group c_l of each feature (0..G-1).
    block : int32 (D,)  update block of each feature (0..B-1), see the module docstring.
    order : int32 (M,)  nonzero positions sorted by block.

    Static (auxiliary) data: ``n_rows`` N, ``n_features`` D, ``n_groups`` G,
    ``block_ptr`` (tuple of B + 1 ints), ``group_names`` (tuple of G str).

    Build with `FMDesign.from_scipy`, which validates; the plain constructor does not.
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

        Parameters
        ----------
        X : scipy sparse matrix or dense array, shape (N, D), finite.
        y : array, shape (N,), finite.
        group : int array, shape (D,), values 0..G-1, every group non-empty.
        group_names : G names (default ``group0``, ...).
        dtype : float dtype of ``values`` and ``y``.

        Raises
        ------
        ValueError naming the field: shape mismatches, non-finite X or y, empty X, rows of X
        without any nonzero, group ids not 0..G-1 or an empty group, wrong number of names.
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
        block = greedy_blocks(sp.csr_matrix((values, (rows, cols)), shape=(N, D)), group)
        entry_block = block[cols]
        order = np.argsort(entry_block, kind="stable").astype(np.int32)
        ptr = np.concatenate([[0], np.cumsum(np.bincount(entry_block, minlength=int(block.max()) + 1))])
        return cls(rows, cols, values, y.astype(dtype), group.astype(np.int32), block, order,
                   int(N), int(D), G, tuple(int(p) for p in ptr), names)

    @property
    def n_blocks(self) -> int:
        return len(self.block_ptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    def block_groups(self) -> np.ndarray:
        """Group of each block, int array (B,)."""
        out = np.empty(self.n_blocks, dtype=np.int32)
        out[np.asarray(self.block)] = np.asarray(self.group)
        return out

    def to_scipy(self) -> sp.csr_matrix:
        """X as a CSR matrix (N, D)."""
        return sp.csr_matrix((np.asarray(self.values), (np.asarray(self.rows), np.asarray(self.cols))),
                             shape=(self.n_rows, self.n_features))

    def to_dense(self) -> np.ndarray:
        """X as a dense (N, D) array: for brute-force references in tests only."""
        return self.to_scipy().toarray()

    def __repr__(self) -> str:
        return (f"FMDesign(N={self.n_rows}, D={self.n_features}, nnz={self.nnz}, "
                f"groups={list(self.group_names)}, blocks={self.n_blocks})")
