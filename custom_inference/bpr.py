r"""BPR: Bayesian Personalized Ranking by SGD, with uniform or popularity negatives.

Source: Rendle, Freudenthaler, Gantner, Schmidt-Thieme, *BPR: Bayesian Personalized Ranking
from Implicit Feedback*, UAI 2009 (BPR-Opt, section 4.1; LearnBPR, fig. 4; BPR-MF, section
4.3.1), the baseline of 000_619a0297b9d686b2.txt section 6 ("BPR-uniform" and "BPR-pop"),
003_203f63200c0d7157.txt section 6.1.2 ("BPR-uniform", "BPR-popularity", with popularity
sampling after Gantner et al. 2011) and 002_5408d341cb9fc544.txt section 4.2.

Model and objective
-------------------
Score of item i for user u (I users, J items, K factors)::

    x_ui = w_u . h_i + b_i                      w_u, h_i in R^K, item bias b_i

For a triple (u, i, j) with i a training positive of u and j not, with d = x_ui - x_uj, the
per-triple objective (BPR-Opt with a Gaussian prior, regularization counted per occurrence,
as LearnBPR applies it) is::

    f(u, i, j) = ln sigma(d) - reg/2 (|w_u|^2 + |h_i|^2 + |h_j|^2) - bias_reg/2 (b_i^2 + b_j^2)

and its gradient, with g = d ln sigma(d) / dd = sigma(-d)::

    df/dw_u = g (h_i - h_j) - reg w_u
    df/dh_i = g w_u - reg h_i          df/dh_j = -g w_u - reg h_j
    df/db_i = g - bias_reg b_i         df/db_j = -g - bias_reg b_j

(`triple_gradients`, checked against ``jax.grad`` of `objective` in the tests). One SGD step on
a minibatch of B triples ascends the *sum* of the B per-triple objectives: every triple's own
LearnBPR step is taken from the same parameters and the steps are added (scatter-add), so B = 1
is LearnBPR exactly and larger B is its simultaneous (Hogwild-like) version.

Sampling
--------
An epoch visits every training positive (u, i) once, in a seeded random order (LearnBPR
draws (u, i) with replacement; a shuffle has the same expectation and lower variance). For each
the negative j is drawn

- ``"uniform"`` (BPR-uniform): j ~ Uniform{0, ..., J-1};
- ``"popularity"`` (BPR-popularity / BPR-pop): P(j) proportional to n_j, the number of training
  positives of item j; drawn exactly in O(1) as the item of a uniformly chosen training entry.

A draw that is a positive of u is redrawn, at most ``max_tries`` draws in all (in vectorized
rounds under a bounded ``lax.while_loop``; the first valid draw is kept, so the accepted j
follows the scheme's distribution restricted to u's non-positives exactly); if all
``max_tries`` draws are positives of u, the triple is
rejected (weight 0, no update) and counted in `EpochInfo.rejected`. There is never an
unbounded redraw loop. Membership of (u, j) in the training set is a vectorized binary search
in u's sorted row of the CSR pattern: O(log degree) work and O(N) memory, never I x J.

Stopping rule
-------------
``fit(..., validate_every=k)`` stops on held-out positives, as practitioners stop BPR: one positive of
each of ``validation_users`` users leaves the training data for the run (`hold_out_validation`), the
sampled AUC of those positives against ``validation_negatives`` negatives per user is checked every k
epochs (`validation_auc`), and the run stops after ``patience`` checks whose gain over the reference
check is at most one paired per-user standard error (`AUCStoppingRule`, derivation there), returning
the best check's parameters. Without ``validate_every`` exactly ``n_epochs`` run (the default).

Why not a library
-----------------
Checked on PyPI for Python 3.11 with numpy 2.x: `implicit` (0.7) samples negatives uniformly
only; `cornac`'s BPR and `lightfm`'s BPR likewise sample uniformly; RecBole has popularity
negative sampling but needs PyTorch, its own data pipeline and config system, and its releases
use numpy aliases removed in numpy 2 (``np.bool8``, RecBole issue #2162). None offers both
schemes over our `Observations` container, so BPR is written here compactly in JAX.

Work per epoch is O(N K + N r log(max degree)), r <= max_tries the redraw rounds used (1-3
typically); the only I x J array is the score block of the users requested from
`score_users`. Measured on MovieLens 100K P1 (N = 54,433 training positives, K = 64, batches
of 256, float32, 2 shared CPU cores): 0.08-0.10 s per epoch after a compilation of a few
seconds; rejected triples 0 (uniform) and <= 4e-5 of an epoch (popularity), max_tries = 16.
Minibatching does not change the result there: with `implicit`'s settings (uniform, lr 0.01,
reg 0.01, 100 epochs, key 0), B = 1 (LearnBPR exactly, 6 s per epoch) gives rank score
R = 0.934 and HR@10 = 0.272, B = 256 (0.05 s per epoch) R = 0.934 and HR@10 = 0.274
(`implicit` 0.7's own BPR with 64 factors and 100 epochs: R = 0.890, HR@10 = 0.234).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import base, vi_driver
from .chunks import over_chunks
from .data import Observations

__all__ = [
    "SAMPLING",
    "BPRHyper",
    "BPRParams",
    "BPRData",
    "EpochInfo",
    "bpr_data",
    "init",
    "step",
    "bpr_opt",
    "is_positive",
    "sample_negatives",
    "objective",
    "triple_gradients",
    "epoch",
    "fit",
    "ValidationSet",
    "hold_out_validation",
    "validation_auc",
    "AUCStoppingRule",
    "score_users",
    "ALGORITHM",
]

#: The negative-sampling schemes.
SAMPLING = ("uniform", "popularity")


class BPRHyper(NamedTuple):
    """The Gaussian-prior (L2) constants of BPR-Opt, a NamedTuple.

    Parameters
    ----------
    reg : float >= 0, default 0.01
        lambda of the factors, per occurrence in a triple.
    bias_reg : float >= 0 or None, default None
        lambda of the item biases (None: ``reg``).

    Raises
    ------
    None of its own (`fit` checks the values).

    Source: baseline (not a seed file): the regularization constants of BPR-Opt, Rendle et al.
    2009 sec. 4.1.
    """

    reg: float = 0.01
    bias_reg: float | None = None


class BPRParams(NamedTuple):
    """BPR-MF parameters, a NamedTuple (a JAX pytree).

    Parameters
    ----------
    user_factors : jax.Array, shape (I, K), float32 or float64
        w_u.
    item_factors : jax.Array, shape (J, K), same dtype
        h_i.
    item_bias : jax.Array, shape (J,), same dtype
        b_i.

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: baseline (not a seed file): BPR-MF, Rendle et al. 2009 sec. 4.3.1, plus an item bias.
    """

    user_factors: jax.Array
    item_factors: jax.Array
    item_bias: jax.Array


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class BPRData:
    """Training positives in CSR form, as the sampler needs them (a frozen dataclass, a JAX pytree).

    Build with `bpr_data`, which validates; the constructor checks nothing.

    Parameters
    ----------
    indptr : jax.Array, shape (I + 1,), int32
        Row u's positives are ``cols[indptr[u]:indptr[u+1]]``.
    rows : jax.Array, shape (N,), int32
        User of each positive, row-major order.
    cols : jax.Array, shape (N,), int32
        Item of each positive, increasing within a row.
    n_rows : int
        I (static).
    n_cols : int
        J (static).
    search_iters : int
        Binary-search steps (static), >= log2(max degree + 1) + 1.

    Raises
    ------
    None of its own.

    Source: project addition (the CSR layout of the positive sets I_u^+ of Rendle et al. 2009
    sec. 4.1).
    """

    indptr: jax.Array
    rows: jax.Array
    cols: jax.Array
    n_rows: int
    n_cols: int
    search_iters: int

    def tree_flatten(self):
        """The pytree protocol: the three arrays as children, the sizes as auxiliary data.

        Returns
        -------
        children : tuple of jax.Array
            ``(indptr, rows, cols)``.
        aux : tuple of int
            ``(n_rows, n_cols, search_iters)``.

        Raises
        ------
        None of its own.

        Source: project addition (jax.tree_util's pytree protocol).
        """
        return (self.indptr, self.rows, self.cols), (self.n_rows, self.n_cols, self.search_iters)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def nnz(self) -> int:
        """N, the number of training positives.

        Returns
        -------
        int
            ``rows.shape[0]``.

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.rows.shape[0])


