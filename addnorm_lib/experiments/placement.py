"""Experiments of the placement chapter: Post-LN against Pre-LN at initialization and in training.

Xiong et al. (2020) compare the two placements of LayerNorm in a Transformer layer at
initialization (the gradient of the last FFN weight, the size of the Pre-LN stream) and in
training (with and without a learning-rate warm-up). This module builds the small models and
runs both kinds of measurement on the CPU, seeded, in float32:

- :func:`make_stack` builds L :class:`~addnorm_lib.reference.placement.PostLNBlock` s, or L
  :class:`~addnorm_lib.reference.placement.PreLNBlock` s plus the final norm
  (:class:`~addnorm_lib.reference.placement.PreLNStack`), from the course's sublayers.
- :class:`PlacementModel` is a token embedding (optionally scaled), a learned position
  embedding, such a stack and a linear read-out. With the same seed, both placements draw every
  weight from the same random numbers.
- :func:`last_ffn_gradient_norm` is Theorem 1's quantity: the norm of the gradient of the last
  FFN's output weight at initialization; :func:`ffn_gradient_profile` gives it for every layer.
- :func:`final_norm_gradient_parts` takes Pre-LN's quantity apart at the final norm: the size of
  the stream there, of the gradient each token passes back through it, and how well the tokens'
  contributions to the weight's gradient line up.
- :func:`first_adam_step` takes one Adam step from initialization and measures how much it moves
  the weights and how much it changes the stack's (normalized) output.
- :func:`stream_norms` measures ``E||x_l||^2 / d`` after each block of a Pre-LN stack (the lemma).
- :func:`train_placement_model` trains on :func:`~addnorm_lib.experiments.deepnorm.reverse_task`
  with Adam or RAdam and an optional linear warm-up; :func:`warmup_sweep` runs a grid of such
  runs.

The warm-up sweep takes minutes, too long for a book build, so the chapter reads its results
from ``book/data/warmup_sweep.json``. Regenerate that file with::

    .venv/bin/python -m addnorm_lib.experiments.placement warmup-sweep \\
        --out book/data/warmup_sweep.json --jobs 2

``tests/experiments/test_placement.py`` re-runs a few of its runs and compares them with the file.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from addnorm_lib import lookup
from addnorm_lib.experiments.deepnorm import held_out_score, reverse_task_loss
from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.reference.placement import PostLNBlock, PreLNBlock, PreLNStack
from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

__all__ = [
    "PLACEMENTS",
    "SWEEP_CONFIG",
    "PlacementModel",
    "RunSpec",
    "ffn_gradient_profile",
    "final_norm_gradient_parts",
    "first_adam_step",
    "last_ffn_gradient_norm",
    "make_stack",
    "run_spec",
    "stream_norms",
    "sweep_specs",
    "train_placement_model",
    "warmup_sweep",
]

PLACEMENTS = ("post", "pre")
_BLOCKS = {"post": PostLNBlock, "pre": PreLNBlock}
_OPTIMIZERS = {"adam": torch.optim.Adam, "radam": torch.optim.RAdam}

#: The warm-up sweep's model, task and training settings (the chapter's cached sweep uses these).
SWEEP_CONFIG: dict = {
    "num_layers": 12,
    "d_model": 32,
    "nhead": 4,
    "dim_feedforward": 128,
    "seq_len": 8,
    "vocab_size": 12,
    "batch_size": 32,
    "steps": 400,
    "betas": (0.9, 0.98),
}


def make_stack(
    placement: str,
    num_layers: int,
    d_model: int,
    nhead: int,
    dim_feedforward: int,
    activation: str = "gelu",
) -> nn.Module:
    """``num_layers`` Post-LN blocks in sequence, or Pre-LN blocks plus a final LayerNorm.

    Sublayers are :class:`~addnorm_lib.transformer.sublayers.SelfAttention` and
    :class:`~addnorm_lib.transformer.sublayers.FeedForward` (Xavier-normal weights, zero biases),
    built in the same order for both placements, so one seed gives both the same weights. The
    final norm has no random parameters. Input and output ``(B, T, d_model)``. ``placement`` is
    ``"post"`` or ``"pre"``; any other name raises ValueError.
    """
    block = lookup(_BLOCKS, placement, "placement")
    layers = [
        block(
            SelfAttention(d_model, nhead),
            FeedForward(d_model, dim_feedforward, activation),
            d_model,
        )
        for _ in range(num_layers)
    ]
    if placement == "post":
        return nn.Sequential(*layers)
    return PreLNStack(layers, nn.LayerNorm(d_model))


def _blocks(stack: nn.Module) -> list[nn.Module]:
    return list(stack.layers) if isinstance(stack, PreLNStack) else list(stack)


class PlacementModel(nn.Module):
    """Embedding (times ``embed_scale``) + position embedding -> :func:`make_stack` -> read-out.

    Args:
        placement: ``"post"`` or ``"pre"``.
        vocab_size, seq_len: vocabulary and (maximal) sequence length T.
        num_layers, d_model, nhead, dim_feedforward: the stack's sizes.
        embed_scale: factor on the token embedding in ``forward`` (``sqrt(d_model)`` as in the
            original Transformer, 1 for none).
        embed_std: standard deviation of the token embedding's initial entries (N(0, embed_std^2));
            fairseq's Transformer uses ``d_model ** -0.5`` with ``embed_scale = sqrt(d_model)``,
            which gives unit-variance entries. The N(0, 1) draw is scaled in place, so every
            ``embed_std`` sees the same random numbers and the other weights do not change.
            Position embeddings start as N(0, 1).
        activation: the FFN's activation.
        zero_qk: zero the query and key projections of every block, so that every attention
            weight is uniform at initialization (Xiong et al.'s simplified setting).

    ``forward``: int64 tokens ``(B, T)`` -> float32 logits ``(B, T, vocab_size)``.
    """

    def __init__(
        self,
        placement: str,
        vocab_size: int,
        seq_len: int,
        num_layers: int,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        embed_scale: float = 1.0,
        activation: str = "gelu",
        embed_std: float = 1.0,
        zero_qk: bool = False,
    ) -> None:
        super().__init__()
        self.placement, self.vocab_size, self.seq_len = placement, vocab_size, seq_len
        self.embed_scale = embed_scale
        self.embed = nn.Embedding(vocab_size, d_model)  # (V, C), N(0, 1)
        with torch.no_grad():
            self.embed.weight.mul_(embed_std)  # N(0, embed_std^2), same draw
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))  # (T, C)
        self.stack = make_stack(placement, num_layers, d_model, nhead, dim_feedforward, activation)
        self.head = nn.Linear(d_model, vocab_size)
        if zero_qk:
            _zero_qk(self.blocks)

    @property
    def blocks(self) -> list[nn.Module]:
        """The stack's blocks, first to last (without the final norm)."""
        return _blocks(self.stack)

    def embedded(self, tokens: Tensor) -> Tensor:
        """The stack's input ``x_0``: int64 tokens ``(B, T)`` -> float32 ``(B, T, C)``."""
        return self.embed(tokens) * self.embed_scale + self.pos[: tokens.shape[1]]  # (B, T, C)

    def features(self, tokens: Tensor) -> Tensor:
        """The stack's output, what the read-out sees: ``(B, T)`` int64 -> ``(B, T, C)`` float32.

        Both placements normalize it (Post-LN's last norm, Pre-LN's final norm)."""
        return self.stack(self.embedded(tokens))  # (B, T, C)

    def forward(self, tokens: Tensor) -> Tensor:
        """int64 tokens ``(B, T)``, ``T <= seq_len`` -> float32 logits ``(B, T, vocab_size)``."""
        return self.head(self.features(tokens))  # (B, T, V)


def _zero_qk(blocks: Iterable[nn.Module]) -> None:
    """Zero every block's query and key projection weights (uniform attention)."""
    with torch.no_grad():
        for block in blocks:
            block.self_attn.q_proj.weight.zero_()
            block.self_attn.k_proj.weight.zero_()


def _initial_backward(
    placement: str,
    num_layers: int,
    seed: int,
    *,
    d_model: int = 64,
    nhead: int = 4,
    dim_feedforward: int = 256,
    vocab_size: int = 12,
    seq_len: int = 8,
    batch_size: int = 32,
    embed_scale: float = 1.0,
    embed_std: float = 1.0,
    activation: str = "gelu",
    zero_qk: bool = False,
    prepare: Callable[[PlacementModel], None] | None = None,
) -> tuple[PlacementModel, Tensor]:
    """A seeded :class:`PlacementModel`, after one backward pass of the mean cross-entropy of one
    seeded batch of the reversal task; also returns that batch's int64 tokens ``(B, T)``.
    ``prepare``, if given, is called on the model before the forward pass (to add hooks)."""
    set_seed(seed)
    model = PlacementModel(
        placement,
        vocab_size,
        seq_len,
        num_layers,
        d_model,
        nhead,
        dim_feedforward,
        embed_scale,
        activation,
        embed_std,
        zero_qk,
    )
    if prepare is not None:
        prepare(model)
    loss, tokens = reverse_task_loss(model, batch_size, torch.Generator().manual_seed(seed))
    loss.backward()
    return model, tokens


def ffn_gradient_profile(placement: str, num_layers: int, seed: int, **sizes) -> np.ndarray:
    """Frobenius norm of dLoss/dW of every block's FFN output weight (``fc2``), at init.

    The model and the batch are those of :func:`last_ffn_gradient_norm`; ``sizes`` are its
    keyword arguments (plus ``activation`` and ``zero_qk`` of :class:`PlacementModel`).
    Returns float64 of shape ``(num_layers,)``, first block to last.
    """
    model, _ = _initial_backward(placement, num_layers, seed, **sizes)
    return np.array([float(b.ffn.fc2.weight.grad.double().norm()) for b in model.blocks])


def last_ffn_gradient_norm(placement: str, num_layers: int, seed: int, **sizes) -> float:
    """Frobenius norm of dLoss/dW for the last block's FFN output weight (``fc2``), at init:
    Theorem 1's quantity, the last entry of :func:`ffn_gradient_profile` (same arguments).

    The model is a seeded :class:`PlacementModel`; the loss is the mean cross-entropy of one
    batch of :func:`~addnorm_lib.experiments.deepnorm.reverse_task` (random tokens, seeded by
    ``seed``).
    """
    return float(ffn_gradient_profile(placement, num_layers, seed, **sizes)[-1])


def final_norm_gradient_parts(num_layers: int, seed: int, **sizes) -> dict:
    """Theorem 1's Pre-LN quantity at initialization, taken apart at the final norm.

    The last FFN's output weight gets ``dLoss/dW = sum_t g_t h_t^T`` over the batch's tokens
    ``t``, where ``h_t`` is the FFN's hidden activation and ``g_t`` the gradient at the FFN's
    output, which is the final norm's input ``x_L`` (the stream after the last block). The
    model and batch are those of :func:`last_ffn_gradient_norm` with ``placement="pre"``;
    ``sizes`` are its keyword arguments. Returns a dict of floats:

    - ``last_ffn_grad``: ``||dLoss/dW||_F`` (Theorem 1's quantity);
    - ``stream_sq``: the mean over tokens of ``||x_L||^2 / d_model``;
    - ``token_grad``: the mean over tokens of ``||g_t||``;
    - ``hidden``: the mean over tokens of ``||h_t||``;
    - ``alignment``: ``||sum_t g_t h_t^T||_F / sum_t ||g_t|| ||h_t||``, 1 when every token's
      term points the same way, smaller the more they cancel.
    """
    seen: dict[str, Tensor] = {}

    def prepare(model: PlacementModel) -> None:
        def at_final_norm(module: nn.Module, args: tuple, out: Tensor) -> None:
            seen["x"] = args[0].detach()  # (B, T, C)
            args[0].register_hook(lambda g: seen.__setitem__("g", g))

        def at_last_ffn(module: nn.Module, args: tuple, out: Tensor) -> None:
            seen["h"] = module.activation(module.fc1(args[0])).detach()  # (B, T, F)

        model.stack.norm.register_forward_hook(at_final_norm)
        model.blocks[-1].ffn.register_forward_hook(at_last_ffn)

    model, _ = _initial_backward("pre", num_layers, seed, prepare=prepare, **sizes)
    x, g, h = (seen[k].double().flatten(0, 1) for k in ("x", "g", "h"))  # (B*T, .)
    weight_grad = model.blocks[-1].ffn.fc2.weight.grad.double().norm()
    g_size, h_size = g.norm(dim=-1), h.norm(dim=-1)  # (B*T,)
    return {
        "last_ffn_grad": float(weight_grad),
        "stream_sq": float(x.pow(2).sum(-1).mean() / x.shape[-1]),
        "token_grad": float(g_size.mean()),
        "hidden": float(h_size.mean()),
        "alignment": float(weight_grad / (g_size * h_size).sum()),
    }


def first_adam_step(
    placement: str,
    num_layers: int,
    seed: int,
    lr: float,
    *,
    betas: Sequence[float] = (0.9, 0.98),
    **sizes,
) -> dict:
    """One Adam step from initialization: its size, and how much it changes the stack's output.

    The model, batch and gradients are those of :func:`ffn_gradient_profile` (``sizes`` are the
    same keyword arguments). Returns a dict of floats: ``last_ffn_grad`` (Theorem 1's
    quantity), ``grad_norm`` and ``update_norm`` (the norms of the gradient of all parameters
    together and of the step's change to them) and ``output_change`` (the per-token RMS of the
    change of :meth:`PlacementModel.features` on the same batch, averaged over its tokens; the
    features have RMS 1 per token, so this is a relative change).
    """
    model, tokens = _initial_backward(placement, num_layers, seed, **sizes)
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        before = model.features(tokens)  # (B, T, C)
        weights = [p.detach().clone() for p in params]
    torch.optim.Adam(params, lr=lr, betas=tuple(betas)).step()
    with torch.no_grad():
        change = model.features(tokens) - before  # (B, T, C)
    return {
        "last_ffn_grad": float(model.blocks[-1].ffn.fc2.weight.grad.double().norm()),
        "grad_norm": _global_norm(p.grad for p in params if p.grad is not None),
        "update_norm": _global_norm(p.detach() - w for p, w in zip(params, weights, strict=True)),
        "output_change": float(change.double().pow(2).mean(-1).sqrt().mean()),
    }


def stream_norms(
    num_layers: int,
    seed: int,
    *,
    d_model: int = 64,
    nhead: int = 4,
    dim_feedforward: int = 256,
    activation: str = "gelu",
    batch_size: int = 64,
    seq_len: int = 8,
    zero_qk: bool = False,
) -> np.ndarray:
    """``mean ||x_l||^2 / d_model`` over the tokens of a batch, for ``l = 0 .. num_layers``.

    ``x_0`` has N(0, 1) entries (so ``E||x_0||^2 = d_model``); ``x_l`` is the Pre-LN stream after
    ``l`` blocks, before the final norm. ``zero_qk=True`` zeroes the query and key projections, so
    that every attention weight is uniform. Returns float64 of shape ``(num_layers + 1,)``.
    """
    set_seed(seed)
    stack = make_stack("pre", num_layers, d_model, nhead, dim_feedforward, activation)
    if zero_qk:
        _zero_qk(stack.layers)
    x = torch.randn(batch_size, seq_len, d_model)  # (B, T, C)
    sizes = [x.double().pow(2).sum(-1).mean().item() / d_model]
    with torch.no_grad():
        for block in stack.layers:
            x = block(x)  # (B, T, C)
            sizes.append(x.double().pow(2).sum(-1).mean().item() / d_model)
    return np.array(sizes)


@dataclass(frozen=True)
class RunSpec:
    """One training run of the warm-up sweep.

    ``placement`` is ``"post"`` or ``"pre"``; ``optimizer`` is ``"adam"`` or ``"radam"``;
    ``warmup`` is the length of the linear warm-up in steps (0: none); ``lr`` the peak rate;
    ``steps`` the number of training steps (``None``: the sweep config's).
    """

    placement: str
    optimizer: str
    lr: float
    warmup: int
    seed: int
    steps: int | None = None  # None: the config's number of steps


def train_placement_model(
    model: PlacementModel,
    seed: int,
    *,
    lr: float,
    warmup: int = 0,
    optimizer: str = "adam",
    steps: int = 400,
    batch_size: int = 32,
    betas: Sequence[float] = (0.9, 0.98),
) -> dict:
    """Train ``model`` in place on fresh batches of the reversal task; return what happened.

    The learning rate rises linearly from ``lr / warmup`` to ``lr`` over the first ``warmup``
    steps, then stays at ``lr`` (``warmup=0``: constant). ``optimizer``: ``"adam"`` or
    ``"radam"`` (``torch.optim.RAdam``), both with ``betas``. ``seed`` fixes the batches and the
    held-out batch of 512 sequences. Training stops at a non-finite loss.

    Returns a dict: ``losses`` (training loss per step, list of ``steps`` floats, NaN after a
    divergence), ``grad_norms`` and ``update_norms`` (per step, the norm of the gradient of all
    parameters together and of the change the optimizer step made to them, NaN likewise),
    ``final_loss`` and ``final_accuracy`` on the held-out batch.
    """
    opt_class = lookup(_OPTIMIZERS, optimizer, "optimizer")
    opt = opt_class(model.parameters(), lr=lr, betas=tuple(betas))
    if warmup > 0:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    else:
        sched = None
    data = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    losses, grad_norms, update_norms = ([math.nan] * steps for _ in range(3))
    for step in range(steps):
        loss, _ = reverse_task_loss(model, batch_size, data)
        if not torch.isfinite(loss):
            break
        opt.zero_grad()
        loss.backward()
        before = [p.detach().clone() for p in params]
        opt.step()
        if sched is not None:
            sched.step()
        losses[step] = loss.item()
        grad_norms[step] = _global_norm(p.grad for p in params if p.grad is not None)
        update_norms[step] = _global_norm(
            p.detach() - b for p, b in zip(params, before, strict=True)
        )
    final, accuracy = held_out_score(model, data)
    return {
        "losses": losses,
        "grad_norms": grad_norms,
        "update_norms": update_norms,
        "final_loss": final,
        "final_accuracy": accuracy,
    }


def _global_norm(tensors: Iterable[Tensor]) -> float:
    """Euclidean norm of all entries of ``tensors`` together (computed in float64)."""
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors))


