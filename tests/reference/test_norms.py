"""Tests of the numpy reference norms (`addnorm_lib.reference.norms`) against PyTorch and finite
differences.

Also tests the course's centered-difference helper,
`addnorm_lib.checks.gradcheck.numerical_gradient`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from addnorm_lib.checks.gradcheck import numerical_gradient
from addnorm_lib.reference.norms import (
    batch_norm,
    batch_norm_backward,
    layer_norm,
    layer_norm_backward,
    rms_norm,
    rms_norm_backward,
)

# float64 against float64: both sides round differently but only at the 1e-16 level; the few
# reductions over <= 64 terms and one rsqrt keep the difference far below these.
FLOAT64_TOL = {"rtol": 1e-10, "atol": 1e-12}
# float32 against float32 (torch's kernels use other summation orders and a vectorized rsqrt):
# float32's unit roundoff is 6e-8 and normalized outputs are O(1), so a few ulps of disagreement
# per operation stays below 1e-5 with a wide margin (observed: ~5e-7).
FLOAT32_TOL = {"rtol": 1e-5, "atol": 1e-5}
TOL = {np.float64: FLOAT64_TOL, np.float32: FLOAT32_TOL}

# Our float32 result vs a float64 computation on the same float32 input shifted by 1e4 (FACTS.md,
# "Known numerical pitfall"). Near 1e4 float32's spacing is ~9.8e-4, so even a perfectly rounded
# float32 mean is up to ~4.9e-4 off: for unit-variance rows that is the floor of any float32
# implementation, and 1e-3 leaves a factor of two above it. Two-pass variance stays within.
LARGE_OFFSET = 1e4
LARGE_OFFSET_ATOL = 1e-3

# Gradient checks in float64: analytic vs autograd agree to rounding; centered differences with
# step h have truncation error O(h^2) and rounding error O(eps_machine / h), both ~1e-10 at h=1e-5.
GRAD_AUTOGRAD_TOL = {"rtol": 1e-10, "atol": 1e-12}
GRAD_FD_TOL = {"rtol": 1e-6, "atol": 1e-8}


# ----------------------------------------------------------------------------------------------
# Helpers


def t(a: np.ndarray, requires_grad: bool = False) -> torch.Tensor:
    """numpy -> torch, same dtype, independent memory."""
    return torch.tensor(a, requires_grad=requires_grad)


def _affine(rng: np.random.Generator, c: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """gamma, beta away from 1 and 0: the standard values can hide a wrong implementation."""
    gamma = rng.uniform(0.5, 2.0, size=c).astype(dtype)
    beta = rng.normal(size=c).astype(dtype)
    return gamma, beta


def _data(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    return (rng.normal(size=shape) * 2.0 + 0.5).astype(dtype)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


DTYPES = [np.float64, np.float32]
LN_SHAPES = [(4, 7), (2, 5, 7), (1, 7), (7,)]  # 2-D, 3-D, a batch of one, a single example
BN_SHAPES = [(8, 3), (6, 3, 5), (4, 3, 2, 5)]  # (N, C), (N, C, L), (N, C, H, W)


# ----------------------------------------------------------------------------------------------
# Forward against torch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", LN_SHAPES)
def test_layer_norm_matches_torch(rng, dtype, shape):
    x = _data(rng, shape, dtype)
    gamma, beta = _affine(rng, shape[-1], dtype)
    y = layer_norm(x, gamma, beta, eps=1e-5)
    ref = F.layer_norm(t(x), (shape[-1],), t(gamma), t(beta), eps=1e-5).numpy()
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_single_feature_gives_beta(rng, dtype):
    # one feature: x - mean is exactly 0, so y = beta whatever x and gamma are
    x = _data(rng, (5, 1), dtype)
    gamma, beta = _affine(rng, 1, dtype)
    y = layer_norm(x, gamma, beta)
    np.testing.assert_array_equal(y, np.broadcast_to(beta, x.shape))
    ref = F.layer_norm(t(x), (1,), t(gamma), t(beta)).numpy()
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", LN_SHAPES)
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rms_norm_matches_torch(rng, dtype, shape, eps):
    x = _data(rng, shape, dtype)
    weight, _ = _affine(rng, shape[-1], dtype)
    y = rms_norm(x, weight, eps=eps)
    ref = F.rms_norm(t(x), (shape[-1],), t(weight), eps=eps).numpy()
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref, **TOL[dtype])


def test_rms_norm_puts_eps_inside_the_root(rng):
    # a large eps makes sqrt(ms + eps) and sqrt(ms) + eps clearly different
    x = _data(rng, (3, 6), np.float64)
    w = np.ones(6)
    inside = x / np.sqrt((x**2).mean(-1, keepdims=True) + 0.5)
    outside = x / (np.sqrt((x**2).mean(-1, keepdims=True)) + 0.5)
    np.testing.assert_allclose(rms_norm(x, w, eps=0.5), inside, **FLOAT64_TOL)
    assert not np.allclose(rms_norm(x, w, eps=0.5), outside)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_running_stats_match_torch(rng, dtype, shape, momentum):
    c = shape[1]
    gamma, beta = _affine(rng, c, dtype)
    rm, rv = np.zeros(c, dtype), np.ones(c, dtype)
    trm, trv = torch.zeros(c, dtype=t(rm).dtype), torch.ones(c, dtype=t(rv).dtype)
    for _ in range(4):  # several training steps: F.batch_norm updates trm/trv in place
        x = _data(rng, shape, dtype)
        y, rm, rv = batch_norm(x, gamma, beta, rm, rv, training=True, momentum=momentum)
        ref = F.batch_norm(t(x), trm, trv, t(gamma), t(beta), training=True, momentum=momentum)
        assert y.dtype == dtype and rm.dtype == dtype and rv.dtype == dtype
        np.testing.assert_allclose(y, ref.numpy(), **TOL[dtype])
        np.testing.assert_allclose(rm, trm.numpy(), **TOL[dtype])
        np.testing.assert_allclose(rv, trv.numpy(), **TOL[dtype])

    x = _data(rng, shape, dtype)  # then eval: running statistics, returned unchanged
    y, rm2, rv2 = batch_norm(x, gamma, beta, rm, rv, training=False)
    ref = F.batch_norm(t(x), trm, trv, t(gamma), t(beta), training=False)
    np.testing.assert_allclose(y, ref.numpy(), **TOL[dtype])
    np.testing.assert_array_equal(rm2, rm)
    np.testing.assert_array_equal(rv2, rv)
    assert rm2 is not rm and rv2 is not rv


def test_batch_norm_stores_unbiased_variance():
    # x = [[0], [2]]: mean 1, biased variance 1, unbiased variance 2
    x = np.array([[0.0], [2.0]])
    y, rm, rv = batch_norm(x, [1.0], [0.0], [0.0], [1.0], training=True, momentum=1.0, eps=0.0)
    np.testing.assert_allclose(y, [[-1.0], [1.0]], **FLOAT64_TOL)  # normalized with biased var
    np.testing.assert_allclose(rm, [1.0], **FLOAT64_TOL)
    np.testing.assert_allclose(rv, [2.0], **FLOAT64_TOL)  # stored unbiased var


def test_batch_norm_momentum_convention():
    # momentum 0.1 keeps 90% of the old estimate (not the optimizer-style 0.9)
    x = np.array([[10.0], [10.0]])
    _, rm, _ = batch_norm(x, [1.0], [0.0], [0.0], [1.0], training=True, momentum=0.1)
    np.testing.assert_allclose(rm, [1.0], **FLOAT64_TOL)


# ----------------------------------------------------------------------------------------------
# Numerics: large offsets


def _layer_norm_one_pass(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm with the one-pass variance E[x^2] - E[x]^2: the formula the library avoids."""
    mean = x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) - mean * mean
    return (x - mean) / np.sqrt(var + eps)


