"""The Dask runner: ``python -m addnorm_lib.grading SUBMISSIONS --dask-scheduler tcp://HOST:8786``.

A class too large for one machine is graded by the workers of a running Dask cluster (``dask
scheduler`` on one machine, ``dask worker`` on each of the others, the course installed on
every one). The stages are the local runner's (:func:`~.pipeline.grade_submission`); only where
they run differs:

- this process discovers and *reads* each submission (:func:`~.pipeline.read`: its bytes, or
  why it cannot be read) and sends it as a typed :class:`~.discover.Submission`, so workers
  need no shared disk; the instructor's assignments, loaded here once, are sent to every worker;
- each worker process grades with a sandbox, warm kernels, pytest fork server and judge of its
  own (:func:`worker_sandbox`, kept open between runs with the same settings and closed by
  :class:`GraderPlugin` when the worker stops), ``--nthreads`` submissions at a time;
- each :class:`~.judge.Grade` comes back typed and is saved and reported here as it arrives,
  into the same reports as a local run.

Before any submission is sent, every worker is asked whether it can grade as this machine would
(:func:`worker_problem`): a worker without the sandbox (unless ``--no-sandbox``), without group
limits (unless ``--no-group-limits``), or that runs as a daemonic process (Dask's default, which
cannot start the grader's processes: see :data:`WORKER_COMMAND`) stops the run with one line. A
worker that joins later and cannot grade refuses its submissions (status ``error``, with the
reason) rather than grade them unconfined.

A worker that dies mid-run (its machine lost, killed) loses nothing: the scheduler gives its
submissions to another worker, which grades them again from the start. A submission whose
workers died more than :data:`ALLOWED_FAILURES` times (Dask's ``allowed-failures``) gets the
status ``error`` and a reason that says so.
"""

import contextlib
import multiprocessing
import os
import threading
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import distributed
from distributed.diagnostics.plugin import WorkerPlugin

from addnorm_lib.grading import cgroups, execute, judge, pipeline, report, sandbox
from addnorm_lib.grading.discover import Submission
from addnorm_lib.grading.judge import Grade
from addnorm_lib.grading.settings import Settings, code_digest

WORKER_COMMAND = "DASK_DISTRIBUTED__WORKER__DAEMON=False dask worker ADDRESS --nthreads N"
CONNECT_SECONDS = 30  # to reach the scheduler
ALLOWED_FAILURES = 3  # Dask's default allowed-failures: deaths of a submission's workers
PLUGIN_NAME = "addnorm-grader"
STALE = (
    "it runs other grading code than this machine (the grader, the checks or the references "
    "differ): install the same course on it and restart the worker"
)
# The grading code this process imported, as its digest: on a worker, what it grades with, even
# when the files on its disk have changed since.
IMPORTED_CODE = code_digest()
# Settings that only the grader's machine reads (``--assignment`` is applied there too, when the
# submissions are identified, but grading needs it on the worker).
LOCAL_ONLY = ("out", "source", "resume", "dask_scheduler")


class WorkerUnfit(RuntimeError):
    """A worker that cannot grade as the grader's own machine would: why."""


# ----------------------------------------------------------------------------------------------
# On each worker


@dataclass(frozen=True)
class WorkerReport:
    """What a worker says before grading: its problem (None: it can grade), how its kernels are
    confined (``Sandbox.describe()``), its submissions at once (threads), its process id, and
    the digest of the grading code it imported (:data:`IMPORTED_CODE`)."""

    address: str
    problem: str | None
    confinement: dict
    threads: int
    pid: int
    code: str = ""


_boxes: dict[Settings, tuple[contextlib.ExitStack, sandbox.Sandbox]] = {}
_boxes_lock = threading.Lock()


def worker_settings(settings: Settings, worker: distributed.Worker) -> Settings:
    """The run's settings as ``worker`` applies them: ``--jobs`` is its own thread count, and
    what only the grader's machine uses (where the reports go and the instructor's notebooks
    are, ``--resume``, the scheduler) is left at its default, so that a worker keeps its sandbox
    for the next run with the same limits."""
    local_only = {name: getattr(Settings, name) for name in LOCAL_ONLY}
    return replace(settings, jobs=worker.state.nthreads, **local_only)


