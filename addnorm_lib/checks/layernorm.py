"""Checkers for the LayerNorm exercise: ``layer_norm``, ``layer_norm_backward`` and a torch module.

Each check has two halves, *observe* and *judge*. The observing half runs the learner's code on
inputs drawn from a seed and records what happened as plain data (:class:`Observation`). The judge
draws the same inputs, observes the reference the same way, compares, and raises
:class:`CheckFailed` with a specific message at the first problem. A learner's self-check does both
in the notebook; when grading, the kernel only observes and the grader judges in its own process
(see ``_record``). The references (``addnorm_lib.reference.norms``,
``addnorm_lib.reference.mistakes``) are imported by judges only: a graded kernel cannot see them.
"""

from dataclasses import dataclass

import numpy as np

from addnorm_lib.checks._core import (
    Case,
    Observation,
    compare,
    expect_keys,
    fail,
    judge_backward,
    judge_gradients,
    judge_output,
    observe,
    observe_cases,
    passed,
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

# float32 input whose mean is 1e3 times its spread: a two-pass variance stays within ~1e-4 of the
# float64 result, E[x^2] - E[x]^2 is off by ~0.1 or more (measured for 64 to 768 features).
SQUARE_HINT = (
    "Keep the reduced axis (keepdims=True): when N equals C, a statistic of shape (N,) "
    "broadcasts along the features instead of the rows, without an error."
)
LARGE_OFFSET = 1e3
FLOAT32_ATOL = 2e-3


def _affine(rng, features, dtype=np.float64):
    """gamma and beta away from 1 and 0, so that forgetting or swapping them shows."""
    gamma = rng.uniform(0.5, 2.0, features).astype(dtype)  # (C,)
    beta = rng.normal(0.0, 1.0, features).astype(dtype)  # (C,)
    return gamma, beta


# ----------------------------------------------------------------------------------------------
# layer_norm(x, gamma, beta, eps) -> y


def layer_norm_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``layer_norm(x, gamma, beta, eps)``, ordered from the simplest."""
    rng = np.random.default_rng(seed)
    batch_axis_hint = "LayerNorm reduces over the last axis of x, whatever its leading shape."
    shape_hint = (
        "Your code must work for any number of leading axes: reduce with axis=-1 and "
        "keepdims=True, so that the statistics broadcast against x."
    )

    def case(description, x, eps=1e-5, **options):
        gamma, beta = _affine(rng, x.shape[-1], x.dtype)
        return Case(description, (x, gamma, beta), {"eps": eps}, **options)

    nearly_constant = rng.normal(3.0, 1.0, (3, 8))
    nearly_constant[1] = 3.0 + 1e-3 * rng.normal(size=8)  # variance ~1e-6, smaller than eps
    offset = (LARGE_OFFSET + rng.normal(size=(4, 256))).astype(np.float32)
    return [
        case(
            "a 2-D (N, C) = (4, 6) float64 input",
            rng.normal(1.0, 2.0, (4, 6)),
            hint=batch_axis_hint,
        ),
        case(
            "a 3-D (B, T, C) = (2, 3, 5) float64 input",
            rng.normal(-1.0, 3.0, (2, 3, 5)),
            hint=shape_hint,
        ),
        case("a batch of one, shape (1, 7)", rng.normal(size=(1, 7)), hint=batch_axis_hint),
        case(
            "eps=0.1 instead of the default",
            rng.normal(size=(3, 4)),
            eps=0.1,
            hint="Use the eps argument, inside the square root.",
        ),
        case(
            "rows that are nearly constant (variance below eps)",
            nearly_constant,
            hint="eps belongs inside the square root: sqrt(var + eps).",
        ),
        case(
            "a single feature, shape (3, 1): x_hat is 0, so y = beta",
            rng.normal(size=(3, 1)),
            hint="With one feature the variance is 0: divide by C, not C - 1.",
        ),
        case(
            f"float32 input with mean {LARGE_OFFSET:g} and standard deviation 1, shape (4, 256)",
            offset,
            hint="Compute the variance in two passes, mean((x - mean)**2): E[x^2] - E[x]^2 "
            "cancels catastrophically in float32.",
            atol=FLOAT32_ATOL,
            rtol=0.0,
        ),
        case(
            "a square (N, C) = (5, 5) input (N equals C)",
            rng.normal(size=(5, 5)),
            hint=SQUARE_HINT,
        ),
        case(
            "eps=0 with rows of variance about 1e-6",
            rng.normal(1.0, 1e-3, (3, 8)),
            eps=0.0,
            hint="eps=0 is a valid value: add the eps you are given, whatever it is.",
        ),
    ]


def observe_layer_norm(layer_norm, seed: int = 0) -> list[Observation]:
    """Run a learner's ``layer_norm`` on every case; record what it did."""
    return observe_cases(layer_norm, layer_norm_cases(seed), record_norm_calls=True)


def judge_layer_norm(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``layer_norm`` results with the reference (float64, cast back).

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    cases = layer_norm_cases(seed)
    return judge_output(
        "layer_norm",
        cases,
        observations,
        norms.layer_norm,
        mistakes.LAYER_NORM_MISTAKES,
        ("x", "gamma", "beta"),
        norm_calls=True,
    )


def check_layer_norm(layer_norm, seed: int = 0) -> None:
    """Check a learner's ``layer_norm(x, gamma, beta, eps=1e-5) -> y`` (numpy).

    Raises CheckFailed naming the first input it gets wrong and, where it can tell, the mistake.
    """
    __tracebackhide__ = True
    run_check("check_layer_norm", observe_layer_norm, judge_layer_norm, layer_norm, seed)


# ----------------------------------------------------------------------------------------------
# layer_norm_backward(dy, x, gamma, eps) -> (dx, dgamma, dbeta)


def last_axis_backward_cases(rng, default_eps: float, parameter_hint: str) -> list[Case]:
    """Inputs ``(dy, x, gain)`` for the backward pass of a norm over the last axis (LN, RMSNorm).

    ``parameter_hint`` is said when the 3-D case fails: how the parameter gradients are summed.
    """

    def case(description, shape, eps=default_eps, hint="", params_hint=""):
        x, dy = rng.normal(0.5, 2.0, shape), rng.normal(size=shape)
        gain = rng.uniform(0.5, 2.0, shape[-1])  # (C,), away from 1
        # a hint about the parameters' gradients is said for them only, never for a wrong dx
        parameters = ("dgamma", "dbeta", "dweight")
        per_output = dict.fromkeys(parameters, params_hint) if params_hint else {}
        return Case(description, (dy, x, gain), {"eps": eps}, hint=hint, output_hints=per_output)

    return [
        case("a 2-D (N, C) = (4, 6) float64 input", (4, 6)),
        case("a 3-D (B, T, C) = (2, 3, 5) float64 input", (2, 3, 5), params_hint=parameter_hint),
        case(
            "eps=0.1 instead of the default",
            (3, 4),
            eps=0.1,
            hint="Use the eps argument, as in the forward pass.",
        ),
        case("a square (N, C) = (5, 5) input (N equals C)", (5, 5), hint=SQUARE_HINT),
    ]


def layer_norm_backward_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``layer_norm_backward(dy, x, gamma, eps)``."""
    hint = (
        "dgamma and dbeta have gamma's shape (C,): sum over every axis except the last, "
        "axis=tuple(range(x.ndim - 1))."
    )
    return last_axis_backward_cases(np.random.default_rng(seed + 1), 1e-5, hint)


def observe_layer_norm_backward(layer_norm_backward, seed: int = 0) -> list[Observation]:
    """Observe ``layer_norm_backward`` on each case of :func:`layer_norm_backward_cases`."""
    return observe_cases(
        layer_norm_backward, layer_norm_backward_cases(seed), record_norm_calls=True
    )


def judge_layer_norm_backward(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``layer_norm_backward`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    known = [
        mistakes.LAYER_NORM_BACKWARD_DX_MISTAKES,
        mistakes.LAYER_NORM_BACKWARD_DGAMMA_MISTAKES,
        (),
    ]
    cases = layer_norm_backward_cases(seed)
    return judge_backward(
        "layer_norm_backward",
        cases,
        observations,
        norms.layer_norm_backward,
        ("dx", "dgamma", "dbeta"),
        known,
        norm_calls=True,
    )


def check_layer_norm_backward(layer_norm_backward, seed: int = 0) -> None:
    """Check a learner's ``layer_norm_backward(dy, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)``."""
    __tracebackhide__ = True
    run_check(
        "check_layer_norm_backward",
        observe_layer_norm_backward,
        judge_layer_norm_backward,
        layer_norm_backward,
        seed,
    )


# ----------------------------------------------------------------------------------------------
# The torch module LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)
#
# The task asks for torch.nn.LayerNorm's constructor and parameter names, so that a state_dict
# moves between the two, and for the math written by hand. The check reads what the task asks
# for and nothing else: outputs, gradients, the state_dict, and the norm ops the module called;
# never attributes such as normalized_shape or eps, which a module may store as it likes.

BATCH, TIME, FEATURES = 2, 3, 5
AFFINE = ("weight", "bias")
# configuration name: the constructor call the check makes
MODULE_CONFIGS = {
    "default": ModuleConfig((FEATURES,), {}, AFFINE, (FEATURES,)),
    "eps": ModuleConfig((FEATURES,), {"eps": 0.1}, AFFINE, (FEATURES,)),
    "tuple": ModuleConfig(((TIME, FEATURES),), {}, AFFINE, (TIME, FEATURES)),
    "no_bias": ModuleConfig((FEATURES,), {"bias": False}, ("weight",), (FEATURES,)),
    "no_affine": ModuleConfig((FEATURES,), {"elementwise_affine": False}),
    "eps0": ModuleConfig((FEATURES,), {"eps": 0.0}, AFFINE, (FEATURES,)),
}
# half-precision inputs, in the order judged: name -> how the module and its input are made
HALF_INPUTS = {
    "bfloat16": LowPrecisionInput(
        "bfloat16",
        "a bfloat16 (B, T, C) input with mean 50 and standard deviation 1, module converted "
        "with .to(torch.bfloat16)",
    ),
    "float16_mixed": LowPrecisionInput(
        "float16",
        "a float16 (B, T, C) input to a module whose parameters stay float32 (as under autocast)",
        mixed=True,
    ),
}
HALF_OFFSET = 50.0
MODULE_TASK = ModuleTask(
    name="LayerNorm",
    torch_class="torch.nn.LayerNorm",
    signature="torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)",
    state_hint="register nn.Parameter attributes named exactly like torch's (weight, bias), of "
    "shape normalized_shape, or register_parameter('bias', None) when there is no bias.",
    math_hint="mean, subtraction, sqrt, ...",
)


@dataclass(frozen=True)
class ModuleInputs:
    """Every input of the module check, drawn from the seed before any learner code runs."""

    x: np.ndarray  # (B, T, C) float64
    x32: np.ndarray  # (B, T, C) float32, offset 10
    upstream: np.ndarray  # (B, T, C) gradient for the backward check
    x_eps: np.ndarray  # (4, C) for the eps=0.1 check
    parameters: dict  # configuration -> {parameter name: float64 array}
    x_eps0: np.ndarray  # (4, C), variance about 1e-6, for the eps=0 check
    x_transposed: np.ndarray  # (B, C, T): the module gets its transpose, a non-contiguous view
    x_half: dict  # HALF_INPUTS name -> (B, T, C) float64 values, cast to its dtype


def module_inputs(seed: int = 0) -> ModuleInputs:
    """Every input of the module check, drawn from ``seed`` (see :class:`ModuleInputs`)."""
    rng = np.random.default_rng(seed + 2)
    parameters = {
        name: {p: rng.uniform(0.5, 2.0, config.shape) for p in config.parameters}
        for name, config in MODULE_CONFIGS.items()
    }
    return ModuleInputs(
        x=rng.normal(1.0, 2.0, (BATCH, TIME, FEATURES)),
        x32=(rng.normal(size=(BATCH, TIME, FEATURES)) + 10).astype(np.float32),
        upstream=rng.normal(size=(BATCH, TIME, FEATURES)),
        x_eps=rng.normal(size=(4, FEATURES)),
        parameters=parameters,
        x_eps0=rng.normal(1.0, 1e-3, (4, FEATURES)),
        x_transposed=rng.normal(1.0, 2.0, (BATCH, FEATURES, TIME)),
        x_half={
            "bfloat16": rng.normal(HALF_OFFSET, 1.0, (BATCH, TIME, FEATURES)),
            "float16_mixed": rng.normal(1.0, 2.0, (BATCH, TIME, FEATURES)),
        },
    )


def config_call(config: str) -> str:
    """How a message names the constructor call of ``config``, e.g. ``LayerNorm(5, eps=0.1)``."""
    return MODULE_CONFIGS[config].call("LayerNorm")


def _recorded(step) -> Observation:
    """Run one step of the observation (no arguments) and record what it returned or raised."""
    return observe(step, (), {})


def observe_layer_norm_module(cls, seed: int = 0, forbid_torch_norms: bool = True) -> dict:
    """Exercise a LayerNorm class the way the judge needs; record every result as plain data.

    With ``forbid_torch_norms`` (for every module but torch's own, the reference), the names of
    torch's norm ops that the module called are recorded under :data:`NORM_CALLS`.
    """
    import torch

    inputs = module_inputs(seed)
    tensor = torch.from_numpy

    def construct(config):
        return MODULE_CONFIGS[config].build(cls)

    def loaded(config):
        module = construct(config).double()  # before loading: float64 weights stay float64
        state = {k: tensor(v) for k, v in inputs.parameters[config].items()}
        module.load_state_dict(state)
        return module

    def gradients():
        module = loaded("default")
        x = tensor(inputs.x.copy()).requires_grad_(True)
        (module(x) * tensor(inputs.upstream)).sum().backward()
        grads = {"input": x.grad, "weight": module.weight.grad, "bias": module.bias.grad}
        return {k: None if g is None else g.numpy() for k, g in grads.items()}

    def round_trip():  # the judge loads it into torch.nn.LayerNorm
        return recorded_state(loaded("default"))

    observations = {}
    with recording_torch_norms(forbid_torch_norms) as calls:
        for config in MODULE_CONFIGS:
            observations[f"describe:{config}"] = _recorded(
                lambda c=config: describe_module(construct(c), torch.nn.LayerNorm)
            )
            observations[f"load:{config}"] = _recorded(lambda c=config: loaded(c) is not None)
            x = {"eps": inputs.x_eps, "eps0": inputs.x_eps0}.get(config, inputs.x)
            observations[f"forward:{config}"] = _recorded(
                lambda c=config, x=x: loaded(c)(tensor(x.copy()))
            )
        observations["forward:float32"] = _recorded(
            lambda: loaded("default").float()(tensor(inputs.x32.copy()))
        )
        observations["forward:noncontiguous"] = _recorded(
            lambda: loaded("default")(tensor(inputs.x_transposed.copy()).transpose(1, 2))
        )
        for name, spec in HALF_INPUTS.items():
            observations[f"half:{name}"] = _recorded(
                lambda name=name, spec=spec: half_output(
                    _half_module(loaded("default"), spec)(
                        tensor(inputs.x_half[name]).to(getattr(torch, spec.dtype))
                    )
                )
            )
        observations["gradients"] = _recorded(gradients)
        observations["round_trip"] = _recorded(round_trip)
    observations[NORM_CALLS] = norm_calls_observation(calls)
    return observations


def _half_module(module, spec: LowPrecisionInput):
    """``module`` as the half-precision input ``spec`` meets it: converted, or float32."""
    import torch

    return module.float() if spec.mixed else module.to(getattr(torch, spec.dtype))


def _in_input_dtype(name: str, seed: int) -> list[np.ndarray]:
    """LayerNorm computed in the dtype of half-precision input ``name`` (float64 values), the
    variance in two passes around the rounded mean or by torch.var: what a module that never
    upcasts returns."""
    import torch

    inputs, spec = module_inputs(seed), HALF_INPUTS[name]
    dtype = getattr(torch, spec.dtype)
    x = torch.from_numpy(inputs.x_half[name]).to(dtype)
    weight, bias = (torch.from_numpy(p).to(dtype) for p in inputs.parameters["default"].values())
    mean = x.mean(-1, keepdim=True)
    variances = (((x - mean) ** 2).mean(-1, keepdim=True), x.var(-1, correction=0, keepdim=True))
    return [
        ((x - mean) / torch.sqrt(var + 1e-5) * weight + bias).double().numpy() for var in variances
    ]


def _reference_module_observations(seed):
    import torch

    return observe_layer_norm_module(torch.nn.LayerNorm, seed, forbid_torch_norms=False)


# What only the kernel knows: a record can fail on it, never earn a point by it
UNVERIFIED = {
    "check_layer_norm_module": (
        "LayerNorm subclasses torch.nn.Module, not torch.nn.LayerNorm",
        "its weight and bias are nn.Parameters",
        NOT_CALLING_TORCH_NORMS,
    )
}


def _forward_value(observations, reference, key, description, info) -> Observation:
    """The observation of one recorded forward pass, or CheckFailed if it raised (or if torch's
    state_dict did not load: ``info`` describes the learner's module of the same configuration,
    to say why)."""
    __tracebackhide__ = True
    config = key.split(":")[1] if key.split(":")[1] in MODULE_CONFIGS else "default"
    load = observations[f"load:{config}"]
    if load.error:
        expected = reference[f"describe:{config}"].value
        judge_state(info, expected, MODULE_TASK, config_call(config))
        fail(f"{config_call(config)}.load_state_dict(torch.nn.LayerNorm's) raised {load.error}")
    observation = observations[key]
    if observation.not_implemented:
        fail("LayerNorm.forward is not implemented yet: replace the stub with your code.")
    if observation.error:
        hint = f"\nHint: {NON_CONTIGUOUS_HINT}" if key == "forward:noncontiguous" else ""
        fail(f"LayerNorm.forward raised {observation.error} on {description}{hint}")
    return observation


def _judge_forward(observations, reference, key, description, info, atol=1e-8, mistake_args=()):
    """Compare one recorded forward pass with torch's (see :func:`_forward_value`)."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes

    observation = _forward_value(observations, reference, key, description, info)
    rtol = 1e-6 if atol < 1e-6 else 0.0
    case = Case(description, (), atol=atol, rtol=rtol, language="torch")
    compare(
        observation.value,
        reference[key].value,
        name="LayerNorm",
        what="the output",
        case=case,
        mistakes=mistakes.LAYER_NORM_MISTAKES if mistake_args else (),
        mistake_args=mistake_args,
        type_name=observation.type_name,
    )


def judge_layer_norm_module(observations: dict, seed: int = 0) -> str:
    """Compare a recorded LayerNorm module with torch.nn.LayerNorm observed the same way.

    In this order: that it is constructed and hand-written (an nn.Module, not a subclass of
    torch's, calling none of torch's norm ops); then the numbers (outputs, gradients, each
    constructor option), so that no question of structure hides a wrong number; then its
    state_dict (nn.Parameters, initial values) and that torch's LayerNorm loads it.
    """
    __tracebackhide__ = True
    import torch

    reference = _reference_module_observations(seed)
    expect_keys("LayerNorm", observations, reference)
    inputs = module_inputs(seed)
    checked = []

    def construction(config):
        return judge_construction(
            observations[f"describe:{config}"], MODULE_TASK, config_call(config)
        )

    def mistake_args(config, x):
        parameters = inputs.parameters[config]
        eps = MODULE_CONFIGS[config].kwargs.get("eps", 1e-5)
        return (x, parameters["weight"], parameters["bias"], eps)

    def forward(key, description, info, **options):
        _judge_forward(observations, reference, key, description, info, **options)

    shape = (BATCH, TIME, FEATURES)
    described = {"default": construction("default")}
    judge_norm_calls(observations[NORM_CALLS], "LayerNorm", MODULE_TASK.math_hint)
    default_args = mistake_args("default", inputs.x)
    forward(
        "forward:default",
        f"a (B, T, C) = {shape} float64 input",
        described["default"],
        mistake_args=default_args,
    )
    checked.append("loads a torch.nn.LayerNorm state_dict and matches it in float64")
    forward("forward:float32", "a float32 (B, T, C) input", described["default"], atol=1e-5)
    checked.append("keeps float32 as float32 and matches torch")
    forward(
        "forward:noncontiguous",
        f"a non-contiguous (B, T, C) = {shape} float64 input (a transposed view)",
        described["default"],
    )
    checked.append("takes a non-contiguous input (a transposed view)")
    for name, spec in HALF_INPUTS.items():
        key = f"half:{name}"
        _forward_value(observations, reference, key, spec.description, described["default"])
        judge_low_precision(
            observations[key], reference[key].value, spec, "LayerNorm", _in_input_dtype(name, seed)
        )
    checked.append(
        "bfloat16 input (module converted) and float16 input (parameters float32, as under "
        "autocast): returns the input's dtype, within 2 machine epsilons of torch's (computed "
        "in float32)"
    )

    judge_gradients(
        observations["gradients"], reference["gradients"], "LayerNorm", "a float64 (B, T, C) input"
    )
    checked.append("gradients of input, weight and bias match torch's")

    described["eps"] = construction("eps")
    eps_args = mistake_args("eps", inputs.x_eps)
    forward("forward:eps", "eps=0.1 with a (4, 5) input", described["eps"], mistake_args=eps_args)
    checked.append("uses its eps argument")
    described["eps0"] = construction("eps0")
    eps0_args = mistake_args("eps0", inputs.x_eps0)
    forward(
        "forward:eps0",
        "eps=0 with a (4, 5) input whose rows have variance about 1e-6",
        described["eps0"],
        mistake_args=eps0_args,
    )
    checked.append("eps=0 means no eps")
    described["tuple"] = construction("tuple")
    forward(
        "forward:tuple",
        f"normalized_shape=({TIME}, {FEATURES}) on a {inputs.x.shape} input "
        "(statistics over the last two axes)",
        described["tuple"],
    )
    checked.append("a tuple normalized_shape normalizes over the last len(normalized_shape) axes")
    for config in ("no_bias", "no_affine"):
        described[config] = construction(config)
        forward(
            f"forward:{config}", f"{config_call(config)} on a (B, T, C) input", described[config]
        )
    checked.append("bias=False and elementwise_affine=False as in torch")

    for config, info in described.items():
        judge_structure(
            info, reference[f"describe:{config}"].value, MODULE_TASK, config_call(config)
        )
    checked.append("state_dict keys and shapes, nn.Parameters and initial values as torch's")
    judge_round_trip(observations["round_trip"], torch.nn.LayerNorm(FEATURES, dtype=torch.float64))
    checked.append("its state_dict loads into torch.nn.LayerNorm")

    return passed("LayerNorm", checked)


def check_layer_norm_module(cls, seed: int = 0) -> None:
    """Check a learner's torch ``LayerNorm`` class against ``torch.nn.LayerNorm``.

    Outputs in float64 and float32 on (B, T, C) input after loading torch's state_dict, gradients
    against torch's, a custom eps, a tuple normalized_shape, bias=False and
    elementwise_affine=False; then the state_dict (parameter names, shapes, initial values) both
    ways; and that the module calls none of torch's own norm ops.
    """
    __tracebackhide__ = True
    run_check(
        "check_layer_norm_module", observe_layer_norm_module, judge_layer_norm_module, cls, seed
    )


JUDGES = {
    "check_layer_norm": judge_layer_norm,
    "check_layer_norm_backward": judge_layer_norm_backward,
    "check_layer_norm_module": judge_layer_norm_module,
}
