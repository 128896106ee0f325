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

Which solvers have which evidence: each solver's declaration (`validation.checks.registry.SolverSpec`:
``khat`` and ``vsbc`` adapters, and ``measured``, the numbers measured on its cross-check problem, shown by
``factorbayes evidence``).

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
    "tail_khat",
    "function_khat",
    "function_khat_summary",
    "calibration_probabilities",
    "symmetry_test",
    "VSBCResult",
    "run_vsbc",
    "khat_table",
]


class QSample(NamedTuple):
    """S draws from q on the program's latent sites and their log density under q.

    Parameters
    ----------
    sites : dict str -> numpy.ndarray, shape (S, *site shape), float64
        The values the program's sample sites take (constrained: positive for Gamma sites, on the
        simplex for Dirichlet sites).
    log_q : numpy.ndarray, shape (S,), float64
        log q of each draw on the same coordinates (Lebesgue measure on the constrained values, the
        simplex's first n - 1 coordinates for a Dirichlet, as NumPyro and SciPy write it).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (Yao et al. 2018, sec. 3: draws from q with their log density).
    """

    sites: dict
    log_q: np.ndarray


@dataclass(frozen=True)
class KhatProblem:
    """What a VI solver supplies for its k-hat.

    Parameters
    ----------
    draw : callable
        ``draw(seed, n) -> QSample``: n draws from q with their log q.
    log_joint : callable
        ``log_joint(sites) -> float64 (S,)``: log p(y, theta) of the program at each draw (e.g.
        `numpyro_log_joint`).
    space : str
        One sentence saying which latent variables q and p share and what the k-hat is of.
    functionals : callable, optional
        ``functionals(sites) -> {group: float64 (S, Q)}``, the identified quantities the solver's
        cross-check compares, evaluated at each draw (the same groups and order as its
        ``identifiable_quantities``); `khat` then adds their function-specific k-hats (`function_khat`).

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: project addition (Yao et al. 2018, sec. 3).
    """

    draw: Callable[[int, int], QSample]
    log_joint: Callable[[dict], np.ndarray]
    space: str
    functionals: Callable[[dict], Mapping[str, np.ndarray]] | None = None


@dataclass(frozen=True)
class KhatResult:
    """A measured k-hat (made by `khat`).

    Parameters
    ----------
    khat : float
        The Pareto k-hat of the importance ratios p / q.
    reading : str
        `khat_reading` of ``khat``.
    n_draws : int
        S, the draws from q.
    n_latent : int
        Latent scalars per draw.
    ess : float
        The PSIS effective sample size 1 / sum w_s^2 of the smoothed, normalized weights, out of S.
    elbo_mc : float
        Mean log w: a Monte Carlo ELBO of q, for the record.
    space : str
        `KhatProblem.space`.
    log_w : numpy.ndarray, shape (S,), float64
        The log importance ratios.
    functionals : pandas.DataFrame, optional
        The `function_khat` table of the problem's functionals on the same draws (None without them).

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: Yao et al. (2018), sec. 3; Vehtari et al. (2024) (PSIS ESS); project addition (the record).
    """

    khat: float
    reading: str
    n_draws: int
    n_latent: int
    ess: float
    elbo_mc: float
    space: str
    log_w: np.ndarray = field(repr=False)
    functionals: pd.DataFrame | None = field(default=None, repr=False)

    def row(self) -> dict:
        """The result as one table row (without the weights).

        Returns
        -------
        dict
            khat, reading, n_draws, n_latent, psis_ess, elbo_mc, space; with the `function_khat_summary`
            counts ``fn_n``, ``fn_below_0.7``, ``fn_0.7_to_1``, ``fn_above_1``, ``fn_worst`` when
            functionals were measured.

        Raises
        ------
        ValueError
            An empty ``functionals`` table (`function_khat_summary`).

        Source: project addition.
        """
        out = {"khat": self.khat, "reading": self.reading, "n_draws": self.n_draws, "n_latent": self.n_latent,
               "psis_ess": self.ess, "elbo_mc": self.elbo_mc, "space": self.space}
        if self.functionals is not None:
            summary = function_khat_summary(self.functionals)
            out.update({f"fn_{k}": summary[k] for k in ("n", "below_0.7", "0.7_to_1", "above_1", "worst")})
        return out


