"""Validation of the SBMF Gibbs sampler (thesis ch. 3) against its PyMC program.

- `conditional_checks`: every univariate complete conditional the sampler draws from
  (tau, mu, alpha_i, beta_j, u_ik, v_jk: closed forms in `custom_inference.sbmf`) against
  the brute-force conditional of the log joint (eq. 3.13, `ppl_models.sbmf.log_joint`, equal
  to the PyMC program's logp): on a grid, the log-density differences of the claimed
  conditional must equal the log-joint differences. ``bug=`` swaps in a deliberately wrong
  conditional (the cache term e_ij without the own contribution added back), which must fail.
- `hyper_checks`: the normal-gamma hyperparameter draws (`custom_inference.gaussian`
  helpers, Algorithm 2 lines 2-10 corrected) against the brute-force normalized conditional
  (Kolmogorov-Smirnov test of 20000 draws against the CDF integrated on a grid).
- `cache_check`: the residual cache e_ij after sweeps equals e recomputed from scratch, and
  the cached conditional of u_ik / v_jk (eq. 3.17) equals its dense I x J twin (eq. 3.16).
- `gauge_check`: the column-scaling gauge move's log density (`custom_inference.sbmf.gauge_log_density`)
  against the program's log joint after the move plus the move's log Jacobian.
- `ERRATA`: the printed hyperparameter lines of Algorithm 2 (missing squares, beta0 for alpha0).
- `run_crosscheck`: Gibbs against gated PyMC NUTS on identifiable quantities.
- `sbc_adapters`: simulate / fit / functionals for `validation.checks.sbc.run_sbc`.

Source: ``004_90693a0965f06816.txt``, ch. 3, eqs. 3.1-3.18 and Algorithm 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy import integrate, stats

from custom_inference import arviz_io
from custom_inference import sbmf as gibbs
from custom_inference.data import Observations
from custom_inference.gaussian import sample_ng_mean, sample_ng_precision, sample_normal_natural
from ppl_models import sbmf as ppl

from validation.checks import crosscheck as xc
from validation.checks import registry
from validation.checks.nuts_sbc import NutsSBCSettings
from validation.checks.errata import Erratum
from validation.checks.updates import conditional_distance

__all__ = [
    "ratings_runner",
    "CHECK_HYPER",
    "log_joint_along",
    "conditional_checks",
    "gauge_check",
    "hyper_checks",
    "cache_check",
    "ERRATA",
    "CrosscheckConfig",
    "run_crosscheck",
    "nuts_reference",
    "run_nuts",
    "SBCConfig",
    "sbc_adapters",
    "nuts_sbc_adapters",
    "sbmf_functionals",
    "to_obs",
    "BRIDGE_CONFIG",
    "numpyro_block",
    "bridge_problem",
    "BRIDGE",
]

# distinct hyperparameters, so that a swapped symbol (alpha0 vs beta0, a0 vs b0, ...) shows
CHECK_HYPER = ppl.SBMFHyper(mu_g=0.5, sigma_g=0.3, a0=2.0, b0=1.5, mu0=0.2, nu0=2.5, alpha0=3.0, beta0=0.7)
_LOG_TOL = 1e-7  # log-joint differences are exact up to float64 rounding (~1e-12 at |log p| ~ 100)
_TV_TOL = 1e-4  # as validation.checks.errata; quadrature error on a 4001-point log grid is < 1e-10 here
_KS_ALPHA = 1e-4  # false-alarm rate of each KS test (8 tests: < 0.1% per run); 20000 draws give p ~ 0 for the printed lines
_SEED004 = "004_90693a0965f06816.txt"


def to_obs(rows, cols, values, shape, dtype=np.float64) -> Observations:
    """Real-valued `Observations` (zeros kept: a rating of 0 is data).

    Parameters
    ----------
    rows, cols : array_like, shape (N,), int
        User and item index of each rating.
    values : array_like, shape (N,), float
        The ratings.
    shape : tuple of int
        (I, J).
    dtype : numpy dtype, default numpy.float64
        The values' dtype.

    Returns
    -------
    custom_inference.data.Observations
        kind "real", int32 indices, ``dtype`` values.

    Raises
    ------
    ValueError
        As `custom_inference.data.Observations.from_coo`: bad shape, lengths, indices, non-finite
        values, duplicate cells, no entries.

    Source: project addition.
    """
    return Observations.from_coo(rows, cols, values, shape, kind="real", dtype=dtype, drop_zeros=False)


def _state_from(params, obs) -> gibbs.State:
    p = {k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in params.items()}
    state = gibbs.State(**{f: p[f] for f in gibbs.ALL_VARS}, e=jnp.zeros(obs.nnz))
    return state._replace(e=gibbs.residuals(state, jax.tree_util.tree_map(jnp.asarray, obs)))


def _small_problem(seed: int, hyper, n_rows=6, n_cols=5, K=2, n_obs=20):
    truth, r, c, v = ppl.simulate(seed, n_rows, n_cols, K, hyper, n_obs=n_obs)
    obs = to_obs(r, c, v, (n_rows, n_cols))
    return truth, obs


# -- (a) univariate conditionals ----------------------------------------------------------

_SITES = ("tau", "mu", "alpha", "beta", "U", "V")


def _claimed(site, state, obs, hyper, bug: bool):
    """(kind, params) of the sampler's conditional at the checked coordinate (index 1 / (1, 1))."""
    o = jax.tree_util.tree_map(jnp.asarray, obs)
    if site == "tau":
        shape, rate = gibbs.tau_conditional(state, o, hyper)
        if bug:  # forgets the 1/2 on the residual sum
            rate = hyper.b0 + jnp.sum(state.e**2)
        return "gamma", (float(shape), float(rate))
    if site == "mu":
        P, h = gibbs.mu_conditional(state, o, hyper)
        if bug:
            h = hyper.sigma_g * hyper.mu_g + state.tau * jnp.sum(state.e)
        return "normal", (float(P), float(h))
    if site in ("alpha", "beta"):
        fn = gibbs.alpha_conditional if site == "alpha" else gibbs.beta_conditional
        P, h = fn(state, o, hyper)
        if bug:
            ids = o.rows if site == "alpha" else o.cols
            n = o.n_rows if site == "alpha" else o.n_cols
            sig, m = (state.sigma_alpha, state.mu_alpha) if site == "alpha" else (state.sigma_beta, state.mu_beta)
            h = sig * m + state.tau * jax.ops.segment_sum(state.e, ids, num_segments=n)
        return "normal", (float(P[1]), float(h[1]))
    k = 1
    fn = gibbs.u_conditional if site == "U" else gibbs.v_conditional
    P, h = fn(state, o, hyper, k)
    if bug:  # eq. 3.17 without the "+ u_ik v_jk" term: the stale-cache mistake
        other = state.V[o.cols, k] if site == "U" else state.U[o.rows, k]
        ids, n = (o.rows, o.n_rows) if site == "U" else (o.cols, o.n_cols)
        sig, m = (state.sigma_u[k], state.mu_u[k]) if site == "U" else (state.sigma_v[k], state.mu_v[k])
        h = sig * m + state.tau * jax.ops.segment_sum(other * state.e, ids, num_segments=n)
    return "normal", (float(P[1]), float(h[1]))


def _log_joint_along(params, obs, hyper, site, index, xs):
    return log_joint_along(params, obs.rows, obs.cols, obs.values, hyper, site, index, xs)


