"""The bubblewrap whitelist: what a process inside it can and cannot reach.

The end-to-end tests run real Python inside ``bwrap`` and skip, saying why, where bubblewrap is
missing or cannot create its namespaces (``make test`` installs it where it can).

The seccomp filter and the new session keyring are tested by running the same attacks on the host
kernel's shared state (``SYSCALL_PROBE``: keyrings, io_uring, AIO, inotify, vsock and netlink
sockets, unshare, ptrace) three ways: on the host, in bubblewrap without them, and as a graded
kernel starts (the launcher, then bubblewrap with the filter). test_hostile_sandbox.py runs the
same attacks from a graded notebook, test_warm_kernels.py from a warm kernel.
"""

import ctypes
import dataclasses
import json
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from addnorm_lib.grading import _launch, bubblewrap, seccomp_filter
from addnorm_lib.grading.bubblewrap import Whitelist, bubblewrap_argv, course_whitelist
from tests.conftest import ROOT
from tests.needs import needs

PROBLEM = bubblewrap.bubblewrap_problem()
NEEDS_BWRAP = needs("the bubblewrap sandbox", PROBLEM)

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


# ----------------------------------------------------------------------------------------------
# The seccomp filter and the new session keyring
SYSCALL_PROBE = '''
def _syscall_attacks(numbers, planted, init_pid=None):
    """Each attack on the host kernel's shared state: "ok" where it worked, else the errno's
    name (or what went wrong). numbers: the system calls' numbers on this machine; planted: the
    description of a key in the grader's session keyring; init_pid: a process to ptrace."""
    import ctypes, errno, os, signal, socket, time

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    results = {}

    def call(name, *args):
        value = libc.syscall(ctypes.c_long(numbers[name]), *args)
        code = ctypes.get_errno()
        return value, errno.errorcode.get(code, str(code))

    def arg(value):
        return ctypes.c_long(value)

    session, user = arg(-3), arg(-4)  # KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING
    found, error = call("keyctl", arg(10), session, b"user", planted.encode(), arg(0))  # SEARCH
    if found >= 0:
        buffer = ctypes.create_string_buffer(256)
        size, error = call("keyctl", arg(11), arg(found), buffer, arg(256))  # READ
        results["session-keyring"] = "ok" if size > 0 else error
    else:
        results["session-keyring"] = error
    try:
        with open("/proc/keys") as table:
            results["proc-keys"] = "ok" if planted in table.read() else "not listed"
    except OSError as err:
        results["proc-keys"] = errno.errorcode.get(err.errno, str(err))
    buffer = ctypes.create_string_buffer(4096)
    size, error = call("keyctl", arg(11), user, buffer, arg(4096))  # READ the user keyring
    results["user-keyring"] = "ok" if size >= 0 else error
    key, error = call("add_key", b"user", b"addnorm-planted-by-kernel", b"x", arg(1), session)
    if key >= 0:
        call("keyctl", arg(21), arg(key))  # INVALIDATE: nothing of it outlives this check
    results["add-key"] = "ok" if key >= 0 else error
    key, error = call("request_key", b"user", b"addnorm-no-such-key", None, session)
    results["request-key"] = "ok" if key >= 0 or error == "ENOKEY" else error
    params = ctypes.create_string_buffer(120)
    ring, error = call("io_uring_setup", arg(1), params)
    if ring >= 0:
        os.close(ring)
    results["io-uring"] = "ok" if ring >= 0 else error
    context = ctypes.c_ulong(0)
    done, error = call("io_setup", arg(1), ctypes.byref(context))
    if done == 0:
        call("io_destroy", context)
    results["aio"] = "ok" if done == 0 else error
    watch, error = call("inotify_init1", arg(0))
    if watch >= 0:
        os.close(watch)
    results["inotify"] = "ok" if watch >= 0 else error
    for name, family, kind in [
        ("vsock", 40, socket.SOCK_STREAM),
        ("netlink", socket.AF_NETLINK, socket.SOCK_RAW),
        ("inet6", socket.AF_INET6, socket.SOCK_STREAM),
        ("unix", socket.AF_UNIX, socket.SOCK_STREAM),
    ]:
        try:
            socket.socket(family, kind).close()
            results[name] = "ok"
        except OSError as err:
            results[name] = errno.errorcode.get(err.errno, str(err))
    child = os.fork()
    if child == 0:  # unshare a user namespace (the sandbox allows none), report by exit status
        value, error = call("unshare", arg(0x10000000))
        os._exit(0 if value == 0 else getattr(errno, error, 1))
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    results["unshare"] = "ok" if code == 0 else errno.errorcode.get(code, str(code))
    targets = [("ptrace-child", None)]
    if init_pid is not None:
        targets.append(("ptrace-init", init_pid))
    for name, pid in targets:
        child = None
        if pid is None:
            child = pid = os.fork()
            if child == 0:
                time.sleep(30)
                os._exit(0)
        seized, error = call("ptrace", arg(0x4206), arg(pid), arg(0), arg(0))  # PTRACE_SEIZE
        if seized == 0 and not child:  # stop it (PTRACE_INTERRUPT), then let it go (DETACH)
            call("ptrace", arg(0x4207), arg(pid), arg(0), arg(0))
            os.waitpid(pid, 0x40000000)  # __WALL
            call("ptrace", arg(17), arg(pid), arg(0), arg(0))
        results[name] = "ok" if seized == 0 else error
        if child:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    return results
'''

