"""Checkers for the LayerNorm exercise: ``layer_norm``, ``layer_norm_backward`` and a torch module.

Each ``check_*`` function runs the learner's code on a fixed set of inputs (seeded, so a failure is
reproducible), raises :class:`CheckFailed` with a specific message at the first problem, and prints
what passed otherwise.
"""

import contextlib
from unittest import mock

import numpy as np

from addnorm_lib import mistakes, norms
from addnorm_lib.checks._core import Case, CheckFailed, call_learner, compare, fail, passed

# float32 input whose mean is 1e3 times its spread: a two-pass variance stays within ~1e-4 of the
# float64 result, E[x^2] - E[x]^2 is off by ~0.1 or more (measured for 64 to 768 features).
LARGE_OFFSET = 1e3
FLOAT32_ATOL = 2e-3


def _affine(rng, features, dtype=np.float64):
    """gamma and beta away from 1 and 0, so that forgetting or swapping them shows."""
    gamma = rng.uniform(0.5, 2.0, features).astype(dtype)  # (C,)
    beta = rng.normal(0.0, 1.0, features).astype(dtype)  # (C,)
    return gamma, beta


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
    ]


def _reference_layer_norm(x, gamma, beta, eps):
    """The reference in float64, cast back to x's dtype: the target for any input precision."""
    as64 = [np.asarray(a, dtype=np.float64) for a in (x, gamma, beta)]
    return norms.layer_norm(*as64, eps=eps).astype(x.dtype)


def check_layer_norm(layer_norm, seed: int = 0) -> None:
    """Check a learner's ``layer_norm(x, gamma, beta, eps=1e-5) -> y`` (numpy).

    Raises CheckFailed naming the first input it gets wrong and, where it can tell, the mistake.
    """
    __tracebackhide__ = True
    cases = layer_norm_cases(seed)
    for case in cases:
        y = call_learner(layer_norm, "layer_norm", case, ("x", "gamma", "beta"))
        expected = _reference_layer_norm(*case.args, case.kwargs["eps"])
        compare(
            y,
            expected,
            name="layer_norm",
            what="the output",
            case=case,
            mistakes=mistakes.LAYER_NORM_MISTAKES,
            mistake_args=(*case.args, case.kwargs["eps"]),
        )
    passed("layer_norm", cases)


def layer_norm_backward_cases(seed: int = 0) -> list[Case]:
    """Inputs for ``layer_norm_backward(dy, x, gamma, eps)``."""
    rng = np.random.default_rng(seed + 1)

    def case(description, shape, eps=1e-5, hint=""):
        x = rng.normal(0.5, 2.0, shape)
        dy = rng.normal(size=shape)
        gamma, _ = _affine(rng, shape[-1])
        return Case(description, (dy, x, gamma), {"eps": eps}, hint=hint)

    return [
        case("a 2-D (N, C) = (4, 6) float64 input", (4, 6)),
        case(
            "a 3-D (B, T, C) = (2, 3, 5) float64 input",
            (2, 3, 5),
            hint="dgamma and dbeta have gamma's shape (C,): sum over every axis except the "
            "last, axis=tuple(range(x.ndim - 1)).",
        ),
        case(
            "eps=0.1 instead of the default",
            (3, 4),
            eps=0.1,
            hint="Use the eps argument, as in the forward pass.",
        ),
    ]


def check_layer_norm_backward(layer_norm_backward, seed: int = 0) -> None:
    """Check a learner's ``layer_norm_backward(dy, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)``."""
    __tracebackhide__ = True
    cases = layer_norm_backward_cases(seed)
    for case in cases:
        grads = call_learner(layer_norm_backward, "layer_norm_backward", case, ("dy", "x", "gamma"))
        if not (isinstance(grads, tuple | list) and len(grads) == 3):
            fail(
                "layer_norm_backward should return a tuple (dx, dgamma, dbeta), "
                f"but returned {type(grads).__name__}"
                + (f" of length {len(grads)}" if isinstance(grads, tuple | list) else "")
                + "."
            )
        expected = norms.layer_norm_backward(*case.args, eps=case.kwargs["eps"])
        mistake_args = (*case.args, case.kwargs["eps"])
        dx_mistakes = mistakes.LAYER_NORM_BACKWARD_DX_MISTAKES
        dgamma_mistakes = mistakes.LAYER_NORM_BACKWARD_DGAMMA_MISTAKES
        for index, (what, known) in enumerate(
            [("dx", dx_mistakes), ("dgamma", dgamma_mistakes), ("dbeta", ())]
        ):
            compare(
                grads[index],
                expected[index],
                name="layer_norm_backward",
                what=what,
                case=case,
                mistakes=known,
                mistake_args=mistake_args,
                pick=lambda out, i=index: out[i],
            )
    passed("layer_norm_backward", cases)


