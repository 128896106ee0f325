r"""Blocked Gibbs sampler for hierarchical Poisson factorization.

Source: ``001_30a2018ec18c20b9.txt``, "Complete conditionals" (eqs. user-weight-cc,
item-weight-cc, the xi/eta conditionals and aux-cc), with the model's prior rates
a'/b' and c'/d' (see `ppl_models.hpf`; the seed's printed xi conditional uses b', and
its beta conditional prints shape a for c, both in `validation.checks.errata`).

Derivation (ours; checked against brute-force normalized conditionals on a grid and
as NumPyro `CustomGibbs` blocks beside NUTS, in `validation.models.hpf_gibbs`). With the
augmentation z_uik ~ Poisson(theta_uk beta_ik), y_ui = sum_k z_uik:

    z_ui | theta, beta, y     ~ Mult(y_ui, theta_u * beta_i / theta_u . beta_i)      (y_ui > 0)
    theta_uk | xi, beta, z    ~ Ga(a + sum_i z_uik,  xi_u + sum_i beta_ik)
    xi_u | theta              ~ Ga(a' + K a,         a'/b' + sum_k theta_uk)
    beta_ik | eta, theta, z   ~ Ga(c + sum_u z_uik,  eta_i + sum_u theta_uk)
    eta_i | beta              ~ Ga(c' + K c,         c'/d' + sum_k beta_ik)

Only the sums of z over items (per user) and over users (per item) enter the Gamma
conditionals, so z is never stored: each unit of each count is allocated to a
component by one categorical draw (inverse CDF), and the allocations are scattered
into the (I, K) and (J, K) sums, chunk by chunk (``UNIT_CHUNK`` units; memory O(T + (I + J) K),
never a (T, K) array). The exposure sums over *all* items (users) are
column sums, O((I + J) K). A sweep costs O(T K + (I + J) K), T = sum of the counts.

Style: `init` / `step` over an `HPFGibbsState` of current draws (BlackJAX-like), the
conditionals as public functions (each also runs as a NumPyro `CustomGibbs` block),
``ALGORITHM`` / ``SPEC`` (the declarations for `custom_inference.mcmc_driver`) and `sample`,
a thin call of that driver that returns `arviz.InferenceData`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from . import arviz_io, base, mcmc_driver
from .chunks import over_chunks
from .data import CountUnits, Observations, check_observations
from .hpf import HPF_DIMS, _check_components, _check_hyper

__all__ = [
    "HPFGibbsState",
    "HPFGibbsInfo",
    "init",
    "allocate",
    "theta_conditional",
    "xi_conditional",
    "beta_conditional",
    "eta_conditional",
    "step",
    "log_joint",
    "sample",
    "ALGORITHM",
    "SPEC",
]


class HPFGibbsState(NamedTuple):
    """Current draws of the HPF Gibbs sampler, a NamedTuple (a JAX pytree).

    Parameters
    ----------
    theta : jax.Array, shape (I, K), float32 or float64
        User weights.
    xi : jax.Array, shape (I,), same dtype
        User activities (the rates of theta's prior).
    beta : jax.Array, shape (J, K), same dtype
        Item weights.
    eta : jax.Array, shape (J,), same dtype
        Item popularities.

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``001_30a2018ec18c20b9.txt``, the HPF model (module docstring).
    """

    theta: jax.Array
    xi: jax.Array
    beta: jax.Array
    eta: jax.Array


class HPFGibbsInfo(NamedTuple):
    """Per-sweep diagnostics of `step`.

    Parameters
    ----------
    log_joint : jax.Array, shape (), the state's float dtype
        log p(y, theta, xi, beta, eta) of the state the sweep *returns*, up to the constant
        -sum log y_ui! (`log_joint`).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    log_joint: jax.Array


def _gamma_draw(key, shape, rate):
    return jax.random.gamma(key, shape, dtype=shape.dtype) / rate


def init(key, data: CountUnits, K: int, hyper, *, dtype=jnp.float64) -> HPFGibbsState:
    """A dispersed starting point near the prior scale.

    theta_uk = (a / b') (0.5 + U), beta_ik = (c / d') (0.5 + U), U ~ Uniform(0, 1);
    xi_u = b' and eta_i = d' (the prior means). Different keys give different starts,
    so R-hat across chains means something.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    data : CountUnits or Observations
        Only ``n_rows`` (I) and ``n_cols`` (J) are read.
    K : int >= 1
        Number of components.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.
    dtype : numpy dtype, keyword-only, default float64
        Float dtype of the state.

    Returns
    -------
    HPFGibbsState
        theta (I, K), xi (I,), beta (J, K), eta (J,) of ``dtype``.

    Raises
    ------
    None of its own (no value checks on K or hyper; `sample` checks them).

    Source: project addition (starting point).
    """
    n_components = K
    k1, k2 = jax.random.split(key)
    n_users, n_items = data.n_rows, data.n_cols
    theta = (hyper.a / hyper.b_prime) * (0.5 + jax.random.uniform(k1, (n_users, n_components), dtype=jnp.float32))
    beta = (hyper.c / hyper.d_prime) * (0.5 + jax.random.uniform(k2, (n_items, n_components), dtype=jnp.float32))
    return HPFGibbsState(
        theta.astype(dtype),
        jnp.full((n_users,), hyper.b_prime, dtype),
        beta.astype(dtype),
        jnp.full((n_items,), hyper.d_prime, dtype),
    )


#: Units per chunk in `allocate` and `log_joint`: their (chunk, K) temporaries stay in cache and
#: no (T, K) array is ever formed (T = 3e8 units at Netflix size would need 60 GB at K = 50).
UNIT_CHUNK = 16384


def _slice(x, start, size):
    return jax.lax.dynamic_slice_in_dim(x, start, size)


def _unit_rates(state: HPFGibbsState, rows, cols):
    """theta_u * beta_i for the given units, shape (len(rows), K)."""
    return state.theta[rows] * state.beta[cols]


def allocate(key, state: HPFGibbsState, data: CountUnits, rates=None, *, chunk: int = UNIT_CHUNK):
    """Draw z | theta, beta, y and return its sums: per user (I, K) and per item (J, K).

    Each of the T units picks component k with probability theta_uk beta_ik / theta_u . beta_i,
    which is exactly z_ui ~ Mult(y_ui, .) (seed 001, eq. aux-cc).

    One uniform per unit is drawn up front, (T,), so the draws do not depend on ``chunk``; the
    per-chunk counts are integers, so their float sums are exact in any order.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    state : HPFGibbsState
        The current draws (shapes in its docstring).
    data : CountUnits
        T units: rows, cols int (T,), weight (T,) (padding units weigh 0).
    rates : jax.Array, shape (T, K), float, optional
        theta_uk beta_ik per unit (computed chunk by chunk when None, so that no (T, K) array is
        formed).
    chunk : int, keyword-only, default `UNIT_CHUNK`
        Units per chunk (static).

    Returns
    -------
    user_counts : jax.Array, shape (I, K), the state's dtype (``rates``' when given)
        sum_i z_uik.
    item_counts : jax.Array, shape (J, K), same dtype
        sum_u z_uik.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, eq. aux-cc.
    """
    dtype = state.theta.dtype if rates is None else rates.dtype
    k = state.theta.shape[1]
    n = data.rows.shape[0]
    uniforms = jax.random.uniform(key, (n,), dtype=dtype)

    def body(start, size, carry):
        user_counts, item_counts = carry
        rows, cols = _slice(data.rows, start, size), _slice(data.cols, start, size)
        r = _unit_rates(state, rows, cols) if rates is None else _slice(rates, start, size)
        cum = jnp.cumsum(r, axis=1)
        u = _slice(uniforms, start, size) * cum[:, -1]
        comp = jnp.minimum(jnp.sum(cum <= u[:, None], axis=1), k - 1)
        w = _slice(data.weight, start, size).astype(dtype)  # padding units add 0
        return user_counts.at[rows * k + comp].add(w), item_counts.at[cols * k + comp].add(w)

    carry = (jnp.zeros(data.n_rows * k, dtype), jnp.zeros(data.n_cols * k, dtype))
    user_counts, item_counts = over_chunks(n, chunk, body, carry)
    return user_counts.reshape(data.n_rows, k), item_counts.reshape(data.n_cols, k)


def theta_conditional(state: HPFGibbsState, user_counts, hyper):
    """(shape, rate), each (I, K), of theta_uk | xi, beta, z: Ga(a + sum_i z_uik, xi_u + sum_i beta_ik).

    Parameters
    ----------
    state : HPFGibbsState
        The current draws (shapes in its docstring).
    user_counts : jax.Array, shape (I, K), float
        sum_i z_uik (from `allocate`).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    shape : jax.Array, shape (I, K), the state's float dtype
        a + sum_i z_uik.
    rate : jax.Array, shape (I, K), same dtype
        xi_u + sum_i beta_ik.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, "Complete conditionals", eq. user-weight-cc.
    """
    return hyper.a + user_counts, state.xi[:, None] + state.beta.sum(axis=0)[None, :]


def xi_conditional(state: HPFGibbsState, hyper):
    """(shape, rate), each (I,), of xi_u | theta: Ga(a' + K a, a'/b' + sum_k theta_uk).

    Parameters
    ----------
    state : HPFGibbsState
        The current draws (shapes in its docstring).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    shape : jax.Array, shape (I,), the state's float dtype
        a' + K a (the same for every user).
    rate : jax.Array, shape (I,), same dtype
        a'/b' + sum_k theta_uk.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, "Complete conditionals", the xi_u conditional (corrected:
    rate a'/b' + sum_k theta_uk; module docstring).
    """
    k = state.theta.shape[1]
    rate = hyper.a_prime / hyper.b_prime + state.theta.sum(axis=1)
    return jnp.full_like(rate, hyper.a_prime + k * hyper.a), rate


def beta_conditional(state: HPFGibbsState, item_counts, hyper):
    """(shape, rate), each (J, K), of beta_ik | eta, theta, z: Ga(c + sum_u z_uik, eta_i + sum_u theta_uk).

    Parameters
    ----------
    state : HPFGibbsState
        The current draws (shapes in its docstring).
    item_counts : jax.Array, shape (J, K), float
        sum_u z_uik (from `allocate`).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    shape : jax.Array, shape (J, K), the state's float dtype
        c + sum_u z_uik.
    rate : jax.Array, shape (J, K), same dtype
        eta_i + sum_u theta_uk.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, "Complete conditionals", eq. item-weight-cc (corrected:
    shape c; module docstring).
    """
    return hyper.c + item_counts, state.eta[:, None] + state.theta.sum(axis=0)[None, :]


def eta_conditional(state: HPFGibbsState, hyper):
    """(shape, rate), each (J,), of eta_i | beta: Ga(c' + K c, c'/d' + sum_k beta_ik).

    Parameters
    ----------
    state : HPFGibbsState
        The current draws (shapes in its docstring).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    shape : jax.Array, shape (J,), the state's float dtype
        c' + K c (the same for every item).
    rate : jax.Array, shape (J,), same dtype
        c'/d' + sum_k beta_ik.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, "Complete conditionals", the eta_i conditional
    (rate c'/d' + sum_k beta_ik).
    """
    k = state.beta.shape[1]
    rate = hyper.c_prime / hyper.d_prime + state.beta.sum(axis=1)
    return jnp.full_like(rate, hyper.c_prime + k * hyper.c), rate


def _gamma_logpdf(x, shape, rate):
    return shape * jnp.log(rate) - gammaln(shape) + (shape - 1.0) * jnp.log(x) - rate * x


def _log_joint_given_y_log_rate(state: HPFGibbsState, y_log_rate, hyper):
    """The log joint given y_log_rate = sum_units weight log(theta_u . beta_i)."""
    log_lik = y_log_rate - jnp.dot(state.theta.sum(axis=0), state.beta.sum(axis=0))
    prior = (
        jnp.sum(_gamma_logpdf(state.xi, hyper.a_prime, hyper.a_prime / hyper.b_prime))
        + jnp.sum(_gamma_logpdf(state.theta, hyper.a, state.xi[:, None]))
        + jnp.sum(_gamma_logpdf(state.eta, hyper.c_prime, hyper.c_prime / hyper.d_prime))
        + jnp.sum(_gamma_logpdf(state.beta, hyper.c, state.eta[:, None]))
    )
    return log_lik + prior


def log_joint(state: HPFGibbsState, data: CountUnits, hyper, *, chunk: int = UNIT_CHUNK) -> jax.Array:
    """log p(y, theta, xi, beta, eta) up to -sum log y_ui! (the Poisson form, z summed out).

    Parameters
    ----------
    state : HPFGibbsState
        theta (I, K), xi (I,), beta (J, K), eta (J,), float.
    data : CountUnits
        T units (rows, cols int (T,), weight (T,)).
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.
    chunk : int, keyword-only, default `UNIT_CHUNK`
        Units per chunk of the O(T K) sum (static; no (T, K) array is formed; the chunked sum
        rounds differently from one sum over all T, at float rounding, when T > chunk).

    Returns
    -------
    jax.Array, shape (), the state's dtype
        The log joint in nats.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``001_30a2018ec18c20b9.txt``, sec. "Variational Inference" (the joint
    p(theta | xi) p(xi) p(beta | eta) p(eta) p(y | theta, beta)), priors as in `ppl_models.hpf`.
    """
    def body(start, size, acc):
        rows, cols = _slice(data.rows, start, size), _slice(data.cols, start, size)
        weight = _slice(data.weight, start, size)
        return acc + jnp.sum(weight * jnp.log(_unit_rates(state, rows, cols).sum(axis=1)))

    n = data.rows.shape[0]
    return _log_joint_given_y_log_rate(state, over_chunks(n, chunk, body, jnp.zeros((), state.theta.dtype)), hyper)


@jax.jit
def step(key, state: HPFGibbsState, data: CountUnits, hyper) -> tuple[HPFGibbsState, HPFGibbsInfo]:
    """One systematic-scan sweep: z, then theta, xi (users), then beta, eta (items).

    Each block is drawn from its complete conditional given the current values of all
    others (z stays fixed within the sweep), so the sweep leaves the posterior invariant.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    state : HPFGibbsState
        The current draws (shapes in its docstring).
    data : CountUnits
        T units of the counts.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters: float fields a, a_prime, b_prime, c, c_prime, d_prime.

    Returns
    -------
    state : HPFGibbsState
        The new state.
    info : HPFGibbsInfo
        The log joint of the new state; it costs one more O(T K) pass (`mcmc_driver` does not read
        it, and XLA drops it there).

    Raises
    ------
    None of its own (jitted; no value checks).

    Source: seed 001, complete conditionals (corrected, see the module docstring).
    """
    k_z, k_theta, k_xi, k_beta, k_eta = jax.random.split(key, 5)
    user_counts, item_counts = allocate(k_z, state, data)
    state = state._replace(theta=_gamma_draw(k_theta, *theta_conditional(state, user_counts, hyper)))
    state = state._replace(xi=_gamma_draw(k_xi, *xi_conditional(state, hyper)))
    state = state._replace(beta=_gamma_draw(k_beta, *beta_conditional(state, item_counts, hyper)))
    state = state._replace(eta=_gamma_draw(k_eta, *eta_conditional(state, hyper)))
    return state, HPFGibbsInfo(log_joint(state, data, hyper))


def _prepare(data, dtype):
    units = data if isinstance(data, CountUnits) else CountUnits.from_observations(data)
    return jax.tree_util.tree_map(jnp.asarray, units)


def _predict(state: HPFGibbsState, data, at):
    rows, cols = at
    return jnp.sum(state.theta[rows] * state.beta[cols], axis=1)


_SOURCE = "001_30a2018ec18c20b9.txt, complete conditionals (corrected)"

ALGORITHM = base.Algorithm(
    name="hpf-gibbs", kind="mcmc", init=init, step=step, target=log_joint, target_name="log_joint",
    dims={k: tuple(v) for k, v in HPF_DIMS.items() if k in HPFGibbsState._fields}, source=_SOURCE,
).check()

SPEC = mcmc_driver.SamplerSpec(
    algorithm=ALGORITHM, model="hpf", method="gibbs", variables=HPFGibbsState._fields, prepare=_prepare,
    sizes=lambda data: (data.n_rows, data.n_cols, data.nnz),
    coords=lambda data, K: {"user": np.arange(data.n_rows), "item": np.arange(data.n_cols), "component": np.arange(K)},
    predict=_predict, predict_prepare=mcmc_driver.prepare_cells,
)


@mcmc_driver.run_options()
def sample(
    key,
    data: Observations,
    K: int,
    hyper,
    *,
    options: mcmc_driver.SampleOptions,
) -> "arviz_io.InferenceData":
    """Run ``num_chains`` HPF Gibbs chains through `custom_inference.mcmc_driver` and return the draws.

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed; the same key gives the same draws.
    data : Observations, shape (I, J)
        Non-negative integer counts, N entries.
    K : int >= 1
        Number of components.
    hyper : ppl_models.hpf.HPFHyper or object
        HPF hyperparameters (positive float fields a, a_prime, b_prime, c, c_prime, d_prime).
    num_chains : int >= 1, keyword-only, default 4
        Independent chains (each from its own key).
    num_warmup : int >= 0, keyword-only, default 500
        Warm-up sweeps per chain, discarded (rounded up to a multiple of ``thin``).
    num_samples : int >= 1, keyword-only, default 1000
        Kept draws per chain.
    thin : int >= 1, keyword-only, default 1
        Sweeps per kept draw.
    keep : sequence of str, keyword-only, optional
        Names to store per draw: theta, xi, beta, eta (default all; theta and beta cost I K and
        J K per draw) and ``"pred"`` (with ``predict_at``).
    predict_at : tuple (rows, cols) of int arrays, shape (M,) each, keyword-only, optional
        Cells at which the running posterior mean and sd of the rate theta_u . beta_i are kept
        (``predictions`` group).
    dtype : numpy.float32 or numpy.float64, keyword-only, optional
        Float dtype of the state (None: float64).
    progress : bool, keyword-only, default True
        Show a tqdm bar.
    checkpoint : str or path-like, keyword-only, optional
        A ``.npz`` checkpoint written every ``checkpoint_every`` blocks and at the end (None: none).
    checkpoint_every : int >= 1, keyword-only, default 10
        Blocks between checkpoints.
    resume : bool, keyword-only, default False
        Continue from ``checkpoint`` when the file exists (the same draws as the uninterrupted run).
    block : int >= 1, keyword-only, optional
        Sweeps per compiled block (None: about min(50, total sweeps / 4), `mcmc_driver.sample`);
        the draws do not depend on it.
    callback : callable, keyword-only, optional
        Called after each block (after its checkpoint) with ``(sweeps done, states)``
        (`mcmc_driver.sample`); an exception raised there stops the run.
    options : mcmc_driver.SampleOptions, keyword-only, optional
        The same run options as one object (`mcmc_driver.run_options`); keywords given beside it
        override its fields.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` with the kept variables, dims (chain, draw, user|item [, component]);
        ``sample_stats.lp`` (log joint up to -sum log y_ui!); attrs of `mcmc_driver` (settings,
        hyper_*, seconds_per_sweep with compilation excluded).

    Raises
    ------
    ValueError
        K < 1; bad chain or draw counts; unknown names in ``keep``; data that are not counts (an
        index out of range, a NaN, negative or non-integer value, duplicates, no entries:
        `Observations.validate`, before any compilation); bad hyperparameters; ``predict_at`` out
        of range; a checkpoint of other settings, of another run or damaged; ``resume`` without
        ``checkpoint``.
    TypeError
        ``data`` not an Observations, non-integer indices or non-numeric values; a bad key; an
        unknown keyword.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`mcmc_driver.sample`).

    Source: seed 001 (conditionals); the driver is a project addition.
    """
    check_observations(data, "count", name="data")
    _check_hyper(hyper)
    k = _check_components(K)
    return mcmc_driver.sample(
        SPEC, key, data, k, hyper, options=options,
    )
