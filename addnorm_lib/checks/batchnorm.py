"""Checkers for the BatchNorm exercise's numpy code: ``batch_norm`` and ``batch_norm_backward``.

Signatures of :mod:`addnorm_lib.reference.norms`:

- ``batch_norm(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5)
  -> (y, new_running_mean, new_running_var)``, for x of shape (N, C) or (N, C, L);
- ``batch_norm_backward(dy, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)`` (training mode).

Running estimates start away from PyTorch's initial 0 and 1, so that a reversed momentum or a
biased running variance shows. Observed and judged as in :mod:`addnorm_lib.checks.layernorm`.
"""

import re
from dataclasses import replace

import numpy as np

from addnorm_lib.checks._core import (
    NUMPY_MATH,
    PLAIN,
    Case,
    ListOf,
    MapOf,
    Observation,
    compare,
    compare_tuple,
    conform,
    copied,
    expect_keys,
    expect_observations,
    fail,
    incomplete,
    judge_backward,
    judge_gradients,
    judged_calls,
    observe,
    observe_cases,
    passed,
    plain,
    without_norm_calls,
)
from addnorm_lib.checks._record import run_check
from addnorm_lib.checks._torch import (
    NON_CONTIGUOUS_HINT,
    NORM_CALLS,
    NOT_CALLING_TORCH_NORMS,
    LowPrecisionInput,
    ModuleConfig,
    ModuleTask,
    describe_module,
    half_output,
    judge_construction,
    judge_low_precision,
    judge_norm_calls,
    judge_round_trip,
    judge_state,
    judge_structure,
    norm_calls_observation,
    recorded_state,
    recording_torch_norms,
)

OUTPUTS = ("y", "new_running_mean", "new_running_var")
GRADIENTS = ("dx", "dgamma", "dbeta")
ARG_NAMES = ("x", "gamma", "beta", "running_mean", "running_var")


# In every input of these checks (numpy and module) no two of N, C and L are equal: a
# per-channel vector broadcast along the batch or the length axis (``mean[:, None]`` against
# (N, C), a bare (C,) against (N, C, L)), or a result reshaped back in the wrong axis order,
# raises or comes out of the wrong shape, and is named, instead of passing where two lengths
# coincide.
# The words of torch's broadcasting error and of .view refusing strides; numpy's error lists
# the operands' shapes.
TORCH_BROADCAST = re.compile(
    r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
    r"dimension (\d+)"
)
NUMPY_BROADCAST = re.compile(r"could not be broadcast together with shapes ((?:\([\d,]*\) ?)+)")
VIEW_ERROR = "view size is not compatible with input tensor's size and stride"


def _conflicts(error: str) -> list[tuple[int, set[int]]] | None:
    """The axes (counted in the broadcast result, x's frame) where a broadcasting error's two
    operands disagree, each with their two lengths; None if ``error`` is no such error."""
    if found := TORCH_BROADCAST.search(error):
        a, b, axis = (int(g) for g in found.groups())
        return [(axis, {a, b})]
    if not (found := NUMPY_BROADCAST.search(error)):
        return None
    shapes = [
        tuple(int(n) for n in text.split(",") if n)
        for text in re.findall(r"\(([\d,]*)\)", found.group(1))
    ][:2]
    if len(shapes) < 2:
        return None
    ndim = max(len(shape) for shape in shapes)
    first, second = ((1,) * (ndim - len(shape)) + shape for shape in shapes)
    return [
        (axis, {a, b})
        for axis, (a, b) in enumerate(zip(first, second, strict=True))
        if a != b and 1 not in (a, b)
    ]


def misplaced_channel_vector(error: str, channels: int) -> bool:
    """Whether a broadcasting error came from a vector of length C (``channels``) lined up with
    an axis other than the channel axis 1 of x: ``v[:, None]`` against (N, C), a bare (C,)
    against (N, C, L). A statistic of the wrong length on the channel axis (reduced over the
    wrong axes) is not this mistake."""
    conflicts = _conflicts(error)
    return bool(conflicts) and all(axis != 1 and channels in lengths for axis, lengths in conflicts)


def error_explanation(error, channels: int) -> str | None:
    """What to tell code that raised ``error`` (an observation's error text) on input with
    ``channels`` channels when the error names its usual mistake: a per-channel vector
    broadcast along the wrong axis, or ``.view`` on a tensor whose memory is not in row order.
    None for any other error."""
    from addnorm_lib.reference.mistakes import batchnorm as known

    if not isinstance(error, str):
        return None
    if misplaced_channel_vector(error, channels):
        return f"{known.MISBROADCAST_DIAGNOSIS} {known.MISBROADCAST_HINT}"
    if VIEW_ERROR in error:
        return NON_CONTIGUOUS_HINT
    return None


