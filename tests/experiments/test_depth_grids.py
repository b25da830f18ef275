"""The depth chapter's cached grids: one cell of each re-run equals the cached value; the grid
runner writes the house format."""

import json
from pathlib import Path

import pytest

from addnorm_lib.experiments import depth_grids
from tests.experiments.drift import assert_reproduces

DATA = Path(__file__).resolve().parents[2] / "book" / "data"


pytestmark = pytest.mark.usefixtures("one_thread")


def cached_run(name: str, seed: int, steps: int, lr: float) -> dict:
    record = depth_grids.load_grid(DATA / f"depth_{name}_grid.json")
    (run,) = [
        r
        for r in record["runs"]
        if r["seed"] == seed and r["steps"] == steps and r["lr"] == pytest.approx(lr)
    ]
    return run


@pytest.mark.parametrize(
    ("name", "seed", "steps", "lr"),
    [
        ("ics", 2, 20, 1e-3),
        ("shift", 0, 300, 3e-3),
        ("revival", 1, 200, 1e-3),
    ],
)
def test_one_cell_of_each_grid_reproduces_the_cached_run(name, seed, steps, lr):
    runner = depth_grids.GRIDS[f"{name}-grid"].run
    # the same numbers, up to another processor's drift (tests/experiments/drift.py)
    assert_reproduces(runner(seed, steps=steps, lr=lr), cached_run(name, seed, steps, lr))


def test_cached_grids_cover_six_seeds_two_budgets_three_learning_rates():
    for name in ["ics", "shift", "revival"]:
        record = depth_grids.load_grid(DATA / f"depth_{name}_grid.json")
        config = record["config"]
        assert len(config["seeds"]) >= 6 and len(config["lrs"]) == 3
        assert config["steps"][1] == 3 * config["steps"][0]
        assert config["lrs"][0] == pytest.approx(config["lrs"][1] / 3)
        assert config["lrs"][2] == pytest.approx(config["lrs"][1] * 3)
        assert len(record["runs"]) == 6 * 2 * 3
        assert record["command"].startswith(
            f"python -m addnorm_lib.experiments.depth_grids {name}-grid --out"
        )
        assert record["torch"]


def test_run_grid_writes_every_cell_with_its_settings(tmp_path, monkeypatch):
    def tiny(seed, steps, lr):
        return {"value": seed + steps * lr}

    grid = depth_grids.Grid(tiny, seeds=(0, 1), steps=(2, 6), lrs=(1.0, 3.0, 9.0))
    monkeypatch.setitem(depth_grids.GRIDS, "tiny-grid", grid)
    out = tmp_path / "tiny.json"
    depth_grids.main(["tiny-grid", "--out", str(out)])
    record = json.loads(out.read_text())
    assert len(record["runs"]) == 12
    assert record["config"]["chapter_steps"] == 2 and record["config"]["chapter_lr"] == 3.0
    for run in record["runs"]:
        assert run["value"] == run["seed"] + run["steps"] * run["lr"]
    assert (
        record["command"] == f"python -m addnorm_lib.experiments.depth_grids tiny-grid --out {out}"
    )


def test_an_unknown_grid_is_refused():
    with pytest.raises(ValueError, match="grid must be one of"):
        depth_grids.run_grid("nope-grid")
