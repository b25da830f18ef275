"""Run a notebook under nbval and score its graded cells.

    python -m addnorm_lib.autograde exercises/layernorm.ipynb

executes the notebook in a fresh kernel (the current environment's), one pytest item per cell, and
prints the points of each graded test cell with the first lines of its failure message. A graded
cell earns its ``points`` when it runs without an error.

This is the single-notebook core. It trusts the notebook it is given: the points and tests are
read from that file.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# The traceback line that names the exception: "ValueError: ...", "CheckFailed: ..."
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Exit|Interrupt|Warning)\b")
MESSAGE_LIMIT = 2000  # characters of a failure message kept in a report


@dataclass(frozen=True)
class CellResult:
    """The outcome of one graded test cell."""

    grade_id: str
    index: int  # position of the cell in the notebook
    status: str  # passed, failed, not_run (after a timeout), skipped, missing
    points: float
    max_points: float
    message: str = ""  # the exception and its message, cleaned; empty when passed


@dataclass
class NotebookResult:
    """All graded cells of one notebook, and the failures of the other cells for context."""

    path: Path
    cells: list[CellResult] = field(default_factory=list)
    other_failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(cell.points for cell in self.cells)

    @property
    def max_total(self) -> float:
        return sum(cell.max_points for cell in self.cells)


class AutogradeError(RuntimeError):
    """The notebook could not be run at all (unreadable file, pytest failed to start)."""


def clean_message(report: str, limit: int = MESSAGE_LIMIT) -> str:
    """The exception line(s) of an nbval failure report, without ANSI codes, truncated to limit."""
    text = ANSI_ESCAPE.sub("", report)
    lines = text.rstrip().split("\n")
    starts = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    message = "\n".join(lines[starts[-1] :]) if starts else text.strip()
    if len(message) > limit:
        message = message[:limit] + f"\n... ({len(message) - limit} more characters)"
    return message


def graded_cells(nb) -> list[tuple[int, dict]]:
    """(index, nbgrader metadata) of every graded cell of a notebook, in order."""
    return [
        (index, cell.metadata["nbgrader"])
        for index, cell in enumerate(nb.cells)
        if cell.metadata.get("nbgrader", {}).get("grade")
    ]


def read_notebook(path: Path):
    """Read and validate a notebook, or raise AutogradeError saying what is wrong with the file."""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except FileNotFoundError:
        raise AutogradeError(f"{path}: no such file") from None
    except Exception as err:
        raise AutogradeError(
            f"{path}: not a valid notebook ({type(err).__name__}: {err})"
        ) from None
    return nb


def run_nbval(path: Path, workdir: Path, cell_timeout: float) -> list[dict]:
    """Run ``path`` with ``pytest --nbval-lax`` in ``workdir``; return the plugin's cell records."""
    grades = workdir / "grades.json"
    (workdir / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # no config from elsewhere
    command = [
        sys.executable, "-m", "pytest", str(path),
        "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={cell_timeout}",
        "-p", "addnorm_lib._nbval_grades", f"--addnorm-grades={grades}",
        "-p", "no:cacheprovider", "-q", "--color=no", f"--rootdir={workdir}",
    ]  # fmt: skip
    completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)
    if not grades.exists():
        raise AutogradeError(
            f"pytest could not run {path.name} (exit {completed.returncode}):\n"
            + (completed.stdout + completed.stderr)[-MESSAGE_LIMIT:]
        )
    return json.loads(grades.read_text(encoding="utf-8"))["cells"]


def score(nb, records: list[dict], path: Path) -> NotebookResult:
    """Points per graded cell of ``nb`` from the nbval records of running it."""
    code_positions = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    by_index = {code_positions[record["code_index"]]: record for record in records}
    result = NotebookResult(path)
    graded = dict(graded_cells(nb))
    for index, meta in graded.items():
        record = by_index.get(index)
        status = record["status"] if record else "missing"
        message = clean_message(record["report"]) if record and record["report"] else ""
        if status == "not_run":
            message = "Not run: an earlier cell timed out."
        max_points = float(meta.get("points", 0))
        points = max_points if status == "passed" else 0.0
        result.cells.append(
            CellResult(meta["grade_id"], index, status, points, max_points, message)
        )
    for index, record in sorted(by_index.items()):
        if index not in graded and record["status"] == "failed":
            first_line = (clean_message(record["report"]).splitlines() or [""])[0]
            result.other_failures.append(f"cell {index}: {first_line}")
    return result


def run_notebook(path, cell_timeout: float = 120) -> NotebookResult:
    """Execute a notebook in a fresh kernel and score its graded cells.

    Args:
        path: the .ipynb file.
        cell_timeout: seconds one cell may run before it is interrupted.

    Raises:
        AutogradeError: the file is not a valid notebook, or pytest could not run it.
    """
    path = Path(path)
    nb = read_notebook(path)
    with tempfile.TemporaryDirectory(prefix="addnorm-grade-") as tmp:
        workdir = Path(tmp)
        copy = workdir / path.name
        nbformat.write(nb, copy)
        records = run_nbval(copy, workdir, cell_timeout)
    return score(nb, records, path)


def format_table(result: NotebookResult, message_lines: int = 3) -> str:
    """A plain-text table of points per graded cell, with the start of each failure message."""
    width = max([len(cell.grade_id) for cell in result.cells] + [len("test")])
    lines = [f"{'test':<{width}}  {'points':>9}  status"]
    for cell in result.cells:
        points = f"{cell.points:g}/{cell.max_points:g}"
        lines.append(f"{cell.grade_id:<{width}}  {points:>9}  {cell.status}")
        for line in cell.message.splitlines()[:message_lines]:
            lines.append(" " * (width + 2) + "  | " + line)
    lines.append(f"{'total':<{width}}  {f'{result.total:g}/{result.max_total:g}':>9}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run a notebook and score its graded cells.")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--timeout", type=float, default=120, help="seconds per cell")
    args = parser.parse_args(argv)
    try:
        result = run_notebook(args.notebook, cell_timeout=args.timeout)
    except AutogradeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
