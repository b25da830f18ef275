"""Checkers for the placement exercise: Post-LN and Pre-LN blocks, a Pre-LN stack, two schedules.

The classes and functions under check (signatures of :mod:`addnorm_lib.reference.placement`):

- ``PostLNBlock(self_attn, ffn, d_model)`` and ``PreLNBlock(self_attn, ffn, d_model)``, with
  LayerNorms ``norm1`` and ``norm2`` (as ``torch.nn.TransformerEncoderLayer``);
- ``PreLNStack(layers, norm)``: the layers in order, then the final norm;
- ``vaswani_lr(step, d_model, warmup=4000)`` and ``warmup_rsqrt_lr(step, peak_lr, warmup)``.

The block checks measure behaviour: the per-token statistics of what a block returns (a Post-LN
block's tokens leave normalized, a Pre-LN block's residual stream does not), then the output
against the reference on the same sublayers with norm parameters away from 1 and 0, which tells
norm1 from norm2. Sublayers and inputs are rebuilt from the seed on each side.
"""

import numpy as np

from addnorm_lib.checks._advice import expect_tensor_like
from addnorm_lib.checks._core import (
    Case,
    ListOf,
    Observation,
    compare,
    conform,
    diagnose,
    expect_keys,
    fail,
    judged_calls,
    observe,
    observe_cases,
    passed,
)
from addnorm_lib.checks._record import run_check

D_MODEL, HEADS, FFN = 8, 2, 16
BLOCK_OBSERVATIONS = ("keys", "fresh", "loaded", "input_after")
BLOCK_FORWARD_HINT = (
    "Each sublayer and each norm maps a (B, T, C) tensor to one of the same shape: call them "
    "as self.self_attn(...), self.ffn(...), self.norm1(...) and self.norm2(...) on the stream."
)
BLOCK_KEYS_HINT = (
    "Keep the sublayers you are given as self.self_attn and self.ffn, and name the two "
    "LayerNorms norm1 and norm2, as torch.nn.TransformerEncoderLayer does."
)


def _filled(module, rng):
    """``module`` in float64 with every parameter drawn from ``rng`` (norms around 1 and 0)."""
    import torch

    module = module.double()
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            is_norm = "norm" in name
            center = 1.0 if is_norm and name.endswith("weight") else 0.0
            spread = 0.3 if is_norm else 1.0 / np.sqrt(parameter.shape[-1])
            parameter.copy_(torch.from_numpy(rng.normal(center, spread, tuple(parameter.shape))))
    return module


def block_parts(seed: int = 0):
    """``(x, self_attn, ffn, norm_state)``: the input, fresh seeded sublayers, norm parameters."""
    import torch

    from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

    rng = np.random.default_rng(seed + 50)
    self_attn = _filled(SelfAttention(D_MODEL, HEADS), rng)
    ffn = _filled(FeedForward(D_MODEL, FFN), rng)
    norm_state = {
        f"{norm}.{p}": rng.normal(1.0 if p == "weight" else 0.0, 0.3, D_MODEL)
        for norm in ("norm1", "norm2")
        for p in ("weight", "bias")
    }
    x = torch.from_numpy(rng.normal(0.0, 3.0, (2, 5, D_MODEL)))  # (B, T, C), RMS about 3
    return x, self_attn, ffn, norm_state


def observe_block(cls, seed: int = 0) -> dict:
    """Build ``cls(self_attn, ffn, d_model)`` on seeded sublayers; record keys and outputs."""
    import torch

    def build():
        _, self_attn, ffn, _ = block_parts(seed)
        return cls(self_attn, ffn, D_MODEL).double()

    def keys():
        return sorted(build().state_dict())

    def fresh_output():
        x = block_parts(seed)[0]
        with torch.no_grad():
            return build()(x.clone())

    def loaded_output():
        x, _, _, norm_state = block_parts(seed)
        block = build()
        state = block.state_dict()
        state.update({k: torch.from_numpy(v) for k, v in norm_state.items()})
        block.load_state_dict(state)
        with torch.no_grad():
            return block(x.clone())

    def input_after():  # gradients on, as in training: the caller's x after one call
        x = block_parts(seed)[0]
        build()(x)
        return x

    steps = [("keys", keys), ("fresh", fresh_output), ("loaded", loaded_output)]
    steps.append(("input_after", input_after))
    return {name: observe(step, (), {}) for name, step in steps}


