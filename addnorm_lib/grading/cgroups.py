"""Limits for the whole group of a submission's processes: a control group (cgroup) of its own.

A resource limit (``setrlimit``) caps one process: six children of a kernel may each use the
kernel's memory cap. A cgroup caps them together: the memory of every process of the
submission (tmpfs files included), how many processes it may have, and how much CPU time it
gets per second. The grader makes one cgroup per submission under its own, puts the kernel's
launcher in it before it starts the sandbox, and removes it (killing whatever is left) after.

Both layouts of Linux's cgroups are supported: the unified one (cgroup v2), where one folder
holds every controller, and the older one (v1), one hierarchy per controller. Where neither
can be written (no permission, no delegation), :func:`cgroup_problem` says why, the grader
keeps its per-process limits, and the report says that the group limits are missing.
"""

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


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


def legacy_layout(mounts: dict[str, Path], paths: dict[str, str]) -> Layout | None:
    """The v1 layout, if every controller has a hierarchy and this process a cgroup in it."""
    if not all(controller in mounts and controller in paths for controller in CONTROLLERS):
        return None
    return Layout(1, {c: mounts[c] / paths[c].lstrip("/") for c in CONTROLLERS})


@cache
def find_layout() -> Layout | None:
    """This machine's cgroup layout as seen from this process, or None if it has none we use."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text()
        cgroups = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    unified_mount, legacy_mounts = mount_points(mounts)
    unified_path, legacy_paths = own_cgroups(cgroups)
    if unified_mount is not None and unified_path is not None:
        layout = unified_layout(unified_mount, unified_path)
        if layout is not None:
            return layout
    return legacy_layout(legacy_mounts, legacy_paths)


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
    """Why one cgroup per submission cannot be made here, or None when it can (probed once)."""
    layout = find_layout()
    if layout is None:
        return "no cgroup hierarchy with the memory, pids and cpu controllers for this process"
    try:
        create_cgroup(layout, PROBE_LIMITS).remove()
    except OSError as err:
        return f"cannot create a cgroup under {layout.parents['memory']}: {err.strerror or err}"
    return None


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