def run_spec(spec: RunSpec, config: dict | None = None) -> dict:
    """Build the seeded model of ``spec`` (sizes from ``config``, default :data:`SWEEP_CONFIG`),
    train it with :func:`train_placement_model`, and return ``asdict(spec)`` plus the results
    (``losses`` rounded to 5 decimals, the norms to 4 significant digits) and ``seconds``. Runs on
    one thread."""
    config = {**SWEEP_CONFIG, **(config or {})}
    torch.set_num_threads(1)
    set_seed(spec.seed)
    model = PlacementModel(
        spec.placement,
        config["vocab_size"],
        config["seq_len"],
        config["num_layers"],
        config["d_model"],
        config["nhead"],
        config["dim_feedforward"],
    )
    start = time.perf_counter()
    result = train_placement_model(
        model,
        spec.seed,
        lr=spec.lr,
        warmup=spec.warmup,
        optimizer=spec.optimizer,
        steps=spec.steps or config["steps"],
        batch_size=config["batch_size"],
        betas=config["betas"],
    )
    result["losses"] = [round(v, 5) if math.isfinite(v) else None for v in result["losses"]]
    for key in ("grad_norms", "update_norms"):
        result[key] = [float(f"{v:.4g}") if math.isfinite(v) else None for v in result[key]]
    return {**asdict(spec), **result, "seconds": time.perf_counter() - start}


