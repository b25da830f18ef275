"""The models chapter's probes of real ``transformers`` classes: every row's findings agree with
its description, a wrong description or a broken model is caught, and the course's toy builders
place their norms as the real classes do."""

import dataclasses

import pytest
import torch
from torch import nn

from addnorm_lib.transformer import hf_probes as hp
from addnorm_lib.transformer import model_zoo as zoo
from addnorm_lib.transformer.architectures import OffsetRMSNorm

ROW_NAMES = [row.model for row in hp.ROWS]
TOY = hp.Anatomy((("", "layers"),), "self_attn", "self_attn", "ffn", "ffn")


pytestmark = pytest.mark.usefixtures("one_thread")


_FINDINGS: dict[tuple[str, int], hp.Findings] = {}


def findings(model: str, seed: int = 0) -> hp.Findings:
    if (model, seed) not in _FINDINGS:
        _FINDINGS[model, seed] = hp.probe_row(hp.find_row(model), seed)[1]
    return _FINDINGS[model, seed]


def probe(model: nn.Module, row: hp.Row) -> hp.Findings:
    return hp.probe_model(model, row.anatomy, hp.sample_ids(row))


@pytest.mark.parametrize("model", ROW_NAMES)
def test_every_row_agrees_with_its_description(model):
    assert hp.disagreements(findings(model), hp.find_row(model).expected) == []


@pytest.mark.parametrize("model", ROW_NAMES)
def test_the_findings_do_not_depend_on_the_seed(model):
    assert findings(model, 1) == findings(model, 0)


def test_the_rows_cover_the_models_the_chapter_promises():
    promised = {"GPT-2", "BERT", "T5", "LLaMA", "Mistral", "Qwen2", "Qwen3", "Gemma 2"}
    promised |= {"Gemma 3", "OLMo 2", "GPT-NeoX", "OPT", "OPT (350m setting)", "BLOOM"}
    promised |= {"DeepSeek-V3"}
    assert promised <= set(ROW_NAMES)


WRONG = [  # (row, field, a wrong value): each must be reported as a disagreement
    ("OLMo 2", "final_norm", False),  # "its stream is never normalized at all"
    ("T5", "final_norm", False),
    ("Gemma 2", "final_norm", False),
    ("DeepSeek-V3", "final_norm", False),
    ("OLMo 2", "qk_norm", "per head"),
    ("Gemma 3", "qk_norm", "none"),
    ("Gemma 2", "scale", "weight"),
    ("GPT-NeoX", "block", "pre"),
    ("OPT (350m setting)", "block", "pre"),
    ("BERT", "block", "pre"),
    ("BERT", "eps", 1e-5),
    ("BERT", "embedding_norm", False),
    ("GPT-2", "final_norm", False),
    ("T5", "norm", "LayerNorm"),
    ("T5", "bias", True),
    ("LLaMA", "half", "scale in float32"),
    ("Gemma 3", "half", "scale after cast"),
    ("DeepSeek-V3", "n_attention_norms", 0),
    ("BLOOM", "embedding_norm", False),
    ("OLMo 2", "eps", 1e-6),  # the released checkpoints' eps, not the class default
    ("LLaMA", "eps", 1e-5),  # likewise
]


@pytest.mark.parametrize(("model", "field", "value"), WRONG)
def test_a_wrong_description_is_reported(model, field, value):
    wrong = dataclasses.replace(hp.find_row(model).expected, **{field: value})
    found = hp.disagreements(findings(model), wrong)
    assert len(found) == 1 and found[0].startswith(f"{field}:"), found


def built(model: str) -> nn.Module:
    torch.manual_seed(0)
    return hp.find_row(model).build()


def test_a_llama_without_its_final_norm_is_caught():
    model = built("LLaMA")
    model.model.norm = nn.Identity()
    assert not probe(model, hp.find_row("LLaMA")).final_norm


def test_a_llama_without_its_input_norm_is_not_pre_norm():
    model = built("LLaMA")
    for layer in model.model.layers:
        layer.input_layernorm = nn.Identity()
    block = probe(model, hp.find_row("LLaMA")).block
    assert block.startswith("other: the attention reads the raw stream, the MLP a norm"), block


def test_a_gemma_norm_that_scales_by_its_weight_is_caught():
    norm = hp.probe_norm(nn.RMSNorm(hp.WIDTH, eps=1e-6), hp.WIDTH)
    assert norm.scale == "weight"
    assert hp.probe_norm(OffsetRMSNorm(hp.WIDTH), hp.WIDTH).scale == "1 + weight"
    model = built("Gemma 2")
    for layer in model.model.layers:
        layer.post_attention_layernorm = nn.RMSNorm(hp.WIDTH, eps=1e-6)
    with pytest.raises(hp.ProbeError, match="norms differ"):
        probe(model, hp.find_row("Gemma 2"))


