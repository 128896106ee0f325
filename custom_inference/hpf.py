r"""Batch coordinate-ascent VI (CAVI) for hierarchical Poisson factorization.

Source: ``001_30a2018ec18c20b9.txt``, sec. "Variational inference" (complete
conditionals eqs. user-weight-cc, item-weight-cc, aux-cc; batch algorithm figure).
Model (shape/rate Gammas; the prior rates of xi and eta are a'/b' and c'/d', see
`ppl_models.hpf`):

    xi_u ~ Ga(a', a'/b'),  theta_uk ~ Ga(a, xi_u),
    eta_i ~ Ga(c', c'/d'), beta_ik ~ Ga(c, eta_i),
    z_uik ~ Poisson(theta_uk beta_ik),  y_ui = sum_k z_uik.

Mean-field family q = prod Ga(theta_uk; gamma_uk) Ga(beta_ik; lambda_ik)
Ga(xi_u; kappa_u) Ga(eta_i; tau_i) Mult(z_ui; y_ui, phi_ui).

Derivation (ours; each line is checked by `validation.checks.updates` with ``jax.grad``
of `elbo`). Every update sets a factor to the expected complete conditional:

    phi_uik    ∝ exp(E[log theta_uk] + E[log beta_ik])              (y_ui > 0 only)
    gamma_uk   = (a + sum_i y_ui phi_uik,   E[xi_u] + sum_i E[beta_ik])
    kappa_u    = (a' + K a,                 a'/b' + sum_k E[theta_uk])
    lambda_ik  = (c + sum_u y_ui phi_uik,   E[eta_i] + sum_u E[theta_uk])
    tau_i      = (c' + K c,                 c'/d' + sum_k E[beta_ik])

The rate sums run over *all* items (users): ``sum_i E[beta_ik]`` is one column
sum, O(J K), so a sweep costs O(N K + (I + J) K) for N nonzeros and never forms
an I x J array. The seed's figure prints ``kappa_shape = a + K a'`` and
``kappa_rate = b' + sum_k (digamma(gamma_shape) - log gamma_rate)`` (E[log theta]
in place of E[theta]); both are wrong (see `validation.checks.errata`).

Solver style (the protocol of `custom_inference.base`): `init(key, data, K, hyper)` builds an
`HPFState`, `step(key, state, data, hyper) -> (state, info)` with the ELBO of the new state,
`elbo` is a separate function of ``(state, data, hyper[, phi])``, `fit(key, data, K, hyper)`
is the driver (returns `base.FitResult`), and `ALGORITHM` declares it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, logsumexp, xlogy

from . import arviz_io, base, sharding, vi_driver
from .chunks import over_chunks
from .data import Observations, check_observations
from .gamma import expected_gamma_logpdf, gamma_entropy, gamma_log_mean, gamma_mean

__all__ = [
    "HPFState",
    "HPFInfo",
    "init",
    "step",
    "sweep",
    "elbo",
    "optimal_phi",
    "update_gamma",
    "update_kappa",
    "update_lambda",
    "update_tau",
    "BLOCKS",
    "fit",
    "state_from_inference_data",
    "expected_rate",
    "score_users",
    "fold_in",
    "save_state",
    "load_state",
    "ALGORITHM",
]


#: Names of the HPF hyperparameters, as in `ppl_models.hpf.HPFHyper`.
HYPER_FIELDS = ("a", "a_prime", "b_prime", "c", "c_prime", "d_prime")


class HPFState(NamedTuple):
    """Variational parameters of HPF (all Gamma shape/rate), a NamedTuple (a JAX pytree).

    phi (N, K) is not stored: it is recomputed from gamma and lambda at the start
    of every sweep, which is both cheaper in memory and exactly the CAVI order.

    Parameters
    ----------
    gamma_shape, gamma_rate : jax.Array, shape (I, K), float32 or float64
        q(theta_uk) = Ga(gamma_shape, gamma_rate), the user weights.
    kappa_shape, kappa_rate : jax.Array, shape (I,), same dtype
        q(xi_u), the user activities.
    lambda_shape, lambda_rate : jax.Array, shape (J, K), same dtype
        q(beta_ik), the item weights.
    tau_shape, tau_rate : jax.Array, shape (J,), same dtype
        q(eta_i), the item popularities.

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``001_30a2018ec18c20b9.txt``, sec. "Variational inference" (the mean-field family;
    module docstring).
    """

    gamma_shape: jax.Array
    gamma_rate: jax.Array
    kappa_shape: jax.Array
    kappa_rate: jax.Array
    lambda_shape: jax.Array
    lambda_rate: jax.Array
    tau_shape: jax.Array
    tau_rate: jax.Array


class HPFInfo(NamedTuple):
    """Per-sweep diagnostics of `step` (``base`` protocol: Info describes the new state).

    Parameters
    ----------
    elbo : jax.Array, shape (), the state's float dtype
        The ELBO (nats) of the state the sweep returns.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    elbo: jax.Array


def _check_hyper(hyper) -> None:
    """ValueError naming the field unless ``hyper`` has every field of `ppl_models.hpf.HPFHyper`, each > 0."""
    base.check_positive_hyper(hyper, HYPER_FIELDS, "ppl_models.hpf.HPFHyper")


def _check_components(n_components) -> int:
    if isinstance(n_components, bool) or int(n_components) != n_components or n_components < 1:
        raise ValueError(f"n_components (K) must be an integer >= 1, got {n_components!r}")
    return int(n_components)


