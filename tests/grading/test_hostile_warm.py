"""Hostile submissions against what ``test_hostile_sandbox.py`` does not attack: the host's kernel
settings, the exchange folder as the grader handles it outside the sandbox, and the grader's own
Jupyter client.

Each attack is a LayerNorm submission whose ``layer_norm`` answer cell runs attack code in the
graded kernel, with the result channel of ``test_hostile_sandbox.py``: an attack that the kernel
can see succeed defines the right ``layer_norm``, else one that raises ``RuntimeError("attack
failed: ...")``. Where only the host can see the effect, the host checks it (a listener, the
folders the grader leaves behind, its exit status and rows).

All the attacks run in one sandboxed grading run (``--jobs 2``, so kernels are warm: forks of the
zygote), skipped where ``bubblewrap_problem()`` says that the sandbox cannot be built:

- *host settings*: open ``/proc/sys/kernel/core_pattern`` for writing (nothing is written). The
  sandbox's user ``nobody`` is the grader's user on the host, and files of ``/proc/sys`` check the
  writer's host uid, not its capabilities: when the grader runs as root, a writable ``/proc``
  would let a kernel change host-wide settings (a pipe in ``core_pattern`` runs a program of its
  choice as the host's root at the next crash). The sandbox mounts ``/proc`` read-only; this
  broke before it did (as root);
- *a deep exchange*: a folder 2000 levels deep in the exchange with a file at the bottom.
  ``shutil.rmtree`` (Python 3.11) recurses once per level: before the grader removed its folders
  with a fallback to ``rm -rf``, the command exited 1 and the exchange stayed in ``/dev/shm``
  after the run. The exchange's rules now stop such a kernel (its row alone says ``error``, and
  why), and its folders are still removed;
- *a link for the grader's client*: the kernel closes its stdin channel and puts a link to the
  host's listener where its IPC socket was. The grader's ZeroMQ client reconnects by path: when it
  connected through the exchange, it followed the link, so a kernel could make the grader connect
  to a Unix socket of the host of its choice. It now connects through hard links to the kernel's
  sockets in its private folder, made before any student code runs.

The host is never harmed: nothing is written to ``/proc/sys``; the listener is this test's own;
whatever the deep exchange leaves behind is removed (only folders that hold this run's marker).
"""

import csv
import json
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from addnorm_lib.grading import bubblewrap, sandbox
from tests.conftest import ROOT
from tests.grading.conftest import LAYER_NORM_CELL, solution_with
from tests.grading.test_hostile_sandbox import FAILED, OUTCOME, Listeners, solution_source
from tests.needs import require

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile-warm")]

FORWARD = "test_layer_norm"
GRADER_SECONDS = 300
DEPTH = 2000  # levels of the deep exchange: above Python 3.11's recursion limit

HELPERS = """
import os, sys, time


def _kernel_app():
    from ipykernel.kernelapp import IPKernelApp

    return IPKernelApp.instance()
"""

SYSCTL = '''
def _attack():
    """Open a host-wide kernel setting for writing (write nothing): kernel.core_pattern."""
    path = "/proc/sys/kernel/core_pattern"
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as error:
        return False, f"{path}: {error!r}"
    os.close(fd)
    return True, f"opened {path} for writing"
'''

DEEP = '''
def _attack():
    """A folder DEPTH levels deep in the exchange, 8 MiB at the bottom."""
    exchange = os.path.dirname(os.environ["ADDNORM_OBSERVATIONS"])
    fd = os.open(exchange, os.O_RDONLY | os.O_DIRECTORY)
    names = [_HOST["deep_name"]] + ["d"] * _HOST["depth"]
    for name in names:
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("payload", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "wb") as file:
        file.write(b"x" * (8 * 2**20))
    os.close(fd)
    return True, f"made a folder {len(names)} levels deep in {exchange}"
'''

LINK = '''
def _attack():
    """Close the stdin channel; a link to the host's listener takes its IPC socket's place."""
    app = _kernel_app()
    if app.transport != "ipc":
        return False, f"transport {app.transport}"
    path = f"{app.ip}-{app.stdin_port}"
    app.stdin_socket.close(linger=0)
    time.sleep(0.2)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(_HOST["unix_socket"], path)
    time.sleep(3)  # the client reconnects every 0.1 s
    return True, f"{path} links to {_HOST['unix_socket']}"
'''

ATTACKS = {"host-settings": SYSCTL, "deep-exchange": DEEP, "client-link": LINK}
SUBMISSIONS = {name: f"{i:02d}-{name}.ipynb" for i, name in enumerate(ATTACKS, start=1)}


def attack_source(attack: str, host: dict) -> str:
    """The answer cell of one attack: host literals, helpers, the attack, the result channel."""
    return "\n".join(
        [f"_HOST = {host!r}", HELPERS, ATTACKS[attack], OUTCOME, solution_source(), FAILED]
    )