def _key_differences(mine: list[str], expected: list[str]) -> str:
    """What a module's state_dict keys lack and have beyond ``expected``, by submodule where a
    whole submodule is missing or extra (``"no self_attn.* (it has attn.* instead)"``)."""

    def tops(keys):
        return {key.split(".")[0] for key in keys}

    missing_tops, extra_tops = tops(expected) - tops(mine), tops(mine) - tops(expected)
    missing = [k for k in expected if k not in mine and k.split(".")[0] not in missing_tops]
    extra = [k for k in mine if k not in expected and k.split(".")[0] not in extra_tops]
    parts = []
    if missing_tops or missing:
        parts.append(
            "it has no " + ", ".join([*(f"{t}.*" for t in sorted(missing_tops)), *missing])
        )
    if extra_tops or extra:
        parts.append(
            "it has " + ", ".join([*(f"{t}.*" for t in sorted(extra_tops)), *extra]) + ", which "
            "the task does not name"
        )
    return "; ".join(parts)


def _token_statistics(y: np.ndarray) -> tuple[float, float]:
    """Largest |mean| and largest |variance - 1| over the tokens of a (B, T, C) output."""
    return float(np.abs(y.mean(-1)).max()), float(np.abs(y.var(-1) - 1.0).max())


def _judge_block(observations: dict, seed: int, post: bool) -> str:
    __tracebackhide__ = True
    import torch

    from addnorm_lib.reference import mistakes, placement

    name = "PostLNBlock" if post else "PreLNBlock"
    expect_keys(name, observations, BLOCK_OBSERVATIONS)
    for key in BLOCK_OBSERVATIONS:
        observation = observations[key]
        if observation.not_implemented:
            fail(f"{name} is not implemented yet: replace the stub with your code.")
        if observation.error and key == "keys":
            fail(
                f"{name}(self_attn, ffn, d_model={D_MODEL}) raised {observation.error}\n"
                f"Hint: {BLOCK_KEYS_HINT}"
            )
    reference_cls = placement.PostLNBlock if post else placement.PreLNBlock
    x, self_attn, ffn, norm_state = block_parts(seed)
    reference = reference_cls(self_attn, ffn, D_MODEL).double()
    expected_keys = sorted(reference.state_dict())
    conform(observations["keys"].value, ListOf(str), "state_dict keys")
    if observations["keys"].value != expected_keys:
        fail(
            f"{name}'s state_dict is not as the task names it: "
            f"{_key_differences(observations['keys'].value, expected_keys)}.\n"
            f"Hint: {BLOCK_KEYS_HINT}"
        )
    for key in BLOCK_OBSERVATIONS[1:]:  # built and named as asked, then raised
        error = observations[key].error
        if error and "loading state_dict" in error:
            fail(
                f"Loading the norms' weights and biases into {name} (load_state_dict) raised "
                f"{error}\nHint: create each norm as nn.LayerNorm(d_model). {BLOCK_KEYS_HINT}"
            )
        if error:
            fail(
                f"{name}'s forward raised {error} on a (B, T, C) = (2, 5, {D_MODEL}) float64 "
                f"input.\nHint: {BLOCK_FORWARD_HINT}"
            )
    checked = ["keeps the sublayers and names its norms norm1 and norm2"]

    fresh = np.asarray(observations["fresh"].value)
    if fresh.shape != tuple(x.shape):
        fail(
            f"{name} returned shape {fresh.shape} for a (B, T, C) = {tuple(x.shape)} input; a "
            "block keeps the shape."
        )
    state = reference.state_dict()
    state.update({k: torch.from_numpy(v) for k, v in norm_state.items()})
    reference.load_state_dict(state)
    with torch.no_grad():
        expected = reference(x).numpy()
    known = mistakes.POST_LN_BLOCK_MISTAKES if post else mistakes.PRE_LN_BLOCK_MISTAKES
    mistake_args = (x, self_attn, ffn, reference.norm1, reference.norm2)
    loaded = observations["loaded"].value
    case = Case(
        f"a (B, T, C) = {tuple(x.shape)} input of RMS about 3, norm1 and norm2 loaded with "
        "different weights and biases",
        (),
        atol=1e-10,
        rtol=1e-8,
    )

    def named(default_hint: str) -> str:
        """The named mistake the loaded output matches, else ``default_hint``, as the message's
        last lines."""
        mistake = (
            diagnose(loaded, expected, known, mistake_args, atol=case.atol, rtol=case.rtol)
            if isinstance(loaded, np.ndarray) and loaded.shape == expected.shape
            else None
        )
        if mistake is None:
            return f"Hint: {default_hint}"
        return f"{mistake.diagnosis}\nHint: {mistake.hint}"

    mean_error, var_error = _token_statistics(fresh)
    described = (
        f"a (B, T, C) = {tuple(x.shape)} input of RMS about 3, norms freshly "
        "initialized (weight 1, bias 0)"
    )
    if post and (mean_error > 1e-6 or var_error > 1e-3):
        fail(
            f"{name}, on {described}: its output tokens are not normalized (per-token mean up to "
            f"{mean_error:.3g} from 0, variance up to {var_error:.3g} from 1). A Post-LN block "
            "ends with a LayerNorm of the sum, so every token leaves it with mean 0 and variance "
            f"1 (before the norm's affine).\n{named(mistakes.placement._POST)}"
        )
    if not post and var_error < 1e-2:
        fail(
            f"{name}, on {described}: every output token has variance 1, so your block "
            "normalizes the residual stream. In Pre-LN only the sublayers' inputs are "
            "normalized; the stream carries x plus the sublayers' outputs, unnormalized.\n"
            f"{named(mistakes.placement._PRE)}"
        )
    checked.append(
        "per-token statistics of the output: normalized"
        if post
        else "per-token statistics of the output: the residual stream is not normalized"
    )

    where = f"{name}, on {case.description}"
    loaded_type = observations["loaded"].type_name
    expect_tensor_like(loaded, expected, where=where, what="the output", type_name=loaded_type)
    compare(
        loaded,
        expected,
        name=name,
        what="the output",
        case=case,
        mistakes=known,
        mistake_args=mistake_args,
        type_name=loaded_type,
    )
    checked.append("matches the reference with norm1 and norm2 set apart")
    after = observations["input_after"].value
    if not (isinstance(after, np.ndarray) and np.array_equal(after, x.numpy())):
        fail(
            f"{name} changed its input x in place (with gradients on, as in training): the "
            "caller's tensor is not what it passed in, and autograd may need the original.\n"
            "Hint: write x = x + self.self_attn(...), which makes a new tensor, not x += ...."
        )
    checked.append("leaves its input unchanged")
    return passed(name, checked)


