"""The BatchNorm chapter's training experiment: a deep ReLU network with and without BatchNorm,
trained on a small teacher task, over a grid of seeds and learning rates.

The task: random 16-dimensional inputs, labelled with the 4 classes that a fixed random
"teacher" network assigns them (:func:`teacher_task`). The students (:func:`build`) are a
read-in layer, ``depth`` hidden blocks ``Linear -> (BatchNorm1d) -> ReLU`` and a read-out,
He-initialized; for one seed both students start from the same weights and see the same
batches. :func:`train_run` trains one student with SGD (momentum 0.9) at a constant learning
rate, evaluates it at every budget (the step counts in ``config["budgets"]``: with a constant
learning rate, the run of 300 steps is the first 300 steps of the run of 900) and records the
size of the weights that feed each hidden block's norm.

Why record that size: a weight vector ``w`` (one row of a hidden ``Linear``) that feeds
BatchNorm is *scale-invariant*, the loss is the same for ``c w`` as for ``w``, so its gradient is
orthogonal to ``w`` and shrinks like ``1 / c``. A fixed learning rate ``lr`` therefore turns the
direction of ``w`` by about ``lr / ||w||^2``, and ``||w||`` grows during training (each step adds
an orthogonal vector). :func:`scale_invariance` measures both facts on one layer.

The grid (:data:`GRID_LRS` x :data:`GRID_SEEDS` x with/without BatchNorm, each run to the largest
budget) takes minutes, too long for a book build, so the chapter reads it from
``book/data/batchnorm_lr_grid.json``. Regenerate that file with::

    nice -n 10 .venv/bin/python -m addnorm_lib.experiments.batchnorm_training lr-grid \\
        --out book/data/batchnorm_lr_grid.json --jobs 2

``tests/experiments/test_batchnorm_training.py`` re-runs one run and compares it with the file.
Everything is seeded and runs on the CPU in float32, on one thread.
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
import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib.experiments.depth import init_linear, set_seed
from addnorm_lib.experiments.records import write_record

__all__ = [
    "CONFIG",
    "GRID_LRS",
    "GRID_SEEDS",
    "RunResult",
    "ScaleInvariance",
    "TeacherTask",
    "best_per_seed",
    "build",
    "grid_record",
    "load_grid",
    "run_cell",
    "scale_invariance",
    "select",
    "teacher_task",
    "train_run",
    "usable",
]

CONFIG: dict = {
    "d_x": 16,
    "width": 64,
    "depth": 12,
    "classes": 4,
    "batch": 64,
    "n_train": 4096,
    "n_test": 2048,
    "momentum": 0.9,
    "budgets": [300, 900],
    "final_window": 20,
    "loss_every": 10,
}
"""The chapter's network, task and optimizer. ``final_window``: the final loss is the mean of
the last that many training losses before a budget; ``loss_every``: the stored loss curve is the
mean of each block of that many steps."""

GRID_LRS: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
"""Learning rates of the grid: half-decades, so each is about 3 times the one before."""

GRID_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
"""Seeds of the grid: a seed sets the initial weights and the order of the batches."""


@dataclass
class TeacherTask:
    """Inputs and teacher labels. ``x_*``: float32 ``(n, d_x)``; ``y_*``: int64 ``(n,)``."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor


def teacher_task(config: dict | None = None) -> TeacherTask:
    """The fixed task (the same for every seed): a random tanh teacher labels Gaussian inputs."""
    c = {**CONFIG, **(config or {})}
    set_seed(0)
    teacher = nn.Sequential(nn.Linear(c["d_x"], 64), nn.Tanh(), nn.Linear(64, c["classes"]))
    x_train = torch.randn(c["n_train"], c["d_x"])  # (n_train, d_x)
    x_test = torch.randn(c["n_test"], c["d_x"])  # (n_test, d_x)
    with torch.no_grad():
        y_train = teacher(x_train).argmax(dim=1)  # (n_train,)
        y_test = teacher(x_test).argmax(dim=1)  # (n_test,)
    return TeacherTask(x_train, y_train, x_test, y_test)


def build(batch_norm: bool, config: dict | None = None) -> nn.Sequential:
    """Read-in, ``depth`` x [Linear, (BatchNorm1d), ReLU], read-out; He-initialized, zero biases.

    Shapes: ``(N, d_x) -> (N, classes)``. With the same torch seed, the model with BatchNorm and
    the one without draw the same weights (BatchNorm draws no random numbers).
    """
    c = {**CONFIG, **(config or {})}
    layers: list[nn.Module] = [nn.Linear(c["d_x"], c["width"])]
    for _ in range(c["depth"]):
        layers.append(nn.Linear(c["width"], c["width"]))
        if batch_norm:
            layers.append(nn.BatchNorm1d(c["width"]))
        layers.append(nn.ReLU())
    model = nn.Sequential(*layers, nn.Linear(c["width"], c["classes"]))
    for module in model.modules():
        if isinstance(module, nn.Linear):
            init_linear(module, "he")
    return model


