"""Judging: the points come from the checks' records, judged here, and from nbval's outcome.

Records are made as a graded kernel makes them (the checks run in this process, recording into a
folder), so no kernel runs here; tests/grading/test_pipeline.py runs every stage together.
"""

import dataclasses
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from addnorm_lib import checks
from addnorm_lib.checks import _record as record
from addnorm_lib.grading import execute, judge
from addnorm_lib.grading.cell_record import CellRecord
from addnorm_lib.grading.verdict import Verdict
from addnorm_lib.reference.norms import layer_norm
from tests.grading.conftest import FORWARD
from tests.inprocess import observations_folder


def cell_record(code_index: int, **changes) -> CellRecord:
    """A code cell's record as the executor writes it: passed, in time, the kernel alive."""
    found = CellRecord(code_index, None, None, None, "passed", False, True)
    return replace(found, **changes)


def records_for(assignment, **status_by_grade_id):
    """nbval-style records: every code cell passed, except the test cells given."""
    code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
    index_of = {t.grade_id: code.index(t.index) for t in assignment.tests}
    records = [cell_record(i) for i in range(len(code))]
    for grade_id, status in status_by_grade_id.items():
        at, found = index_of[grade_id], records[index_of[grade_id]]
        if status == "timeout":
            records[at] = replace(found, status="failed", timed_out=True, report="Timeout of 60 s")
        elif status != "missing":
            report = f"AssertionError: {grade_id} went wrong"
            records[at] = replace(found, status=status, report=report)
    missing = {index_of[g] for g, s in status_by_grade_id.items() if s == "missing"}
    return [r for r in records if r.code_index not in missing]


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
    alive = [cell_record(0)]
    died = [cell_record(2, kernel_alive=False)]
    assert judge.notebook_status(alive, True, [])[0] == "timeout"  # the wall clock first
    assert judge.notebook_status(None, False, [])[0] == "error"
    assert judge.notebook_status(died, False, []) == (
        "kernel_died",
        "the kernel died in code cell 2",
    )
    assert judge.notebook_status(alive, False, []) == ("ok", "")
    tail = [replace(died[0], hidden_tests_of=FORWARD)]
    assert (
        judge.notebook_status(tail, False, [])[1]
        == f"the kernel died in the hidden tests of {FORWARD}"
    )


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


# Hidden tests: judged from their records, described in the grader's words only


def with_tail(records, assignment, grade_id, **changes):
    """``records`` with the record of ``grade_id``'s hidden tail cell changed (or, given
    ``missing=True``, left out)."""
    code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
    test = next(t for t in assignment.tests if t.grade_id == grade_id)
    index = code.index(test.hidden_index)
    if changes.pop("missing", False):
        return [r for r in records if r.code_index != index]
    return [replace(r, **changes) if r.code_index == index else r for r in records]


def test_a_hidden_check_that_fails_is_named_without_its_seed_or_the_judges_text(assignment):
    def shifted(x, gamma, beta, eps=1e-5):  # right on the visible case only
        right = layer_norm(x, gamma, beta, eps)
        return right if shifted.calls == 0 else right + 1.0

    with observations_folder() as folder:
        shifted.calls = 0
        checks.check_layer_norm(shifted)
        shifted.calls = 1
        checks.check_layer_norm(shifted, seed=2024)
        cells = by_id(judge.judge(assignment, records_for(assignment), folder, 60))
    assert cells[FORWARD].points == 0
    assert cells[FORWARD].message == judge.HIDDEN_FAILED.format(name="check_layer_norm")
    assert "2024" not in cells[FORWARD].message


def test_a_hidden_tail_that_raised_says_nothing_of_what_it_raised(assignment):
    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(layer_norm, seed=seed)
        report = "AssertionError: the hidden input was np.arange(2024)"
        records = with_tail(
            records_for(assignment), assignment, FORWARD, status="failed", report=report
        )
        cells = by_id(judge.judge(assignment, records, folder, 60))
    assert (cells[FORWARD].points, cells[FORWARD].message) == (0, judge.HIDDEN_ERROR)


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"missing": True}, "not_run", judge.HIDDEN_NOT_RUN),
        (
            {"timed_out": True, "status": "failed"},
            "timeout",
            judge.HIDDEN_TIMEOUT.format(seconds=60),
        ),
    ],
)
def test_a_hidden_tail_that_did_not_run_or_finish_earns_nothing(
    assignment, change, status, message
):
    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(layer_norm, seed=seed)
        records = with_tail(records_for(assignment), assignment, FORWARD, **change)
        cells = by_id(judge.judge(assignment, records, folder, 60))
    assert (cells[FORWARD].points, cells[FORWARD].status) == (0, status)
    assert cells[FORWARD].message == message


