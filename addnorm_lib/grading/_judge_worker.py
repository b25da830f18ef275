"""Judging records in processes of their own, each with a memory and a time limit.

``python -m addnorm_lib.grading._judge_worker FD`` starts a *zygote*: it imports numpy, torch, the
checks and the references once, says ``ready`` on the socket FD (a SOCK_SEQPACKET socket it
inherits from the grader), then waits there. Each message from the grader carries one end of a
fresh socket; the zygote forks a *worker* for it and waits for the next. The worker:

1. sends ``{"pid": ...}`` (so that the grader can kill it) and reads its request, one JSON object:
   ``folder`` (the observations), ``checks`` (``[name, seed]`` pairs), ``judges`` (the module
   whose ``JUDGES`` and ``UNVERIFIED`` tables to use), ``memory_mb`` (address space it may add
   to the zygote's), ``check_seconds`` and ``cpu_seconds``;
2. limits itself (``RLIMIT_AS``, ``RLIMIT_CPU``, no core files) before reading any record;
3. judges each check in order, under an alarm of ``check_seconds`` (whose default action ends
   the process, even inside C code), and sends one line of JSON per check (see :func:`verdict`);
4. exits.

A record that gets past the loader's limits and still blows up a judge costs one check: the
worker dies or is killed, the grader names that check, and a new worker judges the rest. The
zygote exits when the grader closes its end of the socket (the grader exited).
"""

import contextlib
import importlib
import json
import os
import resource
import signal
import socket
import sys
import traceback

import psutil

from addnorm_lib.grading.verdict import Verdict

PRELOAD = (
    "numpy",
    "torch",
    "addnorm_lib.checks",
    "addnorm_lib.reference.deepnorm",
    "addnorm_lib.reference.mistakes",
    "addnorm_lib.reference.norms",
    "addnorm_lib.reference.placement",
    "addnorm_lib.reference.residuals",
    "addnorm_lib.transformer.architectures",
    "addnorm_lib.transformer.sublayers",
)
REQUEST_LIMIT = 2**20  # bytes of a request (the grader's own, a few hundred)
MESSAGE_LIMIT = 20_000  # characters of a verdict's message sent back


def verdict(folder_fd: int | None, name: str, seed: int, judges, unverified: dict) -> Verdict:
    """Judge one check's record (:class:`~.verdict.Verdict`'s kinds say what each means)."""
    from addnorm_lib.checks import CheckFailed, RecordMalformed
    from addnorm_lib.checks import _record as record

    try:
        if folder_fd is None:
            raise FileNotFoundError
        data = record.load_from(folder_fd, record.observation_name(name, seed))
        judges[name](data, seed)
    except FileNotFoundError:
        return Verdict("missing")
    except record.RecordRefused as refused:
        return Verdict("refused", str(refused))
    except RecordMalformed:
        return Verdict("malformed")
    except CheckFailed as failure:
        return Verdict("failed", str(failure)[:MESSAGE_LIMIT])
    except MemoryError:
        return Verdict("memory")
    except Exception as err:  # RecursionError, KeyError, ...: a record no judge expected
        return Verdict("error", type(err).__name__)
    return Verdict("passed", "; ".join(unverified.get(name, ())))


def address_space() -> int:
    """This process's virtual memory size, in bytes."""
    return psutil.Process().memory_info().vms


def limit(memory_mb: int, cpu_seconds: int) -> None:
    """Cap this process: ``memory_mb`` more address space than now, CPU time, no core files."""
    memory = address_space() + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def read_request(connection: socket.socket) -> dict:
    """The grader's request: JSON up to the end of what it sends."""
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
        if len(data) > REQUEST_LIMIT:
            raise ValueError("request too large")
    return json.loads(data)


def send(connection: socket.socket, message: dict) -> None:
    """One line of JSON to the grader."""
    connection.sendall(json.dumps(message).encode() + b"\n")


def serve(connection: socket.socket) -> None:
    """Be one worker: limit this process, judge the request's checks, report each (see above)."""
    from addnorm_lib.checks import _record as record

    send(connection, {"pid": os.getpid()})
    request = read_request(connection)
    limit(int(request["memory_mb"]), int(request["cpu_seconds"]))
    judges = importlib.import_module(request["judges"])
    table, unverified = judges.JUDGES, getattr(judges, "UNVERIFIED", {})
    try:
        folder_fd = record.open_folder(request["folder"])
    except FileNotFoundError:
        folder_fd = None
    except OSError:  # a link where the folder should be, ...: every record is refused
        for _ in request["checks"]:
            send(connection, Verdict("refused", "not a regular file").to_dict())
        return
    for name, seed in request["checks"]:
        signal.alarm(int(request["check_seconds"]))
        result = verdict(folder_fd, str(name), int(seed), table, unverified)
        signal.alarm(0)
        send(connection, result.to_dict())


def worker(connection: socket.socket) -> None:
    """The body of a forked worker; never returns."""
    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        with connection:
            serve(connection)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def zygote(control: socket.socket) -> None:
    """Fork a worker for every socket the grader sends; return when the grader hangs up."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped as they exit
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 1)
        except InterruptedError:
            continue
        except OSError:
            return
        if not message:
            return
        for fd in fds[1:]:
            os.close(fd)
        if not fds:
            continue
        if os.fork() == 0:
            control.close()
            worker(socket.socket(fileno=fds[0]))
        os.close(fds[0])


def main(argv: list[str]) -> int:
    """Preload, say ready (or why not) on the inherited socket, serve until the grader exits."""
    control = socket.socket(fileno=int(argv[1]))
    try:
        for module in PRELOAD:
            importlib.import_module(module)
    except Exception:
        with contextlib.suppress(OSError):
            control.send(b"failed: " + traceback.format_exc()[-2000:].encode())
        return 1
    control.send(b"ready")
    zygote(control)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
