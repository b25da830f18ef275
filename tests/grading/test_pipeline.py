"""The batch grader on broken and hostile submissions: each gets a row and no undeserved points.

One grading run over a folder of generated submissions (module fixture); each test reads its row.
"""

import contextlib
import csv
import importlib.util
import itertools
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from addnorm_lib.grading import bubblewrap, cgroups, pipeline
from tests.conftest import GRADE_ANYWHERE, ROOT, run_python
from tests.needs import needs

pytestmark = pytest.mark.slow

SOLUTION = ROOT / "solutions" / "layernorm.ipynb"
EXERCISE = ROOT / "exercises" / "layernorm.ipynb"
MAX_TOTAL = 10
GRADER = ("-m", "addnorm_lib.grading")
# Without the sandbox (no bubblewrap here), a graded kernel can read the references and write the
# course itself: the submissions that do so are left out, so the suite never damages its tree.
SANDBOX_PROBLEM = bubblewrap.bubblewrap_problem()
JAILED = SANDBOX_PROBLEM is None
NEEDS_JAIL = needs("the grader's sandbox", SANDBOX_PROBLEM)
FORWARD, BACKWARD, MODULE = "test_layer_norm", "test_layer_norm_backward", "test_layer_norm_module"
REFERENCE = ROOT / "addnorm_lib" / "reference"
# The reference compiled, as any run that imports it leaves it (unless PYTHONDONTWRITEBYTECODE).
NORMS_BYTECODE = Path(importlib.util.cache_from_source(str(REFERENCE / "norms.py")))
BACK_DOORS = ("reads_reference_bytecode", "imports_reference_mistakes")
UNBIASED = "def layer_norm(x, gamma, beta, eps=1e-5):\n    return gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta\n"  # noqa: E501

# A wrong answer (unbiased variance) that, once the first check has recorded it, raises in nbval's
# own words for a timeout: the test cell fails at once with "Timeout of 60 seconds exceeded".
SAYS_TIMEOUT = (
    "import os\n"
    "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    if os.listdir(os.environ.get('ADDNORM_OBSERVATIONS', '.')):\n"
    "        raise RuntimeError('Timeout of 60 seconds exceeded')\n"
    "    return gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta\n"  # noqa: E501
)


def solution():
    return nbformat.read(SOLUTION, as_version=4)


