"""Grading a notebook in the test process: the grader's own stages, with a second executor that
runs the cells here instead of in a jailed kernel under nbval.

The mutation tests grade dozens of wrong answers. Through the real grader each costs a kernel
(about two seconds of CPU); here it costs the checks alone. Only the executor differs: it is a
second implementation of the grader's :class:`~addnorm_lib.grading.execute.Executor`
(:class:`InProcessExecutor`), which runs the cells in order in one namespace as ``nbval
--nbval-lax`` runs them (a failing cell fails, the next still runs) and returns the same
:class:`~addnorm_lib.grading.cell_record.CellRecord` values; reading, identifying, assembling
and judging are the grader's own (:func:`~addnorm_lib.grading.pipeline.grade_with`).
tests/exercises/test_mutants.py grades one mutant per assignment both ways and requires the same
result. Nothing here is safe against hostile code: it is for the course's own mutants only.
"""

import contextlib
import functools
import io
import os
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import nbformat

from addnorm_lib.checks import _record as record
from addnorm_lib.grading import assemble, pipeline
from addnorm_lib.grading.cell_record import HIDDEN_OF, CellRecord
from addnorm_lib.grading.discover import Submission
from addnorm_lib.grading.execute import Execution
from addnorm_lib.grading.judge import Grade
from addnorm_lib.grading.settings import COURSE_ROOT, Settings


@contextlib.contextmanager
def observations_folder():
    """A fresh folder that the checks record into, as in a graded kernel."""
    with (
        tempfile.TemporaryDirectory(prefix="observations-") as folder,
        mock.patch.dict(os.environ, {record.OBSERVATIONS_ENV: folder}),
    ):
        yield Path(folder)


def cell_record(cell, code_index: int, status: str, report: str) -> CellRecord:
    """The record of a code cell this process ran (it has no clock: nothing times out)."""
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    tail_of = cell.get("metadata", {}).get("addnorm", {}).get(HIDDEN_OF)
    return CellRecord(
        code_index=code_index,
        id=cell.get("id"),
        grade_id=None if grade_id is None else str(grade_id),
        hidden_tests_of=None if tail_of is None else str(tail_of),
        status=status,
        timed_out=False,
        kernel_alive=True,
        report=report,
    )


def run_cells(nb: nbformat.NotebookNode) -> list[CellRecord]:
    """Execute the code cells of ``nb`` in order in one namespace; one record per cell."""
    namespace = {"__name__": "__main__"}
    records = []
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    for code_index, cell in enumerate(code_cells):
        status, report = "passed", ""
        try:
            # What a cell prints or warns goes to the kernel's streams in the grader: not judged.
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(cell.source, f"<code cell {code_index}>", "exec"), namespace)
        except Exception:
            status, report = "failed", traceback.format_exc()
        records.append(cell_record(cell, code_index, status, report))
    return records


@dataclass(frozen=True)
class InProcessExecutor:
    """The :class:`~addnorm_lib.grading.execute.Executor` of the suite's trusted mutants: the
    cells run in this process, their checks record into a fresh folder."""

    isolated: bool = False

    @contextlib.contextmanager
    def execute(self, graded) -> Iterator[Execution]:
        """Run ``graded`` here (:func:`run_cells`); its records and observations."""
        with observations_folder() as observations:
            yield Execution(run_cells(graded), False, observations)


@functools.cache
def load_assignment(name: str) -> assemble.Assignment:
    """The instructor's notebook of assignment ``name``, read once (assemble and judge copy it)."""
    return assemble.load_assignment(COURSE_ROOT / "solutions" / f"{name}.ipynb")


def grade_in_process(nb: nbformat.NotebookNode, assignment_name: str) -> Grade:
    """The grade of submission ``nb`` as assignment ``assignment_name``, by the grader's stages
    with the cells executed in this process."""
    assignment = load_assignment(assignment_name)
    raw = nbformat.writes(nb).encode()
    submission = Submission("in-process", Path(f"{assignment_name}.ipynb"), raw=raw)
    settings = Settings(assignment=assignment_name)
    return pipeline.grade_with(
        InProcessExecutor(), submission, {assignment_name: assignment}, settings
    )
