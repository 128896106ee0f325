"""The checks of `validation.checks.derivation`, one function per check (update, bridge, posterior,
calibration and evidence levels) returning its `CheckOutcome` (a list of them for the per-block checks;
the cross-check also returns CAVI's parameters), with their helpers: the conditional check's grid
(``_support``, ``_to_x``, ``_slice_tv``), the verdicts' reasons and SBC's functionals.

Part of the `validation.checks.derivation` package; moved here from the former single module unchanged.

Source: project addition (issue 25 items 1 and 3); Talts et al. (2018) for SBC; Yao, Vehtari, Simpson,
Gelman (2018) for k-hat and VSBC.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import arviz_io

from validation.checks import crosscheck as xc
from validation.checks import updates
from validation.checks.derivation.declaration import DeclarationError, Derivation, _block_label, _block_sites
from validation.checks.derivation.outcomes import CheckOutcome, CheckSettings, _band_sims
from validation.checks.derivation.solver import _cavi, _identified, _khat_problem, _latent, _q_draws, _trace
from validation.checks.references import Reference

# ---------------------------------------------------------------------------------------------
# the checks


_T = np.linspace(-35.0, 35.0, 20001)  # the coarse grid of t (x = exp t, sinh t or expit t)


def _support(site_entry) -> str:
    from numpyro.distributions import constraints

    c = site_entry["fn"].support
    while hasattr(c, "base_constraint"):
        c = c.base_constraint
    if isinstance(c, constraints._Real):
        return "real"
    if isinstance(c, constraints._Interval) and float(c.lower_bound) == 0.0 and float(c.upper_bound) == 1.0:
        return "unit"
    if isinstance(c, constraints._GreaterThan) and float(c.lower_bound) == 0.0:
        return "positive"
    return f"unsupported ({c})"


def _to_x(kind: str, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x(t) and log |dx/dt| of the grid's change of variables."""
    if kind == "positive":
        return np.exp(t), t
    if kind == "real":
        return np.sinh(t), np.log(np.cosh(t))
    x = 1.0 / (1.0 + np.exp(-t))
    return x, np.log(x) + np.log1p(-x)


def _slice_tv(log_p, log_q, kind: str) -> tuple[float, float, float]:
    """TV distance of two 1-D log densities (callables x (G,) -> (G,)) along a grid adapted to both:
    a coarse grid of t finds where either is within 40 nats of its maximum (in t), a 20001-point grid
    over that region is handed to `validation.checks.updates.conditional_distance` (x = exp(t) there,
    the change of variables written into both densities alike; TV does not depend on it).
    Returns (tv, x_low, x_high)."""
    def in_t(fn, t):
        x, jac = _to_x(kind, t)
        v = np.asarray(fn(x), np.float64) + jac
        return np.where(np.isfinite(v), v, -np.inf)

    lp, lq = in_t(log_p, _T), in_t(log_q, _T)
    if not np.isfinite(lp.max()):
        raise FloatingPointError("the program's log joint is not finite anywhere on the grid")
    if not np.isfinite(lq.max()):
        return 1.0, np.nan, np.nan
    keep = (lp > lp.max() - 40) | (lq > lq.max() - 40)
    idx = np.flatnonzero(keep)
    step = _T[1] - _T[0]
    lo, hi = _T[idx[0]] - 3 * step, _T[idx[-1]] + 3 * step
    t = np.linspace(lo, hi, 20001)
    g = np.exp(t)
    tv = updates.conditional_distance(lambda gg: in_t(log_p, np.log(gg)) - np.log(gg),
                                      lambda gg: in_t(log_q, np.log(gg)) - np.log(gg), g)
    x = _to_x(kind, np.array([lo, hi]))[0]
    return float(tv), float(x[0]), float(x[1])


