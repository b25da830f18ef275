"""The LayerNorm chapter's explorer: one float32 row through LayerNorm, two-pass against one-pass.

:func:`explore` draws, for one ``eps``, offset and spread, the histogram of the float32 outputs of
the two-pass (library) and the one-pass (``E[x^2] - E[x]^2``) LayerNorm on the row
``offset + std * z``, and each one's largest error against float64 on the same float32 inputs.
The chapter draws every combination of :data:`GRID` when the page is built
(:func:`addnorm_lib.authoring.explorer.precomputed_explorer`).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from addnorm_lib.experiments import plots
from addnorm_lib.reference import mistakes, norms

__all__ = ["DEFAULTS", "GRID", "LABELS", "count", "describe", "explore"]

#: The values each control offers.
GRID = {
    "eps": [1e-12, 1e-5, 1e-2],
    "offset": [1.0, 100.0, 1e3, 1e4],
    "std": [1e-5, 1e-3, 1.0],
}
#: How each value is written in the menus.
LABELS = {
    "eps": ["1e-12", "1e-5", "1e-2"],
    "offset": ["1", "100", "1000", "10000"],
    "std": ["1e-5", "1e-3", "1"],
}
#: The figure shown first.
DEFAULTS = {"eps": 1e-5, "offset": 1e3, "std": 1.0}


def count() -> int:
    """How many figures the explorer holds: the product of the option counts."""
    return math.prod(len(v) for v in GRID.values())


def describe(setting: dict) -> str:
    """Alt text for the figure of one setting (a dict with the keys of :data:`GRID`)."""
    shown = {name: LABELS[name][GRID[name].index(value)] for name, value in setting.items()}
    return (
        "Histograms of the float32 LayerNorm outputs of one row with the "
        "two-pass and the one-pass variance, and each one's largest error "
        f"against float64; eps {shown['eps']}, offset {shown['offset']}, "
        f"std {shown['std']}"
    )


def explore(z: np.ndarray, eps: float, offset: float, std: float) -> plt.Figure:
    """Histogram of the float32 LayerNorm output of the row ``offset + std * z`` (z of shape (C,),
    float64), two-pass vs one-pass, and each one's largest error against float64."""
    n = z.shape[-1]
    g32, b32 = np.ones(n, np.float32), np.zeros(n, np.float32)
    x32 = (offset + std * z).astype(np.float32)  # (C,)
    x64 = x32.astype(np.float64)  # (C,) the same numbers, exactly
    ref = norms.layer_norm(x64, np.ones(n), np.zeros(n), eps=eps)  # (C,) float64 reference
    outputs = {"two-pass": norms.layer_norm(x32, g32, b32, eps=eps)}
    with np.errstate(invalid="ignore"):  # a negative variance gives NaN
        outputs["one-pass"] = mistakes.layer_norm_one_pass(x32, g32, b32, eps=eps)
    colors = {"two-pass": plots.NORM_COLORS["layer"], "one-pass": plots.NORM_COLORS["none"]}
    # the one-pass outline is dashed, so that the two-pass one shows where they coincide
    styles = {"two-pass": ("-", 3.0), "one-pass": ("--", 1.5)}

    fig, (ax_hist, ax_err) = plt.subplots(1, 2, figsize=(6.8, 3.4), width_ratios=[2, 1])
    bins = np.linspace(-4, 4, 41)
    for name, y in outputs.items():
        finite = y[np.isfinite(y)]
        ax_hist.hist(
            np.clip(finite, -4, 4),
            bins,
            histtype="step",
            linestyle=styles[name][0],
            linewidth=styles[name][1],
            color=colors[name],
            label=f"{name} ({finite.size} finite)",
        )
    ax_hist.set(
        xlabel="LayerNorm output (clipped to [-4, 4])",
        ylabel="count",
        title=f"eps={eps:.0e}, offset={offset:g}, std={std:g}",
    )
    fig.legend(loc="outside upper center", ncols=2)
    errors = [np.abs(y - ref).max() for y in outputs.values()]  # NaN if any output is NaN
    heights = [e if np.isfinite(e) else 1.0 for e in errors]
    ax_err.bar(list(outputs), np.maximum(heights, 1e-9), color=list(colors.values()))
    for i, (e, height) in enumerate(zip(errors, heights, strict=True)):
        ax_err.text(i, max(height, 1e-9), f"{e:.1e}", ha="center", va="bottom", fontsize=9)
    ax_err.set(yscale="log", ylim=(1e-9, 1e5), ylabel="max |error| vs float64", title="error")
    return fig
