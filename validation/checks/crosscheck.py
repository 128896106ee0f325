"""Posterior-level validation: a solver against gated NUTS, on identifiable quantities.

Generic pieces, used by every model's glue (for HPF: `validation.models.hpf`):

- `run_nuts`: NumPyro NUTS with several chains, returned as InferenceData, with the
  divergence count and E-BFMI needed by the gates.
- `compare_vi`: the VI gap on each group of quantities: correlation of posterior
  means, median relative error, standardized error |m_VI - m_NUTS| / sd_NUTS, sd
  ratio sd_VI / sd_NUTS and coverage of NUTS means by the VI 90% intervals; a
  verdict against stated thresholds.
- `compare_exact`: two exact methods must agree within Monte Carlo error:
  |mean_a - mean_b| <= z * sqrt(mcse_a^2 + mcse_b^2) for every quantity, with z the
  Bonferroni threshold for a stated false-alarm rate per group.
- `CrosscheckResult`: the one result type every model's ``run_crosscheck`` returns
  (and `validation.checks.report.crosscheck_report` writes, whatever the model).
- The two skeletons every model's ``run_crosscheck`` is a declaration on: `exact_crosscheck`
  (an exact sampler against NUTS) and `vi_crosscheck` (draws from q against NUTS); the NUTS
  side is a `validation.checks.references.Reference`, stored (the default when one matches the
  problem's key) or re-run (`nuts_reference`, re-exported here).
- `vi_gap`: the one per-scalar VI gap table (`compare_vi` summarizes it per group).

The configs of the cross-checks share one vocabulary: sizes, ``seed``, NUTS ``num_chains``,
``num_warmup``, ``num_samples``, ``target_accept`` (`NutsSettings.of`), exact solvers
``gibbs_chains``, ``gibbs_warmup``, ``gibbs_samples``, ``gibbs_thin``, VI ``vi_restarts`` and
``n_vi_draws``.

Raw factor coordinates are never compared: they are identified only up to
rotation, scaling and permutation. Source: project addition (validation level 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np
import pandas as pd
from scipy import stats

from custom_inference import arviz_io

from validation.checks.gates import GateResult, QuantitySummary, nuts_gates, summarize
from validation.checks.references import NutsSettings, Reference, from_run, nuts_reference, problem_key

__all__ = [
    "NutsRun",
    "run_nuts",
    "VIThresholds",
    "compare_vi",
    "compare_exact",
    "Verdict",
    "CrosscheckResult",
    "combined_gates",
    "exact_gates",
    "vi_gap",
    "best_restart",
    "gibbs_line",
    "exact_crosscheck",
    "vi_crosscheck",
    "NutsSettings",
    "nuts_reference",
    "problem_key",
]


@dataclass(frozen=True)
class NutsRun:
    """A finished NUTS run: the InferenceData plus what the gates need (made by `run_nuts`).

    Parameters
    ----------
    idata : arviz.InferenceData
        Posterior draws (chain, draw, *site shape) of every latent site, with ``sample_stats``.
    divergences : int
        Divergent transitions after warmup, all chains.
    bfmi : numpy.ndarray, shape (chain,), float64
        E-BFMI of each chain.
    seconds : float
        Wall-clock seconds of the run (compilation included).

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (validation level 2: the NUTS reference).
    """

    idata: "arviz_io.InferenceData"
    divergences: int
    bfmi: np.ndarray
    seconds: float


def run_nuts(
    model,
    *args,
    seed: int = 0,
    num_chains: int = 4,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    target_accept: float = 0.8,
    progress: bool = True,
    **kwargs,
) -> NutsRun:
    """Run NumPyro NUTS on ``model(*args, **kwargs)``.

    Chains run in parallel when JAX has enough host devices (the CLI sets
    ``--xla_force_host_platform_device_count``), otherwise vectorized in one program.
    The run is in float64 (``jax.enable_x64``).

    Parameters
    ----------
    model : callable
        The NumPyro program.
    *args
        The model's positional arguments (arrays as the model expects them, e.g. int32 (N,)
        indices and float64 (N,) values).
    seed : int, default 0
        Seed of ``jax.random.PRNGKey`` for the run.
    num_chains : int, default 4
        Number of chains.
    num_warmup, num_samples : int, default 1000
        Warmup (adaptation) and kept draws per chain.
    target_accept : float, default 0.8
        NUTS target acceptance probability.
    progress : bool, default True
        Show NumPyro's progress bar.
    **kwargs
        The model's keyword arguments.

    Returns
    -------
    NutsRun
        ``idata`` (posterior draws (chain, draw, ...)), ``divergences`` (int), ``bfmi``
        (float64 (chain,)), ``seconds`` (float).

    Raises
    ------
    None of its own
        Errors of the model or of NumPyro propagate.

    Source: project addition (validation level 2: the NUTS reference).
    """
    import time

    from numpyro.infer import MCMC, NUTS

    method = "parallel" if jax.local_device_count() >= num_chains else "vectorized"
    start = time.perf_counter()
    with jax.enable_x64(True):
        mcmc = MCMC(
            NUTS(model, target_accept_prob=target_accept),
            num_warmup=num_warmup,
            num_samples=num_samples,
            num_chains=num_chains,
            chain_method=method,
            progress_bar=progress,
        )
        mcmc.run(jax.random.PRNGKey(seed), *args, extra_fields=("diverging", "energy"), **kwargs)
        idata = arviz_io.from_numpyro(
            mcmc,
            attrs={
                "method": "nuts",
                "seed": seed,
                "num_chains": num_chains,
                "num_warmup": num_warmup,
                "num_samples": num_samples,
                "target_accept": target_accept,
            },
        )
    seconds = time.perf_counter() - start
    divergences = int(np.sum(arviz_io.group_arrays(idata, "sample_stats")["diverging"]))
    return NutsRun(idata, divergences, arviz_io.bfmi(idata), seconds)


@dataclass(frozen=True)
class VIThresholds:
    """Agreement thresholds for a VI solver against a gated NUTS reference.

    Why these values: a mean-field approximation is acceptable as a *point*
    estimator when its posterior means sit inside the bulk of the exact posterior,
    so the median standardized error |m_VI - m_NUTS| / sd_NUTS must be at most 0.5
    (half an exact posterior sd); and its ranking of quantities (which is what
    recommendations use) must match, so the correlation of log posterior means must
    be at least 0.99. Both are far above the Monte Carlo error of the NUTS means
    (ESS >= 400 gives an error of at most 0.05 sd). The sd ratio and interval
    coverage are reported, not gated: mean-field VI is known to be too narrow.

    Parameters
    ----------
    max_median_std_error : float, default 0.5
        Largest median standardized error |m_VI - m_NUTS| / sd_NUTS of a group.
    min_log_mean_corr : float, default 0.99
        Smallest correlation of log posterior means of a group (gated only for Q >= 3).

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (validation level 2).
    """

    max_median_std_error: float = 0.5
    min_log_mean_corr: float = 0.99


@dataclass(frozen=True)
class Verdict:
    """The verdict of a comparison (`compare_vi`, `compare_exact`).

    Parameters
    ----------
    status : str
        "pass", "fail" or "inconclusive" (the gates failed).
    reasons : list of str
        Why it failed or is inconclusive, in words; empty on "pass".
    table : pandas.DataFrame
        One row per group of quantities (columns: see `compare_vi` / `compare_exact`).
    gates : GateResult
        The gates the verdict used.

    Raises
    ------
    None of its own (a frozen dataclass; ``status`` is not checked).

    Source: project addition (validation level 2).
    """

    status: str
    reasons: list[str]
    table: pd.DataFrame
    gates: GateResult


def vi_gap(nuts, vi, name: str, names=None) -> pd.DataFrame:
    """The VI gap of every scalar of one group: the one table behind `compare_vi` and the
    per-scalar tables of the cross-check reports.

    Parameters
    ----------
    nuts : array_like, shape (chain, draw, Q), or validation.checks.gates.QuantitySummary
        NUTS draws of the group, or the summaries of a stored reference.
    vi : array_like, shape (chain, draw, Q)
        Draws from q of the same Q scalars (cast to float64).
    name : str
        The group name.
    names : sequence of str, length Q, optional
        Labels of the scalars (default ``name[q]``).

    Returns
    -------
    pandas.DataFrame
        One row per scalar: quantity, nuts_mean, vi_mean, nuts_sd, vi_sd, std_error
        (|m_VI - m_NUTS| / sd_NUTS), sd_ratio (sd_VI / sd_NUTS), nuts_mean_in_vi90 (the NUTS mean
        inside the VI central 90% interval; bool).

    Raises
    ------
    ValueError
        ``vi`` or the ``nuts`` draws are not 3-D.

    Source: project addition (validation level 2: VI solvers report their gap).
    """
    s = summarize(nuts)
    v = np.asarray(vi, dtype=np.float64)
    if v.ndim != 3:
        raise ValueError(f"vi draws of {name} must have shape (chain, draw, Q), got {v.shape}")
    flat = v.reshape(-1, v.shape[-1])
    lo, hi = np.quantile(flat, [0.05, 0.95], axis=0)
    mn, sn = s.mean, s.sd
    mv, sv = flat.mean(axis=0), flat.std(axis=0, ddof=1)
    names = list(names) if names is not None else [f"{name}[{q}]" for q in range(mn.size)]
    return pd.DataFrame({"quantity": names, "nuts_mean": mn, "vi_mean": mv, "nuts_sd": sn, "vi_sd": sv,
                         "std_error": np.abs(mv - mn) / sn, "sd_ratio": sv / sn,
                         "nuts_mean_in_vi90": (mn >= lo) & (mn <= hi)})


def compare_vi(
    nuts: dict,
    vi: dict[str, np.ndarray],
    gates: GateResult,
    thresholds: VIThresholds = VIThresholds(),
) -> Verdict:
    """Compare VI draws with gated NUTS draws, group by group.

    Parameters
    ----------
    nuts : dict group name -> array (chain, draw, Q) or `validation.checks.gates.QuantitySummary`
        Draws (or the stored summaries) of the same Q positive scalar quantities (e.g. expected
        rates) under NUTS.
    vi : dict group name -> array (chain, draw, Q)
        Draws from q, at least the groups of ``nuts``.
    gates : GateResult
        The gates of the NUTS run on the same quantities; failed gates make the verdict
        "inconclusive".
    thresholds : VIThresholds, default VIThresholds()
        The agreement thresholds.

    Returns
    -------
    Verdict
        Its table has one row per group with columns quantity, Q, corr_log_mean (NaN and not gated
        for a group of fewer than three quantities: a ranking of one or two is no evidence),
        median_rel_error, median_std_error, p90_std_error, median_sd_ratio, coverage90 (fraction of
        NUTS means inside the VI central 90% interval), each a summary of the group's `vi_gap` table.

    Raises
    ------
    ValueError
        Draws that are not 3-D (`vi_gap`).
    KeyError
        ``vi`` lacks a group of ``nuts``.

    Source: project addition (validation level 2).
    """
    rows = []
    reasons = []
    for name in nuts:
        gap = vi_gap(nuts[name], vi[name], name)
        m_n, m_v = gap.nuts_mean.to_numpy(), gap.vi_mean.to_numpy()
        row = {
            "quantity": name,
            "Q": len(gap),
            # a ranking needs three quantities: with one the correlation is undefined, with two it is +-1
            "corr_log_mean": float(np.corrcoef(np.log(m_n), np.log(m_v))[0, 1]) if len(gap) >= 3 else np.nan,
            "median_rel_error": float(np.median(np.abs(m_v - m_n) / np.abs(m_n))),
            "median_std_error": float(gap.std_error.median()),
            "p90_std_error": float(gap.std_error.quantile(0.9)),
            "median_sd_ratio": float(gap.sd_ratio.median()),
            "coverage90": float(gap.nuts_mean_in_vi90.mean()),
        }
        rows.append(row)
        if row["median_std_error"] > thresholds.max_median_std_error:
            reasons.append(
                f"{name}: median standardized error {row['median_std_error']:.3f} > {thresholds.max_median_std_error}"
            )
        if len(gap) >= 3 and not row["corr_log_mean"] >= thresholds.min_log_mean_corr:
            reasons.append(f"{name}: corr(log means) {row['corr_log_mean']:.4f} < {thresholds.min_log_mean_corr}")
    table = pd.DataFrame(rows)
    if not gates.passed:
        return Verdict("inconclusive", ["NUTS reference failed its gates: " + "; ".join(gates.failures)] + reasons, table, gates)
    return Verdict("fail" if reasons else "pass", reasons, table, gates)


def compare_exact(
    a: dict,
    b: dict,
    gates: GateResult,
    *,
    false_alarm: float = 0.01,
) -> Verdict:
    """Two exact samplers must agree within Monte Carlo error.

    For each of the Q quantities of a group, z_q = |mean_a - mean_b| / sqrt(mcse_a^2 + mcse_b^2)
    with ESS-based MCSEs from ArviZ; under agreement each z_q is approximately |N(0, 1)|.
    The group fails if max_q z_q exceeds the Bonferroni threshold
    Phi^-1(1 - false_alarm / (2 Q)), so the probability of a false alarm per group is at
    most ``false_alarm`` whatever the correlation between quantities (expected rates of
    one user are strongly correlated, which rules out tests that assume independence).
    For Q = 300 and false_alarm = 0.01 the threshold is 3.9 MCSE. The number of z_q above
    3, and the median ratio of posterior sds, are reported.

    Parameters
    ----------
    a : dict group name -> array (chain, draw, Q) or validation.checks.gates.QuantitySummary
        Draws of the first sampler (a stored reference keeps the ArviZ summaries of its full draws).
    b : dict group name -> array (chain, draw, Q) or validation.checks.gates.QuantitySummary
        The same for the second sampler, at least the groups of ``a``.
    gates : GateResult
        The gates of both runs (`combined_gates`); failed gates make the verdict "inconclusive".
    false_alarm : float, default 0.01
        Probability of a false alarm per group (keyword-only).

    Returns
    -------
    Verdict
        Its table has one row per group: quantity, Q, max_z, threshold, n_z_above_3,
        median_sd_ratio (sd_a / sd_b).

    Raises
    ------
    ValueError
        Draws that are not 3-D (`validation.checks.gates.summarize`).
    KeyError
        ``b`` lacks a group of ``a``.

    Source: project addition (validation level 2).
    """
    rows = []
    reasons = []
    for name in a:
        da = summarize(a[name])
        db = summarize(b[name])
        zs = np.abs(da.mean - db.mean) / np.sqrt(da.mcse_mean ** 2 + db.mcse_mean ** 2)
        q = zs.size
        threshold = float(stats.norm.isf(false_alarm / (2 * q)))
        rows.append(
            {
                "quantity": name,
                "Q": q,
                "max_z": float(zs.max()),
                "threshold": threshold,
                "n_z_above_3": int(np.sum(zs > 3)),
                "median_sd_ratio": float(np.median(da.sd / db.sd)),
            }
        )
        if zs.max() > threshold:
            reasons.append(f"{name}: max |difference of means| = {zs.max():.2f} MCSE > {threshold:.2f} (Bonferroni, {q} quantities)")
    table = pd.DataFrame(rows)
    if not gates.passed:
        return Verdict("inconclusive", ["gates failed: " + "; ".join(gates.failures)] + reasons, table, gates)
    return Verdict("fail" if reasons else "pass", reasons, table, gates)


def combined_gates(nuts_gate: GateResult, solver_gate: GateResult, solver_name: str = "Gibbs") -> GateResult:
    """The gates of an exact-vs-exact cross-check: NUTS's and the solver's (R-hat/ESS on its draws:
    its MCSEs are meaningful only if it mixes); either failing makes `compare_exact` inconclusive.

    Parameters
    ----------
    nuts_gate : GateResult
        The NUTS run's gates (with its divergences and E-BFMI).
    solver_gate : GateResult
        The exact solver's gates (R-hat / ESS on its draws).
    solver_name : str, default "Gibbs"
        Prefix of the solver's failures; its lower case labels the solver's rows (column ``method``).

    Returns
    -------
    GateResult
        Passed when both passed; the failures prefixed "NUTS " / ``solver_name``; both tables
        stacked with a ``method`` column; NUTS's divergences and E-BFMI; the fewer chains.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    return GateResult(
        passed=nuts_gate.passed and solver_gate.passed,
        failures=[f"NUTS {f}" for f in nuts_gate.failures] + [f"{solver_name} {f}" for f in solver_gate.failures],
        table=pd.concat([nuts_gate.table.assign(method="nuts"), solver_gate.table.assign(method=solver_name.lower())],
                        ignore_index=True),
        divergences=nuts_gate.divergences,
        bfmi=nuts_gate.bfmi,
        n_chains=min(nuts_gate.n_chains, solver_gate.n_chains),
    )


