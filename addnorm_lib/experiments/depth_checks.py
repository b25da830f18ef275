"""The depth chapter's experiments, as small functions run on several seeds.

The depth chapter (``book/depth.md`` and ``book/depth-deeper.md``) states conclusions that a
single seeded run cannot carry. This module holds the experiments behind them, so that the chapter
runs each on several seeds (the training ones on a cached grid, see
:mod:`addnorm_lib.experiments.depth_grids`) and the tests here can check them on small cases:

- At initialization. :func:`one_step_failure` is the chapter's opening (a deep sigmoid network
  whose first layer does not move); :func:`jacobian_check` builds each layer's Jacobian by hand
  and compares it with autograd; :func:`layer_statistics` measures activations and gradients at
  every layer (:class:`LayerStats`); :func:`layer_gain` compares the predicted factor per layer
  with the measured one.
- Dead ReLU units. :func:`dead_units` finds the hidden units of a plain :class:`DeepMLP` whose
  pre-activation is non-positive on every example of a batch; :func:`gradient_descent_step` is
  the one large step that kills many of them; :func:`train_and_track_dead` keeps training with
  Adam and records which units revive, which die, and that a dead unit's own incoming weights and
  bias get exactly zero gradient all along (its inputs, computed by earlier layers, still change).
- Shifted inputs. A network whose first layer is a BatchNorm or a LayerNorm on its input features
  (:func:`normed_mlp`) is trained on one input distribution (:func:`feature_data`,
  :func:`train_regression`), then fed inputs changed by one of :data:`SHIFTS`
  (:func:`shift_inputs`). :func:`output_change` measures how much its outputs move;
  :func:`reestimate_batchnorm` recomputes BatchNorm's statistics on the new inputs;
  :func:`shift_experiment` runs the whole comparison for one seed.
- Internal covariate shift. :func:`internal_shift` trains a deep network on one fixed batch and
  measures how much what a hidden layer receives has moved.

Everything runs on the CPU in float32, seeded with :func:`~addnorm_lib.experiments.depth.set_seed`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.functional import jacobian

from addnorm_lib import lookup
from addnorm_lib.experiments.depth import DeepMLP, Probe, set_seed

__all__ = [
    "NORMS",
    "SHIFTS",
    "SLOPE_OF_OUTPUT",
    "FailureStep",
    "LayerStats",
    "dead_units",
    "feature_data",
    "gains_over_seeds",
    "gradient_descent_step",
    "internal_shift",
    "jacobian_check",
    "layer_gain",
    "layer_statistics",
    "normed_mlp",
    "one_step_failure",
    "output_change",
    "reestimate_batchnorm",
    "shift_experiment",
    "shift_inputs",
    "train_and_track_dead",
    "train_regression",
]


# --------------------------------------------------------------------------- dead ReLU units


def dead_units(net: DeepMLP, x: Tensor) -> Tensor:
    """Which hidden units of a plain ReLU ``DeepMLP`` are off on every example of ``x``.

    Args:
        net: a :class:`DeepMLP` built with ``residual=False`` (each layer is Linear then ReLU).
        x: (N, in_features) inputs.
    Returns:
        (depth, width) bool tensor: entry (l, j) is True when unit j of hidden layer l has
        pre-activation z <= 0 for all N examples (then ReLU's derivative, 0 at z <= 0 in torch,
        is 0 on every example).
    """
    dead = []
    with torch.no_grad():
        h = net.read_in(x)  # (N, width)
        for layer in net.layers:
            z = layer[0](h)  # (N, width) pre-activation
            dead.append((z <= 0).all(dim=0))  # (width,)
            h = layer[1](z)  # (N, width)
    return torch.stack(dead)  # (depth, width)


def gradient_descent_step(net: nn.Module, x: Tensor, y: Tensor, lr: float) -> None:
    """One step of plain gradient descent on ``mse_loss(net(x), y)``, in place.

    x: (N, in_features); y: (N, out_features). The parameters' ``.grad`` is left as computed.
    """
    net.zero_grad(set_to_none=True)
    F.mse_loss(net(x), y).backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= lr * p.grad


def _incoming(net: DeepMLP) -> list[tuple[Tensor, Tensor]]:
    """(weight (width, width), bias (width,)) of each hidden layer's Linear: one row per unit."""
    return [(layer[0].weight, layer[0].bias) for layer in net.layers]


