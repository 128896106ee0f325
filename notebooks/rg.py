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
# # One-class collaborative filtering with random graphs (RG)
#
# This notebook follows Paquet and Koenigstein's random-graph model (seed
# `003_203f63200c0d7157.txt`). One-class data only shows what users *liked* (watched,
# bought): the observed bipartite graph **G**. The model explains every missing edge in two
# stages:
#
# 1. a hidden **"considered" graph H** (G is a subgraph of H): a user never saw most items;
# 2. a **logistic "like" model on H**: an edge (m, n) of H is liked, g_mn = 1, with
#    probability `sigma(u_m . v_n + b_m + b_n)`; a considered but unliked edge is a
#    "negative" that we never observe.
#
# H is never observed. The paper draws it from a popularity histogram (eqs. 7-9), fits a
# mean-field Gaussian q to the parameters with the Jaakkola-Jordan bound on each sigmoid,
# and averages the updates over sampled graphs with Robbins-Monro weights (sec. 5.1). It
# ranks items by the like probability of eq. (19), by popularity, or by their product.
#
# We go from the NumPyro program given H (`ppl_models.rg`) to the hand-derived solver
# (`custom_inference.rg`) and check it with `validation.models.rg`. No NUTS here (see the end for
# the cross-check). It needs about 35 s of CPU on a 2-core machine, most of it JAX compiling
# small programs; everything is float64 and seeded.

# %%
import inspect
import os
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    # many small programs, each run once: cheaper compilation matters more than fast code
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from custom_inference import rg as rg_vb  # noqa: E402
from custom_inference.data import Observations  # noqa: E402
from ppl_models import rg as rg_ppl  # noqa: E402
from validation.models import rg as v_rg  # noqa: E402
from validation.checks import updates  # noqa: E402
from validation.checks.errata import run_errata  # noqa: E402

pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)

DATA_SEED = 0  # the simulated truth (H, parameters, G)
GRAPH_SEED = 1  # the histogram study of section 2
VB_SEED = 0  # VB initialisation and the graphs H_t ~ q(H) drawn by `fit`

# %% [markdown]
# ## 1. The generative program given H
#
# Given the edges of H, the program is a Bayesian logistic matrix factorization restricted
# to those edges (eqs. 2-5): Gaussian user and item vectors and biases, Gamma(alpha, beta)
# hyperpriors on their precisions, and a Bernoulli like/dislike outcome on each edge of H.
# Pairs outside H have g = 0 with probability 1 (eq. 3) and drop out of the likelihood, so
# the work is O(|H| K). As in the paper's experiments (sec. 6.1) the user biases are
# clamped at zero.

# %%
print(inspect.getsource(rg_ppl.model))

# %% [markdown]
# We use the program as a simulator. The truth: 300 users and 100 items with a heavy-tailed
# (Pareto) item popularity; each user *considers* 4 + Poisson(20) items drawn by popularity
# without replacement, which is the true H; the program then draws u, v, b and the outcome
# g on every edge of H (K = 2, hyperparameters Gamma(10, 40), i.e. precisions near 1/4 and
# factors of sd near 2, a strong signal). The solver sees only **G** = the edges with g = 1.

# %%
n_users, n_items, K = 300, 100, 2
rng = np.random.default_rng(DATA_SEED)
popularity = rng.pareto(1.0, n_items) + 1.0
popularity /= popularity.sum()
n_considered = np.minimum(4 + rng.poisson(20, n_users), n_items)
H_true = np.zeros((n_users, n_items), bool)
for m in range(n_users):
    H_true[m, rng.choice(n_items, n_considered[m], replace=False, p=popularity)] = True
h_users, h_items = np.nonzero(H_true)
truth, g_true = rg_ppl.simulate(jax.random.PRNGKey(DATA_SEED), h_users, h_items, n_users, n_items, K,
                                rg_ppl.RGHyper(alpha=10.0, beta=40.0))
