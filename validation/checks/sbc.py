"""Simulation-based calibration (SBC), model-agnostic: runner, uniformity tests, plots, report.

If parameters are drawn from the prior, data from the model given them, and the algorithm
returns exact posterior draws, then for every scalar test quantity f the rank of f(truth)
among L posterior draws of f is uniform on {0, ..., L} (Talts et al. 2018). A sampler must
pass; for VI the same tables and plots quantify the known miscalibration (U-shaped ranks
for posteriors that are too narrow, a slope for a biased one).

- `sbc_seeds`: one master seed -> per-simulation seeds (prefix-stable).
- `run_sbc`: simulate -> fit -> ranks of the functionals, resumable through a cache folder.
- `SBCResult.uniformity`: the ECDF simultaneous-band test of Säilynoja, Bürkner & Vehtari
  (2022) with a stated false-alarm rate, a chi-square test on bins as a second opinion,
  per scalar, pooled per functional, and a Bonferroni family verdict.
- `ecdf_band`, `ecdf_test`: the band and the test on their own.
- `plot_ranks`, `sbc_report`: rank histograms (Talts' 99% band), ECDF-difference plots with
  the simultaneous band, and a Markdown report.

The model glue (simulate / fit / functionals) lives with each model, e.g.
`validation.models.hpf_gibbs.sbc_adapters`.

References
----------
Talts, Betancourt, Simpson, Vehtari, Gelman (2018). Validating Bayesian inference algorithms
with simulation-based calibration. arXiv:1804.06788.
Säilynoja, Bürkner, Vehtari (2022). Graphical test for discrete uniformity and its applications
in goodness-of-fit evaluation and multiple sample comparison. Statistics and Computing 32, 32.
Modrák, Moon, Kim, Bürkner, Huurre, Faltejsková, Gelman, Vehtari (2023). Simulation-based
calibration checking for Bayesian computation: the choice of test quantities shapes
sensitivity. Bayesian Analysis.
Source: project addition (validation level 3; the references above).
"""

from __future__ import annotations

import functools
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from validation.checks.report import _header, _save, markdown_table  # noqa: E402

__all__ = [
    "sbc_seeds",
    "run_sbc",
    "SBCResult",
    "EcdfBand",
    "ecdf_band",
    "ecdf_test",
    "default_bins",
    "chi2_test",
    "plot_ranks",
    "sbc_report",
]

#: Number of uniform rank samples simulated to calibrate the simultaneous ECDF band, and their
#: seed. With M = 10,000 the Monte Carlo standard error of the band's false-alarm rate at
#: alpha = 0.05 is sqrt(0.05 * 0.95 / 10,000) = 0.0022.
N_BAND_SIMS = 10_000
BAND_SEED = 20220101

_CACHE_VERSION = 1


# ------------------------------------------------------------------------------
# Seeds


def sbc_seeds(master_seed: int, n_sims: int) -> np.ndarray:
    """Per-simulation seeds from one master seed.

    Simulation ``s`` gets ``SeedSequence(master_seed).spawn(n_sims)[s].generate_state(1)[0]``.
    A spawned child depends only on the master seed and its index ``s`` (its spawn key), so
    simulation ``s`` has the same seed whatever ``n_sims`` is: the first 20 seeds of a
    200-simulation run are the seeds of a 20-simulation run.

    Parameters
    ----------
    master_seed : int >= 0
    n_sims : int >= 0

    Returns
    -------
    seeds : np.ndarray (n_sims,) int64, values in [0, 2**32) (valid for
        ``numpy.random.default_rng`` and ``jax.random.PRNGKey``). Two simulations share a seed
        with probability about n_sims**2 / 2**33 (1e-4 for 1,000 simulations); `run_sbc`
        derives its other streams from each seed, so even then results stay reproducible.

    Raises
    ------
    ValueError
        master_seed negative or not an integer; n_sims negative or not an integer.

    Source: project addition (validation level 3; numpy ``SeedSequence.spawn``).
    """
    _check_int("master_seed", master_seed, minimum=0)
    _check_int("n_sims", n_sims, minimum=0)
    children = np.random.SeedSequence(int(master_seed)).spawn(int(n_sims))
    return np.array([c.generate_state(1, dtype=np.uint32)[0] for c in children], dtype=np.int64)


def _derived_seed(seed: int, stream: int) -> int:
    """A further independent 32-bit seed derived from a simulation's seed (stream 1: fit,
    stream 2: tie-breaking). Keeps the fit's random numbers apart from the simulator's even
    when both seed the same generator type with their integer (a sampler that initializes
    from the prior with the simulator's key would otherwise start at the truth)."""
    return int(np.random.SeedSequence([int(seed), 0x5BC, int(stream)]).generate_state(1, dtype=np.uint32)[0])


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


# ------------------------------------------------------------------------------
# Result


