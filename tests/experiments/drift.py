"""Whether a fresh run of an experiment reproduces its cached run in ``book/data``.

The caches were computed on one machine. A processor of another kind (another vendor's BLAS code
path, another vector width) rounds some operations' last bits differently, and a training run is
chaotic: the two trajectories agree at first and drift apart over hundreds of steps. Measured
for the cells the tests re-run, on an AMD EPYC against the caches' machine: losses first
differing in the sixth digit after 33 steps, then up to 12% apart (0.0052 against 0.0046 at step
53, 0.0081 against 0.0178 at step 58), held-out losses of models that had learned the task of
0.0008 against 0.0003, final losses and curve points up to 10% apart after 200 to 900 steps,
counts of 34 against 36 and 45 against 44; no setting of torch's (``ATEN_CPU_CAPABILITY``) or
MKL's (``MKL_CBWR``) made them agree.

So a fresh run reproduces its cache when its first :data:`EARLY_STEPS` recorded losses (where a
record keeps them) agree to :data:`EARLY_REL`, as they do on every processor measured (a cache
made by code that since changed what a run computes differs there), and every other number
agrees to :data:`DRIFT_REL` (a count: to that fraction of it, at least 1). On the machine that
made a cache the runs are equal; these tolerances are what another machine needs, and the later
numbers' is loose: there the test catches a cache gone far from what the code computes, and the
early steps catch one made by other code.
"""

import math

EARLY_STEPS = 20  # recorded losses compared tightly
EARLY_REL = 1e-4  # their tolerance: a few units in the fourth (rounded) digit
DRIFT_REL = 0.25  # every later number's tolerance: twice the largest drift measured


def close(fresh: float, cached: float, rel: float = DRIFT_REL, floor: float = 1e-9) -> bool:
    """Whether two numbers agree to ``rel``, or both lie within ``floor`` of each other (NaN
    agrees with NaN only)."""
    if math.isnan(fresh) or math.isnan(cached):
        return math.isnan(fresh) and math.isnan(cached)
    return math.isclose(fresh, cached, rel_tol=rel, abs_tol=floor)


def assert_reproduces(fresh, cached, where: str = "run", floor: float = 1e-9) -> None:
    """``fresh`` agrees with ``cached`` up to drift, recursively through dicts and lists: bools,
    text and None equal, counts within :data:`DRIFT_REL` of the cached one (at least 1), other
    numbers to :data:`DRIFT_REL` or within ``floor`` (for a quantity whose tiny values are all
    alike, such as the loss of a model that has learned its task). A dict's keys must be among
    the cached ones."""
    if isinstance(fresh, dict):
        assert isinstance(cached, dict) and set(fresh) <= set(cached), (where, sorted(fresh))
        for key, value in fresh.items():
            assert_reproduces(value, cached[key], f"{where}.{key}", floor)
    elif isinstance(fresh, list | tuple):
        assert isinstance(cached, list | tuple) and len(fresh) == len(cached), where
        for index, (mine, theirs) in enumerate(zip(fresh, cached, strict=True)):
            assert_reproduces(mine, theirs, f"{where}[{index}]", floor)
    elif isinstance(fresh, bool) or fresh is None or isinstance(fresh, str):
        assert fresh == cached, (where, fresh, cached)
    elif isinstance(fresh, int) and isinstance(cached, int):
        assert abs(fresh - cached) <= max(1, DRIFT_REL * abs(cached)), (where, fresh, cached)
    else:
        assert close(float(fresh), float(cached), floor=floor), (where, fresh, cached)


def assert_early_steps_agree(fresh: list, cached: list) -> None:
    """The first :data:`EARLY_STEPS` losses of two trajectories agree to :data:`EARLY_REL`."""
    steps = min(EARLY_STEPS, len(fresh))
    assert steps > 0 and len(cached) >= steps
    for step in range(steps):
        assert close(fresh[step], cached[step], EARLY_REL), (step, fresh[step], cached[step])
