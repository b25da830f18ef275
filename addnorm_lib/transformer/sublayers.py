"""The two sublayers of a Transformer layer, as small torch modules: self-attention and an FFN.

They are what the residual and norm recipes of the later chapters wrap: DeepNorm
(:mod:`addnorm_lib.reference.deepnorm`) and the Pre-LN/Post-LN placements. The projections are
separate ``nn.Linear`` modules named as in the DeepNet and fairseq code (``q_proj``, ``k_proj``,
``v_proj``, ``out_proj``; ``fc1``, ``fc2``), so that an initializer can pick weights out by name.
(``torch.nn.MultiheadAttention`` packs q, k and v into one ``in_proj_weight``, which hides them.)

Weights start as Xavier-normal (gain 1) and biases as zero: DeepNet's initialization before its
beta scaling.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib import lookup

__all__ = ["FeedForward", "LayerParts", "SelfAttention", "xavier_init_"]


def xavier_init_(module: nn.Module) -> nn.Module:
    """Xavier-normal (gain 1) weights and zero biases for every ``nn.Linear`` in ``module``."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.xavier_normal_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module


def _check_input(name: str, x: Tensor, embed_dim: int) -> None:
    if x.dim() != 3 or x.shape[-1] != embed_dim:
        raise ValueError(
            f"{name}: expected input of shape (batch, tokens, {embed_dim}), got {tuple(x.shape)}"
        )


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention, batch first.

    Input and output ``(B, T, embed_dim)``. ``causal=True`` masks future tokens (a decoder).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, bias: bool = True, causal: bool = False
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"SelfAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                f"({num_heads})"
            )
        self.embed_dim, self.num_heads, self.causal = embed_dim, num_heads, causal
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        xavier_init_(self)

    def _heads(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, -1).transpose(1, 2)  # (B, H, T, C/H)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the T tokens of each sequence: ``(B, T, embed_dim) -> (B, T, embed_dim)``."""
        _check_input("SelfAttention", x, self.embed_dim)
        q, k, v = (self._heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (B, H, T, C/H)
        mixed = mixed.transpose(1, 2).reshape(x.shape)  # (B, T, C)
        return self.out_proj(mixed)

    def extra_repr(self) -> str:
        """The sizes and the causal flag, shown in the module's repr."""
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, causal={self.causal}"


class FeedForward(nn.Module):
    """Position-wise FFN ``fc2(act(fc1(x)))``.

    ``(*, d_model) -> (*, dim_feedforward) -> (*, d_model)``; ``activation`` is gelu or relu.
    """

    def __init__(
        self, d_model: int, dim_feedforward: int, activation: str = "gelu", bias: bool = True
    ) -> None:
        super().__init__()
        act = lookup({"gelu": nn.GELU, "relu": nn.ReLU}, activation, "FeedForward: activation")
        self.fc1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.activation = act()
        self.fc2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        xavier_init_(self)

    def forward(self, x: Tensor) -> Tensor:
        """``fc2(act(fc1(x)))``, token by token: ``(*, d_model) -> (*, d_model)``."""
        return self.fc2(self.activation(self.fc1(x)))  # (*, d_model)


class LayerParts(nn.Module):
    """The parameters of one Transformer layer, without a forward: the residual recipe is separate.

    Attributes ``self_attn`` (:class:`SelfAttention`), ``attn_norm`` (``nn.LayerNorm``), ``ffn``
    (:class:`FeedForward`) and ``ffn_norm`` (``nn.LayerNorm``), named as in DeepNet's code. Post-LN,
    Pre-LN and DeepNorm layers differ only in how ``forward`` combines them, so they subclass this.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        causal: bool = False,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d_model, nhead, causal=causal)
        self.attn_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.ffn = FeedForward(d_model, dim_feedforward)
        self.ffn_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
