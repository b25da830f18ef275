"""The reports: the class's table (CSV and JSON), a record and a feedback page per submission.

Everything under the output folder is rewritten atomically as each submission finishes, so an
interrupted run loses nothing and a reader never sees half a file. Feedback pages are rendered
from Jinja2 templates (``templates/``) with autoescaping on: a student's output is text, never
markup.

Names and messages come from students and are written as text wherever they go: a CSV cell that
a spreadsheet would take for a formula starts with ``'``; each submission's files have a name of
their own (:func:`~.discover.safe_name`); control characters never reach the terminal (they are
shown escaped, ``\\x1b``) nor the feedback pages.
"""

import csv
import io
import json
import re
import sys
import textwrap
from functools import cache
from pathlib import Path

import jinja2

from addnorm_lib.grading.discover import safe_name
from addnorm_lib.grading.judge import MESSAGE_LIMIT, STATUSES, Grade

TEMPLATES = Path(__file__).resolve().parent / "templates"
FIXED_COLUMNS = ("submission", "assignment", "status")
TOTAL_COLUMNS = ("total", "max_total", "reason")
# A cell starting with one of these is a formula to a spreadsheet (OWASP's CSV injection advice).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Control characters, dropped from feedback pages; newline and tab are kept, for messages.
PAGE_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so no reader sees half of it.

    Text that is not valid Unicode (a lone surrogate from a student's message) is written escaped.
    """
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_bytes(text.encode("utf-8", "backslashreplace"))
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


def as_text(cell: str) -> str:
    """A CSV text cell that no spreadsheet takes for a formula: ``'`` before a risky start."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def csv_row(grade: Grade, grade_ids: list[str]) -> list[str]:
    """A submission's row: its points per test cell, empty for the cells it was not graded on.

    The text cells (submission, assignment, status, reason) are made safe with :func:`as_text`.
    """
    points = {cell.grade_id: f"{cell.points:g}" for cell in grade.cells}
    return [
        *map(as_text, (grade.submission, grade.assignment or "", grade.status)),
        *(points.get(grade_id, "") for grade_id in grade_ids),
        f"{grade.total:g}",
        f"{grade.max_total:g}",
        as_text(grade.reason),
    ]


def grades_csv(grades: list[Grade], assignments: dict) -> str:
    """The class's table as CSV: a row per submission, a column per exercise, and the reason."""
    grade_ids = exercise_columns(assignments)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(map(as_text, [*FIXED_COLUMNS, *grade_ids, *TOTAL_COLUMNS]))
    writer.writerows(csv_row(grade, grade_ids) for grade in grades)
    return buffer.getvalue()


def write_reports(outdir: Path, grades: list[Grade], assignments: dict, confinement: dict) -> None:
    """grades.csv and grades.json from all grades so far (rewritten atomically).

    ``confinement`` says how kernels were confined (``Sandbox.describe()``: the sandbox and the
    group limits, or why not); grades.json keeps it, with ``isolated`` for short.
    """
    ordered = sorted(grades, key=lambda grade: grade.submission)
    atomic_write(outdir / "grades.csv", grades_csv(ordered, assignments))
    isolated = confinement.get("sandbox") == "bubblewrap"
    data = {"isolated": isolated, **confinement, "grades": [g.to_dict() for g in ordered]}
    atomic_write(outdir / "grades.json", json.dumps(data, indent=1))


# ----------------------------------------------------------------------------------------------
# One submission: its saved grade and its feedback page


def saved_grade_path(outdir: Path, submission_id: str) -> Path:
    """Where a submission's grade is kept, for ``--resume``."""
    return outdir / "records" / f"{safe_name(submission_id)}.json"


def feedback_path(outdir: Path, submission_id: str) -> Path:
    """Where a submission's feedback page is written."""
    return outdir / "feedback" / f"{safe_name(submission_id)}.html"


def read_saved_grade(outdir: Path, submission_id: str) -> Grade | None:
    """The grade kept for a submission by an earlier run, if any.

    A record that cannot be read, or that is another submission's (an earlier version of the
    grader named files differently), is none.
    """
    path = saved_grade_path(outdir, submission_id)
    try:
        grade = Grade.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return grade if grade.submission == submission_id else None


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
        finalize=without_controls,
    )
    environment.filters["g"] = lambda number: f"{number:g}"
    return environment


def without_controls(value):
    """A value shown in a page: text without control characters but newline and tab."""
    return PAGE_CONTROLS.sub("", value) if type(value) is str else value


