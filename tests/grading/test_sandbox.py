"""The sandbox stage, without starting a kernel: the kernelspec's command line, the environments,
the folders. tests/grading/test_bubblewrap.py runs processes inside the sandbox,
test_cgroups.py inside a cgroup, and test_hostile_sandbox.py attacks the whole grader.
"""

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from addnorm_lib.grading import _launch, bubblewrap, cgroups, sandbox
from addnorm_lib.grading.settings import Settings
from tests.grading.test_pipeline import as_nobody
from tests.grading.test_pipeline import nobody_folder as nobody_folder  # a fixture
from tests.needs import needs

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


@needs("cgroups", cgroups.cgroup_problem())
def test_each_kernel_gets_a_cgroup_that_goes_with_it(tmp_path, folders):
    opened = sandbox.Sandbox(Settings(), tmp_path, None, None)
    with opened.kernel(folders):
        procs = [Path(p) for p in kernelspec(folders)[5:] if p.endswith("cgroup.procs")]
        assert procs and all(path.exists() for path in procs)
    assert not any(path.parent.exists() for path in procs)


# ----------------------------------------------------------------------------------------------
# The exchange's share: each submission's tmpfs, the watcher, the room check, removing leftovers


def write_files(folder: Path, count: int, size: int = 2**20) -> int:
    """Write ``count`` files of ``size`` bytes into ``folder``; how many it could."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        try:
            (folder / f"f{n}").write_bytes(b"x" * size)
        except OSError:
            return n
    return count


def test_the_exchanges_rules_count_bytes_entries_depth_and_follow_no_link(tmp_path):
    rules = sandbox.ExchangeRules(max_bytes=4 * 2**20, max_entries=100, max_depth=3)
    exchange = tmp_path / "exchange"
    write_files(exchange / "observations", 3)
    (exchange / "usr").symlink_to("/usr")  # a link is one entry, its target not walked
    assert sandbox.exchange_breach(exchange, rules) is None
    (exchange / "a" / "b" / "c").mkdir(parents=True)
    assert sandbox.exchange_breach(exchange, rules) is None  # folders three levels deep
    (exchange / "a" / "b" / "c" / "d").mkdir()
    assert sandbox.exchange_breach(exchange, rules) == "folders more than 3 levels deep"
    (exchange / "a" / "b" / "c" / "d").rmdir()
    write_files(exchange / "observations", 5)
    assert sandbox.exchange_breach(exchange, rules) == "more than 4 MiB"
    many = sandbox.ExchangeRules(max_bytes=2**30, max_entries=5)
    assert sandbox.exchange_breach(exchange, many) == "more than 5 files and folders"


def test_a_sandbox_describes_its_seccomp_filter_and_the_exchanges_share(tmp_path):
    described = box(tmp_path).describe()
    assert described["seccomp"].startswith("filter") and "--exchange-mb" not in described
    assert described["exchange"] == "64 MiB per submission: watched every 0.1 s (best-effort)"
    capped = sandbox.Sandbox(Settings(exchange_mb=8), tmp_path, None, None, tmpfs=True)
    assert capped.describe()["exchange"].startswith("8 MiB per submission: a tmpfs of its own")
    unsandboxed = box(tmp_path, problem="--no-sandbox was given").describe()
    assert unsandboxed["seccomp"] == unsandboxed["exchange"] == "none: --no-sandbox was given"


NEEDS_MOUNT = needs("a tmpfs of its own per submission", sandbox.tmpfs_problem())


@NEEDS_MOUNT
@pytest.mark.parametrize("capped", [True, False], ids=["own-tmpfs", "shared-base"])
def test_a_kernel_that_fills_its_share_fills_only_its_own_tmpfs(tmp_path, capped):
    """The red team's finding, as root: the run folder in a small /dev/shm (here an 8 MiB tmpfs),
    one submission fills what it can of its exchange. With a tmpfs per submission its neighbour
    still writes its records; without (the control), the neighbour gets ENOSPC."""
    shm = tmp_path / "shm"
    shm.mkdir()
    sandbox.mount_tmpfs(shm, 8 * 2**20, 1024)
    try:
        settings = Settings(exchange_mb=1, notebook_mb=1, output_mb=1)  # a 5 MiB tmpfs each
        opened = sandbox.Sandbox(settings, shm, None, None, tmpfs=capped)
        with opened.submission() as hostile, opened.submission() as honest:
            written = write_files(hostile.exchange / "flood", 64)
            records = write_files(honest.observations / "records", 1)
        assert not list(shm.iterdir())  # unmounted and removed
    finally:
        sandbox.unmount(shm)
    assert (written, records) == ((5, 1) if capped else (8, 0))


WRITER = """
import os, sys, time
folder, removed = os.path.join(sys.argv[1], "flood"), sys.argv[2] == "removed"
os.mkdir(folder)
kept = []
for n in range(64):
    path = os.path.join(folder, f"f{n}")
    file = open(path, "wb")
    file.write(b"x" * 2**20)
    file.flush()
    if removed:  # out of the walk's sight, still taking space
        os.remove(path)
        kept.append(file)
    else:
        file.close()
    time.sleep(0.005)  # 64 MiB in a third of a second: a few of the watcher's walks
