"""Grids of training runs for the residual chapter, cached as JSON for its pages.

Each conclusion that the residual chapter draws from training is checked on a grid: six seeds,
the chapter's step budget (300) and three times it (900), and the learning rate moved by a
factor of 3 either way (and, for the degradation grid, two depths). A grid is run offline and
cached as JSON in ``book/data``; the pages read the JSON and never train at build time.

    python -m addnorm_lib.experiments.residuals_grid degradation-grid \\
        --out book/data/residuals_degradation_grid.json --jobs 10
    python -m addnorm_lib.experiments.residuals_grid training-grid \\
        --out book/data/residuals_training_grid.json --jobs 3

- :func:`train_checkpoints` trains one network and records the loss on the whole training set
  at several steps of the same run (Adam at a constant learning rate, so the loss at step 300
  of a 900-step run is the loss of a 300-step run).
- :func:`run_grid` trains every network of a :class:`GridSpec` and returns the JSON record.
- :func:`select` picks runs out of a grid's record, :func:`seed_band` a learning curve per seed.

Everything runs on the CPU in float32 with one thread, seeded as in
:mod:`addnorm_lib.experiments.residual_scaling`: seed ``s`` draws the weights, ``s + 1`` the
order of the mini-batches.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib.experiments.residual_scaling import seeded_mlp, teacher_task

__all__ = [
    "GRIDS",
    "GridSpec",
    "Network",
    "run_grid",
    "seed_band",
    "select",
    "train_checkpoints",
    "train_one",
]

#: The chapter's learning rate, and the grid's values around it (x 1/3, x 1, x 3).
BASE_LR = 1e-3
LRS = (BASE_LR / 3, BASE_LR, BASE_LR * 3)
#: The chapter's budget and three times it: losses are recorded at both steps of one run.
BUDGETS = (300, 900)
#: Steps averaged into one point of a stored learning curve.
CURVE_WINDOW = 10


@dataclass(frozen=True)
class Network:
    """One network of a grid: a :func:`seeded_mlp` setting (width 32, 8 inputs, one output)."""

    activation: str
    init: str
    residual: bool
    depth: int
    rule: str = "1/sqrt(L)"

    @property
    def label(self) -> str:
        """A short name: ``"relu, residual 1/sqrt(L), 30"`` or ``"sigmoid, plain, 30"``."""
        kind = f"residual {self.rule}" if self.residual else "plain"
        return f"{self.activation}, {kind}, {self.depth}"


@dataclass(frozen=True)
class GridSpec:
    """A grid: every network x every learning rate x every seed, losses at every budget."""

    networks: tuple[Network, ...]
    seeds: tuple[int, ...] = tuple(range(6))
    lrs: tuple[float, ...] = LRS
    budgets: tuple[int, ...] = BUDGETS
    n_train: int = 256
    in_features: int = 8
    width: int = 32
    minibatch: int = 64
    task_seed: int = 0
    notes: dict = field(default_factory=dict)


RELU = {"activation": "relu", "init": "he"}
SIGMOID = {"activation": "sigmoid", "init": "xavier"}

#: The grids of the chapter, by command name.
GRIDS: dict[str, GridSpec] = {
    # plain vs residual ReLU (He) at 30 and 100 layers: does depth hurt, and whom?
    "degradation-grid": GridSpec(
        networks=tuple(
            Network(**RELU, residual=residual, depth=depth)
            for depth in (30, 100)
            for residual in (False, True)
        )
    ),
    # sigmoid plain vs residual at 30 layers, and the three rules for a ReLU branch's W2
    "training-grid": GridSpec(
        networks=(
            Network(**SIGMOID, residual=False, depth=30),
            Network(**SIGMOID, residual=True, depth=30),
            Network(**RELU, residual=True, depth=30, rule="unscaled"),
            Network(**RELU, residual=True, depth=30, rule="zero"),
        )
    ),
}


def train_checkpoints(
    net: nn.Module,
    x: Tensor,
    y: Tensor,
    budgets: Sequence[int],
    minibatch: int = 64,
    lr: float = BASE_LR,
    batch_seed: int = 1,
) -> tuple[np.ndarray, float, list[float]]:
    """Train ``net`` in place as :func:`~addnorm_lib.experiments.residual_scaling.train_regression`
    does, for ``max(budgets)`` steps, and record the loss on all of x after each budget.

    x: (n, in) float32, y: (n, 1) float32. The same Adam (foreach) and the same mini-batch draws
    as ``train_regression``, so the loss after ``budgets[i]`` steps equals that function's final
    loss with ``steps=budgets[i]``.

    Returns:
        the mini-batch loss of every step, shape (max(budgets),), float64; the loss on all of x
        before training; the loss on all of x after each budget, in the order of ``budgets``.
    """
    with torch.no_grad():
        initial = F.mse_loss(net(x), y).item()
    opt = torch.optim.Adam(net.parameters(), lr=lr, foreach=True)
    g = torch.Generator().manual_seed(batch_seed)
    losses, at = [], {}
    for step in range(1, max(budgets) + 1):
        idx = torch.randint(0, len(x), (minibatch,), generator=g)  # (minibatch,)
        loss = F.mse_loss(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step in budgets:
            with torch.no_grad():
                at[step] = F.mse_loss(net(x), y).item()
    return np.array(losses), initial, [at[b] for b in budgets]


def train_one(spec: GridSpec, network: Network, lr: float, seed: int) -> dict:
    """One run of a grid, as a JSON-ready dict (losses rounded to 6 significant digits).

    Keys: the network's fields, ``lr``, ``seed``, ``initial`` (loss before training),
    ``final`` (budget -> loss on the training set, keys as strings), ``curve`` (means of the
    mini-batch loss over windows of :data:`CURVE_WINDOW` steps), ``seconds`` (wall clock) and
    ``cpu_seconds`` (this process's CPU time: on a shared machine, the run's real cost).
    """
    x, y = teacher_task(spec.n_train, spec.in_features, seed=spec.task_seed)
    net = seeded_mlp(
        seed,
        spec.in_features,
        spec.width,
        network.depth,
        network.activation,
        network.init,
        network.residual,
        network.rule,
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    curve, initial, finals = train_checkpoints(
        net, x, y, spec.budgets, spec.minibatch, lr, batch_seed=seed + 1
    )
    windows = curve.reshape(-1, CURVE_WINDOW).mean(axis=1)  # (steps / window,)
    return {
        **asdict(network),
        "lr": lr,
        "seed": seed,
        "initial": float(f"{initial:.6g}"),
        "final": {str(b): float(f"{v:.6g}") for b, v in zip(spec.budgets, finals, strict=True)},
        "curve": [float(f"{v:.6g}") for v in windows],
        "seconds": round(time.perf_counter() - start, 2),
        "cpu_seconds": round(time.process_time() - cpu_start, 2),
    }


def _train_task(task: tuple[str, int, float, int]) -> dict:
    """One run of a grid by name and network index (a worker's job: one thread)."""
    name, index, lr, seed = task
    torch.set_num_threads(1)
    spec = GRIDS[name]
    network = spec.networks[index]
    run = train_one(spec, network, lr, seed)
    print(f"{network.label:32s} lr={lr:.2e} seed={seed} {run['final']}", flush=True)
    return run


def run_grid(name: str, command: str = "", jobs: int = 1) -> dict:
    """Every run of ``GRIDS[name]``, with the config, the command and torch's version.

    With ``jobs`` > 1 the runs are shared out over that many processes, deepest networks first;
    every run is seeded on its own, so the results and their order do not depend on ``jobs``.
    """
    spec = GRIDS[name]
    tasks = [
        (name, index, lr, seed)
        for index in range(len(spec.networks))
        for lr in spec.lrs
        for seed in spec.seeds
    ]
    if jobs > 1:
        deepest_first = sorted(tasks, key=lambda t: -spec.networks[t[1]].depth)
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(_train_task, deepest_first, chunksize=1)
        done = dict(zip(deepest_first, results, strict=True))
        runs = [done[task] for task in tasks]
    else:
        runs = [_train_task(task) for task in tasks]
    config = asdict(spec)
    config["curve_window"] = CURVE_WINDOW
    return {
        "config": config,
        "command": command,
        "torch": torch.__version__,
        "seconds": round(sum(r["seconds"] for r in runs), 1),
        "cpu_seconds": round(sum(r["cpu_seconds"] for r in runs), 1),
        "runs": runs,
    }


def select(runs: Iterable[dict], **fields) -> list[dict]:
    """The runs whose fields equal ``fields`` (e.g. ``residual=True, depth=100``)."""
    return [r for r in runs if all(r[k] == v for k, v in fields.items())]


def seed_band(runs: Sequence[dict], budget: int) -> tuple[np.ndarray, np.ndarray]:
    """The stored learning curves of ``runs`` up to step ``budget``, one column per run.

    Returns the step at the end of each window, shape (T,), and the curves, shape (T, runs),
    float64, with T = budget / :data:`CURVE_WINDOW`: each value is the mean mini-batch loss
    of one window of steps.
    """
    count = budget // CURVE_WINDOW
    steps = CURVE_WINDOW * np.arange(1, count + 1)  # (T,)
    curves = np.array([r["curve"][:count] for r in runs]).T  # (T, runs)
    return steps, curves


def main(argv: Sequence[str] | None = None) -> None:
    """Run one grid and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("grid", choices=sorted(GRIDS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    args = parser.parse_args(argv)
    command = f"python -m addnorm_lib.experiments.residuals_grid {args.grid} --out {args.out}"
    if args.jobs > 1:
        command += f" --jobs {args.jobs}"
    record = run_grid(args.grid, command, args.jobs)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{len(record['runs'])} runs, {record['seconds']} s of training -> {args.out}")


if __name__ == "__main__":
    main()
