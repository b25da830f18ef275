"""Small numpy tools of the BatchNorm chapter: standardizing over chosen axes, GroupNorm and
InstanceNorm by hand, and BatchNorm's input gradient in closed form.

The BatchNorm chapter compares the normalizations by *which numbers share one mean and
variance*. On an ``(N, C, L)`` input (examples, channels, positions):

- BatchNorm pools each channel over the examples and positions: axes ``(0, 2)``;
- LayerNorm over ``(C, L)`` pools everything of one example: axes ``(1, 2)``; the Transformer's
  LayerNorm pools one position's channels: axis ``1``;
- InstanceNorm pools each channel of one example over its positions: axis ``2``;
- GroupNorm splits the ``C`` channels into ``G`` groups of ``C / G`` and pools one group of one
  example over its channels and positions.

:func:`standardize_over` does the first four (without learned scale and shift), :func:`group_norm`
and :func:`instance_norm` the last two, all with the biased variance and ``eps`` inside the square
root, as PyTorch does. :func:`batch_norm_dx` is the compact closed form of the gradient of
training-mode BatchNorm with respect to its input, the formula the chapter derives and checks
against autograd (the library's :func:`addnorm_lib.reference.norms.batch_norm_backward` instead
follows the chain rule one intermediate at a time).

The chapter's measurements live here too, so that its cells stay short:
:func:`pad_sequences` zero-pads sentences into a ``(B, T, C)`` batch, :func:`track_against_torch`
runs ``torch.nn.BatchNorm1d``, the library's module and its numpy function side by side,
:func:`autograd_input_grad` is a gradient by autograd, :func:`output_noise` measures how far one
example's training-mode output lands from its population value, and :func:`stale_run` follows
the gap between eval and training mode as the running statistics are updated.

Everything works in the input's float dtype; the numpy functions are pure and modify nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from addnorm_lib.experiments.depth import set_seed
from addnorm_lib.reference import norms
from addnorm_lib.reference.modules import BatchNorm1d as ScratchBatchNorm1d

__all__ = [
    "ConventionCheck",
    "autograd_input_grad",
    "batch_norm_dx",
    "group_norm",
    "instance_norm",
    "mode_gap",
    "output_noise",
    "pad_sequences",
    "stale_run",
    "standardize_over",
    "track_against_torch",
]


def standardize_over(x: np.ndarray, axes: tuple[int, ...], eps: float = 1e-5) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` with the mean and *biased* variance taken over ``axes``.

    Args:
        x: float array of any shape.
        axes: the axes whose elements share one mean and variance (each combination of the
            other axes gets its own).
        eps: added to the variance inside the square root.

    Returns:
        an array of the shape and dtype of ``x``.
    """
    mean = x.mean(axis=axes, keepdims=True)  # size 1 along ``axes``
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased: divides by the count
    return (x - mean) / np.sqrt(var + eps)


def group_norm(x: np.ndarray, groups: int, eps: float = 1e-5) -> np.ndarray:
    """GroupNorm without its per-channel scale and shift (``torch.nn.GroupNorm`` at its initial
    ``weight=1``, ``bias=0``).

    Args:
        x: float array of shape ``(N, C)`` or ``(N, C, *spatial)``; ``C`` divisible by ``groups``.
        groups: ``G``, the number of channel groups. ``G = 1`` pools all channels and positions
            of an example (LayerNorm over ``(C, *spatial)``); ``G = C`` pools each channel of an
            example over its positions (InstanceNorm).
        eps: added to the variance inside the square root.

    Returns:
        an array of the shape and dtype of ``x``.

    Raises:
        ValueError: if ``groups`` does not divide ``C``.
    """
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise ValueError(f"group_norm: {groups} groups do not divide {c} channels")
    grouped = x.reshape(n, groups, -1)  # (N, G, C/G * prod(spatial)): one row per group
    return standardize_over(grouped, (2,), eps).reshape(x.shape)


def instance_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """InstanceNorm without scale and shift (``torch.nn.InstanceNorm1d/2d`` defaults).

    Args:
        x: float array of shape ``(N, C, *spatial)`` with at least one spatial axis.
        eps: added to the variance inside the square root.

    Returns:
        an array of the shape and dtype of ``x``: each channel of each example standardized over
        its positions.
    """
    if x.ndim < 3:
        raise ValueError(f"instance_norm: expected (N, C, *spatial), got shape {x.shape}")
    return standardize_over(x, tuple(range(2, x.ndim)), eps)


