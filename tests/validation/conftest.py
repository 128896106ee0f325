"""Fixtures shared by the front-door tests (test_api.py, test_fold_in.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    """A (reader, book, stars) table with string ids: 24 readers x 18 books, 45% of cells rated 1..5."""
    rng = np.random.default_rng(0)
    I, J = 24, 18
    mask = rng.random((I, J)) < 0.45
    u, i = np.nonzero(mask)
    stars = rng.integers(1, 6, size=u.size).astype(float)
    return pd.DataFrame({"reader": [f"u{k}" for k in u], "book": [f"b{k}" for k in i], "stars": stars})
