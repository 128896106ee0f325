"""The shared VI driver (`custom_inference.vi_driver.run`) on synthetic sweeps whose ELBO sequence we set."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

from custom_inference import vi_driver


class Info(NamedTuple):
    elbo: float
    rel_change: float


def _sequence_sweep(values):
    """sweep(state, t) reporting values[t] as a scalar ELBO; the state counts the sweeps (a jax array)."""
    def sweep(state, t):
        return state + 1, values[t]
    return sweep


def test_tolerance_stops_at_the_first_small_relative_change():
    # relative changes: inf, 0.5, 0.1, 0.01, 0.001, ...: with tol 0.05 the 4th sweep (rel 0.01) stops
    values = [-100.0, -50.0, -45.0, -44.55, -44.50545, -44.5, -44.5]
    res = vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=len(values), tol=0.05, progress=False)
    assert res.converged and res.n_iter == 4 and int(res.state) == 4
    np.testing.assert_array_equal(res.elbo, values[:4])
    np.testing.assert_allclose(res.rel_change, [np.inf, 0.5, 0.1, 0.01], rtol=1e-12)
    np.testing.assert_array_equal(res.iteration, [1, 2, 3, 4])
    assert res.sweep_seconds.shape == (4,) and np.all(res.sweep_seconds >= 0)


def test_rel_change_from_the_report_is_used_as_is():
    """A report with rel_change (a solver's Info) decides the stop, not the driver's recomputation."""
    reports = [Info(-10.0, np.inf), Info(-9.0, 0.5), Info(-8.0, 1e-9), Info(-7.0, 0.3)]
    res = vi_driver.run(lambda s, t: (s, reports[t]), jnp.zeros(2), max_iter=4, tol=1e-6, progress=False)
    assert res.converged and res.n_iter == 3
    np.testing.assert_array_equal(res.rel_change, [np.inf, 0.5, 1e-9])


def test_max_iter_is_respected_and_tol_zero_never_stops():
    values = [-3.0] * 10  # relative change 0 after the first: stops with any tol > 0, never with tol = 0
    res = vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=6, tol=0.0, progress=False)
    assert not res.converged and res.n_iter == 6 and int(res.state) == 6
    assert res.elbo.shape == res.rel_change.shape == res.iteration.shape == res.sweep_seconds.shape == (6,)
    stopped = vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=6, tol=1e-12, progress=False)
    assert stopped.converged and stopped.n_iter == 2


def test_init_and_final_elbo_frame_the_trace():
    """init_elbo is entry 0 (the rg / sibm convention), final_elbo the last (the hpf convention)."""
    values = [-8.0, -4.0, -2.0]
    res = vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=3, progress=False, init_elbo=-16.0,
                        final_elbo=lambda s: -1.0)
    np.testing.assert_array_equal(res.elbo, [-16.0, -8.0, -4.0, -2.0, -1.0])
    np.testing.assert_array_equal(res.rel_change, [np.inf, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(res.iteration, [0, 1, 2, 3, 3])
    assert res.n_iter == 3 and res.sweep_seconds.shape == (3,)


def test_last_rel_change_is_the_one_the_tolerance_saw():
    """With a final_elbo record, the reported last relative change is the last sweep's (the value tested
    against tol), not the final record's: the run report, the attrs and the "not converged" note agree."""
    values = [-8.0, -4.0, -3.0]  # sweep rels: inf, 0.5, 0.25; the final record -2.9 adds 0.0333
    res = vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=3, tol=1e-3, progress=False,
                        final_elbo=lambda s: -2.9)
    assert not res.converged
    assert res.last_rel_change == pytest.approx(0.25, rel=1e-12)
    assert res.rel_change[-1] == pytest.approx(0.1 / 3.0, rel=1e-12)


