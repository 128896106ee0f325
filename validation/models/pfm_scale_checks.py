r"""Checks of the NPFM / PPFM per-factor scale move (`custom_inference.pfm_scale`) against the program.

- `scale_ratio_check`: at random states (prior draws of the model drawn with numpy; the move's
  own log ratio phi_k(eps) for random eps) the move's log ratio equals
  log pi(T_eps x) - log pi(x) + log|det dT_eps/dx|, pi the NumPyro program's log density (y
  included, float64) and log|det| summed here from the coordinates themselves
  (sum of log(x'_m / x_m) over every coordinate m; T_eps is diagonal), one factor moved at a
  time; and the Poisson rates of every cell are unchanged (relative 1e-12). On non-bipartite
  data (side features) PPFM's transformation changes the rates: the check reports it (a
  negative control that the rate comparison can fail).
- `scale_invariance_check`: the move alone (no data enters it) must keep the prior invariant.
  n independent prior draws are each moved ``n_rounds`` times; for every functional (log r_k,
  log delta_k, log of r_k v_ik v_jk for a user-item pair, log v_ik) a two-sample KS test
  compares them with n fresh, independent prior draws. Family false-alarm rate ``alpha``
  (Bonferroni over the functionals). Passing ``move_hyper`` different from the prior's
  hyperparameters makes the move target another distribution, which the test must reject.

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

__all__ = ["scale_ratio_check", "scale_invariance_check"]

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
                      I: int = 3, J: int = 4, K: int = 3) -> pd.DataFrame:
    """The move's log ratio against the program's log joint plus log|Jacobian|, per factor.

    ``variant`` "npfm" | "ppfm"; ``side``: add one user and two item side features (PPFM: then
    not bipartite; only the rate comparison runs, and ``rates_unchanged`` is expected False).
    Returns a DataFrame, one row per (state, factor): ``phi`` (the move's log ratio),
    ``program`` (log pi(T x) - log pi(x) + log|J|, NumPyro, float64), ``rel_err``,
    ``rate_rel_change`` (max over cells of |rate'/rate - 1|), ``ratio_ok`` (rel_err <= 1e-9;
    meaningless for non-bipartite PPFM, where phi leaves out the likelihood's change),
    ``rates_unchanged`` (<= 1e-12), ``bipartite``, ``side_labels`` (features with a side).

    Raises ValueError for an unknown variant (from `ppl_models.pfm.model`).

    Source: project addition (module docstring).
    """
    import scipy.sparse as sp

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
            for k in range(K):
                eps = np.zeros(K)
                eps[k] = rng.normal(0.0, 0.7)
                eps_j = jnp.asarray(eps)
                moved = pfm_scale.scale_transform(eps_j, st, data_sided)
                mp = {f: getattr(moved, f) for f in moved._fields}
                logj = float(sum(np.sum(np.log(np.asarray(getattr(moved, f)) / np.asarray(getattr(st, f))))
                                 for f in st._fields))
                prog = float(lp(mp, y)) - lp0 + logj
                phi = float(pfm_scale.scale_log_ratio(eps_j, st, data_sided, hyper)[k])
                rate1 = np.asarray(rates(mp))
                rel = abs(phi - prog) / max(1.0, abs(prog))
                rch = float(np.max(np.abs(rate1 / rate0 - 1.0)))
                rows_out.append({"variant": variant, "state": s, "factor": k, "eps": eps[k], "phi": phi,
                                 "program": prog, "rel_err": rel, "rate_rel_change": rch,
                                 "ratio_ok": bool(rel <= _RATIO_RTOL), "rates_unchanged": bool(rch <= 1e-12),
                                 "bipartite": bool(bip), "side_labels": int(np.sum(side_arr != 0))})
    return pd.DataFrame(rows_out)


def _with_bipartite(data):
    """The same data claiming ``bipartite`` (for the negative control only: the move then ignores
    the within-side pair terms, so the rates change)."""
    from dataclasses import replace

    return replace(data, bipartite=True)


def scale_invariance_check(variant: str = "npfm", *, seed: int = 0, n: int = 4000, n_rounds: int = 25,
                           I: int = 3, J: int = 4, K: int = 3, alpha: float = 1e-3,
                           wrong_target: bool = False) -> pd.DataFrame:
    """The move alone keeps the prior invariant: moved prior draws vs fresh prior draws (KS).

    ``n`` prior draws of ``variant`` on an I x J ids-only design (float64), each moved by
    ``n_rounds`` steps of `custom_inference.pfm_scale.scale_move`, against ``n`` fresh independent
    prior draws (both sets drawn with numpy, independently); two-sample KS per functional:
    log r_k, log delta_k (NPFM), log(r_k v_0k v_Ik) (user 0 x item 0), log v_0k, log v_Ik, per
    factor k. Family false-alarm rate ``alpha`` (Bonferroni over the rows).

    With ``wrong_target`` the move targets another law (NPFM: its hyperparameter g doubled;
    PPFM: each draw moved as if its zeta were doubled, then zeta restored): the test must
    then fail.

    Returns a DataFrame, one row per functional: ``name``, ``p`` (KS p-value), ``passed``
    (p > alpha / rows), ``accept_rate`` (the move's mean acceptance).

    Raises ValueError for an unknown variant (from `ppl_models.pfm.model`).

    Source: project addition (module docstring).
    """
    hyper = ppl.PFMHyper(a_0=2.0, b_0=2.0, c_0=3.0, d_0=2.0, a=2.0, b=2.0, c=3.0, d=2.0, e=2.0, f=2.0,
                         g=3.0, h=2.0, e_0=2.0, f_0=1.0, g_0=3.0, h_0=2.0)
    mh = hyper._replace(g=2 * hyper.g) if (wrong_target and variant == "npfm") else hyper
    zf = 2.0 if (wrong_target and variant != "npfm") else 1.0

    def move(kk, s):
        out, acc = pfm_scale.scale_move(kk, s._replace(zeta=zf * s.zeta), data, mh, n_rounds)
        return out._replace(zeta=s.zeta), acc

    rng = np.random.default_rng(seed)
    D = I + J
    with jax.enable_x64(True):
        a = _numpy_prior(rng, D, K, hyper, variant, n)
        b = _numpy_prior(rng, D, K, hyper, variant, n)  # independent of a
        data = _data(I, J)
        moved, acc = jax.jit(jax.vmap(move))(jax.random.split(jax.random.PRNGKey(seed), n), _state(a, variant))
        ref = _state(b, variant)

    def funcs(s):
        out = {}
        V = np.asarray(s.V)
        r = np.asarray(s.r) if variant == "npfm" else np.ones((V.shape[0], K))
        for k in range(K):
            if variant == "npfm":
                out[f"log r_{k}"] = np.log(r[:, k])
                out[f"log delta_{k}"] = np.log(np.asarray(s.delta)[:, k])
            out[f"log r v_u0 v_i0 (k={k})"] = np.log(r[:, k] * V[:, 0, k] * V[:, I, k])
            out[f"log v_u0 (k={k})"] = np.log(V[:, 0, k])
            out[f"log v_i0 (k={k})"] = np.log(V[:, I, k])
        return out

    fm, fr = funcs(moved), funcs(ref)
    rows = [{"name": nm, "p": float(stats.ks_2samp(fm[nm], fr[nm]).pvalue)} for nm in fm]
    m = len(rows)
    for r_ in rows:
        r_["passed"] = bool(r_["p"] > alpha / m)
        r_["accept_rate"] = float(np.mean(np.asarray(acc)))
    return pd.DataFrame(rows)
