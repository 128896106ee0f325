"""The executable errata table: printed equations of the seeds that are wrong.

Each `Erratum` pairs an equation as printed in a seed with the corrected one and
names the check that tells them apart. `run_errata` runs every check on both
forms: a row passes when the printed form fails its check and the corrected form
passes it. ``factorbayes errata`` prints the table.

Checks used (see `validation.updates`):
- "stationarity": the update, applied inside a CAVI sweep on a small simulated
  data set, must leave zero gradient of the ELBO in its block (``jax.grad``);
- "conditional": the closed-form complete conditional must equal the brute-force
  normalized conditional on a grid (total-variation distance).
Hyperparameters are chosen distinct (a != a' != c ...) so that a swapped symbol
shows; a check that cannot tell two forms apart would not be a check.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy import stats

from custom_inference import hpf as cavi
from custom_inference.data import Observations
from custom_inference.gamma import gamma_log_mean, gamma_mean
from ppl_models import hpf as ppl

from . import hpf as vhpf
from .updates import conditional_distance

__all__ = ["Erratum", "ERRATA", "all_errata", "run_errata"]

# distinct hyperparameters so that every swapped symbol changes the result
_HYPER = ppl.HPFHyper(a=0.4, a_prime=1.7, b_prime=0.6, c=0.8, c_prime=1.3, d_prime=2.5)
_STATIONARITY_RTOL = 1e-7
_TV_TOL = 1e-4


@dataclass(frozen=True)
class Erratum:
    """One row of the errata table.

    ``check(form)`` runs the check on ``form`` in {"printed", "corrected"} and
    returns (passed, measured value).
    """

    seed_file: str
    location: str
    printed: str
    corrected: str
    why: str
    check_name: str
    check: Callable[[str], tuple[bool, float]]


@functools.lru_cache(maxsize=None)
def _small_data(seed: int = 0):
    with jax.enable_x64(True):
        _, y = ppl.simulate(jax.random.PRNGKey(seed), 10, 8, 3, _HYPER)
    return Observations.from_dense(np.asarray(y))


def _stationarity_check(block: str, printed_update) -> Callable[[str], tuple[bool, float]]:
    """Run the HPF block sequence with the named block replaced by the printed form."""

    def check(form: str):
        blocks = []
        for name, update, fields in cavi.BLOCKS:
            if name == block:
                blocks.append((name, printed_update if form == "printed" else update, fields))
        table = vhpf.update_checks(_small_data(), _HYPER, 3, blocks=blocks)
        row = table[table.block == block].iloc[0]
        return bool(row.passed), float(row.grad_after)

    return check


# -- printed forms (seed 001, batch algorithm figure and text) ---------------------


def _printed_kappa_shape(state, data, hyper, phi=None):
    # figure: kappa_shape = a + K a'
    k = state.gamma_shape.shape[1]
    return state._replace(kappa_shape=jnp.full_like(state.kappa_shape, hyper.a + k * hyper.a_prime))


def _printed_kappa_rate(state, data, hyper, phi=None):
    # figure: kappa_rate = b' + sum_k (digamma(gamma_shape) - log gamma_rate)  (shape kept correct)
    new = cavi.update_kappa(state, data, hyper, phi)
    rate = hyper.b_prime + gamma_log_mean(state.gamma_shape, state.gamma_rate).sum(axis=1)
    return new._replace(kappa_rate=rate)


def _printed_tau_shape(state, data, hyper, phi=None):
    k = state.lambda_shape.shape[1]
    return state._replace(tau_shape=jnp.full_like(state.tau_shape, hyper.c + k * hyper.c_prime))


def _printed_tau_rate(state, data, hyper, phi=None):
    new = cavi.update_tau(state, data, hyper, phi)
    rate = hyper.d_prime + gamma_log_mean(state.lambda_shape, state.lambda_rate).sum(axis=1)
    return new._replace(tau_rate=rate)


def _printed_gamma_text(state, data, hyper, phi):
    # text update: gamma_uk = <a + sum_i y phi, b + sum_i E beta_ik>, a fixed rate b (the
    # non-hierarchical model's) in place of E[xi_u]; b read as the prior mean b'.
    new = cavi.update_gamma(state, data, hyper, phi)
    beta_sum = gamma_mean(state.lambda_shape, state.lambda_rate).sum(axis=0)
    return new._replace(gamma_rate=jnp.broadcast_to(hyper.b_prime + beta_sum, new.gamma_rate.shape))


# -- complete conditionals on a grid -----------------------------------------------


def _xi_conditional_check(form: str):
    """xi_u | theta_u under the model's prior Ga(a', a'/b'): printed Ga(a' + K a, b' + sum theta)."""
    rng = np.random.default_rng(0)
    h, k = _HYPER, 3
    theta = rng.gamma(h.a, 1.0, size=k)
    grid = np.geomspace(1e-6, 60, 20001)

    def log_unnorm(x):
        prior = stats.gamma.logpdf(x, h.a_prime, scale=h.b_prime / h.a_prime)
        return prior + stats.gamma.logpdf(theta[None, :], h.a, scale=1.0 / x[:, None]).sum(axis=1)

    prior_rate = h.b_prime if form == "printed" else h.a_prime / h.b_prime
    claimed = lambda x: stats.gamma.logpdf(x, h.a_prime + k * h.a, scale=1.0 / (prior_rate + theta.sum()))  # noqa: E731
    tv = conditional_distance(log_unnorm, claimed, grid)
    return tv < _TV_TOL, tv


def _beta_conditional_check(form: str):
    """beta_ik | eta_i, theta, z: printed Ga(a + sum_u z_uik, eta_i + sum theta_uk); shape must be c."""
    rng = np.random.default_rng(1)
    h, n_users = _HYPER, 6
    eta = 1.3
    theta_k = rng.gamma(1.0, 1.0, size=n_users)
    z_k = rng.poisson(2.0, size=n_users)
    grid = np.geomspace(1e-8, 40, 20001)

    def log_unnorm(x):
        prior = stats.gamma.logpdf(x, h.c, scale=1.0 / eta)
        return prior + stats.poisson.logpmf(z_k[None, :], theta_k[None, :] * x[:, None]).sum(axis=1)

    shape = (h.a if form == "printed" else h.c) + z_k.sum()
    claimed = lambda x: stats.gamma.logpdf(x, shape, scale=1.0 / (eta + theta_k.sum()))  # noqa: E731
    tv = conditional_distance(log_unnorm, claimed, grid)
    return tv < _TV_TOL, tv


_SEED001 = "001_30a2018ec18c20b9.txt"

ERRATA: tuple[Erratum, ...] = (
    Erratum(
        _SEED001, "batch algorithm figure, initialisation",
        "kappa_u^shp = a + K a'",
        "kappa_u^shp = a' + K a",
        "xi_u has prior shape a' and appears as the rate of K Gamma(a, xi_u) weights, each adding a to the shape.",
        "stationarity", _stationarity_check("kappa", _printed_kappa_shape),
    ),
    Erratum(
        _SEED001, "batch algorithm figure, step 2",
        "kappa_u^rte = b' + sum_k (Psi(gamma_uk^shp) - log gamma_uk^rte)",
        "kappa_u^rte = a'/b' + sum_k gamma_uk^shp / gamma_uk^rte",
        "xi_u enters log p(theta_uk | xi_u) through -xi_u theta_uk, so its rate collects E[theta_uk], not E[log theta_uk]; the prior rate is a'/b' in the model used.",
        "stationarity", _stationarity_check("kappa", _printed_kappa_rate),
    ),
    Erratum(
        _SEED001, "batch algorithm figure, initialisation",
        "tau_i^shp = c + K c'",
        "tau_i^shp = c' + K c",
        "as for kappa: eta_i has prior shape c' and K Gamma(c, eta_i) children.",
        "stationarity", _stationarity_check("tau", _printed_tau_shape),
    ),
    Erratum(
        _SEED001, "batch algorithm figure, step 3",
        "tau_i^rte = d' + sum_k (Psi(lambda_ik^shp) - log lambda_ik^rte)",
        "tau_i^rte = c'/d' + sum_k lambda_ik^shp / lambda_ik^rte",
        "as for kappa: the rate collects E[beta_ik].",
        "stationarity", _stationarity_check("tau", _printed_tau_rate),
    ),
    Erratum(
        _SEED001, "text, update of gamma_uk (and lambda_ik)",
        "gamma_uk = <a + sum_i y_ui phi_uik, b + sum_i lambda_ik^shp / lambda_ik^rte>",
        "gamma_uk = <a + sum_i y_ui phi_uik, kappa_u^shp / kappa_u^rte + sum_i lambda_ik^shp / lambda_ik^rte>",
        "in the hierarchical model the rate of theta_uk is xi_u, so the update uses E[xi_u], not a constant b (the figure has it right).",
        "stationarity", _stationarity_check("gamma", _printed_gamma_text),
    ),
    Erratum(
        _SEED001, "complete conditional of xi_u",
        "xi_u | theta ~ Ga(a' + K a, b' + sum_k theta_uk)",
        "xi_u | theta ~ Ga(a' + K a, a'/b' + sum_k theta_uk)",
        "the printed form is the conditional under a prior rate b'; the published HPF model and hpfrec use prior Ga(a', a'/b') (mean b'), whose conditional has rate a'/b' + sum theta. A convention clash rather than an algebra slip.",
        "conditional", _xi_conditional_check,
    ),
    Erratum(
        _SEED001, "complete conditional of beta_ik (eq. item-weight-cc)",
        "beta_ik | theta, eta, z ~ Ga(a + sum_u z_uik, eta_i + sum_i theta_uk)",
        "beta_ik | theta, eta, z ~ Ga(c + sum_u z_uik, eta_i + sum_u theta_uk)",
        "the item weights have prior shape c (the printed a is the users'), and the exposure sum runs over users.",
        "conditional", _beta_conditional_check,
    ),
)


# modules that hold the errata of their own model family, each as a tuple ``ERRATA``
_FAMILY_MODULES = ("sbmf", "bpmf", "fm_mcmc", "vbfm", "sibm", "rg")


def all_errata() -> tuple[Erratum, ...]:
    """Every erratum of the project: HPF's (this module) and each model family's ``ERRATA``.

    The family modules (``validation.sbmf``, ``validation.vbfm``, ...) import `Erratum` from
    here, so they are imported lazily; a family whose module does not exist yet is skipped.
    """
    import importlib

    entries = list(ERRATA)
    for name in _FAMILY_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__package__}.{name}":
                raise
            continue
        entries.extend(getattr(module, "ERRATA", ()))
    return tuple(entries)


def run_errata(entries=ERRATA) -> pd.DataFrame:
    """Run every erratum's check on the printed and the corrected form.

    Returns a DataFrame with one row per entry: seed_file, location, printed,
    corrected, check, printed_value, corrected_value, printed_passes,
    corrected_passes, ok (= printed fails and corrected passes).
    """
    rows = []
    for e in entries:
        p_ok, p_val = e.check("printed")
        c_ok, c_val = e.check("corrected")
        rows.append(
            {
                "seed_file": e.seed_file,
                "location": e.location,
                "printed": e.printed,
                "corrected": e.corrected,
                "check": e.check_name,
                "printed_value": p_val,
                "corrected_value": c_val,
                "printed_passes": p_ok,
                "corrected_passes": c_ok,
                "ok": (not p_ok) and c_ok,
            }
        )
    return pd.DataFrame(rows)
