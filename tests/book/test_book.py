"""The book builds with every chapter executed and no warning; a broken chapter fails the build."""

import re
import shutil

import pytest
import yaml

from tests.conftest import BOOK_GROUP, ROOT, build

pytestmark = pytest.mark.slow


def toc_files() -> list[str]:
    """Every file named in _toc.yml: the root, then chapters and their sections, depth first."""

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                yield entry["file"]
            yield from walk(entry.get("chapters", []) + entry.get("sections", []))

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"], *walk(toc["parts"])]


def test_every_exercise_is_in_the_toc_and_on_the_exercises_page():
    """A new exercise notebook cannot be left out of the book by accident (no build needed)."""
    in_toc = set(toc_files())
    page = (ROOT / "book" / "exercises.md").read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "exercises").glob("*.ipynb")):
        assert f"exercises/{notebook.stem}" in in_toc, f"{notebook.name} is not in _toc.yml"
        assert f"{{doc}}`../exercises/{notebook.stem}`" in page, f"{notebook.name} not listed"
        assert f"<../exercises/{notebook.name}>" in page, f"{notebook.name}: no download link"


# `built_book` (tests/conftest.py) is built once per test run and shared with
# tests/book/test_browser.py.


@BOOK_GROUP
def test_every_page_of_the_toc_is_built(built_book):
    for name in toc_files():
        assert (built_book / f"{name}.html").is_file(), f"{name}.html missing"


@BOOK_GROUP
def test_chapters_were_executed_without_errors(built_book):
    """Every chapter and deeper page shows outputs of its executed cells, and no error."""
    pages = [name for name in toc_files() if name.startswith("book/") and "-deeper" in name]
    pages += [name.removesuffix("-deeper") for name in pages]
    assert len(pages) >= 16, pages
    for name in pages:
        page = (built_book / f"{name}.html").read_text(encoding="utf-8")
        assert page.count("cell_output") >= 3, f"{name}: its cells produced no outputs"
        for sign_of_failure in ("Traceback (most recent call last)", "output error"):
            assert sign_of_failure not in page, f"{name} shows {sign_of_failure!r}"
    layernorm = (built_book / "book" / "layernorm.html").read_text(encoding="utf-8")
    assert "<img" in layernorm, "the LayerNorm chapter has no figures"


@BOOK_GROUP
def test_no_page_prints_warnings_or_errors(built_book):
    """Nothing a chapter writes on stderr (a warning, the figure audit's findings) or raises
    reaches a reader."""
    printed = []
    for page in sorted(built_book.rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        for kind in ("output stderr", "output traceback", "output error"):
            for match in re.finditer(kind, html):
                text = re.sub(r"<[^>]+>", "", html[match.end() : match.end() + 600])
                printed.append(f"{page.relative_to(built_book)}: {kind}: {text.strip()[:200]}")
    assert not printed, "\n".join(printed)


@BOOK_GROUP
def test_math_is_served_locally(built_book):
    chapter = (built_book / "book" / "layernorm.html").read_text(encoding="utf-8")
    assert "_static/mathjax/tex-chtml.js" in chapter
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()


@BOOK_GROUP
def test_exercise_page_offers_its_notebook(built_book):
    page = (built_book / "book" / "exercises.html").read_text(encoding="utf-8")
    link = re.search(r'href="([^"]*_downloads/[^"]*layernorm\.ipynb)"', page)
    assert link, "book/exercises.html has no download link to the exercise notebook"
    assert (built_book / "book" / link.group(1)).resolve().is_file()
    assert (built_book / "_sources" / "exercises" / "layernorm.ipynb").is_file()


def test_a_failing_chapter_fails_the_build(tmp_path):
    """The configuration turns an exception in a chapter into a failed build, not a red cell."""
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    (tmp_path / "index.md").write_text(
        "---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n"
        "  name: python3\n  display_name: Python 3\n---\n# Broken\n\n"
        "```{code-cell} ipython3\nraise ValueError('this chapter is broken')\n```\n"
    )
    completed = build(tmp_path)
    assert completed.returncode != 0
    assert "this chapter is broken" in completed.stdout + completed.stderr


def test_the_book_leaves_out_every_environment_the_makefile_creates():
    """A virtual environment holds packages' own notebooks (nbgrader ships dozens): the build must
    not read them, or it executes them as chapters."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    environments = re.findall(r"^\w*VENV\s*:=\s*(\S+)\s*$", makefile, flags=re.MULTILINE)
    assert ".venv" in environments and ".venv-nbgrader" in environments, environments
    missing = [path for path in environments if path not in config["exclude_patterns"]]
    assert not missing, f"_config.yml's exclude_patterns lacks {missing}"


@BOOK_GROUP
def test_each_page_numbers_its_figures_from_one(built_book):
    """A chapter's figures are Fig. 1, 2, ... in order, whatever came before it in the book."""
    numbered = {}
    for name in toc_files():
        html = (built_book / f"{name}.html").read_text(encoding="utf-8")
        numbers = [int(n) for n in re.findall(r'class="caption-number">Fig\. (\d+) ', html)]
        if numbers:
            numbered[name] = numbers
    assert len(numbered) >= 5, f"too few pages with numbered figures: {sorted(numbered)}"
    wrong = {name: n for name, n in numbered.items() if n != list(range(1, len(n) + 1))}
    assert not wrong, f"pages whose figures are not numbered 1, 2, ...: {wrong}"


@BOOK_GROUP
def test_printed_outputs_fit_the_column(built_book):
    """What a cell prints is read in a code box as wide as the code's: no printed line is wider
    than the shown code may be (the browser measures the same at 1280 px, with the page's font;
    counting characters here does not depend on which monospace font a reader has)."""
    from bs4 import BeautifulSoup

    from addnorm_lib.authoring.cells import WIDTH

    wide = []
    for name in toc_files():
        soup = BeautifulSoup(
            (built_book / f"{name}.html").read_text(encoding="utf-8"), "html.parser"
        )
        for output in soup.select(".cell_output pre"):
            wide += [
                f"{name}: {line[:60]}... ({len(line)} characters)"
                for line in output.get_text().split("\n")
                if len(line) > WIDTH
            ]
    assert not wide, f"printed lines wider than {WIDTH} characters:\n" + "\n".join(wide)
