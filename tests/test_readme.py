"""The README's and the docs pages' examples run as written.

Every ```python block of README.md and docs/*.md (but those marked ``<!-- readme-test: skip REASON -->``)
runs in a fresh interpreter, in an empty temporary
directory (files it writes land there), with the project importable; a block that appears on two
pages runs once. Blocks that read MovieLens (they mention ``ml-100k`` or ``find_movielens_100k``) are
skipped when the data is not beside the checkout, like the other data tests.

Every ```bash block of README.md carries a mark on the line before it: ``<!-- readme-test: run -->``
(run here, as written, by bash with ``set -e`` in a temporary directory holding the small files the
README describes: ``ratings.csv`` with columns reader, book, stars in half stars, and ``baskets.csv``,
one basket of item names a line) or ``<!-- readme-test: skip REASON -->``. A block without a mark
fails, so a new README command is either run or says why not. The docs pages' shell blocks are not
run (install commands, hour-long statistical runs, launches on several hosts).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!-- readme-test: (skip[^>]*) -->\n(?:<!--[^\n]*-->\n)*)?```python\n(.*?)```", flags=re.S)
# a block marked ``<!-- readme-test: skip REASON -->`` is not run here (docs/multi_process.md's script: it
# needs two processes, and tests/custom_inference/test_distributed.py runs it)
BLOCKS = list(dict.fromkeys(b for page in PAGES for skip, b in FENCE.findall(page.read_text()) if not skip))
README = (ROOT / "README.md").read_text()
SHELL = re.compile(r"(?:<!-- readme-test: (run|skip[^>]*) -->\n)?```bash\n(.*?)```", flags=re.S)
SHELL_BLOCKS = SHELL.findall(README)


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "XLA_FLAGS": ""}


def test_readme_has_python_blocks():
    assert len(FENCE.findall(README)) >= 1 and len(BLOCKS) >= 2
    assert all(len(skip) > len("skip ") for page in PAGES for skip, _ in FENCE.findall(page.read_text()) if skip)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, request):
    code = BLOCKS[index]
    if "ml-100k" in code or "find_movielens_100k" in code:
        request.getfixturevalue("ml100k_dir")  # skips without the data
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"block {index} failed:\n{code}\n--- stderr ---\n{proc.stderr[-4000:]}"


def test_every_readme_shell_block_is_marked():
    assert SHELL_BLOCKS, "README.md has no bash block"
    unmarked = [code.splitlines()[0] for mark, code in SHELL_BLOCKS if not mark]
    assert not unmarked, f"README bash blocks without a readme-test mark: {unmarked}"
    assert all(mark == "run" or len(mark) > len("skip ") for mark, _ in SHELL_BLOCKS), "a skip mark needs its reason"


def _write_files(folder: Path) -> None:
    """The README's files: ratings.csv (reader, book, stars in half stars; 40 x 30, ~500 rows) and
    baskets.csv (200 baskets of 2-6 item names)."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"reader": [f"u{k}" for k in rng.integers(0, 40, 600)],
                       "book": [f"b{k}" for k in rng.integers(0, 30, 600)],
                       "stars": rng.integers(1, 11, 600) / 2.0}).drop_duplicates(["reader", "book"])
    df.to_csv(folder / "ratings.csv", index=False)
    names = [f"item{k}" for k in range(25)]
    lines = [",".join(rng.choice(names, size=rng.integers(2, 7), replace=False)) for _ in range(200)]
    (folder / "baskets.csv").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("index", [i for i, (mark, _) in enumerate(SHELL_BLOCKS) if mark == "run"])
def test_readme_shell_block_runs(index, tmp_path):
    code = SHELL_BLOCKS[index][1]
    _write_files(tmp_path)
    env = {**_env(), "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "FACTORBAYES_JAX_CACHE": str(tmp_path / "jax-cache")}
    proc = subprocess.run(["bash", "-e", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"README shell block {index} failed:\n{code}\n--- stdout ---\n{proc.stdout[-3000:]}" \
                                 f"\n--- stderr ---\n{proc.stderr[-4000:]}"
    for word in re.findall(r"--out (\S+)", code):  # every output folder the block names was written
        assert any((tmp_path / word).iterdir()), f"{word} is empty"
