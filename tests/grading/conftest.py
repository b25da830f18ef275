"""Shared by the grader's stage tests: the LayerNorm assignment, and finding its cells by id."""

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
