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
# # Getting started: your own ratings file, two models, recommendations with uncertainty
#
# This notebook is the front door (`validation.frontdoor.api`) on a file that looks like yours: a
# `;`-separated CSV with its own column names (`customer;product;stars`) and string ids. We
#
# 1. write such a file (from MovieLens 100K if it is on this machine, else from a simulated
#    matrix with half stars) and load it with the package's loader, naming the columns;
# 2. fit two models at small settings: HPF by variational inference (CAVI) and BPMF by Gibbs
#    sampling;
# 3. recommend and predict in the file's own ids, with posterior sd and 90% intervals;
# 4. fold a new customer in without refitting, save a fitted model and load it back;
# 5. check the sampler on quantities the model identifies (`az.summary`) and plot one.
#
# It runs in well under a minute on a 2-core CPU (most of it JAX compiling small programs).

# %%
import os
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets

# Many small programs, each compiled once: ask XLA's CPU backend for fewer LLVM optimizations
# (compiles about twice as fast; results change at rounding level only). Set before JAX starts.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import xarray as xr  # noqa: E402

from validation.frontdoor import api  # noqa: E402
from validation.data import loaders

work = Path(tempfile.mkdtemp(prefix="factorbayes_getting_started_"))  # everything this notebook writes

# %% [markdown]
# ## 1. A ratings file with your own column names
#
# MovieLens 100K is used when it is already on this machine (`$FACTORBAYES_DATA_DIR/ml-100k`,
# `../shared/data/ml-100k` beside the repository, or the user cache); nothing is downloaded.
# We keep its 80 most active users and 50 most rated movies, so that the fits take seconds, and
# rename the ids to strings (`c196`, `p242`) as a shop's export would have them. Without
# MovieLens the file comes from a simulated low-rank matrix rounded to half stars.

# %%
root = Path.cwd().resolve().parent  # the notebook runs in notebooks/
candidates = [Path(os.environ.get("FACTORBAYES_DATA_DIR", root / "no-such-dir")) / "ml-100k",
              root.parent / "shared" / "data" / "ml-100k",
              Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "factorbayes" / "ml-100k"]
found = next((d for d in candidates if (d / "u.data").is_file()), None)
if found is not None:
    ml = loaders.load_movielens(found)
    users = ml["user"].value_counts().index[:80]
    items = ml["item"].value_counts().index[:50]
    ml = ml[ml["user"].isin(users) & ml["item"].isin(items)]
    table = pd.DataFrame({"customer": "c" + ml["user"].astype(str), "product": "p" + ml["item"].astype(str),
                          "stars": ml["rating"].astype(float)})
    origin = f"MovieLens 100K ({found})"
else:
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(80, 3)), rng.normal(size=(50, 3))
    u, i = np.nonzero(rng.random((80, 50)) < 0.4)
    stars = np.clip(np.round(2 * (3.0 + 0.6 * np.sum(A[u] * B[i], axis=1) + rng.normal(0, 0.5, u.size))) / 2, 0.5, 5)
    table = pd.DataFrame({"customer": [f"c{k}" for k in u], "product": [f"p{k}" for k in i], "stars": stars})
    origin = "a simulated 80 x 50 matrix (half stars)"
csv = work / "ratings.csv"
table.to_csv(csv, sep=";", index=False)
print(f"{len(table)} ratings from {origin}; the file starts:")
print("".join(csv.open().readlines()[:4]))

# %% [markdown]
# The loader (`validation.data.loaders.load`, what `factorbayes fit --data` uses) takes the column
# names as they are in the header and the separator; it returns the canonical table
# (`user`, `item`, `rating`, `timestamp`), which `api.fit` reads without further options.
# A malformed file stops with a message naming the line and field.

# %%
df = loaders.load(csv, user_col="customer", item_col="product", value_col="stars", sep=";")
print(df.dtypes.to_dict())
df.head()

# %% [markdown]
# ## 2. Two models
#
# **HPF** (hierarchical Poisson factorization, seed 001) models counts: `transform="double"`
# turns half stars into integer counts (a 3.5 becomes 7), and CAVI fits q in a few dozen
# sweeps; predictions carry the uncertainty of draws from q. **BPMF** (Bayesian probabilistic
# matrix factorization, seed 004 ch. 2) models the ratings themselves with a Gaussian
# likelihood; the Gibbs sampler's kept draws give posterior uncertainty. K = 5 latent factors,
# fixed seeds, small settings (real use: the defaults, `api.ADAPTERS[name].defaults`).