def init(key, data: Observations, K: int, hyper, *, dtype=None) -> HPFState:
    """Initial variational parameters: the prior with a small random offset.

    Shapes of theta and beta are ``a (1 + 0.5 U)`` and ``c (1 + 0.5 U)``, rates
    the prior means E[xi] = b' and E[eta] = d' times ``(1 + 0.5 U)``, U ~ Uniform(0, 1)
    (the offset breaks the symmetry between the K components); the activity and
    popularity shapes are fixed at a' + K a and c' + K c; their rates are the
    prior rate plus the sum of the initial E[theta_uk] (E[beta_ik]).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed (`base.as_key`).
    data : Observations, shape (I, J)
        The N nonzero counts (rows, cols int32 (N,), values float (N,)).
    K : int >= 1
        Number of components.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    dtype : numpy dtype, keyword-only, optional
        float32 or float64; default the dtype of ``data.values``.

    Returns
    -------
    HPFState
        Shapes in its docstring, dtype ``dtype``.

    Raises
    ------
    ValueError
        K < 1 or not an integer; ``hyper`` lacking a field or with a hyperparameter not positive
        and finite; a ``dtype`` other than float32 / float64 (`base.compute_dtype`).
    TypeError
        ``key`` neither a PRNG key nor an integer (`base.as_key`); a hyperparameter that
        ``float`` does not take.

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure, initialization ("the prior with a
    small random offset"; activity and popularity shapes corrected, module docstring).
    """
    _check_hyper(hyper)
    k = _check_components(K)
    key = base.as_key(key)
    dtype = jnp.dtype(base.compute_dtype(dtype, data.values.dtype))
    i, j = data.shape
    keys = jax.random.split(key, 4)
    # float32 uniforms for every dtype, so a seed gives the same start in float32 and float64
    u = lambda kk, shape: 1.0 + 0.5 * jax.random.uniform(kk, shape, dtype=jnp.float32).astype(dtype)  # noqa: E731
    gamma_shape = hyper.a * u(keys[0], (i, k))
    gamma_rate = hyper.b_prime * u(keys[1], (i, k))
    lambda_shape = hyper.c * u(keys[2], (j, k))
    lambda_rate = hyper.d_prime * u(keys[3], (j, k))
    kappa_shape, kappa_rate = _activity_update(gamma_shape, gamma_rate, hyper.a, hyper.a_prime, hyper.b_prime)
    tau_shape, tau_rate = _activity_update(lambda_shape, lambda_rate, hyper.c, hyper.c_prime, hyper.d_prime)
    return HPFState(
        gamma_shape, gamma_rate, kappa_shape, kappa_rate, lambda_shape, lambda_rate, tau_shape, tau_rate
    )


def _phi_logits(state: HPFState, data: Observations) -> jax.Array:
    """E[log theta_uk] + E[log beta_ik] for each nonzero, shape (N, K)."""
    elog_theta = gamma_log_mean(state.gamma_shape, state.gamma_rate)
    elog_beta = gamma_log_mean(state.lambda_shape, state.lambda_rate)
    return elog_theta[data.rows] + elog_beta[data.cols]


def optimal_phi(state: HPFState, data: Observations) -> jax.Array:
    """The CAVI update of the multinomial parameters, shape (N, K), rows on the simplex.

    phi_uik ∝ exp{E[log theta_uk] + E[log beta_ik]} (seed 001, batch figure step 1).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations, shape (I, J)
        The N nonzero counts (rows, cols int32 (N,), values float (N,)).

    Returns
    -------
    jax.Array, shape (N, K), the state's dtype
        phi of each nonzero (in ``data`` order); each row sums to 1.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure, step 1.
    """
    logits = _phi_logits(state, data)
    return jnp.exp(logits - logsumexp(logits, axis=1, keepdims=True))


def _weights_update(y_phi_sum, act_shape, act_rate, other_mean_sum, weight_prior_shape):
    """Weights block, written once for users (theta) and items (beta).

    For users: ``(a + sum_i y_ui phi_uik, E[xi_u] + sum_i E[beta_ik])``, where
    ``y_phi_sum`` (I, K) = sum_i y_ui phi_uik and ``other_mean_sum`` (K,) = sum_i E[beta_ik].
    """
    shape = weight_prior_shape + y_phi_sum
    rate = gamma_mean(act_shape, act_rate)[:, None] + other_mean_sum[None, :]
    return shape, rate


def _activity_update(weight_shape, weight_rate, weight_prior_shape, act_prior_shape, act_prior_mean):
    """Activity / popularity block, written once for xi and eta.

    For users: ``(a' + K a, a'/b' + sum_k E[theta_uk])``; returns shape (I,) and rate (I,).
    """
    n, k = weight_shape.shape
    shape = jnp.full((n,), act_prior_shape + k * weight_prior_shape, weight_shape.dtype)
    rate = act_prior_shape / act_prior_mean + gamma_mean(weight_shape, weight_rate).sum(axis=1)
    return shape, rate


def update_gamma(state: HPFState, data: Observations, hyper, phi) -> HPFState:
    """Coordinate update of q(theta): gamma_uk = (a + sum_i y_ui phi_uik, E[xi_u] + sum_i E[beta_ik]).

    Corrects seed 001's text update (a fixed rate b in place of E[xi_u]).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations, shape (I, J)
        The N nonzero counts (rows, cols int32 (N,), values float (N,)).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    phi : jax.Array, shape (N, K), float
        The multinomial parameters of the nonzeros (in ``data`` order), e.g. `optimal_phi`.

    Returns
    -------
    HPFState
        ``state`` with new gamma_shape, gamma_rate (I, K) of the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure, step 2 (corrected: rate
    E[xi_u] + sum_i E[beta_ik]).
    """
    y_phi_sum = jax.ops.segment_sum(data.values[:, None] * phi, data.rows, num_segments=data.n_rows)
    return _gamma_given_stats(state, hyper, y_phi_sum)