def exact_gates(nuts_quantities, solver_quantities, *, divergences, bfmi, solver_name: str = "Gibbs") -> GateResult:
    """`combined_gates` of `gates.nuts_gates` on the NUTS draws or summaries (with NUTS's divergences
    and E-BFMI) and on the exact solver's draws (R-hat / ESS only), for `compare_exact`.

    Parameters
    ----------
    nuts_quantities : dict group name -> array (chain, draw, Q) or validation.checks.gates.QuantitySummary
        The NUTS side.
    solver_quantities : dict group name -> array (chain, draw, Q) or validation.checks.gates.QuantitySummary
        The exact solver's side.
    divergences : int
        NUTS's divergent transitions (keyword-only).
    bfmi : numpy.ndarray, shape (chain,), float64
        NUTS's E-BFMI per chain (keyword-only).
    solver_name : str, default "Gibbs"
        Label of the solver in the failures and the table.

    Returns
    -------
    GateResult
        The `combined_gates` of both.

    Raises
    ------
    ValueError
        Draws that are not (chain, draw, Q), or an empty dict.

    Source: project addition.
    """
    return combined_gates(nuts_gates(nuts_quantities, divergences=divergences, bfmi=bfmi),
                          nuts_gates(solver_quantities, divergences=0, bfmi=np.array([])), solver_name)


