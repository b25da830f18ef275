"""Assembling the graded notebook: the instructor's notebook, with only the student's answers in.

Also reading the instructor's assignments (points, checks per test cell) and identifying the
assignment of a submission.
"""

import os

import nbformat
import pytest

from addnorm_lib.authoring import release
from addnorm_lib.grading import assemble
from tests.conftest import EXERCISES, ROOT, SOLUTIONS, run_python
from tests.grading.conftest import FORWARD, LAYER_NORM_CELL, SOLUTION, answer_cell, solution_with
from tests.inprocess import grade_in_process

# Finding what a test cell checks


def test_checks_called_finds_each_call_and_its_seed():
    source = "checks.check_layer_norm(f)\nx = 1\nchecks.check_layer_norm(f, seed=2024)\nprint(x)"
    assert assemble.checks_called(source, "here") == (
        ("check_layer_norm", 0),
        ("check_layer_norm", 2024),
    )


def test_a_check_without_a_judge_is_refused_by_name():
    with pytest.raises(ValueError, match=r"cell 3, line 1: checks.check_nothing has no judge"):
        assemble.checks_called("checks.check_nothing(f)", "cell 3")


@pytest.mark.parametrize(
    ("source", "line", "problem"),
    [
        # a bare call: the kernel runs it, the grader would not know to judge it
        ("x = 1\ncheck_layer_norm(f)", 2, "check_layer_norm used bare"),
        ("from addnorm_lib.checks import check_layer_norm", 1, "check_layer_norm imported"),
        ("from addnorm_lib.checks.layernorm import check_layer_norm as c", 1, "imported"),
        ("import addnorm_lib.checks as c\nc.check_layer_norm(f)", 2, "c.check_layer_norm:"),
        ("other.check_layer_norm(f)", 1, "other.check_layer_norm:"),
        ("run = checks.check_layer_norm\nrun(f)", 1, "used other than as a call"),
        ("c = checks\nc.check_layer_norm(f)", 1, "checks used other than"),
        ('getattr(checks, "check_layer_norm")(f)', 1, "checks used other than"),
        # a seed the grader cannot read: it would judge seed 0 while the kernel ran another
        ("for s in range(3):\n    checks.check_layer_norm(f, seed=s)", 2, "a whole number"),
        ("checks.check_layer_norm(f, seed=1 + 1)", 1, "a whole number"),
        ("checks.check_layer_norm(f, seed=True)", 1, "a whole number"),
        ("checks.check_layer_norm(f, 3)", 1, "one function or class"),
        ("checks.check_layer_norm(f, seed=2, atol=1)", 1, "at most seed=<int>"),
        ("checks.check_layer_norm(f, **options)", 1, "at most seed=<int>"),
        ("checks.check_layer_norm(*functions)", 1, "one function or class"),
        ("checks.check_layer_norm(f))", 1, "does not parse"),
    ],
)
def test_a_check_the_grader_cannot_read_strictly_is_refused_with_its_line(source, line, problem):
    with pytest.raises(ValueError) as refused:
        assemble.checks_called(source, "nb.ipynb, test cell 'test_0'")
    message = str(refused.value)
    assert message.startswith(f"nb.ipynb, test cell 'test_0', line {line}: "), message
    assert problem in message and "\n" not in message


def test_strict_reading_accepts_checks_written_out_among_other_code():
    """Other code may sit beside the checks (it only runs in the kernel, and can only fail the
    cell); a name that merely contains a check's name is not a check."""
    source = (
        "import numpy as np\nx = np.ones(3)\nprint(check_layer_norm_notes)\n"
        "checks.check_layer_norm(layer_norm, seed=7)\nchecks.check_layer_norm_module(LayerNorm)"
    )
    assert assemble.checks_called(source, "here") == (
        ("check_layer_norm", 7),
        ("check_layer_norm_module", 0),
    )


def test_a_call_without_a_seed_uses_the_check_s_own_default(monkeypatch):
    """The seed read for a call without one is the check's signature default, not a constant of
    the grader's: a check whose default changed would be judged on the seed the kernel used."""
    import addnorm_lib.checks as checks

    def check_layer_norm(layer_norm, seed: int = 5):
        pass

    monkeypatch.setattr(checks, "check_layer_norm", check_layer_norm)
    assert assemble.checks_called("checks.check_layer_norm(f)", "here") == (
        ("check_layer_norm", 5),
    )


