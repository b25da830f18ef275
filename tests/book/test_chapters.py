"""Every chapter has the book's shape: what you will learn first, exercises last (no build)."""

import ast
import json
import re

import pytest
import yaml

from addnorm_lib.authoring import cells, page_size
from tests.conftest import ROOT

# Pages of the book that are not chapters: the front page, reference pages, the exercise index.
NOT_CHAPTERS = {"book/intro", "book/notation", "book/glossary", "book/references"}
NOT_CHAPTERS |= {"book/exercises", "book/instructors", "book/claims", "book/check-yourself"}


def chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [c["file"] for part in toc["parts"] for c in part.get("chapters", [])]
    return [f for f in files if f.startswith("book/") and f not in NOT_CHAPTERS]


def test_the_toc_has_the_chapters_and_parts_the_course_promises():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    captions = [part["caption"] for part in toc["parts"]]
    required = [
        "Foundations",
        "Normalization",
        "Placement",
        "In practice",
        "Exercises",
        "For instructors",
    ]
    assert [c for c in captions if c in required] == required
    assert len(chapters()) >= 8


@pytest.mark.parametrize("chapter", chapters())
def test_a_chapter_opens_with_what_you_will_learn_and_ends_with_exercises(chapter):
    text = (ROOT / f"{chapter}.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings, f"{chapter} has no sections"
    assert headings[0] == "What you will learn", f"{chapter} starts with {headings[0]!r}"
    assert headings[-1] == "Exercises", f"{chapter} ends with {headings[-1]!r}"
    assert "{doc}`../exercises/" in text.split("## Exercises")[-1] or chapter == "book/models", (
        f"{chapter}'s exercises section does not link its exercise notebook"
    )


# Words of the team's own bookkeeping, never shown to readers: the source documents' numbers and
# the name of the team's list of sourced facts.
INTERNAL_WORDS = re.compile(r"\bseeds? 0\d\d\b|fact sheet|FACTS\.md", flags=re.IGNORECASE)


@pytest.mark.parametrize("page", sorted((ROOT / "book").glob("*.md")), ids=lambda path: path.name)
def test_no_page_shows_internal_words(page):
    found = [
        f"line {number}: {line.strip()[:80]}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
        if INTERNAL_WORDS.search(line)
    ]
    assert not found, f"{page.name} shows internal words to readers: {found}"


@pytest.mark.parametrize("page", sorted((ROOT / "book").glob("*.md")), ids=lambda path: path.name)
def test_shown_code_teaches_and_fits_the_column(page):
    """No glue call, build-time assert or formatter pragma in a cell a reader sees, no
    reStructuredText in its docstrings, no code line wider than the column at 1280 px."""
    found = cells.problems(page.read_text(encoding="utf-8"))
    listed = "\n".join(f"{page.name}:{line}: {what}" for line, what in found[:40])
    assert not found, f"{len(found)} problems, such as:\n{listed}"


@pytest.mark.parametrize("notebook", sorted((ROOT / "exercises").glob("*.ipynb")), ids=str)
def test_exercise_code_fits_the_column(notebook):
    """The exercise pages show every code cell and code block of the notebook."""
    found = cells.notebook_wide_lines(json.loads(notebook.read_text(encoding="utf-8")))
    listed = "\n".join(f"cell {i}: {line[:60]}... ({len(line)} characters)" for i, line in found)
    assert not found, f"{notebook.name}: lines wider than {cells.WIDTH} characters:\n{listed}"


NOTEBOOKS = sorted([*(ROOT / "exercises").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_code_cell_of_the_notebooks_is_python_311(notebook):
    """A reflowed line must not break a cell: every code cell parses as the course's Python."""
    broken = []
    for index, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] != "code":
            continue
        try:
            ast.parse("".join(cell["source"]), feature_version=(3, 11))
        except SyntaxError as error:
            broken.append(f"cell {index}, line {error.lineno}: {error.msg}")
    assert not broken, f"{notebook.name}: " + "; ".join(broken)


@pytest.mark.parametrize("chapter", chapters())
def test_a_chapters_main_page_is_one_story_a_reader_finishes(chapter):
    """At most MAX_PROSE_WORDS words of prose and MAX_SHOWN_CODE_LINES lines of shown code; the
    rest is on the chapter's deeper page, which the table of contents lists under it and the
    chapter links to."""
    size = page_size.page_size(ROOT / f"{chapter}.md")
    assert size.prose_words <= page_size.MAX_PROSE_WORDS, size
    assert size.shown_code_lines <= page_size.MAX_SHOWN_CODE_LINES, size
    deeper = f"{chapter}-deeper"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    sections = {
        entry["file"]: [s["file"] for s in entry.get("sections", [])]
        for part in toc["parts"]
        for entry in part.get("chapters", [])
    }
    assert deeper in sections[chapter], f"_toc.yml lists no {deeper} under {chapter}"
    text = (ROOT / f"{chapter}.md").read_text(encoding="utf-8")
    name = deeper.removeprefix("book/")
    assert f"{{doc}}`{name}`" in text or f"({name})=" in text or f"{{ref}}`{name}" in text, (
        f"{chapter} never links to its deeper page"
    )
