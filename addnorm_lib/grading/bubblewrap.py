"""A whitelist sandbox for graded kernels, built with bubblewrap (``bwrap``).

The process inside sees a minimal read-only root and nothing else of the host:

- ``/usr`` (and the ``/bin``, ``/lib``, ... links into it), the Python installation, the virtual
  environment's packages, and the course's library, with ``addnorm_lib/reference`` replaced by an
  empty folder. The rest of the course (solutions, tests, the book, reports) is simply absent;
- its own ``/proc``, a minimal ``/dev``, private ``/tmp`` and ``/dev/shm``;
- one writable folder, its home and working folder, shared with the grader (the graded notebook
  and the kernel's IPC sockets live there).

It runs as the unprivileged user ``nobody`` (65534) with no capabilities and ``no_new_privs``
(bubblewrap always sets it), in new user, PID, IPC, UTS, cgroup and network namespaces (no
network at all: kernels talk to their client over IPC sockets in the shared folder), in a new
terminal session, and dies with its parent.

This module builds the command line (:func:`bubblewrap_argv`) and probes whether it works here
(:func:`bubblewrap_problem`).
"""

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from addnorm_lib.grading.settings import COURSE_ROOT

NOBODY = 65534
# Top-level names that are links into /usr on merged-/usr systems (Debian 12 and later).
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True)
class Whitelist:
    """What a sandboxed process may see: read-only folders, folders blanked inside them, a home."""

    read_only: tuple[Path, ...]
    hidden: tuple[Path, ...]
    home: Path


def course_whitelist(home: Path) -> Whitelist:
    """The folders a graded kernel needs: Python, the environment and the library, minus the
    reference; ``home`` is its one writable folder."""
    library = COURSE_ROOT / "addnorm_lib"
    python = (Path(sys.base_prefix), Path(sys.prefix))
    read_only = tuple(dict.fromkeys(path.resolve() for path in (*python, library)))
    return Whitelist(read_only, (library / "reference",), Path(home).resolve())


def usr_links(root: Path = Path("/")) -> list[list[str]]:
    """``--symlink`` options that recreate the host's top-level links into ``/usr``."""
    links = []
    for name in USR_LINKS:
        path = root / name
        if path.is_symlink():
            links.append(["--symlink", str(path.readlink()), f"/{name}"])
    return links


def bubblewrap_argv(whitelist: Whitelist, command: list[str], uid: int = NOBODY) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` inside ``whitelist``.

    Order matters to bubblewrap: a hidden folder's empty tmpfs comes after the read-only bind of
    the folder that contains it, and the home's bind after everything it may sit under.
    """
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--uid", str(uid), "--gid", str(uid), "--ro-bind", "/usr", "/usr"]
    for link in usr_links():
        argv += link
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    for path in whitelist.read_only:
        argv += ["--ro-bind", str(path), str(path)]
    for path in whitelist.hidden:
        argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
    home = str(whitelist.home)
    argv += ["--bind", home, home, "--chdir", home, "--setenv", "HOME", home]
    return [*argv, "--", *command]


@cache
def bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot build the sandbox here, or None when it can (probed once)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory(prefix="addnorm-bwrap-probe-") as home:
        probe = bubblewrap_argv(course_whitelist(Path(home)), [sys.executable, "-c", "pass"])
        try:
            completed = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bubblewrap did not run: {err}"
    if completed.returncode != 0:
        return f"bubblewrap cannot create its namespaces here: {completed.stderr.strip()[-300:]}"
    return None
