"""Solution notebooks pass under the grader; every graded cell of every released exercise fails."""

import itertools
import json

import nbformat
import pytest

from addnorm_lib.authoring import docstrings, release
from addnorm_lib.grading import pipeline as grade
from tests.conftest import EXERCISES, ROOT, SOLUTIONS

pytestmark = pytest.mark.slow


def test_every_solution_has_an_exercise():
    assert SOLUTIONS, "no solution notebooks found"
    assert [p.name for p in SOLUTIONS] == [p.name for p in EXERCISES]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_passes_every_graded_cell(path):
    result = grade.grade_one(path)
    assert result.status == "ok", result.reason
    assert result.cells, f"{path.name} has no graded cells"
    failures = [
        f"{c.grade_id}: {c.status} {c.message}" for c in result.cells if c.status != "passed"
    ]
    assert not failures, "\n".join(failures)
    assert result.total == result.max_total > 0


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_released_stubs_fail_every_graded_cell(path):
    result = grade.grade_one(path)
    passing = [cell.grade_id for cell in result.cells if cell.status != "failed"]
    assert not passing, f"graded cells that do not fail on the stubs: {passing}"
    assert result.total == 0
    assert all("not implemented yet" in cell.message for cell in result.cells)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty}"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_exercise_reveals_no_solution_or_hidden_test(path):
    text = path.read_text(encoding="utf-8")
    for marker in (release.SOLUTION_BEGIN, release.HIDDEN_BEGIN, release.HIDDEN_END):
        assert marker not in text


EXERCISE_TITLES = {
    "residuals": "residual",
    "layernorm": "LayerNorm",
    "batchnorm": "BatchNorm",
    "rmsnorm": "RMSNorm",
    "deepnorm": "DeepNorm",
    "placement": "placement",
}


def toc_files(caption: str) -> list[str]:
    """The file stems of a part of _toc.yml, in order (a part's chapters and their sections)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    (part,) = [p for p in toc["parts"] if p["caption"] == caption]
    files = []
    for chapter in part["chapters"]:
        files += [chapter["file"], *(s["file"] for s in chapter.get("sections", []))]
    return [f.split("/")[-1] for f in files]


def test_each_exercise_points_to_the_next_in_the_table_of_contents():
    order = [name for name in toc_files("Exercises") if name in EXERCISE_TITLES]
    assert order[:3] == ["residuals", "layernorm", "batchnorm"]  # LayerNorm first: derived there
    for current, following in itertools.pairwise(order):
        nb = nbformat.read(ROOT / "exercises" / f"{current}.ipynb", as_version=4)
        (done,) = [c.source for c in nb.cells if "## Done?" in c.source]
        assert f"the {EXERCISE_TITLES[following]} exercise" in done, (current, done)
        others = set(EXERCISE_TITLES.values()) - {EXERCISE_TITLES[following]}
        assert not any(f"Next, the {title} exercise" in done for title in others), current


def test_the_book_teaches_the_topics_in_the_order_of_the_exercises():
    parts = ("Foundations", "Normalization", "Placement")
    chapters = [name for part in parts for name in toc_files(part) if name in EXERCISE_TITLES]
    exercises = [name for name in toc_files("Exercises") if name in EXERCISE_TITLES]
    assert chapters == exercises
    assert chapters.index("placement") < chapters.index("deepnorm")  # DeepNorm builds on it


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_cell_said_to_be_skipped_is_skipped_by_nbval(path):
    """nbval skips a cell only for a comment line that is exactly ``# NBVAL_SKIP``."""
    from nbval.plugin import find_comment_markers

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "NBVAL_SKIP" in cell.source:
            markers = dict(find_comment_markers(cell.source))
            assert markers.get("skip") is True, (path.name, cell.source[:80])


@pytest.mark.parametrize(
    "path", [*SOLUTIONS, *EXERCISES], ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_no_docstring_is_broken_mid_sentence(path):
    """A stub's docstring is the task: no word left alone on a line mid-sentence, no entry of
    an Args section continued without its hanging indent (what a line-by-line reflow leaves)."""
    found = docstrings.notebook_problems(json.loads(path.read_text(encoding="utf-8")))
    assert not found, f"{path.name}: docstrings broken mid-sentence:\n" + "\n".join(found)


def cell_docstrings(nb) -> list[list[str]]:
    """The docstrings of each code cell, in order."""
    code = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return [[text for _, text in docstrings.docstrings(source)] for source in code]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_the_release_copies_every_docstring_as_written(path):
    """make exercises replaces answers and drops hidden tests, and never re-wraps a docstring."""
    solution = nbformat.read(path, as_version=4)
    exercise = release.release(solution, path.name)
    assert cell_docstrings(exercise) == cell_docstrings(solution)
    assert any(cell_docstrings(exercise)), f"{path.name} has no docstrings to compare"
