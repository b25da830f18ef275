"""Hostile submissions against the grader's sandbox: what a student's code reaches from its kernel.

Each attack is a LayerNorm submission whose ``layer_norm`` answer cell runs attack code in the
graded kernel, as a hostile student would send it. The answer cell is also the result channel:
when the attack succeeds it defines the right ``layer_norm`` (the solution's), else one that
raises ``RuntimeError("attack failed: <what it tried>")`` (a NotImplementedError's text would be
replaced by the check's stub message). So the points of the ``test_layer_norm`` cell in
``grades.json`` say whether the attack succeeded, and when it failed its message says why.

Every attack runs twice, in two grading runs of the same folder of attack notebooks (module
fixtures: the whole file costs two runs of the command line, ``--jobs 2``):

- *unsandboxed*, the control: ``--no-sandbox``, with ``bwrap`` and ``unshare`` left off the PATH,
  so that no version of the grader can build a sandbox or a jail (``grades.json`` must say
  ``"isolated": false``). Here every attack must succeed: that proves that the attack works and
  that its check can tell. Where an attack cannot succeed on this machine even unsandboxed
  (``/etc/shadow`` when not root, no ``.hypothesis`` folder), only that control is skipped;
- *sandboxed*: the grader's default command. Here every attack must fail, and its submission
  still gets a row. These tests are skipped exactly where ``bubblewrap_problem()`` says that the
  sandbox cannot be built.

Where the host can see the effect for itself, it checks that too, in both runs: its listeners
(TCP, a Unix socket file, an abstract Unix socket) record who connected; an earlier report must
be unchanged; markers and leftovers must not exist after the sandboxed run.

The host is never harmed, even by a sandbox that fails: attacks that write create uniquely named
markers (and remove them where that does not hide the evidence) or write under this test's
temporary folder; host paths (the temporary folder, ``--out``, the listeners, the course) are
written into each attack's source as literals. Scans read only small ``.json`` files (connection
files) and notebooks, and learn one bit from them; they connect to sockets and send nothing.

The attacks on the host kernel's shared state (keyrings, io_uring, AIO, inotify, vsock and netlink
sockets, unshare, ptrace; test_bubblewrap.py's ``SYSCALL_PROBE``) run together in one notebook,
which succeeds only if every one of them works (those this machine has: the test runs them on
the host first); in the sandbox its message must show each refused. The grader runs in a session
keyring of its own, where the test plants a key: the instructor's secret, which an unsandboxed
kernel reads.

A kernel that writes four times its share (``--exchange-mb``) into the grader's exchange folder
succeeds unsandboxed; in the sandbox it alone is stopped, its row says why, and an honest
notebook graded in the same run keeps its points.

The limits' attacks (100 processes, four children of 700 MiB) need the per-submission group limits
(a cgroup); where the grader reports that it could not build them, those sandboxed checks are
skipped with its reason. The output flood (300 MiB printed in one cell) attacks the grader rather
than the sandbox: in both runs the grader must survive it, its own processes (sampled with
psutil, kernels excluded) under 1.5 GiB.
"""

import contextlib
import csv
import html
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
import pytest

from addnorm_lib.authoring import release
from addnorm_lib.grading import assemble, bubblewrap, judge, report
from addnorm_lib.grading.settings import Settings
from tests.conftest import ROOT
from tests.grading.conftest import LAYER_NORM_CELL, SOLUTION, solution_with
from tests.grading.test_bubblewrap import (
    REFUSED,
    SYSCALL_PROBE,
    plant_key,
    probe_command,
    run_probe,
    syscall_numbers,
)
from tests.needs import require

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile-sandbox")]

FORWARD = "test_layer_norm"
MODULE = "test_layer_norm_module"
GRADER_SECONDS = 300
PEAK_MIB = 1536  # the grader's largest process, under a 300 MiB flood of output
OUTSIDE = ("1.1.1.1", 53)  # an address outside this machine (unreachable on most test machines)
SCAN_SECONDS = 6  # how long the connection-file scan watches for a classmate's kernel
CONFIG_DIRS = ("/etc/ipython", "/usr/local/etc/ipython")  # IPython's system config folders
NOT_A_SANDBOX = ("bwrap", "unshare")  # left off the PATH of the unsandboxed run
NO_SANDBOX = "--no-sandbox"  # kernels run without the sandbox (grades where none can be built)


# ----------------------------------------------------------------------------------------------
# The attacks: Python source run in the graded kernel; `_HOST` is the literal dict of host paths.


HELPERS = '''
import os, stat, sys, time


def _walk(roots, wanted, depth=5, budget=30000):
    """Paths under roots (no links followed, at most depth folders down) for which
    wanted(name, lstat) holds, nearest roots first."""
    seen, visited = 0, set()
    for root in roots:
        stack = [(root, 0)]
        while stack and seen < budget:
            folder, level = stack.pop()
            if folder in visited:
                continue
            visited.add(folder)
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                seen += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if level < depth:
                        stack.append((entry.path, level + 1))
                elif wanted(entry.name, info):
                    yield entry.path


def _ancestors(path):
    """path and the folders above it, nearest first, without /."""
    path, found = os.path.abspath(path), []
    while path != os.path.dirname(path):
        found.append(path)
        path = os.path.dirname(path)
    return found


def _kernel_app():
    from ipykernel.kernelapp import IPKernelApp

    return IPKernelApp.instance()


def _own_connection_file():
    app = _kernel_app()
    return os.path.abspath(getattr(app, "abs_connection_file", "") or app.connection_file)
'''

