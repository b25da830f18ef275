"""Where graded kernels run: one bubblewrap sandbox and one cgroup per submission.

The rest of the grader sees one small interface: :func:`open_sandbox` gives a :class:`Sandbox`
for a grading run, and :meth:`Sandbox.kernel` gives one submission's kernel: it writes the
kernelspec that starts the kernel inside the sandbox, and makes the submission's cgroup.

Each kernel runs in a whitelist sandbox built by bubblewrap (:mod:`~.bubblewrap`): an
unprivileged user with no capabilities, no network, no view of the host's processes, files or
sockets; Python, the environment and the library without its reference folder, read-only; an
empty home of capped size; and the *exchange* folder it shares with the grader (its connection
file and IPC sockets, the checks' records). The graded notebook, the grader's records, sockets
and reports stay in the submission's *private* folder, which the kernel cannot see.

The kernel and every process it starts run under a seccomp filter (:mod:`~.seccomp_filter`:
no keyrings, io_uring or AIO, ptrace, namespaces or mounts, no socket family but Unix sockets,
Docker's default deny list), in a new, empty session keyring (``_launch``): one filter file per
grading run, in its private run folder, which bubblewrap loads for cold kernels and the zygote
builds alike for warm ones (``_warm_kernels``).

Its processes together are capped by a cgroup (:mod:`~.cgroups`) where the machine allows one:
memory, process count and CPU share. Every process still has its own limits
(``_graded_kernel``): address space, file size.

Where bubblewrap cannot build the sandbox (or with ``--no-sandbox``), kernels run with those
limits only, and the grader says so: it refuses to grade other people's notebooks that way
unless told to (see :mod:`~.pipeline`).

The exchange is the one folder a kernel can fill that the grader reads and that other
submissions' folders share a file system with. Each sandboxed submission may keep
``--exchange-mb`` in it (:class:`ExchangeRules`), and a kernel that fills its share fails alone:

- *hard, where the grader can mount* (root with the capability, :func:`tmpfs_problem`): each
  submission's folder is a tmpfs of its own, of that share plus room for the grader's own files
  (the private folder: the graded notebook, its records). A kernel that fills it gets ENOSPC, and
  no other submission notices: /dev/shm's size does not matter. (One tmpfs for the whole
  submission, not for the exchange alone: the grader hard-links the kernel's sockets from the
  exchange into the private folder, which only works within one file system.)
- *best-effort, elsewhere*: the run folder goes where its file system has room for every
  parallel submission's share plus what a kernel can write before it is stopped
  (:func:`run_folder_base`: /dev/shm, else a folder on disk; else the grader stops and says
  what to do), and a watcher (:class:`ExchangeWatcher`) walks each running submission's exchange
  every ``WATCH_SECONDS``. Its reaction is not instant: a kernel writes on until the next walk
  (about 250 MiB per core in 0.1 s, measured), which the room check counts in
  (``WATCH_MARGIN_MB`` per core of the machine); a writer faster than that could still fill
  the file system before it is stopped.

In both, the watcher stops a kernel that keeps more than its share in its exchange (files it
removed but holds open count: :func:`removed_open_bytes`), or a tree deeper than
``EXCHANGE_DEPTH``, or anything the grader cannot read: it kills the kernel (its
cgroup, else its processes), and the submission gets ``error`` with a reason that says so
(:class:`ExchangeOverflow`). Without the sandbox nothing is capped: such a kernel can write
anywhere the instructor can.

Whatever a kernel leaves behind, unreadable folders included, goes with its submission's folder
(:func:`remove_tree`).
"""

import contextlib
import ctypes
import errno
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from addnorm_lib.checks import _record as record
from addnorm_lib.grading import _launch, _warm_kernels, bubblewrap, cgroups, seccomp_filter
from addnorm_lib.grading._pytest_runner import (
    THREAD_VARIABLES,
    kill_marked,
    marked_processes,
    short_temp_base,
    single_threaded,
)
from addnorm_lib.grading.settings import COURSE_ROOT, Settings

