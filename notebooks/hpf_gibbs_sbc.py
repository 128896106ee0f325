# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # HPF by Gibbs sampling, and how to know that a sampler is right
#
# The companion notebook `hpf.py` fits hierarchical Poisson factorization (HPF; seed
# `001_30a2018ec18c20b9.txt`, "Complete conditionals") by coordinate-ascent variational
# inference and checks it against NUTS. This one uses the same complete conditionals for
# an *exact* method, a **blocked Gibbs sampler** written in JAX
# (`custom_inference.hpf_gibbs`), and validates it at three levels:
#
# 1. **each conditional** against the NumPyro program's own density, normalized by brute
#    force on a grid, and the allocation of counts to components by a chi-square test;
# 2. **the posterior**: Gibbs, CAVI and NUTS on one small simulated matrix, and one Gibbs
#    block run *inside* NumPyro (`CustomGibbs`) with NUTS on the other sites;
# 3. **calibration over the prior**: simulation-based calibration (SBC), which needs no
#    reference sampler at all.
#
# At every level we also run a deliberately wrong sampler, the seed's *printed*
# conditionals for the activities $\xi$ and popularities $\eta$, to see whether the check
# can tell. Everything is small, so that the notebook needs about 90 s of CPU on a 2-core
# machine (most of it JAX compiling small programs); the real runs are the `factorbayes`
# commands named at the end. Float64 throughout, every seed fixed.

# %%
import dataclasses
import inspect
import os
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets

import numpyro  # noqa: E402

# As in hpf.py, before JAX starts its backend: fewer LLVM optimizations (this notebook
# compiles many small programs once each, so compiling costs more than running), and
# 4 virtual CPU devices so that NUTS runs its 4 chains in parallel.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
numpyro.set_host_device_count(4)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from IPython.display import Image, display  # noqa: E402

from custom_inference import arviz_io  # noqa: E402
from custom_inference import hpf as cavi  # noqa: E402
from custom_inference import hpf_gibbs as gibbs  # noqa: E402
from custom_inference.data import Observations  # noqa: E402
from ppl_models import hpf as ppl  # noqa: E402
from validation.checks import crosscheck, gates, sbc  # noqa: E402
from validation.models import hpf as vhpf  # noqa: E402
from validation.models import hpf_gibbs as vg  # noqa: E402

pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
NOTEBOOK_START = time.perf_counter()
NOTEBOOK_CPU_START = time.process_time()

# %% [markdown]
# `validation.checks.sbc` selects matplotlib's non-interactive "Agg" backend when it is imported
# (it writes PNG files). In a notebook that switches inline figures off, so we switch them
# back on:

# %%
# %matplotlib inline

