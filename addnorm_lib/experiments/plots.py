"""Reusable figure helpers of the addnorm course.

- :func:`use_style` sets one matplotlib style for every chapter; :data:`NORM_COLORS` gives each
  norm the same colour in every figure.
- :func:`shared_statistics_mask` says which elements of a tensor share one mean and variance
  (for BatchNorm, LayerNorm, RMSNorm, InstanceNorm and GroupNorm on ``(N, C)``, ``(B, T, C)`` and
  ``(N, C, H, W)`` tensors); :func:`draw_reduction` and :func:`plot_reductions` draw it.
- :func:`plot_per_layer` and :func:`loglog_errors` are the two experiment plots the chapters share:
  a statistic against depth, and an error against a control variable on log-log axes;
  :func:`plot_histograms` overlays the distributions of a few layers (activations or gradients).

Only numpy and matplotlib are imported: nothing here computes a norm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from addnorm_lib import lookup
from addnorm_lib.authoring.figures import MAX_WIDTH_INCHES, install_figure_audit

__all__ = [
    "LAYOUTS",
    "NORM_COLORS",
    "NORM_NAMES",
    "PLACEMENT_LAYOUTS",
    "VARIANT_COLORS",
    "VARIANT_NAMES",
    "describe_reduction",
    "draw_placement_diagram",
    "draw_reduction",
    "loglog_errors",
    "plot_deepnorm_constants",
    "plot_histograms",
    "plot_per_layer",
    "plot_reductions",
    "plot_runs",
    "shared_statistics_mask",
    "sweep_colors",
    "use_style",
]

# ----------------------------------------------------------------------------------------------
# Style

#: One colour per norm (ColorBrewer "Dark2"), plus grey for "no normalization".
NORM_COLORS: dict[str, str] = {
    "batch": "#1b9e77",
    "layer": "#d95f02",
    "rms": "#7570b3",
    "instance": "#e7298a",
    "group": "#66a61e",
    "none": "#666666",
}

#: One colour per residual arrangement, the same in every chapter: Post-LN grey, Pre-LN
#: LayerNorm's orange, DeepNorm purple; the others of the "beyond" chapter after them.
VARIANT_COLORS: dict[str, str] = {
    "post": "#666666",
    "pre": "#d95f02",
    "deepnorm": "#7570b3",
    "peri": "#1b9e77",
    "output": "#e7298a",
    "olmo2": "#66a61e",
    "qk": "#e6ab02",
    "normformer": "#6a3d9a",
    "dyt": "#1f78b4",
}

#: How the chapters' legends name the arrangements: an entry that names one alone ("Pre-LN",
#: "Pre-LN (mean)") must have its colour (the figure audit checks).
VARIANT_NAMES: dict[str, str] = {
    "post": "Post-LN",
    "pre": "Pre-LN",
    "deepnorm": "DeepNorm",
    "peri": "Peri-LN",
    "qk": "QK-norm",
    "normformer": "NormFormer",
    "dyt": "DyT",
}

#: Display names of the norms.
NORM_NAMES: dict[str, str] = {
    "batch": "BatchNorm",
    "layer": "LayerNorm",
    "rms": "RMSNorm",
    "instance": "InstanceNorm",
    "group": "GroupNorm",
}

_STYLE = {
    # 96 dpi is the CSS pixel's: a figure shown at its size shows a point of text as a CSS point.
    "figure.dpi": 96,
    "savefig.dpi": 192,
    "figure.figsize": (MAX_WIDTH_INCHES, 3.4),
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "legend.fontsize": 9,
    "lines.linewidth": 1.8,
    "axes.prop_cycle": mpl.cycler(
        color=[NORM_COLORS[k] for k in ("layer", "batch", "rms", "instance", "group", "none")]
    ),
}


def use_style() -> None:
    """Apply the course's matplotlib style (call once at the top of a chapter).

    In a notebook it also shows figures at twice their resolution and audits each figure before
    it is shown (size, text, legends: :mod:`addnorm_lib.authoring.figures`).
    """
    mpl.rcParams.update(_STYLE)
    install_figure_audit({VARIANT_NAMES[k]: VARIANT_COLORS[k] for k in VARIANT_NAMES})


def sweep_colors(count: int) -> list[tuple[float, float, float, float]]:
    """`count` colours in order along one sequential colormap (viridis, light end left out), for
    curves that differ by one ordered setting: nearby settings look alike, far ones do not."""
    return [plt.get_cmap("viridis")(v) for v in np.linspace(0.0, 0.85, count)]


# ----------------------------------------------------------------------------------------------
# Which elements share statistics

#: Axis names of the tensor layouts the course draws.
LAYOUTS: dict[str, tuple[str, ...]] = {
    "NC": ("N", "C"),
    "BTC": ("B", "T", "C"),
    "NCHW": ("N", "C", "H", "W"),
}

#: For each norm and layout, the axes that *index* the statistics: one mean/variance per value of
#: these axes; every other axis is reduced over. "G" stands for "the channel's group".
_KEPT_AXES: dict[str, dict[str, tuple[str, ...]]] = {
    "batch": {"NC": ("C",), "BTC": ("C",), "NCHW": ("C",)},
    "layer": {"NC": ("N",), "BTC": ("B", "T"), "NCHW": ("N",)},
    "rms": {"NC": ("N",), "BTC": ("B", "T"), "NCHW": ("N",)},
    "instance": {"BTC": ("B", "C"), "NCHW": ("N", "C")},
    "group": {"NC": ("N", "G"), "BTC": ("B", "G"), "NCHW": ("N", "G")},
}

_DEFAULT_SHAPES: dict[str, tuple[int, ...]] = {
    "NC": (6, 8),
    "BTC": (4, 5, 8),
    "NCHW": (4, 8, 2, 3),
}

_AXIS_LABELS: dict[str, str] = {
    "N": "N (examples)",
    "B": "B (sequences)",
    "T": "T (tokens)",
    "C": "C (features)",
    "HW": "H, W (positions)",
}


def _kept_axes(norm: str, layout: str) -> tuple[str, ...]:
    """The axes that index ``norm``'s statistics on ``layout``; ValueError for unknown names."""
    by_layout = lookup(_KEPT_AXES, norm, "norm")
    lookup(LAYOUTS, layout, "layout")
    if layout not in by_layout:
        raise ValueError(
            f"{NORM_NAMES[norm]} is not defined on a {layout} tensor: with no spatial or time "
            "axis each statistic would cover a single element"
        )
    return by_layout[layout]