def judge_post_ln_block(observations: dict, seed: int = 0) -> str:
    """Judge a recorded Post-LN block: norm names, normalized output tokens, then the output."""
    return _judge_block(observations, seed, post=True)


def judge_pre_ln_block(observations: dict, seed: int = 0) -> str:
    """Judge a recorded Pre-LN block: norm names, an unnormalized stream, then the output."""
    return _judge_block(observations, seed, post=False)


def check_post_ln_block(cls, seed: int = 0) -> None:
    """Check a learner's ``PostLNBlock(self_attn, ffn, d_model)``."""
    __tracebackhide__ = True
    run_check("check_post_ln_block", observe_block, judge_post_ln_block, cls, seed)


def check_pre_ln_block(cls, seed: int = 0) -> None:
    """Check a learner's ``PreLNBlock(self_attn, ffn, d_model)``."""
    __tracebackhide__ = True
    run_check("check_pre_ln_block", observe_block, judge_pre_ln_block, cls, seed)


# ----------------------------------------------------------------------------------------------
# PreLNStack(layers, norm)

STACK_DEPTH = 3
STACK_OBSERVATIONS = ("keys", "output", "empty")
EMPTY_STACK_HINT = (
    "Loop over self.layers, whatever their number, and apply self.norm after the loop: "
    "for layer in self.layers: x = layer(x); then return self.norm(x). Do not read "
    "self.layers[0] or apply the norm inside the loop."
)


