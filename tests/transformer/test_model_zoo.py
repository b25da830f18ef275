"""The models chapter's zoo: each builder passes its own check, and each check fails on a block
built the wrong way (a missing norm, a norm in the wrong place, the wrong kind of norm or eps)."""

import pytest
import torch
from torch import nn

from addnorm_lib.reference.deepnorm import DeepNormLayer
from addnorm_lib.reference.placement import PostLNBlock, PreLNBlock
from addnorm_lib.transformer import model_zoo as zoo
from addnorm_lib.transformer.architectures import OffsetRMSNorm, ParallelBlock, SandwichBlock
from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

D, H, F = 16, 2, 32  # smaller than the chapter's: the tests only need the behaviour
ROWS = ["transformer_2017", "bert", "gpt2", "t5", "llama", "deepseek_v3"]
ROWS += ["glm130b", "gemma", "olmo2", "bloom", "palm"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def x():
    return zoo.sample_input(d_model=D)


def parts():
    return SelfAttention(D, H), FeedForward(D, F)


def stack(block, n=2, **norms):
    return zoo.ZooStack([block(*parts()) for _ in range(n)], **norms)


def build(row):
    return getattr(zoo, f"build_{row}")(d_model=D, nhead=H, d_ff=F)


def check(row, model):
    return getattr(zoo, f"check_{row}")(model, x())


@pytest.mark.parametrize("row", ROWS)
def test_every_row_passes_its_own_check(row):
    assert isinstance(check(row, build(row)), dict)


def pre(norm=None, eps=1e-5):
    return lambda a, f: PreLNBlock(a, f, D, layer_norm_eps=eps, norm=norm)


def post(eps=1e-5):
    return lambda a, f: PostLNBlock(a, f, D, layer_norm_eps=eps)


def no_post_attn_norm(a, f):
    block = SandwichBlock(a, f, D)
    block.post_attn_norm = nn.Identity()
    return block


def biased_parallel(a, f):
    return ParallelBlock(a, f, D, norm=nn.LayerNorm)


WRONG = {
    "transformer_2017 built Pre-LN": ("transformer_2017", lambda: stack(pre())),
    "bert without its embedding norm": ("bert", lambda: stack(post(1e-12))),
    "bert with eps 1e-5": ("bert", lambda: stack(post(1e-5), embed_norm=nn.LayerNorm(D))),
    "gpt2 without its final norm": ("gpt2", lambda: stack(pre())),
    "gpt2 built Post-LN": ("gpt2", lambda: stack(post(), final_norm=nn.LayerNorm(D))),
    "gpt2 with the final norm's eps 1e-6": (
        "gpt2",
        lambda: stack(pre(), final_norm=nn.LayerNorm(D, eps=1e-6)),
    ),
    "t5 with LayerNorm": ("t5", lambda: stack(pre())),
    "t5 with RMSNorm's default eps": ("t5", lambda: stack(pre(nn.RMSNorm))),
    "llama without its final norm": ("llama", lambda: stack(pre(nn.RMSNorm))),
    "llama with LayerNorm": ("llama", lambda: stack(pre(), final_norm=nn.LayerNorm(D))),
    "llama built Post-LN": ("llama", lambda: stack(post(), final_norm=nn.RMSNorm(D))),
    "deepseek_v3 with LayerNorm": ("deepseek_v3", lambda: stack(pre())),
    "deepseek_v3 built Post-LN": ("deepseek_v3", lambda: stack(post())),
    "glm130b with DeepNet's alpha": (
        "glm130b",
        lambda: zoo.ZooStack([DeepNormLayer(D, H, F, alpha=4**0.25) for _ in range(2)]),
    ),
    "glm130b with alpha 1 (Post-LN)": (
        "glm130b",
        lambda: zoo.ZooStack([DeepNormLayer(D, H, F) for _ in range(2)]),
    ),
    "gemma with a plain RMSNorm (scales by weight)": (
        "gemma",
        lambda: stack(lambda a, f: SandwichBlock(a, f, D, norm=nn.RMSNorm)),
    ),
    "gemma without the norm after the attention": ("gemma", lambda: stack(no_post_attn_norm)),
    "olmo2 built pre-RMSNorm": ("olmo2", lambda: stack(pre(nn.RMSNorm))),
    "olmo2 as a sandwich": ("olmo2", lambda: stack(lambda a, f: SandwichBlock(a, f, D))),
    "bloom without its embedding norm": ("bloom", lambda: stack(pre(), final_norm=nn.LayerNorm(D))),
    "bloom without its final norm": ("bloom", lambda: stack(pre(), embed_norm=nn.LayerNorm(D))),
    "palm built sequential": ("palm", lambda: stack(pre(lambda d: nn.LayerNorm(d, bias=False)))),
    "palm with a biased LayerNorm": ("palm", lambda: stack(biased_parallel)),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_every_check_fails_on_a_wrongly_built_model(case):
    row, make = WRONG[case]
    with pytest.raises(zoo.ZooCheckError):
        check(row, make())


def test_every_row_has_a_wrong_build_that_fails():
    assert {row for row, _ in WRONG.values()} == set(ROWS)


def test_naming_trap_roles_are_told_apart_by_behaviour():
    assert zoo.role_of_post_attention_layernorm(zoo.LlamaStyleNaming(D, H, F), x()) == "FFN input"
    assert (
        zoo.role_of_post_attention_layernorm(zoo.OutputNormNaming(D, H, F), x())
        == "attention output"
    )


def test_naming_trap_check_rejects_a_norm_that_is_neither():
    layer = zoo.OutputNormNaming(D, H, F)
    layer.post_attention_layernorm.register_forward_pre_hook(lambda m, args: (2 * args[0],))
    with pytest.raises(zoo.ZooCheckError):
        zoo.role_of_post_attention_layernorm(layer, x())


@pytest.mark.parametrize(
    ("norm", "eps"),
    [
        (nn.LayerNorm(D, eps=1e-12), 1e-12),
        (nn.RMSNorm(D, eps=1e-6), 1e-6),
        (OffsetRMSNorm(D), 1e-6),
    ],
)
def test_measured_eps_recovers_the_configured_eps(norm, eps):
    assert zoo.measured_eps(norm, D) == pytest.approx(eps, rel=1e-3)


def test_recorder_removes_its_hooks():
    model = build("llama")
    with zoo.Recorder({"attn": model.layers[0].self_attn}):
        pass
    assert not model.layers[0].self_attn._forward_hooks


def test_the_pre_norm_check_refuses_an_unknown_norm_kind_with_the_known_kinds():
    t = zoo.trace(build("gpt2"), x())
    with pytest.raises(ValueError, match=r"norm kind must be one of \['ln', 'rms'\], got 'layer'"):
        zoo._check_pre_norm(t, "layer", final=True)
