"""Small numpy tools of the BatchNorm chapter: standardizing over chosen axes, GroupNorm and
InstanceNorm by hand, and BatchNorm's input gradient in closed form.

The BatchNorm chapter compares the normalizations by *which numbers share one mean and
variance*. On an ``(N, C, L)`` input (examples, channels, positions):

- BatchNorm pools each channel over the examples and positions: axes ``(0, 2)``;
- LayerNorm over ``(C, L)`` pools everything of one example: axes ``(1, 2)``; the Transformer's
  LayerNorm pools one position's channels: axis ``1``;
- InstanceNorm pools each channel of one example over its positions: axis ``2``;
- GroupNorm splits the ``C`` channels into ``G`` groups of ``C / G`` and pools one group of one
  example over its channels and positions.

:func:`standardize_over` does the first four (without learned scale and shift), :func:`group_norm`
and :func:`instance_norm` the last two, all with the biased variance and ``eps`` inside the square
root, as PyTorch does. :func:`batch_norm_dx` is the compact closed form of the gradient of
training-mode BatchNorm with respect to its input, the formula the chapter derives and checks
against autograd (the library's :func:`addnorm_lib.reference.norms.batch_norm_backward` instead
follows the chain rule one intermediate at a time).

Everything works in the input's float dtype; the functions are pure and modify nothing.
"""

from __future__ import annotations

import numpy as np

__all__ = ["batch_norm_dx", "group_norm", "instance_norm", "standardize_over"]


def standardize_over(x: np.ndarray, axes: tuple[int, ...], eps: float = 1e-5) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` with the mean and *biased* variance taken over ``axes``.

    Args:
        x: float array of any shape.
        axes: the axes whose elements share one mean and variance (each combination of the
            other axes gets its own).
        eps: added to the variance inside the square root.

    Returns:
        an array of the shape and dtype of ``x``.
    """
    mean = x.mean(axis=axes, keepdims=True)  # size 1 along ``axes``
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased: divides by the count
    return (x - mean) / np.sqrt(var + eps)


def group_norm(x: np.ndarray, groups: int, eps: float = 1e-5) -> np.ndarray:
    """GroupNorm without its per-channel scale and shift (``torch.nn.GroupNorm`` at its initial
    ``weight=1``, ``bias=0``).

    Args:
        x: float array of shape ``(N, C)`` or ``(N, C, *spatial)``; ``C`` divisible by ``groups``.
        groups: ``G``, the number of channel groups. ``G = 1`` pools all channels and positions
            of an example (LayerNorm over ``(C, *spatial)``); ``G = C`` pools each channel of an
            example over its positions (InstanceNorm).
        eps: added to the variance inside the square root.

    Returns:
        an array of the shape and dtype of ``x``.

    Raises:
        ValueError: if ``groups`` does not divide ``C``.
    """
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise ValueError(f"group_norm: {groups} groups do not divide {c} channels")
    grouped = x.reshape(n, groups, -1)  # (N, G, C/G * prod(spatial)): one row per group
    return standardize_over(grouped, (2,), eps).reshape(x.shape)


def instance_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """InstanceNorm without scale and shift (``torch.nn.InstanceNorm1d/2d`` defaults).

    Args:
        x: float array of shape ``(N, C, *spatial)`` with at least one spatial axis.
        eps: added to the variance inside the square root.

    Returns:
        an array of the shape and dtype of ``x``: each channel of each example standardized over
        its positions.
    """
    if x.ndim < 3:
        raise ValueError(f"instance_norm: expected (N, C, *spatial), got shape {x.shape}")
    return standardize_over(x, tuple(range(2, x.ndim)), eps)


def batch_norm_dx(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float = 1e-5):
    """Input gradient of training-mode BatchNorm, in closed form.

    With ``m`` values per channel (``N`` times the number of positions), ``x_hat`` the
    standardized input, ``sigma_eps = sqrt(var + eps)`` and ``g_hat = gamma * dy``::

        dx = (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat)) / sigma_eps

    with the means over the examples and positions of each channel. Since ``sum(dy)`` and
    ``sum(dy * x_hat)`` over those values are ``dbeta`` and ``dgamma``, this is also
    ``gamma / sigma_eps * (dy - dbeta / m - x_hat * dgamma / m)``.

    Args:
        dy: upstream gradient, shape of ``x``.
        x: the forward input, float array of shape ``(N, C)`` or ``(N, C, *spatial)``.
        gamma: the per-channel scale, shape ``(C,)``.
        eps: the forward ``eps``.

    Returns:
        ``dx``, shape and dtype of ``x``.
    """
    axes = (0, *range(2, x.ndim))  # the batch and all spatial axes
    cshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)  # (1, C, 1, ...)
    mean = x.mean(axis=axes, keepdims=True)  # (1, C, 1, ...)
    sigma_eps = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)  # (1, C, 1, ...)
    xhat = (x - mean) / sigma_eps  # (N, C, ...)
    ghat = dy * np.reshape(gamma, cshape)  # (N, C, ...)
    mean_ghat = ghat.mean(axis=axes, keepdims=True)  # (1, C, 1, ...)
    mean_ghat_xhat = (ghat * xhat).mean(axis=axes, keepdims=True)  # (1, C, 1, ...)
    return (ghat - mean_ghat - xhat * mean_ghat_xhat) / sigma_eps  # (N, C, ...)
