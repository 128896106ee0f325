r"""Validation of the NPFM / PPFM Gibbs samplers (`custom_inference.pfm`) against their programs.

Level 1 (update level):
- `conditional_checks`: every Gamma conditional vs the normalised conditional on a grid. The
  prior comes from the NumPyro program (`ppl_models.pfm.model`, ``likelihood=False`` for the
  sites that see z); the likelihood of the rate variables is the *augmented* one of Lemma
  5.2.2, written out brute force over dense per-row latent counts z1_n, z2_ni, z3_nijk drawn
  here with numpy (not with the sampler's allocation); the sampler's conditional gets the sums
  of those z and its own cached exposures. Sites free of z (beta0, beta, delta, c) use the
  full program (y included).
- `collapsed_checks`: each CRT-augmented shape draw (alpha0, alpha_i, zeta_i, gamma0) against
  the exact collapsed conditional: (a) the closed form (negative-binomial marginal) against
  numerical integration of the augmented joint over the rate variable(s) (TV distance), and
  (b) the sampler's two-step kernel (CRT tables, then Gamma) applied to 20,000 draws from the
  exact collapsed conditional must leave it invariant (Kolmogorov-Smirnov p-value).
- `dense_checks`: cached sums (N, X_i, E_ik, s_k) vs their dense twins, in both zero modes,
  with excluded cells and side features.
- `allocation_checks`: allocation frequencies of one unit vs Lemma 5.2.2's multinomial over
  every term, including the pair choice (chi-square), and the count invariants.
- `sweep_order_check`: one update of (shape, rate) from exact posterior draws in the valid and
  in the chapter's order; the printed order breaks the joint (Fisher z of the correlation).

Level 2: `run_crosscheck(model="npfm"|"ppfm")` vs gated NUTS, exact-vs-exact.
Level 3: `sbc_adapters(model, config)` for `validation.checks.sbc.run_sbc`; ``model`` may be
"npfm-printed" / "ppfm-printed" (the chapter's sweep order), which SBC must reject.
Errata: `ERRATA`. Experiments (the chapter's 60 x 90 two-block matrix, MovieLens P3): `validation.evaluation.pfm_experiments`.

Source: ``004_90693a0965f06816.txt`` ch. 5.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import scipy.sparse as sp
from numpyro.infer.util import log_density
from scipy import stats
from scipy.special import gammaln as sp_gammaln

from custom_inference import arviz_io
from custom_inference import pfm
from ppl_models import pfm as ppl

from validation.checks import crosscheck as xc
from validation.checks.errata import Erratum
from validation.checks.updates import conditional_distance, max_relative_difference

__all__ = [
    "conditional_checks",
    "collapsed_checks",
    "dense_checks",
    "allocation_checks",
    "sweep_order_check",
    "CrosscheckConfig",
    "run_crosscheck",
    "identifiable_quantities",
    "SBCConfig",
    "sbc_adapters",
    "pfm_functionals",
    "ERRATA",
]

_TV_TOL = 1e-4  # trapezoid error on a 20001-point log grid is ~1e-8; a wrong parameter gives > 1e-2
_KS_ALPHA = 1e-3  # false-alarm rate of each invariance KS test

# distinct hyperparameters so that a swapped symbol shows
_HYPER = ppl.PFMHyper(a_0=1.3, b_0=0.7, c_0=2.1, d_0=1.6, a=0.9, b=1.4, c=1.8, d=1.1, e=1.2, f=0.8, g=2.4, h=1.9,
                      e_0=2.2, f_0=1.5, g_0=1.7, h_0=0.6)


# ------------------------------------------------------------------------------
# small problems


def _cells_data(y, cu, cj, I: int, J: int, Uf, Vf, zeros: str = "all", exclude=None):
    """(dense counts Y (I, J), the sampler's PFMData) for counts y (N,) at the design's cells (cu, cj):
    all cells (``zeros="all"``, minus ``exclude``) or the observed ones only."""
    Y = np.zeros((I, J))
    Y[cu, cj] = y
    if zeros == "all":
        data = pfm.PFMData.from_matrix(sp.csr_matrix(Y), user_features=Uf, item_features=Vf, zeros="all",
                                       exclude=exclude)
    else:
        obs = sp.coo_matrix((y, (cu, cj)), shape=(I, J))
        data = pfm.PFMData.from_matrix(obs, user_features=Uf, item_features=Vf, zeros="observed")
    return Y, data


def _small_problem(variant: str, seed: int = 0, *, I: int = 3, J: int = 3, K: int = 2, side: bool = True,
                   zeros: str = "all", exclude=None, hyper=_HYPER):
    """A small design (all cells, one-hot ids, one user side feature and two item side features
    when ``side``), parameters and y drawn from the program's generative process (`_draw_program`,
    numpy). Returns dict with the design pieces, truth and the sampler's PFMData (float64)."""
    rng = np.random.default_rng(seed)
    Uf = sp.csr_matrix(rng.integers(0, 2, size=(I, 1)).astype(float) * rng.uniform(0.5, 2.0, size=(I, 1))) if side else None
    Vf = sp.csr_matrix((rng.uniform(size=(J, 2)) < 0.6) * 1.0) if side else None
    rows, cols, vals, N, D, cu, cj = ppl.cells_design(I, J, user_features=Uf, item_features=Vf, exclude=exclude)
    truth, yr = _draw_program(rng, rows, cols, vals, N, D, K, hyper, variant)
    Y, data = _cells_data(yr, cu, cj, I, J, Uf, Vf, zeros, exclude)
    return dict(rows=rows, cols=cols, vals=vals, N=N, D=D, cu=cu, cj=cj, y=yr, Y=Y, truth=truth, data=data, K=K,
                variant=variant, hyper=hyper, Uf=Uf, Vf=Vf)


def _draw_program(rng, rows, cols, vals, N: int, D: int, K: int, hyper, variant: str):
    """One draw from `ppl_models.pfm.model`'s generative process, with numpy: every site in the
    program's order and parametrization (Gamma(shape, rate) -> numpy scale 1 / rate), then
    y ~ Poisson(rates) with the rates of eqs. 5.6 / 5.20 over the design's COO rows. Returns
    (truth: dict site -> float64 array of the site's shape, y (N,) float64).

    Numpy rather than a jitted trace of the program: compiling that trace cost about 11 CPU s per
    problem (each Gamma shape compiles its own sampler); `dense_checks`' log_joint rows tie these
    sites to the program's log density. Raises ValueError for a ``variant`` other than "npfm" /
    "ppfm", as the program does."""
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    h = hyper

    def gamma(shape, rate, size=None):
        return rng.gamma(shape, 1.0 / np.asarray(rate, dtype=float), size=size)

    t = {}
    t["alpha0"] = gamma(h.a_0, h.b_0)
    t["beta0"] = gamma(h.c_0, h.d_0)
    t["w0"] = gamma(t["alpha0"], t["beta0"])
    t["alpha"] = gamma(h.a, h.b, D)
    t["beta"] = gamma(h.c, h.d, D)
    t["w"] = gamma(t["alpha"], t["beta"])
    t["zeta"] = gamma(h.e, h.f, D)
    t["delta"] = gamma(h.g, h.h, K)
    t["V"] = gamma(t["zeta"][:, None], t["delta"][None, :], (D, K))
    r = np.ones(K)
    if variant == "npfm":
        t["gamma0"] = gamma(h.e_0, h.f_0)
        t["c"] = gamma(h.g_0, h.h_0)
        t["r"] = r = gamma(t["gamma0"] / K, t["c"], K)
    X = np.zeros((N, D))
    np.add.at(X, (rows, cols), vals)
    q = X @ t["V"]
    lam = t["w0"] + X @ t["w"] + 0.5 * (q ** 2 - (X ** 2) @ (t["V"] ** 2)) @ r  # sum_{i<j} x_i x_j v_ik v_jk
    y = rng.poisson(lam).astype(float)
    return {n: np.asarray(v, dtype=float) for n, v in t.items()}, y


