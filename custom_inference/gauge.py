r"""Gauge-group Metropolis moves for Gibbs samplers of matrix factorizations.

Why. In u_i . v_j the factors have a gauge: for an invertible A (K, K), U -> U A and
V -> V A^-T leave every prediction, hence the likelihood, unchanged (column scalings
A = diag(c) are the simplest case). Only the priors of U and V (through their
hyperparameters) pin the gauge down, weakly. A Gibbs sampler that alternates
"hyperparameters | factors" and "factors | hyperparameters" moves along these directions in
small steps (each block tracks the other), so it mixes slowly there; simulation-based
calibration sees it as biased ranks of scale functionals (|U|^2, |V|^2, log det Lambda_U; see
`validation.models.bpmf`, `validation.models.sbmf`).

The move (a group move, Liu & Sabatti 2000, "generalized Gibbs"). Let T_A act on the whole
state: the factors move as above and each model moves its hyperparameters along so that the
factors' prior given the hyperparameters is invariant (means by A^T, precisions by
A^-1 . A^-T on the user side, the reverse on the item side). Then in
log pi(T_A x) + log |det dT_A/dx| - log pi(x) the likelihood, the factors' normal densities,
every log-determinant and every Jacobian factor cancel (each model module derives this for
its prior), and what is left, ``log_density``, depends on the moved hyperparameters only:
O(K^2) to evaluate, independent of the data size.

A step proposes T_G for a generator G drawn independently of the state, with G and G^-1
equally likely (a column scaling by e^z or a shear I + z e_k e_l^T, z symmetric), and accepts
with probability min(1, exp(log_density(moved) - log_density(current))): a Metropolis-Hastings
move on x (the group is unimodular, so no Haar-measure correction appears). Several steps in
a row are several such moves; the walk tracks the moved hyperparameters (O(K) per generator)
and the product A, and the model applies T_A to the factors once at the end.

This module holds the model-independent part, `gauge_walk`. `custom_inference.bpmf` (the
whole GL(K): its Gaussian-Wishart prior moves along) and `custom_inference.sbmf` (column
scalings only: its per-column priors are not shear invariant) supply ``log_density``, the
generator action on their hyperparameters and T_A; `validation.models.bpmf.gauge_check` /
`validation.models.sbmf.gauge_check` check each against the model's full log joint plus the Jacobian,
and `tests/custom_inference/test_gauge.py` checks the walk's invariance on toy targets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["PROPOSAL_SCALES", "generator_pairs", "gauge_walk"]

#: Proposal standard deviations of a step's size z; each proposal picks one uniformly,
#: independently of the state (so the mixture stays symmetric). They span gauge posteriors from
#: very tight (many rows, large precisions) to the prior's width.
PROPOSAL_SCALES = (0.02, 0.1, 0.5)


def generator_pairs(key, n_components: int, shears: bool):
    """The (k, l) generators of one round of `gauge_walk`.

    First the K column scalings (k, k), then, with ``shears`` (and K > 1), K off-diagonal pairs
    (k, l), k != l, drawn uniformly (independently of the state).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key (used only with ``shears`` and K > 1).
    n_components : int
        K, the number of factor columns.
    shears : bool
        Whether to append the K random off-diagonal pairs.

    Returns
    -------
    ks : jax.Array, shape (K,) or (2 K,), int32
        The first index of each generator (the column that is scaled, or added from).
    ls : jax.Array, shape (K,) or (2 K,), int32
        The second index (``ls == ks`` for a scaling; the column that moves for a shear).

    Raises
    ------
    TypeError
        From ``int(n_components)``, for a K that is not a number.
    ValueError
        From ``int(n_components)``, for a K string that is not an integer.

    Source: module docstring (ours; Liu & Sabatti 2000 for group moves).
    """
    k = int(n_components)
    diag = jnp.arange(k, dtype=jnp.int32)
    if not shears or k == 1:
        return diag, diag
    a = jax.random.randint(key, (k,), 0, k, dtype=jnp.int32)
    b = (a + jax.random.randint(jax.random.fold_in(key, 1), (k,), 1, k, dtype=jnp.int32)) % k
    return jnp.concatenate([diag, a]), jnp.concatenate([diag, b])


def gauge_walk(key, hyper_state, log_density, act, n_components: int, n_rounds: int, *, shears: bool = False,
               dtype=jnp.float64):
    """Random-walk Metropolis on the gauge group, started at the identity.

    The walk moves through G = exp(z) e_k e_k^T + (I - e_k e_k^T) (scale column k; k = l) or
    G = I + z e_k e_l^T (shear: column l += z column k; k != l, only with ``shears``), with
    z ~ N(0, sd^2), sd drawn from `PROPOSAL_SCALES`; G and G^-1 are equally likely, so each
    step is a Metropolis-Hastings group move (module docstring). It accumulates A <- A G and
    the model's moved hyperparameters ``act(h, k, l, z)``.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    hyper_state : pytree of jax.Array
        h, the model's hyperparameters that the gauge moves (e.g. means and precisions of the
        factor priors; shapes as the model keeps them).
    log_density : callable
        ``(h, A) -> scalar``: log pi(T_A x) + log |det J_A| up to a constant, as a function of the
        moved hyperparameters h = T_A(h0) and of A (K, K) (traceable).
    act : callable
        ``(h, k, l, z) -> h``, the action of one generator on h (k, l traced int32 scalars, z a
        0-d float of ``dtype``).
    n_components : int
        K (static).
    n_rounds : int
        Number of rounds, >= 0 (static); each round visits the generators of `generator_pairs`.
    shears : bool, keyword-only
        Static; with False the walk stays on the diagonal (column scalings).
    dtype : numpy dtype, keyword-only
        Float dtype of A, z and the acceptance rate (default float64).

    Returns
    -------
    A : jax.Array, shape (K, K), ``dtype``
        The accumulated group element (identity when nothing was accepted).
    hyper_state : pytree
        The moved hyperparameters, T_A(h0) (same structure as the input).
    accept_rate : jax.Array, shape (), ``dtype``
        The fraction of the proposals accepted (0 when none ran).

    Raises
    ------
    TypeError
        From ``int(n_components)`` / ``int(n_rounds)`` for non-numbers; otherwise none of its own:
        whatever ``log_density`` or ``act`` raise propagates.
    ValueError
        From ``int(n_components)`` / ``int(n_rounds)`` for strings that are not integers.

    Source: module docstring (ours; Liu & Sabatti 2000 for group moves).
    """
    k = int(n_components)
    eye = jnp.eye(k, dtype=dtype)
    n_per_round = k if (not shears or k == 1) else 2 * k
    n_steps = int(n_rounds) * n_per_round
    if n_steps == 0:
        return eye, hyper_state, jnp.zeros((), dtype)
    scales = jnp.asarray(PROPOSAL_SCALES, dtype)
    k_pairs, key = jax.random.split(key)
    pairs = [generator_pairs(kk, k, shears) for kk in jax.random.split(k_pairs, int(n_rounds))]
    ks = jnp.concatenate([p[0] for p in pairs])
    ls = jnp.concatenate([p[1] for p in pairs])

    def body(t, carry):
        A, h, lp, key, n_acc = carry
        key, k_scale, k_eps, k_u = jax.random.split(key, 4)
        kk, ll = ks[t], ls[t]
        z = scales[jax.random.randint(k_scale, (), 0, scales.shape[0])] * jax.random.normal(k_eps, (), dtype)
        col_k = A[:, kk]
        A_new = jnp.where(kk == ll, A.at[:, kk].multiply(jnp.exp(z)), A.at[:, ll].add(z * col_k))
        h_new = act(h, kk, ll, z)
        lp_new = log_density(h_new, A_new)
        accept = jnp.log(jax.random.uniform(k_u, (), dtype)) < lp_new - lp
        pick = lambda new, old: jnp.where(accept, new, old)  # noqa: E731
        return (pick(A_new, A), jax.tree_util.tree_map(pick, h_new, h), pick(lp_new, lp), key,
                n_acc + accept.astype(dtype))

    init = (eye, hyper_state, log_density(hyper_state, eye), key, jnp.zeros((), dtype))
    A, h, _, _, n_acc = jax.lax.fori_loop(0, n_steps, body, init)
    return A, h, n_acc / n_steps
