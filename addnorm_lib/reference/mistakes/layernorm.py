"""LayerNorm, forward and backward: the usual wrong implementations.

Every function here is wrong on purpose."""

import numpy as np

from addnorm_lib.reference.mistakes._core import Mistake, _backward_dx, _normalize, _stats

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
        "eps_zero_as_default",
        "With eps=0 you used the default eps (1e-5) instead: `eps or 1e-5` (or `if not eps`) "
        "takes 0 for a missing value.",
        "0 is a valid eps: use the eps you are given, and test for a missing one with "
        "`eps is None`.",
        lambda x, gamma, beta, eps=1e-5: _normalize(x, -1, eps if eps else 1e-5) * gamma + beta,
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

#: in the backward pass, x_hat and 1/std recomputed with the unbiased variance (dx and dgamma)
LAYER_NORM_BACKWARD_UNBIASED = Mistake(
    "backward_unbiased_variance",
    "Your backward pass recomputes the variance unbiased (dividing by C - 1, e.g. ddof=1), so "
    "its x_hat and 1 / sqrt(var + eps) are not the forward pass's.",
    "Recompute the statistics exactly as the forward pass does: the biased variance, "
    "mean((x - mean)**2) over the last axis, np.var's default ddof=0.",
    _backward_dx("layer", ddof=1),
)
LAYER_NORM_BACKWARD_DX_MISTAKES = (*LAYER_NORM_BACKWARD_DX_MISTAKES, LAYER_NORM_BACKWARD_UNBIASED)


def _ln_backward_dgamma_with_x(dy, x, gamma, eps=1e-5):
    return None, (dy * x).reshape(-1, x.shape[-1]).sum(0), None


LAYER_NORM_BACKWARD_DGAMMA_MISTAKES = (
    Mistake(
        "dgamma_uses_x",
        "Your dgamma multiplies dy by x, but gamma scales the normalized x_hat.",
        "dgamma = (dy * x_hat) summed over every axis but the last.",
        _ln_backward_dgamma_with_x,
    ),
    LAYER_NORM_BACKWARD_UNBIASED,
)
