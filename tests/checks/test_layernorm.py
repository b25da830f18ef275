"""The self-checks accept correct code and reject each known mistake with its own diagnosis."""

import numpy as np
import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.checks._core import Case, compare, judge_call, observe_cases
from addnorm_lib.reference import mistakes, modules, norms


def as_learner(compute):
    """A mistake's computation as a learner would write it: returns arrays of the input's dtype."""

    def learner(x, *args, **kwargs):
        with np.errstate(all="ignore"):
            result = compute(x, *args, **kwargs)
        if isinstance(result, tuple):
            return result
        return np.asarray(result).astype(x.dtype)

    return learner


def test_reference_implementations_pass_every_check(capsys):
    checks.check_layer_norm(norms.layer_norm)
    checks.check_layer_norm_backward(norms.layer_norm_backward)
    checks.check_layer_norm_module(modules.LayerNorm)
    printed = capsys.readouterr().out
    assert "✓ layer_norm passed" in printed and "✓ LayerNorm passed" in printed


@pytest.mark.parametrize("seed", [1, 2024])
def test_other_seeds_pass_too(seed):
    checks.check_layer_norm(norms.layer_norm, seed=seed)
    checks.check_layer_norm_backward(norms.layer_norm_backward, seed=seed)


@pytest.mark.parametrize("mistake", mistakes.LAYER_NORM_MISTAKES, ids=lambda m: m.name)
def test_each_forward_mistake_is_rejected_and_named(mistake):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_layer_norm(as_learner(mistake.compute))
    message = str(info.value)
    assert mistake.diagnosis in message, message
    others = [m.diagnosis for m in mistakes.LAYER_NORM_MISTAKES if m is not mistake]
    assert not any(other in message for other in others), message


def correct_backward(dy, x, gamma, eps=1e-5):
    return norms.layer_norm_backward(dy, x, gamma, eps=eps)


@pytest.mark.parametrize(
    ("mistake", "slot"),
    [(m, 0) for m in mistakes.LAYER_NORM_BACKWARD_DX_MISTAKES]
    + [(m, 1) for m in mistakes.LAYER_NORM_BACKWARD_DGAMMA_MISTAKES],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_each_backward_mistake_is_rejected_and_named(mistake, slot):
    def learner(dy, x, gamma, eps=1e-5):
        grads = list(correct_backward(dy, x, gamma, eps))
        grads[slot] = mistake.compute(dy, x, gamma, eps)[slot]
        return tuple(grads)

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_layer_norm_backward(learner)
    assert mistake.diagnosis in str(info.value)


def test_dgamma_summed_over_the_first_axis_only_is_a_shape_error():
    def learner(dy, x, gamma, eps=1e-5):
        dx, _, dbeta = correct_backward(dy, x, gamma, eps)
        x_hat = norms.layer_norm(x, np.ones_like(gamma), np.zeros_like(gamma), eps)
        return dx, (dy * x_hat).sum(axis=0), dbeta

    with pytest.raises(
        checks.CheckFailed, match=r"dgamma has shape \(3, 5\) but should have shape"
    ):
        checks.check_layer_norm_backward(learner)


def test_swapped_gradients_are_rejected():
    def learner(dy, x, gamma, eps=1e-5):
        dx, dgamma, dbeta = correct_backward(dy, x, gamma, eps)
        return dx, dbeta, dgamma

    with pytest.raises(checks.CheckFailed, match="dgamma differs"):
        checks.check_layer_norm_backward(learner)


def test_in_place_modification_is_named():
    def learner(x, gamma, beta, eps=1e-5):
        x -= x.mean(axis=-1, keepdims=True)
        return norms.layer_norm(x, gamma, beta, eps)

    with pytest.raises(checks.CheckFailed, match="modified its argument `x` in place"):
        checks.check_layer_norm(learner)


def test_upcasting_to_float64_is_named():
    def learner(x, gamma, beta, eps=1e-5):
        return norms.layer_norm(
            x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64), eps
        )

    with pytest.raises(checks.CheckFailed, match="dtype float64 but the input was float32"):
        checks.check_layer_norm(learner)


def test_returning_a_list_is_named():
    with pytest.raises(checks.CheckFailed, match="should be a numpy array, but it is a list"):
        checks.check_layer_norm(
            lambda x, gamma, beta, eps=1e-5: norms.layer_norm(x, gamma, beta, eps).tolist()
        )