def test_a_hidden_check_switched_off_earns_nothing(assignment):
    """A notebook's input transformer that turns the hidden check calls into ``pass``: the tail
    cell passes in the kernel, but its check recorded nothing."""
    with observations_folder() as folder:
        checks.check_layer_norm(layer_norm)
        cells = by_id(judge.judge(assignment, records_for(assignment), folder, 60))
    assert cells[FORWARD].points == 0
    assert cells[FORWARD].message == judge.HIDDEN_NO_RESULT.format(name="check_layer_norm")


@pytest.mark.parametrize("sealed", [True, False])
def test_visible_checks_are_judged_from_the_records_sealed_before_the_hidden_tests(
    assignment, tmp_path, sealed
):
    """The kernel rewrote the visible check's record after the hidden tests ran, quoting them:
    the judge reads the sealed copy (the control, without the seal, quotes the rewrite)."""
    with observations_folder() as folder:
        for seed in (0, 2024):
            checks.check_layer_norm(layer_norm, seed=seed)
        seal = tmp_path / "sealed"
        seal.mkdir()
        name = record.observation_name("check_layer_norm", 0)
        (seal / name).write_bytes((folder / name).read_bytes())
        quoted = "RuntimeError: x = np.arange(2024)  # a hidden line"
        honest = record.load(folder / name)
        record.save(folder / name, [dataclasses.replace(o, error=quoted) for o in honest])
        records = records_for(assignment)
        if sealed:
            records = [replace(r, sealed=str(seal)) for r in records]
        cells = by_id(judge.judge(assignment, records, folder, 60))
    assert (cells[FORWARD].points == 3) is sealed
    assert ("a hidden line" in cells[FORWARD].message) is not sealed


def test_every_message_is_capped_with_a_note(assignment, monkeypatch):
    long = Verdict("failed", "y" * 30_000)
    monkeypatch.setattr(judge, "judge_records", lambda checks, folder: dict.fromkeys(checks, long))
    cells = by_id(judge.judge(assignment, records_for(assignment), Path("/nowhere"), 60))
    message = cells[FORWARD].message
    assert len(message) < judge.MESSAGE_LIMIT + 100
    assert message.endswith(
        f"... ({len('CheckFailed: ') + 30_000 - judge.MESSAGE_LIMIT} more characters)"
    )


# The recovery run: the hidden tests of the cells that passed before the kernel died

MODULE_ANSWER = (
    7  # the code-cell index of the LayerNorm module's answer cell: the kernel dies there
)


def plugin_records(assignment, died=None):
    """records_for's records as the nbval plugin writes them (tail cells named), the kernel dead
    from code cell ``died`` on (every later cell failed in a dead kernel)."""
    code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
    tails = {code.index(t.hidden_index): t.grade_id for t in assignment.tests if t.hidden_index}
    records = []
    for found in records_for(assignment):
        dead = died is not None and found.code_index >= died
        found = replace(found, hidden_tests_of=tails.get(found.code_index))
        if dead:
            found = replace(
                found, status="failed", kernel_alive=False, report="Kernel dead on test start"
            )
        records.append(found)
    return records


def forward_index(assignment):
    code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
    return code.index(next(t.index for t in assignment.tests if t.grade_id == FORWARD))


