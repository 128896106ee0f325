r"""Why VSBC rejects VBFM / OVBFM's noise precision alpha and RG's prior precisions: the mean-field bias,
derived in closed form on conjugate cases, checked against the solvers, and measured simulation by
simulation on the VSBC data sets (issue 26, item 2).

VSBC (`validation.checks.vi_evidence.run_vsbc`) computes p_s = Pr_q(f < f(theta*_s)) for simulations
theta*_s from the prior. Given the data y_s, theta*_s is a draw from the exact posterior p(. | y_s), so the
expected p of simulation s is ``E_{theta ~ p(.|y_s)}[F_q(f(theta))]`` (F_q: q's CDF of f). Whenever the
exact posterior of f is known (by quadrature or from an exact sampler), this gives a *predicted* p per
simulation; averaged over simulations it must match the *measured* mean p within Monte Carlo error if the
VSBC failure is q's bias relative to the exact posterior (and not, for example, a simulation that does not
follow the program). Two conjugate families give the bias in closed form:

**A. Noise precision (VBFM's alpha).** y = X w + e, w_l ~ N(0, 1/lambda_l), e ~ N(0, I/alpha),
alpha ~ Gamma(a0, b0) (shape, rate). The fully factorized q(alpha) prod_l q(w_l) (VBFM's family: one
Gaussian per coefficient) has, at a given E_q[alpha] = e, the coordinate-ascent fixed point

    (e X^T X + Lambda) m = e X^T y,    s_l = 1 / (lambda_l + e d_l),    d_l = (X^T X)_ll,
    q(alpha) = Gamma(a0 + N/2, b0 + (||y - X m||^2 + sum_l d_l s_l) / 2),

so the fixed point is the root of the scalar equation e = (a0 + N/2) / rate(e) (`linear_meanfield`,
by Brent's method on a log grid; every root is returned). The exact posterior of alpha is 1-D:
p(alpha | y) ~ Gamma(alpha; a0, b0) N(y; 0, X Lambda^-1 X^T + I / alpha) (`linear_alpha_posterior`,
quadrature on a log grid). Direction: with P = e X^T X + Lambda the factorized "degrees of freedom"
e sum_l d_l s_l = D - sum_l lambda_l / P_ll exceed the exact e tr(X^T X P^-1) = D - tr(Lambda P^-1),
because (P^-1)_ll >= 1 / P_ll; q counts every coefficient's variance as if the data did not pin the
coefficients jointly (one-hot user, item and intercept columns are pinned only in combination), so
E_q[alpha] falls below the posterior mean. In the factorization machine the interaction weights V add a
second, larger mean-field effect: q(V) shrinks (VB's zero-forcing of weakly identified directions), the
unfitted interactions enter E_q[||y - yhat||^2], and q(alpha) = Gamma(a0 + N/2, b0 + E_q||y - yhat||^2/2)
takes them for noise. Measured by `fm_alpha_study` against an exact Gibbs sampler of the same program
(`fixed_precision_gibbs`, MCMC-FM's conditionals with the prior precisions held fixed).

**B. Prior precision (RG's tau_u, tau_v, tau_bv).** x_m ~ N(0, I_K / tau) (m = 1..M), tau ~ Gamma(a0, b0),
and a Gaussian pseudo-likelihood exp(c_m^T x_m - x_m^T A_m x_m / 2) per block (what RG's
Jaakkola-Jordan bound makes of the logistic likelihood given xi and the other factors:
A_m = sum_e 2 lam(xi_e) E[v v^T], c_m = sum_e (g_e - 1/2 - 2 lam(xi_e) E[b_e]) E[v], and for the biases
A_n = sum_e 2 lam(xi_e), c_n = sum_e (g_e - 1/2 - 2 lam(xi_e) E[u.v]_e)). RG's q(x_m) is diagonal
within the block; at E_q[tau] = e its fixed point is

    mean_m = (A_m + e I)^-1 c_m,   var_mk = 1 / ((A_m)_kk + e),
    q(tau) = Gamma(a0 + M K / 2, b0 + sum_m (||mean_m||^2 + sum_k var_mk) / 2)

(`precision_meanfield`), and the exact posterior of tau under the same pseudo-likelihood is
p(tau) ~ Gamma(tau; a0, b0) prod_m tau^{K/2} |A_m + tau I|^{-1/2} exp(c_m^T (A_m + tau I)^-1 c_m / 2)
(`precision_posterior`). Direction: two Jensen effects of opposite sign (q plugs E_q[tau] into
E[x^2 | tau], convex and decreasing in tau, and E_q[tau] = shape / E_q[rate] where the exact mean averages
shape / rate); on RG's VSBC problem they leave q 4-6% *below* the block's exact posterior (predicted p
0.51), so the factorization of tau from its own block does not explain RG's rejections.
`rg_fixed_point_check` rebuilds these pseudo-likelihoods from an RG state with its own xi and lam(xi) and
checks that the solver's q(u), q(v), q(b) and q(tau) are their fixed points; `rg_tau_study` predicts the
VSBC p of each simulation from the exact tau posterior of the pseudo-likelihood.

**What does explain RG: the collapse of the factors (VB pruning).** u_m . v_n enters the likelihood only
as a product; at u = v = 0 every c_m above is 0, so mean(u) = mean(v) = 0 is a fixed point of the
mean-field updates for every data set, and it attracts the fit whenever the interaction signal is weak
(the thresholding of variational Bayesian matrix factorization: Nakajima and Sugiyama 2011, JMLR 12). There
q(tau_u) = Gamma(a0 + I K / 2, b0 + sum_mk 1 / (2 ((A_m)_kk + e))) does not depend on the outcomes: its mean
is ~2.4 on RG's VSBC problem with shape 12 (tau_u) or 14 (tau_v), while the exact posterior of tau_u stays
close to the prior Gamma(2, 2) (mean 1, the interactions being weakly identified). Predicted p there:
E_prior[F_q(tau)]. The item biases then meet an interaction-free logistic model, whose exact posterior
already over-estimates tau_bv (unmodelled heterogeneity attenuates logistic main effects); model C below
(`logistic_intercept_meanfield` / `logistic_intercept_posterior`, b_n ~ N(0, 1/tau), y_n of n Bernoulli
trials, the Jaakkola-Jordan mean-field fixed point iterated in numpy and the exact posterior by nested
quadrature) separates that from the bound's own bias. NUTS on the same simulations (`rg_nuts_study`) gives
the exact posterior of the full model.

Every study takes ``n_sims`` and ``first``: it runs simulations ``first``..``n_sims`` - 1 of VSBC's seeds
(the same simulations whatever ``n_sims``), so long runs go in chunks; each row carries its ``sim`` index.

Reference code for tests and the docs page (docs/statistical_verdicts.md): dense (N x D, M x K x K)
arrays, small problems only.

Source: project addition (issue 26, item 2); Yao, Vehtari, Simpson, Gelman (2018) sec. 4 (VSBC);
004_90693a0965f06816.txt eqs. 4.1-4.11 (VBFM's model and family, with the Gamma q(alpha) of
`custom_inference.vbfm`); 003_203f63200c0d7157.txt eqs. (5), (6), (10)-(17) (RG).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize, stats

__all__ = [
    "GridPosterior",
    "grid_posterior",
    "FixedPoint",
    "linear_meanfield",
    "linear_alpha_posterior",
    "precision_meanfield",
    "precision_posterior",
    "vbfm_linear_check",
    "rg_pseudo_likelihoods",
    "rg_converged_state",
    "rg_fixed_point_check",
    "fixed_precision_gibbs",
    "fm_alpha_study",
    "linear_alpha_study",
    "rg_tau_study",
    "logistic_intercept_meanfield",
    "logistic_intercept_posterior",
    "rg_nuts_taus",
    "rg_nuts_study",
    "study_summary",
]


# ---------------------------------------------------------------------------------------------
# 1-D posteriors on a log grid


@dataclass(frozen=True)
class GridPosterior:
    """A positive scalar's posterior on a grid (what `grid_posterior` returns).

    Parameters
    ----------
    x : numpy.ndarray, shape (G,), float64
        Increasing grid points (> 0), in the scalar's own units.
    prob : numpy.ndarray, shape (G,), float64
        Their probabilities (sum 1; trapezoid weights of the density on an even grid in log x).

    Raises
    ------
    None of its own (a frozen dataclass; nothing is checked).

    Source: project addition.
    """

    x: np.ndarray
    prob: np.ndarray

    def mean(self) -> float:
        """The posterior mean E[x] on the grid.

        Returns
        -------
        float
            sum(prob * x).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return float(np.sum(self.prob * self.x))

    def expect(self, f: Callable[[np.ndarray], np.ndarray]) -> float:
        """The posterior expectation E[f(x)] on the grid.

        Parameters
        ----------
        f : callable
            Vectorized: numpy.ndarray (G,) float64 -> numpy.ndarray (G,) (e.g. a CDF of q, for a predicted p).

        Returns
        -------
        float
            sum(prob * f(x)).

        Raises
        ------
        None of its own; what ``f`` raises propagates.

        Source: project addition.
        """
        return float(np.sum(self.prob * f(self.x)))

    def cdf(self, value: float) -> float:
        """The posterior CDF Pr(x <= value): the grid mass up to ``value``.

        Parameters
        ----------
        value : float
            The point, in x's units.

        Returns
        -------
        float
            In [0, 1]; a step function of ``value`` (no interpolation between grid points).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return float(np.sum(self.prob[self.x <= value]))


def grid_posterior(log_density: Callable[[np.ndarray], np.ndarray], *, n_grid: int = 4001,
                   span: tuple[float, float] = (-30.0, 30.0)) -> GridPosterior:
    """Normalize a positive scalar's unnormalized log density by quadrature in u = log x.

    A coarse pass (1,001 points on ``span`` in log x) finds the region within 40 nats of the maximum;
    ``n_grid`` points cover it (trapezoid rule in u, the Jacobian x included).

    Parameters
    ----------
    log_density : callable
        Vectorized, numpy.ndarray (G,) float64 -> (G,) float64: the log of the (unnormalized) density of x
        (not of u); may return -inf or NaN where the density is 0.
    n_grid : int, keyword-only, default 4001
        Grid points of the fine pass.
    span : tuple of float, keyword-only, default (-30.0, 30.0)
        The range of log x searched by the coarse pass.

    Returns
    -------
    GridPosterior
        ``x`` and ``prob`` float64 (n_grid,).

    Raises
    ------
    ValueError
        When the log density is not finite anywhere on the span, or when its region touches an end of
        the span (widen ``span``).

    Source: project addition.
    """
    u = np.linspace(*span, 1001)
    lp = log_density(np.exp(u)) + u
    if not np.any(np.isfinite(lp)):
        raise ValueError("grid_posterior: the log density is not finite on the span")
    top = np.nanmax(lp)
    inside = np.flatnonzero(lp > top - 40.0)
    if inside[0] == 0 or inside[-1] == u.size - 1:
        raise ValueError(f"grid_posterior: the posterior's region reaches an end of the span {span}")
    lo, hi = u[inside[0] - 1], u[inside[-1] + 1]
    u = np.linspace(lo, hi, n_grid)
    lp = log_density(np.exp(u)) + u
    w = np.exp(lp - np.max(lp))
    w[[0, -1]] *= 0.5
    return GridPosterior(np.exp(u), w / w.sum())


class FixedPoint(NamedTuple):
    """A mean-field fixed point: Gaussian factors and one Gamma factor (a NamedTuple).

    Parameters
    ----------
    mean : numpy.ndarray, float64, shape (D,) or (M, K)
        The Gaussian factors' means.
    var : numpy.ndarray, float64, same shape as ``mean``
        Their variances.
    shape : float
        Shape of the Gamma factor q(alpha) or q(tau).
    rate : float
        Its rate.
    roots : numpy.ndarray, shape (R,), float64
        Every solution e (E_q of the Gamma factor) of the fixed-point equation found on the scan; this
        fixed point is ``roots[0]``'s, the smallest.

    Raises
    ------
    None of its own (a NamedTuple; nothing is checked).

    Source: project addition.
    """

    mean: np.ndarray
    var: np.ndarray
    shape: float
    rate: float
    roots: np.ndarray

    @property
    def e(self) -> float:
        """E_q of the Gamma factor, ``shape / rate`` (float; units of the precision alpha or tau).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return self.shape / self.rate


