"""The project installs like a library: a wheel builds from the checkout and, installed on its own
(no editable install, no checkout on the path), imports every module, finds its package data (the
stored NUTS references), declares the ``factorbayes`` command, and fits and recommends.

The wheel is built by pip with build isolation (setuptools from PyPI, as any user's ``pip install``
does); it is installed with ``--no-deps --target`` into a temporary folder that comes first on the
child interpreter's path, so the child uses the wheel's files and this environment's dependencies.

Source: project addition (issue 24, "installable like a library").
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import importlib, pkgutil, sys
from pathlib import Path
site = Path(sys.argv[1]).resolve()
import factorbayes, validation, custom_inference, ppl_models
for pkg in (factorbayes, validation, custom_inference, ppl_models):
    assert Path(pkg.__file__).resolve().is_relative_to(site), (pkg.__name__, pkg.__file__)
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(m.name)
from validation.checks import references
assert len(references.stored_names()) >= 10, references.stored_names()
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
df = pd.DataFrame({"u": rng.integers(0, 30, 300), "i": rng.integers(0, 20, 300), "y": rng.integers(1, 4, 300)})
df = df.drop_duplicates(["u", "i"])
m = factorbayes.fit("hpf", df, K=2, seed=0, user_col="u", item_col="i", value_col="y", max_iter=20, tol=0, progress=False)
rec = m.recommend([0, 1], N=3)
assert len(rec) == 6 and np.isfinite(rec["score"]).all(), rec
print("ok", factorbayes.__version__)
"""


def test_wheel_installs_and_runs_on_its_own(tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(wheels)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("factorbayes-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/", "notebooks/"))]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "factorbayes = validation.frontdoor.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    site = tmp_path / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-3000:]
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "XLA_FLAGS": ""}
    child = subprocess.run([sys.executable, "-c", _CHILD, str(site)], cwd=run_dir, env=env, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 0 and child.stdout.startswith("ok"), child.stderr[-4000:]