# %% [markdown]
# ## 1. The complete conditionals
#
# The model, with every Gamma in the (shape, rate) convention
# ($\mathrm{Gamma}(\alpha, \rho)$ has density $\propto x^{\alpha-1}e^{-\rho x}$ and mean
# $\alpha/\rho$; NumPyro's `dist.Gamma(concentration, rate)` is the same):
#
# $$
# \xi_u \sim \mathrm{Gamma}(a', a'/b'),\quad
# \theta_{uk} \mid \xi_u \sim \mathrm{Gamma}(a, \xi_u),\quad
# \eta_i \sim \mathrm{Gamma}(c', c'/d'),\quad
# \beta_{ik} \mid \eta_i \sim \mathrm{Gamma}(c, \eta_i),\quad
# y_{ui} \sim \mathrm{Poisson}\big(\textstyle\sum_k \theta_{uk}\beta_{ik}\big).
# $$
#
# **The prior rate $a'/b'$.** The paper (UAI 2015) and `hpfrec` give the activity the
# prior rate $a'/b'$, so that $b'$ is its prior *mean*; factorbayes follows them (and
# likewise $c'/d'$ for the popularity). The seed's printed conditionals below have $b'$ and
# $d'$ where this model has $a'/b'$ and $c'/d'$: they belong to a different prior, and used
# with this one they sample the wrong posterior. (`hpf.py`, section 1, has the details; the
# seed's $\beta$ conditional also prints shape $a$ where it should be $c$. Both are in
# `validation.checks.errata`.)
#
# **Augmentation.** The Poisson of a sum is not conjugate to anything, but a sum of
# independent Poissons is Poisson with the summed rate, so we may write
# $y_{ui} = \sum_k z_{uik}$ with $z_{uik} \sim \mathrm{Poisson}(\theta_{uk}\beta_{ik})$
# without changing the model for $y$. The joint density of everything is then a product of
# Gammas and Poissons, and each complete conditional is read off by collecting, for one
# variable, the coefficients of $\log x$ and of $-x$:
#
# - $\theta_{uk}$ appears in its prior, $(a - 1)\log\theta_{uk} - \xi_u\theta_{uk}$, and in
#   the Poisson terms of $z_{u1k}, \dots, z_{uJk}$, $z_{uik}\log\theta_{uk} - \theta_{uk}\beta_{ik}$,
#   for **every** item $i$ (where $y_{ui} = 0$, $z_{uik} = 0$ but the exposure
#   $\theta_{uk}\beta_{ik}$ is still there);
# - $\xi_u$ appears in its prior, $(a' - 1)\log\xi_u - (a'/b')\xi_u$, and in its $K$
#   children, $a\log\xi_u - \xi_u\theta_{uk}$;
# - given $\theta$ and $\beta$, the $K$ independent Poissons conditioned on their sum
#   $y_{ui}$ are multinomial.
#
# $$
# \begin{aligned}
# \theta_{uk} \mid \cdot &\sim \mathrm{Gamma}\!\left(a + \textstyle\sum_i z_{uik},\ \ \xi_u + \sum_i \beta_{ik}\right), &
# \xi_u \mid \theta &\sim \mathrm{Gamma}\!\left(a' + Ka,\ \ a'/b' + \textstyle\sum_k \theta_{uk}\right),\\
# \beta_{ik} \mid \cdot &\sim \mathrm{Gamma}\!\left(c + \textstyle\sum_u z_{uik},\ \ \eta_i + \sum_u \theta_{uk}\right), &
# \eta_i \mid \beta &\sim \mathrm{Gamma}\!\left(c' + Kc,\ \ c'/d' + \textstyle\sum_k \beta_{ik}\right),\\
# z_{ui} \mid \theta, \beta, y &\sim \mathrm{Mult}\!\left(y_{ui},\ \pi_{ui}\right),\quad
# \pi_{uik} = \frac{\theta_{uk}\beta_{ik}}{\sum_l \theta_{ul}\beta_{il}} . &&
# \end{aligned}
# $$
#
# The seed prints the $\xi$ and $\eta$ rates as $b' + \sum_k \theta_{uk}$ and
# $d' + \sum_k \beta_{ik}$.
#
# **Why $z$ is never stored.** $z$ enters the Gamma conditionals only through its sums:
# over items for each user ($I \times K$) and over users for each item ($J \times K$). And
# a multinomial draw $z_{ui} \sim \mathrm{Mult}(y_{ui}, \pi_{ui})$ is the same as letting
# each of the $y_{ui}$ units of the count pick a component on its own, by one categorical
# draw with probabilities $\pi_{ui}$. So the sampler expands $y$ once into its
# $T = \sum_{ui} y_{ui}$ units (`custom_inference.data.CountUnits`), draws one categorical
# per unit, and scatter-adds the choices straight into the two tables of sums. The
# exposures $\sum_i \beta_{ik}$ and $\sum_u \theta_{uk}$ are column sums over *all* items
# and users, so zeros are never visited one by one. A sweep costs $O(TK + (I + J)K)$ and
# memory $O(T + (I + J)K)$.

# %%
print(inspect.getsource(gibbs.allocate))
print(inspect.getsource(gibbs.theta_conditional))
print(inspect.getsource(gibbs.xi_conditional))

