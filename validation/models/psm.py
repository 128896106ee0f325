"""PSM (seed 000) through the validation levels: every cache and cached sum against its dense I x J
twin, stationarity of every block of Algorithm 1 (jax.grad of the dense bound), monotone ELBO,
the ELBO against a Monte Carlo estimate built from the NumPyro program, the NUTS cross-check on
identifiable quantities, the errata of the printed formulas, and the one-class evaluation system.

Reference code for tests and reports: it builds dense I x J arrays (small problems only).

Sources: ``000_619a0297b9d686b2.txt`` secs. 2-5, Algorithm 1, appendix B; solver
`custom_inference.psm`; generative program `ppl_models.psm.model`.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import arviz_io
from custom_inference import psm
from custom_inference.data import Observations
from custom_inference.logistic import jj_expected_log_bound, jj_lambda
from ppl_models import psm as ppl

from validation.checks import crosscheck as xc
from validation.checks import registry
from validation.checks import updates
from validation.checks.errata import Erratum

__all__ = [
    "small_problem",
    "warm_state",
    "dense_xi",
    "dense_elbo",
    "dense_targets",
    "dense_twin_checks",
    "printed_user_targets",
    "printed_bias_nu",
    "printed_omega_star",
    "printed_S2",
    "errata_problem",
    "update_checks",
    "monotone_check",
    "monte_carlo_elbo_check",
    "printed_elbo",
    "CrosscheckConfig",
    "VERDICT_GROUPS",
    "GAP_GROUPS",
    "identifiable_quantities",
    "crosscheck_problem",
    "nuts_reference",
    "run_crosscheck",
    "probit_vs_monte_carlo",
    "ERRATA",
    "SPEC",
]

_SEED000 = "000_619a0297b9d686b2.txt"
#: distinct hyperparameters so that a swapped symbol shows
HYPER = ppl.PSMHyper(alpha0=1.3, beta0=0.8, tau_u=1.5, tau_v=0.7, tau_b=1.2)


# ---------------------------------------------------------------------------------------------
# small problems


@functools.lru_cache(maxsize=8)
def small_problem(seed: int = 0, n_users: int = 8, n_items: int = 6, K: int = 2, n_events: int = 200,
                  hyper: ppl.PSMHyper = ppl.PSMHyper()):
    """A stream simulated by `ppl_models.psm.simulate` (prior predictive), grouped into counts.

    Cached (the same arguments return the same objects: treat them as read-only).

    Parameters
    ----------
    seed : int, default 0
        The simulation's key.
    n_users, n_items : int, default 8, 6
        I and J.
    K : int, default 2
        The latent dimension.
    n_events : int, default 200
        D, the observed events.
    hyper : ppl_models.psm.PSMHyper, default PSMHyper()
        The hyperparameters (hashable: the cache).

    Returns
    -------
    obs : custom_inference.data.Observations
        Float64 counts, (I, J) = (n_users, n_items), of the N distinct pairs.
    r : float
        D'/D realised (D' floored at 1).
    params : dict of str to numpy.ndarray
        Float64: pi (I,), psi (J,), u (I, K), v (J, K), b_user (I,), b_item (J,).

    Raises
    ------
    ValueError
        From `ppl_models.psm.simulate`: sizes that are not positive integers or bad hyperparameters.
    RuntimeError
        The stream keeps fewer than ``n_events`` pairs within its draw limit.
    TypeError
        An unhashable ``hyper`` (the cache).

    Source: ``000_619a0297b9d686b2.txt`` sec. 2, fig. 1 (the selection-then-censoring story); the
    grouping into counts c_ij of eq. (2).
    """
    with jax.enable_x64(True):
        params, ev = ppl.simulate(jax.random.PRNGKey(seed), (n_users, n_items, K, n_events), hyper)
    r, c, n = ppl.aggregate(ev["rows"], ev["cols"], n_users, n_items)
    obs = Observations.from_coo(r, c, n, (n_users, n_items))
    return obs, max(ev["n_censored"], 1) / n_events, {k: np.asarray(v) for k, v in params.items()}


def _jx(obs):
    return psm._as_jax(obs, jnp.float64)


def warm_state(obs, K: int, hyper, *, r: float = 1.0, seed: int = 0, sweeps: int = 2, scale: float = 0.7):
    """A float64 state that is not a fixed point: `psm.init` moved off its start, then a few sweeps.

    Factor means are redrawn as ``scale`` N(0, 1), factor precisions U(1, 4), bias means 0.3 N(0, 1),
    s, t random, xi* = 1.3, then ``sweeps`` sweeps.

    Parameters
    ----------
    obs : custom_inference.data.Observations
        (I, J) counts.
    K : int >= 1
        The latent dimension.
    hyper : ppl_models.psm.PSMHyper
        The hyperparameters.
    r : float > 0, default 1.0
        D'/D. Keyword-only.
    seed : int, default 0
        Seeds `psm.init` and the redrawn values. Keyword-only.
    sweeps : int, default 2
        Sweeps of Algorithm 1. Keyword-only.
    scale : float, default 0.7
        Scale of the redrawn factor means. Keyword-only.

    Returns
    -------
    custom_inference.psm.PSMState
        Float64: u_mu, u_prec (I, K); v_mu, v_prec (J, K); bu_* (I,); bv_* (J,); alpha, log_s (I,);
        beta, log_t (J,); xi_star, d_prime ().

    Raises
    ------
    ValueError
        From `psm.init`: bad counts, K < 1, r <= 0 or bad hyperparameters.
    TypeError
        A non-numeric K.

    Source: project addition (a start of ``000_619a0297b9d686b2.txt`` Algorithm 1 moved off its
    "initialize" values, so that every block has work to do).
    """
    with jax.enable_x64(True):
        st = psm.init(jax.random.PRNGKey(seed), obs, K, hyper, r=r, dtype=np.float64)
        rng = np.random.default_rng(seed)
        I, J = obs.shape
        st = st._replace(u_mu=jnp.asarray(scale * rng.standard_normal((I, K))),
                         v_mu=jnp.asarray(scale * rng.standard_normal((J, K))),
                         u_prec=jnp.asarray(rng.uniform(1.0, 4.0, (I, K))), v_prec=jnp.asarray(rng.uniform(1.0, 4.0, (J, K))),
                         bu_mu=jnp.asarray(0.3 * rng.standard_normal(I)), bv_mu=jnp.asarray(0.3 * rng.standard_normal(J)),
                         log_s=jax.nn.log_softmax(jnp.asarray(rng.standard_normal(I))),
                         log_t=jax.nn.log_softmax(jnp.asarray(rng.standard_normal(J))), xi_star=jnp.asarray(1.3))
        d = _jx(obs)
        for _ in range(sweeps):
            st, _ = psm.step(None, st, d, hyper)
    return st


# ---------------------------------------------------------------------------------------------
# the dense bound and its twins (I x J)


def _dense_obs(obs):
    C = np.zeros(obs.shape)
    C[np.asarray(obs.rows), np.asarray(obs.cols)] = np.asarray(obs.values, np.float64)
    G = np.zeros(obs.shape, bool)
    G[np.asarray(obs.rows), np.asarray(obs.cols)] = True
    return jnp.asarray(C), jnp.asarray(G)


def _dense_moments(state):
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = psm.moments(state)
    mean = mu @ mv.T + mbu[:, None] + mbv[None, :]
    var = (mu**2) @ vv.T + vu @ (mv**2).T + vu @ vv.T + vbu[:, None] + vbv[None, :]
    return mean, mean**2 + var


def dense_xi(state, obs, xi=None):
    """The I x J matrix of bound parameters: xi on G (given, or optimal), xi* elsewhere.

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The current q.
    obs : custom_inference.data.Observations
        (I, J) counts with N pairs (G).
    xi : jax.Array, shape (N,), float, optional
        xi on G (default the optimum sqrt(E a_ij^2)).

    Returns
    -------
    jax.Array, shape (I, J)
        The state's float dtype (float64 under ``jax.enable_x64``).

    Raises
    ------
    None of its own; a ``xi`` that is not (N,) makes JAX raise a shape error.

    Source: ``000_619a0297b9d686b2.txt`` eq. (11) (xi_ij on G) and sec. 4 (one shared xi* outside G).
    """
    C, G = _dense_obs(obs)
    _, second = _dense_moments(state)
    xi_G = jnp.sqrt(second) if xi is None else jnp.zeros(obs.shape).at[np.asarray(obs.rows), np.asarray(obs.cols)].set(xi)
    return jnp.where(G, xi_G, state.xi_star)


def dense_elbo(state, obs, hyper, xi=None):
    """The bounded ELBO as a plain sum over all I x J pairs, differentiable.

    The definition: eq. 3 with sec. 3's bounds and the tying of s, t; xi on G as given (or optimal),
    xi* elsewhere.

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The current q.
    obs : custom_inference.data.Observations
        (I, J) counts with N pairs.
    hyper : ppl_models.psm.PSMHyper
        The hyperparameters.
    xi : jax.Array, shape (N,), float, optional
        As in `dense_xi`.

    Returns
    -------
    jax.Array, shape ()
        The state's float dtype.

    Raises
    ------
    None of its own (no checks); a ``hyper`` without the PSMHyper fields raises AttributeError, a
    ``xi`` that is not (N,) a JAX shape error.

    Source: ``000_619a0297b9d686b2.txt`` eq. (3) with sec. 3's bound and tying; appendix B eq. (13)
    with its -E log p corrected to -E log q (ERRATA).
    """
    C, G = _dense_obs(obs)
    Xi = dense_xi(state, obs, xi)
    mean, second = _dense_moments(state)
    s, t = jax.nn.softmax(state.log_s), jax.nn.softmax(state.log_t)
    S = s[:, None] * t[None, :]
    Dp = state.d_prime
    lik = jnp.sum(C * jj_expected_log_bound(mean, second, Xi, 1)) + Dp * jnp.sum(S * jj_expected_log_bound(mean, second, Xi, 0))
    total = lik + psm._dirichlet_terms(state.alpha, hyper.alpha0, C.sum(1) + Dp * s)
    total = total + psm._dirichlet_terms(state.beta, hyper.beta0, C.sum(0) + Dp * t)
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = psm.moments(state)
    total = total + psm._gauss_terms(mu, vu, hyper.tau_u) + psm._gauss_terms(mv, vv, hyper.tau_v)
    total = total + psm._gauss_terms(mbu, vbu, hyper.tau_b) + psm._gauss_terms(mbv, vbv, hyper.tau_b)
    return total - Dp * (jnp.sum(s * jnp.log(s)) + jnp.sum(t * jnp.log(t)))


def dense_targets(state, obs, hyper, xi=None) -> dict:
    """Every quantity the solver computes from caches, as plain I x J sums (numpy float64).

    Caches (B.1) item_P, item_m_dag, item_m_ddag, item_nu, item_kappa and user_*; per-user
    sum_j t_j E a_ij (user_first) and E a_ij^2 (user_second), item twins; S1, S2; sum_j t_j Omega*_ij
    (user_omega_star), sum_i s_i Omega*_ij (item_omega_star); the full sums sum_j t_j Omega_ij
    (user_omega, with xi on G) and item_omega; xi*^2 from (16) (xi_star); user P (I, K, K) and m (I, K)
    of the intermediate q~ (6), (7); item P, m; bias rho, nu of users and items; the ELBO.

    Parameters
    ----------
    state, obs, hyper, xi
        As in `dense_elbo`.

    Returns
    -------
    dict of str to float or numpy.ndarray
        Caches: P (K, K), m_* (K,), nu and kappa floats; user_* sums (I,), item_* sums (J,); S1, S2,
        xi_star, elbo floats; user_P_i (I, K, K), user_m_i (I, K), item_P_i (J, K, K), item_m_i
        (J, K); user_rho, user_nu_i (I,); item_rho, item_nu_i (J,).

    Raises
    ------
    None of its own (no checks); AttributeError for a ``hyper`` without the PSMHyper fields.

    Source: ``000_619a0297b9d686b2.txt`` appendix B.1 (caches), eqs. (6)-(8), (16), (17) with B.4.1,
    sec. 4 bias update, written as their dense I x J definitions (project addition: the twins).
    """
    C, G = _dense_obs(obs)
    C, G = np.asarray(C), np.asarray(G)
    Xi = np.asarray(dense_xi(state, obs, xi))
    mean, second = (np.asarray(a) for a in _dense_moments(state))
    s, t = (np.asarray(jax.nn.softmax(a), np.float64) for a in (state.log_s, state.log_t))
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = (tuple(np.asarray(a, np.float64) for a in p) for p in psm.moments(state))
    Dp, xs = float(state.d_prime), float(state.xi_star)
    S = s[:, None] * t[None, :]
    Lam = np.asarray(jj_lambda(jnp.asarray(Xi)))
    Om = np.asarray(jj_expected_log_bound(mean, second, Xi, 0))
    Om_star = np.asarray(jj_expected_log_bound(mean, second, xs, 0))
    I, J = C.shape
    K = mu.shape[1]
    out = {}
    for side, w, m, v, bm, bv in (("item", t, mv, vv, mbv, vbv), ("user", s, mu, vu, mbu, vbu)):
        out[f"{side}_P"] = sum(w[n] * (np.outer(m[n], m[n]) + np.diag(v[n])) for n in range(w.size))
        out[f"{side}_m_dag"] = sum(w[n] * bm[n] * m[n] for n in range(w.size))
        out[f"{side}_m_ddag"] = sum(w[n] * m[n] for n in range(w.size))
        out[f"{side}_nu"] = float(np.sum(w * bm))
        out[f"{side}_kappa"] = float(np.sum(w * (bm**2 + bv)))
    out["user_first"], out["user_second"] = mean @ t, second @ t
    out["item_first"], out["item_second"] = s @ mean, s @ second
    out["S1"], out["S2"] = float(np.sum(S * mean)), float(np.sum(S * second))
    out["user_omega_star"], out["item_omega_star"] = Om_star @ t, s @ Om_star
    out["user_omega"], out["item_omega"] = Om @ t, s @ Om
    out["xi_star"] = float(np.sqrt(np.sum(~G * S * second) / np.sum(~G * S)))
    W = C + Dp * S  # expected number of events (observed + censored) at each pair
    eb = mbu[:, None] + mbv[None, :]
    lin = C * (0.5 - 2 * Lam * eb) + Dp * S * (-0.5 - 2 * Lam * eb)
    for side, n_own, tau, om, ov in (("user", I, hyper.tau_u, mv, vv), ("item", J, hyper.tau_v, mu, vu)):
        Wd, Ld, lin_d = (W, Lam, lin) if side == "user" else (W.T, Lam.T, lin.T)
        P = np.zeros((n_own, K, K))
        h = np.zeros((n_own, K))
        for a in range(n_own):
            P[a] = tau * np.eye(K)
            for b in range(Wd.shape[1]):
                P[a] += 2 * Wd[a, b] * Ld[a, b] * (np.outer(om[b], om[b]) + np.diag(ov[b]))
                h[a] += lin_d[a, b] * om[b]
        out[f"{side}_P_i"], out[f"{side}_m_i"] = P, h
    uv = mu @ mv.T
    for side, rest, axis in (("user", uv + mbv[None, :], 1), ("item", uv + mbu[:, None], 0)):
        out[f"{side}_rho"] = hyper.tau_b + np.sum(2 * W * Lam, axis=axis)
        out[f"{side}_nu_i"] = np.sum(C * (0.5 - 2 * Lam * rest) + Dp * S * (-0.5 - 2 * Lam * rest), axis=axis)
    out["elbo"] = float(dense_elbo(state, obs, hyper, xi))
    return out


def _solver_quantities(state, obs, hyper, xi, *, chunk: int = psm.DEFAULT_CHUNK) -> dict:
    """The solver's caches and cached sums (the keys of `dense_targets`), one compiled call."""
    out = _solver_quantities_jit(state, _jx(obs), psm._hyper_arrays(hyper, np.float64), xi, int(chunk))
    return {k: (float(v) if np.ndim(v) == 0 else np.asarray(v)) for k, v in out.items()}