SOCKETS = '''
def _attack():
    """Connect to a Unix socket that is not this kernel's: files in /tmp and the kernel's
    folders (the test's listener first), then abstract ones (/proc/net/unix)."""
    import socket

    app = _kernel_app()
    own = set()
    if app.transport == "ipc":
        ports = (app.shell_port, app.iopub_port, app.stdin_port, app.control_port, app.hb_port)
        own = {os.path.realpath(f"{app.ip}-{port}") for port in ports}
    own_inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            own_inodes.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass

    def connects(address):
        for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET, socket.SOCK_DGRAM):
            client = socket.socket(socket.AF_UNIX, kind)
            client.settimeout(1.0)
            try:
                client.connect(address)
                return True
            except OSError:
                continue
            finally:
                client.close()
        return False

    reached, tried = [], 0
    roots = ["/tmp", "/dev/shm", "/var/tmp", *_ancestors(os.getcwd())]
    roots += _ancestors(os.path.dirname(_own_connection_file()))
    found = _walk(roots, lambda name, info: stat.S_ISSOCK(info.st_mode))
    for path in [_HOST["unix_socket"], *found]:
        if os.path.realpath(path) in own:
            continue
        tried += 1
        if connects(path):
            reached.append(path)
            break
    abstract = ["\\0" + _HOST["abstract_socket"]]
    try:
        with open("/proc/net/unix") as table:
            for line in list(table)[1:]:
                fields = line.split()
                if len(fields) >= 8 and fields[7].startswith("@"):
                    if f"socket:[{fields[6]}]" not in own_inodes:
                        abstract.append("\\0" + fields[7][1:])
    except OSError:
        pass
    for name in abstract:
        tried += 1
        if connects(name):
            reached.append("@" + name[1:])
            break
    if reached:
        return True, f"connected to {reached}"
    return False, f"no Unix socket but its own reachable ({tried} tried)"
'''

KERNELS = '''
def _attack():
    """Find another kernel's connection file (its key), written since this grading run began
    (stale files of earlier runs do not count): scan for a few seconds, so that a classmate's
    kernel that runs meanwhile is seen."""
    import json

    own_file = _own_connection_file()
    own_key = _kernel_app().session.key
    roots = [*_ancestors(os.path.dirname(own_file)), *_ancestors(os.getcwd())]
    roots += ["/tmp", "/dev/shm", "/run", "/var/tmp"]

    def wanted(name, info):
        fresh = info.st_mtime >= _HOST["run_started"]
        small = stat.S_ISREG(info.st_mode) and info.st_size < 65536
        return fresh and small and name.endswith(".json")

    deadline, sweeps = time.monotonic() + _HOST["scan_seconds"], 0
    while True:
        sweeps += 1
        for path in _walk(roots, wanted):
            if os.path.abspath(path) == own_file:
                continue
            try:
                with open(path) as file:
                    info = json.load(file)
            except (OSError, ValueError):
                continue
            if isinstance(info, dict) and "key" in info and "signature_scheme" in info:
                if str(info["key"]).encode() != own_key:
                    return True, f"another kernel's key in {path}"
        if time.monotonic() > deadline:
            return False, f"no other kernel's connection file in {sweeps} scans"
        time.sleep(0.2)
'''

SHADOW = '''
def _attack():
    """Read the host's password hashes."""
    try:
        with open("/etc/shadow", "rb") as file:
            data = file.read()
    except OSError as error:
        return False, f"/etc/shadow: {error!r}"
    return bool(data), f"read {len(data)} bytes of /etc/shadow"
'''

COURSE = '''
def _attack():
    """Read the solutions or the reference code, from the library's own path or the course's."""
    import addnorm_lib

    roots = {os.path.dirname(os.path.dirname(os.path.abspath(addnorm_lib.__file__)))}
    roots.add(_HOST["course_root"])
    wanted = [("solutions/layernorm.ipynb", "BEGIN SOLUTION")]
    wanted.append(("addnorm_lib/reference/norms.py", "def layer_norm"))
    errors = []
    for root in sorted(roots):
        for name, sign in wanted:
            path = os.path.join(root, name)
            try:
                with open(path) as file:
                    if sign in file.read():
                        return True, f"read {path}"
            except OSError as error:
                errors.append(f"{path}: {type(error).__name__}")
    return False, "; ".join(errors)
'''

HYPOTHESIS = '''
def _attack():
    """Read a file of the course's .hypothesis folder (the test suite's examples database)."""
    import addnorm_lib

    roots = {os.path.dirname(os.path.dirname(os.path.abspath(addnorm_lib.__file__)))}
    roots.add(_HOST["course_root"])
    folders = [os.path.join(root, ".hypothesis") for root in sorted(roots)]
    for path in _walk(folders, lambda name, info: stat.S_ISREG(info.st_mode)):
        try:
            with open(path, "rb") as file:
                file.read(4096)
            return True, f"read {path}"
        except OSError:
            continue
    return False, f"no readable file in {folders}"
'''

GRADED_NOTEBOOK = '''
def _attack():
    """Find the instructor's graded notebook, hidden tests and all, in or above the cwd."""
    needle = bytes.fromhex(_HOST["needle_hex"])  # a line of the hidden tests

    def wanted(name, info):
        return name.endswith(".ipynb") and stat.S_ISREG(info.st_mode) and info.st_size < 2**25

    read = 0
    for path in _walk(_ancestors(os.getcwd()), wanted, depth=4):
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            continue
        read += 1
        if needle in data:
            return True, f"the hidden tests are in {path}"
    return False, f"no hidden tests in {read} notebooks in or above {os.getcwd()}"
'''

