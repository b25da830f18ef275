"""`make test` provisions the system packages the suite needs, or says in one line what to run.

The provisioner (addnorm_lib/_provision.py) is tested with stand-ins for PATH, root and apt-get,
then end to end with a fake apt-get on a PATH that has no chromium. A waived browser suite is
reported in pytest's summary with its reason.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from addnorm_lib import _provision
from addnorm_lib._provision import NEEDS, SystemNeed, missing, provision
from tests.conftest import ROOT, run_python

CHROMIUM = next(need for need in NEEDS if need.command == "chromium")
UNSHARE = next(need for need in NEEDS if need.command == "unshare")


class FakeSystem:
    """PATH as a set of commands, and an apt-get that installs (or fails to) what it is asked."""

    def __init__(
        self, present=("apt-get", "unshare", "setpriv", "bwrap"), apt_fails=False, works=True
    ):
        self.present, self.apt_fails, self.works = set(present), apt_fails, works
        self.commands = []

    def which(self, command):
        return f"/usr/bin/{command}" if command in self.present else None

    def run(self, command, **kwargs):
        self.commands.append(command)
        if command[:2] == ["apt-get", "install"] and self.works and not self.apt_fails:
            self.present |= {need.command for need in NEEDS if need.package in command[3:]}
        return subprocess.CompletedProcess(command, 100 if self.apt_fails else 0)


def run_provision(system, is_root=True, env=None, capsys=None):
    status = provision(env=env or {}, which=system.which, is_root=is_root, run=system.run)
    return status, capsys.readouterr().err if capsys else ""


def test_nothing_missing_installs_nothing_and_says_nothing(capsys):
    system = FakeSystem(present={"apt-get", "chromium", "unshare", "setpriv", "bwrap"})
    assert run_provision(system, capsys=capsys) == (0, "")
    assert system.commands == []


def test_root_with_apt_get_installs_the_missing_package(capsys):
    system = FakeSystem()
    status, said = run_provision(system, capsys=capsys)
    assert status == 0
    assert system.commands == [["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]]
    assert "installing chromium with apt-get" in said and "ADDNORM_SKIP_BROWSER=1" in said


def test_packages_are_installed_once_for_several_commands(capsys):
    system = FakeSystem(present={"apt-get", "chromium", "bwrap"})  # unshare, setpriv: util-linux
    assert run_provision(system, capsys=capsys)[0] == 0
    assert system.commands[-1] == ["apt-get", "install", "-y", "util-linux"]


def test_the_opt_out_waives_only_the_browser(capsys):
    system = FakeSystem(present={"apt-get", "setpriv", "bwrap"})
    status, _ = run_provision(system, env={"ADDNORM_SKIP_BROWSER": "1"}, capsys=capsys)
    assert status == 0 and system.commands[-1] == ["apt-get", "install", "-y", "util-linux"]
    assert missing(NEEDS, {"ADDNORM_SKIP_BROWSER": "0"}, FakeSystem().which) == [CHROMIUM]


@pytest.mark.parametrize(
    "is_root, present",
    [
        (False, {"apt-get", "unshare", "setpriv", "bwrap"}),
        (True, {"unshare", "setpriv", "bwrap"}),
    ],
)
def test_without_root_or_apt_get_one_line_names_the_command(is_root, present, capsys):
    system = FakeSystem(present=present)
    status, said = run_provision(system, is_root=is_root, capsys=capsys)
    assert status == 1 and system.commands == []
    (line,) = said.strip().splitlines()
    assert line.startswith("error:") and "`sudo apt-get install -y chromium`" in line
    assert "`ADDNORM_SKIP_BROWSER=1 make test`" in line


def test_a_need_that_cannot_be_waived_offers_no_opt_out(capsys):
    system = FakeSystem(present={"chromium", "bwrap"})
    status, said = run_provision(system, is_root=False, capsys=capsys)
    (line,) = said.strip().splitlines()
    assert status == 1 and "`sudo apt-get install -y util-linux`" in line
    assert "ADDNORM_SKIP_BROWSER" not in line and UNSHARE.why in line


@pytest.mark.parametrize(
    "system",
    [FakeSystem(apt_fails=True), FakeSystem(works=False)],
    ids=["apt-get fails", "installed but still missing"],
)
def test_a_failed_install_is_an_error(system, capsys):
    status, said = run_provision(system, capsys=capsys)
    assert status == 1
    assert said.strip().splitlines()[-1].startswith("error: installing chromium failed")


def test_every_need_names_its_package_and_reason():
    assert all(isinstance(need, SystemNeed) and need.package and need.why for need in NEEDS)
    assert all(bool(need.opt_out) == bool(need.skips) for need in NEEDS)


FAKE_APT_GET = """#!{python}
import pathlib, sys
folder = pathlib.Path(sys.argv[0]).parent
with open(folder / "apt-get.log", "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "install":
    for name in sys.argv[3:]:
        tool = folder / name
        tool.write_text("#!/bin/sh\\n")
        tool.chmod(0o755)
"""


def test_make_tests_provisioner_installs_chromium_from_a_path_without_it(tmp_path):
    """End to end: the module as `make test` runs it, on a PATH with a fake apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    apt_get = bin_dir / "apt-get"
    apt_get.write_text(FAKE_APT_GET.format(python=sys.executable))
    apt_get.chmod(0o755)
    for command in ("unshare", "setpriv", "bwrap"):  # present, never run
        (bin_dir / command).write_text("#!/bin/sh\n")
        (bin_dir / command).chmod(0o755)
    env = {"PATH": str(bin_dir), "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    completed = run_python("-m", "addnorm_lib._provision", cwd=ROOT, env=env)
    if os.geteuid() == 0:
        assert completed.returncode == 0, completed.stderr
        log = (bin_dir / "apt-get.log").read_text().splitlines()
        assert log == ["update", "install -y chromium"]
        assert (bin_dir / "chromium").is_file()
    else:  # not root: nothing is installed, and one line says what to run
        assert completed.returncode == 1 and not (bin_dir / "apt-get.log").exists()
        assert "sudo apt-get install -y chromium" in completed.stderr


def run_browser_tests(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "ADDNORM"))}
    options = ["-p", "no:cacheprovider", "-p", "no:xdist", "-q"]
    return run_python(
        "-m", "pytest", "tests/book/test_browser.py", *options, cwd=ROOT, env={**clean, **env}
    )


