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
# # Paired symbols (PSM): popularity selection, logistic censoring, background caches
#
# This notebook follows Paquet, Koenigstein and Winther's *Scalable Bayesian Modelling of Paired
# Symbols* (seed `000_619a0297b9d686b2.txt`). A stream of (user, item) events is explained in two
# steps: a **selection step** draws a user by popularity pi and an item by popularity psi, and a
# **censoring step** keeps the pair with probability `sigma(u_i . v_j + b_i + b_j)`. We see the D
# kept events; the model assumes D' = r D censored events whose identities are unknown.
#
# We go from the NumPyro program (`ppl_models.psm`, censored identities summed out) to the
# hand-derived variational solver (`custom_inference.psm`, Algorithm 1 with its background
# caches) and check the solver with `validation.models.psm`: every cached sum against its dense I x J
# twin, every block update against `jax.grad` of the dense bound, and the printed formulas that
# the checks show wrong. Everything is float64 and seeded; no NUTS here (the cross-check is
# `factorbayes crosscheck psm`).

# %%
import os
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    # many small programs, each run once: cheaper compilation matters more than fast code
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from custom_inference import psm  # noqa: E402
from custom_inference.data import Observations  # noqa: E402
from ppl_models import psm as psm_ppl  # noqa: E402
from validation.models import psm as v_psm  # noqa: E402
from validation.checks.errata import run_errata  # noqa: E402

pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 70)

# %% [markdown]
# ## 1. The generative story, event by event
#
# `simulate` draws pi, psi from Dirichlet priors, Gaussian vectors and biases, then runs the
# stream: each event selects (i, j) and is kept with probability sigma(a_ij). It stops at the D-th
# kept event; the number of censored events D' is whatever the stream produced. Given that D', the
# program's posterior is the exact posterior of the simulated stream.
#
# The stream is small on purpose (8 users, 6 items, 200 kept events): it is the problem of the
# tests, of the errata checks below and of the NUTS cross-check (`validation.models.psm.small_problem(0)`),
# so every program is compiled once.

# %%
hyper = psm_ppl.PSMHyper()  # alpha0 = beta0 = tau_u = tau_v = tau_b = 1 (sec. 5)
I, J, K, D = 8, 6, 2, 200
params, events = psm_ppl.simulate(jax.random.PRNGKey(0), (I, J, K, D), hyper)
rows, cols, counts = psm_ppl.aggregate(events["rows"], events["cols"], I, J)
obs = Observations.from_coo(rows, cols, counts, (I, J))
r = events["n_censored"] / D
print(f"{D} kept events, {events['n_censored']} censored (r = D'/D = {r:.2f}), {obs.nnz} distinct pairs")

# %% [markdown]
# ## 2. Variational Bayes (Algorithm 1)
#
# The solver ties all censored events' categorical posteriors to two vectors s (users) and t
# (items) and shares one Jaakkola-Jordan parameter xi* over all unobserved pairs. Every all-pairs
# sum then collapses into item-side and user-side caches plus a sparse correction over the
# observed pairs: a sweep costs O(|G| K^2 + (I + J) K^3).

# %%
res = psm.fit(0, obs, K, hyper, max_iter=300, tol=1e-9, progress=False, r=r, n_draws=200)
print(f"{len(res.trace) - 1} sweeps, final ELBO {res.trace[-1]:.3f}")
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(res.trace)
ax.set_xlabel("sweep")
ax.set_ylabel("bounded ELBO")
plt.show()

# %% [markdown]
# The popularities E[pi], E[psi] of q against the truth, and the acceptance probabilities
# sigma(a_ij) (MacKay's probit approximation of the logistic-Gaussian integral) against the true ones.

# %%
e_psi = np.asarray(res.state.beta / res.state.beta.sum())
users, items = np.repeat(np.arange(I), J), np.tile(np.arange(J), I)
acc = np.asarray(psm.acceptance_probability(res.state, users, items))
a_true = params["u"] @ params["v"].T + params["b_user"][:, None] + params["b_item"][None, :]
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
axes[0].scatter(np.asarray(params["psi"]), e_psi)
axes[0].set_xlabel("true psi_j")
axes[0].set_ylabel("E_q[psi_j]")
axes[1].scatter(np.asarray(jax.nn.sigmoid(a_true)).ravel(), acc)
axes[1].set_xlabel("true sigma(a_ij)")
axes[1].set_ylabel("q: sigma(x_ij)")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. The caches against their dense twins
#
# Every cache of appendix B.1 and every sum the updates build from it, computed by the solver
# (caches plus sparse corrections, in chunks of pairs) and by brute force over all I x J pairs,
# at a state that is not a fixed point (`validation.models.psm.warm_state`, with the checks' distinct
# hyperparameters `v_psm.HYPER`). In float64 they agree to rounding.

# %%
dense = v_psm.dense_twin_checks(obs, K, r=r)
dense

# %% [markdown]
# Each block of a sweep is a stationary point of the dense bound in its block (gradient by
# `jax.grad`, before and after the update), and the ELBO never decreases:

# %%
print(v_psm.update_checks(obs, K, r=r))
ok, worst, trace = v_psm.monotone_check(obs, K, r=r, sweeps=20)
print("monotone:", ok, "largest relative decrease", worst)

# %% [markdown]
# ## 4. Predictions
#
# The paper's predictive (eq. 5): p(j | i, o = T) is proportional to popularity times personalised
# acceptance, E[psi_j] sigma(x_ij). MacKay's approximation against a Monte Carlo estimate of the
# same Gaussian integral:

# %%
print(psm.score_users(res.state, np.array([0, 1])).round(3))
cmp = v_psm.probit_vs_monte_carlo(res.state, users, items, n_draws=4000)
print(f"max |MacKay - Monte Carlo| = {cmp.abs_diff.max():.4f} (MC se ~ {cmp.mc_se.max():.4f})")

# %% [markdown]
# ## 5. Errata: printed formulas the checks show wrong
#
# Each row swaps the printed formula into the solver and runs the check: the printed form fails,
# the corrected one passes. Most are the two item caches m-dag = sum_j t_j E[b_j] E[v_j] and
# m-ddag = sum_j t_j E[v_j] exchanged in the printed updates.

# %%
table = run_errata(v_psm.ERRATA)
table[["location", "printed", "corrected", "check", "printed_value", "corrected_value", "ok"]]
