"""The VI evidence: PSIS k-hat of q against the program's posterior, and VSBC.

A variational solver's cross-check (`validation.checks.crosscheck.vi_crosscheck`) reports the *gap* of q
against a gated NUTS reference on identifiable quantities. Two further pieces of evidence are
written here once, for every VI solver (DESIGN.md, validation level 2 and 3):

- **PSIS k-hat** (Yao, Vehtari, Simpson, Gelman 2018, sec. 3; Vehtari et al. 2024, Pareto smoothed
  importance sampling). Draw theta_s ~ q (s = 1..S), take the log importance ratios
  ``log w_s = log p(y, theta_s) - log q(theta_s)`` with log p the generative program's own log joint
  (`numpyro.infer.util.log_density` of the model in `ppl_models`, the draws substituted), and fit a
  generalized Pareto distribution to the largest ratios: its shape k-hat (ArviZ ``psislw``) says how
  heavy the right tail of p/q is, i.e. how far q is from the posterior *as a whole* (not on a few
  summaries). Reading: k-hat < 0.5 good (importance sampling from q converges fast, q is close);
  0.5 <= k-hat <= 0.7 ok (usable with PSIS); k-hat > 0.7 q unreliable for importance sampling
  (p/q has so heavy a tail that a few draws dominate), > 1 very bad (the ratio's mean does not
  exist). Both densities are on the program's own space: the constrained values of its latent sites
  with Lebesgue measure (Gamma / Dirichlet / Normal sites alike; q's log density is written on the
  same coordinates), so no Jacobian enters; `numpyro_log_joint` refuses draws that miss a latent site
  of the program or add one. A solver supplies only a `KhatProblem`: "draw from q with log q" and
  "the program's log joint". Where q lives on an augmented space (HPF's z, the Jaakkola-Jordan
  variational parameters, PSM's censored identities, RG's hidden graph) the k-hat is of q's marginal on
  the program's latent sites, stated per model in ``KhatProblem.space``.
- **VSBC** (Yao et al. 2018, sec. 4, Algorithm 2): simulate theta* from the prior and y from the
  model, fit q, compute p = Pr_q(f(theta) < f(theta*)) for each scalar functional f; for exact
  inference p is uniform, and for any q whose marginal point estimates are unbiased it is symmetric
  about 0.5. The test compares the sample of p with the sample of 1 - p by the two-sample
  Kolmogorov-Smirnov statistic, as the paper and NumPyro's ``numpyro.infer.calibration.vsbc_diagnostic``
  do (that function fits NumPyro guides by SVI, not hand-derived solvers, so its test is re-implemented
  here on the solvers' draws from q). ``scipy.stats.ks_2samp(p, 1 - p)`` treats p and 1 - p as two
  independent samples, which they are not (one is the other reflected), so its nominal p-value is not
  the test's false-alarm rate; the verdict uses the same KS statistic calibrated exactly by random
  reflections (under symmetry, replacing any p_s by 1 - p_s leaves the joint distribution unchanged,
  `symmetry_test`), and the scipy p-value is reported beside it. VSBC detects *bias* of q's marginals
  (a skewed p); a q that is too narrow but centred gives a symmetric U-shaped p and passes, which is why
  the sd ratio of the cross-check and the SBC rank histograms stay beside it.

Which solvers have which evidence: `ADAPTERS` (k-hat problems and VSBC adapters per model and solver;
the registry's specs are another module's) and `MEASURED` (the numbers measured on each solver's
cross-check problem, shown by ``factorbayes evidence``).

Source: project addition (validation levels 2-3); Yao, Vehtari, Simpson, Gelman (2018), "Yes, but did it
work?: Evaluating variational inference", ICML, secs. 3-4; Vehtari, Simpson, Gelman, Yao, Gabry (2024),
"Pareto smoothed importance sampling", JMLR.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

__all__ = [
    "QSample",
    "KhatProblem",
    "KhatResult",
    "numpyro_log_joint",
    "psis_khat",
    "khat_reading",
    "khat",
    "calibration_probabilities",
    "symmetry_test",
    "VSBCResult",
    "run_vsbc",
    "khat_table",
]


class QSample(NamedTuple):
    """S draws from q on the program's latent sites and their log density under q.

    ``sites``: site name -> float64 array (S, *site shape), the values the program's sample sites
    take (constrained: positive for Gamma sites, on the simplex for Dirichlet sites); ``log_q``:
    float64 (S,), log q of each draw on the same coordinates (Lebesgue measure on the constrained
    values, the simplex's first n - 1 coordinates for a Dirichlet, as NumPyro and SciPy write it).
    """

    sites: dict
    log_q: np.ndarray


@dataclass(frozen=True)
class KhatProblem:
    """What a VI solver supplies for its k-hat: ``draw(seed, n) -> QSample`` and
    ``log_joint(sites) -> float64 (S,)`` (log p(y, theta) of the program at each draw), plus
    ``space``: one sentence saying which latent variables q and p share and what the k-hat is of.
    """

    draw: Callable[[int, int], QSample]
    log_joint: Callable[[dict], np.ndarray]
    space: str


@dataclass(frozen=True)
class KhatResult:
    """A measured k-hat: ``khat`` (float), ``reading`` (`khat_reading`), ``n_draws`` S, ``n_latent``
    (scalars per draw), ``ess`` (the PSIS effective sample size 1 / sum w_s^2 of the smoothed,
    normalized weights, out of S), ``elbo_mc`` (mean log w: a Monte Carlo ELBO of q, for the record),
    ``space`` (`KhatProblem.space`), ``log_w`` float64 (S,)."""

    khat: float
    reading: str
    n_draws: int
    n_latent: int
    ess: float
    elbo_mc: float
    space: str
    log_w: np.ndarray = field(repr=False)

    def row(self) -> dict:
        """The result as one table row (without the weights)."""
        return {"khat": self.khat, "reading": self.reading, "n_draws": self.n_draws, "n_latent": self.n_latent,
                "psis_ess": self.ess, "elbo_mc": self.elbo_mc, "space": self.space}


def numpyro_log_joint(model, args: tuple = (), kwargs: Mapping | None = None, *, chunk: int = 500):
    """log p(y, theta) of a NumPyro program at many draws: a function ``sites -> float64 (S,)``.

    ``model(*args, **kwargs)`` is the generative program with its data bound (observed sites); the
    returned function substitutes each draw (``sites``: name -> array (S, *site shape)) and sums
    `numpyro.infer.util.log_density` (vmapped and jitted, ``chunk`` draws at a time, in float64). On
    first use it traces the program once and checks that the draws' site names are exactly the
    program's latent (unobserved) sample sites: a q on another space has no k-hat against p.

    Raises ValueError (when called) when the draws miss a latent site of the program or name a site
    it does not have, or when the draws have different numbers S; what the model raises propagates.
    Source: project addition (the log joint of the programs in `ppl_models`).
    """
    import jax
    import jax.numpy as jnp
    from numpyro import handlers
    from numpyro.infer.util import log_density

    kwargs = dict(kwargs or {})
    compiled = []

    def log_joint(sites: dict) -> np.ndarray:
        sizes = {np.shape(v)[0] for v in sites.values()}
        if len(sizes) != 1:
            raise ValueError(f"draws of different lengths: { {k: np.shape(v) for k, v in sites.items()} }")
        (S,) = sizes
        with jax.enable_x64(True):
            x = {k: jnp.asarray(np.asarray(v, np.float64)) for k, v in sites.items()}
            if not compiled:
                first = {k: v[0] for k, v in x.items()}
                tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=first)).get_trace(*args, **kwargs)
                latent = {n for n, s in tr.items() if s["type"] == "sample" and not s.get("is_observed", False)}
                if latent != set(x):
                    raise ValueError(f"q and the program are on different spaces: the program's latent sites are "
                                     f"{sorted(latent)}, the draws have {sorted(x)}")
                compiled.append(jax.jit(jax.vmap(lambda s: log_density(model, args, kwargs, s)[0])))
            out = [np.asarray(compiled[0]({k: v[i:i + chunk] for k, v in x.items()})) for i in range(0, S, chunk)]
        return np.concatenate(out).astype(np.float64)

    return log_joint


def psis_khat(log_w: np.ndarray) -> tuple[float, float]:
    """Pareto k-hat and PSIS effective sample size of log importance ratios ``log_w`` float (S,).

    ArviZ ``psislw`` (Pareto smoothing of the largest ratios; its generalized Pareto fit gives k-hat);
    the ESS is 1 / sum_s w_s^2 of the smoothed, normalized weights. Returns (khat, ess) as floats.
    Raises ValueError for fewer than 2 ratios or a non-finite one. Source: Vehtari et al. (2024),
    "Pareto smoothed importance sampling" (ArviZ's implementation); Yao et al. (2018), sec. 3.
    """
    from custom_inference import arviz_io

    lw = np.asarray(log_w, dtype=np.float64).ravel()
    if lw.size < 2 or not np.all(np.isfinite(lw)):
        raise ValueError(f"log_w must hold >= 2 finite values, got {lw.size} with "
                         f"{int(np.sum(~np.isfinite(lw)))} non-finite")
    # psislw normalizes the smoothed log weights; ArviZ lives behind custom_inference.arviz_io
    smoothed, k = arviz_io.az.psislw(lw - lw.max())
    w = np.exp(np.asarray(smoothed) - np.max(smoothed))
    w /= w.sum()
    return float(np.asarray(k)), float(1.0 / np.sum(w ** 2))


def khat_reading(k: float) -> str:
    """The usual reading of a Pareto k-hat: "good" (< 0.5), "ok" (0.5 to 0.7), "q unreliable for
    importance sampling" (> 0.7), "very bad (> 1)". Raises nothing. Source: Vehtari et al. (2024), sec. 3;
    Yao et al. (2018), sec. 3."""
    if not np.isfinite(k):
        return "undefined"
    if k < 0.5:
        return "good"
    if k <= 0.7:
        return "ok"
    if k <= 1.0:
        return "q unreliable for importance sampling"
    return "very bad (> 1): q unreliable for importance sampling"


def khat(problem: KhatProblem, *, n_draws: int = 4000, seed: int = 0) -> KhatResult:
    """The PSIS k-hat of q against the program's posterior on one problem.

    Draws S = ``n_draws`` from q (``problem.draw(seed, S)``), log w = log p(y, theta) - log q(theta)
    with ``problem.log_joint``, then `psis_khat`. Returns a `KhatResult`. Raises ValueError for
    ``n_draws`` < 100 (the Pareto fit needs a tail of at least a few dozen ratios), for non-finite
    log ratios, or from the log joint (draws on another space than the program's).
    Source: Yao et al. (2018), sec. 3 (PSIS diagnostic of VI); project addition (the generic form).
    """
    if int(n_draws) < 100:
        raise ValueError(f"n_draws must be >= 100 for a Pareto fit, got {n_draws}")
    q = problem.draw(int(seed), int(n_draws))
    log_q = np.asarray(q.log_q, dtype=np.float64)
    log_w = np.asarray(problem.log_joint(q.sites), dtype=np.float64) - log_q
    k, ess = psis_khat(log_w)
    n_latent = int(sum(np.prod(np.shape(v)[1:], dtype=int) for v in q.sites.values()))
    return KhatResult(k, khat_reading(k), int(n_draws), n_latent, ess, float(np.mean(log_w)), problem.space, log_w)


def khat_table(result: KhatResult, model: str = "", solver: str = "") -> pd.DataFrame:
    """A one-row DataFrame of a `KhatResult` (model, solver, khat, reading, n_draws, n_latent,
    psis_ess, elbo_mc, space) for reports. Raises nothing. Source: project addition."""
    return pd.DataFrame([{"model": model, "solver": solver, **result.row()}])


# ---------------------------------------------------------------------------------------------
# VSBC


def calibration_probabilities(truth: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """p_q = Pr_q(f_q(theta) < f_q(theta*)) per scalar, from draws: float64 (Q,).

    ``truth``: (Q,) the functionals at the simulated parameters; ``draws``: (S, Q) the functionals at
    S draws from q. Ties count one half (p = (#below + #equal / 2) / S). Raises ValueError on shapes
    that do not match. Source: Yao et al. (2018), sec. 4, Algorithm 2 (the probability p_ij).
    """
    t = np.atleast_1d(np.asarray(truth, np.float64))
    d = np.asarray(draws, np.float64)
    if d.ndim == 1:
        d = d[:, None]
    if d.shape[1:] != t.shape:
        raise ValueError(f"draws (S, Q) and truth (Q,) do not match: {d.shape} vs {t.shape}")
    return np.mean(d < t, axis=0) + 0.5 * np.mean(d == t, axis=0)


def _reflection_ks(p: np.ndarray) -> np.ndarray:
    """KS distance between the ECDFs of each row of p (B, n) and of 1 - p, at every jump point."""
    p = np.atleast_2d(p)
    pts = np.concatenate([p, 1.0 - p], axis=1)  # (B, 2n): the sup is attained at a jump of one ECDF
    f = np.mean(p[:, None, :] <= pts[:, :, None], axis=2)
    g = np.mean((1.0 - p)[:, None, :] <= pts[:, :, None], axis=2)
    f_left = np.mean(p[:, None, :] < pts[:, :, None], axis=2)
    g_left = np.mean((1.0 - p)[:, None, :] < pts[:, :, None], axis=2)
    return np.maximum(np.abs(f - g).max(axis=1), np.abs(f_left - g_left).max(axis=1))


def symmetry_test(p: np.ndarray, *, n_flips: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """Is the sample p (n,) symmetric about 0.5? Returns (ks_stat, ks_pvalue, flip_pvalue).

    ``ks_stat`` is the two-sample KS distance between p and 1 - p (Yao et al. 2018);
    ``ks_pvalue`` is ``scipy.stats.ks_2samp(p, 1 - p, method="asymp")`` as in the paper and NumPyro
    (nominal: it assumes two independent samples); ``flip_pvalue`` calibrates the same statistic by
    ``n_flips`` random reflections p_s -> 1 - p_s (each with probability 1/2, independently), which
    leave the joint law of independent p_s symmetric about 0.5 unchanged: (1 + #{D_b >= D}) / (1 + B)
    is a valid p-value (false-alarm rate at most alpha for every alpha), the smallest being 1 / (1 + B).
    Raises ValueError for fewer than 2 values or values outside [0, 1].
    Source: Yao et al. (2018), sec. 4 (the KS test of p vs 1 - p); the randomization calibration is a
    project addition (a sign-flip test of symmetry).
    """
    p = np.asarray(p, np.float64).ravel()
    if p.size < 2 or np.any((p < 0) | (p > 1)) or not np.all(np.isfinite(p)):
        raise ValueError(f"p must hold >= 2 values in [0, 1], got {p.size} values")
    d = float(_reflection_ks(p)[0])
    ks_p = float(stats.ks_2samp(p, 1.0 - p, method="asymp").pvalue)
    rng = np.random.default_rng(seed)
    count, done = 0, 0
    while done < n_flips:  # blocks of 500 reflections (memory (500, 2n, n))
        b = min(500, n_flips - done)
        flip = rng.random((b, p.size)) < 0.5
        count += int(np.sum(_reflection_ks(np.where(flip, 1.0 - p, p)) >= d - 1e-12))
        done += b
    return d, ks_p, (1 + count) / (1 + n_flips)


@dataclass(frozen=True)
class VSBCResult:
    """A VSBC run: ``probabilities`` functional -> float64 (n_sims, Q) (p of each simulation and
    scalar); ``table`` one row per scalar (functional, index, mean_p, ks_stat, ks_pvalue (scipy,
    nominal), flip_pvalue (exact level), reject); ``alpha`` the family false-alarm rate (Bonferroni over
    the scalars: a scalar is rejected when flip_pvalue < alpha / Q_total); ``n_sims``, ``master_seed``,
    ``method``, ``seconds`` (float64 (n_sims,), simulate + fit + functionals)."""

    probabilities: dict
    table: pd.DataFrame
    alpha: float
    n_sims: int
    master_seed: int
    method: str = ""
    seconds: np.ndarray = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        """True when no scalar's p is asymmetric at the Bonferroni level."""
        return not bool(self.table.reject.any())

    @property
    def smallest_p(self) -> float:
        """The smallest flip p-value over the scalars (compare with ``alpha`` / number of scalars)."""
        return float(self.table.flip_pvalue.min())

    def verdict(self) -> str:
        """One line: pass / asymmetric, the smallest p-value, the level, the simulations."""
        q = len(self.table)
        worst = self.table.loc[self.table.flip_pvalue.idxmin()]
        head = "symmetric (pass)" if self.passed else f"asymmetric (fail: {int(self.table.reject.sum())} of {q} scalars)"
        return (f"{head}; smallest p {self.smallest_p:.3g} ({worst.functional}[{worst['index']}], mean p "
                f"{worst.mean_p:.2f}) vs Bonferroni level {self.alpha / q:.3g} ({q} scalars, family false-alarm "
                f"rate {self.alpha}); {self.n_sims} simulations, master seed {self.master_seed}")


def run_vsbc(simulate: Callable, fit: Callable, functionals: Mapping[str, Callable], *, n_sims: int,
             master_seed: int = 0, alpha: float = 0.05, n_flips: int = 4000, method: str = "",
             progress: bool = False) -> VSBCResult:
    """VSBC of a VI solver (Yao et al. 2018, Algorithm 2) with the SBC adapters' conventions.

    For each simulation s (seeds `validation.checks.sbc.sbc_seeds` of ``master_seed``, so simulation s is the
    same whatever ``n_sims``): ``truth, data = simulate(seed)``; ``draws = fit(data, fit_seed)`` (dict
    name -> array (S, ...), draws from q); each functional (params dict -> (Q,)) is applied to the truth
    and to each draw, and p = `calibration_probabilities`. Then `symmetry_test` per scalar; the family
    verdict is Bonferroni at ``alpha`` over all scalars (false-alarm rate at most ``alpha`` whatever
    their correlation, since each flip p-value is valid).

    Returns a `VSBCResult`. Raises ValueError for ``n_sims`` < 2 or ``alpha`` outside (0, 1); what
    ``simulate`` / ``fit`` / the functionals raise propagates.
    Source: Yao et al. (2018), sec. 4 (VSBC); project addition (the solver-agnostic runner).
    """
    from validation.checks.sbc import sbc_seeds

    if int(n_sims) < 2:
        raise ValueError(f"n_sims must be >= 2, got {n_sims}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    seeds = sbc_seeds(master_seed, int(n_sims))
    probs = {name: [] for name in functionals}
    seconds = []
    it = seeds
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(seeds, desc=f"VSBC {method}")
    for seed in it:
        start = time.perf_counter()
        truth, data = simulate(int(seed))
        fit_seed = int(np.random.SeedSequence([int(seed), 0x75BC]).generate_state(1, dtype=np.uint32)[0])
        draws = fit(data, fit_seed)
        S = len(next(iter(draws.values())))
        for name, f in functionals.items():
            t = np.atleast_1d(np.asarray(f(truth), np.float64))
            fd = np.stack([np.atleast_1d(np.asarray(f({k: v[s] for k, v in draws.items()}), np.float64))
                           for s in range(S)])
            probs[name].append(calibration_probabilities(t, fd))
        seconds.append(time.perf_counter() - start)
    probs = {k: np.stack(v) for k, v in probs.items()}
    rows = []
    for name, p in probs.items():
        for q in range(p.shape[1]):
            d, ks_p, flip_p = symmetry_test(p[:, q], n_flips=n_flips, seed=q)
            rows.append({"functional": name, "index": q, "mean_p": float(p[:, q].mean()), "ks_stat": d,
                         "ks_pvalue": ks_p, "flip_pvalue": flip_p})
    table = pd.DataFrame(rows)
    table["reject"] = table.flip_pvalue < alpha / len(table)
    return VSBCResult(probs, table, float(alpha), int(n_sims), int(master_seed), method, np.asarray(seconds))
