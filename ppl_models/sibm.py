"""Logistic matrix factorization of a fully observed binary matrix (SIBM's model), in NumPyro.

Source: ``002_5408d341cb9fc544.txt`` (Hernandez-Lobato, Houlsby, Ghahramani, "Stochastic
Inference for Scalable Probabilistic Modeling of Binary Matrices", ICML 2014), sec. 2,
eqs. (1)-(2) and the text after (1); the synthetic setting of sec. 4.

Generative process (I rows, J columns, D latent factors; the seed writes L x M)::

    u_id ~ N(u_bar0, u_tilde0)              i = 1..I, every free column d of U
    v_jd ~ N(v_bar0, v_tilde0)              j = 1..J, every free column d of V
    z    ~ N(z_bar0, z_tilde0)              global bias
    x_ij ~ Bernoulli(sigma(u_i . v_j + z))  eq. (1), every cell (the zeros are data)

Second Normal parameter: the *variance*, as in the seed (``N(.|m, v)``).

Row and column biases (text after eq. (1)): "fixing one column in each of U and V to a vector
of ones". With ``biases=True`` the program builds ``U = [U_factors, a, 1]`` and
``V = [V_factors, 1, b]`` (D + 2 columns), so ``u_i . v_j = u_i,1:D . v_j,1:D + a_i + b_j``:
``a`` (I,) is the free column of U that meets V's column of ones (the row bias) and ``b`` (J,)
is V's free column that meets U's column of ones (the column bias); both have the prior of
the other entries of U / V. The solvers (`custom_inference.sibm`) use the same layout.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["SIBMHyper", "SEC4_SYNTHETIC", "model", "simulate", "augmented_factors", "logits"]


class SIBMHyper(NamedTuple):
    """Hyperparameters of the SIBM model, named as in seed 002 eq. (1)-(2) (variances, not sds).

    Defaults: zero means and unit variances, "In our experiments we used priors with
    zero-mean and unit variance" (seed 002, text after eq. (1)); biases on, as in the paper's
    experiments (same paragraph). The seed allows per-entry prior parameters; one value per
    matrix is what its experiments use and what is implemented.

    Parameters
    ----------
    u_bar0 : float, default 0.0
        Prior mean of every free entry u_id of U (seed: u-bar^0_{i,d}).
    u_tilde0 : float > 0, default 1.0
        Prior variance of every free entry u_id (seed: u-tilde^0_{i,d}).
    v_bar0 : float, default 0.0
        Prior mean of every free entry v_jd of V.
    v_tilde0 : float > 0, default 1.0
        Prior variance of every free entry v_jd.
    z_bar0 : float, default 0.0
        Prior mean of the global bias z (seed: z-bar^0).
    z_tilde0 : float > 0, default 1.0
        Prior variance of z (seed: z-tilde^0).
    biases : bool, default True
        Row and column biases via one column of ones in each of U and V (text after eq. (1)).

    Raises
    ------
    None of its own (a NamedTuple; `simulate` and the solvers check the values).

    Source: ``002_5408d341cb9fc544.txt`` eqs. (1)-(2) and the text after eq. (1) (priors and defaults).
    """

    u_bar0: float = 0.0
    """Prior mean of every free entry u_id of U (seed: u-bar^0_{i,d})."""
    u_tilde0: float = 1.0
    """Prior variance of every free entry u_id (seed: u-tilde^0_{i,d})."""
    v_bar0: float = 0.0
    """Prior mean of every free entry v_jd of V."""
    v_tilde0: float = 1.0
    """Prior variance of every free entry v_jd."""
    z_bar0: float = 0.0
    """Prior mean of the global bias z (seed: z-bar^0)."""
    z_tilde0: float = 1.0
    """Prior variance of z (seed: z-tilde^0)."""
    biases: bool = True
    """Row and column biases via one column of ones in each of U and V (text after eq. (1))."""


#: The synthetic data of seed 002 sec. 4: D = 10, U and V entries N(0, 1), no biases, z fixed at
#: -7.5, "yielding binary matrices with about 98% sparsity".
SEC4_SYNTHETIC = dict(D=10, z=-7.5, hyper=SIBMHyper(biases=False))


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_hyper(hyper) -> None:
    for name in ("u_bar0", "u_tilde0", "v_bar0", "v_tilde0", "z_bar0", "z_tilde0", "biases"):
        if not hasattr(hyper, name):
            raise ValueError(f"hyper has no field {name!r} (use ppl_models.sibm.SIBMHyper)")
    for name in ("u_bar0", "v_bar0", "z_bar0", "u_tilde0", "v_tilde0", "z_tilde0"):
        value = getattr(hyper, name)
        if isinstance(value, (int, float, np.floating, np.integer)):  # concrete: check now
            if not np.isfinite(value) or (name.endswith("tilde0") and value <= 0):
                raise ValueError(f"hyper.{name} must be finite{' and > 0' if name.endswith('tilde0') else ''}, got {value!r}")


def augmented_factors(U, V, a=None, b=None):
    """``U_aug = [U, a, 1]`` and ``V_aug = [V, 1, b]``; without ``a, b``: ``(U, V)`` unchanged.

    Parameters
    ----------
    U : jax.Array, shape (..., I, D), float
        Row factors (leading batch axes, e.g. draws, allowed).
    V : jax.Array, shape (..., J, D), float
        Column factors.
    a : jax.Array, shape (..., I), float, optional
        Row biases (give both ``a`` and ``b`` or neither).
    b : jax.Array, shape (..., J), float, optional
        Column biases.

    Returns
    -------
    U_aug : jax.Array, shape (..., I, D + 2) (or (..., I, D) without biases), float
        The augmented row factors, in the inputs' dtype.
    V_aug : jax.Array, shape (..., J, D + 2) (or (..., J, D) without biases), float
        The augmented column factors.

    Raises
    ------
    None of its own; giving only one of ``a``, ``b`` makes JAX raise TypeError.

    Source: ``002_5408d341cb9fc544.txt``, text after eq. (1) (one column of U and V fixed to ones).
    """
    if a is None and b is None:
        return U, V
    ones_u = jnp.ones_like(a)[..., None]
    ones_v = jnp.ones_like(b)[..., None]
    return (jnp.concatenate([U, a[..., None], ones_u], axis=-1),
            jnp.concatenate([V, ones_v, b[..., None]], axis=-1))


def logits(U, V, z, a=None, b=None):
    """u_i . v_j + z for every cell (with the bias columns when ``a``, ``b`` are given).

    Parameters
    ----------
    U : jax.Array, shape (..., I, D), float
        Row factors (leading batch axes allowed).
    V : jax.Array, shape (..., J, D), float
        Column factors.
    z : float or jax.Array, shape (...), float
        Global bias.
    a : jax.Array, shape (..., I), float, optional
        Row biases (give both ``a`` and ``b`` or neither).
    b : jax.Array, shape (..., J), float, optional
        Column biases.

    Returns
    -------
    jax.Array, shape (..., I, J), float
        The logits, in the inputs' dtype.

    Raises
    ------
    None of its own; giving only one of ``a``, ``b`` makes JAX raise TypeError.

    Source: ``002_5408d341cb9fc544.txt`` eq. (1).
    """
    Ua, Va = augmented_factors(U, V, a, b)
    return jnp.einsum("...id,...jd->...ij", Ua, Va) + jnp.asarray(z)[..., None, None]


def model(X, hyper: SIBMHyper = SIBMHyper(), D: int = 2, *, shape: tuple[int, int] | None = None):
    """NumPyro program of seed 002 sec. 2 over a full (small, dense) binary matrix.

    Intended for NUTS on small matrices: it builds the dense I x J logits.

    Parameters
    ----------
    X : array_like, shape (I, J), int, bool or float 0/1, or None
        The matrix; None samples it (then ``shape`` gives (I, J)).
    hyper : SIBMHyper, default SIBMHyper()
        Hyperparameters.
    D : int >= 1, default 2
        Number of latent factors (the bias columns come on top).
    shape : tuple of 2 int, optional
        (I, J), required when ``X`` is None.

    Returns
    -------
    None
        A NumPyro program: sites ``U`` (I, D), ``V`` (J, D), ``a`` (I,) and ``b`` (J,) when
        ``hyper.biases``, ``z`` (), float, and ``X`` (I, J).

    Raises
    ------
    ValueError
        For D not a positive integer, a missing ``shape`` when ``X`` is None, or X not 2-D (values are
        not checked here: the Bernoulli site validates when NumPyro's validation is enabled; `simulate`
        and the solvers check their inputs).

    Source: ``002_5408d341cb9fc544.txt`` sec. 2, eqs. (1)-(2) and the text after (1).
    """
    _check_sizes(D=D)
    if X is None:
        if shape is None:
            raise ValueError("shape: give (I, J) when X is None")
        n_rows, n_cols = shape
    else:
        if jnp.ndim(X) != 2:
            raise ValueError(f"X must be 2-D (I, J), got shape {jnp.shape(X)}")
        n_rows, n_cols = X.shape
    h = hyper
    # prior of U, V, z (text after eq. (1)): fully factorized Gaussians, variances u_tilde0, ...
    with numpyro.plate("rows_d", n_rows, dim=-2), numpyro.plate("factors_u", D, dim=-1):
        U = numpyro.sample("U", dist.Normal(h.u_bar0, jnp.sqrt(h.u_tilde0)))
    with numpyro.plate("cols_d", n_cols, dim=-2), numpyro.plate("factors_v", D, dim=-1):
        V = numpyro.sample("V", dist.Normal(h.v_bar0, jnp.sqrt(h.v_tilde0)))
    a = b = None
    if h.biases:
        # one column of V fixed to ones: U's matching free column is the row bias a_i
        with numpyro.plate("rows", n_rows, dim=-1):
            a = numpyro.sample("a", dist.Normal(h.u_bar0, jnp.sqrt(h.u_tilde0)))
        # one column of U fixed to ones: V's matching free column is the column bias b_j
        with numpyro.plate("cols", n_cols, dim=-1):
            b = numpyro.sample("b", dist.Normal(h.v_bar0, jnp.sqrt(h.v_tilde0)))
    z = numpyro.sample("z", dist.Normal(h.z_bar0, jnp.sqrt(h.z_tilde0)))
    # likelihood, eq. (1): x_ij ~ Bernoulli(sigma(u_i . v_j + z)), every cell observed
    eta = logits(U, V, z, a, b)
    with numpyro.plate("cells_i", n_rows, dim=-2), numpyro.plate("cells_j", n_cols, dim=-1):
        numpyro.sample("X", dist.Bernoulli(logits=eta), obs=X)


def simulate(key, I: int, J: int, D: int, hyper: SIBMHyper = SIBMHyper(), *, z: float | None = None):
    """Draw parameters and a binary matrix from the prior predictive of `model`.

    The sec. 4 synthetic setting of seed 002 is ``simulate(key, I, J, **SEC4_SYNTHETIC)`` (D = 10,
    z = -7.5, no biases, about 98% zeros).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    I, J, D : int >= 1
        Rows, columns, latent factors.
    hyper : SIBMHyper, default SIBMHyper()
        Hyperparameters.
    z : float, optional
        Fixes the global bias instead of drawing it.

    Returns
    -------
    params : dict of str to jax.Array, float
        ``U`` (I, D), ``V`` (J, D), ``z`` (), and ``a`` (I,), ``b`` (J,) when ``hyper.biases``.
    X : jax.Array, shape (I, J), int32
        The 0/1 matrix.

    Raises
    ------
    ValueError
        A size that is not a positive integer, a hyper field missing or invalid, z not finite.

    Source: ``002_5408d341cb9fc544.txt`` sec. 2 (prior predictive of `model`) and sec. 4 (synthetic
    setting).
    """
    _check_sizes(I=I, J=J, D=D)
    _check_hyper(hyper)
    if z is not None and not np.isfinite(z):
        raise ValueError(f"z must be finite, got {z!r}")
    body = model if z is None else numpyro.handlers.condition(model, data={"z": jnp.asarray(z, jnp.result_type(float))})
    trace = numpyro.handlers.trace(numpyro.handlers.seed(body, key)).get_trace(None, hyper, D, shape=(I, J))
    names = ["U", "V", "z"] + (["a", "b"] if hyper.biases else [])
    params = {n: trace[n]["value"] for n in names}
    return params, trace["X"]["value"].astype(jnp.int32)
