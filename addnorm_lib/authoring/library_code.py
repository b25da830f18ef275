"""A Sphinx directive that shows a piece of the course library as a reader needs it.

``literalinclude`` shows a function as it stands in its file: 100-character lines (they overflow
the book's column) and a docstring in reStructuredText, with its double backticks and roles
showing as raw markup. The ``library-code`` directive takes the same two arguments, a file and a
``:pyobject:``, and shows

- the docstring as text: paragraphs, with ``code`` spans and roles (``:func:`x```) set as code,
  and each Google-style section (``Args:``, ``Returns:``...) as a titled list;
- then the code without its docstring, dedented and formatted by ruff to the book's code width
  (:data:`addnorm_lib.authoring.cells.WIDTH`), comments and strings as written.

    ```{library-code} ../addnorm_lib/reference/norms.py
    :pyobject: layer_norm
    ```
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from addnorm_lib.authoring.cells import WIDTH, ruff_format

__all__ = ["LibraryCode", "docstring_nodes", "object_source", "setup"]

# Sections whose entries are "name: text" (one list item each) and sections of free text, whose
# lines run on as paragraphs: a "Returns:" is one description, however its lines break.
ENTRY_SECTIONS = {"Args", "Arguments", "Raises", "Attributes"}
SECTIONS = ENTRY_SECTIONS | {"Returns", "Yields", "Note", "Example"}
# ``code``, :role:`target` (or :role:`text <target>`), and `code`: each shown as code; *text*
# emphasized.
INLINE = re.compile(
    r"``(?P<double>.+?)``|:[\w:]+:`(?P<role>[^`]+)`|`(?P<single>[^`]+)`"
    r"|(?<![\w*])\*(?P<em>[^*\s][^*]*?)\*(?![\w*])"
)
# An entry of a section: "name: text" or "name (type): text".
ENTRY = re.compile(r"^(?P<name>[\w.*]+(?: \([^)]*\))?):\s+(?P<text>.*)$", re.DOTALL)


def _find(tree: ast.AST, dotted: str) -> ast.AST:
    node = tree
    for name in dotted.split("."):
        found = [
            child
            for child in ast.iter_child_nodes(node)
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and child.name == name
        ]
        if not found:
            raise ValueError(f"no {name!r} in the file (looking for {dotted!r})")
        node = found[0]
    return node


def object_source(source: str, dotted: str) -> tuple[str, str | None]:
    """The code of the function or class ``dotted`` (``Class.method``) in a module's ``source``,
    dedented and without its docstring; and the docstring (cleaned), or None."""
    node = _find(ast.parse(source), dotted)
    lines = source.split("\n")
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    docstring = ast.get_docstring(node)
    body = node.body[0]
    skip = range(0)
    if docstring is not None and isinstance(body, ast.Expr):
        skip = range(body.lineno - 1, body.end_lineno)
    kept = [
        line
        for number, line in enumerate(lines[first : node.end_lineno], first)
        if number not in skip
    ]
    return textwrap.dedent("\n".join(kept)), docstring


def _inline(text: str) -> list[nodes.Node]:
    """Text with its code spans and roles as literal nodes."""
    parts, at = [], 0
    for match in INLINE.finditer(text):
        if match.start() > at:
            parts.append(nodes.Text(text[at : match.start()]))
        if match.group("em"):
            parts.append(nodes.emphasis(match.group("em"), match.group("em")))
            at = match.end()
            continue
        code = match.group("double") or match.group("single") or match.group("role")
        code = re.sub(r"^.*<(.+)>$", r"\1", code).lstrip("~")
        parts.append(nodes.literal(code, code))
        at = match.end()
    if at < len(text):
        parts.append(nodes.Text(text[at:]))
    return parts


def _paragraph(lines: list[str], entry: bool = False) -> nodes.paragraph:
    """One paragraph of joined lines; an entry's leading name set as code."""
    text = " ".join(line.strip() for line in lines)
    match = ENTRY.match(text) if entry else None
    if match:
        name = match.group("name")
        return nodes.paragraph(
            "", "", nodes.literal(name, name), nodes.Text(": "), *_inline(match.group("text"))
        )
    return nodes.paragraph("", "", *_inline(text))


def _free_text(lines: list[str]) -> list[list[str]]:
    """A free-text section's lines as paragraphs: runs of non-blank lines."""
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [paragraph for paragraph in paragraphs if paragraph]


def docstring_nodes(docstring: str) -> list[nodes.Node]:
    """A Google-style docstring as docutils nodes: paragraphs, and a titled bullet list per
    section (one item per entry, its continuation lines joined)."""
    blocks: list[nodes.Node] = []
    lines = inspect.cleandoc(docstring).split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        header = line.strip().rstrip(":")
        if line.strip().endswith(":") and header in SECTIONS:
            items: list[list[str]] = []
            entry_indent = None  # an entry starts at this indent; deeper lines continue it
            i += 1
            section: list[str] = []
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                section.append(lines[i])
                if lines[i].strip():
                    indent = len(lines[i]) - len(lines[i].lstrip())
                    if entry_indent is None or indent <= entry_indent:
                        entry_indent = indent
                        items.append([lines[i]])
                    else:
                        items[-1].append(lines[i])
                i += 1
            title = nodes.paragraph("", "", nodes.strong(header, header))
            if header in ENTRY_SECTIONS:
                entries = nodes.bullet_list()
                for item in items:
                    entries += nodes.list_item("", _paragraph(item, entry=True))
                blocks += [title, entries]
            else:
                blocks += [title, *(_paragraph(text) for text in _free_text(section))]
            continue
        paragraph = []
        while i < len(lines) and lines[i].strip():
            if lines[i].strip().rstrip(":") in SECTIONS and lines[i].strip().endswith(":"):
                break
            paragraph.append(lines[i])
            i += 1
        if paragraph:
            blocks.append(_paragraph(paragraph))
        while i < len(lines) and not lines[i].strip():
            i += 1
    return blocks


class LibraryCode(SphinxDirective):
    """``{library-code} path`` with ``:pyobject:``: the object's docstring as text, then its
    code fitted to the book's column; ``:no-docstring:`` leaves the docstring out (the page's
    prose says what the object does)."""

    required_arguments = 1
    option_spec: ClassVar[dict] = {
        "pyobject": directives.unchanged_required,
        "language": directives.unchanged,
        "no-docstring": directives.flag,
    }

    def run(self) -> list[nodes.Node]:
        """The docstring's nodes and the code's literal block."""
        relative, path = self.env.relfn2path(self.arguments[0])
        self.env.note_dependency(relative)
        try:
            source = Path(path).read_text(encoding="utf-8")
            code, docstring = object_source(source, self.options["pyobject"])
        except (OSError, KeyError, ValueError, SyntaxError) as error:
            raise self.error(f"library-code {self.arguments[0]}: {error}") from error
        fitted = ruff_format(code, WIDTH) or code
        shown: list[nodes.Node] = []
        if docstring and "no-docstring" not in self.options:
            box = nodes.container(classes=["library-docstring"])
            box += docstring_nodes(docstring)
            shown.append(box)
        block = nodes.literal_block(fitted.rstrip("\n"), fitted.rstrip("\n"), language="python")
        self.set_source_info(block)
        shown.append(block)
        return shown


def setup(app):
    """Register the directive."""
    app.add_directive("library-code", LibraryCode)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