def _hidden_row_norm(model: nn.Sequential) -> float:
    """Mean Euclidean norm of the rows of the hidden ``(width, width)`` Linear weights: the
    vectors that feed each BatchNorm feature (with BatchNorm, each is scale-invariant)."""
    linears = [m for m in model if isinstance(m, nn.Linear)][1:-1]  # the hidden ones
    with torch.no_grad():
        return float(torch.cat([m.weight.norm(dim=1) for m in linears]).mean())


def _accuracy(model: nn.Sequential, task: TeacherTask) -> float:
    """Test accuracy in eval mode; the model is put back in training mode."""
    with torch.no_grad():
        predicted = model.eval()(task.x_test).argmax(dim=1)  # (n_test,)
    model.train()
    return float((predicted == task.y_test).float().mean())


@dataclass
class RunResult:
    """One training run, evaluated at every budget.

    Attributes:
        losses: float64 ``(max budget,)`` training loss of every step (NaN once it diverged).
        final_loss: per budget, the mean of the last ``final_window`` losses (NaN if diverged).
        accuracy: per budget, the test accuracy in eval mode (NaN if the loss diverged).
        row_norm: the mean norm of the hidden weight rows at step 0 and at every budget.
        nan_step: the first step (counted from 1) with a NaN loss, or None.
    """

    losses: np.ndarray
    final_loss: list[float]
    accuracy: list[float]
    row_norm: list[float]
    nan_step: int | None


