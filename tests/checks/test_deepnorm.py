"""The DeepNorm checks accept the reference and name each known mistake (constants, step, init)."""

import copy

import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.checks import deepnorm as deepnorm_checks
from addnorm_lib.reference import deepnorm, mistakes


def test_references_pass(capsys):
    checks.check_deepnorm_constants(deepnorm.deepnorm_constants)
    checks.check_deepnorm_residual(deepnorm.deepnorm_residual)
    checks.check_deepnorm_init(deepnorm.deepnorm_init_, seed=7)
    out = capsys.readouterr().out
    assert "✓ deepnorm_constants passed 7 checks" in out and "✓ deepnorm_init_ passed" in out


def _constants_from(mistake):
    def deepnorm_constants(architecture, num_encoder_layers=0, num_decoder_layers=0, stack=None):
        return tuple(mistake.compute(architecture, num_encoder_layers, num_decoder_layers, stack))

    return deepnorm_constants


@pytest.mark.parametrize("mistake", mistakes.DEEPNORM_CONSTANTS_MISTAKES, ids=lambda m: m.name)
def test_each_constants_mistake_is_named(mistake):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_constants(_constants_from(mistake))
    assert mistake.diagnosis in str(info.value)


@pytest.mark.parametrize("mistake", mistakes.DEEPNORM_RESIDUAL_MISTAKES, ids=lambda m: m.name)
def test_each_residual_mistake_is_named(mistake):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_residual(mistake.compute)
    assert mistake.diagnosis in str(info.value)


def _scale(*paths, factor=lambda beta: beta):
    def deepnorm_init_(layer, beta):
        with torch.no_grad():
            for path in paths:
                layer.get_submodule(path).weight.mul_(factor(beta))
        return layer

    return deepnorm_init_


def _reinitialize(layer, beta):
    for path in deepnorm.DEEPNORM_SCALED:
        torch.nn.init.xavier_normal_(layer.get_submodule(path).weight, gain=beta)


ALL_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", *deepnorm.DEEPNORM_SCALED)


@pytest.mark.parametrize(
    ("init", "message"),
    [
        (_scale(*ALL_PROJECTIONS), "you scaled self_attn.q_proj.weight by beta"),
        (_scale("ffn.fc1", "ffn.fc2"), "self_attn.v_proj.weight was not scaled"),
        (_scale(*deepnorm.DEEPNORM_SCALED, factor=lambda beta: 1 / beta), "divided by beta"),
        (_scale(*deepnorm.DEEPNORM_SCALED, "attn_norm"), "you scaled attn_norm.weight by beta"),
        (_reinitialize, "changed, but not to beta times its value"),
    ],
    ids=["beta-on-q-and-k", "ffn-only", "divided", "norm-scaled", "re-initialized"],
)
def test_initializer_mistakes_are_named(init, message):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_init(init)
    assert message in str(info.value)


def test_describing_a_call_refuses_an_unknown_architecture_with_the_known_ones():
    known = r"architecture must be one of \['decoder-only', 'encoder-decoder', 'encoder-only'\]"
    with pytest.raises(ValueError, match=known + ", got 'encoder'"):
        deepnorm_checks._describe_constants_call("encoder", 6, 0, None)


def test_a_residual_step_that_scales_its_input_in_place_is_caught():
    """Right output, but the caller's x comes back multiplied by alpha."""

    def deepnorm_residual(x, sublayer, norm, alpha):
        branch = sublayer(x)
        x.mul_(alpha)
        return norm(x + branch)

    with pytest.raises(checks.CheckFailed, match="in place"):
        checks.check_deepnorm_residual(deepnorm_residual)


def test_an_initializer_that_replaces_parameters_is_caught():
    """Right values, but new Parameter objects: an optimizer made before holds the old ones."""

    def deepnorm_init_(layer, beta):
        from addnorm_lib.reference.deepnorm import DEEPNORM_SCALED

        for path in DEEPNORM_SCALED:
            module = layer.get_submodule(path)
            module.weight = torch.nn.Parameter(module.weight.detach() * beta)
        return layer

    with pytest.raises(checks.CheckFailed, match=r"replaced .* with new Parameter objects"):
        checks.check_deepnorm_init(deepnorm_init_)


def test_an_initializer_that_scales_a_copy_is_told_so():
    """A scaled deep copy, returned: the given layer is unchanged, and the message says why."""

    def deepnorm_init_(layer, beta):
        return _scale(*deepnorm.DEEPNORM_SCALED)(copy.deepcopy(layer), beta)

    with pytest.raises(checks.CheckFailed, match=r"returned a new module \(a copy of the layer"):
        checks.check_deepnorm_init(deepnorm_init_)


def test_an_initializer_that_returns_nothing_is_told_to_return_the_layer():
    def deepnorm_init_(layer, beta):
        _scale(*deepnorm.DEEPNORM_SCALED)(layer, beta)

    with pytest.raises(checks.CheckFailed, match=r"returned None; the task asks for the layer"):
        checks.check_deepnorm_init(deepnorm_init_)
