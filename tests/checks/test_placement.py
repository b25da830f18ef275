"""The placement checks accept the reference and name each mistake (blocks, stack, schedules)."""

import math

import pytest
import torch
from torch import nn

from addnorm_lib import checks
from addnorm_lib.reference import mistakes, placement


def test_references_pass(capsys):
    checks.check_post_ln_block(placement.PostLNBlock)
    checks.check_pre_ln_block(placement.PreLNBlock, seed=5)
    checks.check_pre_ln_stack(placement.PreLNStack)
    checks.check_vaswani_lr(placement.vaswani_lr)
    checks.check_warmup_rsqrt_lr(placement.warmup_rsqrt_lr)
    assert "✓ PreLNStack passed 3 checks" in capsys.readouterr().out


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
    (checks.check_post_ln_block, m, "not normalized" if m.name in POST_BY_STATISTICS else "")
    for m in mistakes.POST_LN_BLOCK_MISTAKES
] + [
    (checks.check_pre_ln_block, m, "normalizes the residual stream" if m.name == "post_ln" else "")
    for m in mistakes.PRE_LN_BLOCK_MISTAKES
]


@pytest.mark.parametrize(
    ("check", "mistake", "message"),
    BLOCK_CASES,
    ids=[f"{c.__name__}-{m.name}" for c, m, _ in BLOCK_CASES],
)
def test_block_mistakes_are_rejected_with_a_specific_message(check, mistake, message):
    """Each is named, also where the statistics of the output already give it away (parallel
    blocks, missing norms, as well as the older catalogue)."""
    with pytest.raises(checks.CheckFailed) as info:
        check(_block_class(mistake))
    assert message in str(info.value) and mistake.diagnosis in str(info.value)


def test_sublayers_under_other_names_are_reported_not_the_right_norms():
    """The norms are named as asked: the message names the renamed attention, never the norms."""

    class Block(placement.PostLNBlock):
        def __init__(self, self_attn, ffn, d_model):
            super().__init__(self_attn, ffn, d_model)
            self.attn = self.self_attn
            del self.self_attn

        def forward(self, x):
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.ffn(x))

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_post_ln_block(Block)
    message = str(info.value)
    assert "it has no self_attn.*" in message and "it has attn.*" in message, message
    assert "norm1" not in message.split("Hint")[0], message


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


@pytest.mark.parametrize(
    "mistake", mistakes.placement.PRE_LN_EMPTY_STACK_MISTAKES, ids=lambda m: m.name
)
def test_empty_stack_mistakes_are_named(mistake):
    """Right for three layers, wrong for none: the empty stack is checked, and named."""

    class Stack(placement.PreLNStack):
        def forward(self, x):
            return mistake.compute(x, list(self.layers), self.norm)

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_pre_ln_stack(Stack)
    assert mistake.diagnosis in str(info.value)


def test_a_stack_that_reads_its_first_layer_fails_on_an_empty_stack_and_is_told_so():
    class Stack(placement.PreLNStack):
        def forward(self, x):
            x = self.layers[0](x)
            for layer in self.layers[1:]:
                x = layer(x)
            return self.norm(x)

    with pytest.raises(checks.CheckFailed, match=r"a stack of no layers, raised IndexError"):
        checks.check_pre_ln_stack(Stack)


def test_a_block_returning_float32_gets_torch_advice():
    class Block(placement.PreLNBlock):
        def forward(self, x):
            return super().forward(x).float()

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_pre_ln_block(Block)
    message = str(info.value)
    assert ".to(x.dtype)" in message and ".astype" not in message, message


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


@pytest.mark.parametrize("block", ["PreLNBlock", "PostLNBlock"])
def test_a_block_that_changes_its_input_in_place_is_caught(block):
    """Right output, but the caller's x is changed: found with gradients on, no clone."""
    reference = getattr(placement, block)
    post = block == "PostLNBlock"

    class InPlace(reference):
        def forward(self, x):
            if post:
                x += self.self_attn(x)
                x.copy_(self.norm1(x))
                x += self.ffn(x)
                return self.norm2(x)
            x += self.self_attn(self.norm1(x))
            x += self.ffn(self.norm2(x))
            return x

    check = checks.check_post_ln_block if post else checks.check_pre_ln_block
    with pytest.raises(checks.CheckFailed, match="changed its input x in place"):
        check(InPlace)


def test_a_schedule_whose_branch_ends_one_step_early_is_caught():
    """The step just before warm-up ends is checked: an off-by-one branch shows there."""

    def warmup_rsqrt_lr(step, peak_lr, warmup):
        rising = step < warmup - 1
        return peak_lr * (step / warmup if rising else math.sqrt(warmup / step))

    with pytest.raises(checks.CheckFailed, match="step=99"):
        checks.check_warmup_rsqrt_lr(warmup_rsqrt_lr)


def test_a_block_whose_forward_raises_is_told_so_not_sent_to_its_names():
    """The constructor and the names are right: the message says the forward raised."""

    class Block(placement.PostLNBlock):
        def forward(self, x):
            return self.norm2(self.ffn(x.transpose(1, 2)))

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_post_ln_block(Block)
    message = str(info.value)
    assert "PostLNBlock's forward raised RuntimeError" in message, message
    assert "name the two LayerNorms" not in message, message
