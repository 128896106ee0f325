r"""Top-N recommendation from counts on protocol P3: NPFM, PPFM, HPF, the Gaussian FMs and two baselines.

``factorbayes evaluate counts --data ml-100k`` calls `evaluate_counts`. Source:
``004_90693a0965f06816.txt`` sec. 5.4 (NPFM / PPFM against SGD-FM and MCMC-FM, fig. 5.3), with
protocol P3 and metrics of sec. 5.4.4; HPF (``001_30a2018ec18c20b9.txt``) by CAVI, item
popularity and EASE^R (Steck 2019, "Embarrassingly shallow autoencoders for sparse data") are
added as reference points.

Protocol P3 (`validation.data.datasets.split_random_holdout`, ``row_order="input"``, the split of
`validation.evaluation.experiments.evaluate_hpf` and `validation.evaluation.pfm_experiments.evaluate_p3`): 20 % of the ratings,
drawn by a seeded permutation of the file's rows, are held out; ratings are counts. For every
user with a test rating the candidates are the items without a training rating, the retrieved
list the top P = 100 candidates by score (ties: smaller item index), the relevant set the user's
test items. Columns of the table (`validation.evaluation.metrics.holdout_metrics` / `summarize`):

- ``precision``, ``recall`` (eqs. 5.21-5.24), ``f_measure`` (eq. 5.25, of the means);
- ``ndcg``: eq. 5.26-5.28, the thesis's discount (positions 1 and 2 weigh 1, then 1 / log2 k);
- ``ndcg_log2k1``: the project's other discount, 1 / log2(k + 1) (the now common form);
- ``precision_se``, ``recall_se``, ``ndcg_se``, ``ndcg_log2k1_se``: standard errors over test users; ``vs``,
  ``diff``, ``ci_low``, ``ci_high``, ``verdict``: precision@100 against the better of popularity and
  EASE^R, with a 95 % paired bootstrap interval over the same users (`validation.evaluation.intervals`;
  the other metrics' intervals in ``differences``);
- ``fit_seconds``: wall time of the final fit, compilation included (tuning excluded: see the
  tuning tables), ``seconds_per_iteration`` where the solver reports one.

Systems (`systems`: the baselines and every solver whose declaration lists the "counts" evaluation;
``NAME+side`` adds the MovieLens side features, `side_systems`: those declaring "counts+side"):

- ``popularity``: number of training entries of the item (`validation.evaluation.metrics.popularity_score_fn`).
- ``ease``: EASE^R on the binarized training matrix (``ease_values="count"``: the counts):
  B = I - P diag(1 / diag P), P = (X^T X + lambda I)^-1, scores X_u B (`ease_fit`, `ease_scores`, from
  `validation.evaluation.baselines`, re-exported here; skipped with its reason above 20,000 items).
  lambda is chosen by `tune_ease` on a validation split carved from the TRAINING entries
  (`validation_split`), then B is refitted on all training entries.
- ``hpf``: HPF by CAVI (`custom_inference.hpf.fit`, scores E_q[theta_u] . E_q[beta_i]) as in
  `validation.evaluation.experiments.evaluate_hpf`.
- ``npfm``, ``ppfm``: `validation.evaluation.pfm_experiments.evaluate_p3` (every user-item cell a training row, y = 0 where
  unrated); two rows each, the posterior-mean rate over the kept draws and the thesis's plug-in
  rate at the posterior-mean parameters (sec. 5.3.4).
- ``mcmc-fm``: MCMC-FM (`custom_inference.fm_mcmc.sample`, Gaussian likelihood) trained, as in the
  thesis, on the observed training ratings only; score: the predicted rating averaged over the kept
  draws, for every candidate.
- ``sgd-fm``: SGD-FM (`custom_inference.fm_sgd.fit`, Algorithm 1) on the same design; learning rate
  and L2 constant chosen by `tune_sgd_fm` on the validation split of the training entries (grid
  `CountsConfig.sgd_learning_rates` x `CountsConfig.sgd_regs`), then refitted on all training
  entries.

Tuning criterion. Both tuned baselines are chosen by the top-N metric the comparison reports
(``CountsConfig.select_by``, default the F-measure at P = 100) on the validation split, never on the
test split: `tune_ease` and `tune_sgd_fm` receive the training `Observations` only. The validation
split holds out ``validation_fraction`` (20 %) of the training entries with a permutation seeded by
(seed, 1); its "candidates" exclude only the inner training entries.

Side features (``NAME+side``): user age bucket, gender, occupation and item genres from ``u.user`` and
``items.tsv`` (`validation.evaluation.pfm_experiments.ml100k_side_features`), as further FM feature groups (user side and
item side) for NPFM, PPFM, MCMC-FM and SGD-FM.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from custom_inference.data import Observations

from validation.data import datasets
from validation.evaluation import baselines, intervals, metrics
from validation.evaluation.baselines import ease_fit, ease_score_fn, ease_scores
from validation.data.splits import HoldoutSplit

__all__ = [
    "BASELINES",
    "systems",
    "side_systems",
    "CountsConfig",
    "CountsEvaluation",
    "validation_split",
    "ranking_metrics",
    "summarize_p3",
    "ease_fit",
    "ease_scores",
    "ease_score_fn",
    "tune_ease",
    "entity_features",
    "fm_design",
    "fm_score_fn",
    "tune_sgd_fm",
    "evaluate_counts",
]

#: The evaluation's own baselines; the model systems are the solvers that declare the "counts" evaluation
#: (`systems`), the ``NAME+side`` ones those that declare "counts+side" (`side_systems`).
BASELINES = ("popularity", "ease")


def systems() -> tuple[str, ...]:
    """Every system of the evaluation: `BASELINES`, then the front-door names of the solvers whose declaration
    lists the "counts" evaluation (`validation.models.catalog.evaluation_systems`), in registry order
    (today hpf, mcmc-fm, sgd-fm, npfm, ppfm). Returns a tuple of str. Raises what
    `validation.models.catalog.evaluation_systems` raises (MissingDeclaration for a declaration without a
    front-door name). Source: project addition (issue 25)."""
    from validation.models import catalog

    return BASELINES + catalog.evaluation_systems("counts")


def side_systems() -> tuple[str, ...]:
    """The systems that take the MovieLens side features (``NAME+side``): the solvers declaring "counts+side".
    Returns a tuple of str. Raises as `systems`. Source: project addition (issue 25)."""
    from validation.models import catalog

    return catalog.evaluation_systems("counts+side")


def __getattr__(name):
    # SYSTEMS / SIDE_SYSTEMS: read from the declarations on use (no table here names a model)
    if name == "SYSTEMS":
        return systems()
    if name == "SIDE_SYSTEMS":
        return side_systems()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: the per-user metrics whose standard errors and paired intervals the table reports, and the main one
#: (it picks the best baseline; its difference and interval are the table's diff / ci_low / ci_high)
_INTERVAL_METRICS = ("precision", "recall", "ndcg", "ndcg_log2k1")
MAIN_METRIC = "precision"
P_AT = 100  # the thesis's list length P (sec. 5.4.4); `validation.evaluation.pfm_experiments.evaluate_p3` fixes it too
_SELECT = ("f_measure", "precision", "recall", "ndcg", "ndcg_log2k1")


@dataclass(frozen=True)
class CountsConfig:
    """Settings of `evaluate_counts` (defaults: the run reported for ML-100K, shorter than the thesis's).

    K : latent dimension of every factor model (NPFM's truncation level), 50 in the thesis.
    seed : seed of the P3 split, of the validation split (with 1) and of every solver.
    pfm_warmup, pfm_samples, pfm_thin, pfm_init_scale, pfm_chains : NPFM / PPFM Gibbs sweeps discarded,
        draws kept (one every ``pfm_thin`` sweeps), initial scale, chains (the thesis: 1500 + 1000).
    hpf_max_iter : HPF CAVI sweeps (all run, tol = 0).
    fm_warmup, fm_samples : MCMC-FM sweeps discarded and kept (one chain).
    sgd_epochs, sgd_learning_rates, sgd_regs, sgd_batch_size : SGD-FM epochs and the searched grid
        (lambda_w = lambda_v = reg, lambda_0 = 0; thesis: 300 epochs, chosen (0.001, 0.01)).
    ease_lambdas, ease_values : EASE^R's searched L2 constants; "binary" (Steck's X) or "count".
    validation_fraction : share of the training entries held out for tuning.
    select_by : validation metric that chooses the tuned settings (a column of `ranking_metrics`).
    dtype : "float32" or "float64" for NPFM / PPFM / HPF; fm_dtype the same for MCMC-FM / SGD-FM.
    """

    K: int = 50
    seed: int = 0
    pfm_warmup: int = 300
    pfm_samples: int = 100
    pfm_thin: int = 2
    pfm_init_scale: float = 1.0
    pfm_chains: int = 1
    hpf_max_iter: int = 100
    fm_warmup: int = 50
    fm_samples: int = 100
    sgd_epochs: int = 30
    sgd_learning_rates: tuple = (0.003, 0.01, 0.03)
    sgd_regs: tuple = (0.01, 0.04, 0.1)
    sgd_batch_size: int = 1
    ease_lambdas: tuple = baselines.EASE_LAMBDAS
    ease_values: str = "binary"
    validation_fraction: float = 0.2
    select_by: str = "f_measure"
    dtype: str = "float32"
    fm_dtype: str = "float64"

    def __post_init__(self):
        for name in ("K", "pfm_samples", "pfm_thin", "pfm_chains", "hpf_max_iter", "fm_samples", "sgd_epochs",
                     "sgd_batch_size"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
        for name in ("pfm_warmup", "fm_warmup"):
            v = getattr(self, name)
            if int(v) != v or v < 0:
                raise ValueError(f"{name}: must be an integer >= 0, got {v!r}")
        for name in ("sgd_learning_rates", "sgd_regs", "ease_lambdas"):
            v = tuple(getattr(self, name))
            if not v or any(not np.isfinite(x) for x in v):
                raise ValueError(f"{name}: need a non-empty tuple of finite numbers, got {v!r}")
        if any(x <= 0 for x in self.sgd_learning_rates) or any(x < 0 for x in self.sgd_regs):
            raise ValueError("sgd_learning_rates must be > 0 and sgd_regs >= 0")
        if any(x <= 0 for x in self.ease_lambdas):
            raise ValueError(f"ease_lambdas: must be > 0, got {self.ease_lambdas!r}")
        if self.ease_values not in ("binary", "count"):
            raise ValueError(f"ease_values: 'binary' or 'count', got {self.ease_values!r}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction: must be in (0, 1), got {self.validation_fraction!r}")
        if self.select_by not in _SELECT:
            raise ValueError(f"select_by: one of {_SELECT}, got {self.select_by!r}")
        for name in ("dtype", "fm_dtype"):
            if getattr(self, name) not in ("float32", "float64"):
                raise ValueError(f"{name}: 'float32' or 'float64', got {getattr(self, name)!r}")
        if not self.pfm_init_scale > 0:
            raise ValueError(f"pfm_init_scale: must be > 0, got {self.pfm_init_scale!r}")


@dataclass
class CountsEvaluation:
    """Result of `evaluate_counts`.

    table : one row per method (DataFrame): method, system, features ("ids" | "ids+side"),
        precision, recall, f_measure, ndcg (eq. 5.26), ndcg_log2k1, n_users, fit_seconds,
        seconds_per_iteration, iterations, setting (str: what was run / chosen).
    tuning : validation-split searches, name -> DataFrame (one row per setting tried, with the
        validation metrics, seconds and ``chosen``).
    notes : lines describing data and settings. report : path of ``report.md`` (None without out_dir).
    extras : per system, e.g. NPFM's mean number of active factors (``n_active_mean``).
    per_user : method -> per-user DataFrame (`validation.evaluation.metrics.p3_metrics`) on the test split.
    differences : `validation.evaluation.intervals.compare`'s differences: every method against the best
        baseline (popularity or EASE^R by precision@100), per metric, with the paired bootstrap interval.
    """

    table: pd.DataFrame
    tuning: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    report: Path | None = None
    extras: dict = field(default_factory=dict)
    per_user: dict = field(default_factory=dict, repr=False)
    differences: pd.DataFrame = field(default_factory=pd.DataFrame)


# ------------------------------------------------------------------------------
# validation split and metrics


def validation_split(train: Observations, *, fraction: float = 0.2, seed: int = 0) -> HoldoutSplit:
    """Carve a validation split out of the TRAINING entries: a random ``fraction`` of them held out.

    ``train``: Observations (I, J) of N entries (the P3 training set). The permutation is
    ``numpy.random.default_rng([seed, 1]).permutation(N)``; its first ``round(fraction * N)``
    entries form ``test`` (the validation entries), the rest ``train``. Only ``train`` is seen, so
    the test split of the outer protocol cannot influence what is tuned on this split.

    Returns a `validation.data.splits.HoldoutSplit` with ``train`` and ``test`` Observations of shape
    (I, J) and the dtype of ``train.values``; ``indexed`` is None (the metrics do not use it).

    Raises ValueError when ``train`` is not Observations, ``fraction`` is not in (0, 1) or leaves
    either side empty.
    Source: project addition (the "validation split carved from the training data" of the tuning).
    """
    if not isinstance(train, Observations):
        raise ValueError(f"train must be Observations, got {type(train).__name__}")
    if not 0.0 < float(fraction) < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    rows, cols, vals = np.asarray(train.rows), np.asarray(train.cols), np.asarray(train.values)
    n = rows.size
    n_val = round(float(fraction) * n)
    if n_val < 1 or n_val > n - 1:
        raise ValueError(f"fraction={fraction} of {n} training entries leaves an empty side")
    perm = np.random.default_rng([int(seed), 1]).permutation(n)
    val, inner = perm[:n_val], perm[n_val:]

    def mk(idx):
        return Observations.from_coo(rows[idx], cols[idx], vals[idx], train.shape, kind="count", dtype=vals.dtype)

    return HoldoutSplit(train=mk(inner), test=mk(val), indexed=None)


def ranking_metrics(score_fn, split: HoldoutSplit, p: int = P_AT, batch_size: int = 256) -> dict:
    """Mean precision@p, recall@p, F-measure, NDCG@p (thesis discount) and NDCG@p with 1/log2(k+1).

    ``score_fn(users (B,) int) -> (B, J)`` float scores; ``split`` a HoldoutSplit (P3 or
    `validation_split`). Returns dict of float: precision, recall, f_measure, ndcg, ndcg_log2k1,
    n_users. The score function is called twice per batch (once per discount).

    Raises ValueError as `validation.evaluation.metrics.holdout_metrics` (scores of the wrong shape or NaN,
    overlapping train and test, bad p).
    Source: ``004_90693a0965f06816.txt`` sec. 5.4.4, eqs. 5.21-5.28 (through `validation.evaluation.metrics`);
    the log2(k + 1) column is a project addition.
    """
    return summarize_p3(metrics.p3_metrics(score_fn, split, p=p, batch_size=batch_size))


def summarize_p3(per_user: pd.DataFrame) -> dict:
    """The means of a `validation.evaluation.metrics.p3_metrics` table: dict of float precision, recall,
    f_measure (eq. 5.25, of the means), ndcg, ndcg_log2k1, n_users.
    Raises ValueError as `validation.evaluation.metrics.summarize`. Source: ``004_90693a0965f06816.txt`` eqs.
    5.23-5.25, 5.28."""
    out = {k: float(v) for k, v in metrics.summarize(per_user).items()}
    out["ndcg_log2k1"] = float(per_user["ndcg_log2k1"].mean())
    return {k: out[k] for k in ("precision", "recall", "f_measure", "ndcg", "ndcg_log2k1", "n_users")}


# ------------------------------------------------------------------------------
# EASE^R (the closed form lives in `validation.evaluation.baselines`; re-exported here)

def tune_ease(train: Observations, lambdas=CountsConfig.ease_lambdas, *, fraction: float = 0.2, seed: int = 0,
              select_by: str = "f_measure", values: str = "binary", p: int = P_AT):
    """Choose EASE^R's lambda on a validation split of the TRAINING entries (`validation_split`).

    For each lambda of ``lambdas``: fit on the inner training entries, score the validation entries
    (`ranking_metrics` at ``p``). The lambda with the largest ``select_by`` wins (ties: the first).
    ``train``: Observations (I, J): the test split is not an argument.

    Returns (best_lambda float, DataFrame: lam, precision, recall, f_measure, ndcg, ndcg_log2k1,
    n_users, seconds, chosen (bool)).

    Raises ValueError for an empty ``lambdas``, an unknown ``select_by``, or as `validation_split`
    and `ease_fit`.
    Source: Steck 2019 (EASE^R); the validation-split search is a project addition (issue 13,
    "fair baselines").
    """
    if select_by not in _SELECT:
        raise ValueError(f"select_by: one of {_SELECT}, got {select_by!r}")
    if not tuple(lambdas):
        raise ValueError("lambdas: empty")
    vs = validation_split(train, fraction=fraction, seed=seed)
    return baselines.tune_lambda(lambda lam: ease_score_fn(vs.train, lam, values=values),
                                 lambda fn: ranking_metrics(fn, vs, p=p), lambdas, select_by)


# ------------------------------------------------------------------------------
# factorization-machine designs and scores


def entity_features(n_users: int, n_items: int, side=None):
    """User and item feature rows of the FM design x_(u,i) = a_u + b_i (thesis eq. 2.17, fig. 2.1).

    ``side``: None (ids only) or the tuple of `validation.evaluation.pfm_experiments.ml100k_side_features`
    (user_features (I, D_u) csr, user_groups (D_u,) int, item_features (J, D_v) csr,
    item_groups (D_v,) int, names). Columns: user one-hot (I), item one-hot (J), then the user side
    features and the item side features.

    Returns (A csr float64 (I, D), B csr float64 (J, D), group int64 (D,), group_names tuple of
    str): groups user 0, item 1, then one per side-feature group (ML-100K: age, gender, occupation,
    genre).

    Raises ValueError when the side matrices do not have I / J rows.
    Source: ``004_90693a0965f06816.txt`` eq. 2.17 and fig. 2.1 (design); project addition.
    """
    I, J = int(n_users), int(n_items)
    eye = lambda n: sp.identity(n, dtype=np.float64, format="csr")  # noqa: E731
    if side is None:
        A = sp.hstack([eye(I), sp.csr_matrix((I, J))], format="csr")
        B = sp.hstack([sp.csr_matrix((J, I)), eye(J)], format="csr")
        return A, B, np.r_[np.zeros(I, int), np.ones(J, int)], ("user", "item")
    Uf, ug, Vf, ig, names = side
    Uf, Vf = sp.csr_matrix(Uf, dtype=np.float64), sp.csr_matrix(Vf, dtype=np.float64)
    if Uf.shape[0] != I or Vf.shape[0] != J:
        raise ValueError(f"side features: expected {I} user and {J} item rows, got {Uf.shape[0]} and {Vf.shape[0]}")
    Du, Dv = Uf.shape[1], Vf.shape[1]
    ug, ig = np.asarray(ug, int), np.asarray(ig, int)
    n_ug = int(ug.max()) + 1 if Du else 0
    A = sp.hstack([eye(I), sp.csr_matrix((I, J)), Uf, sp.csr_matrix((I, Dv))], format="csr")
    B = sp.hstack([sp.csr_matrix((J, I)), eye(J), sp.csr_matrix((J, Du)), Vf], format="csr")
    group = np.r_[np.zeros(I, int), np.ones(J, int), 2 + ug, 2 + n_ug + ig]
    return A, B, group, tuple(names)


def fm_design(obs: Observations, entities, *, dtype=np.float64):
    """FM design of the entries of ``obs``: row n = A[u_n] + B[i_n], response y_n = the count.

    ``obs``: Observations (I, J) of N entries; ``entities``: the tuple of `entity_features`.
    Returns `custom_inference.fm_design.FMDesign` (N rows, D columns, ``dtype``).

    Raises ValueError as `FMDesign.from_scipy` (e.g. an empty ``obs``).
    Source: ``004_90693a0965f06816.txt`` eq. 2.17 (design of the observed entries, as the thesis's
    Gaussian FMs use it); project addition.
    """
    from custom_inference.fm_design import FMDesign

    A, B, group, names = entities
    u, i = np.asarray(obs.rows), np.asarray(obs.cols)
    X = A[u] + B[i]
    return FMDesign.from_scipy(X, np.asarray(obs.values, np.float64), group, group_names=names, dtype=dtype)


def fm_score_fn(w0, w, V, entities):
    """Score function of a factorization machine averaged over draws, for all items at once.

    ``w0`` (S,), ``w`` (S, D), ``V`` (S, D, K) (S draws; S = 1 for a point estimate), ``entities``
    from `entity_features`. For x = a_u + b_i the FM rate splits into entity terms:
    yhat = w0 + <a_u, w> + <b_i, w> + <Q_u, Q_i> + P_u + P_i with Q = A V (K,) and
    P_u = 1/2 sum_k (Q_uk^2 - sum_l a_ul^2 v_lk^2). The mean over draws of <Q_u, Q_i> is one product
    of the draws' Q concatenated along the factor axis, divided by S, so a block of users costs
    O(B J S K) without an I x J array.

    Returns ``score_fn(users (B,) int) -> (B, J) float64``.

    Raises ValueError when the shapes of w0, w, V and the design disagree.
    Source: ``004_90693a0965f06816.txt`` eq. 2.17 (computed as eq. 4.22), averaged over draws as
    eq. 2.16; the entity split is a project addition.
    """
    A, B, _, _ = entities
    w0 = np.asarray(w0, np.float64).reshape(-1)
    S = w0.size
    w = np.asarray(w, np.float64).reshape(S, -1)
    V = np.asarray(V, np.float64).reshape(S, w.shape[1], -1)
    if w.shape[1] != A.shape[1] or B.shape[1] != A.shape[1]:
        raise ValueError(f"w: {w.shape[1]} features, the design has {A.shape[1]}")
    A2, B2 = A.multiply(A).tocsr(), B.multiply(B).tocsr()

    def terms(M, M2):
        lin = np.asarray(M @ w.T).mean(1)  # (n,)
        Q = np.concatenate([np.asarray(M @ V[s]) for s in range(S)], axis=1)  # (n, S K)
        sq = np.concatenate([np.asarray(M2 @ (V[s] ** 2)) for s in range(S)], axis=1)
        P = 0.5 * (Q ** 2 - sq).sum(1) / S
        return lin + P, Q

    cu, Qu = terms(A, A2)
    ci, Qi = terms(B, B2)
    base = w0.mean() + ci[None, :]

    def score_fn(users):
        users = np.asarray(users)
        return base + cu[users][:, None] + (Qu[users] @ Qi.T) / S

    return score_fn


def _sgd_fit(obs, entities, K, lr, reg, cfg, seed):
    from custom_inference import fm_sgd

    design = fm_design(obs, entities, dtype=np.dtype(cfg.fm_dtype))
    res = fm_sgd.fit(seed, design, K, fm_sgd.SGDReg(lambda_0=0.0, lambda_w=reg, lambda_v=reg), learning_rate=lr,
                     n_epochs=cfg.sgd_epochs, batch_size=cfg.sgd_batch_size, dtype=np.dtype(cfg.fm_dtype))
    p = res.state
    return (np.asarray(p.w0)[None], np.asarray(p.w)[None], np.asarray(p.V)[None],
            float(res.idata.sgd_trace.attrs["seconds"]))


def tune_sgd_fm(train: Observations, entities, config: CountsConfig = CountsConfig(), *, progress: bool = False):
    """Choose SGD-FM's learning rate and L2 constant on a validation split of the TRAINING entries.

    Grid: ``config.sgd_learning_rates`` x ``config.sgd_regs`` (lambda_w = lambda_v = reg,
    lambda_0 = 0), ``config.sgd_epochs`` epochs, K = ``config.K``; each setting is fitted on the
    inner training entries of `validation_split` (``config.validation_fraction``, ``config.seed``)
    and scored on the validation entries (`ranking_metrics`); the largest ``config.select_by`` wins
    (ties: the first). The validation RMSE of the ratings is reported too (not used).
    ``train``: Observations (I, J); ``entities``: `entity_features`.

    Returns (learning_rate float, reg float, DataFrame: learning_rate, reg, precision, recall,
    f_measure, ndcg, ndcg_log2k1, n_users, val_rmse, seconds, chosen).

    Raises ValueError as `validation_split`, `fm_design` and `custom_inference.fm_sgd.fit`.
    Source: ``004_90693a0965f06816.txt`` sec. 5.4.3 ("learning rate and regularization ... chosen
    by cross validation"); the search here is a project addition (issue 13, "fair baselines").
    """
    vs = validation_split(train, fraction=config.validation_fraction, seed=config.seed)
    vu, vi, vy = np.asarray(vs.test.rows), np.asarray(vs.test.cols), np.asarray(vs.test.values, np.float64)
    rows = []
    for lr in config.sgd_learning_rates:
        for reg in config.sgd_regs:
            t0 = time.perf_counter()
            w0, w, V, _ = _sgd_fit(vs.train, entities, config.K, float(lr), float(reg), config, config.seed)
            fn = fm_score_fn(w0, w, V, entities)
            m = ranking_metrics(fn, vs)
            rm = _fm_rmse(w0, w, V, entities, vu, vi, vy)
            rows.append({"learning_rate": float(lr), "reg": float(reg), **m, "val_rmse": rm,
                         "seconds": time.perf_counter() - t0})
            if progress:
                print(f"    sgd-fm eta={lr:g} reg={reg:g}: validation {config.select_by} "
                      f"{m[config.select_by]:.4f}, RMSE {rm:.4f}", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    best = int(np.argmax(table[config.select_by].to_numpy()))
    table["chosen"] = np.arange(len(table)) == best
    return float(table["learning_rate"].iloc[best]), float(table["reg"].iloc[best]), table


def _fm_rmse(w0, w, V, entities, u, i, y) -> float:
    """RMSE of the FM prediction (mean over draws) at entries (u, i) against y."""
    A, B, _, _ = entities
    S = np.asarray(w0).reshape(-1).size
    pred = np.zeros(u.size)
    for s in range(S):
        Xs = A[u] + B[i]
        Vs = np.asarray(V).reshape(S, A.shape[1], -1)[s]
        ws = np.asarray(w).reshape(S, -1)[s]
        q = np.asarray(Xs @ Vs)
        sq = np.asarray(Xs.multiply(Xs) @ (Vs ** 2))
        pred += np.asarray(w0).reshape(-1)[s] + np.asarray(Xs @ ws).ravel() + 0.5 * (q ** 2 - sq).sum(1)
    pred /= S
    return float(np.sqrt(np.mean((pred - y) ** 2)))


# ------------------------------------------------------------------------------
# the systems


def _row(method, system, features, m, fit_seconds, per_iter=np.nan, iterations=np.nan, setting=""):
    return {"method": method, "system": system, "features": features, **m, "fit_seconds": float(fit_seconds),
            "seconds_per_iteration": float(per_iter) if per_iter is not None else np.nan,
            "iterations": iterations, "setting": setting}


def _edge_sgd(table, cfg) -> str:
    best = table[table["chosen"]].iloc[0]
    lrs, regs = sorted(cfg.sgd_learning_rates), sorted(cfg.sgd_regs)
    edge = [f"{n} {v:g}" for n, v, grid in (("eta", best["learning_rate"], lrs), ("lambda", best["reg"], regs))
            if len(grid) > 2 and v in (grid[0], grid[-1])]
    return f", at the edge of the grid in {' and '.join(edge)}" if edge else ""


def _measure(ctx, method, fn) -> dict:
    """The P3 means of ``fn`` on the test split; its per-user table is kept in ctx["per_user"][method]."""
    pu = metrics.p3_metrics(fn, ctx["split"], p=P_AT)
    ctx["per_user"][method] = pu
    return summarize_p3(pu)


def _run_popularity(ctx, side):
    t0 = time.perf_counter()
    fn = metrics.popularity_score_fn(ctx["split"].train)
    secs = time.perf_counter() - t0
    return [_row("popularity", "popularity", "ids", _measure(ctx, "popularity", fn), secs,
                 setting="number of training entries of the item")]


def _run_ease(ctx, side):
    cfg, split = ctx["cfg"], ctx["split"]
    reason = baselines.ease_skip_reason(split.n_items)
    if reason:  # no dense J x J matrix: a row that says why
        nan = {k: np.nan for k in ("precision", "recall", "f_measure", "ndcg", "ndcg_log2k1")}
        return [_row("EASE^R", "ease", "ids", {**nan, "n_users": 0.0}, 0.0, setting=reason)]
    lam, table = tune_ease(split.train, cfg.ease_lambdas, fraction=cfg.validation_fraction, seed=cfg.seed,
                           select_by=cfg.select_by, values=cfg.ease_values)
    ctx["tuning"]["ease"] = table
    t0 = time.perf_counter()
    fn = ease_score_fn(split.train, lam, values=cfg.ease_values)
    secs = time.perf_counter() - t0
    return [_row("EASE^R", "ease", "ids", _measure(ctx, "EASE^R", fn), secs,
                 setting=f"lambda = {lam:g} (best validation {cfg.select_by} of {len(table)}"
                         f"{baselines.grid_edge_note(table['chosen'].to_numpy())}); X {cfg.ease_values}")]


def _run_hpf(ctx, side):
    from custom_inference import hpf as cavi
    from ppl_models.hpf import HPFHyper

    from validation.evaluation.experiments import _hpf_score_fn

    cfg, split = ctx["cfg"], ctx["split"]
    t0 = time.perf_counter()
    fit = cavi.fit(cfg.seed, split.train, cfg.K, HPFHyper(), max_iter=cfg.hpf_max_iter, tol=0.0,
                   dtype=np.dtype(cfg.dtype), n_draws=0, progress=ctx["progress"]).idata
    secs = time.perf_counter() - t0
    return [_row("HPF (CAVI)", "hpf", "ids", _measure(ctx, "HPF (CAVI)", _hpf_score_fn(fit)), secs,
                 secs / cfg.hpf_max_iter, cfg.hpf_max_iter, "a = a' = c = c' = 0.3, b' = d' = 1; tol 0")]


def _run_pfm(variant):
    def run(ctx, side):
        from validation.evaluation import pfm_experiments as pfm_val

        cfg = ctx["cfg"]
        res = pfm_val.evaluate_p3(ctx["df"], variant=variant, K=cfg.K, seed=cfg.seed, num_chains=cfg.pfm_chains,
                                  num_warmup=cfg.pfm_warmup, num_samples=cfg.pfm_samples, thin=cfg.pfm_thin,
                                  side=side, data_dir=ctx["data_dir"], dtype=np.dtype(cfg.dtype),
                                  progress=ctx["progress"], init_scale=cfg.pfm_init_scale)
        warm = -(-cfg.pfm_warmup // cfg.pfm_thin) * cfg.pfm_thin
        iters = warm + cfg.pfm_samples * cfg.pfm_thin
        name = f"{variant}+side" if side else variant
        ctx["extras"][name] = {"n_active_mean": res["n_active_mean"], "seconds_per_sweep": res["seconds_per_sweep"]}
        setting = (f"{cfg.pfm_chains} chain(s) x ({warm} burn-in + {cfg.pfm_samples} kept, thin {cfg.pfm_thin}); "
                   f"mean active factors {res['n_active_mean']:.1f}")
        out = []
        for r in res["table"].to_dict("records"):
            if r["method"] == "popularity":
                continue
            m = {k: float(r[k]) for k in ("precision", "recall", "f_measure", "ndcg", "ndcg_log2k1", "n_users")}
            ctx["per_user"][r["method"]] = res["per_user"][r["method"]]
            out.append(_row(r["method"], variant, "ids+side" if side else "ids", m, res["seconds"],
                            res["seconds_per_sweep"], iters, setting))
        return out

    return run


def _entities(ctx, side):
    key = "side" if side else "ids"
    if key not in ctx["entities"]:
        split = ctx["split"]
        feats = None
        if side:
            from validation.evaluation.pfm_experiments import ml100k_side_features

            feats = ml100k_side_features(split, ctx["data_dir"])
        ctx["entities"][key] = entity_features(split.n_users, split.n_items, feats)
    return ctx["entities"][key]


def _run_mcmc_fm(ctx, side):
    from custom_inference import arviz_io, fm_mcmc
    from ppl_models.fm import FMHierHyper

    cfg, split = ctx["cfg"], ctx["split"]
    ent = _entities(ctx, side)
    dtype = np.dtype(cfg.fm_dtype)
    design = fm_design(split.train, ent, dtype=dtype)
    t0 = time.perf_counter()
    idata = fm_mcmc.sample(cfg.seed, design, cfg.K, FMHierHyper(), num_chains=1, num_warmup=cfg.fm_warmup,
                           num_samples=cfg.fm_samples, keep=("w0", "w", "V"), dtype=dtype, progress=ctx["progress"])
    secs = time.perf_counter() - t0
    post = arviz_io.group_arrays(idata)
    fn = fm_score_fn(post["w0"], post["w"], post["V"], ent)
    tag = "MCMC-FM + side" if side else "MCMC-FM"
    return [_row(tag, "mcmc-fm", "ids+side" if side else "ids", _measure(ctx, tag, fn), secs,
                 idata.posterior.attrs.get("seconds_per_sweep"), cfg.fm_warmup + cfg.fm_samples,
                 f"1 chain x ({cfg.fm_warmup} burn-in + {cfg.fm_samples} kept); Gaussian, observed ratings only")]


def _run_sgd_fm(ctx, side):
    cfg, split = ctx["cfg"], ctx["split"]
    ent = _entities(ctx, side)
    lr, reg, table = tune_sgd_fm(split.train, ent, cfg, progress=ctx["progress"])
    ctx["tuning"]["sgd-fm+side" if side else "sgd-fm"] = table
    t0 = time.perf_counter()
    w0, w, V, epoch_secs = _sgd_fit(split.train, ent, cfg.K, lr, reg, cfg, cfg.seed)
    secs = time.perf_counter() - t0
    fn = fm_score_fn(w0, w, V, ent)
    tag = "SGD-FM + side" if side else "SGD-FM"
    return [_row(tag, "sgd-fm", "ids+side" if side else "ids", _measure(ctx, tag, fn), secs,
                 epoch_secs / cfg.sgd_epochs, cfg.sgd_epochs,
                 f"eta = {lr:g}, lambda_w = lambda_v = {reg:g} (best validation {cfg.select_by} of {len(table)}"
                 f"{_edge_sgd(table, cfg)}); observed ratings only")]


_BASELINE_RUNNERS = {"popularity": _run_popularity, "ease": _run_ease}
#: front-door name -> runner ``(ctx, side) -> rows`` of each solver declaring the "counts" evaluation (which
#: solvers run comes from the declarations; a declared solver without a runner raises MissingDeclaration)
RUNNERS = {"hpf": _run_hpf, "npfm": _run_pfm("npfm"), "ppfm": _run_pfm("ppfm"), "mcmc-fm": _run_mcmc_fm,
           "sgd-fm": _run_sgd_fm}


def _runner(name: str):
    from validation.models import catalog

    if name in _BASELINE_RUNNERS:
        return _BASELINE_RUNNERS[name]
    return catalog.evaluation_runner("counts", name, RUNNERS)


def _resolve_systems(names, side_features: bool) -> list[str]:
    every, side = systems(), side_systems()
    names = list(every) if names is None else [str(s) for s in names]
    valid = list(every) + [f"{s}+side" for s in side]
    unknown = sorted(set(names) - set(valid))
    if unknown:
        raise ValueError(f"systems: unknown {unknown}; choose from {valid}")
    if not names:
        raise ValueError("systems: empty")
    out = []
    for s in names:
        if s not in out:
            out.append(s)
        if side_features and s in side and f"{s}+side" not in out:
            out.append(f"{s}+side")
    return out


def evaluate_counts(df: pd.DataFrame, *, systems=None, K: int = 50, seed: int = 0, side_features: bool = False,
                    config: CountsConfig | None = None, data_dir=None, out_dir=None, progress: bool = True,
                    **settings) -> CountsEvaluation:
    """The thesis's top-N comparison on protocol P3 (module docstring), one table row per method.

    Parameters
    ----------
    df : ratings table (columns user, item, rating[, timestamp]; integer ratings used as counts), as
        `validation.data.datasets.load_movielens` returns; the P3 split permutes its rows in the order given.
    systems : names of `systems` and ``NAME+side`` for NAME in `side_systems` (None: all of `systems`).
    K, seed : latent dimension and seed (they override ``config``'s).
    side_features : also run the ``+side`` variant of every selected system of `side_systems`.
    config : `CountsConfig` (default its defaults); ``settings``: `CountsConfig` fields to override,
        e.g. ``pfm_warmup=100``.
    data_dir : folder with ``u.user`` and ``items.tsv`` / ``u.item`` for the side features (default:
        the search of `validation.data.features`).
    out_dir : write ``report.md`` (the tables and notes) there; None writes nothing.
    progress : progress bars and one line per system on stderr.

    Returns
    -------
    `CountsEvaluation`: ``table`` (method, system, features, precision, recall, f_measure, ndcg,
    ndcg_log2k1, n_users, fit_seconds, seconds_per_iteration, iterations, setting; float64 metrics;
    then the standard errors over test users ``precision_se``, ``recall_se``, ``ndcg_se``,
    ``ndcg_log2k1_se`` and, against the best baseline ``vs`` (popularity or EASE^R, by precision@100),
    ``diff``, ``ci_low``, ``ci_high`` (95 % paired bootstrap interval of the precision@100 difference,
    `validation.evaluation.intervals`) and ``verdict``), ``tuning`` ("ease", "sgd-fm", "sgd-fm+side":
    the validation-split searches), ``notes``, ``report``, ``extras``, ``per_user``, ``differences``.

    Raises
    ------
    ValueError: unknown systems or settings, bad settings (`CountsConfig`), a bad ratings table or
    non-integer ratings (`validation.data.datasets.split_random_holdout`), missing side files for a
    ``+side`` system; what the solvers raise propagates (ValueError for bad input,
    FloatingPointError for a non-finite HPF ELBO), and OSError writing the report; MissingDeclaration for a
    solver that declares the "counts" evaluation without a runner here (`RUNNERS`).

    Source: ``004_90693a0965f06816.txt`` sec. 5.4 (the comparison of fig. 5.3; protocol and metrics
    sec. 5.4.4, eqs. 5.21-5.28); HPF ``001_30a2018ec18c20b9.txt``; EASE^R Steck 2019; the tuning on a
    validation split of the training data is a project addition.
    """
    known = {f.name for f in fields(CountsConfig)}
    bad = sorted(set(settings) - known)
    if bad:
        raise ValueError(f"unknown settings {bad}; CountsConfig has {sorted(known)}")
    cfg = replace(config or CountsConfig(), K=K, seed=seed, **settings)
    names = _resolve_systems(systems, side_features)
    split = datasets.split_random_holdout(df, seed=cfg.seed, row_order="input")
    ctx = {"cfg": cfg, "split": split, "df": df, "data_dir": data_dir, "progress": progress, "tuning": {},
           "extras": {}, "entities": {}, "per_user": {}}
    rows = []
    for name in names:
        base, side = name.split("+")[0], name.endswith("+side")
        if progress:
            print(f"  {name}: fitting ...", file=sys.stderr, flush=True)
        out = _runner(base)(ctx, side)
        rows += out
        if progress:
            for r in out:
                print(f"  {r['method']:38s} P@100 {r['precision']:.4f}  R@100 {r['recall']:.4f}  "
                      f"NDCG {r['ndcg']:.4f}  {r['fit_seconds']:.1f} s", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    comparison = intervals.compare(ctx["per_user"], _INTERVAL_METRICS, main=MAIN_METRIC,
                                   baselines=("popularity", "EASE^R"))
    table = intervals.annotate(table, comparison, system_col="method")
    tr, te = split.train, split.test
    notes = [f"P3, seed {cfg.seed}: {tr.nnz} training and {te.nnz} test ratings, I = {split.n_users}, "
             f"J = {split.n_items}; top P = {P_AT}; {int(table['n_users'].iloc[0])} test users",
             f"K = {cfg.K}; NPFM/PPFM/HPF in {cfg.dtype}, MCMC-FM/SGD-FM in {cfg.fm_dtype}",
             f"tuning: validation split = {cfg.validation_fraction:g} of the training entries (seed ({cfg.seed}, 1)), "
             f"criterion validation {cfg.select_by}@{P_AT}; the test split is never used",
             f"EASE^R searched lambda in {list(cfg.ease_lambdas)} (X {cfg.ease_values})",
             f"SGD-FM searched eta in {list(cfg.sgd_learning_rates)} x lambda_w = lambda_v in {list(cfg.sgd_regs)}, "
             f"{cfg.sgd_epochs} epochs, batch {cfg.sgd_batch_size}",
             "fit_seconds: the final fit (compilation included), tuning excluded; NPFM/PPFM: sampling only",
             comparison.note() + f"; diff / ci_low / ci_high / verdict: {MAIN_METRIC}@{P_AT}"]
    report = None
    if out_dir is not None:
        from validation.checks.report import evaluation_report

        tables = {f"P3 top-{P_AT} (test split)": table.drop(columns=["system"]),
                  f"Differences against {comparison.best_baseline} (paired bootstrap over test users)":
                      comparison.differences}
        titles = {"ease": "EASE^R: lambda on the validation split of the training data",
                  "sgd-fm": "SGD-FM: (eta, lambda) on the validation split of the training data",
                  "sgd-fm+side": "SGD-FM + side: (eta, lambda) on the validation split of the training data"}
        for k, t in ctx["tuning"].items():
            tables[titles[k]] = t
        report = evaluation_report(tables, None, out_dir, title="Top-N from counts on MovieLens: protocol P3",
                                   notes=notes)
    return CountsEvaluation(table=table, tuning=ctx["tuning"], notes=notes, report=report, extras=ctx["extras"],
                            per_user=ctx["per_user"], differences=comparison.differences)
