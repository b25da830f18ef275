"""The BatchNorm checks accept the reference and reject each known mistake under its own name."""

import numpy as np
import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.checks._torch import NON_CONTIGUOUS_HINT
from addnorm_lib.reference import mistakes, norms


def test_references_pass(capsys):
    checks.check_batch_norm(norms.batch_norm)
    checks.check_batch_norm_backward(norms.batch_norm_backward, seed=2024)
    assert "✓ batch_norm passed 11 checks" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("check", "mistake"),
    [(checks.check_batch_norm, m) for m in mistakes.BATCH_NORM_MISTAKES]
    + [(checks.check_batch_norm_backward, m) for m in mistakes.BATCH_NORM_BACKWARD_MISTAKES],
    ids=lambda value: getattr(value, "name", None) or getattr(value, "__name__", ""),
)
def test_each_mistake_is_rejected_and_named(check, mistake):
    with pytest.raises(checks.CheckFailed) as info:
        check(mistake.compute)
    assert mistake.diagnosis in str(info.value)


@pytest.mark.parametrize(
    "mistake", mistakes.BATCH_NORM_BACKWARD_DGAMMA_MISTAKES, ids=lambda m: m.name
)
def test_each_dgamma_mistake_is_rejected_and_named(mistake):
    def learner(dy, x, gamma, eps=1e-5):
        dx, _, dbeta = norms.batch_norm_backward(dy, x, gamma, eps)
        return dx, mistake.compute(dy, x, gamma, eps)[1], dbeta

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_batch_norm_backward(learner)
    assert mistake.diagnosis in str(info.value)


def spec_batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    """Written to the notebook's spec only: x is (N, C) or (N, C, L), nothing else."""
    if x.ndim == 2:
        axes, channel = (0,), (1, -1)
    elif x.ndim == 3:
        axes, channel = (0, 2), (1, -1, 1)
    else:
        raise ValueError("x must be (N, C) or (N, C, L)")
    n = x.size // x.shape[1]
    if training:
        mean, var = x.mean(axes), x.var(axes)
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean.copy(), running_var.copy()  # copies, as the task says
    x_hat = (x - mean.reshape(channel)) / np.sqrt(var.reshape(channel) + eps)
    return gamma.reshape(channel) * x_hat + beta.reshape(channel), new_mean, new_var


