"""How fast a Dask cluster grades, per worker core, next to the local runner, measured in one run.

    python benchmarks/cluster_benchmark.py [--submissions N] [--json FILE]

Generates N submissions of the LayerNorm assignment (correct, partly wrong, broken, in turn, as
``grade_benchmark.py`` does) and grades them with

(a) the local runner: ``python -m addnorm_lib.grading --jobs C`` (C: this machine's cores);
(b) a Dask cluster on this machine, one ``dask worker --nthreads C``;
(c) a Dask cluster on this machine, C ``dask worker --nthreads 1``.

Each cluster grades the class twice: the first run pays each worker's start (its zygotes import
numpy and torch), the second is the steady state a course sees from its second assignment on
(workers keep their sandboxes between runs). It prints seconds, submissions per second, and
submissions per second per worker core, and what a class of 10,000 needs at that rate.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.grade_benchmark import UNLIMITED, make_submissions  # noqa: E402
from tests.grading.dask_cluster import running_cluster  # noqa: E402

CLASS = 10_000  # submissions of one assignment, for the closing estimate


def grade(folder: Path, out: Path, *options: str) -> float:
    """Seconds to grade ``folder`` with the grader's command line."""
    command = [sys.executable, "-m", "addnorm_lib.grading", str(folder), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.monotonic()
    completed = subprocess.run(
        [*command, *options, *UNLIMITED], capture_output=True, text=True, env=env, cwd=ROOT
    )
    seconds = time.monotonic() - start
    if completed.returncode != 0:
        raise SystemExit(f"grading failed: {completed.stderr[-2000:]}")
    rows = json.loads((out / "grades.json").read_text())["grades"]
    statuses = sorted({row["status"] for row in rows})
    if statuses != ["ok"]:  # a grader whose kernels die is fast: such a time counts for nothing
        raise SystemExit(f"the grader did not grade ({statuses}): {completed.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=24)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    cores, count = os.cpu_count() or 1, arguments.submissions
    results = {}
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as temporary:
        base = Path(temporary)
        folder = base / "class"
        folder.mkdir()
        make_submissions(folder, count)
        results["local"] = grade(folder, base / "local", "--jobs", str(cores))
        for name, workers, threads in (("one worker", 1, cores), ("one per core", cores, 1)):
            (base / name).mkdir()
            with running_cluster(base / name, workers, threads) as cluster:
                address = ("--dask-scheduler", cluster.address)
                results[f"{name}, first run"] = grade(folder, base / f"{name}-1", *address)
                results[f"{name}, second run"] = grade(folder, base / f"{name}-2", *address)
    print(f"{count} submissions, {cores} cores (worker cores in all: {cores})")
    for name, seconds in results.items():
        rate = count / seconds
        per_core = rate / cores
        print(f"  {name:<26} {seconds:6.1f} s  {rate:5.2f} per s  {per_core:5.2f} per s per core")
    steady = min(v for k, v in results.items() if "second" in k)
    per_core = count / steady / cores
    core_hours = CLASS / per_core / 3600
    print(
        f"a class of {CLASS:,} at {per_core:.2f} per second per worker core: "
        f"{core_hours:.1f} core-hours: {core_hours:.0f} worker cores for one hour, "
        f"{6 * core_hours:.0f} for ten minutes"
    )
    if arguments.json:
        arguments.json.write_text(json.dumps({"submissions": count, "cores": cores, **results}))


if __name__ == "__main__":
    main()
