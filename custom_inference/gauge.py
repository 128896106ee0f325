r"""Scale-gauge Metropolis moves for Gibbs samplers of matrix factorizations.

Why. In u_i . v_j the factor columns have a scale gauge: for s in R^K and
c = exp(s), U -> U diag(c), V -> V diag(c)^-1 leaves every prediction, hence the
likelihood, unchanged. Only the priors of U and V (through their hyperparameters) pin
the scale down, weakly. A Gibbs sampler that alternates "hyperparameters | factors" and
"factors | hyperparameters" moves along this direction in small steps (each block tracks
the other), so it mixes slowly there; simulation-based calibration sees it as biased
ranks of scale functionals (|U|^2, |V|^2, log det Lambda_U; see `validation.bpmf`,
`validation.sbmf`).

The move (a group move, Liu & Sabatti 2000, "generalized Gibbs"). Let T_s act on the
whole state: the factor columns scale by c (users) and 1/c (items), and each model scales
its hyperparameters along so that the factors' prior given the hyperparameters is
invariant (means times c, precisions divided by c c^T, and the reverse on the item side).
Then in log pi(T_s x) + log |det dT_s/dx| - log pi(x) the likelihood, the factors' normal
densities, every log-determinant and every Jacobian factor cancel (each model module
derives this for its prior), and what is left, ``log_density(s)``, depends on the
hyperparameters only: O(K^2) to evaluate, independent of the data size.

A random-walk Metropolis step s -> s + eps, eps symmetric, accepted with probability
min(1, exp(log_density(s + eps) - log_density(s))), is a Metropolis-Hastings move on x
(the proposal x -> T_eps x is reversed by T_-eps with the same density, and the positive
reals with dc/c = ds is the group's Haar measure), so it leaves the posterior invariant.
Several steps in a row are several such moves (the group is abelian, so the target of the
next step relative to the moved state is the same function shifted), and only the
accumulated s is applied to the state at the end.

This module holds the model-independent part: the coordinate-wise random walk on s.
`custom_inference.bpmf` and `custom_inference.sbmf` supply their ``log_density`` and
apply T_s; `validation.bpmf` / `validation.sbmf` check each model's ``log_density`` against
its full log joint plus the Jacobian.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["PROPOSAL_SCALES", "scale_walk"]

#: Proposal standard deviations on s = log c; each proposal picks one uniformly, independently
#: of the state (so the mixture stays symmetric). They span posteriors of the gauge from very
#: tight (many rows, large precisions) to the prior's width.
PROPOSAL_SCALES = (0.02, 0.1, 0.5)


def scale_walk(key, log_density, n_components: int, n_rounds: int, dtype=jnp.float64):
    """Coordinate-wise random-walk Metropolis on the scale gauge s = log c, started at s = 0.

    Parameters
    ----------
    key : PRNG key.
    log_density : callable s (K,) -> scalar, log pi(T_s x) + log |det J_s| up to a constant
        for the current state x (from the model module; traceable by JAX).
    n_components : int K (static).
    n_rounds : int >= 0 (static); each round proposes a move of every coordinate in turn
        (K Metropolis steps, each O(cost of log_density)). 0 returns s = 0.
    dtype : float dtype of s.

    Returns
    -------
    s : array (K,), dtype; the accumulated log-scale to apply to the state.
    accept_rate : scalar; fraction of the n_rounds * K proposals accepted (0 when none ran).

    Source: module docstring (ours; Liu & Sabatti 2000 for group moves).
    """
    k = int(n_components)
    n_steps = int(n_rounds) * k
    s0 = jnp.zeros((k,), dtype)
    if n_steps == 0:
        return s0, jnp.zeros((), dtype)
    scales = jnp.asarray(PROPOSAL_SCALES, dtype)

    def body(t, carry):
        s, lp, key, n_acc = carry
        key, k_scale, k_eps, k_u = jax.random.split(key, 4)
        j = t % k
        sd = scales[jax.random.randint(k_scale, (), 0, scales.shape[0])]
        proposal = s.at[j].add(sd * jax.random.normal(k_eps, (), dtype))
        lp_new = log_density(proposal)
        accept = jnp.log(jax.random.uniform(k_u, (), dtype)) < lp_new - lp
        return (jnp.where(accept, proposal, s), jnp.where(accept, lp_new, lp), key,
                n_acc + accept.astype(dtype))

    s, _, _, n_acc = jax.lax.fori_loop(0, n_steps, body, (s0, log_density(s0), key, jnp.zeros((), dtype)))
    return s, n_acc / n_steps
