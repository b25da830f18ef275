"""A small, robust wall-clock timer for the chapters' speed measurements.

One measurement of a fast function is mostly noise: the operating system, other processes and the
CPU's clock all get in the way. :func:`time_calls` follows :mod:`timeit`'s recipe: run the function
once to warm up, pick a number of calls per repeat so that one repeat lasts at least
``min_seconds``, then time several repeats and keep every per-call time. Report the *median* (robust
to a few disturbed repeats) or the *best* (the least disturbed run).

:func:`time_interleaved` times several functions in turns (A, B, A, B, ...), so a slow phase of the
machine hits all of them alike and their *ratio* stays meaningful even when absolute times drift.

Only the standard library and numpy are used; nothing here knows about torch threads: set
``torch.set_num_threads`` yourself before timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Timing", "calibrate", "time_calls", "time_interleaved"]


@dataclass(frozen=True)
class Timing:
    """Per-call times of one function.

    Attributes:
        samples: float64 array of shape ``(repeats,)``: seconds per call in each repeat (the time
            of one repeat divided by ``number``).
        number: calls per repeat.
    """

    samples: np.ndarray
    number: int

    @property
    def median(self) -> float:
        """Median seconds per call over the repeats."""
        return float(np.median(self.samples))

    @property
    def best(self) -> float:
        """Smallest seconds per call over the repeats (the least disturbed repeat)."""
        return float(np.min(self.samples))


def _run(fn: Callable[[], object], number: int) -> float:
    """Seconds taken by ``number`` back-to-back calls of ``fn``."""
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def calibrate(
    fn: Callable[[], object], min_seconds: float = 2e-3, max_number: int = 1 << 20
) -> int:
    """Calls per repeat so that one repeat of ``fn`` lasts at least ``min_seconds``.

    Calls ``fn`` once to warm up (first-call costs: allocation, dispatch caches), then doubles the
    number of calls until the batch takes ``min_seconds`` or ``max_number`` is reached.

    Returns:
        A power of two between 1 and ``max_number`` (an int).
    """
    if min_seconds < 0 or max_number < 1:
        raise ValueError(
            f"need min_seconds >= 0 and max_number >= 1, got {min_seconds}, {max_number}"
        )
    fn()  # warm-up, not timed
    number = 1
    while number < max_number and _run(fn, number) < min_seconds:
        number *= 2
    return min(number, max_number)


def time_calls(
    fn: Callable[[], object], repeats: int = 7, min_seconds: float = 2e-3, number: int | None = None
) -> Timing:
    """Time ``fn()`` (no arguments: wrap it in a lambda) over ``repeats`` repeats.

    Args:
        fn: the function to time; its result is discarded.
        repeats: number of timed repeats, at least 1.
        min_seconds: target duration of one repeat when ``number`` is None (see :func:`calibrate`).
        number: calls per repeat; calibrated if None.

    Returns:
        A :class:`Timing` with ``repeats`` per-call times.
    """
    return time_interleaved({"fn": fn}, repeats, min_seconds, {"fn": number} if number else None)[
        "fn"
    ]


def time_interleaved(
    fns: Mapping[str, Callable[[], object]],
    repeats: int = 7,
    min_seconds: float = 2e-3,
    numbers: Mapping[str, int] | None = None,
) -> dict[str, Timing]:
    """Time several functions in turns: repeat ``r`` times every function once before ``r + 1``.

    Interleaving matters when the quantity of interest is a *ratio* of times: a disturbance (another
    process, a clock change) then lands on all functions of the same round, not on one of them.

    Args:
        fns: name -> function of no arguments.
        repeats: number of rounds, at least 1.
        min_seconds: target duration of one repeat of each function, for calibration.
        numbers: name -> calls per repeat; functions missing from it are calibrated.

    Returns:
        name -> :class:`Timing`, in the order of ``fns``. ``samples[r]`` of every function comes
        from round ``r``, so ``a.samples / b.samples`` pairs times measured close together.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    numbers = dict(numbers or {})
    for name, fn in fns.items():
        if name not in numbers:
            numbers[name] = calibrate(fn, min_seconds)
    samples = {name: np.empty(repeats) for name in fns}  # name -> (repeats,)
    for r in range(repeats):
        for name, fn in fns.items():
            samples[name][r] = _run(fn, numbers[name]) / numbers[name]
    return {name: Timing(samples[name], numbers[name]) for name in fns}
