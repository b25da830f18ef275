"""DeepNorm's reference: the constants of the paper's table, the residual step, the initializer."""

import pytest
import torch

from addnorm_lib.reference import deepnorm
from addnorm_lib.transformer.sublayers import FeedForward, LayerParts


@pytest.mark.parametrize(
    ("architecture", "n", "m", "stack", "expected"),
    [
        ("encoder-only", 6, 0, None, ((2 * 6) ** 0.25, (8 * 6) ** -0.25)),
        ("decoder-only", 0, 24, None, ((2 * 24) ** 0.25, (8 * 24) ** -0.25)),
        (
            "encoder-decoder",
            6,
            6,
            "encoder",
            (0.81 * (6**4 * 6) ** (1 / 16), 0.87 * (6**4 * 6) ** (-1 / 16)),
        ),
        ("encoder-decoder", 6, 12, "decoder", ((3 * 12) ** 0.25, (12 * 12) ** -0.25)),
    ],
)
def test_constants_follow_the_papers_table(architecture, n, m, stack, expected):
    got = deepnorm.deepnorm_constants(architecture, n, m, stack)
    assert got == pytest.approx(expected, rel=1e-12)


def test_one_stack_constants_ignore_the_other_count_and_grow_with_depth():
    assert deepnorm.deepnorm_constants("encoder-only", 12, 999) == deepnorm.deepnorm_constants(
        "encoder-only", 12
    )
    alphas = [deepnorm.deepnorm_constants("decoder-only", 0, m)[0] for m in (1, 10, 100)]
    assert alphas == sorted(alphas) and alphas[0] > 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("decoder",), "architecture must be one of"),
        (("encoder-decoder", 6, 6), "stack must be one of"),
        (("encoder-only", 6, 0, "decoder"), "stack must be one of"),
        (("decoder-only", 6), "num_decoder_layers >= 1"),
        (("encoder-only", 2.5), "num_encoder_layers >= 1"),
    ],
)
def test_bad_arguments_get_clear_errors(args, message):
    with pytest.raises(ValueError, match=message):
        deepnorm.deepnorm_constants(*args)


def test_the_residual_step_up_weights_the_shortcut():
    torch.manual_seed(0)
    x, ffn = torch.randn(2, 3, 8, dtype=torch.float64), FeedForward(8, 16).double()
    norm = torch.nn.LayerNorm(8, eps=1e-12, dtype=torch.float64)
    alpha = 2.0
    y = deepnorm.deepnorm_residual(x, ffn, norm, alpha)
    torch.testing.assert_close(y, norm(alpha * x + ffn(x)))
    # The published bug, LN(x + alpha G(x)), differs and equals LN(x / alpha + G(x)) instead:
    # LayerNorm ignores the overall scale (up to eps), so it *down*-weights the residual.
    swapped = norm(x + alpha * ffn(x))
    assert not torch.allclose(y, swapped, atol=1e-3)
    torch.testing.assert_close(swapped, norm(x / alpha + ffn(x)))


def test_the_initializer_scales_exactly_ffn_value_and_output():
    torch.manual_seed(0)
    layer = LayerParts(16, 2, 32)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    deepnorm.deepnorm_init_(layer, 0.5)
    after = layer.state_dict()
    scaled = {f"{path}.weight" for path in deepnorm.DEEPNORM_SCALED}
    assert scaled == {
        "ffn.fc1.weight",
        "ffn.fc2.weight",
        "self_attn.v_proj.weight",
        "self_attn.out_proj.weight",
    }
    for key, value in before.items():
        torch.testing.assert_close(after[key], value * (0.5 if key in scaled else 1.0))


def test_encoder_post_ln_baseline_differs_only_in_alpha_and_beta():
    torch.manual_seed(0)
    post_ln = deepnorm.DeepNormEncoder(4, 16, 2, 32, deepnorm=False)
    torch.manual_seed(0)
    deep = deepnorm.DeepNormEncoder(4, 16, 2, 32, deepnorm=True)
    assert (post_ln.alpha, post_ln.beta) == (1.0, 1.0)
    assert (deep.alpha, deep.beta) == deepnorm.deepnorm_constants("encoder-only", 4)
    q_post = post_ln.layers[0].self_attn.q_proj.weight
    torch.testing.assert_close(deep.layers[0].self_attn.q_proj.weight, q_post)
    fc1_post = post_ln.layers[0].ffn.fc1.weight
    torch.testing.assert_close(deep.layers[0].ffn.fc1.weight, deep.beta * fc1_post)
    x = torch.randn(2, 5, 16)
    assert deep(x).shape == post_ln(x).shape == (2, 5, 16)
