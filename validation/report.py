"""Markdown reports with PNG plots for cross-checks, fits and the errata table.

Every writer takes a result object and an output directory, writes ``report.md``
and its figures there, and returns the path of the Markdown file.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from custom_inference import arviz_io  # noqa: E402

__all__ = ["markdown_table", "crosscheck_report", "model_crosscheck_report", "evaluation_report", "errata_report"]


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A DataFrame as a GitHub Markdown table (pandas + tabulate)."""
    return df.to_markdown(index=False, floatfmt=floatfmt)


def _header(title: str) -> list[str]:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [f"# {title}", "", f"_Written by factorbayes on {now}._", ""]


def _save(fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _means_scatter(nuts: dict, vi: dict, out: Path, label: str = "CAVI (q)") -> str:
    fig, axes = plt.subplots(1, len(nuts), figsize=(4.2 * len(nuts), 4))
    for ax, name in zip(np.atleast_1d(axes), nuts):
        m_n = nuts[name].reshape(-1, nuts[name].shape[-1]).mean(axis=0)
        m_v = vi[name].reshape(-1, vi[name].shape[-1]).mean(axis=0)
        ax.loglog(m_n, m_v, ".", ms=3, alpha=0.6)
        lo, hi = min(m_n.min(), m_v.min()), max(m_n.max(), m_v.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xlabel(f"NUTS posterior mean of {name}")
        ax.set_ylabel(f"{label} mean of {name}")
    return _save(fig, out, "means_scatter.png")


def _sd_ratio_hist(nuts: dict, vi: dict, out: Path, label: str = "VI") -> str:
    fig, axes = plt.subplots(1, len(nuts), figsize=(4.2 * len(nuts), 3.4))
    for ax, name in zip(np.atleast_1d(axes), nuts):
        s_n = nuts[name].reshape(-1, nuts[name].shape[-1]).std(axis=0)
        s_v = vi[name].reshape(-1, vi[name].shape[-1]).std(axis=0)
        ax.hist(np.log2(s_v / s_n), bins=40)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel(f"log2(sd {label} / sd NUTS), {name}")
    return _save(fig, out, "sd_ratio.png")


def _elbo_curve(elbo: np.ndarray, out: Path, name: str = "elbo.png") -> str:
    fig, ax = plt.subplots(figsize=(5, 3.4))
    it = np.arange(len(elbo))
    ax.plot(it[1:], elbo[1:])
    ax.set_xscale("log")
    ax.set_xlabel("CAVI sweep")
    ax.set_ylabel("ELBO (nats)")
    return _save(fig, out, name)


def _rank_plots(nuts: dict, out: Path) -> str:
    """Rank plots of the compared quantity with the worst R-hat in each group."""
    picks, names = [], []
    for name, draws in nuts.items():
        d = arviz_io.diagnostics(draws)
        q = int(np.argmax(d["r_hat"]))
        picks.append(draws[:, :, q])
        names.append(f"{name}[{q}] (R-hat {d['r_hat'][q]:.3f})")
    stacked = np.stack(picks, axis=-1)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.2))
    arviz_io.plot_rank(stacked, names, ax=np.atleast_1d(axes))
    return _save(fig, out, "nuts_rank.png")


