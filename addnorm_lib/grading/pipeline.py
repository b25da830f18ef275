"""Grade a folder of student notebooks: one command, robust to broken and hostile submissions.

    python -m addnorm_lib.grading PATH [PATH ...] [--out OUTDIR] [--jobs N] [--timeout SECONDS]
                                  [--notebook-timeout SECONDS] [--memory-mb MB] [--file-mb MB]
                                  [--notebook-mb MB] [--resume] [--source DIR]

Each PATH is a submission notebook or a folder searched recursively for ``*.ipynb``. Every
submission goes through the stages, one module each:

1. :mod:`~.discover` finds it and gives it an id; :mod:`~.settings` holds every default.
   Symbolic links are never followed: a link (to a notebook or a folder) is a submission that
   gets the status ``malformed``, and a row that says so;
2. :mod:`~.assemble` reads it (a file over ``--notebook-mb`` is not read, and a file that is not
   a notebook, or whose metadata has the wrong types, gets the status ``malformed``, with a
   reason that names what is wrong),
   finds its assignment from the notebook's metadata (``metadata.addnorm.assignment``), else
   from its file name, and builds the *graded notebook* from the instructor's copy in
   ``--source`` (default: the course's ``solutions/``): the instructor's cells, tests, hidden
   tests, metadata and points, with only the student's answer cells (matched by ``grade_id``,
   else by cell id) put in. Nothing the student wrote outside answer cells runs;
3. :mod:`~.execute` runs it with ``pytest --nbval-lax`` in its own process and temporary folder,
   in a kernel that :mod:`~.sandbox` confines: a bubblewrap whitelist sandbox (no network, no
   host files, sockets or processes, no references), a cgroup for all its processes where the
   machine allows one, a memory cap, a per-cell timeout, a per-notebook wall-clock limit and a
   cap on what it prints. When grading several notebooks, kernels are forked, already warm,
   from a process that has imported numpy and torch once, into each submission's sandbox.
   A kernel that dies before the hidden tests (which run last) gets one *recovery run*: the
   notebook again, in a fresh kernel of the same sandbox and limits, without the cell it died
   in and those after it, for the hidden tests of the test cells that passed before; only those
   hidden tests' records are taken from it;
4. :mod:`~.judge` decides the points outside the kernel: the checks in a test cell only *record*
   what the student's code returned, and this process *judges* the records. Code in the notebook
   can make a test cell fail, but cannot make it pass;
5. :mod:`~.report` writes ``OUTDIR/grades.csv`` (with the reason for each status; a cell that
   a spreadsheet would take for a formula starts with ``'``), ``OUTDIR/grades.json`` and
   ``OUTDIR/feedback/<submission>.html`` (a name of its own per submission), updated as each
   submission finishes, so an interrupted run loses nothing. Each submission's record keeps
   digests of its file, of its instructor's notebook and of the settings that change grades;
   ``--resume`` keeps a grade only when it was ``ok`` and all three are unchanged, and grades
   the rest again. Names and messages are printed with their control characters escaped.

A cell or a notebook times out by the grader's own clock (``_nbval_grades``,
``_pytest_runner``), never by what the kernel printed or raised.

Group limits (a cgroup per submission, :mod:`~.cgroups`) are needed to grade several
notebooks, as the sandbox is: as root the grader makes them; as another user without cgroups it
runs itself again in a delegated scope of its own where ``systemd-run --user --scope`` works;
otherwise it stops and says how to get them, unless ``--no-group-limits`` is given (then the
report and the summary say the run was unlimited). ``--no-sandbox`` implies no group limits:
it needs no second flag. One notebook (a learner's own) grades without them, with a warning.

Exit status 0 when every submission got a row, whatever the scores; 2 when the grader itself
could not run.
"""

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from addnorm_lib.grading import assemble, cgroups, discover, execute, judge, report, sandbox
from addnorm_lib.grading.discover import Submission
from addnorm_lib.grading.judge import Grade
from addnorm_lib.grading.settings import Settings, grading_digest, parse_command_line

DEFAULT_SOURCE = Settings().source


def read(submission: Submission, settings: Settings) -> Submission:
    """The *read* stage: the submission with its bytes, or with why they cannot be read as a
    submission (a link, too big, gone: ``refused``). Never raises."""
    try:
        raw = assemble.read_file(submission.path, settings.notebook_mb)
    except assemble.SubmissionRejected as rejected:
        return replace(submission, refused=(rejected.status, rejected.reason))
    except OSError as err:
        return replace(submission, refused=("error", f"cannot read the file: {err}"[:300]))
    return replace(submission, raw=raw)


