"""Running a graded notebook: the pytest command line and environment, and cleaning up after it.

tests/grading/test_pipeline.py runs real notebooks; here nothing starts a kernel.
"""

import os
import subprocess
import sys
import time

import psutil
import pytest

from addnorm_lib.checks._record import OBSERVATIONS_ENV
from addnorm_lib.grading import _nbval_grades, execute
from addnorm_lib.grading._pytest_runner import kill_marked
from addnorm_lib.grading.sandbox import KERNEL_NAME, RUN_MARKER, Sandbox, SubmissionFolders
from addnorm_lib.grading.settings import Settings


@pytest.fixture
def folders(tmp_path):
    made = SubmissionFolders(tmp_path / "submission-1")
    made.workdir.mkdir()
    made.make()
    return made


def test_the_records_are_written_out_of_the_kernels_reach(folders):
    records = folders.records
    assert records.is_relative_to(folders.private)
    assert not records.is_relative_to(folders.exchange) and not records.is_relative_to(folders.home)
    assert execute.read_records(records) is None


def test_records_too_large_to_be_ours_are_not_read(folders):
    records = folders.records
    with records.open("wb") as file:
        file.truncate(execute.RECORDS_LIMIT + 1)  # sparse: no disk used
    assert execute.read_records(records) is None


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
    assert f"--addnorm-grades={folders.records}" in arguments
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