def crosscheck_report(result, out_dir: str | Path, title: str | None = None) -> Path:
    """Write the cross-check report of a `validation.hpf.CrosscheckResult` (CAVI or Gibbs
    against NUTS): verdict, gates, comparison table, plots, update-level checks."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    v = result.verdict
    cfg = result.config
    name = {"cavi": "CAVI (q)", "gibbs": "Gibbs"}[result.solver]
    lines = _header(title or f"HPF cross-check: {name} vs NUTS")
    lines += [
        f"**Verdict: {v.status.upper()}**",
        "",
        *(f"- {r}" for r in v.reasons),
        "",
        "## Data and settings",
        "",
        f"- matrix {result.y.shape[0]} x {result.y.shape[1]}, {int((result.y > 0).sum())} nonzeros, "
        f"total count {int(result.y.sum())}; K = {cfg.n_components}",
        f"- hyperparameters: {dict(cfg.hyper._asdict())}",
        f"- NUTS: {cfg.num_chains} chains x ({cfg.num_warmup} warmup + {cfg.num_samples} draws), seed {cfg.seed}, "
        f"{result.nuts.seconds:.1f} s",
        f"- {result.settings}",
        "",
        "## Convergence gates (ArviZ, on the compared quantities)",
        "",
        "Thresholds: rank-normalized R-hat <= 1.01 with >= 4 chains, bulk and tail ESS >= 400, "
        "no divergences, E-BFMI >= 0.3.",
        "",
        markdown_table(v.gates.table),
        "",
        f"NUTS divergences: {v.gates.divergences}; E-BFMI per chain: " + ", ".join(f"{b:.2f}" for b in v.gates.bfmi),
        "",
    ]
    if result.solver == "cavi":
        lines += [
            "## VI gap (CAVI q against NUTS)",
            "",
            "Pass: median standardized error |m_VI - m_NUTS| / sd_NUTS <= 0.5 and corr(log means) >= 0.99 "
            "in every group (see `validation.crosscheck.VIThresholds` for why). The sd ratio and the "
            "coverage of NUTS means by the VI 90% intervals are reported: mean-field VI is expected to be too narrow.",
        ]
    else:
        lines += [
            "## Gibbs against NUTS (two exact methods)",
            "",
            "Pass: for every quantity, |mean_Gibbs - mean_NUTS| / sqrt(MCSE_Gibbs^2 + MCSE_NUTS^2) stays below the "
            "Bonferroni threshold for a 1% false-alarm rate per group (`validation.crosscheck.compare_exact`).",
        ]
    lines += [
        "",
        markdown_table(v.table),
        "",
        f"![posterior means]({_means_scatter(result.nuts_quantities, result.solver_quantities, out, name)})",
        "",
        f"![sd ratios]({_sd_ratio_hist(result.nuts_quantities, result.solver_quantities, out, name)})",
        "",
        f"![NUTS rank plots]({_rank_plots(result.nuts_quantities, out)})",
        "",
    ]
    if result.solver == "cavi":
        lines += ["## CAVI convergence", "",
                  f"![ELBO]({_elbo_curve(np.asarray(result.solver_idata.vi_trace.elbo.values), out)})", ""]
    if result.update_table is not None:
        what = ("each block's gradient of the ELBO (`jax.grad`) before and after its closed-form update"
                if result.solver == "cavi" else
                "each Gibbs conditional against the NumPyro program's normalized conditional on a grid (total variation)")
        lines += ["## Update-level checks (float64)", "", f"Checked: {what}.", "", markdown_table(result.update_table), ""]
    if result.dense_table is not None:
        lines += ["Sparse computations against dense brute force:", "", markdown_table(result.dense_table), ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def model_crosscheck_report(title: str, verdict, nuts_quantities: dict, solver_quantities: dict, out_dir, *,
                            solver_label: str, settings: list[str] = ()) -> Path:
    """Cross-check report for any model: verdict, ArviZ gates, comparison table, plots.

    ``verdict`` is a `validation.crosscheck.Verdict`; the quantity dicts map a name to draws
    (chain, draw, Q) of the compared identifiable quantities (NUTS and the solver).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    v = verdict
    lines = _header(title) + [f"**Verdict: {v.status.upper()}**", "", *(f"- {r}" for r in v.reasons), "",
                              "## Settings", "", *(f"- {s}" for s in settings), "",
                              "## Convergence gates (ArviZ, on the compared quantities)", "",
                              "Thresholds: rank-normalized R-hat <= 1.01 with >= 4 chains, bulk and tail ESS >= 400, "
                              "no divergences, E-BFMI >= 0.3.", "", markdown_table(v.gates.table), "",
                              "## Comparison", "", markdown_table(v.table), "",
                              f"![posterior means]({_means_scatter(nuts_quantities, solver_quantities, out, solver_label)})",
                              "",
                              f"![sd ratios]({_sd_ratio_hist(nuts_quantities, solver_quantities, out, solver_label)})", "",
                              f"![NUTS rank plots]({_rank_plots(nuts_quantities, out)})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def evaluation_report(tables: dict[str, pd.DataFrame], elbo: np.ndarray | None, out_dir, *, title: str,
                      notes: list[str] = (), bucket_tables: dict[str, pd.DataFrame] | None = None,
                      extra_plots: list[str] = ()) -> Path:
    """Write a metrics report: one Markdown table per protocol, optional ELBO curve
    and per-degree-bucket plots (the papers' by-degree figures); ``extra_plots`` are PNG
    names already written in ``out_dir``, linked in order."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = _header(title) + [f"- {n}" for n in notes] + [""]
    for name, table in tables.items():
        lines += [f"## {name}", "", markdown_table(table), ""]
    for name, table in (bucket_tables or {}).items():
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for method, sub in table.groupby("method"):
            ax.errorbar(np.sqrt(sub.bucket_low * sub.bucket_high), sub["mean"], yerr=sub["sem"], marker="o", label=method, capsize=2)
        ax.set_xscale("log")
        ax.set_xlabel("user degree (training entries), log-scale buckets")
        ax.set_ylabel(name)
        ax.legend()
        fname = _save(fig, out, f"by_degree_{name.replace(' ', '_').replace('@', 'at')}.png")
        lines += [f"![{name} by user degree]({fname})", ""]
    for name in extra_plots:
        lines += [f"![{Path(name).stem}]({name})", ""]
    if elbo is not None:
        lines += ["## CAVI convergence", "", f"![ELBO]({_elbo_curve(np.asarray(elbo), out)})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def errata_report(table: pd.DataFrame, out_dir) -> Path:
    """Write the errata table as Markdown."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = _header("Errata: printed equations of the seeds that the checks reject") + [
        "A row is OK when the printed form fails its check and the corrected form passes.",
        "",
        markdown_table(table),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
