"""The scoring engine behind `FittedModel.recommend` and `FittedModel.predict`: fast, and bounded in
memory by a stated number of bytes.

What is computed is unchanged: a score is the mean over the S stored posterior draws (chains
stacked; draws from q for VI, kept sweeps for samplers, one point for MAP / SGD) of
E[y_ui | draw s], the adapter's ``mean`` of `validation.frontdoor.api_models`, and its sd is the sd over those
draws (ddof 1). How it is computed:

* Every registered model's E[y_ui | draw s] is ``link(x_s(u, i))`` with a score linear in each
  factor (a `LinearScore`, declared beside each adapter's mean in `validation.frontdoor.api_models`)::

      x_s(u, i) = offset + c_s + a_s[u] + b_s[i] + sum_k w_sk P_s[u, k] Q_s[i, k]

  link identity (HPF, HPF Gibbs, SBMF, BPMF, the FMs, BPR, NPFM / PPFM), sigmoid (SIBM, RG) or the
  PSM choice probability psi_s[i] sigmoid(x) / sum_j psi_s[j] sigmoid(x_s(u, j)).
* With the identity link the mean over the S draws of every item for a chunk of U users is one
  matrix product, (U, S K) @ (S K, J) / S, plus the means of the biases: no per-draw scores at all.
  The result equals the mean of the stored per-draw values up to float rounding (summation order).
  (For HPF CAVI, E_q[theta] E_q[beta] would be the exact mean under q with no draws at all; it is
  not used, so that the score stays "the mean over the stored draws", the same number as before.)
* Other links need per-draw scores: they are made for a chunk of users x a chunk of draws at a
  time (batched matrix products), passed through the link in place and summed.
* `recommend` needs the sd only of the N items it returns: it is computed from per-draw values of
  those U x N pairs only. `predict` computes the per-draw values of its M pairs in chunks of pairs
  and reduces each chunk to mean, sd and the interval before the next.
* A model without a `LinearScore` (a user's own adapter) is scored through its adapter's ``mean``
  on chunks of (user, item) pairs.

Memory bound: every temporary array the engine makes (gathered factors, copies, per-draw scores,
accumulators, quantile work space) is planned by `plan_items` / `plan_pairs` so that the planned
bytes of the arrays alive at once stay at or under ``max_bytes`` (default `MAX_BYTES`, 256 MiB). Not
counted: the posterior itself (already in memory), the returned DataFrame and its (M,) / (U N,)
columns, the (U,) / (J,) index arrays, and the constant overhead of numpy / BLAS / pandas; for an
adapter without a `LinearScore` the engine also cannot see inside its ``mean`` and plans with an
estimate of (2 K + 6) float64 per pair and draw. `plan_items` raises when even one user and one
draw do not fit (the message gives the bytes needed).

Source: project addition (issue 24: scoring at the speed of the peers, in bounded memory).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = ["LinearScore", "MAX_BYTES", "Recommendations", "ItemsPlan", "plan_items", "plan_pairs", "items_bytes",
           "pairs_bytes", "recommend", "predict", "iter_item_scores", "KINDS", "OBSERVATION_DRAWS"]

#: Default bound, in bytes, on the engine's temporary arrays alive at once (see the module docstring).
MAX_BYTES = 256 * 2**20

LINKS = ("identity", "sigmoid", "psm", "adapter")
_F8 = 8  # bytes of a float64


@dataclass(frozen=True)
class LinearScore:
    """A model's E[y_ui | draw s] as a score linear in each factor, passed through a link.

    E[y_ui | draw s] = link(x_s(u, i)) with
    ``x_s(u, i) = offset + const[s] + user_bias[s, u] + item_bias[s, i] + sum_k weight[s, k] P[s, u, k] Q[s, i, k]``.
    Declared per model in `validation.frontdoor.api_models` (``SCORE_FORMS``), next to the adapter's mean it
    must equal (tested in tests/validation/test_scoring.py).

    Parameters
    ----------
    P : numpy.ndarray, shape (S, I, K), real dtype
        User factors of the S draws (views are fine).
    Q : numpy.ndarray, shape (S, J, K), real dtype
        Item factors.
    const : numpy.ndarray, shape (S,), optional
        A per-draw constant (None: 0).
    user_bias : numpy.ndarray, shape (S, I), optional
        Per-draw user biases (None: 0).
    item_bias : numpy.ndarray, shape (S, J), optional
        Per-draw item biases (None: 0).
    weight : numpy.ndarray, shape (S, K), optional
        Per-draw weights of the K products (None: 1).
    offset : float, default 0.0
        Added to every score (e.g. BPMF's training mean), in the units of the fitted values.
    link : {"identity", "sigmoid", "psm"}, default "identity"
        ``"sigmoid"`` is 0.5 (1 + tanh(x / 2)); ``"psm"`` is psi[s, i] sigmoid(x) / sum_j psi[s, j]
        sigmoid(x_s(u, j)), the sum over all J items.
    psi : numpy.ndarray, shape (S, J), optional
        PSM's item popularities, needed for ``"psm"`` only.

    Raises
    ------
    None of its own (the fields are not checked on construction; shapes that disagree fail in numpy when
    scored).

    Source: project addition (issue 24).
    """

    P: np.ndarray
    Q: np.ndarray
    const: np.ndarray | None = None
    user_bias: np.ndarray | None = None
    item_bias: np.ndarray | None = None
    weight: np.ndarray | None = None
    offset: float = 0.0
    link: str = "identity"
    psi: np.ndarray | None = None

    @property
    def n_draws(self) -> int:
        """S, the number of draws (``P.shape[0]``).

        Returns
        -------
        int

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.P.shape[0])

    @property
    def K(self) -> int:
        """K, the number of latent factors (``P.shape[-1]``).

        Returns
        -------
        int

        Raises
        ------
        None of its own.

        Source: project addition.
        """
        return int(self.P.shape[-1])

    def pair_draws(self, rows: np.ndarray, cols: np.ndarray, norm: np.ndarray | None = None, *,
                   block_bytes: int | None = None) -> np.ndarray:
        """E[y | draw s] for M (row, col) pairs, every draw.

        Memory: the result, three (S, M) temporaries and `api_models._dot`'s blocks (``block_bytes``); no
        (S, M, K) array.

        Parameters
        ----------
        rows : numpy.ndarray, shape (M,), int
            User indices (0..I-1).
        cols : numpy.ndarray, shape (M,), int
            Item indices (0..J-1).
        norm : numpy.ndarray, shape (S, M), float64, optional
            The PSM normaliser sum_j psi_sj sigmoid(x_s(row_m, j)) of each pair's user (link ``"psm"`` only;
            required there, ignored otherwise).
        block_bytes : int, optional
            Bytes of `api_models._dot`'s gathered blocks (default ``api_models.DOT_BLOCK_BYTES``).

        Returns
        -------
        numpy.ndarray, shape (S, M), float64
            E[y_(rows_m, cols_m) | draw s], in the units of the fitted values.

        Raises
        ------
        ValueError
            The link is ``"psm"`` and ``norm`` is missing.
        IndexError
            From numpy (in `api_models._dot`): an index out of range.

        Source: project addition.
        """
        from validation.frontdoor.api_models import DOT_BLOCK_BYTES, _dot

        x = _dot(self.P, self.Q, rows, cols, self.weight, block_bytes=block_bytes or DOT_BLOCK_BYTES)
        if self.const is not None:
            x += np.asarray(self.const, dtype=np.float64)[:, None]
        if self.user_bias is not None:
            x += self.user_bias[:, rows]
        if self.item_bias is not None:
            x += self.item_bias[:, cols]
        if self.offset:
            x += float(self.offset)
        if self.link == "identity":
            return x
        _sigmoid_(x)
        if self.link == "sigmoid":
            return x
        if norm is None:
            raise ValueError("pair_draws: link 'psm' needs norm (S, M), the normaliser of each pair's user")
        x *= self.psi[:, cols]
        x /= norm
        return x


