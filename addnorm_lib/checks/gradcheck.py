"""Gradient checking: centered finite differences and the relative error used to judge them."""

import numpy as np


def numerical_gradient(f, x, dy, h=1e-6):
    """Gradient of ``L(x) = sum(f(x) * dy)`` with respect to ``x`` by centered differences.

    ``dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / (2 h)``, one coordinate at a time, on a private
    copy of ``x`` (the caller's array is not modified).

    Args:
        f: function of one array, returning an array of any shape.
        x: float64 array, the point at which to differentiate.
        dy: array of f(x)'s shape, the upstream gradient.
        h: step size.

    Returns:
        float64 array of x's shape: dL/dx, with error O(h^2).
    """
    x = np.array(x, copy=True)  # the copy we perturb
    if x.dtype != np.float64:
        raise TypeError(f"numerical_gradient needs float64 input for accuracy, got {x.dtype}")
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        original = x[i]
        x[i] = original + h
        plus = np.sum(f(x) * dy)
        x[i] = original - h
        minus = np.sum(f(x) * dy)
        x[i] = original
        grad[i] = (plus - minus) / (2 * h)
    return grad


def relative_error(actual, expected):
    """Largest elementwise |a - e| / max(|a| + |e|, 1e-8): scale-free, 0 for equal arrays."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {actual.shape} vs {expected.shape}")
    denominator = np.maximum(np.abs(actual) + np.abs(expected), 1e-8)
    return float(np.max(np.abs(actual - expected) / denominator, initial=0.0))
