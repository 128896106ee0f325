r"""Bayesian probabilistic matrix factorization (BPMF) as a NumPyro program.

Source: ``004_90693a0965f06816.txt``, section 2.2.3, eqs. (2.9) and (2.12)-(2.15) (lines
~370-392), which restate Salakhutdinov & Mnih, "Bayesian Probabilistic Matrix Factorization
using Markov Chain Monte Carlo", ICML 2008, eqs. (1), (5)-(7). The thesis calls the
observation precision tau (eq. 2.9); the ICML paper calls it alpha. We use ``alpha``.

    Lambda_U ~ W(W0, nu0)                                   eq. (2.14), Wishart part
    mu_U | Lambda_U ~ N(mu0, (beta0 Lambda_U)^-1)            eq. (2.14), Gaussian part
    u_i | mu_U, Lambda_U ~ N(mu_U, Lambda_U^-1)              eq. (2.12), i = 1..I
    (the same for Lambda_V, mu_V, v_j)                       eqs. (2.15), (2.13), j = 1..J
    r_ij | u_i, v_j ~ N(u_i . v_j, alpha^-1), (i, j) in Omega eq. (2.9)

W(Lambda | W, nu) is the Wishart with E[Lambda] = nu W (Bishop 2006, B.78; NumPyro's
``dist.Wishart(concentration=nu, scale_matrix=W)``). Both factor matrices share the
hyperprior (mu0, beta0, W0, nu0), as in the paper. Only the observed cells enter the
likelihood; the program never builds an I x J array.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["BPMFHyper", "resolve_hyper", "model", "simulate", "predicted_means"]


class BPMFHyper(NamedTuple):
    """BPMF hyperparameters, named as in Salakhutdinov & Mnih (2008).

    Defaults are the paper's (ICML 2008, section 5.1: "mu0 = 0, nu0 = D, W0 = identity";
    beta0 = 2 and the observation precision alpha = 2 as in the authors' released Matlab
    code ``bayespmf.m``). The thesis prints no values ("standard parameter setting as
    provided in the paper", line ~710).

    Parameters
    ----------
    alpha : float > 0, default 2.0
        Observation precision (fixed, not sampled): r_ij ~ N(u_i . v_j, 1/alpha), in inverse rating units squared.
    mu0 : float or numpy.ndarray, shape (K,), float, default 0.0
        Hyperprior mean of mu_U and mu_V: a scalar (times the ones vector) or a (K,) vector.
    beta0 : float > 0, default 2.0
        Hyperprior precision scale of mu given Lambda: mu ~ N(mu0, (beta0 Lambda)^-1).
    nu0 : float > K - 1, optional
        Wishart degrees of freedom; None means K (the paper's nu0 = D).
    W0 : float or numpy.ndarray, shape (K, K), float, default 1.0
        Wishart scale matrix: a positive scalar s (meaning s * identity) or a (K, K) symmetric positive
        definite matrix.

    Raises
    ------
    None of its own (a NamedTuple: the fields are checked by `resolve_hyper`).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.9), (2.14)-(2.15) (the symbols); defaults: project addition
    (from the ICML 2008 paper and its released code).
    """

    alpha: float = 2.0
    """Observation precision (fixed, not sampled): r_ij ~ N(u_i . v_j, 1/alpha)."""
    mu0: Union[float, np.ndarray] = 0.0
    """Hyperprior mean of mu_U and mu_V: a scalar (times the ones vector) or a (K,) vector."""
    beta0: float = 2.0
    """Hyperprior precision scale of mu given Lambda: mu ~ N(mu0, (beta0 Lambda)^-1)."""
    nu0: Optional[float] = None
    """Wishart degrees of freedom, > K - 1; None means K (the paper's nu0 = D)."""
    W0: Union[float, np.ndarray] = 1.0
    """Wishart scale matrix: a positive scalar s (meaning s * identity) or a (K, K) SPD matrix."""


def resolve_hyper(hyper: BPMFHyper, n_components: int, dtype=jnp.float64) -> BPMFHyper:
    """``hyper`` with ``mu0`` as a (K,) array, ``nu0`` a number and ``W0`` a (K, K) array.

    Parameters
    ----------
    hyper : BPMFHyper
        The hyperparameters as given by the user (scalars or arrays, ``nu0`` possibly None).
    n_components : int >= 1
        K, the number of latent components.
    dtype : jax.numpy dtype, default jax.numpy.float64
        Float dtype of the returned ``mu0`` and ``W0`` arrays.

    Returns
    -------
    BPMFHyper
        alpha, beta0, nu0 Python floats; mu0 a jax.Array, shape (K,), and W0 a jax.Array, shape (K, K), both of
        ``dtype``.

    Raises
    ------
    ValueError
        alpha or beta0 not positive; nu0 <= K - 1; W0 a non-positive scalar, of the wrong
        shape or not symmetric positive definite; mu0 of the wrong shape.

    Source: ``004_90693a0965f06816.txt`` eqs. (2.14)-(2.15) (the Gaussian-Wishart hyperprior);
    defaults and checks: project addition.
    """
    k = int(n_components)
    if not float(hyper.alpha) > 0:
        raise ValueError(f"alpha must be > 0, got {hyper.alpha!r}")
    if not float(hyper.beta0) > 0:
        raise ValueError(f"beta0 must be > 0, got {hyper.beta0!r}")
    nu0 = float(k if hyper.nu0 is None else hyper.nu0)
    if not nu0 > k - 1:
        raise ValueError(f"nu0 must be > K - 1 = {k - 1}, got {nu0!r}")
    w0 = np.asarray(hyper.W0, dtype=np.float64)
    if w0.ndim == 0:
        if not w0 > 0:
            raise ValueError(f"W0 as a scalar must be > 0, got {hyper.W0!r}")
        w0 = float(w0) * np.eye(k)
    if w0.shape != (k, k):
        raise ValueError(f"W0 must be a scalar or a ({k}, {k}) matrix, got shape {w0.shape}")
    if not np.allclose(w0, w0.T) or np.any(np.linalg.eigvalsh(w0) <= 0):
        raise ValueError("W0 must be symmetric positive definite")
    mu0 = np.broadcast_to(np.asarray(hyper.mu0, dtype=np.float64), (k,)) if np.ndim(hyper.mu0) == 0 else np.asarray(hyper.mu0, np.float64)
    if mu0.shape != (k,):
        raise ValueError(f"mu0 must be a scalar or a ({k},) vector, got shape {mu0.shape}")
    return BPMFHyper(float(hyper.alpha), jnp.asarray(mu0, dtype), float(hyper.beta0), nu0, jnp.asarray(w0, dtype))


def _factor_prior(name: str, n: int, k: int, hyper: BPMFHyper):
    # eq. (2.14)/(2.15): Lambda ~ W(W0, nu0), mu | Lambda ~ N(mu0, (beta0 Lambda)^-1)
    lam = numpyro.sample(f"Lambda_{name}", dist.Wishart(hyper.nu0, scale_matrix=hyper.W0))
    mu = numpyro.sample(f"mu_{name}", dist.MultivariateNormal(hyper.mu0, precision_matrix=hyper.beta0 * lam))
    # eq. (2.12)/(2.13): x_n ~ N(mu, Lambda^-1), n = 1..n
    with numpyro.plate(f"{name}_rows", n):
        return numpyro.sample(name, dist.MultivariateNormal(mu, precision_matrix=lam))


def model(rows, cols, values, n_rows: int, n_cols: int, n_components: int, hyper: BPMFHyper = BPMFHyper()):
    """NumPyro program of BPMF over the observed cells.

    Parameters
    ----------
    rows, cols : jax.Array or numpy.ndarray, shape (N,), int
        Row (user) and column (item) index of each observed cell.
    values : jax.Array, shape (N,), float, or None
        The observed ratings; None draws them from the prior predictive.
    n_rows, n_cols, n_components : int
        I, J, K (static Python ints).
    hyper : BPMFHyper, default BPMFHyper()
        Hyperparameters (resolved by `resolve_hyper` inside).

    Returns
    -------
    None
        A NumPyro program: its sites are ``Lambda_U`` (K, K), ``mu_U`` (K,), ``U`` (I, K), ``Lambda_V``
        (K, K), ``mu_V`` (K,), ``V`` (J, K) and the observed ``r`` (N,), all float.

    Raises
    ------
    ValueError
        From `resolve_hyper`, for bad hyperparameters.

    Source: ``004_90693a0965f06816.txt`` eqs. (2.9), (2.12)-(2.15).
    """
    h = resolve_hyper(hyper, n_components)
    U = _factor_prior("U", n_rows, n_components, h)
    V = _factor_prior("V", n_cols, n_components, h)
    mean = jnp.sum(U[rows] * V[cols], axis=-1)  # u_i . v_j on the observed cells only
    with numpyro.plate("observed", rows.shape[0]):
        numpyro.sample("r", dist.Normal(mean, 1.0 / jnp.sqrt(h.alpha)), obs=values)  # eq. (2.9)


def simulate(key, n_rows: int, n_cols: int, n_components: int, hyper: BPMFHyper = BPMFHyper(), n_obs: int = None):
    """Draw parameters from the prior and ratings on ``n_obs`` distinct random cells.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    n_rows, n_cols, n_components : int >= 1
        I, J, K.
    hyper : BPMFHyper, default BPMFHyper()
        Hyperparameters.
    n_obs : int in [1, I J], optional
        Number of observed cells; default all I J cells. The cells are drawn uniformly
        without replacement (a permutation of I J cell ids: for small simulations only).

    Returns
    -------
    truth : dict of str to jax.Array, float
        ``Lambda_U`` (K, K), ``mu_U`` (K,), ``U`` (I, K), and the same for V.
    rows, cols : jax.Array, shape (N,), int32
        The cells, sorted row-major.
    values : jax.Array, shape (N,), float
        The ratings drawn at the cells.

    Raises
    ------
    ValueError
        A size < 1 or n_obs outside [1, I J]; bad hyperparameters (`resolve_hyper`).

    Source: ``004_90693a0965f06816.txt`` eqs. (2.9), (2.12)-(2.15) (prior predictive of `model`).
    """
    for name, value in (("n_rows", n_rows), ("n_cols", n_cols), ("n_components", n_components)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    n_obs = n_rows * n_cols if n_obs is None else n_obs
    if int(n_obs) != n_obs or not 1 <= n_obs <= n_rows * n_cols:
        raise ValueError(f"n_obs must be an integer in [1, {n_rows * n_cols}], got {n_obs!r}")
    k_cells, k_model = jax.random.split(key)
    cells = jnp.sort(jax.random.choice(k_cells, n_rows * n_cols, (int(n_obs),), replace=False))
    rows, cols = (cells // n_cols).astype(jnp.int32), (cells % n_cols).astype(jnp.int32)
    trace = numpyro.handlers.trace(numpyro.handlers.seed(model, k_model)).get_trace(
        rows, cols, None, n_rows, n_cols, n_components, hyper
    )
    truth = {n: trace[n]["value"] for n in ("Lambda_U", "mu_U", "U", "Lambda_V", "mu_V", "V")}
    return truth, rows, cols, trace["r"]["value"]


def predicted_means(U, V, rows, cols):
    """u_i . v_j at the given cells.

    Parameters
    ----------
    U : jax.Array, shape (..., I, K), float
        User factors (leading axes, e.g. chains and draws, broadcast).
    V : jax.Array, shape (..., J, K), float
        Item factors.
    rows, cols : jax.Array, shape (N,), int
        Row and column index of each cell.

    Returns
    -------
    jax.Array, shape (..., N), float
        The predicted mean rating of each cell, in the dtype of ``U`` and ``V``.

    Raises
    ------
    None of its own (no index checks).

    Source: ``004_90693a0965f06816.txt`` eq. (2.9) (the mean of a rating; averaged over draws it is
    eq. (2.16)).
    """
    return jnp.sum(U[..., rows, :] * V[..., cols, :], axis=-1)
