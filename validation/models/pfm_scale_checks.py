r"""Checks of the NPFM / PPFM per-factor scale move (`custom_inference.pfm_scale`) against the program.

- `scale_ratio_check`: at random states (prior draws of the model drawn with numpy; the move's
  own log ratio phi_k(eps) for random eps) the move's log ratio equals
  log pi(T_eps x) - log pi(x) + log|det dT_eps/dx|, pi the NumPyro program's log density (y
  included, float64) and log|det| summed here from the coordinates themselves
  (sum of log(x'_m / x_m) over every coordinate m; T_eps is diagonal), one factor moved at a
  time; and the Poisson rates of every cell are unchanged (relative 1e-12). On non-bipartite
  data (side features) PPFM's transformation changes the rates: the check reports it (a
  negative control that the rate comparison can fail). ``move="global"``: the same check of
  NPFM's global move (`custom_inference.pfm_scale.global_log_ratio`, all factors and c at once).
- `scale_invariance_check`: the move alone (no data enters it) must keep the prior invariant.
  n independent prior draws are each moved ``n_rounds`` times; for every functional (log r_k,
  log delta_k, log of r_k v_ik v_jk for a user-item pair, log v_ik) a two-sample KS test
  compares them with n fresh, independent prior draws. Family false-alarm rate ``alpha``
  (Bonferroni over the functionals). Passing ``move_hyper`` different from the prior's
  hyperparameters makes the move target another distribution, which the test must reject.
  ``move="global"``: the same for NPFM's global move (functionals add log c).
- `flat_directions`: an independent count of the likelihood's flat directions. The rank of the
  Jacobian of every cell's log rate with respect to the log of every likelihood parameter (w0, w,
  V and NPFM's r; float64 SVD at a random prior state, more cells than parameters) gives the
  dimension of the directions along which no rate changes. Derived count (cell rate =
  w0 + w_u + w_j + x_u.w_Uf + x_j.w_If + c_u + d_j + sum_k r_k A_uk B_jk, A / B the entity rows'
  sums x v, c / d the inside-entity pair terms): 2 (w0 against all w_u, against all w_j) + K^2
  (A -> A M, B -> B M^-T: the K per-factor trades and K^2 - K that mix factors) + 2K (A -> A + 1 m^T
  with the item weights absorbing B m, and the same for B) + K (NPFM: r_k against the factor's
  scale) + (D_u + D_v)(K + 1) (each side feature's v_f. and w_f against its entities' ids). Only
  the per-factor trades (and r's scalings) stay inside the positive orthant along a whole orbit;
  the factor-mixing and shift directions hit its boundary, which is why the moves use the former.
- ``move="trade"`` in both checks above: the side-feature trade of
  `custom_inference.pfm_scale.trade_move` (id weights absorb the inside-entity pair terms).

Source: project addition (checks of the move derived in `custom_inference.pfm_scale`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from numpyro.infer.util import log_density
from scipy import stats

from custom_inference import pfm, pfm_scale
from ppl_models import pfm as ppl

__all__ = ["scale_ratio_check", "scale_invariance_check", "flat_directions"]

_RATIO_RTOL = 1e-9  # float64: both sides are O(10) sums of O(10) terms, rounding ~1e-14


def _numpy_prior(rng, D, K, hyper, variant, n=None):
    """Prior draws of the program's sites with numpy (float64; r clamped at 1e-300): one draw
    (n None) or n draws stacked on a leading axis."""
    h = hyper
    lead = () if n is None else (int(n),)

    def g(a, b, *shape):
        size = lead + shape
        return rng.gamma(np.broadcast_to(a, size), 1.0 / np.broadcast_to(b, size))

    out = {"alpha0": g(h.a_0, h.b_0), "beta0": g(h.c_0, h.d_0), "alpha": g(h.a, h.b, D), "beta": g(h.c, h.d, D),
           "zeta": g(h.e, h.f, D), "delta": g(h.g, h.h, K)}
    col = (lambda x: np.asarray(x)[..., None])  # noqa: E731
    out["w0"] = g(out["alpha0"], out["beta0"])
    out["w"] = g(out["alpha"], out["beta"], D)
    out["V"] = g(out["zeta"][..., :, None], out["delta"][..., None, :], D, K)
    if variant == "npfm":
        out["gamma0"], out["c"] = g(h.e_0, h.f_0), g(h.g_0, h.h_0)
        out["r"] = np.maximum(g(col(out["gamma0"]) / K, col(out["c"]), K), 1e-300)
    return out


def _side_features(rng, I, J):
    """One dense user side feature and two dense item side features, values in [0.5, 2] (csr)."""
    import scipy.sparse as sp

    return sp.csr_matrix(rng.uniform(0.5, 2.0, size=(I, 1))), sp.csr_matrix(rng.uniform(0.5, 2.0, size=(J, 2)))


def _program_lp(args, variant):
    """jit-compiled (params, y) -> the program's log density (float64 under x64)."""
    return jax.jit(lambda params, y: log_density(ppl.model, args + (y,), {"variant": variant}, params)[0])


