"""The DeepNorm chapter's experiment tools measure what they say; its plots draw what they get."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from addnorm_lib.experiments import plots
from addnorm_lib.experiments.deepnorm import (
    SequenceModel,
    relative_output_change,
    reverse_task,
    train_sequence_model,
)
from addnorm_lib.reference.deepnorm import DEEPNORM_SCALED, deepnorm_constants

SIZES = {
    "vocab_size": 7,
    "seq_len": 5,
    "num_layers": 3,
    "d_model": 16,
    "nhead": 2,
    "dim_feedforward": 24,
}


def model(seed: int = 0, deepnorm: bool = True) -> SequenceModel:
    torch.manual_seed(seed)
    return SequenceModel(**SIZES, deepnorm=deepnorm)


def test_reverse_task_targets_are_the_reversed_tokens():
    g = torch.Generator().manual_seed(0)
    tokens, targets = reverse_task(64, 6, 5, g)
    assert tokens.shape == targets.shape == (64, 6) and tokens.dtype == torch.int64
    assert torch.equal(targets[:, 0], tokens[:, -1]) and torch.equal(targets[:, -1], tokens[:, 0])
    assert torch.equal(targets.flip(1), tokens)
    assert tokens.min() >= 0 and tokens.max() == 4  # every value of the vocabulary is drawn
    again, _ = reverse_task(64, 6, 5, torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)  # seeded
    with pytest.raises(ValueError):
        reverse_task(4, 6, 1)


def test_sequence_model_shapes_and_identical_draws():
    post, deep = model(deepnorm=False), model(deepnorm=True)
    tokens, _ = reverse_task(3, 5, 7)
    assert post(tokens).shape == (3, 5, 7) and post.features(tokens).shape == (3, 5, 16)
    beta = deep.encoder.beta
    assert deep.encoder.alpha == deepnorm_constants("encoder-only", 3)[0] > 1
    for (name, p_post), p_deep in zip(post.named_parameters(), deep.parameters(), strict=True):
        scaled = any(f".{path}.weight" in name for path in DEEPNORM_SCALED)
        expected = p_post * beta if scaled else p_post
        assert torch.equal(p_deep, expected), name


def test_relative_output_change_is_zero_at_start_and_scales_with_the_change():
    m = model()
    tokens, _ = reverse_task(4, 5, 7)
    with torch.no_grad():
        reference = m.features(tokens)
    assert relative_output_change(m, reference, tokens) == 0.0
    # a reference at half (or minus) the current output: relative change 1 (or 2)
    assert math.isclose(relative_output_change(m, 0.5 * reference, tokens), 1.0, rel_tol=1e-12)
    assert math.isclose(relative_output_change(m, -reference, tokens), 2.0, rel_tol=1e-12)


def test_training_records_loss_and_change_and_learns():
    run = train_sequence_model(model(), 0, steps=40, lr=3e-3, change_steps=5)
    assert run.losses.shape == run.output_change.shape == (40,)
    assert np.isfinite(run.losses).all()
    assert np.isfinite(run.output_change[:5]).all() and np.isnan(run.output_change[5:]).all()
    assert (run.output_change[:5] > 0).all()
    assert run.losses[-10:].mean() < run.losses[:5].mean() - 0.2  # it learns something
    assert 0 <= run.final_accuracy <= 1 and math.isfinite(run.final_loss)


def test_training_is_seeded_and_first_change_matches_a_manual_adam_step():
    a = train_sequence_model(model(1), 3, steps=2, lr=1e-3, change_steps=2)
    b = train_sequence_model(model(1), 3, steps=2, lr=1e-3, change_steps=2)
    np.testing.assert_array_equal(a.losses, b.losses)
    np.testing.assert_array_equal(a.output_change, b.output_change)
    # one step by hand, with the same batches as train_sequence_model draws them
    m = model(1)
    data = torch.Generator().manual_seed(3)
    fixed, _ = reverse_task(32, 5, 7, data)
    tokens, targets = reverse_task(32, 5, 7, data)
    with torch.no_grad():
        reference = m.features(fixed)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.9, 0.98))
    loss = torch.nn.functional.cross_entropy(m(tokens).reshape(-1, 7), targets.reshape(-1))
    loss.backward()
    opt.step()
    assert a.losses[0] == pytest.approx(loss.item(), rel=1e-6)
    assert a.output_change[0] == pytest.approx(
        relative_output_change(m, reference, fixed), rel=1e-6
    )


def test_plot_deepnorm_constants_draws_each_stack():
    fig, (ax_a, ax_b) = plt.subplots(1, 2)
    depths = [1, 10, 100]
    constants = {"a": ([1.0, 2.0, 3.0], [0.9, 0.5, 0.2]), "b": ([1.5, 2.5, 3.5], [0.8, 0.4, 0.1])}
    plots.plot_deepnorm_constants(ax_a, ax_b, depths, constants)
    lines_a = [ln for ln in ax_a.get_lines() if ln.get_label() in constants]
    lines_b = [ln for ln in ax_b.get_lines() if ln.get_label() in constants]
    assert [ln.get_label() for ln in lines_a] == ["a", "b"]
    np.testing.assert_array_equal(lines_a[1].get_ydata(), [1.5, 2.5, 3.5])
    np.testing.assert_array_equal(lines_b[0].get_ydata(), [0.9, 0.5, 0.2])
    assert lines_a[0].get_color() == lines_b[0].get_color()
    assert ax_a.get_xscale() == ax_b.get_yscale() == "log"
    assert [t.get_text() for t in ax_a.get_yticklabels()] == ["1", "2"]  # plain 1-2-5 labels
    assert [t.get_text() for t in ax_b.get_yticklabels()] == ["0.1", "0.2", "0.5", "1"]
    plt.close(fig)


def test_plot_runs_smooths_and_labels_only_the_first_seed():
    fig, ax = plt.subplots()
    curves = [np.arange(10.0), np.arange(10.0) + 1]
    plots.plot_runs(ax, {"x": curves}, {"x": "#123456"}, window=3)
    lines = ax.get_lines()
    assert len(lines) == 2
    np.testing.assert_array_equal(lines[0].get_xdata(), np.arange(3, 11))
    np.testing.assert_allclose(lines[0].get_ydata(), np.arange(1.0, 9.0))
    assert lines[0].get_label() == "x" and lines[1].get_label().startswith("_")
    assert lines[1].get_color() == "#123456"
    plt.close(fig)
