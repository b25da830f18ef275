"""The training grid of the "Beyond Pre-LN and Post-LN" chapter, run offline and cached as JSON.

Every training comparison the chapter draws (QK-norm against Pre-LN, norms on the sublayers'
outputs, OLMo 2's layout, Dynamic Tanh against LayerNorm) is checked on a grid: six seeds, three
learning rates (the chapter's ``1e-2``, three times smaller and three times larger) and two step
budgets (100 steps and three times that). A run trains to the largest budget and is measured at
each budget: with a constant learning rate and the same batches, the model at step 100 of a
300-step run *is* the model of a 100-step run.

- :func:`grid_run` trains one :class:`~addnorm_lib.experiments.beyond.BeyondModel` and returns
  a JSON-ready record (losses and largest attention logit at every step; held-out loss,
  accuracy, largest attention logit, stream RMS after each layer and QK-norm's bound at each
  budget).
- :func:`load_grid` reads the cached file; :func:`grid_cells` and :func:`grid_value` index it;
  :func:`over_grid` applies a per-seed test at every cell.

Regenerate the cached file with
``python -m addnorm_lib.experiments.beyond_grid grid --out book/data/beyond_grid.json``.
Everything runs on the CPU in float32, on one thread.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from addnorm_lib.experiments.beyond import BeyondModel, DyT, qk_logit_bound, stream_rms
from addnorm_lib.experiments.deepnorm import reverse_task, reverse_task_loss
from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.experiments.records import write_record

__all__ = [
    "GRID_CONFIG",
    "GRID_VARIANTS",
    "OUTPUT_NORMS",
    "conclusion_tests",
    "grid_cells",
    "grid_run",
    "grid_value",
    "load_grid",
    "main",
    "over_grid",
    "peak_logit",
]

#: The model, the task and the grid. ``lrs``: the chapter's learning rate in the middle;
#: ``budgets``: the chapter's 100 steps and three times that; ``early_steps``: the window of the
#: mean training loss that measures how fast a model starts learning.
GRID_CONFIG: dict = {
    "vocab_size": 12,
    "seq_len": 8,
    "num_layers": 4,
    "d_model": 32,
    "nhead": 4,
    "dim_feedforward": 128,
    "batch_size": 32,
    "betas": [0.9, 0.98],
    "lrs": [1e-2 / 3, 1e-2, 3e-2],
    "budgets": [100, 300],
    "seeds": [0, 1, 2, 3, 4, 5],
    "held_out_size": 512,
    "held_out_seed": 1234,
    "early_steps": 30,
}

#: The kinds of block the grid trains (:data:`~addnorm_lib.experiments.beyond.VARIANTS`).
GRID_VARIANTS = ("pre", "qk", "peri", "output", "olmo2", "dyt")


def _rounded(values: Sequence[float], digits: int = 5) -> list:
    """Floats with ``digits`` significant digits; NaN and inf as None."""
    return [float(f"{v:.{digits}g}") if math.isfinite(v) else None for v in values]


def _measure(model: BeyondModel, tokens: torch.Tensor, targets: torch.Tensor) -> dict:
    """Held-out loss, accuracy, largest attention logit, stream RMS and QK-norm's bound."""
    vocab = model.vocab_size
    with torch.no_grad():
        logits = model(tokens)  # (N, T, V)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)).item()
        accuracy = (logits.argmax(-1) == targets).double().mean().item()
    bound = max(qk_logit_bound(block.self_attn) for block in model.blocks)
    alphas = [m.alpha.item() for m in model.modules() if isinstance(m, DyT)]
    return {
        "loss": loss,
        "accuracy": accuracy,
        "max_logit": model.max_attention_logit(),
        "stream_rms": _rounded(stream_rms(model, tokens)),  # (num_layers + 1,)
        "qk_bound": bound if math.isfinite(bound) else None,
        "dyt_alphas": _rounded(alphas),
    }


