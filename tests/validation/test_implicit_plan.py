"""Tests of the selection logic of `validation.evaluation.implicit_eval` (issue 27: the basket evaluation of every
system in under 15 minutes): `plan_systems`, the large-matrix settings and the convergence report."""

from __future__ import annotations

import numpy as np
import pytest

from custom_inference.data import Observations
from validation.evaluation import implicit_eval as ie
from validation.evaluation import metrics


def _obs(I, J, nnz=20, seed=0):
    rng = np.random.default_rng(seed)
    cells = rng.choice(I * J, size=min(nnz, I * J), replace=False)
    return Observations.from_coo(cells // J, cells % J, np.ones(cells.size), (I, J), kind="binary")


SVI = ["SIBM S-Uniform", "SIBM S-Balanced", "SIBM S-Biased"]


def _plan(systems, train, **kw):
    return {p.name: p for p in ie.plan_systems(systems, train, **kw)}


def test_large_matrix_replaces_batch_vb_and_keeps_one_svi_scheme():
    systems = {**ie.model_systems(large_cells=1000), **ie.baseline_systems(large_cells=1000)}
    plan = ie.plan_systems(systems, _obs(101, 10))  # 1010 cells > 1000
    names = [p.name for p in plan]
    assert len(plan) == len(systems)  # every system keeps a row
    assert names[0] == "SIBM SVI (batch VB skipped: I x J = 1,010 > 1,000)"
    first = plan[0]
    assert first.factory is systems["SIBM batch VB"].large_replacement
    assert first.factory.svi_strategy == ie.LARGE_SETTINGS["svi_strategy"] == "biased"
    by = {p.name: p for p in plan}
    for name in SVI:  # not run: the chosen one runs as the SIBM SVI row, the others are skipped with a reason
        assert by[name].factory is None
    assert "SIBM SVI" in by["SIBM S-Biased"].reason
    assert "all_svi=True" in by["SIBM S-Uniform"].reason and "all_svi=True" in by["SIBM S-Balanced"].reason
    others = [p for p in plan if p.name not in SVI]
    assert all(p.factory is not None for p in others)


def test_threshold_is_strict_and_none_disables_it():
    systems = ie.model_systems(large_cells=1000)
    at = _plan(systems, _obs(100, 10))  # 1000 cells: not above the threshold
    assert "SIBM batch VB" in at and all(at[n].factory is systems[n] for n in systems)
    never = ie.model_systems(large_cells=None)
    assert all(p.factory is never[p.name] for p in ie.plan_systems(never, _obs(1000, 100)))
    # the default threshold: T10I4D100K (100,000 x 870) is large, groceries (9,835 x 169) and ML-100K are not
    assert 100_000 * 870 > ie.LARGE_CELLS > max(9_835 * 169, 943 * 1682)


def test_all_svi_runs_every_scheme_and_a_lone_scheme_runs():
    systems = ie.model_systems(large_cells=10)
    train = _obs(20, 10)
    full = _plan(systems, train, all_svi=True)
    assert all(full[n].factory is systems[n] for n in SVI)
    assert full["SIBM SVI (batch VB skipped: I x J = 200 > 10)"].factory is not None
    lone = _plan({"SIBM S-Uniform": systems["SIBM S-Uniform"]}, train)
    assert lone["SIBM S-Uniform"].factory is systems["SIBM S-Uniform"]
    # without the batch row, the chosen scheme runs under its own name and the others are skipped
    no_batch = _plan({n: systems[n] for n in SVI}, train)
    assert no_batch["SIBM S-Biased"].factory is systems["SIBM S-Biased"]
    assert no_batch["SIBM S-Uniform"].factory is None and no_batch["SIBM S-Balanced"].factory is None


def test_estimates_scale_with_the_work():
    systems = {**ie.model_systems(), **ie.baseline_systems()}
    small, big = _obs(50, 20, nnz=100), _obs(50, 20, nnz=400)
    a, b = _plan(systems, small), _plan(systems, big)
    for name in ("BPR-uniform", "PSM", "RG like"):  # per training positive
        assert b[name].estimate == pytest.approx(4 * a[name].estimate) and a[name].estimate > 0
    assert a["SIBM MAP"].estimate == pytest.approx(b["SIBM MAP"].estimate)  # per (I + J) and minibatch
    assert a["RG popularity x like"].estimate == 0.0  # shares the like fit
    for name in ("popularity", "ease", "SIBM batch VB"):
        assert a[name].estimate is None


def test_evaluate_implicit_reports_skips_and_convergence():
    calls = []

    def make(tag, info=None):
        def factory(train, seed):
            calls.append(tag)
            fn = metrics.popularity_score_fn(train)
            if info is not None:
                fn = (lambda f: lambda users: f(users))(fn)
                fn.fit_info = info
            return fn
        return factory

    batch = make("batch")
    batch.sibm_batch, batch.large_cells = True, 10
    batch.large_replacement = make("svi", {"converged": False, "iterations": 7, "unit": "minibatches"})
    uni = make("uniform")
    uni.svi_strategy, uni.large_cells = "uniform", 10
    systems = {"SIBM batch VB": batch, "SIBM S-Uniform": uni, "popularity": make("pop")}
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(40), 3)
    items = np.concatenate([rng.choice(12, 3, replace=False) for _ in range(40)])
    import pandas as pd
    df = pd.DataFrame({"user": users, "item": items, "rating": 1.0, "timestamp": 0})
    res = ie.evaluate_implicit(df, systems, baskets=True)
    assert calls == ["svi", "pop"]
    t = res.table.set_index("system")
    row = t.loc["SIBM SVI (batch VB skipped: I x J = 480 > 10)"]
    assert row["converged"] is False or row["converged"] == False  # noqa: E712
    assert row["iterations"] == 7
    assert np.isfinite(row["recall@10_se"]) and row["vs"] == "popularity"  # the replacement row is compared too
    assert np.isnan(t.loc["SIBM S-Uniform", "recall@10"]) and "all_svi" in t.loc["SIBM S-Uniform", "setting"]
    assert t.loc["popularity", "converged"] == ""
    assert any("SIBM S-Uniform" in n for n in res.notes)


