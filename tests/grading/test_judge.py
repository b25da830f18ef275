"""Judging: the points come from the checks' records, judged here, and from nbval's outcome.

Records are made as a graded kernel makes them (the checks run in this process, recording into a
folder), so no kernel runs here; tests/grading/test_pipeline.py runs every stage together.
"""

import numpy as np
import pytest

from addnorm_lib import checks
from addnorm_lib.checks import _record as record
from addnorm_lib.grading import judge
from addnorm_lib.reference.norms import layer_norm
from tests.grading.conftest import FORWARD
from tests.inprocess import observations_folder


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
        found = records[index_of[grade_id]]
        if status == "timeout":
            found.update(status="failed", timed_out=True, report="Timeout of 60 s")
        elif status != "missing":
            found.update(status=status, report=f"AssertionError: {grade_id} went wrong")
    missing = {index_of[g] for g, s in status_by_grade_id.items() if s == "missing"}
    return [r for r in records if r["code_index"] not in missing]


def by_id(cells):
    return {cell.grade_id: cell for cell in cells}


def test_points_come_from_the_records_not_from_nbval_alone(assignment, tmp_path):
    with observations_folder() as folder:
        checks.check_layer_norm(layer_norm)
        checks.check_layer_norm(layer_norm, seed=2024)
        cells = by_id(judge.judge(assignment, records_for(assignment), folder, 60))
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
        cells = by_id(judge.judge(assignment, records_for(assignment), folder, 60))
    assert cells[FORWARD].points == 0 and "unbiased variance" in cells[FORWARD].message


def test_a_failed_cell_with_passing_checks_loses_its_points(assignment):
    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(layer_norm, seed=seed)
        records = records_for(assignment, test_layer_norm="failed")
        cells = by_id(judge.judge(assignment, records, folder, 60))
    assert cells[FORWARD].status == "failed" and cells[FORWARD].points == 0


def test_a_failed_cell_that_recorded_nothing_shows_nbvals_error(assignment, tmp_path):
    records = records_for(assignment, test_layer_norm="failed")
    cells = by_id(judge.judge(assignment, records, tmp_path, 60))
    assert cells[FORWARD].message == "AssertionError: test_layer_norm went wrong"


def test_a_tampered_record_earns_nothing(assignment):
    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(layer_norm, seed=seed)
        record.observation_path(folder, "check_layer_norm", 0).write_bytes(b"not an npz file")
        cells = by_id(judge.judge(assignment, records_for(assignment), folder, 60))
    assert cells[FORWARD].points == 0
    assert "check_layer_norm(seed=0): the recorded result is unusable" in cells[FORWARD].message


def test_timeouts_and_unrun_cells_are_named(assignment, tmp_path):
    records = records_for(assignment, test_layer_norm="timeout", test_layer_norm_module="missing")
    cells = by_id(judge.judge(assignment, records, tmp_path, 60))
    assert (cells[FORWARD].status, cells["test_layer_norm_module"].status) == ("timeout", "not_run")
    assert "longer than 60 s" in cells[FORWARD].message
    assert judge.notebook_status(records, False, list(cells.values()))[0] == "timeout"


def test_no_records_means_no_cell_ran(assignment, tmp_path):
    cells = judge.judge(assignment, None, tmp_path, 60)
    assert [c.status for c in cells] == ["not_run"] * 3 and sum(c.points for c in cells) == 0


def test_notebook_status_order():
    alive = [{"code_index": 0, "timed_out": False, "kernel_alive": True}]
    died = [{"code_index": 2, "timed_out": False, "kernel_alive": False}]
    assert judge.notebook_status(alive, True, [])[0] == "timeout"  # the wall clock first
    assert judge.notebook_status(None, False, [])[0] == "error"
    assert judge.notebook_status(died, False, []) == (
        "kernel_died",
        "the kernel died in code cell 2",
    )
    assert judge.notebook_status(alive, False, []) == ("ok", "")


def test_clean_message_keeps_the_exception_without_colours():
    report = "Traceback ...\n  line 3\n\x1b[0;31mCheckFailed\x1b[0m: you used the batch axis\nmore"
    assert judge.clean_message(report) == "CheckFailed: you used the batch axis\nmore"
    assert judge.clean_message("ValueError: " + "x" * 50, limit=20).endswith("(42 more characters)")


def test_a_grade_survives_its_record():
    cell = judge.CellGrade(FORWARD, 3, 3, "passed", "", hidden=True)
    grade = judge.Grade("ada.ipynb", "layernorm", "ok", cells=[cell], max_total=10, notes=["n"])
    data = grade.to_dict()
    assert data["total"] == 3
    assert judge.Grade.from_dict(data) == grade


def test_clean_message_drops_every_escape_sequence_and_control_character():
    """A failure message quotes the student's output: it can carry terminal escapes of any kind."""
    forged = (
        "ValueError: red\x1b]0;owned\x07 title\x1b]8;;http://x\x1b\\ link\x9b2J clear"
        "\rforged line\x00\x7f bell\x07 end\tok"
    )
    cleaned = judge.clean_message(forged)
    assert cleaned == "ValueError: red title link clearforged line bell end\tok"
    assert not any((ch < " " and ch not in "\n\t") or "\x7f" <= ch <= "\x9f" for ch in cleaned)