def train_and_track_dead(
    net: DeepMLP, x: Tensor, y: Tensor, lr: float = 1e-3, steps: int = 200
) -> dict:
    """Train ``net`` with Adam on the full batch (x, y) and follow its dead units step by step.

    A fresh ``torch.optim.Adam`` (no weight decay) takes ``steps`` steps on
    ``mse_loss(net(x), y)``. Before every step the dead units on ``x`` (:func:`dead_units`) are
    recorded, and the gradient on their incoming weights and bias is checked.

    Args:
        net: a plain ReLU :class:`DeepMLP`, trained in place.
        x: (N, in_features) inputs; y: (N, out_features) targets; float32.
    Returns:
        a dict of
        ``"dead_start"``, ``"dead_end"``: (depth, width) bool masks before the first and after
        the last step;
        ``"dead_throughout"``: (depth, width) bool, dead before every step and after the last;
        ``"revived"``, ``"newly_dead"``, ``"still_dead"``: ints, units dead at the start and
        alive at the end, alive at the start and dead at the end, dead at both times;
        ``"max_dead_row_grad"``: float, the largest |gradient| on any dead unit's incoming
        weights or bias over all steps (0.0: the zero gradient is exact);
        ``"dead_throughout_unchanged"``: bool, every unit dead throughout has bit-for-bit the
        incoming weights and bias it started with;
        ``"revived_with_start_weights"``: bool, every unit dead at the start had, at the first
        check at which it was alive again, bit-for-bit its starting weights and bias (so what
        brought it back was a change of its inputs);
        ``"died_during"``: int, units alive at some check and dead at the next one (a death
        during training, when Adam's moments are no longer zero);
        ``"died_and_revived"``: int, units that died during training and were alive again at a
        later check;
        ``"mid_revivals"``, ``"mid_revivals_same_weights"``: ints, the returns to life of units
        that died during training (a unit can die and return more than once), and how many of
        those returns found bit-for-bit the incoming weights and bias the unit had at the first
        check at which it was dead.
    """
    start = [(w.detach().clone(), b.detach().clone()) for w, b in _incoming(net)]
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    dead_start = dead_units(net, x)  # (depth, width)
    throughout = dead_start.clone()
    dead_since_start = dead_start.clone()  # (depth, width): dead at every check so far
    revived_with_start_weights = True
    max_dead_row_grad = 0.0

    # units that die during training: their weights when first seen dead, one row per unit
    at_death = [(w.detach().clone(), b.detach().clone()) for w, b in _incoming(net)]
    previous = dead_start.clone()  # (depth, width): dead at the previous check
    mid_spell = torch.zeros_like(dead_start)  # (depth, width): dead since a death in training
    died_during = torch.zeros_like(dead_start)
    died_and_revived = torch.zeros_like(dead_start)
    mid = {"revivals": 0, "same": 0}

    def note_revivals(dead: Tensor) -> None:
        nonlocal revived_with_start_weights
        back = dead_since_start & ~dead  # (depth, width): alive for the first time since start
        for (w, b), (w0, b0), mask in zip(_incoming(net), start, back, strict=True):
            same = torch.equal(w[mask], w0[mask]) and torch.equal(b[mask], b0[mask])
            revived_with_start_weights &= same
        dead_since_start.logical_and_(dead)
        died, mid_back = ~previous & dead, mid_spell & ~dead  # (depth, width) each
        for (w, b), (wd, bd), now_dead, now_back in zip(
            _incoming(net), at_death, died, mid_back, strict=True
        ):
            w, b = w.detach(), b.detach()  # (width, width), (width,)
            rows_same = (w[now_back] == wd[now_back]).all(dim=1) & (b[now_back] == bd[now_back])
            mid["revivals"] += int(now_back.sum())
            mid["same"] += int(rows_same.sum())
            wd[now_dead], bd[now_dead] = w[now_dead], b[now_dead]
        died_during.logical_or_(died)
        died_and_revived.logical_or_(mid_back)
        mid_spell.logical_and_(~mid_back).logical_or_(died)
        previous.copy_(dead)

    for _ in range(steps):
        dead = dead_units(net, x)  # (depth, width), on the weights this step differentiates
        note_revivals(dead)
        throughout &= dead
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(net(x), y).backward()
        for (w, b), mask in zip(_incoming(net), dead, strict=True):
            rows = torch.cat([w.grad[mask].flatten(), b.grad[mask]])  # dead units' gradients
            if rows.numel():
                max_dead_row_grad = max(max_dead_row_grad, rows.abs().max().item())
        optimizer.step()
    dead_end = dead_units(net, x)
    note_revivals(dead_end)
    throughout &= dead_end
    unchanged = all(
        torch.equal(w[mask], w0[mask]) and torch.equal(b[mask], b0[mask])
        for (w, b), (w0, b0), mask in zip(_incoming(net), start, throughout, strict=True)
    )
    return {
        "dead_start": dead_start,
        "dead_end": dead_end,
        "dead_throughout": throughout,
        "revived": int((dead_start & ~dead_end).sum()),
        "newly_dead": int((~dead_start & dead_end).sum()),
        "still_dead": int((dead_start & dead_end).sum()),
        "max_dead_row_grad": max_dead_row_grad,
        "dead_throughout_unchanged": unchanged,
        "revived_with_start_weights": revived_with_start_weights,
        "died_during": int(died_during.sum()),
        "died_and_revived": int(died_and_revived.sum()),
        "mid_revivals": mid["revivals"],
        "mid_revivals_same_weights": mid["same"],
    }


