"""BatchNorm, forward and backward: the usual wrong implementations.

Every function here is wrong on purpose."""

import numpy as np

from addnorm_lib.reference.mistakes._core import Mistake, _backward_dx

# ----------------------------------------------------------------------------------------------
# BatchNorm: batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps)
#            -> (y, new_running_mean, new_running_var), statistics over axis 0 and axes 2, 3, ...


def _batch_norm_variant(
    *,
    axes=None,
    biased_running=False,
    reversed_momentum=False,
    batch_stats_in_eval=False,
    update_in_eval=False,
    unbiased_normalize=False,
    one_pass=False,
    eps_outside_sqrt=False,
    use_gamma=True,
    use_beta=True,
):
    """A batch_norm with one convention changed; ``axes(x)`` picks the reduced axes."""

    def batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        reduced = axes(x) if axes else (0, *range(2, x.ndim))
        channel = [1] * x.ndim
        channel[1] = x.shape[1]
        n = int(np.prod([x.shape[a] for a in reduced]))
        mean = x.mean(axis=reduced, keepdims=True)
        if one_pass:
            var = (x**2).mean(axis=reduced, keepdims=True) - mean**2
        else:
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
        std = np.sqrt(var) + eps if eps_outside_sqrt else np.sqrt(var + eps)
        y = (x - mean) / std
        y = y * gamma.reshape(channel) if use_gamma else y
        y = y + beta.reshape(channel) if use_beta else y
        return y.astype(x.dtype), new_mean, new_var

    return batch_norm


def _broadcast_along_batch_axis(
    x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5
):
    """batch_norm with every per-channel vector written ``v[:, None]``, shape (C, 1): right for
    (N, C, L) input, lined up with the batch axis of (N, C) input (NumPy raises unless N == C)."""
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes)  # (C,)
    var = ((x - mean[:, None]) ** 2).mean(axis=axes)  # on (N, C): an error unless N == C
    n = x.size // x.shape[1]
    if training:
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean.copy(), running_var.copy()
    x_hat = (x - mean[:, None]) / np.sqrt(var[:, None] + eps)
    return gamma[:, None] * x_hat + beta[:, None], new_mean, new_var


def _channels_last_scrambled(y):
    """What becomes of an (N, C, L) result ``y`` computed channels last, as (N * L, C), and
    reshaped straight to (N, C, L) before the channel axis is moved back: an (N, L, C) array,
    right only when C == L. (N, C) input is left as it is."""
    if y.ndim < 3:
        return y
    flat = np.moveaxis(y, 1, -1).reshape(-1, y.shape[1])  # (N * L, C)
    return np.moveaxis(flat.reshape(y.shape), -1, 1)  # (N, L, C)


def _reshaped_before_moving_back(
    x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5
):
    """batch_norm computed channels last, its y of (N, C, L) input scrambled to (N, L, C)."""
    y, new_mean, new_var = _batch_norm_variant()(
        x, gamma, beta, running_mean, running_var, training, momentum, eps
    )
    return _channels_last_scrambled(y), new_mean, new_var


