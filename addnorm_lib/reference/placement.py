"""Where the norm goes: Post-LN and Pre-LN blocks, a Pre-LN stack, and two learning-rate schedules.

- :class:`PostLNBlock`: ``x = norm1(x + self_attn(x)); x = norm2(x + ffn(x))``, the original
  Transformer's "Add & Norm" (Vaswani et al. 2017).
- :class:`PreLNBlock`: ``x = x + self_attn(norm1(x)); x = x + ffn(norm2(x))``: the residual stream
  itself is never normalized, so a Pre-LN stack needs one more norm at its end
  (:class:`PreLNStack`, which mirrors ``torch.nn.TransformerEncoder(layer, num_layers, norm)``).
- :func:`vaswani_lr`: the original Transformer's schedule (linear warm-up, then 1/sqrt(step)).
- :func:`warmup_rsqrt_lr`: the same shape with an explicit peak learning rate.

The blocks take their sublayers as arguments, so any attention or FFN module fits (the course's
:mod:`addnorm_lib.transformer.sublayers`, or torch's). Norm attributes are named ``norm1`` and
``norm2`` as in ``torch.nn.TransformerEncoderLayer``. This module holds the answers of the placement
exercise: graded kernels cannot import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from torch import Tensor, nn

__all__ = [
    "PostLNBlock",
    "PreLNBlock",
    "PreLNStack",
    "vaswani_lr",
    "warmup_rsqrt_lr",
]


def _layer_norm(d_model: int, eps: float, norm: Callable[[int], nn.Module] | None) -> nn.Module:
    return norm(d_model) if norm is not None else nn.LayerNorm(d_model, eps=eps)


class _TwoNormBlock(nn.Module):
    """A layer's two sublayers and its two norms; the subclasses say where the norms go.

    Args:
        self_attn, ffn: sublayers mapping ``(B, T, d_model)`` to ``(B, T, d_model)``.
        d_model: the width C that the norms normalize over.
        layer_norm_eps: eps of the two LayerNorms.
        norm: optional factory ``d_model -> module`` replacing LayerNorm (e.g. an RMSNorm).
    """

    def __init__(
        self,
        self_attn: nn.Module,
        ffn: nn.Module,
        d_model: int,
        layer_norm_eps: float = 1e-5,
        norm: Callable[[int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.self_attn, self.ffn = self_attn, ffn
        self.norm1 = _layer_norm(d_model, layer_norm_eps, norm)
        self.norm2 = _layer_norm(d_model, layer_norm_eps, norm)


class PostLNBlock(_TwoNormBlock):
    """Post-LN: add the sublayer's output to the stream, then normalize the sum.

    Arguments as ``_TwoNormBlock``: ``(self_attn, ffn, d_model, layer_norm_eps=1e-5, norm=None)``.
    """

    def forward(self, x: Tensor) -> Tensor:
        """``norm1(x + self_attn(x))``, then ``norm2(x + ffn(x))``: ``(B, T, C) -> (B, T, C)``."""
        x = self.norm1(x + self.self_attn(x))  # (B, T, C), every token normalized
        return self.norm2(x + self.ffn(x))  # (B, T, C)


class PreLNBlock(_TwoNormBlock):
    """Pre-LN: normalize a copy of the stream for each sublayer; add its output to the raw stream.

    Same arguments as :class:`PostLNBlock`. The output is *not* normalized.
    """

    def forward(self, x: Tensor) -> Tensor:
        """``x + self_attn(norm1(x))``, then ``x + ffn(norm2(x))``: ``(B, T, C) -> (B, T, C)``."""
        x = x + self.self_attn(self.norm1(x))  # (B, T, C), the stream grows
        return x + self.ffn(self.norm2(x))  # (B, T, C)


class PreLNStack(nn.Module):
    """Pre-LN blocks in sequence, then the final norm that the Pre-LN stream needs.

    Args:
        layers: the blocks, applied in order (``(B, T, C) -> (B, T, C)`` each).
        norm: the final norm (``torch.nn.TransformerEncoder``'s ``norm`` argument).
    """

    def __init__(self, layers: Iterable[nn.Module], norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(self, x: Tensor) -> Tensor:
        """The layers in order, then the final norm: ``(B, T, C) -> (B, T, C)``."""
        for layer in self.layers:
            x = layer(x)  # (B, T, C)
        return self.norm(x)


def _check_step(fn: str, step: int, warmup: int) -> None:
    if step < 1:
        raise ValueError(f"{fn}: steps are counted from 1, got step={step}")
    if warmup < 1:
        raise ValueError(f"{fn}: warmup must be at least 1, got {warmup}")


def vaswani_lr(step: int, d_model: int, warmup: int = 4000) -> float:
    """The original Transformer's learning rate (Vaswani et al. 2017, section 5.3).

    ``d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)``: it rises linearly for
    ``warmup`` steps, peaks at ``(d_model * warmup) ** -0.5``, then decays as ``1 / sqrt(step)``.
    ``step`` counts from 1.
    """
    _check_step("vaswani_lr", step, warmup)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def warmup_rsqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to ``peak_lr`` at ``step == warmup``, then ``peak_lr * sqrt(warmup / step)``.

    The Vaswani schedule with its peak given directly: ``vaswani_lr(s, d, w)`` equals
    ``warmup_rsqrt_lr(s, (d * w) ** -0.5, w)``. ``step`` counts from 1.
    """
    _check_step("warmup_rsqrt_lr", step, warmup)
    return peak_lr * min(step / warmup, math.sqrt(warmup / step))
