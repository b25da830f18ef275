"""Grade a folder of student notebooks: one command, robust to broken and hostile submissions.

    python -m addnorm_lib.grading PATH [PATH ...] [--out OUTDIR] [--jobs N] [--timeout SECONDS]
                                [--resume] [--source DIR]

Each PATH is a submission notebook or a folder searched recursively for ``*.ipynb``. For every
submission the grader

1. reads it (a file that is not a notebook gets the status ``malformed``) and finds its assignment
   from the notebook's metadata (``metadata.addnorm.assignment``), else from its file name;
2. builds the *graded notebook* from the instructor's copy in ``--source`` (default: the course's
   ``solutions/``): the instructor's cells, tests, hidden tests, metadata and points, with only the
   student's answer cells (matched by ``grade_id``, else by cell id) put in. Nothing the student
   wrote outside answer cells runs;
3. runs it with ``pytest --nbval-lax`` in its own process and temporary folder, in a kernel with a
   memory cap, a per-cell timeout and a per-notebook wall-clock limit; where Linux namespaces
   work, the kernel runs in a jail (mount, user and PID namespaces) where the reference solutions
   do not exist. When grading several notebooks, kernels are forked, already warm, from a
   process that has imported numpy and torch once (``_warm_kernels``);
4. decides the points outside the kernel: the checks in a test cell only *record* what the student's
   code returned, and this process *judges* the records. Code in the notebook can make a test cell
   fail, but cannot make it pass.

Writes ``OUTDIR/grades.csv``, ``OUTDIR/grades.json`` and ``OUTDIR/feedback/<submission>.html``,
updated as each submission finishes, so an interrupted run loses nothing; ``--resume`` skips the
submissions already graded (unless the file changed). Exit status 0 when every submission got a
row, whatever the scores; 2 when the grader itself could not run.
"""

import argparse
import ast
import contextlib
import csv
import hashlib
import html
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import nbformat

from addnorm_lib.authoring import release
from addnorm_lib.checks import JUDGES, CheckFailed
from addnorm_lib.checks import _record as record
from addnorm_lib.grading import _warm_kernels
from addnorm_lib.grading._pytest_runner import (
    THREAD_VARIABLES,
    kill_marked,
    run_pytest,
    short_temp_base,
    single_threaded,
    start_fork_server,
)

COURSE_ROOT = Path(__file__).resolve().parents[2]
STATUSES = ("ok", "timeout", "kernel_died", "malformed", "unknown_assignment", "error")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# The traceback line that names the exception: "ValueError: ...", "CheckFailed: ..."
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Exit|Interrupt|Warning)\b")
MESSAGE_LIMIT = 2000  # characters of a failure message kept in a report
NBVAL_MARKER = re.compile(r"^\s*#\s*NBVAL_\w+.*$", re.MULTILINE)
KERNEL_NAME = "addnorm-graded"
RUN_MARKER = "ADDNORM_SUBMISSION"


# ----------------------------------------------------------------------------------------------
# Assignments: the instructor's notebooks


@dataclass(frozen=True)
class TestCell:
    grade_id: str
    index: int  # position in the notebook
    points: float
    hidden: bool  # has hidden tests
    checks: tuple[tuple[str, int], ...]  # (check function, seed) called by the cell


@dataclass
class Assignment:
    name: str
    graded_base: nbformat.NotebookNode  # answers stubbed; tests and hidden tests kept
    answers: dict[str, str]  # grade_id -> cell id of each answer cell
    tests: list[TestCell]

    @property
    def max_total(self) -> float:
        return sum(test.points for test in self.tests)


