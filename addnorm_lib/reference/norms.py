"""Plain numpy reference implementations of LayerNorm, BatchNorm and RMSNorm, forward and backward.

These functions are the course's ground truth: short, readable, and checked against PyTorch in
``tests/test_norms.py``. The conventions are PyTorch's:

- **LayerNorm** normalizes each example over its last axis ``C`` (the features):
  ``y = (x - mean) / sqrt(var + eps) * gamma + beta``, with the *biased* variance (divide by ``C``)
  and ``eps`` inside the square root (Ba et al. 2016, eq. 3, plus PyTorch's eps).
- **BatchNorm** normalizes each channel (axis 1) over the batch axis 0 and every axis after 1, so
  ``x`` of shape ``(N, C)`` or ``(N, C, *spatial)``. Training mode normalizes with the batch's
  biased variance but stores the *unbiased* variance (``n / (n - 1)``, ``n = N * prod(spatial)``)
  in the running estimate, with ``new = (1 - momentum) * old + momentum * batch`` (so
  ``momentum=0.1`` keeps 90% of the old value). Eval mode normalizes with the running statistics.
- **RMSNorm** skips the centring: ``y = x / sqrt(mean(x**2) + eps) * weight``, eps *inside* the root
  as in LLaMA and ``torch.nn.RMSNorm`` (the RMSNorm paper's PyTorch module puts it outside, on
  the RMS).

Numerics and dtypes:

- Variances use the two-pass formula ``mean((x - mean)**2)``. The one-pass ``E[x^2] - E[x]^2``
  cancels catastrophically in float32 when the mean is large compared with the spread.
- The sums behind a mean or a variance accumulate in float64 and are rounded back to the working
  dtype; everything else is computed in the working dtype (see ``_mean`` for why).
- Every result has the dtype of ``x``: parameters are cast to ``x.dtype`` before use, so a float64
  ``gamma`` does not upcast a float32 ``x``. float16 inputs are computed in float32 and cast back
  (as PyTorch does on CPU). BatchNorm's running statistics are state, not results: they keep their
  own dtype, like PyTorch's buffers.
- Nothing is modified in place; every function returns new arrays.
- Backward passes *recompute* the statistics from ``x`` instead of taking a cache: a reference
  implementation should be easy to call and impossible to call with a stale cache. (A fast
  implementation would cache ``mean`` and ``rstd`` from the forward pass, as llm.c does.)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "batch_norm",
    "batch_norm_backward",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
]


# ----------------------------------------------------------------------------------------------
# Validation and dtype helpers (bookkeeping, not math)


def _as_float_array(fn: str, name: str, a, min_ndim: int = 0) -> np.ndarray:
    """Return ``a`` as a floating-point ndarray (no copy if it already is one)."""
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{fn}: {name} must be a floating-point array, got dtype {a.dtype}")
    if a.ndim < min_ndim:
        raise ValueError(
            f"{fn}: {name} must be at least {min_ndim}-D, got shape {a.shape} ({a.ndim}-D)"
        )
    return a


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 is computed in float32; float32 and float64 are computed in their own precision."""
    return np.promote_types(dtype, np.float32)


def _check_param(fn: str, name: str, p, x: np.ndarray, axis: int, what: str) -> np.ndarray:
    """Check that a parameter has shape ``(x.shape[axis],)``: one value per feature or channel."""
    p = _as_float_array(fn, name, p)
    size = x.shape[axis]
    if p.shape != (size,):
        raise ValueError(
            f"{fn}: {name} has shape {p.shape} but x has {size} {what} "
            f"(x.shape={x.shape}); expected {name}.shape=({size},)"
        )
    return p


def _check_feature_param(fn: str, name: str, p, x: np.ndarray) -> np.ndarray:
    """A per-feature parameter: shape ``(C,)`` for ``x`` of shape ``(..., C)``."""
    return _check_param(fn, name, p, x, -1, "features on its last axis")


def _check_channel_param(fn: str, name: str, p, x: np.ndarray) -> np.ndarray:
    """A per-channel parameter: shape ``(C,)`` for ``x`` of shape ``(N, C, *)``."""
    return _check_param(fn, name, p, x, 1, "channels on axis 1")


def _check_same_shape(fn: str, name: str, a, x: np.ndarray) -> np.ndarray:
    a = _as_float_array(fn, name, a)
    if a.shape != x.shape:
        raise ValueError(f"{fn}: {name} has shape {a.shape} but x has shape {x.shape}")
    return a


