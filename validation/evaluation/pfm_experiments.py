"""NPFM / PPFM experiments of seed 004 ch. 5: the synthetic 60 x 90 two-block matrix (sec. 5.4.1-5.4.2)
and MovieLens 100K protocol P3 with optional side features (sec. 5.4.4). Split from `validation.models.pfm`
(the checks, cross-check, SBC and errata).

Source: ``004_90693a0965f06816.txt`` ch. 5.4.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd
import scipy.sparse as sp

from custom_inference import pfm
from ppl_models import pfm as ppl

__all__ = ["synthetic_blocks", "ml100k_side_features", "evaluate_p3", "sbc_mixing"]


# ------------------------------------------------------------------------------
# the chapter's synthetic experiment


def synthetic_blocks(*, seed: int = 0, K: int = 10, num_chains: int = 2, num_warmup: int = 1000,
                     num_samples: int = 500, thin: int = 2, variant: str = "npfm", hyper=ppl.PFMHyper(),
                     dtype=np.float64, init_scale: float = 1.0, init_shape: float | None = 0.3,
                     init_r: float | None = 1.0) -> dict:
    """The 60 x 90 matrix of sec. 5.4.1: 5s on [0, 20) x [0, 30) and [20, 60) x [30, 90), 0s
    elsewhere, 20% of cells held out (excluded from training, ch. 5.3.4), K = 10.

    Start (`custom_inference.pfm.init`): init_scale = 1, sparse factors (init_shape = 0.3) and,
    for NPFM, r_k = init_r (0.5 + U) with init_r = 1. With the sampler's default start (scale 0.1,
    r_k ~ 1 / K) both samplers stay in a one-factor mode (blocks A and C both near 1.5, held-out
    RMSE 1.48, seed 0, 2 chains x 2,000 sweeps); with this start PPFM finds both blocks (seeds 0
    and 1: held-out RMSE 0.044, 0.042) and NPFM does in 3 of 4 chains (seed 1: RMSE 0.040, two
    factors with r share 0.64 / 0.36; seed 0: one chain stays in the one-factor mode, RMSE 0.76).
    Several chains and a look at ``n_active`` per chain are needed.

    Parameters
    ----------
    seed : int, default 0
        Seeds the held-out cells (``numpy.random.default_rng(seed)``) and the sampler.
    K : int >= 1, default 10
        Latent dimension (NPFM's truncation level).
    num_chains : int >= 1, default 2
        Gibbs chains.
    num_warmup : int >= 0, default 1000
        Sweeps discarded per chain.
    num_samples : int >= 1, default 500
        Draws kept per chain.
    thin : int >= 1, default 2
        Sweeps per kept draw.
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    hyper : ppl_models.pfm.PFMHyper, default PFMHyper()
        Hyperparameters.
    dtype : numpy float dtype, default numpy.float64
        Of the data and the sampler.
    init_scale : float > 0, default 1.0
        Initial scale of the factors (`custom_inference.pfm.init`).
    init_shape : float or None, default 0.3
        Gamma shape of the initial factors (sparse factors); None: the sampler's uniform start.
    init_r : float or None, default 1.0
        NPFM's initial r_k = init_r (0.5 + U); None: r_k ~ 1 / K. Ignored for PPFM.

    Returns
    -------
    dict
        ``rmse_heldout`` and ``rmse_train`` (float) of the posterior-mean rates vs the true matrix,
        ``block_means`` (dict block name -> float: mean predicted rate of the block's held-out cells),
        ``n_active_mean`` (float) and ``n_active_counts`` (dict int -> int) of the number of factors with
        allocated units, ``mean_rate`` (60, 90) float array (the sampler's ``dtype``), ``idata``
        (arviz.InferenceData), ``seconds_per_sweep``; for NPFM also ``r_share`` float64 (K,) (posterior
        mean of r_k / sum r, sorted descending) and ``factors_above_5pct`` (float: mean number of
        r_k / sum r > 0.05).

    Raises
    ------
    ValueError
        Not of its own: `custom_inference.pfm.sample` raises it (K < 1, bad ``hyper``, unknown
        ``variant``; TypeError for a non-numeric K).

    Source: ``004_90693a0965f06816.txt`` sec. 5.4.1-5.4.2 (synthetic data, fig. 5.2).
    """
    rng = np.random.default_rng(seed)
    I, J = 60, 90
    Y = np.zeros((I, J))
    Y[:20, :30] = 5
    Y[20:, 30:] = 5
    held = rng.uniform(size=(I, J)) < 0.2
    hu, hj = np.nonzero(held)
    Ytr = np.where(held, 0, Y)
    data = pfm.PFMData.from_matrix(sp.csr_matrix(Ytr), zeros="all", exclude=(hu, hj), dtype=dtype)
    uu, jj = np.indices((I, J)).reshape(2, -1)
    idata = pfm.sample(seed, data, K, hyper, variant=variant, num_chains=num_chains, num_warmup=num_warmup,
                       num_samples=num_samples, thin=thin, predict_at=(uu, jj), dtype=dtype, init_scale=init_scale,
                       init_shape=init_shape, init_r=init_r)
    mean = np.asarray(idata.predictions["pred_mean"]).reshape(I, J)
    act = np.asarray(idata.sample_stats["n_active"]).ravel()
    blocks = {}
    for name, (rs, cs) in {"A [0,20)x[0,30)": (slice(0, 20), slice(0, 30)), "B [0,20)x[30,90)": (slice(0, 20), slice(30, 90)),
                           "C [20,60)x[0,30)": (slice(20, 60), slice(0, 30)),
                           "D [20,60)x[30,90)": (slice(20, 60), slice(30, 90))}.items():
        m = held[rs, cs]
        blocks[name] = float(mean[rs, cs][m].mean())
    out = {"rmse_heldout": float(np.sqrt(np.mean((mean[held] - Y[held]) ** 2))),
           "rmse_train": float(np.sqrt(np.mean((mean[~held] - Y[~held]) ** 2))),
           "block_means": blocks, "n_active_mean": float(act.mean()),
           "n_active_counts": dict(zip(*[a.tolist() for a in np.unique(act, return_counts=True)])),
           "mean_rate": mean, "idata": idata, "seconds_per_sweep": idata.posterior.attrs["seconds_per_sweep"]}
    if variant == "npfm":
        r = np.asarray(idata.posterior["r"]).reshape(-1, K)
        share = np.sort(r / r.sum(1, keepdims=True), axis=1)[:, ::-1].mean(0)
        out["r_share"] = share
        out["factors_above_5pct"] = float(np.mean(np.sum(r / r.sum(1, keepdims=True) > 0.05, axis=1)))
    return out


# ------------------------------------------------------------------------------
# MovieLens 100K, protocol P3 (ch. 5.4.4)


def ml100k_side_features(split, data_dir=None):
    """User (age bucket, gender, occupation: one-hot) and item (genres: multi-hot) features of MovieLens 100K.

    Aligned with ``split.indexed`` (`validation.data.features` loaders): row i of the user features is
    the user ``split.indexed.user_ids[i]``, row j of the item features the item ``item_ids[j]``.

    Parameters
    ----------
    split : validation.data.splits.HoldoutSplit
        A split of MovieLens 100K with ``indexed`` (P3, `validation.data.datasets.split_random_holdout`).
    data_dir : str or path-like, optional
        Folder with ``u.user`` and ``items.tsv`` / ``u.item`` (None: the search of
        `validation.data.features`).

    Returns
    -------
    tuple
        (user_features (I, D_u) scipy.sparse csr float64, user_groups (D_u,) int: 0 age, 1 gender,
        2 occupation, item_features (J, D_v) csr float64, item_groups (D_v,) int zeros, names: the tuple
        ("user", "item", "age", "gender", "occupation", "genre")).

    Raises
    ------
    ValueError
        The side files are missing or malformed (`validation.data.features`).
    KeyError
        A user of the split is not in ``u.user``.

    Source: ``004_90693a0965f06816.txt`` sec. 5.4.4 (side information as FM feature groups); the
    MovieLens 100K README for ``u.user`` and the genres.
    """
    from validation.data import features

    d = features._side_data_dir(data_dir)
    users = features.load_movielens_users(d).set_index("user")
    uid = np.asarray(split.indexed.user_ids)
    u = users.loc[uid]
    age = features._age_bucket(u["age"].to_numpy())
    genders = sorted(users["gender"].unique())
    occs = sorted(users["occupation"].unique())
    I = uid.size
    nA, nG, nO = len(features.AGE_BUCKETS), len(genders), len(occs)
    cols = np.stack([age, nA + np.searchsorted(genders, u["gender"].to_numpy()),
                     nA + nG + np.searchsorted(occs, u["occupation"].to_numpy())], axis=1)
    Uf = sp.csr_matrix((np.ones(cols.size), (np.repeat(np.arange(I), 3), cols.ravel())), shape=(I, nA + nG + nO))
    ug = np.r_[np.zeros(nA, int), np.ones(nG, int), np.full(nO, 2)]
    g = features.load_movielens_genres(d)
    iid = np.asarray(split.indexed.item_ids)
    pos = {int(x): n for n, x in enumerate(iid)}
    gnames = list(features.ML100K_GENRES)
    rr = [(pos[int(it)], gnames.index(gg)) for it, gg in zip(g["item"], g["genre"]) if int(it) in pos and gg in gnames]
    rr = np.asarray(rr, dtype=np.int64).reshape(-1, 2)
    Vf = sp.csr_matrix((np.ones(len(rr)), (rr[:, 0], rr[:, 1])), shape=(iid.size, len(gnames)))
    return Uf, ug, Vf, np.zeros(len(gnames), int), ("user", "item", "age", "gender", "occupation", "genre")


def evaluate_p3(df, *, variant: str = "npfm", K: int = 50, seed: int = 0, num_chains: int = 1,
                num_warmup: int = 300, num_samples: int = 100, thin: int = 2, hyper=ppl.PFMHyper(),
                side: bool = False, data_dir=None, dtype=np.float32, progress: bool = False,
                init_scale: float = 1.0) -> dict:
    """NPFM / PPFM on protocol P3 (random 20% of the ratings held out, ratings as counts, file
    order permuted with ``seed``; `validation.data.datasets.split_random_holdout`).

    Training rows are ALL user-item cells of the training matrix (unrated cells, the held-out
    ones included, are y = 0), as for HPF in `validation.evaluation.experiments`: treating the held-out cells
    as missing (ch. 5.3.4) would tell the sampler which cells were rated. ``side``: add the user
    age bucket, gender, occupation and item genres (`ml100k_side_features`). Scores: the
    posterior mean rate over the kept draws (the rate of every cell averaged draw by draw) and
    the thesis's plug-in rate at the posterior-mean parameters (sec. 5.3.4). A "popularity" row is
    added.

    Parameters
    ----------
    df : pandas.DataFrame
        Ratings table (user, item, rating[, timestamp]; integer ratings used as counts).
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    K : int >= 1, default 50
        Latent dimension.
    seed : int, default 0
        Seed of the split and the sampler.
    num_chains : int >= 1, default 1
        Gibbs chains.
    num_warmup : int >= 0, default 300
        Sweeps discarded.
    num_samples : int >= 1, default 100
        Draws kept.
    thin : int >= 1, default 2
        Sweeps per kept draw.
    hyper : ppl_models.pfm.PFMHyper, default PFMHyper()
        Hyperparameters.
    side : bool, default False
        Add the MovieLens side features.
    data_dir : str or path-like, optional
        Folder of the side files (as `ml100k_side_features`).
    dtype : numpy float dtype, default numpy.float32
        Of the sampler.
    progress : bool, default False
        Progress bars.
    init_scale : float > 0, default 1.0
        Initial scale of the factors.

    Returns
    -------
    dict
        ``table`` (DataFrame, one row per method: method, the means of
        `validation.evaluation.metrics.summarize` (precision, recall, ndcg (eq. 5.26 discount), f_measure,
        n_users) and ndcg_log2k1 (the project's discount)), ``per_user`` (method -> the per-user DataFrame
        of `validation.evaluation.metrics.p3_metrics`), ``n_active_mean``, ``seconds``,
        ``seconds_per_sweep``, ``idata``.

    Raises
    ------
    ValueError
        From the split, `ml100k_side_features` or `custom_inference.pfm.sample`, on bad data, sizes or
        settings.
    Source: ``004_90693a0965f06816.txt`` sec. 5.4.4 (protocol P3; metrics eqs. 5.21-5.28).
    """
    from validation.data import datasets
    from validation.evaluation import metrics
    from validation.models import pfm_eval

    split = datasets.split_random_holdout(df, seed=seed, row_order="input")
    res = pfm_eval.p3_scores(split, variant=variant, K=K, seed=seed, num_chains=num_chains, num_warmup=num_warmup,
                             num_samples=num_samples, thin=thin, hyper=hyper,
                             side_features=ml100k_side_features(split, data_dir) if side else None, dtype=dtype,
                             progress=progress, init_scale=init_scale)
    rows, per_user = [], {}
    for name, fn in (*res["score_fns"].items(), ("popularity", metrics.popularity_score_fn(split.train))):
        pu = metrics.p3_metrics(fn, split, p=100)
        per_user[name] = pu
        rows.append({"method": name, **metrics.summarize(pu).to_dict(), "ndcg_log2k1": float(pu["ndcg_log2k1"].mean())})
    return {"table": pd.DataFrame(rows), "per_user": per_user, **{k: res[k] for k in ("n_active_mean", "seconds",
                                                                                      "seconds_per_sweep", "idata")}}


# ------------------------------------------------------------------------------
# SBC configuration: do the heaviest prior-predictive simulations mix?


def sbc_mixing(*, n_sims: int = 1000, n_worst: int = 20, scale: int = 4, master_seed: int = 0, config=None,
               functionals=("logp_v_given_shape", "log_c", "logp_r_given_shape", "log_gamma0",
                            "log_total_rate"), compare: str = "length") -> pd.DataFrame:
    """R-hat and bulk ESS of NPFM's SBC functionals on the simulations with the largest total count.

    Simulates the first ``n_sims`` simulations of the NPFM SBC (`validation.models.pfm.sbc_adapters`,
    seeds `validation.checks.sbc.sbc_seeds` (master_seed, n_sims), so simulation s is the s-th of the
    SBC run), takes the ``n_worst`` with the largest total count T, and fits each twice with the
    SBC's own fit seed: with ``config`` (default `validation.models.pfm.SBCConfig`: 4 chains x (300 +
    150 x 4) sweeps) and with warm-up and thinning multiplied by ``scale`` (same kept draws per
    chain). With ``compare="move"`` the two runs are instead ``config`` without the per-factor
    scale move (``scale_rounds=0``, the sampler before issue 13's fix) and with it (the
    sampler's default rounds), same lengths, same fit seed. For every functional: split R-hat
    and bulk ESS (ArviZ) over the chains' kept draws.

    Parameters
    ----------
    n_sims : int >= 1, default 1000
        Simulations of the SBC run to simulate (not fit).
    n_worst : int >= 1, default 20
        How many of them, those with the largest total count, to fit.
    scale : int >= 1, default 4
        Factor on warm-up and thinning of the second run (``compare="length"``).
    master_seed : int, default 0
        The SBC run's master seed.
    config : validation.models.pfm.SBCConfig, optional
        The base run (None: its defaults).
    functionals : sequence of str
        Names of the NPFM SBC functionals (`validation.models.pfm.pfm_functionals`) to diagnose.
    compare : {"length", "move"}, default "length"
        Which two runs are compared (above).

    Returns
    -------
    pandas.DataFrame
        One row per fitted simulation (largest T first): sim (int), T (float), and for run in
        ("base", f"x{scale}") (``compare="move"``: ("no-move", "move")) and each functional f:
        ``{run}/{f}/rhat``, ``{run}/{f}/ess`` (float64), ``{run}/seconds``.

    Raises
    ------
    ValueError
        n_sims < 1, n_worst < 1, scale < 1 or an unknown ``compare``; what the adapters raise propagates.
    KeyError
        A name of ``functionals`` that the adapters do not define.

    Source: project addition (the diagnosis of the 1,000-simulation NPFM SBC failure, issue 13;
    SBC after Talts et al. 2018) on the sampler of ``004_90693a0965f06816.txt`` ch. 5.3.2.
    """
    import arviz as az

    from validation.models import pfm as vp
    from validation.checks import sbc

    if n_sims < 1 or n_worst < 1 or scale < 1:
        raise ValueError(f"n_sims, n_worst and scale must be >= 1, got {n_sims}, {n_worst}, {scale}")
    if compare not in ("length", "move"):
        raise ValueError(f"compare must be 'length' or 'move', got {compare!r}")
    cfg = config or vp.SBCConfig()
    simulate, _, funcs = vp.sbc_adapters("npfm", cfg)
    seeds = sbc.sbc_seeds(master_seed, n_sims)
    T = np.array([float(simulate(int(s))[1].sum()) for s in seeds])
    if compare == "move":
        runs = (("no-move", replace(cfg, scale_rounds=0)), ("move", replace(cfg, scale_rounds=None)))
    else:
        runs = (("base", cfg), (f"x{scale}", replace(cfg, warmup=cfg.warmup * scale, thin=cfg.thin * scale)))
    fits = {lab: vp.sbc_adapters("npfm", c)[1] for lab, c in runs}
    rows = []
    for i in np.argsort(-T, kind="stable")[:n_worst]:
        _, Y = simulate(int(seeds[i]))
        row = {"sim": int(i), "T": float(T[i])}
        for lab, c in runs:
            t0 = time.perf_counter()
            draws = fits[lab](Y, sbc._derived_seed(int(seeds[i]), 1))
            S = draws["w0"].shape[0]
            for name in functionals:
                vals = np.array([funcs[name]({k: v[s] for k, v in draws.items()})[0] for s in range(S)])
                vals = vals.reshape(c.chains, -1)
                row[f"{lab}/{name}/rhat"] = float(az.rhat(vals))
                row[f"{lab}/{name}/ess"] = float(az.ess(vals))
            row[f"{lab}/seconds"] = time.perf_counter() - t0
        rows.append(row)
    return pd.DataFrame(rows)
