"""The placement chapter's warm-up grid: does a conclusion of the warm-up sweep hold off its point?

The sweep of :mod:`addnorm_lib.experiments.placement` trains each setting for 400 steps at two
learning rates. This grid re-runs the Post-LN recipes (Adam with no warm-up, a 100-step or a
300-step warm-up; RAdam without warm-up) and Pre-LN with plain Adam on six seeds, at the sweep's
peak learning rate of 3e-3 and at a third and three times it, for 1,200 steps, and scores every
run on held-out sequences at step 400 and at step 1,200. Its model is narrower and its batches
smaller than the sweep's (:data:`GRID_CONFIG`); the whole grid took about ten CPU-minutes
(torch 2.13, one thread per process). After its warm-up the learning rate is
constant, so the first 400 steps of a 1,200-step run are a 400-step run: one run gives both
budgets.

To fit a shared CPU, the six seeds of a setting train together: their weights are stacked along
a leading seed axis (``torch.func.stack_module_state``) and :func:`stacked_logits` computes
every seed's forward pass on its own batch with batched matrix products (one call per
operation for all seeds, instead of one per seed). Adam and RAdam act entry by entry, so one
optimizer over the stacked weights takes, for each seed, the step that a separate optimizer
would take; the seeds share nothing but the arithmetic. Regenerate the cached grid with::

    nice -n 10 .venv/bin/python -m addnorm_lib.experiments.placement_grid warmup-grid \\
        --out book/data/placement_warmup_grid.json --jobs 15

(``--jobs``: processes, one cell each at a time; the results do not depend on it.)

``tests/experiments/test_placement_grid.py`` re-runs the first steps of one setting and compares
them with the file.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import stack_module_state

from addnorm_lib import lookup
from addnorm_lib.experiments.deepnorm import reverse_task
from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.experiments.placement import SWEEP_CONFIG, PlacementModel

__all__ = [
    "GRID_CONFIG",
    "GridCell",
    "grid_cells",
    "stacked_logits",
    "train_cell",
    "warmup_grid",
]

_OPTIMIZERS = {"adam": torch.optim.Adam, "radam": torch.optim.RAdam}

#: The grid's task, depth and betas are the sweep's; its model is half as wide (width 16,
#: 2 heads, FFN width 64) and its batches half as large (16 sequences), to fit 90 runs of 1,200
#: steps into about ten CPU-minutes.
GRID_CONFIG: dict = {
    **{k: v for k, v in SWEEP_CONFIG.items() if k != "steps"},
    "d_model": 16,
    "nhead": 2,
    "dim_feedforward": 64,
    "batch_size": 16,
    "betas": list(SWEEP_CONFIG["betas"]),
    "steps": 1200,
    "score_at": [400, 1200],
    "held_out": 512,
    "window": 10,
    "seeds": [0, 1, 2, 3, 4, 5],
    "lrs": [1e-3, 3e-3, 9e-3],
}

#: (placement, optimizer, warm-up steps) of the grid's recipes, in the order they are run.
RECIPES: tuple[tuple[str, str, int], ...] = (
    ("post", "adam", 0),
    ("post", "adam", 100),
    ("post", "adam", 300),
    ("post", "radam", 0),
    ("pre", "adam", 0),
)


@dataclass(frozen=True)
class GridCell:
    """One setting of the grid, trained on every seed of the config at once.

    ``placement``: ``"post"`` or ``"pre"``; ``optimizer``: ``"adam"`` or ``"radam"``;
    ``warmup``: linear warm-up steps (0: none); ``lr``: the peak learning rate.
    """

    placement: str
    optimizer: str
    warmup: int
    lr: float


def grid_cells(lrs: Sequence[float] = GRID_CONFIG["lrs"]) -> list[GridCell]:
    """Every recipe of :data:`RECIPES` at every learning rate of ``lrs``."""
    return [GridCell(p, o, w, lr) for lr in lrs for p, o, w in RECIPES]


def _linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Every seed's ``nn.Linear``: ``x (S, B, T, C_in)``, ``weight (S, C_out, C_in)``,
    ``bias (S, C_out)`` -> ``(S, B, T, C_out)``."""
    s, b, t, c = x.shape
    out = torch.baddbmm(bias[:, None, :], x.reshape(s, b * t, c), weight.transpose(1, 2))
    return out.reshape(s, b, t, -1)  # (S, B, T, C_out)


def _layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Every seed's ``nn.LayerNorm`` over C: ``x (S, B, T, C)``, ``weight``, ``bias`` ``(S, C)``."""
    y = F.layer_norm(x, x.shape[-1:], eps=eps)  # (S, B, T, C)
    return y * weight[:, None, None, :] + bias[:, None, None, :]