def gibbs_line(config, seconds: float) -> str:
    """The report line of an exact sampler's run.

    Parameters
    ----------
    config : object
        A config with attributes ``gibbs_chains``, ``gibbs_warmup``, ``gibbs_samples``,
        ``gibbs_thin`` (ints).
    seconds : float
        Wall-clock seconds of the run.

    Returns
    -------
    str
        E.g. ``"4 chains x (500 warmup + 1000 x 2 sweeps), 12.3 s"``.

    Raises
    ------
    AttributeError
        ``config`` lacks one of the four attributes.

    Source: project addition.
    """
    c = config
    return (f"{c.gibbs_chains} chains x ({c.gibbs_warmup} warmup + {c.gibbs_samples} x {c.gibbs_thin} sweeps), "
            f"{seconds:.1f} s")


def best_restart(fits: list, scores) -> tuple[object, list[float]]:
    """The fit with the highest score (final ELBO) among VI restarts, and the scores as floats.

    Parameters
    ----------
    fits : list
        The restarts' fits (any objects).
    scores : iterable of float
        One score per fit (e.g. the final ELBO), higher is better.

    Returns
    -------
    tuple (object, list of float)
        The fit of the highest score (the first on ties) and the scores as Python floats.

    Raises
    ------
    ValueError
        ``fits`` is empty.

    Source: project addition (coordinate ascent finds local optima).
    """
    scores = [float(s) for s in scores]
    if not fits:
        raise ValueError("best_restart: no fits")
    return fits[int(np.argmax(scores))], scores


