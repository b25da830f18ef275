"""Deciding the points, in the grading process, where the student's code never ran.

A test cell's checks only *record* what the student's code returned; here each record is judged
by the check's judge (``addnorm_lib.checks.JUDGES``). A test cell earns its points when nbval
passed it *and* every check it calls recorded a result that its judge accepts: code in the
notebook can make a test cell fail, but cannot make it pass.

A record is written by the kernel, which runs the student's code: it is hostile input. It is read
as such (``addnorm_lib.checks._record``: regular files only, sizes and dtypes checked before
reading, the exact structure the judge expects) and judged in a short-lived worker process with
memory and time limits (``_judge_worker``), one per notebook for all of its checks, forked from a
zygote that has imported the checks and torch once. A record that still blows up a judge costs
its own test cell its points, with a message that says so; the grader and the other cells go on.
What a record can only claim (facts that the kernel alone saw, ``checks.UNVERIFIED``) earns no
points; a passing cell's message names those claims as unverified, and says its points stand.

**Hidden tests** run last, each test cell's in a tail cell of its own (``assemble``). A test cell
with hidden tests earns its points when its visible cell passed as above *and* its tail cell
ran, passed, and every check it calls recorded a result that its judge accepts. Nothing the
kernel said about a tail cell reaches a message: not nbval's report, not its output, not its
exception, not a judge's text on a hidden case (it may quote hidden inputs), not a hidden seed.
The message is the grader's own (:data:`HIDDEN_FAILED`, ...), naming the check at most. The
visible checks are judged from the records sealed before the tail ran (``_nbval_grades``), so a
kernel that saw the hidden tests cannot rewrite what a visible check's message quotes.

A kernel that died before the tail gets one **recovery run** (``execute.recovered``): then the
tail cells' records, and the hidden checks' observations, are the recovery run's
(:func:`recovered_records`), and everything else (the visible cells, their messages, the
notebook's status) is still the first run's. A tail cell that the recovery run's kernel did not
live to start is not run (:data:`HIDDEN_NOT_RUN`).

**Caps.** What the kernel can make long is cut on its way to ``grades.json``, the feedback page
and the terminal, with a note that says so; a submission's row is always kept.

=================================  =============================  ================================
what                               cap                            the note where it is cut
=================================  =============================  ================================
a test cell's message              :data:`MESSAGE_LIMIT` chars    ``... (N more characters)``
nbval's report of a failed cell    its last 20,000 chars          (the exception line is at the
(``_nbval_grades.REPORT_CHARS``)   (then the message cap)         end: it is kept)
a judge's message on a record      20,000 chars, a line of 1 MiB  the message cap's
(``_judge_worker``)                (then the message cap)
the kernel's output, in all        ``--output-mb``                ``[output past the grader's
                                                                  cap of N MiB: dropped]``
the cell records (``execute``)     64 MiB                         status ``error``: "nbval
                                                                  produced no results"
one check's record (``_record``)   32 MiB                         ``unusable (too large)``
a note (``assemble``)              500 chars                      ``... (N more characters)``
notes (``assemble``)               10                             ``... and N more notes like
                                                                  these``
a reason                           300 chars of an error's text   (fixed texts around it)
test cells and cell records        the instructor's cells         (a submission adds none)
=================================  =============================  ================================
"""

import atexit
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from addnorm_lib.checks import _record as record
from addnorm_lib.grading._pytest_runner import single_threaded
from addnorm_lib.grading.assemble import Assignment, TestCell
from addnorm_lib.grading.cell_record import CellRecord
from addnorm_lib.grading.verdict import Verdict

if TYPE_CHECKING:  # the judge needs no sandbox: the recovery run is just records and a folder
    from addnorm_lib.grading.execute import Execution
from addnorm_lib.grading.settings import COURSE_ROOT

