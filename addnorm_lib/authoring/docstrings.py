"""Docstrings broken mid-sentence: what a line-by-line reflow leaves in a notebook's code.

The exercises' stubs are read by learners as the task, so their docstrings must read as prose.
A reflow that wraps each over-long line on its own, without joining it to the next (as one did
the solutions' docstrings at 76 and then 75 characters), leaves two marks that this module finds:

- an *orphan*: a line of one or two words, not the end of a sentence, whose paragraph goes on
  at the same indentation on the next line (``with respect to x,`` / ``gamma`` / ``and beta.``);
- a *lost hanging indent*: in a Google-style ``Args:`` section, a line at the entries'
  indentation that is no entry (``name: ...``), the rest of the entry above it
  (``shape (C,); not`` / ``modified.``), which then reads as an entry of its own.

    python -m addnorm_lib.authoring.docstrings solutions/*.ipynb exercises/*.ipynb
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: Sections whose lines are entries ``name: description``, continued with a hanging indent.
ENTRY_SECTIONS = {"Args:", "Arguments:", "Parameters:", "Attributes:", "Raises:"}
#: An entry of such a section: one or more names (``x``, ``gamma, beta``, ``*args``), a colon.
ENTRY = re.compile(
    r"^\*{0,2}[A-Za-z_][\w.*]*(?:, \*{0,2}[A-Za-z_][\w.*]*)*(?: \([^)]*\))?:(?:\s|$)"
)
#: How a sentence or a heading may end a line.
LINE_END = (".", ":", ";", "!", "?")
ORPHAN_WORDS = 2


@dataclass(frozen=True)
class Broken:
    """A docstring line that a reflow broke: where (1-based, in the cell) and why."""

    line: int
    text: str
    why: str


def docstrings(source: str) -> list[tuple[int, str]]:
    """(line of its opening quotes, raw text) of the module's, each class's and each function's
    docstring in ``source``; none if the code does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, kinds) or not node.body:
            continue
        first = node.body[0]
        constant = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        value = first.value.value if constant else None
        if isinstance(value, str):
            found.append((first.lineno, value))
    return sorted(found)


def indent(line: str) -> int:
    """The number of spaces a line starts with."""
    return len(line) - len(line.lstrip(" "))


def orphans(lines: list[str]) -> list[tuple[int, str]]:
    """(index, why) of each line of one or two words that breaks a sentence: not its end, and
    followed by more of the same paragraph at the same indentation."""
    found = []
    for index, (line, following) in enumerate(itertools.pairwise(lines)):
        words = line.split()
        if not words or len(words) > ORPHAN_WORDS or line.rstrip().endswith(LINE_END):
            continue
        if ENTRY.match(line.strip()) or not following.strip():
            continue
        if indent(following) == indent(line):
            found.append((index, f"{len(words)} word(s) alone, the sentence goes on below"))
    return found


def lost_hanging_indents(lines: list[str]) -> list[tuple[int, str]]:
    """(index, why) of each line of an ``Args:``-like section at its entries' indentation that
    is no entry: the rest of the entry above, which reads as an entry of its own."""
    found, section, entries = [], None, None
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        if section is not None and indent(line) <= section:
            section = entries = None
        if line.strip() in ENTRY_SECTIONS:
            section, entries = indent(line), None
            continue
        if section is None:
            continue
        if entries is None:
            entries = indent(line)
        if indent(line) == entries and not ENTRY.match(line.strip()):
            found.append((index, "the rest of the entry above, without its hanging indent"))
    return found


def broken_lines(source: str) -> list[Broken]:
    """Every docstring line of a cell's (or module's) code that a line-by-line reflow broke."""
    found = []
    for start, raw in docstrings(source):
        lines = inspect.cleandoc(raw).split("\n")
        # cleandoc drops leading blank lines: count them back so the line numbers are the cell's
        skipped = len(raw.split("\n")) - len(raw.lstrip("\n").split("\n"))
        for index, why in sorted(orphans(lines) + lost_hanging_indents(lines)):
            found.append(Broken(start + skipped + index, lines[index].strip(), why))
    return found


def notebook_problems(notebook: dict) -> list[str]:
    """``cell N, line M: "text": why`` for each broken docstring line of a notebook's code."""
    problems = []
    for number, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for broken in broken_lines(source):
            problems.append(f"cell {number}, line {broken.line}: {broken.text!r}: {broken.why}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """List the broken docstring lines of the given notebooks; exit 1 if there are any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    arguments = parser.parse_args(argv)
    status = 0
    for path in arguments.notebooks:
        for problem in notebook_problems(json.loads(path.read_text(encoding="utf-8"))):
            print(f"{path}: {problem}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
