"""Start a graded kernel: in its submission's cgroup, with a connection file of its own.

The kernelspec runs ``python -I -S _launch.py EXCHANGE PROCS_FILE ... -- COMMAND ...``, outside
the sandbox and before any student code (it imports only the standard library):

1. it writes its own pid into each ``cgroup.procs`` file, so that it and everything it starts
   count against the submission's group limits (if it cannot join, nothing starts: a kernel
   without its limits never runs);
2. it gives the kernel a connection file in EXCHANGE, the one folder the kernel shares with the
   grader: the grader's own (after ``-f`` in COMMAND) says where the *grader* connects, in its
   private folder, which the kernel cannot see; the kernel's says to bind its sockets in
   EXCHANGE. The grader links each socket into its private folder once the kernel has bound it
   (``_nbval_grades``), so that what the kernel later puts at those paths in EXCHANGE (a link
   to another socket of the machine, say) cannot redirect the grader;
3. it execs COMMAND (bubblewrap), ``-f`` now naming the kernel's connection file.
"""

import json
import os
import sys

KERNEL_FILE = "kernel.json"  # a connection file's name (the kernel's, in the exchange)
SOCKET_PREFIX = "kernel"  # sockets at FOLDER/kernel-PORT (the kernel's in the exchange)


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
    """Join the cgroups, give the kernel its connection file, exec the command."""
    exchange, rest = arguments[0], arguments[1:]
    split = rest.index("--")
    procs_files, command = rest[:split], rest[split + 1 :]
    pid = str(os.getpid())
    for path in procs_files:
        try:
            with open(path, "w") as procs:
                procs.write(pid)
        except OSError as err:
            sys.exit(f"cannot join the submission's cgroup {path}: {err}")
    if "-f" in command:  # a kernel's command line: its connection file follows -f
        where = command.index("-f") + 1
        command[where] = kernel_connection(command[where], exchange)
    os.execvp(command[0], command)


if __name__ == "__main__":
    join_and_exec(sys.argv[1:])