# %% [markdown]
# One sweep (`gibbs.step`) draws $z$, then $\theta$ and $\xi$, then $\beta$ and $\eta$, each
# from its conditional given the current values of the others: a systematic-scan Gibbs
# sampler, which leaves the posterior invariant. `gibbs.sample` runs several chains at
# once (`jax.vmap`) and returns an ArviZ `InferenceData`.
#
# ## 2. Checking each conditional against the generative program
#
# A conditional can be checked without any sampling. `vg.conditional_checks` draws a
# state and a data set from the prior, takes one coordinate of each of $\theta$, $\xi$,
# $\beta$, $\eta$, evaluates the **NumPyro program's** joint log density
# (`numpyro.infer.util.log_density` of `ppl_models.hpf.model`) with that coordinate moved
# along a grid of 20001 points, normalizes it numerically, and measures the total-variation
# distance to the Gamma that the sampler draws from. With $K = 1$ every unit belongs to the
# one component, so $z$ is fixed at $y$ and the $\theta$ and $\beta$ conditionals can be
# checked against the program directly. Quadrature error is about $10^{-8}$; the check
# passes below $10^{-4}$.

# %%
hyper = vhpf.CrosscheckConfig().hyper  # a = c = 0.5, a' = c' = 2, b' = d' = 1 (hpf.py, section 2)
print(hyper)
vg.conditional_checks(hyper)

# %% [markdown]
# The seed's printed $\xi$ and $\eta$ conditionals need no second copy of the sampler:
# given the hyperparameters $b'' = a'/b'$ and $d'' = c'/d'$, the correct code uses the prior
# rates $a'/b'' = b'$ and $c'/d'' = d'$, which is exactly the printed form.
# `vg.printed_conditionals_hyper` makes that substitution; the model (the NumPyro program)
# keeps the true hyperparameters. With $a' = 2$ and $b' = 1$ the printed prior rate is 1
# instead of 2, and the check rejects $\xi$ and $\eta$, while $\theta$ and $\beta$ (which do
# not involve $b'$ or $d'$) still pass:

# %%
printed = vg.printed_conditionals_hyper(hyper)
print(printed)
vg.conditional_checks(hyper, sampler_hyper=printed)

# %% [markdown]
# The allocation is checked by counting: one count $y = 1$ on a $1 \times 1$ matrix with
# $K = 4$ and fixed $\theta, \beta$, allocated many times with independent keys. The
# frequencies must be $\pi_k = \theta_k\beta_k / \sum_l \theta_l\beta_l$ (a chi-square
# test; a p-value is uniform when the allocation is right, so only a tiny one would be a
# warning).

# %%
p_alloc, observed, expected = vg.allocation_check(seed=0, n_draws=1000)
print(f"chi-square p-value: {p_alloc:.3f}")
pd.DataFrame({"observed": observed, "expected": expected, "pi_k": expected / expected.sum()},
             index=pd.Index(range(4), name="component"))

# %% [markdown]
# ## 3. Gibbs, CAVI and NUTS on the same matrix
#
# A $15 \times 12$ matrix with $K = 2$, drawn from the prior. Three methods fit it:
#
# - **Gibbs**: 4 chains of 100 warm-up sweeps and 200 kept draws, one kept every 10
#   sweeps (the sampler moves the rates slowly: successive sweeps are strongly correlated);
# - **NUTS** on the NumPyro program ($z$ summed out): 4 chains of 300 warm-up and 300 kept
#   draws, far fewer than the cross-check default of 1000 + 1500;
# - **CAVI** (`hpf.py`), one run to a relative ELBO change of $10^{-9}$, with 2000 draws from
#   the fitted $q$. CAVI is given every cell of the matrix, zeros included (`all_cells`): a
#   zero adds nothing to its updates or its ELBO, so the fit is the one from the nonzeros
#   alone, but every $15 \times 12$ matrix then has the same array shapes, and section 5
#   reuses the compiled CAVI sweep instead of compiling one per data set.
#
# As in `hpf.py`, only identifiable quantities are compared: every expected rate
# $\theta_u^\top\beta_i$ (180 of them), the activities $\xi_u$ and the popularities $\eta_i$.
# The raw factors are identified only up to a permutation of the components (and a
# rescaling the prior barely pins down).
#
# `vg.run_gibbs_crosscheck` runs the Gibbs sampler, gates **both** exact runs with the
# ArviZ convergence gates (rank-normalized $\hat R \le 1.01$, bulk and tail ESS $\ge 400$,
# and for NUTS no divergences and E-BFMI $\ge 0.3$), and compares them with
# `crosscheck.compare_exact`.