def _large_offset_input(rng) -> np.ndarray:
    """16 rows of 768 standard normal values plus 1e4, in float32 (FACTS.md's measurement)."""
    return (rng.normal(size=(16, 768)) + LARGE_OFFSET).astype(np.float32)


def _ln_unit(x: np.ndarray) -> np.ndarray:
    c = x.shape[-1]
    return layer_norm(x, np.ones(c, x.dtype), np.zeros(c, x.dtype))


def _bn_unit(x: np.ndarray) -> np.ndarray:
    c = x.shape[1]
    ones, zeros = np.ones(c, x.dtype), np.zeros(c, x.dtype)
    return batch_norm(x, ones, zeros, zeros, ones, training=True)[0]


@pytest.mark.parametrize(
    ("norm", "layout"),
    [
        (_ln_unit, lambda x: x),
        (_ln_unit, np.asfortranarray),  # strided last axis: numpy no longer sums it pairwise
        (_bn_unit, lambda x: np.ascontiguousarray(x.T)),  # 768 samples of 16 channels
    ],
    ids=["layer_norm", "layer_norm-fortran-order", "batch_norm"],
)
def test_two_pass_variance_survives_large_offset(rng, norm, layout):
    x = layout(_large_offset_input(rng))
    y32 = norm(x)
    y64 = norm(x.astype(np.float64))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, y64, rtol=0, atol=LARGE_OFFSET_ATOL)


