"""The Dask runner: a class graded by a real ``dask scheduler`` and two ``dask worker`` processes
started on this machine gets the local runner's rows, loses no submission when a worker is
killed mid-run, and keeps the sandbox on the workers."""

import json
import multiprocessing
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import distributed
import nbformat
import pytest

from addnorm_lib.grading import assemble, bubblewrap, cluster, pipeline, sandbox
from addnorm_lib.grading import settings as settings_module
from addnorm_lib.grading.discover import Submission
from addnorm_lib.grading.judge import Grade
from addnorm_lib.grading.settings import Settings
from tests.conftest import ROOT, run_python
from tests.grading.dask_cluster import Cluster, kill_tree, running_cluster
from tests.grading.test_pipeline import (
    EXERCISE,
    SOLUTION,
    UNBIASED,
    solution,
    with_answer,
)
from tests.needs import needs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dask-cluster")]
NEEDS_SANDBOX = needs("the grader's sandbox (on the workers)", bubblewrap.bubblewrap_problem())

HACKED = ROOT / "HACKED-BY-A-DASK-WORKER"
WORKERS = 2
GRADER_SECONDS = 400


def write_class(folder: Path) -> None:
    """A class of 10: right, wrong, untouched, broken, a dying kernel, two attacks that only the
    sandbox stops, and another assignment; each student in a folder of their own."""
    students = {
        "ada/layernorm": solution(),
        "bo/layernorm": nbformat.read(EXERCISE, as_version=4),
        "cy/layernorm": with_answer("layer_norm", UNBIASED),
        "dee/layernorm": with_answer(
            "layer_norm", "from addnorm_lib.reference.norms import layer_norm\n"
        ),
        "eve/layernorm": with_answer(
            "layer_norm",
            UNBIASED + f"import pathlib\npathlib.Path({str(HACKED)!r}).write_text('hacked')\n",
        ),
        "fay/layernorm": with_answer("layer_norm_module", "import os\nos._exit(3)\n"),
        "gus/rmsnorm": nbformat.read(ROOT / "solutions" / "rmsnorm.ipynb", as_version=4),
        "hal/layernorm": solution(),
        "ivy/layernorm": solution(),
    }
    for name, notebook in students.items():
        path = folder / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)
    (folder / "jo").mkdir()
    (folder / "jo" / "layernorm.ipynb").write_text("{ not a notebook")


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("dask"), WORKERS) as cluster:
        yield cluster


@dataclass
class ClassRun:
    out: Path
    completed: subprocess.CompletedProcess
    done_at_kill: int | None = None  # submissions reported when a worker was killed

    @property
    def data(self) -> dict:
        return json.loads((self.out / "grades.json").read_text())

    def rows(self) -> dict[str, tuple]:
        """Per submission what decides its grade (not how long it took)."""
        return {
            grade["submission"]: (
                grade["assignment"],
                grade["status"],
                grade["reason"],
                grade["total"],
                tuple(
                    (c["grade_id"], c["points"], c["status"], c["message"]) for c in grade["cells"]
                ),
            )
            for grade in self.data["grades"]
        }


