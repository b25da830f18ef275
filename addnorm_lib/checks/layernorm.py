"""Checkers for the LayerNorm exercise: ``layer_norm``, ``layer_norm_backward`` and a torch module.

Each check has two halves, *observe* and *judge*. The observing half runs the learner's code on
inputs drawn from a seed and records what happened as plain data (:class:`Observation`). The judge
draws the same inputs, observes the reference the same way, compares, and raises
:class:`CheckFailed` with a specific message at the first problem. A learner's self-check does both
in the notebook; when grading, the kernel only observes and the grader judges in its own process
(see ``_record``). The references (``addnorm_lib.reference.norms``,
``addnorm_lib.reference.mistakes``) are imported by judges only: a graded kernel cannot see them.
"""

import contextlib
from dataclasses import dataclass

import numpy as np

from addnorm_lib.checks._core import (
    PLAIN,
    Case,
    ListOf,
    MapOf,
    Observation,
    compare,
    conform,
    expect_keys,
    fail,
    judge_backward,
    judge_gradients,
    judge_output,
    observe,
    observe_cases,
    passed,
    plain,
)
from addnorm_lib.checks._record import run_check
from addnorm_lib.checks._torch import (
    NOT_CALLING_TORCH_NORMS,
    TORCH_NORM_CALLED,
    judge_round_trip,
    recorded_state,
    torch_norms_forbidden,
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
    ]


def observe_layer_norm(layer_norm, seed: int = 0) -> list[Observation]:
    """Run a learner's ``layer_norm`` on every case; record what it did."""
    return observe_cases(layer_norm, layer_norm_cases(seed))


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
    return observe_cases(layer_norm_backward, layer_norm_backward_cases(seed))


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

BATCH, TIME, FEATURES = 2, 3, 5
# configuration name: (constructor arguments, keyword arguments, parameter names, parameter shape)
MODULE_CONFIGS = {
    "default": ((FEATURES,), {}, ("weight", "bias"), (FEATURES,)),
    "eps": ((FEATURES,), {"eps": 0.1}, ("weight", "bias"), (FEATURES,)),
    "tuple": (((TIME, FEATURES),), {}, ("weight", "bias"), (TIME, FEATURES)),
    "no_bias": ((FEATURES,), {"bias": False}, ("weight",), (FEATURES,)),
    "no_affine": ((FEATURES,), {"elementwise_affine": False}, (), (FEATURES,)),
}


@dataclass(frozen=True)
class ModuleInputs:
    """Every input of the module check, drawn from the seed before any learner code runs."""

    x: np.ndarray  # (B, T, C) float64
    x32: np.ndarray  # (B, T, C) float32, offset 10
    upstream: np.ndarray  # (B, T, C) gradient for the backward check
    x_eps: np.ndarray  # (4, C) for the eps=0.1 check
    parameters: dict  # configuration -> {parameter name: float64 array}


def module_inputs(seed: int = 0) -> ModuleInputs:
    """Every input of the module check, drawn from ``seed`` (see :class:`ModuleInputs`)."""
    rng = np.random.default_rng(seed + 2)
    parameters = {
        name: {p: rng.uniform(0.5, 2.0, shape) for p in names}
        for name, (_, _, names, shape) in MODULE_CONFIGS.items()
    }
    return ModuleInputs(
        x=rng.normal(1.0, 2.0, (BATCH, TIME, FEATURES)),
        x32=(rng.normal(size=(BATCH, TIME, FEATURES)) + 10).astype(np.float32),
        upstream=rng.normal(size=(BATCH, TIME, FEATURES)),
        x_eps=rng.normal(size=(4, FEATURES)),
        parameters=parameters,
    )


def _recorded(step) -> Observation:
    """Run one step of the observation (no arguments) and record what it returned or raised."""
    return observe(step, (), {})