g_true = np.asarray(g_true)
G = np.zeros((n_users, n_items))
G[h_users[g_true == 1], h_items[g_true == 1]] = 1.0
obs = Observations.from_dense(G, kind="binary")
# the true like probability of every pair (what eq. 19 estimates)
like_true = 1.0 / (1.0 + np.exp(-(np.asarray(truth["u"]) @ np.asarray(truth["v"]).T + np.asarray(truth["b_item"]))))
d_item = np.bincount(np.asarray(obs.cols), minlength=n_items)
d_user = np.bincount(np.asarray(obs.rows), minlength=n_users)
print(f"true H: {H_true.sum()} edges; G: {obs.nnz} liked edges ({obs.nnz / H_true.sum():.0%} of H, "
      f"{obs.nnz / G.size:.1%} of all pairs)")
print(f"user degrees {d_user.min()}..{d_user.max()}, item degrees {d_item.min()}..{d_item.max()}; "
      f"true precisions tau_u = {float(truth['tau_u']):.3f}, tau_v = {float(truth['tau_v']):.3f}, "
      f"tau_bv = {float(truth['tau_bv']):.3f}")

# %% [markdown]
# ## 2. The hidden-graph sampler q(H) and the histogram exponent
#
# Sec. 4.1 builds a plausible H from G alone: keep every observed edge, and for each user m
# add d_m "negative" edges (as many as her likes, so |H| = 2|G|) drawn **without
# replacement** among the items she has not liked, from a histogram over items
#
# - (7) `pi_n = d_n ** gamma` (d_n the observed item degree),
# - (8) `pi_max = r * d_max`: the most popular item gets r times as many negatives as likes.
#
# Substituting (7) into (8), `d_max ** gamma = r d_max`, so `gamma log d_max = log r + log d_max`:
#
# - corrected (9): `gamma = 1 + log r / log d_max`,
# - printed (9): `gamma = 1 - log d_max / log r`, which does not satisfy (8).
#
# With r = 1/2 (the paper's setting, `RGHyper().r`) the corrected gamma is just below 1: the
# negatives are a little *flatter* than the observed popularity, "a quality bar that drives
# popular items to be more generally liked". The printed form gives gamma far above 1 and piles
# the negatives onto the head of the catalogue.

# %%
hyper = rg_ppl.RGHyper()  # the paper's sec. 6.1 settings: alpha = beta = 0.01, r = 1/2, b_m clamped at 0
pi, gamma = rg_vb.popularity_weights(obs, hyper.r)
d_max = int(d_item.max())


def printed_gamma(d_max, r):
    return 1.0 - np.log(d_max) / np.log(r)


pd.DataFrame([{"d_max": dm, "r": hyper.r, "gamma corrected": rg_vb.histogram_exponent(dm, hyper.r),
               "gamma printed": printed_gamma(dm, hyper.r),
               "pi_max / d_max corrected": dm ** rg_vb.histogram_exponent(dm, hyper.r) / dm,
               "pi_max / d_max printed": dm ** printed_gamma(dm, hyper.r) / dm} for dm in (d_max, 1000)])

# %% [markdown]
# We draw 300 graphs H ~ q(H) with each exponent (`rg_vb.sample_hidden_graph`, exact weighted
# sampling without replacement) and count how often each item is drawn as a negative. The
# left panel plots each item's share of all sampled negatives against its observed degree,
# next to its share of the histogram, pi_n / sum pi (lines). The right panel puts the sampled
# share against the histogram share directly.

# %%
def negative_counts(rng, weights, n_graphs=300):
    counts = np.zeros(n_items)
    for _ in range(n_graphs):
        graph = rg_vb.sample_hidden_graph(rng, obs, weights)
        neg = (np.asarray(graph.weight) > 0) & (np.asarray(graph.g) == 0)
        counts += np.bincount(np.asarray(graph.items)[neg], minlength=n_items)
    return counts / counts.sum()


