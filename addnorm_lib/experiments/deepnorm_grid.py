"""The DeepNorm chapter's robustness grid: its training conclusions re-checked off the chosen point.

The chapter's cached runs (``book/data/deepnorm_runs.json``) use one learning rate (1e-3) and one
budget (100 steps). This module trains the same 24-layer variants on more settings, 6 seeds each:
the budget tripled (300 steps, at the chapter's learning rate) and the learning rate moved off the
chosen point, times 1/3 and times 3 (at the chapter's budget). A 300-step run also gives the
100-step result: after update 100 it scores the model on the held-out batch that a
100-step run would draw (from a copy of the data generator, so training goes on unchanged), so
each 100-step cell equals what :func:`~addnorm_lib.experiments.deepnorm.train_sequence_model`
would return for 100 steps.

Two grids, each about 3 to 5 CPU-minutes on one thread (run them side by side)::

    nice -n 10 .venv/bin/python -m addnorm_lib.experiments.deepnorm_grid stacks-grid \\
        --out book/data/deepnorm_stacks_grid.json
    nice -n 10 .venv/bin/python -m addnorm_lib.experiments.deepnorm_grid ablation-grid \\
        --out book/data/deepnorm_ablation_grid.json

Each finished run is also appended to ``<out>.partial.jsonl``; ``--from-logs FILE ...`` assembles
the grid from such lines (the cells are independent and seeded, so it is the same file).
``stacks-grid``: Post-LN and DeepNorm; ``ablation-grid``: alpha only and the swapped
step. ``tests/experiments/test_deepnorm_grid.py`` re-runs two cells at 100 steps.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from addnorm_lib.experiments.deepnorm import (
    CHAPTER_CONFIG,
    SequenceModel,
    held_out_score,
    make_variant,
    relative_output_change,
    reverse_task,
    reverse_task_loss,
)
from addnorm_lib.experiments.records import write_record

__all__ = [
    "GRIDS",
    "GRID_BUDGETS",
    "GRID_LRS",
    "GRID_PLAN",
    "GRID_SEEDS",
    "GRID_SETTINGS",
    "LEARNED",
    "GridRun",
    "grid_array",
    "grid_cell",
    "grid_outcomes",
    "grid_summary",
    "load_grid",
    "train_with_checkpoints",
]

#: A run "learned" the task when it gets more than this fraction of the held-out tokens right.
LEARNED = 0.95

#: The seeds of the grid.
GRID_SEEDS = tuple(range(6))
#: The learning rates: the chapter's 1e-3 divided and multiplied by 3.
GRID_LRS = (1e-3 / 3, 1e-3, 3e-3)
#: The step budgets: the chapter's 100 steps and three times as many.
GRID_BUDGETS = (100, 300)
#: learning rate -> the budgets trained at it: both at the chapter's rate, 100 steps off it.
GRID_PLAN = {1e-3 / 3: (100,), 1e-3: GRID_BUDGETS, 3e-3: (100,)}
#: The grid's settings as (learning rate, budget), the chapter's first.
GRID_SETTINGS = ((1e-3, 100), (1e-3, 300), (1e-3 / 3, 100), (3e-3, 100))
#: grid name -> its variants.
GRIDS = {
    "stacks-grid": ("Post-LN", "DeepNorm"),
    "ablation-grid": ("alpha only", "swapped"),
}


@dataclass
class GridRun:
    """One training run of the grid.

    Attributes:
        losses: training cross-entropy of every step, float64 ``(max(budgets),)``, NaN after a
            divergence.
        first_update: the relative model update after the first step (as in the chapter).
        held_out_loss, held_out_accuracy: budget -> the held-out score after that many updates
            (NaN if training diverged before).
    """

    losses: np.ndarray
    first_update: float
    held_out_loss: dict[int, float]
    held_out_accuracy: dict[int, float]


def train_with_checkpoints(
    model: SequenceModel,
    seed: int,
    *,
    budgets: Sequence[int] = GRID_BUDGETS,
    batch_size: int = 32,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.98),
) -> GridRun:
    """Train ``model`` as ``train_sequence_model`` does, scoring it after each budget.

    Same draws in the same order: the fixed batch (for the first update), then one training
    batch per step, all from ``torch.Generator().manual_seed(seed)``. After ``t`` updates, for
    each ``t`` in ``budgets``, :func:`held_out_score` runs on a *copy* of the generator, so the
    score is the one a ``t``-step run would report and the training batches that follow are
    unchanged. Trains in place for ``max(budgets)`` steps; stops at a non-finite loss.
    """
    steps = max(budgets)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    data = torch.Generator().manual_seed(seed)
    fixed, _ = reverse_task(batch_size, model.seq_len, model.vocab_size, data)  # (B, T)
    with torch.no_grad():
        reference = model.features(fixed)  # (B, T, C)
    losses = np.full(steps, np.nan)
    first = math.nan
    scores: dict[int, tuple[float, float]] = {}
    for step in range(steps):
        loss, _ = reverse_task_loss(model, batch_size, data)
        if not torch.isfinite(loss):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.item()
        if step == 0:
            first = relative_output_change(model, reference, fixed)
        if step + 1 in budgets:
            copy = torch.Generator()
            copy.set_state(data.get_state())
            scores[step + 1] = held_out_score(model, copy)
    loss_at = {t: scores.get(t, (math.nan, math.nan))[0] for t in budgets}
    acc_at = {t: scores.get(t, (math.nan, math.nan))[1] for t in budgets}
    return GridRun(losses, first, loss_at, acc_at)


def grid_cell(variant: str, seed: int, lr: float, budgets: Sequence[int] = GRID_BUDGETS) -> dict:
    """Build the chapter's ``variant`` for ``seed`` and train it at ``lr``, on one thread.

    Returns a JSON-ready dict: ``variant``, ``seed``, ``lr``, ``budgets``, ``first_update``,
    ``losses`` (4 significant digits, NaN as None), ``held_out_loss`` and ``held_out_accuracy``
    (lists, one per budget, in the order of ``budgets``), ``seconds`` (wall clock) and
    ``cpu_seconds`` (this process's CPU time).
    """
    torch.set_num_threads(1)
    c = CHAPTER_CONFIG
    model = make_variant(variant, seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    run = train_with_checkpoints(
        model, seed, budgets=budgets, batch_size=c["batch_size"], lr=lr, betas=c["betas"]
    )

    def clean(v: float, digits: int = 6) -> float | None:
        return float(f"{v:.{digits}g}") if math.isfinite(v) else None

    return {
        "variant": variant,
        "seed": seed,
        "lr": lr,
        "budgets": list(budgets),
        "first_update": clean(run.first_update),
        "held_out_loss": [clean(run.held_out_loss[t]) for t in budgets],
        "held_out_accuracy": [clean(run.held_out_accuracy[t]) for t in budgets],
        "losses": [clean(v, 4) for v in run.losses],
        "seconds": round(time.perf_counter() - start, 2),
        "cpu_seconds": round(time.process_time() - cpu_start, 2),
    }


def _cell(args: tuple[str, int, float, tuple[int, ...]]) -> dict:
    return grid_cell(*args)


def run_grid(variants: Sequence[str], jobs: int = 1, log: Path | None = None) -> list[dict]:
    """:func:`grid_cell` for every variant, learning rate of :data:`GRID_PLAN` (with its
    budgets) and seed, returned in that order.

    The 100-step cells run first, the longer ones after; with ``log``, each finished run is
    appended to it as one JSON line (so an interrupted grid keeps what it ran).
    """
    cells = [(v, s, lr, GRID_PLAN[lr]) for v in variants for lr in GRID_LRS for s in GRID_SEEDS]
    order = sorted(cells, key=lambda c: max(c[3]))  # short runs first (a stable sort)
    results: dict[tuple, dict] = {}

    def keep(run: dict) -> None:
        results[(run["variant"], run["seed"], run["lr"])] = run
        if log is not None:
            with log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(run) + "\n")

    if jobs <= 1:
        for c in order:
            keep(_cell(c))
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for run in pool.imap_unordered(_cell, order, chunksize=1):
                keep(run)
    return [results[c[:3]] for c in cells]


def load_grid(path: str | Path) -> dict:
    """A grid file written by :func:`main`, as a dict (``config``, ``lrs``, ``runs``, ...)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def grid_array(grid: dict, variant: str, key: str) -> np.ndarray:
    """One recorded quantity of a variant's runs in ``grid``, float64.

    ``key`` is ``"held_out_loss"`` or ``"held_out_accuracy"`` -> ``(lrs, seeds, budgets)``;
    ``"first_update"`` -> ``(lrs, seeds)``; ``"losses"`` -> ``(lrs, seeds, max budget)``. The
    axes follow the grid's ``lrs``, ``seeds`` and ``budgets`` lists. NaN where a value is None
    (a divergence) and where a learning rate was not trained for that budget or step.
    """
    budgets = grid["budgets"]
    out = {
        "first_update": np.full((len(grid["lrs"]), len(grid["seeds"])), np.nan),
        "losses": np.full((len(grid["lrs"]), len(grid["seeds"]), max(budgets)), np.nan),
    }.get(key, np.full((len(grid["lrs"]), len(grid["seeds"]), len(budgets)), np.nan))
    for r in grid["runs"]:
        if r["variant"] != variant:
            continue
        i, j = grid["lrs"].index(r["lr"]), grid["seeds"].index(r["seed"])
        values = np.array([np.nan if v is None else v for v in np.ravel(r[key])], dtype=float)
        if key == "first_update":
            out[i, j] = values[0]
        elif key == "losses":
            out[i, j, : len(values)] = values
        else:
            for t, v in zip(r["budgets"], values, strict=True):
                out[i, j, budgets.index(t)] = v
    return out


def grid_outcomes(grids: Sequence[dict], variant: str, key: str) -> np.ndarray:
    """A held-out score of ``variant`` at each of :data:`GRID_SETTINGS`, float64 ``(4, seeds)``.

    ``grids``: grid files as :func:`load_grid` returns them (the one that has ``variant`` is
    used); ``key``: ``"held_out_loss"`` or ``"held_out_accuracy"``.
    """
    grid = next(g for g in grids if variant in g["variants"])
    values = grid_array(grid, variant, key)  # (lrs, seeds, budgets)
    lrs, budgets = grid["lrs"], grid["budgets"]
    return np.stack([values[lrs.index(lr), :, budgets.index(t)] for lr, t in GRID_SETTINGS])


#: Short names of :data:`GRID_SETTINGS`, in its order (for :func:`grid_summary`'s keys).
SETTING_TAGS = ("chapter", "300", "lo", "hi")


def grid_summary(grids: Sequence[dict]) -> dict[str, float]:
    """The counts that the DeepNorm pages state about the grid, by name.

    ``grids``: both grid files (:func:`load_grid`), which hold Post-LN, DeepNorm, "alpha only"
    and "swapped". "Learned" is held-out accuracy above :data:`LEARNED`. Keys (``v`` is a variant
    in lower case with ``_`` for spaces and dashes, ``tag`` one of :data:`SETTING_TAGS`):

    - ``seeds``, ``runs`` (settings x seeds, per variant);
    - ``learned_v`` (all settings), ``learned_v_tag``; ``best_acc_v_tag`` (the best accuracy);
    - ``with_beta`` / ``without_beta``: runs learned by swapped + DeepNorm / Post-LN + alpha only;
      ``without_beta_100``: the latter in the 100-step settings;
    - ``deep_not_post``: seeds and settings where DeepNorm learned and Post-LN did not;
    - ``mixed_lrs``: learning rates at which, after 100 steps, some runs learned and some did
      not; ``overlap_lrs``: those of them at which a run that learned had a larger first update
      than one that did not;
    - ``swap_lower``, ``swap_lower_tag``: runs where the swapped step ended with a lower held-out
      loss than DeepNorm, seed for seed.

    The settings above are results, not distinct runs: the chapter's learning rate is trained once
    for 300 steps and read after 100 and after 300. Per distinct run, each read at its last step
    (300 steps at the chapter's rate, 100 at the others): ``distinct_runs`` (learning rates x
    seeds, per variant); ``runs_learned_v``; ``runs_with_beta`` / ``runs_without_beta``;
    ``runs_deep_not_post``; ``runs_swap_lower``.
    """
    variants = ("Post-LN", "alpha only", "swapped", "DeepNorm")
    acc = {v: grid_outcomes(grids, v, "held_out_accuracy") for v in variants}  # (settings, seeds)
    loss = {v: grid_outcomes(grids, v, "held_out_loss") for v in variants}  # (settings, seeds)
    learned = {v: acc[v] > LEARNED for v in variants}
    n_seeds = acc["DeepNorm"].shape[1]
    out: dict[str, float] = {"seeds": n_seeds, "runs": len(GRID_SETTINGS) * n_seeds}
    for v in variants:
        key = v.replace(" ", "_").replace("-", "_").lower()
        out[f"learned_{key}"] = int(learned[v].sum())
        for k, tag in enumerate(SETTING_TAGS):
            out[f"learned_{key}_{tag}"] = int(learned[v][k].sum())
            out[f"best_acc_{key}_{tag}"] = float(np.nanmax(acc[v][k]))
    out["with_beta"] = int(learned["swapped"].sum() + learned["DeepNorm"].sum())
    out["without_beta"] = int(learned["Post-LN"].sum() + learned["alpha only"].sum())
    short = [k for k, (_, t) in enumerate(GRID_SETTINGS) if t == 100]
    out["without_beta_100"] = int(
        learned["Post-LN"][short].sum() + learned["alpha only"][short].sum()
    )
    out["deep_not_post"] = int((learned["DeepNorm"] & ~learned["Post-LN"]).sum())
    mixed = overlap = 0
    for i, lr in enumerate(grids[0]["lrs"]):
        k = GRID_SETTINGS.index((lr, 100))
        first = {
            v: grid_array(next(g for g in grids if v in g["variants"]), v, "first_update")[i]
            for v in variants
        }  # variant -> (seeds,)
        up = np.concatenate([first[v][learned[v][k]] for v in variants])
        down = np.concatenate([first[v][~learned[v][k]] for v in variants])
        if len(up) and len(down):
            mixed += 1
            overlap += int(up.max() > down.min())
    out["mixed_lrs"], out["overlap_lrs"] = mixed, overlap
    swap_lower = loss["swapped"] < loss["DeepNorm"]  # (settings, seeds)
    out["swap_lower"] = int(swap_lower.sum())
    for k, tag in enumerate(SETTING_TAGS):
        out[f"swap_lower_{tag}"] = int(swap_lower[k].sum())
    # one reading per distinct run: its last (a run at the chapter's rate is also read at 100)
    budgets = {lr: max(t for r, t in GRID_SETTINGS if r == lr) for lr, _ in GRID_SETTINGS}
    last = [k for k, (lr, t) in enumerate(GRID_SETTINGS) if t == budgets[lr]]
    out["distinct_runs"] = len(last) * n_seeds
    for v in variants:
        key = v.replace(" ", "_").replace("-", "_").lower()
        out[f"runs_learned_{key}"] = int(learned[v][last].sum())
    out["runs_with_beta"] = int(learned["swapped"][last].sum() + learned["DeepNorm"][last].sum())
    out["runs_without_beta"] = int(
        learned["Post-LN"][last].sum() + learned["alpha only"][last].sum()
    )
    out["runs_deep_not_post"] = int((learned["DeepNorm"] & ~learned["Post-LN"])[last].sum())
    out["runs_swap_lower"] = int(swap_lower[last].sum())
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.deepnorm_grid {stacks-grid,ablation-grid} --out F``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.deepnorm_grid")
    parser.add_argument("grid", choices=sorted(GRIDS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--from-logs",
        type=Path,
        nargs="+",
        help="assemble the grid from the JSON lines of runs already made (by this command, "
        "interrupted, or by grid_cell in other processes) instead of training",
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    log = args.out.with_suffix(".partial.jsonl")
    if args.from_logs:
        made = {}
        for path in args.from_logs:
            for line in path.read_text(encoding="utf-8").splitlines():
                run = json.loads(line)
                made[(run["variant"], run["seed"], run["lr"])] = run
        cells = [(v, s, lr) for v in GRIDS[args.grid] for lr in GRID_LRS for s in GRID_SEEDS]
        missing = [c for c in cells if c not in made]
        if missing:
            raise SystemExit(f"{len(missing)} runs missing, such as {missing[:3]}")
        runs = [made[c] for c in cells]
    else:
        log.unlink(missing_ok=True)
        runs = run_grid(GRIDS[args.grid], args.jobs, log)
    config = {
        **CHAPTER_CONFIG,
        "betas": list(CHAPTER_CONFIG["betas"]),
        "diagnose_at": list(CHAPTER_CONFIG["diagnose_at"]),
    }
    del config["steps"], config["lr"], config["change_steps"], config["diagnose_at"]
    record = {
        "config": config,
        "variants": list(GRIDS[args.grid]),
        "seeds": list(GRID_SEEDS),
        "lrs": list(GRID_LRS),
        "budgets": list(GRID_BUDGETS),
        "plan": [[lr, list(b)] for lr, b in GRID_PLAN.items()],
        "command": f"python -m addnorm_lib.experiments.deepnorm_grid {args.grid} --out {args.out}",
        "torch": torch.__version__,
        "wall_seconds": round(sum(r["seconds"] for r in runs), 1),
        "cpu_seconds": (
            round(sum(r["cpu_seconds"] for r in runs), 1)
            if all("cpu_seconds" in r for r in runs)
            else None
        ),
        "runs": runs,
    }
    write_record(args.out, record)
    log.unlink(missing_ok=True)
    print(f"{len(runs)} runs in {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