def sweep_specs(
    lrs: Iterable[float] = (1e-3, 3e-3),
    seeds: Iterable[int] = range(6),
    post_warmups: Iterable[int] = (0, 100, 300),
    pre_warmups: Iterable[int] = (0, 100),
    radam_lrs: Iterable[float] = (3e-3,),
    long_lrs: Iterable[float] = (3e-3,),
    long_steps: int = 1500,
) -> list[RunSpec]:
    """The sweep's grid, for every seed: Adam with each learning rate and warm-up (Post-LN with
    ``post_warmups``, Pre-LN with ``pre_warmups``), RAdam without warm-up for both placements
    at each of ``radam_lrs``, and Post-LN with Adam and no warm-up trained for ``long_steps``
    steps at each of ``long_lrs`` (does a stalled run leave its plateau later?)."""
    lrs, seeds = list(lrs), list(seeds)
    warmups = {"post": list(post_warmups), "pre": list(pre_warmups)}
    specs = [
        RunSpec(p, "adam", lr, w, s)
        for p in PLACEMENTS
        for lr in lrs
        for w in warmups[p]
        for s in seeds
    ]
    specs += [RunSpec(p, "radam", lr, 0, s) for p in PLACEMENTS for lr in radam_lrs for s in seeds]
    specs += [RunSpec("post", "adam", lr, 0, s, long_steps) for lr in long_lrs for s in seeds]
    return specs


