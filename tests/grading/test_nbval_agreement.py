"""nbval and the grader agree, cell by cell.

The exercises are nbval tests: ``pytest --nbval-lax`` on a graded notebook passes or fails each
code cell. The grader reaches its kernels through its executor (``execute.NbvalExecutor``: nbval
with the grader's plugin, in the sandbox, on warm kernels), whose cell records the judge reads.
On every solution, on one mutant of each assignment (wrong, though every cell runs: its checks
record, and the judge finds the mistake), on an untouched exercise (its stubs raise, so cells
fail in the kernel) and on an answer that breaks the test cells themselves, each cell the grader
ran has the outcome plain nbval gives it; the only cells it did not run are hidden tails of test
cells that failed (``_nbval_grades``: they could earn nothing).
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from addnorm_lib.grading import assemble, execute, judge, sandbox
from addnorm_lib.grading.settings import Settings
from tests.conftest import EXERCISES, SOLUTIONS
from tests.exercises.test_mutants import THROUGH_THE_GRADER, mutated
from tests.inprocess import load_assignment

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nbval-agreement")]


def cases() -> dict[str, tuple[str, nbformat.NotebookNode]]:
    """name -> (assignment, submission): every solution, the first mutant of each assignment,
    an untouched exercise, and an answer that breaks the checks."""
    found = {}
    for solution in SOLUTIONS:
        found[f"{solution.stem}-solution"] = (solution.stem, nbformat.read(solution, as_version=4))
    stubs = EXERCISES[0]  # one untouched exercise: its stubs fail cells in the kernel
    found[f"{stubs.stem}-stubs"] = (stubs.stem, nbformat.read(stubs, as_version=4))
    for mutant in THROUGH_THE_GRADER:
        found[f"{mutant.assignment}-mutant"] = (mutant.assignment, mutated(mutant))
    # an answer that breaks the test cells themselves: they fail in the kernel, and the grader
    # does not run their hidden tails
    breaks = nbformat.read(SOLUTIONS[0], as_version=4)
    answer = next(c for c in breaks.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source += "\nchecks = None\n"
    found[f"{SOLUTIONS[0].stem}-breaks-checks"] = (SOLUTIONS[0].stem, breaks)
    return found


@pytest.fixture(scope="module")
def graded_notebooks(tmp_path_factory) -> dict[str, nbformat.NotebookNode]:
    """name -> the graded notebook the grader builds for that submission, also written out."""
    folder = tmp_path_factory.mktemp("graded")
    notebooks = {}
    for name, (assignment, submission) in cases().items():
        notebooks[name], _ = assemble.assemble(load_assignment(assignment), submission)
        nbformat.write(notebooks[name], folder / f"{name}.ipynb")
    return notebooks


def nbval_outcomes(folder: Path, observations: Path) -> dict[str, list[str]]:
    """name -> each code cell's outcome under plain ``pytest --nbval-lax`` (passed, failed,
    skipped), in order, from its JUnit report."""
    report = folder / "nbval.xml"
    env = {**os.environ, "ADDNORM_OBSERVATIONS": str(observations), "OMP_NUM_THREADS": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_")}
    command = [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q"]
    command += ["-p", "no:xdist", f"--junitxml={report}", f"--rootdir={folder}"]
    command += sorted(map(str, folder.glob("*.ipynb")))
    subprocess.run(command, cwd=folder, env=env, capture_output=True, check=False, timeout=600)
    outcomes: dict[str, dict[int, str]] = {}
    for case in ElementTree.parse(report).iter("testcase"):  # classname: the notebook's file
        number = int(case.get("name").removeprefix("Cell "))  # nbval 0.11: code cells from 0
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "passed"
        outcome = "skipped" if "skipped" in kinds else outcome
        outcomes.setdefault(Path(case.get("classname")).stem, {})[number] = outcome
    return {name: [found[n] for n in sorted(found)] for name, found in outcomes.items()}


@pytest.fixture(scope="module")
def outcomes(graded_notebooks, tmp_path_factory):
    """(nbval's outcomes, the grader's records) of every graded notebook, run side by side."""
    folder = tmp_path_factory.mktemp("nbval")
    for name, notebook in graded_notebooks.items():
        nbformat.write(notebook, folder / f"{name}.ipynb")
    observations = tmp_path_factory.mktemp("observations")
    settings = Settings(jobs=2, no_sandbox=sandbox.sandbox_problem(Settings()) is not None)
    with ThreadPoolExecutor(max_workers=3) as pool:
        plain = pool.submit(nbval_outcomes, folder, observations)
        execute.start_pytest_server()
        judge.start_judge()
        with sandbox.open_sandbox(settings, warm=True) as box:
            executor = execute.NbvalExecutor(box, settings)

            def records(notebook):
                with executor.execute(notebook) as run:
                    return run.records

            ours = dict(
                zip(graded_notebooks, pool.map(records, graded_notebooks.values()), strict=True)
            )
        return plain.result(), ours


@pytest.mark.parametrize("name", sorted(cases()))
def test_each_cell_the_grader_runs_has_nbval_s_outcome(outcomes, name):
    plain, ours = outcomes
    records = ours[name]
    assert records is not None and len(records) == len(plain[name]), (records, plain[name])
    failed_tests = {r.grade_id for r in records if r.grade_id and r.status == "failed"}
    for found, expected in zip(records, plain[name], strict=True):
        if found.status == "skipped" and expected != "skipped":  # the grader's own skip:
            assert found.hidden_tests_of in failed_tests, found  # a failed test cell's tail
            continue
        assert (found.code_index, found.status) == (found.code_index, expected), found.report
    if name.endswith("-solution"):
        assert "failed" not in plain[name] and "passed" in plain[name]


def test_the_comparison_saw_failing_cells_not_only_passing_ones(outcomes):
    """The untouched exercises and the answer that breaks the checks fail cells in the kernel,
    where both must agree; a solution or a mutant fails none there (its mistakes are found by
    the judge). The grader skipped the hidden tails of the broken test cells."""
    plain, ours = outcomes
    failing = sorted(name for name in plain if "failed" in plain[name])
    expected = [name for name in plain if name.endswith(("-stubs", "-breaks-checks"))]
    assert failing == sorted(expected), failing
    for name in failing:
        assert any(found.status == "failed" for found in ours[name])
    (broken,) = [name for name in plain if name.endswith("-breaks-checks")]
    skipped = [
        found
        for found in ours[broken]
        if found.status == "skipped" and plain[broken][found.code_index] != "skipped"
    ]
    assert skipped and all(found.hidden_tests_of for found in skipped)
    assert "failed" in [plain[broken][found.code_index] for found in skipped]  # nbval ran them


def test_every_assignment_is_compared_on_its_solution_and_a_mutant():
    names = sorted(cases())
    assignments = sorted(path.stem for path in SOLUTIONS)
    expected = [f"{a}-{kind}" for a in assignments for kind in ("solution", "mutant")]
    expected += [f"{assignments[0]}-stubs", f"{assignments[0]}-breaks-checks"]
    assert names == sorted(expected)