# A submission's status: it ran to the end (ok), or why not.
GradeStatus = Literal["ok", "timeout", "kernel_died", "malformed", "unknown_assignment", "error"]
STATUSES: tuple[str, ...] = get_args(GradeStatus)
# A test cell's status, as judged (CellRecord's statuses are the executor's, Verdict's kinds a
# judge's: three vocabularies, each with its own type).
CellGradeStatus = Literal["passed", "failed", "timeout", "not_run"]
# Terminal escape sequences: CSI (colours, cursor moves), OSC (window titles, links), the rest.
ANSI_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"
)
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # every control but tab and newline
# The traceback line that names the exception: "ValueError: ...", "CheckFailed: ..."
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Exit|Interrupt|Warning)\b")
MESSAGE_LIMIT = 2000  # characters of a failure message kept in a report
NO_RESULT = "recorded no result"
# The note on a passed cell whose checks also rely on what only the kernel saw: not a deduction.
PASSED_WITH_CLAIMS = (
    "Passed: full points. Your notebook also reported the following, which the grader cannot "
    "check from outside your notebook (it adds or removes no points):"
)
UNUSABLE = "the recorded result is unusable"
# The messages of hidden tests: the grader's own words, the check's name at most.
HIDDEN_FAILED = "Failed a hidden test: {name} on a case the grader keeps hidden."
HIDDEN_NO_RESULT = (
    "A hidden test, {name}, " + NO_RESULT + ": the notebook did not reach it, or switched the "
    "check off."
)
HIDDEN_LIMITS = (
    "A hidden test, {name}: judging its result was stopped at the judge's limits ({limits}); "
    "it earns no points."
)
HIDDEN_ERROR = "Failed a hidden test on a case the grader keeps hidden: the cell raised an error."
HIDDEN_TIMEOUT = "A hidden test did not finish in {seconds:g} s and was interrupted."
HIDDEN_NOT_RUN = (
    "Not run: the notebook stopped before the hidden tests, which run after every other cell."
)

# The judge worker's limits (module constants: the grader's settings are not the judge's).
JUDGE_MEMORY_MB = 1024  # address space a worker may use beyond the zygote's own (~0.7 GiB)
JUDGE_CHECK_SECONDS = 20  # wall-clock seconds to judge one check's record
JUDGE_START_SECONDS = 120  # for the zygote to import numpy, torch and the checks
WORKER_START_SECONDS = 30  # for a worker to be forked and say its pid
JUDGES_MODULE = "addnorm_lib.checks"  # the module whose JUDGES and UNVERIFIED the workers use
LINE_LIMIT = 2**20  # bytes of one line from a worker


@dataclass
class CellGrade:
    """The grade of one test cell."""

    grade_id: str
    points: float
    max_points: float
    status: CellGradeStatus
    message: str = ""
    hidden: bool = False


@dataclass
class Grade:
    """The grade of one submission: its status, and the grade of each test cell.

    It keeps digests of what it was decided from (the submission, the instructor's notebook, the
    settings), for ``--resume`` to tell whether it still stands.
    """

    submission: str
    assignment: str | None
    status: GradeStatus
    reason: str = ""
    cells: list[CellGrade] = field(default_factory=list)
    max_total: float = 0.0
    notes: list[str] = field(default_factory=list)
    sha256: str = ""  # of the submitted file
    seconds: float = 0.0
    source_sha256: str = ""  # of the instructor's notebook it was graded against
    settings_sha256: str = ""  # of the settings that change grades (settings.grading_digest)

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


