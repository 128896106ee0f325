"""PSM (seed 000) through the validation levels: every cache and cached sum against its dense I x J
twin (and a printed formula that the check catches), stationarity of every block of Algorithm 1
(jax.grad of the dense bound), monotone ELBO, the ELBO against the NumPyro program, the probit
approximation, the errata rows, the evaluation system, the registry entry; the cross-check against the
stored NUTS reference (a NUTS re-run under -m slow).

One problem serves every test (`validation.models.psm.small_problem(0)`, the cross-check's stream, K = 2), so
the simulator and the sweep are compiled once per module."""

import dataclasses

import jax
import numpy as np
import pytest

from custom_inference.data import Observations
from validation.models import psm as vp
from validation.checks.errata import run_errata
from validation.models import catalog
from validation.evaluation import model_studies

jax.config.update("jax_enable_x64", True)

K = vp._ERRATA_K  # 2: the cross-check's K


@pytest.fixture(scope="module")
def problem():
    obs, r, _ = vp.small_problem(0)
    return obs, r


@pytest.mark.parametrize("chunk", [16384, 5])
def test_every_cache_and_cached_sum_equals_its_dense_twin(problem, chunk):
    obs, r = problem
    table = vp.dense_twin_checks(obs, K, r=r, chunk=chunk)
    assert len(table) == 30
    assert (table.max_rel_diff < 1e-10).all(), table[table.max_rel_diff >= 1e-10]  # float64 rounding only


def test_dense_check_catches_the_printed_eq8(problem):
    """Negative control: the printed eq. (8) (m-dag and m-ddag swapped) swapped into the solver."""
    obs, r = problem
    table = vp.dense_twin_checks(obs, K, r=r, solver_quantities=vp.printed_user_targets).set_index("key")
    assert table.loc["user_m_i", "max_rel_diff"] > 1e-3, table  # 10^7 x the pass threshold
    assert (table.drop(index="user_m_i").max_rel_diff < 1e-10).all()


def test_every_block_is_a_stationary_point_of_the_dense_bound(problem):
    obs, r = problem
    table = vp.update_checks(obs, K, r=r)
    assert list(table.block) == ["dirichlet", "s", "user_bias", "users", "xi_star", "t", "item_bias", "items"]
    assert table.passed.all(), table[~table.passed]  # gradient after <= 1e-7 max(gradient before, 1)
    assert (table.grad_before > 1e-2).all(), table  # each check started away from its optimum


def test_stationarity_check_rejects_a_wrong_block(problem):
    """Power: a user update that keeps the printed eq. (8) leaves a gradient in u_mu."""
    import jax.numpy as jnp

    from custom_inference import psm
    from custom_inference.logistic import jj_lambda

    def printed_users(state, d, h, xi):
        P, m = psm.user_update_targets(state, d, h, xi)
        s = jax.nn.softmax(state.log_s)
        bg = psm.item_background(state)
        lam = jj_lambda(state.xi_star)
        w = state.d_prime * s
        m = m + w[:, None] * ((-0.5 - 2 * lam * state.bu_mu)[:, None] * (bg.m_dag - bg.m_ddag)[None]
                              - 2 * lam * (bg.m_ddag - bg.m_dag)[None])
        mean, prec = psm._solve(P, m)
        return state._replace(u_mu=mean, u_prec=prec)

    obs, r = problem
    row = vp.update_checks(obs, K, r=r, replace={"users": printed_users}).set_index("block").loc["users"]
    assert not row.passed and row.grad_after > 1e3 * 1e-7 * max(row.grad_before, 1.0), row


def test_elbo_never_decreases(problem):
    obs, r = problem
    ok, worst, trace = vp.monotone_check(obs, K, r=r, sweeps=30)
    assert ok, worst  # relative drops below 1e-10 are rounding
    assert trace[-1] > trace[0]


def test_elbo_agrees_with_the_numpyro_program(problem):
    """The solver's bounded ELBO against a Monte Carlo estimate from the program's log density, with
    the exact likelihood swapped for the bounded, tied one per draw (exact in expectation)."""
    obs, r = problem
    out = vp.monte_carlo_elbo_check(obs, K, r=r, n_draws=1000)
    assert out["z"] < 4, out  # 4 Monte Carlo standard errors: false alarm 6e-5
    assert out["exact_elbo_mc"] > out["exact"], out  # the bound holds (JJ and Jensen gaps are nats, MC se ~0.1)


def test_errata_printed_fails_corrected_passes():
    table = run_errata(vp.ERRATA)
    assert len(table) == 8
    assert (~table.printed_passes).all(), table[table.printed_passes]
    assert table.corrected_passes.all(), table[~table.corrected_passes]


