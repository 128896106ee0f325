r"""Is BPMF Gibbs biased? Simulation-by-simulation Gibbs against NUTS runs that pass their own gates.

The BPMF SBC (`validation.models.bpmf`) left one open point (issue 26, item 3): paired on the same
simulated data sets, the Gibbs posterior means of log det Lambda sat 0.07-0.09 NUTS posterior sd
below NUTS's, but the NUTS runs of that SBC (2 chains x 500 draws) failed their own gates in 160-170
of 200 simulations, so the disagreement could be either sampler's. `gibbs_nuts_study` settles it on
the same data sets (same master seeds, same per-simulation seeds, `validation.checks.sbc.sbc_seeds`):

- ``nuts``: NumPyro NUTS on `ppl_models.bpmf.model` (`validation.checks.nuts_sbc.NutsSBCFit`, one
  compiled sampler per setting) with the reference gates of the project (4 chains, rank R-hat <= 1.01,
  bulk and tail ESS >= 400 on every scalar of `validation.models.bpmf.bpmf_functionals`, no divergent
  transition, E-BFMI >= 0.3), run through a ladder of settings (`StudyConfig.nuts_ladder`) until a
  rung passes;
- ``gibbs`` (``gauge_rounds`` 5, the default sampler) and ``gibbs-plain`` (``gauge_rounds=0``, the
  paper's sampler): `custom_inference.bpmf.sample`, 4 chains, gated the same way (no divergences or
  E-BFMI for Gibbs), through their own ladder;
- ``nuts-sbc`` and ``gibbs-sbc``: the SBC's own runs of that simulation, reproduced exactly (same
  settings, same fit seed, the same L = 99 thinned draws, `validation.checks.sbc`), which give the
  earlier paired disagreement of that simulation.

For each functional scalar f and each pair (A, NUTS) the study reports
z = (mean_A - mean_NUTS) / sqrt(MCSE_A^2 + MCSE_NUTS^2) (ArviZ's MCSE of the mean; N(0, 1) when both
are exact and converged) and d = (mean_A - mean_NUTS) / sd_NUTS (the earlier SBC's scale);
`study_summary` pools them over simulations (mean d with its standard error, mean z, and a
chi-square test of sum z^2 over the simulations whose runs both passed their gates).

Source: project addition (validation level 2 applied to the data sets of the level-3 SBC; issue 26;
model of ``004_90693a0965f06816.txt`` eqs. (2.9), (2.12)-(2.15); Vehtari et al. 2021 for the gates).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import jax
import numpy as np
import pandas as pd
from scipy import stats

from custom_inference import arviz_io
from custom_inference import bpmf as gibbs
from validation.checks import gates, sbc
from validation.checks.nuts_sbc import NutsSBCSettings
from validation.models import bpmf as vb

__all__ = ["GibbsRung", "StudyConfig", "functional_draws", "study_simulation", "gibbs_nuts_study", "study_summary", "plot_study"]


@dataclass(frozen=True)
class GibbsRung:
    """One Gibbs setting of a ladder: ``num_chains`` chains x ``num_samples`` kept draws.

    Parameters
    ----------
    num_chains : int, default 4
        Chains.
    num_warmup : int, default 1000
        Warm-up sweeps per chain.
    num_samples : int, default 2000
        Kept draws per chain.
    thin : int, default 5
        Every ``thin``-th sweep is kept (``num_samples`` x ``thin`` sweeps after warm-up).

    Raises
    ------
    None of its own (a frozen dataclass; nothing is checked).

    Source: project addition.
    """

    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 2000
    thin: int = 5


def _nuts(chains, warmup, samples, accept):
    return NutsSBCSettings(num_chains=chains, num_warmup=warmup, num_samples=samples, target_accept=accept,
                           max_r_hat=1.01, min_ess=400.0, max_divergences=0, min_bfmi=0.3)


@dataclass(frozen=True)
class StudyConfig:
    """Settings of `gibbs_nuts_study`.

    Parameters
    ----------
    sbc : validation.models.bpmf.SBCConfig, default SBCConfig()
        The SBC whose data sets are studied (I = 10, J = 8, K = 2, 40 cells).
    nuts_ladder : tuple of NutsSBCSettings
        NUTS settings tried in order until one passes its gates (default: 4 x 1000 after 1000 warm-up at
        target accept 0.95, then 4 x 1500 after 1000 at 0.99).
    gibbs_ladder : tuple of GibbsRung
        The same for Gibbs (default: 4 x 2000 thin 5 after 1000, then 4 x 8000 thin 10 after 2000).
    gauge_rounds : tuple of (str, int)
        The Gibbs variants: (name, gauge rounds); default (("gibbs", 5), ("gibbs-plain", 0)).
    reproduce_sbc : bool, default True
        Also rerun the SBC's own short Gibbs and NUTS fits of each simulation (their paired disagreement
        is the earlier measurement).
    thresholds : validation.checks.gates.Thresholds, default Thresholds()
        The gates (the reference gates of `validation.checks.gates`).

    Raises
    ------
    None of its own (a frozen dataclass; nothing is checked).

    Source: project addition (issue 26, item 3).
    """

    sbc: vb.SBCConfig = vb.SBCConfig()
    nuts_ladder: tuple = (_nuts(4, 1000, 1000, 0.95), _nuts(4, 1000, 1500, 0.99))
    gibbs_ladder: tuple = (GibbsRung(4, 1000, 2000, 5), GibbsRung(4, 2000, 8000, 10))
    gauge_rounds: tuple = (("gibbs", 5), ("gibbs-plain", 0))
    reproduce_sbc: bool = True
    thresholds: gates.Thresholds = field(default_factory=gates.Thresholds)


def functional_draws(post: dict) -> dict:
    """`validation.models.bpmf.bpmf_functionals` evaluated at every draw at once.

    Parameters
    ----------
    post : dict
        ``U`` (..., I, K), ``V`` (..., J, K), ``Lambda_U``, ``Lambda_V`` (..., K, K) float arrays, leading
        axes e.g. (chain, draw); the cells of `validation.models.bpmf` index U and V (I, J >= 4).

    Returns
    -------
    dict
        name -> numpy.ndarray float64 (..., Q) with the names and scalar order of `bpmf_functionals`:
        ``pred`` (Q = 4), ``logdet_Lambda``, ``trace_Lambda``, ``sq_norm`` (Q = 2: U's, then V's).

    Raises
    ------
    KeyError
        When a site is missing.

    Source: project addition.
    """
    U, V = np.asarray(post["U"], np.float64), np.asarray(post["V"], np.float64)
    lam = [np.asarray(post[n], np.float64) for n in ("Lambda_U", "Lambda_V")]
    rows, cols = np.array([c[0] for c in vb._CELLS]), np.array([c[1] for c in vb._CELLS])
    return {
        "pred": np.einsum("...ck,...ck->...c", U[..., rows, :], V[..., cols, :]),
        "logdet_Lambda": np.stack([np.linalg.slogdet(x)[1] for x in lam], axis=-1),
        "trace_Lambda": np.stack([np.trace(x, axis1=-2, axis2=-1) for x in lam], axis=-1),
        "sq_norm": np.stack([np.sum(U ** 2, axis=(-2, -1)), np.sum(V ** 2, axis=(-2, -1))], axis=-1),
    }


def _scalar_names(q: dict) -> list[str]:
    return [f"{n}[{i}]" for n, v in q.items() for i in range(v.shape[-1])]


def _summary(q: dict) -> dict:
    """mean, sd, mcse over all draws of each scalar: dict field -> float64 (Q_total,)."""
    s = {n: gates.summarize(v) for n, v in q.items()}
    return {f: np.concatenate([np.atleast_1d(getattr(x, f)) for x in s.values()]) for f in ("mean", "sd", "mcse_mean")}


def _seed(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([int(seed), 0xB5D, int(stream)]).generate_state(1, dtype=np.uint32)[0])


class _Runner:
    """Holds the compiled NUTS samplers (one per ladder rung) across simulations."""

    def __init__(self, config: StudyConfig):
        self.config = config
        self.nuts_fits = {}
        c = config.sbc
        self.simulate, self.sbc_gibbs_fit, self.functionals = vb.sbc_adapters(c)

    def nuts_fit(self, settings: NutsSBCSettings):
        if settings not in self.nuts_fits:
            self.nuts_fits[settings] = vb.nuts_sbc_adapters(replace(self.config.sbc, nuts=settings))[1]
        return self.nuts_fits[settings]

    def nuts(self, data, seed):
        t0 = time.process_time()
        for rung, s in enumerate(self.config.nuts_ladder):
            draws, rec = self.nuts_fit(s).run(data, _seed(seed, 10 + rung))
            if rec.passed:
                break
        q = functional_draws(draws)
        return q, {"rung": rung, "passed": rec.passed, "failures": rec.failures, "max_r_hat": rec.max_r_hat,
                   "min_ess_bulk": rec.min_ess_bulk, "min_ess_tail": rec.min_ess_tail,
                   "divergences": rec.divergences, "cpu_s": time.process_time() - t0,
                   "settings": f"{s.num_chains} x {s.num_samples} after {s.num_warmup}, target accept {s.target_accept}"}

    def gibbs(self, data, seed, gauge_rounds):
        c = self.config
        for rung, r in enumerate(c.gibbs_ladder):
            t0 = time.process_time()
            idata = gibbs.sample(_seed(seed, 20 + rung), data, c.sbc.n_components, c.sbc.hyper,
                                 num_chains=r.num_chains, num_warmup=r.num_warmup, num_samples=r.num_samples,
                                 thin=r.thin, gauge_rounds=gauge_rounds, keep=("U", "V", "Lambda_U", "Lambda_V"),
                                 progress=False)
            q = functional_draws(arviz_io.group_arrays(idata))
            g = gates.nuts_gates(q, divergences=0, bfmi=np.array([]), thresholds=c.thresholds)
            if g.passed:
                break
        return q, {"rung": rung, "passed": bool(g.passed), "failures": list(g.failures),
                   "max_r_hat": float(g.table["max_r_hat"].max()), "min_ess_bulk": float(g.table["min_ess_bulk"].min()),
                   "min_ess_tail": float(g.table["min_ess_tail"].min()), "divergences": 0,
                   "cpu_s": time.process_time() - t0,
                   "settings": f"{r.num_chains} x {r.num_samples} thin {r.thin} after {r.num_warmup}, "
                               f"gauge_rounds {gauge_rounds}"}


def _sbc_run(runner, fit, s, seed):
    """The SBC's own fit of simulation ``s``: (dict field -> (Q_total,) over its L = 99 thinned draws)."""
    rec = sbc._one_simulation(runner.simulate, fit, runner.functionals, s, seed, 99)
    names = list(runner.functionals)
    mean = np.concatenate([rec["mean"][n] for n in names])
    sd = np.concatenate([rec["sd"][n] for n in names])
    return {"mean": mean, "sd": sd, "mcse_mean": np.full_like(mean, np.nan)}