def _gamma_given_stats(state: HPFState, hyper, y_phi_sum) -> HPFState:
    """`update_gamma` given ``y_phi_sum`` (I, K) = sum_i y_ui phi_uik."""
    beta_sum = gamma_mean(state.lambda_shape, state.lambda_rate).sum(axis=0)
    shape, rate = _weights_update(y_phi_sum, state.kappa_shape, state.kappa_rate, beta_sum, hyper.a)
    return state._replace(gamma_shape=shape, gamma_rate=rate)


def update_kappa(state: HPFState, data: Observations, hyper, phi=None) -> HPFState:
    """Coordinate update of q(xi): kappa_u = (a' + K a, a'/b' + sum_k E[theta_uk]).

    Corrects seed 001's batch figure, which prints shape a + K a' and rate
    b' + sum_k (digamma(gamma_shape) - log gamma_rate).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations
        Unused (the protocol's signature).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    phi : jax.Array or None, default None
        Unused.

    Returns
    -------
    HPFState
        ``state`` with new kappa_shape, kappa_rate (I,) of the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure, step 2 (corrected).
    """
    shape, rate = _activity_update(state.gamma_shape, state.gamma_rate, hyper.a, hyper.a_prime, hyper.b_prime)
    return state._replace(kappa_shape=shape, kappa_rate=rate)


def update_lambda(state: HPFState, data: Observations, hyper, phi) -> HPFState:
    """Coordinate update of q(beta): lambda_ik = (c + sum_u y_ui phi_uik, E[eta_i] + sum_u E[theta_uk]).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations, shape (I, J)
        The N nonzero counts (rows, cols int32 (N,), values float (N,)).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    phi : jax.Array, shape (N, K), float
        The multinomial parameters of the nonzeros (in ``data`` order).

    Returns
    -------
    HPFState
        ``state`` with new lambda_shape, lambda_rate (J, K) of the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure, step 3 (rate E[eta_i] + sum_u
    E[theta_uk], as the figure prints it).
    """
    y_phi_sum = jax.ops.segment_sum(data.values[:, None] * phi, data.cols, num_segments=data.n_cols)
    return _lambda_given_stats(state, hyper, y_phi_sum)


def _lambda_given_stats(state: HPFState, hyper, y_phi_sum) -> HPFState:
    """`update_lambda` given ``y_phi_sum`` (J, K) = sum_u y_ui phi_uik."""
    theta_sum = gamma_mean(state.gamma_shape, state.gamma_rate).sum(axis=0)
    shape, rate = _weights_update(y_phi_sum, state.tau_shape, state.tau_rate, theta_sum, hyper.c)
    return state._replace(lambda_shape=shape, lambda_rate=rate)


def update_tau(state: HPFState, data: Observations, hyper, phi=None) -> HPFState:
    """Coordinate update of q(eta): tau_i = (c' + K c, c'/d' + sum_k E[beta_ik]).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations
        Unused (the protocol's signature).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    phi : jax.Array or None, default None
        Unused.

    Returns
    -------
    HPFState
        ``state`` with new tau_shape, tau_rate (J,) of the state's dtype.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure, step 3 (corrected as for kappa).
    """
    shape, rate = _activity_update(state.lambda_shape, state.lambda_rate, hyper.c, hyper.c_prime, hyper.d_prime)
    return state._replace(tau_shape=shape, tau_rate=rate)


#: The blocks of one sweep, in `step`'s order, after phi: (name, update, fields it sets).
#: `step` runs the same updates from phi's sums without forming phi (`_sweep_statistics`).
BLOCKS = (
    ("gamma", update_gamma, ("gamma_shape", "gamma_rate")),
    ("kappa", update_kappa, ("kappa_shape", "kappa_rate")),
    ("lambda", update_lambda, ("lambda_shape", "lambda_rate")),
    ("tau", update_tau, ("tau_shape", "tau_rate")),
)


#: Nonzeros per chunk in the inner loop of `step`: the chunk's (chunk, K) temporaries
#: stay in cache instead of four (N, K) arrays going through memory.
STEP_CHUNK = 16384


def _shifted_exp_log_mean(shape, rate):
    """exp(E[log x_k] - m) and m = max_k E[log x_k], per row; entries in (0, 1]."""
    elog = gamma_log_mean(shape, rate)
    m = elog.max(axis=1)
    return jnp.exp(elog - m[:, None]), m


