"""From a submission to the notebook that is graded.

The instructor's notebooks (``solutions/``) are read once into :class:`Assignment` objects: their
answer cells stubbed, their tests and hidden tests kept, with the points and the checks of every
test cell. A submission is read, matched with its assignment, and *assembled*: the graded notebook
is the instructor's, with only the student's answer cells put in. Nothing the student wrote outside
answer cells runs, and no metadata of theirs (points, ids, markers) has any say.
"""

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from addnorm_lib.authoring import release
from addnorm_lib.checks import JUDGES

NBVAL_MARKER = re.compile(r"^\s*#\s*NBVAL_\w+.*$", re.MULTILINE)


class SubmissionRejected(Exception):
    """A submission that cannot be graded: its status (``malformed``, ...) and the reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


# ----------------------------------------------------------------------------------------------
# Assignments: the instructor's notebooks


@dataclass(frozen=True)
class TestCell:
    """A graded test cell of an assignment: its points and the checks it calls."""

    grade_id: str
    index: int  # position in the notebook
    points: float
    hidden: bool  # has hidden tests
    checks: tuple[tuple[str, int], ...]  # (check function, seed) called by the cell


@dataclass
class Assignment:
    """An instructor's notebook, ready to grade submissions against."""

    name: str
    graded_base: nbformat.NotebookNode  # answers stubbed; tests and hidden tests kept
    answers: dict[str, str]  # grade_id -> cell id of each answer cell
    tests: list[TestCell]

    @property
    def max_total(self) -> float:
        """The points of a perfect submission."""
        return sum(test.points for test in self.tests)


def checks_called(source: str, where: str) -> tuple[tuple[str, int], ...]:
    """The ``checks.check_*(..., seed=N)`` calls of a test cell, in order."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "checks"):
            continue
        if name not in JUDGES:
            raise ValueError(f"{where}: checks.{name} has no judge")
        seeds = [k.value for k in node.keywords if k.arg == "seed"]
        seed = seeds[0].value if seeds and isinstance(seeds[0], ast.Constant) else 0
        calls.append((name, int(seed)))
    return tuple(calls)


def assignment_name(nb, fallback: str) -> str:
    """The name an instructor's notebook declares (``metadata.addnorm.assignment``), or fallback."""
    return str(nb.metadata.get("addnorm", {}).get("assignment", fallback))


def read_test_cell(cell, index: int, where: str) -> TestCell:
    """The :class:`TestCell` of a graded cell of the instructor's notebook."""
    meta = cell.metadata["nbgrader"]
    hidden = release.HIDDEN_BEGIN in cell.source
    checks = checks_called(cell.source, where)
    return TestCell(meta["grade_id"], index, float(meta["points"]), hidden, checks)


def load_assignment(path: Path) -> Assignment:
    """The assignment of one instructor's notebook."""
    solution = nbformat.read(path, as_version=4)
    base = release.stub_solutions(solution, path.name)
    answers, tests = {}, []
    for index, cell in enumerate(base.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            answers[meta["grade_id"]] = cell.get("id")
        if meta.get("grade"):
            tests.append(read_test_cell(cell, index, f"{path.name}, cell {index}"))
    return Assignment(assignment_name(solution, path.stem), base, answers, tests)


def load_assignments(source: Path) -> dict[str, Assignment]:
    """Every assignment of a folder of instructor's notebooks, by name."""
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no instructor notebooks in {source}")
    assignments = [load_assignment(path) for path in paths]
    return {assignment.name: assignment for assignment in assignments}


# ----------------------------------------------------------------------------------------------
# Submissions


def read_submission(raw: bytes):
    """The submitted notebook, validated; a file that is not one is rejected as ``malformed``."""
    try:
        student = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(student)
    except Exception as err:
        reason = f"not a valid notebook: {type(err).__name__}"
        raise SubmissionRejected("malformed", reason) from None
    return student


def identify(nb, path: Path, assignments: dict) -> str | None:
    """The submission's assignment: its metadata if known, else a name found in its file name."""
    declared = nb.metadata.get("addnorm")  # the student's file: may hold anything
    if isinstance(declared, dict) and declared.get("assignment") in assignments:
        return declared["assignment"]
    tokens = set(re.split(r"[^a-z0-9]+", path.stem.lower()))
    found = [name for name in assignments if name.lower() in tokens]
    return found[0] if len(found) == 1 else None


def assignment_of(nb, path: Path, assignments: dict) -> Assignment:
    """The submission's assignment; rejected as ``unknown_assignment`` if none matches."""
    name = identify(nb, path, assignments)
    if name is None:
        reason = f"no assignment matches its metadata or file name ({path.name})"
        raise SubmissionRejected("unknown_assignment", reason)
    return assignments[name]


# ----------------------------------------------------------------------------------------------
# The graded notebook


def answer_source(student, grade_id: str, cell_id: str | None) -> str | None:
    """The source of the student's answer cell: matched by grade_id, else by cell id."""
    code_cells = [c for c in student.cells if c.get("cell_type") == "code"]
    for cell in code_cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and meta.get("grade_id") == grade_id:
            return str(cell.get("source", ""))
    for cell in code_cells:
        if cell_id and cell.get("id") == cell_id:
            return str(cell.get("source", ""))
    return None


def assemble(assignment: Assignment, student) -> tuple[nbformat.NotebookNode, list[str]]:
    """The graded notebook, and notes on what could not be taken from the submission."""
    graded = nbformat.from_dict(json.loads(json.dumps(assignment.graded_base)))
    notes = []
    for cell in graded.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not (meta.get("solution") and cell.cell_type == "code"):
            continue
        source = answer_source(student, meta["grade_id"], assignment.answers[meta["grade_id"]])
        if source is None:
            notes.append(f"answer cell {meta['grade_id']!r} is missing: graded as unanswered")
            continue
        cell.source = NBVAL_MARKER.sub("", source)  # nbval skip/raises markers have no say here
    return graded, notes
