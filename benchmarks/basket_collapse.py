"""Why PSM and RG sit on the popularity baseline on market baskets (issue 27, item 1).

For PSM (seed 000, Algorithm 1), RG (seed 003) and BPR-uniform fitted on the same training matrix of
a basket file (one item left out of every basket of >= 2 items:
`validation.splits.split_leave_one_item_out_baskets`), it reports

- the held-out metrics: rank score (eq. 12 of seed 000) and HR@10;
- how far each basket's scores are from popularity's order, over a sample of test baskets: the
  Spearman correlation of the basket's candidate scores (training items excluded) with the items'
  training degree, and the share of popularity's top 10 candidates in the model's top 10;
- the spread of the fitted factors against the biases: the mean norm of the user (basket) and item
  vectors, the standard deviation over items of the item bias, and the "personal share": per
  basket, sd over candidate items of u_i . v_j against sd of the item-only part of the logit (the
  item bias, plus log E psi_j for PSM's predictive, whose score is E psi_j sigma(x_ij)); 0 means
  every basket gets the same (popularity-like) order.

Then one controlled change at a time (``--causes``): PSM's initial factor scale, its prior precision
tau_u = tau_v, r (D' = r D), K, more sweeps at tol 0, and initialisation from BPR's factors
(diagnostic only); RG's cold start, prior, r and K.

Usage::

    PYTHONPATH=. python benchmarks/basket_collapse.py --quick             # 5,000 T10I4D100K baskets
    PYTHONPATH=. python benchmarks/basket_collapse.py --data groceries    # all 9,835 baskets
    PYTHONPATH=. python benchmarks/basket_collapse.py --max-baskets 0     # all 100,000 baskets

Prints Markdown tables (and writes JSON with ``--out``). Results: benchmarks/README.md, "Baskets:
why PSM and RG sit on popularity". Source: project addition (issue 27).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = {"t10": ROOT.parent / "shared" / "data" / "baskets" / "T10I4D100K.dat",
        "groceries": ROOT.parent / "shared" / "data" / "baskets" / "groceries.csv"}


def load_split(data: str, max_baskets: int | None, seed: int = 0):
    """(split, label) for a basket file (``data``: a key of DATA or a path); max_baskets None: all."""
    from validation.data import splits
    from validation.evaluation import implicit_eval

    path = DATA.get(data, Path(data))
    table, label, is_baskets = implicit_eval.load_implicit_data(str(path), max_baskets=max_baskets, seed=seed)
    assert is_baskets, f"{path} is not a basket file"
    split = splits.split_leave_one_item_out_baskets(table, seed=seed, dtype=np.float32)
    return split, label


# ---------------------------------------------------------------------------------------------
# a fitted model as (score function, logit parts)


class Fitted:
    """score(users) -> (B, J) ranking scores; parts(users) -> (personal (B, J), item_only (J,)),
    the user-specific and the item-only parts of the score's logit; norms: dict of factor spreads."""

    def __init__(self, name, score, parts, norms, seconds, extra=None):
        self.name, self.score, self.parts, self.norms, self.seconds = name, score, parts, norms, seconds
        self.extra = extra or {}


def _norms(U, V, b_item, b_user=None):
    out = {"|u|": float(np.mean(np.linalg.norm(U, axis=1))), "|v|": float(np.mean(np.linalg.norm(V, axis=1))),
           "sd b_j": float(np.std(b_item))}
    if b_user is not None:
        out["sd b_i"] = float(np.std(b_user))
    return out


