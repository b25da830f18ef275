"""Reference numpy code of the residual exercise: an MLP block with and without its shortcut.

The block of the exercise is the Transformer's feed-forward sublayer with its "Add":

    plain:     y = relu(x W1 + b1) W2
    residual:  y = x + relu(x W1 + b1) W2

with x of shape (..., C), W1 (C, H), b1 (H,), W2 (H, C). Backward passes return the gradients of a
loss L with respect to x and the parameters, given dy = dL/dy; they recompute the forward's
intermediates from the arguments (cheap here, and it keeps the signatures free of caches).

:func:`stack_gradient_norms` chains L blocks and reports how large the gradient is at every depth:
the measurement of the residuals chapter, in numpy.

These are the references the checkers judge against; a graded kernel cannot import this module.
"""

import numpy as np

__all__ = [
    "gradient_norms_through",
    "plain_block",
    "plain_block_backward",
    "residual_block",
    "residual_block_backward",
    "stack_gradient_norms",
]


def _check_block_args(x, W1, b1, W2) -> None:
    channels = x.shape[-1]
    if W1.ndim != 2 or W1.shape[0] != channels:
        raise ValueError(f"W1 must have shape (C, H) = ({channels}, H); got {W1.shape}")
    hidden = W1.shape[1]
    if b1.shape != (hidden,):
        raise ValueError(f"b1 must have shape (H,) = ({hidden},); got {b1.shape}")
    if W2.shape != (hidden, channels):
        raise ValueError(f"W2 must have shape (H, C) = ({hidden}, {channels}); got {W2.shape}")


def _branch_forward(x, W1, b1, W2):
    """The branch relu(x W1 + b1) W2 and its intermediates (pre-activation, hidden)."""
    _check_block_args(x, W1, b1, W2)
    pre = x @ W1 + b1  # (..., H)
    hidden = np.maximum(pre, 0.0)  # (..., H)
    return hidden @ W2, pre, hidden  # (..., C), (..., H), (..., H)


def _branch_backward(dy, x, W1, b1, W2):
    """Gradients of the branch with respect to x, W1, b1, W2, given dy = dL/d(branch)."""
    _, pre, hidden = _branch_forward(x, W1, b1, W2)
    channels, width = x.shape[-1], W1.shape[1]
    dy_rows = dy.reshape(-1, channels)  # (M, C), M = product of the leading axes
    dW2 = hidden.reshape(-1, width).T @ dy_rows  # (H, C)
    dhidden = dy @ W2.T  # (..., H)
    dpre = dhidden * (pre > 0)  # (..., H): relu passes gradient where its input was positive
    dW1 = x.reshape(-1, channels).T @ dpre.reshape(-1, width)  # (C, H)
    db1 = dpre.reshape(-1, width).sum(axis=0)  # (H,)
    dx = dpre @ W1.T  # (..., C)
    return dx, dW1, db1, dW2


def plain_block(x, W1, b1, W2):
    """``relu(x W1 + b1) W2``: shape (..., C) -> (..., C), dtype of x."""
    return _branch_forward(x, W1, b1, W2)[0]


def residual_block(x, W1, b1, W2):
    """``x + relu(x W1 + b1) W2``: shape (..., C) -> (..., C), dtype of x."""
    return x + _branch_forward(x, W1, b1, W2)[0]


def plain_block_backward(dy, x, W1, b1, W2):
    """(dx, dW1, db1, dW2) of :func:`plain_block`, shapes of (x, W1, b1, W2)."""
    return _branch_backward(dy, x, W1, b1, W2)


def residual_block_backward(dy, x, W1, b1, W2):
    """(dx, dW1, db1, dW2) of :func:`residual_block`: the branch's, plus dy on dx (the identity)."""
    dx, dW1, db1, dW2 = _branch_backward(dy, x, W1, b1, W2)
    return dy + dx, dW1, db1, dW2


def stack_gradient_norms(x, params, dy, residual=True):
    """Norms of dL/dh_l through a stack of blocks h_l = block(h_{l-1}; W1_l, b1_l, W2_l).

    Args:
        x: the stack's input h_0, shape (..., C).
        params: a list of L tuples (W1, b1, W2), first block first; L may be 0.
        dy: dL/dh_L, the gradient at the stack's output, shape of x.
        residual: residual blocks if True, plain blocks if False.
    Returns:
        float64 array of shape (L + 1,): entry l is the Frobenius norm of dL/dh_l, so entry 0 is
        at the input and entry L is ``norm(dy)`` (for L = 0, the one entry ``norm(dy)``).
    """
    if residual:
        return gradient_norms_through(x, params, dy, residual_block, residual_block_backward)
    return gradient_norms_through(x, params, dy, plain_block, plain_block_backward)


def gradient_norms_through(x, params, dy, block, backward):
    """:func:`stack_gradient_norms` for any block: ``block(h, W1, b1, W2) -> h_next`` and
    ``backward(dy, h, W1, b1, W2) -> (dh, ...)``."""
    inputs = [x][: len(params)]  # h_0 ... h_{L-1}: each block's input, needed by its backward
    for W1, b1, W2 in params[:-1]:
        inputs.append(block(inputs[-1], W1, b1, W2))
    norms = [np.linalg.norm(dy)]  # with no blocks (L = 0), dL/dh_0 = dy: this one norm
    grad = dy
    for h, (W1, b1, W2) in zip(reversed(inputs), reversed(params), strict=True):
        grad = backward(grad, h, W1, b1, W2)[0]
        norms.append(np.linalg.norm(grad))
    return np.array(norms[::-1], dtype=np.float64)
