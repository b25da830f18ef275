"""Training-stability experiments of the DeepNorm chapter: a synthetic task, a small model, a loop.

DeepNet (Wang et al. 2022) explains Post-LN's instability by the size of the model's *first
updates*: how far the output ``F(x; theta_t)`` moves from ``F(x; theta_0)`` in the first steps of
training. This module measures that, and trains small sequence models on CPU in seconds:

- :func:`reverse_task` draws a batch of the synthetic task: reverse a short sequence of tokens.
- :class:`SequenceModel` is a token embedding, a learned position embedding, a stack of
  :class:`~addnorm_lib.reference.deepnorm.DeepNormLayer` s (Post-LN or DeepNorm) and a linear
  read-out.
- :func:`relative_output_change` is ``||F(x; theta) - F(x; theta_0)|| / ||F(x; theta_0)||``.
- :func:`train_sequence_model` trains with Adam at a constant learning rate (no warm-up), seeded,
  and records the loss and the output change at every step.

Everything is seeded and runs on the CPU in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib.reference.deepnorm import DeepNormEncoder

__all__ = [
    "SequenceModel",
    "TrainingRun",
    "relative_output_change",
    "reverse_task",
    "train_sequence_model",
]


def reverse_task(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """A batch of the reversal task: targets are the input tokens in reverse order.

    Args:
        batch_size, seq_len: B and T.
        vocab_size: tokens are drawn uniformly from ``0 .. vocab_size - 1``.
        generator: a seeded ``torch.Generator`` (the global one if None).

    Returns:
        ``(tokens, targets)``, both int64 of shape ``(B, T)``, ``targets = tokens.flip(1)``.
        A model that ignores its input can do no better than a cross-entropy of
        ``ln(vocab_size)`` per token.
    """
    if batch_size < 1 or seq_len < 1 or vocab_size < 2:
        raise ValueError(
            f"reverse_task: need batch_size >= 1, seq_len >= 1, vocab_size >= 2; got "
            f"{batch_size}, {seq_len}, {vocab_size}"
        )
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)  # (B, T)
    return tokens, tokens.flip(1)


class SequenceModel(nn.Module):
    """Embedding -> :class:`~addnorm_lib.reference.deepnorm.DeepNormEncoder` -> linear read-out.

    Args:
        vocab_size, seq_len: token vocabulary and (maximal) sequence length T.
        num_layers, d_model, nhead, dim_feedforward: the encoder stack's sizes.
        deepnorm: DeepNorm's alpha and beta (``True``) or plain Post-LN (``False``), otherwise
            identically initialized: the embeddings, the encoder's Xavier-normal weights (before
            beta) and the head come from the same random numbers when the seed is the same.

    ``forward``: int64 tokens ``(B, T)`` -> float32 logits ``(B, T, vocab_size)``;
    :meth:`features` returns the encoder's output ``(B, T, d_model)``.
    """

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        num_layers: int,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        deepnorm: bool,
    ) -> None:
        super().__init__()
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))  # (T, C)
        self.encoder = DeepNormEncoder(num_layers, d_model, nhead, dim_feedforward, deepnorm)
        self.head = nn.Linear(d_model, vocab_size)

    def features(self, tokens: Tensor) -> Tensor:
        """The encoder stack's output, ``(B, T, d_model)``."""
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # (B, T, C)
        return self.encoder(x)  # (B, T, C)

    def forward(self, tokens: Tensor) -> Tensor:
        """int64 tokens ``(B, T)``, ``T <= seq_len`` -> float32 logits ``(B, T, vocab_size)``."""
        return self.head(self.features(tokens))  # (B, T, V)


def relative_output_change(model: SequenceModel, reference: Tensor, tokens: Tensor) -> float:
    """``||F(x; theta) - F(x; theta_0)|| / ||F(x; theta_0)||`` for the encoder's output F.

    Args:
        model: the model at parameters theta.
        reference: ``F(x; theta_0)``, the output of ``model.features(tokens)`` at the parameters
            theta_0 to compare with, ``(B, T, d_model)``.
        tokens: int64 ``(B, T)``: the batch x.

    Returns:
        A Python float (Frobenius norms over the whole batch, computed in float64).
    """
    with torch.no_grad():
        now = model.features(tokens).double()  # (B, T, C)
    then = reference.detach().double()  # (B, T, C)
    return float((now - then).norm() / then.norm())


@dataclass
class TrainingRun:
    """What :func:`train_sequence_model` records.

    Attributes:
        losses: training cross-entropy of every step, float64 ``(steps,)`` (NaN if it diverged).
        output_change: :func:`relative_output_change` after every step, float64 ``(steps,)``.
        final_loss: cross-entropy on a held-out batch after the last step.
        final_accuracy: fraction of held-out tokens predicted right.
    """

    losses: np.ndarray
    output_change: np.ndarray
    final_loss: float
    final_accuracy: float


def train_sequence_model(
    model: SequenceModel,
    seed: int = 0,
    *,
    batch_size: int = 32,
    steps: int = 100,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.98),
    change_steps: int | None = None,
) -> TrainingRun:
    """Train ``model`` on :func:`reverse_task` with Adam at a constant lr (no warm-up).

    ``seed`` fixes the training batches, the fixed batch and the held-out batch (not the model:
    seed its construction yourself). The model is trained in place. The output change is
    measured on a fixed batch of ``batch_size`` sequences after each of the first
    ``change_steps`` steps (all steps if None; NaN after that): each measurement costs two
    forward passes. Training stops at the first non-finite loss (the rest stays NaN).
    """
    vocab_size, seq_len = model.vocab_size, model.seq_len
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    data = torch.Generator().manual_seed(seed)
    fixed, _ = reverse_task(batch_size, seq_len, vocab_size, data)  # (B, T)
    with torch.no_grad():
        reference = model.features(fixed)  # (B, T, C): F(x; theta_0)
    losses = np.full(steps, np.nan)
    change = np.full(steps, np.nan)
    for step in range(steps):
        tokens, targets = reverse_task(batch_size, seq_len, vocab_size, data)  # (B, T) each
        logits = model(tokens)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1))
        if not torch.isfinite(loss):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.item()
        if change_steps is None or step < change_steps:
            change[step] = relative_output_change(model, reference, fixed)
    tokens, targets = reverse_task(512, seq_len, vocab_size, data)  # (512, T) held out
    with torch.no_grad():
        logits = model(tokens)  # (512, T, V)
        final = F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1)).item()
        accuracy = (logits.argmax(-1) == targets).double().mean().item()
    if not math.isfinite(final):
        accuracy = float("nan")
    return TrainingRun(losses, change, final, accuracy)
