"""``make lab``: JupyterLab on the exercises, whose terminals run the course's Python.

    python -m addnorm_lib._lab [JUPYTER LAB OPTIONS ...]     # make lab ARGS="--no-browser"

Run with the course's Python (``.venv/bin/python``), it starts ``jupyter lab exercises`` with
the options given, and ``--allow-root`` when run as root (JupyterLab refuses root without it).

Putting the venv first on PATH is not enough for the lab's terminals: JupyterLab starts a login
shell when it has no terminal of its own, and a login shell's ``/etc/profile`` (Debian's sets
PATH outright), or the user's ``~/.bashrc``, may put another Python first. So the terminals run
the user's shell with an rc file of the course's that reads the user's own rc file first and
activates the venv last (bash: ``--rcfile``; zsh: ``ZDOTDIR``; other shells keep the venv-first
PATH they inherit). The shell command is a jupyter_server setting
(``ServerApp.terminado_settings``) in a configuration file of the course's, written into the
venv (``.venv/share/addnorm/lab/``) and given to the lab with ``--config``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[1]
# bash reads this instead of ~/.bashrc (Debian's bash still reads /etc/bash.bashrc first).
BASHRC = """\
# The course's terminals (make lab): your own ~/.bashrc, then the course's Python first on PATH.
if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
. {activate}
"""
# zsh reads $ZDOTDIR/.zshrc: this one, which reads the user's own, then activates the venv.
ZSHRC = """\
# The course's terminals (make lab): your own ~/.zshrc, then the course's Python first on PATH.
ZDOTDIR="$HOME"
if [ -f "$HOME/.zshrc" ]; then . "$HOME/.zshrc"; fi
. {activate}
"""


@dataclass(frozen=True)
class TerminalShell:
    """How the lab's terminals start: the command, and the rc files it needs (path -> text)."""

    command: list[str]
    files: dict[Path, str]


def quoted(path: Path) -> str:
    """A path as one word of a POSIX shell line, in single quotes."""
    return "'" + str(path).replace("'", "'\\''") + "'"


def terminal_shell(shell: str, venv: Path) -> TerminalShell:
    """The terminals' command for the user's ``shell`` ($SHELL): an interactive shell that reads
    the user's rc file, then activates ``venv``. A shell other than bash and zsh starts as it
    is (it inherits the venv-first PATH that :func:`lab_environment` gives the server)."""
    activate = quoted(venv / "bin" / "activate")
    state = venv / "share" / "addnorm" / "lab"
    name = Path(shell).name
    if name == "bash":
        rc = state / "bashrc"
        return TerminalShell(
            [shell, "--rcfile", str(rc), "-i"], {rc: BASHRC.format(activate=activate)}
        )
    if name == "zsh":
        zshrc = state / "zsh" / ".zshrc"
        command = ["env", f"ZDOTDIR={zshrc.parent}", shell, "-i"]
        return TerminalShell(command, {zshrc: ZSHRC.format(activate=activate)})
    return TerminalShell([shell, "-i"], {})


def server_config(terminal: TerminalShell) -> dict:
    """The jupyter_server configuration that starts the lab's terminals with ``terminal``."""
    return {"ServerApp": {"terminado_settings": {"shell_command": terminal.command}}}


def config_path(venv: Path) -> Path:
    """The course's jupyter_server configuration file, given to the lab with ``--config``."""
    return venv / "share" / "addnorm" / "lab" / "jupyter_server_config.json"


def install(venv: Path, shell: str) -> Path:
    """Write the terminals' rc files and the server's configuration into ``venv``; its path."""
    terminal = terminal_shell(shell, venv)
    files = {**terminal.files, config_path(venv): json.dumps(server_config(terminal), indent=1)}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return config_path(venv)


def lab_command(venv: Path, arguments: list[str], uid: int) -> list[str]:
    """``jupyter lab exercises`` with the course's configuration, ``--allow-root`` for root,
    then the given options."""
    root = ["--allow-root"] if uid == 0 else []
    jupyter = str(venv / "bin" / "jupyter")
    exercises, config = COURSE_ROOT / "exercises", config_path(venv)
    return [jupyter, "lab", str(exercises), f"--config={config}", *root, *arguments]


def lab_environment(venv: Path, environ: dict[str, str]) -> dict[str, str]:
    """The server's environment: the venv first on PATH, and marked active."""
    path = environ.get("PATH", "")
    return {**environ, "PATH": f"{venv / 'bin'}{os.pathsep}{path}", "VIRTUAL_ENV": str(venv)}


def main(argv: list[str] | None = None) -> int:
    """Install the terminals' setting into this Python's venv, then become JupyterLab."""
    arguments = sys.argv[1:] if argv is None else argv
    venv = Path(sys.prefix)
    install(venv, os.environ.get("SHELL") or "/bin/bash")
    command = lab_command(venv, arguments, os.geteuid())
    os.chdir(COURSE_ROOT)
    os.execve(command[0], command, lab_environment(venv, dict(os.environ)))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