def checks_called(source: str, where: str) -> tuple[tuple[str, int], ...]:
    """The ``checks.check_*(..., seed=N)`` calls of a test cell, in order."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "checks"):
            continue
        if name not in JUDGES:
            raise ValueError(f"{where}: checks.{name} has no judge")
        seeds = [k.value for k in node.keywords if k.arg == "seed"]
        seed = seeds[0].value if seeds and isinstance(seeds[0], ast.Constant) else 0
        calls.append((name, int(seed)))
    return tuple(calls)


def assignment_name(nb, fallback: str) -> str:
    return str(nb.metadata.get("addnorm", {}).get("assignment", fallback))


def load_assignment(path: Path) -> Assignment:
    solution = nbformat.read(path, as_version=4)
    base = release.stub_solutions(solution, path.name)
    answers, tests = {}, []
    for index, cell in enumerate(base.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            answers[meta["grade_id"]] = cell.get("id")
        if meta.get("grade"):
            where = f"{path.name}, cell {index}"
            tests.append(TestCell(meta["grade_id"], index, float(meta["points"]),
                                  release.HIDDEN_BEGIN in cell.source,
                                  checks_called(cell.source, where)))  # fmt: skip
    return Assignment(assignment_name(solution, path.stem), base, answers, tests)


def load_assignments(source: Path) -> dict[str, Assignment]:
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no instructor notebooks in {source}")
    assignments = {}
    for path in paths:
        assignment = load_assignment(path)
        assignments[assignment.name] = assignment
    return assignments


def identify(nb, path: Path, assignments: dict) -> str | None:
    """The submission's assignment: its metadata if known, else a name found in its file name."""
    declared = nb.metadata.get("addnorm")  # the student's file: may hold anything
    if isinstance(declared, dict) and declared.get("assignment") in assignments:
        return declared["assignment"]
    tokens = set(re.split(r"[^a-z0-9]+", path.stem.lower()))
    found = [name for name in assignments if name.lower() in tokens]
    return found[0] if len(found) == 1 else None


# ----------------------------------------------------------------------------------------------
# Building the graded notebook


def answer_source(student, grade_id: str, cell_id: str | None) -> str | None:
    """The source of the student's answer cell: matched by grade_id, else by cell id."""
    code_cells = [c for c in student.cells if c.get("cell_type") == "code"]
    for cell in code_cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and meta.get("grade_id") == grade_id:
            return str(cell.get("source", ""))
    for cell in code_cells:
        if cell_id and cell.get("id") == cell_id:
            return str(cell.get("source", ""))
    return None


def assemble(assignment: Assignment, student) -> tuple[nbformat.NotebookNode, list[str]]:
    """The graded notebook, and notes on what could not be taken from the submission."""
    graded = nbformat.from_dict(json.loads(json.dumps(assignment.graded_base)))
    notes = []
    for cell in graded.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not (meta.get("solution") and cell.cell_type == "code"):
            continue
        source = answer_source(student, meta["grade_id"], assignment.answers[meta["grade_id"]])
        if source is None:
            notes.append(f"answer cell {meta['grade_id']!r} is missing: graded as unanswered")
            continue
        cell.source = NBVAL_MARKER.sub("", source)  # nbval skip/raises markers have no say here
    return graded, notes


# ----------------------------------------------------------------------------------------------
# Running a graded notebook


@dataclass(frozen=True)
class Settings:
    source: Path
    jobs: int = os.cpu_count() or 1
    cell_timeout: float = 60.0
    notebook_timeout: float = 600.0
    memory_mb: int = 2048
    file_mb: int = 64


JAIL = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc"]


@cache
def isolation() -> list[str]:
    """The unshare prefix of a private mount namespace, or [] if the whole jail cannot be built.

    Probed once with everything the kernel's jail needs (a tmpfs mount, then nested user and PID
    namespaces), so that a machine that allows only part of it grades without a jail (and says
    so) instead of failing every kernel.
    """
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if os.getuid() != 0:
        prefix = ["unshare", "--map-root-user", "--mount", "--propagation", "private"]
    probe = f"mount -t tmpfs -o size=1m none /dev/shm && exec {shlex.join(JAIL)} -- true"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        completed = subprocess.run([*prefix, "--", "sh", "-c", probe], capture_output=True,
                                   timeout=10, check=False)  # fmt: skip
        if completed.returncode == 0:
            return prefix
    return []


# The exercises' answers, in effect: hidden from graded kernels as one folder, so that a new
# reference module is hidden without anyone listing it.
REFERENCE = COURSE_ROOT / "addnorm_lib" / "reference"


def hidden_paths(settings: Settings, outdir: Path) -> tuple[list[Path], list[Path]]:
    """Folders and files the graded kernel must not see: references, solutions, other grades."""
    names = ("solutions", "tests", "book", "_build", ".git", "benchmarks")
    folders = [COURSE_ROOT / name for name in names] + [REFERENCE]
    folders += [COURSE_ROOT / "addnorm_lib" / "__pycache__", settings.source.resolve(), outdir]
    return [p for p in dict.fromkeys(folders) if p.is_dir()], []


