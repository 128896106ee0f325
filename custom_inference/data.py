"""The one data container the solvers need: the observed entries of an I x J matrix.

`Observations` holds a users-by-items matrix in coordinate (COO) form: only the
observed (for count models: nonzero) entries are stored, so every solver's work
scales with N, the number of stored entries, never with I x J. Rows are users
(index ``u`` in the HPF seed, ``i`` in the thesis), columns are items.

The container is a JAX pytree whose array leaves are ``rows``, ``cols`` and
``values``; the shape ``(n_rows, n_cols)`` is static auxiliary data, so jitted
solvers specialise on it and never see it as a tracer.

All checks run in the constructor, before any computation, and raise a
`ValueError` that names the offending field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import jax
import numpy as np
import scipy.sparse as sp

Kind = Literal["count", "binary", "real"]

__all__ = ["Observations", "CountUnits", "check_observations"]


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class Observations:
    """Observed entries of a users-by-items matrix, in COO form.

    Build with `Observations.from_coo`, `Observations.from_scipy` or
    `Observations.from_dense`, which check everything. The plain constructor is
    also what JAX uses to rebuild the pytree (with tracers or device arrays as
    leaves), so it checks only what costs O(1): the shape (two integers >= 1)
    and, for host (numpy, list) leaves, that they are 1-D and of one length.
    A container built directly is checked in full (O(N): ids in range, finite
    values, dtypes, what the model's kind allows) by `validate`, which the front
    door (`validation.frontdoor.api.fit`) and the public solvers call before any
    computation.

    Parameters
    ----------
    rows : numpy.ndarray or jax.Array, shape (N,), int32
        Row (user) index of each entry, in ``0 .. n_rows - 1``.
    cols : numpy.ndarray or jax.Array, shape (N,), int32
        Column (item) index of each entry, in ``0 .. n_cols - 1``.
    values : numpy.ndarray or jax.Array, shape (N,), float32 or float64
        The observed value of each entry (a count for Poisson models).
    n_rows, n_cols : int >= 1
        The matrix shape I x J. Rows or columns without entries are allowed
        (their posterior is their prior), but the matrix may not be empty.

    Raises
    ------
    ValueError
        On construction: ``n_rows`` or ``n_cols`` not an integer >= 1; host (numpy, list, tuple)
        ``rows``, ``cols``, ``values`` not 1-D or of different lengths.

    Source: project addition.
    """

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    n_rows: int
    n_cols: int

    def __post_init__(self):
        for name in ("n_rows", "n_cols"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (the matrix shape I x J), got {value!r}")
        host = [(n, getattr(self, n)) for n in ("rows", "cols", "values")
                if isinstance(getattr(self, n), (np.ndarray, list, tuple))]
        if len(host) == 3:
            arrays = [(n, np.asarray(a) if not isinstance(a, np.ndarray) else a) for n, a in host]
            for name, arr in arrays:
                if arr.ndim != 1:
                    raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
            lengths = [arr.shape[0] for _, arr in arrays]
            if len(set(lengths)) != 1:
                raise ValueError(f"rows, cols and values must have the same length, got {', '.join(map(str, lengths))}")

    # -- pytree protocol -------------------------------------------------------
    def tree_flatten(self):
        """The JAX pytree protocol: the arrays are the leaves, the shape is static.

        Returns
        -------
        children : tuple
            (rows, cols, values).
        aux : tuple of int
            (n_rows, n_cols).

        Raises
        ------
        None.

        Source: project addition.
        """
        return (self.rows, self.cols, self.values), (self.n_rows, self.n_cols)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    # -- constructors ----------------------------------------------------------
    @classmethod
    def from_coo(
        cls,
        rows,
        cols,
        values,
        shape: tuple[int, int],
        *,
        kind: Kind = "count",
        dtype=np.float64,
        drop_zeros: bool = True,
    ) -> "Observations":
        """Validate and store COO triplets.

        Parameters
        ----------
        rows, cols : array_like, shape (N,), integer
            Row and column index of each entry.
        values : array_like, shape (N,)
            The entries. ``kind="count"``: non-negative integers (stored as
            floats); ``kind="binary"``: 0 or 1; ``kind="real"``: any finite value.
        shape : (int, int)
            ``(I, J)``, both >= 1.
        kind : {"count", "binary", "real"}
            Which values are legal.
        dtype : numpy float dtype
            Storage dtype of ``values`` (float32 for speed, float64 for validation).
        drop_zeros : bool
            Drop entries whose value is 0 (for count models they carry no
            information beyond the sum over all cells).

        Returns
        -------
        Observations
            rows, cols int32 (N',), values (N',) of ``dtype``, sorted row-major (N' <= N after
            dropping zeros).

        Raises
        ------
        ValueError
            Shape not two positive integers; ``rows``, ``cols``, ``values`` of
            different lengths or not 1-D; an index outside the shape or not an
            integer; a NaN or infinite value; a negative or non-integer count;
            a binary value outside {0, 1}; duplicate (row, col) pairs; no
            entries left.
        TypeError
            ``rows`` / ``cols`` neither integers nor integral floats (object, str);
            ``values`` not real numbers (object, str, complex, datetime);
            ``dtype`` other than float32 / float64 (float16 is refused: values
            of any real dtype are converted to float64, then stored as ``dtype``).

        Source: project addition (issue 10, input checks at every entry).
        """
        if len(shape) != 2 or any(int(s) != s or s < 1 for s in shape):
            raise ValueError(f"shape must be two positive integers (I, J), got {shape!r}")
        n_rows, n_cols = int(shape[0]), int(shape[1])
        rows = np.asarray(rows)
        cols = np.asarray(cols)
        values = np.asarray(values)
        for name, arr in (("rows", rows), ("cols", cols), ("values", values)):
            if arr.ndim != 1:
                raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
        if not (len(rows) == len(cols) == len(values)):
            raise ValueError(
                f"rows, cols and values must have the same length, got "
                f"{len(rows)}, {len(cols)}, {len(values)}"
            )
        for name, arr, bound in (("rows", rows, n_rows), ("cols", cols, n_cols)):
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                if arr.dtype != bool and not np.issubdtype(arr.dtype, np.floating):
                    raise TypeError(f"{name} must hold integer indices, got dtype {arr.dtype}")
                if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                    raise ValueError(f"{name} must hold integer indices")
                arr = arr.astype(np.int64)
            if arr.size and (arr.min() < 0 or arr.max() >= bound):
                raise ValueError(
                    f"{name} index out of range: found [{arr.min()}, {arr.max()}], "
                    f"allowed [0, {bound - 1}]"
                )
        rows = rows.astype(np.int64)
        cols = cols.astype(np.int64)
        if values.size and not (values.dtype == bool or np.issubdtype(values.dtype, np.integer)
                                or np.issubdtype(values.dtype, np.floating)):
            raise TypeError(f"values must be real numbers, got dtype {values.dtype}")
        if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"dtype (the storage of values) must be float32 or float64, got {np.dtype(dtype)}; "
                            "the solvers never compute in lower precision")
        values = values.astype(np.float64)
        if np.any(~np.isfinite(values)):
            raise ValueError(f"values contain {int(np.sum(~np.isfinite(values)))} NaN or infinite entries")
        if kind == "count":
            if np.any(values < 0):
                raise ValueError(f"values: counts must be non-negative, found {values.min()}")
            if np.any(values != np.round(values)):
                raise ValueError("values: counts must be integers (found a non-integer value)")
        elif kind == "binary":
            if np.any((values != 0) & (values != 1)):
                raise ValueError("values: binary data must be 0 or 1")
        elif kind != "real":
            raise ValueError(f"kind must be 'count', 'binary' or 'real', got {kind!r}")
        flat = rows * n_cols + cols
        if np.unique(flat).size != flat.size:
            raise ValueError("rows/cols: duplicate (row, col) pairs; sum or deduplicate them first")
        if drop_zeros:
            keep = values != 0
            rows, cols, values = rows[keep], cols[keep], values[keep]
        if values.size == 0:
            raise ValueError("values: the matrix has no (nonzero) entries")
        order = np.lexsort((cols, rows))  # row-major order: rows sorted, then cols
        return cls(
            rows[order].astype(np.int32),
            cols[order].astype(np.int32),
            values[order].astype(dtype),
            n_rows,
            n_cols,
        )

    @classmethod
    def from_scipy(cls, matrix, *, kind: Kind = "count", dtype=np.float64) -> "Observations":
        """From any `scipy.sparse` matrix or array of shape (I, J); no dense copy.

        Explicit zeros are dropped; duplicate entries are summed.

        Parameters
        ----------
        matrix : scipy.sparse matrix or array, shape (I, J)
            The data.
        kind : {"count", "binary", "real"}, default "count"
            Which values are legal (as `from_coo`).
        dtype : numpy.float32 or numpy.float64, default numpy.float64
            Storage dtype of ``values``.

        Returns
        -------
        Observations
            The checked container, entries in row-major order.

        Raises
        ------
        ValueError
            For input that is not a scipy.sparse object, and as `from_coo`.
        TypeError
            As `from_coo`.

        Source: project addition.
        """
        if not sp.issparse(matrix):
            raise ValueError(f"matrix must be a scipy.sparse matrix, got {type(matrix).__name__}")
        coo = sp.coo_matrix(matrix)
        coo.sum_duplicates()
        return cls.from_coo(coo.row, coo.col, coo.data, coo.shape, kind=kind, dtype=dtype)

    @classmethod
    def from_dense(cls, matrix, *, kind: Kind = "count", dtype=np.float64) -> "Observations":
        """From a small dense (I, J) array (tests, simulations); zeros are dropped.

        Parameters
        ----------
        matrix : array_like, shape (I, J)
            The data (real numbers).
        kind : {"count", "binary", "real"}, default "count"
            Which values are legal (as `from_coo`).
        dtype : numpy.float32 or numpy.float64, default numpy.float64
            Storage dtype of ``values``.

        Returns
        -------
        Observations
            The checked container of the nonzero cells, in row-major order.

        Raises
        ------
        ValueError
            ``matrix`` not 2-D or holding NaN or infinite entries, and as `from_coo`.
        TypeError
            As `from_coo`.

        Source: project addition.
        """
        matrix = np.asarray(matrix)
        if matrix.ndim != 2:
            raise ValueError(f"matrix must be 2-D, got shape {matrix.shape}")
        if np.any(~np.isfinite(matrix)):
            raise ValueError("matrix contains NaN or infinite entries")
        r, c = np.nonzero(matrix)
        return cls.from_coo(r, c, matrix[r, c], matrix.shape, kind=kind, dtype=dtype)

    # -- checks ----------------------------------------------------------------
    def validate(self, kind: Kind | None = "real", *, name: str = "data", float_only: bool = True) -> "Observations":
        """Check a container however it was built (directly, by a constructor, by a tree map).

        O(N) numpy work on the host, no JAX computation: run it before any compilation.

        Parameters
        ----------
        kind : {"count", "binary", "real"} or None
            What the model needs: ``"count"`` non-negative integers, ``"binary"`` values in
            {0, 1}, ``"real"`` any finite value; None checks only the structure.
        name : str
            The argument's name, used in the messages (``"data.values ..."``).
        float_only : bool
            Require ``values`` stored as float32 or float64 (what the solvers compute in);
            an integer, bool or float16 container is refused with the fix
            (``obs.astype(np.float64)``) rather than computed in low precision.

        Returns
        -------
        Observations
            ``self``, unchanged (for chaining).

        Raises
        ------
        TypeError
            ``self`` not an Observations; ``rows``/``cols`` not integer arrays; ``values``
            not numeric (object, str, complex, datetime) or, with ``float_only``, stored in a
            dtype other than float32/float64 (float16, integers, bool).
        ValueError
            Naming the field: the shape not two integers >= 1; arrays not 1-D or of
            different lengths; no entries (empty); an index outside the shape; a NaN or
            infinite value; a negative or non-integer count (``kind="count"``; the message
            names the transforms of `validation.frontdoor.api.fit`); a value outside {0, 1}
            (``kind="binary"``); duplicate (row, col) pairs; an unknown ``kind``.

        Source: project addition (issue 10, input checks at every entry).
        """
        if not isinstance(self, Observations):  # pragma: no cover - called unbound on another object
            raise TypeError(f"{name} must be a custom_inference.data.Observations, got {type(self).__name__}")
        if kind not in (None, "count", "binary", "real"):
            raise ValueError(f"kind must be 'count', 'binary', 'real' or None, got {kind!r}")
        for field_name in ("n_rows", "n_cols"):
            value = getattr(self, field_name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}.{field_name} must be an integer >= 1, got {value!r}")
        arrays = {}
        for field_name in ("rows", "cols", "values"):
            arr = np.asarray(getattr(self, field_name))
            if arr.ndim != 1:
                raise ValueError(f"{name}.{field_name} must be 1-D, got shape {arr.shape}")
            arrays[field_name] = arr
        rows, cols, values = arrays["rows"], arrays["cols"], arrays["values"]
        if not (rows.size == cols.size == values.size):
            raise ValueError(f"{name}.rows, .cols and .values must have the same length, got "
                             f"{rows.size}, {cols.size}, {values.size}")
        if values.size == 0:
            raise ValueError(f"{name}: no entries (empty data: rows, cols and values have length 0)")
        for field_name, arr, bound in (("rows", rows, self.n_rows), ("cols", cols, self.n_cols)):
            if not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"{name}.{field_name} must hold integer indices (int32 or int64), got dtype {arr.dtype}")
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= bound:
                raise ValueError(f"{name}.{field_name} index out of range: found [{lo}, {hi}], allowed "
                                 f"[0, {bound - 1}] ({'n_rows' if field_name == 'rows' else 'n_cols'} = {bound})")
        if not (values.dtype == bool or np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
            raise TypeError(f"{name}.values must be real numbers (float32 or float64), got dtype {values.dtype}; "
                            "build the container with Observations.from_coo(..., dtype=np.float64)")
        if float_only and values.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"{name}.values has dtype {values.dtype}; the solvers compute in float32 or float64 only "
                            f"(never in {values.dtype}): pass {name}.astype(np.float64)")
        v = values.astype(np.float64)
        bad = ~np.isfinite(v)
        if bad.any():
            raise ValueError(f"{name}.values: {int(bad.sum())} NaN or infinite entries (first at entry "
                             f"{int(np.flatnonzero(bad)[0])}); drop or impute them first")
        if kind == "count":
            if np.any(v < 0):
                raise ValueError(f"{name}.values: counts must be non-negative, found {v.min():g}")
            if np.any(v != np.round(v)):
                k = int(np.flatnonzero(v != np.round(v))[0])
                raise ValueError(f"{name}.values: count models need integer counts, found {v[k]:g} (entry {k}); "
                                 "round or double them first (validation.frontdoor.api.fit: transform='round', 'double' "
                                 "for half stars, or 'binarize' with threshold=...)")
        elif kind == "binary":
            off = (v != 0) & (v != 1)
            if off.any():
                k = int(np.flatnonzero(off)[0])
                raise ValueError(f"{name}.values: binary (one-class) models need values in {{0, 1}}, found {v[k]:g} "
                                 f"(entry {k}); binarize first (validation.frontdoor.api.fit: transform='binarize', threshold=...)")
        flat = rows.astype(np.int64) * self.n_cols + cols.astype(np.int64)
        # the checked constructors store entries row-major: strictly increasing means no duplicates (O(N))
        if not np.all(flat[1:] > flat[:-1]) and np.unique(flat).size != flat.size:
            raise ValueError(f"{name}.rows/.cols: duplicate (row, col) pairs; sum or deduplicate them first")
        return self

    # -- views -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """(I, J), the matrix shape (``(n_rows, n_cols)``).

        Raises
        ------
        None.

        Source: project addition.
        """
        return (self.n_rows, self.n_cols)

    @property
    def nnz(self) -> int:
        """N, the number of stored entries (int).

        Raises
        ------
        None.

        Source: project addition.
        """
        return int(self.values.shape[0])

    def astype(self, dtype) -> "Observations":
        """The same entries with ``values`` stored as ``dtype``.

        Parameters
        ----------
        dtype : numpy dtype-like
            The new storage dtype of ``values`` (the solvers need float32 or float64).

        Returns
        -------
        Observations
            A new container with the same ``rows``, ``cols`` and shape.

        Raises
        ------
        None of its own (`numpy.ndarray.astype` raises TypeError for a dtype numpy does not know).

        Source: project addition.
        """
        return Observations(self.rows, self.cols, np.asarray(self.values).astype(dtype), self.n_rows, self.n_cols)

    def to_scipy(self) -> sp.csr_matrix:
        """The entries as a sparse matrix.

        Returns
        -------
        scipy.sparse.csr_matrix, shape (I, J)
            Of the dtype of ``values``.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return sp.csr_matrix(
            (np.asarray(self.values), (np.asarray(self.rows), np.asarray(self.cols))), shape=self.shape
        )

    def to_dense(self) -> np.ndarray:
        """Dense (I, J) array. For tests and brute-force references only.

        Returns
        -------
        numpy.ndarray, shape (I, J)
            Zeros except at the entries; of the dtype of ``values``.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        out = np.zeros(self.shape, dtype=np.asarray(self.values).dtype)
        out[np.asarray(self.rows), np.asarray(self.cols)] = np.asarray(self.values)
        return out

    def __repr__(self) -> str:
        return f"Observations(shape={self.shape}, nnz={self.nnz}, dtype={np.asarray(self.values).dtype})"


def check_observations(data, kind: Kind | None, *, name: str = "data", float_only: bool = False) -> Observations:
    """The entry check of a public solver: ``data`` must be an `Observations` whose entries are what
    the model needs (`Observations.validate`), however the container was built.

    O(N) numpy work, no JAX computation (run before any compilation).

    Parameters
    ----------
    data : Observations
        The matrix (I, J) with N entries.
    kind : {"count", "binary", "real"} or None
        What the model needs; None checks the structure only.
    name : str, default "data"
        The argument's name in messages.
    float_only : bool, default False
        Also require ``values`` stored as float32 / float64.

    Returns
    -------
    Observations
        ``data`` unchanged.

    Raises
    ------
    TypeError
        When ``data`` is not an Observations (the message names the checked constructors), and as
        `Observations.validate`.
    ValueError
        As `Observations.validate`.

    Source: project addition (issue 10, input checks at every entry).
    """
    if not isinstance(data, Observations):
        raise TypeError(f"{name} must be a custom_inference.data.Observations (build one with Observations.from_coo, "
                        f"from_scipy or from_dense), got {type(data).__name__}")
    return data.validate(kind, name=name, float_only=float_only)


def _mem_available_bytes() -> int | None:
    """The system's MemAvailable (bytes) from /proc/meminfo, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class CountUnits:
    """A count matrix expanded into unit events: entry (u, i) with count y appears y times.

    Gibbs samplers of Poisson factorization allocate each unit of a count to one
    latent component (the multinomial z_ui of the augmented model); drawing one
    categorical per unit is far cheaper than a generic multinomial sampler when counts
    are small, as they are in recommender data.

    The unit arrays are padded with units of weight 0, to a power of two (at least 4096)
    up to 65536 units and to a multiple of 65536 above, so that data sets of similar
    size share one compiled sampler (SBC fits hundreds). Build with `from_observations`.

    Parameters
    ----------
    rows, cols : numpy.ndarray or jax.Array, shape (T_pad,), int32
        Row and column of each unit.
    weight : numpy.ndarray or jax.Array, shape (T_pad,), float
        1 for the T = sum(y) real units, 0 for padding.
    n_rows, n_cols : int
        I and J (static).

    Raises
    ------
    None of its own (the constructor does not check; `from_observations` does).

    Source: project addition (the unit expansion of the augmented Poisson model,
    ``001_30a2018ec18c20b9.txt``, the auxiliary z).
    """

    rows: np.ndarray
    cols: np.ndarray
    weight: np.ndarray
    n_rows: int
    n_cols: int

    def tree_flatten(self):
        """The JAX pytree protocol: the arrays are the leaves, the shape is static.

        Returns
        -------
        children : tuple
            (rows, cols, weight).
        aux : tuple of int
            (n_rows, n_cols).

        Raises
        ------
        None.

        Source: project addition.
        """
        return (self.rows, self.cols, self.weight), (self.n_rows, self.n_cols)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @classmethod
    def from_observations(cls, obs: "Observations", max_units: int | None = None, min_units: int = 4096, *,
                          chunk: int = 1 << 22) -> "CountUnits":
        """Expand ``obs`` (counts), padded to the next power of two and to at least ``min_units``.

        The expansion runs over the entries in chunks of ``chunk`` and writes into the preallocated unit
        arrays, so its memory is the output (8 + weight itemsize bytes per unit: 2.4 GB for 2e8 units with
        float32 weights) plus one chunk's temporaries; the total count is summed in int64 (exact). Note
        that putting the units on a device (``jnp.asarray``) copies them once more.

        Parameters
        ----------
        obs : Observations
            N entries of non-negative integer counts (float or int values).
        max_units : int, optional
            An explicit cap on T; None (default): T_pad is limited by memory instead: the unit arrays must
            fit in the memory the system reports available (``MemAvailable`` of /proc/meminfo; no check
            where it cannot be read).
        min_units : int, default 4096
            The fewest units (padded) for a total count up to 65536.
        chunk : int >= 1, default 2**22
            Entries expanded at a time (values below 1 are taken as 1).

        Returns
        -------
        CountUnits
            T_pad units: rows, cols int32 (T_pad,), weight (T_pad,) of the values' dtype.

        Raises
        ------
        ValueError
            If a value is negative, not an integer, NaN or infinite; if the total count exceeds ``max_units``; if T_pad exceeds
            2**31 - 1 (the samplers index units with int32); or, with ``max_units`` None, if the unit
            arrays would need more bytes than available.

        Source: project addition (the unit expansion of the augmented Poisson model, seed 001).
        """
        values, rows, cols = np.asarray(obs.values), np.asarray(obs.rows), np.asarray(obs.cols)
        chunk = max(1, int(chunk))
        n = values.shape[0]
        total = 0
        for s in range(0, n, chunk):
            v = values[s:s + chunk]
            if not np.all(np.isfinite(v)) or np.any(v != np.round(v)) or np.any(v < 0):
                raise ValueError("values: unit expansion needs finite non-negative integer counts")
            total += int(v.astype(np.int64).sum())
        if max_units is not None and total > max_units:
            raise ValueError(f"values: total count {total} exceeds max_units={max_units}")
        # powers of two for small data (few distinct compiled sizes across simulations); for
        # large data a multiple of 65536, so padding costs at most 65535 idle units
        block = 65536
        padded = max(1 << max(total - 1, 0).bit_length(), min_units) if total <= block else -(-total // block) * block
        if padded > 2**31 - 1:
            raise ValueError(f"values: total count {total} needs {padded} units, over 2**31 - 1 (int32 unit indices)")
        need = padded * (8 + values.dtype.itemsize)
        avail = _mem_available_bytes() if max_units is None else None
        if avail is not None and need > avail:
            raise ValueError(f"values: total count {total} needs {need / 2**30:.2f} GiB of unit arrays "
                             f"({padded} units x {8 + values.dtype.itemsize} bytes), more than the "
                             f"{avail / 2**30:.2f} GiB available; pass max_units to override the check")
        out_rows = np.zeros(padded, np.int32)
        out_cols = np.zeros(padded, np.int32)
        weight = np.zeros(padded, values.dtype)
        weight[:total] = 1
        pos = 0
        for s in range(0, n, chunk):
            c = values[s:s + chunk].astype(np.int64)
            m = int(c.sum())
            out_rows[pos:pos + m] = np.repeat(rows[s:s + chunk], c)
            out_cols[pos:pos + m] = np.repeat(cols[s:s + chunk], c)
            pos += m
        return cls(out_rows, out_cols, weight, obs.n_rows, obs.n_cols)

    @property
    def n_units(self) -> int:
        """T, the number of real (weight 1) units: the sum of the counts (counted, exact at any T).

        Raises
        ------
        None.

        Source: project addition.
        """
        return int(np.count_nonzero(np.asarray(self.weight)))
