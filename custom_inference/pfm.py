r"""NPFM and PPFM: Gibbs samplers for Poisson factorization machines (truncated gamma process).

Source: ``004_90693a0965f06816.txt`` ch. 5, model eqs. 5.6 / 5.20, conditionals eqs. 5.7-5.19,
Lemmas 5.2.1-5.2.6; the feature layout of ch. 2 (eq. 2.17, fig. 2.1). The generative programs
are `ppl_models.pfm`. Every conditional below was derived here (not copied) and is checked
against the program's normalised conditional on a grid in `validation.models.pfm`.

Model (all Gammas shape/rate; i = 1..D features, k = 1..K factors, n = training rows)::

    alpha0 ~ Ga(a_0, b_0), beta0 ~ Ga(c_0, d_0), w0 ~ Ga(alpha0, beta0)
    alpha_i ~ Ga(a, b),  beta_i ~ Ga(c, d),  w_i ~ Ga(alpha_i, beta_i)
    zeta_i ~ Ga(e, f),   delta_k ~ Ga(g, h), v_ik ~ Ga(zeta_i, delta_k)
    NPFM: gamma0 ~ Ga(e_0, f_0), c ~ Ga(g_0, h_0), r_k ~ Ga(gamma0 / K, c)     (PPFM: r_k = 1)
    y_n ~ Pois(w0 + sum_i x_ni w_i + sum_k r_k sum_{i<j} x_ni x_nj v_ik v_jk)

Augmentation (Lemma 5.2.2): y_n = z1_n + sum_i z2_ni + sum_{i<j,k} z3_nijk. Only the sums
Z1 = sum_n z1_n, Z2_i = sum_n z2_ni, Z3_ik = sum_n sum_{j != i} z3_n{ij}k (each pair unit counts
for BOTH endpoints) and L_k = sum_n sum_{i<j} z3_nijk enter the conditionals, so z is never
stored: each unit of each count is allocated once and scattered into these sums.

Exposures (sums over ALL training rows, zeros included)::

    N = number of training rows,  X_i = sum_n x_ni,
    E_ik = sum_n x_ni (q_nk - x_ni v_ik)   with q_nk = sum_j x_nj v_jk,    m_ik = r_k E_ik,
    s_k  = sum_n sum_{i<j} x_ni x_nj v_ik v_jk

Conditionals (derived; one line each)::

    z_n | .        ~ Mult(y_n; w0, x_ni w_i, r_k x_ni x_nj v_ik v_jk) / rate_n       (5.7, y_n > 0 only)
    w0 | .         ~ Ga(alpha0 + Z1, beta0 + N)                                       (5.8)
    w_i | .        ~ Ga(alpha_i + Z2_i, beta_i + X_i)                                 (5.9)
    v_ik | .       ~ Ga(zeta_i + Z3_ik, delta_k + r_k E_ik)                           (5.10, both endpoints)
    r_k | .        ~ Ga(gamma0/K + L_k, c + s_k)                                      (5.11)
    beta0 | .      ~ Ga(c_0 + alpha0, d_0 + w0)                                       (5.12)
    beta_i | .     ~ Ga(c + alpha_i, d + w_i)                                         (5.13)
    delta_k | .    ~ Ga(g + sum_i zeta_i, h + sum_i v_ik)                             (5.14)
    c | .          ~ Ga(g_0 + gamma0, h_0 + sum_k r_k)                                (5.15)
    alpha0 | Z1, beta0 (w0 integrated out):   l ~ CRT(Z1, alpha0),
                   alpha0 ~ Ga(a_0 + l, b_0 + log(1 + N / beta0))                     (5.16)
    alpha_i | Z2_i, beta_i (w_i out): l_i ~ CRT(Z2_i, alpha_i),
                   alpha_i ~ Ga(a + l_i, b + log(1 + X_i / beta_i))                   (5.17)
    zeta_i | Z3_i., delta, r, V_-i (v_i. out): l_ik ~ CRT(Z3_ik, zeta_i),
                   zeta_i ~ Ga(e + sum_k l_ik, f + sum_k log(1 + r_k E_ik / delta_k)) (5.18)
    gamma0 | L, c, V (r out): l_k ~ CRT(L_k, gamma0/K),
                   gamma0 ~ Ga(e_0 + sum_k l_k, f_0 + (1/K) sum_k log(1 + s_k / c))    (5.19)

Sweep order. The four shape draws (5.16-5.19) are *collapsed*: they condition on the latent
counts with the rate variable (w0, w_i, v_i., r) integrated out. Such a draw is a valid Gibbs
step only as the first half of a block whose second half redraws that rate variable from its
conditional given the new shape; the chapter lists the shapes last, after their rates, which
leaves (shape, rate) jointly wrong (marginals right, dependence broken). The sweep here is::

    z | theta;  (alpha0, alpha, gamma0 collapsed) -> (w0, w, r);  (beta0, beta, delta, c);
    for each update block b: (zeta_b collapsed -> v_b.)

(independent draws share one Gamma call; delta and c may sit anywhere, they are exact
conditionals)
Each step draws from an exact conditional of the joint (parameters, z), so the sweep leaves
the posterior invariant (SBC in `validation.models.pfm`). ``order="printed"`` runs the chapter's
order instead (z, w0, w, v, r, beta0, beta, delta, c, alpha0, alpha, zeta, gamma0): the
deliberately broken variant that SBC must reject.

Scale move. The likelihood is flat along r_k -> a r_k, v_.k -> v_.k / sqrt(a) (PPFM, ids only:
user-side v_.k -> a v_.k, item-side / a), along which the Gibbs sweep moves in steps of order
1 / sqrt(counts) (issue 13); ``scale_rounds`` Metropolis steps of the exact group move of
`custom_inference.pfm_scale` follow each sweep (default in `sample`: `DEFAULT_SCALE_ROUNDS`; 4
steps cost about 0.3 ms at K = 50, D = 2,625 in float32, against about 0.13 s for the sweep).
NPFM's global move (c -> c / a with every r_k -> a r_k, V -> V / sqrt(a), delta -> sqrt(a) delta;
`custom_inference.pfm_scale.global_move`) follows with ``global_rounds`` steps (issue 26), and with
side features the per-factor user-against-item trade whose within-entity pair terms the id
weights absorb (`custom_inference.pfm_scale.trade_move`) with ``trade_rounds`` steps.

Blocks. v_i. for the features of one `fm_design.greedy_blocks` colour never share a training
row, so their conditionals are independent given the rest and drawn at once; the K factors of
one feature are independent given z. The exposures are recomputed (O(nnz K)) before each block.

Zeros. Default ``zeros="all"`` (for `PFMData.from_matrix`): every user-item cell that is not
excluded is a training row, with y = 0 where nothing was observed, as HPF does and as the
chapter's argument for Poisson sparsity (only y > 0 needs latent counts, "existing FM methods
... must iterate over both positive and negative samples") presumes; for implicit or count
data an unobserved cell *is* information. Cells passed in ``exclude`` (held-out or missing,
ch. 5.3.4) are not training rows. ``zeros="observed"`` makes the listed entries (including
explicit zeros) the only training rows, as in Gaussian FMs. In "all" mode every sum over the
I J cells is cached from per-entity sums (users' and items' feature rows, ``x_n = a_u + b_j``):
q_(u,j)k = A_uk + B_jk, so N, X_i, E_ik and s_k cost O((I + J) F K) plus O(K) per listed row
(positives and excluded cells); with side features all of these stay cached because each
feature belongs to the user side or the item side. Only the rows with y > 0 carry count units.
Work per sweep: O(N_L F K + T (F + log K) + B (nnz_entities + M F) K), T = total count, N_L
listed rows, B blocks, M = listed rows with c_n != 0 (``zeros="all"``: the excluded cells only,
`PFMData.weighted_rows`; ``zeros="observed"``: all listed rows). Memory: the allocation runs over
chunks of listed rows, each forming its rows' terms once and then allocating its own (contiguous)
units in sub-chunks, and the log joint's likelihood over the same row chunks (`allocate_chunks`,
issue 28), so beyond the data and the O(D K) state their extra memory is one chunk's (64 MiB by
default; small data such as MovieLens-100K at K 50 in float32 is 3 chunks). The CRT of the
collapsed shape draws (`crt`, `_crt_tables`) still lays out all 3 T customer slots at once (XLA
temp ~56 bytes per nonzero at T = 2 N_L, float32: the largest O(T) term left in a sweep).

Speed (issue 13 profile, ML-100K, K = 50, float32, one chain, CPU seconds per sweep): the
former sweep cost 0.38 s alone and 0.86 s under the driver's vmap over chains, because (i) the
exposures summed c_n times every listed row although c_n = 0 for every y > 0 cell in "all" mode
(now only the M rows with c_n != 0; the sums are unchanged, the skipped terms were exactly 0),
(ii) ``cumsum``-based pair sums over the feature axis fused badly under vmap (5-7 times slower
batched; now a loop over the static feature slots, additions only), (iii) the allocation's
running sums over the 1 + F + K terms used XLA's O(n^2) CPU cumsum and compared every unit
against all terms (now a scan and a binary search), (iv) the CRT's customer-to-element map was
a searchsorted over all 3 T positions (now a count of element starts). After: about 0.14 s,
batched or not.

Float32. Gamma shapes such as gamma0/K + 0 are tiny; `gamma_draw` draws log Ga(a) =
log Ga(a + 1) + log(U) / a and exponentiates, clamping at the smallest normal number, so a
draw never becomes 0 (log densities stay finite). CRT draws are exact (`crt`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from . import base, mcmc_driver
from .pfm_scale import global_move, scale_move, trade_available, trade_move
from .variates import crt, gamma_draw, gamma_log_draw  # noqa: F401 (public spelling pfm.crt etc. kept)
from .pfm_data import PFMData  # the data container (public spelling: pfm.PFMData)

__all__ = [
    "HYPER_FIELDS",
    "DEFAULT_SCALE_ROUNDS",
    "DEFAULT_GLOBAL_ROUNDS",
    "PFMData",
    "NPFMState",
    "PPFMState",
    "PFMInfo",
    "SuffStats",
    "Exposures",
    "check_hyper",
    "init",
    "init_npfm",
    "init_ppfm",
    "allocate",
    "allocate_chunks",
    "RNG_BLOCK",
    "ALLOCATE_BUDGET_BYTES",
    "exposures",
    "conditionals",
    "step",
    "step_printed",
    "block_pointers",
    "log_joint",
    "row_rates",
    "n_active",
    "sample",
    "sample_npfm",
    "sample_ppfm",
    "ALGORITHMS",
    "SPECS",
    "NPFM_ALGORITHM",
    "PPFM_ALGORITHM",
]

#: Scale-move steps per sweep in `sample` by default (see `custom_inference.pfm_scale`).
DEFAULT_SCALE_ROUNDS = 4

#: NPFM global-move steps per sweep in `sample` by default (`custom_inference.pfm_scale.global_move`).
DEFAULT_GLOBAL_ROUNDS = 0

#: Hyperparameter names (thesis names, ch. 5.3.1-5.3.2; a_i..f_i, g_k, h_k shared by all i, k).
HYPER_FIELDS = ("a_0", "b_0", "c_0", "d_0", "a", "b", "c", "d", "e", "f", "g", "h", "e_0", "f_0", "g_0", "h_0")


def check_hyper(hyper) -> None:
    """Raise ValueError unless ``hyper`` has every name in `HYPER_FIELDS`, each finite and > 0.

    Parameters
    ----------
    hyper : ppl_models.pfm.PFMHyper or object
        The 16 hyperparameters of `HYPER_FIELDS` as attributes (floats).

    Raises
    ------
    ValueError
        A field missing, or not finite and > 0 (named).
    TypeError
        A field that ``float`` does not take.

    Source: project addition.
    """
    for name in HYPER_FIELDS:
        if not hasattr(hyper, name):
            raise ValueError(f"hyper: missing field {name!r} (expected ppl_models.pfm.PFMHyper)")
        v = float(getattr(hyper, name))
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"hyper.{name} must be finite and > 0, got {v}")


# ---------------------------------------------------------------------------------------
# shared math (the random variates, crt / gamma_draw / gamma_log_draw, are in `custom_inference.variates`)


def _gamma_logpdf(x, shape, rate):
    return shape * jnp.log(rate) - gammaln(shape) + (shape - 1.0) * jnp.log(x) - rate * x


# ---------------------------------------------------------------------------------------
# state


class NPFMState(NamedTuple):
    """One NPFM draw, a NamedTuple (a JAX pytree); every field float32 or float64, one dtype.

    Parameters
    ----------
    w0, alpha0, beta0 : jax.Array, shape ()
        Global bias w0 ~ Ga(alpha0, beta0) and its shape and rate.
    w, alpha, beta : jax.Array, shape (D,)
        Feature biases w_i ~ Ga(alpha_i, beta_i) and their shapes and rates.
    V : jax.Array, shape (D, K)
        Factor loadings v_ik ~ Ga(zeta_i, delta_k).
    zeta : jax.Array, shape (D,)
        Shapes of the loadings, per feature.
    delta : jax.Array, shape (K,)
        Rates of the loadings, per factor.
    r : jax.Array, shape (K,)
        Factor weights r_k ~ Ga(gamma0 / K, c) (the truncated gamma process).
    gamma0, c : jax.Array, shape ()
        The gamma process's mass and rate.

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``004_90693a0965f06816.txt`` eq. 5.6 and ch. 5.3.1-5.3.2 (the model, module docstring).
    """

    w0: jax.Array
    alpha0: jax.Array
    beta0: jax.Array
    w: jax.Array
    alpha: jax.Array
    beta: jax.Array
    V: jax.Array
    zeta: jax.Array
    delta: jax.Array
    r: jax.Array
    gamma0: jax.Array
    c: jax.Array


class PPFMState(NamedTuple):
    """One PPFM draw: as `NPFMState` without r, gamma0, c (r_k = 1, eq. 5.20).

    Parameters
    ----------
    w0, alpha0, beta0 : jax.Array, shape ()
        As in `NPFMState`.
    w, alpha, beta : jax.Array, shape (D,)
        As in `NPFMState`.
    V : jax.Array, shape (D, K)
        As in `NPFMState`.
    zeta : jax.Array, shape (D,)
        As in `NPFMState`.
    delta : jax.Array, shape (K,)
        As in `NPFMState`.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``004_90693a0965f06816.txt`` eq. 5.20 (PPFM).
    """

    w0: jax.Array
    alpha0: jax.Array
    beta0: jax.Array
    w: jax.Array
    alpha: jax.Array
    beta: jax.Array
    V: jax.Array
    zeta: jax.Array
    delta: jax.Array


class PFMInfo(NamedTuple):
    """Per-sweep diagnostics of `step`.

    Parameters
    ----------
    log_joint : jax.Array, shape (), the state's dtype
        log p(y, all parameters) of the new state, -log y! included (`log_joint`; equals NumPyro's
        log density of `ppl_models.pfm.model`).
    n_active : jax.Array, shape (), int32
        Number of factors that received at least one count unit in the sweep's allocation.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    log_joint: jax.Array
    n_active: jax.Array


