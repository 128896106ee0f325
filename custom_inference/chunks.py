"""One loop over the nonzeros in fixed-size chunks, shared by the solvers whose sweeps sum over
observed entries (HPF CAVI, HPF Gibbs): each chunk's (chunk, K) temporaries stay small, so no
(N, K) array is formed however many nonzeros there are.

Source: project addition.
"""

from __future__ import annotations

import jax

__all__ = ["over_chunks"]


def over_chunks(n: int, chunk: int, body, carry):
    """``body(start, size, carry) -> carry`` over the index range [0, n) in chunks of ``chunk``: a
    ``lax.fori_loop`` over the whole chunks (static ``size``, traced ``start``, so the body is
    compiled once), then one call for the tail (its own static size). ``n``, ``chunk``: Python ints
    (``chunk`` >= 1); ``carry``: any pytree, returned updated.

    Raises nothing of its own (``chunk`` = 0 raises ZeroDivisionError; what ``body`` raises
    propagates). Source: project addition.
    """
    n_full = n // chunk
    if n_full:
        carry = jax.lax.fori_loop(0, n_full, lambda j, c: body(j * chunk, chunk, c), carry)
    if n - n_full * chunk:
        carry = body(n_full * chunk, n - n_full * chunk, carry)
    return carry