def test_one_pass_variance_fails_the_same_check(rng):
    # The tolerance above can fail: the one-pass formula misses it by orders of magnitude (or gives
    # NaN where the computed variance is negative).
    x32 = _large_offset_input(rng)
    with np.errstate(invalid="ignore"):
        bad = _layer_norm_one_pass(x32)
        within = np.abs(bad - _layer_norm_one_pass(x32.astype(np.float64))) <= LARGE_OFFSET_ATOL
    assert not within.all()


# ----------------------------------------------------------------------------------------------
# dtypes, validation, no in-place modification


def test_results_keep_float32_with_float64_parameters(rng):
    x = _data(rng, (4, 6), np.float32)
    g, b = _affine(rng, 6, np.float64)
    assert layer_norm(x, g, b).dtype == np.float32
    assert rms_norm(x, g).dtype == np.float32
    assert batch_norm(x, g, b, np.zeros(6), np.ones(6), training=True)[0].dtype == np.float32
    dy = np.ones_like(x)
    assert all(a.dtype == np.float32 for a in layer_norm_backward(dy, x, g))
    assert all(a.dtype == np.float32 for a in batch_norm_backward(dy, x, g))
    assert all(a.dtype == np.float32 for a in rms_norm_backward(dy, x, g))


def test_float16_is_computed_in_float32(rng):
    x = _data(rng, (4, 32), np.float16)
    g, b = _affine(rng, 32, np.float16)
    y = layer_norm(x, g, b)
    assert y.dtype == np.float16
    ref = layer_norm(x.astype(np.float32), g.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(y, ref.astype(np.float16))  # one rounding, at the end


def _call_every_function(x, g, b, rm, rv, dy):
    layer_norm(x, g, b)
    layer_norm_backward(dy, x, g)
    rms_norm(x, g)
    rms_norm_backward(dy, x, g)
    batch_norm(x, g, b, rm, rv, training=True)
    batch_norm(x, g, b, rm, rv, training=False)
    batch_norm_backward(dy, x, g)


def test_inputs_are_not_modified(rng):
    x = _data(rng, (5, 4), np.float64)
    g, b = _affine(rng, 4, np.float64)
    rm, rv = rng.normal(size=4), rng.uniform(0.5, 2, size=4)
    dy = rng.normal(size=x.shape)
    arrays = (x, g, b, rm, rv, dy)
    copies = [a.copy() for a in arrays]
    _call_every_function(*arrays)
    for a, c in zip(arrays, copies, strict=True):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: layer_norm(np.zeros((2, 3, 4)), np.ones(5), np.zeros(4)), ["(5,)", "(2, 3, 4)"]),
        (lambda: layer_norm(np.zeros((2, 4)), np.ones(4), np.zeros(3)), ["beta", "(3,)"]),
        (lambda: layer_norm(np.float64(1.0), np.ones(1), np.zeros(1)), ["at least 1-D"]),
        (lambda: layer_norm_backward(np.zeros((2, 3)), np.zeros((2, 4)), np.ones(4)), ["dy"]),
        (lambda: rms_norm(np.zeros((2, 4)), np.ones((4, 1))), ["weight", "(4, 1)", "(2, 4)"]),
        (lambda: rms_norm_backward(np.zeros((2, 4)), np.zeros((2, 4)), np.ones(3)), ["(3,)"]),
        (
            lambda: batch_norm(
                np.zeros((2, 3)), np.ones(3), np.zeros(3), np.zeros(2), np.ones(3), True
            ),
            ["running_mean", "(2,)", "(2, 3)"],
        ),
        (
            lambda: batch_norm(np.zeros(3), np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), True),
            ["at least 2-D"],
        ),
        (
            lambda: batch_norm(
                np.zeros((1, 3)), np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), True
            ),
            ["more than 1 value per channel", "(1, 3)"],
        ),
        (
            lambda: batch_norm(
                np.zeros((4, 3)), np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), True, None
            ),
            ["momentum=None"],
        ),
        (lambda: batch_norm_backward(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(2)), ["gamma"]),
    ],
    ids=[
        "ln-gamma",
        "ln-beta",
        "ln-0d",
        "ln-bwd-dy",
        "rms-weight",
        "rms-bwd-weight",
        "bn-running-mean",
        "bn-1d",
        "bn-one-value",
        "bn-momentum-none",
        "bn-bwd-gamma",
    ],
)
def test_clear_errors(call, fragments):
    with pytest.raises(ValueError) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value)


