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
# # Hierarchical Poisson factorization: from the generative program to a validated solver
#
# This notebook teaches one model, **hierarchical Poisson factorization** (HPF; seed
# `001_30a2018ec18c20b9.txt`, Gopalan, Hofman and Blei), three ways:
#
# 1. as a *generative program* in NumPyro (`ppl_models.hpf`), which states the model
#    and gives exact-in-the-limit posteriors with NUTS on small data;
# 2. as the paper's *hand-derived solver*, coordinate-ascent variational inference
#    (CAVI) written in JAX (`custom_inference.hpf`), which scales to millions of users;
# 3. as the *bridge* between the two (`validation`): checks that each hand-derived
#    update is right, that the printed derivation has errors, and how far the
#    variational posterior sits from the NUTS posterior.
#
# It runs in about a minute on a 2-core CPU, most of it spent by JAX compiling small
# programs. Everything is in float64 and every seed is fixed.

# %%
import inspect
import os
import time
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets

import numpyro  # noqa: E402

# Two CPU settings, made before JAX starts its backend. This notebook runs many small
# programs once each, so compiling them costs more than running them: ask XLA's CPU
# backend for fewer LLVM optimizations (compiles about twice as fast; results change only
# at rounding level, though NUTS amplifies that into different, equally valid draws).
# And show JAX 4 virtual CPU devices so that NUTS runs its 4 chains in parallel.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
numpyro.set_host_device_count(4)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from custom_inference import arviz_io  # noqa: E402
from custom_inference import hpf as cavi  # noqa: E402
from custom_inference.data import Observations  # noqa: E402
from ppl_models import hpf as ppl  # noqa: E402
from validation.checks import crosscheck, errata, gates, updates  # noqa: E402
from validation.models import hpf as vhpf  # noqa: E402

pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
NOTEBOOK_START = time.perf_counter()

SIM_SEED = 0  # simulated data
CAVI_SEED = 0  # CAVI initialisation and draws from q
NUTS_SEED = 1  # NUTS chains

# %% [markdown]
# ## 1. The generative story
#
# HPF models a users-by-items matrix of counts $y_{ui}$ (plays, clicks, ratings
# treated as counts) with $K$ non-negative factors. Every user $u = 1..I$ has an
# *activity* $\xi_u$ and $K$ *weights* $\theta_{uk}$; every item $i = 1..J$ has a
# *popularity* $\eta_i$ and $K$ weights $\beta_{ik}$:
#
# $$
# \begin{aligned}
# \xi_u &\sim \mathrm{Gamma}\!\left(a',\ a'/b'\right), &
# \theta_{uk} \mid \xi_u &\sim \mathrm{Gamma}(a,\ \xi_u),\\
# \eta_i &\sim \mathrm{Gamma}\!\left(c',\ c'/d'\right), &
# \beta_{ik} \mid \eta_i &\sim \mathrm{Gamma}(c,\ \eta_i),\\
# y_{ui} \mid \theta_u, \beta_i &\sim \mathrm{Poisson}\!\left(\theta_u^\top \beta_i\right)
#   = \mathrm{Poisson}\!\left(\textstyle\sum_k \theta_{uk}\beta_{ik}\right).
# \end{aligned}
# $$
#
# In words: $a$ and $c$ are the *shapes* of the user and item weights, $a'$ and $c'$
# the shapes of activity and popularity, $b'$ and $d'$ their prior *means*.
#
# **Shape and rate.** Every Gamma here is $\mathrm{Gamma}(\text{shape } \alpha,\ \text{rate } \rho)$
# with density $\rho^\alpha x^{\alpha-1} e^{-\rho x} / \Gamma(\alpha)$, so
# $\mathbb{E}[x] = \alpha/\rho$ and $\mathbb{E}[\log x] = \psi(\alpha) - \log \rho$
# ($\psi$ is the digamma function). NumPyro's `dist.Gamma(concentration, rate)` uses the
# same convention; SciPy's `stats.gamma` takes `scale = 1/rate`. The activity $\xi_u$ is
# the *rate* of user $u$'s weights: an active user (small $\xi_u$) has large weights.
#
# **The prior rate $a'/b'$.** The seed's complete conditional
# $\xi_u \mid \theta \sim \mathrm{Gamma}(a' + Ka,\ b' + \sum_k \theta_{uk})$ implies a prior
# $\mathrm{Gamma}(a', b')$, with mean $a'/b'$. The published paper (UAI 2015) and the
# `hpfrec` package use $\mathrm{Gamma}(a', a'/b')$ instead, whose mean is $b'$; factorbayes
# follows them, so $b'$ (and $d'$) is the prior mean and results compare with `hpfrec`
# like for like. The errata table (section 5) records the clash.
#
# Here is the NumPyro program. `model` is a thin wrapper that reads the shape off the
# data; the generative story, in the paper's order, is in `_hpf_body`.