# ----------------------------------------------------------------------------------------------
# The torch module.

_TORCH_NORM_FUNCTIONS = ("layer_norm", "native_layer_norm", "group_norm", "batch_norm", "rms_norm")


@contextlib.contextmanager
def _torch_norms_forbidden():
    """Make torch's own norm functions raise, so a module that calls them is caught."""
    import torch
    import torch.nn.functional as F

    def forbidden(*args, **kwargs):
        raise CheckFailed(
            "Your LayerNorm calls torch's own normalization function. The point of the exercise is "
            "to write the math yourself with tensor operations (mean, subtraction, sqrt, ...)."
        )

    patches = [
        mock.patch.object(module, fn_name, forbidden)
        for module in (torch, F)
        for fn_name in _TORCH_NORM_FUNCTIONS
        if hasattr(module, fn_name)
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


def _construct(cls, *args, **kwargs):
    __tracebackhide__ = True
    call = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    try:
        return cls(*args, **kwargs)
    except NotImplementedError as err:
        fail(
            f"LayerNorm({call}) is not implemented yet: replace the stub with your code.", cause=err
        )
    except Exception as err:
        fail(
            f"LayerNorm({call}) raised {type(err).__name__}: {err}\nHint: the constructor mirrors "
            "torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True).",
            cause=err,
        )


def _forward(module, x, description):
    __tracebackhide__ = True
    try:
        with _torch_norms_forbidden():
            return module(x)
    except CheckFailed:
        raise
    except NotImplementedError as err:
        fail(
            "LayerNorm.forward is not implemented yet: replace the stub with your code.", cause=err
        )
    except Exception as err:
        fail(f"LayerNorm.forward raised {type(err).__name__} on {description}: {err}", cause=err)


def _check_parameters(module, expected_names, shape, call):
    __tracebackhide__ = True
    state = module.state_dict()
    if sorted(state) != sorted(expected_names):
        fail(
            f"{call}.state_dict() has keys {sorted(state)}, but torch.nn.LayerNorm's are "
            f"{sorted(expected_names)}. Register nn.Parameter attributes named exactly like "
            "torch's (weight, bias), or register_parameter('bias', None) when there is no bias."
        )
    parameters = dict(module.named_parameters())
    for key in expected_names:
        if key not in parameters:
            fail(
                f"{call}.{key} is in the state_dict but is not an nn.Parameter, so an optimizer "
                "would never train it: wrap it in nn.Parameter."
            )
        if tuple(parameters[key].shape) != shape:
            fail(f"{call}.{key} has shape {tuple(parameters[key].shape)}; it should be {shape}.")


def check_layer_norm_module(cls, seed: int = 0) -> None:
    """Check a learner's torch ``LayerNorm`` class against ``torch.nn.LayerNorm``.

    Construction and attributes, parameter names and shapes, loading torch's state_dict both ways,
    forward in float64 and float32 on (B, T, C) input, a custom eps, a tuple normalized_shape,
    gradients against torch's, and that torch's own norm functions are not called.
    """
    __tracebackhide__ = True
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 2)
    batch, time, features = 2, 3, 5
    checked = []

    module = _construct(cls, features)
    if not isinstance(module, torch.nn.Module):
        fail("LayerNorm must be a torch.nn.Module subclass.")
    if isinstance(module, torch.nn.LayerNorm):
        fail(
            "Your LayerNorm subclasses torch.nn.LayerNorm; subclass torch.nn.Module and write the "
            "math yourself."
        )
    for attribute, value in [
        ("normalized_shape", (features,)),
        ("eps", 1e-5),
        ("elementwise_affine", True),
    ]:
        if getattr(module, attribute, None) != value:
            fail(
                f"LayerNorm({features}).{attribute} should be {value!r} (as in "
                f"torch.nn.LayerNorm), but it is {getattr(module, attribute, '<missing>')!r}."
            )
    _check_parameters(module, ["weight", "bias"], (features,), f"LayerNorm({features})")
    if not (torch.all(module.weight == 1) and torch.all(module.bias == 0)):
        fail("A new LayerNorm should start with weight = 1 and bias = 0, as torch.nn.LayerNorm.")
    checked.append("constructor, attributes and parameters as torch.nn.LayerNorm")

    def torch_twin(*args, **kwargs):
        twin = torch.nn.LayerNorm(*args, **kwargs, dtype=torch.float64)
        with torch.no_grad():
            for parameter in twin.parameters():
                parameter.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, parameter.shape)))
        return twin

    def load_into(module, twin, call):
        module = module.double()  # before loading, so float64 parameters are not rounded to float32
        try:
            module.load_state_dict(twin.state_dict())
        except Exception as err:
            fail(f"{call}.load_state_dict(torch.nn.LayerNorm state_dict) failed: {err}", cause=err)
        return module

    def compare_forward(module, twin, x, description, atol=1e-8):
        y = _forward(module, x, description)
        expected = twin(x.double()).to(x.dtype)
        parameters = [p.detach().double().numpy() for p in twin.parameters()]
        mistake_args = ()
        if len(twin.normalized_shape) == 1 and len(parameters) == 2:
            mistake_args = (x.double().numpy(), *parameters, twin.eps)
        case = Case(description, (x,), atol=atol, rtol=1e-6 if atol < 1e-6 else 0.0)
        compare(
            y,
            expected.detach().numpy(),
            name="LayerNorm",
            what="the output",
            case=case,
            mistakes=mistakes.LAYER_NORM_MISTAKES if mistake_args else (),
            mistake_args=mistake_args,
        )
        return y

    twin = torch_twin(features)
    module = load_into(module, twin, f"LayerNorm({features})")
    x = torch.from_numpy(rng.normal(1.0, 2.0, (batch, time, features)))
    compare_forward(module, twin, x, f"a (B, T, C) = {(batch, time, features)} float64 input")
    checked.append("loads a torch.nn.LayerNorm state_dict and matches it in float64")

    x32 = (torch.from_numpy(rng.normal(size=(batch, time, features))) + 10).float()
    module_32 = load_into(_construct(cls, features), twin, f"LayerNorm({features})").float()
    compare_forward(module_32, twin, x32, "a float32 (B, T, C) input", atol=1e-5)
    checked.append("keeps float32 as float32 and matches torch")

    x_grad = x.clone().requires_grad_(True)
    x_twin = x.clone().requires_grad_(True)
    upstream = torch.from_numpy(rng.normal(size=x.shape))
    (_forward(module, x_grad, "a float64 input") * upstream).sum().backward()
    (twin(x_twin) * upstream).sum().backward()
    for what, mine, theirs in [
        ("the input", x_grad.grad, x_twin.grad),
        ("weight", module.weight.grad, twin.weight.grad),
        ("bias", module.bias.grad, twin.bias.grad),
    ]:
        if mine is None:
            fail(
                f"No gradient reached LayerNorm's {what}: is it used in forward, as an "
                "nn.Parameter (or the input), without .detach() or .data?"
            )
        compare(
            mine,
            theirs.numpy(),
            name="LayerNorm",
            what=f"the gradient of {what}",
            case=Case("a float64 (B, T, C) input, backward by autograd", ()),
        )
    checked.append("gradients of input, weight and bias match torch's")

    twin = torch_twin(features, eps=0.1)
    module = load_into(_construct(cls, features, eps=0.1), twin, f"LayerNorm({features}, eps=0.1)")
    compare_forward(
        module,
        twin,
        torch.from_numpy(rng.normal(size=(4, features))),
        "eps=0.1 with a (4, 5) input",
    )
    checked.append("uses its eps argument")

    call = f"LayerNorm(({time}, {features}))"
    module = _construct(cls, (time, features))
    _check_parameters(module, ["weight", "bias"], (time, features), call)
    twin = torch_twin((time, features))
    module = load_into(module, twin, call)
    compare_forward(
        module,
        twin,
        x,
        f"normalized_shape=({time}, {features}) on a {tuple(x.shape)} "
        "input (statistics over the last two axes)",
    )
    checked.append("a tuple normalized_shape normalizes over the last len(normalized_shape) axes")

    for kwargs, names in [({"bias": False}, ["weight"]), ({"elementwise_affine": False}, [])]:
        call = f"LayerNorm({features}, {', '.join(f'{k}={v}' for k, v in kwargs.items())})"
        module = _construct(cls, features, **kwargs)
        _check_parameters(module, names, (features,), call)
        twin = torch_twin(features, **kwargs)
        module = load_into(module, twin, call)
        compare_forward(module, twin, x, f"{call} on a (B, T, C) input")
    checked.append("bias=False and elementwise_affine=False as in torch")

    twin = torch.nn.LayerNorm(features, dtype=torch.float64)
    try:
        twin.load_state_dict(
            load_into(_construct(cls, features), torch_twin(features), "LayerNorm").state_dict()
        )
    except Exception as err:
        fail(f"torch.nn.LayerNorm could not load your module's state_dict: {err}", cause=err)
    checked.append("its state_dict loads into torch.nn.LayerNorm")

    print(f"✓ LayerNorm passed {len(checked)} checks:")
    for item in checked:
        print(f"    - {item}")
