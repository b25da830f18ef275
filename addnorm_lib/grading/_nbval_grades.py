"""A pytest plugin that records each notebook cell nbval runs: its outcome and nbgrader metadata.

Loaded by the grader as ``-p addnorm_lib.grading._nbval_grades --addnorm-cell-records=FILE``.
It runs in the pytest process, not in the notebook's kernel, so notebook code cannot reach it. It
also starts the kernel the grader's way and fixes nbval behaviours that a grader cannot live with:

- with ``--addnorm-exchange=DIR``, the kernel talks over IPC sockets in DIR (a sandboxed kernel
  has no network), its connection file is there too, and it starts in ``--addnorm-home``;
- what the kernel prints is capped at ``--addnorm-output-mb``: once the notebook's output
  passes it in all, later output is dropped as it arrives (the cells still run; a note takes
  the place of the first output dropped). One message is at most what the kernel's memory cap
  lets it build, and this process has an address-space cap of its own (``_pytest_runner``), so
  a flood costs the grader neither memory nor a row;

- a dead kernel (``os._exit``, a crash, the memory cap) is noticed within about a second, instead
  of after the whole cell timeout;
- after a cell times out, nbval marks every later cell as an expected failure without running
  it; here the later cells still run, so one slow cell does not hide the results of the others;
- whether a cell timed out is this process's own observation: its wait for the cell's reply
  passed the cell timeout on its own clock (:func:`_await_reply_watching` says so on the
  kernel's client, here, out of the kernel's reach). Never the text of the failure: a cell can
  raise ``RuntimeError("Timeout of 60 seconds exceeded")``, nbval's own words, in no time.

- the visible checks' records are *sealed* before the hidden tests run: just before the first
  hidden tail cell (``assemble``: metadata ``addnorm.hidden_tests_of``), this process copies the
  records that cell's metadata names (``addnorm.seal``) out of the observations folder into
  ``sealed-observations`` next to its own records, out of the kernel's reach, and every record of
  a cell that ran before says so (``sealed``: that folder). The judge reads the visible checks
  from the sealed copies, so a kernel that saw the hidden tests cannot rewrite what a visible
  check's message quotes. A copy, not a move: a kernel may hold the files open. A file the copy
  refuses (a link, a FIFO, too large) is left out, and its check recorded no result;
- a hidden tail cell whose visible test cell failed or timed out is skipped: it could earn
  nothing, and an answer that loops forever costs one cell timeout, not two.

The records are :class:`~.cell_record.CellRecord` values: each carries its cell's code-cell ordinal,
id and grade_id, not nbval's item names.
"""

import contextlib
import os
import stat
import time
from dataclasses import replace
from pathlib import Path
from queue import Empty

import nbval.kernel
import pytest
from jupyter_client.manager import KernelManager
from nbval.kernel import NbvalKernelspecManager, RunningKernel

from addnorm_lib.checks import _record as record
from addnorm_lib.grading._launch import KERNEL_FILE, SOCKET_PREFIX
from addnorm_lib.grading.cell_record import HIDDEN_OF, SEAL, CellRecord, write_cell_records
from addnorm_lib.grading.settings import Settings

KERNEL_DIED = "the kernel died"
OUTPUT_CAP = "[output past the grader's cap of {mb} MiB: dropped]"
REPORT_CHARS = 20_000  # of a failed cell's report, kept in the record
SEALED = "sealed-observations"  # next to the cell records: the visible checks' sealed records
VISIBLE_FAILED = "its test cell failed: its hidden tests are not run"


class KernelDied(RuntimeError):
    """The kernel died while it ran a cell."""


def _await_reply_watching(self, msg_id, timeout=None):
    """nbval's await_reply, polling once a second so that a dead kernel is noticed at once.

    When ``timeout`` seconds pass on this process's clock without the reply, it says so on the
    client (``self.cell_timed_out``, read by :class:`GradeRecorder`), then raises ``Empty`` as
    nbval expects.
    """
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    while True:
        remaining = 1.0 if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            self.cell_timed_out = True
            raise Empty
        try:
            msg = self.get_message(stream="shell", timeout=min(1.0, remaining))
        except Empty:
            if not self.is_alive():
                raise KernelDied(f"{KERNEL_DIED} while running this cell") from None
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            if msg["content"]["status"] == "aborted":
                raise RuntimeError("Kernel aborted execution request")
            return


CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
LINK_POLL_SECONDS = 0.01


def link_sockets(manager, exchange: Path, private: Path, timeout: float) -> None:
    """Hard-link each socket the kernel binds in ``exchange`` into ``private``, where the
    grader's client connects (retrying until the link exists).

    A hard link names the socket itself: whatever the kernel later puts at its path in the
    exchange (a link to another socket of the machine, say), the grader reaches that socket or
    none. Called before any student code runs: what is there now is the kernel's own socket.
    """
    pending = {manager.get_connection_info()[name] for name in CHANNELS}
    deadline = time.monotonic() + timeout
    while pending:
        for port in sorted(pending):
            bound = exchange / f"{SOCKET_PREFIX}-{port}"
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(bound).st_mode):
                    os.link(bound, private / f"{SOCKET_PREFIX}-{port}", follow_symlinks=False)
                    pending.discard(port)
        if pending and (time.monotonic() > deadline or not manager.is_alive()):
            raise RuntimeError(f"{KERNEL_DIED} or never bound its sockets")
        time.sleep(LINK_POLL_SECONDS if pending else 0)


def kernel_starter(exchange: Path, home: Path, private: Path):
    """nbval's ``start_new_kernel``: the kernel in ``home``, binding its IPC sockets in
    ``exchange`` (``_launch`` gives it that connection file); the grader connecting through
    links to them in ``private`` (:func:`link_sockets`)."""

    def start_new_kernel(startup_timeout=60, kernel_name="python", **kwargs):
        manager = KernelManager(
            kernel_name=kernel_name,
            kernel_spec_manager=NbvalKernelspecManager(),
            transport="ipc",
            ip=str(private / SOCKET_PREFIX),
            connection_file=str(private / KERNEL_FILE),
        )
        manager.start_kernel(**{**kwargs, "cwd": str(home)})
        client = manager.client()
        try:
            link_sockets(manager, exchange, private, startup_timeout)
            client.start_channels()
            client.wait_for_ready(timeout=startup_timeout)
        except RuntimeError:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            raise
        return manager, client

    return start_new_kernel


OUTPUT_FIELDS = ("text", "data", "traceback", "evalue")


def message_size(msg: dict) -> int:
    """About how many bytes of output a kernel message carries (its text and data)."""
    content = msg.get("content", {})
    return sum(len(str(content.get(name, ""))) for name in OUTPUT_FIELDS)


def dropped(msg: dict, note: str) -> dict:
    """``msg`` with its output replaced by ``note`` (a stream) or by nothing."""
    content = dict(msg.get("content", {}))
    for name in OUTPUT_FIELDS:
        if name in content:
            content[name] = {"data": {}, "traceback": []}.get(name, "")
    if "text" in content:
        content["text"] = note
    return {**msg, "content": content}


def capped_get_message(get_message, output_bytes: int):
    """``RunningKernel.get_message`` that counts the output and drops it past the cap."""
    note = OUTPUT_CAP.format(mb=round(output_bytes / 2**20, 1)) + "\n"

    def get_message_capped(self, stream, timeout=None):
        msg = get_message(self, stream, timeout=timeout)
        size = message_size(msg)
        self.output_bytes = getattr(self, "output_bytes", 0) + size
        if size and self.output_bytes > output_bytes:
            first = not getattr(self, "output_dropped", False)
            self.output_dropped = True
            return dropped(msg, note if first else "")
        return msg

    return get_message_capped


def pytest_addoption(parser):
    """The plugin's options: where to write the records, and how to start the kernel."""
    parser.addoption(
        "--addnorm-cell-records", default=None, help="write per-cell results as JSON here"
    )
    parser.addoption("--addnorm-exchange", default=None, help="IPC sockets and connection file")
    parser.addoption("--addnorm-home", default=None, help="the kernel's working folder")
    parser.addoption(
        "--addnorm-output-mb", default=float(Settings.output_mb), type=float, help="output cap, MiB"
    )


