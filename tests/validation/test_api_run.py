"""The front door's run is honest (issue 24): checkpoints are bound to the run that wrote them, a
resume says so and equals the uninterrupted fit, SIGINT / SIGTERM stop at a consistent checkpoint,
every fit carries a run summary (iterations, convergence, R-hat / ESS on predictions for samplers,
dropped users and items, seconds per phase), and errors speak the user's terms (their column names
and ids, the valid options, "not a factorbayes artifact").

Small data and few iterations throughout: these tests check bookkeeping and messages, not
statistics, so every assertion is exact (no tolerances)."""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np
import pandas as pd
import pytest

from custom_inference import base, vi_driver
from validation.frontdoor import api, tables

COLS = dict(user_col="reader", item_col="book", value_col="stars")


@pytest.fixture(scope="module")
def ratings():
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"reader": [f"u{k}" for k in rng.integers(0, 25, 260)],
                       "book": [f"b{k}" for k in rng.integers(0, 18, 260)],
                       "stars": rng.integers(1, 6, 260)}).drop_duplicates(["reader", "book"])
    return df.reset_index(drop=True)


def _hpf(df, **kw):
    opts = {"K": 2, "seed": 0, "max_iter": 6, "n_draws": 20, "progress": False, **COLS, **kw}
    return api.fit("hpf", df, **opts)


class _Boom(Exception):
    pass


def _no_compute(monkeypatch, name):
    """Make ``name``'s solver raise if called: a refusal must come before any computation."""
    def boom(*a, **k):
        raise _Boom(f"{name} solver called")

    monkeypatch.setitem(api.ADAPTERS, name, dataclasses.replace(api.ADAPTERS[name], run=boom))


# -- checkpoints bound to their run -------------------------------------------------------------


@pytest.fixture(scope="module")
def hpf_checkpoint(ratings, tmp_path_factory):
    """A finished HPF fit's checkpoint folder (K=2, max_iter=6, seed 0, transform none)."""
    folder = tmp_path_factory.mktemp("ckpt")
    with pytest.warns(UserWarning, match="not converged"):
        _hpf(ratings, resume_from=folder)
    return folder


def _changed_value(df):
    out = df.copy()
    out.loc[0, "stars"] = 5 if out.loc[0, "stars"] != 5 else 4
    return out


@pytest.mark.parametrize("change, fields", [
    (dict(df=_changed_value), ["data_sha256: checkpoint '"]),
    (dict(K=3), ["K: checkpoint 2, this run 3"]),
    (dict(transform="round"), ["transform: checkpoint 'none', this run 'round'"]),
    (dict(tol=1e-3), ["option tol: checkpoint 1e-06, this run 0.001"]),
    (dict(max_iter=7), ["option max_iter: checkpoint 6, this run 7"]),
    (dict(seed=1), ["seed: checkpoint 0, this run 1"]),
    (dict(dtype="float32"), ["dtype: checkpoint 'default', this run 'float32'"]),
    (dict(K=3, transform="round"), ["K: checkpoint 2, this run 3", "transform: checkpoint 'none', this run 'round'"]),
])
def test_a_checkpoint_of_another_run_is_refused_before_computing(ratings, hpf_checkpoint, monkeypatch, change, fields):
    change = dict(change)
    df = change.pop("df", lambda d: d)(ratings)
    _no_compute(monkeypatch, "hpf")
    with pytest.raises(ValueError) as err:
        _hpf(df, resume_from=hpf_checkpoint, **change)
    msg = str(err.value)
    path = str(hpf_checkpoint / "hpf.npz")
    assert f"checkpoint {path} was written by another run" in msg
    assert f"differs in {len(fields)} field(s)" in msg
    for f in fields:
        assert f in msg
    assert f"delete {path}" in msg and "choose another checkpoint folder" in msg


def test_another_model_in_the_same_file_is_refused(ratings, hpf_checkpoint, tmp_path, monkeypatch):
    """The file name carries the model, so copy HPF's checkpoint to where PSM's would be."""
    (tmp_path / "psm.npz").write_bytes((hpf_checkpoint / "hpf.npz").read_bytes())
    _no_compute(monkeypatch, "psm")
    with pytest.raises(ValueError, match=r"model: checkpoint 'hpf', this run 'psm'") as err:
        api.fit("psm", ratings, K=2, seed=0, max_iter=6, progress=False, resume_from=tmp_path, **COLS)
    assert "solver: checkpoint 'draws from q (CAVI)', this run 'draws from q (VB)'" in str(err.value)