def _sweep_statistics(state: HPFState, data, chunk: int = STEP_CHUNK):
    """sum_i y_ui phi_uik (I, K), sum_u y_ui phi_uik (J, K) and sum_ui y_ui log Z_ui, phi optimal.

    phi_uik = t_uk b_ik / z_ui with t_uk = exp(E log theta_uk - m_u), b_ik = exp(E log beta_ik - m_i),
    z_ui = sum_k t_uk b_ik, so sum_i y_ui phi_uik = t_uk sum_i (y_ui / z_ui) b_ik (and alike for
    items): exp runs on (I + J) x K numbers, never on N x K, and phi is never stored. The
    nonzeros are visited in chunks of ``chunk`` (`_nonzero_sums`). log Z_ui = log z_ui + m_u + m_i
    is the log normaliser the ELBO needs. z_ui underflows only if every component of (u, i) lies
    more than ~87 nats (float32; ~708 in float64) below m_u + m_i.

    ``data``: an `Observations` (one block) or a `sharding.ShardedObservations` (`_nonzero_sums`
    on every device's block, combined by psum: `sharding.block_sums`).
    """
    t, m_u = _shifted_exp_log_mean(state.gamma_shape, state.gamma_rate)
    b, m_i = _shifted_exp_log_mean(state.lambda_shape, state.lambda_rate)
    user, item, y_log_z = sharding.block_sums(partial(_nonzero_sums, chunk=chunk), (t, m_u, b, m_i), data)
    return t * user, b * item, y_log_z


def _nonzero_sums(factors, data: Observations, chunk: int = STEP_CHUNK):
    """The sums over one block of nonzeros behind `_sweep_statistics`: sum_i (y_ui / z_ui) b_ik (I, K),
    sum_u (y_ui / z_ui) t_uk (J, K) and sum y_ui log Z_ui, for ``factors`` = (t, m_u, b, m_i).

    A ``fori_loop`` over whole chunks of ``chunk`` nonzeros, then the tail. Every term is
    proportional to y_ui, so an entry with y_ui = 0 (sharding's padding) adds exactly 0.
    """
    t, m_u, b, m_i = factors

    def body(start, size, carry):
        user, item, y_log_z = carry
        rows = jax.lax.dynamic_slice_in_dim(data.rows, start, size)
        cols = jax.lax.dynamic_slice_in_dim(data.cols, start, size)
        y = jax.lax.dynamic_slice_in_dim(data.values, start, size)
        t_n, b_n = t[rows], b[cols]
        z = jnp.sum(t_n * b_n, axis=1)
        w = y / z
        user = user.at[rows].add(w[:, None] * b_n)
        item = item.at[cols].add(w[:, None] * t_n)
        y_log_z = y_log_z + jnp.sum(y * (jnp.log(z) + m_u[rows] + m_i[cols]))
        return user, item, y_log_z

    n = data.nnz
    carry = (jnp.zeros_like(t), jnp.zeros_like(b), jnp.zeros_like(t, shape=()))  # *_like: same device-variance as t
    return over_chunks(n, chunk, body, carry)


def _sweep_impl(state: HPFState, data: Observations, hyper):
    """The CAVI sweep kernel: (new state, ELBO of the *incoming* state, free from the sweep's phi sums)."""
    user_stats, item_stats, y_log_z = _sweep_statistics(state, data)
    incoming = _elbo_given_y_log_z(state, data, hyper, y_log_z)
    state = _gamma_given_stats(state, hyper, user_stats)
    state = update_kappa(state, data, hyper)
    state = _lambda_given_stats(state, hyper, item_stats)
    state = update_tau(state, data, hyper)
    return state, incoming


#: `fit`'s sweep: reports the incoming state's ELBO at no extra cost (the trace is the same).
_sweep_jit = jax.jit(_sweep_impl)


def sweep(state: HPFState, data: Observations, hyper) -> tuple[HPFState, jax.Array]:
    """The fused CAVI sweep `fit` runs (jitted).

    The same new state as `step`, and the ELBO of the *incoming* state, which the sweep's phi sums
    give for free (O(N K + (I + J) K), no second pass).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations, shape (I, J)
        The N nonzero counts (device arrays), or a `sharding.ShardedObservations`.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    state : HPFState
        After one sweep (same shapes and dtype).
    elbo : jax.Array, shape (), float
        The ELBO (nats) of the incoming ``state``.

    Raises
    ------
    None of its own (jitted; no value checks).

    Source: ``001_30a2018ec18c20b9.txt``, batch algorithm figure (corrected; module docstring).
    """
    return _sweep_jit(state, data, hyper)


def _y_log_z(state: HPFState, data, chunk: int = STEP_CHUNK) -> jax.Array:
    """sum_ui y_ui log sum_k exp(E log theta_uk + E log beta_ik), as `_sweep_statistics` computes it
    (same chunks, same arithmetic) but without the phi sums; ``data`` one block or sharded
    (`sharding.block_sums`)."""
    t, m_u = _shifted_exp_log_mean(state.gamma_shape, state.gamma_rate)
    b, m_i = _shifted_exp_log_mean(state.lambda_shape, state.lambda_rate)
    return sharding.block_sums(partial(_nonzero_y_log_z, chunk=chunk), (t, m_u, b, m_i), data)


def _nonzero_y_log_z(factors, data: Observations, chunk: int = STEP_CHUNK) -> jax.Array:
    """sum y_ui log Z_ui over one block of nonzeros (`_nonzero_sums` without the phi sums)."""
    t, m_u, b, m_i = factors

    def body(start, size, acc):
        rows = jax.lax.dynamic_slice_in_dim(data.rows, start, size)
        cols = jax.lax.dynamic_slice_in_dim(data.cols, start, size)
        y = jax.lax.dynamic_slice_in_dim(data.values, start, size)
        z = jnp.sum(t[rows] * b[cols], axis=1)
        return acc + jnp.sum(y * (jnp.log(z) + m_u[rows] + m_i[cols]))

    n = data.nnz
    return over_chunks(n, chunk, body, jnp.zeros_like(t, shape=()))


