"""The timer in addnorm_lib.experiments.timing measures what it says and interleaves as documented.

The timed functions advance a fake clock by exact amounts, so the arithmetic is checked exactly
whatever else the machine is doing; one test times real sleeps, with a generous bound.
"""

import time
from types import SimpleNamespace

import numpy as np
import pytest

from addnorm_lib.experiments import timing as timing_module
from addnorm_lib.experiments.timing import Timing, calibrate, time_calls, time_interleaved


@pytest.fixture
def clock(monkeypatch):
    """A clock that only moves when a timed function says so: ``clock.take(seconds)``."""
    fake = SimpleNamespace(now=0.0)
    fake.take = lambda seconds: setattr(fake, "now", fake.now + seconds)
    monkeypatch.setattr(timing_module, "time", SimpleNamespace(perf_counter=lambda: fake.now))
    return fake


def test_times_are_per_call_not_per_repeat(clock):
    timing = time_calls(lambda: clock.take(2e-3), repeats=3, number=4)
    assert timing.samples.shape == (3,) and timing.number == 4
    np.testing.assert_allclose(timing.samples, 2e-3)


def test_median_and_best_of_disturbed_repeats(clock):
    costs = iter([1.0, 5.0, 2.0, 9.0, 3.0])  # seconds of each repeat's single call
    timing = time_calls(lambda: clock.take(next(costs)), repeats=5, number=1)
    assert (timing.best, timing.median) == (1.0, 3.0)


def test_a_real_sleep_is_timed_at_least_as_long_as_it_slept():
    timing = time_calls(lambda: time.sleep(2e-3), repeats=3, number=2)
    assert 2e-3 <= timing.best <= timing.median  # a busy machine can only add time


def test_calibration_reaches_the_target_duration(clock):
    calls = []

    def append():
        calls.append(1)
        clock.take(1e-4)

    number = calibrate(append, min_seconds=1e-3)
    assert number == 16  # the first power of two whose batch lasts 1 ms: 16 x 0.1 ms
    assert len(calls) == 1 + 1 + 2 + 4 + 8 + 16  # the warm-up, then batches until one is long


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


def test_interleaved_rounds_pair_times_measured_together(clock):
    """A slow phase of the machine (round 1 here) hits both functions and leaves the ratio."""
    slowdown = iter([1, 1, 4, 4, 1, 1])  # one factor per call, in call order: round by round
    result = time_interleaved(
        {
            "short": lambda: clock.take(1e-3 * next(slowdown)),
            "long": lambda: clock.take(3e-3 * next(slowdown)),
        },
        repeats=3,
        numbers={"short": 1, "long": 1},
    )
    np.testing.assert_allclose(result["short"].samples, [1e-3, 4e-3, 1e-3])
    np.testing.assert_allclose(result["long"].samples / result["short"].samples, 3.0)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="repeats"):
        time_interleaved({"a": lambda: None}, repeats=0)
    with pytest.raises(ValueError):
        calibrate(lambda: None, max_number=0)
