"""A catalogue of the usual wrong implementations, as code.

Each entry computes what a learner's function returns when it makes one specific mistake. The
checkers in :mod:`addnorm_lib.checks` run the entries on the same inputs as the learner's function:
when the learner's (wrong) result matches an entry, the feedback names the mistake instead of only
saying "the values differ". The book also uses entries to demonstrate a pitfall
(``layer_norm_one_pass``).

Every function here is wrong on purpose. Never use one for real work.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from addnorm_lib import norms


@dataclass(frozen=True)
class Mistake:
    """One known mistake: what it computes and what to tell a learner whose result matches it."""

    name: str
    diagnosis: str  # what the learner probably did, addressed to them
    hint: str  # how to fix it
    compute: Callable[..., object]


def _stats(x, axis, ddof=0):
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=axis, keepdims=True) / (
        np.prod([x.shape[a] for a in np.atleast_1d(axis)]) - ddof
    )
    return mean, var


def _normalize(x, axis, eps, ddof=0, eps_outside=False, use_eps=True):
    mean, var = _stats(x, axis, ddof)
    if not use_eps:
        return (x - mean) / np.sqrt(var)
    if eps_outside:
        return (x - mean) / (np.sqrt(var) + eps)
    return (x - mean) / np.sqrt(var + eps)


# ----------------------------------------------------------------------------------------------
# LayerNorm forward: layer_norm(x, gamma, beta, eps) -> y, reducing over the last axis.


def layer_norm_one_pass(x, gamma, beta, eps=1e-5):
    """LayerNorm with the variance as E[x^2] - E[x]^2, in the input's precision.

    Algebraically equal to the two-pass variance, numerically not: in float32, when the mean is
    large compared to the spread, E[x^2] and E[x]^2 are two nearly equal large numbers and their
    difference loses most of its digits (it can even come out negative).
    """
    mean = x.mean(axis=-1, keepdims=True)
    mean_of_squares = (x * x).mean(axis=-1, keepdims=True)
    var = mean_of_squares - mean * mean
    return ((x - mean) / np.sqrt(var + eps) * gamma + beta).astype(x.dtype)


def _ln_over(axis):
    def compute(x, gamma, beta, eps=1e-5):
        return _normalize(x, axis, eps) * gamma + beta

    return compute


LAYER_NORM_MISTAKES = (
    Mistake(
        "batch_axis",
        "You normalized over the batch axis (axis 0): that is BatchNorm's axis.",
        "LayerNorm normalizes each example on its own, over its last axis: use axis=-1.",
        _ln_over(0),
    ),
    Mistake(
        "axis_1",
        "You normalized over axis 1. That is the feature axis of a 2-D input, but for a (B, T, C) "
        "input it is the time axis T.",
        "Use axis=-1, which is the feature axis whatever the number of leading axes.",
        _ln_over(1),
    ),
    Mistake(
        "all_leading_axes",
        "You normalized over every axis except the first: for a (B, T, C) input that mixes the T "
        "tokens of a sequence.",
        "Each token is normalized on its own: reduce over axis=-1 only.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, tuple(range(1, x.ndim)), eps) * gamma + beta,
    ),
    Mistake(
        "all_axes",
        "You normalized with one mean and one variance for the whole array.",
        "Compute one mean and one variance per example, over axis=-1, with keepdims=True.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, tuple(range(x.ndim)), eps) * gamma + beta,
    ),
    Mistake(
        "unbiased_variance",
        "You used the unbiased variance (dividing by C - 1, e.g. ddof=1).",
        "LayerNorm uses the biased variance, dividing by C: np.var(x, ddof=0) (the default), "
        "torch.var(x, correction=0) (not the default).",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps, ddof=1) * gamma + beta,
    ),
    Mistake(
        "eps_outside_sqrt",
        "You added eps outside the square root: (x - mean) / (sqrt(var) + eps).",
        "eps goes inside the root: (x - mean) / sqrt(var + eps).",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps, eps_outside=True) * gamma + beta,
    ),
    Mistake(
        "no_eps",
        "You left eps out: (x - mean) / sqrt(var). On a nearly constant row that divides by a tiny "
        "number.",
        "Add eps inside the square root: (x - mean) / sqrt(var + eps).",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps, use_eps=False) * gamma + beta,
    ),
    Mistake(
        "divided_by_variance",
        "You divided by the variance instead of the standard deviation.",
        "Divide by sqrt(var + eps).",
        lambda x, gamma, beta, eps=1e-5: (
            (x - x.mean(-1, keepdims=True)) / (_stats(x, -1)[1] + eps) * gamma + beta
        ),
    ),
    Mistake(
        "one_pass_variance",
        "Your variance loses precision on float32 input whose mean is large compared to its "
        "spread: it looks like E[x^2] - E[x]^2.",
        "Compute the variance in two passes: mean((x - mean)**2).",
        layer_norm_one_pass,
    ),
    Mistake(
        "gamma_beta_swapped",
        "You swapped gamma and beta: beta * x_hat + gamma.",
        "The scale multiplies, the shift adds: gamma * x_hat + beta.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps) * beta + gamma,
    ),
    Mistake(
        "no_affine",
        "You returned x_hat without the affine step.",
        "Finish with gamma * x_hat + beta.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps),
    ),
    Mistake(
        "no_beta",
        "You left out beta.",
        "Finish with gamma * x_hat + beta.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps) * gamma,
    ),
    Mistake(
        "no_gamma",
        "You left out gamma.",
        "Finish with gamma * x_hat + beta.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps) + beta,
    ),
)


# ----------------------------------------------------------------------------------------------
# LayerNorm backward: layer_norm_backward(dy, x, gamma, eps) -> (dx, dgamma, dbeta).


def _backward_dx(norm="layer", keep_mean_term=True, keep_var_term=True, use_gamma=True):
    """A norm's dx with terms dropped on purpose: LayerNorm's statistics are over the last axis,
    BatchNorm's over every axis but the channel axis 1 (gamma then broadcasts along axis 1)."""

    def compute(dy, x, gamma, eps=1e-5):
        if norm == "layer":
            axes, channel = (-1,), gamma.shape
        else:
            axes, channel = (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
        mean, var = _stats(x, axes)
        inv_std = 1.0 / np.sqrt(var + eps)
        x_hat = (x - mean) * inv_std
        dx_hat = dy * gamma.reshape(channel) if use_gamma else dy
        dx = dx_hat
        if keep_mean_term:
            dx = dx - dx_hat.mean(axis=axes, keepdims=True)
        if keep_var_term:
            dx = dx - x_hat * (dx_hat * x_hat).mean(axis=axes, keepdims=True)
        return dx * inv_std, None, None

    return compute


LAYER_NORM_BACKWARD_DX_MISTAKES = (
    Mistake(
        "dx_no_mean_term",
        "Your dx is missing the term that comes from the mean: every input moves the mean, so "
        "dx needs - mean(dx_hat) inside the bracket.",
        "dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / sqrt(var + eps).",
        _backward_dx("layer", keep_mean_term=False),
    ),
    Mistake(
        "dx_no_variance_term",
        "Your dx is missing the term that comes from the variance: every input moves the variance, "
        "so dx needs - x_hat * mean(dx_hat * x_hat).",
        "dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / sqrt(var + eps).",
        _backward_dx("layer", keep_var_term=False),
    ),
    Mistake(
        "dx_statistics_constant",
        "Your dx treats the mean and the variance as constants (dx = dy * gamma / std).",
        "Both statistics depend on x: add the two terms they contribute.",
        _backward_dx("layer", keep_mean_term=False, keep_var_term=False),
    ),
    Mistake(
        "dx_no_gamma",
        "Your dx forgets gamma: the gradient reaching x_hat is dy * gamma, not dy.",
        "Start the backward with dx_hat = dy * gamma.",
        _backward_dx("layer", use_gamma=False),
    ),
)


def _ln_backward_dgamma_with_x(dy, x, gamma, eps=1e-5):
    return None, (dy * x).reshape(-1, x.shape[-1]).sum(0), None


LAYER_NORM_BACKWARD_DGAMMA_MISTAKES = (
    Mistake(
        "dgamma_uses_x",
        "Your dgamma multiplies dy by x, but gamma scales the normalized x_hat.",
        "dgamma = (dy * x_hat) summed over every axis but the last.",
        _ln_backward_dgamma_with_x,
    ),
)


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
    from addnorm_lib import blocks

    return blocks.stack_gradient_norms(x, params, dy, residual)[::-1]


def _stack_norms_same_input(x, params, dy, residual=True):
    """Every block's backward is given the stack's input x instead of the block's own input."""
    from addnorm_lib import blocks

    backward = blocks.residual_block_backward if residual else blocks.plain_block_backward
    return blocks.gradient_norms_through(x, params, dy, lambda h, *weights: x, backward)


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
)


