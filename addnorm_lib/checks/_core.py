"""What every checker shares: calling a learner's code safely, comparing, and naming mistakes.

A checker runs a learner's function on a sequence of :class:`Case` inputs and raises
:class:`CheckFailed` at the first problem, with a message written for the learner: which input,
what is wrong, and (when the result matches an entry of :mod:`addnorm_lib.reference.mistakes`) what
they probably did and how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the graded kernel cannot import mistakes (it is hidden there)
    from addnorm_lib.reference.mistakes import Mistake


class CheckFailed(AssertionError):
    """A check found a problem; the message says what and how to fix it."""


class RecordMalformed(Exception):
    """A record that no observation makes (a forged or truncated file): it earns nothing.

    The grader answers it with a neutral message; it never says which part was wrong.
    """


ERROR_LIMIT = 2000  # characters of a learner's exception message kept in an observation


@dataclass(frozen=True)
class Case:
    """One input to check a function on.

    Attributes:
        description: how the message names this input, e.g. "a 3-D (B, T, C) float64 input".
        args: positional arguments of the function under check.
        kwargs: keyword arguments of the function under check.
        hint: said when this case fails and no known mistake matches (what this case tests).
        output_hints: for a function that returns a tuple, hints that concern one output only
            (``{"dgamma": ...}``): said, instead of ``hint``, when that output is wrong.
        atol, rtol: tolerance of the comparison with the reference.
        language: "numpy" or "torch", the language of the code under check, in which the
            advice is written; "" (the default) reads it from the arguments (a torch tensor
            among them: torch).
    """

    description: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    hint: str = ""
    output_hints: dict = field(default_factory=dict)
    atol: float = 1e-8
    rtol: float = 1e-6
    language: str = ""


def language_of(case: Case, type_name: str | None = None) -> str:
    """``"torch"`` or ``"numpy"``: the language of the code under check, for advice in it.

    The case's own ``language`` if it names one; else torch if a tensor is among its arguments
    or the code returned one (``type_name`` "Tensor"); else numpy.
    """
    if case.language:
        return case.language
    if any(is_tensor(a) for a in case.args) or type_name in ("Tensor", "Parameter"):
        return "torch"
    return "numpy"


#: advice about in-place changes, by language (see :func:`judge_call`)
IN_PLACE_ADVICE = {
    "numpy": "write `x = x - mean`, not `x -= mean`, or work on a copy (`x.copy()`)",
    "torch": "write `x = x * alpha` (a new tensor), not `x.mul_(alpha)` or `x *= alpha`, or "
    "work on a copy (`x.clone()`)",
}
#: advice about a wrong dtype, by language (see :func:`compare`)
DTYPE_ADVICE = {
    "numpy": "avoid mixing in float64 arrays or constants, or cast with .astype(x.dtype)",
    "torch": "avoid mixing in tensors of another dtype (float64 ones from numpy, float32 "
    "parameters with a half-precision input), or cast the result with .to(x.dtype)",
}
#: what a returned array should be, by language
ARRAY_KIND = {"numpy": "a numpy array", "torch": "a torch tensor"}
#: the tolerance of a case that checks that float64 input is computed in float64: correct
#: float64 code agrees with the float64 reference to about 1e-15, code that goes through float32
#: on the way (an array or constant of that dtype, a torch tensor of torch's default dtype) only
#: to about 1e-7, which the default tolerance does not always tell apart
FLOAT64_TOLERANCE = {"atol": 1e-12, "rtol": 1e-10}
#: what such a case says when it fails
FLOAT64_HINT = (
    "Compute float64 input in float64 all the way: a float32 array, constant or torch tensor "
    "on the way (np.float32, torch's default dtype) keeps only about 7 significant digits."
)
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def argument_name(index: int, arg_names: Sequence[str] = ()) -> str:
    """How a message names argument ``index``: ``argument `x` `` or ``second argument``."""
    if index < len(arg_names):
        return f"argument `{arg_names[index]}`"
    return f"{ORDINALS[index]} argument" if index < len(ORDINALS) else f"argument {index + 1}"


def fail(message: str, *, cause: BaseException | None = None):
    """Raise CheckFailed with ``message``; hide the checker's own frames from IPython tracebacks."""
    __tracebackhide__ = True
    raise CheckFailed(message) from cause


