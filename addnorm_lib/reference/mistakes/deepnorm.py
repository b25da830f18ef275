"""DeepNorm's constants and residual step: the usual wrong implementations.

Every function here is wrong on purpose."""

import numpy as np

from addnorm_lib.reference.mistakes._core import Mistake, dispatch

# ----------------------------------------------------------------------------------------------
# DeepNorm: deepnorm_constants(architecture, N, M, stack) -> (alpha, beta);
#           deepnorm_residual(x, sublayer, norm, alpha) -> norm(alpha * x + sublayer(x)).


def _encoder_only(n: int) -> tuple[float, float]:
    """The one-stack constants ``((2n)^(1/4), (8n)^(-1/4))``."""
    return (2 * n) ** 0.25, (8 * n) ** -0.25


def _constants_variant(
    architecture,
    num_encoder_layers=0,
    num_decoder_layers=0,
    stack=None,
    *,
    one_stack_formula=False,
    swapped=False,
    beta_is_inverse=False,
):
    """deepnorm_constants with one slip; the options say which. Returns ``[alpha, beta]``.

    The names are checked as the reference checks them: an unknown architecture or stack raises.
    """
    from addnorm_lib.reference.deepnorm import deepnorm_constants

    alpha, beta = deepnorm_constants(architecture, num_encoder_layers, num_decoder_layers, stack)
    if one_stack_formula and architecture == "encoder-decoder":
        layers = {"encoder": num_encoder_layers, "decoder": num_decoder_layers}[stack]
        alpha, beta = _encoder_only(layers)
    if swapped:
        alpha, beta = beta, alpha
    if beta_is_inverse:
        beta = 1.0 / alpha
    return np.array([alpha, beta])


DEEPNORM_CONSTANTS_MISTAKES = (
    Mistake(
        "encoder_decoder_one_stack_formula",
        "For an encoder-decoder model you used the one-stack formulas, alpha = (2L)^(1/4) and "
        "beta = (8L)^(-1/4). An encoder-decoder model has its own constants: the encoder's depend "
        "on N and M, 0.81 (N^4 M)^(1/16) and 0.87 (N^4 M)^(-1/16); the decoder's are (3M)^(1/4) "
        "and (12M)^(-1/4).",
        "Branch on the architecture and, for encoder-decoder, on the stack.",
        lambda *args: _constants_variant(*args, one_stack_formula=True),
    ),
    Mistake(
        "swapped",
        "You returned (beta, alpha): alpha > 1 up-weights the residual, beta < 1 scales the "
        "initial weights down.",
        "Return (alpha, beta) in that order.",
        lambda *args: _constants_variant(*args, swapped=True),
    ),
    Mistake(
        "beta_is_inverse_alpha",
        "Your beta is 1 / alpha: beta has its own formula (for encoder-only, (8N)^(-1/4), not "
        "(2N)^(-1/4)).",
        "Use the table's beta column.",
        lambda *args: _constants_variant(*args, beta_is_inverse=True),
    ),
)


# deepnorm_residual(x, sublayer, norm, alpha) written the wrong way, one step each.
_DEEPNORM_STEPS = {
    "alpha_on_branch": lambda x, sublayer, norm, alpha: norm(x + alpha * sublayer(x)),
    "no_alpha": lambda x, sublayer, norm, alpha: norm(x + sublayer(x)),
    "alpha_after_norm": lambda x, sublayer, norm, alpha: alpha * norm(x + sublayer(x)),
    "scaled_input": lambda x, sublayer, norm, alpha: norm(alpha * x + sublayer(alpha * x)),
    "pre_norm": lambda x, sublayer, norm, alpha: alpha * x + sublayer(norm(x)),
    "no_norm": lambda x, sublayer, norm, alpha: alpha * x + sublayer(x),
}


def _residual_variant(kind):
    """deepnorm_residual written the wrong way; ``kind`` names how (a key of _DEEPNORM_STEPS)."""
    step = dispatch(_DEEPNORM_STEPS, kind, "deepnorm_residual")

    def compute(x, sublayer, norm, alpha):
        import torch

        with torch.no_grad():
            return step(x, sublayer, norm, alpha)

    return compute


DEEPNORM_RESIDUAL_MISTAKES = (
    Mistake(
        "alpha_on_branch",
        "You multiplied the sublayer's output by alpha: norm(x + alpha * G(x)). DeepNorm "
        "up-weights the residual x, not the branch. (Because LayerNorm ignores the overall scale, "
        "your version equals norm(x / alpha + G(x)): it *down*-weights the residual.)",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("alpha_on_branch"),
    ),
    Mistake(
        "no_alpha",
        "You left alpha out: norm(x + G(x)) is the plain Post-LN step.",
        "Multiply the residual by alpha: norm(alpha * x + sublayer(x)).",
        _residual_variant("no_alpha"),
    ),
    Mistake(
        "alpha_after_norm",
        "You multiplied the normalized output by alpha. The scaling belongs before the norm, on "
        "the residual.",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("alpha_after_norm"),
    ),
    Mistake(
        "sublayer_of_scaled_input",
        "You fed alpha * x to the sublayer as well: the sublayer sees x; only the shortcut is "
        "scaled.",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("scaled_input"),
    ),
    Mistake(
        "pre_norm",
        "You normalized the sublayer's input (a Pre-LN step): DeepNorm keeps Post-LN's "
        "placement, the norm after the addition.",
        "norm(alpha * x + sublayer(x)).",
        _residual_variant("pre_norm"),
    ),
    Mistake(
        "no_norm",
        "You returned alpha * x + G(x) without the norm.",
        "Apply norm to the sum: norm(alpha * x + sublayer(x)).",
        _residual_variant("no_norm"),
    ),
)
