"""The LayerNorm chapter's opening failure: "Add" alone lets the scale of a residual stream drift.

A stack of residual blocks ``x <- x + MLP(x)`` (random ReLU MLPs with He-style weights) receives
one sequence whose tokens arrive at different sizes. :func:`drift_run` tracks the root mean square
of every token after every block, once with no normalization, once with a LayerNorm after each
addition (``x <- LN(x + MLP(x))``) and once with that LayerNorm at ``eps = 0``. The weights are
random and untrained: the point is only that the addition by itself controls no scale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from addnorm_lib.reference import norms

__all__ = ["DriftRun", "DriftSummary", "drift_run", "random_mlp_weights", "residual_stack", "rms"]


def random_mlp_weights(
    rng: np.random.Generator, n_features: int, n_blocks: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_blocks`` pairs (W1 of shape (C, 4C), W2 of shape (4C, C)), float64, He-style scales
    for a ReLU MLP (std ``sqrt(2 / C)`` and ``sqrt(1 / 4C)``)."""
    c = n_features
    return [
        (rng.normal(0, np.sqrt(2 / c), (c, 4 * c)), rng.normal(0, np.sqrt(1 / (4 * c)), (4 * c, c)))
        for _ in range(n_blocks)
    ]


def residual_stack(
    x: np.ndarray,
    weights: list[tuple[np.ndarray, np.ndarray]],
    norm: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Apply ``x <- x + MLP(x)`` (then ``norm(x)``, if given) once per weight pair.

    ``x`` has shape (T, C). Returns the stream after every block, shape (L + 1, T, C); entry 0 is
    the input.
    """
    states = [x]
    for w1, w2 in weights:
        x = x + np.maximum(x @ w1, 0) @ w2  # (T, C)
        if norm is not None:
            x = norm(x)  # (T, C)
        states.append(x)
    return np.stack(states)  # (L + 1, T, C)


def rms(h: np.ndarray) -> np.ndarray:
    """Root mean square over the last (feature) axis: (..., C) -> (...)."""
    return np.sqrt((h * h).mean(axis=-1))


@dataclass(frozen=True)
class DriftSummary:
    """The numbers the chapter quotes for one draw."""

    growth: float  # median token RMS after the last block / at the input, no norm
    spread_in: float  # largest / smallest token RMS at the input
    spread_out: float  # the same after the last block, no norm
    ln_dev: float  # max |RMS - 1| after every block with LN (eps = 1e-5)
    ln0_dev: float  # the same with eps = 0: rounding only


@dataclass(frozen=True)
class DriftRun:
    """RMS of every token after every block for one draw; arrays of shape (L + 1, T)."""

    plain: np.ndarray  # x + MLP(x)
    ln: np.ndarray  # LN(x + MLP(x)), eps = 1e-5, gamma = 1, beta = 0
    ln0: np.ndarray  # the same with eps = 0

    def summary(self) -> DriftSummary:
        """The growth and spread without a norm, and how far LN keeps every token from RMS 1."""
        return DriftSummary(
            growth=float(np.median(self.plain[-1]) / np.median(self.plain[0])),
            spread_in=float(self.plain[0].max() / self.plain[0].min()),
            spread_out=float(self.plain[-1].max() / self.plain[-1].min()),
            ln_dev=float(np.abs(self.ln[1:] - 1).max()),
            ln0_dev=float(np.abs(self.ln0[1:] - 1).max()),
        )


def drift_run(seed: int, n_features: int = 64, n_tokens: int = 12, n_blocks: int = 24) -> DriftRun:
    """One draw of a sequence (token sizes from 0.1 to 10, geometric) and of the weights, pushed
    through ``n_blocks`` residual blocks without a norm, with LN, and with LN at eps = 0."""
    rng = np.random.default_rng(seed)
    token_scale = np.geomspace(0.1, 10, n_tokens)  # (T,) tokens of different sizes
    x0 = rng.normal(size=(n_tokens, n_features)) * token_scale[:, None]  # (T, C)
    weights = random_mlp_weights(rng, n_features, n_blocks)
    ones, zeros = np.ones(n_features), np.zeros(n_features)  # LN's initial gamma and beta

    def ln(h: np.ndarray) -> np.ndarray:
        return norms.layer_norm(h, ones, zeros)

    def ln_eps0(h: np.ndarray) -> np.ndarray:
        return norms.layer_norm(h, ones, zeros, 0.0)

    return DriftRun(
        plain=rms(residual_stack(x0, weights)),
        ln=rms(residual_stack(x0, weights, ln)),
        ln0=rms(residual_stack(x0, weights, ln_eps0)),
    )