@dataclass
class SBCResult:
    """Ranks (and per-simulation summaries) of an SBC run (made by `run_sbc`).

    Parameters
    ----------
    ranks : dict functional -> np.ndarray (n_sims, Q) int64
        Rank of the true value among the L thinned posterior draws, in 0..L, ties broken
        uniformly at random.
    n_draws : int
        L, the number of thinned posterior draws each rank is taken against (ranks take
        L + 1 values).
    seeds : np.ndarray (n_sims,) int64
        Seed given to ``simulate`` for each simulation (`sbc_seeds`).
    fit_seeds : np.ndarray (n_sims,) int64
        Seed given to ``fit`` for each simulation (derived from ``seeds``). Simulation ``s`` is
        reproduced by ``truth, data = simulate(seeds[s]); fit(data, fit_seeds[s])``.
    master_seed : int or None
        The master seed ``seeds`` were drawn from (`sbc_seeds`), when known.
    method : str
        Name of the inference method (free text; stored in the cache and checked on reuse).
    truth : dict functional -> np.ndarray (n_sims, Q) float64
        The functional at the true parameters.
    post_mean, post_sd : dict functional -> np.ndarray (n_sims, Q) float64
        Mean and standard deviation of the functional over the L thinned draws.
    seconds : np.ndarray (n_sims,) float64
        Wall time of ``fit`` per simulation (cached simulations keep their first timing).

    Raises
    ------
    None of its own (a dataclass; the fields are not checked).

    Source: project addition (Talts et al. 2018: ranks of the truth among posterior draws).
    """

    ranks: dict[str, np.ndarray]
    n_draws: int
    seeds: np.ndarray
    fit_seeds: np.ndarray | None = None
    master_seed: int | None = None
    method: str = ""
    truth: dict[str, np.ndarray] = field(default_factory=dict)
    post_mean: dict[str, np.ndarray] = field(default_factory=dict)
    post_sd: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: np.ndarray | None = None

    @property
    def n_sims(self) -> int:
        """N, the number of simulations (``len(seeds)``), an int.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(len(self.seeds))

    def z_scores(self) -> dict[str, np.ndarray]:
        """(truth - posterior mean) / posterior sd, dict functional -> (n_sims, Q).

        For an exact posterior their mean is about 0 and their sd about 1 over simulations
        (the posterior variance averaged over the prior predictive is the prior variance
        minus that of the posterior mean); an sd above 1 means posteriors that are too
        narrow, as for mean-field VI. Only approximate for skewed functionals and small L.

        Returns
        -------
        dict str -> numpy.ndarray, shape (n_sims, Q), float64
            One entry per functional of ``truth``; NaN where the posterior sd is 0.

        Raises
        ------
        KeyError
            ``post_mean`` or ``post_sd`` lacks a functional of ``truth``.

        Source: project addition (Talts et al. 2018; Modrák et al. 2023).
        """
        out = {}
        for name, truth in self.truth.items():
            sd = np.where(self.post_sd[name] > 0, self.post_sd[name], np.nan)
            out[name] = (truth - self.post_mean[name]) / sd
        return out

    def uniformity(self, alpha: float = 0.05, *, bins: int | None = None, n_band_sims: int = N_BAND_SIMS,
                   band_seed: int = BAND_SEED) -> pd.DataFrame:
        """Uniformity of the ranks: per scalar, pooled per functional, and Bonferroni families.

        Tests
        -----
        ECDF (primary; Säilynoja, Bürkner & Vehtari 2022): the ECDF of the N ranks on the grid
        z_i = i/(L+1) must stay inside the simultaneous band whose probability of being left
        by N uniform ranks anywhere on the grid is alpha (`ecdf_band`, `ecdf_test`). ``ecdf_p``
        is the test's p-value: the fraction of simulated uniform samples whose smallest
        pointwise binomial tail probability is <= the observed one; ``ecdf_pass`` is
        ``ecdf_p > alpha_used``, which is exactly "the ECDF stays inside the band at level
        alpha_used". 0 means below 1 / n_band_sims.
        Chi-square (second opinion, Talts et al. 2018): ranks in ``bins`` bins (`default_bins`;
        stated in column ``chi2_bins``), ``scipy.stats.chisquare`` against the uniform
        expected counts; ``chi2_pass`` is ``chi2_p > alpha_used``.

        Rows
        ----
        kind "scalar": one per scalar of each functional, at level alpha (false-alarm rate
        alpha for each scalar on its own).
        kind "pooled": the ranks of all Q scalars of a functional pooled into one sample of
        N Q ranks, at level alpha. Scalars of one simulation share its data, so their ranks
        may be dependent and the pooled test's false-alarm rate is exactly alpha only when
        they are independent; read it as a summary.
        kind "family": Bonferroni over the Q scalars of the functional (``alpha_used`` =
        alpha / Q; ``ecdf_p`` and ``chi2_p`` are the smallest per-scalar p-values): the
        family passes when every scalar passes at alpha / Q, so its false-alarm rate is at
        most alpha whatever the dependence. The last row (functional "all") is the Bonferroni
        family of all scalars of all functionals, at alpha / Q_total: the overall verdict
        (`passed`).

        Parameters
        ----------
        alpha : float, default 0.05
            False-alarm rate, in (0, 1).
        bins : int, optional
            Chi-square bins (default `default_bins`; keyword-only, like the next two).
        n_band_sims : int, default N_BAND_SIMS
            Uniform samples simulated to calibrate the ECDF band (`ecdf_band`).
        band_seed : int, default BAND_SEED
            Their seed.

        Returns
        -------
        pandas.DataFrame
            Columns functional, scalar, kind, n, alpha_used, ecdf_min_p, ecdf_p, ecdf_pass, chi2,
            chi2_bins, chi2_p, chi2_pass, mean_rank (expected L/2); the last row is the family "all".

        Raises
        ------
        ValueError
            alpha outside (0, 1); bins not an integer in [2, L+1]; ranks outside 0..L.

        Warns
        -----
        UserWarning
            ``alpha / Q_total * n_band_sims < 10``: the family band is poorly resolved.

        Source: project addition (Säilynoja, Bürkner & Vehtari 2022; Talts et al. 2018).
        """
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        L = self.n_draws
        q_total = sum(r.shape[1] for r in self.ranks.values())
        if alpha / max(q_total, 1) * n_band_sims < 10:
            warnings.warn(f"alpha / Q = {alpha / q_total:.2g} with n_band_sims = {n_band_sims}: fewer than 10 simulated "
                          "exceedances; the family band is poorly resolved (raise n_band_sims)", stacklevel=2)
        rows = []
        for name, ranks in self.ranks.items():
            n, q = ranks.shape
            scalar_rows = []
            for j in range(q):
                scalar_rows.append(_test_row(name, str(j), "scalar", ranks[:, j], L, alpha, bins, n_band_sims, band_seed))
            rows += scalar_rows
            pooled = ranks.reshape(-1)
            if q > 1 and pooled.size * (L + 1) <= 5e7:
                rows.append(_test_row(name, "pooled", "pooled", pooled, L, alpha, bins, n_band_sims, band_seed))
            rows.append(_family_row(name, scalar_rows, alpha))
        all_scalars = [r for r in rows if r["kind"] == "scalar"]
        rows.append(_family_row("all", all_scalars, alpha))
        return pd.DataFrame(rows)

    def passed(self, alpha: float = 0.05, **kwargs) -> bool:
        """Overall verdict: every scalar of every functional passes the ECDF test at
        alpha / Q_total (Bonferroni; false-alarm rate <= alpha).

        Parameters
        ----------
        alpha : float, default 0.05
            Family false-alarm rate, in (0, 1).
        **kwargs
            ``bins``, ``n_band_sims``, ``band_seed``, passed to `uniformity`.

        Returns
        -------
        bool
            ``ecdf_pass`` of the last row (family "all") of `uniformity`.

        Raises
        ------
        ValueError
            As `uniformity` (alpha outside (0, 1), bad ``bins``).

        Source: project addition (Säilynoja, Bürkner & Vehtari 2022; Bonferroni family).
        """
        table = self.uniformity(alpha, **kwargs)
        return bool(table.iloc[-1]["ecdf_pass"])


def _test_row(name, scalar, kind, ranks, L, alpha, bins, n_band_sims, band_seed) -> dict:
    min_p, p = ecdf_test(ranks, L, n_band_sims=n_band_sims, band_seed=band_seed)
    b = default_bins(len(ranks), L) if bins is None else bins
    chi2, chi2_p = chi2_test(ranks, L, b)
    return dict(functional=name, scalar=scalar, kind=kind, n=len(ranks), alpha_used=alpha, ecdf_min_p=min_p,
                ecdf_p=p, ecdf_pass=bool(p > alpha), chi2=chi2, chi2_bins=b, chi2_p=chi2_p,
                chi2_pass=bool(chi2_p > alpha), mean_rank=float(np.mean(ranks)))


def _family_row(name, scalar_rows, alpha) -> dict:
    q = len(scalar_rows)
    a = alpha / q
    ecdf_p = min(r["ecdf_p"] for r in scalar_rows)
    chi2_p = min(r["chi2_p"] for r in scalar_rows)
    return dict(functional=name, scalar=f"all {q} (Bonferroni)", kind="family", n=scalar_rows[0]["n"], alpha_used=a,
                ecdf_min_p=min(r["ecdf_min_p"] for r in scalar_rows), ecdf_p=ecdf_p, ecdf_pass=bool(ecdf_p > a),
                chi2=np.nan, chi2_bins=scalar_rows[0]["chi2_bins"], chi2_p=chi2_p, chi2_pass=bool(chi2_p > a),
                mean_rank=float(np.mean([r["mean_rank"] for r in scalar_rows])))


# ------------------------------------------------------------------------------
# Runner


def run_sbc(
    simulate: Callable[[int], tuple[Mapping[str, Any], Any]],
    fit: Callable[[Any, int], Mapping[str, Any]],
    functionals: Mapping[str, Callable[[Mapping[str, np.ndarray]], np.ndarray]],
    *,
    n_sims: int,
    master_seed: int = 0,
    n_draws: int = 99,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    method: str = "",
) -> SBCResult:
    """Run simulation-based calibration.

    For s = 0..n_sims-1, with ``seed = sbc_seeds(master_seed, n_sims)[s]``:
    ``truth, data = simulate(seed)``; ``draws = fit(data, fit_seed)`` (``fit_seed`` derived
    from ``seed``, see `SBCResult.fit_seeds`); the S draws are thinned to L = ``n_draws``
    draws at evenly spaced positions (``np.round(np.linspace(0, S - 1, L))``); each functional
    is applied to the truth and to each thinned draw; the rank of the truth is the number of
    thinned draws strictly below it, plus, for ties (draws equal to the truth, e.g. discrete
    functionals), a uniform integer in 0..n_ties drawn from a third stream derived from the
    seed. Under exact inference each rank is uniform on 0..L.

    Thinning: ranks are uniform only if the L draws are (close to) independent; MCMC draws
    are autocorrelated, and autocorrelation makes the rank histogram look too narrow or too
    wide when nothing is wrong. Talts et al. (2018) recommend thinning to about the effective
    sample size; here the thinning is even, so pass S >= L * (S / ESS) draws (e.g. keep
    S = 1000 draws whose ESS is about 100 and use L = 99). Independent draws (exact samplers,
    draws from q for VI) need no thinning.

    Parameters
    ----------
    simulate : callable seed -> (truth, data)
        ``truth``: dict name -> array of the parameters drawn from the prior (any shapes);
        ``data``: anything ``fit`` accepts, drawn from the model given ``truth``.
    fit : callable (data, seed) -> dict name -> array (S, ...)
        Posterior draws of all chains flattened on the first axis; the trailing shape of each
        array must be that of ``truth[name]`` where the name is in both. S >= n_draws.
    functionals : dict name -> callable params -> array (Q,)
        Each maps a parameter dict (the truth, or one posterior draw with the same keys and
        trailing shapes) to a 1-D array of Q scalars (0-D is taken as Q = 1), e.g. log xi_u
        for the first users. Applied in a Python loop to each of the L thinned draws only.
        Rank invariant quantities (rates, norms, hyperparameters, log-likelihood), not raw
        factor coordinates.
    n_sims : int >= 1
    master_seed : int >= 0
    n_draws : int >= 1
        L; ranks take L + 1 values. Choose L + 1 with many divisors (99, 199, 999) so that
        histogram bins are equal.
    cache_dir : path, optional
        Folder where simulation s is stored as ``sim_{s:05d}.npz`` (seeds, ranks, truth,
        posterior mean/sd of the functionals, seconds), written atomically when it finishes.
        Existing files are reused, so an interrupted run resumes with identical results and a
        run can be extended to more simulations. One folder per experiment (simulate, fit and
        functionals): a file written with another master seed, ``n_draws``, ``method`` or other
        functional names raises, but a changed ``fit`` under the same names cannot be detected.
    progress : bool
        tqdm progress bar over simulations.
    method : str
        Name of the inference method, stored in the result and the cache.

    Returns
    -------
    SBCResult

    Raises
    ------
    ValueError
        Bad counts or seeds; no functionals; ``fit`` returning arrays with differing first
        axes, fewer than ``n_draws`` draws, or trailing shapes that differ from the truth's;
        a functional returning a non-1-D array, a different number of scalars for a draw
        than for the truth, or NaN; a cache file that belongs to another experiment.

    Source: project addition (validation level 3; Talts et al. 2018).
    """
    _check_int("n_sims", n_sims, minimum=1)
    _check_int("n_draws", n_draws, minimum=1)
    if not functionals:
        raise ValueError("functionals must name at least one test quantity")
    for name, f in functionals.items():
        if not callable(f):
            raise ValueError(f"functionals[{name!r}] must be callable, got {type(f).__name__}")
    names = list(functionals)
    seeds = sbc_seeds(master_seed, n_sims)
    cache = None
    if cache_dir is not None:
        cache = Path(cache_dir)
        cache.mkdir(parents=True, exist_ok=True)

    records = []
    n_cached = 0
    bar = tqdm(range(n_sims), desc=f"SBC {method}".strip(), disable=not progress)
    for s in bar:
        seed = int(seeds[s])
        path = cache / f"sim_{s:05d}.npz" if cache is not None else None
        if path is not None and path.exists():
            records.append(_load_sim(path, s, seed, n_draws, names, method))
            n_cached += 1
            bar.set_postfix(cached=n_cached)
            continue
        rec = _one_simulation(simulate, fit, functionals, s, seed, n_draws)
        if path is not None:
            _save_sim(path, rec, n_draws, names, method)
        records.append(rec)

    def stack(key):
        out = {}
        for name in names:
            arrays = [r[key][name] for r in records]
            qs = {a.shape for a in arrays}
            if len(qs) > 1:
                raise ValueError(f"functional {name!r} returned different numbers of scalars across simulations: "
                                 f"{sorted(qs)} (a stale cache file?)")
            out[name] = np.stack(arrays)
        return out

    return SBCResult(
        ranks={k: v.astype(np.int64) for k, v in stack("rank").items()},
        n_draws=int(n_draws),
        seeds=seeds,
        fit_seeds=np.array([r["fit_seed"] for r in records], dtype=np.int64),
        master_seed=int(master_seed),
        method=method,
        truth=stack("truth"),
        post_mean=stack("mean"),
        post_sd=stack("sd"),
        seconds=np.array([r["seconds"] for r in records], dtype=np.float64),
    )


def _apply(name: str, f: Callable, params: Mapping, what: str) -> np.ndarray:
    value = np.asarray(f(params), dtype=np.float64)
    if value.ndim == 0:
        value = value.reshape(1)
    if value.ndim != 1:
        raise ValueError(f"functional {name!r} must return a 1-D array of scalars, got shape {value.shape} for {what}")
    if np.isnan(value).any():
        raise ValueError(f"functional {name!r} returned NaN for {what}")
    return value


def _one_simulation(simulate, fit, functionals, s: int, seed: int, n_draws: int) -> dict:
    fit_seed, tie_seed = _derived_seed(seed, 1), _derived_seed(seed, 2)
    truth, data = simulate(seed)
    truth = {k: np.asarray(v) for k, v in truth.items()}
    t0 = time.perf_counter()
    draws = fit(data, fit_seed)
    seconds = time.perf_counter() - t0
    draws = {k: np.asarray(v) for k, v in draws.items()}
    if not draws:
        raise ValueError(f"simulation {s}: fit returned no draws")
    lengths = {k: (v.shape[0] if v.ndim else None) for k, v in draws.items()}
    if len(set(lengths.values())) != 1 or None in lengths.values():
        raise ValueError(f"simulation {s}: fit must return arrays of shape (S, ...) with one S, got first axes {lengths}")
    S = next(iter(lengths.values()))
    if S < n_draws:
        raise ValueError(f"simulation {s}: fit returned S = {S} draws, fewer than n_draws = {n_draws}")
    for k in draws.keys() & truth.keys():
        if draws[k].shape[1:] != truth[k].shape:
            raise ValueError(f"simulation {s}: draws of {k!r} have trailing shape {draws[k].shape[1:]}, "
                             f"the truth has shape {truth[k].shape}")
    idx = np.round(np.linspace(0, S - 1, n_draws)).astype(np.int64)
    thinned = {k: v[idx] for k, v in draws.items()}
    tie_rng = np.random.default_rng(tie_seed)
    rec = {"seed": seed, "fit_seed": fit_seed, "seconds": seconds, "rank": {}, "truth": {}, "mean": {}, "sd": {}}
    for name, f in functionals.items():
        t = _apply(name, f, truth, f"the truth of simulation {s}")
        vals = np.empty((n_draws, t.size))
        for l in range(n_draws):
            v = _apply(name, f, {k: a[l] for k, a in thinned.items()}, f"draw {l} of simulation {s}")
            if v.shape != t.shape:
                raise ValueError(f"functional {name!r} returned {v.size} scalars for draw {l} of simulation {s} "
                                 f"but {t.size} for the truth")
            vals[l] = v
        below = (vals < t).sum(axis=0)
        ties = (vals == t).sum(axis=0)
        rec["rank"][name] = below + tie_rng.integers(0, ties + 1)
        rec["truth"][name] = t
        rec["mean"][name] = vals.mean(axis=0)
        rec["sd"][name] = vals.std(axis=0, ddof=1) if n_draws > 1 else np.zeros_like(t)
    return rec


def _save_sim(path: Path, rec: dict, n_draws: int, names: list[str], method: str) -> None:
    arrays = dict(version=_CACHE_VERSION, seed=rec["seed"], fit_seed=rec["fit_seed"], n_draws=n_draws,
                  seconds=rec["seconds"], method=np.array(method), names=np.array(names, dtype=str))
    for j, name in enumerate(names):
        for key in ("rank", "truth", "mean", "sd"):
            arrays[f"{key}_{j}"] = rec[key][name]
    tmp = path.with_name(path.stem + f".tmp{os.getpid()}.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _load_sim(path: Path, s: int, seed: int, n_draws: int, names: list[str], method: str) -> dict:
    with np.load(path, allow_pickle=False) as z:
        stored = dict(seed=int(z["seed"]), n_draws=int(z["n_draws"]), method=str(z["method"]),
                      names=[str(x) for x in z["names"]])
        expected = dict(seed=seed, n_draws=n_draws, method=method, names=names)
        if int(z["version"]) != _CACHE_VERSION or stored != expected:
            diff = {k: (stored[k], expected[k]) for k in expected if stored[k] != expected[k]}
            raise ValueError(f"cache file {path} belongs to another SBC experiment (stored vs this run: {diff}); "
                             "use another cache_dir")
        rec = {"seed": seed, "fit_seed": int(z["fit_seed"]), "seconds": float(z["seconds"])}
        for key in ("rank", "truth", "mean", "sd"):
            rec[key] = {name: z[f"{key}_{j}"] for j, name in enumerate(names)}
    return rec


# ------------------------------------------------------------------------------
# Uniformity tests


@dataclass(frozen=True)
class EcdfBand:
    """Simultaneous band for the ECDF of N ranks uniform on 0..L (Säilynoja et al. 2022).

    Made by `ecdf_band`.

    Parameters
    ----------
    z : np.ndarray (L + 2,) float64
        Grid 0, 1/(L+1), ..., 1; the ECDF of the ranks at z_i is #{r < i} / N.
    lower, upper : np.ndarray (L + 2,) int64
        Inclusive bounds on the count #{r < i}; at z = 0 and z = 1 both are 0 and N.
    gamma : float
        Adjusted pointwise level: the band at z_i is the set of counts k whose two-sided
        Binomial(N, z_i) tail probability 2 min(P(X <= k), P(X >= k)) exceeds gamma.
    alpha : float
        Simultaneous level: probability (up to Monte Carlo error, and <= by construction)
        that the ECDF of N uniform ranks leaves the band somewhere.
    n : int
        N, the number of ranks (simulations).
    n_draws : int
        L, ranks take the values 0..L.
    n_band_sims : int
        Uniform samples simulated to calibrate ``gamma``.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (Säilynoja, Bürkner & Vehtari 2022, sec. 2.2).
    """

    z: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    gamma: float
    alpha: float
    n: int
    n_draws: int
    n_band_sims: int


@functools.lru_cache(maxsize=32)
def _pointwise_table(n: int, L: int) -> np.ndarray:
    """(L, n + 1) float64: two-sided Binomial(n, z_i) tail probability of count k at z_i = i/(L+1),
    i = 1..L: min(1, 2 min(P(X <= k), P(X >= k)))."""
    z = np.arange(1, L + 1) / (L + 1)
    k = np.arange(n + 1)
    cdf = stats.binom.cdf(k[None, :], n, z[:, None])
    upper_tail = stats.binom.sf(k[None, :] - 1, n, z[:, None])
    table = np.minimum(1.0, 2.0 * np.minimum(cdf, upper_tail))
    table.setflags(write=False)
    return table


def _grid_counts(ranks: np.ndarray, L: int) -> np.ndarray:
    """#{r < i} for i = 1..L, shape (L,), for ranks (N,) in 0..L."""
    return np.cumsum(np.bincount(np.asarray(ranks), minlength=L + 1))[:L]


