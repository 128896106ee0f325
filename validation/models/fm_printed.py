"""MCMC-FM (thesis ch. 2.2.5, eqs. 2.22-2.30): every scalar conditional of the sampler against the
NumPyro program's log density normalized on a grid.

The thesis states the model (eqs. 2.17, 2.22-2.30) and cites Freudenthaler (2011) for the sampler: it
prints no conditional, so there is no printed form to judge; the group hyperparameters' conditionals
have the form of SBMF's Algorithm 2 lines 7-8 (corrected: squared rate), which the sampler uses
(`custom_inference.fm_mcmc.group_precision_conditional`). What is checked here, without any derivation,
is that each Normal (precision P, mean-times-precision h) and Gamma (shape, rate) the sampler draws from
has the mean and variance of the program's conditional: `ppl_models.fm.model_hier`'s log density
(NumPyro's ``log_density``) with one scalar moved along a grid, normalized by Simpson's rule
(`validation.models.printed_forms.normalized_moments`; Gamma sites on a log x grid). A form agrees when
|mean - grid mean| / grid sd and |var / grid var - 1| are below `MOMENT_TOL` (quadrature error < 1e-9).

Source: ``004_90693a0965f06816.txt`` eqs. 2.17, 2.22-2.30; check: project addition (issue 26 item 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from numpyro.infer.util import log_density

from custom_inference import fm_mcmc as mc
from custom_inference.fm_design import FMDesign
from ppl_models import fm as ppl
from validation.models.fm_mcmc import small_design
from validation.models.printed_forms import normalized_moments, x64

__all__ = ["MOMENT_TOL", "HYPER", "conditional_moments"]

MOMENT_TOL = 1e-6
_N_GRID = 1501
#: distinct hyperparameters so that a swapped symbol shows
HYPER = ppl.FMHierHyper(mu_0=0.3, sigma_0=2.0, nu_0=1.5, alpha_0p=2.0, beta_0p=1.5, alpha_0=3.0, beta_0=1.0)


def _problem(seed: int, K: int):
    """A design and a state drawn from the prior of eqs. 2.23-2.30 (NumPy; y from eq. 2.22), caches
    current."""
    X, group, _, _ = small_design(n_users=5, n_items=4, n_multi=3, n_rows=30, p_multi=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    h, G = HYPER, int(group.max()) + 1
    sigma_w = rng.gamma(h.alpha_0p, 1 / h.beta_0p, G)
    sigma_v = rng.gamma(h.alpha_0p, 1 / h.beta_0p, (G, K))
    mu_w = rng.normal(h.mu_0, 1 / np.sqrt(h.nu_0 * sigma_w))
    mu_v = rng.normal(h.mu_0, 1 / np.sqrt(h.nu_0 * sigma_v))
    w0, alpha = rng.normal(h.mu_0, 1 / np.sqrt(h.sigma_0)), rng.gamma(h.alpha_0, 1 / h.beta_0)
    w = rng.normal(mu_w[group], 1 / np.sqrt(sigma_w[group]))
    V = rng.normal(mu_v[group], 1 / np.sqrt(sigma_v[group]))
    Xd = X.toarray()
    yhat = w0 + Xd @ w + 0.5 * (((Xd @ V) ** 2).sum(1) - ((Xd**2) @ (V**2)).sum(1))     # eq. 2.17
    y = rng.normal(yhat, 1 / np.sqrt(alpha))
    design = FMDesign.from_scipy(X, y, group, dtype=np.float64)
    d = jax.tree_util.tree_map(jnp.asarray, design)          # float64 leaves (under x64)
    st = mc.FMMCMCState(*(jnp.asarray(v, jnp.float64) for v in (w0, w, V, alpha, mu_w, sigma_w, mu_v, sigma_v)),
                        jnp.zeros(X.shape[0]), jnp.zeros((X.shape[0], K)))
    return design, d, mc.caches(st, d), group


def _program_logf(design: FMDesign, group, K, sites: dict):
    """(name, index) -> callable(grid): the program's log density along a grid of sites[name][index].

    The sites are flattened into one vector, so one compiled program serves every site (the flat
    position is traced)."""
    args = (design.rows, design.cols, design.values, design.n_rows, design.n_features, group, K, HYPER, design.y)
    names = list(sites)
    shapes = [np.shape(sites[n]) for n in names]
    sizes = [int(np.prod(sh)) for sh in shapes]
    starts = dict(zip(names, np.cumsum([0] + sizes[:-1]).tolist()))
    flat = jnp.concatenate([jnp.ravel(sites[n]) for n in names])

    def one(v, pos):
        theta = flat.at[pos].set(v)
        parts = jnp.split(theta, np.cumsum(sizes)[:-1].tolist())
        s = {n: x.reshape(sh) for n, x, sh in zip(names, parts, shapes)}
        return log_density(ppl.model_hier, args, {"n_groups": design.n_groups}, s)[0]

    f = jax.jit(jax.vmap(one, in_axes=(0, None)))

    def logf(name, index):
        pos = starts[name] + (int(np.ravel_multi_index(index, shapes[names.index(name)])) if index else 0)
        return lambda grid: np.asarray(f(jnp.asarray(grid, jnp.float64), jnp.asarray(pos)))

    return logf


@x64
def conditional_moments(*, seed: int = 0, K: int = 2) -> pd.DataFrame:
    """The sampler's conditionals at a prior draw against the program's normalized conditional.

    Design: 5 users, 4 items, 3 multi-hot features, 30 rows (`validation.models.fm_mcmc.small_design`); a
    state drawn from the prior of eqs. 2.23-2.30 with `HYPER`. Compared: w0, alpha, every w_l and v_lk of
    two features per block (the most observed and the last), sigma_w, mu_w, sigma_v, mu_v per group. One
    more row applies SBMF's printed Algorithm 2 line 7 (rate without its square) to group 0's sigma_w:
    expected "rejected" (power). Runs in float64 (`x64`).

    Parameters
    ----------
    seed : int, keyword-only, default 0
        Seed of the design (``seed``) and of the prior draw (NumPy, ``seed + 1``).
    K : int, keyword-only, default 2
        Interaction rank.

    Returns
    -------
    pandas.DataFrame
        One row per compared conditional: site, index (str), kind ("normal" / "gamma"), mean_err
        (|mean - grid mean| / grid sd), var_err (|var / grid var - 1|), edge (of `normalized_moments`),
        agrees (both errors < `MOMENT_TOL`), expected ("agrees" / "rejected").

    Raises
    ------
    None of its own.

    Source: project addition (the conditionals of 004_90693a0965f06816.txt eqs. 2.22-2.30; SBMF's
    Algorithm 2 line 7 as printed for the power row).
    """
    design, d, st, group = _problem(seed, K)
    logf = _program_logf(d, group, K, {n: getattr(st, n) for n in mc.PARAMS})
    rows = []

    def add(name, index, kind, a, b, expected="agrees"):
        a, b = float(a), float(b)
        if kind == "normal":                         # precision a, mean-times-precision b
            mean, var = b / a, 1.0 / a
            lo, hi, log_x = mean - 12 * var**0.5, mean + 12 * var**0.5, False
        else:                                        # shape a, rate b
            mean, var = a / b, a / b**2
            lo, hi, log_x = np.log(mean) - 5.0 - 45.0 / a, np.log(mean + 25 * var**0.5 + 45 / b), True
        gm, gv, edge = normalized_moments(logf(name, index), lo, hi, _N_GRID, log_x=log_x)
        me, ve = abs(mean - gm) / gv**0.5, abs(var / gv - 1)
        rows.append(dict(site=name, index=str(index), kind=kind, mean_err=me, var_err=ve, edge=edge,
                         agrees=bool(me < MOMENT_TOL and ve < MOMENT_TOL), expected=expected))

    add("w0", (), "normal", *mc.w0_conditional(st, d, HYPER))
    add("alpha", (), "gamma", *mc.alpha_conditional(st, d, HYPER))
    blk = np.asarray(design.block)
    counts_all = np.bincount(np.asarray(design.cols), minlength=design.n_features)
    for bi in range(design.n_blocks):
        feats = np.flatnonzero(blk == bi)
        for l in sorted({int(feats[np.argmax(counts_all[feats])]), int(feats[-1])}):
            P, h = mc.w_block_conditional(st, d, HYPER, bi)
            add("w", (l,), "normal", P[l], h[l])
            for k in range(K):
                P, h = mc.v_block_conditional(st, d, HYPER, bi, k)
                add("V", (l, k), "normal", P[l], h[l])
    G, g = design.n_groups, d.group
    n = np.bincount(np.asarray(design.group), minlength=G)
    s_w, r_w = mc.group_precision_conditional(st.w, g, G, st.mu_w, HYPER.mu_0, HYPER.nu_0, HYPER.alpha_0p,
                                              HYPER.beta_0p)
    s_v, r_v = mc.group_precision_conditional(st.V, g, G, st.mu_v, HYPER.mu_0, HYPER.nu_0, HYPER.alpha_0p,
                                              HYPER.beta_0p)
    # power: SBMF's Algorithm 2 line 7 as printed (rate without the square) applied to group 0's sigma_w
    sel = np.asarray(design.group) == 0
    add("sigma_w", (0,), "gamma", s_w[0], HYPER.beta_0p + 0.5 * (HYPER.nu_0 * (st.mu_w[0] - HYPER.mu_0) ** 2
                                                              + jnp.sum(st.w[sel] - st.mu_w[0])), expected="rejected")
    for gi in range(G):
        add("sigma_w", (gi,), "gamma", s_w[gi], r_w[gi])
        # Algorithm 2 line 8's form: precision (nu0 + n_g) sigma, mean-times-precision sigma (nu0 mu0 + sum)
        sw = st.sigma_w[gi]
        add("mu_w", (gi,), "normal", (HYPER.nu_0 + n[gi]) * sw,
            sw * (HYPER.nu_0 * HYPER.mu_0 + jnp.sum(jnp.where(g == gi, st.w, 0.0))))
        for k in range(K):
            add("sigma_v", (gi, k), "gamma", s_v[gi, k], r_v[gi, k])
            sv = st.sigma_v[gi, k]
            add("mu_v", (gi, k), "normal", (HYPER.nu_0 + n[gi]) * sv,
                sv * (HYPER.nu_0 * HYPER.mu_0 + jnp.sum(jnp.where(g == gi, st.V[:, k], 0.0))))
    return pd.DataFrame(rows)
