"""Warm kernels: forks of a zygote, in the same bubblewrap sandbox as cold kernels, and just as
observable to Jupyter.

Each test starts graded kernels the way nbval does (a KernelManager on the grader's kernelspec,
over IPC sockets in the exchange) while a zygote runs, and checks what a kernel is, sees and
survives.
"""

import contextlib
import json
import os
import queue
import time
from concurrent.futures import Future
from pathlib import Path

import psutil
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from addnorm_lib.grading import bubblewrap, sandbox
from addnorm_lib.grading.settings import COURSE_ROOT, Settings
from tests.conftest import run_python
from tests.grading.test_bubblewrap import REFUSED, SYSCALL_PROBE, syscall_numbers
from tests.needs import needs

PROBLEM = bubblewrap.bubblewrap_problem()
pytestmark = [
    pytest.mark.slow,
    needs("the sandbox (for warm kernels)", PROBLEM),
]


SECRET = "GRADER_SECRET_TOKEN"  # in the grader's environment: no kernel may see it
IPYKERNEL_SETS = {"TERM", "CLICOLOR", "CLICOLOR_FORCE", "PAGER", "GIT_PAGER", "FORCE_COLOR", "PWD"}


@pytest.fixture(scope="module")
def box():
    """A grading run's sandbox with its zygote (and cgroups, where the machine allows)."""
    os.environ[SECRET] = "the instructor's"
    try:
        with sandbox.open_sandbox(Settings(jobs=2), warm=True) as opened:
            assert opened.zygote is not None, "the zygote did not start"
            yield opened
    finally:
        del os.environ[SECRET]


@pytest.fixture
def cold_box():
    """A grading run's sandbox whose zygote socket nobody listens on."""
    with sandbox.open_sandbox(Settings(jobs=1)) as opened:
        silent = opened.run_folder / sandbox.ZYGOTE_SOCKET
        silent.touch()
        opened.zygote_ready = Future()
        opened.zygote_ready.set_result(silent)
        yield opened