class SuffStats(NamedTuple):
    """Sums of the latent counts z of one allocation (`allocate`; module docstring).

    Parameters
    ----------
    z1 : jax.Array, shape (), float
        Z1 = sum_n z1_n, the units on w0.
    z2 : jax.Array, shape (D,), float
        Z2_i = sum_n z2_ni, the units on the linear terms.
    z3 : jax.Array, shape (D, K), float
        Z3_ik: the pair units of factor k with feature i as an endpoint (both endpoints counted).
    L : jax.Array, shape (K,), float
        L_k: the pair units of factor k.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: ``004_90693a0965f06816.txt`` eq. 5.7 (the augmentation of Lemma 5.2.2; sums as in the
    module docstring).
    """

    z1: jax.Array
    z2: jax.Array
    z3: jax.Array
    L: jax.Array


class Exposures(NamedTuple):
    """The exposures of the rate conditionals, summed over all training rows (`exposures`).

    Parameters
    ----------
    E : jax.Array, shape (D, K), float
        E_ik = sum_n x_ni (q_nk - x_ni v_ik), so that m_ik = r_k E_ik.
    s : jax.Array, shape (K,), float
        s_k = sum_n sum_{i<j} x_ni x_nj v_ik v_jk.

    Raises
    ------
    None of its own (a NamedTuple).

    Source: derived (module docstring, "Exposures"): the rates of ``004_90693a0965f06816.txt`` eqs.
    5.10-5.11.
    """

    E: jax.Array
    s: jax.Array


def _is_np(state) -> bool:
    return "r" in state._fields


def _r(state):
    return state.r if _is_np(state) else jnp.ones_like(state.delta)


def init(key, data: PFMData, K: int, hyper, *, variant: str = "npfm", init_scale: float = 0.1,
         init_shape: float | None = None, init_r: float | None = None, dtype=jnp.float64):
    """A dispersed start: shapes and rates at their prior means, w0, w, V = init_scale (0.5 + U),
    r_k = (0.5 + U) / K (NPFM). With ``init_shape``, V = init_scale G / init_shape with
    G ~ Gamma(init_shape) instead (a small shape gives sparse, asymmetric factors, which helps the
    chain find block structure). With ``init_r`` (NPFM), r_k = init_r (0.5 + U) instead: on the
    chapter's 60 x 90 two-block matrix the default r_k ~ 1 / K lets the count allocation give
    every unit to the linear terms and one factor, and the chain stays in that one-factor mode
    (r mass on 1 factor after 4,000 sweeps, held-out RMSE 1.48); with init_r = 1 (and
    init_scale = 1, init_shape = 0.3) 3 of 4 chains (seeds 0 and 1, 2 chains each) find both
    blocks (two factors carry the r mass, held-out RMSE 0.04).

    Parameters
    ----------
    key : jax.Array or int
        A JAX PRNG key or an integer seed (`base.as_key`).
    data : PFMData
        Only D = ``data.n_features`` is used.
    K : int >= 1
        Number of factors (the truncation level for NPFM).
    hyper : ppl_models.pfm.PFMHyper or object
        The fields of `HYPER_FIELDS`, each finite and > 0.
    variant : {"npfm", "ppfm"}, keyword-only
        Default "npfm"; ``init_r`` is ignored for PPFM, whose r_k = 1.
    init_scale : float > 0, keyword-only
        Scale of the initial w0, w, V (default 0.1).
    init_shape : float > 0, keyword-only, optional
        Draw V from the scaled Gamma above instead of the uniform.
    init_r : float > 0, keyword-only, optional
        NPFM: r_k = init_r (0.5 + U) instead of (0.5 + U) / K.
    dtype : numpy dtype, keyword-only
        float32 or float64 (default float64; `base.compute_dtype`).

    Returns
    -------
    NPFMState or PPFMState
        Shapes in the class docstrings, dtype ``dtype``.

    Raises
    ------
    ValueError
        K < 1 or not integral, an unknown ``variant``, ``hyper`` lacking a field or with one not
        finite and > 0; ``init_scale``, ``init_shape`` or ``init_r`` not finite and > 0; a ``dtype``
        other than float32 / float64.
    TypeError
        K not a number (`base.check_latent_dim`); ``key`` neither a PRNG key nor an integer
        (`base.as_key`).

    Source: project addition (the thesis initialises w, v, r "to a small positive value", ch. 5.4.6).
    """
    K = base.check_latent_dim(K)
    check_hyper(hyper)
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    for name, v in (("init_scale", init_scale), ("init_shape", init_shape), ("init_r", init_r)):
        if v is not None and not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be finite and > 0, got {v!r}")
    dtype = base.compute_dtype(dtype)
    D = data.n_features
    k1, k2, k3, k4 = jax.random.split(base.as_key(key), 4)
    h = hyper
    f = lambda v, *s: jnp.full(s, v, dtype)  # noqa: E731
    u = lambda k, *s: 0.5 + jax.random.uniform(k, s, dtype=dtype)  # noqa: E731
    common = dict(
        w0=(init_scale * u(k1)).astype(dtype), alpha0=f(h.a_0 / h.b_0), beta0=f(h.c_0 / h.d_0),
        w=init_scale * u(k2, D), alpha=f(h.a / h.b, D), beta=f(h.c / h.d, D),
        V=init_scale * (u(k3, D, K) if init_shape is None
                        else gamma_draw(k3, jnp.full((D, K), init_shape, dtype), jnp.asarray(init_shape, dtype))),
        zeta=f(h.e / h.f, D), delta=f(h.g / h.h, K))
    if variant == "ppfm":
        return PPFMState(**common)
    r = u(k4, K) / K if init_r is None else float(init_r) * u(k4, K)
    return NPFMState(**common, r=r, gamma0=f(h.e_0 / h.f_0), c=f(h.g_0 / h.h_0))


