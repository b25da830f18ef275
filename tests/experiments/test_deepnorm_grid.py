"""The DeepNorm grid scores a run as a shorter run would, and its cached cells are current.

``book/data/deepnorm_stacks_grid.json`` and ``book/data/deepnorm_ablation_grid.json`` hold the
grid that the DeepNorm pages read (regenerate them with
``python -m addnorm_lib.experiments.deepnorm_grid {stacks-grid,ablation-grid} --out FILE``).
"""

import json

import numpy as np
import pytest
import torch

from addnorm_lib.experiments.deepnorm import (
    CHAPTER_CONFIG,
    cached_array,
    lower_half_gradient,
    make_variant,
    train_sequence_model,
)
from addnorm_lib.experiments.deepnorm_grid import (
    GRID_PLAN,
    GRID_SEEDS,
    GRIDS,
    grid_array,
    grid_cell,
    grid_summary,
    train_with_checkpoints,
)
from tests.conftest import ROOT
from tests.experiments.test_deepnorm import SIZES  # a small model, shared

FILES = {
    name: ROOT / "book" / "data" / f"deepnorm_{name.split('-')[0]}_grid.json" for name in GRIDS
}


def test_checkpoint_scores_equal_those_of_shorter_runs():
    run = train_with_checkpoints(make_variant("DeepNorm", 3, SIZES), 3, budgets=(4, 9), lr=3e-3)
    for steps in (4, 9):
        short = train_sequence_model(
            make_variant("DeepNorm", 3, SIZES), 3, steps=steps, lr=3e-3, change_steps=1
        )
        np.testing.assert_array_equal(run.losses[:steps], short.losses)
        assert run.held_out_loss[steps] == short.final_loss
        assert run.held_out_accuracy[steps] == short.final_accuracy
        assert run.first_update == short.output_change[0]


def test_grid_array_lays_out_lrs_seeds_and_budgets():
    runs = [
        {
            "variant": "v",
            "lr": 1.0,
            "seed": 0,
            "budgets": [2, 6],
            "first_update": 0.5,
            "held_out_loss": [1.0, None],
            "held_out_accuracy": [0.1, 0.2],
            "losses": [1, 2, 3],
        },
        {
            "variant": "v",
            "lr": 2.0,
            "seed": 0,
            "budgets": [2],
            "first_update": 0.7,
            "held_out_loss": [3.0],
            "held_out_accuracy": [0.3],
            "losses": [4, 5],
        },
    ]
    grid = {"lrs": [1.0, 2.0], "seeds": [0], "budgets": [2, 6], "runs": runs}
    loss = grid_array(grid, "v", "held_out_loss")
    assert loss.shape == (2, 1, 2)
    np.testing.assert_array_equal(loss[:, 0, 0], [1.0, 3.0])
    assert np.isnan(loss[0, 0, 1]) and np.isnan(loss[1, 0, 1])  # diverged; not trained
    np.testing.assert_array_equal(grid_array(grid, "v", "first_update"), [[0.5], [0.7]])
    losses = grid_array(grid, "v", "losses")
    assert losses.shape == (2, 1, 6) and np.isnan(losses[1, 0, 2:]).all()


def test_cached_array_and_lower_half_gradient():
    cache = {
        "seeds": [1, 0],
        "runs": [
            {"variant": "a", "seed": 0, "x": [1.0, None]},
            {"variant": "a", "seed": 1, "x": [3.0, 4.0]},
        ],
    }
    got = cached_array(cache, "a", "x")
    np.testing.assert_array_equal(got[0], [3.0, 4.0])
    assert got[1, 0] == 1.0 and np.isnan(got[1, 1])
    grads = np.array([9.0, 1.0, 4.0, 7.0, 7.0, 2.0])  # L = 5 layers: lower half is l = 1, 2
    assert lower_half_gradient(grads) == pytest.approx(np.sqrt(0.5 * 2.0))


@pytest.fixture(scope="module")
def grids():
    return {name: json.loads(path.read_text(encoding="utf-8")) for name, path in FILES.items()}


def test_grid_files_cover_the_plan(grids):
    for name, grid in grids.items():
        assert grid["variants"] == list(GRIDS[name]) and grid["seeds"] == list(GRID_SEEDS)
        assert f"deepnorm_grid {name}" in grid["command"]
        cells = {(r["variant"], r["lr"], r["seed"]): r["budgets"] for r in grid["runs"]}
        assert cells == {
            (v, lr, s): list(b)
            for v in GRIDS[name]
            for lr, b in GRID_PLAN.items()
            for s in GRID_SEEDS
        }
        assert grid["config"]["num_layers"] == CHAPTER_CONFIG["num_layers"]


