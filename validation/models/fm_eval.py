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

import jax
import jax.numpy as jnp
import numpy as np

from custom_inference import arviz_io, fm_mcmc, fm_sgd, vbfm, vi_driver
from ppl_models.fm import FMFlatHyper, FMHierHyper

__all__ = ["ratings_mcmc_fm", "ratings_vbfm", "ratings_ovbfm", "ratings_sgd_fm", "ratings_setting_vbfm",
           "ratings_setting_ovbfm", "ratings_setting_sgd_fm"]


# ------------------------------------------------------------------------------
# protocol P2 (validation.evaluation.ratings_eval): runner(designs, K, run) -> (iterations, seconds, rmse,
# seconds per iteration, final prediction); designs = (train, test) FM designs of the P2 split


def ratings_mcmc_fm(designs, K: int, run):
    """MCMC-FM on P2: one chain of ``gibbs_warmup`` + ``gibbs_samples`` sweeps (`custom_inference.fm_mcmc.sample`,
    hierarchical prior), the prediction of each kept draw at the test rows, averaged as the samples come.

    ``designs``: (train, test) `custom_inference.fm_design.FMDesign`; ``K``: rank; ``run``: the evaluation's
    `validation.evaluation.ratings_eval.RatingsRun` (config, key, progress, ``gibbs_curve``). Returns
    ``run.gibbs_curve``'s tuple (iterations (n,), seconds (n,), RMSE of the running average (n,), seconds per
    sweep, final prediction (M,) float64). Raises what `custom_inference.fm_mcmc.sample` raises.
    Source: ``004_90693a0965f06816.txt`` sec. 2.5 (MCMC-FM), eq. 2.16 (the average over draws).
    """
    train, test = designs
    cfg = run.config
    dtype = np.dtype(cfg.dtype)
    idata = fm_mcmc.sample(run.key, train, K, FMHierHyper(), num_chains=1, num_warmup=cfg.gibbs_warmup,
                           num_samples=cfg.gibbs_samples, progress=run.progress, dtype=dtype, keep=("w0", "w", "V"))
    post = arviz_io.group_arrays(idata)
    with jax.enable_x64(dtype == np.float64):
        args = (jnp.asarray(test.rows), jnp.asarray(test.cols), jnp.asarray(test.values, dtype))
        pred = jax.jit(jax.vmap(lambda w0, w, V: fm_mcmc.fm_mean(w0, w, V, *args, test.n_rows)[0]))
        per_draw = np.asarray(pred(post["w0"][0], post["w"][0], post["V"][0]))
    per_sweep = float(idata.posterior.attrs["seconds_per_sweep"])
    return run.gibbs_curve(per_draw, np.asarray(test.y, float), cfg.gibbs_warmup, per_sweep)


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
    """VBFM (CAVI, `custom_inference.vbfm.step`) on P2: at most ``vi_max_iter`` sweeps, stopping when the relative
    ELBO change < ``vi_tol``; the curve is the RMSE of the mean of q (eq. 4.22) after each sweep.

    ``designs``, ``K``, ``run`` as `ratings_mcmc_fm` (``run.rmse`` scores each sweep). Returns (iterations (n,),
    seconds (n,), RMSE (n,), seconds per sweep, final prediction (M,) float64). Raises what
    `custom_inference.vi_driver.run` raises (FloatingPointError for a non-finite ELBO).
    Source: ``004_90693a0965f06816.txt`` Algorithm 3, eq. 4.22.
    """
    train, test = designs
    cfg = run.config
    with jax.enable_x64(cfg.dtype == "float64"):
        d = jax.tree_util.tree_map(jnp.asarray, train)
        state = vbfm.init(run.key, d, K, FMFlatHyper())
        return _vi_loop(state, lambda s, i: vbfm.step(None, s, d), cfg.vi_max_iter, test, cfg.vi_tol, run,
                        f"VBFM (K={K})")


