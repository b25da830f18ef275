"""The DeepNorm chapter's experiment tools measure what they say, its cached runs are current, and
its plots draw what they get.

``book/data/deepnorm_runs.json`` holds the 24-layer runs that the chapter reads (regenerate it with
``python -m addnorm_lib.experiments.deepnorm runs --out book/data/deepnorm_runs.json``). Re-running
a whole run takes too long for the test suite, so the cache test re-runs the first steps of a few
runs and compares them with the file: the batches do not depend on the total number of steps, so
the first steps of a shorter run are those of the cached one.
"""

import json
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from addnorm_lib.experiments import plots
from addnorm_lib.experiments.deepnorm import (
    CHAPTER_CONFIG,
    CHAPTER_SEEDS,
    VARIANTS,
    SequenceModel,
    SwappedLayer,
    make_variant,
    relative_output_change,
    reverse_task,
    run_variant,
    shortcut_weight,
    stack_diagnostics,
    swapped_residual,
    train_sequence_model,
)
from addnorm_lib.reference.deepnorm import DEEPNORM_SCALED, DeepNormLayer, deepnorm_constants
from tests.conftest import ROOT

CACHE = ROOT / "book" / "data" / "deepnorm_runs.json"
PREFIX_STEPS = 10

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


@pytest.fixture(scope="module")
def cache():
    return json.loads(CACHE.read_text(encoding="utf-8"))


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
    assert run.diagnosed_steps.shape == (0,) and run.stream_grad.shape == (0, 4)


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


def test_swapped_residual_down_weights_the_shortcut():
    torch.manual_seed(0)
    layer = DeepNormLayer(16, 2, 32).double()
    norm = torch.nn.LayerNorm(16, eps=0.0).double()  # exact scale invariance without eps
    x = torch.randn(3, 4, 16, dtype=torch.float64)  # (B, T, C)
    with torch.no_grad():
        swapped = swapped_residual(x, layer.ffn, norm, 2.5)
        torch.testing.assert_close(swapped, norm(x / 2.5 + layer.ffn(x)))
        assert (swapped - norm(2.5 * x + layer.ffn(x))).abs().max() > 0.1


def test_make_variant_changes_only_alpha_beta_or_the_step():
    config = {**SIZES, "num_layers": 2}
    alpha, beta = deepnorm_constants("encoder-only", 2)
    built = {v: make_variant(v, 4, config) for v in VARIANTS}
    layer_alpha = {v: {layer.alpha for layer in m.encoder.layers} for v, m in built.items()}
    assert layer_alpha == {
        "Post-LN": {1.0},
        "alpha only": {alpha},
        "beta only": {1.0},
        "swapped": {alpha},
        "DeepNorm": {alpha},
    }
    assert all(isinstance(layer, SwappedLayer) for layer in built["swapped"].encoder.layers)
    assert not any(isinstance(layer, SwappedLayer) for layer in built["DeepNorm"].encoder.layers)
    assert [shortcut_weight(layer) for layer in built["swapped"].encoder.layers] == [1.0, 1.0]
    post = dict(built["Post-LN"].named_parameters())
    for v in ("beta only", "swapped", "DeepNorm"):
        for name, p in built[v].named_parameters():
            scaled = any(f".{path}.weight" in name for path in DEEPNORM_SCALED)
            assert torch.equal(p, post[name] * beta if scaled else post[name]), (v, name)
    for name, p in built["alpha only"].named_parameters():
        assert torch.equal(p, post[name]), name
    with pytest.raises(ValueError, match="variant must be one of"):
        make_variant("Pre-LN", 0, config)