RECHECKED = [("stacks-grid", "DeepNorm", 3e-3, 1), ("ablation-grid", "alpha only", 1e-3 / 3, 4)]


@pytest.mark.parametrize(("grid_name", "variant", "lr", "seed"), RECHECKED, ids=str)
def test_cached_grid_cells_are_reproduced(grids, grid_name, variant, lr, seed):
    """A 100-step cell re-run gives the cached numbers (one CPU thread, float32)."""
    (cached,) = [
        r
        for r in grids[grid_name]["runs"]
        if (r["variant"], r["lr"], r["seed"]) == (variant, lr, seed)
    ]
    threads = torch.get_num_threads()
    try:
        now = grid_cell(variant, seed, lr, budgets=(100,))
    finally:
        torch.set_num_threads(threads)
    assert now["first_update"] == pytest.approx(cached["first_update"], rel=1e-4)
    np.testing.assert_allclose(now["losses"], cached["losses"][:100], rtol=1e-3)
    k = cached["budgets"].index(100)
    assert now["held_out_loss"][0] == pytest.approx(cached["held_out_loss"][k], rel=1e-3)
    assert now["held_out_accuracy"][0] == pytest.approx(cached["held_out_accuracy"][k], abs=3e-3)


def fake_grids(accuracy: dict, first: dict) -> list[dict]:
    """Two grid files in which ``accuracy[v][lr]`` is every budget's held-out accuracy of
    variant v and ``first[v][lr]`` its first update, on two seeds (loss = 1 - accuracy)."""
    grids = []
    for variants in GRIDS.values():
        runs = [
            {
                "variant": v,
                "seed": s,
                "lr": lr,
                "budgets": list(GRID_PLAN[lr]),
                "first_update": first[v][lr],
                "held_out_accuracy": [accuracy[v][lr]] * len(GRID_PLAN[lr]),
                "held_out_loss": [1 - accuracy[v][lr]] * len(GRID_PLAN[lr]),
            }
            for v in variants
            for lr in GRID_PLAN
            for s in (0, 1)
        ]
        lrs = list(GRID_PLAN)
        grids.append({"variants": list(variants), "lrs": lrs, "seeds": [0, 1], "runs": runs})
        grids[-1]["budgets"] = [100, 300]
    return grids


def test_grid_summary_counts_what_the_pages_state():
    lo, mid, hi = GRID_PLAN
    accuracy = {
        "Post-LN": {lo: 0.2, mid: 0.1, hi: 0.1},
        "alpha only": {lo: 0.3, mid: 0.5, hi: 0.9},
        "swapped": {lo: 0.7, mid: 1.0, hi: 0.99},
        "DeepNorm": {lo: 0.3, mid: 1.0, hi: 0.2},
    }
    first = {
        "Post-LN": {lo: 0.5, mid: 1.0, hi: 1.5},
        "alpha only": {lo: 0.2, mid: 0.6, hi: 0.8},
        "swapped": {lo: 0.2, mid: 0.7, hi: 0.9},
        "DeepNorm": {lo: 0.05, mid: 0.1, hi: 0.3},
    }
    g = grid_summary(fake_grids(accuracy, first))
    assert (g["seeds"], g["runs"]) == (2, 8)
    assert g["learned_swapped"] == 8 - 2  # all but the slow rate
    assert (g["learned_deepnorm_chapter"], g["learned_deepnorm_300"]) == (2, 2)
    assert (g["learned_deepnorm_lo"], g["learned_deepnorm_hi"]) == (0, 0)
    assert g["best_acc_alpha_only_hi"] == 0.9
    assert (g["with_beta"], g["without_beta"]) == (6 + 4, 0)
    assert g["deep_not_post"] == 4
    # mid: learners' first updates 0.1 .. 0.7, non-learners' 0.6 .. 1.0 (overlap); hi: learner
    # 0.9 against non-learners 0.3 .. 1.5 (overlap); lo: no learner
    assert (g["mixed_lrs"], g["overlap_lrs"]) == (2, 2)
    assert g["swap_lower"] == 8 - 4 and g["swap_lower_hi"] == 2 and g["swap_lower_chapter"] == 0
