"""`benchmarks/bench_scale.py`'s per-solver sweeps are the solvers' own loops (issue 28)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _tiny_design(seed=0, I=30, J=12, n=150):
    from custom_inference.data import Observations
    from validation.frontdoor.api_models import ids_design

    rng = np.random.default_rng(seed)
    key = np.sort(rng.choice(I * J, size=n, replace=False))
    rows, cols = (key // J).astype(np.int32), (key % J).astype(np.int32)
    y = rng.integers(1, 6, size=n).astype(np.float32)
    return ids_design(Observations(rows, cols, y, I, J))


def test_ovbfm_epoch_is_fit_svis_epoch():
    # the benchmark's OVBFM epoch must be the one vbfm.fit_svi runs: the partition of make_batches and a
    # global update counter t across epochs (the old bench drew independent random batches and restarted
    # t at 0 every epoch, so rho_t never fell below 1 / (1 + B)^lam)
    import jax
    import jax.numpy as jnp
    from bench_scale import ovbfm_epoch

    from custom_inference import vbfm
    from ppl_models.fm import FMFlatHyper

    design, hyper, K, seed = _tiny_design(), FMFlatHyper(), 3, 7
    calls = []

    class Spy:
        make_batches = staticmethod(vbfm.make_batches)
        iter_batches = staticmethod(vbfm.iter_batches)

        @staticmethod
        def svi_step(key, state, design_, hyper_, batch, t):
            calls.append((type(batch), int(batch.row_w.shape[0]), t))
            return vbfm.svi_step(key, state, design_, hyper_, batch, t)

    state0 = vbfm.init(jax.random.PRNGKey(seed), design, K, hyper, dtype=jnp.float32)
    epoch = ovbfm_epoch(Spy, design, hyper, seed=seed, n_batches=4)
    state = epoch(None, epoch(None, state0))
    assert [c[2] for c in calls] == list(range(8))  # t continues across epochs
    assert all(c[0] is vbfm.Minibatch for c in calls)
    assert {c[1] for c in calls} == {-(-design.n_rows // 4)}  # make_batches' padded size ceil(N / B)

    ref = vbfm.fit_svi(seed, design, K, hyper, n_batches=4, max_epochs=2, progress=False, init_state=state0)
    # same batches, same t, same compiled update on the same machine: equal bit for bit (last_elbo aside:
    # fit_svi stores its full-data ELBO there, the epoch does not evaluate it)
    for name in state._fields:
        if name != "last_elbo":
            np.testing.assert_array_equal(np.asarray(getattr(state, name)), np.asarray(getattr(ref.state, name)),
                                          err_msg=name)
    assert not np.array_equal(np.asarray(state.v_h), np.asarray(state0.v_h))  # the epochs did move the state
