"""Experiments of the "Beyond Pre-LN and Post-LN" chapter: QK-norm, output norms, NormFormer, DyT.

Each piece is small and swaps into the course's Transformer layers
(:mod:`addnorm_lib.transformer.sublayers`, :mod:`addnorm_lib.transformer.architectures`,
:mod:`addnorm_lib.reference.placement`):

- :class:`Attention` is multi-head self-attention that exposes its logits, with two options:
  ``qk_norm`` (an RMSNorm on each head's queries and keys, QK-norm) and ``head_scale`` (one
  learnable scale per head on the head's output, as in NormFormer).
- :func:`attention_entropy` and :func:`scale_qk_` measure the softmax and grow ``W_q``, ``W_k``;
  :func:`qk_logit_bound` is the bound that QK-norm puts on every logit.
- :func:`scale_branch_weights_` multiplies what each sublayer of a block computes by a factor.
- :class:`DyT` is Dynamic Tanh, ``weight * tanh(alpha * x) + bias`` (Zhu et al. 2025).
- :class:`HiddenNormFeedForward` and :class:`NormFormerBlock` are NormFormer's extra norms
  (Shleifer et al. 2021) on a Pre-LN block; :func:`normformer_extra_parameters` counts them.
- :class:`BeyondModel` is a token embedding, a learned position embedding, a stack of blocks of
  one :data:`VARIANTS` name, a final norm and a read-out; with the same seed every variant draws
  the same projection and embedding weights.
- :func:`stream_rms` measures the residual stream after every block; :func:`layer_gradient_norms`
  the gradient of each block's parameters at initialization.
- :func:`logit_scale_stats`, :func:`init_stream_rms` and :func:`init_block_gradients` are the
  chapter's measurements at initialization, one seed each.
- :func:`train_beyond_model` trains on :func:`~addnorm_lib.experiments.deepnorm.reverse_task`
  with Adam at a constant learning rate and records the loss and the largest attention logit.

Everything is seeded and runs on the CPU in float32.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib import lookup
from addnorm_lib.experiments.deepnorm import held_out_score, reverse_task, reverse_task_loss
from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.reference.placement import PreLNBlock
from addnorm_lib.transformer.architectures import OutputNormBlock, SandwichBlock
from addnorm_lib.transformer.sublayers import FeedForward, xavier_init_

__all__ = [
    "VARIANTS",
    "Attention",
    "BeyondModel",
    "BeyondRun",
    "DyT",
    "HiddenNormFeedForward",
    "LogitScaleStats",
    "NormFormerBlock",
    "attention_entropy",
    "init_block_gradients",
    "init_stream_rms",
    "layer_gradient_norms",
    "logit_scale_stats",
    "normformer_extra_parameters",
    "qk_logit_bound",
    "scale_branch_weights_",
    "scale_qk_",
    "stream_rms",
    "train_beyond_model",
]

NormFactory = Callable[[int], nn.Module]


class Attention(nn.Module):
    """Multi-head self-attention, batch first, with optional QK-norm and per-head output scales.

    Args:
        embed_dim, num_heads: C and H; each head has ``C / H`` features.
        qk_norm: ``None`` (no QK-norm), ``"head"``: an ``nn.RMSNorm(C / H)`` on each head's query
            and key vectors (one norm per projection, shared by the heads), as Gemma 3 does, or
            ``"all"``: an ``nn.RMSNorm(C)`` on the whole projected query and key, all heads
            together, as OLMo 2 does. Either way before the dot products.
        head_scale: multiply each head's output by a learnable scalar (starting at 1) before
            ``out_proj``, as NormFormer does.

    The projections are ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj``, Xavier-normal with
    zero biases, created in the same order as in
    :class:`~addnorm_lib.transformer.sublayers.SelfAttention` (the norms and scales draw no random
    numbers), so with both options off and the same weights the two modules compute the same
    function. ``last_max_logit`` holds the largest absolute
    attention logit of the latest forward pass (a Python float).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        qk_norm: str | None = None,
        head_scale: bool = False,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"Attention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        xavier_init_(self)
        self.qk_norm = qk_norm
        if qk_norm is not None:
            size = lookup({"head": self.head_dim, "all": embed_dim}, qk_norm, "qk_norm")
            self.q_norm, self.k_norm = nn.RMSNorm(size), nn.RMSNorm(size)
        self.head_scale = nn.Parameter(torch.ones(num_heads)) if head_scale else None
        self.last_max_logit = math.nan

    def _heads(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, C/H)

    def logits(self, x: Tensor) -> Tensor:
        """The attention logits ``q . k / sqrt(C / H)``: ``(B, T, C) -> (B, H, T, T)``."""
        q, k = self.q_proj(x), self.k_proj(x)  # (B, T, C) each
        if self.qk_norm == "all":
            q, k = self.q_norm(q), self.k_norm(k)  # each token's q and k: RMS 1 (times weight)
        q, k = self._heads(q), self._heads(k)  # (B, H, T, C/H) each
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)  # each head's q and k: RMS 1 (times weight)
        return q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the T tokens of each sequence: ``(B, T, C) -> (B, T, C)``."""
        logits = self.logits(x)  # (B, H, T, T)
        self.last_max_logit = logits.detach().abs().max().item()
        mixed = logits.softmax(-1) @ self._heads(self.v_proj(x))  # (B, H, T, C/H)
        if self.head_scale is not None:
            mixed = mixed * self.head_scale.view(1, -1, 1, 1)  # (B, H, T, C/H)
        return self.out_proj(mixed.transpose(1, 2).reshape(x.shape))  # (B, T, C)


def qk_logit_bound(attention: Attention) -> float:
    """An upper bound on ``|q . k| / sqrt(C / H)`` that holds for every input, or ``inf``.

    With QK-norm each normalized vector ``g * u / rms(u)`` of n entries has a Euclidean norm of at
    most ``max|g| * sqrt(n)`` (eps only makes it smaller), so by Cauchy-Schwarz a logit is at most
    ``max|g_q| * max|g_k| * n / sqrt(C / H)``: ``n = C / H`` for ``"head"`` (the bound is then
    ``sqrt(C / H) * max|g_q| * max|g_k|``) and ``n = C`` for ``"all"`` (a head's slice is no longer
    than the whole vector). Without QK-norm no such bound exists: ``inf``.
    """
    if attention.qk_norm is None:
        return math.inf
    n = attention.head_dim if attention.qk_norm == "head" else attention.embed_dim
    gains = (
        attention.q_norm.weight.detach().abs().max() * attention.k_norm.weight.detach().abs().max()
    )
    return gains.item() * n / math.sqrt(attention.head_dim)


def attention_entropy(logits: Tensor) -> Tensor:
    """Entropy of each softmax row in nats: ``(..., T, T) -> (...,  T)``, between 0 and ln T."""
    logp = logits.log_softmax(-1)  # (..., T, T)
    return -(logp.exp() * logp).sum(-1)  # (..., T)


def scale_qk_(attention: nn.Module, factor: float) -> nn.Module:
    """Multiply ``q_proj.weight`` and ``k_proj.weight`` by ``factor``, in place; return the module.

    Without QK-norm the logits then grow by ``factor ** 2`` (their biases are zero at
    initialization).
    """
    with torch.no_grad():
        attention.q_proj.weight.mul_(factor)
        attention.k_proj.weight.mul_(factor)
    return attention


def scale_branch_weights_(block: nn.Module, factor: float) -> nn.Module:
    """Multiply the output projection of each sublayer of ``block`` by ``factor``, in place.

    ``self_attn.out_proj`` and ``ffn.fc2`` are the last linear maps of the two sublayers (their
    biases are zero at initialization), so what each sublayer computes is multiplied by exactly
    ``factor``: a stand-in for weights that have grown. Returns ``block``.
    """
    with torch.no_grad():
        for layer in (block.self_attn.out_proj, block.ffn.fc2):
            layer.weight.mul_(factor)
    return block


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025): ``weight * tanh(alpha * x) + bias``, token by token.

    Args:
        normalized_shape: C, the size of the last dimension (an int).
        alpha_init: the starting value of the learnable scalar ``alpha`` (0.5 as in the paper's
            module).

    ``weight`` (ones) and ``bias`` (zeros) have shape ``(C,)``, as a LayerNorm's. Unlike a norm, it
    computes no statistic: each entry is squashed on its own. ``(*, C) -> (*, C)``, same dtype.
    """

    def __init__(self, normalized_shape: int, alpha_init: float = 0.5) -> None:
        super().__init__()
        self.normalized_shape = normalized_shape
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x: Tensor) -> Tensor:
        """``weight * tanh(alpha * x) + bias``: ``(*, C) -> (*, C)``."""
        return self.weight * torch.tanh(self.alpha * x) + self.bias

    def extra_repr(self) -> str:
        """The size and alpha, shown in the module's repr."""
        return f"{self.normalized_shape}, alpha={self.alpha.item():.3g}"