def explained(cases: list[Case], observations, x_index: int = 0) -> list[Case]:
    """``cases``, each whose observation (same position) raised a known error hinted with its
    explanation instead of the case's own hint (which is about wrong values). ``x_index`` is
    the position of x among a case's arguments."""
    observed = list(observations) if isinstance(observations, list) else []
    hinted = []
    for index, case in enumerate(cases):
        error = getattr(observed[index], "error", None) if index < len(observed) else None
        explanation = error_explanation(error, case.args[x_index].shape[1])
        hinted.append(replace(case, hint=explanation) if explanation else case)
    return hinted


# A mean this large next to a spread of 1 makes E[x^2] - E[x]^2 lose most of its digits, even in
# float64 (E[x^2] is 1e14, 16 digits deep): the one-pass variance shows.
LARGE_OFFSET = 1e7


def batch_norm_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``batch_norm``, all within its spec (x of shape (N, C) or (N, C, L), float64):
    training and eval, 2-D and 3-D, fewer examples than channels, a large mean, other momentum
    and eps. No two of N, C and L are equal."""
    rng = np.random.default_rng(seed + 20)

    def case(description, shape, training, momentum=0.1, eps=1e-5, hint="", mean=2.0, std=3.0):
        channels = shape[1]
        x = rng.normal(mean, std, shape)
        gamma, beta = rng.uniform(0.5, 2.0, channels), rng.normal(0.0, 1.0, channels)
        running_mean = rng.normal(0.0, 1.0, channels)
        running_var = rng.uniform(0.5, 2.0, channels)
        return Case(
            description,
            (x, gamma, beta, running_mean, running_var, training),
            {"momentum": momentum, "eps": eps},
            hint=hint,
        )

    return [
        case(
            "a 2-D (N, C) = (8, 4) input in training mode",
            (8, 4),
            True,
            hint="Training mode: normalize with the batch mean and biased variance per feature "
            "(axis 0), and blend the batch statistics into the running estimates.",
        ),
        case(
            "a 2-D (8, 4) input in eval mode (training=False)",
            (8, 4),
            False,
            hint="Eval mode: normalize with running_mean and running_var, and return them "
            "unchanged.",
        ),
        case(
            "a 3-D (N, C, L) = (4, 3, 5) input in training mode",
            (4, 3, 5),
            True,
            hint="For (N, C, L) input the statistics are per channel, over axes 0 and 2.",
        ),
        case("a 3-D (4, 3, 5) input in eval mode", (4, 3, 5), False),
        case(
            "a 2-D (N, C) = (3, 5) input in training mode (fewer examples than channels)",
            (3, 5),
            True,
            hint="Statistics, gamma and beta all go along the channel axis (axis 1), whichever "
            "axis is longer.",
        ),
        case(
            f"a (16, 3) input with mean {LARGE_OFFSET:g} and standard deviation 1, training mode",
            (16, 3),
            True,
            mean=LARGE_OFFSET,
            std=1.0,
            hint="Compute the variance in two passes, mean((x - mean)**2): E[x^2] - E[x]^2 "
            "cancels catastrophically when the mean is large next to the spread.",
        ),
        case(
            "a (6, 2) input in training mode with momentum=0.3",
            (6, 2),
            True,
            momentum=0.3,
            hint="Use the momentum argument: new = (1 - momentum) * old + momentum * batch.",
        ),
        case(
            "a 3-D (N, C, L) = (7, 3, 4) input in training mode with momentum=0.2",
            (7, 3, 4),
            True,
            momentum=0.2,
            hint="3-D input takes the momentum argument too, and its running variance the "
            "unbiased batch variance with n = N * L: new = (1 - momentum) * old + momentum * "
            "batch.",
        ),
        case(
            "a (5, 3) input in training mode with eps=0.1",
            (5, 3),
            True,
            eps=0.1,
            hint="Use the eps argument, inside the square root.",
        ),
        case(
            "a (6, 3) input in training mode with eps=0, channels of variance about 1e-6",
            (6, 3),
            True,
            eps=0.0,
            mean=1.0,
            std=1e-3,
            hint="eps=0 is a valid value: add the eps you are given, whatever it is.",
        ),
    ]


def batch_norm_backward_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``batch_norm_backward``, within its spec: 2-D and 3-D, a short batch and a long
    length axis, a large mean, another eps. No two of N, C and L are equal."""
    rng = np.random.default_rng(seed + 21)

    def case(description, shape, eps=1e-5, hint="", params_hint="", mean=1.0, std=2.0):
        x, dy = rng.normal(mean, std, shape), rng.normal(size=shape)
        # a hint about the parameters' gradients is said for them only, never for a wrong dx
        per_output = dict.fromkeys(("dgamma", "dbeta"), params_hint) if params_hint else {}
        gamma = rng.uniform(0.5, 2.0, shape[1])
        return Case(description, (dy, x, gamma), {"eps": eps}, hint=hint, output_hints=per_output)

    return [
        case("a 2-D (N, C) = (6, 4) input", (6, 4)),
        case(
            "a 3-D (N, C, L) = (3, 4, 5) input",
            (3, 4, 5),
            params_hint="dgamma and dbeta have gamma's shape (C,): sum over axis 0 and axes 2, "
            "3, ...",
        ),
        case(
            "a 3-D (N, C, L) = (2, 3, 6) input (a short batch, a long length axis)",
            (2, 3, 6),
            hint="Sum and average over axes 0 and 2, the same two axes whatever their lengths.",
        ),
        case(
            f"a (12, 3) input with mean {LARGE_OFFSET:g} and standard deviation 1",
            (12, 3),
            mean=LARGE_OFFSET,
            std=1.0,
            hint="Compute the variance in two passes, mean((x - mean)**2).",
        ),
        case(
            "eps=0.1 instead of the default",
            (5, 3),
            eps=0.1,
            hint="Use the eps argument, as in the forward pass.",
        ),
    ]