def test_probit_approximation_against_monte_carlo(problem):
    obs, r = problem
    state = vp.warm_state(obs, K, vp.HYPER, r=r)
    I, J = obs.shape
    users, items = np.repeat(np.arange(I), J), np.tile(np.arange(J), I)
    t = vp.probit_vs_monte_carlo(state, users, items, n_draws=4000)
    # MacKay's approximation is within 0.02 of E[sigma] for any Gaussian; + 5 MC standard errors
    assert (t.abs_diff < 0.02 + 5 * t.mc_se).all(), t.sort_values("abs_diff").tail()
    # the quadrature is the exact E[sigma]: Monte Carlo agrees within 5 of its standard errors (all pairs,
    # a 5.7e-7 two-sided normal tail each), and MacKay's error is within the same 0.02 without MC noise
    assert (np.abs(t.quadrature - t.monte_carlo) < 5 * t.mc_se).all(), t
    assert (t.quad_abs_diff < 0.02).all() and t.quad_abs_diff.max() > 0  # a real (non-zero) approximation error


def test_implicit_system_factory():
    obs, _ = vp.errata_problem()[:2]  # the same shapes as the other tests (compiled once)
    train = Observations.from_coo(obs.rows, obs.cols, np.ones(obs.nnz), obs.shape, kind="binary")
    factory = model_studies.implicit_system(K=K, r=1.0, max_iter=5, dtype=np.float64)
    score = factory(train, 0)
    out = score(np.array([0, 4]))
    assert out.shape == (2, obs.shape[1]) and np.all(np.isfinite(out)) and np.allclose(out.sum(1), 1.0)
    assert not getattr(factory, "scores_like_probability", False)
    assert model_studies.implicit_system(kind="acceptance").scores_like_probability


