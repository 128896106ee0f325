"""The one sampling driver (custom_inference.mcmc_driver) under the four Gibbs samplers.

- Draws saved from the former drivers (tests/data/sampler_draws_v0.npz, written by
  tests/data/make_sampler_draws_v0.py at commit 8571c06): HPF-Gibbs and BPMF reproduce them (to
  float64 rounding, `_assert_same`); SBMF and MCMC-FM changed key schedule, so their former draws are reproduced by a plain
  loop of their public ``step`` under the *former* schedule, and the driver's draws equal a plain
  loop under the driver's schedule.
- Checkpoint + resume after an interruption equals an uninterrupted run, bit for bit.
- Compile once: a second driver call with the same shapes (and a second step) does not retrace.
- One attrs schema; argument errors name the field.
"""

import sys
from functools import partial
from pathlib import Path

import jax
import numpy as np
import pytest

from custom_inference import base, bpmf, fm_mcmc, hpf_gibbs, mcmc_driver, sbmf

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))
import make_sampler_draws_v0 as mk  # noqa: E402

MODULES = {"hpf": hpf_gibbs, "sbmf": sbmf, "bpmf": bpmf, "fm": fm_mcmc}
S = mk.SETTINGS  # 2 chains, num_warmup 3 (2 units of thin 2), 4 kept draws, thin 2
N_WARM_UNITS = -(-S["num_warmup"] // S["thin"])


@pytest.fixture(scope="module", autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def saved():
    with np.load(DATA / "sampler_draws_v0.npz") as f:
        return {k: f[k] for k in f.files}


def _problem(saved, model):
    p = {k.split("/")[2]: v for k, v in saved.items() if k.startswith(f"{model}/data/")}
    return p, mk.build(model, p), mk.hyper(model)


def _sample(model, p, data, hyper, **kw):
    opts = dict(S, **{"progress": False, **kw})
    if model in ("sbmf", "bpmf"):
        opts.setdefault("gauge_rounds", 5)
    if model == "sbmf":
        opts.setdefault("predict_at", (p["pred_rows"], p["pred_cols"]))
    if model == "fm":
        opts.setdefault("predict_at", data)
    return MODULES[model].sample(mk.SEED, data, 2, hyper, **opts)


class _LazyRuns(dict):
    """model -> one driver run with the saved settings (the default block size), made when a test
    first asks for it (a process that runs only some of this file's tests runs only their samplers)."""

    def __init__(self, saved):
        super().__init__()
        self._saved = saved

    def __missing__(self, model):
        p, data, hyper = _problem(self._saved, model)
        self[model] = _sample(model, p, data, hyper)
        return self[model]


@pytest.fixture(scope="module")
def runs(saved):
    return _LazyRuns(saved)


def _assert_same(got, want, err_msg=""):
    """Integers exactly; floats to float64 rounding. The saved draws were written on another
    machine, and XLA's CPU code (instruction set, fusion inside a longer scan) may round the last bit
    differently (seen: 1.4e-14 on O(100) values), while a changed update or key schedule moves draws at
    O(1): relative 1e-11 separates the two with orders of magnitude to spare (6 draws x 2 sweeps of
    rounding growth at K = 2 stay below 1e-13)."""
    got, want = np.asarray(got), np.asarray(want)
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11, err_msg=err_msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)


def _assert_saved(idata, saved, model, groups=("posterior", "sample_stats")):
    n = 0
    for group in groups:
        for name in idata[group].data_vars:
            key = f"{model}/{group}/{name}"
            if key in saved:
                _assert_same(idata[group][name].values, saved[key], err_msg=key)
                n += 1
    assert n >= 4


def test_hpf_draws_and_lp_equal_the_former_driver(runs, saved):
    _assert_saved(runs["hpf"], saved, "hpf")


def test_bpmf_draws_and_lp_equal_the_former_driver(runs, saved):
    # The former driver ran one unit per compiled call; the default block runs the sweep inside a
    # longer scan that XLA compiles with other rounding (float64 differences ~1e-15), so the draws
    # and lp are compared to rounding only (`_assert_same`): relative 1e-11 leaves room for 6 draws x
    # 2 sweeps of K=2 Cholesky rounding growth, far below any change of schedule (which changes draws
    # at O(1)). This is also the check that the block size leaves the draws unchanged (the former
    # driver's one unit per call against the default block); a second run with block=1, compared at
    # the same tolerance, was dropped (test time: one more compiled block).
    _assert_saved(runs["bpmf"], saved, "bpmf")
    for name in bpmf.BPMFState._fields:
        assert f"bpmf/posterior/{name}" in saved  # every state variable is compared


def _jitted_step(model):
    """(the module's jitted public step with the driver runs' step options, its jit object): one
    object per sampler, shared by `_plain_loop` and `test_compile_once`, so that each step compiles
    once in this module (a new ``jax.jit`` per call would compile it again)."""
    mod = MODULES[model]
    if model == "fm":
        return mod.step_jit, mod.step_jit
    assert mod.ALGORITHM.step is mod.step  # the public step is the jitted one
    step_kw = {"gauge_rounds": 5} if model in ("sbmf", "bpmf") else {}
    if model == "bpmf":
        step_kw["chunk_size"] = bpmf.default_chunk_size(2)
    return partial(mod.step, **step_kw), mod.step


def _plain_loop(model, saved, schedule):
    """Kept draws of a Python loop of the public init/step (one chain at a time, jitted step)."""
    p, data, hyper = _problem(saved, model)
    mod = MODULES[model]
    spec, alg = mod.SPEC, mod.ALGORITHM
    d = spec.prepare(data, np.float64)
    h = hyper if spec.prepare_hyper is None else spec.prepare_hyper(hyper, np.float64)
    step, _ = _jitted_step(model)
    C, thin = S["num_chains"], S["thin"]
    key, init_key = jax.random.split(base.as_key(mk.SEED))
    states = [alg.init(k, d, 2, h, dtype=np.float64) for k in jax.random.split(init_key, C)]
    kept = []
    for u, (sweep_keys, is_kept) in enumerate(schedule(key, C, thin)):
        for c in range(C):
            for k in sweep_keys[c]:
                states[c], _ = step(k, states[c], d, h)
        if is_kept:
            kept.append([{n: np.asarray(getattr(s, n)) for n in spec.variables} for s in states])
    return {n: np.stack([np.stack([kept[t][c][n] for t in range(len(kept))]) for c in range(C)])
            for n in spec.variables}


def driver_schedule(key, C, thin):
    """mcmc_driver's schedule: per unit, key, sub = split(key); chain c: split(split(sub, C)[c], thin)."""
    for u in range(N_WARM_UNITS + S["num_samples"]):
        key, sub = jax.random.split(key)
        yield [jax.random.split(k, thin) for k in jax.random.split(sub, C)], u >= N_WARM_UNITS


def former_fm_schedule(key, C, thin):
    """MCMC-FM's former driver: as the driver's, after one split spent on lowering the program."""
    key, _ = jax.random.split(key)
    yield from driver_schedule(key, C, thin)


def former_sbmf_schedule(key, C, thin, block=50):
    """SBMF's former driver: blocks of min(50, num_samples) draws; per block key, sub = split(key),
    chain c's block key split(sub, C)[c], its draw keys split(., per_block), sweeps split(., thin);
    warm-up rounded up to whole blocks."""
    per_block = min(block, S["num_samples"])
    n_warm_blocks = -(-S["num_warmup"] // (per_block * thin))
    for b in range(n_warm_blocks + -(-S["num_samples"] // per_block)):
        key, sub = jax.random.split(key)
        draw_keys = [jax.random.split(k, per_block) for k in jax.random.split(sub, C)]
        for i in range(per_block):
            yield [jax.random.split(draw_keys[c][i], thin) for c in range(C)], b >= n_warm_blocks


@pytest.mark.parametrize("model", ["sbmf", "fm"])
def test_changed_samplers_equal_a_plain_loop_of_step_under_the_driver_schedule(runs, saved, model):
    loop = _plain_loop(model, saved, driver_schedule)
    for name, value in loop.items():
        _assert_same(runs[model].posterior[name].values, value, err_msg=name)


@pytest.mark.parametrize("model,schedule", [("sbmf", former_sbmf_schedule), ("fm", former_fm_schedule)])
def test_saved_draws_of_changed_samplers_are_their_former_schedule(saved, model, schedule):
    """Why SBMF's and MCMC-FM's draws changed: the same steps under the former key schedule give
    the saved draws (the kernels are unchanged)."""
    loop = _plain_loop(model, saved, schedule)
    for name, value in loop.items():
        _assert_same(value, saved[f"{model}/posterior/{name}"], err_msg=name)


def test_running_predictions_equal_the_mean_of_the_stored_draws(runs, saved):
    idata = runs["sbmf"]
    pred = idata.posterior["pred"].values.reshape(-1, 3)
    # same sums in another order: float64 rounding only
    np.testing.assert_allclose(idata.predictions["pred_mean"].values, pred.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(idata.predictions["pred_sd"].values, pred.std(axis=0, ddof=1), rtol=1e-8)
    _, design, _ = _problem(saved, "fm")
    mean, sd = fm_mcmc.predict(runs["fm"], design)
    np.testing.assert_allclose(runs["fm"].predictions["pred_mean"].values, mean, rtol=1e-9, atol=1e-12)


SCHEMA = {"model", "method", "source", "seed", "num_chains", "num_warmup", "num_warmup_run", "num_samples", "thin", "K",
          "n_rows", "n_cols", "nnz", "dtype", "seconds", "seconds_first_block", "seconds_per_sweep"}


@pytest.mark.parametrize("model", list(MODULES))
def test_one_attrs_schema_and_lp(runs, model):
    idata = runs[model]
    attrs = idata.posterior.attrs
    assert SCHEMA <= set(attrs), SCHEMA - set(attrs)
    assert any(k.startswith("hyper_") for k in attrs)
    assert attrs["num_warmup_run"] == N_WARM_UNITS * S["thin"] and attrs["K"] == 2 and attrs["dtype"] == "float64"
    assert attrs["seconds_per_sweep"] > 0
    assert idata.sample_stats["lp"].shape == (S["num_chains"], S["num_samples"])
    assert np.all(np.isfinite(idata.sample_stats["lp"].values))
    mod = MODULES[model]
    assert mod.ALGORITHM.kind == "mcmc" and mod.ALGORITHM.target is mod.log_joint


def test_lp_is_the_log_joint_of_the_kept_state(runs, saved):
    """Info of the new state: the last kept state's log joint equals lp (HPF recomputed here)."""
    p, data, hyper = _problem(saved, "hpf")
    idata = runs["hpf"]
    units = hpf_gibbs.SPEC.prepare(data, np.float64)
    state = hpf_gibbs.HPFGibbsState(*(idata.posterior[n].values[1, -1] for n in hpf_gibbs.HPFGibbsState._fields))
    assert float(hpf_gibbs.log_joint(state, units, hyper)) == pytest.approx(float(idata.sample_stats["lp"][1, -1]),
                                                                            rel=1e-12)


def test_resume_after_an_interruption_equals_an_uninterrupted_run(runs, saved, tmp_path):
    p, data, hyper = _problem(saved, "sbmf")
    path = tmp_path / "ckpt.npz"

    class Stop(Exception):
        pass

    def stop_after_two_blocks(done, states):
        if done >= 4:
            raise Stop

    with pytest.raises(Stop):  # the settings of sbmf.sample in `runs`, with a callback that stops it
        mcmc_driver.sample(sbmf.SPEC, mk.SEED, data, 2, hyper, **S, progress=False,
                           predict_at=(p["pred_rows"], p["pred_cols"]), checkpoint=path, checkpoint_every=1,
                           callback=stop_after_two_blocks, step_options={"gauge_rounds": 5})
    assert path.exists() and not path.with_name(path.name + ".tmp").exists()
    resumed = _sample("sbmf", p, data, hyper, checkpoint=path, resume=True)
    full = runs["sbmf"]
    for group in ("posterior", "sample_stats", "predictions"):
        for name in full[group].data_vars:
            np.testing.assert_array_equal(resumed[group][name].values, full[group][name].values, err_msg=name)
    with pytest.raises(ValueError, match="checkpoint"):
        _sample("sbmf", p, data, hyper, checkpoint=path, resume=True, num_samples=5)


@pytest.mark.parametrize("model", list(MODULES))
def test_compile_once(runs, saved, model):
    """A second driver call with the same shapes does not retrace the block; a second step call
    does not retrace the step (BlackJAX's test_compilation)."""
    p, data, hyper = _problem(saved, model)
    first = runs[model]  # (made here if no earlier test asked for it: before the counts are read)
    traces = mcmc_driver.TRACES[model]
    cache = mcmc_driver._block._cache_size()
    again = _sample(model, p, data, hyper, progress=False)
    assert mcmc_driver.TRACES[model] == traces and mcmc_driver._block._cache_size() == cache
    np.testing.assert_array_equal(again.sample_stats["lp"].values, first.sample_stats["lp"].values)
    mod = MODULES[model]
    step, jitted = _jitted_step(model)  # SBMF's and MCMC-FM's step compiled by _plain_loop above
    d = mod.SPEC.prepare(data, np.float64)
    h = hyper if mod.SPEC.prepare_hyper is None else mod.SPEC.prepare_hyper(hyper, np.float64)
    state = mod.init(jax.random.PRNGKey(0), d, 2, h, dtype=np.float64)
    state, _ = step(jax.random.PRNGKey(1), state, d, h)
    size = jitted._cache_size()
    assert size >= 1
    state, info = step(jax.random.PRNGKey(2), state, d, h)
    assert jitted._cache_size() == size
    # Info describes the new state
    lj = mod.log_joint(state, d, h)
    assert float(info.log_joint) == pytest.approx(float(lj), rel=1e-10)


@pytest.mark.parametrize("kw,field", [
    ({"num_chains": 0}, "num_chains"), ({"num_samples": 0}, "num_samples"), ({"thin": 0}, "thin"),
    ({"num_warmup": -1}, "num_warmup"), ({"num_chains": 1.5}, "num_chains"), ({"thin": True}, "thin"),
    ({"keep": ("nope",)}, "keep"), ({"checkpoint_every": 0}, "checkpoint_every"), ({"block": 0}, "block"),
    ({"predict_at": (np.array([0, 99]), np.array([0, 0]))}, "predict_at"),
    ({"predict_at": (np.array([0]), np.array([-1]))}, "predict_at"),
    ({"keep": ("pred",)}, "keep"), ({"resume": True}, "resume"),
])
def test_bad_arguments_raise_value_errors_naming_the_field(saved, kw, field):
    p, data, hyper = _problem(saved, "hpf")
    with pytest.raises(ValueError, match=field):
        hpf_gibbs.sample(0, data, 2, hyper, progress=False, **kw)


def test_fm_predict_at_out_of_range(saved):
    p, data, hyper = _problem(saved, "fm")
    with pytest.raises(ValueError, match="predict_at"):
        fm_mcmc.sample(0, data, 2, hyper, progress=False, predict_at=(np.array([0]), np.array([99]), np.ones(1), 1))