def _sigmoid_(x: np.ndarray) -> np.ndarray:
    """0.5 (1 + tanh(x / 2)) in place (the formula of `api_models._sigmoid`, no temporaries)."""
    x *= 0.5
    np.tanh(x, out=x)
    x += 1.0
    x *= 0.5
    return x


# ------------------------------------------------------------------------------------------
# the chunk planner (pure functions of the sizes)


class ItemsPlan(NamedTuple):
    """Chunk sizes for scoring every item, as `plan_items` returns them.

    Parameters
    ----------
    users : int
        Users per chunk (>= 1).
    draws : int
        Draws per chunk (>= 1).
    bytes : int
        Planned peak bytes of one chunk's temporaries (`items_bytes` at these sizes), <= the ``max_bytes``
        it was planned for.

    Raises
    ------
    None of its own.

    Source: project addition (issue 24).
    """

    users: int
    draws: int
    bytes: int


def items_bytes(link: str, users: int, draws: int, *, n_items: int, n_draws: int, K: int, N: int = 10) -> int:
    """Planned bytes of the temporaries alive at once while scoring every item for a chunk of users.

    ``users`` users, ``draws`` draws at a time (`recommend`'s first pass), all float64 (U = users,
    d = draws, J = n_items, S = n_draws):

    - identity: J d K (item factors of d draws, laid out (J, d K)) + 2 U d K (user factors: the gather
      and its (U, d K) layout) + 2 U J (the running sum and one product) + S U (a user-bias gather) + 4 J
      (top-N work space of one user) + U N (the chosen scores);
    - sigmoid, psm: d U J (per-draw scores, link applied in place) + d J K (the item factors in float64
      when stored in another dtype) + 2 d U K (gathered user factors) + 2 U J (running sum and the sum over
      the chunk's draws) + 2 S U (user-bias gather; PSM's normalisers of the chunk's users, kept for the
      sd) + 4 J + U N;
    - adapter: 2 U J (the means and one user's pair indices) + 4 J + U N + (2 K + 12) S (at least one
      pair of the adapter's own mean; the pairs get what is left, `plan_pairs`); d is S.

    Parameters
    ----------
    link : {"identity", "sigmoid", "psm", "adapter"}
        The score form's link (``"adapter"``: a model without a `LinearScore`).
    users : int >= 1
        U, users per chunk.
    draws : int >= 1
        d, draws per chunk.
    n_items : int >= 1
        J, the items.
    n_draws : int >= 1
        S, the stored draws.
    K : int
        Latent factors.
    N : int, default 10
        Items chosen per user (negative counts as 0).

    Returns
    -------
    int
        Bytes (8 per float64 cell).

    Raises
    ------
    ValueError
        An unknown ``link``.

    Source: project addition (issue 24).
    """
    U, d, J, S = int(users), int(draws), int(n_items), int(n_draws)
    tail = 4 * J + U * max(int(N), 0)
    if link == "identity":
        cells = J * d * K + 2 * U * d * K + 2 * U * J + S * U + tail
    elif link in ("sigmoid", "psm"):
        cells = d * U * J + d * J * K + 2 * d * U * K + 2 * U * J + 2 * S * U + tail
    elif link == "adapter":
        cells = 2 * U * J + tail + (2 * K + 12) * S
    else:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    return _F8 * cells


def pairs_bytes(pairs: int, *, n_draws: int, K: int, block_bytes: int) -> int:
    """Planned bytes while turning ``pairs`` (user, item) pairs of a `LinearScore` into per-draw values and
    their statistics.

    6 (S, m) float64 arrays (the values, a bias gather, and the mean, std and quantile work space) plus
    ``block_bytes`` for `api_models._dot`'s gathered blocks (an adapter's own mean is planned at
    (2 K + 12) S float64 per pair instead: `plan_pairs`).

    Parameters
    ----------
    pairs : int
        m, the pairs of one chunk.
    n_draws : int
        S, the stored draws.
    K : int
        Latent factors; not used by the formula (kept so that the sizes are passed as to `plan_pairs`).
    block_bytes : int
        Bytes given to `api_models._dot`'s blocks.

    Returns
    -------
    int
        ``8 * 6 * n_draws * pairs + block_bytes``.

    Raises
    ------
    None of its own: ``int()`` of an argument that is not a number raises TypeError / ValueError (floats
    are truncated, not refused).

    Source: project addition (issue 24).
    """
    return _F8 * 6 * int(n_draws) * int(pairs) + int(block_bytes)


