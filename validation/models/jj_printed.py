"""The Jaakkola-Jordan bounds of PSM, SIBM and RG as printed, by brute force, and the logit moments and
update targets of SIBM and RG against Monte Carlo from q.

- `bound_grid`: each printed bound (000 sec. 3, 002 eq. 6 with its lambda of opposite sign, 003 eq. 11
  for every (g, h)) against the exact log-likelihood on a grid of logits a and parameters xi: it must
  never exceed it and must touch it at a = +-xi. A bound with lambda's sign flipped (the usual slip
  between the two conventions) is the power check.
- `sibm_cells_mc`: SIBM's cell moments mu_ij, s2_ij (text before eq. 5), E_q[a_ij^2] = xi_ij^2 (eq. 8),
  the expected bound alpha_ij (eq. 7) and the batch update targets of q(v_jd) against Monte Carlo from q
  (and E_q of the exact log-likelihood above alpha_ij: the sign of the gap), and eq. (8)'s xi as the
  maximiser of alpha_ij on a grid.
- `rg_targets_mc`: RG's E_q[(u_m.v_n + b_m + b_n)^2] (eq. 16), the user block of eqs. (13)/(15) (diagonal
  precision and the mean through P_m eta_m = c_m), the user-bias block and the Gamma rates of eq. (17)
  against Monte Carlo from q;
- `psm_xi_star_derivative`, `psm_intermediate_bound`: PSM's B.3 derivative of L(xi*) by finite
  differences and eq. (15)'s Hadamard inequality on random positive-definite matrices;
- `rg_marginal_over_h`: RG's eq. (4) from eq. (3) by summing over the "considered" bit h.

Comparison rule: `validation.models.printed_forms` (max |z| <= 5).
Source: ``000_619a0297b9d686b2.txt`` sec. 3; ``002_5408d341cb9fc544.txt`` eqs. (4)-(8);
``003_203f63200c0d7157.txt`` eqs. (11), (13), (15)-(17); checks: project addition (issue 26 item 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from custom_inference import rg, sibm
from ppl_models import rg as rg_ppl
from validation.models import rg as rg_checks
from validation.models import sibm as sibm_checks
from validation.models.printed_forms import Z_MAX, mc_z, x64

__all__ = ["BOUNDS", "bound_grid", "sibm_cells_mc", "rg_targets_mc", "psm_xi_star_derivative", "psm_intermediate_bound",
           "rg_marginal_over_h"]


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _lam(xi):           # 000 sec. 3 and 003 after eq. (11): (sigma(xi) - 1/2) / (2 xi)
    return (np.exp(_log_sigmoid(xi)) - 0.5) / (2.0 * xi)


def _psm_bound(a, xi, y, flip=1.0):
    """000 sec. 3: log sigma(+-a) >= log sigma(xi) - lambda (a^2 - xi^2) +- a/2 - xi/2 (y = 1: +a, 0: -a)."""
    sign = 2 * y - 1
    return _log_sigmoid(xi) - flip * _lam(xi) * (a**2 - xi**2) + sign * a / 2 - xi / 2


def _sibm_bound(a, xi, y, flip=1.0):
    """002 eq. (6): log tau(a, xi) = a x + log sigma(xi) - (a + xi)/2 + lambda'(a^2 - xi^2), lambda' =
    (0.5 - sigma(xi)) / (2 xi) (the opposite sign convention)."""
    lam_p = (0.5 - np.exp(_log_sigmoid(xi))) / (2.0 * xi)
    return a * y + _log_sigmoid(xi) - (a + xi) / 2 + flip * lam_p * (a**2 - xi**2)


def _rg_bound(a, xi, g, h, flip=1.0):
    """003 eq. (11): log l >= g a + (g + h (1 - g)) [log sigma(xi) - (a + xi)/2 - lambda (a^2 - xi^2)]."""
    return g * a + (g + h * (1 - g)) * (_log_sigmoid(xi) - (a + xi) / 2 - flip * _lam(xi) * (a**2 - xi**2))


#: name -> (bound(a, xi, flip), exact log-likelihood(a)) for every case the seeds print
BOUNDS = {
    "000 sec. 3, sigma(a)": (lambda a, xi, f: _psm_bound(a, xi, 1, f), lambda a: _log_sigmoid(a)),
    "000 sec. 3, 1 - sigma(a)": (lambda a, xi, f: _psm_bound(a, xi, 0, f), lambda a: _log_sigmoid(-a)),
    "002 eq. (6), x = 1": (lambda a, xi, f: _sibm_bound(a, xi, 1, f), lambda a: _log_sigmoid(a)),
    "002 eq. (6), x = 0": (lambda a, xi, f: _sibm_bound(a, xi, 0, f), lambda a: _log_sigmoid(-a)),
    "003 eq. (11), g = 1": (lambda a, xi, f: _rg_bound(a, xi, 1, 1, f), lambda a: _log_sigmoid(a)),
    "003 eq. (11), g = 0, h = 1": (lambda a, xi, f: _rg_bound(a, xi, 0, 1, f), lambda a: _log_sigmoid(-a)),
    "003 eq. (11), g = 0, h = 0": (lambda a, xi, f: _rg_bound(a, xi, 0, 0, f), lambda a: 0.0 * a),
}


def bound_grid(*, flip: float = 1.0) -> pd.DataFrame:
    """Every printed Jaakkola-Jordan bound of `BOUNDS` against the exact log-likelihood on a grid.

    The grid is a in [-30, 30] (2401 points) x xi in [0.01, 30] (300 points, log-spaced): the largest
    excess bound - exact (must be <= 1e-12: float64 rounding) and the largest gap |bound - exact| at
    a = +-xi (must be <= 1e-12: the bound is tight there).

    Parameters
    ----------
    flip : float, keyword-only, default 1.0
        Multiplies lambda; -1 flips its sign (the power check: every bound must then fail).

    Returns
    -------
    pandas.DataFrame
        One row per bound: bound (name), max_excess, max_gap_at_xi (float, nats), passed (bool).

    Raises
    ------
    None of its own.

    Source: the seeds' printed bounds: ``000_619a0297b9d686b2.txt`` sec. 3, ``002_5408d341cb9fc544.txt``
    eq. (6), ``003_203f63200c0d7157.txt`` eq. (11); check: project addition.
    """
    a = np.linspace(-30, 30, 2401)[:, None]
    xi = np.geomspace(0.01, 30, 300)[None, :]
    rows = []
    for name, (bound, exact) in BOUNDS.items():
        excess = float(np.max(bound(a, xi, flip) - exact(a)))
        x = xi[0]
        gap = max(float(np.max(np.abs(bound(s * x, x, flip) - exact(s * x)))) for s in (-1.0, 1.0))
        rows.append(dict(bound=name, max_excess=excess, max_gap_at_xi=gap, passed=excess <= 1e-12 and gap <= 1e-12))
    return pd.DataFrame(rows)


@x64
def sibm_cells_mc(*, n_draws: int = 20000, seed: int = 0) -> pd.DataFrame:
    """SIBM's cell moments, printed bound terms and batch update targets against Monte Carlo from q.

    On `validation.models.sibm.small_problem` (8 x 6, D = 2) at its `warm_state`, over all I x J cells:
    mu_ij, s2_ij (text before eq. 5), xi_ij^2 = E_q[a_ij^2] (eq. 8), alpha_ij (eq. 7 as printed), the
    q(v_jd) precision and mean-times-precision targets of one free column, the sign of
    E_q[log p(x | a)] - alpha_ij, and eq. (8)'s xi as the maximiser of alpha_ij on a 3000-point grid.
    Float64 (`x64`).

    Parameters
    ----------
    n_draws : int >= 2, keyword-only, default 20000
        Draws from q (`custom_inference.sibm.draws_from_q`).
    seed : int, keyword-only, default 0
        Seed of the draws.

    Returns
    -------
    pandas.DataFrame
        One row per quantity: quantity, equation, z (max |z|; for the xi grid: grid steps off), passed
        (z <= `Z_MAX`; for "exact above bound" passed means E_q[log p(x | a)] - alpha_ij >= -5 se
        everywhere; for the xi grid, the grid maximiser within one grid step of eq. (8)).

    Raises
    ------
    ValueError
        For ``n_draws`` < 2 (from `mc_z`).

    Source: ``002_5408d341cb9fc544.txt`` text before eq. (5), eqs. (6)-(8); check: project addition.
    """
    X, data = sibm_checks.small_problem(0)
    with jax.enable_x64(True):
        state = sibm_checks.warm_state(data, 2)
        I, J = X.shape
        rows, cols = np.repeat(np.arange(I), J), np.tile(np.arange(J), I)
        mu, s2 = (np.asarray(v, np.float64).reshape(I, J) for v in sibm.cell_moments(state, jnp.asarray(rows), jnp.asarray(cols)))
    d = {k: np.asarray(v[0], np.float64) for k, v in sibm.draws_from_q(seed, state, n_draws).items()}
    a = np.einsum("nik,njk->nij", d["U"], d["V"]) + d["z"][:, None, None]
    xi = np.sqrt(mu**2 + s2)                                             # eq. (8)
    lam_p = (0.5 - np.exp(_log_sigmoid(xi))) / (2 * xi)
    alpha = _log_sigmoid(xi) - (mu * (1 - 2 * X) + xi) / 2 + lam_p * (mu**2 + s2 - xi**2)   # eq. (7) as printed
    exact = np.where(X == 1, _log_sigmoid(a), _log_sigmoid(-a))
    gap = exact - alpha
    gap_z = float(np.min(gap.mean(0) / (gap.std(0, ddof=1) / np.sqrt(n_draws))))
    out = [
        dict(quantity="mu_ij = E_q[a_ij]", equation="text before eq. (5)", z=mc_z(a, mu)),
        dict(quantity="s2_ij = Var_q[a_ij] (as E_q[(a - mu)^2])", equation="text before eq. (5)", z=mc_z((a - mu) ** 2, s2)),
        dict(quantity="xi_ij^2 = E_q[a_ij^2]", equation="eq. (8)", z=mc_z(a**2, xi**2)),
        dict(quantity="alpha_ij = E_q[log tau(a_ij, xi_ij)]", equation="eq. (7)",
             z=mc_z(_sibm_bound(a, xi, X), alpha)),
    ]
    # the batch update of q(v_jd) for one free column d at optimal xi (the maximiser of (7) in v_jd)
    with jax.enable_x64(True):
        d_col = int(np.flatnonzero(np.asarray(state.v_fixed) == 0)[0])
        new = sibm.update_v(state, data, sibm_checks.CHECK_HYPER, columns=[d_col])
    hyp = sibm_checks.CHECK_HYPER
    lam = -(0.5 - np.exp(_log_sigmoid(xi))) / (2 * xi)        # lambda = -lambda' (positive convention)
    u_d, v_d = d["U"][:, :, d_col], d["V"][:, :, d_col]
    p_draw = 1.0 / hyp.v_tilde0 + 2.0 * np.einsum("ij,ni->nj", lam, u_d**2)
    rest = a - u_d[:, :, None] * v_d[:, None, :]               # the logit without u_id v_jd
    h_draw = (hyp.v_bar0 / hyp.v_tilde0 + np.einsum("ij,ni->nj", X - 0.5, u_d)
              - 2.0 * np.einsum("ij,ni,nij->nj", lam, u_d, rest))
    out += [
        dict(quantity="q(v_jd) precision target 1/v~0 + 2 sum_i lambda_ij E[u_id^2]", equation="eqs. (7)-(8), batch VB",
             z=mc_z(p_draw, np.asarray(new.v_prec)[:, d_col])),
        dict(quantity="q(v_jd) mean x precision target", equation="eqs. (7)-(8), batch VB",
             z=mc_z(h_draw, np.asarray(new.v_h)[:, d_col])),
    ]
    for row in out:
        row["passed"] = row["z"] <= Z_MAX
    out.append(dict(quantity="E_q[log p(x_ij | a_ij)] >= alpha_ij (min z of the gap)", equation="eqs. (6), (7)",
                    z=gap_z, passed=gap_z >= -Z_MAX))
    grid = np.linspace(0.01, 3 * float(xi.max()), 3000)
    lam_grid = (0.5 - np.exp(_log_sigmoid(grid))) / (2 * grid)
    alpha_xi = (_log_sigmoid(grid) - (mu[..., None] * (1 - 2 * X[..., None]) + grid) / 2
                + lam_grid * ((mu**2 + s2)[..., None] - grid**2))          # eq. (7) as a function of xi
    best = grid[np.argmax(alpha_xi, axis=-1)]
    step = grid[1] - grid[0]
    off = float(np.max(np.abs(best - xi)) / step)
    out.append(dict(quantity="eq. (8) maximises alpha_ij over xi (grid steps off)", equation="eq. (8)", z=off,
                    passed=off <= 1.0))
    return pd.DataFrame(out)


@x64
def rg_targets_mc(*, n_draws: int = 20000, seed: int = 0) -> pd.DataFrame:
    """RG's user block, user-bias block, Gamma rates and edge second moments against Monte Carlo from q.

    On `validation.models.rg.small_problem` (15 x 12, K = 2, user biases on, hyperprior
    Gamma(0.5, 0.7)) at its `warm_state`, with xi off its optimum (1.1 sqrt(E_q[a^2]) + 0.05).
    Float64 (`x64`).

    Parameters
    ----------
    n_draws : int >= 2, keyword-only, default 20000
        Draws from q (`custom_inference.rg.draws_from_q`).
    seed : int, keyword-only, default 0
        Seed of the draws.

    Returns
    -------
    pandas.DataFrame
        One row per quantity (eq. 16's E_q[a^2], diag P_m, P_m eta_m - c_m, the user-bias mean x
        precision, the four Gamma rates): quantity, equation, z (max |z|), passed (z <= `Z_MAX`).

    Raises
    ------
    ValueError
        For ``n_draws`` < 2 (from `mc_z`).

    Source: ``003_203f63200c0d7157.txt`` eqs. (13), (15), (16), (17); check: project addition.
    """
    hyper = rg_ppl.RGHyper(alpha=0.5, beta=0.7, clamp_user_bias=False)
    _, _, graph = rg_checks.small_problem(0)
    with jax.enable_x64(True):
        g = jax.tree_util.tree_map(jnp.asarray, graph)
        state = rg_checks.warm_state(graph, 2, hyper)
        _, second = rg.edge_moments(state, g.users, g.items)
        xi = 1.1 * jnp.sqrt(second) + 0.05
        new_u = rg.update_users(state, g, hyper, xi, 1.0)
        new_b = rg.update_user_bias(state, g, hyper, xi, 1.0)
        new_t = rg.update_hyper(state, hyper, 1.0)
    users, items = np.asarray(graph.users), np.asarray(graph.items)
    w, gg = np.asarray(graph.weight, np.float64), np.asarray(graph.g, np.float64)
    lam2 = 2 * _lam(np.asarray(xi, np.float64)) * w
    gh = (gg - 0.5) * w
    d = {k: np.asarray(v[0], np.float64) for k, v in rg.draws_from_q(seed, state, n_draws).items()}
    u, v, bu, bv = d["u"], d["v"], d["b_user"], d["b_item"]
    I, K = u.shape[1:]
    onehot = np.zeros((users.size, I))
    onehot[np.arange(users.size), users] = 1.0
    ve = v[:, items]                                                      # (n, E, K)
    a = np.sum(u[:, users] * ve, axis=2) + bu[:, users] + bv[:, items]
    P = d["tau_u"][:, None, None, None] * np.eye(K) + np.einsum("e,em,nek,nel->nmkl", lam2, onehot, ve, ve)
    c = np.einsum("ne,em,nek->nmk", gh - lam2 * (bu[:, users] + bv[:, items]), onehot, ve)
    eta = np.asarray(new_u.u_h / new_u.u_prec, np.float64)
    real = w > 0
    rate = lambda x: hyper.beta + 0.5 * np.sum(x**2, axis=tuple(range(1, x.ndim)))  # noqa: E731
    bias_h = np.einsum("ne,em->nm", gh - lam2 * (np.sum(u[:, users] * ve, axis=2) + bv[:, items]), onehot)
    out = [
        dict(quantity="E_q[a_mn^2] on the edges of H", equation="eq. (16)",
             z=mc_z(a[:, real] ** 2, np.asarray(second, np.float64)[real])),
        dict(quantity="diag P_m (user precisions)", equation="eqs. (13), (15)",
             z=mc_z(np.diagonal(P, axis1=2, axis2=3), np.asarray(new_u.u_prec))),
        dict(quantity="P_m eta_m - c_m = 0 (user means)", equation="eq. (15)",
             z=mc_z(np.einsum("nmkl,ml->nmk", P, eta) - c, 0.0)),
        dict(quantity="user-bias mean x precision", equation="eq. (15), bias analogue",
             z=mc_z(bias_h, np.asarray(new_b.bu_h))),
    ]
    for name, x in (("tau_u", u), ("tau_v", v), ("tau_bu", bu), ("tau_bv", bv)):
        out.append(dict(quantity=f"{name} rate beta + 1/2 sum E[x^2]", equation="eq. (17)",
                        z=mc_z(rate(x), float(getattr(new_t, f"{name}_rate")))))
    for row in out:
        row["passed"] = row["z"] <= Z_MAX
    return pd.DataFrame(out)


def psm_xi_star_derivative(seed: int = 0) -> float:
    """PSM's printed derivative dL(xi*)/dxi* (appendix B.3) against a central finite difference.

    The printed -lambda'(xi*) sum_{(i,j) not in G} D' s_i t_j (E_q[a_ij^2] - xi*^2) against a central
    difference (h = 1e-5) of the printed L(xi*) (read with xi* for the stray xi_ij), on 20 random weights
    and second moments, at 50 values of xi* in [0.05, 8]; float64.

    Parameters
    ----------
    seed : int, default 0
        NumPy seed of the weights and second moments.

    Returns
    -------
    float
        The largest relative difference (<= 1e-6 expected).

    Raises
    ------
    None of its own.

    Source: ``000_619a0297b9d686b2.txt`` appendix B.3; check: project addition.
    """
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(20)) * 37.0           # D' s_i t_j over the pairs outside G
    second = rng.gamma(2.0, 1.5, 20)                # E_q[a_ij^2]
    S, A = w.sum(), w @ second

    def L(x):
        return _log_sigmoid(x) * S - _lam(x) * A + (_lam(x) * x**2 - x / 2) * S

    x = np.linspace(0.05, 8.0, 50)
    h = 1e-5
    fd = (L(x + h) - L(x - h)) / (2 * h)
    dlam = (_lam(x + h) - _lam(x - h)) / (2 * h)
    printed = -dlam * (A - x**2 * S)
    return float(np.max(np.abs(fd - printed) / np.maximum(np.abs(fd), 1e-3)))


def psm_intermediate_bound(seed: int = 0, n: int = 2000, K: int = 4) -> float:
    """The Hadamard inequality behind PSM's intermediate bound, on random positive-definite matrices.

    Eq. (15) / B.2.2 rests on |P| <= prod_k P_kk for positive-definite P; P = A A^T + 1e-3 I with A
    standard normal (K, K + 2).

    Parameters
    ----------
    seed : int, default 0
        NumPy seed.
    n : int, default 2000
        Number of random matrices.
    K : int, default 4
        Their size.

    Returns
    -------
    float
        max over the matrices of log |P| - sum_k log P_kk (must be <= 0).

    Raises
    ------
    None of its own.

    Source: ``000_619a0297b9d686b2.txt`` eq. (15), appendix B.2.2; check: project addition.
    """
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, K, K + 2))
    P = A @ np.swapaxes(A, 1, 2) + 1e-3 * np.eye(K)
    return float(np.max(np.linalg.slogdet(P)[1] - np.log(np.diagonal(P, axis1=1, axis2=2)).sum(1)))


def rg_marginal_over_h() -> float:
    """RG's eq. (4) from eq. (3) by summing over the "considered" bit h in {0, 1}.

    max |sum_h p(h) p(g | a, h) - printed (4)| over a grid of logits a in [-10, 10] (201 points),
    p(h = 1) in [0.01, 0.99] (99 points) and g in {0, 1}.

    Returns
    -------
    float
        The largest absolute difference (float64 rounding expected).

    Raises
    ------
    None of its own.

    Source: ``003_203f63200c0d7157.txt`` eqs. (3)-(4); check: project addition.
    """
    a = np.linspace(-10, 10, 201)[:, None]
    ph = np.linspace(0.01, 0.99, 99)[None, :]
    sig = 1.0 / (1.0 + np.exp(-a))
    worst = 0.0
    for g in (0, 1):
        lik = lambda h: (sig**g * (1 - sig) ** (1 - g)) ** h * (1 - g) ** (1 - h)  # noqa: E731  eq. (3)
        brute = ph * lik(1) + (1 - ph) * lik(0)
        printed = ph * sig if g == 1 else ph * (1 - sig) + (1 - ph)                # eq. (4)
        worst = max(worst, float(np.max(np.abs(brute - printed))))
    return worst