def test_checks_called_by_a_test_cell_are_found():
    assignment = assemble.load_assignment(SOLUTION)
    forward = next(t for t in assignment.tests if t.grade_id == FORWARD)
    assert forward.checks == (("check_layer_norm", 0),)
    assert forward.hidden_checks == (("check_layer_norm", 2024),)
    assert forward.hidden


# The instructor's assignments


def test_an_assignment_has_its_answers_tests_and_points(assignment):
    assert assignment.name == "layernorm" and assignment.max_total == 10
    assert set(assignment.answers) == {"layer_norm", "layer_norm_backward", "layer_norm_module"}
    assert [t.points for t in assignment.tests] == [3, 3, 4]


def test_every_instructor_notebook_is_loaded_by_name():
    assignments = assemble.load_assignments(ROOT / "solutions")
    assert sorted(assignments) == sorted(path.stem for path in SOLUTIONS)


def test_a_folder_without_instructor_notebooks_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no instructor notebooks"):
        assemble.load_assignments(tmp_path)


# Reading a submission and identifying its assignment


# Read by nbformat.reads, which only logs what is wrong: a key the schema does not allow.
INVALID_NOTEBOOK = b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [], "x": 1}'


@pytest.mark.parametrize(
    "raw",
    [b"this is { not json", b'{"hello": "world"}', b"\xff\xfe not utf-8", b"", INVALID_NOTEBOOK],
)
def test_a_file_that_is_not_a_notebook_is_rejected_as_malformed(raw):
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.read_submission(raw)
    assert rejected.value.status == "malformed"
    assert rejected.value.reason.startswith("not a valid notebook: ")


def test_a_notebook_is_read():
    student = assemble.read_submission(SOLUTION.read_bytes())
    assert answer_cell(student, "layer_norm").cell_type == "code"


@pytest.mark.parametrize(
    "metadata, file_name, expected",
    [
        ({"assignment": "layernorm"}, "anything.ipynb", "layernorm"),
        ({"assignment": "unknown"}, "hw3_rmsnorm_final.ipynb", "rmsnorm"),
        ("not a dict", "rmsnorm.ipynb", "rmsnorm"),
        (None, "layernorm_and_rmsnorm.ipynb", None),  # two names: ambiguous
        (None, "homework.ipynb", None),
    ],
)
def test_identify_trusts_known_metadata_then_the_file_name(metadata, file_name, expected):
    nb = nbformat.v4.new_notebook()
    if metadata is not None:
        nb.metadata["addnorm"] = metadata
    known = {"layernorm": None, "rmsnorm": None}
    assert assemble.identify(nb, ROOT / file_name, known) == expected


def test_a_submission_of_no_known_assignment_is_rejected(assignment):
    nb = nbformat.v4.new_notebook()
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.assignment_of(nb, ROOT / "homework.ipynb", {"layernorm": assignment})
    assert rejected.value.status == "unknown_assignment"
    assert "(homework.ipynb)" in rejected.value.reason
    found = assemble.assignment_of(nb, ROOT / "my_layernorm.ipynb", {"layernorm": assignment})
    assert found is assignment


# Assembling the graded notebook


