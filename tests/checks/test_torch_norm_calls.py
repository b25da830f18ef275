"""The module checks of LayerNorm, RMSNorm and BatchNorm1d, the same way for all three: a call of
torch's own norm, by any route, loses the module's points with a message that says so, and the
judge sees it in the record; no question of structure runs before the numbers or hides them."""

import importlib
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import layer_norm as bound_layer_norm  # bound before any check runs

from addnorm_lib import checks
from addnorm_lib.checks import _record as record
from addnorm_lib.checks import batchnorm, layernorm, rmsnorm
from addnorm_lib.checks._torch import NORM_CALLS
from addnorm_lib.reference import modules


def _numel(shape):
    return int(np.prod(shape))


# Each route returns x normalized over its trailing ``shape`` (no affine step), by torch's norms.
LAYER_NORM_ROUTES = {
    "F.layer_norm": lambda x, shape, eps: F.layer_norm(x, shape, eps=eps),
    "torch.layer_norm": lambda x, shape, eps: torch.layer_norm(x, shape, None, None, eps),
    "torch.native_layer_norm": lambda x, shape, eps: torch.native_layer_norm(
        x, shape, None, None, eps
    )[0],
    "torch.ops.aten.native_layer_norm": lambda x, shape, eps: torch.ops.aten.native_layer_norm(
        x, list(shape), None, None, eps
    )[0],
    "getattr on a module imported by name": lambda x, shape, eps: getattr(
        importlib.import_module("torch.nn." + "functional"), "layer" + "_norm"
    )(x, shape, eps=eps),
    "sys.modules": lambda x, shape, eps: vars(sys.modules["torch.nn.functional"])["layer_norm"](
        x, shape, eps=eps
    ),
    "bound before the check": lambda x, shape, eps: bound_layer_norm(x, shape, eps=eps),
    "nn.LayerNorm": lambda x, shape, eps: torch.nn.LayerNorm(
        shape, eps=eps, elementwise_affine=False, dtype=x.dtype
    )(x),
    "F.group_norm": lambda x, shape, eps: F.group_norm(
        x.reshape(-1, 1, _numel(shape)), 1, eps=eps
    ).reshape(x.shape),
}
RMS_NORM_ROUTES = {
    "F.rms_norm": lambda x, shape, eps: F.rms_norm(x, shape, eps=eps),
    "torch.rms_norm": lambda x, shape, eps: torch.rms_norm(x, shape, None, eps),
    "torch.ops.aten.rms_norm": lambda x, shape, eps: torch.ops.aten.rms_norm(
        x, list(shape), None, eps
    ),
    "nn.RMSNorm": lambda x, shape, eps: torch.nn.RMSNorm(
        shape, eps=eps, elementwise_affine=False, dtype=x.dtype
    )(x),
}
# (x, mean, var, eps) -> x normalized with these (C,) statistics
BATCH_NORM_ROUTES = {
    "F.batch_norm": lambda x, mean, var, eps: F.batch_norm(x, mean, var, eps=eps),
    "torch.batch_norm": lambda x, mean, var, eps: torch.batch_norm(
        x, None, None, mean, var, False, 0.0, eps, False
    ),
    "torch.ops.aten._native_batch_norm_legit_no_training": lambda x, mean, var, eps: (
        torch.ops.aten._native_batch_norm_legit_no_training(x, None, None, mean, var, 0.0, eps)[0]
    ),
    "torch.ops.aten.native_batch_norm": lambda x, mean, var, eps: torch.ops.aten.native_batch_norm(
        x, None, None, mean, var, False, 0.0, eps
    )[0],
    "F.instance_norm": lambda x, mean, var, eps: F.instance_norm(
        x.reshape(x.shape[0], x.shape[1], -1), mean, var, use_input_stats=False, eps=eps
    ).reshape(x.shape),
}


def layer_norm_by(route):
    class LayerNorm(modules.LayerNorm):
        def forward(self, x):
            y = route(x, self.normalized_shape, self.eps)
            y = y if self.weight is None else y * self.weight
            return y if self.bias is None else y + self.bias

    return LayerNorm


def rms_norm_by(route):
    class RMSNorm(modules.RMSNorm):
        def forward(self, x):
            xc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
            eps = torch.finfo(xc.dtype).eps if self.eps is None else self.eps
            y = route(xc, self.normalized_shape, eps)
            return (y if self.weight is None else y * self.weight).to(x.dtype)

    return RMSNorm


def batch_norm_by(route):
    class BatchNorm1d(modules.BatchNorm1d):
        def forward(self, x):
            axes = [0, *range(2, x.dim())]
            shape = (1, -1) + (1,) * (x.dim() - 2)
            if self.training or self.running_mean is None:
                mean, var = x.mean(dim=axes), x.var(dim=axes, unbiased=False)
            else:
                mean, var = self.running_mean, self.running_var
            if self.training and self.running_mean is not None:
                n = x.numel() // x.shape[1]
                with torch.no_grad():
                    self.num_batches_tracked += 1
                    m = self.momentum or 1.0 / float(self.num_batches_tracked)
                    self.running_mean.mul_(1 - m).add_(m * mean)
                    self.running_var.mul_(1 - m).add_(m * var * n / (n - 1))
            y = route(x, mean, var, self.eps)
            if self.weight is not None:
                y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
            return y

    return BatchNorm1d


