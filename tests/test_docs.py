"""The documentation site builds, with warnings as errors, and covers what it must.

One Sphinx build (``python -m sphinx -W --keep-going -b html docs OUT``, in a subprocess, into a
temporary folder; docs/conf.py) per module, then checks on the HTML it wrote:

- the CLI page has a section and the ``--help`` text of every sub-command of
  `validation.frontdoor.cli.build_parser` (a new sub-command appears there by itself, since the
  page is generated from the parser; this fails if the generation breaks);
- the API page of ``factorbayes`` documents every name of ``factorbayes.__all__``;
- every rendered notebook is a page of the gallery, shown with its stored outputs (the build
  never executes a notebook: ``nb_execution_mode = "off"``);
- the changelog, the benchmarks page and every other Markdown page of docs/ (such as
  docs/multi_process.md) are built and reachable from the index.

The build imports the three packages (JAX, NumPyro, PyMC) for autodoc: about 20-25 CPU s.
Source: project addition (issue 24, docs).
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"  # myst-nb writes jupyter_execute/ beside it
    env = dict(os.environ, FACTORBAYES_JAX_CACHE="off", JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sphinx failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return out


def _text(path: Path) -> str:
    assert path.is_file(), f"{path} was not built"
    return path.read_text(encoding="utf-8")


def _plain(page: str) -> str:
    """The page's text: tags (syntax highlighting spans included) removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_cli_page_lists_every_subcommand(site):
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from factorbayes_cli import subcommands
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from validation.frontdoor.cli import build_parser

    names = list(subcommands(build_parser()))
    assert {"fit", "recommend", "evaluate", "crosscheck"} <= set(names)
    page = _text(site / "cli.html")
    for name in names:
        assert f'id="factorbayes-{name}"' in page, f"no section for 'factorbayes {name}' on the CLI page"
        assert f"usage: factorbayes {name}" in _plain(page), f"no --help text of 'factorbayes {name}' on the CLI page"


def test_api_page_documents_the_public_names(site):
    import factorbayes

    page = _text(site / "api" / "factorbayes.html")
    for name in factorbayes.__all__:
        assert f'id="factorbayes.{name}"' in page, f"factorbayes.{name} is not documented"
    # the modules the reference promises
    for page_name, module in [("frontdoor", "validation.frontdoor.scoring"),
                              ("evaluation", "validation.evaluation.holdout"),
                              ("checks", "validation.checks.sbc"), ("solvers", "custom_inference.hpf"),
                              ("solvers", "custom_inference.mcmc_driver"), ("ppl_models", "ppl_models.hpf")]:
        assert f'id="module-{module}"' in _text(site / "api" / f"{page_name}.html"), module


def test_gallery_shows_every_rendered_notebook_with_outputs(site):
    rendered = sorted(p.stem for p in (ROOT / "notebooks" / "rendered").glob("*.ipynb"))
    assert rendered
    gallery = _text(site / "gallery.html")
    for name in rendered:
        assert f'href="notebooks/{name}.html"' in gallery, f"{name} is not in the gallery"
        page = _text(site / "notebooks" / f"{name}.html")
        assert "cell_output" in page, f"{name}: no stored outputs shown"


def test_every_page_is_built_and_reachable(site):
    index = _text(site / "index.html")
    assert "import factorbayes as fb" in _plain(index)
    pages = sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "index") + ["cli"]
    assert {"changelog", "benchmarks", "gallery"} <= set(pages)
    for name in pages:
        _text(site / f"{name}.html")
        assert f'href="{name}.html"' in index, f"{name} is not reachable from the index"
    changelog = _text(site / "changelog.html")
    assert re.search(r"0\.1\.0", changelog)
