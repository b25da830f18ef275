"""The bubblewrap whitelist: what a process inside it can and cannot reach.

The end-to-end tests run real Python inside ``bwrap`` and skip, saying why, where bubblewrap is
missing or cannot create its namespaces (``make test`` installs it where it can).
"""

import json
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from addnorm_lib.grading import bubblewrap
from addnorm_lib.grading.bubblewrap import Whitelist, bubblewrap_argv, course_whitelist
from tests.conftest import ROOT

PROBLEM = bubblewrap.bubblewrap_problem()
NEEDS_BWRAP = pytest.mark.skipif(PROBLEM is not None, reason=f"no bubblewrap sandbox: {PROBLEM}")

# Run inside the sandbox: report every fact the tests judge, as JSON on stdout.
INSIDE = textwrap.dedent(
    """
    import errno, json, os, socket, sys
    facts = {"uid": os.getuid(), "root": sorted(os.listdir("/"))}
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    facts["cap_eff"] = status["CapEff"].strip()
    facts["no_new_privs"] = status["NoNewPrivs"].strip()
    facts["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    facts["reference"] = os.listdir(sys.argv[1] + "/addnorm_lib/reference")
    facts["course"] = sorted(os.listdir(sys.argv[1]))
    facts["host_tmp_marker"] = os.path.exists(sys.argv[2])
    facts["shadow"] = os.path.exists("/etc/shadow")
    try:
        open("/proc/sys/kernel/core_pattern", "r+").close()  # opened for writing; nothing written
        facts["proc_sys"] = "writable"
    except OSError as err:
        facts["proc_sys"] = errno.errorcode.get(err.errno, str(err))
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=2).close()
        facts["host_port"] = "connected"
    except OSError as err:
        facts["host_port"] = errno.errorcode.get(err.errno, str(err))
    try:
        open(sys.argv[1] + "/addnorm_lib/planted.py", "w")
        facts["library_writable"] = True
    except OSError:
        facts["library_writable"] = False
    open(sys.argv[4] + "/written-in-exchange", "w").write("ok")
    facts["cwd"] = os.getcwd()
    facts["secret"] = os.environ.get("ADDNORM_TEST_SECRET")
    try:
        open("big", "wb").write(b"x" * 3 * 2**20)
        facts["home_cap"] = "wrote 3 MiB"
    except OSError as err:
        facts["home_cap"] = errno.errorcode.get(err.errno, str(err))
    import numpy, addnorm_lib.checks
    try:
        import addnorm_lib.reference.norms
        facts["reference_import"] = "imported"
    except ImportError:
        facts["reference_import"] = "ImportError"
    print(json.dumps(facts))
    """
)


def whitelist(tmp_path, home_mb=bubblewrap.HOME_MB):
    return course_whitelist(tmp_path / "home", tmp_path / "exchange", home_mb)


def test_the_command_line_unshares_everything_and_drops_privileges(tmp_path):
    argv = bubblewrap_argv(whitelist(tmp_path), ["python"], {"LANG": "C.UTF-8"})
    assert argv[0] == "bwrap" and argv[-2:] == ["--", "python"]
    for option in ("--unshare-user", "--unshare-all", "--die-with-parent", "--new-session"):
        assert option in argv
    assert "--disable-userns" in argv  # no nested namespaces to attack the kernel from
    assert argv.index("--clearenv") < argv.index("--setenv")
    assert "--share-net" not in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--uid") + 1] == str(bubblewrap.NOBODY) != "0"


def test_the_reference_is_blanked_after_the_library_is_bound(tmp_path):
    argv = bubblewrap_argv(whitelist(tmp_path), ["python"], {})
    library, reference = ROOT / "addnorm_lib", ROOT / "addnorm_lib" / "reference"
    bound = argv.index(str(library))
    blanked = argv.index(str(reference))
    assert argv[bound - 1] == "--ro-bind" and argv[blanked - 1] == "--tmpfs"
    assert bound < blanked, "bubblewrap applies mounts in order: blanking first would be undone"