def _solver_quantities_traced(state, d, hyper, xi, chunk):
    ib, ub = psm.item_background(state), psm.user_background(state)
    out = {}
    for side, bg in (("item", ib), ("user", ub)):
        for f in psm.Background._fields:
            out[f"{side}_{f}"] = getattr(bg, f)
    out["user_first"], out["user_second"] = psm.user_background_terms(state, ib)
    out["item_first"], out["item_second"] = psm.item_background_terms(state, ub)
    out["S1"], out["S2"] = psm.background_sums(ub, ib)
    out["user_omega_star"] = psm.omega_star_user_sums(state, ib)
    out["item_omega_star"] = psm.omega_star_item_sums(state, ub)
    out["user_omega"] = out["user_omega_star"] + psm._omega_corrections(state, d, xi, chunk, True)
    out["item_omega"] = out["item_omega_star"] + psm._omega_corrections(state, d, xi, chunk, False)
    out["xi_star"] = psm.update_xi_star(state, d, hyper).xi_star
    out["user_P_i"], out["user_m_i"] = psm.user_update_targets(state, d, hyper, xi, chunk=chunk)
    out["item_P_i"], out["item_m_i"] = psm.item_update_targets(state, d, hyper, xi, chunk=chunk)
    for side, own in (("user", True), ("item", False)):
        mean, rho = psm._bias_update(state, d, hyper, xi, chunk, own)
        out[f"{side}_rho"], out[f"{side}_nu_i"] = rho, mean * rho
    out["elbo"] = psm.elbo(state, d, hyper, xi, chunk=chunk)
    return out


