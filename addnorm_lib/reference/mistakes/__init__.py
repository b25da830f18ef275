"""A catalogue of the usual wrong implementations, as code.

Each entry computes what a learner's function returns when it makes one specific mistake. The
checkers in :mod:`addnorm_lib.checks` run the entries on the same inputs as the learner's function:
when the learner's (wrong) result matches an entry, the feedback names the mistake instead of only
saying "the values differ". The book also uses entries to demonstrate a pitfall
(``layer_norm_one_pass``).

Every function here is wrong on purpose. Never use one for real work.
"""

from addnorm_lib.reference.mistakes._core import Mistake, dispatch
from addnorm_lib.reference.mistakes.batchnorm import (
    BATCH_NORM_BACKWARD_DGAMMA_MISTAKES,
    BATCH_NORM_BACKWARD_MISTAKES,
    BATCH_NORM_MISTAKES,
)
from addnorm_lib.reference.mistakes.deepnorm import (
    DEEPNORM_CONSTANTS_MISTAKES,
    DEEPNORM_RESIDUAL_MISTAKES,
)
from addnorm_lib.reference.mistakes.layernorm import (
    LAYER_NORM_BACKWARD_DGAMMA_MISTAKES,
    LAYER_NORM_BACKWARD_DX_MISTAKES,
    LAYER_NORM_MISTAKES,
    layer_norm_one_pass,
)
from addnorm_lib.reference.mistakes.placement import (
    POST_LN_BLOCK_MISTAKES,
    PRE_LN_BLOCK_MISTAKES,
    PRE_LN_STACK_MISTAKES,
    RSQRT_SLIPS,
    SCHEDULE_SLIPS,
    STACK_SLIPS,
    VASWANI_LR_MISTAKES,
    WARMUP_RSQRT_LR_MISTAKES,
)
from addnorm_lib.reference.mistakes.residuals import (
    PLAIN_BACKWARD_MISTAKES,
    PLAIN_BLOCK_MISTAKES,
    RESIDUAL_BACKWARD_MISTAKES,
    RESIDUAL_BLOCK_MISTAKES,
    STACK_NORMS_MISTAKES,
)
from addnorm_lib.reference.mistakes.rmsnorm import (
    RMS_NORM_BACKWARD_MISTAKES,
    RMS_NORM_DEFAULT_EPS_MISTAKES,
    RMS_NORM_MISTAKES,
    RMS_NORM_ZERO_EPS_MISTAKES,
)

__all__ = [
    "BATCH_NORM_BACKWARD_DGAMMA_MISTAKES",
    "BATCH_NORM_BACKWARD_MISTAKES",
    "BATCH_NORM_MISTAKES",
    "DEEPNORM_CONSTANTS_MISTAKES",
    "DEEPNORM_RESIDUAL_MISTAKES",
    "LAYER_NORM_BACKWARD_DGAMMA_MISTAKES",
    "LAYER_NORM_BACKWARD_DX_MISTAKES",
    "LAYER_NORM_MISTAKES",
    "PLAIN_BACKWARD_MISTAKES",
    "PLAIN_BLOCK_MISTAKES",
    "POST_LN_BLOCK_MISTAKES",
    "PRE_LN_BLOCK_MISTAKES",
    "PRE_LN_STACK_MISTAKES",
    "RESIDUAL_BACKWARD_MISTAKES",
    "RESIDUAL_BLOCK_MISTAKES",
    "RMS_NORM_BACKWARD_MISTAKES",
    "RMS_NORM_DEFAULT_EPS_MISTAKES",
    "RMS_NORM_MISTAKES",
    "RMS_NORM_ZERO_EPS_MISTAKES",
    "RSQRT_SLIPS",
    "SCHEDULE_SLIPS",
    "STACK_NORMS_MISTAKES",
    "STACK_SLIPS",
    "VASWANI_LR_MISTAKES",
    "WARMUP_RSQRT_LR_MISTAKES",
    "Mistake",
    "dispatch",
    "layer_norm_one_pass",
]
