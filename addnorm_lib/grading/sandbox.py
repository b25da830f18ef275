"""Isolating graded kernels: what they may not see, how they start, and the warm kernels.

The rest of the grader sees one small interface: :func:`open_sandbox` gives a :class:`Sandbox` for
a grading run, which installs the kernelspec of graded kernels, gives their environment, and the
mounts that hide the references from the pytest process that drives them.

Behind it, where Linux namespaces work (:func:`isolation`), each kernel runs in a jail: a mount,
user and PID namespace of its own, in which the reference solutions, the tests, the instructor's
notebooks and every report are hidden under empty tmpfs mounts, the course and Python are
read-only, and the grading processes are invisible. When a run grades several notebooks, kernels
are forks of a zygote that has imported numpy and torch once (``_warm_kernels``). Where namespaces
do not work, kernels run with their resource limits only, and the grader says so.
"""

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from addnorm_lib.grading import _warm_kernels
from addnorm_lib.grading._pytest_runner import THREAD_VARIABLES, short_temp_base, single_threaded
from addnorm_lib.grading.settings import COURSE_ROOT, Settings

KERNEL_NAME = "addnorm-graded"
ZYGOTE_SOCKET = "zygote.sock"
JAIL = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc"]
# The exercises' answers, in effect: hidden from graded kernels as one folder, so that a new
# reference module is hidden without anyone listing it.
REFERENCE = COURSE_ROOT / "addnorm_lib" / "reference"
HIDDEN_COURSE_FOLDERS = ("solutions", "tests", "book", "_build", ".git", "benchmarks")


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
        command = [*prefix, "--", "sh", "-c", probe]
        completed = subprocess.run(command, capture_output=True, timeout=10, check=False)
        if completed.returncode == 0:
            return prefix
    return []


def hidden_paths(settings: Settings, outdir: Path) -> tuple[list[Path], list[Path]]:
    """Folders and files the graded kernel must not see: references, solutions, other grades."""
    folders = [COURSE_ROOT / name for name in HIDDEN_COURSE_FOLDERS] + [REFERENCE]
    folders += [COURSE_ROOT / "addnorm_lib" / "__pycache__", settings.source.resolve(), outdir]
    return [p for p in dict.fromkeys(folders) if p.is_dir()], []