def grid_run(variant: str, seed: int, lr: float, config: dict | None = None) -> dict:
    """Train one model of ``variant`` to the largest budget and measure it at every budget.

    Args:
        variant: a name in :data:`GRID_VARIANTS`.
        seed: seeds the weights (:func:`~addnorm_lib.experiments.depth.set_seed`) and the
            training batches, as in :func:`~addnorm_lib.experiments.beyond.train_beyond_model`.
        lr: Adam's constant learning rate (no warm-up).
        config: overrides of :data:`GRID_CONFIG`.

    Returns:
        A JSON-ready dict: ``variant``, ``seed``, ``lr``; ``losses`` and ``max_logit``, the
        training loss and the largest attention logit at every step (``(max budget,)``, 5
        significant digits, None after a non-finite loss); ``early_loss``, the mean training loss
        over the first ``early_steps``; ``at``: budget (as a string) -> the held-out measurements
        of :func:`_measure` (loss, accuracy, max_logit, stream_rms ``(num_layers + 1,)``,
        qk_bound or None, dyt_alphas); ``seconds``.
    """
    c = {**GRID_CONFIG, **(config or {})}
    torch.set_num_threads(1)
    set_seed(seed)
    model = BeyondModel(
        variant,
        c["vocab_size"],
        c["seq_len"],
        c["num_layers"],
        c["d_model"],
        c["nhead"],
        c["dim_feedforward"],
    )
    held = torch.Generator().manual_seed(c["held_out_seed"])
    tokens, targets = reverse_task(c["held_out_size"], c["seq_len"], c["vocab_size"], held)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(c["betas"]))
    data = torch.Generator().manual_seed(seed)
    steps = max(c["budgets"])
    losses, max_logit = np.full(steps, np.nan), np.full(steps, np.nan)
    at: dict[str, dict | None] = {}
    start = time.perf_counter()
    finite = True
    for step in range(steps):
        loss, _ = reverse_task_loss(model, c["batch_size"], data)
        finite = bool(torch.isfinite(loss))
        if not finite:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step], max_logit[step] = loss.item(), model.max_attention_logit()
        if step + 1 in c["budgets"]:
            at[str(step + 1)] = _measure(model, tokens, targets)
    for budget in c["budgets"]:
        at.setdefault(str(budget), None)  # diverged before this budget
    return {
        "variant": variant,
        "seed": seed,
        "lr": lr,
        "losses": _rounded(losses),
        "max_logit": _rounded(max_logit),
        "early_loss": _rounded([float(np.mean(losses[: c["early_steps"]]))], 6)[0],
        "at": at,
        "seconds": time.perf_counter() - start,
    }


def _run_triple(triple: tuple[str, int, float]) -> dict:
    return grid_run(*triple)


def grid_runs(
    variants: Sequence[str] = GRID_VARIANTS,
    config: dict | None = None,
    jobs: int = 1,
    partial: Path | None = None,
) -> list[dict]:
    """:func:`grid_run` for every variant, learning rate and seed (in that order).

    With ``partial``, each finished run is appended to that JSON-lines file as it comes, and runs
    already there are not run again (a long grid can be resumed).
    """
    c = {**GRID_CONFIG, **(config or {})}
    triples = [(v, s, lr) for v in variants for lr in c["lrs"] for s in c["seeds"]]
    done: dict[tuple, dict] = {}
    if partial is not None and partial.exists():
        for line in partial.read_text(encoding="utf-8").splitlines():
            run = json.loads(line)
            done[(run["variant"], run["seed"], run["lr"])] = run
    todo = [t for t in triples if t not in done]
    if jobs <= 1:
        results = map(_run_triple, todo)
        pool = None
    else:
        import multiprocessing

        pool = multiprocessing.get_context("spawn").Pool(jobs)
        results = pool.imap_unordered(_run_triple, todo, chunksize=1)
    for run in results:
        done[(run["variant"], run["seed"], run["lr"])] = run
        if partial is not None:
            with partial.open("a", encoding="utf-8") as f:
                f.write(json.dumps(run) + "\n")
    if pool is not None:
        pool.close()
    return [done[t] for t in triples]


def load_grid(path: str | Path) -> dict:
    """The cached grid: ``config``, ``variants``, ``command``, ``torch`` and ``runs``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def grid_cells(grid: dict) -> list[tuple[float, int]]:
    """Every (learning rate, budget) of the grid, learning rate first."""
    c = grid["config"]
    return [(lr, budget) for lr in c["lrs"] for budget in c["budgets"]]


def over_grid(
    grid: dict,
    test: Callable[[float, int], np.ndarray],
    budgets: Sequence[int] | None = None,
) -> np.ndarray:
    """Apply ``test(lr, budget)`` (a bool ``(seeds,)`` array) at every cell of the grid, or only
    at the cells of ``budgets``: bool ``(cells, seeds)``. A NaN compared in ``test`` is False."""
    cells = [(lr, b) for lr, b in grid_cells(grid) if budgets is None or b in budgets]
    return np.array([np.asarray(test(lr, b), dtype=bool) for lr, b in cells])


def grid_value(grid: dict, variant: str, key: str, lr: float, budget: int) -> np.ndarray:
    """One held-out measurement of ``variant`` at (``lr``, ``budget``), one per seed.

    ``key`` names an entry of a run's ``at[budget]`` (``"loss"``, ``"max_logit"``, ...; a
    ``stream_rms`` gives the RMS after the last layer) or, with ``budget`` ignored, a run's own
    ``"early_loss"`` or ``"start_logit"`` (the largest logit of step 1). Returns float64
    ``(seeds,)``, seeds in the grid's order; NaN for a run that diverged before ``budget``.
    """
    runs = {
        r["seed"]: r
        for r in grid["runs"]
        if r["variant"] == variant and math.isclose(r["lr"], lr, rel_tol=1e-9)
    }
    values = []
    for seed in grid["config"]["seeds"]:
        run = runs[seed]
        if key == "early_loss":
            values.append(math.nan if run["early_loss"] is None else run["early_loss"])
        elif key == "start_logit":
            values.append(run["max_logit"][0])
        else:
            point = run["at"][str(budget)]
            value = None if point is None else point[key]
            if isinstance(value, list):
                value = value[-1]
            values.append(math.nan if value is None else value)
    return np.array(values, dtype=float)


def peak_logit(grid: dict, variant: str, lr: float, budget: int) -> np.ndarray:
    """The largest attention logit over the first ``budget`` training steps: float64 ``(seeds,)``,
    seeds in the grid's order."""
    runs = {
        r["seed"]: r
        for r in grid["runs"]
        if r["variant"] == variant and math.isclose(r["lr"], lr, rel_tol=1e-9)
    }
    return np.array(
        [
            np.nanmax(np.array(runs[seed]["max_logit"][:budget], dtype=float))
            for seed in grid["config"]["seeds"]
        ]
    )