def shape_of(value) -> str:
    """``value``'s shape as a string, e.g. ``"(4, 6)"``, or its type's name if it has none."""
    return str(tuple(value.shape)) if hasattr(value, "shape") else type(value).__name__


def describe_args(args: Sequence) -> str:
    """The arguments for a message: arrays as shape and dtype, anything else as its repr."""
    return ", ".join(f"{shape_of(a)} {a.dtype}" if hasattr(a, "dtype") else repr(a) for a in args)


@dataclass
class Observation:
    """What learner code did on one input, as plain data (no learner objects survive in it).

    Attributes:
        value: what it returned, made plain: arrays (torch tensors become numpy arrays), lists and
            dicts of plain values, str/int/float/bool/None; anything else becomes None.
        type_name: the type of the returned value ("ndarray", "tuple", "list", ...).
        error: "ExceptionType: message" if it raised, else None.
        not_implemented: it raised NotImplementedError (a stub).
        inputs: the arguments as they were after the call, one entry per argument: a copy of
            each numpy array the function was given, None for any other argument. The judge
            compares them with the inputs it draws itself, so "did not modify its input" is
            checked where the learner's code never ran.

    The judge believes what a record says about itself only where it can cost points (``error``,
    ``not_implemented``); anything else it compares with what it computes itself, or, where it
    cannot (what only the kernel saw), lists as unverified (a check module's ``UNVERIFIED``).
    """

    value: object = None
    type_name: str = "NoneType"
    error: str | None = None
    not_implemented: bool = False
    inputs: list = field(default_factory=list)


def plain(value):
    """A learner's return value as plain data (see Observation.value)."""
    value = as_numpy(value)
    if isinstance(value, np.ndarray):
        return value if value.dtype != object else None
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return None


def _error_text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= ERROR_LIMIT else text[:ERROR_LIMIT] + " ..."


def is_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor (checked without importing torch)."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def copied(arg):
    """A copy of a numpy array or torch tensor argument (the tensor detached, as the caller's
    own would be: a function that changes it in place is seen doing so); anything else as is."""
    if isinstance(arg, np.ndarray):
        return np.array(arg, copy=True)
    return arg.detach().clone() if is_tensor(arg) else arg


def as_array(value):
    """A numpy array or tensor argument as a numpy array (what is recorded of it); else None."""
    if isinstance(value, np.ndarray):
        return value
    return value.detach().cpu().numpy() if is_tensor(value) else None


def observe(fn: Callable, args: Sequence, kwargs: dict):
    """Call ``fn(*args, **kwargs)`` on copies of the arrays and tensors; record what happened.

    The copies are recorded after the call (:attr:`Observation.inputs`), for the judge to see
    whether the function modified them.
    """
    copies = [copied(a) for a in args]
    try:
        value = fn(*copies, **kwargs)
    except NotImplementedError as err:
        observation = Observation(error=_error_text(err), not_implemented=True)
    except Exception as err:
        observation = Observation(error=_error_text(err))
    else:
        observation = Observation(plain(value), type(value).__name__)
    observation.inputs = [as_array(c) for c in copies]
    return observation