CASES = (
    [("LayerNorm", name, layer_norm_by(r)) for name, r in LAYER_NORM_ROUTES.items()]
    + [("RMSNorm", name, rms_norm_by(r)) for name, r in RMS_NORM_ROUTES.items()]
    + [("BatchNorm1d", name, batch_norm_by(r)) for name, r in BATCH_NORM_ROUTES.items()]
)
CHECKS = {
    "LayerNorm": ("check_layer_norm_module", layernorm.observe_layer_norm_module),
    "RMSNorm": ("check_rms_norm_module", rmsnorm.observe_rms_norm_module),
    "BatchNorm1d": ("check_batch_norm_module", batchnorm.observe_batch_norm_module),
}


@pytest.mark.parametrize(("norm", "route", "cls"), CASES, ids=[f"{n}-{r}" for n, r, _ in CASES])
def test_calling_torchs_norm_by_any_route_is_seen_by_the_judge(norm, route, cls, tmp_path):
    """Observed in the kernel, saved, read back and judged as the grader does."""
    name, observe = CHECKS[norm]
    path = record.observation_path(tmp_path, name, 0)
    record.save(path, observe(cls, 0))
    with pytest.raises(checks.CheckFailed) as info:
        checks.JUDGES[name](record.load(path), 0)
    message = str(info.value)
    assert f"Your {norm} calls torch's own normalization functions" in message, message
    assert "costs this test its points" in message


def test_the_recording_ends_with_the_check_and_other_torch_use_works():
    """Only the norm ops are recorded, only during the check: a try cell's torch code after it
    runs as before, and torch's other norms (vector norms) are no norm layer."""

    class VectorNormRMS(modules.RMSNorm):  # right: the RMS from torch.linalg.vector_norm
        def forward(self, x):
            xc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
            eps = torch.finfo(xc.dtype).eps if self.eps is None else self.eps
            dims = tuple(range(-len(self.normalized_shape), 0))
            n = _numel(self.normalized_shape)
            ms = torch.linalg.vector_norm(xc, dim=dims, keepdim=True) ** 2 / n
            y = F.normalize(xc, dim=-1) * 0 + xc * torch.rsqrt(ms + eps)
            return (y if self.weight is None else y * self.weight).to(x.dtype)

    observations = rmsnorm.observe_rms_norm_module(VectorNormRMS, 0)
    assert observations[NORM_CALLS].value == []
    rmsnorm.judge_rms_norm_module(observations, 0)
    with pytest.raises(checks.CheckFailed):
        checks.check_layer_norm_module(layer_norm_by(LAYER_NORM_ROUTES["F.layer_norm"]))
    assert torch._C._len_torch_function_stack() == 0
    assert torch._C._len_torch_dispatch_stack() == 0
    x = torch.randn(2, 3)
    assert torch.allclose(F.layer_norm(x, (3,)), modules.layer_norm(x, (3,), None, None, 1e-5))


def test_torchs_own_modules_are_observed_without_recording():
    """The reference is torch's module itself: observed with forbid_torch_norms=False."""
    assert layernorm._reference_module_observations(0)[NORM_CALLS].value == []


# ----------------------------------------------------------------------------------------------
# Numbers first: a module with a wrong number and a wrong structure is told about the number


class UnbiasedLayerNormStartingAtHalf(modules.LayerNorm):
    """torch.var's unbiased default, and a weight that starts at 0.5 (with no attributes)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__(normalized_shape, eps, elementwise_affine, bias)
        if self.weight is not None:
            torch.nn.init.constant_(self.weight, 0.5)
        self._dims, self._eps = len(self.normalized_shape), eps
        del self.normalized_shape, self.eps, self.elementwise_affine

    def forward(self, x):
        dims = tuple(range(-self._dims, 0))
        y = (x - x.mean(dims, keepdim=True)) / torch.sqrt(x.var(dims, keepdim=True) + self._eps)
        y = y if self.weight is None else y * self.weight
        return y if self.bias is None else y + self.bias


class CenteredRMSNormStartingAtTwo(modules.RMSNorm):
    """Subtracts the mean, and a weight that starts at 2 (with no attributes)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__(normalized_shape, eps, elementwise_affine)
        if self.weight is not None:
            torch.nn.init.constant_(self.weight, 2.0)
        self._shape, self._eps = self.normalized_shape, eps
        del self.normalized_shape, self.eps, self.elementwise_affine

    def forward(self, x):
        dims = tuple(range(-len(self._shape), 0))
        x = x - x.mean(dims, keepdim=True)
        eps = torch.finfo(x.dtype).eps if self._eps is None else self._eps
        y = x * torch.rsqrt((x * x).mean(dims, keepdim=True) + eps)
        return y if self.weight is None else y * self.weight