def _state(draw, variant):
    cls = pfm.NPFMState if variant == "npfm" else pfm.PPFMState
    return cls(**{f: jnp.asarray(draw[f]) for f in cls._fields})


def _data(I, J, Uf=None, Vf=None):
    import scipy.sparse as sp

    y = np.zeros((I, J))
    y[0, 0] = 1.0
    return pfm.PFMData.from_matrix(sp.csr_matrix(y), user_features=Uf, item_features=Vf)


def scale_ratio_check(variant: str = "npfm", *, seed: int = 0, n_states: int = 5, side: bool = False,
                      I: int = 3, J: int = 4, K: int = 3, move: str = "factor") -> pd.DataFrame:
    """The move's log ratio against the program's log joint plus log|Jacobian|, per factor.

    At ``n_states`` prior draws (NumPy, float64) on an I x J ids-only design (plus side features with
    ``side``), with y drawn from the rates: phi (the move's log ratio, `custom_inference.pfm_scale`)
    against log pi(T x) - log pi(x) + log|J| of `ppl_models.pfm.model` (NumPyro's ``log_density``), and
    the largest relative change of the cells' rates.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    seed : int, keyword-only, default 0
        NumPy seed of the side features, states, outcomes and move sizes.
    n_states : int, keyword-only, default 5
        Prior draws.
    side : bool, keyword-only, default False
        Add one user and two item side features (PPFM: then not bipartite; only the rate comparison
        runs, and ``rates_unchanged`` is expected False).
    I, J : int, keyword-only, defaults 3, 4
        Users and items.
    K : int, keyword-only, default 3
        Latent dimension.
    move : {"factor", "global", "trade"}, keyword-only, default "factor"
        "factor" (the per-factor move, one factor moved at a time, eps ~ N(0, 0.7^2)), "global" (NPFM's
        global move: one row per state, ``factor`` -1, t ~ N(0, 0.7^2)) or "trade" (the side-feature trade,
        one factor at a time, t ~ N(0, 0.7^2) halved until the id weights stay positive; the sampler's own
        sides, so with ``side`` the ratio is checked too; log|J| from ``jax.jacfwd`` and ``slogdet``).

    Returns
    -------
    pandas.DataFrame
        One row per (state, factor): variant, move, state, factor, eps (the move's size), ``phi``,
        ``program`` (float64), ``rel_err`` (|phi - program| / max(1, |program|)), ``rate_rel_change`` (max
        over cells of |rate'/rate - 1|), ``ratio_ok`` (rel_err <= 1e-9; meaningless for non-bipartite PPFM,
        where phi leaves out the likelihood's change), ``rates_unchanged`` (<= 1e-12), ``bipartite``,
        ``side_labels`` (features with a side).

    Raises
    ------
    ValueError
        For an unknown variant (from `ppl_models.pfm.model`), an unknown ``move``, or ``move="global"``
        with PPFM.

    Source: project addition (module docstring).
    """
    import scipy.sparse as sp

    if move not in ("factor", "global", "trade"):
        raise ValueError(f"move must be 'factor', 'global' or 'trade', got {move!r}")
    if move == "global" and variant != "npfm":
        raise ValueError("move='global' is defined for NPFM only")
    rng = np.random.default_rng(seed)
    Uf = sp.csr_matrix(rng.uniform(0.5, 2.0, size=(I, 1))) if side else None
    Vf = sp.csr_matrix((rng.uniform(size=(J, 2)) < 0.6) * 1.0) if side else None
    hyper = ppl.PFMHyper(a_0=1.3, b_0=0.7, c_0=2.1, d_0=1.6, a=0.9, b=1.4, c=1.8, d=1.1, e=1.2, f=0.8, g=2.4,
                         h=1.9, e_0=2.2, f_0=1.5, g_0=1.7, h_0=0.6)
    rows_out = []
    with jax.enable_x64(True):
        rows, cols, vals, N, D, _, _ = ppl.cells_design(I, J, user_features=Uf, item_features=Vf)
        args = (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(vals), N, D, K, hyper)
        data = _data(I, J, Uf, Vf)
        bip = data.bipartite
        # side: the sampler's own labels if defined, else user/item entity columns (for the control)
        side_arr = np.asarray(data.side)
        data_sided = data if (variant == "npfm" or bip) else _with_bipartite(data)
        lp = _program_lp(args, variant)

        def rates(params):
            return ppl.rates(params, args[0], args[1], args[2], N, variant)

        for s in range(n_states):
            draw = _numpy_prior(rng, D, K, hyper, variant)
            st = _state(draw, variant)
            params = {f: getattr(st, f) for f in st._fields}
            y = jnp.asarray(rng.poisson(np.asarray(rates(params))).astype(np.float64))
            lp0 = float(lp(params, y))
            rate0 = np.asarray(rates(params))
            if move == "global":
                t = rng.normal(0.0, 0.7)
                moves = [(-1, t, pfm_scale.global_transform(t, st), float(pfm_scale.global_log_ratio(t, st, hyper)))]
            elif move == "trade":
                moves = []
                for k in range(K):
                    t = rng.normal(0.0, 0.7)
                    while not np.isfinite(float(pfm_scale.trade_log_ratio(k, t, st, data))):
                        t /= 2.0
                    moves.append((k, t, pfm_scale.trade_transform(k, t, st, data),
                                  float(pfm_scale.trade_log_ratio(k, t, st, data))))
            else:
                moves = []
                for k in range(K):
                    eps = np.zeros(K)
                    eps[k] = rng.normal(0.0, 0.7)
                    eps_j = jnp.asarray(eps)
                    moves.append((k, eps[k], pfm_scale.scale_transform(eps_j, st, data_sided),
                                  float(pfm_scale.scale_log_ratio(eps_j, st, data_sided, hyper)[k])))
            for k, eps_k, moved, phi in moves:
                mp = {f: getattr(moved, f) for f in moved._fields}
                if move == "trade":  # not diagonal (w shifts by a function of V): slogdet of the full Jacobian
                    logj = _trade_log_jacobian(k, eps_k, st, data)
                else:
                    logj = float(sum(np.sum(np.log(np.asarray(getattr(moved, f)) / np.asarray(getattr(st, f))))
                                     for f in st._fields))
                prog = float(lp(mp, y)) - lp0 + logj
                rate1 = np.asarray(rates(mp))
                rel = abs(phi - prog) / max(1.0, abs(prog))
                rch = float(np.max(np.abs(rate1 / rate0 - 1.0)))
                rows_out.append({"variant": variant, "move": move, "state": s, "factor": k, "eps": eps_k, "phi": phi,
                                 "program": prog, "rel_err": rel, "rate_rel_change": rch,
                                 "ratio_ok": bool(rel <= _RATIO_RTOL), "rates_unchanged": bool(rch <= 1e-12),
                                 "bipartite": bool(bip), "side_labels": int(np.sum(side_arr != 0))})
    return pd.DataFrame(rows_out)


