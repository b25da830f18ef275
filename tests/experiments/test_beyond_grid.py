"""The "Beyond" chapter's measurements at initialization and its cached training grid."""

import math
from pathlib import Path

import numpy as np
import pytest

from addnorm_lib.experiments.beyond import (
    init_block_gradients,
    init_stream_rms,
    logit_scale_stats,
)
from addnorm_lib.experiments.beyond_grid import (
    GRID_CONFIG,
    conclusion_tests,
    grid_cells,
    grid_run,
    grid_value,
    load_grid,
    over_grid,
    peak_logit,
)
from tests.experiments.drift import assert_early_steps_agree, assert_reproduces

GRID_FILE = Path(__file__).resolve().parents[2] / "book" / "data" / "beyond_grid.json"


def test_logit_scale_stats_grow_as_s_squared_without_qk_norm_and_not_with_it():
    plain = logit_scale_stats(None, 0, [1, 2, 4], d_model=16, num_heads=2, seq_len=6)
    np.testing.assert_allclose(plain.largest / plain.largest[0], [1, 4, 16], rtol=1e-4)
    assert plain.entropy[0] > plain.entropy[-1] and math.isinf(plain.bound)
    qk = logit_scale_stats("head", 0, [1, 2, 4], d_model=16, num_heads=2, seq_len=6)
    np.testing.assert_allclose(qk.largest, qk.largest[0], rtol=1e-4)
    assert (qk.largest <= qk.bound).all() and math.isclose(qk.bound, math.sqrt(8))
    assert (qk.entropy >= 0).all() and (qk.entropy <= math.log(6) + 1e-9).all()


def test_init_stream_rms_ignores_the_branch_scale_with_output_norms_only():
    kwargs = {"num_layers": 3, "d_model": 16}
    for variant in ("peri", "output"):
        np.testing.assert_allclose(
            init_stream_rms(variant, 0, 3.0, **kwargs),
            init_stream_rms(variant, 0, 1.0, **kwargs),
            rtol=1e-4,
        )
    pre1, pre3 = (init_stream_rms("pre", 0, f, **kwargs) for f in (1.0, 3.0))
    assert pre1.shape == (4,) and pre1[0] == pre3[0] and (pre3[1:] > pre1[1:]).all()


def test_init_block_gradients_one_norm_per_block():
    grads = init_block_gradients("pre", 0, num_layers=3, d_model=16)
    assert grads.shape == (3,) and (grads > 0).all()
    np.testing.assert_array_equal(grads, init_block_gradients("pre", 0, num_layers=3, d_model=16))


def tiny_grid() -> dict:
    """A grid of two variants, one learning rate, two seeds, budgets 3 and 6 (about a second)."""
    config = {"lrs": [1e-2], "budgets": [3, 6], "seeds": [0, 1]}
    config.update(num_layers=2, d_model=16, nhead=2, dim_feedforward=32, held_out_size=16)
    runs = [grid_run(v, s, 1e-2, config) for v in ("pre", "qk") for s in (0, 1)]
    return {"config": {**GRID_CONFIG, **config}, "runs": runs}


def test_grid_run_measures_every_budget_and_the_grid_is_indexed_by_seed():
    grid = tiny_grid()
    run = grid["runs"][0]
    assert len(run["losses"]) == len(run["max_logit"]) == 6 and set(run["at"]) == {"3", "6"}
    assert len(run["at"]["6"]["stream_rms"]) == 3  # input and 2 layers
    assert run["at"]["3"]["qk_bound"] is None and grid["runs"][2]["at"]["3"]["qk_bound"] > 0
    assert grid_cells(grid) == [(1e-2, 3), (1e-2, 6)]
    loss = grid_value(grid, "qk", "loss", 1e-2, 6)
    assert loss.tolist() == [grid["runs"][2]["at"]["6"]["loss"], grid["runs"][3]["at"]["6"]["loss"]]
    assert grid_value(grid, "pre", "start_logit", 1e-2, 6)[1] == grid["runs"][1]["max_logit"][0]
    assert peak_logit(grid, "pre", 1e-2, 3)[0] == max(run["max_logit"][:3])
    ok = over_grid(grid, lambda lr, b: grid_value(grid, "qk", "loss", lr, b) < 10)
    assert ok.shape == (2, 2) and ok.all()
    assert over_grid(grid, lambda lr, b: np.array([True, False]), budgets=[6]).shape == (1, 2)
    # a run trained to 6 steps is, at step 3, the run trained to 3
    short = grid_run("pre", 0, 1e-2, {**grid["config"], "budgets": [3]})
    assert short["losses"] == run["losses"][:3] and short["at"]["3"] == run["at"]["3"]


@pytest.mark.skipif(not GRID_FILE.exists(), reason="the cached grid has not been made")
@pytest.mark.parametrize(("variant", "seed", "lr"), [("pre", 0, 1e-2), ("dyt", 5, 3e-2)])
def test_the_cached_grid_reproduces(variant, seed, lr):
    """Re-run two cells of the cached grid for the first budget (100 steps): the same numbers,
    up to the drift of another processor's rounding (tests/experiments/drift.py)."""
    grid = load_grid(GRID_FILE)
    budget = min(grid["config"]["budgets"])
    cached = next(
        r
        for r in grid["runs"]
        if r["variant"] == variant and r["seed"] == seed and math.isclose(r["lr"], lr)
    )
    fresh = grid_run(variant, seed, cached["lr"], {**grid["config"], "budgets": [budget]})
    assert len(fresh["losses"]) == budget
    assert_early_steps_agree(fresh["losses"], cached["losses"])  # later ones: noise on ~1e-3
    for key in ("loss", "accuracy", "max_logit", "stream_rms"):  # a learned model's loss: < 1e-2
        floor = 1e-2 if key == "loss" else 1e-9
        assert_reproduces(fresh["at"][str(budget)][key], cached["at"][str(budget)][key], key, floor)
    assert set(conclusion_tests(grid)) >= {"qk_under_bound", "dyt_behind", "streams_below"}