def log_joint_along(params, rows, cols, values, hyper, site, index, xs):
    """The program's log joint (`ppl_models.sbmf.log_joint`, eq. 3.13) with one scalar moved along ``xs``.

    Parameters
    ----------
    params : dict of str to numpy.ndarray
        The program's sites (copied, not modified).
    rows, cols : array_like, shape (N,), int
        The ratings' cells.
    values : array_like, shape (N,), float
        The ratings.
    hyper : ppl_models.sbmf.SBMFHyper
        The hyperparameters.
    site : str
        The moved site's name.
    index : tuple of int or None
        None for a scalar site, else the element's index tuple.
    xs : array_like, shape (G,), float64
        The values the element takes.

    Returns
    -------
    numpy.ndarray, shape (G,), float64
        The log joint at each value (nats, unnormalized).

    Raises
    ------
    KeyError
        A site the program does not have.
    IndexError
        An index outside the site.

    Source: ``004_90693a0965f06816.txt`` eq. 3.13; project addition (the grid checks of the conditionals).
    """
    rows, cols, values = (np.asarray(a) for a in (rows, cols, values))
    out = np.empty(len(xs))
    p = {k: np.array(v, dtype=np.float64, copy=True) for k, v in params.items()}
    for n, x in enumerate(xs):
        if index is None:
            p[site] = np.float64(x)
        else:
            p[site][index] = x
        out[n] = ppl.log_joint(p, rows, cols, values, hyper)
    return out


def conditional_checks(hyper=CHECK_HYPER, *, seed: int = 0, bug: str | None = None, n_grid: int = 401,
                       sites: tuple[str, ...] = _SITES) -> pd.DataFrame:
    """Each univariate conditional of the sampler vs the log joint's, on a grid.

    A state and data are drawn from the prior (I = 6, J = 5, K = 2, 20 cells). For each site the
    claimed conditional (Gaussian (P, h) or Gamma (shape, rate) from `custom_inference.sbmf`) gives
    log q(x) - log q(x_ref) on a grid within 6 sd of its mean (Gamma: its 1e-9 quantiles); the brute
    force is log p(R, all) (eq. 3.13) with that coordinate (index 1 or (1, 1)) moved, minus its value
    at x_ref. The two must agree to float64 rounding (max |difference| < 1e-7); the TV distance
    between the two normalized grid densities is reported too.

    Parameters
    ----------
    hyper : ppl_models.sbmf.SBMFHyper, default CHECK_HYPER
        Simulates and is given to the conditionals (distinct values, so a swapped symbol shows).
    seed : int, default 0
        Seeds the simulated state and data. Keyword-only.
    bug : str, optional
        A site name whose conditional is replaced by a deliberately wrong one (cache term without the
        own contribution; for tau the missing 1/2), which this check must reject. Keyword-only.
    n_grid : int, default 401
        Grid points per site. Keyword-only.
    sites : tuple of str, default ("tau", "mu", "alpha", "beta", "U", "V")
        The sites checked. Keyword-only.

    Returns
    -------
    pandas.DataFrame
        One row per site: site str, index str, kind str ("normal" / "gamma"), max_log_diff float,
        tv float, passed bool.

    Raises
    ------
    ValueError
        ``bug`` is not None or a site name, or ``sites`` holds another name; from
        `ppl_models.sbmf.simulate` for bad ``hyper``.

    Source: ``004_90693a0965f06816.txt``, ch. 3, eq. 3.13 (the log joint) and the conditionals of
    eqs. 3.14-3.17 and Algorithm 2; the check is a project addition (validation level 1).
    """
    if bug is not None and bug not in _SITES:
        raise ValueError(f"bug must be one of {_SITES}, got {bug!r}")
    if not set(sites) <= set(_SITES):
        raise ValueError(f"sites must be among {_SITES}, got {sites!r}")
    truth, obs = _small_problem(seed, hyper)
    with jax.enable_x64(True):
        state = _state_from(truth, obs)
        rows = []
        for site in sites:
            kind, (a, b) = _claimed(site, state, obs, hyper, bug == site)
            index = None if site in ("tau", "mu") else ((1,) if site in ("alpha", "beta") else (1, 1))
            if kind == "normal":
                mean, sd = b / a, a**-0.5
                grid = np.linspace(mean - 6 * sd, mean + 6 * sd, n_grid)
                logq = stats.norm.logpdf(grid, mean, sd)
            else:
                lo, hi = stats.gamma.ppf([1e-9, 1 - 1e-9], a, scale=1 / b)
                grid = np.linspace(lo, hi, n_grid)
                logq = stats.gamma.logpdf(grid, a, scale=1 / b)
            logp = _log_joint_along(truth, obs, hyper, site, index, grid)
            ref = n_grid // 2
            diff = (logp - logp[ref]) - (logq - logq[ref])
            p = np.exp(logp - logp.max())
            q = np.exp(logq - logq.max())
            tv = 0.5 * np.trapezoid(np.abs(p / np.trapezoid(p, grid) - q / np.trapezoid(q, grid)), grid)
            mld = float(np.max(np.abs(diff)))
            rows.append({"site": site, "index": str(index), "kind": kind, "max_log_diff": mld, "tv": float(tv),
                         "passed": mld < _LOG_TOL})
    return pd.DataFrame(rows)


# -- hyperparameter blocks (normal-gamma), by sampling -------------------------------------


_GAUGE_FIELDS = ("U", "V", "mu_u", "sigma_u", "mu_v", "sigma_v")


def gauge_check(hyper=CHECK_HYPER, *, seed: int = 0, n_points: int = 6, fit_hyper=None) -> pd.DataFrame:
    """The scale-gauge target of `custom_inference.sbmf.gauge_log_density` against eq. 3.13.

    For a prior draw x (6 x 5, K = 2) and ``n_points`` random s ~ N(0, 0.5^2 I_K), A = diag(e^s),
    the claimed g(s) - g(0) (`custom_inference.sbmf.gauge_log_density` at the moved
    hyperparameters) must equal l(T_s x) + log|det J_s| - l(x), with l = `ppl_models.sbmf.log_joint`
    and T_s = `custom_inference.sbmf.apply_gauge`. T_s scales each coordinate of (U, V, mu_u,
    sigma_u, mu_v, sigma_v) by its own factor, so log|det J_s| = sum log|x'/x| over those
    coordinates, read off the moved state (not from the solver's derivation). Tolerance: relative
    1e-7 of the log-joint changes (float64 rounding ~1e-12). Row "gauge act": 20 random generator
    steps of `custom_inference.sbmf.gauge_act` (what the walk tracks) reach the hyperparameters of
    `apply_gauge` of their product (relative 1e-9).

    Parameters
    ----------
    hyper : ppl_models.sbmf.SBMFHyper, default CHECK_HYPER
        Simulates the prior draw and defines l.
    seed : int, default 0
        Seeds the draw (``seed``) and the moves (``seed + 7``). Keyword-only.
    n_points : int, default 6
        Random moves s. Keyword-only.
    fit_hyper : ppl_models.sbmf.SBMFHyper, optional
        What the claimed density is given (default ``hyper``); a different beta0 or nu0 is a wrong
        move (negative control), which must fail. Keyword-only.

    Returns
    -------
    pandas.DataFrame
        Two rows ("gauge target", "gauge act"): check str, max_abs_error float, scale float,
        passed bool.

    Raises
    ------
    ValueError
        From `ppl_models.sbmf.simulate` for bad ``hyper``; none of its own.

    Source: project addition (the gauge move of `custom_inference.sbmf` on the log joint of
    ``004_90693a0965f06816.txt``, eq. 3.13).
    """
    fit_hyper = hyper if fit_hyper is None else fit_hyper
    truth, obs = _small_problem(seed, hyper)
    rows, cols, values = (np.asarray(a) for a in (obs.rows, obs.cols, obs.values))
    rng = np.random.default_rng(seed + 7)
    with jax.enable_x64(True):
        state = _state_from(truth, obs)
        density = gibbs.gauge_log_density(fit_hyper)
        K = state.U.shape[1]

        def claimed(s):
            m = gibbs.apply_gauge(state, jnp.diag(jnp.exp(s)))
            return density(gibbs.GaugeHyper(m.mu_u, m.sigma_u, m.mu_v, m.sigma_v), jnp.diag(jnp.exp(s)))

        base = ppl.log_joint(truth, rows, cols, values, hyper)
        errs, scale = [], 0.0
        for s in 0.5 * rng.standard_normal((n_points, K)):
            moved = gibbs.apply_gauge(state, jnp.diag(jnp.exp(jnp.asarray(s))))
            p = dict(truth)
            log_jac = 0.0
            for f in _GAUGE_FIELDS:
                new, old = np.asarray(getattr(moved, f)), np.asarray(getattr(state, f))
                p[f] = new
                log_jac += float(np.sum(np.log(np.abs(new / old))))
            program = ppl.log_joint(p, rows, cols, values, hyper) + log_jac - base
            mine = float(claimed(jnp.asarray(s)) - claimed(jnp.zeros(K)))
            errs.append(abs(program - mine))
            scale = max(scale, abs(program))
        # the walk's generator steps (gauge_act) compose to apply_gauge of their product
        g = gibbs.GaugeHyper(state.mu_u, state.sigma_u, state.mu_v, state.sigma_v)
        s_tot = np.zeros(K)
        for _ in range(20):
            k, z = int(rng.integers(0, K)), float(0.3 * rng.standard_normal())
            g, s_tot[k] = gibbs.gauge_act(g, k, k, z), s_tot[k] + z
        ref = gibbs.apply_gauge(state, jnp.diag(jnp.exp(jnp.asarray(s_tot))))
        act_err = max(float(jnp.max(jnp.abs(getattr(g, f) - getattr(ref, f)))) for f in gibbs.GaugeHyper._fields)
        act_scale = max(float(jnp.max(jnp.abs(getattr(ref, f)))) for f in gibbs.GaugeHyper._fields)
    err = float(max(errs))
    return pd.DataFrame([{"check": "gauge target", "max_abs_error": err, "scale": scale,
                          "passed": err <= _LOG_TOL * max(scale, 1.0)},
                         {"check": "gauge act", "max_abs_error": act_err, "scale": act_scale,
                          "passed": act_err <= 1e-9 * max(act_scale, 1.0)}])