# %%
print(inspect.getsource(ppl.model))
print(inspect.getsource(ppl._hpf_body))

# %% [markdown]
# ## 2. Simulated data
#
# We draw a small matrix from the prior predictive: $I = 30$ users, $J = 20$ items,
# $K = 2$. The hyperparameters are the cross-check's, not the paper's defaults
# ($a = a' = c = c' = 0.3$): with $a' = 0.3$ the activity prior puts so much mass
# near zero that prior draws reach counts of $10^8$. With $a' = c' = 2$ the activities
# keep mean $b' = d' = 1$ with light tails.

# %%
hyper = vhpf.CROSSCHECK_DEFAULT.hyper
n_users, n_items, K = 30, 20, 2
print("paper defaults:", ppl.HPFHyper())
print("used here:     ", hyper)

truth, y = ppl.simulate(jax.random.PRNGKey(SIM_SEED), n_users, n_items, K, hyper)
y = np.asarray(y)
data = Observations.from_dense(y)  # the solver sees only the nonzero entries
print(data)
print(f"{data.nnz} of {y.size} cells are nonzero ({data.nnz / y.size:.0%}); total count {y.sum():.0f}; largest {y.max():.0f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1.1, 1]})
im = axes[0].imshow(np.log1p(y), cmap="viridis", aspect="auto")
axes[0].set(title=r"$\log(1 + y_{ui})$", xlabel="item $i$", ylabel="user $u$")
fig.colorbar(im, ax=axes[0])
counts = np.bincount(y.astype(int).ravel())
axes[1].bar(np.arange(counts.size), counts, width=0.9)
axes[1].set(title="histogram of the counts", xlabel="$y_{ui}$", ylabel="number of cells", yscale="log")
fig.tight_layout()

# %% [markdown]
# Most cells are zero and a few are large: the Gamma priors with shapes below 1 make
# the weights sparse, and the product of two sparse weight vectors is sparser still.
# That is the kind of matrix HPF was built for.
#
# ## 3. The auxiliary-variable trick and the CAVI updates
#
# The Poisson of a *sum* $\sum_k \theta_{uk}\beta_{ik}$ is not conjugate to the Gamma
# priors. The paper splits each count into $K$ latent counts,
#
# $$
# z_{uik} \sim \mathrm{Poisson}(\theta_{uk}\beta_{ik}), \qquad y_{ui} = \textstyle\sum_k z_{uik},
# $$
#
# which leaves the marginal of $y_{ui}$ unchanged (a sum of independent Poissons is Poisson
# with the summed rate). With $z$ in the model, every *complete conditional* (the
# distribution of one latent variable given the data and all the others) is in closed form:
#
# $$
# \begin{aligned}
# \theta_{uk} \mid \cdot &\sim \mathrm{Gamma}\!\left(a + \textstyle\sum_i z_{uik},\ \xi_u + \sum_i \beta_{ik}\right), &
# \xi_u \mid \cdot &\sim \mathrm{Gamma}\!\left(a' + Ka,\ a'/b' + \textstyle\sum_k \theta_{uk}\right),\\
# \beta_{ik} \mid \cdot &\sim \mathrm{Gamma}\!\left(c + \textstyle\sum_u z_{uik},\ \eta_i + \sum_u \theta_{uk}\right), &
# \eta_i \mid \cdot &\sim \mathrm{Gamma}\!\left(c' + Kc,\ c'/d' + \textstyle\sum_k \beta_{ik}\right),\\
# z_{ui} \mid \cdot &\sim \mathrm{Mult}\!\left(y_{ui},\ \dfrac{\theta_u \odot \beta_i}{\theta_u^\top\beta_i}\right).
# \end{aligned}
# $$
#
# Where $y_{ui} = 0$ the $z_{ui}$ are all zero, so only the $N$ nonzero cells carry a $z$.
#
# **Mean field.** CAVI approximates the posterior by a product of independent factors,
# each of the same family as its complete conditional:
# $q(\theta_{uk}) = \mathrm{Gamma}(\gamma^{\text{shp}}_{uk}, \gamma^{\text{rte}}_{uk})$,
# $q(\beta_{ik}) = \mathrm{Gamma}(\lambda^{\text{shp}}_{ik}, \lambda^{\text{rte}}_{ik})$,
# $q(\xi_u) = \mathrm{Gamma}(\kappa^{\text{shp}}_u, \kappa^{\text{rte}}_u)$,
# $q(\eta_i) = \mathrm{Gamma}(\tau^{\text{shp}}_i, \tau^{\text{rte}}_i)$ and
# $q(z_{ui}) = \mathrm{Mult}(y_{ui}, \phi_{ui})$. It maximizes the evidence lower bound
# $\mathcal{L}(q) = \mathbb{E}_q[\log p(y, z, \theta, \beta, \xi, \eta)] - \mathbb{E}_q[\log q] \le \log p(y)$
# one factor at a time.
#
# **The rule.** For one factor, the maximizer of $\mathcal{L}$ with the others fixed is
# $q^*(x) \propto \exp\{\mathbb{E}_{q(\text{rest})}[\log p(x \mid \text{rest}, y)]\}$. When the
# complete conditional is in an exponential family,
# $\log p(x \mid \text{rest}, y) = \nu(\text{rest})^\top t(x) - A(\nu(\text{rest})) + \text{const}$
# with natural parameter $\nu$ and sufficient statistics $t(x)$; the log-normalizer $A$ does
# not depend on $x$, so $q^*$ is the *same family* with natural parameter
# $\mathbb{E}_q[\nu(\text{rest})]$. Each update is the *expected complete conditional*.
# For a Gamma, $t(x) = (\log x, x)$ and $\nu = (\text{shape} - 1, -\text{rate})$, so we replace
# $z_{uik}$ by $\mathbb{E}_q[z_{uik}] = y_{ui}\phi_{uik}$ in the shapes and every variable in
# the rates by its mean. For the multinomial, $\nu_k = \log\theta_{uk} + \log\beta_{ik}$ up to
# a term that is the same for every $k$ (and cancels in the normalization), so we take
# expected logs:
#
# $$
# \begin{aligned}
# \phi_{uik} &\propto \exp\{\psi(\gamma^{\text{shp}}_{uk}) - \log\gamma^{\text{rte}}_{uk}
#             + \psi(\lambda^{\text{shp}}_{ik}) - \log\lambda^{\text{rte}}_{ik}\} \quad (y_{ui} > 0),\\
# \gamma_{uk} &= \left(a + \textstyle\sum_i y_{ui}\phi_{uik},\ \ \kappa^{\text{shp}}_u/\kappa^{\text{rte}}_u + \sum_i \lambda^{\text{shp}}_{ik}/\lambda^{\text{rte}}_{ik}\right),\\
# \kappa_u &= \left(a' + Ka,\ \ a'/b' + \textstyle\sum_k \gamma^{\text{shp}}_{uk}/\gamma^{\text{rte}}_{uk}\right),\\
# \lambda_{ik} &= \left(c + \textstyle\sum_u y_{ui}\phi_{uik},\ \ \tau^{\text{shp}}_i/\tau^{\text{rte}}_i + \sum_u \gamma^{\text{shp}}_{uk}/\gamma^{\text{rte}}_{uk}\right),\\
# \tau_i &= \left(c' + Kc,\ \ c'/d' + \textstyle\sum_k \lambda^{\text{shp}}_{ik}/\lambda^{\text{rte}}_{ik}\right).
# \end{aligned}
# $$
#
# The sums $\sum_i \mathbb{E}[\beta_{ik}]$ run over *all* items but are one column sum,
# so a sweep costs $O(NK + (I + J)K)$ and never touches the zeros one by one. Each update
# is the exact maximizer of $\mathcal{L}$ in its block, so **the ELBO can never go down**
# from one sweep to the next: a built-in test of the derivation and of the code.
#
# We fit with `custom_inference.hpf.fit` in float64, until the relative change of the ELBO
# falls below $10^{-9}$. The result is an ArviZ `InferenceData` with the variational
# parameters in `variational_parameters` and the ELBO per sweep in `vi_trace` (with
# `n_draws > 0` it also stores draws from $q$ in `posterior`; we draw them ourselves in
# section 7). CAVI finds a local optimum; the full cross-check runs four restarts and
# keeps the highest ELBO.

# %%
idata_vi = cavi.fit(CAVI_SEED, data, K, hyper, max_iter=5000, tol=1e-9, n_draws=0, dtype=np.float64, progress=False).idata
attrs = idata_vi.vi_trace.attrs
print(f"converged: {bool(attrs['converged'])} after {attrs['n_iter']} sweeps; final ELBO {idata_vi.vi_trace.elbo.values[-1]:.4f} nats")
idata_vi

# %%
elbo_trace = idata_vi.vi_trace.elbo.values  # ELBO of the state entering each sweep, then of the final state
ok, worst_drop = updates.monotone(elbo_trace)
print(f"ELBO never decreases: {ok} (largest relative drop {worst_drop:.1e})")

sweeps = np.arange(elbo_trace.size)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].plot(sweeps[1:], elbo_trace[1:], marker=".", ms=3)
axes[0].set(xlabel="sweep", ylabel="ELBO (nats)", title="ELBO per sweep (from sweep 1)", xscale="log")
gap = elbo_trace[-1] - elbo_trace[:-1]
axes[1].semilogy(sweeps[:-1], np.maximum(gap, 1e-12), marker=".", ms=3)
axes[1].set(xlabel="sweep", ylabel=r"$\mathcal{L}_{\mathrm{final}} - \mathcal{L}_t$", title="distance to the final ELBO")
fig.tight_layout()