# %%
config = vhpf.CrosscheckConfig(n_users=15, n_items=12, n_components=2, num_chains=4, num_warmup=300, num_samples=300)
gibbs_config = vg.GibbsCrosscheckConfig(num_chains=4, num_warmup=100, num_samples=200, thin=10)
K = config.n_components
_, y = ppl.simulate(jax.random.PRNGKey(config.seed), config.n_users, config.n_items, K, config.hyper)
y = np.asarray(y, dtype=np.float64)
data = Observations.from_dense(y)  # nonzeros only
print(f"{data}; total count T = {y.sum():.0f}, largest count {y.max():.0f}")


def all_cells(y):
    """Observations with every cell of y stored, zeros included."""
    rows, cols = np.indices(y.shape)
    return Observations.from_coo(rows.ravel(), cols.ravel(), y.ravel(), y.shape, drop_zeros=False)


nuts = vhpf.run_nuts_reference(y, config, progress=False)
print(f"NUTS: {nuts.seconds:.1f} s, {nuts.divergences} divergent transitions, "
      f"E-BFMI per chain {np.round(nuts.bfmi, 2)}")
gibbs_result = vg.run_gibbs_crosscheck(y, config, gibbs_config, nuts=nuts)
for name, line in gibbs_result.settings.items():
    print(f"{name}: {line}")

# %% [markdown]
# The gates, for both runs:

# %%
exact = gibbs_result.verdict
print("gates passed:", exact.gates.passed)
for failure in exact.gates.failures:
    print("  -", failure)
exact.gates.table

# %% [markdown]
# **Gibbs against NUTS.** Both are exact, so their posterior means may differ only by Monte
# Carlo error. For each quantity, $z_q = |\bar m_{\text{Gibbs}} - \bar m_{\text{NUTS}}| /
# \sqrt{\mathrm{MCSE}_{\text{Gibbs}}^2 + \mathrm{MCSE}_{\text{NUTS}}^2}$ (ArviZ's ESS-based
# MCSE); a group fails when its largest $z_q$ passes the Bonferroni threshold for a 1%
# false-alarm rate per group. `median_sd_ratio` is $\mathrm{sd}_{\text{Gibbs}} /
# \mathrm{sd}_{\text{NUTS}}$.

# %%
print("verdict:", exact.status)
for reason in exact.reasons:
    print("  -", reason)
exact.table

# %% [markdown]
# **CAVI against NUTS** (`crosscheck.compare_vi`, as in `hpf.py`): an approximation is not
# expected to agree within Monte Carlo error, so the table measures the gap: correlation of
# log posterior means, standardized error $|m_{\text{VI}} - m_{\text{NUTS}}| /
# \mathrm{sd}_{\text{NUTS}}$ (gated at a median of 0.5), the sd ratio and the coverage of the
# NUTS means by the VI 90% intervals. It is gated on the NUTS run alone.

# %%
idata_vi = cavi.fit(0, all_cells(y), K, config.hyper, max_iter=5000, tol=1e-9, n_draws=2000, progress=False).idata
print(f"CAVI: converged {bool(idata_vi.vi_trace.attrs['converged'])} after {idata_vi.vi_trace.attrs['n_iter']} sweeps")
q_nuts, q_gibbs = gibbs_result.nuts_quantities, gibbs_result.solver_quantities
q_vi = vhpf.identifiable_quantities(idata_vi)
nuts_gate = gates.nuts_gates(q_nuts, divergences=nuts.divergences, bfmi=nuts.bfmi)
approx = crosscheck.compare_vi(q_nuts, q_vi, nuts_gate)
print("verdict:", approx.status)
for reason in approx.reasons:
    print("  -", reason)