CONFIG = '''
def _attack():
    """Create a file where IPython, the grader or Python would load it: IPython's system config
    folders (created if missing), the course's library, the environment's site-packages."""
    import addnorm_lib

    library = os.path.dirname(os.path.abspath(addnorm_lib.__file__))
    folders = [*_HOST["config_dirs"], library, _HOST["library"], _HOST["site_packages"]]
    written, errors = [], []
    for folder in dict.fromkeys(folders):
        made = False
        try:
            if not os.path.isdir(folder):
                os.mkdir(folder)
                made = True
            marker = os.path.join(folder, _HOST["marker_name"])
            with open(marker, "x") as file:
                file.write("written by a graded kernel\\n")
            os.remove(marker)
            written.append(folder)
        except OSError as error:
            errors.append(f"{folder}: {type(error).__name__}")
        finally:
            if made:
                os.rmdir(folder)
    if written:
        return True, f"wrote into {written}"
    return False, "; ".join(errors)
'''

REPORTS = '''
def _attack():
    """Tamper with the reports: write into --out, overwrite an earlier report, rename the folder
    above --out (and back)."""
    done, errors = [], []
    try:
        with open(os.path.join(_HOST["out"], _HOST["marker_name"]), "x") as file:
            file.write("written by a graded kernel\\n")
        done.append("wrote into --out")
    except OSError as error:
        errors.append(f"--out: {error!r}")
    try:
        with open(_HOST["earlier_report"], "r+") as file:
            file.write("owned")
        done.append("overwrote the earlier report")
    except OSError as error:
        errors.append(f"earlier report: {error!r}")
    parent = os.path.dirname(_HOST["out"])
    moved = parent + "-moved"
    try:
        os.rename(parent, moved)
        try:
            with open(os.path.join(moved, _HOST["marker_name"]), "x") as file:
                file.write("written while the folder was renamed\\n")
        finally:
            os.rename(moved, parent)
        done.append("renamed the folder above --out")
    except OSError as error:
        errors.append(f"rename: {error!r}")
    if done:
        return True, "; ".join(done)
    return False, "; ".join(errors)
'''

NETWORK = '''
def _attack():
    """Send bytes to the test's listener on 127.0.0.1; try an outside address too."""
    import socket

    done, errors = [], []
    try:
        with socket.create_connection(("127.0.0.1", _HOST["tcp_port"]), timeout=3) as client:
            client.sendall(_HOST["token"].encode())
        done.append("sent the token to 127.0.0.1")
    except OSError as error:
        errors.append(f"127.0.0.1: {error!r}")
    try:
        with socket.create_connection(tuple(_HOST["outside"]), timeout=2):
            done.append(f"reached {_HOST['outside']}")
    except OSError as error:
        errors.append(f"outside: {error!r}")
    if done:
        return True, "; ".join(done)
    return False, "; ".join(errors)
'''

PROCESSES = '''
def _attack():
    """Start 100 sleeping children (the group allows 64 processes in all)."""
    import subprocess

    children, error = [], ""
    try:
        for _ in range(100):
            children.append(
                subprocess.Popen(
                    ["sleep", "30"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    except OSError as raised:
        error = f", then {raised!r}"
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
    return len(children) > 64, f"started {len(children)} children{error}"
'''

MEMORY = '''
def _attack():
    """Four children that each allocate and touch 700 MiB, all alive at once (2.8 GiB)."""
    import select
    import subprocess

    child = (
        "import sys\\n"
        "block = b'\\\\x01' * (700 * 2**20)\\n"
        "sys.stdout.write('done\\\\n')\\n"
        "sys.stdout.flush()\\n"
        "sys.stdin.read()\\n"
    )
    children, done = [], 0
    try:
        for _ in range(4):
            children.append(
                subprocess.Popen(
                    [sys.executable, "-c", child],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
        pending = {process.stdout.fileno() for process in children}
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(list(pending), [], [], 1.0)
            for fd in ready:
                pending.discard(fd)
                done += os.read(fd, 16).startswith(b"done")
    except OSError as error:
        return False, f"{done} of 4 children allocated 700 MiB, then {error!r}"
    finally:
        for process in children:
            process.kill()
        for process in children:
            process.wait()
    return done == 4, f"{done} of 4 children allocated 700 MiB each"
'''

FLOOD = '''
def _attack():
    """Print 300 MiB in one cell (after leaving a marker, so that the host sees it started)."""
    try:
        with open(_HOST["flood_marker"], "x") as file:
            file.write("the flood starts\\n")
    except OSError:
        pass
    line = "x" * (2**20 - 1) + "\\n"
    for _ in range(300):
        sys.stdout.write(line)
    sys.stdout.flush()
    return True, "printed 300 MiB"
'''

LEFTOVERS = '''
def _attack():
    """Leave files behind in /tmp and /dev/shm."""
    written, errors = [], []
    for path in _HOST["leftovers"]:
        try:
            with open(path, "x") as file:
                file.write("left behind by a graded kernel\\n")
            written.append(path)
        except OSError as error:
            errors.append(f"{path}: {error!r}")
    return len(written) == len(_HOST["leftovers"]), f"wrote {written}; {errors}"
'''

KERNEL_STATE = (
    SYSCALL_PROBE
    + '''
def _attack():
    """The host kernel's shared state: the grader's session keyring (its planted secret), the
    user keyring, add_key, request_key, io_uring, AIO, inotify, vsock, netlink and IPv6 sockets,
    a user namespace, ptrace. Succeeds only if every one this machine has works."""
    met = _syscall_attacks(_HOST["syscalls"], _HOST["planted"])
    attacks = _HOST["state_attacks"]
    return all(met[name] == "ok" for name in attacks), " ".join(f"{n}={met[n]}" for n in attacks)
'''
)