def _brute_cdf(params, obs, hyper, site, index, lo, hi, positive):
    grid = np.geomspace(lo, hi, 4001) if positive else np.linspace(lo, hi, 4001)
    lp = _log_joint_along(params, obs, hyper, site, index, grid)
    p = np.exp(lp - lp.max())
    c = integrate.cumulative_trapezoid(p, grid, initial=0.0)
    c /= c[-1]
    return lambda x: np.interp(x, grid, c)


def hyper_checks(hyper=CHECK_HYPER, *, seed: int = 0, n_draws: int = 20000, printed: bool = False) -> pd.DataFrame:
    """The normal-gamma draws of Algorithm 2 lines 2-10 vs the brute-force conditionals.

    For each of sigma_alpha, mu_alpha, sigma_beta, mu_beta, sigma_u[1], mu_u[1], sigma_v[1],
    mu_v[1] (index 0 when K = 1): ``n_draws`` draws from
    `custom_inference.gaussian.sample_ng_precision` / `sample_ng_mean` (what
    `custom_inference.sbmf.step` calls) given the rest of a prior draw (6 x 5, K = 2), and a KS test
    against the CDF of the log joint (eq. 3.13) normalized on a 4001-point grid.

    Parameters
    ----------
    hyper : ppl_models.sbmf.SBMFHyper, default CHECK_HYPER
        Simulates and is given to the draws.
    seed : int, default 0
        Seeds the prior draw (``seed``) and the draws (``seed + 1``). Keyword-only.
    n_draws : int, default 20000
        Draws per site. Keyword-only.
    printed : bool, default False
        Draw the precisions from the printed lines instead (no square in the rate; shape
        beta0 + (n+1)/2 for beta and v), which must fail. Keyword-only.

    Returns
    -------
    pandas.DataFrame
        8 rows: site str, ks_stat float, p_value float, passed bool (p > 1e-4; non-finite or
        non-positive precision draws fail with ks_stat 1).

    Raises
    ------
    ValueError
        From `ppl_models.sbmf.simulate` for bad ``hyper``; none of its own.

    Source: ``004_90693a0965f06816.txt``, Algorithm 2, lines 2-10 (corrected, see ``ERRATA``) and
    eq. 3.13.
    """
    truth, obs = _small_problem(seed, hyper)
    h = hyper
    rows = []
    K = truth["U"].shape[1]
    k = 1 if K > 1 else 0
    with jax.enable_x64(True):
        base = jax.random.PRNGKey(seed + 1)
        for block, (x_name, m_name, s_name, idx) in enumerate((("alpha", "mu_alpha", "sigma_alpha", None), ("beta", "mu_beta", "sigma_beta", None),
                                            ("U", "mu_u", "sigma_u", k), ("V", "mu_v", "sigma_v", k))):
            keys = jax.random.split(jax.random.fold_in(base, block), n_draws)
            x = jnp.asarray(truth[x_name] if idx is None else truth[x_name][:, idx])
            m = jnp.asarray(truth[m_name] if idx is None else truth[m_name][idx])
            s = jnp.asarray(truth[s_name] if idx is None else truth[s_name][idx])
            if printed:
                shape_first = h.beta0 if x_name in ("beta", "V") else h.alpha0
                shape = shape_first + 0.5 * (x.shape[0] + 1)
                rate = h.beta0 + 0.5 * (h.nu0 * (m - h.mu0) ** 2 + jnp.sum(x - m))
                draws_s = np.asarray(jax.vmap(lambda kk: jax.random.gamma(kk, shape) / rate)(keys))
            else:
                draws_s = np.asarray(jax.vmap(lambda kk: sample_ng_precision(kk, x, m, h.mu0, h.nu0, h.alpha0, h.beta0))(keys))
            draws_m = np.asarray(jax.vmap(lambda kk: sample_ng_mean(kk, x, s, h.mu0, h.nu0))(keys))
            for site, draws, positive in ((s_name, draws_s, True), (m_name, draws_m, False)):
                index = None if idx is None else (idx,)
                finite = draws[np.isfinite(draws)]
                if finite.size < draws.size or (positive and np.any(finite <= 0)):
                    rows.append({"site": site, "ks_stat": 1.0, "p_value": 0.0, "passed": False})
                    continue
                spread = finite.max() - finite.min()
                if positive:
                    lo, hi = finite.min() / 20, finite.max() * 20
                    # cover the brute-force mass too when the draws are off
                    lo, hi = min(lo, 1e-4), max(hi, 1e3 / max(float(s), 1e-3))
                else:
                    lo, hi = finite.min() - 3 * spread, finite.max() + 3 * spread
                cdf = _brute_cdf(truth, obs, h, site, index, lo, hi, positive)
                res = stats.kstest(draws, cdf)
                rows.append({"site": site, "ks_stat": float(res.statistic), "p_value": float(res.pvalue),
                             "passed": bool(res.pvalue > _KS_ALPHA)})
    return pd.DataFrame(rows)


# -- (b) residual cache and its dense twin ---------------------------------------------------