class HiddenNormFeedForward(FeedForward):
    """A :class:`~addnorm_lib.transformer.sublayers.FeedForward` with a LayerNorm on its hidden
    layer: ``fc2(hidden_norm(act(fc1(x))))``. ``(*, d_model) -> (*, d_model)``.

    NormFormer's third operation; this course puts the norm after the activation.
    """

    def __init__(self, d_model: int, dim_feedforward: int, activation: str = "gelu") -> None:
        super().__init__(d_model, dim_feedforward, activation)
        self.hidden_norm = nn.LayerNorm(dim_feedforward)

    def forward(self, x: Tensor) -> Tensor:
        """``fc2(hidden_norm(act(fc1(x))))``: ``(*, d_model) -> (*, d_model)``."""
        return self.fc2(self.hidden_norm(self.activation(self.fc1(x))))  # (*, d_model)


class NormFormerBlock(PreLNBlock):
    """A Pre-LN block plus a LayerNorm on the attention's output before the residual add:
    ``x = x + attn_out_norm(self_attn(norm1(x)))``; ``x = x + ffn(norm2(x))``.

    With an :class:`Attention` built with ``head_scale=True`` and a
    :class:`HiddenNormFeedForward`, this is NormFormer's layer: its three additions to Pre-LN are
    ``attn_out_norm``, the head scales and the FFN's hidden norm. Arguments as
    :class:`~addnorm_lib.reference.placement.PreLNBlock`. ``(B, T, C) -> (B, T, C)``.
    """

    def __init__(
        self, self_attn: nn.Module, ffn: nn.Module, d_model: int, norm: NormFactory | None = None
    ) -> None:
        super().__init__(self_attn, ffn, d_model, norm=norm)
        self.attn_out_norm = norm(d_model) if norm is not None else nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        """Pre-LN with a norm on the attention's output: ``(B, T, C) -> (B, T, C)``."""
        x = x + self.attn_out_norm(self.self_attn(self.norm1(x)))  # (B, T, C)
        return x + self.ffn(self.norm2(x))  # (B, T, C)


