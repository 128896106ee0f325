r"""Mean-field VB with Jaakkola-Jordan bounds over random hidden graphs ("RG").

Source: ``003_203f63200c0d7157.txt`` (Paquet and Koenigstein): q(H) sampler sec. 4.1 and eqs.
(7)-(9); bounded ELBO (10)-(12); updates (13)-(17) and the stochastic average of sec. 5.1;
predictions (19); user biases clamped at zero as in sec. 6.1 (``RGHyper.clamp_user_bias``).
The generative program is `ppl_models.rg.model`. Every update below is our own derivation and
is checked by `validation.models.rg` with ``jax.grad`` of `elbo`.

Bounded ELBO on one hidden graph H (edges e = (m, n), outcome g_e, logit a_e = u_m.v_n + b_m + b_n)::

    L_xi = sum_e [log s(xi_e) + (g_e - 1/2) E a_e - xi_e / 2 - lam(xi_e) (E a_e^2 - xi_e^2)]
           + E log p(U, V, b | tau) + E log p(tau) + H[q]                    (10)-(12)

with lam(xi) = (s(xi) - 1/2) / (2 xi) (`custom_inference.logistic.jj_lambda`, the positive
convention of the seed), and under the diagonal q (6)
E a = mu_u.mu_v + mu_bm + mu_bn, Var a = sum_k (mu_uk^2 s_vk + s_uk mu_vk^2 + s_uk s_vk) + s_bm + s_bn.

Vector update (users; items are symmetric). The terms of L_xi in u_m are
``-1/2 E[u^T P u] + c^T E[u]`` with the full-covariance statistics (13), (15)::

    P_m = E[tau_u] I + sum_{e in m} 2 lam_e (mu_v mu_v^T + diag s_v)
    c_m = sum_{e in m} (g_e - 1/2 - 2 lam_e E[b_m + b_n]) mu_v

For the *diagonal* q(u_m) = prod_k N(eta_k, 1/omega_k): E[u^T P u] = eta^T P eta + sum_k P_kk / omega_k,
so d/d omega_k gives omega_k = P_kk and d/d eta gives P eta = c: the block optimum over all K
coordinates of u_m jointly is eta = P^-1 c (the mean of the intermediate q~(u_m) = N(P^-1 c, P^-1))
and omega = diag P -- the paper's recipe (match the means, keep the diagonal precision), and the
minimizer of KL(prod_k q(u_mk) || q~). In the stored natural parameters that is
``prec = diag P`` and ``h = diag(P) * P^-1 c`` (not c: taking the natural parameters of q~'s
diagonal would move the mean; `validation.models.rg` shows that variant is not stationary).

Stochastic average (sec. 5.1). P_m and c_m are linear in H (eq. 14), so with graphs
H_t ~ q(H) and Robbins-Monro weights eps_t (sum eps = inf, sum eps^2 < inf) the paper blends the
target with the previous factorized q: ``P~ = eps P_m(H_t) + (1 - eps) diag(omega_old)``,
``c~ = eps c_m(H_t) + (1 - eps) omega_old * eta_old``, then ``eta = P~^-1 c~``, ``omega = diag P~``.
eps = 1 is the exact block update on a fixed H (a fixed point stays a fixed point for any eps).
Biases (univariate) and the Gamma factors blend their natural parameters the same way.

Biases: ``prec_bm = E[tau_bu] + sum_e 2 lam_e``, ``h_bm = sum_e (g_e - 1/2 - 2 lam_e (mu_u.mu_v + mu_bn))``.
Hyperparameters (17): ``tau_u ~ Gamma(alpha + I K / 2, beta + 1/2 sum_m E[u_m^T u_m])`` and alike.
xi (16): ``xi_e = sqrt(E a_e^2)``, recomputed from the current q before every block ("computed and
discarded when needed"), so a sweep never lowers L_xi at optimal xi.

Warm start (ours, not in the paper). From the small random start of `init`, the bounded ELBO first
sits on a plateau where u, v ~ 0 (mean-field VB's pruning of weak directions); batch sweeps on a
fixed H leave it after some sweeps, but the Robbins-Monro average over resampled graphs, whose
weights eps_t have decayed by then and whose per-graph targets disagree on every unliked item,
stays there: the factors shrink to ~0 (E[tau_u] large) and the like probability degenerates to an
item-bias score. `fit` therefore runs ``warm_start`` exact sweeps on the first sampled graph H_0
before the averaging (`DEFAULT_WARM_START`; 0 restores the paper's cold start). The averaging then
starts at eps_0 = 1 from the warm state, an exact sweep on H_1 from there.

Work per sweep O(|H| K^2 + (I + J) K^3); nothing of size I x J (`score_users` returns a (B, J)
block for the B users asked for). The vector updates run in blocks of rows (issue 28,
`custom_inference.row_blocks`, the edges in user- / item-sorted order: `edge_order`): per block the
edge sums are accumulated in chunks into that block's (B, K, K) precisions only, so neither the
(E, K, K) per-edge outer products (26 GB at Netflix's shape, 1e6 nonzeros, K = 50) nor the (I, K, K)
precisions of all users exist; the other passes over the edges (xi, the ELBO's bound, the bias
sums) gather the factors in chunks of `EDGE_CHUNK` edges, so no (E, K) array exists either: memory
O(E + (I + J) K + B K^2 + chunk K).
"""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import base, row_blocks, vi_driver
from .chunks import over_chunks
from .data import Observations
from .gamma import expected_gamma_logpdf, gamma_entropy, gamma_log_mean, gamma_mean
from .logistic import jj_expected_log_bound, jj_lambda, mackay_probit, optimal_xi
from .sampling import sample_without_replacement
from .schedules import check_robbins_monro
from .schedules import robbins_monro as _robbins_monro

__all__ = [
    "RGGraph",
    "RGState",
    "RGInfo",
    "histogram_of",
    "histogram_exponent",
    "popularity_weights",
    "sample_hidden_graph",
    "init",
    "moments",
    "edge_moments",
    "edge_xi",
    "elbo",
    "update_users",
    "update_items",
    "update_user_bias",
    "update_item_bias",
    "update_hyper",
    "edge_order",
    "BLOCKS",
    "step",
    "robbins_monro",
    "DEFAULT_WARM_START",
    "fit",
    "like_probability",
    "score_users",
    "draws_from_q",
    "ALGORITHM",
]

_HYPER_FIELDS = ("alpha", "beta", "r", "clamp_user_bias")
#: Default number of fixed-graph batch sweeps before the Robbins-Monro averaging of `fit`. On the
#: notebook's 300 x 100 simulated problem the batch fit leaves the collapsed plateau after ~15
#: sweeps (10 warm sweeps were too few there, 20 enough); 30 leaves a margin. On MovieLens 100K a
#: sweep (K = 10) costs about as much as one Robbins-Monro sweep.
DEFAULT_WARM_START = 30


# ---------------------------------------------------------------------------------------------
# the hidden graph H and its sampler q(H) (sec. 4.1)


