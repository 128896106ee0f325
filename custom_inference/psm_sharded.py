r"""PSM's pair passes on one device's block of observed pairs: the reducer, the padding weight, shard_map.

Issue 14, "sharded over devices", for `custom_inference.psm` (the design is `custom_inference.sharding`'s).
A sweep of Algorithm 1 makes several passes over the observed pairs G (s and t corrections, bias
and vector natural parameters, xi*, the ELBO), each a sum over pairs into per-user / per-item arrays
or scalars; the background caches (sums over *all* users / items, t- or s-weighted) and the factors
are O((I + J) K^2) and stay replicated. With a `sharding.ShardedObservations` the whole sweep runs
under `jax.shard_map` on each device's block of pairs (`run_on_blocks`), and every sum over pairs
goes through the block's `sharding.Reducer` (psum over the mesh axis); the psm code reads the
reducer and the padding weight from the data with `reducer` and `weight`, which give `sharding.LOCAL`
and None on a plain `Observations`, so the single-device sweep is the very same code, bit for bit.

Padding. PSM's pairs are binary events with counts c_ij; a padded pair has c = 0 but its censored
terms (D' s_i t_j (lam_ij - lam*), s_i t_j E a_ij^2, s_i t_j (Omega_ij - Omega*_ij)) do not vanish
with c, so every pair pass multiplies them by the block's weight (1 real, 0 padding): the chunk
mask of ``psm._pairs`` is the weight, and ``psm._pair_coefficients`` masks k_ij. The terms that are
proportional to c_ij (c_i, c_j, the observed bound c JJ1, c lam) are 0 at padding already.

Source: project convention (issue 14); the collectives are JAX's (``jax.shard_map``, ``jax.lax.psum``).
"""

from __future__ import annotations

from typing import Callable

import jax
from jax.sharding import PartitionSpec as P

from . import sharding
from .sharding import LOCAL, Reducer, ShardedObservations

__all__ = ["PairBlock", "reducer", "weight", "psum", "vary", "run_on_blocks", "block_arrays"]


