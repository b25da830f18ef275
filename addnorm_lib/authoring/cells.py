"""The code cells of the book's MyST pages: what a reader sees of them, checked and formatted.

A chapter's code cell shows its source unless a tag removes it (``remove-cell``,
``remove-input``). What a reader sees must teach and fit the column: no bookkeeping (glue calls,
build-time asserts, formatter pragmas: they belong in a ``remove-cell`` cell next to the code
they check), no reStructuredText markup in docstrings, and no line longer than :data:`WIDTH`
characters, the width of a code block in the book's column at 1280 px.

    python -m addnorm_lib.authoring.cells check book/*.md    # list what breaks these rules
    python -m addnorm_lib.authoring.cells format book/x.md   # ruff-format the shown cells to WIDTH
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = [
    "WIDTH",
    "CodeCell",
    "code_cells",
    "fenced_code",
    "format_page",
    "notebook_wide_lines",
    "problems",
    "ruff_format",
    "shown",
]

#: Characters of code that fit a code block of the book's column at 1280 px: 14 px monospace is
#: about 8.4 px a character, and a folded (hide-input) cell's block is 666 px, 634 px of it for
#: text, so 75 characters.
WIDTH = 75
#: Tags that hide a cell's source from readers.
HIDDEN = {"remove-cell", "remove-input"}
FENCE = re.compile(r"^(?P<ticks>`{3,})\{code-cell\}")
OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
# Bookkeeping a reader does not need: glue calls, asserts, formatter pragmas.
GLUE_CALLS = {"glue", "glue_number"}
PRAGMA = re.compile(r"#\s*fmt:")
RST_MARKUP = re.compile(r"``\S|:(?:func|class|meth|mod|data|attr|obj):`")


@dataclass
class CodeCell:
    """One ``{code-cell}`` of a MyST page.

    ``first``/``last`` are the 0-based line numbers of its source (``last`` exclusive), so that
    ``lines[first:last]`` is the code.
    """

    first: int
    last: int
    source: list[str]
    options: dict = field(default_factory=dict)

    @property
    def tags(self) -> set[str]:
        """The cell's tags."""
        return set(self.options.get("tags") or [])


def code_cells(text: str) -> list[CodeCell]:
    """Every code cell of a MyST page, in order."""
    lines = text.split("\n")
    cells, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        ticks, options, j = match.group("ticks"), {}, i + 1
        if j < len(lines) and lines[j].strip() == "---":
            end = lines.index("---", j + 1)
            options = yaml.safe_load("\n".join(lines[j + 1 : end])) or {}
            j = end + 1
        else:
            while j < len(lines) and (option := OPTION.match(lines[j])):
                options[option.group("key")] = yaml.safe_load(option.group("value"))
                j += 1
        if j < len(lines) and not lines[j].strip() and options:
            j += 1
        end = j
        while end < len(lines) and lines[end].rstrip() != ticks:
            end += 1
        cells.append(CodeCell(j, end, lines[j:end], options))
        i = end + 1
    return cells


def shown(cell: CodeCell) -> bool:
    """Whether readers see the cell's source (possibly folded)."""
    return not cell.tags & HIDDEN


