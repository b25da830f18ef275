"""Torch modules for LayerNorm, BatchNorm1d and RMSNorm, built on hand-written math.

The modules mirror ``torch.nn.LayerNorm``, ``torch.nn.BatchNorm1d`` and ``torch.nn.RMSNorm``: same
constructor arguments, same parameter and buffer names (``weight``, ``bias``, ``running_mean``,
``running_var``, ``num_batches_tracked``), same ``extra_repr``, so a ``state_dict`` moves between a
module here and its ``torch.nn`` twin unchanged (``strict=True``, both directions).

What differs is where the arithmetic lives: in the small pure functions below (:func:`layer_norm`,
:func:`batch_norm_stats`, :func:`normalize_affine`, :func:`rms_norm`), written with elementary
tensor operations and differentiated by autograd. Nothing here calls ``torch.nn.functional``'s
``layer_norm``, ``batch_norm`` or ``rms_norm``. The classes only do the bookkeeping: parameters,
buffers, the train/eval switch and the running averages.

Conventions (checked against PyTorch in ``tests/reference/test_modules.py``):

- Variances are biased (divide by ``n``) and computed in two passes, ``mean((x - mean)**2)``.
- float16 and bfloat16 inputs are computed in float32 and the result is cast back to the input's
  dtype, as PyTorch does; every output has the input's dtype.
- BatchNorm's mode is decided by ``self.training`` alone (not by whether autograd is recording).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "BatchNorm1d",
    "LayerNorm",
    "RMSNorm",
    "batch_norm_stats",
    "layer_norm",
    "llama_rms_norm",
    "normalize_affine",
    "rms_norm",
]


# ----------------------------------------------------------------------------------------------
# Small pure functions: the math


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are computed in float32; float32 and float64 in their own precision."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_trailing_shape(fn: str, x: Tensor, normalized_shape: tuple[int, ...]) -> None:
    k = len(normalized_shape)
    if x.dim() < k or tuple(x.shape[x.dim() - k :]) != normalized_shape:
        raise ValueError(
            f"{fn}: expected input with trailing shape {normalized_shape}, "
            f"got input of shape {tuple(x.shape)}"
        )


def layer_norm(
    x: Tensor,
    normalized_shape: tuple[int, ...],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """LayerNorm over the last ``len(normalized_shape)`` dims of ``x``.

    Args:
        x: tensor of shape ``(*, *normalized_shape)``.
        normalized_shape: the trailing shape to normalize over, e.g. ``(C,)``.
        weight, bias: optional tensors of shape ``normalized_shape``.
        eps: added to the biased variance inside the square root.

    Returns:
        ``(x - mean) / sqrt(var + eps) * weight + bias``, same shape and dtype as ``x``.
    """
    _check_trailing_shape("layer_norm", x, normalized_shape)
    dims = tuple(range(-len(normalized_shape), 0))
    xf = x.to(_compute_dtype(x.dtype))  # (*, *S)
    mean = xf.mean(dim=dims, keepdim=True)  # (*, 1...)
    xc = xf - mean  # (*, *S)
    var = (xc * xc).mean(dim=dims, keepdim=True)  # (*, 1...) two-pass, biased
    y = xc * torch.rsqrt(var + eps)  # (*, *S)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype)


def batch_norm_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel mean and *biased* variance of ``x`` of shape ``(N, C)`` or ``(N, C, L)``.

    Returns:
        ``(mean, var)``, each of shape ``(C,)`` in the computation dtype (float32 for half inputs).
    """
    dims = (0, *range(2, x.dim()))  # batch and length axes
    xf = x.to(_compute_dtype(x.dtype))
    mean = xf.mean(dim=dims, keepdim=True)  # (1, C, 1...)
    xc = xf - mean  # (N, C, L...)
    var = (xc * xc).mean(dim=dims)  # (C,) two-pass, biased
    return mean.flatten(), var


