"""The factorization machines' parts of the held-out evaluations: MCMC-FM (`validation.models.fm_mcmc`), VBFM,
OVBFM and SGD-FM (`validation.models.vbfm`) declare these runners in their ``SolverSpec.evaluations``.

Each runner fits its solver with the evaluation's settings and returns what the evaluation's runner contract
asks for (predictions, a score function, the setting's text); the evaluation measures them
(`validation.evaluation.ratings_eval`: the RMSE curves and intervals). Nothing here imports the
evaluation layer: what a runner needs from it (the metric) comes in its ``run`` argument.

Source: ``004_90693a0965f06816.txt`` ch. 4 (VBFM, OVBFM vs MCMC-FM and SGD-FM, fig. 4.2); the runner
interface is a project addition (issue 25).
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import scipy.sparse as sp

from custom_inference import arviz_io, fm_mcmc, fm_sgd, vbfm, vi_driver
from custom_inference.data import Observations
from custom_inference.fm_design import FMDesign
from ppl_models.fm import FMFlatHyper, FMHierHyper

__all__ = ["ratings_mcmc_fm", "ratings_vbfm", "ratings_ovbfm", "ratings_sgd_fm", "gibbs_setting", "ratings_setting_vbfm",
           "ratings_setting_ovbfm", "ratings_setting_sgd_fm", "entity_features", "fm_design", "fm_score_fn", "fm_rmse",
           "tune_sgd_fm", "counts_mcmc_fm", "counts_sgd_fm", "counts_setting_sgd_fm"]


# ------------------------------------------------------------------------------
# protocol P2 (validation.evaluation.ratings_eval): runner(designs, K, run) -> (iterations, seconds, rmse,
# seconds per iteration, final prediction); designs = (train, test) FM designs of the P2 split


def ratings_mcmc_fm(designs, K: int, run):
    """MCMC-FM on P2: one chain of ``warmup`` + ``samples`` sweeps, the kept draws' predictions averaged.

    `custom_inference.fm_mcmc.sample` with the hierarchical prior; the prediction of each kept draw at the test
    rows, averaged as the samples come (``run.gibbs_curve``).

    Parameters
    ----------
    designs : tuple of custom_inference.fm_design.FMDesign
        (train, test) FM designs of the P2 split (`validation.data.datasets.fm_features`), test rows in the order
        of the test ratings.
    K : int
        Rank.
    run : validation.evaluation.ratings_eval.RatingsRun
        The evaluation's context: ``config`` (`RatingsConfig`), ``settings`` (this runner's, declared in its
        ``EvaluationEntry.defaults``), ``key``, ``progress``, ``rmse(pred, truth)`` and
        ``gibbs_curve(per_draw, truth, warmup, per_sweep)``.

    Returns
    -------
    tuple
        (iterations (n,) int, seconds (n,) cumulative, RMSE (n,), seconds per iteration (float), final prediction
        (M,) float64): the ratings runner contract.

    Raises
    ------
    ValueError
        What `custom_inference.fm_mcmc.sample` raises for bad data or settings.

    Source: ``004_90693a0965f06816.txt`` sec. 2.5 (MCMC-FM), eq. 2.16 (the average over draws).
    """
    train, test = designs
    cfg, s = run.config, run.settings
    dtype = np.dtype(cfg.dtype)
    idata = fm_mcmc.sample(run.key, train, K, FMHierHyper(), num_chains=1, num_warmup=s["warmup"],
                           num_samples=s["samples"], progress=run.progress, dtype=dtype, keep=("w0", "w", "V"))
    post = arviz_io.group_arrays(idata)
    with jax.enable_x64(dtype == np.float64):
        args = (jnp.asarray(test.rows), jnp.asarray(test.cols), jnp.asarray(test.values, dtype))
        pred = jax.jit(jax.vmap(lambda w0, w, V: fm_mcmc.fm_mean(w0, w, V, *args, test.n_rows)[0]))
        per_draw = np.asarray(pred(post["w0"][0], post["w"][0], post["V"][0]))
    per_sweep = float(idata.posterior.attrs["seconds_per_sweep"])
    return run.gibbs_curve(per_draw, np.asarray(test.y, float), s["warmup"], per_sweep)


def _vi_loop(state, sweep, n_iter, test, tol, run, desc):
    """Runs ``sweep(state, i) -> (state, info)`` (`custom_inference.vi_driver.run`: stops when a reported
    relative ELBO change < tol, raises on a non-finite ELBO) with the test RMSE (``run.rmse``) after each sweep.

    Returns (iterations (n,), cumulative seconds (n,), RMSE (n,), seconds per iteration, the last
    sweep's prediction (M,)): seconds count the sweeps only, the first (compiling) one at the rate
    measured on the others.
    """
    truth = np.asarray(test.y, float)
    rm, last = [], {}

    def score(i, s, info):
        mean, _ = vbfm.predict(s, test, noise=False)
        last["pred"] = np.asarray(mean, np.float64)
        rm.append(run.rmse(mean, truth))

    res = vi_driver.run(sweep, state, max_iter=n_iter, tol=tol, progress=run.progress, desc=desc, callback=score)
    per = res.seconds_per_iter
    secs = np.cumsum(res.sweep_seconds) - res.sweep_seconds[0] + per  # the compiling sweep at the measured rate
    return np.arange(1, res.n_iter + 1), secs, np.asarray(rm), per, last["pred"]


def ratings_vbfm(designs, K: int, run):
    """VBFM (CAVI, `custom_inference.vbfm.step`) on P2: at most ``max_iter`` sweeps, stopping at ``tol``.

    Stops when the relative ELBO change < ``tol`` (``run.settings``); the curve is the RMSE (``run.rmse``) of the mean of q
    (eq. 4.22) after each sweep.

    Parameters
    ----------
    designs : tuple of custom_inference.fm_design.FMDesign
        (train, test) FM designs of the P2 split (`validation.data.datasets.fm_features`), test rows in the order
        of the test ratings.
    K : int
        Rank.
    run : validation.evaluation.ratings_eval.RatingsRun
        The evaluation's context: ``config`` (`RatingsConfig`), ``settings`` (this runner's, declared in its
        ``EvaluationEntry.defaults``), ``key``, ``progress``, ``rmse(pred, truth)`` and
        ``gibbs_curve(per_draw, truth, warmup, per_sweep)``.

    Returns
    -------
    tuple
        (iterations (n,) int, seconds (n,) cumulative, RMSE (n,), seconds per iteration (float), final prediction
        (M,) float64): the ratings runner contract.

    Raises
    ------
    FloatingPointError
        From `custom_inference.vi_driver.run` for a non-finite ELBO.

    Source: ``004_90693a0965f06816.txt`` Algorithm 3, eq. 4.22.
    """
    train, test = designs
    cfg = run.config
    with jax.enable_x64(cfg.dtype == "float64"):
        d = jax.tree_util.tree_map(jnp.asarray, train)
        state = vbfm.init(run.key, d, K, FMFlatHyper())
        return _vi_loop(state, lambda s, i: vbfm.step(None, s, d), run.settings["max_iter"], test,
                        run.settings["tol"], run, f"VBFM (K={K})")


def ratings_ovbfm(designs, K: int, run):
    """OVBFM (stochastic VI, `custom_inference.vbfm.svi_step`) on P2: ``epochs`` epochs of minibatches.

    ``batches`` minibatches an epoch (drawn with ``numpy.random.default_rng(seed)``), step sizes
    (1 + t)^-``lam`` (``run.settings``); the curve is the RMSE of the mean of q after each epoch.

    Parameters
    ----------
    designs : tuple of custom_inference.fm_design.FMDesign
        (train, test) FM designs of the P2 split (`validation.data.datasets.fm_features`), test rows in the order
        of the test ratings.
    K : int
        Rank.
    run : validation.evaluation.ratings_eval.RatingsRun
        The evaluation's context: ``config`` (`RatingsConfig`), ``settings`` (this runner's, declared in its
        ``EvaluationEntry.defaults``), ``key``, ``progress``, ``rmse(pred, truth)`` and
        ``gibbs_curve(per_draw, truth, warmup, per_sweep)``.

    Returns
    -------
    tuple
        (iterations (n,) int, seconds (n,) cumulative, RMSE (n,), seconds per iteration (float), final prediction
        (M,) float64): the ratings runner contract.

    Raises
    ------
    ValueError
        What `custom_inference.vbfm.svi_step` / `custom_inference.vbfm.make_batches` raise for bad settings.

    Source: ``004_90693a0965f06816.txt`` Algorithm 4, eq. 4.22.
    """
    train, test = designs
    cfg, st = run.config, run.settings
    rng = np.random.default_rng(cfg.seed)
    with jax.enable_x64(cfg.dtype == "float64"):
        d = jax.tree_util.tree_map(jnp.asarray, train)
        state = vbfm.init(run.key, d, K, FMFlatHyper())
        counter = [0]

        def epoch(s, i):
            for b in vbfm.make_batches(rng, train, st["batches"]):
                s, _ = vbfm.svi_step(None, s, d, None, b, counter[0], lam=st["lam"])
                counter[0] += 1
            return s, None  # no ELBO: runs all epochs

        return _vi_loop(state, epoch, st["epochs"], test, 0.0, run, f"OVBFM (K={K})")


def ratings_sgd_fm(designs, K: int, run):
    """SGD-FM (`custom_inference.fm_sgd.fit`, Algorithm 1) on P2: ``epochs`` epochs.

    Learning rate ``learning_rate``, penalty ``reg`` = (lambda_0, lambda_w, lambda_v) (``run.settings``); the curve is the solver's test RMSE after each epoch.

    Parameters
    ----------
    designs : tuple of custom_inference.fm_design.FMDesign
        (train, test) FM designs of the P2 split (`validation.data.datasets.fm_features`), test rows in the order
        of the test ratings.
    K : int
        Rank.
    run : validation.evaluation.ratings_eval.RatingsRun
        The evaluation's context: ``config`` (`RatingsConfig`), ``settings`` (this runner's, declared in its
        ``EvaluationEntry.defaults``), ``key``, ``progress``, ``rmse(pred, truth)`` and
        ``gibbs_curve(per_draw, truth, warmup, per_sweep)``.

    Returns
    -------
    tuple
        (iterations (n,) int, seconds (n,) cumulative, RMSE (n,), seconds per iteration (float), final prediction
        (M,) float64): the ratings runner contract.

    Raises
    ------
    ValueError
        What `custom_inference.fm_sgd.fit` raises for bad data or settings.

    Source: ``004_90693a0965f06816.txt`` Algorithm 1.
    """
    train, test = designs
    cfg, s = run.config, run.settings
    epochs = s["epochs"]
    res = fm_sgd.fit(run.key, train, K, fm_sgd.SGDReg(*s["reg"]), learning_rate=s["learning_rate"], n_epochs=epochs,
                     dtype=np.dtype(cfg.dtype), test=test)
    per = res.idata.sgd_trace.attrs["seconds"] / epochs
    it = np.arange(1, epochs + 1)
    with jax.enable_x64(cfg.dtype == "float64"):
        pred = np.asarray(fm_sgd.predict(res.state, test), np.float64)
    return it, it * per, np.asarray(res.idata.sgd_trace["test_rmse"], float), per, pred


def gibbs_setting(label: str):
    """The settings text of a Gibbs runner of the ratings evaluation (SBMF, BPMF, MCMC-FM), for its notes.

    Declared as ``lazy("validation.models.fm_eval:gibbs_setting", "SBMF")`` (``EvaluationEntry.setting``).

    Parameters
    ----------
    label : str
        The solver's name in the notes (e.g. "SBMF").

    Returns
    -------
    callable
        ``setting(settings) -> str``: "LABEL: W warmup + S kept sweeps (one chain)" from the runner's ``warmup`` and
        ``samples``; it raises KeyError for settings without them.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    return lambda s: f"{label}: {s['warmup']} warmup + {s['samples']} kept sweeps (one chain)"