@jax.tree_util.register_pytree_node_class
class RGGraph:
    """The edges of one hidden graph H, padded to a fixed capacity (same compiled step for every sample).

    A JAX pytree (the four arrays are its leaves, ``n_users`` / ``n_items`` static). Build with
    `sample_hidden_graph` or `RGGraph.from_edges` (which validate); the constructor checks nothing.

    Parameters
    ----------
    users : numpy.ndarray or jax.Array, shape (E_cap,), int32
        The user m of each edge (padding: 0).
    items : numpy.ndarray or jax.Array, shape (E_cap,), int32
        The item n of each edge (padding: 0).
    g : numpy.ndarray or jax.Array, shape (E_cap,), float
        1 for an edge of the observed G, 0 for a sampled negative (and padding).
    weight : numpy.ndarray or jax.Array, shape (E_cap,), float
        1 for a real edge, 0 for padding.
    n_users : int
        I (static).
    n_items : int
        J (static).

    Raises
    ------
    TypeError
        Not of its own: ``int(n_users)`` / ``int(n_items)`` for non-numbers (ValueError for
        strings that are not integers).

    Source: ``003_203f63200c0d7157.txt`` sec. 4.1 (the hidden graph H); padding: project addition.
    """

    def __init__(self, users, items, g, weight, n_users: int, n_items: int):
        self.users, self.items, self.g, self.weight = users, items, g, weight
        self.n_users, self.n_items = int(n_users), int(n_items)

    def tree_flatten(self):
        """The pytree protocol: the four edge arrays as children, the shape as auxiliary data.

        Returns
        -------
        children : tuple of array
            ``(users, items, g, weight)``, each (E_cap,).
        aux : tuple of int
            ``(n_users, n_items)``.

        Raises
        ------
        None of its own.

        Source: project addition (jax.tree_util's pytree protocol).
        """
        return (self.users, self.items, self.g, self.weight), (self.n_users, self.n_items)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @classmethod
    def from_edges(cls, users, items, g, n_users: int, n_items: int, *, capacity: int | None = None,
                   dtype=np.float64) -> "RGGraph":
        """Validate an explicit edge list of H and pad it to ``capacity``.

        Parameters
        ----------
        users : array-like, shape (E,), int
            User of each edge, in [0, n_users).
        items : array-like, shape (E,), int
            Item of each edge, in [0, n_items).
        g : array-like, shape (E,), 0/1
            1 for an edge of G, 0 for a negative.
        n_users : int >= 1
            I.
        n_items : int >= 1
            J.
        capacity : int, keyword-only, optional
            The padded edge count (default E, no padding).
        dtype : numpy dtype, keyword-only, default float64
            Dtype of ``g`` and ``weight``.

        Returns
        -------
        RGGraph
            With numpy leaves.

        Raises
        ------
        ValueError
            Naming the field: bad sizes or indices, no edges, duplicates, g outside {0, 1},
            capacity too small.

        Source: ``003_203f63200c0d7157.txt`` sec. 4.1 (H); project addition (the checks).
        """
        users, items = _check_edges(users, items, n_users, n_items, g)
        g = np.asarray(g, dtype=dtype)
        E = users.size
        cap = E if capacity is None else int(capacity)
        if cap < E:
            raise ValueError(f"capacity {cap} < number of edges {E}")
        pad = cap - E
        z = np.zeros(pad, np.int32)
        return cls(np.r_[users, z].astype(np.int32), np.r_[items, z].astype(np.int32),
                   np.r_[g, np.zeros(pad)].astype(dtype), np.r_[np.ones(E), np.zeros(pad)].astype(dtype),
                   n_users, n_items)

    @property
    def n_edges(self) -> int:
        """Number of real (weight 1) edges.

        Returns
        -------
        int
            The sum of ``weight`` (read to the host).

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(np.sum(np.asarray(self.weight)))

    def astype(self, dtype) -> "RGGraph":
        """The same edges with ``g`` and ``weight`` stored as ``dtype``.

        Parameters
        ----------
        dtype : numpy dtype
            float32 or float64 (not checked).

        Returns
        -------
        RGGraph
            ``g`` and ``weight`` as jax arrays of ``dtype``; ``users``, ``items`` shared.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return RGGraph(self.users, self.items, jnp.asarray(self.g, dtype), jnp.asarray(self.weight, dtype),
                       self.n_users, self.n_items)

    def __repr__(self) -> str:
        return f"RGGraph(I={self.n_users}, J={self.n_items}, capacity={np.asarray(self.users).size})"


def _check_binary(obs) -> None:
    if not isinstance(obs, Observations):
        raise TypeError(f"obs must be custom_inference.data.Observations, got {type(obs).__name__}")
    vals = np.asarray(obs.values)
    if np.any(vals != 1):
        raise ValueError("obs.values: one-class data must store only ones (the edges of G)")


def histogram_exponent(d_max: float, r: float) -> float:
    """gamma with pi_max = d_max^gamma = r d_max: ``gamma = 1 + log r / log d_max`` (eqs. 7-8).

    The printed eq. (9), ``gamma = 1 - log d_max / log r``, does not satisfy (8) (see
    `validation.models.rg.ERRATA`). For d_max = 1 every weight d_n^gamma is 0 or 1 whatever gamma, and
    1 is returned.

    Parameters
    ----------
    d_max : float >= 1
        The largest item degree (views of the most viewed item).
    r : float > 0
        The ratio pi_max / d_max the histogram should have.

    Returns
    -------
    float
        gamma.

    Raises
    ------
    ValueError
        d_max < 1, or r not positive and finite.

    Source: ``003`` eqs. (7)-(9), corrected.
    """
    if not d_max >= 1:
        raise ValueError(f"d_max must be >= 1, got {d_max}")
    if not (np.isfinite(r) and r > 0):
        raise ValueError(f"r must be positive and finite, got {r}")
    if d_max == 1:
        return 1.0
    return 1.0 + math.log(r) / math.log(d_max)


def popularity_weights(obs: Observations, r: float) -> tuple[np.ndarray, float]:
    """The histogram pi_n = d_n^gamma of sec. 4.1 (eq. 7), gamma from r (eqs. 8-9 corrected).

    Parameters
    ----------
    obs : Observations, shape (I, J)
        One-class: every stored value 1.
    r : float > 0
        The hyperparameter r (`histogram_exponent`).

    Returns
    -------
    pi : numpy.ndarray, shape (J,), float64
        Unnormalized (items without views get 0, so they are never negatives).
    gamma : float
        The exponent.

    Raises
    ------
    TypeError
        ``obs`` not an Observations.
    ValueError
        Non-binary data, bad r, or no entries at all (d_max = 0 < 1, from `histogram_exponent`).

    Source: 003_203f63200c0d7157.txt sec. 4.1, eqs. (7)-(9) (eq. 9 corrected).
    """
    _check_binary(obs)
    d = np.bincount(np.asarray(obs.cols), minlength=obs.n_cols).astype(np.float64)
    gamma = histogram_exponent(float(d.max()), float(r))
    pi = np.where(d > 0, np.power(np.maximum(d, 1.0), gamma), 0.0)
    return pi, gamma


def sample_hidden_graph(rng: np.random.Generator, obs: Observations, pi, *, capacity: int | None = None,
                        dtype=np.float64) -> RGGraph:
    """One draw H ~ q(H) (sec. 4.1): every observed edge (g = 1) plus, for each user m, d_m items
    drawn without replacement from the histogram ``pi`` among the items m has not viewed (g = 0).

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness.
    obs : Observations, shape (I, J)
        One-class (values 1); d_m = number of entries of row m.
    pi : array-like, shape (J,), float >= 0
        The histogram (`popularity_weights`).
    capacity : int, keyword-only, default 2 N (N = obs.nnz)
        The padded edge count (>= the edges drawn).
    dtype : numpy dtype, keyword-only, default float64
        Float dtype of ``g`` and ``weight``.

    Returns
    -------
    RGGraph
        With numpy leaves; user m gets min(d_m, number of unviewed items with pi > 0) negatives.

    Raises
    ------
    TypeError
        ``obs`` not an Observations.
    ValueError
        Non-binary data, ``pi`` of the wrong shape, negative or not finite
        (`sampling.sample_without_replacement`), a ``capacity`` below the edges drawn.

    Source: ``003`` sec. 4.1; exact weighted sampling `custom_inference.sampling`.
    """
    _check_binary(obs)
    pi = np.asarray(pi, dtype=np.float64)
    if pi.shape != (obs.n_cols,):
        raise ValueError(f"pi must have shape ({obs.n_cols},), got {pi.shape}")
    rows = np.asarray(obs.rows, np.int64)
    cols = np.asarray(obs.cols, np.int64)
    I, J = obs.shape
    deg = np.bincount(rows, minlength=I)
    indptr = np.r_[0, np.cumsum(deg)]
    order = np.argsort(rows, kind="stable")
    neg_rows, neg_items = sample_without_replacement(rng, pi, indptr, cols[order], deg)
    users = np.r_[rows, neg_rows]
    items = np.r_[cols, neg_items]
    g = np.r_[np.ones(rows.size), np.zeros(neg_rows.size)]
    cap = 2 * rows.size if capacity is None else int(capacity)
    E = users.size
    if cap < E:
        raise ValueError(f"capacity {cap} < number of edges {E}")
    pad = cap - E
    z = np.zeros(pad, np.int32)
    return RGGraph(np.r_[users, z].astype(np.int32), np.r_[items, z].astype(np.int32),
                   np.r_[g, np.zeros(pad)].astype(dtype), np.r_[np.ones(E), np.zeros(pad)].astype(dtype), I, J)