_solver_quantities_jit = jax.jit(_solver_quantities_traced, static_argnums=(4,))
_JIT: dict = {}


def _jitted(fn):
    if fn not in _JIT:
        _JIT[fn] = jax.jit(fn)
    return _JIT[fn]


_DENSE_LABELS = {
    "item_P": "item cache P- (B.1)", "item_m_dag": "item cache m-dag", "item_m_ddag": "item cache m-ddag",
    "item_nu": "item cache nu-", "item_kappa": "item cache kappa-", "user_P": "user cache P+",
    "user_m_dag": "user cache m+dag", "user_m_ddag": "user cache m+ddag", "user_nu": "user cache nu+",
    "user_kappa": "user cache kappa+", "user_first": "sum_j t_j E a_ij", "user_second": "sum_j t_j E a_ij^2",
    "item_first": "sum_i s_i E a_ij", "item_second": "sum_i s_i E a_ij^2", "S1": "sum_ij s_i t_j E a_ij",
    "S2": "sum_ij s_i t_j E a_ij^2 (16)", "user_omega_star": "sum_j t_j Omega*_ij (B.4.1)",
    "item_omega_star": "sum_i s_i Omega*_ij", "user_omega": "sum_j t_j Omega_ij (s update, 17)",
    "item_omega": "sum_i s_i Omega_ij (t update)", "xi_star": "xi* (16)", "user_P_i": "user precision P_i (6)",
    "user_m_i": "user mean x precision m_i (7, 8)", "item_P_i": "item precision P_j", "item_m_i": "item m_j",
    "user_rho": "user bias precision rho_i", "user_nu_i": "user bias nu_i", "item_rho": "item bias precision",
    "item_nu_i": "item bias nu_j", "elbo": "bounded ELBO (3)",
}


def dense_twin_checks(obs, K: int, hyper=HYPER, *, r: float = 1.0, seed: int = 0, sweeps: int = 2,
                      chunk: int = psm.DEFAULT_CHUNK, solver_quantities=None) -> pd.DataFrame:
    """Every cached quantity and cached sum of the solver against `dense_targets`, float64.

    At a `warm_state`, with xi on G at 1.1 times its optimum + 0.05 (so the corrections are
    exercised).

    Parameters
    ----------
    obs, K
        As in `warm_state`.
    hyper : ppl_models.psm.PSMHyper, default HYPER
        The hyperparameters.
    r, seed, sweeps
        As in `warm_state`. Keyword-only.
    chunk : int, default custom_inference.psm.DEFAULT_CHUNK
        Pairs per chunk of the solver's pair sums (e.g. 5: several chunks and padding). Keyword-only.
    solver_quantities : callable, optional
        ``solver_quantities(state, obs, hyper, xi, got) -> dict`` replaces entries of the solver's
        dict ``got`` (negative controls: a printed formula swapped in). Keyword-only.

    Returns
    -------
    pandas.DataFrame
        One row per `dense_targets` key: quantity str, key str, max_rel_diff float64
        (`validation.checks.updates.max_relative_difference`).

    Raises
    ------
    ValueError
        From `warm_state` (bad counts, K, r or hyperparameters) and from
        `validation.checks.updates.max_relative_difference` when a replaced entry's shape differs
        from its twin's.

    Source: project addition (validation level 1) on ``000_619a0297b9d686b2.txt`` appendix B.1
    caches and the cached sums of sec. 4, B.3 and B.4.1.
    """
    with jax.enable_x64(True):
        state = warm_state(obs, K, hyper, r=r, seed=seed, sweeps=sweeps)
        xi = 1.1 * psm.pair_xi(state, _jx(obs)) + 0.05
        got = _solver_quantities(state, obs, hyper, xi, chunk=chunk)
        if solver_quantities is not None:
            got = {**got, **solver_quantities(state, obs, hyper, xi, got)}
        want = dense_targets(state, obs, hyper, xi)
    rows = [{"quantity": _DENSE_LABELS[k], "key": k, "max_rel_diff": updates.max_relative_difference(got[k], want[k])}
            for k in want]
    return pd.DataFrame(rows)


def printed_user_targets(state, obs, hyper, xi, got):
    """The *printed* eq. (8) for m_i swapped into the solver's m_i: the deliberately wrong formula.

    ``(-1/2 - 2 lam* E b_i) m-dag - 2 lam* m-ddag`` (the caches swapped against their B.1
    definitions), which the dense check must catch.

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The current q.
    obs, hyper, xi
        Unused (the replacement signature of `dense_twin_checks`).
    got : dict
        The solver's quantities, with ``user_m_i`` (I, K).

    Returns
    -------
    dict
        ``{"user_m_i": numpy.ndarray (I, K)}`` of the state's float dtype.

    Raises
    ------
    KeyError
        ``got`` has no "user_m_i".

    Source: ``000_619a0297b9d686b2.txt`` eq. (8) as printed (the erratum in `ERRATA`).
    """
    h = got["user_m_i"]
    s = jax.nn.softmax(state.log_s)
    bg = psm.item_background(state)
    lam = jj_lambda(state.xi_star)
    own_w = state.d_prime * s
    right = own_w[:, None] * ((-0.5 - 2 * lam * state.bu_mu)[:, None] * bg.m_ddag[None] - 2 * lam * bg.m_dag[None])
    printed = own_w[:, None] * ((-0.5 - 2 * lam * state.bu_mu)[:, None] * bg.m_dag[None] - 2 * lam * bg.m_ddag[None])
    return {"user_m_i": np.asarray(h - right + printed)}


# ---------------------------------------------------------------------------------------------
# stationarity of every block (jax.grad of the dense bound) and monotone sweeps


_GRADS: dict = {}


def _grad(state, obs, hyper, xi):
    """jax.grad of `dense_elbo` in the state (xi on G fixed), compiled once per data set."""
    key = (id(obs), obs.shape, obs.nnz)
    if key not in _GRADS or _GRADS[key][0] is not obs:
        _GRADS[key] = (obs, jax.jit(jax.grad(lambda st, h, x: dense_elbo(st, obs, h, x))))
    return _GRADS[key][1](state, hyper, xi)


def update_checks(obs, K: int, hyper=HYPER, *, r: float = 1.0, seed: int = 0, sweeps: int = 1, rtol: float = 1e-7,
                  replace: dict | None = None) -> pd.DataFrame:
    """Stationarity of every block of one sweep, in Algorithm 1's order, float64, from `warm_state`.

    Each block's gradient is ``jax.grad`` of `dense_elbo` (the I x J definition, not the solver's
    cached ELBO) over the block's fields, with xi on G held at the value the block used (the optimal
    xi of the state it starts from), before and after the update
    (`validation.checks.updates.StationarityResult`).

    Parameters
    ----------
    obs, K
        As in `warm_state`.
    hyper : ppl_models.psm.PSMHyper, default HYPER
        The hyperparameters.
    r, seed
        As in `warm_state`. Keyword-only.
    sweeps : int, default 1
        Sweeps of the start (`warm_state`). Keyword-only.
    rtol : float, default 1e-7
        Tolerance of `StationarityResult`. Keyword-only.
    replace : dict of str to callable, optional
        Block name -> another update ``(state, data, hyper, xi) -> state`` (power checks).
        Keyword-only.

    Returns
    -------
    pandas.DataFrame
        One row per block of `custom_inference.psm.BLOCKS`: block str, grad_before float,
        grad_after float, passed bool.

    Raises
    ------
    ValueError
        From `warm_state` (bad counts, K, r or hyperparameters); errors of a ``replace`` update
        propagate.

    Source: project addition (validation level 1) on ``000_619a0297b9d686b2.txt`` Algorithm 1 and
    sec. 4 (each block the exact maximiser of the bound (3) at fixed xi).
    """
    rows = []
    with jax.enable_x64(True):
        state = warm_state(obs, K, hyper, r=r, seed=seed, sweeps=sweeps)
        d = _jx(obs)
        h = psm._hyper_arrays(hyper, np.float64)
        for name, update, fields in psm.BLOCKS:
            if replace and name in replace:
                update = replace[name]
            xi = _jitted(psm.pair_xi)(state, d)
            new = _jitted(update)(state, d, h, xi)
            gb, ga = _grad(state, obs, h, xi), _grad(new, obs, h, xi)
            before = float(max(jnp.max(jnp.abs(getattr(gb, f))) for f in fields))
            after = float(max(jnp.max(jnp.abs(getattr(ga, f))) for f in fields))
            res = updates.StationarityResult(name, after, before, rtol)
            rows.append({"block": name, "grad_before": before, "grad_after": after, "passed": res.passed})
            state = new
    return pd.DataFrame(rows)