PROBE_CALLS = ("keyctl", "add_key", "request_key", "io_uring_setup", "io_setup", "io_destroy")
PROBE_CALLS += ("inotify_init1", "unshare", "ptrace")
# What each attack meets under the filter (ENOTSUP is EOPNOTSUPP's other name).
REFUSED = {
    "session-keyring": "EPERM",
    "user-keyring": "EPERM",
    "add-key": "EPERM",
    "request-key": "EPERM",
    "io-uring": "ENOSYS",
    "aio": "ENOSYS",
    "inotify": "ENOSYS",
    "vsock": "EAFNOSUPPORT",
    "netlink": "ENOTSUP",
    "inet6": "EAFNOSUPPORT",
    "unshare": "EPERM",
    "ptrace-child": "EPERM",
    "ptrace-init": "EPERM",
}
KEY_SPEC_SESSION_KEYRING = -3


def syscall_numbers() -> dict[str, int]:
    """The probe's system calls' numbers on this machine, as libseccomp knows them."""
    import pyseccomp

    return {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in PROBE_CALLS}


def plant_key(description: str, secret: str):
    """A preexec function: the process joins a session keyring of its own (the test's own is left
    alone) and plants a key in it, as an instructor's session keyring would hold a secret."""
    add_key = syscall_numbers()["add_key"]

    def plant() -> None:
        _launch.join_new_session_keyring()
        libc = ctypes.CDLL(None, use_errno=True)
        payload = secret.encode()
        kind, name = b"user", description.encode()
        size, keyring = ctypes.c_long(len(payload)), ctypes.c_long(KEY_SPEC_SESSION_KEYRING)
        if libc.syscall(ctypes.c_long(add_key), kind, name, payload, size, keyring) < 0:
            raise OSError(ctypes.get_errno(), "add_key failed")

    return plant


def probe_command(planted: str, init_pid: int | None) -> list[str]:
    """Python that runs every attack of ``SYSCALL_PROBE`` and prints what each met, as JSON."""
    run = "import json, sys\nprint(json.dumps(_syscall_attacks(*json.loads(sys.argv[1]))))"
    arguments = json.dumps([syscall_numbers(), planted, init_pid])
    return [sys.executable, "-c", SYSCALL_PROBE + run, arguments]


def launcher(exchange: Path, filter_file: Path) -> list[str]:
    """The launcher's command line as a graded kernel's starts, without a cgroup."""
    return [
        sys.executable,
        "-I",
        "-S",
        _launch.__file__,
        str(exchange),
        "--seccomp",
        str(filter_file),
    ]


def run_probe(argv: list[str], planted: str) -> dict[str, str]:
    completed = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=plant_key(planted, "the instructor's secret"),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout)


def test_every_call_the_filter_names_is_one_libseccomp_knows():
    """A misspelt call would be refused nowhere; and the issue's calls are all in the list."""
    calls = [rule.call for rule in seccomp_filter.rules()]
    assert seccomp_filter.unknown_calls(calls) == []
    for call in ("keyctl", "add_key", "request_key", "io_uring_setup", "io_setup", "userfaultfd"):
        assert call in calls
    for call in ("perf_event_open", "ptrace", "bpf", "mount", "unshare", "setns", "clone3"):
        assert call in calls
    assert set(seccomp_filter.DOCKER_DENIED) <= set(calls)
    assert "socket" in calls and "clone" in calls  # with conditions on their first argument


