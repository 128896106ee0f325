r"""SIBM: variational Bayes (batch and stochastic) and stochastic MAP for logistic binary MF.

Source: ``002_5408d341cb9fc544.txt`` (Hernandez-Lobato, Houlsby, Ghahramani, ICML 2014):
model eqs. (1)-(2), mean-field family (4), prediction (5), Jaakkola-Jordan bound (6), bounded
ELBO (7), optimal xi (8), noisy bound (9), natural-gradient step (10), minibatch averaging
(11)-(12), automatic minibatch size (13), sampling strategies (sec. 2.3), Algorithm 1. Every
update below is our own derivation; `validation.models.sibm` checks each against ``jax.grad`` of
`elbo` and lists the printed equations that fail (``validation.models.sibm.ERRATA``).

Model (I x J fully observed binary X, variances as second Normal parameter, as the seed)::

    x_ij ~ Bernoulli(sigma(a_ij)),  a_ij = u_i . v_j + z,
    u_id ~ N(u_bar0, u_tilde0),  v_jd ~ N(v_bar0, v_tilde0),  z ~ N(z_bar0, z_tilde0).

Biases (``hyper.biases``): U and V get K = D + 2 columns; column D of V and column D + 1 of U
are fixed to ones (so column D of U is the row bias and column D + 1 of V the column bias),
the layout of `ppl_models.sibm.augmented_factors`. A fixed entry has q = point mass at 1: the
state marks it in ``u_fixed`` / ``v_fixed`` (K,) and it has no prior or entropy term.

q (eq. 4): fully factorized Gaussians (diagonal, as the seed), **stored as natural parameters**
(precision P = 1 / u_tilde, precision-times-mean h = u_bar / u_tilde; the seed's u-dot, u-ddot).

Bound (eq. 6 / 7). With lambda(xi) = (sigma(xi) - 1/2) / (2 xi) > 0, the POSITIVE convention
of `custom_inference.logistic.jj_lambda` (the seed writes lambda_002 = -lambda), and
mu_ij = E[a_ij], s2_ij = Var[a_ij] = sum_d (u_bar^2 v_tilde + u_tilde v_bar^2 + u_tilde v_tilde) + z_tilde,

    alpha_ij = log sigma(xi) + (x_ij - 1/2) mu_ij - xi / 2 - lambda(xi) (mu_ij^2 + s2_ij - xi^2),
    L'(Phi, Xi) = sum_ij alpha_ij - sum KL(q(u_id) || p) - sum KL(q(v_jd) || p) - KL(q(z) || p).

The optimal xi (eq. 8) is xi_ij = sqrt(mu_ij^2 + s2_ij); there alpha_ij = log sigma(xi) - xi/2 +
(x - 1/2) mu. `elbo` returns max_Xi L'(Phi, Xi) (or L' at the xi of another state).

Coordinate updates (ours). Write a_ij = u_id v_jd + r_ij with r independent of (u_id, v_jd) under
q, so E[a^2] = E[u_id^2] E[v_jd^2] + 2 u_bar_id v_bar_jd E[r] + E[r^2]. L' is linear in
(E u_id, E u_id^2), so the maximizer is Gaussian with

    P(u_id) = 1/u_tilde0 + 2 sum_j lambda_ij E[v_jd^2]
    h(u_id) = u_bar0/u_tilde0 + sum_j (x_ij - 1/2) v_bar_jd - 2 sum_j lambda_ij v_bar_jd (mu_ij - u_bar_id v_bar_jd)
    P(z)    = 1/z_tilde0 + 2 sum_ij lambda_ij
    h(z)    = z_bar0/z_tilde0 + sum_ij (x_ij - 1/2) - 2 sum_ij lambda_ij (mu_ij - z_bar)

and symmetrically for v_jd. The linear sums are aggregated: sum_j (x_ij - 1/2) v_bar_jd =
sum_{j: x_ij = 1} v_bar_jd - (1/2) sum_j v_bar_jd (positives plus one column sum). The lambda
sums need every cell (each has its own xi): batch VB is O(I J K) time per sweep, as in the
seed ("each iteration requires the examination of all of the entries in X"), but it never
holds an I x J array: rows are processed in chunks of ``chunk`` x J cells. (A common-xi
trick, sum_j E[v_j v_j^T] once, would need lambda shared by all cells: not the seed's bound.)

Batch VB (`step`): z, then every column d of V (all j at once, xi re-optimized before each d),
then every column d of U: each block is the exact maximizer of L'(Phi, Xi*(Phi_before)), so
L'(Phi) = max_Xi L' never decreases.

SVI (Algorithm 1). A cell (i, j) ~ p(i, j) gives the noisy bound (9), whose maximizer in u_id is
the formula above with the sum over j replaced by the single term divided by c = p(j|i)
(v_jd: c = p(i|j); z: c = p(i, j)). Then E_{j|i}[target] = batch target exactly (the targets are
linear in the per-cell statistics), which is what the seed's choice of c guarantees; it is
checked by enumeration in `validation.models.sibm`. Per cell, as Algorithm 1: save, nudge z by (10),
then v_j1..v_jD, then u_i1..u_iD (xi recomputed before each), keep the targets, restore; after
S cells, average the targets per row / column (12) and step (11) with Robbins-Monro
rho = (tau + n_updates)^(-kappa) per row, column and z. The cells of a minibatch start from the
same saved state, so they are computed in parallel (vmap): cost O(S K^2) per minibatch.
Automatic S (13): S = ||Var[target]||_1 / (theta delta p(i) ||E[target]||^2), E and Var of the
per-cell targets tracked by exponentially weighted moving averages, averaged over the (i, d)
and (j, d) seen so far, clipped below at ``S_min`` (the seed: max(I, J)).

Sampling strategies (sec. 2.3): S-Uniform p = 1/(IJ); S-Balanced p = 1/(2 n_x) with n_x the
number of cells with value x; S-Biased p(i, j) = r_i c_j / (2 W_x), with (r_i, c_j) the number
of zeros of row i and column j for a one, of ones for a zero (thresholded at 1), W_x the sum of
those products over cells with value x. Zeros are drawn by rejection (a candidate from the
product distribution, rejected if it is a one), so nothing over all cells is ever built.

MAP ("MAP" baseline of sec. 4.2; its details are in the seed's supplement, not in the seed):
stochastic gradient ascent on log p(U, V, z | X) with the same sampling, the same rescaling c and
minibatch averaging (unbiased gradients), blocks z, V, U in turn, each gradient multiplied by the
inverse of the block's Boehning bound (1/4) B^T B + I / prior_var (B = V for rows of U, U for
columns of V; (K, K), shared by all rows, O((I + J) K^2) per minibatch), Robbins-Monro steps.
At rho = 1 with exact gradients that is a block MM step (monotone; tests/custom_inference/test_sibm.py
checks each block against autodiff of `log_joint`). With one-cell gradients it is not: a row drawn once
in a minibatch moves by rho A^-1 g_cell, and g_cell (divided by p(j|i)) can vary more than its mean, so
the log joint can fall while a row's rho is near 1. On the first 30,000 baskets of T10I4D100K (S =
10,000: 0.33 cells per row and minibatch) tau = 1 took it from -1.65e6 to -4.25e6 in 225 minibatches,
every fall in the U block (the z and V blocks raised it); tau = 100 (first rho 0.04) raised it
monotonically. Where S p(i) << 1, pass a large ``tau``. SVI at tau = 1 on the same rows raised its ELBO at
every record (-2.26e6 to -1.84e6 in 200 minibatches): its one-cell targets maximize the noisy bound, so
a step toward them cannot overshoot the way a gradient step divided by p(j|i) does. (An earlier version divided
each coordinate's one-cell gradient by that cell's own diagonal bound: a ratio of noisy estimates
whose joint step over K coordinates moves a_ij by ~4 K (x - sigma); on MovieLens 100K it stopped at
log joint -6.7e5 against -1.116e5 at the MAP, and ranked below popularity.)

Package layout (one module per algorithm over shared pieces): `common` (data, hyperparameters,
state, moments, the bounded ELBO), `cells` (sampling strategies and minibatches of cells), `vb`
(batch VB: `init`, `step`, `fit`), `svi` (Algorithm 1: `svi_init`, `svi_step`, `svi_scan`,
`fit_svi`), `map` (`map_init`, `map_step`, `log_joint`, `fit_map`), `predict` (scores). Every name
below is re-exported here, so ``from custom_inference import sibm; sibm.fit(...)`` works. The three
protocol declarations are `ALGORITHMS` ("vb", "svi", "map"). The latent dimension is ``K`` (the
seed's D); the state has K + 2 columns with biases.
"""