def test_a_waived_browser_suite_is_reported_with_its_reason():
    completed = run_browser_tests({"ADDNORM_SKIP_BROWSER": "1"})
    assert completed.returncode == 0, completed.stdout[-2000:]
    summary = completed.stdout[completed.stdout.index("short test summary") :]
    assert "SKIPPED [" in summary and "ADDNORM_SKIP_BROWSER=1" in summary, summary


def test_without_chromium_the_browser_tests_fail_and_say_how_to_install_it(tmp_path):
    python_only = tmp_path / "bin"
    python_only.mkdir()
    completed = run_browser_tests({"PATH": str(python_only)})
    assert completed.returncode != 0
    assert "apt-get install -y chromium" in completed.stdout, completed.stdout[-2000:]
    assert "ADDNORM_SKIP_BROWSER=1" in completed.stdout


def test_ci_runs_make_test_and_nothing_else():
    """CI runs what a developer runs, with CI=true: the sandbox suites then fail where the
    sandbox is missing instead of skipping (tests/needs.py)."""
    commands = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert commands == ["export CI=true", "make test"]


def test_the_module_runs_with_the_standard_library_only():
    """`make test` runs it with the system's Python, before the virtual environment exists."""
    source = Path(_provision.__file__).read_text()
    imports = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert "argparse" in imports and "numpy" not in sys.stdlib_module_names
    assert imports <= set(sys.stdlib_module_names) | {"__future__"}, imports


def test_a_missing_bubblewrap_is_installed_for_the_grader(capsys):
    system = FakeSystem(present={"apt-get", "chromium", "unshare", "setpriv"})
    status, said = run_provision(system, capsys=capsys)
    assert status == 0 and system.commands[-1] == ["apt-get", "install", "-y", "bubblewrap"]
    assert "installing bubblewrap" in said and "sandbox" in said