def test_none_reports_record_nothing_and_evaluate_overrides():
    res = vi_driver.run(lambda s, t: (s + 1, None if t % 2 == 0 else -float(10 - t)), jnp.asarray(0), max_iter=5,
                        progress=False)
    np.testing.assert_array_equal(res.elbo, [-9.0, -7.0])
    np.testing.assert_array_equal(res.iteration, [2, 4])
    assert res.n_iter == 5
    ev = vi_driver.run(lambda s, t: (s + 1, None), jnp.asarray(0), max_iter=3, progress=False,
                       evaluate=lambda s: -10.0 / (1 + s))
    np.testing.assert_allclose(ev.elbo, [-5.0, -10 / 3, -2.5], rtol=1e-15)
    empty = vi_driver.run(lambda s, t: (s, None), jnp.asarray(0), max_iter=2, tol=1.0, progress=False)
    assert empty.elbo.shape == (0,) and empty.n_iter == 2 and not empty.converged


@pytest.mark.parametrize("bad, where", [(np.nan, "at sweep 3"), (np.inf, "at sweep 3"), (-np.inf, "at sweep 3")])
def test_non_finite_elbo_raises_naming_the_sweep(bad, where):
    values = [-3.0, -2.0, bad, -1.0]
    with pytest.raises(FloatingPointError, match=f"ELBO became .* {where}; try float64"):
        vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=4, progress=False)


def test_non_finite_init_final_and_evaluate_raise():
    sweep = _sequence_sweep([-1.0, -1.0])
    with pytest.raises(FloatingPointError, match="initial state"):
        vi_driver.run(sweep, jnp.asarray(0), max_iter=2, progress=False, init_elbo=np.nan)
    with pytest.raises(FloatingPointError, match="after sweep 2"):
        vi_driver.run(sweep, jnp.asarray(0), max_iter=2, progress=False, final_elbo=lambda s: jnp.nan)
    with pytest.raises(FloatingPointError, match="at sweep 1"):
        vi_driver.run(sweep, jnp.asarray(0), max_iter=2, progress=False, evaluate=lambda s: np.inf)


def test_callback_sees_every_sweep_in_order_before_the_stop():
    seen = []
    values = [-4.0, -2.0, -2.0, -2.0]
    res = vi_driver.run(_sequence_sweep(values), jnp.asarray(0), max_iter=4, tol=1e-3, progress=False,
                        callback=lambda t, s, r: seen.append((t, int(s), r)))
    assert res.n_iter == 3 and seen == [(0, 1, -4.0), (1, 2, -2.0), (2, 3, -2.0)]


def test_timings():
    res = vi_driver.run(_sequence_sweep([-1.0, -0.5, -0.25]), jnp.asarray(0), max_iter=3, progress=False)
    assert res.seconds >= np.sum(res.sweep_seconds) >= 0
    assert res.seconds_after_compile == pytest.approx(np.sum(res.sweep_seconds[1:]))
    assert res.seconds_per_iter == pytest.approx(res.seconds_after_compile / 2)
    one = vi_driver.run(_sequence_sweep([-1.0]), jnp.asarray(0), max_iter=1, progress=False)
    assert one.seconds_after_compile == 0.0 and one.seconds_per_iter == 0.0  # nothing timed after compilation


def test_progress_bar_runs():
    res = vi_driver.run(_sequence_sweep([-2.0, -1.0]), jnp.asarray(0), max_iter=2, progress=True, desc="test")
    assert res.n_iter == 2


@pytest.mark.parametrize("kw, field", [({"max_iter": 0}, "max_iter"), ({"max_iter": 2.5}, "max_iter"),
                                       ({"max_iter": True}, "max_iter"), ({"max_iter": "3"}, "max_iter"),
                                       ({"max_iter": 3, "tol": -1.0}, "tol"), ({"max_iter": 3, "tol": np.nan}, "tol"),
                                       ({"max_iter": 3, "tol": None}, "tol")])
def test_bad_arguments_raise_before_any_sweep(kw, field):
    calls = []
    with pytest.raises(ValueError, match=field):
        vi_driver.run(lambda s, t: calls.append(t) or (s, -1.0), jnp.asarray(0), progress=False, **kw)
    assert not calls


def test_check_fit_args_names_the_field():
    vi_driver.check_fit_args(1, 0.0, 0)
    with pytest.raises(ValueError, match="n_draws"):
        vi_driver.check_fit_args(1, 0.0, -1)
    with pytest.raises(ValueError, match="n_draws"):
        vi_driver.check_fit_args(1, 0.0, False)
    with pytest.raises(ValueError, match="max_epochs"):
        vi_driver.check_fit_args(0, 0.0, 1, max_iter_name="max_epochs")