# ---------------------------------------------------------------------------------------------
# state


class RGState(NamedTuple):
    """Variational parameters (natural: precision, precision x mean) of the factorized q (6).

    A NamedTuple (a JAX pytree); all fields float32 or float64.

    Parameters
    ----------
    u_prec, u_h : jax.Array, shape (I, K), float
        q(u_mk) = N(u_h / u_prec, 1 / u_prec).
    v_prec, v_h : jax.Array, shape (J, K), float
        q(v_nk).
    bu_prec, bu_h : jax.Array, shape (I,), float
        q(b_m) (ignored when user_bias_on = 0).
    bv_prec, bv_h : jax.Array, shape (J,), float
        q(b_n).
    tau_u_shape, tau_u_rate, tau_v_shape, tau_v_rate : jax.Array, shape (), float
        q(tau) = Gamma(shape, rate) of the factor precisions.
    tau_bu_shape, tau_bu_rate, tau_bv_shape, tau_bv_rate : jax.Array, shape (), float
        q(tau) of the bias precisions.
    user_bias_on : jax.Array, shape (), float
        1.0 for the full model (5), 0.0 when b_m is clamped at 0 (sec. 6.1): carried with the state
        so that predictions need nothing else.

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``003_203f63200c0d7157.txt`` eq. (6) (the factorized q) and eq. (17) (q(tau)).
    """

    u_prec: jax.Array
    u_h: jax.Array
    v_prec: jax.Array
    v_h: jax.Array
    bu_prec: jax.Array
    bu_h: jax.Array
    bv_prec: jax.Array
    bv_h: jax.Array
    tau_u_shape: jax.Array
    tau_u_rate: jax.Array
    tau_v_shape: jax.Array
    tau_v_rate: jax.Array
    tau_bu_shape: jax.Array
    tau_bu_rate: jax.Array
    tau_bv_shape: jax.Array
    tau_bv_rate: jax.Array
    user_bias_on: jax.Array


class RGInfo(NamedTuple):
    """Per-step diagnostics of `step`.

    Parameters
    ----------
    elbo : jax.Array, shape (), float
        L_xi at optimal xi of the state after the step, on the step's graph (nats).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info; L_xi of ``003`` eqs. (10)-(12)).
    """

    elbo: jax.Array


def histogram_of(fit: base.FitResult) -> tuple[np.ndarray, float]:
    """The popularity histogram of a `fit` result, the ``pi`` `score_users` needs for the popularity kinds.

    Read from its idata (group ``histogram``, attr ``gamma``).

    Parameters
    ----------
    fit : base.FitResult or arviz.InferenceData
        An RG `fit` result (or its ``idata``).

    Returns
    -------
    pi : numpy.ndarray, shape (J,), float64
        The histogram of `popularity_weights`.
    gamma : float
        Its exponent.

    Raises
    ------
    ValueError
        ``fit`` is not an RG `fit` result (no ``histogram`` group).

    Source: project addition.
    """
    idata = fit.idata if hasattr(fit, "idata") else fit
    if "histogram" not in idata.groups():
        raise ValueError("not an RG fit result: its idata has no 'histogram' group")
    return np.asarray(idata.histogram["pi"].values, np.float64), float(idata.histogram.attrs["gamma"])


def _check_hyper(hyper) -> None:
    """ValueError naming the field unless hyper has positive finite alpha, beta, r and a bool
    clamp_user_bias (`ppl_models.rg.RGHyper`; not imported: the packages stay independent)."""
    base.check_positive_hyper(hyper, _HYPER_FIELDS, "ppl_models.rg.RGHyper", positive=("alpha", "beta", "r"))
    if not isinstance(hyper.clamp_user_bias, (bool, np.bool_)):
        raise ValueError(f"hyper.clamp_user_bias must be a bool, got {hyper.clamp_user_bias!r}")


