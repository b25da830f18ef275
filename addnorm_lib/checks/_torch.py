"""What the torch-module checks share: forbidding torch's own norm functions while observing, and
judging a module's state_dict by loading it into torch's own module, in the judge.

Whether a learner's module calls torch's norm functions is known only in the kernel that ran it:
a record that reports such a call fails (it can only cost points), but a record that reports none
is not proof. The grader says so in its feedback (:data:`NOT_CALLING_TORCH_NORMS`).
"""

import contextlib
from unittest import mock

_TORCH_NORM_FUNCTIONS = ("layer_norm", "native_layer_norm", "group_norm", "batch_norm", "rms_norm")
TORCH_NORM_CALLED = "TorchNormCalled"
NOT_CALLING_TORCH_NORMS = "it computes the norm without torch's built-in norm functions"


@contextlib.contextmanager
def torch_norms_forbidden():
    """Make torch's own norm functions raise, so a module that calls them is caught."""
    import torch
    import torch.nn.functional as F

    def forbidden(*args, **kwargs):
        raise RuntimeError(TORCH_NORM_CALLED)

    with contextlib.ExitStack() as stack:
        for module in (torch, F):
            for fn_name in _TORCH_NORM_FUNCTIONS:
                if hasattr(module, fn_name):
                    stack.enter_context(mock.patch.object(module, fn_name, forbidden))
        yield


def recorded_state(module) -> dict:
    """A module's state_dict as plain data (numpy arrays), for the judge to load into torch's."""
    from addnorm_lib.checks._core import plain

    return {key: plain(value) for key, value in module.state_dict().items()}


def judge_round_trip(observation, torch_module) -> None:
    """Load a recorded state_dict (:func:`recorded_state`) into ``torch_module``, here.

    CheckFailed, worded as torch's refusal, if recording it raised or torch does not take it.
    """
    __tracebackhide__ = True
    import numpy as np
    import torch

    from addnorm_lib.checks._core import PLAIN, MapOf, conform, fail

    refused = f"torch.nn.{type(torch_module).__name__} could not load your module's state_dict: "
    if observation.error:
        fail(refused + observation.error)
    conform(observation.value, MapOf(PLAIN), "state_dict")
    try:
        state = {k: torch.from_numpy(np.asarray(v)) for k, v in observation.value.items()}
        torch_module.load_state_dict(state)
    except Exception as err:
        fail(f"{refused}{type(err).__name__}: {err}")