def numpyro_log_joint(model, args: tuple = (), kwargs: Mapping | None = None, *, chunk: int = 500):
    """log p(y, theta) of a NumPyro program at many draws: a function ``sites -> float64 (S,)``.

    ``model(*args, **kwargs)`` is the generative program with its data bound (observed sites); the
    returned function substitutes each draw (``sites``: name -> array (S, *site shape)) and sums
    `numpyro.infer.util.log_density` (vmapped and jitted, ``chunk`` draws at a time, in float64). On
    first use it traces the program once and checks that the draws' site names are exactly the
    program's latent (unobserved) sample sites: a q on another space has no k-hat against p.

    Parameters
    ----------
    model : callable
        The NumPyro program.
    args : tuple, default ()
        Its positional arguments, data included.
    kwargs : mapping, optional
        Its keyword arguments.
    chunk : int, default 500
        Draws evaluated per vmapped call (keyword-only).

    Returns
    -------
    callable
        ``log_joint(sites) -> numpy.ndarray, shape (S,), float64``; ``sites``: name -> array
        (S, *site shape).

    Raises
    ------
    ValueError
        Raised by the returned function when called: the draws miss a latent site of the program or
        name a site it does not have, or have different numbers S. What the model raises propagates.

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
    the ESS is 1 / sum_s w_s^2 of the smoothed, normalized weights.

    Parameters
    ----------
    log_w : array_like, shape (S,), float
        Log importance ratios (flattened; any constant offset).

    Returns
    -------
    tuple (float, float)
        ``(khat, ess)``.

    Raises
    ------
    ValueError
        Fewer than 2 ratios, or a non-finite one.

    Source: Vehtari et al. (2024), "Pareto smoothed importance sampling" (ArviZ's implementation); Yao et
    al. (2018), sec. 3.
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
    """The usual reading of a Pareto k-hat.

    Parameters
    ----------
    k : float
        A Pareto k-hat.

    Returns
    -------
    str
        "good" (< 0.5), "ok" (0.5 to 0.7), "q unreliable for importance sampling" (0.7 to 1), "very bad
        (> 1): q unreliable for importance sampling", or "undefined" (not finite).

    Raises
    ------
    None of its own.

    Source: Vehtari et al. (2024), sec. 3; Yao et al. (2018), sec. 3.
    """
    if not np.isfinite(k):
        return "undefined"
    if k < 0.5:
        return "good"
    if k <= 0.7:
        return "ok"
    if k <= 1.0:
        return "q unreliable for importance sampling"
    return "very bad (> 1): q unreliable for importance sampling"


def tail_khat(x: np.ndarray) -> np.ndarray:
    """Pareto k-hat of the upper tail of each row of ``x`` (..., S), any sign: float64 (...).

    The generalized Pareto fit of ArviZ ``psislw`` (tail length M = ceil(min(S / 5, 3 sqrt(S))), as for
    independent draws, r_eff = 1) applied to the exceedances x_s - x_(S-M) of the M largest values over
    the (M + 1)-th largest, the fit that posterior's ``pareto_khat`` and loo's ``E_loo`` make on raw (not
    log) values. ``psislw`` takes log values and fits exp(l_s) - exp(l_cut), so it is given
    l = log(max(x - median, 0) / max + 1e-300): the shift and scale leave the exceedances' shape (k) alone
    and every value above the median keeps its exceedance (M <= S / 5, so the cutoff lies above the
    median). A row with nothing above its median (constant upper half) has no tail: -inf. The lower tail
    of x is ``tail_khat(-x)``.

    Parameters
    ----------
    x : array_like, shape (..., S), float
        Values (raw, not log) whose upper tail is fitted along the last axis.

    Returns
    -------
    numpy.ndarray, shape (...), float64
        The k-hat of each row; -inf for a row without a tail.

    Raises
    ------
    ValueError
        A 0-d ``x``, S < 2, or non-finite values.

    Source: Vehtari, Simpson, Gelman, Yao, Gabry (2024), "Pareto smoothed importance sampling", JMLR
    (the k-hat of any Monte Carlo estimator's draws; tail length from their appendix H); ArviZ's fit.
    """
    from custom_inference import arviz_io

    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0 or a.shape[-1] < 2 or not np.all(np.isfinite(a)):
        raise ValueError(f"x must be (..., S) with S >= 2 finite values, got shape {a.shape} with "
                         f"{int(np.sum(~np.isfinite(a)))} non-finite")
    e = a - np.median(a, axis=-1, keepdims=True)
    top = e.max(axis=-1, keepdims=True)
    flat = ~(top > 0)
    logs = np.log(np.maximum(e, 0.0) / np.where(flat, 1.0, top) + 1e-300)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # flat rows (replaced below); ArviZ's
        # empirical-Bayes weights overflow to inf for far-off grid points, which then get weight 0
        _, k = arviz_io.az.psislw(logs)
    return np.where(flat[..., 0], -np.inf, np.asarray(k, dtype=np.float64))


def function_khat(log_w: np.ndarray, values: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Function-specific Pareto k-hats of self-normalized importance sampling from q, one per scalar.

    For E_p[h(theta)] estimated from draws theta_s ~ q by sum_s r_s h_s / sum_s r_s (r_s = p(y, theta_s) /
    q(theta_s), p known only up to p(y), hence self-normalized), the estimate converges at the rate its
    heavier-tailed part allows: the numerator h r and the denominator r. Vehtari et al. (2024) diagnose
    it by k-hat of both; as in loo's ``E_loo`` (function-specific k-hat: max of the right tail of r and
    both tails of h r), ``khat`` = max(``khat_r``, ``khat_hr``) with ``khat_r`` the k-hat of r (the
    joint's, `psis_khat`; -inf when the log ratios agree to 1e-9, i.e. q = p up to rounding) and
    ``khat_hr`` the larger of the two tails of h r (`tail_khat`). A functional
    with fewer than 3 distinct values (constant or binary, where the h r tail fit is meaningless) gets
    ``khat_r`` (loo's rule). So ``khat`` >= ``khat_r`` always: when the joint's k-hat exceeds 0.7 no
    functional can be corrected by importance sampling from q, whatever h; ``khat_hr`` then still shows
    which functionals add a tail of their own.

    Reading: k-hat < 0.7, PSIS from q estimates E[h]
    reliably with S draws (the error shrinks at the Monte Carlo rate for k < 0.5); 0.7-1, the estimate
    converges too slowly to be usable; > 1, the mean of h r or r does not exist as far as the draws can
    tell (no finite-S estimate is reliable). The k-hat speaks of correcting q by importance sampling, not
    of q's own estimate of E[h] (the cross-check's gap measures that).

    Parameters
    ----------
    log_w : array_like, shape (S,), float
        Log ratios log p(y, theta_s) - log q(theta_s).
    values : mapping str -> array_like, shape (S,) or (S, Q), float
        Group -> h at the same draws.

    Returns
    -------
    pandas.DataFrame
        One row per scalar: group, index, khat, khat_r, khat_hr, reading (`khat_reading` of khat).

    Raises
    ------
    ValueError
        Non-finite log ratios or values, or values whose first axis is not S.

    Source: Vehtari, Simpson, Gelman, Yao, Gabry (2024), "Pareto smoothed importance sampling", JMLR (the
    function-specific diagnostic of self-normalized IS); loo ``E_loo`` (its implementation).
    """
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    if not np.all(np.isfinite(lw)):
        raise ValueError(f"log_w has {int(np.sum(~np.isfinite(lw)))} non-finite values")
    S = lw.size
    # ratios equal to 1e-9 relative (q = p up to float rounding of log p - log q) have no tail; ArviZ's fit
    # of such ties returns inf
    k_r = -np.inf if np.ptp(lw) <= 1e-9 else psis_khat(lw)[0]
    r = np.exp(lw - lw.max())
    rows = []
    for group, v in values.items():
        h = np.asarray(v, dtype=np.float64)
        h = h.reshape(S, -1) if h.ndim != 2 and h.shape[:1] == (S,) else h
        if h.ndim != 2 or h.shape[0] != S or not np.all(np.isfinite(h)):
            raise ValueError(f"values[{group!r}] must be finite (S, Q) with S = {S}, got shape {np.shape(v)}")
        hr = (h * r[:, None]).T  # (Q, S)
        k_hr = np.maximum(tail_khat(hr), tail_khat(-hr))
        distinct = np.array([np.unique(col).size for col in h.T])
        k_hr = np.where(distinct >= 3, k_hr, np.nan)
        k = np.where(np.isnan(k_hr), k_r, np.maximum(k_hr, k_r))
        rows += [{"group": group, "index": q, "khat": float(k[q]), "khat_r": float(k_r), "khat_hr": float(k_hr[q]),
                  "reading": khat_reading(float(k[q]))} for q in range(h.shape[1])]
    return pd.DataFrame(rows, columns=["group", "index", "khat", "khat_r", "khat_hr", "reading"])


def function_khat_summary(table: pd.DataFrame) -> dict:
    """Counts and a sentence from a `function_khat` table: what a user may take from q with PSIS.

    Parameters
    ----------
    table : pandas.DataFrame
        A `function_khat` table.

    Returns
    -------
    dict
        ``n`` (scalars), ``below_0.7`` / ``0.7_to_1`` / ``above_1`` (counts of khat < 0.7,
        0.7 <= khat <= 1, > 1), ``worst`` (largest khat), ``worst_at`` ("group[index]"), ``khat_r`` (the
        ratios' k-hat, shared by all), ``hr_below_0.7`` (scalars whose numerator h r alone has k-hat
        < 0.7), ``groups`` (group -> (n, below_0.7, worst)) and ``words`` (which groups can be read from
        q with PSIS and which from a sampler).

    Raises
    ------
    ValueError
        An empty (or None) table.

    Source: project addition (the thresholds of Vehtari et al. 2024, sec. 3).
    """
    if table is None or len(table) == 0:
        raise ValueError("function_khat_summary needs a non-empty function_khat table")
    k = table.khat.to_numpy()
    worst = int(np.argmax(k))
    groups = {g: (len(t), int((t.khat < 0.7).sum()), float(t.khat.max())) for g, t in table.groupby("group", sort=False)}
    k_r = float(table.khat_r.iloc[0])
    from_q = [g for g, (n, below, _) in groups.items() if below == n]
    from_sampler = [g for g, (n, below, _) in groups.items() if below < n]
    where = f"{table.group.iloc[worst]}[{table['index'].iloc[worst]}]"
    if not from_sampler:
        words = f"all {len(k)} compared quantities ({', '.join(from_q)}) can be read from q with PSIS (k-hat < 0.7)"
    elif not from_q:
        words = (f"none of the {len(k)} compared quantities ({', '.join(from_sampler)}) can be read from q, even "
                 f"with PSIS: every function-specific k-hat >= 0.7 (worst {k[worst]:.2f}, {where})")
        if k_r >= 0.7:
            words += (f"; the importance ratios' own k-hat {k_r:.2f} (the self-normalizing denominator) already "
                      f"exceeds 0.7, so every functional inherits it")
        words += "; read them from a sampler"
    else:
        words = (f"from q with PSIS: {', '.join(from_q)}; from a sampler: {', '.join(from_sampler)} "
                 f"(worst {k[worst]:.2f}, {where})")
    return {"n": int(len(k)), "below_0.7": int((k < 0.7).sum()), "0.7_to_1": int(((k >= 0.7) & (k <= 1.0)).sum()),
            "above_1": int((k > 1.0).sum()), "worst": float(k[worst]), "worst_at": where, "khat_r": k_r,
            "hr_below_0.7": int((table.khat_hr < 0.7).sum()), "groups": groups, "words": words}


def khat(problem: KhatProblem, *, n_draws: int = 4000, seed: int = 0) -> KhatResult:
    """The PSIS k-hat of q against the program's posterior on one problem.

    Draws S = ``n_draws`` from q (``problem.draw(seed, S)``), log w = log p(y, theta) - log q(theta)
    with ``problem.log_joint``, then `psis_khat`; with ``problem.functionals``, also the function-specific
    k-hats of those quantities on the same draws (`function_khat`, in ``KhatResult.functionals``).

    Parameters
    ----------
    problem : KhatProblem
        The solver's draws from q and the program's log joint.
    n_draws : int, default 4000
        S, draws from q (keyword-only).
    seed : int, default 0
        Seed given to ``problem.draw`` (keyword-only).

    Returns
    -------
    KhatResult
        The k-hat, its reading, the PSIS ESS, the Monte Carlo ELBO and the log ratios.

    Raises
    ------
    ValueError
        ``n_draws`` < 100 (the Pareto fit needs a tail of at least a few dozen ratios), non-finite
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
    fn = None if problem.functionals is None else function_khat(log_w, problem.functionals(q.sites))
    return KhatResult(k, khat_reading(k), int(n_draws), n_latent, ess, float(np.mean(log_w)), problem.space, log_w,
                      fn)


def khat_table(result: KhatResult, model: str = "", solver: str = "") -> pd.DataFrame:
    """A one-row DataFrame of a `KhatResult`, for reports.

    Parameters
    ----------
    result : KhatResult
        The measured k-hat.
    model : str, default ""
        The model's name.
    solver : str, default ""
        The solver's label.

    Returns
    -------
    pandas.DataFrame
        One row: model, solver and the columns of `KhatResult.row`.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    return pd.DataFrame([{"model": model, "solver": solver, **result.row()}])


# ---------------------------------------------------------------------------------------------
# VSBC


def calibration_probabilities(truth: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """p_q = Pr_q(f_q(theta) < f_q(theta*)) per scalar, from draws: float64 (Q,).

    Ties count one half (p = (#below + #equal / 2) / S).

    Parameters
    ----------
    truth : array_like, shape (Q,), float
        The functionals at the simulated parameters (a scalar counts as Q = 1).
    draws : array_like, shape (S, Q) or (S,), float
        The functionals at S draws from q.

    Returns
    -------
    numpy.ndarray, shape (Q,), float64
        p of each scalar, in [0, 1].

    Raises
    ------
    ValueError
        ``draws`` and ``truth`` shapes do not match.

    Source: Yao et al. (2018), sec. 4, Algorithm 2 (the probability p_ij).
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

    Parameters
    ----------
    p : array_like, shape (n,), float
        Calibration probabilities in [0, 1].
    n_flips : int, default 4000
        B, random reflections (keyword-only).
    seed : int, default 0
        Seed of the reflections (keyword-only).

    Returns
    -------
    tuple (float, float, float)
        ``(ks_stat, ks_pvalue, flip_pvalue)``.

    Raises
    ------
    ValueError
        Fewer than 2 values, or values outside [0, 1] or not finite.

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
    """A VSBC run (made by `run_vsbc`).

    Parameters
    ----------
    probabilities : dict str -> numpy.ndarray, shape (n_sims, Q), float64
        Functional -> p of each simulation and scalar.
    table : pandas.DataFrame
        One row per scalar: functional, index, mean_p, ks_stat, ks_pvalue (scipy, nominal),
        flip_pvalue (exact level), reject (bool).
    alpha : float
        The family false-alarm rate (Bonferroni over the scalars: a scalar is rejected when
        flip_pvalue < alpha / Q_total).
    n_sims : int
        Number of simulations.
    master_seed : int
        Seed of `validation.checks.sbc.sbc_seeds`.
    method : str, default ""
        The solver's label.
    seconds : numpy.ndarray, shape (n_sims,), float64, optional
        Wall time of simulate + fit + functionals per simulation.

    Raises
    ------
    None of its own (a frozen dataclass).

    Source: Yao et al. (2018), sec. 4 (VSBC); project addition (the exact-level flip p-value).
    """

    probabilities: dict
    table: pd.DataFrame
    alpha: float
    n_sims: int
    master_seed: int
    method: str = ""
    seconds: np.ndarray = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        """True when no scalar's p is asymmetric at the Bonferroni level (a bool).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return not bool(self.table.reject.any())

    @property
    def smallest_p(self) -> float:
        """The smallest flip p-value over the scalars, a float (compare with ``alpha`` / number of scalars).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return float(self.table.flip_pvalue.min())

    def verdict(self) -> str:
        """One line for reports.

        Returns
        -------
        str
            Pass / asymmetric, the smallest p-value and its scalar, the Bonferroni level, the simulations.

        Raises
        ------
        ValueError
            An empty ``table`` (no scalar).

        Source: project addition.
        """
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

    Parameters
    ----------
    simulate : callable
        ``simulate(seed) -> (truth, data)``; ``truth`` a params dict.
    fit : callable
        ``fit(data, seed) -> dict name -> array (S, ...)``, draws from q.
    functionals : mapping str -> callable
        ``f(params dict) -> array (Q,)``, applied to the truth and to each draw.
    n_sims : int
        Number of simulations, >= 2 (keyword-only, like the rest).
    master_seed : int, default 0
        Seed of `validation.checks.sbc.sbc_seeds`.
    alpha : float, default 0.05
        Family false-alarm rate, in (0, 1).
    n_flips : int, default 4000
        Reflections of `symmetry_test`.
    method : str, default ""
        The solver's label.
    progress : bool, default False
        Show a tqdm progress bar.

    Returns
    -------
    VSBCResult
        The probabilities, the per-scalar table and the verdict's inputs.

    Raises
    ------
    ValueError
        ``n_sims`` < 2 or ``alpha`` outside (0, 1); what ``simulate`` / ``fit`` / the functionals raise
        propagates.

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
