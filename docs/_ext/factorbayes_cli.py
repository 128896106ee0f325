"""Sphinx extension: the ``factorbayes-cli`` directive, the CLI reference generated from the parser.

``.. factorbayes-cli::`` calls `validation.frontdoor.cli.build_parser` at build time and writes one
section per sub-command (title ``factorbayes COMMAND``, its one-line help, then its full ``--help``
text), after the top-level ``factorbayes --help``. Nothing is copied by hand: a new sub-command or
flag appears on the page at the next build, and tests/test_docs.py checks that every sub-command
of the parser has its section.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from contextlib import contextmanager

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

WIDTH = "100"  # argparse wraps help at $COLUMNS; fixed so the page does not depend on the terminal


@contextmanager
def _columns(width: str):
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Sub-command name -> (its one-line help, its parser), in the parser's order."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help or "" for c in action._choices_actions}
    return {name: (helps.get(name, ""), p) for name, p in action.choices.items()}


def _literal(text: str) -> list[str]:
    return [".. code-block:: text", ""] + [("    " + line).rstrip() for line in text.rstrip().splitlines()] + [""]


def cli_rst() -> list[str]:
    """The reference as reStructuredText lines."""
    from validation.frontdoor.cli import build_parser

    with _columns(WIDTH):
        parser = build_parser()
        lines = ["Usage of ``factorbayes`` itself (``factorbayes --help``)", ""]
        lines += _literal(parser.format_help())
        for name, (help_, sub) in subcommands(parser).items():
            title = f"factorbayes {name}"
            lines += [title, "-" * len(title), ""]
            if help_:
                lines += textwrap.wrap(help_.replace("*", r"\*"), 100) + [""]
            lines += _literal(sub.format_help())
    return lines


class FactorbayesCli(Directive):
    has_content = False

    def run(self):
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(cli_rst(), source="factorbayes-cli"), container)
        return container.children


def setup(app):
    app.add_directive("factorbayes-cli", FactorbayesCli)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
