"""The system calls a graded kernel may not make: a seccomp filter built with libseccomp.

Every graded kernel, and every process it starts, runs under this filter (a filter is inherited
across fork and exec and cannot be removed). It allows every call but these, which fail with an
error (never a kill, so a library that probes a call falls back):

- Docker's default deny list: kernel modules, kexec, reboot, swap, clocks, quotas, accounting,
  ``personality`` flags that weaken the address space layout, NUMA memory policies,
  ``lookup_dcookie``, file handles (``open_by_handle_at``), ``kcmp``, ``process_vm_*``;
- the kernel's keyrings: ``keyctl``, ``add_key`` and ``request_key`` (whose upcall runs
  ``/sbin/request-key`` as root outside any sandbox);
- asynchronous I/O that escapes the sandbox's accounting: ``io_uring_*`` and the AIO calls (ENOSYS,
  as if this kernel lacked them, so that libraries fall back), ``inotify`` instances (a per-user
  count shared with the host; ENOSYS too) and ``fanotify``; ``userfaultfd``;
- ``ptrace`` (the sandbox's own init included), ``pidfd_getfd``, ``process_madvise``,
  ``perf_event_open``, ``bpf``;
- mounts (the old and the new mount API, ``pivot_root``, ``chroot``) and namespaces
  (``unshare``, ``setns``, ``clone`` with a namespace flag; ``clone3``, whose flags a filter cannot
  read, is ENOSYS so that the C library falls back to ``clone``);
- every socket family but ``AF_UNIX`` and ``AF_INET`` (``socket`` and ``socketpair``;
  EAFNOSUPPORT, as if the family were not built in): no ``AF_INET6``, ``AF_VSOCK`` (the
  machine's hypervisor), ``AF_NETLINK``, ``AF_PACKET`` or any other. Graded kernels talk to
  their client over Unix sockets in the exchange (``_launch``), but ipykernel's IOPub thread
  binds a ZMQ socket on ``127.0.0.1`` (for the output of forked children), and libzmq aborts the
  kernel when ``AF_INET`` is refused: so ``AF_INET`` stays, and reaches only the loopback of the
  sandbox's own network namespace (``bubblewrap``: no network, no route out). ``AF_NETLINK``
  fails with EOPNOTSUPP instead: libzmq's bind lists the interfaces (``getifaddrs``, over
  netlink) and takes that error, unlike the others, as "no interfaces" and goes on.

Calls of another ABI than the machine's own (``int 0x80`` on x86-64) kill the caller: the filter
is written for the native one only, libseccomp's default.

:func:`syscall_filter` builds it (libseccomp's Python bindings, here ``pyseccomp``);
:func:`write_filter` exports it as the classic BPF program that bubblewrap loads (``bwrap
--seccomp FD``); a warm kernel, forked from a process outside the sandbox, loads the same filter
itself (``_warm_kernels``). Each kernel also starts in a new, empty session keyring
(``_launch.join_new_session_keyring``), joined before the filter forbids ``keyctl``.
"""

import errno
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Docker's default profile refuses these (its documented list of significant blocked calls,
# less those handled apart below: keyrings, ptrace, mounts and namespaces, clone, personality).
DOCKER_DENIED = (
    "acct",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "lookup_dcookie",
    "mbind",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "process_vm_readv",
    "process_vm_writev",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "set_mempolicy",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "sysfs",
    "_sysctl",
    "syslog",
    "uselib",
    "ustat",
    "vhangup",
    "vm86",
    "vm86old",
)
KEYRINGS = ("keyctl", "add_key", "request_key")
TRACING = ("ptrace", "pidfd_getfd", "process_madvise", "perf_event_open", "bpf", "userfaultfd")
MOUNTS = (
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
)
NAMESPACES = ("unshare", "setns")
# Refused as if this kernel did not have them (ENOSYS): libraries then fall back.
ASYNC_IO = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    "inotify_init",
    "inotify_init1",
)
MISSING = (*ASYNC_IO, "clone3")
EPERM_DENIED = (*DOCKER_DENIED, *KEYRINGS, *TRACING, *MOUNTS, *NAMESPACES, "fanotify_init")
# clone's flags that make a namespace (CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
# NEWPID, NEWNET): a clone with any of them is refused.
CLONE_NAMESPACE_FLAGS = (
    0x00000080,
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
# personality flags that weaken the address space layout (ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO,
# ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC): Docker allows only a few harmless personalities.
PERSONALITY_FLAGS = (0x0040000, 0x0100000, 0x0200000, 0x0400000)
SOCKET_CALLS = ("socket", "socketpair")  # their first argument is the family
ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_INET)  # 1 and 2; AF_UNSPEC is 0, AF_NETLINK 16