def monotone_check(obs, K: int, hyper=HYPER, *, r: float = 1.0, seed: int = 0, sweeps: int = 30, rtol: float = 1e-10):
    """The bounded ELBO over ``sweeps`` sweeps from `psm.init`, float64 (`validation.checks.updates.monotone_sweeps`).

    Parameters
    ----------
    obs, K
        As in `warm_state`.
    hyper : ppl_models.psm.PSMHyper, default HYPER
        The hyperparameters.
    r, seed
        As in `warm_state`. Keyword-only.
    sweeps : int >= 0, default 30
        Sweeps. Keyword-only.
    rtol : float, default 1e-10
        Largest relative decrease allowed. Keyword-only.

    Returns
    -------
    ok : bool
        No decrease beyond ``rtol``.
    worst : float
        The largest relative decrease.
    trace : numpy.ndarray, shape (sweeps + 1,), float64
        The bound before and after each sweep.

    Raises
    ------
    ValueError
        From `psm.init` (bad counts, K, r or hyperparameters) or from
        `validation.checks.updates.monotone_sweeps` (``sweeps`` not an integer >= 0).

    Source: project addition (validation level 1) on ``000_619a0297b9d686b2.txt`` Algorithm 1
    (coordinate ascent on the bound (3) never lowers it).
    """
    with jax.enable_x64(True):
        d = _jx(obs)
        state = psm.init(jax.random.PRNGKey(seed), obs, K, hyper, r=r, dtype=np.float64)

        def sweep(st):
            st, info = psm.step(None, st, d, hyper)
            return st, info.elbo

        return updates.monotone_sweeps(lambda st: psm.elbo(st, d, psm._hyper_arrays(hyper, np.float64)), sweep, state,
                                       sweeps, rtol=rtol)


# ---------------------------------------------------------------------------------------------
# the ELBO against the NumPyro program (Monte Carlo)


def _mc_terms(state, obs, hyper, n_draws, seed):
    """Per draw theta ~ q: log p(D, theta) from `ppl_models.psm.model`, log q(theta), the censored
    term's exact value D' log p(o = F | theta) and its tied bound, the observed events' exact
    log sigma(a) and JJ bound (all (n_draws,) numpy)."""
    from numpyro.infer.util import log_density
    from scipy import stats

    from custom_inference.logistic import jj_log_bound

    I, J = obs.shape
    rows, cols, counts = np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values, np.float64)
    draws = {k: v[0] for k, v in psm.draws_from_q(jax.random.PRNGKey(seed), state, n_draws).items()}
    K = draws["u"].shape[-1]
    Dp = float(state.d_prime)
    with jax.enable_x64(True):
        args = (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(counts), I, J, K, Dp, hyper)
        lp = jax.jit(jax.vmap(lambda dd: log_density(ppl.model, args, {}, dd)[0]))
        logp = np.asarray(lp({k: jnp.asarray(v) for k, v in draws.items()}))
        xi_G = np.asarray(psm.pair_xi(state, _jx(obs)))
    a = np.einsum("dik,djk->dij", draws["u"], draws["v"]) + draws["b_user"][:, :, None] + draws["b_item"][:, None, :]
    aG = a[:, rows, cols]
    obs_exact = np.sum(counts * -np.logaddexp(0.0, -aG), axis=1)
    obs_bound = np.sum(counts * np.asarray(jj_log_bound(aG, xi_G, 1)), axis=1)
    Xi = np.full((I, J), float(state.xi_star))
    Xi[rows, cols] = xi_G
    s, t = (np.asarray(jax.nn.softmax(x), np.float64) for x in (state.log_s, state.log_t))
    logpi, logpsi = np.log(draws["pi"]), np.log(draws["psi"])
    cens_exact = Dp * np.asarray(jax.vmap(ppl.log_censoring_probability)(jnp.asarray(logpi), jnp.asarray(logpsi), jnp.asarray(a)))
    S = s[:, None] * t[None, :]
    cens_bound = Dp * (np.einsum("ij,dij->d", S, np.asarray(jj_log_bound(a, Xi, 0))) + logpi @ s + logpsi @ t
                       - np.sum(s * np.log(s)) - np.sum(t * np.log(t)))
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = (tuple(np.asarray(x, np.float64) for x in p) for p in psm.moments(state))
    logq = stats.norm.logpdf(draws["u"], mu, np.sqrt(vu)).sum(axis=(1, 2)) + stats.norm.logpdf(draws["v"], mv, np.sqrt(vv)).sum(axis=(1, 2))
    logq += stats.norm.logpdf(draws["b_user"], mbu, np.sqrt(vbu)).sum(axis=1)
    logq += stats.norm.logpdf(draws["b_item"], mbv, np.sqrt(vbv)).sum(axis=1)
    logq += np.array([stats.dirichlet.logpdf(p, np.asarray(state.alpha, np.float64)) for p in draws["pi"]])
    logq += np.array([stats.dirichlet.logpdf(p, np.asarray(state.beta, np.float64)) for p in draws["psi"]])
    logprior = logp - obs_exact - cens_exact - counts @ (logpi[:, rows] + logpsi[:, cols]).T
    return dict(logp=logp, logq=logq, obs_exact=obs_exact, obs_bound=obs_bound, cens_exact=cens_exact,
                cens_bound=cens_bound, logprior=logprior, logpi=logpi, logpsi=logpsi, draws=draws)


def monte_carlo_elbo_check(obs, K: int, hyper=HYPER, *, r: float = 1.0, n_draws: int = 2000, seed: int = 0,
                           elbo_fn=None) -> dict:
    """`psm.elbo` against the NumPyro program by Monte Carlo over draws from q.

    Per draw theta ~ q (the continuous parameters, at a `warm_state` of 3 sweeps), with log p the
    program's log density (the censored identities summed out):
    ``d = log p(D, theta) - log q(theta) - [sum_G c log s(a) - sum_G c JJ1(a, xi)]
    - [D' log p(o = F | theta) - D' (sum_ij s_i t_j (log pi_i + log psi_j + JJ0(a_ij, xi_ij))
    - sum s log s - sum t log t)]``: the exact likelihood swapped for the bounded, tied one. E_q[d]
    equals the bounded ELBO exactly (the bounds are linear in a and a^2), so this tests every prior,
    Dirichlet, entropy and expectation term of `psm.elbo` against an independent implementation.

    Parameters
    ----------
    obs, K
        As in `warm_state`.
    hyper : ppl_models.psm.PSMHyper, default HYPER
        The hyperparameters.
    r : float, default 1.0
        As in `warm_state`. Keyword-only.
    n_draws : int >= 2, default 2000
        Draws from q. Keyword-only.
    seed : int, default 0
        Seeds the state (``seed``) and the draws (``seed + 1``). Keyword-only.
    elbo_fn : callable, optional
        ``elbo_fn(state, obs, hyper)`` replaces `psm.elbo` (the printed expansion, for the errata).
        Keyword-only.

    Returns
    -------
    dict of str to float
        estimate, se, exact, z = |estimate - exact| / se, and exact_elbo_mc = E_q[log p - log q]
        (>= the bound).

    Raises
    ------
    ValueError
        From `warm_state` (bad counts, K, r or hyperparameters).
    ZeroDivisionError
        The standard error is exactly zero. Errors of ``elbo_fn``, NumPyro or SciPy propagate.

    Source: ``000_619a0297b9d686b2.txt`` eq. (3) (the bound as E_q[log p_xi - log q]) against the
    joint (2) as written by `ppl_models.psm.model`; the Monte Carlo check itself is a project addition.
    """
    with jax.enable_x64(True):
        state = warm_state(obs, K, hyper, r=r, seed=seed, sweeps=3)
        fn = elbo_fn or (lambda st, o, h: psm.elbo(st, _jx(o), h))
        exact = float(fn(state, obs, hyper))
    key = (id(obs), K, tuple(hyper), r, n_draws, seed)
    if key not in _MC_CACHE or _MC_CACHE[key][0] is not obs:
        m = _mc_terms(state, obs, hyper, n_draws, seed + 1)
        _MC_CACHE.clear()
        _MC_CACHE[key] = (obs, m["logp"] - m["logq"] - (m["obs_exact"] - m["obs_bound"]) - (m["cens_exact"] - m["cens_bound"]),
                          m["logp"] - m["logq"])
    d, gap_free = _MC_CACHE[key][1], _MC_CACHE[key][2]
    est, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(n_draws))
    return {"estimate": est, "se": se, "exact": exact, "z": abs(est - exact) / se,
            "exact_elbo_mc": float(np.mean(gap_free))}


