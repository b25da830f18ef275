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
    assert "✓ residual_block_backward passed 5 checks" in printed


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


# The stack is graded on its own skill: the learner's blocks are swapped for correct ones while
# it runs, and come back after, whatever the check's outcome.
STACK_SOURCE = """
import numpy as np

def residual_block(x, W1, b1, W2):
    return np.maximum(x + (np.maximum(x @ W1 + b1, 0) @ W2), 0)  # a wrong block

def plain_block(x, W1, b1, W2):
    raise NotImplementedError()  # an unfinished one

def residual_block_backward(dy, x, W1, b1, W2):
    return dy, 0 * W1, 0 * b1, 0 * W2  # a wrong backward

def plain_block_backward(dy, x, W1, b1, W2):
    raise NotImplementedError()

def stack_gradient_norms(x, params, dy, residual=True):
    block = residual_block if residual else plain_block
    backward = residual_block_backward if residual else plain_block_backward
    inputs = [x]
    for W1, b1, W2 in params[:-1]:
        inputs.append(block(inputs[-1], W1, b1, W2))
    norms, grad = [np.linalg.norm(dy)], dy
    for h, (W1, b1, W2) in zip(reversed(inputs), reversed(params)):
        grad = backward(grad, h, W1, b1, W2)[0]
        norms.append(np.linalg.norm(grad))
    return np.array(norms[::-1]){slip}
"""
BLOCK_NAMES = ("residual_block", "plain_block", "residual_block_backward", "plain_block_backward")


def notebook_namespace(slip: str = "") -> dict:
    namespace = {}
    exec(STACK_SOURCE.format(slip=slip), namespace)  # as a notebook's cells define them
    return namespace


def test_a_right_stack_on_wrong_blocks_passes_and_the_blocks_come_back(capsys):
    namespace = notebook_namespace()
    own = {name: namespace[name] for name in BLOCK_NAMES}
    checks.check_stack_gradient_norms(namespace["stack_gradient_norms"])
    assert "✓ stack_gradient_norms passed" in capsys.readouterr().out
    assert {name: namespace[name] for name in BLOCK_NAMES} == own
    with pytest.raises(checks.CheckFailed, match="applies the ReLU after adding"):
        checks.check_residual_block(namespace["residual_block"])  # still the learner's own


def test_a_wrong_stack_on_wrong_blocks_fails_and_the_blocks_come_back():
    namespace = notebook_namespace(slip="[::-1]")
    own = {name: namespace[name] for name in BLOCK_NAMES}
    with pytest.raises(checks.CheckFailed, match="reverse order"):
        checks.check_stack_gradient_norms(namespace["stack_gradient_norms"])
    assert {name: namespace[name] for name in BLOCK_NAMES} == own


def test_a_block_that_changes_its_input_in_place_is_told_in_numpy_terms():
    def residual_block(x, W1, b1, W2):
        x += np.maximum(x @ W1 + b1, 0) @ W2  # right values, but the caller's x changed
        return x

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_residual_block(residual_block)
    message = str(info.value)
    assert "residual_block changed its input x in place" in message, message
    assert "the task asks to leave inputs unchanged" in message and "x = x + ..." in message
    assert "mul_" not in message and "tensor" not in message, message


def test_a_backward_that_changes_dy_in_place_names_dy():
    def residual_block_backward(dy, x, W1, b1, W2):
        grads = blocks.residual_block_backward(dy.copy(), x, W1, b1, W2)
        dy *= 0.0
        return grads

    with pytest.raises(checks.CheckFailed, match="changed its input dy in place"):
        checks.check_residual_block_backward(residual_block_backward)


def test_a_stack_written_for_one_block_or_more_fails_on_the_empty_stack_and_is_told_so():
    """As the solution was first written: one kept input too many, zipped strictly with params."""
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_stack_gradient_norms(mistakes.residuals._stack_norms_one_input_too_many)
    message = str(info.value)
    assert "raised ValueError on an empty stack (L = 0 blocks" in message, message
    assert mistakes.residuals.EMPTY_STACK_RAISES.diagnosis in message, message
