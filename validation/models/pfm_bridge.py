"""The bridge for NPFM / PPFM: each Gibbs block of `custom_inference.pfm` as a NumPyro ``CustomGibbs`` block.

(Kept apart from `validation.models.pfm`, which is near the 1000-line limit.) The NumPyro program
`ppl_models.pfm.model` has the latent counts z marginalised; a block whose conditional needs z
first draws z | parameters (`custom_inference.pfm.allocate`), then its sites given z: a
data-augmentation step that leaves p(sites | rest, y) invariant, as HPF's blocks do. The
collapsed shape draws (eqs. 5.16-5.19) are valid only as the first half of a (shape -> rate)
block (see `custom_inference.pfm`), so those blocks own both sites:

    ("alpha0", "w0"), ("alpha", "w"), NPFM ("gamma0", "r"): z; CRT tables; shape (rate integrated
        out, `shape_conditionals`); rate given the new shape (`conditionals`);
    ("zeta", "V"): z; CRT tables; then, feature block by feature block of the design, zeta_b
        collapsed and v_b. given it, the exposures recomputed (`exposures`) before each block;
    "beta0", "beta", "delta", NPFM "c": the exact Gamma conditionals (`conditionals`; no z needed).

Every draw uses the sampler's public functions (`allocate`, `crt`, `exposures`, `conditionals`,
`shape_conditionals`, `gamma_draw`). The bridge problem is the cross-check's 4 x 3 problem, whose
NUTS references "npfm" and "ppfm" are stored.

Source: ``004_90693a0965f06816.txt`` ch. 5, eqs. 5.7-5.19 (conditionals as derived in
`custom_inference.pfm`); the NumPyro blocks are a project addition.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from custom_inference import pfm
from ppl_models import pfm as ppl

from validation.checks import bridge
from validation.models.pfm import CrosscheckConfig, crosscheck_data, identifiable_quantities, nuts_reference

__all__ = ["block_sites", "numpyro_block", "bridge_problem", "BRIDGE_NPFM", "BRIDGE_PPFM"]


def block_sites(variant: str) -> dict:
    """Block name -> sites of `ppl_models.pfm.model` for ``variant``.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}
        NPFM (with the gamma-process blocks gamma0_r and c) or PPFM.

    Returns
    -------
    dict
        str -> tuple of str: alpha0_w0, alpha_w, zeta_V, beta0, beta, delta (and gamma0_r, c for "npfm").

    Raises
    ------
    ValueError
        For another variant.

    Source: project addition.
    """
    if variant not in ("npfm", "ppfm"):
        raise ValueError(f"variant must be 'npfm' or 'ppfm', got {variant!r}")
    out = {"alpha0_w0": ("alpha0", "w0"), "alpha_w": ("alpha", "w"), "zeta_V": ("zeta", "V"), "beta0": ("beta0",),
           "beta": ("beta",), "delta": ("delta",)}
    if variant == "npfm":
        out.update({"gamma0_r": ("gamma0", "r"), "c": ("c",)})
    return out


def _tables(key, state, stats, data) -> dict:
    """The CRT table counts of every collapsed shape (`custom_inference.pfm.crt`, one call per shape)."""
    D, K = state.V.shape
    total = 3 * data.n_units
    ks = jax.random.split(key, 4)
    out = {"alpha0": pfm.crt(ks[0], jnp.reshape(stats.z1, (1,)), jnp.reshape(state.alpha0, (1,)), total)[0],
           "alpha": pfm.crt(ks[1], stats.z2, state.alpha, total),
           "zeta": pfm.crt(ks[2], stats.z3.reshape(-1), jnp.broadcast_to(state.zeta[:, None], (D, K)).reshape(-1),
                           total).reshape(D, K)}
    if "r" in state._fields:
        out["gamma0"] = pfm.crt(ks[3], stats.L, jnp.broadcast_to(state.gamma0 / K, (K,)), total)
    return out


def numpyro_block(variant: str, block: str, data, hyper):
    """The NPFM / PPFM Gibbs block ``block`` as a ``gibbs_fn`` for NumPyro's ``CustomGibbs``.

    The conditionals are `custom_inference.pfm`'s (latent counts allocated and CRT tables drawn afresh on
    every call for the blocks that need them; beta0, beta, delta and c are exact conditionals free of z;
    zeta_V runs colour block by colour block), in float64.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}
        The model.
    block : str
        A key of `block_sites` (``variant``).
    data : custom_inference.pfm_data.PFMData
        The problem's data (cast to float64).
    hyper : ppl_models.pfm.PFMHyper
        The hyperparameters the conditional is given.

    Returns
    -------
    callable
        ``gibbs_fn(rng_key, gibbs_sites, hmc_sites) -> {site: jax.Array}`` of the block's sites, float64,
        with the sites' shapes: w0, alpha0, beta0, gamma0, c (); w, alpha, beta, zeta (D,); V (D, K);
        delta, r (K,).

    Raises
    ------
    ValueError
        For an unknown variant or block.

    Source: ``004_90693a0965f06816.txt`` ch. 5, eqs. 5.7-5.19 (module docstring); the NumPyro block is a
    project addition.
    """
    sites = block_sites(variant)
    if block not in sites:
        raise ValueError(f"block must be one of {sorted(sites)}, got {block!r}")
    State = pfm.NPFMState if variant == "npfm" else pfm.PPFMState
    d = jax.tree_util.tree_map(jnp.asarray, data.astype(np.float64))
    h = hyper

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        p = {**hmc_sites, **gibbs_sites}
        state = State(**{f: jnp.asarray(p[f], jnp.float64) for f in State._fields})
        k_z, k_t, k_s, k_r = jax.random.split(rng_key, 4)
        if block in ("beta0", "beta", "delta", "c"):  # exact conditionals free of z
            stats = pfm.SuffStats(*(jnp.zeros_like(x) for x in (state.w0, state.w, state.V, state.delta)))
            cond = pfm.conditionals(state, stats, pfm.exposures(state, d), d, h)
            return {block: pfm.gamma_draw(k_s, *cond[block])}
        stats = pfm.allocate(k_z, state, d)
        tables = _tables(k_t, state, stats, d)
        if block != "zeta_V":
            shape_name, rate_name = sites[block]
            expo = pfm.exposures(state, d)
            shape = pfm.gamma_draw(k_s, *pfm.shape_conditionals(state, stats, expo, d, h, tables)[shape_name])
            state = state._replace(**{shape_name: shape})
            rate = pfm.gamma_draw(k_r, *pfm.conditionals(state, stats, expo, d, h)[rate_name])
            return {shape_name: shape, rate_name: rate}
        for b in range(data.n_blocks):
            in_b = d.block == b
            expo = pfm.exposures(state, d)
            kb1, kb2 = jax.random.split(jax.random.fold_in(k_s, b))
            zeta = pfm.gamma_draw(kb1, *pfm.shape_conditionals(state, stats, expo, d, h, tables)["zeta"])
            state = state._replace(zeta=jnp.where(in_b, zeta, state.zeta))
            V = pfm.gamma_draw(kb2, *pfm.conditionals(state, stats, expo, d, h)["V"])
            state = state._replace(V=jnp.where(in_b[:, None], V, state.V))
        return {"zeta": state.zeta, "V": state.V}

    return gibbs_fn


def bridge_problem(variant: str = "npfm", config: CrosscheckConfig = CrosscheckConfig()):
    """The bridge problem (`validation.checks.bridge.Problem`) of ``variant``.

    The cross-check's simulated counts (`validation.models.pfm.crosscheck_data`; default 4 x 3, K = 3,
    NUTS references "npfm" / "ppfm" stored), `ppl_models.pfm.model` over all I J cells, compared on
    `validation.models.pfm.identifiable_quantities`.

    Parameters
    ----------
    variant : {"npfm", "ppfm"}, default "npfm"
        The model.
    config : validation.models.pfm.CrosscheckConfig, default CrosscheckConfig()
        Sizes, K, hyperparameters, seed and NUTS settings of the cross-check.

    Returns
    -------
    validation.checks.bridge.Problem
        model, args, kwargs, data (`PFMData`), hyper, quantities, reference (a callable: the stored NUTS
        reference), target_accept, description.

    Raises
    ------
    ValueError
        For an unknown variant (from `ppl_models.pfm`'s prior, while simulating the counts), and (when its
        reference is asked for) when no stored reference matches.

    Source: project addition.
    """
    c = config
    Y = crosscheck_data(variant, c)
    rows, cols, vals, N, D, cu, cj = ppl.cells_design(c.n_users, c.n_items)
    return bridge.Problem(
        model=ppl.model, args=(np.asarray(rows), np.asarray(cols), np.asarray(vals, np.float64), N, D, c.K, c.hyper,
                               np.asarray(Y[cu, cj], np.float64)),
        kwargs={"variant": variant}, data=pfm.PFMData.from_matrix(sp.csr_matrix(Y)), hyper=c.hyper,
        quantities=lambda idata: identifiable_quantities(idata, c.n_users, c.n_items, variant),
        reference=lambda: nuts_reference(variant, c, reference="stored"), target_accept=c.target_accept,
        description=f"{c.n_users} x {c.n_items} simulated counts (all cells, ids only), K = {c.K}")


# the default test suite's block of each variant, 4 chains x (500 warm-up + 1000 draws), seed 1: NPFM alpha_w
# (max |z| 2.04 against the Bonferroni 2.58, hybrid R-hat <= 1.007, bulk ESS >= 672); PPFM beta (max |z| 2.33
# against 2.58, R-hat <= 1.004, tail ESS of w0 401 >= 400: at the gate's edge; PPFM's alpha_w (rate bulk ESS
# 365) and zeta_V (w0 tail ESS 202) are inconclusive at that length; PPFM's default therefore runs only under
# -m slow, at the spec's 1000 + 4000)
_DEFAULT = {"npfm": "alpha_w", "ppfm": "beta"}


def _spec(variant: str) -> bridge.BridgeSpec:
    return bridge.BridgeSpec(
        problem=functools.partial(bridge_problem, variant),
        blocks={b: bridge.Block(s, functools.partial(numpyro_block, variant, b)) for b, s in block_sites(variant).items()},
        default=_DEFAULT[variant], wrong_hyper=lambda hy: hy._replace(a=hy.a + 6.0), wrong_block="alpha_w")


BRIDGE_NPFM = _spec("npfm")
BRIDGE_PPFM = _spec("ppfm")
