"""The timer in addnorm_lib.timing measures what it says and interleaves as documented."""

import time

import numpy as np
import pytest

from addnorm_lib.timing import Timing, calibrate, time_calls, time_interleaved


def test_sleep_is_timed_per_call():
    timing = time_calls(lambda: time.sleep(2e-3), repeats=3, number=2)
    assert timing.samples.shape == (3,)
    assert timing.number == 2
    # per call, not per repeat: at least the sleep, and well under two sleeps
    assert 2e-3 <= timing.best <= timing.median < 2e-2


def test_calibration_reaches_the_target_duration():
    calls = []
    number = calibrate(lambda: calls.append(1), min_seconds=1e-3)
    assert number & (number - 1) == 0  # a power of two
    assert number > 1  # appending to a list takes far less than a millisecond
    assert len(calls) >= number  # the warm-up plus the calibration batches ran the function


def test_calibration_respects_max_number():
    assert calibrate(lambda: None, min_seconds=10.0, max_number=8) == 8


def test_interleaved_rounds_run_every_function_in_turn():
    order = []
    result = time_interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        repeats=3,
        numbers={"a": 1, "b": 1},
    )
    assert order == ["a", "b"] * 3
    assert list(result) == ["a", "b"]
    assert all(isinstance(t, Timing) and t.samples.shape == (3,) for t in result.values())


def test_interleaved_ratio_sees_a_twice_slower_function():
    result = time_interleaved(
        {"short": lambda: time.sleep(1e-3), "long": lambda: time.sleep(3e-3)},
        repeats=3,
        numbers={"short": 1, "long": 1},
    )
    ratio = np.median(result["long"].samples / result["short"].samples)
    assert ratio > 1.5


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="repeats"):
        time_interleaved({"a": lambda: None}, repeats=0)
    with pytest.raises(ValueError):
        calibrate(lambda: None, max_number=0)
