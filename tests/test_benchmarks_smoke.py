"""Smoke test of the benchmark data generator (`benchmarks/synthetic_scale.py`): cheap, numpy only."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from synthetic_scale import netflix_like  # noqa: E402


@pytest.mark.parametrize("kind", ["counts", "ratings", "binary"])
def test_netflix_like_shape_dtypes_no_duplicates(kind):
    n = 10_000
    rows, cols, values = netflix_like(n, kind=kind, seed=3, chunk=1_000)
    assert rows.dtype == np.int32 and cols.dtype == np.int32 and values.dtype == np.float32
    assert rows.shape == cols.shape == values.shape == (n,)
    assert rows.min() >= 0 and rows.max() < 480_189 and cols.min() >= 0 and cols.max() < 17_770
    key = rows.astype(np.int64) * 17_770 + cols
    assert np.all(np.diff(key) > 0)  # row-major order, hence no duplicate pair
    if kind == "counts":
        assert values.min() >= 1 and np.all(values == np.round(values))
    elif kind == "ratings":
        assert set(np.unique(values)) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    else:
        assert np.all(values == 1)
    again = netflix_like(n, kind=kind, seed=3, chunk=1_000)
    for a, b in zip((rows, cols, values), again):
        np.testing.assert_array_equal(a, b)  # same seed, same matrix


def test_netflix_like_tops_up_a_dense_draw_to_exactly_n():
    # 200 x 50 cells, 4,000 pairs with skewed popularity: the first round has many duplicates
    rows, cols, _ = netflix_like(4_000, n_users=200, n_items=50, kind="binary", seed=1, item_exponent=1.0)
    key = rows.astype(np.int64) * 50 + cols
    assert key.size == 4_000 and np.unique(key).size == 4_000
    with pytest.raises(ValueError, match="n_nonzeros"):
        netflix_like(6_000, n_users=200, n_items=50)


def test_bench_scoring_counts_cover_every_user_and_item():
    from bench_scoring import counts

    rows, cols, values = counts(30, 50, 200, seed=2)
    assert np.unique(rows).size == 30 and np.unique(cols).size == 50  # the fitted model keeps the full shape
    assert np.unique(rows * 50 + cols).size == rows.size and np.all(values >= 1)


def test_bench_scoring_runs_tiny(tmp_path):
    # the scoring benchmark end to end on a tiny fit (its own process: it switches JAX to float64);
    # timings are not checked here, only that every path runs and agrees (the script asserts the old
    # and new paths give the same items)
    import json
    import subprocess

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_scoring.py"
    res = subprocess.run([sys.executable, str(script), "--users", "30", "--items", "40", "--nnz", "200", "--k", "3",
                          "--draws", "20", "--max-iter", "3", "--repeats", "1", "--old-users", "2", "--skip-peer",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    meta = json.loads((tmp_path / "scoring_bench.json").read_text())
    paths = {r["path"] for r in meta["rows"]}
    assert paths == {"engine means=draws", "engine means=q", "engine means=draws, sd=False", "engine means=q, sd=False",
                     "engine means=draws, sd=False, as_frame=False", "engine means=q, sd=False, as_frame=False",
                     "first call means=draws", "first call means=q", "old FittedModel.recommend"}
    assert meta["cache_MB"] > 0
    assert meta["shape"] == [30, 40]