def feedback_html(grade: Grade) -> str:
    """One student's feedback page: points and the (cleaned, truncated) message per exercise."""
    page = templates().get_template("feedback.html")
    return page.render(
        grade=grade, verdict=verdict(grade), score=score(grade), message_limit=MESSAGE_LIMIT
    )


def save_grade(outdir: Path, grade: Grade) -> None:
    """A finished submission's record and feedback page."""
    atomic_write(saved_grade_path(outdir, grade.submission), json.dumps(grade.to_dict()))
    atomic_write(feedback_path(outdir, grade.submission), feedback_html(grade))


# ----------------------------------------------------------------------------------------------
# On the terminal


def printable(text: str) -> str:
    """Text safe to print: each character that is not printable shown escaped, as ``\\x1b``.

    Escape sequences (colours, cursor moves, window titles), carriage returns, newlines, bidi
    overrides and lone surrogates in a name or a message cannot act on the terminal, forge a line,
    or stop the print.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


TABLE_WIDTH = 100  # columns of the terminal table; diagnoses wrap within it
INDENT = " " * 6


def diagnosis(message: str) -> str:
    """The line of a failure message that says what is wrong: the named mistake when a check
    recognised one (its message reads "<where>: <what> is wrong.", the diagnosis, the hint),
    else the first line."""
    lines = [line for line in message.splitlines() if line.strip()]
    named = len(lines) > 1 and lines[0].endswith(" is wrong.") and not lines[1].startswith("Hint:")
    return lines[1] if named else (lines[0] if lines else "")


GRADED = ("ok", "timeout", "kernel_died")  # statuses of a notebook that ran: its points stand


def verdict(grade: Grade) -> str:
    """Whether a submission was graded, in words: ``graded``, ``graded (timeout)``, ``not
    graded (malformed)``, ... (the status ``ok`` alone would read as "passed" whatever the
    points)."""
    if grade.status == "ok":
        return "graded"
    return f"graded ({grade.status})" if grade.status in GRADED else f"not graded ({grade.status})"


def score(grade: Grade) -> str:
    """Points out of the assignment's maximum, ``3/10``; ``0 points`` where the assignment (and
    so its maximum) is unknown."""
    if grade.assignment is None and not grade.max_total:
        return f"{grade.total:g} points"
    return f"{grade.total:g}/{grade.max_total:g}"


def headline(grade: Grade, with_reason: bool = True) -> str:
    """A submission's result in one line: ``ada.ipynb: graded, 0/10``, then, where there is
    one, the reason (for a notebook that was not graded, what to do)."""
    line = f"{grade.submission}: {verdict(grade)}, {score(grade)}"
    if with_reason and grade.reason:
        line += f": {grade.reason}"
    return printable(line)


def points_table(grade: Grade, feedback: Path | None = None) -> str:
    """A submission's points as a text table: per test cell its points and status and, below a
    failed one, its diagnosis in full (wrapped, printable); last, where the feedback page is."""
    width = max([len(c.grade_id) for c in grade.cells] + [5])

    def line(name: str, points: float, max_points: float) -> str:
        return f"  {printable(name):<{width}}  {f'{points:g}/{max_points:g}':>7}"

    lines = [headline(grade)]
    for note in grade.notes:
        lines += textwrap.wrap(printable(f"note: {note}"), TABLE_WIDTH, subsequent_indent=INDENT)
    for cell in grade.cells:
        lines.append(line(cell.grade_id, cell.points, cell.max_points) + f"  {cell.status}")
        if cell.status != "passed" and cell.message:
            said = printable(diagnosis(cell.message))
            lines += textwrap.wrap(
                said, TABLE_WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6
            )
    lines.append(f"  {'total':<{width}}  {score(grade):>7}")
    if feedback is not None and grade.cells:
        lines.append(f"the whole message of each test, with hints: {printable(str(feedback))}")
    elif feedback is not None:
        lines.append(f"the feedback page: {printable(str(feedback))}")
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
    print(f"[{done}/{total}] {headline(grade, with_reason=False)}", file=sys.stderr)


def summary(
    grades: list[Grade], warm_kernels: int | str, outdir: Path, group_problem: str | None = None
) -> str:
    """The closing line of a batch: how many submissions, by status, the warm kernels (a count,
    or where they ran), whether the kernels had no group limits (``group_problem``: why), and
    where the reports are."""
    counts = {status: sum(g.status == status for g in grades) for status in STATUSES}
    by_status = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    limits = "" if group_problem is None else f"no group limits ({printable(group_problem)}); "
    return (
        f"graded {len(grades)} submissions: {by_status}; {warm_kernels} warm kernels; "
        f"{limits}reports in {printable(str(outdir))}"
    )
