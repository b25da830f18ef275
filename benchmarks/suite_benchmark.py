"""Where the test suite's time goes, and what grading mutants in process saves, in one run.

    python benchmarks/suite_benchmark.py [--mutants N] [--suite] [--json FILE]

(a) Mutants. The first N mutants of tests/exercises/test_mutants.py (one per assignment first),
judged
    three ways: in the test process (tests/inprocess.py, as the suite grades most of them now),
    through the grader in one batch with ``--jobs 2`` (as the suite grades one per assignment),
    and through the grader one notebook at a time (``pipeline.grade_one``, as the suite graded every
    mutant before). Prints seconds per mutant and the ratios.
(b) ``--suite``: the whole suite as ``make test`` runs it (``pytest -n <cores + 1> --dist
    loadgroup``), timed, with the summed test durations of each xdist group (the book build and
    browser tests, the class grading run, ...) next to the wall-clock time: the longest group
    bounds the run.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from addnorm_lib.grading.pipeline import grade_one  # noqa: E402
from tests.conftest import FIXTURE_GROUPS, GRADE_ANYWHERE, run_python  # noqa: E402
from tests.exercises.test_mutants import MUTANTS, THROUGH_THE_GRADER, mutated  # noqa: E402
from tests.inprocess import grade_in_process  # noqa: E402

IN_PROCESS, BATCH, ONE_AT_A_TIME = (
    "in process",
    "grader, one batch (--jobs 2)",
    "grader, one notebook at a time",
)
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s\s+(?:setup|call|teardown)\s+(?P<test>\S+)$")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pick_mutants(count: int) -> list:
    """One mutant per assignment first, then the others in the order of the suite."""
    rest = [m for m in MUTANTS if m not in THROUGH_THE_GRADER]
    return (THROUGH_THE_GRADER + rest)[:count]


def grade_batch(mutants: list, folder: Path) -> None:
    for n, mutant in enumerate(mutants):
        nbformat.write(mutated(mutant), folder / f"mutant{n}-{mutant.assignment}.ipynb")
    options = ["--out", folder / "out", "--jobs", 2, *GRADE_ANYWHERE]
    graded = run_python("-m", "addnorm_lib.grading", folder, *options)
    graded.check_returncode()


def grade_each(mutants: list, folder: Path) -> None:
    for n, mutant in enumerate(mutants):
        path = folder / f"one{n}" / f"{mutant.assignment}.ipynb"
        path.parent.mkdir()
        nbformat.write(mutated(mutant), path)
        grade_one(path)


def mutant_figures(count: int) -> dict:
    mutants = pick_mutants(count)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "batch").mkdir()
        seconds = {
            IN_PROCESS: timed(
                lambda: [grade_in_process(mutated(m), m.assignment) for m in mutants]
            ),
            BATCH: timed(lambda: grade_batch(mutants, folder / "batch")),
            ONE_AT_A_TIME: timed(lambda: grade_each(mutants, folder)),
        }
    return {"mutants": len(mutants), "seconds": seconds}


# The suite's xdist groups (tests/conftest.py).
GROUPS = {"book", "browser", *FIXTURE_GROUPS.values()}


def group_of(test_id: str) -> str:
    """The xdist group that pytest-xdist appends to a grouped test's id ("...@book")."""
    suffix = test_id.rsplit("@", 1)[-1]
    return suffix if "@" in test_id and suffix in GROUPS else "(no group)"


def suite_figures() -> dict:
    workers = str((os.cpu_count() or 1) + 1)  # as make test runs it
    options = ["-n", workers, "--dist", "loadgroup", "-q", "--durations=0"]
    options += ["-p", "no:cacheprovider"]
    start = time.perf_counter()
    completed = run_python("-m", "pytest", *options, cwd=ROOT)
    wall = time.perf_counter() - start
    groups = defaultdict(float)
    for line in completed.stdout.splitlines():
        found = DURATION.match(line.strip())
        if found:
            groups[group_of(found["test"])] += float(found["seconds"])
    summary = completed.stdout.strip().splitlines()[-1] if completed.stdout.strip() else ""
    return {
        "wall": wall,
        "groups": dict(groups),
        "summary": summary,
        "returncode": completed.returncode,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=len(THROUGH_THE_GRADER))
    parser.add_argument("--suite", action="store_true", help="also time the whole test suite")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    figures = {"mutants": mutant_figures(args.mutants)}
    count, seconds = figures["mutants"]["mutants"], figures["mutants"]["seconds"]
    print(f"(a) {count} mutants, seconds per mutant:")
    for name, total in seconds.items():
        print(f"    {name:<32} {total / count:7.2f}")
    each, batch, here = seconds[ONE_AT_A_TIME], seconds[BATCH], seconds[IN_PROCESS]
    print(f"    one at a time / in process: {each / here:.1f}")
    print(f"    one at a time / batch:      {each / batch:.1f}")
    if args.suite:
        suite = figures["suite"] = suite_figures()
        print(f"(b) the suite: {suite['wall']:.0f} s wall-clock ({suite['summary']})")
        for name, total in sorted(suite["groups"].items(), key=lambda kv: -kv[1]):
            print(
                f"    {name:<28} {total:6.0f} s of test time ({total / suite['wall']:.2f} of wall)"
            )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0 if figures.get("suite", {}).get("returncode", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
