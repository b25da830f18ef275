"""A precomputed explorer draws each combination once and links every control to its stacks.

The browser tests (tests/book/test_browser.py) drive the explorers of the built book; these
check the widget tree they rely on, without a browser.
"""

import io
import re

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
from PIL import Image

from addnorm_lib.authoring.explorer import PIXEL_RATIO, precomputed_explorer, render_png

KEY = re.compile(r'data-frame="([^"]*)"')


def draw_calls():
    calls = []

    def draw(freq, phase):
        calls.append((freq, phase))
        fig, ax = plt.subplots(figsize=(4, 2))
        ax.plot([0, 1], [phase, freq])
        return fig

    return draw, calls


def frames(widget) -> list[widgets.HTML]:
    """The figures under `widget`, in order."""
    if isinstance(widget, widgets.HTML) and "addnorm-frame" in widget.value:
        return [widget]
    return [f for child in getattr(widget, "children", ()) for f in frames(child)]


def shown_key(widget) -> str:
    """The key of the figure the stacks' selected indices lead to."""
    while isinstance(widget, widgets.Stack):
        widget = widget.children[widget.selected_index]
    return KEY.search(widget.value).group(1)


def build(**options):
    draw, calls = draw_calls()
    controls = {"freq": [1, 2, 3], "phase": [0.0, 0.5]}
    return precomputed_explorer(draw, controls, **options), calls


def test_every_combination_is_drawn_once_with_its_key_and_alt_text():
    explorer, calls = build(describe=lambda s: f"sine at frequency {s['freq']}, phase {s['phase']}")
    assert sorted(calls) == [(f, p) for f in (1, 2, 3) for p in (0.0, 0.5)]
    found = frames(explorer)
    keys = [KEY.search(f.value).group(1) for f in found]
    assert keys == [f"freq={f}|phase={p}" for f in (1, 2, 3) for p in (0.0, 0.5)]
    assert 'alt="sine at frequency 3, phase 0.5"' in found[-1].value


def test_the_controls_start_at_the_defaults_and_show_that_figure():
    explorer, _ = build(defaults={"freq": 2, "phase": 0.5})
    row, note, figures = explorer.children
    freq, phase = row.children
    assert (freq.description, freq.index, phase.index) == ("freq", 1, 1)
    assert shown_key(figures) == "freq=2|phase=0.5"
    assert "6 figures" in note.value


def test_each_control_is_linked_to_every_stack_of_its_level():
    explorer, _ = build()
    row, _, figures = explorer.children
    linked = {}
    for link in explorer.links:
        source, target = link.source, link.target
        if source[0] in row.children:
            linked.setdefault(source[0].description, []).append(target)
    # freq drives the outer stack; phase drives each of the three inner stacks
    assert [t[1] for t in linked["freq"]] == ["selected_index"]
    assert linked["freq"][0][0] is figures
    assert len(linked["phase"]) == 3
    assert {id(t[0]) for t in linked["phase"]} == {id(child) for child in figures.children}
    # what the links do in a browser: the shown figure follows both controls
    for freq in range(3):
        for phase in range(2):
            figures.selected_index = freq
            for stack in figures.children:
                stack.selected_index = phase
            assert shown_key(figures) == f"freq={[1, 2, 3][freq]}|phase={[0.0, 0.5][phase]}"


def test_labels_are_what_the_controls_and_keys_show():
    explorer, _ = build(labels={"phase": ["none", "half"]})
    row, _, figures = explorer.children
    assert list(row.children[1].options) == ["none", "half"]
    assert shown_key(figures) == "freq=1|phase=none"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"defaults": {"freq": 4}}, "default freq=4 is not one of"),
        ({"defaults": {"speed": 1}}, "unknown controls"),
        ({"labels": {"phase": ["same", "same"]}}, "one distinct label per value"),
        ({"labels": {"phase": ["only one"]}}, "one distinct label per value"),
    ],
)
def test_wrong_settings_are_refused_before_anything_is_drawn(options, message):
    draw, calls = draw_calls()
    with pytest.raises(ValueError, match=message):
        precomputed_explorer(draw, {"freq": [1, 2, 3], "phase": [0.0, 0.5]}, **options)
    assert calls == []


def test_a_figure_that_does_not_fit_the_page_is_refused():
    def too_wide(freq):
        fig, ax = plt.subplots(figsize=(9, 3))
        ax.plot([0, freq])
        return fig

    with pytest.raises(ValueError, match=r"9\.00 in wide"):
        precomputed_explorer(too_wide, {"freq": [1]})


def test_figures_are_drawn_at_twice_their_width_and_closed():
    fig, ax = plt.subplots(figsize=(4, 2), dpi=100)
    ax.plot([0, 1])
    png, width = render_png(fig)
    assert width == 400
    assert Image.open(io.BytesIO(png)).size[0] == PIXEL_RATIO * 400
    assert not plt.fignum_exists(fig.number)
