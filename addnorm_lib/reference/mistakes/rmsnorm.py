"""RMSNorm, forward and backward: the usual wrong implementations.

Every function here is wrong on purpose."""

import numpy as np

from addnorm_lib.reference import norms
from addnorm_lib.reference.mistakes._core import Mistake

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


# ----------------------------------------------------------------------------------------------
# RMSNorm module with eps=None on a float64 input: y = rms_norm(x, weight, eps) with a wrong eps.
# The right eps is float64's machine epsilon, the eps of the dtype computed in.


def _rms_with_eps(eps):
    def compute(x, weight):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight

    return compute


_EPS_NONE_HINT = (
    "eps=None means torch.finfo(dtype).eps of the dtype you compute in: "
    "torch.finfo(x32.dtype).eps, where x32 is the tensor you compute with (float64 here)."
)


def _rms_zero_eps_as(default):
    def compute(x, weight, eps):
        return _rms_with_eps(eps if eps else default(x))(x, weight)

    return compute


#: eps=0 replaced by a default, as `eps or default` does: for a module built with eps=0
RMS_NORM_ZERO_EPS_MISTAKES = (
    Mistake(
        "eps_zero_as_none",
        "With eps=0 you used the eps of eps=None (the machine epsilon): `eps or "
        "torch.finfo(...).eps` (or `if not self.eps`) takes 0 for a missing value.",
        "0 is a valid eps: test for a missing one with `eps is None`.",
        _rms_zero_eps_as(lambda x: float(np.finfo(x.dtype).eps)),
    ),
    Mistake(
        "eps_zero_as_1e-6",
        "With eps=0 you used a default eps of 1e-6: `eps or 1e-6` takes 0 for a missing value.",
        "0 is a valid eps: use the eps you are given; test for a missing one with `eps is None`.",
        _rms_zero_eps_as(lambda x: 1e-6),
    ),
)
RMS_NORM_DEFAULT_EPS_MISTAKES = (
    Mistake(
        "eps_none_fixed_1e-6",
        "With eps=None you used a fixed eps of 1e-6 (rms_norm's default in part 1).",
        _EPS_NONE_HINT,
        _rms_with_eps(1e-6),
    ),
    Mistake(
        "eps_none_fixed_1e-5",
        "With eps=None you used a fixed eps of 1e-5 (LayerNorm's default).",
        _EPS_NONE_HINT,
        _rms_with_eps(1e-5),
    ),
    Mistake(
        "eps_none_float32",
        "With eps=None you used float32's machine epsilon (about 1.2e-7) on a float64 input, "
        "which is computed in float64.",
        _EPS_NONE_HINT,
        _rms_with_eps(float(np.finfo(np.float32).eps)),
    ),
)


def _rms_backward(
    *,
    rms_term=True,
    use_weight=True,
    factor=2.0,
    use_eps=True,
    sum_of_squares=False,
    term_sum=False,
    mean_term=False,
):
    """rms_norm_backward with one slip: a term dropped, a chain-rule factor changed, eps left
    out, the mean square taken as a sum (``sum_of_squares``), the term through the RMS summed
    instead of averaged (``term_sum``), or LayerNorm's extra term through the mean added
    (``mean_term``). Returns ``(dx, dweight)``, of x's and weight's shapes."""

    def compute(dy, x, weight, eps=1e-6):
        c = x.shape[-1]
        square = (x * x).sum(axis=-1, keepdims=True)  # (..., 1)
        ms = square if sum_of_squares else square / c  # (..., 1)
        rrms = 1.0 / np.sqrt(ms + (eps if use_eps else 0.0))  # (..., 1)
        dxhat = dy * weight if use_weight else dy  # (..., C)
        dx = dxhat * rrms
        if rms_term:
            # d ms / dx = 2 x / C (2 x for a sum): the term through the RMS
            divisor = 1 if (sum_of_squares or term_sum) else c
            dms = (dxhat * x).sum(axis=-1, keepdims=True) * -0.5 * rrms**3  # (..., 1)
            dx = dx + dms * factor * x / divisor
        if mean_term:
            dx = dx - dxhat.mean(axis=-1, keepdims=True) * rrms
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
        "backward_no_eps",
        "Your backward pass leaves eps out of the RMS: sqrt(mean(x**2)) instead of "
        "sqrt(mean(x**2) + eps), so it is not the gradient of your forward pass.",
        "Recompute rms = sqrt(mean(x**2) + eps) exactly as the forward pass does.",
        _rms_backward(use_eps=False),
    ),
    Mistake(
        "backward_sum_of_squares",
        "Your backward pass takes the RMS from the *sum* of squares: the forward pass divides by "
        "sqrt(mean(x**2) + eps), the mean over the C features.",
        "Recompute rms = sqrt(mean(x**2) + eps), with the mean over the last axis.",
        _rms_backward(sum_of_squares=True),
    ),
    Mistake(
        "dx_term_summed",
        "In your dx, the term through the RMS uses a *sum* over the features where the mean "
        "belongs: x_hat * sum(dx_hat * x_hat) is C times too large.",
        "dx = (dx_hat - x_hat * mean(dx_hat * x_hat)) / rms, with the mean over the last axis.",
        _rms_backward(term_sum=True),
    ),
    Mistake(
        "layer_norm_backward_formula",
        "Your dx has LayerNorm's term through the mean, - mean(dx_hat): RMSNorm never subtracts "
        "the mean, so its backward pass has no such term.",
        "dx = (dx_hat - x_hat * mean(dx_hat * x_hat)) / rms: one term less than LayerNorm's.",
        _rms_backward(mean_term=True),
    ),
    Mistake(
        "dweight_uses_x",
        "Your dweight multiplies dy by x, but the weight scales the normalized x_hat = x / rms.",
        "dweight = (dy * x_hat) summed over every axis but the last.",
        lambda dy, x, weight, eps=1e-6: (None, (dy * x).reshape(-1, x.shape[-1]).sum(axis=0)),
    ),
)
