"""The placement chapter's experiment tools measure what they say, and its cached sweep is current.

``book/data/warmup_sweep.json`` holds the warm-up sweep that the chapter reads (regenerate it with
``python -m addnorm_lib.experiments.placement warmup-sweep --out book/data/warmup_sweep.json``,
adding ``--jobs 2`` for two processes).
Re-running a whole run takes too long for the test suite, so the cache test re-runs the first steps
of a few runs and compares their training losses with the file: the schedule and the batches do
not depend on the total number of steps, so the first steps of a shorter run are those of the
cached one.
"""

import json
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from addnorm_lib.experiments import plots
from addnorm_lib.experiments.placement import (
    SWEEP_CONFIG,
    PlacementModel,
    RunSpec,
    _longest_first,
    ffn_gradient_profile,
    final_norm_gradient_parts,
    first_adam_step,
    last_ffn_gradient_norm,
    make_stack,
    run_spec,
    stream_norms,
    sweep_specs,
    train_placement_model,
)
from addnorm_lib.reference.placement import PostLNBlock, PreLNBlock, PreLNStack
from tests.conftest import ROOT

CACHE = ROOT / "book" / "data" / "warmup_sweep.json"
# The first steps only: float32 rounding differences between machines grow in the runs that stall
# at a large learning rate (Post-LN without warm-up at 3e-3 drifts apart after about 70 steps).
PREFIX_STEPS = 60


@pytest.fixture(scope="module")
def cache():
    return json.loads(CACHE.read_text(encoding="utf-8"))


def spec_of(run: dict) -> RunSpec:
    """The RunSpec of one cached run."""
    return RunSpec(
        run["placement"], run["optimizer"], run["lr"], run["warmup"], run["seed"], run["steps"]
    )


def test_both_placements_draw_the_same_weights():
    torch.manual_seed(0)
    post = PlacementModel("post", 7, 5, 3, 16, 2, 24)
    torch.manual_seed(0)
    pre = PlacementModel("pre", 7, 5, 3, 16, 2, 24)
    assert isinstance(pre.stack, PreLNStack) and isinstance(pre.blocks[0], PreLNBlock)
    assert isinstance(post.blocks[0], PostLNBlock) and len(post.blocks) == 3
    pre_params = dict(pre.named_parameters())
    for name, p in post.named_parameters():
        twin = name.replace("stack.", "stack.layers.", 1)
        assert torch.equal(p, pre_params[twin]), name
    post_names = {n.replace("stack.", "stack.layers.", 1) for n, _ in post.named_parameters()}
    assert set(pre_params) - post_names == {"stack.norm.weight", "stack.norm.bias"}
    with pytest.raises(ValueError):
        make_stack("middle", 2, 16, 2, 24)


def test_last_ffn_gradient_norm_is_the_fc2_gradient():
    g = last_ffn_gradient_norm("pre", 2, 0, d_model=16, nhead=2, dim_feedforward=24)
    again = last_ffn_gradient_norm("pre", 2, 0, d_model=16, nhead=2, dim_feedforward=24)
    assert g == again and g > 0  # seeded
    # a larger final-norm input (scaled embeddings) gives a smaller gradient in Pre-LN
    big = last_ffn_gradient_norm(
        "pre", 2, 0, d_model=16, nhead=2, dim_feedforward=24, embed_scale=10.0
    )
    assert big < g / 2


def test_the_profile_ends_with_the_last_gradient_and_the_first_step_measures_it():
    sizes = {"d_model": 16, "nhead": 2, "dim_feedforward": 24}
    profile = ffn_gradient_profile("post", 3, 0, **sizes)
    assert profile.shape == (3,) and (profile > 0).all()
    assert profile[-1] == last_ffn_gradient_norm("post", 3, 0, **sizes)
    step = first_adam_step("post", 3, 0, 1e-3, **sizes)
    assert step["last_ffn_grad"] == profile[-1]
    # Adam's first step moves every weight with a non-zero gradient by lr (m / sqrt(v) = sign g);
    # the key projections' biases get (almost) none: softmax ignores a shift shared by all keys
    torch.manual_seed(0)
    n_params = sum(p.numel() for p in PlacementModel("post", 12, 8, 3, 16, 2, 24).parameters())
    assert step["update_norm"] == pytest.approx(1e-3 * n_params**0.5, rel=1e-2)
    assert 0 < step["output_change"] < 1 and step["grad_norm"] > step["last_ffn_grad"]
    # a tenfold smaller step changes the output about ten times less (the linear range)
    small = first_adam_step("post", 3, 0, 1e-4, **sizes)
    assert small["output_change"] == pytest.approx(step["output_change"] / 10, rel=0.1)


def test_final_norm_parts_take_apart_the_pre_ln_gradient():
    sizes = {"d_model": 16, "nhead": 2, "dim_feedforward": 32}
    shallow, deep = (final_norm_gradient_parts(L, 0, **sizes) for L in (1, 8))
    for parts in (shallow, deep):
        assert parts["last_ffn_grad"] == pytest.approx(
            last_ffn_gradient_norm("pre", 8 if parts is deep else 1, 0, **sizes)
        )
        assert 0 < parts["alignment"] <= 1
    # the stream grows, and the gradient through the final norm shrinks with its size
    assert deep["stream_sq"] > 2 * shallow["stream_sq"]
    fall = deep["token_grad"] / shallow["token_grad"]
    assert fall == pytest.approx((shallow["stream_sq"] / deep["stream_sq"]) ** 0.5, rel=0.25)


