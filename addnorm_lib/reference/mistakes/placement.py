"""Post-LN and Pre-LN blocks, stacks and warm-up schedules: the usual wrong implementations.

Every function here is wrong on purpose."""

import numpy as np

from addnorm_lib.reference.mistakes._core import Mistake, dispatch

# ----------------------------------------------------------------------------------------------
# Placement: PostLNBlock / PreLNBlock(self_attn, ffn, d_model) and PreLNStack(layers, norm).
# A block mistake computes the block's output from (x, self_attn, ffn, norm1, norm2).


# One residual step of a block, right or wrong, from the stream x, a sublayer and a norm.
_STEPS = {
    "post": lambda x, sublayer, norm: norm(x + sublayer(x)),
    "pre": lambda x, sublayer, norm: x + sublayer(norm(x)),
    "normalized_residual": lambda x, sublayer, norm: norm(x) + sublayer(norm(x)),
    "norm_on_branch": lambda x, sublayer, norm: x + norm(sublayer(x)),
    "norm_inside_and_after": lambda x, sublayer, norm: norm(x + sublayer(norm(x))),
    "no_residual": lambda x, sublayer, norm: sublayer(x),
}


def _steps(step, first="self_attn", second="ffn", norms=("norm1", "norm2")):
    """A block as two steps: (step, sublayer, norm) for the first sublayer, then the second."""
    return ((step, first, norms[0]), (step, second, norms[1]))


# A block written the wrong way (or the other placement): its two steps, by name.
_BLOCKS = {
    "pre_ln": _steps("pre"),
    "post_ln": _steps("post"),
    "one_norm_post": _steps("post", norms=("norm1", "norm1")),
    "one_norm_pre": _steps("pre", norms=("norm1", "norm1")),
    "ffn_first_post": _steps("post", first="ffn", second="self_attn"),
    "ffn_first_pre": _steps("pre", first="ffn", second="self_attn"),
    "normalized_residual": _steps("normalized_residual"),
    "norm_on_branch": _steps("norm_on_branch"),
    "post_norm_inside": _steps("norm_inside_and_after"),
    "no_residual": _steps("no_residual"),
}


def _block_variant(kind):
    """A Post-LN or Pre-LN block written the wrong way; ``kind`` names how (a key of _BLOCKS)."""
    steps = dispatch(_BLOCKS, kind, "block")

    def compute(x, self_attn, ffn, norm1, norm2):
        import torch

        parts = {"self_attn": self_attn, "ffn": ffn, "norm1": norm1, "norm2": norm2}
        with torch.no_grad():
            for step, sublayer, norm in steps:
                x = _STEPS[step](x, parts[sublayer], parts[norm])
            return x

    return compute


def _block_mistake(kind, diagnosis, hint):
    return Mistake(kind, diagnosis, hint, _block_variant(kind))


_POST = "x = norm1(x + self_attn(x)); then x = norm2(x + ffn(x))."
_PRE = "x = x + self_attn(norm1(x)); then x = x + ffn(norm2(x))."
POST_LN_BLOCK_MISTAKES = (
    _block_mistake(
        "pre_ln",
        "Your block is Pre-LN: it normalizes the sublayers' inputs. Post-LN adds first and "
        "normalizes the sum.",
        _POST,
    ),
    _block_mistake(
        "one_norm_post",
        "Your block uses norm1 twice: the FFN's sum must go through norm2, which has its own "
        "weight and bias.",
        _POST,
    ),
    _block_mistake(
        "ffn_first_post",
        "Your block runs the FFN before the attention: a Transformer layer attends first.",
        _POST,
    ),
    _block_mistake(
        "post_norm_inside",
        "Your block normalizes the sublayers' inputs as well as the sums: Post-LN's sublayers read "
        "the stream as it is.",
        _POST,
    ),
    _block_mistake(
        "norm_on_branch",
        "Your block normalizes each sublayer's output before adding it (OLMo 2's placement), not "
        "the sum.",
        _POST,
    ),
    _block_mistake(
        "no_residual",
        "Your block has no residual connection: the sublayers' outputs must be added to their "
        "inputs.",
        _POST,
    ),
)
PRE_LN_BLOCK_MISTAKES = (
    _block_mistake(
        "post_ln",
        "Your block is Post-LN: it normalizes the sum after the add. Pre-LN normalizes a copy of "
        "the stream for each sublayer and never the stream.",
        _PRE,
    ),
    _block_mistake(
        "one_norm_pre",
        "Your block uses norm1 for both sublayers: the FFN's input must go through norm2, which "
        "has its own weight and bias.",
        _PRE,
    ),
    _block_mistake(
        "ffn_first_pre",
        "Your block runs the FFN before the attention: a Transformer layer attends first.",
        _PRE,
    ),
    _block_mistake(
        "normalized_residual",
        "Your block adds the sublayer's output to the *normalized* stream, norm1(x) + "
        "self_attn(norm1(x)): the residual must carry x itself, unnormalized.",
        _PRE,
    ),
    _block_mistake(
        "norm_on_branch",
        "Your block normalizes each sublayer's output (OLMo 2's placement) instead of its input.",
        _PRE,
    ),
    _block_mistake(
        "no_residual",
        "Your block has no residual connection: the sublayers' outputs must be added to their "
        "inputs.",
        _PRE,
    ),
)