def plan_pairs(n_pairs: int, *, n_draws: int, K: int, max_bytes: int, adapter: bool = False) -> tuple[int, int]:
    """Pairs per chunk and `_dot`'s block bytes for per-draw values of ``n_pairs`` pairs under ``max_bytes``.

    For a `LinearScore`, a quarter of ``max_bytes`` (at most 32 MiB; the smallest block, one draw and one
    pair, when that leaves no room) goes to `api_models._dot`'s blocks and the rest to the pairs
    (`pairs_bytes`); for an adapter's own mean (``adapter=True``) each pair is planned at (2 K + 12) S
    float64, its internals estimated.

    Parameters
    ----------
    n_pairs : int
        M, the pairs to score (0 counts as 1).
    n_draws : int
        S, the stored draws.
    K : int
        Latent factors.
    max_bytes : int
        The bound on the temporaries alive at once.
    adapter : bool, default False
        Plan for an adapter's own mean instead of a `LinearScore`.

    Returns
    -------
    pairs : int
        Pairs per chunk, 1 <= pairs <= max(n_pairs, 1), with ``pairs_bytes(pairs, ...) <= max_bytes``.
    block_bytes : int
        Bytes of `_dot`'s blocks (0 for ``adapter=True``).

    Raises
    ------
    ValueError
        One pair does not fit (the message names the bytes needed).

    Source: project addition (issue 24).
    """
    S, K, n = int(n_draws), int(K), max(int(n_pairs), 1)
    if adapter:
        per = _F8 * (2 * K + 12) * S
        m = min(n, int(max_bytes) // per)
        if m < 1:
            raise ValueError(f"max_bytes={max_bytes} is too small: one pair of this model needs {per} bytes")
        return m, 0
    least = 3 * _F8 * max(K, 1)  # one draw and one pair per `_dot` block
    block = int(min(32 * 2**20, max(int(max_bytes) // 4, least)))  # a quarter for `_dot`, at most 32 MiB
    m = min(n, (int(max_bytes) - block) // (_F8 * 6 * S))
    if m < 1:  # too tight for a quarter: the smallest blocks
        block = least
        m = min(n, (int(max_bytes) - block) // (_F8 * 6 * S))
    if m < 1:
        raise ValueError(f"max_bytes={max_bytes} is too small: one pair needs "
                         f"{pairs_bytes(1, n_draws=S, K=K, block_bytes=least)} bytes")
    return int(m), block


@functools.lru_cache(maxsize=256)  # a pure function of ints: repeated calls skip the search
def plan_items(link: str, *, n_users: int, n_items: int, n_draws: int, K: int, max_bytes: int,
               N: int = 10) -> ItemsPlan:
    """Chunk sizes for scoring every item of ``n_users`` users under ``max_bytes`` (`items_bytes`).

    identity: as many draws per chunk as keep the item factors' (J, d K) layout within half of
    ``max_bytes`` (a long inner dimension is what makes the product fast), then as many users as fit;
    fewer draws if not even one user fits. sigmoid / psm: all draws if at least min(n_users, 64) users
    fit with them, else min(n_users, 64) users (fewer if needed) and as many draws as fit. adapter: as
    many users as fit with all draws, one draw count (S) only. Results are memoized (256 argument sets,
    a few hundred bytes each).

    Parameters
    ----------
    link : {"identity", "sigmoid", "psm", "adapter"}
        As `items_bytes`.
    n_users : int
        Users to score (0 counts as 1).
    n_items : int
        J, the items.
    n_draws : int
        S, the stored draws (0 counts as 1).
    K : int
        Latent factors.
    max_bytes : int
        The bound on the temporaries alive at once.
    N : int, default 10
        Items chosen per user.

    Returns
    -------
    ItemsPlan
        With 1 <= users <= max(n_users, 1), 1 <= draws <= n_draws and
        ``bytes = items_bytes(...) <= max_bytes``.

    Raises
    ------
    ValueError
        One user and one draw do not fit (the message gives the bytes needed), or an unknown link.

    Source: project addition (issue 24).
    """
    I, J, S, K = max(int(n_users), 1), int(n_items), max(int(n_draws), 1), int(K)
    cost = lambda u, d: items_bytes(link, u, d, n_items=J, n_draws=S, K=K, N=N)  # noqa: E731
    if cost(1, 1) > max_bytes:
        raise ValueError(f"max_bytes={max_bytes} is too small for this model: scoring one user needs "
                         f"{cost(1, 1)} bytes (n_items={J}, n_draws={S}, K={K})")

    def most_users(d):
        lo, hi = 0, I  # largest u in [0, I] with cost(u, d) <= max_bytes (cost grows with u)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if cost(mid, d) <= max_bytes else (lo, mid - 1)
        return lo

    def most_draws(u):
        lo, hi = 0, S
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if cost(u, mid) <= max_bytes else (lo, mid - 1)
        return lo

    if link == "identity":
        d = max(1, min(S, (int(max_bytes) // 2) // max(_F8 * J * max(K, 1), 1)))
        while d > 1 and most_users(d) < 1:
            d = max(1, d // 2)
        u = most_users(d)
    elif link in ("sigmoid", "psm"):
        want = min(I, 64)
        u = most_users(S)
        if u >= want:
            d = S
        else:
            u = max(1, min(want, most_users(1)))
            d = max(1, most_draws(u))
    elif link == "adapter":
        d, u = S, most_users(S)
    else:  # pragma: no cover (cost() raised above)
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    u = max(1, u)
    return ItemsPlan(int(u), int(d), int(cost(u, d)))


# ------------------------------------------------------------------------------------------
# the fitted model's scoring form


def _form(fitted) -> tuple[Any, dict, dict]:
    """(LinearScore or None, posterior dict name -> (S, ...) array, posterior attrs) of a fitted model
    (cached on the model: `_prepared`)."""
    p = _prepared(fitted, "draws")
    return p.form, p.post, p.attrs


class _Point(NamedTuple):
    """A single-draw identity-link score in the layout of one GEMM per user chunk:
    scores(rows) = ((P[rows] @ Q.T) + user_bias[rows, None]) + item_bias[None, :] + shift.
    P : (I, K) float64 (the draw's weights folded in); Q : (J, K) float64 C-contiguous;
    user_bias : (I,) or None; item_bias : (J,) or None; shift : float (const + offset)."""

    P: np.ndarray
    Q: np.ndarray
    user_bias: np.ndarray | None
    item_bias: np.ndarray | None
    shift: float


@dataclass
class _Prepared:
    """What `recommend` / `predict` / `iter_item_scores` need from a fitted model that does not change
    between calls, built once per (model, ``means``) by `_prepared` and kept on the `FittedModel`.

    form, post, attrs : as `_form` returns them (post's arrays are views of the InferenceData's, no
    copy); S, K : draws and components; sf : the score form for ``means`` (the q form or ``form``);
    item_bias_mean : (J,) or None and const_mean : float, of an identity-link ``sf``; point : a
    `_Point` when ``sf`` is a single draw with the identity link (``means="q"``, MAP / SGD fits), else
    None; owned_bytes : bytes of the arrays made for this entry (not views of the posterior)."""

    idata: Any
    form: Any
    post: dict
    attrs: dict
    S: int
    K: int
    sf: Any
    item_bias_mean: np.ndarray | None
    const_mean: float
    point: _Point | None
    owned_bytes: int = 0
    extra: dict = field(default_factory=dict)


def _prepared(fitted, means: str) -> _Prepared:
    """The cached `_Prepared` of ``fitted`` for ``means`` ("draws" or "q"), rebuilt when the model's
    ``idata`` was replaced. Raises ValueError as `_q_form` does for ``means="q"``."""
    cache = fitted.__dict__.setdefault("_scoring_cache", {})
    hit = cache.get(means)
    if hit is not None and hit.idata is fitted.idata:
        return hit
    if means == "draws":
        from validation.frontdoor.adapters import _ensure_adapters
        from validation.frontdoor.tables import _posterior

        _ensure_adapters()
        from validation.frontdoor.api_models import SCORE_FORMS

        post = _posterior(fitted.idata)
        attrs = dict(fitted.idata.posterior.attrs)
        maker = SCORE_FORMS.get(fitted.adapter.mean)
        form = maker(post, attrs) if maker is not None else None
        S, K = (form.n_draws, form.K) if form is not None else _n_draws_K(post)
        sf, owned = form, 0
    else:
        base = _prepared(fitted, "draws")
        form, post, attrs, S, K = base.form, base.post, base.attrs, base.S, base.K
        sf = _q_form(fitted, attrs)
        owned = sf.P.nbytes + sf.Q.nbytes  # made by the q form (E_q of each factor)
    ib = point = None
    c = 0.0
    if sf is not None and sf.link == "identity":
        ib = None if sf.item_bias is None else sf.item_bias.mean(axis=0)
        c = 0.0 if sf.const is None else float(np.mean(sf.const))
        owned += 0 if ib is None else ib.nbytes
        if sf.n_draws == 1:
            P = np.asarray(sf.P[0], dtype=np.float64)
            if sf.weight is not None:
                P = P * np.asarray(sf.weight[0], dtype=np.float64)[None, :]
            Q = np.ascontiguousarray(sf.Q[0], dtype=np.float64)
            ub = None if sf.user_bias is None else np.asarray(sf.user_bias[0], dtype=np.float64)
            point = _Point(P, Q, ub, ib, c + float(sf.offset))
            owned += sum(a.nbytes for a in (P, Q, ub) if a is not None and not _shares(a, sf, post))
    hit = _Prepared(fitted.idata, form, post, attrs, S, K, sf, ib, c, point, int(owned))
    cache[means] = hit
    return hit


def _shares(a: np.ndarray, sf, post: dict) -> bool:
    """Whether ``a`` is a view of the score form's or the posterior's arrays (not counted as owned)."""
    others = [sf.P, sf.Q, sf.user_bias] + list(post.values())
    return any(o is not None and np.shares_memory(a, o) for o in others)


def cache_bytes(fitted) -> int:
    """Bytes of the arrays `recommend` / `predict` keep on ``fitted`` between calls (int).

    Kept per ``means`` used so far: the posterior's arrays are views (no copy of the draws is ever
    kept); a single-draw score (``means="q"``, MAP / SGD fits) keeps its factors as (I, K) and (J, K)
    float64 plus (I,) / (J,) biases: at most 8 ((I + J) (K + 1)) bytes per ``means``; identity-link
    draws keep the (J,) item-bias mean. Not counted: the id lookups (Python dicts of I + J ids, built
    by `FittedModel._lookup`), the ids as pandas arrays for the output's columns (`_id_arrays`: an
    array of I + J references to the same id objects, or a view of integer ids) and the training
    CSR the model already holds.
    Raises nothing. Source: project addition (issue 24).
    """
    return int(sum(p.owned_bytes for p in fitted.__dict__.get("_scoring_cache", {}).values()))


MEANS = ("draws", "q")


def _q_form(fitted, attrs) -> LinearScore:
    """The closed-form posterior mean under q of a fitted model (``means="q"``), checked against its shape."""
    from validation.frontdoor.api_models import Q_MEAN_FORMS

    if fitted.model not in Q_MEAN_FORMS:
        raise ValueError(f"means='q': model {fitted.model!r} has no closed-form mean under its q; models that "
                         f"have one: {', '.join(Q_MEAN_FORMS)} (use means='draws')")
    if "variational_parameters" not in fitted.idata.groups():
        raise ValueError(f"means='q': this {fitted.model!r} fit carries no variational_parameters group "
                         "(q's parameters); use means='draws'")
    form = Q_MEAN_FORMS[fitted.model](fitted.idata, attrs)
    if (form.P.shape[1], form.Q.shape[1]) != tuple(fitted.shape):
        raise ValueError(f"means='q': q's parameters cover {form.P.shape[1]} users x {form.Q.shape[1]} items, "
                         f"the model {fitted.shape[0]} x {fitted.shape[1]}; use means='draws'")
    return form


def _n_draws_K(post: dict) -> tuple[int, int]:
    first = next(iter(post.values()))
    K = max([v.shape[-1] for v in post.values() if v.ndim >= 3] or [1])
    return int(first.shape[0]), int(K)


def _item_means(form: LinearScore, rows: np.ndarray, plan: ItemsPlan, item_bias_mean: np.ndarray | None,
                const_mean: float):
    """(U, J) float64 mean over draws of E[y | draw] for every item of the users ``rows``; for PSM also
    the (S, U) normalisers (else None)."""
    S, J, U = form.n_draws, form.Q.shape[1], rows.size
    d = plan.draws
    norm = np.empty((S, U)) if form.link == "psm" else None
    acc = None
    for s0 in range(0, S, d):
        s1 = min(S, s0 + d)
        if form.link == "identity":
            Pg = form.P[s0:s1][:, rows].astype(np.float64)  # (d, U, K)
            if form.weight is not None:
                Pg *= np.asarray(form.weight[s0:s1], dtype=np.float64)[:, None, :]
        if form.link == "identity" and U <= form.K and form.Q.dtype == np.float64:
            # few users: per-draw matrix-vector products read the item factors in place (no copy);
            # the (d, J, U) result is at most the (J, d K) copy the planner counted
            part = np.matmul(form.Q[s0:s1], np.swapaxes(Pg, 1, 2)).sum(axis=0).T
            del Pg
        elif form.link == "identity":
            Qc = np.empty((J, s1 - s0, form.K))  # (J, d K): the item factors of these draws side by side
            Qc[...] = np.swapaxes(form.Q[s0:s1], 0, 1)
            Pc = np.ascontiguousarray(np.swapaxes(Pg, 0, 1)).reshape(U, -1)
            del Pg
            part = Pc @ Qc.reshape(J, -1).T
            del Pc, Qc
        else:
            x = _sigmoid_scores(form, rows, s0, s1)  # (d, U, J)
            if form.link == "psm":
                norm[s0:s1] = x.sum(axis=2)
                x /= norm[s0:s1][:, :, None]
            part = x.sum(axis=0)
            del x
        if acc is None:
            acc = part
        else:
            acc += part
        del part
    if form.link == "identity":
        acc /= S
        if form.user_bias is not None:
            acc += form.user_bias[:, rows].mean(axis=0)[:, None]
        if item_bias_mean is not None:
            acc += item_bias_mean[None, :]
        acc += const_mean + float(form.offset)
    else:
        acc /= S
    return acc, norm


def _top(score: np.ndarray, N: int, seen: np.ndarray | None) -> np.ndarray:
    """Indices of the top min(N, #finite) items of one user's (J,) scores, ordered by score
    descending, ties by the lower item index: the first entries of np.argsort(-score, kind="stable")
    among the finite scores (seen items get -inf), found with a partition instead of a full sort."""
    neg = -score  # a copy
    if seen is not None and seen.size:
        neg[seen] = np.inf
    neg[~np.isfinite(neg)] = np.inf  # -inf and NaN scores are never recommended
    return _top_neg(neg, N)


def _point_means(point: _Point, rows: np.ndarray) -> np.ndarray:
    """(U, J) float64 scores of a single-draw identity-link form for the users ``rows``: one GEMM
    (U, K) @ (K, J), then the biases in `_item_means`' order (the same numbers up to the product's
    summation order)."""
    acc = point.P[rows] @ point.Q.T
    if point.user_bias is not None:
        acc += point.user_bias[rows][:, None]
    if point.item_bias is not None:
        acc += point.item_bias[None, :]
    acc += point.shift
    return acc


def _seen_cells(seen, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``rows``, item indices) of the training entries of the users ``rows`` of the CSR
    ``seen``, gathered without a Python loop."""
    if rows.size == 1:  # one user (the serving path): a slice of the CSR, no index arithmetic
        items = seen.indices[seen.indptr[rows[0]]:seen.indptr[rows[0] + 1]]
        return np.zeros(items.size, np.int64), items
    starts = seen.indptr[rows].astype(np.int64)
    lens = seen.indptr[rows + 1].astype(np.int64) - starts
    total = int(lens.sum())
    pos = np.repeat(np.arange(rows.size), lens)
    offs = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    return pos, seen.indices[np.repeat(starts, lens) + offs]


#: Cells (users x items) of one single-draw score block: its output and top-N stay in cache (2**14 was the
#: fastest of 2**14, 2**16, 2**18, 2**23 on the 610 x 9,724 HPF benchmark, loaded 2-core machine).
_POINT_CELLS = 2**14


def _choose(mean: np.ndarray, rows: np.ndarray, N: int, seen) -> tuple[list[np.ndarray], np.ndarray]:
    """(per-row top-N item indices, their scores concatenated) of a (U, J) chunk of scores for the
    users ``rows``; seen : the training CSR (its items excluded) or None. ``mean`` is overwritten."""
    chosen = _top_chunk(mean, N, None if seen is None else _seen_cells(seen, rows))
    pb = np.repeat(np.arange(rows.size), [t.size for t in chosen])
    pc = np.concatenate(chosen) if chosen else np.empty(0, np.int64)
    return chosen, -mean[pb, pc]


def _top_chunk(score: np.ndarray, N: int, seen_cells) -> list[np.ndarray]:
    """`_top` for every row of a (U, J) chunk at once: per row, the indices of the top min(N, #finite)
    unseen items by score, ties by the lower item index. ``score`` is negated in place (read the
    chosen scores as ``-score[b, top]``); seen_cells : `_seen_cells` output or None.

    One argpartition over the chunk, a stable sort of the N chosen per row; a row whose N-th value is
    tied with an item outside the chosen set, or that has fewer than N finite scores, is redone by
    `_top`'s exact rule. Temporaries: a (U, J) int64 partition index and (U, J) bool masks, within
    the planner's second (U, J) float64 array; a row redone by `_top` copies that row."""
    neg = np.negative(score, out=score)
    if seen_cells is not None and seen_cells[0].size:
        neg[seen_cells] = np.inf
    U, J = neg.shape
    n = min(int(N), J)
    if U == 1:  # one user (the serving path): `_top_neg` on the row, without the (U, n) bookkeeping
        row = neg[0]
        row[~np.isfinite(row)] = np.inf  # -inf and NaN scores are never recommended
        return [_top_neg(row, n)]
    if n < J:
        cand = np.argpartition(neg, n - 1, axis=1)[:, :n]
    else:
        cand = np.broadcast_to(np.arange(J), (U, J)).copy()
    cand.sort(axis=1)
    vals = np.take_along_axis(neg, cand, 1)
    order = np.argsort(vals, axis=1, kind="stable")
    top = np.take_along_axis(cand, order, 1)
    kth = np.take_along_axis(vals, order[:, -1:], 1)
    # exact when the n chosen are finite (argpartition puts NaN last; a +inf score, -inf here, would be
    # chosen and is caught) and no item outside them ties the n-th value (NaN compares False)
    exact = np.isfinite(vals).all(axis=1) & (np.count_nonzero(neg <= kth, axis=1) == n)
    out = list(top)
    for b in np.flatnonzero(~exact):
        row = neg[b].copy()
        row[~np.isfinite(row)] = np.inf  # -inf and NaN scores are never recommended
        out[b] = _top_neg(row, n)
    return out


def _top_neg(neg: np.ndarray, n: int) -> np.ndarray:
    """`_top` on one row of negated scores whose excluded items are already +inf."""
    n = min(int(n), int(np.count_nonzero(np.isfinite(neg))))
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if n < neg.size:
        kth = np.partition(neg, n - 1)[n - 1]
        cand = np.flatnonzero(neg <= kth)  # ascending item index, holds the whole top n and its ties
    else:
        cand = np.arange(neg.size)
    return cand[np.argsort(neg[cand], kind="stable")[:n]]


class Recommendations(NamedTuple):
    """The columns of `recommend`'s table as NumPy arrays (``as_frame=False``): no DataFrame is built.

    One entry per (user, rank), users in the order asked, each user's items contiguous and by rank;
    ``pandas.DataFrame(r._asdict())`` (``sd`` dropped when None) is the table ``as_frame=True`` returns.

    Parameters
    ----------
    user : numpy.ndarray, shape (n,)
        The model's id of each entry's user, in the dtype of ``fitted.user_ids`` (int64, or object for str).
    rank : numpy.ndarray, shape (n,), int64
        1 .. N within each user.
    item : numpy.ndarray, shape (n,)
        The recommended item's original id, in the dtype of ``fitted.item_ids``.
    score : numpy.ndarray, shape (n,), float64
        Posterior mean of E[y_ui] (as ``means`` says), in the units of the fitted values.
    sd : numpy.ndarray, shape (n,), float64, or None
        Its posterior sd over the draws (ddof 1); None when ``sd=False``.

    Raises
    ------
    None of its own (a record).

    Source: project addition (issue 24: a one-user call without the cost of a DataFrame).
    """

    user: np.ndarray
    rank: np.ndarray
    item: np.ndarray
    score: np.ndarray
    sd: np.ndarray | None


def recommend(fitted, users, N: int = 10, *, exclude_seen: bool = True, max_bytes: int = MAX_BYTES,
              means: str = "draws", sd: bool = True, as_frame: bool = True):
    """Top-``N`` items per user by posterior mean score, with the score's posterior sd.

    Work: per user, S J K multiply-adds (one matrix product for linear scores; J K for a single-draw
    score: ``means="q"``, MAP / SGD fits), then S N K for the sd of the N chosen items; never an I x J
    array, and per chunk of users at most ``max_bytes``. What does not change between calls (score forms,
    q's means, plans) is kept on ``fitted`` (`cache_bytes`: 8 ((I + J) (K + 1)) bytes at most per
    ``means``; no copy of the draws).

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        The fitted model (I users, J items, S stored draws, K factors).
    users : user id or sequence of user ids
        One original user id (str or int) or a list of them (U users); a str of digits matches an integer
        id.
    N : int >= 1, default 10
        Items per user.
    exclude_seen : bool, default True
        Leave out each user's training items.
    max_bytes : int, default `MAX_BYTES`
        Bound on the engine's temporary arrays alive at once (256 MiB; what is and is not counted: module
        docstring).
    means : {"draws", "q"}, default "draws"
        ``"draws"``: the score is the mean over the stored draws (as before issue 24). ``"q"``: the exact
        posterior mean under the fit's q where q gives it in closed form (HPF CAVI: E_q[theta_u] .
        E_q[beta_i], no draws; `api_models.Q_MEAN_FORMS`); the draws' mean is a Monte Carlo estimate of
        that number (sd / sqrt(S) apart). The sd is always over the draws.
    sd : bool, default True
        Compute the ``sd`` column; False skips the pass over the draws for the chosen items and returns
        no ``sd`` column.
    as_frame : bool, default True
        False returns the same columns as NumPy arrays (`Recommendations`) instead of a DataFrame: the
        lean form for serving one user at a time (building a 10-row DataFrame costs about 0.1 ms, as much
        as the scoring itself).

    Returns
    -------
    pandas.DataFrame or Recommendations
        One row per (user, rank), users in the order given: ``user`` (the model's id of the user asked
        for, in the model's id dtype: "5" asked of a model with integer ids gives 5), ``rank`` (int64,
        1..n), ``item`` (original id), ``score`` (float64, posterior mean of E[y_ui] as ``means`` says, in
        the units of the fitted values), ``sd`` (float64, its posterior sd over the draws, ddof 1; 0 with
        one draw); n = min(N, number of items with a finite score, seen items excluded when asked). Items
        are ordered by score descending, ties by their position in ``fitted.item_ids``.

    Raises
    ------
    ValueError
        ``N`` not an integer >= 1; a bad ``means``; a ``max_bytes`` too small for one user (`plan_items`)
        or for the sd of one user's N items; ``means="q"`` for a model without a closed form under q (or a
        fit without its ``variational_parameters`` group).
    KeyError
        An unknown user id.

    Source: project addition (issue 24); the scores are the adapters' means (`validation.frontdoor.api_models`).
    """
    if isinstance(users, (str, int, np.integer)):
        users = [users]
    users = list(users)
    if isinstance(N, bool) or int(N) != N or N < 1:
        raise ValueError(f"N must be an integer >= 1, got {N!r}")
    N = int(N)
    if means not in MEANS:
        raise ValueError(f"means must be one of {MEANS}, got {means!r}")
    rows = fitted._index(users, "user")
    prep = _prepared(fitted, means)
    form, post, attrs, S, K, score_form = prep.form, prep.post, prep.attrs, prep.S, prep.K, prep.sf
    J = len(fitted.item_ids)
    link = form.link if form is not None else "adapter"
    plan = plan_items(score_form.link if score_form is not None else "adapter", n_users=rows.size, n_items=J,
                      n_draws=score_form.n_draws if score_form is not None else S, K=K, max_bytes=max_bytes, N=N)
    # the sd pass runs after a chunk's (U, J) means are freed; alive meanwhile: the chosen items and
    # their scores, the pairs' three index arrays (4 U N), and PSM's (S, U) normalisers
    per_user = _F8 * (4 * N + (S if link == "psm" else 0))
    one_pair = (_F8 * (2 * K + 12) * S if form is None
                else pairs_bytes(1, n_draws=S, K=K, block_bytes=3 * _F8 * max(K, 1)))
    fit_users = (int(max_bytes) - one_pair) // per_user
    if fit_users < 1:
        raise ValueError(f"max_bytes={max_bytes} is too small for this model: the sd of one user's N={N} "
                         f"items needs {one_pair + per_user} bytes")
    if fit_users < plan.users:  # fewer users per chunk, so that one pair fits next to what is kept
        u = int(fit_users)
        plan = ItemsPlan(u, plan.draws, items_bytes(link, u, plan.draws, n_items=J, n_draws=S, K=K, N=N))
    kept = per_user * plan.users
    if sd:
        pair_m, block = plan_pairs(rows.size * N, n_draws=S, K=K, max_bytes=max_bytes - kept,
                                   adapter=form is None)
    seen = fitted.seen
    parts = []  # per chunk: (positions in users (n,), item indices (n,), scores (n,), sd (n,) or None)
    for start in range(0, rows.size, plan.users):
        block_rows = rows[start:start + plan.users]
        if prep.point is not None:  # one GEMM per sub-chunk small enough to stay in cache for the top-N
            chosen, scores = [], []
            step = max(1, _POINT_CELLS // max(J, 1))
            for s0 in range(0, block_rows.size, step):
                sub = block_rows[s0:s0 + step]
                c, v = _choose(_point_means(prep.point, sub), sub, N, seen if exclude_seen else None)
                chosen += c
                scores.append(v)
            scores, norm = np.concatenate(scores), None
        else:
            if score_form is not None:
                mean, norm = _item_means(score_form, block_rows, plan, prep.item_bias_mean, prep.const_mean)
            else:
                spare = max_bytes - _F8 * (2 * block_rows.size * J + 4 * J + block_rows.size * N)
                mean, norm = _adapter_item_means(fitted.adapter.mean, post, attrs, block_rows, J, K, spare), None
            chosen, scores = _choose(mean, block_rows, N, seen if exclude_seen else None)
            del mean
        counts = np.array([t.size for t in chosen], dtype=np.int64)
        pb = np.repeat(np.arange(block_rows.size), counts)
        pc = np.concatenate(chosen) if chosen else np.empty(0, np.int64)
        pr = block_rows[pb]
        sds = None
        if sd and form is not None and form.link in ("identity", "sigmoid") and \
                _F8 * S * max(N, 1) * (K + 4) <= max_bytes - kept:
            sds = _chosen_sd(form, block_rows, chosen, max_bytes - kept)
        elif sd:
            sds = _pair_stats(form, fitted, post, attrs, pr, pc, pair_m, block, want="sd",
                              norm=None if norm is None else (norm, pb))["sd"]
        parts.append((start + pb, pc, scores, sds))
    return _table_arrays(fitted, rows, parts, sd, as_frame)


#: Users per step of `_chosen_sd` (the gathered (S, u, N, K) item factors stay in cache; 4-16 were the
#: fastest on the 610 x 9,724 HPF benchmark, 3x faster than `_pair_stats` there).
_SD_USERS = 8


def _chosen_sd(form: LinearScore, rows: np.ndarray, chosen: list, max_bytes: int) -> np.ndarray:
    """sd over the S draws (ddof 1; 0 with one draw) of E[y | draw] of each user's chosen items, for an
    identity or sigmoid `LinearScore`: the values `LinearScore.pair_draws` gives, computed per step of
    users with the user's factors gathered once, (S, u, K) against (S, u, n, K).
    rows : (U,) user positions; chosen : U arrays of item indices (n_b each). Returns (sum n_b,) float64.
    Memory: 8 S n (K + 4) bytes per user of a step, at most ``max_bytes`` (steps of 1 user at least)."""
    S, K = form.n_draws, form.K
    counts = np.array([c.size for c in chosen], dtype=np.int64)
    out = np.zeros(int(counts.sum()))
    if S < 2 or out.size == 0:
        return out
    per_user = _F8 * S * max(int(counts.max()), 1) * (K + 4)
    step = int(max(1, min(_SD_USERS, max_bytes // per_user)))
    ends = np.cumsum(counts)
    b = 0
    while b < rows.size:
        e = min(rows.size, b + step)
        if np.any(counts[b:e] != counts[b]):
            e = b + 1  # ragged (fewer items for some user): one user at a time
        us, C = rows[b:e], np.stack(chosen[b:e])  # (u,), (u, n)
        Pg = form.P[:, us, :].astype(np.float64)
        if form.weight is not None:
            Pg *= np.asarray(form.weight, dtype=np.float64)[:, None, :]
        x = np.einsum("suk,sunk->sun", Pg, form.Q[:, C, :])
        if form.const is not None:
            x += np.asarray(form.const, dtype=np.float64)[:, None, None]
        if form.user_bias is not None:
            x += form.user_bias[:, us][:, :, None]
        if form.item_bias is not None:
            x += form.item_bias[:, C]
        if form.offset:
            x += float(form.offset)
        if form.link == "sigmoid":
            _sigmoid_(x)
        out[ends[b] - counts[b]:ends[e - 1]] = x.std(axis=0, ddof=1).ravel()
        b = e
    return out


def _id_arrays(fitted) -> tuple:
    """(user ids, item ids) of ``fitted`` as the pandas arrays a DataFrame column of them holds (dtype
    inferred once, as pandas infers it from the ids: a string dtype for str ids, int64 for integers),
    kept on ``fitted`` so that each `recommend` call only gathers (``take``) instead of re-inferring."""
    hit = fitted.__dict__.get("_id_arrays")
    if hit is None or hit[0] is not fitted.user_ids or hit[1] is not fitted.item_ids:
        hit = (fitted.user_ids, fitted.item_ids, pd.Series(np.asarray(fitted.user_ids)).array,
               pd.Series(np.asarray(fitted.item_ids)).array)
        fitted.__dict__["_id_arrays"] = hit
    return hit[2], hit[3]


def _table_arrays(fitted, rows: np.ndarray, parts: list, sd: bool, as_frame: bool = True):
    """The (user, rank, item, score[, sd]) table of `recommend` from its chunks' arrays: user and item are
    the model's ids of the positions ``rows`` (U,) and of the chosen items; a DataFrame (id columns from
    `_id_arrays`) or, with ``as_frame=False``, `Recommendations` (NumPy arrays of the ids)."""
    pos = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    pc = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int64)
    if pos.size == 0 and as_frame:
        return pd.DataFrame([], columns=["user", "rank", "item", "score"] + (["sd"] if sd else []))
    # users come in order, each user's items contiguous: rank = 1 + position within the user's run
    starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1]))) if pos.size else pos
    rank = np.arange(1, pos.size + 1) - np.repeat(starts, np.diff(np.append(starts, pos.size)))
    score = np.concatenate([p[2] for p in parts]) if parts else np.empty(0)
    sds = (np.concatenate([p[3] for p in parts]) if parts else np.empty(0)) if sd else None
    if not as_frame:
        return Recommendations(np.asarray(fitted.user_ids)[rows[pos]], rank.astype(np.int64),
                               np.asarray(fitted.item_ids)[pc], score, sds)
    user_ids, item_ids = _id_arrays(fitted)
    data = {"user": user_ids.take(rows[pos]), "rank": rank.astype(np.int64), "item": item_ids.take(pc),
            "score": score}
    if sd:
        data["sd"] = sds
    return pd.DataFrame(data, copy=False)


def iter_item_scores(fitted, rows, *, means: str = "draws", max_bytes: int = MAX_BYTES):
    """Posterior mean scores of every item for the users at positions ``rows``, chunk by chunk.

    For evaluation code that needs every item's score (e.g. `validation.evaluation.holdout`), never an
    I x J array at once.

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        The fitted model (I users, J items).
    rows : array-like of int, shape (U,)
        Positions of users (0..I-1, not ids).
    means : {"draws", "q"}, default "draws"
        As in `recommend`.
    max_bytes : int, default `MAX_BYTES`
        As in `recommend` (the chunk's (U_c, J) scores are within the planned bytes).

    Yields
    ------
    rows_chunk : numpy.ndarray, shape (U_c,), int64
        The chunk's positions, in the order of ``rows``.
    scores : numpy.ndarray, shape (U_c, J), float64
        The same numbers `recommend` ranks by (seen items not excluded).

    Raises
    ------
    ValueError
        As `recommend` does: a bad ``means`` (or ``"q"`` without a closed form), ``max_bytes`` too small.
        The checks run when the generator is first advanced, not when it is created.
    IndexError
        From numpy: a position >= I (negative positions wrap around, as numpy indexing does).

    Source: project addition (issue 24).
    """
    if means not in MEANS:
        raise ValueError(f"means must be one of {MEANS}, got {means!r}")
    rows = np.asarray(rows, dtype=np.int64)
    prep = _prepared(fitted, means)
    post, attrs, S, K, sf = prep.post, prep.attrs, prep.S, prep.K, prep.sf
    J = len(fitted.item_ids)
    plan = plan_items(sf.link if sf is not None else "adapter", n_users=rows.size, n_items=J,
                      n_draws=sf.n_draws if sf is not None else S, K=K, max_bytes=max_bytes, N=0)
    for start in range(0, rows.size, plan.users):
        block = rows[start:start + plan.users]
        if prep.point is not None:
            yield block, _point_means(prep.point, block)
        elif sf is not None:
            yield block, _item_means(sf, block, plan, prep.item_bias_mean, prep.const_mean)[0]
        else:
            spare = max_bytes - _F8 * (2 * block.size * J + 4 * J)
            yield block, _adapter_item_means(fitted.adapter.mean, post, attrs, block, J, K, spare)


def _adapter_item_means(mean_fn, post, attrs, rows, J, K, max_bytes):
    """(U, J) mean over draws of an adapter's own mean for every item of the users ``rows``, in chunks
    of pairs (for adapters without a `LinearScore`)."""
    S = next(iter(post.values())).shape[0]
    m, _ = plan_pairs(J, n_draws=S, K=K, max_bytes=max_bytes, adapter=True)
    out = np.empty((rows.size, J))
    for b, u in enumerate(rows):  # one user's items at a time, m of them per call
        for j0 in range(0, J, m):
            c = np.arange(j0, min(J, j0 + m))
            out[b, c] = np.asarray(mean_fn(post, np.full(c.size, u), c, attrs), dtype=np.float64).mean(axis=0)
    return out


def _pair_stats(form, fitted, post, attrs, rows, cols, m, block, *, want: str, interval: float = 0.9,
                norm=None) -> dict[str, np.ndarray]:
    """mean, sd (ddof 1; 0 with one draw) and the central ``interval`` quantiles over draws of the
    per-draw values of M pairs, ``m`` pairs at a time. want : "sd" (sd only) or "all".
    norm : None or (norms (S, U), position (M,) of each pair's user in it) for PSM."""
    M = rows.size
    res = {"sd": np.zeros(M)}
    if want == "all":
        res.update(mean=np.empty(M), lower=np.empty(M), upper=np.empty(M))
    for p0 in range(0, M, m):
        r, c = rows[p0:p0 + m], cols[p0:p0 + m]
        if form is None:
            draws = np.asarray(fitted.adapter.mean(post, r, c, attrs), dtype=np.float64)
        else:
            nrm = None if norm is None else norm[0][:, norm[1][p0:p0 + m]]
            draws = form.pair_draws(r, c, nrm, block_bytes=block)
            del nrm
        sl = slice(p0, p0 + r.size)
        if draws.shape[0] > 1:
            res["sd"][sl] = draws.std(axis=0, ddof=1)
        if want == "all":
            res["mean"][sl] = draws.mean(axis=0)
            lo, hi = np.quantile(draws, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
            res["lower"][sl], res["upper"][sl] = lo, hi
        del draws
    return res


def _psm_norms(form: LinearScore, users: np.ndarray, plan: ItemsPlan) -> np.ndarray:
    """(S, U) PSM normalisers sum_j psi_sj sigmoid(x_s(u, j)) of the users ``users`` (in ``plan``'s draw chunks)."""
    S, d = form.n_draws, plan.draws
    out = np.empty((S, users.size))
    for s0 in range(0, S, d):
        s1 = min(S, s0 + d)
        out[s0:s1] = _sigmoid_scores(form, users, s0, s1).sum(axis=2)
    return out


def _sigmoid_scores(form: LinearScore, users: np.ndarray, s0: int, s1: int) -> np.ndarray:
    """(s1 - s0, U, J) float64 per-draw scores of a sigmoid or PSM `LinearScore` for the users ``users``
    and every item, draws s0:s1: sigmoid(P_s[u] . Q_s[i] + const_s + user bias + item bias + offset),
    times psi_s[i] for PSM (before PSM's per-user normalisation)."""
    Pg = form.P[s0:s1][:, users].astype(np.float64)
    if form.weight is not None:
        Pg *= np.asarray(form.weight[s0:s1], dtype=np.float64)[:, None, :]
    x = np.matmul(Pg, np.swapaxes(form.Q[s0:s1], 1, 2).astype(np.float64, copy=False))
    del Pg
    if form.const is not None:
        x += np.asarray(form.const[s0:s1], dtype=np.float64)[:, None, None]
    if form.user_bias is not None:
        x += form.user_bias[s0:s1][:, users][:, :, None]
    if form.item_bias is not None:
        x += form.item_bias[s0:s1][:, None, :]
    if form.offset:
        x += float(form.offset)
    _sigmoid_(x)
    if form.link == "psm":
        x *= form.psi[s0:s1][:, None, :]
    return x


#: ``predict(kind=...)``: "mean" (E[y_ui], the posterior of the mean) or "observation" (a new y_ui).
KINDS = ("mean", "observation")
#: Fewest draws of a new observation per pair behind ``kind="observation"``'s sd and interval: each
#: stored draw gives ceil(OBSERVATION_DRAWS / S) of them (a point estimate: OBSERVATION_DRAWS).
OBSERVATION_DRAWS = 1000


def predict(fitted, pairs, *, interval: float = 0.9, max_bytes: int = MAX_BYTES, means: str = "draws",
            kind: str = "mean", seed: int = 0, sd: bool = True) -> pd.DataFrame:
    """Posterior mean, sd and a central credible interval of E[y_ui] per pair, or of a new observation y_ui.

    Work: S K per pair (PSM: plus S J K per distinct user, for its normaliser), in chunks of pairs; plus
    S R per pair for ``kind="observation"``.

    Parameters
    ----------
    fitted : validation.frontdoor.fitted.FittedModel
        The fitted model (S stored draws, K factors).
    pairs : pandas.DataFrame or sequence of (user, item)
        M pairs of original ids: a DataFrame with columns ``user`` and ``item`` (or the user and item
        column names the model was fitted with), or (user, item) tuples.
    interval : float in (0, 1), default 0.9
        Mass of the central credible interval.
    max_bytes : int, default `MAX_BYTES`
        Bound on the engine's temporary arrays alive at once (module docstring).
    means : {"draws", "q"}, default "draws"
        ``"draws"``: the mean over the stored draws; ``"q"``: closed form under q, as in `recommend`. sd and
        interval are always over the draws.
    kind : {"mean", "observation"}, default "mean"
        ``"mean"``: the posterior of E[y_ui | parameters]. ``"observation"``: the posterior predictive of a
        new y_ui: for each stored draw, R = ceil(`OBSERVATION_DRAWS` / S) draws of y from the model's
        observation model (`validation.frontdoor.api_models.observation_draws`: Poisson counts, Normal
        ratings with the draw's noise precision, Bernoulli 0/1); sd and the interval are over those S R
        values, ``mean`` stays the mean of E[y_ui] over the draws (the predictive mean, without the
        simulation's noise).
    seed : int, default 0
        Seed of the numpy Generator of ``kind="observation"`` (unused for ``"mean"``).
    sd : bool, default True
        False returns the mean only (no ``sd``, ``lower``, ``upper`` columns); with ``means="q"`` it skips
        the pass over the draws entirely (as `recommend`'s ``sd=False``). Only with ``kind="mean"``.

    Returns
    -------
    pandas.DataFrame
        M rows in the pairs' order: ``user``, ``item`` (as given), ``mean``, ``sd`` (ddof 1), ``lower``,
        ``upper`` (the last three only with ``sd=True``; float64, in the units of the fitted values; numpy's
        default linear quantiles over the S draws, or the S R simulated values), ``method`` (how the draws
        were obtained, `FittedModel.uncertainty`). For point estimates (MAP, SGD) and ``kind="mean"``, sd = 0
        and the interval is the point.

    Raises
    ------
    ValueError
        ``interval`` outside (0, 1); a bad ``means`` (or ``"q"`` for a model without a closed form); a bad
        ``kind`` (or ``"observation"`` for a model without an observation model: BPR, PSM); ``sd=False``
        with ``kind="observation"`` (its sd and interval are what that kind adds); a ``max_bytes`` too small
        for one pair.
    KeyError
        An unknown user or item id, or a DataFrame without the user / item columns (named).

    Source: project addition (issue 24); the values are the adapters' means, the observation models
    `validation.frontdoor.api_models.LIKELIHOODS`.
    """
    if not 0 < interval < 1:
        raise ValueError(f"interval must be in (0, 1), got {interval!r}")
    if means not in MEANS:
        raise ValueError(f"means must be one of {MEANS}, got {means!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not sd and kind == "observation":
        raise ValueError("sd=False needs kind='mean': kind='observation' differs from it only in its sd and "
                         "interval (the mean is the same)")
    if kind == "observation":
        from validation.frontdoor.api_models import likelihood_of

        lik = likelihood_of(fitted.model)
        if not lik.predictive:
            raise ValueError(f"kind='observation': {fitted.model}: {lik.no_predictive}")
    if isinstance(pairs, pd.DataFrame):
        fitted_cols = fitted.settings.get("columns", {})  # the column names the model was fitted with
        u_col, i_col = (c if c in pairs else fitted_cols.get(c, c) for c in ("user", "item"))
        if u_col not in pairs or i_col not in pairs:
            raise KeyError(f"pairs: a DataFrame needs the columns 'user' and 'item'"
                           + (f" (or {fitted_cols.get('user')!r} and {fitted_cols.get('item')!r}, as fitted)"
                              if fitted_cols else "") + f"; got {list(pairs.columns)}")
        users, items = pairs[u_col].tolist(), pairs[i_col].tolist()
    else:
        pairs = list(pairs)
        users, items = [p[0] for p in pairs], [p[1] for p in pairs]
    rows, cols = fitted._index(users, "user"), fitted._index(items, "item")
    prep = _prepared(fitted, "draws")
    form, post, attrs, S, K = prep.form, prep.post, prep.attrs, prep.S, prep.K
    qf = _prepared(fitted, "q").sf if means == "q" else None
    q_block = min(32 * 2**20, max(max_bytes // 4, 24 * qf.K)) if qf is not None else 0
    if qf is not None and not sd:  # the closed form alone: no pass over the draws
        return pd.DataFrame({"user": users, "item": items, "mean": qf.pair_draws(rows, cols, block_bytes=q_block)[0],
                             "method": fitted.uncertainty})
    if form is not None and form.link == "psm":
        res = _predict_psm(form, fitted, post, attrs, rows, cols, interval, max_bytes)
    else:
        m, block = plan_pairs(rows.size, n_draws=S, K=K, max_bytes=max_bytes, adapter=form is None)
        res = _pair_stats(form, fitted, post, attrs, rows, cols, m, block, want="all", interval=interval)
    if qf is not None:
        res["mean"] = qf.pair_draws(rows, cols, block_bytes=q_block)[0]
    if kind == "observation":
        res.update(_observation_stats(fitted, post, attrs, rows, cols, S, K, interval, max_bytes, seed))
    spread = {k: res[k] for k in ("sd", "lower", "upper")} if sd else {}
    return pd.DataFrame({"user": users, "item": items, "mean": res["mean"], **spread, "method": fitted.uncertainty})


def _observation_stats(fitted, post, attrs, rows, cols, S, K, interval, max_bytes, seed) -> dict[str, np.ndarray]:
    """sd (ddof 1), lower and upper over S R draws of a new observation per pair (``kind="observation"``),
    in chunks of pairs whose (S R, m) draws and the model's (S, m) temporaries fit ``max_bytes``."""
    from validation.frontdoor.api_models import _precision, likelihood_of, observation_draws

    lik = likelihood_of(fitted.model)
    reps = -(-OBSERVATION_DRAWS // S)
    prec = _precision(fitted, lik, post, attrs, S) if lik.family == "normal" else None
    rng = np.random.default_rng(seed)
    M = rows.size
    out = {k: np.empty(M) for k in ("sd", "lower", "upper")}
    per_pair = _F8 * (3 * S * reps + 6 * S + 3 * S * max(K, 1))
    m = int(max(1, max_bytes // per_pair))
    for p0 in range(0, M, m):
        sl = slice(p0, min(M, p0 + m))
        y = observation_draws(fitted, post, attrs, rows[sl], cols[sl], rng, reps=reps, precision=prec)
        out["sd"][sl] = y.std(axis=0, ddof=1) if y.shape[0] > 1 else 0.0
        out["lower"][sl], out["upper"][sl] = np.quantile(y, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
        del y
    return out


def _predict_psm(form, fitted, post, attrs, rows, cols, interval, max_bytes):
    """`predict` for PSM: pairs grouped by chunks of distinct users, whose (S, U) normalisers are
    computed first; memory: the normaliser pass's plan, then the pairs' plan within what is left."""
    S, K, J, M = form.n_draws, form.K, form.Q.shape[1], rows.size
    res = {k: np.empty(M) for k in ("mean", "sd", "lower", "upper")}
    uniq, inv = np.unique(rows, return_inverse=True)
    inv = inv.reshape(-1)
    plan = plan_items("psm", n_users=uniq.size, n_items=J, n_draws=S, K=K, max_bytes=max_bytes // 2, N=0)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(0, uniq.size + plan.users, plan.users))
    for c, u0 in enumerate(range(0, uniq.size, plan.users)):
        users = uniq[u0:u0 + plan.users]
        norms = _psm_norms(form, users, plan)
        idx = order[bounds[c]:bounds[c + 1]]
        m, block = plan_pairs(idx.size, n_draws=S, K=K, max_bytes=max_bytes - _F8 * S * users.size)
        part = _pair_stats(form, fitted, post, attrs, rows[idx], cols[idx], m, block, want="all",
                           interval=interval, norm=(norms, inv[idx] - u0))
        for k in res:
            res[k][idx] = part[k]
    return res
