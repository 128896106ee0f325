"""Shared test set-up: float64 everywhere (validation runs in float64), and MovieLens 100K.

MovieLens 100K is read from ``$FACTORBAYES_DATA_DIR/ml-100k`` or from
``../shared/data/ml-100k`` beside the checkout; tests that need it skip otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

# Four host devices so that NUTS runs its four chains in parallel (set before JAX loads).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

# One JAX persistent compilation cache per test run, shared by the xdist workers, the notebook
# kernels and the README subprocesses (they inherit the environment): most of the suite's time is
# XLA compilation, and the same programs (CAVI sweeps, NUTS on the same program, the sampling
# driver's blocks) are compiled in several processes and again after `jax.clear_caches`. The
# directory is new for every run (made by the controlling process before the workers start), so
# no run is faster because of an earlier one. Set FACTORBAYES_JAX_CACHE to choose the directory.
if "FACTORBAYES_JAX_CACHE" not in os.environ:
    import tempfile

    os.environ["FACTORBAYES_JAX_CACHE"] = tempfile.mkdtemp(prefix="factorbayes-jax-cache-")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.environ["FACTORBAYES_JAX_CACHE"])
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


def _ml100k_candidates() -> list[Path]:
    out = []
    env = os.environ.get("FACTORBAYES_DATA_DIR")
    if env:
        out.append(Path(env) / "ml-100k")
    out.append(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ml-100k")
    return out


@pytest.fixture(scope="session")
def ml100k_dir() -> Path:
    for d in _ml100k_candidates():
        if (d / "u.data").is_file():
            return d
    pytest.skip("MovieLens 100K not found ($FACTORBAYES_DATA_DIR/ml-100k or ../shared/data/ml-100k)")


@pytest.fixture(scope="session")
def ml100k(ml100k_dir) -> pd.DataFrame:
    from validation.datasets import load_movielens

    return load_movielens(ml100k_dir)


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop JAX's compiled programs after each test module.

    One xdist worker runs dozens of modules, each compiling its own programs; XLA's CPU JIT keeps
    every executable's code mapped, and after several hundred compilations a worker died in
    compilation (segmentation fault inside ``backend_compile_and_load``, the same exhaustion as the
    ``LLVM ERROR: Unable to allocate section memory`` of long NUTS SBC runs). Module-scoped
    fixtures (stored NUTS references, fits) are kept; only compiled code is freed.
    """
    yield
    jax.clear_caches()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Distribution over the xdist workers (``--dist loadgroup`` in pyproject.toml): whole files
    per worker, so that module-scoped fixtures (NUTS references, fits) are computed once, except
    the notebooks and the README blocks (each runs in its own interpreter, sharing nothing), each
    of which is its own group, so that those slow files are shared out. xdist queues the groups
    with the most tests first, so these one-test groups come last: split, no worker is left
    running a whole file of them at the end while the other waits. ``tryfirst``: the groups must be
    set before pytest-xdist's own hook turns them into test-id suffixes (tests/test_xdist_groups.py)."""
    for item in items:
        path = item.nodeid.split("::")[0]
        group = item.nodeid if path.endswith(("test_notebooks.py", "test_readme.py")) else path
        item.add_marker(pytest.mark.xdist_group(name=group))
