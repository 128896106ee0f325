r"""Data parallelism over devices with JAX's own sharding: the nonzeros split, the sums psum-ed.

Issue 14, "sharded over devices". A sweep of HPF CAVI or SBMF Gibbs is a loop over the N observed
entries that accumulates per-user and per-item sufficient statistics (HPF: sum_i y_ui phi_uik and
its item twin; SBMF: counts, sum_j v_jk^2, sum_j v_jk (e_ij + u_ik v_jk), ...), followed by O((I + J) K)
work on the factors. The factors (I x K, J x K: 480k x 50 floats at Netflix size) fit on every
device, so they are *replicated*; only the nonzeros are *sharded*:

- `nnz_mesh` builds a 1-D `jax.sharding.Mesh` over the devices, axis `AXIS` (``"nnz"``).
- `shard_observations` splits an `Observations` into D equal blocks of B = ceil(N / D) entries
  (contiguous runs of the row-major order, so each block's rows stay sorted), padded at the end
  with entries that contribute nothing, and places block d on device d (`NamedSharding`,
  ``PartitionSpec(AXIS)``; `jax.make_array_from_callback`, so the same code builds the global
  arrays when several processes each hold their devices' blocks: `initialize_distributed`).
- `block_sums` runs a per-block statistics function under `jax.shard_map` and combines the
  blocks with `jax.lax.psum`; on a plain `Observations` it runs the function once on the whole
  data (one block), so the single-device path is the very same code and unchanged bit for bit.
- `Reducer` is the same idea for code that must sit *inside* one shard_map (SBMF's sweep draws
  between its sums): ``seg`` / ``sum`` are a segment sum / a sum followed by a psum, ``n`` the
  real number of entries, ``mask`` zeroes padded entries; `LOCAL` is the single-device reducer,
  whose operations are exactly the unsharded ones.

Padding. Padded entries sit at the last row and column (row index n_rows - 1, so rows stay sorted)
with value 0 and weight 0 (``ShardedObservations.weight``). They are neutral:

- HPF CAVI: every per-entry term is proportional to y_ui (w = y / z, y log z, log y! = 0 at y = 0,
  with z > 0 always), so a zero count adds exactly 0.0 to every sum; no mask is needed.
- SBMF Gibbs: the sums involve the residual e_ij and the entry count, not only the value, so the
  sweep multiplies by the weight: the counts are sums of weights, the other factor's value at a
  padded entry is masked to 0 (so sum v^2 and sum v (e + u v) get 0), every change of the residual
  cache is masked (so e stays exactly 0 at padded entries), and N is the real count
  (``ShardedObservations.nnz``).

Why a data container and not a ``mesh=`` argument on ``step``: the solvers' protocol is
``step(key, state, data, hyper)``, and the drivers (`vi_driver`, `mcmc_driver`: chains under
``vmap``, blocks under ``jit``/``scan``, checkpoints) pass ``data`` through untouched. A
`ShardedObservations` (a pytree whose static part holds the mesh and the axis) goes through all of
them unchanged, jit specialises on the mesh like on the shape, and ``step`` dispatches on the type.
The public drivers take ``mesh=`` (``hpf.fit``, ``sbmf.sample``) and build the container.

Equality with the single-device run. The random draws (SBMF) use replicated keys on replicated
arrays, so the sharded chain makes the same draws as the single-device one; the only difference is
the order of the floating-point additions (per-block partial sums, then the psum across blocks), a
relative rounding of order (number of terms) x machine epsilon per sum. `tests/custom_inference/
test_sharding.py` checks both solvers against their single-device runs with 1, 2 and 4 devices.

Multi-host. `initialize_distributed` calls `jax.distributed.initialize` (from arguments or the
``FACTORBAYES_COORDINATOR``, ``FACTORBAYES_NUM_PROCESSES``, ``FACTORBAYES_PROCESS_ID`` variables);
afterwards ``jax.devices()`` lists every process's devices and `nnz_mesh` spans them all. Every
process runs the same program on the same (full) `Observations`; `shard_observations` places on
each process only the blocks of its own devices. On CPU the cross-process psum goes through Gloo
over TCP (JAX's ``jax_cpu_collectives_implementation``; its default since JAX 0.5.1, and
`initialize_distributed` sets it if it was switched off). Two processes on one machine are tested
against the single-process run (``tests/custom_inference/test_distributed.py``, launch lines in
``docs/multi_process.md``).

Source: project convention (issue 14); the collectives are JAX's (``jax.shard_map``,
``jax.lax.psum``, ``jax.sharding``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .data import Observations

__all__ = [
    "AXIS",
    "nnz_mesh",
    "check_mesh",
    "ShardedObservations",
    "shard_observations",
    "block_sums",
    "map_blocks",
    "Reducer",
    "LOCAL",
    "replicate",
    "initialize_distributed",
]

#: The default name of the mesh axis over which the nonzeros are split.
AXIS = "nnz"


def nnz_mesh(n_devices: int | None = None, *, axis: str = AXIS, devices=None) -> Mesh:
    """A 1-D mesh over ``n_devices`` devices (default: all of ``jax.devices()``), axis ``axis``.

    Parameters
    ----------
    n_devices : int >= 1, optional
        How many devices (default: all of ``devices``); the first ``n_devices`` are used.
    axis : str, default AXIS ("nnz")
        The mesh axis name.
    devices : sequence of jax.Device, optional
        Explicit devices (default ``jax.devices()``, every process's devices after
        `initialize_distributed`).

    Returns
    -------
    jax.sharding.Mesh
        Shape (n_devices,), axis name ``axis``.

    Raises
    ------
    ValueError
        ``n_devices`` not an integer >= 1 or more than the devices available; ``axis`` not a
        non-empty string.

    Source: project addition (issue 14).
    """
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices) if n_devices is None else n_devices
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n_devices must be an integer >= 1, got {n_devices!r}")
    if n > len(devices):
        raise ValueError(f"n_devices={n} but only {len(devices)} devices are available "
                         "(on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before importing jax)")
    if not isinstance(axis, str) or not axis:
        raise ValueError(f"axis must be a non-empty string, got {axis!r}")
    return Mesh(np.asarray(devices[:n], dtype=object), (axis,))


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class ShardedObservations:
    """An `Observations` split into equal blocks of nonzeros, one block per device of a mesh axis.

    ``nnz`` is N (the real count), ``shape`` (I, J), ``n_shards`` the size of the axis D and
    ``block_size`` B. Build with `shard_observations`. Padded entries are neutral (module
    docstring), so a solver written for `Observations` runs on a block unchanged.

    Parameters
    ----------
    rows, cols : jax.Array, shape (D B,), int32
        Row and column of each entry, sharded ``PartitionSpec(axis)``; block d (entries
        d B .. (d + 1) B - 1) lives on device d.
    values : jax.Array, shape (D B,), float32 or float64
        The entries, same sharding; 0 at padded entries.
    weight : jax.Array, shape (D B,), float
        Same dtype and sharding; 1 for the N real entries, 0 for padding.
    n_rows, n_cols : int
        The matrix shape I x J (static).
    n_real : int
        N, the number of real entries (static).
    mesh : jax.sharding.Mesh
        The mesh (static).
    axis : str
        The mesh axis the entries are split over.

    Raises
    ------
    None of its own (the constructor does not check; `shard_observations` does).

    Source: project addition (issue 14).
    """

    rows: Any
    cols: Any
    values: Any
    weight: Any
    n_rows: int
    n_cols: int
    n_real: int
    mesh: Mesh
    axis: str

    def tree_flatten(self):
        """The JAX pytree protocol: the entry arrays are the leaves; sizes, mesh and axis are static.

        Returns
        -------
        children : tuple of jax.Array
            (rows, cols, values, weight).
        aux : tuple
            (n_rows, n_cols, n_real, mesh, axis).

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return (self.rows, self.cols, self.values, self.weight), (self.n_rows, self.n_cols, self.n_real, self.mesh,
                                                                  self.axis)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def shape(self) -> tuple[int, int]:
        """(I, J), the matrix shape.

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return (self.n_rows, self.n_cols)

    @property
    def nnz(self) -> int:
        """N, the number of real (not padded) entries (int).

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return self.n_real

    @property
    def n_shards(self) -> int:
        """D, the number of blocks (the size of the mesh axis; int).

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return int(self.mesh.shape[self.axis])

    @property
    def block_size(self) -> int:
        """B, the entries per block (real and padded; int).

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return int(self.values.shape[0]) // self.n_shards

    @property
    def spec(self) -> P:
        """The PartitionSpec of the entry arrays: ``P(axis)``.

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return P(self.axis)

    def astype(self, dtype) -> "ShardedObservations":
        """The same blocks with ``values`` and ``weight`` stored as ``dtype`` (sharding kept).

        Parameters
        ----------
        dtype : numpy or jax float dtype
            The new storage dtype.

        Returns
        -------
        ShardedObservations
            A new container with the same rows, cols, sizes and mesh.

        Raises
        ------
        None of its own (JAX raises TypeError for a dtype it does not know).

        Source: project addition (issue 14).
        """
        return ShardedObservations(self.rows, self.cols, self.values.astype(dtype), self.weight.astype(dtype),
                                   self.n_rows, self.n_cols, self.n_real, self.mesh, self.axis)

    def block(self, rows, cols, values) -> Observations:
        """One block as an `Observations` (inside `jax.shard_map`, from the local arrays).

        Parameters
        ----------
        rows, cols : jax.Array, shape (B,), int32
            The block's local rows and columns.
        values : jax.Array, shape (B,), float
            The block's local values.

        Returns
        -------
        Observations
            Shape (I, J), B entries (padding included).

        Raises
        ------
        None of its own (the `Observations` constructor checks only the shape for device arrays).

        Source: project addition (issue 14).
        """
        return Observations(rows, cols, values, self.n_rows, self.n_cols)

    def __repr__(self) -> str:
        return (f"ShardedObservations(shape={self.shape}, nnz={self.n_real}, shards={self.n_shards}, "
                f"block={self.block_size}, axis={self.axis!r})")


def check_mesh(mesh, axis: str = AXIS) -> Mesh:
    """The entry check of a ``mesh=`` argument: a `jax.sharding.Mesh` with an axis named ``axis``.

    Parameters
    ----------
    mesh : jax.sharding.Mesh
        The mesh to check.
    axis : str, default AXIS ("nnz")
        The axis the nonzeros are split over.

    Returns
    -------
    jax.sharding.Mesh
        ``mesh`` unchanged.

    Raises
    ------
    TypeError
        ``mesh`` not a `jax.sharding.Mesh`.
    ValueError
        ``mesh`` has no axis named ``axis`` (the message lists its axes).

    Source: project addition (issue 14).
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh (see custom_inference.sharding.nnz_mesh), "
                        f"got {type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"mesh has no axis {axis!r} to split the nonzeros over (its axes: {tuple(mesh.axis_names)}); "
                         f"build it with custom_inference.sharding.nnz_mesh() or name an axis {AXIS!r}")
    return mesh