# ----------------------------------------------------------------------------------------------
# BatchNorm: batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps)
#            -> (y, new_running_mean, new_running_var), statistics over axis 0 and axes 2, 3, ...


def _batch_norm_variant(*, axes=None, biased_running=False, reversed_momentum=False,
                        batch_stats_in_eval=False, update_in_eval=False,
                        unbiased_normalize=False):  # fmt: skip
    """A batch_norm with one convention changed; ``axes(x)`` picks the reduced axes."""

    def batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        reduced = axes(x) if axes else (0, *range(2, x.ndim))
        channel = [1] * x.ndim
        channel[1] = x.shape[1]
        n = int(np.prod([x.shape[a] for a in reduced]))
        mean = x.mean(axis=reduced, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=reduced, keepdims=True)
        batch_mean = mean.reshape(-1) if mean.size == x.shape[1] else None
        batch_var = var.reshape(-1) if var.size == x.shape[1] else None
        new_mean, new_var = running_mean.copy(), running_var.copy()
        if (training or update_in_eval) and batch_mean is not None:
            running = batch_var if biased_running else batch_var * n / (n - 1)
            keep, take = (momentum, 1 - momentum) if reversed_momentum else (1 - momentum, momentum)
            new_mean = keep * running_mean + take * batch_mean
            new_var = keep * running_var + take * running
        if not training and not batch_stats_in_eval:
            mean, var = running_mean.reshape(channel), running_var.reshape(channel)
        elif unbiased_normalize:
            var = var * n / (n - 1)
        y = (x - mean) / np.sqrt(var + eps) * gamma.reshape(channel) + beta.reshape(channel)
        return y.astype(x.dtype), new_mean, new_var

    return batch_norm