# %%
hpf = api.fit("hpf", df, K=5, seed=0, transform="double", max_iter=60, n_draws=200, progress=False)
bpmf = api.fit("bpmf", df, K=5, seed=0, num_chains=2, num_warmup=100, num_samples=100, progress=False)
for m in (hpf, bpmf):
    print(f"{m.model}: {m.shape[0]} users x {m.shape[1]} items; uncertainty: {m.uncertainty}")

# %% [markdown]
# ## 3. Recommendations and predictions in your ids
#
# `recommend` ranks the items a customer has not rated by posterior mean score, with its
# posterior sd; `predict` gives the mean, sd and a 90% interval of the expected value of any
# (customer, product) pair. HPF's scores are expected (doubled) counts, BPMF's expected stars.

# %%
someone = df["user"].iloc[0]
print(f"top 5 for {someone}")
pd.concat({"hpf": hpf.recommend(someone, N=5).set_index("rank")[["item", "score", "sd"]],
           "bpmf": bpmf.recommend(someone, N=5).set_index("rank")[["item", "score", "sd"]]}, axis=1).round(3)

# %%
pairs = list(df[["user", "item"]].head(4).itertuples(index=False, name=None))
bpmf.predict(pairs).assign(observed=df["rating"].head(4).to_numpy()).round(3)

# %% [markdown]
# ## 4. A new customer, and the fit on disk
#
# `fold_in` adds customers without refitting the items: for BPMF, for every kept draw of the
# item factors and hyperparameters, the new customer's factor is drawn from its Gaussian
# complete conditional, so the new predictions carry the same kind of uncertainty as everyone
# else's. `save` writes one netCDF file (posterior, id maps, training entries, settings);
# `api.load` gives back a model with the same recommendations.

# %%
liked = bpmf.recommend(someone, N=3)["item"].tolist()
newcomer = pd.DataFrame({"customer": ["new-customer"] * 3, "product": liked, "stars": [5.0, 4.5, 1.0]})
bpmf2 = bpmf.fold_in(newcomer, user_col="customer", item_col="product", value_col="stars")
print(bpmf2.recommend("new-customer", N=5)[["rank", "item", "score", "sd"]].round(3).to_string(index=False))

path = bpmf2.save(work / "bpmf.nc")
again = api.load(path)
assert again.recommend(["new-customer", someone], N=5).equals(bpmf2.recommend(["new-customer", someone], N=5))
print(f"saved to {path.name} ({path.stat().st_size // 1024} KiB) and loaded back: same recommendations")

# %% [markdown]
# ## 5. Did the sampler converge? Look at what the model identifies
#
# BPMF's factors U, V are identified only up to a rotation (U A, V A^-T fits the same), so
# their R-hat says nothing. The predicted ratings u_i . v_j (plus the training mean the front
# door centred the ratings at) are identified: we summarize them per chain with ArviZ
# (rank-normalized R-hat, bulk and tail ESS) and plot their traces.

# %%
post = bpmf.idata.posterior
offset = float(post.attrs["front_door_offset"])
user_pos = {u: k for k, u in enumerate(bpmf.user_ids)}  # position of each id on the posterior's user axis
item_pos = {i: k for k, i in enumerate(bpmf.item_ids)}
users_idx, items_idx = [user_pos[u] for u, _ in pairs], [item_pos[i] for _, i in pairs]
pred = xr.Dataset({f"r[{u},{i}]": (offset + (post["U"].isel(user=a) * post["V"].isel(item=b)).sum("component")
                                    ).reset_coords(drop=True)
                   for (u, i), a, b in zip(pairs, users_idx, items_idx)})
summary = az.summary(pred, kind="all", round_to=3)
summary

# %%
az.plot_trace(pred, var_names=list(pred.data_vars)[:2], compact=False, figsize=(9, 4))
plt.tight_layout()
plt.show()

# %% [markdown]
# R-hat near 1 and ESS in the tens to hundreds for 2 x 100 draws: good enough for a first
# look; for decisions run the defaults (2 chains x 200 draws after 200 warm-up sweeps) or more.
# Everything here works the same for the 16 models of `api.models()`, from the command line
# too (`factorbayes fit MODEL --data FILE --user-col ... --item-col ... --value-col ...`); a
# long fit can checkpoint and resume (`api.fit(..., resume_from="ckpt/")`).

# %%
print(api.models())
