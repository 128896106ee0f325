"""Independent checks of printed formulas: the shared Monte Carlo test and the verdict record.

The checks in `vbfm_printed`, `psm_printed`, `jj_printed`, `hpf_printed`, `bpmf_printed`,
`sbmf_printed`, `fm_printed` and `pfm_printed` judge a cached quantity or a conditional of a solver (and
the seed's printed form of it) against an estimate that does not use the project's own derivation: Monte
Carlo from q (draws of the latent variables, the quantity computed by its definition on every draw),
exact enumeration of a small discrete case, a brute-force grid, Bayes' rule evaluated numerically, or
the program's log joint normalized on a grid (`normalized_moments`). This module holds the statistical
rule and the quadrature they share; the equation-by-equation verdicts are listed in
``docs/equation_verdicts.md``.

Rule. For a cached value c and n i.i.d. draws f_1..f_n of an unbiased estimator of the same
expectation, z = (c - mean f) / (sd f / sqrt n). The check passes when max |z| over all compared
entries is <= `Z_MAX` = 5: a two-sided normal tail of 5.7e-7 per entry, so a check comparing up to
200 entries raises a false alarm with probability <= 1.2e-4. A printed form "is rejected" when its
max |z| exceeds `Z_MAX` on the same draws.

Source: project addition (issue 26 item 1; DESIGN.md, "errata": the check must be independent of the
project's derivation).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from scipy import integrate

__all__ = ["Z_MAX", "mc_z", "x64", "normalized_moments"]

#: max |z| accepted (module docstring: false-alarm rate <= 1.2e-4 for <= 200 compared entries).
Z_MAX = 5.0


def mc_z(samples, value) -> float:
    """max |z| of ``value`` against the Monte Carlo mean of ``samples`` (the module docstring's rule).

    z = |value - mean| / (sd / sqrt(n)) per entry. Entries whose draws are constant (se <= 1e-12 max(|mean|, 1))
    count as z = 0 when they agree to 1e-10 max(|mean|, 1) and as inf otherwise.

    Parameters
    ----------
    samples : array_like, shape (n, ...), float
        n >= 2 i.i.d. draws of an unbiased estimator of the compared quantity.
    value : array_like, float, broadcastable to ``samples.shape[1:]``
        The cached (or printed) value.

    Returns
    -------
    float
        The largest |z| over the entries (0.0 when there are none); compare with `Z_MAX`.

    Raises
    ------
    ValueError
        When ``samples`` has fewer than 2 draws; NumPy's ValueError when ``value`` does not broadcast.

    Source: project addition.
    """
    samples = np.asarray(samples, np.float64)
    if samples.shape[0] < 2:
        raise ValueError(f"samples: need at least 2 draws, got {samples.shape[0]}")
    value = np.broadcast_to(np.asarray(value, np.float64), samples.shape[1:])
    mean = samples.mean(0)
    se = samples.std(0, ddof=1) / np.sqrt(samples.shape[0])
    diff = np.abs(value - mean)
    scale = np.maximum(np.abs(mean), 1.0)
    exact = se <= 1e-12 * scale   # constant draws (up to the rounding of their mean)
    z = np.where(exact, np.where(diff <= 1e-10 * scale, 0.0, np.inf),
                 diff / np.where(exact, 1.0, se))
    return float(np.max(z)) if z.size else 0.0



def normalized_moments(logf, lo: float, hi: float, n_grid: int, *, log_x: bool = False):
    """Mean and variance of the density proportional to exp(logf(x)) by Simpson's rule on a grid.

    Parameters
    ----------
    logf : callable
        numpy.ndarray (n_grid,) float64 -> (n_grid,): the unnormalized log density of x (e.g. a program's
        log joint with one scalar moved).
    lo, hi : float
        The grid's ends, ``lo`` < ``hi``: in x, or in u = log x when ``log_x``.
    n_grid : int
        Odd, >= 3: the number of grid points.
    log_x : bool, keyword-only, default False
        Grid in u = log x (for a positive scalar: the density in u is p(e^u) e^u, smooth also for a Gamma
        shape below 1).

    Returns
    -------
    tuple of float
        (mean, variance, edge) of x; edge is the largest log density at the grid's two ends minus its
        maximum (<= -30 means the grid holds the mass to ~1e-13).

    Raises
    ------
    ValueError
        Unless ``lo`` < ``hi`` and ``n_grid`` >= 3 is odd.

    Source: project addition (the normalized conditional of issue 26 item 1).
    """
    if not lo < hi:
        raise ValueError(f"need lo < hi, got {lo!r}, {hi!r}")
    if n_grid < 3 or n_grid % 2 == 0:
        raise ValueError(f"n_grid must be odd and >= 3 (Simpson's rule), got {n_grid!r}")
    t = np.linspace(lo, hi, n_grid)
    x = np.exp(t) if log_x else t
    logp = np.asarray(logf(x), np.float64) + (t if log_x else 0.0)      # + log |dx/du|
    w = np.exp(logp - logp.max())
    z = integrate.simpson(w, x=t)
    mean = integrate.simpson(w * x, x=t) / z
    var = integrate.simpson(w * (x - mean) ** 2, x=t) / z
    return float(mean), float(var), float(max(logp[0], logp[-1]) - logp.max())


def x64(fn):
    """Decorator: run ``fn`` under ``jax.enable_x64(True)``.

    Every check is float64, also when the caller (e.g. the errata CLI) has not switched JAX to 64 bits.

    Parameters
    ----------
    fn : callable
        The function to wrap (any signature).

    Returns
    -------
    callable
        ``fn`` wrapped (`functools.wraps`), returning what ``fn`` returns.

    Raises
    ------
    None of its own; the wrapper raises whatever ``fn`` raises.

    Source: project addition (DESIGN.md: validation runs in float64).
    """

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return wrapped
