"""Per-layer probes: what a deep network's activations and gradients look like, layer by layer.

The chapters on depth, residual connections, BatchNorm, DeepNorm and norm placement all ask the
same questions of a model: how large are the activations after each layer, and how large is the
gradient that reaches each layer? This module answers them with forward and backward hooks, on
any ``torch.nn.Module``, so that every chapter measures the same way.

- :func:`set_seed` seeds Python, numpy and torch: one call at the top of a chapter.
- :class:`Probe` records, for chosen submodules, their outputs in the forward pass and the
  gradient of the loss with respect to those outputs in the backward pass.
- :class:`DeepMLP` is the deep network of the experiments: plain layers
  ``h = act(h W + b)`` or residual blocks ``h = shortcut * h + act(h W1 + b1) W2``, with the
  initializations the chapters compare (:data:`INITS`).
- :func:`gradient_norms_at_init` is the experiment most chapters start from: one batch, one
  backward pass, the gradient norm at every layer.

Everything is seeded and runs on the CPU in float32 unless a dtype is given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from addnorm_lib import lookup

__all__ = [
    "ACTIVATIONS",
    "INITS",
    "DeepMLP",
    "LayerRecord",
    "Probe",
    "ResidualBlock",
    "gradient_norms_at_init",
    "init_linear",
    "set_seed",
]

#: The activations the chapters compare, by name.
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "identity": nn.Identity,
}

#: The weight initializations the chapters compare: name -> std of the weights of a
#: (fan_in, fan_out) layer, before any extra gain. "naive" is a fixed std of 1 (scaled by the
#: caller's ``weight_scale``); Xavier/Glorot keeps the variance for linear/tanh layers, He/Kaiming
#: for ReLU layers.
INITS: dict[str, Callable[[int, int], float]] = {
    "naive": lambda fan_in, fan_out: 1.0,
    "xavier": lambda fan_in, fan_out: math.sqrt(2.0 / (fan_in + fan_out)),
    "he": lambda fan_in, fan_out: math.sqrt(2.0 / fan_in),
}


def set_seed(seed: int) -> None:
    """Seed Python's ``random``, numpy's global generator and torch (CPU)."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (the global generator that older code may use)
    torch.manual_seed(seed)


def init_linear(layer: nn.Linear, init: str, scale: float = 1.0) -> None:
    """Normal weights with std ``scale * INITS[init](fan_in, fan_out)``; zero bias. In place.

    ``init`` is a name in :data:`INITS`; any other raises ValueError.
    """
    std = lookup(INITS, init, "init")
    fan_out, fan_in = layer.weight.shape  # torch stores (out_features, in_features)
    with torch.no_grad():
        layer.weight.normal_(0.0, scale * std(fan_in, fan_out))
        if layer.bias is not None:
            layer.bias.zero_()


class ResidualBlock(nn.Module):
    """``y = shortcut * x + branch(x)``, with ``branch(x) = act(x W1 + b1) W2``.

    Args:
        width: features C of x and y.
        hidden: width H of the branch's hidden layer (default: C).
        activation: a name in :data:`ACTIVATIONS`.
        shortcut: the scale lambda of the identity path; ``None`` removes it (a plain block).
    Shapes: x (..., C) -> y (..., C).
    """

    def __init__(
        self,
        width: int,
        hidden: int | None = None,
        activation: str = "relu",
        shortcut: float | None = 1.0,
    ):
        super().__init__()
        hidden = hidden or width
        self.linear1 = nn.Linear(width, hidden)
        self.activation = lookup(ACTIVATIONS, activation, "activation")()
        self.linear2 = nn.Linear(hidden, width, bias=False)
        self.shortcut = shortcut

    def branch(self, x: Tensor) -> Tensor:
        """The residual branch alone, act(x W1 + b1) W2: shape kept."""
        return self.linear2(self.activation(self.linear1(x)))  # (..., C)

    def forward(self, x: Tensor) -> Tensor:
        """shortcut * x + branch(x), or branch(x) alone: shape kept."""
        if self.shortcut is None:
            return self.branch(x)
        return self.shortcut * x + self.branch(x)

    def extra_repr(self) -> str:
        """The shortcut scale, shown in the module's repr."""
        return f"shortcut={self.shortcut}"


