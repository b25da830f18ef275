"""Advice in the language of the learner's code, for the block exercises' checks.

The residual exercise is written in numpy, the DeepNorm and placement exercises in torch. A hint
for one must never quote the other (``.astype`` on a tensor, ``x -= mean`` for ``x.mul_(alpha)``).
These helpers run before :func:`addnorm_lib.checks._core.judge_call` and
:func:`addnorm_lib.checks._core.compare` reach their own, language-neutral, messages.
"""

from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

from addnorm_lib.checks._core import (
    Case,
    Observation,
    expect_observations,
    fail,
    judge_call,
    modified_argument,
)

Language = Literal["numpy", "torch"]

_IN_PLACE_HINTS = {
    "numpy": (
        "`{arg} += ...`, `{arg} *= ...` and `{arg}[...] = ...` write into the caller's array; "
        "write `{arg} = {arg} + ...`, which makes a new array, or work on `{arg}.copy()`."
    ),
    "torch": (
        "`{arg}.mul_(...)`, `{arg}.add_(...)`, `{arg} += ...` and `{arg} *= ...` write into "
        "the caller's tensor; write `alpha * {arg}` or `{arg} = {arg} + ...`, which make new "
        "tensors."
    ),
}


def in_place_message(name: str, argument: str, case: Case, language: Language) -> str:
    """What to tell a learner whose ``name`` changed its input ``argument`` in place."""
    return (
        f"{name} changed its input {argument} in place (on {case.description}); the task asks "
        "to leave inputs unchanged.\nHint: " + _IN_PLACE_HINTS[language].format(arg=argument)
    )


def judged_calls_unchanged(
    name: str,
    cases: Sequence[Case],
    observations: Sequence[Observation],
    arg_names: Sequence[str],
    language: Language,
) -> Iterator[tuple[Case, Observation, object]]:
    """As :func:`addnorm_lib.checks._core.judged_calls`, with a call that changed one of its
    inputs in place told so in ``language`` (numpy or torch), naming the input by ``arg_names``.

    A call that raised or is not implemented is judged first, as ``judge_call`` judges it.
    """
    __tracebackhide__ = True
    expect_observations(name, observations, len(cases))
    for case, observation in zip(cases, observations, strict=True):
        if not observation.not_implemented and observation.error is None:
            index = modified_argument(observation, case)
            if index is not None:
                fail(in_place_message(name, arg_names[index], case, language))
        yield case, observation, judge_call(observation, name, case, arg_names)


def expect_tensor_like(value, expected: np.ndarray, *, where: str, what: str, type_name: str):
    """CheckFailed, with torch advice, unless a torch function's recorded ``value`` is an array of
    ``expected``'s dtype (tensors are recorded as numpy arrays). Shape and values are left to
    :func:`addnorm_lib.checks._core.compare`."""
    __tracebackhide__ = True
    if not isinstance(value, np.ndarray):
        fail(f"{where}: {what} should be a torch tensor, but it is a {type_name}.")
    if value.dtype != expected.dtype:
        fail(
            f"{where}: {what} has dtype torch.{value.dtype} but the input was "
            f"torch.{expected.dtype}. Keep the input's dtype: avoid creating tensors of another "
            "dtype inside (torch.tensor(...) without dtype=x.dtype), or cast with .to(x.dtype)."
        )