def test_embed_std_scales_the_same_draw_and_zero_qk_makes_attention_uniform():
    torch.manual_seed(0)
    plain = PlacementModel("pre", 7, 5, 2, 16, 2, 24)
    torch.manual_seed(0)
    scaled = PlacementModel(
        "pre", 7, 5, 2, 16, 2, 24, embed_scale=4.0, embed_std=0.25, zero_qk=True
    )
    torch.testing.assert_close(scaled.embed.weight, 0.25 * plain.embed.weight)
    tokens = torch.randint(7, (3, 5))
    torch.testing.assert_close(scaled.embedded(tokens), plain.embedded(tokens))
    for name, p in plain.named_parameters():
        if name != "embed.weight" and "q_proj.weight" not in name and "k_proj.weight" not in name:
            assert torch.equal(p, dict(scaled.named_parameters())[name]), name
    for block in scaled.blocks:
        assert not block.self_attn.q_proj.weight.any() and not block.self_attn.k_proj.weight.any()


def test_the_longest_runs_are_started_first():
    specs = [RunSpec("post", "adam", 1e-3, 0, 0), RunSpec("post", "adam", 1e-3, 0, 1, 900)]
    specs += [RunSpec("pre", "adam", 1e-3, 0, 0), RunSpec("pre", "adam", 1e-3, 0, 1, 1500)]
    assert _longest_first(specs) == [3, 1, 0, 2]


def test_stream_norms_start_at_one_and_grow():
    sizes = stream_norms(6, 0, d_model=32, nhead=2, dim_feedforward=64, batch_size=128)
    assert sizes.shape == (7,) and abs(sizes[0] - 1) < 0.1
    assert (np.diff(sizes) > 0).all()


def test_warmup_is_linear_then_constant():
    torch.manual_seed(0)
    model = PlacementModel("pre", 5, 4, 1, 8, 2, 16)
    seen = []
    original = torch.optim.Adam.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    torch.optim.Adam.step = spy
    try:
        run = train_placement_model(model, 0, lr=1e-2, warmup=4, steps=6, batch_size=4)
    finally:
        torch.optim.Adam.step = original
    assert np.allclose(seen, [2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])
    assert len(run["losses"]) == 6 and math.isfinite(run["final_loss"])
    with pytest.raises(ValueError):
        train_placement_model(model, 0, lr=1e-3, optimizer="sgd", steps=1)


def test_cache_covers_the_sweep_and_matches_the_config(cache):
    assert cache["config"] == {**SWEEP_CONFIG, "betas": list(SWEEP_CONFIG["betas"])}
    assert [spec_of(run) for run in cache["runs"]] == sweep_specs()
    assert "python -m addnorm_lib.experiments.placement warmup-sweep" in cache["command"]
    assert len({run["seed"] for run in cache["runs"]}) >= 6  # the chapter reports rates over seeds
    for run in cache["runs"]:
        steps = run["steps"] or SWEEP_CONFIG["steps"]
        for key in ("losses", "grad_norms", "update_norms"):
            assert len(run[key]) == steps, key


RECHECKED = [
    RunSpec("post", "adam", 3e-3, 0, 0),
    RunSpec("post", "adam", 3e-3, 100, 1),
    RunSpec("pre", "radam", 3e-3, 0, 0),
    RunSpec("post", "adam", 3e-3, 300, 5),
]


@pytest.mark.parametrize("spec", RECHECKED, ids=str)
def test_cached_runs_are_reproduced(cache, spec):
    """The first steps of a re-run give the cached training losses (one CPU thread, float32)."""
    (cached,) = [run for run in cache["runs"] if spec_of(run) == spec]
    threads = torch.get_num_threads()
    try:
        now = run_spec(spec, {"steps": PREFIX_STEPS})
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(now["losses"], cached["losses"][:PREFIX_STEPS], atol=2e-3)
    for key in ("grad_norms", "update_norms"):  # 4 significant digits in the file
        np.testing.assert_allclose(now[key], cached[key][:PREFIX_STEPS], rtol=2e-3)


@pytest.mark.parametrize("kind", sorted(plots.PLACEMENT_LAYOUTS))
def test_placement_diagram_draws_every_box(kind):
    fig, ax = plt.subplots()
    plots.draw_placement_diagram(ax, kind, title=kind, final_norm=kind == "pre")
    texts = [t.get_text() for t in ax.texts]
    for item in plots.PLACEMENT_LAYOUTS[kind]:
        for name in (item,) if isinstance(item, str) else item:
            assert name in texts
    assert texts.count("+") == sum(isinstance(i, tuple) for i in plots.PLACEMENT_LAYOUTS[kind])
    assert ("final LayerNorm" in texts) == (kind == "pre")
    plt.close(fig)
    with pytest.raises(ValueError):
        plots.draw_placement_diagram(ax, "diagonal")


def test_an_unknown_placement_or_optimizer_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match=r"placement must be one of \['post', 'pre'\], got 'mid'"):
        make_stack("mid", 2, 16, 2, 24)
    model = PlacementModel("pre", 7, 5, 1, 16, 2, 24)
    known = r"optimizer must be one of \['adam', 'radam'\], got 'sgd'"
    with pytest.raises(ValueError, match=known):
        train_placement_model(model, 0, lr=1e-3, optimizer="sgd", steps=1)
