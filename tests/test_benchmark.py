"""The grading benchmark runs end to end on a few submissions (the real figures: README)."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def test_benchmark_measures_all_three_runs(tmp_path):
    result = tmp_path / "figures.json"
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "grade_benchmark.py"), "--submissions", "3",
         "--jobs", "2", "--json", str(result)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    figures = json.loads(result.read_text())
    assert figures["graded"] == 3
    assert set(figures["seconds"]) == {"floor (nbclient)", "grader",
                                       "sequential pytest --nbval-lax"}  # fmt: skip
    assert all(seconds > 0 for seconds in figures["seconds"].values())
    assert "grader / floor" in completed.stdout