KERNEL_NAME = "addnorm-graded"
KERNEL_COMMAND = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel"]
WARM_SCRIPT = [sys.executable, "-I", "-S", _warm_kernels.__file__]
ZYGOTE_SOCKET = "zygote.sock"
SECCOMP_FILE = "seccomp.bpf"  # the kernels' seccomp filter, in the run folder
# What the zygote must not have imported (it checks): the answers, and the rest of the course.
HIDDEN_FROM_KERNELS = (
    bubblewrap.REFERENCE,
    *(COURSE_ROOT / name for name in ("solutions", "tests", "book", "benchmarks")),
)
MAX_PROCESSES = 64  # per submission: a kernel and the odd helper, never a fork bomb
RUN_MARKER = "ADDNORM_SUBMISSION"  # in the environment of an unsandboxed submission's processes


@dataclass(frozen=True)
class SubmissionFolders:
    """The folders of one submission's run, all under its ``workdir``."""

    workdir: Path

    @property
    def private(self) -> Path:
        """The grader's: the graded notebook, kernelspec, pytest.ini, cell records."""
        return self.workdir / "private"

    @property
    def exchange(self) -> Path:
        """Shared with the kernel: its connection file and sockets, the checks' records."""
        return self.workdir / "exchange"

    @property
    def home(self) -> Path:
        """The kernel's home and working folder (in the sandbox, a tmpfs at this path)."""
        return self.workdir / "home"

    @property
    def observations(self) -> Path:
        """Where the checks record what the student's code did."""
        return self.exchange / "observations"

    @property
    def cell_records(self) -> Path:
        """Where the nbval plugin writes its cell records (out of the kernel's reach)."""
        return self.private / "cell-records.json"

    def make(self) -> None:
        """Create the folders (``workdir`` exists): the private one for the grader alone."""
        self.private.mkdir(mode=0o700)
        self.observations.mkdir(parents=True)
        self.home.mkdir()


