"""Residual and plain blocks, forward and backward: the usual wrong implementations.

Every function here is wrong on purpose."""

import numpy as np

from addnorm_lib.reference.mistakes._core import Mistake

# ----------------------------------------------------------------------------------------------
# The residual exercise: blocks y = [x +] relu(x W1 + b1) W2 and their backward passes.


def _relu(z):
    return np.maximum(z, 0.0)


def _rows(a):
    return a.reshape(-1, a.shape[-1])


RESIDUAL_BLOCK_MISTAKES = (
    Mistake(
        "relu_after_add",
        "Your block applies the ReLU after adding the shortcut, relu(x + relu(x W1 + b1) W2): the "
        "identity path then goes through a nonlinearity and is no longer an identity.",
        "Add x to the branch's output and stop there: y = x + relu(x W1 + b1) W2.",
        lambda x, W1, b1, W2: _relu(x + _relu(x @ W1 + b1) @ W2),
    ),
    Mistake(
        "shortcut_inside_branch",
        "Your block adds the shortcut after the ReLU but before W2, (x + relu(x W1 + b1)) W2: x is "
        "added inside the branch instead of around it.",
        "The shortcut goes around the whole branch: y = x + relu(x W1 + b1) W2.",
        lambda x, W1, b1, W2: (x + _relu(x @ W1 + b1)) @ W2,
    ),
    Mistake(
        "shortcut_before_relu",
        "Your block adds x to the pre-activation, relu(x W1 + b1 + x) W2: the shortcut must go "
        "around the branch, not into it.",
        "Compute the branch first, then add: y = x + relu(x W1 + b1) W2.",
        lambda x, W1, b1, W2: _relu(x @ W1 + b1 + x) @ W2,
    ),
    Mistake(
        "no_shortcut",
        "Your residual block has no shortcut: it returns the plain block relu(x W1 + b1) W2.",
        "Add the input back: y = x + relu(x W1 + b1) W2.",
        lambda x, W1, b1, W2: _relu(x @ W1 + b1) @ W2,
    ),
)

PLAIN_BLOCK_MISTAKES = (
    Mistake(
        "plain_has_shortcut",
        "Your plain block adds the shortcut x: that is the residual block.",
        "The plain block is the branch alone: y = relu(x W1 + b1) W2.",
        lambda x, W1, b1, W2: x + _relu(x @ W1 + b1) @ W2,
    ),
    Mistake(
        "no_relu",
        "Your block leaves out the ReLU: it computes (x W1 + b1) W2.",
        "Apply relu (np.maximum(z, 0)) to x W1 + b1 before multiplying by W2.",
        lambda x, W1, b1, W2: (x @ W1 + b1) @ W2,
    ),
)


def _block_backward(identity=True, relu_mask=True, transpose_w1=True, transpose_w2=True):
    """A backward pass of the residual (identity=True) or plain block, with one step changed."""

    def backward(dy, x, W1, b1, W2):
        pre = x @ W1 + b1  # (..., H)
        hidden = _relu(pre)
        dW2 = _rows(hidden).T @ _rows(dy)  # (H, C)
        dhidden = dy @ (W2.T if transpose_w2 else W2)
        dpre = dhidden * (pre > 0) if relu_mask else dhidden
        dW1 = _rows(x).T @ _rows(dpre)  # (C, H)
        db1 = _rows(dpre).sum(axis=0)
        dx = dpre @ (W1.T if transpose_w1 else W1)
        return (dy + dx if identity else dx), dW1, db1, dW2

    return backward


def _transposed(index):
    def backward(dy, x, W1, b1, W2):
        grads = list(_block_backward()(dy, x, W1, b1, W2))
        grads[index] = grads[index].T
        return tuple(grads)

    return backward


RESIDUAL_BACKWARD_MISTAKES = (
    Mistake(
        "missing_identity",
        "Your dx is missing the identity term: the shortcut passes dy straight through, so dx is "
        "dy plus the gradient through the branch.",
        "dx = dy + (dy W2^T * relu'(x W1 + b1)) W1^T.",
        _block_backward(identity=False),
    ),
    Mistake(
        "no_relu_mask",
        "Your backward ignores the ReLU: the gradient must be zeroed where the pre-activation "
        "x W1 + b1 was negative.",
        "dpre = dhidden * (pre > 0), with pre = x W1 + b1 recomputed from the arguments.",
        _block_backward(relu_mask=False),
    ),
    Mistake(
        "w1_not_transposed",
        "Your dx multiplies by W1 instead of its transpose: the gradient flows back through "
        "x W1, so dx = dpre W1^T.",
        "Use W1.T in dx = dpre @ W1.T (shapes: (..., H) @ (H, C)).",
        _block_backward(transpose_w1=False),
    ),
    Mistake(
        "w2_not_transposed",
        "Your gradient into the hidden layer multiplies by W2 instead of its transpose: "
        "dhidden = dy W2^T.",
        "Use W2.T in dhidden = dy @ W2.T (shapes: (..., C) @ (C, H)).",
        _block_backward(transpose_w2=False),
    ),
    Mistake(
        "dW1_transposed",
        "Your dW1 is transposed: it must have W1's shape (C, H), dW1 = x^T dpre.",
        "dW1 = x.reshape(-1, C).T @ dpre.reshape(-1, H).",
        _transposed(1),
    ),
    Mistake(
        "dW2_transposed",
        "Your dW2 is transposed: it must have W2's shape (H, C), dW2 = hidden^T dy.",
        "dW2 = hidden.reshape(-1, H).T @ dy.reshape(-1, C).",
        _transposed(3),
    ),
)

