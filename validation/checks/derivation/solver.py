"""The program helpers and the solvers of `validation.checks.derivation`: the prior simulator, the
sampler or CAVI built from the declared blocks (`solver_fit`), q's draws, and the NUTS reference.

Part of the `validation.checks.derivation` package; moved here from the former single module unchanged.

Source: project addition (issue 25 items 1 and 3).
"""

from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from custom_inference import arviz_io

from validation.checks import crosscheck as xc
from validation.checks.derivation.declaration import DeclarationError, Derivation, _block_sites
from validation.checks.derivation.outcomes import CheckSettings
from validation.checks.references import Reference, from_run, problem_key

# ---------------------------------------------------------------------------------------------
# program helpers


def _trace(program, args, kwargs, seed: int, *, uncondition: bool = False):
    from numpyro import handlers

    with jax.enable_x64(True):
        m = handlers.seed(program, jax.random.PRNGKey(int(seed)))
        if uncondition:
            m = handlers.uncondition(m)
        return handlers.trace(m).get_trace(*args, **kwargs)


def _latent(tr) -> dict:
    return {n: s for n, s in tr.items() if s["type"] == "sample" and not s.get("is_observed", False)
            and not s.get("infer", {}).get("was_observed", False)}


def _program_sites(d: Derivation):
    """(latent site -> trace entry, observed site names) of the declared problem."""
    try:
        tr = _trace(d.program, d.args, d.kwargs, 0)
    except Exception as exc:  # noqa: BLE001 (re-raised naming the fields)
        raise DeclarationError(f"Derivation.program: calling program(*args, **kwargs) failed: "
                               f"{type(exc).__name__}: {exc}") from exc
    latent = _latent(tr)
    observed = [n for n, s in tr.items() if s["type"] == "sample" and s.get("is_observed", False)]
    return latent, observed


def _check_sites(d: Derivation, latent, observed) -> None:
    for f in ("conditionals", "gibbs_blocks"):
        for key in getattr(d, f):
            for s in _block_sites(key):
                if s not in latent:
                    raise DeclarationError(f"Derivation.{f}[{key!r}]: {s!r} is not a latent site of the program "
                                           f"(latent: {sorted(latent)})")
    for s in d.observed:
        if s not in observed:
            raise DeclarationError(f"Derivation.observed[{s!r}]: not an observed site of the program "
                                   f"(observed: {sorted(observed)})")


def prior_simulator(program, args: tuple, kwargs: Mapping, observed: Mapping) -> Callable:
    """``simulate(seed) -> (truth, args, kwargs)`` drawing from the program's prior predictive.

    The program runs under ``numpyro.handlers.uncondition`` with the problem's arguments: latent sites
    from the prior, observed sites from their distributions given them; each observed site's draw
    replaces its data in ``args`` / ``kwargs``, cast to the data's dtype and shape.

    Parameters
    ----------
    program : callable
        The NumPyro program.
    args : tuple
        Its positional arguments (the small problem).
    kwargs : mapping
        Its keyword arguments.
    observed : mapping
        Observed site -> keyword name (str) or position in ``args`` (int) of its data.

    Returns
    -------
    callable
        ``simulate(seed: int) -> (truth, args, kwargs)``; ``truth``: latent site -> numpy array.

    Raises
    ------
    KeyError
        When called, for an observed site the trace lacks.

    Source: project addition (SBC's simulation step, Talts et al. 2018, with NumPyro's
    ``uncondition``).
    """
    args, kwargs = tuple(args), dict(kwargs)

    def simulate(seed: int):
        tr = _trace(program, args, kwargs, seed, uncondition=True)
        truth = {n: np.asarray(s["value"]) for n, s in _latent(tr).items()}
        new_args, new_kwargs = list(args), dict(kwargs)
        for site, where in observed.items():
            old = new_kwargs[where] if isinstance(where, str) else new_args[where]
            value = np.asarray(tr[site]["value"]).astype(np.asarray(old).dtype).reshape(np.shape(old))
            if isinstance(where, str):
                new_kwargs[where] = value
            else:
                new_args[where] = value
        return truth, tuple(new_args), new_kwargs

    return simulate