def _attention(x: Tensor, p: dict[str, Tensor], prefix: str, nhead: int) -> Tensor:
    """Every seed's :class:`~addnorm_lib.transformer.sublayers.SelfAttention`, ``(S, B, T, C)``."""
    s, b, t, c = x.shape

    def heads(name: str) -> Tensor:
        y = _linear(x, p[f"{prefix}.{name}.weight"], p[f"{prefix}.{name}.bias"])
        return y.reshape(s * b, t, nhead, c // nhead).transpose(1, 2)  # (S B, H, T, C/H)

    mixed = F.scaled_dot_product_attention(heads("q_proj"), heads("k_proj"), heads("v_proj"))
    mixed = mixed.transpose(1, 2).reshape(s, b, t, c)  # (S, B, T, C)
    return _linear(mixed, p[f"{prefix}.out_proj.weight"], p[f"{prefix}.out_proj.bias"])


def _ffn(x: Tensor, p: dict[str, Tensor], prefix: str) -> Tensor:
    """Every seed's GELU :class:`~addnorm_lib.transformer.sublayers.FeedForward`."""
    h = F.gelu(_linear(x, p[f"{prefix}.fc1.weight"], p[f"{prefix}.fc1.bias"]))  # (S, B, T, F)
    return _linear(h, p[f"{prefix}.fc2.weight"], p[f"{prefix}.fc2.bias"])  # (S, B, T, C)


def stacked_logits(
    p: dict[str, Tensor], placement: str, tokens: Tensor, num_layers: int, nhead: int
) -> Tensor:
    """The :class:`~addnorm_lib.experiments.placement.PlacementModel` forward of S models at once.

    ``p``: the models' parameters stacked along a leading seed axis (the names and shapes of
    ``torch.func.stack_module_state``); ``tokens``: int64 ``(S, B, T)``, one batch per model.
    Returns float32 logits ``(S, B, T, V)``, each model's on its own batch.
    """
    s = tokens.shape[0]
    embedded = p["embed.weight"][torch.arange(s)[:, None, None], tokens]  # (S, B, T, C)
    x = embedded + p["pos"][:, None, : tokens.shape[2]]  # (S, B, T, C)
    for i in range(num_layers):
        pre = f"stack.{i}" if placement == "post" else f"stack.layers.{i}"

        def norm(v: Tensor, k: int, pre: str = pre) -> Tensor:
            return _layer_norm(v, p[f"{pre}.norm{k}.weight"], p[f"{pre}.norm{k}.bias"])

        if placement == "post":
            x = norm(x + _attention(x, p, f"{pre}.self_attn", nhead), 1)
            x = norm(x + _ffn(x, p, f"{pre}.ffn"), 2)
        else:
            x = x + _attention(norm(x, 1), p, f"{pre}.self_attn", nhead)
            x = x + _ffn(norm(x, 2), p, f"{pre}.ffn")
    if placement == "pre":
        x = _layer_norm(x, p["stack.norm.weight"], p["stack.norm.bias"])
    return _linear(x, p["head.weight"], p["head.bias"])  # (S, B, T, V)


def _per_seed_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of each seed.

    ``logits (S, B, T, V)``, int64 ``targets (S, B, T)`` -> float32 ``(S,)``."""
    s, v = logits.shape[0], logits.shape[-1]
    ce = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="none")
    return ce.reshape(s, -1).mean(1)  # (S,)


def train_cell(cell: GridCell, config: dict | None = None, steps: int | None = None) -> dict:
    """Train one setting on every seed of ``config`` (default :data:`GRID_CONFIG`) at once.

    Each seed's model is the seeded :class:`~addnorm_lib.experiments.placement.PlacementModel`
    of the sweep, trained on its own batches (a generator seeded by the seed, as in the sweep);
    its held-out batch of ``config["held_out"]`` sequences comes from a separate generator
    (seed + 10,000), so scoring does not move the training batches. ``steps`` shortens the run
    (for tests); scores are taken at the steps of ``config["score_at"]`` that are reached.

    Returns a dict of ``asdict(cell)`` and, per seed (lists in seed order): ``train_loss``
    (mean training loss over each window of ``config["window"]`` steps, 5 decimals),
    ``held_out_loss`` and ``held_out_accuracy`` (dicts from the scoring step, as a string, to
    per-seed floats), and ``seconds`` of CPU time.
    """
    config = {**GRID_CONFIG, **(config or {})}
    steps = steps or config["steps"]
    seeds, window = list(config["seeds"]), config["window"]
    vocab, seq_len = config["vocab_size"], config["seq_len"]
    torch.set_num_threads(1)
    models = []
    for seed in seeds:
        set_seed(seed)
        models.append(
            PlacementModel(
                cell.placement,
                vocab,
                seq_len,
                config["num_layers"],
                config["d_model"],
                config["nhead"],
                config["dim_feedforward"],
            )
        )
    params, _ = stack_module_state(models)  # name -> (S, ...) leaves

    def logits_of(tokens: Tensor) -> Tensor:  # (S, B, T) -> (S, B, T, V)
        return stacked_logits(params, cell.placement, tokens, config["num_layers"], config["nhead"])

    opt_class = lookup(_OPTIMIZERS, cell.optimizer, "optimizer")
    opt = opt_class(params.values(), lr=cell.lr, betas=tuple(config["betas"]))
    w = cell.warmup
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / w)) if w else None
    data = [torch.Generator().manual_seed(s) for s in seeds]
    held = [
        reverse_task(config["held_out"], seq_len, vocab, torch.Generator().manual_seed(s + 10_000))
        for s in seeds
    ]
    held_x = torch.stack([x for x, _ in held])  # (S, N, T)
    held_y = torch.stack([y for _, y in held])  # (S, N, T)
    start = time.process_time()
    per_step = []  # steps x (S,)
    scores: dict[str, tuple[list, list]] = {}
    for step in range(1, steps + 1):
        batch = [reverse_task(config["batch_size"], seq_len, vocab, g) for g in data]
        x = torch.stack([b[0] for b in batch])  # (S, B, T)
        y = torch.stack([b[1] for b in batch])  # (S, B, T)
        losses = _per_seed_loss(logits_of(x), y)  # (S,)
        opt.zero_grad()
        losses.sum().backward()  # each seed's loss reaches only its own weights
        opt.step()
        if sched is not None:
            sched.step()
        per_step.append(losses.detach().double())
        if step in config["score_at"]:
            with torch.no_grad():
                logits = logits_of(held_x)  # (S, N, T, V)
                loss = _per_seed_loss(logits, held_y)  # (S,)
                acc = (logits.argmax(-1) == held_y).double().flatten(1).mean(1)  # (S,)
            scores[str(step)] = (loss.tolist(), acc.tolist())
    curve = torch.stack(per_step)  # (steps, S)
    n_win = steps // window
    means = curve[: n_win * window].reshape(n_win, window, -1).mean(1)  # (windows, S)
    return {
        **asdict(cell),
        "train_loss": [[round(float(v), 5) for v in means[:, i]] for i in range(len(seeds))],
        "held_out_loss": {k: v[0] for k, v in scores.items()},
        "held_out_accuracy": {k: v[1] for k, v in scores.items()},
        "seconds": time.process_time() - start,
    }


@dataclass
class _Grid:
    config: dict
    command: str
    torch: str
    cells: list = field(default_factory=list)


def warmup_grid(
    cells: Sequence[GridCell], jobs: int = 1, partial: Path | None = None
) -> list[dict]:
    """:func:`train_cell` for every cell (default config), on ``jobs`` processes of one thread
    each; results in the order of ``cells``. ``partial``: a JSON-lines file to which each
    finished cell is appended (to look at a long grid while it runs)."""
    import multiprocessing

    done: list[dict] = []
    with multiprocessing.get_context("spawn").Pool(max(jobs, 1)) as pool:
        for cell in pool.imap(train_cell, cells, chunksize=1):
            done.append(cell)
            if partial is not None:
                with partial.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(cell) + "\n")
    return done


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.placement_grid warmup-grid --out FILE``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.placement_grid")
    sub = parser.add_subparsers(dest="command", required=True)
    grid = sub.add_parser("warmup-grid", help="run the warm-up grid and write it as JSON")
    grid.add_argument("--out", type=Path, required=True)
    grid.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cells = warmup_grid(grid_cells(), args.jobs, args.out.with_suffix(".partial.jsonl"))
    command = f"python -m addnorm_lib.experiments.placement_grid warmup-grid --out {args.out}"
    record = _Grid(GRID_CONFIG, command, torch.__version__, cells)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(asdict(record), indent=1) + "\n", encoding="utf-8")
    cpu = sum(c["seconds"] for c in cells)
    print(
        f"{len(cells)} cells in {time.perf_counter() - start:.0f} s ({cpu:.0f} CPU s) -> {args.out}"
    )


if __name__ == "__main__":
    main()
