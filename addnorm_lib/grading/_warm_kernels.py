"""Warm kernels: graded kernels forked from a process that has already imported numpy and torch.

Starting a graded kernel costs about 1.5 s of CPU, most of it importing torch, and a batch pays it
for every submission. Here a *zygote* process imports ipykernel, numpy and torch once, and each
graded kernel is a fork of it, moved into its submission's bubblewrap sandbox:

1. The kernelspec runs ``launch`` (outside the sandbox): it connects to the zygote's socket, which
   no sandbox can see, and execs the sandbox's command line with the connection left open.
2. bubblewrap builds the submission's sandbox (``bubblewrap.py``) and starts ``standin`` in it,
   where the kernel used to start: it sends the zygote its namespaces (user, mount, PID,
   network, IPC, UTS, cgroup), its standard streams, working folder, environment and kernel
   arguments over that connection.
3. The zygote forks; the child joins the cgroup of the process that connected (the submission's:
   the launcher joined it before it started bubblewrap), enters the sandbox's namespaces and
   forks the kernel, which is then one more process of the sandbox: it drops every capability,
   sets ``no_new_privs`` and runs as the sandbox's unprivileged user, in the sandbox's root, with
   its whitelist, no network and no view of the grader, the zygote or other kernels. It joins a
   new, empty session keyring (the zygote's is the grader's) and loads the sandbox's seccomp
   filter (``seccomp_filter``: the zygote builds it once, as the grader builds the one bubblewrap
   loads for cold kernels), so it is as confined as a cold kernel. It starts a session of its
   own, so signalling its process group reaches nobody else.
4. The stand-in stays in the sandbox: it exits with the kernel's exit status (the zygote's child
   awaits the kernel and reports it), so Jupyter sees the kernel start, stop and die as before;
   when bubblewrap is killed, the PID namespace, kernel included, goes with it.

The zygote runs with one-thread math libraries (forks of a process with a thread pool keep only
the forking thread) and with no variable of the grader's environment, and must not import
anything hidden from kernels (it checks). Each kernel then sets torch's thread count from its
own environment.

If anything on the way fails (no zygote, a refused fork), the stand-in becomes a plain kernel
itself: warm kernels make grading faster, never less reliable or less confined.

``launch`` and ``standin`` run as ``python -I -S this_file.py``, so this module's top level
imports nothing but the standard library.
"""

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys

# The sandbox's namespaces, the user namespace first: it gives the right to enter the others.
NAMESPACES = (
    ("user", 0x10000000),
    ("mnt", 0x00020000),
    ("pid", 0x20000000),
    ("net", 0x40000000),
    ("ipc", 0x08000000),
    ("uts", 0x04000000),
    ("cgroup", 0x02000000),
)
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
FD_PLACEHOLDER = "{zygote_fd}"
# What a graded kernel imports anyway: the exercises' imports and ipykernel's own start-up.
PRELOAD = (
    "numpy",
    "torch",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "sqlite3",
    "psutil",
    "addnorm_lib.checks",
    "addnorm_lib.checks.gradcheck",
    "addnorm_lib.grading._graded_kernel",
)
SO_PEERCRED = 17
NS_GET_PARENT = 0xB702  # ioctl: the user namespace that owns (is the parent of) this one
DROPPED_VARIABLES = ("JPY_PARENT_PID",)  # the kernel's parent is not who ipykernel expects
REPLY_TIMEOUT = 30.0  # seconds the stand-in waits for a warm kernel before starting a cold one


# ----------------------------------------------------------------------------------------------
# Outside the sandbox: connect, then exec bubblewrap


def launch(socket_path: str, argv: list[str]) -> None:
    """Connect to the zygote (fd -1 if it is not there) and exec argv with the connection open."""
    fd = -1
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(socket_path)
        fd = client.detach()
        os.set_inheritable(fd, True)
    except OSError:
        pass
    argv = [arg.replace(FD_PLACEHOLDER, str(fd)) for arg in argv]
    os.execvp(argv[0], argv)


# ----------------------------------------------------------------------------------------------
# Inside the sandbox: ask for a warm kernel and stand in for it


