"""How good is pRMSNorm's estimate of the RMS? The measurement behind the RMSNorm pages' table.

(Also :func:`half_precision_errors`, the RMSNorm chapter's half-precision measurement: how far
each computation in float16 or bfloat16 lies from float64, at several input scales.)

pRMSNorm (Zhang & Sennrich 2019) divides a row by the RMS of its first ``k = ceil(p * C)``
features instead of all ``C`` (as :func:`addnorm_lib.reference.norms.partial_rms_norm` does). The
whole effect on one row is the ratio ``r = RMS(x[:k]) / RMS(x)``: pRMSNorm's output is RMSNorm's
divided by ``r``.

When the features have scales of their own (``x_i = s_i z_i``, the same ``s`` for every row), ``r``
has two parts:

- a *common factor* ``c``, the same for every row, set by the scales alone (about
  ``sqrt(mean(s[:k]**2) / mean(s**2))``). A gain learned with pRMSNorm multiplies every row the same
  way, so it absorbs ``1 / c``;
- the *row-to-row* variation of ``r`` around ``c``, which no gain can undo.

:func:`split_common_factor` separates the two (``c`` = the geometric mean of ``r`` over the rows),
:func:`predicted_median_error` gives the sampling law for the second part, and :func:`prms_draws`
repeats the measurement over several draws of scales and rows.

The sampling law (delta method, ``z_i`` independent standard normal, so ``Var(z_i**2) = 2``): with
``A = sum_{i<k} s_i**2 z_i**2`` and ``B = sum_{i<C} s_i**2 z_i**2``, ``Cov(A, B) = Var(A)`` and::

    Var(log r) = Var(log A - log B) / 4
               ~ (1 / k_eff + 1 / C_eff - 2 w / k_eff) / 2,

where ``k_eff = (sum_{i<k} s_i**2)**2 / sum_{i<k} s_i**4`` is the effective number of features
among the first ``k`` (``k`` when the scales are equal, fewer otherwise), ``C_eff`` the same over
all ``C``, and ``w = sum_{i<k} s_i**2 / sum_{i<C} s_i**2``. For equal scales this is
``(1/k - 1/C) / 2``. The median of ``|r / c - 1|`` is about ``0.674`` times the square root (the
median absolute value of a normal variable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from addnorm_lib.reference import norms

__all__ = [
    "MEDIAN_ABS_NORMAL",
    "half_precision_errors",
    "partial_count",
    "partial_rms_ratio",
    "predicted_median_error",
    "prms_draws",
    "split_common_factor",
]

MEDIAN_ABS_NORMAL = 0.6745  # median of |N(0, 1)|


def partial_count(n_features: int, p: float) -> int:
    """Number of features pRMSNorm reads: ``ceil(p * n_features)``, as ``norms.partial_rms_norm``.

    The paper's PyTorch module (``rmsnorm_torch.py``) takes ``int(p * d)``, rounding down; the two
    agree whenever ``p * n_features`` is a whole number.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"partial_count: p must be in (0, 1], got {p!r}")
    return math.ceil(p * n_features)


def partial_rms_ratio(x: np.ndarray, p: float) -> np.ndarray:
    """Ratio of the partial RMS to the full RMS of each row.

    Args:
        x: float array ``(..., C)``, rows of features (no row all zeros).
        p: fraction of the features read, ``0 < p <= 1``.

    Returns:
        float64 array ``(...,)``: ``RMS(x[..., :k]) / RMS(x)`` with ``k = ceil(p * C)``. pRMSNorm's
        output (``eps = 0``) is RMSNorm's output divided by this ratio; ``p = 1`` gives exactly 1.
    """
    x = np.asarray(x, dtype=np.float64)  # (..., C)
    k = partial_count(x.shape[-1], p)
    sq = x * x  # (..., C)
    return np.sqrt(sq[..., :k].mean(axis=-1) / sq.mean(axis=-1))  # (...,)


def split_common_factor(ratios: np.ndarray) -> tuple[float, np.ndarray]:
    """Split ratios into the factor common to all rows and what varies from row to row.

    Args:
        ratios: positive float array ``(R,)``, one ratio per row (:func:`partial_rms_ratio`).

    Returns:
        ``(c, residual)``: ``c`` is the geometric mean of the ratios (the single scale factor that
        best fits them in the log sense, which a learned gain can absorb); ``residual`` is the
        float64 array ``(R,)`` of ``|ratio / c - 1|``, the error that no single factor removes.
    """
    ratios = np.asarray(ratios, dtype=np.float64)  # (R,)
    c = float(np.exp(np.log(ratios).mean()))
    return c, np.abs(ratios / c - 1)  # (R,)


def predicted_median_error(scales: np.ndarray, k: int) -> float:
    """Sampling law for the median of ``|r / c - 1|`` when feature ``i`` has scale ``scales[i]``.

    Args:
        scales: positive float array ``(C,)``, the scale of each feature (all equal: alike).
        k: number of features read, ``1 <= k <= C``.

    Returns:
        ``0.674 * sqrt((1 / k_eff + 1 / C_eff - 2 w / k_eff) / 2)`` (see the module docstring);
        ``0`` for ``k = C``. For equal scales this is ``0.674 * sqrt((1/k - 1/C) / 2)``.
    """
    s2 = np.asarray(scales, dtype=np.float64) ** 2  # (C,)
    head, head4 = s2[:k].sum(), (s2[:k] ** 2).sum()
    total, total4 = s2.sum(), (s2**2).sum()
    k_eff, c_eff, w = head**2 / head4, total**2 / total4, head / total
    var_log = max((1 / k_eff + 1 / c_eff - 2 * w / k_eff) / 2, 0.0)  # rounding can dip below 0
    return MEDIAN_ABS_NORMAL * math.sqrt(var_log)


