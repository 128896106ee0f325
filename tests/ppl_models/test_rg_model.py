"""RG NumPyro program (seed 003 eqs. 2-5): sites, log density against a hand-written sum, prior
predictive moments, input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats

from ppl_models import rg as ppl

jax.config.update("jax_enable_x64", True)

I, J, K = 5, 4, 2


def _edges(seed=0, per_user=3):
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(I), per_user)
    items = np.concatenate([rng.choice(J, per_user, replace=False) for _ in range(I)])
    return users, items


@pytest.mark.parametrize("clamp", [True, False])
def test_simulate_sites_and_shapes(clamp):
    users, items = _edges()
    hyper = ppl.RGHyper(alpha=2.0, beta=2.0, clamp_user_bias=clamp)
    params, g = ppl.simulate(jax.random.PRNGKey(0), users, items, I, J, K, hyper)
    assert g.shape == (users.size,) and set(np.unique(np.asarray(g))) <= {0.0, 1.0}
    assert params["u"].shape == (I, K) and params["v"].shape == (J, K)
    assert params["b_item"].shape == (J,) and params["b_user"].shape == (I,)
    assert ("tau_bu" in params) == (not clamp)
    if clamp:
        assert np.all(np.asarray(params["b_user"]) == 0.0)


@pytest.mark.parametrize("clamp", [True, False])
def test_log_density_equals_hand_written_joint(clamp):
    users, items = _edges(1)
    hyper = ppl.RGHyper(alpha=1.7, beta=0.6, clamp_user_bias=clamp)
    params, g = ppl.simulate(jax.random.PRNGKey(3), users, items, I, J, K, hyper)
    sites = {k: v for k, v in params.items() if not (clamp and k == "b_user")}
    lp = jax.jit(lambda p: log_density(ppl.model, (jnp.asarray(users), jnp.asarray(items), g, I, J, K, hyper), {},
                                       p)[0])(sites)
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    a = np.sum(p["u"][users] * p["v"][items], axis=1) + p["b_user"][users] + p["b_item"][items]
    gg = np.asarray(g)
    ref = np.sum(gg * a - np.logaddexp(0.0, a))  # log sigma(a)^g (1 - sigma(a))^(1-g), eq. 2
    taus = ["tau_u", "tau_v", "tau_bv"] + ([] if clamp else ["tau_bu"])
    ref += sum(stats.gamma.logpdf(p[t], hyper.alpha, scale=1 / hyper.beta) for t in taus)
    ref += stats.norm.logpdf(p["u"], 0, p["tau_u"] ** -0.5).sum() + stats.norm.logpdf(p["v"], 0, p["tau_v"] ** -0.5).sum()
    ref += stats.norm.logpdf(p["b_item"], 0, p["tau_bv"] ** -0.5).sum()
    if not clamp:
        ref += stats.norm.logpdf(p["b_user"], 0, p["tau_bu"] ** -0.5).sum()
    assert abs(float(lp) - ref) < 1e-9 * abs(ref)


def test_prior_predictive_moments():
    users, items = _edges(2)
    hyper = ppl.RGHyper(alpha=2.0, beta=2.0, clamp_user_bias=False)
    n = 300
    tau_u, like = np.empty(n), np.empty(n)
    for s in range(n):
        params, g = ppl.simulate(jax.random.PRNGKey(s), users, items, I, J, K, hyper)
        tau_u[s] = float(params["tau_u"])
        like[s] = float(np.mean(np.asarray(g)))
    # tau_u ~ Gamma(2, 2): mean 1, sd 1/sqrt(2); 4 standard errors (false alarm 6e-5)
    assert abs(tau_u.mean() - 1.0) < 4 * (0.5**0.5) / np.sqrt(n)
    # a = u.v + b is symmetric about 0 under the prior, so P(g = 1) = 1/2; per-simulation means are
    # independent across simulations with sd <= 1/2
    assert abs(like.mean() - 0.5) < 4 * 0.5 / np.sqrt(n)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(hyper=ppl.RGHyper(alpha=0.0)), "alpha"),
        (dict(hyper=ppl.RGHyper(beta=-1.0)), "beta"),
        (dict(hyper=ppl.RGHyper(r=float("nan"))), "r"),
        (dict(users=np.array([0, 0]), items=np.array([1, 1])), "duplicate"),
        (dict(users=np.array([0, I]), items=np.array([1, 1])), "users"),
        (dict(users=np.array([0, 1]), items=np.array([1, -1])), "items"),
        (dict(users=np.array([0, 1]), items=np.array([1])), "same length"),
        (dict(K=0), "K"),
    ],
)
def test_bad_input_raises_naming_the_field(kwargs, field):
    users, items = _edges()
    args = dict(users=users, items=items, K=K, hyper=ppl.RGHyper())
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        ppl.simulate(jax.random.PRNGKey(0), args["users"], args["items"], I, J, args["K"], args["hyper"])


def test_check_edges_rejects_non_binary_g():
    users, items = _edges()
    with pytest.raises(ValueError, match="g"):
        ppl.check_edges(users, items, I, J, K, np.full(users.size, 0.5))
