"""The residual exercise's references: blocks and backward passes match torch autograd."""

import numpy as np
import pytest
import torch

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
        hidden_states.append(
            torch_block(hidden_states[-1], *map(torch.from_numpy, (W1, b1, W2)), residual)
        )
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