# --------------------------------------------------------------------------------------------- checkpoints


def _logistic_sweep(state, t):
    """A deterministic float64 sweep (a logistic map on the host side of JAX) reporting a state-dependent ELBO."""
    x = state["x"]
    new = {"x": 3.7 * x * (1.0 - x), "n": state["n"] + 1}
    return new, -float(jnp.sum(new["x"] ** 2)) - 10.0


def _start():
    import jax

    with jax.enable_x64(True):
        return {"x": jnp.asarray(np.linspace(0.1, 0.9, 5), jnp.float64), "n": jnp.asarray(0, jnp.int32)}


def test_stopped_and_resumed_run_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    import jax

    ckpt = tmp_path / "c.npz"
    with jax.enable_x64(True):
        full = vi_driver.run(_logistic_sweep, _start(), max_iter=9, progress=False, init_elbo=-1.0)
        vi_driver.run(_logistic_sweep, _start(), max_iter=5, progress=False, init_elbo=-1.0, checkpoint=ckpt,
                      checkpoint_every=2)
        _, n_done, trace, _ = vi_driver.load_checkpoint(ckpt, _start())
        assert n_done == 5 and trace["elbo"].shape == (6,)
        resumed = vi_driver.run(_logistic_sweep, _start(), max_iter=9, progress=False, init_elbo=-1.0,
                                checkpoint=ckpt, checkpoint_every=2, resume=True)
    np.testing.assert_array_equal(resumed.state["x"], full.state["x"])
    assert int(resumed.state["n"]) == 9 and resumed.n_iter == 9
    for f in ("elbo", "rel_change", "iteration"):
        np.testing.assert_array_equal(getattr(resumed, f), getattr(full, f))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]  # temp file replaced atomically
    # a finished run resumes to itself without a sweep
    again = vi_driver.run(_logistic_sweep, _start(), max_iter=9, progress=False, checkpoint=ckpt, resume=True)
    np.testing.assert_array_equal(again.elbo, full.elbo)


def test_checkpoint_keeps_float64_when_x64_is_off(tmp_path):
    import jax

    with jax.enable_x64(True):
        state = {"a": jnp.asarray([1.0 + 2.0**-40], jnp.float64)}
        vi_driver.save_checkpoint(tmp_path / "s.npz", state, n_iter=3, extra={"rng": np.asarray('{"s": 1}')})
    with jax.enable_x64(False):
        back, n_iter, _, extra = vi_driver.load_checkpoint(tmp_path / "s.npz", {"a": jnp.zeros(1)})
    assert back["a"].dtype == np.float64 and back["a"][0] == 1.0 + 2.0**-40 and n_iter == 3
    assert str(extra["rng"]) == '{"s": 1}'
    with pytest.raises(ValueError, match="state arrays"):
        vi_driver.load_checkpoint(tmp_path / "s.npz", {"a": jnp.zeros(1), "b": jnp.zeros(1)})
    with pytest.raises(FileNotFoundError):
        vi_driver.load_checkpoint(tmp_path / "missing.npz", state)
    with pytest.raises(ValueError, match="checkpoint_every"):
        vi_driver.run(_logistic_sweep, _start(), max_iter=2, progress=False, checkpoint=tmp_path / "x.npz",
                      checkpoint_every=0)


def test_host_seed_agrees_for_an_int_and_its_key():
    import jax

    assert vi_driver.host_seed(5) == 5 == vi_driver.host_seed(jax.random.PRNGKey(5))
    assert vi_driver.host_seed(jax.random.key(5)) == 5
    assert vi_driver.host_seed(jax.random.split(jax.random.PRNGKey(0))[1]) > 2**32
    with pytest.raises(TypeError):
        vi_driver.host_seed(1.5)


def test_checkpoint_file_has_the_usual_mode(tmp_path):
    """The atomic write (mkstemp, then os.replace) must not leave the checkpoint readable by its owner
    only (0o600): it gets 0o666 less the umask, like any file the user writes (issue 24)."""
    import os
    from collections import namedtuple

    S = namedtuple("S", "a")
    old = os.umask(0o022)
    try:
        path = vi_driver.save_checkpoint(tmp_path / "c.npz", S(np.arange(3.0)), n_iter=1)
    finally:
        os.umask(old)
    assert (os.stat(path).st_mode & 0o777) == 0o644