def test_the_same_run_resumes_from_a_finished_checkpoint_without_computing_again(ratings, hpf_checkpoint, capsys):
    with pytest.warns(UserWarning, match="not converged"):
        a = _hpf(ratings, resume_from=hpf_checkpoint, progress=True)
    assert "resuming from iteration 6 of 6" in capsys.readouterr().err
    assert a.summary()["iterations"]["resumed_from"] == 6
    assert a.summary()["iterations"]["run"] == 6


@pytest.mark.parametrize("content, why", [
    (b"not a zip file at all", "garbage"),
    (None, "foreign npz"),
    ("pickled", "object array"),
    ("old", "no fingerprint"),
])
def test_a_damaged_or_foreign_checkpoint_names_the_file(ratings, tmp_path, monkeypatch, content, why):
    path = tmp_path / "hpf.npz"
    if content is None:
        np.savez(path, something=np.arange(3))
    elif content == "pickled":
        np.savez(path, n_iter__=np.asarray(3), run_fingerprint__=np.asarray([{"K": 2}], dtype=object))
    elif content == "old":
        np.savez(path, n_iter__=np.asarray(3), n_leaves__=np.asarray(1), state__0=np.zeros(2))
    else:
        path.write_bytes(content)
    _no_compute(monkeypatch, "hpf")
    with pytest.raises(ValueError) as err:
        _hpf(ratings, resume_from=tmp_path)
    msg = str(err.value)
    assert f"checkpoint {path}" in msg
    if why == "no fingerprint":
        assert "holds no run fingerprint" in msg
    else:
        assert "is damaged or is not a factorbayes checkpoint" in msg
    assert f"delete {path}" in msg


def test_the_drivers_refuse_a_damaged_file_naming_it(tmp_path):
    """Below the front door: `vi_driver.load_checkpoint` and a sampler's resume name the file."""
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=f"checkpoint {bad} is damaged"):
        vi_driver.load_checkpoint(bad, {"a": np.zeros(1)})
    with pytest.raises(ValueError, match=f"checkpoint {bad} is damaged"):
        base.read_checkpoint_fingerprint(bad)


def test_the_vi_driver_stores_and_checks_the_fingerprint_and_the_shapes(tmp_path):
    path = tmp_path / "s.npz"
    state = {"a": np.zeros(3)}
    vi_driver.save_checkpoint(path, state, n_iter=2, fingerprint={"K": 3, "data_sha256": "aa"})
    assert base.read_checkpoint_fingerprint(path) == ({"K": 3, "data_sha256": "aa"}, 2)
    vi_driver.load_checkpoint(path, state, fingerprint={"K": 3, "data_sha256": "aa"})  # the same run: fine
    with pytest.raises(ValueError) as err:
        vi_driver.load_checkpoint(path, state, fingerprint={"K": 4, "data_sha256": "bb"})
    assert "differs in 2 field(s):\n  K: checkpoint 3, this run 4\n  data_sha256: checkpoint 'aa', this run 'bb'" in str(err.value)
    with base.run_fingerprint({"K": 4, "data_sha256": "aa"}):  # the front door's channel
        with pytest.raises(ValueError, match="K: checkpoint 3, this run 4"):
            vi_driver.load_checkpoint(path, state)
    with pytest.raises(ValueError, match=r"state array 0 has shape \(3,\), this run's has \(4,\)"):
        vi_driver.load_checkpoint(path, {"a": np.zeros(4)})


