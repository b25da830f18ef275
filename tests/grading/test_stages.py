"""The grader's stages one at a time, without kernels: find the checks, identify, assemble, judge,
decide the status, discover and report. (tests/grading/test_pipeline.py runs them together on a
class.)"""

import csv
import json

import nbformat
import numpy as np
import pytest

from addnorm_lib import checks
from addnorm_lib.grading import pipeline as grade
from addnorm_lib.reference.norms import layer_norm
from tests.conftest import ROOT
from tests.inprocess import observations_folder

SOLUTION = ROOT / "solutions" / "layernorm.ipynb"
FORWARD = "test_layer_norm"


@pytest.fixture(scope="module")
def assignment():
    return grade.load_assignment(SOLUTION)


def answer_cell(nb, grade_id):
    (found,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return found


# Finding what a test cell checks


def test_checks_called_finds_each_call_and_its_seed():
    source = "checks.check_layer_norm(f)\nx = 1\nchecks.check_layer_norm(f, seed=2024)\nprint(x)"
    assert grade.checks_called(source, "here") == (
        ("check_layer_norm", 0),
        ("check_layer_norm", 2024),
    )


def test_a_check_without_a_judge_is_refused_by_name():
    with pytest.raises(ValueError, match=r"cell 3: checks.check_nothing has no judge"):
        grade.checks_called("checks.check_nothing(f)", "cell 3")


def test_calls_on_other_objects_are_not_checks():
    assert grade.checks_called("other.check_layer_norm(f)\ncheck_layer_norm(f)", "here") == ()


# Identifying the assignment


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
    assert grade.identify(nb, ROOT / file_name, known) == expected


# Assembling the graded notebook


def test_only_answer_cells_come_from_the_student(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    answer_cell(
        student, "layer_norm"
    ).source = "# NBVAL_SKIP\ndef layer_norm(x, g, b, eps=1e-5): ..."
    answer_cell(student, FORWARD).source = "pass  # the student's 'test'"
    graded, notes = grade.assemble(assignment, student)
    assert notes == []
    assert (
        answer_cell(graded, "layer_norm").source.strip() == "def layer_norm(x, g, b, eps=1e-5): ..."
    )
    assert "checks.check_layer_norm(layer_norm, seed=2024)" in answer_cell(graded, FORWARD).source


def test_an_answer_is_found_by_cell_id_when_its_metadata_is_gone(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    cell = answer_cell(student, "layer_norm")
    cell.source, cell.metadata = "layer_norm = 'mine'", {}
    graded, _ = grade.assemble(assignment, student)
    assert answer_cell(graded, "layer_norm").source == "layer_norm = 'mine'"


def test_a_missing_answer_keeps_the_stub_and_says_so(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    student.cells.remove(answer_cell(student, "layer_norm_module"))
    graded, notes = grade.assemble(assignment, student)
    assert "raise NotImplementedError" in answer_cell(graded, "layer_norm_module").source
    assert notes == ["answer cell 'layer_norm_module' is missing: graded as unanswered"]


# Judging the records


def records_for(assignment, **status_by_grade_id):
    """nbval-style records: every code cell passed, except the test cells given."""
    code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
    index_of = {t.grade_id: code.index(t.index) for t in assignment.tests}
    records = [
        {
            "code_index": i,
            "status": "passed",
            "timed_out": False,
            "kernel_alive": True,
            "report": "",
        }
        for i in range(len(code))
    ]
    for grade_id, status in status_by_grade_id.items():
        record = records[index_of[grade_id]]
        if status == "timeout":
            record.update(status="failed", timed_out=True, report="Timeout of 60 s")
        elif status != "missing":
            record.update(status=status, report=f"AssertionError: {grade_id} went wrong")
    missing = {index_of[g] for g, s in status_by_grade_id.items() if s == "missing"}
    return [r for r in records if r["code_index"] not in missing]


def by_id(cells):
    return {cell.grade_id: cell for cell in cells}


def test_points_come_from_the_records_not_from_nbval_alone(assignment, tmp_path):
    with observations_folder() as folder:
        checks.check_layer_norm(layer_norm)
        checks.check_layer_norm(layer_norm, seed=2024)
        cells = by_id(grade.judge(assignment, records_for(assignment), folder, 60))
    assert cells[FORWARD].status == "passed" and cells[FORWARD].points == 3
    # nbval passed the backward cell, but its checks recorded nothing: no points
    backward = cells["test_layer_norm_backward"]
    assert backward.points == 0 and "recorded no result" in backward.message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # ddof=1 on a single feature
def test_a_wrong_answer_is_judged_wrong_even_if_nbval_passed(assignment):
    def unbiased(x, gamma, beta, eps=1e-5):
        var = x.var(-1, ddof=1, keepdims=True)
        return gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(var + eps) + beta

    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(unbiased, seed=seed)
        cells = by_id(grade.judge(assignment, records_for(assignment), folder, 60))
    assert cells[FORWARD].points == 0 and "unbiased variance" in cells[FORWARD].message


def test_a_failed_cell_with_passing_checks_loses_its_points(assignment):
    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(layer_norm, seed=seed)
        records = records_for(assignment, test_layer_norm="failed")
        cells = by_id(grade.judge(assignment, records, folder, 60))
    assert cells[FORWARD].status == "failed" and cells[FORWARD].points == 0


def test_timeouts_and_unrun_cells_are_named(assignment, tmp_path):
    records = records_for(assignment, test_layer_norm="timeout", test_layer_norm_module="missing")
    cells = by_id(grade.judge(assignment, records, tmp_path, 60))
    assert (cells[FORWARD].status, cells["test_layer_norm_module"].status) == ("timeout", "not_run")
    assert "longer than 60 s" in cells[FORWARD].message
    assert grade.notebook_status(records, False, list(cells.values()))[0] == "timeout"


def test_notebook_status_order():
    alive = [{"code_index": 0, "timed_out": False, "kernel_alive": True}]
    died = [{"code_index": 2, "timed_out": False, "kernel_alive": False}]
    assert grade.notebook_status(alive, True, [])[0] == "timeout"  # the wall clock first
    assert grade.notebook_status(None, False, [])[0] == "error"
    assert grade.notebook_status(died, False, []) == (
        "kernel_died",
        "the kernel died in code cell 2",
    )
    assert grade.notebook_status(alive, False, []) == ("ok", "")


def test_clean_message_keeps_the_exception_without_colours():
    report = "Traceback ...\n  line 3\n\x1b[0;31mCheckFailed\x1b[0m: you used the batch axis\nmore"
    assert grade.clean_message(report) == "CheckFailed: you used the batch axis\nmore"
    assert grade.clean_message("ValueError: " + "x" * 50, limit=20).endswith("(42 more characters)")


# Discovering submissions and writing reports


def test_discover_gives_every_notebook_a_unique_id(tmp_path):
    for path in ("a/hw.ipynb", "b/hw.ipynb", "c/.ipynb_checkpoints/hw.ipynb", "notes.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    single = tmp_path / "a" / "hw.ipynb"
    found = grade.discover([tmp_path, single])
    assert [submission for submission, _ in found] == ["a/hw.ipynb", "b/hw.ipynb", "hw.ipynb"]
    assert [s for s, _ in grade.discover([single, single])] == ["hw.ipynb", "hw.ipynb~2"]


def test_safe_names_are_flat_file_names():
    assert grade.safe_name("class a/bo's hw.ipynb") == "class_a__bo_s_hw.ipynb"


def test_reports_have_a_column_per_test_and_leave_no_partial_file(assignment, tmp_path):
    cells = [grade.CellGrade(t.grade_id, t.points, t.points, "passed") for t in assignment.tests]
    graded = grade.Grade("ada.ipynb", "layernorm", "ok", cells=cells, max_total=10)
    broken = grade.Grade("bo.ipynb", None, "malformed", "not a valid notebook")
    grade.write_reports(tmp_path, [broken, graded], {"layernorm": assignment})
    rows = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert [r["submission"] for r in rows] == ["ada.ipynb", "bo.ipynb"]
    assert (rows[0][FORWARD], rows[0]["total"], rows[1][FORWARD]) == ("3", "10", "")
    assert json.loads((tmp_path / "grades.json").read_text())["grades"][0]["total"] == 10
    assert not list(tmp_path.glob("*.partial"))


def test_feedback_escapes_what_the_student_wrote():
    cell = grade.CellGrade(FORWARD, 0, 3, "failed", "CheckFailed: <script>alert(1)</script>")
    page = grade.feedback_html(grade.Grade("<b>x</b>.ipynb", "layernorm", "ok", cells=[cell]))
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>x</b>" not in page
