"""Figures made for the book's page: size, text and legends, checked as each is shown.

A cell's output area is 672 CSS pixels wide at a 1280 px window. A figure of at most
:data:`MAX_WIDTH_INCHES` at 96 dpi (the CSS pixel's), cropped with a small margin, is shown at
its own size (not shrunk), drawn at twice that resolution (IPython's "retina" format), and its
text is readable when it is at least :data:`MIN_FONT_POINTS` (points are then CSS points).
:func:`figure_problems` lists what breaks these rules, and also legends drawn over the data.
:func:`install_figure_audit` runs it on every figure a notebook shows and prints each problem on
stderr: the book's build test fails on any page that prints on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = [
    "MAX_WIDTH_INCHES",
    "MIN_FONT_POINTS",
    "colour_problems",
    "figure_problems",
    "install_figure_audit",
]

#: 653 px at 96 dpi, 663 px once cropped (PAD_INCHES each side): fits the 672 px output area.
MAX_WIDTH_INCHES = 6.8
#: The margin left around a figure when the inline backend crops it to its content.
PAD_INCHES = 0.05
#: The smallest text a figure may have, in points (CSS points when shown at its size).
MIN_FONT_POINTS = 9.0


def _any_inside(points: np.ndarray, box: Bbox) -> bool:
    """Whether any of the (n, 2) pixel points lies in `box`."""
    x, y = points[:, 0], points[:, 1]
    return bool(np.any((x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)))


def _data_hits(fig: Figure, box: Bbox, only=None) -> int:
    """How many lines, markers, bars or bands of the figure's axes (or of `only`) reach into
    `box`, in pixels."""
    hits = 0
    for ax in fig.axes:
        if only is not None and ax is not only:
            continue
        seen = Bbox.intersection(box, ax.bbox)  # data outside the axes is clipped away
        if seen is None:
            continue
        for line in ax.get_lines():
            if not line.get_visible() or len(line.get_xydata()) == 0:
                continue
            path = line.get_transform().transform_path(line.get_path())
            has_marker = line.get_marker() not in (None, "None", "", " ")
            has_line = line.get_linestyle() not in ("None", "", " ")
            hits += (has_marker and _any_inside(path.vertices, seen)) or (
                has_line and path.intersects_bbox(seen, filled=False)
            )
        hits += sum(p.get_visible() and p.get_window_extent().overlaps(seen) for p in ax.patches)
        for collection in ax.collections:
            if not collection.get_visible():
                continue
            if isinstance(collection, PathCollection):  # markers (scatter)
                points = collection.get_offset_transform().transform(collection.get_offsets())
                hits += _any_inside(points, seen)
            else:  # bands and polygons (fill_between)
                transform = collection.get_transform()
                hits += any(
                    transform.transform_path(path).intersects_bbox(seen, filled=True)
                    for path in collection.get_paths()
                )
    return hits


def _handle_color(handle) -> tuple[float, float, float] | None:
    """The colour a legend entry shows (its line, or its markers' or patch's face)."""
    if isinstance(handle, Line2D):
        return to_rgb(handle.get_color())
    if isinstance(handle, Patch):
        return to_rgb(handle.get_facecolor())
    if isinstance(handle, PathCollection) and len(handle.get_facecolor()):
        return to_rgb(handle.get_facecolor()[0])
    return None


def _named(label: str, name: str) -> bool:
    """Whether a legend label names `name` alone: "Pre-LN", "Pre-LN (mean)", "Pre-LN, seed 0"."""
    return label == name or label.startswith((f"{name} (", f"{name}, "))


def colour_problems(fig: Figure, named_colors: Mapping[str, str]) -> list[str]:
    """Legend entries that name one of `named_colors` (e.g. "Post-LN") in another colour."""
    found = []
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    for legend in filter(None, legends):
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=False):
            label, shown = text.get_text(), _handle_color(handle)
            for name, color in named_colors.items():
                if shown is not None and _named(label, name) and shown != to_rgb(color):
                    found.append(f"{label!r} is drawn in {to_hex(shown)}, not {name}'s {color}")
    return found


def figure_problems(fig: Figure, named_colors: Mapping[str, str] | None = None) -> list[str]:
    """What keeps `fig` from reading well in the book's column (an empty list if nothing);
    with `named_colors` (label -> colour), also legend entries that name one of them in
    another colour (the same arrangement has one colour in every chapter)."""
    found = colour_problems(fig, named_colors) if named_colors else []
    width = fig.get_figwidth()
    if width > MAX_WIDTH_INCHES + 1e-6:
        found.append(
            f"{width:.2f} in wide: at most {MAX_WIDTH_INCHES} in fit the column without shrinking"
        )
    fig.canvas.draw()  # lay out, so that extents are final
    small = {
        (text.get_text()[:40], round(text.get_fontsize(), 1))
        for text in fig.findobj(Text)
        if text.get_visible() and text.get_text().strip() and text.get_fontsize() < MIN_FONT_POINTS
    }
    found += [
        f"text {t!r} at {size} pt (at least {MIN_FONT_POINTS:g})" for t, size in sorted(small)
    ]
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            hits = _data_hits(fig, legend.get_window_extent(), only=ax)
            if hits:
                title = ax.get_title() or f"axes {fig.axes.index(ax) + 1}"
                found.append(f"the legend of {title!r} covers the data ({hits} artists)")
    for legend in fig.legends:
        hits = _data_hits(fig, legend.get_window_extent())
        if hits:
            found.append(f"the figure's legend covers the data ({hits} artists)")
    return found


def _audited(show_png, named_colors: Mapping[str, str] | None):
    """`show_png` (the PNG formatter of figures) that first prints `fig`'s problems on stderr."""

    def audited(fig: Figure, *args, **kwargs):
        for problem in figure_problems(fig, named_colors):
            label = fig.get_label() or (fig.axes[0].get_title() if fig.axes else "")
            print(f"figure {label!r}: {problem}", file=sys.stderr)
        return show_png(fig, *args, **kwargs)

    audited.is_audited = True
    return audited


def _ensure_audited(shell, named_colors: Mapping[str, str] | None = None) -> None:
    """Wrap the PNG formatter of figures in the audit, unless it already is (the inline backend
    may have replaced it since)."""
    formatter = shell.display_formatter.formatters["image/png"]
    try:
        show_png = formatter.lookup_by_type(Figure)
    except KeyError:
        return
    if not getattr(show_png, "is_audited", False):
        formatter.for_type(Figure, _audited(show_png, named_colors))


def install_figure_audit(named_colors: Mapping[str, str] | None = None) -> bool:
    """In IPython, show figures at 2x and audit every figure as it is shown (with
    `named_colors`: label -> the colour a legend entry of that name must have).

    Every figure a notebook shows (``plt.show()``, a figure as a cell's value, ``display``) goes
    through IPython's PNG formatter; the audit wraps it, and checks before each cell that it
    still does. Returns whether an IPython shell was found (outside one, nothing is installed).
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of the course
        return False
    shell = get_ipython()
    if shell is None:
        return False
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("retina", pad_inches=PAD_INCHES)
    _ensure_audited(shell, named_colors)
    callbacks = shell.events.callbacks["pre_execute"]
    if not any(getattr(c, "audits_figures", False) for c in callbacks):

        def check_audit() -> None:
            _ensure_audited(shell, named_colors)

        check_audit.audits_figures = True
        shell.events.register("pre_execute", check_audit)
    return True