@dataclass
class WarmRun:
    """One sandboxed grading run of the attack notebooks, and what the host saw."""

    host: dict
    code: int = -1
    stderr: str = ""
    rows: dict = field(default_factory=dict)
    grades: dict = field(default_factory=dict)
    heard: list = field(default_factory=list)  # what reached the host's Unix listener
    left_behind: list = field(default_factory=list)  # the deep exchange, after the run

    def forward_cell(self, attack: str) -> dict:
        cells = self.grades.get(SUBMISSIONS[attack], {}).get("cells", [])
        return next((cell for cell in cells if cell["grade_id"] == FORWARD), {})

    def succeeded(self, attack: str) -> bool:
        cell = self.forward_cell(attack)
        return bool(cell) and cell["points"] == cell["max_points"] > 0

    def explain(self, attack: str) -> str:
        row, cell = self.rows.get(SUBMISSIONS[attack], {}), self.forward_cell(attack)
        return f"status {row.get('status')!r} ({row.get('reason')!r}): {cell.get('message')!r}"


def run_folder_base() -> Path:
    """Where the grader makes its run folders."""
    return Path(sandbox.run_folder_base() or tempfile.gettempdir())


def deep_leftovers(deep_name: str) -> list[Path]:
    """The run folders left behind that hold this run's deep exchange."""
    pattern = f"addnorm-grading-*/submission-*/exchange/{deep_name}"
    return sorted({path.parents[2] for path in run_folder_base().glob(pattern)})


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory) -> WarmRun:
    """The attacks graded by the grader's default command, in its sandbox, two at a time."""
    require("the grader's sandbox", bubblewrap.bubblewrap_problem())
    base = tmp_path_factory.mktemp("hostile-warm")
    token = f"warm-{uuid.uuid4().hex[:12]}"
    listeners = Listeners(token)
    host = {
        "unix_socket": listeners.unix_path,
        "deep_name": f"addnorm-hostile-{token}",
        "depth": DEPTH,
    }
    run, out = WarmRun(host), base / "out"
    try:
        folder = base / "submissions"
        folder.mkdir()
        for attack, name in SUBMISSIONS.items():
            source = attack_source(attack, host)
            (folder / name).write_bytes(solution_with(("cells", LAYER_NORM_CELL, "source"), source))
        command = [sys.executable, "-m", "addnorm_lib.grading", folder, "--out", out]
        try:
            completed = subprocess.run(
                [*command, "--jobs", "2"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=GRADER_SECONDS,
            )
            run.code, run.stderr = completed.returncode, completed.stderr
        finally:
            run.left_behind = deep_leftovers(host["deep_name"])
            for leftover in run.left_behind:  # rm copes with any depth; rmtree would not
                subprocess.run(["rm", "-rf", "--one-file-system", str(leftover)], check=False)
    finally:
        listeners.close()
    run.heard = list(listeners.heard["unix"])
    if (out / "grades.csv").is_file():
        with (out / "grades.csv").open(newline="") as file:
            run.rows = {row["submission"]: row for row in csv.DictReader(file)}
    if (out / "grades.json").is_file():
        data = json.loads((out / "grades.json").read_text())
        run.grades = {grade["submission"]: grade for grade in data["grades"]}
    return run


def test_every_attack_gets_a_row(warm_run):
    assert set(warm_run.rows) == set(SUBMISSIONS.values()), warm_run.stderr[-3000:]


def test_a_kernel_cannot_change_host_kernel_settings(warm_run):
    assert SUBMISSIONS["host-settings"] in warm_run.rows, warm_run.stderr[-3000:]
    assert not warm_run.succeeded("host-settings"), warm_run.explain("host-settings")


def test_a_deep_exchange_fails_only_its_own_row_and_not_the_command(warm_run):
    """The exchange's rules stop a kernel that nests folders in it (sandbox.ExchangeRules): its
    row says why; the grader and the other rows go on."""
    row = warm_run.rows.get(SUBMISSIONS["deep-exchange"], {})
    assert row.get("status") == "error", warm_run.explain("deep-exchange")
    assert "levels deep into the grader's exchange folder" in row.get("reason", "")
    others = [r for name, r in warm_run.rows.items() if name != SUBMISSIONS["deep-exchange"]]
    assert others and all(r["status"] != "error" for r in others), others
    assert warm_run.code == 0, warm_run.stderr[-3000:]


def test_a_deep_exchange_is_removed(warm_run):
    assert warm_run.left_behind == [], [str(path) for path in warm_run.left_behind]


def test_the_grader_connects_to_no_host_socket_for_a_kernel(warm_run):
    assert SUBMISSIONS["client-link"] in warm_run.rows, warm_run.stderr[-3000:]
    assert warm_run.heard == [], warm_run.heard