def _tokens(source: list[str]) -> list[tokenize.TokenInfo]:
    """The cell's Python tokens; none where it is not Python (a magic, say)."""
    try:
        return list(tokenize.generate_tokens(io.StringIO("\n".join(source) + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _cell_problems(source: list[str]) -> list[tuple[int, str]]:
    """(0-based line in the cell, what is wrong) for one shown cell."""
    found = [
        (i, f"{len(line)} characters (at most {WIDTH} fit)")
        for i, line in enumerate(source)
        if len(line) > WIDTH
    ]
    tokens = _tokens(source)
    for token, after in zip(tokens, [*tokens[1:], None], strict=True):
        line = token.start[0] - 1
        if token.type == tokenize.NAME and token.string == "assert":
            found.append((line, "an assert in a shown cell (move it to a remove-cell)"))
        elif (
            token.type == tokenize.NAME
            and token.string in GLUE_CALLS
            and after is not None
            and after.string == "("
        ):
            found.append((line, "a glue call in a shown cell (move it to a remove-cell)"))
        elif token.type == tokenize.COMMENT and PRAGMA.search(token.string):
            found.append((line, "a formatter pragma in a shown cell (move it to a remove-cell)"))
        elif token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(
            ('"""', "'''")
        ):
            for offset, text in enumerate(token.string.split("\n")):
                if RST_MARKUP.search(text):
                    found.append(
                        (line + offset, "reStructuredText markup in a docstring (write plain text)")
                    )
    return found


def fenced_code(text: str) -> list[tuple[int, list[str]]]:
    """(0-based first line, lines) of every fenced code block that is not a code cell (an
    example, a shell command, the output of one)."""
    lines, blocks, i = text.split("\n"), [], 0
    open_directives: list[str] = []  # fences of the directives (dropdown...) we are inside
    while i < len(lines):
        fence = re.match(r"^\s*(`{3,}|~{3,})\s*(\{[\w-]+\})?", lines[i])
        if not fence:
            i += 1
            continue
        ticks, directive = fence.groups()
        if open_directives and lines[i].strip() == open_directives[-1]:
            open_directives.pop()  # the end of a directive's body
            i += 1
            continue
        if directive not in (None, "{code-block}", "{code}", "{code-cell}"):
            open_directives.append(ticks)  # its body is read on
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != ticks:
            end += 1
        if directive != "{code-cell}":
            body = [line for line in lines[i + 1 : end] if not OPTION.match(line)]
            blocks.append((i + 1, body))
        i = end + 1
    return blocks


def problems(text: str) -> list[tuple[int, str]]:
    """(1-based line, what is wrong) for every rule a shown code cell breaks, and every line of
    another code block that is wider than the column."""
    found = []
    for cell in filter(shown, code_cells(text)):
        found += [(cell.first + line + 1, what) for line, what in _cell_problems(cell.source)]
    for first, body in fenced_code(text):
        found += [
            (first + offset + 1, f"{len(line)} characters (at most {WIDTH} fit)")
            for offset, line in enumerate(body)
            if len(line) > WIDTH
        ]
    return sorted(found)


def notebook_wide_lines(notebook: dict) -> list[tuple[int, str]]:
    """(cell index, line) for every line of a notebook's code cells and of the code blocks in
    its markdown cells that is wider than WIDTH (an exercise page shows them all)."""
    found = []
    for index, cell in enumerate(notebook.get("cells", [])):
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "code":
            lines = source.split("\n")
        else:
            lines = [line for _, body in fenced_code(source) for line in body]
        found += [(index, line) for line in lines if len(line) > WIDTH]
    return found


def ruff_format(code: str, width: int) -> str | None:
    """The code formatted by ruff at `width`, or None where ruff cannot parse it."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", f"--line-length={width}", "-"],
        input=code,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def format_page(text: str, width: int = WIDTH) -> tuple[str, list[int]]:
    """The page with every shown code cell ruff-formatted to `width`; and the first lines of
    the cells ruff could not parse (left as they were)."""
    lines, skipped = text.split("\n"), []
    for cell in reversed(code_cells(text)):
        if not shown(cell) or not "".join(cell.source).strip():
            continue
        formatted = ruff_format("\n".join(cell.source).strip("\n") + "\n", width)
        if formatted is None:
            skipped.append(cell.first + 1)
            continue
        lines[cell.first : cell.last] = formatted.rstrip("\n").split("\n")
    return "\n".join(lines), sorted(skipped)


def main(argv: list[str] | None = None) -> int:
    """Check or format the pages named on the command line; 1 if a check found problems."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["check", "format"])
    parser.add_argument("pages", nargs="+", type=Path)
    args = parser.parse_args(argv)
    status = 0
    for page in args.pages:
        text = page.read_text(encoding="utf-8")
        if args.action == "format":
            new, skipped = format_page(text)
            if new != text:
                page.write_text(new, encoding="utf-8")
            for line in skipped:
                print(f"{page}:{line}: ruff could not parse this cell; left as it was")
        for line, what in problems(page.read_text(encoding="utf-8")):
            print(f"{page}:{line}: {what}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