class EpochInfo(NamedTuple):
    """Per-epoch diagnostics, a NamedTuple (the protocol's Info).

    Parameters
    ----------
    mean_log_sigmoid : jax.Array, shape (), float
        Mean of ln sigma(x_ui - x_uj) over the accepted triples of the epoch, each evaluated at the
        parameters its batch started from (nats; 0 is perfect).
    rejected : jax.Array, shape (), float
        Fraction of the epoch's triples rejected because all ``max_tries`` negative draws were
        positives of the user.
    log_sigmoid_after : jax.Array, shape (), float
        Mean of ln sigma(x_ui - x_uj) over the same triples at the parameters the epoch returns
        (the protocol's Info of the new state).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (diagnostics of LearnBPR, Rendle et al. 2009 fig. 4).
    """

    mean_log_sigmoid: jax.Array
    rejected: jax.Array
    log_sigmoid_after: jax.Array


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------


def _check_int(name: str, v, low: int) -> int:
    if isinstance(v, bool) or not np.isscalar(v) or int(v) != v or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    return int(v)


def _check_float(name: str, v, *, positive: bool) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if not np.isfinite(f) or (f <= 0 if positive else f < 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")
    return f


def _check_sampling(sampling) -> str:
    if sampling not in SAMPLING:
        raise ValueError(f"sampling must be one of {SAMPLING}, got {sampling!r}")
    return sampling


def _row_major(rows: np.ndarray, cols: np.ndarray, chunk: int = 1 << 22) -> bool:
    """Whether the pairs are sorted by row, then column (checked in chunks: O(chunk) temporaries)."""
    n = rows.shape[0]
    for s in range(0, max(n - 1, 0), chunk):
        e = min(n, s + chunk + 1)
        r, c = rows[s:e], cols[s:e]
        if not np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (c[1:] >= c[:-1]))):
            return False
    return True


def bpr_data(train: Observations) -> BPRData:
    """The CSR pattern of the training positives.

    Parameters
    ----------
    train : Observations, shape (I, J)
        Every stored entry is a positive (u, i); stored values must be > 0 (binary data has
        value 1; counts > 0 are treated as positives too).

    Returns
    -------
    BPRData

    Raises
    ------
    ValueError
        ``train`` is not `Observations`; a stored value that is NaN, zero or negative; an index
        out of range, duplicate pairs or no entries (`Observations.validate`).
    TypeError
        ``train`` with non-integer indices or non-numeric values.

    Source: project addition (the CSR layout of the user's positive set I_u^+ that the sampler of
    the baseline, Rendle et al. 2009 sec. 4.1 / fig. 4, needs; not from a seed file).
    """
    if not isinstance(train, Observations):
        raise TypeError(f"train must be custom_inference.data.Observations, got {type(train).__name__}")
    train.validate("real", name="train", float_only=False)  # however built: ids in range, finite, no duplicates
    values = np.asarray(train.values)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("train.values: every stored entry must be a positive (value > 0, finite)")
    rows, cols = np.asarray(train.rows), np.asarray(train.cols)
    if not _row_major(rows, cols):  # the checked constructors store entries row-major already
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
    counts = np.bincount(rows, minlength=train.n_rows)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    max_deg = int(counts.max())
    iters = int(max_deg).bit_length() + 1
    return BPRData(
        jnp.asarray(indptr, dtype=jnp.int32),
        jnp.asarray(rows, dtype=jnp.int32),
        jnp.asarray(cols, dtype=jnp.int32),
        int(train.n_rows),
        int(train.n_cols),
        iters,
    )


# ---------------------------------------------------------------------------
# sampler
# ---------------------------------------------------------------------------


def is_positive(data: BPRData, users: jax.Array, items: jax.Array) -> jax.Array:
    """Whether each (user, item) pair is a training positive.

    Binary search for ``items`` in each user's sorted row of the CSR pattern,
    ``data.search_iters`` vectorized steps.

    Parameters
    ----------
    data : BPRData
        The training positives in CSR form (`bpr_data`), N entries.
    users : jax.Array, int, shape broadcasting with ``items`` (S)
        Users, in [0, I).
    items : jax.Array, int, shape broadcasting with ``users``
        Items, in [0, J).

    Returns
    -------
    jax.Array, shape S (the broadcast shape), bool
        True where (user, item) is a training positive.

    Raises
    ------
    ValueError
        Not of its own: jax raises it for shapes that do not broadcast. Indices out of range are
        not checked (jax clamps them, so the answer is then meaningless).

    Source: project addition (membership test for the rejection of positives in the baseline's
    LearnBPR sampling, Rendle et al. 2009 fig. 4).
    """
    users, items = jnp.broadcast_arrays(users, items)
    last = data.cols.shape[0] - 1
    lo = data.indptr[users]
    end = data.indptr[users + 1]

    def step(_, c):
        lo, hi = c
        active = lo < hi
        mid = (lo + hi) // 2
        less = data.cols[jnp.minimum(mid, last)] < items
        return jnp.where(active & less, mid + 1, lo), jnp.where(active & ~less, mid, hi)

    lo, _ = jax.lax.fori_loop(0, data.search_iters, step, (lo, end))
    return (lo < end) & (data.cols[jnp.minimum(lo, last)] == items)


