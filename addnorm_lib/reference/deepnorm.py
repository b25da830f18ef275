"""DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), for reference.

A Post-LN layer computes ``x + G(x)`` and normalizes. DeepNorm changes two things:

1. the residual is *up-weighted* before the norm: ``x_next = LN(alpha * x + G(x))``, alpha > 1
   (:func:`deepnorm_residual`);
2. at initialization, the weights of the FFN and of the attention's value and output projections
   are scaled *down* by beta < 1; the query and key projections are left alone
   (:func:`deepnorm_init_`).

alpha and beta depend on the architecture and the number of layers (:func:`deepnorm_constants`).
With ``alpha = beta = 1`` a :class:`DeepNormLayer` is an ordinary Post-LN layer, which is how the
DeepNorm chapter builds its baseline.

This module holds the answers of the DeepNorm exercise: graded kernels cannot import it.
"""

from __future__ import annotations

from torch import Tensor, nn

from addnorm_lib.transformer.sublayers import LayerParts

__all__ = [
    "ARCHITECTURES",
    "DEEPNORM_SCALED",
    "DeepNormEncoder",
    "DeepNormLayer",
    "deepnorm_constants",
    "deepnorm_init_",
    "deepnorm_residual",
]

ARCHITECTURES = ("encoder-only", "decoder-only", "encoder-decoder")

#: The weights DeepNet scales by beta, as module paths inside a :class:`DeepNormLayer`.
DEEPNORM_SCALED = ("ffn.fc1", "ffn.fc2", "self_attn.v_proj", "self_attn.out_proj")


def _check_layers(name: str, value, architecture: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"deepnorm_constants: a {architecture} model needs {name} >= 1 (an int), got {value!r}"
        )
    return value


