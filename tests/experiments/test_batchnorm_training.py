"""The BatchNorm chapter's training grid: the students, the scale invariance it explains, the
helpers that summarize the grid, and the cached grid (``book/data/batchnorm_lr_grid.json``,
regenerated with ``python -m addnorm_lib.experiments.batchnorm_training lr-grid --out ...``):
re-running one of its runs gives the cached numbers."""

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from addnorm_lib.experiments import batchnorm_training as bt
from tests.experiments.drift import assert_reproduces

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "book" / "data" / "batchnorm_lr_grid.json"
SMALL = {"depth": 3, "width": 16, "budgets": [30, 60], "n_train": 256, "n_test": 128}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def grid():
    return bt.load_grid(CACHE)


def test_both_students_start_from_the_same_weights():
    torch.manual_seed(3)
    plain = [m.weight for m in bt.build(False) if isinstance(m, nn.Linear)]
    torch.manual_seed(3)
    normed = bt.build(True)
    assert sum(isinstance(m, nn.BatchNorm1d) for m in normed) == bt.CONFIG["depth"]
    weights = [m.weight for m in normed if isinstance(m, nn.Linear)]
    assert all(torch.equal(a, b) for a, b in zip(plain, weights, strict=True))


def test_scale_invariance_gradient_scales_and_is_orthogonal():
    inv = bt.scale_invariance(scale=4.0)
    assert inv.output_change < 1e-3
    assert abs(inv.grad_ratio - 4.0) < 1e-3
    assert inv.cosine < 1e-4


def test_train_run_records_every_budget_and_is_seeded():
    a = bt.train_run(True, 0.1, seed=0, config=SMALL)
    b = bt.train_run(True, 0.1, seed=0, config=SMALL)
    assert a.losses.shape == (60,) and len(a.final_loss) == len(a.accuracy) == 2
    assert len(a.row_norm) == 3 and a.nan_step is None
    assert a.final_loss == b.final_loss and a.row_norm == b.row_norm
    assert a.final_loss[1] < math.log(4)  # it learns something


def test_summary_helpers():
    record = {
        "config": {"budgets": [10, 30]},
        "runs": [
            {"batch_norm": True, "lr": 0.1, "seed": 0, "final_loss": [0.4, 0.2]},
            {"batch_norm": True, "lr": 1.0, "seed": 0, "final_loss": [0.3, math.nan]},
            {"batch_norm": False, "lr": 0.1, "seed": 0, "final_loss": [0.9, 0.6]},
        ],
    }
    assert len(bt.select(record, batch_norm=True)) == 2
    best = bt.best_per_seed(record, True, 30)
    assert best[0]["lr"] == 0.1  # the diverged run never wins
    assert bt.best_per_seed(record, True, 10)[0]["lr"] == 1.0
    run = record["runs"][1]
    assert bt.usable(run, 10, 0.5, [10, 30]) and not bt.usable(run, 30, 0.5, [10, 30])


def test_cache_covers_the_grid_with_the_chapter_config(grid):
    assert grid["config"] == bt.CONFIG
    assert grid["lrs"] == list(bt.GRID_LRS) and grid["seeds"] == list(bt.GRID_SEEDS)
    assert len(grid["seeds"]) >= 6 and grid["config"]["budgets"] == [300, 900]
    assert len(grid["runs"]) == 2 * len(bt.GRID_LRS) * len(bt.GRID_SEEDS)
    assert "lr-grid" in grid["command"] and grid["torch"]


@pytest.mark.parametrize(("batch_norm", "lr", "seed"), [(True, 0.1, 3), (False, 0.01, 1)])
def test_cached_runs_are_reproduced(grid, batch_norm, lr, seed):
    (cached,) = bt.select(grid, batch_norm=batch_norm, lr=lr, seed=seed)
    fresh = bt.run_cell(batch_norm, lr, seed)
    for key in ("final_loss", "accuracy", "row_norm", "nan_step"):  # to drift (tests/drift.py)
        assert_reproduces(fresh[key], cached[key], key)