def shard_observations(obs: Observations, mesh: Mesh, *, axis: str = AXIS) -> ShardedObservations:
    """Split the entries of ``obs`` into equal blocks over the mesh axis ``axis`` and place them.

    With D the size of the axis and N the entries, B = ceil(N / D); block d holds entries
    d B .. (d + 1) B - 1 of ``obs`` (its row-major order), the last block(s) padded with entries
    (row n_rows - 1, column n_cols - 1, value 0, weight 0), which every solver treats as neutral
    (module docstring). The arrays are built with `jax.make_array_from_callback` and
    ``NamedSharding(mesh, P(axis))``: each process places only its own devices' blocks. Values
    keep their dtype (float64 is placed under ``jax.enable_x64``).

    Parameters
    ----------
    obs : Observations
        Shape (I, J), N entries (already validated by the caller's model checks).
    mesh : jax.sharding.Mesh
        With an axis named ``axis`` (other axes, if any, replicate).
    axis : str, default AXIS ("nnz")
        The mesh axis the entries are split over.

    Returns
    -------
    ShardedObservations
        Arrays of length D B.

    Raises
    ------
    TypeError
        ``obs`` not an `Observations` (a `ShardedObservations` is refused too: shard once);
        ``mesh`` not a `jax.sharding.Mesh`.
    ValueError
        ``mesh`` has no axis named ``axis``.

    Source: project addition (issue 14; module docstring).
    """
    if not isinstance(obs, Observations):
        raise TypeError(f"data must be a custom_inference.data.Observations to shard, got {type(obs).__name__}")
    check_mesh(mesh, axis)
    d = int(mesh.shape[axis])
    rows, cols, values = (np.asarray(a) for a in (obs.rows, obs.cols, obs.values))
    n = rows.shape[0]
    b = max(-(-n // d), 1)
    pad = d * b - n
    dtype = values.dtype
    host = {
        "rows": np.concatenate([rows.astype(np.int32), np.full(pad, obs.n_rows - 1, np.int32)]),
        "cols": np.concatenate([cols.astype(np.int32), np.full(pad, obs.n_cols - 1, np.int32)]),
        "values": np.concatenate([values, np.zeros(pad, dtype)]),
        "weight": np.concatenate([np.ones(n, dtype), np.zeros(pad, dtype)]),
    }
    sharding = NamedSharding(mesh, P(axis))
    with jax.enable_x64(dtype == np.float64):
        placed = {name: jax.make_array_from_callback(arr.shape, sharding, lambda index, arr=arr: arr[index])
                  for name, arr in host.items()}
    return ShardedObservations(placed["rows"], placed["cols"], placed["values"], placed["weight"], obs.n_rows,
                               obs.n_cols, n, mesh, axis)


def replicate(tree, data: ShardedObservations):
    """Place every array of ``tree`` on all devices of ``data.mesh`` (``NamedSharding(mesh, P())``).

    For a state that a sharded solver keeps replicated (factors, variational parameters).

    Parameters
    ----------
    tree : pytree of array_like
        The arrays to place.
    data : ShardedObservations
        Gives the mesh.

    Returns
    -------
    pytree of jax.Array
        The same structure; leaves keep their dtype.

    Raises
    ------
    TypeError
        When ``data`` is not a `ShardedObservations`.

    Source: project addition (issue 14).
    """
    if not isinstance(data, ShardedObservations):
        raise TypeError(f"data must be a ShardedObservations, got {type(data).__name__}")
    return jax.device_put(tree, NamedSharding(data.mesh, P()))


def block_sums(fn: Callable, replicated, data, *, weighted: bool = False):
    """Sufficient statistics summed over the entries: ``fn`` on each block, combined by psum.

    ``fn(replicated, block)`` (or ``fn(replicated, block, weight)`` with ``weighted``) returns a
    pytree of arrays that are *sums over the block's entries* (per-user (I, K) sums, scalars, ...),
    so that the statistics of the whole data are the sum over blocks.

    - ``data`` an `Observations`: one block, ``fn(replicated, data)`` (weight all ones); the
      single-device solver's own computation, unchanged.
    - ``data`` a `ShardedObservations`: ``fn`` runs under `jax.shard_map` on each device's block
      (``replicated`` with ``PartitionSpec()``, the entries with ``PartitionSpec(axis)``) and the
      results are combined with `jax.lax.psum` over the axis; the output is replicated. Padded
      entries have value 0 (and weight 0): ``fn`` must give them no weight (module docstring).

    Parameters
    ----------
    fn : callable
        ``fn(replicated, block: Observations[, weight (B,)]) -> pytree`` of sums over the block.
    replicated : pytree
        Inputs every block sees whole (e.g. the factors).
    data : Observations or ShardedObservations
        The entries.
    weighted : bool, default False
        Pass the block's padding weight (B,) as a third argument.

    Returns
    -------
    pytree of jax.Array
        ``fn``'s output, summed over all entries (replicated when sharded).

    Raises
    ------
    TypeError
        ``data`` neither an `Observations` nor a `ShardedObservations`.

    Source: project addition (issue 14; module docstring).
    """
    if isinstance(data, Observations):
        if weighted:
            return fn(replicated, data, jnp.ones_like(data.values))
        return fn(replicated, data)
    if not isinstance(data, ShardedObservations):
        raise TypeError(f"data must be an Observations or a ShardedObservations, got {type(data).__name__}")
    axis = data.axis

    def per_block(rep, rows, cols, values, weight):
        # the replicated inputs enter as device-varying values, like the block: a loop inside ``fn``
        # whose carry starts from them (zeros_like(t)) and adds block terms keeps one type
        rep = jax.tree_util.tree_map(lambda x: jax.lax.pcast(x, axis, to="varying"), rep)
        block = data.block(rows, cols, values)
        out = fn(rep, block, weight) if weighted else fn(rep, block)
        return jax.tree_util.tree_map(lambda x: jax.lax.psum(x, axis), out)

    spec = data.spec
    return jax.shard_map(per_block, mesh=data.mesh, in_specs=(P(), spec, spec, spec, spec), out_specs=P())(
        replicated, data.rows, data.cols, data.values, data.weight)


def map_blocks(fn: Callable, data: ShardedObservations, args: tuple, arg_specs: tuple, out_specs):
    """Run ``fn(*args, block, red=reducer)`` on every device's block of entries under `jax.shard_map`.

    For code whose sums over entries sit between other work (a Gibbs sweep draws after each sum):
    ``block`` is the device's entries as an `Observations` and ``red`` a sharded `Reducer` (psum over
    ``data.axis``, the block's padding weights, N = ``data.nnz``), so ``fn`` written against a
    `Reducer` is the single-device code (there it is called with `LOCAL`).

    Parameters
    ----------
    fn : callable
        ``fn(*args, block, red=Reducer) -> pytree``.
    data : ShardedObservations
        The entries split over the mesh.
    args : tuple of pytrees
        The other arguments of ``fn``.
    arg_specs : tuple of jax.sharding.PartitionSpec
        Their `PartitionSpec` prefixes (``P()`` replicated, ``data.spec`` for per-entry arrays aligned
        with the blocks).
    out_specs : jax.sharding.PartitionSpec or pytree of them
        PartitionSpec prefix of ``fn``'s output.

    Returns
    -------
    pytree of jax.Array
        ``fn``'s output assembled over the devices (replicated parts checked replicated by shard_map's
        ``check_vma``).

    Raises
    ------
    TypeError
        ``data`` not a `ShardedObservations`.

    Source: project addition (issue 14).
    """
    if not isinstance(data, ShardedObservations):
        raise TypeError(f"data must be a ShardedObservations, got {type(data).__name__}")

    def per_block(args, rows, cols, values, weight):
        return fn(*args, data.block(rows, cols, values), red=Reducer(data.axis, weight, data.nnz))

    spec = data.spec
    return jax.shard_map(per_block, mesh=data.mesh, in_specs=(tuple(arg_specs), spec, spec, spec, spec),
                         out_specs=out_specs)(tuple(args), data.rows, data.cols, data.values, data.weight)


class Reducer:
    """How code running on one block of entries turns per-block sums into sums over all entries.

    The single-device reducer `LOCAL` (``axis=None``) adds no psum and no mask, so code written against
    a Reducer performs the unsharded operations exactly; the sharded one (``axis`` the mesh axis,
    ``weight`` the block's weights) is for use inside `jax.shard_map`.

    Parameters
    ----------
    axis : str, optional
        The mesh axis to psum over (None: one device).
    weight : jax.Array, shape (B,), float, optional
        The block's padding weights (1 real, 0 padded); None: no mask.
    n : int, optional
        The real number of entries N; None on `LOCAL` means "the length of the entry arrays", which the
        caller passes to `count` as ``local_n``.

    Raises
    ------
    None at construction.

    Source: project addition (issue 14).
    """

    def __init__(self, axis: str | None = None, weight=None, n: int | None = None):
        self.axis, self.weight, self.n = axis, weight, n

    def seg(self, x, ids, num, sorted_):
        """The segment sum of ``x`` over ``ids`` into ``num`` segments, over all blocks.

        Parameters
        ----------
        x : jax.Array, shape (B, ...)
            Per-entry values.
        ids : jax.Array, shape (B,), int
            Segment of each entry.
        num : int
            Number of segments.
        sorted_ : bool
            Whether ``ids`` is sorted (``indices_are_sorted``).

        Returns
        -------
        jax.Array, shape (num, ...)
            The sums (psum-ed over ``axis`` when sharded).

        Raises
        ------
        None of its own.

        Source: project addition (issue 14).
        """
        out = jax.ops.segment_sum(x, ids, num_segments=num, indices_are_sorted=sorted_)
        return out if self.axis is None else jax.lax.psum(out, self.axis)

    def sum(self, x):
        """The sum of an entry array over all blocks.

        Parameters
        ----------
        x : jax.Array
            Per-entry values (any shape).

        Returns
        -------
        jax.Array, shape ()
            The total (psum-ed over ``axis`` when sharded).

        Raises
        ------
        None of its own.

        Source: project addition (issue 14).
        """
        out = jnp.sum(x)
        return out if self.axis is None else jax.lax.psum(out, self.axis)

    def mask(self, x):
        """``x`` with padded entries set to 0 (``x * weight``, broadcast against the entry axis).

        Parameters
        ----------
        x : jax.Array, shape (B, ...)
            Per-entry values.

        Returns
        -------
        jax.Array
            ``x`` unchanged without a weight (`LOCAL`), else ``x * weight``.

        Raises
        ------
        None of its own.

        Source: project addition (issue 14).
        """
        return x if self.weight is None else x * self.weight

    def count(self, local_n: int) -> int:
        """N: the real number of entries.

        Parameters
        ----------
        local_n : int
            The entry arrays' length, used on one device (``n`` None).

        Returns
        -------
        int
            ``n``, or ``local_n`` when ``n`` is None.

        Raises
        ------
        None.

        Source: project addition (issue 14).
        """
        return local_n if self.n is None else self.n


#: The single-device reducer: plain segment sums and sums, no mask.
LOCAL = Reducer()


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, **kwargs) -> None:
    """Join a multi-process JAX run (one process per host) with `jax.distributed.initialize`.

    Arguments default to the environment (see Parameters). Call it first, before any other JAX
    computation; afterwards `nnz_mesh` spans the devices of all processes and every process runs
    the same program (each on the full `Observations`: `shard_observations` places only its own
    blocks). The launch lines are in ``docs/multi_process.md``.

    On CPU, JAX runs cross-process collectives only with a CPU collectives implementation chosen
    before the CPU backend starts (without one, the first sharded computation fails with
    "Multiprocess computations aren't implemented on the CPU backend"). Gloo over TCP is JAX's
    default (``jax_cpu_collectives_implementation="gloo"`` since JAX 0.5.1); when it has been set
    to None, this function sets it back to ``"gloo"``, so the caller does nothing extra. A choice
    of ``"mpi"`` is kept. Gloo connects the processes directly, on ports the system picks (not
    only the coordinator's), at the address each host's name resolves to.

    Parameters
    ----------
    coordinator_address : str, optional
        ``host:port`` of process 0 (default ``FACTORBAYES_COORDINATOR``).
    num_processes : int >= 1, optional
        The number of processes (default ``FACTORBAYES_NUM_PROCESSES``).
    process_id : int, optional
        This process's id in 0 .. num_processes - 1 (default ``FACTORBAYES_PROCESS_ID``).
    **kwargs
        Passed to `jax.distributed.initialize` (e.g. ``local_device_ids``).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        No coordinator address, or the number of processes / process id missing or not
        integers, or ``process_id`` outside 0 .. num_processes - 1.
    RuntimeError
        From `jax.distributed.initialize` (already initialized, a backend already in use,
        coordinator unreachable).

    Source: project addition (issue 14); JAX's multi-process API.
    """
    env = os.environ
    coordinator_address = coordinator_address or env.get("FACTORBAYES_COORDINATOR")
    if not coordinator_address:
        raise ValueError("coordinator_address missing (pass it or set FACTORBAYES_COORDINATOR=host:port)")
    try:
        num_processes = int(num_processes if num_processes is not None else env["FACTORBAYES_NUM_PROCESSES"])
        process_id = int(process_id if process_id is not None else env["FACTORBAYES_PROCESS_ID"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError("num_processes and process_id must be integers (arguments or FACTORBAYES_NUM_PROCESSES, "
                         f"FACTORBAYES_PROCESS_ID): {exc!r}") from None
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in 0 .. num_processes - 1, got {process_id} of {num_processes}")
    if jax.config.jax_cpu_collectives_implementation is None:  # CPU psum across processes: Gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **kwargs)