def test_only_answer_cells_come_from_the_student(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    answer = answer_cell(student, "layer_norm")
    answer.source = "# NBVAL_SKIP\ndef layer_norm(x, g, b, eps=1e-5): ..."
    answer_cell(student, FORWARD).source = "pass  # the student's 'test'"
    graded, notes = assemble.assemble(assignment, student)
    assert notes == []
    graded_answer = answer_cell(graded, "layer_norm").source
    assert graded_answer.strip() == "def layer_norm(x, g, b, eps=1e-5): ..."
    assert answer_cell(graded, FORWARD).source == "checks.check_layer_norm(layer_norm)"
    (tail,) = hidden_tail_cells(graded, FORWARD)
    assert "checks.check_layer_norm(layer_norm, seed=2024)" in tail.source


def hidden_tail_cells(nb, grade_id: str) -> list:
    """The hidden tail cells of the test cell ``grade_id``."""
    return [
        cell
        for cell in nb.cells
        if cell.metadata.get("addnorm", {}).get(assemble.HIDDEN_OF) == grade_id
    ]


def test_hidden_tests_run_last_each_in_a_cell_of_its_own(assignment):
    """Every hidden block leaves its test cell for a tail cell after every other cell, in the
    order of the test cells: the kernel sees no hidden line before the last visible cell ran."""
    cells = assignment.graded_base.cells
    tails = [t.hidden_index for t in assignment.tests]
    assert tails == list(range(len(cells) - len(tails), len(cells)))
    for test in assignment.tests:
        assert release.HIDDEN_BEGIN not in cells[test.index].source
        tail = cells[test.hidden_index]
        assert tail.metadata["addnorm"][assemble.HIDDEN_OF] == test.grade_id
        assert assemble.checks_called(tail.source, "tail") == test.hidden_checks
        assert not tail.metadata.get("nbgrader")  # not a cell that nbgrader or the student knows
    seal = cells[-1].metadata["addnorm"][assemble.SEAL]  # the visible checks' records
    assert seal == sorted(f"{n}-seed{s}.npz" for t in assignment.tests for n, s in t.checks)
    nbformat.validate(assignment.graded_base)


def hidden_notebook(*hidden: str) -> nbformat.NotebookNode:
    """A small instructor's notebook: one test cell per hidden block given."""
    nb = nbformat.v4.new_notebook()
    for number, block in enumerate(hidden):
        source = f"checks.check_layer_norm(layer_norm)\n{release.HIDDEN_BEGIN}\n{block}\n"
        source += release.HIDDEN_END
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": f"test_{number}", "points": 1}
        nb.cells.append(cell)
    return nb


@pytest.mark.parametrize(
    "block",
    [
        "checks.check_layer_norm(layer_norm, seed=2024)",
        "# a comment\n\nchecks.check_layer_norm(layer_norm, seed=7)\n"
        "checks.check_layer_norm_module(LayerNorm, seed=8)",
    ],
)
def test_hidden_blocks_of_check_calls_only_are_accepted(block):
    assert assemble.hidden_blocks_problem(hidden_notebook(block), "nb.ipynb") is None


@pytest.mark.parametrize(
    ("block", "line", "problem"),
    [
        ("assert layer_norm(1, 2, 3) == 4", 3, "an assert, not a check call"),
        ("checks.check_layer_norm(layer_norm, seed=1)\nx = 3", 4, "an assignment"),
        ("import numpy", 3, "an import"),
        ("print(2024)", 3, "something other than checks"),
        ("checks.check_nothing(layer_norm, seed=1)", 3, "check_nothing has no judge"),
        ("checks.check_layer_norm(layer_norm)", 3, "must get seed=<int>"),
        ("checks.check_layer_norm(layer_norm, seed=1, atol=2)", 3, "must get seed=<int>"),
        ("checks.check_layer_norm(layer_norm, seed=True)", 3, "a whole number"),
        ("checks.check_layer_norm(layer_norm, seed=2 * 3)", 3, "a whole number"),
        ("checks.check_layer_norm(lambda x: x, seed=1)", 3, "by its name"),
        ("checks.check_layer_norm(layer_norm, seed=1))", 3, "does not parse"),
    ],
)
def test_anything_but_a_check_call_in_a_hidden_block_is_named_with_its_line(block, line, problem):
    nb = hidden_notebook("checks.check_layer_norm(layer_norm, seed=1)", block)
    found = assemble.hidden_blocks_problem(nb, "nb.ipynb")
    assert found.startswith(f"nb.ipynb, test cell 'test_1', line {line}: "), found
    assert problem in found and "judged outside the kernel" in found


def test_the_course_hidden_blocks_call_checks_only():
    for path in SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        assert assemble.hidden_blocks_problem(nb, path.name) is None


def test_notes_are_capped_in_length_and_number():
    notes = assemble.capped_notes(["x" * 600] + ["short"] * 20)
    assert len(notes) == assemble.NOTES_LIMIT + 1
    assert notes[0] == "x" * 500 + "... (100 more characters)"
    assert notes[-1] == "... and 11 more notes like these"


def written_in_a_new_cell(after: str) -> nbformat.NotebookNode:
    """The exercise with the stub left alone and the solution's layer_norm in a new cell of the
    learner's, inserted right after the cell ``after`` (a grade_id)."""
    student = nbformat.read(ROOT / "exercises" / "layernorm.ipynb", as_version=4)
    solution = answer_cell(nbformat.read(SOLUTION, as_version=4), "layer_norm").source
    mine = nbformat.v4.new_code_cell("import numpy as np\n\n" + solution)
    student.cells.insert(student.cells.index(answer_cell(student, after)) + 1, mine)
    return student


def test_an_answer_written_in_a_new_cell_below_the_stub_is_graded_and_said(assignment):
    """As running the notebook from the top would (and nbgrader does): the last definition
    before the test is the one tested."""
    student = written_in_a_new_cell(after="layer_norm")
    graded, notes = assemble.assemble(assignment, student)
    source = answer_cell(graded, "layer_norm").source
    assert source.index("raise NotImplementedError") < source.index("mean = x.mean(")
    assert len(notes) == 1 and "defines layer_norm again" in notes[0] and "'layer_norm'" in notes[0]
    result = grade_in_process(student, "layernorm")
    points = {cell.grade_id: cell.points for cell in result.cells}
    assert points[FORWARD] == 3, result.cells


def test_a_definition_after_the_test_cell_is_not_graded(assignment):
    """Run from the top, the test sees the stub: a definition after it does not count."""
    student = written_in_a_new_cell(after=FORWARD)
    graded, notes = assemble.assemble(assignment, student)
    assert notes == [] and "mean = x.mean(" not in answer_cell(graded, "layer_norm").source


def test_a_cell_of_the_learners_that_defines_nothing_graded_does_not_run(assignment):
    student = nbformat.read(ROOT / "exercises" / "layernorm.ipynb", as_version=4)
    index = student.cells.index(answer_cell(student, "layer_norm")) + 1
    student.cells.insert(index, nbformat.v4.new_code_cell("checks = None\ndef helper(): ..."))
    graded, notes = assemble.assemble(assignment, student)
    assert notes == [] and "checks = None" not in nbformat.writes(graded)


def test_an_answer_is_found_by_cell_id_when_its_metadata_is_gone(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    cell = answer_cell(student, "layer_norm")
    cell.source, cell.metadata = "layer_norm = 'mine'", {}
    graded, _ = assemble.assemble(assignment, student)
    assert answer_cell(graded, "layer_norm").source == "layer_norm = 'mine'"


def test_a_missing_answer_keeps_the_stub_and_says_so(assignment):
    student = nbformat.read(SOLUTION, as_version=4)
    student.cells.remove(answer_cell(student, "layer_norm_module"))
    graded, notes = assemble.assemble(assignment, student)
    assert "raise NotImplementedError" in answer_cell(graded, "layer_norm_module").source
    assert notes == ["answer cell 'layer_norm_module' is missing: graded as unanswered"]


def test_assembling_leaves_the_assignment_as_it_was(assignment):
    before = nbformat.writes(assignment.graded_base)
    student = nbformat.read(SOLUTION, as_version=4)
    answer_cell(student, "layer_norm").source = "changed = True"
    assemble.assemble(assignment, student)
    assert nbformat.writes(assignment.graded_base) == before


# Hostile files and metadata (issue 15): always `malformed` with the field named, never `error`

CELL = ("cells", LAYER_NORM_CELL)
AT = f"cells[{LAYER_NORM_CELL}]"


@pytest.mark.parametrize(
    "path, value, reason",
    [
        (("metadata",), [1], "metadata is a list, not an object"),
        (("metadata", "addnorm"), "layernorm", "metadata.addnorm is a string, not an object"),
        (
            ("metadata", "addnorm", "assignment"),
            ["layernorm"],
            "metadata.addnorm.assignment is a list, not a string",
        ),
        (
            ("metadata", "addnorm", "assignment"),
            {"name": "layernorm"},
            "metadata.addnorm.assignment is an object, not a string",
        ),
        (
            ("metadata", "addnorm", "assignment"),
            3,
            "metadata.addnorm.assignment is a number, not a string",
        ),
        (
            ("metadata", "addnorm", "assignment"),
            None,
            "metadata.addnorm.assignment is null, not a string",
        ),
        (("cells",), {}, "cells is an object, not a list"),
        (CELL, "x", f"{AT} is a string, not an object"),
        ((*CELL, "metadata"), [1], f"{AT}.metadata is a list, not an object"),
        ((*CELL, "metadata", "nbgrader"), [1], f"{AT}.metadata.nbgrader is a list, not an object"),
        (
            (*CELL, "metadata", "nbgrader", "grade_id"),
            ["layer_norm"],
            f"{AT}.metadata.nbgrader.grade_id is a list, not a string",
        ),
        (
            (*CELL, "metadata", "nbgrader", "grade_id"),
            {"a": 1},
            f"{AT}.metadata.nbgrader.grade_id is an object, not a string",
        ),
        (
            (*CELL, "metadata", "nbgrader", "grade_id"),
            3,
            f"{AT}.metadata.nbgrader.grade_id is a number, not a string",
        ),
        ((*CELL, "source"), 3, f"{AT}.source is a number, not a string or a list of strings"),
        ((*CELL, "source"), None, f"{AT}.source is null, not a string or a list of strings"),
        (
            (*CELL, "source"),
            {"a": 1},
            f"{AT}.source is an object, not a string or a list of strings",
        ),
        (
            (*CELL, "source"),
            ["a", 3],
            f"{AT}.source is a list holding a number, not a string or a list of strings",
        ),
        ((*CELL, "cell_type"), 3, f"{AT}.cell_type is a number, not a string"),
        ((*CELL, "source"), "x = '\udcff'", f"{AT}.source is not valid Unicode text"),
        ((*CELL, "id"), 3, f"{AT}.id is a number, not a string"),
    ],
)
def test_a_field_of_the_wrong_type_is_malformed_and_named(path, value, reason):
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.read_submission(solution_with(path, value))
    assert (rejected.value.status, rejected.value.reason) == (
        "malformed",
        f"not a valid notebook: {reason}. {assemble.RESAVE}",
    )


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"\xff\xfe not utf-8", "not a valid notebook: not UTF-8 text"),
        (b"this is { not json", "not a valid notebook: not JSON (Expecting value: line 1"),
        (b"[" * 100_000 + b"]" * 100_000, "not a valid notebook: not JSON (nested too deeply)"),
        (b"[]", "not a valid notebook: the file is a list, not an object"),
        (INVALID_NOTEBOOK, "not a valid notebook: Additional properties are not allowed ('x' was"),
    ],
)
def test_the_reason_says_what_is_wrong_with_the_file(raw, reason):
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.read_submission(raw)
    assert rejected.value.status == "malformed"
    assert rejected.value.reason.startswith(reason), rejected.value.reason


