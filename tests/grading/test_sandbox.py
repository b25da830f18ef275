"""The sandbox stage, without starting a kernel: the kernelspec's command line, the environments,
the folders. tests/grading/test_bubblewrap.py runs processes inside the sandbox,
test_cgroups.py inside a cgroup, and test_hostile_sandbox.py attacks the whole grader.
"""

import json
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from addnorm_lib.grading import _launch, bubblewrap, cgroups, sandbox
from addnorm_lib.grading.settings import Settings

PLAIN_KERNEL = [sys.executable, "-m", "addnorm_lib.grading._graded_kernel"]


def box(tmp_path, problem=None, group_problem="not in this test") -> sandbox.Sandbox:
    return sandbox.Sandbox(Settings(jobs=2), tmp_path, problem, group_problem)


@pytest.fixture
def folders(tmp_path) -> sandbox.SubmissionFolders:
    made = sandbox.SubmissionFolders(tmp_path / "submission-1")
    made.workdir.mkdir()
    made.make()
    return made


def kernelspec(folders) -> list[str]:
    spec = folders.private / "kernels" / sandbox.KERNEL_NAME / "kernel.json"
    return json.loads(spec.read_text())["argv"]


def test_the_private_folder_is_the_graders_alone_and_apart_from_the_kernels(folders):
    assert stat.S_IMODE(folders.private.stat().st_mode) == 0o700
    for kernel_side in (folders.exchange, folders.home, folders.observations):
        assert not kernel_side.is_relative_to(folders.private)
        assert not folders.private.is_relative_to(kernel_side)


def test_a_sandboxed_kernel_starts_in_bubblewrap_sharing_only_the_exchange(tmp_path, folders):
    with box(tmp_path).kernel(folders) as name:
        argv = kernelspec(folders)
    launcher = [sys.executable, "-I", "-S", _launch.__file__]
    assert name == sandbox.KERNEL_NAME and argv[:4] == launcher
    argv = argv[argv.index("bwrap") :]
    assert argv[-5:] == [*PLAIN_KERNEL, "-f", "{connection_file}"]
    writable = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--bind"]
    assert writable == [str(folders.exchange.resolve())]
    assert str(folders.private) not in argv  # the graded notebook's folder is not even named


def test_with_a_cgroup_the_launcher_joins_it_before_bubblewrap_starts(tmp_path, folders):
    procs = [tmp_path / "memory" / "cgroup.procs", tmp_path / "pids" / "cgroup.procs"]
    argv = sandbox.sandboxed_argv(Settings(), folders, procs, tmp_path / "seccomp.bpf")
    assert argv[:5] == [sys.executable, "-I", "-S", _launch.__file__, str(folders.exchange)]
    assert argv[5:7] == ["--seccomp", str(tmp_path / "seccomp.bpf")]
    assert argv[7:10] == [*map(str, procs), "--"] and argv[10] == "bwrap"


def test_every_sandboxed_kernel_gets_the_run_folders_seccomp_filter(tmp_path, folders):
    """The launcher opens the filter (and joins a new keyring); bubblewrap loads it from the
    descriptor the launcher fills in. Unsandboxed kernels get neither."""
    with box(tmp_path).kernel(folders):
        argv = kernelspec(folders)
    filter_file = tmp_path / sandbox.SECCOMP_FILE
    assert filter_file.stat().st_size > 0  # written at the first kernel: a BPF program
    launcher, bwrap = argv[: argv.index("bwrap")], argv[argv.index("bwrap") :]
    assert launcher[launcher.index("--seccomp") + 1] == str(filter_file)
    assert bwrap[bwrap.index("--seccomp") + 1] == _launch.SECCOMP_FD
    assert bwrap.index("--seccomp") < bwrap.index("--")  # an option of bwrap's, not the kernel's
    with box(tmp_path, problem="--no-sandbox was given").kernel(folders_again(folders)):
        assert "--seccomp" not in kernelspec(folders)


