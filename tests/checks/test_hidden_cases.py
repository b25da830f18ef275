"""The cases that took over from the solutions' in-kernel hidden asserts.

A graded cell's hidden part is check calls only (``checks.check_rms_norm(rms_norm, seed=2024)``):
the kernel records, the grader judges. What the old asserts tested beyond the checks is a case of
the check now, for every seed. For each added case, the mistake the old assert caught passes the
cases as they were (the added case switched off here) and fails with it, observed as in a graded
kernel, written to a record, read back and judged as the grader does; a correct implementation
written another way passes.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.checks import _record as record
from addnorm_lib.checks import batchnorm, deepnorm, placement, residuals, rmsnorm
from addnorm_lib.reference import deepnorm as deepnorm_reference
from addnorm_lib.reference import mistakes, norms
from addnorm_lib.reference import placement as schedules
from addnorm_lib.reference import residuals as blocks

HIDDEN_SEED = 2024
F32 = np.float32


def graded(check_name: str, target, seed: int, folder, monkeypatch) -> str:
    """``target`` observed as in a graded kernel, judged from the record read back (the summary,
    or CheckFailed)."""
    monkeypatch.setenv(record.OBSERVATIONS_ENV, str(folder))
    getattr(checks, check_name)(target, seed=seed)
    monkeypatch.delenv(record.OBSERVATIONS_ENV)
    observations = record.load(record.observation_path(folder, check_name, seed))
    return checks.JUDGES[check_name](observations, seed)


def mistake_named(catalogue, name: str):
    (mistake,) = [m for m in catalogue if m.name == name]
    return mistake


# ----------------------------------------------------------------------------------------------
# The mistakes the old hidden asserts caught


def batch_norm_3d_by_recursion(x, gamma, beta, running_mean, running_var, training, **options):
    """(N, C, L) handled as (N * L, C) rows, calling itself without momentum and eps."""
    if x.ndim == 3:
        n, c, length = x.shape
        rows = x.transpose(0, 2, 1).reshape(-1, c)
        y, mean, var = batch_norm_3d_by_recursion(
            rows, gamma, beta, running_mean, running_var, training
        )
        return y.reshape(n, length, c).transpose(0, 2, 1), mean, var
    return norms.batch_norm(x, gamma, beta, running_mean, running_var, training, **options)


def decoder_of_the_deeper_stack(
    architecture, num_encoder_layers=0, num_decoder_layers=0, stack=None
):
    """The decoder of an encoder-decoder model sized by the deeper of its two stacks."""
    if architecture == "encoder-decoder" and stack == "decoder":
        layers = max(num_encoder_layers, num_decoder_layers)
        return (3 * layers) ** 0.25, (12 * layers) ** -0.25
    return deepnorm_reference.deepnorm_constants(
        architecture, num_encoder_layers, num_decoder_layers, stack
    )


def memorized(cases: Callable, reference: Callable, fallback: Callable) -> Callable:
    """Right on every call of the visible check (seed 0), ``fallback`` elsewhere."""
    answers = {
        case.args + tuple(case.kwargs.values()): reference(*case.args, **case.kwargs)
        for case in cases(0)
    }

    def learner(*args, **kwargs):
        key = args + tuple(kwargs.values())
        return answers[key] if key in answers else fallback(*args, **kwargs)

    return learner


def one_stack_formula(architecture, num_encoder_layers=0, num_decoder_layers=0, stack=None):
    mistake = mistake_named(
        mistakes.DEEPNORM_CONSTANTS_MISTAKES, "encoder_decoder_one_stack_formula"
    )
    return tuple(mistake.compute(architecture, num_encoder_layers, num_decoder_layers, stack))


NO_D_MODEL = mistake_named(mistakes.VASWANI_LR_MISTAKES, "no_d_model")
NO_SQRT = mistake_named(mistakes.WARMUP_RSQRT_LR_MISTAKES, "no_sqrt")


def as_float(compute: Callable) -> Callable:
    """A catalogue mistake returning a Python float, as the task asks."""
    return lambda *args: float(compute(*args))


def float32_branch(residual: bool):
    """The block's branch computed in float32 (a float32 copy of the weights), added back."""

    def block(x, W1, b1, W2):
        hidden = np.maximum(x.astype(F32) @ W1.astype(F32) + b1.astype(F32), 0)
        branch = hidden.astype(x.dtype) @ W2
        return x + branch if residual else branch

    return block


def float32_dx(backward: Callable) -> Callable:
    """A backward pass whose dx went through float32; the weight gradients in float64."""

    def learner(dy, x, W1, b1, W2):
        _, dW1, db1, dW2 = backward(dy, x, W1, b1, W2)
        dx = backward(*(a.astype(F32) for a in (dy, x, W1, b1, W2)))[0]
        return dx.astype(x.dtype), dW1, db1, dW2

    return learner


