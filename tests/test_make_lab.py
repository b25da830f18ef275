"""``make lab`` starts JupyterLab as root too, passes ARGS on, and its terminals run the course's
Python even when the user's shell rc file resets PATH (checked in a real terminal of a real lab
server, as the user opens one: the REST API, then the terminal's websocket)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import websocket

from addnorm_lib import _lab
from tests.conftest import ROOT

VENV = Path(sys.prefix)
TOKEN = "addnorm-test-token"
# What a user's rc file may do: a PATH of its own, with another Python first.
RESETS_PATH = 'export PATH=/usr/local/bin:/usr/bin:/bin\necho "user rc read"\n'


def test_root_gets_allow_root_and_arguments_are_passed_on():
    as_root = _lab.lab_command(VENV, ["--no-browser", "--port", "8899"], uid=0)
    assert as_root[1:3] == ["lab", str(ROOT / "exercises")]
    assert as_root[3] == f"--config={_lab.config_path(VENV)}"
    assert as_root[4:] == ["--allow-root", "--no-browser", "--port", "8899"]
    assert "--allow-root" not in _lab.lab_command(VENV, [], uid=1000)


def test_make_lab_hands_its_args_to_the_lab():
    # Run as a top-level make even under `make test`: a sub-make prints "Entering directory".
    env = {k: v for k, v in os.environ.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}}
    done = subprocess.run(
        [
            shutil.which("make") or "make",
            "--no-print-directory",
            "-n",
            "lab",
            "ARGS=--no-browser --port 8899",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.strip().endswith("-m addnorm_lib._lab --no-browser --port 8899")


@pytest.mark.parametrize("shell", ["/bin/bash", "/usr/bin/zsh"])
def test_the_terminals_read_the_users_rc_then_activate_the_venv(shell, tmp_path):
    terminal = _lab.terminal_shell(shell, tmp_path / "venv")
    assert shell in terminal.command and terminal.command[-1] == "-i"
    (rc,) = terminal.files.values()
    users, activates = rc.index("$HOME/."), rc.index("/venv/bin/activate")
    assert users < activates


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request(port: int, path: str, method: str = "GET") -> dict:
    url = f"http://127.0.0.1:{port}{path}"
    headers = {"Authorization": f"token {TOKEN}"}
    asked = urllib.request.Request(url, method=method, headers=headers)
    with urllib.request.urlopen(asked, timeout=10) as answer:
        return json.loads(answer.read() or b"{}")


def wait_for_server(port: int, server: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, "the lab server exited"
        try:
            request(port, "/api/status")
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("the lab server did not answer")


def terminal_output(port: int, name: str, line: str, until: str, seconds: float) -> str:
    """What the terminal prints after ``line`` is typed into it, up to ``until``."""
    url = f"ws://127.0.0.1:{port}/terminals/websocket/{name}?token={TOKEN}"
    connection = websocket.create_connection(url, timeout=seconds)
    printed, deadline = "", time.monotonic() + seconds
    try:
        connection.send(json.dumps(["stdin", line + "\r"]))
        while until not in printed and time.monotonic() < deadline:
            kind, *content = json.loads(connection.recv())
            if kind == "stdout":
                printed += content[0]
    except websocket.WebSocketTimeoutException:
        pass
    finally:
        connection.close()
    return printed


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_a_lab_terminal_runs_the_course_python_even_if_the_rc_resets_path(tmp_path):
    """As ``make lab ARGS=...`` would: as root here, from a terminal whose PATH has no course
    Python, for a user whose ~/.bashrc sets a PATH of its own."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(RESETS_PATH)
    port = free_port()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "SHELL": shutil.which("bash"),
        "LANG": "C.UTF-8",
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    arguments = [
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={TOKEN}",
    ]
    server = subprocess.Popen(
        [str(VENV / "bin" / "python"), "-m", "addnorm_lib._lab", *arguments],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_for_server(port, server, 30)
        name = request(port, "/api/terminals", method="POST")["name"]
        printed = terminal_output(port, name, "which python", "/python\r\n", 10)
        assert "user rc read" in printed  # the user's rc ran, and reset PATH
        assert str(VENV / "bin" / "python") in printed, printed
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