@pytest.mark.parametrize("path", [*SOLUTIONS, *EXERCISES], ids=lambda path: path.parent.name)
def test_the_course_notebooks_pass_the_checks(path):
    student = assemble.read_submission(path.read_bytes())
    assert assemble.identify(student, path, {path.stem: None}) == path.stem


def test_harmless_fields_of_any_type_are_ignored():
    """Points, flags and other nbgrader fields of a student's cell are never read."""
    raw = solution_with((*CELL, "metadata", "nbgrader", "points"), ["lots"])
    student = assemble.read_submission(raw)
    assert answer_cell(student, "layer_norm").cell_type == "code"


def test_identify_never_fails_on_what_a_student_declared():
    nb = nbformat.v4.new_notebook()
    for declared in (["layernorm"], {"a": 1}, 3):
        nb.metadata["addnorm"] = {"assignment": declared}
        assert assemble.identify(nb, ROOT / "rmsnorm.ipynb", {"rmsnorm": None}) == "rmsnorm"


# Reading the file: never through a link, never a huge one


def test_a_regular_file_is_read(tmp_path):
    (tmp_path / "ada.ipynb").write_bytes(b"{}")
    assert assemble.read_file(tmp_path / "ada.ipynb", limit_mb=1) == b"{}"


def test_a_symlink_is_refused_not_followed(tmp_path):
    (tmp_path / "file.ipynb").symlink_to(SOLUTION)
    (tmp_path / "folder").symlink_to(SOLUTION.parent, target_is_directory=True)
    (tmp_path / "dangling.ipynb").symlink_to(tmp_path / "nowhere")
    for name in ("file.ipynb", "folder", "dangling.ipynb"):
        with pytest.raises(assemble.SubmissionRejected) as rejected:
            assemble.read_file(tmp_path / name, limit_mb=16)
        assert rejected.value.status == "malformed"
        assert rejected.value.reason == "a symbolic link: the grader does not follow links"


