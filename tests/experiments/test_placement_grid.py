"""The placement chapter's warm-up grid trains each seed as a model of its own, and its cache is
current.

``book/data/placement_warmup_grid.json`` holds the grid that the chapter reads (regenerate it with
``python -m addnorm_lib.experiments.placement_grid warmup-grid --out
book/data/placement_warmup_grid.json``). A whole cell takes minutes, so the cache test re-runs the
first steps of one cell and compares its training losses with the file: the schedule and the
batches do not depend on the number of steps.
"""

import json

import numpy as np
import pytest
import torch
from torch.func import stack_module_state

from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.experiments.placement import PlacementModel, RunSpec, run_spec
from addnorm_lib.experiments.placement_grid import (
    GRID_CONFIG,
    GridCell,
    grid_cells,
    stacked_logits,
    train_cell,
)
from addnorm_lib.experiments.placement_results import escape_steps, grid_outcomes
from tests.conftest import ROOT

CACHE = ROOT / "book" / "data" / "placement_warmup_grid.json"
SIZES = {k: GRID_CONFIG[k] for k in ("d_model", "nhead", "dim_feedforward", "batch_size")}


@pytest.fixture(scope="module")
def cache():
    return json.loads(CACHE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_stacked_logits_are_each_models_own(placement):
    models = []
    for seed in (0, 1, 2):
        set_seed(seed)
        models.append(PlacementModel(placement, 12, 8, 3, 16, 2, 64))
    params, _ = stack_module_state(models)
    tokens = torch.randint(12, (3, 5, 8))  # (S, B, T): one batch per model
    logits = stacked_logits(params, placement, tokens, num_layers=3, nhead=2)
    for model, x, y in zip(models, tokens, logits, strict=True):
        torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)


def test_a_stacked_seed_trains_as_the_sweep_trains_it_alone():
    """Seed 0 of a stacked cell takes the steps that the sweep's trainer takes for it alone."""
    config = {**GRID_CONFIG, "seeds": [0, 1, 2]}
    steps = 30
    cell = train_cell(GridCell("post", "radam", 0, 3e-3), config, steps=steps)
    threads = torch.get_num_threads()
    try:
        alone = run_spec(RunSpec("post", "radam", 3e-3, 0, 0), {**SIZES, "steps": steps})
    finally:
        torch.set_num_threads(threads)
    windows = np.array(alone["losses"]).reshape(-1, config["window"]).mean(1)
    np.testing.assert_allclose(cell["train_loss"][0], windows, atol=1e-4)
    assert cell["held_out_loss"] == {}  # no scoring step reached


def test_cache_covers_the_grid_and_matches_the_config(cache):
    assert cache["config"] == GRID_CONFIG
    cells = [GridCell(c["placement"], c["optimizer"], c["warmup"], c["lr"]) for c in cache["cells"]]
    assert cells == grid_cells()
    assert "python -m addnorm_lib.experiments.placement_grid warmup-grid" in cache["command"]
    n = len(GRID_CONFIG["seeds"])
    for c in cache["cells"]:
        assert set(c["held_out_accuracy"]) == {str(s) for s in GRID_CONFIG["score_at"]}
        assert len(c["train_loss"]) == n
        assert len(c["train_loss"][0]) == GRID_CONFIG["steps"] // GRID_CONFIG["window"]
    assert all(len(v) == n for v in grid_outcomes(cache).values())


def test_cached_cell_is_reproduced(cache):
    """The first 100 steps of a re-run give the cached training losses (one thread, float32)."""
    spec = GridCell("post", "adam", 100, 3e-3)
    (cached,) = [
        c
        for c in cache["cells"]
        if GridCell(c["placement"], c["optimizer"], c["warmup"], c["lr"]) == spec
    ]
    threads = torch.get_num_threads()
    try:
        now = train_cell(spec, steps=100)
    finally:
        torch.set_num_threads(threads)
    windows = 100 // GRID_CONFIG["window"]
    for seed_now, seed_cached in zip(now["train_loss"], cached["train_loss"], strict=True):
        np.testing.assert_allclose(seed_now, seed_cached[:windows], atol=2e-3)


def test_escape_steps_reads_the_first_window_below_the_level():
    cell = {"train_loss": [[2.4, 2.0, 0.5, 0.1], [2.4, 2.4, 2.4, 2.4]]}
    assert escape_steps(cell, 1.0, window=10) == [30, None]
