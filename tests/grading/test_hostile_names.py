"""Hostile names and inputs through the whole grader (issue 15): links, formulas, look-alike
names, escape sequences, huge files and metadata of the wrong type.

Each test grades a small folder with ``pipeline.main``, as the command line does. Only the
executor is swapped for the test process's own (``tests/inprocess.py``): these submissions are
about names and files, not about what their code does in a kernel, and most are rejected before
any code runs.
"""

import csv
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from addnorm_lib.grading import assemble, bubblewrap, execute, pipeline, report, sandbox
from tests import inprocess
from tests.conftest import GRADE_ANYWHERE
from tests.grading.conftest import EXERCISE, LAYER_NORM_CELL, SOLUTION, solution_with

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b1m"  # set the window title, clear the screen, bold (C1)
TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline


@dataclass
class Run:
    code: int
    out: Path
    stdout: str
    stderr: str

    @property
    def rows(self) -> dict[str, dict]:
        with (self.out / "grades.csv").open(newline="") as file:
            return {row["submission"]: row for row in csv.DictReader(file)}

    @property
    def grades(self) -> dict[str, dict]:
        data = json.loads((self.out / "grades.json").read_text())
        return {grade["submission"]: grade for grade in data["grades"]}


@pytest.fixture
def grade(tmp_path, monkeypatch, capsys):
    """grade(*paths, *flags): run the grader's command line on them; its reports and output."""
    # the executor of tests/inprocess.py in place of the grader's
    monkeypatch.setattr(
        execute, "NbvalExecutor", lambda box, settings: inprocess.InProcessExecutor(box.isolated)
    )
    monkeypatch.setattr(execute, "start_pytest_server", lambda: None)
    open_sandbox = sandbox.open_sandbox  # no warm kernels: no kernel runs
    monkeypatch.setattr(
        sandbox, "open_sandbox", lambda settings, warm=False: open_sandbox(settings)
    )

    def run(*args) -> Run:
        out = tmp_path / "out"
        code = pipeline.main([*map(str, args), "--out", str(out), "--jobs", "1", *GRADE_ANYWHERE])
        printed = capsys.readouterr()
        return Run(code, out, printed.out, printed.err)

    return run


@pytest.fixture
def folder(tmp_path) -> Path:
    made = tmp_path / "submissions"
    made.mkdir()
    return made