def normformer_extra_parameters(d_model: int, num_heads: int, dim_feedforward: int) -> int:
    """Parameters that NormFormer's three operations add to one layer.

    A LayerNorm on the attention output (``2 * d_model``: weight and bias), one scale per head
    (``num_heads``) and a LayerNorm on the FFN's hidden layer (``2 * dim_feedforward``).
    """
    return 2 * d_model + num_heads + 2 * dim_feedforward


#: The blocks :class:`BeyondModel` can stack, by name.
#: ``pre``: Pre-LN; ``qk``: Pre-LN with QK-norm; ``peri``: a norm at each sublayer's input and
#: output (:class:`~addnorm_lib.transformer.architectures.SandwichBlock`); ``output``: output norms
#: only (:class:`~addnorm_lib.transformer.architectures.OutputNormBlock`); ``olmo2``: output
#: norms with QK-norm over all heads together; ``normformer``:
#: :class:`NormFormerBlock`; ``dyt``: Pre-LN with every LayerNorm, the final one included,
#: replaced by :class:`DyT`.
VARIANTS = ("pre", "qk", "peri", "output", "olmo2", "normformer", "dyt")


def _block(variant: str, d_model: int, nhead: int, dim_feedforward: int) -> nn.Module:
    """One block of ``variant``; the random draws happen in the same order for every variant."""
    qk_norm = {"qk": "head", "olmo2": "all"}.get(variant)
    attn = Attention(d_model, nhead, qk_norm=qk_norm, head_scale=variant == "normformer")
    ffn_class = HiddenNormFeedForward if variant == "normformer" else FeedForward
    ffn = ffn_class(d_model, dim_feedforward)
    blocks: dict[str, Callable[[], nn.Module]] = {
        "pre": lambda: PreLNBlock(attn, ffn, d_model),
        "qk": lambda: PreLNBlock(attn, ffn, d_model),
        "peri": lambda: SandwichBlock(attn, ffn, d_model, norm=nn.LayerNorm),
        "output": lambda: OutputNormBlock(attn, ffn, d_model, norm=nn.LayerNorm),
        "olmo2": lambda: OutputNormBlock(attn, ffn, d_model, norm=nn.LayerNorm),
        "normformer": lambda: NormFormerBlock(attn, ffn, d_model),
        "dyt": lambda: PreLNBlock(attn, ffn, d_model, norm=DyT),
    }
    return lookup(blocks, variant, "variant")()