def test_exact_error_message_for_wrong_gamma():
    expected = (
        "layer_norm: gamma has shape (5,) but x has 4 features on its last axis (x.shape=(2, 3, 4))"
    )
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        layer_norm(np.zeros((2, 3, 4)), np.ones(5), np.zeros(4))


def test_batch_norm_eval_allows_a_single_value_per_channel(rng):
    x = _data(rng, (1, 3), np.float64)
    y, _, _ = batch_norm(x, np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), training=False)
    np.testing.assert_allclose(y, x / np.sqrt(1 + 1e-5), **FLOAT64_TOL)


def test_integer_input_is_rejected():
    with pytest.raises(TypeError, match="floating-point"):
        layer_norm(np.arange(6).reshape(2, 3), np.ones(3), np.zeros(3))


# ----------------------------------------------------------------------------------------------
# Backward: autograd and finite differences (float64)


def _ln_torch(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)


def _bn_torch(x, g, b):
    return F.batch_norm(x, None, None, g, b, training=True, eps=1e-5)


def _rms_torch(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


# name -> (forward(x, *params) -> y, backward(dy, x, *params) -> (dx, *dparams),
#          the same forward in torch, input shapes, number of params (gamma[, beta]))
CASES = {
    "layer_norm": (
        lambda x, g, b: layer_norm(x, g, b),
        lambda dy, x, g, b: layer_norm_backward(dy, x, g),
        _ln_torch,
        [(4, 6), (2, 3, 5), (1, 5)],
        2,
    ),
    "batch_norm": (
        lambda x, g, b: batch_norm(x, g, b, np.zeros_like(g), np.ones_like(g), training=True)[0],
        lambda dy, x, g, b: batch_norm_backward(dy, x, g),
        _bn_torch,
        [(5, 3), (3, 2, 4), (2, 3, 2, 2)],
        2,
    ),
    "rms_norm": (
        lambda x, w: rms_norm(x, w),
        lambda dy, x, w: rms_norm_backward(dy, x, w),
        _rms_torch,
        [(4, 6), (2, 3, 5), (1, 5)],
        1,
    ),
}
GRAD_CASES = [(name, shape) for name, case in CASES.items() for shape in case[3]]


def _grad_inputs(rng, name, shape):
    x = _data(rng, shape, np.float64)
    c = shape[1] if name == "batch_norm" else shape[-1]
    gamma, beta = _affine(rng, c, np.float64)
    params = (gamma, beta)[: CASES[name][4]]
    dy = rng.normal(size=shape)
    return x, params, dy


@pytest.mark.parametrize(("name", "shape"), GRAD_CASES)
def test_backward_matches_autograd(rng, name, shape):
    _, backward, torch_forward, _, _ = CASES[name]
    x, params, dy = _grad_inputs(rng, name, shape)
    grads = backward(dy, x, *params)

    tx = t(x, requires_grad=True)
    tparams = [t(p, requires_grad=True) for p in params]
    torch_forward(tx, *tparams).backward(t(dy))
    expected = [tx.grad.numpy()] + [p.grad.numpy() for p in tparams]
    assert len(grads) == len(expected)
    for got, ref in zip(grads, expected, strict=True):
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, **GRAD_AUTOGRAD_TOL)


@pytest.mark.parametrize(("name", "shape"), GRAD_CASES)
def test_backward_matches_finite_differences(rng, name, shape):
    forward, backward, _, _, _ = CASES[name]
    x, params, dy = _grad_inputs(rng, name, shape)
    grads = backward(dy, x, *params)

    np.testing.assert_allclose(
        grads[0], numerical_gradient(lambda v: forward(v, *params), x, dy, h=1e-5), **GRAD_FD_TOL
    )
    for k, p in enumerate(params):

        def f(v, k=k):
            ps = list(params)
            ps[k] = v
            return forward(x, *ps)

        numeric = numerical_gradient(f, p, dy, h=1e-5)
        np.testing.assert_allclose(grads[1 + k], numeric, **GRAD_FD_TOL)


def test_numerical_gradient_helper_is_correct():
    # d/dx sum(x**3 * dy) = 3 x**2 dy
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    dy = np.array([[1.0, 2.0], [-1.0, 0.5]])
    np.testing.assert_allclose(numerical_gradient(lambda v: v**3, x, dy), 3 * x**2 * dy, rtol=1e-8)