def write(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        nbformat.write(content, path)
    return path


# Links


def test_a_symlink_to_the_solution_scores_nothing_and_says_why(grade, folder):
    write(folder / "honest.ipynb", nbformat.read(EXERCISE, as_version=4))
    (folder / "link.ipynb").symlink_to(SOLUTION)
    (folder / "linked").symlink_to(SOLUTION.parent, target_is_directory=True)
    run = grade(folder)
    assert run.code == 0
    rows = run.rows
    assert set(rows) == {"honest.ipynb", "link.ipynb", "linked"}  # nothing from inside the link
    for name in ("link.ipynb", "linked"):
        assert (rows[name]["status"], rows[name]["total"]) == ("malformed", "0")
        assert rows[name]["reason"] == "a symbolic link: the grader does not follow links"
    assert (rows["honest.ipynb"]["status"], rows["honest.ipynb"]["total"]) == ("ok", "0")


def test_a_symlink_named_on_the_command_line_is_refused_too(grade, folder):
    """As a shell glob (``submissions/*``) would name it."""
    (folder / "link.ipynb").symlink_to(SOLUTION)
    (folder / "linked").symlink_to(SOLUTION.parent, target_is_directory=True)
    run = grade(folder / "link.ipynb", folder / "linked")
    assert {name: row["status"] for name, row in run.rows.items()} == {
        "link.ipynb": "malformed",
        "linked": "malformed",
    }


def graded_again(run: Run) -> set[str]:
    """The submissions a run graded, each with its progress line ``[k/n] name: ...`` on stderr;
    the others' grades it kept from an earlier run."""
    return set(re.findall(r"^\[\d+/\d+\] (.+?): ", run.stderr, re.MULTILINE))


# Names


FORMULAS = [
    '=HYPERLINK("evil.example","click").ipynb',
    "=cmd|' -C calc'!A0.ipynb",
    "+1.ipynb",
    "-1.ipynb",
    "@SUM(A1).ipynb",
]


def test_names_that_look_like_formulas_are_text_in_the_csv(grade, folder):
    for name in FORMULAS:
        write(folder / name, "not a notebook")
    run = grade(folder)
    with (run.out / "grades.csv").open(newline="") as file:
        rows = list(csv.reader(file))[1:]
    assert sorted(row[0] for row in rows) == sorted("'" + name for name in FORMULAS)
    for row in rows:
        assert all(cell[:1] not in ("=", "+", "-", "@", "\t", "\r") for cell in row), row
    assert set(run.grades) == set(FORMULAS)  # the JSON keeps the names as they are


def test_names_that_clean_alike_keep_their_own_page_and_record(grade, folder):
    write(folder / "a b.ipynb", nbformat.read(SOLUTION, as_version=4))
    write(folder / "a_b.ipynb", nbformat.read(EXERCISE, as_version=4))
    write(folder / "a?b.ipynb", "not a notebook")
    first = grade(folder)
    totals = {name: row["total"] for name, row in first.rows.items()}
    assert set(totals) == {"a b.ipynb", "a_b.ipynb", "a?b.ipynb"}
    assert float(totals["a b.ipynb"]) > 0 and totals["a_b.ipynb"] == totals["a?b.ipynb"] == "0"
    assert len(list((first.out / "feedback").iterdir())) == 3
    for name, total in totals.items():
        assert report.read_saved_grade(first.out, name).submission == name
        page = report.feedback_path(first.out, name).read_text()
        assert f"total {total}/" in page or f"total {total} points" in page
    again = grade(folder, "--resume")  # every record found again: only the one not ok is regraded
    assert graded_again(again) == {"a?b.ipynb"}, again.stderr
    assert again.rows == first.rows


def test_escape_sequences_in_names_and_messages_do_not_reach_the_terminal(grade, folder):
    # The checks clean what a student's function raises; a test cell's own failure is not.
    message = "in the message " + ESCAPES
    answer = (
        "class Checks:\n"
        "    def __getattr__(self, name):\n"
        f"        raise ValueError({message!r})\n"
        "checks = Checks()  # what the test cells call\n"
    )
    hostile = nbformat.read(SOLUTION, as_version=4)
    hostile.cells[LAYER_NORM_CELL].source = answer
    name = f"{ESCAPES}ada.ipynb"
    write(folder / name, hostile)
    alone = grade(folder / name)  # one notebook: the table of points
    assert "ValueError: in the message" in alone.stdout  # its escapes stripped by the judge
    assert "\\x1b]0;owned" in alone.stdout  # the name's, escaped for the terminal
    write(folder / f"bo{ESCAPES}.ipynb", "not a notebook")
    batch = grade(folder)  # a batch: a line per submission, then the summary
    assert f"{ESCAPES}ada.ipynb" in batch.grades  # the reports keep the name as it is
    (folder / f"empty{ESCAPES}").mkdir()
    empty = grade(folder / f"empty{ESCAPES}")
    missing = grade(folder / f"nowhere{ESCAPES}")
    assert (empty.code, missing.code) == (0, 2)
    for run in (alone, batch, empty, missing):
        for text in (run.stdout, run.stderr):
            assert not TERMINAL_CONTROLS.search(text), repr(text)


# Files


def sparse_file(path: Path, mib: float) -> Path:
    with open(path, "wb") as file:
        file.truncate(int(mib * 2**20))
    return path


def test_a_notebook_over_the_size_limit_is_malformed_without_being_parsed(
    grade, folder, monkeypatch
):
    parsed = []
    read_submission = assemble.read_submission
    monkeypatch.setattr(
        assemble, "read_submission", lambda raw: parsed.append(len(raw)) or read_submission(raw)
    )
    sparse_file(folder / "huge.ipynb", 52)
    run = grade(folder)
    (row,) = run.rows.values()
    assert (row["status"], row.get("reason")) == (
        "malformed",
        "the file is 52.0 MiB, over the limit of 16 MiB (--notebook-mb): not read",
    )
    assert parsed == []


def test_the_size_limit_is_a_flag(grade, folder):
    shutil.copy(SOLUTION, folder / "layernorm.ipynb")
    limit = max(1, os.path.getsize(SOLUTION) // 2**20)
    sparse_file(folder / "bigger.ipynb", limit + 0.5)
    rows = grade(folder, "--notebook-mb", limit).rows
    assert (rows["layernorm.ipynb"]["status"], rows["bigger.ipynb"]["status"]) == (
        "ok",
        "malformed",
    )


# Metadata

CELL = ("cells", LAYER_NORM_CELL)
BAD_FIELDS = {
    "assignment_list": (("metadata", "addnorm", "assignment"), ["layernorm"]),
    "assignment_dict": (("metadata", "addnorm", "assignment"), {"name": "layernorm"}),
    "assignment_number": (("metadata", "addnorm", "assignment"), 3),
    "addnorm_string": (("metadata", "addnorm"), "layernorm"),
    "metadata_list": (("metadata",), ["layernorm"]),
    "grade_id_list": ((*CELL, "metadata", "nbgrader", "grade_id"), ["layer_norm"]),
    "grade_id_number": ((*CELL, "metadata", "nbgrader", "grade_id"), 7),
    "nbgrader_list": ((*CELL, "metadata", "nbgrader"), []),
    "source_number": ((*CELL, "source"), 3),
    "source_numbers": ((*CELL, "source"), ["x = 1\n", 2]),
    "cell_metadata_list": ((*CELL, "metadata"), []),
}


def test_metadata_of_the_wrong_type_is_malformed_with_the_field_named(grade, folder):
    for name, (path, value) in BAD_FIELDS.items():
        write(folder / f"{name}.ipynb", solution_with(path, value))
    rows = grade(folder).rows
    for name, (path, _) in BAD_FIELDS.items():
        row = rows[f"{name}.ipynb"]
        field = ".".join(str(key) for key in path).replace(f"cells.{LAYER_NORM_CELL}", "")
        assert row["status"] == "malformed", (name, row["status"], row.get("reason"))
        assert row["reason"].startswith("not a valid notebook: ") and field in row["reason"]


def test_without_a_sandbox_a_class_is_not_graded_unless_the_instructor_says_so(
    tmp_path, monkeypatch, capsys
):
    """Instructors are never silently unprotected; a learner's own notebook still grades."""
    monkeypatch.setattr(bubblewrap, "bubblewrap_problem", lambda: "bubblewrap is not installed")
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("ada", "bo"):
        (folder / f"{name}.ipynb").write_text("not a notebook")
    out = tmp_path / "out"
    assert pipeline.main([str(folder), "--out", str(out)]) == 2
    said = capsys.readouterr().err
    assert "cannot build its sandbox" in said and "--no-sandbox" in said
    assert not (out / "grades.csv").exists()

    assert pipeline.main([str(folder), "--out", str(out), "--no-sandbox"]) == 0
    assert "no sandbox (--no-sandbox was given)" in capsys.readouterr().err
    assert (out / "grades.csv").read_text().count("malformed") == 2

    assert pipeline.main([str(folder / "ada.ipynb"), "--out", str(tmp_path / "one")]) == 0
    said = capsys.readouterr().err
    assert said.count("warning: no sandbox (bubblewrap is not installed)") == 1
    assert "error:" not in said


# Resuming: a grade is kept only where nothing it was decided from has changed


def damage(out: Path, submission_id: str) -> None:
    """The record of a grade as a fault of the machine leaves it: ``error``, no points, with
    the same digests as before (the files did not change)."""
    path = report.saved_grade_path(out, submission_id)
    record = json.loads(path.read_text())
    record |= {"status": "error", "reason": "OSError: [Errno 28] No space left on device"}
    path.write_text(json.dumps(record | {"cells": [], "total": 0}))


def test_resume_keeps_only_ok_grades_of_unchanged_submissions_notebooks_and_settings(
    grade, folder, tmp_path
):
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(SOLUTION, source / "layernorm.ipynb")
    write(folder / "ada.ipynb", nbformat.read(SOLUTION, as_version=4))
    write(folder / "bo.ipynb", nbformat.read(EXERCISE, as_version=4))
    both = {"ada.ipynb", "bo.ipynb"}

    def resume(*flags) -> Run:
        return grade(folder, "--source", source, "--resume", *flags)

    first = grade(folder, "--source", source)
    assert graded_again(first) == both
    totals = {name: row["total"] for name, row in first.rows.items()}
    assert totals == {"ada.ipynb": "10", "bo.ipynb": "0"}
    assert graded_again(resume()) == set()  # nothing changed: no kernel starts

    damage(first.out, "ada.ipynb")
    again = resume()
    assert graded_again(again) == {"ada.ipynb"}, again.stderr
    assert again.rows == first.rows  # its 10 points back

    assert graded_again(resume("--timeout", "30")) == both  # a setting that changes grades
    assert graded_again(resume("--timeout", "30")) == set()
    moved = shutil.copytree(source, tmp_path / "moved")  # the same notebooks elsewhere
    assert graded_again(grade(folder, "--source", moved, "--resume", "--timeout", "30")) == set()

    instructors = nbformat.read(source / "layernorm.ipynb", as_version=4)
    instructors.cells.append(nbformat.v4.new_markdown_cell("A hint added after the deadline."))
    write(source / "layernorm.ipynb", instructors)
    assert graded_again(resume("--timeout", "30")) == both  # the instructor's notebook changed

    changed = nbformat.read(EXERCISE, as_version=4)
    changed.cells.append(nbformat.v4.new_markdown_cell("My notes."))
    write(folder / "bo.ipynb", changed)
    last = resume("--timeout", "30")
    assert graded_again(last) == {"bo.ipynb"}  # the submission changed
    assert {name: row["total"] for name, row in last.rows.items()} == totals