def capped(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` cut to ``limit`` characters, with a note of how many were left out."""
    if len(message) > limit:
        message = message[:limit] + f"\n... ({len(message) - limit} more characters)"
    return message


def clean_message(report: str, limit: int = MESSAGE_LIMIT) -> str:
    """The exception line(s) of an nbval failure report, without terminal escape sequences or
    other control characters, truncated to limit."""
    text = CONTROLS.sub("", ANSI_ESCAPE.sub("", report))
    lines = text.rstrip().split("\n")
    starts = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    message = "\n".join(lines[starts[-1] :]) if starts else text.strip()
    return capped(message, limit)


# ----------------------------------------------------------------------------------------------
# Judging the records, in worker processes


class JudgeUnavailable(RuntimeError):
    """The judge's worker processes could not be started."""


class _Zygote:
    """The process that workers are forked from (``_judge_worker``), and the socket to it."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-m", "addnorm_lib.grading._judge_worker", str(theirs.fileno())]
        with theirs:
            self.process = subprocess.Popen(
                command,
                pass_fds=[theirs.fileno()],
                cwd=COURSE_ROOT,
                env=single_threaded(
                    {k: v for k, v in os.environ.items() if k != record.OBSERVATIONS_ENV}
                ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the grader does not reach it
            )
        self.control = ours
        self.lock = threading.Lock()
        ours.settimeout(JUDGE_START_SECONDS)
        try:
            hello = ours.recv(4096)
        except OSError:
            hello = b""
        ours.settimeout(None)
        if hello != b"ready":
            self.close()
            reason = hello.decode(errors="replace") or "it exited"
            raise JudgeUnavailable(f"the judge's zygote did not start: {reason}")

    def connect(self) -> socket.socket:
        """A socket to a freshly forked worker."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs, self.lock:
            socket.send_fds(self.control, [b"j"], [theirs.fileno()])
        return mine

    def alive(self) -> bool:
        """Whether the zygote's process is still running."""
        return self.process.poll() is None

    def close(self) -> None:
        """Hang up: the zygote exits (killed if it does not)."""
        self.control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


@atexit.register
def _close_zygote() -> None:
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


def start_judge() -> None:
    """Start the judge's zygote in the background, ahead of the first notebook to judge (if it
    fails, judging starts it again and says why)."""

    def start() -> None:
        global _zygote
        with _zygote_lock:
            if _zygote is None:
                with contextlib.suppress(JudgeUnavailable):
                    _zygote = _Zygote()

    threading.Thread(target=start, daemon=True).start()


def _connect(restart: bool = False) -> socket.socket:
    """A socket to a new worker, starting (or, after a failure, restarting) the zygote."""
    global _zygote
    with _zygote_lock:
        if _zygote is not None and (restart or not _zygote.alive()):
            _zygote.close()
            _zygote = None
        if _zygote is None:
            _zygote = _Zygote()
        zygote = _zygote
    return zygote.connect()


class _Lines:
    """Lines read from a worker's socket, each within a deadline."""

    def __init__(self, connection: socket.socket):
        self.connection, self.buffer = connection, b""

    def next(self, seconds: float) -> bytes | None:
        """The next line; None at the end of the stream; TimeoutError after ``seconds``."""
        deadline = time.monotonic() + seconds
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.connection.settimeout(remaining)
            try:
                chunk = self.connection.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > LINE_LIMIT:
                return None  # not what a worker sends: as if it had died
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _kill(pid: int, pidfd: int | None) -> None:
    with contextlib.suppress(OSError):
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _run_worker(checks: list, folder: Path) -> tuple[list[Verdict], str | None]:
    """Judge ``checks`` in one worker: their verdicts in order, as far as it got, and why it
    stopped early (``"timeout"`` or ``"stopped"``), or None if it judged them all."""
    request = {
        "folder": str(folder),
        "checks": [[name, seed] for name, seed in checks],
        "judges": JUDGES_MODULE,
        "memory_mb": JUDGE_MEMORY_MB,
        "check_seconds": JUDGE_CHECK_SECONDS,
        "cpu_seconds": JUDGE_CHECK_SECONDS * len(checks) + 10,
    }
    for attempt in range(2):  # the second time with a new zygote
        try:
            connection = _connect(restart=attempt > 0)
        except OSError:
            continue
        with connection:
            lines = _Lines(connection)
            try:
                connection.sendall(json.dumps(request).encode())
                connection.shutdown(socket.SHUT_WR)
                hello = lines.next(WORKER_START_SECONDS)
            except OSError:  # TimeoutError too
                hello = None
            if hello is not None:
                return _verdicts(lines, json.loads(hello)["pid"], len(checks))
    raise JudgeUnavailable("the judge's worker could not be started")


def _verdicts(lines: _Lines, pid: int, count: int) -> tuple[list[Verdict], str | None]:
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = None
    verdicts = []
    try:
        for _ in range(count):
            start = time.monotonic()
            try:
                line = lines.next(JUDGE_CHECK_SECONDS + 5)
            except TimeoutError:
                _kill(pid, pidfd)
                return verdicts, "timeout"
            if line is None:  # its alarm ended it, or its memory, or a crash
                late = time.monotonic() - start >= 0.9 * JUDGE_CHECK_SECONDS  # clocks differ
                return verdicts, "timeout" if late else "stopped"
            verdicts.append(Verdict.from_dict(json.loads(line)))
        return verdicts, None
    finally:
        if pidfd is not None:
            os.close(pidfd)


def judge_records(checks, folder: Path) -> dict[tuple[str, int], Verdict]:
    """The verdict on each ``(check name, seed)``'s record in ``folder`` (see ``_judge_worker``).

    One worker judges them all, in order; if it dies or runs out of time on one, that one's
    verdict is ``timeout`` or ``stopped`` and a new worker judges the rest.
    """
    pending = list(dict.fromkeys((str(name), int(seed)) for name, seed in checks))
    verdicts: dict[tuple[str, int], Verdict] = {}
    while pending:
        done, stopped = _run_worker(pending, folder)
        verdicts.update(zip(pending, done, strict=False))
        if stopped is not None:
            verdicts[pending[len(done)]] = Verdict(stopped)
        pending = [check for check in pending if check not in verdicts]
    return verdicts


JUDGE_LIMITS = f"{JUDGE_MEMORY_MB} MiB of memory, {JUDGE_CHECK_SECONDS:g} s"


def failure_message(name: str, seed: int, verdict: Verdict) -> str | None:
    """What a test cell says about one visible check's verdict: None if it passed."""
    kind, detail = verdict.kind, verdict.message
    where = f"{name}(seed={seed})"
    messages = {
        "passed": None,
        "failed": f"CheckFailed: {detail}",
        "missing": f"{where} {NO_RESULT}: the cell did not reach it, or the check was "
        "switched off.",
        "refused": f"{where}: {UNUSABLE} ({detail}).",
        "malformed": f"{where}: {UNUSABLE} (malformed record).",
        "error": f"{where}: {UNUSABLE} ({detail}).",
        "memory": f"{where}: judging the recorded result needed more than the judge's "
        f"{JUDGE_MEMORY_MB} MiB of memory; it earns no points.",
        "timeout": f"{where}: judging the recorded result took longer than "
        f"{JUDGE_CHECK_SECONDS:g} s and was stopped; it earns no points.",
        "stopped": f"{where}: judging the recorded result was stopped at the judge's limits "
        f"({JUDGE_LIMITS}); it earns no points.",
    }
    return messages.get(kind, f"{where}: {UNUSABLE}.")


def hidden_failure_message(name: str, verdict: Verdict) -> str | None:
    """What a test cell says about one hidden check's verdict: None if it passed. Never the
    judge's text (it may quote the hidden case) nor the seed: the grader's words and the name."""
    kind = verdict.kind
    if kind == "passed":
        return None
    if kind == "missing":
        return HIDDEN_NO_RESULT.format(name=name)
    if kind in ("memory", "timeout", "stopped"):
        return HIDDEN_LIMITS.format(name=name, limits=JUDGE_LIMITS)
    return HIDDEN_FAILED.format(name=name)


def judge_checks(test: TestCell, verdicts: dict) -> tuple[bool, str]:
    """(passed, message) of a test cell's visible checks: the first failure, or the
    unverified claims."""
    claims = []
    for name, seed in test.checks:
        verdict = verdicts[(name, seed)]
        message = failure_message(name, seed, verdict)
        if message is not None:
            return False, message
        claims += [claim for claim in verdict.message.split("; ") if claim]
    if not claims:
        return True, ""
    unverified = "; ".join(dict.fromkeys(claims))
    return True, f"{PASSED_WITH_CLAIMS} {unverified}."


def records_by_cell(
    assignment: Assignment, records: list[CellRecord] | None
) -> dict[int, CellRecord]:
    """The executor's records by the position of their cell in the notebook (records count code
    cells)."""
    cells = assignment.graded_base.cells
    code_positions = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]
    by_position = {}
    for found in records or []:
        if found.code_index < len(code_positions):
            by_position[code_positions[found.code_index]] = found
    return by_position


def judge_cell(test: TestCell, found: CellRecord | None, verdicts: dict, cell_timeout: float):
    """(status, message) of one test cell's visible part, from its nbval record and its checks'
    verdicts."""
    if found is None:
        return "not_run", "Not run: the notebook stopped before this cell."
    if found.timed_out:  # the executor's clock ran out on it (_nbval_grades), not its text
        return (
            "timeout",
            f"Timeout: the cell ran longer than {cell_timeout:g} s and was interrupted.",
        )
    passed, message = judge_checks(test, verdicts)
    if found.status == "passed":
        return ("passed" if passed else "failed"), message
    if passed or NO_RESULT in message:  # then nbval's own failure says more
        message = clean_message(found.report) or f"nbval: {found.status}"
    return "failed", message


def judge_hidden(test: TestCell, found: CellRecord | None, verdicts: dict, cell_timeout: float):
    """(status, message) of one test cell's hidden tail cell: ``passed`` only when it ran,
    passed and every hidden check's record passed its judge. Its record's report is never read."""
    if found is None:
        return "not_run", HIDDEN_NOT_RUN
    if found.timed_out:
        return "timeout", HIDDEN_TIMEOUT.format(seconds=cell_timeout)
    for name, seed in test.hidden_checks:
        message = hidden_failure_message(name, verdicts[(name, seed)])
        if message is not None:
            return "failed", message
    if found.status != "passed":
        return "failed", HIDDEN_ERROR
    return "passed", ""


def records_folder(found: CellRecord | None, observations: Path, hidden: bool = False) -> Path:
    """Where a cell's checks are judged from. A visible cell's: the copies the nbval plugin
    sealed before the hidden tests ran (its record's ``sealed``). A tail cell's (``hidden``):
    the recovery run's observations (its record's ``observations``: :func:`recovered_records`).
    Else the run's ``observations`` (no hidden test had run, or the first run's tail)."""
    chosen = None if found is None else (found.observations if hidden else found.sealed)
    return Path(chosen) if chosen else Path(observations)


def recovered_records(
    records: list[CellRecord] | None, recovery: "Execution | None"
) -> list[CellRecord] | None:
    """``records`` with the tail cells' records of the ``recovery`` run in place of their own.

    The first run's tail records all go (its kernel died before them); of the recovery run's
    records only those of tail cells (``hidden_tests_of``) that started while its kernel lived
    are taken, each with the folder its checks recorded into (``observations``). So a tail that
    it did not reach (its kernel died too, it ran out of time, it left no records) is not run.
    """
    if recovery is None or records is None:
        return records
    tails, alive = [], not recovery.wall_timeout
    for found in recovery.records or []:
        if alive and found.hidden_tests_of:
            tails.append(replace(found, observations=str(recovery.observations)))
        alive = alive and found.kernel_alive
    return [found for found in records if not found.hidden_tests_of] + tails


def judge(
    assignment: Assignment,
    records,
    observations: Path,
    cell_timeout: float,
    recovery: "Execution | None" = None,
) -> list[CellGrade]:
    """The grade of every test cell of the assignment; a judge worker per folder of records
    (the visible checks' sealed copies, the hidden checks' in ``observations``, or in the
    ``recovery`` run's: :func:`recovered_records`)."""
    by_position = records_by_cell(assignment, recovered_records(records, recovery))
    wanted: dict[Path, list] = {}
    for test in assignment.tests:
        found = by_position.get(test.index)
        if found is not None and not found.timed_out:
            wanted.setdefault(records_folder(found, observations), []).extend(test.checks)
        tail = by_position.get(test.hidden_index) if test.hidden_index is not None else None
        if tail is not None and not tail.timed_out:
            hidden_at = records_folder(tail, observations, hidden=True)
            wanted.setdefault(hidden_at, []).extend(test.hidden_checks)
    verdicts = {
        folder: judge_records(checks, folder) if checks else {} for folder, checks in wanted.items()
    }
    cells = []
    for test in assignment.tests:
        found = by_position.get(test.index)
        mine = verdicts.get(records_folder(found, observations), {})
        status, message = judge_cell(test, found, mine, cell_timeout)
        if status == "passed" and test.hidden_index is not None:
            tail = by_position.get(test.hidden_index)
            hidden = verdicts.get(records_folder(tail, observations, hidden=True), {})
            status, said = judge_hidden(test, tail, hidden, cell_timeout)
            message = message if status == "passed" else said
        points = test.points if status == "passed" else 0.0
        message = capped(message or "")
        cells.append(CellGrade(test.grade_id, points, test.points, status, message, test.hidden))
    return cells


def notebook_status(records, wall_timeout: bool, cells: list[CellGrade]) -> tuple[str, str]:
    """(status, reason) of a submission that ran: ok, timeout, kernel_died or error.

    Decided from the first run's ``records`` alone (a recovery run's change no status);
    ``cells`` name the test cells that timed out."""
    if wall_timeout:
        return "timeout", "the notebook exceeded its wall-clock limit"
    if records is None:
        return "error", "nbval produced no results"
    timed_out = [c.grade_id for c in cells if c.status == "timeout"]
    if any(found.timed_out for found in records):
        which = f" ({', '.join(timed_out)})" if timed_out else ""
        return "timeout", "a cell exceeded the per-cell timeout" + which
    died = [found for found in records if not found.kernel_alive]
    if died and died[0].hidden_tests_of:
        return "kernel_died", f"the kernel died in the hidden tests of {died[0].hidden_tests_of}"
    if died:
        return "kernel_died", f"the kernel died in code cell {died[0].code_index}"
    return "ok", ""
