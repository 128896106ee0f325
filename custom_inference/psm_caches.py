"""PSM's summary caches (seed 000, appendix B): the moments of q, the tied censored-event weights s
and t, the item-side and user-side background caches (B.1) and the terms and sums that every
all-pairs sum of `custom_inference.psm` collapses into (each cache minus the observed-pair
corrections). Split from `custom_inference.psm`, which imports every name; their dense I x J twins
are checked in `validation.models.psm`.

Source: ``000_619a0297b9d686b2.txt`` appendix B (B.1) and eq. (4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp

from .logistic import jj_lambda

if TYPE_CHECKING:  # annotations only: custom_inference.psm imports this module
    from .psm import PSMState


class Background(NamedTuple):
    """A background cache (B.1), with weights w = t (item cache) or s (user cache).

    Parameters
    ----------
    P : jax.Array, shape (K, K), float
        sum w E[x x^T].
    m_dag : jax.Array, shape (K,), float
        sum w E[b] E[x].
    m_ddag : jax.Array, shape (K,), float
        sum w E[x].
    nu : jax.Array, shape (), float
        sum w E[b].
    kappa : jax.Array, shape (), float
        sum w E[b^2].

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.1 (the background caches).
    """

    P: jax.Array
    m_dag: jax.Array
    m_ddag: jax.Array
    nu: jax.Array
    kappa: jax.Array


def moments(state: PSMState):
    """Means and variances under q (variance = 1 / precision).

    Parameters
    ----------
    state : PSMState
        q.

    Returns
    -------
    (mu_u, var_u) : tuple of jax.Array, shape (I, K), float
        User vectors.
    (mu_v, var_v) : tuple of jax.Array, shape (J, K), float
        Item vectors.
    (mu_bu, var_bu) : tuple of jax.Array, shape (I,), float
        User biases.
    (mu_bv, var_bv) : tuple of jax.Array, shape (J,), float
        Item biases; all of the state's float dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` eq. (4) (Gaussian factors q(u_ik) = N(mu_ik, omega_ik^-1)).
    """
    return ((state.u_mu, 1.0 / state.u_prec), (state.v_mu, 1.0 / state.v_prec),
            (state.bu_mu, 1.0 / state.bu_prec), (state.bv_mu, 1.0 / state.bv_prec))


def _s_t(state):
    return jax.nn.softmax(state.log_s), jax.nn.softmax(state.log_t)


def _background(w, mu, var, bmu, bvar):
    wm = w[:, None] * mu
    P = wm.T @ mu + jnp.diag(w @ var)
    return Background(P, (w * bmu) @ mu, w @ mu, w @ bmu, w @ (bmu**2 + bvar))


def item_background(state: PSMState) -> Background:
    """Item-background cache (the paper's minus-sign caches): t-weighted sums over items, O(J K^2).

    Parameters
    ----------
    state : PSMState
        q.

    Returns
    -------
    Background
        P (K, K), m_dag (K,), m_ddag (K,), nu (), kappa (), the state's float dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.1 (item-background P-, m-dag, m-ddag, nu-, kappa-);
    Algorithm 1, "cache item-background".
    """
    _, t = _s_t(state)
    (_, _), (mv, vv), _, (mbv, vbv) = moments(state)
    return _background(t, mv, vv, mbv, vbv)


def user_background(state: PSMState) -> Background:
    """User-background cache (the paper's plus-sign caches): s-weighted sums over users, O(I K^2).

    Parameters
    ----------
    state : PSMState
        q.

    Returns
    -------
    Background
        P (K, K), m_dag (K,), m_ddag (K,), nu (), kappa (), the state's float dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.1 (user-background P+, m+dag, ...); Algorithm 1,
    "cache user-background".
    """
    s, _ = _s_t(state)
    (mu, vu), _, (mbu, vbu), _ = moments(state)
    return _background(s, mu, vu, mbu, vbu)


def background_sums(user_bg: Background, item_bg: Background):
    """(S1, S2) = (sum_ij s_i t_j E a_ij, sum_ij s_i t_j E a_ij^2) from the two caches (module docstring).

    Parameters
    ----------
    user_bg : Background
        The user cache.
    item_bg : Background
        The item cache, of the same K.

    Returns
    -------
    S1 : jax.Array, shape (), float
        sum_ij s_i t_j E a_ij, of the caches' float dtype.
    S2 : jax.Array, shape (), float
        sum_ij s_i t_j E a_ij^2.

    Raises
    ------
    None of its own (no checks: traced code; caches of different K make JAX raise a shape error).

    Source: ``000_619a0297b9d686b2.txt`` sec. 4 (xi* update) and appendix B.3 for S2, corrected cross
    terms (ERRATA in `validation.models.psm`); S1 derived the same way (project addition).
    """
    s1 = user_bg.m_ddag @ item_bg.m_ddag + user_bg.nu + item_bg.nu
    s2 = (jnp.sum(user_bg.P * item_bg.P) + 2.0 * user_bg.m_ddag @ item_bg.m_dag + 2.0 * user_bg.m_dag @ item_bg.m_ddag
          + 2.0 * user_bg.nu * item_bg.nu + user_bg.kappa + item_bg.kappa)
    return s1, s2


def _own_terms(mu, var, bmu, bvar, bg: Background):
    """Per own-side symbol: (sum_w E a, sum_w E a^2) against the other side's cache, (n,) each."""
    first = mu @ bg.m_ddag + bmu + bg.nu
    quad = jnp.einsum("ik,kl,il->i", mu, bg.P, mu) + var @ jnp.diagonal(bg.P)
    second = quad + 2.0 * bmu * (mu @ bg.m_ddag) + 2.0 * (mu @ bg.m_dag) + bmu**2 + bvar + 2.0 * bmu * bg.nu + bg.kappa
    return first, second


def user_background_terms(state: PSMState, item_bg: Background | None = None):
    """(sum_j t_j E a_ij, sum_j t_j E a_ij^2) for every user, from the item cache.

    Parameters
    ----------
    state : PSMState
        q.
    item_bg : Background, optional
        The item cache (computed from ``state`` when None).

    Returns
    -------
    first : jax.Array, shape (I,), float
        sum_j t_j E a_ij, of the state's float dtype.
    second : jax.Array, shape (I,), float
        sum_j t_j E a_ij^2.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.4.1 (the bracket of sum_j t_j Omega*_ij), corrected
    (ERRATA in `validation.models.psm`).
    """
    item_bg = item_background(state) if item_bg is None else item_bg
    (mu, vu), _, (mbu, vbu), _ = moments(state)
    return _own_terms(mu, vu, mbu, vbu, item_bg)


def item_background_terms(state: PSMState, user_bg: Background | None = None):
    """(sum_i s_i E a_ij, sum_i s_i E a_ij^2) for every item, from the user cache.

    Parameters
    ----------
    state : PSMState
        q.
    user_bg : Background, optional
        The user cache (computed from ``state`` when None).

    Returns
    -------
    first : jax.Array, shape (J,), float
        sum_i s_i E a_ij, of the state's float dtype.
    second : jax.Array, shape (J,), float
        sum_i s_i E a_ij^2.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.4.1, mirrored for items (corrected as for users).
    """
    user_bg = user_background(state) if user_bg is None else user_bg
    _, (mv, vv), _, (mbv, vbv) = moments(state)
    return _own_terms(mv, vv, mbv, vbv, user_bg)


def _omega_star(xi_star, first, second):
    """sum_w Omega*(first, second) with weights summing to one: log s(xi*) - xi*/2 + lam* xi*^2
    - lam* second - first / 2 (first, second: the weighted sums of E a and E a^2)."""
    lam = jj_lambda(xi_star)
    return jax.nn.log_sigmoid(xi_star) - 0.5 * xi_star + lam * xi_star**2 - lam * second - 0.5 * first


def omega_star_user_sums(state: PSMState, item_bg: Background | None = None):
    """sum_j t_j Omega*_ij for every user (B.4.1, corrected: see ERRATA in validation.models.psm).

    Parameters
    ----------
    state : PSMState
        q (``xi_star`` is read).
    item_bg : Background, optional
        The item cache (computed from ``state`` when None), as in `user_background_terms`.

    Returns
    -------
    jax.Array, shape (I,), float
        The sums, of the state's float dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.4.1 (sum_j t_j Omega*_ij), corrected.
    """
    first, second = user_background_terms(state, item_bg)
    return _omega_star(state.xi_star, first, second)


def omega_star_item_sums(state: PSMState, user_bg: Background | None = None):
    """sum_i s_i Omega*_ij for every item.

    Parameters
    ----------
    state : PSMState
        q (``xi_star`` is read).
    user_bg : Background, optional
        The user cache (computed from ``state`` when None), as in `item_background_terms`.

    Returns
    -------
    jax.Array, shape (J,), float
        The sums, of the state's float dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``000_619a0297b9d686b2.txt`` appendix B.4.1, mirrored for t (corrected as for users).
    """
    first, second = item_background_terms(state, user_bg)
    return _omega_star(state.xi_star, first, second)
