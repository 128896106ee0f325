"""The test run's distribution over xdist workers is what pyproject.toml says it is.

``--dist loadgroup`` keeps a file's tests on one worker only when pytest-xdist can append the
group (set by tests/conftest.py) to the test's id; with pytest 9.2 and pytest-xdist <= 3.8 it
cannot, every test is scheduled alone, and module-scoped fixtures (fits, NUTS references) are
computed once per worker instead of once (pytest-xdist issue #1386: pyproject.toml pins pytest
below 9.2). Outside a loadgroup run (``-n 0``, ``-p no:xdist``) there is nothing to check.
"""

import os

import pytest


def test_this_file_is_one_xdist_group(request):
    if not os.environ.get("PYTEST_XDIST_WORKER") or not request.config.getvalue("loadgroup"):
        pytest.skip("not a --dist loadgroup run")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py"), request.node.nodeid
