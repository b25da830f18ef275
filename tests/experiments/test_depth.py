"""The per-layer probes measure what autograd computes; the deep MLP is built as documented."""

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from addnorm_lib.experiments import depth


def small_model(**options):
    depth.set_seed(0)
    return depth.DeepMLP(3, 8, 2, 5, **options)


@pytest.mark.parametrize("residual", [False, True])
def test_probe_gradient_norms_are_autograd_gradients_of_each_layer_output(residual):
    model = small_model(residual=residual, activation="tanh", init="xavier")
    x, target = torch.randn(7, 3), torch.randn(7, 2)
    outputs = []
    handles = [
        layer.register_forward_hook(lambda m, i, o: outputs.append(o)) for layer in model.layers
    ]
    loss = nn.functional.mse_loss(model(x), target)
    grads = torch.autograd.grad(loss, outputs)
    for handle in handles:
        handle.remove()
    norms, stds = depth.gradient_norms_at_init(model, x, target)
    np.testing.assert_allclose(norms, [float(g.double().norm()) for g in grads], rtol=1e-6)
    np.testing.assert_allclose(stds, [float(o.detach().std()) for o in outputs], rtol=1e-6)


def test_probe_removes_its_hooks_and_records_each_layer():
    model = small_model()
    with depth.Probe(model.layers) as probe:
        model(torch.randn(4, 3)).sum().backward()
    assert all(not layer._forward_hooks for layer in model.layers)
    assert len(probe.outputs()) == len(probe.gradients()) == 5
    assert probe.outputs()[0].shape == (4 * 8,)


def test_probe_without_a_backward_pass_says_so():
    model = small_model()
    with depth.Probe({"first": model.layers[0]}) as probe, torch.no_grad():
        model(torch.randn(2, 3))
    assert probe.activation_stds().shape == (1,)
    with pytest.raises(RuntimeError, match=r"no grad_output recorded for layers \['first'\]"):
        probe.gradient_norms()


@pytest.mark.parametrize(
    ("init", "std"),
    [
        ("xavier", math.sqrt(2 / 800)),
        ("he", math.sqrt(2 / 400)),
        ("naive", 0.5),
    ],
)
def test_inits_give_the_documented_std(init, std):
    layer = nn.Linear(400, 400)
    depth.set_seed(1)
    depth.init_linear(layer, init, scale=0.5 if init == "naive" else 1.0)
    assert layer.weight.std().item() == pytest.approx(std, rel=0.02)
    assert torch.count_nonzero(layer.bias) == 0


def test_residual_block_is_the_identity_when_its_branch_is_zero():
    block = depth.ResidualBlock(6, hidden=4)
    nn.init.zeros_(block.linear2.weight)
    x = torch.randn(3, 6)
    assert torch.equal(block(x), x)
    assert depth.ResidualBlock(6, shortcut=None)(x).shape == x.shape


def test_shortcut_and_branch_scale_are_applied():
    plain = small_model(residual=True, shortcut=0.5, branch_scale=0.0)
    x = torch.randn(2, 8)
    assert torch.allclose(plain.layers[0](x), 0.5 * x)


def test_set_seed_makes_runs_repeatable():
    first = small_model()(torch.ones(1, 3))
    second = small_model()(torch.ones(1, 3))
    assert torch.equal(first, second)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"activation": "swish"}, "activation must be one of"),
        ({"init": "orthogonal"}, "init must be one of"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        small_model(**options)
    with pytest.raises(ValueError, match="depth must be at least 1"):
        depth.DeepMLP(3, 8, 2, 0)


ACTIVATIONS, INITS = depth.ACTIVATIONS, depth.INITS
# function: (a call with an unknown name, what the name chooses, the known names)
UNKNOWN_NAMES = {
    "init_linear": (lambda: depth.init_linear(nn.Linear(2, 2), "orthogonal"), "init", INITS),
    "ResidualBlock": (
        lambda: depth.ResidualBlock(4, activation="swish"),
        "activation",
        ACTIVATIONS,
    ),
    "DeepMLP": (lambda: small_model(activation="swish"), "activation", ACTIVATIONS),
}


@pytest.mark.parametrize("name", list(UNKNOWN_NAMES))
def test_an_unknown_name_is_refused_with_the_known_names(name):
    call, what, table = UNKNOWN_NAMES[name]
    with pytest.raises(ValueError, match=re.escape(f"{what} must be one of {sorted(table)}, got")):
        call()