with open(os.path.join(folder, "done"), "w"):
    pass
"""


@pytest.mark.parametrize("files", ["files", "removed"], ids=["files", "removed-but-open"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["watched", "unsandboxed"])
def test_the_watcher_stops_a_kernel_that_writes_past_its_share(tmp_path, folders, sandboxed, files):
    """A process of the submission (marked as its kernel's are) writes 64 MiB in 1 MiB files
    into the exchange, its share 4 MiB, or the same into files it removes and keeps open (no
    walk sees them): it is killed within a walk or so, and the kernel's exit says why.
    Unsandboxed (the control: nothing is capped there) it writes them all."""
    settings = Settings(exchange_mb=4)
    problem = None if sandboxed else "--no-sandbox was given"
    opened = sandbox.Sandbox(settings, tmp_path, problem, "not in this test")
    env = {**os.environ, sandbox.RUN_MARKER: str(folders.workdir)}
    stopped = contextlib.nullcontext() if not sandboxed else pytest.raises(sandbox.ExchangeOverflow)
    with stopped as raised, opened.kernel(folders):
        command = [sys.executable, "-c", WRITER, folders.exchange, files]
        writer = subprocess.run(command, env=env)
    finished = (folders.exchange / "flood" / "done").exists()
    if sandboxed:
        assert writer.returncode == -signal.SIGKILL and not finished
        assert "wrote more than 4 MiB into the grader's exchange folder" in str(raised.value)
    else:
        assert writer.returncode == 0 and finished


def test_the_run_folder_goes_where_every_parallel_share_fits(monkeypatch, tmp_path):
    """/dev/shm where it has room for every share (and the watcher's margin); else a folder on
    disk; else one line that says what to do."""
    free = {str(sandbox.SHARED_MEMORY): 64 * 2**20, str(tmp_path): 2**40}
    monkeypatch.setattr(sandbox, "free_bytes", lambda folder: free[str(folder)])
    monkeypatch.setattr(sandbox, "short_temp_base", lambda: str(tmp_path))
    settings = Settings(jobs=4, exchange_mb=8)
    watched = sandbox.needed_room(settings, "watched")
    assert watched > 4 * (8 + sandbox.private_mb(settings)) * 2**20
    assert sandbox.needed_room(settings, "tmpfs") == 0  # each submission has its own
    assert sandbox.run_folder_base(sandbox.needed_room(settings, "tmpfs")) == "/dev/shm"
    assert sandbox.run_folder_base(watched) == str(tmp_path)  # 64 MiB is not enough
    free[str(tmp_path)] = 2**20
    with pytest.raises(sandbox.NoRoom) as no_room:
        sandbox.run_folder_base(watched)
    message = str(no_room.value)
    assert "\n" not in message and "--jobs" in message and "--exchange-mb" in message
    assert "/dev/shm has 64 MiB" in message


REMOVE_AS_NOBODY = """
import json, subprocess
from pathlib import Path
from addnorm_lib.grading.sandbox import remove_tree

outside = Path("outside.txt")
outside.write_text("the grader's")
outside.chmod(0o600)


def leftovers(root):
    '''What a kernel can leave: folders of mode 000, 0100 and 0200, a read-only file, a link
    out, the top folder read-only.'''
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "file").write_text("x")
    (root / "a" / "b" / "file").chmod(0o400)
    (root / "a" / "b" / "out").symlink_to(outside.resolve())
    for name, mode in (("x-only", 0o100), ("w-only", 0o200)):
        (root / name / "inside").mkdir(parents=True)
        (root / name).chmod(mode)
    (root / "a" / "b").chmod(0)
    (root / "a").chmod(0)
    root.chmod(0o500)


plain, fixed = Path("plain").absolute(), Path("fixed").absolute()
leftovers(plain)
subprocess.run(["rm", "-rf", "--one-file-system", "--", str(plain)], capture_output=True)
leftovers(fixed)
remove_tree(fixed)
print(json.dumps({
    "plain": plain.exists(), "fixed": fixed.exists(),
    "outside": [outside.read_text(), oct(outside.stat().st_mode & 0o777)],
}))
"""


def test_remove_tree_removes_what_a_kernel_left_as_the_same_unprivileged_user(nobody_folder):
    """As the user nobody (the kernel's files are the grader's user's, whose permissions apply):
    ``rm -rf``, the removal before the fix, leaves a tree with a mode-000 folder; remove_tree
    removes it all, and follows no link."""
    python, folder = nobody_folder
    completed = as_nobody(python, folder, "-c", REMOVE_AS_NOBODY, folder)
    assert completed.returncode == 0, completed.stderr[-2000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    assert found == {"plain": True, "fixed": False, "outside": ["the grader's", "0o600"]}
    assert not completed.stderr  # no warning: everything went