rng_h = np.random.default_rng(GRAPH_SEED)
pi_printed = np.where(d_item > 0, np.maximum(d_item, 1.0) ** printed_gamma(d_max, hyper.r), 0.0)
share = {"corrected": negative_counts(rng_h, pi), "printed": negative_counts(rng_h, pi_printed)}
hist_share = {"corrected": pi / pi.sum(), "printed": pi_printed / pi_printed.sum()}

order = np.argsort(d_item)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
for (name, s), color in zip(share.items(), ("C0", "C3")):
    axes[0].scatter(d_item, s, s=10, color=color, label=f"sampled negatives, gamma {name}")
    axes[0].plot(d_item[order], hist_share[name][order], color=color, lw=1, label=f"pi_n / sum pi ({name})")
axes[0].plot(d_item[order], d_item[order] / d_item.sum(), "k--", lw=1, label="likes: d_n / N")
axes[0].set(xscale="log", yscale="log", ylim=(1e-5, 1), xlabel="observed item degree d_n",
            ylabel="share of edges on item n")
axes[0].legend(fontsize=7)
s, h = share["corrected"], hist_share["corrected"]
axes[1].scatter(h, s, s=10, c=np.log(d_item), cmap="viridis")
lim = [h[h > 0].min(), h.max()]
axes[1].plot(lim, lim, "k--", lw=0.8)
axes[1].set(xscale="log", yscale="log", xlabel="pi_n / sum pi (corrected gamma)", ylabel="sampled share of negatives",
            title="colour: log d_n")
fig.tight_layout()
top5 = np.argsort(d_item)[-5:]
print(f"gamma = {gamma:.3f} (printed: {printed_gamma(d_max, hyper.r):.2f}). The 5 most popular items hold "
      f"{d_item[top5].sum() / d_item.sum():.0%} of the likes and {hist_share['corrected'][top5].sum():.0%} of pi; "
      f"they get {share['corrected'][top5].sum():.0%} of the sampled negatives (printed gamma: "
      f"{share['printed'][top5].sum():.0%}).\nItems never drawn as a negative in 300 graphs: "
      f"{np.sum(share['corrected'] == 0)} (corrected), {np.sum(share['printed'] == 0)} of {n_items} (printed).")

# %% [markdown]
# With the corrected exponent the negatives are slightly flatter than the likes, as r = 1/2
# intends, and follow the shape of pi over most of the catalogue. At the head the sampled share
# falls well *below* pi: many users already liked the most popular items, which are then
# excluded from their negatives, and the draws go elsewhere (which lifts every other item a
# little above the diagonal, since the shares sum to one). That is the under-representation of
# popular items the paper points out under its Figure 3. With the printed exponent the
# histogram is so steep that each user's negatives are mostly the most popular items she has
# not liked, and about a fifth of the catalogue never appears as a negative at all.
#
# ## 3. Mean-field VB on one fixed H
#
# The sigmoid is not conjugate to the Gaussian priors. The Jaakkola-Jordan bound
# `log sigma(a) >= log sigma(xi) + (a - xi)/2 - lambda(xi) (a^2 - xi^2)`, with
# `lambda(xi) = (sigma(xi) - 1/2) / (2 xi)`, is quadratic in a, so every factor of the
# mean-field q (6) has a closed-form update under the bounded ELBO L_xi (eqs. 10-12):
#
# - users (13, 15): precision `P_m = E[tau_u] I + sum_{n in H_m} 2 lambda_mn E[v_n v_n^T]`, linear
#   term `c_m = sum_{n in H_m} (g_mn - 1/2 - 2 lambda_mn E[b_m + b_n]) E[v_n]`; the factorized
#   q(u_mk) keeps the mean `P_m^-1 c_m` of the full-covariance intermediate and its diagonal
#   precision; items, biases alike;
# - xi (16): `xi_mn^2 = E[(u_m . v_n + b_m + b_n)^2]`, recomputed before each block;
# - the Gamma factors of the precisions (17).
#
# On a fixed H every block is an exact coordinate maximizer, so L_xi never decreases. We
# fit K = 2 on one graph H_0 ~ q(H) with the paper's vague hyperprior (`resample=False`).

