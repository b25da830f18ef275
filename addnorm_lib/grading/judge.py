"""Deciding the points, in the grading process, where the student's code never ran.

A test cell's checks only *record* what the student's code returned; here each record is judged
by the check's judge (``addnorm_lib.checks.JUDGES``). A test cell earns its points when nbval
passed it *and* every check it calls recorded a result that its judge accepts: code in the
notebook can make a test cell fail, but cannot make it pass.
"""

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from addnorm_lib.checks import JUDGES, CheckFailed
from addnorm_lib.checks import _record as record
from addnorm_lib.grading.assemble import Assignment, TestCell

STATUSES = ("ok", "timeout", "kernel_died", "malformed", "unknown_assignment", "error")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# The traceback line that names the exception: "ValueError: ...", "CheckFailed: ..."
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Exit|Interrupt|Warning)\b")
MESSAGE_LIMIT = 2000  # characters of a failure message kept in a report
NO_RESULT = "recorded no result"


@dataclass
class CellGrade:
    """The grade of one test cell."""

    grade_id: str
    points: float
    max_points: float
    status: str  # passed, failed, timeout, not_run
    message: str = ""
    hidden: bool = False


@dataclass
class Grade:
    """The grade of one submission: its status, and the grade of each test cell."""

    submission: str
    assignment: str | None
    status: str  # one of STATUSES
    reason: str = ""
    cells: list[CellGrade] = field(default_factory=list)
    max_total: float = 0.0
    notes: list[str] = field(default_factory=list)
    sha256: str = ""
    seconds: float = 0.0

    @property
    def total(self) -> float:
        """The points earned."""
        return sum(cell.points for cell in self.cells)

    def to_dict(self) -> dict:
        """The grade as plain data, with its total."""
        return {**asdict(self), "total": self.total}

    @staticmethod
    def from_dict(data: dict) -> "Grade":
        """The grade that :meth:`to_dict` gave ``data`` for."""
        data = {k: v for k, v in data.items() if k != "total"}
        data["cells"] = [CellGrade(**cell) for cell in data["cells"]]
        return Grade(**data)


def clean_message(report: str, limit: int = MESSAGE_LIMIT) -> str:
    """The exception line(s) of an nbval failure report, without ANSI codes, truncated to limit."""
    text = ANSI_ESCAPE.sub("", report)
    lines = text.rstrip().split("\n")
    starts = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    message = "\n".join(lines[starts[-1] :]) if starts else text.strip()
    if len(message) > limit:
        message = message[:limit] + f"\n... ({len(message) - limit} more characters)"
    return message


def judge_checks(test: TestCell, observations: Path) -> str | None:
    """None if every recorded check of the cell passes, else the first failure message."""
    for name, seed in test.checks:
        path = record.observation_path(observations, name, seed)
        if not path.is_file():
            return (
                f"{name}(seed={seed}) {NO_RESULT}: the cell did not reach it, or the check was "
                "switched off."
            )
        try:
            data = record.load(path)
            JUDGES[name](data, seed)  # raises CheckFailed, or returns the learner's summary
        except CheckFailed as failure:
            return f"CheckFailed: {failure}"
        except Exception as err:  # a tampered or truncated record
            return f"{name}(seed={seed}): the recorded result is unusable ({type(err).__name__})."
    return None


def records_by_cell(assignment: Assignment, records: list[dict] | None) -> dict[int, dict]:
    """nbval's records by the position of their cell in the notebook (nbval counts code cells)."""
    cells = assignment.graded_base.cells
    code_positions = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]
    by_position = {}
    for found in records or []:
        if found["code_index"] < len(code_positions):
            by_position[code_positions[found["code_index"]]] = found
    return by_position


def judge_cell(test: TestCell, found: dict | None, observations: Path, cell_timeout: float):
    """(status, message) of one test cell, from its nbval record and its checks' records."""
    if found is None:
        return "not_run", "Not run: the notebook stopped before this cell."
    if found["timed_out"]:
        return (
            "timeout",
            f"Timeout: the cell ran longer than {cell_timeout:g} s and was interrupted.",
        )
    message = judge_checks(test, observations)
    if found["status"] == "passed":
        return ("passed" if message is None else "failed"), message
    if message is None or NO_RESULT in message:  # then nbval's own failure says more
        message = clean_message(found["report"]) or f"nbval: {found['status']}"
    return "failed", message


def judge(
    assignment: Assignment, records, observations: Path, cell_timeout: float
) -> list[CellGrade]:
    """The grade of every test cell of the assignment."""
    by_position = records_by_cell(assignment, records)
    cells = []
    for test in assignment.tests:
        found = by_position.get(test.index)
        status, message = judge_cell(test, found, observations, cell_timeout)
        points = test.points if status == "passed" else 0.0
        cell = CellGrade(test.grade_id, points, test.points, status, message or "", test.hidden)
        cells.append(cell)
    return cells


def notebook_status(records, wall_timeout: bool, cells: list[CellGrade]) -> tuple[str, str]:
    """(status, reason) of a submission that ran: ok, timeout, kernel_died or error."""
    if wall_timeout:
        return "timeout", "the notebook exceeded its wall-clock limit"
    if records is None:
        return "error", "nbval produced no results"
    timed_out = [c.grade_id for c in cells if c.status == "timeout"]
    if timed_out or any(r["timed_out"] for r in records):
        which = f" ({', '.join(timed_out)})" if timed_out else ""
        return "timeout", "a cell exceeded the per-cell timeout" + which
    died = [r for r in records if not r["kernel_alive"]]
    if died:
        return "kernel_died", f"the kernel died in code cell {died[0]['code_index']}"
    return "ok", ""
