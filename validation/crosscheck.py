"""Posterior-level validation: a solver against gated NUTS, on identifiable quantities.

Generic pieces, used by every model's glue (for HPF: `validation.hpf`):

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
  (and `validation.report.crosscheck_report` writes, whatever the model).

Raw factor coordinates are never compared: they are identified only up to
rotation, scaling and permutation. Source: ../shared/DESIGN.md, level 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np
import pandas as pd
from scipy import stats

from custom_inference import arviz_io

from .gates import GateResult, nuts_gates

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
]


@dataclass(frozen=True)
class NutsRun:
    """A finished NUTS run: the InferenceData plus what the gates need."""

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
    """

    max_median_std_error: float = 0.5
    min_log_mean_corr: float = 0.99


@dataclass(frozen=True)
class Verdict:
    """``status`` is "pass", "fail" or "inconclusive" (NUTS gates failed)."""

    status: str
    reasons: list[str]
    table: pd.DataFrame
    gates: GateResult


def _summaries(draws):
    draws = np.asarray(draws, dtype=np.float64)
    flat = draws.reshape(-1, draws.shape[-1])
    return flat.mean(axis=0), flat.std(axis=0, ddof=1), flat


def compare_vi(
    nuts: dict[str, np.ndarray],
    vi: dict[str, np.ndarray],
    gates: GateResult,
    thresholds: VIThresholds = VIThresholds(),
) -> Verdict:
    """Compare VI draws with gated NUTS draws, group by group.

    Parameters
    ----------
    nuts, vi : dict group name -> array (chain, draw, Q)
        Draws of the same Q positive scalar quantities (e.g. expected rates) under
        NUTS and under q.
    gates : GateResult of the NUTS run on the same quantities.

    Returns
    -------
    Verdict; its table has one row per group with columns Q, corr_log_mean,
    median_rel_error, median_std_error, p90_std_error, median_sd_ratio,
    coverage90 (fraction of NUTS means inside the VI central 90% interval).
    """
    rows = []
    reasons = []
    for name in nuts:
        m_n, s_n, _ = _summaries(nuts[name])
        m_v, s_v, flat_v = _summaries(vi[name])
        std_err = np.abs(m_v - m_n) / s_n
        lo, hi = np.quantile(flat_v, [0.05, 0.95], axis=0)
        row = {
            "quantity": name,
            "Q": m_n.size,
            "corr_log_mean": float(np.corrcoef(np.log(m_n), np.log(m_v))[0, 1]),
            "median_rel_error": float(np.median(np.abs(m_v - m_n) / np.abs(m_n))),
            "median_std_error": float(np.median(std_err)),
            "p90_std_error": float(np.quantile(std_err, 0.9)),
            "median_sd_ratio": float(np.median(s_v / s_n)),
            "coverage90": float(np.mean((m_n >= lo) & (m_n <= hi))),
        }
        rows.append(row)
        if row["median_std_error"] > thresholds.max_median_std_error:
            reasons.append(
                f"{name}: median standardized error {row['median_std_error']:.3f} > {thresholds.max_median_std_error}"
            )
        if not row["corr_log_mean"] >= thresholds.min_log_mean_corr:
            reasons.append(f"{name}: corr(log means) {row['corr_log_mean']:.4f} < {thresholds.min_log_mean_corr}")
    table = pd.DataFrame(rows)
    if not gates.passed:
        return Verdict("inconclusive", ["NUTS reference failed its gates: " + "; ".join(gates.failures)] + reasons, table, gates)
    return Verdict("fail" if reasons else "pass", reasons, table, gates)


def compare_exact(
    a: dict[str, np.ndarray],
    b: dict[str, np.ndarray],
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
    """
    rows = []
    reasons = []
    for name in a:
        da = arviz_io.diagnostics(a[name])
        db = arviz_io.diagnostics(b[name])
        zs = np.abs(da["mean"] - db["mean"]) / np.sqrt(da["mcse_mean"] ** 2 + db["mcse_mean"] ** 2)
        q = zs.size
        threshold = float(stats.norm.isf(false_alarm / (2 * q)))
        rows.append(
            {
                "quantity": name,
                "Q": q,
                "max_z": float(zs.max()),
                "threshold": threshold,
                "n_z_above_3": int(np.sum(zs > 3)),
                "median_sd_ratio": float(np.median(da["sd"] / db["sd"])),
            }
        )
        if zs.max() > threshold:
            reasons.append(f"{name}: max |difference of means| = {zs.max():.2f} MCSE > {threshold:.2f} (Bonferroni, {q} quantities)")
    table = pd.DataFrame(rows)
    if not gates.passed:
        return Verdict("inconclusive", ["reference failed its gates: " + "; ".join(gates.failures)] + reasons, table, gates)
    return Verdict("fail" if reasons else "pass", reasons, table, gates)


def combined_gates(nuts_gate: GateResult, solver_gate: GateResult, solver_name: str = "Gibbs") -> GateResult:
    """The gates of an exact-vs-exact cross-check: NUTS's and the solver's (R-hat/ESS on its draws:
    its MCSEs are meaningful only if it mixes); either failing makes `compare_exact` inconclusive."""
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
    """`combined_gates` of `gates.nuts_gates` on the NUTS draws (with NUTS's divergences and E-BFMI)
    and on the exact solver's draws (R-hat / ESS only), for `compare_exact`."""
    return combined_gates(nuts_gates(nuts_quantities, divergences=divergences, bfmi=bfmi),
                          nuts_gates(solver_quantities, divergences=0, bfmi=np.array([])), solver_name)


@dataclass(frozen=True)
class CrosscheckResult:
    """What every model's ``run_crosscheck`` returns (a solver against gated NUTS).

    ``model``: the model's short name ("hpf", "sbmf", ...); ``solver``: a label for reports
    ("HPF CAVI (q)", "SBMF Gibbs", ...); ``method``: "vi" (verdict from `compare_vi`: VI gap)
    or "exact" (`compare_exact`: agreement within Monte Carlo error). ``verdict.gates`` are the
    gates the verdict used (for "exact": NUTS's and the solver's, see `combined_gates`), also
    available as ``gates``. The quantity dicts map a group name to draws (chain, draw, Q) of
    identifiable quantities. ``settings``: name -> one human-readable line (data, NUTS run,
    solver run), listed by the report. ``extra``: model-specific items; by convention
    DataFrames under ``update_table`` (level-1 checks: stationarity or Gibbs conditionals),
    ``dense_table`` (sparse vs dense brute force) and other ``*_table`` keys are written into
    the report as tables, ``elbo`` (the kept VI run's trace) as a curve; anything else (the
    simulated data, run objects) is kept for notebooks and tests.
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

    def __post_init__(self):
        if self.method not in ("vi", "exact"):
            raise ValueError(f"method must be 'vi' or 'exact', got {self.method!r}")

    @property
    def gates(self) -> GateResult:
        return self.verdict.gates

    @property
    def exit_status(self) -> int:
        """The CLI's exit status: 0 pass, 1 fail, 3 inconclusive (NUTS failed its gates)."""
        return {"pass": 0, "fail": 1, "inconclusive": 3}[self.verdict.status]