def deepnorm_constants(
    architecture: str,
    num_encoder_layers: int = 0,
    num_decoder_layers: int = 0,
    stack: str | None = None,
) -> tuple[float, float]:
    """DeepNorm's ``(alpha, beta)`` for one stack of layers (DeepNet, Figure 2(b); derived in its
    section 4.3 and appendices B-C).

    Args:
        architecture: ``"encoder-only"`` (uses N = ``num_encoder_layers``), ``"decoder-only"``
            (uses M = ``num_decoder_layers``) or ``"encoder-decoder"`` (uses both).
        num_encoder_layers, num_decoder_layers: N and M, as in ``torch.nn.Transformer``.
        stack: ``"encoder"`` or ``"decoder"``: which stack of an encoder-decoder model the
            constants are for. Optional for the other two architectures, which have one stack.

    Returns:
        ``(alpha, beta)`` as Python floats:

        ======================== ====================== ========================
        architecture, stack      alpha                  beta
        ======================== ====================== ========================
        encoder-only             (2N)^(1/4)             (8N)^(-1/4)
        decoder-only             (2M)^(1/4)             (8M)^(-1/4)
        encoder-decoder, encoder 0.81 (N^4 M)^(1/16)    0.87 (N^4 M)^(-1/16)
        encoder-decoder, decoder (3M)^(1/4)             (12M)^(-1/4)
        ======================== ====================== ========================
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"deepnorm_constants: architecture must be one of {ARCHITECTURES}, got {architecture!r}"
        )
    stacks = {"encoder-only": ("encoder",), "decoder-only": ("decoder",)}.get(
        architecture, ("encoder", "decoder")
    )
    if stack is None and len(stacks) == 1:
        stack = stacks[0]
    if stack not in stacks:
        raise ValueError(
            f"deepnorm_constants: stack must be one of {stacks} for a {architecture} model, "
            f"got {stack!r}"
        )
    if architecture == "encoder-only":
        n = _check_layers("num_encoder_layers", num_encoder_layers, architecture)
        return (2 * n) ** 0.25, (8 * n) ** -0.25
    if architecture == "decoder-only":
        m = _check_layers("num_decoder_layers", num_decoder_layers, architecture)
        return (2 * m) ** 0.25, (8 * m) ** -0.25
    n = _check_layers("num_encoder_layers", num_encoder_layers, architecture)
    m = _check_layers("num_decoder_layers", num_decoder_layers, architecture)
    if stack == "encoder":
        depth = (n**4 * m) ** (1 / 16)
        return 0.81 * depth, 0.87 / depth
    return (3 * m) ** 0.25, (12 * m) ** -0.25


def deepnorm_residual(x: Tensor, sublayer: nn.Module, norm: nn.Module, alpha: float) -> Tensor:
    """One DeepNorm residual step: ``norm(alpha * x + sublayer(x))``.

    Args:
        x: the residual stream, ``(B, T, C)``.
        sublayer: G, e.g. self-attention or the FFN: ``(B, T, C) -> (B, T, C)``.
        norm: the LayerNorm over C.
        alpha: the weight of the residual (the shortcut), not of the branch.

    Returns:
        ``(B, T, C)``, normalized.
    """
    return norm(alpha * x + sublayer(x))


def deepnorm_init_(layer: nn.Module, beta: float) -> nn.Module:
    """Scale, in place, the weights DeepNet scales by ``beta``: :data:`DEEPNORM_SCALED`.

    ``layer`` has the attributes of a :class:`DeepNormLayer` (``ffn.fc1``, ``ffn.fc2``,
    ``self_attn.q_proj`` ... ``self_attn.out_proj``), initialized Xavier-normal with gain 1. The
    query and key projections keep that initialization; so do biases (zero) and the norms.
    Returns ``layer``.
    """
    for path in DEEPNORM_SCALED:
        weight = layer.get_submodule(path).weight
        weight.data.mul_(beta)
    return layer


class DeepNormLayer(LayerParts):
    """A Post-LN Transformer layer with DeepNorm's residual weight ``alpha``.

    ``x -> LN(alpha * x + SelfAttention(x)) -> LN(alpha * x + FFN(x))``. Input and output
    ``(B, T, d_model)``. ``alpha=1`` gives the original (Post-LN) layer. Call
    :func:`deepnorm_init_` for DeepNet's initialization.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        alpha: float = 1.0,
        causal: bool = False,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__(d_model, nhead, dim_feedforward, causal, layer_norm_eps)
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        """DeepNorm residual steps, attention then FFN: ``(B, T, d_model) -> (B, T, d_model)``."""
        x = deepnorm_residual(x, self.self_attn, self.attn_norm, self.alpha)  # (B, T, C)
        return deepnorm_residual(x, self.ffn, self.ffn_norm, self.alpha)  # (B, T, C)

    def extra_repr(self) -> str:
        """alpha, shown in the module's repr."""
        return f"alpha={self.alpha:.4g}"


class DeepNormEncoder(nn.Module):
    """``num_layers`` :class:`DeepNormLayer` s, DeepNorm-initialized for a one-stack model.

    Args:
        num_layers, d_model, nhead, dim_feedforward: as in ``torch.nn.TransformerEncoder``.
        deepnorm: ``True`` for DeepNorm with the encoder-only (or, with ``causal=True``,
            decoder-only) constants of :func:`deepnorm_constants`; ``False`` for plain Post-LN
            (alpha = beta = 1), identically initialized otherwise.
        causal: a decoder-only stack (causal attention).

    Input and output ``(B, T, d_model)``.
    """

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        deepnorm: bool = True,
        causal: bool = False,
    ) -> None:
        super().__init__()
        if deepnorm:
            architecture = "decoder-only" if causal else "encoder-only"
            self.alpha, self.beta = deepnorm_constants(architecture, num_layers, num_layers)
        else:
            self.alpha, self.beta = 1.0, 1.0
        self.layers = nn.ModuleList(
            DeepNormLayer(d_model, nhead, dim_feedforward, self.alpha, causal)
            for _ in range(num_layers)
        )
        for layer in self.layers:
            deepnorm_init_(layer, self.beta)

    def forward(self, x: Tensor) -> Tensor:
        """The layers in order: ``(B, T, d_model) -> (B, T, d_model)``."""
        for layer in self.layers:
            x = layer(x)  # (B, T, C)
        return x