BATCH_NORM_MISTAKES = (
    Mistake(
        "feature_axis",
        "You normalized over the feature axis (axis 1), as LayerNorm does: BatchNorm takes one "
        "mean and variance per feature, over the batch (and, for (N, C, L) input, the length).",
        "Reduce over axis 0 and every axis after 1: axes = (0, *range(2, x.ndim)).",
        _batch_norm_variant(axes=lambda x: (1,)),
    ),
    Mistake(
        "batch_axis_only",
        "For an (N, C, L) input you reduced over the batch axis only: BatchNorm1d shares one "
        "mean and variance per channel across the batch *and* the length axis.",
        "Reduce over axis 0 and every axis after 1: axes = (0, *range(2, x.ndim)).",
        _batch_norm_variant(axes=lambda x: (0,)),
    ),
    Mistake(
        "biased_running_var",
        "Your running variance is updated with the biased batch variance: PyTorch blends in the "
        "unbiased one, var * n / (n - 1), while normalizing the batch with the biased one.",
        "new_running_var = (1 - momentum) * running_var + momentum * var * n / (n - 1).",
        _batch_norm_variant(biased_running=True),
    ),
    Mistake(
        "reversed_momentum",
        "Your momentum points the wrong way: in PyTorch momentum is the weight of the *new* "
        "batch, new = (1 - momentum) * old + momentum * batch.",
        "Swap the two weights: momentum multiplies the batch statistic.",
        _batch_norm_variant(reversed_momentum=True),
    ),
    Mistake(
        "batch_stats_in_eval",
        "In eval mode (training=False) you normalized with the batch's own statistics: eval "
        "mode uses the running estimates, so an example's output does not depend on its batch.",
        "When training is False, normalize with running_mean and running_var.",
        _batch_norm_variant(batch_stats_in_eval=True),
    ),
    Mistake(
        "updates_in_eval",
        "Your function updates the running estimates in eval mode: they must come back unchanged "
        "when training is False.",
        "Only blend in the batch statistics when training is True.",
        _batch_norm_variant(update_in_eval=True),
    ),
    Mistake(
        "unbiased_normalize",
        "You normalized the batch with the unbiased variance (divide by n - 1): BatchNorm "
        "normalizes with the biased one (divide by n) and uses the unbiased one only for the "
        "running estimate.",
        "var = mean((x - mean)**2) over the reduced axes for y; var * n / (n - 1) for the update.",
        _batch_norm_variant(unbiased_normalize=True),
    ),
)


