"""VBFM / OVBFM (thesis ch. 4): every cached expectation the updates use, against Monte Carlo from q,
and the OVBFM rescalings by exact enumeration of all minibatches.

Independent of the project's derivation (`validation.models.printed_forms`): the solver's caches and
block targets are compared with their definitions averaged over draws from q, on a state with LARGE
variances (means ~ N(0, 1), variances in [0.5, 1.5]) and rows with 3-5 active features, so that every
variance and covariance term matters. The printed forms are evaluated beside them:

- E_q[yhat_n] (eqs. 4.14, 4.22) and E_q[(y_n - yhat_n)^2] = R_n^2 + T_n with T_n as printed in 4.15
  (pair sums, read with the sum over k that the last line leaves implicit): agree;
- F_n (4.13) and F^0, F^w_i, F^v_ik (4.16-4.18): agree;
- the v_ik target: precision statistic sum_n x_ni^2 E[h_n^2] (4.20, 4.23) agrees; mean statistic
  sum_n x_ni E[(y_n - b_n) h_n] as printed (4.21, 4.24, Algorithm 3 line 26) is rejected (the existing
  erratum of `validation.models.vbfm`, confirmed here without the project's ELBO);
- the w_i and w0 targets (Algorithm 3 lines 5-6 and 14-15): agree;
- OVBFM, eqs. 4.30-4.33: the |Omega_i|-rescaled targets averaged over the batch rows of column i are
  unbiased for the CAVI targets (exact enumeration of all batches, conditional on n_i > 0): agree;
- OVBFM, Algorithm 4 line 30: blending alpha towards |s| / sum_{n in s} (R_n^2 + T_n) is biased
  (Jensen: E[1/X] > 1/E[X]), so the Robbins-Monro fixed point is not the CAVI alpha: `ERRATA_PRINTED`;
- ch. 2's variational identities (eqs. 2.34-2.41) by enumeration of a small discrete model: 2.34-2.36,
  2.40-2.41 agree, eq. 2.38 as printed (KL(p~ || q_j) in place of -KL(q_j || p~)) is in `ERRATA_PRINTED`.

Source: ``004_90693a0965f06816.txt`` ch. 2 eqs. 2.34-2.41, ch. 4 eqs. 4.13-4.33, Algorithms 3 and 4; checks:
project addition
(issue 26 item 1).
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import vbfm
from ppl_models import fm as ppl
from validation.checks.errata import Erratum
from validation.models import vbfm as vbfm_checks
from validation.models.printed_forms import Z_MAX, mc_z, x64

__all__ = ["large_variance_state", "yhat_draws", "monte_carlo_checks", "ovbfm_rescaling_check",
           "ovbfm_alpha_target", "variational_identities", "ERRATA_PRINTED", "ENUM_DESIGN"]

_SEED004 = "004_90693a0965f06816.txt"

#: the enumeration design of the OVBFM checks: 8 rows, batches of 3 (56 batches).
ENUM_DESIGN = dict(seed=5, n_users=4, n_items=3, n_genres=2, n_rows=8, max_genres=2)


def large_variance_state(design, K: int, *, seed: int = 0, alpha: float = 2.0) -> vbfm.VBFMState:
    """A float64 VBFM state with large variances, for the Monte Carlo checks.

    Means ~ N(0, 1) (w0's mean 0.5) and variances ~ U(0.5, 1.5) for w0, w and V, point alpha; prior
    precisions those of ``ppl_models.fm.FMFlatHyper()`` (1.0).

    Parameters
    ----------
    design : custom_inference.fm_design.FMDesign
        N rows, D features, G groups.
    K : int >= 1
        Interaction rank.
    seed : int, keyword-only, default 0
        Seed of `custom_inference.vbfm.init` (``PRNGKey(seed)``) and of the NumPy draws of the moments.
    alpha : float > 0, keyword-only, default 2.0
        The point value of the noise precision.

    Returns
    -------
    custom_inference.vbfm.VBFMState
        float64; w (D,), V (D, K) natural parameters.

    Raises
    ------
    ValueError
        From `custom_inference.vbfm.init`: ``K`` not an integer >= 1, or a non-positive ``alpha``.

    Source: project addition.
    """
    rng = np.random.default_rng(seed)
    D = design.n_features
    with jax.enable_x64(True):
        st = vbfm.init(jax.random.PRNGKey(seed), design, K, ppl.FMFlatHyper(alpha=alpha), dtype=jnp.float64)
        prec = lambda shape: 1.0 / rng.uniform(0.5, 1.5, shape)  # noqa: E731
        w0p, wp, vp = prec(()), prec((D,)), prec((D, K))
        return st._replace(w0_prec=jnp.asarray(w0p), w0_h=jnp.asarray(w0p * 0.5),
                           w_prec=jnp.asarray(wp), w_h=jnp.asarray(wp * rng.standard_normal(D)),
                           v_prec=jnp.asarray(vp), v_h=jnp.asarray(vp * rng.standard_normal((D, K))))


def yhat_draws(draws: dict, X: np.ndarray) -> np.ndarray:
    """yhat_n of eq. 4.1 on every draw of (w0, w, V).

    Parameters
    ----------
    draws : dict
        numpy arrays float64: "w0" (S,), "w" (S, D), "V" (S, D, K), S draws.
    X : numpy.ndarray, shape (N, D), float
        The dense design (small problems only).

    Returns
    -------
    numpy.ndarray, shape (S, N), float64
        w0 + X w + sum_{i < j} x_ni x_nj v_i . v_j per draw.

    Raises
    ------
    None of its own (shape mismatches raise NumPy's ValueError).

    Source: ``004_90693a0965f06816.txt`` eq. 4.1 (the definition, pairs i < j).
    """
    w0, w, V = draws["w0"], draws["w"], draws["V"]
    XV = np.einsum("nd,sdk->snk", X, V)
    X2V2 = np.einsum("nd,sdk->snk", X**2, V**2)
    return w0[:, None] + w @ X.T + 0.5 * np.sum(XV**2 - X2V2, axis=2)


def _solver_targets(state, design):
    """The solver's caches and its block statistics (target natural parameters divided by E[alpha],
    prior part removed), every feature at once from the same caches."""
    d = jax.tree_util.tree_map(jnp.asarray, design)
    nz = (d.rows, d.cols, d.values)
    caches, T = vbfm.compute_caches(state, *nz, d.y, d.n_rows)
    e_alpha = state.alpha_shape / state.alpha_rate
    every = jnp.ones(design.n_features, bool)
    out = {"R": caches.R, "T": T}
    st, _ = vbfm.update_w0(state, caches, None, 1.0, 1.0)
    out["w0_h"] = st.w0_h / e_alpha
    st, _ = vbfm.update_w_block(state, caches, nz, every, d.group, 1.0, 1.0)
    out["w_h"] = st.w_h / e_alpha
    for name, fn in (("solver", vbfm.update_v_block), ("printed", vbfm_checks.printed_update_v_block)):
        P, H = [], []
        for k in range(state.v_prec.shape[1]):
            st, _ = fn(state, caches, nz, every, d.group, k, 1.0, 1.0)
            P.append((st.v_prec[:, k] - state.sigma_v[d.group, k]) / e_alpha)
            H.append(st.v_h[:, k] / e_alpha)
        out[f"v_p_{name}"], out[f"v_h_{name}"] = jnp.stack(P, 1), jnp.stack(H, 1)
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def _mc_statistics(draws, design, X):
    """Per draw: yhat (n, N), and the block statistics by their definitions (n, D) / (n, D, K)."""
    y = np.asarray(design.y, np.float64)
    rows, cols, x = (np.asarray(a) for a in (design.rows, design.cols, design.values))
    D = design.n_features
    yhat = yhat_draws(draws, X)
    seg = lambda vals: np.stack([np.bincount(cols, weights=v, minlength=D) for v in vals])  # noqa: E731
    w0_stat = np.sum(y[None] - (yhat - draws["w0"][:, None]), axis=1)
    w_stat = seg(x * (y[rows] - (yhat[:, rows] - x * draws["w"][:, cols])))
    V = draws["V"]
    XV = np.einsum("nd,sdk->snk", X, V)
    vp, vh = [], []
    for k in range(V.shape[2]):
        g = XV[:, rows, k] - x * V[:, cols, k]          # sum_{m != l} x_nm v_mk, per nonzero (n, l)
        b = yhat[:, rows] - x * V[:, cols, k] * g        # yhat_n without the v_lk terms
        vp.append(seg(x**2 * g**2))
        vh.append(seg(x * (y[rows] - b) * g))
    return yhat, w0_stat, w_stat, np.stack(vp, 2), np.stack(vh, 2)


@x64
def monte_carlo_checks(design=None, K: int = 2, *, n_draws: int = 20000, seed: int = 0) -> pd.DataFrame:
    """Every expectation the VBFM updates and ELBO use, solver and printed form against Monte Carlo from q.

    E_q[yhat_n], E_q[(y_n - yhat_n)^2], F_n, F^0, F^w_i, F^v_ik, the w0, w_i and v_ik targets, at
    `large_variance_state`; the rule of `validation.models.printed_forms`. Work O(n_draws N D K) (dense X:
    small designs only). Float64 (`x64`).

    Parameters
    ----------
    design : custom_inference.fm_design.FMDesign or None, default None
        None: `validation.models.vbfm.SMALL_DESIGN` (30 rows with 3-5 active features).
    K : int >= 1, default 2
        Interaction rank.
    n_draws : int >= 2, keyword-only, default 20000
        Draws from q (`custom_inference.vbfm.draws_from_q`, seed ``seed + 1``).
    seed : int, keyword-only, default 0
        Seed of the state.

    Returns
    -------
    pandas.DataFrame
        One row per quantity: quantity, equation, z_solver, z_printed (max |z| over entries), solver_passes,
        printed_passes (|z| <= `Z_MAX` = 5).

    Raises
    ------
    ValueError
        For ``n_draws`` < 2 (from `mc_z`) and from `large_variance_state` for a bad ``K``.

    Source: ``004_90693a0965f06816.txt`` eqs. 4.13-4.24, Algorithm 3; check: project addition.
    """
    design = design or vbfm_checks.simulated_design(**vbfm_checks.SMALL_DESIGN)
    state = large_variance_state(design, K, seed=seed)
    with jax.enable_x64(True):
        got = _solver_targets(state, design)
    X = design.to_dense()
    y = np.asarray(design.y, np.float64)
    mean_pr, var_pr = vbfm_checks.dense_moments(state, X)[:2]   # eqs. 4.14, 4.15 as printed (pair sums)
    draws = {k: v[0].astype(np.float64) for k, v in vbfm.draws_from_q(seed + 1, state, n_draws).items()}
    yhat, w0_stat, w_stat, v_p, v_h = _mc_statistics(draws, design, X)
    alpha = float(state.alpha_shape / state.alpha_rate)
    loglik = lambda sq: 0.5 * (np.log(alpha) - np.log(2 * np.pi)) - 0.5 * alpha * sq  # noqa: E731
    (m0, s0), (m, s), (mu, sv) = (tuple(np.asarray(a, np.float64) for a in p) for p in vbfm.moments(state))
    group = np.asarray(design.group)
    sig = [(float(state.sigma_0), m0, s0, draws["w0"]),
           (np.asarray(state.sigma_w)[group], m, s, draws["w"]),
           (np.asarray(state.sigma_v)[group], mu, sv, draws["V"])]

    def kl_draws(prec, mean, var, z):   # log N(z | 0, 1/prec) - log N(z | mean, var), per draw
        return 0.5 * np.log(prec * var) - 0.5 * prec * z**2 + 0.5 * (z - mean) ** 2 / var

    def f_printed(prec, mean, var):     # eqs. 4.16-4.18
        return 0.5 + 0.5 * np.log(prec * var) - 0.5 * prec * (mean**2 + var)

    rows = [
        ("E_q[yhat_n]", "4.14, 4.22", yhat, y - got["R"], mean_pr),
        ("E_q[(y_n - yhat_n)^2] = R_n^2 + T_n", "4.13, 4.15", (y - yhat) ** 2, got["R"] ** 2 + got["T"],
         (y - mean_pr) ** 2 + var_pr),
        ("F_n = E_q log N(y_n | yhat_n, 1/alpha)", "4.13", loglik((y - yhat) ** 2),
         loglik(got["R"] ** 2 + got["T"]), loglik((y - mean_pr) ** 2 + var_pr)),
    ]
    for name, (prec, mean, var, z) in zip(("F^0", "F^w_i", "F^v_ik"), sig):
        value = f_printed(prec, mean, var)
        rows.append((name, {"F^0": "4.16", "F^w_i": "4.17", "F^v_ik": "4.18"}[name], kl_draws(prec, mean, var, z),
                     value, value))
    rows += [
        ("w0 target: sum_n E[y_n - (yhat_n - w0)]", "Algorithm 3 lines 5-6", w0_stat, got["w0_h"], got["w0_h"]),
        ("w_i target: sum_n x_ni E[y_n - (yhat_n - x_ni w_i)]", "Algorithm 3 lines 14-15", w_stat, got["w_h"],
         got["w_h"]),
        ("v_ik precision: sum_n x_ni^2 E[h_n^2]", "4.20, 4.23, Algorithm 3 line 25", v_p, got["v_p_solver"],
         got["v_p_printed"]),
        ("v_ik mean: sum_n x_ni E[(y_n - b_n) h_n]", "4.21, 4.24, Algorithm 3 line 26", v_h, got["v_h_solver"],
         got["v_h_printed"]),
    ]
    out = []
    for q, eq, samples, solver, printed in rows:
        zs, zp = mc_z(samples, solver), mc_z(samples, printed)
        out.append(dict(quantity=q, equation=eq, z_solver=zs, z_printed=zp, solver_passes=zs <= Z_MAX,
                        printed_passes=zp <= Z_MAX))
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------
# OVBFM: exact enumeration of all minibatches


@x64
def _per_row_statistics(state, design):
    """Per nonzero (n, i) of the CAVI statistics: w (x^2, x (R + x m)), v per k (precision, mean parts),
    and per row w0 (1, R + m0) and E[(y - yhat)^2] = R^2 + T; from the solver's caches (float64)."""
    with jax.enable_x64(True):
        d = jax.tree_util.tree_map(jnp.asarray, design)
        caches, T = vbfm.compute_caches(state, d.rows, d.cols, d.values, d.y, d.n_rows)
    R, S1, S2, S3, T = (np.asarray(a, np.float64) for a in (*caches, T))
    rows, cols, x = (np.asarray(a) for a in (design.rows, design.cols, design.values))
    (m0, _), (m, _), (mu, sv) = (tuple(np.asarray(a, np.float64) for a in p) for p in vbfm.moments(state))
    A = S1[rows] - x[:, None] * mu[cols]
    S2m = S2[rows] - x[:, None] ** 2 * sv[cols]
    S3m = S3[rows] - x[:, None] ** 3 * sv[cols] * mu[cols]
    xk = x[:, None]
    return dict(rows=rows, cols=cols, w0_h=R + m0, sq=R**2 + T, w_p=x**2, w_h=x * (R[rows] + x * m[cols]),
                v_p=xk**2 * (A**2 + S2m), v_h=xk * (A * (R[rows][:, None] + xk * mu[cols] * A) - (A * S2m - S3m)))


@x64
def ovbfm_rescaling_check(design=None, K: int = 2, batch_size: int = 3, *, seed: int = 0) -> pd.DataFrame:
    """OVBFM's rescaled minibatch targets (eqs. 4.30-4.33) against the CAVI statistics, by enumeration of all batches.

    The printed per-row targets, rescaled by N (w0) or |Omega_i| (w_i, v_ik) and averaged over the n_i rows
    of column i in the batch, averaged over ALL batches of ``batch_size`` rows (exact enumeration; for w_i,
    v_ik over the batches with n_i > 0), against the CAVI statistic over all rows, at
    `large_variance_state`. Float64 (`x64`).

    Parameters
    ----------
    design : custom_inference.fm_design.FMDesign or None, default None
        None: the design of `ENUM_DESIGN` (8 rows). C(N, batch_size) batches are enumerated: small N only.
    K : int >= 1, default 2
        Interaction rank.
    batch_size : int, default 3
        Rows per batch, in 1..N.
    seed : int, keyword-only, default 0
        Seed of the state.

    Returns
    -------
    pandas.DataFrame
        One row per statistic (w0, w_p, w_h, v_p, v_h): quantity, equation, max_rel_diff, passed (< 1e-12:
        float64 rounding).

    Raises
    ------
    ValueError
        When ``batch_size`` is not in 1..N; from `large_variance_state` for a bad ``K``.

    Source: ``004_90693a0965f06816.txt`` eqs. 4.29-4.33 (the rescaling of 4.25); check: project addition.
    """
    design = design or vbfm_checks.simulated_design(**ENUM_DESIGN)
    N = design.n_rows
    if not 1 <= batch_size <= N:
        raise ValueError(f"batch_size must be in 1..{N}, got {batch_size}")
    st = _per_row_statistics(large_variance_state(design, K, seed=seed), design)
    rows, cols = st["rows"], st["cols"]
    D = design.n_features
    omega = np.bincount(cols, minlength=D).astype(float)   # |Omega_i|
    full = {"w0": st["w0_h"].sum(), "w_p": np.bincount(cols, st["w_p"], D), "w_h": np.bincount(cols, st["w_h"], D),
            "v_p": np.stack([np.bincount(cols, st["v_p"][:, k], D) for k in range(K)], 1),
            "v_h": np.stack([np.bincount(cols, st["v_h"][:, k], D) for k in range(K)], 1)}
    acc = {k: np.zeros_like(np.asarray(v, float)) for k, v in full.items()}
    hits = np.zeros(D)
    for batch in itertools.combinations(range(N), batch_size):
        in_b = np.isin(rows, batch)
        n_i = np.bincount(cols[in_b], minlength=D)
        has = n_i > 0
        hits += has
        acc["w0"] += N * st["w0_h"][list(batch)].mean()                      # eq. 4.31
        for key in ("w_p", "w_h"):                                          # eq. 4.32
            acc[key] += np.where(has, omega * np.bincount(cols[in_b], st[key][in_b], D) / np.maximum(n_i, 1), 0.0)
        for key in ("v_p", "v_h"):                                          # eq. 4.33
            s = np.stack([np.bincount(cols[in_b], st[key][in_b, k], D) for k in range(K)], 1)
            acc[key] += np.where(has[:, None], omega[:, None] * s / np.maximum(n_i, 1)[:, None], 0.0)
    n_batches = sum(1 for _ in itertools.combinations(range(N), batch_size))
    out = []
    for key, eq in (("w0", "4.31"), ("w_p", "4.32 (precision)"), ("w_h", "4.32 (mean)"),
                    ("v_p", "4.33 (precision)"), ("v_h", "4.33 (mean, with the corrected per-row statistic)")):
        denom = n_batches if key == "w0" else np.maximum(hits, 1).reshape((-1,) + (1,) * (full[key].ndim - 1))
        v = float(np.max(np.abs(acc[key] / denom - full[key]) / np.maximum(np.abs(full[key]), 1e-300)))
        out.append(dict(quantity=key, equation=eq, max_rel_diff=v, passed=v < 1e-12))
    return pd.DataFrame(out)


@functools.lru_cache(maxsize=4)
@x64
def ovbfm_alpha_target(form: str, batch_size: int = 3) -> float:
    """Relative bias of OVBFM's alpha target averaged over ALL batches (exact enumeration).

    Against the CAVI value N / sum_n (R_n^2 + T_n) (Algorithm 3 line 33) on `ENUM_DESIGN` at
    `large_variance_state` (K = 2). "printed": Algorithm 4 line 30 blends alpha itself towards
    |s| / sum_{n in s} (R_n^2 + T_n), so its fixed point is the batch average of that ratio; "corrected":
    blend the Gamma natural parameters (shape N/2, rate (N/|s|) sum_{n in s} (R_n^2 + T_n) / 2), whose fixed
    point is the ratio of the averaged shape and rate (what `custom_inference.vbfm.update_alpha` does).
    Float64 (`x64`); cached (`functools.lru_cache`).

    Parameters
    ----------
    form : {"printed", "corrected"}
        The update judged.
    batch_size : int, default 3
        Rows per batch (of the design's 8).

    Returns
    -------
    float
        |fixed point / CAVI - 1|.

    Raises
    ------
    ValueError
        For another ``form``.

    Source: ``004_90693a0965f06816.txt`` Algorithm 4 line 30; check: project addition.
    """
    if form not in ("printed", "corrected"):
        raise ValueError(f"form must be 'printed' or 'corrected', got {form!r}")
    design = vbfm_checks.simulated_design(**ENUM_DESIGN)
    sq = _per_row_statistics(large_variance_state(design, 2), design)["sq"]
    N = sq.size
    cavi = N / sq.sum()
    batches = [list(b) for b in itertools.combinations(range(N), batch_size)]
    if form == "printed":
        fixed = np.mean([batch_size / sq[b].sum() for b in batches])
    else:
        fixed = (N / 2) / np.mean([(N / batch_size) * sq[b].sum() / 2 for b in batches])
    return float(abs(fixed / cavi - 1.0))


def variational_identities(seed: int = 0, n_random_q: int = 2000) -> dict:
    """Thesis sec. 2.3.2 (eqs. 2.34-2.41) by exact enumeration on a small discrete model.

    Z = (Z1, Z2) with 3 x 4 states, a random joint log p(X, Z) ~ N(0, 1.5^2), a random factorised
    q = q1 q2, and ln p~(Z1) = E_q2[ln p(X, Z)] (the constant of eq. 2.39 set to 0, p~ unnormalised).

    Parameters
    ----------
    seed : int, default 0
        NumPy seed of the joint, of q and of the random q1.
    n_random_q : int, default 2000
        Random q1 ~ Dirichlet(1) compared with eq. 2.41's optimum.

    Returns
    -------
    dict
        float values: ``evidence_gap`` |ln p(X) - L - KL(q || p(Z | X))| (eqs. 2.34-2.36); ``printed_238``
        |L - [KL(p~ || q1) - sum_Z2 q2 ln q2]| (eq. 2.38 as printed); ``corrected_238``
        |L - [-KL(q1 || p~) - sum_Z2 q2 ln q2]|; ``optimum_241`` max over the random q1 of L(q1) - L(q1*)
        with q1* from eq. 2.41 (must be <= 0).

    Raises
    ------
    None of its own.

    Source: ``004_90693a0965f06816.txt`` eqs. 2.34-2.41; check: project addition.
    """
    rng = np.random.default_rng(seed)
    logp = rng.normal(0.0, 1.5, (3, 4))                               # ln p(X, Z1, Z2), X fixed
    q1, q2 = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(4))

    def elbo(a, b):
        return float(np.sum(a[:, None] * b[None] * (logp - np.log(a)[:, None] - np.log(b)[None])))

    L = elbo(q1, q2)
    log_evidence = float(np.log(np.exp(logp).sum()))
    post = np.exp(logp - log_evidence)
    qq = q1[:, None] * q2[None]
    kl = float(np.sum(qq * (np.log(qq) - np.log(post))))
    log_pt = logp @ q2                                                # ln p~(Z1), eq. 2.39
    ent2 = float(q2 @ np.log(q2))
    printed = float(np.sum(np.exp(log_pt) * (log_pt - np.log(q1)))) - ent2
    corrected = -float(np.sum(q1 * (np.log(q1) - log_pt))) - ent2
    q_star = np.exp(log_pt - log_pt.max())
    q_star /= q_star.sum()                                            # eq. 2.41
    best = elbo(q_star, q2)
    others = max(elbo(a, q2) for a in rng.dirichlet(np.ones(3), n_random_q))
    return dict(evidence_gap=abs(log_evidence - L - kl), printed_238=abs(L - printed),
                corrected_238=abs(L - corrected), optimum_241=others - best)


