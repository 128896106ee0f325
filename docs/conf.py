"""Sphinx configuration of the factorbayes documentation.

Build (what tests/test_docs.py runs, warnings as errors)::

    .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

Sources: the docstrings (autodoc + napoleon, numpy style), the Markdown pages (myst-parser),
the rendered notebooks (``docs/notebooks`` is a link to ``notebooks/rendered``; myst-nb shows
their stored outputs and never executes them), the CLI page generated from
`validation.frontdoor.cli.build_parser` (``docs/_ext/factorbayes_cli.py``), and the
changelog and benchmarks pages included from the repository root.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's packages, installed or not
sys.path.insert(0, str(DOCS / "_ext"))

# the build only imports the packages (autodoc) and builds the CLI parser; should anything enable
# JAX's persistent compilation cache (validation.frontdoor.compile_cache), keep it off
os.environ.setdefault("FACTORBAYES_JAX_CACHE", "off")

import factorbayes  # noqa: E402

project = "factorbayes"
author = "factorbayes contributors"
copyright = "factorbayes contributors"
release = factorbayes.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",  # registers myst_parser for .md as well
    "factorbayes_cli",
    "docstrings",  # verbatim docstrings where not reStructuredText; the default role below
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
root_doc = "index"

# single backticks in the docstrings: a dotted name (`validation.frontdoor.api.fit`) links where
# Sphinx finds it, anything else (`K`, `theta`) is code (docs/_ext/docstrings.py)
default_role = "code-or-xref"

# --- autodoc / napoleon ---------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# parameter and attribute types as plain text: the shapes in them ("(K,) float") are not Python
# objects, and Sphinx would try to cross-reference every word (ambiguous `K` targets)
napoleon_use_param = False
# Attributes sections rendered like Parameters: neither `.. attribute::` directives (they would
# duplicate the NamedTuple fields autodoc documents) nor :vartype: fields (cross-referenced word
# by word, as above)
# Returns / Raises / Yields / Warns are prose in these docstrings ("ValueError naming the field:
# ..."), not numpy's "Type\n    description" entries: shown as titled prose sections
napoleon_custom_sections = [("Attributes", "params_style"), "Returns", "Raises", "Yields", "Warns"]

# --- MyST / myst-nb -----------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the rendered notebooks carry their outputs; never execute here
nb_merge_streams = True

# --- HTML ---------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"factorbayes {release}"
html_theme_options = {
    "description": "Bayesian factorization models: generative programs, scalable solvers, and the proof they agree",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "240px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