def standin(fd: int, kernel_argv: list[str]) -> None:
    """Run a warm kernel through the zygote on connection fd, else a cold one; never returns."""
    connection = request_warm_kernel(fd, kernel_argv) if fd >= 0 else None
    if connection is None:
        with_limits = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel", *kernel_argv]
        os.execv(sys.executable, with_limits)
    signal.signal(signal.SIGINT, lambda *_: _signal_sandbox(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        reply = connection.recv(64).decode()  # "exit CODE", sent when the kernel has exited
    except OSError:
        reply = ""
    os._exit(int(reply.split()[1]) if reply.startswith("exit ") else 1)


def request_warm_kernel(fd: int, kernel_argv: list[str]) -> socket.socket | None:
    """The open connection once the zygote has started a warm kernel, or None if it has not."""
    connection = socket.socket(fileno=fd)
    namespaces = []
    try:
        namespaces = [os.open(f"/proc/self/ns/{name}", os.O_RDONLY) for name, _ in NAMESPACES]
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_VARIABLES}
        request = {"cwd": os.getcwd(), "env": env, "argv": kernel_argv}
        connection.settimeout(REPLY_TIMEOUT)
        socket.send_fds(connection, [json.dumps(request).encode()], [*namespaces, 0, 1, 2])
        reply = connection.recv(64).decode()  # "ok", sent just before the kernel starts ipykernel
    except (OSError, ValueError):
        reply = ""
    finally:
        for ns in namespaces:
            os.close(ns)
    if reply == "ok":
        connection.settimeout(None)
        return connection
    connection.close()
    _signal_sandbox(signal.SIGKILL)  # a kernel that never reported back must not linger
    return None


def _signal_sandbox(signum: int) -> None:
    """Send signum to every other process of the sandbox (all of its PID namespace but init)."""
    with contextlib.suppress(OSError):
        os.kill(-1, signum)


# ----------------------------------------------------------------------------------------------
# The zygote


def serve(socket_path: str, hidden_paths: list[str]) -> None:
    """Preload, then fork a kernel for every request until stdin closes (the grader is gone).

    hidden_paths: files and folders the kernels must not see; preloading must not have read them.
    """
    for name in PRELOAD:
        __import__(name)
    hidden = tuple(os.path.realpath(path) for path in hidden_paths)
    files = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())}
    leaked = [name for name, file in files.items() if _is_under(file, hidden)]
    if leaked:
        sys.exit(f"zygote: preloading imported hidden modules {leaked}")
    from addnorm_lib.grading import seccomp_filter

    confinement = seccomp_filter.syscall_filter()  # no kernel runs without it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path)
    os.chmod(socket_path, 0o600)
    listener.listen(16)
    print("ready", flush=True)
    forks = failed = 0
    try:
        while True:
            readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
            failed += _reap()
            if sys.stdin in readable and not sys.stdin.buffer.read1(1):
                break
            if listener in readable:
                connection, _ = listener.accept()
                forks += _serve_one(listener, connection, confinement)
    finally:
        listener.close()
        os.unlink(socket_path)
        failed += _reap()
        print(f"forked {forks - failed}", flush=True)  # those that became warm kernels


def _is_under(path: str | None, hidden: tuple[str, ...]) -> bool:
    real = os.path.realpath(path) if path else ""
    return bool(real) and any(real == h or real.startswith(h + os.sep) for h in hidden)


def _reap() -> int:
    """Reap the children that have exited; how many of them failed to start a warm kernel."""
    failed = 0
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return failed
        if pid == 0:
            return failed
        failed += os.waitstatus_to_exitcode(status) != 0


def _serve_one(listener: socket.socket, connection: socket.socket, confinement) -> int:
    """Fork a kernel for one request, to run under the seccomp filter ``confinement``; 1 if
    forked, else 0."""
    fds = []
    try:
        connection.settimeout(10.0)
        # Who connected: ``launch``, which has since become bubblewrap in the submission's cgroup.
        peer, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, SO_PEERCRED, 12))
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, len(NAMESPACES) + 4)
        request = json.loads(message)
        if len(fds) != len(NAMESPACES) + 3:
            raise ValueError(f"expected {len(NAMESPACES) + 3} descriptors, got {len(fds)}")
        procs = cgroup_procs_of(peer)
        if os.fork() == 0:
            _child(listener, connection, request, fds, procs, confinement)  # never returns
        return 1
    except (OSError, ValueError) as err:
        print(f"zygote: no warm kernel for this request: {err}", file=sys.stderr, flush=True)
        return 0
    finally:
        connection.close()
        for fd in fds:
            os.close(fd)


