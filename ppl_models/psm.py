r"""Paired symbol modelling ("PSM") as a NumPyro program, and its event-by-event simulator.

Source: ``000_619a0297b9d686b2.txt`` (Paquet, Koenigstein, Winther, *Scalable Bayesian
Modelling of Paired Symbols*), sec. 2: the selection-then-censoring story, priors, joint (2).

Generative story (sec. 2, fig. 1)::

    pi  ~ Dirichlet(alpha0 1_I)             user popularities           (sec. 2, priors)
    psi ~ Dirichlet(beta0 1_J)              item popularities
    u_i ~ N(0, tau_u^-1 I_K), b_i ~ N(0, tau_b^-1)        users i = 0..I-1
    v_j ~ N(0, tau_v^-1 I_K), b_j ~ N(0, tau_b^-1)        items j = 0..J-1
    repeat:  i ~ Discrete(pi), j ~ Discrete(psi)          selection step
             o ~ Bernoulli(sigma(u_i . v_j + b_i + b_j))  censoring step
             o = T: the pair (i, j) is appended to the observed stream; o = F: it is censored

The data are the D observed events (grouped as counts c_ij over the distinct observed pairs G)
and the number D' of censored events, whose identities are unknown. The paper fixes D' = r D as
a hyperparameter (sec. 2); the program takes D' (``d_prime``, any real >= 0).

Censored identities summed out analytically. A censored event with unknown (y, z) has
probability ``p(o = F | theta) = sum_ij pi_i psi_j (1 - sigma(a_ij))`` (the mixture of I J
components of sec. 2), evaluated here as ``logsumexp_ij(log pi_i + log psi_j + log sigma(-a_ij))``
over the dense I x J grid (this program is the small-data reference: O(I J K) work). The D'
censored events are i.i.d. given theta, so they enter as one pseudo-observation
``numpyro.factor("censored", D' * log p(o = F | theta))`` (D' need not be an integer: it is the
paper's hyperparameter r D). The observed events enter with their identities: each distinct
observed pair is a plate entry whose selection (Categorical(pi), Categorical(psi)) and acceptance
(Bernoulli(sigma(a)) observed at 1) log densities are scaled by its count c_ij, so the log joint
is exactly eq. (2) with the censored indices marginalised (no multinomial coefficient).

Dirichlet parameters: the paper writes D(pi; alpha0) and D(psi; alpha0) in sec. 2 and lists
alpha0, beta0 as inputs of Algorithm 1; we read beta0 as psi's and default both to 1 ("hyperparameters
set to one", sec. 5), as are tau_u, tau_v, tau_b.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["PSMHyper", "PSMSizes", "model", "simulate", "aggregate", "check_hyper", "log_censoring_probability"]


class PSMHyper(NamedTuple):
    """PSM hyperparameters with the paper's names; defaults "set to one" (sec. 5).

    Parameters
    ----------
    alpha0 : float > 0, default 1.0
        Concentration of the symmetric Dirichlet prior of the user popularities pi (sec. 2).
    beta0 : float > 0, default 1.0
        Concentration of the symmetric Dirichlet prior of the item popularities psi (Algorithm 1 input).
    tau_u : float > 0, default 1.0
        Prior precision of every user vector coordinate u_ik (sec. 2).
    tau_v : float > 0, default 1.0
        Prior precision of every item vector coordinate v_jk (sec. 2).
    tau_b : float > 0, default 1.0
        Prior precision of every bias b_i and b_j (sec. 2).

    Raises
    ------
    None of its own (a NamedTuple; `check_hyper` checks the values).

    Source: ``000_619a0297b9d686b2.txt`` sec. 2 (priors), Algorithm 1 (inputs), sec. 5 (defaults).
    """

    alpha0: float = 1.0
    """Concentration of the symmetric Dirichlet prior of the user popularities pi (sec. 2)."""
    beta0: float = 1.0
    """Concentration of the symmetric Dirichlet prior of the item popularities psi (Algorithm 1 input)."""
    tau_u: float = 1.0
    """Prior precision of every user vector coordinate u_ik (sec. 2)."""
    tau_v: float = 1.0
    """Prior precision of every item vector coordinate v_jk (sec. 2)."""
    tau_b: float = 1.0
    """Prior precision of every bias b_i and b_j (sec. 2)."""


class PSMSizes(NamedTuple):
    """Sizes of a simulated stream.

    Parameters
    ----------
    n_users : int >= 1
        I, the number of users.
    n_items : int >= 1
        J, the number of items.
    K : int >= 1
        Number of factors.
    n_events : int >= 1
        D, the number of observed (kept) events.

    Raises
    ------
    None of its own (a NamedTuple; `simulate` checks the values).

    Source: project addition.
    """

    n_users: int
    n_items: int
    K: int
    n_events: int


def check_hyper(hyper) -> None:
    """Check that every field of `PSMHyper` is a positive finite number.

    Traced fields are skipped.

    Parameters
    ----------
    hyper : PSMHyper
        The hyperparameters (any object with the `PSMHyper` fields).

    Returns
    -------
    None
        Returns only when the check passes.

    Raises
    ------
    ValueError
        Naming the field: a missing field, or a value that is not finite and > 0 (and, from ``float``,
        a string that is not a number).
    TypeError
        From ``float``, for a field that is not numeric.

    Source: project addition (the hyperparameters of ``000_619a0297b9d686b2.txt`` sec. 2 and
    Algorithm 1).
    """
    for name in PSMHyper._fields:
        if not hasattr(hyper, name):
            raise ValueError(f"hyper has no field {name!r} (use ppl_models.psm.PSMHyper)")
        value = getattr(hyper, name)
        if isinstance(value, jax.core.Tracer):
            continue
        value = float(value)
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"hyper.{name} must be a positive finite number, got {value}")


def log_censoring_probability(log_pi, log_psi, a):
    """log p(o = F | theta) = log sum_ij pi_i psi_j sigma(-a_ij), the censored event with its identity
    summed out (sec. 2).

    Parameters
    ----------
    log_pi : jax.Array, shape (I,), float
        Log user popularities.
    log_psi : jax.Array, shape (J,), float
        Log item popularities.
    a : jax.Array, shape (I, J), float
        The acceptance logits u_i . v_j + b_i + b_j.

    Returns
    -------
    jax.Array, shape (), float
        The log probability, in the inputs' dtype.

    Raises
    ------
    None of its own (no checks: traced code); shapes that do not broadcast make JAX raise TypeError.

    Source: ``000_619a0297b9d686b2.txt`` sec. 2 (the mixture of I J components of a censored event).
    """
    terms = log_pi[:, None] + log_psi[None, :] + jax.nn.log_sigmoid(-a)
    return jax.scipy.special.logsumexp(terms)


def model(rows, cols, counts, n_users: int, n_items: int, K: int, d_prime, hyper: PSMHyper = PSMHyper()):
    """NumPyro program of PSM, eq. (2) with the censored identities summed out (module docstring).

    Work O(I J K) for the censored term (small problems only).

    Parameters
    ----------
    rows, cols : jax.Array, shape (G,), int
        The distinct observed pairs (i, j).
    counts : jax.Array, shape (G,), float
        c_ij >= 1, how many times each pair was observed (sum = D).
    n_users, n_items, K : int
        I, J and the number of factors.
    d_prime : float >= 0
        D' (= r D in the paper), the number of censored events.
    hyper : PSMHyper, default PSMHyper()
        Hyperparameters.

    Returns
    -------
    None
        A NumPyro program: sites ``pi`` (I,), ``psi`` (J,) (simplex), ``u`` (I, K), ``v`` (J, K),
        ``b_user`` (I,), ``b_item`` (J,); observed ``y``, ``z`` (selection of each observed pair, scaled
        by c_ij), ``o`` (its acceptance, scaled by c_ij); factor ``censored`` = D' log p(o = F | theta).

    Raises
    ------
    None of its own (no checks; `simulate` validates its inputs).

    Source: ``000_619a0297b9d686b2.txt`` sec. 2, eq. (2) (censored identities summed out, module
    docstring).
    """
    pi = numpyro.sample("pi", dist.Dirichlet(jnp.full(n_users, hyper.alpha0)))
    psi = numpyro.sample("psi", dist.Dirichlet(jnp.full(n_items, hyper.beta0)))
    with numpyro.plate("users", n_users):
        u = numpyro.sample("u", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_u)).expand([K]).to_event(1))
        b_user = numpyro.sample("b_user", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_b)))
    with numpyro.plate("items", n_items):
        v = numpyro.sample("v", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_v)).expand([K]).to_event(1))
        b_item = numpyro.sample("b_item", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_b)))
    # observed events: selection pi_i psi_j, then acceptance sigma(a_ij), c_ij times (eq. 2, first line)
    a_obs = jnp.sum(u[rows] * v[cols], axis=-1) + b_user[rows] + b_item[cols]
    with numpyro.plate("pairs", rows.shape[0]), numpyro.handlers.scale(scale=counts):
        numpyro.sample("y", dist.Categorical(probs=pi), obs=rows)
        numpyro.sample("z", dist.Categorical(probs=psi), obs=cols)
        numpyro.sample("o", dist.Bernoulli(logits=a_obs), obs=jnp.ones_like(a_obs))
    # D' censored events with unknown identities: a pseudo-observation of weight D' (eq. 2, the
    # (1 - sigma) factors and the pi, psi powers of the censored indices, summed over their I J values)
    a = u @ v.T + b_user[:, None] + b_item[None, :]
    numpyro.factor("censored", d_prime * log_censoring_probability(jnp.log(pi), jnp.log(psi), a))


def simulate(key, sizes, hyper: PSMHyper = PSMHyper(), *, max_draws: int | None = None):
    """Draw parameters from the priors, then run the two-step story event by event (sec. 2).

    Each event draws i ~ Discrete(pi), j ~ Discrete(psi) and keeps the pair with probability
    sigma(u_i . v_j + b_i + b_j); the loop stops at the D-th kept pair. The number of censored
    events D' is whatever the stream produced (negative binomial given theta). The likelihood of
    this stream in theta is that of `model` with ``d_prime = D'`` (the stopping rule does not
    change it), so the posterior of `model` given the returned (pairs, D') is the exact posterior
    for the simulated data.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    sizes : PSMSizes or tuple of 4 int
        (I, J, K, D), positive integers.
    hyper : PSMHyper, default PSMHyper()
        Hyperparameters.
    max_draws : int, optional
        The most events drawn (default 1000 D + 10^4).

    Returns
    -------
    params : dict of str to jax.Array, float
        ``pi`` (I,), ``psi`` (J,), ``u`` (I, K), ``v`` (J, K), ``b_user`` (I,), ``b_item`` (J,).
    events : dict
        ``rows``, ``cols``: jax.Array (D,) int32, the observed events in stream order; ``n_censored``
        (int, D'); ``n_draws`` (int, D + D').

    Raises
    ------
    ValueError
        For bad sizes or hyperparameters (`check_hyper`), before any computation.
    RuntimeError
        If the stream has not produced D kept pairs after ``max_draws`` events.

    Source: ``000_619a0297b9d686b2.txt`` sec. 2, fig. 1 (the selection-then-censoring story).
    """
    check_hyper(hyper)
    sizes = PSMSizes(*sizes)
    for name, value in zip(PSMSizes._fields, sizes):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"sizes.{name} must be a positive integer, got {value!r}")
    I, J, K, D = (int(x) for x in sizes)
    max_draws = int(max_draws if max_draws is not None else 1000 * D + 10_000)
    params, rows, cols, n_obs, n_draws = _simulate(key, jnp.asarray([float(x) for x in hyper]), I, J, K, D,
                                                   max_draws)
    if int(n_obs) < D:
        raise RuntimeError(f"only {int(n_obs)} of {D} events kept after {max_draws} draws (acceptance too low)")
    return params, {"rows": rows, "cols": cols, "n_censored": int(n_draws) - D, "n_draws": int(n_draws)}


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _simulate(key, h, I, J, K, D, max_draws):
    kp, ks, kl = jax.random.split(key, 3)
    hyper = PSMHyper(*(h[n] for n in range(5)))
    tr = numpyro.handlers.trace(numpyro.handlers.seed(_prior, kp)).get_trace(I, J, K, hyper)
    params = {k: tr[k]["value"] for k in ("pi", "psi", "u", "v", "b_user", "b_item")}
    cpi, cpsi = jnp.cumsum(params["pi"]), jnp.cumsum(params["psi"])

    def cond(c):
        return (c[1] < D) & (c[2] < max_draws)

    def body(c):
        key, n_obs, n_draws, rows, cols = c
        key, k1, k2, k3 = jax.random.split(key, 4)
        # selection step: inverse-CDF draws from Discrete(pi) and Discrete(psi)
        i = jnp.minimum(jnp.searchsorted(cpi, jax.random.uniform(k1, dtype=cpi.dtype) * cpi[-1]), I - 1)
        j = jnp.minimum(jnp.searchsorted(cpsi, jax.random.uniform(k2, dtype=cpsi.dtype) * cpsi[-1]), J - 1)
        # censoring step
        a = params["u"][i] @ params["v"][j] + params["b_user"][i] + params["b_item"][j]
        keep = jax.random.uniform(k3, dtype=a.dtype) < jax.nn.sigmoid(a)
        pos = jnp.where(keep, n_obs, D)  # out-of-range index: dropped by the scatter
        rows = rows.at[pos].set(i.astype(jnp.int32), mode="drop")
        cols = cols.at[pos].set(j.astype(jnp.int32), mode="drop")
        return key, n_obs + keep.astype(jnp.int32), n_draws + 1, rows, cols

    init = (ks, jnp.int32(0), jnp.int32(0), jnp.zeros(D, jnp.int32), jnp.zeros(D, jnp.int32))
    _, n_obs, n_draws, rows, cols = jax.lax.while_loop(cond, body, init)
    return params, rows, cols, n_obs, n_draws


def _prior(I, J, K, hyper):
    """The parameter part of `model` (draws only)."""
    numpyro.sample("pi", dist.Dirichlet(jnp.full(I, hyper.alpha0)))
    numpyro.sample("psi", dist.Dirichlet(jnp.full(J, hyper.beta0)))
    numpyro.sample("u", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_u)).expand([I, K]))
    numpyro.sample("v", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_v)).expand([J, K]))
    numpyro.sample("b_user", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_b)).expand([I]))
    numpyro.sample("b_item", dist.Normal(0.0, 1.0 / jnp.sqrt(hyper.tau_b)).expand([J]))


def aggregate(rows, cols, n_users: int, n_items: int):
    """Group an event stream into distinct pairs with counts, sorted row-major (numpy in, numpy out).

    Parameters
    ----------
    rows, cols : array_like, shape (D,), int
        User and item of each event.
    n_users : int
        I (unused by the computation; kept for a uniform signature).
    n_items : int
        J, the key stride (pairs are keyed ``i * J + j``).

    Returns
    -------
    rows, cols : numpy.ndarray, shape (G,), int32
        The distinct pairs.
    counts : numpy.ndarray, shape (G,), float64
        c_ij, the number of events of each pair.

    Raises
    ------
    None of its own (no checks).

    Source: project addition (the counts c_ij of ``000_619a0297b9d686b2.txt`` sec. 2).
    """
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    keys, counts = np.unique(rows * n_items + cols, return_counts=True)
    return (keys // n_items).astype(np.int32), (keys % n_items).astype(np.int32), counts.astype(np.float64)
