"""The kernel a submission runs in: ipykernel with resource limits set before any student code.

The grader's kernelspec starts ``python -m addnorm_lib.grading._graded_kernel -f
{connection_file}``. Limits come from the environment: ``ADDNORM_MEMORY_MB`` caps the address
space (a memory blow-up raises MemoryError or kills this kernel, never the grader),
``ADDNORM_FILE_MB`` caps the size of any file it writes. These are per process; the
submission's cgroup caps all its processes together (see ``sandbox``).
"""

import os
import resource


def _limit(kind: int, megabytes: str | None) -> None:
    if megabytes:
        size = int(float(megabytes) * 2**20)
        resource.setrlimit(kind, (size, size))


def set_limits() -> None:
    """Cap this process's address space and file sizes as the environment says."""
    _limit(resource.RLIMIT_AS, os.environ.get("ADDNORM_MEMORY_MB"))
    _limit(resource.RLIMIT_FSIZE, os.environ.get("ADDNORM_FILE_MB"))


def run() -> None:
    """ipykernel with this process's sys.argv (``-f CONNECTION_FILE``)."""
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    set_limits()
    run()
