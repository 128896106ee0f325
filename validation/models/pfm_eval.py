"""NPFM / PPFM's part of the held-out evaluations: the fit on protocol P3 and its two score functions
(`p3_scores`), and the runners NPFM and PPFM declare for the counts evaluation (`counts_runner`). The
evaluation measures what they return (`validation.evaluation.counts_eval`,
`validation.evaluation.pfm_experiments.evaluate_p3`); nothing here imports the evaluation layer.

Source: ``004_90693a0965f06816.txt`` secs. 5.3.4 and 5.4.4; the runner interface is a project addition (issue 25).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from custom_inference import arviz_io
from custom_inference import pfm
from ppl_models import pfm as ppl

__all__ = ["p3_scores", "counts_runner"]


def p3_scores(split, *, variant: str = "npfm", K: int = 50, seed: int = 0, num_chains: int = 1, num_warmup: int = 300,
              num_samples: int = 100, thin: int = 2, hyper=ppl.PFMHyper(), side_features=None, dtype=np.float32,
              progress: bool = False, init_scale: float = 1.0) -> dict:
    """NPFM / PPFM fitted on a P3 split's training matrix, and its two ranking scores.

    Training rows are ALL user-item cells of the training matrix (unrated cells, the held-out ones included,
    are y = 0): treating the held-out cells as missing (ch. 5.3.4) would tell the sampler which cells were
    rated. The methods are labelled ``VARIANT`` (upper case), with `` + side`` when side features are given.

    Parameters
    ----------
    split : validation.data.splits.HoldoutSplit
        The P3 split; its ``train`` (I, J) counts are fitted.
    variant : {"npfm", "ppfm"}
        The model.
    K : int
        Latent dimension (NPFM's truncation level).
    seed : int
        Seed of `custom_inference.pfm.sample`.
    num_chains, num_warmup, num_samples, thin : int
        Chains, sweeps discarded, draws kept, one kept every ``thin`` sweeps.
    hyper : ppl_models.pfm.PFMHyper
        Hyperparameters.
    side_features : tuple or None
        (user_features (I, D_u), user_groups, item_features (J, D_v), item_groups, names) of
        `validation.evaluation.pfm_experiments.ml100k_side_features`, added as FM feature groups; None: ids only.
    dtype : numpy dtype
        Of the sampler.
    progress : bool
        Progress bars.
    init_scale : float
        Initial scale of the factors.

    Returns
    -------
    dict
        ``score_fns`` (method -> ``score_fn(users (B,) int) -> (B, J) float64``: "LABEL (posterior-mean rate)",
        the rate of every cell averaged draw by draw, and "LABEL (plug-in, sec. 5.3.4)", the thesis's rate at
        the posterior-mean parameters), ``n_active_mean`` (float), ``seconds`` (sampling wall time),
        ``seconds_per_sweep``, ``idata``.

    Raises
    ------
    ValueError
        From `custom_inference.pfm.sample` or `custom_inference.pfm.PFMData` on bad data, sizes or settings.

    Source: ``004_90693a0965f06816.txt`` secs. 5.3.4 (plug-in rate) and 5.4.4 (P3).
    """
    tr = split.train
    I, J = tr.n_rows, tr.n_cols
    Y = sp.csr_matrix((np.asarray(tr.values), (np.asarray(tr.rows), np.asarray(tr.cols))), shape=(I, J))
    kw = {}
    if side_features is not None:
        Uf, ug, Vf, ig, names = side_features
        kw = dict(user_features=Uf, user_groups=ug, item_features=Vf, item_groups=ig, group_names=names)
    data = pfm.PFMData.from_matrix(Y, zeros="all", dtype=dtype, **kw)
    start = time.perf_counter()
    idata = pfm.sample(seed, data, K, hyper, variant=variant, num_chains=num_chains, num_warmup=num_warmup,
                       num_samples=num_samples, thin=thin, keep=("w0", "w", "V") + (("r",) if variant == "npfm" else ()),
                       dtype=dtype, progress=progress, init_scale=init_scale)
    seconds = time.perf_counter() - start
    post = arviz_io.group_arrays(idata)
    S = post["w0"].shape[0] * post["w0"].shape[1]
    w0 = post["w0"].reshape(S).astype(np.float64)
    w = post["w"].reshape(S, -1).astype(np.float64)
    V = post["V"].reshape(S, -1, K).astype(np.float64)
    r = post["r"].reshape(S, K).astype(np.float64) if variant == "npfm" else np.ones((S, K))
    ef, ev = np.asarray(data.ent_feat), np.asarray(data.ent_val, np.float64)

    def entity_terms(wd, Vd):
        u = ev[..., None] * Vd[ef]  # (E, Fe, K)
        Q = u.sum(1)
        P = np.sum(u * (np.cumsum(u, axis=1) - u), axis=1)
        lin = np.sum(ev * wd[ef], axis=1)
        return Q, P, lin

    terms = [entity_terms(w[s], V[s]) for s in range(S)]

    def scores_from(w0s, rs, Q, P, lin, users):
        Qu, Qi = Q[users], Q[I:]
        return (w0s + lin[users][:, None] + lin[I:][None, :] + (Qu * rs) @ Qi.T + (P[users] @ rs)[:, None]
                + (P[I:] @ rs)[None, :])

    def mean_scores(users):
        out = np.zeros((users.size, J))
        for s in range(S):
            out += scores_from(w0[s], r[s], *terms[s], users)
        return out / S

    plug = entity_terms(w.mean(0), V.mean(0))

    def plugin_scores(users):
        return scores_from(w0.mean(), r.mean(0), *plug, users)

    tag = f"{variant.upper()}{' + side' if side_features is not None else ''}"
    act = np.asarray(idata.sample_stats["n_active"]).ravel()
    return {"score_fns": {f"{tag} (posterior-mean rate)": mean_scores, f"{tag} (plug-in, sec. 5.3.4)": plugin_scores},
            "n_active_mean": float(act.mean()), "seconds": seconds,
            "seconds_per_sweep": idata.posterior.attrs.get("seconds_per_sweep"), "idata": idata}


def counts_runner(variant: str):
    """The counts runner of NPFM (``variant="npfm"``) or PPFM (``"ppfm"``), for ``SolverSpec.evaluations``.

    Declared as ``lazy("validation.models.pfm_eval:counts_runner", "npfm")``. The runner ``run_counts(run, side)``
    (`validation.evaluation.counts_eval.CountsRun`'s contract) calls `p3_scores` on ``run.split`` with the runner's
    settings ``chains``, ``warmup``, ``samples``, ``thin``, ``init_scale`` (``run.settings``, declared in
    `validation.models.pfm`'s SPECs) and the config's ``K``, ``seed``, ``dtype``
    (``run.side_features()`` with ``side``) and returns two fit dicts, the posterior-mean rate and the plug-in
    rate, each with fit_seconds (sampling), seconds_per_iteration, iterations, setting and extras
    (n_active_mean, seconds_per_sweep).

    Parameters
    ----------
    variant : {"npfm", "ppfm"}
        The model.

    Returns
    -------
    callable
        ``run_counts(run, side: bool) -> list of dict``; it raises what `p3_scores` raises.

    Raises
    ------
    ValueError
        For another ``variant``.

    Source: ``004_90693a0965f06816.txt`` sec. 5.4 (fig. 5.3); the runner interface is a project addition.
    """
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")

    def run_counts(run, side: bool):
        cfg, s = run.config, run.settings
        res = p3_scores(run.split, variant=variant, K=cfg.K, seed=cfg.seed, num_chains=s["chains"],
                        num_warmup=s["warmup"], num_samples=s["samples"], thin=s["thin"],
                        side_features=run.side_features() if side else None, dtype=np.dtype(cfg.dtype),
                        progress=run.progress, init_scale=s["init_scale"])
        warm = -(-s["warmup"] // s["thin"]) * s["thin"]
        iters = warm + s["samples"] * s["thin"]
        setting = (f"{s['chains']} chain(s) x ({warm} burn-in + {s['samples']} kept, thin {s['thin']}); "
                   f"mean active factors {res['n_active_mean']:.1f}")
        extras = {"n_active_mean": res["n_active_mean"], "seconds_per_sweep": res["seconds_per_sweep"]}
        return [{"method": method, "score_fn": fn, "fit_seconds": res["seconds"],
                 "seconds_per_iteration": res["seconds_per_sweep"], "iterations": iters, "setting": setting,
                 "extras": extras} for method, fn in res["score_fns"].items()]

    return run_counts
