"""Running a graded notebook: ``pytest --nbval-lax`` in a process and folder of its own.

The notebook runs in a sandboxed kernel (:mod:`~addnorm_lib.grading.sandbox`) with a per-cell
timeout, under a per-notebook wall-clock limit. The grader's nbval plugin
(``_nbval_grades``) writes one record per cell where the kernel cannot reach it; the checks
called by the test cells write their observations into the kernel's ``observations`` folder.
Nothing here decides points: that is :mod:`~addnorm_lib.grading.judge`'s work.
"""

import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat

from addnorm_lib.checks import _record as record
from addnorm_lib.grading._pytest_runner import kill_marked, run_pytest, start_fork_server
from addnorm_lib.grading.sandbox import Sandbox
from addnorm_lib.grading.settings import Settings

RUN_MARKER = "ADDNORM_SUBMISSION"  # in the environment of every process of one submission


@dataclass(frozen=True)
class Execution:
    """What running a graded notebook left behind, for the judge."""

    records: list[dict] | None  # one per executed cell; None if nbval produced no results
    wall_timeout: bool  # the notebook ran past its wall-clock limit and was stopped
    observations: Path  # the folder the checks recorded into


def start_pytest_server() -> None:
    """Start the process that pytest runs are forked from, ahead of the first submission."""
    start_fork_server()


@dataclass(frozen=True)
class Folders:
    """The folders of one submission's run, all under its ``workdir``."""

    workdir: Path

    @property
    def private(self) -> Path:
        """The grader's files (kernelspec, pytest.ini, cell records): out of the kernel's reach."""
        return self.workdir / "private"

    @property
    def home(self) -> Path:
        """The kernel's working folder and home: the graded notebook and what the kernel writes."""
        return self.workdir / "sandbox"

    @property
    def observations(self) -> Path:
        """Where the checks record what the student's code did."""
        return self.home / "observations"

    @property
    def records(self) -> Path:
        """Where the nbval plugin writes its cell records."""
        return self.private / "grades.json"

    def make(self) -> None:
        """Create the folders, and an empty pytest configuration."""
        self.private.mkdir(mode=0o700)
        for folder in (self.observations, self.home / "runtime"):  # runtime: connection file
            folder.mkdir(parents=True)
        (self.private / "pytest.ini").write_text("[pytest]\n")


def pytest_environment(sandbox: Sandbox, settings: Settings, folders: Folders) -> dict:
    """The environment of the pytest run and of its kernel."""
    env = sandbox.kernel_environment()
    home = folders.home
    env.update(
        {
            "JUPYTER_PATH": str(folders.private),  # where the kernelspec is
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "HOME": str(home),
            "IPYTHONDIR": str(home / ".ipython"),
            "MPLCONFIGDIR": str(home / ".matplotlib"),
            "MPLBACKEND": "Agg",
            record.OBSERVATIONS_ENV: str(folders.observations),
            "ADDNORM_MEMORY_MB": str(settings.memory_mb),
            "ADDNORM_FILE_MB": str(settings.file_mb),
            # finds this submission's processes, to clean up after it
            RUN_MARKER: str(folders.workdir),
            # only nbval and ours: faster, and nothing else
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
    )
    return env


def pytest_arguments(notebook: Path, folders: Folders, kernel: str, cell_timeout: float) -> list:
    """pytest's command line: nbval on the notebook, in the given kernel, with our recorder."""
    private = folders.private
    return [
        str(notebook),
        *("-c", str(private / "pytest.ini")),
        *("-p", "nbval.plugin", "--nbval-lax", f"--nbval-kernel-name={kernel}"),
        f"--nbval-cell-timeout={cell_timeout}",
        *("-p", "addnorm_lib.grading._nbval_grades", f"--addnorm-grades={folders.records}"),
        *("-p", "no:cacheprovider", "-q", "--color=no", f"--rootdir={private}"),
    ]


def read_records(path: Path) -> list[dict] | None:
    """The cell records the nbval plugin wrote, or None if it wrote none."""
    return json.loads(path.read_text())["cells"] if path.exists() else None


def run_graded(graded, workdir: Path, sandbox: Sandbox, settings: Settings) -> Execution:
    """Execute a graded notebook under nbval in ``workdir``; what it left for the judge."""
    folders = Folders(workdir)
    folders.make()
    kernel = sandbox.install_kernelspec(folders.private)
    notebook = folders.home / "graded.ipynb"
    nbformat.write(graded, notebook)
    env = pytest_environment(sandbox, settings, folders)
    arguments = pytest_arguments(notebook, folders, kernel, settings.cell_timeout)
    mounts = sandbox.hiding_mounts()
    exit_code = run_pytest(arguments, folders.private, env, mounts, settings.notebook_timeout)
    kill_marked(RUN_MARKER, str(workdir))
    if exit_code is None:  # killed at the wall-clock limit
        return Execution(None, True, folders.observations)
    return Execution(read_records(folders.records), False, folders.observations)


@contextlib.contextmanager
def executed(graded, sandbox: Sandbox, settings: Settings) -> Iterator[Execution]:
    """Run a graded notebook in a fresh folder of the sandbox; it is removed at exit."""
    with tempfile.TemporaryDirectory(prefix="submission-", dir=sandbox.run_folder) as workdir:
        yield run_graded(graded, Path(workdir), sandbox, settings)