def _appendix_c_fit(key, train, K, hyper, r, max_iter, init_scale, init_state):
    """Algorithm 1 with the seed's appendix C substitution: E[u_i.v_j + b_i + b_j] = 0 in the s and t
    updates, so s_i propto exp E log pi_i and t_j propto exp E log psi_j; ``max_iter`` sweeps (no tolerance:
    the substituted sweep is not a coordinate ascent of L). Returns (state, trace)."""
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import digamma

    from custom_inference import psm

    def s_c(state, data, hyper, xi, *, chunk=psm.DEFAULT_CHUNK):
        return state._replace(log_s=jax.nn.log_softmax(digamma(state.alpha)))

    def t_c(state, data, hyper, xi, *, chunk=psm.DEFAULT_CHUNK):
        return state._replace(log_t=jax.nn.log_softmax(digamma(state.beta)))

    blocks = [(n, {"s": s_c, "t": t_c}.get(n, u)) for n, u, _ in psm.BLOCKS]

    @jax.jit
    def sweep(state, data, hyp):
        for _, update in blocks:
            state = update(state, data, hyp, psm.pair_xi(state, data))
        return state, psm.elbo(state, data, hyp)

    data = psm._as_jax(train, np.float32)
    state = init_state if init_state is not None else psm.init(key, train, K, hyper, r=r, dtype=np.float32,
                                                               init_scale=init_scale)
    hyp = psm._hyper_arrays(hyper, np.float32)
    trace = []
    for _ in range(max_iter):
        state, e = sweep(state, data, hyp)
        trace.append(float(e))
    return state, np.asarray(trace)


def fit_psm(train, seed=0, K=20, r=1.0, hyper=None, max_iter=200, tol=1e-6, init_scale=0.1, init_state=None,
            name="PSM", appendix_c=False):
    import jax

    from custom_inference import base, psm
    from ppl_models.psm import PSMHyper

    hyper = hyper or PSMHyper()
    t0 = time.perf_counter()
    if appendix_c:
        st, trace = _appendix_c_fit(jax.random.PRNGKey(seed), train, K, hyper, r, max_iter, init_scale, init_state)
        res = base.FitResult(st, trace, None)
    else:
        res = psm.fit(jax.random.PRNGKey(seed), train, K, hyper, r=r, dtype=np.float32, max_iter=max_iter, tol=tol,
                      progress=False, n_draws=1, init_scale=init_scale, init_state=init_state)
    sec = time.perf_counter() - t0
    st = res.state
    U, V = np.asarray(st.u_mu), np.asarray(st.v_mu)
    bu, bv = np.asarray(st.bu_mu), np.asarray(st.bv_mu)
    log_psi = np.log(np.asarray(st.beta) / np.sum(np.asarray(st.beta)))

    def parts(users):
        # predictive log score = log E psi_j + log sigma(x_ij): item-only part log E psi_j + b_j
        return U[users] @ V.T, log_psi + bv

    norms = _norms(U, V, bv, bu)
    norms["sd log psi"] = float(np.std(log_psi))
    return Fitted(name, lambda users: psm.score_users(st, np.asarray(users)), parts, norms, sec,
                  {"sweeps": len(res.trace) - 1, "elbo": float(res.trace[-1]), "state": st})


def fit_rg(train, seed=0, K=10, r=0.5, hyper=None, max_iter=100, warm_start=30, kind="popularity_like", name="RG",
           **kw):
    from custom_inference import rg
    from ppl_models.rg import RGHyper

    hyper = hyper or RGHyper(r=r)
    t0 = time.perf_counter()
    res = rg.fit(seed, train, K, hyper, max_iter=max_iter, dtype=np.float32, n_draws=0, progress=False,
                 warm_start=warm_start, **kw)
    sec = time.perf_counter() - t0
    st = res.state
    (mu, _), (mv, _), (mbu, _), (mbv, _) = (tuple(np.asarray(a) for a in p) for p in rg.moments(st))
    pi = rg.histogram_of(res)[0]
    log_pi = np.log(np.maximum(pi, 1e-300))  # items without training views: pi = 0, never recommended

    def parts(users):
        return mu[users] @ mv.T, mbv + (log_pi if kind == "popularity_like" else 0.0)

    norms = _norms(mu, mv, mbv)
    norms["sd log pi"] = float(np.std(log_pi[pi > 0]))
    norms["E tau_u"] = float(st.tau_u_shape / st.tau_u_rate)
    norms["E tau_v"] = float(st.tau_v_shape / st.tau_v_rate)
    return Fitted(name, lambda users: rg.score_users(st, np.asarray(users), kind=kind, pi=pi), parts, norms, sec,
                  {"sweeps": len(res.trace) - 1, "state": st})


