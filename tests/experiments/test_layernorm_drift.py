"""The LayerNorm chapter's drift experiment in addnorm_lib.experiments.layernorm_drift."""

import numpy as np

from addnorm_lib.experiments.layernorm_drift import (
    drift_run,
    random_mlp_weights,
    residual_stack,
    rms,
)


def test_rms_is_the_root_mean_square_over_the_last_axis():
    h = np.array([[3.0, 4.0], [1.0, -1.0]])  # (2, C)
    assert np.allclose(rms(h), [np.sqrt(12.5), 1.0])


def test_weights_have_the_shapes_and_he_scales():
    weights = random_mlp_weights(np.random.default_rng(0), 64, 3)
    assert len(weights) == 3
    w1, w2 = weights[0]
    assert w1.shape == (64, 256) and w2.shape == (256, 64)
    all_w1 = np.concatenate([w[0].ravel() for w in weights])
    assert abs(all_w1.std() / np.sqrt(2 / 64) - 1) < 0.05


def test_residual_stack_adds_the_mlp_and_applies_the_norm_after_the_sum():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 8))  # (T, C)
    weights = random_mlp_weights(rng, 8, 2)
    states = residual_stack(x, weights)
    assert states.shape == (3, 5, 8) and np.array_equal(states[0], x)
    w1, w2 = weights[0]
    assert np.allclose(states[1], x + np.maximum(x @ w1, 0) @ w2)
    halved = residual_stack(x, weights, norm=lambda h: h / 2)
    assert np.allclose(halved[1], (x + np.maximum(x @ w1, 0) @ w2) / 2)


def test_without_a_norm_the_stream_grows_and_with_layernorm_every_token_has_rms_one():
    run = drift_run(0, n_features=32, n_tokens=6, n_blocks=12)
    assert run.plain.shape == run.ln.shape == run.ln0.shape == (13, 6)
    s = run.summary()
    assert s.growth > 10 and s.spread_out > 10
    assert s.ln_dev < 1e-3 and s.ln0_dev < 1e-12


def test_a_run_is_reproducible_from_its_seed():
    a, b = drift_run(3, 16, 4, 5), drift_run(3, 16, 4, 5)
    assert np.array_equal(a.plain, b.plain) and np.array_equal(a.ln, b.ln)