def _dense_X(p) -> np.ndarray:
    X = np.zeros((p["N"], p["D"]))
    np.add.at(X, (p["rows"], p["cols"]), p["vals"])
    return X


def _state(p):
    cls = pfm.NPFMState if p["variant"] == "npfm" else pfm.PPFMState
    return cls(**{n: jnp.asarray(p["truth"][n]) for n in cls._fields})


def _dense_z(rng, p):
    """Per-row latent counts (z1 (N,), z2 (N, D), z3 (N, D, D, K) upper triangle) drawn by
    numpy from Lemma 5.2.2's multinomial over every term of each row's rate."""
    X = _dense_X(p)
    t = p["truth"]
    V = t["V"]
    r = t["r"] if p["variant"] == "npfm" else np.ones(V.shape[1])
    N, D = X.shape
    K = V.shape[1]
    z1 = np.zeros(N)
    z2 = np.zeros((N, D))
    z3 = np.zeros((N, D, D, K))
    iu = np.triu_indices(D, 1)
    for n in range(N):
        lin = X[n] * t["w"]
        pair = (X[n][:, None] * X[n][None, :])[..., None] * V[:, None, :] * V[None, :, :] * r  # (D, D, K)
        pv = pair[iu]  # (P, K)
        probs = np.concatenate([[t["w0"]], lin, pv.reshape(-1)])
        draw = rng.multinomial(int(p["y"][n]), probs / probs.sum())
        z1[n] = draw[0]
        z2[n] = draw[1:1 + D]
        z3[n][iu] = draw[1 + D:].reshape(-1, K)
    return X, z1, z2, z3


def _stats_from_dense(z1, z2, z3) -> pfm.SuffStats:
    both = z3 + np.transpose(z3, (0, 2, 1, 3))
    return pfm.SuffStats(jnp.asarray(z1.sum()), jnp.asarray(z2.sum(0)), jnp.asarray(both.sum((0, 2))),
                         jnp.asarray(z3.sum((0, 1, 2))))


def _aug_loglik(X, z1, z2, z3, w0, w, V, r):
    """Brute-force augmented log-likelihood sum of log Pois(z; term rate) (Lemma 5.2.2)."""
    def lp(z, lam):
        lam = np.maximum(lam, 1e-300)
        return np.sum(z * np.log(lam) - lam - sp_gammaln(z + 1))
    N, D = X.shape
    iu = np.triu_indices(D, 1)
    out = lp(z1, np.full(N, w0)) + lp(z2, X * w)
    pair = (X[:, :, None] * X[:, None, :])[..., None] * V[None, :, None, :] * V[None, None, :, :] * r  # (N,D,D,K)
    out += lp(z3[:, iu[0], iu[1]], pair[:, iu[0], iu[1]])
    return out


def _aug_loglik_jnp(X, z1, z2, z3, w0, w, V, r):
    """`_aug_loglik` in jnp (vmap-able over parameter values)."""
    from jax.scipy.special import gammaln as jgammaln

    def lp(z, lam):
        return jnp.sum(jnp.where(z > 0, z * jnp.log(jnp.maximum(lam, 1e-300)), 0.0) - lam - jgammaln(z + 1))

    N, D = X.shape
    iu = np.triu_indices(D, 1)
    out = lp(z1, jnp.full(N, w0)) + lp(z2, X * w)
    pair = (X[:, iu[0]] * X[:, iu[1]])[..., None] * (V[iu[0]] * V[iu[1]] * r)[None]  # (N, P, K)
    return out + lp(z3[:, iu[0], iu[1]], pair)


def conditional_checks(variant: str = "npfm", *, seed: int = 0, zeros: str = "all", sampler=None,
                       z3_form: str | None = None) -> pd.DataFrame:
    """Every Gamma conditional of the sampler vs the brute-force normalised conditional.

    Sites: w0, w (user id, item id, user side and item side feature), V (the same features, one
    factor), r (NPFM), beta0, beta, delta, c (NPFM). The problem is I = J = 3, K = 2, D = 9 (ids plus
    1 user and 2 item side features), float64.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    seed : int, default 0
        Seeds the problem (``seed``) and the latent counts z (``seed + 1``). Keyword-only.
    zeros : {"all", "observed"}, default "all"
        "all" (every cell a row, one excluded cell) or "observed"; any other value runs as
        "observed". Keyword-only.
    sampler : callable, optional
        The function under test (default `custom_inference.pfm.conditionals`):
        ``sampler(state, stats, expo, data, hyper)`` returns a dict site -> (shape, rate) of float
        arrays of the site's shape (w0 (), w (D,), V (D, K), r (K,), beta0 (), beta (D,), delta (K,),
        c ()). Keyword-only.
    z3_form : {None, "both", "one-sided"}, optional
        Not None: check only the v_ik whose count differs most between Z3_ik over both endpoints and
        over the pairs where i is the first index (eq. 5.10 read literally, the erratum's printed
        form), giving the sampler that form; any other non-None value runs as "both". Keyword-only.

    Returns
    -------
    pandas.DataFrame
        One row per checked site entry: site str, index str (the entry's index tuple), shape float64,
        rate float64 (the sampler's Gamma), tv_distance float64, passed bool (tv < 1e-4).

    Raises
    ------
    ValueError
        A ``variant`` other than "npfm" / "ppfm" (the problem's simulation); from
        `custom_inference.pfm.PFMData.from_matrix` when the simulated counts hold no positive count
        (zeros="all").
    KeyError
        A ``sampler`` whose dict lacks a checked site; whatever else ``sampler`` raises propagates.

    Source: ``004_90693a0965f06816.txt`` ch. 5.3.2, eqs. 5.8-5.15 (the conditionals checked),
    with the augmented likelihood of Lemma 5.2.2 / eq. 5.7 and eq. 5.10's Z3 (erratum); the
    brute-force check is a project addition.
    """
    sampler = sampler or pfm.conditionals
    exclude = (np.array([0]), np.array([1])) if zeros == "all" else None
    p = _small_problem(variant, seed, zeros=zeros, exclude=exclude)
    rng = np.random.default_rng(seed + 1)
    X, z1, z2, z3 = _dense_z(rng, p)
    rows_ = []
    I, J = 3, 3
    feats = [0, I, I + J, p["D"] - 1]  # user id, item id, user side, last item side feature
    with jax.enable_x64(True):
        data = jax.tree_util.tree_map(jnp.asarray, p["data"])
        state = _state(p)
        stats_ = _stats_from_dense(z1, z2, z3)
        one_sided = z3.sum((0, 2))
        if z3_form == "one-sided":
            stats_ = stats_._replace(z3=jnp.asarray(one_sided))
        expo = pfm.exposures(state, data)
        claimed = sampler(state, stats_, expo, data, p["hyper"])
        t = {n: np.asarray(v) for n, v in p["truth"].items()}
        args = (jnp.asarray(p["rows"]), jnp.asarray(p["cols"]), jnp.asarray(p["vals"]), p["N"], p["D"], p["K"],
                p["hyper"])
        targets = [("w0", ()), ("beta0", ()), ("delta", (1,))]
        targets += [("w", (i,)) for i in feats] + [("V", (i, 1)) for i in feats] + [("beta", (feats[1],))]
        if variant == "npfm":
            targets += [("r", (1,)), ("c", ())]
        if z3_form is not None:
            gap = np.asarray(_stats_from_dense(z1, z2, z3).z3) - one_sided
            targets = [("V", tuple(int(a) for a in np.unravel_index(np.argmax(gap), gap.shape)))]
        z_sites = {"w0", "w", "V", "r"}
        G = 401
        Xj, z1j, z2j, z3j = (jnp.asarray(a) for a in (X, z1, z2, z3))
        yj = jnp.asarray(p["y"])

        def target(vals, use_z):
            prior = log_density(ppl.model, args, {"variant": variant, "likelihood": False}, vals)[0]
            full = log_density(ppl.model, args + (yj,), {"variant": variant}, vals)[0]
            r = vals["r"] if variant == "npfm" else jnp.ones(p["K"])
            return jnp.where(use_z, prior + _aug_loglik_jnp(Xj, z1j, z2j, z3j, vals["w0"], vals["w"], vals["V"], r),
                             full)

        batch = {n: [] for n in t}
        use_z, grids, specs = [], [], []
        for site, idx in targets:
            sh, rt = (float(np.asarray(a)[idx]) if np.ndim(a) else float(a) for a in claimed[site])
            lo = max(1e-12, stats.gamma.ppf(1e-12, sh, scale=1 / rt))
            grid = np.geomspace(lo, stats.gamma.ppf(1 - 1e-12, sh, scale=1 / rt), G)
            for n, v in t.items():
                arr = np.broadcast_to(v, (G,) + np.shape(v)).copy()
                if n == site:
                    if idx == ():
                        arr[:] = grid
                    else:
                        arr[(slice(None),) + idx] = grid
                batch[n].append(arr)
            use_z.append(np.full(G, site in z_sites))
            grids.append(grid)
            specs.append((site, idx, sh, rt))
        batch = {n: jnp.asarray(np.concatenate(v)) for n, v in batch.items()}
        lu_all = np.asarray(jax.jit(jax.vmap(target))(batch, jnp.asarray(np.concatenate(use_z)))).reshape(len(targets), G)
        for (site, idx, sh, rt), grid, lu in zip(specs, grids, lu_all):
            tv = conditional_distance(lambda xs, lu=lu: lu, lambda xs, sh=sh, rt=rt: stats.gamma.logpdf(xs, sh, scale=1 / rt),
                                      grid)
            rows_.append({"site": site, "index": str(idx), "shape": sh, "rate": rt, "tv_distance": tv,
                          "passed": tv < _TV_TOL})
    return pd.DataFrame(rows_)


