"""HPF glue for the validation levels: brute-force twins, update checks, cross-check.

Everything here is reference code for tests and reports; it may build dense I x J
arrays because it only ever runs on small matrices.

Sources: ``001_30a2018ec18c20b9.txt`` (complete conditionals, batch algorithm
figure); the model is `ppl_models.hpf.model`, the solver `custom_inference.hpf`.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from numpyro.infer.util import log_density
from scipy import special, stats

from custom_inference import arviz_io
from custom_inference import hpf as cavi
from custom_inference.data import Observations
from custom_inference.gamma import gamma_log_mean, gamma_mean
from ppl_models import hpf as ppl

from validation.checks import crosscheck as xc
from validation.checks import registry
from validation.checks import updates
from validation.checks import vi_evidence
from validation.checks.errata import Erratum

__all__ = [
    "score_fn",
    "counts_runner",
    "dense_elbo",
    "monte_carlo_elbo",
    "update_checks",
    "dense_twin_checks",
    "CrosscheckConfig",
    "CROSSCHECK_DEFAULT",
    "CROSSCHECK_SMALL",
    "CROSSCHECK_BRIDGE",
    "run_crosscheck",
    "identifiable_quantities",
    "simulated_data",
    "nuts_reference",
    "run_nuts_reference",
    "crosscheck_settings",
    "khat_problem",
    "vsbc_adapters",
    "ERRATA",
    "ERRATA_HYPER",
    "SEED001",
]


# ------------------------------------------------------------------------------
# brute-force twins (numpy / scipy, independent of the solver's code)


def _np_state(state):
    return cavi.HPFState(*(np.asarray(x, dtype=np.float64) for x in state))


def dense_elbo(state, y: np.ndarray, hyper) -> float:
    """The HPF ELBO (optimal phi) by brute force over every cell of a dense (I, J) matrix.

    Written with numpy/scipy only, cell by cell over all I x J entries (zeros included), sharing no code with
    `custom_inference.hpf.elbo`; the two must agree to rounding.

    Parameters
    ----------
    state : custom_inference.hpf.HPFState
        The variational parameters: gamma_shape, gamma_rate (I, K), kappa_shape, kappa_rate (I,), lambda_shape,
        lambda_rate (J, K), tau_shape, tau_rate (J,); taken as float64.
    y : numpy.ndarray, shape (I, J)
        Counts, taken as float64.
    hyper : ppl_models.hpf.HPFHyper
        The hyperparameters a, a', b', c, c', d'.

    Returns
    -------
    float
        The ELBO (nats).

    Raises
    ------
    None of its own.

    Source: project addition (the ELBO of the model and mean-field family of 001_30a2018ec18c20b9.txt, complete
    conditionals section).
    """
    s = _np_state(state)
    y = np.asarray(y, dtype=np.float64)
    e_th, el_th = s.gamma_shape / s.gamma_rate, special.digamma(s.gamma_shape) - np.log(s.gamma_rate)
    e_be, el_be = s.lambda_shape / s.lambda_rate, special.digamma(s.lambda_shape) - np.log(s.lambda_rate)
    e_xi, el_xi = s.kappa_shape / s.kappa_rate, special.digamma(s.kappa_shape) - np.log(s.kappa_rate)
    e_et, el_et = s.tau_shape / s.tau_rate, special.digamma(s.tau_shape) - np.log(s.tau_rate)
    # likelihood of z (optimal phi), every cell: y * logsumexp_k(...) - log y! - sum_k E theta E beta
    lse = special.logsumexp(el_th[:, None, :] + el_be[None, :, :], axis=2)  # (I, J)
    lik = np.sum(y * lse - special.gammaln(y + 1.0) - e_th @ e_be.T)

    def prior(shape, e_log_rate, e_rate, e_log_x, e_x):
        return np.sum(shape * e_log_rate - special.gammaln(shape) + (shape - 1) * e_log_x - e_rate * e_x)

    def entropy(shape, rate):
        return np.sum(stats.gamma(shape, scale=1.0 / rate).entropy())

    h = hyper
    total = lik
    total += prior(h.a_prime, np.log(h.a_prime / h.b_prime), h.a_prime / h.b_prime, el_xi, e_xi)
    total += prior(h.a, el_xi[:, None], e_xi[:, None], el_th, e_th)
    total += prior(h.c_prime, np.log(h.c_prime / h.d_prime), h.c_prime / h.d_prime, el_et, e_et)
    total += prior(h.c, el_et[:, None], e_et[:, None], el_be, e_be)
    total += entropy(s.gamma_shape, s.gamma_rate) + entropy(s.kappa_shape, s.kappa_rate)
    total += entropy(s.lambda_shape, s.lambda_rate) + entropy(s.tau_shape, s.tau_rate)
    return float(total)


def monte_carlo_elbo(state, y: np.ndarray, hyper, n_draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Monte Carlo estimate of the ELBO from the NumPyro model's own log density.

    The ELBO of the z-augmented model with the optimal phi equals
    E_q[log p(y, theta, beta, xi, eta) - log q(theta, beta, xi, eta) - sum_ui y_ui KL(phi_ui || pi_ui)],
    pi_uik = theta_uk beta_ik / theta_u . beta_i, because p(z | y, theta, beta) = Mult(y, pi). log p is
    `ppl_models.hpf.model`'s log density (NumPyro), log q uses scipy; so this ties the solver's ELBO to the
    generative program.

    Parameters
    ----------
    state, y, hyper
        As in `dense_elbo`; ``y`` is passed to the model as float64.
    n_draws : int, default 2000
        Draws from q.
    seed : int, default 0
        ``numpy.random.default_rng(seed)`` of the draws.

    Returns
    -------
    tuple of (float, float)
        The estimate and its standard error (sd / sqrt(n_draws)).

    Raises
    ------
    None of its own.

    Source: project addition (ties the CAVI ELBO of 001_30a2018ec18c20b9.txt, batch algorithm figure, to
    `ppl_models.hpf.model`).
    """
    s = _np_state(state)
    rng = np.random.default_rng(seed)
    y = np.asarray(y, dtype=np.float64)
    k = s.gamma_shape.shape[1]
    el_th = special.digamma(s.gamma_shape) - np.log(s.gamma_rate)
    el_be = special.digamma(s.lambda_shape) - np.log(s.lambda_rate)
    logits = el_th[:, None, :] + el_be[None, :, :]
    log_phi = logits - special.logsumexp(logits, axis=2, keepdims=True)
    phi = np.exp(log_phi)
    values = np.empty(n_draws)
    with jax.enable_x64(True):
        for t in range(n_draws):
            draw = {
                "theta": rng.gamma(s.gamma_shape, 1.0 / s.gamma_rate),
                "xi": rng.gamma(s.kappa_shape, 1.0 / s.kappa_rate),
                "beta": rng.gamma(s.lambda_shape, 1.0 / s.lambda_rate),
                "eta": rng.gamma(s.tau_shape, 1.0 / s.tau_rate),
            }
            log_p, _ = log_density(ppl.model, (jnp.asarray(y), k, hyper), {}, draw)
            log_q = sum(
                stats.gamma.logpdf(draw[n], sh, scale=1.0 / rt).sum()
                for n, sh, rt in (
                    ("theta", s.gamma_shape, s.gamma_rate),
                    ("xi", s.kappa_shape, s.kappa_rate),
                    ("beta", s.lambda_shape, s.lambda_rate),
                    ("eta", s.tau_shape, s.tau_rate),
                )
            )
            log_pi = np.log(draw["theta"][:, None, :] * draw["beta"][None, :, :])
            log_pi -= special.logsumexp(log_pi, axis=2, keepdims=True)
            kl = np.sum(phi * (log_phi - log_pi), axis=2)
            values[t] = float(log_p) - log_q - np.sum(y * kl)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(n_draws))


