"""Running a graded notebook: ``pytest --nbval-lax`` in a process and folder of its own.

The notebook runs in a sandboxed kernel (:mod:`~addnorm_lib.grading.sandbox`) with a per-cell
timeout, under a per-notebook wall-clock limit. The graded notebook (hidden tests included) stays
in the submission's private folder, which the kernel cannot see. The grader's nbval plugin
(``_nbval_grades``) starts the kernel over IPC sockets in the exchange folder, caps what it
prints, and writes one record per cell in the private folder; the checks called by the test
cells write their observations into the exchange's ``observations`` folder. A kernel that
writes more than its share into the exchange is stopped, and its submission gets ``error``
(:class:`~.sandbox.ExchangeOverflow`; pipeline's status for an exception).

**The recovery run.** A kernel that dies before the hidden tail (``assemble``) never runs it:
the test cells that passed before the death would lose their hidden tests, and their points.
Then (:func:`recovery_notebook`, :func:`recovered`) the notebook runs once more, in fresh
folders and a fresh kernel of the same sandbox, with the same settings and limits, with every
code cell from the one the kernel died in up to the tail blanked, and the tail cells of every
other test cell too: only the hidden tests of the cells that passed before the death run. The
judge takes nothing from it but those tail cells' records and their checks' observations.
Nothing here decides points: that is :mod:`~addnorm_lib.grading.judge`'s work.
"""

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import nbformat

from addnorm_lib.grading._pytest_runner import kill_marked, run_pytest, start_fork_server
from addnorm_lib.grading.cell_record import HIDDEN_OF, CellRecord, read_cell_records
from addnorm_lib.grading.sandbox import RUN_MARKER, Sandbox, SubmissionFolders
from addnorm_lib.grading.settings import Settings


@dataclass(frozen=True)
class Execution:
    """What running a graded notebook left behind, for the judge."""

    records: list[CellRecord] | None  # one per executed cell; None if nbval produced none
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
        *(
            "-p",
            "addnorm_lib.grading._nbval_grades",
            f"--addnorm-cell-records={folders.cell_records}",
        ),
        f"--addnorm-exchange={folders.exchange}",
        f"--addnorm-home={folders.home}",
        f"--addnorm-output-mb={settings.output_mb}",
        *("-p", "no:cacheprovider", "-q", "--color=no", f"--rootdir={private}"),
    ]


def run_graded(
    graded, folders: SubmissionFolders, sandbox: Sandbox, settings: Settings
) -> Execution:
    """Execute a graded notebook under nbval in a submission's ``folders``; what it left for
    the judge. Raises :class:`~.sandbox.ExchangeOverflow` if its kernel broke the exchange's
    rules (and was stopped)."""
    notebook = folders.private / "graded.ipynb"
    nbformat.write(graded, notebook)
    (folders.private / "pytest.ini").write_text("[pytest]\n")
    with sandbox.kernel(folders) as kernel:
        env = sandbox.pytest_environment(folders)
        arguments = pytest_arguments(notebook, folders, kernel, settings)
        exit_code = run_pytest(arguments, folders.private, env, settings.notebook_timeout)
        kill_marked(RUN_MARKER, str(folders.workdir))
    if exit_code is None:  # killed at the wall-clock limit
        return Execution(None, True, folders.observations)
    return Execution(read_cell_records(folders.cell_records), False, folders.observations)


class Executor(Protocol):
    """Runs graded notebooks: the one way the grader reaches a kernel.

    ``execute(graded)`` is a context manager whose value is the :class:`Execution` (its cell
    records, and the folder its checks recorded into, which lasts until the context ends);
    ``isolated`` says whether its kernels run in the sandbox (a grade's settings digest keeps
    it). Timeouts are the executor's own clock's. The grader's is :class:`NbvalExecutor`; the
    suite grades trusted mutants with a second one (``tests/inprocess.py``) that runs the cells
    in its own process.
    """

    isolated: bool

    def execute(self, graded) -> contextlib.AbstractContextManager[Execution]:
        """Run ``graded``; the context's value is what it left for the judge."""
        ...