def _dense_factor_conditional(state, R, mask, k, side):
    """Eq. (3.16) with dense I x J arrays (brute-force reference only): (P, h) for all rows."""
    mu, alpha, beta = float(state.mu), np.asarray(state.alpha), np.asarray(state.beta)
    U, V, tau = np.asarray(state.U), np.asarray(state.V), float(state.tau)
    full = U @ V.T
    rest = full - np.outer(U[:, k], V[:, k])  # sum over l != k
    resid = (R - (mu + alpha[:, None] + beta[None, :] + rest)) * mask
    if side == "U":
        P = float(state.sigma_u[k]) + tau * (mask * V[None, :, k] ** 2).sum(axis=1)
        h = float(state.sigma_u[k] * state.mu_u[k]) + tau * (resid * V[None, :, k]).sum(axis=1)
    else:
        P = float(state.sigma_v[k]) + tau * (mask * U[:, k, None] ** 2).sum(axis=0)
        h = float(state.sigma_v[k] * state.mu_v[k]) + tau * (resid * U[:, k, None]).sum(axis=0)
    return P, h


def cache_check(hyper=ppl.SBMFHyper(), *, seed: int = 0, n_sweeps: int = 25, n_rows: int = 12, n_cols: int = 9,
                K: int = 3, n_obs: int = 50) -> pd.DataFrame:
    """The residual cache and the cached conditionals against from-scratch / dense twins.

    Runs ``n_sweeps`` sweeps from `custom_inference.sbmf.init` on simulated data, then compares:
    ``e``: cached e vs e recomputed from scratch; ``log_joint``: from the cache vs from scratch;
    ``U_cond`` / ``V_cond``: (P, h) of eqs. 3.15/3.17 (cached, O(N)) vs eq. 3.16 evaluated on the
    dense masked I x J matrix, for every k. Float64.

    Parameters
    ----------
    hyper : ppl_models.sbmf.SBMFHyper, default SBMFHyper()
        Simulates and fits.
    seed : int, default 0
        Seeds the data and `init`. Keyword-only.
    n_sweeps : int, default 25
        Sweeps before the comparison. Keyword-only.
    n_rows, n_cols : int, default 12, 9
        I and J. Keyword-only.
    K : int, default 3
        The latent dimension. Keyword-only.
    n_obs : int, default 50
        Observed cells (<= I J). Keyword-only.

    Returns
    -------
    pandas.DataFrame
        4 rows: quantity str, max_rel_diff float, passed bool (< 1e-9).

    Raises
    ------
    ValueError
        From `ppl_models.sbmf.simulate` / `custom_inference.sbmf.init`: bad sizes, ``n_obs`` > I J,
        K < 1, bad ``hyper``; none of its own.

    Source: ``004_90693a0965f06816.txt``, eqs. 3.15-3.17 (cached vs dense conditionals); the check is
    a project addition (validation level 1).
    """
    truth, obs = _small_problem(seed, hyper, n_rows, n_cols, K, n_obs)
    with jax.enable_x64(True):
        o = jax.tree_util.tree_map(jnp.asarray, obs)
        state = gibbs.init(jax.random.PRNGKey(seed), o, K, hyper)
        for t in range(n_sweeps):
            state, _ = gibbs.step(jax.random.PRNGKey(1000 + t), state, o, hyper)
        R, mask = obs.to_dense(), np.zeros(obs.shape)
        mask[np.asarray(obs.rows), np.asarray(obs.cols)] = 1.0

        def rel(a, b):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))

        out = [("e", rel(state.e, gibbs.residuals(state, o))),
               ("log_joint", rel(gibbs.log_joint(state, o, hyper), gibbs.log_joint(state, o, hyper, from_cache=False)))]
        for side, fn in (("U", gibbs.u_conditional), ("V", gibbs.v_conditional)):
            worst = 0.0
            for k in range(K):
                P, h = fn(state, o, hyper, k)
                Pd, hd = _dense_factor_conditional(state, R, mask, k, side)
                worst = max(worst, rel(P, Pd), rel(h, hd))
            out.append((f"{side}_cond", worst))
    return pd.DataFrame([{"quantity": q, "max_rel_diff": d, "passed": d < 1e-9} for q, d in out])


# -- (c) errata of Algorithm 2 -------------------------------------------------------------


def _ng_precision_check(x_name: str, line: int, error: str):
    """Check of one printed hyper-precision line: Gamma(shape, rate) vs brute force (TV on a grid).

    ``error`` in {"square", "shape"}: which printed error the "printed" form carries (the
    other part is taken corrected, so each row isolates one error).
    """
    m_name, s_name = {"alpha": ("mu_alpha", "sigma_alpha"), "beta": ("mu_beta", "sigma_beta"),
                      "U": ("mu_u", "sigma_u"), "V": ("mu_v", "sigma_v")}[x_name]

    def check(form: str):
        h = CHECK_HYPER
        truth, obs = _small_problem(0, h)
        idx = None if x_name in ("alpha", "beta") else 1
        x = truth[x_name] if idx is None else truth[x_name][:, idx]
        m = truth[m_name] if idx is None else truth[m_name][idx]
        n = x.shape[0]
        shape = h.alpha0 + 0.5 * (n + 1)
        rate = h.beta0 + 0.5 * (h.nu0 * (m - h.mu0) ** 2 + np.sum((x - m) ** 2))
        if form == "printed" and error == "shape":
            shape = h.beta0 + 0.5 * (n + 1)
        if form == "printed" and error == "square":
            rate = h.beta0 + 0.5 * (h.nu0 * (m - h.mu0) ** 2 + np.sum(x - m))
        if not rate > 0:
            return False, float("inf")  # not even a density
        grid = np.geomspace(1e-6, stats.gamma.ppf(1 - 1e-12, h.alpha0 + 0.5 * (n + 1), scale=1 / (
            h.beta0 + 0.5 * (h.nu0 * (m - h.mu0) ** 2 + np.sum((x - m) ** 2)))) * 5, 4001)
        index = None if idx is None else (idx,)
        tv = conditional_distance(lambda xs: _log_joint_along(truth, obs, h, s_name, index, xs),
                                  lambda xs: stats.gamma.logpdf(xs, shape, scale=1 / rate), grid)
        return tv < _TV_TOL, tv

    return check


_SQ = "the precision's conditional collects the squared deviations: log N(x | m, 1/s) = 0.5 log s - 0.5 s (x - m)^2, summed over the n members"
_SH = "the shape is the normal-gamma prior shape alpha0 plus (n + 1)/2 (n members and the mean's own N(mu0, 1/(nu0 s)) factor); beta0 is the prior rate"

ERRATA: tuple[Erratum, ...] = (
    Erratum(_SEED004, "ch. 3, Algorithm 2 line 2 (sigma_alpha)",
            "beta* <- beta0 + 1/2 (nu0 (mu_alpha - mu0)^2 + sum_i (alpha_i - mu_alpha))",
            "beta* <- beta0 + 1/2 (nu0 (mu_alpha - mu0)^2 + sum_i (alpha_i - mu_alpha)^2)",
            _SQ, "conditional", _ng_precision_check("alpha", 2, "square")),
    Erratum(_SEED004, "ch. 3, Algorithm 2 line 4 (sigma_beta), shape",
            "alpha* <- beta0 + 1/2 (J + 1)",
            "alpha* <- alpha0 + 1/2 (J + 1)",
            _SH, "conditional", _ng_precision_check("beta", 4, "shape")),
    Erratum(_SEED004, "ch. 3, Algorithm 2 line 4 (sigma_beta), rate",
            "beta* <- beta0 + 1/2 (nu0 (mu_beta - mu0)^2 + sum_j (beta_j - mu_beta))",
            "beta* <- beta0 + 1/2 (nu0 (mu_beta - mu0)^2 + sum_j (beta_j - mu_beta)^2)",
            _SQ, "conditional", _ng_precision_check("beta", 4, "square")),
    Erratum(_SEED004, "ch. 3, Algorithm 2 line 7 (sigma_uk)",
            "beta* <- beta0 + 1/2 (nu0 (mu_uk - mu0)^2 + sum_i (u_ik - mu_uk))",
            "beta* <- beta0 + 1/2 (nu0 (mu_uk - mu0)^2 + sum_i (u_ik - mu_uk)^2)",
            _SQ, "conditional", _ng_precision_check("U", 7, "square")),
    Erratum(_SEED004, "ch. 3, Algorithm 2 line 9 (sigma_vk), shape",
            "alpha* <- beta0 + 1/2 (J + 1)",
            "alpha* <- alpha0 + 1/2 (J + 1)",
            _SH, "conditional", _ng_precision_check("V", 9, "shape")),
    Erratum(_SEED004, "ch. 3, Algorithm 2 line 9 (sigma_vk), rate",
            "beta* <- beta0 + 1/2 (nu0 (mu_vk - mu0)^2 + sum_j (v_jk - mu_vk))",
            "beta* <- beta0 + 1/2 (nu0 (mu_vk - mu0)^2 + sum_j (v_jk - mu_vk)^2)",
            _SQ, "conditional", _ng_precision_check("V", 9, "square")),
)