def normalize_affine(
    x: Tensor,
    mean: Tensor,
    var: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` with per-channel ``(C,)`` statistics.

    Args:
        x: tensor of shape ``(N, C)`` or ``(N, C, L)``.
        mean, var: per-channel statistics, shape ``(C,)``.
        weight, bias: optional per-channel tensors of shape ``(C,)``.
        eps: added to ``var`` inside the square root.

    Returns:
        A tensor of the shape and dtype of ``x``.
    """
    shape = (1, -1) + (1,) * (x.dim() - 2)  # broadcast (C,) against (N, C, L...)
    xf = x.to(_compute_dtype(x.dtype))
    y = (xf - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)  # (N, C, L...)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y.to(x.dtype)


def rms_norm(
    x: Tensor,
    normalized_shape: tuple[int, ...],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """RMSNorm over the last ``len(normalized_shape)`` dims, eps inside the square root.

    ``y = x / sqrt(mean(x**2) + eps) * weight``. Half-precision inputs are upcast to float32, and
    the whole expression, *including the multiplication by weight*, is evaluated in float32 before
    one cast back to the input dtype. That is what ``torch.nn.functional.rms_norm`` does (its
    decomposition ``_fused_rms_norm`` in torch 2.13), and it reproduces it bit for bit on CPU.
    LLaMA's code instead casts the normalized ``x`` back first and multiplies by ``weight`` in the
    input dtype: one extra rounding, a difference of about one unit in the last place.

    ``eps=None`` means ``torch.finfo(d).eps`` where ``d`` is the *computation* dtype: float32's eps
    (about 1.2e-7) for float16, bfloat16 and float32 inputs, float64's for float64. This again
    follows PyTorch's implementation. (The torch.nn.RMSNorm docstring says ``finfo(x.dtype)``,
    which for float16 would be about 1e-3, big enough to change the output of small inputs.)

    Args:
        x: tensor of shape ``(*, *normalized_shape)``.
        normalized_shape: the trailing shape to normalize over.
        weight: optional gain of shape ``normalized_shape``.
        eps: added to the mean square inside the root; ``None`` for the dtype default above.

    Returns:
        A tensor of the shape and dtype of ``x``.
    """
    _check_trailing_shape("rms_norm", x, normalized_shape)
    dims = tuple(range(-len(normalized_shape), 0))
    cdt = _compute_dtype(x.dtype)
    if eps is None:
        eps = torch.finfo(cdt).eps
    xf = x.to(cdt)  # (*, *S)
    ms = (xf * xf).mean(dim=dims, keepdim=True)  # (*, 1...) mean square
    y = xf * torch.rsqrt(ms + eps)  # (*, *S)
    if weight is not None:
        y = y * weight  # still in float32 for half inputs (type promotion)
    return y.to(x.dtype)


# ----------------------------------------------------------------------------------------------
# Modules: the bookkeeping


def _as_shape(normalized_shape: int | Sequence[int] | torch.Size) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


def _new_parameter(wanted: bool, shape: tuple[int, ...], device, dtype) -> nn.Parameter | None:
    """An uninitialized parameter of ``shape``, or None (registered as None, as torch.nn does)."""
    return nn.Parameter(torch.empty(shape, device=device, dtype=dtype)) if wanted else None


class LayerNorm(nn.Module):
    """Drop-in twin of ``torch.nn.LayerNorm`` (same arguments, parameters and state_dict keys).

    Input ``(*, *normalized_shape)``; output of the same shape and dtype. ``weight`` (ones) and
    ``bias`` (zeros) have shape ``normalized_shape``; ``bias=False`` registers ``bias`` as ``None``
    and ``elementwise_affine=False`` registers both as ``None``.
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int] | torch.Size,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        shape = self.normalized_shape
        self.register_parameter("weight", _new_parameter(elementwise_affine, shape, device, dtype))
        self.register_parameter(
            "bias", _new_parameter(elementwise_affine and bias, shape, device, dtype)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight to ones and bias to zeros (those that exist), as torch.nn.LayerNorm."""
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        """LayerNorm over the trailing ``normalized_shape``: ``(*, *S) -> (*, *S)``, x's dtype."""
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        """The constructor arguments, as torch.nn.LayerNorm shows them."""
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


def _check_eps(eps: float, batch_statistics: bool) -> None:
    """torch's checks of BatchNorm's eps: positive with batch statistics, else non-negative."""
    if batch_statistics and eps <= 0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    if eps < 0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")


class BatchNorm1d(nn.Module):
    """Drop-in twin of ``torch.nn.BatchNorm1d`` for inputs ``(N, C)`` or ``(N, C, L)``.

    Parameters ``weight`` (ones) and ``bias`` (zeros), shape ``(C,)``, if ``affine``. Buffers
    ``running_mean`` (zeros), ``running_var`` (ones) and ``num_batches_tracked`` (a long scalar) if
    ``track_running_stats``, else all three are ``None``.

    - Training (``self.training``): normalize with the batch mean and biased variance; if tracking,
      increment ``num_batches_tracked`` and blend the batch mean and the *unbiased* batch variance
      into the running estimates with factor ``momentum`` (``None``: ``1 / num_batches_tracked``,
      a cumulative average of all batches so far).
    - Eval: normalize with the running estimates, or with batch statistics if not tracking.
    """

    _version = 2  # torch's BatchNorm state_dict version (2 = has num_batches_tracked)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = nn.Parameter(torch.empty(num_features, **factory_kwargs))
            if bias:
                self.bias = nn.Parameter(torch.empty(num_features, **factory_kwargs))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **factory_kwargs))
            self.register_buffer("running_var", torch.ones(num_features, **factory_kwargs))
            self.register_buffer(
                "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device)
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """running_mean to 0, running_var to 1, num_batches_tracked to 0 (if tracked)."""
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """Reset the running statistics, then weight to ones and bias to zeros."""
        self.reset_running_stats()
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _check_input(self, x: Tensor) -> None:
        if x.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {x.dim()}D input)")
        if x.shape[1] != self.num_features:
            raise ValueError(
                f"BatchNorm1d: expected {self.num_features} channels on dim 1, "
                f"got input of shape {tuple(x.shape)}"
            )

    def forward(self, x: Tensor) -> Tensor:
        """Normalize each channel: ``(N, C)`` or ``(N, C, L)`` -> same shape and dtype.

        In training mode, also updates the running estimates (see the class docstring).
        """
        self._check_input(x)
        use_batch_stats = self.training or self.running_mean is None
        _check_eps(self.eps, use_batch_stats)
        if not use_batch_stats:
            return normalize_affine(
                x, self.running_mean, self.running_var, self.weight, self.bias, self.eps
            )

        n = x.shape[0] * (x.shape[2] if x.dim() == 3 else 1)  # values per channel: N * L
        if n == 1:  # as torch, also in eval mode without running statistics
            raise ValueError(
                "Expected more than 1 value per channel when training, "
                f"got input size {tuple(x.shape)}"
            )
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)  # as torch: an empty batch counts too
        if n == 0:  # an empty batch: an empty output, the estimates as they were
            return x.clone()
        mean, var = batch_norm_stats(x)  # (C,), (C,) biased
        if self.training and self.track_running_stats:
            self._update_running_stats(mean, var, n)
        return normalize_affine(x, mean, var, self.weight, self.bias, self.eps)

    def _update_running_stats(self, mean: Tensor, var: Tensor, n: int) -> None:
        with torch.no_grad():
            if self.momentum is None:  # cumulative average over all batches so far
                factor = 1.0 / float(self.num_batches_tracked)
            else:
                factor = self.momentum
            var_unbiased = var * (n / (n - 1))  # (C,)
            # new = (1 - factor) * old + factor * batch
            self.running_mean.mul_(1.0 - factor).add_(factor * mean.detach())
            self.running_var.mul_(1.0 - factor).add_(factor * var_unbiased.detach())

    def extra_repr(self) -> str:
        """The constructor arguments, as torch.nn.BatchNorm1d shows them."""
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class RMSNorm(nn.Module):
    """Drop-in twin of ``torch.nn.RMSNorm`` (same arguments, parameter and state_dict key).

    Input ``(*, *normalized_shape)``; output of the same shape and dtype. ``weight`` (ones) has
    shape ``normalized_shape``; there is no bias. See :func:`rms_norm` for ``eps=None`` and for
    how half-precision inputs are handled.
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int] | torch.Size,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        weight = _new_parameter(elementwise_affine, self.normalized_shape, device, dtype)
        self.register_parameter("weight", weight)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight to ones (if there is one), as torch.nn.RMSNorm."""
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        """RMSNorm over the trailing ``normalized_shape``: ``(*, *S) -> (*, *S)``, x's dtype."""
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        """The constructor arguments, as torch.nn.RMSNorm shows them."""
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


# ----------------------------------------------------------------------------------------------
# RMSNorm as LLaMA writes it (RMSNorm chapter)


def llama_rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last dim, computed the way LLaMA's ``RMSNorm`` module does.

    ``y = (x_f * rsqrt(mean(x_f**2) + eps)).to(x.dtype) * weight`` with ``x_f = x.float()``: the
    normalization is computed in float32 (for float16/bfloat16 inputs this avoids overflow of
    ``x**2`` and the coarse rounding of half precision), cast back to the input's dtype, and only
    *then* multiplied by ``weight``. :func:`rms_norm` (and ``torch.nn.RMSNorm``) multiply by
    ``weight`` before casting back, so the two can differ by one rounding of the output dtype.
    LLaMA's class default is ``eps=1e-6``; Llama 2 checkpoints use ``1e-5``.

    Args:
        x: tensor of shape ``(*, C)``, any floating dtype. float64 stays float64 (``x.float()``
            would round it; this is the only departure from LLaMA's code, which never sees float64).
        weight: gain of shape ``(C,)``.
        eps: added to the mean square inside the root.

    Returns:
        A tensor of shape ``(*, C)``. Its dtype is ``torch.promote_types(x.dtype, weight.dtype)``:
        ``x.dtype`` when ``weight`` has the input's dtype, as in a half-precision model.
    """
    _check_trailing_shape("llama_rms_norm", x, tuple(weight.shape))
    xf = x.to(_compute_dtype(x.dtype))  # (*, C) float32 for half inputs
    ms = (xf * xf).mean(dim=-1, keepdim=True)  # (*, 1) mean square
    normed = (xf * torch.rsqrt(ms + eps)).to(x.dtype)  # (*, C) back to the input's dtype
    return normed * weight  # (*, C)