def _conditional_outcome(d: Derivation, site: str, latent, s: CheckSettings, seed: int) -> CheckOutcome:
    from numpyro.infer.util import log_density

    name = f"conditional[{site}]"
    kind = _support(latent[site])
    if kind.startswith("unsupported"):
        return CheckOutcome(name, "update", "not applicable", False,
                            f"site support {kind}: the grid check handles positive, real and unit-interval sites")
    tr = _trace(d.program, d.args, d.kwargs, seed)
    values = {n: jnp.asarray(v["value"]) for n, v in _latent(tr).items()}
    shape = values[site].shape
    size = int(np.prod(shape, dtype=int))
    coords = sorted({0, size // 2, size - 1})[: max(1, s.n_coords)]
    rows = []
    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, d.args)
        kwargs = {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in d.kwargs.items()}
        try:
            cand = d.conditionals[site](values, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 (re-raised naming the field)
            raise DeclarationError(f"Derivation.conditionals[{site!r}]: failed at a prior draw: "
                                   f"{type(exc).__name__}: {exc}") from exc
        if not hasattr(cand, "log_prob"):
            raise DeclarationError(f"Derivation.conditionals[{site!r}]: must return a numpyro Distribution, "
                                   f"got {type(cand).__name__}")
        if tuple(cand.batch_shape + cand.event_shape) != tuple(shape):
            raise DeclarationError(f"Derivation.conditionals[{site!r}]: its distribution has shape "
                                   f"{tuple(cand.batch_shape + cand.event_shape)}, the site has shape {tuple(shape)}")

        def put(x, i):
            return values[site].reshape(-1).at[i].set(x).reshape(shape)

        joint = jax.jit(jax.vmap(lambda x, i: log_density(d.program, args, kwargs, {**values, site: put(x, i)})[0],
                                 in_axes=(0, None)))
        claimed = jax.jit(jax.vmap(lambda x, i: jnp.sum(cand.log_prob(put(x, i))), in_axes=(0, None)))
        for i in coords:
            tv, lo, hi = _slice_tv(lambda x: np.asarray(joint(jnp.asarray(x), i)),
                                   lambda x: np.asarray(claimed(jnp.asarray(x), i)), kind)
            rows.append({"site": site, "coordinate": str(np.unravel_index(i, shape)) if shape else "()",
                         "tv_distance": tv, "grid_low": lo, "grid_high": hi, "passed": tv < s.tv_tol})
    table = pd.DataFrame(rows)
    worst = float(table.tv_distance.max())
    ok = bool(table.passed.all())
    reason = (f"max TV {worst:.2g} over {len(rows)} coordinates {'<' if ok else '>='} {s.tv_tol:g} "
              f"(candidate vs the program's log joint on a grid, at a prior draw, seed {seed})")
    return CheckOutcome(name, "update", "pass" if ok else "fail", True, reason, worst, "max TV", table)


def _stationarity_outcomes(d: Derivation, s: CheckSettings, seed: int) -> list[CheckOutcome]:
    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, d.args)
        kwargs = {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in d.kwargs.items()}
        warm, _ = _cavi(d, s, seed, d.args, d.kwargs, sweeps=s.warm_sweeps)
        objective = lambda p: d.elbo(p, *args, **kwargs)  # noqa: E731
        out = []
        for key, update in d.cavi_blocks.items():
            label, fields = _block_label(key), list(_block_sites(key))
            try:
                # every other block moves first, so that this one starts away from its optimum
                before = warm
                for other, other_update in d.cavi_blocks.items():
                    if other != key:
                        before = other_update(before, *args, **kwargs)
                after = update(before, *args, **kwargs)
                r = updates.stationarity(objective, before, after, fields, block=label, rtol=s.stationarity_rtol)
            except (KeyError, AttributeError) as exc:
                raise DeclarationError(f"Derivation.cavi_blocks[{key!r}]: the parameters have no field {exc} "
                                       "(keys name the fields the update sets)") from exc
            ratio = r.grad_after / max(r.grad_before, 1.0)
            table = pd.DataFrame([{"block": label, "grad_before": r.grad_before, "grad_after": r.grad_after,
                                   "ratio": ratio, "rtol": r.rtol, "passed": r.passed}])
            reason = (f"max abs dELBO/d({label}) after the update {r.grad_after:.2g} "
                      f"({'<=' if r.passed else '>'} {r.rtol:g} x max(before {r.grad_before:.2g}, 1)); at "
                      f"{s.warm_sweeps} warm sweeps from vi_init, then the other blocks' updates")
            out.append(CheckOutcome(f"stationarity[{label}]", "update", "pass" if r.passed else "fail", True,
                                    reason, ratio, "grad after / max(before, 1)", table))
    return out


def _monotone_outcome(d: Derivation, s: CheckSettings, seed: int) -> CheckOutcome:
    _, trace = _cavi(d, s, seed, d.args, d.kwargs, sweeps=s.monotone_sweeps)
    ok, worst = updates.monotone(trace)
    table = pd.DataFrame({"sweep": np.arange(len(trace)), "elbo": trace})
    reason = (f"{s.monotone_sweeps} sweeps from vi_init: largest relative ELBO decrease {worst:.2g} "
              f"({'<=' if ok else '>'} 1e-9, rounding)")
    return CheckOutcome("monotone", "update", "pass" if ok else "fail", True, reason, worst,
                        "largest relative decrease", table)


def _verdict_reason(v: xc.Verdict, what: str) -> str:
    t = v.table
    if v.status == "pass":
        if "max_z" in t:
            worst = t.loc[(t.max_z / t.threshold).idxmax()]
            return (f"{what}: every group within Monte Carlo error (closest to its threshold: {worst.quantity}, "
                    f"max z {worst.max_z:.2f} <= Bonferroni threshold {worst.threshold:.2f} for "
                    f"{int(worst.Q)} quantities)")
        corr = (f", corr(log means) {t.corr_log_mean.min():.4f} >= 0.99" if "corr_log_mean" in t and
                t.corr_log_mean.notna().any() else "")
        return (f"{what}: median standardized error {t.median_std_error.max():.3f} <= 0.5{corr} in every group "
                "(one-scalar groups: their standardized error)")
    return f"{what}: " + "; ".join(v.reasons)


def _bridge_outcomes(d: Derivation, latent, ref: Reference, s: CheckSettings, seed: int, results: dict, blocks=None):
    from validation.checks import bridge

    out = []
    args, kwargs = d.args, dict(d.kwargs)
    for sites, label, fn in d.sampler_blocks():
        name = f"bridge[{label}]"
        if blocks is not None and label not in blocks:
            out.append(CheckOutcome(name, "bridge", "not selected", False, "left out by check(..., blocks=...)"))
            continue
        if set(sites) >= set(latent):
            out.append(CheckOutcome(name, "bridge", "not applicable", False,
                                    "the block owns every latent site (no site left to NUTS): the crosscheck covers it"))
            continue

        def gibbs_fn(rng_key, gibbs_sites, hmc_sites, fn=fn):
            return fn(rng_key, {**hmc_sites, **gibbs_sites}, *args, **kwargs)

        start = time.perf_counter()
        idata = bridge.run_hybrid(d.program, args, list(sites), gibbs_fn, model_kwargs=kwargs, seed=seed + 1,
                                  num_chains=s.bridge_chains, num_warmup=s.bridge_warmup, num_samples=s.bridge_draws,
                                  target_accept=s.target_accept, divergences=True, label=f"gibbs[{label}]+nuts")
        seconds = time.perf_counter() - start
        quantities = _identified(d, arviz_io.group_arrays(idata))
        divergences = idata.attrs.get("divergences")
        v = bridge.compare(quantities, ref, divergences=divergences, false_alarm=s.false_alarm)
        results[label] = idata
        table = v.table.assign(block=label, hybrid_divergences=divergences, seconds=round(seconds, 1))
        out.append(CheckOutcome(name, "bridge", v.status, True,
                                _verdict_reason(v, f"block {label} as CustomGibbs beside NUTS"),
                                float(v.table.max_z.max()), "max z", pd.concat([table, v.gates.table], axis=0,
                                                                                ignore_index=True)))
    return out


def _crosscheck_outcome(d: Derivation, fit, ref: Reference, s: CheckSettings, seed: int, results: dict):
    start = time.perf_counter()
    params = None
    if d.method == "vi" and d.fit is None:
        params, elbo_trace = _cavi(d, s, seed, d.args, d.kwargs)
        draws = _q_draws(d, params, seed, s.vi_draws)
        results["elbo"] = elbo_trace
    else:
        draws = fit(seed, *d.args, **d.kwargs)
    seconds = time.perf_counter() - start
    quantities = _identified(d, draws)
    missing = set(quantities) - set(ref.summary)
    if missing:
        raise DeclarationError(f"Derivation.identified: groups {sorted(missing)} of the solver are not in NUTS's")
    settings = {"problem": d.description or d.name, "solver": f"{d.method} solver, {seconds:.1f} s"}
    if d.method == "exact":
        r = xc.exact_crosscheck(model=d.name, solver=f"{d.name} sampler", ref=ref, solver_quantities=quantities,
                                solver_seconds=seconds, config=s, settings=settings, solver_name="solver")
    else:
        bad = [g for g, v in quantities.items() if not np.all(v > 0)]
        if bad:
            raise DeclarationError(f"Derivation.identified: the VI cross-check compares log means, so every group "
                                   f"must be positive; {bad} are not (give e.g. rates, variances, exp of a real quantity)")
        multi = [g for g, v in quantities.items() if v.shape[-1] >= 2]
        r = xc.vi_crosscheck(model=d.name, solver=f"{d.name} VI (q)", ref=ref, solver_quantities=quantities,
                             solver_seconds=seconds, config=s, settings=settings, verdict_groups=multi or None,
                             plotted=list(quantities), gap_groups={g: None for g in quantities},
                             extra={"elbo": results.get("elbo")})
        r = dataclasses.replace(r, verdict=_vi_verdict(r, ref, quantities, multi))
    results["crosscheck"] = r
    stat = float(r.verdict.table.max_z.max()) if d.method == "exact" else float(r.verdict.table.median_std_error.max())
    return CheckOutcome("crosscheck", "posterior", r.verdict.status, True,
                        _verdict_reason(r.verdict, "solver vs NUTS on the identified quantities"), stat,
                        "max z" if d.method == "exact" else "max median std error",
                        pd.concat([r.verdict.table, r.verdict.gates.table.assign(gate="yes")], axis=0,
                                  ignore_index=True)), params


def _vi_verdict(r, ref: Reference, quantities: dict, multi: list) -> xc.Verdict:
    """`compare_vi`'s verdict on the groups of two or more scalars (a correlation needs them), and the
    same standardized-error threshold on each scalar of the one-scalar groups (the median of one)."""
    singles = [g for g in quantities if g not in multi]
    if not singles:
        return r.verdict
    th = xc.VIThresholds()
    gate = ref.gates(list(quantities))
    rows, reasons = ([], []) if not multi else (r.verdict.table.to_dict("records"), list(r.verdict.reasons))
    if multi and r.verdict.status == "inconclusive":
        reasons = [x for x in reasons if not x.startswith("NUTS reference failed")]
    for g in singles:
        gap = r.extra[f"{g}_table"]
        err = float(gap.std_error.iloc[0])
        rows.append({"quantity": g, "Q": 1, "median_std_error": err, "p90_std_error": err,
                     "median_sd_ratio": float(gap.sd_ratio.iloc[0]), "coverage90": float(gap.nuts_mean_in_vi90.iloc[0])})
        if err > th.max_median_std_error:
            reasons.append(f"{g}: standardized error {err:.3f} > {th.max_median_std_error}")
    table = pd.DataFrame(rows)
    if not gate.passed:
        return xc.Verdict("inconclusive", ["NUTS reference failed its gates: " + "; ".join(gate.failures)] + reasons,
                          table, gate)
    return xc.Verdict("fail" if reasons else "pass", reasons, table, gate)


def _functionals(d: Derivation) -> dict:
    groups = list(d.identified({k: np.zeros((1, 1, *np.shape(v["value"]))) for k, v in
                                _latent(_trace(d.program, d.args, d.kwargs, 0)).items()}))

    def make(g):
        return lambda p: np.asarray(d.identified({k: np.asarray(v)[None, None] for k, v in p.items()})[g]).reshape(-1)

    return {g: make(g) for g in groups}


def _sbc_outcome(d: Derivation, fit, simulate, s: CheckSettings, n_sims: int, seed: int, results: dict):
    from validation.checks import sbc

    def sim(seed_):
        truth, args, kwargs = simulate(seed_)
        return truth, (args, kwargs)

    def fit_flat(data, seed_):
        args, kwargs = data
        draws = fit(seed_, *args, **kwargs)
        return {k: np.asarray(v).reshape(-1, *np.shape(v)[2:]) for k, v in draws.items()}

    r = sbc.run_sbc(sim, fit_flat, _functionals(d), n_sims=n_sims, master_seed=seed, n_draws=s.sbc_draws,
                    progress=False, method=d.name)
    results["sbc"] = r
    table = r.uniformity(s.alpha, n_band_sims=_band_sims(r, s.alpha))
    fam = table[table.kind == "family"]
    overall = table.iloc[-1]
    ok = bool(overall.ecdf_pass)
    worst = fam.iloc[:-1].sort_values("ecdf_p").iloc[0] if len(fam) > 1 else overall
    reason = (f"{n_sims} simulations, L = {s.sbc_draws}: smallest ECDF p {overall.ecdf_p:.3g} "
              f"({worst.functional}) {'>' if ok else '<='} alpha / Q = {overall.alpha_used:.3g} (Bonferroni, "
              f"false-alarm rate {s.alpha})")
    return CheckOutcome("sbc", "calibration", "pass" if ok else "fail", True, reason, float(overall.ecdf_p),
                        "smallest ECDF p", fam.reset_index(drop=True))


def _vsbc_outcome(d: Derivation, fit, simulate, s: CheckSettings, n_sims: int, seed: int, results: dict):
    from validation.checks import vi_evidence

    def sim(seed_):
        truth, args, kwargs = simulate(seed_)
        return truth, (args, kwargs)

    def fit_flat(data, seed_):
        args, kwargs = data
        draws = fit(seed_, *args, **kwargs)
        return {k: np.asarray(v).reshape(-1, *np.shape(v)[2:]) for k, v in draws.items()}

    r = vi_evidence.run_vsbc(sim, fit_flat, _functionals(d), n_sims=n_sims, master_seed=seed, alpha=s.alpha,
                             method=d.name)
    results["vsbc"] = r
    return CheckOutcome("vsbc", "evidence", "pass" if r.passed else "fail", False,
                        "VSBC " + r.verdict() + " (evidence about q, not counted: a correct mean-field q may be biased)",
                        r.smallest_p, "smallest flip p", r.table)


def _khat_outcome(d: Derivation, params, s: CheckSettings, seed: int, results: dict):
    from validation.checks import vi_evidence

    try:
        r = vi_evidence.khat(_khat_problem(d, params), n_draws=s.khat_draws, seed=seed)
    except ValueError as exc:
        raise DeclarationError(f"Derivation.q: {exc}") from exc
    results["khat"] = r
    return CheckOutcome("khat", "evidence", "reported", False,
                        f"PSIS k-hat {r.khat:.2f} ({r.reading}) of q against the program's posterior, "
                        f"{r.n_latent} latent scalars, PSIS ESS {r.ess:.0f} of {r.n_draws} (not counted)",
                        r.khat, "k-hat", pd.DataFrame([r.row()]))