@jax.jit
def step(key, state: HPFState, data: Observations, hyper) -> tuple[HPFState, HPFInfo]:
    """One CAVI sweep: phi, then gamma, kappa (users), then lambda, tau (items).

    Each block is the exact coordinate maximizer of the ELBO given the others (with
    phi held at its value from the start of the sweep), so the ELBO never decreases.
    phi itself is never formed: the sweep needs only its sums over items and users
    (see `_sweep_statistics`), which equal those of `optimal_phi` exactly in exact
    arithmetic. Work: O(N K + (I + J) K) for the sweep plus O(N K) for the new ELBO.

    Parameters
    ----------
    key : jax.Array or None
        Unused (CAVI is deterministic; kept for the protocol, may be None).
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations, shape (I, J)
        The N nonzero counts (device arrays), or the same split over devices
        (`sharding.ShardedObservations`, from `sharding.shard_observations`): then every device
        sums its block of nonzeros and the sums are psum-ed (`sharding.block_sums`), the state
        stays replicated, and the result equals the single-device sweep up to the order of the
        additions.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    state : HPFState
        The new state.
    info : HPFInfo
        The ELBO of the *new* state (`base` protocol).

    Raises
    ------
    None of its own (inputs are checked by `init` / `fit`).

    Source: 001_30a2018ec18c20b9.txt batch algorithm figure (corrected; module docstring).
    """
    del key
    state, _ = _sweep_impl(state, data, hyper)
    return state, HPFInfo(_elbo_given_y_log_z(state, data, hyper, _y_log_z(state, data)))


def _prior_and_entropy(state: HPFState, hyper) -> jax.Array:
    """E_q[log p(theta, xi, beta, eta)] + entropy of q(theta, xi, beta, eta)."""
    total = 0.0
    for (ws, wr, as_, ar, w_shape, p_shape, p_mean) in (
        (state.gamma_shape, state.gamma_rate, state.kappa_shape, state.kappa_rate, hyper.a, hyper.a_prime, hyper.b_prime),
        (state.lambda_shape, state.lambda_rate, state.tau_shape, state.tau_rate, hyper.c, hyper.c_prime, hyper.d_prime),
    ):
        e_act, elog_act = gamma_mean(as_, ar), gamma_log_mean(as_, ar)
        prior_rate = p_shape / p_mean
        total += expected_gamma_logpdf(p_shape, jnp.log(prior_rate), prior_rate, elog_act, e_act).sum()
        total += expected_gamma_logpdf(
            w_shape, elog_act[:, None], e_act[:, None], gamma_log_mean(ws, wr), gamma_mean(ws, wr)
        ).sum()
        total += gamma_entropy(ws, wr).sum() + gamma_entropy(as_, ar).sum()
    return total


def _rate_sum(state: HPFState) -> jax.Array:
    """sum over all (u, i) of E[theta_u . beta_i] = sum_k (sum_u E theta_uk)(sum_i E beta_ik)."""
    theta_sum = gamma_mean(state.gamma_shape, state.gamma_rate).sum(axis=0)
    beta_sum = gamma_mean(state.lambda_shape, state.lambda_rate).sum(axis=0)
    return jnp.dot(theta_sum, beta_sum)


def _elbo_given_y_log_z(state, data, hyper, y_log_z):
    """The ELBO at the optimal phi, given y_log_z = sum_ui y_ui log sum_k exp(E log theta_uk + E log beta_ik)."""
    likelihood = y_log_z - jnp.sum(gammaln(data.values + 1.0)) - _rate_sum(state)
    return likelihood + _prior_and_entropy(state, hyper)


def elbo(state: HPFState, data: Observations, hyper, phi=None) -> jax.Array:
    """The evidence lower bound (nats) with every term, zeros included.

    L = sum_{y_ui>0} [ sum_k y_ui phi_uik (E log theta_uk + E log beta_ik - log phi_uik) - log y_ui! ]
        - sum_k (sum_u E theta_uk)(sum_i E beta_ik)           (all I x J cells, in O((I+J)K))
        + E log p(theta | xi) + E log p(xi) + E log p(beta | eta) + E log p(eta)
        + H[q(theta)] + H[q(xi)] + H[q(beta)] + H[q(eta)].
    The z terms log z! cancel between E log p(z) and E log q(z).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    data : Observations, shape (I, J), or sharding.ShardedObservations
        The N nonzero counts.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    phi : jax.Array, shape (N, K), float, or None, default None
        Multinomial parameters for the nonzeros (in ``data`` order). ``None``
        uses the optimal phi, giving ``y log sum_k exp(E log theta + E log beta)``
        (for a `sharding.ShardedObservations` ``data``: summed per block and psum-ed).

    Returns
    -------
    jax.Array, shape (), the state's float dtype
        The ELBO in nats, a lower bound on log p(y).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: project addition (derived from the model and the mean-field family of
    ``001_30a2018ec18c20b9.txt`` eq. q; the seed prints no ELBO).
    """
    if phi is None and isinstance(data, sharding.ShardedObservations):  # per block, psum-ed; no (N, K) array
        return _elbo_given_y_log_z(state, data, hyper, _y_log_z(state, data))
    if phi is None:
        lse = logsumexp(_phi_logits(state, data), axis=1)
        return _elbo_given_y_log_z(state, data, hyper, jnp.sum(data.values * lse))
    logits = _phi_logits(state, data)
    y = data.values
    likelihood = jnp.sum(y[:, None] * phi * logits - y[:, None] * xlogy(phi, phi)) - jnp.sum(gammaln(y + 1.0))
    return likelihood - _rate_sum(state) + _prior_and_entropy(state, hyper)