def rg_from_bpr(train, params, hyper, var=0.01):
    """An RG state whose factor means are BPR's, variances ``var`` (diagnostic only), the rest as `rg.init`."""
    import jax.numpy as jnp

    from custom_inference import rg

    W, H = np.asarray(params.user_factors, np.float32), np.asarray(params.item_factors, np.float32)
    st = rg.init(0, train.astype(np.float32), W.shape[1], hyper, dtype=np.float32)
    return st._replace(u_prec=jnp.full(W.shape, 1 / var, np.float32), u_h=jnp.asarray(W / var),
                       v_prec=jnp.full(H.shape, 1 / var, np.float32), v_h=jnp.asarray(H / var))


def rg_causes(train, seed, bpr_fit):
    """The controlled RG runs: one change from the base (K 10, r 1/2, Gamma(0.01, 0.01) hyperpriors
    with q(tau) updated (ARD), 30 warm-start sweeps on H_0, 100 Robbins-Monro sweeps). Yields Fitted."""
    from ppl_models.rg import RGHyper

    yield fit_rg(train, seed, warm_start=0, name="RG cold start (paper)")
    yield fit_rg(train, seed, warm_start=100, name="RG 100 warm sweeps")
    yield fit_rg(train, seed, resample=False, max_iter=130, name="RG batch, one fixed H")
    yield fit_rg(train, seed, update_hyper=False, name="RG q(tau) fixed at init (no ARD)")
    yield fit_rg(train, seed, r=1.0, name="RG r=1")
    yield fit_rg(train, seed, r=4.0, name="RG r=4")
    for K in (5, 20):
        yield fit_rg(train, seed, K=K, name=f"RG K={K}")
    yield fit_rg(train, seed, kind="like", name="RG like (no pi)")
    K = int(np.asarray(bpr_fit.extra["params"].user_factors).shape[1])
    hyper = RGHyper(r=0.5)
    yield fit_rg(train, seed, K=K, name=f"RG K={K} (control)")
    yield fit_rg(train, seed, K=K, init_state=rg_from_bpr(train, bpr_fit.extra["params"], hyper),
                 name=f"RG K={K} from BPR's factors")


def fit_bpr(train, seed=0, K=64, n_epochs=100, name="BPR-uniform"):
    import jax

    from custom_inference import bpr
    from validation.evaluation.implicit_eval import BPR_DEFAULTS

    kw = dict(BPR_DEFAULTS["uniform"])
    kw["n_epochs"] = n_epochs
    t0 = time.perf_counter()
    params = bpr.fit(jax.random.key(seed), train, K, bpr.BPRHyper(kw["reg"]), sampling="uniform",
                     n_epochs=kw["n_epochs"], learning_rate=kw["learning_rate"], batch_size=kw["batch_size"],
                     max_tries=kw["max_tries"]).state
    sec = time.perf_counter() - t0
    W, H, b = (np.asarray(a) for a in (params.user_factors, params.item_factors, params.item_bias))
    return Fitted(name, lambda users: np.asarray(bpr.score_users(params, np.asarray(users))),
                  lambda users: (W[users] @ H.T, b), _norms(W, H, b), sec, {"params": params})


def popularity(train):
    from validation import metrics

    deg = metrics.popularity_scores(train)
    return Fitted("popularity", metrics.popularity_score_fn(train),
                  lambda users: (np.zeros((len(users), deg.size)), np.log1p(deg)), {}, 0.0)


