"""Tests of the Observations container: validation before computation, round trips, pytree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from custom_inference.data import Observations


def test_from_coo_sorts_drops_zeros_and_keeps_shape():
    obs = Observations.from_coo([2, 0, 1, 0], [1, 3, 0, 0], [5, 1, 0, 2], (3, 4))
    assert obs.shape == (3, 4)
    assert obs.nnz == 3  # the explicit zero is dropped
    np.testing.assert_array_equal(obs.rows, [0, 0, 2])
    np.testing.assert_array_equal(obs.cols, [0, 3, 1])
    np.testing.assert_array_equal(obs.values, [2, 1, 5])
    assert obs.rows.dtype == np.int32


def test_dense_and_scipy_round_trip():
    rng = np.random.default_rng(0)
    dense = rng.poisson(0.7, size=(7, 5)).astype(float)
    obs = Observations.from_dense(dense)
    np.testing.assert_array_equal(obs.to_dense(), dense)
    np.testing.assert_array_equal(obs.to_scipy().toarray(), dense)
    again = Observations.from_scipy(sp.csc_matrix(dense))
    np.testing.assert_array_equal(again.to_dense(), dense)


@pytest.mark.parametrize(
    "rows, cols, values, shape, kind, match",
    [
        ([0], [0], [-1.0], (2, 2), "count", "non-negative"),
        ([0], [0], [1.5], (2, 2), "count", "integers"),
        ([0], [0], [np.nan], (2, 2), "count", "NaN"),
        ([0], [0], [np.inf], (2, 2), "real", "NaN or infinite"),
        ([2], [0], [1.0], (2, 2), "count", "rows index out of range"),
        ([0], [-1], [1.0], (2, 2), "count", "cols index out of range"),
        ([0, 0], [1, 1], [1.0, 2.0], (2, 2), "count", "duplicate"),
        ([0], [0], [0.0], (2, 2), "count", "no \\(nonzero\\) entries"),
        ([], [], [], (2, 2), "count", "no \\(nonzero\\) entries"),
        ([0], [0], [2.0], (2, 2), "binary", "0 or 1"),
        ([0], [0], [1.0], (0, 2), "count", "shape"),
        ([0, 1], [0], [1.0], (2, 2), "count", "same length"),
        ([0.5], [0], [1.0], (2, 2), "count", "integer indices"),
    ],
)
def test_bad_input_raises_naming_the_field(rows, cols, values, shape, kind, match):
    with pytest.raises(ValueError, match=match):
        Observations.from_coo(rows, cols, values, shape, kind=kind)


def test_from_scipy_rejects_dense_input():
    with pytest.raises(ValueError, match="scipy.sparse"):
        Observations.from_scipy(np.ones((2, 2)))


def test_is_a_pytree_with_static_shape():
    obs = Observations.from_dense(np.array([[1.0, 0.0], [0.0, 3.0]]))

    @jax.jit
    def total_per_row(o):
        # the shape is static: it can size an output under jit
        return jax.ops.segment_sum(o.values, o.rows, num_segments=o.n_rows)

    out = total_per_row(jax.tree_util.tree_map(jnp.asarray, obs))
    np.testing.assert_allclose(out, [1.0, 3.0])