#: `elbo` compiled: a sharded fit's final ELBO (op by op, every operation on the mesh would compile
#: on its own; the single-device fit keeps its eager `elbo`, whose values the saved outputs pin).
_elbo_jit = jax.jit(elbo)


def expected_rate(state: HPFState, users, items) -> jax.Array:
    """E_q[theta_u . beta_i] = sum_k E[theta_uk] E[beta_ik] for index pairs, shape (M,).

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    users : array-like, shape (M,), int
        User index of each pair, in [0, I).
    items : array-like, shape (M,), int
        Item index of each pair, in [0, J).

    Returns
    -------
    jax.Array, shape (M,), the state's dtype
        The expected Poisson rate of each pair.

    Raises
    ------
    None of its own (no index checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, eq. score (posterior expected rate, under q).
    """
    e_theta = gamma_mean(state.gamma_shape, state.gamma_rate)
    e_beta = gamma_mean(state.lambda_shape, state.lambda_rate)
    return jnp.sum(e_theta[jnp.asarray(users)] * e_beta[jnp.asarray(items)], axis=-1)


def score_users(state: HPFState, users) -> np.ndarray:
    """Posterior-mean scores E_q[theta_u . beta_i] of every item for some users, shape (B, J).

    The recommendation score of the HPF paper (posterior expected rate); used as
    the ``score_fn`` of `validation.evaluation.metrics`, batch by batch.

    Parameters
    ----------
    state : HPFState
        The variational parameters (shapes in its docstring).
    users : array-like, shape (B,), int
        Users to score, in [0, I).

    Returns
    -------
    numpy.ndarray, shape (B, J), the state's dtype
        E_q[theta_u . beta_i] for every item i.

    Raises
    ------
    None of its own (no index checks).

    Source: ``001_30a2018ec18c20b9.txt``, eq. score (under q).
    """
    with jax.enable_x64(np.dtype(state.lambda_shape.dtype) == np.float64):  # in the fit's precision
        e_theta = gamma_mean(state.gamma_shape, state.gamma_rate)[jnp.asarray(users)]
        e_beta = gamma_mean(state.lambda_shape, state.lambda_rate)
        return np.asarray(e_theta @ e_beta.T)


@jax.jit
def _fold_in_sweep(state: HPFState, data: Observations, hyper) -> HPFState:
    phi = optimal_phi(state, data)
    state = update_gamma(state, data, hyper, phi)
    return update_kappa(state, data, hyper, phi)


def fold_in(
    state: HPFState, data: Observations, hyper, *, seed: int = 0, max_iter: int = 200, tol: float = 1e-6
) -> HPFState:
    """Posterior of new users' weights and activity given fitted items, without refitting.

    Runs the user blocks of CAVI (phi, gamma, kappa) for the users of ``data`` with the
    item factors q(beta), q(eta) held at ``state``: the exact coordinate-ascent fixed
    point of the ELBO in the new users' parameters (the items' posterior is what the
    training data made it). Stops when the largest relative change of
    gamma (shape and rate) falls below ``tol``.

    Parameters
    ----------
    state : HPFState
        The state of a fitted model over J items (its item factors are kept).
    data : Observations, shape (I_new, J)
        The new users' counts over the same J items.
    hyper : ppl_models.hpf.HPFHyper or object
        The HPF hyperparameters used in the fit: positive float fields a, a_prime, b_prime, c, c_prime, d_prime.
    seed : int, keyword-only, default 0
        Seeds the new users' initialisation (`init`).
    max_iter : int, keyword-only, default 200
        Maximum number of user-block sweeps.
    tol : float, keyword-only, default 1e-6
        Stop when the largest relative change of gamma (shape and rate) falls below ``tol``.

    Returns
    -------
    HPFState
        Over I_new users and the same J items, in the fit's dtype (`score_users` works on it).

    Raises
    ------
    ValueError
        ``data`` does not have the fitted number of items J; from `init`, a bad ``hyper``.

    Source: project addition (the user blocks of ``001_30a2018ec18c20b9.txt``, batch algorithm
    figure, step 1-2, corrected).
    """
    n_items, k = state.lambda_shape.shape
    if data.n_cols != n_items:
        raise ValueError(f"data has {data.n_cols} items (columns), the fitted model has {n_items}")
    dtype = np.dtype(state.lambda_shape.dtype)
    # a float64 fit (the default) folds in in float64 whether or not x64 is on globally
    with jax.enable_x64(dtype == np.float64):
        data = jax.tree_util.tree_map(jnp.asarray, data.astype(dtype))
        fresh = init(jax.random.PRNGKey(seed), data, k, hyper, dtype=dtype)
        new = fresh._replace(
            lambda_shape=state.lambda_shape, lambda_rate=state.lambda_rate, tau_shape=state.tau_shape,
            tau_rate=state.tau_rate
        )
        for _ in range(max_iter):
            old = new
            new = _fold_in_sweep(new, data, hyper)
            change = max(
                float(jnp.max(jnp.abs(new.gamma_shape - old.gamma_shape) / old.gamma_shape)),
                float(jnp.max(jnp.abs(new.gamma_rate - old.gamma_rate) / old.gamma_rate)),
            )
            if change < tol:
                break
    return new


# ---------------------------------------------------------------------------------
# driver


