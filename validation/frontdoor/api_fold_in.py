"""Fold-in for the front door: new users added to a fitted model with the item side (and the
global parameters) held fixed, without refitting. One function per model, named in its adapter's
declaration (``ModelAdapter.fold_in`` in `validation.frontdoor.api_models`: the only place that says which model
folds in how; an adapter without one declares the reason there instead; no table here names a model, and
``tests/validation/test_registry.py`` checks that every function below is some adapter's), called by `validation.frontdoor.api.FittedModel.fold_in` as
``fold_in(fitted, obs) -> {group: {variable: new-user part}}`` (`validation.frontdoor.fitted._extend_users`
appends the parts: on the ``user`` axis, or on the ``feature`` axis after the fitted users for the
factorization machines' one-hot ids design).

Three kinds, by how the fit represents the posterior:

- samplers (HPF Gibbs, BPMF, SBMF, MCMC-FM, NPFM, PPFM): per kept draw of the item side and
  hyperparameters, the new users are drawn from the sampler's own complete conditionals given
  that draw (`_fold_in_per_draw`): one exact draw where the user block is one Gaussian (BPMF),
  else `FOLD_IN_SWEEPS` Gibbs sweeps of the new users' block;
- variational fits (HPF CAVI, VBFM, OVBFM, SIBM batch VB and SVI): the new users' q by the
  solver's own coordinate updates with every other factor of q frozen, iterated to convergence,
  then as many draws from the new q as the fitted posterior holds;
- point estimates (SGD-FM, SIBM MAP): the exact maximiser of the fit's objective in the new
  users' parameters, the rest held at the fit (unique: the objective is strictly concave in them).

Source: project addition (issue 10); each function names the seed equations of its updates.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["hpf", "hpf_gibbs", "bpmf", "sbmf", "mcmc_fm", "pfm", "vbfm", "sibm", "sibm_map", "sgd_fm", "bpr",
           "sgd_reg_attrs", "sibm_hyper_attrs", "MCMC_FM_KEEP"]


def hpf(fitted, obs):
    """New users' q(theta_u), q(xi_u) by the CAVI user blocks with the items' q held at the fit
    (`custom_inference.hpf.fold_in`; seed 001's user updates), then as many draws from q as the
    fitted posterior holds (the means of q when it holds the means).

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "hpf" (CAVI; ``variational_parameters`` group, ``hyper_*`` posterior attrs).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' counts (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        The new-user parts of the ``posterior`` (theta (chain, draw, I_new, K), xi (chain, draw, I_new))
        and ``variational_parameters`` (gamma_shape, gamma_rate (I_new, K), kappa_shape, kappa_rate
        (I_new,)) groups (see `validation.frontdoor.fitted._extend_users`), float64.

    Raises
    ------
    KeyError
        The posterior attrs lack the fit's ``hyper_*`` fields.
    ValueError
        From `hpf.state_from_inference_data` (not an HPF CAVI result) / `hpf.fold_in` (``obs`` has
        another number of items than the fit).

    Source: 001_30a2018ec18c20b9.txt (the CAVI user updates); the fold-in is a project addition.
    """
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
    `validation.frontdoor.fitted._extend_users`. Raises ValueError when the posterior lacks one of ``frozen_vars``
    (an artifact saved before they were kept: refit)."""
    import jax

    post = fitted.idata.posterior
    _require(fitted, "posterior", frozen_vars)
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


def hpf_gibbs(fitted, obs):
    """HPF Gibbs: per kept draw of (beta, eta), `FOLD_IN_SWEEPS` sweeps of the sampler's own user blocks
    for the new users: z (`hpf_gibbs.allocate`), theta (`hpf_gibbs.theta_conditional`), xi
    (`hpf_gibbs.xi_conditional`), started at theta = a / b', xi = b' (seed 001's complete conditionals).

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "hpf-gibbs" (posterior beta, eta; ``hyper_*`` attrs).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' counts (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"theta": (chain, draw, I_new, K), "xi": (chain, draw, I_new)}}, float64.

    Raises
    ------
    KeyError
        The posterior attrs lack the fit's ``hyper_*`` fields.
    ValueError
        The posterior lacks beta or eta.

    Source: 001_30a2018ec18c20b9.txt (complete conditionals of the Gibbs sampler); the fold-in is a
    project addition.
    """
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


def bpmf(fitted, obs):
    """BPMF: per kept draw of (V, mu_U, Lambda_U), the new user's u is Gaussian given them (S&M 2008
    eqs. 12-13): `bpmf.entry_stats` of the new rows (ratings centred at the fit's offset),
    `bpmf.factor_conditional`, one exact draw by `bpmf.sample_factor_rows`. A draw, not the
    conditional mean: the kept draws then carry the new user's own uncertainty into predict's sd, as
    they do for the fitted users.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "bpmf" (posterior V, mu_U, Lambda_U; attrs ``hyper_alpha``, ``front_door_offset``).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ratings (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"U": (chain, draw, I_new, K)}}, float64.

    Raises
    ------
    KeyError
        The posterior attrs lack ``hyper_alpha``.
    ValueError
        The posterior lacks V, mu_U or Lambda_U.

    Source: 004_90693a0965f06816.txt eqs. 2.12-2.13; the fold-in is a project addition.
    """
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


def sbmf(fitted, obs):
    """SBMF: per kept draw of the item side and hyperparameters (mu, beta, V, tau, mu_alpha, sigma_alpha,
    mu_u, sigma_u), `FOLD_IN_SWEEPS` sweeps of the sampler's user conditionals for the new users,
    alpha_i (`sbmf.alpha_conditional`, Algorithm 2 line 20) then u_i1..u_iK (`sbmf.u_conditional`,
    eqs. 3.15-3.17), with the residuals recomputed by `sbmf.residuals`; started at the prior means.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "sbmf" (posterior with the frozen variables above).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ratings (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"alpha": (chain, draw, I_new), "U": (chain, draw, I_new, K)}}, float64.

    Raises
    ------
    ValueError
        The posterior lacks one of the frozen variables (refit).

    Source: 004_90693a0965f06816.txt eqs. 3.15-3.17 and Algorithm 2 line 20; the fold-in is a
    project addition.
    """
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


# -- shared pieces --------------------------------------------------------------------------------


def _seed(fitted) -> int:
    return int(fitted.settings.get("seed", 0))


def _require(fitted, group: str, names) -> None:
    """ValueError unless ``fitted.idata`` has ``group`` with every variable in ``names``."""
    have = set(fitted.idata[group].data_vars) if group in fitted.idata.groups() else set()
    missing = [n for n in names if n not in have]
    if missing:
        raise ValueError(f"{fitted.model}: fold_in needs {group}.{missing}, which this fitted model does not hold "
                         "(an artifact written before fold_in kept them); refit it with this version")


def _hyper_from_attrs(cls, attrs):
    """The NamedTuple ``cls`` of hyperparameters from the ``hyper_<field>`` attrs of a fit (its
    defaults for fields the attrs lack)."""
    return cls(**{f: float(attrs[f"hyper_{f}"]) for f in cls._fields
                  if f"hyper_{f}" in attrs and attrs[f"hyper_{f}"] not in ("None",)})


def _n_fit_users(fitted) -> int:
    """Users of the one-hot ids design before this fold-in (features 0..I-1; items follow)."""
    return int(fitted.idata.posterior.attrs["front_door_n_users"])


def _q_draws(fitted, moments: dict, *, salt: int = 1) -> dict:
    """New users' posterior group from their q: {name: (mean, sd)} -> {name: (chain, draw, ...)}:
    as many independent Gaussian draws as the fitted posterior holds (one stream per fold-in, seeded
    by the fit's seed and the number of users before it), or the means when the fitted posterior
    holds the means of q (n_draws=0) or a point estimate."""
    post = fitted.idata.posterior
    C, S = post.sizes["chain"], post.sizes["draw"]
    kind = str(post.attrs.get("posterior_kind", ""))
    if kind.startswith("mean") or kind.startswith("point"):
        return {n: np.asarray(m)[None, None] for n, (m, _) in moments.items()}
    rng = np.random.default_rng([_seed(fitted), len(fitted.user_ids), salt])
    return {n: np.asarray(m) + np.asarray(sd) * rng.standard_normal((C, S, *np.shape(m))) for n, (m, sd) in moments.items()}


def _ids_design_device(obs):
    """The one-hot ids design of the new users' rows (features: the I_new new users, then the J items;
    `validation.frontdoor.api_models.ids_design`) as device arrays in float64. The colouring puts every user
    feature in block 0 and the items in the later blocks (a one-hot group is one block, groups in
    order: `custom_inference.fm_design.greedy_blocks`)."""
    import jax
    import jax.numpy as jnp

    from validation.frontdoor.api_models import ids_design

    design = ids_design(obs)
    block = np.asarray(design.block)
    if not (np.all(block[:obs.n_rows] == 0) and np.all(block[obs.n_rows:] > 0)):  # pragma: no cover - layout guard
        raise AssertionError("ids design: expected the user features to form block 0")
    with jax.enable_x64(True):
        return jax.tree_util.tree_map(jnp.asarray, design)


# -- factorization machines: MCMC-FM (Gibbs), VBFM / OVBFM (VI), SGD-FM (point) --------------------

#: What the front door keeps of an MCMC-FM run: the draws of the mean (w0, w, V) and what the new
#: users' conditionals need (alpha and the user group's normal-gamma hyperparameters).
MCMC_FM_KEEP = ("w0", "w", "V", "alpha", "mu_w", "sigma_w", "mu_v", "sigma_v")


def mcmc_fm(fitted, obs):
    """MCMC-FM fold-in: per kept draw of (w0, the items' w and V, alpha, mu_w, sigma_w, mu_v, sigma_v),
    `FOLD_IN_SWEEPS` sweeps of the sampler's own block update for the new users' one-hot features
    (`custom_inference.fm_mcmc.update_block` on block 0 of the new rows' ids design: w_u, then
    v_u1..v_uK from their complete conditionals, the caches refreshed by `fm_mcmc.caches` before each
    sweep), started at the user group's prior means mu_w[user], mu_v[user]; the last sweep is kept.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "mcmc-fm" (posterior with `MCMC_FM_KEEP`; attrs ``front_door_n_users``, ``hyper_*``).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ratings (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"w": (chain, draw, I_new), "V": (chain, draw, I_new, K)}} (float64), inserted
        after the fitted users on the ``feature`` axis.

    Raises
    ------
    ValueError
        The posterior lacks a variable of `MCMC_FM_KEEP`.

    Source: derived conditionals of `custom_inference.fm_mcmc` (004_90693a0965f06816.txt eqs.
    2.22-2.25); the fold-in is a project addition.
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import fm_mcmc
    from ppl_models.fm import FMHierHyper

    _require(fitted, "posterior", MCMC_FM_KEEP)
    hyper = _hyper_from_attrs(FMHierHyper, fitted.idata.posterior.attrs)
    I, I_new = _n_fit_users(fitted), obs.n_rows
    d = _ids_design_device(obs)

    def new_users(key, f):
        K, dt = f["V"].shape[-1], f["V"].dtype
        w = jnp.concatenate([jnp.full((I_new,), f["mu_w"][0], dt), f["w"][I:]])
        V = jnp.concatenate([jnp.broadcast_to(f["mu_v"][0], (I_new, K)).astype(dt), f["V"][I:]])
        st = fm_mcmc.FMMCMCState(f["w0"], w, V, f["alpha"], f["mu_w"], f["sigma_w"], f["mu_v"], f["sigma_v"],
                                 jnp.zeros(d.n_rows, dt), jnp.zeros((d.n_rows, K), dt))

        def sweep(_, c):
            st, key = c
            key, k = jax.random.split(key)
            return fm_mcmc.update_block(k, fm_mcmc.caches(st, d), d, hyper, 0), key

        st, _ = jax.lax.fori_loop(0, FOLD_IN_SWEEPS, sweep, (st, key))
        return {"w": st.w[:I_new], "V": st.V[:I_new]}

    return _fold_in_per_draw(fitted, new_users, MCMC_FM_KEEP)


#: CAVI fold-in (VBFM, OVBFM, SIBM batch VB and SVI): sweeps at most, and the stopping tolerance on the
#: largest change of a sweep (a mean's move in units of its posterior sd, or a precision's relative move).
FOLD_IN_VI_MAX_ITER = 2000
FOLD_IN_VI_TOL = 1e-10
_VBFM_FIELDS = ("w0_prec", "w0_h", "w_prec", "w_h", "v_prec", "v_h", "alpha_shape", "alpha_rate",
                "alpha_prior_shape", "alpha_prior_rate", "sigma_0", "sigma_w", "sigma_v")


def _vbfm_cavi(state, design, new, max_iter, tol):
    """CAVI restricted to the features ``new`` (bool (D,)), everything else of q held: per sweep the
    row caches from scratch (`vbfm.compute_caches`), `vbfm.update_w_block` per block, then for
    k = 1..K `vbfm.update_v_block` per block, each masked to ``new`` (scale 1, step 1: the exact
    coordinate maximizers). Until the largest change of a sweep is <= tol. (state, sweeps, change).
    One compiled program per design shape (`_vbfm_cavi_jit`)."""
    import jax.numpy as jnp

    st, it, ch = _vbfm_cavi_jit()(state, design, new, jnp.asarray(int(max_iter)), jnp.asarray(tol, state.w_prec.dtype))
    return st, int(it), float(ch)


@functools.lru_cache(maxsize=1)
def _vbfm_cavi_jit():
    import jax

    return jax.jit(_vbfm_cavi_impl)


def _vbfm_cavi_impl(state, design, new, max_iter, tol):
    import jax
    import jax.numpy as jnp

    from custom_inference import vbfm as vb

    nz_blocks, masks = [], []
    for b in range(design.n_blocks):  # the blocks' nonzeros, as vbfm's sweeps slice them
        idx = design.order[design.block_ptr[b]:design.block_ptr[b + 1]]
        nz_blocks.append((design.rows[idx], design.cols[idx], design.values[idx]))
        masks.append((design.block == b) & new)

    def sweep(st):
        caches, _ = vb.compute_caches(st, design.rows, design.cols, design.values, design.y, design.n_rows)
        for nz, m in zip(nz_blocks, masks):
            st, caches = vb.update_w_block(st, caches, nz, m, design.group, 1.0, 1.0)

        def over_k(k, carry):
            s, ca = carry
            for nz, m in zip(nz_blocks, masks):
                s, ca = vb.update_v_block(s, ca, nz, m, design.group, k, 1.0, 1.0)
            return s, ca

        return jax.lax.fori_loop(0, st.v_prec.shape[1], over_k, (st, caches))[0]

    def change(a, b):
        dw = jnp.maximum(jnp.abs(a.w_h / a.w_prec - b.w_h / b.w_prec) * jnp.sqrt(b.w_prec),
                         jnp.abs(a.w_prec - b.w_prec) / b.w_prec)
        dv = jnp.maximum(jnp.abs(a.v_h / a.v_prec - b.v_h / b.v_prec) * jnp.sqrt(b.v_prec),
                         jnp.abs(a.v_prec - b.v_prec) / b.v_prec)
        return jnp.maximum(jnp.max(jnp.where(new, dw, 0.0)), jnp.max(jnp.where(new[:, None], dv, 0.0)))

    def body(c):
        st, it, _ = c
        nxt = sweep(st)
        return nxt, it + 1, change(st, nxt)

    return jax.lax.while_loop(lambda c: (c[1] < max_iter) & (c[2] > tol), body,
                              (state, jnp.asarray(0), jnp.asarray(jnp.inf, state.w_prec.dtype)))


def _warn_unconverged(fitted, n, change):
    import warnings

    warnings.warn(f"{fitted.model} fold_in: the new users' updates stopped after {n} sweeps with a last change "
                  f"{change:.3g} > {FOLD_IN_VI_TOL:g}", RuntimeWarning, stacklevel=3)


def vbfm(fitted, obs):
    """VBFM / OVBFM fold-in: the new users' q(w_u), q(v_uk) by CAVI with q of w0, of the items' w and V,
    (q of) alpha and the prior precisions sigma_0, sigma_w, sigma_v held at the fit (`_vbfm_cavi`:
    `custom_inference.vbfm`'s own block updates restricted to the new users' one-hot features),
    started at the prior (mean 0, precision sigma_w[user], sigma_v[user, k]), until the largest change
    of a sweep is <= `FOLD_IN_VI_TOL` (at most `FOLD_IN_VI_MAX_ITER` sweeps; a RuntimeWarning if
    not). Given the rest of q, E_q log p(y | .) is a concave quadratic in the new users' moments, so
    the fixed point is unique. Both fits (batch CAVI and stochastic VI) fold in this way: OVBFM's
    target at step 1 on all rows is the CAVI update. Then as many draws from the new q as the fitted
    posterior holds.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "vbfm" or "ovbfm" (``variational_parameters`` group).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ratings (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        The new-user parts of ``posterior`` (w (chain, draw, I_new), V (chain, draw, I_new, K)) and
        ``variational_parameters`` (w_prec, w_h (I_new,), v_prec, v_h (I_new, K)), float64.

    Raises
    ------
    ValueError
        The variational parameters are missing.

    Warns
    -----
    RuntimeWarning
        The CAVI did not reach `FOLD_IN_VI_TOL` in `FOLD_IN_VI_MAX_ITER` sweeps.

    Source: 004_90693a0965f06816.txt eqs. 4.20-4.24 (corrected in `custom_inference.vbfm`); the
    fold-in is a project addition.
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import vbfm as vb

    _require(fitted, "variational_parameters", _VBFM_FIELDS)
    vp = fitted.idata["variational_parameters"]
    I, I_new = _n_fit_users(fitted), obs.n_rows
    d = _ids_design_device(obs)
    with jax.enable_x64(True):
        a = {f: jnp.asarray(np.asarray(vp[f].values, np.float64)) for f in _VBFM_FIELDS}
        K = a["v_prec"].shape[1]
        sw, sv = a["sigma_w"][0], a["sigma_v"][0]
        st = vb.VBFMState(**{f: a[f] for f in _VBFM_FIELDS if f not in ("w_prec", "w_h", "v_prec", "v_h")},
                          w_prec=jnp.concatenate([jnp.full((I_new,), sw), a["w_prec"][I:]]),
                          w_h=jnp.concatenate([jnp.zeros(I_new), a["w_h"][I:]]),
                          v_prec=jnp.concatenate([jnp.broadcast_to(sv, (I_new, K)), a["v_prec"][I:]]),
                          v_h=jnp.concatenate([jnp.zeros((I_new, K)), a["v_h"][I:]]),
                          last_elbo=jnp.asarray(jnp.nan))
        new = jnp.arange(d.n_features) < I_new
        st, n, change = _vbfm_cavi(st, d, new, FOLD_IN_VI_MAX_ITER, FOLD_IN_VI_TOL)
    if change > FOLD_IN_VI_TOL:
        _warn_unconverged(fitted, n, change)
    params = {f: np.asarray(getattr(st, f))[:I_new] for f in ("w_prec", "w_h", "v_prec", "v_h")}
    post = _q_draws(fitted, {"w": (params["w_h"] / params["w_prec"], 1 / np.sqrt(params["w_prec"])),
                             "V": (params["v_h"] / params["v_prec"], 1 / np.sqrt(params["v_prec"]))})
    return {"posterior": post, "variational_parameters": params}


def sgd_reg_attrs(reg, n_groups: int, K: int) -> dict:
    """The SGD-FM regularization constants as attrs of the fit (JSON lists), for `sgd_fm`.

    Parameters
    ----------
    reg : object
        The fit's regularization (``lambda_w``: scalar or (G,); ``lambda_v``: scalar, (G,) or (G, K)),
        as `custom_inference.fm_sgd` takes it.
    n_groups : int
        G, the feature groups.
    K : int
        Number of latent factors.

    Returns
    -------
    dict str -> str
        ``front_door_lambda_w`` (G,) and ``front_door_lambda_v`` (G, K), broadcast as
        `custom_inference.fm_sgd` does, as JSON lists of floats.

    Raises
    ------
    ValueError
        They do not broadcast to (G,) / (G, K).

    Source: project addition.
    """
    import json

    lw = np.broadcast_to(np.asarray(reg.lambda_w, np.float64), (n_groups,))
    lv = np.asarray(reg.lambda_v, np.float64)
    lv = np.broadcast_to(lv[:, None] if lv.ndim == 1 else lv, (n_groups, K))
    return {"front_door_lambda_w": json.dumps(lw.tolist()), "front_door_lambda_v": json.dumps(lv.tolist())}


def sgd_fm(fitted, obs):
    """SGD-FM fold-in: the exact minimizer, in the new user's (w_u, v_u), of the objective Algorithm 1
    descends (`custom_inference.fm_sgd.objective`) with w0 and the items' w, V held at the fit. On the
    ids design y_hat(u, j) = w0 + w_j + phi_j . theta_u with phi_j = (1, v_j) and theta_u = (w_u, v_u),
    and the penalty counts each parameter once per instance (n_u = the user's ratings), so the
    objective is the ridge regression

        sum_j (y_uj - w0 - w_j - phi_j . theta_u)^2 + n_u (lambda_w[user] w_u^2 + sum_k lambda_v[user, k] v_uk^2),

    minimized by theta_u = (Phi^T Phi + n_u diag(lambda))^-1 Phi^T r (unique when the lambdas are > 0).
    Users do not interact: one (K + 1) x (K + 1) solve each.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "sgd-fm" (point posterior w0, w, V; attrs of `sgd_reg_attrs`).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ratings (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"w": (1, 1, I_new), "V": (1, 1, I_new, K)}}, float64.

    Raises
    ------
    ValueError
        The attrs lack the regularization constants (an artifact written before they were stamped:
        refit) or a new user's system is singular (zero regularization and fewer ratings than K + 1).

    Source: 004_90693a0965f06816.txt Algorithm 1 and eq. 2.17 (the objective as implemented in
    `custom_inference.fm_sgd`); the closed form is a project addition.
    """
    import json

    attrs = fitted.idata.posterior.attrs
    if "front_door_lambda_w" not in attrs:
        raise ValueError("sgd-fm: fold_in needs the fit's regularization constants, which this fitted model does not "
                         "hold (an artifact written before they were kept); refit it with this version")
    lw, lv = json.loads(attrs["front_door_lambda_w"])[0], np.asarray(json.loads(attrs["front_door_lambda_v"])[0])
    post = fitted.idata.posterior
    I = _n_fit_users(fitted)
    w0 = float(np.asarray(post["w0"]).reshape(-1)[0])
    w_items = np.asarray(post["w"].values, np.float64).reshape(-1, post["w"].shape[-1])[0, I:]
    V_items = np.asarray(post["V"].values, np.float64).reshape(-1, *post["V"].shape[-2:])[0, I:]
    rows, cols = np.asarray(obs.rows), np.asarray(obs.cols)
    K = V_items.shape[1]
    phi = np.column_stack([np.ones(rows.size), V_items[cols]])  # (N, K + 1)
    r = np.asarray(obs.values, np.float64) - w0 - w_items[cols]
    A = np.zeros((obs.n_rows, K + 1, K + 1))
    b = np.zeros((obs.n_rows, K + 1))
    np.add.at(A, rows, phi[:, :, None] * phi[:, None, :])
    np.add.at(b, rows, phi * r[:, None])
    n_u = np.bincount(rows, minlength=obs.n_rows).astype(np.float64)
    A += n_u[:, None, None] * np.diag(np.concatenate([[lw], lv]))[None]
    try:
        theta = np.linalg.solve(A, b[..., None])[..., 0]
    except np.linalg.LinAlgError:
        raise ValueError("sgd-fm fold_in: a new user's least-squares system is singular (regularization 0 and fewer "
                         f"ratings than K + 1 = {K + 1}); its minimizer is not unique") from None
    return {"posterior": {"w": theta[:, 0][None, None], "V": theta[:, 1:][None, None]}}


# -- one-class logistic MF: SIBM (seed 002) -----------------------------------------------------------

_SIBM_HYPER = ("u_bar0", "u_tilde0", "v_bar0", "v_tilde0", "z_bar0", "z_tilde0")


def sibm_hyper_attrs(hyper) -> dict:
    """``hyper_<field>`` attrs of a SIBM fit (its priors and ``biases`` as 0/1), for `sibm` and `sibm_map`.

    Parameters
    ----------
    hyper : ppl_models.sibm.SIBMHyper
        The fit's hyperparameters.

    Returns
    -------
    dict
        ``hyper_<field>`` -> float for each prior field, and ``hyper_biases`` -> 0 or 1.

    Raises
    ------
    AttributeError
        A hyper without the SIBMHyper fields.

    Source: project addition.
    """
    return {**{f"hyper_{f}": float(getattr(hyper, f)) for f in _SIBM_HYPER}, "hyper_biases": int(bool(hyper.biases))}


def _sibm_setup(fitted, obs):
    from ppl_models.sibm import SIBMHyper

    attrs = fitted.idata.posterior.attrs
    if "hyper_u_tilde0" not in attrs:
        raise ValueError(f"{fitted.model}: fold_in needs the fit's priors (hyper_* attrs), which this fitted model does "
                         "not hold (an artifact written before they were kept); refit it with this version")
    hyper = SIBMHyper(**{f: float(attrs[f"hyper_{f}"]) for f in _SIBM_HYPER}, biases=bool(int(attrs["hyper_biases"])))
    vp = fitted.idata["variational_parameters"]
    u_fixed = np.asarray(vp["u_fixed"].values, np.float64)
    start = np.where(u_fixed > 0, 1.0, hyper.u_bar0) * np.ones((obs.n_rows, 1))  # the prior mean; bias column 1
    return hyper, vp, u_fixed, start


def _binary_obs(obs):
    import jax.numpy as jnp

    from custom_inference.data import Observations

    return Observations(jnp.asarray(obs.rows), jnp.asarray(obs.cols), jnp.ones(obs.nnz, jnp.float64),
                        obs.n_rows, obs.n_cols)


def sibm(fitted, obs):
    """SIBM batch VB / SVI fold-in: the new users' q(u_i.) by `custom_inference.sibm.fold_in` (batch
    VB's U updates with q(V), q(z) held at the fit; each new user's row of X is its ones and zeros
    elsewhere), started at the prior, until the largest change of a sweep is <= `FOLD_IN_VI_TOL`
    (at most `FOLD_IN_VI_MAX_ITER` sweeps; a RuntimeWarning if not). The same for both fits: the SVI
    targets average to this batch update (seed 002 eq. 9). Then as many draws from the new q as the
    fitted posterior holds (bias columns fixed at 1).

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "sibm" or "sibm-svi" (``variational_parameters`` group, ``hyper_*`` attrs).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ones (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        The new-user parts of ``posterior`` (U (chain, draw, I_new, K')) and ``variational_parameters``
        (u_prec, u_h (I_new, K')), float64.

    Raises
    ------
    ValueError
        The fit's priors or variational parameters are missing.

    Warns
    -----
    RuntimeWarning
        The updates did not reach `FOLD_IN_VI_TOL` in `FOLD_IN_VI_MAX_ITER` sweeps.

    Source: 002_5408d341cb9fc544.txt eqs. (6)-(8) (the U updates derived in `custom_inference.sibm`);
    the fold-in is a project addition.
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import sibm as sb

    _require(fitted, "variational_parameters", ("u_fixed", "v_fixed", "v_prec", "v_h", "z_prec", "z_h"))
    hyper, vp, u_fixed, start = _sibm_setup(fitted, obs)
    with jax.enable_x64(True):
        g = {f: jnp.asarray(np.asarray(vp[f].values, np.float64)) for f in ("v_prec", "v_h", "z_prec", "z_h", "v_fixed")}
        prec = np.full(start.shape, 1.0 / hyper.u_tilde0)
        st = sb.SIBMState(u_prec=jnp.asarray(prec), u_h=jnp.asarray(prec * start), u_fixed=jnp.asarray(u_fixed),
                          last_elbo=jnp.asarray(jnp.nan), **g)
        st, n, change = sb.fold_in(st, _binary_obs(obs), hyper, max_iter=FOLD_IN_VI_MAX_ITER, tol=FOLD_IN_VI_TOL)
        (m, v), _, _ = sb.moments(st)
        m, v = np.asarray(m), np.asarray(v)
    if change > FOLD_IN_VI_TOL:
        _warn_unconverged(fitted, n, change)
    params = {"u_prec": np.asarray(st.u_prec), "u_h": np.asarray(st.u_h)}
    return {"posterior": _q_draws(fitted, {"U": (m, np.sqrt(v))}), "variational_parameters": params}


def sibm_map(fitted, obs):
    """SIBM MAP fold-in: each new user's MAP row u_i. given the fitted V and z, by
    `custom_inference.sibm.fold_in_map` (Newton on the strictly concave log p(x_i | u_i, V, z) + log p(u_i),
    the part of the MAP objective that depends on u_i: the unique maximizer), started at the prior mean.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "sibm-map" (point estimates in ``variational_parameters``, ``hyper_*`` attrs).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' ones (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        The new-user parts of ``posterior`` (U (1, 1, I_new, K')) and ``variational_parameters``
        (U (I_new, K'), u_count zeros (I_new,)), float64.

    Raises
    ------
    ValueError
        The fit's priors or point estimates are missing.

    Source: 002_5408d341cb9fc544.txt eqs. (1)-(2) (the MAP baseline's objective, sec. 4.2); the
    fold-in is a project addition.
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import sibm as sb

    _require(fitted, "variational_parameters", ("U", "V", "z", "u_fixed", "v_fixed", "v_count", "z_count"))
    hyper, vp, u_fixed, start = _sibm_setup(fitted, obs)
    with jax.enable_x64(True):
        g = {f: jnp.asarray(np.asarray(vp[f].values, np.float64)) for f in ("V", "z", "v_fixed", "v_count", "z_count")}
        st = sb.MAPState(U=jnp.asarray(start), u_fixed=jnp.asarray(u_fixed), u_count=jnp.zeros(obs.n_rows), **g)
        st, n, change = sb.fold_in_map(st, _binary_obs(obs), hyper)
    U = np.asarray(st.U)
    return {"posterior": {"U": U[None, None]}, "variational_parameters": {"U": U, "u_count": np.zeros(obs.n_rows)}}


# -- Poisson factorization machines: NPFM / PPFM (seed 004 ch. 5) ------------------------------------


def pfm(fitted, obs):
    """NPFM / PPFM fold-in: per kept draw of (w0, the items' w and V, delta, and r for NPFM),
    `FOLD_IN_SWEEPS` sweeps over the new users' block of the sampler's own conditionals on the new
    users' rows (every cell of their rows, zeros included: ``zeros="all"``, as the fit), in the
    sampler's valid order restricted to the user features: the latent counts z (`pfm.allocate`);
    the collapsed shape alpha_u (CRT tables by `pfm.crt`, then `pfm.shape_conditionals`, eq. 5.17)
    and w_u | alpha_u (eq. 5.9); beta_u (eq. 5.13); the collapsed zeta_u (eq. 5.18) and v_u. | zeta_u
    (eq. 5.10), with the exposures of `pfm.exposures` (for a one-hot user feature, E_uk = sum_j v_jk
    over its J cells) and Gamma draws by `pfm.gamma_draw`. Started at the prior means; the last sweep
    is kept. The items' shape and rate variables are not read by these conditionals (placeholders).

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "npfm" or "ppfm" (posterior with w0, w, V, delta and, for NPFM, r).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' counts (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"w": (chain, draw, I_new), "V": (chain, draw, I_new, K)}}, float64, inserted
        after the fitted users on the ``feature`` axis.

    Raises
    ------
    ValueError
        The posterior lacks one of those variables (refit), or from `pfm.PFMData.from_matrix` for
        counts it refuses.

    Source: 004_90693a0965f06816.txt eqs. 5.7, 5.9, 5.10, 5.13, 5.17, 5.18 (as derived in
    `custom_inference.pfm`); the fold-in is a project addition.
    """
    import jax
    import jax.numpy as jnp

    from custom_inference import pfm as P
    from ppl_models.pfm import PFMHyper

    post = fitted.idata.posterior
    npfm = "r" in post.data_vars
    frozen = ("w0", "w", "V", "delta") + (("r",) if npfm else ())
    _require(fitted, "posterior", frozen)
    h = _hyper_from_attrs(PFMHyper, post.attrs)
    I, I_new = _n_fit_users(fitted), obs.n_rows
    with jax.enable_x64(True):
        data = jax.tree_util.tree_map(jnp.asarray, P.PFMData.from_matrix(obs, zeros="all"))
    D, T = data.n_features, max(int(data.n_units), 1)
    user = jnp.arange(D) < I_new

    def new_users(key, f):
        K, dt = f["V"].shape[-1], f["V"].dtype
        full = lambda v, *s: jnp.full(s, v, dt)  # noqa: E731
        alpha, beta, zeta = full(h.a / h.b, D), full(h.c / h.d, D), full(h.e / h.f, D)
        common = dict(w0=f["w0"], alpha0=full(h.a_0 / h.b_0), beta0=full(h.c_0 / h.d_0),
                      w=jnp.concatenate([full(h.a / h.b * h.d / h.c, I_new), f["w"][I:]]), alpha=alpha, beta=beta,
                      V=jnp.concatenate([(h.e / h.f) / jnp.broadcast_to(f["delta"], (I_new, K)), f["V"][I:]]),
                      zeta=zeta, delta=f["delta"])
        st = (P.NPFMState(**common, r=f["r"], gamma0=full(h.e_0 / h.f_0), c=full(h.g_0 / h.h_0)) if npfm
              else P.PPFMState(**common))
        zeros_t = {"alpha0": jnp.zeros((), dt), "zeta": jnp.zeros((D, K), dt), "gamma0": jnp.zeros(K, dt)}

        def sweep(_, c):
            st, key = c
            key, *k = jax.random.split(key, 9)
            stats = P.allocate(k[0], st, data)
            expo = P.exposures(st, data)
            tables = dict(zeros_t, alpha=P.crt(k[1], stats.z2, st.alpha, T))
            sc = P.shape_conditionals(st, stats, expo, data, h, tables)
            st = st._replace(alpha=jnp.where(user, P.gamma_draw(k[2], *sc["alpha"]), st.alpha))
            st = st._replace(w=jnp.where(user, P.gamma_draw(k[3], *P.conditionals(st, stats, expo, data, h)["w"]), st.w))
            st = st._replace(beta=jnp.where(user, P.gamma_draw(k[4], *P.conditionals(st, stats, expo, data, h)["beta"]),
                                            st.beta))
            tables = dict(tables, zeta=P.crt(k[5], stats.z3, jnp.broadcast_to(st.zeta[:, None], (D, K)), 2 * T))
            sc = P.shape_conditionals(st, stats, expo, data, h, tables)
            st = st._replace(zeta=jnp.where(user, P.gamma_draw(k[6], *sc["zeta"]), st.zeta))
            V = P.gamma_draw(k[7], *P.conditionals(st, stats, expo, data, h)["V"])
            return st._replace(V=jnp.where(user[:, None], V, st.V)), key

        st, _ = jax.lax.fori_loop(0, FOLD_IN_SWEEPS, sweep, (st, key))
        return {"w": st.w[:I_new], "V": st.V[:I_new]}

    return _fold_in_per_draw(fitted, new_users, frozen)


# -- BPR (Rendle et al. 2009) -----------------------------------------------------------------------

#: Newton iterations at most and the stopping tolerance (largest move of a coordinate) of `bpr`.
BPR_NEWTON_MAX_ITER = 100
BPR_NEWTON_TOL = 1e-12


def bpr(fitted, obs):
    """BPR fold-in: each new user's w_u maximizes the objective whose stationary point LearnBPR's
    SGD seeks in w_u with the items (h, b) fixed. An epoch visits every positive (u, i) once and
    draws j from the scheme's distribution p_u over u's non-positives (uniform, or proportional to
    the items' training popularity n_j; a triple whose draws all hit positives is dropped, which
    scales the likelihood and the penalty terms of (u, i) alike), so the expected step in w_u is the
    gradient of

        F_u(w) = sum_{i in P_u} sum_{j not in P_u} p_u(j) ln sigma(w . (h_i - h_j) + b_i - b_j)
                 - reg/2 |P_u| |w|^2,

    a strictly concave function (reg > 0): its maximizer is unique. Found by Newton steps (exact
    gradient and Hessian, built from the |P_u| x |N_u| matrix of pair weights without forming the
    pairs' K-vectors) from w = 0, with the best of the step lengths 1, 1/2, ..., 1/512 (a step is
    taken only if F_u increases), until no coordinate moves more than `BPR_NEWTON_TOL`.

    Parameters
    ----------
    fitted : validation.frontdoor.api.FittedModel
        The fit of "bpr" (point posterior user_factors, item_factors, item_bias; attrs reg, method).
    obs : custom_inference.data.Observations
        Shape (I_new, J): the new users' positives (row u is new user u; J the fitted items).

    Returns
    -------
    dict
        {"posterior": {"user_factors": (1, 1, I_new, K)}}, float64.

    Raises
    ------
    ValueError
        reg = 0 (no unique maximizer), a new user has every item as a positive (no negatives), or, for
        popularity sampling, none of a new user's non-positives was ever a training positive (the
        sampler could never draw a negative for it).
    KeyError
        The posterior attrs lack ``reg``.

    Source: Rendle et al. 2009 (UAI) sec. 4.1 (BPR-Opt) and fig. 4 (LearnBPR), with the penalty per
    occurrence as `custom_inference.bpr.objective`; the fold-in is a project addition.
    """
    post = fitted.idata.posterior
    reg = float(post.attrs["reg"])
    if not reg > 0:
        raise ValueError("bpr fold_in: the fit's reg is 0, so a new user's objective has no unique maximizer")
    popularity = str(post.attrs.get("method", "sgd-uniform")).endswith("popularity")
    H = np.asarray(post["item_factors"].values, np.float64).reshape(-1, *post["item_factors"].shape[-2:])[0]
    b = np.asarray(post["item_bias"].values, np.float64).reshape(-1, post["item_bias"].shape[-1])[0]
    J, K = H.shape
    n_fit = len(fitted.user_ids) - int(fitted.settings.get("folded_in_users", 0))  # the fit's own users
    n_j = np.bincount(fitted.seen[:n_fit].indices, minlength=J).astype(np.float64)
    rows, cols = np.asarray(obs.rows), np.asarray(obs.cols)
    steps = 0.5 ** np.arange(10)
    out = np.zeros((obs.n_rows, K))
    for u in range(obs.n_rows):
        P = np.unique(cols[rows == u])
        N = np.setdiff1d(np.arange(J), P)
        if N.size == 0:
            raise ValueError(f"bpr fold_in: new user {u} has every item as a positive; no negatives to rank against")
        p = n_j[N] if popularity else np.ones(N.size)
        if p.sum() <= 0:
            raise ValueError(f"bpr fold_in: none of new user {u}'s non-positives was a training positive; "
                             "popularity sampling could never draw a negative for it")
        p = p / p.sum()
        HP, HN, c = H[P], H[N], b[P][:, None] - b[N][None, :]

        def F(w):
            d = (HP @ w)[:, None] - (HN @ w)[None, :] + c
            return float(np.sum(p * -np.logaddexp(0.0, -d))) - 0.5 * reg * P.size * float(w @ w)

        w = np.zeros(K)
        for _ in range(BPR_NEWTON_MAX_ITER):
            d = (HP @ w)[:, None] - (HN @ w)[None, :] + c
            s = 0.5 * (1 - np.tanh(0.5 * d))  # sigma(-d)
            G = p * s
            A = p * s * (1 - s)
            g = G.sum(1) @ HP - G.sum(0) @ HN - reg * P.size * w
            cross = HP.T @ A @ HN
            hess = ((HP * A.sum(1)[:, None]).T @ HP + (HN * A.sum(0)[:, None]).T @ HN - cross - cross.T
                    + reg * P.size * np.eye(K))
            step = np.linalg.solve(hess, g)
            f0 = F(w)
            vals = [F(w + t * step) for t in steps]
            best = int(np.argmax(vals))
            if not vals[best] > f0:
                break
            move = steps[best] * step
            w = w + move
            if np.max(np.abs(move)) <= BPR_NEWTON_TOL:
                break
        out[u] = w
    return {"posterior": {"user_factors": out[None, None]}}