def rms_norm_in_float32(x, weight, eps=1e-6):
    return norms.rms_norm(x.astype(F32), weight.astype(F32), eps=eps).astype(x.dtype)


def rms_norm_backward_in_float32(dy, x, weight, eps=1e-6):
    grads = norms.rms_norm_backward(dy.astype(F32), x.astype(F32), weight.astype(F32), eps=eps)
    return tuple(g.astype(x.dtype) for g in grads)


PRECISION = "float64 all the way"


@dataclass(frozen=True)
class Added:
    """Cases added to one check, and the mistake that only they catch."""

    check: str  # the check's name, a key of checks.JUDGES
    module: ModuleType  # where its cases are drawn
    cases: str  # the function of ``module`` that draws them
    added: Callable  # whether a case (of that function's list) is one of the added ones
    wrong: Callable  # the mistake the old hidden assert caught
    seed: int  # a seed whose old cases ``wrong`` passes
    phrase: str  # what the failure says


def precise(case) -> bool:
    return "to float64 precision" in case.description


def drawn_depths(case) -> bool:
    return case.hint in deepnorm.DRAWN_HINTS.values()


def drawn_schedule(case) -> bool:
    return case.args not in (*placement.VASWANI_CALLS, *placement.RSQRT_CALLS)


ADDED = {
    "3-D input with momentum": Added(
        "check_batch_norm",
        batchnorm,
        "batch_norm_cases",
        lambda case: "(7, 3, 4)" in case.description,
        batch_norm_3d_by_recursion,
        0,
        "3-D input takes the momentum argument too",
    ),
    "decoder of a deeper encoder": Added(
        "check_deepnorm_constants",
        deepnorm,
        "constants_cases",
        drawn_depths,
        decoder_of_the_deeper_stack,
        0,
        "depends on M, its own number of layers, alone",
    ),
    "constants memorized": Added(
        "check_deepnorm_constants",
        deepnorm,
        "constants_cases",
        drawn_depths,
        memorized(
            deepnorm.constants_cases, deepnorm_reference.deepnorm_constants, one_stack_formula
        ),
        HIDDEN_SEED,
        "one-stack formulas",
    ),
    "vaswani_lr memorized": Added(
        "check_vaswani_lr",
        placement,
        "vaswani_cases",
        drawn_schedule,
        memorized(placement.vaswani_cases, schedules.vaswani_lr, as_float(NO_D_MODEL.compute)),
        HIDDEN_SEED,
        NO_D_MODEL.diagnosis,
    ),
    "warmup_rsqrt_lr memorized": Added(
        "check_warmup_rsqrt_lr",
        placement,
        "rsqrt_cases",
        drawn_schedule,
        memorized(placement.rsqrt_cases, schedules.warmup_rsqrt_lr, as_float(NO_SQRT.compute)),
        HIDDEN_SEED,
        NO_SQRT.diagnosis,
    ),
    "residual_block in float32": Added(
        "check_residual_block",
        residuals,
        "block_cases",
        precise,
        float32_branch(True),
        0,
        PRECISION,
    ),
    "plain_block in float32": Added(
        "check_plain_block",
        residuals,
        "block_cases",
        precise,
        float32_branch(False),
        HIDDEN_SEED,
        PRECISION,
    ),
    "residual_block_backward in float32": Added(
        "check_residual_block_backward",
        residuals,
        "backward_cases",
        precise,
        float32_dx(blocks.residual_block_backward),
        HIDDEN_SEED,
        PRECISION,
    ),
    "plain_block_backward in float32": Added(
        "check_plain_block_backward",
        residuals,
        "backward_cases",
        precise,
        float32_dx(blocks.plain_block_backward),
        0,
        PRECISION,
    ),
    "rms_norm in float32": Added(
        "check_rms_norm", rmsnorm, "rms_norm_cases", precise, rms_norm_in_float32, 0, PRECISION
    ),
    "rms_norm_backward in float32": Added(
        "check_rms_norm_backward",
        rmsnorm,
        "rms_norm_backward_cases",
        precise,
        rms_norm_backward_in_float32,
        1,
        PRECISION,
    ),
}


@pytest.mark.parametrize("with_added", [False, True], ids=["old cases", "added cases"])
@pytest.mark.parametrize("name", ADDED)
def test_the_mistake_passes_the_old_cases_and_fails_the_added_ones(
    name, with_added, monkeypatch, tmp_path
):
    added = ADDED[name]
    drawn = getattr(added.module, added.cases)
    assert any(added.added(case) for case in drawn(added.seed)), "no added case to switch off"
    if not with_added:
        old = lambda seed=0: [case for case in drawn(seed) if not added.added(case)]  # noqa: E731
        monkeypatch.setattr(added.module, added.cases, old)
        assert "passed" in graded(added.check, added.wrong, added.seed, tmp_path, monkeypatch)
        return
    with pytest.raises(checks.CheckFailed) as info:
        graded(added.check, added.wrong, added.seed, tmp_path, monkeypatch)
    assert added.phrase in str(info.value), str(info.value)


