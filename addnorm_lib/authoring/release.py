"""Generate the learner's exercise notebooks from the instructor's solution notebooks.

``solutions/*.ipynb`` are the single source of truth. They use nbgrader's conventions, so an
instructor who runs nbgrader can use them unchanged:

- code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` in a cell whose metadata has
  ``nbgrader.solution: true`` becomes a stub that raises ``NotImplementedError`` at the same
  indentation (in a markdown answer cell: "YOUR ANSWER HERE");
- code between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` in a graded test cell is
  removed;
- outputs and execution counts are cleared.

Usage::

    python -m addnorm_lib.authoring.release          # writes exercises/<name>.ipynb per solution
    python -m addnorm_lib.authoring.release --check  # exit 1 if exercises/ is out of date
"""

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

SOLUTION_BEGIN, SOLUTION_END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = "YOUR ANSWER HERE"
NBGRADER_KEYS = {"grade", "solution", "locked", "grade_id", "schema_version"}


class ReleaseError(ValueError):
    """A solution notebook breaks the exercise format; the message names the notebook and cell."""


def _marker_regions(lines, begin, end, where):
    """(start, stop) line indices of each begin...end region, markers included; checks nesting."""
    regions, start = [], None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped == begin:
            if start is not None:
                raise ReleaseError(f"{where}: '{begin}' again before '{end}' (line {index + 1})")
            start = index
        elif stripped == end:
            if start is None:
                raise ReleaseError(f"{where}: '{end}' without '{begin}' (line {index + 1})")
            regions.append((start, index))
            start = None
    if start is not None:
        raise ReleaseError(f"{where}: '{begin}' on line {start + 1} is never closed by '{end}'")
    return regions


def strip_solution(source: str, where: str, keep_markers: bool = False) -> str:
    """Replace each solution region of a code cell with a NotImplementedError stub; with
    ``keep_markers``, the ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines stay around it."""
    lines = source.split("\n")
    regions = _marker_regions(lines, SOLUTION_BEGIN, SOLUTION_END, where)
    if not regions:
        raise ReleaseError(f"{where}: a solution cell must mark its answer with '{SOLUTION_BEGIN}'")
    for start, stop in reversed(regions):
        indent = re.match(r"\s*", lines[start]).group(0)
        stub = [indent + line for line in CODE_STUB]
        lines[start : stop + 1] = [lines[start], *stub, lines[stop]] if keep_markers else stub
    return "\n".join(lines)


def strip_hidden_tests(source: str, where: str) -> str:
    """Remove each hidden-test region, markers included."""
    lines = source.split("\n")
    for start, stop in reversed(_marker_regions(lines, HIDDEN_BEGIN, HIDDEN_END, where)):
        del lines[start : stop + 1]
    return "\n".join(lines).rstrip("\n")


def validate(nb, name: str) -> None:
    """Check the nbgrader metadata: unique grade_ids, points on graded cells, locked tests."""
    seen = set()
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader")
        where = f"{name}, cell {index}"
        has_markers = any(m in cell.source for m in (SOLUTION_BEGIN, HIDDEN_BEGIN))
        if meta is None:
            if has_markers:
                raise ReleaseError(f"{where}: has nbgrader markers but no nbgrader metadata")
            continue
        missing = NBGRADER_KEYS - set(meta)
        if missing:
            raise ReleaseError(f"{where}: nbgrader metadata lacks {sorted(missing)}")
        if meta["schema_version"] != 3:
            raise ReleaseError(f"{where}: nbgrader schema_version must be 3")
        if meta["grade_id"] in seen:
            raise ReleaseError(f"{where}: grade_id {meta['grade_id']!r} is used twice")
        seen.add(meta["grade_id"])
        if meta["grade"] and not (
            isinstance(meta.get("points"), int | float) and meta["points"] > 0
        ):
            raise ReleaseError(f"{where}: graded cell {meta['grade_id']!r} needs points > 0")
        if meta["grade"] and not meta["locked"] and not meta["solution"]:
            raise ReleaseError(f"{where}: graded test cell {meta['grade_id']!r} must be locked")
        if SOLUTION_BEGIN in cell.source and not meta["solution"]:
            raise ReleaseError(f"{where}: solution markers in a cell without solution: true")


def stub_solutions(solution, name: str = "notebook"):
    """The solution notebook with every answer replaced by its stub; test cells (hidden tests
    included) unchanged; outputs cleared. This is what a grader builds a graded notebook from."""
    validate(solution, name)
    stubbed = copy.deepcopy(solution)
    for index, cell in enumerate(stubbed.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            if meta.get("solution"):
                cell.source = strip_solution(cell.source, f"{name}, cell {index}")
        elif meta.get("solution"):
            cell.source = MARKDOWN_STUB
    return stubbed


def lock(cell) -> None:
    """Jupyter's own cell locks, as nbgrader's release sets them: no nbgrader cell can be deleted,
    and only answer cells can be edited (test and read-only cells cannot)."""
    meta = cell.metadata.get("nbgrader")
    if not meta:
        return
    cell.metadata["deletable"] = False
    if meta.get("locked") or not meta.get("solution"):
        cell.metadata["editable"] = False


def release(solution, name: str = "notebook"):
    """The exercise notebook for a solution notebook (a new notebook; the input is unchanged)."""
    exercise = stub_solutions(solution, name)
    for index, cell in enumerate(exercise.cells):
        if cell.cell_type == "code" and HIDDEN_BEGIN in cell.source:
            cell.source = strip_hidden_tests(cell.source, f"{name}, cell {index}")
        lock(cell)
    return exercise


def exercise_text(solution_path: Path) -> str:
    """The exercise notebook for a solution file, serialized exactly as it is written to disk."""
    try:
        solution = nbformat.read(solution_path, as_version=4)
    except Exception as err:
        raise ReleaseError(f"{solution_path}: not a readable notebook ({err})") from err
    return nbformat.writes(release(solution, solution_path.name)) + "\n"


def main(argv=None) -> int:
    """Write ``exercises/`` from ``solutions/``, or with ``--check`` only report stale ones.

    Exit status 0, 1 when ``--check`` finds stale exercises, 2 for unreadable or invalid solutions.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument("--exercises", type=Path, default=Path("exercises"))
    parser.add_argument("--check", action="store_true", help="only report stale exercises")
    args = parser.parse_args(argv)

    solution_paths = sorted(args.solutions.glob("*.ipynb"))
    if not solution_paths:
        print(f"error: no solution notebooks in {args.solutions}/", file=sys.stderr)
        return 2
    stale = []
    for path in solution_paths:
        try:
            text = exercise_text(path)
        except ReleaseError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        target = args.exercises / path.name
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(target)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target}")
    if args.check and stale:
        names = ", ".join(str(p) for p in stale)
        print(f"stale exercises: {names}; run `make exercises` to regenerate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