BATCH_NORM_BACKWARD_MISTAKES = (
    Mistake(
        "dx_no_mean_term",
        "Your dx is missing the term that comes from the batch mean: every example moves its "
        "channel's mean, so dx needs - mean(dx_hat) over the batch inside the bracket.",
        "dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / sqrt(var + eps), means "
        "over axis 0 (and the length axis).",
        _backward_dx("batch", keep_mean_term=False),
    ),
    Mistake(
        "dx_no_variance_term",
        "Your dx is missing the term that comes from the batch variance: - x_hat * "
        "mean(dx_hat * x_hat) over the batch.",
        "dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / sqrt(var + eps).",
        _backward_dx("batch", keep_var_term=False),
    ),
    Mistake(
        "dx_statistics_constant",
        "Your dx treats the batch mean and variance as constants (dx = dy * gamma / std): in "
        "training mode both depend on every example of the batch.",
        "Add the two terms the statistics contribute, averaged over the batch axis.",
        _backward_dx("batch", keep_mean_term=False, keep_var_term=False),
    ),
)


# ----------------------------------------------------------------------------------------------
# RMSNorm: rms_norm(x, weight, eps) -> y and rms_norm_backward(dy, x, weight, eps) -> (dx, dw).


def _rms_over(axis=-1, *, center=False, use_eps=True, total=False, power=0.5):
    """An RMSNorm with one thing changed: the axis, centering, eps, a sum, or the root."""

    def compute(x, weight, eps=1e-6):
        centered = x - x.mean(axis=axis, keepdims=True) if center else x
        square = (centered * centered).sum(axis=axis, keepdims=True)
        if not total:
            square = square / np.prod([x.shape[a] for a in np.atleast_1d(axis)])
        return centered / (square + (eps if use_eps else 0.0)) ** power * weight

    return compute


RMS_NORM_MISTAKES = (
    Mistake(
        "subtracts_mean",
        "You subtracted the mean: that is LayerNorm (without its bias). RMSNorm divides x itself "
        "by its root mean square and never re-centers it.",
        "y = x / sqrt(mean(x**2) + eps) * weight, with no x - mean anywhere.",
        _rms_over(center=True),
    ),
    Mistake(
        "centered_denominator_only",
        "You divided x by its standard deviation (the square root of the *centered* mean square), "
        "not by its root mean square.",
        "The mean square is mean(x**2), of x itself: y = x / sqrt(mean(x**2) + eps) * weight.",
        lambda x, weight, eps=1e-6: x / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * weight,
    ),
    Mistake(
        "eps_outside_root",
        "You added eps outside the square root, x / (sqrt(mean(x**2)) + eps): that is the "
        "placement of the RMSNorm paper's original code, not the one asked for here (LLaMA's and "
        "torch.nn.RMSNorm's). The two differ visibly when the inputs are small.",
        "eps goes inside the root: x / sqrt(mean(x**2) + eps).",
        norms.rms_norm_eps_outside,  # the library keeps this placement for the book
    ),
    Mistake(
        "no_eps",
        "You left eps out: x / sqrt(mean(x**2)).",
        "Add eps inside the root: x / sqrt(mean(x**2) + eps).",
        _rms_over(use_eps=False),
    ),
    Mistake(
        "no_weight",
        "You left out the weight: RMSNorm ends by multiplying by its learned per-feature gain.",
        "Finish with * weight.",
        lambda x, weight, eps=1e-6: _rms_over()(x, np.ones_like(weight), eps),
    ),
    Mistake(
        "sum_of_squares",
        "You divided by the root of the *sum* of squares: RMS is the root of their *mean*.",
        "Use mean(x**2) over the last axis (the sum divided by C).",
        _rms_over(total=True),
    ),
    Mistake(
        "no_square_root",
        "You divided by the mean square itself, not by its square root.",
        "Divide by sqrt(mean(x**2) + eps) (or multiply by its reciprocal square root).",
        _rms_over(power=1.0),
    ),
    Mistake(
        "batch_axis",
        "You took the mean square over the batch axis (axis 0): RMSNorm, like LayerNorm, "
        "normalizes each token over its own features.",
        "Reduce over axis=-1 with keepdims=True.",
        _rms_over(axis=0),
    ),
)


