"""The tree stays clean under ruff (configuration in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_check_passes():
    completed = subprocess.run([str(RUFF), "check", "--no-cache", str(ROOT)], capture_output=True,
                               text=True, check=False)  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_ruff_format_is_applied():
    folders = [str(ROOT / name) for name in ("addnorm_lib", "tests", "benchmarks")]
    completed = subprocess.run([str(RUFF), "format", "--check", "--no-cache", *folders],
                               capture_output=True, text=True, check=False)  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
