"""Reports: the class's CSV and JSON, each submission's record and its feedback page."""

import csv
import io
import json

import pytest

from addnorm_lib.grading import assemble, report
from addnorm_lib.grading.judge import MESSAGE_LIMIT, CellGrade, Grade
from tests.conftest import ROOT
from tests.grading.conftest import FORWARD

SANDBOXED = {"sandbox": "bubblewrap", "group_limits": "cgroup"}
HOSTILE = "<script>alert('x')</script>"


def full_marks(assignment, submission="ada.ipynb"):
    cells = [CellGrade(t.grade_id, t.points, t.points, "passed") for t in assignment.tests]
    return Grade(submission, assignment.name, "ok", cells=cells, max_total=assignment.max_total)


def test_reports_have_a_column_per_test_and_leave_no_partial_file(assignment, tmp_path):
    cells = [CellGrade(t.grade_id, t.points, t.points, "passed") for t in assignment.tests]
    graded = Grade("ada.ipynb", "layernorm", "ok", cells=cells, max_total=10)
    broken = Grade("bo.ipynb", None, "malformed", "not a valid notebook")
    report.write_reports(tmp_path, [broken, graded], {"layernorm": assignment}, SANDBOXED)
    rows = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert [r["submission"] for r in rows] == ["ada.ipynb", "bo.ipynb"]
    assert (rows[0][FORWARD], rows[0]["total"], rows[1][FORWARD]) == ("3", "10", "")
    data = json.loads((tmp_path / "grades.json").read_text())
    assert data["grades"][0]["total"] == 10 and data["isolated"] is True
    assert data["sandbox"] == "bubblewrap" and data["group_limits"] == "cgroup"
    assert not list(tmp_path.glob("*.partial"))


def test_the_csv_has_a_column_per_exercise_of_every_assignment(assignment):
    residuals = assemble.load_assignment(ROOT / "solutions" / "residuals.ipynb")
    assignments = {"layernorm": assignment, "residuals": residuals}
    text = report.grades_csv([full_marks(residuals, "bo.ipynb")], assignments)
    (header, row) = list(csv.reader(io.StringIO(text)))
    exercises = [t.grade_id for t in assignment.tests] + [t.grade_id for t in residuals.tests]
    assert header == [
        "submission",
        "assignment",
        "status",
        *exercises,
        "total",
        "max_total",
        "reason",
    ]
    points = dict(zip(header, row, strict=True))
    assert points[FORWARD] == "" and points["test_blocks"] == "2" and points["total"] == "8"


def test_feedback_escapes_what_the_student_wrote():
    cell = CellGrade(FORWARD, 0, 3, "failed", "CheckFailed: <script>alert(1)</script>")
    page = report.feedback_html(Grade("<b>x</b>.ipynb", "layernorm", "ok", cells=[cell]))
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>x</b>" not in page


def test_the_template_escapes_hostile_text_in_every_field():
    cell = CellGrade(HOSTILE, 0, 3, HOSTILE, HOSTILE, hidden=True)
    grade = Grade(HOSTILE, HOSTILE, HOSTILE, HOSTILE, [cell], notes=[HOSTILE])
    page = report.feedback_html(grade)
    assert "<script" not in page and "alert('x')" not in page
    # the title, heading, assignment, status, reason, note, test name, status and message
    assert page.count("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;") == 9
    assert "<em>(includes hidden tests)</em>" in page  # the template's own markup stays markup


def test_feedback_truncates_long_messages():
    cell = CellGrade(FORWARD, 0, 3, "failed", "y" * (MESSAGE_LIMIT + 500))
    page = report.feedback_html(Grade("ada.ipynb", "layernorm", "ok", cells=[cell]))
    assert "y" * MESSAGE_LIMIT in page and "y" * (MESSAGE_LIMIT + 1) not in page


def test_a_saved_grade_is_read_back_for_resume(assignment, tmp_path):
    report.prepare_outdir(tmp_path)
    grade = full_marks(assignment, "class a/ada.ipynb")
    report.save_grade(tmp_path, grade)
    assert report.read_saved_grade(tmp_path, "class a/ada.ipynb") == grade
    assert report.read_saved_grade(tmp_path, "bo.ipynb") is None
    (page,) = (tmp_path / "feedback").iterdir()
    assert page == report.feedback_path(tmp_path, "class a/ada.ipynb")
    assert page.name.startswith("class_a__ada.ipynb~") and page.suffix == ".html"


CONTEXT = "layer_norm, on a 2-D (N, C) = (4, 5) input with square weights (so that axes coincide)"
NAMED = (
    "You normalized over the batch axis (axis 0): LayerNorm takes one mean and variance per "
    "example, over its features (the last axis), whatever the batch size is."
)