#: ArviZ dimension names of every HPF variable (draws and variational parameters).
HPF_DIMS = {
    "theta": ["user", "component"],
    "beta": ["item", "component"],
    "xi": ["user"],
    "eta": ["item"],
    "gamma_shape": ["user", "component"],
    "gamma_rate": ["user", "component"],
    "kappa_shape": ["user"],
    "kappa_rate": ["user"],
    "lambda_shape": ["item", "component"],
    "lambda_rate": ["item", "component"],
    "tau_shape": ["item"],
    "tau_rate": ["item"],
    "elbo": ["iteration"],
    "rel_change": ["iteration"],
}
def save_state(state: HPFState, path: str | Path, **meta) -> Path:
    """Checkpoint: write the state (and scalar metadata) to a ``.npz`` file.

    Parameters
    ----------
    state : HPFState
        Stored as it is (shapes and dtypes kept).
    path : str or pathlib.Path
        The file; ``.npz`` is appended to a name without it (as numpy does); its folder is created.
    **meta : scalar
        Metadata stored as ``meta_<name>``.

    Returns
    -------
    pathlib.Path
        The file written (``path``, with ``.npz`` appended when it did not end so): what
        `load_state` reads.

    Raises
    ------
    OSError
        Not of its own: from creating the folder or writing the file.

    Source: project addition.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")  # the name np.savez writes, returned so it can be loaded
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{k: np.asarray(v) for k, v in state._asdict().items()}, **{f"meta_{k}": v for k, v in meta.items()})
    return path


def load_state(path: str | Path) -> tuple[HPFState, dict]:
    """Read a checkpoint written by `save_state`.

    Parameters
    ----------
    path : str or pathlib.Path
        The ``.npz`` file.

    Returns
    -------
    state : HPFState
        With the stored shapes and dtypes.
    meta : dict
        The metadata scalars, by name.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    KeyError
        Not of its own: numpy raises it for a file that lacks a state field.

    Source: project addition.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with np.load(path) as f:
        state = HPFState(**{k: jnp.asarray(f[k]) for k in HPFState._fields})
        meta = {k[5:]: f[k].item() for k in f.files if k.startswith("meta_")}
    return state, meta


