"""Self-checks for the exercises: call one on your function to get specific feedback.

>>> from addnorm_lib import checks
>>> checks.check_layer_norm(layer_norm)  # raises CheckFailed with a diagnosis, or lists what passed

The graded test cells of the exercise notebooks call the same functions.
"""

from addnorm_lib.checks._core import CheckFailed
from addnorm_lib.checks.layernorm import (
    check_layer_norm,
    check_layer_norm_backward,
    check_layer_norm_module,
)

__all__ = [
    "CheckFailed",
    "check_layer_norm",
    "check_layer_norm_backward",
    "check_layer_norm_module",
]
