"""What a test needs from the machine: skipped where it is missing, failed under ``CI=true``.

The sandbox suites (bubblewrap, cgroups, mounts, warm kernels, the hostile classes) cannot run
where the machine gives no sandbox. On a developer's laptop that is a skip, said in the summary;
in CI (``CI=true``, which ``.ci/run`` sets) it is a failure, so a CI machine that lost its
bubblewrap or its cgroups cannot pass the suite with the grader's protections untested.

Use the marker ``@needs("bubblewrap", PROBLEM)`` on a test or a module (``pytestmark``), or call
:func:`require` inside a fixture; ``PROBLEM`` is the probe's one-line reason, or None.
"""

import os

import pytest

CI_ENV = "CI"


def required() -> bool:
    """Whether a missing requirement fails the test (``CI=true``, any case) instead of skipping."""
    return os.environ.get(CI_ENV, "").strip().lower() in ("true", "1", "yes")


def needs(what: str, problem: str | None) -> pytest.MarkDecorator:
    """A marker: the test needs ``what``; ``problem`` says why it is missing (None: present).
    Acted on by :func:`require` before the test runs (tests/conftest.py)."""
    return pytest.mark.needs(what=what, problem=problem)


def require(what: str, problem: str | None) -> None:
    """Nothing when ``problem`` is None; else skip the test, or fail it under ``CI=true``."""
    if problem is None:
        return
    message = f"needs {what}: {problem}"
    if required():
        pytest.fail(f"{message} (CI={os.environ.get(CI_ENV)} requires it)", pytrace=False)
    pytest.skip(message)