# -- (d) Gibbs vs PyMC NUTS -----------------------------------------------------------------


@dataclass(frozen=True)
class CrosscheckConfig:
    """Data and run settings of the Gibbs-vs-NUTS cross-check.

    The defaults: I = 20, J = 15, K = 2, 150 observed cells simulated from the prior with the
    thesis's hyperparameters, 10 unobserved cells predicted too. NUTS: PyMC through NumPyro, 4
    chains, target_accept 0.95 (the centred hierarchy has funnels). Gibbs: 4 chains, thinned so that
    the ESS of the predictions exceeds the gates.

    Parameters
    ----------
    n_rows, n_cols : int, default 20, 15
        I and J.
    K : int, default 2
        The latent dimension.
    n_obs : int, default 150
        Observed cells.
    n_unobserved : int, default 10
        Unobserved cells whose predictions are compared too (fewer when fewer are free).
    hyper : ppl_models.sbmf.SBMFHyper, default SBMFHyper()
        Simulates and fits.
    data_seed : int, default 3
        Seeds the simulation and the choice of unobserved cells.
    seed : int, default 0
        Seeds NUTS and Gibbs.
    num_chains, num_warmup, num_samples : int, default 4, 1000, 1000
        NUTS chains, tuning and kept draws per chain.
    target_accept : float, default 0.95
        NUTS target acceptance probability.
    nuts_sampler : {"numpyro", "pymc", ...}, default "numpyro"
        PyMC's ``nuts_sampler``; "pymc" runs PyMC's own NUTS on one core.
    gibbs_chains, gibbs_warmup, gibbs_samples, gibbs_thin : int, default 4, 1000, 1000, 5
        The Gibbs sampler's chains, warm-up sweeps, kept draws per chain and thinning.

    Raises
    ------
    None of its own (a frozen dataclass; values are checked where they are used).

    Source: project addition (validation level 2 problem for ``004_90693a0965f06816.txt`` ch. 3).
    """

    n_rows: int = 20
    n_cols: int = 15
    K: int = 2
    n_obs: int = 150
    n_unobserved: int = 10
    hyper: ppl.SBMFHyper = ppl.SBMFHyper()
    data_seed: int = 3
    seed: int = 0
    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 1000
    target_accept: float = 0.95
    nuts_sampler: str = "numpyro"
    gibbs_chains: int = 4
    gibbs_warmup: int = 1000
    gibbs_samples: int = 1000
    gibbs_thin: int = 5


def crosscheck_data(config: CrosscheckConfig = CrosscheckConfig()):
    """(truth, obs, cells): the simulated data and the compared cells (rows, cols): the observed
    ones, then ``n_unobserved`` unobserved ones chosen with the data seed."""
    c = config
    truth, r, co, v = ppl.simulate(c.data_seed, c.n_rows, c.n_cols, c.K, c.hyper, n_obs=c.n_obs)
    obs = to_obs(r, co, v, (c.n_rows, c.n_cols))
    rng = np.random.default_rng(c.data_seed + 7)
    taken = set(zip(np.asarray(obs.rows).tolist(), np.asarray(obs.cols).tolist()))
    free = np.array([(i, j) for i in range(c.n_rows) for j in range(c.n_cols) if (i, j) not in taken]).reshape(-1, 2)
    extra = free[rng.choice(len(free), size=min(c.n_unobserved, len(free)), replace=False)]
    cells = (np.concatenate([np.asarray(obs.rows), extra[:, 0]]), np.concatenate([np.asarray(obs.cols), extra[:, 1]]))
    return truth, obs, cells


def _quantities(post, cells):
    """Identifiable quantities (chain, draw, Q): predicted means at the cells, and tau."""
    pred = ppl.predicted_mean(post, *cells)
    return {"pred": np.asarray(pred, np.float64), "tau": np.asarray(post["tau"], np.float64)[..., None]}


def run_nuts(obs: Observations, config: CrosscheckConfig = CrosscheckConfig(), progress: bool = False) -> xc.NutsRun:
    """PyMC NUTS on `ppl_models.sbmf.model` (through NumPyro unless ``config.nuts_sampler`` is "pymc").

    Parameters
    ----------
    obs : custom_inference.data.Observations
        N ratings (int32 (N,) indices, float (N,) values).
    config : CrosscheckConfig, default CrosscheckConfig()
        K, hyper and the NUTS settings (``num_*``, ``target_accept``, ``nuts_sampler``, ``seed``).
    progress : bool, default False
        PyMC's progress bar.

    Returns
    -------
    validation.checks.crosscheck.NutsRun
        The InferenceData, the number of divergent transitions, bfmi float64 (chain,) and seconds.

    Raises
    ------
    ValueError
        From `ppl_models.sbmf.model` (bad K, hyper, indices or values); PyMC's errors propagate.

    Source: project addition.
    """
    import pymc as pm

    c = config
    m = ppl.model(np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values), obs.n_rows, obs.n_cols, c.K, c.hyper)
    start = time.perf_counter()
    with m:
        kwargs = {"nuts_sampler": c.nuts_sampler} if c.nuts_sampler != "pymc" else {"cores": 1}
        idata = pm.sample(draws=c.num_samples, tune=c.num_warmup, chains=c.num_chains, target_accept=c.target_accept,
                          random_seed=c.seed, progressbar=progress, compute_convergence_checks=False, **kwargs)
    seconds = time.perf_counter() - start
    div = int(np.sum(idata.sample_stats["diverging"].values))
    return xc.NutsRun(idata, div, arviz_io.bfmi(idata), seconds)


def nuts_reference(config: CrosscheckConfig = CrosscheckConfig(), *, reference: str | None = None,
                   progress: bool = False):
    """The NUTS reference "sbmf" of the cross-check problem (`validation.checks.references.Reference`).

    Stored when one matches the data, cells and settings, else a fresh `run_nuts`. Compared:
    predicted means at the cells (chain, draw, Q) and tau (chain, draw, 1), float64.

    Parameters
    ----------
    config : CrosscheckConfig, default CrosscheckConfig()
        The problem and NUTS settings.
    reference : {None, "stored", "rerun"}, optional
        As in `validation.checks.references.nuts_reference`. Keyword-only.
    progress : bool, default False
        Progress bar of a fresh run. Keyword-only.

    Returns
    -------
    validation.checks.references.Reference
        The stored or fresh reference.

    Raises
    ------
    ValueError
        ``reference`` is not None, "stored" or "rerun", or is "stored" and no stored reference
        matches.

    Source: project addition.
    """
    c = config
    _, obs, cells = crosscheck_data(c)
    settings = xc.NutsSettings.of(c, sampler=f"pymc+{c.nuts_sampler}")
    key = xc.problem_key((obs.rows, obs.cols, obs.values, *cells), (c.n_rows, c.n_cols, c.K, c.hyper), settings)
    post = lambda idata: {k: idata.posterior[k].values for k in ("mu", "alpha", "beta", "U", "V", "tau")}  # noqa: E731
    return xc.nuts_reference("sbmf", key, settings, lambda: run_nuts(obs, c, progress),
                             lambda idata: _quantities(post(idata), cells), reference=reference)


