"""What every topic's catalogue shares: the Mistake record, shared statistics, dispatch."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from addnorm_lib import lookup


@dataclass(frozen=True)
class Mistake:
    """One known mistake: what it computes and what to tell a learner whose result matches it."""

    name: str
    diagnosis: str  # what the learner probably did, addressed to them
    hint: str  # how to fix it
    compute: Callable[..., object]


def _stats(x, axis, ddof=0):
    """Mean and variance over ``axis`` (an int or a tuple), kept dims; divisor n - ddof."""
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=axis, keepdims=True) / (
        np.prod([x.shape[a] for a in np.atleast_1d(axis)]) - ddof
    )
    return mean, var


def _normalize(x, axis, eps, ddof=0, eps_outside=False, use_eps=True):
    """``(x - mean) / sqrt(var + eps)`` over ``axis``, or one of its slips the options name."""
    mean, var = _stats(x, axis, ddof)
    if not use_eps:
        return (x - mean) / np.sqrt(var)
    if eps_outside:
        return (x - mean) / (np.sqrt(var) + eps)
    return (x - mean) / np.sqrt(var + eps)


def dispatch(table: dict, kind: str, what: str):
    """``table[kind]``, through :func:`addnorm_lib.lookup`: a misspelled mistake name fails loudly
    instead of falling through to another variant (or to the right answer)."""
    return lookup(table, kind, f"the {what} mistake")


def _layer_axes(x, gamma):
    """LayerNorm: statistics over the last axis; gamma (C,) broadcasts as it is."""
    return (-1,), gamma.shape


def _batch_axes(x, gamma):
    """BatchNorm: statistics over every axis but the channel axis 1; gamma (C,) along axis 1."""
    return (0, *range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)


def _batch_with_layer_axes(x, gamma):
    """BatchNorm's gamma (along axis 1) with LayerNorm's statistics, over the last axis."""
    return (-1,), _batch_axes(x, gamma)[1]


# norm -> (x, gamma) -> (reduced axes, the shape gamma is reshaped to)
_NORM_AXES = {
    "layer": _layer_axes,
    "batch": _batch_axes,
    "batch_layer_axes": _batch_with_layer_axes,
}


def _backward_dx(norm="layer", keep_mean_term=True, keep_var_term=True, use_gamma=True, ddof=0):
    """A norm's dx with terms dropped on purpose; ``norm`` names its axes (``"layer"``,
    ``"batch"``, or ``"batch_layer_axes"``: BatchNorm's gamma with LayerNorm's statistics);
    ``ddof=1`` takes the unbiased variance.

    The returned ``compute(dy, x, gamma, eps)`` gives ``(dx, dgamma, None)``: dx of x's shape,
    and dgamma, summed over every axis but gamma's, from the same (wrong) x_hat.
    """
    axes_of = dispatch(_NORM_AXES, norm, "backward dx")

    def compute(dy, x, gamma, eps=1e-5):
        axes, channel = axes_of(x, gamma)
        mean, var = _stats(x, axes, ddof)
        inv_std = 1.0 / np.sqrt(var + eps)
        x_hat = (x - mean) * inv_std
        dx_hat = dy * gamma.reshape(channel) if use_gamma else dy
        dx = dx_hat
        if keep_mean_term:
            dx = dx - dx_hat.mean(axis=axes, keepdims=True)
        if keep_var_term:
            dx = dx - x_hat * (dx_hat * x_hat).mean(axis=axes, keepdims=True)
        offset = x.ndim - len(channel)  # gamma's shape is aligned with x's last axes
        summed = tuple(a for a in range(x.ndim) if a < offset or channel[a - offset] == 1)
        dgamma = (dy * x_hat).sum(axis=summed).reshape(gamma.shape)
        return dx * inv_std, dgamma, None

    return compute