@pytest.fixture(scope="module")
def submissions(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("class")
    write_class(folder)
    return folder


OPTIONS = ("--timeout", "30", "--memory-mb", "2048")


@pytest.fixture(scope="module")
def local_run(submissions, tmp_path_factory) -> ClassRun:
    out = tmp_path_factory.mktemp("local-out")
    completed = run_python(
        "-m", "addnorm_lib.grading", submissions, "--out", out, "--jobs", "2", *OPTIONS
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return ClassRun(out, completed)


@pytest.fixture(scope="module")
def cluster_run(dask_cluster, submissions, tmp_path_factory) -> ClassRun:
    """The class graded on the cluster; one worker (and all it started) killed as soon as the
    first submission is reported, while the others are being graded."""
    out = tmp_path_factory.mktemp("cluster-out")
    command = [sys.executable, "-m", "addnorm_lib.grading", str(submissions), "--out", str(out)]
    command += ["--dask-scheduler", dask_cluster.address, *OPTIONS]
    records = out / "records"
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    ) as grader:
        deadline, done_at_kill = time.monotonic() + GRADER_SECONDS, None
        while grader.poll() is None and time.monotonic() < deadline:
            done = len(list(records.glob("*"))) if records.is_dir() else 0
            if done_at_kill is None and done >= 1:
                done_at_kill = done
                kill_tree(dask_cluster.workers[0])
            time.sleep(0.05)
        if grader.poll() is None:
            grader.kill()
        stdout, stderr = grader.communicate()
    completed = subprocess.CompletedProcess(command, grader.returncode, stdout, stderr)
    assert completed.returncode == 0, stderr[-3000:]
    return ClassRun(out, completed, done_at_kill)


@NEEDS_SANDBOX
def test_the_cluster_gives_the_local_runner_s_rows(local_run, cluster_run):
    assert len(local_run.rows()) == 10
    assert cluster_run.rows() == local_run.rows()
    assert (cluster_run.out / "grades.csv").read_text().count("\n") == 11


@NEEDS_SANDBOX
def test_a_worker_killed_mid_run_loses_no_submission(cluster_run):
    assert cluster_run.done_at_kill is not None and cluster_run.done_at_kill < 10
    assert len(cluster_run.rows()) == 10
    assert "graded 10 submissions" in cluster_run.completed.stdout, cluster_run.completed.stdout


@NEEDS_SANDBOX
def test_the_sandbox_holds_on_the_workers(cluster_run, local_run):
    data = cluster_run.data
    assert data["isolated"] is True and data["sandbox"] == "bubblewrap", data
    assert data["seccomp"].startswith("filter") and data["runner"] == "dask"
    assert len(data["workers"]) == WORKERS
    rows = cluster_run.rows()
    assert rows["dee/layernorm.ipynb"][4][0][1] == 0  # the reference is out of the kernel's reach
    assert not HACKED.exists()  # and so is the course's tree
    assert rows["ada/layernorm.ipynb"][3] == 10


# ----------------------------------------------------------------------------------------------
# Without a cluster: the runner's typed pieces


def test_read_gives_the_bytes_or_why_not(tmp_path):
    good, link = tmp_path / "good.ipynb", tmp_path / "link.ipynb"
    good.write_bytes(SOLUTION.read_bytes())
    link.symlink_to(good)
    settings = Settings()
    found = pipeline.read(Submission("good.ipynb", good), settings)
    assert found.raw == SOLUTION.read_bytes() and found.refused is None
    refused = pipeline.read(Submission("link.ipynb", link), settings)
    assert refused.raw is None and refused.refused[0] == "malformed"
    assert "symbolic link" in refused.refused[1]
    gone = pipeline.read(Submission("gone.ipynb", tmp_path / "gone.ipynb"), settings)
    assert gone.raw is None and gone.refused is not None


def test_a_read_submission_is_graded_from_its_bytes_not_its_path(tmp_path):
    """A worker on another machine has no such path: what was read is what is graded, and a
    file refused where it was read is refused alike."""
    nowhere = tmp_path / "elsewhere" / "layernorm.ipynb"
    assignments = assemble.load_assignments(ROOT / "solutions")
    settings = Settings(no_sandbox=True)
    with sandbox.open_sandbox(settings) as box:
        refused = Submission("x.ipynb", nowhere, refused=("malformed", "a symbolic link"))
        grade = pipeline.grade_submission(refused, assignments, settings, box)
    assert (grade.status, grade.reason, grade.assignment) == (
        "malformed",
        "a symbolic link",
        "layernorm",
    )
    assert grade.max_total == 10


def daemonic_problem(queue) -> None:
    queue.put(cluster.worker_problem(Settings(no_sandbox=True)))


def test_a_daemonic_worker_is_told_how_to_start():
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=daemonic_problem, args=(queue,), daemon=True)
    process.start()
    problem = queue.get(timeout=30)
    process.join()
    assert "daemonic" in problem and cluster.WORKER_COMMAND in problem
    assert cluster.worker_problem(Settings(no_sandbox=True)) is None  # this process is not