def kernel_environment(settings: Settings, folders: SubmissionFolders) -> dict[str, str]:
    """Every variable a graded kernel gets (in the sandbox, nothing else)."""
    home = folders.home
    threads = str(max(1, (os.cpu_count() or 1) // settings.jobs))  # jobs kernels share the cores
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "IPYTHONDIR": str(home / ".ipython"),
        "MPLCONFIGDIR": str(home / ".matplotlib"),
        "MPLBACKEND": "Agg",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        record.OBSERVATIONS_ENV: str(folders.observations),
        "ADDNORM_MEMORY_MB": str(settings.memory_mb),
        "ADDNORM_FILE_MB": str(settings.file_mb),
        **dict.fromkeys(THREAD_VARIABLES, threads),
    }


def group_limits(settings: Settings) -> cgroups.GroupLimits:
    """One submission's group limits: the kernel's memory cap for all its processes together
    (its home's tmpfs included), ``MAX_PROCESSES``, and one core's share of the machine."""
    cpus = max(1.0, (os.cpu_count() or 1) / settings.jobs)
    return cgroups.GroupLimits(settings.memory_mb * 2**20, MAX_PROCESSES, cpus)


def launched(
    folders: SubmissionFolders, procs: list[Path], command: list[str], seccomp: Path | None = None
) -> list[str]:
    """``command`` started by ``_launch``: in the cgroup of ``procs`` (if any), with a connection
    file of the kernel's own in the exchange; with the ``seccomp`` filter's file, in a new
    session keyring and with the filter open for bubblewrap."""
    launcher = [sys.executable, "-I", "-S", _launch.__file__, str(folders.exchange)]
    if seccomp is not None:
        launcher += ["--seccomp", str(seccomp)]
    return [*launcher, *map(str, procs), "--", *command]


def sandboxed_argv(
    settings: Settings,
    folders: SubmissionFolders,
    procs: list[Path],
    seccomp: Path,
    zygote: Path | None = None,
) -> list:
    """The kernelspec's command line: the launcher (the cgroup, if any, a new session keyring,
    the kernel's own connection file), then the kernel in bubblewrap under the ``seccomp``
    filter.

    With a ``zygote`` socket, the kernel in bubblewrap is a stand-in for a warm kernel forked
    from the zygote (``_warm_kernels``), reached through a connection made outside.
    """
    whitelist = bubblewrap.course_whitelist(folders.home, folders.exchange)
    env = kernel_environment(settings, folders)
    kernel = KERNEL_COMMAND
    if zygote is not None:
        kernel = [*WARM_SCRIPT, "standin", _warm_kernels.FD_PLACEHOLDER]
    command = [*kernel, "-f", "{connection_file}"]
    argv = bubblewrap.bubblewrap_argv(whitelist, command, env, seccomp_fd=_launch.SECCOMP_FD)
    argv = launched(folders, procs, argv, seccomp)
    if zygote is not None:
        argv = [*WARM_SCRIPT, "launch", str(zygote), "--", *argv]
    return argv


def write_kernelspec(folder: Path, argv: list[str]) -> None:
    """The graded kernel's kernelspec, ``KERNEL_NAME``, in ``folder/kernels``.

    Interrupts go as messages: a signal would reach bubblewrap, outside the kernel's session,
    and stop the sandbox instead of the cell.
    """
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    spec_data = {
        "argv": argv,
        "display_name": "graded",
        "language": "python",
        "interrupt_mode": "message",
    }
    (spec / "kernel.json").write_text(json.dumps(spec_data))


# ----------------------------------------------------------------------------------------------
# The exchange's share: each submission's tmpfs (hard), the watcher (best-effort), the room check

WATCH_SECONDS = 0.1  # how often the watcher walks each running submission's exchange
# What kernels can write past their shares before the watcher stops them, per core of the
# machine, with room to spare: one process writing 1 MiB files wrote 170-250 MiB in the watcher's
# reaction time (about 2 GB/s, measured on the course's 2-core machine, in /dev/shm and on disk).
WATCH_MARGIN_MB = 512
ENTRIES_PER_MB = 64  # a share of N MiB holds at most 64 N files, folders and sockets
EXCHANGE_DEPTH = 16  # levels of folders in an exchange (the checks' records use two)
PRIVATE_ENTRIES = 1024  # the grader's own files in a submission's tmpfs (about twenty)
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MNT_DETACH, UMOUNT_NOFOLLOW = 2, 8


class ExchangeOverflow(Exception):
    """A kernel broke its exchange's rules and was stopped: its submission gets ``error``."""


class NoRoom(Exception):
    """No file system for the run folder has room for every parallel submission's share."""


@dataclass(frozen=True)
class ExchangeRules:
    """What one submission may keep in its exchange."""

    max_bytes: int
    max_entries: int  # files, folders and sockets
    max_depth: int = EXCHANGE_DEPTH


def exchange_rules(settings: Settings) -> ExchangeRules:
    """One submission's share: ``--exchange-mb``, and ``ENTRIES_PER_MB`` entries per MiB."""
    return ExchangeRules(settings.exchange_mb * 2**20, settings.exchange_mb * ENTRIES_PER_MB)


def private_mb(settings: Settings) -> int:
    """Room for the grader's own files of one submission: the graded notebook, its records."""
    return 2 * (settings.notebook_mb + settings.output_mb)


def exchange_breach(folder: Path, rules: ExchangeRules, removed: int = 0) -> str | None:
    """What in ``folder`` breaks ``rules`` ("more than 64 MiB", ...), or None; ``removed``
    bytes (:func:`removed_open_bytes`) count as the folder's.

    A walk by descriptors (``os.fwalk``) that follows no link, wherever the kernel puts one,
    and stops at the first breach: it never reads more entries than the rules allow. What it
    cannot read (a folder of mode 000, for a grader that is not root) is a breach: the kernel
    could hide anything there.
    """
    used, entries, unreadable = removed, 0, []
    top = len(Path(folder).parts)
    walk = os.fwalk(folder, onerror=unreadable.append, follow_symlinks=False)
    with contextlib.closing(walk), contextlib.suppress(FileNotFoundError):  # removed: nothing in it
        for where, folders, files, descriptor in walk:
            if any(isinstance(err, PermissionError) for err in unreadable):
                return "a folder that the grader cannot read"
            if folders and len(Path(where).parts) - top + 1 > rules.max_depth:
                return f"folders more than {rules.max_depth} levels deep"
            for name in folders + files:
                entries += 1
                try:
                    info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                except FileNotFoundError:  # removed since it was listed
                    continue
                except PermissionError:
                    return "a file that the grader cannot read"
                used += info.st_blocks * 512
            if used > rules.max_bytes:
                return f"more than {rules.max_bytes // 2**20} MiB"
            if entries > rules.max_entries:
                return f"more than {rules.max_entries} files and folders"
    if any(isinstance(err, PermissionError) for err in unreadable):
        return "a folder that the grader cannot read"
    return None


def removed_open_bytes(pids: Iterable[int], device: int) -> int:
    """Bytes of the regular files on ``device`` that processes ``pids`` hold open after they
    were removed: a kernel can write on into a file it removed from its exchange, where no walk
    sees it (``lsof +L1``'s way: each open descriptor's link count)."""
    total, seen = 0, set()
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for descriptor in descriptors:
            try:
                info = os.stat(f"/proc/{pid}/fd/{descriptor}")
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if info.st_dev == device and info.st_nlink == 0 and key not in seen:
                seen.add(key)
                total += info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0
    return total


def pid_namespace(pid: int | str) -> str | None:
    """The PID namespace of process ``pid`` ("pid:[4026531836]"), or None if it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


@dataclass
class SubmissionProcesses:
    """A submission's processes where it has no cgroup: those marked with its folder (the
    launcher, bubblewrap) and every process in the PID namespaces of their children (the
    sandbox's, warm kernels included), found at the first call that sees them."""

    workdir: Path
    marked: set[int] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)

    def __call__(self) -> set[int]:
        """The submission's processes now."""
        if not self.namespaces:
            marked = marked_processes(RUN_MARKER, str(self.workdir))
            self.marked = {process.pid for process in marked}
            own = pid_namespace("self")
            for pid in self.marked:
                with contextlib.suppress(psutil.Error):
                    for child in psutil.Process(pid).children(recursive=True):
                        self.namespaces.add(pid_namespace(child.pid))
            self.namespaces -= {own, None}
        inside = {int(n) for n in os.listdir("/proc") if n.isdigit()} if self.namespaces else ()
        return self.marked | {pid for pid in inside if pid_namespace(pid) in self.namespaces}


