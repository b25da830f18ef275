"""Start a graded kernel: in its submission's cgroup, with a connection file of its own.

The kernelspec runs ``python -I -S _launch.py EXCHANGE [--seccomp FILTER] PROCS_FILE ... --
COMMAND ...``, outside the sandbox and before any student code (it imports only the standard
library):

1. it writes its own pid into each ``cgroup.procs`` file, so that it and everything it starts
   count against the submission's group limits (if it cannot join, nothing starts: a kernel
   without its limits never runs);
2. with ``--seccomp``, it joins a new, empty session keyring (the one it inherited is the
   instructor's: every process it starts, the kernel included, would share it), and opens
   FILTER (a BPF program, ``seccomp_filter``) for bubblewrap, whose ``--seccomp`` option names
   the descriptor as ``SECCOMP_FD`` until then; if either fails, nothing starts;
3. it gives the kernel a connection file in EXCHANGE, the one folder the kernel shares with the
   grader: the grader's own (after ``-f`` in COMMAND) says where the *grader* connects, in its
   private folder, which the kernel cannot see; the kernel's says to bind its sockets in
   EXCHANGE. The grader links each socket into its private folder once the kernel has bound it
   (``_nbval_grades``), so that what the kernel later puts at those paths in EXCHANGE (a link
   to another socket of the machine, say) cannot redirect the grader;
4. it execs COMMAND (bubblewrap), ``-f`` now naming the kernel's connection file.
"""

import ctypes
import json
import os
import sys

KERNEL_FILE = "kernel.json"  # a connection file's name (the kernel's, in the exchange)
SOCKET_PREFIX = "kernel"  # sockets at FOLDER/kernel-PORT (the kernel's in the exchange)
SECCOMP_FD = "{seccomp_fd}"  # in COMMAND: replaced by the descriptor of the opened filter
KEYCTL_JOIN_SESSION_KEYRING = 1
LIBSECCOMP = "libseccomp.so.2"


def keyctl_number() -> int:
    """The number of the ``keyctl`` system call on this machine, as libseccomp knows it (the C
    library has no wrapper for it)."""
    libseccomp = ctypes.CDLL(LIBSECCOMP)
    libseccomp.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    number = libseccomp.seccomp_syscall_resolve_name(b"keyctl")
    if number < 0:
        raise OSError(f"libseccomp knows no keyctl call here ({number})")
    return number


def join_new_session_keyring() -> int:
    """Make this process's session keyring a new, empty, anonymous one; its serial number.

    Children inherit it: the kernel sees none of the keys of the session that started the grader.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number, operation = ctypes.c_long(keyctl_number()), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING)
    serial = libc.syscall(number, operation, ctypes.c_void_p(None))
    if serial < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"keyctl(KEYCTL_JOIN_SESSION_KEYRING): {os.strerror(code)}")
    return serial


def open_filter(path: str) -> int:
    """Open the seccomp filter's file for bubblewrap: an inheritable descriptor."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    os.set_inheritable(descriptor, True)
    return descriptor


def kernel_connection(connection_file: str, exchange: str) -> str:
    """Write the kernel's connection file in ``exchange``: the grader's, with the sockets there."""
    with open(connection_file) as file:
        info = json.load(file)
    info["ip"] = os.path.join(exchange, SOCKET_PREFIX)
    path = os.path.join(exchange, KERNEL_FILE)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(info, file)
    return path


def join_and_exec(arguments: list[str]) -> None:
    """Join the cgroups (and with ``--seccomp``, a new session keyring; open the filter), give
    the kernel its connection file, exec the command."""
    exchange, rest = arguments[0], arguments[1:]
    seccomp = None
    if rest[:1] == ["--seccomp"]:
        seccomp, rest = rest[1], rest[2:]
    split = rest.index("--")
    procs_files, command = rest[:split], rest[split + 1 :]
    pid = str(os.getpid())
    for path in procs_files:
        try:
            with open(path, "w") as procs:
                procs.write(pid)
        except OSError as err:
            sys.exit(f"cannot join the submission's cgroup {path}: {err}")
    if seccomp is not None:
        try:
            join_new_session_keyring()
            descriptor = str(open_filter(seccomp))
        except OSError as err:
            sys.exit(f"cannot confine the kernel (keyring, seccomp filter {seccomp}): {err}")
        command = [arg.replace(SECCOMP_FD, descriptor) for arg in command]
    if "-f" in command:  # a kernel's command line: its connection file follows -f
        where = command.index("-f") + 1
        command[where] = kernel_connection(command[where], exchange)
    os.execvp(command[0], command)


if __name__ == "__main__":
    join_and_exec(sys.argv[1:])
