"""What the torch-module checks share: forbidding torch's own norm functions while observing."""

import contextlib
from unittest import mock

_TORCH_NORM_FUNCTIONS = ("layer_norm", "native_layer_norm", "group_norm", "batch_norm", "rms_norm")
TORCH_NORM_CALLED = "TorchNormCalled"


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
