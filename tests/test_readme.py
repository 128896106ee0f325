"""Every Python block of README.md runs as written.

Each ```python block is executed in a fresh interpreter, in an empty temporary directory (so
files it writes land there), with the project importable. Blocks that read MovieLens (they
mention ``ml-100k`` or ``find_movielens_100k``) are skipped when the data is not beside the
checkout, like the other data tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, request):
    code = BLOCKS[index]
    if "ml-100k" in code or "find_movielens_100k" in code:
        request.getfixturevalue("ml100k_dir")  # skips without the data
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "XLA_FLAGS": ""}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"README block {index} failed:\n{code}\n--- stderr ---\n{proc.stderr[-4000:]}"