approx.table


# %% [markdown]
# With runs this short, both verdicts are **"inconclusive"**: the NUTS reference misses the
# $\hat R$ and tail-ESS gates on a few of its 180 rates (and the Gibbs run may miss some of
# its own), and then no comparison may say "pass", whatever its numbers. That is the honest
# outcome, and the remedy is longer runs, not looser gates. The numbers are still worth
# reading, as long as they are read as such. In the Gibbs-NUTS table every group's largest
# standardized difference stays below its threshold and the sd ratios are close to 1. In the
# CAVI table the means are close (median standardized error far below 0.5, log-mean
# correlations above 0.99), while the sd ratios are below 1. The figure shows the same:
# the posterior means of the rates from the two exact samplers lie on the diagonal, CAVI's
# scatter a little around it, and CAVI's standard deviations are mostly *below* those of
# NUTS (mean-field VI drops the posterior correlations) while the Gibbs sds scatter
# evenly around them.

# %%
def mean_sd(draws):
    flat = np.asarray(draws).reshape(-1, draws.shape[-1])
    return flat.mean(axis=0), flat.std(axis=0, ddof=1)


(m_n, s_n), (m_g, s_g), (m_v, s_v) = (mean_sd(q["rate"]) for q in (q_nuts, q_gibbs, q_vi))
fig, axes = plt.subplots(1, 4, figsize=(16, 3.9))
pairs = ((m_n, m_g, "NUTS", "Gibbs"), (m_n, m_v, "NUTS", "CAVI"), (m_g, m_v, "Gibbs", "CAVI"))
for ax, (xs, ys, xl, yl) in zip(axes[:3], pairs):
    ax.loglog(xs, ys, ".", ms=4, alpha=0.7)
    lims = [min(xs.min(), ys.min()), max(xs.max(), ys.max())]
    ax.plot(lims, lims, "k-", lw=0.8)
    ax.set(xlabel=f"{xl} posterior mean", ylabel=f"{yl} posterior mean", title=f"rates: {yl} vs {xl}")
axes[3].loglog(s_n, s_g, ".", ms=4, alpha=0.7, label="Gibbs")
axes[3].loglog(s_n, s_v, ".", ms=4, alpha=0.7, label="CAVI")
lims = [s_n.min(), s_n.max()]
axes[3].plot(lims, lims, "k-", lw=0.8)
axes[3].set(xlabel="NUTS posterior sd", ylabel="posterior sd", title="rates: posterior sd")
axes[3].legend(fontsize=8)
fig.tight_layout()
for name, s in (("Gibbs", s_g), ("CAVI", s_v)):
    r = s / s_n
    print(f"sd ratio {name}/NUTS of the 180 rates: median {np.median(r):.2f}, "
          f"quartiles {np.round(np.quantile(r, [0.25, 0.75]), 2)}, {np.mean(r < 1):.0%} below 1")

# %% [markdown]
# ## 4. One Gibbs block inside NumPyro
#
# The comparison above tests the whole sampler at once. A finer test swaps **one** block
# into NumPyro: `vg.numpyro_block("xi", ...)` wraps the $\xi$ conditional as a `gibbs_fn`
# for `numpyro.infer.CustomGibbs`, and `vg.run_hybrid` runs it with NUTS on the remaining
# sites of the *same* NumPyro program. If the conditional is right, the hybrid chain targets
# the same posterior as all-NUTS; a wrong conditional shows up on its own, with NUTS
# sampling everything else correctly. We run it with the correct conditional and with the
# printed one (`block_hyper=printed`; the model keeps the true hyperparameters), each 4 chains
# of 150 warm-up and 150 kept draws, and compare with the NUTS run of section 3.
#
# `run_hybrid` records no divergences or E-BFMI, so the hybrid runs are gated on $\hat R$ and
# ESS alone, and, as in `run_gibbs_crosscheck`, together with the NUTS reference.