_MC_CACHE: dict = {}


def printed_elbo(state, obs, hyper):
    """The printed expansion (13), evaluated literally.

    Its last two lines subtract E_q[log p(u_ik)], ..., E_q[log p(y_d')], E_q[log p(z_d')] where the
    entropies -E_q[log q(.)] belong: the Gaussian prior terms cancel, the Gaussian entropies are absent,
    and the tied categoricals contribute -D' sum_i s_i E[log pi_i] - D' sum_j t_j E[log psi_j]
    (E_q log p(y_d' | pi)) instead of their entropy.

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The current q.
    obs : custom_inference.data.Observations
        (I, J) counts.
    hyper : ppl_models.psm.PSMHyper
        The hyperparameters.

    Returns
    -------
    jax.Array, shape ()
        The state's float dtype.

    Raises
    ------
    None of its own (as `psm.elbo`: AttributeError for a ``hyper`` without the PSMHyper fields).

    Source: ``000_619a0297b9d686b2.txt`` appendix B eq. (13) as printed (the erratum in `ERRATA`).
    """
    d = _jx(obs)
    full = psm.elbo(state, d, hyper)
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = psm.moments(state)
    gauss = (psm._gauss_terms(mu, vu, hyper.tau_u) + psm._gauss_terms(mv, vv, hyper.tau_v)
             + psm._gauss_terms(mbu, vbu, hyper.tau_b) + psm._gauss_terms(mbv, vbv, hyper.tau_b))
    s, t = jax.nn.softmax(state.log_s), jax.nn.softmax(state.log_t)
    ent_st = -state.d_prime * (jnp.sum(s * jnp.log(s)) + jnp.sum(t * jnp.log(t)))
    elog_y = state.d_prime * (s @ psm._elog_dirichlet(state.alpha) + t @ psm._elog_dirichlet(state.beta))
    return full - gauss - ent_st - elog_y


# ---------------------------------------------------------------------------------------------
# NUTS cross-check


@dataclass(frozen=True)
class CrosscheckConfig:
    """A small stream from the prior predictive (`ppl_models.psm.simulate`) and the runs' settings.

    The default is the stream of `small_problem` ``(0)``, shared with the update-level tests and the
    errata (simulated once and fitted by the same compiled sweep); D' is the realised number of
    censored events (the posterior of `ppl_models.psm.model` with that D' is the exact posterior of the
    simulated stream). NUTS is gated by ArviZ (stored as the reference "psm", `nuts_reference`); VB
    runs Algorithm 1 to relative tolerance 1e-10.

    Parameters
    ----------
    n_users, n_items : int, default 8, 6
        I and J.
    K : int, default 2
        The latent dimension.
    n_events : int, default 200
        D, the observed events.
    hyper : ppl_models.psm.PSMHyper, default PSMHyper()
        The paper's hyperparameters (all one).
    seed : int, default 0
        Seeds the stream, NUTS and the VB restarts (``seed + 100 k``).
    num_chains, num_warmup, num_samples : int, default 4, 1000, 2000
        NUTS chains, warm-up and kept draws per chain.
    target_accept : float, default 0.9
        NUTS target acceptance probability.
    vi_restarts : int, default 3
        VB starts; the best by ELBO is compared.
    n_vi_draws : int, default 4000
        Draws from q.
    level1 : bool, default True
        Also run the update-level tables (`update_checks`, `dense_twin_checks`) on the same data (off
        in the fast default test).

    Raises
    ------
    None of its own (a frozen dataclass; values are checked where they are used).

    Source: project addition.
    """

    n_users: int = 8
    n_items: int = 6
    K: int = 2
    n_events: int = 200
    hyper: ppl.PSMHyper = ppl.PSMHyper()
    seed: int = 0
    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 2000
    target_accept: float = 0.9
    vi_restarts: int = 3
    n_vi_draws: int = 4000
    level1: bool = True


#: the groups the verdict is on (`VERDICT_GROUPS`) and those reported per scalar (`GAP_GROUPS`); see
#: `run_crosscheck` for why acceptance and psi are reported, not gated
VERDICT_GROUPS = ("predictive", "pi")
GAP_GROUPS = ("acceptance", "psi")


def identifiable_quantities(post: dict) -> dict[str, np.ndarray]:
    """The quantities compared across methods, from draws (chain, draw, ...).

    ``acceptance`` sigma(u_i.v_j + b_i + b_j) of every pair (I J), ``pi`` (I), ``psi`` (J), and
    ``predictive`` p(j | i, o = T) = psi_j sigma(a_ij) / sum_j' psi_j' sigma(a_ij') of every pair
    (I J). Raw u, v, b are not compared (rotations, sign flips, the b_i + c, b_j - c ridge).

    Parameters
    ----------
    post : dict of str to array_like
        u (C, D, I, K), v (C, D, J, K), b_user, pi (C, D, I), b_item, psi (C, D, J).

    Returns
    -------
    dict of str to numpy.ndarray
        Arrays (chain, draw, Q) of the draws' float dtype (float64 for NUTS under x64 and for
        `psm.draws_from_q`).

    Raises
    ------
    KeyError
        ``post`` lacks one of u, v, b_user, b_item, pi, psi.

    Source: ``000_619a0297b9d686b2.txt`` eq. (5) (the predictive); project addition.
    """
    u, v = np.asarray(post["u"]), np.asarray(post["v"])
    a = np.einsum("cdik,cdjk->cdij", u, v) + np.asarray(post["b_user"])[..., :, None] + np.asarray(post["b_item"])[..., None, :]
    acc = 1.0 / (1.0 + np.exp(-a))
    psi = np.asarray(post["psi"])
    f = acc * psi[..., None, :]
    pred = f / f.sum(-1, keepdims=True)
    c, d = a.shape[:2]
    return {"acceptance": acc.reshape(c, d, -1), "pi": np.asarray(post["pi"]), "psi": psi, "predictive": pred.reshape(c, d, -1)}


def crosscheck_problem(config: CrosscheckConfig):
    """The cross-check's data: `small_problem` of the config's sizes, seed and hyperparameters.

    Parameters
    ----------
    config : CrosscheckConfig
        The problem's settings.

    Returns
    -------
    obs : custom_inference.data.Observations
        Float64 counts, (I, J) = (n_users, n_items).
    r : float
        D'/D.
    truth : dict of str to numpy.ndarray
        The simulated parameters (as `small_problem`).
    d_prime : float
        D' = r D (what `psm.init` puts in the state).

    Raises
    ------
    ValueError, RuntimeError, TypeError
        As `small_problem` (bad sizes or hyperparameters; the simulated stream stalls; an unhashable
        hyper).

    Source: project addition.
    """
    c = config
    obs, r, truth = small_problem(c.seed, c.n_users, c.n_items, c.K, c.n_events, c.hyper)
    d_prime = float(r * float(np.sum(np.asarray(obs.values, np.float64))))  # what `psm.init` puts in the state
    return obs, r, truth, d_prime


def _pair_names(I: int, J: int) -> list[str]:
    return [f"({i},{j})" for i in range(I) for j in range(J)]