def test_the_points_table_shows_each_failures_diagnosis_in_full_and_the_feedback_page(
    assignment, tmp_path
):
    """The context line alone says where, not what: the table shows the named mistake."""
    grade = full_marks(assignment)
    message = f"{CONTEXT}: y is wrong.\n{NAMED}\nHint: reduce over axis -1."
    grade.cells[0] = CellGrade(FORWARD, 0, 3, "failed", message)
    page = report.feedback_path(tmp_path, grade.submission)
    table = report.points_table(grade, page)
    lines = table.split("\n")
    assert lines[0] == "ada.ipynb: graded, 7/10"
    assert lines[1] == "  test_layer_norm               0/3  failed"
    assert " ".join(line.strip() for line in lines[2:4]) == NAMED  # in full, wrapped
    assert all(len(line) <= report.TABLE_WIDTH for line in lines[:-1])
    assert "Hint" not in table and CONTEXT not in table
    assert lines[-2] == "  total                        7/10" and lines[-1].endswith(str(page))


def test_the_grade_line_says_graded_and_the_points_not_ok(assignment):
    """ "ok" next to 0/10 read as a pass: the line says whether the notebook was graded."""
    stubs = full_marks(assignment)
    stubs.cells = [CellGrade(c.grade_id, 0, c.max_points, "failed") for c in stubs.cells]
    assert report.points_table(stubs).split("\n")[0] == "ada.ipynb: graded, 0/10"
    slow = full_marks(assignment)
    slow.status, slow.reason = "timeout", "a cell exceeded the per-cell timeout"
    assert report.headline(slow) == (
        "ada.ipynb: graded (timeout), 10/10: a cell exceeded the per-cell timeout"
    )
    broken = Grade("ada.ipynb", "layernorm", "malformed", "the file is empty", max_total=10)
    assert report.headline(broken) == "ada.ipynb: not graded (malformed), 0/10: the file is empty"
    page = report.feedback_html(stubs)
    assert "<strong>graded</strong>" in page and "total 0/10" in page and ">ok<" not in page


def test_a_grade_of_no_known_assignment_has_no_maximum_to_show():
    unknown = Grade("hw.ipynb", None, "unknown_assignment", "no assignment matches")
    table = report.points_table(unknown).split("\n")
    assert table[0] == "hw.ipynb: not graded (unknown_assignment), 0 points: no assignment matches"
    assert table[-1].split() == ["total", "0", "points"] and "0/0" not in report.feedback_html(
        unknown
    )


def test_the_points_table_shows_the_notes_on_what_was_graded(assignment):
    grade = full_marks(assignment)
    note = "cell 9 of your notebook defines layer_norm again after the answer cell"
    grade.notes = [note]
    assert report.points_table(grade).split("\n")[1] == f"note: {note}"


def test_without_a_named_mistake_the_table_shows_the_first_line():
    message = f"{CONTEXT}: y differs from the reference by up to 0.05.\nHint: look at eps."
    assert report.diagnosis(message) == message.splitlines()[0]
    assert report.diagnosis("ValueError: shapes (4,) and (5,) differ") == (
        "ValueError: shapes (4,) and (5,) differ"
    )


def test_progress_is_one_line_per_submission_in_a_log(assignment, capsys):
    report.progress(2, 5, full_marks(assignment))
    assert capsys.readouterr().err == "[2/5] ada.ipynb: graded, 10/10\n"


def test_the_summary_counts_submissions_by_status(assignment, tmp_path):
    grades = [full_marks(assignment), Grade("bo.ipynb", None, "malformed")]
    assert report.summary(grades, 1, tmp_path) == (
        f"graded 2 submissions: 1 ok, 1 malformed; 1 warm kernels; reports in {tmp_path}"
    )


# Hostile names and messages (issue 15)

FORMULAS = ['=HYPERLINK("evil.example","x").ipynb', "+1.ipynb", "-1.ipynb", "@SUM(A1).ipynb"]
CONTROLS = "\x1b]0;owned\x07\x1b[2J\x9b31m\r\x00\x7f\u202e\n"  # OSC, CSI, C1 CSI, ..., bidi


