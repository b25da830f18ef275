"""Checkers for the RMSNorm exercise: ``rms_norm``, ``rms_norm_backward`` and a torch module.

Observed and judged as in :mod:`addnorm_lib.checks.layernorm`. The module check compares the
learner's ``RMSNorm`` with ``torch.nn.RMSNorm`` observed the same way, including float16 and
bfloat16 inputs, which must be computed in float32 and cast back. With ``eps=None``, torch 2.13's
RMSNorm takes the machine epsilon of the dtype it computes in (its "opmath" type): float64's for
float64 input, float32's for float32, float16 and bfloat16 input (measured, and so documented in
torch.nn.RMSNorm's docstring).
"""

import warnings

import numpy as np

from addnorm_lib.checks._core import (
    FLOAT64_HINT,
    FLOAT64_TOLERANCE,
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
    low_precision_tolerance,
    norm_calls_observation,
    recorded_state,
    recording_torch_norms,
    representable,
)
from addnorm_lib.checks.layernorm import SQUARE_HINT, last_axis_backward_cases

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
        case(
            "a 3-D (B, T, C) = (3, 4, 6) float64 input, to float64 precision",
            rng.normal(size=(3, 4, 6)),
            hint=FLOAT64_HINT,
            **FLOAT64_TOLERANCE,
        ),
    ]


def observe_rms_norm(rms_norm, seed: int = 0) -> list[Observation]:
    """Observe ``rms_norm`` on each case of :func:`rms_norm_cases`."""
    return observe_cases(rms_norm, rms_norm_cases(seed), record_norm_calls=True)