def observe_cases(
    fn: Callable, cases: Sequence[Case], record_norm_calls: bool = False
) -> list[Observation]:
    """Observe ``fn`` on every case (the observing half of a check): one Observation per case.

    With ``record_norm_calls`` (the norm exercises' numpy functions), the names of torch's own
    norm ops that ``fn`` called on the way follow as one more observation, the last
    (:func:`addnorm_lib.checks._torch.norm_calls_observation`); the judge reads it with
    ``norm_calls=True``.
    """
    if not record_norm_calls:
        return [observe(fn, case.args, case.kwargs) for case in cases]
    from addnorm_lib.checks._torch import norm_calls_observation, recording_torch_norms

    with recording_torch_norms() as calls:
        observations = [observe(fn, case.args, case.kwargs) for case in cases]
    return [*observations, norm_calls_observation(calls)]


def malformed(what: str):
    """RecordMalformed: ``what`` is not as an observation records it."""
    __tracebackhide__ = True
    raise RecordMalformed(what)


def conform(value, schema, what: str = "the record") -> None:
    """RecordMalformed unless ``value`` has the structure ``schema`` describes.

    A schema is a type or a tuple of types (``int`` does not take a bool), a dict (exactly these
    keys, each value conforming), :class:`ListOf` or :class:`MapOf` (any length, any str keys),
    or :data:`PLAIN` (anything an observation records).
    """
    __tracebackhide__ = True
    if schema is PLAIN:
        return
    if isinstance(schema, dict):
        if not isinstance(value, dict) or set(value) != set(schema):
            malformed(what)
        for key, item in schema.items():
            conform(value[key], item, what)
    elif isinstance(schema, ListOf | MapOf):
        if not isinstance(value, list if isinstance(schema, ListOf) else dict):
            malformed(what)
        for item in value if isinstance(value, list) else value.values():
            conform(item, schema.item, what)
    else:
        types = schema if isinstance(schema, tuple) else (schema,)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            malformed(what)


@dataclass(frozen=True)
class ListOf:
    """A schema of :func:`conform`: a list of any length, every item conforming to ``item``."""

    item: object


@dataclass(frozen=True)
class MapOf:
    """A schema of :func:`conform`: a dict with any str keys, every value conforming to ``item``."""

    item: object


#: a schema of :func:`conform`: any value that an observation records
PLAIN = object()


def expect_observations(name: str, observations, count: int) -> None:
    """Exactly ``count`` observations in a list, one per case; else the check fails."""
    __tracebackhide__ = True
    if not isinstance(observations, list) or not all(
        isinstance(o, Observation) for o in observations
    ):
        malformed("observations")
    if len(observations) != count:
        incomplete(name)


def expect_keys(name: str, observations, keys) -> None:
    """Observations in a dict with exactly the keys ``keys``; else the check fails."""
    __tracebackhide__ = True
    if not isinstance(observations, dict) or not all(
        isinstance(o, Observation) for o in observations.values()
    ):
        malformed("observations")
    if set(observations) != set(keys):
        incomplete(name)


def incomplete(name: str):
    """CheckFailed for a record that lacks some observations (the check was cut short)."""
    __tracebackhide__ = True
    fail(f"{name}: the recorded observations are incomplete; the check did not run to the end.")


def judged_calls(
    name: str,
    cases: Sequence[Case],
    observations: Sequence[Observation],
    arg_names: Sequence[str] = (),
):
    """Yield (case, observation, returned value) per case; CheckFailed at a raised or bad call.

    ``arg_names`` name the arguments in the message of a call that modified one in place.
    """
    __tracebackhide__ = True
    expect_observations(name, observations, len(cases))
    for case, observation in zip(cases, observations, strict=True):
        yield case, observation, judge_call(observation, name, case, arg_names)


def modified_argument(observation: Observation, case: Case) -> int | None:
    """The position of the first array or tensor argument the call changed, judged here, or None.

    The observation recorded each argument after the call; each must be an array of the case's
    shape and dtype (else the record is malformed), equal to the case's own, drawn by the judge.
    """
    __tracebackhide__ = True
    after = observation.inputs
    if not isinstance(after, list) or len(after) != len(case.args):
        malformed("inputs")
    for index, (argument, passed) in enumerate(zip(case.args, after, strict=True)):
        original = as_array(argument)
        if original is None:
            continue
        if not (
            isinstance(passed, np.ndarray)
            and passed.shape == original.shape
            and passed.dtype == original.dtype
        ):
            malformed("inputs")
        if not np.array_equal(original, passed, equal_nan=True):
            return index
    return None