def _trade_log_jacobian(k, t, st, data) -> float:
    """log|det| of the trade's map on (w, V) (the coordinates it moves), from ``jax.jacfwd`` of the
    map on the flattened coordinates and ``slogdet`` (float64), independent of the derivation's
    triangular argument."""
    nw = st.w.size

    def f(x):
        s2 = st._replace(w=x[:nw], V=x[nw:].reshape(st.V.shape))
        out = pfm_scale.trade_transform(k, t, s2, data)
        return jnp.concatenate([out.w, out.V.reshape(-1)])

    jac = jax.jacfwd(f)(jnp.concatenate([st.w, st.V.reshape(-1)]))
    sign, logdet = np.linalg.slogdet(np.asarray(jac))
    return float(logdet) if sign > 0 else float("nan")


def _with_bipartite(data):
    """The same data claiming ``bipartite`` (for the negative control only: the move then ignores
    the within-side pair terms, so the rates change)."""
    from dataclasses import replace

    return replace(data, bipartite=True)


def scale_invariance_check(variant: str = "npfm", *, seed: int = 0, n: int = 4000, n_rounds: int = 25,
                           I: int = 3, J: int = 4, K: int = 3, alpha: float = 1e-3,
                           wrong_target: bool = False, move: str = "factor") -> pd.DataFrame:
    """The move alone keeps the prior invariant: moved prior draws vs fresh prior draws (KS).

    ``n`` prior draws of ``variant`` on an I x J ids-only design (float64), each moved by ``n_rounds``
    steps of `custom_inference.pfm_scale.scale_move`, against ``n`` fresh independent prior draws (both
    sets drawn with NumPy, independently); two-sample KS per functional: log r_k, log delta_k (NPFM),
    log(r_k v_0k v_Ik) (user 0 x item 0), log v_0k, log v_Ik, per factor k. Family false-alarm rate
    ``alpha`` (Bonferroni over the rows).

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    seed : int, keyword-only, default 0
        NumPy seed of the draws and ``PRNGKey(seed)`` of the moves.
    n : int, keyword-only, default 4000
        Draws in each set.
    n_rounds : int, keyword-only, default 25
        Move steps per draw.
    I, J : int, keyword-only, defaults 3, 4
        Users and items.
    K : int, keyword-only, default 3
        Latent dimension.
    alpha : float, keyword-only, default 1e-3
        Family false-alarm rate.
    wrong_target : bool, keyword-only, default False
        The move targets another law (NPFM: its hyperparameter g doubled; PPFM: each draw moved as if its
        zeta were doubled, then zeta restored; global: g_0 doubled; trade: moved as if the id weights' rates
        beta were tripled, then restored): the test must then fail (power).
    move : {"factor", "global", "trade"}, keyword-only, default "factor"
        "global" (NPFM only): `custom_inference.pfm_scale.global_move`, the functionals add log c.
        "trade": `custom_inference.pfm_scale.trade_move` on a design with one user and two item side
        features (dense, values in [0.5, 2]), hyperparameters a = 8, b = 4, e = f = 8 (alpha_i and zeta_i
        near 2 and 1, so few w near 0); the functionals add log v of the user side feature and log w of
        user 0's and item 0's ids.

    Returns
    -------
    pandas.DataFrame
        One row per functional: ``name``, ``p`` (KS p-value), ``passed`` (p > alpha / rows),
        ``accept_rate`` (the move's mean acceptance).

    Raises
    ------
    ValueError
        For an unknown variant (from `ppl_models.pfm.model`), an unknown ``move``, or ``move="global"``
        with PPFM.

    Source: project addition (module docstring).
    """
    if move not in ("factor", "global", "trade"):
        raise ValueError(f"move must be 'factor', 'global' or 'trade', got {move!r}")
    if move == "global" and variant != "npfm":
        raise ValueError("move='global' is defined for NPFM only")
    hyper = ppl.PFMHyper(a_0=2.0, b_0=2.0, c_0=3.0, d_0=2.0, a=2.0, b=2.0, c=3.0, d=2.0, e=2.0, f=2.0,
                         g=3.0, h=2.0, e_0=2.0, f_0=1.0, g_0=3.0, h_0=2.0)
    if move == "trade":  # id weights and zeta away from 0, so that the orbits are wide enough to test
        hyper = hyper._replace(a=8.0, b=4.0, e=8.0, f=8.0)
    mh = hyper
    if wrong_target and variant == "npfm":
        mh = hyper._replace(g_0=2 * hyper.g_0) if move == "global" else hyper._replace(g=2 * hyper.g)
    zf = 2.0 if (wrong_target and variant != "npfm" and move != "trade") else 1.0
    bf = 3.0 if (wrong_target and move == "trade") else 1.0
    kernel = {"global": pfm_scale.global_move, "trade": pfm_scale.trade_move}.get(move, pfm_scale.scale_move)

    def step(kk, s):
        out, acc = kernel(kk, s._replace(zeta=zf * s.zeta, beta=bf * s.beta), data, mh, n_rounds)
        return out._replace(zeta=s.zeta, beta=s.beta), acc

    rng = np.random.default_rng(seed)
    Uf, Vf = _side_features(rng, I, J) if move == "trade" else (None, None)
    D = I + J + (0 if Uf is None else Uf.shape[1] + Vf.shape[1])
    with jax.enable_x64(True):
        a = _numpy_prior(rng, D, K, hyper, variant, n)
        b = _numpy_prior(rng, D, K, hyper, variant, n)  # independent of a
        data = _data(I, J, Uf, Vf)
        moved, acc = jax.jit(jax.vmap(step))(jax.random.split(jax.random.PRNGKey(seed), n), _state(a, variant))
        ref = _state(b, variant)

    def funcs(s):
        out = {}
        V = np.asarray(s.V)
        r = np.asarray(s.r) if variant == "npfm" else np.ones((V.shape[0], K))
        if move == "global":
            out["log c"] = np.log(np.asarray(s.c))
        for k in range(K):
            if variant == "npfm":
                out[f"log r_{k}"] = np.log(r[:, k])
                out[f"log delta_{k}"] = np.log(np.asarray(s.delta)[:, k])
            out[f"log r v_u0 v_i0 (k={k})"] = np.log(r[:, k] * V[:, 0, k] * V[:, I, k])
            out[f"log v_u0 (k={k})"] = np.log(V[:, 0, k])
            out[f"log v_i0 (k={k})"] = np.log(V[:, I, k])
            if move == "trade":
                out[f"log v_uside0 (k={k})"] = np.log(V[:, I + J, k])
        if move == "trade":
            out["log w_u0"] = np.log(np.asarray(s.w)[:, 0])
            out["log w_i0"] = np.log(np.asarray(s.w)[:, I])
        return out

    fm, fr = funcs(moved), funcs(ref)
    rows = [{"name": nm, "p": float(stats.ks_2samp(fm[nm], fr[nm]).pvalue)} for nm in fm]
    m = len(rows)
    for r_ in rows:
        r_["passed"] = bool(r_["p"] > alpha / m)
        r_["accept_rate"] = float(np.mean(np.asarray(acc)))
    return pd.DataFrame(rows)


