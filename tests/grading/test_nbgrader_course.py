"""The exercises in a real nbgrader course: nbgrader 0.9.6, in an environment of its own.

The course's ``solutions/`` are nbgrader's source. Every assignment goes through
``generate_assignment``, ``autograde`` and ``export``. nbgrader's release must be our exercises
(cell for cell, locks included). One student hands in our ``exercises/`` notebooks with the answers
filled in and must get every point; another hands in nbgrader's release of one assignment untouched
(the control: the stubs score nothing); ``validate`` must agree.

nbgrader runs in ``.venv-nbgrader`` (``make nbgrader-env``, pinned in requirements-nbgrader.txt);
its kernels are the course's Python, through a ``python3`` kernelspec of this test's own.
"""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import EXERCISES, ROOT, SOLUTIONS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nbgrader-course")]

NBGRADER_BIN = ROOT / ".venv-nbgrader" / "bin"
ASSIGNMENTS = [path.stem for path in SOLUTIONS]
STUDENTS = {"filled": "our exercises, answers filled in", "untouched": "the release, as it came"}
CONTROL = "layernorm"  # the one assignment the untouched release is handed in for
# nbgrader adds these to a released cell's metadata; everything else must be as we release it
NBGRADER_ADDS = ("checksum", "cell_type")

CONFIG = """\
c = get_config()
c.CourseDirectory.course_id = "addnorm"
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_assignments = [dict(name=name) for name in {assignments!r}]
c.CourseDirectory.db_students = [dict(id=name) for name in {students!r}]
"""


def nbgrader(course: SimpleNamespace, *args: str) -> subprocess.CompletedProcess:
    command = [str(NBGRADER_BIN / "nbgrader"), *args]
    completed = subprocess.run(
        command, cwd=course.root, env=course.env, capture_output=True, text=True, check=False
    )
    return completed


def run_ok(course: SimpleNamespace, *args: str) -> subprocess.CompletedProcess:
    completed = nbgrader(course, *args)
    assert completed.returncode == 0, f"nbgrader {' '.join(args)}:\n{completed.stderr[-3000:]}"
    return completed


def text(cell: dict) -> str:
    source = cell["source"]
    return ("".join(source) if isinstance(source, list) else source).rstrip("\n")


def filled_in(exercise: Path, solution: Path) -> dict:
    """Our exercise notebook with each answer cell replaced by the solution's."""
    notebook = json.loads(exercise.read_text())
    answers = {
        cell["metadata"]["nbgrader"]["grade_id"]: cell["source"]
        for cell in json.loads(solution.read_text())["cells"]
        if cell["metadata"].get("nbgrader", {}).get("solution")
    }
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            cell["source"] = answers.pop(cell["metadata"]["nbgrader"]["grade_id"])
    assert not answers, f"answer cells missing from {exercise.name}: {sorted(answers)}"
    return notebook


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> SimpleNamespace:
    """A graded nbgrader course: its folder, its environment and grades.csv's rows."""
    if not (NBGRADER_BIN / "nbgrader").exists():
        made = subprocess.run(
            ["make", "-s", "nbgrader-env"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    root = tmp_path_factory.mktemp("nbgrader-course")
    kernel = root / "share" / "jupyter" / "kernels" / "python3"
    kernel.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "the course's Python", "language": "python"}
    (kernel / "kernel.json").write_text(json.dumps(spec))
    (root / "nbgrader_config.py").write_text(
        CONFIG.format(root=str(root), assignments=ASSIGNMENTS, students=list(STUDENTS))
    )
    env = {
        **os.environ,
        "PATH": f"{NBGRADER_BIN}{os.pathsep}{os.environ['PATH']}",  # nbgrader runs `alembic`
        "JUPYTER_PATH": str(root / "share" / "jupyter"),
    }
    env.pop("VIRTUAL_ENV", None)
    course = SimpleNamespace(root=root, env=env)
    for solution in SOLUTIONS:
        (root / "source" / solution.stem).mkdir(parents=True)
        (root / "source" / solution.stem / solution.name).write_bytes(solution.read_bytes())
        run_ok(course, "generate_assignment", solution.stem, "--force")
    for exercise, solution in zip(EXERCISES, SOLUTIONS, strict=True):
        released = root / "release" / solution.stem / solution.name
        for student in STUDENTS:
            if student == "untouched" and solution.stem != CONTROL:
                continue
            folder = root / "submitted" / student / solution.stem
            folder.mkdir(parents=True)
            if student == "filled":
                notebook = json.dumps(filled_in(exercise, solution))
                (folder / solution.name).write_text(notebook)
            else:
                (folder / solution.name).write_bytes(released.read_bytes())
    for assignment in ASSIGNMENTS:
        run_ok(course, "autograde", assignment, "--force")
    run_ok(course, "export")
    with open(root / "grades.csv", newline="") as file:
        course.grades = list(csv.DictReader(file))
    return course


def test_exercises_and_solutions_pair_up():
    assert [path.name for path in EXERCISES] == [path.name for path in SOLUTIONS]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_nbgraders_release_is_our_exercise(course, assignment):
    release = course.root / "release" / assignment / f"{assignment}.ipynb"
    released = json.loads(release.read_text())
    ours = json.loads((ROOT / "exercises" / f"{assignment}.ipynb").read_text())
    assert len(released["cells"]) == len(ours["cells"])
    for number, (theirs, mine) in enumerate(zip(released["cells"], ours["cells"], strict=True)):
        where = f"{assignment}, cell {number}"
        assert theirs["cell_type"] == mine["cell_type"], where
        assert text(theirs) == text(mine), where
        metadata = json.loads(json.dumps(theirs["metadata"]))
        for key in NBGRADER_ADDS:
            metadata.get("nbgrader", {}).pop(key, None)
        assert metadata == mine["metadata"], where


def grades_of(course, assignment: str) -> dict:
    return {row["student_id"]: row for row in course.grades if row["assignment"] == assignment}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_filled_exercises_score_every_point(course, assignment):
    filled = grades_of(course, assignment)["filled"]
    assert float(filled["max_score"]) > 0
    assert float(filled["score"]) == float(filled["max_score"]), filled


def test_the_untouched_release_scores_nothing(course):
    untouched = grades_of(course, CONTROL)["untouched"]
    assert float(untouched["max_score"]) > 0
    assert float(untouched["score"]) == 0, untouched


def test_validate_passes_a_filled_notebook_and_fails_the_release(course):
    assignment = CONTROL
    filled = course.root / "submitted" / "filled" / assignment / f"{assignment}.ipynb"
    passed = nbgrader(course, "validate", str(filled))
    assert "Success! Your notebook passes all the tests." in passed.stdout + passed.stderr
    released = course.root / "release" / assignment / f"{assignment}.ipynb"
    failed = nbgrader(course, "validate", str(released))
    output = failed.stdout + failed.stderr
    assert "Success!" not in output
    assert "is not implemented yet" in output