# %% [markdown]
# The ELBO rises steeply, may sit on a plateau for a few sweeps (the two components
# start almost alike and need a few sweeps to separate), and then converges linearly: the
# distance to the final value falls by a constant factor per sweep, a straight line on
# the log scale. Coordinate ascent is reliable but not fast near the optimum.

# %% [markdown]
# ## 4. Update-level checks: is each line of the derivation right?
#
# A monotone ELBO is necessary but weak: a wrong update can still raise the ELBO. A sharper
# test uses the fact that each closed-form update is a **stationary point of the ELBO in its
# own block**. So we write the ELBO as a plain JAX function of the variational parameters
# (`custom_inference.hpf.elbo`), apply one block's update, and ask `jax.grad` for the
# gradient with respect to that block's parameters:
#
# $$
# \left.\frac{\partial \mathcal{L}}{\partial(\gamma^{\text{shp}}, \gamma^{\text{rte}})}\right|_{\text{after the }\gamma\text{ update}} \overset{?}{=} 0 .
# $$
#
# `grad_before` is the largest gradient entry before the update (the scale the update had to
# remove), `grad_after` the largest one after it. A right update leaves float64 rounding
# ($10^{-14}$ or so); a wrong one leaves a gradient of the size it started with. This checks
# the *algebra*, block by block, with no sampling and no tolerance tuning. (For $\phi$ the
# gradient is taken with respect to the softmax logits.)