# --------------------------------------------------------------------------------------------- fit(algorithm)
# `vi_driver.fit` on a tiny fake Algorithm (issue 25): the driver, not the solver, must honour tol,
# max_iter, checkpoint / resume and interruption, and write one metadata layout.


class _State(NamedTuple):
    x: jnp.ndarray  # (3,) float64
    n: jnp.ndarray  # () int32, steps taken


class _Info(NamedTuple):
    elbo: jnp.ndarray


def _fake_init(key, data, K, hyper):
    import jax

    return _State(jax.random.uniform(key, (K,), jnp.float64) + 5.0, jnp.asarray(0, jnp.int32))


def _fake_target(state, data, hyper):
    return -jnp.sum((state.x - data) ** 2) - 1.0  # maximum -1 at x = data


def _fake_step(key, state, data, hyper, *, rate=0.5):
    new = _State(state.x + rate * (data - state.x), state.n + 1)  # the gap shrinks by (1 - rate) per step
    return new, _Info(_fake_target(new, data, hyper))


def _fake_algorithm():
    from custom_inference import base

    return base.Algorithm("fake-vi", "vi", _fake_init, _fake_step, _fake_target, "elbo", {"x": ("component",), "n": ()},
                          "project addition (test)").check()


def _fake_output(**fields):
    return vi_driver.Output("fake", "cavi", lambda s: (vi_driver.point_posterior({"x": s.x}), "mean of q (n_draws=0)"),
                            dims={"x": ["component"]}, params=lambda s: s._asdict(), **fields)


def _fake_fit(**options):
    import jax

    with jax.enable_x64(True):
        data = jnp.asarray([1.0, 2.0, 3.0])
        return vi_driver.fit(_fake_algorithm(), data, options=vi_driver.FitOptions(progress=False, **options),
                             output=_fake_output(), key=0, K=3, hyper=None, init_elbo=True)


def test_fit_honours_max_iter_and_tol():
    ran = _fake_fit(max_iter=6, tol=0.0)
    assert int(ran.state.n) == 6 and ran.trace.shape == (7,)  # init + 6 sweeps: tol 0 never stops
    attrs = ran.idata.posterior.attrs
    assert attrs["n_iter"] == 6 and attrs["converged"] == 0 and attrs["max_iter"] == 6
    # the gap to the optimum halves per step, so |dL| / |L| falls below 1e-3 after a few steps, well before 60
    stopped = _fake_fit(max_iter=60, tol=1e-3)
    n = int(stopped.state.n)
    assert 1 < n < 60 and stopped.idata.vi_trace.attrs["converged"] == 1 and stopped.idata.vi_trace.attrs["n_iter"] == n
    rel = stopped.idata.vi_trace["rel_change"].values
    assert rel[-1] < 1e-3 and np.all(rel[1:-1] >= 1e-3)  # stopped at the first small change, not later


def test_fit_checkpoint_and_resume_equal_the_uninterrupted_fit(tmp_path):
    ckpt = tmp_path / "fake.npz"
    full = _fake_fit(max_iter=9)
    part = _fake_fit(max_iter=4, checkpoint=ckpt, checkpoint_every=3)
    assert int(part.state.n) == 4
    resumed = _fake_fit(max_iter=9, checkpoint=ckpt, checkpoint_every=3, resume=True)
    np.testing.assert_array_equal(resumed.trace, full.trace)
    np.testing.assert_array_equal(np.asarray(resumed.state.x), np.asarray(full.state.x))
    assert int(resumed.state.n) == 9  # the steps continued from the checkpoint (a restart would also give 9 with
    assert resumed.idata.posterior.attrs["resumed_from"] == 4  # the same x, so the driver must say it resumed)
    fresh = _fake_fit(max_iter=9, checkpoint=tmp_path / "other.npz", resume=True)  # no file yet: starts afresh
    assert fresh.idata.posterior.attrs["resumed_from"] == 0


