"""The reports: the class's table (CSV and JSON), a record and a feedback page per submission.

Everything under the output folder is rewritten atomically as each submission finishes, so an
interrupted run loses nothing and a reader never sees half a file. Feedback pages are rendered
from Jinja2 templates (``templates/``) with autoescaping on: a student's output is text, never
markup.
"""

import csv
import io
import json
import sys
from functools import cache
from pathlib import Path

import jinja2

from addnorm_lib.grading.discover import safe_name
from addnorm_lib.grading.judge import MESSAGE_LIMIT, STATUSES, Grade

TEMPLATES = Path(__file__).resolve().parent / "templates"
FIXED_COLUMNS = ("submission", "assignment", "status")
TOTAL_COLUMNS = ("total", "max_total")


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so no reader sees half of it."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def prepare_outdir(out: Path) -> Path:
    """The absolute output folder, with its ``feedback`` and ``records`` folders made."""
    outdir = out.resolve()
    (outdir / "feedback").mkdir(parents=True, exist_ok=True)
    (outdir / "records").mkdir(exist_ok=True)
    return outdir


# ----------------------------------------------------------------------------------------------
# The class's table


def exercise_columns(assignments: dict) -> list[str]:
    """One column per test cell of every assignment, in the assignments' order."""
    grade_ids = (test.grade_id for a in assignments.values() for test in a.tests)
    return list(dict.fromkeys(grade_ids))


def csv_row(grade: Grade, grade_ids: list[str]) -> dict:
    """A submission's row: its points per test cell, empty for the cells it was not graded on."""
    points = {cell.grade_id: f"{cell.points:g}" for cell in grade.cells}
    return {
        "submission": grade.submission,
        "assignment": grade.assignment or "",
        "status": grade.status,
        **{grade_id: points.get(grade_id, "") for grade_id in grade_ids},
        "total": f"{grade.total:g}",
        "max_total": f"{grade.max_total:g}",
    }


def grades_csv(grades: list[Grade], assignments: dict) -> str:
    """The class's table as CSV: a row per submission, a column per exercise."""
    grade_ids = exercise_columns(assignments)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, [*FIXED_COLUMNS, *grade_ids, *TOTAL_COLUMNS])
    writer.writeheader()
    writer.writerows(csv_row(grade, grade_ids) for grade in grades)
    return buffer.getvalue()


def write_reports(outdir: Path, grades: list[Grade], assignments: dict, isolated: bool) -> None:
    """grades.csv and grades.json from all grades so far (rewritten atomically).

    ``isolated`` says whether kernels ran in a jail; grades.json keeps it.
    """
    ordered = sorted(grades, key=lambda grade: grade.submission)
    atomic_write(outdir / "grades.csv", grades_csv(ordered, assignments))
    data = {"isolated": isolated, "grades": [grade.to_dict() for grade in ordered]}
    atomic_write(outdir / "grades.json", json.dumps(data, indent=1))


# ----------------------------------------------------------------------------------------------
# One submission: its record and its feedback page


def record_path(outdir: Path, submission_id: str) -> Path:
    """Where a submission's grade is kept, for ``--resume``."""
    return outdir / "records" / f"{safe_name(submission_id)}.json"


def read_record(outdir: Path, submission_id: str) -> Grade | None:
    """The grade kept for a submission by an earlier run, if any."""
    path = record_path(outdir, submission_id)
    return Grade.from_dict(json.loads(path.read_text())) if path.exists() else None


@cache
def templates() -> jinja2.Environment:
    """The report templates, HTML-escaped unless marked safe."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["g"] = lambda number: f"{number:g}"
    return environment


def feedback_html(grade: Grade) -> str:
    """One student's feedback page: points and the (cleaned, truncated) message per exercise."""
    page = templates().get_template("feedback.html")
    return page.render(grade=grade, message_limit=MESSAGE_LIMIT)


def save_grade(outdir: Path, grade: Grade) -> None:
    """A finished submission's record and feedback page."""
    atomic_write(record_path(outdir, grade.submission), json.dumps(grade.to_dict()))
    feedback = outdir / "feedback" / f"{safe_name(grade.submission)}.html"
    atomic_write(feedback, feedback_html(grade))


# ----------------------------------------------------------------------------------------------
# On the terminal


def points_table(grade: Grade) -> str:
    """A submission's points as a text table, with each failure's first line."""
    width = max([len(c.grade_id) for c in grade.cells] + [5])

    def line(name: str, points: float, max_points: float) -> str:
        return f"  {name:<{width}}  {f'{points:g}/{max_points:g}':>7}"

    lines = [f"{grade.submission}: {grade.status} {grade.reason}".rstrip()]
    for cell in grade.cells:
        first = cell.message.splitlines()[0] if cell.message else ""
        status = f"  {cell.status:<8} {first[:90]}"
        lines.append(line(cell.grade_id, cell.points, cell.max_points) + status)
    lines.append(line("total", grade.total, grade.max_total))
    return "\n".join(lines)


def progress(done: int, total: int, grade: Grade) -> None:
    """A progress bar on a terminal; one line per submission otherwise (logs, CI)."""
    if sys.stderr.isatty():
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if done == total else ""
        print(f"\r[{bar}] {done}/{total} graded", end=end, file=sys.stderr, flush=True)
        return
    score = f"{grade.total:g}/{grade.max_total:g}"
    print(f"[{done}/{total}] {grade.submission}: {grade.status}, {score}", file=sys.stderr)


def summary(grades: list[Grade], warm_kernels: int, outdir: Path) -> str:
    """The closing line of a batch: how many submissions, by status, and where the reports are."""
    counts = {status: sum(g.status == status for g in grades) for status in STATUSES}
    by_status = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    return (
        f"graded {len(grades)} submissions: {by_status}; {warm_kernels} warm kernels; "
        f"reports in {outdir}"
    )