def psm_from_bpr(train, params, r=1.0, hyper=None, var=0.01):
    """A PSM state whose factor means are BPR's (user_factors, item_factors), variances ``var``, biases 0,
    the rest as `psm.init` (diagnostic only: does a personalised fixed point exist near BPR's solution?)."""
    import jax.numpy as jnp

    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    W, H = np.asarray(params.user_factors, np.float32), np.asarray(params.item_factors, np.float32)
    st = psm.init(0, train, W.shape[1], hyper or PSMHyper(), r=r, dtype=np.float32)
    return st._replace(u_mu=jnp.asarray(W), v_mu=jnp.asarray(H), u_prec=jnp.full(W.shape, 1 / var, np.float32),
                       v_prec=jnp.full(H.shape, 1 / var, np.float32))


def psm_causes(train, seed, bpr_fit, sweeps=200):
    """The controlled PSM runs: one change from the base setting (K 20, r 1, unit priors, init 0.1,
    tol 1e-6, at most 200 sweeps) each. Yields Fitted."""
    from ppl_models.psm import PSMHyper

    yield fit_psm(train, seed, init_scale=1.0, name="PSM init 1.0")
    yield fit_psm(train, seed, init_scale=0.01, name="PSM init 0.01")
    for tau in (0.01, 0.1, 10.0):
        yield fit_psm(train, seed, hyper=PSMHyper(tau_u=tau, tau_v=tau), name=f"PSM tau_u=tau_v={tau:g}")
    for r in (0.25, 4.0):
        yield fit_psm(train, seed, r=r, name=f"PSM r={r:g}")
    for K in (5, 50):
        yield fit_psm(train, seed, K=K, name=f"PSM K={K}")
    yield fit_psm(train, seed, max_iter=3 * sweeps, tol=0.0, name=f"PSM {3 * sweeps} sweeps tol 0")
    yield fit_psm(train, seed, max_iter=sweeps, appendix_c=True, name="PSM appendix C (E a = 0 in s, t)")
    yield fit_psm(train, seed, r=8.0, max_iter=sweeps, appendix_c=True, name="PSM appendix C, r=8")
    K = int(np.asarray(bpr_fit.extra["params"].user_factors).shape[1])
    yield fit_psm(train, seed, K=K, name=f"PSM K={K} (control)")
    yield fit_psm(train, seed, K=K, init_state=psm_from_bpr(train, bpr_fit.extra["params"]),
                  name=f"PSM K={K} from BPR's factors")
    yield from psm_from_bpr_unstable(train, seed)


def psm_from_bpr_unstable(train, seed, K=20, r=4.0):
    """BPR-uniform refitted at K = 20 and PSM (K 20, r 4: a setting where u = v = 0 is linearly unstable,
    sigma_1 > 1) started from its factors, beside the same PSM from the default start."""
    bpr20 = fit_bpr(train, seed, K=K, name=f"BPR-uniform K={K}")
    yield bpr20
    yield fit_psm(train, seed, K=K, r=r, init_state=psm_from_bpr(train, bpr20.extra["params"], r=r),
                  name=f"PSM K={K} r={r:g} from BPR K={K}'s factors")


# ---------------------------------------------------------------------------------------------
# the u = v = 0 fixed point of Algorithm 1 and its linear stability


def psm_zero_fixed_point(train, K=20, r=1.0, hyper=None, sweeps=100, seed=0):
    """Algorithm 1 from factor means exactly 0: m_i and m_j are linear in E[v] and E[u] (module docstring
    of `custom_inference.psm`), so the means stay 0 and the sweeps converge the rest (biases, s, t,
    pi, psi, xi, the factor variances) to the u = v = 0 fixed point. Returns the PSMState."""
    import jax.numpy as jnp

    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    hyper = hyper or PSMHyper()
    st = psm.init(seed, train, K, hyper, r=r, dtype=np.float32)
    st = st._replace(u_mu=jnp.zeros_like(st.u_mu), v_mu=jnp.zeros_like(st.v_mu))
    return psm.fit(seed, train, K, hyper, r=r, dtype=np.float32, max_iter=sweeps, tol=0.0, progress=False,
                   n_draws=1, init_state=st).state