def describe_reduction(norm: str, layout: str) -> str:
    """What ``norm`` averages over on ``layout``, e.g. ``"... over C; one per (B, T)"``."""
    kept = _kept_axes(norm, layout)
    axes = LAYOUTS[layout]
    reduced = [a for a in axes if a not in kept]
    if "G" in kept:
        reduced = ["C in a group" if a == "C" else a for a in axes if a == "C" or a not in kept]
        kept = tuple("group" if a == "G" else a for a in kept)
    per = kept[0] if len(kept) == 1 else f"({', '.join(kept)})"
    stats = "mean square" if norm == "rms" else "mean, variance"
    return f"{stats} over {', '.join(reduced)}; one per {per}"


def shared_statistics_mask(
    norm: str,
    layout: str,
    shape: Sequence[int] | None = None,
    anchor: Sequence[int] | None = None,
    num_groups: int = 2,
) -> np.ndarray:
    """Which elements share their mean and variance with the element at ``anchor``.

    Args:
        norm: ``"batch"``, ``"layer"``, ``"rms"``, ``"instance"`` or ``"group"``.
        layout: ``"NC"``, ``"BTC"`` or ``"NCHW"`` (axis order of the tensor).
        shape: tensor shape in that layout; a small default shape if None.
        anchor: index of one element; the origin (all zeros) if None.
        num_groups: number of channel groups (GroupNorm only); must divide C.

    Returns:
        Boolean array of ``shape``: True where an element is normalized with the same statistics
        as ``x[anchor]``. (RMSNorm shares LayerNorm's set but uses no mean, only the mean square.)
    """
    kept = _kept_axes(norm, layout)
    axes = LAYOUTS[layout]
    shape = tuple(shape) if shape is not None else _DEFAULT_SHAPES[layout]
    if len(shape) != len(axes):
        raise ValueError(f"shape {shape} has {len(shape)} axes but layout {layout} has {len(axes)}")
    anchor = tuple(anchor) if anchor is not None else (0,) * len(shape)
    index = np.indices(shape)  # (ndim, *shape): index[a] holds each element's index on axis a
    mask = np.ones(shape, dtype=bool)
    for name in kept:
        if name == "G":
            c = axes.index("C")
            if shape[c] % num_groups:
                raise ValueError(f"num_groups={num_groups} does not divide C={shape[c]}")
            group_size = shape[c] // num_groups
            mask &= index[c] // group_size == anchor[c] // group_size
        else:
            a = axes.index(name)
            mask &= index[a] == anchor[a]
    return mask


