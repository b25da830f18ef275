"""Tests of the torch modules in ``addnorm_lib.reference.modules`` against their ``torch.nn``
twins."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import addnorm_lib.reference.modules as ours

# float64 vs float64: different summation orders, differences at the 1e-16 level.
FLOAT64_TOL = {"rtol": 1e-10, "atol": 1e-12}
# float32 vs float32: a few ulps (6e-8 each) per operation on O(1) outputs; observed ~5e-7.
FLOAT32_TOL = {"rtol": 1e-5, "atol": 1e-5}
TOL = {torch.float64: FLOAT64_TOL, torch.float32: FLOAT32_TOL}
# Half precision vs torch.nn.RMSNorm. Both compute in float32 and round once at the end, so they
# agree bit for bit on CPU today; allow one unit in the last place of the output (2**-10 relative
# for float16's 10 mantissa bits, 2**-7 for bfloat16's 7) in case a kernel's rsqrt differs.
HALF_TOL = {
    torch.float16: {"rtol": 2**-10, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2**-7, "atol": 1e-5},
}
# float32 module vs float64 on the same input shifted by 1e4. Near 1e4 float32's spacing is 9.8e-4,
# so the float32 mean alone may be ~5e-4 off, and torch's float32 sums add to that: ours measured
# 0.6e-3 to 1.3e-3 over four seeds. (Torch's own kernels, on the same inputs: LayerNorm 0.8e-3 to
# 1.3e-3, BatchNorm 3e-3 to 4.5e-3.) A one-pass variance goes negative here (NaN output).
LARGE_OFFSET_ATOL = 2e-3

DTYPES = [torch.float64, torch.float32]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randomize(module: nn.Module) -> nn.Module:
    """Move parameters away from 1 and 0: the defaults can hide a wrong implementation."""
    with torch.no_grad():
        if getattr(module, "weight", None) is not None:
            module.weight.uniform_(0.5, 2.0)
        if getattr(module, "bias", None) is not None:
            module.bias.normal_()
    return module


def _pair(ours_cls, torch_cls, *args, dtype=torch.float64, **kwargs):
    """A randomized torch.nn module and our module loaded with its state (strict)."""
    theirs = _randomize(torch_cls(*args, dtype=dtype, **kwargs))
    mine = ours_cls(*args, dtype=dtype, **kwargs)
    mine.load_state_dict(theirs.state_dict(), strict=True)
    return mine, theirs


def _data(shape, dtype, offset=0.5, scale=2.0):
    return (torch.randn(shape, dtype=torch.float64) * scale + offset).to(dtype)


def _assert_close(a, b, tol):
    torch.testing.assert_close(a, b, **tol)


def _forward_backward(module, x, dy):
    """Output, input gradient and parameter gradients of ``sum(module(x) * dy)``."""
    x = x.detach().clone().requires_grad_(True)
    y = module(x)
    y.backward(dy)
    grads = {name: p.grad for name, p in module.named_parameters()}
    return y.detach(), x.grad, grads


def _assert_same_forward_backward(mine, theirs, x, tol):
    dy = torch.randn_like(x)
    y1, dx1, g1 = _forward_backward(mine, x, dy)
    y2, dx2, g2 = _forward_backward(theirs, x, dy)
    assert y1.dtype == x.dtype
    _assert_close(y1, y2, tol)
    _assert_close(dx1, dx2, tol)
    assert g1.keys() == g2.keys()
    for name in g1:
        _assert_close(g1[name], g2[name], tol)


# ----------------------------------------------------------------------------------------------
# LayerNorm and RMSNorm against torch.nn (forward and autograd backward)

LN_CASES = [  # (normalized_shape, input shape, kwargs)
    (7, (4, 7), {}),
    (7, (2, 3, 7), {}),
    (7, (1, 7), {}),  # a batch of one
    ((3, 7), (2, 3, 7), {}),  # statistics over the last two dims
    (7, (2, 3, 7), {"bias": False}),
    (7, (2, 3, 7), {"elementwise_affine": False}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("normalized_shape", "shape", "kwargs"), LN_CASES)
def test_layer_norm_matches_torch(dtype, normalized_shape, shape, kwargs):
    mine, theirs = _pair(ours.LayerNorm, nn.LayerNorm, normalized_shape, dtype=dtype, **kwargs)
    _assert_same_forward_backward(mine, theirs, _data(shape, dtype), TOL[dtype])


def test_layer_norm_single_feature_gives_bias():
    mine, _ = _pair(ours.LayerNorm, nn.LayerNorm, 1)
    x = _data((5, 1), torch.float64)
    torch.testing.assert_close(mine(x), mine.bias.detach().expand(5, 1), rtol=0, atol=0)


RMS_CASES = [  # (normalized_shape, input shape, kwargs)
    (7, (4, 7), {}),
    (7, (2, 3, 7), {"eps": 1e-6}),
    (7, (1, 7), {}),
    ((3, 7), (2, 3, 7), {"eps": 1e-2}),
    (7, (2, 3, 7), {"elementwise_affine": False}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("normalized_shape", "shape", "kwargs"), RMS_CASES)
def test_rms_norm_matches_torch(dtype, normalized_shape, shape, kwargs):
    mine, theirs = _pair(ours.RMSNorm, nn.RMSNorm, normalized_shape, dtype=dtype, **kwargs)
    _assert_same_forward_backward(mine, theirs, _data(shape, dtype), TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [3.0, 1e-3])  # at 1e-3 the choice of the default eps shows
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_half_precision_matches_torch(dtype, scale, eps):
    mine, theirs = _pair(ours.RMSNorm, nn.RMSNorm, 256, dtype=dtype, eps=eps)
    x = _data((32, 256), dtype, offset=0.0, scale=scale)
    y = mine(x)
    assert y.dtype == dtype
    _assert_close(y, theirs(x), HALF_TOL[dtype])


def test_rms_norm_default_eps_follows_the_computation_dtype():
    # torch.nn.RMSNorm(eps=None) uses float32's eps for float16 input (it computes in float32),
    # not float16's 9.8e-4 that its docstring suggests. With rms ~1e-3 the difference is large:
    # this is what makes the scale=1e-3 case above able to fail.
    x = _data((8, 64), torch.float16, offset=0.0, scale=1e-3)
    theirs = nn.RMSNorm(64, dtype=torch.float16)(x)
    with_f16_eps = ours.rms_norm(x, (64,), None, eps=torch.finfo(torch.float16).eps)
    assert (with_f16_eps.float() - theirs.float()).abs().max() > 0.1
    _assert_close(ours.rms_norm(x, (64,)), theirs, HALF_TOL[torch.float16])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_half_precision_matches_torch(dtype):
    mine, theirs = _pair(ours.LayerNorm, nn.LayerNorm, 64, dtype=dtype)
    x = _data((16, 64), dtype)
    y = mine(x)
    assert y.dtype == dtype
    # torch's LayerNorm kernel also accumulates in float32 but rounds its mean/rstd differently
    # from a plain float32 expression: allow two output ulps.
    tol = {k: 2 * v for k, v in HALF_TOL[dtype].items()}
    _assert_close(y, theirs(x), tol)


# ----------------------------------------------------------------------------------------------
# BatchNorm1d against torch.nn over several steps


def _assert_same_buffers(mine: nn.Module, theirs: nn.Module, tol):
    b1, b2 = dict(mine.named_buffers()), dict(theirs.named_buffers())
    assert b1.keys() == b2.keys()
    for name in b1:
        if name == "num_batches_tracked":
            assert b1[name].dtype == torch.long
            assert torch.equal(b1[name], b2[name])
        else:
            _assert_close(b1[name], b2[name], tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 3), (6, 3, 5)])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"momentum": None}, {"momentum": 0.5}, {"track_running_stats": False}, {"affine": False}],
    ids=["momentum=0.1", "momentum=None", "momentum=0.5", "no-running-stats", "no-affine"],
)
def test_batch_norm_matches_torch_over_training_then_eval(dtype, shape, kwargs):
    mine, theirs = _pair(ours.BatchNorm1d, nn.BatchNorm1d, shape[1], dtype=dtype, **kwargs)
    for step in range(4):
        x = _data(shape, dtype, offset=step - 1.0)  # a drifting mean, so the averages differ
        _assert_same_forward_backward(mine, theirs, x, TOL[dtype])
        _assert_same_buffers(mine, theirs, TOL[dtype])
    mine.eval()
    theirs.eval()
    _assert_same_forward_backward(mine, theirs, _data(shape, dtype), TOL[dtype])
    _assert_same_buffers(mine, theirs, TOL[dtype])


def test_batch_norm_momentum_none_is_the_average_of_batch_statistics():
    bn = ours.BatchNorm1d(2, momentum=None, dtype=torch.float64)
    batches = [_data((5, 2), torch.float64, offset=k) for k in range(3)]
    for x in batches:
        bn(x)
    means = torch.stack([x.mean(0) for x in batches])
    variances = torch.stack([x.var(0, unbiased=True) for x in batches])
    _assert_close(bn.running_mean, means.mean(0), FLOAT64_TOL)
    _assert_close(bn.running_var, variances.mean(0), FLOAT64_TOL)
    assert bn.num_batches_tracked.item() == 3


def test_batch_norm_mode_is_decided_by_training_flag_only():
    bn = ours.BatchNorm1d(3, dtype=torch.float64)
    x = _data((8, 3), torch.float64, offset=3.0)
    with torch.no_grad():  # training mode without autograd: still batch statistics and updates
        y = bn(x)
    _assert_close(y.mean(0), torch.zeros(3, dtype=torch.float64), {"rtol": 0, "atol": 1e-12})
    assert bn.num_batches_tracked.item() == 1
    assert not torch.equal(bn.running_mean, torch.zeros(3, dtype=torch.float64))

    bn.eval()  # eval mode with autograd on: running statistics, no updates
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    x.requires_grad_(True)
    y = bn(x)
    expected = (x - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps)
    _assert_close(y, expected, FLOAT64_TOL)
    for k, v in bn.state_dict().items():
        assert torch.equal(v, before[k])


def test_batch_norm_reset_running_stats():
    bn = ours.BatchNorm1d(3)
    bn(_data((4, 3), torch.float32, offset=2.0))
    bn.reset_running_stats()
    fresh = nn.BatchNorm1d(3)
    _assert_same_buffers(bn, fresh, {"rtol": 0, "atol": 0})


def test_factory_kwargs():
    bn = ours.BatchNorm1d(3, dtype=torch.float64)
    assert bn.weight.dtype == bn.running_var.dtype == torch.float64
    assert bn.num_batches_tracked.dtype == torch.long
    assert ours.LayerNorm((2, 3), dtype=torch.float64).weight.shape == (2, 3)
    assert ours.RMSNorm(torch.Size([4]), dtype=torch.bfloat16).weight.dtype == torch.bfloat16
    assert ours.BatchNorm1d(3, track_running_stats=False).running_mean is None


# ----------------------------------------------------------------------------------------------
# state_dict in both directions

MODULE_PAIRS = {  # name -> (ours, torch.nn, constructor args, kwargs, input shape)
    "layer_norm": (ours.LayerNorm, nn.LayerNorm, (5,), {}, (3, 4, 5)),
    "layer_norm-no-bias": (ours.LayerNorm, nn.LayerNorm, ((4, 5),), {"bias": False}, (3, 4, 5)),
    "rms_norm": (ours.RMSNorm, nn.RMSNorm, (5,), {"eps": 1e-6}, (3, 4, 5)),
    "batch_norm": (ours.BatchNorm1d, nn.BatchNorm1d, (4,), {}, (6, 4, 3)),
    "batch_norm-no-stats": (
        ours.BatchNorm1d,
        nn.BatchNorm1d,
        (4,),
        {"track_running_stats": False},
        (6, 4),
    ),
}


def _trained_state(module: nn.Module, shape) -> nn.Module:
    """Random parameters and, for BatchNorm, non-default buffers from a few training steps."""
    _randomize(module)
    if isinstance(module, nn.BatchNorm1d | ours.BatchNorm1d):
        with torch.no_grad():
            for k in range(3):
                module(_data(shape, torch.float64, offset=k))
        module.eval()
    return module


@pytest.mark.parametrize("direction", ["torch->ours", "ours->torch"])
@pytest.mark.parametrize("name", list(MODULE_PAIRS))
def test_state_dict_round_trip(name, direction):
    ours_cls, torch_cls, args, kwargs, shape = MODULE_PAIRS[name]
    mine = ours_cls(*args, dtype=torch.float64, **kwargs)
    theirs = torch_cls(*args, dtype=torch.float64, **kwargs)
    src, dst = (theirs, mine) if direction == "torch->ours" else (mine, theirs)
    _trained_state(src, shape)
    dst.eval()

    result = dst.load_state_dict(src.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    s1, s2 = src.state_dict(), dst.state_dict()
    assert list(s1) == list(s2)
    for key in s1:
        assert s1[key].dtype == s2[key].dtype
        assert torch.equal(s1[key], s2[key]), key
    if "num_batches_tracked" in s1:
        assert s2["num_batches_tracked"].item() == 3
    x = _data(shape, torch.float64)
    _assert_close(dst(x), src(x), FLOAT64_TOL)


@pytest.mark.parametrize(
    ("ours_module", "torch_module"),
    [
        (ours.LayerNorm((3, 4)), nn.LayerNorm((3, 4))),
        (ours.LayerNorm(4, eps=1e-6, bias=False), nn.LayerNorm(4, eps=1e-6, bias=False)),
        (ours.LayerNorm(4, elementwise_affine=False), nn.LayerNorm(4, elementwise_affine=False)),
        (ours.BatchNorm1d(4), nn.BatchNorm1d(4)),
        (
            ours.BatchNorm1d(4, momentum=None, track_running_stats=False),
            nn.BatchNorm1d(4, momentum=None, track_running_stats=False),
        ),
        (ours.BatchNorm1d(4, affine=False), nn.BatchNorm1d(4, affine=False)),
        (ours.RMSNorm(4), nn.RMSNorm(4)),
        (ours.RMSNorm([2, 4], eps=1e-5), nn.RMSNorm([2, 4], eps=1e-5)),
    ],
)
def test_repr_matches_torch(ours_module, torch_module):
    assert repr(ours_module) == repr(torch_module)
    shape = getattr(torch_module, "normalized_shape", None)
    assert getattr(ours_module, "normalized_shape", None) == shape


# ----------------------------------------------------------------------------------------------
# Built on our own math, numerically sound, clear errors


def test_modules_do_not_call_torch_norm_kernels(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("addnorm_lib.reference.modules must not call torch's norm kernels")

    for owner, names in [
        (F, ["layer_norm", "batch_norm", "rms_norm", "group_norm", "instance_norm"]),
        (torch, ["layer_norm", "batch_norm", "rms_norm", "native_layer_norm", "native_batch_norm"]),
    ]:
        for fn in names:
            monkeypatch.setattr(owner, fn, forbidden)
    for module, shape in [
        (ours.LayerNorm(5), (3, 5)),
        (ours.RMSNorm(5), (3, 5)),
        (ours.BatchNorm1d(5), (3, 5, 2)),
        (ours.BatchNorm1d(5).eval(), (3, 5, 2)),
    ]:
        x = torch.randn(shape, requires_grad=True)
        module(x).sum().backward()
        assert x.grad is not None
    with pytest.raises(AssertionError, match="must not call"):  # the patch is in effect
        F.layer_norm(torch.randn(2, 5), (5,))


@pytest.mark.parametrize(
    ("module", "dims"),
    [(ours.LayerNorm(768), None), (ours.BatchNorm1d(16), "transpose")],
    ids=["layer_norm", "batch_norm"],
)
def test_large_offset_float32_agrees_with_float64(module, dims):
    x32 = torch.randn(16, 768) + 1e4
    if dims == "transpose":
        x32 = x32.T.contiguous()  # 768 samples of 16 channels
    y32 = module(x32)
    y64 = module.double()(x32.double())
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32.double(), y64, rtol=0, atol=LARGE_OFFSET_ATOL)


@pytest.mark.parametrize(
    ("module", "shape", "fragments"),
    [
        (ours.LayerNorm(5), (2, 4), ["(5,)", "(2, 4)"]),
        (ours.LayerNorm((3, 5)), (2, 4, 5), ["(3, 5)", "(2, 4, 5)"]),
        (ours.RMSNorm(5), (2, 4), ["(5,)", "(2, 4)"]),
        (ours.BatchNorm1d(3), (2, 3, 4, 5), ["expected 2D or 3D input (got 4D input)"]),
        (ours.BatchNorm1d(3), (2, 4), ["3 channels", "(2, 4)"]),
        (ours.BatchNorm1d(3), (1, 3), ["more than 1 value per channel", "(1, 3)"]),
        (ours.BatchNorm1d(3), (1, 3, 1), ["more than 1 value per channel", "(1, 3, 1)"]),
        (ours.BatchNorm1d(3, track_running_stats=False), (1, 3), ["more than 1 value"]),
        (ours.BatchNorm1d(3, track_running_stats=False).eval(), (1, 3), ["more than 1 value"]),
    ],
)
def test_clear_errors(module, shape, fragments):
    with pytest.raises(ValueError) as info:
        module(torch.randn(shape))
    for fragment in fragments:
        assert fragment in str(info.value)


def test_batch_norm_eval_accepts_a_single_example():
    bn = ours.BatchNorm1d(3).eval()
    x = torch.randn(1, 3)
    torch.testing.assert_close(bn(x), nn.BatchNorm1d(3).eval()(x))


# Inputs from torch's own module tests: an empty batch, and BatchNorm's eps checks.


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("LayerNorm", (0, 4)),
        ("LayerNorm", (2, 0, 4)),
        ("RMSNorm", (0, 4)),
        ("BatchNorm1d", (0, 4)),
        ("BatchNorm1d", (0, 4, 3)),
    ],
)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_an_empty_batch_behaves_as_in_torch(name, shape, training):
    twin, theirs = getattr(ours, name)(4).train(training), getattr(torch.nn, name)(4)
    theirs.train(training)
    x = torch.zeros(shape)
    assert twin(x).shape == theirs(x).shape == x.shape
    assert twin.state_dict().keys() == theirs.state_dict().keys()
    for key, value in theirs.state_dict().items():
        assert torch.equal(twin.state_dict()[key], value), key  # num_batches_tracked counts it


@pytest.mark.parametrize("eps", [0.0, -1e-5])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_checks_eps_as_torch(eps, training):
    x = torch.randn(3, 4)
    outcomes = []
    for cls in (ours.BatchNorm1d, torch.nn.BatchNorm1d):
        try:
            cls(4, eps=eps).train(training)(x)
            outcomes.append("ran")
        except ValueError as err:
            outcomes.append(str(err))
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] == "ran") == (not training and eps == 0.0)
