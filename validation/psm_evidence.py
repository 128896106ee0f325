"""PSM's VI evidence (`validation.vi_evidence`): the k-hat problem of a PSM VB fit.

Kept apart from `validation.psm` (at the project's 1000-line limit per module).

Source: project addition (PSIS k-hat, Yao et al. 2018, sec. 3) on ``000_619a0297b9d686b2.txt`` sec. 2-3.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from scipy import stats
from scipy.special import gammaln

from custom_inference import psm
from ppl_models import psm as ppl

from . import vi_evidence

__all__ = ["q_log_density", "khat_problem"]


def q_log_density(state, draws: dict) -> np.ndarray:
    """log q of draws from q (`custom_inference.psm.draws_from_q` without its chain axis: u (S, I, K),
    v (S, J, K), b_user (S, I), b_item (S, J), pi (S, I), psi (S, J)): float64 (S,). Normals for the
    factors and biases, Dirichlet q(pi) and q(psi) (density on the simplex's first n - 1 coordinates,
    as NumPyro's Dirichlet writes it). Raises KeyError for a missing draw.
    Source: ``000_619a0297b9d686b2.txt`` eq. (4) (the factorized q)."""
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
    """The k-hat problem of a PSM VB fit: q(u, v, b, pi, psi) against `ppl_models.psm.model` on the
    observed pair counts ``obs`` (float64 `custom_inference.data.Observations` (I, J)) with D' the
    state's ``d_prime``. The program sums out the censored events' identities; q's factors over them
    (the tied s and t) and the Jaakkola-Jordan xi only shape the bound, so the k-hat is of q's marginal
    on the program's latent sites (all I K + J K + 2 I + 2 J scalars, pi and psi on their simplexes)
    against the exact posterior p(u, v, b, pi, psi | D, D'). Returns a `validation.vi_evidence.KhatProblem`.
    Raises nothing of its own. Source: project addition (PSIS k-hat, Yao et al. 2018, sec. 3) on
    ``000_619a0297b9d686b2.txt`` eq. (2) (the joint) and eq. (4) (q).
    """
    I, J = obs.shape
    rows, cols, counts = np.asarray(obs.rows), np.asarray(obs.cols), np.asarray(obs.values, np.float64)

    def draw(seed: int, n: int) -> vi_evidence.QSample:
        d = {k: np.asarray(v[0], np.float64) for k, v in psm.draws_from_q(seed, state, n).items()}
        return vi_evidence.QSample(d, q_log_density(state, d))

    K = psm.moments(state)[0][0].shape[-1]
    args = (jnp.asarray(rows), jnp.asarray(cols), jnp.asarray(counts), I, J, K, float(state.d_prime), hyper)
    return vi_evidence.KhatProblem(draw, vi_evidence.numpyro_log_joint(ppl.model, args),
                                   f"q(u, v, b, pi, psi) (all {(I + J) * K + 2 * (I + J)} latent scalars of the program; "
                                   "censored identities summed out in both)")
