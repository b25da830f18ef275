"""The grader's two command names, and the light import that graded kernels rely on."""

import pytest

from tests.conftest import run_python
from tests.grading.conftest import SOLUTION

# What a graded kernel must not load: the grader's own dependencies.
HEAVY = ("nbformat", "jinja2", "addnorm_lib.grading.pipeline")


def test_python_m_addnorm_lib_grading_lists_every_flag():
    completed = run_python("-m", "addnorm_lib.grading", "--help")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("usage: python -m addnorm_lib.grading")
    for flag in ("--out", "--jobs", "--timeout", "--notebook-timeout", "--memory-mb", "--source"):
        assert flag in completed.stdout


@pytest.mark.slow
def test_the_old_name_python_m_addnorm_lib_grade_still_grades(tmp_path):
    completed = run_python("-m", "addnorm_lib.grade", SOLUTION, "--out", tmp_path)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "total" in completed.stdout and "10/10" in completed.stdout
    assert (tmp_path / "feedback" / "layernorm.ipynb.html").is_file()


def test_a_graded_kernel_imports_nothing_of_the_grader():
    code = (
        "import sys, addnorm_lib.grading._graded_kernel\n"
        f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"
    )
    completed = run_python("-c", code)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"