# %%
update_table = vhpf.update_checks(data, hyper, K, seed=0)
update_table

# %% [markdown]
# The second kind of check compares each *scalable* computation with its brute-force twin.
# The solver's ELBO and its sweep work on the nonzeros only; `dense_twin_checks` recomputes
# them with dense $I \times J$ (and $I \times J \times K$) arrays in NumPy/SciPy, sharing no
# code with the solver. The relative differences must be at rounding level.

# %%
dense_table = vhpf.dense_twin_checks(y, hyper, K, seed=0)
dense_table

# %% [markdown]
# ## 5. The errata: a printed update that fails the check
#
# The paper's algorithm figure prints the activity update as
#
# $$
# \kappa^{\text{shp}}_u = a + Ka', \qquad
# \kappa^{\text{rte}}_u = b' + \textstyle\sum_k \left(\psi(\gamma^{\text{shp}}_{uk}) - \log \gamma^{\text{rte}}_{uk}\right).
# $$
#
# Both are wrong. $\xi_u$ enters the joint through its prior,
# $(a'-1)\log\xi_u - (a'/b')\,\xi_u$, and through its $K$ children,
# $\log p(\theta_{uk} \mid \xi_u) = a\log\xi_u - \xi_u\theta_{uk} + \dots$. Collecting the
# coefficients of $\log \xi_u$ and of $-\xi_u$ gives shape $a' + Ka$ and rate
# $a'/b' + \sum_k \mathbb{E}[\theta_{uk}]$: the rate collects $\mathbb{E}[\theta_{uk}]$, while
# the figure has $\mathbb{E}[\log\theta_{uk}]$ (which is often negative, so the printed rate
# can even be negative). The shape has $a$ and $a'$ swapped.
#
# `validation.models.hpf.ERRATA` is an executable table: each entry runs the same stationarity
# check on the printed form and on the corrected one, on a small simulated data set with
# *distinct* hyperparameters ($a \ne a'$, ...) so that a swapped symbol shows. A row is
# confirmed when the printed form fails and the corrected form passes.

