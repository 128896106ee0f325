"""Held-out evaluation of a fitted model on the seed papers' protocols.

`evaluate_hpf` is what ``factorbayes evaluate hpf`` and ``factorbayes fit hpf`` run:
HPF by CAVI next to the popularity and EASE^R baselines (`validation.evaluation.baselines`; lambda chosen
on a validation split of the training data) on

- P1 (leave one positive out per user, ratings >= 4 binarized): rank score
  (000 eq. 12 / 003 eq. 20), HR@10 and NDCG@10 with pessimistic ties;
- P3 (random 20% of the ratings, permuted in file order, held out; ratings as counts): precision@100,
  recall@100 and NDCG@100 (004 ch. 5, eqs. 5.21-5.28).

Every table carries standard errors over test users and the paired bootstrap interval of each method
against the better baseline (`validation.evaluation.intervals`): by HR@10 on P1, precision@100 on P3.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from custom_inference import hpf as cavi
from ppl_models.hpf import HPFHyper

from validation.data import datasets
from validation.evaluation import baselines, intervals, metrics
from validation.models import hpf as hpf_declaration

__all__ = ["EvaluationResult", "evaluate_hpf"]


@dataclass
class EvaluationResult:
    """What `evaluate_hpf` returns: summary tables per protocol, per-user and by-degree tables, the fits.

    Parameters
    ----------
    tables : dict of str to pandas.DataFrame
        "P1", "P3" -> one row per method (see `evaluate_hpf`).
    per_user : dict of str to dict of str to pandas.DataFrame
        Protocol -> method -> per-user metrics (`validation.evaluation.metrics.leave_one_out_metrics` on
        P1, `validation.evaluation.metrics.holdout_metrics` on P3).
    by_degree : dict of str to pandas.DataFrame
        "P1 rank_score" / "P3 recall" -> `validation.evaluation.metrics.by_degree` of that metric by the
        user's training degree, with a ``method`` column in front.
    fits : dict of str to arviz.InferenceData
        Protocol -> the HPF CAVI fit.
    differences : dict of str to pandas.DataFrame, default {}
        Protocol -> `validation.evaluation.intervals.Comparison.differences`.
    tuning : dict of str to pandas.DataFrame, default {}
        Protocol -> EASE^R's validation curve.
    notes : list of str, default []
        The chosen lambdas, how the intervals were made, skipped baselines.

    Raises
    ------
    None on construction (a dataclass; the fields are not checked).

    Source: project addition.
    """

    tables: dict[str, pd.DataFrame]
    per_user: dict[str, pd.DataFrame] = field(repr=False)
    by_degree: dict[str, pd.DataFrame] = field(repr=False)
    fits: dict[str, object] = field(repr=False)
    differences: dict[str, pd.DataFrame] = field(default_factory=dict)
    tuning: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list = field(default_factory=list)


def evaluate_hpf(
    df: pd.DataFrame,
    *,
    n_components: int = 20,
    hyper: HPFHyper = HPFHyper(),
    seed: int = 0,
    max_iter: int = 100,
    tol: float = 0.0,
    dtype=np.float32,
    progress: bool = True,
    ease: bool = True,
) -> EvaluationResult:
    """Fit HPF by CAVI on the P1 and P3 training sets of ``df`` and evaluate both.

    Parameters
    ----------
    df : pandas.DataFrame
        Columns user, item, rating (`validation.data.datasets.load_movielens`).
    n_components : int >= 1, default 20
        K, the number of factors.
    hyper : ppl_models.hpf.HPFHyper, default HPFHyper()
        The paper's and hpfrec's a = a' = c = c' = 0.3, b' = d' = 1.
    seed : int, default 0
        Seeds the splits and the fits.
    max_iter : int >= 1, default 100
        CAVI sweeps at most.
    tol : float >= 0, default 0.0
        Relative-ELBO tolerance (0 runs all sweeps, as hpfrec's reference run of 100 iterations does).
    dtype : numpy float dtype, default numpy.float32
        float32 (fast) or float64.
    progress : bool, default True
        Progress bars of the fits.
    ease : bool, default True
        Add EASE^R: on P1 `validation.evaluation.baselines.ease_system` (lambda by HR@10 on one training
        positive per user held out of the training matrix), on P3 `validation.evaluation.counts_eval.tune_ease`
        (precision@100 on 20 % of the training entries held out); skipped with its reason above
        `validation.evaluation.baselines.EASE_MAX_ITEMS` items.

    Returns
    -------
    EvaluationResult
        Tables "P1" (rank_score, hit, ndcg) and "P3" (precision, recall, f_measure, ndcg), one row per
        method (HPF CAVI, popularity, EASE^R), each with the standard errors ``<metric>_se`` over test
        users and, against the better of popularity and EASE^R (``vs``; by hit on P1, precision on P3),
        ``diff``, ``ci_low``, ``ci_high`` (95 % paired bootstrap interval over the same users) and
        ``verdict``. The fits' variational parameters have ``dtype``: user factors (I, K), item factors
        (J, K).

    Raises
    ------
    ValueError
        A bad ratings table (`validation.data.splits.index_ratings`); no rating >= 4 or no user with
        two such ratings (P1); ratings that are not integer counts (P3); bad fit settings
        (`custom_inference.hpf.fit`).
    FloatingPointError
        Not of its own: a non-finite ELBO in a fit (`custom_inference.hpf.fit`).

    Source: 001_30a2018ec18c20b9.txt, batch algorithm figure (HPF CAVI); protocols and metrics:
    000_619a0297b9d686b2.txt, eq. 12 and 003_203f63200c0d7157.txt, eq. 20 (rank score),
    004_90693a0965f06816.txt, ch. 5, eqs. 5.21-5.28 (P3).
    """
    p1 = datasets.split_leave_one_out(df, seed=seed)
    # P3 permutes the ratings in the order the file lists them: the protocol under which
    # the reference numbers of the foundation issue (popularity, hpfrec) were measured.
    p3 = datasets.split_random_holdout(df, seed=seed, row_order="input")
    tables, per_user, buckets, fits = {}, {}, {}, {}
    differences, tuning, notes = {}, {}, []
    for name, split, train in (("P1", p1, p1.train), ("P3", p3, p3.train)):
        fit = cavi.fit(
            seed, train, n_components, hyper, max_iter=max_iter, tol=tol,
            dtype=dtype, n_draws=0, progress=progress,
        ).idata
        fits[name] = fit
        rows, per_method = [], {}
        methods = [("HPF (CAVI)", hpf_declaration.score_fn(fit)), ("popularity", metrics.popularity_score_fn(train))]
        if ease:
            fn = _ease(name, train, seed, tuning, notes)
            methods += [("EASE^R", fn)] if fn is not None else []
        for method, score_fn in methods:
            if name == "P1":
                pu = metrics.leave_one_out_metrics(score_fn, split, n=10)
                bucket_col = "rank_score"
            else:
                pu = metrics.holdout_metrics(score_fn, split, p=100)
                bucket_col = "recall"
            per_method[method] = pu
            summary = metrics.summarize(pu)
            rows.append({"method": method, **summary.to_dict()})
            b = metrics.by_degree(pu, bucket_col)
            b.insert(0, "method", method)
            buckets.setdefault(f"{name} {bucket_col}", []).append(b)
        cols = ["rank_score", "hit", "ndcg"] if name == "P1" else ["precision", "recall", "ndcg"]
        main = "hit" if name == "P1" else "precision"
        comp = intervals.compare(per_method, cols, main=main, baselines=("popularity", "EASE^R"))
        tables[name] = intervals.annotate(pd.DataFrame(rows), comp, system_col="method")
        differences[name] = comp.differences
        notes.append(f"{name}: {comp.note()}; diff / ci_low / ci_high / verdict: {main}")
        per_user[name] = per_method
    return EvaluationResult(
        tables=tables,
        per_user=per_user,
        by_degree={k: pd.concat(v, ignore_index=True) for k, v in buckets.items()},
        fits=fits,
        differences=differences,
        tuning=tuning,
        notes=notes,
    )


def _ease(protocol: str, train, seed: int, tuning: dict, notes: list):
    """EASE^R's score function on a protocol's training matrix, lambda chosen on a split of it (P1: one
    positive per user; P3: 20 % of the entries, by precision@100); None (and a note) when skipped."""
    from validation.evaluation import counts_eval

    try:
        if protocol == "P1":
            fn = baselines.ease_system()(train, seed)
            tuning[protocol], setting = fn.tuning, fn.setting
        else:
            lam, tuning[protocol] = counts_eval.tune_ease(train, seed=seed, select_by="precision")
            fn = baselines.ease_score_fn(train, lam)
            setting = f"lambda = {lam:g} (best validation precision@100; 20 % of the training entries held out)"
    except baselines.SkippedSystem as e:
        notes.append(f"{protocol}: {e}")
        return None
    notes.append(f"{protocol} EASE^R: {setting}")
    return fn
