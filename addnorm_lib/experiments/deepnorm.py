"""Training-stability experiments of the DeepNorm chapter: a synthetic task, a small model, a loop.

DeepNet (Wang et al. 2022, section 3) explains Post-LN's instability by a chain of events early in
training: the model's *first updates* are large (the output ``F(x; theta_t)`` moves far from
``F(x; theta_0)``), the inputs of the LayerNorms grow, the gradient through a LayerNorm shrinks
like ``sqrt(d) / ||x||``, and the lower layers get vanishing gradients. This module measures the
first and the last links of that chain, and trains small sequence models on CPU in seconds:

- :func:`reverse_task` draws a batch of the synthetic task: reverse a short sequence of tokens.
- :class:`SequenceModel` is a token embedding, a learned position embedding, a stack of
  :class:`~addnorm_lib.reference.deepnorm.DeepNormLayer` s (Post-LN or DeepNorm) and a linear
  read-out.
- :func:`swapped_residual` and :class:`SwappedLayer` are a known bug, ``LN(x + alpha G(x))``
  where DeepNorm computes ``LN(alpha x + G(x))``; :func:`make_variant` builds the chapter's model
  with DeepNorm's two changes, one of them, none, or the swapped step.
- :func:`relative_output_change` is ``||F(x; theta) - F(x; theta_0)|| / ||F(x; theta_0)||``.
- :func:`stack_diagnostics` measures, on one batch, how much larger each LayerNorm's input is
  than its shortcut part, and the gradient of the loss with respect to the stream after every
  layer.
- :func:`train_sequence_model` trains with Adam at a constant learning rate (no warm-up), seeded,
  and records the loss, the output change and (at chosen steps) the diagnostics.

Everything is seeded and runs on the CPU in float32.

The chapter's 24-layer runs (every variant, :data:`CHAPTER_SEEDS`) take minutes, too long for a
book build, so the chapter reads them from ``book/data/deepnorm_runs.json``. Regenerate that file
with::

    .venv/bin/python -m addnorm_lib.experiments.deepnorm runs \\
        --out book/data/deepnorm_runs.json --jobs 2

``tests/experiments/test_deepnorm.py`` re-runs the first steps of a few runs and compares them with
the file. :mod:`addnorm_lib.experiments.deepnorm_grid` re-checks the chapter's training
conclusions on more seeds, learning rates and budgets.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib import lookup
from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.experiments.records import write_record
from addnorm_lib.reference.deepnorm import DeepNormEncoder, DeepNormLayer, deepnorm_constants

__all__ = [
    "CHAPTER_CONFIG",
    "CHAPTER_SEEDS",
    "VARIANTS",
    "SequenceModel",
    "SwappedLayer",
    "TrainingRun",
    "cached_array",
    "lower_half_gradient",
    "make_variant",
    "relative_output_change",
    "reverse_task",
    "run_variant",
    "shortcut_weight",
    "stack_diagnostics",
    "swapped_residual",
    "train_sequence_model",
]

#: The model variants of the chapter: DeepNorm's two changes, none, one, or the swapped step.
VARIANTS = ("Post-LN", "alpha only", "beta only", "swapped", "DeepNorm")

#: The chapter's model, task and training settings (its cached runs use these).
CHAPTER_CONFIG: dict = {
    "vocab_size": 10,
    "seq_len": 8,
    "num_layers": 24,
    "d_model": 32,
    "nhead": 4,
    "dim_feedforward": 64,
    "batch_size": 32,
    "steps": 100,
    "lr": 1e-3,
    "betas": (0.9, 0.98),
    "change_steps": 15,
    "diagnose_at": (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 50, 100),
}

#: The seeds of the chapter's cached runs.
CHAPTER_SEEDS = tuple(range(8))


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


def reverse_task_loss(
    model: nn.Module, batch_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """The mean cross-entropy of ``model`` on one batch of the reversal task drawn from
    ``generator``, and that batch's int64 tokens ``(B, T)``.

    ``model`` maps int64 tokens ``(B, T)`` to logits ``(B, T, V)`` and has ``vocab_size`` and
    ``seq_len`` attributes. The loss is a scalar tensor with its graph (call ``backward``).
    """
    vocab_size = model.vocab_size
    tokens, targets = reverse_task(batch_size, model.seq_len, vocab_size, generator)  # (B, T)
    logits = model(tokens)  # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1)), tokens


def held_out_score(model: nn.Module, generator: torch.Generator) -> tuple[float, float]:
    """Mean cross-entropy and token accuracy of ``model`` on 512 fresh sequences of the reversal
    task drawn from ``generator`` (after the training batches), without gradients.

    ``model`` maps int64 tokens ``(B, T)`` to logits ``(B, T, V)`` and has ``vocab_size`` and
    ``seq_len`` attributes.
    """
    vocab_size = model.vocab_size
    tokens, targets = reverse_task(512, model.seq_len, vocab_size, generator)  # (512, T) each
    with torch.no_grad():
        logits = model(tokens)  # (512, T, V)
        final = F.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1)).item()
        accuracy = (logits.argmax(-1) == targets).double().mean().item()
    return final, accuracy


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

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """The stack's input: token plus position embedding, ``(B, T, d_model)``."""
        return self.embed(tokens) + self.pos[: tokens.shape[1]]  # (B, T, C)

    def features(self, tokens: Tensor) -> Tensor:
        """The encoder stack's output, ``(B, T, d_model)``."""
        return self.encoder(self.embed_tokens(tokens))  # (B, T, C)

    def forward(self, tokens: Tensor) -> Tensor:
        """int64 tokens ``(B, T)``, ``T <= seq_len`` -> float32 logits ``(B, T, vocab_size)``."""
        return self.head(self.features(tokens))  # (B, T, V)