class BeyondModel(nn.Module):
    """Token embedding + position embedding -> ``num_layers`` blocks -> final norm -> read-out.

    Args:
        variant: a name in :data:`VARIANTS`; any other raises ValueError.
        vocab_size, seq_len: vocabulary and (maximal) sequence length T.
        num_layers, d_model, nhead, dim_feedforward: the stack's sizes.

    Embedding entries start as N(0, 1). The final norm is a LayerNorm (a :class:`DyT` for
    ``"dyt"``). With the same seed, every variant gets the same embeddings, projections and
    read-out. ``forward``: int64 tokens ``(B, T)`` -> float32 logits ``(B, T, vocab_size)``.
    """

    def __init__(
        self,
        variant: str,
        vocab_size: int,
        seq_len: int,
        num_layers: int,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
    ) -> None:
        super().__init__()
        lookup(dict.fromkeys(VARIANTS), variant, "variant")
        self.variant, self.vocab_size, self.seq_len = variant, vocab_size, seq_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))  # (T, C)
        self.blocks = nn.ModuleList(
            _block(variant, d_model, nhead, dim_feedforward) for _ in range(num_layers)
        )
        self.norm = DyT(d_model) if variant == "dyt" else nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def streams(self, tokens: Tensor) -> list[Tensor]:
        """The residual stream before the first block and after each: ``num_layers + 1`` tensors
        ``(B, T, d_model)``."""
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # (B, T, C)
        out = [x]
        for block in self.blocks:
            x = block(x)  # (B, T, C)
            out.append(x)
        return out

    def forward(self, tokens: Tensor) -> Tensor:
        """int64 tokens ``(B, T)`` -> float32 logits ``(B, T, vocab_size)``."""
        return self.head(self.norm(self.streams(tokens)[-1]))  # (B, T, V)

    def max_attention_logit(self) -> float:
        """The largest absolute attention logit of the latest forward pass, over all blocks."""
        return max(block.self_attn.last_max_logit for block in self.blocks)


def stream_rms(model: BeyondModel, tokens: Tensor) -> np.ndarray:
    """Mean over tokens of each token's RMS, for the stream before the first block and after
    each block: float64 ``(num_layers + 1,)``. ``tokens``: int64 ``(B, T)``."""
    with torch.no_grad():
        return np.array(
            [x.double().pow(2).mean(-1).sqrt().mean().item() for x in model.streams(tokens)]
        )


def layer_gradient_norms(model: BeyondModel, tokens: Tensor, targets: Tensor) -> np.ndarray:
    """Norm of the gradient of each block's parameters (all of them, as one vector), after one
    backward pass of the cross-entropy of ``model(tokens)`` against ``targets`` (int64 ``(B, T)``
    each). float64 ``(num_layers,)``, first block first. Gradients are reset before and after.
    """
    model.zero_grad()
    logits = model(tokens)  # (B, T, V)
    F.cross_entropy(logits.reshape(-1, model.vocab_size), targets.reshape(-1)).backward()
    norms = [
        math.sqrt(sum(p.grad.double().pow(2).sum().item() for p in block.parameters()))
        for block in model.blocks
    ]
    model.zero_grad()
    return np.array(norms)


@dataclass
class BeyondRun:
    """What :func:`train_beyond_model` records.

    Attributes:
        losses: training cross-entropy at every step, float64 ``(steps,)`` (NaN after a
            non-finite loss).
        max_logit: the largest absolute attention logit of every step's forward pass, float64
            ``(steps,)``.
        final_loss, final_accuracy: on a held-out batch of 512 sequences after the last step.
    """

    losses: np.ndarray
    max_logit: np.ndarray
    final_loss: float
    final_accuracy: float


