"""The residual exercise's references match torch autograd; its checks reject each known mistake."""

import numpy as np
import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.reference import mistakes
from addnorm_lib.reference import residuals as blocks

RNG = np.random.default_rng(3)


def block_args(shape=(2, 3, 4), hidden=5):
    x = RNG.normal(size=shape)
    return (
        x,
        RNG.normal(size=(shape[-1], hidden)),
        RNG.normal(size=hidden),
        RNG.normal(size=(hidden, shape[-1])),
    )


def torch_block(x, W1, b1, W2, residual):
    branch = torch.relu(x @ W1 + b1) @ W2
    return x + branch if residual else branch


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4)])
def test_blocks_and_their_backward_match_autograd(residual, shape):
    args = block_args(shape)
    dy = RNG.normal(size=shape)
    tensors = [torch.from_numpy(a).requires_grad_(True) for a in args]
    expected = torch_block(*tensors, residual)
    expected.backward(torch.from_numpy(dy))
    forward = blocks.residual_block if residual else blocks.plain_block
    backward = blocks.residual_block_backward if residual else blocks.plain_block_backward
    np.testing.assert_allclose(forward(*args), expected.detach().numpy(), rtol=1e-12)
    for mine, tensor in zip(backward(dy, *args), tensors, strict=True):
        np.testing.assert_allclose(mine, tensor.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("residual", [True, False])
def test_stack_gradient_norms_match_autograd(residual):
    x, dy = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    params = [block_args((1, 4), 6)[1:] for _ in range(5)]
    h = torch.from_numpy(x).requires_grad_(True)
    hidden_states = [h]
    for W1, b1, W2 in params:
        hidden_states.append(torch_block(hidden_states[-1], *map(torch.from_numpy, (W1, b1, W2)),
                                         residual))  # fmt: skip
        hidden_states[-1].retain_grad()
    hidden_states[-1].backward(torch.from_numpy(dy))
    expected = [float(state.grad.norm()) for state in hidden_states]
    np.testing.assert_allclose(blocks.stack_gradient_norms(x, params, dy, residual), expected)


def test_wrong_weight_shapes_are_clear_errors():
    x, W1, b1, W2 = block_args((3, 4), 5)
    with pytest.raises(ValueError, match=r"W2 must have shape \(H, C\) = \(5, 4\)"):
        blocks.residual_block(x, W1, b1, W2.T)
    with pytest.raises(ValueError, match=r"W1 must have shape \(C, H\)"):
        blocks.plain_block(x, W1.T, b1, W2)


def test_references_pass_every_check(capsys):
    checks.check_residual_block(blocks.residual_block)
    checks.check_plain_block(blocks.plain_block)
    checks.check_residual_block_backward(blocks.residual_block_backward)
    checks.check_plain_block_backward(blocks.plain_block_backward, seed=2024)
    checks.check_stack_gradient_norms(blocks.stack_gradient_norms, seed=7)
    printed = capsys.readouterr().out
    assert "✓ residual_block_backward passed 3 checks" in printed


CATALOGUES = [
    (checks.check_residual_block, mistakes.RESIDUAL_BLOCK_MISTAKES),
    (checks.check_plain_block, mistakes.PLAIN_BLOCK_MISTAKES),
    (checks.check_residual_block_backward, mistakes.RESIDUAL_BACKWARD_MISTAKES),
    (checks.check_plain_block_backward, mistakes.PLAIN_BACKWARD_MISTAKES),
    (checks.check_stack_gradient_norms, mistakes.STACK_NORMS_MISTAKES),
]


@pytest.mark.parametrize(
    ("check", "mistake"),
    [(check, mistake) for check, catalogue in CATALOGUES for mistake in catalogue],
    ids=lambda value: getattr(value, "name", None) or getattr(value, "__name__", ""),
)
def test_each_mistake_is_rejected_and_named(check, mistake):
    with pytest.raises(checks.CheckFailed) as info:
        check(mistake.compute)
    assert mistake.diagnosis in str(info.value)


def test_weight_gradients_that_ignore_leading_axes_fail_on_3d_input():
    def backward(dy, x, W1, b1, W2):
        pre = x @ W1 + b1
        dpre = (dy @ W2.T) * (pre > 0)
        return dy + dpre @ W1.T, x.T @ dpre, dpre.sum(axis=0), np.maximum(pre, 0).T @ dy

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_residual_block_backward(backward)
    message = str(info.value)
    assert "(B, T, C)" in message and "reshape(-1, C)" in message, message


def test_a_stack_that_returns_one_norm_too_few_is_a_shape_error():
    def norms(x, params, dy, residual=True):
        return blocks.stack_gradient_norms(x, params, dy, residual)[:-1]

    with pytest.raises(checks.CheckFailed, match=r"has shape \(4,\) but should have shape \(5,\)"):
        checks.check_stack_gradient_norms(norms)