def _identity_238_check(form: str):
    v = variational_identities()["printed_238" if form == "printed" else "corrected_238"]
    return v < 1e-12, v   # exact enumeration: float64 rounding only


def _alpha_check(form: str):
    v = ovbfm_alpha_target(form)
    return v < 1e-12, v   # exact enumeration: float64 rounding only


ERRATA_PRINTED: tuple[Erratum, ...] = (
    Erratum(
        _SEED004, "ch. 2, eq. 2.38 (the bound as a function of one factor q_j)",
        "L(q, theta) = KL(p~ || q_j) - sum_{i != j} int q_i ln q_i dZ_i",
        "L(q, theta) = -KL(q_j || p~) - sum_{i != j} int q_i ln q_i dZ_i, with ln p~ = E_{i != j}[ln p(X, Z)] "
        "(the constant of eq. 2.39 zero, p~ unnormalised)",
        "L = int q_j E_{i != j}[ln p] dZ_j - int q_j ln q_j dZ_j + sum_{i != j} H[q_i] = -KL(q_j || p~) + ...: the "
        "printed form has the divergence's sign and argument order reversed (as printed, maximising L would "
        "maximise a KL, contradicting the next sentence and eq. 2.40) (check: exact enumeration of L on a 3 x 4 "
        "discrete model with a random joint and a random factorised q, |L - form| < 1e-12)",
        "enumeration of a discrete model", _identity_238_check,
    ),
    Erratum(
        _SEED004, "Algorithm 4 line 30 (OVBFM noise precision alpha)",
        "alpha <- (1 - eta) alpha + eta |s| / sum_{n in s} (R_n^2 + T_n)",
        "blend the Gamma natural parameters: shape <- (1 - eta) shape + eta N/2, rate <- (1 - eta) rate + "
        "eta (N/|s|) sum_{n in s} (R_n^2 + T_n) / 2; alpha = shape / rate",
        "the batch ratio |s| / sum_s is a biased estimate of N / sum_n (E[1/X] > 1/E[X]), so the Robbins-Monro "
        "iteration settles at the batch average of the ratio, not at the CAVI alpha of Algorithm 3 line 33; "
        "blending the (unbiased) natural parameters keeps the fixed point (check: exact enumeration of all 56 "
        "batches of 3 of 8 rows, |fixed point / CAVI alpha - 1| < 1e-12)",
        "enumeration of batches", _alpha_check,
    ),
)