# ----------------------------------------------------------------------------------------------
# Correct implementations written another way


def batch_norm_3d_by_rows(
    x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5
):
    """(N, C, L) handled as (N * L, C) rows, passing every option on."""
    if x.ndim == 3:
        n, c, length = x.shape
        rows = x.transpose(0, 2, 1).reshape(-1, c)
        y, mean, var = batch_norm_3d_by_rows(
            rows, gamma, beta, running_mean, running_var, training, momentum, eps
        )
        return y.reshape(n, length, c).transpose(0, 2, 1), mean, var
    return norms.batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps)


def constants_by_logarithms(architecture, num_encoder_layers=0, num_decoder_layers=0, stack=None):
    """The table's formulas as exponentials of logarithms, returned as a list."""
    n, m = math.log(num_encoder_layers or 1), math.log(num_decoder_layers or 1)
    if architecture == "encoder-decoder" and stack == "encoder":
        log_depth = (4 * n + m) / 16
        return [0.81 * math.exp(log_depth), 0.87 * math.exp(-log_depth)]
    if architecture == "encoder-decoder":
        return [math.exp((math.log(3) + m) / 4), math.exp(-(math.log(12) + m) / 4)]
    layers = n if architecture == "encoder-only" else m
    return [math.exp((math.log(2) + layers) / 4), math.exp(-(math.log(8) + layers) / 4)]


def vaswani_by_sqrt(step, d_model, warmup=4000):
    return min(step / math.sqrt(warmup) ** 3, 1 / math.sqrt(step)) / math.sqrt(d_model)


def rsqrt_from_vaswani(step, peak_lr, warmup):
    """The relation the old hidden test checked: peak_lr = (d_model * warmup) ** -0.5."""
    return vaswani_by_sqrt(step, 1 / (peak_lr**2 * warmup), warmup)


def block_by_einsum(residual: bool):
    def block(x, W1, b1, W2):
        branch = np.einsum(
            "...h,hc->...c", np.maximum(np.einsum("...c,ch->...h", x, W1) + b1, 0), W2
        )
        return x + branch if residual else branch

    return block


def backward_by_autograd(residual: bool):
    def backward(dy, x, W1, b1, W2):
        tensors = [torch.tensor(a, requires_grad=True) for a in (x, W1, b1, W2)]
        x_t, W1_t, b1_t, W2_t = tensors
        y = torch.relu(x_t @ W1_t + b1_t) @ W2_t
        (x_t + y if residual else y).backward(torch.from_numpy(dy))
        return tuple(t.grad.numpy() for t in tensors)

    return backward


def rms_norm_by_linalg(x, weight, eps=1e-6):
    rms = np.sqrt(np.linalg.norm(x, axis=-1, keepdims=True) ** 2 / x.shape[-1] + eps)
    return weight * (x / rms)


def rms_norm_backward_by_einsum(dy, x, weight, eps=1e-6):
    inv_rms = 1.0 / np.sqrt(np.einsum("...c,...c->...", x, x)[..., None] / x.shape[-1] + eps)
    x_hat, dx_hat = x * inv_rms, dy * weight
    projection = np.einsum("...c,...c->...", dx_hat, x_hat)[..., None] / x.shape[-1]
    dweight = (dy * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)
    return inv_rms * (dx_hat - x_hat * projection), dweight


UNUSUAL = [
    ("check_batch_norm", batch_norm_3d_by_rows),
    ("check_deepnorm_constants", constants_by_logarithms),
    ("check_vaswani_lr", vaswani_by_sqrt),
    ("check_warmup_rsqrt_lr", rsqrt_from_vaswani),
    ("check_residual_block", block_by_einsum(True)),
    ("check_plain_block", block_by_einsum(False)),
    ("check_residual_block_backward", backward_by_autograd(True)),
    ("check_plain_block_backward", backward_by_autograd(False)),
    ("check_rms_norm", rms_norm_by_linalg),
    ("check_rms_norm_backward", rms_norm_backward_by_einsum),
]


@pytest.mark.parametrize(("check", "learner"), UNUSUAL, ids=[check for check, _ in UNUSUAL])
def test_a_correct_implementation_written_another_way_passes(check, learner, monkeypatch, tmp_path):
    for seed in (0, HIDDEN_SEED):
        assert "passed" in graded(check, learner, seed, tmp_path, monkeypatch)


def test_the_added_cases_are_in_every_seeds_check():
    """Within the spec, so the visible check has them too; a hidden seed draws its own."""
    for added in ADDED.values():
        for seed in (0, HIDDEN_SEED):
            assert any(added.added(case) for case in getattr(added.module, added.cases)(seed))
    assert deepnorm.constants_cases(0)[-2:] != deepnorm.constants_cases(HIDDEN_SEED)[-2:]
    assert placement.vaswani_cases(0)[-3:] != placement.vaswani_cases(HIDDEN_SEED)[-3:]