def ratings_setting_vbfm(settings) -> str:
    """VBFM's settings in the ratings notes.

    Parameters
    ----------
    settings : mapping
        The runner's settings (``max_iter``, ``tol``).

    Returns
    -------
    str

    Raises
    ------
    KeyError
        For settings without the names it reads.

    Source: project addition.
    """
    return f"VBFM: at most {settings['max_iter']} sweeps, tol {settings['tol']:g}"


def ratings_setting_ovbfm(settings) -> str:
    """OVBFM's settings in the ratings notes.

    Parameters
    ----------
    settings : mapping
        The runner's settings (``epochs``, ``batches``, ``lam``).

    Returns
    -------
    str

    Raises
    ------
    KeyError
        For settings without the names it reads.

    Source: project addition.
    """
    return f"OVBFM: {settings['epochs']} epochs x {settings['batches']} minibatches, (1 + t)^-{settings['lam']}"


def ratings_setting_sgd_fm(settings) -> str:
    """SGD-FM's settings in the ratings notes.

    Parameters
    ----------
    settings : mapping
        The runner's settings (``epochs``, ``learning_rate``, ``reg`` = (lambda_0, lambda_w, lambda_v)).

    Returns
    -------
    str

    Raises
    ------
    KeyError
        For settings without the names it reads.
    TypeError
        A ``reg`` that is not three numbers.

    Source: project addition.
    """
    return (f"SGD-FM: {settings['epochs']} epochs, eta {settings['learning_rate']:g}, "
            f"{fm_sgd.SGDReg(*settings['reg'])}")