def run_crosscheck(config: CrosscheckConfig = CrosscheckConfig(), *, progress: bool = False,
                   reference: str | None = None) -> xc.CrosscheckResult:
    """Gibbs against gated PyMC NUTS: both exact, so means must agree within Monte Carlo error.

    Compared: predicted means mu + alpha_i + beta_j + u_i . v_j at the observed cells and at
    ``n_unobserved`` unobserved cells, and tau (never raw factor coordinates). Both runs gated,
    verdict by `validation.checks.crosscheck.exact_crosscheck` (Bonferroni, 1% per group); NUTS is
    the stored reference when it matches (`nuts_reference`).

    Parameters
    ----------
    config : CrosscheckConfig, default CrosscheckConfig()
        The problem and both runs' settings.
    progress : bool, default False
        Progress bars. Keyword-only.
    reference : {None, "stored", "rerun"}, optional
        As in `nuts_reference`. Keyword-only.

    Returns
    -------
    validation.checks.crosscheck.CrosscheckResult
        Method "exact".

    Raises
    ------
    ValueError
        A bad ``reference`` (or "stored" without a match); bad sizes or hyper in ``config`` (from
        `ppl_models.sbmf.simulate` / `custom_inference.sbmf.sample`).

    Source: project addition (validation level 2).
    """
    c = config
    _, obs, cells = crosscheck_data(c)
    start = time.perf_counter()
    g = gibbs.sample(c.seed, obs, c.K, c.hyper, num_chains=c.gibbs_chains, num_warmup=c.gibbs_warmup,
                     num_samples=c.gibbs_samples, thin=c.gibbs_thin, progress=progress,
                     keep=("mu", "tau", "pred"), predict_at=cells)
    gibbs_seconds = time.perf_counter() - start
    post_g = arviz_io.group_arrays(g)
    settings = {
        "data": f"{c.n_rows} x {c.n_cols}, {obs.values.shape[0]} observed cells, K = {c.K}; compared at "
                f"{cells[0].size} cells (observed and unobserved) and tau",
        "Gibbs": xc.gibbs_line(c, gibbs_seconds),
    }
    return xc.exact_crosscheck(
        model="sbmf", solver="SBMF Gibbs", ref=nuts_reference(c, reference=reference, progress=progress),
        solver_quantities={"pred": post_g["pred"], "tau": post_g["tau"][..., None]}, solver_seconds=gibbs_seconds,
        config=c, settings=settings, solver_idata=g)


# -- (e) SBC ------------------------------------------------------------------------------------

_CELLS = ((0, 0), (1, 2), (2, 1), (3, 3))

# The log tau lean (Gibbs, master seed 0, 200 simulations: ECDF p 0.0004, mean rank 55.8; seed 1:
# p 0.55, 49.5) is shared by NUTS on the same 200 data sets (`nuts_sbc_adapters`: mean rank 55.2,
# ECDF p 0.0018, fails too; 145 of 200 NUTS runs failed their gates, mostly R-hat), and paired on
# the same data the two posterior means of log tau differ by -0.008 +- 0.012 NUTS posterior sd (a
# Gibbs bias large enough to give mean rank 55.8 would be ~0.2 sd). Extended to 1000 simulations
# (the same first 200), the Gibbs SBC passes: log tau mean rank 49.99, ECDF p 0.98; smallest family
# p 0.14. So the lean belonged to the first 200 data sets (a chance excursion that any exact
# sampler shares), not to the sampler (issue 11).


def sbmf_functionals(cells=_CELLS) -> dict:
    """SBC test quantities, invariant to rotations / sign flips of the factors.

    log tau, the predicted means at a few fixed cells (observed or not), and
    mu + mean(alpha) + mean(beta).

    Parameters
    ----------
    cells : sequence of (int, int), default ((0, 0), (1, 2), (2, 1), (3, 3))
        (row, col) pairs.

    Returns
    -------
    dict of str to callable
        Name -> function of one draw (mu, tau scalars; alpha (I,), beta (J,), U (I, K), V (J, K))
        giving float arrays: log_tau (1,), pred (len(cells),), mean_level (1,).

    Raises
    ------
    None of its own; the returned ``pred`` raises IndexError (`ppl_models.sbmf.predicted_mean`) for
    a cell outside the draw's I x J, and every function KeyError for a draw without a needed site.

    Source: project addition (SBC functionals of the model of ``004_90693a0965f06816.txt``,
    eq. 3.13).
    """
    rows = np.array([c[0] for c in cells])
    cols = np.array([c[1] for c in cells])
    return {
        "log_tau": lambda p: np.log(np.atleast_1d(np.asarray(p["tau"], np.float64))),
        "pred": lambda p: ppl.predicted_mean(p, rows, cols),
        "mean_level": lambda p: np.atleast_1d(np.asarray(p["mu"]) + np.mean(p["alpha"]) + np.mean(p["beta"])),
    }


@dataclass(frozen=True)
class SBCConfig:
    """Sizes of one SBC simulation (small: hundreds of fits).

    The Gibbs draws are thinned by ``gibbs_thin`` and then evenly by `run_sbc` to L = 99.

    Parameters
    ----------
    n_rows, n_cols : int, default 8, 6
        I and J.
    K : int, default 2
        The latent dimension.
    n_obs : int, default 30
        Observed cells per simulation.
    hyper : ppl_models.sbmf.SBMFHyper, default SBMFHyper()
        Simulates and (in `sbc_adapters`, by default) fits.
    gibbs_chains, gibbs_warmup, gibbs_samples, gibbs_thin : int, default 2, 500, 1000, 5
        The Gibbs sampler's chains, warm-up sweeps, kept draws per chain and thinning.
    nuts : validation.checks.nuts_sbc.NutsSBCSettings
        The NUTS SBC's run and gates (`nuts_sbc_adapters`: 2 chains x 500 draws after 500 warm-up,
        target accept 0.99).
    nuts_noncentred : bool, default False
        Run the NUTS SBC in non-centred coordinates instead of the centred program.

    Raises
    ------
    None of its own (a frozen dataclass; values are checked where they are used).

    Source: project addition (SBC, Talts et al. 2018, for the model of ``004_90693a0965f06816.txt``
    ch. 3).
    """

    n_rows: int = 8
    n_cols: int = 6
    K: int = 2
    n_obs: int = 30
    hyper: ppl.SBMFHyper = ppl.SBMFHyper()
    gibbs_chains: int = 2
    gibbs_warmup: int = 500
    gibbs_samples: int = 1000
    gibbs_thin: int = 5
    nuts: NutsSBCSettings = NutsSBCSettings(num_chains=2, num_warmup=500, num_samples=500, target_accept=0.99)
    nuts_noncentred: bool = False


# the Normal sites whose scale is a sampled precision (the funnels of the centred program)
_NONCENTRED = ("mu_alpha", "alpha", "mu_beta", "beta", "mu_u", "U", "mu_v", "V")