class ExchangeWatcher:
    """Walks one running submission's exchange every ``WATCH_SECONDS`` in a thread, counting
    the files its ``processes`` removed but hold open; at the first breach of its rules, calls
    ``stop`` (which kills the kernel) and keeps the breach.

    Best-effort: a kernel writes on until the next walk. Where each submission has a tmpfs of
    its own, the tmpfs is the hard cap and the watcher only says why the kernel failed.
    """

    def __init__(
        self,
        folder: Path,
        rules: ExchangeRules,
        stop: Callable[[], None],
        processes: Callable[[], Iterable[int]] = set,
    ):
        self.folder, self.rules, self.stop, self.processes = folder, rules, stop, processes
        self.device = folder.stat().st_dev
        self.breach: str | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.watch, name="exchange-watcher", daemon=True)
        self.thread.start()

    def measure(self) -> str | None:
        """The exchange's breach now, or None."""
        removed = removed_open_bytes(self.processes(), self.device)
        return exchange_breach(self.folder, self.rules, removed)

    def watch(self) -> None:
        """Walk until closed; at each walk that finds a breach, stop the kernel (again, should
        anything start one anew), keeping the first breach."""
        while not self.stopped.wait(WATCH_SECONDS):
            breach = self.measure()
            if breach is not None:
                self.breach = self.breach or breach
                self.stop()

    def close(self) -> str | None:
        """Stop watching, after one last walk (a kernel that wrote its last just before it was
        shut down); the breach, or None."""
        self.stopped.set()
        self.thread.join()
        if self.breach is None:
            self.breach = exchange_breach(self.folder, self.rules)
        return self.breach


