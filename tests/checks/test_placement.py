"""The placement reference (blocks, stack, schedules) and its checks, which name each mistake."""

import math

import pytest
import torch
from torch import nn

from addnorm_lib import checks
from addnorm_lib.reference import mistakes, placement
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


def test_references_pass(capsys):
    checks.check_post_ln_block(placement.PostLNBlock)
    checks.check_pre_ln_block(placement.PreLNBlock, seed=5)
    checks.check_pre_ln_stack(placement.PreLNStack)
    checks.check_vaswani_lr(placement.vaswani_lr)
    checks.check_warmup_rsqrt_lr(placement.warmup_rsqrt_lr)
    assert "✓ PreLNStack passed 2 checks" in capsys.readouterr().out


def _block_class(mistake):
    class Block(nn.Module):
        def __init__(self, self_attn, ffn, d_model):
            super().__init__()
            self.self_attn, self.ffn = self_attn, ffn
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

        def forward(self, x):
            return mistake.compute(x, self.self_attn, self.ffn, self.norm1, self.norm2)

    return Block


# For these the per-token statistics already give the mistake away; the message says what they show.
POST_BY_STATISTICS = ("pre_ln", "norm_on_branch", "no_residual")
BLOCK_CASES = [
    (checks.check_post_ln_block, m,
     "not normalized" if m.name in POST_BY_STATISTICS else m.diagnosis)
    for m in mistakes.POST_LN_BLOCK_MISTAKES
] + [
    (checks.check_pre_ln_block, m,
     "normalizes the residual stream" if m.name == "post_ln" else m.diagnosis)
    for m in mistakes.PRE_LN_BLOCK_MISTAKES
]  # fmt: skip


@pytest.mark.parametrize(("check", "mistake", "message"), BLOCK_CASES,
                         ids=[f"{c.__name__}-{m.name}" for c, m, _ in BLOCK_CASES])  # fmt: skip
def test_block_mistakes_are_rejected_with_a_specific_message(check, mistake, message):
    with pytest.raises(checks.CheckFailed) as info:
        check(_block_class(mistake))
    assert message in str(info.value)


def test_norms_under_other_names_are_reported():
    class Block(placement.PostLNBlock):
        def __init__(self, self_attn, ffn, d_model):
            super().__init__(self_attn, ffn, d_model)
            self.ln_attn, self.ln_ffn = self.norm1, self.norm2
            del self.norm1, self.norm2

        def forward(self, x):
            x = self.ln_attn(x + self.self_attn(x))
            return self.ln_ffn(x + self.ffn(x))

    with pytest.raises(checks.CheckFailed, match="name the two LayerNorms norm1 and norm2"):
        checks.check_post_ln_block(Block)


@pytest.mark.parametrize("mistake", mistakes.PRE_LN_STACK_MISTAKES, ids=lambda m: m.name)
def test_stack_mistakes_are_named(mistake):
    class Stack(nn.Module):
        def __init__(self, layers, norm):
            super().__init__()
            self.layers, self.norm = nn.ModuleList(layers), norm

        def forward(self, x):
            return mistake.compute(x, list(self.layers), self.norm)

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_pre_ln_stack(Stack)
    assert mistake.diagnosis in str(info.value)


def test_a_stack_that_keeps_its_layers_in_a_list_is_reported():
    class Stack(placement.PreLNStack):
        def __init__(self, layers, norm):
            super().__init__(layers, norm)
            self.__dict__["plain_list"] = list(self.layers)
            del self.layers

        def forward(self, x):
            for layer in self.plain_list:
                x = layer(x)
            return self.norm(x)

    with pytest.raises(checks.CheckFailed, match=r"nn\.ModuleList named self\.layers"):
        checks.check_pre_ln_stack(Stack)


@pytest.mark.parametrize(
    ("check", "mistake"),
    [(checks.check_vaswani_lr, m) for m in mistakes.VASWANI_LR_MISTAKES]
    + [(checks.check_warmup_rsqrt_lr, m) for m in mistakes.WARMUP_RSQRT_LR_MISTAKES],
    ids=lambda value: getattr(value, "name", None) or getattr(value, "__name__", ""),
)
def test_schedule_mistakes_are_named(check, mistake):
    with pytest.raises(checks.CheckFailed) as info:
        check(lambda *args: float(mistake.compute(*args)))
    assert mistake.diagnosis in str(info.value)


def test_a_schedule_returning_a_tensor_is_told_to_return_a_float():
    with pytest.raises(checks.CheckFailed, match="return a float"):
        checks.check_vaswani_lr(lambda step, d_model, warmup=4000: torch.tensor(1.0))


@pytest.mark.parametrize(
    "variant",
    [
        mistakes.placement._block_variant,
        mistakes.placement._stack_variant,
        mistakes.placement._schedule_variant,
        mistakes.placement._rsqrt_variant,
        mistakes.deepnorm._residual_variant,
    ],
)
def test_a_misspelled_mistake_name_is_an_error_not_another_variant(variant):
    with pytest.raises(ValueError, match=r"unknown .* mistake 'pre_lnn'; known: "):
        variant("pre_lnn")