# %%
fixed = rg_vb.fit(VB_SEED, obs, K, hyper, max_iter=100, tol=1e-10, resample=False, progress=False, n_draws=0)
ok, worst = updates.monotone(fixed.elbo, rtol=1e-10)
print(f"{len(fixed.elbo) - 1} sweeps; L_xi {fixed.elbo[0]:.2f} -> {fixed.elbo[-1]:.4f}; "
      f"never decreases: {ok} (largest relative decrease {worst:.1e})")

fig, axes = plt.subplots(1, 2, figsize=(9, 3))
axes[0].plot(fixed.elbo, marker=".", ms=3)
axes[0].set(xlabel="sweep", ylabel="L_xi on H_0", title="batch VB on a fixed H")
axes[1].semilogy(np.diff(fixed.elbo), marker=".", ms=3)
axes[1].set(xlabel="sweep", ylabel="increase of L_xi", title="increments (all positive)")
fig.tight_layout()

# %% [markdown]
# ## 4. Update level: every block is a stationary point of L_xi
#
# Each closed-form update must zero the gradient of L_xi (`rg_vb.elbo`, differentiated by
# `jax.grad`) in the block it updates. `validation.models.rg.update_checks` runs one sweep on a small
# problem (15 x 12, one H ~ q(H), free user biases so that every block is exercised) from a
# warm state, and records the largest gradient in each block before and after its update.
# The same check on a plausible but wrong user update -- the variances of the
# intermediate q~ (moment matching, the minimizer of KL(q~ || q) instead of KL(q || q~))
# -- must fail.

# %%
_, _, small_graph = v_rg.small_problem(seed=0)
check_hyper = rg_ppl.RGHyper(alpha=2.0, beta=1.5, clamp_user_bias=False)
checks = v_rg.update_checks(small_graph, 2, check_hyper)
wrong = v_rg.update_checks(small_graph, 2, check_hyper, user_update=v_rg.moment_matched_user_update)
pd.concat([checks.assign(variant="derived"), wrong[wrong.block == "users"].assign(variant="moment-matched users")])[
    ["variant", "block", "grad_before", "grad_after", "passed"]]

# %% [markdown]
# The solver only ever touches the edges of H. Its sums equal the sums over all I x J pairs
# weighted by h_mn (eq. 13, the dense twin), for the vector updates, the bounded likelihood
# and the like probability (19) of every pair:

# %%
v_rg.dense_twin_checks(small_graph, 2, check_hyper)

# %% [markdown]
# ## 5. Stochastic averaging over sampled graphs (sec. 5.1)
#
# The targets P_m and c_m of (15) are *linear* in H, so their expectation under q(H)
# (eq. 14: a sum over all items weighted by E[h_mn]) is the average of the per-graph targets.
# On a 4 x 8 problem E[h_mn] is computable exactly (successive sampling, by enumeration);
# the Monte Carlo average of the bias targets over 500 sampled graphs must agree with it to
# within Monte Carlo error (z-scores of order 1):

# %%
v_rg.stochastic_average_check(n_graphs=500)

# %% [markdown]
# The fit therefore draws a fresh H_t ~ q(H) at every sweep t and blends each block's natural
# parameters with the previous ones, `P~ = eps_t P_m(H_t) + (1 - eps_t) P_old`, with the
# Robbins-Monro weights `eps_t = (t + 1)^-0.7` (sum eps = inf, sum eps^2 < inf; eps_0 = 1).
# The ELBO now moves with the graph, so `fit` reports L_xi on the fixed evaluation graph H_0
# (the graph of section 3); the quantity the average maximizes is E_q(H)[L_xi], which we
# estimate at the end over 30 fresh graphs.
#
# We run it twice: from the usual small random start ("cold", the paper's recipe:
# `warm_start=0`) and from the fixed-H solution of section 3 ("warm"). The warm run's first step
# has eps_0 = 1, an exact sweep on a new graph H_1, hence its drop on H_0 when it starts.