def _rms_backward(*, rms_term=True, use_weight=True, factor=2.0):
    """rms_norm_backward with a term dropped or a chain-rule factor changed."""

    def compute(dy, x, weight, eps=1e-6):
        c = x.shape[-1]
        ms = (x * x).mean(axis=-1, keepdims=True)  # (..., 1)
        rrms = 1.0 / np.sqrt(ms + eps)  # (..., 1)
        dxhat = dy * weight if use_weight else dy  # (..., C)
        dx = dxhat * rrms
        if rms_term:
            dms = (dxhat * x).sum(axis=-1, keepdims=True) * -0.5 * rrms**3  # (..., 1)
            dx = dx + dms * factor * x / c
        dweight = (dy * x * rrms).reshape(-1, c).sum(axis=0)  # (C,)
        return dx, dweight

    return compute


RMS_NORM_BACKWARD_MISTAKES = (
    Mistake(
        "rms_constant",
        "Your dx treats the RMS as a constant (dx = dy * weight / rms): but every input moves "
        "the mean square, so dx needs a second term through it.",
        "dx = (dx_hat - x_hat * mean(dx_hat * x_hat)) / rms, with dx_hat = dy * weight and "
        "x_hat = x / rms.",
        _rms_backward(rms_term=False),
    ),
    Mistake(
        "dx_no_weight",
        "Your dx forgets the weight: the gradient reaching x_hat is dy * weight, not dy.",
        "Start the backward with dx_hat = dy * weight.",
        _rms_backward(use_weight=False),
    ),
    Mistake(
        "dx_no_factor_two",
        "Your term through the mean square is half what it should be: d(x**2)/dx = 2x.",
        "d mean(x**2) / dx = 2 * x / C.",
        _rms_backward(factor=1.0),
    ),
    Mistake(
        "dweight_uses_x",
        "Your dweight multiplies dy by x, but the weight scales the normalized x_hat = x / rms.",
        "dweight = (dy * x_hat) summed over every axis but the last.",
        lambda dy, x, weight, eps=1e-6: (None, (dy * x).reshape(-1, x.shape[-1]).sum(axis=0)),
    ),
)


# ----------------------------------------------------------------------------------------------
# DeepNorm: deepnorm_constants(architecture, N, M, stack) -> (alpha, beta);
#           deepnorm_residual(x, sublayer, norm, alpha) -> norm(alpha * x + sublayer(x)).


def _encoder_only(n: int) -> tuple[float, float]:
    return (2 * n) ** 0.25, (8 * n) ** -0.25


def _constants_variant(architecture, num_encoder_layers=0, num_decoder_layers=0, stack=None, *,
                       one_stack_formula=False, swapped=False, beta_is_inverse=False):  # fmt: skip
    """deepnorm_constants with one slip; the options say which."""
    from addnorm_lib.deepnorm import deepnorm_constants

    if one_stack_formula and architecture == "encoder-decoder":
        layers = num_encoder_layers if stack == "encoder" else num_decoder_layers
        alpha, beta = _encoder_only(layers)
    else:
        alpha, beta = deepnorm_constants(architecture, num_encoder_layers, num_decoder_layers,
                                         stack)  # fmt: skip
    if swapped:
        alpha, beta = beta, alpha
    if beta_is_inverse:
        beta = 1.0 / alpha
    return np.array([alpha, beta])


DEEPNORM_CONSTANTS_MISTAKES = (
    Mistake(
        "encoder_decoder_one_stack_formula",
        "For an encoder-decoder model you used the one-stack formulas, alpha = (2L)^(1/4) and "
        "beta = (8L)^(-1/4). An encoder-decoder model has its own constants: the encoder's depend "
        "on N and M, 0.81 (N^4 M)^(1/16) and 0.87 (N^4 M)^(-1/16); the decoder's are (3M)^(1/4) "
        "and (12M)^(-1/4).",
        "Branch on the architecture and, for encoder-decoder, on the stack.",
        lambda *args: _constants_variant(*args, one_stack_formula=True),
    ),
    Mistake(
        "swapped",
        "You returned (beta, alpha): alpha > 1 up-weights the residual, beta < 1 scales the "
        "initial weights down.",
        "Return (alpha, beta) in that order.",
        lambda *args: _constants_variant(*args, swapped=True),
    ),
    Mistake(
        "beta_is_inverse_alpha",
        "Your beta is 1 / alpha: beta has its own formula (for encoder-only, (8N)^(-1/4), not "
        "(2N)^(-1/4)).",
        "Use the table's beta column.",
        lambda *args: _constants_variant(*args, beta_is_inverse=True),
    ),
)