#: The layouts with a norm on each sublayer's output.
OUTPUT_NORMS = ("peri", "output", "olmo2")


def conclusion_tests(grid: dict) -> dict[str, Callable[[float, int], np.ndarray]]:
    """The chapter's training conclusions as per-seed tests: name -> ``test(lr, budget)``, a bool
    ``(seeds,)`` array (pass it to :func:`over_grid`). Comparisons are seed for seed.

    - ``pre_logit_grows``: Pre-LN's largest held-out logit after training is more than 2.5 times
      that of its first step;
    - ``qk_under_bound``: QK-norm's largest held-out logit is at most the bound of its trained
      gains;
    - ``qk_below_half``: QK-norm's largest held-out logit is below half of Pre-LN's;
    - ``qk_both_learn``: Pre-LN and QK-norm both reach a held-out accuracy above 99%;
    - ``streams_below``: every output-norm layout's stream after the last layer is smaller than
      Pre-LN's;
    - ``output_peak``: the ``output`` model's largest logit over training is more than 5 times the
      ``olmo2`` model's;
    - ``output_slowest``: the ``output`` model's mean loss over the first steps is above both the
      ``olmo2`` and the Pre-LN model's;
    - ``dyt_behind``: the DyT model's held-out loss is above Pre-LN's (LayerNorm's).
    """

    def value(variant: str, key: str, lr: float, budget: int) -> np.ndarray:
        return grid_value(grid, variant, key, lr, budget)

    def streams_below(lr: float, budget: int) -> np.ndarray:
        pre = value("pre", "stream_rms", lr, budget)
        return np.all([value(v, "stream_rms", lr, budget) < pre for v in OUTPUT_NORMS], axis=0)

    return {
        "pre_logit_grows": lambda lr, b: (
            value("pre", "max_logit", lr, b) > 2.5 * value("pre", "start_logit", lr, b)
        ),
        "qk_under_bound": lambda lr, b: (
            value("qk", "max_logit", lr, b) <= value("qk", "qk_bound", lr, b) + 1e-4
        ),
        "qk_below_half": lambda lr, b: (
            value("qk", "max_logit", lr, b) < value("pre", "max_logit", lr, b) / 2
        ),
        "qk_both_learn": lambda lr, b: (
            np.minimum(value("qk", "accuracy", lr, b), value("pre", "accuracy", lr, b)) > 0.99
        ),
        "streams_below": streams_below,
        "output_peak": lambda lr, b: (
            peak_logit(grid, "output", lr, b) > 5 * peak_logit(grid, "olmo2", lr, b)
        ),
        "output_slowest": lambda lr, b: (
            value("output", "early_loss", lr, b)
            > np.maximum(value("olmo2", "early_loss", lr, b), value("pre", "early_loss", lr, b))
        ),
        "dyt_behind": lambda lr, b: value("dyt", "loss", lr, b) > value("pre", "loss", lr, b),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.beyond_grid grid --out FILE [--jobs N]``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.beyond_grid")
    sub = parser.add_subparsers(dest="command", required=True)
    grid = sub.add_parser("grid", help="train every variant on the grid; write JSON")
    grid.add_argument("--out", type=Path, required=True)
    grid.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    partial = args.out.with_suffix(".partial.jsonl")
    results = grid_runs(jobs=args.jobs, partial=partial)
    record = {
        "config": GRID_CONFIG,
        "variants": list(GRID_VARIANTS),
        "command": f"python -m addnorm_lib.experiments.beyond_grid grid --out {args.out}",
        "torch": torch.__version__,
        "runs": results,
    }
    write_record(args.out, record)
    partial.unlink(missing_ok=True)
    print(f"{len(results)} runs in {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
