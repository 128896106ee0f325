"""The front door's adapters: one declaration per model (see `validation.api.Adapter`).

Each adapter says what values its model takes, how its solver is called on an `Observations`
(I users x J items), and E[y_ui | parameters] as a function of posterior draws, vectorised over
the S draws (chains stacked) and M (row, col) pairs. Nothing here computes a posterior: the
solvers in `custom_inference` do. Source of each mean: the seed equation named beside it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .api import Adapter, _register

__all__: list[str] = []


def _dot(A, B, rows, cols):
    """sum_k A[s, rows, k] B[s, cols, k] -> (S, M), batched over draws without an (S, M, K) blowup."""
    return np.einsum("smk,smk->sm", A[:, rows], B[:, cols])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _idata(result):
    """InferenceData of a solver's return value (FitResult or InferenceData)."""
    return getattr(result, "idata", result)


def _stamp(idata, **attrs):
    idata.posterior.attrs.update(attrs)
    return idata


# -- counts: HPF (seed 001) ---------------------------------------------------------------


def _hpf_mean(post, rows, cols, attrs):
    """E[y_ui] = theta_u . beta_i (001_30a2018ec18c20b9.txt, the Poisson rate of the model)."""
    return _dot(post["theta"], post["beta"], rows, cols)


def _run_hpf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import hpf
    from ppl_models.hpf import HPFHyper

    return _idata(hpf.fit(key, obs, K, hyper or HPFHyper(), progress=progress, **opts))


