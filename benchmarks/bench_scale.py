"""Scaling benchmark: seconds per sweep and peak memory of each solver at 1e5 .. 1e8 nonzeros.

For every (solver, nnz) pair the parent starts ONE child process (this script with ``--child``) that

1. imports JAX and the solver (the baseline RSS is recorded),
2. draws a Netflix-shaped matrix with `synthetic_scale.netflix_like` (480,189 x 17,770 by default;
   counts for HPF, 1-5 ratings for SBMF, ones for the one-class PSM and BPR) and records the
   generator's seconds and peak RSS; with the cache (default ``--cache-dir``, ``/tmp/factorbayes-
   scale-cache``) the first run for an nnz writes the arrays as ``.npy`` files and later runs
   memory-map them (``gen_cached`` true: then the "gen" columns are the load, not the draw),
3. resets the kernel's peak-RSS counter (``/proc/self/clear_refs``), builds the solver's data
   container on the device, runs ``init`` (peak recorded, counter reset again) and ``--steps + 1``
   sweeps (the first compiles; the table reports the median of the others), each followed by
   ``jax.block_until_ready``,
4. writes a JSON record: seconds per sweep (wall; and the process's CPU seconds, all threads,
   ``cpu_sec_per_sweep``: on a shared machine the wall time is inflated, the CPU time much less),
   first-call seconds, peak RSS (``VmHWM``) of the generator, of the set-up (container + init) and of the sweeps, ``ru_maxrss``, raw data bytes
   (rows + cols + values as int32, int32, float32), parameter bytes (the state's arrays),
   data-container bytes, the ratio peak / (raw + parameters), the JAX device, and (on a GPU) the
   device's peak bytes in use.

The parent polls each child's ``VmRSS`` and kills it (SIGKILL to its process group) above
``--max-rss-gb`` (default: 75 % of ``MemAvailable`` when the run starts), when the machine's
``MemAvailable`` falls below ``--min-available-gb`` (default 1.5; other jobs share the machine),
and after ``--time-limit`` seconds; such a run is recorded with the reason, as is any exception (the last
lines of the child's log). Output under ``--out`` (default ``/tmp/factorbayes-bench``):
``scale_bench.json`` (every record, machine, load averages) and ``scale_bench.md`` (the table and
the log-log slopes of seconds per sweep against nnz, per solver). Child logs (with the progress
bars) go to ``--out/scale_logs/``.

What one sweep is, per solver (``--solvers``):

- ``hpf``: `custom_inference.hpf.sweep`, the fused CAVI sweep `hpf.fit` runs (phi sums in chunks
  of ``hpf.STEP_CHUNK`` nonzeros, the ELBO of the incoming state included);
- ``hpf-gibbs``: `custom_inference.hpf_gibbs.step` with its Info dropped, as
  `custom_inference.mcmc_driver` runs it (the data are CountUnits: one unit per unit of count);
- ``sbmf``: `custom_inference.sbmf.step` (default ``gauge_rounds=5``), ratings 1-5;
- ``psm``: `custom_inference.psm.step` (Algorithm 1 sweep, ELBO of the new state included), the user
  and item vector updates in blocks (`psm.pair_order`, built in the set-up; ``--psm-block-mb``);
- ``bpr``: `custom_inference.bpr.step`, one epoch of N triples in minibatches of 256;
- ``bpmf``: `custom_inference.bpmf.step` (``gauge_rounds=5``), ratings 1-5, the rows drawn in blocks
  (`bpmf.pair_order`, built in the set-up; default memory bound of `custom_inference.row_blocks`);
- ``mcmc-fm``, ``vbfm``, ``ovbfm``, ``sgd-fm``: the factorization machine on the ids design (one-hot
  user | one-hot item, `validation.frontdoor.api_models.ids_design`, as the front door fits it), ratings
  1-5: one Gibbs sweep (`fm_mcmc.step` on a state without the (N, K) q, as `fm_mcmc.sample` runs it), one CAVI sweep (`vbfm.step`), one OVBFM epoch as `vbfm.fit_svi` runs it
  (`ovbfm_epoch`: a random partition into `OVBFM_BATCHES` padded minibatches, `vbfm.make_batches`, and
  `vbfm.svi_step` with the global update counter t), one SGD epoch of N instances (`fm_sgd.step`,
  batch size 1, step size `SGD_FM_LEARNING_RATE`; the padded rows (`fm_sgd.padded_rows`) and the device
  design are built once in the set-up and passed to every step, as `fm_sgd.fit` does);
- ``sibm-svi``: ``ceil(nnz / S)`` SIBM minibatches of S = max(I, J) cells (`sibm.svi_step`, S-Biased
  sampler built once in the set-up): as many cells as the matrix has ones;
- ``rg``: one Robbins-Monro sweep: a hidden graph H_t ~ q(H) drawn on the host
  (`rg.sample_hidden_graph`), then `rg.step` on it with rho = 0.5 (the vector updates in blocks: the
  step sorts each new graph's edges on the host, `rg.edge_order`, inside the timed sweep);
- ``npfm``, ``ppfm``: `custom_inference.pfm.step`, jitted, with ``block_ptr=pfm.block_pointers(data)``
  (as `pfm.sample` runs it), on `PFMData.from_matrix` of the counts (zeros "all": the unobserved cells
  enter through cached sums, not as rows). Only the new state leaves the jitted step, so its log
  joint (which `pfm.sample` records every sweep) is dropped by the compiler and not timed; the
  allocation runs over chunks of listed rows and sub-chunks of their units (`pfm.allocate_chunks`,
  issue 28).

Runs unchanged on a GPU machine (``jax.devices()`` gives the GPU); float32 by default (``--dtype``).

Examples::

    nice -n 10 .venv/bin/python benchmarks/bench_scale.py --nnz 1e5 1e6 1e7 --K 50
    nice -n 10 .venv/bin/python benchmarks/bench_scale.py --solvers hpf --nnz 1e8 --steps 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = Path(tempfile.gettempdir()) / "factorbayes-bench"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "factorbayes-scale-cache"
SOLVERS = ("hpf", "hpf-gibbs", "sbmf", "psm", "bpr", "bpmf", "mcmc-fm", "vbfm", "ovbfm", "sgd-fm", "sibm-svi", "rg",
           "npfm", "ppfm")
#: the solvers of the first table (issue 12); ``--solvers all`` runs every one of `SOLVERS`
DEFAULT_SOLVERS = ("hpf", "hpf-gibbs", "sbmf", "psm", "bpr")
KIND = {"hpf": "counts", "hpf-gibbs": "counts", "sbmf": "ratings", "psm": "binary", "bpr": "binary",
        "bpmf": "ratings", "mcmc-fm": "ratings", "vbfm": "ratings", "ovbfm": "ratings", "sgd-fm": "ratings",
        "sibm-svi": "binary", "rg": "binary", "npfm": "counts", "ppfm": "counts"}
#: SGD-FM's step size in the benchmark (the front door's default, `api_models.SGD_FM_LEARNING_RATE`)
SGD_FM_LEARNING_RATE = 0.01
#: OVBFM's minibatches per epoch in the benchmark (`vbfm.fit_svi`'s default ``n_batches``)
OVBFM_BATCHES = 10
GIB = 2.0**30


# ---------------------------------------------------------------------------------
# memory probes (Linux /proc; None elsewhere)


def _status_kb(pid="self", field="VmHWM") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset this process's peak-RSS counter (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _mem_available_bytes() -> int | None:
    kb = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    kb = int(line.split()[1])
    except OSError:
        pass
    return None if kb is None else kb * 1024


def _tree_bytes(tree) -> int:
    import jax

    return int(sum(int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree)
                   if hasattr(x, "dtype")))


# ---------------------------------------------------------------------------------
# the child: one (solver, nnz) measurement


def _solver_setup(solver, rows, cols, values, shape, K, dtype, key, psm_block_mb=256.0):
    """(data container on the device, initial state, sweep function state -> state, key-taking flag)."""
    import jax
    import jax.numpy as jnp

    from custom_inference.data import CountUnits, Observations

    I, J = shape
    if solver == "hpf":
        from custom_inference import hpf
        from ppl_models.hpf import HPFHyper

        hyper = HPFHyper()
        data = Observations(jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values, dtype), I, J)
        state = hpf.init(key, data, K, hyper, dtype=dtype)
        return data, state, lambda k, s: hpf.sweep(s, data, hyper)[0]
    if solver == "hpf-gibbs":
        from custom_inference import hpf_gibbs
        from ppl_models.hpf import HPFHyper

        hyper = HPFHyper()
        # chunked expansion; its cap is the memory available (CountUnits.from_observations)
        units = CountUnits.from_observations(Observations(rows, cols, values.astype(dtype), I, J))
        data = jax.tree_util.tree_map(jnp.asarray, units)
        del units
        state = hpf_gibbs.init(key, data, K, hyper, dtype=dtype)
        sweep = jax.jit(lambda k, s, d: hpf_gibbs.step(k, s, d, hyper)[0])  # Info dropped, as the driver does
        return data, state, lambda k, s: sweep(k, s, data)
    if solver == "sbmf":
        from custom_inference import sbmf
        from ppl_models.sbmf import SBMFHyper

        hyper = SBMFHyper()
        data = Observations(jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values, dtype), I, J)
        state = sbmf.init(key, data, K, hyper, dtype=dtype)
        return data, state, lambda k, s: sbmf.step(k, s, data, hyper)[0]
    if solver == "psm":
        from custom_inference import psm
        from ppl_models.psm import PSMHyper

        hyper = PSMHyper()
        # the device copy first; init checks and uses it (no second host copy of the pairs)
        data = Observations(jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values, dtype), I, J)
        state = psm.init(key, data, K, hyper, dtype=dtype)
        # the blocks of the vector updates (users over the row-major pairs, items over an item-sorted
        # permutation), built once here: part of the set-up phase, not of the first sweep
        order = psm.pair_order(data, K, dtype=dtype, block_bytes=int(psm_block_mb * 2**20))
        jax.block_until_ready(order)
        return data, state, lambda k, s: psm.step(k, s, data, hyper, order=order)[0]
    if solver == "bpr":
        from custom_inference import bpr

        data = bpr.bpr_data(Observations(rows, cols, values.astype(dtype), I, J))
        state = bpr.init(key, data, K, dtype=dtype)
        return data, state, lambda k, s: bpr.step(k, s, data)[0]
    return _more_setup(solver, rows, cols, values, shape, K, dtype, key)


def ovbfm_epoch(vbfm, design, hyper, *, seed=0, n_batches=OVBFM_BATCHES):
    """One OVBFM epoch as `custom_inference.vbfm.fit_svi` runs it: a random partition of the rows into
    ``n_batches`` padded minibatches (`vbfm.make_batches`, one host Generator seeded once) and
    `vbfm.svi_step` on each with the global update counter t (0, 1, ..., continuing across epochs, so
    rho_t = (1 + t)^-lam keeps falling). ``vbfm``: the module; ``design``: the FMDesign on the host;
    each batch is gathered from it when the epoch reaches it (`vbfm.iter_batches`, as `fit_svi`
    does). `fit_svi` also holds a device copy of the design for its per-epoch ELBO, which the epoch
    does not use (the ELBO is not part of this row). Returns ``epoch(key, state) -> state`` (the key
    is unused: the batches come from the host Generator). Raises ValueError for a bad ``n_batches``.

    Source: project addition (mirrors `vbfm.fit_svi`, ``004_90693a0965f06816.txt`` Algorithm 4).
    """
    rng = np.random.default_rng(seed)
    t = [0]

    def epoch(key, state):
        del key
        for batch in vbfm.iter_batches(rng, design, n_batches):
            state = vbfm.svi_step(None, state, design, hyper, batch, t[0])[0]
            t[0] += 1
        return state

    return epoch


def _more_setup(solver, rows, cols, values, shape, K, dtype, key):
    """`_solver_setup` for the solvers added for issue 28 (each through its module's protocol
    ``init`` / ``step``, `custom_inference.base.Algorithm`). Raises ValueError for an unknown name."""
    import jax
    import jax.numpy as jnp

    from custom_inference.data import Observations

    I, J = shape
    obs = Observations(rows, cols, values.astype(dtype), I, J)
    if solver == "bpmf":
        from custom_inference import bpmf
        from ppl_models.bpmf import BPMFHyper

        hyper = BPMFHyper()
        data = Observations(jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(values, dtype), I, J)
        state = bpmf.init(key, data, K, hyper, dtype=dtype)
        order = bpmf.pair_order(data, K, dtype=dtype)  # once per data set (host counting sort)
        jax.block_until_ready(order)
        return data, state, lambda k, s: bpmf.step(k, s, data, hyper, order=order)[0]
    if solver in ("mcmc-fm", "vbfm", "ovbfm", "sgd-fm"):
        from custom_inference import fm_mcmc, fm_sgd, vbfm
        from ppl_models.fm import FMFlatHyper, FMHierHyper
        from validation.frontdoor.api_models import ids_design

        # FMDesign.from_ids (O(N), values and y in the compute dtype), placed on the device once (as the fits do)
        # one array at a time: jnp.asarray copies even on the CPU, and a jitted step given host arrays copies
        # them at every call, so the host design is dropped leaf by leaf and never coexists with a device copy
        leaves, treedef = jax.tree_util.tree_flatten(ids_design(obs, dtype=dtype))
        del obs
        for i in range(len(leaves)):
            leaves[i] = jnp.asarray(leaves[i])
        design = jax.tree_util.tree_unflatten(treedef, leaves)
        del leaves
        if solver == "mcmc-fm":
            hyper = FMHierHyper()
            # as `fm_mcmc.sample` runs the chains: no (N, K) cache q in the state
            state = fm_mcmc.init(key, design, K, hyper, dtype=dtype, keep_q=False)
            step = jax.jit(lambda k, s, d: fm_mcmc.step(k, s, d, hyper)[0])
            return design, state, lambda k, s: step(k, s, design)
        if solver == "sgd-fm":
            reg = fm_sgd.SGDReg()
            state = fm_sgd.init(key, design, K, reg, dtype=dtype)
            # the padded rows once, in the set-up (as `fm_sgd.fit` does), not in every epoch
            padded = tuple(jnp.asarray(a) for a in fm_sgd.padded_rows(design))
            return design, state, lambda k, s: fm_sgd.step(k, s, design, reg, learning_rate=SGD_FM_LEARNING_RATE,
                                                           padded=padded)[0]
        hyper = FMFlatHyper()
        state = vbfm.init(key, design, K, hyper, dtype=dtype)
        if solver == "vbfm":
            return design, state, lambda k, s: vbfm.step(k, s, design, hyper)[0]

        # the epoch gathers its minibatches from numpy views of the device arrays (no copy on the CPU)
        return design, state, ovbfm_epoch(vbfm, design, hyper, seed=0)
    if solver == "sibm-svi":
        from custom_inference import sibm
        from ppl_models.sibm import SIBMHyper

        hyper = SIBMHyper()
        state = sibm.svi_init(key, obs, K, hyper, dtype=dtype)
        sampler = sibm.make_sampler(obs, "biased", dtype=dtype)
        n_mb = max(1, math.ceil(len(rows) / int(state.S)))

        def minibatches(k, s):
            for kb in jax.random.split(k, n_mb):
                s = sibm.svi_step(kb, s, obs, hyper, sampler=sampler)[0]
            return s

        return obs, state, minibatches
    if solver == "rg":
        from custom_inference import rg
        from ppl_models.rg import RGHyper

        hyper = RGHyper()
        rng = np.random.default_rng(0)
        pi, _ = rg.popularity_weights(obs, hyper.r)
        graph = jax.tree_util.tree_map(jnp.asarray, rg.sample_hidden_graph(rng, obs, pi, dtype=dtype))
        state = rg.init(key, graph, K, hyper, dtype=dtype)
        del graph

        def rm_sweep(k, s):
            g = jax.tree_util.tree_map(jnp.asarray, rg.sample_hidden_graph(rng, obs, pi, dtype=dtype))
            return rg.step(None, s, g, hyper, 0.5)[0]

        return obs, state, rm_sweep
    if solver in ("npfm", "ppfm"):
        from custom_inference import pfm
        from ppl_models.pfm import PFMHyper

        hyper = PFMHyper()
        data = pfm.PFMData.from_matrix(obs, zeros="all", dtype=dtype)
        state = pfm.init(key, data, K, hyper, variant=solver, dtype=dtype)
        # once on the host: each block's features are a static slice (ids design: users, then items)
        ptr = pfm.block_pointers(data)
        data = jax.tree_util.tree_map(jnp.asarray, data)
        # one compiled sweep (as pfm.sample's driver runs it); un-jitted, every call re-traced the block loop
        sweep = jax.jit(lambda k, s, d: pfm.step(k, s, d, hyper, block_ptr=ptr)[0])
        return data, state, lambda k, s: sweep(k, s, data)
    raise ValueError(f"unknown solver {solver!r}")


def child(args) -> dict:
    """Run one measurement and return its record (see the module docstring)."""
    if args.dtype == "float64":
        os.environ.setdefault("JAX_ENABLE_X64", "1")
    import jax

    if args.dtype == "float64" or args.solver == "sibm-svi":
        # SIBM SVI draws cells by a flat index i J + j: int64 keys once I J >= 2^31 (Netflix: 8.5e9 cells);
        # the state keeps --dtype
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from tqdm.auto import tqdm

    sys.path.insert(0, str(HERE))
    from synthetic_scale import netflix_like

    import custom_inference.data  # noqa: F401  (imports counted in the baseline)

    rec = {"solver": args.solver, "nnz": int(args.nnz), "K": args.K, "dtype": args.dtype,
           **({"psm_block_mb": args.psm_block_mb} if args.solver == "psm" else {}),
           "shape": [args.n_users, args.n_items], "kind": KIND[args.solver], "seed": args.seed}
    dev = jax.devices()[0]
    rec["device"] = f"{dev.platform}:{getattr(dev, 'device_kind', '')}"
    rec["jax"] = jax.__version__
    rec["baseline_rss_bytes"] = (_status_kb("self", "VmRSS") or 0) * 1024

    t0 = time.perf_counter()
    cache = None if args.no_cache else args.cache_dir
    rec["gen_cached"] = bool(cache) and any(Path(cache).glob(f"netflix_{int(args.nnz)}_{args.n_users}x{args.n_items}"
                                                               f"_s{args.seed}_*_rows.npy"))
    rows, cols, values = netflix_like(int(args.nnz), n_users=args.n_users, n_items=args.n_items,
                                      kind=KIND[args.solver], seed=args.seed, progress=True, cache_dir=cache)
    rec["gen_seconds"] = time.perf_counter() - t0
    rec["raw_bytes"] = int(rows.nbytes + cols.nbytes + values.nbytes)
    rec["gen_peak_rss_bytes"] = (_status_kb("self", "VmHWM") or 0) * 1024
    rec["hwm_reset"] = _reset_hwm()

    dtype = jnp.dtype(args.dtype)
    key = jax.random.PRNGKey(args.seed)
    t0 = time.perf_counter()
    shape = (args.n_users, args.n_items)
    data, state, sweep = _solver_setup(args.solver, rows, cols, values, shape, args.K, dtype, key, args.psm_block_mb)
    del rows, cols, values
    jax.block_until_ready(state)
    rec["setup_seconds"] = time.perf_counter() - t0
    rec["param_bytes"] = _tree_bytes(state)
    rec["container_bytes"] = _tree_bytes(data)
    rec["setup_peak_rss_bytes"] = (_status_kb("self", "VmHWM") or 0) * 1024  # container + init
    # in the log too, so that a run killed in its sweeps still shows its set-up
    print(f"set-up: {rec['setup_seconds']:.1f} s, peak RSS {rec['setup_peak_rss_bytes'] / GIB:.2f} GiB (container "
          f"{rec['container_bytes'] / GIB:.2f} GiB, params {rec['param_bytes'] / GIB:.2f} GiB)", flush=True)
    _reset_hwm()

    samples, cpu_samples = [], []
    bar = tqdm(range(args.steps + 1), desc=f"{args.solver} nnz={int(args.nnz):.0e} K={args.K}", unit="sweep")
    for t in bar:
        start, cpu_start = time.perf_counter(), time.process_time()
        state = sweep(jax.random.fold_in(key, t), state)
        jax.block_until_ready(state)
        dt = time.perf_counter() - start
        if t == 0:
            rec["first_sweep_seconds"] = dt
            rec["first_sweep_cpu_seconds"] = time.process_time() - cpu_start  # compilation included
        else:
            samples.append(dt)
            cpu_samples.append(time.process_time() - cpu_start)  # all threads of this process
            bar.set_postfix(s_per_sweep=f"{float(np.median(samples)):.3g}")
    bar.close()
    rec["samples"] = samples
    rec["sec_per_sweep"] = float(np.median(samples)) if samples else None
    rec["cpu_samples"] = cpu_samples
    rec["cpu_sec_per_sweep"] = float(np.median(cpu_samples)) if cpu_samples else None
    checked = state
    # the OVBFM epoch (`ovbfm_epoch`, as `vbfm.fit_svi`'s) and SIBM's SVI steps never evaluate the ELBO: its
    # last_elbo stays NaN by design, which is not a non-finite parameter
    holder = state if args.solver == "ovbfm" else state.params if args.solver == "sibm-svi" else None
    if holder is not None and bool(jnp.isnan(holder.last_elbo)):
        rec["last_elbo"] = "not evaluated"
        zeroed = holder._replace(last_elbo=jnp.zeros((), holder.last_elbo.dtype))
        checked = zeroed if holder is state else state._replace(params=zeroed)
    rec["finite"] = bool(all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(checked)
                             if jnp.issubdtype(x.dtype, jnp.floating)))
    rec["sweep_peak_rss_bytes"] = (_status_kb("self", "VmHWM") or 0) * 1024  # the sweeps alone
    hwm = max(rec["setup_peak_rss_bytes"], rec["sweep_peak_rss_bytes"])
    rec["solver_peak_rss_bytes"] = hwm
    rec["peak_rss_bytes"] = max(hwm, rec["gen_peak_rss_bytes"])
    import resource

    rec["ru_maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # noqa: BLE001 - CPU devices may not implement it
        stats = {}
    rec["device_peak_bytes"] = stats.get("peak_bytes_in_use")
    base = rec["raw_bytes"] + rec["param_bytes"]
    rec["ratio_peak_to_raw_plus_params"] = rec["peak_rss_bytes"] / base
    rec["ratio_solver_peak_to_raw_plus_params"] = hwm / base
    rec["status"] = "ok"
    return rec


# ---------------------------------------------------------------------------------
# the parent


def _run_one(args, solver, nnz, max_rss, log_dir: Path) -> dict:
    tag = f"{solver}_nnz{int(nnz):d}_K{args.K}_{args.dtype}"
    log_path = log_dir / f"{tag}.log"
    res_path = log_dir / f"{tag}.json"
    res_path.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--solver", solver, "--nnz-one", str(int(nnz)),
           "--K", str(args.K), "--steps", str(args.steps), "--dtype", args.dtype, "--seed", str(args.seed),
           "--n-users", str(args.n_users), "--n-items", str(args.n_items), "--result", str(res_path),
           "--cache-dir", str(args.cache_dir), "--psm-block-mb", str(args.psm_block_mb)] + (
               ["--no-cache"] if args.no_cache else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    load_before = os.getloadavg()
    start = time.perf_counter()
    sampled_peak = 0
    reason = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=REPO)
        while proc.poll() is None:
            rss = (_status_kb(proc.pid, "VmRSS") or 0) * 1024
            sampled_peak = max(sampled_peak, rss)
            avail = _mem_available_bytes()
            if rss > max_rss:
                reason = f"killed: RSS {rss / GIB:.1f} GiB over the limit {max_rss / GIB:.1f} GiB"
            elif avail is not None and avail < args.min_available_gb * GIB:
                reason = (f"killed: the machine's MemAvailable fell to {avail / GIB:.1f} GiB "
                          f"(< {args.min_available_gb} GiB) at RSS {rss / GIB:.1f} GiB")
            elif time.perf_counter() - start > args.time_limit:
                reason = f"killed: time limit {args.time_limit:.0f} s"
            if reason:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.2)
    wall = time.perf_counter() - start
    rec = {"solver": solver, "nnz": int(nnz), "K": args.K, "dtype": args.dtype}
    if reason is None and proc.returncode == 0 and res_path.exists():
        rec = json.loads(res_path.read_text())
    else:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-6:] if log_path.exists() else []
        if reason is None:
            rc = proc.returncode
            reason = (f"killed by signal {-rc} (9: likely the kernel's OOM killer)" if rc < 0 else f"exit code {rc}")
            errs = [line for line in tail if "Error" in line or "error" in line]
            if errs:
                reason += ": " + errs[-1].strip()[:300]
        rec.update(status="failed", reason=reason, log_tail=tail)
    rec.update(wall_seconds=wall, sampled_peak_rss_bytes=sampled_peak, load_before=load_before,
               load_after=os.getloadavg(), log=str(log_path))
    return rec


def _fmt_gib(b):
    return "" if b is None else f"{b / GIB:.2f}"


def _fmt_s(x) -> str:
    """Seconds to 3 significant digits; "(first only)" when no sweep after the first was timed (--steps 0)."""
    return "(first only)" if x is None else f"{x:.3g}"


def _phase_peaks(r) -> str:
    if r.get("sweep_peak_rss_bytes") is not None:
        return f"{_fmt_gib(r['setup_peak_rss_bytes'])} / {_fmt_gib(r['sweep_peak_rss_bytes'])}"
    return _fmt_gib(r["solver_peak_rss_bytes"])


def _slopes(records, field="sec_per_sweep"):
    """Least-squares slope of log ``field`` against log nnz per (solver, K, dtype), over the ok rows."""
    out = {}
    for group in dict.fromkeys((r["solver"], r["K"], r["dtype"]) for r in records):
        pts = sorted((r["nnz"], r[field]) for r in records if (r["solver"], r["K"], r["dtype"]) == group
                     and r.get("status") == "ok" and r.get(field))
        if len(pts) >= 2:
            x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
            name = f"{group[0]} (K={group[1]}, {group[2]}, nnz {pts[0][0]:.0e}-{pts[-1][0]:.0e})"
            out[name] = float(np.polyfit(x, y, 1)[0])
    return out


def markdown(records, machine) -> str:
    """The results table and the per-solver log-log slopes, as markdown.

    Raises nothing of its own. Source: project convention (issue 14, the scaling table).
    """
    lines = [f"Machine: {machine['cpus']} CPUs, {machine['mem_total_gib']:.1f} GiB; jax {machine.get('jax', '?')}.", "",
             "| solver | nnz | K | device | s/sweep (median; CPU s) | first sweep s | gen s | peak RSS GiB "
             "(gen / set-up / sweeps) | raw GiB | params GiB | peak / (raw + params) | load | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        load = f"{r['load_before'][0]:.1f}-{r['load_after'][0]:.1f}" if "load_before" in r else ""
        if r.get("status") == "ok":
            cpu = "" if r.get("cpu_sec_per_sweep") is None else f" (CPU {_fmt_s(r['cpu_sec_per_sweep'])})"
            lines.append(
                f"| {r['solver']} | {r['nnz']:.0e} | {r['K']} | {r['device']} | {_fmt_s(r['sec_per_sweep'])}{cpu} | "
                f"{r['first_sweep_seconds']:.3g} | {r['gen_seconds']:.3g} | {_fmt_gib(r['peak_rss_bytes'])} "
                f"({_fmt_gib(r['gen_peak_rss_bytes'])} / {_phase_peaks(r)}) | "
                f"{_fmt_gib(r['raw_bytes'])} | {_fmt_gib(r['param_bytes'])} | "
                f"{r['ratio_peak_to_raw_plus_params']:.2f} | {load} | ok |")
        else:
            lines.append(f"| {r['solver']} | {r['nnz']:.0e} | {r['K']} | | | | | "
                         f"{_fmt_gib(r.get('sampled_peak_rss_bytes'))} (sampled) | | | | {load} | "
                         f"{r.get('reason', '')} |")
    slopes, mem = _slopes(records), _slopes(records, "solver_peak_rss_bytes")
    if slopes:
        lines += ["", "Log-log slope of s/sweep against nnz (least squares over the ok rows): "
                  + ", ".join(f"{s} {v:.2f}" for s, v in slopes.items()) + ".",
                  "Of the solver-phase peak RSS: " + ", ".join(f"{s} {v:.2f}" for s, v in mem.items()) + "."]
    return "\n".join(lines) + "\n"


def _machine() -> dict:
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "mem_total_gib": mem / GIB, "platform": platform.platform(),
            "python": platform.python_version()}


def main(argv=None) -> int:
    """Command-line entry (parent, or ``--child`` for one measurement); returns the exit status.

    Raises nothing of its own; argparse exits on bad arguments. Source: project convention (issue 14).
    """
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--solvers", nargs="+", default=list(DEFAULT_SOLVERS), choices=SOLVERS + ("all",),
                   help="solvers to run (default: the first table's five; 'all': every solver)")
    p.add_argument("--nnz", nargs="+", type=float, default=[1e5, 1e6, 1e7])
    p.add_argument("--K", type=int, default=50)
    p.add_argument("--steps", type=int, default=3,
                   help="timed sweeps after the first (compiling) one; 0: the first sweep only (long sweeps at 1e8)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-users", type=int, default=480_189)
    p.add_argument("--n-items", type=int, default=17_770)
    p.add_argument("--time-limit", type=float, default=900.0, help="seconds per (solver, nnz) run")
    p.add_argument("--max-rss-gb", type=float, default=None,
                   help="kill a run whose RSS exceeds this (default 75%% of MemAvailable at start)")
    p.add_argument("--min-available-gb", type=float, default=1.5,
                   help="kill a run when the machine's MemAvailable falls below this (protects other jobs)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                   help="keep the generated COO arrays here as .npy files, memory-mapped by later runs "
                        "(the pairs once, the values per kind; see synthetic_scale.netflix_like)")
    p.add_argument("--no-cache", action="store_true", help="draw the matrix in every run (no files)")
    p.add_argument("--psm-block-mb", type=float, default=256.0,
                   help="psm: memory bound (MiB) of one block's (B, K, K) precisions in the blocked vector "
                        "updates (custom_inference.psm.block_sizes; default its DEFAULT_BLOCK_BYTES)")
    p.add_argument("--tag", default="", help="suffix of the output files (scale_bench<tag>.json/.md)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--solver", help=argparse.SUPPRESS)
    p.add_argument("--nnz-one", type=float, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if "all" in args.solvers:
        args.solvers = list(SOLVERS)

    if args.child:
        args.nnz = args.nnz_one
        rec = child(args)
        args.result.write_text(json.dumps(rec, indent=1))
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    log_dir = args.out / "scale_logs"
    log_dir.mkdir(exist_ok=True)
    avail = _mem_available_bytes()
    max_rss = args.max_rss_gb * GIB if args.max_rss_gb else (0.75 * avail if avail else 64 * GIB)
    machine = _machine()
    print(f"RSS limit per run {max_rss / GIB:.1f} GiB; time limit {args.time_limit:.0f} s; load {os.getloadavg()}",
          flush=True)
    records = []
    json_path = args.out / f"scale_bench{args.tag}.json"
    md_path = args.out / f"scale_bench{args.tag}.md"
    for solver in args.solvers:
        for nnz in args.nnz:
            rec = _run_one(args, solver, nnz, max_rss, log_dir)
            records.append(rec)
            machine["jax"] = rec.get("jax", machine.get("jax"))
            if rec["status"] == "ok":
                print(f"{solver:10s} nnz={nnz:.0e} K={args.K}: {_fmt_s(rec['sec_per_sweep'])} s/sweep, first "
                      f"{rec['first_sweep_seconds']:.3g} s, peak {rec['peak_rss_bytes'] / GIB:.2f} GiB "
                      f"(raw {rec['raw_bytes'] / GIB:.2f} + params {rec['param_bytes'] / GIB:.2f}; ratio "
                      f"{rec['ratio_peak_to_raw_plus_params']:.2f}), {rec['device']}, wall {rec['wall_seconds']:.0f} s",
                      flush=True)
            else:
                print(f"{solver:10s} nnz={nnz:.0e} K={args.K}: FAILED ({rec['reason']}); log {rec['log']}", flush=True)
            json_path.write_text(json.dumps({"machine": machine, "max_rss_bytes": max_rss, "records": records},
                                            indent=1))
            md_path.write_text(markdown(records, machine))
    print(markdown(records, machine))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