def batch_norm_dx(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float = 1e-5):
    """Input gradient of training-mode BatchNorm, in closed form.

    With ``m`` values per channel (``N`` times the number of positions), ``x_hat`` the
    standardized input, ``sigma_eps = sqrt(var + eps)`` and ``g_hat = gamma * dy``::

        dx = (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat)) / sigma_eps

    with the means over the examples and positions of each channel. Since ``sum(dy)`` and
    ``sum(dy * x_hat)`` over those values are ``dbeta`` and ``dgamma``, this is also
    ``gamma / sigma_eps * (dy - dbeta / m - x_hat * dgamma / m)``.

    Args:
        dy: upstream gradient, shape of ``x``.
        x: the forward input, float array of shape ``(N, C)`` or ``(N, C, *spatial)``.
        gamma: the per-channel scale, shape ``(C,)``.
        eps: the forward ``eps``.

    Returns:
        ``dx``, shape and dtype of ``x``.
    """
    axes = (0, *range(2, x.ndim))  # the batch and all spatial axes
    cshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)  # (1, C, 1, ...)
    mean = x.mean(axis=axes, keepdims=True)  # (1, C, 1, ...)
    sigma_eps = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)  # (1, C, 1, ...)
    xhat = (x - mean) / sigma_eps  # (N, C, ...)
    ghat = dy * np.reshape(gamma, cshape)  # (N, C, ...)
    mean_ghat = ghat.mean(axis=axes, keepdims=True)  # (1, C, 1, ...)
    mean_ghat_xhat = (ghat * xhat).mean(axis=axes, keepdims=True)  # (1, C, 1, ...)
    return (ghat - mean_ghat - xhat * mean_ghat_xhat) / sigma_eps  # (N, C, ...)


