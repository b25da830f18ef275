"""The figure audit names what keeps a figure from reading well, and only that; in a notebook it
runs on every figure shown, however it is shown."""

import matplotlib.pyplot as plt
import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from addnorm_lib.authoring.figures import MAX_WIDTH_INCHES, figure_problems

X = np.linspace(0, 1, 50)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def figure(width=MAX_WIDTH_INCHES):
    return plt.subplots(figsize=(width, 3), layout="constrained")


def test_a_figure_made_for_the_page_has_no_problem():
    fig, ax = figure()
    ax.plot(X, X, label="rising")
    ax.plot(X, 1 - X, label="falling")
    ax.set(xlabel="x", ylabel="y", title="two lines")
    fig.legend(loc="outside upper center", ncols=2)
    assert figure_problems(fig) == []


def test_a_figure_wider_than_the_column_is_named():
    fig, ax = figure(width=9)
    ax.plot(X, X)
    assert [p for p in figure_problems(fig) if "9.00 in wide" in p]


def test_small_text_is_named_with_its_size():
    fig, ax = figure()
    ax.plot(X, X)
    ax.text(0.5, 0.5, "tiny note", fontsize=7)
    ax.tick_params(labelsize=8)
    found = figure_problems(fig)
    assert "text 'tiny note' at 7.0 pt (at least 9)" in found
    assert any("at 8.0 pt" in p for p in found)  # tick labels count too


@pytest.mark.parametrize(
    "draw",
    [
        lambda ax: ax.plot(X, 1 - X, label="a line through the corner"),
        lambda ax: ax.plot([0.05], [0.95], "o", label="a marker in the corner"),
        lambda ax: ax.scatter([0.05], [0.95], label="a scattered point"),
        lambda ax: ax.fill_between(X, 0.8, 1.0, label="a band along the top"),
        lambda ax: ax.bar([0.05], [0.95], width=0.1, label="a bar"),
    ],
    ids=["line", "marker", "scatter", "band", "bar"],
)
def test_a_legend_over_the_data_is_named(draw):
    fig, ax = figure()
    draw(ax)
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    assert [p for p in figure_problems(fig) if "covers the data" in p]
    ax.get_legend().remove()
    fig.legend(loc="outside upper center")  # the same data, its legend outside the axes
    assert figure_problems(fig) == []


def test_a_legend_in_an_empty_corner_passes():
    fig, ax = figure()
    ax.plot(X, X**4, label="stays low on the left")
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    assert figure_problems(fig) == []


AUDITED = [
    "import matplotlib.pyplot as plt\nfrom addnorm_lib.experiments import plots\nplots.use_style()",
    # shown with plt.show()
    "fig, ax = plt.subplots(figsize=(9, 3))\nax.plot([1, 2])\nplt.show()",
    # shown as the cell's value
    "fig, ax = plt.subplots()\nax.text(0.5, 0.5, 'small', fontsize=6)\nfig",
    # left open at the end of the cell
    "fig, ax = plt.subplots()\n_ = ax.plot([0, 1], [1, 0], label='down')\n"
    "_ = ax.legend(loc='upper left')",
    # made for the page
    "fig, ax = plt.subplots()\nax.plot([0, 1], [0, 1], label='up')\n"
    "fig.legend(loc='outside upper center')\nplt.show()",
]


@pytest.mark.slow
def test_in_a_notebook_every_shown_figure_is_audited_on_stderr_and_drawn_at_2x():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in AUDITED]
    NotebookClient(notebook, kernel_name="python3", timeout=120).execute()
    stderr = [
        "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stderr")
        for cell in notebook.cells
    ]
    assert "9.00 in wide" in stderr[1]
    assert "'small' at 6.0 pt" in stderr[2]
    assert "covers the data" in stderr[3]
    assert stderr[4] == "", stderr[4]
    for cell in notebook.cells[1:]:  # each figure shown, in retina: its width in metadata
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images and all(o["metadata"]["image/png"]["width"] > 0 for o in images)


def test_data_clipped_out_of_view_does_not_count_as_covered():
    fig, ax = figure()
    ax.plot(X, 10 * X, label="leaves the axes at the top")  # clipped above y = 1
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.02))  # above the axes, over the clipped line
    assert figure_problems(fig) == []


NAMED = {"Post-LN": "#666666", "Pre-LN": "#d95f02"}


@pytest.mark.parametrize("label", ["Pre-LN", "Pre-LN (mean of 3 seeds)", "Pre-LN, seed 0"])
def test_an_arrangement_named_in_another_colour_is_named(label):
    fig, ax = figure()
    ax.plot(X, X, color="#1b9e77", label=label)
    fig.legend(loc="outside upper center")
    assert figure_problems(fig, NAMED) == [f"{label!r} is drawn in #1b9e77, not Pre-LN's #d95f02"]


def test_its_own_colour_and_other_labels_pass():
    fig, ax = figure()
    ax.plot(X, X, color="#d95f02", label="Pre-LN (mean)")
    ax.scatter(X, 1 - X, color="#666666", label="Post-LN")
    ax.plot(X, X / 2, color="#333333", label="Pre-LN at L = 1, times 1/sqrt(L)")  # a reference
    ax.plot(X, X / 3, color="#e6ab02", label="Pre-LN + QK-norm")  # another arrangement
    fig.legend(loc="outside upper center", ncols=2)
    assert figure_problems(fig, NAMED) == []
    assert figure_problems(fig) == []  # no names given: no colour rule
