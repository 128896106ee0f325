"""Validation of MCMC-FM (and of SGD-FM's Algorithm 1): conditionals, caches, blocks, NUTS, SBC, errata.

- `conditional_checks` (update level): every complete conditional of `custom_inference.fm_mcmc`
  (w0, w_l per block, v_lk per block and k, alpha, sigma_w, mu_w, sigma_v, mu_v) against the
  NumPyro program `ppl_models.fm.model_hier`: one coordinate moves along a grid, all other
  sites stay fixed, and the differences of NumPyro's ``log_density`` along the grid must equal
  the differences of the claimed conditional's log density (exact up to rounding). A
  deliberately wrong v conditional (the self term x_nl v_lk not removed from q_nk) is
  included and must fail.
- `cache_check`: after a sweep, the incrementally updated caches e = y - yhat and q = X V equal
  their recomputation from the dense X.
- `block_check`: a block drawn at once equals the one-feature-at-a-time sequential update with
  the same standard-normal numbers, where each sequential conditional is recomputed from the
  dense X after every single update (so the features of a block are conditionally independent).
- `run_crosscheck` (posterior level): MCMC-FM vs NUTS on the same program, on predictions (train
  and new rows) and alpha, gated (`validation.checks.gates.nuts_gates`), compared by
  `validation.checks.crosscheck.compare_exact`.
- `sbc_adapters` (calibration level) for `validation.checks.sbc.run_sbc`.
- `ERRATA`: Algorithm 1 (SGD-FM) does not descend eq. 2.18.

Source: ``004_90693a0965f06816.txt`` eqs. 2.17-2.30, Algorithm 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import scipy.sparse as sp
from jax.scipy import stats as jstats
from numpyro.infer.util import log_density

from custom_inference import arviz_io
from custom_inference import fm_mcmc as mc
from custom_inference import fm_sgd
from custom_inference.fm_design import FMDesign
from custom_inference.gaussian import sample_normal_natural
from ppl_models import fm as ppl

from validation.checks import crosscheck as xc
from validation.checks import registry
from validation.checks.errata import Erratum

__all__ = [
    "small_design",
    "conditional_checks",
    "cache_check",
    "block_check",
    "CrosscheckConfig",
    "identifiable_quantities",
    "run_crosscheck",
    "nuts_reference",
    "SBCConfig",
    "fm_functionals",
    "sbc_adapters",
    "ERRATA",
    "BRIDGE_CONFIG",
    "numpyro_block",
    "bridge_problem",
    "BRIDGE",
]

_SEED004 = "004_90693a0965f06816.txt"
_COND_TOL = 1e-6  # log-density differences agree to ~1e-10 in float64; a wrong conditional is off by O(1)
# the design shared by `conditional_checks`, `cache_check` and `block_check`: at the same K (2 in the
# tests), one compilation of the simulation (`ppl_models.fm.simulate`, about 8 CPU s per design shape and K)
_CHECK_DESIGN = dict(n_users=8, n_items=6, n_multi=4, n_rows=40, p_multi=0.5)


def small_design(n_users=30, n_items=20, n_multi=3, n_rows=200, seed=0, p_multi=0.4):
    """A random (user, item) one-hot | one-hot | multi-hot FM design.

    Each row has one user and one item drawn uniformly, and each of the ``n_multi`` multi-hot features is on with
    probability ``p_multi``; groups 0 (users), 1 (items), 2 (the multi-hot features).

    Parameters
    ----------
    n_users, n_items : int, default 30, 20
        Users and items (at least 1 each).
    n_multi : int, default 3
        Multi-hot features (0: none).
    n_rows : int, default 200
        N, the instances.
    seed : int, default 0
        ``numpy.random.default_rng(seed)``.
    p_multi : float, default 0.4
        Probability that a multi-hot feature is on.

    Returns
    -------
    tuple
        (X scipy.sparse.coo_matrix (N, D) float64 with 0/1 entries, group int64 (D,), users int64 (N,), items int64
        (N,)), D = ``n_users + n_items + n_multi``.

    Raises
    ------
    None of its own (numpy raises ValueError for ``n_users`` or ``n_items`` < 1).

    Source: project addition (a small design of the FM of 004_90693a0965f06816.txt, eq. 2.17).
    """
    rng = np.random.default_rng(seed)
    u = rng.integers(0, n_users, n_rows)
    i = rng.integers(0, n_items, n_rows)
    ar = np.arange(n_rows)
    blocks = [sp.csr_matrix((np.ones(n_rows), (ar, u)), shape=(n_rows, n_users)),
              sp.csr_matrix((np.ones(n_rows), (ar, i)), shape=(n_rows, n_items))]
    group = [0] * n_users + [1] * n_items
    if n_multi:
        blocks.append(sp.csr_matrix((rng.random((n_rows, n_multi)) < p_multi).astype(float)))
        group += [2] * n_multi
    return sp.hstack(blocks).tocoo(), np.asarray(group), u, i


def _random_state(seed, X, group, K, hyper):
    """Parameters from the prior (via `ppl.simulate`), y from the model, caches current."""
    truth, y = ppl.simulate(jax.random.PRNGKey(seed), X.row, X.col, X.data, X.shape[0], group, K, hyper)
    design = FMDesign.from_scipy(X, np.asarray(y), group)
    d = mc._as_jax(design, np.float64)
    st = mc.FMMCMCState(*(jnp.asarray(truth[n], jnp.float64) for n in ("w0", "w", "V", "alpha", "mu_w", "sigma_w",
                                                                     "mu_v", "sigma_v")),
                        jnp.zeros(X.shape[0]), jnp.zeros((X.shape[0], K)))
    return design, d, mc.caches(st, d)


def _sites(st: mc.FMMCMCState):
    return {n: getattr(st, n) for n in mc.PARAMS}


def _brute_logdensity(d: FMDesign, group, K, hyper, sites, name, index, _cache={}):
    """Function grid (G,) -> log joint (G,) with sites[name][index] moved along the grid.
    One compiled program per site name (the index is traced)."""
    key = (id(d), id(sites), name)
    if key not in _cache:
        args = (d.rows, d.cols, d.values, d.n_rows, d.n_features, group, K, hyper, d.y)

        def one(v, idx):
            s = dict(sites)
            s[name] = sites[name].at[idx].set(v) if idx else sites[name] * 0 + v
            return log_density(ppl.model_hier, args, {"n_groups": d.n_groups}, s)[0]

        _cache.clear() if len(_cache) > 64 else None
        _cache[key] = (jax.jit(jax.vmap(one, in_axes=(0, None))), d, sites)
    f = _cache[key][0]
    idx = tuple(jnp.asarray(i) for i in index)
    return lambda grid: f(grid, idx)


def _normal_logpdf(P, h):
    return lambda g: jstats.norm.logpdf(g, h / P, 1.0 / jnp.sqrt(P))


def _gamma_logpdf(a, b):
    return lambda g: jstats.gamma.logpdf(g, a, scale=1.0 / b)


def _diff_error(brute, cand, grid):
    lb, lc = np.asarray(brute(grid)), np.asarray(cand(grid))
    return float(np.max(np.abs((lb - lb[0]) - (lc - lc[0]))))


def _wrong_v_conditional(state, design, hyper, b, k):
    """Deliberately wrong: h_n = x_nl q_nk (the feature's own term x_nl v_lk left in q_nk)."""
    r, c, x = mc._block_entries(design, b)
    g = design.group
    hn = x * state.q[r, k]
    s, m = state.sigma_v[g, k], state.mu_v[g, k]
    P = s + state.alpha * jax.ops.segment_sum(hn * hn, c, num_segments=design.n_features)
    h = s * m + state.alpha * jax.ops.segment_sum(hn * (state.e[r] + hn * state.V[c, k]), c,
                                                  num_segments=design.n_features)
    return P, h


def conditional_checks(hyper: ppl.FMHierHyper = ppl.FMHierHyper(mu_0=0.3, sigma_0=2.0, nu_0=1.5, alpha_0p=2.0,
                                                                beta_0p=1.5, alpha_0=3.0, beta_0=1.0),
                       *, seed: int = 0, K: int = 2, n_grid: int = 41) -> pd.DataFrame:
    """Every conditional of MCMC-FM vs the NumPyro log density (module docstring).

    On the shared small design (8 users, 6 items, 4 multi-hot features, 40 rows) with parameters and y drawn from
    ``hyper``: w0, alpha, w and V of the most frequent and the last feature of each block, sigma_w, mu_w, sigma_v,
    mu_v of each group; plus the deliberately wrong v conditional (the self term kept), which must fail. Runs in
    float64.

    Parameters
    ----------
    hyper : ppl_models.fm.FMHierHyper, optional
        The program's hyperparameters; default mu_0 = 0.3, sigma_0 = 2, nu_0 = 1.5, alpha_0p = 2, beta_0p = 1.5,
        alpha_0 = 3, beta_0 = 1 (distinct values, so that a swapped symbol shows).
    seed : int, keyword-only, default 0
        Seed of the design (``seed``) and of the prior draw (``seed + 1``).
    K : int, keyword-only, default 2
        Factor dimension.
    n_grid : int, keyword-only, default 41
        Grid points per coordinate (mean +- 4 sd for Normals, 0.2 to 3 times the mean for Gammas).

    Returns
    -------
    pandas.DataFrame
        One row per coordinate: block, site, index (str), max_error (max over the grid of
        |(log p(theta_g) - log p(theta_0)) - (log q(theta_g) - log q(theta_0))|), expected ("exact" or "wrong"),
        passed (exact: error <= 1e-6; wrong: error > 1e-6).

    Raises
    ------
    None of its own.

    Source: 004_90693a0965f06816.txt, eqs. 2.17, 2.22-2.30 (the model whose conditionals are checked; the thesis
    prints no conditionals); the check is a project addition (validation level 1).
    """
    with jax.enable_x64(True):
        X, group, _, _ = small_design(**_CHECK_DESIGN, seed=seed)
        design, d, st = _random_state(seed + 1, X, group, K, hyper)
        sites = _sites(st)
        rows = []

        def add(block, site, index, cand, center, scale, kind="exact", positive=False):
            if positive:
                grid = jnp.linspace(center * 0.2, center * 3.0, n_grid)
            else:
                grid = center + scale * jnp.linspace(-4, 4, n_grid)
            err = _diff_error(_brute_logdensity(d, group, K, hyper, sites, site, index), cand, grid)
            ok = err <= _COND_TOL if kind == "exact" else err > _COND_TOL
            rows.append(dict(block=block, site=site, index=str(index), max_error=err, expected=kind, passed=bool(ok)))

        P, h = mc.w0_conditional(st, d, hyper)
        add("w0", "w0", (), _normal_logpdf(P, h), h / P, 1 / jnp.sqrt(P))
        a, b = mc.alpha_conditional(st, d, hyper)
        add("alpha", "alpha", (), _gamma_logpdf(a, b), a / b, None, positive=True)
        blk = np.asarray(design.block)
        for bi in range(design.n_blocks):
            feats = np.flatnonzero(blk == bi)
            # the most frequent feature of the block (it has data), and the last one
            counts = np.bincount(np.asarray(design.cols), minlength=design.n_features)[feats]
            for l in sorted({int(feats[np.argmax(counts)]), int(feats[-1])}):
                P, h = mc.w_block_conditional(st, d, hyper, bi)
                add(f"w block {bi}", "w", (l,), _normal_logpdf(P[l], h[l]), h[l] / P[l], 1 / jnp.sqrt(P[l]))
                for k in range(K):
                    P, h = mc.v_block_conditional(st, d, hyper, bi, k)
                    add(f"v block {bi}", "V", (l, k), _normal_logpdf(P[l], h[l]), h[l] / P[l], 1 / jnp.sqrt(P[l]))
            if bi == 0:
                l = int(feats[np.argmax(counts)])
                P, h = _wrong_v_conditional(st, d, hyper, bi, 0)
                add("v block 0 (wrong: self term kept)", "V", (l, 0), _normal_logpdf(P[l], h[l]),
                    h[l] / P[l], 1 / jnp.sqrt(P[l]), kind="wrong")
        g = d.group
        G = design.n_groups
        for gi in range(G):
            s, r = mc.group_precision_conditional(st.w, g, G, st.mu_w, hyper.mu_0, hyper.nu_0, hyper.alpha_0p,
                                                  hyper.beta_0p)
            add("sigma_w", "sigma_w", (gi,), _gamma_logpdf(s[gi], r[gi]), s[gi] / r[gi], None, positive=True)
            n = float(np.sum(group == gi))
            Pm = (hyper.nu_0 + n) * st.sigma_w[gi]
            hm = st.sigma_w[gi] * (hyper.nu_0 * hyper.mu_0 + jnp.sum(jnp.where(g == gi, st.w, 0.0)))
            add("mu_w", "mu_w", (gi,), _normal_logpdf(Pm, hm), hm / Pm, 1 / jnp.sqrt(Pm))
            for k in range(K):
                s, r = mc.group_precision_conditional(st.V, g, G, st.mu_v, hyper.mu_0, hyper.nu_0, hyper.alpha_0p,
                                                      hyper.beta_0p)
                add("sigma_v", "sigma_v", (gi, k), _gamma_logpdf(s[gi, k], r[gi, k]), s[gi, k] / r[gi, k], None,
                    positive=True)
                Pm = (hyper.nu_0 + n) * st.sigma_v[gi, k]
                hm = st.sigma_v[gi, k] * (hyper.nu_0 * hyper.mu_0 + jnp.sum(jnp.where(g == gi, st.V[:, k], 0.0)))
                add("mu_v", "mu_v", (gi, k), _normal_logpdf(Pm, hm), hm / Pm, 1 / jnp.sqrt(Pm))
    return pd.DataFrame(rows)


def _dense_yhat(Xd, w0, w, V):
    q = Xd @ V
    return w0 + Xd @ w + 0.5 * np.sum(q * q - (Xd ** 2) @ (V ** 2), axis=1)


def cache_check(*, seed: int = 0, K: int = 3, n_sweeps: int = 2) -> float:
    """The incrementally updated caches (e, q) against their recomputation from the dense X.

    After ``n_sweeps`` sweeps (`custom_inference.fm_mcmc.step_jit`) on the shared small design, e = y - yhat and
    q = X V are recomputed densely; float64.

    Parameters
    ----------
    seed : int, keyword-only, default 0
        Seed of the design (``seed``), the prior draw (``seed + 2``) and the sweeps (``PRNGKey(seed)``).
    K : int, keyword-only, default 3
        Factor dimension.
    n_sweeps : int, keyword-only, default 2
        Sweeps run.

    Returns
    -------
    float
        The largest absolute difference over e and q.

    Raises
    ------
    None of its own.

    Source: project addition (validation level 1; the caches of eq. 2.17 of 004_90693a0965f06816.txt).
    """
    with jax.enable_x64(True):
        X, group, _, _ = small_design(**_CHECK_DESIGN, seed=seed)
        design, d, st = _random_state(seed + 2, X, group, K, ppl.FMHierHyper())
        key = jax.random.PRNGKey(seed)
        for _ in range(n_sweeps):
            key, sub = jax.random.split(key)
            st, _ = mc.step_jit(sub, st, d, ppl.FMHierHyper())
        Xd = design.to_dense()
        V, w = np.asarray(st.V), np.asarray(st.w)
        e_ref = np.asarray(design.y) - _dense_yhat(Xd, float(st.w0), w, V)
        return float(max(np.max(np.abs(np.asarray(st.e) - e_ref)), np.max(np.abs(np.asarray(st.q) - Xd @ V))))


def block_check(*, seed: int = 0, K: int = 2) -> pd.DataFrame:
    """Block-at-once vs one-feature-at-a-time (dense brute force, same normal numbers), per block.

    Each block of the shared small design is drawn by `custom_inference.fm_mcmc.update_block` and, with the same
    standard-normal numbers, feature by feature with every conditional recomputed from the dense X after each
    update; equal results mean the features of a block are conditionally independent.

    Parameters
    ----------
    seed : int, keyword-only, default 0
        Seed of the design (``seed``) and of the prior draw (``seed + 3``); block b uses ``PRNGKey(100 + b)``.
    K : int, keyword-only, default 2
        Factor dimension.

    Returns
    -------
    pandas.DataFrame
        One row per block: block (int), n_features, max_abs_diff (over w and V of the block).

    Raises
    ------
    None of its own.

    Source: project addition (validation level 1: the block updates of `custom_inference.fm_mcmc` on the model of
    004_90693a0965f06816.txt, eqs. 2.22-2.30).
    """
    hyper = ppl.FMHierHyper()
    out = []
    with jax.enable_x64(True):
        X, group, _, _ = small_design(**_CHECK_DESIGN, seed=seed)
        design, d, st = _random_state(seed + 3, X, group, K, hyper)
        Xd = design.to_dense()
        y = np.asarray(design.y)
        blk = np.asarray(design.block)
        gr = np.asarray(group)
        for b in range(design.n_blocks):
            key = jax.random.PRNGKey(100 + b)
            new = mc.update_block(key, st, d, hyper, b)
            k_w, k_v = jax.random.split(key)
            z_w = np.asarray(jax.random.normal(k_w, (design.n_features,), jnp.float64))
            keys_v = jax.random.split(k_v, K)
            z_v = [np.asarray(jax.random.normal(keys_v[k], (design.n_features,), jnp.float64)) for k in range(K)]
            w0, w, V = float(st.w0), np.array(st.w), np.array(st.V)
            alpha = float(st.alpha)
            feats = np.flatnonzero(blk == b)
            for l in feats:
                hn = Xd[:, l]
                a = _dense_yhat(Xd, w0, w, V) - hn * w[l]
                s, m = float(st.sigma_w[gr[l]]), float(st.mu_w[gr[l]])
                P = s + alpha * hn @ hn
                h = s * m + alpha * hn @ (y - a)
                w[l] = h / P + z_w[l] / np.sqrt(P)
            for k in range(K):
                for l in feats:
                    hn = Xd[:, l] * (Xd @ V[:, k] - Xd[:, l] * V[l, k])
                    a = _dense_yhat(Xd, w0, w, V) - hn * V[l, k]
                    s, m = float(st.sigma_v[gr[l], k]), float(st.mu_v[gr[l], k])
                    P = s + alpha * hn @ hn
                    h = s * m + alpha * hn @ (y - a)
                    V[l, k] = h / P + z_v[k][l] / np.sqrt(P)
            diff = max(np.max(np.abs(np.asarray(new.w) - w)), np.max(np.abs(np.asarray(new.V) - V)))
            out.append(dict(block=b, n_features=len(feats), max_abs_diff=float(diff)))
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------
# MCMC-FM vs NUTS


@dataclass(frozen=True)
class CrosscheckConfig:
    """The cross-check's small simulated FM and run settings.

    30 users, 20 items one-hot + a 3-feature multi-hot group, 200 instances, K = 2; y drawn from the flat FM with
    moderate scales (a fixed truth, not a prior draw, so that the data set is typical); the fit uses the
    hierarchical MCMC-FM prior ``hyper``. 10 new rows (random user, item, multi-hot) are predicted too.

    Parameters
    ----------
    n_users, n_items, n_multi : int, default 30, 20, 3
        Design sizes (`small_design`).
    n_rows : int, default 200
        Training instances.
    n_new : int, default 10
        New rows predicted.
    K : int, default 2
        Factor dimension.
    seed : int, default 0
        Seed of the design, of y (``seed + 10``), of NUTS and of MCMC-FM (``seed + 1``).
    truth_hyper : ppl_models.fm.FMFlatHyper, default FMFlatHyper(alpha=4, sigma_0=1, sigma_w=4, sigma_v=2)
        The flat FM that simulates y.
    hyper : ppl_models.fm.FMHierHyper, default FMHierHyper(alpha_0p=2, beta_0p=2)
        The hierarchical prior both fits use.
    num_chains, num_warmup, num_samples : int, default 4, 1000, 1000
        NUTS chains, warm-up and kept draws per chain.
    target_accept : float, default 0.95
        NUTS's target acceptance probability.
    gibbs_chains, gibbs_warmup, gibbs_samples, gibbs_thin : int, default 4, 2000, 2000, 5
        MCMC-FM chains, warm-up sweeps, kept draws per chain and sweeps per kept draw.

    Raises
    ------
    None of its own (a frozen dataclass; nothing is checked).

    Source: project addition (validation level 2).
    """

    n_users: int = 30
    n_items: int = 20
    n_multi: int = 3
    n_rows: int = 200
    n_new: int = 10
    K: int = 2
    seed: int = 0
    truth_hyper: ppl.FMFlatHyper = ppl.FMFlatHyper(alpha=4.0, sigma_0=1.0, sigma_w=4.0, sigma_v=2.0)
    hyper: ppl.FMHierHyper = ppl.FMHierHyper(alpha_0p=2.0, beta_0p=2.0)
    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 1000
    target_accept: float = 0.95
    gibbs_chains: int = 4
    gibbs_warmup: int = 2000
    gibbs_samples: int = 2000
    gibbs_thin: int = 5


def crosscheck_data(config: CrosscheckConfig = CrosscheckConfig()):
    """(design, new (rows, cols, values, n_new)) of the cross-check."""
    c = config
    X, group, _, _ = small_design(c.n_users, c.n_items, c.n_multi, c.n_rows + c.n_new, seed=c.seed)
    with jax.enable_x64(True):
        _, y = ppl.simulate(jax.random.PRNGKey(c.seed + 10), X.row, X.col, X.data, X.shape[0], group, c.K,
                            c.truth_hyper)
    X = X.tocsr()
    train, new = X[: c.n_rows].tocoo(), X[c.n_rows:].tocoo()
    design = FMDesign.from_scipy(train, np.asarray(y)[: c.n_rows], group)
    return design, (new.row, new.col, new.data, c.n_new)


def identifiable_quantities(idata, design: FMDesign, new) -> dict[str, np.ndarray]:
    """Quantities invariant to the sign flips and permutations of the factors.

    Parameters
    ----------
    idata : arviz.InferenceData
        Posterior with w0 (chain, draw), w (chain, draw, D), V (chain, draw, D, K), alpha (chain, draw).
    design : custom_inference.fm_design.FMDesign
        The training design (N rows).
    new : tuple
        (rows int (M,), cols int (M,), values float (M,), n_new) of the new rows.

    Returns
    -------
    dict of str to numpy.ndarray
        ``yhat_train`` (chain, draw, N) and ``yhat_new`` (chain, draw, n_new) float64; ``log_alpha``
        (chain, draw, 1) in the draws' dtype.

    Raises
    ------
    ValueError
        ``idata`` has no posterior group.
    KeyError
        A variable is missing.

    Source: project addition (validation level 2).
    """
    p = arviz_io.group_arrays(idata)
    C, S = p["w0"].shape[:2]
    flat = lambda a: jnp.asarray(a.reshape((C * S,) + a.shape[2:]), jnp.float64)  # noqa: E731

    def yhat(rows, cols, values, n):
        f = jax.vmap(lambda a, b, c: ppl.predict_mean({"w0": a, "w": b, "V": c}, rows, cols, values, n))
        return np.asarray(f(flat(p["w0"]), flat(p["w"]), flat(p["V"]))).reshape(C, S, n)

    with jax.enable_x64(True):
        out = {"yhat_train": yhat(jnp.asarray(design.rows), jnp.asarray(design.cols),
                                  jnp.asarray(design.values, jnp.float64), design.n_rows),
               "yhat_new": yhat(jnp.asarray(new[0]), jnp.asarray(new[1]), jnp.asarray(new[2], jnp.float64), new[3])}
    out["log_alpha"] = np.log(p["alpha"])[..., None]
    return out


def nuts_reference(config: CrosscheckConfig = CrosscheckConfig(), *, reference: str | None = None,
                   progress: bool = False):
    """The NUTS reference "mcmc-fm" of the cross-check problem.

    Stored when one matches the design and settings, else a fresh NumPyro NUTS run on `ppl_models.fm.model_hier`.
    Groups: those of `identifiable_quantities`.

    Parameters
    ----------
    config : CrosscheckConfig, default CrosscheckConfig()
        The problem and NUTS settings.
    reference : {None, "stored", "rerun"}, keyword-only, default None
        None: the stored reference when it matches, else a fresh run; "stored": the stored one or an error;
        "rerun": a fresh run (`validation.checks.references.nuts_reference`).
    progress : bool, keyword-only, default False
        Show NUTS's progress bar.

    Returns
    -------
    validation.checks.references.Reference
        The reference's draws of the identifiable quantities, gates and settings.

    Raises
    ------
    ValueError
        ``reference`` is not None, "stored" or "rerun", or is "stored" and no stored reference matches.

    Source: project addition.
    """
    c = config
    design, new = crosscheck_data(c)
    settings = xc.NutsSettings.of(c)
    key = xc.problem_key((design.rows, design.cols, design.values, design.y, design.group, *new[:3]),
                         (design.n_rows, design.n_features, c.K, c.hyper, new[3]), settings)
    run = lambda: xc.run_nuts(  # noqa: E731
        ppl.model_hier, design.rows, design.cols, design.values, design.n_rows, design.n_features, design.group, c.K,
        c.hyper, jnp.asarray(design.y), seed=c.seed, num_chains=c.num_chains, num_warmup=c.num_warmup,
        num_samples=c.num_samples, target_accept=c.target_accept, progress=progress, n_groups=design.n_groups)
    return xc.nuts_reference("mcmc-fm", key, settings, run, lambda idata: identifiable_quantities(idata, design, new),
                             reference=reference)


def run_crosscheck(config: CrosscheckConfig = CrosscheckConfig(), *, progress: bool = False,
                   reference: str | None = None) -> xc.CrosscheckResult:
    """MCMC-FM against NUTS on `ppl_models.fm.model_hier`.

    `validation.checks.crosscheck.exact_crosscheck`: both runs gated, `compare_exact` verdict; NUTS stored when it
    matches (`nuts_reference`).

    Parameters
    ----------
    config : CrosscheckConfig, default CrosscheckConfig()
        Data and run settings.
    progress : bool, keyword-only, default False
        Show progress bars.
    reference : {None, "stored", "rerun"}, keyword-only, default None
        As in `nuts_reference`.

    Returns
    -------
    validation.checks.crosscheck.CrosscheckResult
        Method "exact"; its ``extra`` holds the training ``design``.

    Raises
    ------
    ValueError
        A bad ``reference``, or "stored" with no matching stored reference.

    Source: project addition (validation level 2).
    """
    import time

    c = config
    design, new = crosscheck_data(c)
    t0 = time.perf_counter()
    g = mc.sample(jax.random.PRNGKey(c.seed + 1), design, c.K, c.hyper, num_chains=c.gibbs_chains,
                  num_warmup=c.gibbs_warmup, num_samples=c.gibbs_samples, thin=c.gibbs_thin, progress=progress)
    seconds = time.perf_counter() - t0
    settings = {
        "data": f"{design.n_rows} training rows, {design.n_features} features, {new[3]} new rows; K = {c.K}",
        "MCMC-FM": xc.gibbs_line(c, seconds),
    }
    return xc.exact_crosscheck(
        model="mcmc-fm", solver="MCMC-FM Gibbs", ref=nuts_reference(c, reference=reference, progress=progress),
        solver_quantities=identifiable_quantities(g, design, new), solver_seconds=seconds, config=c,
        settings=settings, solver_name="MCMC-FM", extra={"design": design}, solver_idata=g)


# ------------------------------------------------------------------------------------------
# SBC


@dataclass(frozen=True)
class SBCConfig:
    """One SBC simulation of MCMC-FM.

    A fixed small design (10 users, 8 items, 40 instances, one-hot | one-hot, K = 2), parameters and y from the
    MCMC-FM prior ``hyper`` (hyperpriors tighter than the defaults so that prior draws give data sets of sane scale),
    MCMC-FM with 2 chains x 500 kept draws thinned by 4 after 400 warm-up sweeps (S = 1000 >= L = 99 x
    ESS-thinning).

    Parameters
    ----------
    n_users, n_items, n_multi : int, default 10, 8, 0
        Design sizes (`small_design`, seed 12345).
    n_rows : int, default 40
        Instances.
    K : int, default 2
        Factor dimension.
    hyper : ppl_models.fm.FMHierHyper, optional
        The prior that simulates and fits; default mu_0 = 0, sigma_0 = 1, nu_0 = 1, alpha_0p = 5, beta_0p = 5,
        alpha_0 = 5, beta_0 = 2.
    chains, warmup, samples, thin : int, default 2, 400, 500, 4
        MCMC-FM chains, warm-up sweeps, kept draws per chain and sweeps per kept draw.

    Raises
    ------
    None of its own (a frozen dataclass; nothing is checked).

    Source: project addition (SBC, Talts et al. 2018).
    """

    n_users: int = 10
    n_items: int = 8
    n_multi: int = 0
    n_rows: int = 40
    K: int = 2
    hyper: ppl.FMHierHyper = ppl.FMHierHyper(mu_0=0.0, sigma_0=1.0, nu_0=1.0, alpha_0p=5.0, beta_0p=5.0,
                                             alpha_0=5.0, beta_0=2.0)
    chains: int = 2
    warmup: int = 400
    samples: int = 500
    thin: int = 4


def fm_functionals(design: FMDesign) -> dict:
    """Scalar functionals for SBC of MCMC-FM.

    log alpha; yhat of the first 3 training rows; w0 plus the mean of the w of every group (the level of the
    predictions); log sigma_w of group 0.

    Parameters
    ----------
    design : custom_inference.fm_design.FMDesign
        The design whose first 3 rows are scored.

    Returns
    -------
    dict of str to callable
        Each a function of one draw (w0 scalar, w (D,), V (D, K), alpha scalar, sigma_w (G,)) giving a float array:
        log_alpha (1,), yhat (3,), level (1,), log_sigma_w0 (1,).

    Raises
    ------
    None of its own.

    Source: project addition (SBC functionals of the FM of 004_90693a0965f06816.txt, eq. 2.17).
    """
    keep = np.asarray(design.rows) < 3
    r, c, v = np.asarray(design.rows)[keep], np.asarray(design.cols)[keep], np.asarray(design.values)[keep]
    g = np.asarray(design.group)

    def yhat(p):
        return np.asarray(ppl.predict_mean({k: jnp.asarray(p[k]) for k in ("w0", "w", "V")}, r, c, v, 3))

    def level(p):
        w = np.asarray(p["w"])
        return np.array([float(p["w0"]) + sum(w[g == gi].mean() for gi in range(design.n_groups))])

    return {
        "log_alpha": lambda p: np.log(np.asarray(p["alpha"])).reshape(1),
        "yhat": yhat,
        "level": level,
        "log_sigma_w0": lambda p: np.log(np.asarray(p["sigma_w"])[:1]),
    }


def sbc_adapters(config: SBCConfig = SBCConfig()):
    """``(simulate, fit, functionals)`` for `validation.checks.sbc.run_sbc` with MCMC-FM.

    ``simulate(seed)`` returns (dict of float64 parameter arrays, y float64 (N,)) drawn from ``config.hyper`` on the
    fixed design; ``fit(y, seed)`` runs `custom_inference.fm_mcmc.sample` and returns the posterior draws with the
    chains flattened, e.g. V (S, D, K), S = chains x samples.

    Parameters
    ----------
    config : SBCConfig, default SBCConfig()
        Design sizes, K, prior and run settings.

    Returns
    -------
    tuple
        (simulate, fit, functionals); functionals as `fm_functionals` of the fixed design.

    Raises
    ------
    None of its own.

    Source: project addition (SBC, Talts et al. 2018) on the prior of 004_90693a0965f06816.txt, eqs. 2.22-2.30.
    """
    c = config
    X, group, _, _ = small_design(c.n_users, c.n_items, c.n_multi, c.n_rows, seed=12345)
    template = FMDesign.from_scipy(X, np.zeros(X.shape[0]), group)

    def simulate(seed: int):
        with jax.enable_x64(True):
            truth, y = ppl.simulate(jax.random.PRNGKey(seed), X.row, X.col, X.data, X.shape[0], group, c.K, c.hyper)
        return {k: np.asarray(v) for k, v in truth.items()}, np.asarray(y)

    def fit(y, seed: int):
        design = FMDesign.from_scipy(X, y, group)
        idata = mc.sample(jax.random.PRNGKey(seed), design, c.K, c.hyper, num_chains=c.chains, num_warmup=c.warmup,
                          num_samples=c.samples, thin=c.thin, progress=False)
        p = arviz_io.group_arrays(idata)
        return {k: v.reshape((-1,) + v.shape[2:]) for k, v in p.items()}

    return simulate, fit, fm_functionals(template)


# ------------------------------------------------------------------------------------------
# Errata


def _algorithm1_check(form: str) -> tuple[bool, float]:
    """Is the minimizer of the objective the fixed point of Algorithm 1's mean step?

    "printed": eq. 2.18 (each parameter penalized once); "corrected": the frequency-weighted
    penalty (lambda times the number of instances a parameter occurs in). At the objective's
    minimizer, the average over all instances of Algorithm 1's step direction (lines 3, 5, 7,
    `custom_inference.fm_sgd.instance_gradients`) must vanish (max abs <= 1e-6) if Algorithm 1
    descends that objective. Returns (passed, max abs mean step)."""
    from scipy.optimize import minimize

    with jax.enable_x64(True):
        X, group, _, _ = small_design(5, 4, 0, 20, seed=7)
        K = 2
        _, y = ppl.simulate(jax.random.PRNGKey(3), X.row, X.col, X.data, 20, group, K, ppl.FMFlatHyper(alpha=10.0))
        design = FMDesign.from_scipy(X, np.asarray(y), group)
        D = design.n_features
        lam = (jnp.asarray(0.3), jnp.asarray([0.2, 0.4]), jnp.asarray([[0.25, 0.15], [0.35, 0.3]]))
        counts = jnp.asarray(np.bincount(np.asarray(design.cols), minlength=D), jnp.float64)
        mult0, mult = (design.n_rows, counts) if form == "corrected" else (1.0, jnp.ones(D))
        g = jnp.asarray(design.group)

        def unpack(t):
            return fm_sgd.FMParams(t[0], t[1:1 + D], t[1 + D:].reshape(D, K))

        def obj(t):
            p = unpack(t)
            r = jnp.asarray(design.y) - fm_sgd.predict(p, design)
            return (jnp.sum(r ** 2) + lam[0] * mult0 * p.w0 ** 2 + jnp.sum(lam[1][g] * mult * p.w ** 2)
                    + jnp.sum(lam[2][g] * mult[:, None] * p.V ** 2))

        f = jax.jit(jax.value_and_grad(obj))
        t0 = 0.3 * np.random.default_rng(0).normal(size=1 + D + D * K)
        res = minimize(lambda t: tuple(np.asarray(a, np.float64) for a in f(jnp.asarray(t))), t0, jac=True,
                       method="L-BFGS-B", options=dict(maxiter=5000, gtol=1e-12, ftol=1e-15))
        C, Xv = fm_sgd.padded_rows(design)
        step = fm_sgd.instance_gradients(unpack(jnp.asarray(res.x)), jnp.asarray(C), jnp.asarray(Xv),
                                         jnp.asarray(design.y), g, lam)
        value = float(max(jnp.max(jnp.abs(s)) for s in step))
    return value <= 1e-6, value


ERRATA: tuple[Erratum, ...] = (
    Erratum(
        _SEED004, "Algorithm 1 (SGD-FM) lines 3, 5, 7 vs eq. 2.18",
        "objective sum_n l(yhat_n, y_n) + sum_theta lambda_theta theta^2 (eq. 2.18), optimized by Algorithm 1",
        "Algorithm 1 descends sum_n l(yhat_n, y_n) + lambda_0 N w0^2 + sum_i lambda_i n_i w_i^2 + sum_ik lambda_ik n_i v_ik^2 "
        "(n_i = #instances with x_ni != 0); to descend eq. 2.18 the per-instance penalty must be 2 lambda theta / n_theta",
        "the regularization gradient 2 lambda theta is added at every instance in which theta occurs, so one epoch "
        "penalizes theta n_theta times; the fixed point of Algorithm 1 is not the minimizer of eq. 2.18",
        "stationarity", _algorithm1_check,
    ),
)


# ------------------------------------------------------------------------------------------
# MovieLens


def movielens_design(path, dtype=np.float64) -> FMDesign:
    """FMDesign of a MovieLens ratings file: X = [onehot(user) | onehot(item)], groups user, item;
    y = rating. ``path`` as for `validation.data.datasets.load_movielens`."""
    from validation.data.datasets import index_ratings, load_movielens

    idx = index_ratings(load_movielens(path))
    f = idx.frame
    N, I, J = len(f), idx.n_users, idx.n_items
    ar = np.arange(N)
    X = sp.hstack([sp.csr_matrix((np.ones(N), (ar, f["u"].to_numpy())), shape=(N, I)),
                   sp.csr_matrix((np.ones(N), (ar, f["i"].to_numpy())), shape=(N, J))]).tocoo()
    return FMDesign.from_scipy(X, f["rating"].to_numpy(), np.r_[np.zeros(I, int), np.ones(J, int)],
                               group_names=("user", "item"), dtype=dtype)


def seconds_per_sweep(design: FMDesign, K: int, *, n_sweeps: int = 20, dtype=np.float64, seed: int = 0):
    """(wall, cpu) seconds per MCMC-FM sweep of one chain, compile excluded: ``n_sweeps`` sweeps under
    one compiled ``lax.scan``. ``cpu`` is the process CPU time (all threads), the fairer number on a
    shared machine."""
    import time

    hyper = ppl.FMHierHyper()
    with jax.enable_x64(np.dtype(dtype) == np.float64):
        d = mc._as_jax(design, dtype)
        hyp = ppl.FMHierHyper(*(jnp.asarray(v, dtype) for v in hyper))
        st = mc.init(jax.random.PRNGKey(seed), d, K, hyper, dtype=dtype)
        run = jax.jit(lambda k, s, dd, hh: jax.lax.scan(lambda c, kk: (mc.step(kk, c, dd, hh)[0], None), s,
                                                         jax.random.split(k, n_sweeps))[0])
        jax.block_until_ready(run(jax.random.PRNGKey(1), st, d, hyp))
        t0, c0 = time.perf_counter(), time.process_time()
        out = run(jax.random.PRNGKey(2), st, d, hyp)
        jax.block_until_ready(out)
        return (time.perf_counter() - t0) / n_sweeps, (time.process_time() - c0) / n_sweeps


# ------------------------------------------------------------------------------------------
# the registry's view of MCMC-FM (`validation.checks.registry`)

# ------------------------------------------------------------------------------------------
# The bridge (`validation.checks.bridge`): each Gibbs block as a NumPyro CustomGibbs block beside NUTS

# the bridge problem: 8 users, 6 items one-hot + a 2-feature multi-hot group, 40 rows, 4 new rows, K = 2,
# NUTS target accept 0.99 (at 0.95: 1 divergent transition); its NUTS reference "mcmc-fm-bridge" is stored
BRIDGE_CONFIG = CrosscheckConfig(n_users=8, n_items=6, n_multi=2, n_rows=40, n_new=4, K=2, target_accept=0.99)

_BRIDGE_BLOCKS = {"alpha": ("alpha",), "w0": ("w0",), "hyper_w": ("sigma_w", "mu_w"),
                  "hyper_v": ("sigma_v", "mu_v"), "w": ("w",), "V": ("V",)}


def numpyro_block(block: str, design: FMDesign, hyper):
    """The MCMC-FM Gibbs block ``block`` as a ``gibbs_fn`` for `numpyro.infer.CustomGibbs`.

    Blocks (sites of `ppl_models.fm.model_hier`): "alpha" (`custom_inference.fm_mcmc.alpha_conditional`), "w0"
    (`w0_conditional`), "hyper_w" / "hyper_v" (the per-group normal-gamma pair: precision given the mean,
    `sample_group_precision`, then the mean given the new precision, `sample_group_mean`), "w"
    (`w_block_conditional` for each feature block of the design in turn) and "V" (`v_block_conditional` for each
    feature block and factor in turn); the caches e, q are recomputed (`caches`) before every conditional.

    Parameters
    ----------
    block : {"alpha", "w0", "hyper_w", "hyper_v", "w", "V"}
        The block updated.
    design : custom_inference.fm_design.FMDesign
        The design and y.
    hyper : ppl_models.fm.FMHierHyper
        What the conditional is given.

    Returns
    -------
    callable
        ``gibbs_fn(rng_key, gibbs_sites, hmc_sites) -> {site: jax.Array}`` of the sites' shapes (alpha, w0 scalars;
        sigma_w, mu_w (G,); sigma_v, mu_v (G, K); w (D,); V (D, K)), in the dtype of the sites.

    Raises
    ------
    ValueError
        An unknown ``block``.

    Source: derived conditionals of `custom_inference.fm_mcmc` (``004_90693a0965f06816.txt`` eqs. 2.22-2.30); the
    NumPyro block is a project addition.
    """
    if block not in _BRIDGE_BLOCKS:
        raise ValueError(f"block must be one of {sorted(_BRIDGE_BLOCKS)}, got {block!r}")
    d = jax.tree_util.tree_map(jnp.asarray, design)
    h = hyper
    G = design.n_groups

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        p = {**hmc_sites, **gibbs_sites}
        dt = jnp.asarray(p["w"]).dtype
        K = p["V"].shape[1]
        state = mc.FMMCMCState(*(jnp.asarray(p[n], dt) for n in mc.FMMCMCState._fields[:8]),
                               jnp.zeros(design.n_rows, dt), jnp.zeros((design.n_rows, K), dt))
        state = mc.caches(state, d)
        if block == "alpha":
            shape, rate = mc.alpha_conditional(state, d, h)
            return {"alpha": jax.random.gamma(rng_key, jnp.asarray(shape, dt)) / rate}
        if block == "w0":
            return {"w0": sample_normal_natural(rng_key, *mc.w0_conditional(state, d, h))}
        if block.startswith("hyper"):
            x = state.w if block == "hyper_w" else state.V
            s_name, m_name = _BRIDGE_BLOCKS[block]
            k_s, k_m = jax.random.split(rng_key)
            sigma = mc.sample_group_precision(k_s, x, d.group, G, p[m_name], h.mu_0, h.nu_0, h.alpha_0p, h.beta_0p)
            return {s_name: sigma, m_name: mc.sample_group_mean(k_m, x, d.group, G, sigma, h.mu_0, h.nu_0)}
        for b in range(design.n_blocks):
            in_block = d.block == b
            if block == "w":
                draw = sample_normal_natural(jax.random.fold_in(rng_key, b), *mc.w_block_conditional(state, d, h, b))
                state = mc.caches(state._replace(w=jnp.where(in_block, draw, state.w)), d)
            else:
                for k in range(K):
                    key = jax.random.fold_in(rng_key, b * K + k)
                    draw = sample_normal_natural(key, *mc.v_block_conditional(state, d, h, b, k))
                    state = mc.caches(state._replace(V=state.V.at[:, k].set(jnp.where(in_block, draw, state.V[:, k]))), d)
        return {block: getattr(state, block)}

    return gibbs_fn


def bridge_problem(config: CrosscheckConfig = BRIDGE_CONFIG):
    """The MCMC-FM bridge problem (`validation.checks.bridge.Problem`) of ``config``.

    `ppl_models.fm.model_hier` on the simulated design of ``config``, compared on `identifiable_quantities`.

    Parameters
    ----------
    config : CrosscheckConfig, default BRIDGE_CONFIG
        The problem (default: 8 users, 6 items, 2 multi-hot features, 40 rows, 4 new rows, K = 2, target accept
        0.99; its NUTS reference "mcmc-fm-bridge" is stored).

    Returns
    -------
    validation.checks.bridge.Problem
        model, args, kwargs (n_groups), data (the design), hyper, quantities, reference (a callable: the stored
        NUTS reference), target_accept, description.

    Raises
    ------
    ValueError
        No stored reference matches (when ``reference`` is called).

    Source: project addition.
    """
    from validation.checks import bridge

    c = config
    design, new = crosscheck_data(c)
    return bridge.Problem(
        model=ppl.model_hier,
        args=(np.asarray(design.rows), np.asarray(design.cols), np.asarray(design.values, np.float64), design.n_rows,
              design.n_features, np.asarray(design.group), c.K, c.hyper, np.asarray(design.y, np.float64)),
        kwargs={"n_groups": design.n_groups}, data=design, hyper=c.hyper,
        quantities=lambda idata: identifiable_quantities(idata, design, new),
        reference=lambda: nuts_reference(c, reference="stored"), target_accept=c.target_accept,
        description=f"{design.n_rows} rows, {design.n_features} features, {new[3]} new rows, K = {c.K}")


def _bridge_spec():
    import functools

    from validation.checks import bridge

    # default (the default test suite's block, 4 chains x (500 warm-up + 1000 draws), seed 1): hyper_v passes
    # with margin (max |z| 1.95 against the Bonferroni 2.58, hybrid R-hat <= 1.006, bulk ESS >= 890); alpha
    # passed at the edge (2.41, bulk ESS of log alpha 437) and costs 29 CPU s of sampling per run
    return bridge.BridgeSpec(
        problem=bridge_problem,
        blocks={b: bridge.Block(s, functools.partial(numpyro_block, b)) for b, s in _BRIDGE_BLOCKS.items()},
        default="hyper_v", wrong_hyper=lambda h: h._replace(alpha_0=h.alpha_0 + 20.0), wrong_block="alpha")


BRIDGE = _bridge_spec()


SPEC = registry.ModelSpec(
    name="mcmc-fm",
    solvers=(registry.SolverSpec("gibbs", "exact", run_crosscheck, CrosscheckConfig, "mcmc-fm",
                                 registry.lazy("custom_inference.fm_mcmc:ALGORITHM"), frontdoor="mcmc-fm",
                                 evaluations={**dict.fromkeys(("counts", "counts+side"), registry.EvaluationEntry(
                                     registry.lazy("validation.models.fm_eval:counts_mcmc_fm"),
                                     defaults={"warmup": 50, "samples": 100},
                                     flags={"fm_warmup": "warmup", "fm_samples": "samples"})),
                                     "ratings": registry.EvaluationEntry(
                                     registry.lazy("validation.models.fm_eval:ratings_mcmc_fm"), data="fm",
                                     setting=registry.lazy("validation.models.fm_eval:gibbs_setting", "MCMC-FM"),
                                     defaults={"warmup": 50, "samples": 150}, flags={"warmup": "warmup", "samples": "samples"})}),),
    references=(registry.ReferenceSpec("mcmc-fm", nuts_reference, CrosscheckConfig),
                registry.ReferenceSpec("mcmc-fm-bridge", nuts_reference, BRIDGE_CONFIG)),
    checks={"conditionals": conditional_checks},
    sbc={"gibbs": sbc_adapters},
    sbc_config=SBCConfig,
    errata=(ERRATA,),
    bridge=registry.lazy("validation.models.fm_mcmc:BRIDGE"),
    notebook="notebooks/gaussian_factorization.py",
)