def sample_negatives(key, data: BPRData, users: jax.Array, sampling: str = "uniform", max_tries: int = 16):
    """One negative item per user, by the scheme ``sampling``, bounded rejection of positives.

    Candidates are drawn in rounds (one per user per round, at most ``max_tries`` rounds,
    stopping when every user has one); each user keeps its first candidate that is not one of
    its positives. Conditional on acceptance, j follows the scheme's distribution restricted
    to the user's non-positives: uniform over them (``"uniform"``), or proportional to the
    item's training popularity n_j (``"popularity"``).

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    data : BPRData
        The training positives in CSR form (`bpr_data`), N entries.
    users : jax.Array or array-like, shape (B,), int
        The users that need a negative.
    sampling : {"uniform", "popularity"}, default "uniform"
        The negative-sampling scheme.
    max_tries : int >= 1, default 16
        Draws per user before rejection.

    Returns
    -------
    neg : jax.Array, shape (B,), int32
        The negative item (meaningless where not accepted).
    accepted : jax.Array, shape (B,), bool
        False where all ``max_tries`` draws were positives.

    Raises
    ------
    ValueError
        an unknown ``sampling``. ``max_tries`` is not validated here (``max_tries < 1`` draws
        nothing and rejects every user; `fit` validates it).

    Source: baseline (not a seed file): Rendle et al. 2009 fig. 4 (uniform negatives); popularity
    negatives as in 003_203f63200c0d7157.txt sec. 6.1.2 ("BPR-popularity", after Gantner et al.
    2011); the bounded redraw: project addition.
    """
    _check_sampling(sampling)
    return _sample_jit(key, data, jnp.asarray(users, jnp.int32), jnp.asarray(sampling == "popularity"), jnp.int32(max_tries))


def _sample(key, data: BPRData, users, popularity, max_tries):
    """`sample_negatives` with the scheme as a traced bool (one compilation serves both)."""
    B = users.shape[0]

    def draw(k):
        # column 0: a uniform item; column 1: a uniform training entry, whose item is a draw
        # with P(j) = n_j / N (one randint call for both keeps the compiled program small)
        high = jnp.array([data.n_cols, data.rows.shape[0]], dtype=jnp.int32)
        r = jax.random.randint(k, (B, 2), 0, high, dtype=jnp.int32)
        return jnp.where(popularity, data.cols[r[:, 1]], r[:, 0])

    def cond(c):
        t, _, ok = c
        return (t < max_tries) & ~jnp.all(ok)

    def body(c):
        t, neg, ok = c
        cand = draw(jax.random.fold_in(key, t))
        take = ~ok & ~is_positive(data, users, cand)
        return t + 1, jnp.where(take, cand, neg), ok | take

    # Draw t only replaces the negatives of users whose draws 0..t-1 were all positives, so
    # each user keeps its first valid draw of the sequence; the loop stops as soon as every
    # user has one (typically after 1-3 rounds), and never after more than max_tries rounds.
    init = (jnp.int32(0), jnp.zeros((B,), jnp.int32), jnp.zeros((B,), bool))
    _, neg, accepted = jax.lax.while_loop(cond, body, init)
    return neg, accepted


# ---------------------------------------------------------------------------
# objective and its gradient
# ---------------------------------------------------------------------------


def _x_diff(params: BPRParams, u, i, j):
    w = params.user_factors[u]
    return jnp.sum(w * (params.item_factors[i] - params.item_factors[j]), axis=-1) + (
        params.item_bias[i] - params.item_bias[j]
    )


def objective(params: BPRParams, users, pos, neg, weights, reg: float, bias_reg: float) -> jax.Array:
    """Weighted sum of the per-triple BPR objectives f(u, i, j) (module docstring).

    Parameters
    ----------
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    users : jax.Array, shape (B,), int
        The user u of each triple.
    pos : jax.Array, shape (B,), int
        Its positive item i.
    neg : jax.Array, shape (B,), int
        Its negative item j.
    weights : jax.Array, shape (B,), float
        1 for a triple, 0 to drop it.
    reg : float >= 0
        L2 constant of the factors (per occurrence in a triple).
    bias_reg : float >= 0
        L2 constant of the item biases.

    Returns
    -------
    jax.Array, shape (), the dtype of ``params``
        sum_b weights_b f(u_b, i_b, j_b), nats.

    Raises
    ------
    TypeError
        Not of its own (pure jax): mismatched lengths. Out-of-range indices are clamped, not
        reported.

    Source: baseline (not a seed file): BPR-Opt, Rendle et al. 2009 sec. 4.1, with the L2 prior
    counted per occurrence in a triple as LearnBPR (fig. 4) applies it.
    """
    d = _x_diff(params, users, pos, neg)
    W, H, b = params
    penalty = 0.5 * reg * (
        jnp.sum(W[users] ** 2, -1) + jnp.sum(H[pos] ** 2, -1) + jnp.sum(H[neg] ** 2, -1)
    ) + 0.5 * bias_reg * (b[pos] ** 2 + b[neg] ** 2)
    return jnp.sum(weights * (jax.nn.log_sigmoid(d) - penalty))


def triple_gradients(params: BPRParams, users, pos, neg, weights, reg: float, bias_reg: float) -> BPRParams:
    """Hand-derived gradient of `objective` with respect to ``params`` (module docstring).

    Parameters
    ----------
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    users : jax.Array, shape (B,), int
        The user u of each triple.
    pos : jax.Array, shape (B,), int
        Its positive item i.
    neg : jax.Array, shape (B,), int
        Its negative item j.
    weights : jax.Array, shape (B,), float
        1 for a triple, 0 to drop it.
    reg : float >= 0
        L2 constant of the factors (per occurrence in a triple).
    bias_reg : float >= 0
        L2 constant of the item biases.

    Returns
    -------
    BPRParams
        Gradients of the shapes and dtype of ``params``: per-triple gradients scatter-added, so
        rows touched by several triples sum their contributions (user_factors (I, K),
        item_factors (J, K), item_bias (J,)).

    Raises
    ------
    TypeError
        Not of its own (as `objective`): mismatched lengths.

    Source: baseline (not a seed file): the LearnBPR update of Rendle et al. 2009 fig. 4 / sec.
    4.3.1 (BPR-MF); derived in the module docstring and checked against ``jax.grad``.
    """
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return _scatter_step(zeros, params, users, pos, neg, weights, 1.0, reg, bias_reg)


def _scatter_step(target: BPRParams, params: BPRParams, users, pos, neg, weights, scale, reg, bias_reg) -> BPRParams:
    """``target + scale * (gradient of objective at params)``, scattering only the B touched rows."""
    W, H, b = params
    d = _x_diff(params, users, pos, neg)
    g = weights * jax.nn.sigmoid(-d)  # (B,)
    wu, hi, hj = W[users], H[pos], H[neg]
    wt = weights[:, None]
    sg = scale * g
    gW = target.user_factors.at[users].add(sg[:, None] * (hi - hj) - (scale * reg) * wt * wu)
    gH = (
        target.item_factors.at[pos].add(sg[:, None] * wu - (scale * reg) * wt * hi)
        .at[neg].add(-sg[:, None] * wu - (scale * reg) * wt * hj)
    )
    gb = (
        target.item_bias.at[pos].add(sg - (scale * bias_reg) * weights * b[pos])
        .at[neg].add(-sg - (scale * bias_reg) * weights * b[neg])
    )
    return BPRParams(gW, gH, gb)


# ---------------------------------------------------------------------------
# solver
# ---------------------------------------------------------------------------