def test_sibm_resumed_with_another_K_is_refused(tmp_path, monkeypatch):
    """Issue 24: a SIBM fit resumed from a checkpoint of another K returned the old K."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"reader": rng.integers(0, 20, 150), "book": rng.integers(0, 15, 150)}).drop_duplicates()
    kw = dict(user_col="reader", item_col="book", seed=0, max_iter=4, progress=False, resume_from=tmp_path)
    with pytest.warns(UserWarning, match="not converged"):
        api.fit("sibm", df, K=2, **kw)
    _no_compute(monkeypatch, "sibm")
    with pytest.raises(ValueError, match="K: checkpoint 2, this run 3"):
        api.fit("sibm", df, K=3, **kw)
    monkeypatch.undo()
    # the solver called directly (no front door): the shapes of the saved state refuse it
    from custom_inference import sibm
    from custom_inference.data import Observations
    from ppl_models.sibm import SIBMHyper

    obs = Observations.from_coo(df["reader"].to_numpy(), df["book"].to_numpy(), np.ones(len(df)),
                                (20, 15), kind="binary")
    with pytest.raises(ValueError, match=r"written with another K or other data sizes"):
        sibm.fit(0, obs, 3, SIBMHyper(), max_iter=4, progress=False, checkpoint=tmp_path / "sibm.npz", resume=True)


@pytest.mark.parametrize("name, opts", [
    ("hpf", {"max_iter": 6, "n_draws": 20}),
    ("hpf-gibbs", {"num_chains": 2, "num_warmup": 4, "num_samples": 8, "block": 2}),
])
def test_an_interrupted_fit_resumes_bit_for_bit_and_says_so(name, opts, ratings, tmp_path, capsys):
    kw = dict(K=2, seed=0, **COLS, **opts)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        full = api.fit(name, ratings, progress=False, **kw)
        with pytest.raises(api.Interrupted, match="stopped after checkpoint 2"):
            api.fit(name, ratings, progress=False, resume_from=tmp_path, checkpoint_every=1, _stop_after=2, **kw)
        fp, done = base.read_checkpoint_fingerprint(tmp_path / f"{name}.npz")
        assert fp["model"] == name and fp["K"] == 2 and done > 0
        resumed = api.fit(name, ratings, progress=True, resume_from=tmp_path, checkpoint_every=1, **kw)
    err = capsys.readouterr().err
    total = 6 if name == "hpf" else 4 + 8
    assert f"resuming from {'iteration' if name == 'hpf' else 'unit'} {done} of {total}" in err
    assert resumed.summary()["iterations"]["resumed_from"] == done
    a, b = tables._posterior(full.idata), tables._posterior(resumed.idata)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# -- SIGINT / SIGTERM ---------------------------------------------------------------------------


def _counting_sweep(send_at, signum):
    def sweep(s, t):
        if t == send_at:
            os.kill(os.getpid(), signum)
        return s + 1.0, -1.0 / (t + 1.0)
    return sweep


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_checkpoints_the_sweep_in_progress_and_names_it(tmp_path, signum):
    path = tmp_path / "run.npz"
    before = signal.getsignal(signum)
    with pytest.raises(base.RunInterrupted) as err:
        vi_driver.run(_counting_sweep(2, signum), np.asarray(0.0), max_iter=8, progress=False, checkpoint=path,
                      checkpoint_every=100, desc="toy")
    msg = str(err.value)
    assert f"toy stopped by {signal.Signals(signum).name} after iteration 3 of 8" in msg
    assert f"the last consistent checkpoint is {path}" in msg and "resume" in msg
    assert isinstance(err.value, KeyboardInterrupt)
    assert signal.getsignal(signum) is before  # handlers restored
    state, n_done, _, _ = vi_driver.load_checkpoint(path, np.asarray(0.0))
    assert n_done == 3 and float(state) == 3.0
    resumed = vi_driver.run(_counting_sweep(-1, signum), np.asarray(0.0), max_iter=8, progress=False,
                            checkpoint=path, resume=True)
    full = vi_driver.run(_counting_sweep(-1, signum), np.asarray(0.0), max_iter=8, progress=False)
    assert float(resumed.state) == float(full.state) == 8.0
    np.testing.assert_array_equal(resumed.elbo, full.elbo)


def test_a_signal_stops_a_sampler_at_a_consistent_checkpoint(ratings, tmp_path):
    """Through the front door: SIGTERM arrives right after the first checkpoint (units 0-6, sent by a
    hook of `base.on_checkpoint`), the run stops there and names the file; resuming finishes the run
    and equals the uninterrupted one."""
    kw = dict(K=2, seed=0, num_chains=2, num_warmup=4, num_samples=8, block=2, progress=False, **COLS)
    sent = []

    def hook(path, n_done):
        if not sent:
            sent.append(n_done)
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with base.on_checkpoint(hook), pytest.raises(base.RunInterrupted, match="stopped by SIGTERM after iteration 6 of 12"):
        api.fit("hpf-gibbs", ratings, resume_from=tmp_path, checkpoint_every=3, **kw)
    assert signal.getsignal(signal.SIGTERM) is before
    assert base.read_checkpoint_fingerprint(tmp_path / "hpf-gibbs.npz")[1] == 6
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        resumed = api.fit("hpf-gibbs", ratings, resume_from=tmp_path, checkpoint_every=3, **kw)
        full = api.fit("hpf-gibbs", ratings, **kw)
    np.testing.assert_array_equal(tables._posterior(resumed.idata)["theta"], tables._posterior(full.idata)["theta"])


def test_a_signal_between_checkpoints_checkpoints_the_block_just_run(tmp_path):
    """The sampling driver: SIGINT arrives after block 1 (2 units), with checkpoints due only every 5
    blocks: the driver writes the 2 units done and stops, naming the file."""
    from custom_inference import hpf_gibbs, mcmc_driver
    from custom_inference.data import Observations
    from ppl_models.hpf import HPFHyper

    rng = np.random.default_rng(0)
    obs = Observations.from_coo(np.repeat(np.arange(6), 3), np.tile(np.arange(3), 6), rng.integers(1, 4, 18),
                                (6, 3), kind="count")
    path = tmp_path / "g.npz"

    def callback(done, states):
        if done == 2:
            os.kill(os.getpid(), signal.SIGINT)

    kw = dict(num_chains=2, num_warmup=2, num_samples=6, block=2, progress=False)
    with pytest.raises(base.RunInterrupted, match=f"stopped by SIGINT after iteration 2 of 8; the last consistent "
                                                  f"checkpoint is {path}"):
        mcmc_driver.sample(hpf_gibbs.SPEC, 0, obs, 2, HPFHyper(), checkpoint=path, checkpoint_every=5,
                           callback=callback, **kw)
    assert base.read_checkpoint_fingerprint(path) == (None, 2)
    resumed = mcmc_driver.sample(hpf_gibbs.SPEC, 0, obs, 2, HPFHyper(), checkpoint=path, resume=True, **kw)
    full = mcmc_driver.sample(hpf_gibbs.SPEC, 0, obs, 2, HPFHyper(), **kw)
    np.testing.assert_array_equal(resumed.posterior["theta"].values, full.posterior["theta"].values)


# -- the run summary ----------------------------------------------------------------------------


def test_dropped_users_are_warned_about_and_kept_in_the_summary(tmp_path):
    """Issue 24: binarizing dropped user 442 without a word."""
    df = pd.DataFrame({"reader": [442, 442, 7, 7, 8, 8, 9], "book": ["a", "b", "a", "c", "b", "c", "z"],
                       "stars": [1, 2, 5, 4, 5, 5, 2]})
    with pytest.warns(UserWarning, match=r"left 2 user\(s\) \(e.g. reader \[9, 442\]\) and 1 item\(s\) \(e.g. book \['z'\]\)"):
        m = api.fit("sibm", df, K=2, seed=0, max_iter=3, progress=False, transform="binarize", threshold=4, **COLS)
    d = m.summary()["data"]
    assert (d["dropped_users"], d["dropped_user_ids"], d["dropped_items"], d["dropped_item_ids"]) == (2, [9, 442], 1, ["z"])
    assert d["dropped_entries"] == 3 and d["users"] == 2 and d["items"] == 3 and d["entries"] == 4
    back = api.load(m.save(tmp_path / "m.nc"))
    assert back.summary() == m.summary()
    assert "dropped by the transform: 2 user(s), e.g. [9, 442]" in back.summary_text()


def test_a_vi_fit_at_its_cap_says_it_did_not_converge(ratings):
    with pytest.warns(UserWarning, match=r"hpf: not converged: stopped at the cap of 3 iterations .* tol 1e-06; raise max_iter"):
        m = _hpf(ratings, max_iter=3)
    it = m.summary()["iterations"]
    assert it["run"] == 3 and it["max"] == 3 and it["converged"] is False and it["tol"] == 1e-6
    assert it["last_rel_change"] > 1e-6
    assert "NOT converged" in m.summary_text()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a converged fit does not warn
        ok = _hpf(ratings, max_iter=50, tol=0.05)
    it = ok.summary()["iterations"]
    assert it["converged"] is True and it["run"] < 50 and it["last_rel_change"] < 0.05


def test_a_sampler_reports_rhat_and_ess_on_predictions(ratings):
    import arviz as az

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        m = api.fit("hpf-gibbs", ratings, K=2, seed=0, num_chains=2, num_warmup=10, num_samples=30, progress=False, **COLS)
    s = m.summary()
    diag = s["diagnostics"]
    assert (diag["chains"], diag["draws_per_chain"]) == (2, 30)
    # recomputed independently: ArviZ on the predicted rates at the same 100 training cells (seed 0)
    seen = m.seen.tocoo()
    pick = np.sort(np.random.default_rng(0).choice(seen.nnz, size=100, replace=False))
    post = m.idata.posterior
    theta, beta = post["theta"].values, post["beta"].values  # (C, D, I, K), (C, D, J, K)
    rate = np.einsum("cdmk,cdmk->cdm", theta[:, :, seen.row[pick]], beta[:, :, seen.col[pick]])
    rhat = np.array([float(az.rhat(rate[:, :, j], method="rank")) for j in range(100)])
    ess = np.array([float(az.ess(rate[:, :, j], method="bulk")) for j in range(100)])
    assert diag["rhat_max"] == pytest.approx(rhat.max(), rel=1e-12)
    assert diag["ess_bulk_min"] == pytest.approx(ess.min(), rel=1e-12)
    it = s["iterations"]
    assert (it["driver"], it["run"], it["max"], it["warmup"], it["chains"]) == ("mcmc", 40, 40, 10, 2)
    # the text says what the 40 counts (a new-user trial read "40 of 40 (num_samples)" with num_samples=30)
    assert "40 of 40 sweeps per chain (10 warm-up, 2 chain(s); num_samples counts the kept ones)" in m.summary_text()


def test_a_fixed_number_of_epochs_is_not_called_unconverged(ratings):
    """SGD-FM runs its set number of epochs (tol 0): its summary said "NOT converged ... nan (tol 0)"."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        m = api.fit("sgd-fm", ratings, K=2, seed=0, n_epochs=2, progress=False, **COLS)
    text = m.summary_text()
    assert "ran the set number (no convergence test: tol 0)" in text and "NOT converged" not in text