def _eval_copies(batch_norm, case: Case) -> list[bool]:
    """Whether, in eval mode, the returned estimates are the arrays passed in (not copies)."""
    x, gamma, beta, running_mean, running_var, _ = (copied(a) for a in case.args)
    _, new_mean, new_var = batch_norm(x, gamma, beta, running_mean, running_var, False)
    return [
        isinstance(new, np.ndarray) and np.shares_memory(new, given)
        for new, given in ((new_mean, running_mean), (new_var, running_var))
    ]


def observe_batch_norm(batch_norm, seed: int = 0) -> list[Observation]:
    """Observe ``batch_norm`` on each case of :func:`batch_norm_cases`, then the norm ops of
    torch's it called, then whether in eval mode it returns the running estimates themselves
    instead of copies (last observation)."""
    cases = batch_norm_cases(seed)
    eval_case = next(case for case in cases if not case.args[5])
    return [
        *observe_cases(batch_norm, cases, record_norm_calls=True),
        observe(_eval_copies, (batch_norm, eval_case), {}),
    ]


def judge_batch_norm(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``batch_norm`` results with the reference; name known mistakes."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    cases = batch_norm_cases(seed)
    expect_observations("batch_norm", observations, len(cases) + 2)
    *calls, aliasing = observations
    calls = without_norm_calls("batch_norm", calls, len(cases), True, NUMPY_MATH)
    cases = explained(cases, calls)
    for case, observation, outputs in judged_calls("batch_norm", cases, calls, ARG_NAMES):
        compare_tuple(
            observation,
            outputs,
            norms.batch_norm(*case.args, **case.kwargs),
            name="batch_norm",
            names=OUTPUTS,
            case=case,
            mistakes=mistakes.BATCH_NORM_MISTAKES,
            mistake_args=(*case.args, case.kwargs["momentum"], case.kwargs["eps"]),
        )
    _judge_eval_copies(aliasing)
    checked = [case.description for case in cases]
    return passed("batch_norm", [*checked, "in eval mode, returns copies of the running estimates"])


def _judge_eval_copies(observation: Observation) -> None:
    """The task asks for copies of the estimates in eval mode: the caller's arrays and the
    returned ones must not be one array (changing one would change the other)."""
    __tracebackhide__ = True
    if observation.error:
        fail(f"batch_norm, in eval mode, raised {observation.error}")
    conform(observation.value, ListOf(bool), "eval copies")
    for aliased, name in zip(observation.value, ("running_mean", "running_var"), strict=False):
        if aliased:
            fail(
                f"batch_norm, in eval mode, returns {name} itself, not a copy: the caller's "
                f"estimate and the returned one are the same array, so changing one changes "
                f"the other.\nHint: return {name}.copy(), as the task asks."
            )


def check_batch_norm(batch_norm, seed: int = 0) -> None:
    """Check a learner's ``batch_norm(x, gamma, beta, running_mean, running_var, training)``."""
    __tracebackhide__ = True
    run_check("check_batch_norm", observe_batch_norm, judge_batch_norm, batch_norm, seed)


def observe_batch_norm_backward(batch_norm_backward, seed: int = 0) -> list[Observation]:
    """Observe ``batch_norm_backward`` on each case of :func:`batch_norm_backward_cases`."""
    return observe_cases(
        batch_norm_backward, batch_norm_backward_cases(seed), record_norm_calls=True
    )


def judge_batch_norm_backward(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``batch_norm_backward`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    cases = explained(batch_norm_backward_cases(seed), observations, x_index=1)
    known = [
        mistakes.BATCH_NORM_BACKWARD_MISTAKES,
        mistakes.BATCH_NORM_BACKWARD_DGAMMA_MISTAKES,
        (),
    ]
    return judge_backward(
        "batch_norm_backward",
        cases,
        observations,
        norms.batch_norm_backward,
        GRADIENTS,
        known,
        norm_calls=True,
    )


def check_batch_norm_backward(batch_norm_backward, seed: int = 0) -> None:
    """Check a learner's ``batch_norm_backward(dy, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)``."""
    __tracebackhide__ = True
    run_check(
        "check_batch_norm_backward",
        observe_batch_norm_backward,
        judge_batch_norm_backward,
        batch_norm_backward,
        seed,
    )


# ----------------------------------------------------------------------------------------------
# The torch module BatchNorm1d(num_features, eps=1e-5, momentum=0.1, affine=True,
#                              track_running_stats=True)

CHANNELS = 4
AFFINE = ("weight", "bias")
# configuration name: the constructor call the check makes. Every option torch's BatchNorm1d takes.
MODULE_CONFIGS = {
    "default": ModuleConfig((CHANNELS,), {}, AFFINE, (CHANNELS,)),
    "momentum=0.3, eps=0.01": ModuleConfig(
        (CHANNELS,), {"momentum": 0.3, "eps": 0.01}, AFFINE, (CHANNELS,)
    ),
    "momentum=None": ModuleConfig((CHANNELS,), {"momentum": None}, AFFINE, (CHANNELS,)),
    "affine=False": ModuleConfig((CHANNELS,), {"affine": False}),
    "track_running_stats=False": ModuleConfig(
        (CHANNELS,), {"track_running_stats": False}, AFFINE, (CHANNELS,)
    ),
}
# what each option means, said when a scenario of that configuration fails
CONFIG_HINTS = {
    "momentum=None": "momentum=None means a cumulative moving average: after adding 1 to "
    "num_batches_tracked, the new batch weighs 1 / num_batches_tracked.",
    "affine=False": "affine=False: no learnable weight and bias (register them as None, so that "
    "state_dict has neither); y is x_hat itself.",
    "track_running_stats=False": "track_running_stats=False: no running estimates (running_mean, "
    "running_var and num_batches_tracked are None), so eval mode normalizes with the batch's own "
    "statistics too.",
}
MODULE_TASK = ModuleTask(
    name="BatchNorm1d",
    torch_class="torch's BatchNorm",
    signature="torch.nn.BatchNorm1d(num_features, eps=1e-5, momentum=0.1, affine=True, "
    "track_running_stats=True)",
    state_hint="parameters weight and bias; buffers (register_buffer) running_mean, "
    "running_var and num_batches_tracked (torch.tensor(0, dtype=torch.long)); with "
    "affine=False, register_parameter('weight', None) and ('bias', None); with "
    "track_running_stats=False, register_buffer(name, None) for each buffer.",
    math_hint="mean, var, sqrt",
)
# the configurations whose scenarios the numpy catalogue of mistakes can name
NAMED_CONFIGS = ("default", "momentum=0.3, eps=0.01")
# one step of the scenario: (description, module.training, torch.is_grad_enabled(), input shape)
SCENARIO = (
    ("a (8, 4) batch in training mode", True, True, (8, CHANNELS)),
    ("a 3-D (N, C, L) = (5, 4, 3) batch in training mode", True, True, (5, CHANNELS, 3)),
    ("a (6, 4) batch in training mode under torch.no_grad()", True, False, (6, CHANNELS)),
    ("a (3, 4) batch in eval mode", False, True, (3, CHANNELS)),
    ("a batch of one, (1, 4), in eval mode under torch.no_grad()", False, False, (1, CHANNELS)),
)
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
# One step each, from the loaded state: name -> (description, constructor keyword arguments, how
# the module meets a half-precision input or None, mean and standard deviation of x, its shape).
# Half precision meets a module whose parameters and buffers stay float32 (as under autocast):
# there torch 2.13 computes in float32 and returns the input's dtype. (A module converted with
# .to(torch.bfloat16) is another matter: there torch's CPU BatchNorm rounds the batch statistics
# to bfloat16, 0.3 off the float32 result for a batch with mean 100; measured.)
# Every step is in training mode but "eps0": torch 2.13 refuses eps=0 in training mode
# ("batch_norm eps must be positive during training"), so it is an eval step, with the loaded
# running_var scaled by EPS0_VAR_SCALE. The input "noncontiguous" gets is a transposed view.
EPS0_VAR_SCALE = 1e-6
EXTRA_STEPS = {
    "eps0": (
        "a (3, 4) batch in eval mode with eps=0 and running_var about 1e-6 (loaded)",
        {"eps": 0.0},
        None,
        (1.0, 1e-3),
        (3, CHANNELS),
    ),
    "noncontiguous": (
        "a non-contiguous (N, C, L) = (5, 4, 3) float64 batch (a transposed view) in training mode",
        {},
        None,
        (1.0, 2.0),
        (5, CHANNELS, 3),
    ),
    "bfloat16": (
        None,
        {},
        LowPrecisionInput(
            "bfloat16",
            "a bfloat16 (8, 4) batch with mean 100 and standard deviation 1 in training mode, "
            "to a module whose parameters and buffers stay float32 (as under autocast)",
            mixed=True,
        ),
        (100.0, 1.0),
        (8, CHANNELS),
    ),
    "float16_mixed": (
        None,
        {},
        LowPrecisionInput(
            "float16",
            "a float16 (8, 4) batch in training mode to a module whose parameters and buffers "
            "stay float32 (as under autocast)",
            mixed=True,
        ),
        (1.0, 2.0),
        (8, CHANNELS),
    ),
}
STATE_KEYS = ("weight", "bias", *BUFFERS)


def scenario_steps(config: str) -> list[int]:
    """The steps of :data:`SCENARIO` a configuration runs: without running estimates, eval mode
    uses batch statistics, which a batch of one value per channel does not have."""
    tracks = MODULE_CONFIGS[config].kwargs.get("track_running_stats", True)
    return [i for i, (_, _, _, shape) in enumerate(SCENARIO) if tracks or np.prod(shape) > shape[1]]


def module_state(seed: int = 0) -> dict:
    """The state_dict loaded before the scenario: away from torch's initial values."""
    rng = np.random.default_rng(seed + 22)
    return {
        "weight": rng.uniform(0.5, 2.0, CHANNELS),
        "bias": rng.normal(size=CHANNELS),
        "running_mean": rng.normal(size=CHANNELS),
        "running_var": rng.uniform(0.5, 2.0, CHANNELS),
        "num_batches_tracked": np.array(3),
    }


def scenario_inputs(seed: int = 0) -> list[np.ndarray]:
    """The float64 input of each step of :data:`SCENARIO`, in order (shapes as listed there)."""
    rng = np.random.default_rng(seed + 23)
    return [rng.normal(1.0, 2.0, shape) for _, _, _, shape in SCENARIO]


def extra_inputs(seed: int = 0) -> dict:
    """The float64 input of each of :data:`EXTRA_STEPS` (for "noncontiguous", of the transposed
    shape (N, L, C))."""
    rng = np.random.default_rng(seed + 25)
    drawn = {}
    for name, (_, _, _, (mean, std), shape) in EXTRA_STEPS.items():
        shape = (shape[0], shape[2], shape[1]) if name == "noncontiguous" else shape
        drawn[name] = rng.normal(mean, std, shape)
    return drawn


def extra_state(seed: int, name: str) -> dict:
    """The state_dict (as tensors) loaded before the step ``name`` of :data:`EXTRA_STEPS`."""
    import torch

    state = module_state(seed)
    if name == "eps0":
        state["running_var"] = state["running_var"] * EPS0_VAR_SCALE
    return {k: torch.from_numpy(v.copy()) for k, v in state.items()}


def _grad_fn(value) -> bool:
    """Whether ``value`` is a tensor that autograd recorded (it has a grad_fn)."""
    return getattr(value, "grad_fn", None) is not None


def observe_batch_norm_module(cls, seed: int = 0, forbid_torch_norms: bool = True) -> dict:
    """Run a BatchNorm1d class through the scenario; record outputs and buffers as plain data.

    With ``forbid_torch_norms`` (for every module but torch's own, the reference), the names of
    torch's norm ops that the module called are recorded under :data:`NORM_CALLS`.
    """
    import torch

    state = {k: torch.from_numpy(v.copy()) for k, v in module_state(seed).items()}

    def loaded(config):
        chosen = MODULE_CONFIGS[config]
        module = chosen.build(cls).double()
        keys = chosen.build(torch.nn.BatchNorm1d).state_dict()  # torch's, for this config
        module.load_state_dict({k: v for k, v in state.items() if k in keys})
        return module

    def run_scenario(config):
        module, records, inputs = loaded(config), [], scenario_inputs(seed)
        for step in scenario_steps(config):
            _, training, grad_enabled, _ = SCENARIO[step]
            x = inputs[step]
            module.train(training)
            with torch.set_grad_enabled(grad_enabled):
                y = module(torch.from_numpy(x.copy()))
            buffers = {k: plain(getattr(module, k, None)) for k in BUFFERS}
            records.append({"y": plain(y), **buffers})
        return records

    def gradients():
        module = loaded("default").train()
        x = torch.from_numpy(scenario_inputs(seed)[0].copy()).requires_grad_(True)
        upstream = torch.from_numpy(np.random.default_rng(seed + 24).normal(size=tuple(x.shape)))
        (module(x) * upstream).sum().backward()
        grads = {"input": x.grad, "weight": module.weight.grad, "bias": module.bias.grad}
        return {k: None if g is None else g.numpy() for k, g in grads.items()}

    def buffers():  # after a training step whose input requires grad, gradients on
        module = loaded("default").train()
        x = torch.from_numpy(scenario_inputs(seed)[0].copy()).requires_grad_(True)
        module(x)
        registered = dict(module.named_buffers())
        parameters = dict(module.named_parameters())
        return {
            k: [
                k in registered,
                k in parameters,
                getattr(getattr(module, k, None), "grad_fn", None) is not None,
            ]
            for k in BUFFERS
        }

    def extra_step(name):
        _, kwargs, spec, _, _ = EXTRA_STEPS[name]
        module = cls(CHANNELS, **kwargs).double()
        module.load_state_dict(extra_state(seed, name))
        module.train(name != "eps0")
        x = torch.from_numpy(extra_inputs(seed)[name].copy())
        if name == "noncontiguous":
            return module(x.transpose(1, 2))
        if spec is None:
            return module(x)
        module = module.float() if spec.mixed else module.to(getattr(torch, spec.dtype))
        return half_output(module(x.to(getattr(torch, spec.dtype))))

    def round_trip():  # after a training step; the judge loads it into torch.nn.BatchNorm1d
        module = loaded("default").train()
        module(torch.from_numpy(scenario_inputs(seed)[0].copy()))
        return recorded_state(module)

    torch_class = torch.nn.modules.batchnorm._BatchNorm
    observations = {}
    with recording_torch_norms(forbid_torch_norms) as calls:
        for config in MODULE_CONFIGS:
            observations[f"describe:{config}"] = observe(
                lambda c=config: describe_module(MODULE_CONFIGS[c].build(cls), torch_class),
                (),
                {},
            )
            observations[f"load:{config}"] = observe(lambda c=config: loaded(c) is not None, (), {})
            observations[f"scenario:{config}"] = observe(run_scenario, (config,), {})
        observations["gradients"] = observe(gradients, (), {})
        observations["buffers"] = observe(buffers, (), {})
        observations["round_trip"] = observe(round_trip, (), {})
        for name in EXTRA_STEPS:
            observations[f"step:{name}"] = observe(extra_step, (name,), {})
    observations[NORM_CALLS] = norm_calls_observation(calls)
    return observations


def _module_mistakes(grad_enabled: bool):
    """The numpy catalogue, plus deciding the mode by torch.is_grad_enabled()."""
    from addnorm_lib.reference import mistakes, norms

    def mode_from_grad(x, gamma, beta, running_mean, running_var, training, momentum, eps):
        return norms.batch_norm(
            x, gamma, beta, running_mean, running_var, grad_enabled, momentum, eps
        )

    by_grad = mistakes.Mistake(
        "mode_from_grad_enabled",
        "Your module decides between training and eval from torch.is_grad_enabled() (or "
        "requires_grad): under torch.no_grad() it must still train when module.training is True, "
        "and with gradients on it must use the running estimates when module.training is False.",
        "Branch on self.training, which model.train() and model.eval() set.",
        mode_from_grad,
    )
    return (*mistakes.BATCH_NORM_MISTAKES, by_grad)


# What each step of the scenario records
STEP = dict.fromkeys(("y", *BUFFERS), PLAIN)
# For each buffer: [a registered buffer, a parameter, has a grad_fn after a training step]
BUFFER_FACTS = MapOf(ListOf(bool))
# What only the kernel knows: a record can fail on it, never earn a point by it
UNVERIFIED = {
    "check_batch_norm": ("in eval mode, batch_norm returns copies of the running estimates",),
    "check_batch_norm_module": (
        "BatchNorm1d subclasses torch.nn.Module, not torch's BatchNorm",
        NOT_CALLING_TORCH_NORMS,
        "running_mean, running_var and num_batches_tracked are buffers, not parameters, and "
        "their updates are not recorded by autograd",
    ),
}


def _judge_buffers(observation: Observation, reference: Observation) -> None:
    """Running statistics are buffers (saved, moved with .to(), never trained), updated outside
    autograd (else every step's graph is kept alive through them)."""
    __tracebackhide__ = True
    if observation.error:
        fail(
            f"BatchNorm1d, on a training step whose input requires grad, raised {observation.error}"
        )
    conform(observation.value, BUFFER_FACTS, "buffers")
    for name in BUFFERS:
        is_buffer, is_parameter, has_grad_fn = (observation.value.get(name) or [False] * 3)[:3]
        if is_parameter:
            fail(
                f"BatchNorm1d registers {name} as a Parameter: an optimizer would train it and "
                f"parameters() lists it.\nHint: self.register_buffer({name!r}, ...)."
            )
        if not is_buffer:
            fail(
                f"BatchNorm1d's {name} is not a registered buffer, so state_dict, .to() and "
                ".double() do not handle it as torch's.\nHint: "
                f"self.register_buffer({name!r}, ...)."
            )
        if has_grad_fn:
            fail(
                f"After a training step whose input requires grad, BatchNorm1d's {name} has a "
                "grad_fn: its update was recorded by autograd, so each step's graph stays alive "
                "through it.\nHint: update the running statistics under torch.no_grad(), or "
                "from the detached batch statistics (mean.detach())."
            )
    assert reference.value == {k: [True, False, False] for k in BUFFERS}


def _judge_scenario(config: str, records, reference, seed: int) -> None:
    __tracebackhide__ = True
    state = module_state(seed)
    kwargs = {"momentum": 0.1, "eps": 1e-5, **MODULE_CONFIGS[config].kwargs}
    previous = {k: state[k] for k in ("running_mean", "running_var")}
    inputs = scenario_inputs(seed)
    chosen = [(SCENARIO[i], inputs[i]) for i in scenario_steps(config)]
    steps = zip(chosen, records, reference, strict=True)
    for ((description, training, grad_enabled, _), x), mine, theirs in steps:
        case = Case(
            f"{description} ({config_call(config)} loaded "
            "from a torch state_dict, after the steps before it)",
            (),
            hint=CONFIG_HINTS.get(config, ""),
        )
        if theirs["running_mean"] is None:  # no running estimates in this configuration
            for key in BUFFERS:
                if mine[key] is not None:
                    fail(
                        f"BatchNorm1d, on {case.description}: {key} should be None, as in "
                        f"torch.\nHint: {case.hint}"
                    )
            compare(mine["y"], np.asarray(theirs["y"]), name="BatchNorm1d", what="y", case=case)
            continue
        mistake_args = (
            x,
            state["weight"],
            state["bias"],
            previous["running_mean"],
            previous["running_var"],
            training,
            kwargs["momentum"] if kwargs["momentum"] is not None else 0.1,
            kwargs["eps"],
        )
        if not training:
            for key in ("running_mean", "running_var"):
                if not np.allclose(np.asarray(mine[key], dtype=float), previous[key]):
                    fail(
                        f"BatchNorm1d, on {case.description}: your module updates the running "
                        f"estimates in eval mode ({key} changed). In eval mode every buffer must "
                        "stay as it is.\nHint: update running_mean, running_var and "
                        "num_batches_tracked only when self.training is True."
                    )
        outputs = ("y", "running_mean", "running_var")
        # in eval mode, a changed running estimate is the clearer message: check it first
        for key in outputs if training else outputs[::-1]:
            index = outputs.index(key)
            compare(
                mine[key],
                np.asarray(theirs[key]),
                name="BatchNorm1d",
                what=key,
                case=case,
                mistakes=_module_mistakes(grad_enabled) if config in NAMED_CONFIGS else (),
                mistake_args=mistake_args,
                pick=lambda out, i=index: out[i],
            )
        if mine["num_batches_tracked"] is None or int(
            np.asarray(mine["num_batches_tracked"])
        ) != int(np.asarray(theirs["num_batches_tracked"])):
            fail(
                f"BatchNorm1d, on {case.description}: num_batches_tracked is "
                f"{mine['num_batches_tracked']}, torch has {theirs['num_batches_tracked']}.\n"
                "Hint: add 1 to it on every forward pass in training mode, and only then."
            )
        previous = {k: np.asarray(theirs[k]) for k in ("running_mean", "running_var")}


def _in_input_dtype(name: str, seed: int) -> list[np.ndarray]:
    """BatchNorm's training-mode y computed in the dtype of the step ``name``'s input (float64
    values), the variance in two passes around the rounded mean or by torch.var: what a module
    that never upcasts returns."""
    import torch

    spec = EXTRA_STEPS[name][2]
    dtype = getattr(torch, spec.dtype)
    state = {k: torch.from_numpy(v).float() for k, v in module_state(seed).items()}
    x = torch.from_numpy(extra_inputs(seed)[name]).to(dtype)
    mean = x.mean(0)
    variants = []
    for var in (((x - mean) ** 2).mean(0), x.var(0, correction=0)):
        y = (x - mean) / torch.sqrt(var + 1e-5) * state["weight"] + state["bias"]
        variants.append(y.to(dtype).double().numpy())
    return variants


def _judge_extra_steps(observations: dict, reference: dict, seed: int) -> list[str]:
    """Judge the one-step observations of :data:`EXTRA_STEPS`; return what they checked."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes

    inputs = extra_inputs(seed)
    for name, (description, kwargs, spec, _, _) in EXTRA_STEPS.items():
        state = {k: v.numpy() for k, v in extra_state(seed, name).items()}
        observation = observations[f"step:{name}"]
        where = description or spec.description
        if observation.not_implemented:
            fail("BatchNorm1d.forward is not implemented yet: replace the stub with your code.")
        if observation.error:
            explanation = error_explanation(observation.error, CHANNELS)
            if explanation is None and name == "noncontiguous":
                explanation = NON_CONTIGUOUS_HINT
            hint = f"\nHint: {explanation}" if explanation else ""
            fail(f"BatchNorm1d.forward raised {observation.error} on {where}{hint}")
        expected = reference[f"step:{name}"].value
        if spec is not None:
            judge_low_precision(
                observation, expected, spec, "BatchNorm1d", _in_input_dtype(name, seed)
            )
            continue
        eps = kwargs.get("eps", 1e-5)
        stats = (state["running_mean"], state["running_var"], name != "eps0", 0.1, eps)
        compare(
            observation.value,
            np.asarray(expected),
            name="BatchNorm1d",
            what="y",
            case=Case(where, (), language="torch"),
            mistakes=mistakes.BATCH_NORM_MISTAKES if name == "eps0" else (),
            mistake_args=(inputs[name], state["weight"], state["bias"], *stats),
            pick=lambda out: out[0],
            type_name=observation.type_name,
        )
    return [
        "eps=0 means no eps",
        "takes a non-contiguous input (a transposed view)",
        "bfloat16 and float16 input to a module with float32 parameters and buffers (as under "
        "autocast): returns the input's dtype, within 2 machine epsilons of torch's (computed in "
        "float32)",
    ]


def config_call(config: str) -> str:
    """How a message names the constructor call of ``config``: ``BatchNorm1d(4, affine=False)``."""
    return MODULE_CONFIGS[config].call("BatchNorm1d")


def judge_batch_norm_module(observations: dict, seed: int = 0) -> str:
    """Compare a recorded BatchNorm1d with torch.nn.BatchNorm1d run through the same scenario.

    In the order of :func:`addnorm_lib.checks.layernorm.judge_layer_norm_module`: constructed and
    hand-written, then the numbers, then the state_dict's structure, then the round trip.
    """
    __tracebackhide__ = True
    import torch

    reference = observe_batch_norm_module(torch.nn.BatchNorm1d, seed, forbid_torch_norms=False)
    expect_keys("BatchNorm1d", observations, reference)

    def construction(config):
        return judge_construction(
            observations[f"describe:{config}"], MODULE_TASK, config_call(config)
        )

    described = {"default": construction("default")}
    judge_norm_calls(observations[NORM_CALLS], "BatchNorm1d", MODULE_TASK.math_hint)
    for config in MODULE_CONFIGS:
        described[config] = construction(config)
        hint = f"\nHint: {CONFIG_HINTS[config]}" if config in CONFIG_HINTS else ""
        load = observations[f"load:{config}"]
        if load.error:
            expected = reference[f"describe:{config}"].value
            judge_state(
                described[config],
                expected,
                MODULE_TASK,
                config_call(config),
                CONFIG_HINTS.get(config),
            )
            fail(
                f"{config_call(config)}.load_state_dict(torch.nn.BatchNorm1d's) raised "
                f"{load.error}{hint}"
            )
        observation = observations[f"scenario:{config}"]
        if observation.not_implemented:
            fail("BatchNorm1d.forward is not implemented yet: replace the stub with your code.")
        if observation.error:
            explanation = error_explanation(observation.error, CHANNELS)
            hint = f"\nHint: {explanation}" if explanation else hint
            fail(
                f"{config_call(config)}, loaded from a torch state_dict and run in training and "
                f"eval mode, raised {observation.error}{hint}"
            )
        conform(observation.value, ListOf(STEP), "scenario")
        if len(observation.value) != len(scenario_steps(config)):
            incomplete("BatchNorm1d")
        _judge_scenario(config, observation.value, reference[f"scenario:{config}"].value, seed)
    checked = [
        "loads torch's state_dict and matches it over training steps (2-D and 3-D, "
        "under no_grad too) and in eval mode, outputs and running statistics, with every "
        "constructor option: momentum=None, affine=False, track_running_stats=False",
        "follows module.training, not torch.is_grad_enabled()",
    ]
    judge_gradients(
        observations["gradients"],
        reference["gradients"],
        "BatchNorm1d",
        "an (8, 4) batch in training mode",
    )
    checked.append("gradients of input, weight and bias match torch's in training mode")
    checked.extend(_judge_extra_steps(observations, reference, seed))
    _judge_buffers(observations["buffers"], reference["buffers"])
    checked.append("running statistics are buffers, updated outside autograd")
    for config, info in described.items():
        judge_structure(
            info, reference[f"describe:{config}"].value, MODULE_TASK, config_call(config)
        )
    checked.append(
        "state_dict keys and shapes, parameters, buffers (with num_batches_tracked) and initial "
        "values as torch's"
    )
    judge_round_trip(
        observations["round_trip"], torch.nn.BatchNorm1d(CHANNELS, dtype=torch.float64)
    )
    checked.append("its state_dict loads into torch.nn.BatchNorm1d")
    return passed("BatchNorm1d", checked)


def check_batch_norm_module(cls, seed: int = 0) -> None:
    """Check a learner's torch ``BatchNorm1d`` class against ``torch.nn.BatchNorm1d``."""
    __tracebackhide__ = True
    run_check(
        "check_batch_norm_module", observe_batch_norm_module, judge_batch_norm_module, cls, seed
    )


JUDGES = {
    "check_batch_norm": judge_batch_norm,
    "check_batch_norm_backward": judge_batch_norm_backward,
    "check_batch_norm_module": judge_batch_norm_module,
}