def observe_layer_norm_module(cls, seed: int = 0, forbid_torch_norms: bool = True) -> dict:
    """Exercise a LayerNorm class the way the judge needs; record every result as plain data."""
    import torch

    inputs = module_inputs(seed)
    guard = torch_norms_forbidden if forbid_torch_norms else contextlib.nullcontext
    tensor = torch.from_numpy

    def construct(config):
        args, kwargs, _, _ = MODULE_CONFIGS[config]
        return cls(*args, **kwargs)

    def loaded(config):
        module = construct(config).double()  # before loading: float64 weights stay float64
        state = {k: tensor(v) for k, v in inputs.parameters[config].items()}
        module.load_state_dict(state)
        return module

    def describe(config):
        module = construct(config)
        attributes = {
            a: getattr(module, a, "<missing>")
            for a in ("normalized_shape", "eps", "elementwise_affine")
        }
        attributes = {
            k: v if isinstance(v, str | bool | int | float) else plain(v)
            for k, v in attributes.items()
        }
        state = module.state_dict()
        return {
            "is_module": isinstance(module, torch.nn.Module),
            "subclasses_torch": isinstance(module, torch.nn.LayerNorm),
            "attributes": attributes,
            "state": {k: list(v.shape) for k, v in state.items()},
            "parameters": [name for name, _ in module.named_parameters()],
            "initial": {k: v.detach().double().numpy() for k, v in state.items()},
        }

    def forward(module, x):
        with guard():
            return module(x)

    def gradients():
        module = loaded("default")
        x = tensor(inputs.x.copy()).requires_grad_(True)
        (forward(module, x) * tensor(inputs.upstream)).sum().backward()
        grads = {"input": x.grad, "weight": module.weight.grad, "bias": module.bias.grad}
        return {k: None if g is None else g.numpy() for k, g in grads.items()}

    def round_trip():  # the judge loads it into torch.nn.LayerNorm
        return recorded_state(loaded("default"))

    observations = {}
    for config in MODULE_CONFIGS:
        observations[f"describe:{config}"] = _recorded(lambda c=config: describe(c))
        observations[f"load:{config}"] = _recorded(lambda c=config: loaded(c) is not None)
        x = inputs.x_eps if config == "eps" else inputs.x
        observations[f"forward:{config}"] = _recorded(
            lambda c=config, x=x: forward(loaded(c), tensor(x.copy()))
        )
    observations["forward:float32"] = _recorded(
        lambda: forward(loaded("default").float(), tensor(inputs.x32.copy()))
    )
    observations["gradients"] = _recorded(gradients)
    observations["round_trip"] = _recorded(round_trip)
    return observations


def _reference_module_observations(seed):
    import torch

    return observe_layer_norm_module(torch.nn.LayerNorm, seed, forbid_torch_norms=False)


# What a constructed module's description holds (see describe in observe_layer_norm_module);
# RMSNorm's module is described the same way
DESCRIPTION = {
    "is_module": bool,
    "subclasses_torch": bool,
    "attributes": dict.fromkeys(("normalized_shape", "eps", "elementwise_affine"), PLAIN),
    "state": MapOf(ListOf(int)),
    "parameters": ListOf(str),
    "initial": MapOf(np.ndarray),
}
# What only the kernel knows: a record can fail on it, never earn a point by it
UNVERIFIED = {
    "check_layer_norm_module": (
        "LayerNorm subclasses torch.nn.Module, not torch.nn.LayerNorm",
        "its weight and bias are nn.Parameters",
        NOT_CALLING_TORCH_NORMS,
    )
}


def _judge_describe(observation, config, checked):
    __tracebackhide__ = True
    args, kwargs, names, shape = MODULE_CONFIGS[config]
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    call = f"LayerNorm({', '.join(shown)})"
    if observation.not_implemented:
        fail(f"{call} is not implemented yet: replace the stub with your code.")
    if observation.error:
        fail(
            f"{call} raised {observation.error}\nHint: the constructor mirrors "
            "torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)."
        )
    conform(observation.value, DESCRIPTION, "description")
    info = observation.value
    if not info["is_module"]:
        fail("LayerNorm must be a torch.nn.Module subclass.")
    if info["subclasses_torch"]:
        fail(
            "Your LayerNorm subclasses torch.nn.LayerNorm; subclass torch.nn.Module and write the "
            "math yourself."
        )
    if config == "default":
        expected = {"normalized_shape": [FEATURES], "eps": 1e-5, "elementwise_affine": True}
        for attribute, value in expected.items():
            if info["attributes"][attribute] != value:
                shown = tuple(value) if isinstance(value, list) else value
                actual = info["attributes"][attribute]
                fail(
                    f"LayerNorm({FEATURES}).{attribute} should be {shown!r} (as in "
                    f"torch.nn.LayerNorm), but it is {actual!r}."
                )
    if sorted(info["state"]) != sorted(names):
        fail(
            f"{call}.state_dict() has keys {sorted(info['state'])}, but torch.nn.LayerNorm's are "
            f"{sorted(names)}. Register nn.Parameter attributes named exactly like torch's "
            "(weight, bias), or register_parameter('bias', None) when there is no bias."
        )
    for key in names:
        if key not in info["parameters"]:
            fail(
                f"{call}.{key} is in the state_dict but is not an nn.Parameter, so an optimizer "
                "would never train it: wrap it in nn.Parameter."
            )
        if tuple(info["state"][key]) != shape:
            fail(f"{call}.{key} has shape {tuple(info['state'][key])}; it should be {shape}.")
    if config == "default":
        initial = info["initial"]
        if not (np.all(initial["weight"] == 1) and np.all(initial["bias"] == 0)):
            fail(
                "A new LayerNorm should start with weight = 1 and bias = 0, as torch.nn.LayerNorm."
            )
        checked.append("constructor, attributes and parameters as torch.nn.LayerNorm")