# ------------------------------------------------------------------------------
# collapsed shape conditionals


def _log_nb_collapsed(shape_grid, prior_a, prior_b, counts, exposures_, rates):
    """log of prior Ga(x; a, b) times prod_j [Gamma(x + Z_j) / Gamma(x)] (rate_j / (rate_j + m_j))^x
    on a grid of the shape x (the closed form the CRT augmentation targets)."""
    x = np.asarray(shape_grid)[:, None]
    Z = np.atleast_1d(counts)[None, :]
    m = np.atleast_1d(exposures_)[None, :]
    q = np.atleast_1d(rates)[None, :]
    lik = sp_gammaln(x + Z) - sp_gammaln(x) - x * np.log1p(m / q)
    return stats.gamma.logpdf(x[:, 0], prior_a, scale=1 / prior_b) + lik.sum(1)


def _log_integrated(shape_grid, prior_a, prior_b, counts, exposures_, rates, scale=1.0):
    """The same target by quadrature: log prior + sum_j log int Ga(u; scale x, rate_j) u^Z_j e^(-m_j u) du
    (the augmented Poisson likelihood up to x-free constants; ``scale`` = 1/K for gamma0)."""
    out = stats.gamma.logpdf(shape_grid, prior_a, scale=1 / prior_b)
    for Z, m, q in zip(np.atleast_1d(counts), np.atleast_1d(exposures_), np.atleast_1d(rates)):
        vals = []
        for x in shape_grid:
            a_post = scale * x + Z
            lo = stats.gamma.ppf(1e-14, a_post, scale=1 / (q + m))
            hi = stats.gamma.ppf(1 - 1e-14, a_post, scale=1 / (q + m))
            t = np.linspace(np.log(max(lo, 1e-300)), np.log(hi), 4001)
            u = np.exp(t)
            lf = stats.gamma.logpdf(u, scale * x, scale=1 / q) + Z * np.log(u) - m * u + t
            mx = lf.max()
            vals.append(mx + np.log(np.trapezoid(np.exp(lf - mx), t)))
        out = out + np.asarray(vals)
    return out


def collapsed_checks(variant: str = "npfm", *, seed: int = 0, n_draws: int = 20000) -> pd.DataFrame:
    """Each CRT-augmented shape draw vs the exact collapsed conditional (module docstring).

    For alpha0, alpha_i (one feature), zeta_i (one feature, all K factors) and gamma0 (NPFM):
    ``tv_closed_vs_quadrature`` between the closed-form collapsed density and the augmented joint
    integrated numerically over the rate variable(s); ``ks_pvalue`` of the sampler's kernel
    (`pfm.crt` tables, then `pfm.shape_conditionals`, then `pfm.gamma_draw`) applied to ``n_draws``
    exact draws (inverse CDF on a grid): invariance means uniform p-values. The problem is
    I = J = 3, K = 2, D = 9, float64.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    seed : int, default 0
        Seeds the problem, the latent counts (``seed + 1``) and the kernel's keys (``seed + 7``).
        Keyword-only.
    n_draws : int >= 1, default 20000
        Exact draws pushed through the kernel per site. Keyword-only.

    Returns
    -------
    pandas.DataFrame
        One row per site (3 for PPFM, 4 for NPFM): site str, index str (the entry's index tuple),
        tv_closed_vs_quadrature float64, ks_pvalue float64, passed bool (tv < 1e-4 and p > 1e-3).

    Raises
    ------
    ValueError
        A ``variant`` other than "npfm" / "ppfm" (the problem's simulation); from
        `custom_inference.pfm.PFMData.from_matrix` when the simulated counts hold no positive count;
        from numpy for a negative ``n_draws``.

    Source: ``004_90693a0965f06816.txt`` ch. 5.3.2, eqs. 5.16-5.19 (the CRT shape draws), by
    Lemmas 5.2.1, 5.2.3 and 5.2.6; the check itself is a project addition.
    """
    p = _small_problem(variant, seed)
    rng = np.random.default_rng(seed + 1)
    X, z1, z2, z3 = _dense_z(rng, p)
    h = p["hyper"]
    K = p["K"]
    out = []
    with jax.enable_x64(True):
        data = jax.tree_util.tree_map(jnp.asarray, p["data"])
        state = _state(p)
        st = _stats_from_dense(z1, z2, z3)
        expo = pfm.exposures(state, data)
        E, s_ = np.asarray(expo.E), np.asarray(expo.s)
        r = p["truth"]["r"] if variant == "npfm" else np.ones(K)
        i = 1
        specs = {
            "alpha0": (h.a_0, h.b_0, float(st.z1), p["data"].n_train, p["truth"]["beta0"], 1.0, ()),
            "alpha": (h.a, h.b, float(st.z2[i]), float(data.x_sum[i]), p["truth"]["beta"][i], 1.0, (i,)),
            "zeta": (h.e, h.f, np.asarray(st.z3[i]), r * E[i], p["truth"]["delta"], 1.0, (i,)),
        }
        if variant == "npfm":
            specs["gamma0"] = (h.e_0, h.f_0, np.asarray(st.L), s_, np.full(K, p["truth"]["c"]), 1.0 / K, ())
        for site, (pa, pb, Z, m, q, scale, idx) in specs.items():
            if scale != 1.0:
                Kf = 1.0 / scale
                closed = lambda g, pa=pa, pb=pb, Z=Z, m=m, q=q, Kf=Kf: (  # noqa: E731
                    stats.gamma.logpdf(g, pa, scale=1 / pb)
                    + (sp_gammaln(g[:, None] / Kf + Z[None]) - sp_gammaln(g[:, None] / Kf)
                       - (g[:, None] / Kf) * np.log1p(m / q)[None]).sum(1))
            else:
                closed = lambda g, pa=pa, pb=pb, Z=Z, m=m, q=q: _log_nb_collapsed(g, pa, pb, Z, m, q)  # noqa: E731
            hi = 60.0 if site != "gamma0" else 200.0
            coarse = np.geomspace(1e-4, hi, 161)
            lq = _log_integrated(coarse, pa, pb, Z, m, q, scale)
            tv = conditional_distance(lambda g, lq=lq: np.interp(np.log(g), np.log(coarse), lq), closed, coarse)
            # invariance of the CRT kernel: exact draws by inverse CDF on a fine grid
            fine = np.geomspace(1e-6, hi, 200001)
            lp = closed(fine) + np.log(fine)
            pdf = np.exp(lp - lp.max())
            cdf = np.concatenate([[0], np.cumsum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(np.log(fine)))])
            cdf /= cdf[-1]
            x0 = np.interp(rng.uniform(size=n_draws), cdf, fine)
            x1 = np.asarray(_kernel_draws(site, x0, state, st, expo, data, h, idx, seed))
            ks = stats.kstest(x1, lambda v: np.interp(v, fine, cdf)).pvalue
            out.append({"site": site, "index": str(idx), "tv_closed_vs_quadrature": tv, "ks_pvalue": float(ks),
                        "passed": bool(tv < _TV_TOL and ks > _KS_ALPHA)})
    return pd.DataFrame(out)