def stack_parts(seed: int = 0):
    """``(x, layers, norm)``: seeded public blocks (PaLM-style) and a LayerNorm, float64."""
    import torch

    from addnorm_lib.transformer.architectures import ParallelBlock
    from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

    rng = np.random.default_rng(seed + 51)
    layers = [
        _filled(
            ParallelBlock(SelfAttention(D_MODEL, HEADS), FeedForward(D_MODEL, FFN), D_MODEL), rng
        )
        for _ in range(STACK_DEPTH)
    ]
    norm = _filled(torch.nn.LayerNorm(D_MODEL), rng)
    x = torch.from_numpy(rng.normal(0.0, 2.0, (2, 4, D_MODEL)))
    return x, layers, norm


def observe_pre_ln_stack(cls, seed: int = 0) -> dict:
    """Build ``cls(layers, norm)`` from :func:`stack_parts`; record its state_dict keys, output."""
    import torch

    def keys():
        _, layers, norm = stack_parts(seed)
        return sorted(cls(layers, norm).state_dict())

    def output():
        x, layers, norm = stack_parts(seed)
        with torch.no_grad():
            return cls(layers, norm)(x)

    def empty():  # a stack of no layers: the norm alone
        x, _, norm = stack_parts(seed)
        with torch.no_grad():
            return cls([], norm)(x)

    steps = {"keys": keys, "output": output, "empty": empty}
    return {name: observe(step, (), {}) for name, step in steps.items()}


def judge_pre_ln_stack(observations: dict, seed: int = 0) -> str:
    """Compare a recorded ``PreLNStack`` with the reference: state_dict keys, then the output.

    Raises CheckFailed naming the mistake; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    import torch

    from addnorm_lib.reference import mistakes, placement
    from addnorm_lib.reference.mistakes.placement import PRE_LN_EMPTY_STACK_MISTAKES

    name = "PreLNStack"
    expect_keys(name, observations, STACK_OBSERVATIONS)
    for key in STACK_OBSERVATIONS:
        observation = observations[key]
        if observation.not_implemented:
            fail(f"{name} is not implemented yet: replace the stub with your code.")
        if observation.error and key == "empty":
            fail(
                f"{name}([], norm), a stack of no layers, raised {observation.error}. With no "
                "layers the stack is its final norm alone: it returns norm(x).\n"
                f"Hint: {EMPTY_STACK_HINT}"
            )
        if observation.error:
            fail(f"{name}(layers, norm) raised {observation.error}")
    x, layers, norm = stack_parts(seed)
    reference = placement.PreLNStack(layers, norm)
    conform(observations["keys"].value, ListOf(str), "state_dict keys")
    if observations["keys"].value != sorted(reference.state_dict()):
        fail(
            f"{name}'s state_dict does not hold its layers' and its norm's parameters as "
            "layers.0..., layers.1..., norm...: keep the layers in an nn.ModuleList named "
            "self.layers and the norm as self.norm (as torch.nn.TransformerEncoder), so that "
            "an optimizer sees them."
        )
    runs = (
        ("output", f"{STACK_DEPTH} layers and a LayerNorm", layers, mistakes.PRE_LN_STACK_MISTAKES),
        ("empty", "no layers (an empty stack) and a LayerNorm", [], PRE_LN_EMPTY_STACK_MISTAKES),
    )
    for key, described, some_layers, known in runs:
        with torch.no_grad():
            expected = placement.PreLNStack(some_layers, norm)(x).numpy()
        case = Case(
            f"{described} on a (B, T, C) = {tuple(x.shape)} input", (), atol=1e-10, rtol=1e-8
        )
        value, type_name = observations[key].value, observations[key].type_name
        where = f"{name}, on {case.description}"
        expect_tensor_like(value, expected, where=where, what="the output", type_name=type_name)
        compare(
            value,
            expected,
            name=name,
            what="the output",
            case=case,
            mistakes=known,
            mistake_args=(x, some_layers, norm),
            type_name=type_name,
        )
    return passed(
        name,
        [
            "registers its layers and its norm (state_dict keys as torch's)",
            "applies the layers in order, then the final norm once",
            "an empty stack (no layers) returns norm(x)",
        ],
    )


def check_pre_ln_stack(cls, seed: int = 0) -> None:
    """Check a learner's ``PreLNStack(layers, norm)``."""
    __tracebackhide__ = True
    run_check("check_pre_ln_stack", observe_pre_ln_stack, judge_pre_ln_stack, cls, seed)


