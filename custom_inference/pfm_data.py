"""NPFM / PPFM data container (seed 004 ch. 5): the count rows of a factorization-machine design,
their feature lists padded to a fixed width, and the checks on counts and features that
`custom_inference.pfm` runs before any computation. Split from `custom_inference.pfm`, which
imports every name (`pfm.PFMData` is the public spelling).

Source: ``004_90693a0965f06816.txt`` ch. 5 (the FM feature layout of ch. 2: eq. 2.17, fig. 2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import scipy.sparse as sp

from .fm_design import FMDesign, greedy_blocks


def _check_counts(y, name="y"):
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    if np.any(y < 0):
        raise ValueError(f"{name}: counts must be >= 0, got min {y.min()}")
    if np.any(y != np.round(y)):
        raise ValueError(f"{name}: counts must be integers, got e.g. {y[y != np.round(y)][:3].tolist()}")
    return y


def _check_features(X, name):
    X = sp.csr_matrix(X, dtype=np.float64)
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    if X.nnz and np.any(X.data < 0):
        raise ValueError(f"{name}: feature values must be >= 0 (Poisson rates), got min {X.data.min()}")
    X.eliminate_zeros()
    return X


def _padded(X: sp.csr_matrix, width: int | None = None):
    """Row-padded (feature index, value) tables (R, F) of a CSR matrix; padding has value 0."""
    X = sp.csr_matrix(X)
    R = X.shape[0]
    nnz_row = np.diff(X.indptr)
    F = int(max(1, nnz_row.max() if R else 1)) if width is None else int(width)
    feat = np.zeros((R, F), np.int32)
    val = np.zeros((R, F), np.float64)
    pos = np.arange(X.nnz) - np.repeat(X.indptr[:-1], nnz_row)
    rr = np.repeat(np.arange(R), nnz_row)
    feat[rr, pos] = X.indices
    val[rr, pos] = X.data
    return feat, val


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class PFMData:
    r"""Training data of a Poisson FM in the form the samplers need (no I x J array).

    Build with `from_matrix` (user-item counts with optional side features) or `from_design` (any
    `FMDesign`, observed rows only); both validate. A frozen dataclass and a JAX pytree: the arrays
    are leaves, the rest static. N_L listed rows, F features per listed row (padded), T units, D
    features, E = I + J entities, Fe features per entity row.

    Parameters
    ----------
    row_feat : numpy.ndarray, shape (N_L, F), int32
        Features of each *listed* row (padding: feature 0, value 0).
    row_val : numpy.ndarray, shape (N_L, F), float
        Their values x_ni >= 0.
    row_y : numpy.ndarray, shape (N_L,), float
        Counts of the listed rows.
    row_weight : numpy.ndarray, shape (N_L,), float
        c_n: how often the row enters the sums over training rows on top of the grid: +1
        (``zeros="observed"``: every listed row is a training row), 0 (a y > 0 cell of the grid),
        -1 (an excluded cell: subtracted from the grid's sums); 0 for padding rows.
    unit_row : numpy.ndarray, shape (T,), int32
        Listed row of each unit of count (T = sum of y, or more with padding).
    unit_weight : numpy.ndarray, shape (T,), float
        1 for a real unit, 0 for padding (see ``pad_units`` of `from_matrix`).
    x_sum : numpy.ndarray, shape (D,), float
        X_i = sum over training rows of x_ni (constant).
    ent_feat : numpy.ndarray, shape (E, Fe), int32
        Features of the E = I + J entities (users then items) in ``zeros="all"`` mode; (0, 1) otherwise.
    ent_val : numpy.ndarray, shape (E, Fe), float
        Their values; (0, 1) outside "all" mode.
    ent_partners : numpy.ndarray, shape (E,), float
        J for a user, I for an item; (0,) outside "all" mode.
    block : numpy.ndarray, shape (D,), int32
        Update block of each feature (`fm_design.greedy_blocks`).
    n_features : int
        D.
    n_users, n_items : int
        I and J ("all" mode); 0 in "observed" mode.
    grid : bool
        True in "all" mode (every cell of the I x J grid is a training row).
    n_train : float
        N, the number of training rows.
    n_blocks : int
        Number of update blocks, ``max(block) + 1``.
    n_units : int
        T.
    zeros : str
        "all" or "observed" (see `from_matrix`).
    group_names : tuple of str
        One name per feature group.
    weighted_rows : numpy.ndarray, shape (M,), int32, or None
        The listed rows with c_n != 0 (``zeros="all"``: the excluded cells; empty without
        exclusions), so that the exposures skip the y > 0 cells whose c_n = 0 contributes exactly
        nothing; None (``zeros="observed"``, or a container built without it): every listed row enters.
    side : numpy.ndarray, shape (D,), float, or None
        +1 for a feature of the user side (user ids, user side features), -1 for the item side, 0
        for a feature in no entity row (`from_matrix`); None (`from_design`: sides unknown).
    bipartite : bool
        True when every pair term of every row joins a user-side and an item-side feature
        (`from_matrix` with every entity row holding at most one feature, i.e. ids only; the PPFM
        scale move of `custom_inference.pfm_scale` needs it).

    Raises
    ------
    None of its own (the constructor does not check its fields; `from_matrix` and `from_design` do).

    Source: ``004_90693a0965f06816.txt`` ch. 5 (the training rows of eq. 5.6 in the feature layout of
    fig. 2.1); project addition (the padded tables, the grid of zeros and the row weights).
    """

    row_feat: np.ndarray
    row_val: np.ndarray
    row_y: np.ndarray
    row_weight: np.ndarray
    unit_row: np.ndarray
    unit_weight: np.ndarray
    x_sum: np.ndarray
    ent_feat: np.ndarray
    ent_val: np.ndarray
    ent_partners: np.ndarray
    block: np.ndarray
    n_features: int
    n_users: int
    n_items: int
    grid: bool
    n_train: float
    n_blocks: int
    n_units: int
    zeros: str
    group_names: tuple
    weighted_rows: np.ndarray | None = None
    side: np.ndarray | None = None
    bipartite: bool = False

    def tree_flatten(self):
        leaves = (self.row_feat, self.row_val, self.row_y, self.row_weight, self.unit_row, self.unit_weight, self.x_sum,
                  self.ent_feat, self.ent_val, self.ent_partners, self.block, self.weighted_rows, self.side)
        aux = (self.n_features, self.n_users, self.n_items, self.grid, self.n_train, self.n_blocks,
               self.n_units, self.zeros, self.group_names, self.bipartite)
        return leaves, aux

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children[:11], *aux[:9], children[11], children[12], aux[9])

    @property
    def n_listed(self) -> int:
        """N_L, the number of listed rows (``row_y.shape[0]``, padding included), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.row_y.shape[0])

    # -- constructors ----------------------------------------------------------------
    @classmethod
    def from_matrix(cls, y, *, user_features=None, user_groups=None, item_features=None, item_groups=None,
                    zeros: str = "all", exclude=None, group_names=None, dtype=np.float64, pad_rows: int = 0,
                    pad_units: int = 0) -> "PFMData":
        """Counts of an I x J user-item matrix, one-hot ids plus optional side features.

        Feature layout (D = I + J + D_u + D_v): user ids, item ids, user side, item side. Groups: 0
        users, 1 items, then the user-side groups, then the item-side groups (side group ids are
        renumbered densely in sorted order).

        Parameters
        ----------
        y : scipy.sparse matrix, numpy.ndarray or custom_inference.data.Observations, shape (I, J)
            Non-negative integer counts. In "all" mode only the nonzeros are listed; in "observed"
            mode every stored entry (explicit zeros too; for a dense array: every cell) is a training row.
        user_features : scipy.sparse matrix or array_like, shape (I, D_u), optional
            Non-negative user side features, e.g. one-hot age bucket, gender, occupation.
        user_groups : array_like, shape (D_u,), int, optional
            Group id >= 0 of each user side feature (default all 0).
        item_features : scipy.sparse matrix or array_like, shape (J, D_v), optional
            Non-negative item side features, e.g. genres.
        item_groups : array_like, shape (D_v,), int, optional
            Group id >= 0 of each item side feature (default all 0).
        zeros : {"all", "observed"}
            "all" (default; unobserved cells are y = 0 training rows, see module docstring) or
            "observed" (only stored entries are training rows).
        exclude : tuple of two array_like, each shape (M,), int, optional
            (users, items) of cells that are not training rows in "all" mode (held-out/missing
            cells, ch. 5.3.4); ignored in "observed" mode.
        group_names : sequence of str, optional
            One name per group (2 + the user-side and item-side groups); default "user", "item",
            "user_side<g>", "item_side<g>".
        dtype : numpy dtype
            float64 (default) or float32, the dtype of the float leaves.
        pad_rows, pad_units : int
            Pad the listed rows (weight 0, no features) and the count units (weight 0) up to at
            least these numbers, so that data sets of different sizes share one compiled sampler
            (SBC); padding changes no result. Default 0.

        Returns
        -------
        PFMData
            The validated container (fields in the class docstring).

        Raises
        ------
        ValueError
            Naming the field: negative, non-integer or non-finite counts; negative or non-finite
            features; a dense ``y`` not 2-D, an empty matrix, or no positive count to list; shape
            mismatches (features, groups, ``exclude``, ``group_names``); unknown ``zeros``; excluded
            cells that hold a positive count or lie outside the matrix.

        Source: ``004_90693a0965f06816.txt`` fig. 2.1 (ids and side features in one design), ch. 5.3.4
        (held-out cells); project addition (the grid of zeros and the row weights).
        """
        from .data import Observations

        if zeros not in ("all", "observed"):
            raise ValueError(f"zeros must be 'all' or 'observed', got {zeros!r}")
        if isinstance(y, Observations):
            I, J = y.n_rows, y.n_cols
            uu, jj, vv = np.asarray(y.rows), np.asarray(y.cols), np.asarray(y.values, np.float64)
        elif sp.issparse(y):
            c = sp.coo_matrix(y)
            I, J = c.shape
            uu, jj, vv = c.row, c.col, np.asarray(c.data, np.float64)
        else:
            arr = np.asarray(y, dtype=np.float64)
            if arr.ndim != 2:
                raise ValueError(f"y: expected a 2-D (I, J) matrix, got shape {arr.shape}")
            I, J = arr.shape
            if zeros == "observed":
                uu, jj = np.indices(arr.shape).reshape(2, -1)
            else:
                uu, jj = np.nonzero(arr)
            vv = arr[uu, jj]
        vv = _check_counts(vv, "y")
        if I < 1 or J < 1:
            raise ValueError(f"y: empty matrix of shape ({I}, {J})")
        Uf = _check_features(user_features if user_features is not None else sp.csr_matrix((I, 0)), "user_features")
        Vf = _check_features(item_features if item_features is not None else sp.csr_matrix((J, 0)), "item_features")
        if Uf.shape[0] != I:
            raise ValueError(f"user_features: expected {I} rows, got {Uf.shape[0]}")
        if Vf.shape[0] != J:
            raise ValueError(f"item_features: expected {J} rows, got {Vf.shape[0]}")
        Du, Dv = Uf.shape[1], Vf.shape[1]
        ug = np.zeros(Du, np.int64) if user_groups is None else np.asarray(user_groups, np.int64)
        ig = np.zeros(Dv, np.int64) if item_groups is None else np.asarray(item_groups, np.int64)
        if ug.shape != (Du,) or (Du and ug.min() < 0):
            raise ValueError(f"user_groups: expected ({Du},) non-negative ints, got {ug.shape}")
        if ig.shape != (Dv,) or (Dv and ig.min() < 0):
            raise ValueError(f"item_groups: expected ({Dv},) non-negative ints, got {ig.shape}")
        # renumber side groups densely
        ug_ids, ug_d = np.unique(ug, return_inverse=True) if Du else (np.array([], np.int64), ug)
        ig_ids, ig_d = np.unique(ig, return_inverse=True) if Dv else (np.array([], np.int64), ig)
        group = np.concatenate([np.zeros(I, np.int64), np.ones(J, np.int64), 2 + ug_d,
                                2 + len(ug_ids) + ig_d]).astype(np.int32)
        G = 2 + len(ug_ids) + len(ig_ids)
        names = tuple(group_names) if group_names is not None else (
            ("user", "item") + tuple(f"user_side{g}" for g in ug_ids) + tuple(f"item_side{g}" for g in ig_ids))
        if len(names) != G:
            raise ValueError(f"group_names: expected {G} names, got {len(names)}")
        D = I + J + Du + Dv
        # entity rows: user u -> [e_u, 0, Uf_u, 0]; item j -> [0, e_j, 0, Vf_j]
        users = sp.hstack([sp.identity(I, format="csr"), sp.csr_matrix((I, J)), Uf, sp.csr_matrix((I, Dv))]).tocsr()
        items = sp.hstack([sp.csr_matrix((J, I)), sp.identity(J, format="csr"), sp.csr_matrix((J, Du)), Vf]).tocsr()
        ent = sp.vstack([users, items]).tocsr()
        ent.sort_indices()
        side = np.zeros(D)
        side[ent[:I].indices] = 1.0
        side[ent[I:].indices] = -1.0  # disjoint column ranges by the layout above
        bipartite = bool(np.diff(ent.indptr).max() <= 1)  # a row's pairs: its user feature x its item feature
        if zeros == "all":
            pos = vv > 0
            lu, lj, ly = uu[pos], jj[pos], vv[pos]
            lw = np.zeros(lu.size)
            if exclude is not None:
                eu, ej = (np.asarray(a, np.int64) for a in exclude)
                if eu.shape != ej.shape or eu.ndim != 1:
                    raise ValueError("exclude: expected two 1-D int arrays (users, items) of equal length")
                if eu.size and (eu.min() < 0 or eu.max() >= I or ej.min() < 0 or ej.max() >= J):
                    raise ValueError("exclude: cell index out of range")
                key = np.unique(eu * J + ej)
                if np.intersect1d(key, lu.astype(np.int64) * J + lj).size:
                    raise ValueError("exclude: an excluded cell holds a positive training count")
                eu, ej = key // J, key % J
                lu, lj = np.concatenate([lu, eu]), np.concatenate([lj, ej])
                ly = np.concatenate([ly, np.zeros(eu.size)])
                lw = np.concatenate([lw, -np.ones(eu.size)])
            n_train = float(I) * J + lw.sum()
            blocks = greedy_blocks(ent, group)
            partners = np.concatenate([np.full(I, float(J)), np.full(J, float(I))])
            x_sum = np.asarray(ent.multiply(partners[:, None]).sum(axis=0)).ravel()
        else:
            lu, lj, ly = uu, jj, vv
            lw = np.ones(lu.size)
            n_train = float(lu.size)
            x_sum = None
            partners = None
        if ly.size == 0:
            raise ValueError("y: no listed rows (no positive counts)")
        rows_X = (ent[lu] + ent[I + lj]).tocsr() if lu.size else sp.csr_matrix((0, D))
        rows_X.sort_indices()
        if zeros == "observed":
            blocks = greedy_blocks(rows_X, group)
            x_sum = np.asarray(rows_X.sum(axis=0)).ravel()
        elif lu.size:
            x_sum = x_sum + np.asarray(rows_X.T @ lw).ravel()  # excluded cells (c_n = -1)
        row_feat, row_val = _padded(rows_X)
        if zeros == "all":
            ent_feat, ent_val = _padded(ent)
            ent_partners = partners
        else:
            ent_feat, ent_val, ent_partners = np.zeros((0, 1), np.int32), np.zeros((0, 1)), np.zeros(0)
        return cls._build(row_feat, row_val, ly, lw, x_sum, ent_feat, ent_val, ent_partners, blocks, D,
                          I if zeros == "all" else 0, J if zeros == "all" else 0, zeros == "all", n_train, zeros,
                          names, dtype, pad_rows, pad_units, side=side, bipartite=bipartite)

    @classmethod
    def from_design(cls, design: FMDesign, *, dtype=np.float64) -> "PFMData":
        """The rows of an `FMDesign` as the training rows (``zeros="observed"``).

        The design's update blocks are used.

        Parameters
        ----------
        design : FMDesign
            N rows; ``design.y`` must be non-negative integer counts and ``design.values`` >= 0.
        dtype : numpy dtype, keyword-only
            float64 (default) or float32, the dtype of the float leaves.

        Returns
        -------
        PFMData
            ``zeros="observed"``, N listed rows of weight 1, no entity rows, ``side`` None.

        Raises
        ------
        ValueError
            Naming the field: counts negative, non-integer or non-finite; feature values negative
            or non-finite.

        Source: ``004_90693a0965f06816.txt`` eq. 5.6 (the training rows (x_n, y_n)); project addition
        (the layout).
        """
        y = _check_counts(np.asarray(design.y), "y")
        X = _check_features(design.to_scipy(), "X (design.values)")
        X.sort_indices()
        row_feat, row_val = _padded(X)
        x_sum = np.asarray(X.sum(axis=0)).ravel()
        return cls._build(row_feat, row_val, y, np.ones(y.size), x_sum, np.zeros((0, 1), np.int32), np.zeros((0, 1)),
                          np.zeros(0), np.asarray(design.block), design.n_features, 0, 0, False, float(y.size),
                          "observed", tuple(design.group_names), dtype)

    @classmethod
    def _build(cls, row_feat, row_val, y, weight, x_sum, ent_feat, ent_val, ent_partners, block, D, I, J, grid,
               n_train, zeros, names, dtype, pad_rows=0, pad_units=0, side=None, bipartite=False):
        dtype = np.dtype(dtype)
        extra = max(0, int(pad_rows) - y.size)
        if extra:
            row_feat = np.concatenate([row_feat, np.zeros((extra, row_feat.shape[1]), row_feat.dtype)])
            row_val = np.concatenate([row_val, np.zeros((extra, row_val.shape[1]))])
            y, weight = np.concatenate([y, np.zeros(extra)]), np.concatenate([weight, np.zeros(extra)])
        counts = np.round(y).astype(np.int64)
        unit_row = np.repeat(np.arange(y.size), np.maximum(counts, 0)).astype(np.int32)
        unit_weight = np.ones(unit_row.size)
        extra = max(0, int(pad_units) - unit_row.size)
        if extra:
            unit_row = np.concatenate([unit_row, np.zeros(extra, np.int32)])
            unit_weight = np.concatenate([unit_weight, np.zeros(extra)])
        weighted_rows = np.flatnonzero(np.asarray(weight) != 0).astype(np.int32) if grid else None
        return cls(row_feat.astype(np.int32), row_val.astype(dtype), y.astype(dtype), weight.astype(dtype), unit_row,
                   unit_weight.astype(dtype),
                   np.asarray(x_sum, np.float64).astype(dtype), ent_feat.astype(np.int32), ent_val.astype(dtype),
                   np.asarray(ent_partners, np.float64).astype(dtype), np.asarray(block, np.int32), int(D), int(I),
                   int(J), bool(grid), float(n_train), int(np.max(block)) + 1, int(unit_row.size), zeros, tuple(names),
                   weighted_rows, None if side is None else np.asarray(side, np.float64).astype(dtype), bool(bipartite))

    # -- helpers ---------------------------------------------------------------------
    def pair_rows(self, users, items):
        """Padded feature tables of (user, item) pairs, for predictions; "all" mode only.

        Parameters
        ----------
        users, items : array_like, shape (P,), int
            User indices in [0, I) and item indices in [0, J) of the P pairs.

        Returns
        -------
        feat : numpy.ndarray, shape (P, 2 Fe), int32
            The user's entity features, then the item's (padding: feature 0, value 0).
        val : numpy.ndarray, shape (P, 2 Fe), the float dtype of ``ent_val``
            Their values.

        Raises
        ------
        ValueError
            Data not built with ``from_matrix(..., zeros="all")`` (no entity rows).
        IndexError
            A user index outside [0, I) or an item index outside [0, J).

        Source: ``004_90693a0965f06816.txt`` fig. 2.1 (a pair's row is its user's and item's features).
        """
        if not self.grid:
            raise ValueError("pair_rows needs data built with from_matrix(..., zeros='all')")
        u = np.asarray(users, np.int64)
        j = np.asarray(items, np.int64)
        for name, idx, n in (("user", u, self.n_users), ("item", j, self.n_items)):
            if idx.size and (idx.min() < 0 or idx.max() >= n):  # a negative index would wrap silently
                raise IndexError(f"pair_rows: {name} indices must be in [0, {n}), got {idx.min()} .. {idx.max()}")
        ef, ev = np.asarray(self.ent_feat), np.asarray(self.ent_val)
        return (np.concatenate([ef[u], ef[self.n_users + j]], axis=1),
                np.concatenate([ev[u], ev[self.n_users + j]], axis=1))

    def astype(self, dtype) -> "PFMData":
        """A copy with float leaves in ``dtype``.

        Parameters
        ----------
        dtype : numpy dtype
            float32 or float64 (not checked).

        Returns
        -------
        PFMData
            Same fields; ``row_val``, ``row_y``, ``row_weight``, ``unit_weight``, ``x_sum``,
            ``ent_val``, ``ent_partners`` and ``side`` in ``dtype``.

        Raises
        ------
        TypeError
            ``dtype`` not a numpy dtype (numpy's).

        Source: project addition.
        """
        d = np.dtype(dtype)
        return PFMData(self.row_feat, np.asarray(self.row_val, d), np.asarray(self.row_y, d),
                       np.asarray(self.row_weight, d), self.unit_row, np.asarray(self.unit_weight, d),
                       np.asarray(self.x_sum, d), self.ent_feat,
                       np.asarray(self.ent_val, d), np.asarray(self.ent_partners, d), self.block, self.n_features,
                       self.n_users, self.n_items, self.grid, self.n_train, self.n_blocks, self.n_units, self.zeros,
                       self.group_names, self.weighted_rows,
                       None if self.side is None else np.asarray(self.side, d), self.bipartite)

    def __repr__(self) -> str:
        return (f"PFMData(D={self.n_features}, listed={self.n_listed}, units={self.n_units}, zeros={self.zeros!r}, "
                f"N_train={self.n_train:g}, blocks={self.n_blocks})")