def prms_draws(
    seeds, n_features: int, n_rows: int, p_values, scale_sigma: float = 1.0
) -> dict[str, np.ndarray]:
    """pRMSNorm's estimate of the RMS, measured on several independent draws.

    For each seed, ``numpy.random.default_rng(seed)`` draws ``C`` log-normal feature scales
    ``s = exp(N(0, scale_sigma**2))``, then ``R`` rows of standard normal features ("alike") and
    ``R`` rows of standard normal features times ``s`` ("own scales", the same ``s`` for every row).

    Args:
        seeds: iterable of ``S`` integer seeds, one draw each.
        n_features: ``C``; n_rows: ``R``.
        p_values: ``P`` fractions of the features read, each in ``(0, 1]``.
        scale_sigma: standard deviation of ``log s``.

    Returns:
        A dict of float64 arrays, per draw and p:

        - ``"k"`` ``(P,)``: features read;
        - ``"alike"`` ``(S, P)``: median over rows of ``|r - 1|``, features alike;
        - ``"alike_factor"`` ``(S, P)``: the common factor ``c`` for the features alike (about 1);
        - ``"alike_pred"`` ``(P,)``: the sampling law for equal scales;
        - ``"own_raw"`` ``(S, P)``: median of ``|r - 1|``, features with their own scales;
        - ``"own_factor"`` ``(S, P)``: the common factor ``c`` (geometric mean of ``r``);
        - ``"own_residual"`` ``(S, P)``: median of ``|r / c - 1|``, what a gain cannot absorb;
        - ``"own_pred"`` ``(S, P)``: the sampling law with that draw's scales.
    """
    seeds = list(seeds)
    p_values = np.asarray(p_values, dtype=np.float64)  # (P,)
    k_values = np.array([partial_count(n_features, p) for p in p_values])  # (P,)
    shape = (len(seeds), len(p_values))
    out = {
        name: np.zeros(shape)
        for name in ("alike", "alike_factor", "own_raw", "own_factor", "own_residual", "own_pred")
    }
    ones = np.ones(n_features)  # (C,)
    for i, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        scales = np.exp(rng.normal(0.0, scale_sigma, size=n_features))  # (C,)
        alike = rng.normal(size=(n_rows, n_features))  # (R, C)
        own = rng.normal(size=(n_rows, n_features)) * scales  # (R, C)
        for j, (p, k) in enumerate(zip(p_values, k_values, strict=True)):
            r_alike = partial_rms_ratio(alike, p)  # (R,)
            r_own = partial_rms_ratio(own, p)  # (R,)
            c_alike, _ = split_common_factor(r_alike)
            c_own, residual = split_common_factor(r_own)
            out["alike"][i, j] = np.median(np.abs(r_alike - 1))
            out["alike_factor"][i, j] = c_alike
            out["own_raw"][i, j] = np.median(np.abs(r_own - 1))
            out["own_factor"][i, j] = c_own
            out["own_residual"][i, j] = np.median(residual)
            out["own_pred"][i, j] = predicted_median_error(scales, int(k))
    out["k"] = k_values.astype(np.float64)
    out["alike_pred"] = np.array([predicted_median_error(ones, int(k)) for k in k_values])
    return out


def half_precision_errors(
    methods: Mapping[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]],
    rows: torch.Tensor,
    gain: torch.Tensor,
    dtype: torch.dtype,
    rms_values: Sequence[float],
    eps: float = 1e-6,
) -> dict[str, np.ndarray]:
    """How far each RMSNorm computation in a half dtype is from float64, at several input scales.

    For each ``s`` in ``rms_values`` the input is ``(s * rows).to(dtype)`` and the gain
    ``gain.to(dtype)``, as in a model that runs in ``dtype``; the reference is
    :func:`addnorm_lib.reference.norms.rms_norm` in float64 *from those rounded inputs* (with
    ``eps``), so only the computation's error is measured, not the rounding of the input.

    Args:
        methods: name -> ``f(x, w)``, each taking ``x`` of shape (R, C) and ``w`` of shape (C,),
            both in ``dtype``, and returning (R, C).
        rows: float32 tensor (R, C), rows with RMS about 1.
        gain: float32 tensor (C,).
        dtype: the half dtype (``torch.float16`` or ``torch.bfloat16``).
        rms_values: the scales ``s``, shape (S,).
        eps: the ``eps`` of the float64 reference.

    Returns:
        name -> float64 array (S,): the normwise relative error ``||y - ref|| / ||ref||``.
    """
    errors: dict[str, list[float]] = {name: [] for name in methods}
    wd = gain.to(dtype)  # (C,) the weight in the model's dtype
    w64 = wd.double().numpy()
    for s in rms_values:
        x = (s * rows).to(dtype)  # (R, C)
        ref = norms.rms_norm(x.double().numpy(), w64, eps=eps)  # (R, C) float64
        for name, method in methods.items():
            y = method(x, wd).double().numpy()  # (R, C)
            errors[name].append(float(np.linalg.norm(y - ref) / np.linalg.norm(ref)))
    return {name: np.array(e) for name, e in errors.items()}