def grade_submission(
    submission: Submission, assignments: dict, settings: Settings, box: sandbox.Sandbox
) -> Grade:
    """Grade one submission, read or not (:func:`read`), in a kernel of ``box``; never raises
    (an unexpected failure is the status ``error``)."""
    return grade_with(execute.NbvalExecutor(box, settings), submission, assignments, settings)


def grade_with(
    executor: execute.Executor, submission: Submission, assignments: dict, settings: Settings
) -> Grade:
    """Grade one submission with ``executor`` (:class:`~.execute.Executor`); never raises (an
    unexpected failure is the status ``error``).

    A submission that cannot be graded (``malformed``, ...) gets 0 out of the points of the
    assignment it was meant for, where ``--assignment`` or its file name says which.
    """
    start = time.monotonic()
    grade = Grade(submission.id, None, "error")
    grade.settings_sha256 = grading_digest(settings, executor.isolated)
    try:
        run_stages(grade, submission, assignments, settings, executor)
    except assemble.SubmissionRejected as rejected:
        grade.status, grade.reason = rejected.status, rejected.reason
        path = submission.path
        named = settings.assignment or assemble.named_in_file_name(path, assignments)
        if grade.assignment is None and named:  # 0 out of that assignment's points
            grade.assignment, grade.max_total = named, assignments[named].max_total
    except Exception as err:
        grade.status, grade.reason = "error", f"{type(err).__name__}: {err}"[:300]
    finally:
        grade.seconds = round(time.monotonic() - start, 2)
    return grade


def run_stages(
    grade: Grade,
    submission: Submission,
    assignments: dict,
    settings: Settings,
    executor: execute.Executor,
) -> None:
    """Fill in ``grade``, stage by stage (the stages after *discover*):

    1. *read* the submission, unless it was (:func:`read`);
    2. *identify* it: the notebook in it, and its assignment (``assemble.read_submission``,
       ``assemble.assignment_of``);
    3. *assemble* the graded notebook (``assemble.assemble``);
    4. *execute* it (``executor.execute``; once more, for the hidden tests, if its kernel died
       before them: ``execute.recovered``);
    5. *judge* its records (``judge.judge``, ``judge.notebook_status``).

    The *report* stage is the runner's (:func:`collect`).
    """
    if submission.raw is None and submission.refused is None:
        submission = read(submission, settings)
    if submission.refused is not None:
        raise assemble.SubmissionRejected(*submission.refused)
    grade.sha256 = hashlib.sha256(submission.raw).hexdigest()
    student = assemble.read_submission(submission.raw)
    assignment = assemble.assignment_of(student, submission.path, assignments, settings.assignment)
    grade.assignment, grade.max_total = assignment.name, assignment.max_total
    grade.source_sha256 = assignment.source_sha256
    graded, grade.notes = assemble.assemble(assignment, student)
    with (
        executor.execute(graded) as run,
        execute.recovered(graded, run, executor) as again,
    ):
        timeout = settings.cell_timeout
        grade.cells = judge.judge(assignment, run.records, run.observations, timeout, again)
    grade.status, grade.reason = judge.notebook_status(run.records, run.wall_timeout, grade.cells)


def grade_one(path: Path, source: Path = DEFAULT_SOURCE, **options) -> Grade:
    """Grade a single notebook against the instructor's notebooks in ``source``.

    ``options`` are fields of :class:`~.settings.Settings` (``cell_timeout=...``, ...).
    """
    path, settings = Path(path), Settings(Path(source), **options)
    assignments = assemble.load_assignments(settings.source)
    with sandbox.open_sandbox(settings) as box:
        return grade_submission(Submission(path.name, path), assignments, settings, box)


def still_stands(
    previous: Grade, submission: Submission, assignments: dict, settings: Settings, digest: str
) -> bool:
    """Whether an earlier run's grade of ``submission`` can be kept.

    Only an ``ok`` grade can: any other status may come from a fault of the machine (a full disk,
    a kill), and is graded again. It is kept when it was decided from the same file, against
    the same instructor's notebook (the submission still names that assignment) and with the
    same settings (``digest``: :func:`~.settings.grading_digest`). A file that cannot be read
    as a submission now (a link, too big, gone, not a notebook) is graded again.
    """
    if previous.status != "ok" or previous.settings_sha256 != digest:
        return False
    found = read(submission, settings)
    if found.refused is not None:
        return False
    try:
        student = assemble.read_submission(found.raw)
        assignment = assemble.assignment_of(
            student, submission.path, assignments, settings.assignment
        )
    except assemble.SubmissionRejected:
        return False
    return (
        previous.sha256 == hashlib.sha256(found.raw).hexdigest()
        and previous.assignment == assignment.name
        and previous.source_sha256 == assignment.source_sha256
    )


