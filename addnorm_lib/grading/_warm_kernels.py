"""Warm kernels: graded kernels forked from a process that has already imported numpy and torch.

Starting a graded kernel costs about 2.5 s of CPU, most of it importing torch, and a batch pays it
for every submission. Here a *zygote* process imports ipykernel, numpy and torch once, and each
graded kernel is a fork of it, moved into its submission's jail:

1. The kernelspec runs ``launch`` (outside the jail): it connects to the zygote's socket, which
   the jail hides, and execs the jail's command with the connection left open.
2. Inside the jail, ``standin`` starts where the kernel used to: it sends the zygote its
   namespaces (user, mount, PID), its standard streams, working folder, environment and kernel
   arguments over that connection.
3. The zygote forks; the child enters those namespaces and forks the kernel, which is then one
   more process of the jail: it sees neither the grader, nor the zygote, nor other kernels. It
   starts a session of its own, so signalling its process group reaches nobody else.
4. The stand-in stays as the jail's first process: it passes interrupts on to the kernel and exits
   with the kernel's exit status (the zygote's child awaits the kernel and reports it), so Jupyter
   sees the kernel start, stop and die as before; when the stand-in is killed, the PID namespace,
   kernel included, goes with it.

The zygote runs with one-thread math libraries, since only a single-threaded process may enter a
user namespace; each kernel then sets torch's thread count from its own environment (numpy's BLAS
stays at one thread, which is what the grader asks for when it runs one kernel per core).

If anything on the way fails (no zygote, a refused fork), the stand-in becomes a plain kernel
itself: warm kernels make grading faster, never less reliable.

``launch`` and ``standin`` run as ``python -I -S this_file.py``, so this module's top level
imports nothing but the standard library.
"""

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
NAMESPACES = (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID))
PR_SET_PDEATHSIG = 1
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
DROPPED_VARIABLES = ("JPY_PARENT_PID",)  # the kernel's parent is not who ipykernel expects
REPLY_TIMEOUT = 30.0  # seconds the stand-in waits for a warm kernel before starting a cold one


# ----------------------------------------------------------------------------------------------
# Outside the jail: connect, then exec the jail


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
# Inside the jail: ask for a warm kernel and stand in for it


def standin(fd: int, kernel_argv: list[str]) -> None:
    """Run a warm kernel through the zygote on connection fd, else a cold one; never returns."""
    connection = request_warm_kernel(fd, kernel_argv) if fd >= 0 else None
    if connection is None:
        with_limits = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel", *kernel_argv]
        os.execv(sys.executable, with_limits)
    signal.signal(signal.SIGINT, lambda *_: _signal_jail(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # orphans of the jail are re-parented here
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
    _signal_jail(signal.SIGKILL)  # a kernel that never reported back must not linger
    return None


def _signal_jail(signum: int) -> None:
    """Send signum to every other process of this PID namespace (the stand-in is its init)."""
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
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path)
    os.chmod(socket_path, 0o600)
    listener.listen(16)
    print("ready", flush=True)
    forks = 0
    try:
        while True:
            readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
            _reap()
            if sys.stdin in readable and not sys.stdin.buffer.read1(1):
                break
            if listener in readable:
                connection, _ = listener.accept()
                forks += _serve_one(listener, connection)
    finally:
        listener.close()
        os.unlink(socket_path)
        print(f"forked {forks}", flush=True)


def _is_under(path: str | None, hidden: tuple[str, ...]) -> bool:
    real = os.path.realpath(path) if path else ""
    return bool(real) and any(real == h or real.startswith(h + os.sep) for h in hidden)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve_one(listener: socket.socket, connection: socket.socket) -> int:
    """Fork a kernel for one request; 1 if forked, else 0."""
    fds = []
    try:
        connection.settimeout(10.0)
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 8)
        request = json.loads(message)
        if len(fds) != len(NAMESPACES) + 3:
            raise ValueError(f"expected {len(NAMESPACES) + 3} descriptors, got {len(fds)}")
        if os.fork() == 0:
            _child(listener, connection, request, fds)  # never returns
        return 1
    except (OSError, ValueError):
        return 0
    finally:
        connection.close()
        for fd in fds:
            os.close(fd)


def _child(listener, connection, request: dict, fds: list[int]) -> None:
    """In the zygote's child: enter the jail's namespaces, fork the kernel, report its exit.

    The kernel is this process's child: only here can its exit be awaited, since its stand-in
    (the jail's init) is not its parent. The exit code goes to the stand-in over the connection.
    """
    code = 1
    try:
        listener.close()
        libc = ctypes.CDLL(None, use_errno=True)
        _die_with_parent(libc)
        for fd, (_, flag) in zip(fds, NAMESPACES, strict=False):
            if libc.setns(fd, flag) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
        kernel = os.fork()
        if kernel == 0:
            _kernel(connection, request, fds[len(NAMESPACES) :])  # never returns
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(kernel, 0)
        exit_code = os.waitstatus_to_exitcode(status)
        connection.send(f"exit {exit_code if exit_code >= 0 else 128 - exit_code}".encode())
        code = 0
    finally:
        os._exit(code)


def _die_with_parent(libc) -> None:
    """SIGKILL this process when its parent exits: no warm kernel outlives the zygote."""
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")


def _kernel(connection, request: dict, stdio: list[int]) -> None:
    """The warm kernel: take over the stand-in's streams, folder and environment; run ipykernel."""
    code = 1
    try:
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
