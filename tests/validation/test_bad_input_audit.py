"""The unclear and silent cases of issue 24's audit of bad front-door inputs ("Messages in the user's
terms"), each refused before any solver work with a message that names the user's data and the fix.

Every test replaces the model's solver by a stub that fails if reached, so the refusal provably comes
first (nothing is compiled or fitted here). Already handled on main and tested elsewhere: a damaged or
foreign artifact (tests/validation/test_api_run.py), float16 storage in an `Observations`
(tests/validation/test_bad_input.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from validation.data.loaders import ratings_from_scipy
from validation.frontdoor import adapters, api


class SolverReached(AssertionError):
    """Raised by the stub solver: bad input got past the front door's checks."""


@pytest.fixture
def stub(monkeypatch):
    adapters._ensure_adapters()

    def run(key, obs, K, **options):
        raise SolverReached("the solver was called; the input should have been refused first")

    for name in list(api.ADAPTERS):
        monkeypatch.setitem(api.ADAPTERS, name, dataclasses.replace(api.ADAPTERS[name], run=run))


def _dup_coo():
    # a one-class matrix with the pair (row 0, column 1) stored twice: scipy would make it a 2
    return sp.coo_matrix((np.ones(5), ([0, 0, 1, 2, 3], [1, 1, 2, 0, 1])), shape=(4, 3))


@pytest.mark.parametrize("model", ["sibm", "hpf"])
def test_a_coo_matrix_with_a_stored_duplicate_is_refused_naming_the_pair(model, stub):
    with pytest.raises(ValueError) as err:
        api.fit(model, _dup_coo(), K=2)
    msg = str(err.value)
    assert "(row 0, column 1) x2" in msg and "stored more than once" in msg
    assert "sum_duplicates()" in msg  # how to sum them if that is meant


def test_duplicates_are_summed_only_when_asked_and_the_matrix_is_not_touched():
    m = _dup_coo()
    before = (m.row.copy(), m.col.copy(), m.data.copy())
    with pytest.raises(ValueError, match="stored more than once"):
        ratings_from_scipy(m)
    t = ratings_from_scipy(m, duplicates="sum")
    assert t.loc[(t.user == 0) & (t.item == 1), "rating"].tolist() == [2.0]
    for a, b in zip(before, (m.row, m.col, m.data)):
        np.testing.assert_array_equal(a, b)
    # a summed CSR has no duplicates and is read as before
    assert len(ratings_from_scipy(m.tocsr())) == 4


def test_binarization_that_leaves_nothing_says_the_threshold_and_the_counts(stub):
    df = pd.DataFrame({"reader": ["a", "b", "c"], "book": ["x", "y", "z"], "stars": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError) as err:
        api.fit("sibm", df, K=2, user_col="reader", item_col="book", value_col="stars")
    msg = str(err.value)
    assert "threshold=4" in msg and "3 of 3 entries are below 4" in msg and "largest value 3" in msg
    assert "'stars'" in msg or "stars values" in msg  # the user's column
    assert "lower threshold" in msg


@pytest.mark.parametrize("model", ["bpmf", "sbmf", "vbfm", "sgd-fm"])
def test_a_ratings_model_on_one_class_data_is_refused_naming_the_column_and_the_models_that_fit_it(model, stub):
    """A basket file read for a ratings model has every value 1: a Gaussian fit of constant ratings
    recommended noise without a word (found in a new-user trial); now refused before the solver."""
    df = pd.DataFrame({"basket": [0, 0, 1, 1, 2], "product": ["milk", "eggs", "milk", "tea", "eggs"],
                       "n": [1.0] * 5})
    with pytest.raises(ValueError) as err:
        api.fit(model, df, K=2, user_col="basket", item_col="product", value_col="n")
    msg = str(err.value)
    assert "all 5 values of column 'n' are 1" in msg and "one-class" in msg
    assert "bpr" in msg and "hpf" in msg  # the models that do fit it
    varied = df.assign(n=[1.0, 2.0, 1.0, 3.0, 1.0])  # the same table with ratings passes the check
    with pytest.raises(SolverReached):
        api.fit(model, varied, K=2, user_col="basket", item_col="product", value_col="n")


def test_ovbfm_with_more_batches_than_entries_names_both_numbers(stub):
    df = pd.DataFrame({"u": [0, 1], "i": [0, 1], "r": [3.0, 4.0]})
    with pytest.raises(ValueError, match=r"n_batches=10 is larger than the number of entries to fit \(2\)"):
        api.fit("ovbfm", df, K=2, user_col="u", item_col="i", value_col="r", n_batches=10)
    with pytest.raises(SolverReached):  # a valid number goes through to the solver
        api.fit("ovbfm", df, K=2, user_col="u", item_col="i", value_col="r", n_batches=2)


LOW = [np.float16, "float16", "bfloat16", np.int32]


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_the_shared_dtype_check_names_the_accepted_dtypes(dtype):
    from custom_inference import base

    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'float64'\]"):
        base.compute_dtype(dtype)
    with pytest.raises(ValueError, match="float32"):
        base.RunOptions(dtype=dtype)
    assert base.compute_dtype(None, np.float32) == np.float32 and base.compute_dtype("float64") == np.float64
    assert base.compute_dtype(None) is None


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"], ids=str)
def test_vbfm_and_sibm_refuse_float16_compute(dtype):
    # both used to compute silently in the dtype asked for (issue 24 audit)
    from custom_inference import sibm, vbfm
    from custom_inference.data import Observations
    from ppl_models.fm import FMFlatHyper
    from ppl_models.sibm import SIBMHyper
    from validation.frontdoor.api_models import ids_design

    obs = Observations.from_coo([0, 1, 2, 0], [0, 1, 2, 2], [1.0, 1.0, 1.0, 1.0], (3, 3))
    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'float64'\]"):
        sibm.fit(0, obs, 2, SIBMHyper(), max_iter=2, progress=False, dtype=dtype)
    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'float64'\]"):
        vbfm.fit(0, ids_design(obs), 2, FMFlatHyper(), max_iter=2, progress=False, dtype=dtype)


@pytest.mark.parametrize("model", ["sibm", "vbfm", "hpf"])
def test_the_front_door_refuses_float16_compute_before_the_solver(model, stub):
    df = pd.DataFrame({"u": [0, 1, 2], "i": [0, 1, 2], "r": [1.0, 1.0, 1.0]})
    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'float64'\].*got float16"):
        api.fit(model, df, K=2, user_col="u", item_col="i", value_col="r", dtype="float16")
