"""Measurements of the residual chapter on freshly initialized deep MLPs (no training).

- :func:`measure` records, at every layer of a :class:`~addnorm_lib.experiments.depth.DeepMLP`,
  the norm of the loss's gradient and the standard deviation of the activations, one column per
  seed.
- :func:`first_to_last` turns such a record into one ratio per seed (layer 0 over layer L).
- :func:`stack_jacobian_svals` gives the singular values of d x_L / d x_0 of a stack.
- :func:`pairwise_cosines` and :func:`collapse_by_layer` measure how alike the hidden vectors of
  different inputs are, layer by layer: a plain deep ReLU network maps every input onto nearly
  the same direction (a forward collapse), a residual one does not.

Everything is seeded with :func:`~addnorm_lib.experiments.depth.set_seed`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from addnorm_lib.experiments.depth import DeepMLP, Probe, set_seed

__all__ = [
    "collapse_by_layer",
    "first_to_last",
    "measure",
    "pairwise_cosines",
    "stack_jacobian_svals",
]


def measure(
    activation: str,
    init: str,
    depth: int,
    seeds: Iterable[int] = range(3),
    width: int = 64,
    in_features: int = 16,
    batch: int = 128,
    **mlp_options,
) -> dict[str, np.ndarray]:
    """Per-layer statistics of a freshly initialized DeepMLP (float64), a column per seed.

    For each seed: ``set_seed(seed)``, a DeepMLP (in_features -> width x depth -> 1; the
    ``mlp_options`` go to DeepMLP), a random batch x (batch, in_features) and targets
    (batch, 1), one backward pass of the mean squared error.

    Returns a dict of arrays of shape (depth + 1, seeds); row l is x_l (row 0: the read-in's
    output x_0, the input of the first block):
        "grad": norm of dLoss/dx_l over the batch,
        "std": standard deviation of x_l over the batch and the features.
    """
    columns: dict[str, list] = {"grad": [], "std": []}
    for seed in seeds:
        set_seed(seed)
        model = DeepMLP(in_features, width, 1, depth, activation, init, **mlp_options)
        model = model.double()
        x = torch.randn(batch, in_features, dtype=torch.float64)  # (N, in)
        y = torch.randn(batch, 1, dtype=torch.float64)  # (N, 1)
        with Probe([model.read_in, *model.layers]) as probe:
            F.mse_loss(model(x), y).backward()
        columns["grad"].append(probe.gradient_norms())  # (depth + 1,)
        columns["std"].append(probe.activation_stds())  # (depth + 1,)
    return {k: np.array(v).T for k, v in columns.items()}  # (depth + 1, seeds) each


def first_to_last(stats: dict[str, np.ndarray], key: str = "grad") -> np.ndarray:
    """Ratio of a statistic of :func:`measure` at x_0 to the same at x_L: shape (seeds,)."""
    return stats[key][0] / stats[key][-1]


def stack_jacobian_svals(
    residual: bool, seed: int, depth: int = 50, width: int = 16, activation: str = "sigmoid"
) -> np.ndarray:
    """Singular values of d x_L / d x_0 for ``depth`` layers (Xavier), one input, float64.

    Residual branches have their last weight matrix scaled by 1/sqrt(depth). The read-in and
    read-out are left out: the Jacobian is that of the stack of layers alone.
    Returns shape (width,), largest first.
    """
    set_seed(seed)
    net = DeepMLP(
        width,
        width,
        1,
        depth,
        activation=activation,
        init="xavier",
        residual=residual,
        branch_scale=1 / np.sqrt(depth),
    ).double()
    stack = torch.nn.Sequential(*net.layers)  # x_0 -> x_L
    x0 = torch.randn(width, dtype=torch.float64)  # (C,)
    jac = torch.autograd.functional.jacobian(stack, x0)  # (C, C)
    return torch.linalg.svdvals(jac).numpy()  # (C,)


def pairwise_cosines(h: Tensor) -> float:
    """Mean cosine similarity between the rows of h, over all pairs of distinct rows.

    h: (N, C), N >= 2. Returns a float: 1 when every row points the same way, about 0 for
    independent random rows.
    """
    if len(h) < 2:
        raise ValueError(f"pairwise_cosines needs at least two rows, got {len(h)}")
    u = F.normalize(h.double(), dim=1)  # (N, C) unit rows
    gram = u @ u.T  # (N, N) cosines
    n = len(h)
    return ((gram.sum() - gram.diagonal().sum()) / (n * (n - 1))).item()


@torch.no_grad()
def collapse_by_layer(net: DeepMLP, x: Tensor) -> np.ndarray:
    """:func:`pairwise_cosines` of x_l at every layer l of a DeepMLP, for one batch x.

    x: (N, in_features). Returns shape (depth + 1,), float64: entry 0 is the read-in's output
    x_0, entry l the output of layer l.
    """
    h = net.read_in(x)  # (N, width)
    cosines = [pairwise_cosines(h)]
    for layer in net.layers:
        h = layer(h)  # (N, width)
        cosines.append(pairwise_cosines(h))
    return np.array(cosines)