def cell(nb, grade_id):
    (found,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return found


def with_answer(grade_id, source, nb=None):
    nb = nb or solution()
    cell(nb, grade_id).source = source
    return nb


def submissions():
    """name -> notebook (or raw text for files that are not notebooks)."""
    cases = {
        "correct": solution(),
        "stubs": nbformat.read(EXERCISE, as_version=4),
        "not_json": "this is { not json",
        "not_a_notebook": '{"hello": "world"}',
        "same_name/a/layernorm": solution(),
        "same_name/b/layernorm": with_answer("layer_norm", UNBIASED),
        "kernelspec": solution(),
    }
    cases["kernelspec"].metadata.kernelspec = {"name": "conda-env-elsewhere", "display_name": "x"}

    deleted = solution()
    deleted.cells.remove(cell(deleted, "layer_norm_module"))
    cases["answer_deleted"] = deleted

    edited = with_answer("layer_norm", UNBIASED)
    cell(edited, FORWARD).source = "pass"
    cell(edited, FORWARD).metadata["nbgrader"]["points"] = 100
    cases["test_edited"] = edited

    removed = with_answer("layer_norm", UNBIASED)
    removed.cells = [c for c in removed.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    cases["tests_deleted"] = removed

    renamed = solution()
    cell(renamed, BACKWARD).metadata["nbgrader"].update(points=50, grade_id="free_points")
    cases["metadata_edited"] = renamed

    markers = with_answer("layer_norm", "# NBVAL_SKIP\n# NBVAL_RAISES_EXCEPTION\n" + UNBIASED)
    cell(markers, FORWARD).metadata["tags"] = ["nbval-skip", "raises-exception"]
    cell(markers, FORWARD).source = "# NBVAL_SKIP\n" + cell(markers, FORWARD).source
    cases["nbval_markers"] = markers

    cases["infinite_loop"] = with_answer(
        "layer_norm", "def layer_norm(x, gamma, beta, eps=1e-5):\n    while True:\n        pass\n"
    )
    cases["says_timeout"] = with_answer("layer_norm", SAYS_TIMEOUT)
    cases["os_exit"] = with_answer("layer_norm_module", "import os\nos._exit(3)\n")
    cases["sys_exit"] = with_answer("layer_norm", "import sys\nsys.exit(0)\n")
    cases["huge_output"] = with_answer(
        "layer_norm", cell(solution(), "layer_norm").source + "\nprint('x' * 50_000_000)\n"
    )
    cases["memory_blowup"] = with_answer(
        "layer_norm", "hog = np.ones((40_000, 40_000))\n" + cell(solution(), "layer_norm").source
    )
    cases["input"] = with_answer("layer_norm", "name = input('your name? ')\n")
    cases["stderr_warnings"] = with_answer(
        "layer_norm",
        cell(solution(), "layer_norm").source
        + (
            "\nimport sys, warnings\nwarnings.warn('a harmless warning')\n"
            "print('noise on stderr', file=sys.stderr)\n"
        ),
    )
    no_metadata = solution()
    del no_metadata.metadata["addnorm"]
    cases["hw3_layernorm_final"] = no_metadata

    cases["monkeypatch"] = with_answer(
        "layer_norm",
        UNBIASED
        + (
            "np.testing.assert_allclose = lambda *a, **k: None\n"
            "np.allclose = lambda *a, **k: True\n"
            "import addnorm_lib.checks as c\n"
            "import addnorm_lib.checks._core as core\n"
            "c.check_layer_norm = lambda *a, **k: print('all good')\n"
            "core.compare = lambda *a, **k: None\n"
        ),
    )
    cases["forged_record"] = with_answer(
        "layer_norm",
        UNBIASED
        + (
            "import os, numpy\n"
            "import addnorm_lib.checks as c\n"
            "folder = os.environ.get('ADDNORM_OBSERVATIONS', '.')\n"
            "numpy.savez(os.path.join(folder, 'check_layer_norm-seed0.npz'), __meta__=numpy.array('{}'))\n"  # noqa: E501
            "c.check_layer_norm = lambda *a, **k: None\n"
        ),
    )
    residuals = nbformat.read(ROOT / "solutions" / "residuals.ipynb", as_version=4)
    cases["residuals_correct"] = residuals
    if JAILED:
        cases |= jailbreaks()
    return cases


def jailbreaks():
    """name -> notebook: submissions that only the jail stops (they read or write the course)."""
    cases = {}
    cases["writes_files"] = with_answer(
        "layer_norm",
        UNBIASED
        + (
            "import pathlib\n"
            f"for target in [{str(ROOT / 'HACKED')!r},\n"
            f"               {str(ROOT / 'addnorm_lib' / 'grading' / 'pipeline.py')!r}]:\n"
            "    try:\n"
            "        pathlib.Path(target).write_text('hacked')\n"
            "    except OSError:\n"
            "        pass\n"
        ),
    )
    cases["imports_reference"] = with_answer(
        "layer_norm", "from addnorm_lib.reference.norms import layer_norm\n"
    )
    cases["reads_solutions"] = with_answer(
        "layer_norm",
        (
            "import json\n"
            f"nb = json.load(open({str(SOLUTION)!r}))\n"
            "exec(''.join(c for c in nb['cells'] if 'def layer_norm(' in ''.join(c['source']))"
            "['source'])\n"
        ),
    )
    cases["residuals_imports_reference"] = with_answer(
        "blocks",
        "from addnorm_lib.reference.residuals import plain_block, residual_block\n",
        nbformat.read(ROOT / "solutions" / "residuals.ipynb", as_version=4),
    )
    cases["deepnorm_imports_reference"] = with_answer(
        "deepnorm_residual",
        "from addnorm_lib.reference.deepnorm import deepnorm_residual\n",
        nbformat.read(ROOT / "solutions" / "deepnorm.ipynb", as_version=4),
    )
    return cases | back_doors()


def back_doors():
    """name -> notebook: other ways to the reference: its compiled files, its other modules."""
    bytecode = (
        "import marshal, os\n"
        f"reference = {str(REFERENCE)!r}\n"
        "if '__pycache__' in os.listdir(reference):\n"
        "    cache = os.path.join(reference, '__pycache__')\n"
        "    for name in os.listdir(cache):\n"
        "        if name.startswith('norms.'):\n"
        "            with open(os.path.join(cache, name), 'rb') as compiled:\n"
        "                exec(marshal.loads(compiled.read()[16:]))  # defines layer_norm\n"
    )
    mistakes = (
        "from addnorm_lib.reference.mistakes.layernorm import _ln_over\n"
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    return _ln_over(-1)(x, gamma, beta, eps).astype(x.dtype)\n"
    )
    return {
        "reads_reference_bytecode": with_answer("layer_norm", bytecode),
        "imports_reference_mistakes": with_answer("layer_norm", mistakes),
    }


@contextlib.contextmanager
def reference_bytecode():
    """The reference's compiled norms on disk while grading; removed after, unless it was there."""
    existed = NORMS_BYTECODE.exists()
    py_compile.compile(str(REFERENCE / "norms.py"), cfile=str(NORMS_BYTECODE), doraise=True)
    try:
        yield
    finally:
        if not existed:
            NORMS_BYTECODE.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: others' bytecode is there too
                NORMS_BYTECODE.parent.rmdir()


OPTIONS = ("--jobs", 2, "--timeout", 20, "--memory-mb", 2048, *GRADE_ANYWHERE)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    for name, content in submissions().items():
        path = folder / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        else:
            nbformat.write(content, path)
    unrelated = nbformat.writes(solution())
    unrelated = unrelated.replace('"assignment": "layernorm"', '"assignment": "other"')
    (folder / "unrelated_homework.ipynb").write_text(unrelated)
    out = tmp_path_factory.mktemp("out")
    start = time.monotonic()
    with reference_bytecode() if JAILED else contextlib.nullcontext():
        completed = run_python(*GRADER, folder, "--out", out, *OPTIONS)
    seconds = time.monotonic() - start
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = {row["submission"]: row for row in csv.DictReader((out / "grades.csv").open())}
    details = {g["submission"]: g for g in json.loads((out / "grades.json").read_text())["grades"]}
    return {
        "rows": rows,
        "details": details,
        "out": out,
        "folder": folder,
        "seconds": seconds,
        "stdout": completed.stdout,
    }


def row(graded, name):
    return graded["rows"][f"{name}.ipynb"]


def points(graded, name):
    found = row(graded, name)
    return {test: float(found[test]) for test in (FORWARD, BACKWARD, MODULE)}


def graded_cell(graded, name, grade_id) -> dict:
    (found,) = [c for c in graded["details"][f"{name}.ipynb"]["cells"] if c["grade_id"] == grade_id]
    return found


def message(graded, name, grade_id):
    return graded_cell(graded, name, grade_id)["message"]


def cell_status(graded, name, grade_id):
    return graded_cell(graded, name, grade_id)["status"]


def test_every_submission_has_a_row(graded):
    expected = {f"{name}.ipynb" for name in submissions()} | {"unrelated_homework.ipynb"}
    assert set(graded["rows"]) == expected
    columns = {"submission", "assignment", "status", FORWARD, "total", "max_total"}
    assert set(graded["rows"]["correct.ipynb"]) >= columns


@NEEDS_JAIL
def test_the_report_says_how_kernels_were_confined(graded):
    report = json.loads((graded["out"] / "grades.json").read_text())
    assert report["isolated"] and report["sandbox"] == "bubblewrap"
    problem = cgroups.cgroup_problem()  # else a class grades only with --no-group-limits
    assert report["group_limits"] == (
        "cgroup" if problem is None else f"none: {pipeline.NO_GROUP_LIMITS}"
    )


@NEEDS_JAIL
def test_every_notebook_ran_in_a_warm_kernel(graded):
    not_run = ("malformed", "unknown_assignment")
    executed = [r for r in graded["rows"].values() if r["status"] not in not_run]
    recovered = 1  # os_exit's kernel died before its hidden tests: they ran in a second kernel
    assert f"; {len(executed) + recovered} warm kernels;" in graded["stdout"], graded["stdout"]


def test_correct_submission_gets_every_point(graded):
    assert row(graded, "correct")["status"] == "ok"
    assert float(row(graded, "correct")["total"]) == MAX_TOTAL


def test_stubs_get_nothing(graded):
    assert row(graded, "stubs")["status"] == "ok" and float(row(graded, "stubs")["total"]) == 0


@pytest.mark.parametrize("name", ["not_json", "not_a_notebook"])
def test_malformed_files(graded, name):
    assert row(graded, name)["status"] == "malformed"
    assert "not a valid notebook" in graded["details"][f"{name}.ipynb"]["reason"]


def test_unknown_assignment(graded):
    assert row(graded, "unrelated_homework")["status"] == "unknown_assignment"


def test_same_file_name_in_two_folders(graded):
    assert float(row(graded, "same_name/a/layernorm")["total"]) == MAX_TOTAL
    assert points(graded, "same_name/b/layernorm")[FORWARD] == 0
    assert "unbiased variance" in message(graded, "same_name/b/layernorm", FORWARD)


def test_other_kernelspec_is_ignored(graded):
    assert float(row(graded, "kernelspec")["total"]) == MAX_TOTAL


def test_deleted_answer_cell_is_graded_as_unanswered(graded):
    assert points(graded, "answer_deleted") == {FORWARD: 3, BACKWARD: 3, MODULE: 0}
    assert any("missing" in n for n in graded["details"]["answer_deleted.ipynb"]["notes"])


TAMPERING = ["test_edited", "tests_deleted", "nbval_markers", "monkeypatch", "forged_record"]


@pytest.mark.parametrize("name", [*TAMPERING, pytest.param("writes_files", marks=NEEDS_JAIL)])
def test_tampering_earns_nothing(graded, name):
    assert points(graded, name)[FORWARD] == 0, message(graded, name, FORWARD)
    assert row(graded, name)["max_total"] == str(MAX_TOTAL)


def test_edited_metadata_changes_no_points(graded):
    assert row(graded, "metadata_edited")["max_total"] == str(MAX_TOTAL)
    assert float(row(graded, "metadata_edited")["total"]) == MAX_TOTAL
    assert "free_points" not in graded["rows"]["metadata_edited.ipynb"]


def test_a_timeout_does_not_hide_the_other_cells(graded):
    assert row(graded, "infinite_loop")["status"] == "timeout"
    assert "Timeout" in message(graded, "infinite_loop", FORWARD)
    assert cell_status(graded, "infinite_loop", FORWARD) == "timeout"
    assert points(graded, "infinite_loop") == {FORWARD: 0, BACKWARD: 3, MODULE: 4}


def test_a_cell_that_says_it_timed_out_is_judged(graded):
    """A timeout is the grader's own clock running out, not a message of the cell's: a cell
    that raises nbval's words for a timeout at once is failed on its recorded wrong answer."""
    found = graded["details"]["says_timeout.ipynb"]
    assert (found["status"], found["reason"]) == ("ok", "")
    assert found["seconds"] < 20  # the cell timeout: no cell ran that long
    assert cell_status(graded, "says_timeout", FORWARD) == "failed"
    assert "unbiased variance" in message(graded, "says_timeout", FORWARD)
    assert points(graded, "says_timeout") == {FORWARD: 0, BACKWARD: 3, MODULE: 4}


def test_a_dead_kernel_is_detected_quickly(graded):
    """The kernel dies in the module's answer cell, after the forward and backward tests passed:
    their hidden tests run in the recovery run, and they keep their points; the row still says
    where the first run's kernel died."""
    found = row(graded, "os_exit")
    assert (found["status"], found["reason"]) == ("kernel_died", "the kernel died in code cell 7")
    seconds = {
        name: graded["details"][f"{name}.ipynb"]["seconds"] for name in ("os_exit", "correct")
    }
    # Two runs (the recovery's too), neither waiting out a 20 s cell timeout.
    assert seconds["os_exit"] < seconds["correct"] + 10, seconds
    assert points(graded, "os_exit") == {FORWARD: 3, BACKWARD: 3, MODULE: 0}
    assert message(graded, "os_exit", FORWARD) == ""


@pytest.mark.parametrize("name", ["sys_exit", "input"])
def test_exits_and_input_lose_only_their_exercise(graded, name):
    assert points(graded, name) == {FORWARD: 0, BACKWARD: 3, MODULE: 4}


def test_warnings_on_stderr_cost_nothing(graded):
    assert float(row(graded, "stderr_warnings")["total"]) == MAX_TOTAL


def test_the_file_name_names_the_assignment_when_metadata_does_not(graded):
    assert row(graded, "hw3_layernorm_final")["assignment"] == "layernorm"
    assert float(row(graded, "hw3_layernorm_final")["total"]) == MAX_TOTAL


def test_the_notebook_wall_clock_limit_stops_a_submission_and_its_kernel(tmp_path):
    loop = with_answer("layer_norm", "while True:\n    pass\n")
    nbformat.write(loop, tmp_path / "layernorm.ipynb")
    # A long TMPDIR (longer than a socket path may be) must not break grading either.
    temporary = tmp_path / ("a-long-temporary-folder-" * 4)
    temporary.mkdir()
    limits = ["--out", tmp_path / "out", "--timeout", 60, "--notebook-timeout", 8]
    env = {**os.environ, "TMPDIR": str(temporary)}  # this run's processes carry it
    completed = run_python(*GRADER, tmp_path / "layernorm.ipynb", *limits, env=env)
    assert completed.returncode == 0, completed.stderr
    (found,) = json.loads((tmp_path / "out" / "grades.json").read_text())["grades"]
    assert found["status"] == "timeout" and "wall-clock" in found["reason"]
    assert found["seconds"] < 30
    survivors = processes_whose_environment_names(str(temporary))
    assert not survivors, f"processes of the graded notebook left running: {survivors}"


def processes_whose_environment_names(text: str) -> list[int]:
    """PIDs of the processes with ``text`` in the value of an environment variable."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(text in value for value in process.environ().values()):
                found.append(process.pid)
    return found


def test_huge_output_is_survived_and_truncated(graded):
    assert float(row(graded, "huge_output")["total"]) == MAX_TOTAL
    feedback = graded["out"] / "feedback" / "huge_output.ipynb.html"
    assert feedback.stat().st_size < 100_000


def test_memory_blowup_is_capped(graded):
    assert points(graded, "memory_blowup")[FORWARD] == 0
    assert points(graded, "memory_blowup")[BACKWARD] == 3


@NEEDS_JAIL
def test_reference_solutions_are_not_reachable(graded):
    for name in ("imports_reference", "reads_solutions"):
        assert points(graded, name)[FORWARD] == 0, message(graded, name, FORWARD)
    assert "NameError" in message(graded, "imports_reference", FORWARD)


def test_a_second_assignment_in_the_same_folder(graded):
    found = row(graded, "residuals_correct")
    assert (found["assignment"], found["total"], found["max_total"]) == ("residuals", "8", "8")
    assert found[FORWARD] == "" and row(graded, "correct")["test_blocks"] == ""


@NEEDS_JAIL
@pytest.mark.parametrize("name", BACK_DOORS)
def test_the_reference_has_no_back_door(graded, name):
    """Neither its compiled files nor its other modules (the mistakes) are there to be found."""
    assert points(graded, name)[FORWARD] == 0, message(graded, name, FORWARD)
    assert "NameError" in message(graded, name, FORWARD)


@NEEDS_JAIL
def test_every_assignments_reference_is_hidden(graded):
    stolen = row(graded, "residuals_imports_reference")
    assert stolen["test_blocks"] == "0" and stolen["test_blocks_backward"] == "4"
    deepnorm = row(graded, "deepnorm_imports_reference")  # the DeepNorm reference is hidden too
    assert (deepnorm["test_deepnorm_residual"], deepnorm["test_deepnorm_init"]) == ("0", "2")


@NEEDS_JAIL
def test_files_written_by_a_submission_change_nothing(graded):
    assert not (ROOT / "HACKED").exists()
    assert "hacked" not in (ROOT / "addnorm_lib" / "grading" / "pipeline.py").read_text()[:100]


def test_feedback_names_hidden_tests_but_hides_their_code(graded):
    page = (graded["out"] / "feedback" / "same_name__b__layernorm.ipynb.html").read_text()
    assert "includes hidden tests" in page and "unbiased variance" in page
    assert "seed=2024" not in page and "BEGIN HIDDEN" not in page and "\x1b[" not in page


def test_resume_keeps_ok_grades_and_grades_the_rest_again(graded, tmp_path):
    """Part of the class again, into a copy of its reports, with the same settings: the ``ok``
    rows are kept (no kernel starts for them), a ``malformed`` one is graded again."""
    out = shutil.copytree(graded["out"], tmp_path / "out")
    folder = tmp_path / "submissions"
    folder.mkdir()
    names = ("correct", "stubs", "hw3_layernorm_final", "says_timeout", "not_json")
    for name in names:
        shutil.copy(graded["folder"] / f"{name}.ipynb", folder)
    completed = run_python(*GRADER, folder, "--out", out, "--resume", *OPTIONS)
    assert completed.returncode == 0, completed.stderr[-3000:]
    # Each graded submission prints "[k/n] name: status" on stderr.
    regraded = re.findall(r"^\[\d+/\d+\] (.+?): ", completed.stderr, re.MULTILINE)
    assert regraded == ["not_json.ipynb"], completed.stderr
    assert f"graded {len(names)} submissions" in completed.stdout
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert rows == {f"{name}.ipynb": graded["rows"][f"{name}.ipynb"] for name in names}


def test_a_learner_grades_one_notebook_and_sees_a_table(tmp_path):
    completed = run_python(*GRADER, EXERCISE, "--out", tmp_path)
    assert completed.returncode == 0
    assert "total" in completed.stdout and "0/10" in completed.stdout


def test_an_empty_folder_is_reported(tmp_path):
    (tmp_path / "empty").mkdir()
    completed = run_python(*GRADER, tmp_path / "empty", "--out", tmp_path / "out")
    assert completed.returncode == 0 and "no notebooks found" in completed.stderr
    assert (tmp_path / "out" / "grades.csv").read_text().startswith("submission,")


def test_a_missing_path_is_an_error(tmp_path):
    completed = run_python(*GRADER, tmp_path / "nowhere", "--out", tmp_path / "out")
    assert completed.returncode == 2 and "no such file" in completed.stderr


def test_without_the_sandbox_grading_still_works():
    """Without the sandbox (where it cannot be built) the grades are the same."""
    result = pipeline.grade_one(SOLUTION, no_sandbox=True)
    assert result.status == "ok" and result.total == MAX_TOTAL
    stubs = pipeline.grade_one(EXERCISE, no_sandbox=True)
    assert stubs.status == "ok" and stubs.total == 0


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def as_nobody(python: str, folder: Path, *args, path: str = "") -> subprocess.CompletedProcess:
    """``python *args`` as the user nobody, in ``folder``, with HOME there (and ``path`` first
    on PATH, if given).

    The one form in which the test runs the grader and in which its probe runs Python: a probe
    that runs anything else (another command line, another folder) proves nothing about the test.
    """
    first = [f"PATH={path}:{os.environ.get('PATH', '/usr/bin:/bin')}"] if path else []
    command = [*AS_NOBODY, "env", f"HOME={folder}", *first, python, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=folder)


PROBE = ("-c", "import pathlib, addnorm_lib.grading; pathlib.Path('probe').write_text('ok')")


def bridged_pythons(folder: Path):
    """Pythons nobody may be able to run, with this environment's packages, to probe in turn.

    The suite's interpreter often lives where nobody may not go (pyenv's under /root, mode
    0700). A system Python of the same version, in a fresh virtual environment whose .pth file
    adds this environment's site-packages, runs the same packages (and this course) as nobody.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    bases = [shutil.which(version), f"/usr/bin/{version}", f"/usr/local/bin/{version}"]
    ours = sysconfig.get_paths()["purelib"]
    for n, base in enumerate(dict.fromkeys(b for b in bases if b and os.access(b, os.X_OK))):
        venv = folder / f"python-{n}"
        created = subprocess.run(
            [base, "-m", "venv", "--without-pip", str(venv)], capture_output=True, check=False
        )
        python = venv / "bin" / "python"
        if created.returncode == 0:
            where = [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
            site = subprocess.run(where, capture_output=True, text=True, check=True).stdout
            Path(site.strip(), "addnorm-suite.pth").write_text(
                f"import site; site.addsitedir({ours!r})\n"
            )
            yield str(python)


@pytest.fixture
def nobody_folder():
    """(python, folder): a folder nobody can write and a Python nobody can run, both probed."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to switch to the user nobody) and setpriv")
    namespaces = subprocess.run(
        [*AS_NOBODY, "unshare", "--user", "--map-root-user", "--mount", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if namespaces.returncode != 0:
        pytest.skip(f"this machine gives unprivileged users no namespaces: {namespaces.stderr}")
    folder = Path(tempfile.mkdtemp(prefix="addnorm-nobody-"))
    folder.chmod(0o777)
    try:
        tried = []
        for python in itertools.chain([sys.executable], bridged_pythons(folder)):
            probe = as_nobody(python, folder, *PROBE)
            if probe.returncode == 0 and (folder / "probe").read_text() == "ok":
                yield python, folder
                return
            tried.append(f"{python}: {probe.stderr.strip()[-300:]}")
        pytest.skip(
            "no Python that nobody can run here, or no folder nobody can write: " + "; ".join(tried)
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_an_unprivileged_instructor_gets_the_same_sandbox(nobody_folder):
    """Without root the sandbox is the same (bubblewrap needs only user namespaces): the
    references are still out of reach. The cgroups of root's are not the instructor's to write
    (and this machine's systemd gives nobody a scope): with --no-group-limits the report and
    the summary say the run was unlimited."""
    python, folder = nobody_folder
    submitted = folder / "submissions"
    submitted.mkdir(mode=0o777)
    stolen = jailbreaks()
    cases = {name: stolen[name] for name in ("imports_reference", "reads_solutions")}
    cases["correct"] = solution()
    for name, nb in cases.items():
        nbformat.write(nb, submitted / f"{name}.ipynb")
    options = ("--out", folder / "out", "--jobs", 2, "--no-group-limits")
    completed = as_nobody(python, folder, *GRADER, submitted, *options)
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads((folder / "out" / "grades.json").read_text())
    totals = {g["submission"]: g["total"] for g in report["grades"]}
    assert report["isolated"] and report["sandbox"] == "bubblewrap", completed.stderr
    assert pipeline.NO_GROUP_LIMITS in report["group_limits"], report["group_limits"]
    assert f"no group limits ({pipeline.NO_GROUP_LIMITS})" in completed.stdout
    assert "no group limits" in completed.stderr  # and the warning
    assert totals == {
        "correct.ipynb": MAX_TOTAL,
        "imports_reference.ipynb": 7,
        "reads_solutions.ipynb": 7,
    }


def two_submissions(folder: Path) -> Path:
    """A folder nobody can read with two copies of the solution in it (a class, however small)."""
    submitted = folder / "submissions"
    submitted.mkdir(mode=0o777)
    for name in ("ada", "bo"):
        shutil.copy(SOLUTION, submitted / f"{name}.ipynb")
    return submitted


def test_an_unprivileged_class_without_group_limits_is_stopped(nobody_folder):
    """The same instructor without --no-group-limits: one line says how to get group limits,
    and nothing is graded."""
    python, folder = nobody_folder
    submitted = two_submissions(folder)
    completed = as_nobody(python, folder, *GRADER, submitted, "--out", folder / "out")
    assert completed.returncode == 2, completed.stderr[-2000:]
    (said,) = completed.stderr.splitlines()
    assert said.startswith("error: grading several notebooks without group limits"), said
    assert "systemd-run --user --scope" in said and "--no-group-limits" in said
    assert not (folder / "out" / "grades.json").exists()


FAKE_SYSTEMD_RUN = """#!/bin/sh
# Records how it was called (and whether the grader's marker was set), then runs the command;
# called from inside a scope it made (a grader that runs itself again, and again), it fails.
echo "${ADDNORM_GRADER_SCOPE:-unmarked} $*" >> LOG
[ -z "$FAKE_SCOPE" ] || exit 1
export FAKE_SCOPE=1
for last; do :; done
case " $* " in
  *" -- "*) while [ "$1" != "--" ]; do shift; done; shift; exec "$@" ;;
esac
exec "$last"
"""


def test_without_cgroups_the_grader_reruns_itself_once_in_a_delegated_scope(nobody_folder):
    """Where `systemd-run --user --scope` works (a stand-in on PATH here: this machine has no
    user bus), the grader runs itself again in a delegated scope with the same arguments, marked;
    the run in the scope does not run itself again: where the scope offers no controllers (as
    this stand-in's, which makes none), it stops and says why."""
    python, folder = nobody_folder
    submitted = two_submissions(folder)
    fake_bin, log = folder / "bin", folder / "systemd-run.log"
    fake_bin.mkdir(mode=0o755)
    (fake_bin / "systemd-run").write_text(FAKE_SYSTEMD_RUN.replace("LOG", str(log)))
    (fake_bin / "systemd-run").chmod(0o755)
    arguments = [str(submitted), "--out", str(folder / "out"), "--jobs", "2"]
    completed = as_nobody(python, folder, *GRADER, *arguments, path=str(fake_bin))
    assert completed.returncode == 2, completed.stderr[-2000:]
    probe, rerun = log.read_text().splitlines()
    assert probe == "unmarked --user --scope --quiet -p Delegate=yes true"
    scope = "1 --user --scope --quiet -p Delegate=yes -- "
    assert rerun.startswith(scope) and rerun.endswith(" ".join([*GRADER, *arguments])), rerun
    (said,) = completed.stderr.splitlines()  # only the run in the scope said anything
    assert "in the scope systemd-run made:" in said and "--no-group-limits" in said, said


def test_a_long_tmpdir_still_grades(tmp_path):
    """Sockets (the fork server's, the kernels' IPC sockets) cannot have paths over 107 bytes."""
    temporary = tmp_path / ("a-long-temporary-folder-" * 4)
    temporary.mkdir()
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in ("ada", "bo"):
        shutil.copy(ROOT / "solutions" / "deepnorm.ipynb", folder / f"{name}.ipynb")
    completed = run_python(
        *GRADER,
        folder,
        "--out",
        tmp_path / "out",
        *GRADE_ANYWHERE,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    assert completed.returncode == 0, completed.stderr
    assert "2 ok" in completed.stdout, completed.stdout
    assert ("2 warm kernels" in completed.stdout) == JAILED, completed.stdout
