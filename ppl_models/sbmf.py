r"""Scalable Bayesian matrix factorization (SBMF) as a PyMC program.

Source: ``004_90693a0965f06816.txt``, chapter 3, eqs. (3.1)-(3.13). Precisions, not
variances, are the second parameter of every normal, as in the thesis
(``N(x | m, s^-1)``); all Gammas are shape/rate.

    mu                   ~ N(mu_g, 1 / sigma_g)                               (3.3)
    sigma_alpha          ~ Gamma(alpha0, beta0)                               (3.9)
    mu_alpha | sigma_a   ~ N(mu0, 1 / (nu0 sigma_alpha))                      (3.9)
    alpha_i              ~ N(mu_alpha, 1 / sigma_alpha)          i = 1..I     (3.4)
    (sigma_beta, mu_beta, beta_j likewise, j = 1..J)                          (3.10), (3.5)
    (sigma_uk, mu_uk) ~ NG(mu0, nu0, alpha0, beta0),  u_ik ~ N(mu_uk, 1/sigma_uk)   (3.11), (3.6)
    (sigma_vk, mu_vk) ~ NG(mu0, nu0, alpha0, beta0),  v_jk ~ N(mu_vk, 1/sigma_vk)   (3.12), (3.7)
    tau                  ~ Gamma(a0, b0)                                      (3.8)
    r_ij                 ~ N(mu + alpha_i + beta_j + u_i . v_j, 1 / tau)  (i,j) in Omega   (3.1), (3.2)

The normal-gamma NG(mu0, nu0, alpha0, beta0) is written as its two factors: the
precision ~ Gamma(alpha0, beta0) and the mean given the precision ~ N(mu0, (nu0 precision)^-1).

`numpyro_model` is the same program in NumPyro, site for site (same names, shapes and
densities), so that the Gibbs blocks of `custom_inference.sbmf` can run as NumPyro
``CustomGibbs`` blocks beside NUTS (`validation.checks.bridge`); its log density equals the PyMC
model's at random points (``tests/ppl_models/test_sbmf_numpyro.py``). Only the observed entries (COO triplets) enter the likelihood, so the program never
builds an I x J array. Intended for NUTS on small problems (it is centred, as printed;
factor coordinates are identified only up to rotation and sign, so compare predictions).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["SBMFHyper", "model", "numpyro_model", "simulate", "log_joint", "predicted_mean"]


class SBMFHyper(NamedTuple):
    """SBMF hyperparameters Theta_0 (thesis eq. 3.13), named as printed.

    Defaults are the thesis's own settings, sec. 3.3.2: "a_0, b_0, nu_0, alpha_0 and
    beta_0 are set to one, and mu_0 and mu_g are set to zero. sigma_g is initialized to
    0.01". sigma_g is a precision in eq. (3.3), so the global bias has prior sd 10: weakly
    informative for ratings on a 1-5 scale. Gamma(1, 1) on tau and on every precision is
    an exponential prior with mean 1.

    Parameters
    ----------
    mu_g : float, default 0.0
        Prior mean of the global bias mu (eq. 3.3).
    sigma_g : float > 0, default 0.01
        Prior precision of mu (eq. 3.3).
    a0 : float > 0, default 1.0
        Shape of the Gamma prior on the noise precision tau (eq. 3.8).
    b0 : float > 0, default 1.0
        Rate of the Gamma prior on tau (eq. 3.8).
    mu0 : float, default 0.0
        Normal-gamma location of every hyper mean mu_alpha, mu_beta, mu_uk, mu_vk (eqs. 3.9-3.12).
    nu0 : float > 0, default 1.0
        Normal-gamma pseudo-count: the hyper mean has precision nu0 times its precision.
    alpha0 : float > 0, default 1.0
        Normal-gamma shape of every hyper precision sigma_alpha, sigma_beta, sigma_uk, sigma_vk.
    beta0 : float > 0, default 1.0
        Normal-gamma rate of every hyper precision.

    Raises
    ------
    None of its own (a NamedTuple; `check_hyper` checks the values).

    Source: ``004_90693a0965f06816.txt`` eqs. (3.3), (3.8)-(3.13), sec. 3.3.2 (defaults).
    """

    mu_g: float = 0.0
    """Prior mean of the global bias mu (eq. 3.3)."""
    sigma_g: float = 0.01
    """Prior precision of mu (eq. 3.3)."""
    a0: float = 1.0
    """Shape of the Gamma prior on the noise precision tau (eq. 3.8)."""
    b0: float = 1.0
    """Rate of the Gamma prior on tau (eq. 3.8)."""
    mu0: float = 0.0
    """Normal-gamma location of every hyper mean mu_alpha, mu_beta, mu_uk, mu_vk (eqs. 3.9-3.12)."""
    nu0: float = 1.0
    """Normal-gamma pseudo-count: the hyper mean has precision nu0 times its precision."""
    alpha0: float = 1.0
    """Normal-gamma shape of every hyper precision sigma_alpha, sigma_beta, sigma_uk, sigma_vk."""
    beta0: float = 1.0
    """Normal-gamma rate of every hyper precision."""


def check_hyper(hyper: SBMFHyper) -> None:
    """Raise ValueError naming the field if a precision/shape/rate is not a positive finite number."""
    for name in SBMFHyper._fields:
        value = getattr(hyper, name)
        if not np.isfinite(value):
            raise ValueError(f"hyper.{name} must be finite, got {value!r}")
    for name in ("sigma_g", "a0", "b0", "nu0", "alpha0", "beta0"):
        if not getattr(hyper, name) > 0:
            raise ValueError(f"hyper.{name} must be > 0, got {getattr(hyper, name)!r}")


def _check_coo(rows, cols, values, n_rows, n_cols):
    rows, cols, values = np.asarray(rows), np.asarray(cols), np.asarray(values, dtype=np.float64)
    if not (rows.ndim == cols.ndim == values.ndim == 1 and rows.size == cols.size == values.size):
        raise ValueError(f"rows, cols, values must be 1-D of one length, got {rows.shape}, {cols.shape}, {values.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"rows index out of range [0, {n_rows - 1}]")
    if cols.size and (cols.min() < 0 or cols.max() >= n_cols):
        raise ValueError(f"cols index out of range [0, {n_cols - 1}]")
    if not np.all(np.isfinite(values)):
        raise ValueError("values contain NaN or infinite entries")
    return rows.astype(np.int64), cols.astype(np.int64), values


def model(rows, cols, values, n_rows: int, n_cols: int, K: int, hyper: SBMFHyper = SBMFHyper()):
    """The SBMF generative program (eqs. 3.1-3.12, in order) as a `pymc.Model`.

    Parameters
    ----------
    rows, cols : array_like, shape (N,), int
        Observed cells (i, j) in Omega, 0-based.
    values : array_like, shape (N,), float
        The ratings r_ij (finite).
    n_rows, n_cols : int
        I and J.
    K : int >= 1
        Latent dimension.
    hyper : SBMFHyper, default SBMFHyper()
        Hyperparameters Theta_0.

    Returns
    -------
    pymc.Model
        Free variables ``mu`` (), ``sigma_alpha``, ``mu_alpha``, ``alpha`` (I,), ``sigma_beta``,
        ``mu_beta``, ``beta`` (J,), ``sigma_u`` (K,), ``mu_u`` (K,), ``U`` (I, K), ``sigma_v`` (K,),
        ``mu_v`` (K,), ``V`` (J, K), ``tau`` (), and the observed ``r`` (N,); float64.

    Raises
    ------
    ValueError
        K < 1 or not an integer, bad hyperparameters, indices out of range, non-finite values, arrays
        not 1-D of one length.

    Source: ``004_90693a0965f06816.txt`` eqs. (3.1)-(3.12).
    """
    import pymc as pm

    if int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    check_hyper(hyper)
    rows, cols, values = _check_coo(rows, cols, values, n_rows, n_cols)
    h = hyper
    coords = {"user": np.arange(n_rows), "item": np.arange(n_cols), "component": np.arange(K), "obs": np.arange(values.size)}
    with pm.Model(coords=coords) as m:
        mu = pm.Normal("mu", h.mu_g, sigma=1.0 / np.sqrt(h.sigma_g))                              # (3.3)
        sigma_alpha = pm.Gamma("sigma_alpha", alpha=h.alpha0, beta=h.beta0)                        # (3.9)
        mu_alpha = pm.Normal("mu_alpha", h.mu0, tau=h.nu0 * sigma_alpha)                           # (3.9)
        alpha = pm.Normal("alpha", mu_alpha, tau=sigma_alpha, dims="user")                         # (3.4)
        sigma_beta = pm.Gamma("sigma_beta", alpha=h.alpha0, beta=h.beta0)                          # (3.10)
        mu_beta = pm.Normal("mu_beta", h.mu0, tau=h.nu0 * sigma_beta)                              # (3.10)
        beta = pm.Normal("beta", mu_beta, tau=sigma_beta, dims="item")                             # (3.5)
        sigma_u = pm.Gamma("sigma_u", alpha=h.alpha0, beta=h.beta0, dims="component")              # (3.11)
        mu_u = pm.Normal("mu_u", h.mu0, tau=h.nu0 * sigma_u, dims="component")                     # (3.11)
        U = pm.Normal("U", mu_u, tau=sigma_u, dims=("user", "component"))                          # (3.6)
        sigma_v = pm.Gamma("sigma_v", alpha=h.alpha0, beta=h.beta0, dims="component")              # (3.12)
        mu_v = pm.Normal("mu_v", h.mu0, tau=h.nu0 * sigma_v, dims="component")                     # (3.12)
        V = pm.Normal("V", mu_v, tau=sigma_v, dims=("item", "component"))                          # (3.7)
        tau = pm.Gamma("tau", alpha=h.a0, beta=h.b0)                                               # (3.8)
        mean = mu + alpha[rows] + beta[cols] + (U[rows] * V[cols]).sum(axis=1)
        pm.Normal("r", mean, tau=tau, observed=values, dims="obs")                                 # (3.1), (3.2)
    return m


def numpyro_model(rows, cols, values, n_rows: int, n_cols: int, K: int, hyper: SBMFHyper = SBMFHyper()):
    """The SBMF generative program (eqs. 3.1-3.12, in order) as a NumPyro model: the twin of `model`.

    Why a twin rather than a PyMC compound step: the bridge runs each Gibbs block of
    `custom_inference.sbmf` as a NumPyro ``CustomGibbs`` block with NUTS on the other sites
    (`validation.checks.bridge`), the same machinery as for every other sampler; PyMC's compound steps
    would need a PyMC step method per block and a second comparison path. The twin is held
    to the PyMC program by a test: equal log densities (constants included, no Jacobians) at
    random points of the parameter space.

    Parameters
    ----------
    rows, cols : jax.Array, shape (N,), int
        Observed cells (i, j), 0-based (not checked: traced code).
    values : jax.Array, shape (N,), float, or None
        The ratings; None draws them from the prior predictive.
    n_rows, n_cols : int
        I and J.
    K : int >= 1
        Latent dimension.
    hyper : SBMFHyper, default SBMFHyper()
        Hyperparameters.

    Returns
    -------
    None
        A NumPyro program whose sites are the PyMC model's free variables, same names and shapes:
        ``mu`` (), ``sigma_alpha``, ``mu_alpha`` (), ``alpha`` (I,), ``sigma_beta``, ``mu_beta`` (),
        ``beta`` (J,), ``sigma_u``, ``mu_u`` (K,), ``U`` (I, K), ``sigma_v``, ``mu_v`` (K,), ``V`` (J, K),
        ``tau`` (), and ``r`` (N,); float.

    Raises
    ------
    None of its own (bad hyperparameters give NaN densities; validate with `check_hyper`).

    Source: ``004_90693a0965f06816.txt`` eqs. (3.1)-(3.12); the NumPyro form is a project addition.
    """
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    h = hyper
    sd = lambda prec: 1.0 / jnp.sqrt(prec)  # noqa: E731 (the thesis writes precisions)
    mu = numpyro.sample("mu", dist.Normal(h.mu_g, sd(h.sigma_g)))                                 # (3.3)
    sigma_alpha = numpyro.sample("sigma_alpha", dist.Gamma(h.alpha0, h.beta0))                    # (3.9)
    mu_alpha = numpyro.sample("mu_alpha", dist.Normal(h.mu0, sd(h.nu0 * sigma_alpha)))            # (3.9)
    with numpyro.plate("user", n_rows):
        alpha = numpyro.sample("alpha", dist.Normal(mu_alpha, sd(sigma_alpha)))                   # (3.4)
    sigma_beta = numpyro.sample("sigma_beta", dist.Gamma(h.alpha0, h.beta0))                      # (3.10)
    mu_beta = numpyro.sample("mu_beta", dist.Normal(h.mu0, sd(h.nu0 * sigma_beta)))               # (3.10)
    with numpyro.plate("item", n_cols):
        beta = numpyro.sample("beta", dist.Normal(mu_beta, sd(sigma_beta)))                       # (3.5)
    with numpyro.plate("component_u", K):
        sigma_u = numpyro.sample("sigma_u", dist.Gamma(h.alpha0, h.beta0))                        # (3.11)
        mu_u = numpyro.sample("mu_u", dist.Normal(h.mu0, sd(h.nu0 * sigma_u)))                    # (3.11)
    with numpyro.plate("user_u", n_rows, dim=-2), numpyro.plate("factor_u", K, dim=-1):
        U = numpyro.sample("U", dist.Normal(mu_u, sd(sigma_u)))                                   # (3.6)
    with numpyro.plate("component_v", K):
        sigma_v = numpyro.sample("sigma_v", dist.Gamma(h.alpha0, h.beta0))                        # (3.12)
        mu_v = numpyro.sample("mu_v", dist.Normal(h.mu0, sd(h.nu0 * sigma_v)))                    # (3.12)
    with numpyro.plate("item_v", n_cols, dim=-2), numpyro.plate("factor_v", K, dim=-1):
        V = numpyro.sample("V", dist.Normal(mu_v, sd(sigma_v)))                                   # (3.7)
    tau = numpyro.sample("tau", dist.Gamma(h.a0, h.b0))                                           # (3.8)
    mean = mu + alpha[rows] + beta[cols] + jnp.sum(U[rows] * V[cols], axis=-1)
    with numpyro.plate("obs", rows.shape[0]):
        numpyro.sample("r", dist.Normal(mean, sd(tau)), obs=values)                               # (3.1), (3.2)


def _draw_cells(rng: np.random.Generator, n_rows: int, n_cols: int, n_obs: int):
    """n_obs distinct cells; every row and column at least once when n_obs >= max(I, J)."""
    if n_obs > n_rows * n_cols:
        raise ValueError(f"n_obs = {n_obs} exceeds the number of cells I J = {n_rows * n_cols}")
    chosen = set()
    if n_obs >= max(n_rows, n_cols):
        # a random "diagonal" covering every row and column: max(I, J) cells
        m = max(n_rows, n_cols)
        r = rng.permutation(np.resize(rng.permutation(n_rows), m))
        c = np.resize(rng.permutation(n_cols), m)
        chosen.update(zip(r.tolist(), c.tolist()))
    need = n_obs - len(chosen)
    if need > 0:
        rest = np.setdiff1d(np.arange(n_rows * n_cols), [i * n_cols + j for i, j in chosen])
        extra = rng.choice(rest, size=need, replace=False)
        chosen.update(zip((extra // n_cols).tolist(), (extra % n_cols).tolist()))
    cells = np.array(sorted(chosen), dtype=np.int64).reshape(-1, 2)
    return cells[:, 0], cells[:, 1]


def simulate(seed_or_key, n_rows: int, n_cols: int, K: int, hyper: SBMFHyper = SBMFHyper(), n_obs: int | None = None):
    """Draw every parameter from the prior and ratings at ``n_obs`` distinct random cells.

    Parameters
    ----------
    seed_or_key : int, numpy.random.Generator or jax.Array
        An int seed, a numpy Generator, or a JAX PRNG key (its raw bits seed numpy).
    n_rows, n_cols, K : int >= 1
        I, J, K.
    hyper : SBMFHyper, default SBMFHyper()
        Hyperparameters Theta_0.
    n_obs : int in [1, I J], optional
        Number of cells, default ``min(I J, 4 max(I, J))``. Every row and column is observed at least
        once when n_obs >= max(I, J).

    Returns
    -------
    truth : dict of str to numpy.ndarray, float64
        The program's variables (``mu``, ``alpha`` (I,), ``U`` (I, K), ``tau``, ...).
    rows, cols : numpy.ndarray, shape (N,), int64
        The cells, sorted row-major.
    values : numpy.ndarray, shape (N,), float64
        The ratings.

    Raises
    ------
    ValueError
        Sizes < 1 or not integers, n_obs < 1 or > I J, bad hyperparameters.

    Source: ``004_90693a0965f06816.txt`` eqs. (3.1)-(3.12) (prior predictive of `model`); the
    choice of cells is a project addition.
    """
    for name, v in (("n_rows", n_rows), ("n_cols", n_cols), ("K", K)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    check_hyper(hyper)
    if n_obs is None:
        n_obs = min(n_rows * n_cols, 4 * max(n_rows, n_cols))
    if int(n_obs) != n_obs or n_obs < 1:
        raise ValueError(f"n_obs must be an integer >= 1, got {n_obs!r}")
    if isinstance(seed_or_key, np.random.Generator):
        rng = seed_or_key
    elif isinstance(seed_or_key, (int, np.integer)):
        rng = np.random.default_rng(int(seed_or_key))
    else:  # a jax key: use its raw bits
        import jax

        try:
            bits = jax.random.key_data(seed_or_key)
        except TypeError:
            bits = seed_or_key
        rng = np.random.default_rng(np.asarray(bits, dtype=np.uint32).ravel().tolist())
    h = hyper

    def ng(size):
        prec = rng.gamma(h.alpha0, 1.0 / h.beta0, size=size)
        return rng.normal(h.mu0, 1.0 / np.sqrt(h.nu0 * prec)), prec

    t = {}
    t["mu"] = np.float64(rng.normal(h.mu_g, 1.0 / np.sqrt(h.sigma_g)))
    t["mu_alpha"], t["sigma_alpha"] = ng(None)
    t["alpha"] = rng.normal(t["mu_alpha"], 1.0 / np.sqrt(t["sigma_alpha"]), size=n_rows)
    t["mu_beta"], t["sigma_beta"] = ng(None)
    t["beta"] = rng.normal(t["mu_beta"], 1.0 / np.sqrt(t["sigma_beta"]), size=n_cols)
    t["mu_u"], t["sigma_u"] = ng(K)
    t["U"] = rng.normal(t["mu_u"], 1.0 / np.sqrt(t["sigma_u"]), size=(n_rows, K))
    t["mu_v"], t["sigma_v"] = ng(K)
    t["V"] = rng.normal(t["mu_v"], 1.0 / np.sqrt(t["sigma_v"]), size=(n_cols, K))
    t["tau"] = np.float64(rng.gamma(h.a0, 1.0 / h.b0))
    rows, cols = _draw_cells(rng, n_rows, n_cols, int(n_obs))
    mean = predicted_mean(t, rows, cols)
    values = rng.normal(mean, 1.0 / np.sqrt(t["tau"]))
    truth = {k: np.asarray(v, dtype=np.float64) for k, v in t.items()}
    return truth, rows, cols, values.astype(np.float64)


def predicted_mean(params, rows, cols) -> np.ndarray:
    """mu + alpha_i + beta_j + u_i . v_j at the cells (rows, cols), in NumPy.

    Parameters
    ----------
    params : mapping of str to array_like, float
        ``mu`` (...), ``alpha`` (..., I), ``beta`` (..., J), ``U`` (..., I, K), ``V`` (..., J, K);
        leading sample axes allowed.
    rows, cols : array_like, shape (N,), int
        The cells.

    Returns
    -------
    numpy.ndarray, shape (..., N), float
        The mean rating of each cell (float64 or the parameters' dtype).

    Raises
    ------
    None of its own; a missing name raises KeyError, an index out of range IndexError.

    Source: ``004_90693a0965f06816.txt`` eq. (3.2) (the mean of a rating).
    """
    mu = np.asarray(params["mu"])
    alpha, beta = np.asarray(params["alpha"]), np.asarray(params["beta"])
    U, V = np.asarray(params["U"]), np.asarray(params["V"])
    return (mu[..., None] + alpha[..., rows] + beta[..., cols]
            + np.sum(U[..., rows, :] * V[..., cols, :], axis=-1))


def _norm_logpdf(x, mean, prec):
    return 0.5 * (np.log(prec) - np.log(2 * np.pi)) - 0.5 * prec * (x - mean) ** 2


def _gamma_logpdf(x, shape, rate):
    from scipy.special import gammaln

    return shape * np.log(rate) - gammaln(shape) + (shape - 1) * np.log(x) - rate * x


def log_joint(params, rows, cols, values, hyper: SBMFHyper = SBMFHyper()) -> float:
    """log p(R, Theta, Theta_H | Theta_0), eq. (3.13), in NumPy (float64), all constants included.

    Brute-force reference for the conditional checks; O(N K + (I + J) K).

    Parameters
    ----------
    params : mapping of str to array_like, float
        The names of `simulate`'s truth (no sample axes): ``mu``, ``tau`` (), ``alpha`` (I,),
        ``beta`` (J,), ``U`` (I, K), ``V`` (J, K) and their hyper means and precisions.
    rows, cols : array_like, shape (N,), int
        Observed cells.
    values : array_like, shape (N,), float
        The ratings.
    hyper : SBMFHyper, default SBMFHyper()
        Hyperparameters Theta_0.

    Returns
    -------
    float
        The log joint density.

    Raises
    ------
    None of its own; a missing name raises KeyError, an index out of range IndexError.

    Source: ``004_90693a0965f06816.txt`` eq. (3.13).
    """
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    h = hyper
    lp = _norm_logpdf(values, predicted_mean(p, rows, cols), p["tau"]).sum()                        # (3.2)
    lp += _norm_logpdf(p["mu"], h.mu_g, h.sigma_g)                                                  # (3.3)
    for x, m, s in (("alpha", "mu_alpha", "sigma_alpha"), ("beta", "mu_beta", "sigma_beta"),
                    ("U", "mu_u", "sigma_u"), ("V", "mu_v", "sigma_v")):
        lp += _norm_logpdf(p[x], p[m], p[s]).sum()                                                  # (3.4)-(3.7)
        lp += _gamma_logpdf(p[s], h.alpha0, h.beta0).sum()                                          # (3.9)-(3.12)
        lp += _norm_logpdf(p[m], h.mu0, h.nu0 * p[s]).sum()
    lp += _gamma_logpdf(p["tau"], h.a0, h.b0)                                                       # (3.8)
    return float(lp)