def _scalar_roots(g: Callable[[float], float], span=(-20.0, 20.0), n: int = 401) -> np.ndarray:
    """All roots of g(u) on a scan of ``span`` (sign changes refined by Brent's method, xtol 1e-14)."""
    u = np.linspace(*span, n)
    vals = np.array([g(t) for t in u])
    roots = [optimize.brentq(g, u[i], u[i + 1], xtol=1e-14, rtol=1e-15)
             for i in range(n - 1) if np.sign(vals[i]) != np.sign(vals[i + 1])]
    if not roots:
        raise ValueError(f"no fixed point on log e in {span}")
    return np.exp(np.asarray(roots))


# ---------------------------------------------------------------------------------------------
# A. the noise precision of a linear-Gaussian model


def _linear_given_e(XtX, Xty, y, X, prior_prec, e):
    P = e * XtX + np.diag(prior_prec)
    m = np.linalg.solve(P, e * Xty)
    s = 1.0 / (prior_prec + e * np.diag(XtX))
    resid = y - X @ m
    return m, s, float(resid @ resid + np.diag(XtX) @ s)


def linear_meanfield(X, y, prior_prec, a0: float, b0: float) -> FixedPoint:
    """The exact fixed point of fully factorized mean-field VB for the noise precision of a linear model.

    The family q(alpha) prod_l q(w_l) for y = X w + N(0, I/alpha), w_l ~ N(0, 1/prior_prec_l),
    alpha ~ Gamma(a0, b0) (module docstring, A): the root of e = (a0 + N/2) / rate(e), found by a scan of
    log e in [-20, 20] refined with Brent's method.

    Parameters
    ----------
    X : array_like, shape (N, D), float
        The dense design (an intercept is a column of ones with its own prior precision).
    y : array_like, shape (N,), float
        The outcomes.
    prior_prec : array_like, shape (D,), float > 0
        Prior precisions lambda_l of the coefficients.
    a0, b0 : float > 0
        Shape and rate of alpha's Gamma prior.

    Returns
    -------
    FixedPoint
        mean, var float64 (D,) of q(w); shape a0 + N/2 and rate of q(alpha); ``roots`` every root of the
        scalar equation (one for the designs of this module).

    Raises
    ------
    ValueError
        On shapes that do not match, non-positive ``prior_prec``, ``a0`` or ``b0``, or when no root is
        found on log e in [-20, 20].

    Source: project addition (the mean-field family of 004_90693a0965f06816.txt eqs. 4.8-4.11 on the linear
    part of eq. 4.1).
    """
    X, y, lam = np.asarray(X, np.float64), np.asarray(y, np.float64), np.asarray(prior_prec, np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],) or lam.shape != (X.shape[1],):
        raise ValueError(f"shapes: X (N, D), y (N,), prior_prec (D,); got {X.shape}, {y.shape}, {lam.shape}")
    if np.any(lam <= 0) or not (a0 > 0 and b0 > 0):
        raise ValueError("prior_prec, a0, b0 must be positive")
    XtX, Xty, shape = X.T @ X, X.T @ y, a0 + 0.5 * y.size

    def g(u):
        return u - np.log(shape / (b0 + 0.5 * _linear_given_e(XtX, Xty, y, X, lam, np.exp(u))[2]))

    roots = _scalar_roots(g)
    m, s, sq = _linear_given_e(XtX, Xty, y, X, lam, roots[0])
    return FixedPoint(m, s, float(shape), float(b0 + 0.5 * sq), roots)


def linear_alpha_posterior(X, y, prior_prec, a0: float, b0: float, *, n_grid: int = 4001) -> GridPosterior:
    """The exact posterior of alpha in the model of `linear_meanfield`, w integrated out.

    p(alpha | y) ~ Gamma(alpha; a0, b0) N(y; 0, X diag(1/prior_prec) X^T + I/alpha), by quadrature
    (`grid_posterior`; the covariance through one eigendecomposition, O(N^3) once, then O(G N)).

    Parameters
    ----------
    X : array_like, shape (N, D), float
        The dense design, as `linear_meanfield`.
    y : array_like, shape (N,), float
        The outcomes.
    prior_prec : array_like, shape (D,), float > 0
        Prior precisions of the coefficients.
    a0, b0 : float > 0
        Shape and rate of alpha's Gamma prior.
    n_grid : int, keyword-only, default 4001
        Grid points (`grid_posterior`).

    Returns
    -------
    GridPosterior
        The posterior of alpha (x float64 (n_grid,)).

    Raises
    ------
    ValueError
        From `grid_posterior` (also what negative ``a0`` / ``b0`` lead to: a log density that is NaN
        everywhere); shapes that do not match raise NumPy's ValueError. Unlike `linear_meanfield` it does
        not check the shapes and precisions itself.
    ZeroDivisionError
        For ``b0`` = 0 (Python's, from the prior's scale 1 / b0).

    Source: project addition (the collapsed Gaussian marginal likelihood).
    """
    X, y, lam = np.asarray(X, np.float64), np.asarray(y, np.float64), np.asarray(prior_prec, np.float64)
    c, U = np.linalg.eigh((X / lam) @ X.T)
    z2 = (U.T @ y) ** 2
    c = np.maximum(c, 0.0)

    def log_density(alpha):
        var = c[None, :] + 1.0 / alpha[:, None]
        return (stats.gamma.logpdf(alpha, a0, scale=1.0 / b0)
                - 0.5 * np.sum(np.log(var) + z2[None, :] / var, axis=1))

    return grid_posterior(log_density, n_grid=n_grid)