def init(key, data, K: int, hyper: BPRHyper | None = None, *, init_scale: float = 0.1,
         dtype=np.float32) -> BPRParams:
    """Initial parameters: factors i.i.d. uniform with sd ``init_scale``, item biases 0.

    Factors are Uniform(-a, a) with a = sqrt(3) init_scale (as `implicit` initializes BPR,
    uniform rather than normal; it also compiles much faster than a normal draw).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed (`base.as_key`).
    data : Observations or BPRData
        Only its shape I x J is used.
    K : int >= 1
        Number of factors.
    hyper : BPRHyper, optional
        Unused (kept for the protocol).
    init_scale : float > 0, keyword-only, default 0.1
        Standard deviation of the (uniform) factors.
    dtype : numpy dtype, keyword-only, default float32
        float32 or float64.

    Returns
    -------
    BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), all ``dtype``.

    Raises
    ------
    ValueError
        Bad K or init_scale.
    TypeError
        A bad key (`base.as_key`).

    Source: Rendle et al. 2009 fig. 4 (random initialization); the uniform law: project addition.
    """
    del hyper
    K = _check_int("K", K, 1)
    init_scale = _check_float("init_scale", init_scale, positive=True)
    return _init_jit(base.as_key(key), int(data.n_rows), int(data.n_cols), K, init_scale, dtype)


def _init_arrays(key, n_rows: int, n_cols: int, n_factors: int, init_scale: float = 0.1, dtype=np.float32) -> BPRParams:
    """`init` on sizes (the compiled kernel)."""
    ku, ki = jax.random.split(key)
    a = np.sqrt(3.0) * init_scale
    W = jax.random.uniform(ku, (n_rows, n_factors), dtype=dtype, minval=-a, maxval=a)
    H = jax.random.uniform(ki, (n_cols, n_factors), dtype=dtype, minval=-a, maxval=a)
    return BPRParams(W, H, jnp.zeros((n_cols,), dtype=dtype))


_init_jit = jax.jit(_init_arrays, static_argnums=(1, 2, 3, 5))
_sample_jit = jax.jit(_sample)


#: Triples per chunk of the end-of-epoch evaluation (`EpochInfo.log_sigmoid_after`): its (chunk, K)
#: gathers of w_u, h_i, h_j stay small instead of three (N, K) arrays (issue 14).
EVAL_CHUNK = 65536