def cgroup_procs_of(pid: int) -> list[str]:
    """The ``cgroup.procs`` files of the cgroups process ``pid`` is in (to join them)."""
    from addnorm_lib.grading import cgroups

    with open(f"/proc/{pid}/cgroup") as file:
        return [str(path) for path in cgroups.procs_files_of(file.read())]


def _child(
    listener, connection, request: dict, fds: list[int], procs: list[str], confinement
) -> None:
    """In the zygote's child: join the submission's cgroup, enter the sandbox's namespaces,
    fork the kernel, report its exit.

    The kernel is this process's child: only here can its exit be awaited, since its stand-in
    is not its parent. The exit code goes to the stand-in over the connection.
    """
    code = 1
    try:
        listener.close()
        libc = ctypes.CDLL(None, use_errno=True)
        _die_with_parent(libc)
        for path in procs:
            with open(path, "w") as cgroup:
                cgroup.write(str(os.getpid()))
        enter_namespaces(libc, fds[: len(NAMESPACES)])
        kernel = os.fork()
        if kernel == 0:
            _kernel(connection, request, fds[len(NAMESPACES) :], confinement)  # never returns
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(kernel, 0)
        exit_code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):  # the stand-in is gone already: nobody to tell
            connection.send(f"exit {exit_code if exit_code >= 0 else 128 - exit_code}".encode())
        code = 0
    except OSError as err:  # the stand-in starts a cold kernel instead
        print(f"zygote: no warm kernel for this request: {err}", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


def enter_namespaces(libc, fds: list[int]) -> None:
    """Enter the sandbox's namespaces, given as fds in the order of ``NAMESPACES``.

    bubblewrap's ``--disable-userns`` puts the sandbox in a user namespace nested in the one
    that owns its other namespaces: enter the owner first (the right to enter the others), then
    the others, then the nested one, as the sandbox's processes are.
    """
    user, others = fds[0], fds[1:]
    owner = fcntl.ioctl(user, NS_GET_PARENT)
    try:
        if os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino:  # not nested: no owner
            _setns(libc, owner, "user")
        for fd, (name, _) in zip(others, NAMESPACES[1:], strict=True):
            _setns(libc, fd, name)
        _setns(libc, user, "user")
    finally:
        os.close(owner)


def _setns(libc, fd: int, name: str) -> None:
    flag = dict(NAMESPACES)[name]
    if libc.setns(fd, flag) != 0:
        raise OSError(ctypes.get_errno(), f"setns({name}) failed")


def _die_with_parent(libc) -> None:
    """SIGKILL this process when its parent exits: no warm kernel outlives the zygote."""
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")


def drop_privileges(libc) -> None:
    """Keep no capability (effective, permitted, inheritable, ambient or bounding) and let no
    later exec gain any (``no_new_privs``): entering a user namespace grants them all in it."""
    for capability in range(64):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:  # past the last capability this kernel knows
                break
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT) failed")
    header = struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two empty {effective, permitted, inheritable} sets
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _kernel(connection, request: dict, stdio: list[int], confinement) -> None:
    """The warm kernel: drop every privilege, join a new session keyring, load the seccomp
    filter ``confinement``; take over the stand-in's streams, folder and environment; run
    ipykernel."""
    code = 1
    try:
        drop_privileges(ctypes.CDLL(None, use_errno=True))
        from addnorm_lib.grading import _launch

        _launch.join_new_session_keyring()
        confinement.load()
        os.setsid()  # a session of its own: killpg(0) reaches only this kernel and its children
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        keep = connection.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 65536)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        import numpy
        import torch

        from addnorm_lib.grading import _graded_kernel

        numpy.random.seed()  # noqa: NPY002 (a fork would share the zygote's global RNG state)
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 1))  # the zygote used 1
        _graded_kernel.set_limits()
        connection.send(b"ok")
        connection.close()
        sys.argv = ["ipykernel", *request["argv"]]
        _graded_kernel.run()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    finally:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def main(argv: list[str]) -> None:
    """``launch SOCKET -- ARGV``, ``standin FD ARGV`` or ``serve SOCKET HIDDEN...``."""
    role, *rest = argv
    if role == "launch":
        launch(rest[0], rest[2:] if rest[1:2] == ["--"] else rest[1:])
    elif role == "standin":
        standin(int(rest[0]), rest[1:])
    elif role == "serve":
        serve(rest[0], rest[1:])
    else:
        sys.exit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
