"""From a submission to the notebook that is graded.

The instructor's notebooks (``solutions/``) are read once into :class:`Assignment` objects: their
answer cells stubbed, their tests and hidden tests kept, with the points and the checks of every
test cell. A submission is read, matched with its assignment, and *assembled*: the graded notebook
is the instructor's, with only the student's answer cells put in (and any cell of their own that
defines an answer's function again before its test, as a notebook run from the top would use it).
Nothing else the student wrote outside answer cells runs, and no metadata of theirs (points, ids,
markers) has any say.

**The hidden tail.** A test cell's hidden block (``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN
TESTS``) is taken out of its cell and put, as a code cell of its own, at the *end* of the graded
notebook, after every instructor's and answer cell, in the order of the test cells; its metadata
(``addnorm.hidden_tests_of``) names the test cell it belongs to. So everything the grader keeps
from the kernel about the visible cells (nbval's reports, the checks' records, sealed by the nbval
plugin before the first tail cell runs: ``_nbval_grades``) was produced before any hidden source,
seed or input entered the kernel, and nothing the kernel says about a tail cell reaches a message
(``judge``). Hidden tests therefore judge the notebook's *final* definitions: a function that a
later answer cell defines again is tested in its last version. A kernel that dies before the
tail has its hidden tests run by a second run that stops before the cell that killed it
(``execute.recovery_notebook``).

A hidden block may hold only check calls, ``checks.<name>(<identifier>, seed=<int>)``
(:func:`hidden_blocks_problem`): they are judged outside the kernel, from their records, where
an input transformer or a patched ``assert`` of the notebook has no say.
"""

import ast
import errno
import hashlib
import inspect
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat

import addnorm_lib.checks as checks_module
from addnorm_lib.authoring import release
from addnorm_lib.checks import JUDGES
from addnorm_lib.checks import _record as record
from addnorm_lib.grading.cell_record import HIDDEN_OF, SEAL

NBVAL_MARKER = re.compile(r"^\s*#\s*NBVAL_\w+.*$", re.MULTILINE)
MIB = 2**20
LINK = "a symbolic link: the grader does not follow links"
REASON_LIMIT = 300  # characters of nbformat's own message kept in a reason
# What to do about a file that is not a valid notebook, said after what is wrong with it.
RESAVE = (
    "To fix: open your notebook in JupyterLab, save it (File > Save Notebook) and submit that "
    ".ipynb file; if it does not open, download the exercise again and copy your answers into it"
)


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
    checks: tuple[tuple[str, int], ...]  # (check function, seed) called by its visible part
    hidden_index: int | None = None  # position of its hidden tail cell in the graded notebook
    hidden_checks: tuple[tuple[str, int], ...] = ()  # (check function, seed) of its hidden tests


@dataclass
class Assignment:
    """An instructor's notebook, ready to grade submissions against."""

    name: str
    graded_base: nbformat.NotebookNode  # answers stubbed; tests kept, hidden tests at the end
    answers: dict[str, str]  # grade_id -> cell id of each answer cell
    tests: list[TestCell]
    source_sha256: str = ""  # of the instructor's notebook file: a grade kept by --resume needs it

    @property
    def max_total(self) -> float:
        """The points of a perfect submission."""
        return sum(test.points for test in self.tests)


STRICT_CHECKS = (
    "a graded test cell is judged from the records of its check calls, written "
    "checks.<name>(<function>) or checks.<name>(<function>, seed=<int>), which the grader reads "
    "when it loads the assignment; write each check that way"
)


class CheckCallRefused(ValueError):
    """A call of a check that the grader cannot read strictly: what is wrong and its line."""

    def __init__(self, problem: str, line: int):
        super().__init__(problem)
        self.problem, self.line = problem, line


def default_seed(name: str) -> int:
    """The seed a check uses when a call gives none: its signature's default (the course's: 0)."""
    seed = inspect.signature(getattr(checks_module, name)).parameters["seed"].default
    if type(seed) is not int:
        raise ValueError(f"checks.{name} has no whole-number default seed: give seed=<int>")
    return seed