def _kernel_draws(site, x0, state, st, expo, data, hyper, idx, seed):
    """Apply the sampler's CRT kernel for ``site`` to each start value in x0 (vmap)."""
    D, K = state.V.shape

    def one(key, x):
        s = state._replace(**{site: (getattr(state, site).at[idx].set(x) if idx != () else jnp.asarray(x))})
        k1, k2 = jax.random.split(key)
        tables = pfm._crt_tables(k1, s, st, data)
        sc = pfm.shape_conditionals(s, st, expo, data, hyper, tables)
        sh, rt = sc[site]
        val = pfm.gamma_draw(k2, sh, rt)
        return val[idx] if idx != () else val

    keys = jax.random.split(jax.random.PRNGKey(seed + 7), x0.size)
    return jax.jit(jax.vmap(one))(keys, jnp.asarray(x0))


# ------------------------------------------------------------------------------
# dense twins, allocation


def dense_checks(*, seed: int = 0) -> pd.DataFrame:
    """Cached training-row sums (N, X_i, E_ik, s_k) and the log joint vs dense brute force.

    Over explicit rows, for zeros="all" without and with excluded cells, and zeros="observed"; side
    features on; the log joint (`custom_inference.pfm.log_joint`) vs the program's log density.
    Problem: I = 4, J = 3, K = 3, D = 10 (ids plus side features), float64.

    Parameters
    ----------
    seed : int, default 0
        Seeds the simulated problem. Keyword-only.

    Returns
    -------
    pandas.DataFrame
        15 rows (sites N, X_i, E_ik, s_k, log_joint in each of 3 modes): site str, mode str,
        max_rel_diff float64 (over the site's array: X_i (D,), E_ik (D, K), s_k (K,), others
        scalar), passed bool (< 1e-10).

    Raises
    ------
    ValueError
        From `custom_inference.pfm.PFMData.from_matrix`, should a seed's simulated counts hold no
        positive count; none of its own.

    Source: project addition: checks the cached summary statistics of ``004_90693a0965f06816.txt``
    sec. 5.3.5 and the exposures in the rates of eqs. 5.8-5.11, and the log joint of eq. 5.6.
    """
    out = []
    for mode, exclude in (("all", None), ("all", (np.array([0, 2]), np.array([1, 0]))), ("observed", None)):
        p = _small_problem("npfm", seed, I=4, J=3, K=3, zeros=mode, exclude=exclude)
        X = _dense_X(p)
        t = p["truth"]
        V, r = t["V"], t["r"]
        qv = X @ V
        E_d = np.einsum("ni,nk->ik", X, qv) - np.einsum("ni,ik->ik", X ** 2, V)
        s_d = 0.5 * (np.sum(qv ** 2, 0) - np.einsum("ni,ik->k", X ** 2, V ** 2))
        with jax.enable_x64(True):
            data = jax.tree_util.tree_map(jnp.asarray, p["data"])
            state = _state(p)
            ex = pfm.exposures(state, data)
            lj = float(pfm.log_joint(state, data, p["hyper"]))
            ld = float(log_density(ppl.model, (jnp.asarray(p["rows"]), jnp.asarray(p["cols"]), jnp.asarray(p["vals"]),
                                               p["N"], p["D"], p["K"], p["hyper"], jnp.asarray(p["y"])), {},
                                   {n: jnp.asarray(v) for n, v in t.items()})[0])
        label = mode + (" + excluded" if exclude is not None else "")
        for site, a, b in (("N", p["data"].n_train, X.shape[0]), ("X_i", np.asarray(data.x_sum), X.sum(0)),
                           ("E_ik", np.asarray(ex.E), E_d), ("s_k", np.asarray(ex.s), s_d), ("log_joint", lj, ld)):
            d = max_relative_difference(np.atleast_1d(a), np.atleast_1d(b))
            out.append({"site": site, "mode": label, "max_rel_diff": d, "passed": d < 1e-10})
        _ = r
    return pd.DataFrame(out)