@pytest.mark.parametrize("patience, converged", [(1, True), (50, False)])
def test_bpr_stops_on_its_held_out_auc_rule(patience, converged):
    """The BPR factory fits with `custom_inference.bpr.fit`'s held-out AUC rule (`ie.BPR_STOPPING`, overridable)
    and reports what it did: patience 1 stops at a check once the AUC gains no more than its standard error
    (within 30 epochs on this random matrix, where there is nothing to learn beyond popularity); patience 50
    cannot be met in 30 epochs, so all of them run."""
    f = ie.baseline_systems(large_cells=0, n_factors=2, n_epochs=30, batch_size=32, validate_every=2,
                            patience=patience)["BPR-uniform"]
    fn = f(_obs(30, 12, nnz=120), 0)
    info = fn.fit_info
    assert info["converged"] is converged and info["unit"] == "epochs"
    assert (info["iterations"] < 30) if converged else (info["iterations"] == 30)
    assert info["iterations"] % 2 == 0 and 2 <= info["best_epoch"] <= info["iterations"]
    assert np.asarray(fn(np.arange(3))).shape == (3, 12)
    fixed = ie.baseline_systems(large_cells=0, n_factors=2, n_epochs=3, batch_size=32, validate_every=None)["BPR-uniform"]
    assert fixed(_obs(30, 12, nnz=120), 0).fit_info == {"converged": "n/a", "iterations": 3, "unit": "epochs"}
    assert ie.BPR_STOPPING["large"] == {"validate_every": 5, "patience": 3}


def test_fit_info_reads_the_solver_run_attrs():
    """The converged / iterations report of a real solver fit (SIBM SVI with its ELBO stopping rule)."""
    import jax

    from custom_inference import sibm
    from ppl_models.sibm import SIBMHyper

    train = _obs(40, 20, nnz=160).astype(np.float32)
    res = sibm.fit_svi(jax.random.PRNGKey(0), train, 2, SIBMHyper(), n_iter=400, elbo_every=100, tol=1.0,
                       progress=False, n_draws=0)
    # tol 1: the second ELBO record (minibatch 200) already changes by less than 100 %
    assert ie._fit_info(res, "minibatches") == {"converged": True, "iterations": 200, "unit": "minibatches"}
    res = sibm.fit_svi(jax.random.PRNGKey(0), train, 2, SIBMHyper(), n_iter=300, progress=False, n_draws=0)
    assert ie._fit_info(res, "minibatches") == {"converged": "n/a", "iterations": 300, "unit": "minibatches"}


def test_map_count_and_estimates_follow_the_large_settings():
    systems = ie.model_systems(large_cells=1000, sibm={"map_iter": 3000})
    small, large = _obs(100, 10), _obs(101, 10)
    m = systems["SIBM MAP"]
    assert m.estimate(large) == pytest.approx(m.estimate(small) * ie.LARGE_SETTINGS["map_iter"] / 3000 * 111 / 110)


def test_fit_info_of_psm_reports_its_tolerance_stop():
    from validation.evaluation import model_studies

    f = model_studies.implicit_system(2, 1.0, dtype=np.float64, max_iter=200, tol=1e-2)
    f(_obs(30, 12, nnz=120).astype(np.float64), 0)
    info = ie._fit_info(f.last_fit, "sweeps")
    assert info["converged"] is True and 1 <= info["iterations"] < 200, info