def sbc_adapters(config: SBCConfig = SBCConfig(), *, fit_hyper: ppl.SBMFHyper | None = None):
    """``(simulate, fit, functionals)`` for `validation.checks.sbc.run_sbc`.

    Data are simulated with ``config.hyper`` (`ppl_models.sbmf.simulate`).

    Parameters
    ----------
    config : SBCConfig, default SBCConfig()
        Sizes and the sampler's settings.
    fit_hyper : ppl_models.sbmf.SBMFHyper, optional
        What the sampler is given (default ``config.hyper``): a different one is a deliberately
        misspecified control that SBC must flag. Keyword-only.

    Returns
    -------
    simulate : callable
        ``simulate(seed)`` -> (truth dict of float arrays, `custom_inference.data.Observations`).
    fit : callable
        ``fit(obs, seed)`` -> dict of the draws of mu, alpha, beta, U, V, tau with the chains
        flattened, e.g. U (S, I, K), S = gibbs_chains x gibbs_samples.
    functionals : dict
        `sbmf_functionals` ().

    Raises
    ------
    None of its own; the returned functions raise ValueError from `ppl_models.sbmf.simulate` /
    `custom_inference.sbmf.sample` for bad sizes or hyperparameters.

    Source: project addition (SBC, Talts et al. 2018) on the model of ``004_90693a0965f06816.txt``,
    ch. 3.
    """
    c = config
    fit_hyper = c.hyper if fit_hyper is None else fit_hyper

    def simulate(seed: int):
        truth, r, co, v = ppl.simulate(int(seed), c.n_rows, c.n_cols, c.K, c.hyper, n_obs=c.n_obs)
        return truth, to_obs(r, co, v, (c.n_rows, c.n_cols))

    def fit(obs, seed: int):
        idata = gibbs.sample(int(seed), obs, c.K, fit_hyper, num_chains=c.gibbs_chains, num_warmup=c.gibbs_warmup,
                             num_samples=c.gibbs_samples, thin=c.gibbs_thin, progress=False,
                             keep=("mu", "alpha", "beta", "U", "V", "tau"))
        post = arviz_io.group_arrays(idata)
        return {n: post[n].reshape(-1, *post[n].shape[2:]) for n in ("mu", "alpha", "beta", "U", "V", "tau")}

    return simulate, fit, sbmf_functionals()


def nuts_sbc_adapters(config: SBCConfig = SBCConfig(), *, log_path=None):
    """``(simulate, fit, functionals)`` for `validation.checks.sbc.run_sbc` with NumPyro NUTS on the program.

    ``simulate`` and the functionals are those of `sbc_adapters` (same data sets per seed, same sizes
    and hyperparameters); ``fit`` runs NUTS (``config.nuts``) on `ppl_models.sbmf.numpyro_model` (the
    PyMC program's NumPyro twin, same sites; non-centred with ``config.nuts_noncentred``) with the
    sizes bound, compiled once for all simulations (every data set has ``n_obs`` cells), gated per
    simulation (its ``records``).

    Parameters
    ----------
    config : SBCConfig, default SBCConfig()
        Sizes, hyperparameters and the NUTS settings.
    log_path : str or pathlib.Path, optional
        Each simulation's gate record is also appended there as a JSON line. Keyword-only.

    Returns
    -------
    simulate : callable
        As `sbc_adapters`.
    fit : validation.checks.nuts_sbc.NutsSBCFit
        ``fit(obs, seed)`` returns the Gibbs adapter's layout: float64 ``mu``, ``tau`` (S,),
        ``alpha`` (S, I), ``beta`` (S, J), ``U`` (S, I, K), ``V`` (S, J, K), S = chains x samples.
    functionals : dict
        `sbmf_functionals` ().

    Raises
    ------
    None of its own.

    Source: project addition (SBC, Talts et al. 2018) on the model of ``004_90693a0965f06816.txt``,
    ch. 3.
    """
    import functools

    from validation.checks import nuts_sbc

    c = config
    simulate, _, functionals = sbc_adapters(c)
    from numpyro.handlers import reparam
    from numpyro.infer.reparam import LocScaleReparam

    model = functools.partial(ppl.numpyro_model, n_rows=c.n_rows, n_cols=c.n_cols, K=c.K, hyper=c.hyper)
    if c.nuts_noncentred:
        # the same program in non-centred coordinates (x = m + z / sqrt(s), z ~ N(0, 1)): the same
        # posterior of every site (x is kept as a deterministic site). Measured on the first 4
        # simulations of master seed 1: centred at target accept 0.95 diverges in all 4 (1-23
        # divergent transitions); non-centred at 0.95 still diverges (1-16) and mixes log tau
        # worse; centred at 0.99 (the default) has no divergences
        model = reparam(model, config={n: LocScaleReparam(centered=0) for n in _NONCENTRED})

    def model_args(obs):
        return (jnp.asarray(obs.rows, jnp.int32), jnp.asarray(obs.cols, jnp.int32), jnp.asarray(obs.values, jnp.float64))

    sites = ("mu", "alpha", "beta", "U", "V", "tau")
    fit = nuts_sbc.NutsSBCFit(model, model_args, lambda s: {n: s[n] for n in sites}, functionals, c.nuts,
                              log_path=log_path)
    return simulate, fit, functionals


# -- the registry's view of SBMF (`validation.checks.registry`) -------------------------------------------

# ------------------------------------------------------------------------------------------
# The bridge (`validation.checks.bridge`): each Gibbs block as a NumPyro CustomGibbs block beside NUTS
# on `ppl_models.sbmf.numpyro_model`, the program's NumPyro twin (equal to the PyMC program's log
# density at random points: tests/ppl_models/test_sbmf_numpyro.py)

# the bridge problem: 6 x 5, K = 2, 24 observed cells, 4 unobserved ones, NUTS target accept 0.99 (the centred
# hierarchy has funnels; at 20 cells and 0.95, 16 divergences); its reference "sbmf-bridge" is stored
BRIDGE_CONFIG = CrosscheckConfig(n_rows=6, n_cols=5, K=2, n_obs=24, n_unobserved=4, data_seed=3, target_accept=0.99)

_BRIDGE_BLOCKS = {
    "tau": ("tau",), "mu": ("mu",), "alpha": ("alpha",), "beta": ("beta",), "U": ("U",), "V": ("V",),
    "hyper_alpha": ("sigma_alpha", "mu_alpha"), "hyper_beta": ("sigma_beta", "mu_beta"),
    "hyper_u": ("sigma_u", "mu_u"), "hyper_v": ("sigma_v", "mu_v"),
}