def dispatch(table: dict, kind: str, what: str):
    """``table[kind]``; a ValueError naming the known kinds for any other name.

    The mistake catalogues build their wrong implementations from names: a misspelled name must
    fail loudly, not fall through to another variant (or to the right answer).
    """
    if kind not in table:
        raise ValueError(f"unknown {what} mistake {kind!r}; known: {', '.join(sorted(table))}")
    return table[kind]


# deepnorm_residual(x, sublayer, norm, alpha) written the wrong way, one step each.
_DEEPNORM_STEPS = {
    "alpha_on_branch": lambda x, sublayer, norm, alpha: norm(x + alpha * sublayer(x)),
    "no_alpha": lambda x, sublayer, norm, alpha: norm(x + sublayer(x)),
    "alpha_after_norm": lambda x, sublayer, norm, alpha: alpha * norm(x + sublayer(x)),
    "scaled_input": lambda x, sublayer, norm, alpha: norm(alpha * x + sublayer(alpha * x)),
    "pre_norm": lambda x, sublayer, norm, alpha: alpha * x + sublayer(norm(x)),
    "no_norm": lambda x, sublayer, norm, alpha: alpha * x + sublayer(x),
}


def _residual_variant(kind):
    """deepnorm_residual written the wrong way; ``kind`` names how (a key of _DEEPNORM_STEPS)."""
    step = dispatch(_DEEPNORM_STEPS, kind, "deepnorm_residual")

    def compute(x, sublayer, norm, alpha):
        import torch

        with torch.no_grad():
            return step(x, sublayer, norm, alpha)

    return compute


DEEPNORM_RESIDUAL_MISTAKES = (
    Mistake(
        "alpha_on_branch",
        "You multiplied the sublayer's output by alpha: norm(x + alpha * G(x)). DeepNorm "
        "up-weights the residual x, not the branch. (Because LayerNorm ignores the overall scale, "
        "your version equals norm(x / alpha + G(x)): it *down*-weights the residual.)",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("alpha_on_branch"),
    ),
    Mistake(
        "no_alpha",
        "You left alpha out: norm(x + G(x)) is the plain Post-LN step.",
        "Multiply the residual by alpha: norm(alpha * x + sublayer(x)).",
        _residual_variant("no_alpha"),
    ),
    Mistake(
        "alpha_after_norm",
        "You multiplied the normalized output by alpha. The scaling belongs before the norm, on "
        "the residual.",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("alpha_after_norm"),
    ),
    Mistake(
        "sublayer_of_scaled_input",
        "You fed alpha * x to the sublayer as well: the sublayer sees x; only the shortcut is "
        "scaled.",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("scaled_input"),
    ),
    Mistake(
        "pre_norm",
        "You normalized the sublayer's input (a Pre-LN step): DeepNorm keeps Post-LN's "
        "placement, the norm after the addition.",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("pre_norm"),
    ),
    Mistake(
        "no_norm",
        "You returned alpha * x + G(x) without the norm.",
        "Apply norm to the sum: norm(alpha * x + sublayer(x)).",
        _residual_variant("no_norm"),
    ),
)


# ----------------------------------------------------------------------------------------------
# Placement: PostLNBlock / PreLNBlock(self_attn, ffn, d_model) and PreLNStack(layers, norm).
# A block mistake computes the block's output from (x, self_attn, ffn, norm1, norm2).


