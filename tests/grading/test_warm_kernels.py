"""Warm kernels: forks of a zygote, jailed like cold kernels, and just as observable to Jupyter.

Each test starts graded kernels the way nbval does (a KernelManager on the grader's kernelspec)
while a zygote runs, and checks what a kernel is, sees and survives.
"""

import contextlib
import os
import queue
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from addnorm_lib.grading import sandbox
from addnorm_lib.grading.settings import COURSE_ROOT, Settings
from tests.conftest import run_python

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sandbox.isolation(), reason="warm kernels need namespaces"),
]


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    settings = Settings(jobs=2)
    with sandbox.run_folder_context() as folder:  # short, as the grader's: the socket lives in it
        run_folder = Path(folder)
        with sandbox.warm_kernels(run_folder, settings, tmp_path_factory.mktemp("out")) as stats:
            assert (run_folder / sandbox.ZYGOTE_SOCKET).exists(), "the zygote did not start"
            yield {"run_folder": run_folder, "stats": stats}


@pytest.fixture
def run_folder():
    """A grading run's folder, short whatever TMPDIR is: a socket path has at most 107 bytes."""
    with sandbox.run_folder_context() as folder:
        yield Path(folder)


class Kernel:
    """A graded kernel started as nbval starts it, with a few helpers."""

    def __init__(self, run_folder: Path, name: str):
        work = run_folder / name
        for folder in ("private", "sandbox/runtime"):
            (work / folder).mkdir(parents=True)
        sandbox.write_kernelspec(work / "private", run_folder)
        specs = KernelSpecManager(kernel_dirs=[str(work / "private" / "kernels")])
        self.manager = KernelManager(kernel_name=sandbox.KERNEL_NAME, kernel_spec_manager=specs)
        self.manager.connection_file = str(work / "sandbox" / "runtime" / "kernel.json")
        self.manager.start_kernel(cwd=str(work / "sandbox"))
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


@pytest.fixture
def kernel(zygote, request):
    started = Kernel(zygote["run_folder"], request.node.name.replace("[", "_").replace("]", ""))
    yield started
    started.stop()


def zygote_children(zygote) -> set[int]:
    """PIDs of the zygote's children (each warm kernel's waiting parent)."""
    return {child.pid for child in psutil.Process(zygote["stats"]["pid"]).children()}


def test_a_warm_kernel_starts_with_torch_imported_and_no_reference(kernel):
    status, printed = kernel.run(
        "import sys\nprint('torch' in sys.modules, sorted(m for m in sys.modules "
        "if m.startswith('addnorm_lib.reference')))"
    )
    assert (status, printed.strip()) == ("ok", "True []")  # the batch test tries to import them


def test_a_warm_kernel_sees_only_its_jail(kernel, zygote):
    socket_path = zygote["run_folder"] / sandbox.ZYGOTE_SOCKET
    course = str(COURSE_ROOT)
    status, printed = kernel.run(
        "import os, psutil\n"
        f"print(os.path.exists({str(socket_path)!r}), os.access({course!r}, os.W_OK))\n"
        "print(sorted(psutil.pids()))"
    )
    assert status == "ok"
    exists_line, pids_line = printed.strip().split("\n")
    assert exists_line == "False False"
    assert max(eval(pids_line)) < 50, pids_line  # only the jail's own processes


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


def test_killing_its_process_group_harms_no_other_kernel(zygote, kernel):
    other = Kernel(zygote["run_folder"], "bystander")
    try:
        kernel.client.execute("import os, signal\nos.killpg(0, signal.SIGKILL)")
        assert kernel.dies_within(5)
        assert other.run("print(1 + 1)") == ("ok", "2\n")
        assert zygote_children(zygote)  # the zygote lives on
    finally:
        other.stop()


def test_a_killed_jail_leaves_no_process_behind(zygote):
    before = zygote_children(zygote)
    doomed = Kernel(zygote["run_folder"], "doomed")
    assert doomed.run("import subprocess\nsubprocess.Popen(['sleep', '600.25'])")[0] == "ok"
    assert zygote_children(zygote) - before
    assert processes_running("600.25")
    doomed.manager.shutdown_kernel(now=True)  # a kill, as nbval stops its kernels
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        zygote_children(zygote) - before or processes_running("600.25")
    ):
        time.sleep(0.05)
    assert not zygote_children(zygote) - before
    assert not processes_running("600.25")
    doomed.client.stop_channels()


def processes_running(argument: str) -> list[int]:
    """PIDs of the processes that have ``argument`` on their command line."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if argument in process.cmdline():
                found.append(process.pid)
    return found


def test_without_a_zygote_the_stand_in_starts_a_cold_kernel(run_folder):
    (run_folder / sandbox.ZYGOTE_SOCKET).touch()  # a socket file nobody listens on
    cold = Kernel(run_folder, "cold")
    try:
        assert cold.run("import sys\nprint('torch' in sys.modules)") == ("ok", "False\n")
        assert cold.run("import torch\nprint(torch.ones(2).sum().item())") == ("ok", "2.0\n")
    finally:
        cold.stop()


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


def test_no_warm_kernel_outlives_its_zygote(run_folder):
    settings = Settings(jobs=1)
    with sandbox.warm_kernels(run_folder, settings, run_folder / "out"):
        orphan = Kernel(run_folder, "orphan")
        assert orphan.run("import subprocess\nsubprocess.Popen(['sleep', '600.5'])")[0] == "ok"
        assert processes_running("600.5")
    try:
        assert orphan.dies_within(5)
        assert not processes_running("600.5")
    finally:
        orphan.stop()
