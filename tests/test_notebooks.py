"""The teaching notebooks run end to end, and each paired .ipynb matches its .py source.

Every ``notebooks/<name>.py`` (jupytext percent format) is a notebook and the source of
truth; ``notebooks/<name>.ipynb`` is generated from it with
``jupytext --set-formats ipynb,py:percent`` / ``jupytext --sync`` and committed
without outputs. The tests are parametrized over whatever ``notebooks/*.py`` holds (files with
a jupytext header: ``notebooks/render.py`` is a script), so a new notebook is executed and
sync-checked without editing this file. ``notebooks/rendered/<name>.ipynb`` is the same
notebook executed, with its outputs, for readers who do not run it (written by
``notebooks/render.py``); a rendered notebook whose cells differ from the source fails here.

The notebook is executed by nbclient in a ``python3`` kernel. That kernel spec always
exists where ipykernel is installed: ipykernel's wheel puts it in
``sys.prefix/share/jupyter/kernels/python3``, and jupyter_client falls back on
ipykernel's built-in spec ("native kernel") when none is installed. Its command
line starts with ``python``, which jupyter_client replaces by ``sys.executable``, so
the kernel runs on the interpreter that runs the tests, with the project importable.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def _is_notebook(path: Path) -> bool:
    """A jupytext notebook: first line ``# ---`` and ``jupytext`` in the header (not notebooks/render.py)."""
    head = path.read_text(encoding="utf-8").splitlines()[:20]
    return bool(head) and head[0].strip() == "# ---" and any("jupytext" in line for line in head)


NAMES = sorted(path.stem for path in NOTEBOOKS.glob("*.py") if _is_notebook(path))
RENDER_CMD = "nice -n 10 .venv/bin/python notebooks/render.py"
KERNEL = "python3"
# Per-cell limit, generous on purpose. On a 2-core machine (mostly JAX compilation):
# hpf needs about a minute of CPU, its slowest cells (the errata checks, NUTS with 4 chains x
# 600 iterations) 15-25 s; hpf_gibbs_sbc about 90 s, its slowest cells (NUTS plus the Gibbs
# cross-check, the two CustomGibbs hybrids, the three SBC runs) 20-30 s each. More on a
# loaded machine.
CELL_TIMEOUT_S = 600


def test_notebooks_found():
    assert "hpf" in NAMES, f"no notebooks found in {NOTEBOOKS} (found {NAMES})"
    unpaired = [name for name in NAMES if not (NOTEBOOKS / f"{name}.ipynb").exists()]
    assert not unpaired, (
        f"notebooks without a paired .ipynb: {unpaired}; create it with: "
        "jupytext --set-formats ipynb,py:percent notebooks/<name>.py"
    )
    orphans = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb") if p.stem not in NAMES)
    assert not orphans, f"notebooks/*.ipynb without a .py source: {orphans}"


def _kernel_available() -> bool:
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL in KernelSpecManager().find_kernel_specs()


# Executing a teaching notebook costs 20-100 s of CPU each (a kernel start, then mostly XLA
# compilation of code the model tests compile too): together about a quarter of the default suite.
# The default run executes `getting_started` (the front door on a user's own CSV, the example new
# users copy) and checks every rendered copy (notebooks/rendered/: executed outputs, no errors,
# cells equal to the source) below; the model notebooks execute under `pytest -m slow`, and
# `nice -n 10 .venv/bin/python notebooks/render.py NAME` re-executes one (and fails on an error).
DEFAULT_NOTEBOOKS = ("getting_started",)
SLOW_NOTEBOOKS = tuple(n for n in NAMES if n not in DEFAULT_NOTEBOOKS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_NOTEBOOKS else n
                                  for n in NAMES])
def test_notebook_executes(name, monkeypatch):
    # The kernel inherits this environment: make the project importable from notebooks/
    # even where it is not installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    assert _kernel_available(), (
        f"no {KERNEL!r} Jupyter kernel spec found; install ipykernel into this environment "
        "(pip install ipykernel, or python -m ipykernel install --sys-prefix)"
    )
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    client = nbclient.NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOKS)}},  # cwd of the kernel
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [
        output
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, errors


def _cells(nb):
    return [(cell.cell_type, cell.source.strip()) for cell in nb.cells]


@pytest.mark.parametrize("name", NAMES)
def test_ipynb_in_sync_with_py(name):
    source = jupytext.read(NOTEBOOKS / f"{name}.py")
    paired = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    assert _cells(paired) == _cells(source), (
        f"notebooks/{name}.ipynb is out of date with notebooks/{name}.py; "
        f"regenerate it with: jupytext --to ipynb notebooks/{name}.py"
    )
    formats = paired.metadata.get("jupytext", {}).get("formats", "")
    assert "py:percent" in formats, f"notebooks/{name}.ipynb is not paired (jupytext formats: {formats!r})"
    with_outputs = [
        i for i, cell in enumerate(paired.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not with_outputs, f"notebooks/{name}.ipynb is committed with outputs in cells {with_outputs}; clear them"


@pytest.mark.parametrize("name", NAMES)
def test_rendered_notebook_is_current(name):
    """notebooks/rendered/<name>.ipynb exists, has outputs, and its cells are the source's cells."""
    path = NOTEBOOKS / "rendered" / f"{name}.ipynb"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing; render it with: {RENDER_CMD} {name}"
    rendered = nbformat.read(path, as_version=4)
    source = jupytext.read(NOTEBOOKS / f"{name}.py")
    assert _cells(rendered) == _cells(source), (
        f"{path.relative_to(ROOT)} is stale (its cells differ from notebooks/{name}.py); "
        f"regenerate it with: {RENDER_CMD} {name}"
    )
    code = [cell for cell in rendered.cells if cell.cell_type == "code"]
    assert code and all(cell.get("execution_count") is not None for cell in code), (
        f"{path.relative_to(ROOT)} has cells that were not executed; regenerate it with: {RENDER_CMD} {name}"
    )
    errors = [o for cell in code for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.relative_to(ROOT)} holds errors; fix the notebook and run: {RENDER_CMD} {name}"
    # no absolute machine paths (the checkout's, a home folder's) in what a reader sees: render.py writes
    # the checkout's path out of the outputs; a path elsewhere on the machine has to go from the notebook
    import re

    text = path.read_text(encoding="utf-8")
    here = ROOT.parent if len(ROOT.parent.parts) > 1 else ROOT  # the folder holding the checkout (not "/")
    machine = re.findall(r"(?:%s/|/home/|/root/|/Users/|/tmp/)[^\s\"']*" % re.escape(str(here)), text)
    assert not machine, f"{path.relative_to(ROOT)} shows machine paths {machine[:3]}; re-render: {RENDER_CMD} {name}"
