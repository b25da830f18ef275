"""Running a graded notebook: the pytest command line and environment, and cleaning up after it.

tests/grading/test_pipeline.py runs real notebooks; here nothing starts a kernel.
"""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from addnorm_lib.checks._record import OBSERVATIONS_ENV
from addnorm_lib.grading import _nbval_grades, execute
from addnorm_lib.grading._pytest_runner import kill_marked
from addnorm_lib.grading.cell_record import (
    RECORDS_LIMIT,
    CellRecord,
    CellRecordsRefused,
    read_cell_records,
    write_cell_records,
)
from addnorm_lib.grading.sandbox import KERNEL_NAME, RUN_MARKER, Sandbox, SubmissionFolders
from addnorm_lib.grading.settings import Settings
from tests.grading.conftest import FORWARD


@pytest.fixture
def folders(tmp_path):
    made = SubmissionFolders(tmp_path / "submission-1")
    made.workdir.mkdir()
    made.make()
    return made


def test_the_records_are_written_out_of_the_kernels_reach(folders):
    records = folders.cell_records
    assert records.is_relative_to(folders.private)
    assert not records.is_relative_to(folders.exchange) and not records.is_relative_to(folders.home)
    assert read_cell_records(records) is None


def test_records_too_large_to_be_ours_are_not_read(folders):
    records = folders.cell_records
    with records.open("wb") as file:
        file.truncate(RECORDS_LIMIT + 1)  # sparse: no disk used
    assert read_cell_records(records) is None


def test_cell_records_round_trip_and_anything_else_is_refused(folders):
    found = CellRecord(3, "abc", FORWARD, None, "failed", True, False, "Traceback", "/s", None)
    write_cell_records(folders.cell_records, [found])
    assert read_cell_records(folders.cell_records) == [found]
    good = found.to_dict()
    for bad in (
        [],
        {"cells": {}},
        {"cells": [{**good, "status": "ok"}]},  # not an executor's status
        {"cells": [{**good, "timed_out": "no"}]},
        {"cells": [{**good, "code_index": -1}]},
        {"cells": [{**good, "code_index": True}]},
        {"cells": [{**good, "grade_id": 7}]},
        {"cells": [{**good, "extra": 1}]},
        {"cells": [{k: v for k, v in good.items() if k != "report"}]},
    ):
        folders.cell_records.write_text(json.dumps(bad))
        with pytest.raises(CellRecordsRefused):
            read_cell_records(folders.cell_records)
    folders.cell_records.write_text("{ not json")
    with pytest.raises(CellRecordsRefused, match="not JSON"):
        read_cell_records(folders.cell_records)


def test_nbval_runs_lax_in_the_graded_kernel_with_our_recorder(folders):
    notebook = folders.private / "graded.ipynb"
    settings = Settings(cell_timeout=12.5, output_mb=3)
    arguments = execute.pytest_arguments(notebook, folders, KERNEL_NAME, settings)
    assert arguments[0] == str(notebook)
    assert "--nbval-lax" in arguments and "--nbval" not in arguments
    assert f"--nbval-kernel-name={KERNEL_NAME}" in arguments
    assert "--nbval-cell-timeout=12.5" in arguments
    recorder = arguments.index("addnorm_lib.grading._nbval_grades")
    assert arguments[recorder - 1] == "-p"
    assert f"--addnorm-cell-records={folders.cell_records}" in arguments
    assert f"--addnorm-exchange={folders.exchange}" in arguments
    assert f"--addnorm-home={folders.home}" in arguments
    assert "--addnorm-output-mb=3" in arguments
    assert "no:cacheprovider" in arguments


def test_the_kernel_environment_points_at_its_own_folders(folders):
    settings = Settings(memory_mb=300, file_mb=5)
    box = Sandbox(settings, folders.workdir.parent, None, None)
    env = box.pytest_environment(folders)
    assert env["HOME"] == str(folders.home)
    assert env["JUPYTER_PATH"] == str(folders.private)
    assert env[OBSERVATIONS_ENV] == str(folders.observations)
    assert (env["ADDNORM_MEMORY_MB"], env["ADDNORM_FILE_MB"]) == ("300", "5")
    assert env[RUN_MARKER] == str(folders.workdir)