def test_fit_interrupted_by_a_signal_stops_at_a_checkpoint_that_resumes(tmp_path):
    import os
    import signal

    from custom_inference import base

    ckpt = tmp_path / "fake.npz"

    def interrupt(t, state, report):
        if t == 2:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(base.RunInterrupted, match="after iteration 3 of 8"):
        _fake_fit(max_iter=8, checkpoint=ckpt, checkpoint_every=100, callback=interrupt)
    assert base.read_checkpoint_fingerprint(ckpt)[1] == 3
    resumed = _fake_fit(max_iter=8, checkpoint=ckpt, checkpoint_every=100, resume=True)
    np.testing.assert_array_equal(resumed.trace, _fake_fit(max_iter=8).trace)


def test_fit_writes_one_metadata_layout_and_refuses_clashing_attrs():
    import jax

    res = _fake_fit(max_iter=3)
    for group in res.idata.groups():
        attrs = res.idata[group].attrs
        missing = [k for k in vi_driver.DRIVER_ATTRS if k not in attrs]
        assert not missing, (group, missing)
    attrs = res.idata.posterior.attrs
    got = tuple(attrs[k] for k in ("algorithm", "kind", "target", "K", "seed"))
    assert got == ("fake-vi", "vi", "elbo", 3, 0)
    assert attrs["seconds"] >= attrs["seconds_first_iter"] >= 0 and attrs["dtype"] == "float64"
    with jax.enable_x64(True), pytest.raises(ValueError, match="repeat the driver's attrs"):
        vi_driver.fit(_fake_algorithm(), jnp.zeros(3), options=vi_driver.FitOptions(max_iter=1, progress=False),
                      output=_fake_output(attrs={"n_iter": 5}), key=0, K=3, hyper=None)


def test_fit_options_share_the_driver_fields_and_refuse_unknown_names():
    from custom_inference import base, mcmc_driver

    shared = set(base.RunOptions.names())
    assert shared <= set(vi_driver.FitOptions.names()) and shared <= set(mcmc_driver.SampleOptions.names())
    opts = vi_driver.FitOptions.of(mcmc_driver.SampleOptions(progress=False, checkpoint="c.npz"), max_iter=3)
    assert (opts.progress, opts.checkpoint, opts.max_iter) == (False, "c.npz", 3)
    with pytest.raises(TypeError, match="num_chains"):
        vi_driver.FitOptions.of(None, num_chains=2)


def test_run_options_decorator_keeps_the_old_keywords():
    import inspect

    from custom_inference import mcmc_driver

    @mcmc_driver.run_options(num_samples=7)
    def sample(key, data, *, own=1, options):
        return options, own

    opts, own = sample(0, None, num_chains=2, own=3)
    assert (opts.num_chains, opts.num_samples, own) == (2, 7, 3)
    opts, _ = sample(0, None, options=mcmc_driver.SampleOptions(thin=4), thin=5)
    assert opts.thin == 5 and opts.num_samples == 1000  # keywords override the given options object
    params = inspect.signature(sample).parameters
    assert params["num_samples"].default == 7 and "num_warmup" in params and "options" in params
    with pytest.raises(TypeError):
        sample(0, None, num_chain=2)


def test_a_report_with_converged_ends_the_run_as_converged(tmp_path):
    """`Report.converged` (a solver's own rule, issue 27) stops after that sweep with converged True, with
    tol = 0; the checkpoint records it, so a resumed run does not go on."""
    def sweep(s, t):
        return s + 1, vi_driver.Report(stats={"x": float(t)}, converged=(t == 2))

    res = vi_driver.run(sweep, jnp.asarray(0), max_iter=10, tol=0.0, progress=False, checkpoint=tmp_path / "c.npz")
    assert res.converged and not res.stopped and res.n_iter == 3 and int(res.state) == 3
    np.testing.assert_array_equal(res.stats["x"], [0.0, 1.0, 2.0])
    again = vi_driver.run(sweep, jnp.asarray(0), max_iter=10, progress=False, checkpoint=tmp_path / "c.npz",
                          resume=True)
    assert again.converged and again.n_iter == 3 and int(again.state) == 3
    plain = vi_driver.run(lambda s, t: (s + 1, vi_driver.Report(stats={"x": 1.0})), jnp.asarray(0), max_iter=4,
                          progress=False)
    assert not plain.converged and plain.n_iter == 4  # the default Report never stops the run