def test_a_t5_with_layernorms_is_caught():
    model = built("T5")
    for stack in (model.encoder, model.decoder):
        for block in stack.block:
            for sub in block.layer:
                sub.layer_norm = nn.LayerNorm(hp.WIDTH, eps=1e-6)
    found = probe(model, hp.find_row("T5"))
    assert "norm: expected 'RMSNorm', probed 'LayerNorm'" in hp.disagreements(
        found, hp.find_row("T5").expected
    )


def test_neox_without_the_parallel_residual_is_pre_norm():
    torch.manual_seed(0)
    model = hp.build_gpt_neox()
    for layer in model.gpt_neox.layers:
        layer.use_parallel_residual = False
    assert probe(model, hp.find_row("GPT-NeoX")).block == "pre"


def test_a_qwen3_without_qk_norm_is_caught():
    model = built("Qwen3")
    for layer in model.model.layers:
        layer.self_attn.q_norm = nn.Identity()
        layer.self_attn.k_norm = nn.Identity()
    assert probe(model, hp.find_row("Qwen3")).qk_norm == "none"


def test_bert_without_its_embedding_norm_is_caught():
    model = built("BERT")
    model.embeddings.LayerNorm = nn.Identity()
    assert not probe(model, hp.find_row("BERT")).embedding_norm


@pytest.mark.parametrize(
    ("norm", "kind", "bias", "eps"),
    [
        (nn.LayerNorm(hp.WIDTH, eps=1e-3), "LayerNorm", True, 1e-3),
        (nn.LayerNorm(hp.WIDTH, bias=False), "LayerNorm", False, 1e-5),
        (nn.RMSNorm(hp.WIDTH, eps=1e-4), "RMSNorm", False, 1e-4),
    ],
)
def test_probe_norm_on_torch_norms(norm, kind, bias, eps):
    found = hp.probe_norm(norm, hp.WIDTH)
    assert (found.kind, found.bias, found.scale) == (kind, bias, "weight")
    assert abs(found.eps / eps - 1) < 1e-3 and found.scale_invariant


def test_eps_outside_the_root_is_not_measured_as_inside():
    class OutsideRMSNorm(nn.Module):  # divides by (RMS + eps), as the RMSNorm paper's module
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hp.WIDTH))

        def forward(self, x):
            return self.weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-4)

    assert abs(hp.measure_eps(OutsideRMSNorm(), hp.WIDTH) / 1e-4 - 1) > 0.5


def test_the_naming_trap():
    roles = {}
    for model in ("LLaMA", "Gemma 2", "OLMo 2", "GPT-NeoX"):
        roles[model] = dict(findings(model).roles)["post_attention_layernorm"]
    assert roles == {
        "LLaMA": "before MLP, reads the stream after the attention's add",
        "Gemma 2": "on the attention's output, before the add",
        "OLMo 2": "on the attention's output, before the add",
        "GPT-NeoX": "before MLP, reads the block input",
    }


TOYS = [  # (toy builder, real row): the toy places its norms as the real class does
    (zoo.build_gpt2, "GPT-2"),
    (zoo.build_bert, "BERT"),
    (zoo.build_t5, "T5"),
    (zoo.build_llama, "LLaMA"),
    (zoo.build_deepseek_v3, "DeepSeek-V3"),
    (zoo.build_gemma, "Gemma 2"),
    (zoo.build_olmo2, "OLMo 2"),
    (zoo.build_bloom, "BLOOM"),
    (zoo.build_transformer_2017, "OPT (350m setting)"),
]


def toy_findings(build):
    torch.manual_seed(0)
    return build(num_layers=2), zoo.sample_input()


@pytest.mark.parametrize(("build", "model"), TOYS)
def test_a_toy_builder_places_its_norms_as_the_real_class(build, model):
    toy, x = toy_findings(build)
    assert hp.probe_block(toy, TOY, x).kind == findings(model).block


@pytest.mark.parametrize(("build", "model"), TOYS)
def test_a_toy_builder_has_a_final_norm_where_the_real_class_has_one(build, model):
    toy, x = toy_findings(build)
    assert hp.has_final_norm(toy, TOY, x) == (findings(model).final_norm,)