# %%
kappa_rows = [e for e in vhpf.ERRATA if e.location.startswith("batch algorithm figure") and "kappa" in e.printed]
errata_table = errata.run_errata(kappa_rows)
errata_table[["printed", "corrected", "check", "printed_value", "corrected_value", "ok"]]

# %%
for e in kappa_rows:
    print(f"printed:   {e.printed}\ncorrected: {e.corrected}\nwhy:       {e.why}\n")

# %% [markdown]
# The measured value is `grad_after`, the largest ELBO gradient left in the $\kappa$ block: far
# from zero after the printed updates, rounding level after the corrected ones. (On this data
# set the printed rate is negative for some users, so it does not even define a Gamma.) The full table
# (`factorbayes errata`) also covers $\tau$, the text's $\gamma$ update with a constant rate $b$,
# and two complete conditionals checked against brute-force normalization on a grid.
#
# ## 6. NUTS on the same data, and when to trust it
#
# The NumPyro program of section 1 is all NUTS needs: it integrates $z$ out analytically
# (the Poisson of the sum) and samples $\theta, \beta, \xi, \eta$. We run 4 chains of
# 300 warm-up and 300 kept draws, kept small so the notebook stays fast.

# %%
nuts = crosscheck.run_nuts(
    ppl.model, jnp.asarray(y), K, hyper,
    num_chains=4, num_warmup=300, num_samples=300, seed=NUTS_SEED, progress=False,
)
print(f"NUTS: {nuts.seconds:.1f} s, {nuts.divergences} divergent transitions, E-BFMI per chain {np.round(nuts.bfmi, 2)}")
post_nuts = arviz_io.group_arrays(nuts.idata)  # name -> (chain, draw, ...)

{name: value.shape for name, value in post_nuts.items()}


# %% [markdown]
# **What can be compared?** The raw factors are not identified: permuting the $K$ components
# of every $\theta_u$ and $\beta_i$ together leaves the likelihood unchanged, and scaling
# $\theta_{\cdot k}$ up and $\beta_{\cdot k}$ down changes it not at all (only the prior
# cares, weakly). The **expected rates** $\theta_u^\top\beta_i$, which are what HPF
# recommends with, are invariant to both. The activities $\xi_u$ and popularities $\eta_i$
# are invariant to the permutation, and their priors pin down the scale. We compare these
# three groups.
#
# **When is NUTS ground truth?** Only when ArviZ says so on the compared quantities:
# rank-normalized split $\hat R \le 1.01$ with at least 4 chains, bulk and tail ESS at least
# 400, no divergences, and E-BFMI at least 0.3 (`validation.checks.gates`). NumPyro's printed
# $\hat R$ is the classic one; the gates use ArviZ's.

# %%
def identifiable(post):
    """(chain, draw, Q) draws of the quantities we compare: every cell's rate, xi, eta."""
    rates = ppl.expected_rates(post["theta"], post["beta"])  # (chain, draw, I, J)
    return {"rate": np.asarray(rates).reshape(*rates.shape[:2], -1), "xi": post["xi"], "eta": post["eta"]}


q_nuts = identifiable(post_nuts)
gate = gates.nuts_gates(q_nuts, divergences=nuts.divergences, bfmi=nuts.bfmi)
print("gates passed:", gate.passed)
for failure in gate.failures:
    print("  -", failure)
gate.table

# %% [markdown]
# With only 300 draws per chain the gates may well fail on a few of the 600 rates (the tail
# ESS is the usual culprit). Then the honest verdict is **"inconclusive"**: not "pass", and not
# "close enough". The remedy is more draws (the cross-check default is 1000 warm-up and 1500
# kept per chain), not a looser threshold.
#
# Now the raw coordinates. The table puts every group's diagnostics side by side.