def swapped_residual(x: Tensor, sublayer: nn.Module, norm: nn.Module, alpha: float) -> Tensor:
    """A known bug: documented as ``norm(alpha * x + sublayer(x))``, alpha lands on the branch.

    ``(B, T, C) -> (B, T, C)``. By LayerNorm's scale invariance this is
    ``norm(x / alpha + sublayer(x))`` (up to eps): the residual is *down*-weighted.
    """
    return norm(x + alpha * sublayer(x))


class SwappedLayer(DeepNormLayer):
    """A :class:`~addnorm_lib.reference.deepnorm.DeepNormLayer` whose residual steps are
    :func:`swapped_residual`: ``x -> LN(x + alpha Attn(x)) -> LN(x + alpha FFN(x))``."""

    def forward(self, x: Tensor) -> Tensor:
        """Swapped residual steps, attention then FFN: ``(B, T, C) -> (B, T, C)``."""
        x = swapped_residual(x, self.self_attn, self.attn_norm, self.alpha)  # (B, T, C)
        return swapped_residual(x, self.ffn, self.ffn_norm, self.alpha)  # (B, T, C)


def shortcut_weight(layer: DeepNormLayer) -> float:
    """The factor on the shortcut ``x`` inside the layer's norms: ``alpha``, or 1 if swapped."""
    return 1.0 if isinstance(layer, SwappedLayer) else float(layer.alpha)


