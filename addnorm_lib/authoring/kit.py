"""Build the learner kit: one archive with which a reader does the exercises on their own machine.

    python -m addnorm_lib.authoring.kit --dest DIR     # writes DIR/addnorm-kit.zip

The archive holds one folder, ``addnorm-kit/``:

- ``exercises/*.ipynb``: the learner's notebooks, as in the course's ``exercises/``;
- ``grader/*.ipynb``: what the grader builds each graded notebook from (``--source grader``): the
  instructor's notebooks with every answer replaced by its stub (the nbgrader markers kept, as the
  grader needs them) and the hidden tests removed, so the kit holds no answer and no hidden test;
- ``addnorm_lib-<version>-py3-none-any.whl``: the course's library (the checks and the grader);
- ``requirements.txt``: what a learner needs to run and grade the notebooks, and only that,
  pinned to the course's own ``requirements.txt``;
- ``Makefile``: ``make setup``, ``make lab`` and ``make grade NB=exercises/x.ipynb``, the command
  every exercise prints;
- ``README.md``: the commands, exactly as a test runs them.

The book's exercises page links the archive (``make book`` builds it into ``book/_generated/``).
Rebuilding from the same sources gives the same bytes (fixed timestamps), so the page's download
does not change when nothing in it did.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import nbformat
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from addnorm_lib.authoring import release

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = "addnorm-kit.zip"
FOLDER = "addnorm-kit"  # the one folder the archive unpacks to
GRADER_FOLDER = "grader"
PYTHON = "python3.11"

# What a learner's machine needs, and why; everything they pull in is added, pinned.
LEARNER_NEEDS = (
    "torch",  # the exercises' modules, and the checks
    "numpy",  # the numpy exercises, and the checks
    "jupyterlab",  # to open and run the notebooks
    "ipykernel",  # the notebooks' kernel, and the graded kernel
    "nbformat",  # the grader reads notebooks
    "nbval",  # the grader executes a notebook with pytest --nbval-lax
    "pytest",
    "jupyter-client",
    "jinja2",  # the grader's feedback page
    "psutil",  # the grader stops what a notebook left running
)
# pip freeze leaves these out of requirements.txt; the kit pins them to the course's own.
PACKAGING_TOOLS = ("setuptools", "pip", "wheel")
# Packaging timestamps: zip's earliest date, unless SOURCE_DATE_EPOCH says otherwise.
EPOCH_1980 = 315532800


class KitError(RuntimeError):
    """The kit cannot be built; the message says what to do."""


@dataclass(frozen=True)
class KitFile:
    """One file of the kit: its path inside the kit's folder and its bytes."""

    name: str
    data: bytes


# The commands the README and the exercises page print, run in the kit's folder (a test runs
# them as printed). Each fits a code block of the book's column (75 characters a line).
SETUP = f"{PYTHON} -m venv .venv && .venv/bin/pip install -r requirements.txt"
SETUP_WINDOWS = ("py -3.11 -m venv .venv", r".venv\Scripts\pip install -r requirements.txt")
LAB = ".venv/bin/jupyter lab exercises"
GRADE_OPTIONS = f"--source {GRADER_FOLDER} --no-sandbox"


def grade_command(notebook: str = "exercises/layernorm.ipynb", wrap: bool = True) -> str:
    """The command that grades one notebook of the kit, unsandboxed (the README says why).

    With ``wrap``, its options go on a second line after a backslash, as the page shows it.
    """
    join = " \\\n    " if wrap else " "
    return f".venv/bin/python -m addnorm_lib.grading {notebook}{join}{GRADE_OPTIONS}"


# ----------------------------------------------------------------------------------------------
# Requirements


