"""PSM's predictions (seed 000, eq. (5)) and draws from q: the acceptance probability sigma(x_ij)
under q (MacKay's approximation), the scores of every item for some users, the normalised
predictive probability, and independent draws of every factor of q. Split from
`custom_inference.psm`, which imports every name (they are part of its public API); the moments
of the logit of a pair, which the sweep's pair passes use too, live here.

Source: ``000_619a0297b9d686b2.txt`` sec. 3 ("Making and trading predictions") and eq. (5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from . import base
from .logistic import mackay_probit
from .psm_caches import moments

if TYPE_CHECKING:  # annotations only: custom_inference.psm imports this module
    from .psm import PSMState

__all__ = ["acceptance_probability", "score_users", "predictive_probability", "draws_from_q"]


def _pair_moments_chunk(state, rows, cols):
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = moments(state)
    Mu, Vu, Mv, Vv = mu[rows], vu[rows], mv[cols], vv[cols]
    mean = jnp.sum(Mu * Mv, axis=-1) + mbu[rows] + mbv[cols]
    var = jnp.sum(Mu**2 * Vv + Vu * Mv**2 + Vu * Vv, axis=-1) + vbu[rows] + vbv[cols]
    return mean, mean**2 + var



def _pair_mean_var(state, users, items):
    mean, second = _pair_moments_chunk(state, users, items)
    return mean, jnp.maximum(second - mean**2, 0.0)


def acceptance_probability(state: PSMState, users, items):
    """p(o = T | y_i = z_j = 1, D) for index pairs: MacKay's sigma(mu / sqrt(1 + pi s^2 / 8)).

    mu, s^2 are the mean and variance of a_ij under q (sec. 3, "Making and trading predictions").

    Parameters
    ----------
    state : PSMState
        q.
    users, items : array_like, shape (E,), int
        The pairs.

    Returns
    -------
    jax.Array, shape (E,), float
        The probabilities, of the state's float dtype.

    Raises
    ------
    None of its own (no index checks: JAX clamps out-of-range gathers; users and items that do not
    broadcast make JAX raise a shape error).

    Source: ``000_619a0297b9d686b2.txt`` sec. 3, "Making and trading predictions" (sigma(x_ij) before eq. (5)).
    """
    mean, var = _pair_mean_var(state, jnp.asarray(users), jnp.asarray(items))
    return mackay_probit(mean, var)


def _user_item_block(state, users):
    mu, vu = state.u_mu[users], 1.0 / state.u_prec[users]
    mv, vv = state.v_mu, 1.0 / state.v_prec
    mean = mu @ mv.T + state.bu_mu[users][:, None] + state.bv_mu[None, :]
    var = (mu**2) @ vv.T + vu @ (mv**2).T + vu @ vv.T + (1.0 / state.bu_prec[users])[:, None] + (1.0 / state.bv_prec)[None, :]
    return mean, var


def _check_users(users, I):
    users = np.asarray(users)
    if users.ndim != 1 or (users.size and not np.issubdtype(users.dtype, np.integer)):
        raise ValueError("users must be a 1-D integer array")
    if users.size and (users.min() < 0 or users.max() >= I):
        raise ValueError(f"users index out of range [0, {I - 1}]")
    return users


def score_users(state: PSMState, users, *, kind: str = "predictive") -> np.ndarray:
    """Scores of every item for some users.

    Parameters
    ----------
    state : PSMState
        q.
    users : array_like, shape (B,), int
        User indices.
    kind : {"predictive", "acceptance", "popularity"}, default "predictive"
        "predictive": p(z_j = 1 | o = T, y_i = 1, D) ~ E[psi_j] sigma(x_ij) normalised over j (eq. 5,
        popularity times personalised acceptance, MacKay's approximation); "acceptance": sigma(x_ij)
        alone; "popularity": E[psi_j] alone.

    Returns
    -------
    numpy.ndarray, shape (B, J), float
        The scores, of the state's float dtype.

    Raises
    ------
    ValueError
        For an unknown kind, ``users`` not a 1-D integer array, or user indices out of range.

    Source: ``000_619a0297b9d686b2.txt`` eq. (5) and the normalisation after it; "popularity" is the
    popularity baseline of sec. 5.
    """
    if kind not in ("predictive", "acceptance", "popularity"):
        raise ValueError(f"kind must be 'predictive', 'acceptance' or 'popularity', got {kind!r}")
    users = _check_users(users, state.u_mu.shape[0])
    e_psi = state.beta / jnp.sum(state.beta)
    if kind == "popularity":
        return np.broadcast_to(np.asarray(e_psi), (users.size, e_psi.shape[0])).copy()
    mean, var = _user_item_block(state, jnp.asarray(users))
    p = mackay_probit(mean, var)
    if kind == "acceptance":
        return np.asarray(p)
    f = p * e_psi[None, :]
    return np.asarray(f / jnp.sum(f, axis=1, keepdims=True))


def predictive_probability(state: PSMState, users, items, *, batch: int = 256) -> np.ndarray:
    """p(z_j = 1 | o = T, y_i = 1, D) (eq. 5, normalised over all J items) for index pairs.

    Work O(E J K) in batches of ``batch`` pairs.

    Parameters
    ----------
    state : PSMState
        q.
    users, items : array_like, shape (E,), int
        The pairs.
    batch : int >= 1, default 256
        Pairs per batch (each batch scores B x J items).

    Returns
    -------
    numpy.ndarray, shape (E,), float64
        The probabilities.

    Raises
    ------
    ValueError
        For ``users`` not a 1-D integer array, ``items`` not of the shape of ``users``, or indices out
        of range.

    Source: ``000_619a0297b9d686b2.txt`` eq. (5), normalised over j as after it.
    """
    users = _check_users(users, state.u_mu.shape[0])
    items = np.asarray(items)
    J = state.v_mu.shape[0]
    if items.shape != users.shape or (items.size and (items.min() < 0 or items.max() >= J)):
        raise ValueError(f"items must have the shape of users and lie in [0, {J - 1}]")
    out = np.empty(users.size)
    for start in range(0, users.size, batch):
        u = users[start:start + batch]
        sc = score_users(state, u)
        out[start:start + u.size] = sc[np.arange(u.size), items[start:start + batch]]
    return out


def draws_from_q(key, state: PSMState, n_draws: int) -> dict[str, np.ndarray]:
    """Independent draws from q.

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an int seed (seeds a numpy Generator).
    state : PSMState
        q.
    n_draws : int >= 0
        Draws.

    Returns
    -------
    dict of str to numpy.ndarray, float64
        Each (1, n_draws, ...): ``u`` (I, K), ``v`` (J, K), ``b_user`` (I,), ``b_item`` (J,), ``pi``
        (I,), ``psi`` (J,).

    Raises
    ------
    TypeError
        From `base.as_key`, for a key that is neither a PRNG key nor an integer seed; numpy raises
        ValueError for a negative ``n_draws``.

    Source: project addition (sampling the factors of q, ``000_619a0297b9d686b2.txt`` eq. (4)).
    """
    rng = np.random.default_rng(int(jax.random.randint(base.as_key(key), (), 0, 2**31 - 1)))
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = (tuple(np.asarray(a, np.float64) for a in p) for p in moments(state))
    out = {}
    for name, m, v in (("u", mu, vu), ("v", mv, vv), ("b_user", mbu, vbu), ("b_item", mbv, vbv)):
        out[name] = (m + np.sqrt(v) * rng.standard_normal((n_draws, *m.shape)))[None]
    out["pi"] = rng.dirichlet(np.asarray(state.alpha, np.float64), size=n_draws)[None]
    out["psi"] = rng.dirichlet(np.asarray(state.beta, np.float64), size=n_draws)[None]
    return out
