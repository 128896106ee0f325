"""Step-size schedules shared by the stochastic solvers (written once for rg, sibm and vbfm).

Robbins-Monro step sizes eps_t = (t + tau0)^(-kappa), t = 0, 1, ... (Robbins and Monro 1951;
Hoffman et al. 2013 sec. 2.4 writes rho_t = (t + tau)^(-kappa)). For kappa in (0.5, 1] they satisfy
sum_t eps_t = inf and sum_t eps_t^2 < inf, the conditions the seeds ask for:

- ``002_5408d341cb9fc544.txt`` sec. 2.4 and Algorithm 1 (SIBM): rho_ui, rho_vj, rho_z from "a simple
  Robbins-Monro schedule", t the number of earlier updates of that row, column or z
  (`custom_inference.sibm`, tau0 = tau).
- ``003_203f63200c0d7157.txt`` sec. 5.1 (random graphs): P^(t) = eps_t P + (1 - eps_t) P^(t-1) with
  sum eps_t = inf, sum eps_t^2 < inf (`custom_inference.rg`).
- ``004_90693a0965f06816.txt`` eqs. 4.27-4.28 (OVBFM, Algorithm 4 line 28): eta = (1 + t)^(-lambda),
  t the number of earlier updates, i.e. tau0 = 1, kappa = lambda (`custom_inference.vbfm.svi_step`).

tau0 = 1 makes the first step exact (eps_0 = 1): the first update jumps to its target.
"""

from __future__ import annotations

import math

__all__ = ["robbins_monro", "robbins_monro_array", "check_robbins_monro"]


def check_robbins_monro(tau0: float, kappa: float) -> None:
    """Raise ValueError unless tau0 > 0 and kappa in (0.5, 1] (the Robbins-Monro conditions).

    For drivers that promise convergence (``003`` sec. 5.1; ``002`` sec. 2.4); `robbins_monro`
    itself only needs tau0 > 0 and kappa >= 0 (OVBFM accepts the thesis' boundary lambda = 0.5
    and lambda = 0, a constant step 1).

    Parameters
    ----------
    tau0 : float
        The delay of the schedule; must be > 0.
    kappa : float
        The forgetting rate; must be in (0.5, 1].

    Returns
    -------
    None
        Returns only when both conditions hold.

    Raises
    ------
    ValueError
        Naming the argument: "tau0 must be > 0, got ...", "kappa must be in (0.5, 1]
        (Robbins-Monro), got ..." (NaN fails both).
    TypeError
        Not of its own: Python's comparison raises it for a non-numeric ``tau0`` or ``kappa``
        (e.g. a string).

    Source: ``003_203f63200c0d7157.txt`` sec. 5.1 and ``002_5408d341cb9fc544.txt`` sec. 2.4 (the
    conditions); the check itself is a project addition.
    """
    if not tau0 > 0:
        raise ValueError(f"tau0 must be > 0, got {tau0!r}")
    if not 0.5 < kappa <= 1.0:
        raise ValueError(f"kappa must be in (0.5, 1] (Robbins-Monro), got {kappa!r}")


def robbins_monro(t: int, tau0: float = 1.0, kappa: float = 0.7) -> float:
    """eps_t = (t + tau0)^(-kappa), a Python float (host side; one step of a Python-loop driver).

    Parameters
    ----------
    t : int >= 0
        The number of earlier updates (t = 0 is the first step).
    tau0 : float > 0, default 1.0
        The delay; tau0 = 1 gives eps_0 = 1.
    kappa : float >= 0, default 0.7
        The forgetting rate; kappa in (0.5, 1] for the Robbins-Monro conditions (check with
        `check_robbins_monro`); kappa = 0 gives the constant step tau0^0 = 1.

    Returns
    -------
    float
        ``float((float(t) + float(tau0)) ** (-float(kappa)))``: the same value as
        ``(t + tau0) ** (-kappa)`` and as ``(1.0 + float(t)) ** (-float(lam))`` (OVBFM, tau0 = 1).

    Raises
    ------
    ValueError
        If t < 0, tau0 <= 0, kappa < 0, or any of them is not a finite real number (booleans
        and strings included).

    Source: ``003`` sec. 5.1; ``002`` sec. 2.4 / Algorithm 1; ``004`` eqs. 4.27-4.28 (module docstring).
    """
    for name, val in (("t", t), ("tau0", tau0), ("kappa", kappa)):
        if isinstance(val, (bool, str, bytes)):
            raise ValueError(f"{name} must be a real number, got {val!r}")
        try:
            finite = math.isfinite(float(val))
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a real number, got {val!r}") from None
        if not finite:
            raise ValueError(f"{name} must be finite, got {val!r}")
    if not float(t) >= 0:
        raise ValueError(f"t must be >= 0, got {t!r}")
    if not float(tau0) > 0:
        raise ValueError(f"tau0 must be > 0, got {tau0!r}")
    if not float(kappa) >= 0:
        raise ValueError(f"kappa must be >= 0, got {kappa!r}")
    return float((float(t) + float(tau0)) ** (-float(kappa)))


def robbins_monro_array(count, tau0, kappa):
    """Elementwise (tau0 + count)^(-kappa) for arrays of update counts; traceable under ``jax.jit``.

    Parameters
    ----------
    count : jax.Array or numpy.ndarray, any shape, int or float
        The number of earlier updates of each row / column / scalar (``002`` Algorithm 1: one
        counter per u_i, v_j and z).
    tau0 : float or array broadcasting with ``count``
        The delay (> 0; not checked).
    kappa : float or array broadcasting with ``count``
        The forgetting rate (not checked).

    Returns
    -------
    array, the broadcast shape of the operands, their float dtype
        The step sizes. No value checks (they cannot run on traced values): validate tau0, kappa
        once outside the jit with `check_robbins_monro`.

    Raises
    ------
    TypeError
        Not of its own (no value checks; see above): jax raises it for operands that do not
        broadcast (numpy raises ValueError when all operands are numpy arrays).

    Source: ``002`` sec. 2.4.
    """
    return (tau0 + count) ** (-kappa)