def pytest_configure(config):
    """With ``--addnorm-cell-records``: watch for dead kernels, cap output, record each cell; with
    ``--addnorm-exchange``, start kernels over IPC sockets there."""
    path = config.getoption("--addnorm-cell-records")
    if not path:
        return
    output_bytes = int(config.getoption("--addnorm-output-mb") * 2**20)
    RunningKernel.await_reply = _await_reply_watching
    RunningKernel.get_message = capped_get_message(RunningKernel.get_message, output_bytes)
    exchange = config.getoption("--addnorm-exchange")
    if exchange:
        home = Path(config.getoption("--addnorm-home") or exchange)
        private = Path(path).parent  # the records' folder: the grader's alone
        nbval.kernel.start_new_kernel = kernel_starter(Path(exchange), home, private)
    observations = Path(exchange) / "observations" if exchange else None
    recorder = GradeRecorder(path, observations)
    config.pluginmanager.register(recorder, "addnorm-grade-recorder")


def hidden_tail_metadata(item) -> dict | None:
    """The ``addnorm`` metadata of a hidden tail cell (``assemble.hidden_tail``); None for any
    other cell."""
    cell = getattr(item, "cell", None)
    found = (cell or {}).get("metadata", {}).get("addnorm")
    return found if isinstance(found, dict) and HIDDEN_OF in found else None


def seal(observations: Path, names: list[str], sealed: Path) -> None:
    """Copy the records ``names`` from ``observations`` into the new folder ``sealed``, read as
    the judge reads them (regular files only, no link followed, within the record's size cap);
    a record that is missing or refused is left out."""
    sealed.mkdir(mode=0o700)
    try:
        folder = record.open_folder(observations)
    except OSError:  # gone, or a link where the folder was: nothing to seal
        return
    try:
        for name in names:
            with contextlib.suppress(FileNotFoundError, record.RecordRefused):
                data = record.read_regular_file(name, folder)
                (sealed / name).write_bytes(data)
    finally:
        os.close(folder)


class GradeRecorder:
    """Collects a :class:`~.cell_record.CellRecord` per executed notebook cell and writes them
    when the session ends; seals the visible checks' records before the first hidden tail cell
    runs."""

    def __init__(self, path, observations: Path | None = None):
        self.path = path
        self.cells: list[CellRecord] = []
        self.observations = observations
        self.sealed: Path | None = None  # the sealed copies, once made

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        """Run a cell even when an earlier one timed out (nbval would mark it xfail); before the
        first hidden tail cell, seal the visible checks' records."""
        if getattr(item.parent, "timed_out", False):
            item.parent.timed_out = False  # run the next cell anyway
        tail = hidden_tail_metadata(item)
        if tail is None:
            return
        if self.sealed is None and self.observations is not None:
            sealed = Path(self.path).parent / SEALED
            seal(self.observations, [str(name) for name in tail.get(SEAL, [])], sealed)
            self.sealed = sealed
            # every cell so far ran before the hidden tests
            self.cells = [replace(found, sealed=str(sealed)) for found in self.cells]
        if not self.passed(str(tail[HIDDEN_OF])):  # its cell has lost its points
            pytest.skip(VISIBLE_FAILED)

    def passed(self, grade_id: str) -> bool:
        """Whether nbval passed the visible cell of the test cell ``grade_id``, in time."""
        return any(found.grade_id == grade_id and found.passed_in_time() for found in self.cells)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        """Before the cell runs (its kernel started): it has not timed out."""
        kernel = getattr(item.parent, "kernel", None)
        if kernel is not None:
            kernel.cell_timed_out = False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """Record the cell's outcome, id, grade_id and whether its kernel lives."""
        outcome = yield
        report = outcome.get_result()
        cell = getattr(item, "cell", None)
        if cell is None:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            kernel = getattr(item.parent, "kernel", None)
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            tail_of = (hidden_tail_metadata(item) or {}).get(HIDDEN_OF)
            self.cells.append(
                CellRecord(
                    code_index=item.cell_num,  # nbval counts code cells only, from 0
                    id=cell.get("id"),
                    grade_id=None if grade_id is None else str(grade_id),
                    hidden_tests_of=None if tail_of is None else str(tail_of),
                    # passed / failed / skipped; not_run only if nbval skipped it after a timeout
                    status="not_run" if hasattr(report, "wasxfail") else report.outcome,
                    # this process's clock ran out waiting for it (not what the cell said)
                    timed_out=report.when == "call"
                    and bool(getattr(kernel, "cell_timed_out", False)),
                    kernel_alive=bool(kernel is not None and kernel.is_alive()),
                    report="" if report.passed else report.longreprtext[-REPORT_CHARS:],
                )
            )

    def pytest_sessionfinish(self, session):
        """Write the records."""
        write_cell_records(Path(self.path), self.cells)