from . import cells, common, map, predict, svi, vb
from .cells import STRATEGIES, Minibatch, Sampler, _pad_size, make_sampler, pmf, sample_cells
from .common import (DEFAULT_CHUNK_CELLS, STATE_DIMS, SIBMInfo, SIBMState, _kl_terms, _prior, _static_hyper, as_binary,
                     cell_moments, draws_from_q, elbo, init, moments, prior_arrays)
from .map import MAPInfo, MAPState, fit_map, fold_in_map, log_joint, map_cell_gradients, map_curvature_bound, map_init, map_step
from .predict import predict_proba, score_users
from .svi import (DEFAULT_SCAN_BLOCK, SVIInfo, SVIState, auto_minibatch_size, cell_targets, fit_svi, svi_elbo,
                  svi_init, svi_scan, svi_state, svi_step)
from .vb import fit, fold_in, step, update_u, update_v, update_z

#: The protocol declarations (`custom_inference.base`) of the three algorithms.
ALGORITHMS = {"vb": vb.ALGORITHM, "svi": svi.ALGORITHM, "map": map.ALGORITHM}

__all__ = [
    "SIBMState", "SIBMInfo", "SVIState", "SVIInfo", "MAPState", "MAPInfo", "Sampler", "Minibatch", "STRATEGIES",
    "STATE_DIMS", "DEFAULT_CHUNK_CELLS", "DEFAULT_SCAN_BLOCK", "as_binary", "prior_arrays", "init", "moments",
    "cell_moments", "elbo", "draws_from_q", "update_z", "update_v", "update_u", "step", "fit", "make_sampler",
    "pmf", "sample_cells", "cell_targets", "svi_init", "svi_state", "svi_step", "svi_scan", "svi_elbo",
    "auto_minibatch_size", "fit_svi", "map_init", "map_step", "map_cell_gradients", "map_curvature_bound",
    "log_joint", "fit_map", "score_users", "predict_proba", "fold_in", "fold_in_map", "ALGORITHMS",
]