def pad_sequences(sequences: list[np.ndarray], length: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-pad sentences into one batch.

    Args:
        sequences: ``B`` float arrays of shape ``(T_b, C)``, each ``T_b <= length``.
        length: ``T``, the padded length.

    Returns:
        ``(batch, mask)``: the batch ``(B, T, C)`` (zeros after each sentence) and the bool mask
        ``(B, T)`` of the real tokens.
    """
    c = sequences[0].shape[1]
    batch = np.zeros((len(sequences), length, c), dtype=sequences[0].dtype)  # (B, T, C)
    mask = np.zeros((len(sequences), length), dtype=bool)  # (B, T)
    for i, s in enumerate(sequences):
        batch[i, : len(s)], mask[i, : len(s)] = s, True
    return batch, mask


def autograd_input_grad(
    norm: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray, dy: np.ndarray
) -> np.ndarray:
    """Gradient of ``sum(norm(x) * dy)`` with respect to ``x``, by torch autograd.

    Args:
        norm: a torch function of one tensor, returning a tensor of the same shape.
        x: the input, float64 array.
        dy: the upstream gradient, shape of ``x``.

    Returns:
        ``dx``, float64, shape of ``x``.
    """
    xt = torch.tensor(x, requires_grad=True)
    norm(xt).backward(torch.from_numpy(dy))
    return xt.grad.numpy()


@dataclass
class ConventionCheck:
    """The largest differences from ``torch.nn.BatchNorm1d`` over a few steps (float64).

    Attributes:
        worst: name -> max |difference| of the library's module and numpy function from torch's
            (``output``, ``running_mean``, ``running_var``, ``eval output``).
        biased_gap: how far a running variance fed the *biased* batch variance ends from torch's.
        batches_tracked: ``num_batches_tracked`` of torch's module and of the library's.
    """

    worst: dict[str, float]
    biased_gap: float
    batches_tracked: tuple[int, int]


def track_against_torch(
    steps: int, batch: int, channels: int, rng: np.random.Generator
) -> ConventionCheck:
    """Run torch's ``BatchNorm1d``, the library's module and ``norms.batch_norm`` side by side.

    ``steps`` training-mode steps on ``(batch, channels)`` inputs with mean 3 and standard
    deviation 2, then one eval-mode step, in float64, with ``gamma`` and ``beta`` drawn away from
    1 and 0; after every step the outputs and the running estimates are compared.
    """
    builtin = nn.BatchNorm1d(channels, dtype=torch.float64)
    with torch.no_grad():
        builtin.weight.copy_(torch.from_numpy(1 + 0.3 * rng.normal(size=channels)))
        builtin.bias.copy_(torch.from_numpy(0.3 * rng.normal(size=channels)))
    scratch = ScratchBatchNorm1d(channels, dtype=torch.float64)
    scratch.load_state_dict(builtin.state_dict())  # the same keys
    gamma, beta = builtin.weight.detach().numpy().copy(), builtin.bias.detach().numpy().copy()
    mean_np, var_np = np.zeros(channels), np.ones(channels)  # the numpy function's estimates
    var_biased = np.ones(channels)  # the same update, fed the biased variance
    worst = dict.fromkeys(["output", "running_mean", "running_var", "eval output"], 0.0)

    def record(key: str, ours, ref) -> None:
        gap = np.abs(np.asarray(ours) - np.asarray(ref)).max()
        worst[key] = max(worst[key], float(gap))

    for _ in range(steps):
        x = rng.normal(3.0, 2.0, size=(batch, channels))  # (N, C)
        y_ref, y_our = builtin(torch.from_numpy(x)), scratch(torch.from_numpy(x))
        y_np, mean_np, var_np = norms.batch_norm(x, gamma, beta, mean_np, var_np, True)
        var_biased = 0.9 * var_biased + 0.1 * x.var(axis=0)  # ddof=0: biased
        for ours in (y_our.detach().numpy(), y_np):
            record("output", ours, y_ref.detach().numpy())
        for ours in (scratch.running_mean.numpy(), mean_np):
            record("running_mean", ours, builtin.running_mean.numpy())
        for ours in (scratch.running_var.numpy(), var_np):
            record("running_var", ours, builtin.running_var.numpy())
    builtin.eval()
    scratch.eval()
    x = rng.normal(3.0, 2.0, size=(batch, channels))  # (N, C)
    y_ref = builtin(torch.from_numpy(x)).detach().numpy()
    record("eval output", scratch(torch.from_numpy(x)).detach().numpy(), y_ref)
    record("eval output", norms.batch_norm(x, gamma, beta, mean_np, var_np, False)[0], y_ref)
    return ConventionCheck(
        worst,
        float(np.abs(var_biased - builtin.running_var.numpy()).max()),
        (int(builtin.num_batches_tracked), int(scratch.num_batches_tracked)),
    )


def output_noise(
    sizes: list[int], repeats: int, channels: int, rng: np.random.Generator
) -> np.ndarray:
    """RMS distance of one fixed example's training-mode BatchNorm output from its population
    output ``(x - 3) / 2``, when it is normalized in ``repeats`` random batches of each size.

    The batches are drawn from a normal distribution with mean 3 and standard deviation 2 per
    feature (``channels`` features); ``gamma = 1``, ``beta = 0``.

    Returns:
        float64 ``(len(sizes),)``, one RMS error per batch size.
    """
    x_fixed = rng.normal(3.0, 2.0, size=(1, channels))  # (1, C): the example we follow
    target = (x_fixed[0] - 3.0) / 2.0  # (C,): its output with the population statistics
    rms = []
    for size in sizes:
        errors = []
        for _ in range(repeats):
            others = rng.normal(3.0, 2.0, size=(size - 1, channels))  # (N - 1, C)
            batch = np.concatenate([x_fixed, others])  # (N, C): our example is row 0
            errors.append(standardize_over(batch, (0,))[0] - target)  # (C,)
        rms.append(float(np.sqrt(np.mean(np.square(errors)))))
    return np.array(rms)


def mode_gap(module: nn.BatchNorm1d, x: torch.Tensor) -> float:
    """Mean |eval-mode output - training-mode output| of ``module`` on ``x`` ``(N, C)``, without
    touching its running statistics; the module is left in training mode."""
    with torch.no_grad():
        y_eval = module.eval()(x)  # (N, C)
        y_train = F.batch_norm(  # batch statistics, nothing updated
            x, None, None, module.weight, module.bias, training=True, eps=module.eps
        )
    module.train()
    return float((y_eval - y_train).abs().mean())


def stale_run(seed: int, updates: int, refit: int, channels: int = 16) -> dict:
    """Follow a fresh ``BatchNorm1d`` through ``updates`` training-mode updates on inputs with
    mean 3 and standard deviation 2, a shift of the inputs to mean 4 and standard deviation 1,
    and a re-collection of its statistics (``refit`` forward passes, ``momentum=None``).

    Batches are ``(256, channels)``, float32. Returns a dict: ``gaps`` (``(updates + 1,)``,
    :func:`mode_gap` after 0, 1, ..., ``updates`` updates), ``shift_gap`` (after the shift),
    ``shift_mean`` and ``shift_std`` (of the eval-mode output on shifted inputs, the standard
    deviation averaged over features) and ``refit_gap`` (after the re-collection).
    """
    set_seed(seed)
    bn = nn.BatchNorm1d(channels)
    gaps = []
    for _ in range(updates + 1):
        gaps.append(mode_gap(bn, 3 + 2 * torch.randn(256, channels)))
        with torch.no_grad():
            bn(3 + 2 * torch.randn(256, channels))  # one training-mode update
    shift_gap = mode_gap(bn, 4 + torch.randn(256, channels))
    with torch.no_grad():
        y_shift = bn.eval()(4 + torch.randn(256, channels))  # (N, C)
    bn.train()
    with torch.no_grad():
        bn.reset_running_stats()  # running_mean 0, running_var 1, num_batches_tracked 0
        bn.momentum = None  # a cumulative average over the re-collection batches
        for _ in range(refit):
            bn(4 + torch.randn(256, channels))
    return {
        "gaps": np.array(gaps),
        "shift_gap": shift_gap,
        "shift_mean": float(y_shift.mean()),
        "shift_std": float(y_shift.std(dim=0).mean()),
        "refit_gap": mode_gap(bn, 4 + torch.randn(256, channels)),
    }