# %%
def diag_row(name, draws):
    d = arviz_io.diagnostics(np.asarray(draws).reshape(*draws.shape[:2], -1))
    return {
        "quantity": name,
        "Q": d["r_hat"].size,
        "max R-hat": d["r_hat"].max(),
        "median R-hat": np.median(d["r_hat"]),
        "min bulk ESS": d["ess_bulk"].min(),
        "median bulk ESS": np.median(d["ess_bulk"]),
    }


raw_vs_identifiable = pd.DataFrame(
    [diag_row(n, post_nuts[n]) for n in ("theta", "beta")] + [diag_row(n, q_nuts[n]) for n in ("rate", "xi", "eta")]
)
raw_vs_identifiable

# %% [markdown]
# $\hat R$ for $\theta$ and $\beta$ is far above 1.01 and their ESS is a handful of draws,
# while the rates, $\xi$ and $\eta$ are close to the gates. The traces (the user whose
# $\theta$ has the worst $\hat R$, and that user's largest count) show why: each chain settles
# on its own *labeling* of the two components. In some chains component 0 carries the
# user's weight, in the others component 1, and no chain crosses over in 300 draws. The
# chains disagree about every coordinate of $\theta_u$, yet they agree about the rate
# $\theta_u^\top\beta_i$. Nothing is wrong with the sampler or the model: the coordinates
# are simply not identified, and a diagnostic on them measures the symmetry, not convergence.

# %%
theta_rhat = arviz_io.diagnostics(post_nuts["theta"].reshape(4, -1, n_users * K))["r_hat"].reshape(n_users, K)
u = int(np.argmax(theta_rhat.max(axis=1)))
i = int(np.argmax(y[u]))
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharex=True)
for chain in range(post_nuts["theta"].shape[0]):
    axes[0].plot(post_nuts["theta"][chain, :, u, 0], lw=0.6, label=f"chain {chain}")
    axes[1].plot(post_nuts["theta"][chain, :, u, 1], lw=0.6)
    axes[2].plot(q_nuts["rate"][chain, :, u * n_items + i], lw=0.6)
axes[0].set(title=f"theta[{u}, 0]  (R-hat {theta_rhat[u, 0]:.2f})", xlabel="draw")
axes[1].set(title=f"theta[{u}, 1]  (R-hat {theta_rhat[u, 1]:.2f})", xlabel="draw")
axes[2].set(title=f"rate theta[{u}] . beta[{i}]  (y = {y[u, i]:.0f})", xlabel="draw")
axes[0].legend(fontsize=7)
fig.tight_layout()

# %% [markdown]
# ## 7. CAVI against NUTS
#
# `validation.checks.crosscheck.compare_vi` summarizes the gap, group by group: the correlation of
# log posterior means, the median relative error, the *standardized* error
# $|m_{\text{VI}} - m_{\text{NUTS}}| / \mathrm{sd}_{\text{NUTS}}$ (gated at a median of 0.5),
# the ratio of posterior standard deviations $\mathrm{sd}_{\text{VI}} / \mathrm{sd}_{\text{NUTS}}$,
# and how often the VI 90% interval covers the NUTS mean. The verdict is "inconclusive"
# whenever the NUTS gates failed, whatever the numbers say.
#
# CAVI's side of the comparison is draws from the fitted $q$. It is a product of independent
# Gammas, so drawing from it is one NumPy call per factor. (`fit(n_draws=...)` would store
# such draws in the `posterior` group; its JAX sampler compiles anew for every array shape,
# which costs more than the whole draw here.)

# %%
def draws_from_q(state, n_draws, rng):
    """(chain=1, draw, ...) draws of theta, beta, xi, eta from the mean-field q."""

    def gamma(shape, rate):
        return rng.gamma(np.asarray(shape), 1.0 / np.asarray(rate), size=(1, n_draws, *np.shape(shape)))

    return {
        "theta": gamma(state.gamma_shape, state.gamma_rate),
        "beta": gamma(state.lambda_shape, state.lambda_rate),
        "xi": gamma(state.kappa_shape, state.kappa_rate),
        "eta": gamma(state.tau_shape, state.tau_rate),
    }


state_vi = cavi.state_from_inference_data(idata_vi)  # the HPFState that fit stored
q_vi = identifiable(draws_from_q(state_vi, 4000, np.random.default_rng(CAVI_SEED)))
verdict = crosscheck.compare_vi(q_nuts, q_vi, gate)
print("verdict:", verdict.status)
for reason in verdict.reasons:
    print("  -", reason)