def train_run(
    batch_norm: bool,
    lr: float,
    seed: int,
    task: TeacherTask | None = None,
    config: dict | None = None,
) -> RunResult:
    """Train one student with SGD (momentum ``config["momentum"]``) at a constant ``lr``.

    The seed sets the initial weights (torch seed ``1 + 2 seed``) and the batch order (a
    generator seeded ``2 + 2 seed``); the task is the same for all seeds. Runs to the largest
    budget and evaluates at each one.
    """
    c = {**CONFIG, **(config or {})}
    task = task if task is not None else teacher_task(c)
    budgets = sorted(c["budgets"])
    set_seed(1 + 2 * seed)  # the initial weights
    model = build(batch_norm, c)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=c["momentum"])
    batches = torch.Generator().manual_seed(2 + 2 * seed)  # the order of the batches
    losses: list[float] = []
    accuracy, row_norm = [], [_hidden_row_norm(model)]
    for step in range(1, budgets[-1] + 1):
        idx = torch.randint(0, len(task.x_train), (c["batch"],), generator=batches)  # (batch,)
        loss = F.cross_entropy(model(task.x_train[idx]), task.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step in budgets:
            finite = math.isfinite(losses[-1])
            accuracy.append(_accuracy(model, task) if finite else float("nan"))
            row_norm.append(_hidden_row_norm(model))
    arr = np.array(losses)
    w = c["final_window"]
    final = [float(arr[b - w : b].mean()) for b in budgets]  # NaN if any step diverged
    bad = ~np.isfinite(arr)
    nan_step = int(np.argmax(bad)) + 1 if bad.any() else None
    return RunResult(arr, final, accuracy, row_norm, nan_step)


def _num(value: float, digits: int = 6) -> float | None:
    """A float with ``digits`` significant digits for JSON; NaN and infinities as None."""
    return float(f"{value:.{digits}g}") if math.isfinite(value) else None


def run_cell(batch_norm: bool, lr: float, seed: int, config: dict | None = None) -> dict:
    """:func:`train_run` on one thread, as a JSON-ready dict (one entry of the grid's ``runs``).

    Keys: ``batch_norm``, ``lr``, ``seed``, ``final_loss`` and ``accuracy`` (one per budget),
    ``row_norm`` (step 0, then one per budget), ``nan_step``, ``loss_curve`` (mean loss of each
    block of ``loss_every`` steps, NaN as None) and ``seconds``; floats to 6 significant digits.
    """
    c = {**CONFIG, **(config or {})}
    torch.set_num_threads(1)
    start = time.perf_counter()
    run = train_run(batch_norm, lr, seed, config=c)
    curve = run.losses.reshape(-1, c["loss_every"]).mean(axis=1)  # (steps / loss_every,)
    return {
        "batch_norm": batch_norm,
        "lr": lr,
        "seed": seed,
        "final_loss": [_num(v) for v in run.final_loss],
        "accuracy": [_num(v) for v in run.accuracy],
        "row_norm": [_num(v) for v in run.row_norm],
        "nan_step": run.nan_step,
        "loss_curve": [_num(v) for v in curve],
        "seconds": round(time.perf_counter() - start, 2),
    }


def _cell(args: tuple[bool, float, int]) -> dict:
    return run_cell(*args)


def grid_record(
    lrs: Sequence[float] = GRID_LRS,
    seeds: Sequence[int] = GRID_SEEDS,
    jobs: int = 1,
    command: str = "",
) -> dict:
    """Every (with/without BatchNorm, lr, seed) run, as the JSON record the chapter reads:
    ``config``, ``lrs``, ``seeds``, ``command``, ``torch`` and ``runs`` (see :func:`run_cell`)."""
    cells = [(bn, lr, s) for bn in (False, True) for lr in lrs for s in seeds]
    if jobs <= 1:
        runs = [_cell(cell) for cell in cells]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            runs = pool.map(_cell, cells, chunksize=1)
    return {
        "config": dict(CONFIG),
        "lrs": list(lrs),
        "seeds": list(seeds),
        "command": command,
        "torch": torch.__version__,
        "runs": runs,
    }


def load_grid(path: str | Path) -> dict:
    """The grid's JSON record; ``None`` entries (diverged runs) become NaN."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    for run in record["runs"]:
        for key in ("final_loss", "accuracy", "row_norm", "loss_curve"):
            run[key] = [math.nan if v is None else v for v in run[key]]
    return record


def select(record: dict, **where) -> list[dict]:
    """The runs whose entries equal every ``key=value`` given (e.g. ``batch_norm=True``)."""
    return [r for r in record["runs"] if all(r[k] == v for k, v in where.items())]


def usable(run: dict, budget: int, threshold: float, budgets: Sequence[int]) -> bool:
    """Whether a run trained: finite, with a final loss below ``threshold`` at ``budget``."""
    loss = run["final_loss"][list(budgets).index(budget)]
    return math.isfinite(loss) and loss < threshold


def best_per_seed(record: dict, batch_norm: bool, budget: int) -> dict[int, dict]:
    """For every seed, the run of the lowest final loss over the learning rates at ``budget``
    (diverged runs never win)."""
    i = record["config"]["budgets"].index(budget)
    best: dict[int, dict] = {}
    for run in select(record, batch_norm=batch_norm):
        loss = run["final_loss"][i]
        if not math.isfinite(loss):
            continue
        seen = best.get(run["seed"])
        if seen is None or loss < seen["final_loss"][i]:
            best[run["seed"]] = run
    return best


@dataclass
class ScaleInvariance:
    """What scaling the weight ``W`` before a BatchNorm by ``c`` does (float64).

    Attributes:
        scale: the factor ``c``.
        output_change: max |output(c W) - output(W)|.
        grad_ratio: ``||grad at W|| / ||grad at c W||`` (``c`` for exact invariance).
        cosine: the largest |cos| between a row of ``W`` and the same row of its gradient.
    """

    scale: float
    output_change: float
    grad_ratio: float
    cosine: float


def scale_invariance(scale: float = 10.0, seed: int = 0) -> ScaleInvariance:
    """Measure on one ``Linear(32, 16, bias=False) -> BatchNorm1d -> loss`` with a batch of 64.

    The loss is a fixed random projection of the training-mode output.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 32, generator=gen, dtype=torch.float64)  # (N, in)
    w = torch.randn(16, 32, generator=gen, dtype=torch.float64) / 32**0.5  # (out, in)
    probe = torch.randn(64, 16, generator=gen, dtype=torch.float64)  # (N, out)

    def out_and_grad(weight: Tensor) -> tuple[Tensor, Tensor]:
        weight = weight.clone().requires_grad_(True)
        y = F.batch_norm(x @ weight.T, None, None, training=True)  # (N, out)
        (y * probe).sum().backward()
        return y.detach(), weight.grad

    y1, g1 = out_and_grad(w)
    y2, g2 = out_and_grad(scale * w)
    cosine = (g1 * w).sum(dim=1).abs() / (g1.norm(dim=1) * w.norm(dim=1))  # (out,)
    return ScaleInvariance(
        scale=scale,
        output_change=float((y2 - y1).abs().max()),
        grad_ratio=float(g1.norm() / g2.norm()),
        cosine=float(cosine.max()),
    )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.batchnorm_training lr-grid --out FILE [--jobs N]``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.batchnorm_training")
    sub = parser.add_subparsers(dest="command", required=True)
    grid = sub.add_parser("lr-grid", help="every lr x seed, with and without BatchNorm; JSON")
    grid.add_argument("--out", type=Path, required=True)
    grid.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    command = f"python -m addnorm_lib.experiments.batchnorm_training lr-grid --out {args.out}"
    record = grid_record(jobs=args.jobs, command=command)
    write_record(args.out, record)
    print(f"{len(record['runs'])} runs in {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