# --------------------------------------------------------------------------- shifted inputs

#: The normalization layers that :func:`normed_mlp` puts on the input features, by name.
NORMS: dict[str, Callable[[int], nn.Module]] = {
    "batch": nn.BatchNorm1d,
    "layer": nn.LayerNorm,
}


def normed_mlp(norm: str, in_features: int, width: int = 64, depth: int = 3) -> nn.Sequential:
    """A norm on the input features followed by a ReLU :class:`DeepMLP` (He init), one output.

    Args:
        norm: a name in :data:`NORMS` (torch's BatchNorm1d or LayerNorm, default arguments).
    Shapes: (N, in_features) -> (N, 1). ``model[0]`` is the norm, ``model[1]`` the MLP.
    """
    make_norm = lookup(NORMS, norm, "norm")
    return nn.Sequential(make_norm(in_features), DeepMLP(in_features, width, 1, depth, "relu"))


def feature_data(
    n: int, mean: Tensor, std: Tensor, weights: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """A regression data set whose features have their own means and scales.

    A standard normal latent u is measured as ``x = mean + std * u`` (per feature); the target
    depends on u only: ``y = sin(u @ weights)``.

    Args:
        n: examples; mean, std: (C,) per-feature offset and scale; weights: (C, 1).
    Returns:
        (x (n, C), y (n, 1), u (n, C)), float32.
    """
    u = torch.randn(n, mean.numel(), generator=generator)  # (n, C)
    return mean + std * u, torch.sin(u @ weights), u


def train_regression(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    steps: int = 300,
    batch: int = 64,
    lr: float = 3e-3,
    generator: torch.Generator | None = None,
) -> float:
    """Train ``model`` (in train mode) with Adam on random mini-batches of (x, y); eval mode after.

    A BatchNorm in the model thus collects its running statistics from the training batches.
    x: (N, C); y: (N, 1). Returns the last mini-batch's mse loss.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=generator)  # (batch,)
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


def _random_orthogonal(c: int, generator: torch.Generator) -> Tensor:
    """A (c, c) orthogonal matrix: Q of the QR decomposition of a Gaussian matrix."""
    q, r = torch.linalg.qr(torch.randn(c, c, generator=generator))
    return q * torch.sign(torch.diagonal(r))  # (c, c), column signs fixed


def _per_feature(x: Tensor, g: torch.Generator) -> Tensor:
    """x * a + c with one positive scale a and one offset c per feature (column)."""
    a = torch.empty(1, x.shape[1]).uniform_(0.5, 2.0, generator=g)  # (1, C)
    c = 3.0 * torch.randn(1, x.shape[1], generator=g)  # (1, C)
    return x * a + c


def _per_example(x: Tensor, g: torch.Generator) -> Tensor:
    """x * a + c with one positive scale a and one offset c per example (row)."""
    a = torch.empty(x.shape[0], 1).uniform_(0.5, 2.0, generator=g)  # (N, 1)
    c = 3.0 * torch.randn(x.shape[0], 1, generator=g)  # (N, 1)
    return x * a + c


def _mixing(x: Tensor, g: torch.Generator) -> Tensor:
    """Rotate the features about their mean: every feature's mean is kept, features are mixed."""
    mean = x.mean(dim=0, keepdim=True)  # (1, C)
    return mean + (x - mean) @ _random_orthogonal(x.shape[1], g)  # (N, C)


#: The input shifts of the chapter, by name: each maps (N, C) inputs and a generator to (N, C).
SHIFTS: dict[str, Callable[[Tensor, torch.Generator], Tensor]] = {
    "per-feature affine": _per_feature,
    "per-example affine": _per_example,
    "features mixed": _mixing,
}


def shift_inputs(x: Tensor, kind: str, generator: torch.Generator) -> Tensor:
    """``x`` (N, C) changed by the shift ``kind``, a name in :data:`SHIFTS`: (N, C)."""
    return lookup(SHIFTS, kind, "shift")(x, generator)


def reestimate_batchnorm(model: nn.Module, x: Tensor, batch: int = 256) -> nn.Module:
    """A copy of ``model`` whose BatchNorm statistics are recomputed on ``x``, in eval mode.

    Every ``nn.BatchNorm1d`` of the copy forgets its running statistics (``reset_running_stats``)
    and averages, with ``momentum=None`` (a cumulative average), the statistics of the batches of
    ``x`` (N, C) that a forward pass in train mode shows it. No weight is changed; ``model`` itself
    is left as it was.
    """
    adapted = copy.deepcopy(model)
    for module in adapted.modules():
        if isinstance(module, nn.BatchNorm1d):
            module.reset_running_stats()
            module.momentum = None
    adapted.train()
    with torch.no_grad():
        for start in range(0, x.shape[0], batch):
            adapted(x[start : start + batch])
    return adapted.eval()


def output_change(before: Tensor, after: Tensor) -> float:
    """Relative RMS change of outputs: ``||after - before|| / ||before - mean(before)||``.

    before, after: (N, out) outputs for the same examples. 0 means unchanged; 1 is a change as
    large as the outputs' own spread over the examples.
    """
    spread = (before - before.mean(dim=0)).norm()
    return ((after - before).norm() / spread).item()


def shift_experiment(
    seed: int,
    in_features: int = 16,
    n_train: int = 4096,
    n_test: int = 4096,
    steps: int = 300,
    lr: float = 3e-3,
) -> dict:
    """For one seed: how much do BatchNorm and LayerNorm networks' outputs move under each shift?

    Draws per-feature means (std 2) and scales (uniform in [0.5, 2]), trains one
    ``normed_mlp("batch")`` and one ``normed_mlp("layer")`` on :func:`feature_data`, and feeds
    them a fresh test set x and, for each kind in :data:`SHIFTS`, its shifted copy x'. Three
    ways of running a model are compared:

    - ``"BatchNorm, training statistics"``: the BN network in eval mode (running statistics from
      training), on x and on x';
    - ``"BatchNorm, re-estimated"``: its statistics recomputed on x for x, and on x' for x'
      (:func:`reestimate_batchnorm`);
    - ``"LayerNorm"``: the LN network on x and on x'.

    Returns:
        ``{"change": {(kind, way): float}}`` with :func:`output_change` between the outputs on x
        and on x', plus ``"loss"``: the BN network's test mse on x (training statistics), and on
        the per-feature affine x' with training and with re-estimated statistics (the targets
        are those of x: the shift changes how the inputs are measured, not what they measure).
    """
    set_seed(seed)
    g = torch.Generator().manual_seed(seed)
    mean = 2.0 * torch.randn(in_features, generator=g)  # (C,)
    std = torch.empty(in_features).uniform_(0.5, 2.0, generator=g)  # (C,)
    weights = torch.randn(in_features, 1, generator=g) / in_features**0.5  # (C, 1)
    x_train, y_train, _ = feature_data(n_train, mean, std, weights, g)
    x_test, y_test, _ = feature_data(n_test, mean, std, weights, g)
    models = {}
    for norm in NORMS:
        models[norm] = normed_mlp(norm, in_features)
        train_regression(models[norm], x_train, y_train, steps=steps, lr=lr, generator=g)
    change, loss = {}, {}
    with torch.no_grad():
        bn, ln = models["batch"], models["layer"]
        bn_test, ln_test = bn(x_test), ln(x_test)  # (n_test, 1) each
        bn_test_fresh = reestimate_batchnorm(bn, x_test)(x_test)
        loss["training statistics, unshifted"] = F.mse_loss(bn_test, y_test).item()
        for kind in SHIFTS:
            x_shift = shift_inputs(x_test, kind, g)  # (n_test, C)
            bn_fresh = reestimate_batchnorm(bn, x_shift)(x_shift)
            change[kind, "BatchNorm, training statistics"] = output_change(bn_test, bn(x_shift))
            change[kind, "BatchNorm, re-estimated"] = output_change(bn_test_fresh, bn_fresh)
            change[kind, "LayerNorm"] = output_change(ln_test, ln(x_shift))
            if kind == "per-feature affine":
                loss["training statistics, shifted"] = F.mse_loss(bn(x_shift), y_test).item()
                loss["re-estimated, shifted"] = F.mse_loss(bn_fresh, y_test).item()
    return {"change": change, "loss": loss}


# --------------------------------------------------------------------------- at initialization


@dataclass(frozen=True)
class FailureStep:
    """One backward pass and one gradient-descent step of a deep sigmoid MLP (float32).

    grad_first, grad_last: norms of the gradients of the first and last hidden layers' weights;
    rel_step: the largest |lr * grad / weight| over the first layer's weights;
    changed: the fraction of the first layer's weights that the step changed at all.
    """

    grad_first: float
    grad_last: float
    rel_step: float
    changed: float


def _opening_net_after_backward(
    seed: int, depth: int, width: int, in_features: int, batch: int
) -> DeepMLP:
    """The opening experiment's float32 sigmoid/Xavier ``DeepMLP`` after one backward pass of
    the mse loss on a random batch x (batch, in_features), y (batch, 1): its ``.grad`` set."""
    set_seed(seed)
    net = DeepMLP(in_features, width, 1, depth=depth, activation="sigmoid", init="xavier")
    x = torch.randn(batch, in_features)  # (N, in_features)
    y = torch.randn(batch, 1)  # (N, 1)
    F.mse_loss(net(x), y).backward()
    return net


def one_step_failure(
    seed: int,
    depth: int = 30,
    width: int = 64,
    in_features: int = 16,
    batch: int = 128,
    lr: float = 0.1,
) -> FailureStep:
    """The chapter's opening experiment, for one seed.

    A ``DeepMLP(in_features, width, 1, depth, "sigmoid", "xavier")`` in float32, a random batch
    x (batch, in_features) and targets y (batch, 1), one backward pass of the mse loss, then one
    step ``p -= lr * p.grad`` on every parameter.
    """
    net = _opening_net_after_backward(seed, depth, width, in_features, batch)
    first, last = net.layers[0][0].weight, net.layers[-1][0].weight  # (width, width) each
    before = first.detach().clone()
    grad_first, grad_last = first.grad.norm().item(), last.grad.norm().item()
    rel_step = (lr * first.grad / before).abs().max().item()
    with torch.no_grad():
        for p in net.parameters():
            p -= lr * p.grad
    changed = (first != before).float().mean().item()
    return FailureStep(grad_first, grad_last, rel_step, changed)


def one_step_threshold(
    seed: int,
    depth: int = 30,
    width: int = 64,
    in_features: int = 16,
    batch: int = 128,
    lr: float = 0.1,
) -> tuple[float, int, int]:
    """The smallest factor k on ``lr`` at which the step of ``one_step_failure`` (same seed and
    network) changes any weight of the first layer, in float32.

    A float32 weight w moves under a step -u once |u| exceeds half the gap from w to its
    neighbour in the direction of -u, so k = min over the weights of that half-gap over
    |lr * grad|. Returns (k, the weights changed by the step with k * 0.999 * lr, the weights
    changed with k * 1.001 * lr): the check that k is the threshold.
    """
    net = _opening_net_after_backward(seed, depth, width, in_features, batch)
    first = net.layers[0][0].weight  # (width, width)
    w = first.detach().numpy().copy()  # (width, width) float32
    g = first.grad.numpy().copy()  # (width, width) float32
    neighbour = np.nextafter(w, w - np.sign(g) * np.inf)  # (width, width) next float32 that way
    half_gap = np.abs(neighbour.astype(np.float64) - w) / 2  # (width, width)
    step = np.abs(lr * g.astype(np.float64))  # (width, width)
    moving = step > 0
    k = float((half_gap[moving] / step[moving]).min())
    w_t, g_t = first.detach(), first.grad
    below = int((w_t - (k * 0.999 * lr) * g_t != w_t).sum())
    above = int((w_t - (k * 1.001 * lr) * g_t != w_t).sum())
    return k, below, above


def jacobian_check(seed: int, depth: int = 6, width: int = 8) -> tuple[float, float]:
    """Every layer's Jacobian by hand, diag(phi'(z_l)) W_l, against autograd's (float64).

    ``jacobian`` is ``torch.autograd.functional.jacobian``.

    A tanh ``DeepMLP(4, width, 1, depth)`` with Xavier weights, one example x (1, 4) and a
    squared-error loss. Returns (the largest |J_l by autograd - J_l by hand| over the layers and
    entries, the relative error of dL/dh_L J_L ... J_1 against the dL/dh_0 of autograd's backward
    pass).
    """
    set_seed(seed)
    net = DeepMLP(4, width, 1, depth=depth, activation="tanh", init="xavier").double()
    x = torch.randn(1, 4, dtype=torch.float64)  # (1, 4)
    y = torch.randn(1, 1, dtype=torch.float64)  # (1, 1)
    h0 = net.read_in(x).detach().requires_grad_(True)  # (1, width): a leaf
    hs = [h0]
    for layer in net.layers:
        hs.append(layer(hs[-1]))  # (1, width) each: h_1 .. h_L
    hs[-1].retain_grad()
    (0.5 * (net.read_out(hs[-1]) - y).pow(2).sum()).backward()
    jac_err, g = 0.0, hs[-1].grad[0]  # g: (width,) dL/dh_L
    by_hand = []
    for layer, h_prev in zip(net.layers, hs[:-1], strict=True):
        h_prev = h_prev.detach()[0]  # (width,)
        linear = layer[0]
        z = linear(h_prev)  # (width,) pre-activation
        slope = 1 - torch.tanh(z) ** 2  # (width,) phi'(z)
        jac = torch.diag(slope) @ linear.weight  # (width, width) by hand
        auto = jacobian(layer, h_prev)  # (width, width) by autograd
        jac_err = max(jac_err, (auto - jac).abs().max().item())
        by_hand.append(jac)
    for jac in reversed(by_hand):  # dL/dh_L J_L J_{L-1} ... J_1
        g = g @ jac  # (width,)
    prod_err = ((g - h0.grad[0]).norm() / h0.grad[0].norm()).item()
    return jac_err, prod_err


@dataclass(frozen=True)
class LayerStats:
    """Per-layer statistics of freshly initialized networks: arrays of shape (depth + 1, seeds).

    Row l is h_l (row 0: the read-in's output h_0, what the first hidden layer receives).
    grad: the norm of dLoss/dh_l over the batch; std: the standard deviation of h_l over the
    batch and the units; spread: the std of h_l across the examples, averaged over the units;
    rms: the root mean square of h_l over the batch and the units.
    """

    grad: np.ndarray
    std: np.ndarray
    spread: np.ndarray
    rms: np.ndarray

    def first_to_last(self, key: str = "grad") -> np.ndarray:
        """The statistic at h_0 over the statistic at h_L, one per seed: (seeds,)."""
        values = getattr(self, key)
        return values[0] / values[-1]


def layer_statistics(
    activation: str,
    init: str,
    depth: int,
    weight_scale: float = 1.0,
    seeds=range(5),
    width: int = 64,
    in_features: int = 16,
    batch: int = 128,
    **mlp_options,
) -> LayerStats:
    """One backward pass of a fresh ``DeepMLP`` per seed, in float64, watched by a Probe.

    The network is ``DeepMLP(in_features, width, 1, depth, activation, init, weight_scale,
    **mlp_options)``, the batch x (batch, in_features) and y (batch, 1) standard normal, the loss
    the mse.
    """
    grad, std, spread, rms = [], [], [], []
    for seed in seeds:
        set_seed(seed)
        net = DeepMLP(in_features, width, 1, depth, activation, init, weight_scale, **mlp_options)
        net = net.double()
        x = torch.randn(batch, in_features, dtype=torch.float64)  # (N, in_features)
        y = torch.randn(batch, 1, dtype=torch.float64)  # (N, 1)
        with Probe([net.read_in, *net.layers]) as probe:
            F.mse_loss(net(x), y).backward()
        grad.append(probe.gradient_norms())  # (depth + 1,)
        std.append(probe.activation_stds())  # (depth + 1,)
        records = probe.records.values()
        spread.append([r.output.std(dim=0).mean().item() for r in records])
        rms.append([r.output.pow(2).mean().sqrt().item() for r in records])
    return LayerStats(*(np.array(v).T for v in (grad, std, spread, rms)))


#: phi'(z) written as a function of phi(z), for the activations whose derivative allows it.
SLOPE_OF_OUTPUT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": lambda h: 1 - h**2,
    "sigmoid": lambda h: h * (1 - h),
}