def _ratings(seed=0, I=40, J=25):
    """Stars 1-5 on about half of an I x J grid (every user has several ratings >= 4)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    u, i = np.nonzero(rng.random((I, J)) < 0.5)
    return pd.DataFrame({"user": u, "item": i, "rating": rng.integers(1, 6, size=u.size).astype(float)})


def test_validation_split_is_carved_from_the_training_matrix():
    from validation.data import datasets

    split = datasets.split_leave_one_out(_ratings(), seed=0)
    val = model_studies.validation_split(split, seed=1)
    train = set(zip(np.asarray(split.train.rows).tolist(), np.asarray(split.train.cols).tolist()))
    kept = set(zip(np.asarray(val.train.rows).tolist(), np.asarray(val.train.cols).tolist()))
    held = set(zip(val.test_users.tolist(), val.test_items.tolist()))
    assert kept | held == train and not kept & held  # a partition of the training pairs
    assert not held & set(zip(split.test_users.tolist(), split.test_items.tolist()))  # test pairs stay out
    deg = np.bincount(np.asarray(split.train.rows), minlength=split.n_users)
    assert val.test_users.tolist() == np.flatnonzero(deg >= 2).tolist()  # one per user with >= 2 positives
    again = model_studies.validation_split(split, seed=1)
    assert np.array_equal(again.test_items, val.test_items)
    assert not np.array_equal(model_studies.validation_split(split, seed=2).test_items, val.test_items)


def test_psm_sweep_runs_every_setting_once_per_protocol():
    from validation.data.datasets import ImplicitSplit

    obs, _ = vp.errata_problem()[:2]  # the shapes of the other tests (compiled once per module)
    train = Observations.from_coo(obs.rows, obs.cols, np.ones(obs.nnz), obs.shape, kind="binary")
    seen = np.zeros(obs.shape, bool)
    seen[np.asarray(obs.rows), np.asarray(obs.cols)] = True
    users = np.flatnonzero(~seen.all(1))
    split = ImplicitSplit(train, users, np.argmin(seen[users], axis=1), None)  # an unseen item per user
    t = model_studies.psm_sweep(None, rs=(1.0, 4.0), Ks=(K,), base_K=K, protocols={"P1": split}, max_iter=3, tol=0.0,
                     dtype=np.float64)
    assert list(zip(t.K, t.r)) == [(K, 1.0), (K, 4.0)]  # (K, r = 1) is in both lists: fitted once
    assert (t.sweeps == 3).all() and not t.converged.any() and (t.n_users == users.size).all()
    assert t.d_prime.tolist() == [obs.nnz, 4.0 * obs.nnz]  # r reaches the fit: D' = r D, one event per pair
    assert t[["rank_score_users", "rank_score_items", "recall@10", "ndcg@10"]].apply(lambda c: c.between(0, 1)).all().all()
    with pytest.raises(ValueError, match="no setting"):
        model_studies.psm_sweep(None, rs=(), Ks=(), protocols={"P1": split})


def test_psm_sweep_pairs_rows_with_settings_by_name_when_one_is_skipped(monkeypatch):
    """A setting the evaluation skips (no fit) keeps its row, and every other row keeps its own fit: before,
    rows and fits were paired by position, so a skipped system shifted them (here: an IndexError)."""
    from validation.data.datasets import ImplicitSplit
    from validation.evaluation import baselines

    obs, _ = vp.errata_problem()[:2]
    train = Observations.from_coo(obs.rows, obs.cols, np.ones(obs.nnz), obs.shape, kind="binary")
    seen = np.zeros(obs.shape, bool)
    seen[np.asarray(obs.rows), np.asarray(obs.cols)] = True
    users = np.flatnonzero(~seen.all(1))
    split = ImplicitSplit(train, users, np.argmin(seen[users], axis=1), None)
    real = model_studies.implicit_system

    class SkipFirst:
        """The r = 1 system: skipped (SkippedSystem, no fit) on the first protocol, fitted on the second."""

        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def __call__(self, train, s):
            self.calls += 1
            if self.calls == 1:
                raise baselines.SkippedSystem("skipped for the test")
            return self.inner(train, s)

        @property
        def last_fit(self):
            return self.inner.last_fit

    def system(K, r, **kw):
        return SkipFirst(real(K, r, **kw)) if r == 1.0 else real(K, r, **kw)

    monkeypatch.setattr(model_studies, "implicit_system", system)
    t = model_studies.psm_sweep(None, rs=(1.0, 4.0), Ks=(), base_K=K, protocols={"P1": split, "P1b": split},
                                max_iter=3, tol=0.0, dtype=np.float64)
    assert list(zip(t.protocol, t.r)) == [("P1", 1.0), ("P1", 4.0), ("P1b", 1.0), ("P1b", 4.0)]
    skipped = t.iloc[0]
    assert np.isnan(skipped.d_prime) and np.isnan(skipped["recall@10"]) and "skipped for the test" in skipped.setting
    assert t.d_prime.iloc[1:].tolist() == [4.0 * obs.nnz, obs.nnz, 4.0 * obs.nnz]  # each row its own fit's D'


def test_registry_entry():
    spec = catalog.get("psm")
    solver = spec.solver()
    assert solver.name == "vb" and solver.method == "vi" and solver.reference == "psm"
    assert solver.get_algorithm().name == "psm-vb"
    assert set(spec.checks) == {"dense_twins", "stationarity", "monotone"}
    assert len(spec.errata_rows()) == 8
    for name in ("dense_twins", "monotone"):  # cheap here: the module's problem is compiled already
        table = spec.checks[name]()
        assert table.passed.all(), table[~table.passed]


def _check_crosscheck(result, *, stored: bool):
    """The verdict groups pass (`VIThresholds`), NUTS passed its gates, the structural gap is reported."""
    assert result.reference.stored is stored
    assert result.verdict.gates.passed, result.verdict.gates.failures
    assert result.verdict.status == "pass", (result.verdict.reasons, result.verdict.table)
    table = result.verdict.table.set_index("quantity")
    assert list(table.index) == list(vp.VERDICT_GROUPS)
    for group in vp.VERDICT_GROUPS:
        assert table.loc[group, "median_std_error"] <= 0.5 and table.loc[group, "corr_log_mean"] >= 0.99, table
    assert result.extra["mackay_abs_error"] < 0.02  # MacKay's approximation error bound
    gap = result.extra["structural_gap_table"].set_index("quantity")
    assert list(gap.index) == list(vp.GAP_GROUPS)
    # q(psi) counts the expected censored events as data: too narrow (measured sd ratio ~0.16)
    assert gap.loc["psi", "median_sd_ratio"] < 0.5, gap
    assert len(result.extra["acceptance_table"]) == np.prod(result.extra["obs"].shape)


def test_crosscheck_against_the_stored_nuts_reference():
    """VB against the stored, gated NUTS reference "psm" (no NUTS here: the stored key must match the
    problem, else `reference="stored"` raises)."""
    config = dataclasses.replace(vp.CrosscheckConfig(), vi_restarts=1, level1=False, n_vi_draws=2000)
    _check_crosscheck(vp.run_crosscheck(config, progress=False, reference="stored"), stored=True)


def test_crosscheck_rejects_a_bad_reference_mode():
    with pytest.raises(ValueError, match="reference must be"):
        vp.nuts_reference(vp.CrosscheckConfig(), reference="maybe")


@pytest.mark.slow
def test_crosscheck_against_nuts():
    """VB against a fresh gated NUTS run (`validation.checks.crosscheck.VIThresholds` on the predictive
    p(j | i) and E[pi]; the acceptance / psi split is where the structural gap shows: q(psi) counts the
    D' t_j expected censored events as data, and b_j trades against psi_j, so it is reported, not gated)."""
    result = vp.run_crosscheck(vp.CrosscheckConfig(), progress=False, reference="rerun")
    _check_crosscheck(result, stored=False)
    assert result.extra["update_table"].passed.all()
    assert (result.extra["dense_table"].max_rel_diff < 1e-10).all()
