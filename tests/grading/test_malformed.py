"""A notebook the grader cannot grade (cut off, ``{}``, empty, other JSON, of no known
assignment) gets 0 out of its assignment's points, where its name or ``--assignment`` says which,
and one line saying what to do: in its row, on the terminal, in the CSV and on its feedback page.
"""

import csv
import json

import pytest

from addnorm_lib.grading import pipeline, report
from tests.conftest import ROOT

EXERCISE = ROOT / "exercises" / "layernorm.ipynb"
ASSIGNMENTS = ("batchnorm", "deepnorm", "layernorm", "placement", "residuals", "rmsnorm")


def unnamed_exercise() -> bytes:
    """The LayerNorm exercise without the metadata that names its assignment."""
    nb = json.loads(EXERCISE.read_text(encoding="utf-8"))
    del nb["metadata"]["addnorm"]
    return json.dumps(nb).encode()


# file name -> (its bytes, what the reason must say, the points it is out of)
CASES = {
    "layernorm.ipynb": (EXERCISE.read_bytes()[:500], "the file is cut off", 10),
    "rmsnorm.ipynb": (b"{}", "JSON but not a Jupyter notebook", 10),
    "batchnorm.ipynb": (b"", "the file is empty", 10),
    "placement_ada.ipynb": (b'{"cells": 3, "a": [1]}', "cells is a number, not a list", 8),
    "settings.ipynb": (b'{"editor": {"tabs": 4}}', "JSON but not a Jupyter notebook", None),
    "homework.ipynb": (unnamed_exercise(), "no assignment matches", None),
}


def graded(tmp_path, capsys, name, *flags):
    """Grade one file as ``python -m addnorm_lib.grading FILE --out OUT``: (its row in
    grades.csv, its grades.json entry, what was printed, its feedback page)."""
    path = tmp_path / name
    path.write_bytes(CASES[name][0])
    out = tmp_path / "out"
    assert pipeline.main([str(path), "--out", str(out), *flags]) == 0
    printed = capsys.readouterr().out
    (row,) = csv.DictReader((out / "grades.csv").open(encoding="utf-8"))
    (entry,) = json.loads((out / "grades.json").read_text())["grades"]
    page = report.feedback_path(out, name).read_text(encoding="utf-8")
    return row, entry, printed, page


@pytest.mark.parametrize("name", CASES)
def test_an_ungradable_notebook_gets_0_of_its_points_and_what_to_do(name, tmp_path, capsys):
    _, said, out_of = CASES[name]
    row, entry, printed, page = graded(tmp_path, capsys, name)
    status = "unknown_assignment" if name == "homework.ipynb" else "malformed"
    score = f"0/{out_of}" if out_of else "0 points"
    assert (row["status"], entry["status"], entry["total"]) == (status, status, 0)
    assert (row["max_total"], entry["max_total"]) == (str(out_of or 0), out_of or 0)
    headline = printed.splitlines()[0]
    assert headline.startswith(f"{name}: not graded ({status}), {score}: ")
    assert said in headline and "To fix: " in headline  # one line: what is wrong, what to do
    assert row["reason"] == entry["reason"] == headline.split(f"{score}: ", 1)[1]
    assert said in page and "To fix: " in page and f"not graded ({status})" in page
    for noise in ("Traceback", "could not be converted", "version 1"):
        assert noise not in printed + page


def test_an_unknown_notebook_is_told_the_assignments_names(tmp_path, capsys):
    row, _, printed, page = graded(tmp_path, capsys, "homework.ipynb")
    listed = ", ".join(ASSIGNMENTS)
    assert listed in row["reason"] and listed in printed and listed in page
    assert "--assignment NAME" in row["reason"]


def test_the_graders_arguments_name_the_assignment(tmp_path, capsys):
    """--assignment grades an unnamed notebook, and gives a broken one its maximum."""
    row, *_ = graded(tmp_path, capsys, "homework.ipynb", "--assignment", "layernorm")
    assert (row["status"], row["assignment"], row["total"], row["max_total"]) == (
        "ok",
        "layernorm",
        "0",
        "10",
    )
    row, _, printed, _ = graded(tmp_path, capsys, "settings.ipynb", "--assignment", "rmsnorm")
    assert (row["status"], row["max_total"]) == ("malformed", "10")
    assert "not graded (malformed), 0/10: " in printed


def test_an_unknown_assignment_argument_lists_the_names(tmp_path, capsys):
    path = tmp_path / "ada.ipynb"
    path.write_bytes(EXERCISE.read_bytes())
    assert pipeline.main([str(path), "--out", str(tmp_path), "--assignment", "layer"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --assignment 'layer' is not an assignment; give one of ")
    assert ", ".join(ASSIGNMENTS) in error and len(error.strip().splitlines()) == 1