def ratings_ovbfm(designs, K: int, run):
    """OVBFM (stochastic VI, `custom_inference.vbfm.svi_step`) on P2: ``ovbfm_epochs`` epochs of ``ovbfm_batches``
    minibatches, step sizes (1 + t)^-``ovbfm_lam``; the curve is the RMSE of the mean of q after each epoch.

    ``designs``, ``K``, ``run`` as `ratings_vbfm` (the minibatches are drawn with ``numpy.random.default_rng(seed)``).
    Returns as `ratings_vbfm`. Raises what `custom_inference.vbfm.svi_step` raises.
    Source: ``004_90693a0965f06816.txt`` Algorithm 4, eq. 4.22.
    """
    train, test = designs
    cfg = run.config
    rng = np.random.default_rng(cfg.seed)
    with jax.enable_x64(cfg.dtype == "float64"):
        d = jax.tree_util.tree_map(jnp.asarray, train)
        state = vbfm.init(run.key, d, K, FMFlatHyper())
        counter = [0]

        def epoch(s, i):
            for b in vbfm.make_batches(rng, train, cfg.ovbfm_batches):
                s, _ = vbfm.svi_step(None, s, d, None, b, counter[0], lam=cfg.ovbfm_lam)
                counter[0] += 1
            return s, None  # no ELBO: runs all epochs

        return _vi_loop(state, epoch, cfg.ovbfm_epochs, test, 0.0, run, f"OVBFM (K={K})")


def ratings_sgd_fm(designs, K: int, run):
    """SGD-FM (`custom_inference.fm_sgd.fit`, Algorithm 1) on P2: ``sgd_epochs`` epochs at ``sgd_learning_rate``
    with ``sgd_reg``; the curve is the solver's test RMSE after each epoch.

    ``designs``, ``K``, ``run`` as `ratings_mcmc_fm`. Returns (iterations (n,), seconds (n,), RMSE (n,), seconds
    per epoch, final prediction (M,) float64). Raises what `custom_inference.fm_sgd.fit` raises.
    Source: ``004_90693a0965f06816.txt`` Algorithm 1.
    """
    train, test = designs
    cfg = run.config
    res = fm_sgd.fit(run.key, train, K, cfg.sgd_reg, learning_rate=cfg.sgd_learning_rate, n_epochs=cfg.sgd_epochs,
                     dtype=np.dtype(cfg.dtype), test=test)
    per = res.idata.sgd_trace.attrs["seconds"] / cfg.sgd_epochs
    it = np.arange(1, cfg.sgd_epochs + 1)
    with jax.enable_x64(cfg.dtype == "float64"):
        pred = np.asarray(fm_sgd.predict(res.state, test), np.float64)
    return it, it * per, np.asarray(res.idata.sgd_trace["test_rmse"], float), per, pred


def ratings_setting_vbfm(cfg) -> str:
    """VBFM's settings in the ratings notes (``cfg``: `validation.evaluation.ratings_eval.RatingsConfig`).
    Raises AttributeError for a config without the fields. Source: project addition."""
    return f"VBFM: at most {cfg.vi_max_iter} sweeps, tol {cfg.vi_tol:g}"


def ratings_setting_ovbfm(cfg) -> str:
    """OVBFM's settings in the ratings notes. Raises AttributeError as `ratings_setting_vbfm`.
    Source: project addition."""
    return f"OVBFM: {cfg.ovbfm_epochs} epochs x {cfg.ovbfm_batches} minibatches, (1 + t)^-{cfg.ovbfm_lam}"


def ratings_setting_sgd_fm(cfg) -> str:
    """SGD-FM's settings in the ratings notes. Raises AttributeError as `ratings_setting_vbfm`.
    Source: project addition."""
    return f"SGD-FM: {cfg.sgd_epochs} epochs, eta {cfg.sgd_learning_rate:g}, {cfg.sgd_reg}"