def nuts_reference(config: CrosscheckConfig = None, *, reference: str | None = None, progress: bool = False):
    """The NUTS reference "psm" of the cross-check problem (`validation.checks.references.Reference`).

    Stored when one matches the counts, D', K, hyperparameters and NUTS settings, else a fresh NumPyro
    NUTS run on `ppl_models.psm.model` (censored identities summed out, D' a pseudo-observation).
    Compared: `identifiable_quantities`.

    Parameters
    ----------
    config : CrosscheckConfig, optional
        The problem and NUTS settings (default ``CrosscheckConfig()``).
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
        A bad ``reference`` (or "stored" without a match); as `crosscheck_problem`.

    Source: project addition.
    """
    c = CrosscheckConfig() if config is None else config
    obs, r, _, d_prime = crosscheck_problem(c)
    I, J = obs.shape
    rows, cols, counts = np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values, np.float64)
    settings = xc.NutsSettings.of(c)
    key = xc.problem_key((rows, cols, counts), (I, J, c.K, d_prime, c.hyper), settings)
    run = lambda: xc.run_nuts(ppl.model, jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(counts), I, J, c.K,  # noqa: E731
                              d_prime, c.hyper, seed=c.seed, num_chains=c.num_chains, num_warmup=c.num_warmup,
                              num_samples=c.num_samples, target_accept=c.target_accept, progress=progress)
    return xc.nuts_reference("psm", key, settings, run,
                             lambda idata: identifiable_quantities(arviz_io.group_arrays(idata)), reference=reference)


def run_crosscheck(config: CrosscheckConfig = CrosscheckConfig(), *, progress: bool = True,
                   reference: str | None = None) -> xc.CrosscheckResult:
    """PSM VB (Algorithm 1) against ArviZ-gated NUTS on `ppl_models.psm.model`.

    On a stream simulated from the prior predictive (censored identities summed out); NUTS is the
    stored reference "psm" when it matches (`nuts_reference`).

    Verdict (`validation.checks.crosscheck.vi_crosscheck`, the project's `VIThresholds`: median
    standardized error <= 0.5 NUTS sd and corr(log means) >= 0.99 per group, NUTS gated on the same
    quantities) on `VERDICT_GROUPS`: the predictive p(j | i, o = T) of all I J pairs (eq. 5: what
    recommendations use) and E[pi]. `GAP_GROUPS` (the acceptance probabilities sigma(a_ij) of all pairs
    and psi) are reported per scalar (``extra["acceptance_table"]``, ``extra["psi_table"]``, each with
    its own NUTS gate), not gated: what the data identify is the product pi_i psi_j sigma(a_ij) (the
    selection probability of an observed pair), and its split into psi_j and sigma(a_ij) is where the
    approximation's structural gap sits. q(psi) = Dir(beta0 + c_j + D' t_j) counts the expected
    censored events D' t_j as if observed (the exact posterior does not know which items the censored
    events hit, so its psi is several times wider), and the tied mean field moves mass between psi_j
    and b_j (the paper's appendix C "variational model pruning"); the predictive, their normalised
    product, does not see the trade. Also: MacKay's probit predictive of q against the NUTS posterior
    mean of the predictive (``extra["mackay_abs_error"]``, median absolute difference) and, with
    ``config.level1``, the update-level tables on the same data.

    Measured 2026-11-25 (default config: D' = 423, 36 distinct pairs; stored reference "psm": 4 x 2000
    NUTS draws, 0 divergences, R-hat <= 1.002, bulk ESS >= 1650, E-BFMI >= 0.94; the 3 VB restarts
    reach the same ELBO -1116.887): verdict PASS. predictive: corr(log means) 0.992, median
    standardized error 0.24 (p90 0.68), median sd ratio 0.70, coverage90 0.98; pi: 0.994 / 0.35, sd
    ratio 0.20, coverage90 0.50. Reported: acceptance corr(log means) 0.77, median standardized error
    0.48 (p90 1.27), sd ratio 0.50, coverage90 0.71; psi 0.973 / 0.77, sd ratio 0.16, coverage90 0.17.
    MacKay vs the NUTS mean predictive: median |difference| 0.007.

    Parameters
    ----------
    config : CrosscheckConfig, default CrosscheckConfig()
        The problem and both runs' settings.
    progress : bool, default True
        Progress bar of a fresh NUTS run. Keyword-only.
    reference : {None, "stored", "rerun"}, optional
        As in `nuts_reference`. Keyword-only.

    Returns
    -------
    validation.checks.crosscheck.CrosscheckResult
        Method "vi"; ``extra`` holds ``elbo`` (the kept VB trace), ``acceptance_table``,
        ``psi_table``, ``structural_gap_table`` (`compare_vi`'s per-group statistics of `GAP_GROUPS`,
        reported), ``update_table`` / ``dense_table`` (with level1), ``mackay_abs_error``, ``obs``,
        ``r``, ``truth``, ``state``.

    Raises
    ------
    ValueError
        A bad ``reference``; as `crosscheck_problem`.

    Source: project addition (validation level 2: the solver against an ArviZ-gated NUTS reference
    on the same generative program); ``000_619a0297b9d686b2.txt`` eq. (5) and its probit
    approximation (sec. 3, "Making and trading predictions").
    """
    from validation.models import psm_evidence

    c = config
    obs, r, truth, d_prime = crosscheck_problem(c)
    I, J = obs.shape
    start = time.perf_counter()
    with jax.enable_x64(True):
        fits = [psm.fit(jax.random.PRNGKey(c.seed + 100 * k), obs, c.K, c.hyper, max_iter=5000, tol=1e-10,
                        progress=False, r=r, dtype=np.float64, n_draws=1, init_scale=0.5) for k in range(c.vi_restarts)]
        best, elbos = xc.best_restart(fits, [f.trace[-1] for f in fits])
        vi_seconds = time.perf_counter() - start
        users, items = np.repeat(np.arange(I), J), np.tile(np.arange(J), I)
        mackay_pred = np.asarray(psm.predictive_probability(best.state, users, items), np.float64)
    ref = nuts_reference(c, reference=reference, progress=progress)
    vq = identifiable_quantities(psm.draws_from_q(jax.random.PRNGKey(c.seed + 7), best.state, c.n_vi_draws))
    extra = {"elbo": np.asarray(best.trace), "obs": obs, "r": r, "truth": truth, "state": best.state,
             "mackay_abs_error": float(np.median(np.abs(mackay_pred - ref.summary["predictive"].mean)))}
    # the same per-group statistics as the verdict's, for the reported (ungated) groups
    extra["structural_gap_table"] = xc.compare_vi({g: ref.summary[g] for g in GAP_GROUPS}, {g: vq[g] for g in GAP_GROUPS},
                                                  ref.gates(list(GAP_GROUPS))).table
    if c.level1:
        extra["update_table"] = update_checks(obs, c.K, c.hyper, r=r)
        extra["dense_table"] = dense_twin_checks(obs, c.K, c.hyper, r=r)
    settings = {
        "data": f"prior-predictive stream: I = {I}, J = {J}, K = {c.K}, D = {c.n_events}, D' = {d_prime:.0f} "
                f"(r = {r:.3f}), {obs.nnz} distinct pairs; hyper {tuple(c.hyper)}",
        "vb": f"Algorithm 1, best of {c.vi_restarts} by ELBO ({', '.join(f'{e:.3f}' for e in elbos)}), tol 1e-10, "
              f"{vi_seconds:.1f} s, {c.n_vi_draws} draws from q",
        "verdict": f"on {', '.join(VERDICT_GROUPS)}; {', '.join(GAP_GROUPS)} reported per scalar (structural gap)",
    }
    pairs = _pair_names(I, J)
    return xc.vi_crosscheck(
        model="psm", solver="PSM VB (q)", ref=ref, solver_quantities=vq, solver_seconds=vi_seconds, config=c,
        settings=settings, verdict_groups=list(VERDICT_GROUPS),
        gap_groups={"acceptance": [f"sigma(a{p})" for p in pairs], "psi": [f"psi[{j}]" for j in range(J)]},
        plotted=[*VERDICT_GROUPS, *GAP_GROUPS], extra=extra, khat_problem=psm_evidence.khat_problem(best.state, obs, c.hyper))