def test_only_the_exchange_is_shared_and_nothing_else_of_the_course_is_bound(tmp_path):
    argv = bubblewrap_argv(whitelist(tmp_path, home_mb=3), ["python"], {})
    writable = [argv[i + 1] for i, arg in enumerate(argv) if arg in ("--bind", "--bind-try")]
    assert writable == [str((tmp_path / "exchange").resolve())]
    home = argv.index(str(tmp_path / "home"))
    assert argv[home - 3 : home] == ["--size", str(3 * 2**20), "--tmpfs"]
    bound = {argv[i + 1] for i, arg in enumerate(argv) if arg == "--ro-bind"}
    for folder in ("solutions", "tests", "book", ".git", "exercises"):
        assert not any(Path(path) == ROOT / folder for path in bound)
    assert str(ROOT) not in bound


def test_a_whitelist_without_the_reference_hides_nothing(tmp_path):
    argv = bubblewrap_argv(
        Whitelist((), (), tmp_path / "home", tmp_path / "exchange"), ["true"], {}
    )
    assert argv.count("--remount-ro") == 1 and argv[argv.index("--remount-ro") + 1] == "/proc"


@pytest.fixture
def listener():
    """A TCP listener on the host's loopback, which the sandbox must not reach."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@NEEDS_BWRAP
def test_inside_the_sandbox_the_host_is_out_of_reach(tmp_path, listener, monkeypatch):
    monkeypatch.setenv("ADDNORM_TEST_SECRET", "the instructor's token")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="addnorm-marker-") as marker:
        command = [sys.executable, "-c", INSIDE, str(ROOT), marker.name, str(listener), exchange]
        argv = bubblewrap_argv(whitelist(tmp_path, home_mb=2), list(map(str, command)), {})
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    facts = json.loads(completed.stdout)
    assert facts["uid"] == bubblewrap.NOBODY
    assert int(facts["cap_eff"], 16) == 0 and facts["no_new_privs"] == "1"
    assert len(facts["pids"]) <= 2  # bwrap's init and this Python: no grader process
    assert facts["reference"] == [] and facts["reference_import"] == "ImportError"
    assert "addnorm_lib" in facts["course"] and set(facts["course"]) <= {"addnorm_lib", ".venv"}
    assert not facts["host_tmp_marker"] and not facts["shadow"]
    assert facts["proc_sys"] == "EROFS"  # /proc/sys checks the host uid: root, as root
    assert facts["host_port"] in ("ENETUNREACH", "ECONNREFUSED")  # a network namespace of its own
    assert not facts["library_writable"]
    assert (exchange / "written-in-exchange").read_text() == "ok"
    assert facts["cwd"] == str(tmp_path / "home") and not (tmp_path / "home").exists()
    assert facts["secret"] is None  # the grader's environment stays outside
    assert facts["home_cap"] == "ENOSPC"  # the home is a 2 MiB tmpfs


@NEEDS_BWRAP
def test_a_kernel_in_the_sandbox_is_driven_over_ipc_sockets_in_the_exchange(tmp_path):
    """No shared network: the client outside talks to the kernel through sockets in the exchange."""
    from jupyter_client import BlockingKernelClient
    from jupyter_client.connect import write_connection_file

    exchange = tmp_path / "exchange"
    exchange.mkdir()
    connection = exchange / "kernel.json"
    write_connection_file(str(connection), transport="ipc", ip=str(exchange / "kernel"))
    command = [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection)]
    kernel = subprocess.Popen(
        bubblewrap_argv(whitelist(tmp_path), command, {}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = BlockingKernelClient(connection_file=str(connection))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        outputs = []
        reply = client.execute_interactive(
            "import os; print(os.getuid())",
            timeout=60,
            output_hook=lambda msg: outputs.append(msg["content"].get("text", "")),
        )
        assert reply["content"]["status"] == "ok"
        assert "".join(outputs).strip() == str(bubblewrap.NOBODY)
    finally:
        client.shutdown()
        client.stop_channels()
        kernel.wait(timeout=30)
