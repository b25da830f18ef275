"""The figure helpers refuse unknown norms, layouts and diagram kinds, naming the known ones."""

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from addnorm_lib.experiments import plots

NORMS = "['batch', 'group', 'instance', 'layer', 'rms']"
LAYOUTS = "['BTC', 'NC', 'NCHW']"


def test_an_unknown_norm_or_layout_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match=re.escape(f"norm must be one of {NORMS}, got 'power'")):
        plots.shared_statistics_mask("power", "NC")
    with pytest.raises(ValueError, match=re.escape(f"layout must be one of {LAYOUTS}, got 'NHWC'")):
        plots.describe_reduction("layer", "NHWC")
    with pytest.raises(ValueError, match=re.escape(f"layout must be one of {LAYOUTS}, got 'CN'")):
        plots._as_box(np.ones((2, 3), dtype=bool), "CN")
    with pytest.raises(ValueError, match="not defined on a NC tensor"):
        plots.shared_statistics_mask("instance", "NC")


def test_a_box_takes_its_norms_colour_and_refuses_an_unknown_norm():
    fig, ax = plt.subplots()
    plots._box(ax, 0.0, 0.0, "final LayerNorm")
    plots._box(ax, 0.0, 1.0, "FFN")
    assert ax.patches[0].get_edgecolor()[:3] == pytest.approx(
        matplotlib.colors.to_rgb(plots.NORM_COLORS["layer"])
    )
    known = r"norm must be one of \[.*'LayerNorm'.*\], got 'PowerNorm'"
    with pytest.raises(ValueError, match=known):
        plots._box(ax, 0.0, 2.0, "PowerNorm")
    plt.close(fig)


def test_an_unknown_diagram_kind_is_refused_with_the_known_kinds():
    fig, ax = plt.subplots()
    kinds = "['output-norm', 'post', 'pre', 'sandwich']"
    with pytest.raises(ValueError, match=re.escape(f"kind must be one of {kinds}, got 'diagonal'")):
        plots.draw_placement_diagram(ax, "diagonal")
    plt.close(fig)


def test_the_reductions_grid_has_a_row_per_layout_and_fits_the_page():
    from addnorm_lib.authoring.figures import MAX_WIDTH_INCHES, figure_problems

    fig = plots.plot_reductions(("batch", "layer", "rms"), ("NC", "BTC"))
    try:
        assert fig.get_figwidth() == MAX_WIDTH_INCHES
        rows = sorted({round(ax.get_position().y0, 3) for ax in fig.axes}, reverse=True)
        columns = sorted({round(ax.get_position().x0, 3) for ax in fig.axes})
        assert (len(rows), len(columns)) == (2, 3)
        assert figure_problems(fig) == []
    finally:
        plt.close(fig)