def judge_call(observation: Observation, name: str, case: Case, arg_names: Sequence[str] = ()):
    """The returned value of an observed call, or CheckFailed if it raised or changed its input."""
    __tracebackhide__ = True
    if not isinstance(observation, Observation):
        malformed("observation")
    if observation.not_implemented:
        fail(
            f"{name} is not implemented yet: replace the `raise NotImplementedError()` stub with "
            "your code."
        )
    if observation.error is not None:
        fail(
            f"{name} raised {observation.error.replace(': ', ' on ' + case.description + ': ', 1)}"
            f" (arguments: {describe_args(case.args)})" + _explain(None, case)
        )
    index = modified_argument(observation, case)
    if index is not None:
        language = language_of(case)
        kind = "tensor" if language == "torch" else "array"
        fail(
            f"{name} modified its {argument_name(index, arg_names)} in place (on "
            f"{case.description}). The caller's {kind} must stay as it was: "
            f"{IN_PLACE_ADVICE[language]}."
        )
    return observation.value


def expect_tuple(observation: Observation, value, name: str, names: Sequence[str]) -> None:
    """CheckFailed unless the learner's function returned a tuple (or list) of len(names).

    Judged on the recorded value (a tuple is recorded as a list); the recorded type's name only
    words the message.
    """
    __tracebackhide__ = True
    if not isinstance(value, list) or len(value) != len(names):
        length = f" of length {len(value)}" if isinstance(value, list) else ""
        fail(
            f"{name} should return a tuple ({', '.join(names)}), but returned "
            f"{observation.type_name}{length}."
        )


def _explain(mistake: Mistake | None, case: Case) -> str:
    """The lines after a failure's first: the named mistake and its fix, else the case's hint."""
    if mistake is not None:
        return f"\n{mistake.diagnosis}\nHint: {mistake.hint}"
    return f"\nHint: {case.hint}" if case.hint else ""


