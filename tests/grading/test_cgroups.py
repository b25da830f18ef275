"""Group limits: the cgroup layouts read from /proc, and real cgroups that cap a process tree.

The end-to-end tests make real cgroups and skip, saying why, where this process cannot.
"""

import subprocess
import sys
import tempfile
import textwrap

import pytest

from addnorm_lib.grading import _launch, cgroups, sandbox
from addnorm_lib.grading.cgroups import GroupLimits
from tests.needs import needs

PROBLEM = cgroups.cgroup_problem()
NEEDS_CGROUPS = needs("cgroups", PROBLEM)

V1_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_CGROUP = "8:pids:/\n4:memory:/container/abc\n1:cpu:/\n0::/\n"


def test_mount_points_and_own_cgroups_are_read_from_proc():
    unified, legacy = cgroups.mount_points(V1_MOUNTINFO)
    assert str(unified) == "/sys/fs/cgroup/unified"
    assert {c: str(p) for c, p in legacy.items()} == {
        "cpu": "/sys/fs/cgroup/cpu",
        "memory": "/sys/fs/cgroup/memory",
        "pids": "/sys/fs/cgroup/pids",
    }
    path, paths = cgroups.own_cgroups(V1_CGROUP)
    assert path == "/" and paths == {"pids": "/", "memory": "/container/abc", "cpu": "/"}


def test_new_cgroups_go_under_this_process_own_not_at_the_root():
    """Under the root, a submission would escape the limits of the grader's own container."""
    _, legacy = cgroups.mount_points(V1_MOUNTINFO)
    _, paths = cgroups.own_cgroups(V1_CGROUP)
    layout = cgroups.legacy_layout(legacy, paths)
    assert str(layout.parents["memory"]) == "/sys/fs/cgroup/memory/container/abc"


def test_a_hierarchy_missing_a_controller_is_no_layout():
    _, legacy = cgroups.mount_points(V1_MOUNTINFO.replace("rw,pids", "rw,freezer"))
    _, paths = cgroups.own_cgroups(V1_CGROUP)
    assert cgroups.legacy_layout(legacy, paths) is None


def test_v2_needs_every_controller_delegated(tmp_path):
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    assert cgroups.unified_layout(tmp_path, "/") is None
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert cgroups.unified_layout(tmp_path, "/").version == 2


def test_limit_files_say_the_same_limits_in_both_versions():
    limits = GroupLimits(memory_bytes=2**30, max_processes=64, cpus=1.5)
    v2, v1 = cgroups.limit_files(2, limits), cgroups.limit_files(1, limits)
    assert v2["memory"]["memory.max"] == v1["memory"]["memory.limit_in_bytes"] == str(2**30)
    assert v2["pids"]["pids.max"] == v1["pids"]["pids.max"] == "64"
    assert v2["cpu"]["cpu.max"] == "150000 100000" and v1["cpu"]["cpu.cfs_quota_us"] == "150000"


