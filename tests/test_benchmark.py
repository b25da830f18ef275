"""The grading benchmark runs end to end on a few submissions (the real figures: README)."""

import importlib.util
import json

import pytest

from tests.conftest import ROOT, run_python

pytestmark = pytest.mark.slow


def test_benchmark_measures_all_three_runs(tmp_path):
    result = tmp_path / "figures.json"
    script = ROOT / "benchmarks" / "grade_benchmark.py"
    completed = run_python(script, "--submissions", 3, "--jobs", 2, "--json", result)
    assert completed.returncode == 0, completed.stderr[-2000:]
    figures = json.loads(result.read_text())
    assert figures["graded"] == 3
    assert set(figures["seconds"]) == {
        "floor (nbclient)",
        "grader",
        "sequential pytest --nbval-lax",
    }
    assert all(seconds > 0 for seconds in figures["seconds"].values())
    assert "grader / floor" in completed.stdout


def test_suite_benchmark_times_mutants_three_ways(tmp_path):
    result = tmp_path / "figures.json"
    completed = run_python(
        ROOT / "benchmarks" / "suite_benchmark.py", "--mutants", 2, "--json", result
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    figures = json.loads(result.read_text())["mutants"]
    assert figures["mutants"] == 2
    assert len(figures["seconds"]) == 3 and all(s > 0 for s in figures["seconds"].values())
    assert "one at a time / in process:" in completed.stdout


def test_suite_benchmark_sums_durations_by_xdist_group():
    spec = importlib.util.spec_from_file_location(
        "suite_benchmark", ROOT / "benchmarks" / "suite_benchmark.py"
    )
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    line = "106.44s setup    tests/test_book.py::test_every_page_of_the_toc_is_built@book"
    found = benchmark.DURATION.match(line)
    assert float(found["seconds"]) == 106.44 and benchmark.group_of(found["test"]) == "book"
    assert benchmark.group_of("tests/test_grade.py::test_stubs_get_nothing@graded-class") == (
        "graded-class"
    )
    assert benchmark.group_of("tests/test_norms.py::test_x[a@book-2]") == "(no group)"