def unchanged_grades(
    outdir: Path,
    submissions: list[Submission],
    assignments: dict,
    settings: Settings,
    isolated: bool,
) -> dict[str, Grade]:
    """The grades an earlier run kept in ``outdir`` that still stand (:func:`still_stands`) in
    a run with these settings, its kernels in the sandbox or not (``isolated``)."""
    digest = grading_digest(settings, isolated)
    kept = {}
    for submission in submissions:
        previous = report.read_saved_grade(outdir, submission.id)
        if previous is not None and still_stands(
            previous, submission, assignments, settings, digest
        ):
            kept[submission.id] = previous
    return kept


def graded_locally(
    todo: list[Submission], assignments: dict, box: sandbox.Sandbox
) -> Iterator[Grade]:
    """The local runner: the grades of ``todo``, ``--jobs`` at a time in this machine's sandbox
    (its warm kernels), each as soon as it is known."""
    settings = box.settings
    with ThreadPoolExecutor(max_workers=settings.jobs) as pool:
        futures = [
            pool.submit(grade_submission, submission, assignments, settings, box)
            for submission in todo
        ]
        for future in as_completed(futures):
            yield future.result()


def collect(grades_in: Iterable[Grade], total: int, context: "RunContext") -> None:
    """Save and report each grade of a runner as it arrives, into ``context.grades``: an
    interrupted run loses nothing."""
    for done, grade in enumerate(grades_in, start=1):
        context.grades[grade.submission] = grade
        report.save_grade(context.outdir, grade)
        report.write_reports(
            context.outdir, list(context.grades.values()), context.assignments, context.confinement
        )
        report.progress(done, total, grade)


@dataclass
class RunContext:
    """What every runner reports into: the output folder, the grades so far (kept ones
    included), the assignments and how the kernels were confined."""

    outdir: Path
    grades: dict[str, Grade]
    assignments: dict
    confinement: dict


def warn(message: str) -> None:
    """A warning on stderr (control characters escaped)."""
    print(f"warning: {report.printable(message)}", file=sys.stderr)


def fail(message: str) -> None:
    """An error on stderr (control characters escaped)."""
    print(f"error: {report.printable(message)}", file=sys.stderr)


def load_assignments_for(paths: list[Path], settings: Settings) -> dict | None:
    """The instructor's assignments, if the paths exist, they load and ``--assignment`` names
    one of them; else None, said on stderr."""
    missing = discover.missing_paths(paths)
    if missing:
        fail(f"no such file or folder: {', '.join(map(str, missing))}")
        return None
    try:
        assignments = assemble.load_assignments(settings.source)
    except Exception as err:
        fail(f"cannot load the instructor's notebooks: {err}")
        return None
    if settings.assignment and settings.assignment not in assignments:
        names = ", ".join(sorted(assignments))
        fail(f"--assignment {settings.assignment!r} is not an assignment; give one of {names}")
        return None
    return assignments


UNPROTECTED = (
    "the grader cannot build its sandbox here ({problem}), so other people's notebooks could "
    "read the references, reach the network and tamper with the reports. Install bubblewrap "
    "(Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
    "kernel.apparmor_restrict_unprivileged_userns=0), or grade in a disposable virtual machine "
    "with --no-sandbox. One notebook of your own grades without it."
)


AS_ROOT = (
    "grading as root: the sandbox's user is root on this machine, without capabilities and "
    "with /proc read-only; grade as an unprivileged user where you can (see the threat model)"
)


UNLIMITED = (
    "grading several notebooks without group limits ({problem}): a submission's processes "
    "together could fill memory, /dev/shm and the process table past their own caps and break "
    "the notebooks graded alongside. Grade as root, or as a user whose `systemd-run --user "
    "--scope` works (the grader then runs itself in a delegated cgroup scope), or pass "
    "--no-group-limits to grade without them."
)
# What grades.json's group_limits and the summary say of a run with --no-group-limits.
NO_GROUP_LIMITS = "unlimited: --no-group-limits was given"


