"""NPFM / PPFM (thesis ch. 5.3.2): the printed Gamma conditionals (eqs. 5.8-5.15) against the augmented
log joint normalized on a grid, and the latent-count allocation (eq. 5.7) against enumeration.

The reference log joint is written here from the generative statements of sec. 5.3.1-5.3.2 only (SciPy's
``gammaln`` / ``xlogy``, no project code): z_1n ~ Pois(w_0), z_2ni ~ Pois(x_ni w_i), z_3nijk ~
Pois(x_ni x_nj r_k v_ik v_jk) for i < j, w_0 ~ Gamma(alpha_0, 1/beta_0), w_i ~ Gamma(alpha_i, 1/beta_i),
v_ik ~ Gamma(zeta_i, 1/delta_k), r_k ~ Gamma(gamma_0/K, 1/c) (NPFM; PPFM has r_k = 1 and no c), and the
Gamma hyperpriors of beta_0, beta_i, delta_k, c (second argument a scale, as the thesis writes it).
For each site one scalar moves along a grid; the exponentiated log joint is integrated by Simpson's rule
to a mean and a variance, which the printed Gamma(shape, scale) must reproduce: |mean - grid mean| /
grid sd and |var / grid var - 1| below `MOMENT_TOL`. The grid is in u = log x (2,001 points from 45 /
shape + 5 below log of the mean to 25 sd + 45 scales above the mean), where the density is smooth for every shape,
also below 1; the log density at both ends is <= -30 below its maximum. Eq. 5.10 is also evaluated with z_3.ik summed over every pair that contains i (the
correction of the errata row "ch. 5.3.2, eq. 5.10"), so the printed and the corrected forms stand side
by side.

Eq. 5.7: on a tiny case (one row, D = 3 features, K = 2, y = 3: 10 Poisson terms, 220 allocations) the
exact conditional p(z | y, theta), the normalized product of the ten Poisson pmfs over all allocations
with sum y, is enumerated and compared with the printed multinomial's pmf (total variation).

Source: ``004_90693a0965f06816.txt`` ch. 5.3.1-5.3.3, eqs. 5.6-5.15, 5.20 and Lemma 5.2.2; check: project
addition (issue 26 item 1).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy.special import gammaln, xlogy

from validation.models.printed_forms import normalized_moments

__all__ = ["MOMENT_TOL", "SITES", "small_problem", "log_joint", "printed_gamma", "gamma_checks",
           "allocation_enumeration"]

#: agreement with the grid (standardized mean error and relative variance error; module docstring)
MOMENT_TOL = 1e-6
_N_GRID = 2001

#: (equation, site, index) of every Gamma conditional checked; feature 1 sits in pairs on both sides
SITES = (
    ("5.8", "w0", None), ("5.9", "w", (1,)), ("5.10", "V", (1, 0)), ("5.11", "r", (0,)),
    ("5.12", "beta0", None), ("5.13", "beta", (1,)), ("5.14", "delta", (0,)), ("5.15", "c", None),
)
_HYPER = dict(c0=1.5, d0=0.8, ci=1.3, di=0.9, gk=2.0, hk=1.4, g0=1.7, h0=0.6)


def _pairs(D):
    return [(i, j) for i in range(D) for j in range(i + 1, D)]


def small_problem(variant: str = "npfm", seed: int = 0, N: int = 6, D: int = 4, K: int = 2) -> dict:
    """A random state and its latent counts drawn from the augmented generative model (NumPy).

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        NPFM (gamma-process weights r_k) or PPFM (r_k = 1).
    seed : int, default 0
        NumPy seed.
    N : int, default 6
        Rows.
    D : int, default 4
        Features.
    K : int, default 2
        Latent dimension.

    Returns
    -------
    dict
        X (N, D) float64 in [0.3, 1.5]; w0, beta0, alpha0, gamma0, c (floats); w, beta, alpha, zeta (D,)
        float64; V (D, K) float64 (a Gamma draw + 0.2); r, delta (K,) float64 (r a Gamma draw + 0.3 for
        "npfm", ones for "ppfm"); z1 (N,), z2 (N, D), z3 (N, D, D, K) int (z3 only for i < j, 0 elsewhere);
        variant (str).

    Raises
    ------
    ValueError
        Unless ``variant`` is "npfm" or "ppfm".

    Source: ``004_90693a0965f06816.txt`` eqs. 5.6, 5.20 and the z_n of sec. 5.3.2; project addition.
    """
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    rng = np.random.default_rng(seed)
    p = dict(variant=variant, X=rng.uniform(0.3, 1.5, (N, D)))
    p.update(alpha0=1.2, beta0=rng.gamma(2, 0.5), gamma0=1.8, c=rng.gamma(2, 0.5),
             alpha=rng.gamma(2, 0.5, D), beta=rng.gamma(2, 0.5, D), zeta=rng.gamma(3, 0.4, D),
             delta=rng.gamma(2, 0.5, K))
    p["w0"] = rng.gamma(p["alpha0"], 1 / p["beta0"])
    p["w"] = rng.gamma(p["alpha"], 1 / p["beta"])
    p["V"] = rng.gamma(p["zeta"][:, None], 1 / p["delta"][None, :], (D, K)) + 0.2
    p["r"] = rng.gamma(p["gamma0"] / K, 1 / p["c"], K) + 0.3 if variant == "npfm" else np.ones(K)
    X = p["X"]
    p["z1"] = rng.poisson(p["w0"], N)
    p["z2"] = rng.poisson(X * p["w"])
    z3 = np.zeros((N, D, D, K), int)
    for i, j in _pairs(D):
        z3[:, i, j, :] = rng.poisson(X[:, i, None] * X[:, j, None] * p["r"] * p["V"][i] * p["V"][j])
    p["z3"] = z3
    return p


def _lgamma_pdf(x, shape, scale):
    return xlogy(shape - 1, x) - x / scale - gammaln(shape) - shape * np.log(scale)


def log_joint(p: dict) -> float:
    """log p(z, theta) of the augmented model (module docstring), float64, all constants included.

    Parameters
    ----------
    p : dict
        A state as `small_problem` returns (X, V, r, w0, w, z1, z2, z3, the Gamma parameters, variant).

    Returns
    -------
    float
        The log joint, in nats.

    Raises
    ------
    KeyError
        For a missing name in ``p``.

    Source: ``004_90693a0965f06816.txt`` sec. 5.3.1-5.3.2 (generative statements); project addition.
    """
    X, V, r = p["X"], p["V"], p["r"]
    D, K = V.shape

    def pois(z, lam):
        return np.sum(xlogy(z, lam) - lam - gammaln(z + 1.0))

    lp = pois(p["z1"], p["w0"]) + pois(p["z2"], X * p["w"])
    for i, j in _pairs(D):
        lp += pois(p["z3"][:, i, j, :], X[:, i, None] * X[:, j, None] * r * V[i] * V[j])
    h = _HYPER
    lp += _lgamma_pdf(p["w0"], p["alpha0"], 1 / p["beta0"]) + np.sum(_lgamma_pdf(p["w"], p["alpha"], 1 / p["beta"]))
    lp += np.sum(_lgamma_pdf(V, p["zeta"][:, None], 1 / p["delta"][None, :]))
    lp += _lgamma_pdf(p["beta0"], h["c0"], 1 / h["d0"]) + np.sum(_lgamma_pdf(p["beta"], h["ci"], 1 / h["di"]))
    lp += np.sum(_lgamma_pdf(p["delta"], h["gk"], 1 / h["hk"]))
    if p["variant"] == "npfm":
        lp += np.sum(_lgamma_pdf(r, p["gamma0"] / K, 1 / p["c"])) + _lgamma_pdf(p["c"], h["g0"], 1 / h["h0"])
    return float(lp)


def printed_gamma(eq: str, p: dict, index=None, *, corrected: bool = False) -> tuple[float, float]:
    """(shape, scale) of the printed Gamma conditional ``eq`` at ``index``.

    Parameters
    ----------
    eq : str
        "5.8" ... "5.15", the first column of `SITES`.
    p : dict
        A state as `small_problem` returns.
    index : tuple of int or None, default None
        The site's index: (i,) for w (5.9) and beta (5.13), (i, k) for V (5.10), (k,) for r (5.11) and
        delta (5.14); None for the scalars.
    corrected : bool, keyword-only, default False
        Changes only eq. 5.10: z_3.ik summed over every pair containing i (the errata's correction), not
        only the pairs (i, j) with i < j.

    Returns
    -------
    tuple of float
        (shape, scale) of the Gamma conditional.

    Raises
    ------
    ValueError
        For an ``eq`` not in `SITES`.

    Source: ``004_90693a0965f06816.txt`` eqs. 5.8-5.15.
    """
    X, V, r, z3 = p["X"], p["V"], p["r"], p["z3"]
    N, D = X.shape
    K = V.shape[1]
    h = _HYPER
    if eq == "5.8":
        return p["alpha0"] + p["z1"].sum(), 1 / (p["beta0"] + N)
    if eq == "5.9":
        i = index[0]
        return p["alpha"][i] + p["z2"][:, i].sum(), 1 / (p["beta"][i] + X[:, i].sum())
    if eq == "5.10":
        i, k = index
        upper = z3[:, i, i + 1:, k].sum()                       # printed: (i, j) with i < j
        z = upper + z3[:, :i, i, k].sum() if corrected else upper
        others = X @ V[:, k] - X[:, i] * V[i, k]                # sum_{j != i} x_nj v_jk
        return p["zeta"][i] + z, 1 / (p["delta"][k] + np.sum(r[k] * X[:, i] * others))
    if eq == "5.11":
        k = index[0]
        s = sum(np.sum(X[:, i] * X[:, j]) * V[i, k] * V[j, k] for i, j in _pairs(D))
        return p["gamma0"] / K + z3[..., k].sum(), 1 / (p["c"] + s)
    if eq == "5.12":
        return h["c0"] + p["alpha0"], 1 / (h["d0"] + p["w0"])
    if eq == "5.13":
        i = index[0]
        return h["ci"] + p["alpha"][i], 1 / (h["di"] + p["w"][i])
    if eq == "5.14":
        k = index[0]
        return h["gk"] + p["zeta"].sum(), 1 / (h["hk"] + V[:, k].sum())
    if eq == "5.15":
        return p["gamma0"] + h["g0"], 1 / (h["h0"] + r.sum())
    raise ValueError(f"eq must be one of {[s[0] for s in SITES]}, got {eq!r}")


def _grid_moments(p, site, index, u_lo, u_hi):
    """Mean, variance and edge of the conditional of one positive scalar, normalized on a grid of
    u = log x (`validation.models.printed_forms.normalized_moments`)."""
    q = {k: (np.array(v, np.float64, copy=True) if isinstance(v, np.ndarray) else v) for k, v in p.items()}

    def logf(grid):
        out = np.empty(len(grid))
        for n, x in enumerate(grid):
            if index is None:
                q[site] = float(x)
            else:
                q[site][index] = x
            out[n] = log_joint(q)
        return out

    return normalized_moments(logf, u_lo, u_hi, _N_GRID, log_x=True)


def gamma_checks(variant: str = "npfm", *, seeds=(0, 1)) -> pd.DataFrame:
    """Every printed Gamma conditional of `SITES` against the grid normalization of `log_joint`.

    At the random states of `small_problem` (one per seed); PPFM without 5.11 and 5.15 (no r, no c). The
    printed and the corrected form (they differ in eq. 5.10 only) are both compared with the same grid.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    seeds : iterable of int, keyword-only, default (0, 1)
        Seeds of `small_problem`.

    Returns
    -------
    pandas.DataFrame
        One row per seed, equation and form: variant, seed, eq, site, form ("printed" / "corrected"),
        shape, mean_err (|mean - grid mean| / grid sd), var_err (|var / grid var - 1|), edge (log density
        at the grid's ends minus its maximum), agrees (both errors < `MOMENT_TOL`).

    Raises
    ------
    ValueError
        For another ``variant`` (from `small_problem`).

    Source: project addition (checks ``004_90693a0965f06816.txt`` eqs. 5.8-5.15).
    """
    out = []
    for seed in seeds:
        p = small_problem(variant, seed)
        for eq, site, index in SITES:
            if variant == "ppfm" and site in ("r", "c"):
                continue
            forms = {f: printed_gamma(eq, p, index, corrected=f == "corrected") for f in ("printed", "corrected")}
            mv = {f: (a * s, a * s * s) for f, (a, s) in forms.items()}
            # in u = log x the density falls like exp(shape u) to the left: 45 / shape nats below the mean
            a_min = min(a for a, _ in forms.values())
            u_lo = np.log(min(m for m, _ in mv.values())) - 5.0 - 45.0 / a_min
            u_hi = np.log(max(m + 25 * np.sqrt(v) + 45 * sc for (m, v), (_, sc) in zip(mv.values(), forms.values())))
            gm, gv, edge = _grid_moments(p, site, index, u_lo, u_hi)
            for f, (m, v) in mv.items():
                me, ve = abs(m - gm) / np.sqrt(gv), abs(v / gv - 1)
                out.append(dict(variant=variant, seed=seed, eq=eq, site=site, form=f, shape=forms[f][0],
                                mean_err=me, var_err=ve, edge=edge,
                                agrees=bool(me < MOMENT_TOL and ve < MOMENT_TOL)))
    return pd.DataFrame(out)


def allocation_enumeration(*, y: int = 3, seed: int = 0, form: str = "printed") -> float:
    """Total variation between eq. 5.7's multinomial and the exact conditional of the latent counts.

    Enumerated over every allocation of ``y`` units to the 10 Poisson terms of one row (D = 3, K = 2;
    random x, w0, w, V, r from ``seed``).

    Parameters
    ----------
    y : int >= 1, keyword-only, default 3
        The row's count.
    seed : int, keyword-only, default 0
        NumPy seed of the rates.
    form : {"printed", "all pairs"}, keyword-only, default "printed"
        "printed": rates w_0, x_i w_i, x_i x_j r_k v_ik v_jk for i < j, as eq. 5.7; "all pairs": a slip
        that counts every ordered pair i != j, which the check must reject.

    Returns
    -------
    float
        The TV distance (float64 rounding, ~1e-16, for a correct form).

    Raises
    ------
    ValueError
        For another ``form`` or ``y`` < 1.

    Source: ``004_90693a0965f06816.txt`` eq. 5.7, Lemma 5.2.2; check: project addition.
    """
    if form not in ("printed", "all pairs"):
        raise ValueError(f"form must be 'printed' or 'all pairs', got {form!r}")
    if y < 1:
        raise ValueError(f"y must be >= 1, got {y!r}")
    rng = np.random.default_rng(seed)
    D, K = 3, 2
    x, w0, w = rng.uniform(0.3, 1.5, D), rng.gamma(2, 0.5), rng.gamma(2, 0.5, D)
    V, r = rng.gamma(2, 0.5, (D, K)), rng.gamma(2, 0.5, K)
    true_rates = np.array([w0, *(x * w)] + [x[i] * x[j] * r[k] * V[i, k] * V[j, k]
                                             for k in range(K) for i, j in _pairs(D)])
    C = true_rates.size
    allocs = np.array([np.bincount(c, minlength=C) for c in itertools.combinations_with_replacement(range(C), y)],
                      float)                                  # every allocation of y units, once each
    logp = np.sum(xlogy(allocs, true_rates) - true_rates - gammaln(allocs + 1), axis=1)
    exact = np.exp(logp - logp.max())
    exact /= exact.sum()
    probs = true_rates.copy()
    if form == "all pairs":
        probs[1 + D:] *= 2.0                                 # i < j and j < i both counted
    probs /= probs.sum()
    mult = np.exp(gammaln(y + 1) - gammaln(allocs + 1).sum(1) + xlogy(allocs, probs).sum(1))
    return float(0.5 * np.abs(mult - exact).sum())