def _draws_from_q(seed: int, state: HPFState, n_draws: int) -> dict[str, np.ndarray]:
    """``n_draws`` independent draws from q, shape (1, n_draws, ...) each (numpy Generator:
    no compilation per array shape)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, rate in (
        ("theta", state.gamma_shape, state.gamma_rate),
        ("xi", state.kappa_shape, state.kappa_rate),
        ("beta", state.lambda_shape, state.lambda_rate),
        ("eta", state.tau_shape, state.tau_rate),
    ):
        shape, rate = np.asarray(shape), np.asarray(rate)
        out[name] = (rng.standard_gamma(shape, size=(n_draws, *shape.shape)) / rate).astype(shape.dtype)[None]
    return out


def _posterior(seed: int, state: HPFState, n_draws: int) -> tuple[dict[str, np.ndarray], str]:
    """The ``posterior`` group: ``n_draws`` draws from q, or (n_draws = 0) the means of q as one draw."""
    if n_draws:
        return _draws_from_q(seed, state, n_draws), "draws from q"
    means = {"theta": gamma_mean(state.gamma_shape, state.gamma_rate), "xi": gamma_mean(state.kappa_shape, state.kappa_rate),
             "beta": gamma_mean(state.lambda_shape, state.lambda_rate), "eta": gamma_mean(state.tau_shape, state.tau_rate)}
    return vi_driver.point_posterior(means), "mean of q (n_draws=0)"


def fit(
    key,
    data: Observations = None,
    K: int = None,
    hyper=None,
    *,
    max_iter: int = 100,
    tol: float = 1e-6,
    dtype=None,
    n_draws: int = 100,
    progress: bool = True,
    init_state: HPFState | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 10,
    resume: bool = False,
    mesh=None,
) -> base.FitResult:
    """Fit HPF by batch CAVI (`base` protocol driver).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed (`base.as_key`); seeds the initialisation, and through
        `vi_driver.host_seed` the draws from q. Same key, same result.
    data : Observations, shape (I, J)
        Non-negative integer counts (nonzeros only), N entries.
    K : int >= 1
        Number of components.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters (any object with positive float fields a, a_prime, b_prime, c,
        c_prime, d_prime).
    max_iter : int >= 1
        Maximum number of sweeps.
    tol : float >= 0
        Stop when the relative ELBO change |L_t - L_{t-1}| / |L_{t-1}| < tol.
    dtype : numpy.float32 or numpy.float64, default float64
        Precision of the computation (float64 runs under ``jax.enable_x64``).
    n_draws : int >= 0
        Draws from q stored in the ``posterior`` group (0: the means of q as one draw).
    progress : bool
        Show a tqdm progress bar with the ELBO and its relative change.
    init_state : HPFState, optional
        Start from this state instead of `init`.
    checkpoint : str or pathlib.Path, optional
        `vi_driver.fit` checkpoint (``.npz``, atomic) every ``checkpoint_every`` sweeps and at the end.
    checkpoint_every : int, default 10
        Sweeps between checkpoints.
    resume : bool, default False
        Continue from ``checkpoint`` when it exists (bit for bit the uninterrupted run).
    mesh : jax.sharding.Mesh, optional
        Split the nonzeros over the devices of the mesh axis ``"nnz"`` (`sharding.nnz_mesh`,
        `sharding.shard_observations`); the variational parameters stay replicated and the
        per-block sums are combined with psum. The result equals the single-device fit up to the
        order of the floating-point additions (attrs ``n_devices``). None: one device, unchanged.

    Returns
    -------
    base.FitResult
        ``state`` the final HPFState; ``trace`` float64 (n_iter + 1,), the ELBO of the initial
        state and of the state after each sweep; ``idata`` an arviz.InferenceData with groups
        ``posterior``: draws from q of theta (chain, draw, user, component),
        beta (chain, draw, item, component), xi (chain, draw, user), eta (chain, draw, item);
        ``variational_parameters``: the `HPFState` fields;
        ``vi_trace``: ``elbo`` and ``rel_change`` (dim ``iteration``);
        attrs: the layout of `vi_driver.fit` (model, method "cavi", converged, n_iter, seconds, ...,
        ``hyper_<field>``) plus n_components (and n_devices with ``mesh``).
        `state_from_inference_data` recovers the state (for `score_users`, resuming).

    Raises
    ------
    ValueError
        Bad K, hyperparameters, max_iter, tol, n_draws, checkpoint_every or dtype; an
        ``init_state`` of the wrong shape; ``data`` with an index out of range, a NaN, negative or
        non-integer count, duplicate pairs or no entries (`Observations.validate`, before any
        compilation); ``mesh`` without an axis named ``"nnz"``; a checkpoint of another run or a
        damaged one (`vi_driver.fit`).
    TypeError
        ``key`` neither a PRNG key nor an int; ``data`` not an Observations, or with
        non-integer indices or non-numeric values; ``mesh`` not a jax.sharding.Mesh.
    FloatingPointError
        A non-finite ELBO (try float64).
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`vi_driver.fit`).
    OSError
        The checkpoint cannot be written.

    Source: 001_30a2018ec18c20b9.txt batch algorithm figure (corrected); driver: project addition.
    """
    key_init = base.as_key(key)  # first: a pre-protocol call fit(data, hyper, K) fails here, naming the key
    check_observations(data, "count", name="data")  # however built: ids in range, finite non-negative integers
    _check_hyper(hyper)
    k = _check_components(K)
    vi_driver.check_fit_args(max_iter, tol, n_draws)
    dtype = base.compute_dtype(dtype, np.float64)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    host = vi_driver.host_seed(key)

    if mesh is not None:
        sharding.check_mesh(mesh)
    with jax.enable_x64(dtype == np.float64):
        if mesh is None:
            data = jax.tree_util.tree_map(jnp.asarray, data.astype(dtype))
        else:  # the nonzeros split over the devices; the state replicated (module `sharding`)
            data = sharding.shard_observations(data.astype(dtype), mesh)
        if init_state is None:
            state = init(key_init, data, k, hyper, dtype=dtype)
        else:
            state = vi_driver.given_state(init_state, init(key_init, data, k, hyper, dtype=dtype), dtype)
        if mesh is not None:
            state = sharding.replicate(state, data)

        def sweep(state, t):
            # the fused kernel reports the ELBO of the state entering sweep t, so the trace is
            # L(s_0), ..., L(s_{n-1}) from the sweeps, then L(s_n) from `final_elbo`: the same values
            # as `step`'s Info, at no extra cost
            return _sweep_jit(state, data, hyper)

        output = vi_driver.Output(
            "hpf", "cavi", lambda s: _posterior(host, s, n_draws), dims=HPF_DIMS, params=lambda s: s._asdict(),
            coords={"user": np.arange(data.shape[0]), "item": np.arange(data.shape[1]), "component": np.arange(k)},
            source="001_30a2018ec18c20b9.txt, batch algorithm figure (corrected)",
            attrs={"n_components": k, **({} if mesh is None else {"n_devices": data.n_shards})})
        options = vi_driver.FitOptions(max_iter=max_iter, tol=tol, progress=progress, checkpoint=checkpoint,
                                       checkpoint_every=checkpoint_every, resume=resume, dtype=dtype)
        return vi_driver.fit(ALGORITHM, data, options=options, output=output, key=key_init, K=k, hyper=hyper,
                             state=state, sweep=sweep, final_elbo=lambda s: (elbo if mesh is None else _elbo_jit)(
                                 s, data, hyper), desc=f"HPF CAVI (K={k})", seed=host)


def state_from_inference_data(idata) -> HPFState:
    """The `HPFState` stored in a `fit` result (``variational_parameters`` group).

    Parameters
    ----------
    idata : arviz.InferenceData
        A `fit` result (``FitResult.idata``).

    Returns
    -------
    HPFState
        With the stored shapes and dtypes (see `HPFState`).

    Raises
    ------
    ValueError
        ``idata`` has no ``variational_parameters`` group or it lacks an HPFState field.

    Source: project addition.
    """
    params = arviz_io.group_arrays(idata, "variational_parameters")
    missing = [f for f in HPFState._fields if f not in params]
    if missing:
        raise ValueError(f"not an HPF CAVI result: variational_parameters lacks {missing}")
    return HPFState(*(jnp.asarray(params[f]) for f in HPFState._fields))


def _target(state: HPFState, data: Observations, hyper) -> jax.Array:
    """`elbo` at the optimal phi (the protocol's target(state, data, hyper))."""
    return elbo(state, data, hyper)


#: The protocol declaration (`custom_inference.base`).
ALGORITHM = base.Algorithm(
    name="hpf-cavi",
    kind="vi",
    init=init,
    step=step,
    target=_target,
    target_name="elbo",
    dims={f: tuple(HPF_DIMS[f]) for f in HPFState._fields},
    source="001_30a2018ec18c20b9.txt, sec. Variational inference, batch algorithm figure (corrected)",
).check()
