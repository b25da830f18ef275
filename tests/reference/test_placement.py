"""The placement reference: Post-LN and Pre-LN blocks, the Pre-LN stack, the two schedules."""

import math

import pytest
import torch
from torch import nn

from addnorm_lib.reference import placement
from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention


def _block(post=True):
    cls = placement.PostLNBlock if post else placement.PreLNBlock
    return cls(SelfAttention(16, 2), FeedForward(16, 32), 16)


def test_post_ln_tokens_leave_normalized_and_pre_ln_stream_does_not():
    torch.manual_seed(0)
    x = 3.0 * torch.randn(2, 5, 16)
    with torch.no_grad():
        post, pre = _block(post=True)(x), _block(post=False)(x)
    torch.testing.assert_close(post.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(post.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
    assert pre.var(-1, unbiased=False).min() > 2.0  # the input's scale survives Pre-LN


def test_pre_ln_stack_ends_with_its_norm():
    torch.manual_seed(0)
    blocks = [_block(post=False) for _ in range(3)]
    stack = placement.PreLNStack(blocks, nn.LayerNorm(16))
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        expected = stack.norm(blocks[2](blocks[1](blocks[0](x))))
        torch.testing.assert_close(stack(x), expected)
    assert {k.split(".")[0] for k in stack.state_dict()} == {"layers", "norm"}


def test_the_schedules_rise_then_fall_and_agree():
    lrs = [placement.vaswani_lr(s, 512) for s in (1, 2000, 4000, 8000)]
    assert lrs[0] < lrs[1] < lrs[2] > lrs[3]
    assert lrs[2] == pytest.approx((512 * 4000) ** -0.5)
    for step in (1, 10, 4000, 12345):
        assert placement.vaswani_lr(step, 256, 1000) == pytest.approx(
            placement.warmup_rsqrt_lr(step, (256 * 1000) ** -0.5, 1000), rel=1e-12
        )
    assert placement.warmup_rsqrt_lr(400, 1e-3, 100) == pytest.approx(1e-3 * math.sqrt(0.25))
    with pytest.raises(ValueError, match="counted from 1"):
        placement.vaswani_lr(0, 512)
