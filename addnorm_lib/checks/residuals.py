"""Checkers for the residual exercise: MLP blocks with and without a shortcut, in numpy.

The functions under check (signatures of :mod:`addnorm_lib.reference.residuals`):

- ``residual_block(x, W1, b1, W2) -> y`` and ``plain_block(x, W1, b1, W2) -> y``;
- ``residual_block_backward(dy, x, W1, b1, W2) -> (dx, dW1, db1, dW2)`` and the plain one;
- ``stack_gradient_norms(x, params, dy, residual=True) -> norms``, shape (L + 1,).

As in :mod:`addnorm_lib.checks.layernorm`, each check observes (runs the learner's code,
records plain data) and judges (compares with the reference, names known mistakes). The
references (``addnorm_lib.reference.residuals``, ``addnorm_lib.reference.mistakes``) are imported
by judges only.

The stack is graded on its own skill: while ``stack_gradient_norms`` runs, the learner's four block
functions are swapped for correct stand-ins (torch's autograd on the task's formula), so that a
mistake in a block costs the block's points only.
"""

import contextlib
import inspect
from collections.abc import Callable, Iterator

import numpy as np

from addnorm_lib.checks._advice import judged_calls_unchanged
from addnorm_lib.checks._core import (
    FLOAT64_HINT,
    FLOAT64_TOLERANCE,
    Case,
    Observation,
    compare,
    compare_tuple,
    expect_observations,
    fail,
    observe_cases,
    passed,
)
from addnorm_lib.checks._record import run_check

GRADIENTS = ("dx", "dW1", "db1", "dW2")
BLOCK_ARGS = ("x", "W1", "b1", "W2")
BACKWARD_ARGS = ("dy", "x", "W1", "b1", "W2")
STACK_ARGS = ("x", "params", "dy")
LEADING_AXES_HINT = (
    "x may have any number of leading axes, (..., C): flatten them for the weight gradients, "
    "dW1 = x.reshape(-1, C).T @ dpre.reshape(-1, H), and sum db1 over all of them."
)


def _weights(rng, channels, hidden, bias=0.0):
    """W1 (C, H), b1 (H,), W2 (H, C), scaled so that the outputs stay of order one."""
    W1 = rng.normal(0.0, 1.0 / np.sqrt(channels), (channels, hidden))
    b1 = rng.normal(bias, 0.5, hidden)
    W2 = rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, channels))
    return W1, b1, W2


def block_cases(seed: int = 0) -> list[Case]:
    """Inputs (x, W1, b1, W2) for the forward blocks; square weights first (transposes show)."""
    rng = np.random.default_rng(seed + 10)

    def case(description, shape, hidden, bias=0.0, hint="", **tolerance):
        x = rng.normal(0.0, 1.0, shape)
        weights = _weights(rng, shape[-1], hidden, bias)
        return Case(description, (x, *weights), hint=hint, **tolerance)

    return [
        case("a 2-D (N, C) = (4, 5) input with square weights (H = C = 5)", (4, 5), 5),
        case(
            "a 2-D (N, C) = (3, 4) input with hidden width H = 7",
            (3, 4),
            7,
            hint="W1 has shape (C, H) and W2 has shape (H, C): y = x + relu(x @ W1 + b1) @ W2.",
        ),
        case(
            "a 3-D (B, T, C) = (2, 3, 4) input, H = 6",
            (2, 3, 4),
            6,
            hint="x may have any number of leading axes: x @ W1 works on the last one.",
        ),
        case(
            "a (6, 4) input whose pre-activations are mostly negative (b1 around -1)",
            (6, 4),
            5,
            bias=-1.0,
            hint="relu(z) = max(z, 0) zeroes the negative pre-activations.",
        ),
        case(
            "a 3-D (B, T, C) = (3, 2, 4) input with a narrower hidden layer (H = 3), to float64 "
            "precision",
            (3, 2, 4),
            3,
            hint=FLOAT64_HINT,
            **FLOAT64_TOLERANCE,
        ),
    ]


