"""NUTS as the fit of an SBC (`validation.checks.nuts_sbc`): compiled once per data shape, gated per simulation.

The tiny problem: mu ~ N(0, 1), y_1..y_5 | mu ~ N(mu, 1), so mu | y ~ N(sum y / 6, 1 / 6). One
chain of 200 draws after 100 warm-up steps per simulation (about 0.02 s once compiled).

The old failure this guards against: a 200-simulation NUTS SBC in one process died with ``LLVM
ERROR: Unable to allocate section memory`` after about 80 simulations because every simulation
compiled its sampler again (NumPyro 0.22's ``MCMC(jit_model_args=True)`` still compiles two XLA
programs per ``run``: measured on BPMF). The default test fails if any simulation after the first
compiles anything (checked by breaking it: rebuilding the sampler per simulation makes it fail with
one to two compilations per simulation); the slow test runs 300 simulations and bounds the memory.
"""

from __future__ import annotations

import json
import resource

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from validation.checks import nuts_sbc, registry, sbc
from validation.models import catalog

N_OBS = 5
SETTINGS = nuts_sbc.NutsSBCSettings(num_chains=1, num_warmup=100, num_samples=200, min_ess=50.0)


def model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def simulate(seed):
    rng = np.random.default_rng(seed)
    mu = rng.normal()
    return {"mu": np.array(mu)}, rng.normal(mu, 1.0, N_OBS)


FUNCTIONALS = {"mu": lambda p: np.atleast_1d(p["mu"])}


def make_fit(**kw):
    return nuts_sbc.NutsSBCFit(model, lambda y: (jnp.asarray(y, jnp.float64),), lambda s: {"mu": s["mu"]},
                               FUNCTIONALS, SETTINGS, **kw)


def counted_sbc(fit, n_sims, master_seed=0):
    """run_sbc whose fit records the number of XLA compilations seen after each simulation."""
    counts = []
    with nuts_sbc.compile_counter() as events:
        def counting_fit(data, seed):
            out = fit(data, seed)
            counts.append(len(events))
            return out

        result = sbc.run_sbc(simulate, counting_fit, FUNCTIONALS, n_sims=n_sims, master_seed=master_seed, n_draws=99,
                             progress=False, method="tiny-nuts")
    return result, counts


def test_simulations_after_the_first_compile_nothing(tmp_path):
    fit = make_fit(log_path=tmp_path / "gates.jsonl")
    result, counts = counted_sbc(fit, 25)
    assert counts[0] > 0, "the first simulation must compile the sampler (else the counter sees nothing)"
    assert counts[-1] == counts[0], f"compilations after each simulation: {counts}"
    assert fit.n_mcmc == 1
    # the draws are the posterior N(sum y / 6, 1/6): each simulation's mean of 200 draws within 5 MCSE
    # (MCSE = sd / sqrt(ESS), ESS >= min_ess = 50 when the gate passes; a gate-passing run fails this
    # with probability < 1e-6, so < 3e-5 over the 25)
    recs = fit.gate_records(result.fit_seeds)
    for s, fs in enumerate(result.fit_seeds):
        _, y = simulate(int(result.seeds[s]))
        if recs[int(fs)].passed:
            assert abs(result.post_mean["mu"][s, 0] - y.sum() / (N_OBS + 1)) < 5 * np.sqrt(1 / 6 / 50)
    # every simulation has its gate record, also in the JSON log a resumed run reads
    lines = [json.loads(x) for x in (tmp_path / "gates.jsonl").read_text().splitlines()]
    assert len(lines) == 25 and {x["fit_seed"] for x in lines} == {int(s) for s in result.fit_seeds}
    notes = nuts_sbc.gate_notes(make_fit(log_path=tmp_path / "gates.jsonl"), result)
    n_failed = sum(not x["passed"] for x in lines)
    assert f"{n_failed} of 25 recorded simulations FAILED" in notes[1] and "KEPT in the ranks" in notes[1]
    if n_failed < 25:
        assert nuts_sbc.passed_subset(result, fit).n_sims == 25 - n_failed


def test_the_nuts_adapters_are_registered():
    for name in ("bpmf", "sbmf", "hpf"):
        assert set(catalog.get(name).sbc) >= {"gibbs", "nuts"}
    # HPF's takes the CLI's gate log (`factorbayes sbc hpf --solver nuts`) and fits with the compile-once
    # runner; building it compiles nothing (running it compiles ~12 CPU s, too much for the default suite)
    import inspect

    adapters = registry.resolve(catalog.get("hpf").sbc["nuts"])
    assert "log_path" in inspect.signature(adapters).parameters
    _, fit, functionals = adapters(log_path=None)
    assert isinstance(fit, nuts_sbc.NutsSBCFit) and fit.n_mcmc == 0 and set(fit.functionals) == set(functionals)


@pytest.mark.slow
def test_the_compile_check_fails_when_each_simulation_builds_its_sampler(monkeypatch):
    fit = make_fit()
    monkeypatch.setattr(fit, "_get_run", fit._build)  # a new jitted sampler per simulation
    _, counts = counted_sbc(fit, 3)
    assert counts[-1] > counts[0], f"compilations after each simulation: {counts}"


@pytest.mark.slow
def test_300_simulations_in_one_process_without_compiling_or_growing():
    """300 simulations: no compilation after the first, and the resident memory grows by less than
    100 MB between simulation 50 and 300 (with a compilation per simulation the process's code
    memory grew until LLVM could not allocate section memory after ~80 BPMF simulations)."""
    fit = make_fit()
    rss = []
    counts = []
    with nuts_sbc.compile_counter() as events:
        def counting_fit(data, seed):
            out = fit(data, seed)
            counts.append(len(events))
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # MB (Linux: KiB)
            return out

        sbc.run_sbc(simulate, counting_fit, FUNCTIONALS, n_sims=320, master_seed=1, n_draws=99, progress=False)
    assert counts[-1] == counts[0], f"compilations grew from {counts[0]} to {counts[-1]}"
    assert rss[-1] - rss[49] < 100, f"max RSS {rss[49]:.0f} MB after 50 simulations, {rss[-1]:.0f} MB after 320"


def test_cli_sbc_keeps_gate_records_and_reports_them(tmp_path, monkeypatch, capsys):
    """`factorbayes sbc MODEL --solver nuts` passes its adapters a gate log under --out and writes the
    gate counts into the report (the toy problem registered under a real model's name)."""
    import dataclasses

    from validation.frontdoor import cli

    def toy_adapters(log_path=None):
        return simulate, make_fit(log_path=log_path), FUNCTIONALS

    spec = dataclasses.replace(catalog.get("bpmf"), sbc={"nuts": toy_adapters})
    monkeypatch.setattr(catalog, "get", lambda name: spec)
    monkeypatch.setattr("validation.models.catalog.evidence_lines", lambda model: [])
    out = tmp_path / "sbc"
    code = cli.main(["sbc", "bpmf", "--solver", "nuts", "--sims", "5", "--no-progress", "--out", str(out)])
    assert code in (0, 1)  # 5 simulations judge nothing; the plumbing is what is tested
    lines = (out / "gates.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all("passed" in json.loads(line) for line in lines)
    report = (out / "report.md").read_text()
    assert "KEPT in the ranks" in report and "of 5 recorded simulations" in report, report
