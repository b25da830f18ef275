"""Start a graded kernel's sandbox inside its submission's cgroup.

The kernelspec runs ``python -I -S _launch.py PROCS_FILE ... -- COMMAND ...``: this process
writes its own pid into each ``cgroup.procs`` file, so that it and everything it starts count
against the submission's group limits, then execs the command (bubblewrap). If it cannot join,
it does not start the command: a kernel without its limits never runs.

It runs outside the sandbox, before any student code, and imports only the standard library.
"""

import os
import sys


def join_and_exec(arguments: list[str]) -> None:
    """Join the cgroups listed before ``--``, then exec what follows it."""
    split = arguments.index("--")
    procs_files, command = arguments[:split], arguments[split + 1 :]
    pid = str(os.getpid())
    for path in procs_files:
        try:
            with open(path, "w") as procs:
                procs.write(pid)
        except OSError as err:
            sys.exit(f"cannot join the submission's cgroup {path}: {err}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    join_and_exec(sys.argv[1:])
