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
    "no_norm": lambda x, sublayer, norm: x + sublayer(x),
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
    "missing_norm1_post": (("no_norm", "self_attn", "norm1"), ("post", "ffn", "norm2")),
    "missing_norm2_post": (("post", "self_attn", "norm1"), ("no_norm", "ffn", "norm2")),
    "missing_norm1_pre": (("no_norm", "self_attn", "norm1"), ("pre", "ffn", "norm2")),
    "missing_norm2_pre": (("pre", "self_attn", "norm1"), ("no_norm", "ffn", "norm2")),
    "no_norm": _steps("no_norm"),
    # parallel blocks: the FFN reads the block's input x, not the stream after the attention
    "parallel_post": lambda x, p: p["norm2"](p["norm1"](x + p["self_attn"](x)) + p["ffn"](x)),
    "parallel_pre": lambda x, p: x + p["self_attn"](p["norm1"](x)) + p["ffn"](p["norm2"](x)),
    "parallel_pre_one_norm": (
        lambda x, p: x + p["self_attn"](p["norm1"](x)) + p["ffn"](p["norm1"](x))
    ),
}


def _block_variant(kind):
    """A Post-LN or Pre-LN block written the wrong way; ``kind`` names how (a key of _BLOCKS):
    two (step, sublayer, norm) steps, or a function of (x, parts) for a parallel block."""
    steps = dispatch(_BLOCKS, kind, "block")

    def compute(x, self_attn, ffn, norm1, norm2):
        import torch

        parts = {"self_attn": self_attn, "ffn": ffn, "norm1": norm1, "norm2": norm2}
        with torch.no_grad():
            if callable(steps):
                return steps(x, parts)
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
    _block_mistake(
        "parallel_post",
        "Your block is a parallel block: the FFN reads the block's input x instead of the "
        "stream after the attention step, norm1(x + self_attn(x)). In a Transformer layer the "
        "sublayers run one after the other.",
        _POST,
    ),
    _block_mistake(
        "missing_norm1_post",
        "Your block is missing norm1: it adds the attention's output to x without normalizing "
        "the sum, so only the FFN's sum goes through a norm (norm2).",
        _POST,
    ),
    _block_mistake(
        "missing_norm2_post",
        "Your block is missing norm2: the FFN's output is added to the stream and returned "
        "without the second norm, so the block's output is not normalized.",
        _POST,
    ),
    _block_mistake(
        "no_norm",
        "Your block has no norm at all: it adds each sublayer's output to the stream and "
        "never applies norm1 or norm2.",
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
    _block_mistake(
        "parallel_pre",
        "Your block is a parallel block (as GPT-J's): the FFN reads norm2 of the block's input "
        "x, not of the stream after the attention step, x + self_attn(norm1(x)). The task's "
        "sublayers run one after the other.",
        _PRE,
    ),
    _block_mistake(
        "parallel_pre_one_norm",
        "Your block is a parallel block with one norm (as PaLM's): both sublayers read norm1(x) "
        "of the block's input. The task's sublayers run one after the other, the FFN on "
        "norm2 of the stream after the attention step.",
        _PRE,
    ),
    _block_mistake(
        "missing_norm1_pre",
        "Your block is missing norm1: the attention reads the stream x itself instead of norm1(x).",
        _PRE,
    ),
    _block_mistake(
        "missing_norm2_pre",
        "Your block is missing norm2: the FFN reads the stream itself instead of norm2 of it.",
        _PRE,
    ),
    _block_mistake(
        "no_norm",
        "Your block has no norm at all: the sublayers read the stream itself, never norm1 or "
        "norm2 of it.",
        _PRE,
    ),
)


STACK_SLIPS = (
    "no_final_norm",
    "norm_after_each",
    "norm_first",
    "reversed",
    "skips_last",
    "norm_inside_loop",
)


def _stack_variant(kind):
    """PreLNStack's forward written the wrong way, from (x, layers, norm); ``kind``: STACK_SLIPS."""
    dispatch(dict.fromkeys(STACK_SLIPS), kind, "stack")

    def compute(x, layers, norm):
        import torch

        layers = list(layers)
        if kind == "reversed":
            layers = layers[::-1]
        if kind == "skips_last":
            layers = layers[:-1]
        with torch.no_grad():
            if kind == "norm_first":
                x = norm(x)
            for index, layer in enumerate(layers):
                x = layer(x)
                last = index == len(layers) - 1
                if kind == "norm_after_each" or (kind == "norm_inside_loop" and last):
                    x = norm(x)
            return norm(x) if kind in ("reversed", "skips_last") else x

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
    Mistake(
        "skips_last",
        "Your stack skips its last layer: it applies every layer but the last, then the norm.",
        "Loop over all of self.layers (for layer in self.layers, not self.layers[:-1] or "
        "range(len(self.layers) - 1)).",
        _stack_variant("skips_last"),
    ),
)

#: What a stack with no layers gets wrong when it is right for any other number of layers.
PRE_LN_EMPTY_STACK_MISTAKES = (
    Mistake(
        "norm_inside_loop",
        "Your stack applies the final norm inside the loop, after the last layer: with no "
        "layers (an empty stack) the loop never runs and the norm is never applied. An empty "
        "Pre-LN stack returns norm(x).",
        "Apply the norm after the loop: for layer in self.layers: x = layer(x); then return "
        "self.norm(x).",
        _stack_variant("norm_inside_loop"),
    ),
)