def worker_problem(settings: Settings) -> str | None:
    """Why this worker process cannot grade with ``settings`` as the grader's own machine would
    (one line), or None."""
    if multiprocessing.current_process().daemon:
        return (
            "it runs as a daemonic process, which cannot start the grader's kernels; start "
            f"the workers as: {WORKER_COMMAND}"
        )
    problem = sandbox.sandbox_problem(settings)
    if problem and not settings.no_sandbox:
        return pipeline.UNPROTECTED.format(problem=problem)
    if problem is None and not settings.no_group_limits:
        group_problem = cgroups.cgroup_problem()
        if group_problem:
            return pipeline.UNLIMITED.format(problem=group_problem)
    return sandbox.room_problem(settings)


def worker_sandbox(settings: Settings) -> sandbox.Sandbox:
    """This worker's sandbox for ``settings``, opened once (warm kernels, pytest fork server,
    judge) and kept for the next submission and the next run; one with other settings is closed
    first. Raises :class:`WorkerUnfit` where the worker cannot grade (:func:`worker_problem`)."""
    with _boxes_lock:
        if settings in _boxes:
            return _boxes[settings][1]
        problem = worker_problem(settings)
        if problem:
            raise WorkerUnfit(problem)
        close_sandboxes()
        stack = contextlib.ExitStack()
        execute.start_pytest_server()
        judge.start_judge()
        box = stack.enter_context(sandbox.open_sandbox(settings, warm=True))
        if settings.no_group_limits and box.isolated:
            box.group_problem = pipeline.NO_GROUP_LIMITS
        _boxes[settings] = (stack, box)
        return box


def close_sandboxes() -> None:
    """Close every sandbox this worker opened (their kernels, zygote and folders)."""
    while _boxes:
        _, (stack, _) = _boxes.popitem()
        stack.close()


def prepare_worker(settings: Settings, dask_worker: distributed.Worker) -> WorkerReport:
    """Run on every worker (``Client.run``, which passes ``dask_worker``) before the first
    submission: its problem or, where it has none, its sandbox opened (so that the workers'
    zygotes start together) and described."""
    local = worker_settings(settings, dask_worker)
    problem = worker_problem(local)
    confinement = {} if problem else worker_sandbox(local).describe()
    address, pid = dask_worker.address, os.getpid()
    return WorkerReport(address, problem, confinement, local.jobs, pid, IMPORTED_CODE)


def grade_on_worker(
    submission: Submission, assignments: dict, settings: Settings, code: str
) -> Grade:
    """The task each submission is: graded in this worker's sandbox (:func:`worker_sandbox`);
    never raises. A worker that cannot grade, or whose grading code is not the grading
    machine's ``code`` (one that joined after the run was checked), gives the status ``error``
    and why."""
    worker = distributed.get_worker()
    local = worker_settings(settings, worker)
    try:
        if code != IMPORTED_CODE:
            raise WorkerUnfit(STALE)
        box = worker_sandbox(local)
    except WorkerUnfit as unfit:
        reason = f"worker {worker.address} cannot grade: {unfit}"
        return Grade(submission.id, None, "error", reason[:300])
    return pipeline.grade_submission(submission, assignments, local, box)


class GraderPlugin(WorkerPlugin):
    """Closes the worker's sandboxes when the worker stops."""

    name = PLUGIN_NAME

    def teardown(self, worker) -> None:
        """Dask's hook as the worker closes: close its sandboxes."""
        close_sandboxes()


# ----------------------------------------------------------------------------------------------
# On the grader's machine


def unfit_workers(reports: list[WorkerReport], code: str) -> list[tuple[str, str]]:
    """(address, problem) of each worker that cannot grade as this machine would: its own
    problem, or grading code other than this machine's ``code`` (a worker started before the
    course was updated runs the code it imported then)."""
    unfit = []
    for found in reports:
        if found.problem:
            unfit.append((found.address, found.problem))
        elif found.code != code:
            unfit.append((found.address, STALE))
    return unfit