PLAIN_BACKWARD_MISTAKES = (
    Mistake(
        "plain_backward_has_identity",
        "Your plain block's dx adds dy: the plain block has no shortcut, so there is no identity "
        "term.",
        "dx = (dy W2^T * relu'(x W1 + b1)) W1^T, with nothing added.",
        _block_backward(identity=True),
    ),
    *(
        Mistake(m.name, m.diagnosis, m.hint, _block_backward(identity=False, **options))
        for m, options in [
            (RESIDUAL_BACKWARD_MISTAKES[1], {"relu_mask": False}),
            (RESIDUAL_BACKWARD_MISTAKES[2], {"transpose_w1": False}),
            (RESIDUAL_BACKWARD_MISTAKES[3], {"transpose_w2": False}),
        ]
    ),
)


def _stack_norms_reversed(x, params, dy, residual=True):
    from addnorm_lib.reference import residuals as blocks

    return blocks.stack_gradient_norms(x, params, dy, residual)[::-1]


def _stack_norms_same_input(x, params, dy, residual=True):
    """Every block's backward is given the stack's input x instead of the block's own input."""
    from addnorm_lib.reference import residuals as blocks

    backward = blocks.residual_block_backward if residual else blocks.plain_block_backward
    return blocks.gradient_norms_through(x, params, dy, lambda h, *weights: x, backward)


def _stack_norms_one_input_too_many(x, params, dy, residual=True):
    """Keeps x, then one output per block but the last, and zips them with params strictly:
    right for L >= 1, a ValueError for an empty stack (one kept input, no params)."""
    from addnorm_lib.reference import residuals as blocks

    block = blocks.residual_block if residual else blocks.plain_block
    backward = blocks.residual_block_backward if residual else blocks.plain_block_backward
    inputs = [x]
    for W1, b1, W2 in params[:-1]:
        inputs.append(block(inputs[-1], W1, b1, W2))
    norms, grad = [np.linalg.norm(dy)], dy
    for h, (W1, b1, W2) in zip(reversed(inputs), reversed(params), strict=True):
        grad = backward(grad, h, W1, b1, W2)[0]
        norms.append(np.linalg.norm(grad))
    return np.array(norms[::-1])


def _stack_norms_none_when_empty(x, params, dy, residual=True):
    """Norms gathered only inside the loop over blocks: none at all for an empty stack."""
    from addnorm_lib.reference import residuals as blocks

    norms = blocks.stack_gradient_norms(x, params, dy, residual)
    return norms if params else norms[:0]


#: The empty-stack mistake that raises instead of returning: the check names it from the error.
EMPTY_STACK_RAISES = Mistake(
    "empty_stack_raises",
    "Your stack fails on an empty stack (L = 0 blocks, params = []): with no blocks the output "
    "is the input, so dL/dh_0 = dy, and the answer is one norm, [norm(dy)].",
    "Keep one input per block (for W1, b1, W2 in params: keep h, then h = block(h, ...)), so "
    "that an empty params keeps none, and start the norms with norm(dy).",
    _stack_norms_one_input_too_many,
)

STACK_NORMS_MISTAKES = (
    Mistake(
        "reversed",
        "Your norms are in reverse order: entry 0 must be the gradient at the stack's input x, and "
        "the last entry norm(dy), at its output.",
        "Collect the norms while going backward, then reverse the list.",
        _stack_norms_reversed,
    ),
    Mistake(
        "same_input",
        "Your backward gives every block the stack's input x, not the block's own input h_l: "
        "each block's backward needs the activations that entered it in the forward pass.",
        "Run the forward pass first and keep h_0, ..., h_{L-1}; pass h_l to block l's backward.",
        _stack_norms_same_input,
    ),
    Mistake(
        "empty_stack_no_norms",
        "For an empty stack (L = 0 blocks, params = []) you returned no norms: with no blocks "
        "the output is the input, so dL/dh_0 = dy, and the answer is one norm, [norm(dy)].",
        "Start the list with norm(dy) before the loop over blocks, not inside it.",
        _stack_norms_none_when_empty,
    ),
    EMPTY_STACK_RAISES,
)