def folders_again(folders):
    """The same submission's folders, its kernelspec removed (to install another)."""
    spec = folders.private / "kernels" / sandbox.KERNEL_NAME
    (spec / "kernel.json").unlink()
    spec.rmdir()
    (folders.private / "kernels").rmdir()
    return folders


def test_without_the_sandbox_the_kernel_starts_plainly(tmp_path, folders):
    with box(tmp_path, problem="--no-sandbox was given").kernel(folders):
        argv = kernelspec(folders)
    assert argv[-4:] == ["--", *PLAIN_KERNEL, "-f", "{connection_file}"][-4:]
    assert "bwrap" not in argv and argv[argv.index("--") + 1 :] == [
        *PLAIN_KERNEL,
        "-f",
        "{connection_file}",
    ]


def test_no_sandbox_is_a_choice_the_instructor_makes_explicitly():
    assert sandbox.sandbox_problem(Settings(no_sandbox=True)) == "--no-sandbox was given"
    assert sandbox.sandbox_problem(Settings()) == bubblewrap.bubblewrap_problem()


def test_the_kernel_gets_only_the_variables_the_grader_chooses(monkeypatch, folders):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the instructor's")
    monkeypatch.setattr(sandbox.os, "cpu_count", lambda: 8)
    env = sandbox.kernel_environment(Settings(jobs=2), folders)
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["HOME"] == str(folders.home) and env["MPLBACKEND"] == "Agg"
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "4"  # 8 cores, 2 kernels
    argv = sandbox.sandboxed_argv(Settings(jobs=2), folders, [], folders.workdir / "seccomp.bpf")
    assert "--clearenv" in argv and argv.index("--clearenv") < argv.index("--setenv")
    set_names = {argv[i + 1] for i, arg in enumerate(argv) if arg == "--setenv"}
    assert set_names == set(env)


def test_pytest_gets_the_graders_environment_less_its_own_settings(monkeypatch, tmp_path, folders):
    monkeypatch.setenv("ADDNORM_OBSERVATIONS", "/the/graders")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    env = box(tmp_path).pytest_environment(folders)
    assert env["ADDNORM_OBSERVATIONS"] == str(folders.observations)
    assert "PYTEST_XDIST_WORKER" not in env and env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert env["JUPYTER_PATH"] == str(folders.private)


def test_group_limits_give_each_job_its_share(monkeypatch):
    monkeypatch.setattr(sandbox.os, "cpu_count", lambda: 8)
    limits = sandbox.group_limits(Settings(jobs=2, memory_mb=1024))
    assert limits == cgroups.GroupLimits(2**30, sandbox.MAX_PROCESSES, 4.0)
    assert sandbox.group_limits(Settings(jobs=16)).cpus == 1.0


def test_a_sandbox_owns_a_short_private_run_folder_for_its_lifetime(monkeypatch, tmp_path):
    long_tmp = tmp_path / ("a-long-temporary-folder-" * 4)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    with sandbox.open_sandbox(Settings(no_sandbox=True)) as opened:
        run_folder = opened.run_folder
        assert stat.S_IMODE(run_folder.stat().st_mode) == 0o700
        # an IPC socket's path (at most 107 bytes) fits with room to spare
        assert len(str(run_folder / "submission-12345678" / "exchange" / "kernel-99999")) < 100
        assert not opened.isolated and opened.describe()["sandbox"].startswith("none:")
    assert not run_folder.exists()


@pytest.mark.skipif(cgroups.cgroup_problem() is not None, reason="no cgroups for this process")
def test_each_kernel_gets_a_cgroup_that_goes_with_it(tmp_path, folders):
    opened = sandbox.Sandbox(Settings(), tmp_path, None, None)
    with opened.kernel(folders):
        procs = [Path(p) for p in kernelspec(folders)[5:] if p.endswith("cgroup.procs")]
        assert procs and all(path.exists() for path in procs)
    assert not any(path.parent.exists() for path in procs)