# The hidden tests' attacks (issue 27): input transformers that watch and rewrite every later cell.
HIDDEN_LEAK_MARK = "LEAKED-SOURCES:"
HIDDEN_LEAK = '''
def _attack():
    """An input transformer that keeps the source of every cell it sees and, in every cell after
    the first that holds a seed (a hidden test), prints it, raises it, and writes it into every
    record it can find (the most recent cells first, so that what it quotes fits a message)."""
    import dataclasses, glob
    from addnorm_lib.checks import _record as record

    seen = []

    def quoted(kept, text):
        error = f"RuntimeError: {text}"
        if isinstance(kept, dict):
            return {key: dataclasses.replace(o, error=error) for key, o in kept.items()}
        return [dataclasses.replace(o, error=error) for o in kept]

    def leak(lines):
        hidden_seen = any("seed=" in source for source in seen)
        text = _HOST["leak_mark"] + "\\n" + "\\n".join(src[:500] for src in reversed(seen[-3:]))
        seen.append("".join(lines))
        if not hidden_seen:
            return lines
        folder = os.environ.get(record.OBSERVATIONS_ENV, "")
        for path in glob.glob(os.path.join(folder, "*.npz")):
            try:
                record.save(path, quoted(record.load(path), text))
            except Exception:
                pass
        return [*lines, "\\n", f"print({text!r})\\n", f"raise RuntimeError({text!r})\\n"]

    get_ipython().input_transformers_post.append(leak)
    return True, "the transformer is installed"
'''

HIDDEN_SKIPPED = '''
def _attack():
    """An input transformer that deletes the hidden blocks' lines and turns every check call with
    a seed into `pass`; once this cell has run, its layer_norm is replaced by one that is right
    on the visible check's inputs only."""
    import re
    import numpy as np
    from addnorm_lib.checks.layernorm import layer_norm_cases

    def gut(lines):
        kept, hidden = [], False
        for line in lines:
            hidden = hidden or "### BEGIN HIDDEN TESTS" in line
            if not hidden:
                seeded = "checks." in line and "seed=" in line
                kept.append(re.match(r"\\s*", line).group(0) + "pass\\n" if seeded else line)
            hidden = hidden and "### END HIDDEN TESTS" not in line
        return kept

    shell = get_ipython()
    shell.input_transformers_post.append(gut)
    visible = [np.asarray(case.args[0]) for case in layer_norm_cases(0)]
    swapped = []

    def swap(result=None):
        if swapped:
            return
        right = shell.user_ns["layer_norm"]

        def layer_norm(x, gamma, beta, eps=1e-5):
            y = right(x, gamma, beta, eps)
            seen = any(np.shape(x) == v.shape and np.array_equal(x, v) for v in visible)
            return y if seen else y + 1.0

        shell.user_ns["layer_norm"] = layer_norm
        swapped.append(True)

    shell.events.register("post_run_cell", swap)
    return True, "the transformer is installed"
'''

EXCHANGE_FLOOD = '''
def _attack():
    """Write four times the kernel's share (--exchange-mb) into the grader's exchange folder, in
    1 MiB files (one file is capped anyway): where the exchanges share a small /dev/shm, this
    once made every notebook graded alongside fail."""
    folder = os.path.join(os.environ["ADDNORM_OBSERVATIONS"], "flood")
    wanted, written = 4 * _HOST["exchange_mb"], 0
    try:
        os.makedirs(folder, exist_ok=True)
        block = b"x" * 2**20
        for n in range(wanted):
            with open(os.path.join(folder, f"{n}"), "wb") as file:
                file.write(block)
            written += 1
    except OSError as error:
        return False, f"wrote {written} of {wanted} MiB, then {error!r}"
    return True, f"wrote {written} MiB into the exchange"
'''

HONEST = '''
def _attack():
    """Nothing: an honest submission, graded alongside the others."""
    return True, "an honest submission"
'''

# In this order: the scan for other kernels runs first, while the other job starts the next ones.
ATTACKS = {
    "other-kernels": KERNELS,
    "output-flood": FLOOD,
    "host-sockets": SOCKETS,
    "file-shadow": SHADOW,
    "file-course": COURSE,
    "file-hypothesis": HYPOTHESIS,
    "file-graded-notebook": GRADED_NOTEBOOK,
    "file-config": CONFIG,
    "reports": REPORTS,
    "network": NETWORK,
    "many-processes": PROCESSES,
    "group-memory": MEMORY,
    "leftovers": LEFTOVERS,
    "kernel-state": KERNEL_STATE,
    "exchange-flood": EXCHANGE_FLOOD,
    "honest": HONEST,  # graded alongside the flood: it must keep its points
}
ATTACKS |= {"hidden-leak": HIDDEN_LEAK, "hidden-skipped": HIDDEN_SKIPPED}
SUBMISSIONS = {name: f"{i:02d}-{name}.ipynb" for i, name in enumerate(ATTACKS, start=1)}
# Graded in the sandboxed run only: what they test does not depend on the sandbox (the hidden
# tail, the sealed records), or is the sandbox's neighbour (honest), so the control adds nothing.
SANDBOXED_ONLY = ("honest", "hidden-leak", "hidden-skipped")


def graded_in(sandboxed: bool) -> dict[str, str]:
    """attack -> submission name, of the attacks graded in the sandboxed run or the control."""
    return {a: n for a, n in SUBMISSIONS.items() if sandboxed or a not in SANDBOXED_ONLY}


OUTCOME = """
try:
    _succeeded, _detail = _attack()
except Exception as _error:
    _succeeded, _detail = False, f"the attack raised {_error!r}"
_detail = str(_detail)[:400]
print("attack", "succeeded:" if _succeeded else "failed:", _detail)
"""
FAILED = """
if not _succeeded:
    def layer_norm(x, gamma, beta, eps=1e-5):
        raise RuntimeError(f"attack failed: {_detail}")
"""