@dataclass
class _Sweep:
    config: dict
    command: str
    runs: list = field(default_factory=list)


def warmup_sweep(specs: Sequence[RunSpec], jobs: int = 1) -> list[dict]:
    """:func:`run_spec` for every spec, on ``jobs`` processes (one thread each); same order.

    The longest runs are started first, so that no process is left with one at the end."""
    if jobs <= 1:
        return [run_spec(s) for s in specs]
    import multiprocessing

    order = _longest_first(specs)
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        done = pool.map(run_spec, [specs[i] for i in order], chunksize=1)
    runs: list[dict] = [{}] * len(specs)
    for i, run in zip(order, done, strict=True):
        runs[i] = run
    return runs


def _longest_first(specs: Sequence[RunSpec]) -> list[int]:
    """Indices of ``specs``, those with the most ``steps`` first, otherwise in their order."""
    return sorted(range(len(specs)), key=lambda i: -(specs[i].steps or 0))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m addnorm_lib.experiments.placement warmup-sweep --out FILE [--jobs N]``."""
    parser = argparse.ArgumentParser(prog="python -m addnorm_lib.experiments.placement")
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("warmup-sweep", help="run the warm-up sweep and write it as JSON")
    sweep.add_argument("--out", type=Path, required=True)
    sweep.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    specs = sweep_specs()
    start = time.perf_counter()
    runs = warmup_sweep(specs, args.jobs)
    command = f"python -m addnorm_lib.experiments.placement warmup-sweep --out {args.out}"
    record = _Sweep({**SWEEP_CONFIG, "betas": list(SWEEP_CONFIG["betas"])}, command, runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(asdict(record), indent=1) + "\n", encoding="utf-8")
    print(f"{len(runs)} runs in {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