def study_simulation(master_seed: int, s: int, config: StudyConfig = StudyConfig(), *, runner=None) -> dict:
    """All runs of one simulation of the study: a JSON-serializable dict.

    Gated NUTS (`StudyConfig.nuts_ladder`), every Gibbs variant of ``gauge_rounds`` (its ladder), and with
    ``reproduce_sbc`` the SBC's own Gibbs and NUTS fits; float64.

    Parameters
    ----------
    master_seed : int
        The SBC master seed.
    s : int
        The simulation: index ``s`` of `validation.checks.sbc.sbc_seeds` ``(master_seed, ...)``, the same
        data set as the SBC's simulation ``s``.
    config : StudyConfig, default StudyConfig()
        The study's settings.
    runner : object or None, keyword-only, default None
        The module's private sampler holder (compiled NUTS samplers reused across simulations); None
        builds one.

    Returns
    -------
    dict
        ``master_seed``, ``sim``, ``seed`` (int), ``scalars`` (names "pred[0]", ..., "sq_norm[1]"),
        ``runs``: method -> {"mean", "sd", "mcse_mean" (lists of float, one per scalar), "gate" (rung,
        passed, failures, max R-hat, min ESS, divergences, CPU s, settings; absent for the reproduced SBC
        fits, whose mcse_mean is NaN)}.

    Raises
    ------
    None of its own (NumPyro's and the sampler's errors propagate).

    Source: project addition.
    """
    runner = _Runner(config) if runner is None else runner
    seed = int(sbc.sbc_seeds(master_seed, s + 1)[s])
    _, data = runner.simulate(seed)
    runs = {}
    with jax.enable_x64(True):
        q, gate = runner.nuts(data, seed)
        runs["nuts"] = {**_summary(q), "gate": gate}
        for name, rounds in config.gauge_rounds:
            q, gate = runner.gibbs(data, seed, rounds)
            runs[name] = {**_summary(q), "gate": gate}
        if config.reproduce_sbc:
            runs["gibbs-sbc"] = _sbc_run(runner, runner.sbc_gibbs_fit, s, seed)
            runs["nuts-sbc"] = _sbc_run(runner, runner.nuts_fit(config.sbc.nuts), s, seed)
    scalars = _scalar_names(functional_draws({k: np.zeros(v) for k, v in (
        ("U", (1, 4, 2)), ("V", (1, 4, 2)), ("Lambda_U", (1, 2, 2)), ("Lambda_V", (1, 2, 2)))}))
    out = {k: {f: (np.asarray(v).tolist() if f != "gate" else v) for f, v in r.items()} for k, r in runs.items()}
    return {"master_seed": int(master_seed), "sim": int(s), "seed": seed, "scalars": scalars, "runs": out}


