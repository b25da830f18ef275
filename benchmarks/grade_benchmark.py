"""How fast the grader is, next to its floor and a simple baseline, measured in one run.

    python benchmarks/grade_benchmark.py [--submissions N] [--jobs J] [--json FILE]

Generates N submissions of the LayerNorm assignment (correct, partly wrong, broken, in turn),
builds the graded notebooks the grader would build, and times

(a) the floor: plainly executing those graded notebooks with nbclient, J at a time;
(b) the grader: ``python -m addnorm_lib.grading`` on the submissions with ``--jobs J``;
(c) the baseline: one sequential ``pytest --nbval-lax`` over the graded notebooks.

(a) and (c) start every kernel from scratch, with no sandbox; (b) runs each kernel in its
submission's bubblewrap sandbox and cgroup, forked warm from a zygote (see
``addnorm_lib/grading/_warm_kernels.py``), which is why it can beat (a).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbclient
import nbformat

from addnorm_lib.checks._record import OBSERVATIONS_ENV
from addnorm_lib.grading import assemble, bubblewrap, cgroups

ROOT = Path(__file__).resolve().parent.parent
# Grading a class without group limits needs its flag where none can be had (no cgroup, no scope).
NO_LIMITS_HERE = cgroups.cgroup_problem() and cgroups.systemd_run_problem()
UNLIMITED = ["--no-group-limits"] if NO_LIMITS_HERE else []
SOLUTION = ROOT / "solutions" / "layernorm.ipynb"
WRONG_FORWARD = (
    "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    mean, var = x.mean(-1, keepdims=True), x.var(-1, ddof=1, keepdims=True)\n"
    "    return gamma * (x - mean) / np.sqrt(var + eps) + beta\n"
)


def make_submissions(folder: Path, count: int) -> list[Path]:
    """count notebooks: correct, partly wrong (unbiased variance), broken (a syntax error)."""
    paths = []
    for i in range(count):
        nb = nbformat.read(SOLUTION, as_version=4)
        kind = ("correct", "partly_wrong", "broken")[i % 3]
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if kind == "partly_wrong" and grade_id == "layer_norm":
                cell.source = WRONG_FORWARD
            if kind == "broken" and grade_id == "layer_norm_backward":
                cell.source = "def layer_norm_backward(dy, x, gamma, eps=1e-5)\n    return"
        path = folder / f"student{i:03d}_{kind}_layernorm.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def graded_notebooks(submissions: list[Path], folder: Path) -> list[Path]:
    assignment = assemble.load_assignment(SOLUTION)
    paths = []
    for path in submissions:
        graded, _ = assemble.assemble(assignment, nbformat.read(path, as_version=4))
        # nbval and the grader skip NBVAL_SKIP cells (the ungraded training cell): so does (a)
        graded.cells = [cell for cell in graded.cells if "NBVAL_SKIP" not in cell.source]
        target = folder / path.name
        nbformat.write(graded, target)
        paths.append(target)
    return paths


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def floor(paths: list[Path], jobs: int) -> None:
    def run(path):
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            nb,
            kernel_name="python3",
            allow_errors=True,
            timeout=120,
            resources={"metadata": {"path": path.parent}},
        )
        client.execute()

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, paths))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    sandboxed = bubblewrap.bubblewrap_problem() is None  # else (b) runs without it, and says so
    with tempfile.TemporaryDirectory(prefix="addnorm-bench-") as tmp:
        tmp = Path(tmp)
        for name in ("submissions", "graded", "observations", "out"):
            (tmp / name).mkdir()
        submissions = make_submissions(tmp / "submissions", args.submissions)
        graded = graded_notebooks(submissions, tmp / "graded")
        os.environ[OBSERVATIONS_ENV] = str(tmp / "observations")  # checks record, as when graded
        seconds = {
            "floor (nbclient)": timed(lambda: floor(graded, args.jobs)),
            "grader": timed(
                lambda: subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "addnorm_lib.grading",
                        str(tmp / "submissions"),
                        "--out",
                        str(tmp / "out"),
                        "--jobs",
                        str(args.jobs),
                        *(UNLIMITED if sandboxed else ["--no-sandbox"]),
                    ],
                    check=True,
                    capture_output=True,
                )
            ),
            "sequential pytest --nbval-lax": timed(
                lambda: subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "--nbval-lax",
                        "--nbval-current-env",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        *map(str, graded),
                    ],
                    cwd=tmp,
                    capture_output=True,
                )
            ),
        }
        report = json.loads((tmp / "out" / "grades.json").read_text())
        rows = report["grades"]
    # A grader whose kernels die is fast: its time counts only if it graded every submission.
    statuses = sorted({row["status"] for row in rows})
    if len(rows) != args.submissions or statuses != ["ok"]:
        print(f"error: the grader did not grade: {len(rows)} rows, statuses {statuses}")
        return 1
    floor_s, grader_s = seconds["floor (nbclient)"], seconds["grader"]
    baseline_s = seconds["sequential pytest --nbval-lax"]
    print(f"{args.submissions} submissions, {args.jobs} jobs, {os.cpu_count()} cores")
    print(f"  grader's kernels: sandbox {report['sandbox']}; group limits {report['group_limits']}")
    for name, value in seconds.items():
        print(f"  {name:<32} {value:7.1f} s  ({value / args.submissions:.2f} s per notebook)")
    print(f"  grader / floor    = {grader_s / floor_s:.2f}   (target: at most 1.25)")
    print(f"  baseline / grader = {baseline_s / grader_s:.2f}   (target: at least 1.8)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "submissions": args.submissions,
                    "jobs": args.jobs,
                    "seconds": seconds,
                    "graded": len(rows),
                    "sandbox": report["sandbox"],
                    "group_limits": report["group_limits"],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
