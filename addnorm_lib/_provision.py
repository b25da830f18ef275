"""The system packages that the test suite and the grader need, installed where this is possible.

    python -m addnorm_lib._provision [--dry-run]

`make test` runs this before the suite (with the system's Python: it needs only the standard
library). For each command in :data:`NEEDS` that is not on ``PATH`` (or shared library that the
dynamic linker cannot find):

- if the need is waived (its opt-out variable is set to ``1``), nothing happens;
- if this process is root and ``apt-get`` exists, the missing Debian packages are installed
  (``apt-get update``, then ``apt-get install -y``), and the commands are looked up again;
- otherwise it stops with one line that names the command to run, exit status 1.

Exit status 0 when every need is met (or waived), 1 when one is not.
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SystemNeed:
    """A command the suite runs (or a shared library it loads), the Debian package that provides
    it, and why it is needed."""

    command: str  # looked up on PATH; with ``library``, a library's name without lib and .so
    package: str  # Debian's package name
    why: str  # completes "needed because ..."
    opt_out: str | None = None  # an environment variable that, set to "1", waives the need
    skips: str = ""  # what the opt-out skips, for the message
    library: bool = False  # ``command`` names a shared library (ctypes.util.find_library)

    @property
    def name(self) -> str:
        """What the messages call it: the command, or the library's file name stem."""
        return f"lib{self.command}" if self.library else self.command


NEEDS = (
    SystemNeed(
        "chromium",
        "chromium",
        "the browser tests load the built book in headless chromium",
        opt_out="ADDNORM_SKIP_BROWSER",
        skips="the browser tests",
    ),
    SystemNeed("unshare", "util-linux", "the grader jails each student's kernel in namespaces"),
    SystemNeed("setpriv", "util-linux", "a grader test runs as an unprivileged user"),
    SystemNeed("bwrap", "bubblewrap", "the grader's whitelist sandbox is built with bubblewrap"),
    SystemNeed(
        "seccomp",
        "libseccomp2",
        "the grader's sandbox filters system calls with a libseccomp filter",
        library=True,
    ),
)


def missing(
    needs=NEEDS,
    env: Mapping[str, str] = os.environ,
    which: Callable = shutil.which,
    find_library: Callable = ctypes.util.find_library,
) -> list[SystemNeed]:
    """The needs whose command is not on PATH (or library not found) and that are not waived."""
    waived = {need for need in needs if need.opt_out and env.get(need.opt_out) == "1"}
    return [
        need
        for need in needs
        if need not in waived and (find_library if need.library else which)(need.command) is None
    ]


def packages(needs: list[SystemNeed]) -> list[str]:
    """The Debian packages that provide ``needs``, each once, in order."""
    return list(dict.fromkeys(need.package for need in needs))


def manual_step(needs: list[SystemNeed]) -> str:
    """The one line that tells a user who cannot install (not root, no apt-get) what to run."""
    what = "; ".join(f"{need.name} ({need.why})" for need in needs)
    install = f"sudo apt-get install -y {' '.join(packages(needs))}"
    line = f"error: the test suite needs {what}: run `{install}`, then `make test` again"
    waivable = [need for need in needs if need.opt_out]
    if waivable and len(waivable) == len(needs):
        line += "; or skip " + " and ".join(
            f"{need.skips} with `{need.opt_out}=1 make test`" for need in waivable
        )
    return line


def can_install(is_root: bool, which: Callable = shutil.which) -> bool:
    """Whether this process may install packages itself: it is root and apt-get exists."""
    return is_root and which("apt-get") is not None


def apt_get_commands(names: list[str]) -> list[list[str]]:
    """The apt-get commands that install the Debian packages ``names``."""
    return [["apt-get", "update"], ["apt-get", "install", "-y", *names]]


def install(names: list[str], log: Path, run: Callable = subprocess.run) -> str | None:
    """Install Debian packages with apt-get, output to ``log``; None, or what went wrong."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("w") as output:
        for command in apt_get_commands(names):
            completed = run(command, stdout=output, stderr=subprocess.STDOUT, env=env, check=False)
            if completed.returncode != 0:
                return f"`{' '.join(command)}` failed with exit status {completed.returncode}"
    return None


def provision(
    needs=NEEDS,
    env: Mapping[str, str] = os.environ,
    which: Callable = shutil.which,
    is_root: bool | None = None,
    run: Callable = subprocess.run,
    dry_run: bool = False,
) -> int:
    """Meet ``needs``, installing what is missing if allowed; prints what it does. Exit status."""
    absent = missing(needs, env, which)
    if not absent:
        return 0
    is_root = os.geteuid() == 0 if is_root is None else is_root
    if not can_install(is_root, which):
        print(manual_step(absent), file=sys.stderr)
        return 1
    names = packages(absent)
    for need in absent:
        skip = f"; {need.opt_out}=1 skips {need.skips} instead" if need.opt_out else ""
        print(
            f"make test: installing {need.package} with apt-get, once: {need.why}{skip}",
            file=sys.stderr,
        )
    if dry_run:
        return 0
    log = Path(tempfile.gettempdir()) / "addnorm-apt-get.log"
    failure = install(names, log, run)
    still = missing(absent, env, which)
    if failure or still:
        reason = failure or f"{', '.join(n.name for n in still)} still not found after it"
        message = f"error: installing {' '.join(names)} failed: {reason} (apt-get's output: {log})"
        print(message, file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    """``python -m addnorm_lib._provision [--dry-run]``: see the module docstring; exit status."""
    parser = argparse.ArgumentParser(description="Install the system packages the suite needs.")
    parser.add_argument("--dry-run", action="store_true", help="say what would be installed")
    args = parser.parse_args(argv)
    return provision(dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
