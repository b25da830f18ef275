"""Self-checks for the exercises: call one on your function to get specific feedback.

>>> from addnorm_lib import checks
>>> checks.check_layer_norm(layer_norm)  # raises CheckFailed with a diagnosis, or lists what passed

The graded test cells of the exercise notebooks call the same functions. :data:`JUDGES` maps each
check's name to the judge the grader runs on what the check recorded; :data:`UNVERIFIED`, to what
a passing record of that check only claims (facts the kernel alone could see, which earn no
points and which the grader's feedback names as unverified).
"""

from addnorm_lib.checks import batchnorm, deepnorm, layernorm, placement, residuals, rmsnorm
from addnorm_lib.checks._core import CheckFailed, RecordMalformed
from addnorm_lib.checks.batchnorm import (
    check_batch_norm,
    check_batch_norm_backward,
    check_batch_norm_module,
)
from addnorm_lib.checks.deepnorm import (
    check_deepnorm_constants,
    check_deepnorm_init,
    check_deepnorm_residual,
)
from addnorm_lib.checks.layernorm import (
    check_layer_norm,
    check_layer_norm_backward,
    check_layer_norm_module,
)
from addnorm_lib.checks.placement import (
    check_post_ln_block,
    check_pre_ln_block,
    check_pre_ln_stack,
    check_vaswani_lr,
    check_warmup_rsqrt_lr,
)
from addnorm_lib.checks.residuals import (
    check_plain_block,
    check_plain_block_backward,
    check_residual_block,
    check_residual_block_backward,
    check_stack_gradient_norms,
)
from addnorm_lib.checks.rmsnorm import (
    check_rms_norm,
    check_rms_norm_backward,
    check_rms_norm_module,
)

JUDGES = {
    name: judge
    for module in (layernorm, residuals, batchnorm, rmsnorm, deepnorm, placement)
    for name, judge in module.JUDGES.items()
}
UNVERIFIED = {
    name: claims
    for module in (layernorm, batchnorm, rmsnorm, deepnorm)
    for name, claims in module.UNVERIFIED.items()
}

__all__ = [
    "JUDGES",
    "UNVERIFIED",
    "CheckFailed",
    "RecordMalformed",
    "check_batch_norm",
    "check_batch_norm_backward",
    "check_batch_norm_module",
    "check_deepnorm_constants",
    "check_deepnorm_init",
    "check_deepnorm_residual",
    "check_layer_norm",
    "check_layer_norm_backward",
    "check_layer_norm_module",
    "check_plain_block",
    "check_plain_block_backward",
    "check_post_ln_block",
    "check_pre_ln_block",
    "check_pre_ln_stack",
    "check_residual_block",
    "check_residual_block_backward",
    "check_rms_norm",
    "check_rms_norm_backward",
    "check_rms_norm_module",
    "check_stack_gradient_norms",
    "check_vaswani_lr",
    "check_warmup_rsqrt_lr",
]