def make_variant(variant: str, seed: int, config: dict | None = None) -> SequenceModel:
    """The seeded :class:`SequenceModel` of ``config`` (default :data:`CHAPTER_CONFIG`), as one of
    :data:`VARIANTS`.

    ``"Post-LN"``: alpha = beta = 1. ``"DeepNorm"``: the encoder-only constants for the depth.
    ``"alpha only"`` and ``"beta only"``: one of the two changes. ``"swapped"``: DeepNorm's beta
    initialization with :class:`SwappedLayer` s. Every variant draws the same random numbers, so
    weights differ only by beta where DeepNorm scales them. Any other name raises ValueError.
    """
    lookup(dict.fromkeys(VARIANTS), variant, "variant")
    c = {**CHAPTER_CONFIG, **(config or {})}
    set_seed(seed)
    model = SequenceModel(
        c["vocab_size"],
        c["seq_len"],
        c["num_layers"],
        c["d_model"],
        c["nhead"],
        c["dim_feedforward"],
        deepnorm=variant in ("DeepNorm", "beta only", "swapped"),
    )
    alpha, _ = deepnorm_constants("encoder-only", c["num_layers"])
    for layer in model.encoder.layers:
        if variant == "beta only":
            layer.alpha = 1.0
        elif variant == "alpha only":
            layer.alpha = alpha
        elif variant == "swapped":
            layer.__class__ = SwappedLayer  # same parameters, the swapped forward
    return model


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