def solution_source() -> str:
    """The solution's ``layer_norm`` cell: what a successful attack defines."""
    source = json.loads(SOLUTION.read_text())["cells"][LAYER_NORM_CELL]["source"]
    return "".join(source) if isinstance(source, list) else source


def hidden_test_line() -> str:
    """The longest line of the hidden tests of ``test_layer_norm`` that the notebook's JSON
    holds verbatim (no quote or backslash, which JSON escapes): the graded notebook's sign."""
    for cell in json.loads(SOLUTION.read_text())["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == FORWARD:
            source = "".join(cell["source"])
            hidden = source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            verbatim = [line.strip() for line in hidden.splitlines() if not {'"', "\\"} & set(line)]
            return max(verbatim, key=len)
    raise AssertionError(f"no {FORWARD} cell in {SOLUTION}")


def attack_source(attack: str, host: dict) -> str:
    """The answer cell of one attack: host literals, helpers, the attack, the result channel."""
    return "\n".join(
        [f"_HOST = {host!r}", HELPERS, ATTACKS[attack], OUTCOME, solution_source(), FAILED]
    )


# ----------------------------------------------------------------------------------------------
# The host's side: listeners, the grader's run, what it left behind


class Listeners:
    """A TCP listener on 127.0.0.1, a Unix socket file in /tmp and an abstract Unix socket; a
    thread accepts every connection and records what it sends, by kind."""

    def __init__(self, token: str):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.unix_path = f"/tmp/addnorm-hostile-{token}.sock"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen(16)
        self.abstract_name = f"addnorm-hostile-{token}"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen(16)
        self.heard: dict[str, list[bytes]] = {"tcp": [], "unix": [], "abstract": []}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.tcp.getsockname()[1]

    def serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            for kind in self.heard:
                selector.register(getattr(self, kind), selectors.EVENT_READ, (kind, None))
            while not self.stopped.is_set():
                for key, _ in selector.select(0.1):
                    kind, index = key.data
                    if index is None:  # a listener: a new connection
                        connection, _ = key.fileobj.accept()
                        connection.setblocking(False)
                        self.heard[kind].append(b"")
                        index = len(self.heard[kind]) - 1
                        selector.register(connection, selectors.EVENT_READ, (kind, index))
                        continue
                    try:
                        chunk = key.fileobj.recv(4096)
                    except OSError:
                        chunk = b""
                    if chunk:
                        self.heard[kind][index] += chunk
                    else:
                        selector.unregister(key.fileobj)
                        key.fileobj.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        for listener in (self.tcp, self.unix, self.abstract):
            listener.close()
        Path(self.unix_path).unlink(missing_ok=True)


def path_without(names: tuple[str, ...], folder: Path) -> str:
    """A PATH of one folder of links to every program on this PATH but ``names``."""
    folder.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name not in names and not link.is_symlink():
                link.symlink_to(entry.path)
    return str(folder)


KERNEL_SIDE = ("_graded_kernel", "_warm_kernels", "_launch.py", "ipykernel", "bwrap", "unshare")


def peak_kib(pid: int) -> int:
    """The largest resident set a process has had so far (its VmHWM), in KiB; 0 if gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


class GraderMemory:
    """Samples the grader's process tree every 0.2 s: the largest peak resident set of any of
    the grader's own processes (the command, its fork server, its pytest runs, its judges), not
    counting kernels and what they start (a command line with one of ``KERNEL_SIDE``, or under
    one). ``wait4`` would miss the pytest runs: the fork server is never waited for."""

    def __init__(self, process: subprocess.Popen):
        self.root = psutil.Process(process.pid)
        self.peak_kib, self.peak_command = 0, ""
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def watch(self) -> None:
        while not self.stopped.wait(0.2):
            with contextlib.suppress(psutil.Error):
                self.sample([self.root, *self.root.children(recursive=True)])

    def sample(self, processes: list) -> None:
        parents, commands = {}, {}
        for process in processes:
            with contextlib.suppress(psutil.Error):
                parents[process.pid] = process.ppid()
                commands[process.pid] = " ".join(process.cmdline())
        for pid, command in commands.items():
            chain, at = [], pid
            while at in commands and at not in chain:
                chain.append(at)
                at = parents.get(at)
            if any(mark in commands[up] for up in chain for mark in KERNEL_SIDE):
                continue
            peak = peak_kib(pid)
            if peak > self.peak_kib:
                self.peak_kib, self.peak_command = peak, command[:200]

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)


def run_grader(
    command: list, env: dict, folder: Path, planted: str
) -> tuple[int, str, str, GraderMemory]:
    """Run the grader's command line, in a session keyring of its own with the ``planted`` key:
    its exit status, its output, and its memory."""
    stdout, stderr = folder / "stdout.txt", folder / "stderr.txt"
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
            preexec_fn=plant_key(planted, "the instructor's secret"),
        )
    memory = GraderMemory(process)
    try:
        code = process.wait(GRADER_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    finally:
        memory.stop()
    return code, stdout.read_text(), stderr.read_text(), memory


@dataclass
class ClassRun:
    """One grading run of the attack notebooks, and what the host saw."""

    sandboxed: bool
    host: dict
    code: int = -1
    stdout: str = ""
    stderr: str = ""
    peak_mib: float = 0.0  # the grader's own largest process (GraderMemory)
    peak_command: str = ""
    seconds: float = 0.0
    rows: dict = field(default_factory=dict)
    grades: dict = field(default_factory=dict)
    confinement: dict = field(default_factory=dict)
    heard: dict = field(default_factory=dict)
    found: dict = field(default_factory=dict)  # host-side evidence after the run

    @property
    def mode(self) -> str:
        return "sandboxed" if self.sandboxed else "unsandboxed"

    def forward_cell(self, attack: str) -> dict | None:
        cells = self.grades.get(SUBMISSIONS[attack], {}).get("cells", [])
        return next((cell for cell in cells if cell["grade_id"] == FORWARD), None)

    def succeeded(self, attack: str) -> bool:
        """Whether the attack's kernel defined the right layer_norm: it says it succeeded."""
        cell = self.forward_cell(attack)
        return cell is not None and cell["max_points"] > 0 and cell["points"] == cell["max_points"]

    def explain(self, attack: str) -> str:
        row = self.rows.get(SUBMISSIONS[attack], {})
        cell = self.forward_cell(attack) or {}
        return (
            f"{self.mode}: status {row.get('status')!r} ({row.get('reason')!r}), "
            f"{FORWARD} {cell.get('points')}/{cell.get('max_points')}: {cell.get('message')!r}"
        )


def host_literals(base: Path, token: str, listeners: Listeners) -> dict:
    """Every host path and address the attacks need, as they are on this machine."""
    return {
        "token": token,
        "course_root": str(ROOT),
        "library": str(ROOT / "addnorm_lib"),
        "site_packages": sysconfig.get_paths()["purelib"],
        "config_dirs": list(CONFIG_DIRS),
        "marker_name": f"addnorm-hostile-{token}.txt",
        "out": str(base / "reports" / "out"),
        "earlier_report": str(base / "earlier-out" / "grades.csv"),
        "unix_socket": listeners.unix_path,
        "abstract_socket": listeners.abstract_name,
        "tcp_port": listeners.port,
        "outside": list(OUTSIDE),
        "leftovers": [f"/tmp/addnorm-hostile-{token}", f"/dev/shm/addnorm-hostile-{token}"],
        "flood_marker": str(base / "flood-started.txt"),
        "needle_hex": hidden_test_line().encode().hex(),
        "leak_mark": HIDDEN_LEAK_MARK,
        "scan_seconds": SCAN_SECONDS,
        "run_started": time.time(),
        "syscalls": syscall_numbers(),
        "planted": planted_key(token),
        "state_attacks": host_state_attacks(planted_key(token)),
        "exchange_mb": Settings().exchange_mb,
    }


def planted_key(token: str) -> str:
    """The description of the key planted in the grader's session keyring."""
    return f"addnorm-hostile-{token}"


def host_state_attacks(planted: str) -> list[str]:
    """The attacks on the kernel's shared state that work on this host (a machine without vsock
    or io_uring cannot show them refused), the test's own process run through them."""
    met = run_probe(probe_command(planted, None), planted)
    return [attack for attack in [*REFUSED, "proc-keys"] if met.get(attack) == "ok"]


EARLIER_REPORT = "submission,total\nada.ipynb,10\n"


def marker_paths(host: dict) -> dict[str, list[Path]]:
    """Where the attacks may leave their markers: config folders, and the reports' folders."""
    config = [*host["config_dirs"], host["library"], host["site_packages"]]
    reports = [host["out"], str(Path(host["out"]).parent)]
    places = {"config_markers": config, "report_markers": reports}
    return {
        kind: [Path(f) / host["marker_name"] for f in folders] for kind, folders in places.items()
    }


def grade_class(base: Path, sandboxed: bool) -> ClassRun:
    """Write the attack notebooks, grade them in one run, and record what the host saw."""
    token = f"{'in' if sandboxed else 'out'}-{uuid.uuid4().hex[:12]}"
    listeners = Listeners(token)
    try:
        host = host_literals(base, token, listeners)
        folder = base / "submissions"
        folder.mkdir()
        for attack, name in graded_in(sandboxed).items():
            source = attack_source(attack, host)
            (folder / name).write_bytes(solution_with(("cells", LAYER_NORM_CELL, "source"), source))
        Path(host["out"]).parent.mkdir()
        earlier = Path(host["earlier_report"])
        earlier.parent.mkdir()
        earlier.write_text(EARLIER_REPORT)
        config_before = {folder: os.path.isdir(folder) for folder in CONFIG_DIRS}
        env = dict(os.environ)
        flags = []
        if not sandboxed:
            env["PATH"] = path_without(NOT_A_SANDBOX, base / "bin")
            flags = [NO_SANDBOX]
        command = [sys.executable, "-m", "addnorm_lib.grading", folder, "--out", host["out"]]
        command += ["--jobs", "2", *flags]
        run = ClassRun(sandboxed, host)
        start = time.monotonic()
        try:
            run.code, run.stdout, run.stderr, memory = run_grader(
                command, env, base, host["planted"]
            )
            run.peak_mib, run.peak_command = memory.peak_kib / 1024, memory.peak_command
        finally:
            run.seconds = time.monotonic() - start
            run.found = clean_up(host, config_before)
    finally:
        listeners.close()
    run.heard = listeners.heard
    out = Path(host["out"])
    if (out / "grades.csv").is_file():
        with (out / "grades.csv").open(newline="") as file:
            run.rows = {row["submission"]: row for row in csv.DictReader(file)}
    if (out / "grades.json").is_file():
        data = json.loads((out / "grades.json").read_text())
        run.grades = {grade["submission"]: grade for grade in data.pop("grades")}
        run.confinement = data
    return run


def clean_up(host: dict, config_before: dict) -> dict:
    """What the attacks left on the host, recorded, then removed."""
    leftovers = [path for path in map(Path, host["leftovers"]) if path.exists()]
    markers = {
        kind: [path for path in paths if path.exists()]
        for kind, paths in marker_paths(host).items()
    }
    made = [
        folder for folder, there in config_before.items() if not there and Path(folder).exists()
    ]
    for path in [*leftovers, *markers["config_markers"], *markers["report_markers"]]:
        path.unlink()
    for folder in made:
        Path(folder).rmdir()  # only if empty: an attack put nothing else there
    return {
        "leftovers": leftovers,
        **markers,
        "config_dirs_made": made,
        "earlier_report": Path(host["earlier_report"]).read_text(),
        "flood_started": Path(host["flood_marker"]).exists(),
    }


@pytest.fixture(scope="module")
def unsandboxed(tmp_path_factory) -> ClassRun:
    """The control: the attacks graded where no sandbox can be built, with --no-sandbox."""
    run = grade_class(tmp_path_factory.mktemp("unsandboxed"), sandboxed=False)
    assert run.confinement.get("isolated") is False, (run.confinement, run.stderr[-2000:])
    return run


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory) -> ClassRun:
    """The attacks graded by the grader's default command, in its sandbox."""
    require("the grader's sandbox", bubblewrap.bubblewrap_problem())
    return grade_class(tmp_path_factory.mktemp("sandboxed"), sandboxed=True)