def as_numpy(value):
    """A torch tensor as a numpy array (a copy: buffers change in place); anything else as is."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy().copy()
    return value


def _matches(candidate, actual, atol, rtol) -> bool:
    candidate = as_numpy(candidate)
    return (
        isinstance(candidate, np.ndarray)
        and candidate.shape == actual.shape
        and np.allclose(actual, candidate, atol=atol, rtol=rtol, equal_nan=True)
    )


def diagnose(
    actual,
    expected,
    mistakes: Sequence[Mistake],
    mistake_args: tuple,
    pick=None,
    atol=1e-8,
    rtol=1e-6,
):
    """The first mistake whose result matches ``actual`` but not ``expected``, or None.

    ``pick`` selects the compared output from a mistake's return value (e.g. one gradient of a
    tuple). Mistakes that raise on these arguments are skipped.
    """
    for mistake in mistakes:
        try:
            with np.errstate(all="ignore"):
                candidate = mistake.compute(*mistake_args)
        except Exception:
            continue
        if pick is not None:
            candidate = pick(candidate)
        if candidate is None:
            continue
        if _matches(candidate, actual, atol, rtol) and not _matches(
            candidate, expected, atol, rtol
        ):
            return mistake
    return None


def compare(
    actual,
    expected,
    *,
    name: str,
    what: str,
    case: Case,
    mistakes: Sequence[Mistake] = (),
    mistake_args: tuple = (),
    pick=None,
    type_name: str | None = None,
):
    """Check one returned array against the reference: type, shape, dtype, then values.

    Args:
        actual: what the learner's code returned (numpy array or torch tensor).
        expected: the reference result, a numpy array whose dtype is the one required.
        name: the learner's function, e.g. "layer_norm".
        what: which output, e.g. "the output" or "dgamma".
        case: the input that produced them.
        mistakes, mistake_args, pick: known mistakes to name when the values differ (see diagnose).
        type_name: the type the learner's code returned, for the message when it is not an array.
    """
    __tracebackhide__ = True
    language = language_of(case, type_name)
    actual = as_numpy(actual)
    where = f"{name}, on {case.description}"
    if not isinstance(actual, np.ndarray):
        kind = type_name or type(actual).__name__
        fail(f"{where}: {what} should be {ARRAY_KIND[language]}, but it is a {kind}.")
    if actual.shape != expected.shape:
        mistake = diagnose(actual, expected, mistakes, mistake_args, pick, case.atol, case.rtol)
        fail(
            f"{where}: {what} has shape {actual.shape} but should have shape {expected.shape}."
            + _explain(mistake, case)
        )
    if actual.dtype != expected.dtype:
        fail(
            f"{where}: {what} has dtype {actual.dtype} but the input was {expected.dtype}. "
            f"Keep the input's dtype: {DTYPE_ADVICE[language]}."
        )
    if np.allclose(actual, expected, atol=case.atol, rtol=case.rtol):
        return
    mistake = diagnose(actual, expected, mistakes, mistake_args, pick, case.atol, case.rtol)
    if mistake is not None:
        fail(f"{where}: {what} is wrong." + _explain(mistake, case))
    with np.errstate(all="ignore"):
        error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    error = np.where(np.isnan(error), np.inf, error)
    worst = np.unravel_index(np.argmax(error), error.shape)
    fail(
        f"{where}: {what} differs from the reference by up to {error[worst]:.3g} at index "
        f"{tuple(int(i) for i in worst)} (yours {actual[worst]!r}, expected {expected[worst]!r}; "
        f"tolerance atol={case.atol:g}, rtol={case.rtol:g})." + _explain(None, case)
    )


def compare_tuple(
    observation: Observation,
    value,
    expected: Sequence,
    *,
    name: str,
    names: Sequence[str],
    case: Case,
    mistakes: Sequence[Mistake] | Sequence[Sequence[Mistake]] = (),
    mistake_args: tuple = (),
):
    """Check a returned tuple output by output: its length, then each array as :func:`compare`.

    ``mistakes`` is one catalogue for every output (a mistake returns the whole tuple) or one
    catalogue per output, in the order of ``names``.
    """
    __tracebackhide__ = True
    expect_tuple(observation, value, name, names)
    per_output = bool(mistakes) and not hasattr(mistakes[0], "compute")
    for index, what in enumerate(names):
        known = mistakes[index] if per_output else mistakes
        hinted = case
        if case.output_hints:  # a hint about one output is said for that output only
            hinted = replace(case, hint=case.output_hints.get(what, ""))
        compare(
            value[index],
            expected[index],
            name=name,
            what=what,
            case=hinted,
            mistakes=known,
            mistake_args=mistake_args,
            pick=lambda out, i=index: out[i],
        )


def without_norm_calls(name: str, observations, count: int, norm_calls: bool, hint: str):
    """The observations of the ``count`` cases; with ``norm_calls``, after judging the last
    observation, which names torch's norm ops the code called (CheckFailed if it called one)."""
    __tracebackhide__ = True
    if not norm_calls:
        return observations
    expect_observations(name, observations, count + 1)
    from addnorm_lib.checks._torch import judge_norm_calls

    judge_norm_calls(observations[-1], name, hint, language="numpy")
    return observations[:-1]


#: the numpy operations to write a norm with, said to code that calls torch's own norm
NUMPY_MATH = "x.mean, np.sqrt, ..."


