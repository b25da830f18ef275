"""Limits for the whole group of a submission's processes: a control group (cgroup) of its own.

A resource limit (``setrlimit``) caps one process: six children of a kernel may each use the
kernel's memory cap. A cgroup caps them together: the memory of every process of the
submission (tmpfs files included), how many processes it may have, and how much CPU time it
gets per second. The grader makes one cgroup per submission under its own, puts the kernel's
launcher in it before it starts the sandbox, and removes it (killing whatever is left) after.

Both layouts of Linux's cgroups are supported: the unified one (cgroup v2), where one folder
holds every controller, and the older one (v1), one hierarchy per controller. Where neither
can be written (no permission, no delegation), :func:`cgroup_problem` says why: the grader
then grades a class only when told to (``--no-group-limits``, :mod:`~.pipeline`), with its
per-process limits alone, and the report says that the group limits are missing.

Root can write the machine's cgroups; an unprivileged user cannot, but the user's own systemd
can hand them one: ``systemd-run --user --scope -p Delegate=yes -- COMMAND`` runs COMMAND in a
new cgroup v2 *scope* that the user owns. A grader that has no cgroups re-runs itself that way
(:func:`scope_command`, where :func:`systemd_run_problem` finds it works), with
:data:`SCOPE_MARKER` in its environment so that it never does so twice. Inside, v2's "no
internal processes" rule forbids enabling controllers for the children of a cgroup that holds
processes: :func:`split_scope` first moves the grader into a leaf of the scope,
:data:`GRADER_LEAF`, then enables the controllers in the scope's ``cgroup.subtree_control``,
and each submission's cgroup is made beside that leaf. Only a scope that holds nothing but this
process is split (:func:`scope_problem`), so nobody else's processes are moved.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
# In the environment of a grader that systemd-run started in a delegated scope of its own.
SCOPE_MARKER = "ADDNORM_GRADER_SCOPE"
GRADER_LEAF = "addnorm-grader"  # the leaf of that scope that the grader's own processes move to
SYSTEMD_RUN = ("systemd-run", "--user", "--scope", "--quiet", "-p", "Delegate=yes")
# How an unprivileged user's systemd is told to delegate a controller it keeps (rootless
# containers need the same: https://rootlesscontaine.rs/getting-started/common/cgroup2/).
DELEGATE_HINT = (
    "'[Service]' and 'Delegate=cpu memory pids' to "
    "/etc/systemd/system/user@.service.d/delegate.conf, run systemctl daemon-reload and log in "
    "again"
)


@dataclass(frozen=True)
class GroupLimits:
    """What one submission's processes may use together."""

    memory_bytes: int
    max_processes: int
    cpus: float  # CPU time per second of wall-clock time, in cores