def hiding_mounts(settings: Settings, outdir: Path) -> list[list[str]]:
    """mount commands that hide the references and the reports (empty when no namespace works)."""
    if not isolation():
        return []
    folders, files = hidden_paths(settings, outdir)
    hide_folders = [["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(p)] for p in folders]
    return hide_folders + [["mount", "--bind", "/dev/null", str(p)] for p in files]


def jail_steps(run_folder: Path) -> list[str]:
    """The shell steps that build the jail around the kernel's working folder, then exec it.

    The folder of this run (every submission's files and the grader's private results) is
    hidden, then the kernel's own folder (its working directory) is mounted back at its path,
    staged through a private tmpfs on /dev/shm; the course and Python are made read-only.
    """
    own, stage = '"$own"', "/dev/shm/own"
    steps = [
        'own="$PWD"',
        "mount -t tmpfs -o size=64m none /dev/shm",
        f"mkdir {stage}",
        f"mount --bind {own} {stage}",
        f"mount -t tmpfs -o size=1m none {shlex.quote(str(run_folder))}",
        f"mkdir -p {own}",
        f"mount --bind {stage} {own}",
        f"umount {stage}",
        f"cd {own}",
    ]
    for path in dict.fromkeys([COURSE_ROOT, Path(sys.prefix), Path(sys.base_prefix)]):
        quoted = shlex.quote(str(path))
        steps += [f"mount --rbind {quoted} {quoted}", f"mount -o remount,bind,ro {quoted}"]
    return [*steps, 'exec "$@"']


def kernel_argv(run_folder: Path) -> list[str]:
    """How the graded kernel starts: limits, and, where namespaces work, a jail.

    The jail (a mount, user and PID namespace of its own, see :func:`jail_steps`): the grading
    processes are invisible, and the hiding mounts cannot be undone from inside.

    When the run has a zygote (``warm_kernels``), the jail's kernel is a fork of it, with numpy
    and torch already imported; otherwise a fresh ``_graded_kernel`` process.
    """
    kernel = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel"]
    connection = ["-f", "{connection_file}"]
    if not isolation():
        return [*kernel, *connection]
    zygote = run_folder / ZYGOTE_SOCKET
    warm_script = [sys.executable, "-I", "-S", _warm_kernels.__file__]
    if zygote.exists():
        kernel = [*warm_script, "standin", _warm_kernels.FD_PLACEHOLDER]
    build_jail = ["sh", "-c", " && ".join(jail_steps(run_folder)), "sh"]
    jailed = [*isolation(), "--", *build_jail, *JAIL, "--", *kernel, *connection]
    if zygote.exists():
        return [*warm_script, "launch", str(zygote), "--", *jailed]
    return jailed


def kernel_environment(settings: Settings) -> dict:
    """The environment graded kernels start from: the grader's, minus its own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "ADDNORM"))}
    threads = str(max(1, (os.cpu_count() or 1) // settings.jobs))  # jobs kernels share the cores
    env.update(dict.fromkeys(THREAD_VARIABLES, threads))
    return env


def write_kernelspec(folder: Path, run_folder: Path) -> None:
    """The graded kernel's kernelspec, ``KERNEL_NAME``, in ``folder/kernels``."""
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    spec_data = {"argv": kernel_argv(run_folder), "display_name": "graded", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(spec_data))


def zygote_command(run_folder: Path, settings: Settings, outdir: Path) -> list[str]:
    """The command line of this run's zygote; it is told what to hide, so as not to preload it."""
    folders, files = hidden_paths(settings, outdir)
    socket_path = str(run_folder / ZYGOTE_SOCKET)
    serve = [sys.executable, "-m", "addnorm_lib.grading._warm_kernels", "serve", socket_path]
    return [*serve, *map(str, folders + files)]


@contextlib.contextmanager
def warm_kernels(run_folder: Path, settings: Settings, outdir: Path):
    """Run a zygote for this grading run; yields a dict of its ``pid`` and, at exit, ``forked``.

    Kernels started while it runs are forks of it (see ``_warm_kernels``). If it cannot start,
    kernels start cold, as they do without it.
    """
    stats = {"forked": 0}
    # Single-threaded, as forks that enter a user namespace must be; quiet about debugpy's import.
    env = {**single_threaded(kernel_environment(settings)), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    process = subprocess.Popen(
        zygote_command(run_folder, settings, outdir),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=run_folder,
        text=True,
        start_new_session=True,
    )
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


def run_folder_context() -> tempfile.TemporaryDirectory:
    """The grading run's private folder; short, because the zygote's socket lives in it."""
    return tempfile.TemporaryDirectory(prefix="addnorm-grading-", dir=short_temp_base())


@dataclass
class Sandbox:
    """Where one grading run's kernels run, as the executor sees it."""

    settings: Settings
    outdir: Path  # the reports: hidden from kernels too
    run_folder: Path  # each submission's working folder is made in here
    warm_kernels_forked: int = 0  # set when the sandbox closes

    @property
    def isolated(self) -> bool:
        """Whether kernels run in a jail, where the references do not exist."""
        return bool(isolation())

    def install_kernelspec(self, folder: Path) -> str:
        """Write the graded kernel's kernelspec under ``folder``; return the kernel's name."""
        write_kernelspec(folder, self.run_folder)
        return KERNEL_NAME

    def kernel_environment(self) -> dict:
        """The environment a graded kernel starts from."""
        return kernel_environment(self.settings)

    def hiding_mounts(self) -> list[list[str]]:
        """mount commands the process that drives a kernel runs first, in a namespace of its own."""
        return hiding_mounts(self.settings, self.outdir)


@contextlib.contextmanager
def open_sandbox(settings: Settings, outdir: Path, warm: bool) -> Iterator[Sandbox]:
    """A sandbox for one grading run; with ``warm``, kernels are forked from a warm zygote.

    A zygote needs the jail, and pays for itself from the second kernel on.
    """
    with run_folder_context() as folder:
        sandbox = Sandbox(settings, outdir, Path(folder))
        if not (warm and sandbox.isolated):
            yield sandbox
            return
        with warm_kernels(sandbox.run_folder, settings, outdir) as stats:
            yield sandbox
        sandbox.warm_kernels_forked = stats["forked"]