# ------------------------------------------------------------------------------
# protocol P3, top-100 from counts (validation.evaluation.counts_eval): runner(run, side) -> [fit dict]; the FM
# design of an entry x_(u,i) = a_u + b_i, its score function over all items, and SGD-FM's tuning


def entity_features(n_users: int, n_items: int, side=None):
    """User and item feature rows of the FM design x_(u,i) = a_u + b_i (thesis eq. 2.17, fig. 2.1).

    Columns: user one-hot (I), item one-hot (J), then the user side features and the item side features.

    Parameters
    ----------
    n_users, n_items : int
        I and J.
    side : tuple or None
        None (ids only) or the tuple of `validation.evaluation.pfm_experiments.ml100k_side_features`
        (user_features (I, D_u) csr, user_groups (D_u,) int, item_features (J, D_v) csr, item_groups (D_v,) int,
        names).

    Returns
    -------
    tuple
        (A csr float64 (I, D), B csr float64 (J, D), group int64 (D,), group_names tuple of str): groups user 0,
        item 1, then one per side-feature group (ML-100K: age, gender, occupation, genre).

    Raises
    ------
    ValueError
        When the side matrices do not have I / J rows.

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

    Parameters
    ----------
    obs : custom_inference.data.Observations
        (I, J) with N entries.
    entities : tuple
        The tuple of `entity_features`.
    dtype : numpy dtype
        Of the design.

    Returns
    -------
    custom_inference.fm_design.FMDesign
        N rows, D columns.

    Raises
    ------
    ValueError
        As `FMDesign.from_scipy` (e.g. an empty ``obs``).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17 (design of the observed entries, as the thesis's Gaussian FMs
    use it); project addition.
    """
    A, B, group, names = entities
    u, i = np.asarray(obs.rows), np.asarray(obs.cols)
    X = A[u] + B[i]
    return FMDesign.from_scipy(X, np.asarray(obs.values, np.float64), group, group_names=names, dtype=dtype)