class Kernel:
    """A graded kernel started as nbval starts it (through the plugin's starter), with helpers."""

    def __init__(self, box: sandbox.Sandbox, name: str):
        self.folders = sandbox.SubmissionFolders(box.run_folder / name)
        self.folders.workdir.mkdir()
        self.folders.make()
        self.spec = box.kernel(self.folders)
        kernel_name = self.spec.__enter__()
        specs = KernelSpecManager(kernel_dirs=[str(self.folders.private / "kernels")])
        exchange = self.folders.exchange
        self.manager = KernelManager(
            kernel_name=kernel_name,
            kernel_spec_manager=specs,
            transport="ipc",
            ip=str(exchange / "kernel"),
            connection_file=str(exchange / "kernel.json"),
        )
        self.manager.start_kernel(cwd=str(self.folders.home))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 30) -> tuple[str, str]:
        """(status, printed text) of executing code."""
        printed = []

        def keep(msg):
            content = msg["content"]
            printed.append(content.get("text", "") or content.get("ename", ""))

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=keep)
        return reply["content"]["status"], "".join(printed)

    def dies_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.manager.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.manager.is_alive()

    def stop(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        self.spec.__exit__(None, None, None)


@pytest.fixture
def kernel(box, request):
    started = Kernel(box, f"k{abs(hash(request.node.name)) % 10**8}")  # short: a socket path
    yield started
    started.stop()


def zygote_children(socket_path: Path | None = None) -> set[int]:
    """PIDs of the zygotes' children (each warm kernel's waiting parent): of the zygote serving
    ``socket_path`` only, if given (other tests' grading runs have zygotes of their own)."""
    children = set()
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            command = process.cmdline()
            ours = socket_path is None or str(socket_path) in command
            if "_warm_kernels" in " ".join(command) and "serve" in command and ours:
                children |= {child.pid for child in process.children()}
    return children


def test_a_warm_kernel_starts_with_torch_imported_and_no_reference(kernel):
    status, printed = kernel.run(
        "import sys\nprint('torch' in sys.modules, sorted(m for m in sys.modules "
        "if m.startswith('addnorm_lib.reference')))"
    )
    assert (status, printed.strip()) == ("ok", "True []")


def test_a_warm_kernel_is_as_confined_as_a_cold_one(kernel, box):
    """No capability, no new privileges, the unprivileged user, the sandbox's files, processes,
    network and environment, the submission's cgroup."""
    status, printed = kernel.run(
        "import json, os, socket\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "facts = {k: status[k].strip() for k in ('CapEff', 'CapPrm', 'CapBnd', 'CapInh',"
        " 'CapAmb', 'NoNewPrivs')}\n"
        "facts['uid'] = os.getuid()\n"
        f"facts['socket'] = os.path.exists({str(box.zygote)!r})\n"
        f"facts['solutions'] = os.path.exists({str(COURSE_ROOT / 'solutions')!r})\n"
        "facts['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "facts['env'] = sorted(os.environ)\n"
        "facts['cwd'] = os.getcwd()\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 22), timeout=2)\n"
        "    facts['net'] = 'connected'\n"
        "except OSError as err:\n"
        "    facts['net'] = type(err).__name__\n"
        "print(json.dumps(facts))"
    )
    assert status == "ok", printed
    facts = json.loads(printed)
    for capabilities in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
        assert int(facts[capabilities], 16) == 0, (capabilities, facts[capabilities])
    assert facts["NoNewPrivs"] == "1" and facts["uid"] == bubblewrap.NOBODY
    assert not facts["socket"] and not facts["solutions"]
    assert len(facts["pids"]) <= 3, facts["pids"]  # bubblewrap's init, the stand-in, the kernel
    given = set(sandbox.kernel_environment(box.settings, kernel.folders))
    assert SECRET not in facts["env"] and set(facts["env"]) - given <= IPYKERNEL_SETS
    assert facts["cwd"] == str(kernel.folders.home) and facts["net"] != "connected"
    if box.group_problem is None:  # from the host: each warm kernel is in a submission cgroup
        kernels = [children_of(pid) for pid in zygote_children(box.zygote)]
        assert any(kernels), "no warm kernel found to check"
        for warm in (process for children in kernels for process in children):
            assert "/addnorm-" in Path(f"/proc/{warm.pid}/cgroup").read_text()


def test_a_warm_kernel_runs_under_the_sandboxs_seccomp_filter(kernel):
    """The zygote forks it outside bubblewrap: it loads the same filter itself (and joins a new
    session keyring first). The same attacks as on a cold kernel (test_bubblewrap.py) fail."""
    arguments = [syscall_numbers(), "addnorm-no-such-key", 1]  # pid 1: the sandbox's init
    status, printed = kernel.run(
        "import json, sys\n"
        "warm = 'torch' in sys.modules  # a cold kernel has not imported torch yet\n"
        f"{SYSCALL_PROBE}\n"
        f"print(json.dumps([warm, _syscall_attacks(*{arguments!r})]))"
    )
    assert status == "ok", printed
    warm, met = json.loads(printed)
    assert warm, "the kernel was not a warm one"
    assert {attack: met[attack] for attack in REFUSED} == REFUSED


def children_of(pid: int) -> list:
    """A process's children; none if it has exited meanwhile (a zygote child that forked an
    earlier kernel may end between the listing and the look)."""
    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def test_an_interrupt_reaches_a_warm_kernel(kernel):
    kernel.client.execute(
        "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.01)"
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # interrupt only once the loop runs, even on a busy machine
        message = kernel.client.get_iopub_msg(timeout=30)
        if "looping" in message["content"].get("text", ""):
            break
    kernel.manager.interrupt_kernel()
    try:
        reply = kernel.client.get_shell_msg(timeout=30)
    except queue.Empty:
        pytest.fail(f"no reply 30 s after the interrupt; kernel alive: {kernel.manager.is_alive()}")
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # ipykernel aborts requests that arrive just after an error (stop_on_error): ask again then
    for _ in range(10):
        result = kernel.run("print('alive')")
        if result[0] != "aborted":
            break
        time.sleep(0.5)
    assert result == ("ok", "alive\n")


def test_a_dead_warm_kernel_is_seen_at_once_with_its_exit_code(kernel):
    kernel.client.execute("import os\nos._exit(3)")
    assert kernel.dies_within(5)
    assert kernel.manager.provisioner.process.returncode == 3


def test_killing_its_process_group_harms_no_other_kernel(box, kernel):
    other = Kernel(box, "bystander")
    try:
        kernel.client.execute("import os, signal\nos.killpg(0, signal.SIGKILL)")
        assert kernel.dies_within(5)
        assert other.run("print(1 + 1)") == ("ok", "2\n")
        assert zygote_children(box.zygote)  # the zygote lives on
    finally:
        other.stop()


def test_a_killed_sandbox_leaves_no_process_behind(box):
    before = zygote_children(box.zygote)
    doomed = Kernel(box, "doomed")
    assert doomed.run("import subprocess\nsubprocess.Popen(['sleep', '600.25'])")[0] == "ok"
    assert zygote_children(box.zygote) - before
    assert processes_running("600.25")
    doomed.manager.shutdown_kernel(now=True)  # a kill, as nbval stops its kernels
    deadline = time.monotonic() + 20  # a loaded machine (the suite on 2 cores) is slow to reap
    while time.monotonic() < deadline and (
        zygote_children(box.zygote) - before or processes_running("600.25")
    ):
        time.sleep(0.05)
    assert not zygote_children(box.zygote) - before
    assert not processes_running("600.25")
    doomed.stop()


def processes_running(argument: str) -> list[int]:
    """PIDs of the processes that have ``argument`` on their command line."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if argument in process.cmdline():
                found.append(process.pid)
    return found


def test_without_a_zygote_the_stand_in_starts_a_cold_kernel(cold_box):
    cold = Kernel(cold_box, "cold")
    try:
        assert cold.run("import sys\nprint('torch' in sys.modules)") == ("ok", "False\n")
        assert cold.run("import torch\nprint(torch.ones(2).sum().item())") == ("ok", "2.0\n")
    finally:
        cold.stop()


@pytest.fixture
def run_folder(tmp_path):
    """A short folder: a socket's path has at most 107 bytes."""
    with sandbox.open_sandbox(Settings(no_sandbox=True)) as opened:
        yield opened.run_folder


def test_the_zygote_refuses_to_preload_a_hidden_file(run_folder):
    import numpy

    completed = _run_zygote(run_folder, [os.path.dirname(numpy.__file__)])
    assert completed.returncode != 0 and "hidden" in completed.stderr
    assert not (run_folder / "zygote.sock").exists()


def _run_zygote(folder: Path, hidden: list[str]):
    serve = ["-m", "addnorm_lib.grading._warm_kernels", "serve", folder / "zygote.sock", *hidden]
    return run_python(*serve, input="", timeout=120)


def test_the_zygote_stops_when_its_grader_goes(run_folder):
    completed = _run_zygote(run_folder, [])  # stdin closes at once, as when the grader dies
    assert completed.returncode == 0 and completed.stdout.split() == ["ready", "forked", "0"]
    assert not (run_folder / "zygote.sock").exists()


def test_no_warm_kernel_outlives_its_zygote():
    with sandbox.open_sandbox(Settings(jobs=1), warm=True) as opened:
        orphan = Kernel(opened, "orphan")
        assert orphan.run("import subprocess\nsubprocess.Popen(['sleep', '600.5'])")[0] == "ok"
        assert processes_running("600.5")
        assert opened.zygote is not None
    try:
        assert orphan.dies_within(5)
        # the namespace's last processes are killed as it ends: give the kill a moment to land
        deadline = time.monotonic() + 5
        while processes_running("600.5") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not processes_running("600.5")
    finally:
        orphan.stop()
