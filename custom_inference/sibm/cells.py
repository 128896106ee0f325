"""SIBM cell sampling (seed 002_5408d341cb9fc544.txt sec. 2.3): the S-Uniform, S-Balanced and S-Biased
strategies, p(i, j) and its marginals, padded minibatches of cells and the Robbins-Monro / averaging
helpers shared by SVI (`custom_inference.sibm.svi`) and MAP (`custom_inference.sibm.map`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..data import Observations
from ..schedules import robbins_monro_array
from .common import _check_data

__all__ = ["STRATEGIES", "Sampler", "Minibatch", "make_sampler", "pmf", "sample_cells"]

STRATEGIES = ("uniform", "balanced", "biased")




class Sampler(NamedTuple):
    """Everything needed to draw cells under one strategy and to know p(i, j), p(i), p(j).

    Built by `make_sampler`; for a cell of value x, p(i, j) = w_x_row[i] w_x_col[j] / norm_x, where
    norm_x includes the class mass (1/2 for balanced / biased, N/(IJ) and 1 - N/(IJ) for uniform).
    Float fields have the sampler's dtype.

    Parameters
    ----------
    keys : jax.Array, shape (N,), int32 or int64
        Sorted i * J + j of the ones (membership tests by binary search); int64 under x64.
    pos_rows, pos_cols : jax.Array, shape (N,), int32
        Row and column of each one (drawn given "a one").
    one_cdf : jax.Array, shape (N,), float
        Cumulative probabilities of the ones, in the order of ``pos_rows``.
    zero_row_cdf : jax.Array, shape (I,), float
        Row CDF of the product proposal of the zeros (rejection).
    zero_col_cdf : jax.Array, shape (J,), float
        Column CDF of that proposal.
    w_one_row : jax.Array, shape (I,), float
        Per-row weights of the ones.
    w_one_col : jax.Array, shape (J,), float
        Per-column weights of the ones.
    w_zero_row : jax.Array, shape (I,), float
        Per-row weights of the zeros.
    w_zero_col : jax.Array, shape (J,), float
        Per-column weights of the zeros.
    norm_one, norm_zero : jax.Array, shape (), float
        The normalisers (inf for a class of mass 0).
    p_row : jax.Array, shape (I,), float
        Marginal p(i) = sum_j p(i, j).
    p_col : jax.Array, shape (J,), float
        Marginal p(j).
    code : jax.Array, shape (), int32
        0 uniform, 1 balanced, 2 biased.

    Raises
    ------
    None of its own (a NamedTuple; `make_sampler` checks its inputs).

    Source: ``002_5408d341cb9fc544.txt`` sec. 2.3 (S-Uniform, S-Balanced, S-Biased).
    """

    keys: jax.Array
    pos_rows: jax.Array
    pos_cols: jax.Array
    one_cdf: jax.Array
    zero_row_cdf: jax.Array
    zero_col_cdf: jax.Array
    w_one_row: jax.Array
    w_one_col: jax.Array
    w_zero_row: jax.Array
    w_zero_col: jax.Array
    norm_one: jax.Array
    norm_zero: jax.Array
    p_row: jax.Array
    p_col: jax.Array
    code: jax.Array


def make_sampler(data: Observations, strategy: str = "biased", *, dtype=None) -> Sampler:
    """Build the sampler of one strategy of seed 002 sec. 2.3 (host side, O(N + I + J)).

    Parameters
    ----------
    data : Observations
        The N ones of an (I, J) binary matrix (`custom_inference.sibm.as_binary`).
    strategy : {"uniform", "balanced", "biased"}, default "biased"
        "uniform" (S-Uniform, p = 1/(IJ)), "balanced" (S-Balanced, p = 1/(2 n_x)), "biased" (S-Biased,
        p proportional to r_i^(1-x) c_j^(1-x), counts thresholded at 1).
    dtype : numpy float dtype, optional
        Dtype of the sampler's float arrays (default: the dtype of ``data.values``).

    Returns
    -------
    Sampler
        The sampler.

    Raises
    ------
    ValueError
        For an unknown strategy; (balanced / biased) a matrix without zeros; ``data`` not an
        `Observations`; I * J >= 2^31 without ``jax_enable_x64``.

    Source: ``002_5408d341cb9fc544.txt`` sec. 2.3 (S-Uniform, S-Balanced, S-Biased).
    """
    data = _check_data(data)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    I, J = data.shape
    N = data.nnz
    Z = I * J - N
    if strategy != "uniform" and Z == 0:
        raise ValueError("data: S-Balanced / S-Biased need at least one zero in X")
    if I * J >= 2**31 and not jax.config.jax_enable_x64:
        raise ValueError("data: I * J >= 2^31 needs jax_enable_x64 for the cell keys")
    rows = np.asarray(data.rows, np.int64)
    cols = np.asarray(data.cols, np.int64)
    ones_row = np.bincount(rows, minlength=I).astype(np.float64)
    ones_col = np.bincount(cols, minlength=J).astype(np.float64)
    if strategy == "biased":
        r0 = np.maximum(J - ones_row, 1.0)  # zeros per row, thresholded at 1
        c0 = np.maximum(I - ones_col, 1.0)
        r1 = np.maximum(ones_row, 1.0)  # ones per row, thresholded at 1
        c1 = np.maximum(ones_col, 1.0)
        w1r, w1c, w0r, w0c = r0, c0, r1, c1
    else:
        w1r, w1c, w0r, w0c = np.ones(I), np.ones(J), np.ones(I), np.ones(J)
    w_pos = w1r[rows] * w1c[cols]
    norm1 = float(w_pos.sum()) if N else 1.0
    norm0 = float(w0r.sum() * w0c.sum() - (w0r[rows] * w0c[cols]).sum())
    if strategy == "uniform":
        p_one = N / (I * J)
        s1, s0 = p_one, 1.0 - p_one  # mass of the ones / zeros
        norm1, norm0 = (float(N) if N else 1.0), float(Z) if Z else 1.0
    else:
        s1, s0 = (0.5, 0.5) if N else (0.0, 1.0)
    # marginals: p(i) = s1 sum_{j in ones(i)} w1 / norm1 + s0 (w0r_i sum_{j} w0c_j - sum_{j in ones(i)} w0) / norm0
    one_row_mass = np.bincount(rows, weights=w_pos, minlength=I)
    one_col_mass = np.bincount(cols, weights=w_pos, minlength=J)
    w0_pos = w0r[rows] * w0c[cols]
    zero_row_mass = w0r * w0c.sum() - np.bincount(rows, weights=w0_pos, minlength=I)
    zero_col_mass = w0c * w0r.sum() - np.bincount(cols, weights=w0_pos, minlength=J)
    p_row = s1 * one_row_mass / norm1 + s0 * zero_row_mass / norm0
    p_col = s1 * one_col_mass / norm1 + s0 * zero_col_mass / norm0
    dtype = jnp.dtype(dtype or np.asarray(data.values).dtype)
    key_dtype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    keys = np.sort(rows * J + cols)
    one_cdf = np.cumsum(w_pos) / norm1 if N else np.ones(1)
    f = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    return Sampler(
        keys=jnp.asarray(keys if N else np.full(1, -1), key_dtype),
        pos_rows=jnp.asarray(rows if N else np.zeros(1), jnp.int32),
        pos_cols=jnp.asarray(cols if N else np.zeros(1), jnp.int32),
        one_cdf=f(one_cdf), zero_row_cdf=f(np.cumsum(w0r) / w0r.sum()), zero_col_cdf=f(np.cumsum(w0c) / w0c.sum()),
        w_one_row=f(w1r), w_one_col=f(w1c), w_zero_row=f(w0r), w_zero_col=f(w0c),
        norm_one=f(norm1 / s1 if s1 > 0 else np.inf), norm_zero=f(norm0 / s0 if s0 > 0 else np.inf),
        p_row=f(p_row), p_col=f(p_col), code=jnp.asarray(STRATEGIES.index(strategy), jnp.int32),
    )


def _is_one(sampler: Sampler, i, j, J):
    key = i.astype(sampler.keys.dtype) * J + j.astype(sampler.keys.dtype)
    idx = jnp.clip(jnp.searchsorted(sampler.keys, key), 0, sampler.keys.shape[0] - 1)
    return sampler.keys[idx] == key


def pmf(sampler: Sampler, i, j, x):
    """p(i, j) of the sampler's strategy for cells (i, j) with values x.

    p(i, j) = w_x_row[i] w_x_col[j] / norm_x (norm_x includes the class mass).

    Parameters
    ----------
    sampler : Sampler
        From `make_sampler`.
    i, j : jax.Array, shape (n,), int
        The cells.
    x : jax.Array, shape (n,), float
        0/1, the value of each cell.

    Returns
    -------
    jax.Array, shape (n,), float
        p(i, j), in the sampler's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``002_5408d341cb9fc544.txt`` sec. 2.3.
    """
    one = x > 0
    w = jnp.where(one, sampler.w_one_row[i] * sampler.w_one_col[j], sampler.w_zero_row[i] * sampler.w_zero_col[j])
    return w / jnp.where(one, sampler.norm_one, sampler.norm_zero)


def _draw(cdf, u):
    return jnp.clip(jnp.searchsorted(cdf, u * cdf[-1], side="right"), 0, cdf.shape[0] - 1)


def sample_cells(key, sampler: Sampler, shape: tuple[int, int], n: int, *, uniform: bool | None = None):
    """Draw ``n`` cells from p(i, j) (seed 002 sec. 2.3).

    Uniform: i, j uniform. Balanced / biased: a one with probability 1/2 (drawn from the ones by their
    weights), else a zero by rejection from the product proposal w0_row x w0_col.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    sampler : Sampler
        From `make_sampler`.
    shape : tuple of 2 int
        (I, J).
    n : int
        Number of cells (static).
    uniform : bool, optional
        Whether the strategy is S-Uniform (default: read from ``sampler.code``, which must then be
        concrete; pass it under jit).

    Returns
    -------
    i, j : jax.Array, shape (n,), int32
        The cells.
    x : jax.Array, shape (n,), float
        0/1, their values.
    p_ij, p_j_given_i, p_i_given_j : jax.Array, shape (n,), float
        p(i, j), p(j | i) and p(i | j) of each cell, in the sampler's dtype.

    Raises
    ------
    None of its own; with ``uniform=None`` under ``jax.jit``, ``int(sampler.code)`` makes JAX raise
    ConcretizationTypeError (a TypeError).

    Source: ``002_5408d341cb9fc544.txt`` sec. 2.3.
    """
    if uniform is None:
        uniform = int(sampler.code) == 0
    I, J = shape
    dtype = sampler.p_row.dtype
    k_class, k_one, k_zero = jax.random.split(key, 3)

    n_try = 16  # candidates per draw before falling back to a rejection loop

    def draw_zeros(k):
        k1, k2, k3 = jax.random.split(k, 3)
        ci = _draw(sampler.zero_row_cdf, jax.random.uniform(k1, (n, n_try), dtype=dtype))
        cj = _draw(sampler.zero_col_cdf, jax.random.uniform(k2, (n, n_try), dtype=dtype))
        ok = ~_is_one(sampler, ci, cj, J)
        first = jnp.argmax(ok, axis=1)
        i0 = jnp.take_along_axis(ci, first[:, None], axis=1)[:, 0]
        j0 = jnp.take_along_axis(cj, first[:, None], axis=1)[:, 0]
        found = jnp.any(ok, axis=1)

        def one(k, i, j, done):
            def body(c):
                k, _, _, _ = c
                k, ka, kb = jax.random.split(k, 3)
                i = _draw(sampler.zero_row_cdf, jax.random.uniform(ka, dtype=dtype))
                j = _draw(sampler.zero_col_cdf, jax.random.uniform(kb, dtype=dtype))
                return k, i, j, ~_is_one(sampler, i, j, J)

            _, i, j, _ = jax.lax.while_loop(lambda c: ~c[3], body, (k, i, j, done))
            return i, j

        return jax.vmap(one)(jax.random.split(k3, n), i0, j0, found)

    def uniform_cells(_):
        ki, kj = jax.random.split(k_zero)
        i = jax.random.randint(ki, (n,), 0, I)
        j = jax.random.randint(kj, (n,), 0, J)
        return i.astype(jnp.int32), j.astype(jnp.int32)

    def classes(_):
        is_one = jax.random.uniform(k_class, (n,), dtype=dtype) < 0.5
        idx = _draw(sampler.one_cdf, jax.random.uniform(k_one, (n,), dtype=dtype))
        zi, zj = draw_zeros(k_zero)
        i = jnp.where(is_one, sampler.pos_rows[idx], zi)
        j = jnp.where(is_one, sampler.pos_cols[idx], zj)
        return i.astype(jnp.int32), j.astype(jnp.int32)

    i, j = uniform_cells(None) if uniform else classes(None)
    x = _is_one(sampler, i, j, J).astype(dtype)
    p = pmf(sampler, i, j, x)
    return i, j, x, p, p / sampler.p_row[i], p / sampler.p_col[j]


class Minibatch(NamedTuple):
    """S sampled cells, padded (weight 0 marks padding).

    Parameters
    ----------
    i, j : jax.Array, shape (S_pad,), int32
        The cells.
    x : jax.Array, shape (S_pad,), float
        0/1, their values.
    p_ij : jax.Array, shape (S_pad,), float
        p(i, j).
    p_j_given_i : jax.Array, shape (S_pad,), float
        p(j | i), the c of the u updates.
    p_i_given_j : jax.Array, shape (S_pad,), float
        p(i | j), the c of the v updates.
    weight : jax.Array, shape (S_pad,), float
        1 for the S real cells, 0 for padding.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``002_5408d341cb9fc544.txt`` sec. 2.3, eqs. (9), (11)-(12) (the minibatch of Algorithm 1).
    """

    i: jax.Array
    j: jax.Array
    x: jax.Array
    p_ij: jax.Array
    p_j_given_i: jax.Array
    p_i_given_j: jax.Array
    weight: jax.Array



def _pad_size(S: int) -> int:
    """Minibatches are padded to a power of two (at least 256) so that few sizes are compiled."""
    return max(256, 1 << (int(S) - 1).bit_length())



def _rm(count, tau, kappa):
    """rho = (tau + count)^(-kappa) per row / column / z (`custom_inference.schedules`)."""
    return robbins_monro_array(count, tau, kappa)


def _segment_avg(t, idx, w, n):
    shape = (-1,) + (1,) * (t.ndim - 1)
    cnt = jax.ops.segment_sum(w, idx, num_segments=n)
    s1 = jax.ops.segment_sum(w.reshape(shape) * t, idx, num_segments=n)
    s2 = jax.ops.segment_sum(w.reshape(shape) * t * t, idx, num_segments=n)
    safe = jnp.maximum(cnt, 1.0).reshape(shape)
    return cnt, s1 / safe, s2 / safe