# One residual step of a block, right or wrong, from the stream x, a sublayer and a norm.
_STEPS = {
    "post": lambda x, sublayer, norm: norm(x + sublayer(x)),
    "pre": lambda x, sublayer, norm: x + sublayer(norm(x)),
    "normalized_residual": lambda x, sublayer, norm: norm(x) + sublayer(norm(x)),
    "norm_on_branch": lambda x, sublayer, norm: x + norm(sublayer(x)),
    "norm_inside_and_after": lambda x, sublayer, norm: norm(x + sublayer(norm(x))),
    "no_residual": lambda x, sublayer, norm: sublayer(x),
}


def _steps(step, first="self_attn", second="ffn", norms=("norm1", "norm2")):
    """A block as two steps: (step, sublayer, norm) for the first sublayer, then the second."""
    return ((step, first, norms[0]), (step, second, norms[1]))


# A block written the wrong way (or the other placement): its two steps, by name.
_BLOCKS = {
    "pre_ln": _steps("pre"),
    "post_ln": _steps("post"),
    "one_norm_post": _steps("post", norms=("norm1", "norm1")),
    "one_norm_pre": _steps("pre", norms=("norm1", "norm1")),
    "ffn_first_post": _steps("post", first="ffn", second="self_attn"),
    "ffn_first_pre": _steps("pre", first="ffn", second="self_attn"),
    "normalized_residual": _steps("normalized_residual"),
    "norm_on_branch": _steps("norm_on_branch"),
    "post_norm_inside": _steps("norm_inside_and_after"),
    "no_residual": _steps("no_residual"),
}


def _block_variant(kind):
    """A Post-LN or Pre-LN block written the wrong way; ``kind`` names how (a key of _BLOCKS)."""
    steps = dispatch(_BLOCKS, kind, "block")

    def compute(x, self_attn, ffn, norm1, norm2):
        import torch

        parts = {"self_attn": self_attn, "ffn": ffn, "norm1": norm1, "norm2": norm2}
        with torch.no_grad():
            for step, sublayer, norm in steps:
                x = _STEPS[step](x, parts[sublayer], parts[norm])
            return x

    return compute


def _block_mistake(kind, diagnosis, hint):
    return Mistake(kind, diagnosis, hint, _block_variant(kind))


_POST = "x = norm1(x + self_attn(x)); then x = norm2(x + ffn(x))."
_PRE = "x = x + self_attn(norm1(x)); then x = x + ffn(norm2(x))."
POST_LN_BLOCK_MISTAKES = (
    _block_mistake("pre_ln", "Your block is Pre-LN: it normalizes the sublayers' inputs. Post-LN "
                   "adds first and normalizes the sum.", _POST),
    _block_mistake("one_norm_post", "Your block uses norm1 twice: the FFN's sum must go through "
                   "norm2, which has its own weight and bias.", _POST),
    _block_mistake("ffn_first_post", "Your block runs the FFN before the attention: a Transformer "
                   "layer attends first.", _POST),
    _block_mistake("post_norm_inside", "Your block normalizes the sublayers' inputs as well as the "
                   "sums: Post-LN's sublayers read the stream as it is.", _POST),
    _block_mistake("norm_on_branch", "Your block normalizes each sublayer's output before adding "
                   "it (OLMo 2's placement), not the sum.", _POST),
    _block_mistake("no_residual", "Your block has no residual connection: the sublayers' outputs "
                   "must be added to their inputs.", _POST),
)  # fmt: skip
PRE_LN_BLOCK_MISTAKES = (
    _block_mistake("post_ln", "Your block is Post-LN: it normalizes the sum after the add. Pre-LN "
                   "normalizes a copy of the stream for each sublayer and never the stream.", _PRE),
    _block_mistake("one_norm_pre", "Your block uses norm1 for both sublayers: the FFN's input must "
                   "go through norm2, which has its own weight and bias.", _PRE),
    _block_mistake("ffn_first_pre", "Your block runs the FFN before the attention: a Transformer "
                   "layer attends first.", _PRE),
    _block_mistake("normalized_residual", "Your block adds the sublayer's output to the "
                   "*normalized* stream, norm1(x) + self_attn(norm1(x)): the residual must carry "
                   "x itself, unnormalized.", _PRE),
    _block_mistake("norm_on_branch", "Your block normalizes each sublayer's output (OLMo 2's "
                   "placement) instead of its input.", _PRE),
    _block_mistake("no_residual", "Your block has no residual connection: the sublayers' outputs "
                   "must be added to their inputs.", _PRE),
)  # fmt: skip


