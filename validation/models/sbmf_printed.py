"""SBMF (thesis ch. 3, Algorithm 2): every scalar conditional as printed, against the program's log joint
normalized numerically on a grid.

For each line of Algorithm 2 that draws a scalar, the printed parameters are transcribed here literally
(in NumPy, from the state, with e_ij = r_ij - mu - alpha_i - beta_j - u_i^T v_j) and turned into the
printed distribution's mean and variance: N(mu*, sigma*) has variance sigma* = (precision)^-1 as the
algorithm writes it; Gamma(alpha*, beta*) is read shape / rate as eq. 3.8 (mean alpha*/beta*, variance
alpha*/beta*^2). The reference is independent of every derivation: the log joint of the program
(`ppl_models.sbmf.log_joint`, eq. 3.13, tested equal to the PyMC program's logp) with that one scalar
moved along a grid, exponentiated and integrated by Simpson's rule to a mean and a variance. Each line is
also evaluated in its corrected form (rates with their squares, shape alpha0), so every row shows the
printed and the corrected form side by side.

A form agrees when |mean - grid mean| / grid sd and |variance / grid variance - 1| are both below
`MOMENT_TOL`: the grid spans >= 12 sd of every candidate (20 sd above a Gamma's mean) on 1,501 points, where Simpson's rule on these
smooth densities errs by < 1e-8 (measured: correct forms within 1.4e-9); a wrong term moves either
number by O(0.01-1).

Source: ``004_90693a0965f06816.txt`` ch. 3, eq. 3.13 and Algorithm 2 lines 2-5, 7-10, 12, 14, 19, 25,
31, 36; check: project addition (issue 26 item 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ppl_models import sbmf as ppl
from validation.models.printed_forms import normalized_moments
from validation.models.sbmf import CHECK_HYPER, log_joint_along

__all__ = ["LINES", "MOMENT_TOL", "printed_moments", "grid_moments", "checks"]

#: agreement of a form with the grid: standardized mean error and relative variance error (module docstring)
MOMENT_TOL = 1e-6
_N_GRID = 1501

#: (line, site, index, kind, printed form is an erratum?) for every scalar draw of Algorithm 2; k = 1, i = 2, j = 3
LINES = (
    ("2", "sigma_alpha", None, "gamma", True),
    ("3", "mu_alpha", None, "normal", False),
    ("4", "sigma_beta", None, "gamma", True),
    ("5", "mu_beta", None, "normal", False),
    ("7", "sigma_u", (1,), "gamma", True),
    ("8", "mu_u", (1,), "normal", False),
    ("9", "sigma_v", (1,), "gamma", True),
    ("10", "mu_v", (1,), "normal", False),
    ("12", "tau", None, "gamma", False),
    ("14", "mu", None, "normal", False),
    ("19", "alpha", (2,), "normal", False),
    ("25", "U", (2, 1), "normal", False),
    ("31", "beta", (3,), "normal", False),
    ("36", "V", (3, 1), "normal", False),
)


def _residuals(p, rows, cols, values):
    return values - ppl.predicted_mean(p, rows, cols)


def printed_moments(site: str, index, params, rows, cols, values, hyper=CHECK_HYPER, *,
                    corrected: bool = False) -> tuple[float, float]:
    """(mean, variance) of Algorithm 2's conditional of ``site`` at ``index`` as printed, or corrected.

    The printed parameters are transcribed literally (NumPy, from the state, with
    e_ij = r_ij - mu - alpha_i - beta_j - u_i^T v_j); N(mu*, sigma*) is read with variance sigma*,
    Gamma(alpha*, beta*) as shape / rate (eq. 3.8).

    Parameters
    ----------
    site : str
        A site of `LINES` (its second column), e.g. "sigma_u", "mu", "U".
    index : tuple of int or None
        None for a scalar site; (k,) for sigma_u, mu_u, sigma_v, mu_v; (i,) for alpha, beta; (i, k) for
        U and V.
    params : dict
        The program's variables, float64 numpy, named as `ppl_models.sbmf.simulate` returns them.
    rows, cols : numpy.ndarray, shape (N,), int
        Row and column index of each observed cell.
    values : numpy.ndarray, shape (N,), float
        The ratings r_ij.
    hyper : ppl_models.sbmf.SBMFHyper, default `validation.models.sbmf.CHECK_HYPER`
        The hyperparameters.
    corrected : bool, keyword-only, default False
        The corrected form of lines 2, 4, 7, 9 (squares in the rates, alpha0 as the shape's base for
        lines 4 and 9); the other lines are the same in both forms.

    Returns
    -------
    tuple of float
        (mean, variance) of the conditional.

    Raises
    ------
    ValueError
        For a site that no line of Algorithm 2 draws.

    Source: ``004_90693a0965f06816.txt`` Algorithm 2 (lines of `LINES`).
    """
    if site not in {line[1] for line in LINES}:
        raise ValueError(f"site must be one of {[line[1] for line in LINES]}, got {site!r}")
    h, p = hyper, params
    e = _residuals(p, rows, cols, values)
    sq = (lambda x: x**2) if corrected else (lambda x: x)

    def gamma(shape, rate):
        return shape / rate, shape / rate**2

    def normal(var, mean):
        return mean, var

    if site in ("sigma_alpha", "sigma_beta", "sigma_u", "sigma_v"):
        x, m = {"sigma_alpha": ("alpha", "mu_alpha"), "sigma_beta": ("beta", "mu_beta"),
                "sigma_u": ("U", "mu_u"), "sigma_v": ("V", "mu_v")}[site]
        k = None if index is None else index[0]
        xs = p[x] if k is None else p[x][:, k]
        mk = p[m] if k is None else p[m][k]
        n = xs.shape[0]
        base = h.alpha0 if (corrected or site in ("sigma_alpha", "sigma_u")) else h.beta0   # lines 4, 9: beta0
        return gamma(base + 0.5 * (n + 1), h.beta0 + 0.5 * (h.nu0 * (mk - h.mu0) ** 2 + np.sum(sq(xs - mk))))
    if site in ("mu_alpha", "mu_beta", "mu_u", "mu_v"):
        x, s = {"mu_alpha": ("alpha", "sigma_alpha"), "mu_beta": ("beta", "sigma_beta"),
                "mu_u": ("U", "sigma_u"), "mu_v": ("V", "sigma_v")}[site]
        k = None if index is None else index[0]
        xs = p[x] if k is None else p[x][:, k]
        sk = p[s] if k is None else p[s][k]
        var = 1.0 / (h.nu0 * sk + sk * xs.shape[0])
        return normal(var, var * (h.nu0 * sk * h.mu0 + sk * np.sum(xs)))
    tau = p["tau"]
    if site == "tau":
        return gamma(h.a0 + 0.5 * len(values), h.b0 + 0.5 * np.sum(e**2))
    if site == "mu":
        var = 1.0 / (h.sigma_g + tau * len(values))
        return normal(var, var * (h.sigma_g * h.mu_g + tau * np.sum(e + p["mu"])))
    if site in ("alpha", "beta"):
        own = rows if site == "alpha" else cols
        i = index[0]
        sel = own == i
        s, m = (p["sigma_alpha"], p["mu_alpha"]) if site == "alpha" else (p["sigma_beta"], p["mu_beta"])
        var = 1.0 / (s + tau * sel.sum())
        return normal(var, var * (s * m + tau * np.sum(e[sel] + p[site][i])))
    if site in ("U", "V"):
        i, k = index
        own, other_ids = (rows, cols) if site == "U" else (cols, rows)
        other = p["V"] if site == "U" else p["U"]
        s, m = (p["sigma_u"][k], p["mu_u"][k]) if site == "U" else (p["sigma_v"][k], p["mu_v"][k])
        sel = own == i
        o = other[other_ids[sel], k]
        var = 1.0 / (s + tau * np.sum(o**2))
        return normal(var, var * (s * m + tau * np.sum(o * (e[sel] + p[site][i, k] * o))))
    raise ValueError(f"site must be one of {[line[1] for line in LINES]}, got {site!r}")


def grid_moments(site: str, index, params, rows, cols, values, lo: float, hi: float, hyper=CHECK_HYPER,
                 n_grid: int = _N_GRID) -> tuple[float, float, float]:
    """(mean, variance, edge) of the conditional of one scalar by normalizing the program's log joint on a grid.

    ``n_grid`` points of [lo, hi] (`validation.models.printed_forms.normalized_moments`, Simpson's rule in
    x; the log joint `validation.models.sbmf.log_joint_along`, eq. 3.13).

    Parameters
    ----------
    site, index, params, rows, cols, values, hyper
        As `printed_moments`.
    lo, hi : float
        The grid's ends (``lo`` < ``hi``), in the site's units.
    n_grid : int, default 1501
        Odd, >= 3.

    Returns
    -------
    tuple of float
        (mean, variance, edge); ``edge`` <= -30 means the grid holds the mass.

    Raises
    ------
    ValueError
        Unless ``lo`` < ``hi`` and ``n_grid`` >= 3 is odd (from `normalized_moments`).

    Source: ``004_90693a0965f06816.txt`` eq. 3.13; project addition.
    """
    def logf(grid):
        return log_joint_along(params, rows, cols, values, hyper, site, index, grid)

    return normalized_moments(logf, lo, hi, n_grid)


def checks(*, seeds=(0, 1, 2), hyper=CHECK_HYPER) -> pd.DataFrame:
    """Every line of `LINES` at random states, printed and corrected forms against `grid_moments`.

    States: prior draws (`ppl_models.sbmf.simulate`, I = 6, J = 5, K = 2, 20 cells; one per seed). The grid
    spans 12 sd of both forms below and 12 (Gamma: 20) sd above, clipped at 1e-12 for Gamma sites.

    Parameters
    ----------
    seeds : iterable of int, keyword-only, default (0, 1, 2)
        Seeds of the states.
    hyper : ppl_models.sbmf.SBMFHyper, keyword-only, default `validation.models.sbmf.CHECK_HYPER`
        The hyperparameters.

    Returns
    -------
    pandas.DataFrame
        One row per seed, line and form: seed, line, site, form ("printed" / "corrected"), mean_err
        (|mean - grid mean| / grid sd), var_err (|var / grid var - 1|), edge, agrees (both errors
        < `MOMENT_TOL`), erratum (the printed form is listed as an erratum).

    Raises
    ------
    None of its own.

    Source: project addition (checks ``004_90693a0965f06816.txt`` Algorithm 2).
    """
    out = []
    for seed in seeds:
        truth, rows, cols, values = ppl.simulate(seed, 6, 5, 2, hyper, n_obs=20)
        for line, site, index, kind, erratum in LINES:
            forms = {f: printed_moments(site, index, truth, rows, cols, values, hyper, corrected=f == "corrected")
                     for f in ("printed", "corrected")}
            lo = min(m - 12 * np.sqrt(v) for m, v in forms.values())
            hi = max(m + (20 if kind == "gamma" else 12) * np.sqrt(v) for m, v in forms.values())
            if kind == "gamma":   # right-skewed: a longer upper tail; the density is 0 at 0
                lo = max(lo, 1e-12)
            gm, gv, edge = grid_moments(site, index, truth, rows, cols, values, lo, hi, hyper)
            for form, (m, v) in forms.items():
                me, ve = abs(m - gm) / np.sqrt(gv), abs(v / gv - 1)
                out.append(dict(seed=seed, line=line, site=site, form=form, mean_err=me, var_err=ve, edge=edge,
                                agrees=bool(me < MOMENT_TOL and ve < MOMENT_TOL), erratum=erratum))
    return pd.DataFrame(out)
