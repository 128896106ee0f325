"""One loop over the nonzeros in fixed-size chunks, shared by the solvers whose sweeps sum over
observed entries (HPF CAVI, HPF Gibbs): each chunk's (chunk, K) temporaries stay small, so no
(N, K) array is formed however many nonzeros there are.

Source: project addition.
"""

from __future__ import annotations

import jax

__all__ = ["over_chunks"]


def over_chunks(n: int, chunk: int, body, carry):
    """Run ``body(start, size, carry) -> carry`` over the index range [0, n) in chunks of ``chunk``.

    A ``lax.fori_loop`` over the whole chunks (static ``size``, traced ``start``, so the body is
    compiled once), then one call for the tail (its own static size).

    Parameters
    ----------
    n : int
        Length of the index range (e.g. the number of nonzeros N), a Python int.
    chunk : int >= 1
        Chunk length, a Python int.
    body : callable
        ``body(start, size, carry) -> carry``: ``start`` a traced int32 scalar (a Python int for
        the tail), ``size`` a static Python int; it handles indices [start, start + size).
    carry : pytree of jax.Array
        The loop state (e.g. (I, K) and (J, K) float accumulators).

    Returns
    -------
    pytree
        ``carry`` after every chunk, same structure, shapes and dtypes.

    Raises
    ------
    ZeroDivisionError
        Not of its own: ``n // chunk`` raises it for ``chunk`` = 0. What ``body`` raises
        propagates.

    Source: project addition.
    """
    n_full = n // chunk
    if n_full:
        carry = jax.lax.fori_loop(0, n_full, lambda j, c: body(j * chunk, chunk, c), carry)
    if n - n_full * chunk:
        carry = body(n_full * chunk, n - n_full * chunk, carry)
    return carry