@dataclass(frozen=True)
class Condition:
    """When a rule applies: its call's ``argument`` (counted from 0) ``has_bits`` (every bit of
    value set), is ``above`` value, or ``equals`` it (compared as 64-bit numbers)."""

    argument: int
    test: str
    value: int


@dataclass(frozen=True)
class Rule:
    """One refusal: ``call`` fails with ``error`` (only under ``condition``, if given)."""

    call: str
    error: int
    condition: Condition | None = None


def rules() -> list[Rule]:
    """Every refusal of the filter, as data."""
    found = [Rule(call, errno.EPERM) for call in EPERM_DENIED]
    found += [Rule(call, errno.ENOSYS) for call in MISSING]
    for flag in CLONE_NAMESPACE_FLAGS:
        found.append(Rule("clone", errno.EPERM, Condition(0, "has_bits", flag)))
    for flag in PERSONALITY_FLAGS:
        found.append(Rule("personality", errno.EPERM, Condition(0, "has_bits", flag)))
    for call in SOCKET_CALLS:
        found += family_rules(call)
    return found


def family_rules(call: str) -> list[Rule]:
    """Refuse every family of ``call`` but ``ALLOWED_FAMILIES``, ``AF_NETLINK`` with EOPNOTSUPP.

    libseccomp compares an argument once per rule, and its rules for one call may not overlap:
    so one rule per family below ``AF_NETLINK``, one for it, one for all above it.
    """
    below = [family for family in range(socket.AF_NETLINK) if family not in ALLOWED_FAMILIES]
    found = [Rule(call, errno.EAFNOSUPPORT, Condition(0, "equals", family)) for family in below]
    found.append(Rule(call, errno.EOPNOTSUPP, Condition(0, "equals", socket.AF_NETLINK)))
    found.append(Rule(call, errno.EAFNOSUPPORT, Condition(0, "above", socket.AF_NETLINK)))
    return found


def unknown_calls(names: list[str]) -> list[str]:
    """The names libseccomp knows on no architecture (a typo, or a library older than them)."""
    import pyseccomp

    return [name for name in names if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) == -1]


def syscall_filter():
    """The filter, a ``pyseccomp.SyscallFilter``: allow by default, refuse :func:`rules`.

    A call this machine's architecture lacks (``vm86`` on x86-64) is skipped by libseccomp; one
    that the installed libseccomp does not know at all is skipped here.
    """
    import pyseccomp

    refusals = rules()
    unknown = set(unknown_calls([rule.call for rule in refusals]))
    built = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for rule in refusals:
        if rule.call in unknown:
            continue
        conditions = [] if rule.condition is None else [library_condition(rule.condition)]
        built.add_rule(pyseccomp.ERRNO(rule.error), rule.call, *conditions)
    return built


def library_condition(condition: Condition):
    """``condition`` as libseccomp's argument comparison (a ``pyseccomp.Arg``)."""
    import pyseccomp

    argument, value = condition.argument, condition.value
    if condition.test == "has_bits":
        return pyseccomp.Arg(argument, pyseccomp.MASKED_EQ, value, value)
    operators = {"above": pyseccomp.GT, "equals": pyseccomp.EQ}
    return pyseccomp.Arg(argument, operators[condition.test], value)


def write_filter(path: Path) -> Path:
    """Export the filter to ``path`` as a classic BPF program (what ``bwrap --seccomp`` reads)."""
    with open(path, "wb") as file:
        syscall_filter().export_bpf(file)
    return path


@cache
def filter_problem() -> str | None:
    """Why the filter cannot be built here, or None when it can (checked once)."""
    try:
        syscall_filter()
    except ImportError:
        return "pyseccomp is not installed (pip install -r requirements.txt)"
    except (RuntimeError, OSError) as err:  # pyseccomp raises RuntimeError without libseccomp
        return f"libseccomp cannot build the filter (Debian: apt-get install libseccomp2): {err}"
    return None
