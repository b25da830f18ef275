"""A pytest plugin that records each notebook cell nbval runs: its outcome and nbgrader metadata.

Loaded by the grader as ``-p addnorm_lib.grading._nbval_grades --addnorm-grades=FILE``. It runs
in the pytest process, not in the notebook's kernel, so notebook code cannot reach it. It also
fixes two nbval behaviours that a grader cannot live with:

- a dead kernel (``os._exit``, a crash, the memory cap) is noticed within about a second, instead
  of after the whole cell timeout;
- after a cell times out, nbval marks every later cell as an expected failure without running
  it; here the later cells still run, so one slow cell does not hide the results of the others.

Results carry the cell's code-cell ordinal, id and nbgrader metadata, not nbval's item names.
"""

import json
import time
from queue import Empty

import pytest
from nbval.kernel import RunningKernel

KERNEL_DIED = "the kernel died"


class KernelDied(RuntimeError):
    """The kernel died while it ran a cell."""


def _await_reply_watching(self, msg_id, timeout=None):
    """nbval's await_reply, polling once a second so that a dead kernel is noticed at once."""
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    while True:
        remaining = 1.0 if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            raise Empty
        try:
            msg = self.get_message(stream="shell", timeout=min(1.0, remaining))
        except Empty:
            if not self.is_alive():
                raise KernelDied(f"{KERNEL_DIED} while running this cell") from None
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            if msg["content"]["status"] == "aborted":
                raise RuntimeError("Kernel aborted execution request")
            return


def pytest_addoption(parser):
    """The plugin's one option: where to write the records."""
    parser.addoption("--addnorm-grades", default=None, help="write per-cell results as JSON here")


def pytest_configure(config):
    """With ``--addnorm-grades``: watch for dead kernels, and record every cell."""
    path = config.getoption("--addnorm-grades")
    if path:
        RunningKernel.await_reply = _await_reply_watching
        config.pluginmanager.register(GradeRecorder(path), "addnorm-grade-recorder")


class GradeRecorder:
    """Collects one record per executed notebook cell and writes them when the session ends."""

    def __init__(self, path):
        self.path = path
        self.cells = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        """Run a cell even when an earlier one timed out (nbval would mark it xfail)."""
        if getattr(item.parent, "timed_out", False):
            item.parent.timed_out = False  # run the next cell anyway

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """Record the cell's outcome, id, nbgrader metadata and whether its kernel lives."""
        outcome = yield
        report = outcome.get_result()
        cell = getattr(item, "cell", None)
        if cell is None:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            text = "" if report.passed else report.longreprtext
            kernel = getattr(item.parent, "kernel", None)
            self.cells.append(
                {
                    "code_index": item.cell_num,  # nbval counts code cells only, from 0
                    "id": cell.get("id"),
                    "nbgrader": dict(cell.get("metadata", {}).get("nbgrader", {})),
                    # passed / failed / skipped; xfail only if nbval skipped it after a timeout
                    "status": "not_run" if hasattr(report, "wasxfail") else report.outcome,
                    "timed_out": "Timeout of" in text,
                    "kernel_alive": bool(kernel is not None and kernel.is_alive()),
                    "report": text,
                }
            )

    def pytest_sessionfinish(self, session):
        """Write the records."""
        with open(self.path, "w", encoding="utf-8") as file:
            json.dump({"cells": self.cells}, file)