def _judge_forward(observations, reference, key, description, atol=1e-8, mistake_args=()):
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes

    config = key.split(":")[1]
    load = observations.get(f"load:{config}", Observation(value=True))
    if load.error:
        fail(f"LayerNorm.load_state_dict(torch.nn.LayerNorm's state_dict) failed: {load.error}")
    observation = observations[key]
    if observation.error and TORCH_NORM_CALLED in observation.error:
        fail(
            "Your LayerNorm calls torch's own normalization function. The point of the exercise "
            "is to write the math yourself with tensor operations (mean, subtraction, sqrt, ...)."
        )
    if observation.not_implemented:
        fail("LayerNorm.forward is not implemented yet: replace the stub with your code.")
    if observation.error:
        fail(f"LayerNorm.forward raised {observation.error} on {description}")
    case = Case(description, (), atol=atol, rtol=1e-6 if atol < 1e-6 else 0.0)
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
    """Compare a recorded LayerNorm module with torch.nn.LayerNorm observed the same way."""
    __tracebackhide__ = True
    import torch

    reference = _reference_module_observations(seed)
    expect_keys("LayerNorm", observations, reference)
    inputs = module_inputs(seed)
    checked = []

    def mistake_args(config, x):
        parameters = inputs.parameters[config]
        eps = MODULE_CONFIGS[config][1].get("eps", 1e-5)
        return (x, parameters["weight"], parameters["bias"], eps)

    def forward(key, description, **options):
        _judge_forward(observations, reference, key, description, **options)

    shape = (BATCH, TIME, FEATURES)
    _judge_describe(observations["describe:default"], "default", checked)
    default_args = mistake_args("default", inputs.x)
    forward("forward:default", f"a (B, T, C) = {shape} float64 input", mistake_args=default_args)
    checked.append("loads a torch.nn.LayerNorm state_dict and matches it in float64")
    forward("forward:float32", "a float32 (B, T, C) input", atol=1e-5)
    checked.append("keeps float32 as float32 and matches torch")

    judge_gradients(
        observations["gradients"], reference["gradients"], "LayerNorm", "a float64 (B, T, C) input"
    )
    checked.append("gradients of input, weight and bias match torch's")

    _judge_describe(observations["describe:eps"], "eps", checked)
    eps_args = mistake_args("eps", inputs.x_eps)
    forward("forward:eps", "eps=0.1 with a (4, 5) input", mistake_args=eps_args)
    checked.append("uses its eps argument")
    _judge_describe(observations["describe:tuple"], "tuple", checked)
    forward(
        "forward:tuple",
        f"normalized_shape=({TIME}, {FEATURES}) on a {inputs.x.shape} input "
        "(statistics over the last two axes)",
    )
    checked.append("a tuple normalized_shape normalizes over the last len(normalized_shape) axes")
    for config, text in [("no_bias", "bias=False"), ("no_affine", "elementwise_affine=False")]:
        _judge_describe(observations[f"describe:{config}"], config, checked)
        forward(f"forward:{config}", f"LayerNorm({FEATURES}, {text}) on a (B, T, C) input")
    checked.append("bias=False and elementwise_affine=False as in torch")
    judge_round_trip(observations["round_trip"], torch.nn.LayerNorm(FEATURES, dtype=torch.float64))
    checked.append("its state_dict loads into torch.nn.LayerNorm")

    return passed("LayerNorm", checked)


def check_layer_norm_module(cls, seed: int = 0) -> None:
    """Check a learner's torch ``LayerNorm`` class against ``torch.nn.LayerNorm``.

    Construction and attributes, parameter names and shapes, loading torch's state_dict both ways,
    forward in float64 and float32 on (B, T, C) input, a custom eps, a tuple normalized_shape,
    gradients against torch's, and that torch's own norm functions are not called.
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