STACK_SLIPS = ("no_final_norm", "norm_after_each", "norm_first", "reversed")


def _stack_variant(kind):
    """PreLNStack's forward written the wrong way, from (x, layers, norm); ``kind``: STACK_SLIPS."""
    dispatch(dict.fromkeys(STACK_SLIPS), kind, "stack")

    def compute(x, layers, norm):
        import torch

        with torch.no_grad():
            if kind == "norm_first":
                x = norm(x)
            for layer in reversed(layers) if kind == "reversed" else layers:
                x = layer(x)
                if kind == "norm_after_each":
                    x = norm(x)
            return norm(x) if kind in ("reversed",) else x

    return compute


PRE_LN_STACK_MISTAKES = (
    Mistake(
        "no_final_norm",
        "Your stack returns the last layer's output without the final norm: a Pre-LN stream is "
        "never normalized inside the blocks, so the stack must end with norm.",
        "for layer in self.layers: x = layer(x); then return self.norm(x).",
        _stack_variant("no_final_norm"),
    ),
    Mistake(
        "norm_after_each",
        "Your stack applies the final norm after every layer: it belongs once, at the end.",
        "for layer in self.layers: x = layer(x); then return self.norm(x).",
        _stack_variant("norm_after_each"),
    ),
    Mistake(
        "norm_first",
        "Your stack applies its norm before the layers instead of after them.",
        "for layer in self.layers: x = layer(x); then return self.norm(x).",
        _stack_variant("norm_first"),
    ),
    Mistake(
        "reversed",
        "Your stack applies the layers in reverse order.",
        "Apply self.layers in the order given.",
        _stack_variant("reversed"),
    ),
)


SCHEDULE_SLIPS = ("off_by_one", "no_d_model", "warmup_power", "max")


def _schedule_variant(kind):
    """vaswani_lr(step, d_model, warmup) with one slip (one of SCHEDULE_SLIPS); a 0-d array, as
    the judge compares."""
    dispatch(dict.fromkeys(SCHEDULE_SLIPS), kind, "schedule")

    def compute(step, d_model, warmup=4000):
        if kind == "off_by_one":
            step = step + 1
        scale = 1.0 if kind == "no_d_model" else d_model**-0.5
        rise = step * warmup ** (-0.5 if kind == "warmup_power" else -1.5)
        pick = max if kind == "max" else min
        return np.array(scale * pick(step**-0.5, rise))

    return compute


VASWANI_LR_MISTAKES = (
    Mistake(
        "no_d_model",
        "Your schedule leaves out the d_model ** -0.5 factor.",
        "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        _schedule_variant("no_d_model"),
    ),
    Mistake(
        "max_instead_of_min",
        "Your schedule takes the max of the two branches: the min is what makes it rise, then "
        "fall.",
        "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        _schedule_variant("max"),
    ),
    Mistake(
        "warmup_power",
        "Your warm-up branch uses warmup ** -0.5: it is step * warmup ** -1.5, so that both "
        "branches meet at step = warmup.",
        "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        _schedule_variant("warmup_power"),
    ),
    Mistake(
        "off_by_one",
        "Your schedule is one step ahead: steps are counted from 1, as given.",
        "Use step as it is; do not add 1.",
        _schedule_variant("off_by_one"),
    ),
)


RSQRT_SLIPS = ("off_by_one", "no_sqrt")


def _rsqrt_variant(kind):
    """warmup_rsqrt_lr(step, peak_lr, warmup) with one slip (one of RSQRT_SLIPS); a 0-d array."""
    dispatch(dict.fromkeys(RSQRT_SLIPS), kind, "warmup_rsqrt_lr")

    def compute(step, peak_lr, warmup):
        if kind == "off_by_one":
            step = step + 1
        decay = warmup / step if kind == "no_sqrt" else (warmup / step) ** 0.5
        return np.array(peak_lr * min(step / warmup, decay))

    return compute


WARMUP_RSQRT_LR_MISTAKES = (
    Mistake(
        "no_sqrt",
        "After the warm-up your schedule decays as warmup / step: the decay is its square root, "
        "sqrt(warmup / step).",
        "lr = peak_lr * min(step / warmup, sqrt(warmup / step)).",
        _rsqrt_variant("no_sqrt"),
    ),
    Mistake(
        "off_by_one",
        "Your schedule is one step ahead: steps are counted from 1, as given.",
        "Use step as it is; do not add 1.",
        _rsqrt_variant("off_by_one"),
    ),
)