verdict.table

# %%
def mean_sd(draws):
    flat = np.asarray(draws).reshape(-1, draws.shape[-1])
    return flat.mean(axis=0), flat.std(axis=0, ddof=1)


m_n, s_n = mean_sd(q_nuts["rate"])
m_v, s_v = mean_sd(q_vi["rate"])
observed = y.ravel() > 0
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
for ax, (xs, ys, what) in zip(axes[:2], ((m_n, m_v, "posterior mean"), (s_n, s_v, "posterior sd"))):
    ax.loglog(xs[~observed], ys[~observed], ".", ms=4, alpha=0.6, label="$y_{ui} = 0$")
    ax.loglog(xs[observed], ys[observed], ".", ms=4, alpha=0.6, label="$y_{ui} > 0$")
    lims = [min(xs.min(), ys.min()), max(xs.max(), ys.max())]
    ax.plot(lims, lims, "k-", lw=0.8)
    ax.set(xlabel=f"NUTS {what} of the rate", ylabel=f"CAVI {what} of the rate", title=f"{what} of the 600 rates")
    ax.legend(fontsize=8)
ratio = s_v / s_n
axes[2].hist(np.log2(ratio), bins=40)
axes[2].axvline(0, color="k", lw=0.8)
axes[2].set(xlabel=r"$\log_2(\mathrm{sd}_{\mathrm{VI}} / \mathrm{sd}_{\mathrm{NUTS}})$", ylabel="rates", title="sd ratio")
fig.tight_layout()
print(f"sd ratio of the rates: quartiles {np.round(np.quantile(ratio, [0.25, 0.5, 0.75]), 2)}, min {ratio.min():.2f}, max {ratio.max():.2f}")
print(f"sd ratio of the rates: median {np.median(ratio):.2f}, {np.mean(ratio < 1):.0%} of rates narrower under CAVI")
narrowest = ratio <= np.quantile(ratio, 0.1)
print(f"cells with y = 0: {np.mean(~observed):.0%} of all cells, {np.mean(~observed[narrowest]):.0%} of the 10% narrowest")
for name in ("xi", "eta"):
    r = mean_sd(q_vi[name])[1] / mean_sd(q_nuts[name])[1]
    print(f"sd ratio of {name}: median {np.median(r):.2f}, {np.mean(r < 1):.0%} narrower under CAVI")

# %% [markdown]
# ## Conclusion
#
# - The **generative program** is ten lines that read like the paper; it is the definition
#   of the posterior, and NUTS can sample it on small data.
# - The **hand-derived CAVI** solver implements that posterior's mean-field approximation:
#   every block update is a stationary point of the ELBO (`jax.grad` at rounding level),
#   every sparse computation equals its dense twin, and the ELBO never decreases.
# - The same checks **catch errors in the printed derivation**: the figure's activity
#   update leaves a large gradient; the corrected one leaves none.
# - On identifiable quantities, CAVI's posterior means sit well inside the NUTS posterior
#   (a median standardized error far below the 0.5 gate, log-mean correlations near 1).
# - Its standard deviations are *smaller* than the NUTS ones for most quantities: mean-field
#   VI drops the posterior correlations between $\theta$, $\beta$, $\xi$ and $\eta$, and so
#   is overconfident. On this small $K = 2$ problem the median shortfall is modest, and a
#   ratio within a few percent of 1 is inside the Monte Carlo error of a NUTS sd from a few
#   hundred effective draws ($\approx 1/\sqrt{2\,\mathrm{ESS}}$); the long left tail of the
#   histogram, mostly cells with $y_{ui} = 0$, is where $q$ is clearly too narrow. Use CAVI's
#   means for ranking; treat its intervals with care.
# - Raw factor coordinates are the wrong thing to compare or to gate on: NUTS "mixes badly"
#   on them even when everything is right.
# - With 4 x 300 draws the NUTS reference usually misses some of its ArviZ gates (the list is
#   printed in section 6); then the verdict is "inconclusive", the honest outcome.
#   `factorbayes crosscheck hpf` runs the full-size version (1000 warm-up and 1500 kept draws
#   per chain, four CAVI restarts) and writes a report.

# %%
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s (after imports)")
