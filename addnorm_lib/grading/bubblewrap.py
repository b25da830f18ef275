"""A whitelist sandbox for graded kernels, built with bubblewrap (``bwrap``).

The process inside sees a minimal read-only root and nothing else of the host:

- ``/usr`` (and the ``/bin``, ``/lib``, ... links into it), the Python installation, the virtual
  environment's packages, and the course's library, with ``addnorm_lib/reference`` replaced by an
  empty folder. The rest of the course (solutions, tests, the book, reports) is simply absent;
- its own ``/proc``, read-only (``/proc/sys`` checks the host uid, which is the grader's), with
  ``/proc/keys`` and ``/proc/key-users`` empty (they list the keys of that uid), a minimal
  ``/dev``, private ``/tmp`` and ``/dev/shm``, each a tmpfs of capped size (``TMP_MB``,
  ``SHM_MB``: uncapped, a tmpfs may take half the machine's memory, and a process that filled
  one would leave the memory taken until the sandbox ends);
- its home and working folder, an empty tmpfs of capped size, seen by no other process;
- one folder shared with the grader, the *exchange*: the kernel's connection file and IPC
  sockets, and the checks' records. Nothing else of the grader's (the graded notebook with its
  hidden tests, the reports, the grader's own sockets) is in it.

Its environment is only what the grader gives it (``--clearenv``): no variable of the
instructor's session reaches it.

It runs as the unprivileged user ``nobody`` (65534) with no capabilities and ``no_new_privs``
(bubblewrap always sets it), in new user, PID, IPC, UTS, cgroup and network namespaces (no
network at all: kernels talk to their client over IPC sockets in the exchange), in a new
terminal session, may not create further user namespaces, and dies with its parent.

With ``seccomp_fd``, bubblewrap loads a seccomp filter (:mod:`~.seccomp_filter`, a BPF program
read from that descriptor) into the process it starts and its own init: the calls that reach
the host's kernel state (keyrings, io_uring and AIO, ptrace, namespaces and mounts, every socket
family but Unix sockets, ...) fail there and in every process started after. The graded kernels
always run with it (``sandbox``).

This module builds the command line (:func:`bubblewrap_argv`) and probes whether it works here,
filter and all (:func:`bubblewrap_problem`).
"""

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from addnorm_lib.grading import _launch, seccomp_filter
from addnorm_lib.grading.settings import COURSE_ROOT

NOBODY = 65534
# Top-level names that are links into /usr on merged-/usr systems (Debian 12 and later).
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# /proc's views of the keyrings: /proc/keys lists every key the grader's uid owns (the sandbox's
# user is that uid on the host), whatever keyring the sandbox is in.
KEY_TABLES = ("/proc/keys", "/proc/key-users")


HOME_MB = 256  # the size of a sandboxed process's home
# The sizes of its /tmp and /dev/shm: ample for the scratch files and shared arrays of a course
# notebook (none of the course's uses either), small beside the kernel's memory cap, which (with
# a cgroup) they also count against.
TMP_MB = 64
SHM_MB = 64
# The exercises' answers, in effect: blanked in the sandbox as one folder, so that a new reference
# module is hidden without anyone listing it.
REFERENCE = COURSE_ROOT / "addnorm_lib" / "reference"


@dataclass(frozen=True)
class Whitelist:
    """What a sandboxed process may see: read-only folders, folders blanked inside them, its
    home (an empty tmpfs of ``home_mb`` MiB) and the one folder it shares with the grader; its
    ``/tmp`` and ``/dev/shm`` are empty tmpfs of ``tmp_mb`` and ``shm_mb`` MiB (None: uncapped,
    for tests that show what the cap stops)."""

    read_only: tuple[Path, ...]
    hidden: tuple[Path, ...]
    home: Path
    exchange: Path
    home_mb: int = HOME_MB
    tmp_mb: int | None = TMP_MB
    shm_mb: int | None = SHM_MB


def course_whitelist(home: Path, exchange: Path, home_mb: int = HOME_MB) -> Whitelist:
    """The folders a graded kernel needs: Python, the environment and the library, minus the
    reference; ``home`` and ``exchange`` as in :class:`Whitelist`."""
    library = COURSE_ROOT / "addnorm_lib"
    python = (Path(sys.base_prefix), Path(sys.prefix), *package_folders())
    read_only = outermost([path.resolve() for path in (*python, library)])
    hidden = (REFERENCE,)
    return Whitelist(read_only, hidden, Path(home).absolute(), Path(exchange).resolve(), home_mb)