def overflow_message(breach: str, settings: Settings) -> str:
    """The reason in a submission's row: what its kernel did, in one line."""
    return (
        f"the kernel wrote {breach} into the grader's exchange folder (its share: "
        f"{settings.exchange_mb} MiB, --exchange-mb) and was stopped"
    )


def stop_kernel(cgroup: cgroups.Cgroup | None, folders: SubmissionFolders) -> None:
    """Kill a submission's kernel: its cgroup's processes, and its processes marked with its
    folder (the launcher, bubblewrap: the sandbox dies with them)."""
    if cgroup is not None:
        cgroup.remove()
    kill_marked(RUN_MARKER, str(folders.workdir))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(folder: Path, size: int, inodes: int) -> None:
    """Mount a tmpfs of ``size`` bytes and ``inodes`` entries on ``folder``, the caller's own,
    mode 0700 (needs root's CAP_SYS_ADMIN); raises OSError if it cannot."""
    options = f"size={size},nr_inodes={inodes},mode=0700,uid={os.getuid()},gid={os.getgid()}"
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    libc = _libc()
    if libc.mount(b"addnorm-submission", bytes(folder), b"tmpfs", flags, options.encode()):
        code = ctypes.get_errno()
        raise OSError(code, f"cannot mount a tmpfs on {folder}: {os.strerror(code)}")


def unmount(folder: Path) -> None:
    """Unmount what is mounted on ``folder``, lazily if it is busy (the mount goes when the last
    file in it is closed); nothing if nothing is."""
    libc = _libc()
    for flags in (UMOUNT_NOFOLLOW, UMOUNT_NOFOLLOW | MNT_DETACH):
        if libc.umount2(bytes(folder), flags) == 0:
            return
        code = ctypes.get_errno()
        if code == errno.EINVAL:  # not a mount point
            return
        if code != errno.EBUSY:
            break
    raise OSError(code, f"cannot unmount {folder}: {os.strerror(code)}")


@functools.cache
def tmpfs_problem() -> str | None:
    """Why each submission cannot have a tmpfs of its own here, or None (probed once)."""
    if os.geteuid() != 0:
        return "not root"
    with tempfile.TemporaryDirectory(prefix="addnorm-tmpfs-probe-") as folder:
        try:
            mount_tmpfs(Path(folder), 2**20, 64)
        except OSError as err:
            return f"cannot mount a tmpfs: {err.strerror}"
        unmount(Path(folder))
    return None


