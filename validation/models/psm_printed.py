"""PSM (paired symbols, appendix B and sec. 4): every background cache and cached sum of the solver
against Monte Carlo from q, with the printed forms evaluated beside them.

The errata rows of `validation.models.psm` judge the printed cache formulas with a dense I x J twin
(built from the moments of q). Here every quantity is re-estimated from its definition on draws
u_i, v_j, b_i, b_j ~ q, with the Jaakkola-Jordan bound of sec. 3 written out on each draw
(log sigma(xi) - lambda(xi) (a^2 - xi^2) - a/2 - xi/2 for a censored pair), so neither the moment
formulas nor the cache algebra of the project is used. The comparison rule is that of
`validation.models.printed_forms` (max |z| <= 5).

Source: ``000_619a0297b9d686b2.txt`` sec. 3 (the bound), sec. 4 (eqs. 6-8, 11, the bias update, xi*,
sum_j t_j Omega*_ij), appendix B.1-B.4.1; check: project addition (issue 26 item 1).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import psm
from custom_inference.data import Observations
from validation.models import psm as psm_checks
from validation.models.printed_forms import Z_MAX, mc_z, x64

__all__ = ["monte_carlo_draws", "monte_carlo_checks", "cache_checks", "PRINTED"]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _lam(xi):
    return (_sigmoid(xi) - 0.5) / (2.0 * xi)


def monte_carlo_draws(state, obs, hyper, xi, n_draws: int = 20000, seed: int = 0) -> dict:
    """Per-draw values of every quantity `validation.models.psm.dense_targets` names (except the ELBO).

    Each an array (n_draws, ...) whose mean is the quantity: the definitions of sec. 4 and B.1 evaluated on
    draws u_i, v_j, b_i, b_j ~ q (`custom_inference.psm.draws_from_q`), with sec. 3's bound written out on
    each draw. Work O(n_draws I J K^2), memory O(n_draws I J K^2) for the per-pair precisions: small
    problems only.

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        I users, J items, K factors (its s, t, d_prime and xi_star are used too).
    obs : custom_inference.data.Observations
        The (I, J) counts; N observed pairs.
    hyper : custom_inference.psm.PSMHyper
        Its tau_u, tau_v, tau_b are used.
    xi : array_like, shape (N,), float
        Bound parameters on the observed pairs (xi* elsewhere).
    n_draws : int, default 20000
        Draws from q.
    seed : int, default 0
        ``PRNGKey(seed)`` of the draws.

    Returns
    -------
    dict
        Quantity name -> numpy.ndarray float64 (n_draws, ...): the caches ``{item,user}_{P, m_dag, m_ddag,
        nu, kappa}``, ``{user,item}_{first, second, omega_star, omega}``, S1, S2, xi_star_sq, ``{user,item}_P_i``
        (.., K, K), ``{user,item}_m_i`` (.., K), ``{user,item}_rho``, ``{user,item}_nu_i``.

    Raises
    ------
    None of its own.

    Source: ``000_619a0297b9d686b2.txt`` sec. 3-4, appendix B.1; check: project addition.
    """
    d = {k: np.asarray(v[0], np.float64) for k, v in psm.draws_from_q(jax.random.PRNGKey(seed), state, n_draws).items()}
    u, v, bu, bv = d["u"], d["v"], d["b_user"], d["b_item"]
    I, J = obs.shape
    rows, cols = np.asarray(obs.rows), np.asarray(obs.cols)
    C = np.zeros((I, J))
    C[rows, cols] = np.asarray(obs.values, np.float64)
    G = np.zeros((I, J), bool)
    G[rows, cols] = True
    s, t = (np.asarray(jax.nn.softmax(x), np.float64) for x in (state.log_s, state.log_t))
    Dp, xs = float(state.d_prime), float(state.xi_star)
    S = s[:, None] * t[None, :]
    Xi = np.full((I, J), xs)
    Xi[rows, cols] = np.asarray(xi, np.float64)
    Lam = _lam(Xi)
    W = C + Dp * S
    a = np.einsum("nik,njk->nij", u, v) + bu[:, :, None] + bv[:, None, :]

    def omega(x, xi_):     # sec. 3's bound of log sigma(-a) (a censored pair), on each draw
        return np.log(_sigmoid(xi_)) - _lam(xi_) * (x**2 - xi_**2) - x / 2 - xi_ / 2

    out = {}
    for side, w, m, b in (("item", t, v, bv), ("user", s, u, bu)):
        out[f"{side}_P"] = np.einsum("j,njk,njl->nkl", w, m, m)
        out[f"{side}_m_dag"] = np.einsum("j,nj,njk->nk", w, b, m)
        out[f"{side}_m_ddag"] = np.einsum("j,njk->nk", w, m)
        out[f"{side}_nu"] = b @ w
        out[f"{side}_kappa"] = b**2 @ w
    out["user_first"], out["user_second"] = a @ t, a**2 @ t
    out["item_first"], out["item_second"] = np.einsum("i,nij->nj", s, a), np.einsum("i,nij->nj", s, a**2)
    out["S1"], out["S2"] = np.einsum("ij,nij->n", S, a), np.einsum("ij,nij->n", S, a**2)
    om_star, om = omega(a, xs), omega(a, Xi)
    out["user_omega_star"], out["item_omega_star"] = om_star @ t, np.einsum("i,nij->nj", s, om_star)
    out["user_omega"], out["item_omega"] = om @ t, np.einsum("i,nij->nj", s, om)
    out["xi_star_sq"] = np.einsum("ij,nij->n", ~G * S, a**2) / np.sum(~G * S)
    eb = bu[:, :, None] + bv[:, None, :]
    lin = C * (0.5 - 2 * Lam * eb) + Dp * S * (-0.5 - 2 * Lam * eb)     # the weight of v_j in m_i (eq. 7)
    eye = lambda n: np.eye(state.u_mu.shape[1])[None, None]  # noqa: E731
    out["user_P_i"] = hyper.tau_u * eye(I) + np.einsum("ij,njk,njl->nikl", 2 * W * Lam, v, v)
    out["item_P_i"] = hyper.tau_v * eye(J) + np.einsum("ij,nik,nil->njkl", 2 * W * Lam, u, u)
    out["user_m_i"], out["item_m_i"] = np.einsum("nij,njk->nik", lin, v), np.einsum("nij,nik->njk", lin, u)
    uv = np.einsum("nik,njk->nij", u, v)
    for side, rest, axis in (("user", uv + bv[:, None, :], 2), ("item", uv + bu[:, :, None], 1)):
        out[f"{side}_rho"] = np.broadcast_to(hyper.tau_b + np.sum(2 * W * Lam, axis=axis - 1), (n_draws, I if side == "user" else J))
        out[f"{side}_nu_i"] = np.sum(C * (0.5 - 2 * Lam * rest) + Dp * S * (-0.5 - 2 * Lam * rest), axis=axis)
    return out


#: printed forms of `validation.models.psm` (the errata rows' replacements), by the quantity they replace
PRINTED = {
    "eq. (8), m_i background term": ("user_m_i", psm_checks.printed_user_targets),
    "sec. 4, bias nu_i background term": ("user_nu_i", psm_checks.printed_bias_nu),
    "B.4.1, sum_j t_j Omega*_ij quadratic cross term": ("user_omega_star", psm_checks.printed_omega_star("quadratic")),
    "B.4.1, sum_j t_j Omega*_ij linear term": ("user_omega_star", psm_checks.printed_omega_star("linear")),
    "B.4.1, sum_j t_j Omega*_ij constant term": ("user_omega_star", psm_checks.printed_omega_star("constant")),
    "sec. 4, (xi*)^2 all-pairs sum": ("S2", psm_checks.printed_S2("sec4")),
    "B.3, sum_ij s_i t_j E[a_ij^2]": ("S2", psm_checks.printed_S2("B3")),
}


@functools.lru_cache(maxsize=2)
@x64
def monte_carlo_checks(n_draws: int = 20000, seed: int = 0) -> pd.DataFrame:
    """Every solver quantity of `validation.models.psm.dense_targets` and every printed form of its errata rows
    against Monte Carlo from q.

    The quantities: caches B.1, eqs. 6-8, 11, 16, 17, bias updates, B.4.1; at the errata's warm state
    (``validation.models.psm.errata_problem``: 8 users, 6 items, K = 2, xi on G off its optimum). Float64
    (`x64`); the result is cached (`functools.lru_cache`, two entries), so callers must not modify it.

    Parameters
    ----------
    n_draws : int >= 2, default 20000
        Draws from q.
    seed : int, default 0
        Seed of the draws.

    Returns
    -------
    pandas.DataFrame
        One row per quantity and form: quantity, form ("solver" or the printed row's location in `PRINTED`),
        z (max |z| over the quantity's entries), passes (z <= `Z_MAX` = 5).

    Raises
    ------
    ValueError
        For ``n_draws`` < 2 (from `mc_z`).

    Source: ``000_619a0297b9d686b2.txt`` sec. 4 and appendix B; check: project addition.
    """
    obs, _, state, xi, got, _ = psm_checks.errata_problem()
    with jax.enable_x64(True):
        mc = monte_carlo_draws(state, obs, psm_checks.HYPER, xi, n_draws, seed)
    got = {**got, "xi_star_sq": got["xi_star"] ** 2}
    rows = []
    for key, draws in mc.items():
        z = mc_z(draws, got[key])
        rows.append(dict(quantity=key, form="solver", z=z, passes=z <= Z_MAX))
    for loc, (key, fn) in PRINTED.items():
        with jax.enable_x64(True):
            printed = fn(state, obs, psm_checks.HYPER, xi, got)[key]
        z = mc_z(mc[key], printed)
        rows.append(dict(quantity=key, form=loc, z=z, passes=z <= Z_MAX))
    return pd.DataFrame(rows)


#: the printed forms `cache_checks` can judge without the compiled sweep (they replace cached sums only)
_CACHE_ONLY = ("B.4.1, sum_j t_j Omega*_ij quadratic cross term", "B.4.1, sum_j t_j Omega*_ij linear term",
               "B.4.1, sum_j t_j Omega*_ij constant term", "sec. 4, (xi*)^2 all-pairs sum",
               "B.3, sum_ij s_i t_j E[a_ij^2]")


@x64
def cache_checks(n_draws: int = 8000, seed: int = 0) -> pd.DataFrame:
    """The fast subset of `monte_carlo_checks`: no sweep is compiled.

    A random state (`validation.models.psm.warm_state` with 0 sweeps: factor variances in [0.25, 1], random
    s, t; bias means N(+-0.5, 1) so that the bias-weighted caches differ from the plain ones) on random
    counts (8 x 6, Poisson(0.6)); the ten background caches (B.1), sum_j t_j E a_ij and E a_ij^2, their item
    twins, S1, S2 and sum_j t_j Omega*_ij (eager calls of `custom_inference.psm`), and the five printed forms
    of `_CACHE_ONLY`, against Monte Carlo from q. Float64 (`x64`).

    Parameters
    ----------
    n_draws : int >= 2, default 8000
        Draws from q.
    seed : int, default 0
        Seed of the counts, the state and the draws.

    Returns
    -------
    pandas.DataFrame
        As `monte_carlo_checks`: quantity, form, z, passes.

    Raises
    ------
    ValueError
        For ``n_draws`` < 2 (from `mc_z`).

    Source: ``000_619a0297b9d686b2.txt`` sec. 4, appendix B.1, B.3, B.4.1; check: project addition.
    """
    rng = np.random.default_rng(seed)
    counts = rng.poisson(0.6, (8, 6)).astype(float)
    counts[0, 0] = max(counts[0, 0], 1.0)
    obs = Observations.from_dense(counts)
    state = psm_checks.warm_state(obs, 2, psm_checks.HYPER, seed=seed, sweeps=0)
    state = state._replace(bu_mu=jnp.asarray(rng.normal(0.5, 1.0, 8)), bv_mu=jnp.asarray(rng.normal(-0.5, 1.0, 6)))
    xi = jnp.asarray(rng.uniform(0.5, 2.5, obs.nnz))
    ib, ub = psm.item_background(state), psm.user_background(state)
    got = {f"{side}_{f}": getattr(bg, f) for side, bg in (("item", ib), ("user", ub)) for f in psm.Background._fields}
    got["user_first"], got["user_second"] = psm.user_background_terms(state, ib)
    got["item_first"], got["item_second"] = psm.item_background_terms(state, ub)
    got["S1"], got["S2"] = psm.background_sums(ub, ib)
    got["user_omega_star"] = psm.omega_star_user_sums(state, ib)
    got["item_omega_star"] = psm.omega_star_item_sums(state, ub)
    got = {k: np.asarray(v, np.float64) for k, v in got.items()}
    mc = monte_carlo_draws(state, obs, psm_checks.HYPER, xi, n_draws, seed)
    rows = [dict(quantity=k, form="solver", z=mc_z(mc[k], v)) for k, v in got.items()]
    for loc in _CACHE_ONLY:
        key, fn = PRINTED[loc]
        rows.append(dict(quantity=key, form=loc, z=mc_z(mc[key], np.asarray(fn(state, obs, psm_checks.HYPER, xi, got)[key]))))
    out = pd.DataFrame(rows)
    out["passes"] = out.z <= Z_MAX
    return out
