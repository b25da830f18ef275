"""The RMSNorm checks accept the references and reject each known mistake under its own name."""

import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.reference import mistakes, modules, norms


def test_references_pass(capsys):
    checks.check_rms_norm(norms.rms_norm)
    checks.check_rms_norm_backward(norms.rms_norm_backward, seed=2024)
    checks.check_rms_norm_module(modules.RMSNorm)
    out = capsys.readouterr().out
    assert "✓ rms_norm passed 8 checks" in out
    assert "✓ RMSNorm passed 13 checks" in out


def _with_reference_dx(mistake):
    """A backward whose dx is the reference wherever the mistake only concerns dweight."""

    def backward(dy, x, weight, eps=1e-6):
        dx, dweight = mistake.compute(dy, x, weight, eps)
        return norms.rms_norm_backward(dy, x, weight, eps)[0] if dx is None else dx, dweight

    return backward


@pytest.mark.parametrize(
    ("check", "function", "diagnosis"),
    [(checks.check_rms_norm, m.compute, m.diagnosis) for m in mistakes.RMS_NORM_MISTAKES]
    + [
        (checks.check_rms_norm_backward, _with_reference_dx(m), m.diagnosis)
        for m in mistakes.RMS_NORM_BACKWARD_MISTAKES
    ],
    ids=[m.name for m in (*mistakes.RMS_NORM_MISTAKES, *mistakes.RMS_NORM_BACKWARD_MISTAKES)],
)
def test_each_mistake_is_rejected_and_named(check, function, diagnosis):
    with pytest.raises(checks.CheckFailed) as info:
        check(function)
    assert diagnosis in str(info.value)


def _dims(module):
    return tuple(range(-len(module.normalized_shape), 0))


def _eps(module, dtype):
    return torch.finfo(dtype).eps if module.eps is None else module.eps


class NoUpcast(modules.RMSNorm):
    """Computes half-precision inputs in half precision."""

    def forward(self, x):
        half = x.dtype in (torch.float16, torch.bfloat16)
        ms = (x * x).mean(_dims(self), keepdim=True)
        return x * torch.rsqrt(ms + _eps(self, torch.float32 if half else x.dtype)) * self.weight


class HalfEps(modules.RMSNorm):
    """Upcasts, but takes eps=None as the *input* dtype's eps (float16's is about 1e-3)."""

    def forward(self, x):
        xf = x.float()
        ms = (xf * xf).mean(_dims(self), keepdim=True)
        return (xf * torch.rsqrt(ms + _eps(self, x.dtype)) * self.weight).to(x.dtype)


class NoCastBack(modules.RMSNorm):
    """Upcasts and forgets to cast the result back."""

    def forward(self, x):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        ms = (xf * xf).mean(_dims(self), keepdim=True)
        return xf * torch.rsqrt(ms + _eps(self, xf.dtype)) * self.weight


class LlamaOrder(modules.RMSNorm):
    """Right: LLaMA's order, casting back before multiplying by the weight (one more rounding)."""

    def forward(self, x):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        ms = (xf * xf).mean(_dims(self), keepdim=True)
        y = (xf * torch.rsqrt(ms + _eps(self, xf.dtype))).to(x.dtype)
        return y if self.weight is None else y * self.weight


class Float32Eps(modules.RMSNorm):
    """Right in half precision (computed in float32, float32's eps), but takes eps=None as
    float32's eps for float64 input too: only a float64 input of tiny values shows it."""

    def forward(self, x):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        eps = torch.finfo(torch.float32).eps if self.eps is None else self.eps
        ms = (xf * xf).mean(_dims(self), keepdim=True)
        y = xf * torch.rsqrt(ms + eps)
        return (y if self.weight is None else y * self.weight).to(x.dtype)


class Centered(modules.RMSNorm):
    def forward(self, x):
        return super().forward(x - x.mean(-1, keepdim=True))


class NoWeight(modules.RMSNorm):
    def forward(self, x):
        return modules.rms_norm(x, self.normalized_shape, None, self.eps)


class CallsTorch(modules.RMSNorm):
    def forward(self, x):
        return torch.nn.functional.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class WithBias(modules.RMSNorm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bias = torch.nn.Parameter(torch.zeros(self.normalized_shape))


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NoUpcast, "matches computing the whole norm in float16"),
        (HalfEps, "with eps=None you used torch.finfo(bfloat16).eps"),
        (Float32Eps, "With eps=None you used float32's machine epsilon"),
        (NoCastBack, "the output has dtype float32, but the input was float16"),
        (Centered, "You subtracted the mean"),
        (NoWeight, "You left out the weight"),
        (CallsTorch, "calls torch's own normalization function"),
        (WithBias, "RMSNorm has one parameter, weight (no bias)"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_module_mistakes_are_rejected_and_named(cls, message):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_rms_norm_module(cls)
    assert message in str(info.value)


def test_llamas_order_of_rounding_passes_until_the_weight_is_float32():
    """LLaMA's order (cast back, then multiply by the weight) stays within tolerance on every
    half-precision input of a converted module; with a float32 weight and a float16 input (as
    under autocast) it returns float32, unlike torch.nn.RMSNorm: named as that promotion."""
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_rms_norm_module(LlamaOrder)
    message = str(info.value)
    assert "float16 (B, T, C) input to a module whose weight stays float32" in message, message
    assert "`y * self.weight` promotes a float16 y to float32" in message, message