def _simulator(d: Derivation):
    if d.simulate is not None:
        return d.simulate
    if d.observed:
        return prior_simulator(d.program, d.args, d.kwargs, d.observed)
    return None


# -- compiled functions of the program's arguments: arrays traced, the rest static ---------------

_JIT: dict = {}


def _is_traced_leaf(x) -> bool:
    return isinstance(x, (np.ndarray, jax.Array, np.generic, float)) and not isinstance(x, (bool, np.bool_))


def _split(args, kwargs):
    leaves, treedef = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    traced = tuple(jnp.asarray(x) for x in leaves if _is_traced_leaf(x))
    static = (treedef, tuple(None if _is_traced_leaf(x) else x for x in leaves))
    return static, traced


def _join(static, traced):
    treedef, leaves = static
    it = iter(traced)
    return jax.tree_util.tree_unflatten(treedef, [next(it) if x is None else x for x in leaves])


def _compiled(key, build, static):
    """``build(static)`` jitted, cached under (key, static) when static is hashable."""
    try:
        cache_key = (key, static)
        hash(cache_key)
    except TypeError:
        return build(static)
    if cache_key not in _JIT:
        _JIT[cache_key] = build(static)
    return _JIT[cache_key]


# ---------------------------------------------------------------------------------------------
# the solver


def _gibbs_run(blocks, chains: int, warmup: int, draws: int, thin: int):
    def build(static):
        def sweep(values, key, args, kwargs):
            for sites, label, fn in blocks:
                key, sub = jax.random.split(key)
                new = fn(sub, values, *args, **kwargs)
                if not isinstance(new, Mapping) or set(new) - set(sites):
                    raise DeclarationError(f"Derivation.gibbs_blocks[{label!r}] (or conditionals): must return "
                                           f"{{site: value}} for its sites {sites}, got "
                                           f"{sorted(new) if isinstance(new, Mapping) else type(new).__name__}")
                out = dict(values)
                for s, v in new.items():
                    v = jnp.asarray(v)
                    if v.shape != values[s].shape:
                        raise DeclarationError(f"Derivation.gibbs_blocks[{label!r}] (or conditionals[{s!r}]): drew shape "
                                               f"{v.shape} for {s!r}, the program's site has shape {values[s].shape}")
                    out[s] = v.astype(values[s].dtype)
                values = out
            return values

        def unit(values, key, args, kwargs):
            for k in jax.random.split(key, thin):
                values = sweep(values, k, args, kwargs)
            return values

        def one_chain(key, values, traced):
            args, kwargs = _join(static, traced)
            k_warm, k_keep = jax.random.split(key)
            values, _ = jax.lax.scan(lambda v, k: (unit(v, k, args, kwargs), None), values,
                                     jax.random.split(k_warm, max(warmup, 1))[:warmup])
            _, kept = jax.lax.scan(lambda v, k: (lambda n: (n, n))(unit(v, k, args, kwargs)), values,
                                   jax.random.split(k_keep, draws))
            return kept

        return jax.jit(jax.vmap(one_chain, in_axes=(0, 0, None)))

    return build