def init_npfm(key, data, K, hyper, **kw):
    """`init` with variant "npfm".

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    data : PFMData
        As in `init`.
    K : int >= 1
        As in `init`.
    hyper : ppl_models.pfm.PFMHyper or object
        As in `init`.
    **kw
        ``init_scale``, ``init_shape``, ``init_r``, ``dtype`` of `init`.

    Returns
    -------
    NPFMState
        w0 (), w (D,), V (D, K), r (K,), ... of ``dtype`` (see `init`).

    Raises
    ------
    ValueError
        As `init`: a bad K or hyper.
    TypeError
        As `init`: a bad K type or key; an unknown keyword.

    Source: project addition (as `init`).
    """
    return init(key, data, K, hyper, variant="npfm", **kw)


def init_ppfm(key, data, K, hyper, **kw):
    """`init` with variant "ppfm".

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    data : PFMData
        As in `init`.
    K : int >= 1
        As in `init`.
    hyper : ppl_models.pfm.PFMHyper or object
        As in `init`.
    **kw
        ``init_scale``, ``init_shape``, ``dtype`` of `init` (``init_r`` is ignored).

    Returns
    -------
    PPFMState
        w0 (), w (D,), V (D, K), ... of ``dtype`` (see `init`).

    Raises
    ------
    ValueError
        As `init`: a bad K or hyper.
    TypeError
        As `init`: a bad K type or key; an unknown keyword.

    Source: project addition (as `init`).
    """
    return init(key, data, K, hyper, variant="ppfm", **kw)


# ---------------------------------------------------------------------------------------
# rates, allocation, exposures


def _pairwise(u):
    """sum_{f<g} u_f u_g over axis -2 of u (..., F, K), cancellation-free: sum_f u_f p_f with the
    exclusive prefix p_f = u_1 + ... + u_{f-1} built by additions only (a sum of non-negative
    terms: relative error <= F eps). The former form sum_f u_f (cumsum_f - u_f) subtracted, and
    lost a small u_f next to a large later u_g entirely in float32 (u_f < 2^-24 u_g gives 0).
    A loop over the static F (feature slots per row, small) keeps XLA from materialising the
    (..., F, K) cumsum, which was slow under the driver's vmap over chains."""
    F = u.shape[-2]
    pre = u[..., 0, :]
    acc = jnp.zeros_like(pre)
    for f in range(1, F):
        acc = acc + u[..., f, :] * pre
        pre = pre + u[..., f, :]
    return acc


def _running_sums(x):
    """Running sums along axis 0 of x (n, ...), by sequential additions (n static and small:
    features or terms of a row). Of non-negative terms they are non-decreasing, which the
    allocation's binary search needs (XLA's cumsum on the CPU is a reduce_window, O(n^2), and its
    tree order does not promise that)."""
    if x.shape[0] <= 4:  # unrolled (XLA fuses the chain; its recomputation is small here)
        out = [x[0]]
        for i in range(1, x.shape[0]):
            out.append(out[-1] + x[i])
        return jnp.stack(out)
    # a scan, not an unrolled chain: fused into one expression, the chain is recomputed per
    # output (O(n^2) again; measured 0.07 s for (53, 100,000))

    def add(c, xi):
        c = c + xi
        return c, c

    return jax.lax.scan(add, jnp.zeros_like(x[0]), x)[1]


def row_rates(state, feat, val):
    """Poisson rates (R,) of rows given as padded feature tables feat (R, F) int, val (R, F).

    rate = w0 + sum_f x_f w_f + sum_k r_k sum_{f<g} x_f x_g v_fk v_gk (eqs. 5.6 / 5.20).

    Parameters
    ----------
    state : NPFMState or PPFMState
        w0 (), w (D,), V (D, K) (and r (K,) for NPFM).
    feat : jax.Array, shape (R, F), int
        Padded feature ids of the R rows (any leading shape (...) works).
    val : jax.Array, shape (R, F), float
        Their values (0 in padding).

    Returns
    -------
    jax.Array, shape (R,), the state's dtype
        The Poisson rates.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20.
    """
    u = val[..., None] * state.V[feat]
    return state.w0 + jnp.sum(val * state.w[feat], axis=-1) + _pairwise(u) @ _r(state)


#: Units per random-number block of `allocate`: unit t always takes its three uniforms from
#: ``uniform(fold_in(key, t // RNG_BLOCK), (3, RNG_BLOCK))[:, t % RNG_BLOCK]``, whatever the chunks,
#: so every chunking gives the same draws bit for bit.
RNG_BLOCK = 32

#: Default bound on the bytes of one chunk of `allocate` and of `log_joint`'s likelihood sum
#: (`allocate_chunks`): 64 MiB.
ALLOCATE_BUDGET_BYTES = 64 << 20


def _row_bytes(F: int, K: int, itemsize: int) -> int:
    """Bytes per listed row of one `allocate` row chunk, an upper count of its (rows, .) temporaries:
    the feature indices and values (2 F), the gathered factors u (F K), the linear terms (F), the pair
    sums (K), the row's terms and their running sums (2 (1 + F + K)), and 4 scalars (count, masks)."""
    return int(itemsize) * (F * K + K + 2 * (1 + F + K) + 3 * F + 4)


def _unit_bytes(F: int, itemsize: int) -> int:
    """Bytes per unit slot of one `allocate` unit sub-chunk, an upper count of its (units, .)
    temporaries: the uniforms (3), the unit's feature indices, values, factor values and the two
    endpoint weight sums (5 F), and 16 scalars (row, search bounds, term, factor, masks, indices)."""
    return int(itemsize) * (3 + 5 * F + 16)


