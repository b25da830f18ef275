"""Running a graded notebook: ``pytest --nbval-lax`` in a process and folder of its own.

The notebook runs in a sandboxed kernel (:mod:`~addnorm_lib.grading.sandbox`) with a per-cell
timeout, under a per-notebook wall-clock limit. The graded notebook (hidden tests included) stays
in the submission's private folder, which the kernel cannot see. The grader's nbval plugin
(``_nbval_grades``) starts the kernel over IPC sockets in the exchange folder, caps what it
prints, and writes one record per cell in the private folder; the checks called by the test
cells write their observations into the exchange's ``observations`` folder.
Nothing here decides points: that is :mod:`~addnorm_lib.grading.judge`'s work.
"""

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat

from addnorm_lib.grading._pytest_runner import kill_marked, run_pytest, start_fork_server
from addnorm_lib.grading.sandbox import RUN_MARKER, Sandbox, SubmissionFolders, temporary_folder
from addnorm_lib.grading.settings import Settings


@dataclass(frozen=True)
class Execution:
    """What running a graded notebook left behind, for the judge."""

    records: list[dict] | None  # one per executed cell; None if nbval produced no results
    wall_timeout: bool  # the notebook ran past its wall-clock limit and was stopped
    observations: Path  # the folder the checks recorded into


def start_pytest_server() -> None:
    """Start the process that pytest runs are forked from, ahead of the first submission."""
    start_fork_server()


def pytest_arguments(
    notebook: Path, folders: SubmissionFolders, kernel: str, settings: Settings
) -> list:
    """pytest's command line: nbval on the notebook, in the given kernel, with our recorder
    (which also starts the kernel over IPC sockets in the exchange, and caps its output)."""
    private = folders.private
    return [
        str(notebook),
        *("-c", str(private / "pytest.ini")),
        *("-p", "nbval.plugin", "--nbval-lax", f"--nbval-kernel-name={kernel}"),
        f"--nbval-cell-timeout={settings.cell_timeout}",
        *("-p", "addnorm_lib.grading._nbval_grades", f"--addnorm-grades={folders.records}"),
        f"--addnorm-exchange={folders.exchange}",
        f"--addnorm-home={folders.home}",
        f"--addnorm-output-mb={settings.output_mb}",
        *("-p", "no:cacheprovider", "-q", "--color=no", f"--rootdir={private}"),
    ]


RECORDS_LIMIT = 64 * 2**20  # the plugin caps each report; more than this is not a record of ours


def read_records(path: Path) -> list[dict] | None:
    """The cell records the nbval plugin wrote, or None if it wrote none (or too much)."""
    if not path.exists() or path.stat().st_size > RECORDS_LIMIT:
        return None
    return json.loads(path.read_text())["cells"]


def run_graded(graded, workdir: Path, sandbox: Sandbox, settings: Settings) -> Execution:
    """Execute a graded notebook under nbval in ``workdir``; what it left for the judge."""
    folders = SubmissionFolders(workdir)
    folders.make()
    notebook = folders.private / "graded.ipynb"
    nbformat.write(graded, notebook)
    (folders.private / "pytest.ini").write_text("[pytest]\n")
    with sandbox.kernel(folders) as kernel:
        env = sandbox.pytest_environment(folders)
        arguments = pytest_arguments(notebook, folders, kernel, settings)
        exit_code = run_pytest(arguments, folders.private, env, settings.notebook_timeout)
        kill_marked(RUN_MARKER, str(workdir))
    if exit_code is None:  # killed at the wall-clock limit
        return Execution(None, True, folders.observations)
    return Execution(read_records(folders.records), False, folders.observations)


@contextlib.contextmanager
def executed(graded, sandbox: Sandbox, settings: Settings) -> Iterator[Execution]:
    """Run a graded notebook in a fresh folder of the sandbox; it is removed at exit."""
    with temporary_folder("submission-", sandbox.run_folder) as workdir:
        yield run_graded(graded, workdir, sandbox, settings)