STACK_SLIPS = ("no_final_norm", "norm_after_each", "norm_first", "reversed")


def _stack_variant(kind):
    """PreLNStack's forward written the wrong way, from (x, layers, norm); ``kind``: STACK_SLIPS."""
    dispatch(dict.fromkeys(STACK_SLIPS), kind, "stack")

    def compute(x, layers, norm):
        import torch

        with torch.no_grad():
            if kind == "norm_first":
                x = norm(x)
            for layer in reversed(layers) if kind == "reversed" else layers:
                x = layer(x)
                if kind == "norm_after_each":
                    x = norm(x)
            return norm(x) if kind in ("reversed",) else x

    return compute


PRE_LN_STACK_MISTAKES = (
    Mistake("no_final_norm", "Your stack returns the last layer's output without the final norm: "
            "a Pre-LN stream is never normalized inside the blocks, so the stack must end with "
            "norm.", "for layer in self.layers: x = layer(x); then return self.norm(x).",
            _stack_variant("no_final_norm")),
    Mistake("norm_after_each", "Your stack applies the final norm after every layer: it belongs "
            "once, at the end.", "for layer in self.layers: x = layer(x); then return "
            "self.norm(x).", _stack_variant("norm_after_each")),
    Mistake("norm_first", "Your stack applies its norm before the layers instead of after them.",
            "for layer in self.layers: x = layer(x); then return self.norm(x).",
            _stack_variant("norm_first")),
    Mistake("reversed", "Your stack applies the layers in reverse order.",
            "Apply self.layers in the order given.", _stack_variant("reversed")),
)  # fmt: skip


SCHEDULE_SLIPS = ("off_by_one", "no_d_model", "warmup_power", "max")


def _schedule_variant(kind):
    """vaswani_lr(step, d_model, warmup) with one slip (one of SCHEDULE_SLIPS); a 0-d array, as
    the judge compares."""
    dispatch(dict.fromkeys(SCHEDULE_SLIPS), kind, "schedule")

    def compute(step, d_model, warmup=4000):
        if kind == "off_by_one":
            step = step + 1
        scale = 1.0 if kind == "no_d_model" else d_model**-0.5
        rise = step * warmup ** (-0.5 if kind == "warmup_power" else -1.5)
        pick = max if kind == "max" else min
        return np.array(scale * pick(step**-0.5, rise))

    return compute


VASWANI_LR_MISTAKES = (
    Mistake("no_d_model", "Your schedule leaves out the d_model ** -0.5 factor.",
            "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
            _schedule_variant("no_d_model")),
    Mistake("max_instead_of_min", "Your schedule takes the max of the two branches: the min is "
            "what makes it rise, then fall.",
            "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
            _schedule_variant("max")),
    Mistake("warmup_power", "Your warm-up branch uses warmup ** -0.5: it is step * warmup ** -1.5, "
            "so that both branches meet at step = warmup.",
            "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
            _schedule_variant("warmup_power")),
    Mistake("off_by_one", "Your schedule is one step ahead: steps are counted from 1, as given.",
            "Use step as it is; do not add 1.", _schedule_variant("off_by_one")),
)  # fmt: skip


RSQRT_SLIPS = ("off_by_one", "no_sqrt")


def _rsqrt_variant(kind):
    """warmup_rsqrt_lr(step, peak_lr, warmup) with one slip (one of RSQRT_SLIPS); a 0-d array."""
    dispatch(dict.fromkeys(RSQRT_SLIPS), kind, "warmup_rsqrt_lr")

    def compute(step, peak_lr, warmup):
        if kind == "off_by_one":
            step = step + 1
        decay = warmup / step if kind == "no_sqrt" else (warmup / step) ** 0.5
        return np.array(peak_lr * min(step / warmup, decay))

    return compute


WARMUP_RSQRT_LR_MISTAKES = (
    Mistake("no_sqrt", "After the warm-up your schedule decays as warmup / step: the decay is "
            "its square root, sqrt(warmup / step).",
            "lr = peak_lr * min(step / warmup, sqrt(warmup / step)).", _rsqrt_variant("no_sqrt")),
    Mistake("off_by_one", "Your schedule is one step ahead: steps are counted from 1, as given.",
            "Use step as it is; do not add 1.", _rsqrt_variant("off_by_one")),
)  # fmt: skip