def train_beyond_model(
    model: BeyondModel,
    seed: int,
    *,
    lr: float,
    steps: int,
    batch_size: int = 32,
    betas: Sequence[float] = (0.9, 0.98),
) -> BeyondRun:
    """Train ``model`` in place on fresh batches of the reversal task, with Adam at a constant
    ``lr`` (no warm-up). ``seed`` fixes the batches and the held-out batch (seed the model's
    construction yourself). Training stops at the first non-finite loss.
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(betas))
    data = torch.Generator().manual_seed(seed)
    losses, max_logit = np.full(steps, np.nan), np.full(steps, np.nan)
    for step in range(steps):
        loss, _ = reverse_task_loss(model, batch_size, data)
        if not torch.isfinite(loss):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step], max_logit[step] = loss.item(), model.max_attention_logit()
    final, accuracy = held_out_score(model, data)
    return BeyondRun(losses, max_logit, final, accuracy)


@dataclass
class LogitScaleStats:
    """What :func:`logit_scale_stats` measures, one entry per factor ``s``.

    Attributes:
        largest: the largest absolute attention logit, float64 ``(S,)``.
        entropy: the mean entropy of an attention row in nats, float64 ``(S,)``.
        bound: :func:`qk_logit_bound` of the unscaled module (``inf`` without QK-norm).
    """

    largest: np.ndarray
    entropy: np.ndarray
    bound: float


def logit_scale_stats(
    qk_norm: str | None,
    seed: int,
    scales: Sequence[float],
    d_model: int = 64,
    num_heads: int = 4,
    seq_len: int = 16,
    batch_size: int = 8,
) -> LogitScaleStats:
    """Grow ``W_q`` and ``W_k`` of one :class:`Attention` by each factor in ``scales`` and measure
    its logits on ``batch_size`` sequences of ``seq_len`` layer-normalized random tokens
    ``(B, T, C)`` (what a Pre-LN attention reads). ``seed`` seeds the weights, then the input.
    """
    set_seed(seed)
    attention = Attention(d_model, num_heads, qk_norm=qk_norm)
    x = F.layer_norm(torch.randn(batch_size, seq_len, d_model), (d_model,))  # (B, T, C)
    largest, entropy = [], []
    with torch.no_grad():
        for s in scales:
            logits = scale_qk_(copy.deepcopy(attention), float(s)).logits(x)  # (B, H, T, T)
            largest.append(logits.abs().max().item())
            entropy.append(attention_entropy(logits).mean().item())
    return LogitScaleStats(np.array(largest), np.array(entropy), qk_logit_bound(attention))


def _init_model_and_batch(
    variant: str, seed: int, num_layers: int, d_model: int, vocab_size: int, seq_len: int
) -> tuple[BeyondModel, Tensor, Tensor]:
    """A :class:`BeyondModel` (4 heads, FFN width ``4 * d_model``) seeded with ``seed``, and 32
    sequences of the reversal task drawn from a generator seeded with ``seed``."""
    set_seed(seed)
    model = BeyondModel(variant, vocab_size, seq_len, num_layers, d_model, 4, 4 * d_model)
    tokens, targets = reverse_task(32, seq_len, vocab_size, torch.Generator().manual_seed(seed))
    return model, tokens, targets  # int64 (32, T) each


def init_stream_rms(
    variant: str,
    seed: int,
    factor: float = 1.0,
    num_layers: int = 12,
    d_model: int = 64,
    vocab_size: int = 12,
    seq_len: int = 8,
) -> np.ndarray:
    """:func:`stream_rms` at initialization, with each sublayer's output projection multiplied by
    ``factor`` (:func:`scale_branch_weights_`): float64 ``(num_layers + 1,)``."""
    model, tokens, _ = _init_model_and_batch(
        variant, seed, num_layers, d_model, vocab_size, seq_len
    )
    for block in model.blocks:
        scale_branch_weights_(block, factor)
    return stream_rms(model, tokens)


def init_block_gradients(
    variant: str,
    seed: int,
    num_layers: int = 12,
    d_model: int = 64,
    vocab_size: int = 12,
    seq_len: int = 8,
) -> np.ndarray:
    """:func:`layer_gradient_norms` at initialization, one batch: float64 ``(num_layers,)``."""
    model, tokens, targets = _init_model_and_batch(
        variant, seed, num_layers, d_model, vocab_size, seq_len
    )
    return layer_gradient_norms(model, tokens, targets)
