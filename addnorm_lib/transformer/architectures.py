"""Norm placements of well-known models beyond Post-LN and Pre-LN, built from swappable sublayers.

- :class:`SandwichBlock` (Gemma 2/3): a norm before *and* after each sublayer, then the add.
- :class:`OutputNormBlock` (OLMo 2): no norm at the sublayer's input; the sublayer's output is
  normalized before the residual add.
- :class:`ParallelBlock` (PaLM): attention and FFN read the same normalized input, in parallel,
  and both outputs are added to the stream: ``x + attn(LN(x)) + ffn(LN(x))``.
- :class:`OffsetRMSNorm`: Gemma's RMSNorm, which scales by ``1 + weight`` (weight starts at 0).

Post-LN and Pre-LN themselves are in :mod:`addnorm_lib.reference.placement` (hidden from graded
kernels, because they are the placement exercise's answers); this module does not import it, so a
graded kernel may use these blocks freely. Norm attributes are named after what they normalize; the
models' own parameter names are in the docstrings (see the naming trap in the models chapter).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["OffsetRMSNorm", "OutputNormBlock", "ParallelBlock", "SandwichBlock"]

NormFactory = Callable[[int], nn.Module]


def _rms(d_model: int) -> nn.Module:
    return nn.RMSNorm(d_model)


class OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm: ``x / sqrt(mean(x**2) + eps) * (1 + weight)``, computed in float32.

    ``weight`` (shape ``(d_model,)``) starts at zero, so a new norm scales by exactly 1.
    Input ``(*, d_model)``; output of the same shape and dtype.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """``(*, d_model) -> (*, d_model)``, in float32 for half inputs, cast back to x's dtype."""
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # (*, C)
        y = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight)).to(x.dtype)


class SandwichBlock(nn.Module):
    """Gemma 2/3's "sandwich": a norm before and after each sublayer, then the add.

    ``x = x + post_attn_norm(self_attn(pre_attn_norm(x)))``, and the same around the FFN. In
    Gemma's code the norm after the attention is the one named ``post_attention_layernorm``.
    ``norm`` builds each of the four norms (default :class:`OffsetRMSNorm`).
    """

    def __init__(
        self, self_attn: nn.Module, ffn: nn.Module, d_model: int, norm: NormFactory | None = None
    ) -> None:
        super().__init__()
        norm = norm or OffsetRMSNorm
        self.self_attn, self.ffn = self_attn, ffn
        self.pre_attn_norm, self.post_attn_norm = norm(d_model), norm(d_model)
        self.pre_ffn_norm, self.post_ffn_norm = norm(d_model), norm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        """The sandwich around attention, then around the FFN: ``(B, T, C) -> (B, T, C)``."""
        x = x + self.post_attn_norm(self.self_attn(self.pre_attn_norm(x)))  # (B, T, C)
        return x + self.post_ffn_norm(self.ffn(self.pre_ffn_norm(x)))  # (B, T, C)


class OutputNormBlock(nn.Module):
    """OLMo 2: ``x = x + attn_norm(self_attn(x))``; ``x = x + ffn_norm(ffn(x))``.

    No norm at the sublayer's input; in OLMo 2's code the attention's output norm is the one named
    ``post_attention_layernorm``. OLMo 2 also normalizes queries and keys inside its attention
    (QK-norm), not modelled here. ``norm`` builds each norm (default ``torch.nn.RMSNorm``).
    """

    def __init__(
        self, self_attn: nn.Module, ffn: nn.Module, d_model: int, norm: NormFactory | None = None
    ) -> None:
        super().__init__()
        norm = norm or _rms
        self.self_attn, self.ffn = self_attn, ffn
        self.attn_norm, self.ffn_norm = norm(d_model), norm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        """Add the normalized attention output, then the FFN's: ``(B, T, C) -> (B, T, C)``."""
        x = x + self.attn_norm(self.self_attn(x))  # (B, T, C)
        return x + self.ffn_norm(self.ffn(x))  # (B, T, C)


class ParallelBlock(nn.Module):
    """PaLM's parallel block: ``y = x + self_attn(norm(x)) + ffn(norm(x))``, one shared norm.

    ``norm`` builds the norm (default: a LayerNorm without bias, as PaLM's).
    """

    def __init__(
        self, self_attn: nn.Module, ffn: nn.Module, d_model: int, norm: NormFactory | None = None
    ) -> None:
        super().__init__()
        self.self_attn, self.ffn = self_attn, ffn
        self.norm = norm(d_model) if norm else nn.LayerNorm(d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``x + self_attn(norm(x)) + ffn(norm(x))``: ``(B, T, C) -> (B, T, C)``."""
        h = self.norm(x)  # (B, T, C), read by both sublayers
        return x + self.self_attn(h) + self.ffn(h)
