"""addnorm_lib.reference.modules.llama_rms_norm follows LLaMA's RMSNorm: float32 math, cast back,
then weight."""

import numpy as np
import pytest
import torch

from addnorm_lib.reference import norms
from addnorm_lib.reference.modules import llama_rms_norm


def llama_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LLaMA's RMSNorm.forward, written out (meta-llama/llama, llama/model.py)."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return normed.type_as(x) * weight


@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_float64_matches_the_numpy_reference(eps):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64, generator=gen) * 0.01
    w = torch.rand(16, dtype=torch.float64, generator=gen) + 0.5
    y = llama_rms_norm(x, w, eps=eps)
    assert y.dtype == torch.float64
    np.testing.assert_allclose(y.numpy(), norms.rms_norm(x.numpy(), w.numpy(), eps=eps), rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_half_inputs_match_llama_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(64, 32, generator=gen) * 3).to(dtype)
    w = (torch.rand(32, generator=gen) + 0.5).to(dtype)
    y = llama_rms_norm(x, w)
    assert y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y, llama_reference(x, w, 1e-6))


def test_float16_does_not_overflow_where_float16_math_would():
    x = torch.full((2, 8), 300.0, dtype=torch.float16)  # 300**2 = 9e4 > float16 max 65504
    w = torch.ones(8, dtype=torch.float16)
    naive = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)  # all in float16
    assert torch.all(naive == 0)  # x*x = inf, rsqrt(inf) = 0
    y = llama_rms_norm(x, w)
    assert torch.allclose(y.float(), torch.ones(2, 8), atol=1e-3)


def test_weight_is_applied_after_the_cast_back():
    # with weight applied in float32 before the cast (torch.nn.RMSNorm's order) some outputs differ
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(256, 64, generator=gen).to(torch.float16)
    w = (torch.rand(64, generator=gen) * 3).to(torch.float16)
    xf = x.float()
    fused_order = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).half()
    y = llama_rms_norm(x, w)
    assert not torch.equal(y, fused_order)
    assert torch.allclose(y.float(), fused_order.float(), rtol=2e-3, atol=2e-3)


def test_wrong_weight_shape_is_rejected():
    with pytest.raises(ValueError, match="trailing shape"):
        llama_rms_norm(torch.randn(4, 8), torch.ones(7))
