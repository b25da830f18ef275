"""Checkers for the RMSNorm exercise: ``rms_norm``, ``rms_norm_backward`` and a torch module.

Observed and judged as in :mod:`addnorm_lib.checks.layernorm`. The module check compares the
learner's ``RMSNorm`` with ``torch.nn.RMSNorm`` observed the same way, including float16 and
bfloat16 inputs, which must be computed in float32 and cast back.
"""

import contextlib

import numpy as np

from addnorm_lib.checks._core import (
    Case,
    Observation,
    compare,
    conform,
    expect_keys,
    fail,
    judge_backward,
    judge_gradients,
    judge_output,
    malformed,
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
from addnorm_lib.checks.layernorm import DESCRIPTION, SQUARE_HINT, last_axis_backward_cases

SHAPE_HINT = (
    "Your code must work for any number of leading axes: reduce with axis=-1 and keepdims=True, "
    "so that the mean square broadcasts against x."
)


# ----------------------------------------------------------------------------------------------
# rms_norm(x, weight, eps) -> y


def rms_norm_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``rms_norm(x, weight, eps)``, ordered from the simplest."""
    rng = np.random.default_rng(seed + 30)

    def case(description, x, eps=1e-6, **options):
        weight = rng.uniform(0.5, 2.0, x.shape[-1]).astype(x.dtype)  # (C,), away from 1
        return Case(description, (x, weight), {"eps": eps}, **options)

    return [
        case(
            "a 2-D (N, C) = (4, 6) float64 input with mean 2",
            rng.normal(2.0, 1.0, (4, 6)),
            hint="RMSNorm divides each row of x by sqrt(mean(x**2) + eps), over the last axis.",
        ),
        case(
            "a 3-D (B, T, C) = (2, 3, 5) float64 input",
            rng.normal(-1.0, 2.0, (2, 3, 5)),
            hint=SHAPE_HINT,
        ),
        case("a batch of one, shape (1, 7)", rng.normal(size=(1, 7)), hint=SHAPE_HINT),
        case(
            "eps=0.1 instead of the default",
            rng.normal(size=(3, 4)),
            eps=0.1,
            hint="Use the eps argument, inside the square root.",
        ),
        case(
            "rows of tiny values (RMS about 1e-3, so the mean square is close to eps=1e-6)",
            rng.normal(0.0, 1e-3, (3, 8)),
            hint="eps belongs inside the square root.",
        ),
        case(
            "a float32 (4, 16) input",
            rng.normal(1.0, 1.0, (4, 16)).astype(np.float32),
            atol=1e-5,
            rtol=1e-5,
        ),
        case(
            "a square (N, C) = (5, 5) input (N equals C)",
            rng.normal(size=(5, 5)),
            hint=SQUARE_HINT,
        ),
    ]


def observe_rms_norm(rms_norm, seed: int = 0) -> list[Observation]:
    """Observe ``rms_norm`` on each case of :func:`rms_norm_cases`."""
    return observe_cases(rms_norm, rms_norm_cases(seed))


def judge_rms_norm(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``rms_norm`` results with the reference (float64, cast back)."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    cases = rms_norm_cases(seed)
    return judge_output(
        "rms_norm", cases, observations, norms.rms_norm, mistakes.RMS_NORM_MISTAKES, ("x", "weight")
    )


def check_rms_norm(rms_norm, seed: int = 0) -> None:
    """Check a learner's ``rms_norm(x, weight, eps=1e-6) -> y`` (numpy)."""
    __tracebackhide__ = True
    run_check("check_rms_norm", observe_rms_norm, judge_rms_norm, rms_norm, seed)


# ----------------------------------------------------------------------------------------------
# rms_norm_backward(dy, x, weight, eps) -> (dx, dweight)


def rms_norm_backward_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``rms_norm_backward(dy, x, weight, eps)``."""
    hint = "dweight has weight's shape (C,): sum over every axis but the last."
    return last_axis_backward_cases(np.random.default_rng(seed + 31), 1e-6, hint)


def observe_rms_norm_backward(rms_norm_backward, seed: int = 0) -> list[Observation]:
    """Observe ``rms_norm_backward`` on each case of :func:`rms_norm_backward_cases`."""
    return observe_cases(rms_norm_backward, rms_norm_backward_cases(seed))


def judge_rms_norm_backward(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``rms_norm_backward`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    cases = rms_norm_backward_cases(seed)
    known = mistakes.RMS_NORM_BACKWARD_MISTAKES
    return judge_backward(
        "rms_norm_backward",
        cases,
        observations,
        norms.rms_norm_backward,
        ("dx", "dweight"),
        known,
        arg_names=("dy", "x", "weight"),
    )


def check_rms_norm_backward(rms_norm_backward, seed: int = 0) -> None:
    """Check a learner's ``rms_norm_backward(dy, x, weight, eps=1e-6) -> (dx, dweight)``."""
    __tracebackhide__ = True
    run_check(
        "check_rms_norm_backward",
        observe_rms_norm_backward,
        judge_rms_norm_backward,
        rms_norm_backward,
        seed,
    )


# ----------------------------------------------------------------------------------------------
# The torch module RMSNorm(normalized_shape, eps=None, elementwise_affine=True)

BATCH, TIME, FEATURES = 2, 3, 8
# configuration name: (constructor arguments, keyword arguments, parameter shape or None)
MODULE_CONFIGS = {
    "default": ((FEATURES,), {}, (FEATURES,)),
    "eps": ((FEATURES,), {"eps": 0.1}, (FEATURES,)),
    "tuple": (((TIME, FEATURES),), {}, (TIME, FEATURES)),
    "no_affine": ((FEATURES,), {"elementwise_affine": False}, None),
}
# half-precision inputs: name -> (dtype name, description, how the input is drawn)
HALF_INPUTS = {
    "float16_large": (
        "float16",
        "float16 input with values up to about 1000, whose squares overflow float16 (largest "
        "value 65504)",
        400.0,
    ),
    "float16_small": (
        "float16",
        "float16 input of tiny values (RMS about 1e-3, squares below float16's smallest normal "
        "number)",
        1e-3,
    ),
    "bfloat16": ("bfloat16", "bfloat16 input", 3.0),
}
HALF_TOLERANCE = 1e-2  # about 2 units in the last place of bfloat16, 5 of float16 near 1
# A float64 input this small (mean square about 1e-9) shows which eps eps=None means: float64's
# machine epsilon (2.2e-16) changes nothing, a fixed 1e-6 or float32's (1.2e-7) a lot.
TINY = 1e-5


def _config_call(config: str) -> str:
    args, kwargs, _ = MODULE_CONFIGS[config]
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"RMSNorm({', '.join(shown)})"


def module_inputs(seed: int = 0) -> dict:
    """Every input of the module check, drawn from the seed before any learner code runs."""
    rng = np.random.default_rng(seed + 32)
    shape = (BATCH, TIME, FEATURES)
    parameters = {
        name: rng.uniform(0.5, 2.0, p_shape)
        for name, (_, _, p_shape) in MODULE_CONFIGS.items()
        if p_shape
    }
    return {
        "x": rng.normal(1.0, 2.0, shape),
        "x32": rng.normal(size=shape).astype(np.float32),
        "upstream": rng.normal(size=shape),
        "parameters": parameters,
        **{name: rng.normal(0.0, scale, shape) for name, (_, _, scale) in HALF_INPUTS.items()},
    }


def _plain_attribute(value):
    return value if isinstance(value, str | bool | int | float | None) else plain(value)


def observe_rms_norm_module(cls, seed: int = 0, forbid_torch_norms: bool = True) -> dict:
    """Exercise an RMSNorm class the way the judge needs; record every result as plain data."""
    import torch

    inputs = module_inputs(seed)
    guard = torch_norms_forbidden if forbid_torch_norms else contextlib.nullcontext
    tensor = torch.from_numpy

    def construct(config):
        args, kwargs, _ = MODULE_CONFIGS[config]
        return cls(*args, **kwargs)

    def loaded(config):
        module = construct(config).double()
        if config in inputs["parameters"]:
            module.load_state_dict({"weight": tensor(inputs["parameters"][config])})
        return module

    def describe(config):
        module = construct(config)
        attributes = {
            a: getattr(module, a, "<missing>")
            for a in ("normalized_shape", "eps", "elementwise_affine")
        }
        state = module.state_dict()
        return {
            "is_module": isinstance(module, torch.nn.Module),
            "subclasses_torch": isinstance(module, torch.nn.RMSNorm),
            "attributes": {k: _plain_attribute(v) for k, v in attributes.items()},
            "state": {k: list(v.shape) for k, v in state.items()},
            "parameters": [name for name, _ in module.named_parameters()],
            "initial": {k: v.detach().double().numpy() for k, v in state.items()},
        }

    def forward(module, x):
        with guard():
            return module(x)

    def half(name):
        dtype = getattr(torch, HALF_INPUTS[name][0])
        y = forward(loaded("default").to(dtype), tensor(inputs[name]).to(dtype))
        return {"dtype": str(y.dtype).removeprefix("torch."), "value": y.detach().double()}

    def gradients():
        module = loaded("default")
        x = tensor(inputs["x"].copy()).requires_grad_(True)
        (forward(module, x) * tensor(inputs["upstream"])).sum().backward()
        grads = {"input": x.grad, "weight": module.weight.grad}
        return {k: None if g is None else g.numpy() for k, g in grads.items()}

    def round_trip():  # the judge loads it into torch.nn.RMSNorm
        return recorded_state(loaded("default"))

    observations = {}
    for config in MODULE_CONFIGS:
        observations[f"describe:{config}"] = observe(describe, (config,), {})
        observations[f"forward:{config}"] = observe(
            lambda c=config: forward(loaded(c), tensor(inputs["x"].copy())), (), {}
        )
    observations["forward:float32"] = observe(
        lambda: forward(loaded("default").float(), tensor(inputs["x32"].copy())), (), {}
    )
    observations["forward:float64_tiny"] = observe(
        lambda: forward(loaded("default"), tensor(inputs["x"] * TINY)), (), {}
    )
    for name in HALF_INPUTS:
        observations[f"half:{name}"] = observe(half, (name,), {})
    observations["gradients"] = observe(gradients, (), {})
    observations["round_trip"] = observe(round_trip, (), {})
    return observations


# What only the kernel knows: a record can fail on it, never earn a point by it
UNVERIFIED = {
    "check_rms_norm_module": (
        "RMSNorm subclasses torch.nn.Module, not torch.nn.RMSNorm",
        "its weight is an nn.Parameter",
        NOT_CALLING_TORCH_NORMS,
    )
}


def _judge_describe(observation: Observation, config: str) -> None:
    __tracebackhide__ = True
    call = _config_call(config)
    if observation.not_implemented:
        fail(f"{call} is not implemented yet: replace the stub with your code.")
    if observation.error:
        fail(
            f"{call} raised {observation.error}\nHint: the constructor mirrors "
            "torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)."
        )
    conform(observation.value, DESCRIPTION, "description")
    info = observation.value
    if not info["is_module"]:
        fail("RMSNorm must be a torch.nn.Module subclass.")
    if info["subclasses_torch"]:
        fail(
            "Your RMSNorm subclasses torch.nn.RMSNorm; subclass torch.nn.Module and write the "
            "math yourself."
        )
    if config == "default":
        expected = {"normalized_shape": [FEATURES], "eps": None, "elementwise_affine": True}
        for attribute, value in expected.items():
            actual = info["attributes"][attribute]
            if actual != value:
                shown = tuple(value) if isinstance(value, list) else value
                fail(
                    f"RMSNorm({FEATURES}).{attribute} should be {shown!r} (as in "
                    f"torch.nn.RMSNorm), but it is {actual!r}."
                )
    shape = MODULE_CONFIGS[config][2]
    keys = ["weight"] if shape else []
    if sorted(info["state"]) != keys:
        fail(
            f"{call}.state_dict() has keys {sorted(info['state'])}, but torch.nn.RMSNorm's are "
            f"{keys}. RMSNorm has one parameter, weight (no bias); with "
            "elementwise_affine=False, register_parameter('weight', None)."
        )
    if shape:
        if "weight" not in info["parameters"]:
            fail(
                f"{call}.weight is in the state_dict but is not an nn.Parameter: wrap it in "
                "nn.Parameter so that an optimizer trains it."
            )
        if tuple(info["state"]["weight"]) != shape:
            fail(f"{call}.weight has shape {tuple(info['state']['weight'])}; it should be {shape}.")
        if config == "default" and not np.all(info["initial"]["weight"] == 1):
            fail("A new RMSNorm should start with weight = 1, as torch.nn.RMSNorm.")


def _forward_value(observations: dict, key: str, description: str):
    """The recorded output of one observed forward pass, or CheckFailed if it raised."""
    __tracebackhide__ = True
    observation = observations[key]
    if observation.error and TORCH_NORM_CALLED in observation.error:
        fail(
            "Your RMSNorm calls torch's own normalization function. The point of the exercise is "
            "to write the math yourself with tensor operations (mean, rsqrt, ...)."
        )
    if observation.not_implemented:
        fail("RMSNorm.forward is not implemented yet: replace the stub with your code.")
    if observation.error:
        fail(f"RMSNorm.forward raised {observation.error} on {description}")
    return observation


def _half_variants(name: str, seed: int) -> dict:
    """What torch computes for the half-precision input when the module gets it wrong."""
    import torch

    inputs = module_inputs(seed)
    dtype = getattr(torch, HALF_INPUTS[name][0])
    x = torch.from_numpy(inputs[name]).to(dtype)
    weight = torch.from_numpy(inputs["parameters"]["default"]).to(dtype)
    float32_eps = torch.finfo(torch.float32).eps

    def rms(t, eps):
        return t * torch.rsqrt((t * t).mean(-1, keepdim=True) + eps) * weight

    return {
        "no_upcast": rms(x, float32_eps).double().numpy(),
        "half_eps": rms(x.float(), torch.finfo(dtype).eps).to(dtype).double().numpy(),
    }


def _representable(values: np.ndarray, dtype: str) -> bool:
    """Whether every value (recorded in float64) is one that torch's ``dtype`` can hold."""
    import torch

    if values.dtype != np.float64:
        return False
    as_recorded = torch.from_numpy(values)
    round_trip = as_recorded.to(getattr(torch, dtype)).double()
    return bool(torch.equal(round_trip.nan_to_num(0.5), as_recorded.nan_to_num(0.5)))


def _judge_half(observations: dict, reference: dict, name: str, seed: int) -> None:
    __tracebackhide__ = True
    dtype, description, _ = HALF_INPUTS[name]
    description = f"a {description}, shape {(BATCH, TIME, FEATURES)}, module converted with .to()"
    observation = _forward_value(observations, f"half:{name}", description)
    conform(observation.value, {"dtype": str, "value": np.ndarray}, "half-precision output")
    mine, theirs = observation.value, reference[f"half:{name}"].value
    if mine["dtype"] != dtype:
        fail(
            f"RMSNorm, on {description}: the output has dtype {mine['dtype']}, but the input was "
            f"{dtype}.\nHint: compute in float32, then cast the result back with .to(x.dtype)."
        )
    if not _representable(mine["value"], dtype):  # the dtype named is a claim: check it
        malformed("half-precision output")
    tolerance = {"rtol": HALF_TOLERANCE, "atol": HALF_TOLERANCE}
    if np.allclose(mine["value"], theirs["value"], **tolerance):
        return
    variants = _half_variants(name, seed)
    if np.allclose(mine["value"], variants["half_eps"], **tolerance):
        fail(
            f"RMSNorm, on {description}: with eps=None you used torch.finfo({dtype}).eps. "
            "torch.nn.RMSNorm computes half-precision inputs in float32 and takes float32's eps "
            "(about 1.2e-7); float16's (about 1e-3) is large enough to shrink small inputs.\n"
            "Hint: take torch.finfo of the dtype you compute in."
        )
    if not np.allclose(mine["value"], variants["no_upcast"], **tolerance, equal_nan=True):
        compare(
            mine["value"],
            theirs["value"],
            name="RMSNorm",
            what="the output",
            case=Case(description, (), atol=HALF_TOLERANCE, rtol=HALF_TOLERANCE),
        )
    fail(
        f"RMSNorm, on {description}: your output matches computing the whole norm in {dtype}. "
        "In half precision, x * x overflows (float16 stops at 65504) or underflows, and the mean "
        "square loses its digits; torch.nn.RMSNorm and LLaMA compute in float32.\n"
        "Hint: x32 = x.float(); normalize x32; cast the result back with .to(x.dtype)."
    )


def judge_rms_norm_module(observations: dict, seed: int = 0) -> str:
    """Compare a recorded RMSNorm module with torch.nn.RMSNorm observed the same way."""
    __tracebackhide__ = True
    import torch

    from addnorm_lib.reference import mistakes

    reference = observe_rms_norm_module(torch.nn.RMSNorm, seed, forbid_torch_norms=False)
    expect_keys("RMSNorm", observations, reference)
    inputs = module_inputs(seed)
    checked = []

    def forward(config, description, atol=1e-8, hint=""):
        key = f"forward:{config}"
        observation = _forward_value(observations, key, description)
        eps = MODULE_CONFIGS.get(config, (0, {}))[1].get("eps", np.finfo(np.float64).eps)
        weight = inputs["parameters"].get(config)
        known = mistakes.RMS_NORM_MISTAKES if config in ("default", "eps") else ()
        compare(
            observation.value,
            reference[key].value,
            name="RMSNorm",
            what="the output",
            case=Case(description, (), atol=atol, rtol=1e-6 if atol < 1e-6 else 0.0, hint=hint),
            mistakes=known,
            mistake_args=(inputs["x"], weight, eps),
            type_name=observation.type_name,
        )

    x_shape = (BATCH, TIME, FEATURES)
    _judge_describe(observations["describe:default"], "default")
    checked.append("constructor, attributes and parameter as torch.nn.RMSNorm")
    forward("default", f"a float64 (B, T, C) = {x_shape} input, after loading torch's state_dict")
    checked.append("loads a torch.nn.RMSNorm state_dict and matches it in float64")
    forward("float32", "a float32 (B, T, C) input", atol=1e-5)
    checked.append("keeps float32 as float32 and matches torch")
    for name in HALF_INPUTS:
        _judge_half(observations, reference, name, seed)
    checked.append("float16 and bfloat16 inputs: computed in float32, cast back, as torch")
    forward(
        "float64_tiny",
        f"a float64 (B, T, C) input of tiny values (RMS about {TINY * 2.4:.0e}), with eps=None",
        hint="eps=None means the machine epsilon of the input's dtype: "
        "torch.finfo(x.dtype).eps, 2.2e-16 for float64, not a fixed 1e-6 or float32's 1.2e-7.",
    )
    checked.append("eps=None is the input dtype's machine epsilon (float64 here)")
    judge_gradients(
        observations["gradients"], reference["gradients"], "RMSNorm", "a float64 (B, T, C) input"
    )
    checked.append("gradients of input and weight match torch's")
    _judge_describe(observations["describe:eps"], "eps")
    forward("eps", f"{_config_call('eps')} on a {x_shape} input")
    checked.append("uses its eps argument")
    _judge_describe(observations["describe:tuple"], "tuple")
    forward(
        "tuple",
        f"normalized_shape=({TIME}, {FEATURES}) on a {x_shape} input (mean square "
        "over the last two axes)",
    )
    checked.append("a tuple normalized_shape normalizes over the last len(normalized_shape) axes")
    _judge_describe(observations["describe:no_affine"], "no_affine")
    forward("no_affine", f"{_config_call('no_affine')} on a {x_shape} input")
    checked.append("elementwise_affine=False as in torch")
    judge_round_trip(observations["round_trip"], torch.nn.RMSNorm(FEATURES, dtype=torch.float64))
    checked.append("its state_dict loads into torch.nn.RMSNorm")
    return passed("RMSNorm", checked)


def check_rms_norm_module(cls, seed: int = 0) -> None:
    """Check a learner's torch ``RMSNorm`` class against ``torch.nn.RMSNorm``.

    Construction, the weight parameter, loading torch's state_dict both ways, forward in float64,
    float32, float16 and bfloat16 (computed in float32), a custom eps, a tuple normalized_shape,
    gradients against torch's, and that torch's own norm functions are not called.
    """
    __tracebackhide__ = True
    run_check("check_rms_norm_module", observe_rms_norm_module, judge_rms_norm_module, cls, seed)


JUDGES = {
    "check_rms_norm": judge_rms_norm,
    "check_rms_norm_backward": judge_rms_norm_backward,
    "check_rms_norm_module": judge_rms_norm_module,
}
