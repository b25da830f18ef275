"""A pytest plugin that records each notebook cell nbval runs: its outcome and nbgrader metadata.

Loaded by :mod:`addnorm_lib.autograde` as ``-p addnorm_lib._nbval_grades --addnorm-grades=FILE``.
It runs in the pytest process, not in the notebook's kernel, so notebook code cannot reach it.
Results carry the cell's code-cell ordinal, id and nbgrader metadata, not nbval's item names.
"""

import json

import pytest


def pytest_addoption(parser):
    parser.addoption("--addnorm-grades", default=None, help="write per-cell results as JSON here")


def pytest_configure(config):
    path = config.getoption("--addnorm-grades")
    if path:
        config.pluginmanager.register(GradeRecorder(path), "addnorm-grade-recorder")


class GradeRecorder:
    """Collects one record per executed notebook cell and writes them when the session ends."""

    def __init__(self, path):
        self.path = path
        self.cells = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        cell = getattr(item, "cell", None)
        if cell is None:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            # nbval marks every cell after a timed-out one as xfail; else passed/failed/skipped
            status = "not_run" if hasattr(report, "wasxfail") else report.outcome
            self.cells.append(
                {
                    "code_index": item.cell_num,  # nbval counts code cells only, from 0
                    "id": cell.get("id"),
                    "nbgrader": dict(cell.get("metadata", {}).get("nbgrader", {})),
                    "status": status,
                    "report": "" if report.passed else report.longreprtext,
                }
            )

    def pytest_sessionfinish(self, session):
        with open(self.path, "w", encoding="utf-8") as file:
            json.dump({"cells": self.cells}, file)