def gibbs_nuts_study(master_seeds=(0, 1), sims=range(10), config: StudyConfig = StudyConfig(), *,
                     cache_dir: str | Path | None = None, deadline: float | None = None,
                     progress: bool = False) -> pd.DataFrame:
    """Gibbs (with and without gauge moves) against gated NUTS, simulation by simulation, on SBC data sets.

    Parameters
    ----------
    master_seeds : iterable of int, the SBC master seeds (0 and 1: the BPMF SBC's).
    sims : iterable of int, simulation indices (the same for every master seed), run in this order.
    config : StudyConfig.
    cache_dir : path, optional; simulation (m, s) is stored as ``m{m}_s{s:04d}.json``
        (`study_simulation`) and reused, so a stopped study resumes.
    deadline : float, optional; ``time.time()`` after which no new simulation starts (the ones done
        are returned).
    progress : print one line per simulation.

    Returns
    -------
    DataFrame, one row per (simulation, compared method, functional scalar): master_seed, sim,
    method ("gibbs", "gibbs-plain" or "gibbs-sbc" against "nuts"; "nuts-sbc" against "nuts"; and
    "sbc-pair", the SBC's Gibbs against the SBC's NUTS: the earlier measurement), scalar, mean_a,
    mean_ref, mcse_a, mcse_ref, sd_ref, z (NaN where an MCSE is unknown), d = (mean_a - mean_ref) /
    sd_ref, passed (both runs passed their gates; True for reproduced SBC fits, which are not gated
    here), the two runs' rungs.

    Raises
    ------
    ValueError: no simulations; a cache file of another simulation.
    Source: project addition (issue 26, item 3).
    """
    sims = [int(s) for s in sims]
    if not sims:
        raise ValueError("sims must name at least one simulation")
    cache = None if cache_dir is None else Path(cache_dir)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    runner = None
    records = []
    for s in sims:
        for m in master_seeds:
            path = None if cache is None else cache / f"m{int(m)}_s{s:04d}.json"
            if path is not None and path.exists():
                rec = json.loads(path.read_text())
                if (rec["master_seed"], rec["sim"]) != (int(m), s):
                    raise ValueError(f"{path} holds simulation {rec['master_seed']}/{rec['sim']}, not {m}/{s}")
            else:
                if deadline is not None and time.time() > deadline:
                    continue
                runner = _Runner(config) if runner is None else runner
                t0 = time.process_time()
                rec = study_simulation(m, s, config, runner=runner)
                if path is not None:
                    tmp = path.with_suffix(".tmp")
                    tmp.write_text(json.dumps(rec))
                    tmp.replace(path)
                if progress:
                    g = {k: (r["gate"]["rung"], r["gate"]["passed"]) for k, r in rec["runs"].items() if "gate" in r}
                    print(f"seed {m} sim {s}: {time.process_time() - t0:.0f} CPU s, gates {g}", flush=True)
            records.append(rec)
    return _pairs(records)


