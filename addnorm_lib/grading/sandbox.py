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
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from addnorm_lib.checks import _record as record
from addnorm_lib.grading import _launch, _warm_kernels, bubblewrap, cgroups, seccomp_filter
from addnorm_lib.grading._pytest_runner import THREAD_VARIABLES, short_temp_base, single_threaded
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
    def records(self) -> Path:
        """Where the nbval plugin writes its cell records (out of the kernel's reach)."""
        return self.private / "grades.json"

    def make(self) -> None:
        """Create the folders: the private one for the grader alone."""
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


@dataclass
class Sandbox:
    """Where one grading run's kernels run, as the executor sees it."""

    settings: Settings
    run_folder: Path  # each submission's folders are made in here
    problem: str | None  # why kernels run without the sandbox; None when they run in it
    group_problem: str | None  # why there are no group limits; None when there are
    seccomp: Path | None = None  # the kernels' seccomp filter (BPF; written at the first kernel)
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

    def describe(self) -> dict:
        """How kernels were confined, for grades.json and the summary."""
        groups = "cgroup" if self.group_problem is None else f"none: {self.group_problem}"
        return {
            "sandbox": "bubblewrap" if self.isolated else f"none: {self.problem}",
            "group_limits": groups,
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
    def kernel(self, folders: SubmissionFolders) -> Iterator[str]:
        """Install one submission's kernelspec (and make its cgroup); yields the kernel's name.

        At exit the cgroup goes, with any process still in it.
        """
        cgroup = None
        if self.isolated and self.group_problem is None:
            layout = cgroups.find_layout()
            cgroup = cgroups.create_cgroup(layout, group_limits(self.settings))
        try:
            if self.isolated:
                if self.seccomp is None:
                    self.seccomp = seccomp_filter.write_filter(self.run_folder / SECCOMP_FILE)
                procs = cgroup.procs_files if cgroup else []
                argv = sandboxed_argv(self.settings, folders, procs, self.seccomp, self.zygote)
            else:
                argv = launched(folders, [], [*KERNEL_COMMAND, "-f", "{connection_file}"])
            write_kernelspec(folders.private, argv)
            yield KERNEL_NAME
        finally:
            if cgroup is not None:
                cgroup.remove()


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
    make one) raises RecursionError half-way. Then ``rm -rf``, which does not recurse on the stack
    (and, like rmtree, never follows a link), removes the rest.
    """
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        command = ["rm", "-rf", "--one-file-system", "--", str(path)]
        subprocess.run(command, capture_output=True, check=False)


@contextlib.contextmanager
def temporary_folder(prefix: str, base: str | Path | None) -> Iterator[Path]:
    """A new private folder under ``base`` (mode 0700), removed with :func:`remove_tree`."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield folder
    finally:
        remove_tree(folder)


SHARED_MEMORY = Path("/dev/shm")


def run_folder_base() -> str | None:
    """Where grading runs make their folder: in memory (/dev/shm) where it can, so that what a
    kernel writes into its exchange counts against its cgroup's memory cap like its home does
    (a file on disk would not); else a short folder (sockets live in it); else TMPDIR."""
    if SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
        return str(SHARED_MEMORY)
    return short_temp_base()


@contextlib.contextmanager
def open_sandbox(settings: Settings, warm: bool = False) -> Iterator[Sandbox]:
    """A sandbox for one grading run, in a private, short-named folder (sockets live in it).

    With ``warm`` (and the sandbox), kernels are forked from a zygote, which pays for itself
    from the second kernel on.
    """
    problem = sandbox_problem(settings)
    group_problem = cgroups.cgroup_problem() if problem is None else "no sandbox"
    with temporary_folder("addnorm-grading-", run_folder_base()) as folder:
        seccomp = None if problem else seccomp_filter.write_filter(folder / SECCOMP_FILE)
        box = Sandbox(settings, folder, problem, group_problem, seccomp)
        if not (warm and box.isolated):
            yield box
            return
        with warm_kernels(box.run_folder, settings) as stats:
            box.zygote_ready = stats["ready"]
            yield box
        box.warm_kernels_forked = stats["forked"]