def read_check_call(call: ast.Call, seed_required: bool) -> tuple[str, int]:
    """(check, seed) of a call ``checks.<name>(<function>[, seed=<int>])``; raises
    :class:`CheckCallRefused` for any other shape (another callee, a check with no judge, more or
    other arguments, a seed that is not a whole number written out, no seed where one is
    required)."""
    func, line = call.func, call.lineno
    if not (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "checks"
    ):
        raise CheckCallRefused("a call of something other than checks.<name>", line)
    name = func.attr
    if name not in JUDGES:
        raise CheckCallRefused(f"checks.{name} has no judge", line)
    if len(call.args) != 1 or not isinstance(call.args[0], ast.Name):
        raise CheckCallRefused(f"checks.{name} must get one function or class, by its name", line)
    seeds = [k for k in call.keywords if k.arg == "seed"]
    if len(seeds) != len(call.keywords) or len(seeds) > 1 or (seed_required and not seeds):
        needed = "seed=<int>" if seed_required else "at most seed=<int>"
        raise CheckCallRefused(f"checks.{name} must get {needed} and no other keyword", line)
    if not seeds:
        return name, default_seed(name)
    seed = seeds[0].value
    if not (isinstance(seed, ast.Constant) and type(seed.value) is int):
        raise CheckCallRefused(f"checks.{name}'s seed must be a whole number written out", line)
    return name, seed.value


def loose_check_problem(node: ast.AST) -> str | None:
    """What makes ``node`` a use of a check that is not a strict call (a check called or named
    bare, ``checks`` or one of its checks taken as a value); None for anything else."""
    if isinstance(node, ast.Name) and node.id in JUDGES:
        return f"{node.id} used bare: the grader reads only checks.{node.id}(...)"
    if isinstance(node, ast.Name) and node.id == "checks":
        return "checks used other than as checks.<name>(...)"
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = node.value.id
        if owner == "checks":
            return f"checks.{node.attr} used other than as a call"
        if node.attr in JUDGES:
            return f"{owner}.{node.attr}: the grader reads only checks.{node.attr}(...)"
    if isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in JUDGES:
        return f"{node.name} imported: the grader reads only checks.<name>(...)"
    return None


def checks_called(
    source: str, where: str, seed_required: bool = False
) -> tuple[tuple[str, int], ...]:
    """The ``checks.<name>(<function>[, seed=<int>])`` calls of a test cell's source, in order,
    as (check, seed); a call without a seed uses the check's default (:func:`default_seed`).

    Strict (:data:`STRICT_CHECKS`): raises ValueError, in one line naming ``where`` and the line,
    for a check that cannot be read exactly: a bare ``check_x(...)``, an import of one,
    ``checks`` or a check taken as a value, a computed or positional seed, other arguments, or a
    check with no judge. A cell whose checks the grader read loosely would earn its points from
    whatever the kernel says.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"{where}, line {err.lineno}: does not parse ({err.msg})") from None
    calls, callees = [], set()
    try:
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "checks"
            ):
                call = read_check_call(node, seed_required)
                calls.append((node.lineno, node.col_offset, call))
                callees.update((id(func), id(func.value)))
        for node in ast.walk(tree):
            problem = None if id(node) in callees else loose_check_problem(node)
            if problem:
                raise CheckCallRefused(problem, getattr(node, "lineno", 1))
    except CheckCallRefused as refused:
        raise ValueError(
            f"{where}, line {refused.line}: {refused.problem}; {STRICT_CHECKS}"
        ) from None
    return tuple(call for _, _, call in sorted(calls))


def assignment_name(nb, fallback: str) -> str:
    """The name an instructor's notebook declares (``metadata.addnorm.assignment``), or fallback."""
    return str(nb.metadata.get("addnorm", {}).get("assignment", fallback))


def hidden_blocks(source: str, where: str) -> list[tuple[int, str]]:
    """The hidden blocks of a test cell: (line number of the first line inside the markers,
    counted from 1 in the cell, and the block's text without its markers)."""
    lines = source.split("\n")
    regions = release._marker_regions(lines, release.HIDDEN_BEGIN, release.HIDDEN_END, where)
    return [(start + 2, "\n".join(lines[start + 1 : stop])) for start, stop in regions]