# ---------------------------------------------------------------------------------------------
# B. the precision of a Gaussian prior under a Gaussian pseudo-likelihood


def _check_blocks(A, c):
    A, c = np.asarray(A, np.float64), np.asarray(c, np.float64)
    if A.ndim != 3 or c.ndim != 2 or A.shape != (c.shape[0], c.shape[1], c.shape[1]):
        raise ValueError(f"A must be (M, K, K) and c (M, K); got {A.shape}, {c.shape}")
    return A, c


def _precision_given_e(A, c, e):
    K = c.shape[1]
    mean = np.linalg.solve(A + e * np.eye(K)[None], c[..., None])[..., 0]
    var = 1.0 / (np.diagonal(A, axis1=1, axis2=2) + e)
    return mean, var, float(np.sum(mean**2) + np.sum(var))


def precision_meanfield(A, c, a0: float, b0: float) -> FixedPoint:
    """The exact mean-field fixed point for the precision of a Gaussian prior under a Gaussian pseudo-likelihood.

    q(tau) prod_m prod_k q(x_mk) for x_m ~ N(0, I_K / tau), tau ~ Gamma(a0, b0) and the pseudo-likelihood
    exp(c_m^T x_m - x_m^T A_m x_m / 2) (module docstring, B; q(x_m) diagonal within the block, RG's family,
    whose block optimum has the mean of the full-covariance conditional and the diagonal precision).

    Parameters
    ----------
    A : array_like, shape (M, K, K), float
        Symmetric positive semi-definite precision of each block's pseudo-likelihood.
    c : array_like, shape (M, K), float
        Its linear coefficients.
    a0, b0 : float > 0
        Shape and rate of tau's Gamma prior.

    Returns
    -------
    FixedPoint
        mean, var float64 (M, K); shape a0 + M K / 2 and rate of q(tau); ``roots``.

    Raises
    ------
    ValueError
        On bad shapes, non-positive ``a0`` / ``b0``, or when no root is found on log e in [-20, 20].

    Source: project addition (the family of 003_203f63200c0d7157.txt eq. (6) with the Gamma update (17)).
    """
    A, c = _check_blocks(A, c)
    if not (a0 > 0 and b0 > 0):
        raise ValueError("a0, b0 must be positive")
    shape = a0 + 0.5 * c.size
    roots = _scalar_roots(lambda u: u - np.log(shape / (b0 + 0.5 * _precision_given_e(A, c, np.exp(u))[2])))
    mean, var, sq = _precision_given_e(A, c, roots[0])
    return FixedPoint(mean, var, float(shape), float(b0 + 0.5 * sq), roots)


def precision_posterior(A, c, a0: float, b0: float, *, n_grid: int = 4001) -> GridPosterior:
    """The exact posterior of tau under the model of `precision_meanfield` (x integrated out).

    p(tau) ~ Gamma(tau; a0, b0) prod_m tau^(K/2) |A_m + tau I|^(-1/2) exp(c_m^T (A_m + tau I)^-1 c_m / 2),
    by quadrature (`grid_posterior`; one eigendecomposition per block).

    Parameters
    ----------
    A : array_like, shape (M, K, K), float
        Symmetric positive semi-definite block precisions.
    c : array_like, shape (M, K), float
        Linear coefficients.
    a0, b0 : float > 0
        Shape and rate of tau's Gamma prior.
    n_grid : int, keyword-only, default 4001
        Grid points (`grid_posterior`).

    Returns
    -------
    GridPosterior
        The posterior of tau.

    Raises
    ------
    ValueError
        On bad shapes of ``A`` / ``c``, and from `grid_posterior` (which negative ``a0`` / ``b0``
        reach as a log density that is NaN everywhere).
    ZeroDivisionError
        For ``b0`` = 0 (Python's, from the prior's scale 1 / b0).

    Source: project addition (the Gaussian integral over x_m).
    """
    A, c = _check_blocks(A, c)
    a, Q = np.linalg.eigh(A)
    a = np.maximum(a, 0.0).ravel()
    z2 = np.einsum("mkj,mk->mj", Q, c).ravel() ** 2

    def log_density(tau):
        d = a[None, :] + tau[:, None]
        return (stats.gamma.logpdf(tau, a0, scale=1.0 / b0) + 0.5 * c.size * np.log(tau)
                - 0.5 * np.sum(np.log(d) - z2[None, :] / d, axis=1))

    return grid_posterior(log_density, n_grid=n_grid)


# ---------------------------------------------------------------------------------------------
# the solvers against the closed forms


def _dense_with_intercept(design):
    X = np.asarray(design.to_dense(), np.float64)
    return np.concatenate([np.ones((X.shape[0], 1)), X], axis=1)