@dataclass(frozen=True)
class CrosscheckResult:
    """What every model's ``run_crosscheck`` returns (a solver against gated NUTS).

    Parameters
    ----------
    model : str
        The model's short name ("hpf", "sbmf", ...).
    solver : str
        A label for reports ("HPF CAVI (q)", "SBMF Gibbs", ...).
    method : {"vi", "exact"}
        "vi" (verdict from `compare_vi`: VI gap) or "exact" (`compare_exact`: agreement within
        Monte Carlo error).
    verdict : Verdict
        ``verdict.gates`` are the gates the verdict used (for "exact": NUTS's and the solver's, see
        `combined_gates`), also available as ``gates``.
    solver_quantities, nuts_quantities : dict group name -> array (chain, draw, Q)
        Draws of identifiable quantities, from the solver and from NUTS.
    solver_seconds, nuts_seconds : float
        Wall-clock seconds of each run.
    config : object, optional
        The model's cross-check config.
    settings : dict str -> str, default {}
        Name -> one human-readable line (data, NUTS run, solver run), listed by the report.
    extra : dict, default {}
        Model-specific items; by convention DataFrames under ``update_table`` (level-1 checks:
        stationarity or Gibbs conditionals), ``dense_table`` (sparse vs dense brute force) and other
        ``*_table`` keys are written into the report as tables, ``elbo`` (the kept VI run's trace) as a
        curve, ``khat`` (a `validation.checks.vi_evidence.KhatResult`, from `vi_crosscheck`'s
        ``khat_problem``) and ``vsbc`` (a `validation.checks.vi_evidence.VSBCResult`) in the report's
        "VI evidence" section; anything else (the simulated data, run objects) is kept for notebooks
        and tests.
    solver_idata, nuts_idata : arviz.InferenceData, optional
        The runs' draws, when kept.
    reference : validation.checks.references.Reference, optional
        The NUTS reference compared against.

    Raises
    ------
    ValueError
        ``method`` is not "vi" or "exact".

    Source: project addition (validation level 2).
    """

    model: str
    solver: str
    method: str
    verdict: Verdict
    solver_quantities: dict = field(repr=False)
    nuts_quantities: dict = field(repr=False)
    solver_seconds: float
    nuts_seconds: float
    config: object = None
    settings: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict, repr=False)
    solver_idata: object = field(default=None, repr=False)
    nuts_idata: object = field(default=None, repr=False)
    reference: object = field(default=None, repr=False)

    def __post_init__(self):
        if self.method not in ("vi", "exact"):
            raise ValueError(f"method must be 'vi' or 'exact', got {self.method!r}")

    @property
    def gates(self) -> GateResult:
        """The gates the verdict used (``verdict.gates``), a `validation.checks.gates.GateResult`.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.verdict.gates

    @property
    def exit_status(self) -> int:
        """The CLI's exit status (an int): 0 pass, 1 fail, 3 inconclusive (NUTS failed its gates).

        Raises
        ------
        KeyError
            ``verdict.status`` is none of "pass", "fail", "inconclusive".

        Source: project addition.
        """
        return {"pass": 0, "fail": 1, "inconclusive": 3}[self.verdict.status]


def _nuts_summaries(ref: Reference, groups) -> dict:
    return {g: ref.summary[g] for g in groups}


def exact_crosscheck(*, model: str, solver: str, ref: Reference, solver_quantities: dict, solver_seconds: float,
                     config, settings: dict, solver_name: str = "Gibbs", extra: dict | None = None,
                     solver_idata=None) -> CrosscheckResult:
    """The exact-vs-exact skeleton: an exact sampler against a NUTS reference (fresh or stored).

    Both sides are gated (`exact_gates`: NUTS on the reference's summaries with its divergences and
    E-BFMI, the solver on its own draws), and every group of ``solver_quantities`` (dict group ->
    draws (chain, draw, Q)) is compared with the reference's summaries by `compare_exact`
    (Bonferroni, 1% false alarm per group). All parameters are keyword-only.

    Parameters
    ----------
    model : str
        The model's short name.
    solver : str
        The solver's label for reports.
    ref : validation.checks.references.Reference
        The NUTS reference, with summaries of the compared groups.
    solver_quantities : dict group name -> array (chain, draw, Q)
        The solver's draws of identified quantities.
    solver_seconds : float
        Wall-clock seconds of the solver's run.
    config : object
        The model's cross-check config, kept in the result.
    settings : dict str -> str
        The model's report lines (data, solver run); the NUTS line comes from the reference.
    solver_name : str, default "Gibbs"
        Label of the solver in the gates.
    extra : dict, optional
        Model-specific items for the report (see `CrosscheckResult`).
    solver_idata : arviz.InferenceData, optional
        The solver's draws, kept in the result.

    Returns
    -------
    CrosscheckResult
        Method "exact", with the verdict of `compare_exact`.

    Raises
    ------
    KeyError
        The reference lacks a compared group.
    ValueError
        Solver draws that are not (chain, draw, Q).

    Source: project addition (validation level 2).
    """
    nq = _nuts_summaries(ref, solver_quantities)
    combined = exact_gates(nq, solver_quantities, divergences=ref.divergences, bfmi=ref.bfmi, solver_name=solver_name)
    return CrosscheckResult(
        model=model, solver=solver, method="exact", verdict=compare_exact(solver_quantities, nq, combined),
        solver_quantities=solver_quantities, nuts_quantities={g: ref.draws[g] for g in solver_quantities},
        solver_seconds=solver_seconds, nuts_seconds=ref.seconds, config=config,
        settings={**settings, "NUTS": ref.line()}, extra=dict(extra or {}), solver_idata=solver_idata,
        nuts_idata=ref.idata, reference=ref)


def vi_crosscheck(*, model: str, solver: str, ref: Reference, solver_quantities: dict, solver_seconds: float,
                  config, settings: dict, verdict_groups=None, gap_groups: dict | None = None, plotted=None,
                  extra: dict | None = None, solver_idata=None, thresholds: VIThresholds = VIThresholds(),
                  khat_problem=None, khat_draws: int | None = None) -> CrosscheckResult:
    """The VI-vs-exact skeleton: draws from q against a NUTS reference (fresh or stored).

    ``verdict_groups`` (default every group of ``solver_quantities``, each positive): NUTS gated on
    them (`validation.checks.gates.nuts_gates` on the reference's summaries), verdict by `compare_vi`.
    ``gap_groups``: group -> scalar names (or None): each gets a per-scalar `vi_gap` table in
    ``extra["GROUP_table"]`` with its own NUTS gate in ``nuts_gates_passed`` (reported, not gated).
    ``plotted``: the groups the report plots on log axes (default ``verdict_groups``).
    ``khat_problem``: a `validation.checks.vi_evidence.KhatProblem` of the kept fit (draws from q with log q,
    the program's log joint): its PSIS k-hat of q against the program's posterior (``khat_draws`` draws
    from q, default the config's ``n_vi_draws`` or 4000, seed ``config.seed``) goes to ``extra["khat"]``
    (a `validation.checks.vi_evidence.KhatResult`, reported, not gated: mean-field q on hundreds of latent
    scalars is expected to read "unreliable"). A `validation.checks.vi_evidence.VSBCResult` given in
    ``extra["vsbc"]`` is reported beside it. All parameters are keyword-only.

    Parameters
    ----------
    model : str
        The model's short name.
    solver : str
        The solver's label for reports.
    ref : validation.checks.references.Reference
        The NUTS reference, with summaries of the compared groups.
    solver_quantities : dict group name -> array (chain, draw, Q)
        Draws from q of identified quantities.
    solver_seconds : float
        Wall-clock seconds of the solver's run.
    config : object
        The model's cross-check config (``seed`` and ``n_vi_draws`` are read when present).
    settings : dict str -> str
        The model's report lines; the NUTS line comes from the reference.
    verdict_groups : sequence of str, optional
        The groups the verdict is on (default every group of ``solver_quantities``; each positive).
    gap_groups : dict group name -> sequence of str or None, optional
        Groups that get a per-scalar `vi_gap` table (with the scalars' names).
    plotted : sequence of str, optional
        The groups the report plots (default ``verdict_groups``).
    extra : dict, optional
        Model-specific items for the report (see `CrosscheckResult`).
    solver_idata : arviz.InferenceData, optional
        The solver's draws, kept in the result.
    thresholds : VIThresholds, default VIThresholds()
        The agreement thresholds of `compare_vi`.
    khat_problem : validation.checks.vi_evidence.KhatProblem, optional
        The kept fit's draws from q and the program's log joint, for the PSIS k-hat.
    khat_draws : int, optional
        Draws from q for the k-hat.

    Returns
    -------
    CrosscheckResult
        Method "vi", with the verdict of `compare_vi`.

    Raises
    ------
    KeyError
        The reference lacks a group.
    ValueError
        From the k-hat (draws on another space than the program's, non-finite log ratios) or draws
        that are not 3-D.

    Source: project addition (validation level 2; PSIS k-hat: Yao et al. 2018, sec. 3).
    """
    evidence = {}
    if khat_problem is not None:
        from validation.checks import vi_evidence

        n = khat_draws or getattr(config, "n_vi_draws", None) or 4000
        evidence["khat"] = vi_evidence.khat(khat_problem, n_draws=n, seed=getattr(config, "seed", 0))
    verdict_groups = list(solver_quantities) if verdict_groups is None else list(verdict_groups)
    plotted = verdict_groups if plotted is None else list(plotted)
    gate = nuts_gates(_nuts_summaries(ref, verdict_groups), divergences=ref.divergences, bfmi=ref.bfmi)
    verdict = compare_vi(_nuts_summaries(ref, verdict_groups), {g: solver_quantities[g] for g in verdict_groups},
                         gate, thresholds)
    tables = {}
    for g, names in (gap_groups or {}).items():
        t = vi_gap(ref.summary[g], solver_quantities[g], g, names)
        t["nuts_gates_passed"] = ref.gates([g]).passed
        tables[f"{g}_table"] = t
    return CrosscheckResult(
        model=model, solver=solver, method="vi", verdict=verdict,
        solver_quantities={g: solver_quantities[g] for g in plotted},
        nuts_quantities={g: ref.draws[g] for g in plotted}, solver_seconds=solver_seconds,
        nuts_seconds=ref.seconds, config=config, settings={**settings, "NUTS": ref.line()},
        extra={**tables, **(extra or {}), **evidence}, solver_idata=solver_idata, nuts_idata=ref.idata,
        reference=ref)