@pytest.fixture(params=["unsandboxed", "sandboxed"])
def run(request) -> ClassRun:
    return request.getfixturevalue(request.param)


def check_attack(run: ClassRun, attack: str, control_skip: str | None = None) -> None:
    """The kernel's own report: the attack succeeded unsandboxed, and failed in the sandbox,
    whose submission still got its row."""
    assert SUBMISSIONS[attack] in run.rows, f"no row for {attack}: {run.stderr[-2000:]}"
    if run.sandboxed:
        assert not run.succeeded(attack), (
            f"the attack worked in the sandbox ({run.explain(attack)})"
        )
        return
    if control_skip:
        pytest.skip(control_skip)
    assert run.succeeded(attack), f"the attack did not work unsandboxed: {run.explain(attack)}"


# ----------------------------------------------------------------------------------------------
# The tests: each runs on the unsandboxed control and on the sandboxed run


def test_the_grader_survives_and_every_attack_gets_a_row(run):
    assert run.code == 0, run.stderr[-3000:]
    assert set(run.rows) == set(graded_in(run.sandboxed).values()), run.stderr[-3000:]
    assert run.confinement.get("isolated") is run.sandboxed, run.confinement


def test_1_host_sockets(run):
    """Unix sockets of the host: files in /tmp and the kernel's folders, abstract ones."""
    check_attack(run, "host-sockets")
    connected = {kind: len(run.heard[kind]) for kind in ("unix", "abstract")}
    if run.sandboxed:
        assert connected == {"unix": 0, "abstract": 0}
    else:
        assert connected["unix"] and connected["abstract"], connected