# %%
def gated_compare(name, idata):
    q = vhpf.identifiable_quantities(idata)
    own = gates.nuts_gates(q, divergences=0, bfmi=np.array([]))
    both = gates.GateResult(
        passed=own.passed and nuts_gate.passed,
        failures=[f"{name} {f}" for f in own.failures] + [f"NUTS {f}" for f in nuts_gate.failures],
        table=pd.concat([own.table.assign(method=name), nuts_gate.table.assign(method="nuts")], ignore_index=True),
        divergences=nuts_gate.divergences,
        bfmi=nuts_gate.bfmi,
        n_chains=min(own.n_chains, nuts_gate.n_chains),
    )
    return crosscheck.compare_exact(q, q_nuts, both)


hybrid_settings = dict(seed=2, num_chains=4, num_warmup=150, num_samples=150)
hybrid_runs = {
    "correct xi block": vg.run_hybrid(y, K, hyper, "xi", **hybrid_settings),
    "printed xi block": vg.run_hybrid(y, K, hyper, "xi", block_hyper=printed, **hybrid_settings),
}
hybrid_verdicts = {name: gated_compare(name, idata) for name, idata in hybrid_runs.items()}
for name, v in hybrid_verdicts.items():
    print(f"{name}: verdict {v.status}")
    for reason in v.reasons:
        print("  -", reason)
pd.concat({name: v.table.set_index("quantity") for name, v in hybrid_verdicts.items()})

# %% [markdown]
# Read `max_z` against `threshold`. With the correct block every group stays below its
# threshold, as Monte Carlo error would have it. With the printed block the activities are
# off by many MCSEs (every one of the 15 by more than 3), and so are several popularities:
# the block draws $\xi$ with prior rate $b' = 1$ instead of $a'/b' = 2$, so $\xi$ comes out
# too large (and too wide: see the sd ratio); given larger $\xi$, NUTS draws smaller
# $\theta$, $\beta$ grows to keep the rates that the data ask for, and $\eta$ follows
# $\beta$. The rates themselves, which the data pin down, stay below the threshold.
#
# Both statuses read "inconclusive", because these short hybrid runs (and the NUTS reference)
# miss some gates; the check reports that rather than a "fail" or a "pass", as it must. The
# size of the gap still speaks: a failed ESS gate means MCSEs that may be off by tens of
# percent, which cannot turn a difference of 20 MCSE into Monte Carlo noise.
#
# ## 5. Simulation-based calibration
#
# The comparisons so far need a trusted reference and say something about one data set.
# **SBC** (Talts, Betancourt, Simpson, Vehtari and Gelman, 2018) needs neither. Draw
# parameters $\tilde\vartheta$ from the prior and data $\tilde y$ from the model given them;
# then $\tilde\vartheta$ is a draw from the exact posterior $p(\vartheta \mid \tilde y)$. So if
# the algorithm returns $L$ independent draws from that posterior, the **rank** of
# $f(\tilde\vartheta)$ among the $L$ values $f(\vartheta_1), \dots, f(\vartheta_L)$ is uniform
# on $\{0, \dots, L\}$, for every scalar $f$. Repeat for many simulated data sets and test the
# ranks for uniformity. Posteriors that are too narrow pile the ranks at both ends (a U),
# too wide in the middle (a hump), and a biased posterior tilts them to one side.
#
# `vg.sbc_adapters(solver, config)` supplies `simulate`, `fit` and the test quantities
# (`functionals`): $\log\xi_u$ and $\log\eta_i$ for the first three users and items, three
# expected rates and the log of the total rate: 10 scalars. `sbc.run_sbc` does the rest.
# Uniformity is judged by the simultaneous ECDF band of Säilynoja, Bürkner and Vehtari (2022)
# at $\alpha = 0.05$, with a Bonferroni correction over the 10 scalars for the overall
# verdict (row "all"), and Pearson's chi-square on bins as a second opinion.
#
# Here the runs are tiny: **20 simulations** of the problem of section 3 ($15 \times 12$,
# $K = 2$, the same hyperparameters), $L = 19$, and the Gibbs settings of section 3 cut short:
# 4 chains of 100 warm-up sweeps and 5 draws 10 sweeps apart, 20 draws in all, of which 19 are
# ranked. (Same array sizes and sweep counts, so JAX can reuse the sampler compiled in section 3.)
# Ranks are uniform only for (nearly) independent draws; these are four independent chains,
# but within a chain draws 10 sweeps apart are still correlated for the slowest quantities, a
# small departure that 20 simulations cannot see. CAVI ranks 19 of 200 independent draws from $q$.

