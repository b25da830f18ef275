"""Explorers that work in the static book: every figure drawn in advance, switched in the browser.

An ipywidgets slider in a static page cannot run Python. :func:`precomputed_explorer` therefore
draws the figure for every combination of a few values of each control when the chapter runs,
and returns a widget in which the controls choose among those figures in the browser alone: each
control's ``index`` is linked (``jslink``, front-end only) to the ``selected_index`` of a
``Stack`` of figures, one nested ``Stack`` per control. The page embeds the widgets' state, so
the explorer works offline with no kernel; in Jupyter the same links run in the notebook.

Each figure is an ``<img>`` with alt text naming its settings and a ``data-frame`` attribute
(``name=label|name=label``, each control's shown option) that the browser tests compare with
the controls.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from PIL import Image

from addnorm_lib.authoring.figures import figure_problems

__all__ = ["frame_key", "precomputed_explorer", "render_png"]

#: Colours per figure (every explorer's figure is embedded in the page, so its weight counts).
PALETTE = 64
#: Figures are drawn at twice the resolution they are shown at (sharp on high-density screens).
PIXEL_RATIO = 2


def render_png(figure: Figure) -> tuple[bytes, int]:
    """The figure as PNG bytes at PIXEL_RATIO times its size, and its width in CSS pixels.

    The figure is closed afterwards (it is never shown on its own). ValueError if it breaks the
    book's figure rules (:func:`addnorm_lib.authoring.figures.figure_problems`).
    """
    problems = figure_problems(figure)
    if problems:
        plt.close(figure)
        raise ValueError("an explorer's figure does not fit the page: " + "; ".join(problems))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=figure.dpi * PIXEL_RATIO)
    width = round(figure.get_figwidth() * figure.dpi)
    plt.close(figure)
    # A palette of PALETTE colours keeps line plots sharp at a third of the bytes.
    image = Image.open(buffer).convert("RGB").quantize(PALETTE, Image.Quantize.MEDIANCUT)
    small = io.BytesIO()
    image.save(small, format="PNG", optimize=True)
    return small.getvalue(), width


def frame_key(shown: Mapping[str, str]) -> str:
    """``"name=label|name=label"``: the ``data-frame`` attribute of the figure drawn for the
    controls showing these labels (the text of each control's chosen option)."""
    return "|".join(f"{name}={label}" for name, label in shown.items())


def _frame(draw: Callable[..., Figure], settings: dict, key: str, alt: str) -> widgets.HTML:
    png, width = render_png(draw(**settings))
    data = base64.b64encode(png).decode("ascii")
    alt = html.escape(alt, quote=True)
    key = html.escape(key, quote=True)
    image = (
        f'<img class="addnorm-frame" src="data:image/png;base64,{data}" width="{width}" '
        f'alt="{alt}" data-frame="{key}" style="max-width: 100%; height: auto;">'
    )
    return widgets.HTML(value=image)


def _control(name: str, values: Sequence, default, labels: Sequence[str]) -> widgets.Widget:
    """A Dropdown: it fits a phone's width and says which values exist."""
    return widgets.Dropdown(
        options=list(labels),
        index=list(values).index(default),
        description=name,
        style={"description_width": "initial"},
        layout=widgets.Layout(width="auto"),
    )


def precomputed_explorer(
    draw: Callable[..., Figure],
    controls: Mapping[str, Sequence],
    *,
    defaults: Mapping[str, object] | None = None,
    labels: Mapping[str, Sequence[str]] | None = None,
    describe: Callable[[dict], str] | None = None,
    note: str | None = None,
) -> widgets.VBox:
    """An explorer whose figures are all drawn now and switched in the browser.

    Args:
        draw: ``draw(**settings) -> Figure``, called once per combination of the controls' values
            (the figure is closed after it is rendered).
        controls: control name (a keyword of ``draw``) -> its values, in the order shown.
        defaults: the value each control starts at (its first value if not given).
        labels: control name -> how each value is shown (``str(value)`` if not given).
        describe: ``describe(settings) -> str``, each figure's alt text.
        note: the line shown under the controls; by default it says how many figures were drawn
            for which values.

    Returns:
        A VBox: one row of controls, the note, and the figures (one shown at a time); its
        ``links`` attribute lists the ``jslink``s from each control to its stacks.
    """
    names = list(controls)
    if not names:
        raise ValueError("an explorer needs at least one control")
    values = {name: list(controls[name]) for name in names}
    for name, options in values.items():
        if not options:
            raise ValueError(f"control {name!r} has no values")
    defaults = dict(defaults or {})
    unknown = set(defaults) - set(names)
    if unknown:
        raise ValueError(f"defaults for unknown controls {sorted(unknown)}; controls: {names}")
    for name, value in defaults.items():
        if value not in values[name]:
            raise ValueError(f"default {name}={value!r} is not one of {values[name]}")
    shown = {name: list((labels or {}).get(name) or map(str, values[name])) for name in names}
    for name in names:
        if len(shown[name]) != len(values[name]) or len(set(shown[name])) != len(values[name]):
            raise ValueError(f"control {name!r} needs one distinct label per value: {shown[name]}")
    describe = describe or (lambda s: ", ".join(f"{k} = {v}" for k, v in s.items()))
    start = {name: defaults.get(name, values[name][0]) for name in names}
    widgets_by_name = {
        name: _control(name, values[name], start[name], shown[name]) for name in names
    }
    stacks: dict[str, list[widgets.Stack]] = {name: [] for name in names}

    def nest(level: int, chosen: dict[str, int]) -> widgets.Widget:
        """The Stack for control `level` under the options already chosen (by index), or the
        figure once every control has one."""
        if level == len(names):
            settings = {name: values[name][i] for name, i in chosen.items()}
            key = frame_key({name: shown[name][i] for name, i in chosen.items()})
            return _frame(draw, settings, key, describe(settings))
        name = names[level]
        children = [nest(level + 1, {**chosen, name: i}) for i in range(len(values[name]))]
        stack = widgets.Stack(children, selected_index=values[name].index(start[name]))
        stacks[name].append(stack)
        return stack

    figures = nest(0, {})
    links = [
        widgets.jslink((control, "index"), (stack, "selected_index"))
        for name, control in widgets_by_name.items()
        for stack in stacks[name]
    ]
    count = math.prod(len(options) for options in values.values())
    if note is None:
        grid = "; ".join(f"{name}: {', '.join(shown[name])}" for name in names)
        note = f"All {count} figures were drawn when this page was built ({grid})."
    row = widgets.HBox(list(widgets_by_name.values()), layout=widgets.Layout(flex_flow="row wrap"))
    caption = widgets.HTML(value=f'<p class="addnorm-explorer-note">{html.escape(note)}</p>')
    explorer = widgets.VBox(
        [row, caption, figures], layout=widgets.Layout(max_width="100%")
    ).add_class("addnorm-explorer")
    explorer.links = links  # the front-end links, kept for inspection
    return explorer
