"""Grading a notebook in the test process: the grader's own assembling and judging, with the cells
executed here instead of in a jailed kernel under nbval.

The mutation tests grade dozens of wrong answers. Through the real grader each costs a kernel
(about two seconds of CPU); here it costs the checks alone. Only the executor differs:
:func:`assemble.assemble` builds the graded notebook, the cells run in order in one namespace as
``nbval --nbval-lax`` runs them (a failing cell fails, the next still runs), the checks record
their observations in a folder, and :func:`judge.judge` decides the points from those records.
tests/exercises/test_mutants.py grades one mutant per assignment both ways and requires the same
result.
Nothing here is safe against hostile code: it is for the course's own mutants only.
"""

import contextlib
import functools
import io
import os
import tempfile
import traceback
import warnings
from pathlib import Path
from unittest import mock

import nbformat

from addnorm_lib.checks import _record as record
from addnorm_lib.grading import assemble, judge
from addnorm_lib.grading.settings import COURSE_ROOT


@contextlib.contextmanager
def observations_folder():
    """A fresh folder that the checks record into, as in a graded kernel."""
    with (
        tempfile.TemporaryDirectory(prefix="observations-") as folder,
        mock.patch.dict(os.environ, {record.OBSERVATIONS_ENV: folder}),
    ):
        yield Path(folder)


def run_cells(nb: nbformat.NotebookNode) -> list[dict]:
    """Execute the code cells of ``nb`` in order in one namespace; one record per cell.

    Records have the fields of the grader's nbval plugin (``addnorm_lib.grading._nbval_grades``).
    """
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
        records.append(
            {
                "code_index": code_index,
                "id": cell.get("id"),
                "status": status,
                "timed_out": False,
                "kernel_alive": True,
                "report": report,
            }
        )
    return records


@functools.cache
def load_assignment(name: str) -> assemble.Assignment:
    """The instructor's notebook of assignment ``name``, read once (assemble and judge copy it)."""
    return assemble.load_assignment(COURSE_ROOT / "solutions" / f"{name}.ipynb")


def grade_in_process(nb: nbformat.NotebookNode, assignment_name: str) -> judge.Grade:
    """The grade of submission ``nb``, judged as the grader judges, executed in this process."""
    assignment = load_assignment(assignment_name)
    graded, notes = assemble.assemble(assignment, nb)
    with observations_folder() as observations:
        records = run_cells(graded)
        cells = judge.judge(assignment, records, observations, cell_timeout=0.0)
    status, reason = judge.notebook_status(records, False, cells)
    return judge.Grade(
        "in-process", assignment.name, status, reason, cells, assignment.max_total, notes
    )