def test_the_summary_times_the_phases(ratings):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sec = _hpf(ratings).summary()["seconds"]
    assert set(sec) == {"prepare_data", "fit", "before_loop", "loop", "first_iteration_with_compilation",
                        "after_loop", "summary", "total"}
    assert sec["total"] >= sec["fit"] >= sec["loop"] >= sec["first_iteration_with_compilation"] > 0


def test_batch_sibm_on_a_large_matrix_warns_before_it_starts(monkeypatch):
    import scipy.sparse as sp

    I, J = 20_000, 10_000
    m = sp.csr_matrix((np.ones(I), (np.arange(I), np.arange(I) % J)), shape=(I, J))
    _no_compute(monkeypatch, "sibm")
    with pytest.warns(UserWarning, match=r"sibm: every sweep .* dense in users x items \(20,000 x 10,000 .* "
                                         r"fit 'sibm-svi' instead"), pytest.raises(_Boom):
        api.fit("sibm", m, K=10, progress=False)
    import warnings

    small = sp.csr_matrix((np.ones(50), (np.arange(50), np.arange(50) % 20)), shape=(50, 20))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(_Boom):
            api.fit("sibm", small, K=10, progress=False)


# -- messages in the user's terms ---------------------------------------------------------------


def test_nan_names_the_users_column(ratings):
    bad = ratings.astype({"stars": float})
    bad.loc[4, "stars"] = np.nan
    with pytest.raises(ValueError, match=r"column 'stars' \(the value column\) has 1 NaN"):
        _hpf(bad)
    bad = ratings.astype({"reader": object})
    bad.loc[2, "reader"] = None
    with pytest.raises(ValueError, match=r"column 'reader' \(the user column\) has 1 NaN or missing"):
        _hpf(bad)


