"""Sphinx extension: how the project's docstrings are rendered.

1. **Verbatim when not reStructuredText.** The docstrings are written for ``help()`` readers:
   numpy-style sections, but also formulas such as ``|a - b|`` or ``a*b``, and indented lines that
   continue a sentence. Parsed as reStructuredText, those give docutils errors (undefined
   substitutions, unexpected indentation, ...) and garbled pages. Each docstring, after napoleon
   has turned its numpy sections into reStructuredText, is parsed once on its own; if docutils
   reports anything at WARNING level or above, the original docstring is shown as a literal block
   instead, exactly as ``help()`` shows it. Docstrings that are valid reStructuredText keep
   napoleon's rendering. Nothing is suppressed: the build's own pages still fail on any warning,
   and ``plain_docstrings`` (the documented names) is counted for the report. Attribute and
   property docstrings (one line of prose each) skip napoleon, which reads ``text (seed: x)``
   as ``type: description``; so do docstrings whose Parameters section goes on with prose (see
   `fields_without_types`).

2. **Field sections.** ``name : description`` entries of Parameters / Attributes lose the colon
   before napoleon reads them (`fields_without_types`); Returns, Raises, Yields and Warns are
   prose here and are rendered as prose sections (``napoleon_custom_sections`` in conf.py).

3. **Single backticks.** The docstrings write `validation.frontdoor.api.fit` and also `K` or
   `theta`. The default role links a dotted name that Sphinx finds (``py:obj``) and shows every
   other one as code, so `K` never links to an arbitrary ``K`` attribute of some NamedTuple.
"""

from __future__ import annotations

import io

from docutils import nodes
from docutils.core import publish_doctree
from docutils.parsers.rst import roles
from sphinx.domains.python import PyXRefRole
from sphinx.util import logging

logger = logging.getLogger(__name__)

_raw: dict[tuple[str, str], list[str]] = {}
_no_napoleon: set[tuple[str, str]] = set()
plain_docstrings: list[str] = []
_seen: set[str] = set()
_xref = PyXRefRole()


FIELD_SECTIONS = {"parameters", "attributes", "other parameters", "keyword arguments"}


def _is_header(line: str, underline: str) -> bool:
    under = underline.strip()
    return bool(line.strip()) and len(under) >= 3 and set(under) <= set("-=~")


def fields_without_types(lines: list[str]) -> list[str] | None:
    """Entries ``name : text`` of the field sections written as ``name`` + indented ``text``.

    The docstrings write ``name : description`` (``K : int >= 1, the latent dimension``), where
    numpy style reserves the text after the colon for a type; napoleon would print the first
    line of the description as a type in parentheses. Without the colon, the whole text is the
    description (a type, where one is given, reads as its first words).

    Returns None when a field section goes on with prose after a blank line (``Returns the
    FittedModel: ...`` below the parameters): napoleon would read each such line as one more
    field, so the docstring is not given to napoleon.
    """
    out, in_fields, base, i = [], False, 0, 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and _is_header(line, lines[i + 1]):
            in_fields = line.strip().lower() in FIELD_SECTIONS
            base = len(line) - len(line.lstrip())
            out += [line, lines[i + 1]]
            i += 2
            continue
        indent = len(line) - len(line.lstrip())
        after_blank = i > 0 and not lines[i - 1].strip()
        if in_fields and after_blank and line.strip() and indent == base and " : " not in line:
            return None
        if in_fields and line.strip() and indent == base and " : " in line:
            name, text = line.split(" : ", 1)
            out += [name.rstrip(), " " * (base + 4) + text.strip()]
        else:
            out.append(line)
        i += 1
    return out


def _keep_raw(app, what, name, obj, options, lines):
    _raw[(what, name)] = list(lines)
    fields = fields_without_types(lines)
    if fields is None:
        _no_napoleon.add((what, name))
    else:
        lines[:] = fields


def _is_clean_rst(text: str, env) -> bool:
    stream = io.StringIO()
    settings = {"report_level": 2, "halt_level": 5, "warning_stream": stream, "env": env,
                "file_insertion_enabled": False, "raw_enabled": False, "input_encoding": "unicode"}
    default_role = roles._roles.get("")  # docutils drops the default role after each parse
    try:
        publish_doctree(text, settings_overrides=settings)
    except Exception:  # any failure to parse on its own: show it verbatim
        return False
    finally:
        if default_role is not None:
            roles._roles[""] = default_role
    return not stream.getvalue()


def _verbatim_if_not_rst(app, what, name, obj, options, lines):
    raw = _raw.pop((what, name), None)
    if raw is None:
        return
    _seen.add(name)
    if what in ("attribute", "property", "data") or (what, name) in _no_napoleon:
        # one-line prose: napoleon would read "text (seed: x)" as "type: description"
        _no_napoleon.discard((what, name))
        lines[:] = raw
    if not lines or _is_clean_rst("\n".join(lines), app.env):
        return
    plain_docstrings.append(name)
    lines[:] = ["::", ""] + [("    " + line).rstrip() for line in raw] + [""]


def code_or_xref(name, rawtext, text, lineno, inliner, options=None, content=None):
    """Default role: a dotted name is a ``py:obj`` cross-reference (plain code when not found,
    no warning), anything else is inline code."""
    if "." in text and " " not in text.strip():
        return _xref("py:obj", rawtext, text, lineno, inliner, options or {}, content or [])
    return [nodes.literal(rawtext, text)], []


def _report(app, exception):
    if exception is None:
        logger.info("docstrings shown verbatim (not reStructuredText): %d of %d",
                    len(set(plain_docstrings)), len(_seen))


def setup(app):
    app.add_role("code-or-xref", code_or_xref)
    # around napoleon (priority 500): keep the original, then check what napoleon made of it
    app.connect("autodoc-process-docstring", _keep_raw, priority=400)
    app.connect("autodoc-process-docstring", _verbatim_if_not_rst, priority=600)
    app.connect("build-finished", _report)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
