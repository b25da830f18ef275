"""The grader's settings: one dataclass holds every default, and the command line is built from it.

Each field of :class:`Settings` is one command-line flag. The flag's name comes from the field's
name (``memory_mb`` is ``--memory-mb``) unless its metadata gives another one, its help text from
the metadata, and its default from the field itself, so that no default is written twice.

Every setting changes grades (a limit, the sandbox) except those of :data:`NO_GRADE_CHANGE`: a
record of a grade keeps :func:`grading_digest` of the others, and ``--resume`` keeps a grade only
when that digest is unchanged.
"""

import argparse
import functools
import hashlib
import json
import math
import os
from dataclasses import Field, dataclass, field, fields
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[2]


def flag(help_text: str, name: str | None = None, metavar: str = "NAME") -> dict:
    """A field's metadata: its flag's help text, its name when not derived from the field, and
    (for text) the word its value is shown as in the help."""
    return {"help": help_text, "flag": name, "metavar": metavar}


@dataclass(frozen=True)
class Settings:
    """How to grade: the instructor's notebooks, where reports go, and the limits of each kernel."""

    source: Path = field(
        default=COURSE_ROOT / "solutions", metadata=flag("the instructor's notebooks")
    )
    out: Path = field(default=Path("grades"), metadata=flag("folder for the reports"))
    jobs: int = field(default=os.cpu_count() or 1, metadata=flag("notebooks graded at once"))
    cell_timeout: float = field(default=60.0, metadata=flag("seconds per cell", "--timeout"))
    notebook_timeout: float = field(default=600.0, metadata=flag("seconds per notebook"))
    memory_mb: int = field(default=2048, metadata=flag("memory cap of each kernel, in MiB"))
    file_mb: int = field(default=64, metadata=flag("largest file a kernel may write, in MiB"))
    notebook_mb: int = field(default=16, metadata=flag("largest notebook file read, in MiB"))
    exchange_mb: int = field(
        default=64,
        metadata=flag(
            "what one kernel may keep in the folder it shares with the grader (its connection "
            "file, sockets and the checks' records: well under 1 MiB for the course's notebooks), "
            "in MiB; a kernel that writes more is stopped"
        ),
    )
    output_mb: int = field(
        default=32, metadata=flag("output kept of a notebook (all cells), in MiB; more is dropped")
    )
    resume: bool = field(
        default=False,
        metadata=flag(
            "keep an earlier run's ok grades in --out whose submission, instructor's notebook "
            "and grade-changing settings are unchanged; grade the rest again"
        ),
    )
    no_sandbox: bool = field(
        default=False,
        metadata=flag(
            "run kernels without the sandbox (only for notebooks you trust); needed to grade "
            "several notebooks where the sandbox cannot be built"
        ),
    )
    no_group_limits: bool = field(
        default=False,
        metadata=flag(
            "run kernels without a cgroup each (a submission's processes then share no memory, "
            "process or CPU cap); needed to grade several notebooks where no cgroup can be made"
        ),
    )
    dask_scheduler: str = field(
        default="",
        metadata=flag(
            "grade on a Dask cluster: the address of its running scheduler (tcp://HOST:8786); "
            "each worker grades in a sandbox and warm kernels of its own (start workers with "
            "DASK_DISTRIBUTED__WORKER__DAEMON=False dask worker ADDRESS --nthreads N)",
            metavar="ADDRESS",
        ),
    )
    assignment: str = field(
        default="",
        metadata=flag(
            "grade every notebook as this assignment (by default, the one its metadata or its "
            "file name names)"
        ),
    )


# Settings that change no grade: where the instructor's notebooks are (their contents count, in
# each record's digest of its notebook), where the reports go, how many run at once, --resume,
# and where they run (a Dask cluster's workers grade as this machine would).
# Any other setting, a new one included, is part of grading_digest.
NO_GRADE_CHANGE = ("source", "out", "jobs", "resume", "dask_scheduler")


# The code that decides grades: the grader, the checks and the references they judge against.
GRADING_CODE = ("addnorm_lib/grading", "addnorm_lib/checks", "addnorm_lib/reference")


@functools.cache
def code_digest(root: Path = COURSE_ROOT) -> str:
    """A digest (SHA-256, hexadecimal) of the Python files of :data:`GRADING_CODE` under
    ``root``: a grade decided by other code (an older grader) is not kept by ``--resume``."""
    digest = hashlib.sha256()
    for folder in GRADING_CODE:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def grading_digest(settings: Settings, isolated: bool) -> str:
    """A digest (SHA-256, hexadecimal) of what besides the notebooks decides a grade: every
    setting but those of :data:`NO_GRADE_CHANGE`, whether kernels run in the sandbox, and the
    grading code (:func:`code_digest`)."""
    chosen = {
        option.name: str(getattr(settings, option.name))
        for option in fields(Settings)
        if option.name not in NO_GRADE_CHANGE
    }
    chosen["isolated"] = str(isolated)
    chosen["code"] = code_digest()
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()


def flag_of(option: Field) -> str:
    """The command-line flag of a field of :class:`Settings`."""
    return option.metadata["flag"] or "--" + option.name.replace("_", "-")


def positive(kind: type):
    """An argparse type: a finite number of ``kind`` above zero, or a clear error."""

    def parse(text: str):
        value = kind(text)  # a ValueError reads "invalid int value: 'abc'"
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def argument_options(option: Field) -> dict:
    """``add_argument`` options of a field: its default, help and how its value is parsed."""
    options = {"dest": option.name, "default": option.default}
    if option.type is bool:
        return {**options, "action": "store_true", "help": option.metadata["help"]}
    if option.type is str:
        metavar = option.metadata["metavar"]
        return {**options, "type": str, "help": option.metadata["help"], "metavar": metavar}
    parse = positive(option.type) if option.type in (int, float) else Path
    help_text = option.metadata["help"] + " (default: %(default)s)"
    return {**options, "type": parse, "help": help_text}


def build_parser() -> argparse.ArgumentParser:
    """The grader's command line: the paths to grade, then one flag per field of Settings."""
    parser = argparse.ArgumentParser(
        prog="python -m addnorm_lib.grading", description="Grade student notebooks."
    )
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks or folders of notebooks")
    for option in fields(Settings):
        parser.add_argument(flag_of(option), **argument_options(option))
    return parser


def parse_command_line(argv: list[str] | None = None) -> tuple[list[Path], Settings]:
    """The paths to grade and the settings given on the command line (argparse exits on errors)."""
    arguments = build_parser().parse_args(argv)
    chosen = {option.name: getattr(arguments, option.name) for option in fields(Settings)}
    return arguments.paths, Settings(**chosen)
