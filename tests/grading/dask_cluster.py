"""A real Dask cluster on this machine, for the cluster runner's tests and benchmark: a ``dask
scheduler`` process and ``dask worker`` processes, started as an instructor would start them on
their machines (``cluster.WORKER_COMMAND``), and killed, with all they started, at the end."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import distributed
import psutil

DASK = Path(sys.executable).parent / "dask"
START_SECONDS = 90


def cluster_environment() -> dict:
    """The workers' environment: the course's Python first on PATH, one math thread, and Dask's
    workers as plain processes (a daemonic one cannot start the grader's kernels)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "ADDNORM"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", DASK_DISTRIBUTED__WORKER__DAEMON="False")
    return env


@dataclass
class Cluster:
    """A running cluster: its scheduler's address and the processes of its scheduler and
    workers (each ``dask worker`` command: its nanny, which starts the worker)."""

    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen]


def kill_tree(process: subprocess.Popen) -> None:
    """Kill a process and everything it started (a Dask worker: its nanny, worker, zygotes)."""
    with contextlib.suppress(psutil.Error):
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]
        for member in family:
            with contextlib.suppress(psutil.Error):
                member.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


@contextlib.contextmanager
def running_cluster(folder: Path, workers: int, threads: int = 1) -> Iterator[Cluster]:
    """A scheduler and ``workers`` workers of ``threads`` threads each, their logs in
    ``folder``; every process is killed at exit."""
    file, env, logs = folder / "scheduler.json", cluster_environment(), []

    def start(*arguments: str) -> subprocess.Popen:
        log = open(folder / f"{len(logs)}.log", "w")  # noqa: SIM115 (closed at exit)
        logs.append(log)
        command = [str(DASK), *arguments, "--scheduler-file", str(file), "--no-dashboard"]
        return subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=folder)

    scheduler, started = start("scheduler", "--host", "127.0.0.1", "--port", "0"), []
    try:
        deadline = time.monotonic() + START_SECONDS
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert file.exists(), (folder / "0.log").read_text()[-2000:]
        address = json.loads(file.read_text())["address"]
        started = [start("worker", "--nthreads", str(threads)) for _ in range(workers)]
        with distributed.Client(address, timeout=START_SECONDS) as client:
            client.wait_for_workers(workers, timeout=START_SECONDS)
        yield Cluster(address, scheduler, started)
    finally:
        for process in [*started, scheduler]:
            if process.poll() is None:
                kill_tree(process)
        for log in logs:
            log.close()
