"""What the torch-module checks (LayerNorm, RMSNorm, BatchNorm1d) share.

- Recording calls of torch's own norm ops while a check observes a learner's module
  (:func:`recording_torch_norms`): a torch function mode sees every torch function however it was
  reached (``F.layer_norm``, ``torch.rms_norm``, a name looked up by ``getattr``, a bound
  ``from torch.nn.functional import layer_norm``, an ``nn.LayerNorm`` inside the module), and a
  torch dispatch mode sees every aten op however it was reached
  (``torch.ops.aten.native_layer_norm`` included). Nothing is patched and nothing raises: the
  module runs as it would, and the names of the norm ops it called go into the record
  (:data:`NORM_CALLS`), where the judge reads them.
- Describing a constructed module as plain data (:func:`describe_module`), and judging it against
  torch's own module described the same way: construction, state_dict keys and shapes, which
  entries are nn.Parameters, initial values.
- Judging a recorded state_dict by loading it into torch's own module, in the judge.

A record that reports a norm call fails (it can only cost points); a record that reports none is
not proof, since only the kernel saw the module run. The grader says so in its feedback
(:data:`NOT_CALLING_TORCH_NORMS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from addnorm_lib.checks._core import (
    PLAIN,
    Case,
    ListOf,
    MapOf,
    Observation,
    compare,
    conform,
    fail,
    malformed,
    plain,
)

#: an op whose name contains one of these is one of torch's own norms (its backward too)
NORM_OPS = ("layer_norm", "rms_norm", "batch_norm", "group_norm", "instance_norm")
#: the key of the observation that lists the norm ops a module called
NORM_CALLS = "norm_calls"
MAX_CALLS, MAX_NAME = 20, 120  # names of norm ops kept in a record, characters of each
NOT_CALLING_TORCH_NORMS = "it computes the norm without torch's built-in norm functions"


def is_norm_op(name: str) -> bool:
    """Whether an op's name (``"aten.native_layer_norm.default"``, ``"layer_norm"``) is a norm's."""
    return any(op in name for op in NORM_OPS)


def op_name(func) -> str:
    """How a message names a torch function or aten op: ``torch.nn.functional.layer_norm``,
    ``torch.layer_norm``, ``aten.native_layer_norm.default``."""
    name = getattr(func, "__name__", None)
    module = getattr(func, "__module__", None)
    if not isinstance(name, str) or not isinstance(module, str) or module.startswith("torch._ops"):
        return str(func)[:MAX_NAME]
    return f"{module}.{name}"[:MAX_NAME]


@contextlib.contextmanager
def recording_torch_norms(enabled: bool = True) -> Iterator[list[str]]:
    """Within the block, append to the yielded list the name of every torch norm op called.

    ``enabled=False`` records nothing (the reference, torch's own module, is observed so).
    """
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[str] = []

    def note(func) -> None:
        name = op_name(func)
        if is_norm_op(name) and name not in calls and len(calls) < MAX_CALLS:
            calls.append(name)

    class Functions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            note(func)
            return func(*args, **(kwargs or {}))

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            note(func)
            return func(*args, **(kwargs or {}))

    if not enabled:
        yield calls
        return
    with Functions(), Ops():
        yield calls


def norm_calls_observation(calls: list[str]) -> Observation:
    """The observation that records which torch norm ops were called (see :data:`NORM_CALLS`):
    the functions a learner writes (``torch.nn.functional.layer_norm``) before the aten ops."""
    return Observation(sorted(calls, key=lambda name: (name.startswith("aten."), name)), "list")


def judge_norm_calls(observation, name: str, hint: str, language: str = "torch") -> None:
    """CheckFailed if the record says that the learner's code called torch's own norm ops.

    ``hint`` names the operations to write the math with instead, in ``language`` ("torch" for
    a module, "numpy" for a numpy function).
    """
    __tracebackhide__ = True
    if not isinstance(observation, Observation):
        conform(observation, Observation, "norm calls")
    conform(observation.value, ListOf(str), "norm calls")
    if observation.value:
        called = ", ".join(observation.value[:4])
        operations = "numpy operations" if language == "numpy" else "tensor operations"
        fail(
            f"Your {name} calls torch's own normalization functions ({called}), directly or "
            "through a torch module. The point of the exercise is to write the math yourself "
            f"with {operations} ({hint}); calling a built-in norm costs this test its points."
        )


# ----------------------------------------------------------------------------------------------
# A constructed module, described as plain data

#: What :func:`describe_module` records
DESCRIPTION = {
    "is_module": bool,
    "subclasses_torch": bool,
    "state": MapOf({"shape": ListOf(int), "dtype": str}),
    "parameters": ListOf(str),
    "initial": MapOf(np.ndarray),
}


def describe_module(module, torch_class) -> dict:
    """A newly constructed module as plain data: what it is, its state_dict (shapes, dtypes and
    values) and which of its entries are parameters (see :data:`DESCRIPTION`)."""
    import torch

    state = module.state_dict()
    return {
        "is_module": isinstance(module, torch.nn.Module),
        "subclasses_torch": isinstance(module, torch_class),
        "state": {
            k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
            for k, v in state.items()
        },
        "parameters": [name for name, _ in module.named_parameters()],
        "initial": {k: v.detach().double().numpy() for k, v in state.items()},
    }


@dataclass(frozen=True)
class ModuleTask:
    """What the messages about one module exercise say.

    Attributes:
        name: the learner's class, e.g. "LayerNorm".
        torch_class: torch's, e.g. "torch.nn.LayerNorm".
        signature: torch's constructor, said when the learner's raises.
        state_hint: how to register the state_dict's entries, said when they differ from torch's.
        math_hint: the tensor operations to write the math with.
    """

    name: str
    torch_class: str
    signature: str
    state_hint: str
    math_hint: str


@dataclass(frozen=True)
class ModuleConfig:
    """One constructor call of a module exercise's class, as its check makes it.

    Attributes:
        args: the positional arguments, e.g. ``(5,)``.
        kwargs: the keyword arguments, e.g. ``{"eps": 0.1}``.
        parameters: the names of the parameters the call's module registers, e.g.
            ``("weight", "bias")``; empty when it registers none.
        shape: their shape, e.g. ``(5,)``; None when there are none.
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    parameters: tuple[str, ...] = ()
    shape: tuple[int, ...] | None = None

    def build(self, cls):
        """``cls`` constructed with this call's arguments."""
        return cls(*self.args, **self.kwargs)

    def call(self, name: str) -> str:
        """How a message names the call, e.g. ``LayerNorm(5, eps=0.1)``."""
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{name}({', '.join(shown)})"


def judge_construction(observation, task: ModuleTask, call: str) -> dict:
    """The description of ``call``'s module (:data:`DESCRIPTION`), or CheckFailed if it could not
    be constructed, is no nn.Module, or subclasses torch's own class (not written by hand)."""
    __tracebackhide__ = True
    if not isinstance(observation, Observation):
        conform(observation, Observation, "description")
    if observation.not_implemented:
        fail(f"{call} is not implemented yet: replace the stub with your code.")
    if observation.error:
        fail(f"{call} raised {observation.error}\nHint: the constructor mirrors {task.signature}.")
    conform(observation.value, DESCRIPTION, "description")
    info = observation.value
    if not info["is_module"]:
        fail(f"{task.name} must be a torch.nn.Module subclass.")
    if info["subclasses_torch"]:
        fail(
            f"Your {task.name} subclasses {task.torch_class}; subclass torch.nn.Module and write "
            "the math yourself."
        )
    return info


def judge_state(
    info: dict, expected: dict, task: ModuleTask, call: str, hint: str | None = None
) -> None:
    """CheckFailed unless ``call``'s state_dict has torch's keys and shapes (``expected`` is
    torch's module described the same way): else no torch state_dict loads into it.

    ``hint`` is said when the keys differ (by default, the task's ``state_hint``).
    """
    __tracebackhide__ = True
    mine, theirs = info["state"], expected["state"]
    if sorted(mine) != sorted(theirs):
        fail(
            f"{call}.state_dict() has keys {sorted(mine)}, but {task.torch_class}'s are "
            f"{sorted(theirs)}.\nHint: {hint or task.state_hint}"
        )
    for key, entry in theirs.items():
        if mine[key]["shape"] != entry["shape"]:
            fail(
                f"{call}.{key} has shape {tuple(mine[key]['shape'])}; it should be "
                f"{tuple(entry['shape'])}, as in {task.torch_class}."
            )


def judge_structure(info: dict, expected: dict, task: ModuleTask, call: str) -> None:
    """After the numbers: torch's keys and shapes, the same entries as nn.Parameters, the same
    initial values, and the dtypes torch gives entries that are not floating point."""
    __tracebackhide__ = True
    judge_state(info, expected, task, call)
    for key in expected["parameters"]:
        if key not in info["parameters"]:
            fail(
                f"{call}.{key} is in the state_dict but is not an nn.Parameter, so an optimizer "
                "would never train it: wrap it in nn.Parameter."
            )
    for key, entry in expected["state"].items():
        floating = entry["dtype"].startswith(("float", "bfloat"))
        if not floating and info["state"][key]["dtype"] != entry["dtype"]:
            fail(
                f"{call}.{key} has dtype {info['state'][key]['dtype']}; {task.torch_class}'s is "
                f"{entry['dtype']}.\nHint: {task.state_hint}"
            )
        if not np.array_equal(info["initial"][key], expected["initial"][key]):
            values = np.unique(expected["initial"][key])
            shown = f"{values[0]:g}" if values.size == 1 else str(expected["initial"][key])
            fail(
                f"A new {call} should start with {key} = {shown}, as {task.torch_class}; yours "
                f"starts at {info['initial'][key]}."
            )


# ----------------------------------------------------------------------------------------------
# The state_dict, loaded into torch's own module in the judge


def recorded_state(module) -> dict:
    """A module's state_dict as plain data (numpy arrays), for the judge to load into torch's."""
    return {key: plain(value) for key, value in module.state_dict().items()}


def judge_round_trip(observation, torch_module) -> None:
    """Load a recorded state_dict (:func:`recorded_state`) into ``torch_module``, here.

    CheckFailed, worded as torch's refusal, if recording it raised or torch does not take it.
    """
    __tracebackhide__ = True
    import torch

    refused = f"torch.nn.{type(torch_module).__name__} could not load your module's state_dict: "
    if observation.error:
        fail(refused + observation.error)
    conform(observation.value, MapOf(PLAIN), "state_dict")
    try:
        state = {k: torch.from_numpy(np.asarray(v)) for k, v in observation.value.items()}
        torch_module.load_state_dict(state)
    except Exception as err:
        fail(f"{refused}{type(err).__name__}: {err}")


# ----------------------------------------------------------------------------------------------
# Low-precision and mixed-dtype inputs: what torch's norms return, and how close is right
#
# torch 2.13's nn.LayerNorm, nn.RMSNorm and nn.BatchNorm1d, given a float16 or bfloat16 input,
# compute in float32 and return the input's dtype, both when the module was converted to that
# dtype and when its parameters stayed float32 (as under autocast) (measured on CPU). A module
# that computes in float32 and rounds once to the input's dtype stays within one unit in the
# last place of torch's output; one that computes in bfloat16 is off by 20 or more on the
# inputs these checks draw (measured; tests/checks/test_{layernorm,rmsnorm,batchnorm}.py hold it).

#: what a half-precision forward pass records: the output's dtype and its values in float64
HALF_OUTPUT = {"dtype": str, "value": np.ndarray}
LOW_PRECISION_ULPS = 2  # the tolerance, in machine epsilons of the input's dtype
VARIANT_SLACK = 4  # a wrong output is named "computed in half precision" within 4 tolerances


def half_output(y) -> dict:
    """A forward pass's output as :data:`HALF_OUTPUT`: its dtype's name and float64 values."""
    return {"dtype": str(y.dtype).removeprefix("torch."), "value": y.detach().double()}


def low_precision_tolerance(dtype: str) -> float:
    """atol and rtol for a ``dtype`` output: two machine epsilons of that dtype."""
    import torch

    return LOW_PRECISION_ULPS * torch.finfo(getattr(torch, dtype)).eps


def representable(values: np.ndarray, dtype: str) -> bool:
    """Whether every value (recorded in float64) is one that torch's ``dtype`` can hold."""
    import torch

    if not isinstance(values, np.ndarray) or values.dtype != np.float64:
        return False
    as_recorded = torch.from_numpy(values)
    round_trip = as_recorded.to(getattr(torch, dtype)).double()
    return bool(torch.equal(round_trip.nan_to_num(0.5), as_recorded.nan_to_num(0.5)))


@dataclass(frozen=True)
class LowPrecisionInput:
    """One half-precision forward pass of a module check.

    Attributes:
        dtype: the input's dtype, "float16" or "bfloat16".
        description: how messages name the input and the module's dtype.
        mixed: the module's parameters stay float32 (as under autocast) instead of being
            converted to ``dtype``.
    """

    dtype: str
    description: str
    mixed: bool = False


def judge_low_precision(
    observation: Observation,
    expected: dict,
    spec: LowPrecisionInput,
    name: str,
    in_input_dtype: Sequence[np.ndarray] = (),
) -> None:
    """Judge a recorded half-precision output (:data:`HALF_OUTPUT`) against torch's.

    The dtype first (torch returns the input's), then the values within
    :func:`low_precision_tolerance`; when they differ and match one of ``in_input_dtype`` (the
    norm computed in the input's dtype by the judge, each a way to write it), the message says
    so.
    """
    __tracebackhide__ = True
    conform(observation.value, HALF_OUTPUT, "half-precision output")
    mine = observation.value
    where = f"{name}, on {spec.description}"
    if mine["dtype"] != spec.dtype:
        promoted = (
            f" With float32 parameters, `y * self.weight` promotes a {spec.dtype} y to float32."
            if spec.mixed
            else ""
        )
        fail(
            f"{where}: the output has dtype {mine['dtype']}, but the input was {spec.dtype}; "
            f"torch's returns {spec.dtype}.{promoted}\nHint: compute in float32 (x.float()), "
            "then cast the result back with .to(x.dtype)."
        )
    if not representable(mine["value"], spec.dtype):  # the dtype named is a claim: check it
        malformed("half-precision output")
    tolerance = low_precision_tolerance(spec.dtype)
    if np.allclose(mine["value"], expected["value"], atol=tolerance, rtol=tolerance):
        return
    # the same computation rounds differently with each order of operations: match it loosely
    loose = VARIANT_SLACK * tolerance
    if any(
        np.allclose(mine["value"], variant, atol=loose, rtol=loose, equal_nan=True)
        for variant in in_input_dtype
    ):
        fail(
            f"{where}: your output matches computing the whole norm in {spec.dtype}. "
            f"{spec.dtype} keeps {8 if spec.dtype == 'bfloat16' else 11} significant bits: its "
            "statistics lose their digits (x - mean, when the mean is large next to the spread; "
            f"x * x of tiny values), and torch's {name} computes {spec.dtype} input in float32."
            "\nHint: x32 = x.float(); compute the norm of x32; cast the result back with "
            ".to(x.dtype)."
        )
    compare(
        mine["value"],
        np.asarray(expected["value"]),
        name=name,
        what="the output",
        case=Case(spec.description, (), atol=tolerance, rtol=tolerance, language="torch"),
    )


#: said when a forward pass raises on a non-contiguous input
NON_CONTIGUOUS_HINT = (
    "x may be a view whose memory is not in row order (x.transpose(...), a slice): .view() "
    "refuses it. Use .reshape() (or .contiguous() first), which works on any tensor."
)