def test_stack_diagnostics_measure_the_norm_inputs_and_the_stream_gradient():
    m = make_variant("DeepNorm", 2, SIZES)
    tokens, targets = reverse_task(8, 5, 7, torch.Generator().manual_seed(0))
    ratio, grad = stack_diagnostics(m, tokens, targets)
    assert ratio.shape == (6,) and grad.shape == (4,)
    assert all(p.grad is None for p in m.parameters())  # left clean
    # the stack's input gradient, by autograd
    x0 = m.embed_tokens(tokens).detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(m.head(m.encoder(x0)).reshape(-1, 7), targets.ravel())
    loss.backward()
    assert grad[0] == pytest.approx(x0.grad.double().norm().item(), rel=1e-5)
    # with branches that output zero, every norm's input is its shortcut: ratio 1
    with torch.no_grad():
        for layer in m.encoder.layers:
            layer.self_attn.out_proj.weight.zero_()
            layer.ffn.fc2.weight.zero_()
    ratio, _ = stack_diagnostics(m, tokens, targets)
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-6)


def test_diagnostics_do_not_change_training():
    with_diag = train_sequence_model(
        make_variant("swapped", 1, SIZES), 1, steps=4, change_steps=4, diagnose_at=(0, 2, 4)
    )
    without = train_sequence_model(make_variant("swapped", 1, SIZES), 1, steps=4, change_steps=4)
    np.testing.assert_array_equal(with_diag.losses, without.losses)
    np.testing.assert_array_equal(with_diag.output_change, without.output_change)
    assert with_diag.final_loss == without.final_loss
    assert with_diag.diagnosed_steps.tolist() == [0, 2, 4]
    assert with_diag.ln_input_ratio.shape == (3, 6) and with_diag.stream_grad.shape == (3, 4)
    with pytest.raises(ValueError, match="diagnose_at"):
        train_sequence_model(make_variant("swapped", 1, SIZES), 1, steps=2, diagnose_at=(3,))


def test_cache_covers_every_variant_and_seed_with_the_chapter_config(cache):
    assert cache["config"] == {
        **CHAPTER_CONFIG,
        "betas": list(CHAPTER_CONFIG["betas"]),
        "diagnose_at": list(CHAPTER_CONFIG["diagnose_at"]),
    }
    assert cache["variants"] == list(VARIANTS) and cache["seeds"] == list(CHAPTER_SEEDS)
    assert [(r["variant"], r["seed"]) for r in cache["runs"]] == [
        (v, s) for v in VARIANTS for s in CHAPTER_SEEDS
    ]
    assert "python -m addnorm_lib.experiments.deepnorm runs" in cache["command"]
    layers = CHAPTER_CONFIG["num_layers"]
    for run in cache["runs"]:
        assert len(run["losses"]) == CHAPTER_CONFIG["steps"]
        assert len(run["output_change"]) == CHAPTER_CONFIG["change_steps"]
        assert run["diagnosed_steps"] == list(CHAPTER_CONFIG["diagnose_at"])
        assert np.shape(run["ln_input_ratio"]) == (len(run["diagnosed_steps"]), 2 * layers)
        assert np.shape(run["stream_grad"]) == (len(run["diagnosed_steps"]), layers + 1)


RECHECKED = [("Post-LN", 2), ("swapped", 0), ("DeepNorm", 5)]


@pytest.mark.parametrize(("variant", "seed"), RECHECKED, ids=str)
def test_cached_runs_are_reproduced(cache, variant, seed):
    """The first steps of a re-run give the cached numbers (one CPU thread, float32)."""
    (cached,) = [r for r in cache["runs"] if (r["variant"], r["seed"]) == (variant, seed)]
    threads = torch.get_num_threads()
    try:
        now = run_variant(variant, seed, {"steps": PREFIX_STEPS})
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(now["losses"], cached["losses"][:PREFIX_STEPS], rtol=1e-4)
    np.testing.assert_allclose(
        now["output_change"], cached["output_change"][:PREFIX_STEPS], rtol=1e-3
    )
    k = len(now["diagnosed_steps"])
    assert now["diagnosed_steps"] == cached["diagnosed_steps"][:k]
    for key in ("ln_input_ratio", "stream_grad"):
        np.testing.assert_allclose(now[key], cached[key][:k], rtol=1e-2, err_msg=key)


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