# ------------------------------------------------------------------------------
# update level


def _warm_state(data: Observations, hyper, n_components: int, seed: int, sweeps: int):
    state = cavi.init(jax.random.PRNGKey(seed), data, n_components, hyper)
    for _ in range(sweeps):
        state, _ = cavi.step(None, state, data, hyper)
    return state


def update_checks(
    data: Observations, hyper, n_components: int, *, seed: int = 0, sweeps: int = 3, blocks=None
) -> pd.DataFrame:
    """Stationarity of every CAVI block by ``jax.grad`` of the ELBO, in float64.

    From a state after ``sweeps`` sweeps (not a fixed point), apply phi, gamma, kappa, lambda, tau in the solver's
    order; after each, the gradient of `custom_inference.hpf.elbo` (with phi held fixed, except for the phi block,
    whose gradient is taken in the softmax logits) with respect to that block must vanish
    (`validation.checks.updates.stationarity`).

    Parameters
    ----------
    data : custom_inference.data.Observations
        N counts (I, J), converted to float64.
    hyper : ppl_models.hpf.HPFHyper
        The hyperparameters.
    n_components : int
        K.
    seed : int, keyword-only, default 0
        ``PRNGKey(seed)`` of `custom_inference.hpf.init`.
    sweeps : int, keyword-only, default 3
        Sweeps run before the check.
    blocks : sequence of (str, callable, tuple of str) or None, keyword-only, default None
        (name, update, fields) replacing the solver's `custom_inference.hpf.BLOCKS`; this is how the errata table
        runs the printed updates through the same check.

    Returns
    -------
    pandas.DataFrame
        One row per block (phi first): block, grad_before, grad_after, passed.

    Raises
    ------
    None of its own.

    Source: 001_30a2018ec18c20b9.txt, batch algorithm figure (the updates checked); the check is a project addition
    (validation level 1).
    """
    blocks = cavi.BLOCKS if blocks is None else blocks
    with jax.enable_x64(True):
        data = jax.tree_util.tree_map(jnp.asarray, data.astype(np.float64))
        state = _warm_state(data, hyper, n_components, seed, sweeps)
        rows = []
        logits = cavi._phi_logits(state, data)
        # phi block: d ELBO / d logits at the optimal phi (softmax is invariant to shifts,
        # so the stationary point is any logits giving the optimal phi).
        stale = jnp.zeros_like(logits)
        res = updates.stationarity(
            lambda p: cavi.elbo(state, data, hyper, jax.nn.softmax(p["logits"], axis=1)),
            {"logits": stale},
            {"logits": logits},
            ["logits"],
            block="phi",
        )
        rows.append(res)
        phi = jax.nn.softmax(logits, axis=1)
        objective = lambda st: cavi.elbo(st, data, hyper, phi)  # noqa: E731
        for name, update, fields in blocks:
            new = update(state, data, hyper, phi)
            rows.append(updates.stationarity(objective, state, new, fields, block=name))
            state = new
    return pd.DataFrame(
        [{"block": r.block, "grad_before": r.grad_before, "grad_after": r.grad_after, "passed": r.passed} for r in rows]
    )