def test_a_submission_the_cluster_gave_up_on_gets_a_row_that_says_why():
    submission = Submission("ada/layernorm.ipynb", Path("ada/layernorm.ipynb"))
    lost = cluster.lost_grade(submission, distributed.KilledWorker("key", "worker", 3))
    assert isinstance(lost, Grade) and lost.status == "error"
    assert lost.submission == "ada/layernorm.ipynb" and "died more than 3 times" in lost.reason


def test_workers_that_differ_say_so_in_the_confinement():
    same = {"sandbox": "bubblewrap", "group_limits": "cgroup"}
    reports = [
        cluster.WorkerReport("tcp://a:1", None, same, 2, 10),
        cluster.WorkerReport("tcp://b:1", None, {**same, "group_limits": "none: x"}, 1, 11),
    ]
    merged = cluster.cluster_confinement(reports)
    assert merged["sandbox"] == "bubblewrap" and merged["runner"] == "dask"
    assert "cgroup" in merged["group_limits"] and "none: x" in merged["group_limits"]
    assert merged["workers"] == {"tcp://a:1": 2, "tcp://b:1": 1}


def test_an_unreachable_scheduler_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 1)
    settings = Settings(dask_scheduler="tcp://127.0.0.1:9", out=tmp_path)
    submission = Submission("a.ipynb", SOLUTION)
    assert cluster.grade_on_cluster([submission], {}, settings, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert err.count("\n") == 1


def test_a_worker_keeps_its_sandbox_for_a_run_that_differs_only_on_the_grader_s_machine():
    """Another --out, --source, --resume or scheduler is the same sandbox on a worker (its zygote
    stays warm between runs); another limit is not; --jobs is the worker's own thread count."""
    worker = types.SimpleNamespace(state=types.SimpleNamespace(nthreads=3))
    first = Settings(out=Path("a"), source=Path("s"), dask_scheduler="tcp://x:1", jobs=9)
    second = Settings(out=Path("b"), resume=True, dask_scheduler="tcp://y:2")
    assert cluster.worker_settings(first, worker) == cluster.worker_settings(second, worker)
    assert cluster.worker_settings(first, worker).jobs == 3
    limited = Settings(out=Path("a"), cell_timeout=5.0)
    assert cluster.worker_settings(limited, worker) != cluster.worker_settings(first, worker)


def test_a_worker_with_other_grading_code_is_refused():
    """A worker started before the course was updated grades with the code it imported then:
    the run stops, naming it, rather than mix two graders' grades."""
    fine = cluster.WorkerReport("tcp://a:1", None, {}, 1, 10, "digest-here")
    stale = cluster.WorkerReport("tcp://b:1", None, {}, 1, 11, "digest-before")
    broken = cluster.WorkerReport("tcp://c:1", "no bubblewrap", {}, 1, 12, "digest-here")
    assert cluster.unfit_workers([fine], "digest-here") == []
    assert cluster.unfit_workers([fine, stale, broken], "digest-here") == [
        ("tcp://b:1", cluster.STALE),
        ("tcp://c:1", "no bubblewrap"),
    ]
    assert settings_module.code_digest() == cluster.IMPORTED_CODE  # this process: the same


def test_a_worker_that_joins_with_other_grading_code_refuses_its_submissions(monkeypatch):
    """A worker that joined after the run was checked: its first submission gets an error row
    that names it, and no sandbox is opened on it."""
    worker = types.SimpleNamespace(address="tcp://late:1", state=types.SimpleNamespace(nthreads=1))
    monkeypatch.setattr(distributed, "get_worker", lambda: worker)
    opened = []
    monkeypatch.setattr(cluster, "worker_sandbox", lambda settings: opened.append(settings))
    submission = Submission("ada/layernorm.ipynb", Path("ada/layernorm.ipynb"), raw=b"{}")
    grade = cluster.grade_on_worker(submission, {}, Settings(), "the grading machine's code")
    assert grade.status == "error" and grade.submission == "ada/layernorm.ipynb"
    assert grade.reason.startswith("worker tcp://late:1 cannot grade: it runs other grading code")
    assert opened == []