def test_the_toy_parallel_block_shares_one_norm_where_neox_has_two():
    toy, x = toy_findings(zoo.build_palm)
    assert hp.probe_block(toy, TOY, x).kind == "parallel, one shared norm"
    assert findings("GPT-NeoX").block == "parallel, two norms"


def test_the_toy_glm130b_residual_weight_is_measured():
    torch.manual_seed(0)
    toy = zoo.build_glm130b(num_layers=4)
    placement = hp.probe_block(toy, TOY, zoo.sample_input())
    assert placement.kind == "post" and abs(placement.residual_weight - 8**0.5) < 1e-3


def test_release_eps_is_given_only_where_a_source_confirms_it():
    rows = {row.model: row.expected for row in hp.ROWS}
    # the class default against a released checkpoint's value: they differ, each way
    assert (rows["LLaMA"].eps, rows["LLaMA"].release_eps) == (1e-6, 1e-5)
    assert (rows["OLMo 2"].eps, rows["OLMo 2"].release_eps) == (1e-5, 1e-6)
    # Mistral 7B's released eps is not confirmed: no value, and the table says so
    assert rows["Mistral"].release_eps is None
    assert "not confirmed" in rows["Mistral"].release_eps_source
    for model, expected in rows.items():
        if expected.release_eps is not None:
            assert expected.release_eps_source, model


def test_the_sourced_rows_are_the_models_without_a_class():
    sourced = {row.model for row in hp.SOURCED_ROWS}
    assert sourced == {"GPT-1", "GPT-3"}
    assert not sourced & set(ROW_NAMES)
    assert all(row.source for row in hp.SOURCED_ROWS)


@pytest.mark.parametrize(
    ("build", "kind", "alpha"),
    [
        (zoo.build_transformer_2017, "post", 1.0),
        (zoo.build_glm130b, "post", 8**0.5),
        (zoo.build_palm, "parallel, one shared norm", 1.0),
    ],
)
def test_probe_zoo_block_places_the_course_stacks(build, kind, alpha):
    placement = hp.probe_zoo_block(build, seed=1)
    assert placement.kind == kind and abs(placement.residual_weight - alpha) < 1e-3
    assert placement == hp.probe_zoo_block(build, seed=2)


def stream_summary(build, anatomy) -> hp.StreamSummary:
    torch.manual_seed(0)
    model = build(3)
    x = zoo.sample_input(d_model=hp.WIDTH)  # (B, T, C)
    return hp.summarize_stream(hp.trace_stream(model, anatomy, {"inputs_embeds": x}))


def test_summarize_stream_tells_pre_norm_from_post_norm():
    pre = stream_summary(hp.build_llama, hp.LLAMA_LIKE)
    assert abs(pre.read_rms_lo - 1) < 1e-3 and abs(pre.read_rms_hi - 1) < 1e-3
    assert pre.stream_rms_hi > 1.5 and pre.output_rms_dev < 1e-3
    assert not pre.first_reads_raw and pre.first_read_mean > 0.5
    post = stream_summary(hp.build_opt_350m, hp.find_row("OPT").anatomy)
    assert post.first_reads_raw and post.block_out_dev < 1e-3
    assert post.all_read_raw and not pre.all_read_raw  # post-norm reads each block's input


def test_the_table_covers_the_models_other_pages_link_to():
    probed = {model: hp.probe_row(hp.find_row(model)) for model in ROW_NAMES}
    stacks = {"Transformer (2017)": zoo.build_transformer_2017, "GLM-130B": zoo.build_glm130b}
    stacks = {model: hp.probe_zoo_block(build) for model, build in stacks.items()}
    stacks["PaLM"] = hp.probe_zoo_block(zoo.build_palm)
    rows = hp.table_rows(probed, stacks)
    assert sorted(rows) == sorted(hp.TABLE_ORDER)
    assert all(len(cells) == len(hp.TABLE_HEAD) for cells in rows.values())
    # eps (class), then eps (release or code)
    assert rows["OLMo 2"][3:5] == ["1e-05", "1e-06 (OLMo 2 7B and 13B releases)"]
    assert rows["Mistral"][3:5] == ["1e-06", "Mistral 7B release: not confirmed"]
    assert rows["GLM-130B"][2] == "post-norm, DeepNorm, α = √(2N)"
    assert rows["GPT-1"][2] == "post-norm, no final norm"
    assert rows["Gemma 3"][1:3] == ["RMSNorm, 1 + w", "sandwich, final norm, QK-norm (per head)"]
    assert rows["BLOOM"][0] == "BLOOM †" and rows["LLaMA"][0] == "LLaMA 1/2/3"
