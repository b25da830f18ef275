"""Reports: the class's CSV and JSON, each submission's record and its feedback page."""

import csv
import io
import json

from addnorm_lib.grading import assemble, report
from addnorm_lib.grading.judge import MESSAGE_LIMIT, CellGrade, Grade
from tests.conftest import ROOT
from tests.grading.conftest import FORWARD

HOSTILE = "<script>alert('x')</script>"


def full_marks(assignment, submission="ada.ipynb"):
    cells = [CellGrade(t.grade_id, t.points, t.points, "passed") for t in assignment.tests]
    return Grade(submission, assignment.name, "ok", cells=cells, max_total=assignment.max_total)


def test_reports_have_a_column_per_test_and_leave_no_partial_file(assignment, tmp_path):
    cells = [CellGrade(t.grade_id, t.points, t.points, "passed") for t in assignment.tests]
    graded = Grade("ada.ipynb", "layernorm", "ok", cells=cells, max_total=10)
    broken = Grade("bo.ipynb", None, "malformed", "not a valid notebook")
    report.write_reports(tmp_path, [broken, graded], {"layernorm": assignment}, isolated=True)
    rows = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert [r["submission"] for r in rows] == ["ada.ipynb", "bo.ipynb"]
    assert (rows[0][FORWARD], rows[0]["total"], rows[1][FORWARD]) == ("3", "10", "")
    data = json.loads((tmp_path / "grades.json").read_text())
    assert data["grades"][0]["total"] == 10 and data["isolated"] is True
    assert not list(tmp_path.glob("*.partial"))


def test_the_csv_has_a_column_per_exercise_of_every_assignment(assignment):
    residuals = assemble.load_assignment(ROOT / "solutions" / "residuals.ipynb")
    assignments = {"layernorm": assignment, "residuals": residuals}
    text = report.grades_csv([full_marks(residuals, "bo.ipynb")], assignments)
    (header, row) = list(csv.reader(io.StringIO(text)))
    exercises = [t.grade_id for t in assignment.tests] + [t.grade_id for t in residuals.tests]
    assert header == ["submission", "assignment", "status", *exercises, "total", "max_total"]
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
    assert report.read_record(tmp_path, "class a/ada.ipynb") == grade
    assert report.read_record(tmp_path, "bo.ipynb") is None
    assert (tmp_path / "feedback" / "class_a__ada.ipynb.html").is_file()


def test_the_points_table_lines_up_points_and_first_lines(assignment):
    grade = full_marks(assignment)
    grade.cells[0] = CellGrade(FORWARD, 0, 3, "failed", "CheckFailed: batch axis\ndetails")
    table = report.points_table(grade)
    assert "details" not in table  # the first line of a message only
    lines = table.split("\n")
    assert lines[0] == "ada.ipynb: ok"
    assert lines[1] == "  test_layer_norm               0/3  failed   CheckFailed: batch axis"
    assert lines[-1] == "  total                        7/10"


def test_progress_is_one_line_per_submission_in_a_log(assignment, capsys):
    report.progress(2, 5, full_marks(assignment))
    assert capsys.readouterr().err == "[2/5] ada.ipynb: ok, 10/10\n"


def test_the_summary_counts_submissions_by_status(assignment, tmp_path):
    grades = [full_marks(assignment), Grade("bo.ipynb", None, "malformed")]
    assert report.summary(grades, 1, tmp_path) == (
        f"graded 2 submissions: 1 ok, 1 malformed; 1 warm kernels; reports in {tmp_path}"
    )