def flat_directions(variant: str = "npfm", *, side: bool = False, seed: int = 0, I: int = 8, J: int = 9,
                    K: int = 2, rtol: float = 1e-9) -> dict:
    """Dimension of the likelihood's flat directions at a random state, counted numerically.

    The Jacobian of the log Poisson rates of all I J cells with respect to log w0, log w (D,), log V (D, K)
    and, for NPFM, log r (K,) (``jax.jacfwd``, float64; at a generic state, every value drawn uniformly
    from [0.5, 2] with NumPy) is decomposed by SVD; its null space is the set of directions along which no
    rate (so not the likelihood) changes to first order, and every continuous likelihood-preserving
    transformation has its generator there.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    side : bool, keyword-only, default False
        One dense user side feature and two dense item side features (values in [0.5, 2]), which put
        three or more features in every row.
    seed : int, keyword-only, default 0
        NumPy seed of the state and side features.
    I, J : int, keyword-only, defaults 8, 9
        Users and items (the I J cells must outnumber the parameters).
    K : int, keyword-only, default 2
        Latent dimension.
    rtol : float, keyword-only, default 1e-9
        Singular values <= ``rtol`` times the largest count as zero.

    Returns
    -------
    dict
        ``nullity`` (int: singular values <= ``rtol`` times the largest), ``predicted`` (int:
        2 + K^2 + 2K + K [NPFM] + (D_u + D_v)(K + 1), module docstring), ``n_params`` (int), ``n_cells``
        (int), ``gap`` (float: smallest singular value kept / largest one dropped, inf when none dropped),
        ``singular_values`` (numpy.ndarray float64, descending).

    Raises
    ------
    ValueError
        For an unknown variant or when the design has no more cells than parameters (the count would be
        meaningless).

    Source: project addition (independent check of the flat directions derived in
    `custom_inference.pfm_scale`).
    """
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    rng = np.random.default_rng(seed)
    Uf, Vf = _side_features(rng, I, J) if side else (None, None)
    with jax.enable_x64(True):
        rows, cols, vals, N, D, _, _ = ppl.cells_design(I, J, user_features=Uf, item_features=Vf)
        names = ("w0", "w", "V") + (("r",) if variant == "npfm" else ())
        shapes = {"w0": (), "w": (D,), "V": (D, K), "r": (K,)}
        # a generic state: every value in [0.5, 2] (prior draws with small shapes put many v near 0,
        # whose columns then vanish numerically and fake flat directions)
        draw = {n: rng.uniform(0.5, 2.0, size=shapes[n]) for n in names}
        logp = {n: jnp.log(jnp.asarray(draw[n])) for n in names}
        n_params = int(sum(np.size(draw[n]) for n in names))
        if N <= n_params:
            raise ValueError(f"flat_directions: {N} cells for {n_params} parameters; enlarge I, J")
        args = (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(vals), N)

        def log_rates(lp):
            return jnp.log(ppl.rates({n: jnp.exp(v) for n, v in lp.items()}, *args, variant))

        jac = jax.jacfwd(log_rates)(logp)
        Jm = np.concatenate([np.asarray(jac[n]).reshape(N, -1) for n in names], axis=1)
    sv = np.linalg.svd(Jm, compute_uv=False)
    small = sv <= rtol * sv[0]
    nullity = int(n_params - np.sum(~small))
    gap = float(sv[~small][-1] / sv[small][0]) if small.any() else float("inf")
    n_side = 0 if Uf is None else Uf.shape[1] + Vf.shape[1]
    predicted = 2 + K * K + 2 * K + (K if variant == "npfm" else 0) + n_side * (K + 1)
    return {"nullity": nullity, "predicted": predicted, "n_params": n_params, "n_cells": int(N), "gap": gap,
            "singular_values": sv}
