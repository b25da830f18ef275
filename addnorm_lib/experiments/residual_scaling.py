"""Training experiments of the residual chapter: the branch's scale, depth, and several seeds.

The residual chapter trains deep MLPs (:class:`~addnorm_lib.experiments.depth.DeepMLP`) on a
small regression task and compares how far they get. A residual block's branch is
``act(x W1 + b1) W2``, and how its last matrix ``W2`` is initialized decides whether the stream
stays the size of its input or grows exponentially with depth. This module names the rules the
chapter compares and trains the same network once per seed:

- :data:`BRANCH_SCALES` maps a rule's name to the factor on ``W2``'s std for a given depth:
  ``"unscaled"`` (1, like any other layer), ``"1/sqrt(L)"`` (GPT-2's rule, with L the number of
  residual blocks) and ``"zero"`` (each block starts as the identity).
- :func:`teacher_task` draws inputs and the targets of a random one-hidden-layer tanh network.
- :func:`seeded_mlp` builds a :class:`~addnorm_lib.experiments.depth.DeepMLP` from a seed.
- :func:`train_regression` trains one network with Adam on mini-batches.
- :func:`train_seeds` trains one network per seed and stacks the results (:class:`SeedRuns`).

Everything runs on the CPU in float32, seeded: seed ``s`` draws the weights (``set_seed(s)``)
and the order of the mini-batches (a generator seeded with ``s + 1``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from addnorm_lib import lookup
from addnorm_lib.experiments.depth import DeepMLP, set_seed

__all__ = [
    "BRANCH_SCALES",
    "SeedRuns",
    "branch_scale",
    "seeded_mlp",
    "teacher_task",
    "train_regression",
    "train_seeds",
]

#: Initialization rules for each residual branch's last weight W2: name -> (depth L -> factor on
#: W2's std). "1/sqrt(L)" is the rule GPT-2 states for its residual layers; "zero" makes every
#: block exactly the identity at initialization.
BRANCH_SCALES: dict[str, Callable[[int], float]] = {
    "unscaled": lambda depth: 1.0,
    "1/sqrt(L)": lambda depth: 1.0 / math.sqrt(depth),
    "zero": lambda depth: 0.0,
}


def branch_scale(rule: str, depth: int) -> float:
    """The factor on W2's std that ``rule`` (a name in :data:`BRANCH_SCALES`) gives ``depth``.

    A depth below 1 raises ValueError, and so does an unknown rule (naming the known ones).
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    return lookup(BRANCH_SCALES, rule, "branch rule")(depth)


def teacher_task(
    n: int = 256, in_features: int = 8, hidden: int = 32, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Inputs and targets of a random smooth teacher, ``tanh(1.5 x W1) W2``, standardized.

    Returns x of shape (n, in_features) and y of shape (n, 1), float32; y has mean 0 and
    standard deviation 1 over the n examples, so predicting 0 gives a loss of about 1.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_features, generator=g)  # (n, in)
    w1 = torch.randn(in_features, hidden, generator=g) / math.sqrt(in_features)  # (in, hidden)
    w2 = torch.randn(hidden, 1, generator=g) / math.sqrt(hidden)  # (hidden, 1)
    y = torch.tanh(1.5 * x @ w1) @ w2  # (n, 1)
    return x, (y - y.mean()) / y.std()


def seeded_mlp(
    seed: int,
    in_features: int,
    width: int,
    depth: int,
    activation: str = "relu",
    init: str = "he",
    residual: bool = False,
    rule: str = "1/sqrt(L)",
) -> DeepMLP:
    """A :class:`DeepMLP` with one output, drawn after ``set_seed(seed)``.

    ``rule`` (a name in :data:`BRANCH_SCALES`) scales each residual block's W2; it is ignored
    for a plain network. Shapes: (N, in_features) -> (N, 1).
    """
    set_seed(seed)
    scale = branch_scale(rule, depth) if residual else 1.0
    return DeepMLP(
        in_features,
        width,
        1,
        depth,
        activation=activation,
        init=init,
        residual=residual,
        branch_scale=scale,
    )


def train_regression(
    net: nn.Module,
    x: Tensor,
    y: Tensor,
    steps: int = 300,
    minibatch: int = 64,
    lr: float = 1e-3,
    batch_seed: int = 1,
) -> tuple[np.ndarray, float, float]:
    """Train ``net`` in place with Adam (default betas and eps) on the mean squared error.

    Each step draws ``minibatch`` examples of (x (n, in), y (n, 1)) with replacement, from a
    generator seeded with ``batch_seed``. Adam runs with ``foreach=True``, the same update as
    the default loop over parameters, computed faster.

    Returns:
        the mini-batch loss of every step, shape (steps,), float64; the loss on all of x before
        training; and the loss on all of x after it.
    """
    with torch.no_grad():
        initial = F.mse_loss(net(x), y).item()
    opt = torch.optim.Adam(net.parameters(), lr=lr, foreach=True)
    g = torch.Generator().manual_seed(batch_seed)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(x), (minibatch,), generator=g)  # (minibatch,)
        loss = F.mse_loss(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        final = F.mse_loss(net(x), y).item()
    return np.array(losses), initial, final


@dataclass
class SeedRuns:
    """One training run per seed, stacked: row i belongs to ``seeds[i]``.

    curves: (seeds, steps) mini-batch losses; initial, final: (seeds,) losses on the whole
    training set before and after training. All float64.
    """

    seeds: tuple[int, ...]
    curves: np.ndarray
    initial: np.ndarray
    final: np.ndarray


def train_seeds(
    build: Callable[[int], nn.Module], seeds: Iterable[int], x: Tensor, y: Tensor, **train_options
) -> SeedRuns:
    """Train ``build(seed)`` for each seed with :func:`train_regression` (batch seed ``seed + 1``).

    ``train_options`` go to :func:`train_regression` (steps, minibatch, lr).
    """
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("train_seeds needs at least one seed")
    runs = [
        train_regression(build(seed), x, y, batch_seed=seed + 1, **train_options) for seed in seeds
    ]
    return SeedRuns(
        seeds=seeds,
        curves=np.stack([curve for curve, _, _ in runs]),  # (seeds, steps)
        initial=np.array([initial for _, initial, _ in runs]),  # (seeds,)
        final=np.array([final for _, _, final in runs]),  # (seeds,)
    )