def read_test_cell(cell, index: int, where: str) -> TestCell:
    """The :class:`TestCell` of a graded cell of the instructor's notebook (its hidden tests
    still in it: :func:`load_assignment` moves them to the tail)."""
    meta = cell.metadata["nbgrader"]
    hidden = release.HIDDEN_BEGIN in cell.source
    visible = release.strip_hidden_tests(cell.source, where) if hidden else cell.source
    checks = checks_called(visible, where)
    if not checks:
        raise ValueError(f"{where}: calls no check; {STRICT_CHECKS}")
    blocks = "\n".join(block for _, block in hidden_blocks(cell.source, where))
    hidden_checks = checks_called(blocks, where, seed_required=True) if hidden else ()
    return TestCell(
        meta["grade_id"], index, float(meta["points"]), hidden, checks, None, hidden_checks
    )


def hidden_tail(base, tests: list[TestCell], name: str) -> list[TestCell]:
    """Move each test cell's hidden blocks out of ``base`` into a tail cell of its own at the
    end (in place); the tests, with the positions of their tail cells."""
    seal = sorted(
        {record.observation_name(check, seed) for test in tests for check, seed in test.checks}
    )
    with_ids = all("id" in cell for cell in base.cells)
    placed = []
    for test in tests:
        if not test.hidden:
            placed.append(test)
            continue
        cell, where = base.cells[test.index], f"{name}, cell {test.index}"
        blocks = [block for _, block in hidden_blocks(cell.source, where)]
        cell.source = release.strip_hidden_tests(cell.source, where)
        tail = nbformat.v4.new_code_cell(
            "\n".join(blocks), metadata={"addnorm": {HIDDEN_OF: test.grade_id, SEAL: seal}}
        )
        if with_ids:
            tail["id"] = f"addnorm-hidden-{test.index}"
        else:
            tail.pop("id", None)
        placed.append(replace(test, hidden_index=len(base.cells)))
        base.cells.append(tail)
    return placed


def load_assignment(path: Path) -> Assignment:
    """The assignment of one instructor's notebook, its hidden tests moved to the tail.

    Raises ValueError (one line: :func:`hidden_blocks_problem`) when a hidden block holds
    anything but check calls: no point may depend on code that only the kernel runs.
    """
    raw = path.read_bytes()
    solution = nbformat.reads(raw.decode("utf-8"), as_version=4)
    problem = hidden_blocks_problem(solution, path.name)
    if problem:
        raise ValueError(problem)
    base = release.stub_solutions(solution, path.name)
    answers, tests = {}, []
    for index, cell in enumerate(base.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            answers[meta["grade_id"]] = cell.get("id")
        if meta.get("grade"):
            where = f"{path.name}, test cell {meta.get('grade_id', index)!r}"
            tests.append(read_test_cell(cell, index, where))
    tests = hidden_tail(base, tests, path.name)
    name = assignment_name(solution, path.stem)
    return Assignment(name, base, answers, tests, hashlib.sha256(raw).hexdigest())


HIDDEN_ONLY_CHECKS = (
    "hidden tests may only call checks, as checks.<name>(<function>, seed=<int>), because they "
    "are judged outside the kernel; make this line a check or move it to the visible part"
)


STATEMENTS = {
    "Assert": "an assert",
    "Assign": "an assignment",
    "AugAssign": "an assignment",
    "AnnAssign": "an assignment",
    "Import": "an import",
    "ImportFrom": "an import",
    "For": "a loop",
    "While": "a loop",
    "If": "an if statement",
    "FunctionDef": "a function definition",
}


def hidden_call_problem(node: ast.stmt) -> str | None:
    """What keeps a statement of a hidden block from being a check call with a seed written out
    (:func:`read_check_call`); None if it is one."""
    call = node.value if isinstance(node, ast.Expr) else None
    if not isinstance(call, ast.Call):
        kind = type(node).__name__
        return f"{STATEMENTS.get(kind, f'a statement ({kind})')}, not a check call"
    try:
        read_check_call(call, seed_required=True)
    except CheckCallRefused as refused:
        return refused.problem
    return None


def hidden_blocks_problem(nb, name: str) -> str | None:
    """What is wrong with the hidden blocks of an instructor's notebook, in one line naming the
    notebook, the cell's grade_id and the line; None if every hidden line is a check call.

    Only check calls are allowed (:data:`HIDDEN_ONLY_CHECKS`): an ``assert``, an assignment or an
    import in a hidden block runs in the kernel alone, where the notebook can rewrite it.
    """
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or release.HIDDEN_BEGIN not in cell.source:
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index}")
        where = f"{name}, test cell {grade_id!r}"
        try:
            blocks = hidden_blocks(cell.source, where)
        except release.ReleaseError as err:
            return str(err)
        for first, block in blocks:
            try:
                tree = ast.parse(block)
            except SyntaxError as err:
                line = first + (err.lineno or 1) - 1
                return f"{where}, line {line}: does not parse ({err.msg}); {HIDDEN_ONLY_CHECKS}"
            for node in tree.body:
                problem = hidden_call_problem(node)
                if problem:
                    line = first + node.lineno - 1
                    return f"{where}, line {line}: {problem}; {HIDDEN_ONLY_CHECKS}"
    return None