def read_pins(text: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file, by canonical name (comments skipped)."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, separator, version = line.partition("==")
        if not separator:
            raise KitError(f"requirements.txt: {line!r} is not pinned with ==; run `make lock`")
        pins[canonicalize_name(name)] = version.strip()
    return pins


def installed_requires(name: str) -> list[str]:
    """The ``Requires-Dist`` lines of an installed distribution (of this interpreter)."""
    try:
        return metadata.distribution(name).requires or []
    except metadata.PackageNotFoundError as err:
        raise KitError(f"{name} is not installed here; run `make venv` first") from err


def dependency_closure(
    roots: Iterable[str], requires: Callable[[str], list[str]]
) -> dict[str, set[str]]:
    """Every distribution that ``roots`` need on this platform, with the extras asked of each.

    ``requires(name)`` gives a distribution's ``Requires-Dist`` lines. A requirement applies when
    it has no marker, or its marker holds on this interpreter for one of the extras asked of its
    distribution (the base, ``""``, always). Returns canonical name -> extras asked.
    """
    wanted: dict[str, set[str]] = {}
    todo = [(name, "") for name in roots]
    while todo:
        name, extra = todo.pop()
        key = canonicalize_name(name)
        if extra in wanted.setdefault(key, set()):
            continue
        wanted[key].add(extra)
        for line in requires(key):
            requirement = Requirement(line)
            marker = requirement.marker
            applies = extra == "" if marker is None else marker.evaluate({"extra": extra})
            if applies:
                todo.append((requirement.name, ""))
                todo.extend((requirement.name, wanted_extra) for wanted_extra in requirement.extras)
    return wanted


def pinned_requirements(
    needed: Iterable[str], pins: dict[str, str], tool_version: Callable[[str], str]
) -> list[str]:
    """``name==version`` for each needed distribution, sorted by name.

    Versions come from ``pins`` (the course's requirements.txt); the packaging tools that pip
    freeze leaves out come from ``tool_version``. Anything else unpinned is an error.
    """
    lines = []
    for name in sorted(needed):
        if name in pins:
            lines.append(f"{name}=={pins[name]}")
        elif name in PACKAGING_TOOLS:
            lines.append(f"{name}=={tool_version(name)}")
        else:
            raise KitError(f"{name} is needed by the kit but not pinned in requirements.txt")
    return lines


def requirements_text(root: Path, wheel: str) -> str:
    """The kit's requirements.txt: LEARNER_NEEDS and what they pull in, pinned, then the
    library's wheel, named by its path in the kit's folder (where the README's command runs)."""
    pins = read_pins((root / "requirements.txt").read_text(encoding="utf-8"))
    needed = dependency_closure(LEARNER_NEEDS, installed_requires)
    lines = pinned_requirements(needed, pins, metadata.version)
    return (
        "# What the addnorm exercises and their grader need, pinned to the course's own\n"
        "# requirements.txt. Install from this folder with the command in README.md.\n"
        + "\n".join(lines)
        + "\n# The course's library: its checks and its grader.\n"
        + f"./{wheel}\n"
    )


# ----------------------------------------------------------------------------------------------
# Notebooks


def grader_notebook(solution, name: str):
    """What the kit's grader builds a graded notebook from, for one solution notebook.

    The solution with every answer replaced by its stub, inside its ``### BEGIN SOLUTION`` /
    ``### END SOLUTION`` markers (the grader stubs answers again when it loads a notebook, and
    needs them marked), the hidden tests removed, outputs cleared. No answer and no hidden test
    is left in it. A new notebook; ``solution`` is unchanged.
    """
    release.validate(solution, name)
    notebook = copy.deepcopy(solution)
    for index, cell in enumerate(notebook.cells):
        meta = cell.metadata.get("nbgrader", {})
        where = f"{name}, cell {index}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if meta.get("solution"):
                cell.source = release.strip_solution(cell.source, where, keep_markers=True)
            if release.HIDDEN_BEGIN in cell.source:
                cell.source = release.strip_hidden_tests(cell.source, where)
        elif meta.get("solution"):
            cell.source = release.MARKDOWN_STUB
    return notebook


def notebook_files(root: Path) -> list[KitFile]:
    """The exercises (as released) and the grader's notebooks, one of each per solution."""
    solutions = sorted((root / "solutions").glob("*.ipynb"))
    if not solutions:
        raise KitError(f"no solution notebooks in {root / 'solutions'}")
    files = []
    for path in solutions:
        solution = nbformat.read(path, as_version=4)
        graded = nbformat.writes(grader_notebook(solution, path.name)) + "\n"
        exercise = release.exercise_text(path)
        files.append(KitFile(f"exercises/{path.name}", exercise.encode()))
        files.append(KitFile(f"{GRADER_FOLDER}/{path.name}", graded.encode()))
    return files


# ----------------------------------------------------------------------------------------------
# The library's wheel


def source_date_epoch() -> int:
    """The timestamp given to every file of the kit and the wheel."""
    return int(os.environ.get("SOURCE_DATE_EPOCH", EPOCH_1980))


def build_wheel(root: Path, workdir: Path) -> Path:
    """The wheel of ``addnorm_lib``, built offline from a clean copy of the library.

    The copy (``pyproject.toml`` and ``addnorm_lib/`` without bytecode caches) keeps setuptools'
    ``build/`` and ``*.egg-info`` out of the course's tree, and the caches out of the wheel.
    """
    source = workdir / "source"
    source.mkdir()
    shutil.copy2(root / "pyproject.toml", source / "pyproject.toml")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(root / "addnorm_lib", source / "addnorm_lib", ignore=ignore)
    wheels = workdir / "wheels"
    command = [
        *(sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"),
        *("--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", str(wheels)),
        str(source),
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    built = sorted(wheels.glob("addnorm_lib-*.whl"))
    if done.returncode != 0 or len(built) != 1:
        raise KitError(f"building the wheel failed: {(done.stderr or done.stdout)[-600:]}")
    return built[0]


# ----------------------------------------------------------------------------------------------
# README and Makefile


def readme_text(assignments: list[str]) -> str:
    """The kit's README: what is in it, and the commands, exactly as a test runs them."""
    names = ", ".join(f"`{name}`" for name in assignments)
    windows_venv, windows_install = SETUP_WINDOWS
    return f"""\
# addnorm: the exercises on your own machine

The course's exercise notebooks, in which you write the Transformer's norms yourself, are in
`exercises/`: {names}. The course's library `addnorm_lib` (the checks the
notebooks call, and the grader) is the wheel in this folder; `requirements.txt` pins it and the
packages it needs.

You need **Python 3.11** (`{PYTHON} --version` says which you have) and about 2 GB of disk.
Run every command below in this folder.

## 1. Install (once)

```bash
{SETUP}
```

It creates `.venv` in this folder and installs everything into it, nothing elsewhere.
On Linux, pip takes PyTorch's CUDA build from PyPI, several GB; the exercises need only the
CPU build. To download less, install PyTorch's CPU build of the version `requirements.txt`
names into `.venv` first, as pytorch.org/get-started/locally shows, then run the command above:
pip keeps it (`torch==2.13.0` is satisfied by `2.13.0+cpu`).

## 2. Do an exercise

```bash
{LAB}
```

Open a notebook, replace each `raise NotImplementedError()` with your code and run the test cell
after it: a failing check says what is wrong, on which input.

## 3. Grade a notebook

Save it, then:

```bash
{grade_command()}
```

It prints one line such as `layernorm.ipynb: graded, 7/10`, then the points of each test, what
is wrong below each failed one, and the path of a feedback page (the reports go to `grades/`).
The command each notebook prints, `make grade NB=exercises/layernorm.ipynb`, does the same here
(with this folder's `Makefile`, where `make setup` and `make lab` are steps 1 and 2).

`--no-sandbox`: when an instructor grades a class, each student's code runs in a sandbox. Here
the code is your own, on your own machine, so the grader runs it without one, and says so in a
line that starts with `warning: no sandbox`.

The grader scores the tests you see in the notebook; `{GRADER_FOLDER}/` holds its copies of the
notebooks, without answers (leave them as they are). A course's grader also runs hidden tests,
so a notebook that passes by special-casing the visible tests loses those points there.

## Windows and macOS

On Windows, install with these two commands, and start JupyterLab with
`.venv\\Scripts\\jupyter lab exercises`:

```
{windows_venv}
{windows_install}
```

On Windows and macOS the notebooks and their test cells work, but the grading command does not:
the grader needs Linux (Unix sockets of a kind that Windows and macOS lack). To grade there,
unpack this folder in WSL (Windows) or a Linux virtual machine or container, and use the
commands above.
"""


def makefile_text() -> str:
    """The kit's Makefile: the README's commands as ``make setup``, ``make lab``, ``make grade``."""
    return f"""\
# The commands of README.md. `make grade NB=exercises/layernorm.ipynb` is what each notebook says.
.PHONY: setup lab grade
NO_VENV = echo "error: no .venv here; run 'make setup' first" >&2; exit 2

setup:
\t{SETUP}

lab:
\t@test -x .venv/bin/python || {{ $(NO_VENV); }}
\t{LAB}

grade:
\t@test -n "$(NB)" || {{ echo "usage: make grade NB=exercises/layernorm.ipynb" >&2; exit 2; }}
\t@test -x .venv/bin/python || {{ $(NO_VENV); }}
\t@{grade_command("$(NB)", wrap=False)}
"""


# ----------------------------------------------------------------------------------------------
# The archive


def kit_files(root: Path, workdir: Path) -> list[KitFile]:
    """Every file of the kit, built from the course in ``root`` (``workdir``: scratch space)."""
    wheel = build_wheel(root, workdir)
    notebooks = notebook_files(root)
    assignments = [Path(f.name).stem for f in notebooks if f.name.startswith("exercises/")]
    return [
        KitFile("README.md", readme_text(assignments).encode()),
        KitFile("Makefile", makefile_text().encode()),
        KitFile("requirements.txt", requirements_text(root, wheel.name).encode()),
        KitFile(wheel.name, wheel.read_bytes()),
        *notebooks,
    ]


def write_archive(files: list[KitFile], path: Path) -> None:
    """The zip of ``files`` under ``FOLDER/``, sorted, with fixed timestamps and modes."""
    stamp = time.gmtime(max(source_date_epoch(), EPOCH_1980))[:6]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for kit_file in sorted(files, key=lambda f: f.name):
            info = zipfile.ZipInfo(f"{FOLDER}/{kit_file.name}", date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, kit_file.data)
    partial.replace(path)  # a reader never sees half an archive


def build_kit(dest: Path, root: Path = ROOT) -> Path:
    """Build ``dest/addnorm-kit.zip`` from the course in ``root``; its path."""
    with tempfile.TemporaryDirectory(prefix="addnorm-kit-") as scratch:
        files = kit_files(root, Path(scratch))
    target = dest / ARCHIVE
    write_archive(files, target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Build the kit; exit status 0, or 2 with one line saying why it could not be built."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, required=True, help="folder for addnorm-kit.zip")
    args = parser.parse_args(argv)
    try:
        target = build_kit(args.dest)
    except (KitError, release.ReleaseError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {target} ({target.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