@dataclass
class Sandbox:
    """Where one grading run's kernels run, as the executor sees it."""

    settings: Settings
    run_folder: Path  # each submission's folders are made in here
    problem: str | None  # why kernels run without the sandbox; None when they run in it
    group_problem: str | None  # why there are no group limits; None when there are
    seccomp: Path | None = None  # the kernels' seccomp filter (BPF; written at the first kernel)
    tmpfs: bool = False  # each submission's folder is a tmpfs of its own (the hard cap)
    # the socket of the zygote that warm kernels are forked from, once it is ready (None: none)
    zygote_ready: Future | None = None
    warm_kernels_forked: int = 0  # set when the sandbox closes

    @property
    def zygote(self) -> Path | None:
        """The zygote's socket, waiting for it to be ready; None if there is none."""
        return None if self.zygote_ready is None else self.zygote_ready.result()

    @property
    def isolated(self) -> bool:
        """Whether kernels run in the sandbox, where the references and the host do not exist."""
        return self.problem is None

    @property
    def exchange_cap(self) -> str:
        """How each exchange's share is kept: ``tmpfs`` (hard), ``watched`` (best-effort), or
        ``none`` (no sandbox: a kernel can write anywhere anyway)."""
        if not self.isolated:
            return "none"
        return "tmpfs" if self.tmpfs else "watched"

    def describe(self) -> dict:
        """How kernels were confined, for grades.json and the summary."""
        groups = "cgroup" if self.group_problem is None else f"none: {self.group_problem}"
        share = f"{self.settings.exchange_mb} MiB per submission"
        exchange = {
            "tmpfs": f"{share}: a tmpfs of its own, and watched",
            "watched": f"{share}: watched every {WATCH_SECONDS} s (best-effort)",
            "none": f"none: {self.problem}",
        }[self.exchange_cap]
        return {
            "sandbox": "bubblewrap" if self.isolated else f"none: {self.problem}",
            "seccomp": "filter (seccomp_filter)" if self.isolated else f"none: {self.problem}",
            "group_limits": groups,
            "exchange": exchange,
        }

    def pytest_environment(self, folders: SubmissionFolders) -> dict:
        """The environment of the pytest run that drives the kernel (and of the kernel, when
        it runs unsandboxed): the grader's, minus its own settings, plus the kernel's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "ADDNORM"))}
        env.update(kernel_environment(self.settings, folders))
        env["JUPYTER_PATH"] = str(folders.private)  # where the kernelspec is
        env["JUPYTER_RUNTIME_DIR"] = str(folders.exchange)
        env[RUN_MARKER] = str(folders.workdir)  # finds an unsandboxed submission's processes
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only nbval and ours: faster, nothing else
        return env

    @contextlib.contextmanager
    def submission(self) -> Iterator[SubmissionFolders]:
        """A new submission's folders in the run folder, removed at exit. With ``tmpfs``, they
        are a tmpfs of their own: the exchange's share and the grader's room
        (:func:`private_mb`), unmounted at exit."""
        with temporary_folder("submission-", self.run_folder) as workdir:
            if self.tmpfs:
                size = (self.settings.exchange_mb + private_mb(self.settings)) * 2**20
                entries = exchange_rules(self.settings).max_entries + PRIVATE_ENTRIES
                mount_tmpfs(workdir, size, entries)
            try:
                folders = SubmissionFolders(workdir)
                folders.make()
                yield folders
            finally:
                if self.tmpfs:
                    unmount(workdir)

    @contextlib.contextmanager
    def kernel(self, folders: SubmissionFolders) -> Iterator[str]:
        """Install one submission's kernelspec (and make its cgroup); yields the kernel's name.
        A sandboxed kernel's exchange is watched (:class:`ExchangeWatcher`) while it runs.

        At exit the cgroup goes, with any process still in it; then, if the kernel broke its
        exchange's rules, :class:`ExchangeOverflow` is raised.
        """
        cgroup, watcher = None, None
        if self.isolated and self.group_problem is None:
            layout = cgroups.find_layout()
            cgroup = cgroups.create_cgroup(layout, group_limits(self.settings))
        try:
            if self.isolated:
                if self.seccomp is None:
                    self.seccomp = seccomp_filter.write_filter(self.run_folder / SECCOMP_FILE)
                procs = cgroup.procs_files if cgroup else []
                argv = sandboxed_argv(self.settings, folders, procs, self.seccomp, self.zygote)
                rules = exchange_rules(self.settings)
                stop = functools.partial(stop_kernel, cgroup, folders)
                processes = cgroup.pids if cgroup else SubmissionProcesses(folders.workdir)
                watcher = ExchangeWatcher(folders.exchange, rules, stop, processes)
            else:
                argv = launched(folders, [], [*KERNEL_COMMAND, "-f", "{connection_file}"])
            write_kernelspec(folders.private, argv)
            yield KERNEL_NAME
        finally:
            breach = watcher.close() if watcher is not None else None
            if cgroup is not None:
                cgroup.remove()
        if breach is not None:
            raise ExchangeOverflow(overflow_message(breach, self.settings))


def sandbox_problem(settings: Settings) -> str | None:
    """Why this run's kernels will not be sandboxed, or None."""
    if settings.no_sandbox:
        return "--no-sandbox was given"
    return bubblewrap.bubblewrap_problem()