def allocation_checks(*, seed: int = 0, n_draws: int = 20000) -> pd.DataFrame:
    """The latent-count allocation vs Lemma 5.2.2, and its count invariants.

    (1) One unit on a row with 4 features (user, item, user side, item side) and K = 2: frequencies
    of the 1 + 4 + 6 x 2 terms vs Lemma 5.2.2's probabilities (chi-square p); (2) on a random small
    data set (I = 4, J = 3, K = 3), the invariants Z1 + sum Z2 + sum L = T, sum_i Z3_ik = 2 L_k,
    non-negative integers. Float64 throughout.

    Parameters
    ----------
    seed : int, default 0
        Seeds the allocations and the small data set. Keyword-only.
    n_draws : int >= 1, default 20000
        The number of single-unit allocations in (1). Keyword-only.

    Returns
    -------
    pandas.DataFrame
        4 rows: check str, value float64 (the p-value or the invariant's residual), passed bool
        (p > 1e-3; invariants exact).

    Raises
    ------
    ValueError
        From `custom_inference.pfm.PFMData.from_matrix`, should a seed's simulated counts hold no
        positive count. An internal ``assert`` on the one-row design's feature values
        (AssertionError) cannot fail for the fixed design.

    Source: ``004_90693a0965f06816.txt`` ch. 5.3.2, eq. 5.7 (the multinomial of z_n, Lemma
    5.2.2); the check is a project addition.
    """
    out = []
    Uf = sp.csr_matrix(np.array([[1.3]]))
    Vf = sp.csr_matrix(np.array([[0.7]]))
    with jax.enable_x64(True):
        data = pfm.PFMData.from_matrix(sp.csr_matrix(np.array([[1.0]])), user_features=Uf, item_features=Vf)
        d = jax.tree_util.tree_map(jnp.asarray, data)
        D, K = 4, 2
        V = jnp.array([[0.5, 1.2], [0.9, 0.3], [1.5, 0.8], [0.4, 2.0]])
        st = pfm.NPFMState(jnp.asarray(0.6), 1.0, 1.0, jnp.array([0.3, 0.8, 0.2, 0.5]), jnp.ones(D), jnp.ones(D), V,
                           jnp.ones(D), jnp.ones(K), jnp.array([0.7, 1.4]), 1.0, 1.0)
        keys = jax.random.split(jax.random.PRNGKey(seed), n_draws)
        ss = jax.jit(jax.vmap(lambda k: pfm.allocate(k, st, d)))(keys)
        x = np.array([1.0, 1.0, 1.3, 0.7])
        feats = np.asarray(data.row_feat[0])
        xv = np.asarray(data.row_val[0])
        assert np.allclose(np.sort(xv), np.sort(x))
        pairs = [(a, b) for a in range(D) for b in range(a + 1, D)]
        Vn, wn, rn = np.asarray(V), np.asarray(st.w), np.asarray(st.r)
        xf = np.zeros(D)
        xf[feats] = xv
        probs = [0.6] + [xf[i] * wn[i] for i in range(D)] + [
            xf[a] * xf[b] * rn[k] * Vn[a, k] * Vn[b, k] for k in range(K) for (a, b) in pairs]
        probs = np.asarray(probs) / np.sum(probs)
        z1, z2, z3, L = (np.asarray(a) for a in ss)
        cat = np.full(n_draws, -1)
        cat[z1 == 1] = 0
        for i in range(D):
            cat[z2[:, i] == 1] = 1 + i
        for k in range(K):
            for m, (a, b) in enumerate(pairs):
                cat[(z3[:, a, k] == 1) & (z3[:, b, k] == 1) & (L[:, k] == 1)] = 1 + D + k * len(pairs) + m
        obs = np.bincount(cat[cat >= 0], minlength=probs.size)
        pval = float(stats.chisquare(obs, n_draws * probs).pvalue)
        out.append({"check": "one unit: term frequencies (chi-square p)", "value": pval,
                    "passed": bool(pval > 1e-3 and (cat >= 0).all())})
        p = _small_problem("npfm", seed, I=4, J=3, K=3)
        d = jax.tree_util.tree_map(jnp.asarray, p["data"])
        s = pfm.allocate(jax.random.PRNGKey(seed + 1), _state(p), d)
        T = float(np.sum(p["y"]))
        tot = float(s.z1 + s.z2.sum() + s.L.sum())
        arrs = [np.asarray(a) for a in s]
        integral = all(np.all(a == np.round(a)) and np.all(a >= 0) for a in arrs)
        out.append({"check": "Z1 + sum Z2 + sum L = T", "value": tot - T, "passed": tot == T})
        dz = float(np.max(np.abs(np.asarray(s.z3).sum(0) - 2 * np.asarray(s.L))))
        out.append({"check": "sum_i Z3_ik = 2 L_k", "value": dz, "passed": dz == 0.0})
        out.append({"check": "non-negative integers", "value": float(integral), "passed": bool(integral)})
    return pd.DataFrame(out)


def sweep_order_check(form: str = "valid", *, seed: int = 0, n: int = 40000) -> tuple[bool, float]:
    """Does one (shape, rate) update keep exact posterior draws exact?

    Toy block of the model: alpha ~ Ga(a, b), w | alpha ~ Ga(alpha, beta), Z | w ~ Pois(X w) (Z = 2,
    X = 3, beta = 0.5). ``n`` exact draws of (alpha, w) | Z, then one update; statistic: Fisher z of
    corr(log alpha, log w) after the update vs fresh exact draws.

    Parameters
    ----------
    form : {"valid", "printed"}, default "valid"
        "valid" = CRT-collapsed alpha, then w | alpha (this module's sweep); "printed" = w | alpha,
        then CRT-collapsed alpha (the chapter's order); any other value runs as "printed".
    seed : int, default 0
        Seeds the exact draws and the update. Keyword-only.
    n : int >= 4, default 40000
        Exact draws (internal arrays (n,) float64). Keyword-only.

    Returns
    -------
    passed : bool
        Two-sided p > 1e-3.
    p_value : float
        The Fisher-z test's p-value.

    Raises
    ------
    ZeroDivisionError
        ``n`` = 3 (smaller ``n`` give NaN or numpy errors); none of its own.

    Source: ``004_90693a0965f06816.txt`` ch. 5.3.2, eqs. 5.16-5.17 with Lemma 5.2.6 (CRT shape
    draw) and eqs. 5.8-5.9 (rate draw), the sweep-order erratum; the toy check is a project
    addition.
    """
    a, b, beta, Z, X = 1.0, 1.0, 0.5, 2.0, 3.0
    rng = np.random.default_rng(seed)
    grid = np.geomspace(1e-6, 80, 200001)
    lp = _log_nb_collapsed(grid, a, b, Z, X, beta) + np.log(grid)
    pdf = np.exp(lp - lp.max())
    cdf = np.concatenate([[0], np.cumsum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(np.log(grid)))])
    cdf /= cdf[-1]

    def exact(m):
        al = np.interp(rng.uniform(size=m), cdf, grid)
        return al, rng.gamma(al + Z, 1 / (beta + X))

    al, w = exact(n)
    with jax.enable_x64(True):
        key = jax.random.PRNGKey(seed)

        @jax.jit
        def upd(key, al, w, Zs):
            k1, k2, k3 = jax.random.split(key, 3)

            def alpha_step(k, al):
                kk1, kk2 = jax.random.split(k)
                l = pfm.crt(kk1, Zs, al, int(Z) * al.size)
                return pfm.gamma_draw(kk2, a + l, b + jnp.log1p(X / beta))

            if form == "valid":
                al = alpha_step(k1, al)
                w = pfm.gamma_draw(k2, al + Z, beta + X)
            else:
                w = pfm.gamma_draw(k2, al + Z, beta + X)
                al = alpha_step(k1, al)
            return al, w

        al1, w1 = (np.asarray(v) for v in upd(key, jnp.asarray(al), jnp.asarray(w), jnp.full(al.shape, Z)))
    al2, w2 = exact(n)
    r1 = np.corrcoef(np.log(al1), np.log(w1))[0, 1]
    r2 = np.corrcoef(np.log(al2), np.log(w2))[0, 1]
    zstat = (np.arctanh(r1) - np.arctanh(r2)) / np.sqrt(2.0 / (n - 3))
    pval = float(2 * stats.norm.sf(abs(zstat)))
    return pval > 1e-3, pval


# ------------------------------------------------------------------------------
# errata


def _z3_check(form: str):
    """Conditional check of the v_ik whose count differs most between the two readings, with Z3
    summed over both endpoints (corrected) or over the pairs where i is the first index (printed)."""
    tab = conditional_checks("npfm", seed=3, z3_form="one-sided" if form == "printed" else "both")
    row = tab.iloc[0]
    return bool(row.passed), float(row.tv_distance)


def _order_check(form: str):
    return sweep_order_check("valid" if form == "corrected" else "printed")