def test_a_wrong_number_is_named_before_a_wrong_initial_value():
    with pytest.raises(checks.CheckFailed, match="unbiased variance"):
        checks.check_layer_norm_module(UnbiasedLayerNormStartingAtHalf)
    with pytest.raises(checks.CheckFailed, match="You subtracted the mean"):
        checks.check_rms_norm_module(CenteredRMSNormStartingAtTwo)


def test_batchnorm_a_wrong_number_is_named_before_a_wrong_buffer_dtype():
    class FloatCountBiasedRunning(modules.BatchNorm1d):
        """num_batches_tracked a float tensor, and the biased batch variance blended in."""

        def __init__(self, num_features, **kwargs):
            super().__init__(num_features, **kwargs)
            if self.num_batches_tracked is not None:
                self.num_batches_tracked = torch.tensor(0.0)

        def forward(self, x):
            y = super().forward(x)
            if self.training and self.running_var is not None:
                n = x.numel() // x.shape[1]
                with torch.no_grad():  # undo the unbiasing of the latest update
                    m = self.momentum or 1.0 / float(self.num_batches_tracked)
                    var = x.var(dim=[0, *range(2, x.dim())], unbiased=False)
                    self.running_var.sub_(m * var * n / (n - 1)).add_(m * var)
            return y

    with pytest.raises(checks.CheckFailed, match="biased batch variance"):
        checks.check_batch_norm_module(FloatCountBiasedRunning)


# ----------------------------------------------------------------------------------------------
# The numpy exercises: an answer that calls torch's norm through torch loses its points too


def _numpy_through_torch():
    """Numpy answers that hand the work to torch's own norms, by name: (check, function)."""
    t = torch.from_numpy

    def layer_norm(x, gamma, beta, eps=1e-5):
        return F.layer_norm(t(x), x.shape[-1:], t(gamma), t(beta), eps).numpy()

    def layer_norm_backward(dy, x, gamma, eps=1e-5):
        x_ = t(x.copy()).requires_grad_(True)
        gamma_ = t(gamma.copy()).requires_grad_(True)
        beta_ = torch.zeros_like(gamma_, requires_grad=True)
        F.layer_norm(x_, x.shape[-1:], gamma_, beta_, eps).backward(t(dy))
        return x_.grad.numpy(), gamma_.grad.numpy(), beta_.grad.numpy()

    def rms_norm(x, weight, eps=1e-6):
        return torch.rms_norm(t(x), x.shape[-1:], t(weight), eps).numpy()

    def batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        mean, var = t(running_mean.copy()), t(running_var.copy())  # torch updates them in place
        y = F.batch_norm(t(x), mean, var, t(gamma), t(beta), training, momentum, eps)
        return y.numpy(), mean.numpy(), var.numpy()

    return {
        "check_layer_norm": (layernorm.observe_layer_norm, layer_norm),
        "check_layer_norm_backward": (layernorm.observe_layer_norm_backward, layer_norm_backward),
        "check_rms_norm": (rmsnorm.observe_rms_norm, rms_norm),
        "check_batch_norm": (batchnorm.observe_batch_norm, batch_norm),
    }


@pytest.mark.parametrize("name", sorted(_numpy_through_torch()))
def test_a_numpy_answer_that_calls_torchs_norm_loses_its_points_in_the_judge(name, tmp_path):
    """Its numbers are right; the record says which norm it called, and the judge fails it."""
    observe, function = _numpy_through_torch()[name]
    path = record.observation_path(tmp_path, name, 0)
    record.save(path, observe(function, 0))
    with pytest.raises(checks.CheckFailed) as info:
        checks.JUDGES[name](record.load(path), 0)
    message = str(info.value)
    assert "calls torch's own normalization functions" in message, message
    assert "with numpy operations" in message and "tensor operations" not in message, message


def test_a_numpy_record_without_its_norm_calls_is_incomplete():
    """The list of norm calls is part of the record: leaving it out earns nothing."""
    from addnorm_lib.reference import norms

    observations = layernorm.observe_layer_norm(norms.layer_norm, 0)
    assert observations[-1].value == []  # the reference calls no norm of torch's
    with pytest.raises(checks.CheckFailed, match="incomplete"):
        layernorm.judge_layer_norm(observations[:-1], 0)


def test_the_numpy_checks_record_nothing_outside_the_check():
    """The try cells run the learner's function outside any check: torch's norms work there."""
    from addnorm_lib.reference import norms

    layernorm.observe_layer_norm(norms.layer_norm, 0)
    x = torch.randn(2, 4)
    assert torch.allclose(F.layer_norm(x, (4,)), torch.nn.LayerNorm(4)(x))
    assert not torch._C._is_torch_function_mode_enabled()
