"""Shared paths and the built book for the test suite."""

import fcntl  # the course runs on Linux
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from addnorm_lib.grading import bubblewrap, cgroups
from tests.needs import require

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
BUILD_FLAGS = ["--builder", "html", "--warningiserror", "--nitpick", "--keep-going"]
# Tests that use `built_book` carry this mark: under `pytest -n N --dist loadgroup` they all run
# on one worker, one after the other, while the other workers run the rest of the suite.
BOOK_GROUP = pytest.mark.xdist_group("book")
# The browser tests use the same build on a worker of their own: while it is being built they wait
# on its lock (with one worker more than cores, a waiting worker costs no CPU), then they take
# their screenshots while the book's worker runs the other book tests.
BROWSER_GROUP = pytest.mark.xdist_group("browser")
# Module fixtures that each cost a whole grading run: the tests that use one are grouped the same
# way, so that one worker builds it once (under xdist every worker would build its own copy).
# Lets the grader grade a folder where it cannot build its sandbox (it stops otherwise); where it
# can, kernels run in it. UNSANDBOXED runs them without it wherever the tests run.
UNSANDBOXED = ("--no-sandbox",)
# Where the sandbox works but no group limits can be had (no cgroup, no systemd user scope), the
# grader stops unless told to grade without them.
UNLIMITED = (
    ("--no-group-limits",) if cgroups.cgroup_problem() and cgroups.systemd_run_problem() else ()
)
GRADE_ANYWHERE = UNLIMITED if bubblewrap.bubblewrap_problem() is None else UNSANDBOXED
FIXTURE_GROUPS = {
    "graded": "graded-class",
    "graded_by_the_grader": "mutants-through-the-grader",
    "unsandboxed": "hostile-control",  # also the value of test_hostile_sandbox's `run` parameter
    "sandboxed": "hostile-sandboxed",
    "warm_run": "hostile-warm",
    "course": "nbgrader-course",
}


def run_python(*args, **options) -> subprocess.CompletedProcess:
    """``python *args`` with this interpreter, output captured as text; a failure does not raise.

    Arguments are turned into strings, so paths may be passed as they are.
    """
    command = [sys.executable, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=False, **options)


def build(source: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [str(JUPYTER_BOOK), "build", str(source), *BUILD_FLAGS, *extra]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.fixture
def one_thread():
    """torch on one thread for the test, restored after: small models run faster on one thread
    than on several competing ones, and the cached grids were computed on one."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> Path:
    """The real book built from scratch in a temporary folder, every chapter executed: its html.

    Built once per test run: under xdist, the workers share one build folder and a lock, so
    a worker that needs the book while another builds it waits, then reuses that build.
    ADDNORM_BUILT_BOOK=/path/to/_build/html tests an existing build instead, to iterate on the
    tests without rebuilding; the full suite never sets it.
    """
    existing = os.environ.get("ADDNORM_BUILT_BOOK")
    if existing:
        return Path(existing).resolve()
    if "PYTEST_XDIST_WORKER" not in os.environ:  # not distributed: this process is the only one
        folder = tmp_path_factory.mktemp("book")
    else:  # the run's base temporary folder, which all workers share
        folder = tmp_path_factory.getbasetemp().parent / "book"
    folder.mkdir(exist_ok=True)
    html, failure = folder / "_build" / "html", folder / "build-failed.txt"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (html / "index.html").is_file() and not failure.is_file():
            completed = build(ROOT, "--path-output", str(folder))
            output = re.sub(r"\x1b\[[0-9;]*m", "", completed.stdout + completed.stderr)
            if completed.returncode != 0:
                failure.write_text(output[-6000:])
    assert not failure.is_file(), f"the book does not build:\n{failure.read_text()}"
    return html


def pytest_runtest_setup(item):
    """A test marked ``needs`` (tests/needs.py) is skipped where what it needs is missing, and
    fails instead under ``CI=true``."""
    for mark in item.iter_markers("needs"):
        require(**mark.kwargs)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Group the tests of FIXTURE_GROUPS (those that use one of its fixtures, or get its name as
    a parameter's value, as a fixture that picks its run by name does), and let `--dist
    loadgroup` group tests again under pytest 9.2 (pytest-xdist issue #1386).

    xdist 3.8 tags a grouped test by appending "@group" to `item._nodeid`, which pytest 9.2 no
    longer reads (node ids are now structured, in `item._id`), so the groups are silently lost.
    Redo the tag where xdist's did not take; a no-op once xdist's own works. If this ever stops
    working, `built_book` still builds only once, but a worker may wait for it.
    """
    if not config.getoption("loadgroup", default=False):
        return
    for item in items:
        callspec = getattr(item, "callspec", None)
        chosen = {v for v in callspec.params.values() if isinstance(v, str)} if callspec else set()
        for fixture in (set(getattr(item, "fixturenames", ())) | chosen) & set(FIXTURE_GROUPS):
            item.add_marker(pytest.mark.xdist_group(FIXTURE_GROUPS[fixture]))
        groups = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(groups)}")