def outermost(paths: list[Path]) -> tuple[Path, ...]:
    """``paths`` without those inside another one of them (binding those again adds nothing)."""
    return tuple(
        path
        for path in dict.fromkeys(paths)
        if not any(path != other and path.is_relative_to(other) for other in paths)
    )


def package_folders(search_path: list[str] | None = None) -> list[Path]:
    """The folders of installed packages on this Python's path (site-packages and dist-packages,
    wherever a ``.pth`` file put them); never the course's own folder, which holds the answers."""
    folders = []
    for entry in sys.path if search_path is None else search_path:
        path = Path(entry) if entry else None
        if path and path.name in ("site-packages", "dist-packages") and path.is_dir():
            folders.append(path)
    return folders


def usr_links(root: Path = Path("/")) -> list[list[str]]:
    """``--symlink`` options that recreate the host's top-level links into ``/usr``."""
    links = []
    for name in USR_LINKS:
        path = root / name
        if path.is_symlink():
            links.append(["--symlink", str(path.readlink()), f"/{name}"])
    return links


def sized_tmpfs(size_mb: int | None, path: str) -> list[str]:
    """bubblewrap's options for an empty tmpfs at ``path`` of ``size_mb`` MiB (None: the
    kernel's default, half the machine's memory); ``--size`` applies to the next mount only."""
    size = [] if size_mb is None else ["--size", str(size_mb * 2**20)]
    return [*size, "--tmpfs", path]


def bubblewrap_argv(
    whitelist: Whitelist,
    command: list[str],
    env: dict[str, str],
    uid: int = NOBODY,
    seccomp_fd: str | None = None,
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` inside ``whitelist`` with only ``env``,
    under the seccomp filter on descriptor ``seccomp_fd`` (a number, or ``_launch.SECCOMP_FD``
    for the launcher to fill in) if given.

    Order matters to bubblewrap: a hidden folder's empty tmpfs comes after the read-only bind of
    the folder that contains it, and the home and the exchange after everything they may sit
    under.
    """
    argv = ["bwrap", "--unshare-user", "--unshare-all", "--disable-userns", "--die-with-parent"]
    argv += ["--new-session", "--cap-drop", "ALL", "--uid", str(uid), "--gid", str(uid)]
    if seccomp_fd is not None:
        argv += ["--seccomp", seccomp_fd]
    argv += ["--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for link in usr_links():
        argv += link
    # /proc read-only: the sandbox's user is the grader's on the host (root, when it runs as root),
    # and /proc/sys checks that uid, not capabilities (core_pattern would run a program as root).
    argv += ["--proc", "/proc", "--remount-ro", "/proc"]
    for table in KEY_TABLES:  # every key of the grader's uid, and its key quotas: empty
        argv += ["--ro-bind", "/dev/null", table]
    argv += ["--dev", "/dev"]
    argv += [*sized_tmpfs(whitelist.tmp_mb, "/tmp"), *sized_tmpfs(whitelist.shm_mb, "/dev/shm")]
    for path in whitelist.read_only:
        argv += ["--ro-bind", str(path), str(path)]
    for path in whitelist.hidden:
        argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
    home, exchange = str(whitelist.home), str(whitelist.exchange)
    argv += ["--bind", exchange, exchange]
    argv += [*sized_tmpfs(whitelist.home_mb, home), "--chdir", home]
    argv += ["--setenv", "HOME", home]
    return [*argv, "--", *command]


def launched_probe(folder: Path) -> list[str]:
    """The probe's command line: the launcher (a new session keyring, the filter opened), then
    Python in bubblewrap under the filter, as a graded kernel starts."""
    whitelist = course_whitelist(folder / "home", folder / "exchange")
    whitelist.exchange.mkdir()
    filter_file = seccomp_filter.write_filter(folder / "seccomp.bpf")
    probe = [sys.executable, "-c", "pass"]
    argv = bubblewrap_argv(whitelist, probe, {}, seccomp_fd=_launch.SECCOMP_FD)
    launcher = [sys.executable, "-I", "-S", _launch.__file__, str(whitelist.exchange)]
    return [*launcher, "--seccomp", str(filter_file), "--", *argv]


@cache
def bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot build the sandbox here, with its seccomp filter and a new session
    keyring, or None when it can (probed once)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    problem = seccomp_filter.filter_problem()
    if problem is not None:
        return f"the sandbox's seccomp filter: {problem}"
    with tempfile.TemporaryDirectory(prefix="addnorm-bwrap-probe-") as folder:
        probe = launched_probe(Path(folder))
        try:
            completed = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bubblewrap did not run: {err}"
    if completed.returncode != 0:
        return f"bubblewrap cannot build the sandbox here: {completed.stderr.strip()[-300:]}"
    return None