def fm_score_fn(w0, w, V, entities):
    """Score function of a factorization machine averaged over draws, for all items at once.

    For x = a_u + b_i the FM rate splits into entity terms: yhat = w0 + <a_u, w> + <b_i, w> + <Q_u, Q_i> + P_u + P_i
    with Q = A V (K,) and P_u = 1/2 sum_k (Q_uk^2 - sum_l a_ul^2 v_lk^2). The mean over draws of <Q_u, Q_i> is one
    product of the draws' Q concatenated along the factor axis, divided by S, so a block of users costs
    O(B J S K) without an I x J array.

    Parameters
    ----------
    w0 : array_like, (S,)
        Global biases of S draws (S = 1 for a point estimate).
    w : array_like, (S, D)
        Feature weights.
    V : array_like, (S, D, K)
        Factors.
    entities : tuple
        From `entity_features`.

    Returns
    -------
    callable
        ``score_fn(users (B,) int) -> (B, J) float64``.

    Raises
    ------
    ValueError
        When the shapes of w0, w, V and the design disagree.

    Source: ``004_90693a0965f06816.txt`` eq. 2.17 (computed as eq. 4.22), averaged over draws as eq. 2.16; the
    entity split is a project addition.
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


def _sgd_fit(obs, entities, K, lr, reg, cfg, settings, seed):
    design = fm_design(obs, entities, dtype=np.dtype(cfg.fm_dtype))
    res = fm_sgd.fit(seed, design, K, fm_sgd.SGDReg(lambda_0=0.0, lambda_w=reg, lambda_v=reg), learning_rate=lr,
                     n_epochs=settings["epochs"], batch_size=settings["batch_size"], dtype=np.dtype(cfg.fm_dtype))
    p = res.state
    return (np.asarray(p.w0)[None], np.asarray(p.w)[None], np.asarray(p.V)[None],
            float(res.idata.sgd_trace.attrs["seconds"]))


def tune_sgd_fm(train: Observations, entities, config, settings, *, validation_split, ranking_metrics,
                progress: bool = False):
    """Choose SGD-FM's learning rate and L2 constant on a validation split of the TRAINING entries.

    Grid: ``settings["learning_rates"]`` x ``settings["regs"]`` (lambda_w = lambda_v = reg, lambda_0 = 0),
    ``settings["epochs"]`` epochs of minibatches of ``settings["batch_size"]``, K = ``config.K``; each setting is fitted on the inner training entries of
    ``validation_split`` (``config.validation_fraction``, ``config.seed``) and scored on the validation entries
    (``ranking_metrics``); the largest ``config.select_by`` wins (ties: the first). The validation RMSE of the
    ratings is reported too (not used).

    Parameters
    ----------
    train : custom_inference.data.Observations
        (I, J) training entries; the test split is not an argument.
    entities : tuple
        From `entity_features`.
    config : validation.evaluation.counts_eval.CountsConfig
        The evaluation's config, read by attribute (K, seed, validation_fraction, select_by, fm_dtype).
    settings : mapping
        SGD-FM's counts settings (declared in `validation.models.vbfm.SPEC`): learning_rates (non-empty, each
        > 0), regs (non-empty, each >= 0), epochs, batch_size.
    validation_split : callable
        ``validation_split(train, *, fraction, seed) -> HoldoutSplit`` (the evaluation's,
        `validation.evaluation.counts_eval.validation_split`).
    ranking_metrics : callable
        ``ranking_metrics(score_fn, split) -> dict`` (`validation.evaluation.counts_eval.ranking_metrics`).
    progress : bool
        One line per setting on stderr.

    Returns
    -------
    tuple
        (learning_rate float, reg float, DataFrame: learning_rate, reg, precision, recall, f_measure, ndcg,
        ndcg_log2k1, n_users, val_rmse, seconds, chosen).

    Raises
    ------
    ValueError
        An empty grid, a learning rate <= 0 or an L2 constant < 0 (or not finite); as ``validation_split``,
        `fm_design` and `custom_inference.fm_sgd.fit`.

    Source: ``004_90693a0965f06816.txt`` sec. 5.4.3 ("learning rate and regularization ... chosen by cross
    validation"); the search here is a project addition (issue 13, "fair baselines").
    """
    lrs, regs = tuple(settings["learning_rates"]), tuple(settings["regs"])
    if not lrs or not regs or not all(np.isfinite(lrs + regs)) or min(lrs) <= 0 or min(regs) < 0:
        raise ValueError(f"SGD-FM learning_rates {lrs!r} and regs {regs!r}: need non-empty grids of finite numbers, "
                         "learning rates > 0 and L2 constants >= 0")
    vs = validation_split(train, fraction=config.validation_fraction, seed=config.seed)
    vu, vi, vy = np.asarray(vs.test.rows), np.asarray(vs.test.cols), np.asarray(vs.test.values, np.float64)
    rows = []
    for lr in lrs:
        for reg in regs:
            t0 = time.perf_counter()
            w0, w, V, _ = _sgd_fit(vs.train, entities, config.K, float(lr), float(reg), config, settings, config.seed)
            fn = fm_score_fn(w0, w, V, entities)
            m = ranking_metrics(fn, vs)
            rm = fm_rmse(w0, w, V, entities, vu, vi, vy)
            rows.append({"learning_rate": float(lr), "reg": float(reg), **m, "val_rmse": rm,
                         "seconds": time.perf_counter() - t0})
            if progress:
                print(f"    sgd-fm eta={lr:g} reg={reg:g}: validation {config.select_by} "
                      f"{m[config.select_by]:.4f}, RMSE {rm:.4f}", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    best = int(np.argmax(table[config.select_by].to_numpy()))
    table["chosen"] = np.arange(len(table)) == best
    return float(table["learning_rate"].iloc[best]), float(table["reg"].iloc[best]), table


def fm_rmse(w0, w, V, entities, u, i, y) -> float:
    """RMSE of the FM prediction (mean over draws) at entries ``u``, ``i`` against ``y``.

    Parameters
    ----------
    w0, w, V : array_like
        (S,), (S, D), (S, D, K), as `fm_score_fn`.
    entities : tuple
        From `entity_features`.
    u, i : ndarray, (n,) int
        Rows and columns of the entries.
    y : ndarray, (n,)
        Their values.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For shapes that do not fit the design (SciPy / NumPy).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17; project addition (the validation RMSE beside the tuning).
    """
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


def _edge_sgd(table, settings) -> str:
    best = table[table["chosen"]].iloc[0]
    lrs, regs = sorted(settings["learning_rates"]), sorted(settings["regs"])
    edge = [f"{n} {v:g}" for n, v, grid in (("eta", best["learning_rate"], lrs), ("lambda", best["reg"], regs))
            if len(grid) > 2 and v in (grid[0], grid[-1])]
    return f", at the edge of the grid in {' and '.join(edge)}" if edge else ""


def _entities(run, side):
    """`entity_features` of the P3 split (with the evaluation's side features when ``side``), shared by the FM
    runners of one evaluation through ``run.cache``."""
    key = "fm entities+side" if side else "fm entities"
    if key not in run.cache:
        split = run.split
        run.cache[key] = entity_features(split.n_users, split.n_items, run.side_features() if side else None)
    return run.cache[key]


def counts_mcmc_fm(run, side: bool):
    """MCMC-FM on protocol P3: the Gaussian FM on the observed training ratings, averaged over kept draws.

    As in the thesis, trained on the observed training ratings only (hierarchical prior), one chain of
    ``warmup`` + ``samples`` sweeps (``run.settings``, declared in `validation.models.fm_mcmc.SPEC`); score: the predicted rating averaged over the kept draws
    (`fm_score_fn`), for every candidate.

    Parameters
    ----------
    run : validation.evaluation.counts_eval.CountsRun
        The evaluation's context: ``config`` (`CountsConfig`), ``settings`` (this runner's, declared in its
        ``EvaluationEntry.defaults``), ``split`` (the P3 split), ``progress``, ``cache``, ``side_features()``,
        ``validation_split``, ``ranking_metrics``.
    side : bool
        Add the MovieLens side features as further FM feature groups.

    Returns
    -------
    list of dict
        One fit dict (method, score_fn ``users (B,) int -> (B, J)``, fit_seconds, seconds_per_iteration,
        iterations, setting): the counts runner contract.

    Raises
    ------
    ValueError
        What `custom_inference.fm_mcmc.sample` raises; with ``side``, what ``run.side_features`` raises (missing
        side files).

    Source: ``004_90693a0965f06816.txt`` sec. 5.4 (MCMC-FM in fig. 5.3), eq. 2.16.
    """
    cfg, split, s = run.config, run.split, run.settings
    ent = _entities(run, side)
    dtype = np.dtype(cfg.fm_dtype)
    design = fm_design(split.train, ent, dtype=dtype)
    t0 = time.perf_counter()
    idata = fm_mcmc.sample(cfg.seed, design, cfg.K, FMHierHyper(), num_chains=1, num_warmup=s["warmup"],
                           num_samples=s["samples"], keep=("w0", "w", "V"), dtype=dtype, progress=run.progress)
    secs = time.perf_counter() - t0
    post = arviz_io.group_arrays(idata)
    fn = fm_score_fn(post["w0"], post["w"], post["V"], ent)
    tag = "MCMC-FM + side" if side else "MCMC-FM"
    return [{"method": tag, "score_fn": fn, "fit_seconds": secs,
             "seconds_per_iteration": idata.posterior.attrs.get("seconds_per_sweep"),
             "iterations": s["warmup"] + s["samples"],
             "setting": f"1 chain x ({s['warmup']} burn-in + {s['samples']} kept); Gaussian, observed ratings only"}]


def counts_sgd_fm(run, side: bool):
    """SGD-FM on protocol P3: Algorithm 1 on the observed training ratings, its settings tuned first.

    Learning rate and L2 constant chosen by `tune_sgd_fm` on the validation split of the training entries (the
    evaluation's ``run.validation_split`` and ``run.ranking_metrics``), then refitted on all training entries.

    Parameters
    ----------
    run : validation.evaluation.counts_eval.CountsRun
        The evaluation's context: ``config`` (`CountsConfig`), ``settings`` (this runner's, declared in its
        ``EvaluationEntry.defaults``), ``split`` (the P3 split), ``progress``, ``cache``, ``side_features()``,
        ``validation_split``, ``ranking_metrics``.
    side : bool
        Add the MovieLens side features as further FM feature groups.

    Returns
    -------
    list of dict
        One fit dict (method, score_fn ``users (B,) int -> (B, J)``, fit_seconds, seconds_per_iteration,
        iterations, setting, tuning: the search's table, tuned: what it chose): the counts runner contract.

    Raises
    ------
    ValueError
        What `tune_sgd_fm` and `custom_inference.fm_sgd.fit` raise; with ``side``, what ``run.side_features``
        raises.

    Source: ``004_90693a0965f06816.txt`` sec. 5.4.3 and Algorithm 1; the search is a project addition.
    """
    cfg, split, s = run.config, run.split, run.settings
    ent = _entities(run, side)
    lr, reg, table = tune_sgd_fm(split.train, ent, cfg, s, validation_split=run.validation_split,
                                 ranking_metrics=run.ranking_metrics, progress=run.progress)
    t0 = time.perf_counter()
    w0, w, V, epoch_secs = _sgd_fit(split.train, ent, cfg.K, lr, reg, cfg, s, cfg.seed)
    secs = time.perf_counter() - t0
    fn = fm_score_fn(w0, w, V, ent)
    tag = "SGD-FM + side" if side else "SGD-FM"
    return [{"method": tag, "score_fn": fn, "fit_seconds": secs, "seconds_per_iteration": epoch_secs / s["epochs"],
             "iterations": s["epochs"], "tuning": table, "tuned": "(eta, lambda)",
             "setting": f"eta = {lr:g}, lambda_w = lambda_v = {reg:g} (best validation {cfg.select_by} of {len(table)}"
                        f"{_edge_sgd(table, s)}); observed ratings only"}]


def counts_setting_sgd_fm(settings) -> str:
    """SGD-FM's search in the counts notes.

    Parameters
    ----------
    settings : mapping
        SGD-FM's counts settings (learning_rates, regs, epochs, batch_size).

    Returns
    -------
    str

    Raises
    ------
    KeyError
        For settings without the names it reads.

    Source: project addition.
    """
    return (f"SGD-FM searched eta in {list(settings['learning_rates'])} x lambda_w = lambda_v in "
            f"{list(settings['regs'])}, {settings['epochs']} epochs, batch {settings['batch_size']}")