ERRATA: tuple = (
    Erratum(
        seed_file="004_90693a0965f06816.txt",
        location="ch. 5.3.2, eqs. 5.8-5.19 as a sweep (alpha0, alpha_i, zeta_i, gamma0 listed after w0, w_i, v_ik, r_k)",
        printed="sample w0, w_i, v_ik, r_k, beta0, beta_i, delta_k, c, then alpha0, alpha_i, zeta_i, gamma0 by CRT "
                "(w0, w_i, v_ik, r_k integrated out) without redrawing the rates",
        corrected="each CRT shape draw is the first half of a block: (alpha0 -> w0), (alpha_i -> w_i), "
                  "(zeta_i -> v_i.), (gamma0 -> r): the rate is redrawn given the new shape",
        why="the CRT step targets p(shape | z) with the rate integrated out; keeping the old rate leaves (shape, rate) "
            "jointly wrong (the chain's marginals stay right, their dependence does not)",
        check_name="sweep-order invariance (Fisher z of corr(log alpha, log w) after one update from exact draws)",
        check=_order_check,
    ),
    Erratum(
        seed_file="004_90693a0965f06816.txt",
        location="ch. 5.3.2, eq. 5.10 (shape of v_ik: zeta_i + z_3.ik, with z_3nijk defined for i < j only)",
        printed="Ga(zeta_i + z_3.ik, ...) with z_3.ik = sum_n sum_{j>i} z_3nijk (the pairs where i is the first index)",
        corrected="Ga(zeta_i + Z3_ik, ...), Z3_ik = sum_n sum_{j != i} z_3n{ij}k: a unit of pair {i, j} counts for "
                  "both endpoints (the rate x_ni x_nj r_k v_ik v_jk is linear in v_ik for either orientation)",
        why="ambiguous index notation: read literally, features that are always the larger index (item ids after "
            "user ids) would never receive counts",
        check_name="conditional (grid TV of v_ik for an item-id feature vs the program)",
        check=_z3_check,
    ),
)


# ------------------------------------------------------------------------------
# NUTS cross-check


@dataclass(frozen=True)
class CrosscheckConfig:
    """Small simulated problem for the NUTS cross-check (exact vs exact).

    Hyperparameters chosen so the rates stay O(1) (w0, w_i means about 1) and gamma0 / K is not tiny
    (NUTS cannot reach r_k ~ 1e-30: the log-scale funnel gives divergences). The one config
    vocabulary of `validation.checks.crosscheck`: ``num_*`` for NUTS, ``gibbs_*`` for the sampler.

    Parameters
    ----------
    n_users, n_items : int, default 4, 3
        I x J user-item cells, ids only.
    K : int, default 3
        The latent dimension.
    seed : int, default 0
        Seeds the simulation (`crosscheck_data`) and NUTS; the Gibbs sampler gets ``seed + 1``.
    hyper : ppl_models.pfm.PFMHyper
        Simulates and fits (a_0 = c_0 = a = c = e = g = g_0 = 3, e_0 = 6, every rate parameter 1).
    num_chains, num_warmup, num_samples : int, default 4, 1000, 1000
        NUTS chains, warm-up and kept draws per chain.
    target_accept : float, default 0.95
        NUTS target acceptance probability.
    gibbs_chains, gibbs_warmup, gibbs_samples, gibbs_thin : int, default 4, 1000, 2000, 5
        The Gibbs sampler's chains, warm-up sweeps, kept draws per chain and thinning.

    Raises
    ------
    None of its own (a frozen dataclass; values are checked where they are used).

    Source: project addition (validation level 2 problem for ``004_90693a0965f06816.txt`` ch. 5).
    """

    n_users: int = 4
    n_items: int = 3
    K: int = 3
    seed: int = 0
    hyper: ppl.PFMHyper = ppl.PFMHyper(a_0=3.0, b_0=1.0, c_0=3.0, d_0=1.0, a=3.0, b=1.0, c=3.0, d=1.0, e=3.0,
                                       f=1.0, g=3.0, h=1.0, e_0=6.0, f_0=1.0, g_0=3.0, h_0=1.0)
    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 1000
    target_accept: float = 0.95
    gibbs_chains: int = 4
    gibbs_warmup: int = 1000
    gibbs_samples: int = 2000
    gibbs_thin: int = 5


def identifiable_quantities(idata, n_users: int, n_items: int, variant: str) -> dict:
    """The quantities compared across methods, each (chain, draw, Q).

    ``rate`` (every cell's Poisson rate, Q = I J, from w0, w, V, r), ``hyper`` (log alpha0, log beta0
    and, for NPFM, log gamma0, log c), ``w0``. Raw V, r are not identified (permutation).

    Parameters
    ----------
    idata : arviz.InferenceData
        Its posterior holds w0 (chain, draw), w (chain, draw, D), V (chain, draw, D, K), alpha0,
        beta0 (chain, draw) and, for NPFM, r (chain, draw, K), gamma0, c (chain, draw);
        D = n_users + n_items (ids only).
    n_users, n_items : int
        I and J of the all-cells design.
    variant : {"npfm", "ppfm"}
        "npfm", or anything else (run as "ppfm").

    Returns
    -------
    dict of str to numpy.ndarray
        Float arrays in the posterior's dtype: rate (chain, draw, I J), hyper (chain, draw, 2, or 4
        for NPFM), w0 (chain, draw, 1).

    Raises
    ------
    ValueError
        From `custom_inference.arviz_io.group_arrays` when ``idata`` has no posterior group.
    KeyError
        A needed variable is missing from the posterior.

    Source: project addition (the identified functionals of the rate of
    ``004_90693a0965f06816.txt`` eqs. 5.6 / 5.20).
    """
    post = arviz_io.group_arrays(idata)
    rows, cols, vals, N, D, _, _ = ppl.cells_design(n_users, n_items)
    C, S = post["w0"].shape[:2]
    flat = {n: post[n].reshape((C * S,) + post[n].shape[2:]) for n in ("w0", "w", "V") + (("r",) if variant == "npfm" else ())}
    with jax.enable_x64(True):
        f = jax.jit(jax.vmap(lambda pr: ppl.rates(pr, jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(vals), N,
                                                  variant)))
        rate = np.asarray(f({k: jnp.asarray(v) for k, v in flat.items()})).reshape(C, S, -1)
    hyp = [np.log(post["alpha0"]), np.log(post["beta0"])]
    if variant == "npfm":
        hyp += [np.log(post["gamma0"]), np.log(post["c"])]
    return {"rate": rate, "hyper": np.stack(hyp, axis=-1), "w0": post["w0"][..., None]}


def _check_variant(model: str) -> str:
    if model not in ("npfm", "ppfm"):
        raise ValueError(f"model must be 'npfm' or 'ppfm', got {model!r}")
    return model


def crosscheck_data(model: str, config: CrosscheckConfig = CrosscheckConfig()) -> np.ndarray:
    """The simulated counts Y, float64 (n_users, n_items), of the cross-check problem: one draw
    from the prior predictive of ``model`` (`ppl_models.pfm.simulate`, key PRNGKey(seed))."""
    c = config
    with jax.enable_x64(True):
        _, Y = ppl.simulate(jax.random.PRNGKey(c.seed), ppl.PFMSizes(c.n_users, c.n_items, c.K, model), c.hyper)
    return np.asarray(Y, dtype=np.float64)


