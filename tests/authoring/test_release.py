"""The exercise format: exercises/ generated from solutions/, stubs and hidden tests stripped."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from addnorm_lib.authoring import release
from tests.conftest import ROOT


def nbgrader(grade_id, grade=False, solution=False, locked=False, points=None):
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def notebook(*cells):
    return new_notebook(cells=list(cells))


ANSWER = """def f(x):
    \"\"\"Docstring stays.\"\"\"
    ### BEGIN SOLUTION
    return x + 1
    ### END SOLUTION"""

TEST = """assert f(1) == 2
### BEGIN HIDDEN TESTS
assert f(2) == 3
### END HIDDEN TESTS"""


def test_solution_becomes_stub_at_same_indentation():
    stub = release.strip_solution(ANSWER, "nb")
    assert stub.split("\n") == [
        "def f(x):",
        '    """Docstring stays."""',
        "    # YOUR CODE HERE",
        "    raise NotImplementedError()",
    ]


def test_each_of_several_solution_regions_is_stubbed():
    source = "class A:\n    def f(self):\n        ### BEGIN SOLUTION\n        return 1\n"
    source += "        ### END SOLUTION\n\n    def g(self):\n        ### BEGIN SOLUTION\n"
    source += "        return 2\n        ### END SOLUTION"
    stub = release.strip_solution(source, "nb")
    assert stub.count("raise NotImplementedError()") == 2
    assert "return 1" not in stub and "return 2" not in stub
    assert "        raise NotImplementedError()" in stub


def test_hidden_tests_are_removed():
    assert release.strip_hidden_tests(TEST, "nb") == "assert f(1) == 2"


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("x = 1", "must mark its answer"),
        ("### BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n### END SOLUTION", "without"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "again before"),
    ],
)
def test_malformed_markers_are_reported_with_the_cell(source, complaint):
    with pytest.raises(release.ReleaseError, match=complaint) as info:
        release.strip_solution(source, "demo.ipynb, cell 3")
    assert "demo.ipynb, cell 3" in str(info.value)


def test_release_clears_outputs_and_keeps_metadata():
    answer = new_code_cell(ANSWER, metadata=nbgrader("f", solution=True))
    answer.outputs = [nbformat.v4.new_output("stream", text="hi")]
    answer.execution_count = 4
    test = new_code_cell(TEST, metadata=nbgrader("test_f", grade=True, locked=True, points=2))
    essay = new_markdown_cell("My answer is 42.", metadata=nbgrader("essay", solution=True))
    solution = notebook(answer, test, essay)
    exercise = release.release(solution, "demo.ipynb")
    assert exercise.cells[0].outputs == [] and exercise.cells[0].execution_count is None
    assert "raise NotImplementedError()" in exercise.cells[0].source
    assert exercise.cells[1].source == "assert f(1) == 2"
    assert exercise.cells[1].metadata["nbgrader"] == test.metadata["nbgrader"]
    assert exercise.cells[2].source == release.MARKDOWN_STUB
    assert "return x + 1" in solution.cells[0].source, "the solution notebook must not change"


@pytest.mark.parametrize(
    ("cells", "complaint"),
    [
        ([new_code_cell("x", metadata=nbgrader("t", grade=True, locked=True))], "needs points"),
        ([new_code_cell("x", metadata=nbgrader("t", grade=True, points=1))], "must be locked"),
        (
            [
                new_code_cell(ANSWER, metadata=nbgrader("a", solution=True)),
                new_code_cell(ANSWER, metadata=nbgrader("a", solution=True)),
            ],
            "used twice",
        ),
        ([new_code_cell(ANSWER)], "no nbgrader metadata"),
        ([new_code_cell(ANSWER, metadata=nbgrader("a"))], "without solution: true"),
    ],
)
def test_invalid_metadata_is_rejected(cells, complaint):
    with pytest.raises(release.ReleaseError, match=complaint):
        release.release(notebook(*cells), "demo.ipynb")


def test_exercises_are_up_to_date_with_solutions():
    """Fails when someone edits solutions/ and forgets `make exercises`."""
    folders = ["--solutions", str(ROOT / "solutions"), "--exercises", str(ROOT / "exercises")]
    code = release.main([*folders, "--check"])
    assert code == 0, "exercises/ is stale: run `make exercises`"


def test_check_mode_detects_a_stale_exercise(tmp_path, capsys):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    answer = new_code_cell(ANSWER, metadata=nbgrader("f", solution=True))
    nbformat.write(notebook(answer), solutions / "demo.ipynb")
    arguments = ["--solutions", str(solutions), "--exercises", str(exercises)]
    assert release.main([*arguments, "--check"]) == 1  # missing
    assert release.main(arguments) == 0
    assert release.main([*arguments, "--check"]) == 0
    text = (exercises / "demo.ipynb").read_text()
    (exercises / "demo.ipynb").write_text(text.replace("YOUR CODE HERE", "edited"))
    assert release.main([*arguments, "--check"]) == 1
    assert "demo.ipynb" in capsys.readouterr().err


def test_unreadable_solution_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "broken.ipynb").write_text("{ not json")
    assert release.main(["--solutions", str(tmp_path), "--exercises", str(tmp_path / "out")]) == 2
    assert "broken.ipynb: not a readable notebook" in capsys.readouterr().err


def test_test_cells_are_locked_as_the_notebooks_say_and_answers_stay_editable():
    """Jupyter's own locks, as nbgrader's release sets them: "test cells are locked" holds."""
    answer = new_code_cell(ANSWER, metadata=nbgrader("f", solution=True))
    test = new_code_cell(TEST, metadata=nbgrader("test_f", grade=True, locked=True, points=2))
    readonly = new_markdown_cell("Setup.", metadata=nbgrader("setup", locked=True))
    prose = new_markdown_cell("Free text.")
    exercise = release.release(notebook(answer, test, readonly, prose), "demo.ipynb")
    meta = [cell.metadata for cell in exercise.cells]
    assert meta[0]["deletable"] is False and "editable" not in meta[0]
    assert meta[1]["deletable"] is False and meta[1]["editable"] is False
    assert meta[2]["deletable"] is False and meta[2]["editable"] is False
    assert "deletable" not in meta[3] and "editable" not in meta[3]


def test_every_test_cell_of_the_shipped_exercises_is_locked():
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert tests, path
        for cell in tests:
            assert cell.metadata.get("editable") is False, (path.name, cell.metadata)
            assert cell.metadata.get("deletable") is False, (path.name, cell.metadata)


def test_every_exercise_prints_a_scoring_command_for_itself():
    """The command works as printed from the course folder, whatever the terminal's Python."""
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
        assert f"make grade NB=exercises/{path.name}" in text, path.name
        assert "python -m addnorm_lib.grading" not in text, path.name