@NEEDS_BWRAP
def test_the_filter_and_a_new_keyring_keep_the_kernel_off_the_hosts_shared_state(tmp_path):
    """Each attack works on the host and in bubblewrap alone, and fails as a kernel starts."""
    planted = f"addnorm-planted-{tmp_path.name}"
    host = run_probe(probe_command(planted, None), planted)  # the host's init is not probed
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    inside = probe_command(planted, 1)  # pid 1: the sandbox's own init
    plain = run_probe(bubblewrap_argv(whitelist(tmp_path), inside, {}), planted)
    filtered_argv = bubblewrap_argv(whitelist(tmp_path), inside, {}, seccomp_fd=_launch.SECCOMP_FD)
    filter_file = seccomp_filter.write_filter(tmp_path / "seccomp.bpf")
    filtered = run_probe([*launcher(exchange, filter_file), "--", *filtered_argv], planted)
    assert host["proc-keys"] == "ok" and plain["proc-keys"] != "ok"  # /proc/keys is blanked
    for attack, refusal in REFUSED.items():
        if attack in host and host[attack] != "ok":
            continue  # this machine does not have it: the other runs cannot tell
        if attack == "unshare":  # bubblewrap alone already refuses user namespaces
            assert plain[attack] == "ENOSPC", plain
        else:
            assert plain[attack] == "ok", (attack, plain)
        assert filtered[attack] == refusal, (attack, filtered)
    assert filtered["unix"] == "ok" and filtered["proc-keys"] != "ok"


KEYRING_CHECK = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = libc.syscall(ctypes.c_long(int(sys.argv[1])), ctypes.c_long(10), ctypes.c_long(-3),
                     b"user", sys.argv[2].encode(), ctypes.c_long(0))  # KEYCTL_SEARCH in @s
print("found" if found >= 0 else "not found")
"""


def test_the_launcher_gives_the_kernel_a_new_empty_session_keyring(tmp_path):
    """Without the filter (no bubblewrap here): the planted key is in the session keyring the
    launcher inherited, and not in the one it gives the command it starts."""
    planted = f"addnorm-planted-{tmp_path.name}"
    check = [sys.executable, "-c", KEYRING_CHECK, str(syscall_numbers()["keyctl"]), planted]
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    filter_file = seccomp_filter.write_filter(tmp_path / "seccomp.bpf")
    outputs = {}
    for name, argv in [
        ("inherited", check),
        ("launched", [*launcher(exchange, filter_file), "--", *check]),
    ]:
        completed = subprocess.run(
            argv, capture_output=True, text=True, check=False, preexec_fn=plant_key(planted, "s")
        )
        assert completed.returncode == 0, completed.stderr[-2000:]
        outputs[name] = completed.stdout.strip()
    assert outputs == {"inherited": "found", "launched": "not found"}


# ----------------------------------------------------------------------------------------------
# The sandbox's /tmp and /dev/shm: tmpfs of capped size
FILL = """
import errno, json, sys
written = {}
for folder in ("/tmp", "/dev/shm"):
    try:
        with open(folder + "/fill", "wb") as file:
            for _ in range(int(sys.argv[1])):
                file.write(b"x" * 2**20)
                file.flush()
        written[folder] = "wrote all"
    except OSError as err:
        written[folder] = errno.errorcode.get(err.errno, str(err))
print(json.dumps(written))
"""


def test_tmp_and_shared_memory_are_tmpfs_of_capped_size(tmp_path):
    argv = bubblewrap_argv(whitelist(tmp_path), ["python"], {})
    for folder, size_mb in (("/tmp", bubblewrap.TMP_MB), ("/dev/shm", bubblewrap.SHM_MB)):
        mounted = argv.index(folder)
        assert argv[mounted - 3 : mounted] == ["--size", str(size_mb * 2**20), "--tmpfs"]


@NEEDS_BWRAP
@pytest.mark.parametrize("capped", [True, False])
def test_writing_past_the_cap_of_tmp_or_shared_memory_fails_inside(tmp_path, capped):
    """A kernel that fills /tmp or /dev/shm gets ENOSPC at the cap; uncapped, each takes as much
    of the machine's memory as it writes (half of it, by the kernel's default)."""
    sizes = {} if capped else {"tmp_mb": None, "shm_mb": None}
    box = dataclasses.replace(whitelist(tmp_path), **sizes)
    box.exchange.mkdir()
    megabytes = max(bubblewrap.TMP_MB, bubblewrap.SHM_MB) + 8
    argv = bubblewrap_argv(box, [sys.executable, "-I", "-S", "-c", FILL, str(megabytes)], {})
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    expected = "ENOSPC" if capped else "wrote all"
    assert json.loads(completed.stdout) == {"/tmp": expected, "/dev/shm": expected}