def load_assignments(source: Path) -> dict[str, Assignment]:
    """Every assignment of a folder of instructor's notebooks, by name."""
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no instructor notebooks in {source}")
    assignments = [load_assignment(path) for path in paths]
    return {assignment.name: assignment for assignment in assignments}


# ----------------------------------------------------------------------------------------------
# Submissions


def read_file(path: Path, limit_mb: int) -> bytes:
    """The bytes of a submitted file, read without following a link.

    A symbolic link (wherever it points), anything but a regular file (a folder, a FIFO) and a
    file over ``limit_mb`` MiB are rejected as ``malformed`` without being read.
    """
    if path.is_symlink():
        raise SubmissionRejected("malformed", LINK)
    try:  # no link even if one took the file's place since; a FIFO does not block the open
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise SubmissionRejected("malformed", LINK) from None
        raise
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode):
        os.close(descriptor)
        raise SubmissionRejected("malformed", "not a regular file")
    limit = limit_mb * MIB
    with os.fdopen(descriptor, "rb") as file:
        raw = file.read(limit + 1) if found.st_size <= limit else b""
    size = max(found.st_size, len(raw))
    if size > limit:
        reason = f"the file is {size / MIB:.1f} MiB, over the limit of {limit_mb} MiB"
        raise SubmissionRejected("malformed", reason + " (--notebook-mb): not read")
    return raw


def kind(value) -> str:
    """What a JSON value is, in words: ``a list``, ``a number``, ``null``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    names = {str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def expect(value, expected: type, where: str) -> None:
    """Reject the submission unless ``value`` (found at ``where``) is of the ``expected`` type."""
    if not isinstance(value, expected):
        wanted = {dict: "an object", list: "a list", str: "a string"}[expected]
        raise not_valid(f"{where} is {kind(value)}, not {wanted}")


def not_valid(problem: str) -> SubmissionRejected:
    """The rejection of a file that is not a valid notebook: what is wrong, then what to do."""
    return SubmissionRejected("malformed", f"not a valid notebook: {problem}. {RESAVE}")


def check_source(source, where: str) -> None:
    """A cell's source is a string or a list of strings, of valid Unicode text."""
    if isinstance(source, list):
        strange = [part for part in source if not isinstance(part, str)]
        if strange:
            holding = f"a list holding {kind(strange[0])}"
            raise not_valid(f"{where} is {holding}, not a string or a list of strings")
        source = "".join(source)
    elif not isinstance(source, str):
        raise not_valid(f"{where} is {kind(source)}, not a string or a list of strings")
    try:
        source.encode("utf-8")  # a JSON escape such as "\udcff" decodes to a lone surrogate
    except UnicodeEncodeError:
        raise not_valid(f"{where} is not valid Unicode text") from None