def mount_points(mountinfo: str) -> tuple[Path | None, dict[str, Path]]:
    """The cgroup2 mount point and each v1 controller's mount point, from /proc/self/mountinfo."""
    unified, legacy = None, {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        kind, options = after[0], after[2].split(",") if len(after) > 2 else []
        if kind == "cgroup2" and unified is None:
            unified = Path(fields[4])
        elif kind == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    legacy.setdefault(controller, Path(fields[4]))
    return unified, legacy


def own_cgroups(text: str) -> tuple[str | None, dict[str, str]]:
    """This process's cgroup path in the unified hierarchy and in each v1 controller's."""
    unified, legacy = None, {}
    for line in text.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            unified = path
        for controller in controllers.split(","):
            if controller in CONTROLLERS:
                legacy[controller] = path
    return unified, legacy


@dataclass(frozen=True)
class Layout:
    """Where this process's cgroups are: one folder per controller (the same one under v2)."""

    version: int
    parents: dict[str, Path]  # controller -> the folder new cgroups are made in


def unified_layout(mount: Path, path: str) -> Layout | None:
    """The v2 layout, if every controller is enabled for the children of this process's cgroup."""
    parent = mount / path.lstrip("/")
    with contextlib.suppress(OSError):
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if all(controller in enabled for controller in CONTROLLERS):
            return Layout(2, dict.fromkeys(CONTROLLERS, parent))
    return None


def split_layout(mount: Path, path: str) -> Layout | None:
    """The v2 layout of a scope already split (:func:`split_scope`): this process is in its
    :data:`GRADER_LEAF`, and the scope above has every controller enabled for its children."""
    own = mount / path.lstrip("/")
    if own.name != GRADER_LEAF:
        return None
    return unified_layout(mount, str(Path(path).parent))


def scope_problem(scope: Path, pid: int) -> str | None:
    """Why the delegated scope at ``scope`` cannot be split for process ``pid``, or None.

    It must offer every controller (``cgroup.controllers``), let this user make folders and
    write its control files, and hold no process but ``pid`` (none of them is moved then).
    """
    try:
        offered = (scope / "cgroup.controllers").read_text().split()
        held = {int(number) for number in (scope / "cgroup.procs").read_text().split()}
    except (OSError, ValueError) as err:
        return f"cannot read the cgroup {scope}: {getattr(err, 'strerror', None) or err}"
    missing = [controller for controller in CONTROLLERS if controller not in offered]
    if missing:
        return (
            f"the user's systemd delegates no {' or '.join(missing)} controller to {scope} "
            f"(as root, add {DELEGATE_HINT})"
        )
    files = (scope / "cgroup.procs", scope / "cgroup.subtree_control")
    if not all(os.access(path, os.W_OK) for path in (scope, *files)):
        return f"the cgroup {scope} is not delegated to this user"
    if held != {pid}:
        return f"the cgroup {scope} holds other processes than the grader's"
    return None


def split_scope(scope: Path, pid: int) -> Layout:
    """Make the delegated ``scope`` able to hold submissions' cgroups: move ``pid`` into its
    leaf :data:`GRADER_LEAF`, then enable every controller for its children (v2 refuses that
    while the scope itself holds a process); raises OSError if it cannot."""
    leaf = scope / GRADER_LEAF
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(str(pid))
    (scope / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
    return Layout(2, dict.fromkeys(CONTROLLERS, scope))


def in_grader_scope(environ: dict | None = None) -> bool:
    """Whether this process was started by :func:`scope_command`, in a scope of its own."""
    return (os.environ if environ is None else environ).get(SCOPE_MARKER) == "1"


def legacy_layout(mounts: dict[str, Path], paths: dict[str, str]) -> Layout | None:
    """The v1 layout, if every controller has a hierarchy and this process a cgroup in it."""
    if not all(controller in mounts and controller in paths for controller in CONTROLLERS):
        return None
    return Layout(1, {c: mounts[c] / paths[c].lstrip("/") for c in CONTROLLERS})


def own_scope() -> Path | None:
    """This process's cgroup v2 folder, or None where it has none."""
    with contextlib.suppress(OSError):
        mount, _ = mount_points(Path("/proc/self/mountinfo").read_text())
        path, _ = own_cgroups(Path("/proc/self/cgroup").read_text())
        if mount is not None and path is not None:
            return mount / path.lstrip("/")
    return None


def layout_from(mountinfo: str, cgroup: str, in_scope: bool, pid: int) -> Layout | None:
    """The cgroup layout that ``mountinfo`` and ``cgroup`` (/proc/self's) describe for process
    ``pid``, or None if there is none we use.

    In a scope of the grader's own (``in_scope``: :func:`in_grader_scope`) that can be split,
    it splits it (:func:`split_scope`): ``pid`` moves into the scope's leaf.
    """
    unified_mount, legacy_mounts = mount_points(mountinfo)
    unified_path, legacy_paths = own_cgroups(cgroup)
    if unified_mount is not None and unified_path is not None:
        layout = unified_layout(unified_mount, unified_path) or split_layout(
            unified_mount, unified_path
        )
        if layout is not None:
            return layout
        scope = unified_mount / unified_path.lstrip("/")
        if in_scope and scope_problem(scope, pid) is None:
            with contextlib.suppress(OSError):
                return split_scope(scope, pid)
    return legacy_layout(legacy_mounts, legacy_paths)


@cache
def find_layout() -> Layout | None:
    """This machine's cgroup layout as seen from this process (:func:`layout_from`), or None."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    return layout_from(mountinfo, cgroup, in_grader_scope(), os.getpid())


def limit_files(version: int, limits: GroupLimits) -> dict[str, dict[str, str]]:
    """controller -> {file: value} that set ``limits`` in a cgroup of the given version."""
    quota = str(max(1000, int(limits.cpus * CPU_PERIOD_US)))
    if version == 2:
        return {
            "memory": {"memory.max": str(limits.memory_bytes), "memory.swap.max": "0"},
            "pids": {"pids.max": str(limits.max_processes)},
            "cpu": {"cpu.max": f"{quota} {CPU_PERIOD_US}"},
        }
    return {
        "memory": {
            "memory.limit_in_bytes": str(limits.memory_bytes),
            "memory.memsw.limit_in_bytes": str(limits.memory_bytes),  # after the one above
        },
        "pids": {"pids.max": str(limits.max_processes)},
        "cpu": {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": quota},
    }


# Absent where the kernel does no swap accounting.
OPTIONAL_FILES = ("memory.swap.max", "memory.memsw.limit_in_bytes")


@dataclass
class Cgroup:
    """One submission's cgroup: a folder per controller (one folder under v2)."""

    folders: tuple[Path, ...]

    @property
    def procs_files(self) -> list[Path]:
        """The files a process writes its pid into to join the cgroup."""
        return [folder / "cgroup.procs" for folder in self.folders]

    def pids(self) -> set[int]:
        """The processes in the cgroup now."""
        found = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(pid) for pid in path.read_text().split()}
        return found

    def remove(self, attempts: int = 50) -> None:
        """Kill every process left in the cgroup, then remove its folders."""
        for _ in range(attempts):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for folder in dict.fromkeys(self.folders):
            with contextlib.suppress(OSError):
                folder.rmdir()


def create_cgroup(layout: Layout, limits: GroupLimits, name: str = "") -> Cgroup:
    """A new cgroup with ``limits``, under this process's own; raises OSError if it cannot."""
    name = name or f"addnorm-{uuid.uuid4().hex[:12]}"
    folders = {}
    try:
        for controller, parent in layout.parents.items():
            folder = parent / name
            if folder not in folders.values():
                folder.mkdir()
            folders[controller] = folder
        for controller, files in limit_files(layout.version, limits).items():
            for file_name, value in files.items():
                try:
                    (folders[controller] / file_name).write_text(value)
                except FileNotFoundError:
                    if file_name not in OPTIONAL_FILES:
                        raise
    except OSError:
        Cgroup(tuple(folders.values())).remove()
        raise
    return Cgroup(tuple(dict.fromkeys(folders.values())))


PROBE_LIMITS = GroupLimits(memory_bytes=64 * 2**20, max_processes=8, cpus=1.0)


@cache
def cgroup_problem() -> str | None:
    """Why one cgroup per submission cannot be made here, or None when it can (probed once).

    In a scope of the grader's own, why that scope cannot hold them (:func:`scope_problem`).
    """
    layout, problem = find_layout(), None
    if layout is None:
        problem = "no cgroup hierarchy with the memory, pids and cpu controllers for this process"
    else:
        try:
            create_cgroup(layout, PROBE_LIMITS).remove()
        except OSError as err:
            where = layout.parents["memory"]
            problem = f"cannot create a cgroup under {where}: {err.strerror or err}"
    if problem and in_grader_scope():
        scope = own_scope()
        why = "no cgroup v2 hierarchy" if scope is None else scope_problem(scope, os.getpid())
        problem = f"in the scope systemd-run made: {why or 'cannot enable its controllers'}"
    return problem


@cache
def systemd_run_problem() -> str | None:
    """Why ``systemd-run --user --scope`` cannot give this user a delegated scope here, or None
    when it can (probed once, quietly, by running ``true`` in one)."""
    if shutil.which(SYSTEMD_RUN[0]) is None:
        return "systemd-run is not installed"
    try:
        completed = subprocess.run(
            [*SYSTEMD_RUN, "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"systemd-run did not run: {err}"
    if completed.returncode != 0:
        said = (completed.stderr.strip().splitlines() or ["no message"])[-1]
        return f"systemd-run --user --scope failed: {said[:200]}"
    return None


def scope_command(arguments: list[str]) -> list[str]:
    """The command line that runs the grader with ``arguments`` again, in a delegated scope of
    its own (with :data:`SCOPE_MARKER` set in its environment: see :func:`scope_environment`)."""
    return [*SYSTEMD_RUN, "--", sys.executable, "-m", "addnorm_lib.grading", *arguments]


def scope_environment(environ: dict | None = None) -> dict[str, str]:
    """The environment of :func:`scope_command`: this one, marked so that it never re-runs."""
    return {**(os.environ if environ is None else environ), SCOPE_MARKER: "1"}


def procs_files_of(cgroup_text: str, own_text: str | None = None) -> list[Path]:
    """The ``cgroup.procs`` files of the cgroups listed in ``cgroup_text`` (a /proc/PID/cgroup)
    that differ from this process's own (``own_text``, default /proc/self/cgroup): writing a
    pid into them moves that process where PID is."""
    own_text = Path("/proc/self/cgroup").read_text() if own_text is None else own_text
    unified_mount, legacy_mounts = mount_points(Path("/proc/self/mountinfo").read_text())
    unified, legacy = own_cgroups(cgroup_text)
    own_unified, own_legacy = own_cgroups(own_text)
    files = []
    if unified_mount is not None and unified not in (None, own_unified):
        files.append(unified_mount / unified.lstrip("/") / "cgroup.procs")
    for controller, path in legacy.items():
        if controller in legacy_mounts and path != own_legacy.get(controller):
            files.append(legacy_mounts[controller] / path.lstrip("/") / "cgroup.procs")
    return list(dict.fromkeys(files))
