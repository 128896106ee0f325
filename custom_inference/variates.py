r"""Random variates drawn inside the Gibbs samplers' traced sweeps, written once.

- `crt`: exact Chinese-restaurant-table counts l ~ CRT(m, r) (the augmentation of the
  negative-binomial / gamma-process models: NPFM and PPFM's collapsed shapes);
- `gamma_log_draw` / `gamma_draw`: Gamma(shape, rate) draws that are exact for every shape > 0 and
  never underflow to 0 in float32 (shapes near 0 occur in the gamma-process weights).

All functions are jit-traceable and take a JAX PRNG key; none checks values (traced code).
`custom_inference.pfm` re-exports them (``pfm.crt`` etc. are the spellings the PFM code and its
checks use).

Source: 004_90693a0965f06816.txt ch. 5 Lemma 5.2.1 (CRT), Marsaglia & Tsang (2000) (Gamma); project
addition (the layouts and the underflow guard).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

__all__ = ["crt", "gamma_log_draw", "gamma_draw"]



def crt(key, counts, concentration, max_total: int):
    r"""Exact Chinese-restaurant-table draws l ~ CRT(m, r), elementwise.

    l = sum_{n=1}^{m} b_n with independent b_n ~ Bernoulli(r / (n - 1 + r)) (the table count
    of a Chinese restaurant process with concentration r after m customers; PMF
    Gamma(r) / Gamma(m + r) |s(m, l)| r^l, Lemma 5.2.1 of 004 ch. 5, Zhou & Carin 2012).
    Every customer of every element gets its own Bernoulli, laid out in one flat array of
    static length ``max_total`` (customer p belongs to the element whose cumulative count
    first exceeds p), so the work is O(max_total log C) and no normal approximation is used.

    Parameters
    ----------
    key : jax PRNG key
    counts : array (...,) of non-negative integers (int or integral float), m.
    concentration : array broadcastable to ``counts``, r > 0 (float32 or float64).
    max_total : static int >= sum(counts); customers beyond sum(counts) are ignored.
        If sum(counts) exceeds it, the result is wrong (not checked under jit).

    Returns
    -------
    array of counts' shape and the concentration's float dtype: l, with 0 <= l <= m and
    l >= 1 where m >= 1.

    Source: 004 ch. 5 Lemma 5.2.1 (sampling form); shared math, reusable by any
    negative-binomial / gamma-process model.

    Raises nothing of its own (no checks: traced code).
    """
    conc = jnp.asarray(concentration)
    dtype = conc.dtype if jnp.issubdtype(conc.dtype, jnp.floating) else jnp.result_type(float)
    shape = jnp.shape(counts)
    m = jnp.round(jnp.asarray(counts)).astype(jnp.int32).reshape(-1)
    r = jnp.broadcast_to(conc.astype(dtype), shape).reshape(-1)
    C = m.shape[0]
    if max_total <= 0 or C == 0:
        return jnp.zeros(shape, dtype)
    ends = jnp.cumsum(m)
    starts = ends - m
    pos = jnp.arange(max_total, dtype=jnp.int32)
    # element of each customer: cat = #{e : start_e <= pos} - 1 (= #{e : end_e <= pos}, the
    # first element whose end exceeds pos), by counting the starts: O(max_total + C), where a
    # searchsorted over all positions cost O(max_total log C) and most of the CRT's time
    marks = jnp.zeros(max_total + 1, jnp.int32).at[jnp.minimum(starts, max_total)].add(1)
    cat = jnp.clip(jnp.cumsum(marks)[:max_total] - 1, 0, C - 1)
    n = (pos - starts[cat]).astype(dtype)  # 0-based customer index within its element
    rc = r[cat]
    u = jax.random.uniform(key, (max_total,), dtype=dtype)
    table = (u * (n + rc) < rc) & (pos < ends[-1])
    return jax.ops.segment_sum(table.astype(dtype), cat, num_segments=C).reshape(shape)


def gamma_log_draw(key, shape, rate):
    r"""log x for x ~ Gamma(shape, rate): exact for every shape > 0, in any float dtype.

    log x = log G + log(U) / shape - log(rate) with G ~ Gamma(shape + 1), U ~ Uniform(0, 1)
    (G U^(1/shape) ~ Gamma(shape): the boosting identity), G by Marsaglia & Tsang (2000) for
    a = shape + 1 >= 1: propose v = (1 + x / sqrt(9 d))^3, d = a - 1/3, x ~ N(0, 1), accept
    when log U' < x^2 / 2 + d - d v + d log v. All elements run in one ``lax.while_loop``
    until every one has accepted; each iteration uses one uniform call (x = ndtri(U_1), U',
    U), so an element keeps the first acceptance of its own i.i.d. stream (exact). Written by
    hand because ``jax.random.gamma`` costs seconds of XLA compile time per call site.

    shape, rate : arrays (broadcast), float32 or float64, > 0. Returns the broadcast shape in
    the dtype of ``shape``. Source: project addition.

    Raises nothing of its own (no value checks: traced code); shapes that do not broadcast make jax
    raise ValueError.
    """
    shape = jnp.asarray(shape)
    dtype = shape.dtype if jnp.issubdtype(shape.dtype, jnp.floating) else jnp.result_type(float)
    out_shape = jnp.broadcast_shapes(jnp.shape(shape), jnp.shape(rate))
    shape = jnp.broadcast_to(shape, out_shape).astype(dtype)
    d = shape + (1.0 - 1.0 / 3.0)
    cc = 1.0 / jnp.sqrt(9.0 * d)
    tiny = jnp.finfo(dtype).tiny

    def cond(carry):
        return ~jnp.all(carry[3])

    def body(carry):
        it, key, out, done = carry
        u = jax.random.uniform(jax.random.fold_in(key, it), (3,) + out_shape, dtype=dtype, minval=tiny, maxval=1.0)
        x = ndtri(u[0])
        v = 1.0 + cc * x
        ok = v > 0
        v3 = jnp.where(ok, v * v * v, 1.0)
        lv = jnp.log(v3)
        acc = ok & (jnp.log(u[1]) < 0.5 * x * x + d - d * v3 + d * lv) & ~done
        val = jnp.log(d) + lv + jnp.log(u[2]) / shape
        return it + 1, key, jnp.where(acc, val, out), done | acc

    init = (jnp.zeros((), jnp.int32), key, jnp.zeros(out_shape, dtype), jnp.zeros(out_shape, bool))
    return jax.lax.while_loop(cond, body, init)[2] - jnp.log(jnp.asarray(rate, dtype))


def gamma_draw(key, shape, rate):
    r"""x ~ Gamma(shape, rate) without underflow to 0 for tiny shapes (float32 and float64).

    x = exp(`gamma_log_draw`) clamped below at the dtype's smallest normal number: in float32 a
    draw with shape 1e-3 is below 1e-38 with high probability and a plain draw returns 0, which
    puts log 0 into the log joint. Arrays broadcast; dtype of ``shape``. Source: project addition.

    Raises nothing of its own (no value checks: traced code); shapes that do not broadcast make jax
    raise ValueError.
    """
    lx = gamma_log_draw(key, shape, rate)
    return jnp.maximum(jnp.exp(lx), jnp.finfo(lx.dtype).tiny)