class DeepMLP(nn.Module):
    """A deep MLP of ``depth`` layers of width ``width``: the test subject of the depth chapters.

    With ``residual=False`` each layer is ``h = act(h W + b)``; with ``residual=True`` each layer
    is a :class:`ResidualBlock` ``h = shortcut * h + act(h W1 + b1) W2``. A linear read-in maps
    ``in_features`` to ``width`` and a linear read-out maps ``width`` to ``out_features``; only the
    ``depth`` middle layers are listed in :attr:`layers` (what a :class:`Probe` watches).

    Args:
        in_features, width, out_features, depth: sizes.
        activation: a name in :data:`ACTIVATIONS`.
        init: a name in :data:`INITS`, for every linear layer.
        weight_scale: extra factor on every weight's std (the "init scale" of the widgets).
        residual: residual blocks instead of plain layers.
        shortcut: the residual blocks' shortcut scale lambda.
        branch_scale: extra factor on the std of each block's last weight, W2 (e.g.
            ``1 / sqrt(depth)`` keeps the residual stream from growing with depth).
    """

    def __init__(
        self,
        in_features: int,
        width: int,
        out_features: int,
        depth: int,
        activation: str = "relu",
        init: str = "he",
        weight_scale: float = 1.0,
        residual: bool = False,
        shortcut: float = 1.0,
        branch_scale: float = 1.0,
    ):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        act = lookup(ACTIVATIONS, activation, "activation")
        self.read_in = nn.Linear(in_features, width)
        if residual:
            layers = [
                ResidualBlock(width, activation=activation, shortcut=shortcut) for _ in range(depth)
            ]
        else:
            layers = [nn.Sequential(nn.Linear(width, width), act()) for _ in range(depth)]
        self.layers = nn.ModuleList(layers)
        self.read_out = nn.Linear(width, out_features)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                init_linear(module, init, weight_scale)
        if residual:
            for block in self.layers:
                with torch.no_grad():
                    block.linear2.weight.mul_(branch_scale)

    def forward(self, x: Tensor) -> Tensor:
        """Read-in, the ``depth`` layers, read-out: (N, in_features) -> (N, out_features)."""
        h = self.read_in(x)  # (N, width)
        for layer in self.layers:
            h = layer(h)  # (N, width)
        return self.read_out(h)  # (N, out_features)


@dataclass
class LayerRecord:
    """What a :class:`Probe` saw at one module: its output and the loss's gradient there."""

    name: str
    output: Tensor | None = None  # detached copy of the module's output
    grad_output: Tensor | None = None  # dLoss/d(output), detached

    def activation_std(self) -> float:
        """Std of the recorded output over all its elements (batch and features)."""
        return float(self.output.float().std())

    def gradient_norm(self) -> float:
        """Frobenius norm of dLoss/d(output) over the whole batch."""
        return float(self.grad_output.double().norm())


class Probe:
    """Record the outputs and output gradients of chosen submodules, via hooks.

    Use as a context manager around a forward and a backward pass; the hooks are removed on
    exit. Modules are given as a mapping ``name -> module`` or a sequence (named ``"0"``,
    ``"1"``, ...), in the order of the layers.

    >>> probe = Probe(model.layers)
    >>> with probe:
    ...     model(x).pow(2).mean().backward()
    >>> probe.gradient_norms()  # one per layer, first layer first
    """

    def __init__(self, modules: Mapping[str, nn.Module] | nn.ModuleList | list[nn.Module]):
        if not isinstance(modules, Mapping):
            modules = {str(i): m for i, m in enumerate(modules)}
        if not modules:
            raise ValueError("Probe needs at least one module to watch")
        self.modules = dict(modules)
        self.records = {name: LayerRecord(name) for name in self.modules}
        self._handles: list = []

    def __enter__(self) -> Probe:
        for name, module in self.modules.items():
            self._handles.append(module.register_forward_hook(self._forward_hook(name)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _forward_hook(self, name: str):
        def hook(module, inputs, output):
            self.records[name].output = output.detach().clone()
            if output.requires_grad:
                output.register_hook(self._gradient_hook(name))

        return hook

    def _gradient_hook(self, name: str):
        def hook(grad):
            self.records[name].grad_output = grad.detach().clone()

        return hook

    def _collect(self, what: str, statistic: Callable[[LayerRecord], float]) -> np.ndarray:
        step = {"output": "a forward pass", "grad_output": "a backward pass"}[what]
        missing = [r.name for r in self.records.values() if getattr(r, what) is None]
        if missing:
            raise RuntimeError(
                f"no {what} recorded for layers {missing}: run {step} inside `with probe:` first"
            )
        return np.array([statistic(r) for r in self.records.values()])

    def activation_stds(self) -> np.ndarray:
        """Std of each layer's output over the batch and features, shape (layers,)."""
        return self._collect("output", LayerRecord.activation_std)

    def gradient_norms(self) -> np.ndarray:
        """Norm of dLoss/d(each layer's output), shape (layers,), float64."""
        return self._collect("grad_output", LayerRecord.gradient_norm)

    def outputs(self) -> list[np.ndarray]:
        """Each layer's output as a flat float64 array (for histograms)."""
        self._collect("output", LayerRecord.activation_std)
        return [r.output.double().flatten().numpy() for r in self.records.values()]

    def gradients(self) -> list[np.ndarray]:
        """Each layer's output gradient as a flat float64 array (for histograms)."""
        self._collect("grad_output", LayerRecord.gradient_norm)
        return [r.grad_output.double().flatten().numpy() for r in self.records.values()]


def gradient_norms_at_init(
    model: DeepMLP,
    inputs: Tensor,
    targets: Tensor,
    loss: Callable[[Tensor, Tensor], Tensor] = nn.functional.mse_loss,
) -> tuple[np.ndarray, np.ndarray]:
    """(gradient norms, activation stds) at every layer of ``model.layers`` after one backward.

    inputs: (N, in_features); targets: what ``loss(model(inputs), targets)`` expects.
    The model's parameter gradients are left as the backward pass set them.
    """
    model.zero_grad(set_to_none=True)
    with Probe(model.layers) as probe:
        loss(model(inputs), targets).backward()
    return probe.gradient_norms(), probe.activation_stds()
