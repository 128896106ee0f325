"""HPF (seed 001): the auxiliary-count parts of the complete conditionals and of the ELBO by exact
enumeration of every allocation z_ui of y_ui into K components, and E_q[log theta] by Monte Carlo.

- `aux_conditional_tv`: eq. (aux-cc), z_ui | theta, beta, y ~ Mult(y_ui, theta_u beta_i / theta_u . beta_i),
  against the brute-force normalised prod_k Poisson(z_k; theta_uk beta_ik) over all allocations;
- `phi_update_tv`: batch figure step 1, phi_ui ∝ exp{E log theta_uk + E log beta_ik}: Mult(y_ui, phi_ui)
  against the brute-force maximiser exp E_q[log p(z | theta, beta)] normalised over the allocations;
- `elog_mc`: E_q[log theta_uk] = Psi(shape) - log(rate) (used by step 1 and the kappa / tau rates)
  against Monte Carlo from the Gamma factors;
- `elbo_enumeration_mc`: the solver's ELBO at a phi that is NOT optimal against Monte Carlo over
  (theta, xi, beta, eta) ~ q with, on each draw, the exact sum over z ~ Mult(y, phi) of
  log p(z | theta, beta) - log q(z) (so the log z! cancellation of the solver is not assumed).

Source: ``001_30a2018ec18c20b9.txt``, complete conditionals and batch algorithm figure; checks:
project addition (issue 26 item 1).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy import special, stats

from custom_inference import hpf as cavi
from custom_inference.gamma import gamma_log_mean
from custom_inference.data import Observations
from validation.models import hpf as hpf_checks
from validation.models.printed_forms import Z_MAX, mc_z, x64

__all__ = ["allocations", "aux_conditional_tv", "phi_update_tv", "elog_mc", "elbo_enumeration_mc", "small_counts"]


def allocations(y: int, K: int) -> np.ndarray:
    """Every allocation z in N^K of a count y into K components (sum z = y).

    Parameters
    ----------
    y : int >= 0
        The count.
    K : int >= 1
        Number of components.

    Returns
    -------
    numpy.ndarray, shape (n_alloc, K), int
        n_alloc = C(y + K - 1, K - 1) rows, in lexicographic order.

    Raises
    ------
    ValueError
        For ``y`` < 0 or ``K`` < 1.

    Source: project addition.
    """
    if y < 0 or K < 1:
        raise ValueError(f"need y >= 0 and K >= 1, got y={y}, K={K}")
    return np.array([z for z in itertools.product(range(y + 1), repeat=K) if sum(z) == y], dtype=int)


def _log_mult(z, y, p):
    return special.gammaln(y + 1) - special.gammaln(z + 1).sum(-1) + (z * np.log(p)).sum(-1)


def small_counts(seed: int = 0) -> Observations:
    """A small count data set for the enumeration checks.

    A 6 x 5 count matrix y ~ Poisson(theta_u . beta_i), theta, beta ~ Gamma(1, 1) (K = 2, NumPy), counts
    clipped to <= 6 so that the enumeration stays small, and y[0, 0] >= 1.

    Parameters
    ----------
    seed : int, default 0
        NumPy seed.

    Returns
    -------
    custom_inference.data.Observations
        The matrix as observations (`Observations.from_dense`, float values), 6 users x 5 items.

    Raises
    ------
    None of its own.

    Source: project addition (the model of 001_30a2018ec18c20b9.txt, without its hierarchy).
    """
    rng = np.random.default_rng(seed)
    y = np.minimum(rng.poisson(rng.gamma(1.0, 1.0, (6, 2)) @ rng.gamma(1.0, 1.0, (2, 5))), 6)
    y[0, 0] = max(y[0, 0], 1)
    return Observations.from_dense(y.astype(float))


def aux_conditional_tv(seed: int = 0, K: int = 3, y_max: int = 6) -> float:
    """Total-variation distance between the printed multinomial conditional of z and brute-force enumeration.

    z_ui | theta, beta, y ~ Mult(y_ui, theta_u beta_i / theta_u . beta_i) against the normalised
    prod_k Poisson(z_k; theta_uk beta_ik) over every allocation, for y in 1..``y_max`` and random rates
    (theta_u beta_i)_k ~ Gamma(0.5, scale 2), float64.

    Parameters
    ----------
    seed : int, default 0
        NumPy seed of the rates.
    K : int >= 1, default 3
        Number of components.
    y_max : int, default 6
        Largest count enumerated.

    Returns
    -------
    float
        The largest TV distance (float64 rounding, < 1e-12, when the printed form is right).

    Raises
    ------
    ValueError
        For ``K`` < 1 (from `allocations`).

    Source: ``001_30a2018ec18c20b9.txt`` eq. (aux-cc); check: project addition.
    """
    rng = np.random.default_rng(seed)
    worst = 0.0
    for y in range(1, y_max + 1):
        rates = rng.gamma(0.5, 2.0, K)
        z = allocations(y, K)
        brute = np.exp(stats.poisson.logpmf(z, rates).sum(1))
        brute /= brute.sum()
        printed = np.exp(_log_mult(z, y, rates / rates.sum()))
        worst = max(worst, 0.5 * float(np.abs(brute - printed).sum()))
    return worst


@x64
def _state(data, K=2, sweeps=3):
    with jax.enable_x64(True):
        return hpf_checks._warm_state(jax.tree_util.tree_map(jnp.asarray, data), hpf_checks.ERRATA_HYPER, K, 0, sweeps)


@x64
def phi_update_tv(data: Observations | None = None, K: int = 2) -> float:
    """Total-variation distance between step 1's multinomial phi and the brute-force maximiser over allocations.

    Max TV over the nonzeros between Mult(y_ui, phi_ui) of step 1 (`custom_inference.hpf.optimal_phi`,
    phi_ui ∝ exp{E log theta_uk + E log beta_ik}) and the brute-force maximiser of
    E_q[log p(z | theta, beta)] - log q(z) over distributions on the allocations, i.e.
    exp E_q[log p(z | theta, beta)] normalised (E log from the state's Gamma factors). The state is
    `validation.models.hpf`'s warm start (3 sweeps, ``ERRATA_HYPER``, seed 0), float64 (`x64`).

    Parameters
    ----------
    data : custom_inference.data.Observations or None, default None
        Integer-valued counts (nonzeros; each is enumerated, so keep them small); None: `small_counts`.
    K : int >= 1, default 2
        Number of components.

    Returns
    -------
    float
        The largest TV distance.

    Raises
    ------
    ValueError
        From `custom_inference.hpf.init` when ``K`` is not an integer >= 1.

    Source: ``001_30a2018ec18c20b9.txt`` batch figure step 1; check: project addition.
    """
    data = data or small_counts()
    state = _state(data, K)
    with jax.enable_x64(True):
        phi = np.asarray(cavi.optimal_phi(state, jax.tree_util.tree_map(jnp.asarray, data)), np.float64)
    el_t = special.digamma(np.asarray(state.gamma_shape)) - np.log(np.asarray(state.gamma_rate))
    el_b = special.digamma(np.asarray(state.lambda_shape)) - np.log(np.asarray(state.lambda_rate))
    worst = 0.0
    for n, (u, i, y) in enumerate(zip(np.asarray(data.rows), np.asarray(data.cols), np.asarray(data.values))):
        z = allocations(int(y), K)
        logp = (z * (el_t[u] + el_b[i])).sum(1) - special.gammaln(z + 1).sum(1)   # E_q log p(z | theta, beta) + const
        brute = np.exp(logp - special.logsumexp(logp))
        worst = max(worst, 0.5 * float(np.abs(brute - np.exp(_log_mult(z, y, phi[n]))).sum()))
    return worst


@x64
def elog_mc(data: Observations | None = None, K: int = 2, n_draws: int = 20000, seed: int = 0) -> float:
    """max |z| of E_q[log theta_uk] and E_q[log beta_ik] against Monte Carlo from the state's Gamma factors.

    The cached form is `custom_inference.gamma.gamma_log_mean` (Psi(shape) - log(rate)); the state is the
    warm start of `phi_update_tv`; float64 (`x64`).

    Parameters
    ----------
    data : custom_inference.data.Observations or None, default None
        Counts; None: `small_counts`.
    K : int >= 1, default 2
        Number of components.
    n_draws : int >= 2, default 20000
        Monte Carlo draws per factor.
    seed : int, default 0
        NumPy seed of the draws.

    Returns
    -------
    float
        The largest |z| over the entries of theta and beta (compare with `Z_MAX`).

    Raises
    ------
    ValueError
        For ``n_draws`` < 2 (from `mc_z`); from `custom_inference.hpf.init` when ``K`` is not an integer >= 1.

    Source: ``001_30a2018ec18c20b9.txt`` batch figure steps 1-3; check: project addition.
    """
    data = data or small_counts()
    state = _state(data, K)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for sh, rt in ((state.gamma_shape, state.gamma_rate), (state.lambda_shape, state.lambda_rate)):
        sh, rt = np.asarray(sh, np.float64), np.asarray(rt, np.float64)
        draws = np.log(rng.gamma(sh, 1.0 / rt, (n_draws, *sh.shape)))
        worst = max(worst, mc_z(draws, np.asarray(gamma_log_mean(sh, rt))))
    return worst


@x64
def elbo_enumeration_mc(data: Observations | None = None, K: int = 2, n_draws: int = 4000, seed: int = 0) -> dict:
    """The solver's ELBO at a non-optimal phi against Monte Carlo over q with z enumerated exactly.

    `custom_inference.hpf.elbo` with phi ~ Dirichlet(1) per nonzero (not the optimum) against Monte Carlo
    over q of (theta, xi, beta, eta) with, on every draw, the exact sum over z ~ Mult(y, phi) of
    log p(z | theta, beta) - log q(z) (so the log z! cancellation of the solver is not assumed); float64.

    Parameters
    ----------
    data : custom_inference.data.Observations or None, default None
        Integer-valued counts; None: `small_counts`.
    K : int >= 1, default 2
        Number of components.
    n_draws : int >= 2, default 4000
        Monte Carlo draws of q.
    seed : int, default 0
        NumPy seed of phi and of the draws.

    Returns
    -------
    dict
        {"solver": float, "mc": float (the Monte Carlo mean), "se": float, "z": float (max |z|),
        "passed": bool (z <= `Z_MAX`)}.

    Raises
    ------
    ValueError
        For ``n_draws`` < 2; from `custom_inference.hpf.init` when ``K`` is not an integer >= 1.

    Source: ``001_30a2018ec18c20b9.txt`` eq. (q) and the model (the seed prints no ELBO); check: project addition.
    """
    if n_draws < 2:
        raise ValueError(f"n_draws must be >= 2, got {n_draws}")
    data = data or small_counts()
    h = hpf_checks.ERRATA_HYPER
    state = _state(data, K)
    rows, cols, y = np.asarray(data.rows), np.asarray(data.cols), np.asarray(data.values).astype(int)
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(np.ones(K), y.size)                               # not the optimum
    with jax.enable_x64(True):
        solver = float(cavi.elbo(state, jax.tree_util.tree_map(jnp.asarray, data), h, jnp.asarray(phi)))
    s = {k: np.asarray(v, np.float64) for k, v in state._asdict().items()}
    allocs = [allocations(int(v), K) for v in y]
    qz = [np.exp(_log_mult(z, v, phi[n])) for n, (z, v) in enumerate(zip(allocs, y))]
    g = lambda sh, rt, size: rng.gamma(s[sh], 1.0 / s[rt], (n_draws, *s[sh].shape))  # noqa: E731
    th, xi = g("gamma_shape", "gamma_rate", None), g("kappa_shape", "kappa_rate", None)
    be, et = g("lambda_shape", "lambda_rate", None), g("tau_shape", "tau_rate", None)
    vals = -np.einsum("nk,nk->n", th.sum(1), be.sum(1))                 # sum over all cells of -theta_u . beta_i
    for n in range(y.size):
        z, w = allocs[n], qz[n]
        logr = np.log(th[:, rows[n]] * be[:, cols[n]])                    # (n_draws, K)
        logp = logr @ z.T - special.gammaln(z + 1).sum(1)                 # log p(z | theta, beta) + sum_k r_k
        vals += (logp - np.log(w)) @ w
    gl = lambda x, a, scale: stats.gamma.logpdf(x, a, scale=scale).reshape(n_draws, -1).sum(1)  # noqa: E731
    vals += gl(th, h.a, 1.0 / xi[:, :, None]) + gl(xi, h.a_prime, h.b_prime / h.a_prime)
    vals += gl(be, h.c, 1.0 / et[:, :, None]) + gl(et, h.c_prime, h.d_prime / h.c_prime)
    for x, sh, rt in ((th, "gamma_shape", "gamma_rate"), (xi, "kappa_shape", "kappa_rate"),
                      (be, "lambda_shape", "lambda_rate"), (et, "tau_shape", "tau_rate")):
        vals -= gl(x, s[sh], 1.0 / s[rt])
    z = mc_z(vals[:, None], solver)
    return dict(solver=solver, mc=float(vals.mean()), se=float(vals.std(ddof=1) / np.sqrt(n_draws)), z=z,
                passed=z <= Z_MAX)


def checks() -> pd.DataFrame:
    """All four HPF checks as a table: check, equation, value, passed (TV < 1e-12 in float64; |z| <= 5).
    Raises nothing of its own. Source: project addition."""
    e = elbo_enumeration_mc()
    rows = [
        ("z | theta, beta, y multinomial (TV vs enumeration)", "eq. (aux-cc)", aux_conditional_tv(), 1e-12),
        ("phi of step 1 maximises the z part (TV vs enumeration)", "batch figure step 1", phi_update_tv(), 1e-12),
        ("E_q log theta, E_q log beta (max |z|)", "batch figure steps 1-3", elog_mc(), Z_MAX),
        ("ELBO at a non-optimal phi (|z|, z enumerated)", "eq. (q) and the model", e["z"], Z_MAX),
    ]
    return pd.DataFrame([dict(check=c, equation=q, value=v, passed=v <= tol) for c, q, v, tol in rows])
