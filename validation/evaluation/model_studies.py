"""The seeds' own experiments with one model each, on real data: PSM's one-class evaluation system,
its (K, r) sweep and the validation split that selects them (seed 000, sec. 5), and RG's rank scores on
MovieLens 100K (seed 003, sec. 6.1.2); the PSM system itself (`implicit_system`, `PSM_DEFAULTS`) is PSM's
declared evaluation part, `validation.models.psm_eval`, re-exported here. Moved here from the models' check
modules (`validation.models.psm`, `validation.models.rg`) so that the declarations never import the
evaluation layer.

Source: ``000_619a0297b9d686b2.txt`` sec. 5; ``003_203f63200c0d7157.txt`` sec. 6.1.2.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from custom_inference import rg
from custom_inference.data import Observations
from ppl_models import rg as rg_ppl

from validation.models.psm_eval import PSM_DEFAULTS, implicit_system  # PSM's evaluation system, importable here too

__all__ = ["PSM_DEFAULTS", "implicit_system", "validation_split", "psm_sweep", "evaluate_rg_movielens"]


def validation_split(split, seed: int = 1):
    """A validation split carved from a P1 / SIBM split's *training* matrix, for choosing r or K.

    One uniformly drawn training positive of every user with >= 2 training positives moves to the
    validation set (the P1 draw of `validation.data.splits.split_leave_one_out`, step 3, on the training
    matrix; generator ``numpy.random.default_rng(seed)``). The test items stay out of both parts.

    Parameters
    ----------
    split : validation.data.datasets.ImplicitSplit or custom_inference.data.Observations
        The split, or its training matrix (I, J) alone (then the result's ``indexed`` is None).
    seed : int or sequence of int, default 1
        ``numpy.random.default_rng``'s seed.

    Returns
    -------
    validation.data.datasets.ImplicitSplit
        Same I, J and ``indexed``: ``train`` the reduced training matrix (binary, the dtype of the
        training values), ``test_users`` / ``test_items`` (int64) the validation pairs.

    Raises
    ------
    ValueError
        No user has two training positives.

    Source: project convention (model selection on a split carved from the training data; the hold-out
    of ``000_619a0297b9d686b2.txt`` sec. 5).
    """
    from validation.data import splits as _splits

    from dataclasses import replace
    from types import SimpleNamespace

    tr = split if isinstance(split, Observations) else split.train
    # _hold_out_one reads the index's n_users and shape only
    indexed = (SimpleNamespace(n_users=tr.n_rows, shape=tr.shape) if isinstance(split, Observations)
               else split.indexed)
    rows, cols = np.asarray(tr.rows, np.int64), np.asarray(tr.cols, np.int64)
    order = np.lexsort((cols, rows))
    out = _splits._hold_out_one(indexed, rows[order], cols[order], 2, seed, np.asarray(tr.values).dtype)
    if out is None:
        raise ValueError("split.train: no user has two training positives; nothing to validate on")
    return replace(out, indexed=None) if isinstance(split, Observations) else out


def psm_sweep(df, *, rs=(0.25, 0.5, 1.0, 2.0, 4.0), Ks=(10, 20, 30, 50), base_K: int = 20, base_r: float = 1.0,
              protocols=("P1", "SIBM"), seed: int = 0, max_iter: int = PSM_DEFAULTS["max_iter"],
              tol: float = PSM_DEFAULTS["tol"], dtype=np.float32, progress: bool = False) -> pd.DataFrame:
    """The r and K sweeps of PSM on the one-class protocols.

    r in ``rs`` at K = ``base_K``, then K in ``Ks`` at r = ``base_r`` (the shared setting is fitted once),
    through `validation.evaluation.implicit_eval.evaluate_implicit` (same splits, metrics and seed as the
    comparison table), each fit by `implicit_system`.

    Parameters
    ----------
    df : pandas.DataFrame or None
        Ratings table (`validation.data.datasets.load_movielens`), or None with ``protocols`` a dict of
        splits.
    rs : sequence of float, default (0.25, 0.5, 1.0, 2.0, 4.0)
        The r values (D' = r D) of the r sweep.
    Ks : sequence of int, default (10, 20, 30, 50)
        The K values of the K sweep.
    base_K : int, default 20
        K of the r sweep.
    base_r : float, default 1.0
        r of the K sweep.
    protocols : sequence of str or mapping, default ("P1", "SIBM")
        As `validation.evaluation.implicit_eval.evaluate_implicit`.
    seed : int, default 0
        Seeds the splits and the fits.
    max_iter : int, default ``PSM_DEFAULTS["max_iter"]``
        Algorithm 1 sweeps at most.
    tol : float, default ``PSM_DEFAULTS["tol"]``
        Stop when |dL| / |L| < tol.
    dtype : numpy float dtype, default numpy.float32
        Of the fits.
    progress : bool, default False
        As `validation.evaluation.implicit_eval.evaluate_implicit`.

    Returns
    -------
    pandas.DataFrame
        One row per (protocol, K, r): ``protocol``, ``K``, ``r``, ``rank_score_users``, ``rank_score_items``
        (eq. 12 averaged over test users / over held-out items), ``recall@10`` (= HR@10), ``ndcg@10``,
        ``fit_seconds`` (compilation included), ``d_prime`` (D' = r D), ``sweeps`` (Algorithm 1 sweeps run
        before |dL| / |L| < ``tol`` or ``max_iter``), ``converged``, ``n_users``, ``setting`` (why a skipped
        setting was skipped, "" otherwise). Rows are paired with their setting by the system's name; a setting
        the evaluation skipped keeps its row with NaN metrics, ``d_prime`` and ``sweeps`` and converged False.

    Raises
    ------
    ValueError
        Both ``rs`` and ``Ks`` empty; what `evaluate_implicit` and `custom_inference.psm.fit` raise.
    FloatingPointError
        Not of its own: a non-finite PSM ELBO (`custom_inference.psm.fit`).

    Source: ``000_619a0297b9d686b2.txt`` sec. 5 (fig. 3: r in D' = r D; the K study after fig. 4); the
    sweep harness is a project addition.
    """
    from validation.evaluation.implicit_eval import evaluate_implicit

    settings = [(int(base_K), float(r)) for r in rs] + [(int(K), float(base_r)) for K in Ks]
    settings = list(dict.fromkeys(settings))
    if not settings:
        raise ValueError("rs and Ks: no setting to run")
    systems, fits, of_name = {}, {}, {}
    for K, r in settings:
        f = implicit_system(K, r, dtype=dtype, max_iter=max_iter, tol=tol)

        def factory(train, s, f=f, K=K, r=r):
            out = f(train, s)
            fits.setdefault((K, r), []).append(f.last_fit)
            return out

        name = f"PSM K={K} r={r:g}"
        systems[name], of_name[name] = factory, (K, r)
    res = evaluate_implicit(df, systems, protocols, seed=seed, progress=progress)
    rows = []
    for _, row in res.table.iterrows():  # each row paired with its setting by its system name, never by position
        K, r = of_name[row["system"]]
        # a setting's fits come in the order of its rows; a skipped row (no fit_seconds) has no fit
        fitted = pd.notna(row.get("fit_seconds", np.nan))
        attrs = fits[(K, r)].pop(0).idata.vi_trace.attrs if fitted else {}
        rows.append({"protocol": row["protocol"], "K": K, "r": r, "rank_score_users": row.get("rank_score_users", np.nan),
                     "rank_score_items": row.get("rank_score_items", np.nan), "recall@10": row.get("recall@10", np.nan),
                     "ndcg@10": row.get("ndcg@10", np.nan), "fit_seconds": row.get("fit_seconds", np.nan),
                     "d_prime": float(attrs.get("d_prime", np.nan)), "sweeps": int(attrs["n_iter"]) if fitted else np.nan,
                     "converged": bool(attrs.get("converged", False)), "n_users": int(row["n_users"]),
                     "setting": row.get("setting", "") if not fitted else ""})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# RG on MovieLens 100K: the rank score of sec. 6.1.2 (eq. 20) for like, popularity, popularity x like


def evaluate_rg_movielens(path, K: int = 20, hyper=rg_ppl.RGHyper(), *, max_iter: int = 50, seed: int = 0,
                       dtype=np.float32, progress: bool = False) -> tuple[pd.DataFrame, rg.FitResult]:
    """Fit RG on the P1 split of MovieLens 100K (ratings >= 4, one held-out positive per user,
    `validation.data.datasets.split_leave_one_out`) and score the held-out items with the three scores
    of sec. 6.1.2: like p(g = 1 | h = 1) (eq. 19), popularity pi_n, popularity x like. Rank score:
    `validation.evaluation.metrics.rank_score` (eq. 20). Measured 2026-11-23 (K = 20, RGHyper()
    defaults, 40 stochastic sweeps, float32, 31 s on 2 shared CPU cores): mean rank like 0.878,
    popularity 0.869, popularity x like 0.897 over 942 users (that run predates the default warm start of
    `rg.fit`: it was a cold start).

    Parameters
    ----------
    path : str or path-like
        MovieLens 100K ratings file or folder (`validation.data.loaders.load_movielens`).
    K : int >= 1, default 20
        Latent dimension.
    hyper : ppl_models.rg.RGHyper, default RGHyper()
        Hyperparameters.
    max_iter : int, default 50
        Sweeps (all run: tol = 0).
    seed : int, default 0
        Seeds the split and the fit.
    dtype : numpy float dtype, default numpy.float32
        Of the fit.
    progress : bool, default False
        Progress bar.

    Returns
    -------
    table : pandas.DataFrame
        One row per score ("like", "popularity", "popularity_like"): score, mean_rank, median_rank
        (float, over users with candidates), n_users; attrs seconds (fit wall time), n_iter, gamma, K,
        ranks (score -> per-user rank array (T,) float64).
    fit : custom_inference.rg.FitResult
        The RG fit (means of q: ``n_draws=0``).

    Raises
    ------
    ValueError
        A bad ratings file (`validation.data.datasets.load_movielens`), no rating >= 4 or no user with
        two such ratings (`split_leave_one_out`).
    FileNotFoundError
        ``path`` does not exist.

    Source: 003_203f63200c0d7157.txt, sec. 6.1.2, eqs. (19)-(20).
    """
    from validation.data.datasets import load_movielens, split_leave_one_out
    from validation.evaluation.metrics import rank_score

    split = split_leave_one_out(load_movielens(path), seed=seed)
    start = time.perf_counter()
    res = rg.fit(seed, split.train, K, hyper, max_iter=max_iter, tol=0.0, dtype=dtype, n_draws=0,
                 progress=progress)
    seconds = time.perf_counter() - start
    rows, ranks = [], {}
    for kind in ("like", "popularity", "popularity_like"):
        fn = lambda users, kind=kind: rg.score_users(res.state, users, kind=kind, pi=rg.histogram_of(res)[0])  # noqa: E731
        r = ranks[kind] = rank_score(fn, split)
        rows.append({"score": kind, "mean_rank": float(np.nanmean(r)), "median_rank": float(np.nanmedian(r)),
                     "n_users": int(np.sum(np.isfinite(r)))})
    table = pd.DataFrame(rows)
    table.attrs.update(seconds=seconds, n_iter=len(res.elbo) - 1, gamma=rg.histogram_of(res)[1], K=K, ranks=ranks)
    return table, res
