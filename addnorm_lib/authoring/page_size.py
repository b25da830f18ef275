"""How long a book page is for its reader: words of prose and lines of shown code.

A chapter's main page tells one story: at most :data:`MAX_PROSE_WORDS` words of prose and
:data:`MAX_SHOWN_CODE_LINES` lines of code a reader sees (folded cells count: a reader opens
them). Detail goes to the chapter's "deeper" page, which has no limit.

Prose is the Markdown a reader reads: code cells, fenced code blocks, display math, front
matter, labels, directive fences and options, HTML comments and citation keys are not prose;
the text of admonitions, dropdowns, captions and tables is. A word is a run of letters or digits
(inline math and inline code count as the words they hold).

    python -m addnorm_lib.authoring.page_size book/*.md    # a table, one page a row
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from addnorm_lib.authoring.cells import FENCE, code_cells, fenced_code, shown

__all__ = [
    "MAX_PROSE_WORDS",
    "MAX_SHOWN_CODE_LINES",
    "PageSize",
    "page_size",
    "prose",
    "prose_words",
    "shown_code_lines",
]

#: The most words of prose a chapter's main page may have.
MAX_PROSE_WORDS = 3000
#: The most non-blank lines of shown code a chapter's main page may have.
MAX_SHOWN_CODE_LINES = 250

FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", flags=re.DOTALL)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", flags=re.DOTALL)
MATH_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{math\}.*?^\1\s*$", flags=re.DOTALL | re.MULTILINE)
COMMENT = re.compile(r"<!--.*?-->", flags=re.DOTALL)
CITATION = re.compile(r"\{cite(?::\w+)?\}`[^`]*`")
ROLE = re.compile(r"\{[\w:-]+\}`([^`<]*)(?:<[^`]*>)?`")
LABEL = re.compile(r"^\s*\([\w:.-]+\)=\s*$")
FENCE_LINE = re.compile(r"^\s*(`{3,}|:{3,}|~{3,})")
OPTION_LINE = re.compile(r"^\s*:[\w-]+:(\s|$)")
WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")


@dataclass(frozen=True)
class PageSize:
    """What a reader meets on one page."""

    page: str
    prose_words: int
    shown_code_lines: int

    @property
    def within_limits(self) -> bool:
        """Whether a chapter's main page may be this long."""
        return self.prose_words <= MAX_PROSE_WORDS and self.shown_code_lines <= MAX_SHOWN_CODE_LINES


def _fence_of(lines: list[str], first: int) -> int:
    """The line of the ``{code-cell}`` fence that opens the cell whose source starts at
    ``first`` (its options, in either form, lie between)."""
    fence = first - 1
    while fence > 0 and not FENCE.match(lines[fence]):
        fence -= 1
    return fence


def _without_code(text: str) -> str:
    """The page with its code cells and fenced code blocks blanked out (line numbers kept)."""
    lines = text.split("\n")
    spans = [(_fence_of(lines, cell.first), cell.last) for cell in code_cells(text)]
    spans += [(first, first + len(body)) for first, body in fenced_code(text)]
    for first, last in spans:
        for i in range(first, min(last, len(lines))):
            lines[i] = ""
    return "\n".join(lines)


def prose(text: str) -> str:
    """The words of a MyST page that a reader reads as prose, as plain text."""
    text = FRONT_MATTER.sub("", text, count=1)
    text = _without_code(text)
    text = MATH_DIRECTIVE.sub("", text)
    text = DISPLAY_MATH.sub("", text)
    text = COMMENT.sub("", text)
    text = CITATION.sub("", text)
    text = ROLE.sub(r"\1", text)
    kept = [
        line
        for line in text.split("\n")
        if not (LABEL.match(line) or FENCE_LINE.match(line) or OPTION_LINE.match(line))
    ]
    return "\n".join(kept)


def prose_words(text: str) -> int:
    """How many words of prose a MyST page has."""
    return len(WORD.findall(prose(text)))


def shown_code_lines(text: str) -> int:
    """How many non-blank lines of code a reader sees in the page's code cells (folded ones
    included: a reader opens them)."""
    return sum(
        1 for cell in code_cells(text) if shown(cell) for line in cell.source if line.strip()
    )


def page_size(path: Path) -> PageSize:
    """The prose words and shown code lines of one page."""
    text = path.read_text(encoding="utf-8")
    return PageSize(path.stem, prose_words(text), shown_code_lines(text))


def main(argv: list[str] | None = None) -> int:
    """Print one row per page: prose words and shown code lines."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=Path, help="MyST pages (book/*.md)")
    args = parser.parse_args(argv)
    missing = [str(page) for page in args.pages if not page.is_file()]
    if missing:
        print(f"error: no such page: {', '.join(missing)}", file=sys.stderr)
        return 2
    print(f"{'page':<24} {'prose words':>11} {'shown code lines':>16}")
    for size in map(page_size, args.pages):
        print(f"{size.page:<24} {size.prose_words:>11} {size.shown_code_lines:>16}")
    print(f"(a chapter's main page: at most {MAX_PROSE_WORDS} words, {MAX_SHOWN_CODE_LINES} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
