"""Shared test set-up: float64 everywhere (validation runs in float64), and MovieLens 100K.

MovieLens 100K is read from ``$FACTORBAYES_DATA_DIR/ml-100k`` or from
``../shared/data/ml-100k`` beside the checkout; tests that need it skip otherwise.
"""

from __future__ import annotations

import json
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
    from validation.data.datasets import load_movielens

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


GROUP_SECONDS = Path(__file__).with_name("group_seconds.json")


def _group(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return nodeid if path.endswith(("test_notebooks.py", "test_readme.py")) else path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Distribution over the xdist workers (``--dist loadgroup`` in pyproject.toml): whole files
    per worker, so that module-scoped fixtures (NUTS references, fits) are computed once, except
    the notebooks and the README blocks (each runs in its own interpreter, sharing nothing), each
    of which is its own group. ``tryfirst``: the groups must be set before pytest-xdist's own hook
    turns them into test-id suffixes (tests/test_xdist_groups.py).

    Order: longest group first (``--no-loadscope-reorder`` keeps this order; xdist's own order,
    most tests first, left a 50-s file to the end of the run while the other worker waited), from
    the seconds per group of a measured run in tests/group_seconds.json (a group not listed counts
    5 s); rewrite it with ``FACTORBAYES_GROUP_SECONDS=1 .venv/bin/python -m pytest`` after adding
    heavy tests. Stale numbers only cost balance, never correctness."""
    seconds = json.loads(GROUP_SECONDS.read_text()) if GROUP_SECONDS.is_file() else {}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(name=_group(item.nodeid)))
    first = {}
    for i, item in enumerate(items):
        first.setdefault(_group(item.nodeid), i)
    items.sort(key=lambda it: (-seconds.get(_group(it.nodeid), 5.0), first[_group(it.nodeid)]))


_measured: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """With FACTORBAYES_GROUP_SECONDS set, add up each group's setup + call + teardown seconds (on the
    controlling process, which sees every worker's reports)."""
    if os.environ.get("FACTORBAYES_GROUP_SECONDS"):
        group = _group(report.nodeid.split("@")[0])
        _measured[group] = _measured.get(group, 0.0) + float(report.duration)


def pytest_sessionfinish(session):
    """With FACTORBAYES_GROUP_SECONDS set, write the measured seconds of the groups that ran into
    tests/group_seconds.json, keeping the others (a run of one file updates that file's entry);
    not from xdist workers: the controlling process has them all."""
    if os.environ.get("FACTORBAYES_GROUP_SECONDS") and _measured and not os.environ.get("PYTEST_XDIST_WORKER"):
        seconds = json.loads(GROUP_SECONDS.read_text()) if GROUP_SECONDS.is_file() else {}
        seconds.update({k: round(v, 1) for k, v in _measured.items()})
        GROUP_SECONDS.write_text(json.dumps(dict(sorted(seconds.items())), indent=0) + "\n")