def psm_zero_spectrum(state, train, hyper=None, n_top=5, iters=300, seed=0):
    """Top singular values of M = P^-1/2 Y Q^-1/2 at a u = v = 0 fixed point ``state``.

    Linearising one sweep of Algorithm 1 at E[u] = E[v] = 0 (biases, s, t, xi and the variances held
    at the fixed point: they move at second order only): dE[u_i] = P_i^-1 sum_j Y_ij dE[v_j], then
    dE[v_j] = Q_j^-1 sum_i Y_ij dE[u_i], with Y_ij = c_ij (1/2 - 2 lam_ij e_ij) - D' s_i t_j (1/2 + 2 lam_ij e_ij)
    (lam_ij = lam* off G; e_ij = E[b_i + b_j]) the gradient of the bounded likelihood in a_ij at the
    bias-only logit, P_i = tau_u + sum_j W_ij Var v_j and Q_j = tau_v + sum_i W_ij Var u_i the diagonal
    precisions, W_ij = 2 (c_ij lam_ij + D' s_i t_j lam_ij). One sweep multiplies dE[v] by
    Q^-1 Y^T P^-1 Y, whose eigenvalues are the squared singular values of M: u = v = 0 is a stable fixed
    point (every factor shrinks back to 0, geometrically by sigma_1^2 per sweep) iff sigma_1(M) < 1.

    Y x and Y^T y are taken from the solver's own m_i, m_j (`psm.user_update_targets` with E[v] = x:
    m is linear in E[v] at fixed xi) and P, Q from its precisions; `psm_zero_spectrum_dense` is the
    independent numpy twin from the formula above. Subspace iteration with ``n_top`` columns.
    Returns numpy (n_top,) singular values, largest first."""
    import jax.numpy as jnp

    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    hyper = hyper or PSMHyper()
    data = psm._as_jax(train, np.float32)
    xi = psm.pair_xi(state, data)
    Pmat, _ = psm.user_update_targets(state, data, hyper, xi)
    Qmat, _ = psm.item_update_targets(state, data, hyper, xi)
    p = np.asarray(jnp.diagonal(Pmat, axis1=1, axis2=2))[:, 0].astype(np.float64)
    q = np.asarray(jnp.diagonal(Qmat, axis1=1, axis2=2))[:, 0].astype(np.float64)
    K = state.u_mu.shape[1]
    assert n_top <= K

    def Y(x):  # (J, n) -> (I, n)
        v = np.zeros((x.shape[0], K), np.float32)
        v[:, : x.shape[1]] = x
        return np.asarray(psm.user_update_targets(state._replace(v_mu=jnp.asarray(v)), data, hyper, xi)[1],
                          np.float64)[:, : x.shape[1]]

    def Yt(y):  # (I, n) -> (J, n)
        u = np.zeros((y.shape[0], K), np.float32)
        u[:, : y.shape[1]] = y
        return np.asarray(psm.item_update_targets(state._replace(u_mu=jnp.asarray(u)), data, hyper, xi)[1],
                          np.float64)[:, : y.shape[1]]

    rng = np.random.default_rng(seed)
    X = np.linalg.qr(rng.standard_normal((q.size, n_top)))[0]
    for _ in range(iters):
        Z = Y(X / np.sqrt(q)[:, None]) / np.sqrt(p)[:, None]          # M X
        X_new = Yt(Z / np.sqrt(p)[:, None]) / np.sqrt(q)[:, None]     # M^T M X
        X = np.linalg.qr(X_new)[0]
    Z = Y(X / np.sqrt(q)[:, None]) / np.sqrt(p)[:, None]
    return np.sort(np.linalg.svd(Z, compute_uv=False))[::-1]