def test_a_fifo_or_folder_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "fifo.ipynb")  # reading it would wait forever
    (tmp_path / "folder.ipynb").mkdir()
    for name in ("fifo.ipynb", "folder.ipynb"):
        with pytest.raises(assemble.SubmissionRejected) as rejected:
            assemble.read_file(tmp_path / name, limit_mb=16)
        assert (rejected.value.status, rejected.value.reason) == ("malformed", "not a regular file")


def test_a_file_over_the_size_limit_is_not_read(tmp_path):
    path = tmp_path / "huge.ipynb"
    with open(path, "wb") as file:
        file.truncate(52 * 2**20)  # sparse: costs no disk
    with pytest.raises(assemble.SubmissionRejected) as rejected:
        assemble.read_file(path, limit_mb=16)
    assert (rejected.value.status, rejected.value.reason) == (
        "malformed",
        "the file is 52.0 MiB, over the limit of 16 MiB (--notebook-mb): not read",
    )
    assert len(assemble.read_file(path, limit_mb=52)) == 52 * 2**20  # at the limit: read


@pytest.mark.parametrize(
    ("visible", "problem"),
    [
        ("check_layer_norm(layer_norm)", "line 1: check_layer_norm used bare"),
        ("seed = 3\nchecks.check_layer_norm(layer_norm, seed=seed)", "line 2: checks.check_"),
        ("assert layer_norm is not None", "calls no check"),
    ],
)
def test_a_graded_cell_whose_checks_cannot_be_read_is_refused_at_load(tmp_path, visible, problem):
    """A graded test cell with a bare check call, a computed seed or no check at all would earn
    its points from nbval alone (whatever the kernel says): the grader stops before any kernel
    runs, in one line naming the notebook, the test cell and the line."""
    solution = nbformat.read(SOLUTION, as_version=4)
    test = next(c for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade"))
    hidden = test.source[test.source.index(release.HIDDEN_BEGIN) :]
    test.source = f"{visible}\n{hidden}"
    source = tmp_path / "source"
    source.mkdir()
    nbformat.write(solution, source / SOLUTION.name)
    grade_id = test.metadata["nbgrader"]["grade_id"]
    with pytest.raises(ValueError, match=f"layernorm.ipynb, test cell '{grade_id}'"):
        assemble.load_assignments(source)
    completed = run_python(
        "-m", "addnorm_lib.grading", SOLUTION, "--source", source, "--out", tmp_path / "out"
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count("\n") == 1 and problem in completed.stderr, completed.stderr
    assert f"test cell '{grade_id}'" in completed.stderr
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_an_instructor_notebook_with_an_assert_in_a_hidden_block_is_refused_at_load(tmp_path):
    """The grader stops before any kernel runs, with one line naming the notebook, the test cell
    and the line: a point must not depend on an assert that only the kernel runs."""
    solution = nbformat.read(SOLUTION, as_version=4)
    test = next(c for c in solution.cells if release.HIDDEN_BEGIN in c.source)
    test.source = test.source.replace(
        release.HIDDEN_BEGIN, f"{release.HIDDEN_BEGIN}\nassert layer_norm is not None"
    )
    source = tmp_path / "source"
    source.mkdir()
    nbformat.write(solution, source / SOLUTION.name)
    with pytest.raises(ValueError, match=r"layernorm.ipynb, test cell '\w+', line \d+: an assert"):
        assemble.load_assignments(source)
    completed = run_python(
        "-m", "addnorm_lib.grading", SOLUTION, "--source", source, "--out", tmp_path / "out"
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count("\n") == 1 and "an assert, not a check call" in completed.stderr