def run_in_cgroup(group: cgroups.Cgroup, code: str, timeout: float = 60):
    """Run Python ``code`` in ``group``, joined by the kernel's launcher."""
    launcher = [sys.executable, "-I", "-S", _launch.__file__, tempfile.gettempdir()]
    argv = [*launcher, *map(str, group.procs_files), "--"]
    argv += [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def group():
    made = cgroups.create_cgroup(cgroups.find_layout(), GroupLimits(256 * 2**20, 16, 1.0))
    yield made
    made.remove()


@NEEDS_CGROUPS
def test_the_process_count_is_capped_for_the_whole_tree(group):
    completed = run_in_cgroup(
        group,
        """
        import subprocess
        started = []
        try:
            for _ in range(100):
                started.append(subprocess.Popen(["sleep", "30"]))
        except OSError:
            pass
        print(len(started))
        for process in started:
            process.kill()
        """,
    )
    assert completed.returncode == 0, completed.stderr
    assert 5 <= int(completed.stdout) < 16  # some start; the cap counts this Python too


@NEEDS_CGROUPS
def test_memory_is_capped_for_all_the_processes_together(group):
    """Four children of 100 MiB each fit any per-process cap; together they pass 256 MiB, so
    they cannot all hold their memory at once (the kernel's OOM killer takes some)."""
    completed = run_in_cgroup(
        group,
        """
        import multiprocessing, time
        def hold(ready):
            block = bytearray(100 * 2**20)
            block[::4096] = b"x" * len(block[::4096])
            ready.put(1)
            time.sleep(30)
        if __name__ == "__main__":
            fork = multiprocessing.get_context("fork")
            ready = fork.Queue()
            children = [fork.Process(target=hold, args=(ready,)) for _ in range(4)]
            for child in children:
                child.start()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and sum(c.is_alive() for c in children) == 4:
                if ready.qsize() == 4:
                    break
                time.sleep(0.1)
            time.sleep(0.5)
            print(sum(child.is_alive() for child in children), ready.qsize())
            for child in children:
                child.kill()
        """,
    )
    alive, filled = map(int, completed.stdout.split() or (0, 0))
    assert filled >= 1, f"no child filled its memory, so this shows nothing: {completed.stderr}"
    assert alive < 4, "all four children hold 100 MiB at once: the group's cap did not hold"


@NEEDS_CGROUPS
def test_removing_a_cgroup_kills_what_is_left_in_it(group):
    launcher = [sys.executable, "-I", "-S", _launch.__file__, tempfile.gettempdir()]
    left = subprocess.Popen([*launcher, *map(str, group.procs_files), "--", "sleep", "600"])
    try:
        for _ in range(100):
            if group.pids():
                break
            subprocess.run(["sleep", "0.05"], check=False)
        assert left.pid in group.pids()
        group.remove()
        assert left.wait(timeout=10) != 0 and not group.folders[0].exists()
    finally:
        left.kill()


def test_a_launcher_that_cannot_join_does_not_start_the_command(tmp_path):
    marker = tmp_path / "ran"
    missing = tmp_path / "no-such-cgroup" / "cgroup.procs"
    launcher = [sys.executable, "-I", "-S", _launch.__file__, str(tmp_path)]
    argv = [*launcher, str(missing), "--", "touch", str(marker)]
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert completed.returncode != 0 and "cannot join" in completed.stderr
    assert not marker.exists()


@NEEDS_CGROUPS
def test_files_in_the_run_folder_count_against_the_memory_cap(group):
    """A kernel's exchange lives in the run folder: in memory, its files are charged to the
    kernel's cgroup, so a kernel cannot fill the machine through it (on disk it could)."""
    base = sandbox.run_folder_base()
    if base != str(sandbox.SHARED_MEMORY):
        pytest.skip(f"grading runs live in {base}, not in memory, on this machine")
    with tempfile.TemporaryDirectory(dir=base) as folder:
        completed = run_in_cgroup(
            group,
            f"""
            written = 0
            try:
                with open({folder!r} + "/flood", "wb") as file:
                    for _ in range(40):
                        file.write(b"x" * 10 * 2**20)
                        file.flush()
                        written += 10
            except OSError:
                pass
            print(written)
            """,
        )
        written = int(completed.stdout or 0)  # killed by the OOM killer: nothing printed
    assert written < 256, f"wrote {written} MiB into memory past the group's 256 MiB cap"
    assert completed.returncode != 0 or written >= 10, completed.stderr


# ----------------------------------------------------------------------------------------------
# A delegated cgroup v2 scope, as `systemd-run --user --scope -p Delegate=yes` gives a user: a
# fake cgroup2 tree in a folder (the kernel's rules are not enforced there; the test checks what
# the grader writes where).
SCOPE = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
GRADER_PID = 4242


def fake_scope(root, controllers="cpu memory pids", procs=str(GRADER_PID)):
    """(mountinfo, /proc/self/cgroup text, scope folder): a cgroup2 mount at ``root`` and this
    process alone in a delegated scope that offers ``controllers``."""
    scope = root / SCOPE.lstrip("/")
    scope.mkdir(parents=True)
    (scope / "cgroup.controllers").write_text(controllers + "\n")
    (scope / "cgroup.subtree_control").write_text("")
    (scope / "cgroup.procs").write_text(procs + "\n")
    mountinfo = f"30 23 0:27 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    return mountinfo, f"0::{SCOPE}\n", scope


@pytest.mark.parametrize("marked", [True, False])
def test_the_graders_own_scope_is_split_and_only_with_the_marker(tmp_path, marked):
    """Marked (the grader re-ran itself there), the scope's one process moves into a leaf and the
    controllers are enabled for the scope's children, where submissions' cgroups then go;
    unmarked (a terminal's scope, say), nothing is touched and there is no layout."""
    mountinfo, cgroup, scope = fake_scope(tmp_path)
    layout = cgroups.layout_from(mountinfo, cgroup, marked, GRADER_PID)
    if not marked:
        assert layout is None and not (scope / cgroups.GRADER_LEAF).exists()
        assert (scope / "cgroup.subtree_control").read_text() == ""
        return
    assert layout == cgroups.Layout(2, dict.fromkeys(cgroups.CONTROLLERS, scope))
    assert (scope / cgroups.GRADER_LEAF / "cgroup.procs").read_text() == str(GRADER_PID)
    assert (scope / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    made = cgroups.create_cgroup(layout, GroupLimits(2**30, 64, 1.0), name="submission")
    assert made.folders == (scope / "submission",)  # beside the grader's leaf, not inside it
    assert (scope / "submission" / "memory.max").read_text() == str(2**30)


def test_a_split_scope_is_found_again_from_the_leaf(tmp_path):
    """The grader's later processes (and its cached layout) see it from the leaf: the layout is
    the scope above, and nothing is split again."""
    mountinfo, _, scope = fake_scope(tmp_path)
    (scope / cgroups.GRADER_LEAF).mkdir()
    (scope / "cgroup.subtree_control").write_text("cpu memory pids\n")  # as the kernel shows it
    leaf = f"0::{SCOPE}/{cgroups.GRADER_LEAF}\n"
    layout = cgroups.layout_from(mountinfo, leaf, False, GRADER_PID)
    assert layout is not None and layout.parents["memory"] == scope


@pytest.mark.parametrize(
    ("controllers", "procs", "said"),
    [
        ("memory pids", str(GRADER_PID), "delegates no cpu controller"),
        ("cpu memory pids", f"{GRADER_PID}\n77", "holds other processes"),
    ],
)
def test_a_scope_that_cannot_be_split_is_left_alone_and_says_why(
    tmp_path, controllers, procs, said
):
    mountinfo, cgroup, scope = fake_scope(tmp_path, controllers, procs)
    assert said in cgroups.scope_problem(scope, GRADER_PID)
    assert cgroups.layout_from(mountinfo, cgroup, True, GRADER_PID) is None
    assert not (scope / cgroups.GRADER_LEAF).exists()
    assert cgroups.scope_problem(*fake_scope(tmp_path / "ok")[2:], GRADER_PID) is None


def test_the_rerun_is_the_grader_in_a_delegated_scope_marked_once():
    command = cgroups.scope_command(["subs", "--jobs", "2"])
    scope = ["systemd-run", "--user", "--scope", "--quiet", "-p", "Delegate=yes"]
    assert command[: command.index("--")] == scope
    grader = [sys.executable, "-m", "addnorm_lib.grading", "subs", "--jobs", "2"]
    assert command[command.index("--") + 1 :] == grader
    env = cgroups.scope_environment({"PATH": "/usr/bin"})
    assert env == {"PATH": "/usr/bin", cgroups.SCOPE_MARKER: "1"}
    assert cgroups.in_grader_scope(env) and not cgroups.in_grader_scope({})