def allocate_chunks(n_rows: int, n_units: int, F: int, K: int, dtype,
                    budget_bytes: int = ALLOCATE_BUDGET_BYTES) -> tuple[int, int]:
    """Listed rows per chunk and units per sub-chunk of `allocate` (the rows per chunk also serve
    `log_joint`'s likelihood sum) for a memory budget.

    If all rows and units fit (``n_rows`` x `_row_bytes` + ``n_units`` x `_unit_bytes`, units
    rounded up to a multiple of `RNG_BLOCK`, <= ``budget_bytes``), one chunk: (``n_rows``, that
    rounded ``n_units``), the unchunked computation. Otherwise 3/4 of the budget bounds the rows per
    chunk (spread evenly: ceil(n_rows / chunks)) and the sub-chunk is the smaller of the remaining
    1/4's worth of units and a quarter of a chunk's average units (so a chunk's last, partly masked
    sub-chunk wastes about 1/8 of its unit work on average), a multiple of `RNG_BLOCK`, at least
    `RNG_BLOCK`.

    Parameters
    ----------
    n_rows : int >= 0
        N_L, the listed rows.
    n_units : int >= 0
        T, the count units.
    F : int >= 1
        Feature slots per row.
    K : int >= 1
        Factors.
    dtype : numpy dtype
        The float dtype of the data.
    budget_bytes : int > 0
        The memory bound (default `ALLOCATE_BUDGET_BYTES`).

    Returns
    -------
    rows : int >= 1
        Listed rows per chunk.
    units : int >= `RNG_BLOCK`
        Units per sub-chunk, a multiple of `RNG_BLOCK`.

    Raises
    ------
    ValueError
        ``budget_bytes`` <= 0, F < 1 or K < 1.
    TypeError
        ``dtype`` not a numpy dtype (numpy's).

    Source: project addition (issue 28).
    """
    if int(budget_bytes) <= 0 or int(F) < 1 or int(K) < 1:
        raise ValueError(f"allocate_chunks: need budget_bytes > 0, F >= 1, K >= 1; got {budget_bytes}, {F}, {K}")
    B = RNG_BLOCK
    itemsize = np.dtype(dtype).itemsize
    rb, ub = _row_bytes(int(F), int(K), itemsize), _unit_bytes(int(F), itemsize)
    N, T = max(1, int(n_rows)), max(1, int(n_units))
    T_up = -(-T // B) * B
    if N * rb + T_up * ub <= int(budget_bytes):
        return N, T_up
    n_chunks = -(-N // max(1, int(budget_bytes) * 3 // 4 // rb))
    R = -(-N // n_chunks)
    W_budget = int(budget_bytes) // 4 // ub // B * B
    W_avg = -(-(-(-T * R // N)) // (4 * B)) * B  # a quarter of a chunk's mean units, rounded up
    return R, max(B, min(W_budget, W_avg, T_up))


def allocate(key, state, data: PFMData, *, chunks: tuple[int, int] | None = None) -> SuffStats:
    r"""Draw the latent counts z | y, parameters (eq. 5.7) and return only their sums.

    Each of the T units of count of a listed row picks one term of its rate: w0, x_nf w_f, or
    factor k with probability prop. to r_k sum_{f<g} u_f u_g (u_f = x_nf v_fk); a factor unit
    then picks its pair {f, g} with probability u_f u_g / sum_{f'<g'} u_f' u_g' exactly, as
    first endpoint f ~ u_f (S - u_f) and second g ~ u_g (g != f) (S = sum u; the product is
    u_f u_g / (2 P), symmetric). Both endpoints get the unit in Z3. The term of a unit is found by
    binary search in its row's running sums of the 1 + F + K terms (built once per listed row, by
    additions only, so they are non-decreasing), and S - u_f is formed as the sum of the other
    u_g (no subtraction, no cancellation). Work O(N_L F K + T (F + log K)).

    Chunks (issue 28): the listed rows are taken ``R`` at a time (a ``fori_loop`` over chunks, the
    last masked beyond N_L); a chunk forms its rows' terms and running sums once, then allocates its
    own units, which are contiguous because units are stored in row order (`PFMData`: unit_row is
    non-decreasing over the sum(y) real units; padding units of ``pad_units`` come after them and
    are never visited), ``W`` units at a time (a loop whose trip count is the chunk's units / W,
    the last sub-chunk masked). Extra memory: about R x `_row_bytes` + W x `_unit_bytes` bytes plus
    the O(D K) sums, not ~400 bytes per nonzero (F = 2, K = 50, float32) for all rows' (F, K)
    gathers and running sums at once. Small data is one chunk (`allocate_chunks`): no loop.

    Random numbers: unit t takes its three uniforms from block t // `RNG_BLOCK` of the key (see
    `RNG_BLOCK`), so the sums do not depend on the chunking, bit for bit. (The stream differs from
    the code before issue 28, which drew ``uniform(key, (3, T))``: draws for a given key differ from
    that version, with the same distribution.) The sums are accumulated as int32 (exact up to
    2^31 - 1 units; float32 sums stop counting single units above 2^24) and returned in the data's
    float dtype.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    state : NPFMState or PPFMState
        The current parameters.
    data : PFMData
        N_L listed rows with T count units (``unit_weight`` 0 or 1).
    chunks : tuple of two int, keyword-only, optional
        (R, W): rows per chunk (>= 1) and units per sub-chunk (a positive multiple of `RNG_BLOCK`);
        None (default): `allocate_chunks` (N_L, T, F, K, dtype), at most `ALLOCATE_BUDGET_BYTES`.

    Returns
    -------
    SuffStats
        z1 (), z2 (D,), z3 (D, K), L (K,), dtype of ``data.row_val``.

    Raises
    ------
    ValueError
        ``chunks`` that are not (int >= 1, positive multiple of `RNG_BLOCK`) (no other checks:
        traced code).

    Source: ``004_90693a0965f06816.txt`` eq. 5.7 (augmentation of Lemma 5.2.2); chunking and keying
    are a project addition.
    """
    feat_all, val_all = data.row_feat, data.row_val
    dtype = val_all.dtype
    K = state.V.shape[1]
    N, F = feat_all.shape
    D = data.n_features
    T = int(data.unit_row.shape[0])
    R, W = allocate_chunks(N, T, F, K, dtype) if chunks is None else chunks
    if int(R) != R or R < 1 or int(W) != W or W < RNG_BLOCK or W % RNG_BLOCK:
        raise ValueError(f"allocate: chunks must be (rows >= 1, units a positive multiple of RNG_BLOCK = "
                         f"{RNG_BLOCK}), got {chunks!r}")
    R, W = int(min(R, max(N, 1))), int(W)
    zero = SuffStats(jnp.zeros((), jnp.int32), jnp.zeros(D, jnp.int32), jnp.zeros(D * K, jnp.int32),
                     jnp.zeros(K, jnp.int32))
    if T == 0 or N == 0:
        return SuffStats(*(a.astype(dtype) for a in zero._replace(z3=zero.z3.reshape(D, K))))
    r = _r(state)
    n_terms = 1 + F + K
    n_search = int(np.ceil(np.log2(n_terms + 1)))

    def uniforms(t0):
        """(3, W) uniforms of units t0 .. t0 + W - 1: blocks t0 // B .. of the key."""
        B = RNG_BLOCK
        aligned = isinstance(t0, int) and t0 % B == 0
        nb = W // B + (0 if aligned else 1)
        U = jax.vmap(lambda b: jax.random.uniform(jax.random.fold_in(key, b), (3, B), dtype=dtype))(
            t0 // B + jnp.arange(nb, dtype=jnp.int32))
        U = jnp.transpose(U, (1, 0, 2)).reshape(3, nb * B)
        return U if aligned else jax.lax.dynamic_slice_in_dim(U, t0 % B, W, axis=1)

    def units(t0, end, row0, feat, val, flat, acc):
        """Allocate units t0 .. t0 + W - 1 (masked at ``end``) of the chunk whose first row is row0,
        rows' features feat, val (R, F) and term-major running sums ``flat`` ((1 + F + K) R,)."""
        idx = t0 + jnp.arange(W, dtype=jnp.int32)
        valid = idx < end  # the chunk's last sub-chunk runs past its units: masked
        idx = jnp.minimum(idx, T - 1)
        rows = jnp.clip(data.unit_row[idx] - row0, 0, R - 1)  # the unit's row within the chunk
        one = jnp.where(valid, data.unit_weight[idx], 0).astype(jnp.int32)
        U = uniforms(t0)
        x = U[0] * flat[(n_terms - 1) * R + rows]
        # cat = #{terms c : cum_c <= x} (first c with cum_c > x), by binary search on each unit's row
        lo, hi = jnp.zeros(W, jnp.int32), jnp.full((W,), n_terms, jnp.int32)
        for _ in range(n_search):
            mid = (lo + hi) // 2
            go = (flat[jnp.minimum(mid, n_terms - 1) * R + rows] <= x) & (mid < hi)
            lo, hi = jnp.where(go, mid + 1, lo), jnp.where(go, hi, mid)
        cat = jnp.minimum(lo, n_terms - 1)
        is0 = cat == 0
        islin = (cat >= 1) & (cat <= F)
        ispair = cat > F
        f_lin = jnp.clip(cat - 1, 0, F - 1)
        k = jnp.clip(cat - 1 - F, 0, K - 1)
        z1 = acc.z1 + jnp.sum(jnp.where(is0, one, 0), dtype=jnp.int32)
        frows = feat[rows]  # (W, F)
        z2 = acc.z2.at[jnp.take_along_axis(frows, f_lin[:, None], axis=1)[:, 0]].add(jnp.where(islin, one, 0))
        wpair = jnp.where(ispair, one, 0)
        L = acc.L.at[k].add(wpair)
        uk = val[rows] * state.V[frows, k[:, None]]  # (W, F)
        # first endpoint f ~ u_f (S - u_f), with S - u_f = (prefix + suffix without f): no subtraction
        cols = [uk[:, f] for f in range(F)]
        pre = [jnp.zeros_like(cols[0])]
        for f in range(1, F):
            pre.append(pre[-1] + cols[f - 1])
        suf = [jnp.zeros_like(cols[0])]
        for f in range(F - 2, -1, -1):
            suf.insert(0, suf[0] + cols[f + 1])
        w1 = _running_sums(jnp.stack([cols[f] * (pre[f] + suf[f]) for f in range(F)]))  # (F, W)
        a = jnp.minimum(jnp.sum(w1 <= U[1] * w1[F - 1], axis=0), F - 1)
        # second endpoint g ~ u_g, g != f
        w2 = _running_sums(jnp.where(jnp.arange(F)[:, None] == a[None, :], 0.0, uk.T))  # (F, W)
        b = jnp.minimum(jnp.sum(w2 <= U[2] * w2[F - 1], axis=0), F - 1)
        fa = jnp.take_along_axis(frows, a[:, None], axis=1)[:, 0]
        fb = jnp.take_along_axis(frows, b[:, None], axis=1)[:, 0]
        z3 = acc.z3.at[fa * K + k].add(wpair).at[fb * K + k].add(wpair)
        return SuffStats(z1, z2, z3, L)

    def row_chunk(c, carry):
        """Rows c R .. c R + R - 1 (masked at N_L): their terms once, then their units, whose first is
        ``start`` (the carried count of the earlier chunks' units)."""
        acc, start = carry
        row0 = c * R
        ridx = row0 + jnp.arange(R, dtype=jnp.int32)
        rvalid = ridx < N  # the last chunk runs past N_L: masked
        ridx = jnp.minimum(ridx, N - 1)
        feat, val = feat_all[ridx], val_all[ridx]  # (R, F)
        end = start + jnp.sum(jnp.where(rvalid, jnp.round(data.row_y[ridx]), 0).astype(jnp.int32), dtype=jnp.int32)
        u = val[..., None] * state.V[feat]  # (R, F, K)
        lin = val * state.w[feat]  # (R, F)
        pair = _pairwise(u) * r  # (R, K)
        # the rate's terms of each row, term-major (1 + F + K, R), and their running sums
        # (additions only: non-decreasing along the terms, which the search relies on)
        terms = jnp.concatenate([jnp.broadcast_to(state.w0, (1, R)).astype(dtype), lin.T, pair.T], axis=0)
        flat = _running_sums(terms).reshape(-1)
        if R >= N and W >= T:  # one chunk, one sub-chunk: no loop
            return units(0, end, 0, feat, val, flat, acc), end
        acc = jax.lax.fori_loop(0, (end - start + W - 1) // W,
                                lambda j, a: units(start + j * W, end, row0, feat, val, flat, a), acc)
        return acc, end

    n_chunks = -(-N // R)
    start0 = jnp.zeros((), jnp.int32)
    if n_chunks == 1:
        out, _ = row_chunk(0, (zero, start0))
    else:
        out, _ = jax.lax.fori_loop(0, n_chunks, row_chunk, (zero, start0))
    return SuffStats(out.z1.astype(dtype), out.z2.astype(dtype), out.z3.reshape(D, K).astype(dtype),
                     out.L.astype(dtype))


def exposures(state, data: PFMData) -> Exposures:
    r"""E_ik = sum_n x_ni (q_nk - x_ni v_ik) and s_k = sum_n sum_{i<j} x_ni x_nj v_ik v_jk over
    all training rows, from caches (module docstring): grid part over the I + J entities plus
    c_n times each listed row. O((nnz_entities + N_L F) K); never an I x J array.

    Parameters
    ----------
    state : NPFMState or PPFMState
        Its V (D, K) is used.
    data : PFMData
        The training rows (and, in "all" mode, the entity tables).

    Returns
    -------
    Exposures
        E (D, K), s (K,), dtype of the state.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: derived (module docstring, "Exposures"): the rates of ``004_90693a0965f06816.txt``
    eqs. 5.10-5.11.
    """
    V = state.V
    D, K = V.shape
    feat, val, c = data.row_feat, data.row_val, data.row_weight
    if data.weighted_rows is not None:  # "all" mode: only the excluded cells have c_n != 0
        w = data.weighted_rows
        feat, val, c = feat[w], val[w], c[w]
    u = val[..., None] * V[feat]  # (M, F, K)
    q = jnp.sum(u, axis=1)
    contrib = (c[:, None, None] * val[..., None]) * (q[:, None, :] - u)
    E = jax.ops.segment_sum(contrib.reshape(-1, K), feat.reshape(-1), num_segments=D)
    s = jnp.sum(c[:, None] * _pairwise(u), axis=0)
    if data.grid:
        I = data.n_users
        ef, ev = data.ent_feat, data.ent_val
        ue = ev[..., None] * V[ef]  # (E, Fe, K)
        Q = jnp.sum(ue, axis=1)
        Pe = _pairwise(ue)
        Asum, Bsum = jnp.sum(Q[:I], axis=0), jnp.sum(Q[I:], axis=0)
        is_user = (jnp.arange(ef.shape[0]) < I)[:, None]
        partner_sum = jnp.where(is_user, Bsum[None, :], Asum[None, :])  # (E, K)
        n_p = data.ent_partners[:, None, None]
        ce = ev[..., None] * (n_p * (Q[:, None, :] - ue) + partner_sum[:, None, :])
        E = E + jax.ops.segment_sum(ce.reshape(-1, K), ef.reshape(-1), num_segments=D)
        s = s + Asum * Bsum + data.n_items * jnp.sum(Pe[:I], axis=0) + I * jnp.sum(Pe[I:], axis=0)
    return Exposures(E, s)


def conditionals(state, stats: SuffStats, expo: Exposures, data: PFMData, hyper) -> dict:
    """(shape, rate) of every Gamma conditional given z (sums ``stats``) and the exposures
    ``expo`` of ``state`` (module docstring; eqs. 5.8-5.15 as derived). Rate variables:
    "w0", "w", "V", "r" (NPFM); their rates: "beta0", "beta", "delta", "c" (NPFM).
    The collapsed shape conditionals need CRT counts and are in `shape_conditionals`.

    Parameters
    ----------
    state : NPFMState or PPFMState
        The current parameters.
    stats : SuffStats
        The latent-count sums of `allocate`.
    expo : Exposures
        `exposures` of ``state``.
    data : PFMData
        Gives N (``n_train``) and X_i (``x_sum``).
    hyper : ppl_models.pfm.PFMHyper or object
        The fields of `HYPER_FIELDS`.

    Returns
    -------
    dict of str to tuple of jax.Array
        name -> (shape, rate), each of its variable's shape (w0 (), w (D,), V (D, K), r (K,),
        beta0 (), beta (D,), delta (K,), c ()), dtype of the state.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eqs. 5.8-5.15 (as derived in the module docstring).
    """
    h = hyper
    r = _r(state)
    out = {
        "w0": (state.alpha0 + stats.z1, state.beta0 + data.n_train),
        "w": (state.alpha + stats.z2, state.beta + data.x_sum),
        "V": (state.zeta[:, None] + stats.z3, state.delta[None, :] + r[None, :] * expo.E),
        "beta0": (h.c_0 + state.alpha0, h.d_0 + state.w0),
        "beta": (h.c + state.alpha, h.d + state.w),
        "delta": (h.g + jnp.sum(state.zeta) + 0 * state.delta, h.h + jnp.sum(state.V, axis=0)),
    }
    if _is_np(state):
        K = state.r.shape[0]
        out["r"] = (state.gamma0 / K + stats.L, state.c + expo.s)
        out["c"] = (h.g_0 + state.gamma0, h.h_0 + jnp.sum(state.r))
    return out


def shape_conditionals(state, stats: SuffStats, expo: Exposures, data: PFMData, hyper, tables: dict) -> dict:
    """(shape, rate) of the collapsed shape conditionals given CRT table counts ``tables``
    ("alpha0" (), "alpha" (D,), "zeta" (D, K), "gamma0" (K,)) (eqs. 5.16-5.19, corrected
    notation: -log(1 - p) = log(1 + exposure / rate))."""
    h = hyper
    r = _r(state)
    out = {
        "alpha0": (h.a_0 + tables["alpha0"], h.b_0 + jnp.log1p(data.n_train / state.beta0)),
        "alpha": (h.a + tables["alpha"], h.b + jnp.log1p(data.x_sum / state.beta)),
        "zeta": (h.e + jnp.sum(tables["zeta"], axis=1),
                 h.f + jnp.sum(jnp.log1p(r[None, :] * expo.E / state.delta[None, :]), axis=1)),
    }
    if _is_np(state):
        K = state.r.shape[0]
        out["gamma0"] = (h.e_0 + jnp.sum(tables["gamma0"]), h.f_0 + jnp.sum(jnp.log1p(expo.s / state.c)) / K)
    return out


def _draw(key, sr):
    return gamma_draw(key, *sr)


def _draw_many(key, pairs):
    """Independent Gamma draws for several (shape, rate) pairs in ONE `gamma_draw` call (fewer
    call sites, faster compilation); returns the draws in the pairs' shapes."""
    shapes, rates, sizes, dims = [], [], [], []
    for sh, rt in pairs:
        bshape = jnp.broadcast_shapes(jnp.shape(sh), jnp.shape(rt))
        shapes.append(jnp.broadcast_to(sh, bshape).reshape(-1))
        rates.append(jnp.broadcast_to(rt, bshape).reshape(-1))
        sizes.append(int(np.prod(bshape, dtype=np.int64)))
        dims.append(bshape)
    dtype = jnp.result_type(*shapes)
    x = gamma_draw(key, jnp.concatenate(shapes).astype(dtype), jnp.concatenate(rates).astype(dtype))
    out, o = [], 0
    for n, dm in zip(sizes, dims):
        out.append(x[o:o + n].reshape(dm))
        o += n
    return out


def _crt_tables(key, state, stats: SuffStats, data: PFMData) -> dict:
    """All CRT counts of a sweep in one `crt` call: alpha0 (), alpha (D,), zeta (D, K) and,
    for NPFM, gamma0 (K,). Total customers Z1 + sum Z2 + sum Z3 + sum L <= 3 T."""
    D, K = state.V.shape
    parts = [(stats.z1, state.alpha0), (stats.z2, state.alpha), (stats.z3, jnp.broadcast_to(state.zeta[:, None], (D, K)))]
    if _is_np(state):
        parts.append((stats.L, jnp.broadcast_to(state.gamma0 / K, (K,))))
    counts = jnp.concatenate([jnp.reshape(m, -1) for m, _ in parts])
    conc = jnp.concatenate([jnp.reshape(r, -1) for _, r in parts])
    t = crt(key, counts, conc, 3 * data.n_units)
    out = {"alpha0": t[0], "alpha": t[1:1 + D], "zeta": t[1 + D:1 + D + D * K].reshape(D, K)}
    if _is_np(state):
        out["gamma0"] = t[1 + D + D * K:]
    return out


def _block_update(key, state, stats, data, hyper, tables, b: int):
    """(zeta_i -> v_i.) for the features of block b (collapsed zeta, then v | zeta)."""
    expo = exposures(state, data)
    k1, k2 = jax.random.split(key)
    in_b = (data.block == b)
    zeta_new = jnp.where(in_b, _draw(k1, shape_conditionals(state, stats, expo, data, hyper, tables)["zeta"]),
                         state.zeta)
    state = state._replace(zeta=zeta_new)
    V_new = jnp.where(in_b[:, None], _draw(k2, conditionals(state, stats, expo, data, hyper)["V"]), state.V)
    return state._replace(V=V_new)


def block_pointers(data: PFMData) -> tuple[int, ...] | None:
    """Host-side pointers of the update blocks when each block is one contiguous run of features.

    Pass the result to `step` (``block_ptr``): each block's zeta and V draws then cover only its own
    D_b features, static slices, instead of D per block (NPFM at 1e6 Netflix shape: two (D, K) Gamma
    draws a sweep instead of four).

    Parameters
    ----------
    data : PFMData
        Its ``block`` (D,) int32 must be a host (or concrete device) array, not traced.

    Returns
    -------
    tuple of int, or None
        ``data.n_blocks + 1`` Python ints p with block b = features p[b] .. p[b + 1] - 1 when
        ``block`` is non-decreasing and every block is non-empty (ids designs: users, then items;
        `fm_design.greedy_blocks` numbers the blocks of group 0 first), else None (the sweep then
        uses the masked update over all D features).

    Raises
    ------
    TypeError
        ``data.block`` is traced (compute the pointers once, outside jit).

    Source: project addition (issue 28).
    """
    if isinstance(data.block, jax.core.Tracer):
        raise TypeError("block_pointers: data.block is traced; compute the pointers once on the host, outside jit")
    block = np.asarray(data.block)
    if block.size == 0 or np.any(np.diff(block) < 0):
        return None
    counts = np.bincount(block, minlength=data.n_blocks)
    if counts.size != data.n_blocks or np.any(counts == 0):
        return None
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(counts)]))


def _block_update_slice(key, state, stats, data, hyper, tables, lo: int, hi: int):
    """`_block_update` for the block of features lo .. hi - 1 (static ints): the same conditionals,
    drawn for the block's features only (its share of the key stream: one (hi - lo,) zeta draw and
    one (hi - lo, K) V draw instead of (D,) and (D, K) masked)."""
    expo = exposures(state, data)
    k1, k2 = jax.random.split(key)
    sh, rt = shape_conditionals(state, stats, expo, data, hyper, tables)["zeta"]
    state = state._replace(zeta=state.zeta.at[lo:hi].set(_draw(k1, (sh[lo:hi], rt[lo:hi]))))
    sh, rt = conditionals(state, stats, expo, data, hyper)["V"]
    return state._replace(V=state.V.at[lo:hi].set(_draw(k2, (sh[lo:hi], rt[lo:hi]))))


def n_active(stats: SuffStats) -> jax.Array:
    """Number of factors with at least one allocated unit (int32).

    Parameters
    ----------
    stats : SuffStats
        Its L (K,) is used.

    Returns
    -------
    jax.Array, shape (), int32
        #{k : L_k > 0}.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    return jnp.sum(stats.L > 0).astype(jnp.int32)


def _sweep_valid(key, state, data: PFMData, hyper, block_ptr=None):
    """z; (alpha0 -> w0), (alpha -> w), NPFM (gamma0 -> r): shapes then rates; beta0, beta,
    delta, c; then (zeta_b -> v_b.) block by block. Independent draws share one Gamma call.
    ``block_ptr`` (`block_pointers`): static slices per block (a Python loop, B traced copies)."""
    keys = jax.random.split(key, 6)
    np_ = _is_np(state)
    stats = allocate(keys[0], state, data)
    tables = _crt_tables(keys[1], state, stats, data)
    expo = exposures(state, data)
    sc = shape_conditionals(state, stats, expo, data, hyper, tables)
    names = ["alpha0", "alpha"] + (["gamma0"] if np_ else [])
    state = state._replace(**dict(zip(names, _draw_many(keys[2], [sc[n] for n in names]))))
    cond = conditionals(state, stats, expo, data, hyper)
    names = ["w0", "w"] + (["r"] if np_ else [])
    state = state._replace(**dict(zip(names, _draw_many(keys[3], [cond[n] for n in names]))))
    cond = conditionals(state, stats, expo, data, hyper)
    names = ["beta0", "beta", "delta"] + (["c"] if np_ else [])
    state = state._replace(**dict(zip(names, _draw_many(keys[4], [cond[n] for n in names]))))
    bkeys = jax.random.split(keys[5], data.n_blocks)
    if block_ptr is not None:
        # contiguous blocks: each draws only its own features (static slices, one traced copy per block)
        for b in range(data.n_blocks):
            state = _block_update_slice(bkeys[b], state, stats, data, hyper, tables, block_ptr[b], block_ptr[b + 1])
        return state, stats
    # one traced copy of the block update (a Python loop would compile B copies)
    state = jax.lax.fori_loop(0, data.n_blocks,
                              lambda b, st: _block_update(bkeys[b], st, stats, data, hyper, tables, b), state)
    return state, stats


def _sweep_printed(key, state, data: PFMData, hyper):
    """The chapter's listed order (5.7-5.19): z, w0, w, v, r, beta0, beta, delta, c, then the
    collapsed shapes alpha0, alpha, zeta, gamma0 with their rates NOT redrawn (broken)."""
    keys = jax.random.split(key, 7)
    np_ = _is_np(state)
    stats = allocate(keys[0], state, data)
    expo = exposures(state, data)
    cond = conditionals(state, stats, expo, data, hyper)
    w0, w = _draw_many(keys[1], [cond["w0"], cond["w"]])
    state = state._replace(w0=w0, w=w)
    def vblock(b, st):
        V_new = _draw(jax.random.fold_in(keys[6], b), conditionals(st, stats, exposures(st, data), data, hyper)["V"])
        return st._replace(V=jnp.where((data.block == b)[:, None], V_new, st.V))

    state = jax.lax.fori_loop(0, data.n_blocks, vblock, state)
    expo = exposures(state, data)
    cond = conditionals(state, stats, expo, data, hyper)
    names = (["r"] if np_ else []) + ["beta0", "beta", "delta"]
    state = state._replace(**dict(zip(names, _draw_many(keys[2], [cond[n] for n in names]))))
    if np_:
        state = state._replace(c=_draw(keys[3], conditionals(state, stats, expo, data, hyper)["c"]))
    tables = _crt_tables(keys[4], state, stats, data)
    sc = shape_conditionals(state, stats, expo, data, hyper, tables)
    names = ["alpha0", "alpha", "zeta"] + (["gamma0"] if np_ else [])
    state = state._replace(**dict(zip(names, _draw_many(keys[5], [sc[n] for n in names]))))
    return state, stats


def step(key, state, data: PFMData, hyper, *, order: str = "valid", scale_rounds: int = 0, global_rounds: int = 0,
         trade_rounds: int = 0, block_ptr: tuple[int, ...] | None = None):
    """One Gibbs sweep (module docstring), then ``scale_rounds`` Metropolis steps of the exact
    per-factor scale move (`custom_inference.pfm_scale.scale_move`; 0: none, the sweep alone, bit
    for bit the sampler without the move), then ``global_rounds`` steps of NPFM's global scale move
    (`custom_inference.pfm_scale.global_move`; its own key stream, 0: none), then ``trade_rounds``
    steps per factor of the side-feature trade (`custom_inference.pfm_scale.trade_move`; 0: none).
    Jit-able (the block loop is static).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    state : NPFMState or PPFMState
        The current draw.
    data : PFMData
        The training data.
    hyper : ppl_models.pfm.PFMHyper or object
        The fields of `HYPER_FIELDS`, each > 0.
    order : {"valid", "printed"}, keyword-only
        "valid" (default) or "printed" (the chapter's order; does NOT leave the posterior
        invariant, kept for the SBC demonstration).
    scale_rounds, global_rounds, trade_rounds : int >= 0, keyword-only
        Metropolis steps of the three moves above (default 0 each).
    block_ptr : tuple of int, keyword-only, optional
        None, or `block_pointers` (data) (static Python ints, computed once on the host): with it
        the "valid" sweep draws each block's zeta and V for that block's features only (the same
        conditionals; the random numbers of the block updates differ from the masked path's, which
        draws all D features per block and keeps the block's). Ignored by "printed".

    Returns
    -------
    state : NPFMState or PPFMState
        The new draw, same shapes and dtype.
    info : PFMInfo
        Its log joint and the sweep's active factors.

    Raises
    ------
    ValueError
        An unknown ``order``; a ``block_ptr`` that does not fit ``data``; ``scale_rounds`` > 0 for
        PPFM on data that is not ``bipartite``, ``global_rounds`` > 0 for PPFM, or ``trade_rounds``
        > 0 on data without sides and entity tables (`custom_inference.pfm_scale`).

    Source: ``004_90693a0965f06816.txt`` ch. 5.3.2 (conditionals eqs. 5.7-5.19); sweep order and
    scale moves: project addition (module docstring).
    """
    if block_ptr is not None and (len(block_ptr) != data.n_blocks + 1 or block_ptr[0] != 0
                                  or block_ptr[-1] != data.n_features):
        raise ValueError(f"block_ptr: expected block_pointers(data) ({data.n_blocks + 1} ints from 0 to "
                         f"{data.n_features}), got {block_ptr!r}")
    if order == "valid":
        state, stats = _sweep_valid(key, state, data, hyper, block_ptr)
    elif order == "printed":
        state, stats = _sweep_printed(key, state, data, hyper)
    else:
        raise ValueError(f"order must be 'valid' or 'printed', got {order!r}")
    if scale_rounds:  # its own stream: the sweep's keys are those of the sampler without the move
        state = scale_move(jax.random.fold_in(key, 0x5CA1E), state, data, hyper, scale_rounds)[0]
    if global_rounds:
        state = global_move(jax.random.fold_in(key, 0x610BA1), state, data, hyper, global_rounds)[0]
    if trade_rounds:
        state = trade_move(jax.random.fold_in(key, 0x77ADE), state, data, hyper, trade_rounds)[0]
    return state, PFMInfo(log_joint(state, data, hyper), n_active(stats))


def step_printed(key, state, data: PFMData, hyper):
    """`step` with ``order="printed"`` (the broken variant).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    state : NPFMState or PPFMState
        The current draw.
    data : PFMData
        The training data.
    hyper : ppl_models.pfm.PFMHyper or object
        As in `step`.

    Returns
    -------
    state : NPFMState or PPFMState
        The new draw.
    info : PFMInfo
        As in `step`.

    Raises
    ------
    None of its own.

    Source: ``004_90693a0965f06816.txt`` ch. 5.3.2 (the chapter's printed order of eqs. 5.7-5.19).
    """
    return step(key, state, data, hyper, order="printed")


def _listed_loglik(state, data: PFMData, rows: int | None = None):
    """sum over listed rows with y_n > 0 of y_n log rate_n - log y_n!, ``rows`` rows at a time (a
    ``fori_loop`` over chunks, the last masked beyond N_L; default: the row chunk of `allocate_chunks`,
    all rows when they fit), so no (N_L, F, K) gather exists (40 GB at 1e8 nonzeros, F = 2, K = 50,
    float32)."""
    feat, val, y_all = data.row_feat, data.row_val, data.row_y
    N, F = feat.shape
    dtype = jnp.result_type(state.V.dtype, y_all.dtype)
    if N == 0:
        return jnp.zeros((), dtype)
    R = allocate_chunks(N, data.unit_row.shape[0], F, state.V.shape[1], val.dtype)[0] if rows is None else int(rows)
    R = min(R, N)

    def rows_sum(f, v, y):
        pos = y > 0
        rate = row_rates(state, f, v)
        return jnp.sum(jnp.where(pos, y * jnp.log(jnp.where(pos, rate, 1.0)) - gammaln(y + 1.0), 0.0))

    if R >= N:  # all rows at once, as before issue 28
        return rows_sum(feat, val, y_all).astype(dtype)

    def one_chunk(c, acc):
        idx = c * R + jnp.arange(R, dtype=jnp.int32)
        valid = idx < N  # the last chunk runs past N_L: masked
        idx = jnp.minimum(idx, N - 1)
        return acc + rows_sum(feat[idx], val[idx], jnp.where(valid, y_all[idx], 0))

    return jax.lax.fori_loop(0, -(-N // R), one_chunk, jnp.zeros((), dtype))


def log_joint(state, data: PFMData, hyper) -> jax.Array:
    """log p(y, parameters) of eqs. 5.6 / 5.20 with all priors, including -sum log y_n!, from
    the cached sums (O(nnz K)); equals the NumPyro program's log density.

    The likelihood's sum over listed rows runs in chunks of rows (`allocate_chunks`) when they do
    not fit the allocation's memory budget, so its extra memory is bounded as the allocation's
    (issue 28).

    Parameters
    ----------
    state : NPFMState or PPFMState
        The parameters.
    data : PFMData
        The training data.
    hyper : ppl_models.pfm.PFMHyper or object
        The fields of `HYPER_FIELDS` (the top-level priors).

    Returns
    -------
    jax.Array, shape (), the state's dtype
        The log joint in nats.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: derived from ``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20 and the priors of ch.
    5.3.1-5.3.2 (module docstring, "Model").
    """
    h = hyper
    K = state.V.shape[1]
    r = _r(state)
    loglik = _listed_loglik(state, data)
    expo = exposures(state, data)
    loglik -= data.n_train * state.w0 + jnp.dot(data.x_sum, state.w) + jnp.dot(r, expo.s)
    lp = (_gamma_logpdf(state.alpha0, h.a_0, h.b_0) + _gamma_logpdf(state.beta0, h.c_0, h.d_0)
          + _gamma_logpdf(state.w0, state.alpha0, state.beta0)
          + jnp.sum(_gamma_logpdf(state.alpha, h.a, h.b)) + jnp.sum(_gamma_logpdf(state.beta, h.c, h.d))
          + jnp.sum(_gamma_logpdf(state.w, state.alpha, state.beta))
          + jnp.sum(_gamma_logpdf(state.zeta, h.e, h.f)) + jnp.sum(_gamma_logpdf(state.delta, h.g, h.h))
          + jnp.sum(_gamma_logpdf(state.V, state.zeta[:, None], state.delta[None, :])))
    if _is_np(state):
        lp += (_gamma_logpdf(state.gamma0, h.e_0, h.f_0) + _gamma_logpdf(state.c, h.g_0, h.h_0)
               + jnp.sum(_gamma_logpdf(state.r, state.gamma0 / K, state.c)))
    return loglik + lp


# ---------------------------------------------------------------------------------------
# driver


_DIMS_COMMON = {"w0": (), "alpha0": (), "beta0": (), "w": ("feature",), "alpha": ("feature",),
                "beta": ("feature",), "V": ("feature", "factor"), "zeta": ("feature",), "delta": ("factor",)}
NPFM_DIMS = {**_DIMS_COMMON, "r": ("factor",), "gamma0": (), "c": ()}
PPFM_DIMS = dict(_DIMS_COMMON)


def _prepare(data: PFMData, dtype):
    return jax.tree_util.tree_map(jnp.asarray, data.astype(dtype))


def _prepare_hyper(hyper, dtype):
    return type(hyper)(*(float(v) for v in hyper)) if hasattr(hyper, "_fields") else hyper


def _predict(state, data, at):
    return row_rates(state, at[0], at[1])


def _predict_prepare(predict_at, data: PFMData, dtype):
    """predict_at: (users, items) int arrays (data from `PFMData.from_matrix` in "all" mode) or
    (feat (P, F) int, val (P, F) float) padded feature tables of arbitrary rows."""
    a, b = (np.asarray(x) for x in predict_at)
    if np.issubdtype(b.dtype, np.floating) and a.ndim == 2:
        if a.shape != b.shape or (a.size and (a.min() < 0 or a.max() >= data.n_features)):
            raise ValueError("predict_at: (feat, val) tables must have one shape and features in range")
        if b.size and (not np.all(np.isfinite(b)) or b.min() < 0):
            raise ValueError("predict_at: feature values must be finite and >= 0")
        feat, val = a, b
    else:
        if not data.grid:
            raise ValueError("predict_at: (users, items) pairs need data from from_matrix(..., zeros='all'); "
                             "pass (feat, val) tables otherwise")
        rows, cols = mcmc_driver.check_cells(predict_at, data.n_users, data.n_items)
        feat, val = data.pair_rows(rows, cols)
    return (jnp.asarray(feat, jnp.int32), jnp.asarray(val, dtype)), int(feat.shape[0])


def _spec(alg, variant):
    fields = (NPFMState if variant == "npfm" else PPFMState)._fields
    return mcmc_driver.SamplerSpec(
        algorithm=alg, model=variant, method="gibbs", variables=fields, prepare=_prepare,
        sizes=lambda data: (data.n_users, data.n_items, data.n_listed),
        coords=lambda data, K: {"feature": np.arange(data.n_features), "factor": np.arange(K)},
        predict=_predict, predict_prepare=_predict_prepare, last_stats=("n_active",), prepare_hyper=_prepare_hyper)


@mcmc_driver.run_options(num_samples=500, dtype=np.float64, progress=False)
def sample(key, data: PFMData, K: int, hyper, *, variant: str = "npfm", order: str = "valid", init_scale: float = 0.1,
           init_shape: float | None = None, init_r: float | None = None, scale_rounds: int | None = None,
           global_rounds: int | None = None, trade_rounds: int = 0, options: mcmc_driver.SampleOptions):
    """Run ``num_chains`` Gibbs chains on the shared driver (`custom_inference.mcmc_driver.sample`).

    The "valid" sweep uses `block_pointers` (data) where the update blocks are contiguous runs of
    features (ids designs): each block draws its own features only (issue 28; the block updates'
    random numbers differ from the masked path used before and for other data, the conditionals are
    the same).

    Parameters
    ----------
    key : jax.Array or int
        PRNG key or int seed (`base.as_key`); the same key gives the same draws.
    data : PFMData
        The training data.
    K : int >= 1
        Number of factors (the truncation level for NPFM).
    hyper : ppl_models.pfm.PFMHyper or object
        Any NamedTuple with `HYPER_FIELDS`, all finite and > 0.
    variant : {"npfm", "ppfm"}, keyword-only
        Default "npfm".
    order : {"valid", "printed"}, keyword-only
        "valid" (default) or "printed" (the chapter's order: broken, for the SBC demonstration).
    init_scale, init_shape, init_r : float, keyword-only
        See `init` (defaults 0.1, None, None).
    scale_rounds : int >= 0, keyword-only, optional
        Metropolis steps of the exact per-factor scale move after each sweep
        (`custom_inference.pfm_scale`; O(K) each). None (default): `DEFAULT_SCALE_ROUNDS` where the
        move is defined (NPFM; PPFM on ``data.bipartite``, ids only), else 0. 0 reproduces the
        sampler without the move bit for bit.
    global_rounds : int >= 0, keyword-only, optional
        Metropolis steps of NPFM's global scale move (all r_k, c, V, delta at once;
        `custom_inference.pfm_scale.global_move`, O(K) each) after the per-factor ones. None
        (default): `DEFAULT_GLOBAL_ROUNDS` for NPFM, 0 for PPFM (no global move exists there).
    trade_rounds : int >= 0, keyword-only
        Metropolis steps per factor of the side-feature trade (user-side columns of a factor
        against item-side ones, the id weights absorbing the pair terms inside an entity's row;
        `custom_inference.pfm_scale.trade_move`, O(K (I + J)) each); needs data from
        ``from_matrix(..., zeros="all")``. Default 0 (not yet measured on the SBC; issue 26).
    progress : bool, keyword-only, default False
        Show a tqdm bar.
    checkpoint : str or path-like, keyword-only, optional
        A ``.npz`` checkpoint written every ``checkpoint_every`` blocks and at the end (None: none).
    checkpoint_every : int >= 1, keyword-only, default 10
        Blocks between checkpoints.
    resume : bool, keyword-only, default False
        Continue from ``checkpoint`` when the file exists (the same draws as the uninterrupted run).
    dtype : numpy.float32 or numpy.float64, keyword-only, default float64
        The state's dtype.
    callback : callable, keyword-only, optional
        Called after each block with ``(sweeps done, states)`` (`mcmc_driver.sample`).
    num_chains : int >= 1, keyword-only, default 4
        Independent chains.
    num_warmup : int >= 0, keyword-only, default 500
        Warm-up sweeps per chain, discarded.
    num_samples : int >= 1, keyword-only, default 500
        Kept draws per chain.
    thin : int >= 1, keyword-only, default 1
        Sweeps per kept draw.
    keep : sequence of str, keyword-only, optional
        State fields to store per draw (default: all but V, which costs D K per draw) and "pred"
        (per-draw rates at ``predict_at``).
    predict_at : tuple of two arrays, keyword-only, optional
        (users, items) int arrays, shape (P,) each (data from ``from_matrix(..., zeros="all")``), or
        (feat (P, F) int, val (P, F) float) feature tables: the running mean and sd over all kept
        draws of all chains of each row's Poisson rate (group ``predictions``: ``pred_mean``,
        ``pred_sd``, dim ``cell``); no draw is stored.
    block : int >= 1, keyword-only, optional
        Sweeps per compiled block (None: `mcmc_driver.sample` chooses); the draws do not depend on it.
    options : mcmc_driver.SampleOptions, keyword-only, optional
        The same run options as one object (`mcmc_driver.run_options`); keywords given beside it
        override its fields.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (chain, draw, ...) with the kept fields; ``sample_stats``: ``lp`` (log joint
        of each kept state), ``n_active`` (factors that got count units in the sweep that produced
        the draw); attrs: the driver's schema plus ``variant``, ``order``, ``zeros``.

    Raises
    ------
    ValueError
        K < 1, bad counts, unknown names in ``keep``, bad hyper, variant or order; ``scale_rounds`` < 0, or > 0 for PPFM on data that is not ``bipartite``;
        ``global_rounds`` < 0, or > 0 for PPFM; ``trade_rounds`` < 0, or > 0 on data without sides
        and entity tables; ``predict_at`` out of range, of mismatched shapes or with negative or
        non-finite values, or (users, items) pairs on data not in "all" mode; a checkpoint of other
        settings, of another run or damaged (`mcmc_driver.sample`).
    TypeError
        ``data`` not a PFMData; a bad key; K not a number; an unknown keyword.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`mcmc_driver.sample`).

    Source: ``004_90693a0965f06816.txt`` ch. 5 (NPFM / PPFM Gibbs samplers, eqs. 5.7-5.19, sweep
    order corrected in the module docstring); the driver is a project addition.
    """
    K = base.check_latent_dim(K)
    check_hyper(hyper)
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    if order not in ("valid", "printed"):
        raise ValueError(f"order must be 'valid' or 'printed', got {order!r}")
    if not isinstance(data, PFMData):
        raise TypeError(f"data: expected PFMData (PFMData.from_matrix / from_design), got {type(data).__name__}")
    if scale_rounds is None:
        scale_rounds = DEFAULT_SCALE_ROUNDS if (variant == "npfm" or data.bipartite) else 0
    if int(scale_rounds) != scale_rounds or scale_rounds < 0:
        raise ValueError(f"scale_rounds must be an int >= 0, got {scale_rounds!r}")
    if scale_rounds and variant == "ppfm" and not data.bipartite:
        raise ValueError("scale_rounds: PPFM's scale move needs data whose pair terms all join a user and an item "
                         "feature (PFMData.bipartite: ids only); pass scale_rounds=0")
    if global_rounds is None:
        global_rounds = DEFAULT_GLOBAL_ROUNDS if variant == "npfm" else 0
    if int(global_rounds) != global_rounds or global_rounds < 0:
        raise ValueError(f"global_rounds must be an int >= 0, got {global_rounds!r}")
    if global_rounds and variant == "ppfm":
        raise ValueError("global_rounds: the global scale move is defined for NPFM only (PPFM has no r, c); "
                         "pass global_rounds=0")
    if int(trade_rounds) != trade_rounds or trade_rounds < 0:
        raise ValueError(f"trade_rounds must be an int >= 0, got {trade_rounds!r}")
    if trade_rounds and not trade_available(data):
        raise ValueError("trade_rounds: the side-feature trade needs data from PFMData.from_matrix(..., "
                         "zeros='all') (sides and entity tables); pass trade_rounds=0")
    spec = SPECS[variant]
    # static per-block slices where the blocks are contiguous (ids designs): only the "valid" order uses them
    block_ptr = block_pointers(data) if order == "valid" else None
    if options.keep is None:
        keep = tuple(f for f in spec.variables if f != "V")
    else:
        keep = tuple(options.keep)
        unknown = sorted(set(keep) - set(spec.variables) - {"pred"})
        if unknown:
            raise ValueError(f"keep: unknown variables {unknown}; choose from {spec.variables}")
    return mcmc_driver.sample(
        spec, key, data, K, hyper, options=mcmc_driver.SampleOptions.of(options, keep=keep),
        init_options={"init_scale": float(init_scale),
                      **({} if init_shape is None else {"init_shape": float(init_shape)}),
                      **({} if init_r is None or variant == "ppfm" else {"init_r": float(init_r)})},
        step_options={"order": order, "scale_rounds": int(scale_rounds),
                      **({"block_ptr": block_ptr} if block_ptr is not None else {}),
                      **({"global_rounds": int(global_rounds)} if global_rounds else {}),
                      **({"trade_rounds": int(trade_rounds)} if trade_rounds else {})},
        attrs={"variant": variant, "zeros": data.zeros})


def sample_npfm(key, data, K, hyper, **kw):
    """`sample` with variant "npfm".

    Parameters
    ----------
    key : jax.Array or int
        As in `sample`.
    data : PFMData
        As in `sample`.
    K : int >= 1
        As in `sample`.
    hyper : ppl_models.pfm.PFMHyper or object
        As in `sample`.
    **kw
        Any other keyword of `sample` but ``variant``.

    Returns
    -------
    arviz.InferenceData
        As `sample`.

    Raises
    ------
    ValueError
        As `sample` (K < 1, bad counts, unknown names in ``keep``, bad hyper or order, ...).
    TypeError
        As `sample`; also ``variant`` given in ``kw``.

    Source: ``004_90693a0965f06816.txt`` ch. 5 (NPFM), as `sample`.
    """
    return sample(key, data, K, hyper, variant="npfm", **kw)


def sample_ppfm(key, data, K, hyper, **kw):
    """`sample` with variant "ppfm".

    Parameters
    ----------
    key : jax.Array or int
        As in `sample`.
    data : PFMData
        As in `sample`.
    K : int >= 1
        As in `sample`.
    hyper : ppl_models.pfm.PFMHyper or object
        As in `sample`.
    **kw
        Any other keyword of `sample` but ``variant``.

    Returns
    -------
    arviz.InferenceData
        As `sample`.

    Raises
    ------
    ValueError
        As `sample` (K < 1, bad counts, unknown names in ``keep``, bad hyper or order, ...).
    TypeError
        As `sample`; also ``variant`` given in ``kw``.

    Source: ``004_90693a0965f06816.txt`` ch. 5 (PPFM, eq. 5.20), as `sample`.
    """
    return sample(key, data, K, hyper, variant="ppfm", **kw)


NPFM_ALGORITHM = base.Algorithm(
    name="npfm-gibbs", kind="mcmc", init=init_npfm, step=step, target=log_joint, target_name="log_joint",
    dims=NPFM_DIMS, source="004_90693a0965f06816.txt ch. 5.3.1-5.3.2 (derived; valid sweep order)").check()
PPFM_ALGORITHM = base.Algorithm(
    name="ppfm-gibbs", kind="mcmc", init=init_ppfm, step=step, target=log_joint, target_name="log_joint",
    dims=PPFM_DIMS, source="004_90693a0965f06816.txt ch. 5.3.3 (derived; valid sweep order)").check()
ALGORITHMS = {"npfm": NPFM_ALGORITHM, "ppfm": PPFM_ALGORITHM}
SPECS = {"npfm": _spec(NPFM_ALGORITHM, "npfm"), "ppfm": _spec(PPFM_ALGORITHM, "ppfm")}