def probit_vs_monte_carlo(state, users, items, *, n_draws: int = 4000, seed: int = 0) -> pd.DataFrame:
    """MacKay's sigma(x_ij) (the solver's acceptance probability) against E_q[sigma(a_ij)].

    E_q[sigma(a_ij)], a_ij ~ N(mean, var) under q (the Gaussian the approximation assumes), by Monte
    Carlo and by 80-node Gauss-Hermite quadrature (the exact value to ~1e-10, free of Monte Carlo
    noise).

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The fitted q.
    users, items : array_like, shape (E,), int
        The pairs.
    n_draws : int >= 2, default 4000
        Monte Carlo draws per pair. Keyword-only.
    seed : int, default 0
        Seeds numpy's generator. Keyword-only.

    Returns
    -------
    pandas.DataFrame
        One row per pair: user, item (int), mackay, monte_carlo, mc_se, abs_diff
        (|mackay - monte_carlo|), quadrature, quad_abs_diff (|mackay - quadrature|: the
        approximation's own error) (float64).

    Raises
    ------
    None of its own (no index checks); users and items that do not broadcast make JAX raise a shape
    error, a negative ``n_draws`` numpy's ValueError.

    Source: ``000_619a0297b9d686b2.txt`` sec. 3, "Making and trading predictions" (MacKay's
    sigma(x_ij)); the Monte Carlo comparison is a project addition.
    """
    users, items = np.asarray(users), np.asarray(items)
    with jax.enable_x64(True):
        mean, var = (np.asarray(x, np.float64) for x in psm._pair_mean_var(state, jnp.asarray(users), jnp.asarray(items)))
        mk = np.asarray(psm.acceptance_probability(state, users, items), np.float64)
    z = np.random.default_rng(seed).standard_normal((n_draws, users.size))
    sig = 1.0 / (1.0 + np.exp(-(mean + np.sqrt(var) * z)))
    mc = sig.mean(0)
    x, w = np.polynomial.hermite_e.hermegauss(80)  # nodes and weights for N(0, 1) (weights sum to sqrt(2 pi))
    quad = (1.0 / (1.0 + np.exp(-(mean[:, None] + np.sqrt(var)[:, None] * x[None])))) @ (w / w.sum())
    return pd.DataFrame({"user": users, "item": items, "mackay": mk, "monte_carlo": mc,
                         "mc_se": sig.std(0, ddof=1) / np.sqrt(n_draws), "abs_diff": np.abs(mk - mc),
                         "quadrature": quad, "quad_abs_diff": np.abs(mk - quad)})


# ---------------------------------------------------------------------------------------------
# errata