def _epoch(key, params, data, learning_rate, reg, bias_reg, popularity, max_tries, batch_size,
           eval_chunk=EVAL_CHUNK):
    N = data.rows.shape[0]
    n_batches = -(-N // batch_size)
    kp, ks = jax.random.split(key)
    # a uniformly random order (ties of 32 random bits have probability ~N^2 / 2^33; they keep
    # index order); one sort compiles much faster than jax.random.permutation's rounds
    perm = jnp.argsort(jax.random.bits(kp, (N,), dtype=jnp.uint32)).astype(jnp.int32)
    pad = n_batches * batch_size - N
    idx = jnp.concatenate([perm, jnp.zeros((pad,), jnp.int32)]).reshape(n_batches, batch_size)
    live = jnp.concatenate([jnp.ones((N,), bool), jnp.zeros((pad,), bool)]).reshape(n_batches, batch_size)
    keys = jax.random.split(ks, n_batches)
    dtype = params.item_bias.dtype

    def body(p, xs):
        k, ix, lv = xs
        u = data.rows[ix]
        i = data.cols[ix]
        j, ok = _sample(k, data, u, popularity, max_tries)
        w = (lv & ok).astype(dtype)
        d = _x_diff(p, u, i, j)
        p = _scatter_step(p, p, u, i, j, w, learning_rate, reg, bias_reg)
        return p, (jnp.sum(w * jax.nn.log_sigmoid(d)), jnp.sum(w), jnp.sum(lv & ~ok), j, w)

    params, (ll, n_ok, n_rej, negs, ws) = jax.lax.scan(body, params, (keys, idx, live))
    n_acc = jnp.maximum(jnp.sum(n_ok), 1)
    flat_idx, flat_negs, flat_ws = idx.reshape(-1), negs.reshape(-1), ws.reshape(-1)

    def after_sum(start, size, acc):  # the epoch's triples at the new parameters, in chunks
        ix = jax.lax.dynamic_slice_in_dim(flat_idx, start, size)
        j = jax.lax.dynamic_slice_in_dim(flat_negs, start, size)
        w = jax.lax.dynamic_slice_in_dim(flat_ws, start, size)
        return acc + jnp.sum(w * jax.nn.log_sigmoid(_x_diff(params, data.rows[ix], data.cols[ix], j)))

    after = over_chunks(flat_idx.shape[0], eval_chunk, after_sum, jnp.zeros((), dtype)) / n_acc
    info = EpochInfo(jnp.sum(ll) / n_acc, jnp.sum(n_rej) / N, after)
    return params, info


_epoch_jit = jax.jit(_epoch, static_argnames=("batch_size", "eval_chunk"))


def epoch(
    key,
    params: BPRParams,
    data: BPRData,
    learning_rate: float,
    reg: float,
    bias_reg: float | None = None,
    *,
    sampling: str = "uniform",
    batch_size: int = 256,
    max_tries: int = 16,
    eval_chunk: int = EVAL_CHUNK,
) -> tuple[BPRParams, EpochInfo]:
    """One epoch of minibatched LearnBPR (jitted; `lax.scan` over the batches).

    Every training positive is the (u, i) of exactly one triple, in the order of a permutation
    drawn from ``key``; the last batch is padded with weight-0 triples. Each batch takes the
    step ``params + learning_rate * triple_gradients(...)``.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    data : BPRData
        The training positives in CSR form (`bpr_data`), N entries.
    learning_rate : float > 0
        The SGD step size alpha.
    reg : float >= 0
        L2 constant of the factors.
    bias_reg : float >= 0, optional
        L2 constant of the item biases (default: ``reg``).
    sampling : {"uniform", "popularity"}, keyword-only, default "uniform"
        The negative-sampling scheme.
    batch_size : int >= 1, keyword-only, default 256
        Triples per SGD step (static).
    max_tries : int >= 1, keyword-only, default 16
        Negative draws per triple.
    eval_chunk : int >= 1, keyword-only, default `EVAL_CHUNK`
        Triples per chunk of the end-of-epoch sum behind ``log_sigmoid_after`` (static; memory
        O(eval_chunk K) instead of O(N K); its value depends on ``eval_chunk`` only through the
        order of the float additions).

    Returns
    -------
    params : BPRParams
        The shapes and dtype of ``params``.
    info : EpochInfo
        0-d arrays of that dtype.

    Raises
    ------
    ValueError
        an unknown ``sampling``. The other arguments are not validated here (`fit` validates
        them).
    ZeroDivisionError
        Not of its own: ``batch_size = 0``, while tracing.

    Source: baseline (not a seed file): LearnBPR, Rendle et al. 2009 fig. 4, minibatched
    (module docstring: one shuffled pass over the positives instead of draws with replacement).
    """
    _check_sampling(sampling)
    bias_reg = reg if bias_reg is None else bias_reg
    return _epoch_jit(
        key, params, data, learning_rate, reg, bias_reg, jnp.asarray(sampling == "popularity"), jnp.int32(max_tries),
        int(batch_size), int(eval_chunk),
    )


def step(key, params: BPRParams, data: BPRData, hyper: BPRHyper | None = None, *, learning_rate: float = 0.05,
         sampling: str = "uniform", batch_size: int = 256, max_tries: int = 16) -> tuple[BPRParams, EpochInfo]:
    """The protocol step: one epoch of minibatched LearnBPR (`epoch`) with the constants of ``hyper``.

    Parameters
    ----------
    key : jax.Array
        A jax PRNG key.
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    data : BPRData
        The training positives in CSR form (`bpr_data`), N entries.
    hyper : BPRHyper, optional
        reg and bias_reg (None: ``BPRHyper()``).
    learning_rate : float > 0, keyword-only, default 0.05
        The SGD step size.
    sampling : {"uniform", "popularity"}, keyword-only, default "uniform"
        The negative-sampling scheme.
    batch_size : int >= 1, keyword-only, default 256
        Triples per SGD step.
    max_tries : int >= 1, keyword-only, default 16
        Negative draws per triple.

    Returns
    -------
    params : BPRParams
        After the epoch.
    info : EpochInfo
        ``log_sigmoid_after`` describes the new parameters.

    Raises
    ------
    ValueError
        An unknown sampling.

    Source: Rendle et al. 2009 fig. 4.
    """
    hyper = BPRHyper() if hyper is None else hyper
    return epoch(key, params, data, learning_rate, hyper.reg, hyper.bias_reg, sampling=sampling,
                 batch_size=batch_size, max_tries=max_tries)


def bpr_opt(params: BPRParams, data: BPRData, hyper: BPRHyper | None = None) -> jax.Array:
    """The protocol target: BPR-Opt (Rendle et al. 2009 sec. 4.1, with the per-occurrence L2 of
    `objective`) estimated on one triple per training positive, its negative drawn uniformly with
    the fixed key ``PRNGKey(0)`` (so the value is a deterministic function of the parameters).

    Work O(N K).

    Parameters
    ----------
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    data : BPRData
        The training positives in CSR form (`bpr_data`), N entries.
    hyper : BPRHyper, optional
        reg and bias_reg (None: ``BPRHyper()``).

    Returns
    -------
    jax.Array, shape (), the dtype of ``params``
        The estimate in nats (the sum over the N triples).

    Raises
    ------
    AttributeError
        Not of its own: a ``hyper`` without ``reg`` / ``bias_reg``.

    Source: baseline (not a seed file), Rendle et al. 2009 eq. BPR-Opt; the fixed-negative
    estimate: project addition.
    """
    hyper = BPRHyper() if hyper is None else hyper
    bias_reg = hyper.reg if hyper.bias_reg is None else hyper.bias_reg
    neg, ok = _sample_jit(jax.random.PRNGKey(0), data, data.rows, jnp.asarray(False), jnp.int32(16))
    w = ok.astype(params.item_bias.dtype)
    return objective(params, data.rows, data.cols, neg, w, hyper.reg, bias_reg)


# ---------------------------------------------------------------------------
# stopping rule on held-out positives (issue 27)
# ---------------------------------------------------------------------------


class ValidationSet(NamedTuple):
    """Held-out training positives with sampled negatives, for the AUC stopping rule (a NamedTuple).

    Parameters
    ----------
    users : numpy.ndarray, shape (V,), int64
        The validation users, distinct, increasing.
    positives : numpy.ndarray, shape (V,), int64
        One held-out positive item per validation user.
    negatives : numpy.ndarray, shape (V, M), int64
        M items per user, each uniform over the user's non-positives (of the full training data,
        the held-out one included), drawn with replacement.

    Raises
    ------
    None of its own (a NamedTuple; build with `hold_out_validation`).

    Source: project addition (issue 27).
    """

    users: np.ndarray
    positives: np.ndarray
    negatives: np.ndarray


def hold_out_validation(train: Observations, n_users: int = 2000, n_negatives: int = 100,
                        seed: int = 0) -> tuple[Observations, ValidationSet]:
    """Carve a validation set out of the training positives: one positive of each of ``n_users`` users.

    The users are drawn uniformly without replacement among those with at least 2 positives and at
    least one non-positive (so each keeps a training positive and has negatives); all of them when
    fewer are eligible. Each gives one positive, uniform over its positives, removed from the
    returned training data. Negatives are uniform over the user's non-positives, by rejection (a
    redrawn candidate is exact: the first accepted draw is uniform on the non-positives), with an
    exact fallback (a uniform choice from the explicit complement) for the few left after 64 rounds.
    Work O(N log N + V M), never I x J.

    Parameters
    ----------
    train : Observations, shape (I, J)
        Every stored entry a positive, N entries.
    n_users : int >= 1, default 2000
        V at most.
    n_negatives : int >= 1, default 100
        M.
    seed : int, default 0
        The `numpy.random.Generator` seed of all draws.

    Returns
    -------
    train : Observations, shape (I, J)
        N - V entries, the others unchanged (values, dtype, kind).
    validation : ValidationSet
        users (V,), positives (V,), negatives (V, M).

    Raises
    ------
    TypeError
        ``train`` not Observations.
    ValueError
        ``n_users`` or ``n_negatives`` not an integer >= 1; no user with at least 2 positives and a
        non-positive ("cannot hold out validation positives").

    Source: project addition (the held-out-positive validation practitioners use to stop BPR; issue 27).
    """
    if not isinstance(train, Observations):
        raise TypeError(f"train must be custom_inference.data.Observations, got {type(train).__name__}")
    n_users = _check_int("validation_users", n_users, 1)
    n_negatives = _check_int("validation_negatives", n_negatives, 1)
    rows, cols = np.asarray(train.rows, np.int64), np.asarray(train.cols, np.int64)
    I, J = int(train.n_rows), int(train.n_cols)
    deg = np.bincount(rows, minlength=I)
    eligible = np.flatnonzero((deg >= 2) & (deg < J))
    if eligible.size == 0:
        raise ValueError("cannot hold out validation positives: no user has at least 2 training positives "
                         "and at least one item it has not interacted with")
    rng = np.random.default_rng(seed)
    V = min(n_users, eligible.size)
    users = np.sort(rng.choice(eligible, size=V, replace=False))
    order = np.lexsort((cols, rows))  # row-major positions of the entries
    indptr = np.concatenate([[0], np.cumsum(deg)])
    pick = indptr[users] + np.floor(rng.random(V) * deg[users]).astype(np.int64)
    held = order[pick]  # entry index (in train's order) of each held-out positive
    positives = cols[held]
    keys = np.sort(rows * J + cols)  # every positive (u, i) as u J + i, for membership tests

    def is_pos(u, j):
        pos = np.searchsorted(keys, u * J + j)
        return (pos < keys.size) & (keys[np.minimum(pos, keys.size - 1)] == u * J + j)

    uu = np.repeat(users, n_negatives).reshape(V, n_negatives)
    neg = rng.integers(0, J, size=(V, n_negatives))
    bad = is_pos(uu, neg)
    for _ in range(64):
        if not bad.any():
            break
        neg[bad] = rng.integers(0, J, size=int(bad.sum()))
        bad = is_pos(uu, neg)
    for r, c in zip(*np.nonzero(bad)):  # dense users only: the exact complement
        u = users[r]
        neg[r, c] = rng.choice(np.setdiff1d(np.arange(J), cols[order[indptr[u]:indptr[u + 1]]]))
    keep = np.ones(rows.size, bool)
    keep[held] = False
    vals = np.asarray(train.values)[keep]
    reduced = Observations(np.asarray(train.rows)[keep], np.asarray(train.cols)[keep], vals, I, J)
    return reduced, ValidationSet(users, positives.astype(np.int64), neg.astype(np.int64))


def validation_auc(params: BPRParams, vset: ValidationSet) -> np.ndarray:
    """Per-user AUC of the held-out positive against the sampled negatives.

    AUC_u = (1/M) sum_m [1(x_u,pos > x_u,neg_m) + 1/2 1(x_u,pos = x_u,neg_m)], x as `score_users`.
    Work O(V M K).

    Parameters
    ----------
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    vset : ValidationSet
        From `hold_out_validation`: V users, M negatives each.

    Returns
    -------
    numpy.ndarray, shape (V,), float64
        Each in [0, 1] (their mean is the validation AUC).

    Raises
    ------
    None of its own (indices come from `hold_out_validation`).

    Source: project addition (the sampled AUC of Rendle et al. 2009 sec. 6.2, on held-out training
    positives; issue 27).
    """
    return np.asarray(_auc_jit(params, jnp.asarray(vset.users), jnp.asarray(vset.positives),
                               jnp.asarray(vset.negatives)), np.float64)


def _auc(params, users, pos, neg):
    w = params.user_factors[users]  # (V, K)
    xp = jnp.sum(w * params.item_factors[pos], -1) + params.item_bias[pos]  # (V,)
    xn = jnp.einsum("vk,vmk->vm", w, params.item_factors[neg]) + params.item_bias[neg]  # (V, M)
    return jnp.mean((xp[:, None] > xn) + 0.5 * (xp[:, None] == xn), axis=1)


_auc_jit = jax.jit(_auc)


class AUCStoppingRule:
    """Early stopping on the validation AUC: stop after ``patience`` checks without a gain beyond noise.

    At each check c the per-user AUCs a_c (V,) (`validation_auc`) are compared, user by user, with
    those of the *reference* check r (the last check whose gain was beyond noise; the first check is
    the first reference):

        gain = mean_u (a_c,u - a_r,u),      se = sd_u (a_c,u - a_r,u) / sqrt(V)   (ddof 1)

    The standard error: the V validation users are a random sample of users, and each user's
    difference d_u = a_c,u - a_r,u depends only on that user's positive and negatives (drawn
    independently per user), so the d_u are i.i.d. given the two parameter sets and the variance of
    their mean is Var(d) / V, estimated by the sample variance. It is the paired standard error of the
    gain: the two checks score the same users, positives and negatives, so the (larger) standard error
    of one mean AUC, sd_u(a_c,u) / sqrt(V) (each a_c,u a mean of M Bernoulli comparisons plus the
    spread between users), would count the between-user variance that cancels in the difference. The
    latter is reported too (``se_mean``).

    A check with gain > se resets the counter and becomes the reference; otherwise the counter grows,
    and the rule is met when it reaches ``patience``. Comparing with the reference (not the previous
    check) means a slow steady rise accumulates until it exceeds its standard error, so it does not
    stop the fit. The *best* check is the one with the highest mean AUC (ties: the earlier), whose
    parameters the fit returns.

    Parameters
    ----------
    patience : int >= 1.

    Raises
    ------
    ValueError
        ``patience`` not an integer >= 1; `update` with an AUC vector of another length or empty.

    Source: project addition (issue 27).
    """

    def __init__(self, patience: int = 3):
        self.patience = _check_int("patience", patience, 1)
        self.reference: np.ndarray | None = None
        self.since = 0
        self.best_auc = -np.inf
        self.best_epoch = -1
        self.best_params = None

    def update(self, auc: np.ndarray, epoch: int, params=None) -> dict:
        """Record a check after ``epoch`` epochs with per-user AUCs ``auc`` and its ``params``.

        Parameters
        ----------
        auc : array-like, shape (V,), float
            Per-user AUCs of the check (`validation_auc`).
        epoch : int
            Epochs done at the check.
        params : BPRParams, optional
            The parameters checked (kept when this check is the best).

        Returns
        -------
        dict
            auc (mean), se_mean (sd / sqrt(V)), gain and se (against the reference; NaN at the
            first check), beyond_noise (bool), stop (bool: the rule is met), best (bool: this check
            is the best so far).

        Raises
        ------
        ValueError
            An empty vector or one of another length than the first check's.

        Source: project addition (issue 27).
        """
        auc = np.asarray(auc, np.float64)
        if auc.ndim != 1 or auc.size == 0 or (self.reference is not None and auc.size != self.reference.size):
            raise ValueError(f"auc must be a non-empty vector of the validation users' AUCs, got shape {auc.shape}")
        V = auc.size
        mean = float(auc.mean())
        se_mean = float(auc.std(ddof=1) / np.sqrt(V)) if V > 1 else float("nan")
        if self.reference is None:
            gain, se, beyond = float("nan"), float("nan"), True
        else:
            d = auc - self.reference
            gain = float(d.mean())
            se = float(d.std(ddof=1) / np.sqrt(V)) if V > 1 else 0.0
            beyond = gain > se
        if beyond:
            self.reference, self.since = auc, 0
        else:
            self.since += 1
        best = mean > self.best_auc
        if best:
            self.best_auc, self.best_epoch, self.best_params = mean, int(epoch), params
        return {"auc": mean, "se_mean": se_mean, "gain": gain, "se": se, "beyond_noise": bool(beyond),
                "stop": self.since >= self.patience, "best": bool(best)}

    def state(self) -> dict:
        """The rule's host state as a dict of numpy arrays (for a checkpoint's ``extra``).

        Returns
        -------
        dict of str to numpy.ndarray
            ``rule_reference``: the reference per-user AUCs (V,) float64 (empty before the first
            check); ``rule_since``, ``rule_best_auc``, ``rule_best_epoch`` (0-d); and the best
            parameters (``rule_best_<field>``, the shapes of `BPRParams`) once a check ran.

        Raises
        ------
        None of its own.

        Source: project addition (issue 27).
        """
        ref = np.zeros(0) if self.reference is None else self.reference
        out = {"rule_reference": ref, "rule_since": np.asarray(self.since), "rule_best_auc": np.asarray(self.best_auc),
               "rule_best_epoch": np.asarray(self.best_epoch)}
        if self.best_params is not None:
            out.update({f"rule_best_{k}": np.asarray(v) for k, v in self.best_params._asdict().items()})
        return out

    def restore(self, extra: dict) -> None:
        """Set the state from `state`'s arrays (a resumed checkpoint).

        Parameters
        ----------
        extra : dict of str to numpy.ndarray
            What `state` returned (read back from a checkpoint).

        Raises
        ------
        KeyError
            A key of `state` is missing.

        Source: project addition (issue 27).
        """
        ref = np.asarray(extra["rule_reference"], np.float64)
        self.reference = ref if ref.size else None
        self.since = int(extra["rule_since"])
        self.best_auc = float(extra["rule_best_auc"])
        self.best_epoch = int(extra["rule_best_epoch"])
        if "rule_best_item_bias" in extra:
            self.best_params = BPRParams(*(jnp.asarray(extra[f"rule_best_{k}"]) for k in BPRParams._fields))


def fit(
    key,
    train: Observations,
    K: int = 64,
    hyper: BPRHyper | None = None,
    *,
    n_epochs: int = 50,
    learning_rate: float = 0.05,
    sampling: str = "uniform",
    batch_size: int = 256,
    max_tries: int = 16,
    init_scale: float = 0.1,
    dtype=np.float32,
    progress: bool = False,
    checkpoint=None,
    checkpoint_every: int = 10,
    resume: bool = False,
    validate_every: int | None = None,
    patience: int = 3,
    validation_users: int = 2000,
    validation_negatives: int = 100,
) -> base.FitResult:
    """Fit BPR-MF by minibatched SGD (LearnBPR, Rendle et al. 2009 fig. 4).

    Two stopping rules: ``validate_every=None`` (default) runs exactly ``n_epochs`` epochs; an integer
    stops on held-out positives (issue 27): one positive of each of ``validation_users`` users is
    removed from the training data for the whole run (`hold_out_validation`, seed `vi_driver.host_seed`
    of ``key``), every ``validate_every`` epochs the validation AUC against ``validation_negatives``
    sampled negatives per user is computed (`validation_auc`), the run stops when ``patience``
    consecutive checks gain no more than one standard error of the paired per-user gain
    (`AUCStoppingRule`), or after ``n_epochs``, and the parameters of the best check (highest AUC) are
    returned.

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed (`base.as_key`); the same key (and arguments) gives the
        same parameters.
    train : Observations, shape (I, J)
        Every stored entry is a positive (N entries).
    K : int >= 1, default 64
        Number of factors.
    hyper : BPRHyper, optional
        reg: lambda of the factors, per occurrence in a triple; bias_reg: lambda of the item
        biases, default reg. None: ``BPRHyper()``.
    n_epochs : int >= 1, keyword-only, default 50
        One epoch samples one triple per training positive.
    learning_rate : float > 0, keyword-only, default 0.05
        The SGD step size alpha.
    sampling : {"uniform", "popularity"}, keyword-only, default "uniform"
        ``"uniform"`` (BPR-uniform) or ``"popularity"`` (BPR-popularity, P(j) ~ n_j).
    batch_size : int >= 1, keyword-only, default 256
        Triples per SGD step (1 is LearnBPR exactly).
    max_tries : int >= 1, keyword-only, default 16
        Negative draws before a triple is rejected.
    init_scale : float > 0, keyword-only, default 0.1
        Standard deviation of the initial (uniform) factors.
    dtype : numpy dtype, keyword-only, default float32
        float32 (fast) or float64 (needs jax_enable_x64).
    progress : bool, keyword-only, default False
        tqdm bar over the epochs.
    checkpoint : str or path-like, keyword-only, optional
        `vi_driver.fit` checkpoint (atomic ``.npz``) every ``checkpoint_every`` epochs and at the
        end: the parameters, the epochs done and the per-epoch diagnostics so far (with
        ``validate_every``, the rule's state too: reference AUCs, counter, best parameters).
        Without it nothing is written.
    checkpoint_every : int >= 1, keyword-only, default 10
        Epochs between checkpoints.
    resume : bool, keyword-only, default False
        Continue from ``checkpoint`` when it exists. The epoch keys are split from ``key`` up front,
        so a resumed run (same arguments) equals the uninterrupted one bit for bit
        (tests/custom_inference/test_bpr.py).
    validate_every : int >= 1, keyword-only, optional
        Epochs between validation checks (None: no validation, the fixed ``n_epochs``).
    patience : int >= 1, keyword-only, default 3
        Checks without a gain beyond one standard error before stopping.
    validation_users : int >= 1, keyword-only, default 2000
        V (fewer when fewer users have >= 2 positives and a non-positive).
    validation_negatives : int >= 1, keyword-only, default 100
        M, sampled negatives per validation user.

    Returns
    -------
    base.FitResult
        ``state`` BPRParams; ``trace`` float64 (n_epochs,) `EpochInfo.log_sigmoid_after` per
        epoch (mean ln sigma(x_ui - x_uj) of the epoch's triples at the parameters after it);
        ``idata`` with the point estimate as ``posterior`` (user_factors (user, component),
        item_factors (item, component), item_bias (item); one chain, one draw) and group
        ``sgd_trace`` (mean_log_sigmoid, rejected, log_sigmoid_after, seconds per epoch (the first
        includes compilation); dim epoch). With ``validate_every``: the state and posterior are the
        best check's parameters; the trace group also holds validation_auc, validation_se_mean,
        validation_gain, validation_gain_se (NaN between checks); attrs ``converged`` 1 when the
        rule stopped the run, 0 when ``n_epochs`` ran out, ``n_iter`` the epochs run,
        ``best_epoch`` and ``best_validation_auc`` (and its ``best_validation_auc_se``),
        ``validation_users`` (V used), ``validation_negatives``, ``validate_every``, ``patience``,
        ``n_train_positives`` (N - V). Attrs ``stopping_rule`` (both modes) says which rule ran.

    Raises
    ------
    ValueError
        ``train`` with a stored value <= 0 or NaN; a field out of range
        (the message names it); an unknown ``sampling``; a float dtype other than float32/64;
        ``checkpoint_every`` not an integer >= 1 with a ``checkpoint``, or a checkpoint whose state
        does not match (`vi_driver.fit`); ``validate_every``, ``patience``, ``validation_users`` or
        ``validation_negatives`` not an integer >= 1, or no user to hold a positive out of
        (`hold_out_validation`); ``dtype=float64`` without jax_enable_x64.
    OSError
        the checkpoint cannot be written.
    TypeError
        ``train`` not Observations; a bad key.
    base.RunInterrupted
        SIGINT / SIGTERM during a checkpointed run (`vi_driver.fit`).

    Source: baseline (not a seed file): Rendle et al. 2009 (LearnBPR fig. 4, BPR-MF sec. 4.3.1),
    the BPR-uniform / BPR-pop baseline of 000_619a0297b9d686b2.txt sec. 6 and
    003_203f63200c0d7157.txt sec. 6.1.2.
    """
    hyper = BPRHyper() if hyper is None else hyper
    if isinstance(train, Observations):
        train.validate("real", name="train", float_only=False)  # host checks first: before any compilation
    K = _check_int("K", K, 1)
    n_epochs = _check_int("n_epochs", n_epochs, 1)
    lr = _check_float("learning_rate", learning_rate, positive=True)
    reg = _check_float("hyper.reg", hyper.reg, positive=False)
    bias_reg = reg if hyper.bias_reg is None else _check_float("hyper.bias_reg", hyper.bias_reg, positive=False)
    _check_sampling(sampling)
    batch_size = _check_int("batch_size", batch_size, 1)
    max_tries = _check_int("max_tries", max_tries, 1)
    init_scale = _check_float("init_scale", init_scale, positive=True)
    dtype = base.compute_dtype(dtype)
    if dtype == np.float64 and not jax.config.jax_enable_x64:
        raise ValueError("dtype=float64 needs jax_enable_x64 (jax.config.update('jax_enable_x64', True))")
    rule = vset = None
    n_positives = int(np.asarray(train.rows).size) if isinstance(train, Observations) else 0
    if validate_every is not None:
        validate_every = _check_int("validate_every", validate_every, 1)
        rule = AUCStoppingRule(patience)
        train, vset = hold_out_validation(train, validation_users, validation_negatives,
                                          seed=vi_driver.host_seed(key))
    data = bpr_data(train)  # after the scalar checks: its device arrays compile conversions
    k_init, k_run = jax.random.split(base.as_key(key))
    params = _init_jit(k_init, data.n_rows, data.n_cols, K, init_scale, dtype)
    lr_a = jnp.asarray(lr, dtype)
    reg_a = jnp.asarray(reg, dtype)
    breg_a = jnp.asarray(bias_reg, dtype)
    pop = jnp.asarray(sampling == "popularity")
    tries = jnp.int32(max_tries)
    keys = jax.random.split(k_run, n_epochs)

    def sweep(p, t):  # one epoch; the driver times it (jax.block_until_ready) and records its EpochInfo
        return _epoch_jit(keys[t], p, data, lr_a, reg_a, breg_a, pop, tries, batch_size)

    checks = {"validation_auc": np.nan, "validation_se_mean": np.nan, "validation_gain": np.nan,
              "validation_gain_se": np.nan}
    if rule is not None:
        plain = sweep

        def sweep(p, t):  # an epoch, then (every validate_every epochs) a check of the AUC rule
            p, info = plain(p, t)
            stats, met = {**{f: info[k] for k, f in enumerate(EpochInfo._fields)}, **checks}, False
            if (t + 1) % validate_every == 0:
                c = rule.update(validation_auc(p, vset), t + 1, p)
                stats.update(validation_auc=c["auc"], validation_se_mean=c["se_mean"], validation_gain=c["gain"],
                             validation_gain_se=c["se"])
                met = c["stop"]
            return p, vi_driver.Report(stats=stats, converged=met)

    def final(p, res):  # the best check's parameters (the last epoch's when no check ran)
        return p if rule is None or rule.best_params is None else rule.best_params

    def attrs(res):
        own = {"learning_rate": lr, "reg": reg, "bias_reg": bias_reg, "batch_size": batch_size, "n_epochs": n_epochs}
        if rule is None:
            return {**own, "stopping_rule": f"none: a fixed {n_epochs} epochs"}
        auc = res.stats.get("validation_auc", np.zeros(0))
        at_best = np.flatnonzero(np.arange(1, auc.size + 1) == rule.best_epoch)
        return {**own, "stopping_rule": (f"held-out AUC: every {validate_every} epochs, stop after {rule.patience} "
                                         f"checks without a paired gain > 1 standard error; best check returned"),
                "best_epoch": int(rule.best_epoch), "best_validation_auc": float(rule.best_auc),
                "best_validation_auc_se": float(res.stats["validation_se_mean"][at_best[0]]) if at_best.size else np.nan,
                "validate_every": validate_every, "patience": rule.patience, "validation_users": int(vset.users.size),
                "validation_negatives": int(vset.negatives.shape[1]), "n_train_positives": n_positives - int(vset.users.size)}

    output = vi_driver.Output(
        "bpr", f"sgd-{sampling}", lambda p: (vi_driver.point_posterior(p._asdict()), "point estimate"),
        dims={"user_factors": ["user", "component"], "item_factors": ["item", "component"], "item_bias": ["item"],
              **{f: ["epoch"] for f in (*EpochInfo._fields, "seconds", *checks)}},
        coords={"user": np.arange(data.n_rows), "item": np.arange(data.n_cols), "component": np.arange(K)},
        trace_group="sgd_trace", trace=lambda res: {**res.stats, "seconds": res.sweep_seconds},
        result_trace=lambda res: res.stats["log_sigmoid_after"], source="Rendle et al. 2009 (UAI), LearnBPR fig. 4",
        final=final, attrs=attrs)
    options = vi_driver.FitOptions(max_iter=n_epochs, progress=progress, checkpoint=checkpoint,
                                   checkpoint_every=checkpoint_every, resume=resume, dtype=dtype)
    return vi_driver.fit(ALGORITHM, data, options=options, output=output, key=key, K=K, hyper=hyper, state=params,
                         sweep=sweep, stats=EpochInfo._fields, desc=f"BPR ({sampling}, K={K})",
                         save_extra=None if rule is None else rule.state,
                         restore_extra=None if rule is None else rule.restore)


def score_users(params: BPRParams, users) -> jax.Array:
    """Scores x_ui = w_u . h_i + b_i of every item for the given users.

    Parameters
    ----------
    params : BPRParams
        user_factors (I, K), item_factors (J, K), item_bias (J,), float32 or float64.
    users : array-like, shape (B,), int
        Users, in 0 .. I-1 (integral floats are accepted).

    Returns
    -------
    jax.Array, shape (B, J), the dtype of ``params``
        Higher means ranked earlier.

    Raises
    ------
    ValueError
        ``users`` not 1-D integer indices in range.

    Source: baseline (not a seed file): the BPR-MF score x_ui of Rendle et al. 2009 sec. 4.3.1,
    plus an item bias.
    """
    u = np.asarray(users)
    I = params.user_factors.shape[0]
    if u.ndim != 1:
        raise ValueError(f"users must be 1-D, got shape {u.shape}")
    if u.size and not np.issubdtype(u.dtype, np.integer):
        if np.any(u != np.round(u)):
            raise ValueError("users must hold integer indices")
    u = u.astype(np.int64)
    if u.size and (u.min() < 0 or u.max() >= I):
        raise ValueError(f"users index out of range: found [{u.min()}, {u.max()}], allowed [0, {I - 1}]")
    return params.user_factors[u] @ params.item_factors.T + params.item_bias[None, :]


#: The protocol declaration (`custom_inference.base`): data of `step` and `bpr_opt` is a `BPRData`.
ALGORITHM = base.Algorithm(
    "bpr-sgd", "sgd", init, step, bpr_opt, "objective",
    {"user_factors": ("user", "component"), "item_factors": ("item", "component"), "item_bias": ("item",)},
    "Rendle, Freudenthaler, Gantner, Schmidt-Thieme, UAI 2009: BPR-Opt sec. 4.1, LearnBPR fig. 4").check()
