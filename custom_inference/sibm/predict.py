"""SIBM predictions: ranking scores and MacKay's p(x_ij = 1 | X) (seed 002_5408d341cb9fc544.txt eq. 5)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..logistic import mackay_probit
from .common import SIBMState, _cells, cell_moments, moments
from .map import MAPState
from .svi import SVIState




def _check_users(users, I):
    users = np.asarray(users)
    if users.ndim != 1 or users.size == 0:
        raise ValueError("users must be a non-empty 1-D array of row indices")
    if not np.issubdtype(users.dtype, np.integer):
        raise ValueError(f"users must be integers, got dtype {users.dtype}")
    if users.min() < 0 or users.max() >= I:
        raise ValueError(f"users: row index out of range 0..{I - 1}")
    return jnp.asarray(users, jnp.int32)


def score_users(state, users, *, kind: str = "mean") -> np.ndarray:
    """Scores of every item for the given users, for ranking.

    Parameters
    ----------
    state : SIBMState, SVIState or MAPState
        A fit's final state.
    users : array_like, shape (n,), int
        Row indices (non-empty).
    kind : {"mean", "probability"}, default "mean"
        "mean" gives E_q[u_i . v_j] + E_q[z] (MAP: u_i . v_j + z); "probability" gives MacKay's
        p(x_ij = 1 | X) of eq. (5) (MAP: sigma(u_i . v_j + z)).

    Returns
    -------
    numpy.ndarray, shape (n, J), float
        The scores, in the state's dtype.

    Raises
    ------
    ValueError
        For an unknown ``kind``, or ``users`` empty, not 1-D, not integers or out of range.

    Source: ``002_5408d341cb9fc544.txt`` eq. (5) ("probability"); the "mean" score is a project
    addition.
    """
    if kind not in ("mean", "probability"):
        raise ValueError(f"kind must be 'mean' or 'probability', got {kind!r}")
    if isinstance(state, SVIState):
        state = state.params
    if isinstance(state, MAPState):
        u = _check_users(users, state.U.shape[0])
        a = state.U[u] @ state.V.T + state.z
        return np.asarray(a if kind == "mean" else jax.nn.sigmoid(a))
    u = _check_users(users, state.u_prec.shape[0])
    (ub, ut), (vb, vt), (zb, zt) = moments(state)
    mu, s2 = _cells(ub[u], ut[u], vb, vt, zb, zt)
    return np.asarray(mu if kind == "mean" else mackay_probit(mu, s2))


def predict_proba(state: SIBMState, rows, cols) -> jax.Array:
    """p(x_ij = 1 | X) by eq. (5) (MacKay) for given cells.

    Parameters
    ----------
    state : SIBMState
        The natural parameters of q.
    rows, cols : array_like, shape (n,), int
        The cells.

    Returns
    -------
    jax.Array, shape (n,), float
        The probabilities, in the state's dtype.

    Raises
    ------
    None of its own (no index checks: traced code).

    Source: ``002_5408d341cb9fc544.txt`` eq. (5) (MacKay's approximation).
    """
    mu, s2 = cell_moments(state, jnp.asarray(rows), jnp.asarray(cols))
    return mackay_probit(mu, s2)

