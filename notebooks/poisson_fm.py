# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Poisson factorization machines (NPFM, PPFM): program, Gibbs sampler, and the sweep order
#
# Chapter 5 of the thesis (`004_90693a0965f06816.txt`) models a count y_n for a feature row x_n
# (one-hot user, one-hot item, side features) as
#
# $$y_n \sim \mathrm{Pois}\Big(w_0 + \sum_i x_{ni} w_i + \sum_k r_k \sum_{i<j} x_{ni} x_{nj} v_{ik} v_{jk}\Big)$$
#
# with Gamma priors on every weight and Gamma hyperpriors on their shapes and rates. NPFM puts a
# truncated gamma process on the factor weights r_k (r_k ~ Ga(gamma0/K, c)), so the number of
# factors in use is learned; PPFM fixes r_k = 1.
#
# - `ppl_models.pfm`: the generative program (latent counts marginalised by Poisson superposition);
# - `custom_inference.pfm`: the Gibbs sampler (latent counts allocated only for y > 0, sums of all
#   cells cached, exact CRT draws for the four shape parameters);
# - `validation.models.pfm`: the checks that connect the two.
#
# Everything runs in float64 with fixed seeds, on tiny problems.

# %%
import jax
import numpy as np
import scipy.sparse as sp

jax.config.update("jax_enable_x64", True)

from custom_inference import pfm  # noqa: E402
from ppl_models import pfm as ppl  # noqa: E402
from validation.models import pfm as vpfm  # noqa: E402

# %% [markdown]
# ## 1. Simulate from the program
# A 6 x 5 user-item matrix; every cell is a training row (unobserved cells are y = 0 rows, as in
# HPF), one-hot ids only, K = 4.

# %%
hyper = ppl.PFMHyper(a_0=2.0, b_0=2.0, c_0=3.0, d_0=2.0, a=2.0, b=2.0, c=3.0, d=2.0, e=2.0, f=2.0, g=3.0, h=2.0,
                     e_0=2.0, f_0=1.0, g_0=3.0, h_0=2.0)
truth, Y = ppl.simulate(jax.random.PRNGKey(0), ppl.PFMSizes(6, 5, 4, "npfm"), hyper)
print(Y.astype(int))

# %% [markdown]
# ## 2. Run the NPFM Gibbs sampler
# `PFMData.from_matrix` keeps only the positive cells as listed rows and caches every sum over all
# cells from per-user and per-item sums. `sample` runs chains on the shared driver and returns
# ArviZ data, with the running posterior-mean rate at requested cells.

# %%
data = pfm.PFMData.from_matrix(sp.csr_matrix(Y))
cells = np.indices(Y.shape).reshape(2, -1)
idata = pfm.sample(1, data, 4, hyper, variant="npfm", num_chains=2, num_warmup=200, num_samples=200, thin=2,
                   predict_at=(cells[0], cells[1]))
rate = np.asarray(idata.predictions["pred_mean"]).reshape(Y.shape)
print("posterior-mean rates:\n", rate.round(2))
print("active factors per draw (counts):", np.unique(idata.sample_stats["n_active"].values, return_counts=True))

# %% [markdown]
# ## 3. Why the sweep order matters
# The chapter draws alpha (the shape of w) by CRT augmentation with w integrated out, and lists
# it *after* w. A collapsed draw is valid only if w is redrawn given the new alpha. One update
# from exact posterior draws shows it: the valid order keeps the joint, the printed order breaks
# the dependence between alpha and w (test of the correlation of log alpha and log w).

# %%
print("valid order   (passed, p):", vpfm.sweep_order_check("valid"))
print("printed order (passed, p):", vpfm.sweep_order_check("printed"))

# %% [markdown]
# ## 4. Counting units
# Each unit of count picks one term of its rate; a factor unit then picks a pair of features with
# probability proportional to x_i v_ik x_j v_jk. The frequencies match Lemma 5.2.2's multinomial,
# and the sums add up to the counts.

# %%
print(vpfm.allocation_checks(n_draws=5000))
