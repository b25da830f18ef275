"""The residual chapter's grids: checkpoints equal separate runs, and the cached runs reproduce."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from addnorm_lib.experiments import residual_scaling as rs
from addnorm_lib.experiments import residuals_grid as rg
from tests.experiments.drift import assert_early_steps_agree, assert_reproduces

DATA = Path(__file__).resolve().parents[2] / "book" / "data"


def test_checkpoints_equal_runs_of_each_budget():
    # the loss after 5 steps of a 12-step run is the loss of a 5-step run
    x, y = rs.teacher_task(64, 4)
    curve, initial, at = rg.train_checkpoints(
        rs.seeded_mlp(0, 4, 8, 3, residual=True), x, y, (5, 12), minibatch=16, lr=3e-3
    )
    for steps, value in zip((5, 12), at, strict=True):
        c, i, final = rs.train_regression(
            rs.seeded_mlp(0, 4, 8, 3, residual=True), x, y, steps, minibatch=16, lr=3e-3
        )
        assert final == value and i == initial
        np.testing.assert_array_equal(curve[:steps], c)


def test_grids_cover_seeds_budgets_and_learning_rates():
    for spec in rg.GRIDS.values():
        assert len(spec.seeds) >= 6
        assert spec.budgets == (300, 900)
        assert spec.lrs == pytest.approx((1e-3 / 3, 1e-3, 3e-3))
    depths = {n.depth for n in rg.GRIDS["degradation-grid"].networks}
    assert depths == {30, 100}


def test_select_and_seed_band():
    runs = [
        {"depth": 30, "lr": 1e-3, "curve": [1.0, 2.0, 3.0]},
        {"depth": 100, "lr": 1e-3, "curve": [4.0, 5.0, 6.0]},
    ]
    assert rg.select(runs, depth=100) == [runs[1]]
    steps, curves = rg.seed_band(runs, 2 * rg.CURVE_WINDOW)
    np.testing.assert_array_equal(steps, [10, 20])
    np.testing.assert_array_equal(curves, [[1.0, 4.0], [2.0, 5.0]])


def _cached(name: str, **fields) -> dict:
    runs = json.loads((DATA / f"residuals_{name}_grid.json").read_text())["runs"]
    (run,) = rg.select(runs, **fields)
    return run


@pytest.mark.parametrize(
    ("grid", "name", "fields"),
    [
        ("degradation-grid", "degradation", dict(residual=False, depth=100, lr=1e-3, seed=3)),
        ("training-grid", "training", dict(activation="sigmoid", residual=True, lr=3e-3, seed=5)),
    ],
)
def test_a_cached_run_reproduces(grid, name, fields, one_thread):  # one thread, as the grid ran
    # re-run the first budget (300 steps) of one cached run: same losses, same curve, up to
    # another processor's drift (tests/experiments/drift.py)
    cached = _cached(name, **fields)
    spec = dataclasses.replace(rg.GRIDS[grid], budgets=(300,))
    (network,) = [
        n
        for n in spec.networks
        if all(getattr(n, k) == fields[k] for k in n.__dict__ if k in fields)
    ]
    run = rg.train_one(spec, network, fields["lr"], fields["seed"])
    assert run["initial"] == pytest.approx(cached["initial"], rel=1e-5)
    assert_reproduces(run["final"]["300"], cached["final"]["300"], "final")
    assert_early_steps_agree(run["curve"][:3], cached["curve"])  # the curve: every 10 steps
    assert_reproduces(run["curve"], cached["curve"][:30], "curve")