def vbfm_linear_check(seed: int = 0, *, design_kwargs: dict | None = None, sigma_0: float = 0.01,
                      sigma_w: float = 4.0, alpha_prior=(2.0, 0.5), block: int = 500,
                      max_blocks: int = 200) -> dict:
    """VBFM's fixed point on the linear case against `linear_meanfield`.

    The design is `validation.models.vbfm.VSBC_DESIGN` (or ``design_kwargs``); (w0, w, alpha) are drawn
    from the prior (w0 ~ N(0, 1/sigma_0), w_l ~ N(0, 1/sigma_w), alpha ~ Gamma(alpha_prior)) and
    y = w0 + X w + N(0, 1/alpha). VBFM (`custom_inference.vbfm.step`, float64, hyperparameters fixed)
    runs with the interaction weights switched off: their means start at 0 (``init_mean_sd=0``), where
    every v update keeps them (the update's h is a sum of terms in the other v means), and their prior
    precision is 1e12, so their variances (< 1e-12) add < 1e-20 to Var_q(yhat). The solver's sweeps run in
    jitted blocks of ``block`` until the largest relative change of E[alpha] and of q(w)'s means and
    variances over a block is below 1e-13 (at most ``max_blocks`` blocks).

    Parameters
    ----------
    seed : int, default 0
        Seed of the prior draw (numpy) and of the solver's init (``PRNGKey(seed)``).
    design_kwargs : dict or None, keyword-only
        Keyword arguments of `validation.models.vbfm.simulated_design`; None: ``VSBC_DESIGN``.
    sigma_0 : float > 0, keyword-only, default 0.01
        Prior precision of the global bias w0.
    sigma_w : float > 0, keyword-only, default 4.0
        Prior precision of every w_l.
    alpha_prior : tuple of float, keyword-only, default (2.0, 0.5)
        (shape, rate) of alpha's Gamma prior.
    block : int, keyword-only, default 500
        Sweeps per jitted block.
    max_blocks : int, keyword-only, default 200
        At most this many blocks.

    Returns
    -------
    dict
        ``solver_e_alpha``, ``closed_e_alpha`` (float), ``n_roots`` (int), ``rel_diff`` (float: largest
        relative difference over E[alpha], the Gamma rate and q(w0, w)'s means and variances), ``sweeps``
        (int), ``converged`` (bool), ``v_mean_max`` (float: the largest |E_q v|, 0 if the interactions
        stayed off).

    Raises
    ------
    ValueError
        From `linear_meanfield` (no root); errors of `simulated_design` on bad ``design_kwargs`` propagate.

    Source: project addition (checks custom_inference.vbfm's updates, 004_90693a0965f06816.txt Algorithm 3
    corrected, against the closed form).
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import vbfm
    from ppl_models import fm as ppl
    from validation.models import vbfm as vm

    base = vm.simulated_design(**(design_kwargs or vm.VSBC_DESIGN))
    rng = np.random.default_rng(seed)
    D = base.n_features
    w0 = rng.normal(0.0, 1.0 / np.sqrt(sigma_0))
    w = rng.normal(0.0, 1.0 / np.sqrt(sigma_w), D)
    alpha = rng.gamma(alpha_prior[0], 1.0 / alpha_prior[1])
    Xd = _dense_with_intercept(base)
    y = Xd @ np.r_[w0, w] + rng.normal(0.0, 1.0 / np.sqrt(alpha), base.n_rows)
    design = vm.simulated_design(**(design_kwargs or vm.VSBC_DESIGN), y=y)
    closed = linear_meanfield(Xd, y, np.r_[sigma_0, np.full(D, sigma_w)], *alpha_prior)
    hyper = ppl.FMFlatHyper(alpha=1.0, sigma_0=sigma_0, sigma_w=sigma_w, sigma_v=1e12)
    with jax.enable_x64(True):
        d = jax.tree_util.tree_map(jnp.asarray, design)
        state = vbfm.init(jax.random.PRNGKey(seed), design, 1, hyper, alpha_prior=alpha_prior, init_mean_sd=0.0,
                          dtype=jnp.float64)
        run = jax.jit(lambda s: jax.lax.fori_loop(0, block, lambda i, t: vbfm.step(None, t, d, update_hyper=False)[0], s))

        def summary(s):
            (m0, s0), (m, sw), _ = vbfm.moments(s)
            return np.r_[float(s.alpha_shape / s.alpha_rate), float(m0), np.asarray(m), float(s0), np.asarray(sw)]

        prev, converged, n = summary(state), False, 0
        for n in range(1, max_blocks + 1):
            state = run(state)
            cur = summary(state)
            if np.max(np.abs(cur - prev) / np.maximum(np.abs(cur), 1e-300)) < 1e-13:
                converged = True
                break
            prev = cur
        v_mean_max = float(jnp.max(jnp.abs(state.v_h / state.v_prec)))
    solver = np.r_[cur, float(state.alpha_rate)]
    ref = np.r_[closed.e, closed.mean[0], closed.mean[1:], closed.var[0], closed.var[1:], closed.rate]
    return {"solver_e_alpha": float(cur[0]), "closed_e_alpha": closed.e, "n_roots": int(closed.roots.size),
            "rel_diff": float(np.max(np.abs(solver - ref) / np.abs(ref))), "sweeps": n * block,
            "converged": converged, "v_mean_max": v_mean_max}


def _jj_lambda(xi):
    """lam(xi) = tanh(xi / 2) / (4 xi) (limit 1/8 at 0), written here independently of the solver."""
    xi = np.abs(np.asarray(xi, np.float64))
    small = xi < 1e-6
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(xi / 2.0) / (4.0 * np.where(small, 1.0, xi)))


def rg_pseudo_likelihoods(state, users, items, g) -> dict:
    """The Gaussian pseudo-likelihoods of RG's blocks at a state (module docstring, B).

    Computed from q's moments with xi_e = sqrt(E_q[a_e^2]) and lam(xi) written here (clamped user biases,
    b_m = 0).

    Parameters
    ----------
    state : custom_inference.rg.RGState
        Read through its natural parameters only (u_h, u_prec, v_h, v_prec, bv_h, bv_prec) and
        ``user_bias_on``; u (I, K), v (J, K), bv (J,).
    users, items : array_like, shape (E,), int
        The edges of H (user and item index of each).
    g : array_like, shape (E,), float
        The 0/1 outcomes of the edges.

    Returns
    -------
    dict
        {"u": (A (I, K, K), c (I, K)), "v": (A (J, K, K), c (J, K)), "b_item": (A (J, 1, 1), c (J, 1))},
        float64 numpy arrays.

    Raises
    ------
    ValueError
        When the state has free user biases (the check covers the clamped model of the VSBC problem).

    Source: 003_203f63200c0d7157.txt eqs. (10)-(16) (the bound and its optimal xi), derived anew here.
    """
    if float(state.user_bias_on) != 0.0:
        raise ValueError("rg_pseudo_likelihoods: only the clamped model (b_m = 0) is covered")
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    mu, su = f(state.u_h) / f(state.u_prec), 1.0 / f(state.u_prec)
    mv, sv = f(state.v_h) / f(state.v_prec), 1.0 / f(state.v_prec)
    mb, sb = f(state.bv_h) / f(state.bv_prec), 1.0 / f(state.bv_prec)
    users, items, g = np.asarray(users), np.asarray(items), f(g)
    I, J, K = mu.shape[0], mv.shape[0], mu.shape[1]
    Mu, Su, Mv, Sv = mu[users], su[users], mv[items], sv[items]
    uv = np.sum(Mu * Mv, axis=1)
    ea = uv + mb[items]
    var_a = np.sum(Mu**2 * Sv + Su * Mv**2 + Su * Sv, axis=1) + sb[items]
    lam2 = 2.0 * _jj_lambda(np.sqrt(ea**2 + var_a))
    out = {}
    for name, own, n_own, M_other, S_other in (("u", users, I, Mv, Sv), ("v", items, J, Mu, Su)):
        second = M_other[:, :, None] * M_other[:, None, :] + np.eye(K)[None] * S_other[:, None, :]
        A = np.zeros((n_own, K, K))
        c = np.zeros((n_own, K))
        np.add.at(A, own, lam2[:, None, None] * second)
        np.add.at(c, own, (g - 0.5 - lam2 * mb[items])[:, None] * M_other)
        out[name] = (A, c)
    A = np.zeros((J, 1, 1))
    c = np.zeros((J, 1))
    np.add.at(A, items, lam2[:, None, None])
    np.add.at(c, items, (g - 0.5 - lam2 * uv)[:, None])
    out["b_item"] = (A, c)
    return out


_RG_BLOCKS = {"u": ("u", "tau_u"), "v": ("v", "tau_v"), "b_item": ("bv", "tau_bv")}


def rg_converged_state(gv, seed: int, *, block: int = 1000, max_blocks: int = 50, rtol: float = 1e-13):
    """RG VB on VSBC's grid H run on to its fixed point.

    Started as `validation.models.rg.vsbc_fit_state` (grid `validation.models.rg.vsbc_grid`) and run on in
    jitted blocks of ``block`` sweeps (`custom_inference.rg.step` with rho = 1, float64) until the largest
    relative change of any natural parameter over a block is below ``rtol``. The VSBC fit stops on the ELBO
    (tol 1e-10), which leaves slow directions (the u / v scale, a collapse of the factors in progress) short
    of the fixed point.

    Parameters
    ----------
    gv : array_like, shape (E,), float
        0/1 outcomes of the grid's E = 120 edges (10 users x 12 items).
    seed : int
        The fit seed (as `vsbc_fit_state`).
    block : int, keyword-only, default 1000
        Sweeps per jitted block.
    max_blocks : int, keyword-only, default 50
        At most this many blocks.
    rtol : float, keyword-only, default 1e-13
        Convergence threshold on the largest relative change over a block.

    Returns
    -------
    tuple
        (state `custom_inference.rg.RGState`, sweeps run after the VSBC fit (int), converged (bool)).

    Raises
    ------
    ValueError
        As `validation.models.rg.vsbc_fit_state` (bad outcomes, from `custom_inference.rg.RGGraph.from_edges`).

    Source: project addition.
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import rg
    from validation.models import rg as mr

    config = mr.CrosscheckConfig()
    users, items = mr.vsbc_grid()
    state = mr.vsbc_fit_state(gv, seed, config)
    graph = rg.RGGraph.from_edges(users, items, gv, 10, 12)
    flat = lambda s: np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in s])  # noqa: E731
    with jax.enable_x64(True):
        g = jax.tree_util.tree_map(jnp.asarray, graph)
        run = jax.jit(lambda s: jax.lax.fori_loop(0, block, lambda i, t: rg.step(None, t, g, config.hyper)[0], s))
        prev = flat(state)
        for n in range(1, max_blocks + 1):
            state = run(state)
            cur = flat(state)
            if np.max(np.abs(cur - prev) / np.maximum(np.abs(cur), 1e-300)) < rtol:
                return state, n * block, True
            prev = cur
    return state, max_blocks * block, False