def numpyro_block(block: str, obs: Observations, hyper):
    """The SBMF Gibbs block ``block`` as a ``gibbs_fn`` for `numpyro.infer.CustomGibbs`.

    Blocks (sites of `ppl_models.sbmf.numpyro_model`): "tau", "mu", "alpha", "beta" (one draw from
    `custom_inference.sbmf.tau_conditional`, `mu_conditional`, `alpha_conditional`,
    `beta_conditional`); "U", "V" (the K columns in turn from `u_conditional` / `v_conditional`, the
    residual cache recomputed between columns, as the sweep does incrementally); "hyper_alpha",
    "hyper_beta", "hyper_u", "hyper_v" (the normal-gamma pair: precision given the mean, then the
    mean given the new precision, `custom_inference.gaussian.sample_ng_precision` /
    `sample_ng_mean`, the helpers of the sampler's hyperparameter block).

    Parameters
    ----------
    block : str
        One of the block names above.
    obs : custom_inference.data.Observations
        N ratings.
    hyper : ppl_models.sbmf.SBMFHyper
        What the conditional is given.

    Returns
    -------
    callable
        ``gibbs_fn(rng_key, gibbs_sites, hmc_sites)`` -> ``{site: array}`` of the block's sites, of
        the sites' shapes (float64).

    Raises
    ------
    ValueError
        An unknown block.

    Source: ``004_90693a0965f06816.txt`` ch. 3, eqs. (3.14)-(3.17), Algorithm 2 (corrected); the
    NumPyro block is a project addition.
    """
    if block not in _BRIDGE_BLOCKS:
        raise ValueError(f"block must be one of {sorted(_BRIDGE_BLOCKS)}, got {block!r}")
    o = jax.tree_util.tree_map(jnp.asarray, obs)
    h = hyper

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        p = {**hmc_sites, **gibbs_sites}
        state = gibbs.State(**{f: jnp.asarray(p[f]) for f in gibbs.ALL_VARS}, e=jnp.zeros(o.values.shape))
        state = state._replace(e=gibbs.residuals(state, o))
        if block == "tau":
            shape, rate = gibbs.tau_conditional(state, o, h)
            return {"tau": jax.random.gamma(rng_key, shape) / rate}
        if block in ("mu", "alpha", "beta"):
            cond = {"mu": gibbs.mu_conditional, "alpha": gibbs.alpha_conditional, "beta": gibbs.beta_conditional}
            return {block: sample_normal_natural(rng_key, *cond[block](state, o, h))}
        if block in ("U", "V"):
            cond = gibbs.u_conditional if block == "U" else gibbs.v_conditional
            F = getattr(state, block)
            for k in range(F.shape[1]):
                F = F.at[:, k].set(sample_normal_natural(jax.random.fold_in(rng_key, k), *cond(state, o, h, k)))
                state = state._replace(**{block: F})
                state = state._replace(e=gibbs.residuals(state, o))
            return {block: F}
        x = {"hyper_alpha": state.alpha, "hyper_beta": state.beta, "hyper_u": state.U, "hyper_v": state.V}[block]
        s_name, m_name = _BRIDGE_BLOCKS[block]
        k_s, k_m = jax.random.split(rng_key)
        sigma = sample_ng_precision(k_s, x, p[m_name], h.mu0, h.nu0, h.alpha0, h.beta0, axis=0)
        return {s_name: sigma, m_name: sample_ng_mean(k_m, x, sigma, h.mu0, h.nu0, axis=0)}

    return gibbs_fn


def bridge_problem(config: CrosscheckConfig = BRIDGE_CONFIG):
    """The SBMF bridge problem (`validation.checks.bridge.Problem`) of ``config``.

    The NumPyro twin `ppl_models.sbmf.numpyro_model` on the simulated ratings, compared on the
    predicted means at the cells and tau (the groups of `nuts_reference`). The hybrid's NUTS block
    runs at target accept max(config's, 0.995) (at the reference's 0.99 every SBMF hybrid measured
    had 1-5 divergent transitions in 4 x 4000: its step size is adapted to a conditional that moves
    with every Gibbs draw, and the centred hierarchy has funnels).

    Parameters
    ----------
    config : CrosscheckConfig, default BRIDGE_CONFIG
        The problem (the default's PyMC NUTS reference "sbmf-bridge" is stored).

    Returns
    -------
    validation.checks.bridge.Problem
        Its ``reference`` loads the stored reference when called.

    Raises
    ------
    ValueError
        Bad sizes or hyper in ``config`` (`ppl_models.sbmf.simulate`); later, when its reference is
        asked for, if no stored reference matches.

    Source: project addition.
    """
    from validation.checks import bridge

    c = config
    _, obs, cells = crosscheck_data(c)
    return bridge.Problem(
        model=ppl.numpyro_model,
        args=(np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values, np.float64), c.n_rows, c.n_cols, c.K,
              c.hyper),
        data=obs, hyper=c.hyper, quantities=lambda idata: _quantities(arviz_io.group_arrays(idata), cells),
        reference=lambda: nuts_reference(c, reference="stored"), target_accept=max(c.target_accept, 0.995),
        description=f"{c.n_rows} x {c.n_cols}, {c.n_obs} observed cells, K = {c.K} (data seed {c.data_seed})")


def _bridge_spec():
    import functools

    from validation.checks import bridge

    # default: U. At 4 chains x (500 warm-up + 1000 draws), seed 1, every SBMF block tried is inconclusive on
    # tau (U, hyper_u, hyper_v: hybrid R-hat 1.012, bulk ESS 239-390; tau: R-hat 1.0125, ESS 218), so SBMF's
    # bridge runs at the spec's length, under -m slow only (tests/validation/test_bridge.py)
    return bridge.BridgeSpec(
        problem=bridge_problem,
        blocks={b: bridge.Block(s, functools.partial(numpyro_block, b)) for b, s in _BRIDGE_BLOCKS.items()},
        default="U", wrong_hyper=lambda h: h._replace(beta0=4.0 * h.beta0), wrong_block="hyper_u")


BRIDGE = _bridge_spec()


def ratings_runner(split, K: int, run):
    """SBMF on protocol P2 (`validation.evaluation.ratings_eval`).

    One chain of ``warmup`` + ``samples`` sweeps (``run.settings``) of `custom_inference.sbmf.sample`
    (default hyperparameters), the posterior-mean prediction of each kept sample at the test
    ratings, averaged as the samples come (eq. 3.18).

    Parameters
    ----------
    split : validation.data.splits.RatingsSplit
        The P2 split (train / test Observations).
    K : int
        The rank.
    run : validation.evaluation.ratings_eval.RatingsRun
        The evaluation's run (config with ``dtype``; settings ``warmup``, ``samples``, declared in
        `SPEC`; key, progress, ``gibbs_curve``).

    Returns
    -------
    tuple
        ``run.gibbs_curve``'s tuple: iterations (n,), seconds (n,), RMSE of the running average
        (n,), seconds per sweep, final prediction (M,) float64.

    Raises
    ------
    ValueError, TypeError
        What `custom_inference.sbmf.sample` raises (bad K, data or keys).

    Source: ``004_90693a0965f06816.txt`` ch. 3, eq. 3.18 (fig. 3.2's curve).
    """
    cfg, s = run.config, run.settings
    dtype = np.dtype(cfg.dtype)
    test = split.test
    idata = gibbs.sample(run.key, split.train.astype(dtype), K, ppl.SBMFHyper(), num_chains=1,
                         num_warmup=s["warmup"], num_samples=s["samples"], progress=run.progress,
                         keep=("tau", "pred"), predict_at=(np.asarray(test.rows), np.asarray(test.cols)), dtype=dtype)
    post = arviz_io.group_arrays(idata)
    per_sweep = float(idata.posterior.attrs["seconds_per_sweep"])
    return run.gibbs_curve(post["pred"][0], np.asarray(test.values, float),
                           int(idata.posterior.attrs["num_warmup_run"]), per_sweep)


SPEC = registry.ModelSpec(
    name="sbmf",
    solvers=(registry.SolverSpec("gibbs", "exact", run_crosscheck, CrosscheckConfig, "sbmf",
                                 registry.lazy("custom_inference.sbmf:ALGORITHM"), frontdoor="sbmf",
                                 # one chain: 50 + 150 is the myFM comparison's 200 sweeps with the last 150 averaged
                                 evaluations={"ratings": registry.EvaluationEntry(
                                     registry.lazy("validation.models.sbmf:ratings_runner"), data="split",
                                     setting=registry.lazy("validation.models.fm_eval:gibbs_setting", "SBMF"),
                                     defaults={"warmup": 50, "samples": 150}, flags={"warmup": "warmup", "samples": "samples"})}),),
    references=(registry.ReferenceSpec("sbmf", nuts_reference, CrosscheckConfig),
                registry.ReferenceSpec("sbmf-bridge", nuts_reference, BRIDGE_CONFIG)),
    checks={"conditionals": conditional_checks, "gauge": gauge_check, "cache": cache_check},
    sbc={"gibbs": sbc_adapters, "nuts": nuts_sbc_adapters},
    sbc_config=SBCConfig,
    errata=(ERRATA,),
    bridge=registry.lazy("validation.models.sbmf:BRIDGE"),
    notebook="notebooks/gaussian_factorization.py",
)