def layer_gain(
    activation: str, std: float, seed: int, depth: int = 30, width: int = 64, **options
) -> dict:
    """The gain formula against the measured factor per layer, for one seed (float64).

    The network is the one :func:`layer_statistics` builds with ``init="naive"`` and
    ``weight_scale=std`` (weights of standard deviation ``std``; the same draws). Returns floats:
    ``"ratio"`` |dL/dh_0| / |dL/dh_L|; ``"slope_sq"`` E[phi'(z)^2] over every hidden unit and
    example; ``"predicted"`` sqrt(n v E[phi'^2]) with n v = width * std^2; ``"measured"``
    ratio^(1 / depth); ``"saturated"`` the fraction of hidden outputs with |h| > 0.9.
    """
    set_seed(seed)
    in_features, batch = options.get("in_features", 16), options.get("batch", 128)
    net = DeepMLP(in_features, width, 1, depth, activation, "naive", std).double()
    x = torch.randn(batch, in_features, dtype=torch.float64)  # (N, in_features)
    y = torch.randn(batch, 1, dtype=torch.float64)  # (N, 1)
    with Probe([net.read_in, *net.layers]) as probe:
        F.mse_loss(net(x), y).backward()
    grads = probe.gradient_norms()  # (depth + 1,)
    hidden = probe.outputs()[1:]  # phi(z_l) of every hidden layer, flat
    slope = lookup(SLOPE_OF_OUTPUT, activation, "activation")
    slope_sq = float(np.mean([np.mean(slope(h) ** 2) for h in hidden]))
    return {
        "ratio": grads[0] / grads[-1],
        "slope_sq": slope_sq,
        "predicted": float(np.sqrt(width * std**2 * slope_sq)),
        "measured": (grads[0] / grads[-1]) ** (1 / depth),
        "saturated": float(np.mean([np.mean(np.abs(h) > 0.9) for h in hidden])),
    }