@pytest.mark.parametrize("danger", [*FORMULAS, "\tx.ipynb", "\rx.ipynb"])
def test_no_csv_text_cell_starts_a_formula(assignment, danger):
    grades = [
        Grade(danger, None, "malformed", reason=danger),
        Grade("ada.ipynb", "layernorm", "error", reason="=1+1"),
    ]
    rows = list(csv.reader(io.StringIO(report.grades_csv(grades, {"layernorm": assignment}))))
    text_cells = [cell for row in rows[1:] for cell in (row[0], row[1], row[2], row[-1])]
    assert not [cell for cell in text_cells if cell[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert ("'" + danger, "'=1+1") in {(rows[1][0], rows[2][-1]), (rows[2][0], rows[1][-1])}


def test_the_csv_says_why_a_submission_got_its_status(assignment):
    grades = [
        Grade("bo.ipynb", None, "malformed", "a symbolic link: not followed"),
        full_marks(assignment),
    ]
    rows = list(csv.DictReader(io.StringIO(report.grades_csv(grades, {"layernorm": assignment}))))
    assert [(r["status"], r["reason"]) for r in rows] == [
        ("malformed", "a symbolic link: not followed"),
        ("ok", ""),
    ]
    assert list(rows[0])[-3:] == ["total", "max_total", "reason"]


def test_points_stay_numbers_in_the_csv(assignment):
    text = report.grades_csv([full_marks(assignment)], {"layernorm": assignment})
    row = next(csv.DictReader(io.StringIO(text)))
    assert (row[FORWARD], row["total"], row["max_total"]) == ("3", "10", "10")


def test_ids_that_clean_alike_keep_their_own_record_and_page(assignment, tmp_path):
    report.prepare_outdir(tmp_path)
    ada, bo = full_marks(assignment, "a b.ipynb"), Grade("a_b.ipynb", None, "malformed", "broken")
    report.save_grade(tmp_path, ada)
    report.save_grade(tmp_path, bo)
    assert report.read_saved_grade(tmp_path, "a b.ipynb") == ada
    assert report.read_saved_grade(tmp_path, "a_b.ipynb") == bo
    pages = sorted((tmp_path / "feedback").iterdir())
    assert len(pages) == 2 and [p.name for p in pages] == sorted(
        report.feedback_path(tmp_path, g.submission).name for g in (ada, bo)
    )


def test_a_record_of_another_submission_is_not_taken_for_resume(assignment, tmp_path):
    report.prepare_outdir(tmp_path)
    report.save_grade(tmp_path, full_marks(assignment, "ada.ipynb"))
    (tmp_path / "records" / "ada.ipynb.json").rename(report.saved_grade_path(tmp_path, "bo.ipynb"))
    assert report.read_saved_grade(tmp_path, "bo.ipynb") is None


def test_control_characters_never_reach_the_terminal(assignment, capsys, tmp_path):
    grade = full_marks(assignment, f"ada{CONTROLS}.ipynb")
    grade.reason = f"reason{CONTROLS}"
    grade.cells[0] = CellGrade(FORWARD, 0, 3, "failed", f"ValueError: red{CONTROLS}x")
    report.progress(1, 2, grade)
    printed = [
        report.points_table(grade),
        capsys.readouterr().err,
        report.summary([grade], 0, tmp_path / CONTROLS),
    ]
    for text in printed:
        lines = text.rstrip("\n").split("\n")
        assert all(ch.isprintable() for line in lines for ch in line), repr(text)
    table = printed[0].split("\n")
    assert table[0].startswith("ada\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\r\\x00\\x7f\\u202e\\n.ipynb")
    assert len(table) == 3 + len(grade.cells)  # one diagnosis: a message cannot add more lines
    assert "ValueError: red\\x1b]0;owned" in table[2]


def test_printable_keeps_ordinary_text():
    assert (
        report.printable("Ada Lovelace, hw 3 – café ✓.ipynb") == "Ada Lovelace, hw 3 – café ✓.ipynb"
    )


def test_feedback_pages_drop_control_characters_but_keep_lines(tmp_path):
    cell = CellGrade(FORWARD, 0, 3, "failed", f"first{CONTROLS}second\n\tthird")
    page = report.feedback_html(Grade(f"ada{CONTROLS}.ipynb", "layernorm", "ok", cells=[cell]))
    assert not any(ch in page for ch in "\x1b\x07\x9b\r\x00\x7f")
    assert "second\n\tthird" in page


def test_text_that_is_not_unicode_is_written_not_fatal(assignment, tmp_path):
    """A lone surrogate (an undecodable byte, or a JSON escape in a kernel's message)."""
    report.prepare_outdir(tmp_path)
    grade = full_marks(assignment, "ada.ipynb")
    grade.cells[0] = CellGrade(FORWARD, 0, 3, "failed", "ValueError: \udcff")
    grade.reason = "\udcff"
    report.save_grade(tmp_path, grade)
    report.write_reports(tmp_path, [grade], {"layernorm": assignment}, SANDBOXED)
    assert "\\udcff" in report.feedback_path(tmp_path, "ada.ipynb").read_text()
    assert "\\udcff" in (tmp_path / "grades.csv").read_text()
    assert report.read_saved_grade(tmp_path, "ada.ipynb").reason == "\udcff"