def check_cell(cell, where: str) -> None:
    """The fields of a submitted cell that the grader reads have the types they should."""
    expect(cell, dict, where)
    for key in ("cell_type", "id"):
        if key in cell:
            expect(cell[key], str, f"{where}.{key}")
    if "source" in cell:
        check_source(cell["source"], f"{where}.source")
    metadata = cell.get("metadata", {})
    expect(metadata, dict, f"{where}.metadata")
    nbgrader = metadata.get("nbgrader", {})
    expect(nbgrader, dict, f"{where}.metadata.nbgrader")
    if "grade_id" in nbgrader:  # its other fields (points, flags) are never read: any type will do
        expect(nbgrader["grade_id"], str, f"{where}.metadata.nbgrader.grade_id")


def check_fields(data) -> None:
    """Every field of a submitted notebook that the grader reads has the type it should.

    The student's file may hold anything: a list where an object belongs makes the submission
    ``malformed``, with the field named, rather than an error deep in the grader. Fields that
    are missing are left to nbformat's validation.
    """
    expect(data, dict, "the file")
    metadata = data.get("metadata", {})
    expect(metadata, dict, "metadata")
    declared = metadata.get("addnorm", {})
    expect(declared, dict, "metadata.addnorm")
    if "assignment" in declared:
        expect(declared["assignment"], str, "metadata.addnorm.assignment")
    cells = data.get("cells", [])
    expect(cells, list, "cells")
    for index, cell in enumerate(cells):
        check_cell(cell, f"cells[{index}]")


def validation_problem(err: Exception) -> str:
    """What nbformat found wrong with a notebook, in one line, with where when it says so."""
    message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
    where = "".join(
        f"[{key}]" if isinstance(key, int) else f".{key}"
        for key in getattr(err, "absolute_path", ())
    ).lstrip(".")
    problem = (f"{where}: " if where else "") + str(message).split("\n")[0]
    return problem[:REASON_LIMIT]


def json_problem(text: str, err: ValueError) -> str:
    """What is wrong with a file that is not JSON: cut off (a notebook that ends before its last
    ``}``, as a save or a copy that was interrupted leaves it), or not JSON at all."""
    stripped = text.strip()
    if stripped.startswith("{") and not stripped.endswith("}"):
        return f"the file is cut off, it ends before the notebook does (not JSON: {err})"
    return f"not JSON ({err})"


def read_submission(raw: bytes):
    """The submitted notebook, validated; a file that is not one is rejected as ``malformed``.

    The reason says what is wrong (empty, not UTF-8, cut off, not JSON, JSON but no notebook, a
    field of the wrong type (named), or what nbformat's validation found), then what to do.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise not_valid("not UTF-8 text") from None
    if not text.strip():
        raise not_valid("the file is empty")
    try:
        data = json.loads(text)
    except RecursionError:
        raise not_valid("not JSON (nested too deeply)") from None
    except ValueError as err:
        raise not_valid(json_problem(text, err)) from None
    check_fields(data)
    missing = [key for key in ("nbformat", "cells") if key not in data]
    if missing:
        keys = " or ".join(repr(key) for key in missing)
        raise not_valid(f"the file is JSON but not a Jupyter notebook (it has no {keys})")
    try:
        student = nbformat.reads(text, as_version=4)
        nbformat.validate(student)
    except Exception as err:
        raise not_valid(validation_problem(err)) from None
    return student


def named_in_file_name(path: Path, assignments: dict) -> str | None:
    """The one assignment whose name is a word of the file's name (``hw3_rmsnorm.ipynb``)."""
    tokens = set(re.split(r"[^a-z0-9]+", path.stem.lower()))
    found = [name for name in assignments if name.lower() in tokens]
    return found[0] if len(found) == 1 else None


def identify(nb, path: Path, assignments: dict) -> str | None:
    """The submission's assignment: its metadata if known, else a name found in its file name."""
    declared = nb.metadata.get("addnorm")  # the student's file: may hold anything
    name = declared.get("assignment") if isinstance(declared, dict) else None
    if isinstance(name, str) and name in assignments:
        return name
    return named_in_file_name(path, assignments)


