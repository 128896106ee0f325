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

Global move (NPFM; issue 26 item 4). The per-factor move leaves r_k's prior Ga(gamma0/K, c)
pinned by c, whose conditional Ga(g_0 + gamma0, h_0 + sum_k r_k) in turn pins c sum_k r_k: c against
all r_k together is the next slow direction (the largest-count SBC simulations). The global action,
one t = log a for all factors at once,

    r_k -> e^t r_k,  c -> e^{-t} c,  v_ik -> e^{-t/2} v_ik,  delta_k -> e^{t/2} delta_k   (all i, k)

leaves invariant every r_k v_ik v_jk (so every rate: the likelihood cancels), every c r_k (so each
r_k's Gamma(gamma0/K, c) density times its Jacobian e^t: the density changes by e^{-t}), every
delta_k v_ik (each v's Ga(zeta_i, delta_k) density times its Jacobian) and c delta_k^2. Only c's and
delta's priors and their Jacobians remain (derived; the printed action of issue 26 is right):

    log|J| = t (K - 1 - D K / 2 + K / 2);
    phi(t) = (K g / 2 - g_0) t - h_0 c (e^{-t} - 1) - h (sum_k delta_k) (e^{t/2} - 1),

concave (phi'' = -h_0 c e^{-t} - h sum_k delta_k e^{t/2} / 4 < 0) and proper in t. Not a known
family in any power of a (u = e^{t/2} gives u^{2A-1} exp(-B u^{-2} - C u)), so a Metropolis step
as above: eps ~ N(0, sd^2), sd = m / sqrt(1 / trigamma(g_0) + K / (4 trigamma(g))) (the orbit
curvature of c's and delta's prior log-Gamma laws; hyperparameters only, so symmetric) with m
drawn from `SCALE_MULTIPLIERS`. O(K) for the coefficients, O(1) a step, O(D K) to move V once.
It composes with the per-factor move (the two generate different subgroups; each leaves pi
invariant, so their composition does). `global_log_ratio` is checked against the program in
`validation.models.pfm_scale_checks` exactly as the per-factor ratio.

PPFM has no global move (r_k = 1, no c).

Side features (PPFM; issue 26 item 2). With side features a row holds three or more features,
so a pure scaling v_ik -> e^{s_i t} v_ik cannot keep every pair term (s_i + s_j = 0 on every
co-occurring pair forces s = 0 on an odd cycle). But on `PFMData.from_matrix` data every pair
term of a cell (u, j) is one of: a cross pair (user-side feature x item-side feature), a pair
inside user u's entity row, or a pair inside item j's. The inside terms depend on the entity only,
c_ek = r_k sum_{f < f' in row e} x_f x_f' v_fk v_f'k, and enter every cell of e with the id weight
w_e (x = 1). So the per-factor trade

    v_ik -> e^{s_i t} v_ik  (s_i = +1 user side, -1 item side, 0 none),
    w_e  -> w_e - (e^{2 s_e t} - 1) c_ek   (w_e the id weight of entity e: users s_e = +1, items -1)

keeps every cell's rate (cross pairs invariant; the inside terms' change e^{2 s_e t} - 1 times
c_ek is taken off the id weight). It is a group action on the states it keeps positive
(composition adds t, as the inside terms scale by e^{2 s_e t}), a Metropolis proposal leaving
w > 0 is rejected (density 0). Jacobian: diagonal on v, unit triangular on w (w_e' - w_e depends on
v only): log|J| = t sum_i s_i. Log ratio (v priors and Jacobian as the ids-only PPFM move; w_e
priors Ga(alpha_e, beta_e)):

    phi_k(t) = t sum_i s_i zeta_i - delta_k (S_Uk (e^t - 1) + S_Ik (e^{-t} - 1))
               + sum_e [(alpha_e - 1) log(1 - g_e(t) c_ek / w_e) + beta_e g_e(t) c_ek],  g_e = e^{2 s_e t} - 1.

On ids-only data c = 0 and it is the PPFM move above. The factors share w, so they move one after
the other (a loop over k): O(n_rounds K (I + J)) for the steps plus O((I + J) F K) for the c's.
Proposal sd as the ids-only move (zeta and the sides only). Needs the entity tables of
``zeros="all"`` data (`PFMData.grid`) and known sides (`trade_available`).
`validation.models.pfm_scale_checks.flat_directions` counts the likelihood's flat directions
numerically (this trade is one of them; the others mix factors or move weights only).

Source: project addition (derived above; Liu & Sabatti 2000 for group moves; the model of
``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import polygamma

__all__ = ["SCALE_MULTIPLIERS", "scale_log_ratio", "scale_transform", "scale_move", "move_available",
           "global_log_ratio", "global_transform", "global_move", "trade_available", "trade_log_ratio",
           "trade_transform", "trade_move"]

#: Multipliers of the base proposal sd; each step picks one per factor uniformly (independently
#: of the state, so the proposal stays symmetric).
SCALE_MULTIPLIERS = (0.25, 1.0, 3.0)


def _is_np(state) -> bool:
    return "r" in state._fields


def move_available(state, data) -> bool:
    """True when the scale move is defined.

    Always for NPFM; for PPFM only on data whose pair terms all join a user-side to an item-side
    feature (``data.bipartite``).

    Parameters
    ----------
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state (its type decides).
    data : pfm_data.PFMData
        The design.

    Returns
    -------
    bool
        A Python bool (static).

    Raises
    ------
    None of its own.

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
    """phi_k(eps) = log pi(T_eps x) + log|det dT_eps/dx| - log pi(x) for each factor k (module docstring).

    Work O(D K).

    Parameters
    ----------
    eps : jax.Array, shape (K,), float
        log a per factor.
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state.
    data : pfm_data.PFMData
        The design (PPFM: ``side`` (D,) used).
    hyper : ppl_models.pfm.PFMHyper
        Hyperparameters.

    Returns
    -------
    jax.Array, shape (K,), float
        phi_k, of the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: project addition (derived in the module docstring).
    """
    return _phi(eps, _coefficients(state, data, hyper))


def scale_transform(eps, state, data):
    """T_eps applied to the state (module docstring), per factor k.

    Parameters
    ----------
    eps : jax.Array, shape (K,), float
        log a per factor.
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state.
    data : pfm_data.PFMData
        The design (PPFM: ``side`` used).

    Returns
    -------
    pfm.NPFMState or pfm.PPFMState
        A state of the same type and dtype (values clamped below at the dtype's smallest normal number).

    Raises
    ------
    None of its own (no checks: traced code).

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
    """``n_rounds`` Metropolis steps of the per-factor scale move (module docstring), all K factors at once.

    Work O(n_rounds K + D K): the orbit density of the accumulated t_k needs only r_k, delta_k (NPFM) or
    S_Uk, S_Ik (PPFM) of the start, and V is transformed once at the end.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state.
    data : pfm_data.PFMData
        The design.
    hyper : ppl_models.pfm.PFMHyper
        Hyperparameters.
    n_rounds : int >= 0
        Metropolis steps (static).

    Returns
    -------
    state : pfm.NPFMState or pfm.PPFMState
        The moved state (same type and dtype).
    accept_rate : jax.Array, shape (), float
        Fraction of the n_rounds K proposals accepted, of the state's dtype (0 when n_rounds = 0).

    Raises
    ------
    ValueError
        When the move is not available (PPFM on non-bipartite data, `move_available`) and
        n_rounds > 0.

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
    coef = _coefficients(state, data, hyper)  # once: the loop costs O(K) per step
    t, n_acc = _metropolis(key, lambda t: _phi(t, coef), _base_sd(state, data, hyper), n_rounds)
    return scale_transform(t, state, data), n_acc / (n_rounds * K)


def _metropolis(key, phi, sd0, n_rounds: int):
    """``n_rounds`` random-walk Metropolis steps on t (shape of ``sd0``; independent decisions per
    element) from t = 0 for the orbit log density ``phi`` (phi(0) = 0): a step t -> t + eps has log
    ratio phi(t + eps) - phi(t). Returns (t, number of accepted proposals)."""
    dtype = sd0.dtype
    mult = jnp.asarray(SCALE_MULTIPLIERS, dtype)

    def body(i, carry):
        t, cur, n_acc, key = carry
        key, k1, k2, k3 = jax.random.split(key, 4)
        eps = mult[jax.random.randint(k1, sd0.shape, 0, mult.shape[0])] * sd0 * jax.random.normal(k2, sd0.shape, dtype)
        new = phi(t + eps)
        acc = jnp.log(jax.random.uniform(k3, sd0.shape, dtype)) < new - cur
        return jnp.where(acc, t + eps, t), jnp.where(acc, new, cur), n_acc + jnp.sum(acc).astype(dtype), key

    t0 = jnp.zeros(sd0.shape, dtype)
    t, _, n_acc, _ = jax.lax.fori_loop(0, n_rounds, body, (t0, t0, jnp.zeros((), dtype), key))
    return t, n_acc


# ---------------------------------------------------------------------------------------
# global move (NPFM): all r_k, c, V, delta at once (module docstring)


def _global_coefficients(state, hyper):
    """(A, B, C) with phi(t) = A t - B expm1(-t) - C expm1(t / 2), O(K)."""
    K = state.V.shape[1]
    return 0.5 * K * hyper.g - hyper.g_0, hyper.h_0 * state.c, hyper.h * jnp.sum(state.delta)


def _global_phi(t, coef):
    A, B, C = coef
    return A * t - B * jnp.expm1(-t) - C * jnp.expm1(0.5 * t)


def global_log_ratio(t, state, hyper):
    """phi(t) = log pi(G_t x) + log|det dG_t/dx| - log pi(x) of the NPFM global move (module docstring).

    Work O(K).

    Parameters
    ----------
    t : float or jax.Array, float
        log a (any shape: elementwise).
    state : pfm.NPFMState
        The sampler state.
    hyper : ppl_models.pfm.PFMHyper
        Hyperparameters.

    Returns
    -------
    jax.Array, float
        phi, of t's shape and the state's dtype.

    Raises
    ------
    ValueError
        For a PPFMState (no global move: module docstring).

    Source: project addition (derived in the module docstring).
    """
    if not _is_np(state):
        raise ValueError("global scale move: defined for NPFM only (PPFM has no r, c)")
    return _global_phi(jnp.asarray(t, state.V.dtype), _global_coefficients(state, hyper))


def global_transform(t, state):
    """G_t applied to an NPFMState: r e^t, c e^-t, V e^{-t/2}, delta e^{t/2} (module docstring).

    Parameters
    ----------
    t : float or jax.Array, shape ()
        log a.
    state : pfm.NPFMState
        The sampler state.

    Returns
    -------
    pfm.NPFMState
        Of the same dtype (values clamped below at the dtype's smallest normal number).

    Raises
    ------
    ValueError
        For a PPFMState.

    Source: project addition (module docstring).
    """
    if not _is_np(state):
        raise ValueError("global scale move: defined for NPFM only (PPFM has no r, c)")
    tiny = jnp.finfo(state.V.dtype).tiny
    e = jnp.exp(jnp.asarray(t, state.V.dtype))
    h = jnp.sqrt(e)
    return state._replace(r=jnp.maximum(state.r * e, tiny), c=jnp.maximum(state.c / e, tiny),
                          V=jnp.maximum(state.V / h, tiny), delta=jnp.maximum(state.delta * h, tiny))


def _global_sd(state, hyper):
    K = state.V.shape[1]
    prec = 1.0 / polygamma(1, jnp.asarray(hyper.g_0, state.V.dtype)) \
        + 0.25 * K / polygamma(1, jnp.asarray(hyper.g, state.V.dtype))
    return jnp.reshape(1.0 / jnp.sqrt(prec), ())


def global_move(key, state, data, hyper, n_rounds: int):
    """``n_rounds`` Metropolis steps of the NPFM global scale move (module docstring).

    Work O(K + n_rounds) plus O(D K) to move V once; independent of the number of nonzeros.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    state : pfm.NPFMState
        The sampler state.
    data : pfm_data.PFMData
        Unused (the move does not see the data; kept for the solver's argument order).
    hyper : ppl_models.pfm.PFMHyper
        Hyperparameters.
    n_rounds : int >= 0
        Metropolis steps (static).

    Returns
    -------
    state : pfm.NPFMState
        The moved state (same dtype).
    accept_rate : jax.Array, shape (), float
        Of the state's dtype (0 when n_rounds = 0).

    Raises
    ------
    ValueError
        For a PPFMState with n_rounds > 0 (no global move for PPFM).

    Source: project addition (module docstring).
    """
    n_rounds = int(n_rounds)
    dtype = state.V.dtype
    if n_rounds <= 0:
        return state, jnp.zeros((), dtype)
    coef = _global_coefficients(state, hyper) if _is_np(state) else None
    if coef is None:
        raise ValueError("global scale move: defined for NPFM only (PPFM has no r, c); use global_rounds=0")
    t, n_acc = _metropolis(key, lambda t: _global_phi(t, coef), _global_sd(state, hyper), n_rounds)
    return global_transform(t, state), n_acc / n_rounds


# ---------------------------------------------------------------------------------------
# per-factor trade with side features (id weights absorb the inside-entity pair terms)


def trade_available(data) -> bool:
    """True when the side-feature trade is defined.

    That is, data with known sides and entity tables (`PFMData.from_matrix`, ``zeros="all"``).

    Parameters
    ----------
    data : pfm_data.PFMData
        The design.

    Returns
    -------
    bool
        A Python bool (static).

    Raises
    ------
    None of its own.

    Source: project addition (module docstring).
    """
    return getattr(data, "side", None) is not None and bool(getattr(data, "grid", False)) \
        and int(data.n_users) + int(data.n_items) > 0


def _inside(state, data, k):
    """c_ek (E,): r_k times the sum of x_f x_f' v_fk v_f'k over pairs inside entity e's row."""
    Vk = state.V[:, k]
    xv = jnp.asarray(data.ent_val, Vk.dtype) * Vk[jnp.asarray(data.ent_feat)]  # (E, Fe); padding value 0
    c = 0.5 * (jnp.sum(xv, axis=1) ** 2 - jnp.sum(xv * xv, axis=1))
    return c * (state.r[k] if _is_np(state) else 1.0)


def _trade_parts(state, data, k):
    """Fixed quantities of factor k's orbit: s (D,), entity signs (E,), c (E,), id weights w_e (E,),
    alpha_e, beta_e (E,)."""
    s = _side(state, data)
    I, J = int(data.n_users), int(data.n_items)
    se = jnp.concatenate([jnp.ones(I, s.dtype), -jnp.ones(J, s.dtype)])
    E = I + J
    return s, se, _inside(state, data, k), state.w[:E], state.alpha[:E], state.beta[:E]


def _trade_phi(t, k, parts, state):
    s, se, c, w, a, b = parts
    A = jnp.sum(s * state.zeta)
    SU = jnp.sum(jnp.where(s > 0, state.V[:, k], 0.0))
    SI = jnp.sum(jnp.where(s < 0, state.V[:, k], 0.0))
    v_part = A * t - state.delta[k] * (SU * jnp.expm1(t) + SI * jnp.expm1(-t))
    g = jnp.expm1(2.0 * se * t)
    ratio = 1.0 - g * c / w  # w_e' / w_e
    ok = jnp.all(ratio > 0)
    w_part = jnp.sum((a - 1.0) * jnp.log(jnp.where(ratio > 0, ratio, 1.0)) + b * g * c)
    return jnp.where(ok, v_part + w_part, -jnp.inf)


def trade_log_ratio(k: int, t, state, data, hyper=None):
    """phi_k(t) = log pi(T x) + log|det dT/dx| - log pi(x) of the side-feature trade of factor ``k``.

    See the module docstring; -inf where the move would make an id weight non-positive.

    Parameters
    ----------
    k : int
        The factor (or a traced int).
    t : float or jax.Array, shape ()
        log a.
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state.
    data : pfm_data.PFMData
        With `trade_available`.
    hyper : ppl_models.pfm.PFMHyper, optional
        Unused (the ratio needs no hyperparameter; kept for the solvers' argument order).

    Returns
    -------
    jax.Array, shape (), float
        phi_k, of the state's dtype.

    Raises
    ------
    None of its own (traced code; call `trade_available` first).

    Source: project addition (derived in the module docstring).
    """
    t = jnp.asarray(t, state.V.dtype)
    return _trade_phi(t, k, _trade_parts(state, data, k), state)


def trade_transform(k: int, t, state, data):
    """The side-feature trade of factor ``k`` by t (module docstring).

    V[:, k] e^{s t}, id weights w_e - (e^{2 s_e t} - 1) c_ek.

    Parameters
    ----------
    k : int
        The factor.
    t : float or jax.Array, shape ()
        log a.
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state.
    data : pfm_data.PFMData
        With `trade_available`.

    Returns
    -------
    pfm.NPFMState or pfm.PPFMState
        A state of the same type and dtype (V clamped below at the dtype's smallest normal number; w is
        not clamped: a non-positive w is the caller's rejection).

    Raises
    ------
    None of its own (traced code).

    Source: project addition (module docstring).
    """
    t = jnp.asarray(t, state.V.dtype)
    s, se, c, w, _, _ = _trade_parts(state, data, k)
    tiny = jnp.finfo(state.V.dtype).tiny
    V = state.V.at[:, k].set(jnp.maximum(state.V[:, k] * jnp.exp(s * t), tiny))
    return state._replace(V=V, w=state.w.at[: w.shape[0]].set(w - jnp.expm1(2.0 * se * t) * c))


def trade_move(key, state, data, hyper, n_rounds: int):
    """``n_rounds`` Metropolis steps of the side-feature trade per factor, the K factors one after the other.

    They share the id weights. Work O(n_rounds K (I + J) + (I + J) F K).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    state : pfm.NPFMState or pfm.PPFMState
        The sampler state.
    data : pfm_data.PFMData
        With `trade_available`.
    hyper : ppl_models.pfm.PFMHyper
        Unused by the ratio.
    n_rounds : int >= 0
        Metropolis steps per factor (static).

    Returns
    -------
    state : pfm.NPFMState or pfm.PPFMState
        The moved state (same type, dtype).
    accept_rate : jax.Array, shape (), float
        Fraction of the n_rounds K proposals accepted (0 when n_rounds = 0).

    Raises
    ------
    ValueError
        When the data has no sides or entity tables (`trade_available`) and n_rounds > 0.

    Source: project addition (module docstring).
    """
    n_rounds = int(n_rounds)
    dtype = state.V.dtype
    if n_rounds <= 0:
        return state, jnp.zeros((), dtype)
    if not trade_available(data):
        raise ValueError("side-feature trade: needs PFMData.from_matrix data with zeros='all' (sides and "
                         "entity tables)")
    K = state.V.shape[1]
    sd = jnp.ones(K, dtype) / jnp.sqrt(jnp.sum(jnp.abs(_side(state, data)) * state.zeta))  # as the ids-only move

    def one(k, carry):
        st, n_acc = carry
        parts = _trade_parts(st, data, k)
        t, acc = _metropolis(jax.random.fold_in(key, k), lambda t: _trade_phi(t, k, parts, st), sd[k], n_rounds)
        return trade_transform(k, t, st, data), n_acc + acc

    state, n_acc = jax.lax.fori_loop(0, K, one, (state, jnp.zeros((), dtype)))
    return state, n_acc / (n_rounds * K)