# ----------------------------------------------------------------------------------------------
# Drawing a tensor as a grid (2-D) or an oblique box of cells (3-D)

_DEPTH = np.array([0.45, 0.35])  # screen offset of one step along the depth axis
_EMPTY = "#eeeeee"


def _nchw_box(mask: np.ndarray) -> np.ndarray:
    """An (N, C, H, W) mask as an (N, HW, C) box."""
    n, c, h, w = mask.shape
    return mask.reshape(n, c, h * w).transpose(0, 2, 1)  # (N, HW, C)


# layout -> (mask as a (depth, vertical, horizontal) box, names of (across, down, back))
_BOXES = {
    "NC": (lambda mask: mask[None], ("C", "N", None)),  # (1, N, C)
    "BTC": (lambda mask: mask, ("C", "T", "B")),  # (B, T, C)
    "NCHW": (_nchw_box, ("C", "HW", "N")),  # (N, HW, C)
}


def _as_box(mask: np.ndarray, layout: str) -> tuple[np.ndarray, tuple[str, str, str | None]]:
    """Reorder ``mask`` to (depth, vertical, horizontal) and name those three screen axes."""
    reorder, names = lookup(_BOXES, layout, "layout")
    return reorder(mask), names


def _shade(color: str, factor: float) -> tuple[float, float, float]:
    """Darken (factor < 1) or lighten (factor > 1) a colour, for the three faces of a box."""
    rgb = np.array(to_rgb(color))
    out = rgb * factor if factor <= 1 else rgb + (1 - rgb) * (factor - 1)
    return tuple(np.clip(out, 0, 1))


def _face_polygons(box: np.ndarray):
    """Polygons and on/off flags of the visible cells: front face, top face, right face."""
    depth, height, width = box.shape
    d = _DEPTH
    faces = {"front": [], "top": [], "right": []}
    for v in range(height):  # front face: depth index 0, row v counted from the top
        for h in range(width):
            corners = np.array([[h, -v - 1], [h + 1, -v - 1], [h + 1, -v], [h, -v]], float)
            faces["front"].append((corners, box[0, v, h]))
    if depth > 1:
        for k in range(depth):  # top face: row 0, going back in depth
            for h in range(width):
                base = np.array([[h, 0], [h + 1, 0]], float)
                corners = np.vstack([base + k * d, base[::-1] + (k + 1) * d])
                faces["top"].append((corners, box[k, 0, h]))
        for k in range(depth):  # right face: last column, going back in depth
            for v in range(height):
                base = np.array([[width, -v], [width, -v - 1]], float)
                corners = np.vstack([base + k * d, base[::-1] + (k + 1) * d])
                faces["right"].append((corners, box[k, v, width - 1]))
    return faces


