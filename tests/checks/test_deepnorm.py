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
    assert "✓ deepnorm_constants passed 9 checks" in out and "✓ deepnorm_init_ passed" in out


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
        (_reinitialize, "holds new numbers, unrelated to its values before the call"),
    ],
    ids=["beta-on-q-and-k", "ffn-only", "divided", "norm-scaled", "re-initialized"],
)
def test_initializer_mistakes_are_named(init, message):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_init(init)
    assert message in str(info.value)


def _scale_parameters(select, factor=lambda beta: beta):
    """An initializer that scales the right four weights, then every parameter ``select`` picks."""

    def deepnorm_init_(layer, beta):
        _scale(*deepnorm.DEEPNORM_SCALED)(layer, beta)
        with torch.no_grad():
            for name, parameter in layer.named_parameters():
                if select(name):
                    parameter.mul_(factor(beta))
        return layer

    return deepnorm_init_


def _reset_norms(layer, beta):
    _scale(*deepnorm.DEEPNORM_SCALED)(layer, beta)
    layer.attn_norm.reset_parameters()
    return layer


def _zero_biases(layer, beta):
    _scale(*deepnorm.DEEPNORM_SCALED)(layer, beta)
    for path in deepnorm.DEEPNORM_SCALED:
        torch.nn.init.zeros_(layer.get_submodule(path).bias)
    return layer


# Right on the four weights, wrong on what the task leaves alone: each was invisible while the
# check's layer had zero biases and unit norms.
@pytest.mark.parametrize(
    ("init", "message"),
    [
        (
            _scale_parameters(lambda n: n.endswith("bias")),
            "you scaled self_attn.q_proj.bias by beta",
        ),
        (_scale_parameters(lambda n: n == "ffn.fc2.bias"), "you scaled ffn.fc2.bias by beta"),
        (_scale_parameters(lambda n: n == "ffn_norm.bias"), "you scaled ffn_norm.bias by beta"),
        (_zero_biases, "you set self_attn.v_proj.bias to zero"),
        (_reset_norms, "you set attn_norm.weight to one"),
    ],
    ids=["biases-scaled", "one-bias-scaled", "norm-bias-scaled", "biases-zeroed", "norm-reset"],
)
def test_an_initializer_that_touches_what_it_should_leave_is_named(init, message):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_init(init)
    assert message in str(info.value)


# Scaled, but by the wrong number: never "re-initialized".
@pytest.mark.parametrize(
    ("factor", "message"),
    [
        (lambda beta: beta, "multiplied by beta twice"),
        (lambda beta: beta**-0.5, "was multiplied by 0.5, not by beta = 0.25"),
    ],
    ids=["twice", "by-another-number"],
)
def test_a_weight_scaled_by_the_wrong_number_is_told_the_number(factor, message):
    init = _scale_parameters(lambda n: n == "ffn.fc1.weight", factor)
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_init(init)
    text = str(info.value)
    assert message in text and "new numbers" not in text and "e-initializ" not in text, text


def test_an_initializer_that_adds_a_parameter_is_told_which():
    def deepnorm_init_(layer, beta):
        _scale(*deepnorm.DEEPNORM_SCALED)(layer, beta)
        layer.alpha = torch.nn.Parameter(torch.ones(()))
        return layer

    with pytest.raises(checks.CheckFailed, match=r"it now has alpha\. Scale the existing"):
        checks.check_deepnorm_init(deepnorm_init_)


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

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_residual(deepnorm_residual)
    message = str(info.value)
    assert "deepnorm_residual changed its input x in place" in message, message
    assert "the task asks to leave inputs unchanged" in message and "x.mul_" in message, message
    assert "x -= mean" not in message and "number 1" not in message, message


def test_a_residual_step_returning_float32_gets_torch_advice():
    def deepnorm_residual(x, sublayer, norm, alpha):
        return norm(alpha * x + sublayer(x)).float()

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_deepnorm_residual(deepnorm_residual)
    message = str(info.value)
    assert "torch.float32" in message and ".to(x.dtype)" in message, message
    assert ".astype" not in message and "numpy" not in message, message


def test_a_residual_step_returning_a_tuple_is_told_to_return_a_tensor():
    def deepnorm_residual(x, sublayer, norm, alpha):
        return (norm(alpha * x + sublayer(x)),)

    with pytest.raises(checks.CheckFailed, match="should be a torch tensor, but it is a tuple"):
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
