"""Run pytest on one graded notebook in a fresh process, without paying pytest's start-up each time.

A fork server (multiprocessing's "forkserver") imports pytest, nbval, nbformat and jupyter_client
once; every submission then runs in its own child forked from it, in its own working folder,
with an address-space cap of its own. Importing those
packages takes about three seconds, which would otherwise be paid again for every submission.
"""

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import tempfile
import threading

import psutil

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
PRELOAD = [
    "addnorm_lib.grading",  # first: it spares nbformat's jsonschema a slow optional import
    "pytest",
    "nbval.plugin",
    "nbformat",
    "jupyter_client",
    "addnorm_lib.grading._nbval_grades",
]
_context = None
_environment_lock = threading.Lock()  # grading threads start pytest concurrently


def context():
    """multiprocessing's fork-server context, with pytest and nbval preloaded by the server."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def single_threaded(env: dict) -> dict:
    """env with one-thread math libraries: a thread pool started at import (OpenBLAS's) would
    not survive the fork server's forks."""
    return {**env, **dict.fromkeys(THREAD_VARIABLES, "1")}


# Sockets live in temporary folders (the fork server's, the warm-kernel zygote's), and a
# socket's path is limited to 107 bytes: a long TMPDIR would break grading. Above this length the
# folder goes under /tmp instead.
LONGEST_TEMP_DIR = 60
SHORT_TEMP_BASES = ("/tmp", "/dev/shm", "/var/tmp")


def short_temp_base() -> str | None:
    """A writable short folder for multiprocessing's temporary folder, or None to keep TMPDIR."""
    if len(tempfile.gettempdir()) <= LONGEST_TEMP_DIR:
        return None
    for base in SHORT_TEMP_BASES:
        if os.path.isdir(base) and os.access(base, os.W_OK):
            return base
    return None


def start_fork_server() -> None:
    """Start the fork server (if not running), single-threaded; its children can then unshare."""
    context()
    with _environment_lock:  # one swap at a time, or a thread could restore another's swap
        saved, saved_tempdir = dict(os.environ), tempfile.tempdir
        os.environ.update(single_threaded({}))  # the server inherits this process's environment
        tempfile.tempdir = short_temp_base() or saved_tempdir
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            tempfile.tempdir = saved_tempdir
            os.environ.clear()
            os.environ.update(saved)


PYTEST_MEMORY = 3 * 2**30  # the address space of one pytest run: an output flood stops here


def _child(arguments: list[str], cwd: str, env: dict) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    code = 70
    try:
        resource.setrlimit(resource.RLIMIT_AS, (PYTEST_MEMORY, PYTEST_MEMORY))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        import pytest

        code = int(pytest.main(arguments))
    finally:
        os._exit(code)


def run_pytest(arguments: list[str], cwd, env: dict, timeout: float):
    """pytest's exit code in a forked child, or None if it ran past ``timeout`` (then killed)."""
    start_fork_server()
    process = context().Process(target=_child, args=(arguments, str(cwd), env))
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        return None
    return process.exitcode


def marked_processes(name: str, value: str) -> list[psutil.Process]:
    """Every process but this one whose environment has ``name=value``."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):  # gone, or not ours to read
            if process.environ().get(name) == value:
                found.append(process)
    return found


def kill_marked(name: str, value: str) -> int:
    """Kill every process whose environment has ``name=value``; return how many."""
    killed = 0
    for process in marked_processes(name, value):
        with contextlib.suppress(psutil.Error):  # gone since
            process.kill()
            killed += 1
    return killed