def psm_zero_spectrum_dense(state, train, hyper=None, n_top=5):
    """The numpy twin of `psm_zero_spectrum` from the formula (dense I x J: small data only)."""
    from custom_inference import psm
    from custom_inference.logistic import jj_lambda
    from ppl_models.psm import PSMHyper

    hyper = hyper or PSMHyper()
    data = psm._as_jax(train, np.float32)
    lam_g = np.asarray(jj_lambda(psm.pair_xi(state, data)), np.float64)
    lam_s = float(jj_lambda(state.xi_star))
    s = np.exp(np.asarray(state.log_s, np.float64))
    t = np.exp(np.asarray(state.log_t, np.float64))
    D1 = float(state.d_prime)
    bu, bv = np.asarray(state.bu_mu, np.float64), np.asarray(state.bv_mu, np.float64)
    var_u = 1.0 / np.asarray(state.u_prec, np.float64)[:, 0]
    var_v = 1.0 / np.asarray(state.v_prec, np.float64)[:, 0]
    rows, cols, c = np.asarray(train.rows), np.asarray(train.cols), np.asarray(train.values, np.float64)
    I, J = train.shape
    lam = np.full((I, J), lam_s)
    lam[rows, cols] = lam_g
    C = np.zeros((I, J))
    C[rows, cols] = c
    e = bu[:, None] + bv[None, :]
    st = D1 * s[:, None] * t[None, :]
    Y = C * (0.5 - 2 * lam * e) - st * (0.5 + 2 * lam * e)
    W = 2 * (C * lam + st * lam)
    p = float(hyper.tau_u) + W @ var_v
    q = float(hyper.tau_v) + W.T @ var_u
    M = Y / np.sqrt(p)[:, None] / np.sqrt(q)[None, :]
    return np.linalg.svd(M, compute_uv=False)[:n_top]


def psm_growth(state, train, hyper=None, eps=1e-4, sweeps=40, seed=1):
    """The solver's own answer: from the fixed point ``state`` plus eps N(0, 1) factor means, run
    ``sweeps`` sweeps of Algorithm 1 and return the per-sweep ratios |E v|_{t+1} / |E v|_t (numpy
    (sweeps - 1,)); in the linear regime they tend to sigma_1(M)^2 (`psm_zero_spectrum`)."""
    import jax
    import jax.numpy as jnp

    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    hyper = hyper or PSMHyper()
    ku, kv = jax.random.split(jax.random.PRNGKey(seed))
    st = state._replace(u_mu=eps * jax.random.normal(ku, state.u_mu.shape, jnp.float32),
                        v_mu=eps * jax.random.normal(kv, state.v_mu.shape, jnp.float32))
    data = psm._as_jax(train, np.float32)
    norms = []
    for _ in range(sweeps):
        st, _ = psm.step(None, st, data, hyper)
        norms.append(float(jnp.linalg.norm(st.v_mu)))
    norms = np.asarray(norms)
    return norms[1:] / norms[:-1]


# ---------------------------------------------------------------------------------------------
# diagnostics


def _spearman_rows(a, b_row, mask):
    """Spearman of each row of a (B, J) with b_row (J,) over the entries where mask (B, J) is True."""
    from scipy.stats import rankdata

    out = np.empty(a.shape[0])
    for k in range(a.shape[0]):
        m = mask[k]
        x, y = rankdata(a[k, m]), rankdata(b_row[m])
        out[k] = np.corrcoef(x, y)[0, 1] if np.std(x) > 0 and np.std(y) > 0 else 0.0
    return out