def test_a_stub_is_reported_as_not_implemented():
    def stub(x, gamma, beta, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(checks.CheckFailed, match="not implemented yet"):
        checks.check_layer_norm(stub)


def test_an_exception_names_the_input_and_a_hint():
    def only_2d(x, gamma, beta, eps=1e-5):
        mean = x.mean(axis=-1)
        centered = (x.T - mean).T  # right for (N, C), a broadcasting error for (B, T, C)
        var = (centered**2).mean(axis=-1, keepdims=True)
        return (centered / np.sqrt(var + eps) * gamma + beta).astype(x.dtype)

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_layer_norm(only_2d)
    message = str(info.value)
    assert "raised ValueError on a 3-D (B, T, C)" in message
    assert "any number of leading axes" in message


class TorchVarLayerNorm(modules.LayerNorm):
    """A module with the classic slip: torch.var is unbiased unless told otherwise."""

    def forward(self, x):
        var = x.var(dim=-1, keepdim=True)
        y = (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(var + self.eps)
        return y * self.weight + self.bias


class RenamedParameters(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape, self.eps, self.elementwise_affine = (normalized_shape,), eps, True
        self.gamma = torch.nn.Parameter(torch.ones(normalized_shape))
        self.beta = torch.nn.Parameter(torch.zeros(normalized_shape))


class CallsTorch(modules.LayerNorm):
    def forward(self, x):
        return torch.nn.functional.layer_norm(
            x, self.normalized_shape, self.weight, self.bias, self.eps
        )


class SubclassesTorch(torch.nn.LayerNorm):
    pass


class IgnoresEps(modules.LayerNorm):
    def forward(self, x):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xf.mean(dim=-1, keepdim=True)
        var = ((xf - mean) ** 2).mean(dim=-1, keepdim=True)
        return ((xf - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias).to(x.dtype)


class BufferNotParameter(modules.LayerNorm):
    def __init__(self, normalized_shape, **kwargs):
        super().__init__(normalized_shape, **kwargs)
        weight = self.weight.detach().clone()
        del self.weight
        self.register_buffer("weight", weight)


@pytest.mark.parametrize(
    ("module", "phrase"),
    [
        (TorchVarLayerNorm, "unbiased variance"),
        (RenamedParameters, "state_dict() has keys ['beta', 'gamma']"),
        (CallsTorch, "calls torch's own normalization function"),
        (SubclassesTorch, "subclasses torch.nn.LayerNorm"),
        (IgnoresEps, "eps=0.1"),
        (BufferNotParameter, "No gradient reached LayerNorm's weight"),
    ],
)
def test_module_mistakes_are_rejected_and_named(module, phrase):
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_layer_norm_module(module)
    assert phrase in str(info.value)


def test_a_mean_without_keepdims_is_caught_on_a_square_input():
    """(N,) statistics broadcast along the features: an error unless N equals C, then wrong."""

    def layer_norm(x, gamma, beta, eps=1e-5):
        if x.ndim == 2 and x.shape[0] == x.shape[1]:
            return gamma * (x - x.mean(-1)) / np.sqrt(x.var(-1) + eps) + beta
        return norms.layer_norm(x, gamma, beta, eps)

    with pytest.raises(checks.CheckFailed, match="N equals C"):
        checks.check_layer_norm(layer_norm)


# ----------------------------------------------------------------------------------------------
# Advice in the language of the code under check: numpy for a numpy function, torch for torch


def test_numpy_code_gets_numpy_advice():
    def in_place(x, gamma, beta, eps=1e-5):
        x -= x.mean(axis=-1, keepdims=True)
        return norms.layer_norm(x, gamma, beta, eps)

    def float64(x, gamma, beta, eps=1e-5):
        return norms.layer_norm(x.astype(np.float64), gamma, beta, eps)

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_layer_norm(in_place)
    assert "`x -= mean`" in str(info.value) and "x.copy()" in str(info.value)
    assert "mul_" not in str(info.value) and "clone" not in str(info.value)
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_layer_norm(float64)
    assert ".astype(x.dtype)" in str(info.value) and ".to(" not in str(info.value)


def _torch_case(x):
    return Case("a (2, 3) float32 tensor", (x, 2.0))


def test_torch_code_gets_torch_advice_and_unnamed_arguments_an_ordinal():
    """A torch function that scales its input in place hears of x.mul_ and x.clone(), not of
    numpy; an argument without a name is "the first argument", not "argument `number 1`"."""
    import torch

    def scale(x, alpha):
        return x.mul_(alpha)

    case = _torch_case(torch.ones(2, 3))
    (observation,) = observe_cases(scale, [case])
    with pytest.raises(checks.CheckFailed) as info:
        judge_call(observation, "scale", case)
    message = str(info.value)
    assert "modified its first argument in place" in message, message
    assert "`x.mul_(alpha)`" in message and "x.clone()" in message, message
    assert "x -= mean" not in message and "number 1" not in message, message


def test_a_torch_result_of_the_wrong_dtype_is_told_to_use_to_not_astype():
    import torch

    case = _torch_case(torch.ones(2, 3))
    with pytest.raises(checks.CheckFailed) as info:
        compare(
            np.ones((2, 3)),
            np.ones((2, 3), np.float32),
            name="f",
            what="y",
            case=case,
            type_name="Tensor",
        )
    assert ".to(x.dtype)" in str(info.value) and ".astype" not in str(info.value)
    with pytest.raises(checks.CheckFailed, match="should be a torch tensor, but it is a list"):
        compare([1.0], np.ones(1), name="f", what="y", case=case, type_name="list")