# %%
sbc_config = vg.SBCConfig(
    n_users=config.n_users, n_items=config.n_items, n_components=K, hyper=hyper,
    gibbs_chains=4, gibbs_warmup=gibbs_config.num_warmup, gibbs_samples=5, gibbs_thin=gibbs_config.thin,
    cavi_max_iter=1000, n_q_draws=200,
)
N_SIMS, L = 20, 19
print(sbc_config)


def cavi_fit_all_cells(y, seed):
    """The "cavi" adapter's fit, with all I x J cells stored (`all_cells`)."""
    c = sbc_config
    idata = cavi.fit(seed, all_cells(y), c.n_components, c.hyper, max_iter=c.cavi_max_iter, tol=1e-8,
                     n_draws=c.n_q_draws, progress=False).idata
    post = {n: v.reshape(-1, *v.shape[2:]) for n, v in arviz_io.group_arrays(idata).items()}
    return {n: post[n] for n in ("theta", "xi", "beta", "eta")}


# %% [markdown]
# One detail for CAVI: its compiled sweep depends on the number of stored entries, which
# differs from one simulated matrix to the next, so the adapter's `fit` (which stores the
# nonzeros) would compile anew for almost every simulation. `cavi_fit_all_cells` is the
# adapter's `fit` with every cell stored, as in section 3, so all simulations share the sweep
# compiled there.

# %%
sbc_results = {}
for solver in ("gibbs", "gibbs-printed", "cavi"):
    simulate, fit, functionals = vg.sbc_adapters(solver, sbc_config)
    if solver == "cavi":
        fit = cavi_fit_all_cells
    start = time.perf_counter()
    sbc_results[solver] = sbc.run_sbc(simulate, fit, functionals, n_sims=N_SIMS, master_seed=0, n_draws=L,
                                      progress=False, method=solver)
    print(f"{solver:14s} {N_SIMS} simulations in {time.perf_counter() - start:5.1f} s "
          f"(median fit {np.median(sbc_results[solver].seconds):.2f} s)")

# %% [markdown]
# The uniformity tests, per functional (the Bonferroni family of its scalars) and overall
# (row "all", all 10 scalars at $\alpha/10$). `ecdf_p` is the ECDF test's p-value (for a
# family: the smallest of its scalars, to be compared with `alpha_used`); `mean_rank` should
# be near $L/2 = 9.5$.

# %%
uniformity = {solver: r.uniformity(alpha=0.05) for solver, r in sbc_results.items()}
families = pd.concat(
    {solver: t[t.kind == "family"].set_index("functional")[["alpha_used", "ecdf_p", "ecdf_pass", "chi2_p", "mean_rank"]]
     for solver, t in uniformity.items()}
)
families

# %% [markdown]
# A second summary, which SBC gets for free: the z-scores $(f(\tilde\vartheta) - \bar f) /
# \mathrm{sd}(f)$ of the truth under each fitted posterior. Averaged over the prior, an exact
# posterior gives a mean near 0 and a standard deviation near 1; a standard deviation above 1
# means posteriors that are too narrow, a mean away from 0 a bias. (Approximate for skewed
# quantities, and noisy with 20 simulations.)

# %%
pd.DataFrame(
    {(solver, stat): {name: f(z) for name, z in r.z_scores().items()}
     for solver, r in sbc_results.items() for stat, f in (("mean z", np.nanmean), ("sd z", np.nanstd))}
)