def _pairs(records) -> pd.DataFrame:
    rows = []
    pairs = [(a, "nuts") for a in ("gibbs", "gibbs-plain", "gibbs-sbc", "nuts-sbc")] + [("gibbs-sbc", "nuts-sbc")]
    for rec in records:
        runs = rec["runs"]
        for a, b in pairs:
            if a not in runs or b not in runs:
                continue
            ra, rb = runs[a], runs[b]
            ga, gb = ra.get("gate", {}), rb.get("gate", {})
            for i, name in enumerate(rec["scalars"]):
                ma, mb = ra["mean"][i], rb["mean"][i]
                ea, eb = ra["mcse_mean"][i], rb["mcse_mean"][i]
                rows.append({"master_seed": rec["master_seed"], "sim": rec["sim"],
                             "method": "sbc-pair" if b == "nuts-sbc" else a, "scalar": name,
                             "mean_a": ma, "mean_ref": mb, "mcse_a": ea, "mcse_ref": eb, "sd_ref": rb["sd"][i],
                             "z": (ma - mb) / np.sqrt(ea ** 2 + eb ** 2), "d": (ma - mb) / rb["sd"][i],
                             "passed": bool(ga.get("passed", True) and gb.get("passed", True)),
                             "rung_a": ga.get("rung", -1), "rung_ref": gb.get("rung", -1)})
    return pd.DataFrame(rows)