def test_2_other_kernels_connection_files(run):
    """A classmate's kernel, graded at the same time (--jobs 2): its connection file and key."""
    check_attack(run, "other-kernels")


def shadow_control() -> str | None:
    if not os.access("/etc/shadow", os.R_OK):
        return "/etc/shadow is unreadable here even unsandboxed (not root)"
    return None


def hypothesis_control() -> str | None:
    if not any(path.is_file() for path in (ROOT / ".hypothesis").rglob("*")):
        return "the course has no .hypothesis folder with a file in it here"
    return None


@pytest.mark.parametrize(
    ("attack", "control"),
    [
        pytest.param("file-shadow", shadow_control, id="etc-shadow"),
        pytest.param("file-course", None, id="solutions-and-reference"),
        pytest.param("file-hypothesis", hypothesis_control, id="hypothesis-folder"),
        pytest.param("file-graded-notebook", None, id="graded-notebook"),
        pytest.param("file-config", None, id="config-markers"),
    ],
)
def test_3_host_files(run, attack, control):
    check_attack(run, attack, control() if control else None)
    if attack == "file-config":
        assert run.found["config_markers"] == [] and run.found["config_dirs_made"] == []


def test_4_reports(run):
    """--out, an earlier report, the folder above --out."""
    check_attack(run, "reports")
    out = Path(run.host["out"])
    in_out, in_parent = out / run.host["marker_name"], out.parent / run.host["marker_name"]
    if run.sandboxed:
        assert run.found["earlier_report"] == EARLIER_REPORT
        assert run.found["report_markers"] == []
    else:  # each of the three worked, as the host sees it
        assert run.found["earlier_report"] != EARLIER_REPORT
        assert set(run.found["report_markers"]) == {in_out, in_parent}


def test_5_network(run):
    """The test's listener on 127.0.0.1, and an outside address."""
    check_attack(run, "network")
    received = b"".join(run.heard["tcp"])
    if run.sandboxed:
        assert run.heard["tcp"] == [], run.heard["tcp"]
    else:
        assert run.host["token"].encode() in received, run.heard["tcp"]


@pytest.mark.parametrize("attack", ["many-processes", "group-memory"])
def test_6_group_limits(run, attack):
    """100 processes against a cap of 64; four children of 700 MiB each (2.8 GiB in all, each
    under the 2 GiB cap of one process) against the group's 2 GiB."""
    limits = str(run.confinement.get("group_limits", ""))
    if run.sandboxed and limits.startswith("none"):
        require("the grader's group limits", limits)
    check_attack(run, attack)


def test_6_output_flood(run):
    """300 MiB printed in one cell: the grader survives it, within its memory.

    The flood attacks the grader, not the sandbox: the grader must survive it in both runs. The
    control shows that the flood's cell ran (a marker in this test's folder, before the flood).
    """
    name = SUBMISSIONS["output-flood"]
    assert run.code == 0 and name in run.rows, run.stderr[-3000:]
    if not run.sandboxed:
        assert run.found["flood_started"], run.explain("output-flood")
    assert run.peak_mib < PEAK_MIB, f"{run.peak_mib:.0f} MiB in {run.peak_command!r}"