def sleeper(marker: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    if marker:
        env[RUN_MARKER] = marker
    code = "import time; time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def test_every_process_of_a_submission_is_killed_and_no_other(tmp_path):
    marked, other, unmarked = sleeper(str(tmp_path)), sleeper(str(tmp_path / "x")), sleeper(None)
    try:
        deadline = time.monotonic() + 10  # until the environments can be read
        while time.monotonic() < deadline and not psutil.Process(marked.pid).environ():
            time.sleep(0.05)
        assert kill_marked(RUN_MARKER, str(tmp_path)) == 1
        assert marked.wait(timeout=10) == -9
        assert other.poll() is None and unmarked.poll() is None
    finally:
        for process in (marked, other, unmarked):
            process.kill()
            process.wait()


def stream(text: str) -> dict:
    return {"msg_type": "stream", "content": {"name": "stdout", "text": text}}


def test_output_past_the_cap_is_dropped_with_one_note_and_the_rest_still_flows():
    messages = [stream("a" * 600), stream("b" * 600), stream("c" * 600)]
    messages.append({"msg_type": "status", "content": {"execution_state": "idle"}})
    source = iter(messages)
    capped = _nbval_grades.capped_get_message(lambda self, stream, timeout=None: next(source), 1000)

    class Kernel:
        pass

    kernel = Kernel()
    received = [capped(kernel, "iopub") for _ in messages]
    assert received[0]["content"]["text"] == "a" * 600  # under the cap: untouched
    assert "dropped" in received[1]["content"]["text"] and "b" not in received[1]["content"]["text"]
    assert received[2]["content"]["text"] == ""  # one note, not one per message
    assert received[3] == messages[3]  # what is not output still reaches nbval


def test_display_data_past_the_cap_loses_its_data():
    message = {"msg_type": "display_data", "content": {"data": {"image/png": "x" * 5000}}}
    assert _nbval_grades.dropped(message, "")["content"]["data"] == {}
    assert _nbval_grades.message_size(message) >= 5000


class SilentKernel:
    """A kernel client whose shell channel stays silent, or gives the reply to ``msg_id``."""

    def __init__(self, reply_to: str | None = None):
        self.reply_to = reply_to

    def get_message(self, stream, timeout=None):
        if self.reply_to is None:
            time.sleep(timeout)
            raise _nbval_grades.Empty
        return {"parent_header": {"msg_id": self.reply_to}, "content": {"status": "error"}}

    def is_alive(self):
        return True


def test_a_timeout_is_the_graders_own_clock_running_out():
    """Only the wait for the reply running out says a cell timed out; a reply (an error whose
    text may be anything, nbval's words for a timeout included) does not."""
    silent, answered = SilentKernel(), SilentKernel(reply_to="cell")
    with pytest.raises(_nbval_grades.Empty):
        _nbval_grades._await_reply_watching(silent, "cell", timeout=0.05)
    _nbval_grades._await_reply_watching(answered, "cell", timeout=5)
    assert silent.cell_timed_out and not getattr(answered, "cell_timed_out", False)


# The recovery run: which cells run again when the kernel died before the hidden tail

LAYER_NORM_MODULE_CELL = 7  # the code-cell index of the LayerNorm module's answer cell


def code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def first_run(graded, died_in=None, failed=(), timed_out=()):
    """The nbval plugin's records of ``graded`` (every cell passed, but those in ``failed`` and
    ``timed_out``), its kernel dead from code cell ``died_in`` on."""
    records = []
    for index, cell in enumerate(code_cells(graded)):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        dead = died_in is not None and index >= died_in
        passed = not (dead or grade_id in failed or grade_id in timed_out)
        records.append(
            CellRecord(
                code_index=index,
                id=None,
                grade_id=grade_id,
                hidden_tests_of=cell.metadata.get("addnorm", {}).get("hidden_tests_of"),
                status="passed" if passed else "failed",
                timed_out=grade_id in timed_out,
                kernel_alive=not dead,
            )
        )
    return records


def tails_of(nb) -> dict[int, str]:
    """code-cell index -> the test cell whose hidden tests a tail cell holds (blank ones: none)."""
    return {
        index: cell.metadata["addnorm"]["hidden_tests_of"]
        for index, cell in enumerate(code_cells(nb))
        if "addnorm" in cell.metadata
    }


def test_the_recovery_run_blanks_the_dead_cell_and_after_and_keeps_the_passed_tails(assignment):
    graded = assignment.graded_base
    before = json.dumps(graded)
    again = execute.recovery_notebook(graded, first_run(graded, LAYER_NORM_MODULE_CELL))
    assert json.dumps(graded) == before  # pure: the graded notebook is not changed
    old, new = code_cells(graded), code_cells(again)
    assert len(new) == len(old)  # nbval's code-cell indices stay those of the graded notebook
    first_tail = min(tails_of(graded))
    assert [c.source for c in new[:LAYER_NORM_MODULE_CELL]] == [
        c.source for c in old[:LAYER_NORM_MODULE_CELL]
    ]
    blank = new[LAYER_NORM_MODULE_CELL:first_tail]
    assert all(c.source == "" and c.metadata == {} for c in blank)
    assert set(tails_of(again).values()) == {FORWARD, "test_layer_norm_backward"}
    assert [c.source for i, c in enumerate(new) if i in tails_of(again)] == [
        c.source for i, c in enumerate(old) if i in tails_of(again)
    ]
    assert new[-1].source == ""  # the module's tail: its test cell never passed


@pytest.mark.parametrize(
    "case",
    ["no records", "lived", "died in the tail", "died in a passing test cell", "none passed"],
)
def test_nothing_is_recovered_when_no_hidden_test_can_earn_points(assignment, case):
    graded = assignment.graded_base
    first_tail = min(tails_of(graded))
    forward = next(t for t in assignment.tests if t.grade_id == FORWARD)
    in_forward = code_cells(graded).index(graded.cells[forward.index])
    records = {
        "no records": None,
        "lived": first_run(graded),
        "died in the tail": first_run(graded, first_tail),
        # nbval passed it, but the kernel died in it: not a cell that passed before the death
        "died in a passing test cell": [
            replace(r, status="passed") if r.code_index == in_forward else r
            for r in first_run(graded, in_forward)
        ],
        "none passed": first_run(
            graded,
            LAYER_NORM_MODULE_CELL,
            failed=[FORWARD],
            timed_out=["test_layer_norm_backward"],
        ),
    }[case]
    assert execute.recovery_notebook(graded, records) is None
