"""Assembling the graded notebook: the instructor's notebook, with only the student's answers in.

Also reading the instructor's assignments (points, checks per test cell) and identifying the
assignment of a submission.
"""

import nbformat
import pytest

from addnorm_lib.grading import assemble
from tests.conftest import ROOT, SOLUTIONS
from tests.grading.conftest import FORWARD, SOLUTION, answer_cell

# Finding what a test cell checks


def test_checks_called_finds_each_call_and_its_seed():
    source = "checks.check_layer_norm(f)\nx = 1\nchecks.check_layer_norm(f, seed=2024)\nprint(x)"
    assert assemble.checks_called(source, "here") == (
        ("check_layer_norm", 0),
        ("check_layer_norm", 2024),
    )


def test_a_check_without_a_judge_is_refused_by_name():
    with pytest.raises(ValueError, match=r"cell 3: checks.check_nothing has no judge"):
        assemble.checks_called("checks.check_nothing(f)", "cell 3")


def test_calls_on_other_objects_are_not_checks():
    assert assemble.checks_called("other.check_layer_norm(f)\ncheck_layer_norm(f)", "here") == ()


def test_checks_called_by_a_test_cell_are_found():
    assignment = assemble.load_assignment(SOLUTION)
    forward = next(t for t in assignment.tests if t.grade_id == FORWARD)
    assert forward.checks == (("check_layer_norm", 0), ("check_layer_norm", 2024))
    assert forward.hidden


# The instructor's assignments


def test_an_assignment_has_its_answers_tests_and_points(assignment):
    assert assignment.name == "layernorm" and assignment.max_total == 10
    assert set(assignment.answers) == {"layer_norm", "layer_norm_backward", "layer_norm_module"}
    assert [t.points for t in assignment.tests] == [3, 3, 4]


def test_every_instructor_notebook_is_loaded_by_name():
    assignments = assemble.load_assignments(ROOT / "solutions")
    assert sorted(assignments) == sorted(path.stem for path in SOLUTIONS)


def test_a_folder_without_instructor_notebooks_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no instructor notebooks"):
        assemble.load_assignments(tmp_path)


# Reading a submission and identifying its assignment


# Read by nbformat.reads, which only logs what is wrong: a key the schema does not allow.
INVALID_NOTEBOOK = b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [], "x": 1}'


@pytest.mark.parametrize(
    "raw",
    [b"this is { not json", b'{"hello": "world"}', b"\xff\xfe not utf-8", b"", INVALID_NOTEBOOK],
)
def test_a_file_that_is_not_a_notebook_is_rejected_as_malformed(raw):
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.read_submission(raw)
    assert rejected.value.status == "malformed"
    assert rejected.value.reason.startswith("not a valid notebook: ")


def test_a_notebook_is_read():
    student = assemble.read_submission(SOLUTION.read_bytes())
    assert answer_cell(student, "layer_norm").cell_type == "code"


@pytest.mark.parametrize(
    "metadata, file_name, expected",
    [
        ({"assignment": "layernorm"}, "anything.ipynb", "layernorm"),
        ({"assignment": "unknown"}, "hw3_rmsnorm_final.ipynb", "rmsnorm"),
        ("not a dict", "rmsnorm.ipynb", "rmsnorm"),
        (None, "layernorm_and_rmsnorm.ipynb", None),  # two names: ambiguous
        (None, "homework.ipynb", None),
    ],
)
def test_identify_trusts_known_metadata_then_the_file_name(metadata, file_name, expected):
    nb = nbformat.v4.new_notebook()
    if metadata is not None:
        nb.metadata["addnorm"] = metadata
    known = {"layernorm": None, "rmsnorm": None}
    assert assemble.identify(nb, ROOT / file_name, known) == expected


def test_a_submission_of_no_known_assignment_is_rejected(assignment):
    nb = nbformat.v4.new_notebook()
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.assignment_of(nb, ROOT / "homework.ipynb", {"layernorm": assignment})
    assert rejected.value.status == "unknown_assignment"
    assert "(homework.ipynb)" in rejected.value.reason
    found = assemble.assignment_of(nb, ROOT / "my_layernorm.ipynb", {"layernorm": assignment})
    assert found is assignment


# Assembling the graded notebook


def test_only_answer_cells_come_from_the_student(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    answer = answer_cell(student, "layer_norm")
    answer.source = "# NBVAL_SKIP\ndef layer_norm(x, g, b, eps=1e-5): ..."
    answer_cell(student, FORWARD).source = "pass  # the student's 'test'"
    graded, notes = assemble.assemble(assignment, student)
    assert notes == []
    graded_answer = answer_cell(graded, "layer_norm").source
    assert graded_answer.strip() == "def layer_norm(x, g, b, eps=1e-5): ..."
    assert "checks.check_layer_norm(layer_norm, seed=2024)" in answer_cell(graded, FORWARD).source


def test_an_answer_is_found_by_cell_id_when_its_metadata_is_gone(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    cell = answer_cell(student, "layer_norm")
    cell.source, cell.metadata = "layer_norm = 'mine'", {}
    graded, _ = assemble.assemble(assignment, student)
    assert answer_cell(graded, "layer_norm").source == "layer_norm = 'mine'"


def test_a_missing_answer_keeps_the_stub_and_says_so(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    student.cells.remove(answer_cell(student, "layer_norm_module"))
    graded, notes = assemble.assemble(assignment, student)
    assert "raise NotImplementedError" in answer_cell(graded, "layer_norm_module").source
    assert notes == ["answer cell 'layer_norm_module' is missing: graded as unanswered"]


def test_assembling_leaves_the_assignment_as_it_was(assignment):
    before = nbformat.writes(assignment.graded_base)
    student = nbformat.read(SOLUTION, as_version=4)
    answer_cell(student, "layer_norm").source = "changed = True"
    assemble.assemble(assignment, student)
    assert nbformat.writes(assignment.graded_base) == before