def run_in_scope(arguments: list[str]) -> int:
    """Grade with ``arguments`` again, in a delegated scope of the grader's own; its exit status.

    It runs in this process group: a ^C reaches it too, and this process waits for it to clean
    up (its kernels, cgroups and folders) rather than kill it.
    """
    command, env = cgroups.scope_command(arguments), cgroups.scope_environment()
    with subprocess.Popen(command, env=env) as process:
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                continue


def without_group_limits(group_problem: str, arguments: list[str]) -> int:
    """A class to grade and no cgroup to make (``group_problem``): the exit status of the grader
    run again with ``arguments`` in a delegated scope of its own where it can be (not as root,
    which has the machine's cgroups or none; never twice); else 2, said in one line."""
    reasons = [group_problem]
    if os.geteuid() != 0 and not cgroups.in_grader_scope():
        why_not = cgroups.systemd_run_problem()
        if why_not is None:
            return run_in_scope(arguments)
        reasons.append(why_not)
    fail(UNLIMITED.format(problem="; ".join(reasons)))
    return 2


def main(argv: list[str] | None = None) -> int:
    """The command line: grade, write the reports, print a summary; the exit status.

    The runner is this machine (:func:`grade_here`) or, with ``--dask-scheduler``, a Dask
    cluster (:func:`~.cluster.grade_on_cluster`); both run the same stages on each submission.
    """
    paths, settings = parse_command_line(argv)
    assignments = load_assignments_for(paths, settings)
    if assignments is None:
        return 2
    outdir = report.prepare_outdir(settings.out)
    submissions = discover.discover(paths)
    if not submissions:
        warn("no notebooks found in " + ", ".join(map(str, paths)))
    if settings.dask_scheduler:
        from addnorm_lib.grading import cluster  # distributed: imported for a cluster run only

        return cluster.grade_on_cluster(submissions, assignments, settings, outdir)
    return grade_here(submissions, assignments, settings, outdir, argv)


def closing_words(
    submissions: list[Submission],
    context: "RunContext",
    forked: int | str,
    group_problem: str | None,
) -> str:
    """What the run prints last: one notebook's points table, or a class's summary (with the
    warm kernels forked, and why there were no group limits, if there were none)."""
    grades, outdir = list(context.grades.values()), context.outdir
    if len(submissions) == 1:
        (grade,) = grades
        return report.points_table(grade, report.feedback_path(outdir, grade.submission))
    return report.summary(grades, forked, outdir, group_problem)


def grade_here(
    submissions: list[Submission],
    assignments: dict,
    settings: Settings,
    outdir: Path,
    argv: list[str] | None,
) -> int:
    """Grade ``submissions`` on this machine (the local runner, :func:`graded_locally`); the
    exit status."""
    problem = sandbox.sandbox_problem(settings)
    if problem and len(submissions) > 1 and not settings.no_sandbox:
        fail(UNPROTECTED.format(problem=problem))
        return 2
    group_problem = None
    if problem is None and len(submissions) > 1 and not settings.no_group_limits:
        group_problem = cgroups.cgroup_problem()
    if group_problem:
        return without_group_limits(group_problem, sys.argv[1:] if argv is None else list(argv))
    no_room = sandbox.room_problem(settings)
    if no_room is not None:
        fail(no_room)
        return 2
    grades = {}
    if settings.resume:
        grades = unchanged_grades(outdir, submissions, assignments, settings, problem is None)
    todo = [submission for submission in submissions if submission.id not in grades]
    execute.start_pytest_server()  # these three start at once: each imports for a second or two
    judge.start_judge()
    with sandbox.open_sandbox(settings, warm=len(todo) > 1) as box:
        if settings.no_group_limits and box.isolated:
            box.group_problem = NO_GROUP_LIMITS  # before any kernel: none gets a cgroup
        if problem:
            warn(
                f"no sandbox ({problem}): the notebook runs with your permissions and can read "
                "the course's files, references included; fine for your own work, not for "
                "grading other people's"
            )
        elif box.group_problem:
            warn(f"no group limits ({box.group_problem}): each kernel process has its own limits")
        if not problem and os.geteuid() == 0:
            warn(AS_ROOT)
        context = RunContext(outdir, grades, assignments, box.describe())
        report.write_reports(outdir, list(grades.values()), assignments, context.confinement)
        collect(graded_locally(todo, assignments, box), len(todo), context)
    print(closing_words(submissions, context, box.warm_kernels_forked, box.group_problem))
    return 0