def zygote_environment() -> dict[str, str]:
    """The zygote's environment: nothing of the grader's (a kernel could read what its zygote
    started with in its own memory), one-thread math libraries, quiet about debugpy."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return single_threaded({**env, "PYDEVD_DISABLE_FILE_VALIDATION": "1", "MPLBACKEND": "Agg"})


def await_ready(process: subprocess.Popen, socket_path: Path, ready: Future) -> None:
    """Resolve ``ready`` with the zygote's socket once it says so, or with None."""
    try:
        said = process.stdout.readline().strip()
    except (OSError, ValueError):
        said = ""
    if said != "ready":
        print("warning: warm kernels unavailable; starting each kernel afresh", file=sys.stderr)
    ready.set_result(socket_path if said == "ready" else None)


@contextlib.contextmanager
def warm_kernels(run_folder: Path, settings: Settings) -> Iterator[dict]:
    """Run a zygote for this grading run; yields a dict of its ``ready`` future (its socket once
    it is ready, None if it did not start) and, at exit, ``forked``. It starts in the
    background: kernels started once it is ready are forks of it."""
    stats = {"forked": 0, "ready": Future()}
    socket_path = run_folder / ZYGOTE_SOCKET
    hidden = [*map(str, HIDDEN_FROM_KERNELS), str(settings.source.resolve())]
    serve = [sys.executable, "-m", "addnorm_lib.grading._warm_kernels", "serve", str(socket_path)]
    process = subprocess.Popen(
        [*serve, *hidden],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=zygote_environment(),
        cwd=run_folder,
        text=True,
        start_new_session=True,
    )
    threading.Thread(target=await_ready, args=(process, socket_path, stats["ready"])).start()
    try:
        yield stats
    finally:
        stats["ready"].result()  # the reader is done with its stdout
        try:
            output, _ = process.communicate(timeout=30)  # closing its stdin stops it
            stats["forked"] = int(output.split()[-1]) if output.startswith("forked") else 0
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def remove_tree(path: Path) -> None:
    """Remove a folder that kernels wrote in, however they filled it.

    ``shutil.rmtree`` recurses once per level: a folder a few thousand levels deep (a kernel can
    make one) raises RecursionError half-way; and a folder a kernel made unreadable or
    unwritable (mode 000, 0100, 0200) stops it where the grader is not root (the kernel's files
    are the grader's user's: the permissions apply). Then ``chmod -R u+rwx`` gives the owner its
    rights back, and ``rm -rf`` removes the rest: neither recurses on the stack, neither follows
    a link met on the way (GNU coreutils: chmod ignores them, rm removes the link), and ``path``
    itself, the grader's own folder, is never a link. What cannot be removed is said on stderr.
    """
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        if Path(path).is_symlink():  # not the grader's folder: remove the link, follow nothing
            Path(path).unlink()
            return
        for command in (["chmod", "-R", "u+rwx"], ["rm", "-rf", "--one-file-system"]):
            subprocess.run([*command, "--", str(path)], capture_output=True, check=False)
    if os.path.lexists(path):
        print(f"warning: could not remove {path}", file=sys.stderr)