def test_7_leftovers(run):
    """Files left in /tmp and /dev/shm: none may remain on the host after the sandboxed run."""
    if run.sandboxed:  # writing into the sandbox's own /tmp works: only the host can tell
        assert SUBMISSIONS["leftovers"] in run.rows
        assert run.found["leftovers"] == [], run.found["leftovers"]
    else:
        check_attack(run, "leftovers")
        assert len(run.found["leftovers"]) == len(run.host["leftovers"]), run.found


def test_8_kernel_state(run):
    """The host kernel's shared state: every attack works unsandboxed, and in the sandbox each
    is refused (the seccomp filter; the new session keyring, /proc/keys blanked)."""
    assert len(run.host["state_attacks"]) >= 8, run.host["state_attacks"]  # most of them here
    check_attack(run, "kernel-state")
    if run.sandboxed:
        message = (run.forward_cell("kernel-state") or {}).get("message", "")
        detail = re.search(r"attack failed: ([^\n'\"]*)", message)
        assert detail, run.explain("kernel-state")
        met = dict(re.findall(r"([\w-]+)=(\S+)", detail.group(1)))
        assert set(met) == set(run.host["state_attacks"]), met
        assert not [attack for attack, result in met.items() if result == "ok"], met


def hidden_blocks_of(path: Path) -> tuple[list[str], list[int]]:
    """The lines of an instructor's notebook's hidden blocks that its exercise does not show
    (long enough to be a sign), and the seeds that only its hidden blocks use."""
    solution = nbformat.read(path, as_version=4)
    hidden, visible = [], []
    for cell in solution.cells:
        if cell.cell_type != "code" or release.HIDDEN_BEGIN not in cell.source:
            continue
        hidden += [block for _, block in assemble.hidden_blocks(cell.source, path.name)]
        visible.append(release.strip_hidden_tests(cell.source, path.name))
    shown = "\n".join(cell.source for cell in release.release(solution, path.name).cells)
    lines = {line.strip() for block in hidden for line in block.splitlines()}
    lines = sorted(line for line in lines if len(line) >= 10 and line not in shown)
    seeds = {seed for block in hidden for _, seed in assemble.checks_called(block, "hidden")}
    seeds -= {seed for block in visible for _, seed in assemble.checks_called(block, "visible")}
    return lines, sorted(seeds)


def texts_of(value) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(text for item in value.values() for text in texts_of(item))]
    if isinstance(value, list):
        return [text for item in value for text in texts_of(item)]
    return []


def test_9_hidden_tests_never_reach_the_reports(sandboxed):
    """A transformer that raises, prints and writes into every record the source of every cell
    it saw: grades.json and the feedback page hold none of the hidden lines or seeds."""
    name = SUBMISSIONS["hidden-leak"]
    assert name in sandboxed.rows, sandboxed.stderr[-2000:]
    grade = sandboxed.grades[name]
    page = html.unescape(report.feedback_path(Path(sandboxed.host["out"]), name).read_text())
    lines, seeds = hidden_blocks_of(SOLUTION)
    assert lines and seeds, "the LayerNorm notebook has hidden tests"
    fields = {k: v for k, v in grade.items() if k in ("reason", "notes", "cells")}
    for text in [*texts_of(fields), page]:
        assert not [line for line in lines if line in text], text
        assert not [seed for seed in seeds if re.search(rf"\b{seed}\b", text)], text
    # It ran: every visible part passed (its records were rewritten once the hidden tests had
    # begun, and judged from the copies sealed before), every hidden part failed (a later cell
    # rewrote its records, or it raised what it saw).
    cells = {cell["grade_id"]: cell for cell in grade["cells"]}
    messages = [cell["message"] for cell in cells.values()]
    assert all(message.startswith("Failed a hidden test") for message in messages), messages
    assert cells[MODULE]["message"] == judge.HIDDEN_ERROR, messages


def test_9_hidden_checks_switched_off_earn_nothing(sandboxed):
    """A transformer that removes the hidden check calls, and an answer wrong only where the
    hidden checks look: the visible check passes, the hidden tests recorded nothing."""
    name = SUBMISSIONS["hidden-skipped"]
    assert name in sandboxed.rows, sandboxed.stderr[-2000:]
    cells = {cell["grade_id"]: cell for cell in sandboxed.grades[name]["cells"]}
    assert cells[FORWARD]["message"] == judge.HIDDEN_NO_RESULT.format(name="check_layer_norm")
    hidden = [cell for cell in cells.values() if cell["hidden"]]
    assert hidden and not [cell for cell in hidden if cell["points"]], hidden


def test_10_exchange_flood(run):
    """Four times its share written into the grader's exchange folder, in 1 MiB files: in the
    sandbox that kernel alone is stopped, its row says why, and an honest notebook graded in the
    same run keeps its full points (tests/grading/test_sandbox.py shows a small /dev/shm shared
    without the cap, where the neighbour fails)."""
    check_attack(run, "exchange-flood")
    if run.sandboxed:
        honest = run.rows[SUBMISSIONS["honest"]]
        assert honest["status"] == "ok", run.explain("honest")
        assert float(honest["total"]) == float(honest["max_total"]) > 0, run.explain("honest")
        row = run.rows[SUBMISSIONS["exchange-flood"]]
        assert row["status"] == "error", run.explain("exchange-flood")
        assert "into the grader's exchange folder" in row["reason"], run.explain("exchange-flood")