def evaluate(f: Fitted, split, n_users=500, seed=0) -> dict:
    """Held-out metrics on every test basket; distance from popularity and the personal share on a sample."""
    from validation import metrics

    rs = metrics.rank_score(f.score, split, batch_size=2048)
    hr = metrics.hit_rate_at(f.score, split, n=10, batch_size=2048)
    train = split.train
    deg = metrics.popularity_scores(train)
    rng = np.random.default_rng(seed)
    users = np.sort(rng.choice(split.test_users, size=min(n_users, split.test_users.size), replace=False))
    J = train.n_cols
    csr = metrics._pattern(train)
    cand = ~metrics._row_mask(csr, users)  # (B, J): not a training item of the basket
    S = np.asarray(f.score(users), np.float64)
    rho = _spearman_rows(S, deg, cand)
    # popularity's top 10 among the candidates (ties by index), and the model's
    big = np.where(cand, deg[None, :] + 1e-9 * (J - np.arange(J))[None, :], -np.inf)
    pop_top = np.argsort(-big, axis=1)[:, :10]
    mod_top = np.argsort(-np.where(cand, S, -np.inf), axis=1, kind="stable")[:, :10]
    overlap = np.mean([np.intersect1d(p, m).size / 10 for p, m in zip(pop_top, mod_top)])
    personal, item_only = f.parts(users)
    ok = cand & np.isfinite(item_only)[None, :] & (item_only > -600)[None, :]  # RG: items with pi = 0 left out
    sd_p = np.array([np.std(personal[k, ok[k]]) for k in range(users.size)])
    sd_i = np.array([np.std(item_only[ok[k]]) for k in range(users.size)])
    share = float(np.mean(sd_p / np.maximum(sd_p + sd_i, 1e-30)))
    return {"system": f.name, "rank score": float(np.nanmean(rs)), "HR@10": float(np.mean(hr)),
            "spearman(deg)": float(np.mean(rho)), "pop top10 share": float(overlap), "personal share": share,
            **{k: round(v, 4) for k, v in f.norms.items()}, "fit s": round(f.seconds, 1),
            **{k: v for k, v in f.extra.items() if k in ("sweeps",)}}


def table(rows) -> str:
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="t10", help="t10, groceries or a basket file path")
    p.add_argument("--max-baskets", type=int, default=None, help="subsample (0: all baskets)")
    p.add_argument("--quick", action="store_true", help="5,000 baskets, the base systems and PSM's causes")
    p.add_argument("--causes", default=None, help="comma list: base, psm, rg, stability (the controlled runs); default "
                   "base,psm with --quick, else base")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    max_b = a.max_baskets if a.max_baskets is not None else (5000 if a.quick else 10000)
    split, label = load_split(a.data, None if max_b == 0 else max_b, a.seed)
    train = split.train
    print(f"# {label}: {train.n_rows} baskets x {train.n_cols} items, {train.nnz} training pairs, "
          f"{split.test_users.size} test baskets")
    rows = []

    def run(f):
        r = evaluate(f, split, seed=a.seed)
        rows.append(r)
        print("  " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
        return f

    causes = set((a.causes or ("base,psm" if a.quick else "base")).split(","))
    run(popularity(train))
    bpr_fit = run(fit_bpr(train, a.seed))
    if "base" in causes or "psm" in causes:
        run(fit_psm(train, a.seed))
    if "base" in causes or "rg" in causes:
        run(fit_rg(train, a.seed))
    if "psm" in causes:
        for f in psm_causes(train, a.seed, bpr_fit):
            run(f)
    if "rg" in causes:
        for f in rg_causes(train, a.seed, bpr_fit):
            run(f)
    if "stability" in causes:  # sigma_1 at the u = v = 0 fixed point (~2 min a setting on 5,000 baskets)
        from ppl_models.psm import PSMHyper

        for K, r, tau in [(20, 1.0, 1.0), (5, 1.0, 1.0), (50, 1.0, 1.0), (20, 0.25, 1.0), (20, 4.0, 1.0),
                          (20, 32.0, 1.0), (20, 1.0, 10.0)]:
            h = PSMHyper(tau_u=tau, tau_v=tau)
            st = psm_zero_fixed_point(train, K=K, r=r, hyper=h, sweeps=100, seed=a.seed)
            sv = psm_zero_spectrum(st, train, hyper=h, n_top=3, iters=60)
            print(f"  PSM K={K} r={r:g} tau={tau:g}: sigma_1..3 at u = v = 0 = {np.round(sv, 4)}", flush=True)
    print()
    print(table(rows))
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return rows, bpr_fit


if __name__ == "__main__":
    main()
