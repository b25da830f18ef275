"""The sandbox suites' requirement: a skip on a developer's machine, a failure under CI=true."""

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tests.needs import require


def test_a_present_requirement_does_nothing(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert require("bubblewrap", None) is None


def test_a_missing_requirement_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs bubblewrap: not installed"):
        require("bubblewrap", "not installed")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require("bubblewrap", "not installed")


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_a_missing_requirement_fails_under_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="needs cgroups: no cgroup2 here"):
        require("cgroups", "no cgroup2 here")


MARKED = textwrap.dedent(
    """
    from tests.needs import needs

    @needs("bubblewrap", "bwrap is not installed")
    def test_marked():
        pass

    @needs("bubblewrap", None)
    def test_present():
        pass
    """
)


@pytest.mark.parametrize(
    ("ci", "outcome"), [("", "1 passed, 1 skipped"), ("true", "1 passed, 1 error")]
)
def test_the_marker_is_acted_on_before_the_test(tmp_path, ci, outcome):
    """The conftest hook reads the marker: the same file skips, or errs (fails its set-up) under
    CI=true."""
    test_file = tmp_path / "test_marked.py"
    test_file.write_text(MARKED)
    options = ("-c", ROOT / "pyproject.toml", "-p", "tests.conftest", "-p", "no:cacheprovider")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *map(str, options), "-q", str(test_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CI": ci},
        check=False,
    )
    assert outcome in completed.stdout, completed.stdout[-2000:]