def solver_fit(d: Derivation, settings: CheckSettings = CheckSettings()) -> Callable:
    """The solver of a derivation as ``fit(seed, *args, **kwargs) -> dict site -> (chain, draw, ...)``.

    ``d.fit`` when declared. Otherwise, exact: a Gibbs sampler sweeping `Derivation.sampler_blocks` in
    order (``settings.solver_chains`` chains from independent prior draws of the program, each
    ``solver_warmup`` + ``solver_draws`` kept units of ``solver_thin`` sweeps, one jitted and vmapped
    program reused for every data set of the same shapes); the blocks must cover every latent site.
    VI: CAVI sweeps of ``d.cavi_blocks`` from ``d.vi_init(seed, ...)`` until the relative ELBO change is
    below ``settings.vi_tol`` (or ``vi_max_sweeps``; without ``elbo``: ``vi_max_sweeps`` sweeps), then
    ``settings.vi_draws`` draws from ``d.q`` as one chain. float64.

    Parameters
    ----------
    d : Derivation
        The declaration.
    settings : CheckSettings, default CheckSettings()
        Run lengths.

    Returns
    -------
    callable
        ``fit(seed, *args, **kwargs) -> dict site -> numpy array (chain, draw, *site shape)``.

    Raises
    ------
    DeclarationError
        When building, if the exact blocks miss a latent site of the program; when called, if a
        block returns other sites or shapes (the field named).

    Source: project addition.
    """
    if d.fit is not None:
        return d.fit
    if d.method == "exact":
        latent, _ = _program_sites(d)
        blocks = d.sampler_blocks()
        covered = {s for sites, _, _ in blocks for s in sites}
        if set(latent) - covered:
            raise DeclarationError(f"Derivation.conditionals / gibbs_blocks: the sampler's blocks miss the latent "
                                   f"sites {sorted(set(latent) - covered)} (declare fit, or a block for each)")
        s = settings
        build = _gibbs_run(tuple(blocks), s.solver_chains, s.solver_warmup, s.solver_draws, s.solver_thin)

        def fit(seed, *args, **kwargs):
            inits = [{n: jnp.asarray(v["value"]) for n, v in _latent(_trace(d.program, args, kwargs, 7919 * int(seed) + c)).items()}
                     for c in range(s.solver_chains)]
            with jax.enable_x64(True):
                stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *inits)
                static, traced = _split(args, kwargs)
                run = _compiled(("gibbs", d.name, tuple(blocks), s), build, static)
                keys = jax.random.split(jax.random.PRNGKey(int(seed)), s.solver_chains)
                out = run(keys, stacked, traced)
            return {k: np.asarray(v) for k, v in out.items()}

        return fit

    def fit(seed, *args, **kwargs):
        params, _ = _cavi(d, settings, seed, args, kwargs)
        return _q_draws(d, params, seed, settings.vi_draws)

    return fit


def _sweep_fn(d: Derivation):
    def build(static):
        def sweep(params, traced):
            args, kwargs = _join(static, traced)
            for key, update in d.cavi_blocks.items():
                params = update(params, *args, **kwargs)
            value = d.elbo(params, *args, **kwargs) if d.elbo is not None else jnp.nan
            return params, value

        return jax.jit(sweep)

    return build


def _cavi(d: Derivation, s: CheckSettings, seed, args, kwargs, *, sweeps: int | None = None):
    """Run CAVI from ``vi_init``: (params, ELBO trace float64 (T + 1,))."""
    with jax.enable_x64(True):
        params = d.vi_init(int(seed), *args, **kwargs)
        static, traced = _split(args, kwargs)
        sweep = _compiled(("cavi", d.name, tuple(d.cavi_blocks.items()), d.elbo), _sweep_fn(d), static)
        trace = [float(d.elbo(params, *args, **kwargs)) if d.elbo is not None else np.nan]
        n = s.vi_max_sweeps if sweeps is None else sweeps
        for _ in range(n):
            params, value = sweep(params, traced)
            trace.append(float(value))
            if sweeps is None and d.elbo is not None and np.isfinite(trace[-2]) and \
                    abs(trace[-1] - trace[-2]) <= s.vi_tol * abs(trace[-1]):
                break
    return params, np.asarray(trace)


def _q_dists(d: Derivation, params) -> dict:
    qs = d.q(params)
    if not isinstance(qs, Mapping):
        raise DeclarationError(f"Derivation.q: must return dict site -> numpyro Distribution, got {type(qs).__name__}")
    return qs