def backward_cases(seed: int = 0) -> list[Case]:
    """Inputs (dy, x, W1, b1, W2) for the backward passes."""
    rng = np.random.default_rng(seed + 11)

    def case(description, shape, hidden, hint="", **tolerance):
        x, dy = rng.normal(size=shape), rng.normal(size=shape)
        weights = _weights(rng, shape[-1], hidden)
        return Case(description, (dy, x, *weights), hint=hint, **tolerance)

    return [
        case("a 2-D (N, C) = (4, 5) input with square weights (H = C = 5)", (4, 5), 5),
        case(
            "a 2-D (N, C) = (3, 4) input with hidden width H = 7",
            (3, 4),
            7,
            hint="Check each gradient's shape against its parameter: dW1 (C, H), db1 (H,), "
            "dW2 (H, C), dx like x.",
        ),
        case("a 3-D (B, T, C) = (2, 3, 4) input, H = 6", (2, 3, 4), 6, hint=LEADING_AXES_HINT),
        case(
            "a 3-D (B, T, C) = (2, 2, 3) input, H = 4, to float64 precision",
            (2, 2, 3),
            4,
            hint=FLOAT64_HINT,
            **FLOAT64_TOLERANCE,
        ),
    ]


UNCHANGED = "leaves its inputs unchanged (no in-place updates)"

#: (description, shape of x, H, L, residual) of each stack checked
STACKS = (
    ("a stack of 4 residual blocks on a (3, 4) input, H = 6", (3, 4), 6, 4, True),
    ("a stack of 4 plain blocks (residual=False) on a (3, 4) input, H = 6", (3, 4), 6, 4, False),
    ("a stack of 6 residual blocks on a 3-D (2, 3, 5) input, H = 5", (2, 3, 5), 5, 6, True),
    ("a single plain block (L = 1) on a (2, 4) input, H = 3", (2, 4), 3, 1, False),
    ("an empty stack (L = 0 blocks, params = []) on a (2, 4) input", (2, 4), 3, 0, True),
)
BLOCKS_HINT = (
    "While your stack ran, the check put correct blocks in place of the four block functions "
    "your notebook defines (residual_block, plain_block and their backward passes, called by "
    "those names), so the mistake is in the stack: run the forward pass once, keep each block's "
    "input, then go backward from dy, passing each backward's dx (its first result) down to the "
    "block below."
)
COUNT_HINT = "With L blocks there are L + 1 norms: at h_0 = x, ..., at h_L (norm of dy)."
EMPTY_STACK_HINT = (
    "With no blocks (L = 0) the output is the input, h_0 = x, and dL/dh_0 = dy: return the one "
    "norm np.array([np.linalg.norm(dy)]). Code that reads params[0] (for a size) or zips the "
    "kept inputs against params with strict=True after keeping one input too many fails here."
)


def stack_cases(seed: int = 0) -> list[Case]:
    """Inputs (x, params, dy) and ``residual`` for ``stack_gradient_norms``, one per STACKS row."""
    rng = np.random.default_rng(seed + 12)
    hints = {0: EMPTY_STACK_HINT, 1: COUNT_HINT}
    cases = []
    for description, shape, hidden, depth, residual in STACKS:
        x, dy = rng.normal(size=shape), rng.normal(size=shape)
        params = [_weights(rng, shape[-1], hidden) for _ in range(depth)]
        hint = hints.get(depth, BLOCKS_HINT)
        cases.append(Case(description, (x, params, dy), {"residual": residual}, hint=hint))
    return cases


# ----------------------------------------------------------------------------------------------
# Forward blocks


def observe_block(block, seed: int = 0) -> list[Observation]:
    """Run a learner's block (residual or plain) on every case of :func:`block_cases`; record it."""
    return observe_cases(block, block_cases(seed))


def _judge_block(name: str, observations: list[Observation], seed: int, residual: bool) -> str:
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes
    from addnorm_lib.reference import residuals as blocks

    reference = blocks.residual_block if residual else blocks.plain_block
    known = mistakes.RESIDUAL_BLOCK_MISTAKES if residual else mistakes.PLAIN_BLOCK_MISTAKES
    cases = block_cases(seed)
    calls = judged_calls_unchanged(name, cases, observations, BLOCK_ARGS, "numpy")
    for case, observation, y in calls:
        compare(
            y,
            reference(*case.args),
            name=name,
            what="the output",
            case=case,
            mistakes=known,
            mistake_args=case.args,
            type_name=observation.type_name,
        )
    return passed(name, [*(case.description for case in cases), UNCHANGED])


