"""Solution notebooks pass under nbval; every graded cell of every released exercise fails."""

import subprocess
import sys

import nbformat
import pytest
from conftest import EXERCISES, ROOT, SOLUTIONS

from addnorm_lib import autograde, release

pytestmark = pytest.mark.slow


def test_every_solution_has_an_exercise():
    assert SOLUTIONS, "no solution notebooks found"
    assert [p.name for p in SOLUTIONS] == [p.name for p in EXERCISES]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_passes_every_graded_cell(path):
    result = autograde.run_notebook(path)
    assert result.cells, f"{path.name} has no graded cells"
    failures = [
        f"{c.grade_id}: {c.status} {c.message}" for c in result.cells if c.status != "passed"
    ]
    assert not failures, "\n".join(failures)
    assert not result.other_failures, result.other_failures
    assert result.total == result.max_total > 0


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_released_stubs_fail_every_graded_cell(path):
    result = autograde.run_notebook(path)
    passing = [cell.grade_id for cell in result.cells if cell.status != "failed"]
    assert not passing, f"graded cells that do not fail on the stubs: {passing}"
    assert result.total == 0
    assert all("not implemented yet" in cell.message for cell in result.cells)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or
             c.execution_count is not None)]  # fmt: skip
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty}"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_exercise_reveals_no_solution_or_hidden_test(path):
    text = path.read_text(encoding="utf-8")
    for marker in (release.SOLUTION_BEGIN, release.HIDDEN_BEGIN, release.HIDDEN_END):
        assert marker not in text


def run_cli(*arguments):
    command = [sys.executable, "-m", "addnorm_lib.autograde", *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)


def test_cli_prints_a_points_table_for_a_learner():
    completed = run_cli(EXERCISES[0])
    assert completed.returncode == 0, completed.stderr
    assert "total" in completed.stdout and "0/" in completed.stdout
    assert "not implemented yet" in completed.stdout


@pytest.mark.parametrize(
    ("content", "complaint"),
    [("{ this is not json", "not a valid notebook"), ('{"cells": 3}', "not a valid notebook")],
)
def test_cli_rejects_a_malformed_notebook_clearly(tmp_path, content, complaint):
    path = tmp_path / "broken.ipynb"
    path.write_text(content)
    completed = run_cli(path)
    assert completed.returncode == 2
    assert complaint in completed.stderr and "Traceback" not in completed.stderr


def test_cli_reports_a_missing_file(tmp_path):
    completed = run_cli(tmp_path / "nowhere.ipynb")
    assert completed.returncode == 2 and "no such file" in completed.stderr