def nuts_reference(model: str = "npfm", config: CrosscheckConfig = CrosscheckConfig(), *,
                   reference: str | None = None, progress: bool = False):
    """The NUTS reference ``model`` ("npfm" or "ppfm") of the cross-check problem
    (`validation.checks.references.Reference`): stored when one matches the data and settings, else a
    fresh NumPyro NUTS run on `ppl_models.pfm.model` (latent counts marginalised).
    Raises ValueError for an unknown model or a bad ``reference``. Source: project addition."""
    c = config
    _check_variant(model)
    Y = crosscheck_data(model, c)
    rows, cols, vals, N, D, cu, cj = ppl.cells_design(c.n_users, c.n_items)
    settings = xc.NutsSettings.of(c)
    key = xc.problem_key((rows, cols, vals, Y), (model, c.n_users, c.n_items, c.K, c.hyper), settings)
    run = lambda: xc.run_nuts(  # noqa: E731
        ppl.model, jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(vals), N, D, c.K, c.hyper,
        jnp.asarray(Y[cu, cj]), variant=model, seed=c.seed, num_chains=c.num_chains, num_warmup=c.num_warmup,
        num_samples=c.num_samples, target_accept=c.target_accept, progress=progress)
    return xc.nuts_reference(model, key, settings, run,
                             lambda idata: identifiable_quantities(idata, c.n_users, c.n_items, model),
                             reference=reference)


def run_crosscheck(model: str = "npfm", config: CrosscheckConfig = CrosscheckConfig(), *, progress: bool = False,
                   reference: str | None = None) -> xc.CrosscheckResult:
    """The sampler against gated NUTS on a simulated I x J problem.

    `validation.checks.crosscheck.exact_crosscheck`: both runs gated, `compare_exact` verdict; NUTS
    stored when it matches (`nuts_reference`).

    Parameters
    ----------
    model : {"npfm", "ppfm"}, default "npfm"
        The variant.
    config : CrosscheckConfig, default CrosscheckConfig()
        The problem and the runs' settings.
    progress : bool, default False
        Progress bars. Keyword-only.
    reference : {None, "stored", "rerun"}, optional
        As in `validation.checks.references.nuts_reference`. Keyword-only.

    Returns
    -------
    validation.checks.crosscheck.CrosscheckResult
        Method "exact"; ``extra``: ``y``, the simulated counts, float64 (n_users, n_items).

    Raises
    ------
    ValueError
        An unknown ``model``; a bad ``reference``, or ``reference="stored"`` with no matching stored
        reference.

    Source: project addition (validation level 2: posterior agreement with gated NUTS).
    """
    c = config
    _check_variant(model)
    Y = crosscheck_data(model, c)
    data = pfm.PFMData.from_matrix(sp.csr_matrix(Y))
    start = time.perf_counter()
    g = pfm.sample(c.seed + 1, data, c.K, c.hyper, variant=model, num_chains=c.gibbs_chains,
                   num_warmup=c.gibbs_warmup, num_samples=c.gibbs_samples, thin=c.gibbs_thin,
                   keep=pfm.NPFMState._fields if model == "npfm" else pfm.PPFMState._fields, progress=progress)
    seconds = time.perf_counter() - start
    settings = {
        "data": f"{c.n_users} x {c.n_items} simulated counts (all cells, ids only), K = {c.K}, total {Y.sum():.0f}",
        "Gibbs": xc.gibbs_line(c, seconds),
    }
    return xc.exact_crosscheck(
        model=model, solver=f"{model.upper()} Gibbs", ref=nuts_reference(model, c, reference=reference,
                                                                         progress=progress),
        solver_quantities=identifiable_quantities(g, c.n_users, c.n_items, model), solver_seconds=seconds,
        config=c, settings=settings, solver_name=f"{model.upper()} Gibbs", extra={"y": Y}, solver_idata=g)


# ------------------------------------------------------------------------------
# SBC


@dataclass(frozen=True)
class SBCConfig:
    """One SBC simulation: a small all-cells problem with hyperparameters that keep the counts moderate.

    4 chains x 150 kept draws thinned by 4 after 300 warm-up sweeps give 600 draws, thinned to
    L = 99 by `validation.checks.sbc.run_sbc`. Listed rows are padded to I J and units to
    max(1024, next power of two) so one compiled program serves (nearly) all simulations.

    Parameters
    ----------
    n_users, n_items : int, default 4, 3
        I x J cells, ids only.
    K : int, default 2
        The latent dimension.
    hyper : ppl_models.pfm.PFMHyper
        Simulates and fits (shapes 2-3, rates 1-2).
    chains, warmup, samples, thin : int, default 4, 300, 150, 4
        The sampler's chains, warm-up sweeps, kept draws per chain and thinning.
    scale_rounds : int, optional
        The sampler's per-factor scale move (None: `custom_inference.pfm.sample`'s default; 0: the
        sweep alone, as before issue 13's fix).
    global_rounds : int, optional
        NPFM's global scale move (None: the sampler's default).

    Raises
    ------
    None of its own (a frozen dataclass; values are checked where they are used).

    Source: project addition (SBC, Talts et al. 2018, for the samplers of
    ``004_90693a0965f06816.txt`` ch. 5).
    """

    n_users: int = 4
    n_items: int = 3
    K: int = 2
    hyper: ppl.PFMHyper = ppl.PFMHyper(a_0=2.0, b_0=2.0, c_0=3.0, d_0=2.0, a=2.0, b=2.0, c=3.0, d=2.0, e=2.0, f=2.0,
                                       g=3.0, h=2.0, e_0=2.0, f_0=1.0, g_0=3.0, h_0=2.0)
    chains: int = 4
    warmup: int = 300
    samples: int = 150
    thin: int = 4
    scale_rounds: int | None = None
    global_rounds: int | None = None


def pfm_functionals(variant: str, config: SBCConfig = SBCConfig()) -> dict:
    """Scalar SBC test quantities of one draw.

    log alpha0, log beta0, log w0, log of 3 cell rates, log of the total rate, the log prior
    densities of the rate variables given their shapes (sum_i log Ga(w_i; alpha_i, beta_i),
    sum log Ga(v_ik; zeta_i, delta_k) and, for NPFM, sum_k log Ga(r_k; gamma0/K, c)) -- these see the
    joint (shape, rate) dependence -- and for NPFM log gamma0, log c.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}
        "npfm", or anything else (run as "ppfm").
    config : SBCConfig, default SBCConfig()
        Gives n_users, n_items (the all-cells design) and K.

    Returns
    -------
    dict of str to callable
        Name -> function of one draw (dict of numpy arrays: alpha0, beta0, w0 (), alpha, beta, w,
        zeta (D,), V (D, K), delta (K,) and for NPFM gamma0, c (), r (K,); D = n_users + n_items)
        returning a float64 array (1,) (``log_rate``: (3,), the cells 0, 5 and 10).

    Raises
    ------
    ValueError
        From `ppl_models.pfm.cells_design` when n_users or n_items < 1. The returned functions raise
        KeyError for a draw without a needed site and IndexError (``log_rate``) when the problem has
        fewer than 11 cells.

    Source: project addition (SBC test quantities of the model of ``004_90693a0965f06816.txt``
    eqs. 5.6 / 5.20).
    """
    rows, cols, vals, N, D, _, _ = ppl.cells_design(config.n_users, config.n_items)
    K = config.K

    def rates(pp):
        with jax.enable_x64(True):
            return np.asarray(ppl.rates({k: jnp.asarray(v) for k, v in pp.items()}, jnp.asarray(rows),
                                        jnp.asarray(cols), jnp.asarray(vals), N, variant))

    lg = lambda x, a, b: stats.gamma.logpdf(x, a, scale=1.0 / b)  # noqa: E731
    f = {
        "log_alpha0": lambda pp: np.log(np.atleast_1d(pp["alpha0"])),
        "log_beta0": lambda pp: np.log(np.atleast_1d(pp["beta0"])),
        "log_w0": lambda pp: np.log(np.atleast_1d(pp["w0"])),
        "log_rate": lambda pp: np.log(rates(pp)[[0, 5, 10]]),
        "log_total_rate": lambda pp: np.log(np.atleast_1d(rates(pp).sum())),
        "logp_w_given_shape": lambda pp: np.atleast_1d(np.sum(lg(pp["w"], pp["alpha"], pp["beta"]))),
        "logp_v_given_shape": lambda pp: np.atleast_1d(np.sum(lg(pp["V"], pp["zeta"][:, None], pp["delta"][None, :]))),
    }
    if variant == "npfm":
        f["log_gamma0"] = lambda pp: np.log(np.atleast_1d(pp["gamma0"]))
        f["log_c"] = lambda pp: np.log(np.atleast_1d(pp["c"]))
        f["logp_r_given_shape"] = lambda pp: np.atleast_1d(np.sum(lg(np.maximum(pp["r"], 1e-300), pp["gamma0"] / K,
                                                                     pp["c"])))
    return f