def rg_fixed_point_check(state, users, items, g, hyper) -> pd.DataFrame:
    """Is an RG state the mean-field fixed point of its blocks' pseudo-likelihoods?

    For each block (u with tau_u, v with tau_v, b_item with tau_bv), `rg_pseudo_likelihoods` then
    `precision_meanfield` with the hyperprior Gamma(hyper.alpha, hyper.beta) gives the closed-form fixed
    point given the other blocks and xi; the solver's q(x) means and variances and q(tau) shape and rate
    are compared with it.

    Parameters
    ----------
    state : custom_inference.rg.RGState
        The fitted state (clamped user biases).
    users, items : array_like, shape (E,), int
        The edges of H.
    g : array_like, shape (E,), float
        Their 0/1 outcomes.
    hyper : ppl_models.rg.RGHyper
        Its ``alpha`` and ``beta`` (shape, rate of every precision's Gamma hyperprior) are used.

    Returns
    -------
    pandas.DataFrame
        One row per block and quantity: block, quantity ("mean", "var", "shape", "rate"), max_rel_diff
        (for the means: the largest difference in units of q's sd, as means may be 0), n_roots.

    Raises
    ------
    ValueError
        As `rg_pseudo_likelihoods` (free user biases) and `precision_meanfield` (no root).

    Source: project addition (checks custom_inference.rg's updates (13)-(17) of 003_203f63200c0d7157.txt
    against the closed form).
    """
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    rows = []
    for block, (A, c) in rg_pseudo_likelihoods(state, users, items, g).items():
        prefix, tau = _RG_BLOCKS[block]
        fp = precision_meanfield(A, c, float(hyper.alpha), float(hyper.beta))
        prec, h = f(getattr(state, f"{prefix}_prec")).reshape(fp.mean.shape), f(getattr(state, f"{prefix}_h")).reshape(fp.mean.shape)
        pairs = {"mean": (h / prec, fp.mean), "var": (1.0 / prec, fp.var),
                 "shape": (f(getattr(state, f"{tau}_shape")), fp.shape), "rate": (f(getattr(state, f"{tau}_rate")), fp.rate)}
        for q, (a, b) in pairs.items():
            scale = np.sqrt(fp.var) if q == "mean" else np.abs(b)  # means: in units of q's sd
            rows.append({"block": block, "quantity": q, "max_rel_diff": float(np.max(np.abs(a - b) / scale)),
                         "n_roots": int(fp.roots.size)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# an exact sampler of VBFM's program (the FM with fixed prior precisions and alpha ~ Gamma)


def fixed_precision_gibbs(seed: int, design, K: int, hyper, alpha_prior, *, n_chains: int = 4,
                          n_warmup: int = 500, n_draws: int = 1000):
    """Gibbs draws from the posterior of `validation.models.vbfm.model_flat_gamma_alpha`.

    The program VBFM's VSBC simulates from and fits: MCMC-FM's complete conditionals
    (`custom_inference.fm_mcmc`: w0, then every colour block's w and v, then
    alpha ~ Gamma(a0 + N/2, b0 + sum e^2 / 2)) with the group means held at 0 and the group precisions held
    at ``hyper``'s (they are drawn in MCMC-FM, fixed here). Chains start from w0 = 0, w = 0 and
    V ~ N(0, 0.1^2); ``n_warmup`` sweeps are discarded. Runs in float64, chains vmapped.

    Parameters
    ----------
    seed : int
        ``PRNGKey(seed)``, split over the chains.
    design : FMDesign
        The sparse design (N rows, D features, groups and colour blocks) with its outcomes y (N,).
    K : int
        Interaction rank.
    hyper : ppl_models.fm.FMFlatHyper
        sigma_0 (scalar), sigma_w, sigma_v (scalars or per group) held fixed; its alpha is not used.
    alpha_prior : tuple of float
        (a0, b0), shape and rate of alpha's Gamma prior.
    n_chains : int, keyword-only, default 4
    n_warmup : int, keyword-only, default 500
        Sweeps discarded per chain.
    n_draws : int, keyword-only, default 1000
        Sweeps kept per chain.

    Returns
    -------
    dict
        float64 numpy arrays (n_chains, n_draws, ...): alpha, w0, w (.., D), V (.., D, K), sse (sum of
        squared residuals), pred (yhat, (.., N)).

    Raises
    ------
    None of its own.

    Source: project addition (the conditionals derived in custom_inference.fm_mcmc for
    004_90693a0965f06816.txt eqs. 2.22-2.26, with the hyperpriors of eqs. 4.2-4.4's fixed precisions).
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import fm_mcmc
    from custom_inference.gaussian import sample_normal_natural
    from ppl_models import fm as ppl

    a0, b0 = (float(v) for v in alpha_prior)
    G = design.n_groups
    sw = np.broadcast_to(np.asarray(hyper.sigma_w, np.float64), (G,))
    sv = np.asarray(hyper.sigma_v, np.float64)
    sv = np.broadcast_to(sv[:, None] if sv.ndim == 1 else sv, (G, K))
    hier = ppl.FMHierHyper(mu_0=0.0, sigma_0=float(hyper.sigma_0), alpha_0=a0, beta_0=b0)
    with jax.enable_x64(True):
        d = jax.tree_util.tree_map(jnp.asarray, design)

        def sweep(state, key):
            keys = jax.random.split(key, 2 + design.n_blocks)
            P, h = fm_mcmc.w0_conditional(state, d, hier)
            w0 = sample_normal_natural(keys[0], P, h)
            state = state._replace(w0=w0, e=state.e - (w0 - state.w0))
            for b in range(design.n_blocks):
                state = fm_mcmc.update_block(keys[2 + b], state, d, hier, b)
            shape, rate = fm_mcmc.alpha_conditional(state, d, hier)
            state = state._replace(alpha=jax.random.gamma(keys[1], shape) / rate)
            state = fm_mcmc.caches(state, d)  # refresh e and q (no drift of the incremental caches)
            return state, (state.alpha, state.w0, state.w, state.V, jnp.sum(state.e**2), d.y - state.e)

        def chain(key):
            k0, k1 = jax.random.split(key)
            s = fm_mcmc.init(k0, d, K, hier, dtype=jnp.float64)
            s = fm_mcmc.caches(s._replace(sigma_w=jnp.asarray(sw), sigma_v=jnp.asarray(sv), alpha=jnp.asarray(a0 / b0)), d)
            keys = jax.random.split(k1, n_warmup + n_draws)
            _, out = jax.lax.scan(sweep, s, keys)
            return jax.tree_util.tree_map(lambda x: x[n_warmup:], out)

        out = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(seed), n_chains))
    names = ("alpha", "w0", "w", "V", "sse", "pred")
    return {k: np.asarray(v, np.float64) for k, v in zip(names, out)}


# ---------------------------------------------------------------------------------------------
# the studies: measured p against the p the exact posterior predicts, simulation by simulation


def _sims(master_seed: int, n_sims: int, first: int):
    """(index, seed) of simulations ``first``..``n_sims`` - 1 of VSBC's seeds (`sbc_seeds`: simulation s has
    the same seed whatever ``n_sims``, so a study can run in chunks)."""
    from validation.checks.sbc import sbc_seeds

    if int(n_sims) < 1 or not 0 <= int(first) < int(n_sims):
        raise ValueError(f"need 0 <= first < n_sims, got first={first}, n_sims={n_sims}")
    return [(i, int(sd)) for i, sd in enumerate(sbc_seeds(master_seed, int(n_sims))) if i >= int(first)]


def _fit_seed(seed: int) -> int:
    """The fit seed `validation.checks.vi_evidence.run_vsbc` gives simulation ``seed``."""
    return int(np.random.SeedSequence([int(seed), 0x75BC]).generate_state(1, dtype=np.uint32)[0])


def linear_alpha_study(n_sims: int = 200, master_seed: int = 0, *, first: int = 0, sigma_0: float = 0.01, sigma_w: float = 4.0,
                       alpha_prior=(2.0, 0.5)) -> pd.DataFrame:
    """The linear case of VBFM's VSBC problem, all in closed form.

    Its design `validation.models.vbfm.VSBC_DESIGN` and priors, without the interactions: per simulation
    (seeds `validation.checks.sbc.sbc_seeds` of ``master_seed``) (w0, w, alpha) from the prior and y; the
    mean-field q(alpha) (`linear_meanfield`) and the exact posterior (`linear_alpha_posterior`).

    Parameters
    ----------
    n_sims : int, default 200
        VSBC's number of simulations.
    master_seed : int, default 0
        VSBC's master seed.
    first : int, keyword-only, default 0
        Runs simulations ``first`` .. ``n_sims`` - 1.
    sigma_0 : float > 0, keyword-only, default 0.01
        Prior precision of the intercept w0.
    sigma_w : float > 0, keyword-only, default 4.0
        Prior precision of every w_l.
    alpha_prior : tuple of float, keyword-only, default (2.0, 0.5)
        (shape, rate) of alpha's Gamma prior.

    Returns
    -------
    pandas.DataFrame
        One row per simulation: sim, alpha_true, e_q (E_q[alpha]), e_post (E[alpha | y]), log_ratio
        log(e_q / e_post), p_measured F_q(alpha_true) (VSBC's p on log alpha, exact CDF), p_predicted
        E_post[F_q(alpha)] (its expectation given y), rank_post Pr_post(alpha < alpha_true) (uniform if the
        quadrature is right), n_roots.

    Raises
    ------
    ValueError
        Unless 0 <= ``first`` < ``n_sims``; from `linear_meanfield` / `grid_posterior` on priors that give
        no root or no finite density.

    Source: project addition (module docstring, A).
    """
    from validation.models import vbfm as vm

    base = vm.simulated_design(**vm.VSBC_DESIGN)
    X = _dense_with_intercept(base)
    lam = np.r_[sigma_0, np.full(base.n_features, sigma_w)]
    rows = []
    for i, seed in _sims(master_seed, n_sims, first):
        rng = np.random.default_rng(int(seed))
        w = rng.normal(0.0, 1.0 / np.sqrt(lam))
        alpha = rng.gamma(alpha_prior[0], 1.0 / alpha_prior[1])
        y = X @ w + rng.normal(0.0, 1.0 / np.sqrt(alpha), X.shape[0])
        fp = linear_meanfield(X, y, lam, *alpha_prior)
        post = linear_alpha_posterior(X, y, lam, *alpha_prior)
        F = lambda a: stats.gamma.cdf(a, fp.shape, scale=1.0 / fp.rate)  # noqa: E731
        rows.append({"sim": i, "alpha_true": alpha, "e_q": fp.e, "e_post": post.mean(), "log_ratio": np.log(fp.e / post.mean()),
                     "p_measured": float(F(alpha)), "p_predicted": post.expect(F), "rank_post": post.cdf(alpha),
                     "n_roots": int(fp.roots.size)})
    return pd.DataFrame(rows)


def fm_alpha_study(n_sims: int = 200, master_seed: int = 0, *, first: int = 0, solver: str = "cavi", n_chains: int = 4,
                   n_warmup: int = 500, n_draws: int = 1000, restarts: int = 0) -> pd.DataFrame:
    """VBFM's (or OVBFM's) VSBC simulations of alpha, each against the exact posterior of the same data.

    Simulation s is VSBC's (`validation.models.vbfm.vsbc_adapters` simulate, seeds `sbc_seeds` of
    ``master_seed``) and so is the fit (`validation.models.vbfm.vsbc_fit_state`, the fit seed of
    `run_vsbc`); the exact posterior is `fixed_precision_gibbs` (``n_chains`` x ``n_draws`` after
    ``n_warmup``). ``restarts`` > 0 also runs VBFM from that many other starts with wide initial means
    (init_mean_sd 1) and reports the best ELBO's E_q[alpha] (a local optimum of the ELBO would show there).

    Parameters
    ----------
    n_sims : int, default 200
        VSBC's number of simulations (the seeds depend on it only through ``master_seed``).
    master_seed : int, default 0
        VSBC's master seed.
    first : int, keyword-only, default 0
        Runs simulations ``first`` .. ``n_sims`` - 1.
    solver : {"cavi", "ovbfm"}, keyword-only, default "cavi"
        VBFM's batch CAVI or OVBFM's stochastic VI.
    n_chains, n_warmup, n_draws : int, keyword-only, defaults 4, 500, 1000
        Of `fixed_precision_gibbs`.
    restarts : int, keyword-only, default 0
        Extra VBFM starts per simulation.

    Returns
    -------
    pandas.DataFrame
        One row per simulation: sim, alpha_true, e_q, e_post, log_ratio, p_measured (F_q(alpha_true), exact
        Gamma CDF), p_predicted (E_post[F_q(alpha)], over the Gibbs draws), rank_post (the Gibbs draws'
        Pr(alpha < alpha_true): uniform over simulations if the sampler is exact), rhat and ess_bulk of alpha
        (ArviZ), sse_q (E_q ||y - yhat||^2) = fit_q (||y - E_q yhat||^2) + var_q (sum_n Var_q yhat_n),
        sse_post = fit_post + var_post (the same under the posterior), and with restarts e_q_best,
        elbo_gain (best ELBO minus the VSBC fit's).

    Raises
    ------
    ValueError
        Unless 0 <= ``first`` < ``n_sims``, or for a ``solver`` other than "cavi" / "ovbfm" (from
        `validation.models.vbfm.vsbc_adapters`).

    Source: project addition (module docstring, A).
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import arviz_io, vbfm
    from validation.models import vbfm as vm

    config = vm.CrosscheckConfig()
    simulate = vm.vsbc_adapters(solver, config)[0]
    h = config.sim_hyper._replace(sigma_0=config.fit_sigma_0)
    rows = []
    for i, seed in _sims(master_seed, n_sims, first):
        truth, design = simulate(int(seed))
        fs = _fit_seed(int(seed))
        state = vm.vsbc_fit_state(design, fs, solver, config)
        shape, rate = float(state.alpha_shape), float(state.alpha_rate)
        F = lambda a: stats.gamma.cdf(a, shape, scale=1.0 / rate)  # noqa: E731
        with jax.enable_x64(True):
            d = jax.tree_util.tree_map(jnp.asarray, design)
            caches, T = vbfm.compute_caches(state, d.rows, d.cols, d.values, d.y, d.n_rows)
            R, T = np.asarray(caches.R), np.asarray(T)
        post = fixed_precision_gibbs(fs, design, config.K, h, config.alpha_prior, n_chains=n_chains,
                                     n_warmup=n_warmup, n_draws=n_draws)
        a = post["alpha"]
        y = np.asarray(design.y)
        fit_post = float(np.sum((y - post["pred"].mean(axis=(0, 1))) ** 2))
        summ = arviz_io.az.summary(arviz_io.az.convert_to_inference_data({"alpha": a}), kind="diagnostics")
        row = {"sim": i, "alpha_true": float(truth["alpha"]), "e_q": shape / rate, "e_post": float(a.mean()),
               "log_ratio": float(np.log(shape / rate / a.mean())), "p_measured": float(F(truth["alpha"])),
               "p_predicted": float(np.mean(F(a))), "rank_post": float(np.mean(a < truth["alpha"])),
               "rhat": float(summ["r_hat"].iloc[0]), "ess_bulk": float(summ["ess_bulk"].iloc[0]),
               "sse_q": float(np.sum(R**2 + T)), "fit_q": float(np.sum(R**2)), "var_q": float(np.sum(T)),
               "sse_post": float(post["sse"].mean()), "fit_post": fit_post,
               "var_post": float(np.sum(post["pred"].reshape(-1, y.size).var(axis=0)))}
        if restarts:
            with jax.enable_x64(True):
                base_elbo = float(vbfm.elbo(state, d))
                best = (base_elbo, shape / rate)
                for r in range(int(restarts)):
                    res = vbfm.fit(jax.random.PRNGKey(fs + 1 + r), design, config.K, h, max_iter=3000, tol=1e-9,
                                   progress=False, alpha_prior=config.alpha_prior, update_hyper=False, n_draws=0,
                                   init_mean_sd=1.0)
                    val = float(vbfm.elbo(res.state, d))
                    if val > best[0]:
                        best = (val, float(res.state.alpha_shape / res.state.alpha_rate))
            row.update(e_q_best=best[1], elbo_gain=best[0] - base_elbo)
        rows.append(row)
    return pd.DataFrame(rows)


def rg_tau_study(n_sims: int = 200, master_seed: int = 0, *, first: int = 0, intercept: bool = False) -> pd.DataFrame:
    """RG VB's VSBC simulations of tau_u, tau_v, tau_bv against the exact posterior of tau under each block's
    pseudo-likelihood at the fitted q (module docstring, B).

    Simulation s and its fit are VSBC's (`validation.models.rg.vsbc_adapters` simulate,
    `validation.models.rg.vsbc_fit_state` with `run_vsbc`'s fit seed). Per precision: p_measured =
    F_q(tau_true) (exact Gamma CDF), p_predicted = E[F_q(tau)] under `precision_posterior` of the block's
    `rg_pseudo_likelihoods` (the bias that the factorization of tau from its block explains, the rest of q
    held fixed), e_q, e_cond (that posterior's mean), and fp_rel_diff, the largest relative difference of
    `rg_fixed_point_check` (every simulation doubles as a check of the solver against the closed form).

    Parameters
    ----------
    n_sims : int, default 200
        VSBC's number of simulations.
    master_seed : int, default 0
        VSBC's master seed.
    first : int, keyword-only, default 0
        Runs simulations ``first`` .. ``n_sims`` - 1.
    intercept : bool, keyword-only, default False
        Also fit model C (module docstring) on each simulation's item counts (the tau_bv rows).

    Returns
    -------
    pandas.DataFrame
        Long, one row per simulation and precision: sim, tau ("tau_u", "tau_v", "tau_bv"), tau_true, e_q,
        e_cond, log_ratio log(e_q / e_cond), p_measured, p_predicted, fp_rel_diff, uv_rms (RMS over the edges
        of E_q[u_m] . E_q[v_n]: near 0 where q has collapsed the factors). With ``intercept``, the tau_bv rows
        also hold e_icpt_mf (`logistic_intercept_meanfield`'s E[tau]), e_icpt_exact and p_icpt_exact
        (`logistic_intercept_posterior`'s mean and Pr(tau < tau_true): the VSBC p of *exact* inference in a
        model without u.v); NaN elsewhere.

    Raises
    ------
    ValueError
        Unless 0 <= ``first`` < ``n_sims``; from `precision_meanfield` / `grid_posterior` when a block has
        no root or no finite density.
    RuntimeError
        With ``intercept``, from `logistic_intercept_meanfield` when model C does not converge.

    Source: project addition (module docstring, B).
    """
    from validation.models import rg as mr

    config = mr.CrosscheckConfig()
    simulate = mr.vsbc_adapters("vb", config)[0]
    users, items = mr.vsbc_grid()
    rows = []
    for i, seed in _sims(master_seed, n_sims, first):
        truth, gv = simulate(int(seed))
        state = mr.vsbc_fit_state(gv, _fit_seed(int(seed)), config)
        check = rg_fixed_point_check(state, users, items, gv, config.hyper)
        pl = rg_pseudo_likelihoods(state, users, items, gv)
        mu, mv = (np.asarray(getattr(state, f"{x}_h")) / np.asarray(getattr(state, f"{x}_prec")) for x in "uv")
        uv_rms = float(np.sqrt(np.mean(np.sum(mu[users] * mv[items], axis=1) ** 2)))
        for block, (prefix, tau) in _RG_BLOCKS.items():
            shape, rate = float(getattr(state, f"{tau}_shape")), float(getattr(state, f"{tau}_rate"))
            F = lambda t: stats.gamma.cdf(t, shape, scale=1.0 / rate)  # noqa: E731
            post = precision_posterior(*pl[block], float(config.hyper.alpha), float(config.hyper.beta))
            rows.append({"sim": i, "tau": tau, "tau_true": float(truth[tau]), "e_q": shape / rate,
                         "e_cond": post.mean(), "log_ratio": float(np.log(shape / rate / post.mean())),
                         "p_measured": float(F(truth[tau])), "p_predicted": post.expect(F),
                         "fp_rel_diff": float(check[check.block == block].max_rel_diff.max()), "uv_rms": uv_rms})
            if intercept and tau == "tau_bv":
                counts = np.bincount(items, weights=gv, minlength=12)
                a0, b0 = float(config.hyper.alpha), float(config.hyper.beta)
                exact = logistic_intercept_posterior(counts, 10, a0, b0, n_grid=801, n_z=801)
                rows[-1].update(e_icpt_mf=logistic_intercept_meanfield(counts, 10, a0, b0).e,
                                e_icpt_exact=exact.mean(), p_icpt_exact=exact.cdf(float(truth[tau])))
    return pd.DataFrame(rows)


def study_summary(table: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Mean measured p against mean predicted p, with the Monte Carlo standard error of their difference.

    Parameters
    ----------
    table : pandas.DataFrame
        A study's table, with float columns p_measured, p_predicted and log_ratio.
    by : str or None, default None
        A column to group on (e.g. "tau"); None: one group named "all".

    Returns
    -------
    pandas.DataFrame
        One row per group: group, n, mean_p_measured, mean_p_predicted, se_diff (sd of
        p_measured - p_predicted over simulations / sqrt(n): the two agree when |difference| < 3 se_diff;
        NaN for n = 1), z (difference / se_diff), mean_log_ratio (log E_q / E_post) and se_log_ratio.

    Raises
    ------
    KeyError
        When ``by`` is not a column of ``table`` (pandas' groupby).
    AttributeError
        When p_measured, p_predicted or log_ratio is missing (read as attributes).

    Source: project addition.
    """
    groups = table.groupby(by) if by else [("all", table)]
    rows = []
    for name, t in groups:
        n = len(t)
        diff = t.p_measured - t.p_predicted
        se = float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
        rows.append({"group": name, "n": n, "mean_p_measured": float(t.p_measured.mean()),
                     "mean_p_predicted": float(t.p_predicted.mean()), "se_diff": se,
                     "z": float(diff.mean() / se) if se > 0 else float("nan"),
                     "mean_log_ratio": float(t.log_ratio.mean()),
                     "se_log_ratio": float(t.log_ratio.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")})
    return pd.DataFrame(rows)


def rg_nuts_taus(gv, seed: int = 0, *, num_chains: int = 4, num_warmup: int = 500, num_samples: int = 500,
                 target_accept: float = 0.9) -> dict:
    """NUTS draws of (tau_u, tau_v, tau_bv) from the exact posterior of `ppl_models.rg.model` on RG's VSBC grid.

    The grid is `validation.models.rg.vsbc_grid` (10 users x 12 items), the hyperprior that of
    `validation.models.rg.CrosscheckConfig` (clamped user biases), u, v and b non-centred
    (``LocScaleReparam(0)``, as `validation.models.rg.nuts_reference`); float64.

    Parameters
    ----------
    gv : array_like, shape (E,), float
        The 0/1 outcomes of the grid's edges.
    seed : int, default 0
        NUTS seed.
    num_chains : int, keyword-only, default 4
    num_warmup : int, keyword-only, default 500
    num_samples : int, keyword-only, default 500
        Draws kept per chain.
    target_accept : float, keyword-only, default 0.9
        NUTS's target acceptance probability.

    Returns
    -------
    dict
        tau_u, tau_v, tau_bv float64 (num_chains, num_samples); max_rhat, min_ess_bulk (float, ArviZ, over
        the three), divergences (int).

    Raises
    ------
    None of its own; NumPyro's errors propagate.

    Source: project addition (the exact reference of `rg_tau_study`).
    """
    import jax
    import jax.numpy as jnp
    from numpyro.handlers import reparam
    from numpyro.infer.reparam import LocScaleReparam

    from custom_inference import arviz_io
    from ppl_models import rg as ppl
    from validation.checks import crosscheck as xc
    from validation.models import rg as mr

    config = mr.CrosscheckConfig()
    users, items = mr.vsbc_grid()
    model = reparam(ppl.model, config={s: LocScaleReparam(0) for s in ("u", "v", "b_item")})
    with jax.enable_x64(True):
        args = (jnp.asarray(users), jnp.asarray(items), jnp.asarray(gv, jnp.float64))
    run = xc.run_nuts(model, *args, 10, 12, config.K, config.hyper, seed=seed, num_chains=num_chains,
                      num_warmup=num_warmup, num_samples=num_samples, target_accept=target_accept, progress=False)
    post = arviz_io.group_arrays(run.idata)
    taus = {t: np.asarray(post[t], np.float64) for t in ("tau_u", "tau_v", "tau_bv")}
    summ = arviz_io.az.summary(arviz_io.az.convert_to_inference_data(taus), kind="diagnostics")
    return {**taus, "max_rhat": float(summ["r_hat"].max()), "min_ess_bulk": float(summ["ess_bulk"].min()),
            "divergences": int(run.divergences)}


# ---------------------------------------------------------------------------------------------
# C. a logistic random intercept under the Jaakkola-Jordan bound (RG's tau_bv when u.v carries nothing)


def _check_counts(counts, n_trials):
    y = np.asarray(counts, np.float64)
    if y.ndim != 1 or np.any(y < 0) or np.any(y > n_trials) or int(n_trials) < 1:
        raise ValueError(f"counts must be (J,) in 0..n_trials, n_trials >= 1; got {y}, {n_trials}")
    return y


def logistic_intercept_meanfield(counts, n_trials: int, a0: float, b0: float, *, tol: float = 1e-14,
                                 max_iter: int = 100000) -> FixedPoint:
    """The Jaakkola-Jordan mean-field fixed point of a logistic random intercept (model C of the module docstring).

    b_n ~ N(0, 1/tau), tau ~ Gamma(a0, b0); y_n of ``n_trials`` Bernoulli(sigma(b_n)) trials are ones. With
    xi_n^2 = m_n^2 + v_n (optimal, every trial of item n has the same E[b_n^2]), the bound is Gaussian in b_n
    with precision 2 n lam(xi_n) and linear coefficient y_n - n / 2, so q(b_n) = N(h / P, 1 / P),
    P = E[tau] + 2 n lam(xi_n), h = y_n - n / 2, and q(tau) = Gamma(a0 + J/2, b0 + sum (m^2 + v) / 2).
    Iterated (xi, b, tau) from E[tau] = a0 / b0 to a relative change below ``tol`` (this is RG's model with
    u.v = 0, written here independently of `custom_inference.rg`).

    Parameters
    ----------
    counts : array_like, shape (J,), float or int
        Successes per item, each in 0..n_trials.
    n_trials : int >= 1
        Bernoulli trials per item.
    a0, b0 : float > 0
        Shape and rate of tau's Gamma prior (not checked).
    tol : float, keyword-only, default 1e-14
        Convergence threshold on the largest relative change of an iteration.
    max_iter : int, keyword-only, default 100000
        At most this many iterations.

    Returns
    -------
    FixedPoint
        mean, var float64 (J,) of q(b); shape a0 + J/2, rate; ``roots`` float64 (1,) holding the E[tau]
        reached.

    Raises
    ------
    ValueError
        When ``counts`` is not 1-D or has values outside 0..n_trials, or ``n_trials`` < 1.
    RuntimeError
        When ``max_iter`` iterations do not converge.
    ZeroDivisionError
        For ``b0`` = 0 (Python's; ``a0``, ``b0`` are not checked).

    Source: project addition (003_203f63200c0d7157.txt eqs. (10)-(17) with u.v = 0).
    """
    y = _check_counts(counts, n_trials)
    n = float(n_trials)
    shape, e = a0 + 0.5 * y.size, a0 / b0
    m, v = np.zeros_like(y), np.full_like(y, 1.0 / e)
    for _ in range(int(max_iter)):
        lam2 = 2.0 * n * _jj_lambda(np.sqrt(m**2 + v))
        P = e + lam2
        m_new, v_new = (y - 0.5 * n) / P, 1.0 / P
        rate = b0 + 0.5 * np.sum(m_new**2 + v_new)
        e_new = shape / rate
        change = max(abs(e_new - e) / e, np.max(np.abs(v_new - v) / v), np.max(np.abs(m_new - m) * np.sqrt(P)))
        m, v, e = m_new, v_new, e_new
        if change < tol:
            return FixedPoint(m, v, float(shape), float(rate), np.array([e]))
    raise RuntimeError(f"logistic_intercept_meanfield: no convergence in {max_iter} iterations")


def logistic_intercept_posterior(counts, n_trials: int, a0: float, b0: float, *, n_grid: int = 2001,
                                 n_z: int = 2001) -> GridPosterior:
    """The exact posterior of tau in the model of `logistic_intercept_meanfield`.

    p(tau | y) ~ Gamma(tau; a0, b0) prod_n int N(b; 0, 1/tau) sigma(b)^y_n (1 - sigma(b))^(n - y_n) db,
    each integral over ``n_z`` points of b in [-9 s, 9 s], s = min(1 / sqrt(tau), 60 / 9) (trapezoid; the
    prior's 9 sd, capped at |b| = 60, beyond which no likelihood of at most 10 trials changes by more
    than e^-50 and a prior that wide has no mass under any tau that matters), then `grid_posterior`.

    Parameters
    ----------
    counts : array_like, shape (J,), float or int
        Successes per item, each in 0..n_trials.
    n_trials : int >= 1
        Bernoulli trials per item.
    a0, b0 : float > 0
        Shape and rate of tau's Gamma prior.
    n_grid : int, keyword-only, default 2001
        Grid points of tau (`grid_posterior`).
    n_z : int, keyword-only, default 2001
        Quadrature points of each integral over b.

    Returns
    -------
    GridPosterior
        The posterior of tau.

    Raises
    ------
    ValueError
        On bad ``counts`` / ``n_trials`` (as `logistic_intercept_meanfield`), and from `grid_posterior`.
    ZeroDivisionError
        For ``b0`` = 0 (Python's; ``a0``, ``b0`` are not checked).

    Source: project addition (the exact marginal likelihood by quadrature).
    """
    from scipy.special import log_expit, logsumexp

    y = _check_counts(counts, n_trials)
    vals, mult = np.unique(y, return_counts=True)
    z = np.linspace(-9.0, 9.0, n_z)

    def log_density(tau):
        sd = 1.0 / np.sqrt(tau)
        scale = np.minimum(sd, 60.0 / 9.0)[:, None]
        b = scale * z[None, :]  # (G, Z)
        logw = stats.norm.logpdf(b, 0.0, sd[:, None]) + np.log(scale * (z[1] - z[0]))
        lik = vals[:, None, None] * log_expit(b)[None] + (n_trials - vals)[:, None, None] * log_expit(-b)[None]
        per = logsumexp(lik + logw[None], axis=2)  # (V, G)
        return stats.gamma.logpdf(tau, a0, scale=1.0 / b0) + mult @ per

    return grid_posterior(log_density, n_grid=n_grid)


def rg_nuts_study(n_sims: int = 30, master_seed: int = 0, *, first: int = 0, num_chains: int = 4, num_warmup: int = 500,
                  num_samples: int = 500) -> pd.DataFrame:
    """RG VB's VSBC simulations of tau_u, tau_v, tau_bv against NUTS on the same data (`rg_nuts_taus`).

    Simulation s and its fit are VSBC's (as `rg_tau_study`); NUTS runs with the fit seed.

    Parameters
    ----------
    n_sims : int, default 30
        VSBC's number of simulations.
    master_seed : int, default 0
        VSBC's master seed.
    first : int, keyword-only, default 0
        Runs simulations ``first`` .. ``n_sims`` - 1.
    num_chains, num_warmup, num_samples : int, keyword-only, defaults 4, 500, 500
        Of `rg_nuts_taus`.

    Returns
    -------
    pandas.DataFrame
        Long, one row per simulation and precision: sim, tau, tau_true, e_q, e_post (NUTS mean), log_ratio
        log(e_q / e_post), p_measured F_q(tau_true), p_predicted E_NUTS[F_q(tau)], rank_post
        Pr_NUTS(tau < tau_true) (uniform if NUTS is right); per simulation: uv_rms (RMS over the edges of
        E_q[u_m] . E_q[v_n]: near 0 when q has collapsed the factors, VB's pruning), the NUTS diagnostics
        (max_rhat, min_ess_bulk, divergences) and, for tau_bv, the theory of C: log_ratio_theory =
        log(E_q / E_post) of `logistic_intercept_meanfield` against `logistic_intercept_posterior` on the
        simulation's item counts (NaN for tau_u, tau_v).

    Raises
    ------
    ValueError
        Unless 0 <= ``first`` < ``n_sims``.
    RuntimeError
        From `logistic_intercept_meanfield` when model C does not converge.

    Source: project addition (module docstring, B).
    """
    from validation.models import rg as mr

    config = mr.CrosscheckConfig()
    a0, b0 = float(config.hyper.alpha), float(config.hyper.beta)
    simulate = mr.vsbc_adapters("vb", config)[0]
    users, items = mr.vsbc_grid()
    rows = []
    for i, seed in _sims(master_seed, n_sims, first):
        truth, gv = simulate(int(seed))
        fs = _fit_seed(int(seed))
        state = mr.vsbc_fit_state(gv, fs, config)
        mu = np.asarray(state.u_h) / np.asarray(state.u_prec)
        mv = np.asarray(state.v_h) / np.asarray(state.v_prec)
        uv_rms = float(np.sqrt(np.mean(np.sum(mu[users] * mv[items], axis=1) ** 2)))
        nuts = rg_nuts_taus(gv, fs, num_chains=num_chains, num_warmup=num_warmup, num_samples=num_samples)
        counts = np.bincount(items, weights=gv, minlength=12)
        theory = logistic_intercept_meanfield(counts, 10, a0, b0).e / logistic_intercept_posterior(counts, 10, a0, b0).mean()
        for tau in ("tau_u", "tau_v", "tau_bv"):
            shape, rate = float(getattr(state, f"{tau}_shape")), float(getattr(state, f"{tau}_rate"))
            F = lambda t: stats.gamma.cdf(t, shape, scale=1.0 / rate)  # noqa: E731
            draws = nuts[tau].ravel()
            rows.append({"sim": i, "tau": tau, "tau_true": float(truth[tau]), "e_q": shape / rate,
                         "e_post": float(draws.mean()), "log_ratio": float(np.log(shape / rate / draws.mean())),
                         "p_measured": float(F(truth[tau])), "p_predicted": float(np.mean(F(draws))),
                         "rank_post": float(np.mean(draws < truth[tau])), "uv_rms": uv_rms,
                         "max_rhat": nuts["max_rhat"], "min_ess_bulk": nuts["min_ess_bulk"],
                         "divergences": nuts["divergences"],
                         "log_ratio_theory": float(np.log(theory)) if tau == "tau_bv" else float("nan")})
    return pd.DataFrame(rows)
