"""Reading and drawing the placement chapter's cached training runs (the sweep and the grid).

The chapter's pages read ``book/data/warmup_sweep.json`` (made by
:func:`addnorm_lib.experiments.placement.warmup_sweep`) and
``book/data/placement_warmup_grid.json`` (made by
:func:`addnorm_lib.experiments.placement_grid.warmup_grid`) and never train at build time.
These functions group the runs, count the seeds that learned the task, and draw the figures, so
that the pages show the analysis in a few lines:

- :func:`sweep_arms` groups the sweep's runs by learning rate and setting; :func:`finals`,
  :func:`learned`, :func:`series` read one arm.
- :func:`grid_outcomes` gives, for each cell of the grid and each budget, every seed's held-out
  accuracy; :func:`escape_steps` the step at which each seed left the plateau.
- :func:`plot_depth_gradients`, :func:`plot_stream_growth`, :func:`plot_sweep_curves` and
  :func:`plot_grid` draw the chapter's figures in the course's colours.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from addnorm_lib.experiments import plots

__all__ = [
    "LEARNED",
    "RECIPE_STYLE",
    "arm_name",
    "escape_steps",
    "finals",
    "grid_outcomes",
    "learned",
    "load",
    "plot_depth_gradients",
    "plot_grid",
    "plot_stream_growth",
    "plot_sweep_curves",
    "recipe",
    "series",
    "sweep_arms",
]

#: A run *learned the task* if at least this share of its held-out tokens is right at the end.
LEARNED = 0.9

#: Colour and line style of each training recipe (the warm-up lengths in order, RAdam apart).
_WARMUP_COLORS = plots.sweep_colors(3)
RECIPE_STYLE: dict[str, dict] = {
    "Adam, no warm-up": {"color": _WARMUP_COLORS[0]},
    "Adam, warm-up 100": {"color": _WARMUP_COLORS[1]},
    "Adam, warm-up 300": {"color": _WARMUP_COLORS[2]},
    "RAdam, no warm-up": {"color": "#e7298a", "linestyle": "--"},
}


def load(path: str | Path) -> dict:
    """A cached JSON file of runs (UTF-8)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def recipe(optimizer: str, warmup: int) -> str:
    """``"Adam, warm-up 100"``, ``"RAdam, no warm-up"``: how the pages name a training recipe."""
    name = "RAdam" if optimizer == "radam" else "Adam"
    return f"{name}, warm-up {warmup}" if warmup else f"{name}, no warm-up"


def arm_name(run: Mapping) -> str:
    """``"Post-LN, Adam, warm-up 100"`` (plus ``", 1500 steps"`` for a longer run) for a run
    of the sweep (a dict with ``placement``, ``optimizer``, ``warmup`` and ``steps``)."""
    steps = f", {run['steps']} steps" if run.get("steps") else ""
    placement = plots.VARIANT_NAMES[run["placement"]]
    return f"{placement}, {recipe(run['optimizer'], run['warmup'])}{steps}"


def sweep_arms(sweep: Mapping) -> dict[tuple[float, str], list[dict]]:
    """The sweep's runs grouped by ``(peak learning rate, arm_name)``, seeds in file order."""
    arms: dict[tuple[float, str], list[dict]] = {}
    for run in sweep["runs"]:
        arms.setdefault((run["lr"], arm_name(run)), []).append(run)
    return arms


def finals(runs: Sequence[Mapping]) -> np.ndarray:
    """Held-out loss after the last step, float64 ``(seeds,)``."""
    return np.array([r["final_loss"] for r in runs])


def learned(runs: Sequence[Mapping], threshold: float = LEARNED) -> int:
    """How many of ``runs`` learned the task (held-out accuracy at least ``threshold``)."""
    return sum(r["final_accuracy"] >= threshold for r in runs)


def series(runs: Sequence[Mapping], key: str) -> np.ndarray:
    """A per-step record (``"losses"``, ``"grad_norms"``, ``"update_norms"``) of every run,
    float64 ``(seeds, steps)``, NaN where not recorded."""
    return np.array([[np.nan if v is None else v for v in r[key]] for r in runs])


def grid_outcomes(grid: Mapping) -> dict[tuple[str, str, float, int], np.ndarray]:
    """Every seed's held-out accuracy in the grid.

    Returns ``(placement, recipe, lr, budget) -> float64 (seeds,)``, with ``placement`` as in
    :data:`~addnorm_lib.experiments.plots.VARIANT_NAMES` ("Post-LN"), ``recipe`` as
    :func:`recipe` names it and ``budget`` one of the steps at which the grid scored its runs.
    """
    out = {}
    for cell in grid["cells"]:
        name = (plots.VARIANT_NAMES[cell["placement"]], recipe(cell["optimizer"], cell["warmup"]))
        for budget, acc in cell["held_out_accuracy"].items():
            out[(*name, cell["lr"], int(budget))] = np.array(acc)
    return out


def escape_steps(cell: Mapping, level: float, window: int) -> list[int | None]:
    """For each seed of a grid cell, the last step of the first window of ``window`` steps whose
    mean training loss is below ``level`` (None if none is): when the run left the plateau."""
    steps = []
    for curve in cell["train_loss"]:
        below = [i for i, v in enumerate(curve) if v < level]
        steps.append((below[0] + 1) * window if below else None)
    return steps