def _min_p(counts: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Smallest pointwise tail probability over the grid, for counts (..., L)."""
    return table[np.arange(table.shape[0]), counts].min(axis=-1)


@functools.lru_cache(maxsize=32)
def _null_min_p(n: int, L: int, n_band_sims: int, band_seed: int) -> np.ndarray:
    """Sorted (n_band_sims,) smallest pointwise tail probabilities of n ranks uniform on 0..L.

    Counts of n uniform ranks in the L+1 cells are Multinomial(n, 1/(L+1), ...), so they are
    drawn directly (as for continuous uniforms evaluated on the grid: the same law)."""
    table = _pointwise_table(n, L)
    rng = np.random.default_rng(band_seed)
    chunk = max(1, int(2e6 // (L + 1)))
    out = []
    for start in range(0, n_band_sims, chunk):
        m = min(chunk, n_band_sims - start)
        cells = rng.multinomial(n, np.full(L + 1, 1.0 / (L + 1)), size=m)
        out.append(_min_p(np.cumsum(cells, axis=1)[:, :L], table))
    null = np.sort(np.concatenate(out))
    null.setflags(write=False)
    return null


def _check_ranks(ranks, L: int) -> np.ndarray:
    _check_int("n_draws", L, minimum=1)
    ranks = np.asarray(ranks)
    if ranks.ndim != 1 or ranks.size == 0:
        raise ValueError(f"ranks must be a non-empty 1-D array, got shape {ranks.shape}")
    if not np.issubdtype(ranks.dtype, np.integer):
        if not np.all(np.isfinite(ranks)) or np.any(ranks != np.round(ranks)):
            raise ValueError("ranks must be integers")
        ranks = ranks.astype(np.int64)
    if ranks.min() < 0 or ranks.max() > L:
        raise ValueError(f"ranks must lie in 0..n_draws = 0..{L}, got range {ranks.min()}..{ranks.max()}")
    return ranks


def ecdf_test(ranks, n_draws: int, *, n_band_sims: int = N_BAND_SIMS, band_seed: int = BAND_SEED) -> tuple[float, float]:
    """Simultaneous ECDF test of discrete uniformity of ranks on 0..L (Säilynoja et al. 2022).

    Statistic: the smallest, over the grid z_i = i/(L+1), i = 1..L, of the two-sided
    Binomial(N, z_i) tail probability of the count #{r < i} (under uniformity that count is
    Binomial(N, z_i)). Its null distribution is simulated once per (N, L) from
    ``n_band_sims`` multinomial samples with seed ``band_seed`` (cached in memory).

    Parameters
    ----------
    ranks : array_like, shape (N,), int
        Ranks in 0..L.
    n_draws : int
        L.
    n_band_sims : int, default N_BAND_SIMS
        Uniform samples simulated for the null distribution (keyword-only).
    band_seed : int, default BAND_SEED
        Their seed (keyword-only).

    Returns
    -------
    (min_p, p_value) : floats. p_value = fraction of simulated uniform samples whose statistic
        is <= min_p; ``p_value <= alpha`` exactly when the ECDF leaves ``ecdf_band(N, L, alpha)``
        (same simulated sample). 0 means below 1 / n_band_sims.

    Raises
    ------
    ValueError
        ranks not a non-empty 1-D integer array in 0..L.

    Source: project addition (Säilynoja, Bürkner & Vehtari 2022).
    """
    ranks = _check_ranks(ranks, n_draws)
    n, L = len(ranks), int(n_draws)
    min_p = float(_min_p(_grid_counts(ranks, L), _pointwise_table(n, L)))
    null = _null_min_p(n, L, int(n_band_sims), int(band_seed))
    return min_p, float(np.searchsorted(null, min_p, side="right") / len(null))


def ecdf_band(n: int, n_draws: int, alpha: float = 0.05, *, n_band_sims: int = N_BAND_SIMS,
              band_seed: int = BAND_SEED) -> EcdfBand:
    """Simultaneous (1 - alpha) band for the ECDF of n ranks uniform on 0..L.

    Simulation-based adjustment of Säilynoja, Bürkner & Vehtari (2022, sec. 2.2): simulate
    ``n_band_sims`` samples of n uniform ranks (seed ``band_seed``), compute for each the
    smallest pointwise two-sided binomial tail probability over the grid, and take as gamma
    the largest simulated value such that at most a fraction alpha of the samples are <= gamma
    (the alpha-quantile, moved down past ties so that the simulated rate never exceeds alpha).
    The band at z_i holds the counts whose pointwise tail probability exceeds gamma, i.e.
    the Binomial(n, z_i) quantiles at about gamma/2 and 1 - gamma/2. Its false-alarm rate is
    alpha minus the discreteness of the statistic, within Monte Carlo error
    sqrt(alpha (1 - alpha) / n_band_sims).

    Parameters
    ----------
    n : int
        Number of ranks (simulations), >= 1.
    n_draws : int
        L, >= 1.
    alpha : float, default 0.05
        Simultaneous level, in (0, 1).
    n_band_sims : int, default N_BAND_SIMS
        Uniform samples simulated to calibrate gamma (keyword-only).
    band_seed : int, default BAND_SEED
        Their seed (keyword-only).

    Returns
    -------
    EcdfBand
        The grid, the inclusive count bounds (int64, (L + 2,)) and gamma.

    Raises
    ------
    ValueError
        n or n_draws not a positive integer; alpha outside (0, 1).

    Source: project addition (Säilynoja, Bürkner & Vehtari 2022, sec. 2.2).
    """
    _check_int("n", n, minimum=1)
    _check_int("n_draws", n_draws, minimum=1)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n, L = int(n), int(n_draws)
    null = _null_min_p(n, L, int(n_band_sims), int(band_seed))
    m = len(null)
    # largest simulated value t with #{null <= t} <= alpha m
    k = int(np.floor(alpha * m + 1e-9))
    gamma = -np.inf
    while k > 0:
        t = null[k - 1]
        if np.searchsorted(null, t, side="right") <= alpha * m + 1e-9:
            gamma = float(t)
            break
        k = int(np.searchsorted(null, t, side="left"))
    table = _pointwise_table(n, L)
    inside = table > gamma
    ks = np.arange(n + 1)
    lower = np.where(inside, ks, n + 1).min(axis=1)
    upper = np.where(inside, ks, -1).max(axis=1)
    z = np.arange(L + 2) / (L + 1)
    return EcdfBand(z=z, lower=np.concatenate([[0], lower, [n]]).astype(np.int64),
                    upper=np.concatenate([[0], upper, [n]]).astype(np.int64), gamma=gamma, alpha=float(alpha),
                    n=n, n_draws=L, n_band_sims=m)


def default_bins(n: int, n_draws: int) -> int:
    """Chi-square / histogram bin count B for n ranks on 0..L: the largest divisor of L + 1 that is
    at most min(20, n // 5) (equal bins with >= 5 expected ranks each); if L + 1 has no such
    divisor >= 2, min(20, n // 5, L + 1) bins of nearly equal widths (at least 2).

    Parameters
    ----------
    n : int
        Number of ranks (simulations).
    n_draws : int
        L; ranks take the values 0..L.

    Returns
    -------
    int
        B, at least 2.

    Raises
    ------
    None of its own.

    Source: project addition (Talts et al. 2018: bins with enough expected ranks).
    """
    cap = max(2, min(20, n // 5, n_draws + 1))
    divisors = [b for b in range(2, cap + 1) if (n_draws + 1) % b == 0]
    return divisors[-1] if divisors else cap


def _bin_edges(L: int, bins: int) -> np.ndarray:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or not 2 <= bins <= L + 1:
        raise ValueError(f"bins must be an integer in [2, n_draws + 1 = {L + 1}], got {bins!r}")
    return np.round(np.linspace(0, L + 1, bins + 1)).astype(np.int64)


def chi2_test(ranks, n_draws: int, bins: int) -> tuple[float, float]:
    """Pearson chi-square test of uniformity of ranks on 0..L in ``bins`` bins of ranks
    [e_b, e_{b+1}) with integer edges ``round(linspace(0, L+1, bins+1))`` (equal when bins
    divides L+1), expected counts N (e_{b+1} - e_b) / (L+1), ``bins - 1`` degrees of freedom
    (`scipy.stats.chisquare`).

    Parameters
    ----------
    ranks : array_like, shape (N,), int
        Ranks in 0..L.
    n_draws : int
        L.
    bins : int
        Number of bins, in [2, L + 1].

    Returns
    -------
    tuple (float, float)
        The chi-square statistic and its p-value.

    Raises
    ------
    ValueError
        ranks not a non-empty 1-D integer array in 0..L; bins not an integer in [2, L+1].

    Source: project addition (Talts et al. 2018, the rank histogram as a chi-square test).
    """
    ranks = _check_ranks(ranks, n_draws)
    edges = _bin_edges(int(n_draws), bins)
    observed = np.bincount(np.searchsorted(edges, ranks, side="right") - 1, minlength=bins)
    expected = len(ranks) * np.diff(edges) / (n_draws + 1)
    res = stats.chisquare(observed, expected)
    return float(res.statistic), float(res.pvalue)


# ------------------------------------------------------------------------------
# Plots and report


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "functional"


def plot_ranks(result: SBCResult, out_dir: str | Path, *, alpha: float = 0.05, bins: int | None = None,
               max_panels: int = 12, n_band_sims: int = N_BAND_SIMS) -> list[str]:
    """One PNG per functional, ``sbc_<functional>.png`` in ``out_dir``: rank histograms per
    scalar with the 99% band of Talts et al. (each bin count is Binomial(N, width/(L+1));
    the grey band spans its 0.5% and 99.5% quantiles, per bin), and the ECDF-difference plot
    (ECDF of the ranks minus the uniform CDF on the grid i/(L+1)) of all scalars with the
    simultaneous band at level alpha (shaded; `ecdf_band`) and, when Q > 1, the Bonferroni
    band at alpha / Q (dashed). With more than ``max_panels`` scalars, the histograms show the
    ``max_panels`` scalars with the smallest ECDF p-values.

    Parameters
    ----------
    result : SBCResult
        Each ``result.ranks[name]`` is an int array (N, Q) of ranks in 0..L.
    out_dir : str or pathlib.Path
        Folder of the PNG files (created if missing).
    alpha : float, default 0.05
        Level of the simultaneous band (keyword-only, like the rest).
    bins : int, optional
        Histogram bins (default `default_bins`).
    max_panels : int, default 12
        Most histograms drawn per functional.
    n_band_sims : int, default N_BAND_SIMS
        Calibration of the ECDF bands and p-values (`ecdf_band`, `ecdf_test`).

    Returns
    -------
    list of str
        Paths of the PNG files written, in the order of ``result.ranks``.

    Raises
    ------
    ValueError
        ``bins`` not an integer in [2, L+1]; ``alpha`` outside (0, 1).
    OSError
        ``out_dir`` cannot be created or written.

    Source: project addition (Talts et al. 2018; Säilynoja, Bürkner & Vehtari 2022).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    L = result.n_draws
    paths = []
    for name, ranks in result.ranks.items():
        n, q = ranks.shape
        b = default_bins(n, L) if bins is None else bins
        edges = _bin_edges(L, b)
        pvals = np.array([ecdf_test(ranks[:, j], L, n_band_sims=n_band_sims)[1] for j in range(q)])
        shown = np.arange(q) if q <= max_panels else np.sort(np.argsort(pvals, kind="stable")[:max_panels])
        ncols = min(len(shown), 4)
        nrows = -(-len(shown) // ncols)
        fig = plt.figure(figsize=(3.2 * max(ncols, 2), 2.4 * nrows + 3.4))
        grid = fig.add_gridspec(nrows + 1, ncols, height_ratios=[1] * nrows + [1.5])
        widths = np.diff(edges)
        lo_band = stats.binom.ppf(0.005, n, widths / (L + 1))
        hi_band = stats.binom.ppf(0.995, n, widths / (L + 1))
        for panel, j in enumerate(shown):
            ax = fig.add_subplot(grid[panel // ncols, panel % ncols])
            counts = np.bincount(np.searchsorted(edges, ranks[:, j], side="right") - 1, minlength=b)
            ax.fill_between(edges, np.append(lo_band, lo_band[-1]), np.append(hi_band, hi_band[-1]), step="post",
                            color="0.85", lw=0)
            ax.stairs(counts, edges, color="C0")
            ax.set_xlim(0, L + 1)
            ax.set_title(f"{name}[{j}]  ECDF p = {pvals[j]:.3g}", fontsize=8)
            ax.tick_params(labelsize=7)
            if panel % ncols == 0:
                ax.set_ylabel("simulations", fontsize=8)
        ax = fig.add_subplot(grid[nrows, :])
        band = ecdf_band(n, L, alpha, n_band_sims=n_band_sims)
        ax.fill_between(band.z, band.lower / n - band.z, band.upper / n - band.z, step="post", color="0.85", lw=0,
                        label=f"simultaneous {100 * (1 - alpha):g}% band")
        if q > 1:
            fam = ecdf_band(n, L, alpha / q, n_band_sims=n_band_sims)
            for arr, lab in ((fam.lower, f"Bonferroni band (alpha/{q})"), (fam.upper, None)):
                ax.step(fam.z, arr / n - fam.z, where="post", color="k", ls="--", lw=0.8, label=lab)
        z = band.z
        for j in range(q):
            ecdf = np.concatenate([[0.0], _grid_counts(ranks[:, j], L) / n, [1.0]])
            ax.step(z, ecdf - z, where="post", lw=1.0, alpha=0.8 if q <= 10 else 0.4, color=f"C{j % 10}",
                    label=f"{name}[{j}]" if q <= 10 else None)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xlim(0, 1)
        ax.set_xlabel("fractional rank z = i / (L + 1)")
        ax.set_ylabel("ECDF - z")
        ax.legend(fontsize=7, loc="upper right")
        label = f"SBC {result.method}".strip()
        title = f"{label} - {name}: N = {n} simulations, L = {L}, {b} bins (99% band per bin)"
        if q > max_panels:
            title += f"; {max_panels} of {q} scalars shown (smallest p)"
        fig.suptitle(title, fontsize=9)
        paths.append(str(out / _save(fig, out, f"sbc_{_slug(name)}.png")))
    return paths


def sbc_report(result: SBCResult, out_dir: str | Path, title: str = "Simulation-based calibration", *,
               alpha: float = 0.05, notes: list[str] = (), n_band_sims: int = N_BAND_SIMS) -> Path:
    """Write ``report.md`` in ``out_dir``: settings, the overall verdict, the uniformity table
    (`SBCResult.uniformity`), z-score summaries and the plots of `plot_ranks`.

    Parameters
    ----------
    result : SBCResult
        The SBC run.
    out_dir : str or pathlib.Path
        Folder of the report and its plots (created if missing).
    title : str, default "Simulation-based calibration"
        The report's title.
    alpha : float, default 0.05
        Family false-alarm rate (keyword-only, like the rest).
    notes : sequence of str, default ()
        Lines listed under the verdict.
    n_band_sims : int, default N_BAND_SIMS
        Calibration of the ECDF band (`ecdf_band`).

    Returns
    -------
    pathlib.Path
        Path of the Markdown file (``out_dir/report.md``).

    Raises
    ------
    ValueError
        ``alpha`` outside (0, 1) (`SBCResult.uniformity`).
    OSError
        ``out_dir`` cannot be created or written.

    Source: project addition (validation level 3).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = result.uniformity(alpha, n_band_sims=n_band_sims)
    overall = table.iloc[-1]
    q_total = sum(r.shape[1] for r in result.ranks.values())
    L = result.n_draws
    lines = _header(title)
    lines += [
        f"**Verdict: {'PASS' if overall['ecdf_pass'] else 'FAIL'}** (ECDF test, every one of the {q_total} scalars "
        f"at alpha / Q = {alpha:g} / {q_total} = {alpha / q_total:.3g}: Bonferroni, false-alarm rate <= {alpha:g}).",
        "",
        *(f"- {n}" for n in notes),
        "",
        "## Settings",
        "",
        f"- method: {result.method or '(unnamed)'}; {result.n_sims} simulations, master seed {result.master_seed}, "
        f"L = {L} thinned posterior draws per simulation (ranks 0..{L})",
        "- functionals: " + ", ".join(f"{k} (Q = {v.shape[1]})" for k, v in result.ranks.items()),
        (f"- fit time per simulation: median {np.median(result.seconds):.3g} s, total {np.sum(result.seconds):.3g} s"
         if result.seconds is not None and len(result.seconds) else "- fit time: not recorded"),
        "",
        "## Uniformity of the ranks",
        "",
        "- ECDF test (Säilynoja, Bürkner & Vehtari 2022): the ECDF of the ranks on the grid i/(L+1) must stay "
        "inside the simultaneous band whose probability of being left by uniform ranks is alpha; the band is "
        f"calibrated by {n_band_sims} simulated uniform samples (seed {BAND_SEED}). `ecdf_p` is the test's p-value "
        "(0: below 1/" f"{n_band_sims}).",
        "- Chi-square test (Talts et al. 2018) on `chi2_bins` bins: a second opinion.",
        f"- Rows `scalar` and `pooled` are at alpha = {alpha:g} each; rows `family` use the Bonferroni level "
        "alpha / Q (`alpha_used`) and the smallest p-value of their scalars. Pooled ranks of one simulation share "
        "its data, so the pooled row is a summary, not a calibrated test.",
        "",
        markdown_table(table),
        "",
    ]
    if result.truth:
        z = result.z_scores()
        zt = pd.DataFrame([dict(functional=k, mean_z=float(np.nanmean(v)), sd_z=float(np.nanstd(v)),
                                median_post_sd=float(np.median(result.post_sd[k]))) for k, v in z.items()])
        lines += ["## z-scores", "",
                  "(truth - posterior mean) / posterior sd over all scalars and simulations: about 0 and 1 for an exact "
                  "posterior; sd_z > 1 means posteriors that are too narrow, a mean away from 0 a bias.", "",
                  markdown_table(zt), ""]
    lines += ["## Plots", "",
              "Rank histograms with the 99% per-bin band of Talts et al. (grey); ECDF - uniform CDF with the "
              f"simultaneous {100 * (1 - alpha):g}% band (grey) and the Bonferroni band (dashed). U shape: posterior "
              "too narrow; hump: too wide; slope: biased.", ""]
    for p in plot_ranks(result, out, alpha=alpha, n_band_sims=n_band_sims):
        lines += [f"![{Path(p).stem}]({Path(p).name})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
