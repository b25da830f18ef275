"""The depth chapter's training runs on a grid: seeds, step budgets and learning rates.

A conclusion that the depth chapter draws from training (dead ReLU units come back; a norm
undoes this change of the inputs and not that one; a hidden layer's input moves while training)
must hold beyond the one setting the chapter shows. Each grid here repeats one experiment over
several seeds, the chapter's step budget and three times it, and the chapter's learning rate,
three times smaller and three times larger. The grids are run offline, once, and cached as JSON
in ``book/data/``; the chapter reads the file and checks its words against it.

    python -m addnorm_lib.experiments.depth_grids NAME-grid --out book/data/depth_NAME_grid.json

with NAME one of ``revival``, ``shift``, ``ics`` (each writes the file the chapter reads).

- :func:`revival_run`: an 8-layer ReLU network damaged by one large gradient step, then trained
  with Adam; which dead units come back.
- :func:`shift_run`: :func:`~addnorm_lib.experiments.depth_checks.shift_experiment` at a step
  budget and learning rate, flattened.
- :func:`ics_run`: :func:`~addnorm_lib.experiments.depth_checks.internal_shift`.

Everything runs on the CPU in float32, one thread, seeded.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from addnorm_lib import lookup
from addnorm_lib.experiments import depth_checks
from addnorm_lib.experiments.depth import DeepMLP, set_seed
from addnorm_lib.experiments.records import write_record

__all__ = [
    "GRIDS",
    "MID_TRAINING_KEYS",
    "Grid",
    "ics_run",
    "load_grid",
    "main",
    "revival_run",
    "run_grid",
    "shift_run",
]


#: What :func:`revival_run` reports about units that die during training, not from the large
#: step (see :func:`~addnorm_lib.experiments.depth_checks.train_and_track_dead`).
MID_TRAINING_KEYS = ("died_during", "died_and_revived", "mid_revivals", "mid_revivals_same_weights")


def revival_run(seed: int, steps: int = 200, lr: float = 1e-3, kill_lr: float = 0.5) -> dict:
    """One large gradient step, then ``steps`` steps of Adam: which dead units revive?

    An 8-layer ReLU ``DeepMLP(8, 64, 1)`` with He weights, a fixed batch x (256, 8) and targets
    y = 2 + 3 * N(0, 1) (256, 1) far from its outputs; one step of plain gradient descent with
    ``kill_lr``, then :func:`~addnorm_lib.experiments.depth_checks.train_and_track_dead` with
    Adam at ``lr``. Returns ints ``dead_before`` (before the large step), ``dead_after_step``,
    ``revived``, ``newly_dead``, ``still_dead``, ``dead_end``, the float ``max_dead_row_grad``
    and the bools ``revived_with_start_weights``, ``dead_throughout_unchanged``; and the ints
    of :data:`MID_TRAINING_KEYS`, about the units that die during the Adam steps.
    """
    set_seed(seed)
    net = DeepMLP(8, 64, 1, depth=8, activation="relu", init="he")
    x = torch.randn(256, 8)  # (N, 8)
    y = 2 + 3 * torch.randn(256, 1)  # (N, 1)
    dead_before = int(depth_checks.dead_units(net, x).sum())
    depth_checks.gradient_descent_step(net, x, y, kill_lr)
    result = depth_checks.train_and_track_dead(net, x, y, lr=lr, steps=steps)
    return {
        "dead_before": dead_before,
        "dead_after_step": int(result["dead_start"].sum()),
        "revived": result["revived"],
        "newly_dead": result["newly_dead"],
        "still_dead": result["still_dead"],
        "dead_end": int(result["dead_end"].sum()),
        "max_dead_row_grad": result["max_dead_row_grad"],
        "revived_with_start_weights": bool(result["revived_with_start_weights"]),
        "dead_throughout_unchanged": bool(result["dead_throughout_unchanged"]),
        **{key: result[key] for key in MID_TRAINING_KEYS},
    }


def shift_run(seed: int, steps: int = 300, lr: float = 3e-3) -> dict:
    """:func:`~addnorm_lib.experiments.depth_checks.shift_experiment`, flattened for JSON.

    Returns ``{"change": {"<shift> | <way>": float}, "loss": {name: float}}``.
    """
    result = depth_checks.shift_experiment(seed, steps=steps, lr=lr)
    return {
        "change": {f"{kind} | {way}": value for (kind, way), value in result["change"].items()},
        "loss": result["loss"],
    }


def ics_run(seed: int, steps: int = 20, lr: float = 1e-3) -> dict:
    """:func:`~addnorm_lib.experiments.depth_checks.internal_shift` for one seed."""
    return depth_checks.internal_shift(seed, steps=steps, lr=lr)


@dataclass(frozen=True)
class Grid:
    """A grid of runs: every seed at every step budget and learning rate.

    ``run(seed, steps=..., lr=...)`` returns a JSON-ready dict; the chapter's own setting is
    ``steps[0]`` and ``lrs[1]``.
    """

    run: Callable[..., dict]
    seeds: Sequence[int] = tuple(range(6))
    steps: Sequence[int] = ()
    lrs: Sequence[float] = ()
    extra: dict = field(default_factory=dict)

    def cells(self) -> list[tuple[int, int, float]]:
        """(seed, steps, lr) of every run, steps-major."""
        return [(s, n, lr) for n, lr, s in itertools.product(self.steps, self.lrs, self.seeds)]


#: The grids, by command name.
GRIDS: dict[str, Grid] = {
    "revival-grid": Grid(revival_run, steps=(200, 600), lrs=(1e-3 / 3, 1e-3, 3e-3)),
    "shift-grid": Grid(shift_run, steps=(300, 900), lrs=(1e-3, 3e-3, 9e-3)),
    "ics-grid": Grid(ics_run, steps=(20, 60), lrs=(1e-3 / 3, 1e-3, 3e-3)),
}


def run_grid(name: str, out: Path | str | None = None) -> dict:
    """Every run of the grid ``name`` (a key of :data:`GRIDS`), on one thread: the JSON record.

    The record holds the grid's settings, the command that regenerates it, the torch version,
    and one entry per run with its seed, steps, lr, result and seconds.
    """
    grid = lookup(GRIDS, name, "grid")
    torch.set_num_threads(1)
    runs = []
    for seed, steps, lr in grid.cells():
        start = time.perf_counter()
        result = grid.run(seed, steps=steps, lr=lr)
        runs.append(
            {
                "seed": seed,
                "steps": steps,
                "lr": lr,
                **result,
                "seconds": round(time.perf_counter() - start, 3),
            }
        )
    out = out or f"book/data/depth_{name.removesuffix('-grid')}_grid.json"
    return {
        "config": {
            "seeds": list(grid.seeds),
            "steps": list(grid.steps),
            "lrs": list(grid.lrs),
            "chapter_steps": grid.steps[0],
            "chapter_lr": grid.lrs[1],
            "runner": f"addnorm_lib.experiments.depth_grids.{grid.run.__name__}",
        },
        "command": f"python -m addnorm_lib.experiments.depth_grids {name} --out {out}",
        "torch": torch.__version__,
        "runs": runs,
    }


def load_grid(path: Path | str) -> dict:
    """A cached grid record (see :func:`run_grid`), as written."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.depth_grids NAME-grid --out FILE``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.depth_grids")
    parser.add_argument("grid", choices=sorted(GRIDS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    record = run_grid(args.grid, args.out)
    write_record(args.out, record)
    print(f"{len(record['runs'])} runs in {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