def plot_depth_gradients(ax: Axes, depths: Sequence[int], grads: Mapping[str, np.ndarray]):
    """Theorem 1's quantity against depth: every seed (dots) and the mean (line) per placement,
    and the Pre-LN mean at ``L = 1`` times ``1/sqrt(L)`` (dotted). ``grads``: placement
    (``"post"``, ``"pre"``) -> float ``(seeds, depths)``."""
    for p, g in grads.items():
        color = plots.VARIANT_COLORS[p]
        for row in g:
            ax.plot(depths, row, "o", color=color, alpha=0.35, markersize=4)
        ax.plot(depths, g.mean(0), "-", color=color, label=f"{plots.VARIANT_NAMES[p]} (mean)")
    ref = grads["pre"].mean(0)[0] / np.sqrt(depths)
    ax.plot(depths, ref, ":", color="#333333", label="Pre-LN at L = 1, times 1/sqrt(L)")
    ax.set(xscale="log", yscale="log", xlabel="number of layers L")
    ax.set(ylabel="||dLoss / dW|| of last fc2")
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.xaxis.set_minor_locator(plt.NullLocator())


def plot_stream_growth(ax: Axes, growth: Mapping[str, np.ndarray]) -> None:
    """``E||x_l||^2 / d`` against ``l`` for each FFN variant (solid, dashed, in Pre-LN's colour),
    over the band of Xiong et al.'s bounds ``1 + l/2`` to ``1 + 3l/2``. ``growth``: label ->
    float ``(L + 1,)``."""
    layers = np.arange(len(next(iter(growth.values()))))  # l = 0 .. L
    ax.fill_between(
        layers,
        1 + layers / 2,
        1 + 3 * layers / 2,
        color="#999999",
        alpha=0.2,
        label="the lemma's bounds",
    )
    for (k, v), style in zip(growth.items(), ("-", "--"), strict=False):
        ax.plot(layers, v, style, color=plots.VARIANT_COLORS["pre"], label=k)
    ax.set(xlabel="layers l", ylabel="mean ||x_l||² / d", title="the Pre-LN stream at init")


def plot_sweep_curves(
    axes: np.ndarray,
    arms: Mapping,
    recipes: Mapping[str, Sequence[str]],
    lrs: Sequence[float],
    chance: float,
    window: int = 20,
) -> None:
    """Training loss of the sweep's runs, one thin line per seed, smoothed over ``window``
    steps: row ``i`` is placement ``list(recipes)[i]`` ("Post-LN"), column ``j`` learning rate
    ``lrs[j]``; ``recipes``: placement -> the recipes to draw (see :data:`RECIPE_STYLE`). A
    dotted line at ``chance``."""
    for row, (placement, names) in zip(axes, recipes.items(), strict=True):
        for ax, lr in zip(row, lrs, strict=True):
            for name in names:
                for k, run in enumerate(arms.get((lr, f"{placement}, {name}"), [])):
                    curve = series([run], "losses")[0]
                    curve = np.convolve(curve, np.ones(window) / window, mode="valid")
                    steps = np.arange(window, window + len(curve))
                    label = name if k == 0 else None
                    ax.plot(steps, curve, alpha=0.7, lw=1, label=label, **RECIPE_STYLE[name])
            ax.axhline(chance, color="#999999", linestyle=":", linewidth=1)
            ax.set_title(f"{placement}, peak learning rate {lr:.0e}", fontsize=10)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    for ax in axes[:, 0]:
        ax.set_ylabel("training loss")


def plot_grid(
    axes: Sequence[Axes],
    outcomes: Mapping,
    lrs: Sequence[float],
    budgets: Sequence[int],
    threshold: float = LEARNED,
) -> None:
    """The grid as bars: one panel per budget, one group per learning rate, one bar per recipe,
    its height the number of seeds that learned the task. ``outcomes`` as
    :func:`grid_outcomes` returns it. Post-LN's recipes in :data:`RECIPE_STYLE`'s colours,
    Pre-LN in its own."""
    names = sorted({(p, r) for p, r, _, _ in outcomes}, key=lambda n: (n[0] != "Post-LN", n[1]))
    width = 0.8 / len(names)
    for ax, budget in zip(axes, budgets, strict=True):
        for i, (p, r) in enumerate(names):
            counts = [(outcomes[(p, r, lr, budget)] >= threshold).sum() for lr in lrs]
            if p == "Post-LN":
                style = RECIPE_STYLE[r]
                color, hatch, label = style["color"], "//" if "RAdam" in r else None, r
            else:
                color, hatch, label = plots.VARIANT_COLORS["pre"], None, f"{p}, {r}"
            x = np.arange(len(lrs)) + (i - (len(names) - 1) / 2) * width
            ax.bar(x, counts, width, color=color, hatch=hatch, edgecolor="white", label=label)
        n = len(next(iter(outcomes.values())))
        ax.set(title=f"{budget} steps", xlabel="peak learning rate", ylim=(0, n + 0.3))
        ax.set_xticks(np.arange(len(lrs)), [f"{lr:.0e}" for lr in lrs])
    axes[0].set_ylabel(f"seeds that learned (of {n})")
