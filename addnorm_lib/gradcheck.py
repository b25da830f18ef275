"""Gradient checking: centered finite differences and the relative error used to judge them."""

import numpy as np


def numerical_gradient(f, x, dy, h=1e-6):
    """Gradient of ``sum(f(x) * dy)`` with respect to ``x`` by centered differences.

    Args:
        f: function of one array, returning an array of any shape.
        x: float64 array, the point at which to differentiate; restored before returning.
        dy: array of f(x)'s shape, the upstream gradient.
        h: step size.

    Returns:
        Array of x's shape and dtype: d sum(f(x) * dy) / dx, with error O(h^2).
    """
    x = np.asarray(x)
    if x.dtype != np.float64:
        raise TypeError(f"numerical_gradient needs float64 input for accuracy, got {x.dtype}")
    grad = np.zeros_like(x)
    flat_x, flat_grad = x.reshape(-1), grad.reshape(-1)  # views: writes go into x and grad
    for i in range(flat_x.size):
        original = flat_x[i]
        flat_x[i] = original + h
        f_plus = np.sum(f(x) * dy)
        flat_x[i] = original - h
        f_minus = np.sum(f(x) * dy)
        flat_x[i] = original
        flat_grad[i] = (f_plus - f_minus) / (2 * h)
    return grad


def relative_error(actual, expected):
    """Largest elementwise |a - e| / max(|a| + |e|, 1e-8): scale-free, 0 for equal arrays."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {actual.shape} vs {expected.shape}")
    denominator = np.maximum(np.abs(actual) + np.abs(expected), 1e-8)
    return float(np.max(np.abs(actual - expected) / denominator, initial=0.0))
