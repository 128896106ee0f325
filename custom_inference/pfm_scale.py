r"""Exact per-factor scale moves for the NPFM / PPFM Gibbs samplers (`custom_inference.pfm`).

Why. The likelihood of eqs. 5.6 / 5.20 sees factor k only through r_k v_ik v_jk for the pairs
{i, j} of a row. NPFM: r_k -> a r_k, v_.k -> v_.k / sqrt(a) (every feature) leaves every rate
unchanged. PPFM (r_k = 1): when every pair term joins a user-side feature to an item-side one
(ids only; `PFMData.bipartite`), v_ik -> a v_ik for user-side i and v_jk -> v_jk / a for
item-side j does. The Gibbs sweep moves along such a likelihood-flat direction in steps of
order 1 / sqrt(counts), so its mixing time grows with the total count (issue 13's diagnosis,
`validation.evaluation.pfm_experiments.sbc_mixing`). A Metropolis move along the orbit costs O(D) per
factor, independent of the data size.

The move (derived here; a group move in the sense of Liu & Sabatti 2000). Reference measure:
Lebesgue measure on the positive orthant of all continuous coordinates (the same measure the
log joint `pfm.log_joint` / the NumPyro program's log density is a density for). For each
factor k the transformation T_t (t = log a real, the group (R, +) whose Haar measure is dt) acts

    NPFM:  r_k -> e^t r_k,  v_ik -> e^{-t/2} v_ik (all D features i),  delta_k -> e^{t/2} delta_k
    PPFM:  v_ik -> e^{s_i t} v_ik   (s_i = +1 user side, -1 item side, 0 a feature in no row)

and fixes everything else. NPFM moves delta_k along, so that every v_ik's prior
Ga(zeta_i, delta_k) is invariant (a density ratio e^{t/2} per element that the Jacobian
e^{-t/2} cancels); without it v_.k's prior would pin the orbit to a width ~ 2 / sqrt(sum_i zeta_i)
and the move would only trade the slow r-v direction for a slow v-delta one. PPFM cannot move
delta_k (shared by both sides, which scale oppositely).

A step draws eps_k ~ N(0, sd_k^2) per factor, independently of the moved coordinates (sd_k is
a function of fixed coordinates only: gamma0, g for NPFM; zeta for PPFM; and a scale picked
uniformly from `SCALE_MULTIPLIERS`), so eps and -eps are equally likely and (x, eps) ->
(T_eps x, -eps) is an involution; accepting with probability
min(1, pi(T_eps x) |det dT_eps / dx| / pi(x)) leaves pi invariant (Metropolis-Hastings with a
deterministic proposal map). The K factors move at once with independent accept decisions: the
orbit density factorises over k, so this is K independent moves.

The log ratio, derived (likelihood terms cancel exactly; only moved coordinates' priors and
the Jacobian remain):

    NPFM:  log|J| = eps (1 - D/2 + 1/2);  r_k prior (gamma0/K - 1) eps - c r_k (e^eps - 1);
           delta_k prior (g - 1) eps / 2 - h delta_k (e^{eps/2} - 1);  v_.k priors + D eps / 2;
           total  phi_k(eps) = (gamma0/K + g/2) eps - c r_k (e^eps - 1) - h delta_k (e^{eps/2} - 1)
    PPFM:  log|J| = eps sum_i s_i;  v priors sum_i [(zeta_i - 1) s_i eps - delta_k v_ik (e^{s_i eps} - 1)];
           total  phi_k(eps) = eps sum_i s_i zeta_i - delta_k (S_Uk (e^eps - 1) + S_Ik (e^-eps - 1)),
           S_Uk = sum_{s_i = +1} v_ik, S_Ik = sum_{s_i = -1} v_ik.

Both are concave in eps (log-concave orbit densities). Proposal scale: NPFM's orbit density in
t is, where c r_k e^t dominates, a log-Gamma(gamma0/K + g/2) law (sd sqrt(trigamma(.)));
PPFM's has curvature about delta_k (S_Uk + S_Ik) ~ sum_{s_i != 0} zeta_i at its mode, so
sd_k = 1 / sqrt(that). `validation.models.pfm.scale_move_checks` checks phi against the program's
log joint plus log|J| at random states, that the likelihood is unchanged, and that the move
alone keeps the prior invariant.

Float32: the moved values are clamped below at the dtype's smallest normal number, the same
convention as `pfm.gamma_draw` (a draw never becomes 0); float64 never reaches it in practice.

Source: project addition (derived above; Liu & Sabatti 2000 for group moves; the model of
``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import polygamma

__all__ = ["SCALE_MULTIPLIERS", "scale_log_ratio", "scale_transform", "scale_move", "move_available"]

#: Multipliers of the base proposal sd; each step picks one per factor uniformly (independently
#: of the state, so the proposal stays symmetric).
SCALE_MULTIPLIERS = (0.25, 1.0, 3.0)


def _is_np(state) -> bool:
    return "r" in state._fields


def move_available(state, data) -> bool:
    """True when the scale move is defined: always for NPFM; for PPFM only on data whose pair
    terms all join a user-side to an item-side feature (``data.bipartite``).

    ``state``: NPFMState / PPFMState; ``data``: PFMData. Returns a Python bool (static).

    Raises nothing of its own.

    Source: project addition (module docstring).
    """
    return _is_np(state) or bool(getattr(data, "bipartite", False))


def _side(state, data):
    return jnp.asarray(data.side, state.V.dtype)


def _coefficients(state, data, hyper):
    """(A, B, C, rho) with phi_k(eps) = A_k eps - B_k expm1(eps) - C_k expm1(rho eps), O(D K)."""
    V = state.V
    K = V.shape[1]
    if _is_np(state):
        A = (state.gamma0 / K + 0.5 * hyper.g) * jnp.ones(K, V.dtype)
        return A, state.c * state.r, hyper.h * state.delta, 0.5
    s = _side(state, data)
    A = jnp.sum(s * state.zeta) * jnp.ones(K, V.dtype)
    SU = jnp.sum(jnp.where(s[:, None] > 0, V, 0.0), axis=0)
    SI = jnp.sum(jnp.where(s[:, None] < 0, V, 0.0), axis=0)
    return A, state.delta * SU, state.delta * SI, -1.0


def _phi(eps, coef):
    A, B, C, rho = coef
    return A * eps - B * jnp.expm1(eps) - C * jnp.expm1(rho * eps)


def scale_log_ratio(eps, state, data, hyper):
    """phi_k(eps) = log pi(T_eps x) + log|det dT_eps/dx| - log pi(x) for each factor k (module
    docstring), O(D K).

    ``eps``: float array (K,) (log a per factor); ``state``: NPFMState / PPFMState; ``data``:
    PFMData (PPFM: ``side`` (D,) used); ``hyper``: PFMHyper. Returns float array (K,), state dtype.

    Raises nothing of its own (no checks: traced code).

    Source: project addition (derived in the module docstring).
    """
    return _phi(eps, _coefficients(state, data, hyper))


def scale_transform(eps, state, data):
    """T_eps applied to the state (module docstring): per factor k, eps (K,) float.

    Returns a state of the same type and dtype (values clamped below at the dtype's smallest
    normal number). ``data``: PFMData (PPFM: ``side``).

    Raises nothing of its own (no checks: traced code).

    Source: project addition (module docstring).
    """
    tiny = jnp.finfo(state.V.dtype).tiny
    if _is_np(state):
        return state._replace(r=jnp.maximum(state.r * jnp.exp(eps), tiny),
                              V=jnp.maximum(state.V * jnp.exp(-0.5 * eps)[None, :], tiny),
                              delta=jnp.maximum(state.delta * jnp.exp(0.5 * eps), tiny))
    s = _side(state, data)
    return state._replace(V=jnp.maximum(state.V * jnp.exp(s[:, None] * eps[None, :]), tiny))


def _base_sd(state, data, hyper):
    K = state.V.shape[1]
    if _is_np(state):
        a = state.gamma0 / K + 0.5 * hyper.g
        return jnp.sqrt(polygamma(1, a)) * jnp.ones(K, state.V.dtype)
    s = _side(state, data)
    return jnp.ones(K, state.V.dtype) / jnp.sqrt(jnp.sum(jnp.abs(s) * state.zeta))


def scale_move(key, state, data, hyper, n_rounds: int):
    """``n_rounds`` Metropolis steps of the per-factor scale move (module docstring), all K factors
    at once. Work O(n_rounds K + D K): the orbit density of the accumulated t_k needs only r_k,
    delta_k (NPFM) or S_Uk, S_Ik (PPFM) of the start, and V is transformed once at the end.

    Parameters: ``key`` PRNG key; ``state`` NPFMState / PPFMState; ``data`` PFMData;
    ``hyper`` PFMHyper; ``n_rounds`` static int >= 0.

    Returns (state, accept_rate): the moved state (same type and dtype), accept_rate a scalar of
    the state's dtype (fraction of the n_rounds K proposals accepted; 0 when n_rounds = 0).

    Raises ValueError when the move is not available (PPFM on non-bipartite data,
    `move_available`).

    Source: project addition (module docstring).
    """
    n_rounds = int(n_rounds)
    dtype = state.V.dtype
    if n_rounds <= 0:
        return state, jnp.zeros((), dtype)
    if not move_available(state, data):
        raise ValueError("scale move: PPFM needs data whose pair terms all join a user-side and an item-side "
                         "feature (PFMData.bipartite; ids only); use scale_rounds=0")
    K = state.V.shape[1]
    sd0 = _base_sd(state, data, hyper)
    mult = jnp.asarray(SCALE_MULTIPLIERS, dtype)

    coef = _coefficients(state, data, hyper)  # once: the loop costs O(K) per step

    def phi(t):  # log pi(T_t x0) + log|J_t| - log pi(x0); a step t -> t + eps has ratio phi(t + eps) - phi(t)
        return _phi(t, coef)

    def body(i, carry):
        t, cur, n_acc, key = carry
        key, k1, k2, k3 = jax.random.split(key, 4)
        eps = mult[jax.random.randint(k1, (K,), 0, mult.shape[0])] * sd0 * jax.random.normal(k2, (K,), dtype)
        new = phi(t + eps)
        acc = jnp.log(jax.random.uniform(k3, (K,), dtype)) < new - cur
        return jnp.where(acc, t + eps, t), jnp.where(acc, new, cur), n_acc + jnp.sum(acc).astype(dtype), key

    t0 = jnp.zeros(K, dtype)
    t, _, n_acc, _ = jax.lax.fori_loop(0, n_rounds, body, (t0, jnp.zeros(K, dtype), jnp.zeros((), dtype), key))
    return scale_transform(t, state, data), n_acc / (n_rounds * K)