@functools.lru_cache(maxsize=1)
def errata_problem():
    """The errata's problem, computed once: ``(obs, r, state, xi, got, want)``.

    One compilation serves the tests, the errata and `validation.models.psm_printed`.

    Returns
    -------
    obs : custom_inference.data.Observations
        The tests' small problem (`small_problem` (0): 8 users, 6 items).
    r : float
        Its D'/D.
    state : custom_inference.psm.PSMState
        Warmed at K = 2 (float64, `warm_state`).
    xi : jax.Array, shape (N,), float64
        Bound parameters on the observed pairs, 1.1 times their optimum + 0.05 (off the optimum on
        purpose).
    got, want : dict
        The solver's and the dense twin's quantities (names of `dense_targets`).

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    obs, r, _ = small_problem(0)
    with jax.enable_x64(True):
        state = warm_state(obs, _ERRATA_K, HYPER, r=r)
        xi = 1.1 * psm.pair_xi(state, _jx(obs)) + 0.05
        got = _solver_quantities(state, obs, HYPER, xi)
        want = dense_targets(state, obs, HYPER, xi)
    return obs, r, state, xi, got, want



_ERRATA_K = 2  # the cross-check's K: one compiled sweep serves tests, errata and cross-check


def _dense_check(key: str, printed_fn):
    """Check: the solver's ``key`` with the printed formula swapped in must equal its dense I x J twin
    within 1e-10 relative (float64; the `dense_twin_checks` comparison). Returns (passed, max relative
    difference)."""

    def check(form: str):
        obs, r, state, xi, got, want = errata_problem()
        if form == "printed":
            with jax.enable_x64(True):
                got = {**got, **printed_fn(state, obs, HYPER, xi, got)}
        v = updates.max_relative_difference(got[key], want[key])
        return v < 1e-10, v

    return check


def printed_bias_nu(state, obs, hyper, xi, got):
    """Sec. 4's printed bias update nu_i (background term), swapped into the solver's ``user_nu_i``.

    nu_i = s_i D' (-1/2 - 2 lam* (nu- + E[u_i]^T m-dag)) + sparse sum.

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        I users, K factors.
    obs, hyper, xi
        Unused (the common signature of the printed forms).
    got : dict
        The solver's quantities, with ``user_nu_i`` (I,).

    Returns
    -------
    dict
        ``{"user_nu_i": (I,) array}``.

    Raises
    ------
    KeyError
        ``got`` has no "user_nu_i"; none of its own otherwise.

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, bias update (as printed).
    """
    s = jax.nn.softmax(state.log_s)
    bg = psm.item_background(state)
    lam = jj_lambda(state.xi_star)
    delta = state.d_prime * s * (-2 * lam) * (state.u_mu @ bg.m_dag - state.u_mu @ bg.m_ddag)
    return {"user_nu_i": got["user_nu_i"] + np.asarray(delta)}


def printed_omega_star(part: str):
    """B.4.1's printed sum_j t_j Omega*_ij with one term as printed.

    Parameters
    ----------
    part : str
        "quadratic" (2 E[b_i u_i^T] m-dag for 2 E[b_i] E[u_i]^T m-ddag), "linear"
        (-1/2 E[u_i]^T m-dag for -1/2 E[u_i]^T m-ddag) or anything else for the constant
        ((xi*)^2 lam*/2 for lam* (xi*)^2).

    Returns
    -------
    callable
        ``fn(state, obs, hyper, xi, got) -> {"user_omega_star": (I,) array}`` (``got`` holds the
        solver's ``user_omega_star``).

    Raises
    ------
    None of its own.

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, B.4.1.
    """

    def fn(state, obs, hyper, xi, got):
        bg = psm.item_background(state)
        lam = jj_lambda(state.xi_star)
        right = got["user_omega_star"]
        mu, bmu = state.u_mu, state.bu_mu
        if part == "quadratic":  # 2 E[b_i u_i^T] m-dag in place of 2 E[b_i] E[u_i]^T m-ddag
            delta = -lam * 2 * bmu * (mu @ bg.m_dag - mu @ bg.m_ddag)
        elif part == "linear":  # -1/2 E[u_i]^T m-dag in place of -1/2 E[u_i]^T m-ddag
            delta = -0.5 * (mu @ bg.m_dag - mu @ bg.m_ddag)
        else:  # + (xi*)^2 lam* / 2 in place of + lam* (xi*)^2
            delta = jnp.full_like(bmu, -0.5 * lam * state.xi_star**2)
        return {"user_omega_star": right + np.asarray(delta)}

    return fn


def printed_S2(version: str):
    """The printed all-pairs sum S2 = sum_ij s_i t_j E[a_ij^2].

    Parameters
    ----------
    version : str
        "sec4" (sec. 4's (xi*)^2 cross terms 2 m-dag.m-dag + 2 m-dag.m-ddag) or anything else for
        B.3's (4 m-dag.m-dag).

    Returns
    -------
    callable
        ``fn(state, obs, hyper, xi, got) -> {"S2": float}`` (``got`` holds the solver's ``S2``).

    Raises
    ------
    None of its own.

    Source: ``000_619a0297b9d686b2.txt`` sec. 4 and B.3 (as printed).
    """

    def fn(state, obs, hyper, xi, got):
        ub, ib = psm.user_background(state), psm.item_background(state)
        s2 = got["S2"]
        right_cross = 2 * ub.m_ddag @ ib.m_dag + 2 * ub.m_dag @ ib.m_ddag
        printed = (2 * ub.m_dag @ ib.m_dag + 2 * ub.m_dag @ ib.m_ddag) if version == "sec4" else 4 * ub.m_dag @ ib.m_dag
        return {"S2": float(s2 - right_cross + printed)}

    return fn


def _elbo_expansion_check(form: str):
    obs, r = errata_problem()[:2]
    fn = (lambda st, o, h: printed_elbo(st, o, h)) if form == "printed" else None
    out = monte_carlo_elbo_check(obs, _ERRATA_K, HYPER, r=r, n_draws=1000, seed=0, elbo_fn=fn)
    return out["z"] < 4, out["z"]


ERRATA: tuple[Erratum, ...] = (
    Erratum(
        _SEED000, "eq. (8), mean-times-precision m_i (background term)",
        "s_i D' [(-1/2 - 2 lam* E[b_i]) m-dag - 2 lam* m-ddag]",
        "s_i D' [(-1/2 - 2 lam* E[b_i]) m-ddag - 2 lam* m-dag]  (m-dag = sum t_j E[b_j] E[v_j], m-ddag = sum t_j E[v_j])",
        "the censored events contribute sum_j t_j (-1/2 - 2 lam* E[b_i + b_j]) E[v_j]: the -1/2 and E[b_i] parts multiply "
        "sum_j t_j E[v_j] (m-ddag), the E[b_j] part sum_j t_j E[b_j] E[v_j] (m-dag); the printed form swaps the two caches "
        "defined in sec. 4 and B.1 (check: dense I x J sum of m_i, max relative difference)",
        "dense twin", _dense_check("user_m_i", printed_user_targets),
    ),
    Erratum(
        _SEED000, "sec. 4, bias update nu_i (background term)",
        "nu_i = s_i D' (-1/2 - 2 lam* (nu- + E[u_i]^T m-dag)) + ...",
        "nu_i = s_i D' (-1/2 - 2 lam* (nu- + E[u_i]^T m-ddag)) + ...",
        "sum_j t_j E[u_i . v_j] = E[u_i]^T sum_j t_j E[v_j] = E[u_i]^T m-ddag (check: dense I x J sum of nu_i)",
        "dense twin", _dense_check("user_nu_i", printed_bias_nu),
    ),
    Erratum(
        _SEED000, "sec. 4 and B.4.1, sum_j t_j Omega*_ij (quadratic cross term)",
        "-lam* (... + 2 E[b_i u_i^T] m-dag + 2 E[u_i^T] m-dag + ...)",
        "-lam* (... + 2 E[b_i] E[u_i]^T m-ddag + 2 E[u_i]^T m-dag + ...)",
        "the cross term 2 E[b_i u_i . v_j] averaged over t_j is 2 E[b_i] E[u_i]^T m-ddag (check: dense sum_j t_j Omega*_ij)",
        "dense twin", _dense_check("user_omega_star", printed_omega_star("quadratic")),
    ),
    Erratum(
        _SEED000, "sec. 4 and B.4.1, sum_j t_j Omega*_ij (linear term)",
        "-1/2 (E[u_i^T] m-dag + E[b_i] + nu-)",
        "-1/2 (E[u_i^T] m-ddag + E[b_i] + nu-)",
        "sum_j t_j E[a_ij] = E[u_i]^T m-ddag + E[b_i] + nu- (check: dense sum_j t_j Omega*_ij)",
        "dense twin", _dense_check("user_omega_star", printed_omega_star("linear")),
    ),
    Erratum(
        _SEED000, "sec. 4 and B.4.1, sum_j t_j Omega*_ij (constant term)",
        "+ log s(xi*) + (xi*)^2 lam* / 2 - xi*/2",
        "+ log s(xi*) + lam* (xi*)^2 - xi*/2",
        "Omega* contains + lam* xi*^2 and sum_j t_j = 1; the halving is constant in i, so s (normalised) is unaffected, "
        "but the cached sum (and any ELBO built from it) is off (check: dense sum_j t_j Omega*_ij)",
        "dense twin", _dense_check("user_omega_star", printed_omega_star("constant")),
    ),
    Erratum(
        _SEED000, "sec. 4, shared parameter (xi*)^2 (cached all-pairs sum)",
        "tr P+ P- + 2 m+dag m-dag + 2 m+dag m-ddag + 2 nu+ nu- + kappa+ + kappa-",
        "tr P+ P- + 2 m+ddag . m-dag + 2 m+dag . m-ddag + 2 nu+ nu- + kappa+ + kappa-",
        "sum_ij s_i t_j 2 E[u_i . v_j (b_i + b_j)] = 2 (sum_i s_i E b_i E u_i) . (sum_j t_j E v_j) + 2 (sum_i s_i E u_i) . "
        "(sum_j t_j E b_j E v_j) (check: dense sum_ij s_i t_j E a_ij^2)",
        "dense twin", _dense_check("S2", printed_S2("sec4")),
    ),
    Erratum(
        _SEED000, "B.3, sum_ij s_i t_j E[a_ij^2] (the same sum printed again)",
        "tr P+ P- + 2 m+dag^T m-dag + 2 m+dag^T m-dag + 2 nu+ nu- + kappa+ + kappa-",
        "tr P+ P- + 2 m+ddag . m-dag + 2 m+dag . m-ddag + 2 nu+ nu- + kappa+ + kappa-",
        "as the sec. 4 row: one cross term pairs the user-side bias-weighted mean with the item-side plain mean and the "
        "other the reverse (check: dense sum_ij s_i t_j E a_ij^2)",
        "dense twin", _dense_check("S2", printed_S2("B3")),
    ),
    Erratum(
        _SEED000, "eq. (13), the expanded bound (last two lines)",
        "... - sum E_q[log p(u_ik)] - ... - sum_d' E_q[log p(y_d')] - sum_d' E_q[log p(z_d')]",
        "... - sum E_q[log q(u_ik)] - ... - sum_d' E_q[log q(y_d')] - sum_d' E_q[log q(z_d')]",
        "the bound (3) subtracts E_q[log q] (the entropies); as printed the Gaussian priors cancel and the entropies of "
        "q(u), q(v), q(b), q(y), q(z) are missing (check: |bound - Monte Carlo E_q[log p_xi - log q]| in standard errors, "
        "< 4 passes; 1000 draws)",
        "Monte Carlo ELBO", _elbo_expansion_check,
    ),
)


# ---------------------------------------------------------------------------------------------
# the registry's view of PSM (`validation.checks.registry`)


def _dense_check_table() -> pd.DataFrame:
    """`dense_twin_checks` on the tests' small problem (K = 3, chunks of 5 pairs: several chunks and
    padding) with ``passed`` = max relative difference < 1e-10 (float64 rounding)."""
    obs, r, _ = small_problem(0)
    t = dense_twin_checks(obs, _ERRATA_K, r=r, chunk=5)
    return t.assign(passed=t.max_rel_diff < 1e-10)


def _monotone_table() -> pd.DataFrame:
    """`monotone_check` (30 sweeps from `psm.init`) on the tests' small problem as a one-row table."""
    obs, r, _ = small_problem(0)
    ok, worst, trace = monotone_check(obs, _ERRATA_K, r=r, sweeps=30)
    return pd.DataFrame([{"check": "ELBO never decreases (30 sweeps)", "largest_relative_decrease": worst,
                          "first": float(trace[0]), "last": float(trace[-1]), "passed": bool(ok)}])


#: VI evidence measured on this solver (see `validation.models.catalog`: k-hat on its cross-check problem, VSBC
#: with master seed 0, function-specific k-hat); `factorbayes evidence` shows it, the slow tests reproduce it.
MEASURED_VB = {"khat": 2.19, "n_latent": 56, "vsbc_sims": 200, "vsbc_passed": True,
               "vsbc": "pass (200 sims; smallest p 0.077, pi_0)",
               "fn_khat": {"n": 110, "below_0.7": 0, "0.7_to_1": 0, "above_1": 110, "worst": 2.32,
                   "worst_at": "acceptance[44]", "best": 2.19, "hr_min": 1.92,
                   "read": "none from q even with PSIS: "
                           "read acceptance, pi, psi and the predictive from NUTS (q's means only within the cross-check's gap)"}}


SPEC = registry.ModelSpec(
    name="psm",
    solvers=(registry.SolverSpec("vb", "vi", run_crosscheck, CrosscheckConfig, "psm",
                                 registry.lazy("custom_inference.psm:ALGORITHM"), frontdoor="psm",
                                 evaluations={"implicit": registry.EvaluationEntry(registry.lazy("validation.models.psm_eval:implicit_runner"),
                                     defaults=registry.lazy("validation.models.psm_eval:PSM_DEFAULTS"))},
                                 **registry.vi_evidence("validation.models.psm_evidence", MEASURED_VB)),),
    references=(registry.ReferenceSpec("psm", nuts_reference, CrosscheckConfig),),
    checks={"dense_twins": _dense_check_table,
            "stationarity": lambda: update_checks(small_problem(0)[0], _ERRATA_K, r=small_problem(0)[1]),
            "monotone": _monotone_table},
    errata=(ERRATA,),
    notebook="notebooks/psm.py",
    absent={"bridge": "VI only: no Gibbs blocks to run as NumPyro CustomGibbs blocks"},
)
