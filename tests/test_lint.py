"""The tree stays clean under ruff (configuration in pyproject.toml), with no formatter opt-outs."""

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

RUFF = Path(sys.executable).parent / "ruff"
# The formatter's per-line and per-block opt-outs, written so that this file does not contain one.
PRAGMA = re.compile(r"fmt:\s*(?:skip|off|on)\b")


def test_ruff_check_passes():
    completed = subprocess.run(
        [str(RUFF), "check", "--no-cache", str(ROOT)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_ruff_format_is_applied():
    folders = [str(ROOT / name) for name in ("addnorm_lib", "tests", "benchmarks")]
    completed = subprocess.run(
        [str(RUFF), "format", "--check", "--no-cache", *folders],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_no_file_opts_out_of_the_formatter():
    """ruff format's output is accepted as it is: code that reads badly formatted is reshaped.

    Python files, chapters and notebooks, tracked or about to be (untracked but not ignored).
    """
    command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(
        [*command, "--", "*.py", "*.md", "*.ipynb"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = []
    for name in sorted(set(filter(None, listed.split("\0")))):
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet in the index
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PRAGMA.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "formatter opt-outs; reshape the code instead:\n" + "\n".join(found)