def test_transform_errors_name_the_users_column(ratings):
    with pytest.raises(ValueError, match=r"^column 'stars' \(the value column\): 1 negative values"):
        _hpf(ratings.assign(stars=np.where(np.arange(len(ratings)) == 0, -1, ratings["stars"])))


def test_unknown_options_list_the_valid_ones(ratings):
    with pytest.raises(ValueError, match=r"hpf: unknown option\(s\) \['max_iters'\] \('max_iters': did you mean "
                                         r"'max_iter'\?\); valid options are \[.*'max_iter'.*'n_draws'.*'tol'"):
        _hpf(ratings, max_iters=3)
    assert "num_samples" in api.valid_options("bpmf") and "init_mean_sd" in api.valid_options("sibm")
    assert "checkpoint" not in api.valid_options("hpf") and "resume" not in api.valid_options("hpf")


def test_duplicate_pairs_are_reported_with_the_users_ids(ratings):
    dup = pd.concat([ratings, ratings.iloc[[3]].assign(stars=1)])
    u, b = ratings.loc[3, "reader"], ratings.loc[3, "book"]
    with pytest.raises(ValueError, match=rf"1 \(reader, book\) pair\(s\) occur more than once \(2 rows\), "
                                         rf"e.g. \[\('{u}', '{b}'\)\]"):
        _hpf(dup)


