"""`FMDesign.from_ids` (the one-hot user | item design built in O(N)) equals `FMDesign.from_scipy`."""

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from custom_inference.fm_design import FMDesign


def _generic(rows, cols, y, I, J, dtype):
    """The generic path on the same data: X with ones at (n, u_n) and (n, I + i_n), groups user | item."""
    N = len(rows)
    X = sp.coo_matrix((np.ones(2 * N), (np.repeat(np.arange(N), 2), np.column_stack([rows, I + np.asarray(cols)]).ravel())),
                      shape=(N, I + J))
    return FMDesign.from_scipy(X, y, np.r_[np.zeros(I, int), np.ones(J, int)], group_names=("user", "item"), dtype=dtype)


def assert_same_design(a: FMDesign, b: FMDesign):
    """Field by field, exactly (integers and ones): array type, dtype, shape, values; static fields equal."""
    for f in dataclasses.fields(FMDesign):
        x, z = getattr(a, f.name), getattr(b, f.name)
        if isinstance(z, np.ndarray):
            assert isinstance(x, np.ndarray), f.name
            assert x.dtype == z.dtype, (f.name, x.dtype, z.dtype)
            assert x.shape == z.shape, (f.name, x.shape, z.shape)
            assert np.array_equal(x, z), f.name
        else:
            assert type(x) is type(z) and x == z, (f.name, x, z)


def _triples(seed, I, J, N, index_dtype):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, I, N).astype(index_dtype)  # duplicate (user, item) pairs included: separate instances
    cols = rng.integers(0, J, N).astype(index_dtype)
    return rows, cols, rng.integers(1, 6, N).astype(np.float64) + rng.normal(0, 0.1, N)


# (I, J, N): users and items without any triple (I, J > N), one user, one item, one triple
SHAPES = [(7, 5, 40), (50, 3, 20), (4, 60, 25), (1, 9, 12), (8, 1, 12), (1, 1, 1), (300, 200, 150)]


@pytest.mark.parametrize("I,J,N", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_from_ids_equals_from_scipy(I, J, N, dtype, index_dtype):
    rows, cols, y = _triples(I * 1000 + J * 10 + N, I, J, N, index_dtype)
    got = FMDesign.from_ids(rows, cols, y, (I, J), dtype=dtype)
    assert_same_design(got, _generic(rows, cols, y, I, J, dtype))
    assert got.values.dtype == np.dtype(dtype) and got.y.dtype == np.dtype(dtype)
    assert all(getattr(got, n).dtype == np.int32 for n in ("rows", "cols", "order", "group", "block"))


def test_from_ids_with_users_and_items_without_entries():
    # the users and items that have triples are a strict subset: their features are still in D and in the groups
    I, J = 20, 15
    rows = np.array([3, 3, 17, 5, 3], np.int64)
    cols = np.array([0, 14, 7, 7, 7], np.int64)
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    got = FMDesign.from_ids(rows, cols, y, (I, J))
    assert got.n_features == I + J and got.n_rows == 5
    assert_same_design(got, _generic(rows, cols, y, I, J, np.float64))


def test_a_wrong_item_offset_is_caught():
    # the planted bug: item i placed at column I - 1 + i instead of I + i; the comparison must see it
    I, J, N = 9, 6, 30
    rows, cols, y = _triples(3, I, J, N, np.int64)
    good = FMDesign.from_ids(rows, cols, y, (I, J))
    bad_cols = good.cols.copy()
    bad_cols[1::2] -= 1
    planted = dataclasses.replace(good, cols=bad_cols)
    with pytest.raises(AssertionError, match="cols"):
        assert_same_design(planted, _generic(rows, cols, y, I, J, np.float64))


def test_ids_design_is_from_ids_in_the_requested_dtype():
    from custom_inference.data import Observations
    from validation.frontdoor.api_models import ids_design

    I, J, N = 12, 8, 40
    rows, cols, y = _triples(5, I, J, N, np.int32)
    obs = Observations(rows, cols, y.astype(np.float32), I, J)
    for dtype in (np.float64, np.float32):
        assert_same_design(ids_design(obs, dtype=dtype), _generic(rows, cols, obs.values, I, J, dtype))
    assert ids_design(obs).values.dtype == np.float64  # the front door's default is unchanged


def test_from_ids_does_not_alias_the_callers_values():
    rows, cols, y = _triples(1, 5, 4, 10, np.int64)
    d = FMDesign.from_ids(rows, cols, y, (5, 4))
    y[:] = 0.0
    assert np.all(d.y != 0.0)


@pytest.mark.parametrize("rows,cols,values,shape,kw,exc,match", [
    ([], [], [], (3, 2), {}, ValueError, r"values: no entries .*no nonzero entries"),
    ([0, 1], [0, 1], [1.0, np.nan], (3, 2), {}, ValueError, r"values: 1 NaN or infinite entries \(first at entry 1\)"),
    ([0, 1], [0, 1], [np.inf, 2.0], (3, 2), {}, ValueError, r"values: 1 NaN or infinite entries \(first at entry 0\)"),
    ([0, 3], [0, 1], [1.0, 2.0], (3, 2), {}, ValueError, r"rows: index out of range: found \[0, 3\], allowed \[0, 2\] "
                                                         r"\(n_users I = 3\)"),
    ([-1, 0], [0, 1], [1.0, 2.0], (3, 2), {}, ValueError, r"rows: index out of range: found \[-1, 0\]"),
    ([0, 1], [0, 2], [1.0, 2.0], (3, 2), {}, ValueError, r"cols: index out of range: found \[0, 2\], allowed \[0, 1\] "
                                                         r"\(n_items J = 2\)"),
    ([0.0, 1.0], [0, 1], [1.0, 2.0], (3, 2), {}, TypeError, r"rows: expected integer indices"),
    ([0, 1], [0, 1, 1], [1.0, 2.0], (3, 2), {}, ValueError, r"rows, cols and values must have the same length, got 2, 3, 2"),
    ([[0, 1]], [0, 1], [1.0, 2.0], (3, 2), {}, ValueError, r"rows: expected a 1-D array, got shape \(1, 2\)"),
    ([0, 1], [0, 1], [1.0, 2.0], (3, 0), {}, ValueError, r"shape: expected two integers >= 1"),
    ([0, 1], [0, 1], [1.0, 2.0], (3,), {}, ValueError, r"shape: expected two integers >= 1"),
    ([0, 1], [0, 1], [1.0, 2.0], (3, 2), {"dtype": np.int32}, ValueError, r"dtype: expected a float dtype"),
    ([0, 1], [0, 1], [1.0, 2.0], (3, 2), {"group_names": ("u",)}, ValueError, r"group_names: expected 2 names"),
])
def test_from_ids_refuses_bad_input(rows, cols, values, shape, kw, exc, match):
    to = (lambda a: np.asarray(a, np.int64) if len(a) == 0 else np.asarray(a))
    with pytest.raises(exc, match=match):
        FMDesign.from_ids(to(rows), to(cols), np.asarray(values, float), shape, **kw)
