"""``make grade NB=...``, the scoring command every exercise prints, works exactly as printed:
from the course folder, with whatever Python the terminal has (here: none of the course's)."""

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def make(*args, tmp_path) -> subprocess.CompletedProcess:
    """``make -s *args`` in the course folder, with a PATH that has no course Python on it."""
    path = ":".join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(p))
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    return subprocess.run(
        [shutil.which("make") or "make", "-s", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_make_grade_scores_an_exercise_and_names_its_feedback_page(tmp_path):
    done = make("grade", "NB=exercises/rmsnorm.ipynb", f"OUT={tmp_path / 'out'}", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rmsnorm.ipynb: graded, 0/10" in done.stdout and "  total" in done.stdout
    page = tmp_path / "out" / "feedback" / "rmsnorm.ipynb.html"
    assert page.is_file() and done.stdout.rstrip().endswith(str(page))


def test_make_grade_without_a_notebook_says_how_to_call_it(tmp_path):
    done = make("grade", tmp_path=tmp_path)
    assert done.returncode != 0 and "usage: make grade NB=" in done.stderr
