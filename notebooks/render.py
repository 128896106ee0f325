"""Render the teaching notebooks with their outputs, for readers who do not run them.

Usage (from the repository root; several minutes of CPU for all of them)::

    nice -n 10 .venv/bin/python notebooks/render.py            # every notebook
    nice -n 10 .venv/bin/python notebooks/render.py hpf rg     # some of them

Every ``notebooks/<name>.py`` that is a jupytext notebook (percent format, the source of truth)
is executed by nbclient in a ``python3`` kernel, exactly as ``tests/test_notebooks.py`` executes
it (the project on ``PYTHONPATH``, ``notebooks/`` as the working directory), and written with its
outputs to ``notebooks/rendered/<name>.ipynb`` (atomically: a temporary file, then a rename). The
paired ``notebooks/<name>.ipynb`` stay output-free; ``tests/test_notebooks.py`` fails when a
rendered notebook is missing or its cells differ from the source (re-run this script after
editing a notebook). This file is not a notebook itself (no jupytext header).

Source: project addition (issue 10: notebooks committed in a rendered form).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent
ROOT = NOTEBOOKS.parent
RENDERED = NOTEBOOKS / "rendered"
KERNEL = "python3"
CELL_TIMEOUT_S = 600


def is_notebook(path: Path) -> bool:
    """Whether ``path`` is a jupytext percent-format notebook: a ``.py`` file whose first line is
    ``# ---`` and whose header (first 20 lines) names ``jupytext``.

    path : a Path. Returns bool. Raises OSError when the file cannot be read.
    Source: project convention (the header jupytext writes).
    """
    with open(path, encoding="utf-8") as f:
        head = [f.readline() for _ in range(20)]
    return path.suffix == ".py" and head[0].strip() == "# ---" and any("jupytext" in line for line in head)


def notebook_names() -> list[str]:
    """The names of the notebooks in ``notebooks/`` (stems of the jupytext ``.py`` files), sorted.

    Raises OSError when a file cannot be read. Source: project convention.
    """
    return sorted(p.stem for p in NOTEBOOKS.glob("*.py") if is_notebook(p))


def render(name: str) -> Path:
    """Execute ``notebooks/<name>.py`` and write ``notebooks/rendered/<name>.ipynb`` with its outputs.

    name : a notebook name (`notebook_names`). Returns the written path.
    Raises FileNotFoundError for an unknown name, nbclient's CellExecutionError when a cell fails
    (nothing is written then), OSError when the file cannot be written.
    Source: project addition.
    """
    import jupytext
    import nbclient
    import nbformat

    src = NOTEBOOKS / f"{name}.py"
    if not src.exists():
        raise FileNotFoundError(f"no notebook {src}; notebooks are {notebook_names()}")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    nb = jupytext.read(src)
    nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    nb.metadata.pop("jupytext", None)  # not paired with anything: a rendered copy of notebooks/<name>.py
    _strip_machine_paths(nb)
    RENDERED.mkdir(exist_ok=True)
    out = RENDERED / f"{name}.ipynb"
    fd, tmp = tempfile.mkstemp(dir=RENDERED, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a rendered notebook is for every reader
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return out


def _strip_machine_paths(nb) -> None:
    """Write this checkout's absolute path out of the outputs (warnings print file paths such as
    ``<checkout>/.venv/lib/.../tqdm/auto.py`` or the kernel's ``/tmp/ipykernel_<pid>/<hash>.py`` for a
    cell; the getting-started notebook prints where it found MovieLens beside the checkout): a rendered notebook names paths relative to the checkout, never
    the machine it was rendered on."""
    import re

    def relative(text: str) -> str:  # the checkout's own files, then what lies beside it (../shared/data),
        # then the kernel's temporary file of a cell (warnings name it: /tmp/ipykernel_<pid>/<hash>.py)
        text = text.replace(str(ROOT) + os.sep, "").replace(str(ROOT.parent) + os.sep, ".." + os.sep)
        return re.sub(r"\S*ipykernel_\d+[/\\]\d+\.py", "<cell>", text)

    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if isinstance(output.get("text"), str):
                output["text"] = relative(output["text"])
            for key, value in output.get("data", {}).items():
                if isinstance(value, str) and key.startswith("text/"):
                    output["data"][key] = relative(value)


def main(argv=None) -> int:
    """Command line: render the named notebooks (default all). Returns the exit status (0; 1 when a
    notebook failed, the others are still rendered). Raises nothing of its own (errors are printed).
    Source: project addition."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"notebooks to render (default all: {notebook_names()})")
    names = parser.parse_args(argv).names or notebook_names()
    failed = []
    for name in names:
        t0 = time.perf_counter()
        try:
            path = render(name)
        except Exception as exc:  # noqa: BLE001 - report and go on with the others
            failed.append(name)
            print(f"{name}: FAILED ({type(exc).__name__}: {str(exc)[:500]})", file=sys.stderr)
            continue
        print(f"{name}: {path.relative_to(ROOT)} ({time.perf_counter() - t0:.0f} s wall)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