@pytest.mark.parametrize("recovered", [True, False])
def test_the_recovery_runs_hidden_tests_keep_the_points_of_a_cell_that_passed_before_the_death(
    assignment, recovered
):
    """The first run's kernel died after the forward test passed; its hidden test ran in the
    recovery run (without it, the control, the forward test loses its points). The recovery
    run's visible cells say nothing: its forward cell failed there, quoting a hidden input."""
    with observations_folder() as first:
        checks.check_layer_norm(layer_norm)
        with observations_folder() as second:
            checks.check_layer_norm(layer_norm, seed=2024)
            again = plugin_records(assignment)
            quoted = "AssertionError: x = np.arange(2024)  # a hidden line"
            at = forward_index(assignment)
            again[at] = replace(again[at], status="failed", report=quoted)
            recovery = execute.Execution(again, False, second) if recovered else None
            records = plugin_records(assignment, died=MODULE_ANSWER)
            cells = by_id(judge.judge(assignment, records, first, 60, recovery))
    assert (cells[FORWARD].points, cells[FORWARD].status) == (
        (3, "passed") if recovered else (0, "failed")
    )
    assert "a hidden line" not in cells[FORWARD].message
    assert (cells[FORWARD].message == "") is recovered
    assert judge.notebook_status(records, False, list(cells.values())) == (
        "kernel_died",
        f"the kernel died in code cell {MODULE_ANSWER}",
    )


def test_the_recovery_runs_visible_cells_earn_nothing(assignment):
    """A wrong forward pass, judged wrong in the first run: the recovery run's records of a right
    one (its visible cell passed, its checks recorded the reference) change nothing."""

    def shifted(x, gamma, beta, eps=1e-5):
        return layer_norm(x, gamma, beta, eps) + 1.0

    with observations_folder() as first:
        checks.check_layer_norm(shifted)
        with observations_folder() as second:
            for seed in (0, 2024):
                checks.check_layer_norm(layer_norm, seed=seed)
            recovery = execute.Execution(plugin_records(assignment), False, second)
            records = plugin_records(assignment, died=MODULE_ANSWER)
            cells = by_id(judge.judge(assignment, records, first, 60, recovery))
    assert cells[FORWARD].points == 0 and cells[FORWARD].message.startswith("CheckFailed")


@pytest.mark.parametrize(
    "how", ["died before the tail", "died in the tail", "no records", "wall clock"]
)
def test_a_recovery_run_whose_kernel_dies_too_leaves_the_hidden_tests_not_run(assignment, how):
    """Its forward hidden test recorded a passing result (as a kernel may before it dies), but
    the kernel was dead when the tail cell started: not run. A kernel that died in the tail
    cell itself ran it: the failure is judged as in a first run (the later tails are not run)."""
    code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
    test = next(t for t in assignment.tests if t.grade_id == FORWARD)
    died = {"died before the tail": 2, "died in the tail": code.index(test.hidden_index)}.get(how)
    with observations_folder() as first:
        checks.check_layer_norm(layer_norm)
        with observations_folder() as second:
            checks.check_layer_norm(layer_norm, seed=2024)
            again = None if how == "no records" else plugin_records(assignment, died=died)
            recovery = execute.Execution(again, how == "wall clock", second)
            records = plugin_records(assignment, died=MODULE_ANSWER)
            cells = by_id(judge.judge(assignment, records, first, 60, recovery))
    expected = (
        ("failed", judge.HIDDEN_ERROR)
        if how == "died in the tail"
        else ("not_run", judge.HIDDEN_NOT_RUN)
    )
    assert (cells[FORWARD].status, cells[FORWARD].message) == expected
    assert cells[FORWARD].points == 0


def test_a_hidden_timeout_in_the_recovery_run_leaves_the_notebooks_status_the_first_runs(
    assignment,
):
    with observations_folder() as first:
        checks.check_layer_norm(layer_norm)
        with observations_folder() as second:
            code = [i for i, c in enumerate(assignment.graded_base.cells) if c.cell_type == "code"]
            test = next(t for t in assignment.tests if t.grade_id == FORWARD)
            again = with_tail(plugin_records(assignment), assignment, FORWARD, timed_out=True)
            assert any(r.timed_out for r in again) and code.index(test.hidden_index)
            recovery = execute.Execution(again, False, second)
            records = plugin_records(assignment, died=MODULE_ANSWER)
            cells = by_id(judge.judge(assignment, records, first, 60, recovery))
    assert cells[FORWARD].status == "timeout"
    assert judge.notebook_status(records, False, list(cells.values()))[0] == "kernel_died"