def judge_output(
    name: str,
    cases: Sequence[Case],
    observations: Sequence[Observation],
    reference: Callable,
    mistakes: Sequence[Mistake],
    arg_names: Sequence[str] = (),
    norm_calls: bool = False,
) -> str:
    """Judge a norm's recorded outputs ``y``: the reference runs in float64, cast back to x's dtype.

    Each case's args are ``(x, *parameters)`` (numpy arrays) and its kwargs ``{"eps": float}``;
    ``reference(*args, eps=eps)`` and each mistake's ``compute(*args, eps)`` return ``y`` (x's
    shape). ``arg_names`` name the arguments (see :func:`judged_calls`). With ``norm_calls``,
    the observations end with the norm ops the code called (:func:`observe_cases`), and calling
    one fails. Raises CheckFailed at the first wrong output; else returns the summary of what
    passed.
    """
    __tracebackhide__ = True
    observations = without_norm_calls(name, observations, len(cases), norm_calls, NUMPY_MATH)
    for case, observation, y in judged_calls(name, cases, observations, arg_names):
        x, eps = case.args[0], case.kwargs["eps"]
        as64 = [a.astype(np.float64) for a in case.args]
        compare(
            y,
            reference(*as64, eps=eps).astype(x.dtype),
            name=name,
            what="the output",
            case=case,
            mistakes=mistakes,
            mistake_args=(*case.args, eps),
            type_name=observation.type_name,
        )
    return passed(name, [case.description for case in cases])


def judge_backward(
    name: str,
    cases: Sequence[Case],
    observations: Sequence[Observation],
    reference: Callable,
    names: Sequence[str],
    mistakes: Sequence[Mistake] | Sequence[Sequence[Mistake]],
    arg_names: Sequence[str] = ("dy", "x", "gamma"),
    norm_calls: bool = False,
) -> str:
    """Judge a norm's recorded backward pass: a tuple of gradients named ``names``.

    Each case's args are ``(dy, x, gain)`` and its kwargs ``{"eps": float}``;
    ``reference(dy, x, gain, eps=eps)`` returns the gradients, and ``mistakes`` are one catalogue
    or one per gradient (see :func:`compare_tuple`). ``norm_calls`` as in :func:`judge_output`.
    Raises CheckFailed at the first wrong gradient; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    observations = without_norm_calls(name, observations, len(cases), norm_calls, NUMPY_MATH)
    for case, observation, grads in judged_calls(name, cases, observations, arg_names):
        compare_tuple(
            observation,
            grads,
            reference(*case.args, eps=case.kwargs["eps"]),
            name=name,
            names=names,
            case=case,
            mistakes=mistakes,
            mistake_args=(*case.args, case.kwargs["eps"]),
        )
    return passed(name, [case.description for case in cases])


def passed(name: str, checked: Sequence[str]) -> str:
    """The summary a passing check prints: which inputs and properties the code got right."""
    return "\n".join([f"✓ {name} passed {len(checked)} checks:", *(f"    - {c}" for c in checked)])


def judge_gradients(
    observation: Observation, reference: Observation, name: str, description: str
) -> None:
    """Compare recorded autograd gradients (``{what: array or None}``) with the reference's.

    The gradients expected are the reference's, every one of them: a record must hold exactly
    those keys (anything else is malformed), so leaving one out never skips its comparison.
    """
    __tracebackhide__ = True
    if observation.error:
        fail(f"Backpropagating through {name} ({description}) raised {observation.error}")
    expected = reference.value
    conform(observation.value, dict.fromkeys(expected, (np.ndarray, type(None))), "gradients")
    for what in expected:
        mine = observation.value[what]
        if mine is None:
            fail(
                f"No gradient reached {name}'s {what}: is it used in forward, as an "
                "nn.Parameter (or the input), without .detach() or .data?"
            )
        compare(
            mine,
            expected[what],
            name=name,
            what=f"the gradient of {what}",
            case=Case(f"{description}, backward by autograd", (), language="torch"),
        )
