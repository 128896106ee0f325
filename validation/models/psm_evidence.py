"""PSM's VI evidence (`validation.checks.vi_evidence`): the k-hat problem of a PSM VB fit.

Kept apart from `validation.models.psm` (at the project's 1000-line limit per module).

Source: project addition (PSIS k-hat, Yao et al. 2018, sec. 3) on ``000_619a0297b9d686b2.txt`` sec. 2-3.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from scipy import stats
from scipy.special import gammaln

from custom_inference import psm
from ppl_models import psm as ppl

from validation.checks import vi_evidence

__all__ = ["q_log_density", "khat_problem", "vsbc_adapters"]


def q_log_density(state, draws: dict) -> np.ndarray:
    """log q of draws from PSM's factorized q.

    Normals for the factors and biases, Dirichlet q(pi) and q(psi) (density on the simplex's first n - 1
    coordinates, as NumPyro's Dirichlet writes it).

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The fitted state (I users, J items, K factors); its moments and Dirichlet concentrations alpha,
        beta are read.
    draws : dict
        `custom_inference.psm.draws_from_q` without its chain axis, float: u (S, I, K), v (S, J, K),
        b_user (S, I), b_item (S, J), pi (S, I), psi (S, J).

    Returns
    -------
    numpy.ndarray, shape (S,), float64
        log q of each draw.

    Raises
    ------
    KeyError
        For a missing draw.

    Source: ``000_619a0297b9d686b2.txt`` eq. (4) (the factorized q).
    """
    (mu, vu), (mv, vv), (mbu, vbu), (mbv, vbv) = (tuple(np.asarray(x, np.float64) for x in p) for p in psm.moments(state))
    logq = stats.norm.logpdf(draws["u"], mu, np.sqrt(vu)).sum(axis=(1, 2))
    logq += stats.norm.logpdf(draws["v"], mv, np.sqrt(vv)).sum(axis=(1, 2))
    logq += stats.norm.logpdf(draws["b_user"], mbu, np.sqrt(vbu)).sum(axis=1)
    logq += stats.norm.logpdf(draws["b_item"], mbv, np.sqrt(vbv)).sum(axis=1)
    for name, conc in (("pi", state.alpha), ("psi", state.beta)):
        c = np.asarray(conc, np.float64)
        logq += gammaln(c.sum()) - gammaln(c).sum() + np.log(np.asarray(draws[name], np.float64)) @ (c - 1.0)
    return logq


def khat_problem(state, obs, hyper) -> vi_evidence.KhatProblem:
    """The k-hat problem of a PSM VB fit: q(u, v, b, pi, psi) against `ppl_models.psm.model`.

    The program sums out the censored events' identities; q's factors over them (the tied s and t) and the
    Jaakkola-Jordan xi only shape the bound, so the k-hat is of q's marginal on the program's latent sites
    (all I K + J K + 2 I + 2 J scalars, pi and psi on their simplexes) against the exact posterior
    p(u, v, b, pi, psi | D, D'). Functionals (function-specific k-hats): the cross-check's
    `validation.models.psm.identifiable_quantities` (acceptance and predictive of every pair, pi, psi).

    Parameters
    ----------
    state : custom_inference.psm.PSMState
        The fitted state (I users, J items, K factors); D' is its ``d_prime``.
    obs : custom_inference.data.Observations
        The observed pair counts, (I, J), float64 values.
    hyper : ppl_models.psm.PSMHyper
        The program's hyperparameters.

    Returns
    -------
    validation.checks.vi_evidence.KhatProblem
        draw(seed, n) -> QSample (draws and their `q_log_density`), the program's log joint (NumPyro),
        a description and the functionals.

    Raises
    ------
    None of its own.

    Source: project addition (PSIS k-hat, Yao et al. 2018, sec. 3) on ``000_619a0297b9d686b2.txt`` eq. (2)
    (the joint) and eq. (4) (q).
    """
    I, J = obs.shape
    rows, cols, counts = np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values, np.float64)

    def draw(seed: int, n: int) -> vi_evidence.QSample:
        d = {k: np.asarray(v[0], np.float64) for k, v in psm.draws_from_q(seed, state, n).items()}
        return vi_evidence.QSample(d, q_log_density(state, d))

    K = psm.moments(state)[0][0].shape[-1]
    args = (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(counts), I, J, K, float(state.d_prime), hyper)
    def functionals(sites: dict) -> dict:  # the cross-check's quantities (imported here: psm imports this module)
        from validation.models.psm import identifiable_quantities

        return {g: a[0] for g, a in identifiable_quantities({k: v[None] for k, v in sites.items()}).items()}

    return vi_evidence.KhatProblem(draw, vi_evidence.numpyro_log_joint(ppl.model, args),
                                   f"q(u, v, b, pi, psi) (all {(I + J) * K + 2 * (I + J)} latent scalars of the program; "
                                   "censored identities summed out in both)", functionals)


def vsbc_adapters(solver: str = "vb", n_users: int = 8, n_items: int = 6, K: int = 2, n_events: int = 200,
                  hyper=ppl.PSMHyper(), n_q_draws: int = 400):
    """``(simulate, fit, functionals, description)`` of PSM VB's VSBC (`validation.checks.vi_evidence.run_vsbc`).

    ``simulate(seed)``: a stream from the prior predictive (`validation.models.psm.small_problem`),
    returned as the truth (pi, psi, u, v, b) and the data (the pair counts and r = D'/D); ``fit(data,
    seed)``: Algorithm 1 (float64, tol 1e-10, at most 5000 sweeps, ``init_scale`` 0.5, r the realised D'/D)
    and ``n_q_draws`` draws from q. Functionals: pi_0, pi_1, psi_0, psi_1 and the predictive
    p(j | i, o = T) = psi_j sigma(a_ij) / sum_j' psi_j' sigma(a_ij') of the pairs (0, 0), (1, 2), (2, 1)
    (eq. 5). The number of distinct observed pairs varies between simulations, so the sweep compiles once
    per count (cached within the process).

    Parameters
    ----------
    solver : str, default "vb"
        Only "vb" (Algorithm 1).
    n_users, n_items : int, defaults 8, 6
        I and J of the simulated problems (at least 3 each for the predictive's pairs).
    K : int, default 2
        Latent dimension.
    n_events : int, default 200
        Events D per simulated stream.
    hyper : ppl_models.psm.PSMHyper, default PSMHyper()
        Hyperparameters of simulation and fit (the paper's).
    n_q_draws : int, default 400
        Draws from q per fit.

    Returns
    -------
    tuple
        (simulate callable, fit callable (-> dict of float64 draws (n_q_draws, ...)), functionals dict
        name -> callable(draw dict) -> numpy.ndarray, description str).

    Raises
    ------
    ValueError
        For another ``solver`` than "vb".

    Source: project addition (VSBC, Yao et al. 2018, sec. 4) on ``000_619a0297b9d686b2.txt`` sec. 2, eq. (5).
    """
    import jax

    from validation.models.psm import small_problem

    if solver != "vb":
        raise ValueError(f"PSM's VSBC runs Algorithm 1 ('vb'), got {solver!r}")
    pairs = ((0, 0), (1, 2), (2, 1))

    def simulate(seed: int):
        obs, r, truth = small_problem(int(seed), n_users, n_items, K, n_events, hyper)
        return dict(truth), (obs, r)

    def fit(data, seed: int):
        obs, r = data
        with jax.enable_x64(True):
            res = psm.fit(jax.random.PRNGKey(seed), obs, K, hyper, max_iter=5000, tol=1e-10, progress=False, r=r,
                          dtype=np.float64, n_draws=1, init_scale=0.5)
        return {k: np.asarray(v[0], np.float64) for k, v in psm.draws_from_q(seed, res.state, n_q_draws).items()}

    def predictive(p):
        out = []
        for i, j in pairs:
            f = np.asarray(p["psi"]) / (1.0 + np.exp(-(p["v"] @ p["u"][i] + p["b_user"][i] + p["b_item"])))
            out.append(f[j] / f.sum())
        return np.array(out)

    functionals = {"pi": lambda p: np.asarray(p["pi"])[:2], "psi": lambda p: np.asarray(p["psi"])[:2],
                   "predictive": predictive}
    return simulate, fit, functionals, (f"PSM VB: I = {n_users}, J = {n_items}, K = {K}, D = {n_events} "
                                        f"(prior-predictive streams), hyper {tuple(hyper)}; tol 1e-10; "
                                        f"{n_q_draws} draws from q")