def hiding_mounts(settings: Settings, outdir: Path) -> list[list[str]]:
    """mount commands that hide the references and the reports (empty when no namespace works)."""
    if not isolation():
        return []
    folders, files = hidden_paths(settings, outdir)
    return [["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(p)] for p in folders] + [
        ["mount", "--bind", "/dev/null", str(p)] for p in files
    ]


def kernel_argv(run_folder: Path) -> list[str]:
    """How the graded kernel starts: limits, and, where namespaces work, a jail.

    The jail (a mount, user and PID namespace of its own): the folder of this run (every
    submission's files and the grader's private results) is hidden, then the kernel's own folder
    (its working directory) is mounted back at its path; the course and Python are read-only; the
    grading processes are invisible; and the hiding mounts cannot be undone from inside.

    When the run has a zygote (``warm_kernels``), the jail's kernel is a fork of it, with numpy
    and torch already imported; otherwise a fresh ``_graded_kernel`` process.
    """
    kernel = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel"]
    if not isolation():
        return [*kernel, "-f", "{connection_file}"]
    zygote = run_folder / ZYGOTE_SOCKET
    warm_script = [sys.executable, "-I", "-S", _warm_kernels.__file__]
    if zygote.exists():
        kernel = [*warm_script, "standin", _warm_kernels.FD_PLACEHOLDER]
    read_only = dict.fromkeys([COURSE_ROOT, Path(sys.prefix), Path(sys.base_prefix)])
    own, stage = '"$own"', "/dev/shm/own"  # a private tmpfs on /dev/shm stages the re-mount
    steps = ['own="$PWD"', "mount -t tmpfs -o size=64m none /dev/shm", f"mkdir {stage}",
             f"mount --bind {own} {stage}",
             f"mount -t tmpfs -o size=1m none {shlex.quote(str(run_folder))}",
             f"mkdir -p {own}", f"mount --bind {stage} {own}", f"umount {stage}",
             f"cd {own}"]  # fmt: skip
    for path in read_only:
        quoted = shlex.quote(str(path))
        steps += [f"mount --rbind {quoted} {quoted}", f"mount -o remount,bind,ro {quoted}"]
    steps.append('exec "$@"')
    jailed = [*isolation(), "--", "sh", "-c", " && ".join(steps), "sh", *JAIL, "--", *kernel, "-f",
              "{connection_file}"]  # fmt: skip
    return [*warm_script, "launch", str(zygote), "--", *jailed] if zygote.exists() else jailed


ZYGOTE_SOCKET = "zygote.sock"


@contextlib.contextmanager
def warm_kernels(run_folder: Path, settings: Settings, outdir: Path):
    """Run a zygote for this grading run; yields a dict of its ``pid`` and, at exit, ``forked``.

    Kernels started while it runs are forks of it (see ``_warm_kernels``). If it cannot start,
    kernels start cold, as they do without it.
    """
    stats = {"forked": 0}
    folders, files = hidden_paths(settings, outdir)
    command = [sys.executable, "-m", "addnorm_lib.grading._warm_kernels", "serve",
               str(run_folder / ZYGOTE_SOCKET), *map(str, folders + files)]  # fmt: skip
    # Single-threaded, as forks that enter a user namespace must be; quiet about debugpy's import.
    zygote_env = {**single_threaded(kernel_environment(settings)),
                  "PYDEVD_DISABLE_FILE_VALIDATION": "1"}  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               env=zygote_env,
                               cwd=run_folder, text=True, start_new_session=True)  # fmt: skip
    stats["pid"] = process.pid
    try:
        if process.stdout.readline().strip() != "ready":
            print("warning: warm kernels unavailable; starting each kernel afresh", file=sys.stderr)
        yield stats
    finally:
        try:
            output, _ = process.communicate(timeout=30)  # closing its stdin stops it
            stats["forked"] = int(output.split()[-1]) if output.startswith("forked") else 0
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kernel_environment(settings: Settings) -> dict:
    """The environment graded kernels start from: the grader's, minus its own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "ADDNORM"))}
    threads = str(max(1, (os.cpu_count() or 1) // settings.jobs))  # jobs kernels share the cores
    env.update({name: threads for name in THREAD_VARIABLES})
    return env


def write_kernelspec(folder: Path, run_folder: Path) -> None:
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    spec_data = {"argv": kernel_argv(run_folder), "display_name": "graded", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(spec_data))


def run_graded(graded, workdir: Path, settings: Settings, outdir: Path):
    """Execute a graded notebook under nbval; return (cell records, wall-clock exceeded)."""
    private, sandbox = workdir / "private", workdir / "sandbox"
    private.mkdir(mode=0o700)
    for folder in ("observations", "runtime"):  # runtime: the kernel's connection file
        (sandbox / folder).mkdir(parents=True)
    write_kernelspec(private, workdir.parent)
    notebook = sandbox / "graded.ipynb"
    nbformat.write(graded, notebook)
    (private / "pytest.ini").write_text("[pytest]\n")
    env = kernel_environment(settings)
    env.update({
        "JUPYTER_PATH": str(private), "JUPYTER_RUNTIME_DIR": str(sandbox / "runtime"),
        "HOME": str(sandbox), "IPYTHONDIR": str(sandbox / ".ipython"),
        "MPLCONFIGDIR": str(sandbox / ".matplotlib"), "MPLBACKEND": "Agg",
        record.OBSERVATIONS_ENV: str(sandbox / "observations"),
        "ADDNORM_MEMORY_MB": str(settings.memory_mb), "ADDNORM_FILE_MB": str(settings.file_mb),
    })  # fmt: skip
    grades = private / "grades.json"
    env[RUN_MARKER] = str(workdir)  # finds this submission's processes, to clean up after it
    arguments = [
        str(notebook), "-c", str(private / "pytest.ini"), "-p", "nbval.plugin",
        "--nbval-lax", f"--nbval-kernel-name={KERNEL_NAME}",
        f"--nbval-cell-timeout={settings.cell_timeout}",
        "-p", "addnorm_lib.grading._nbval_grades", f"--addnorm-grades={grades}",
        "-p", "no:cacheprovider", "-q", "--color=no", f"--rootdir={private}",
    ]  # fmt: skip
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only nbval and ours: faster, and nothing else
    exit_code = run_pytest(arguments, private, env, hiding_mounts(settings, outdir),
                           settings.notebook_timeout)  # fmt: skip
    kill_marked(RUN_MARKER, str(workdir))
    if exit_code is None:
        return None, True
    if not grades.exists():
        return None, False
    return json.loads(grades.read_text())["cells"], False


# ----------------------------------------------------------------------------------------------
# Judging


def clean_message(report: str, limit: int = MESSAGE_LIMIT) -> str:
    """The exception line(s) of an nbval failure report, without ANSI codes, truncated to limit."""
    text = ANSI_ESCAPE.sub("", report)
    lines = text.rstrip().split("\n")
    starts = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    message = "\n".join(lines[starts[-1] :]) if starts else text.strip()
    if len(message) > limit:
        message = message[:limit] + f"\n... ({len(message) - limit} more characters)"
    return message


@dataclass
class CellGrade:
    grade_id: str
    points: float
    max_points: float
    status: str  # passed, failed, timeout, not_run
    message: str = ""
    hidden: bool = False


@dataclass
class Grade:
    submission: str
    assignment: str | None
    status: str
    reason: str = ""
    cells: list[CellGrade] = field(default_factory=list)
    max_total: float = 0.0
    notes: list[str] = field(default_factory=list)
    sha256: str = ""
    seconds: float = 0.0

    @property
    def total(self) -> float:
        return sum(cell.points for cell in self.cells)

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}

    @staticmethod
    def from_dict(data: dict) -> "Grade":
        data = {k: v for k, v in data.items() if k != "total"}
        data["cells"] = [CellGrade(**cell) for cell in data["cells"]]
        return Grade(**data)


def judge_checks(test: TestCell, observations: Path) -> str | None:
    """None if every recorded check of the cell passes, else the first failure message."""
    for name, seed in test.checks:
        path = record.observation_path(observations, name, seed)
        if not path.is_file():
            return (f"{name}(seed={seed}) recorded no result: the cell did not reach it, or the "
                    "check was switched off.")  # fmt: skip
        try:
            data = record.load(path)
            JUDGES[name](data, seed)  # raises CheckFailed, or returns the learner's summary
        except CheckFailed as failure:
            return f"CheckFailed: {failure}"
        except Exception as err:  # a tampered or truncated record
            return f"{name}(seed={seed}): the recorded result is unusable ({type(err).__name__})."
    return None


def judge(
    assignment: Assignment, records, observations: Path, cell_timeout: float
) -> list[CellGrade]:
    code_positions = [i for i, c in enumerate(assignment.graded_base.cells)
                      if c.cell_type == "code"]  # fmt: skip
    by_index = {code_positions[r["code_index"]]: r for r in records or []
                if r["code_index"] < len(code_positions)}  # fmt: skip
    cells = []
    for test in assignment.tests:
        found = by_index.get(test.index)
        if found is None:
            status, message = "not_run", "Not run: the notebook stopped before this cell."
        elif found["timed_out"]:
            status = "timeout"
            message = f"Timeout: the cell ran longer than {cell_timeout:g} s and was interrupted."
        else:
            message = judge_checks(test, observations)
            nbval_passed = found["status"] == "passed"
            status = "passed" if nbval_passed and message is None else "failed"
            if not nbval_passed and (message is None or "recorded no result" in message):
                message = clean_message(found["report"]) or f"nbval: {found['status']}"
        points = test.points if status == "passed" else 0.0
        cells.append(CellGrade(test.grade_id, points, test.points, status, message or "",
                               test.hidden))  # fmt: skip
    return cells


def notebook_status(records, wall_timeout: bool, cells: list[CellGrade]) -> tuple[str, str]:
    if wall_timeout:
        return "timeout", "the notebook exceeded its wall-clock limit"
    if records is None:
        return "error", "nbval produced no results"
    timed_out = [c.grade_id for c in cells if c.status == "timeout"]
    if timed_out or any(r["timed_out"] for r in records):
        return "timeout", "a cell exceeded the per-cell timeout" + (
            f" ({', '.join(timed_out)})" if timed_out else "")  # fmt: skip
    died = [r for r in records if not r["kernel_alive"]]
    if died:
        return "kernel_died", f"the kernel died in code cell {died[0]['code_index']}"
    return "ok", ""


def grade_submission(submission_id: str, path: Path, assignments: dict, settings: Settings,
                     outdir: Path, run_folder: Path) -> Grade:  # fmt: skip
    """Grade one submission; never raises (an unexpected failure is the status ``error``)."""
    start = time.monotonic()
    grade = Grade(submission_id, None, "error")
    try:
        raw = path.read_bytes()
        grade.sha256 = hashlib.sha256(raw).hexdigest()
        try:
            student = nbformat.reads(raw.decode("utf-8"), as_version=4)
            nbformat.validate(student)
        except Exception as err:
            grade.status, grade.reason = "malformed", f"not a valid notebook: {type(err).__name__}"
            return grade
        name = identify(student, path, assignments)
        if name is None:
            grade.status = "unknown_assignment"
            grade.reason = f"no assignment matches its metadata or file name ({path.name})"
            return grade
        assignment = assignments[name]
        grade.assignment, grade.max_total = name, assignment.max_total
        graded, grade.notes = assemble(assignment, student)
        with tempfile.TemporaryDirectory(prefix="submission-", dir=run_folder) as tmp:
            workdir = Path(tmp)
            records, wall_timeout = run_graded(graded, workdir, settings, outdir)
            observations = workdir / "sandbox" / "observations"
            grade.cells = judge(assignment, records, observations, settings.cell_timeout)
        grade.status, grade.reason = notebook_status(records, wall_timeout, grade.cells)
    except Exception as err:
        grade.status, grade.reason = "error", f"{type(err).__name__}: {err}"[:300]
    finally:
        grade.seconds = round(time.monotonic() - start, 2)
    return grade


# ----------------------------------------------------------------------------------------------
# Submissions and reports


def run_folder_context() -> tempfile.TemporaryDirectory:
    """The grading run's private folder; short, because the zygote's socket lives in it."""
    return tempfile.TemporaryDirectory(prefix="addnorm-grading-", dir=short_temp_base())


def grade_one(path: Path, source: Path = COURSE_ROOT / "solutions", **options) -> Grade:
    """Grade a single notebook against the instructor's notebooks in ``source``."""
    settings = Settings(source, **options)
    with (run_folder_context() as run_folder,
          tempfile.TemporaryDirectory(prefix="addnorm-reports-") as outdir):  # fmt: skip
        return grade_submission(Path(path).name, Path(path), load_assignments(source), settings,
                                Path(outdir), Path(run_folder))  # fmt: skip