def _check_edges(users, items, n_users, n_items, g):
    for name, value in (("n_users", n_users), ("n_items", n_items)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    users, items, g = np.asarray(users), np.asarray(items), np.asarray(g)
    for name, arr, bound in (("users", users, n_users), ("items", items, n_items)):
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{name} must be a 1-D integer array")
        if arr.size and (arr.min() < 0 or arr.max() >= bound):
            raise ValueError(f"{name} index out of range: found [{arr.min()}, {arr.max()}], allowed [0, {bound - 1}]")
    if users.shape != items.shape or g.shape != users.shape:
        raise ValueError(f"users, items and g must have the same length, got {users.size}, {items.size}, {g.size}")
    if users.size == 0:
        raise ValueError("users: the hidden graph has no edges")
    if np.unique(users.astype(np.int64) * n_items + items).size != users.size:
        raise ValueError("users/items: duplicate edges (m, n) in H")
    if np.any((g != 0) & (g != 1)):
        raise ValueError("g: values must be 0 or 1")
    return users.astype(np.int32), items.astype(np.int32)


def _check_K(K) -> int:
    if isinstance(K, bool) or int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    return int(K)


def init(key, graph: RGGraph, K: int, hyper, *, dtype=None) -> RGState:
    """Initial q: factor means 0.1 N(0, 1) (symmetry breaking), factor and bias precisions 1, bias means 0,
    and every q(tau) set by its update (17) from these moments.

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed (`base.as_key`).
    graph : RGGraph or Observations
        A hidden graph, or the Observations (I, J) of G (only the shapes and, for the default
        dtype, ``g`` / ``values`` are used).
    K : int >= 1
        Number of factors.
    hyper : ppl_models.rg.RGHyper
        RG hyperparameters (alpha, beta, r, clamp_user_bias).
    dtype : numpy dtype, keyword-only, optional
        float32 or float64 (default: that of ``graph.g`` / ``values``).

    Returns
    -------
    RGState
        Shapes in its docstring, of ``dtype``.

    Raises
    ------
    ValueError
        Bad K or hyperparameters; a ``dtype`` other than float32 / float64 (`base.compute_dtype`).
    TypeError
        A bad key (`base.as_key`).

    Source: 003_203f63200c0d7157.txt sec. 5 (q of eq. 6); the start itself: project addition.
    """
    _check_hyper(hyper)
    K = _check_K(K)
    key = base.as_key(key)
    if isinstance(graph, Observations):
        dtype = jnp.dtype(base.compute_dtype(dtype, np.asarray(graph.values).dtype))
        return _init(key, float(hyper.alpha), float(hyper.beta), 0.0 if hyper.clamp_user_bias else 1.0,
                     graph.n_rows, graph.n_cols, K, dtype)
    dtype = jnp.dtype(base.compute_dtype(dtype, jnp.asarray(graph.g).dtype))
    return _init(key, float(hyper.alpha), float(hyper.beta), 0.0 if hyper.clamp_user_bias else 1.0,
                 graph.n_users, graph.n_items, K, dtype)


@functools.partial(jax.jit, static_argnums=(4, 5, 6, 7))
def _init(key, alpha, beta, on, I, J, K, dtype):
    """`init` after validation, compiled once per (sizes, dtype)."""
    ku, kv = jax.random.split(key)
    # float32 normals in every dtype: a seed gives the same start in float32 and float64
    mu = 0.1 * jax.random.normal(ku, (I, K), dtype=jnp.float32).astype(dtype)
    mv = 0.1 * jax.random.normal(kv, (J, K), dtype=jnp.float32).astype(dtype)
    one = lambda *s: jnp.ones(s, dtype)  # noqa: E731
    a0, b0 = jnp.asarray(alpha, dtype), jnp.asarray(beta, dtype)
    state = RGState(one(I, K), mu, one(J, K), mv, one(I), jnp.zeros(I, dtype), one(J), jnp.zeros(J, dtype),
                    a0, b0, a0, b0, a0, b0, a0, b0, jnp.asarray(on, dtype))
    return update_hyper(state, _PriorOnly(a0, b0))


class _PriorOnly(NamedTuple):
    alpha: jax.Array
    beta: jax.Array


# ---------------------------------------------------------------------------------------------
# moments and the bounded ELBO


def moments(state: RGState):
    """Means and variances under q: (mu_u, s_u) (I, K), (mu_v, s_v) (J, K), (mu_bu, s_bu) (I,),
    (mu_bv, s_bv) (J,). Clamped user biases (user_bias_on = 0) have mean and variance 0.

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).

    Returns
    -------
    u : tuple of jax.Array
        (mu_u, s_u), each (I, K), the state's float dtype.
    v : tuple of jax.Array
        (mu_v, s_v), each (J, K).
    b_user : tuple of jax.Array
        (mu_bu, s_bu), each (I,).
    b_item : tuple of jax.Array
        (mu_bv, s_bv), each (J,).

    Raises
    ------
    None of its own (jax arithmetic; a zero precision gives inf / nan, not an exception).

    Source: 003_203f63200c0d7157.txt eq. (6) (the factorized Gaussian q).
    """
    on = state.user_bias_on
    return ((state.u_h / state.u_prec, 1.0 / state.u_prec), (state.v_h / state.v_prec, 1.0 / state.v_prec),
            (on * state.bu_h / state.bu_prec, on / state.bu_prec), (state.bv_h / state.bv_prec, 1.0 / state.bv_prec))


def edge_moments(state: RGState, users, items):
    """E_q[a] and E_q[a^2] (each (E,)) of a = u_m.v_n + b_m + b_n for index pairs (users, items) (E,).

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    users : numpy.ndarray or jax.Array, shape (E,), int
        User of each pair.
    items : numpy.ndarray or jax.Array, shape (E,), int
        Item of each pair.

    Returns
    -------
    mean : jax.Array, shape (E,), the state's float dtype
        E_q[a].
    second_moment : jax.Array, shape (E,), the state's float dtype
        E_q[a^2].

    Raises
    ------
    TypeError
        Not of its own: jax raises it for lengths that do not broadcast. Out-of-range indices are
        not reported (jax indexing clamps them; negative ones count from the end).

    Source: 003_203f63200c0d7157.txt eqs. (10)-(12) (the moments of the logit under q (6)).
    """
    (mu, su), (mv, sv), (mbu, sbu), (mbv, sbv) = moments(state)
    Mu, Su, Mv, Sv = mu[users], su[users], mv[items], sv[items]
    mean = jnp.sum(Mu * Mv, axis=-1) + mbu[users] + mbv[items]
    var = jnp.sum(Mu**2 * Sv + Su * Mv**2 + Su * Sv, axis=-1) + sbu[users] + sbv[items]
    return mean, mean**2 + var


#: edges per chunk of the O(E K) edge passes (the logits' moments, the bias sums): (chunk, K) temporaries
EDGE_CHUNK = 1 << 16


def _edge_map(fn, users, items):
    """``fn(users_chunk, items_chunk) -> tuple of (c,) arrays`` over chunks of `EDGE_CHUNK` edges, written
    into (E,) arrays (`chunks.over_chunks`), so no (E, K) gather of the factors exists."""
    n = users.shape[0]
    c = max(1, min(EDGE_CHUNK, n))
    out = tuple(jnp.zeros((n,), o.dtype) for o in jax.eval_shape(fn, users[:c], items[:c]))

    def body(start, size, out):
        vals = fn(*(jax.lax.dynamic_slice_in_dim(x, start, size) for x in (users, items)))
        return tuple(jax.lax.dynamic_update_slice_in_dim(o, v, start, 0) for o, v in zip(out, vals))

    return over_chunks(n, c, body, out)


def edge_xi(state: RGState, graph: RGGraph):
    """The optimal xi_e = sqrt(E_q[a_e^2]) of every edge of H (eq. 16).

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.

    Returns
    -------
    jax.Array, shape (E_cap,), the state's float dtype
        xi of every edge (padding edges included: they are (0, 0) with weight 0).

    Raises
    ------
    None of its own.

    Source: 003_203f63200c0d7157.txt eq. (16).
    """
    (second,) = _edge_map(lambda u, i: edge_moments(state, u, i)[1:], graph.users, graph.items)
    return optimal_xi(second)


def _taus(state):
    pairs = ((state.tau_u_shape, state.tau_u_rate), (state.tau_v_shape, state.tau_v_rate),
             (state.tau_bu_shape, state.tau_bu_rate), (state.tau_bv_shape, state.tau_bv_rate))
    return [(gamma_mean(a, b), gamma_log_mean(a, b)) for a, b in pairs]


def _gauss_prior_entropy(mean, var, e_tau, elog_tau):
    """sum of E log N(x; 0, 1/tau) + H[N(mean, var)] over all entries."""
    return jnp.sum(0.5 * (elog_tau + jnp.log(var) + 1.0) - 0.5 * e_tau * (mean**2 + var))


def elbo(state: RGState, graph: RGGraph, hyper, xi=None):
    """The bounded ELBO L_xi of eqs. (10)-(12) on the hidden graph ``graph`` (nats, scalar).

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.
    hyper : ppl_models.rg.RGHyper
        Only ``alpha`` and ``beta`` are used.
    xi : jax.Array, shape (E_cap,), float, optional
        The Jaakkola-Jordan parameters of the edges; None uses the optimal xi (16), where L_xi
        equals its maximum over xi.

    Returns
    -------
    jax.Array, shape (), the state's float dtype
        Sum over edges of the expected bound (`jj_expected_log_bound`) plus the expected log
        priors of U, V, b, tau and the entropy of q. Differentiable in every field of ``state`` and
        in ``xi`` (what `validation.models.rg` uses). The user-bias terms and q(tau_bu) are
        multiplied by ``state.user_bias_on`` (absent when clamped).

    Raises
    ------
    AttributeError
        Not of its own (``hyper`` is not validated here): a ``hyper`` without ``alpha`` / ``beta``.
        Non-finite values give nan, not an exception.

    Source: 003_203f63200c0d7157.txt eqs. (10)-(12), with the Gamma hyperpriors of eq. (17).
    """
    mean, second = _edge_map(lambda u, i: edge_moments(state, u, i), graph.users, graph.items)
    if xi is None:
        xi = optimal_xi(second)
    lik = jnp.sum(graph.weight * jj_expected_log_bound(mean, second, xi, graph.g))
    (mu, su), (mv, sv), _, _ = moments(state)
    (eu, lu), (ev, lv), (ebu, lbu), (ebv, lbv) = _taus(state)
    on = state.user_bias_on
    total = lik + _gauss_prior_entropy(mu, su, eu, lu) + _gauss_prior_entropy(mv, sv, ev, lv)
    mbv, sbv = state.bv_h / state.bv_prec, 1.0 / state.bv_prec
    total = total + _gauss_prior_entropy(mbv, sbv, ebv, lbv)
    mbu, sbu = state.bu_h / state.bu_prec, 1.0 / state.bu_prec
    total = total + on * _gauss_prior_entropy(mbu, sbu, ebu, lbu)
    # the -1/2 log(2 pi) of the priors and the +1/2 log(2 pi) of the entropies cancel
    a0, b0 = hyper.alpha, hyper.beta
    log_b0 = jnp.log(jnp.asarray(b0, mu.dtype))
    for (e, l), (sh, rt), w in zip(((eu, lu), (ev, lv), (ebu, lbu), (ebv, lbv)),
                                   ((state.tau_u_shape, state.tau_u_rate), (state.tau_v_shape, state.tau_v_rate),
                                    (state.tau_bu_shape, state.tau_bu_rate), (state.tau_bv_shape, state.tau_bv_rate)),
                                   (1.0, 1.0, on, 1.0)):
        total = total + w * (expected_gamma_logpdf(a0, log_b0, b0, l, e) + gamma_entropy(sh, rt))
    return total


# ---------------------------------------------------------------------------------------------
# coordinate updates (each one block; rho = 1 is the exact block maximizer on the graph)


def _vector_update(graph: RGGraph, own_is_user: bool, m_other, s_other, e_tau, bias_mean, lam2, gh, old_prec, old_h,
                   rho, order, chunk):
    """Shared user/item vector update (module docstring), in blocks of rows (`row_blocks`): per
    block the sums of (13), (15) over its edges, the rho blend and the solve; no (E, K, K) or
    (n_own, K, K) array. lam2 = 2 lam_e w_e, gh = (g_e - 1/2) w_e, bias_mean = E[b_m + b_n], all
    (E_cap,); m_other, s_other : means and variances of the other side's factors; old_prec, old_h :
    (n_own, K). Returns (prec, h), each (n_own, K)."""
    own_ids, other_ids = (graph.users, graph.items) if own_is_user else (graph.items, graph.users)
    K, dtype = old_h.shape[1], old_h.dtype
    if order is None:
        order = row_blocks.traced_order(graph.users, graph.items, graph.n_users, graph.n_items, K, dtype)

    def pair_terms(take, m):
        other, w = take(other_ids), take(lam2) * m
        return take(own_ids), w, (take(gh) - take(lam2) * take(bias_mean)) * m, m_other[other], s_other[other]

    def finish(acc, ids):
        P, dg, c = acc
        P = P + jax.vmap(jnp.diag)(dg + e_tau)
        P = rho * P + (1.0 - rho) * jax.vmap(jnp.diag)(old_prec[ids])
        eta, prec = row_blocks.solve_rows(P, rho * c + (1.0 - rho) * old_h[ids])
        return prec, prec * eta

    chunk = row_blocks.default_chunk(K, dtype) if chunk is None else chunk
    return row_blocks.over_row_blocks(order, own_is_user, own_ids.shape[0], chunk,
                                      pair_terms, finish, (jnp.zeros_like(old_prec), jnp.zeros_like(old_h)), K=K,
                                      dtype=dtype, weight=graph.weight)


def _edge_terms(state, graph, xi):
    lam2 = 2.0 * jj_lambda(xi) * graph.weight
    gh = (graph.g - 0.5) * graph.weight
    return lam2, gh


def update_users(state: RGState, graph: RGGraph, hyper, xi, rho=1.0, *, order=None, chunk: int | None = None) -> RGState:
    """Block update of every q(u_m) through the full-covariance q~(u_m) (eqs. 13, 15; module docstring).

    The users are solved in blocks of ``order.user_block``: one block's (B, K, K) precisions at a
    time (issue 28).

    Parameters
    ----------
    state : RGState
        u_prec, u_h (I, K), float (all fields read for the moments).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.
    hyper : object
        Unused (the common block signature).
    xi : jax.Array, shape (E_cap,), float
        The bound parameters of the edges, held fixed (e.g. `edge_xi`).
    rho : float or jax.Array, shape (), default 1.0
        The Robbins-Monro weight in (0, 1] (1: the exact block update).
    order : row_blocks.PairOrder, keyword-only, optional
        Of the graph's edges (`edge_order`; None: built inside the trace, an O(E log E) sort per
        call).
    chunk : int, keyword-only, optional
        Edges per chunk of the sums (a Python int; None: `row_blocks.default_chunk`, 32 MiB of
        (chunk, K, K) outer products).

    Returns
    -------
    RGState
        ``state`` with u_prec, u_h replaced, (I, K), the state's dtype.

    Raises
    ------
    None of its own; the Cholesky factor of a non positive-definite P gives nan, not an exception.

    Source: 003_203f63200c0d7157.txt eqs. (13), (15) and sec. 5.1 (the rho blend); the
    diagonal projection of q~ is derived in the module docstring.
    """
    (mu, su), (mv, sv), (mbu, _), (mbv, _) = moments(state)
    lam2, gh = _edge_terms(state, graph, xi)
    eb = mbu[graph.users] + mbv[graph.items]
    prec, h = _vector_update(graph, True, mv, sv, _taus(state)[0][0], eb, lam2, gh, state.u_prec, state.u_h, rho,
                             order, chunk)
    return state._replace(u_prec=prec, u_h=h)


def update_items(state: RGState, graph: RGGraph, hyper, xi, rho=1.0, *, order=None, chunk: int | None = None) -> RGState:
    """Block update of every q(v_n), the item twin of `update_users`.

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.
    hyper : object
        Unused (the common block signature).
    xi : jax.Array, shape (E_cap,), float
        The bound parameters of the edges, held fixed (e.g. `edge_xi`).
    rho : float or jax.Array, shape (), default 1.0
        The Robbins-Monro weight in (0, 1] (1: the exact block update).
    order : row_blocks.PairOrder, keyword-only, optional
        As in `update_users` (blocks of ``order.item_block`` items over the item-sorted edges).
    chunk : int, keyword-only, optional
        As in `update_users`.

    Returns
    -------
    RGState
        ``state`` with v_prec, v_h replaced, (J, K), the state's dtype.

    Raises
    ------
    None of its own (as `update_users`).

    Source: 003_203f63200c0d7157.txt eqs. (13)-(15) and sec. 5.1 (item side).
    """
    (mu, su), (mv, sv), (mbu, _), (mbv, _) = moments(state)
    lam2, gh = _edge_terms(state, graph, xi)
    eb = mbu[graph.users] + mbv[graph.items]
    prec, h = _vector_update(graph, False, mu, su, _taus(state)[1][0], eb, lam2, gh, state.v_prec, state.v_h, rho,
                             order, chunk)
    return state._replace(v_prec=prec, v_h=h)


def _bias_update(own, n_own, e_tau, rest_mean, lam2, gh, old_prec, old_h, rho):
    prec = e_tau + jax.ops.segment_sum(lam2, own, num_segments=n_own)
    h = jax.ops.segment_sum(gh - lam2 * rest_mean, own, num_segments=n_own)
    return rho * prec + (1.0 - rho) * old_prec, rho * h + (1.0 - rho) * old_h


def update_user_bias(state: RGState, graph: RGGraph, hyper, xi, rho=1.0) -> RGState:
    """q(b_m): precision E[tau_bu] + sum_e 2 lam_e, h = sum_e (g_e - 1/2 - 2 lam_e (mu_u.mu_v + mu_bn)).
    (Computed also when clamped; the clamp multiplies b_m's moments by 0.)

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.
    hyper : object
        Unused (the common block signature).
    xi : jax.Array, shape (E_cap,), float
        The bound parameters of the edges, held fixed (e.g. `edge_xi`).
    rho : float or jax.Array, shape (), default 1.0
        The Robbins-Monro weight in (0, 1] (1: the exact block update).

    Returns
    -------
    RGState
        ``state`` with bu_prec, bu_h replaced, (I,), the state's dtype.

    Raises
    ------
    None of its own.

    Source: 003_203f63200c0d7157.txt eqs. (13)-(15) (the univariate bias factor of model (5)) and
    sec. 5.1 (rho blend).
    """
    (mu, _), (mv, _), _, (mbv, _) = moments(state)
    lam2, gh = _edge_terms(state, graph, xi)
    (rest,) = _edge_map(lambda u, i: (jnp.sum(mu[u] * mv[i], axis=-1) + mbv[i],), graph.users, graph.items)
    prec, h = _bias_update(graph.users, graph.n_users, _taus(state)[2][0], rest, lam2, gh, state.bu_prec,
                           state.bu_h, rho)
    return state._replace(bu_prec=prec, bu_h=h)


def update_item_bias(state: RGState, graph: RGGraph, hyper, xi, rho=1.0) -> RGState:
    """q(b_n): the item twin of `update_user_bias` (E[b_m] is 0 when the user biases are clamped).

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.
    hyper : object
        Unused (the common block signature).
    xi : jax.Array, shape (E_cap,), float
        The bound parameters of the edges, held fixed (e.g. `edge_xi`).
    rho : float or jax.Array, shape (), default 1.0
        The Robbins-Monro weight in (0, 1] (1: the exact block update).

    Returns
    -------
    RGState
        ``state`` with bv_prec, bv_h replaced, (J,), the state's dtype.

    Raises
    ------
    None of its own.

    Source: 003_203f63200c0d7157.txt eqs. (13)-(15) and sec. 5.1 (item side).
    """
    (mu, _), (mv, _), (mbu, _), _ = moments(state)
    lam2, gh = _edge_terms(state, graph, xi)
    (rest,) = _edge_map(lambda u, i: (jnp.sum(mu[u] * mv[i], axis=-1) + mbu[u],), graph.users, graph.items)
    prec, h = _bias_update(graph.items, graph.n_items, _taus(state)[3][0], rest, lam2, gh, state.bv_prec,
                           state.bv_h, rho)
    return state._replace(bv_prec=prec, bv_h=h)


def update_hyper(state: RGState, hyper, rho=1.0) -> RGState:
    """The four Gamma factors (eq. 17): shape alpha + n/2, rate beta + 1/2 sum E[x^2] over the n
    coordinates each precision governs (I K, J K, I (0 when clamped), J); natural parameters blended by rho.

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    hyper : object
        Anything with ``alpha`` and ``beta`` (floats or 0-d arrays), e.g. `ppl_models.rg.RGHyper`.
    rho : float or jax.Array, shape (), default 1.0
        The Robbins-Monro weight in (0, 1].

    Returns
    -------
    RGState
        ``state`` with the eight 0-d ``tau_*_shape`` / ``tau_*_rate`` fields replaced.

    Raises
    ------
    AttributeError
        Not of its own: a ``hyper`` without ``alpha`` / ``beta``.

    Source: 003_203f63200c0d7157.txt eq. (17) and sec. 5.1 (rho blend).
    """
    (mu, su), (mv, sv), _, (mbv, sbv) = moments(state)
    on = state.user_bias_on
    mbu, sbu = state.bu_h / state.bu_prec, 1.0 / state.bu_prec
    a0, b0 = hyper.alpha, hyper.beta
    new = {
        "tau_u": (a0 + 0.5 * mu.size, b0 + 0.5 * jnp.sum(mu**2 + su)),
        "tau_v": (a0 + 0.5 * mv.size, b0 + 0.5 * jnp.sum(mv**2 + sv)),
        "tau_bu": (a0 + on * 0.5 * mbu.size, b0 + on * 0.5 * jnp.sum(mbu**2 + sbu)),
        "tau_bv": (a0 + 0.5 * mbv.size, b0 + 0.5 * jnp.sum(mbv**2 + sbv)),
    }
    out = {}
    for name, (sh, rt) in new.items():
        out[f"{name}_shape"] = rho * sh + (1.0 - rho) * getattr(state, f"{name}_shape")
        out[f"{name}_rate"] = rho * rt + (1.0 - rho) * getattr(state, f"{name}_rate")
    return state._replace(**out)


#: The blocks of one sweep in order: (name, update(state, graph, hyper, xi, rho), updated fields).
BLOCKS = (
    ("users", update_users, ("u_prec", "u_h")),
    ("user_bias", update_user_bias, ("bu_prec", "bu_h")),
    ("items", update_items, ("v_prec", "v_h")),
    ("item_bias", update_item_bias, ("bv_prec", "bv_h")),
)


_ORDERED = ("users", "items")  # the blocks that take the edge order


def _step(state, graph, hyper, rho, update_hyper_flag, order=None):
    for name, update, _ in BLOCKS:
        if name == "user_bias" and hyper.clamp_user_bias:
            continue
        extra = {"order": order} if name in _ORDERED else {}
        state = update(state, graph, hyper, edge_xi(state, graph), rho, **extra)
    if update_hyper_flag:
        state = update_hyper(state, hyper, rho)
    return state, RGInfo(elbo(state, graph, hyper))


_step_jit = jax.jit(_step, static_argnames=("hyper", "update_hyper_flag"))
_elbo_jit = jax.jit(elbo, static_argnums=2)


#: id(graph) -> (weak reference, (K, dtype), PairOrder): `step` sorts a graph's edges once
_ORDERS: dict = {}


def edge_order(graph: RGGraph, K: int, dtype, *, block_bytes: int = row_blocks.DEFAULT_BLOCK_BYTES, block=None):
    """The order of the graph's edges for the blocked vector updates (`update_users` /
    `update_items` ``order=``): `row_blocks.host_order`, a stable counting sort on the host, O(E),
    E_cap int32 per side (padding edges sort with user 0 / item 0 and weigh 0).

    Parameters
    ----------
    graph : RGGraph
        Numpy or jax leaves.
    K : int
        The latent dimension.
    dtype : numpy dtype
        The state's float dtype.
    block_bytes : int >= 1, keyword-only, default `row_blocks.DEFAULT_BLOCK_BYTES`
        As in `row_blocks.block_sizes`.
    block : None, int or pair (users, items), keyword-only
        As in `row_blocks.block_sizes`.

    Returns
    -------
    row_blocks.PairOrder
        The edge order for ``order=``.

    Raises
    ------
    ValueError
        From `row_blocks.block_sizes` (a bad ``block_bytes`` or ``block``).

    Source: project addition (issue 28).
    """
    return row_blocks.host_order(graph.users, graph.items, graph.n_users, graph.n_items, K, dtype=dtype,
                                 block_bytes=block_bytes, block=block)


def step(key, state: RGState, graph: RGGraph, hyper, rho=1.0, *, update_hyper: bool = True, order=None):
    """One mean-field sweep on the hidden graph ``graph``: users, user biases (skipped when clamped),
    items, item biases, each after recomputing the optimal xi (16) from the current q, then the
    Gamma factors (17); every block blended with weight ``rho``.

    With rho = 1 on a fixed graph each block is its exact coordinate maximizer, so L_xi at optimal
    xi never decreases (checked by `validation.models.rg.monotone_check`). With graphs H_t ~ q(H) and
    rho_t from `robbins_monro` it is the stochastic average of sec. 5.1.

    Parameters
    ----------
    key : object
        Unused (the graph is drawn outside, by numpy: `sample_hidden_graph`); kept for the common
        solver signature (may be None).
    state : RGState
        The variational parameters (shapes in its docstring).
    graph : RGGraph
        One hidden graph H of E_cap (padded) edges.
    hyper : ppl_models.rg.RGHyper
        Static: a hashable NamedTuple.
    rho : float or jax.Array, shape (), default 1.0
        The weight in (0, 1] of every block.
    update_hyper : bool, keyword-only, default True
        False holds q(tau) fixed.
    order : row_blocks.PairOrder, keyword-only, optional
        `edge_order` of ``graph`` (None: built on the first call for this graph object with the
        default memory bound and kept while it lives; inside a trace, built there).

    Returns
    -------
    state : RGState
        The new state.
    info : RGInfo
        With a 0-d ``elbo`` of the state's dtype.

    Raises
    ------
    ValueError
        Not of its own (no validation: `fit` validates): jax raises it for a ``hyper`` that does
        not hash (it is a static argument).
    AttributeError
        Not of its own: a ``hyper`` without ``alpha`` / ``beta`` / ``clamp_user_bias``.

    Source: 003_203f63200c0d7157.txt eqs. (13)-(17), sec. 5.1.
    """
    del key
    K, dtype = state.u_h.shape[1], np.dtype(state.u_h.dtype)
    if order is None and not isinstance(graph.users, jax.core.Tracer):
        order = row_blocks.cached_order(_ORDERS, graph, (K, dtype), lambda: edge_order(graph, K, dtype))
    return _step_jit(state, graph, hyper, jnp.asarray(rho, state.u_h.dtype), update_hyper, order)


def robbins_monro(t: int, tau0: float = 1.0, kappa: float = 0.7) -> float:
    """eps_t = (t + tau0)^-kappa, t = 0, 1, ...: sum eps = inf and sum eps^2 < inf for kappa in (0.5, 1]
    (sec. 5.1, Robbins and Monro). tau0 = 1 makes the first step exact (eps_0 = 1).

    Kept for callers of ``rg.robbins_monro``: it is `custom_inference.schedules.robbins_monro`
    (the one shared implementation).

    Parameters
    ----------
    t : int >= 0
        The number of earlier updates.
    tau0 : float > 0, default 1.0
        The delay.
    kappa : float >= 0, default 0.7
        The forgetting rate.

    Returns
    -------
    float
        eps_t.

    Raises
    ------
    ValueError
        As `custom_inference.schedules.robbins_monro`: non-real or out-of-range t, tau0, kappa.

    Source: 003_203f63200c0d7157.txt sec. 5.1.
    """
    return _robbins_monro(t, tau0, kappa)


# ---------------------------------------------------------------------------------------------
# predictions (eq. 19)


def like_probability(state: RGState, users, items):
    """p(g = 1 | h = 1) for index pairs, (E,): MacKay's sigma(mu_a / sqrt(1 + pi s_a^2 / 8)) with the
    mean and variance of a = u.v + b under q (eq. 19).

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    users : array-like, shape (E,), int
        User of each pair.
    items : array-like, shape (E,), int
        Item of each pair.

    Returns
    -------
    jax.Array, shape (E,), the state's float dtype
        The like probabilities, in (0, 1).

    Raises
    ------
    None of its own: indices out of range are not reported (jax clamps them).

    Source: 003_203f63200c0d7157.txt eq. (19) (MacKay's probit approximation).
    """
    mean, second = edge_moments(state, jnp.asarray(users), jnp.asarray(items))
    return mackay_probit(mean, jnp.maximum(second - mean**2, 0.0))


def score_users(state: RGState, users, *, kind: str = "like", pi=None) -> np.ndarray:
    """Ranking scores of every item for some users, (len(users), J), float (sec. 6.1.2).

    Parameters
    ----------
    state : RGState
        The variational parameters (shapes in its docstring).
    users : array-like, shape (B,), int
        Users to score, in [0, I).
    kind : {"like", "popularity", "popularity_like"}, keyword-only, default "like"
        "like": s = p(g = 1 | h = 1), eq. 19; "popularity": s = pi_n; "popularity_like":
        s = pi_n p(g = 1 | h = 1).
    pi : array-like, shape (J,), float, keyword-only, optional
        The histogram (`popularity_weights`, `histogram_of`), needed by the last two kinds.

    Returns
    -------
    numpy.ndarray, shape (B, J)
        float64 for "popularity" and "popularity_like", the state's float dtype for "like".

    Raises
    ------
    ValueError
        An unknown kind, missing or mis-shaped pi, or user indices out of range.

    Source: 003_203f63200c0d7157.txt eqs. (19)-(20) and sec. 6.1.2.
    """
    if kind not in ("like", "popularity", "popularity_like"):
        raise ValueError(f"kind must be 'like', 'popularity' or 'popularity_like', got {kind!r}")
    users = np.asarray(users)
    I, J = state.u_h.shape[0], state.v_h.shape[0]
    if users.size and (users.min() < 0 or users.max() >= I):
        raise ValueError(f"users index out of range [0, {I - 1}]")
    if kind != "like":
        if pi is None or np.shape(pi) != (J,):
            raise ValueError(f"pi of shape ({J},) is required for kind={kind!r}")
        pi = np.asarray(pi, np.float64)
        if kind == "popularity":
            return np.broadcast_to(pi, (users.size, J)).copy()
    (mu, su), (mv, sv), (mbu, sbu), (mbv, sbv) = moments(state)
    u = jnp.asarray(users)
    mean = mu[u] @ mv.T + mbu[u][:, None] + mbv[None, :]
    var = (mu[u] ** 2) @ sv.T + su[u] @ (mv**2).T + su[u] @ sv.T + sbu[u][:, None] + sbv[None, :]
    p = np.asarray(mackay_probit(mean, var))
    return p if kind == "like" else p * pi[None, :]


# ---------------------------------------------------------------------------------------------
# driver


def draws_from_q(seed: int, state: RGState, n_draws: int) -> dict[str, np.ndarray]:
    """Independent draws from q (numpy), for the ``posterior`` group of `fit`.

    Parameters
    ----------
    seed : int
        Seed of a numpy Generator (or anything `numpy.random.default_rng` takes).
    state : RGState
        The variational parameters (shapes in its docstring).
    n_draws : int >= 0
        Number of draws.

    Returns
    -------
    dict of str to numpy.ndarray, float64
        Each (1, n_draws, ...): u (I, K), v (J, K), b_user (I,), b_item (J,), tau_u, tau_v, tau_bu,
        tau_bv (); b_user is 0 (and tau_bu its prior) when clamped.

    Raises
    ------
    ValueError
        Not of its own: numpy raises it for a negative ``n_draws`` (or a Gamma shape <= 0, which a
        valid state does not have).

    Source: 003_203f63200c0d7157.txt eq. (6) (sampling q); the posterior group: project addition.
    """
    rng = np.random.default_rng(seed)
    (mu, su), (mv, sv), (mbu, sbu), (mbv, sbv) = (tuple(np.asarray(a, np.float64) for a in p) for p in moments(state))
    out = {}
    for name, m, s in (("u", mu, su), ("v", mv, sv), ("b_user", mbu, sbu), ("b_item", mbv, sbv)):
        out[name] = (m + np.sqrt(s) * rng.standard_normal((n_draws, *m.shape)))[None]
    for name in ("tau_u", "tau_v", "tau_bu", "tau_bv"):
        sh, rt = float(getattr(state, f"{name}_shape")), float(getattr(state, f"{name}_rate"))
        out[name] = (rng.standard_gamma(sh, size=n_draws) / rt)[None]
    return out


def fit(key, obs: Observations, K: int, hyper, *, max_iter: int = 200, tol: float = 1e-6,
        resample: bool = True, tau0: float = 1.0, kappa: float = 0.7, dtype=np.float64, n_draws: int = 100,
        progress: bool = True, init_state: RGState | None = None, update_hyper: bool = True,
        warm_start: int = DEFAULT_WARM_START, checkpoint=None, checkpoint_every: int = 10,
        resume: bool = False) -> base.FitResult:
    """Fit RG: mean-field VB over hidden graphs H_t ~ q(H) with Robbins-Monro weights (sec. 5.1).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed: the initial state (`base.as_key`); `vi_driver.host_seed`
        (key) seeds every graph draw and the draws from q (an int seed s and ``PRNGKey(s)`` agree).
    obs : Observations, shape (I, J)
        One-class: every stored value 1 (the edges of G), N entries.
    K : int >= 1
        Number of factors.
    hyper : ppl_models.rg.RGHyper
        alpha, beta, r (positive finite floats) and clamp_user_bias (bool).
    max_iter : int >= 1, keyword-only, default 200
        Number of sweeps (Robbins-Monro sweeps when resampling; the warm-start sweeps come on top).
    tol : float >= 0, keyword-only, default 1e-6
        Stop when the relative change of the ELBO on the fixed evaluation graph is below tol
        (checked in the Robbins-Monro phase only).
    resample : bool, keyword-only, default True
        True: a fresh H_t per sweep with eps_t = (t + tau0)^-kappa; False: batch VB on one fixed H
        (eps = 1, the ELBO never decreases).
    tau0 : float > 0, keyword-only, default 1.0
        Delay of the step sizes (`robbins_monro`).
    kappa : float in (0.5, 1], keyword-only, default 0.7
        Forgetting rate of the step sizes.
    dtype : numpy.float32 or numpy.float64, keyword-only, default float64
        Precision (float64 runs under jax.enable_x64).
    n_draws : int >= 0, keyword-only, default 100
        Draws from q stored in the ``posterior`` group (0: the means of q as one draw).
    progress : bool, keyword-only, default True
        tqdm progress bar with the ELBO.
    init_state : RGState, keyword-only, optional
        Resume from a state.
    update_hyper : bool, keyword-only, default True
        False holds q(tau) at its start (`step`).
    warm_start : int >= 0, keyword-only, default `DEFAULT_WARM_START` (30)
        With ``resample=True`` and no ``init_state``: that many exact batch sweeps (eps = 1) on the
        first sampled graph H_0 (the evaluation graph) *before* the ``max_iter`` Robbins-Monro
        sweeps over fresh graphs. 0 gives the paper's recipe from the small random start of `init`,
        which on small or sparse data collapses to the u = v = 0 solution (factors shrunk to ~0,
        the like probability an item-bias score; see the module docstring, "Warm start"). Ignored
        with ``resample=False`` or a given ``init_state`` (a resumed run is already warm).
    checkpoint : str or path-like, keyword-only, optional
        `vi_driver.fit` checkpoint of the Robbins-Monro (or batch) sweeps, with the graph RNG and
        the warm-start trace.
    checkpoint_every : int >= 1, keyword-only, default 10
        Sweeps between checkpoints.
    resume : bool, keyword-only, default False
        Continue from ``checkpoint`` when it exists (a resumed run skips the warm start and is bit
        for bit the uninterrupted one).

    Returns
    -------
    base.FitResult
        ``state`` (RGState); ``trace``: ELBO (n_warm + n_iter + 1,) on the evaluation graph, the
        warm-start sweeps first; ``idata`` with groups posterior, variational_parameters, vi_trace,
        histogram (pi (item), attr gamma: `histogram_of`); attrs: the layout of `vi_driver.fit`
        (``n_iter``: Robbins-Monro / batch sweeps; ``seconds``: their loop) plus gamma, tau0,
        kappa, ``warm_start`` (sweeps run) and ``seconds_warm_start``.

    Raises
    ------
    ValueError
        Non-binary obs (or an index out of range, NaN, duplicates, no entries:
        `Observations.validate`), bad hyper, K, max_iter, tol, tau0, kappa, warm_start, n_draws,
        dtype (`base.compute_dtype`); init_state of the wrong shape; a checkpoint of another run or
        damaged.
    TypeError
        ``obs`` not an Observations; a bad key.
    FloatingPointError
        A non-finite ELBO (try float64).
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`vi_driver.fit`).

    Source: 003_203f63200c0d7157.txt secs. 4.1 and 5.1; warm start: project addition.
    """
    seed = vi_driver.host_seed(key)
    if isinstance(obs, Observations):  # however built: ids in range, finite 0/1, no duplicates
        obs.validate("binary", name="obs", float_only=False)
    _check_binary(obs)
    _check_hyper(hyper)
    K = _check_K(K)
    if isinstance(max_iter, bool) or int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    check_robbins_monro(tau0, kappa)
    if isinstance(warm_start, bool) or int(warm_start) != warm_start or warm_start < 0:
        raise ValueError(f"warm_start must be an integer >= 0, got {warm_start!r}")
    warm_start = int(warm_start) if (resample and init_state is None) else 0
    if isinstance(n_draws, bool) or int(n_draws) != n_draws or n_draws < 0:
        raise ValueError(f"n_draws must be an integer >= 0, got {n_draws!r}")
    dtype = base.compute_dtype(dtype)
    rng = np.random.default_rng(seed)
    pi, gamma = popularity_weights(obs, hyper.r)
    with jax.enable_x64(dtype == np.float64):
        eval_graph = jax.tree_util.tree_map(jnp.asarray, sample_hidden_graph(rng, obs, pi, dtype=dtype))
        state = init(key, eval_graph, K, hyper, dtype=dtype)
        if init_state is not None:
            state = vi_driver.given_state(init_state, state, dtype)
        start = time.perf_counter()
        resuming = resume and checkpoint is not None and Path(checkpoint).exists()
        trace = [float(_elbo_jit(state, eval_graph, hyper))]
        if warm_start and not resuming:  # exact sweeps on H_0: leave the collapsed start behind (no tolerance stop)
            warm = vi_driver.run(lambda s, t: step(None, s, eval_graph, hyper, 1.0, update_hyper=update_hyper), state,
                                 max_iter=warm_start, tol=0.0, progress=progress, desc=f"RG warm start (K={K})",
                                 init_elbo=trace[0])
            state, trace = warm.state, list(warm.elbo)
        seconds_warm = time.perf_counter() - start

        def sweep(s, t):
            if not resample:  # batch VB on H_0: the step reports L_xi of the new state on H_0
                return step(None, s, eval_graph, hyper, 1.0, update_hyper=update_hyper)
            graph = jax.tree_util.tree_map(jnp.asarray, sample_hidden_graph(rng, obs, pi, dtype=dtype))
            return step(None, s, graph, hyper, robbins_monro(t, tau0, kappa), update_hyper=update_hyper)[0], None

        def save_extra():  # the graph stream and the warm-start trace: a resumed run skips the warm start
            return {"rng": np.asarray(json.dumps(rng.bit_generator.state)), "warm_trace": np.asarray(trace),
                    "warm_start": np.asarray(warm_start)}

        def restore_extra(extra):
            nonlocal trace, warm_start
            rng.bit_generator.state = json.loads(str(extra["rng"]))
            trace, warm_start = [float(v) for v in extra["warm_trace"]], int(extra["warm_start"])

        def posterior(state):
            if n_draws:
                return draws_from_q(seed, state, n_draws), "draws from q"
            (mu, _), (mv, _), (mbu, _), (mbv, _) = moments(state)
            taus = {n: getattr(state, f"{n}_shape") / getattr(state, f"{n}_rate")
                    for n in ("tau_u", "tau_v", "tau_bu", "tau_bv")}
            return (vi_driver.point_posterior({"u": mu, "v": mv, "b_user": mbu, "b_item": mbv, **taus}),
                    "mean of q (n_draws=0)")

        def full_trace(res):  # the warm-start sweeps, then the run (res.elbo[0] is the last value already in trace)
            return np.asarray(trace + list(res.elbo[1:]))

        I, J = obs.shape
        output = vi_driver.Output(
            "rg", "vb-random-graphs" if resample else "vb-fixed-graph", posterior,
            dims={"u": ["user", "factor"], "v": ["item", "factor"], "b_user": ["user"], "b_item": ["item"],
                  "u_prec": ["user", "factor"], "u_h": ["user", "factor"], "v_prec": ["item", "factor"],
                  "v_h": ["item", "factor"], "bu_prec": ["user"], "bu_h": ["user"], "bv_prec": ["item"],
                  "bv_h": ["item"], "elbo": ["iteration"], "pi": ["item"]},
            coords={"user": np.arange(I), "item": np.arange(J), "factor": np.arange(K)}, params=lambda s: s._asdict(),
            groups={"histogram": {"pi": pi}}, trace=lambda res: {"elbo": full_trace(res)}, result_trace=full_trace,
            source="003_203f63200c0d7157.txt eqs. 7-19 (eq. 9 corrected)",
            attrs=lambda res: {"gamma": float(gamma), "tau0": float(tau0), "kappa": float(kappa),
                               "warm_start": warm_start, "seconds_warm_start": float(seconds_warm)})
        options = vi_driver.FitOptions(max_iter=max_iter, tol=tol, progress=progress, checkpoint=checkpoint,
                                       checkpoint_every=checkpoint_every, resume=resume, dtype=dtype)
        return vi_driver.fit(ALGORITHM, eval_graph, options=options, output=output, key=key, K=K, hyper=hyper,
                             state=state, sweep=sweep, init_elbo=trace[-1],
                             evaluate=resample and (lambda s: _elbo_jit(s, eval_graph, hyper)), save_extra=save_extra,
                             restore_extra=restore_extra, desc=f"RG VB (K={K})", seed=seed)


#: ArviZ dims of every RGState field (the protocol's ``dims``).
STATE_DIMS = {"u_prec": ("user", "factor"), "u_h": ("user", "factor"), "v_prec": ("item", "factor"),
              "v_h": ("item", "factor"), "bu_prec": ("user",), "bu_h": ("user",), "bv_prec": ("item",),
              "bv_h": ("item",), **{f"tau_{n}_{p}": () for n in ("u", "v", "bu", "bv") for p in ("shape", "rate")},
              "user_bias_on": ()}

#: The protocol declaration (`custom_inference.base`): data of `step` / `elbo` is one hidden graph H.
ALGORITHM = base.Algorithm("rg-vb", "vi", init, step, elbo, "elbo", STATE_DIMS,
                           "003_203f63200c0d7157.txt secs. 4-5, eqs. 10-17 (eq. 9 corrected)").check()