def judge_residual_block(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``residual_block`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    return _judge_block("residual_block", observations, seed, residual=True)


def judge_plain_block(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``plain_block`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    return _judge_block("plain_block", observations, seed, residual=False)


def check_residual_block(residual_block, seed: int = 0) -> None:
    """Check a learner's ``residual_block(x, W1, b1, W2) -> x + relu(x W1 + b1) W2``."""
    __tracebackhide__ = True
    run_check("check_residual_block", observe_block, judge_residual_block, residual_block, seed)


def check_plain_block(plain_block, seed: int = 0) -> None:
    """Check a learner's ``plain_block(x, W1, b1, W2) -> relu(x W1 + b1) W2``."""
    __tracebackhide__ = True
    run_check("check_plain_block", observe_block, judge_plain_block, plain_block, seed)


# ----------------------------------------------------------------------------------------------
# Backward passes


def observe_block_backward(backward, seed: int = 0) -> list[Observation]:
    """Run a learner's block backward pass on every case of :func:`backward_cases`; record it."""
    return observe_cases(backward, backward_cases(seed))


def _judge_backward(name: str, observations: list[Observation], seed: int, residual: bool) -> str:
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes
    from addnorm_lib.reference import residuals as blocks

    reference = blocks.residual_block_backward if residual else blocks.plain_block_backward
    known = mistakes.RESIDUAL_BACKWARD_MISTAKES if residual else mistakes.PLAIN_BACKWARD_MISTAKES
    cases = backward_cases(seed)
    calls = judged_calls_unchanged(name, cases, observations, BACKWARD_ARGS, "numpy")
    for case, observation, grads in calls:
        compare_tuple(
            observation,
            grads,
            reference(*case.args),
            name=name,
            names=GRADIENTS,
            case=case,
            mistakes=known,
            mistake_args=case.args,
        )
    return passed(name, [*(case.description for case in cases), UNCHANGED])


def judge_residual_block_backward(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``residual_block_backward`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    return _judge_backward("residual_block_backward", observations, seed, residual=True)


def judge_plain_block_backward(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``plain_block_backward`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    return _judge_backward("plain_block_backward", observations, seed, residual=False)


def check_residual_block_backward(residual_block_backward, seed: int = 0) -> None:
    """Check a learner's ``residual_block_backward(dy, x, W1, b1, W2) -> (dx, dW1, db1, dW2)``."""
    __tracebackhide__ = True
    run_check(
        "check_residual_block_backward",
        observe_block_backward,
        judge_residual_block_backward,
        residual_block_backward,
        seed,
    )


def check_plain_block_backward(plain_block_backward, seed: int = 0) -> None:
    """Check a learner's ``plain_block_backward(dy, x, W1, b1, W2) -> (dx, dW1, db1, dW2)``."""
    __tracebackhide__ = True
    run_check(
        "check_plain_block_backward",
        observe_block_backward,
        judge_plain_block_backward,
        plain_block_backward,
        seed,
    )


# ----------------------------------------------------------------------------------------------
# Gradient norms through a stack


def _block_forward(x, W1, b1, W2, residual: bool):
    """The task's block on float64 tensors: ``x + relu(x W1 + b1) W2``, without x if plain."""
    import torch

    branch = torch.relu(x @ W1 + b1) @ W2  # (..., C)
    return x + branch if residual else branch


def _as_tensors(*arrays, requires_grad: bool = False) -> list:
    import torch

    return [
        torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad) for a in arrays
    ]


def _stand_in_block(residual: bool) -> Callable:
    def block(x, W1, b1, W2):
        return _block_forward(*_as_tensors(x, W1, b1, W2), residual).numpy()

    return block


def _stand_in_backward(residual: bool) -> Callable:
    def backward(dy, x, W1, b1, W2):
        inputs = _as_tensors(x, W1, b1, W2, requires_grad=True)
        _block_forward(*inputs, residual).backward(*_as_tensors(dy))
        return tuple(tensor.grad.numpy() for tensor in inputs)  # dx, dW1, db1, dW2

    return backward


#: The correct blocks that stand in for the learner's while the stack is observed.
STAND_INS = {
    "residual_block": _stand_in_block(True),
    "plain_block": _stand_in_block(False),
    "residual_block_backward": _stand_in_backward(True),
    "plain_block_backward": _stand_in_backward(False),
}


@contextlib.contextmanager
def blocks_stood_in(function: Callable) -> Iterator[None]:
    """While in the block, the names of :data:`STAND_INS` that ``function``'s module (a notebook's
    namespace) defines are the stand-ins; the learner's own come back after."""
    namespace = getattr(inspect.unwrap(function), "__globals__", None)
    if not isinstance(namespace, dict):
        yield
        return
    own = {name: namespace[name] for name in STAND_INS if name in namespace}
    namespace.update({name: STAND_INS[name] for name in own})
    try:
        yield
    finally:
        namespace.update(own)


def observe_stack_gradient_norms(stack_gradient_norms, seed: int = 0) -> list[Observation]:
    """Observe ``stack_gradient_norms`` on each case of :func:`stack_cases`, with correct blocks
    in place of the learner's (:func:`blocks_stood_in`)."""
    with blocks_stood_in(stack_gradient_norms):
        return observe_cases(stack_gradient_norms, stack_cases(seed))


def _judge_empty_stack_error(case: Case, observation: Observation) -> None:
    """CheckFailed naming the mistake if the stack raised on the empty stack (L = 0) only."""
    __tracebackhide__ = True
    from addnorm_lib.reference.mistakes.residuals import EMPTY_STACK_RAISES

    if case.args[1] or not isinstance(observation, Observation) or observation.not_implemented:
        return
    if observation.error is not None:
        fail(
            "stack_gradient_norms raised "
            f"{observation.error.replace(': ', f' on {case.description}: ', 1)}\n"
            f"{EMPTY_STACK_RAISES.diagnosis}\nHint: {EMPTY_STACK_RAISES.hint}"
        )


def judge_stack_gradient_norms(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``stack_gradient_norms`` results with the reference; name known mistakes.

    A list of floats counts as an array. Raises CheckFailed at the first wrong result; else returns
    the summary of what passed.
    """
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes
    from addnorm_lib.reference import residuals as blocks

    name = "stack_gradient_norms"
    cases = stack_cases(seed)
    expect_observations(name, observations, len(cases))
    for case, observation in zip(cases, observations, strict=True):
        _judge_empty_stack_error(case, observation)
        ((_, _, norms),) = judged_calls_unchanged(name, [case], [observation], STACK_ARGS, "numpy")
        if isinstance(norms, list):  # a list of floats is fine
            norms = np.asarray(norms, dtype=np.float64)
        expected = blocks.stack_gradient_norms(*case.args, **case.kwargs)
        compare(
            norms,
            expected,
            name="stack_gradient_norms",
            what="the array of norms",
            case=case,
            mistakes=mistakes.STACK_NORMS_MISTAKES,
            mistake_args=(*case.args, case.kwargs["residual"]),
            type_name=observation.type_name,
        )
    return passed("stack_gradient_norms", [*(case.description for case in cases), UNCHANGED])


def check_stack_gradient_norms(stack_gradient_norms, seed: int = 0) -> None:
    """Check a learner's ``stack_gradient_norms(x, params, dy, residual=True)``: (L + 1,) norms."""
    __tracebackhide__ = True
    run_check(
        "check_stack_gradient_norms",
        observe_stack_gradient_norms,
        judge_stack_gradient_norms,
        stack_gradient_norms,
        seed,
    )


JUDGES = {
    "check_residual_block": judge_residual_block,
    "check_plain_block": judge_plain_block,
    "check_residual_block_backward": judge_residual_block_backward,
    "check_plain_block_backward": judge_plain_block_backward,
    "check_stack_gradient_norms": judge_stack_gradient_norms,
}