def spec_batch_norm_backward(dy, x, gamma, eps=1e-5):
    """Written to the notebook's spec only: x is (N, C) or (N, C, L)."""
    if x.ndim not in (2, 3):
        raise ValueError("x must be (N, C) or (N, C, L)")
    axes = (0,) if x.ndim == 2 else (0, 2)
    channel = (1, -1) if x.ndim == 2 else (1, -1, 1)
    mean = x.mean(axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(x.var(axes, keepdims=True) + eps)
    x_hat = (x - mean) * inv_std
    dx_hat = dy * gamma.reshape(channel)
    dx = inv_std * (
        dx_hat
        - dx_hat.mean(axes, keepdims=True)
        - x_hat * (dx_hat * x_hat).mean(axes, keepdims=True)
    )
    return dx, (dy * x_hat).sum(axes), dy.sum(axes)


@pytest.mark.parametrize("seed", [0, 2024])
def test_a_solution_written_to_the_spec_passes_every_check(seed):
    """The notebook says (N, C) or (N, C, L): the checks ask for nothing outside that."""
    checks.check_batch_norm(spec_batch_norm, seed=seed)
    checks.check_batch_norm_backward(spec_batch_norm_backward, seed=seed)


def test_a_stub_is_reported_as_not_implemented():
    def batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(checks.CheckFailed, match="batch_norm is not implemented yet"):
        checks.check_batch_norm(batch_norm)


def test_returning_only_y_is_a_clear_error():
    def batch_norm(*args, **kwargs):
        return norms.batch_norm(*args, **kwargs)[0]

    with pytest.raises(checks.CheckFailed, match=r"should return a tuple \(y, new_running_mean"):
        checks.check_batch_norm(batch_norm)


def learner_batch_norm_1d(
    mode_from_grad=False,
    update_in_eval=False,
    biased_running=False,
    reversed_momentum=False,
    batch_stats_in_eval=False,
    count=True,
    call_torch=False,
    momentum_none_as_default=False,
    ignores_affine=False,
    ignores_tracking=False,
    stats_as_parameters=False,
    recorded_update=False,
    misbroadcast=False,
    channels_last_scrambled=False,
    view_transposed=False,
):
    """A hand-written BatchNorm1d with every option of torch's, right unless a flag says
    otherwise (each flag is a mistake a learner makes)."""

    class BatchNorm1d(torch.nn.Module):
        def __init__(
            self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True
        ):
            super().__init__()
            self.eps, self.momentum = eps, momentum
            self.affine = affine or ignores_affine
            self.tracking = track_running_stats or ignores_tracking
            if self.affine:
                self.weight = torch.nn.Parameter(torch.ones(num_features))
                self.bias = torch.nn.Parameter(torch.zeros(num_features))
            else:
                self.register_parameter("weight", None)
                self.register_parameter("bias", None)
            stats = {
                "running_mean": torch.zeros(num_features),
                "running_var": torch.ones(num_features),
                "num_batches_tracked": torch.tensor(0, dtype=torch.long),
            }
            for name, value in stats.items():
                if not self.tracking:
                    self.register_buffer(name, None)
                elif stats_as_parameters and name != "num_batches_tracked":
                    setattr(self, name, torch.nn.Parameter(value, requires_grad=False))
                else:
                    self.register_buffer(name, value)

        def forward(self, x):
            if call_torch:
                stats = (self.running_mean, self.running_var)
                return torch.nn.functional.batch_norm(x, *stats, self.weight, self.bias, True)
            dtype = x.dtype  # half precision is computed in float32, returned as it came
            x = x.float() if dtype in (torch.float16, torch.bfloat16) else x
            shape = (1, -1) + (1,) * (x.dim() - 2)
            if misbroadcast:  # (C, 1): right for (N, C, L), along the batch axis of (N, C)
                shape = (-1, 1)
            axes = (0, *range(2, x.dim()))
            training = torch.is_grad_enabled() if mode_from_grad else self.training
            if view_transposed and (training or not self.tracking):  # channels last, by .view
                flat = x.transpose(1, -1).view(-1, x.shape[1])  # (N * L, C)
                mean, var = flat.mean(dim=0), flat.var(dim=0, unbiased=False)
            elif training or batch_stats_in_eval or not self.tracking:
                mean = x.mean(dim=axes)
                var = x.var(dim=axes, unbiased=False)
            else:
                mean, var = self.running_mean, self.running_var
            if (training or update_in_eval) and self.tracking:
                n = x.numel() // x.shape[1]
                batch_mean, batch_var = x.mean(dim=axes), x.var(dim=axes, unbiased=False)
                running = batch_var if biased_running else batch_var * n / (n - 1)
                if count:
                    with torch.no_grad():
                        self.num_batches_tracked += 1
                m = self.momentum
                if m is None:
                    m = 0.1 if momentum_none_as_default else 1.0 / float(self.num_batches_tracked)
                m = 1 - m if reversed_momentum else m
                if recorded_update:
                    self.running_mean = (1 - m) * self.running_mean + m * batch_mean
                    self.running_var = (1 - m) * self.running_var + m * running
                else:
                    with torch.no_grad():
                        self.running_mean.mul_(1 - m).add_(m * batch_mean)
                        self.running_var.mul_(1 - m).add_(m * running)
            x_hat = (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + self.eps)
            y = x_hat
            if self.affine:
                y = x_hat * self.weight.reshape(shape) + self.bias.reshape(shape)
            if channels_last_scrambled and y.dim() == 3:  # reshaped to x's shape, then moved
                flat = y.transpose(1, 2).reshape(-1, y.shape[1])  # (N * L, C)
                y = flat.reshape(y.shape).transpose(1, 2)  # (N, L, C)
            return y.to(dtype)

    return BatchNorm1d


def test_a_hand_written_module_passes():
    checks.check_batch_norm_module(learner_batch_norm_1d())


@pytest.mark.parametrize(
    ("flag", "phrase"),
    [
        ("mode_from_grad", "torch.is_grad_enabled()"),
        ("update_in_eval", "updates the running estimates in eval mode"),
        ("biased_running", "biased batch variance"),
        ("reversed_momentum", "momentum points the wrong way"),
        ("batch_stats_in_eval", "normalized with the batch's own statistics"),
        ("count", "num_batches_tracked"),
        ("call_torch", "torch's own normalization function"),
        ("momentum_none_as_default", "cumulative moving average"),
        ("ignores_affine", "affine=False"),
        ("ignores_tracking", "track_running_stats=False: no running estimates"),
        ("stats_as_parameters", "as a Parameter"),
        ("recorded_update", "grad_fn"),
        ("misbroadcast", "lines it up with the batch axis of (N, C) input"),
        ("channels_last_scrambled", "before moving the channel axis back"),
        ("view_transposed", ".view() refuses it"),
    ],
)
def test_each_module_mistake_is_rejected_and_named(flag, phrase):
    options = {flag: flag != "count"}  # count=False is the mistake
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_batch_norm_module(learner_batch_norm_1d(**options))
    assert phrase in str(info.value), str(info.value)


def test_returning_the_running_estimates_themselves_in_eval_mode_is_caught():
    """The task asks for copies: the caller's arrays must not come back as the result."""

    def batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        y, new_mean, new_var = norms.batch_norm(
            x, gamma, beta, running_mean, running_var, training, momentum, eps
        )
        return (y, running_mean, running_var) if not training else (y, new_mean, new_var)

    with pytest.raises(checks.CheckFailed, match="returns running_mean itself, not a copy"):
        checks.check_batch_norm(batch_norm)


def test_a_wrong_dx_is_not_given_the_hint_about_dgamma():
    """The 3-D case's hint is about summing the parameters' gradients: not for a dx error."""

    def batch_norm_backward(dy, x, gamma, eps=1e-5):
        dx, dgamma, dbeta = norms.batch_norm_backward(dy, x, gamma, eps)
        return (dx * 1.5 if x.ndim == 3 else dx), dgamma, dbeta

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_batch_norm_backward(batch_norm_backward)
    assert "dx" in str(info.value) and "dgamma and dbeta have gamma's shape" not in str(info.value)


def test_a_wrong_dgamma_on_3d_input_gets_the_hint_about_summing():
    def batch_norm_backward(dy, x, gamma, eps=1e-5):
        dx, dgamma, dbeta = norms.batch_norm_backward(dy, x, gamma, eps)
        return dx, (dgamma * 1.5 if x.ndim == 3 else dgamma), dbeta

    with pytest.raises(checks.CheckFailed, match="dgamma and dbeta have gamma's shape"):
        checks.check_batch_norm_backward(batch_norm_backward)


# ----------------------------------------------------------------------------------------------
# Non-square inputs: a per-channel vector broadcast along the wrong axis never passes


def check_input_shapes(seed: int) -> dict[str, tuple[int, ...]]:
    """Every input shape the three checks use: description -> shape."""
    from addnorm_lib.checks import batchnorm as bn

    shapes = {case.description: case.args[0].shape for case in bn.batch_norm_cases(seed)}
    shapes |= {case.description: case.args[1].shape for case in bn.batch_norm_backward_cases(seed)}
    shapes |= {description: shape for description, _, _, shape in bn.SCENARIO}
    extra = bn.extra_inputs(seed)
    for name, (description, _, spec, _, shape) in bn.EXTRA_STEPS.items():
        drawn = extra[name].shape
        if name == "noncontiguous":  # drawn (N, L, C), given as its transposed view
            drawn = (drawn[0], drawn[2], drawn[1])
        assert drawn == shape
        shapes[description or spec.description] = shape
    return shapes


@pytest.mark.parametrize("seed", [0, 2024])
def test_no_input_of_the_checks_has_two_axes_of_one_length(seed):
    """N != C != L != N: where two lengths coincide, a vector broadcast along the wrong axis
    passes silently (or only mixes up values, unnamed)."""
    shapes = check_input_shapes(seed)
    assert len(shapes) >= 20
    square = {d: s for d, s in shapes.items() if len(set(s)) < len(s)}
    assert not square, square


def misbroadcast_batch_norm(x, gamma, beta, running_mean, running_var, training, **kwargs):
    """The reference, with each per-channel vector written v[:, None] as in 3-D code."""
    y, new_mean, new_var = norms.batch_norm(
        x, gamma, beta, running_mean, running_var, training, **kwargs
    )
    if x.ndim == 2:
        y = x - running_mean[:, None]  # numpy raises unless N == C
    return y, new_mean, new_var


def misbroadcast_backward(dy, x, gamma, eps=1e-5):
    dx, dgamma, dbeta = norms.batch_norm_backward(dy, x, gamma, eps)
    return dy * gamma[:, None] if x.ndim == 2 else dx, dgamma, dbeta


@pytest.mark.parametrize(
    ("check", "code"),
    [
        (checks.check_batch_norm, misbroadcast_batch_norm),
        (checks.check_batch_norm_backward, misbroadcast_backward),
        (checks.check_batch_norm_module, learner_batch_norm_1d(misbroadcast=True)),
    ],
    ids=["batch_norm", "batch_norm_backward", "BatchNorm1d"],
)
def test_a_vector_broadcast_along_the_batch_axis_is_named(check, code):
    with pytest.raises(checks.CheckFailed) as info:
        check(code)
    message = str(info.value)
    assert "could not be broadcast" in message or "must match the size" in message, message
    assert mistakes.batchnorm.MISBROADCAST_DIAGNOSIS in message, message
    assert "only works" in message and "N == C" in message


def test_another_error_keeps_the_cases_hint():
    """Only the errors of the named mistakes are explained as them."""

    def batch_norm(x, *args, **kwargs):
        raise KeyError("something else")

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_batch_norm(batch_norm)
    message = str(info.value)
    assert "KeyError" in message and "Training mode: normalize" in message
    assert mistakes.batchnorm.MISBROADCAST_DIAGNOSIS not in message


def test_a_module_that_views_a_transposed_tensor_is_told_to_reshape():
    """x.transpose(1, 2).view(-1, C) fails on every (N, C, L) input that is contiguous."""
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_batch_norm_module(learner_batch_norm_1d(view_transposed=True))
    message = str(info.value)
    assert "view size is not compatible" in message
    assert NON_CONTIGUOUS_HINT in message


def feature_axis_batch_norm(x, gamma, beta, running_mean, running_var, training, **kwargs):
    """Statistics over the feature axis, shape (N,), reshaped onto the channel axis: numpy
    raises on (N, C) input, a statistic of the wrong length, not a vector on the wrong axis."""
    mean = x.mean(axis=1)
    return (x - mean.reshape(1, -1)), running_mean.copy(), running_var.copy()


def error_of(operation) -> str:
    try:
        operation()
    except (ValueError, RuntimeError) as error:
        return str(error)
    raise AssertionError("no error")


@pytest.mark.parametrize(
    ("operation", "channels", "misplaced"),
    [
        (lambda: np.ones((8, 4)) - np.ones(4)[:, None], 4, True),  # along the batch axis
        (lambda: np.ones((4, 3, 5)) * np.ones(3), 3, True),  # along the length axis
        (lambda: np.ones((8, 4)) - np.ones((8, 4)).mean(1).reshape(1, -1), 4, False),  # (N,)
        (lambda: torch.ones(8, 4) - torch.ones(4)[:, None], 4, True),
        (lambda: torch.ones(5, 4, 3) * torch.ones(4), 4, True),
        (lambda: torch.ones(8, 4) - torch.ones(8, 4).mean(1).reshape(1, -1), 4, False),
    ],
    ids=["numpy-batch", "numpy-length", "numpy-stat", "torch-batch", "torch-length", "torch-stat"],
)
def test_only_a_channel_vector_on_another_axis_is_called_misbroadcast(
    operation, channels, misplaced
):
    """Read from numpy's and torch's own error texts: a statistic of the wrong length (reduced
    over the wrong axis) is another mistake, with its own hint."""
    from addnorm_lib.checks.batchnorm import misplaced_channel_vector

    assert misplaced_channel_vector(error_of(operation), channels) is misplaced


def test_statistics_over_the_feature_axis_keep_the_cases_hint():
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_batch_norm(feature_axis_batch_norm)
    message = str(info.value)
    assert "could not be broadcast" in message and "per feature (axis 0)" in message
    assert mistakes.batchnorm.MISBROADCAST_DIAGNOSIS not in message