#: said when a per-channel vector is broadcast along the batch or the length axis
MISBROADCAST_DIAGNOSIS = (
    "Your code broadcasts a per-channel vector of shape (C,) (a statistic, gamma or beta) along "
    "the wrong axis of x: `v[:, None]`, of shape (C, 1), lines it up with the batch axis of "
    "(N, C) input, and a bare (C,) vector with the length axis of (N, C, L) input. It only works "
    "when that axis is as long as the channels (N == C, or L == C); otherwise it raises, or "
    "mixes up the channels."
)
MISBROADCAST_HINT = (
    "Put every per-channel vector on axis 1: v.reshape(shape) with "
    "shape = (1, -1) + (1,) * (x.ndim - 2), i.e. (1, C) or (1, C, 1)."
)
#: said when a result computed channels last comes back with its axes scrambled
CHANNELS_LAST_DIAGNOSIS = (
    "You computed with the channels last, as (N * L, C), then reshaped the result straight to "
    "x's shape (N, C, L) before moving the channel axis back: the values come back in "
    "(N, L, C) order, which is right only when C == L."
)
CHANNELS_LAST_HINT = (
    "Undo the steps in reverse order: reshape to the channels-last shape (N, L, C) first, then "
    "move the channel axis back, np.moveaxis(y.reshape(N, L, C), -1, 1) (or .transpose(1, 2) "
    "in torch)."
)


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
    Mistake(
        "one_pass_variance",
        "Your variance loses precision when the mean is large compared to the spread: it looks "
        "like E[x^2] - E[x]^2, which cancels catastrophically.",
        "Compute the variance in two passes: mean((x - mean)**2) over the reduced axes.",
        _batch_norm_variant(one_pass=True),
    ),
    Mistake(
        "eps_outside_sqrt",
        "You added eps outside the square root (sqrt(var) + eps): BatchNorm adds it to the "
        "variance, inside the root.",
        "Divide by sqrt(var + eps).",
        _batch_norm_variant(eps_outside_sqrt=True),
    ),
    Mistake(
        "eps_zero_as_default",
        "With eps=0 you used the default eps (1e-5) instead: `eps or 1e-5` (or `if not eps`) "
        "takes 0 for a missing value.",
        "0 is a valid eps: use the eps you are given; test for a missing one with `eps is None`.",
        lambda x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5: (
            _batch_norm_variant()(
                x, gamma, beta, running_mean, running_var, training, momentum, eps or 1e-5
            )
        ),
    ),
    Mistake(
        "no_gamma",
        "You left out gamma: the normalized x_hat must be scaled per channel.",
        "Finish with gamma * x_hat + beta, gamma and beta reshaped to (1, C) or (1, C, 1).",
        _batch_norm_variant(use_gamma=False),
    ),
    Mistake(
        "no_beta",
        "You left out beta: the scaled x_hat must be shifted per channel.",
        "Finish with gamma * x_hat + beta, gamma and beta reshaped to (1, C) or (1, C, 1).",
        _batch_norm_variant(use_beta=False),
    ),
    Mistake(
        "broadcast_along_batch_axis",
        MISBROADCAST_DIAGNOSIS,
        MISBROADCAST_HINT,
        _broadcast_along_batch_axis,
    ),
    Mistake(
        "reshaped_before_moving_back",
        CHANNELS_LAST_DIAGNOSIS,
        CHANNELS_LAST_HINT,
        _reshaped_before_moving_back,
    ),
)


def _backward_broadcast_along_batch_axis(dy, x, gamma, eps=1e-5):
    """The backward with gamma written ``gamma[:, None]``: an error on (N, C) input unless
    N == C (the statistics kept their dims, as in the notebook's solution)."""
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    x_hat = (x - mean) * inv_std
    dx_hat = dy * gamma[:, None]  # (C, 1): along the batch axis of (N, C) input
    dx = inv_std * (
        dx_hat
        - dx_hat.mean(axis=axes, keepdims=True)
        - x_hat * (dx_hat * x_hat).mean(axis=axes, keepdims=True)
    )
    return dx, (dy * x_hat).sum(axis=axes), dy.sum(axis=axes)


def _backward_reshaped_before_moving_back(dy, x, gamma, eps=1e-5):
    """The backward computed channels last, its dx of (N, C, L) input scrambled to (N, L, C)."""
    dx, dgamma, _ = _backward_dx("batch")(dy, x, gamma, eps)
    return _channels_last_scrambled(dx), dgamma, dy.sum(axis=(0, *range(2, x.ndim)))


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
    Mistake(
        "dx_no_gamma",
        "Your dx forgets gamma: the gradient reaching x_hat is dy * gamma, not dy.",
        "Start the backward with dx_hat = dy * gamma (gamma reshaped to its channel axis).",
        _backward_dx("batch", use_gamma=False),
    ),
    Mistake(
        "backward_layer_norm_axes",
        "Your backward pass takes the statistics and their means over the last axis, "
        "LayerNorm's axes: BatchNorm's run over the batch (axis 0, and the length axis 2), one "
        "per channel.",
        "Use axes = (0, *range(2, x.ndim)) for the mean, the variance and both means in dx.",
        _backward_dx("batch_layer_axes"),
    ),
    Mistake(
        "backward_broadcast_along_batch_axis",
        MISBROADCAST_DIAGNOSIS,
        MISBROADCAST_HINT,
        _backward_broadcast_along_batch_axis,
    ),
    Mistake(
        "dx_reshaped_before_moving_back",
        CHANNELS_LAST_DIAGNOSIS,
        CHANNELS_LAST_HINT,
        _backward_reshaped_before_moving_back,
    ),
)


def _bn_backward_dgamma_with_x(dy, x, gamma, eps=1e-5):
    axes = (0, *range(2, x.ndim))
    return None, (dy * x).sum(axis=axes), None


BATCH_NORM_BACKWARD_DGAMMA_MISTAKES = (
    Mistake(
        "dgamma_uses_x",
        "Your dgamma multiplies dy by x, but gamma scales the normalized x_hat.",
        "dgamma = (dy * x_hat) summed over axis 0 (and the length axis).",
        _bn_backward_dgamma_with_x,
    ),
)