# ----------------------------------------------------------------------------------------------
# vaswani_lr(step, d_model, warmup) and warmup_rsqrt_lr(step, peak_lr, warmup)

# (step, d_model, warmup): around the peak of the paper's setting, then two other settings
VASWANI_CALLS = [(step, 512, 4000) for step in (1, 100, 3999, 4000, 4001, 100_000)]
VASWANI_CALLS += [(50, 64, 10), (7, 1024, 1)]
# (step, peak_lr, warmup)
RSQRT_CALLS = [(step, 1e-3, 100) for step in (1, 50, 99, 100, 101, 400)]  # each side of the peak
RSQRT_CALLS += [(10_000, 3e-4, 1000), (5, 0.1, 1)]


#: said when a call of the drawn setting fails and no known mistake matches
DRAWN_VASWANI_HINT = (
    "The schedule must hold for any d_model and warmup: "
    "d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)."
)
DRAWN_RSQRT_HINT = (
    "With peak_lr = (d_model * warmup) ** -0.5, as here, warmup_rsqrt_lr(step, peak_lr, warmup) "
    "equals vaswani_lr(step, d_model, warmup): a linear rise to peak_lr at step == warmup, then "
    "peak_lr * sqrt(warmup / step)."
)


def _schedule_cases(calls, names, hint: str = "") -> list[Case]:
    """One exact Case per call, described as ``name=value, ...``."""
    cases = []
    for call in calls:
        description = ", ".join(f"{n}={v!r}" for n, v in zip(names, call, strict=True))
        cases.append(Case(description, call, atol=0.0, rtol=1e-9, hint=hint))
    return cases


def drawn_schedule(seed: int) -> tuple[int, int, tuple[int, ...]]:
    """``(d_model, warmup, steps)`` drawn from ``seed``: a step inside the warm-up, one after it
    and one far beyond. Checked for every seed, as the schedules must work for any setting; a
    hidden seed's are ones the learner never saw."""
    rng = np.random.default_rng(seed + 52)
    d_model = int(rng.choice([64, 96, 128, 256, 384, 768, 1024]))
    warmup = int(rng.integers(10, 5000))
    steps = (
        int(rng.integers(2, warmup)),
        int(rng.integers(warmup + 1, 4 * warmup)),
        int(rng.integers(10 * warmup, 100 * warmup)),
    )
    return d_model, warmup, steps


def vaswani_cases(seed: int = 0) -> list[Case]:
    """The calls ``(step, d_model, warmup)`` checked: fixed ones, then a setting drawn from
    ``seed`` (:func:`drawn_schedule`)."""
    d_model, warmup, steps = drawn_schedule(seed)
    names = ("step", "d_model", "warmup")
    drawn = [(step, d_model, warmup) for step in steps]
    return [
        *_schedule_cases(VASWANI_CALLS, names),
        *_schedule_cases(drawn, names, DRAWN_VASWANI_HINT),
    ]