def _run_hpf_gibbs(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import hpf_gibbs
    from ppl_models.hpf import HPFHyper

    return hpf_gibbs.sample(key, obs, K, hyper or HPFHyper(), progress=progress, **opts)


def _hpf_fold_in(fitted, obs):
    """New users' q(theta_u), q(xi_u) by the CAVI user blocks with the items' q held at the fit
    (`custom_inference.hpf.fold_in`; seed 001's user updates), then as many draws from q as the
    fitted posterior holds (the means of q when it holds the means). Returns the new-user parts of
    the ``posterior`` and ``variational_parameters`` groups (see `validation.api._extend_users`)."""
    import jax

    from custom_inference import hpf
    from ppl_models.hpf import HPFHyper

    attrs = fitted.idata.posterior.attrs
    hyper = HPFHyper(**{f: float(attrs[f"hyper_{f}"]) for f in hpf.HYPER_FIELDS})
    seed = int(fitted.settings.get("seed", 0))
    with jax.enable_x64(True):
        state = hpf.state_from_inference_data(fitted.idata)
        new = hpf.fold_in(state, obs, hyper, seed=seed)
    params = {f: np.asarray(getattr(new, f)) for f in ("gamma_shape", "gamma_rate", "kappa_shape", "kappa_rate")}
    C, S = fitted.idata.posterior.sizes["chain"], fitted.idata.posterior.sizes["draw"]
    if str(attrs.get("posterior_kind", "")).startswith("mean"):
        theta = (params["gamma_shape"] / params["gamma_rate"])[None, None]
        xi = (params["kappa_shape"] / params["kappa_rate"])[None, None]
    else:  # a stream of its own: seeded by the fit's seed and the number of users before the fold-in
        rng = np.random.default_rng([seed, len(fitted.user_ids), 1])
        theta = rng.standard_gamma(params["gamma_shape"], size=(C, S, *params["gamma_shape"].shape)) / params["gamma_rate"]
        xi = rng.standard_gamma(params["kappa_shape"], size=(C, S, *params["kappa_shape"].shape)) / params["kappa_rate"]
    return {"posterior": {"theta": theta, "xi": xi}, "variational_parameters": params}


# -- fold-in for the Gibbs samplers: the new users given each kept draw of the item side ---------------

#: Gibbs sweeps over the new users' block per kept draw (SBMF, HPF Gibbs), started at the prior means;
#: the last sweep's state is kept. BPMF needs none (one exact draw from the Gaussian conditional).
FOLD_IN_SWEEPS = 50
#: kept draws per vectorised batch of the fold-in (`jax.lax.map` batch_size): bounds the memory.
FOLD_IN_DRAW_BATCH = 64


def _fold_in_per_draw(fitted, new_users, frozen_vars, *, salt: int = 2):
    """For every kept posterior draw s (chains stacked), draw the new users' user-side variables from
    the model's complete conditional(s) given draw s of the item side (and hyperparameters), held
    frozen: ``new_users(key, frozen) -> {name: array (I_new, ...)}`` with ``frozen`` the draw's arrays
    ``frozen_vars`` (one draw, no chain/draw axes). The result, reshaped to (chain, draw, I_new, ...),
    is a sample of p(new users | their rows, data) = E_{items ~ p(. | data)} p(new users | their rows,
    items) when the new users' rows are taken not to move the items' posterior (the fold-in
    approximation; for a copy of a fitted user it is exactly that user's posterior marginal). Keys:
    one stream per fold-in, from the fit's seed and the number of users before it. Runs in float64
    under `jax.lax.map` in batches of `FOLD_IN_DRAW_BATCH` draws. Returns {"posterior": {...}} for
    `validation.api._extend_users`."""
    import jax

    post = fitted.idata.posterior
    C, S = post.sizes["chain"], post.sizes["draw"]
    frozen = {n: np.asarray(post[n].values).reshape(C * S, *post[n].shape[2:]) for n in frozen_vars}
    with jax.enable_x64(True):
        key = jax.random.fold_in(jax.random.PRNGKey(int(fitted.settings.get("seed", 0))), len(fitted.user_ids) * 8 + salt)
        keys = jax.random.split(key, C * S)
        out = jax.jit(lambda k, f: jax.lax.map(lambda a: new_users(*a), (k, f), batch_size=FOLD_IN_DRAW_BATCH))(
            keys, frozen)
        out = {n: np.asarray(v) for n, v in out.items()}
    return {"posterior": {n: v.reshape(C, S, *v.shape[1:]) for n, v in out.items()}}


def _device_obs(obs, values=None):
    """`Observations` with device arrays (optionally other values), for use inside jitted code."""
    import jax.numpy as jnp

    from custom_inference.data import Observations

    vals = np.asarray(obs.values if values is None else values, np.float64)
    return Observations(jnp.asarray(obs.rows), jnp.asarray(obs.cols), jnp.asarray(vals), obs.n_rows, obs.n_cols)


def _hpf_gibbs_fold_in(fitted, obs):
    """HPF Gibbs: per kept draw of (beta, eta), `FOLD_IN_SWEEPS` sweeps of the sampler's own user blocks
    for the new users: z (`hpf_gibbs.allocate`), theta (`hpf_gibbs.theta_conditional`), xi
    (`hpf_gibbs.xi_conditional`), started at theta = a / b', xi = b' (seed 001's complete conditionals)."""
    import jax
    import jax.numpy as jnp

    from custom_inference import hpf, hpf_gibbs
    from custom_inference.data import CountUnits
    from ppl_models.hpf import HPFHyper

    attrs = fitted.idata.posterior.attrs
    hyper = HPFHyper(**{f: float(attrs[f"hyper_{f}"]) for f in hpf.HYPER_FIELDS})
    with jax.enable_x64(True):
        units = jax.tree_util.tree_map(jnp.asarray, CountUnits.from_observations(obs))
    I_new, K = obs.n_rows, fitted.idata.posterior["beta"].shape[-1]

    def new_users(key, f):
        st = hpf_gibbs.HPFGibbsState(jnp.full((I_new, K), hyper.a / hyper.b_prime), jnp.full((I_new,), hyper.b_prime),
                                     f["beta"], f["eta"])

        def sweep(_, c):
            st, key = c
            key, k_z, k_t, k_x = jax.random.split(key, 4)
            user_counts, _ = hpf_gibbs.allocate(k_z, st, units)
            shape, rate = hpf_gibbs.theta_conditional(st, user_counts, hyper)
            st = st._replace(theta=jax.random.gamma(k_t, shape) / rate)
            shape, rate = hpf_gibbs.xi_conditional(st, hyper)
            return st._replace(xi=jax.random.gamma(k_x, shape) / rate), key

        st, _ = jax.lax.fori_loop(0, FOLD_IN_SWEEPS, sweep, (st, key))
        return {"theta": st.theta, "xi": st.xi}

    return _fold_in_per_draw(fitted, new_users, ("beta", "eta"))


def _bpmf_fold_in(fitted, obs):
    """BPMF: per kept draw of (V, mu_U, Lambda_U), the new user's u is Gaussian given them (S&M 2008
    eqs. 12-13): `bpmf.entry_stats` of the new rows (ratings centred at the fit's offset),
    `bpmf.factor_conditional`, one exact draw by `bpmf.sample_factor_rows`. A draw, not the
    conditional mean: the kept draws then carry the new user's own uncertainty into predict's sd, as
    they do for the fitted users."""
    import jax
    import jax.numpy as jnp

    from custom_inference import bpmf

    attrs = fitted.idata.posterior.attrs
    alpha = float(attrs["hyper_alpha"])
    offset = float(attrs.get("front_door_offset", 0.0))
    with jax.enable_x64(True):
        d = _device_obs(obs, np.asarray(obs.values, np.float64) - offset)
    K = fitted.idata.posterior["V"].shape[-1]
    chunk = bpmf.default_chunk_size(K)

    def new_users(key, f):
        gram, rhs = bpmf.entry_stats(d.rows, d.cols, d.values, f["V"], d.n_rows, chunk)
        return {"U": bpmf.sample_factor_rows(key, *bpmf.factor_conditional(gram, rhs, f["mu_U"], f["Lambda_U"],
                                                                            jnp.asarray(alpha, f["V"].dtype)))}

    return _fold_in_per_draw(fitted, new_users, ("V", "mu_U", "Lambda_U"))


def _sbmf_fold_in(fitted, obs):
    """SBMF: per kept draw of the item side and hyperparameters (mu, beta, V, tau, mu_alpha, sigma_alpha,
    mu_u, sigma_u), `FOLD_IN_SWEEPS` sweeps of the sampler's user conditionals for the new users,
    alpha_i (`sbmf.alpha_conditional`, Algorithm 2 line 20) then u_i1..u_iK (`sbmf.u_conditional`,
    eqs. 3.15-3.17), with the residuals recomputed by `sbmf.residuals`; started at the prior means."""
    import jax
    import jax.numpy as jnp

    from custom_inference import sbmf
    from custom_inference.gaussian import sample_normal_natural

    with jax.enable_x64(True):
        d = _device_obs(obs)
    I_new = obs.n_rows
    K = fitted.idata.posterior["V"].shape[-1]

    def new_users(key, f):
        zk = jnp.zeros(K, f["V"].dtype)
        st = sbmf.State(mu=f["mu"], alpha=jnp.full((I_new,), f["mu_alpha"]), beta=f["beta"],
                        U=jnp.broadcast_to(f["mu_u"], (I_new, K)), V=f["V"], tau=f["tau"], mu_alpha=f["mu_alpha"],
                        sigma_alpha=f["sigma_alpha"], mu_beta=zk[0], sigma_beta=zk[0] + 1, mu_u=f["mu_u"],
                        sigma_u=f["sigma_u"], mu_v=zk, sigma_v=zk + 1, e=jnp.zeros(d.rows.shape, f["V"].dtype))
        st = st._replace(e=sbmf.residuals(st, d))

        def component(k, c):
            st, key = c
            prec, h = sbmf.u_conditional(st, d, None, k)
            st = st._replace(U=st.U.at[:, k].set(sample_normal_natural(jax.random.fold_in(key, k), prec, h)))
            return st._replace(e=sbmf.residuals(st, d)), key

        def sweep(_, c):
            st, key = c
            key, k_a, k_u = jax.random.split(key, 3)
            st = st._replace(alpha=sample_normal_natural(k_a, *sbmf.alpha_conditional(st, d, None)))
            st, _ = jax.lax.fori_loop(0, K, component, (st._replace(e=sbmf.residuals(st, d)), k_u))
            return st, key

        st, _ = jax.lax.fori_loop(0, FOLD_IN_SWEEPS, sweep, (st, key))
        return {"alpha": st.alpha, "U": st.U}

    return _fold_in_per_draw(fitted, new_users, ("mu", "beta", "V", "tau", "mu_alpha", "sigma_alpha", "mu_u", "sigma_u"))


_NO_FOLD_SAMPLER = ("not implemented: the math allows it (draw the new users' factors from their conditional "
                    "given each kept item draw), but the sampler has no fold-in function yet")
_register(Adapter("hpf", "count", _run_hpf, _hpf_mean, "draws from q (CAVI)", "001 (Poisson rate theta_u . beta_i)",
                  fold_in=_hpf_fold_in, resumable=True, defaults={"max_iter": 100, "n_draws": 200}, iterations="max_iter", draws="n_draws"))
_register(Adapter("hpf-gibbs", "count", _run_hpf_gibbs, _hpf_mean, "posterior draws (Gibbs)",
                  "001 (Poisson rate theta_u . beta_i)", resumable=True, fold_in=_hpf_gibbs_fold_in,
                  defaults={"num_chains": 2, "num_warmup": 200, "num_samples": 200}, iterations="num_samples"))


# -- real ratings: SBMF, BPMF (seed 004 ch. 2-3) -------------------------------------------


def _sbmf_mean(post, rows, cols, attrs):
    """E[r_ij] = mu + alpha_i + beta_j + u_i . v_j (004_90693a0965f06816.txt eq. 3.1)."""
    return (post["mu"][:, None] + post["alpha"][:, rows] + post["beta"][:, cols]
            + _dot(post["U"], post["V"], rows, cols))


def _run_sbmf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import sbmf
    from ppl_models.sbmf import SBMFHyper

    keep = ("mu", "alpha", "beta", "U", "V", "tau", "mu_alpha", "sigma_alpha", "mu_u", "sigma_u")  # the last 4: fold-in
    return sbmf.sample(key, obs, K, hyper or SBMFHyper(), progress=progress, keep=keep, **opts)


def _bpmf_mean(post, rows, cols, attrs):
    """E[r_ij] = offset + u_i . v_j (004 ch. 2, BPMF on ratings centred at their training mean)."""
    return float(attrs.get("front_door_offset", 0.0)) + _dot(post["U"], post["V"], rows, cols)


def _run_bpmf(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import bpmf
    from custom_inference.data import Observations
    from ppl_models.bpmf import BPMFHyper

    offset = float(np.mean(np.asarray(obs.values, np.float64)))
    centered = Observations.from_coo(np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values) - offset,
                                     obs.shape, kind="real", drop_zeros=False)
    idata = bpmf.sample(key, centered, K, hyper or BPMFHyper(), progress=progress, keep=("U", "V", "mu_U", "Lambda_U"), **opts)
    return _stamp(idata, front_door_offset=offset)


_GIBBS = {"num_chains": 2, "num_warmup": 200, "num_samples": 200}
_register(Adapter("sbmf", "real", _run_sbmf, _sbmf_mean, "posterior draws (Gibbs)", "004 eq. 3.1",
                  resumable=True, fold_in=_sbmf_fold_in, defaults=_GIBBS, iterations="num_samples"))
_register(Adapter("bpmf", "real", _run_bpmf, _bpmf_mean, "posterior draws (Gibbs)", "004 ch. 2 (BPMF)",
                  resumable=True, fold_in=_bpmf_fold_in, defaults=_GIBBS, iterations="num_samples"))


# -- factorization machines on the ids design (seed 004 ch. 2, 4) ---------------------------


def ids_design(obs):
    """The FM design of plain MF with biases: one-hot user | one-hot item (004 eq. 2.17, fig. 2.1).

    obs : Observations (I, J), N entries (rows, cols int (N,), values (N,) float). Returns FMDesign
    with N rows, D = I + J features in the groups ("user", "item"): X values float64 ones, y =
    obs.values as float64 (N,).
    Raises ValueError from `FMDesign.from_scipy` when ``obs`` has no entries (N = 0) or a
    non-finite value. Source: 004_90693a0965f06816.txt eq. 2.17.
    """
    from custom_inference.fm_design import FMDesign

    I, J = obs.shape
    rows, cols = np.asarray(obs.rows), np.asarray(obs.cols)
    N = rows.size
    X = sp.coo_matrix((np.ones(2 * N), (np.repeat(np.arange(N), 2), np.column_stack([rows, I + cols]).ravel())),
                      shape=(N, I + J))
    group = np.concatenate([np.zeros(I, np.int64), np.ones(J, np.int64)])
    return FMDesign.from_scipy(X, np.asarray(obs.values, np.float64), group, group_names=("user", "item"))


def _fm_mean(post, rows, cols, attrs):
    """E[y] = w0 + w_u + w_(I+i) + v_u . v_(I+i) on the ids design (004 eq. 2.17)."""
    I = int(attrs["front_door_n_users"])
    return (post["w0"][:, None] + post["w"][:, rows] + post["w"][:, I + cols]
            + _dot(post["V"], post["V"], rows, I + cols))


def _fm_runner(solver: str):
    def run(key, obs, K, *, progress=True, hyper=None, **opts):
        from custom_inference import fm_mcmc, fm_sgd, vbfm
        from ppl_models.fm import FMFlatHyper, FMHierHyper

        design = ids_design(obs)
        if solver == "mcmc-fm":
            out = fm_mcmc.sample(key, design, K, hyper or FMHierHyper(), progress=progress, keep=("w0", "w", "V"), **opts)
        elif solver == "vbfm":
            out = vbfm.fit(key, design, K, hyper or FMFlatHyper(), progress=progress, **opts)
        elif solver == "ovbfm":
            out = vbfm.fit_svi(key, design, K, hyper or FMFlatHyper(), progress=progress, **opts)
        else:
            out = fm_sgd.fit(key, design, K, hyper or fm_sgd.SGDReg(), progress=progress, **opts)
        return _stamp(_idata(out), front_door_n_users=obs.shape[0])

    return run


_NO_FOLD_FM = ("not implemented: a new user is a new one-hot feature of the FM design; its weights given the "
               "fitted item weights are the model's conditional, but no FM solver has a fold-in function yet")
_register(Adapter("mcmc-fm", "real", _fm_runner("mcmc-fm"), _fm_mean, "posterior draws (Gibbs)", "004 eq. 2.17",
                  resumable=True, fold_in=_NO_FOLD_FM, defaults=_GIBBS, iterations="num_samples"))
_register(Adapter("vbfm", "real", _fm_runner("vbfm"), _fm_mean, "draws from q (CAVI)", "004 eq. 2.17",
                  resumable=True, fold_in=_NO_FOLD_FM, iterations="max_iter", draws="n_draws"))
_register(Adapter("ovbfm", "real", _fm_runner("ovbfm"), _fm_mean, "draws from q (stochastic VI)", "004 eq. 2.17",
                  resumable=True, fold_in=_NO_FOLD_FM, iterations="max_epochs", draws="n_draws"))
#: SGD-FM's learning rate unless given: eta = 0.01, the value of `validation.ratings_eval.RatingsConfig`
#: (sgd_learning_rate) for one instance per step on MovieLens ratings (libFM's SGD examples use 0.01 too).
SGD_FM_LEARNING_RATE = 0.01
_register(Adapter("sgd-fm", "real", _fm_runner("sgd-fm"), _fm_mean, "none (point estimate, SGD)", "004 eq. 2.17",
                  fold_in=_NO_FOLD_FM, resumable=True, defaults={"learning_rate": SGD_FM_LEARNING_RATE, "n_epochs": 20}, iterations="n_epochs"))



# -- one-class logistic MF: SIBM (seed 002) --------------------------------------------------


def _sibm_mean(post, rows, cols, attrs):
    """p(x_ij = 1 | U, V, z) = sigma(u_i . v_j + z) (002_5408d341cb9fc544.txt eqs. 1-2; the bias
    columns are in U and V). Its mean over draws from q is the integral that eq. (5) approximates
    (MacKay); for MAP it is sigma at the point estimate."""
    return _sigmoid(_dot(post["U"], post["V"], rows, cols) + post["z"][:, None])


def _sibm_runner(kind: str):
    def run(key, obs, K, *, progress=True, hyper=None, **opts):
        from custom_inference import sibm
        from ppl_models.sibm import SIBMHyper

        fn = {"vb": sibm.fit, "svi": sibm.fit_svi, "map": sibm.fit_map}[kind]
        return _idata(fn(key, obs, K, hyper or SIBMHyper(), progress=progress, **opts))

    return run


_NO_FOLD_SIBM = ("not implemented: the math allows it (the U column updates of batch VB / SVI with q(V), q(z) held "
                 "fixed), but custom_inference.sibm has no fold-in function yet")
_register(Adapter("sibm", "binary", _sibm_runner("vb"), _sibm_mean, "draws from q (batch VB)", "002 eqs. 1-2, 5",
                  resumable=True, fold_in=_NO_FOLD_SIBM, defaults={"max_iter": 200}, iterations="max_iter", draws="n_draws"))
_register(Adapter("sibm-svi", "binary", _sibm_runner("svi"), _sibm_mean, "draws from q (SVI)", "002 eqs. 1-2, 5",
                  fold_in=_NO_FOLD_SIBM, defaults={"n_iter": 200}, resumable=True, iterations="n_iter", draws="n_draws"))
_register(Adapter("sibm-map", "binary", _sibm_runner("map"), _sibm_mean, "none (point estimate, MAP)",
                  "002 eqs. 1-2", fold_in=_NO_FOLD_SIBM, defaults={"n_iter": 200}, resumable=True, iterations="n_iter"))


# -- one-class: RG (seed 003), BPR (Rendle et al. 2009) ----------------------------------------


def _rg_mean(post, rows, cols, attrs):
    """p(g = 1 | h = 1, u, v, b) = sigma(u_m . v_n + b_m + b_n) (003_203f63200c0d7157.txt, the like
    probability of an edge; its mean over draws from q is the integral eq. 19 approximates)."""
    return _sigmoid(_dot(post["u"], post["v"], rows, cols) + post["b_user"][:, rows] + post["b_item"][:, cols])


def _run_rg(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import rg
    from ppl_models.rg import RGHyper

    return _idata(rg.fit(key, obs, K, hyper or RGHyper(), progress=progress, **opts))


_register(Adapter("rg", "binary", _run_rg, _rg_mean, "draws from q (VB over random hidden graphs)", "003 eq. 19",
                  resumable=True, defaults={"max_iter": 200},
                  fold_in=("not available: a new user changes the hidden-graph sampler q(H) of every user (its "
                           "popularity histogram, sec. 4.1), so the items' posterior is not held fixed by the math"), iterations="max_iter", draws="n_draws"))


def _bpr_mean(post, rows, cols, attrs):
    """x_ui = w_u . h_i + b_i (Rendle et al. 2009, BPR-MF score; a ranking score, not a probability)."""
    return _dot(post["user_factors"], post["item_factors"], rows, cols) + post["item_bias"][:, cols]


def _run_bpr(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import bpr

    return _idata(bpr.fit(key, obs, K, hyper, progress=progress, **opts))


_register(Adapter("bpr", "binary", _run_bpr, _bpr_mean, "none (point estimate, SGD)", "Rendle et al. 2009 (BPR-MF x_ui)",
                  defaults={"n_epochs": 50}, resumable=True,
                  fold_in=("not implemented: SGD on the new users' rows with the items frozen would do, but "
                           "custom_inference.bpr has no such function"), iterations="n_epochs"))


# -- counts: NPFM / PPFM (seed 004 ch. 5), PSM (seed 000) --------------------------------------


def _pfm_mean(post, rows, cols, attrs):
    """Poisson rate w0 + w_u + w_(I+i) + sum_k r_k v_uk v_(I+i)k on the one-hot ids design
    (004_90693a0965f06816.txt eqs. 5.6 (NPFM) / 5.20 (PPFM: r_k = 1))."""
    I = int(attrs["front_door_n_users"])
    V = post["V"]
    r = post["r"] if "r" in post else np.ones((V.shape[0], V.shape[-1]))
    pair = np.einsum("smk,smk,sk->sm", V[:, rows], V[:, I + cols], r)
    return post["w0"][:, None] + post["w"][:, rows] + post["w"][:, I + cols] + pair


def _pfm_runner(variant: str):
    def run(key, obs, K, *, progress=True, hyper=None, checkpoint_every=None, **opts):
        from custom_inference import pfm
        from ppl_models.pfm import PFMHyper

        data = pfm.PFMData.from_matrix(obs, zeros="all")
        keep = ("w0", "w", "V") + (("r",) if variant == "npfm" else ())
        if checkpoint_every is not None:
            opts["checkpoint_every"] = int(checkpoint_every)
        idata = pfm.sample(key, data, K, hyper or PFMHyper(), variant=variant, keep=keep, progress=progress, **opts)
        return _stamp(idata, front_door_n_users=obs.shape[0])

    return run


for _variant in ("npfm", "ppfm"):
    _register(Adapter(_variant, "count", _pfm_runner(_variant), _pfm_mean, "posterior draws (Gibbs)",
                      "004 eq. 5.6" if _variant == "npfm" else "004 eq. 5.20", resumable=True, fold_in=_NO_FOLD_SAMPLER,
                      defaults=_GIBBS, iterations="num_samples"))


def _psm_mean(post, rows, cols, attrs, *, block_cells: int = 4_000_000):
    """p(z_j = 1 | o = T, y_i = 1, parameters) = psi_j sigma(x_ij) / sum_j' psi_j' sigma(x_ij'),
    x_ij = u_i . v_j + b_i + b_j (000_619a0297b9d686b2.txt eq. 5: which item a user picks, given an
    event of that user); the normaliser runs over all J items per draw and user, in blocks of users
    (never an I x J array). Its mean over draws from q is what `custom_inference.psm.predictive_probability`
    approximates with MacKay's probit."""
    u, v, bu, bv, psi = post["u"], post["v"], post["b_user"], post["b_item"], post["psi"]
    S, J = v.shape[0], v.shape[1]
    users, inv = np.unique(rows, return_inverse=True)
    norm = np.empty((S, users.size))
    per = max(1, block_cells // max(S * J, 1))
    for start in range(0, users.size, per):
        b = users[start:start + per]
        x = np.einsum("sbk,sjk->sbj", u[:, b], v) + bu[:, b][:, :, None] + bv[:, None, :]
        norm[:, start:start + per] = np.sum(psi[:, None, :] * _sigmoid(x), axis=2)
    x = _dot(u, v, rows, cols) + bu[:, rows] + bv[:, cols]
    return psi[:, cols] * _sigmoid(x) / norm[:, inv.reshape(-1)]


def _run_psm(key, obs, K, *, progress=True, hyper=None, **opts):
    from custom_inference import psm
    from ppl_models.psm import PSMHyper

    return _idata(psm.fit(key, obs, K, hyper or PSMHyper(), progress=progress, **opts))


_register(Adapter("psm", "count", _run_psm, _psm_mean, "draws from q (VB)", "000 eq. 5", resumable=True,
                  defaults={"max_iter": 100},
                  fold_in=("not available: users share the event-source distribution pi (Dir over users) and the "
                           "censored events D' = r D, so a new user changes every user's q; refit"), iterations="max_iter", draws="n_draws"))
