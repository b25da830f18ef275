"""Shared by the grader's stage tests: the LayerNorm assignment, finding its cells by id, and
the instructor's notebook with one field changed, as a hostile student could send it."""

import json

import pytest

from addnorm_lib.grading import assemble
from tests.conftest import ROOT

SOLUTION = ROOT / "solutions" / "layernorm.ipynb"
EXERCISE = ROOT / "exercises" / "layernorm.ipynb"
FORWARD = "test_layer_norm"


@pytest.fixture(scope="module")
def assignment():
    return assemble.load_assignment(SOLUTION)


def answer_cell(nb, grade_id):
    (found,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return found


LAYER_NORM_CELL = next(
    i
    for i, cell in enumerate(json.loads(SOLUTION.read_text())["cells"])
    if cell["metadata"].get("nbgrader", {}).get("grade_id") == "layer_norm"
)


def solution_with(path: tuple, value) -> bytes:
    """The instructor's notebook as a student could send it, one field set to ``value``."""
    nb = json.loads(SOLUTION.read_text())
    where = nb
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return json.dumps(nb).encode()
