"""Train one small model with a learner's norm and one with torch's: the exercises' last cell.

Passing the checks says the norm computes the right numbers on the checks' inputs; training a
model with it says it works where it is used: its parameters are trained, its gradients flow, and
the run follows torch's step for step. Both models start from the same weights and see the same
data, so any gap between the two loss curves comes from the norms alone.
"""

from collections.abc import Callable

import torch
from torch import nn

IN_FEATURES, WIDTH = 8, 32
SAMPLES = 256
NOISE_GAP = 1e-9  # largest loss difference two equal float64 runs can show (rounding only)


def regression_data(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed float64 regression task: x of shape (256, 8), y = sin(x0 * x1), shape (256, 1)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, IN_FEATURES, generator=generator, dtype=torch.float64)
    return x, torch.sin(x[:, :1] * x[:, 1:2])


def small_model(make_norm: Callable[[int], nn.Module], seed: int = 0) -> nn.Module:
    """Linear(8, 32) -> make_norm(32) -> ReLU -> Linear(32, 1), float64, seeded weights."""
    torch.manual_seed(seed)
    first, last = nn.Linear(IN_FEATURES, WIDTH), nn.Linear(WIDTH, 1)  # drawn before the norm
    return nn.Sequential(first, make_norm(WIDTH), nn.ReLU(), last).double()


def training_losses(
    make_norm: Callable[[int], nn.Module], steps: int = 200, lr: float = 1e-2, seed: int = 0
) -> list[float]:
    """The mean squared error before each of ``steps`` Adam steps of :func:`small_model`."""
    model, (x, y) = small_model(make_norm, seed), regression_data()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def compare_training(mine: Callable[[int], nn.Module], theirs: Callable[[int], nn.Module]) -> str:
    """Train with each norm from the same start; say how the two loss curves compare."""
    yours, torchs = training_losses(mine), training_losses(theirs)
    gap = max(abs(a - b) for a, b in zip(yours, torchs, strict=True))
    verdict = (
        "the same run up to rounding: your norm trains as torch's does"
        if gap <= NOISE_GAP
        else "the runs part ways: look at what your norm does that torch's does not"
    )
    return (
        f"after {len(yours)} Adam steps the loss is {yours[-1]:.5f} with yours and "
        f"{torchs[-1]:.5f} with torch's; the two curves differ by at most {gap:.1e}: {verdict}."
    )
