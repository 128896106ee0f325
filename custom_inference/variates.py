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
    first exceeds p, found by counting the element starts), so the work is O(max_total + C) and no
    normal approximation is used.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    counts : array_like, shape (...), int or integral float
        m >= 0, the customers of each element (rounded to int32).
    concentration : array_like, broadcastable to ``counts``, float32 or float64
        r > 0, the concentration of each element.
    max_total : int, static
        >= sum(counts): the length of the flat customer array; customers beyond sum(counts) are
        ignored. If sum(counts) exceeds it, the result is wrong (not checked under jit).

    Returns
    -------
    jax.Array, shape of ``counts``, the concentration's float dtype (the default float for integer r)
        l, with 0 <= l <= m and l >= 1 where m >= 1.

    Raises
    ------
    None of its own (no checks: traced code); a ``concentration`` that does not broadcast to
    ``counts`` makes jax raise ValueError.

    Source: ``004_90693a0965f06816.txt`` ch. 5 Lemma 5.2.1, eq. (5.1) (sampling form); shared math,
    reusable by any negative-binomial / gamma-process model.
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
    when log U' < x^2 / 2 + d - d v + d log v. Every element proposes once; then a
    ``lax.while_loop`` gathers the elements still waiting (at most max(4096, n / 16) at a time)
    into a buffer and proposes again there, for those only, until every one has accepted. Each proposal uses three
    fresh uniforms (x = ndtri(U_1), U', U) and which elements wait depends only on earlier
    rounds, so an element keeps the first acceptance of its own i.i.d. proposals (exact). Written
    by hand because ``jax.random.gamma`` costs seconds of XLA compile time per call site; the
    compaction because redrawing all n elements until the last accepts cost ~5 rounds of n
    (issue 28: 11.2 s for a (5e5, 50) draw, NPFM at Netflix shape).

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    shape : array_like, float32 or float64
        Gamma shapes > 0 (any array shape; broadcast with ``rate``).
    rate : array_like, broadcastable with ``shape``
        Gamma rates > 0 (1 / scale).

    Returns
    -------
    jax.Array, the broadcast shape of ``shape`` and ``rate``, the dtype of ``shape`` (default float if integer)
        log x, one independent draw per element.

    Raises
    ------
    None of its own (no value checks: traced code); shapes that do not broadcast make jax raise
    ValueError.

    Source: project addition (Marsaglia & Tsang 2000 with the boosting identity).
    """
    shape = jnp.asarray(shape)
    dtype = shape.dtype if jnp.issubdtype(shape.dtype, jnp.floating) else jnp.result_type(float)
    out_shape = jnp.broadcast_shapes(jnp.shape(shape), jnp.shape(rate))
    shape = jnp.broadcast_to(shape, out_shape).astype(dtype).reshape(-1)
    n = shape.shape[0]
    d = shape + (1.0 - 1.0 / 3.0)
    cc = 1.0 / jnp.sqrt(9.0 * d)
    tiny = jnp.finfo(dtype).tiny

    def attempt(k, d, cc, a):
        """One Marsaglia-Tsang proposal per element: (accepted, log G U^(1/a))."""
        u = jax.random.uniform(k, (3,) + d.shape, dtype=dtype, minval=tiny, maxval=1.0)
        x = ndtri(u[0])
        v = 1.0 + cc * x
        ok = v > 0
        v3 = jnp.where(ok, v * v * v, 1.0)
        lv = jnp.log(v3)
        return ok & (jnp.log(u[1]) < 0.5 * x * x + d - d * v3 + d * lv), jnp.log(d) + lv + jnp.log(u[2]) / a

    # round 0: every element (> 95 % accept for shape + 1 >= 1). Then the elements still waiting are
    # gathered once into a static buffer of `cap` and re-proposed there until all of them accept (the
    # rest, only if more than `cap` wait, in the next outer round), so the draw costs ~1.1 proposals
    # per element instead of (rounds until the LAST one accepts) x n
    acc, val = attempt(jax.random.fold_in(key, 0), d, cc, shape)
    cap = n if n <= 4096 else max(4096, n // 16)

    def cond(carry):
        return ~jnp.all(carry[2])

    def body(carry):
        it, out, done = carry
        idx = jnp.nonzero(~done, size=cap, fill_value=n)[0]  # n: an empty slot
        valid = idx < n
        j = jnp.minimum(idx, n - 1)
        dj, ccj, aj = d[j], cc[j], shape[j]

        def inner_body(c):
            it, vals, fin = c
            a, v = attempt(jax.random.fold_in(key, it), dj, ccj, aj)
            new = a & ~fin
            return it + 1, jnp.where(new, v, vals), fin | new

        it, vals, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[2]), inner_body,
                                         (it, jnp.zeros(cap, dtype), ~valid))
        dest = jnp.where(valid, idx, n)  # index n is dropped
        return it, out.at[dest].set(vals, mode="drop"), done.at[dest].set(True, mode="drop")

    init = (jnp.ones((), jnp.int32), jnp.where(acc, val, 0.0), acc)
    out = jax.lax.while_loop(cond, body, init)[1].reshape(out_shape)
    return out - jnp.log(jnp.asarray(rate, dtype))


def gamma_draw(key, shape, rate):
    r"""x ~ Gamma(shape, rate) without underflow to 0 for tiny shapes (float32 and float64).

    x = exp(`gamma_log_draw`) clamped below at the dtype's smallest normal number: in float32 a
    draw with shape 1e-3 is below 1e-38 with high probability and a plain draw returns 0, which
    puts log 0 into the log joint.

    Parameters
    ----------
    key : jax.Array
        A JAX PRNG key.
    shape, rate : array_like, float32 or float64
        Gamma shapes and rates > 0, broadcast together, as in `gamma_log_draw`.

    Returns
    -------
    jax.Array, the broadcast shape, the dtype of ``shape``
        x >= the dtype's smallest normal number (``finfo.tiny``).

    Raises
    ------
    None of its own (no value checks: traced code); shapes that do not broadcast make jax raise
    ValueError.

    Source: project addition.
    """
    lx = gamma_log_draw(key, shape, rate)
    return jnp.maximum(jnp.exp(lx), jnp.finfo(lx.dtype).tiny)