def draw_reduction(
    ax: Axes,
    norm: str,
    layout: str,
    shape: Sequence[int] | None = None,
    anchor: Sequence[int] | None = None,
    num_groups: int = 2,
    color: str | None = None,
    title: str | None = None,
) -> np.ndarray:
    """Draw a tensor with the elements that share ``x[anchor]``'s statistics coloured in.

    A 2-D ``(N, C)`` tensor is drawn as a grid (rows are examples). ``(B, T, C)`` and
    ``(N, C, H, W)`` are drawn as boxes with C across, T (or H and W flattened) down and the batch
    axis going back, as in the GroupNorm paper's figure.

    Returns:
        The boolean mask that was drawn (see :func:`shared_statistics_mask`).
    """
    mask = shared_statistics_mask(norm, layout, shape, anchor, num_groups)
    color = color or NORM_COLORS[norm]
    box, (across, down, back) = _as_box(mask, layout)
    shading = {"front": 1.0, "top": 0.88, "right": 0.72}
    for face, cells in _face_polygons(box).items():
        polys = [corners for corners, _ in cells]
        fill = [_shade(color if on else _EMPTY, shading[face]) for _, on in cells]
        ax.add_collection(PolyCollection(polys, facecolors=fill, edgecolors="white", linewidths=1))
    depth, height, width = box.shape
    ax.text(width / 2, -height - 0.3, _AXIS_LABELS[across], ha="center", va="top")
    ax.text(-0.3, -height / 2, _AXIS_LABELS[down], ha="right", va="center", rotation=90)
    if back is not None:
        mid = depth * _DEPTH / 2
        angle = np.degrees(np.arctan2(*_DEPTH[::-1]))
        ax.text(
            mid[0] - 0.25,
            mid[1] + 0.25,
            _AXIS_LABELS[back],
            ha="right",
            va="bottom",
            rotation=angle,
            rotation_mode="anchor",
        )
    ax.set_title(title or f"{NORM_NAMES[norm]} on ({', '.join(LAYOUTS[layout])})")
    ax.text(
        width / 2,
        -height - 1.3,
        describe_reduction(norm, layout),
        ha="center",
        va="top",
        fontsize=9,
        style="italic",
    )
    top_right = np.array([width, 0.0]) + depth * _DEPTH * (depth > 1)
    ax.set_xlim(-1.6, top_right[0] + 0.3)
    ax.set_ylim(-height - 2.4, top_right[1] + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    return mask


def plot_reductions(
    norms: Sequence[str] = ("batch", "layer"),
    layouts: Sequence[str] = ("NC", "BTC", "NCHW"),
    num_groups: int = 2,
    row_height: float = 2.4,
) -> Figure:
    """A grid of :func:`draw_reduction` panels: one row per layout, one column per norm, as
    wide as the book's column (``row_height`` inches per row). With the norms side by side, each
    panel is wide enough for its axis labels."""
    fig, axes = plt.subplots(
        len(layouts),
        len(norms),
        figsize=(MAX_WIDTH_INCHES, row_height * len(layouts)),
        squeeze=False,
    )
    for row, layout in zip(axes, layouts, strict=True):
        for ax, norm in zip(row, norms, strict=True):
            draw_reduction(ax, norm, layout, num_groups=num_groups)
    return fig


# ----------------------------------------------------------------------------------------------
# Experiment plots shared by the chapters


def plot_per_layer(
    ax: Axes,
    values: np.ndarray,
    label: str,
    color: str | None = None,
    log: bool = True,
) -> None:
    """Plot a per-layer statistic: the median over items as a line, their min-max as a band.

    Args:
        ax: axes to draw on.
        values: array of shape ``(L + 1, K)``: the statistic after each of ``L`` layers (row 0 is
            the input) for ``K`` items (tokens, examples, seeds).
        label: legend label of the line.
        color: line colour; the next colour of the cycle if None.
        log: use a logarithmic y axis.
    """
    values = np.asarray(values)  # (L + 1, K)
    depth = np.arange(values.shape[0])
    (line,) = ax.plot(depth, np.median(values, axis=1), label=label, color=color)
    ax.fill_between(
        depth,
        values.min(axis=1),
        values.max(axis=1),
        color=line.get_color(),
        alpha=0.2,
        linewidth=0,
    )
    ax.set_xlabel("layer")
    if log:
        ax.set_yscale("log")


def loglog_errors(
    ax: Axes,
    x: Sequence[float],
    errors: Mapping[str, Sequence[float]],
    colors: Mapping[str, str] | None = None,
) -> None:
    """Plot errors against a control variable on log-log axes; mark non-finite errors.

    A NaN or infinite error cannot sit on a log axis: it is drawn as an "x" on the top edge of the
    axes, labelled "NaN/inf". Zero errors are drawn at the bottom edge.

    Args:
        ax: axes to draw on (its labels and title are left to the caller).
        x: positive control values, shape ``(P,)``.
        errors: label -> errors of shape ``(P,)``.
        colors: label -> colour; the colour cycle if None.
    """
    x = np.asarray(x, dtype=float)
    finite_all = np.concatenate([np.asarray(e, float)[np.isfinite(e)] for e in errors.values()])
    positive = finite_all[finite_all > 0]
    low, high = (positive.min() / 3, positive.max() * 3) if positive.size else (1e-16, 1.0)
    for label, err in errors.items():
        err = np.asarray(err, dtype=float)  # (P,)
        ok = np.isfinite(err)
        shown = np.where(ok, np.maximum(err, low), np.nan)
        color = (colors or {}).get(label)
        (line,) = ax.plot(x, shown, "o-", label=label, color=color)
        if (~ok).any():
            ax.plot(
                x[~ok],
                np.full((~ok).sum(), high),
                "x",
                color=line.get_color(),
                markersize=10,
                markeredgewidth=2,
                clip_on=False,
            )
            for xi in x[~ok]:
                ax.annotate(
                    "NaN/inf",
                    (xi, high),
                    textcoords="offset points",
                    xytext=(0, -14),
                    ha="center",
                    fontsize=9,
                    color=line.get_color(),
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(low, high * 1.5)


def plot_histograms(
    ax: Axes,
    samples: Sequence[np.ndarray],
    labels: Sequence[str],
    bins: int = 40,
    value_range: tuple[float, float] | None = None,
    log_abs: bool = False,
    cmap: str = "viridis",
) -> np.ndarray:
    """Overlay the histograms of a few samples (e.g. one per layer) as outlines, in colormap order.

    Each histogram is normalized to unit area, so samples of different sizes compare. With
    ``log_abs=True`` the histogram is of ``log10(|x|)`` (zeros dropped): the view for gradients,
    whose sizes can differ by orders of magnitude between layers.

    Args:
        ax: axes to draw on (its labels and title are left to the caller).
        samples: ``K`` arrays of any shape (flattened), e.g. one layer's activations each.
        labels: ``K`` legend labels.
        bins: number of bins, shared by all samples.
        value_range: ``(low, high)`` of the bins (of ``log10|x|`` if ``log_abs``); if None, the
            0.1st to 99.9th percentile of all samples pooled. Values outside it are not drawn.
        log_abs: histogram ``log10(|x|)`` instead of ``x``.
        cmap: matplotlib colormap name; sample ``k`` gets its colour at ``0.9 k / (K - 1)`` (the
            palest end of the map is left out).

    Returns:
        The bin edges, shape ``(bins + 1,)``.
    """
    if len(samples) != len(labels):
        raise ValueError(f"{len(samples)} samples but {len(labels)} labels")
    values = []
    for sample in samples:
        x = np.asarray(sample, dtype=float).ravel()
        if log_abs:
            x = np.log10(np.abs(x[x != 0]))
        values.append(x[np.isfinite(x)])
    if value_range is None:
        pooled = np.concatenate(values)
        value_range = (np.percentile(pooled, 0.1), np.percentile(pooled, 99.9))
    edges = np.linspace(value_range[0], value_range[1], bins + 1)
    colors = plt.get_cmap(cmap)(np.linspace(0.0, 0.9, len(values)))
    for x, label, color in zip(values, labels, colors, strict=True):
        ax.hist(x, edges, density=True, histtype="step", linewidth=1.6, color=color, label=label)
    ax.set_yticks([])
    return edges


# ----------------------------------------------------------------------------------------------
# DeepNorm chapter


def plot_deepnorm_constants(
    ax_alpha: Axes,
    ax_beta: Axes,
    depths: Sequence[int],
    constants: Mapping[str, tuple[Sequence[float], Sequence[float]]],
) -> None:
    """Draw DeepNorm's alpha and beta against the number of layers, one line per stack.

    Args:
        ax_alpha, ax_beta: axes for alpha and for beta (log-log axes).
        depths: numbers of layers, shape ``(D,)``.
        constants: label (e.g. ``"encoder-only"``) -> ``(alphas, betas)``, each of shape ``(D,)``.
    """
    depths = np.asarray(depths, dtype=float)  # (D,)
    for label, (alphas, betas) in constants.items():
        (line,) = ax_alpha.plot(depths, np.asarray(alphas, dtype=float), label=label)
        ax_beta.plot(depths, np.asarray(betas, dtype=float), label=label, color=line.get_color())
    for ax, name in ((ax_alpha, "alpha (residual weight)"), (ax_beta, "beta (init scale)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("number of layers N (= M)")
        ax.set_ylabel(name)
        ax.axhline(1.0, color="#999999", linestyle=":", linewidth=1)
    _round_log_ticks(ax_alpha)
    _round_log_ticks(ax_beta)


def _round_log_ticks(ax: Axes) -> None:
    """Label a log y axis at the 1-2-5 values in its range, as plain numbers (0.2, not 2e-1)."""
    low, high = ax.get_ylim()
    ticks = [m * 10.0**e for e in range(-3, 4) for m in (1, 2, 5) if low <= m * 10.0**e <= high]
    ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_ylim(low, high)


def plot_runs(
    ax: Axes,
    runs: Mapping[str, Sequence[np.ndarray]],
    colors: Mapping[str, str] | None = None,
    window: int = 1,
) -> None:
    """Plot one curve per run against the step (1-based): e.g. losses or output changes.

    Args:
        ax: axes to draw on (its scale, labels and title are left to the caller).
        runs: label -> a list of ``K`` float arrays of shape ``(S,)`` (one per seed); NaN entries
            (steps that were not measured, or after a divergence) are not drawn. Only the first
            seed of a label appears in the legend.
        colors: label -> colour; the colour cycle if None.
        window: moving-average window (1: the raw values); the first ``window - 1`` steps are
            dropped.
    """
    for label, curves in runs.items():
        color = (colors or {}).get(label)
        for k, curve in enumerate(curves):
            curve = np.asarray(curve, dtype=float)  # (S,)
            if window > 1:
                curve = np.convolve(curve, np.ones(window) / window, mode="valid")
            steps = np.arange(window, window + len(curve))
            (line,) = ax.plot(
                steps,
                curve,
                color=color,
                label=label if k == 0 else None,
                alpha=max(0.25, 1 - 0.35 * k),
            )
            color = line.get_color()
    ax.set_xlabel("step")


# ----------------------------------------------------------------------------------------------
# Placement chapter

#: The layers of each block that :func:`draw_placement_diagram` draws, bottom to top: a string is a
#: box on the residual stream; a tuple is a residual branch (its boxes, then a "+" on the stream).
PLACEMENT_LAYOUTS: dict[str, list] = {
    "post": [("Self-attention",), "LayerNorm", ("FFN",), "LayerNorm"],
    "pre": [("LayerNorm", "Self-attention"), ("LayerNorm", "FFN")],
    "sandwich": [("RMSNorm", "Self-attention", "RMSNorm"), ("RMSNorm", "FFN", "RMSNorm")],
    "output-norm": [("Self-attention", "RMSNorm"), ("FFN", "RMSNorm")],
}


# display name of a norm -> its key in NORM_COLORS ("LayerNorm" -> "layer")
_NORM_KEYS = {name: key for key, name in NORM_NAMES.items()}


def _box(ax: Axes, x: float, y: float, text: str, width: float = 1.5) -> None:
    """A rounded box labelled ``text`` centred at (x, y); a norm's box (a label ending in the norm's
    display name, e.g. "final LayerNorm") takes the norm's colour, any other box is grey."""
    name = text.split()[-1]
    color = NORM_COLORS[lookup(_NORM_KEYS, name, "norm")] if name.endswith("Norm") else "#bbbbbb"
    ax.add_patch(
        mpl.patches.FancyBboxPatch(
            (x - width / 2, y - 0.22),
            width,
            0.44,
            boxstyle="round,pad=0.02",
            facecolor=(*to_rgb(color), 0.25),
            edgecolor=color,
            linewidth=1.4,
            zorder=3,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9, zorder=4)


def _arrow(ax: Axes, points: Sequence[tuple[float, float]]) -> None:
    """A polyline through ``points`` with an arrow head at the last point."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs[:-1], ys[:-1], color="#333333", linewidth=1.2, zorder=1)
    ax.annotate(
        "",
        xy=points[-1],
        xytext=points[-2],
        zorder=2,
        arrowprops={"arrowstyle": "-|>", "color": "#333333", "lw": 1.2, "shrinkA": 0, "shrinkB": 0},
    )


def draw_placement_diagram(
    ax: Axes, kind: str, title: str | None = None, final_norm: bool = False
) -> None:
    """Draw one Transformer block as boxes and arrows, input at the bottom, output at the top.

    Args:
        ax: axes to draw on (its frame is turned off).
        kind: a key of :data:`PLACEMENT_LAYOUTS`: ``"post"``, ``"pre"``, ``"sandwich"`` or
            ``"output-norm"``.
        title: the axes' title (default: none).
        final_norm: mark the block as repeated ("x L") and draw the stack's final LayerNorm
            above it, as a Pre-LN stack has.
    """
    layers = lookup(PLACEMENT_LAYOUTS, kind, "kind")
    step, main_x, side_x = 0.72, 0.0, 1.55
    y = 0.0
    ax.text(main_x, y - 0.25, "$x_l$", ha="center", va="top", fontsize=10)
    start = y
    for item in layers:
        if isinstance(item, str):  # a box on the stream
            _arrow(ax, [(main_x, y), (main_x, y + step - 0.22)])
            y += step
            _box(ax, main_x, y, item)
            y += 0.22
            continue
        fork = y + 0.15  # the branch leaves the stream here
        _arrow(ax, [(main_x, y), (main_x, fork), (side_x, fork), (side_x, fork + step - 0.22)])
        by = fork + step
        for k, text in enumerate(item):
            _box(ax, side_x, by, text)
            if k < len(item) - 1:
                _arrow(ax, [(side_x, by + 0.22), (side_x, by + step - 0.22)])
                by += step
        plus = by + step
        _arrow(ax, [(side_x, by + 0.22), (side_x, plus), (main_x + 0.16, plus)])
        _arrow(ax, [(main_x, fork), (main_x, plus - 0.16)])
        ax.add_patch(
            mpl.patches.Circle(
                (main_x, plus),
                0.16,
                facecolor="white",
                edgecolor="#333333",
                linewidth=1.2,
                zorder=3,
            )
        )
        ax.text(main_x, plus, "+", ha="center", va="center", fontsize=11, zorder=4)
        y = plus + 0.16
    top = y
    if final_norm:
        frame = {"fill": False, "linestyle": "--", "edgecolor": "#999999"}
        ax.add_patch(mpl.patches.Rectangle((-1.05, start - 0.05), 3.45, top - start + 0.1, **frame))
        ax.text(2.35, top - 0.1, "× L", ha="right", va="top", fontsize=10, color="#666666")
        _arrow(ax, [(main_x, y), (main_x, y + step - 0.22)])
        y += step
        _box(ax, main_x, y, "final LayerNorm", width=1.9)
        y += 0.22
    _arrow(ax, [(main_x, y), (main_x, y + 0.45)])
    label = "output" if final_norm else "$x_{l+1}$"
    ax.text(main_x, y + 0.5, label, ha="center", va="bottom", fontsize=10)
    ax.set_xlim(-1.2, 2.6)
    ax.set_ylim(-0.7, y + 1.0)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