class PairBlock:
    """One device's block of observed pairs inside `jax.shard_map`, with its reducer and weight.

    Duck-types the `Observations` fields the psm pair passes read: ``rows``, ``cols`` (B,) int32,
    ``values`` (B,) float counts (0 at padding), ``n_rows``, ``n_cols`` (I, J), plus ``weight`` (B,)
    float, 1 on real pairs and 0 on padding (``red.weight``), and ``red``.

    Parameters
    ----------
    block : Observations-like
        The device's local block: ``rows``, ``cols``, ``values`` (B,), ``n_rows``, ``n_cols``.
    red : sharding.Reducer
        The block's reducer (its ``weight`` becomes the block's padding weight).

    Raises
    ------
    None.

    Source: project addition (issue 14).
    """

    def __init__(self, block, red: Reducer):
        self.rows, self.cols, self.values = block.rows, block.cols, block.values
        self.n_rows, self.n_cols = block.n_rows, block.n_cols
        self.weight, self.red = red.weight, red

    @property
    def shape(self) -> tuple[int, int]:
        """(I, J), the matrix shape.

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return (self.n_rows, self.n_cols)


def reducer(data) -> Reducer:
    """The reducer of ``data``: its own on a `PairBlock`, `sharding.LOCAL` otherwise (one device).

    Parameters
    ----------
    data : PairBlock or Observations
        The pairs a pass reads.

    Returns
    -------
    sharding.Reducer
        ``data.red`` or `sharding.LOCAL`.

    Raises
    ------
    None.

    Source: project addition (issue 14).
    """
    return data.red if isinstance(data, PairBlock) else LOCAL


def weight(data):
    """The padding weight of a `PairBlock` (1 real, 0 padded), None on a plain `Observations`.

    Parameters
    ----------
    data : PairBlock or Observations
        The pairs a pass reads.

    Returns
    -------
    jax.Array, shape (B,), float, or None
        The weight.

    Raises
    ------
    None.

    Source: project addition (issue 14).
    """
    return data.weight if isinstance(data, PairBlock) else None


def psum(red: Reducer, tree):
    """``tree`` summed over the blocks (psum over ``red.axis``); unchanged with `sharding.LOCAL`.

    Parameters
    ----------
    red : sharding.Reducer
        The block's reducer.
    tree : pytree of jax.Array
        Per-block sums (any shapes).

    Returns
    -------
    pytree of jax.Array
        The same structure, summed over the devices.

    Raises
    ------
    None.

    Source: project addition (issue 14).
    """
    if red.axis is None:
        return tree
    return jax.tree_util.tree_map(lambda x: jax.lax.psum(x, red.axis), tree)


def vary(red: Reducer, tree):
    """``tree`` cast to device-varying (``jax.lax.pcast``) on a block; unchanged with `sharding.LOCAL`.

    So that a ``lax.scan`` carry started from it can take per-pair terms.

    Parameters
    ----------
    red : sharding.Reducer
        The block's reducer.
    tree : pytree of jax.Array
        Initial carries (any shapes).

    Returns
    -------
    pytree of jax.Array
        The same structure and values, device-varying.

    Raises
    ------
    None.

    Source: project addition (issue 14).
    """
    if red.axis is None:
        return tree
    return jax.tree_util.tree_map(lambda x: jax.lax.pcast(x, red.axis, to="varying"), tree)


def run_on_blocks(fn: Callable, data: ShardedObservations, replicated: tuple, per_block: tuple = ()):
    """``fn(*replicated, *per_block, block)`` on every device's `PairBlock` under `jax.shard_map`.

    ``fn`` must return values that are the same on every device (its sums over pairs psum-ed through
    the block's reducer); shard_map's ``check_vma`` refuses a per-device value.

    Parameters
    ----------
    fn : callable
        ``fn(*replicated, *per_block, block: PairBlock) -> pytree``.
    data : sharding.ShardedObservations
        The pairs split over the mesh.
    replicated : tuple
        Pytrees passed whole to every device (``PartitionSpec()``), e.g. the state and hyperparameters.
    per_block : tuple, default ()
        Pytrees of arrays split like the pairs (``PartitionSpec(axis)`` on their first axis: each device
        gets its own part, e.g. psm's per-block `PairOrder`).

    Returns
    -------
    pytree of jax.Array
        ``fn``'s output, replicated.

    Raises
    ------
    TypeError
        ``data`` not a `sharding.ShardedObservations`.

    Source: project addition (issue 14).
    """
    if not isinstance(data, ShardedObservations):
        raise TypeError(f"data must be a ShardedObservations, got {type(data).__name__}")

    def on_block(*args, red):
        *rest, block = args
        return fn(*rest, PairBlock(block, red))

    specs = tuple(P() for _ in replicated) + tuple(data.spec for _ in per_block)
    return sharding.map_blocks(on_block, data, tuple(replicated) + tuple(per_block), specs, P())


def block_arrays(fn: Callable, data: ShardedObservations):
    """``fn(rows, cols)`` on every device's block of pairs under `jax.shard_map`, outputs kept split.

    The outputs (a pytree of arrays whose first axis is per block) are concatenated over the devices
    along that axis and stay split there (``PartitionSpec(axis)``), ready to be passed as ``per_block``
    to `run_on_blocks`.

    Parameters
    ----------
    fn : callable
        ``fn(rows, cols) -> pytree`` on the local (B,) int32 arrays of a block.
    data : sharding.ShardedObservations
        The pairs split over the mesh.

    Returns
    -------
    pytree of jax.Array
        The global arrays (first axis: n_devices times the per-block length).

    Raises
    ------
    TypeError
        For ``data`` not a `sharding.ShardedObservations`.

    Source: project addition (issue 28: psm's per-block pair order).
    """
    if not isinstance(data, ShardedObservations):
        raise TypeError(f"data must be a ShardedObservations, got {type(data).__name__}")
    return jax.jit(jax.shard_map(fn, mesh=data.mesh, in_specs=(data.spec, data.spec), out_specs=data.spec))(
        data.rows, data.cols)
