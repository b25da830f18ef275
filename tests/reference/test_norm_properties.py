"""Property-based tests (hypothesis) of the invariances that define the norms.

Each property is checked on the numpy reference (``addnorm_lib.reference.norms``) and on the torch
function
behind the modules (``addnorm_lib.reference.modules``), in float64 on bounded, well-conditioned
rows: entries in
[-10, 10] and a per-row standard deviation (or RMS) above ``MIN_SPREAD``, so that the rounding
error of a normalized value, about ``1e-16 * max|x| / std``, stays far below ``ATOL``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import addnorm_lib.reference.modules as tnn
from addnorm_lib.reference.norms import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward

MIN_SPREAD = 1e-2
# Rounding in float64 amplified by at most max|x| / std <= 10 / 1e-2 and by the shift/scale below:
# ~1e-16 * 1e3 * 1e2 = 1e-11, so 1e-8 leaves a wide margin and still catches any real error.
ATOL = 1e-8
SETTINGS = settings(max_examples=40, deadline=None)

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)
matrices = st.tuples(st.integers(1, 4), st.integers(2, 12)).flatmap(
    lambda shape: arrays(np.float64, shape, elements=finite)
)
shifts = st.floats(-100, 100)
scales = st.floats(0.1, 10)


def _ln_numpy(x: np.ndarray, eps: float) -> np.ndarray:
    c = x.shape[-1]
    return layer_norm(x, np.ones(c), np.zeros(c), eps=eps)


def _ln_torch(x: np.ndarray, eps: float) -> np.ndarray:
    return tnn.layer_norm(torch.from_numpy(x), (x.shape[-1],), eps=eps).numpy()


def _rms_numpy(x: np.ndarray, eps: float) -> np.ndarray:
    return rms_norm(x, np.ones(x.shape[-1]), eps=eps)


def _rms_torch(x: np.ndarray, eps: float) -> np.ndarray:
    return tnn.rms_norm(torch.from_numpy(x), (x.shape[-1],), eps=eps).numpy()


LN_IMPLS = pytest.mark.parametrize("ln", [_ln_numpy, _ln_torch], ids=["numpy", "torch"])
RMS_IMPLS = pytest.mark.parametrize("rms", [_rms_numpy, _rms_torch], ids=["numpy", "torch"])


def _per_row(rng_values: list[float], rows: int) -> np.ndarray:
    """A column (rows, 1) cycling through the drawn values, one per row."""
    return np.resize(np.array(rng_values), (rows, 1))


@LN_IMPLS
@SETTINGS
@given(x=matrices, a=st.lists(scales, min_size=1, max_size=4), b=st.lists(shifts, min_size=1))
def test_layer_norm_is_invariant_to_row_shift_and_positive_scale(ln, x, a, b):
    assume(np.all(x.std(axis=-1) > MIN_SPREAD))
    a, b = _per_row(a, x.shape[0]), _per_row(b, x.shape[0])
    np.testing.assert_allclose(ln(a * x + b, 0.0), ln(x, 0.0), rtol=0, atol=ATOL)


@RMS_IMPLS
@SETTINGS
@given(x=matrices, a=st.lists(scales, min_size=1, max_size=4))
def test_rms_norm_is_invariant_to_row_positive_scale(rms, x, a):
    assume(np.all(np.sqrt((x * x).mean(axis=-1)) > MIN_SPREAD))
    a = _per_row(a, x.shape[0])
    np.testing.assert_allclose(rms(a * x, 0.0), rms(x, 0.0), rtol=0, atol=ATOL)


@RMS_IMPLS
@SETTINGS
@given(x=matrices, b=st.lists(shifts.filter(lambda v: abs(v) > 1), min_size=1))
def test_rms_norm_is_not_invariant_to_shift(rms, x, b):
    # the re-centring RMSNorm drops: a shift changes the output (unlike LayerNorm)
    assume(np.all(x.std(axis=-1) > 1.0))
    b = _per_row(b, x.shape[0])
    assert not np.allclose(rms(x + b, 0.0), rms(x, 0.0), atol=1e-3)


@LN_IMPLS
@SETTINGS
@given(x=matrices, eps=st.sampled_from([0.0, 1e-5, 1e-1]))
def test_layer_norm_output_has_zero_mean_and_predicted_variance(ln, x, eps):
    # gamma = 1, beta = 0: each row has mean 0 and variance var / (var + eps), which is 1 at eps=0
    assume(np.all(x.std(axis=-1) > MIN_SPREAD))
    y = ln(x, eps)
    var = x.var(axis=-1)
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, rtol=0, atol=ATOL)
    np.testing.assert_allclose(y.var(axis=-1), var / (var + eps), rtol=0, atol=ATOL)


@RMS_IMPLS
@SETTINGS
@given(x=matrices)
def test_rms_norm_output_has_unit_mean_square(rms, x):
    assume(np.all(np.sqrt((x * x).mean(axis=-1)) > MIN_SPREAD))
    y = rms(x, 0.0)
    np.testing.assert_allclose((y * y).mean(axis=-1), 1.0, rtol=0, atol=ATOL)


@SETTINGS
@given(x=matrices, data=st.data())
def test_layer_norm_gradient_is_orthogonal_to_shift_and_scale(x, data):
    # Invariance to x -> x + b (any eps) and x -> a x (eps = 0) means the gradient has no
    # component along those directions: sum(dx) = 0 and sum(dx * x) = 0 in every row.
    assume(np.all(x.std(axis=-1) > MIN_SPREAD))
    c = x.shape[-1]
    gamma = np.array(data.draw(st.lists(scales, min_size=c, max_size=c)))
    dy = data.draw(arrays(np.float64, x.shape, elements=finite))
    dx, _, _ = layer_norm_backward(dy, x, gamma, eps=0.0)
    scale = np.abs(dy).max() * gamma.max() / x.std(axis=-1).min() * c + 1.0
    np.testing.assert_allclose(dx.sum(axis=-1) / scale, 0.0, rtol=0, atol=ATOL)
    np.testing.assert_allclose((dx * x).sum(axis=-1) / scale, 0.0, rtol=0, atol=ATOL)


@SETTINGS
@given(x=matrices, data=st.data())
def test_rms_norm_gradient_is_orthogonal_to_scale(x, data):
    assume(np.all(np.sqrt((x * x).mean(axis=-1)) > MIN_SPREAD))
    dy = data.draw(arrays(np.float64, x.shape, elements=finite))
    dx, _ = rms_norm_backward(dy, x, np.ones(x.shape[-1]), eps=0.0)
    scale = np.abs(dy).max() * x.shape[-1] + 1.0
    np.testing.assert_allclose((dx * x).sum(axis=-1) / scale, 0.0, rtol=0, atol=ATOL)
