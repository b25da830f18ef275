"""The residual checks accept the references and reject each known mistake under its name."""

import numpy as np
import pytest

from addnorm_lib import checks
from addnorm_lib.reference import mistakes
from addnorm_lib.reference import residuals as blocks

RNG = np.random.default_rng(3)


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