def lost_grade(submission: Submission, err: BaseException) -> Grade:
    """The row of a submission the cluster gave up on (its workers kept dying, or the task
    failed in Dask itself)."""
    if isinstance(err, distributed.KilledWorker):
        allowed = getattr(err, "allowed_failures", ALLOWED_FAILURES)
        reason = f"its workers died more than {allowed} times while grading it: grade it again"
    else:
        reason = f"the cluster could not grade it: {type(err).__name__}: {err}"
    return Grade(submission.id, None, "error", reason[:300])


def graded_on_cluster(client, todo: list[Submission], assignments: dict, settings: Settings):
    """The cluster runner: the grades of ``todo`` from the workers of ``client``, each as soon
    as it is known (the files read here, one at a time as they are sent)."""
    shared = client.scatter(assignments, broadcast=True)
    run = uuid.uuid4().hex[:8]
    futures = {}
    for number, submission in enumerate(todo):
        found = pipeline.read(submission, settings)
        key = f"addnorm-grade-{run}-{number}"
        future = client.submit(
            grade_on_worker, found, shared, settings, code_digest(), key=key, pure=False
        )
        futures[future] = found
    for future in distributed.as_completed(futures, loop=client.loop):
        try:
            yield future.result()
        except Exception as err:
            yield lost_grade(futures[future], err)


def cluster_confinement(reports: list[WorkerReport]) -> dict:
    """How the cluster's kernels were confined, for grades.json: the first worker's description
    (a key that differs between workers says so) and each worker's address and threads."""
    merged = {}
    for key in reports[0].confinement:
        values = {str(found.confinement.get(key)) for found in reports}
        merged[key] = reports[0].confinement[key] if len(values) == 1 else " | ".join(values)
    merged["runner"] = "dask"
    merged["workers"] = {found.address: found.threads for found in reports}
    return merged


def grade_on_cluster(
    submissions: list[Submission], assignments: dict, settings: Settings, outdir: Path
) -> int:
    """Grade ``submissions`` on the Dask cluster of ``--dask-scheduler``; the exit status."""
    address = settings.dask_scheduler
    try:
        client = distributed.Client(address, timeout=CONNECT_SECONDS, set_as_default=False)
    except (OSError, TimeoutError) as err:
        pipeline.fail(f"cannot reach the Dask scheduler at {address}: {err}")
        return 2
    with client:
        try:
            reports = list(client.run(prepare_worker, settings).values())
        except Exception as err:  # a worker's own failure, as Dask passes it on
            pipeline.fail(f"a Dask worker could not prepare to grade: {type(err).__name__}: {err}")
            return 2
        if not reports:
            pipeline.fail(
                f"the Dask scheduler at {address} has no workers: start some with {WORKER_COMMAND}"
            )
            return 2
        unfit = unfit_workers(reports, code_digest())
        if unfit:
            address, problem = unfit[0]
            pipeline.fail(f"worker {address} cannot grade: {problem}")
            return 2
        client.register_plugin(GraderPlugin(), name=PLUGIN_NAME)
        grades = {}
        if settings.resume:
            isolated = not settings.no_sandbox
            grades = pipeline.unchanged_grades(outdir, submissions, assignments, settings, isolated)
        todo = [submission for submission in submissions if submission.id not in grades]
        confinement = cluster_confinement(reports)
        context = pipeline.RunContext(outdir, grades, assignments, confinement)
        report.write_reports(outdir, list(grades.values()), assignments, confinement)
        pipeline.collect(graded_on_cluster(client, todo, assignments, settings), len(todo), context)
    group_limits = str(confinement.get("group_limits", ""))
    group_problem = group_limits.removeprefix("none: ") if group_limits != "cgroup" else None
    on_workers = f"{len(reports)} Dask workers'"
    print(pipeline.closing_words(submissions, context, on_workers, group_problem))
    return 0