def test_loading_something_else_says_what_it_is(tmp_path, ratings):
    text = tmp_path / "notes.nc"
    text.write_text("hello")
    with pytest.raises(ValueError, match=f"{text} is not a factorbayes artifact"):
        api.load(text)
    from custom_inference import arviz_io

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        m = _hpf(ratings)
    other = arviz_io.save(m.idata, tmp_path / "plain.nc")  # netCDF, but no front_door group
    with pytest.raises(ValueError, match=f"{other} is not a factorbayes artifact"):
        api.load(other)
    good = m.save(tmp_path / "m.nc")
    damaged = tmp_path / "damaged.nc"
    raw = good.read_bytes()
    damaged.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=f"{damaged}: a damaged factorbayes artifact"):
        api.load(damaged)


def test_the_artifact_and_the_checkpoint_have_the_usual_mode(ratings, hpf_checkpoint, tmp_path):
    """Atomic writes (mkstemp + os.replace) must not leave files readable by their owner only: the
    artifact and the checkpoint get 0o666 less the umask (was 0o600 for both)."""
    old = os.umask(0o022)
    try:
        with pytest.warns(UserWarning, match="not converged"):
            path = _hpf(ratings, resume_from=hpf_checkpoint).save(tmp_path / "hpf.nc")
    finally:
        os.umask(old)
    assert (os.stat(path).st_mode & 0o777) == 0o644
    assert (os.stat(api.checkpoint_path(hpf_checkpoint, "hpf")).st_mode & 0o777) == 0o644


def test_predict_and_evaluate_read_the_column_names_the_model_was_fitted_with(tmp_path):
    """`predict` of a DataFrame in the user's own column names raised a bare KeyError 'user', and
    `evaluate` of the user's own held-out table asked for user_col= again (a new-user trial); the model
    now remembers the names (saved with it) and says which columns it needs otherwise."""
    import warnings

    rng = np.random.default_rng(4)
    u, i = np.nonzero(rng.random((14, 9)) < 0.6)
    df = pd.DataFrame({"reader": [f"r{a}" for a in u], "book": [f"b{b}" for b in i],
                       "stars": rng.integers(1, 6, u.size).astype(float)})
    test = df.groupby("reader").tail(1)
    train = df.drop(test.index)
    test = test[test["book"].isin(train["book"])]  # items the model knows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        m = api.fit("hpf", train, K=2, seed=0, max_iter=3, n_draws=4, progress=False, user_col="reader",
                    item_col="book", value_col="stars")
    m = api.load(m.save(tmp_path / "m.nc"))  # the names travel with the artifact
    mine = m.predict(test[["reader", "book"]])
    canonical = m.predict(test[["reader", "book"]].rename(columns={"reader": "user", "book": "item"}))
    pd.testing.assert_frame_equal(mine, canonical)
    with pytest.raises(KeyError, match="needs the columns 'user' and 'item' \\(or 'reader' and 'book', as fitted\\)"):
        m.predict(pd.DataFrame({"who": ["r1"], "what": ["b1"]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = m.evaluate(test, N=(3,), ease=False)
    assert len(table) > 0