@contextlib.contextmanager
def temporary_folder(prefix: str, base: str | Path | None) -> Iterator[Path]:
    """A new private folder under ``base`` (mode 0700), removed with :func:`remove_tree`."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield folder
    finally:
        remove_tree(folder)


SHARED_MEMORY = Path("/dev/shm")


def needed_room(settings: Settings, exchange_cap: str) -> int:
    """Bytes the run folder's file system must have free for ``--jobs`` submissions at once:
    unless each submission has a tmpfs of its own, each one's private files
    (:func:`private_mb`) and its exchange's share; plus, where watchers keep the shares, what
    kernels can write before they are stopped: ``WATCH_MARGIN_MB`` for each core of the machine
    (one kernel alone may use them all where it has no cgroup, several share them). A job
    holds two submissions' folders while a kernel that died is run again for its hidden tests
    (``execute.recovered``): its first run's folders stay until both are judged."""
    per_job = 0 if exchange_cap == "tmpfs" else 2 * (settings.exchange_mb + private_mb(settings))
    margin = WATCH_MARGIN_MB * (os.cpu_count() or 1) if exchange_cap == "watched" else 0
    return (settings.jobs * per_job + margin) * 2**20


def free_bytes(folder: str | Path) -> int:
    """The bytes an unprivileged user may still write on ``folder``'s file system."""
    status = os.statvfs(folder)
    return status.f_bavail * status.f_frsize


def run_folder_base(needed: int = 0) -> str | None:
    """Where grading runs make their folder: in memory (/dev/shm) where it can and it has
    ``needed`` bytes free, so that what a kernel writes into its exchange counts against its
    cgroup's memory cap like its home does (a file on disk would not); else a short folder
    (sockets live in it), else TMPDIR, if it has them; else raises :class:`NoRoom`."""
    usable = SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK | os.X_OK)
    if usable and free_bytes(SHARED_MEMORY) >= needed:
        return str(SHARED_MEMORY)
    base = short_temp_base()
    if free_bytes(base or tempfile.gettempdir()) >= needed:
        return base
    where = [str(SHARED_MEMORY)] if SHARED_MEMORY.is_dir() else []
    where.append(base or tempfile.gettempdir())
    free = ", ".join(f"{w} has {free_bytes(w) // 2**20} MiB" for w in where)
    raise NoRoom(
        f"no room for the grading run's folder: it needs {needed // 2**20} MiB free for the "
        f"parallel submissions' exchange folders, and {free}; free some space, or grade with "
        "fewer --jobs or a smaller --exchange-mb"
    )


def exchange_cap_of(settings: Settings) -> str:
    """How a run with these settings will keep each exchange's share (``Sandbox.exchange_cap``)."""
    if sandbox_problem(settings) is not None:
        return "none"
    return "tmpfs" if tmpfs_problem() is None else "watched"


def room_problem(settings: Settings) -> str | None:
    """Why a grading run with these settings has no room for its folder, or None: one line
    that says what to do (for the command line, before it starts)."""
    try:
        run_folder_base(needed_room(settings, exchange_cap_of(settings)))
    except NoRoom as err:
        return str(err)
    return None


@contextlib.contextmanager
def open_sandbox(settings: Settings, warm: bool = False) -> Iterator[Sandbox]:
    """A sandbox for one grading run, in a private, short-named folder (sockets live in it).

    With ``warm`` (and the sandbox), kernels are forked from a zygote, which pays for itself
    from the second kernel on.
    """
    problem = sandbox_problem(settings)
    group_problem = cgroups.cgroup_problem() if problem is None else "no sandbox"
    cap = exchange_cap_of(settings)
    base = run_folder_base(needed_room(settings, cap))
    with temporary_folder("addnorm-grading-", base) as folder:
        seccomp = None if problem else seccomp_filter.write_filter(folder / SECCOMP_FILE)
        box = Sandbox(settings, folder, problem, group_problem, seccomp, tmpfs=cap == "tmpfs")
        if not (warm and box.isolated):
            yield box
            return
        with warm_kernels(box.run_folder, settings) as stats:
            box.zygote_ready = stats["ready"]
            yield box
        box.warm_kernels_forked = stats["forked"]