def rsqrt_cases(seed: int = 0) -> list[Case]:
    """The calls ``(step, peak_lr, warmup)`` checked: fixed ones, then the setting drawn from
    ``seed`` with peak_lr = (d_model * warmup) ** -0.5, where the two schedules agree."""
    d_model, warmup, steps = drawn_schedule(seed)
    peak_lr = (d_model * warmup) ** -0.5
    names = ("step", "peak_lr", "warmup")
    drawn = [(step, peak_lr, warmup) for step in steps]
    return [*_schedule_cases(RSQRT_CALLS, names), *_schedule_cases(drawn, names, DRAWN_RSQRT_HINT)]


def _consistent_first(known, cases, observations) -> list:
    """``known`` with the mistakes that match every float the learner returned put first: a slip
    that shows at some steps only (one term of the min) is named by all the steps, not the first."""

    def matches_all(mistake) -> bool:
        for case, observation in zip(cases, observations, strict=True):
            value = observation.value if isinstance(observation, Observation) else None
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            with np.errstate(all="ignore"):
                if not np.isclose(float(mistake.compute(*case.args)), value, rtol=case.rtol):
                    return False
        return True

    consistent = [mistake for mistake in known if matches_all(mistake)]
    return consistent + [mistake for mistake in known if mistake not in consistent]


def _judge_schedule(name, cases, reference, observations, known=()) -> str:
    __tracebackhide__ = True
    calls = judged_calls(name, cases, observations)
    known = _consistent_first(known, cases, observations) if known else known
    for case, observation, value in calls:
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail(f"{name}({case.description}) returned a {observation.type_name}; return a float.")
        compare(
            np.array(float(value)),
            np.array(reference(*case.args)),
            name=name,
            what="the learning rate",
            case=case,
            mistakes=known,
            mistake_args=case.args,
        )
    return passed(name, [f"{name}({case.description})" for case in cases])


def observe_vaswani_lr(vaswani_lr, seed: int = 0) -> list[Observation]:
    """Observe ``vaswani_lr`` on each case of :func:`vaswani_cases`."""
    return observe_cases(vaswani_lr, vaswani_cases(seed))


def judge_vaswani_lr(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``vaswani_lr`` values with the reference; each must be a float."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, placement

    return _judge_schedule(
        "vaswani_lr",
        vaswani_cases(seed),
        placement.vaswani_lr,
        observations,
        mistakes.VASWANI_LR_MISTAKES,
    )


def observe_warmup_rsqrt_lr(warmup_rsqrt_lr, seed: int = 0) -> list[Observation]:
    """Observe ``warmup_rsqrt_lr`` on each case of :func:`rsqrt_cases`."""
    return observe_cases(warmup_rsqrt_lr, rsqrt_cases(seed))


def judge_warmup_rsqrt_lr(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``warmup_rsqrt_lr`` values with the reference; each must be a float."""
    __tracebackhide__ = True
    from addnorm_lib.reference import mistakes, placement

    return _judge_schedule(
        "warmup_rsqrt_lr",
        rsqrt_cases(seed),
        placement.warmup_rsqrt_lr,
        observations,
        mistakes.WARMUP_RSQRT_LR_MISTAKES,
    )


def check_vaswani_lr(vaswani_lr, seed: int = 0) -> None:
    """Check a learner's ``vaswani_lr(step, d_model, warmup=4000)`` at chosen steps."""
    __tracebackhide__ = True
    run_check("check_vaswani_lr", observe_vaswani_lr, judge_vaswani_lr, vaswani_lr, seed)


def check_warmup_rsqrt_lr(warmup_rsqrt_lr, seed: int = 0) -> None:
    """Check a learner's ``warmup_rsqrt_lr(step, peak_lr, warmup)`` at chosen steps."""
    __tracebackhide__ = True
    run_check(
        "check_warmup_rsqrt_lr",
        observe_warmup_rsqrt_lr,
        judge_warmup_rsqrt_lr,
        warmup_rsqrt_lr,
        seed,
    )


JUDGES = {
    "check_post_ln_block": judge_post_ln_block,
    "check_pre_ln_block": judge_pre_ln_block,
    "check_pre_ln_stack": judge_pre_ln_stack,
    "check_vaswani_lr": judge_vaswani_lr,
    "check_warmup_rsqrt_lr": judge_warmup_rsqrt_lr,
}