@dataclass(frozen=True)
class NbvalExecutor:
    """The grader's executor: ``pytest --nbval-lax`` with the grader's plugin, in a process of
    its own (forked from the pytest fork server), on a kernel of ``sandbox``, under the per-cell
    and per-notebook limits of ``settings``."""

    sandbox: Sandbox
    settings: Settings

    @property
    def isolated(self) -> bool:
        """Whether its kernels run in the sandbox."""
        return self.sandbox.isolated

    @contextlib.contextmanager
    def execute(self, graded) -> Iterator[Execution]:
        """Run a graded notebook in fresh folders of the sandbox (with the exchange's share:
        see :mod:`~.sandbox`); they are removed at exit."""
        with self.sandbox.submission() as folders:
            yield run_graded(graded, folders, self.sandbox, self.settings)


# ----------------------------------------------------------------------------------------------
# The recovery run: the hidden tests of the cells that passed before the kernel died


def tail_of(cell) -> str | None:
    """The grade_id of the test cell whose hidden tests a graded notebook's cell holds, if it is
    a hidden tail cell (``assemble.hidden_tail``); else None."""
    found = cell.get("metadata", {}).get("addnorm")
    return str(found[HIDDEN_OF]) if isinstance(found, dict) and HIDDEN_OF in found else None


def death(records: list[CellRecord]) -> int | None:
    """The code-cell index of the cell the kernel died in (its first record with a dead kernel:
    every later cell found it dead), or None if it lived to the end."""
    return next((found.code_index for found in records if not found.kernel_alive), None)


def passed_before(records: list[CellRecord], died: int) -> set[str]:
    """The grade_ids of the cells nbval passed, in time, before code cell ``died``."""
    return {
        found.grade_id
        for found in records
        if found.code_index < died and found.passed_in_time() and found.grade_id
    }


def blanked(cell) -> None:
    """Make a code cell blank, in place: no source, no metadata, no outputs (it keeps its place,
    so nbval's code-cell indices, which the judge maps records by, stay those of the graded
    notebook)."""
    cell.source, cell.metadata, cell.outputs, cell.execution_count = "", {}, [], None


def recovery_notebook(graded, records: list[CellRecord] | None):
    """The notebook of the recovery run, or None when there is nothing to recover: no records,
    a kernel that did not die, or died in the tail, or no tail cell of a test cell that passed
    before it died.

    A copy of ``graded`` where every code cell from the one the kernel died in up to the first
    tail cell is blank, and so is every tail cell but those of the test cells that nbval passed
    before that cell. Pure: ``graded`` is not changed.
    """
    if not records:
        return None
    died = death(records)
    code = [cell for cell in graded.cells if cell.cell_type == "code"]
    first_tail = next((index for index, cell in enumerate(code) if tail_of(cell)), None)
    if died is None or first_tail is None or died >= first_tail:
        return None
    passed = passed_before(records, died)
    if not any(tail_of(cell) in passed for cell in code[first_tail:]):
        return None
    notebook = copy.deepcopy(graded)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for index, cell in enumerate(code):
        if died <= index < first_tail or (index >= first_tail and tail_of(cell) not in passed):
            blanked(cell)
    return notebook


@contextlib.contextmanager
def recovered(graded, first: Execution, executor: Executor) -> Iterator[Execution | None]:
    """The recovery run of ``graded`` after its ``first`` run, by the same executor (fresh
    folders, removed at exit); None when there is nothing to recover (:func:`recovery_notebook`).
    One at most: nothing runs a third time."""
    notebook = recovery_notebook(graded, first.records)  # none after the wall clock ran out
    if notebook is None:
        yield None
        return
    with executor.execute(notebook) as again:
        yield again