def study_summary(pairs: pd.DataFrame, *, gated_only: bool = True, by_seed: bool = False) -> pd.DataFrame:
    """Pool `gibbs_nuts_study`'s rows over simulations, per method and functional scalar.

    Parameters
    ----------
    pairs : pandas.DataFrame
        `gibbs_nuts_study`'s frame (columns method, scalar, master_seed, d, z, passed, ...).
    gated_only : bool, keyword-only, default True
        Keep only the simulations whose two runs passed their gates (a NUTS or Gibbs run that failed
        cannot judge).
    by_seed : bool, keyword-only, default False
        Also group by master seed.

    Returns
    -------
    pandas.DataFrame
        One row per group: method, scalar (and master_seed), n (simulations), mean_d, se_d (sd of d /
        sqrt(n)), t_d (mean_d / se_d), median_d, mean_z, chi2_p (Pr(chi2_n >= sum z^2): small when the
        means differ by more than their MCSEs allow; NaN where MCSEs are unknown), max_abs_z.

    Raises
    ------
    KeyError
        When a grouping column (method, scalar, master_seed with ``by_seed``) is missing.
    AttributeError
        When ``passed`` (with ``gated_only``), ``d`` or ``z`` is missing (read as attributes).

    Source: project addition.
    """
    df = pairs[pairs.passed] if gated_only else pairs
    keys = ["method", "scalar"] + (["master_seed"] if by_seed else [])
    out = []
    for key, g in df.groupby(keys, sort=False):
        n = len(g)
        sd = g.d.std(ddof=1) if n > 1 else np.nan
        z = g.z.to_numpy()
        out.append({**dict(zip(keys, key)), "n": n, "mean_d": g.d.mean(), "se_d": sd / np.sqrt(n),
                    "t_d": g.d.mean() / (sd / np.sqrt(n)) if n > 1 else np.nan, "median_d": g.d.median(),
                    "mean_z": np.mean(z), "chi2_p": float(stats.chi2.sf(np.sum(z ** 2), n)) if np.isfinite(z).all()
                    else np.nan, "max_abs_z": float(np.max(np.abs(z)))})
    return pd.DataFrame(out)


def plot_study(pairs: pd.DataFrame, path: str | Path, *, gated_only: bool = True) -> Path:
    """Two panels as a PNG: the pooled differences per scalar, and the earlier SBC's against the gated runs'.

    Left: per functional scalar, mean d +- 2 se over simulations for each compared method
    (`study_summary`); right: per simulation, the earlier SBC's paired d ("sbc-pair") against the gated
    runs' d ("gibbs") on log det Lambda_U and Lambda_V. Uses matplotlib's Agg backend.

    Parameters
    ----------
    pairs : pandas.DataFrame
        `gibbs_nuts_study`'s frame.
    path : str or pathlib.Path
        The PNG to write (110 dpi).
    gated_only : bool, keyword-only, default True
        As `study_summary`.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    KeyError, AttributeError
        On a frame without the study's columns (as `study_summary`); matplotlib's and the file system's
        errors propagate.

    Source: project addition.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = study_summary(pairs, gated_only=gated_only)
    scalars = list(dict.fromkeys(summ.scalar))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
    methods = list(dict.fromkeys(summ.method))
    for i, m in enumerate(methods):
        g = summ[summ.method == m].set_index("scalar").reindex(scalars)
        x = np.arange(len(scalars)) + (i - (len(methods) - 1) / 2) * 0.15
        ax.errorbar(x, g.mean_d, yerr=2 * g.se_d, fmt="o", ms=4, capsize=2, label=m)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(np.arange(len(scalars)), scalars, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("mean over simulations of (mean - mean_NUTS) / sd_NUTS (+- 2 se)")
    ax.legend(fontsize=8)
    df = pairs[pairs.passed] if gated_only else pairs
    for scalar, marker in (("logdet_Lambda[0]", "o"), ("logdet_Lambda[1]", "s")):
        old = df[(df.method == "sbc-pair") & (df.scalar == scalar)].set_index(["master_seed", "sim"]).d
        new = df[(df.method == "gibbs") & (df.scalar == scalar)].set_index(["master_seed", "sim"]).d
        both = old.index.intersection(new.index)
        bx.scatter(old[both], new[both], marker=marker, label=scalar, alpha=0.7)
    bx.axhline(0, color="k", lw=0.5)
    bx.axvline(0, color="k", lw=0.5)
    bx.set_xlabel("earlier SBC runs: (Gibbs - NUTS) / sd_NUTS")
    bx.set_ylabel("gated runs: (Gibbs - NUTS) / sd_NUTS")
    bx.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
