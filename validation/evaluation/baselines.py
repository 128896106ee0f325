"""The closed-form baseline every evaluation table carries beside popularity: EASE^R (Steck 2019).

EASE^R ("embarrassingly shallow autoencoder") learns an item x item weight matrix B with zero
diagonal from the binarized (or count) user x item training matrix X, minimising
||X - X B||_F^2 + lambda ||B||_F^2 subject to diag(B) = 0; the closed form is
B = I - P diag(1 / diag P), P = (X^T X + lambda I)^-1, and a user's scores are X_u B. Only the J x J
Gram matrix is dense: `EASE_MAX_ITEMS` (20,000 items: two J x J float64 arrays of 3.2 GB each)
bounds it; above the bound a system raises `SkippedSystem` with the reason, which the evaluation
tables print instead of allocating. Users are scored in blocks (the metrics' batches), never as an
I x J array.

lambda is chosen on a validation split carved from the TRAINING data only (`tune_lambda`):

- one-class protocols (P1, SIBM, baskets, the front door's evaluate): `ease_system` holds out one
  training positive of every user with >= 2 of them (`validation.evaluation.model_studies.validation_split`,
  generator seeded ``[seed, 1]``) and picks the lambda with the best validation HR@N (``select_by``);
- P3 counts: `validation.evaluation.counts_eval.tune_ease` (20 % of the training entries held out).

Popularity stays in `validation.evaluation.metrics` (`popularity_score_fn`): it is not duplicated.

Source: H. Steck, "Embarrassingly shallow autoencoders for sparse data", WWW 2019, eq. 8 (closed form)
and sec. 3 (scores S = X B); the validation-split search and the size bound are project additions
(issue 13 "fair baselines", issue 27 item 3).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import scipy.linalg as sla
import scipy.sparse as sp

from custom_inference.data import Observations

__all__ = ["EASE_MAX_ITEMS", "EASE_LAMBDAS", "SkippedSystem", "ease_fit", "ease_scores", "ease_score_fn",
           "ease_skip_reason", "tune_lambda", "grid_edge_note", "ease_system"]

#: largest number of items for which EASE^R's dense J x J Gram matrix is built
EASE_MAX_ITEMS = 20_000
#: lambdas searched on the validation split (Steck 2019 reports 200-1000 on the larger MovieLens sets)
EASE_LAMBDAS = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)


class SkippedSystem(RuntimeError):
    """Raised by a system's factory that declines to run (e.g. EASE^R above `EASE_MAX_ITEMS` items).

    The evaluation tables record the message as the row's reason. A `RuntimeError`; constructed with the
    reason (str) as its message.

    Raises
    ------
    None of its own (it is the exception raised).

    Source: project addition.
    """


def _matrix(train: Observations, values: str) -> sp.csr_matrix:
    if not isinstance(train, Observations):
        raise ValueError(f"train must be Observations, got {type(train).__name__}")
    if values not in ("binary", "count"):
        raise ValueError(f"values must be 'binary' or 'count', got {values!r}")
    v = np.ones(train.nnz) if values == "binary" else np.asarray(train.values, np.float64)
    return sp.csr_matrix((v, (np.asarray(train.rows), np.asarray(train.cols))), shape=train.shape)


def ease_skip_reason(n_items: int, max_items: int = EASE_MAX_ITEMS) -> str | None:
    """The reason EASE^R is not run on ``n_items`` items (None when it runs): J above ``max_items``.

    Parameters
    ----------
    n_items : int
        J, the number of items of the training matrix.
    max_items : int, default `EASE_MAX_ITEMS`
        The largest J for which the dense J x J Gram matrix is built.

    Returns
    -------
    str or None
        "EASE^R skipped: J = ... items > ... (its dense J x J Gram matrix alone would take ... GB)" when
        ``n_items > max_items`` (8 J^2 bytes, float64), else None.

    Raises
    ------
    None of its own (``int()`` of a non-number raises TypeError / ValueError).

    Source: project addition (the dense J x J bound).
    """
    if int(n_items) > int(max_items):
        gb = 8 * float(n_items) ** 2 / 1e9
        return (f"EASE^R skipped: J = {int(n_items)} items > {int(max_items)} (its dense J x J Gram matrix "
                f"alone would take {gb:.1f} GB)")
    return None


def ease_fit(train: Observations, lam: float, *, values: str = "binary",
             max_items: int = EASE_MAX_ITEMS) -> np.ndarray:
    """EASE^R item-item weights in closed form: B = I - P diag(1 / diag P), P = (X^T X + lam I)^-1.

    X is the user x item matrix of ``train``, binarized (``values="binary"``, Steck's setting) or with the
    counts (``"count"``). Only the J x J Gram matrix is dense (built in column blocks of 2048 items).

    Parameters
    ----------
    train : custom_inference.data.Observations
        Shape (I, J): the training entries.
    lam : float > 0
        The ridge constant lambda (finite).
    values : {"binary", "count"}, default "binary"
        X's entries: 1 for every stored entry, or the stored values (as float64).
    max_items : int, default `EASE_MAX_ITEMS`
        Largest J fitted (`ease_skip_reason`).

    Returns
    -------
    numpy.ndarray, shape (J, J), float64
        B with zero diagonal: the minimiser of ||X - X B||_F^2 + lam ||B||_F^2 subject to diag(B) = 0.

    Raises
    ------
    SkippedSystem
        J > ``max_items`` (`ease_skip_reason`), before anything J x J is allocated.
    ValueError
        ``lam <= 0`` or not finite, ``train`` is not Observations or ``values`` is unknown.
    numpy.linalg.LinAlgError
        From SciPy's Cholesky factorization, if the regularised Gram matrix is not positive definite (it
        is for lam > 0 up to rounding).

    Source: Steck 2019, "Embarrassingly shallow autoencoders for sparse data", eq. 8 (closed form);
    a project addition to the thesis's baselines.
    """
    if not (np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be a finite number > 0, got {lam!r}")
    X = _matrix(train, values)
    reason = ease_skip_reason(X.shape[1], max_items)
    if reason:
        raise SkippedSystem(reason)
    J = X.shape[1]
    G = np.empty((J, J))
    XT, Xc = X.T.tocsr(), X.tocsc()
    for start in range(0, J, 2048):  # the Gram matrix block by block: no J x J sparse product at once
        G[:, start:start + 2048] = (XT @ Xc[:, start:start + 2048]).toarray()
    G[np.diag_indices_from(G)] += float(lam)
    c = sla.cho_factor(G, lower=True, check_finite=False, overwrite_a=True)
    P = sla.cho_solve(c, np.eye(G.shape[0]), check_finite=False, overwrite_b=True)
    del c, G
    P /= -np.diag(P)[None, :]
    P[np.diag_indices_from(P)] = 0.0
    return P


def ease_scores(train: Observations, B: np.ndarray, users, *, values: str = "binary") -> np.ndarray:
    """EASE^R scores X_u B for a block of users. Only the block's rows of X are formed (sparse).

    Parameters
    ----------
    train : custom_inference.data.Observations
        Shape (I, J): the X of `ease_fit` (same ``values``).
    B : numpy.ndarray, shape (J, J), float64
        The weights from `ease_fit`.
    users : array-like of int, shape (n,)
        Row indices (0..I-1) of the users to score.
    values : {"binary", "count"}, default "binary"
        As in `ease_fit`.

    Returns
    -------
    numpy.ndarray, shape (n, J), float64
        Row k: the scores of every item for user ``users[k]``.

    Raises
    ------
    ValueError
        ``B``'s shape is not (J, J), or as `ease_fit` for ``train`` / ``values``.
    IndexError
        From SciPy's row indexing, for a user outside 0..I-1.

    Source: Steck 2019, sec. 3 (score S = X B); project addition to the thesis's baselines.
    """
    X = _matrix(train, values)
    B = np.asarray(B)
    if B.shape != (X.shape[1], X.shape[1]):
        raise ValueError(f"B: expected shape {(X.shape[1],) * 2}, got {B.shape}")
    return np.asarray(X[np.asarray(users)] @ B)


def ease_score_fn(train: Observations, lam: float, *, values: str = "binary", max_items: int = EASE_MAX_ITEMS):
    """Fit EASE^R on ``train`` (`ease_fit`) and return its scorer, one block of users at a time (X_u B).

    Parameters
    ----------
    train : custom_inference.data.Observations
        Shape (I, J): the training entries.
    lam : float > 0
        The ridge constant lambda.
    values : {"binary", "count"}, default "binary"
        As in `ease_fit`.
    max_items : int, default `EASE_MAX_ITEMS`
        As in `ease_fit`.

    Returns
    -------
    callable
        ``score_fn(users) -> numpy.ndarray (B, J) float64`` for an int array ``users`` of shape (B,)
        (row indices of ``train``).

    Raises
    ------
    SkippedSystem, ValueError, numpy.linalg.LinAlgError
        As `ease_fit`.

    Source: Steck 2019 (closed form); project addition.
    """
    B = ease_fit(train, lam, values=values, max_items=max_items)
    X = _matrix(train, values)

    def score_fn(users):
        return np.asarray(X[np.asarray(users)] @ B)

    return score_fn


def tune_lambda(fit: Callable[[float], Callable], criterion: Callable[[Callable], dict], lambdas: Sequence[float],
                select_by: str, *, extend: int = 0) -> tuple[float, pd.DataFrame]:
    """Grid search of a regularisation constant on a validation split.

    Parameters
    ----------
    fit : callable
        ``fit(lam: float) -> score_fn`` fitted on the INNER training data of the validation split.
    criterion : callable
        ``criterion(score_fn) -> dict str -> float`` of validation metrics, larger is better for
        ``select_by``.
    lambdas : sequence of float
        The grid (non-empty, finite, > 0; searched in the order given).
    select_by : str
        The key of ``criterion``'s dict that decides (ties: the first lambda tried).
    extend : int, default 0
        While the best lambda is the largest (smallest) tried, try up to this many more, each the largest
        times (the smallest divided by) a ratio: the grid's last value over the one before when the grid
        ends increasing, else 3. A sequential search past the grid's edges (0: the grid only; the count is
        shared by both edges).

    Returns
    -------
    lam : float
        The best lambda.
    table : pandas.DataFrame
        One row per lambda tried, in the order tried: ``lam``, the criterion's metrics, ``seconds``
        (wall-clock of fit + criterion) and ``chosen`` (bool, True on the best row only).

    Raises
    ------
    ValueError
        An empty grid or one with a value that is not finite and > 0, or a ``select_by`` the criterion
        does not return; what ``fit`` and ``criterion`` raise propagates.

    Source: project addition (issue 13, "fair baselines"; issue 27 item 2: selection never on test).
    """
    lambdas = tuple(float(x) for x in lambdas)
    if not lambdas or any(not (np.isfinite(x) and x > 0) for x in lambdas):
        raise ValueError(f"lambdas: need a non-empty grid of finite numbers > 0, got {lambdas!r}")
    rows = []
    todo = list(lambdas)
    ratio = lambdas[-1] / lambdas[-2] if len(lambdas) > 1 and lambdas[-1] > lambdas[-2] else 3.0
    while todo:
        lam = todo.pop(0)
        t0 = time.perf_counter()
        m = criterion(fit(lam))
        if select_by not in m:
            raise ValueError(f"select_by {select_by!r} is not a validation metric; have {sorted(m)}")
        rows.append({"lam": lam, **m, "seconds": time.perf_counter() - t0})
        if not todo and extend > 0:
            lams = [r["lam"] for r in rows]
            best = max(range(len(rows)), key=lambda k: (rows[k][select_by], -k))
            if lams[best] == max(lams) or lams[best] == min(lams):
                todo.append(lams[best] * ratio if lams[best] == max(lams) else lams[best] / ratio)
                extend -= 1
    table = pd.DataFrame(rows)
    best = int(np.argmax(table[select_by].to_numpy()))
    table["chosen"] = np.arange(len(table)) == best
    return float(table["lam"].iloc[best]), table


def grid_edge_note(chosen) -> str:
    """", at the edge of the grid" when the chosen setting is the first or last of a grid of > 2, else "".

    Parameters
    ----------
    chosen : array-like of bool, shape (n,)
        With one True (the ``chosen`` column of `tune_lambda`'s table); the first True counts.

    Returns
    -------
    str
        ``", at the edge of the grid"`` or ``""``.

    Raises
    ------
    IndexError
        Nothing is chosen (no True).

    Source: project addition (a search that ends at its grid's edge may not have found the optimum).
    """
    k = int(np.flatnonzero(chosen)[0])
    return ", at the edge of the grid" if len(chosen) > 2 and k in (0, len(chosen) - 1) else ""


def ease_system(lambdas: Sequence[float] = EASE_LAMBDAS, *, n: int = 10, select_by: str = "hit",
                values: str = "binary", max_items: int = EASE_MAX_ITEMS, extend: int = 2):
    """EASE^R as a one-class system ``factory(train, seed) -> score_fn`` with lambda chosen on training data.

    On call: one training positive of every user with >= 2 of them is held out
    (`validation.evaluation.model_studies.validation_split`, generator ``default_rng([seed, 1])``); for each
    lambda of ``lambdas`` EASE^R is fitted on the rest and scored on those pairs
    (`validation.evaluation.metrics.leave_one_out_metrics` at cut-off ``n``: ``hit`` = HR@n, ``rank_score``,
    ``ndcg``), and while the best is the largest or smallest lambda tried, up to ``extend`` more lambdas
    past that edge of the grid (`tune_lambda`); the lambda with the best ``select_by`` is refitted on all of
    ``train``. ``train`` is the protocol's training matrix only: the test pairs are not an argument.

    Parameters
    ----------
    lambdas : sequence of float, default `EASE_LAMBDAS`
        The grid of lambdas (finite, > 0), searched in the order given.
    n : int, default 10
        The cut-off N of the validation HR@N / NDCG@N.
    select_by : {"hit", "rank_score", "ndcg"}, default "hit"
        The validation metric that picks lambda.
    values : {"binary", "count"}, default "binary"
        X's entries, as in `ease_fit`.
    max_items : int, default `EASE_MAX_ITEMS`
        Largest J fitted.
    extend : int, default 2
        Lambdas tried past the grid's edges (`tune_lambda`).

    Returns
    -------
    callable
        ``factory(train: Observations (I, J), seed: int) -> score_fn``, with attribute ``tunes = "lambda"``.
        ``score_fn(users (B,) int) -> (B, J) float64`` carries ``tuning`` (the validation curve, a
        DataFrame: lam, hit, rank_score, ndcg, n_users, seconds, chosen) and ``setting`` (a line naming the
        chosen lambda).

    Raises
    ------
    ValueError
        At once: a ``select_by`` not one of hit, rank_score, ndcg. When the factory is called: a bad grid,
        or as `ease_fit`.
    SkippedSystem
        When the factory is called: J > ``max_items``, or no validation split can be made (no user has two
        training positives).

    Source: Steck 2019 (EASE^R); the one-class validation split is the project's
    (`validation.evaluation.model_studies.validation_split`, the hold-out of ``000_619a0297b9d686b2.txt`` sec. 5).
    """
    from validation.evaluation import metrics
    from validation.evaluation.model_studies import validation_split

    if select_by not in ("hit", "rank_score", "ndcg"):
        raise ValueError(f"select_by must be 'hit', 'rank_score' or 'ndcg', got {select_by!r}")
    grid = tuple(float(x) for x in lambdas)

    def factory(train: Observations, seed: int):
        reason = ease_skip_reason(train.n_cols, max_items)
        if reason:
            raise SkippedSystem(reason)
        try:
            val = validation_split(train, seed=[int(seed), 1])
        except ValueError as e:
            raise SkippedSystem(f"EASE^R skipped: no validation split to choose lambda on ({e})") from e

        def criterion(fn):
            pu = metrics.leave_one_out_metrics(fn, val, n=n)
            return {"hit": float(pu["hit"].mean()), "rank_score": float(pu["rank_score"].mean()),
                    "ndcg": float(pu["ndcg"].mean()), "n_users": int(len(pu))}

        lam, table = tune_lambda(lambda lam: ease_score_fn(val.train, lam, values=values, max_items=max_items),
                                 criterion, grid, select_by, extend=extend)
        fn = ease_score_fn(train, lam, values=values, max_items=max_items)
        metric = {"hit": f"HR@{n}", "rank_score": "rank score", "ndcg": f"NDCG@{n}"}[select_by]
        fn.tuning = table
        fn.setting = (f"lambda = {lam:g} (best validation {metric} of {len(table)}{grid_edge_note(table['chosen'].to_numpy())}; "
                      f"validation: one training positive per user held out)")
        return fn

    factory.tunes = "lambda"
    return factory