# %% [markdown]
# The plots of `sbc.plot_ranks`, for $\log\xi$: rank histograms of each scalar with the 99%
# band of Talts et al. per bin (grey), and below them the ECDF of the ranks minus the uniform
# CDF, with the simultaneous 95% band (grey) and the Bonferroni band for the three scalars
# (dashed). Under uniformity each curve stays inside the band. Then the expected rates under
# CAVI.

# %%
def show_ranks(result, functional):
    """`sbc.plot_ranks` of one functional, shown inline."""
    one = dataclasses.replace(result, ranks={functional: result.ranks[functional]})
    with tempfile.TemporaryDirectory() as tmp:
        (path,) = sbc.plot_ranks(one, tmp)
        display(Image(filename=path, width=760))


for solver, result in sbc_results.items():
    show_ranks(result, "log_xi")
show_ranks(sbc_results["cavi"], "rate")

# %% [markdown]
# What these small runs can and cannot say:
#
# - **Correct Gibbs sampler**: every functional passes at its Bonferroni level, and so does
#   the overall verdict. That is weak evidence: with 20 simulations the band is wide (an
#   ECDF may stray by about 0.25 from the diagonal), and only a gross error leaves it.
# - **Printed conditionals**: the error is gross, and the test sees it. $\log\xi$ and
#   $\log\eta$ fail at their Bonferroni levels, and the overall verdict fails. Their ranks
#   pile up at the low end (mean ranks far below $L/2$, negative mean z-scores): the truth
#   lies below most posterior draws, because the printed prior rate ($b' = 1$ instead of
#   $a'/b' = 2$) pushes $\xi$ and $\eta$ up. Not every scalar shows it equally (in the plot,
#   one of the three users' curves stays inside the band). The rate functionals pass: as in
#   section 4, $\theta$ and $\beta$ absorb the shift, so the rates the data pin down come
#   out nearly right.
# - **CAVI**: passes every test here, which means only "not detected". Mean-field posteriors
#   are too narrow, which shows in SBC as a U-shaped rank histogram; but in section 3 its sds
#   were only about 7% too small at the median, far below what 20 simulations can detect. The
#   z-scores of the rates hint at it (their sd is larger under CAVI than under Gibbs), but
#   the Gibbs value, itself above 1 for an exact sampler, shows how rough that summary is at
#   $N = 20$, $L = 19$.
#
# With so few simulations the test has little power: a sampler can pass while being
# somewhat wrong. The real check is
#
# ```
# factorbayes sbc hpf --solver gibbs --sims 200
# ```
#
# (likewise `--solver cavi`, `nuts`, `gibbs-printed`): 200 simulations with $L = 99$ and the
# longer default chains of `vg.SBCConfig()`, with a Markdown report and these plots; `pytest
# -m slow` runs the same for the test suite.
#
# ## Conclusion
#
# - The complete conditionals follow from the augmented joint by collecting coefficients of
#   $\log x$ and $-x$; $z$ enters only through row and column sums, so the sampler allocates
#   units of counts and never stores $z$.
# - Checked one at a time against the NumPyro program, the sampler's conditionals agree to
#   rounding level; the seed's printed $\xi$/$\eta$ conditionals do not (total variation
#   0.2 to 0.3), and the allocation has the multinomial frequencies (no significant
#   departure in 1000 draws).
# - On one small data set, the Gibbs and NUTS means differ by no more than Monte Carlo error,
#   and CAVI's means are close while its sds are mostly smaller. With runs this short the
#   formal verdicts are "inconclusive", and they say so. `factorbayes crosscheck hpf
#   --solver gibbs` runs the full-size version.
# - A single wrong block inside NumPyro (`CustomGibbs` beside NUTS) is far off NUTS on the
#   quantities it touches; the correct block is not.
# - SBC needs no reference sampler and tests calibration over the whole prior. At 20
#   simulations it catches the printed conditionals but not CAVI's narrowness; at 200
#   simulations with $L = 99$ (the CLI) it is a real test.

# %%
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s wall, "
      f"{time.process_time() - NOTEBOOK_CPU_START:.0f} s CPU (after imports)")