def discover(paths: list[Path]) -> list[tuple[str, Path]]:
    """(unique submission id, path) of every notebook under the given paths."""
    found = []
    for root in paths:
        if root.is_file():
            found.append((root.name, root))
            continue
        for path in sorted(root.rglob("*.ipynb")):
            if ".ipynb_checkpoints" not in path.parts:
                found.append((path.relative_to(root).as_posix(), path))
    ids, unique = set(), []
    for submission_id, path in found:
        candidate, n = submission_id, 1
        while candidate in ids:
            n += 1
            candidate = f"{submission_id}~{n}"
        ids.add(candidate)
        unique.append((candidate, path))
    return unique


def safe_name(submission_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", submission_id.replace("/", "__"))


def write_reports(outdir: Path, grades: list[Grade], assignments: dict) -> None:
    """grades.csv and grades.json from all grades so far (rewritten atomically)."""
    grade_ids = list(dict.fromkeys(t.grade_id for a in assignments.values() for t in a.tests))
    rows = []
    for grade in sorted(grades, key=lambda g: g.submission):
        points = {cell.grade_id: f"{cell.points:g}" for cell in grade.cells}
        rows.append({"submission": grade.submission, "assignment": grade.assignment or "",
                     "status": grade.status, **{g: points.get(g, "") for g in grade_ids},
                     "total": f"{grade.total:g}", "max_total": f"{grade.max_total:g}"})  # fmt: skip
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, ["submission", "assignment", "status", *grade_ids, "total",
                                     "max_total"])  # fmt: skip
    writer.writeheader()
    writer.writerows(rows)
    _atomic_write(outdir / "grades.csv", buffer.getvalue())
    data = {"isolated": bool(isolation()), "grades": [g.to_dict() for g in
            sorted(grades, key=lambda g: g.submission)]}  # fmt: skip
    _atomic_write(outdir / "grades.json", json.dumps(data, indent=1))