SCHEDULE_SLIPS = (
    "off_by_one",
    "no_d_model",
    "warmup_power",
    "max",
    "d_model_positive_power",
    "rise_parenthesized",
)
# Exponents written as fractions without parentheses, as Python reads them: ``** -1/2`` is
# ``(** -1) / 2``. Each term the slip can touch, with its source as the learner wrote it.
PRECEDENCE_TERMS = {
    "d_model": "d_model ** -1/2",
    "step": "step ** -1/2",
    "warmup": "warmup ** -3/2",
}
PYTHON_READS = {
    "d_model": "(d_model ** -1) / 2",
    "step": "(step ** -1) / 2",
    "warmup": "(warmup ** -3) / 2",
}


def _schedule_variant(kind, precedence=()):
    """vaswani_lr(step, d_model, warmup) with one slip (one of SCHEDULE_SLIPS, or "precedence"
    with ``precedence`` naming the terms of PRECEDENCE_TERMS written without parentheses); a 0-d
    array, as the judge compares."""
    dispatch(dict.fromkeys((*SCHEDULE_SLIPS, "precedence")), kind, "schedule")
    for term in precedence:
        dispatch(PRECEDENCE_TERMS, term, "schedule precedence")

    def compute(step, d_model, warmup=4000):
        if kind == "off_by_one":
            step = step + 1
        scale = {"no_d_model": 1.0, "d_model_positive_power": d_model**0.5}.get(kind, d_model**-0.5)
        decay = step**-0.5
        rise = step * warmup ** (-0.5 if kind == "warmup_power" else -1.5)
        if kind == "rise_parenthesized":
            rise = (step * warmup) ** -1.5
        if "d_model" in precedence:
            scale = d_model**-1 / 2
        if "step" in precedence:
            decay = step**-1 / 2
        if "warmup" in precedence:
            rise = step * warmup**-3 / 2
        pick = max if kind == "max" else min
        return np.array(scale * pick(decay, rise))

    return compute


def _precedence_mistake(terms):
    """The schedule with the terms ``terms`` of PRECEDENCE_TERMS written without parentheses."""
    written = " and ".join(f"`{PRECEDENCE_TERMS[t]}`" for t in terms)
    read = " and ".join(f"`{PYTHON_READS[t]}`" for t in terms)
    return Mistake(
        "precedence_" + "_".join(terms),
        f"Operator precedence: you wrote {written}, which Python reads as {read}: ** binds "
        "tighter than /, so the exponent is a whole number and the result is then halved.",
        "Put fractional exponents in parentheses, or write them as decimals: d_model ** -0.5, "
        "step ** -0.5, warmup ** -1.5.",
        _schedule_variant("precedence", terms),
    )


VASWANI_LR_MISTAKES = (
    Mistake(
        "no_d_model",
        "Your schedule leaves out the d_model ** -0.5 factor.",
        "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        _schedule_variant("no_d_model"),
    ),
    Mistake(
        "d_model_positive_power",
        "Your schedule multiplies by d_model ** 0.5: the factor is d_model ** -0.5, one over the "
        "square root, so that wider models get smaller rates.",
        "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        _schedule_variant("d_model_positive_power"),
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
        "rise_parenthesized",
        "Your warm-up branch is (step * warmup) ** -1.5: only warmup takes the power, "
        "step * warmup ** -1.5, so that the rate rises linearly with step.",
        "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        _schedule_variant("rise_parenthesized"),
    ),
    *(
        _precedence_mistake(terms)
        for terms in (
            ("d_model", "step", "warmup"),
            ("d_model", "step"),
            ("d_model", "warmup"),
            ("step", "warmup"),
            ("d_model",),
            ("step",),
            ("warmup",),
        )
    ),
    Mistake(
        "off_by_one",
        "Your schedule is one step ahead: steps are counted from 1, as given.",
        "Use step as it is; do not add 1.",
        _schedule_variant("off_by_one"),
    ),
)


RSQRT_SLIPS = ("off_by_one", "no_sqrt", "precedence", "sqrt_of_step_only")


def _rsqrt_variant(kind):
    """warmup_rsqrt_lr(step, peak_lr, warmup) with one slip (one of RSQRT_SLIPS); a 0-d array."""
    dispatch(dict.fromkeys(RSQRT_SLIPS), kind, "warmup_rsqrt_lr")

    def compute(step, peak_lr, warmup):
        if kind == "off_by_one":
            step = step + 1
        decay = {
            "no_sqrt": warmup / step,
            "precedence": (warmup / step) ** 1 / 2,
            "sqrt_of_step_only": warmup / step**0.5,
        }.get(kind, (warmup / step) ** 0.5)
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
        "precedence",
        "Operator precedence: you wrote `(warmup / step) ** 1/2`, which Python reads as "
        "`((warmup / step) ** 1) / 2`: ** binds tighter than /, so the decay is halved, not "
        "square-rooted.",
        "Write (warmup / step) ** 0.5, or math.sqrt(warmup / step).",
        _rsqrt_variant("precedence"),
    ),
    Mistake(
        "sqrt_of_step_only",
        "Your decay is warmup / sqrt(step): the square root is of the whole ratio, "
        "sqrt(warmup / step), so that the rate is peak_lr at step == warmup.",
        "Write math.sqrt(warmup / step), or (warmup / step) ** 0.5.",
        _rsqrt_variant("sqrt_of_step_only"),
    ),
    Mistake(
        "off_by_one",
        "Your schedule is one step ahead: steps are counted from 1, as given.",
        "Use step as it is; do not add 1.",
        _rsqrt_variant("off_by_one"),
    ),
)