def sbc_adapters(model: str = "npfm", config: SBCConfig = SBCConfig()):
    """``(simulate, fit, functionals)`` for `validation.checks.sbc.run_sbc`.

    Simulations from `ppl_models.pfm.simulate`; a matrix of all zeros is kept (the sampler needs no
    count: its listed rows are padding), so the prior is not conditioned.

    Parameters
    ----------
    model : {"npfm", "ppfm", "npfm-printed", "ppfm-printed"}, default "npfm"
        The "-printed" forms run the chapter's sweep order (collapsed shapes after their rates),
        which SBC must reject.
    config : SBCConfig, default SBCConfig()
        The problem and the sampler's settings.

    Returns
    -------
    simulate : callable
        ``simulate(seed: int)`` -> (truth: dict site -> float64 numpy array (w0 (), w (D,),
        V (D, K), ...), Y: float64 (n_users, n_items) counts).
    fit : callable
        ``fit(Y, seed: int)`` -> dict site -> float64 array (chains x samples, ...) of the state's
        sites.
    functionals : dict
        As `pfm_functionals`.

    Raises
    ------
    ValueError
        An unknown ``model``. ValueError from `ppl_models.pfm.simulate` /
        `custom_inference.pfm.sample` (bad sizes, K or hyper in ``config``) comes from the returned
        functions when they run.

    Source: project addition (SBC, Talts et al. 2018) on the samplers of
    ``004_90693a0965f06816.txt`` ch. 5.3.2-5.3.3; the "printed" order is the chapter's sweep
    order, eqs. 5.8-5.19 (erratum).
    """
    if model not in ("npfm", "ppfm", "npfm-printed", "ppfm-printed"):
        raise ValueError(f"model must be npfm, ppfm, npfm-printed or ppfm-printed, got {model!r}")
    variant = model.split("-")[0]
    order = "printed" if model.endswith("printed") else "valid"
    c = config
    keep = pfm.NPFMState._fields if variant == "npfm" else pfm.PPFMState._fields

    def simulate(seed: int):
        with jax.enable_x64(True):
            truth, Y = ppl.simulate(jax.random.PRNGKey(seed), ppl.PFMSizes(c.n_users, c.n_items, c.K, variant), c.hyper)
        return {n: np.asarray(v) for n, v in truth.items()}, Y

    def fit(Y, seed: int):
        T = int(Y.sum())
        pad_units = max(1024, 1 << int(np.ceil(np.log2(max(T, 1)))))
        data = _padded_data(Y, c.n_users * c.n_items, pad_units)
        idata = pfm.sample(seed, data, c.K, c.hyper, variant=variant, num_chains=c.chains, num_warmup=c.warmup,
                           num_samples=c.samples, thin=c.thin, keep=keep, order=order, scale_rounds=c.scale_rounds,
                           global_rounds=c.global_rounds)
        post = arviz_io.group_arrays(idata)
        return {n: post[n].reshape((-1,) + post[n].shape[2:]) for n in keep}

    return simulate, fit, pfm_functionals(variant, c)


def _padded_data(Y, pad_rows, pad_units):
    Y = np.asarray(Y)
    if Y.sum() > 0:
        return pfm.PFMData.from_matrix(sp.csr_matrix(Y), pad_rows=pad_rows, pad_units=pad_units)
    return _empty_data(Y, pad_rows, pad_units)


def _empty_data(Y, pad_rows, pad_units):
    """All-zero matrix: PFMData with only padding rows/units (every cell a y = 0 training row)."""
    one = np.zeros_like(Y)
    one[0, 0] = 1
    d = pfm.PFMData.from_matrix(sp.csr_matrix(one), pad_rows=pad_rows, pad_units=pad_units)
    y = np.asarray(d.row_y).copy()
    y[:] = 0
    uw = np.zeros_like(np.asarray(d.unit_weight))
    # weighted_rows None as before (every listed row enters the exposures with c_n = 0: same sums)
    return dataclasses.replace(d, row_y=y, unit_weight=uw, weighted_rows=None)


# ------------------------------------------------------------------------------
# registry declarations (validation.checks.registry: one ModelSpec per CLI model name)


def crosscheck_npfm(config: CrosscheckConfig = CrosscheckConfig(), *, progress: bool = False,
                    reference: str | None = None) -> xc.CrosscheckResult:
    """`run_crosscheck` for NPFM with the registry's signature. Source: project addition."""
    return run_crosscheck("npfm", config, progress=progress, reference=reference)


def crosscheck_ppfm(config: CrosscheckConfig = CrosscheckConfig(), *, progress: bool = False,
                    reference: str | None = None) -> xc.CrosscheckResult:
    """`run_crosscheck` for PPFM with the registry's signature. Source: project addition."""
    return run_crosscheck("ppfm", config, progress=progress, reference=reference)


def _model_spec(variant: str):
    from validation.checks import registry

    return registry.ModelSpec(
        name=variant,
        solvers=(registry.SolverSpec("gibbs", "exact", crosscheck_npfm if variant == "npfm" else crosscheck_ppfm,
                                     CrosscheckConfig, variant,
                                     registry.lazy(f"custom_inference.pfm:{variant.upper()}_ALGORITHM"),
                                     frontdoor=variant,
                                     # the thesis: 1500 burn-in sweeps, 1000 kept; shortened for ML-100K
                                     evaluations=dict.fromkeys(("counts", "counts+side"), registry.EvaluationEntry(
                                         registry.lazy("validation.models.pfm_eval:counts_runner", variant),
                                         defaults={"warmup": 300, "samples": 100, "thin": 2, "init_scale": 1.0,
                                                   "chains": 1},
                                         flags={"pfm_warmup": "warmup", "pfm_samples": "samples",
                                                "pfm_thin": "thin"}))),),
        references=(registry.ReferenceSpec(variant, functools.partial(nuts_reference, variant), CrosscheckConfig),),
        checks={"conditionals": functools.partial(conditional_checks, variant),
                "collapsed_shapes": functools.partial(collapsed_checks, variant),
                "cached_sums": dense_checks, "allocation": allocation_checks},
        sbc={"gibbs": functools.partial(sbc_adapters, variant),
             "gibbs-printed": functools.partial(sbc_adapters, f"{variant}-printed")},
        sbc_config=SBCConfig,
        errata=(ERRATA,) if variant == "npfm" else (),
        bridge=registry.lazy(f"validation.models.pfm_bridge:BRIDGE_{variant.upper()}"),
        notebook="notebooks/poisson_fm.py",
    )


SPEC_NPFM = _model_spec("npfm")
SPEC_PPFM = _model_spec("ppfm")
SPEC = SPEC_NPFM