def _q_draws(d: Derivation, params, seed, n: int) -> dict:
    with jax.enable_x64(True):
        qs = _q_dists(d, params)
        keys = jax.random.split(jax.random.PRNGKey(int(seed)), len(qs))
        return {site: np.asarray(dist.sample(k, (n,)))[None] for k, (site, dist) in zip(keys, qs.items())}


def _khat_problem(d: Derivation, params):
    from validation.checks import vi_evidence

    def draw(seed: int, n: int) -> vi_evidence.QSample:
        with jax.enable_x64(True):
            qs = _q_dists(d, params)
            keys = jax.random.split(jax.random.PRNGKey(int(seed)), len(qs))
            sites, log_q = {}, np.zeros(n)
            for k, (site, dist) in zip(keys, qs.items()):
                x = dist.sample(k, (n,))
                lp = dist.log_prob(x)
                log_q += np.asarray(lp.reshape(n, -1).sum(axis=1), np.float64)
                sites[site] = np.asarray(x, np.float64)
        return vi_evidence.QSample(sites, log_q)

    return vi_evidence.KhatProblem(draw, vi_evidence.numpyro_log_joint(d.program, d.args, d.kwargs),
                                   "q's factors on the program's latent sites (Derivation.q)")


def _identified(d: Derivation, draws: Mapping) -> dict:
    try:
        out = d.identified({k: np.asarray(v) for k, v in draws.items()})
    except Exception as exc:  # noqa: BLE001 (re-raised naming the field)
        raise DeclarationError(f"Derivation.identified: failed on draws of shapes "
                               f"{ {k: np.shape(v) for k, v in draws.items()} }: {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, Mapping) or not out:
        raise DeclarationError("Derivation.identified: must return a non-empty dict group -> (chain, draw, Q)")
    res = {}
    for g, v in out.items():
        v = np.asarray(v, np.float64)
        if v.ndim != 3:
            raise DeclarationError(f"Derivation.identified: group {g!r} has shape {v.shape}, expected (chain, draw, Q)")
        res[g] = v
    return res


# ---------------------------------------------------------------------------------------------
# the NUTS reference


def nuts_reference(d: Derivation, settings: CheckSettings = CheckSettings(), *, seed: int = 0,
                   progress: bool = False) -> Reference:
    """A fresh NUTS run of ``d.program`` on the declared problem, as a reference on ``d.identified``.

    ``settings.nuts_chains`` x (``nuts_warmup`` + ``nuts_draws``), float64,
    `validation.checks.crosscheck.run_nuts`. Pass it to `check` (``nuts=``) to reuse it across calls
    on the same program and problem (a derivation and its planted-error variant).

    Parameters
    ----------
    d : Derivation
        The declaration.
    settings : CheckSettings, default CheckSettings()
        Run lengths.
    seed : int, default 0
        NUTS's seed.
    progress : bool, default False
        NumPyro's progress bar.

    Returns
    -------
    validation.checks.references.Reference
        The identified groups' draws, gates and settings.

    Raises
    ------
    DeclarationError
        When ``identified`` returns something else than 3-D groups.
    RuntimeError
        Not of its own: what NumPyro raises propagates.

    Source: project addition (validation level 2).
    """
    run = xc.run_nuts(d.program, *d.args, seed=seed, num_chains=settings.nuts_chains,
                      num_warmup=settings.nuts_warmup, num_samples=settings.nuts_draws,
                      target_accept=settings.target_accept, progress=progress, **d.kwargs)
    nuts_settings = settings.nuts(seed)
    data = tuple(x for x in jax.tree_util.tree_leaves((d.args, dict(d.kwargs))) if isinstance(x, np.ndarray))
    key = problem_key(data, d.name, nuts_settings)
    return from_run(d.name, run, lambda idata: _identified(d, arviz_io.group_arrays(idata)), nuts_settings, key)