# %%
cold = rg_vb.fit(VB_SEED, obs, K, hyper, max_iter=150, tol=0.0, resample=True, progress=False, n_draws=0,
                 warm_start=0)
warm = rg_vb.fit(VB_SEED, obs, K, hyper, max_iter=150, tol=0.0, resample=True, progress=False, n_draws=0,
                 init_state=fixed.state)

rng_e = np.random.default_rng(123)
eval_graphs = [jax.tree_util.tree_map(jnp.asarray, rg_vb.sample_hidden_graph(rng_e, obs, pi)) for _ in range(30)]
rows = []
for name, res in (("fixed H_0", fixed), ("random graphs, cold", cold), ("random graphs, warm", warm)):
    avg = np.array([float(rg_vb.elbo(res.state, g, hyper)) for g in eval_graphs])
    p = rg_vb.score_users(res.state, np.arange(n_users))
    mu_u = np.asarray(res.state.u_h / res.state.u_prec)
    rows.append({"fit": name, "L_xi on H_0": res.elbo[-1], "E_q(H) L_xi": avg.mean(),
                 "se": avg.std(ddof=1) / np.sqrt(avg.size),
                 "E[tau_u]": float(res.state.tau_u_shape / res.state.tau_u_rate), "max |E u|": np.abs(mu_u).max(),
                 "corr(like, truth) on true H": np.corrcoef(p[H_true], like_true[H_true])[0, 1]})
summary = pd.DataFrame(rows)

fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
axes[0].plot(fixed.elbo, label="fixed H_0 (eps = 1)")
axes[0].plot(cold.elbo, label="random graphs, cold start")
axes[0].plot(np.arange(len(fixed.elbo) - 1, len(fixed.elbo) + len(warm.elbo) - 1), warm.elbo,
             label="random graphs, warm start")
axes[0].set(xlabel="sweep", ylabel="L_xi on H_0", ylim=(fixed.elbo[1] - 100, fixed.elbo[-1] + 30))
axes[0].legend(fontsize=8)
t = np.arange(150)
axes[1].plot(t, [rg_vb.robbins_monro(s) for s in t])
axes[1].set(xlabel="sweep t", ylabel="eps_t", yscale="log", title="Robbins-Monro weights (t + 1)^-0.7")
fig.tight_layout()
summary

# %% [markdown]
# Three things to read off the table.
#
# - The fixed-H fit has the highest L_xi *on H_0* -- the graph it was fitted to -- but the
#   lowest average over other graphs: it has learned one particular set of negatives.
# - The cold-started average shrinks the factors almost to zero (E[tau_u] large, |E u|
#   small). Its like probability is then mostly an item-bias score, barely correlated with the
#   truth. The batch fit of section 3 shows why: it too sits for some fifteen sweeps on a
#   plateau near L_xi = -4700, the "collapsed" solution with u, v near 0 (mean-field VB's
#   pruning, which `validation.models.rg` warns about on small problems), before the factors grow.
#   With eps_t already down to about 0.15 by then, and each unliked item a negative in only
#   some of the graphs, the averaged run never leaves the plateau. This is a property of the
#   optimization, not a bug in the updates (section 4).
# - Started from the fixed-H solution, the same averaging keeps the factors and reaches a
#   clearly higher E_q(H)[L_xi] and the best agreement with the true like probabilities. On
#   this problem, warm-starting the stochastic average from a batch fit is what makes it work.
#
# That is why `rg_vb.fit` warm-starts **by default**: with `resample=True` it first runs
# `warm_start=rg_vb.DEFAULT_WARM_START` (30) exact sweeps on the first sampled graph H_0, then the
# Robbins-Monro average over fresh graphs; `warm_start=0` gives the cold start above (the
# ELBO trace then holds the warm-start sweeps first). The test
# `tests/custom_inference/test_rg.py::test_warm_start_avoids_the_collapsed_solution` checks it on
# this very problem.
#
# ## 6. Scores for one user: like, popularity, popularity x like
#
# Sec. 6.1.2 ranks the items a user has not liked by three scores: **like**,
# `s = p(g = 1 | h = 1)` of eq. (19) (MacKay's `sigma(mu_a / sqrt(1 + pi sigma_a^2 / 8))` with
# the mean and variance of `a = u.v + b` under q); **popularity**, `s = pi_n`; and
# **popularity x like**, `s = pi_n p(g = 1 | h = 1)`, the odds of considering *and* liking.
# For one user (warm fit), the top five unliked items by each score, with each item's observed
# degree, the true like probability and whether the user truly considered it:

# %%
user = int(np.argsort(d_user)[n_users // 2])  # a user of median degree
unliked = np.flatnonzero(G[user] == 0)
scores = {kind: rg_vb.score_users(warm.state, [user], kind=kind, pi=pi)[0] for kind in
          ("like", "popularity", "popularity_like")}
tops = []
for kind, s in scores.items():
    for rank, n in enumerate(unliked[np.argsort(-s[unliked], kind="stable")][:5], 1):
        tops.append({"score": kind, "rank": rank, "item": n, "s": s[n], "d_n": d_item[n],
                     "like (19)": scores["like"][n], "true like": like_true[user, n], "in true H": H_true[user, n]})
print(f"user {user}: {d_user[user]} likes, {unliked.size} unliked items")
pd.DataFrame(tops).set_index(["score", "rank"])

# %%
fig, ax = plt.subplots(figsize=(5, 3.6))
sc = ax.scatter(pi[unliked] / pi.sum(), scores["like"][unliked], c=like_true[user, unliked], cmap="coolwarm",
                vmin=0, vmax=1, s=14)
ax.set(xscale="log", xlabel="popularity pi_n / sum pi", ylabel="like probability (19)",
       title=f"user {user}, unliked items")
fig.colorbar(sc, ax=ax, label="true like probability")
fig.tight_layout()
print("over this user's unliked items: corr(like, true like) = "
      f"{np.corrcoef(scores['like'][unliked], like_true[user, unliked])[0, 1]:.2f}, "
      f"corr(like, log pi) = {np.corrcoef(scores['like'][unliked], np.log(pi[unliked]))[0, 1]:.2f}")

# %% [markdown]
# The like score follows the true like probability and is far less tied to popularity than
# popularity x like, whose top items are the head of the catalogue: the knob between
# personalization and popularity that the paper's two-stage model provides. Note also that the
# like probabilities are *shrunk*: items the user would like with probability above 0.9 score
# 0.6-0.8. The posterior is uncertain about a user with a dozen likes, and eq. (19) averages
# the sigmoid over that uncertainty. The popularity ranking, by contrast, puts at its head
# items the user truly considered and disliked (`in true H` with a low true like probability).
#
# ## 7. Errata: eq. (9) as printed
#
# The erratum row runs one check on the printed and on the corrected exponent: does
# `pi_max = d_max ** gamma` equal `r d_max` (eq. 8) over a grid of d_max and r? It reports the
# largest `|gamma log d_max - log(r d_max)|`; the printed form fails, the correction passes.

# %%
errata = run_errata(v_rg.ERRATA)
errata[["location", "printed", "corrected", "check", "printed_value", "corrected_value", "printed_passes",
        "corrected_passes", "ok"]]

# %% [markdown]
# ## Where to go next
#
# - `factorbayes crosscheck rg` compares RG VB on one fixed H (by default a planted 20 x 30
#   problem, `validation.models.rg.CrosscheckConfig`) against ArviZ-gated NUTS on `ppl_models.rg.model`,
#   on identifiable quantities: the like probabilities on the edges of H, the centred item
#   biases and the precisions. It takes minutes, so it is not part of this notebook.
# - `factorbayes evaluate implicit --data ml-100k` fits RG (like and popularity x like) next to
#   SIBM, BPR-uniform, BPR-popularity and popularity on MovieLens 100K and reports recall@N,
#   the rank score of eq. (20) by user and item degree, and NDCG.
