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
from addnorm_lib.grading import execute
from addnorm_lib.grading._pytest_runner import kill_marked
from addnorm_lib.grading.sandbox import KERNEL_NAME, Sandbox
from addnorm_lib.grading.settings import Settings


@pytest.fixture
def folders(tmp_path):
    made = execute.Folders(tmp_path / "submission-1")
    made.workdir.mkdir()
    made.make()
    return made


def test_the_graders_files_are_private_and_the_kernels_home_is_apart(folders):
    assert folders.private.stat().st_mode & 0o777 == 0o700
    assert folders.observations.is_dir() and (folders.home / "runtime").is_dir()
    assert not folders.records.is_relative_to(folders.home)
    assert execute.read_records(folders.records) is None


def test_nbval_runs_lax_in_the_graded_kernel_with_our_recorder(folders):
    notebook = folders.home / "graded.ipynb"
    arguments = execute.pytest_arguments(notebook, folders, KERNEL_NAME, 12.5)
    assert arguments[0] == str(notebook)
    assert "--nbval-lax" in arguments and "--nbval" not in arguments
    assert f"--nbval-kernel-name={KERNEL_NAME}" in arguments
    assert "--nbval-cell-timeout=12.5" in arguments
    recorder = arguments.index("addnorm_lib.grading._nbval_grades")
    assert arguments[recorder - 1] == "-p"
    assert f"--addnorm-grades={folders.records}" in arguments
    assert "no:cacheprovider" in arguments


def test_the_kernel_environment_points_at_its_own_folder(folders):
    settings = Settings(memory_mb=300, file_mb=5)
    box = Sandbox(settings, folders.workdir / "out", folders.workdir.parent)
    env = execute.pytest_environment(box, settings, folders)
    assert env["HOME"] == str(folders.home)
    assert env["JUPYTER_PATH"] == str(folders.private)
    assert env[OBSERVATIONS_ENV] == str(folders.observations)
    assert (env["ADDNORM_MEMORY_MB"], env["ADDNORM_FILE_MB"]) == ("300", "5")
    assert env[execute.RUN_MARKER] == str(folders.workdir)
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"


def sleeper(marker: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    if marker:
        env[execute.RUN_MARKER] = marker
    code = "import time; time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def test_every_process_of_a_submission_is_killed_and_no_other(tmp_path):
    marked, other, unmarked = sleeper(str(tmp_path)), sleeper(str(tmp_path / "x")), sleeper(None)
    try:
        deadline = time.monotonic() + 10  # until the environments can be read
        while time.monotonic() < deadline and not psutil.Process(marked.pid).environ():
            time.sleep(0.05)
        assert kill_marked(execute.RUN_MARKER, str(tmp_path)) == 1
        assert marked.wait(timeout=10) == -9
        assert other.poll() is None and unmarked.poll() is None
    finally:
        for process in (marked, other, unmarked):
            process.kill()
            process.wait()
