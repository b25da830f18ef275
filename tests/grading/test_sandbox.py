"""The sandbox, without starting a kernel: what it hides, how a kernel starts, its environment.

The jail is faked where a test only reads the command lines (``isolation`` returns a prefix);
tests/grading/test_warm_kernels.py and test_pipeline.py start real jailed kernels.
"""

import json
import sys
import tempfile
from pathlib import Path

import pytest

from addnorm_lib.grading import _warm_kernels, sandbox
from addnorm_lib.grading.settings import COURSE_ROOT, Settings

FAKE_PREFIX = ["unshare", "--mount", "--propagation", "private"]
COLD_KERNEL = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel"]


@pytest.fixture
def no_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation", lambda: [])


@pytest.fixture
def namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation", lambda: FAKE_PREFIX)


def test_the_references_solutions_and_reports_are_hidden(tmp_path):
    source, outdir = tmp_path / "instructor", tmp_path / "out"
    source.mkdir(), outdir.mkdir()
    folders, files = sandbox.hidden_paths(Settings(source=source), outdir)
    for hidden in (sandbox.REFERENCE, COURSE_ROOT / "solutions", COURSE_ROOT / "tests"):
        assert hidden in folders
    assert source in folders and outdir in folders and files == []


def test_every_reference_module_is_under_a_hidden_folder(tmp_path):
    """A new reference module is hidden without anyone listing it."""
    folders, _ = sandbox.hidden_paths(Settings(), tmp_path)
    modules = list(sandbox.REFERENCE.rglob("*.py"))
    assert len(modules) > 5
    for module in modules:
        assert any(module.is_relative_to(folder) for folder in folders), module


def test_without_namespaces_a_kernel_starts_plainly_and_nothing_is_mounted(no_namespaces):
    assert sandbox.kernel_argv(COURSE_ROOT) == [*COLD_KERNEL, "-f", "{connection_file}"]
    assert sandbox.hiding_mounts(Settings(), COURSE_ROOT / "grades") == []


def test_with_namespaces_each_hidden_folder_gets_an_empty_mount(namespaces, tmp_path):
    folders, _ = sandbox.hidden_paths(Settings(), tmp_path)
    mounts = sandbox.hiding_mounts(Settings(), tmp_path)
    assert mounts == [["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(p)] for p in folders]


def test_a_jailed_kernel_hides_the_run_and_cannot_write_the_course(namespaces, tmp_path):
    argv = sandbox.kernel_argv(tmp_path)
    assert argv[: len(FAKE_PREFIX)] == FAKE_PREFIX
    assert argv[-5:] == [*COLD_KERNEL, "-f", "{connection_file}"]
    start = argv.index(sandbox.JAIL[0], len(FAKE_PREFIX))
    assert argv[start : start + len(sandbox.JAIL)] == sandbox.JAIL
    script = argv[argv.index("-c") + 1]
    assert f"mount -t tmpfs -o size=1m none {tmp_path}" in script
    assert f"mount -o remount,bind,ro {COURSE_ROOT}" in script
    assert script.endswith('exec "$@"')


def test_with_a_zygote_the_jailed_kernel_is_a_warm_stand_in(namespaces, tmp_path):
    (tmp_path / sandbox.ZYGOTE_SOCKET).touch()
    argv = sandbox.kernel_argv(tmp_path)
    warm = [sys.executable, "-I", "-S", _warm_kernels.__file__]
    assert argv[:6] == [*warm, "launch", str(tmp_path / sandbox.ZYGOTE_SOCKET)]
    stand_in = [*warm, "standin", _warm_kernels.FD_PLACEHOLDER, "-f", "{connection_file}"]
    assert argv[-len(stand_in) :] == stand_in


def test_kernels_get_the_graders_environment_less_its_own_settings(monkeypatch):
    monkeypatch.setenv("ADDNORM_OBSERVATIONS", "/the/graders")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setattr(sandbox.os, "cpu_count", lambda: 8)
    env = sandbox.kernel_environment(Settings(jobs=2))
    assert "ADDNORM_OBSERVATIONS" not in env and "PYTEST_XDIST_WORKER" not in env
    assert env["LANG"] == "C.UTF-8"
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "4"  # 8 cores, 2 kernels


def test_the_kernelspec_starts_the_graded_kernel(tmp_path):
    sandbox.write_kernelspec(tmp_path / "private", tmp_path)
    spec = json.loads(
        (tmp_path / "private" / "kernels" / sandbox.KERNEL_NAME / "kernel.json").read_text()
    )
    assert spec["argv"] == sandbox.kernel_argv(tmp_path) and spec["language"] == "python"


def test_a_sandbox_owns_a_short_run_folder_for_its_lifetime(monkeypatch, tmp_path):
    long_tmp = tmp_path / ("a-long-temporary-folder-" * 4)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    with sandbox.open_sandbox(Settings(), tmp_path / "out", warm=False) as box:
        run_folder = box.run_folder
        assert run_folder.is_dir()
        assert len(str(run_folder / sandbox.ZYGOTE_SOCKET)) < 108  # a socket path's limit
        assert box.install_kernelspec(run_folder / "private") == sandbox.KERNEL_NAME
        assert box.hiding_mounts() == sandbox.hiding_mounts(Settings(), tmp_path / "out")
    assert not run_folder.exists()


def test_without_namespaces_no_zygote_starts(no_namespaces, tmp_path):
    with sandbox.open_sandbox(Settings(), tmp_path, warm=True) as box:
        assert not box.isolated
        assert not (box.run_folder / sandbox.ZYGOTE_SOCKET).exists()
    assert box.warm_kernels_forked == 0


def test_isolation_is_a_prefix_of_unshare_or_nothing():
    prefix = sandbox.isolation()
    assert prefix == [] or (prefix[0] == "unshare" and "--mount" in prefix)
    assert sandbox.Sandbox(Settings(), Path("out"), Path("run")).isolated == bool(prefix)
