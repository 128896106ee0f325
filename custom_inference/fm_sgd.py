r"""SGD-FM: stochastic gradient descent for the factorization machine (square loss).

Source: ``004_90693a0965f06816.txt`` Algorithm 1 (Rendle 2010), objective eq. 2.18, model
eq. 2.17. Loss l(yhat, y) = (yhat - y)^2, so dl/dyhat = 2 (yhat - y) and

    dyhat/dw0 = 1,  dyhat/dw_l = x_nl,  dyhat/dv_lk = x_nl (q_nk - x_nl v_lk),  q_nk = sum_m x_nm v_mk.

As in libFM, all gradients of one instance are evaluated at the parameters the instance
starts from (Algorithm 1 updates w0 before the w_l and v_lk of the same instance; with the
gradient taken at the updated w0 the step is no longer a gradient step of the instance's
loss: we take the simultaneous step).

Regularization. Algorithm 1 adds 2 lambda theta to the step of every parameter of the
instance (lines 3, 5, 7), i.e. once per *occurrence*: one epoch then follows the gradient of

    sum_n l(yhat_n, y_n) + lambda_0 N w0^2 + sum_l lambda_l n_l w_l^2 + sum_lk lambda_lk n_l v_lk^2,

(n_l the number of instances with x_nl != 0), not of eq. 2.18, whose penalty counts each
parameter once. We implement Algorithm 1 as printed (it is what libFM does, and the
frequency-weighted penalty is a sensible choice); the mismatch with eq. 2.18 is in
`validation.models.fm_mcmc.ERRATA`. Regularization constants are per group (lambda_w[g],
lambda_v[g, k]) as the ``lambda_i``, ``lambda_ik`` of Algorithm 1 are in practice.

Minibatches: a batch of B instances takes the mean of the B instance steps (B = 1 is
Algorithm 1). Instances are visited in a seeded shuffle per epoch under ``lax.scan``.

Memory (issue 28). An epoch holds the parameters, the padded rows (N, P) and the shuffled order
(N,) int32: the scan gathers one batch's rows per step (XLA's temporaries for the epoch: 20 bytes
per instance at N = 1e5, K = 50, float32). The per-epoch diagnostics (`mse`, `objective`) evaluate
yhat one factor at a time (`fm_design.fm_yhat`); in the all-factors form they held 1.4 kB per
instance ((M, K) products and the (N, K) q), which was the 1.6 kB per instance measured for the
epoch of `step`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import base, vi_driver
from .fm_design import FMDesign, fm_yhat

__all__ = ["SGDReg", "FMParams", "SGDInfo", "padded_rows", "instance_gradients", "init", "step", "objective", "fit",
           "predict", "mse", "ALGORITHM"]


class SGDReg(NamedTuple):
    """L2 constants of Algorithm 1 (``lambda_0``, ``lambda_i``, ``lambda_ik``), per group g of the design.

    Parameters
    ----------
    lambda_0 : float >= 0
        Penalty of w0 (default 0).
    lambda_w : float or array_like, shape (G,), float, >= 0
        Penalty of w_l by the group of feature l (default 0.01).
    lambda_v : float or array_like, shape (G,) or (G, K), float, >= 0
        Penalty of v_lk by the group of feature l (and factor k) (default 0.01).

    Raises
    ------
    None of its own (a NamedTuple); `step` and `fit` raise ValueError for a negative constant.

    Source: ``004_90693a0965f06816.txt`` Algorithm 1 (lambda_0, lambda_i, lambda_ik; per group as in
    libFM).
    """

    lambda_0: float = 0.0
    lambda_w: object = 0.01
    lambda_v: object = 0.01


class FMParams(NamedTuple):
    """The FM parameters of eq. 2.17 (the state of SGD-FM), a NamedTuple (a JAX pytree).

    Parameters
    ----------
    w0 : jax.Array, shape (), float32 or float64
        Global bias.
    w : jax.Array, shape (D,), same dtype
        Feature biases.
    V : jax.Array, shape (D, K), same dtype
        Factor loadings (row l is v_l).

    Raises
    ------
    None of its own (a NamedTuple: the fields are not checked).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17.
    """

    w0: jax.Array
    w: jax.Array
    V: jax.Array


class SGDInfo(NamedTuple):
    """Diagnostics of one epoch (`step`), of the parameters it returns.

    Parameters
    ----------
    train_mse : jax.Array, shape (), the parameters' float dtype
        Training mean squared error (`mse`).
    objective : jax.Array, shape (), same dtype
        The frequency-weighted regularized sum of squares that Algorithm 1 descends (`objective`,
        module docstring).

    Raises
    ------
    None of its own (a NamedTuple).

    Source: project addition (the ``base`` protocol's Info).
    """

    train_mse: jax.Array
    objective: jax.Array


def padded_rows(design: FMDesign):
    """Nonzeros per instance padded to the largest row, on the host.

    Parameters
    ----------
    design : FMDesign
        N instances with M nonzeros (host or device arrays; read with ``numpy.asarray``).

    Returns
    -------
    C : numpy.ndarray, shape (N, P), int32
        Feature ids of each row's nonzeros (0 in padding); P is the largest number of nonzeros of a row.
    Xv : numpy.ndarray, shape (N, P), the design's float dtype
        Their values (0 in padding).

    Raises
    ------
    None of its own (`FMDesign` has validated the arrays).

    Notes
    -----
    Host memory: the nonzeros are re-sorted by row only when they are not (a design from
    `FMDesign.from_scipy` is), and the positions are int32 below 2^31 nonzeros (`step` calls this
    at every epoch: issue 28).

    Source: project addition.
    """
    rows, cols, vals = np.asarray(design.rows), np.asarray(design.cols), np.asarray(design.values)
    if rows.size > 1 and not np.all(rows[1:] >= rows[:-1]):  # `FMDesign.from_scipy` sorts them already
        order = np.argsort(rows, kind="stable")
        rows, cols, vals = rows[order], cols[order], vals[order]
    counts = np.bincount(rows, minlength=design.n_rows)
    P = int(counts.max())
    it = np.int32 if rows.size < 2 ** 31 else np.int64
    start = (np.cumsum(counts) - counts).astype(it)
    pos = np.arange(rows.size, dtype=it)
    pos -= start[rows]
    C = np.zeros((design.n_rows, P), np.int32)
    Xv = np.zeros((design.n_rows, P), vals.dtype)
    C[rows, pos] = cols
    Xv[rows, pos] = vals
    return C, Xv


def _reg_arrays(reg: SGDReg, G: int, K: int, dtype):
    lw = jnp.broadcast_to(jnp.asarray(reg.lambda_w, dtype), (G,))
    lv = jnp.asarray(reg.lambda_v, dtype)
    lv = jnp.broadcast_to(lv[:, None] if lv.ndim == 1 else lv, (G, K))
    return jnp.asarray(reg.lambda_0, dtype), lw, lv


def instance_gradients(params: FMParams, c, x, y, group, lam):
    """Algorithm 1's step directions for B instances at the same parameters.

    Parameters
    ----------
    params : FMParams
        w0 (), w (D,), V (D, K), float32 or float64.
    c : jax.Array, shape (B, P), int
        Padded feature ids of the B instances (`padded_rows`).
    x : jax.Array, shape (B, P), float
        Their values (0 in padding).
    y : jax.Array, shape (B,), float
        Targets.
    group : jax.Array, shape (D,), int
        Group of each feature, in [0, G).
    lam : tuple of jax.Array
        (lambda_0 (), lambda_w (G,), lambda_v (G, K)), the `SGDReg` constants broadcast.

    Returns
    -------
    g0 : jax.Array, shape (), the parameters' dtype
        The mean over the B instances of dl/dw0 + 2 lambda_0 w0.
    gw : jax.Array, shape (D,)
        The same for w: dl/dw_l + 2 lambda_w[g_l] w_l summed over the instances' nonzeros of l, / B.
    gV : jax.Array, shape (D, K)
        The same for V (padding excluded).

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` Algorithm 1 lines 3, 5, 7 (gradients of eq. 2.17, module
    docstring; simultaneous step and minibatch mean: project addition).
    """
    g0, gw_e, gv_e = _entry_gradients(params, c, x, y, group, lam)
    D = params.w.shape[0]
    gw = jnp.zeros(D, params.w.dtype).at[c.reshape(-1)].add(gw_e.reshape(-1))
    gV = jnp.zeros_like(params.V).at[c.reshape(-1)].add(gv_e.reshape(-1, params.V.shape[1]))
    return g0, gw, gV


def _entry_gradients(params: FMParams, c, x, y, group, lam):
    """`instance_gradients` per nonzero, before the scatter: g0 (), gw_e (B, P), gv_e (B, P, K), each
    entry the contribution to feature c[b, p] (0 at padding), already divided by B."""
    lam0, lw, lv = lam
    B = c.shape[0]
    w0, w, V = params
    mask = (x != 0).astype(x.dtype)
    Vc = V[c]                                         # (B, P, K)
    xv = x[..., None] * Vc
    q = xv.sum(1)                                     # (B, K)
    yhat = w0 + (x * w[c]).sum(1) + 0.5 * (q * q - (xv * xv).sum(1)).sum(-1)
    d = 2.0 * (yhat - y)                              # dl/dyhat
    g0 = jnp.mean(d + 2.0 * lam0 * w0)
    gcols = group[c]
    gw_e = (d[:, None] * x + 2.0 * lw[gcols] * w[c] * mask) / B
    gv_e = (d[:, None, None] * x[..., None] * (q[:, None, :] - xv) + 2.0 * lv[gcols] * Vc * mask[..., None]) / B
    return g0, gw_e, gv_e


def mse(params: FMParams, design: FMDesign) -> jax.Array:
    """Training mean squared error of eq. 2.17, O(nnz K).

    Parameters
    ----------
    params : FMParams
        w0 (), w (D,), V (D, K), float.
    design : FMDesign
        N instances with targets ``y`` (N,).

    Returns
    -------
    jax.Array, shape (), the parameters' dtype
        mean_n (y_n - yhat_n)^2.

    Raises
    ------
    None of its own (no checks: traced code).

    Source: ``004_90693a0965f06816.txt`` eq. 2.17 (the loss of Algorithm 1, averaged).
    """
    yhat = predict(params, design)
    return jnp.mean((jnp.asarray(design.y) - yhat) ** 2)


def _objective(params, design, lam, counts):
    lam0, lw, lv = lam
    g = jnp.asarray(design.group)
    resid = jnp.asarray(design.y) - predict(params, design)
    return (jnp.sum(resid ** 2) + lam0 * design.n_rows * params.w0 ** 2
            + jnp.sum(lw[g] * counts * params.w ** 2) + jnp.sum(lv[g] * counts[:, None] * params.V ** 2))


def _counts(design: FMDesign, dtype):
    return jnp.asarray(np.bincount(np.asarray(design.cols), minlength=design.n_features), dtype)


def objective(params: FMParams, design: FMDesign, hyper: SGDReg = SGDReg()) -> jax.Array:
    """The protocol target: the objective Algorithm 1 descends (module docstring), a scalar.

    sum_n (y_n - yhat_n)^2 + lambda_0 N w0^2 + sum_l lambda_w[g_l] n_l w_l^2 + sum_lk lambda_v[g_l, k] n_l v_lk^2,
    n_l the number of instances with x_nl != 0. Work O(M K) for M nonzeros.

    Parameters
    ----------
    params : FMParams
        w0 (), w (D,), V (D, K), float.
    design : FMDesign
        N instances, D features, G groups.
    hyper : SGDReg
        The L2 constants (not checked for sign here).

    Returns
    -------
    jax.Array, shape (), the parameters' dtype
        The objective.

    Raises
    ------
    None of its own; regularization constants that do not broadcast to (G,) / (G, K) make jax
    raise ValueError.

    Source: ``004_90693a0965f06816.txt`` Algorithm 1 (frequency-weighted form of eq. 2.18).
    """
    dtype = jnp.result_type(params.w)
    lam = _reg_arrays(hyper, design.n_groups, params.V.shape[1], dtype)
    return _objective(params, design, lam, _counts(design, dtype))


def _check_reg(reg) -> None:
    for name, v in zip(SGDReg._fields, reg):
        if np.any(np.asarray(v) < 0):
            raise ValueError(f"reg.{name} must be >= 0")


def init(key, design: FMDesign, K: int, hyper: SGDReg = SGDReg(), *, init_std: float = 0.1,
         dtype=np.float64) -> FMParams:
    """Algorithm 1's start: w0 = 0, w = 0, v_lk ~ N(0, init_std^2) from ``key`` (`base.as_key`).

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed.
    design : FMDesign
        The training design (only its D = ``n_features`` is used).
    K : int >= 1
        Number of factors.
    hyper : SGDReg
        Unused (the protocol's signature).
    init_std : float >= 0, keyword-only
        Standard deviation of the initial v_lk (default 0.1; libFM's init_stdev).
    dtype : numpy dtype, keyword-only
        float64 (default) or float32 (`base.compute_dtype`).

    Returns
    -------
    FMParams
        w0 (), w (D,) zeros, V (D, K) normal draws, all ``dtype``.

    Raises
    ------
    ValueError
        K < 1 or not integral (`base.check_latent_dim`); ``init_std`` negative or not finite; a
        ``dtype`` other than float32 / float64.
    TypeError
        K not a number; ``key`` neither a PRNG key nor an integer (`base.as_key`).

    Source: ``004_90693a0965f06816.txt`` Algorithm 1 (libFM's init_stdev as a standard deviation).
    """
    del hyper
    K = base.check_latent_dim(K)
    if not (np.isfinite(init_std) and init_std >= 0):
        raise ValueError(f"init_std must be finite and >= 0, got {init_std!r}")
    dtype = base.compute_dtype(dtype)
    return FMParams(jnp.zeros((), dtype), jnp.zeros(design.n_features, dtype),
                    init_std * jax.random.normal(base.as_key(key), (design.n_features, K), dtype))


def _epoch_impl(params, k, C, Xv, y, group, lam, eta, B: int, n_batches: int):
    """One shuffled pass of minibatch steps (the kernel of `fit` and `step`)."""
    N = C.shape[0]
    idx = jax.random.permutation(k, N)[: n_batches * B].reshape(n_batches, B)

    def one(p, ii):
        # the step touches only the rows of w and V that the batch's instances use: O(B P K), where the
        # dense gradient of `instance_gradients` made every step O(D K) (issue 28: an epoch of 1e6
        # instances at D = 5e5, K = 50 did not finish in 900 s)
        c = C[ii]
        g0, gw_e, gv_e = _entry_gradients(p, c, Xv[ii], y[ii], group, lam)
        c = c.reshape(-1)
        return FMParams(p.w0 - eta * g0, p.w.at[c].add(-eta * gw_e.reshape(-1)),
                        p.V.at[c].add(-eta * gv_e.reshape(c.shape[0], -1))), None

    params, _ = jax.lax.scan(one, params, idx)
    return params


@jax.jit
def _step_jit(key, params, C, Xv, design, lam, eta, counts, batch_size):
    n_batches = design.n_rows // batch_size.shape[0]
    new = _epoch_impl(params, key, C, Xv, jnp.asarray(design.y, eta.dtype), design.group, lam, eta,
                      batch_size.shape[0], n_batches)
    return new, SGDInfo(mse(new, design), _objective(new, design, lam, counts))


def step(key, params: FMParams, design: FMDesign, hyper: SGDReg = SGDReg(), *, learning_rate: float,
         batch_size: int = 1, padded=None) -> tuple[FMParams, SGDInfo]:
    """The protocol step: one epoch of Algorithm 1 (a shuffle drawn from ``key``, minibatches of
    ``batch_size`` instances, the last partial batch skipped), then `SGDInfo` of the new parameters.

    Parameters
    ----------
    key : jax.Array or int
        A jax PRNG key or an integer seed: the epoch's shuffle.
    params : FMParams
        w0 (), w (D,), V (D, K), float32 or float64 (the dtype the epoch computes in).
    design : FMDesign
        N training instances (device arrays, or host arrays copied to the device at every call).
    hyper : SGDReg
        The L2 constants, each >= 0.
    learning_rate : float > 0, keyword-only
        eta.
    batch_size : int in 1..N, keyword-only
        B (default 1, Algorithm 1 as printed).
    padded : tuple of (C int (N, P), Xv float (N, P)), keyword-only, optional
        `padded_rows` of ``design``, built and placed once by a caller that runs many epochs, as
        `fit` does; None (default): built on the host at this call. The result is the same bit for
        bit either way (tests/custom_inference/test_fm_sgd.py).

    Returns
    -------
    params : FMParams
        After the epoch, same shapes and dtype.
    info : SGDInfo
        Training MSE and objective of the new parameters.

    Raises
    ------
    ValueError
        ``learning_rate`` not > 0; ``batch_size`` not an integer in 1..N; a negative regularization
        constant; a ``padded`` whose arrays are not both (N, P).
    TypeError
        ``key`` neither a PRNG key nor an integer (`base.as_key`).

    Source: ``004_90693a0965f06816.txt`` Algorithm 1.
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
    if int(batch_size) != batch_size or not 1 <= batch_size <= design.n_rows:
        raise ValueError(f"batch_size must be an integer in 1..{design.n_rows}, got {batch_size!r}")
    _check_reg(hyper)
    dtype = jnp.result_type(params.w)
    C, Xv = padded_rows(design) if padded is None else padded
    if C.ndim != 2 or C.shape[0] != design.n_rows or Xv.shape != C.shape:
        raise ValueError(f"padded: expected (C, Xv) of one shape ({design.n_rows}, P) (`padded_rows` of the design), "
                         f"got {C.shape} and {Xv.shape}")
    lam = _reg_arrays(hyper, design.n_groups, params.V.shape[1], dtype)
    # the batch size travels as the static shape of a dummy array, so the step compiles once per size
    return _step_jit(base.as_key(key), params, jnp.asarray(C), jnp.asarray(Xv, dtype),
                     jax.tree_util.tree_map(jnp.asarray, design), lam, jnp.asarray(learning_rate, dtype),
                     _counts(design, dtype), jnp.zeros(int(batch_size), jnp.int8))


def fit(key, design: FMDesign, K: int, hyper: SGDReg = SGDReg(), *, learning_rate: float, n_epochs: int = 20,
        init_std: float = 0.1, batch_size: int = 1, dtype=np.float64, test: FMDesign | None = None,
        progress: bool = False, checkpoint=None, checkpoint_every: int = 10, resume: bool = False) -> base.FitResult:
    """SGD-FM (Algorithm 1): ``n_epochs`` passes over a seeded shuffle of the instances.

    Parameters
    ----------
    key : jax PRNG key or int seed (`base.as_key`): initialization and shuffles.
    design : FMDesign (training data).
    K : int >= 1.
    hyper : SGDReg (per-group L2 constants).
    learning_rate : float > 0 (eta).
    n_epochs : int >= 1.
    init_std : sd of the initial v_lk ~ N(0, init_std^2) (Algorithm 1's "N(0, sigma^-1)" names a
        precision; libFM's init_stdev, used here, is a standard deviation). w0 = 0, w = 0.
    batch_size : B >= 1; instances that do not fill the last batch of an epoch are skipped in
        that epoch (a different shuffle each epoch).
    dtype : float64 or float32.
    test : optional FMDesign with the same D: its RMSE is recorded after every epoch (for
        RMSE-versus-time curves, thesis fig. 4.2).
    progress : tqdm bar over the epochs.
    checkpoint, checkpoint_every, resume : the epochs run one compiled epoch at a time through
        `vi_driver.fit`; with ``checkpoint`` (a ``.npz`` path) it writes the parameters, the epochs done
        and the per-epoch trace every ``checkpoint_every`` epochs and at the end (atomically);
        ``resume=True`` continues from an existing checkpoint. The epoch keys are split from ``key``
        up front and one epoch is the body of the former single compiled scan over all epochs, so every
        run, checkpointed or resumed, equals that scan bit for bit (tests/custom_inference/test_fm_sgd.py).

    Returns
    -------
    `base.FitResult`: state FMParams after the last epoch; trace float64 (n_epochs,) the objective
    (`objective`) after each epoch; idata with the point estimate as ``posterior`` (w0, w (feature),
    V (feature, factor); one chain, one draw) and group ``sgd_trace`` (train_mse, objective, test_rmse
    (NaN without ``test``), dim epoch); attrs: the layout of `vi_driver.fit` (``seconds``: wall time of
    the epochs, compilation excluded: the epoch is compiled before the loop) and learning_rate,
    batch_size, n_epochs.

    Raises
    ------
    ValueError for K < 1, learning_rate <= 0, n_epochs < 1, batch_size not in 1..N, negative
    regularization; TypeError for a bad key.

    Also raises ValueError when ``test`` has a different number of features D, for
    ``checkpoint_every`` not an integer >= 1 with a ``checkpoint`` or a checkpoint whose state does
    not match (`vi_driver.fit`); OSError when the checkpoint cannot be written.

    Source: ``004_90693a0965f06816.txt`` Algorithm 1 (objective eq. 2.18, frequency-weighted; module
    docstring).
    """
    reg = hyper
    if int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
    if int(n_epochs) != n_epochs or n_epochs < 1:
        raise ValueError(f"n_epochs must be an integer >= 1, got {n_epochs!r}")
    if int(batch_size) != batch_size or not 1 <= batch_size <= design.n_rows:
        raise ValueError(f"batch_size must be an integer in 1..{design.n_rows}, got {batch_size!r}")
    _check_reg(reg)
    K, B, N = int(K), int(batch_size), design.n_rows
    dtype = np.dtype(dtype)
    C, Xv = padded_rows(design)
    with jax.enable_x64(dtype == np.float64):
        C, Xv = jnp.asarray(C), jnp.asarray(Xv, dtype)
        y = jnp.asarray(design.y, dtype)
        group = jnp.asarray(design.group)
        lam = _reg_arrays(reg, design.n_groups, K, dtype)
        counts = _counts(design, dtype)
        k_init, k_shuf = jax.random.split(base.as_key(key))
        params = init(k_init, design, K, reg, init_std=init_std, dtype=dtype)
        n_batches = N // B
        eta = jnp.asarray(learning_rate, dtype)
        dj = jax.tree_util.tree_map(jnp.asarray, design)

        if test is not None and test.n_features != design.n_features:
            raise ValueError(f"test: has {test.n_features} features, the training design {design.n_features}")
        dt = None if test is None else jax.tree_util.tree_map(jnp.asarray, test)

        def epoch(params, k):
            params = _epoch_impl(params, k, C, Xv, y, group, lam, eta, B, n_batches)
            test_rmse = jnp.nan if dt is None else jnp.sqrt(mse(params, dt))
            return params, (mse(params, dj), _objective(params, dj, lam, counts), test_rmse)

        run = jax.jit(lambda p, ks: jax.lax.scan(epoch, p, ks))
        keys = jax.random.split(k_shuf, n_epochs)
        one = run.lower(params, keys[:1]).compile()  # one epoch, compiled once before the timed loop

        def sweep(p, t):  # epoch t: the scan body over a key block of length 1 (bit for bit the full scan)
            p, outs = one(p, keys[t:t + 1])
            return p, vi_driver.Report(stats={name: v[0] for name, v in zip(_TRACE, outs)})

        output = vi_driver.Output(
            "fm_flat", "sgd", lambda p: (vi_driver.point_posterior(p._asdict()), "point estimate"),
            dims={"w": ["feature"], "V": ["feature", "factor"], **{f: ["epoch"] for f in _TRACE}},
            coords={"feature": np.arange(design.n_features), "factor": np.arange(K)}, trace_group="sgd_trace",
            result_trace=lambda res: res.stats["objective"], source="004_90693a0965f06816.txt Algorithm 1",
            attrs={"learning_rate": float(learning_rate), "batch_size": B, "n_epochs": int(n_epochs)})
        options = vi_driver.FitOptions(max_iter=n_epochs, progress=progress, checkpoint=checkpoint,
                                       checkpoint_every=checkpoint_every, resume=resume, dtype=dtype)
        return vi_driver.fit(ALGORITHM, dj, options=options, output=output, key=key, K=K, hyper=reg, state=params,
                             sweep=sweep, desc="SGD-FM")


#: The per-epoch records of `fit` (its ``sgd_trace`` group), in the order the epoch returns them.
_TRACE = ("train_mse", "objective", "test_rmse")


def predict(params, design_or_coo) -> jax.Array:
    """The FM prediction yhat_n of eq. 2.17 for every row of a design.

    Parameters
    ----------
    params : FMParams or dict
        w0 (), w (D,), V (D, K), float (a dict with keys ``w0``, ``w``, ``V``).
    design_or_coo : FMDesign or tuple
        The design, or its nonzeros as (rows int (M,), cols int (M,), values float (M,), n_rows int N).

    Returns
    -------
    jax.Array, shape (N,), the parameters' dtype
        yhat.

    Raises
    ------
    None of its own; a dict without ``w0``, ``w`` or ``V`` raises KeyError, a tuple that does not
    unpack into four values raises ValueError.

    Notes
    -----
    Memory O(M + N + D K): the factors are summed one at a time (`fm_design.fm_yhat`), so `mse` and
    `objective`, which every epoch of `step` / `fit` evaluates, hold no (M, K) or (N, K) array.

    Source: ``004_90693a0965f06816.txt`` eq. 2.17 (computed as eq. 4.22).
    """
    if isinstance(params, dict):
        params = FMParams(params["w0"], params["w"], params["V"])
    if isinstance(design_or_coo, FMDesign):
        rows, cols, values, n = design_or_coo.rows, design_or_coo.cols, design_or_coo.values, design_or_coo.n_rows
    else:
        rows, cols, values, n = design_or_coo
    w0, w, V = params
    values = jnp.asarray(values, jnp.result_type(w))
    return fm_yhat(w0, w, V, jnp.asarray(rows), jnp.asarray(cols), values, int(n))


#: The protocol declaration (`custom_inference.base`).
ALGORITHM = base.Algorithm("fm-sgd", "sgd", init, step, objective, "objective",
                           {"w0": (), "w": ("feature",), "V": ("feature", "factor")},
                           "004_90693a0965f06816.txt Algorithm 1 (Rendle 2010)").check()