# ----------------------------------------------------------------------------------------------
# Small pure functions: the math


def _bn_axes(ndim: int) -> tuple[int, ...]:
    """Axes BatchNorm reduces over for an ``ndim``-D input: the batch axis and all spatial axes."""
    return (0, *range(2, ndim))


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape ``(1, C, 1, ..., 1)`` that broadcasts a per-channel vector against ``x``."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _mean(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Mean over ``axes`` (kept as size-1 axes), summed in float64, returned in ``a.dtype``.

    numpy sums pairwise only along the contiguous axis of an array and one element at a time
    along any other, and the second way is not accurate enough in float32: the mean of 768
    float32 values near 1e4 (BatchNorm's axis 0, or LayerNorm on a transposed view) comes out
    about 7e-3 off. A float64 accumulator makes the result independent of memory layout.
    """
    return a.mean(axis=axes, keepdims=True, dtype=np.float64).astype(a.dtype, copy=False)


def _mean_var(x: np.ndarray, axes: tuple[int, ...]):
    """Mean, centred ``x`` and *biased* variance over ``axes`` (statistics kept as size-1 axes).

    Two passes: first the mean, then the mean of the squared deviations. The one-pass
    ``mean(x**2) - mean(x)**2`` subtracts two large, nearly equal numbers when ``|mean| >> std``.
    """
    mean = _mean(x, axes)
    xc = x - mean
    var = _mean(xc * xc, axes)
    return mean, xc, var


def _standardize(x: np.ndarray, axes: tuple[int, ...], eps: float):
    """``x_hat = (x - mean) / sqrt(var + eps)`` over ``axes``; also returns the intermediates."""
    _, xc, var = _mean_var(x, axes)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = xc * rstd
    return xhat, xc, var, rstd


def _standardize_backward(
    dxhat: np.ndarray,
    xc: np.ndarray,
    var: np.ndarray,
    rstd: np.ndarray,
    eps: float,
    axes: tuple[int, ...],
) -> np.ndarray:
    """Gradient through ``x_hat = xc * rstd``, ``xc = x - mean``, ``rstd = (var + eps)**-0.5``.

    Shapes are written for LayerNorm, ``x`` of shape ``(..., C)`` reduced over the last axis; for
    BatchNorm read ``(..., 1)`` as ``(1, C, 1, ...)``. ``n`` is the number of reduced elements.
    """
    n = math.prod(xc.shape[a] for a in axes)
    # x_hat = xc * rstd: xc reaches x_hat directly, and again through rstd.
    dxc = dxhat * rstd  # (..., C)   direct path
    drstd = (dxhat * xc).sum(axis=axes, keepdims=True)  # (..., 1)
    # rstd = (var + eps) ** -0.5
    dvar = drstd * -0.5 * (var + eps) ** -1.5  # (..., 1)
    # var = sum(xc**2) / n
    dxc = dxc + dvar * 2.0 * xc / n  # (..., C)   path through var
    # xc = x - mean: x reaches xc directly, and again through the mean.
    dmean = -dxc.sum(axis=axes, keepdims=True)  # (..., 1)
    # mean = sum(x) / n
    dx = dxc + dmean / n  # (..., C)
    return dx


def _rms_normalize(x: np.ndarray, eps: float):
    """``x_hat = x / sqrt(mean(x**2) + eps)`` over the last axis; also returns the intermediates."""
    ms = _mean(x * x, (-1,))  # (..., 1) mean square
    rrms = 1.0 / np.sqrt(ms + eps)  # (..., 1)
    xhat = x * rrms  # (..., C)
    return xhat, ms, rrms


# ----------------------------------------------------------------------------------------------
# LayerNorm


def layer_norm(x, gamma, beta, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm over the last axis.

    Args:
        x: float array of shape ``(..., C)``, at least 1-D.
        gamma: scale of shape ``(C,)``.
        beta: shift of shape ``(C,)``.
        eps: added to the (biased) variance inside the square root.

    Returns:
        ``y`` of shape ``(..., C)`` and dtype ``x.dtype``:
        ``(x - mean) / sqrt(var + eps) * gamma + beta`` with mean and var taken over the last axis.
    """
    fn = "layer_norm"
    x = _as_float_array(fn, "x", x, min_ndim=1)
    gamma = _check_feature_param(fn, "gamma", gamma, x)
    beta = _check_feature_param(fn, "beta", beta, x)
    cdt = _compute_dtype(x.dtype)

    xhat, _, _, _ = _standardize(x.astype(cdt, copy=False), (-1,), eps)  # (..., C)
    y = xhat * gamma.astype(cdt) + beta.astype(cdt)  # (..., C)
    return y.astype(x.dtype, copy=False)


def layer_norm_backward(dy, x, gamma, eps: float = 1e-5):
    """Backward pass of :func:`layer_norm`.

    The statistics (mean, variance) are *recomputed* from ``x`` rather than cached from the forward
    pass, so the function needs nothing but the forward's inputs.

    Args:
        dy: upstream gradient ``dL/dy``, same shape as ``x``.
        x: the forward input, shape ``(..., C)``.
        gamma: the forward scale, shape ``(C,)``.
        eps: the forward eps.

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` of shape ``(..., C)``; ``dgamma`` and ``dbeta`` of shape
        ``(C,)``, summed over all leading axes. All of dtype ``x.dtype``.
    """
    fn = "layer_norm_backward"
    x = _as_float_array(fn, "x", x, min_ndim=1)
    dy = _check_same_shape(fn, "dy", dy, x)
    gamma = _check_feature_param(fn, "gamma", gamma, x)
    out, cdt = x.dtype, _compute_dtype(x.dtype)
    x, dy, gamma = (a.astype(cdt, copy=False) for a in (x, dy, gamma))
    lead = tuple(range(x.ndim - 1))  # every axis but the features

    # forward, recomputed
    xhat, xc, var, rstd = _standardize(x, (-1,), eps)  # (..., C) (..., C) (..., 1) (..., 1)
    # y = xhat * gamma + beta
    dbeta = dy.sum(axis=lead)  # (C,)
    dgamma = (dy * xhat).sum(axis=lead)  # (C,)
    dxhat = dy * gamma  # (..., C)
    # xhat = standardize(x) over the last axis
    dx = _standardize_backward(dxhat, xc, var, rstd, eps, (-1,))  # (..., C)
    return dx.astype(out, copy=False), dgamma.astype(out, copy=False), dbeta.astype(out, copy=False)


# ----------------------------------------------------------------------------------------------
# BatchNorm


def batch_norm(
    x,
    gamma,
    beta,
    running_mean,
    running_var,
    training: bool,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """BatchNorm over axis 0 and all axes after 1, one statistic per channel (axis 1).

    Args:
        x: float array of shape ``(N, C)`` or ``(N, C, *spatial)``.
        gamma, beta: per-channel scale and shift, shape ``(C,)``.
        running_mean, running_var: running estimates, shape ``(C,)``; never modified.
        training: ``True`` normalizes with the batch statistics and returns updated running
            estimates; ``False`` normalizes with ``running_mean``/``running_var`` and returns
            copies of them unchanged.
        momentum: weight of the new batch: ``new = (1 - momentum) * old + momentum * batch``.
            A float is required (PyTorch's ``momentum=None``, a cumulative average, needs a
            batch counter; :class:`addnorm_lib.reference.modules.BatchNorm1d` implements it).
        eps: added to the variance inside the square root.

    Returns:
        ``(y, new_running_mean, new_running_var)``: ``y`` has the shape and dtype of ``x``; the
        running estimates have shape ``(C,)`` and keep their own dtypes. In training mode the
        running variance is updated with the *unbiased* batch variance ``var * n / (n - 1)``,
        ``n = N * prod(spatial)``, while ``y`` is normalized with the biased one.

    Raises:
        ValueError: on shape mismatches, ``momentum=None``, or training with one value per channel.
    """
    fn = "batch_norm"
    x = _as_float_array(fn, "x", x, min_ndim=2)
    gamma = _check_channel_param(fn, "gamma", gamma, x)
    beta = _check_channel_param(fn, "beta", beta, x)
    running_mean = _check_channel_param(fn, "running_mean", running_mean, x)
    running_var = _check_channel_param(fn, "running_var", running_var, x)
    if momentum is None:
        raise ValueError(
            "batch_norm: momentum=None (a cumulative moving average) is "
            "not supported by this reference: it needs a count of batches "
            "seen; pass a float such as 0.1, or use "
            "addnorm_lib.reference.modules.BatchNorm1d(momentum=None)"
        )
    out, cdt = x.dtype, _compute_dtype(x.dtype)
    axes = _bn_axes(x.ndim)
    n = math.prod(x.shape[a] for a in axes)  # values per channel: N * prod(spatial)
    cshape = _channel_shape(x)  # (1, C, 1, ...)
    xf = x.astype(cdt, copy=False)  # (N, C, ...)
    g = gamma.astype(cdt).reshape(cshape)  # (1, C, 1, ...)
    b = beta.astype(cdt).reshape(cshape)  # (1, C, 1, ...)

    if training:
        if n <= 1:
            raise ValueError(
                "batch_norm: expected more than 1 value per channel when "
                f"training, got input of shape {x.shape}"
            )
        mean, _, var = _mean_var(xf, axes)  # (1, C, 1, ...) each; var is biased
        var_unbiased = var.reshape(-1) * (n / (n - 1))  # (C,)
        new_mean = (1.0 - momentum) * running_mean + momentum * mean.reshape(-1)  # (C,)
        new_var = (1.0 - momentum) * running_var + momentum * var_unbiased  # (C,)
        new_mean = new_mean.astype(running_mean.dtype, copy=False)
        new_var = new_var.astype(running_var.dtype, copy=False)
    else:
        mean = running_mean.astype(cdt).reshape(cshape)  # (1, C, 1, ...)
        var = running_var.astype(cdt).reshape(cshape)  # (1, C, 1, ...)
        new_mean, new_var = running_mean.copy(), running_var.copy()

    xhat = (xf - mean) / np.sqrt(var + eps)  # (N, C, ...)
    y = xhat * g + b  # (N, C, ...)
    return y.astype(out, copy=False), new_mean, new_var


def batch_norm_backward(dy, x, gamma, eps: float = 1e-5):
    """Backward pass of :func:`batch_norm` in training mode (normalized with batch statistics).

    The batch statistics are *recomputed* from ``x`` rather than cached. (In eval mode BatchNorm
    is a fixed per-channel affine map, with gradient ``dy * gamma / sqrt(running_var + eps)``.)

    Args:
        dy: upstream gradient, same shape as ``x``.
        x: the forward input, shape ``(N, C)`` or ``(N, C, *spatial)``.
        gamma: the forward scale, shape ``(C,)``.
        eps: the forward eps.

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` shaped like ``x``; ``dgamma`` and ``dbeta`` of shape
        ``(C,)``, summed over the batch and spatial axes. All of dtype ``x.dtype``.
    """
    fn = "batch_norm_backward"
    x = _as_float_array(fn, "x", x, min_ndim=2)
    dy = _check_same_shape(fn, "dy", dy, x)
    gamma = _check_channel_param(fn, "gamma", gamma, x)
    out, cdt = x.dtype, _compute_dtype(x.dtype)
    x, dy = x.astype(cdt, copy=False), dy.astype(cdt, copy=False)
    axes = _bn_axes(x.ndim)
    g = gamma.astype(cdt).reshape(_channel_shape(x))  # (1, C, 1, ...)

    # forward, recomputed
    xhat, xc, var, rstd = _standardize(x, axes, eps)  # (N, C, ...), stats (1, C, 1, ...)
    # y = xhat * gamma + beta
    dbeta = dy.sum(axis=axes)  # (C,)
    dgamma = (dy * xhat).sum(axis=axes)  # (C,)
    dxhat = dy * g  # (N, C, ...)
    # xhat = standardize(x) over the batch and spatial axes
    dx = _standardize_backward(dxhat, xc, var, rstd, eps, axes)  # (N, C, ...)
    return dx.astype(out, copy=False), dgamma.astype(out, copy=False), dbeta.astype(out, copy=False)


# ----------------------------------------------------------------------------------------------
# RMSNorm


def rms_norm(x, weight, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm over the last axis, eps inside the square root (LLaMA's and PyTorch's placement).

    Args:
        x: float array of shape ``(..., C)``, at least 1-D.
        weight: per-feature gain of shape ``(C,)``.
        eps: added to the mean square inside the square root.

    Returns:
        ``y = x / sqrt(mean(x**2) + eps) * weight``, shape ``(..., C)``, dtype ``x.dtype``.
    """
    fn = "rms_norm"
    x = _as_float_array(fn, "x", x, min_ndim=1)
    weight = _check_feature_param(fn, "weight", weight, x)
    cdt = _compute_dtype(x.dtype)

    xhat, _, _ = _rms_normalize(x.astype(cdt, copy=False), eps)  # (..., C)
    y = xhat * weight.astype(cdt)  # (..., C)
    return y.astype(x.dtype, copy=False)


def rms_norm_backward(dy, x, weight, eps: float = 1e-6):
    """Backward pass of :func:`rms_norm`; the mean square is *recomputed* from ``x``.

    Args:
        dy: upstream gradient, same shape as ``x``.
        x: the forward input, shape ``(..., C)``.
        weight: the forward gain, shape ``(C,)``.
        eps: the forward eps.

    Returns:
        ``(dx, dweight)``: ``dx`` of shape ``(..., C)``, ``dweight`` of shape ``(C,)`` summed over
        all leading axes, both of dtype ``x.dtype``.
    """
    fn = "rms_norm_backward"
    x = _as_float_array(fn, "x", x, min_ndim=1)
    dy = _check_same_shape(fn, "dy", dy, x)
    weight = _check_feature_param(fn, "weight", weight, x)
    out, cdt = x.dtype, _compute_dtype(x.dtype)
    x, dy, weight = (a.astype(cdt, copy=False) for a in (x, dy, weight))
    lead = tuple(range(x.ndim - 1))
    c = x.shape[-1]

    # forward, recomputed
    xhat, ms, rrms = _rms_normalize(x, eps)  # (..., C) (..., 1) (..., 1)
    # y = xhat * weight
    dweight = (dy * xhat).sum(axis=lead)  # (C,)
    dxhat = dy * weight  # (..., C)
    # xhat = x * rrms: x reaches xhat directly, and again through rrms.
    dx = dxhat * rrms  # (..., C)   direct path
    drrms = (dxhat * x).sum(axis=-1, keepdims=True)  # (..., 1)
    # rrms = (ms + eps) ** -0.5
    dms = drrms * -0.5 * (ms + eps) ** -1.5  # (..., 1)
    # ms = sum(x**2) / C
    dx = dx + dms * 2.0 * x / c  # (..., C)   path through ms
    return dx.astype(out, copy=False), dweight.astype(out, copy=False)


def rms_norm_eps_outside(x, weight, eps: float = 1e-8) -> np.ndarray:
    """RMSNorm with eps *outside* the root, ``x / (sqrt(mean(x**2)) + eps) * weight``.

    This is the placement of the RMSNorm paper's PyTorch module (default eps 1e-8), kept
    for comparison; :func:`rms_norm` (eps inside) is the one LLaMA and ``torch.nn.RMSNorm`` use.
    Shapes and dtype as :func:`rms_norm`.
    """
    fn = "rms_norm_eps_outside"
    x = _as_float_array(fn, "x", x, min_ndim=1)
    weight = _check_feature_param(fn, "weight", weight, x)
    xc = x.astype(_compute_dtype(x.dtype), copy=False)
    rms = np.sqrt(_mean(xc * xc, (-1,)))  # (..., 1)
    return (xc / (rms + eps) * weight).astype(x.dtype, copy=False)


def partial_rms_norm(x, weight, p: float, eps: float = 1e-8) -> np.ndarray:
    """pRMSNorm: RMSNorm whose RMS is estimated from the first ``ceil(p * C)`` features only.

    Args:
        x: float array ``(..., C)``; weight: ``(C,)``.
        p: the fraction of features used for the estimate, ``0 < p <= 1`` (``p = 1`` is RMSNorm).
        eps: added outside the root, as in the paper's code.

    Returns:
        ``x / (rms(x[..., :k]) + eps) * weight``, shape ``(..., C)``, dtype ``x.dtype``: every
        feature is rescaled, but only ``k`` of them are read to compute the scale.
    """
    fn = "partial_rms_norm"
    x = _as_float_array(fn, "x", x, min_ndim=1)
    weight = _check_feature_param(fn, "weight", weight, x)
    if not 0.0 < p <= 1.0:
        raise ValueError(f"{fn}: p must be in (0, 1], got {p!r}")
    k = math.ceil(p * x.shape[-1])
    xc = x.astype(_compute_dtype(x.dtype), copy=False)
    head = xc[..., :k]  # (..., k)
    rms = np.sqrt(_mean(head * head, (-1,)))  # (..., 1)
    return (xc / (rms + eps) * weight).astype(x.dtype, copy=False)