def gains_over_seeds(activation: str, std: float, seeds=range(5), **options) -> dict:
    """:func:`layer_gain` on every seed: the same keys, each an array of shape (seeds,)."""
    runs = [layer_gain(activation, std, seed, **options) for seed in seeds]
    return {key: np.array([run[key] for run in runs]) for key in runs[0]}


# --------------------------------------------------------------------------- internal shift


def internal_shift(seed: int, steps: int = 20, lr: float = 1e-3, width: int = 64) -> dict:
    """How much does what hidden layer 6 receives move while the layers below it train?

    A 10-layer ReLU ``DeepMLP(8, width, 1)`` (He, float32) trains with Adam for ``steps`` steps
    on one fixed batch x (512, 8), y = sin(sum of x) (512, 1). Returns floats:
    ``"mean_shift"``, the mean |change of a unit's mean| of h_5 (layer 6's input) on that batch,
    in units of the typical spread of one unit before training; ``"spread_ratio"``, the typical
    spread after over before.
    """
    set_seed(seed)
    net = DeepMLP(8, width, 1, depth=10, activation="relu", init="he")
    x = torch.randn(512, 8)  # (N, 8): the data, never changed
    y = torch.sin(x.sum(dim=1, keepdim=True))  # (N, 1)

    def input_of_layer_6() -> Tensor:
        with torch.no_grad():
            h = net.read_in(x)  # (N, width)
            for layer in net.layers[:5]:
                h = layer(h)
        return h  # (N, width): h_5

    before = input_of_layer_6()
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(net(x), y).backward()
        optimizer.step()
    after = input_of_layer_6()
    # the typical spread of one unit over the batch, before training
    scale = before.std(dim=0).mean()
    moved = after.mean(dim=0) - before.mean(dim=0)  # (width,)
    return {
        "mean_shift": (moved.abs().mean() / scale).item(),
        "spread_ratio": (after.std(dim=0).mean() / scale).item(),
    }