def _atomic_write(path: Path, text: str) -> None:
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def feedback_html(grade: Grade) -> str:
    """One student's feedback page: points and the (cleaned, truncated) message per exercise."""
    e = html.escape
    rows = []
    for cell in grade.cells:
        hidden = " <em>(includes hidden tests)</em>" if cell.hidden else ""
        message = cell.message[:MESSAGE_LIMIT]
        rows.append(
            f"<tr><td>{e(cell.grade_id)}{hidden}</td><td>{cell.points:g} / {cell.max_points:g}"
            f"</td><td>{e(cell.status)}</td><td><pre>{e(message)}</pre></td></tr>"
        )
    notes = "".join(f"<li>{e(note)}</li>" for note in grade.notes)
    reason = f"<p>{e(grade.reason)}</p>" if grade.reason else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>Feedback: {e(grade.submission)}</title><style>body{{font-family:sans-serif;"
        "max-width:60em;margin:2em auto}td,th{border-bottom:1px solid #ccc;padding:.4em;"
        "vertical-align:top;text-align:left}pre{white-space:pre-wrap;margin:0}</style></head>"
        f"<body><h1>{e(grade.submission)}</h1><p>Assignment: {e(grade.assignment or '?')}; "
        f"status: <strong>{e(grade.status)}</strong>; total {grade.total:g} / "
        f"{grade.max_total:g}</p>{reason}{'<ul>' + notes + '</ul>' if notes else ''}"
        "<table><tr><th>test</th><th>points</th><th>status</th><th>message</th></tr>"
        f"{''.join(rows)}</table></body></html>\n"
    )


def points_table(grade: Grade) -> str:
    width = max([len(c.grade_id) for c in grade.cells] + [5])
    lines = [f"{grade.submission}: {grade.status} {grade.reason}".rstrip()]
    for cell in grade.cells:
        first = cell.message.splitlines()[0] if cell.message else ""
        lines.append(f"  {cell.grade_id:<{width}}  {f'{cell.points:g}/{cell.max_points:g}':>7}"
                     f"  {cell.status:<8} {first[:90]}")  # fmt: skip
    lines.append(f"  {'total':<{width}}  {f'{grade.total:g}/{grade.max_total:g}':>7}")
    return "\n".join(lines)


def progress(done: int, total: int, grade: Grade) -> None:
    """A progress bar on a terminal; one line per submission otherwise (logs, CI)."""
    if sys.stderr.isatty():
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done == total else ""
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} graded", end=end,
              file=sys.stderr, flush=True)  # fmt: skip
        return
    print(f"[{done}/{total}] {grade.submission}: {grade.status}, "
          f"{grade.total:g}/{grade.max_total:g}", file=sys.stderr)  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Grade student notebooks.")
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks or folders of notebooks")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("grades"),
        help="folder for the reports (default: ./grades)",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per cell")
    parser.add_argument(
        "--notebook-timeout", type=float, default=600.0, help="seconds per notebook"
    )
    parser.add_argument("--memory-mb", type=int, default=2048, help="memory cap of each kernel")
    parser.add_argument(
        "--source",
        type=Path,
        default=COURSE_ROOT / "solutions",
        help="the instructor's notebooks (default: the course's solutions/)",
    )
    parser.add_argument("--resume", action="store_true", help="skip submissions already graded")
    args = parser.parse_args(argv)

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"error: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        assignments = load_assignments(args.source)
    except Exception as err:
        print(f"error: cannot load the instructor's notebooks: {err}", file=sys.stderr)
        return 2
    settings = Settings(args.source, max(1, args.jobs), args.timeout, args.notebook_timeout,
                        args.memory_mb)  # fmt: skip
    outdir = args.out.resolve()
    (outdir / "feedback").mkdir(parents=True, exist_ok=True)
    (outdir / "records").mkdir(exist_ok=True)
    submissions = discover(args.paths)
    if not submissions:
        print("warning: no notebooks found in " + ", ".join(map(str, args.paths)), file=sys.stderr)
    if not isolation():
        print(
            "warning: no mount namespace here: graded kernels can read the reference solutions",
            file=sys.stderr,
        )

    grades: dict[str, Grade] = {}
    todo = []
    for submission_id, path in submissions:
        saved = outdir / "records" / f"{safe_name(submission_id)}.json"
        if args.resume and saved.exists():
            previous = Grade.from_dict(json.loads(saved.read_text()))
            if previous.sha256 == hashlib.sha256(path.read_bytes()).hexdigest():
                grades[submission_id] = previous
                continue
        todo.append((submission_id, path))
    write_reports(outdir, list(grades.values()), assignments)

    done = 0
    with contextlib.ExitStack() as stack:
        run_folder = stack.enter_context(run_folder_context())
        run_folder = Path(run_folder)
        warm = {"forked": 0}
        start_fork_server()  # now, so that its imports run while the zygote's do
        if isolation() and len(todo) > 1:  # a zygote pays for itself from the second kernel on
            warm = stack.enter_context(warm_kernels(run_folder, settings, outdir))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=settings.jobs))
        futures = [pool.submit(grade_submission, sid, path, assignments, settings, outdir,
                               run_folder) for sid, path in todo]  # fmt: skip
        for future in as_completed(futures):
            grade = future.result()
            grades[grade.submission] = grade
            name = safe_name(grade.submission)
            _atomic_write(outdir / "records" / f"{name}.json", json.dumps(grade.to_dict()))
            _atomic_write(outdir / "feedback" / f"{name}.html", feedback_html(grade))
            write_reports(outdir, list(grades.values()), assignments)
            done += 1
            progress(done, len(todo), grade)
    if len(submissions) == 1:
        print(points_table(next(iter(grades.values()))))
    else:
        counts = {s: sum(g.status == s for g in grades.values()) for s in STATUSES}
        print(f"graded {len(grades)} submissions: "
              + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
              + f"; {warm['forked']} warm kernels; reports in {outdir}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