def stack_diagnostics(
    model: SequenceModel, tokens: Tensor, targets: Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Two measurements of the stack on one batch: the LayerNorms' inputs and the stream's gradient.

    Args:
        model: a :class:`SequenceModel` (any of :data:`VARIANTS`); its ``.grad`` s are left at None.
        tokens, targets: int64 ``(B, T)``.

    Returns:
        ``(ln_input_ratio, stream_grad)``, float64:

        - ``ln_input_ratio``, ``(2 L,)``: for each norm (layer 1's attention norm, its FFN norm,
          layer 2's, ...), ``||z|| / ||w x||``, where ``z = w x + (branch)`` is the norm's input,
          ``x`` the layer's stream and ``w`` :func:`shortcut_weight` (Frobenius norms over the
          batch). It is 1 when the branch adds nothing to the shortcut's size; a LayerNorm scales
          the gradient that reaches ``x`` through the shortcut by about ``w sqrt(d) / ||z||``,
          i.e. by about 1 / ratio when ``x`` has the size of a normalized stream.
        - ``stream_grad``, ``(L + 1,)``: ``||dLoss / dx_l||`` for the stream ``x_0`` (the stack's
          input) and ``x_l``, the output of layer ``l``; the loss is the mean cross-entropy.
    """
    layers = list(model.encoder.layers)
    seen: dict[str, list[Tensor]] = {"x": [], "z": []}
    hooks = []
    for layer in layers:
        for sub, norm in ((layer.self_attn, layer.attn_norm), (layer.ffn, layer.ffn_norm)):
            hooks.append(sub.register_forward_pre_hook(lambda m, a: seen["x"].append(a[0])))
            hooks.append(norm.register_forward_pre_hook(lambda m, a: seen["z"].append(a[0])))
    try:
        x = model.embed_tokens(tokens)  # (B, T, C)
        stream = [x]
        for layer in layers:
            x = layer(x)  # (B, T, C)
            stream.append(x)
        for s in stream:
            s.retain_grad()
        logits = model.head(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, model.vocab_size), targets.reshape(-1))
        loss.backward()
    finally:
        for hook in hooks:
            hook.remove()
    weights = np.repeat([shortcut_weight(layer) for layer in layers], 2)  # (2L,)
    z_size = np.array([z.detach().double().norm().item() for z in seen["z"]])  # (2L,)
    x_size = np.array([x.detach().double().norm().item() for x in seen["x"]])  # (2L,)
    grads = np.array([s.grad.double().norm().item() for s in stream])  # (L + 1,)
    model.zero_grad(set_to_none=True)
    return z_size / (weights * x_size), grads


@dataclass
class TrainingRun:
    """What :func:`train_sequence_model` records.

    Attributes:
        losses: training cross-entropy of every step, float64 ``(steps,)`` (NaN if it diverged).
        output_change: :func:`relative_output_change` after every step, float64 ``(steps,)``.
        final_loss: cross-entropy on a held-out batch after the last step.
        final_accuracy: fraction of held-out tokens predicted right.
        diagnosed_steps: the numbers of updates after which :func:`stack_diagnostics` ran, int
            ``(K,)``.
        ln_input_ratio, stream_grad: its results there, float64 ``(K, 2 L)`` and ``(K, L + 1)``.
    """

    losses: np.ndarray
    output_change: np.ndarray
    final_loss: float
    final_accuracy: float
    diagnosed_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    ln_input_ratio: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    stream_grad: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


def train_sequence_model(
    model: SequenceModel,
    seed: int = 0,
    *,
    batch_size: int = 32,
    steps: int = 100,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.98),
    change_steps: int | None = None,
    diagnose_at: Sequence[int] = (),
) -> TrainingRun:
    """Train ``model`` on :func:`reverse_task` with Adam at a constant lr (no warm-up).

    ``seed`` fixes the training batches, the fixed batch and the held-out batch (not the model:
    seed its construction yourself). The model is trained in place. The output change is
    measured on a fixed batch of ``batch_size`` sequences after each of the first
    ``change_steps`` steps (all steps if None; NaN after that): each measurement costs two
    forward passes. :func:`stack_diagnostics` runs on the same fixed batch (targets: its
    reversal) after ``t`` updates for each ``t`` in ``diagnose_at`` (0 .. ``steps``); it costs a
    forward and a backward pass and does not change the training. Training stops at the first
    non-finite loss (the rest stays NaN; later diagnostics are skipped).
    """
    vocab_size, seq_len = model.vocab_size, model.seq_len
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    data = torch.Generator().manual_seed(seed)
    fixed, _ = reverse_task(batch_size, seq_len, vocab_size, data)  # (B, T)
    with torch.no_grad():
        reference = model.features(fixed)  # (B, T, C): F(x; theta_0)
    losses = np.full(steps, np.nan)
    change = np.full(steps, np.nan)
    wanted = sorted(set(diagnose_at))
    if wanted and not 0 <= wanted[0] <= wanted[-1] <= steps:
        raise ValueError(f"train_sequence_model: diagnose_at must lie in 0 .. {steps}")
    diagnosed: list[int] = []
    ratios: list[np.ndarray] = []
    grads: list[np.ndarray] = []

    def diagnose(t: int) -> None:
        if t in wanted:
            ratio, grad = stack_diagnostics(model, fixed, fixed.flip(1))
            diagnosed.append(t)
            ratios.append(ratio)
            grads.append(grad)

    for step in range(steps):
        diagnose(step)
        loss, _ = reverse_task_loss(model, batch_size, data)
        if not torch.isfinite(loss):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.item()
        if change_steps is None or step < change_steps:
            change[step] = relative_output_change(model, reference, fixed)
    else:
        diagnose(steps)
    final, accuracy = held_out_score(model, data)
    if not math.isfinite(final):
        accuracy = float("nan")
    num_layers = len(model.encoder.layers)
    return TrainingRun(
        losses,
        change,
        final,
        accuracy,
        np.array(diagnosed, dtype=int),
        np.array(ratios).reshape(-1, 2 * num_layers),
        np.array(grads).reshape(-1, num_layers + 1),
    )


def cached_array(cache: dict, variant: str, key: str) -> np.ndarray:
    """One recorded quantity of a variant's runs in a runs file, stacked over its seeds.

    ``cache`` is the dict that :func:`main` writes (``book/data/deepnorm_runs.json``); ``key`` one
    of :func:`run_variant`'s keys. Returns float64 ``(seeds, ...)`` in the order of
    ``cache["seeds"]`` (None, a diverged value, as NaN).
    """
    by_seed = {r["seed"]: r[key] for r in cache["runs"] if r["variant"] == variant}
    rows = [by_seed[s] for s in cache["seeds"]]
    flat = [[np.nan if v is None else v for v in np.ravel(row)] for row in rows]
    return np.array(flat, dtype=float).reshape(len(rows), *np.shape(rows[0]))


def lower_half_gradient(stream_grad: np.ndarray) -> np.ndarray:
    """The gradient reaching the lower half of the stack, relative to the top.

    ``stream_grad``: ``(..., L + 1)``, ``||dLoss / dx_l||`` for l = 0 .. L (as recorded by
    :func:`stack_diagnostics`). Returns ``(...)``: the geometric mean over l = 1 .. L/2 of
    ``||dLoss / dx_l|| / ||dLoss / dx_L||``.
    """
    relative = stream_grad / stream_grad[..., -1:]  # (..., L + 1)
    half = (stream_grad.shape[-1] - 1) // 2
    return np.exp(np.log(relative[..., 1 : half + 1]).mean(-1))


def _rounded(values: np.ndarray, digits: int = 6) -> list:
    """A float array as nested lists of floats with ``digits`` significant digits (NaN: None)."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim > 1:
        return [_rounded(row, digits) for row in arr]
    return [float(f"{v:.{digits}g}") if math.isfinite(v) else None for v in arr]


def run_variant(variant: str, seed: int, config: dict | None = None) -> dict:
    """Build :func:`make_variant` and train it with :func:`train_sequence_model`, on one thread.

    Returns a JSON-ready dict: ``variant``, ``seed``, ``losses`` (``(steps,)``),
    ``output_change`` (``(change_steps,)``), ``final_loss``, ``final_accuracy``,
    ``diagnosed_steps``, ``ln_input_ratio`` (``(K, 2 L)``), ``stream_grad`` (``(K, L + 1)``)
    (floats with 6 significant digits, the last two with 4; NaN as None) and ``seconds``.
    """
    c = {**CHAPTER_CONFIG, **(config or {})}
    torch.set_num_threads(1)
    model = make_variant(variant, seed, c)
    start = time.perf_counter()
    run = train_sequence_model(
        model,
        seed,
        batch_size=c["batch_size"],
        steps=c["steps"],
        lr=c["lr"],
        betas=tuple(c["betas"]),
        change_steps=c["change_steps"],
        diagnose_at=[t for t in c["diagnose_at"] if t <= c["steps"]],
    )
    return {
        "variant": variant,
        "seed": seed,
        "losses": _rounded(run.losses),
        "output_change": _rounded(run.output_change[: c["change_steps"]]),
        "final_loss": run.final_loss,
        "final_accuracy": run.final_accuracy,
        "diagnosed_steps": run.diagnosed_steps.tolist(),
        "ln_input_ratio": _rounded(run.ln_input_ratio, 4),
        "stream_grad": _rounded(run.stream_grad, 4),
        "seconds": time.perf_counter() - start,
    }


def _run_pair(pair: tuple[str, int]) -> dict:
    return run_variant(*pair)


def chapter_runs(
    variants: Sequence[str] = VARIANTS, seeds: Sequence[int] = CHAPTER_SEEDS, jobs: int = 1
) -> list[dict]:
    """:func:`run_variant` for every variant and seed (variant-major), on ``jobs`` processes."""
    pairs = [(v, s) for v in variants for s in seeds]
    if jobs <= 1:
        return [_run_pair(p) for p in pairs]
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return pool.map(_run_pair, pairs, chunksize=1)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.deepnorm runs --out FILE [--jobs N]``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.deepnorm")
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs", help="train every variant on every seed; write JSON")
    runs.add_argument("--out", type=Path, required=True)
    runs.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = chapter_runs(jobs=args.jobs)
    config = {
        **CHAPTER_CONFIG,
        "betas": list(CHAPTER_CONFIG["betas"]),
        "diagnose_at": list(CHAPTER_CONFIG["diagnose_at"]),
    }
    record = {
        "config": config,
        "variants": list(VARIANTS),
        "seeds": list(CHAPTER_SEEDS),
        "command": f"python -m addnorm_lib.experiments.deepnorm runs --out {args.out}",
        "torch": torch.__version__,
        "runs": results,
    }
    write_record(args.out, record)
    print(f"{len(results)} runs in {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