def judge_rms_norm(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``rms_norm`` results with the reference (float64, cast back)."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, norms

    cases = rms_norm_cases(seed)
    return judge_output(
        "rms_norm",
        cases,
        observations,
        norms.rms_norm,
        mistakes.RMS_NORM_MISTAKES,
        ("x", "weight"),
        norm_calls=True,
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
    rng = np.random.default_rng(seed + 31)
    cases = last_axis_backward_cases(rng, 1e-6, hint)
    x, dy = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    weight = rng.uniform(0.5, 2.0, 7)  # (C,), away from 1
    precise = Case(
        "a 2-D (N, C) = (5, 7) float64 input, to float64 precision",
        (dy, x, weight),
        {"eps": 1e-6},
        hint=FLOAT64_HINT,
        **FLOAT64_TOLERANCE,
    )
    return [*cases, precise]


def observe_rms_norm_backward(rms_norm_backward, seed: int = 0) -> list[Observation]:
    """Observe ``rms_norm_backward`` on each case of :func:`rms_norm_backward_cases`."""
    return observe_cases(rms_norm_backward, rms_norm_backward_cases(seed), record_norm_calls=True)


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
        norm_calls=True,
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
#
# As LayerNorm's (see checks.layernorm): the check reads what the task asks for (outputs in every
# dtype, gradients, the state_dict, the norm ops called), never attributes such as eps.

BATCH, TIME, FEATURES = 2, 3, 8
WEIGHT = ("weight",)
# configuration name: the constructor call the check makes
MODULE_CONFIGS = {
    "default": ModuleConfig((FEATURES,), {}, WEIGHT, (FEATURES,)),
    "eps": ModuleConfig((FEATURES,), {"eps": 0.1}, WEIGHT, (FEATURES,)),
    "tuple": ModuleConfig(((TIME, FEATURES),), {}, WEIGHT, (TIME, FEATURES)),
    "no_affine": ModuleConfig((FEATURES,), {"elementwise_affine": False}),
    "eps0": ModuleConfig((FEATURES,), {"eps": 0.0}, WEIGHT, (FEATURES,)),
}
MODULE_TASK = ModuleTask(
    name="RMSNorm",
    torch_class="torch.nn.RMSNorm",
    signature="torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)",
    state_hint="RMSNorm has one parameter, weight (no bias), of shape normalized_shape; with "
    "elementwise_affine=False, register_parameter('weight', None).",
    math_hint="mean, rsqrt, ...",
)
# half-precision inputs, in the order judged: name -> (dtype name, description, scale of x)
HALF_INPUTS = {
    "float16_large": (
        "float16",
        "float16 input with values up to about 1000, whose squares overflow float16 (largest "
        "value 65504)",
        400.0,
    ),
    # bfloat16 has float32's range: nothing overflows or underflows, only eps=None shows
    "bfloat16_eps": ("bfloat16", "bfloat16 input with RMS about 0.1, with eps=None", 0.1),
    "float16_small": (
        "float16",
        "float16 input of tiny values (RMS about 1e-3, squares below float16's smallest normal "
        "number)",
        1e-3,
    ),
    "bfloat16": ("bfloat16", "bfloat16 input", 3.0),
}
# more half-precision inputs, judged after those: name -> (how the module and input are made,
# configuration, scale of x)
MORE_HALF_INPUTS = {
    # eps=0 and squares of about 1e-40: below float32's smallest normal number, where bfloat16
    # keeps one or two significant bits and float32 still about 16 (measured: 20 bfloat16
    # epsilons off, computed in bfloat16)
    "bfloat16_tiny": (
        LowPrecisionInput(
            "bfloat16",
            "a bfloat16 (B, T, C) input of tiny values (RMS about 1e-20) to RMSNorm(8, eps=0), "
            "converted with .to(torch.bfloat16)",
        ),
        "eps0",
        1e-20,
    ),
    "float16_mixed": (
        LowPrecisionInput(
            "float16",
            "a float16 (B, T, C) input to a module whose weight stays float32 (as under autocast)",
            mixed=True,
        ),
        "default",
        2.0,
    ),
}
# A float64 input this small (mean square about 1e-9) shows which eps eps=None means: float64's
# machine epsilon (2.2e-16) changes nothing, a fixed 1e-6 or float32's (1.2e-7) a lot.
TINY = 1e-5
# With eps=0, a float64 input this small (mean square about 1e-18) shows an eps put in its place:
# float64's machine epsilon (2.2e-16) changes the output by a few percent.
TINY_EPS0 = 1e-9
EPS_NONE_HINT = (
    "eps=None means torch.finfo(dtype).eps of the dtype you compute in: float64's (2.2e-16) for "
    "float64 input; float32's (1.2e-7) for float32, float16 and bfloat16 input, which are "
    "computed in float32. Not a fixed 1e-6."
)


def config_call(config: str) -> str:
    """How a message names the constructor call of ``config``, e.g. ``RMSNorm(8, eps=0.1)``."""
    return MODULE_CONFIGS[config].call("RMSNorm")


def module_inputs(seed: int = 0) -> dict:
    """Every input of the module check, drawn from the seed before any learner code runs."""
    rng = np.random.default_rng(seed + 32)
    shape = (BATCH, TIME, FEATURES)
    parameters = {
        name: rng.uniform(0.5, 2.0, config.shape)
        for name, config in MODULE_CONFIGS.items()
        if config.parameters
    }
    return {
        "x": rng.normal(1.0, 2.0, shape),
        "x32": rng.normal(size=shape).astype(np.float32),
        "upstream": rng.normal(size=shape),
        "parameters": parameters,
        **{name: rng.normal(0.0, scale, shape) for name, (_, _, scale) in HALF_INPUTS.items()},
        "x_transposed": rng.normal(1.0, 2.0, (BATCH, FEATURES, TIME)),
        "x_eps0": rng.normal(0.0, TINY_EPS0, shape),
        **{name: rng.normal(0.0, scale, shape) for name, (_, _, scale) in MORE_HALF_INPUTS.items()},
    }


def observe_rms_norm_module(cls, seed: int = 0, forbid_torch_norms: bool = True) -> dict:
    """Exercise an RMSNorm class the way the judge needs; record every result as plain data.

    With ``forbid_torch_norms`` (for every module but torch's own, the reference), the names of
    torch's norm ops that the module called are recorded under :data:`NORM_CALLS`.
    """
    import torch

    inputs = module_inputs(seed)
    tensor = torch.from_numpy

    def construct(config):
        return MODULE_CONFIGS[config].build(cls)

    def loaded(config):
        module = construct(config).double()
        if config in inputs["parameters"]:
            module.load_state_dict({"weight": tensor(inputs["parameters"][config])})
        return module

    def half(name):
        dtype = getattr(torch, HALF_INPUTS[name][0])
        y = loaded("default").to(dtype)(tensor(inputs[name]).to(dtype))
        return {"dtype": str(y.dtype).removeprefix("torch."), "value": y.detach().double()}

    def gradients():
        module = loaded("default")
        x = tensor(inputs["x"].copy()).requires_grad_(True)
        (module(x) * tensor(inputs["upstream"])).sum().backward()
        grads = {"input": x.grad, "weight": module.weight.grad}
        return {k: None if g is None else g.numpy() for k, g in grads.items()}

    def round_trip():  # the judge loads it into torch.nn.RMSNorm
        return recorded_state(loaded("default"))

    observations = {}
    with recording_torch_norms(forbid_torch_norms) as calls:
        for config in MODULE_CONFIGS:
            observations[f"describe:{config}"] = observe(
                lambda c=config: describe_module(construct(c), torch.nn.RMSNorm), (), {}
            )
            observations[f"load:{config}"] = observe(lambda c=config: loaded(c) is not None, (), {})
            x = inputs["x_eps0"] if config == "eps0" else inputs["x"]
            observations[f"forward:{config}"] = observe(
                lambda c=config, x=x: loaded(c)(tensor(x.copy())), (), {}
            )
        observations["forward:float32"] = observe(
            lambda: loaded("default").float()(tensor(inputs["x32"].copy())), (), {}
        )
        observations["forward:float64_tiny"] = observe(
            lambda: loaded("default")(tensor(inputs["x"] * TINY)), (), {}
        )
        observations["forward:noncontiguous"] = observe(
            lambda: loaded("default")(tensor(inputs["x_transposed"].copy()).transpose(1, 2)),
            (),
            {},
        )
        for name, (spec, config, _) in MORE_HALF_INPUTS.items():
            observations[f"half:{name}"] = observe(
                lambda name=name, spec=spec, config=config: half_output(
                    _half_module(loaded(config), spec)(
                        tensor(inputs[name]).to(getattr(torch, spec.dtype))
                    )
                ),
                (),
                {},
            )
        for name in HALF_INPUTS:
            observations[f"half:{name}"] = observe(half, (name,), {})
        observations["gradients"] = observe(gradients, (), {})
        observations["round_trip"] = observe(round_trip, (), {})
    observations[NORM_CALLS] = norm_calls_observation(calls)
    return observations


# What only the kernel knows: a record can fail on it, never earn a point by it
UNVERIFIED = {
    "check_rms_norm_module": (
        "RMSNorm subclasses torch.nn.Module, not torch.nn.RMSNorm",
        "its weight is an nn.Parameter",
        NOT_CALLING_TORCH_NORMS,
    )
}


def _forward_value(observations: dict, reference: dict, key: str, description: str, info: dict):
    """The recorded output of one observed forward pass, or CheckFailed if it raised (or if
    torch's state_dict did not load: ``info`` describes the module, to say why)."""
    __tracebackhide__ = True
    config = key.split(":")[1] if key.startswith("forward:") else "default"
    config = config if config in MODULE_CONFIGS else "default"
    load = observations[f"load:{config}"]
    if load.error:
        expected = reference[f"describe:{config}"].value
        judge_state(info, expected, MODULE_TASK, config_call(config))
        fail(f"{config_call(config)}.load_state_dict(torch.nn.RMSNorm's) raised {load.error}")
    observation = observations[key]
    if observation.not_implemented:
        fail("RMSNorm.forward is not implemented yet: replace the stub with your code.")
    if observation.error:
        hint = f"\nHint: {NON_CONTIGUOUS_HINT}" if key == "forward:noncontiguous" else ""
        fail(f"RMSNorm.forward raised {observation.error} on {description}{hint}")
    return observation


def _half_module(module, spec: LowPrecisionInput):
    """``module`` as the half-precision input ``spec`` meets it: converted, or float32."""
    import torch

    return module.float() if spec.mixed else module.to(getattr(torch, spec.dtype))


def _in_input_dtype(name: str, seed: int) -> list[np.ndarray]:
    """RMSNorm computed wholly in the dtype of the input ``name`` of :data:`MORE_HALF_INPUTS`
    (float64 values): what a module that never upcasts returns."""
    import torch

    spec, config, _ = MORE_HALF_INPUTS[name]
    inputs = module_inputs(seed)
    dtype = getattr(torch, spec.dtype)
    x = torch.from_numpy(inputs[name]).to(dtype)
    weight = torch.from_numpy(inputs["parameters"][config]).to(dtype)
    eps = MODULE_CONFIGS[config].kwargs.get("eps", torch.finfo(torch.float32).eps)
    return [(x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight).double().numpy()]


def _half_variants(name: str, seed: int) -> dict:
    """What torch computes for the half-precision input when the module gets it wrong:
    ``no_upcast`` (all in half precision), ``half_eps`` (eps=None as the input dtype's eps) and
    ``eps <value>`` (eps=None as a fixed value), each as float64 values."""
    import torch

    inputs = module_inputs(seed)
    dtype = getattr(torch, HALF_INPUTS[name][0])
    x = torch.from_numpy(inputs[name]).to(dtype)
    weight = torch.from_numpy(inputs["parameters"]["default"]).to(dtype)
    float32_eps = torch.finfo(torch.float32).eps

    def rms(t, eps):
        return t * torch.rsqrt((t * t).mean(-1, keepdim=True) + eps) * weight

    def upcast(eps):
        return rms(x.float(), eps).to(dtype).double().numpy()

    return {
        "no_upcast": rms(x, float32_eps).double().numpy(),
        "half_eps": upcast(torch.finfo(dtype).eps),
        **{f"eps {eps:g}": upcast(eps) for eps in (1e-5, 1e-6)},
    }


def _judge_half(observations: dict, reference: dict, name: str, seed: int, info: dict) -> None:
    __tracebackhide__ = True
    import torch

    dtype, description, _ = HALF_INPUTS[name]
    description = f"a {description}, shape {(BATCH, TIME, FEATURES)}, module converted with .to()"
    observation = _forward_value(observations, reference, f"half:{name}", description, info)
    conform(observation.value, {"dtype": str, "value": np.ndarray}, "half-precision output")
    mine, theirs = observation.value, reference[f"half:{name}"].value
    if mine["dtype"] != dtype:
        fail(
            f"RMSNorm, on {description}: the output has dtype {mine['dtype']}, but the input was "
            f"{dtype}.\nHint: compute in float32, then cast the result back with .to(x.dtype)."
        )
    if not representable(mine["value"], dtype):  # the dtype named is a claim: check it
        malformed("half-precision output")
    tolerance = dict.fromkeys(("rtol", "atol"), low_precision_tolerance(dtype))
    if np.allclose(mine["value"], theirs["value"], **tolerance):
        return
    variants = _half_variants(name, seed)
    if np.allclose(mine["value"], variants["half_eps"], **tolerance):
        half_eps = torch.finfo(getattr(torch, dtype)).eps
        fail(
            f"RMSNorm, on {description}: with eps=None you used torch.finfo({dtype}).eps "
            f"({half_eps:.2g}), the input dtype's. torch.nn.RMSNorm computes {dtype} input in "
            "float32 and takes float32's eps (about 1.2e-7), large enough to shrink small inputs "
            f"when it is {dtype}'s.\nHint: {EPS_NONE_HINT}"
        )
    for eps in (1e-5, 1e-6):
        if np.allclose(mine["value"], variants[f"eps {eps:g}"], **tolerance):
            fail(
                f"RMSNorm, on {description}: with eps=None you used a fixed eps of {eps:g}."
                f"\nHint: {EPS_NONE_HINT}"
            )
    if not np.allclose(mine["value"], variants["no_upcast"], **tolerance, equal_nan=True):
        compare(
            mine["value"],
            theirs["value"],
            name="RMSNorm",
            what="the output",
            case=Case(description, (), language="torch", **tolerance),
        )
    fail(
        f"RMSNorm, on {description}: your output matches computing the whole norm in {dtype}. "
        "In half precision, x * x overflows (float16 stops at 65504) or underflows, and the mean "
        "square loses its digits; torch.nn.RMSNorm and LLaMA compute in float32.\n"
        "Hint: x32 = x.float(); normalize x32; cast the result back with .to(x.dtype)."
    )


def judge_rms_norm_module(observations: dict, seed: int = 0) -> str:
    """Compare a recorded RMSNorm module with torch.nn.RMSNorm observed the same way.

    In the order of :func:`addnorm_lib.checks.layernorm.judge_layer_norm_module`; eps=None is
    judged on a float64 and a bfloat16 input before the half-precision inputs whose overflow or
    underflow the learner must handle, so that an eps slip is named as one.
    """
    __tracebackhide__ = True
    import torch

    from addnorm_lib.reference import mistakes

    with warnings.catch_warnings():  # torch's note that mixed dtypes skip its fused kernel
        warnings.simplefilter("ignore", UserWarning)
        reference = observe_rms_norm_module(torch.nn.RMSNorm, seed, forbid_torch_norms=False)
    expect_keys("RMSNorm", observations, reference)
    inputs = module_inputs(seed)
    checked = []

    def construction(config):
        return judge_construction(
            observations[f"describe:{config}"], MODULE_TASK, config_call(config)
        )

    def forward(key, description, info, atol=1e-8, hint="", known=(), mistake_args=()):
        observation = _forward_value(observations, reference, key, description, info)
        compare(
            observation.value,
            reference[key].value,
            name="RMSNorm",
            what="the output",
            case=Case(
                description,
                (),
                atol=atol,
                rtol=1e-6 if atol < 1e-6 else 0.0,
                hint=hint,
                language="torch",
            ),
            mistakes=known,
            mistake_args=mistake_args,
            type_name=observation.type_name,
        )

    def named(config, x):
        """The catalogue's mistakes, for a configuration whose weight the judge drew."""
        eps = MODULE_CONFIGS[config].kwargs.get("eps", np.finfo(np.float64).eps)
        weight = inputs["parameters"][config]
        return {"known": mistakes.RMS_NORM_MISTAKES, "mistake_args": (x, weight, eps)}

    x_shape = (BATCH, TIME, FEATURES)
    described = {"default": construction("default")}
    judge_norm_calls(observations[NORM_CALLS], "RMSNorm", MODULE_TASK.math_hint)
    forward(
        "forward:default",
        f"a float64 (B, T, C) = {x_shape} input, after loading torch's state_dict",
        described["default"],
        **named("default", inputs["x"]),
    )
    checked.append("loads a torch.nn.RMSNorm state_dict and matches it in float64")
    forward("forward:float32", "a float32 (B, T, C) input", described["default"], atol=1e-5)
    checked.append("keeps float32 as float32 and matches torch")
    forward(
        "forward:float64_tiny",
        f"a float64 (B, T, C) input of tiny values (RMS about {TINY * 2.4:.0e}), with eps=None",
        described["default"],
        hint=EPS_NONE_HINT,
        known=mistakes.RMS_NORM_DEFAULT_EPS_MISTAKES,
        mistake_args=(inputs["x"] * TINY, inputs["parameters"]["default"]),
    )
    for name in HALF_INPUTS:
        _judge_half(observations, reference, name, seed, described["default"])
    forward(
        "forward:noncontiguous",
        f"a non-contiguous float64 (B, T, C) = {x_shape} input (a transposed view)",
        described["default"],
    )
    checked.append("takes a non-contiguous input (a transposed view)")
    checked.append(
        "eps=None is the machine epsilon of the dtype computed in (float64's for float64 input, "
        "float32's for bfloat16 input)"
    )
    checked.append("float16 and bfloat16 inputs: computed in float32, cast back, as torch")
    judge_gradients(
        observations["gradients"], reference["gradients"], "RMSNorm", "a float64 (B, T, C) input"
    )
    checked.append("gradients of input and weight match torch's")
    described["eps"] = construction("eps")
    forward(
        "forward:eps",
        f"{config_call('eps')} on a {x_shape} input",
        described["eps"],
        **named("eps", inputs["x"]),
    )
    checked.append("uses its eps argument")
    described["eps0"] = construction("eps0")
    eps0 = named("eps0", inputs["x_eps0"])
    forward(
        "forward:eps0",
        f"{config_call('eps0')} on a float64 {x_shape} input of tiny values (RMS about "
        f"{TINY_EPS0:.0e})",
        described["eps0"],
        known=mistakes.RMS_NORM_ZERO_EPS_MISTAKES,
        mistake_args=eps0["mistake_args"],
    )
    checked.append("eps=0 means no eps (not eps=None's)")
    for name, (spec, config, _) in MORE_HALF_INPUTS.items():
        key = f"half:{name}"
        _forward_value(observations, reference, key, spec.description, described[config])
        judge_low_precision(
            observations[key], reference[key].value, spec, "RMSNorm", _in_input_dtype(name, seed)
        )
    checked.append(
        "bfloat16 input of tiny values with eps=0, and float16 input to a float32 module (as "
        "under autocast): returns the input's dtype, within 2 machine epsilons of torch's "
        "(computed in float32)"
    )
    described["tuple"] = construction("tuple")
    forward(
        "forward:tuple",
        f"normalized_shape=({TIME}, {FEATURES}) on a {x_shape} input (mean square "
        "over the last two axes)",
        described["tuple"],
    )
    checked.append("a tuple normalized_shape normalizes over the last len(normalized_shape) axes")
    described["no_affine"] = construction("no_affine")
    forward(
        "forward:no_affine",
        f"{config_call('no_affine')} on a {x_shape} input",
        described["no_affine"],
    )
    checked.append("elementwise_affine=False as in torch")
    for config, info in described.items():
        judge_structure(
            info, reference[f"describe:{config}"].value, MODULE_TASK, config_call(config)
        )
    checked.append("state_dict keys and shapes, nn.Parameter and initial value as torch's")
    judge_round_trip(observations["round_trip"], torch.nn.RMSNorm(FEATURES, dtype=torch.float64))
    checked.append("its state_dict loads into torch.nn.RMSNorm")
    return passed("RMSNorm", checked)


def check_rms_norm_module(cls, seed: int = 0) -> None:
    """Check a learner's torch ``RMSNorm`` class against ``torch.nn.RMSNorm``.

    Outputs in float64, float32, float16 and bfloat16 (computed in float32) after loading torch's
    state_dict, eps=None, gradients against torch's, a custom eps, a tuple normalized_shape,
    elementwise_affine=False; then the state_dict both ways; and that the module calls none of
    torch's own norm ops.
    """
    __tracebackhide__ = True
    run_check("check_rms_norm_module", observe_rms_norm_module, judge_rms_norm_module, cls, seed)


JUDGES = {
    "check_rms_norm": judge_rms_norm,
    "check_rms_norm_backward": judge_rms_norm_backward,
    "check_rms_norm_module": judge_rms_norm_module,
}
