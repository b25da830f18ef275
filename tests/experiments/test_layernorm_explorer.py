"""The LayerNorm chapter's explorer figure in addnorm_lib.experiments.layernorm_explorer."""

import matplotlib.pyplot as plt
import numpy as np

from addnorm_lib.experiments import layernorm_explorer


def test_the_grid_the_labels_and_the_defaults_agree():
    assert layernorm_explorer.count() == 3 * 4 * 3
    for name, values in layernorm_explorer.GRID.items():
        assert len(layernorm_explorer.LABELS[name]) == len(values)
        assert layernorm_explorer.DEFAULTS[name] in values


def test_the_alt_text_names_every_setting():
    text = layernorm_explorer.describe({"eps": 1e-12, "offset": 1e4, "std": 1e-5})
    assert "eps 1e-12" in text and "offset 10000" in text and "std 1e-5" in text


def test_a_figure_shows_both_histograms_and_the_one_pass_failure():
    z = np.random.default_rng(0).normal(size=768)
    fig = layernorm_explorer.explore(z, eps=1e-5, offset=1e4, std=1.0)
    _, ax_err = fig.axes
    labels = [text.get_text() for text in ax_err.texts]
    two_pass, one_pass = (float(label) for label in labels)  # largest |error| vs float64
    assert two_pass < 1e-3 and one_pass > 100 * two_pass  # one-pass lost its digits
    plt.close(fig)
