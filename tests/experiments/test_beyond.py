"""The "Beyond Pre-LN and Post-LN" chapter's pieces compute what their docstrings say."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from addnorm_lib.experiments.beyond import (
    VARIANTS,
    Attention,
    BeyondModel,
    DyT,
    HiddenNormFeedForward,
    NormFormerBlock,
    attention_entropy,
    layer_gradient_norms,
    normformer_extra_parameters,
    qk_logit_bound,
    scale_branch_weights_,
    scale_qk_,
    stream_rms,
    train_beyond_model,
)
from addnorm_lib.experiments.deepnorm import reverse_task
from addnorm_lib.reference.placement import PreLNBlock
from addnorm_lib.transformer.architectures import OutputNormBlock
from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

SIZES = {"vocab_size": 7, "seq_len": 5, "num_layers": 3, "d_model": 16, "nhead": 2}


def model(variant: str, seed: int = 0) -> BeyondModel:
    torch.manual_seed(seed)
    return BeyondModel(variant, **SIZES, dim_feedforward=24)


def test_attention_without_options_is_the_course_self_attention():
    torch.manual_seed(0)
    ours = Attention(16, 4)
    torch.manual_seed(0)
    theirs = SelfAttention(16, 4)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p, q), name  # same draws, same names
    with torch.no_grad():
        for layer in (ours.q_proj, ours.k_proj, ours.v_proj, ours.out_proj):
            layer.bias.normal_()  # non-zero biases, so that they are checked too
        theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 6, 16)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
    assert math.isclose(ours.last_max_logit, ours.logits(x).abs().max().item(), rel_tol=1e-6)


@pytest.mark.parametrize("qk_norm", ["head", "all"])
def test_qk_norm_makes_the_logits_ignore_the_scale_of_wq_wk_and_obeys_its_bound(qk_norm):
    torch.manual_seed(1)
    attention = Attention(16, 4, qk_norm=qk_norm)
    size = 4 if qk_norm == "head" else 16
    assert attention.q_norm.weight.shape == attention.k_norm.weight.shape == (size,)
    with torch.no_grad():
        attention.q_norm.weight.uniform_(-2, 2)
        attention.k_norm.weight.uniform_(-2, 2)
        x = 3 * torch.randn(4, 7, 16)
        before = attention.logits(x)
        after = scale_qk_(attention, 50.0).logits(x)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
    bound = qk_logit_bound(attention)
    gains = attention.q_norm.weight.abs().max() * attention.k_norm.weight.abs().max()
    assert math.isclose(bound, gains.item() * size / 2.0, rel_tol=1e-6)  # sqrt(C / H) = 2
    assert before.abs().max() <= bound
    # the bound is reached when a query and a key are aligned with the largest gains
    attention2 = Attention(8, 1, qk_norm="head")
    with torch.no_grad():
        attention2.q_proj.weight.copy_(torch.eye(8))
        attention2.k_proj.weight.copy_(torch.eye(8))
        z = attention2.logits(torch.ones(1, 2, 8))
    assert math.isclose(z.max().item(), qk_logit_bound(attention2), rel_tol=1e-5)


def test_plain_logits_grow_with_the_square_of_the_factor_and_have_no_bound():
    torch.manual_seed(2)
    attention = Attention(16, 4)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        before = attention.logits(x)
        after = scale_qk_(attention, 3.0).logits(x)
    torch.testing.assert_close(after, 9 * before, rtol=1e-4, atol=1e-5)
    assert qk_logit_bound(attention) == math.inf
    with pytest.raises(ValueError):
        Attention(16, 4, qk_norm="token")
    with pytest.raises(ValueError):
        Attention(15, 4)


def test_head_scale_multiplies_each_head_before_the_output_projection():
    x = torch.randn(2, 4, 8)
    torch.manual_seed(3)
    scaled = Attention(8, 2, head_scale=True)
    assert torch.equal(scaled.head_scale, torch.ones(2))
    torch.manual_seed(3)
    zeroed = Attention(8, 2, head_scale=True)
    with torch.no_grad():
        reference = scaled(x)
        scaled.head_scale.fill_(2.0)
        torch.testing.assert_close(scaled(x), 2 * reference)  # out_proj's bias is zero
        scaled.head_scale.copy_(torch.tensor([0.0, 1.0]))
        zeroed.v_proj.weight[:4].zero_()  # the first head's values, instead
        zeroed.v_proj.bias[:4].zero_()
        torch.testing.assert_close(scaled(x), zeroed(x))
        assert not torch.allclose(scaled(x), reference)


def test_attention_entropy_is_between_zero_and_log_t():
    uniform = torch.zeros(2, 3, 6, 6)
    torch.testing.assert_close(attention_entropy(uniform), torch.full((2, 3, 6), math.log(6)))
    peaked = torch.zeros(1, 1, 4, 4)
    peaked[..., 0] = 100.0
    assert attention_entropy(peaked).max() < 1e-3


def test_dyt_is_weight_times_tanh_of_alpha_x_plus_bias():
    dyt = DyT(6)
    assert dyt.alpha.item() == 0.5 and dyt.alpha.shape == ()
    assert torch.equal(dyt.weight, torch.ones(6)) and torch.equal(dyt.bias, torch.zeros(6))
    with torch.no_grad():
        dyt.weight.normal_()
        dyt.bias.normal_()
        dyt.alpha.fill_(0.3)
    x = 5 * torch.randn(2, 3, 6)
    torch.testing.assert_close(dyt(x), dyt.weight * torch.tanh(0.3 * x) + dyt.bias)
    assert "alpha=0.3" in repr(dyt)


def test_hidden_norm_ffn_and_normformer_block():
    torch.manual_seed(4)
    ffn = HiddenNormFeedForward(8, 12)
    with torch.no_grad():
        ffn.hidden_norm.weight.normal_()
    x = torch.randn(2, 3, 8)
    expected = ffn.fc2(F.layer_norm(F.gelu(ffn.fc1(x)), (12,), ffn.hidden_norm.weight))
    torch.testing.assert_close(ffn(x), expected)

    torch.manual_seed(5)
    block = NormFormerBlock(Attention(8, 2, head_scale=True), HiddenNormFeedForward(8, 32), 8)
    h = block.norm1(x)
    h = x + block.attn_out_norm(block.self_attn(h))
    torch.testing.assert_close(block(x), h + block.ffn(block.norm2(h)))

    pre = PreLNBlock(Attention(8, 2), FeedForward(8, 32), 8)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(block) - count(pre) == normformer_extra_parameters(8, 2, 32) == 2 * 8 + 2 + 64


def test_every_variant_draws_the_same_embeddings_and_projections():
    base = dict(model("pre").named_parameters())
    for variant in VARIANTS:
        m = model(variant)
        shared = 0
        for name, p in m.named_parameters():
            if name in base and (
                "proj" in name or "fc" in name or "embed" in name or "head" in name
            ):
                assert torch.equal(p, base[name]), (variant, name)
                shared += 1
        assert shared >= 4 * SIZES["num_layers"], variant
        tokens, _ = reverse_task(2, 5, 7)
        assert m(tokens).shape == (2, 5, 7)
    with pytest.raises(ValueError):
        model("post")
    assert isinstance(model("dyt").norm, DyT) and isinstance(model("dyt").blocks[0].norm1, DyT)
    assert model("olmo2").blocks[0].self_attn.qk_norm == "all"
    assert model("qk").blocks[0].self_attn.qk_norm == "head"
    assert isinstance(model("output").blocks[0], OutputNormBlock)


def test_scaling_the_branches_scales_pre_ln_additions_and_not_output_norm_blocks():
    torch.manual_seed(6)
    pre = PreLNBlock(Attention(8, 2), FeedForward(8, 16), 8)
    torch.manual_seed(6)
    out = OutputNormBlock(Attention(8, 2), FeedForward(8, 16), 8, norm=nn.LayerNorm)
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        attn_before = pre.self_attn(pre.norm1(x))
        out_before = out(x)
        scale_branch_weights_(pre, 3.0)
        scale_branch_weights_(out, 3.0)
        torch.testing.assert_close(pre.self_attn(pre.norm1(x)), 3 * attn_before)
        torch.testing.assert_close(out(x), out_before, rtol=1e-4, atol=1e-4)


def test_stream_rms_and_layer_gradients():
    m = model("pre")
    tokens, targets = reverse_task(4, 5, 7, torch.Generator().manual_seed(0))
    rms = stream_rms(m, tokens)
    assert rms.shape == (SIZES["num_layers"] + 1,) and (rms > 0).all()
    with torch.no_grad():
        x0 = m.embed(tokens) + m.pos
    assert math.isclose(rms[0], x0.pow(2).mean(-1).sqrt().mean().item(), rel_tol=1e-6)
    grads = layer_gradient_norms(m, tokens, targets)
    assert grads.shape == (SIZES["num_layers"],) and (grads > 0).all()
    assert all(p.grad is None for p in m.parameters())  # reset after the measurement
    again = layer_gradient_norms(m, tokens, targets)
    assert (grads == again).all()


def test_training_is_seeded_and_records_the_logits():
    runs = []
    for _ in range(2):
        m = model("qk", seed=3)
        runs.append(train_beyond_model(m, seed=3, lr=1e-2, steps=8))
    first, second = runs
    assert (first.losses == second.losses).all() and first.final_loss == second.final_loss
    assert first.max_logit.shape == (8,) and (first.max_logit > 0).all()
    assert first.losses[-1] < first.losses[0] and 0 <= first.final_accuracy <= 1