def dense_twin_checks(y: np.ndarray, hyper, n_components: int, *, seed: int = 0, sweeps: int = 3) -> pd.DataFrame:
    """Sparse (nonzeros-only) computations against their dense brute-force twins.

    Rows: the ELBO (`custom_inference.hpf.elbo` vs `dense_elbo`), and one full sweep's new gamma/lambda shapes and
    rates and kappa rates vs the same quantities computed with dense (I, J, K) arrays of y * phi and the full
    E[theta] / E[beta] sums.

    Parameters
    ----------
    y : numpy.ndarray, shape (I, J)
        Counts, taken as float64.
    hyper : ppl_models.hpf.HPFHyper
        The hyperparameters.
    n_components : int
        K.
    seed : int, keyword-only, default 0
        ``PRNGKey(seed)`` of `custom_inference.hpf.init`.
    sweeps : int, keyword-only, default 3
        Sweeps run before the comparison.

    Returns
    -------
    pandas.DataFrame
        Six rows (elbo, gamma_shape, gamma_rate, kappa_rate, lambda_shape, lambda_rate): quantity, max_rel_diff.

    Raises
    ------
    ValueError
        ``y`` is not a 2-D non-negative integer matrix with a nonzero entry (`Observations.from_dense`).

    Source: project addition (validation level 1), on the updates of 001_30a2018ec18c20b9.txt, batch algorithm
    figure.
    """
    y = np.asarray(y, dtype=np.float64)
    data = Observations.from_dense(y)
    with jax.enable_x64(True):
        data = jax.tree_util.tree_map(jnp.asarray, data)
        state = _warm_state(data, hyper, n_components, seed, sweeps)
        rows = [{"quantity": "elbo", "max_rel_diff": updates.max_relative_difference(cavi.elbo(state, data, hyper), dense_elbo(state, y, hyper))}]
        new, _ = cavi.step(None, state, data, hyper)
    s = _np_state(state)
    el_th = special.digamma(s.gamma_shape) - np.log(s.gamma_rate)
    el_be = special.digamma(s.lambda_shape) - np.log(s.lambda_rate)
    logits = el_th[:, None, :] + el_be[None, :, :]
    yphi = y[:, :, None] * special.softmax(logits, axis=2)  # (I, J, K), zero where y = 0
    gamma_shape = hyper.a + yphi.sum(axis=1)
    gamma_rate = (s.kappa_shape / s.kappa_rate)[:, None] + np.ones_like(y) @ (s.lambda_shape / s.lambda_rate)
    kappa_rate = hyper.a_prime / hyper.b_prime + (gamma_shape / gamma_rate).sum(axis=1)
    lambda_shape = hyper.c + yphi.sum(axis=0)
    lambda_rate = (s.tau_shape / s.tau_rate)[:, None] + np.ones_like(y).T @ (gamma_shape / gamma_rate)
    for name, dense in (
        ("gamma_shape", gamma_shape),
        ("gamma_rate", gamma_rate),
        ("kappa_rate", kappa_rate),
        ("lambda_shape", lambda_shape),
        ("lambda_rate", lambda_rate),
    ):
        rows.append({"quantity": name, "max_rel_diff": updates.max_relative_difference(getattr(new, name), dense)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------
# posterior level


@dataclass(frozen=True)
class CrosscheckConfig:
    """What the cross-check fits. ``hyper`` is used both to simulate and to fit.

    The embedded default simulates 60 x 40 with K = 3 from the prior with a = c = 0.5, a' = c' = 2, b' = d' = 1.
    The paper's defaults (a' = c' = 0.3) put so much prior mass on activities near zero that prior draws reach
    counts of 1e8, which no real data set looks like; a' = c' = 2 keeps E[xi] = b' = 1 with light tails.

    Parameters
    ----------
    n_users, n_items : int, default 60, 40
        I and J of the simulated matrix.
    n_components : int, default 3
        K.
    hyper : ppl_models.hpf.HPFHyper, default HPFHyper(a=0.5, a_prime=2, b_prime=1, c=0.5, c_prime=2, d_prime=1)
        The hyperparameters of the simulation and of every fit.
    seed : int, default 1
        Seed of NUTS and CAVI (restart r uses ``seed + 100 r``), and of the simulation unless ``data_seed``.
    num_chains, num_warmup, num_samples : int, default 4, 1000, 1500
        NUTS chains, warm-up and kept draws per chain.
    vi_restarts : int, default 4
        CAVI runs from different seeds; the highest final ELBO is kept.
    cavi_max_iter : int, default 5000
        CAVI sweeps at most.
    cavi_tol : float, default 1e-9
        CAVI's relative-ELBO tolerance.
    n_vi_draws : int, default 4000
        Draws from q stored with each CAVI fit.
    data_seed : int or None, default None
        Key of the simulation; None: ``seed``.

    Raises
    ------
    None of its own (a frozen dataclass; nothing is checked).

    Source: project addition (validation level 2).
    """

    n_users: int = 60
    n_items: int = 40
    n_components: int = 3
    hyper: ppl.HPFHyper = ppl.HPFHyper(a=0.5, a_prime=2.0, b_prime=1.0, c=0.5, c_prime=2.0, d_prime=1.0)
    seed: int = 1
    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 1500
    vi_restarts: int = 4
    cavi_max_iter: int = 5000
    cavi_tol: float = 1e-9
    n_vi_draws: int = 4000
    data_seed: int | None = None  # key of the simulation (default ``seed``, which also seeds NUTS and CAVI)


CROSSCHECK_DEFAULT = CrosscheckConfig()
# the default test suite's problem: 20 x 15, K = 2 (its NUTS reference "hpf-small" is stored too)
CROSSCHECK_SMALL = CrosscheckConfig(n_users=20, n_items=15, n_components=2, num_warmup=500, num_samples=1000,
                                    vi_restarts=2, seed=3)
# the bridge tests' problem (CustomGibbs blocks beside NUTS, Gibbs vs NUTS): 12 x 10, K = 2, data key 3,
# NUTS seed 0 (its reference "hpf-bridge" is stored)
CROSSCHECK_BRIDGE = CrosscheckConfig(n_users=12, n_items=10, n_components=2, num_warmup=500, num_samples=1000,
                                     seed=0, data_seed=3)


def identifiable_quantities(idata) -> dict[str, np.ndarray]:
    """The quantities that are compared across methods, each (chain, draw, Q).

    Raw theta and beta are not identified (permutation, scale) and are never compared.

    Parameters
    ----------
    idata : arviz.InferenceData
        With theta (chain, draw, I, K), beta (chain, draw, J, K), xi (chain, draw, I), eta (chain, draw, J) in its
        posterior.

    Returns
    -------
    dict of str to numpy.ndarray
        In the draws' float dtype: ``rate`` (chain, draw, I J), every expected rate theta_u . beta_i, row-major;
        ``xi`` (chain, draw, I); ``eta`` (chain, draw, J).

    Raises
    ------
    ValueError
        ``idata`` has no posterior group.
    KeyError
        One of the four variables is missing.

    Source: project addition (validation level 2).
    """
    post = arviz_io.group_arrays(idata)
    rates = np.einsum("cduk,cdik->cdui", post["theta"], post["beta"])
    c, d = rates.shape[:2]
    return {"rate": rates.reshape(c, d, -1), "xi": post["xi"], "eta": post["eta"]}


def simulated_data(config: CrosscheckConfig = CROSSCHECK_DEFAULT) -> np.ndarray:
    """The cross-check's count matrix, simulated from the HPF prior.

    `ppl_models.hpf.simulate` with key ``config.data_seed`` (None: ``config.seed``), in float64.

    Parameters
    ----------
    config : CrosscheckConfig, default CROSSCHECK_DEFAULT
        Sizes, K, hyperparameters and seeds.

    Returns
    -------
    numpy.ndarray, shape (n_users, n_items), float64
        The counts.

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    seed = config.seed if config.data_seed is None else config.data_seed
    with jax.enable_x64(True):
        _, y = ppl.simulate(jax.random.PRNGKey(seed), config.n_users, config.n_items, config.n_components,
                            config.hyper)
    return np.asarray(y, dtype=np.float64)


def nuts_reference(config: CrosscheckConfig = CROSSCHECK_DEFAULT, *, y: np.ndarray | None = None,
                   reference: str | None = None, progress: bool = False):
    """The NUTS reference "hpf" of an HPF cross-check.

    Stored when one matches ``y``, the hyperparameters, K and the NUTS settings, else a fresh run of
    `run_nuts_reference`. Compared quantities: `identifiable_quantities`.

    Parameters
    ----------
    config : CrosscheckConfig, default CROSSCHECK_DEFAULT
        The problem and NUTS settings.
    y : numpy.ndarray or None, keyword-only, default None
        Counts (I, J), taken as float64; None: `simulated_data`.
    reference : {None, "stored", "rerun"}, keyword-only, default None
        None: the stored reference when it matches, else a fresh run; "stored": the stored one or an error;
        "rerun": a fresh run (`validation.checks.references.nuts_reference`).
    progress : bool, keyword-only, default False
        Show NUTS's progress bar.

    Returns
    -------
    validation.checks.references.Reference
        The reference's draws of the identifiable quantities, gates and settings.

    Raises
    ------
    ValueError
        ``reference`` is not None, "stored" or "rerun", or is "stored" and no stored reference matches.

    Source: project addition.
    """
    y = simulated_data(config) if y is None else np.asarray(y, dtype=np.float64)
    settings = xc.NutsSettings.of(config)
    key = xc.problem_key((y,), (config.n_components, config.hyper), settings)
    return xc.nuts_reference("hpf", key, settings, lambda: run_nuts_reference(y, config, progress=progress),
                             identifiable_quantities, reference=reference)


def run_crosscheck(config: CrosscheckConfig = CROSSCHECK_DEFAULT, *, y: np.ndarray | None = None,
                   progress: bool = True, reference: str | None = None) -> xc.CrosscheckResult:
    """CAVI against NUTS on a small dense count matrix ``y`` (I, J), ArviZ-gated.

    CAVI runs ``vi_restarts`` times from different seeds and keeps the highest ELBO (coordinate ascent finds local
    optima). Compared: the expected rate of every cell, xi_u and eta_i (`identifiable_quantities`). Verdict from
    `validation.checks.crosscheck.vi_crosscheck`.

    Parameters
    ----------
    config : CrosscheckConfig, default CROSSCHECK_DEFAULT
        Sizes, hyperparameters and run settings.
    y : numpy.ndarray or None, keyword-only, default None
        Counts (I, J), taken as float64; None: `simulated_data` (the embedded problem, whose NUTS reference is
        stored).
    progress : bool, keyword-only, default True
        Show NUTS's progress bar.
    reference : {None, "stored", "rerun"}, keyword-only, default None
        As in `nuts_reference`.

    Returns
    -------
    validation.checks.crosscheck.CrosscheckResult
        Method "vi"; its ``extra`` holds ``y``, the kept run's ``elbo`` trace, the stationarity checks
        ``update_table`` (`update_checks`) and ``dense_table`` (`dense_twin_checks`), and the k-hat.

    Raises
    ------
    ValueError
        A bad ``reference``, or "stored" with no matching stored reference; a ``y`` that is not a 2-D non-negative
        integer matrix with a nonzero entry (`Observations.from_dense`).

    Source: project addition (validation level 2).
    """
    import time

    y = simulated_data(config) if y is None else np.asarray(y, dtype=np.float64)
    data = Observations.from_dense(y)
    k = config.n_components
    start = time.perf_counter()
    fits = [
        cavi.fit(
            config.seed + 100 * r, data, k, config.hyper, max_iter=config.cavi_max_iter,
            tol=config.cavi_tol, n_draws=config.n_vi_draws, progress=False,
        ).idata
        for r in range(config.vi_restarts)
    ]
    cavi_seconds = time.perf_counter() - start
    best, elbos = xc.best_restart(fits, [f.vi_trace.elbo.values[-1] for f in fits])
    ref = nuts_reference(config, y=y, reference=reference, progress=progress)
    solver_line = (
        f"best of {config.vi_restarts} restarts by ELBO (final ELBOs: "
        + ", ".join(f"{e:.2f}" for e in elbos)
        + f"), tol {config.cavi_tol:g}, {cavi_seconds:.1f} s in all; {config.n_vi_draws} draws from q"
    )
    return xc.vi_crosscheck(
        model="hpf", solver="HPF CAVI (q)", ref=ref, solver_quantities=identifiable_quantities(best),
        solver_seconds=cavi_seconds, config=config, settings={**crosscheck_settings(y, config), "CAVI": solver_line},
        extra={"y": y, "elbo": np.asarray(best.vi_trace.elbo.values),
               "update_table": update_checks(data, config.hyper, k, seed=config.seed),
               "dense_table": dense_twin_checks(y, config.hyper, k, seed=config.seed)},
        solver_idata=best, khat_problem=khat_problem(cavi.state_from_inference_data(best), y, config.hyper),
    )


def _q_sample(s, seed: int, n: int) -> vi_evidence.QSample:
    """n draws from q (float64 state ``s``) on the program's sites theta, xi, beta, eta, with log q."""
    rng = np.random.default_rng(seed)
    sites, log_q = {}, np.zeros(n)
    for name, shape, rate in (("theta", s.gamma_shape, s.gamma_rate), ("xi", s.kappa_shape, s.kappa_rate),
                              ("beta", s.lambda_shape, s.lambda_rate), ("eta", s.tau_shape, s.tau_rate)):
        x = rng.standard_gamma(shape, size=(n, *shape.shape)) / rate
        sites[name] = x
        log_q += stats.gamma.logpdf(x, shape, scale=1.0 / rate).reshape(n, -1).sum(axis=1)
    return vi_evidence.QSample(sites, log_q)


def khat_problem(state, y: np.ndarray, hyper) -> vi_evidence.KhatProblem:
    """The k-hat problem of an HPF CAVI fit: q(theta, xi, beta, eta) against `ppl_models.hpf.model` on ``y``.

    q is the product of independent Gammas with the state's shapes and rates. The program is Poisson in y with z
    marginalised; q's factor q(z) (the multinomial phi) is not a density on the program's space and drops out: the
    k-hat is that of the product of Gammas on all I K + J K + I + J positive latent scalars against
    p(theta, xi, beta, eta | y) (same coordinates, no Jacobian). Functionals (for the function-specific k-hats): the
    cross-check's identified quantities, every rate theta_u . beta_i (I J), xi (I) and eta (J).

    Parameters
    ----------
    state : custom_inference.hpf.HPFState
        The fit's variational parameters (taken as float64).
    y : numpy.ndarray, shape (I, J)
        Dense counts, taken as float64.
    hyper : ppl_models.hpf.HPFHyper
        The hyperparameters of the program.

    Returns
    -------
    validation.checks.vi_evidence.KhatProblem
        draw (seed, n -> `QSample`), log_joint, space (which latent variables, in words), functionals.

    Raises
    ------
    None of its own.

    Source: project addition (PSIS k-hat, Yao et al. 2018, sec. 3) on the model of 001_30a2018ec18c20b9.txt.
    """
    s = _np_state(state)
    K = s.gamma_shape.shape[1]
    draw = functools.partial(_q_sample, s)
    log_joint = vi_evidence.numpyro_log_joint(ppl.model, (jnp.asarray(np.asarray(y, np.float64)), K, hyper))

    def functionals(sites: dict) -> dict:  # `identifiable_quantities` on draws (S, ...): rate (S, I J), xi, eta
        return {"rate": np.einsum("suk,sik->sui", sites["theta"], sites["beta"]).reshape(len(sites["xi"]), -1),
                "xi": sites["xi"], "eta": sites["eta"]}

    return vi_evidence.KhatProblem(draw, log_joint, f"q(theta, xi, beta, eta) (all {s.gamma_shape.size + s.lambda_shape.size + s.kappa_shape.size + s.tau_shape.size} "
                                                    "latent scalars of the program; q(z) marginalised with the program's z)",
                                   functionals)


def vsbc_adapters(solver: str = "cavi", config=None):
    """``(simulate, fit, functionals, description)`` of HPF CAVI's VSBC (`validation.checks.vi_evidence.run_vsbc`).

    Simulation and functionals are those of HPF's SBC (`validation.models.hpf_gibbs.sbc_adapters`, its
    ``SBCConfig``: 10 x 8, K = 2; log xi_u and log eta_i of the first three users and items, three expected rates
    theta_u . beta_i and the log of the total rate). The fit is CAVI (tol 1e-8, at most ``cavi_max_iter`` sweeps,
    ``n_q_draws`` draws from q) on *every* cell of the matrix, zeros kept as explicit entries: a zero count adds
    y phi = 0 to the sums and its rate to the sum over all cells that the solver adds anyway, so the fixed point is
    the same as on the nonzeros, and the fixed number of entries compiles the sweep once for all simulations.

    Parameters
    ----------
    solver : str, default "cavi"
        The solver; only "cavi".
    config : validation.models.hpf_gibbs.SBCConfig or None, default None
        Sizes, hyperparameters, ``cavi_max_iter`` and ``n_q_draws``; None: ``SBCConfig()``.

    Returns
    -------
    tuple
        (simulate, fit, functionals, description): ``fit(y, seed)`` returns dict site -> float64 draws from q
        (``n_q_draws``, ...) of theta, xi, beta, eta; description is one line of the settings.

    Raises
    ------
    ValueError
        Another ``solver`` than "cavi".

    Source: project addition (VSBC, Yao et al. 2018, sec. 4) on the model of 001_30a2018ec18c20b9.txt.
    """
    from validation.models import hpf_gibbs

    if solver != "cavi":
        raise ValueError(f"HPF's VSBC runs the CAVI solver only, got {solver!r}")
    c = hpf_gibbs.SBCConfig() if config is None else config
    simulate, _, functionals = hpf_gibbs.sbc_adapters("cavi", c)

    def fit(y, seed: int):
        I, J = y.shape
        rows, cols = (a.ravel() for a in np.meshgrid(np.arange(I), np.arange(J), indexing="ij"))
        data = Observations.from_coo(rows, cols, np.asarray(y, np.float64).ravel(), shape=(I, J), drop_zeros=False)
        state = cavi.fit(seed, data, c.n_components, c.hyper, max_iter=c.cavi_max_iter, tol=1e-8, n_draws=0,
                         progress=False).state
        return _q_sample(_np_state(state), seed, c.n_q_draws).sites

    text = (f"HPF CAVI, {c.n_users} x {c.n_items}, K = {c.n_components}, hyper {tuple(c.hyper)}; tol 1e-8; "
            f"{c.n_q_draws} draws from q")
    return simulate, fit, functionals, text


def crosscheck_settings(y: np.ndarray, config: CrosscheckConfig) -> dict[str, str]:
    """The data and hyperparameter lines of an HPF cross-check's ``settings`` (the NUTS line comes from the reference).

    Parameters
    ----------
    y : numpy.ndarray, shape (I, J)
        Counts.
    config : CrosscheckConfig
        K and the hyperparameters.

    Returns
    -------
    dict of str to str
        "data" (shape, nonzeros, total count, K) and "hyperparameters".

    Raises
    ------
    None of its own.

    Source: project addition.
    """
    return {
        "data": f"matrix {y.shape[0]} x {y.shape[1]}, {int((y > 0).sum())} nonzeros, total count {int(y.sum())}; "
                f"K = {config.n_components}",
        "hyperparameters": str(dict(config.hyper._asdict())),
    }


def run_nuts_reference(y: np.ndarray, config: CrosscheckConfig, *, progress: bool = True) -> xc.NutsRun:
    """The NUTS run of a cross-check: the program `ppl_models.hpf.model` on dense ``y``.

    Parameters
    ----------
    y : numpy.ndarray, shape (I, J), float64
        Counts.
    config : CrosscheckConfig
        K, hyperparameters, seed and the NUTS settings.
    progress : bool, keyword-only, default True
        Show NUTS's progress bar.

    Returns
    -------
    validation.checks.crosscheck.NutsRun
        The NUTS draws and their diagnostics.

    Raises
    ------
    None of its own.

    Source: project addition (validation level 2).
    """
    return xc.run_nuts(
        ppl.model, jnp.asarray(y), config.n_components, config.hyper,
        seed=config.seed, num_chains=config.num_chains, num_warmup=config.num_warmup,
        num_samples=config.num_samples, progress=progress,
    )


# ------------------------------------------------------------------------------
# errata of seed 001, CAVI (run by `validation.checks.errata.run_errata`; the complete conditionals'
# rows are `validation.models.hpf_gibbs.ERRATA`)
#
# "stationarity": the update, applied inside a CAVI sweep on a small simulated data set, must
# leave zero gradient of the ELBO in its block (``jax.grad``). Hyperparameters are distinct
# (a != a' != c ...) so that a swapped symbol shows.

# distinct hyperparameters of the errata checks, so that every swapped symbol changes the result
ERRATA_HYPER = ppl.HPFHyper(a=0.4, a_prime=1.7, b_prime=0.6, c=0.8, c_prime=1.3, d_prime=2.5)
_STATIONARITY_RTOL = 1e-7


@functools.lru_cache(maxsize=None)
def _small_data(seed: int = 0):
    with jax.enable_x64(True):
        _, y = ppl.simulate(jax.random.PRNGKey(seed), 10, 8, 3, ERRATA_HYPER)
    return Observations.from_dense(np.asarray(y))


def _stationarity_check(block: str, printed_update) -> Callable[[str], tuple[bool, float]]:
    """Run the HPF block sequence with the named block replaced by the printed form."""

    def check(form: str):
        blocks = []
        for name, update, fields in cavi.BLOCKS:
            if name == block:
                blocks.append((name, printed_update if form == "printed" else update, fields))
        table = update_checks(_small_data(), ERRATA_HYPER, 3, blocks=blocks)
        row = table[table.block == block].iloc[0]
        return bool(row.passed), float(row.grad_after)

    return check


# -- printed forms (seed 001, batch algorithm figure and text) ---------------------


def _printed_shape(field: str, first: str, second: str):
    """Figure's initialisation ``field = first + K second`` (kappa: a + K a'; tau: c + K c')."""

    def update(state, data, hyper, phi=None):
        k = state.gamma_shape.shape[1]
        value = getattr(hyper, first) + k * getattr(hyper, second)
        return state._replace(**{field: jnp.full_like(getattr(state, field), value)})

    return update


def _printed_rate(field: str, correct_update: str, prior_rate: str, shape: str, rate: str):
    """Figure's step ``field = prior_rate + sum_k (digamma(shape) - log rate)`` (shape update kept correct):
    kappa_rate = b' + sum_k E[log theta_uk], tau_rate = d' + sum_k E[log beta_ik]."""

    def update(state, data, hyper, phi=None):
        new = getattr(cavi, correct_update)(state, data, hyper, phi)
        value = getattr(hyper, prior_rate) + gamma_log_mean(getattr(state, shape), getattr(state, rate)).sum(axis=1)
        return new._replace(**{field: value})

    return update


_printed_kappa_shape = _printed_shape("kappa_shape", "a", "a_prime")
_printed_kappa_rate = _printed_rate("kappa_rate", "update_kappa", "b_prime", "gamma_shape", "gamma_rate")
_printed_tau_shape = _printed_shape("tau_shape", "c", "c_prime")
_printed_tau_rate = _printed_rate("tau_rate", "update_tau", "d_prime", "lambda_shape", "lambda_rate")


def _printed_gamma_text(state, data, hyper, phi):
    # text update: gamma_uk = <a + sum_i y phi, b + sum_i E beta_ik>, a fixed rate b (the
    # non-hierarchical model's) in place of E[xi_u]; b read as the prior mean b'.
    new = cavi.update_gamma(state, data, hyper, phi)
    beta_sum = gamma_mean(state.lambda_shape, state.lambda_rate).sum(axis=0)
    return new._replace(gamma_rate=jnp.broadcast_to(hyper.b_prime + beta_sum, new.gamma_rate.shape))


SEED001 = "001_30a2018ec18c20b9.txt"

ERRATA: tuple[Erratum, ...] = (
    Erratum(
        SEED001, "batch algorithm figure, initialisation",
        "kappa_u^shp = a + K a'",
        "kappa_u^shp = a' + K a",
        "xi_u has prior shape a' and appears as the rate of K Gamma(a, xi_u) weights, each adding a to the shape.",
        "stationarity", _stationarity_check("kappa", _printed_kappa_shape),
    ),
    Erratum(
        SEED001, "batch algorithm figure, step 2",
        "kappa_u^rte = b' + sum_k (Psi(gamma_uk^shp) - log gamma_uk^rte)",
        "kappa_u^rte = a'/b' + sum_k gamma_uk^shp / gamma_uk^rte",
        "xi_u enters log p(theta_uk | xi_u) through -xi_u theta_uk, so its rate collects E[theta_uk], not E[log theta_uk]; the prior rate is a'/b' in the model used.",
        "stationarity", _stationarity_check("kappa", _printed_kappa_rate),
    ),
    Erratum(
        SEED001, "batch algorithm figure, initialisation",
        "tau_i^shp = c + K c'",
        "tau_i^shp = c' + K c",
        "as for kappa: eta_i has prior shape c' and K Gamma(c, eta_i) children.",
        "stationarity", _stationarity_check("tau", _printed_tau_shape),
    ),
    Erratum(
        SEED001, "batch algorithm figure, step 3",
        "tau_i^rte = d' + sum_k (Psi(lambda_ik^shp) - log lambda_ik^rte)",
        "tau_i^rte = c'/d' + sum_k lambda_ik^shp / lambda_ik^rte",
        "as for kappa: the rate collects E[beta_ik].",
        "stationarity", _stationarity_check("tau", _printed_tau_rate),
    ),
    Erratum(
        SEED001, "text, update of gamma_uk (and lambda_ik)",
        "gamma_uk = <a + sum_i y_ui phi_uik, b + sum_i lambda_ik^shp / lambda_ik^rte>",
        "gamma_uk = <a + sum_i y_ui phi_uik, kappa_u^shp / kappa_u^rte + sum_i lambda_ik^shp / lambda_ik^rte>",
        "in the hierarchical model the rate of theta_uk is xi_u, so the update uses E[xi_u], not a constant b (the figure has it right).",
        "stationarity", _stationarity_check("gamma", _printed_gamma_text),
    ),
)


# ------------------------------------------------------------------------------
# the registry's view of HPF (`validation.checks.registry`)


def real_data_problem(ratings, source: str, config: CrosscheckConfig = CROSSCHECK_DEFAULT):
    """``crosscheck hpf --data``: the dense count matrix of the ``config.n_users`` most active users x
    ``config.n_items`` most popular items of a ratings DataFrame, fitted with the paper's
    hyperparameters. Returns (run_crosscheck kwargs, config, description). Source: project addition."""
    import dataclasses

    from validation.data import datasets

    y, _, _ = datasets.dense_submatrix(ratings, config.n_users, config.n_items)
    config = dataclasses.replace(config, hyper=ppl.HPFHyper())
    return {"y": y}, config, f"{source}: the {config.n_users} most active users x {config.n_items} most popular items"


#: VI evidence measured on this solver (see `validation.models.catalog`: k-hat on its cross-check problem, VSBC
#: with master seed 0, function-specific k-hat); `factorbayes evidence` shows it, the slow tests reproduce it.
MEASURED_CAVI = {"khat": 3.16, "n_latent": 400, "vsbc_sims": 200, "vsbc_passed": True,
                 "vsbc": "pass (200 sims; smallest p 0.055, log eta_1)",
                 "fn_khat": {"n": 2500, "below_0.7": 0, "0.7_to_1": 0, "above_1": 2500, "worst": 3.47,
                     "worst_at": "rate[184]", "best": 3.16, "hr_min": 2.79,
                     "read": "none from q even with PSIS: "
                             "read rates, xi and eta from HPF Gibbs (q's means only within the cross-check's gap)"}}


def score_fn(idata):
    """The HPF ranking score of a CAVI fit, E_q[theta_u] . E_q[beta_i].

    `custom_inference.hpf.score_users` at the state stored in ``idata``.

    Parameters
    ----------
    idata : arviz.InferenceData
        `custom_inference.hpf.fit`'s output (with its ``variational_parameters`` group).

    Returns
    -------
    callable
        ``score_fn(users) -> (B, J)`` scores of every item for ``users`` (B,) int.

    Raises
    ------
    ValueError
        ``idata`` has no ``variational_parameters`` group or it lacks an HPFState field
        (`custom_inference.hpf.state_from_inference_data`).

    Source: ``001_30a2018ec18c20b9.txt`` sec. 2 (scores by the expected rate).
    """
    state = cavi.state_from_inference_data(idata)
    return lambda users: cavi.score_users(state, users)


def counts_runner(run, side: bool):
    """HPF by CAVI on protocol P3 (`validation.evaluation.counts_eval`'s runner contract).

    ``max_iter`` sweeps (``run.settings``, declared in `SPEC`; all run, tol = 0), default hyperparameters, in
    ``dtype``; scores
    E_q[theta_u] . E_q[beta_i] (`score_fn`).

    Parameters
    ----------
    run : validation.evaluation.counts_eval.CountsRun
        The evaluation's config (seed, K, dtype), settings (``max_iter``), split and progress.
    side : bool
        Unused (HPF declares no "counts+side").

    Returns
    -------
    list of dict
        One fit dict (method, score_fn, fit_seconds, seconds_per_iteration, iterations, setting), the counts runner
        contract.

    Raises
    ------
    None of its own; what `custom_inference.hpf.fit` raises (FloatingPointError for a non-finite ELBO) propagates.

    Source: ``001_30a2018ec18c20b9.txt`` (HPF, CAVI); the P3 comparison of ``004_90693a0965f06816.txt`` sec. 5.4.
    """
    cfg, split, n_iter = run.config, run.split, run.settings["max_iter"]
    t0 = time.perf_counter()
    fit = cavi.fit(cfg.seed, split.train, cfg.K, ppl.HPFHyper(), max_iter=n_iter, tol=0.0,
                   dtype=np.dtype(cfg.dtype), n_draws=0, progress=run.progress).idata
    secs = time.perf_counter() - t0
    return [{"method": "HPF (CAVI)", "score_fn": score_fn(fit), "fit_seconds": secs,
             "seconds_per_iteration": secs / n_iter, "iterations": n_iter,
             "setting": "a = a' = c = c' = 0.3, b' = d' = 1; tol 0"}]


SPEC = registry.ModelSpec(
    name="hpf",
    solvers=(
        registry.SolverSpec("cavi", "vi", run_crosscheck, CROSSCHECK_DEFAULT, "hpf",
                            registry.lazy("custom_inference.hpf:ALGORITHM"), frontdoor="hpf",
                            evaluations={"counts": registry.EvaluationEntry(
                                registry.lazy("validation.models.hpf:counts_runner"), defaults={"max_iter": 100},
                                flags={"max_iter": "max_iter"})},
                            **registry.vi_evidence("validation.models.hpf", MEASURED_CAVI)),
        registry.SolverSpec("gibbs", "exact", registry.lazy("validation.models.hpf_gibbs:run_crosscheck"), CROSSCHECK_DEFAULT,
                            "hpf", registry.lazy("custom_inference.hpf_gibbs:ALGORITHM"), frontdoor="hpf-gibbs",
                            absent={"evaluation": "the counts evaluation (validation.evaluation.counts_eval) runs HPF "
                                    "by CAVI, the seed's algorithm; the Gibbs sampler targets the same posterior "
                                    "and is compared with NUTS and CAVI in the cross-checks instead"}),
    ),
    references=(registry.ReferenceSpec("hpf", nuts_reference, CROSSCHECK_DEFAULT),
                registry.ReferenceSpec("hpf-small", nuts_reference, CROSSCHECK_SMALL),
                registry.ReferenceSpec("hpf-bridge", nuts_reference, CROSSCHECK_BRIDGE)),
    checks={"cavi_stationarity": lambda: update_checks(_small_data(), ERRATA_HYPER, 3),
            "gibbs_conditionals": registry.lazy("validation.models.hpf_gibbs:conditional_checks", CROSSCHECK_DEFAULT.hyper)},
    sbc={"gibbs": registry.lazy("validation.models.hpf_gibbs:sbc_adapters", "gibbs"),
         "nuts": registry.lazy("validation.models.hpf_gibbs:nuts_sbc_adapters"),  # takes log_path (the CLI's gates.jsonl)
         **{s: registry.lazy("validation.models.hpf_gibbs:sbc_adapters", s) for s in ("cavi", "gibbs-printed")}},
    sbc_config=registry.lazy("validation.models.hpf_gibbs:SBCConfig"),
    errata=(ERRATA, registry.lazy("validation.models.hpf_gibbs:ERRATA")),
    real_data=real_data_problem,
    bridge=registry.lazy("validation.models.hpf_gibbs:BRIDGE"),
    notebook="notebooks/hpf.py",
)