def unknown_reason(path: Path, assignments: dict) -> str:
    """Why a submission has no assignment, and what to do, with the assignments' names."""
    names = ", ".join(sorted(assignments))
    example = min(assignments, default="layernorm")
    return (
        f"no assignment matches its metadata or file name ({path.name}). To fix: name the file "
        f"after its assignment, one of {names} (e.g. {example}.ipynb), or grade it with "
        "--assignment NAME"
    )


def assignment_of(nb, path: Path, assignments: dict, chosen: str = "") -> Assignment:
    """The submission's assignment: ``chosen`` (the grader's ``--assignment``) if given, else
    the one its metadata or file name names; rejected as ``unknown_assignment`` if none does."""
    name = chosen or identify(nb, path, assignments)
    if name is None:
        raise SubmissionRejected("unknown_assignment", unknown_reason(path, assignments))
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


def defined_names(source: str) -> set[str]:
    """The functions and classes a cell defines at its top level (none if it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def learner_definitions(
    student, names_of: dict[str, set[str]], answer_ids: set[str]
) -> dict[str, list[int]]:
    """grade_id -> the student's own code cells (their indexes) that define again one of the
    names of that answer cell, after it and before the next test cell, as a notebook run from
    the top would use them (the last definition before the test is the one it tests)."""
    found, current = {}, None
    for index, cell in enumerate(student.cells):
        meta = cell.get("metadata", {}).get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id"):
            current = meta["grade_id"] if meta["grade_id"] in names_of else None
            continue
        ours = cell.get("cell_type") == "code" and cell.get("id") not in answer_ids
        code = str(cell.get("source", "")) if ours else ""
        if current and defined_names(code) & names_of[current]:
            found.setdefault(current, []).append(index)
    return found


LEARNER_CELL = "\n\n# --- your cell {index}, after the answer cell: graded with it ---\n"
NOTE_LIMIT = 500  # characters of one note (judge.py's table of caps)
NOTES_LIMIT = 10  # notes kept; one more says how many were left out


def capped_notes(notes: list[str]) -> list[str]:
    """At most :data:`NOTES_LIMIT` notes of at most :data:`NOTE_LIMIT` characters each, each cut
    note and the list itself ending with a note that says how much was left out."""
    kept = [
        note
        if len(note) <= NOTE_LIMIT
        else f"{note[:NOTE_LIMIT]}... ({len(note) - NOTE_LIMIT} more characters)"
        for note in notes[:NOTES_LIMIT]
    ]
    if len(notes) > NOTES_LIMIT:
        kept.append(f"... and {len(notes) - NOTES_LIMIT} more notes like these")
    return kept


def assemble(assignment: Assignment, student) -> tuple[nbformat.NotebookNode, list[str]]:
    """The graded notebook, and notes on what could not be taken from the submission.

    An answer is the student's answer cell, followed by any cell of their own that defines one
    of its names again before the next test (a learner who left the stub and wrote the function
    in a new cell below it): a notebook run from the top tests that definition, so the grader
    does too, and says so in a note.
    """
    graded = nbformat.from_dict(json.loads(json.dumps(assignment.graded_base)))
    notes = []
    answer_cells = [
        cell
        for cell in graded.cells
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code"
    ]
    names_of = {c.metadata["nbgrader"]["grade_id"]: defined_names(c.source) for c in answer_cells}
    extra = learner_definitions(student, names_of, set(assignment.answers.values()))
    for cell in answer_cells:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        source = answer_source(student, grade_id, assignment.answers[grade_id])
        if source is None:
            notes.append(f"answer cell {grade_id!r} is missing: graded as unanswered")
            continue
        for index in extra.get(grade_id, []):
            source += LEARNER_CELL.format(index=index + 1) + str(student.cells[index].source)
            names = ", ".join(sorted(defined_names(str(student.cells[index].source))))
            notes.append(
                f"cell {index + 1} of your notebook defines {names} again after the answer "
                f"cell {grade_id!r}: it was graded with that answer, as running your notebook "
                "from the top would. Next time, write your answer in the answer cell itself."
            )
        cell.source = NBVAL_MARKER.sub("", source)  # nbval skip/raises markers have no say here
    return graded, capped_notes(notes)
