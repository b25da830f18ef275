"""Checkers for the DeepNorm exercise: the constants, the residual step and the initializer.

The functions under check (signatures of :mod:`addnorm_lib.reference.deepnorm`):

- ``deepnorm_constants(architecture, num_encoder_layers=0, num_decoder_layers=0, stack=None)
  -> (alpha, beta)``;
- ``deepnorm_residual(x, sublayer, norm, alpha) -> norm(alpha * x + sublayer(x))`` (torch);
- ``deepnorm_init_(layer, beta)``: scales, in place, the weights DeepNet scales.

Observed and judged as in :mod:`addnorm_lib.checks.layernorm`. Torch objects are rebuilt from the
seed on each side, so the judge never touches what the learner's code ran on.
"""

import numpy as np

from addnorm_lib import lookup
from addnorm_lib.checks._advice import expect_tensor_like, judged_calls_unchanged
from addnorm_lib.checks._core import (
    Case,
    MapOf,
    Observation,
    compare,
    conform,
    expect_keys,
    fail,
    judge_call,
    judged_calls,
    observe,
    observe_cases,
    passed,
)
from addnorm_lib.checks._record import run_check

# ----------------------------------------------------------------------------------------------
# deepnorm_constants(architecture, num_encoder_layers, num_decoder_layers, stack) -> (alpha, beta)

#: (architecture, N, M, stack), in the order they are checked
CONSTANT_CASES = (
    ("encoder-only", 6, 0, None),
    ("encoder-only", 48, 0, None),
    ("decoder-only", 0, 24, None),
    ("encoder-decoder", 6, 6, "encoder"),
    ("encoder-decoder", 6, 6, "decoder"),
    ("encoder-decoder", 100, 20, "encoder"),
    ("encoder-decoder", 18, 50, "decoder"),
)


_DESCRIPTIONS = {
    "encoder-only": "an encoder-only model with N = {n} layers",
    "decoder-only": "a decoder-only model with M = {m} layers",
    "encoder-decoder": "the {stack} of an encoder-decoder model, {sizes}",
}


def _describe_constants_call(architecture: str, n: int, m: int, stack: str | None) -> str:
    """How a message names one call, e.g. "the decoder of an encoder-decoder model, N = M = 6"."""
    sizes = f"N = M = {n}" if n == m else f"N = {n}, M = {m}"
    template = lookup(_DESCRIPTIONS, architecture, "architecture")
    return template.format(n=n, m=m, stack=stack, sizes=sizes)


#: the hint of a drawn case, by stack: each stack's formula uses its own numbers of layers
DRAWN_HINTS = {
    "encoder": "The encoder of an encoder-decoder model: 0.81 (N^4 M)^(1/16) and "
    "0.87 (N^4 M)^(-1/16), with N, the encoder's own number of layers, to the 4th power.",
    "decoder": "The decoder of an encoder-decoder model depends on M, its own number of layers, "
    "alone: (3M)^(1/4) and (12M)^(-1/4), whatever N is (even when the encoder is deeper).",
}


def drawn_constant_cases(seed: int) -> tuple[tuple[str, int, int, str], ...]:
    """Two encoder-decoder calls with depths drawn from ``seed``: the decoder of a model whose
    encoder is deeper (N > M) and the encoder of one whose decoder is deeper (N < M), the two
    orders that the fixed cases leave out for those stacks. Within the spec for every seed (the
    formulas hold for any N and M); a hidden seed's depths are ones the learner never saw."""
    rng = np.random.default_rng(seed + 42)
    m, n = sorted(rng.choice(np.arange(2, 97), size=2, replace=False).tolist())  # M < N
    other_n, other_m = sorted(rng.choice(np.arange(2, 97), size=2, replace=False).tolist())
    return (
        ("encoder-decoder", n, m, "decoder"),
        ("encoder-decoder", other_n, other_m, "encoder"),
    )


def constants_cases(seed: int = 0) -> list[Case]:
    """The calls checked: fixed ones (every architecture and stack), then two encoder-decoder
    calls with depths drawn from ``seed`` (:func:`drawn_constant_cases`)."""
    hint = "Check the formula for this architecture and stack in the table."
    cases = []
    calls = [*CONSTANT_CASES, *drawn_constant_cases(seed)]
    for index, (architecture, n, m, stack) in enumerate(calls):
        if index >= len(CONSTANT_CASES):
            hint = DRAWN_HINTS[stack]
        kwargs = {"num_encoder_layers": n, "num_decoder_layers": m}
        if stack is not None:
            kwargs["stack"] = stack
        description = _describe_constants_call(architecture, n, m, stack)
        cases.append(Case(description, (architecture,), kwargs, atol=0.0, rtol=1e-6, hint=hint))
    return cases


def observe_deepnorm_constants(deepnorm_constants, seed: int = 0) -> list[Observation]:
    """Observe ``deepnorm_constants`` on each case of :func:`constants_cases`."""
    return observe_cases(deepnorm_constants, constants_cases(seed))


def judge_deepnorm_constants(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``deepnorm_constants`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    from addnorm_lib.reference import deepnorm, mistakes

    name = "deepnorm_constants"
    cases = constants_cases(seed)
    for case, observation, value in judged_calls(name, cases, observations):
        pair = np.asarray(value, dtype=object) if isinstance(value, list) else None
        if (
            pair is None
            or pair.shape != (2,)
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
        ):
            fail(
                f"{name}, on {case.description}: return a tuple of two floats (alpha, beta), "
                f"not a {observation.type_name}."
            )
        kwargs = case.kwargs
        expected = np.array(deepnorm.deepnorm_constants(*case.args, **kwargs))
        mistake_args = (
            case.args[0],
            kwargs["num_encoder_layers"],
            kwargs["num_decoder_layers"],
            kwargs.get("stack"),
        )
        compare(
            pair.astype(np.float64),
            expected,
            name=name,
            what="(alpha, beta)",
            case=case,
            mistakes=mistakes.DEEPNORM_CONSTANTS_MISTAKES,
            mistake_args=mistake_args,
        )
    return passed(name, [case.description for case in cases])


def check_deepnorm_constants(deepnorm_constants, seed: int = 0) -> None:
    """Check a learner's ``deepnorm_constants(architecture, N, M, stack) -> (alpha, beta)``."""
    __tracebackhide__ = True
    run_check(
        "check_deepnorm_constants",
        observe_deepnorm_constants,
        judge_deepnorm_constants,
        deepnorm_constants,
        seed,
    )


# ----------------------------------------------------------------------------------------------
# deepnorm_residual(x, sublayer, norm, alpha) -> norm(alpha * x + sublayer(x))

D_MODEL, HEADS, FFN = 8, 2, 16
RESIDUAL_ARGS = ("x", "sublayer", "norm", "alpha")


def _fill_(module, rng) -> None:
    """Overwrite every parameter of ``module`` with numpy draws (the same on both sides)."""
    import torch

    with torch.no_grad():
        for name, parameter in module.named_parameters():
            center = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            spread = 0.5 if "norm" in name else 1.0 / np.sqrt(parameter.shape[-1])
            draw = rng.normal(center, spread, tuple(parameter.shape))
            parameter.copy_(torch.from_numpy(draw))


def residual_cases(seed: int = 0) -> list[Case]:
    """Inputs ``(x, sublayer, norm, alpha)``: float64 torch objects rebuilt from the seed."""
    import torch

    from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

    rng = np.random.default_rng(seed + 40)

    def case(description, sublayer, alpha, shape=(2, 3, D_MODEL), hint=""):
        norm = torch.nn.LayerNorm(D_MODEL, dtype=torch.float64)
        sublayer = sublayer.double()
        _fill_(sublayer, rng)
        _fill_(norm, rng)
        x = torch.from_numpy(rng.normal(0.0, 1.0, shape))  # (B, T, C)
        return Case(description, (x, sublayer, norm, alpha), hint=hint)

    return [
        case(
            "a (B, T, C) = (2, 3, 8) input, a FeedForward sublayer, alpha = 2.0",
            FeedForward(D_MODEL, FFN),
            2.0,
        ),
        case(
            "a (2, 3, 8) input, a SelfAttention sublayer, alpha = 1.5",
            SelfAttention(D_MODEL, HEADS),
            1.5,
        ),
        case(
            "alpha = 1.0, which is plain Post-LN: norm(x + G(x))",
            FeedForward(D_MODEL, FFN),
            1.0,
            hint="With alpha = 1 the step is norm(x + sublayer(x)).",
        ),
        case(
            "a (1, 5, 8) input, causal SelfAttention, alpha = 3.0",
            SelfAttention(D_MODEL, HEADS, causal=True),
            3.0,
            shape=(1, 5, D_MODEL),
        ),
    ]


def observe_deepnorm_residual(deepnorm_residual, seed: int = 0) -> list[Observation]:
    """Observe ``deepnorm_residual`` on each case of :func:`residual_cases`, under no_grad."""
    import torch

    with torch.no_grad():
        return observe_cases(deepnorm_residual, residual_cases(seed))


def judge_deepnorm_residual(observations: list[Observation], seed: int = 0) -> str:
    """Compare recorded ``deepnorm_residual`` results with the reference; name known mistakes.

    Raises CheckFailed at the first wrong result; else returns the summary of what passed.
    """
    __tracebackhide__ = True
    import torch

    from addnorm_lib.reference import deepnorm, mistakes

    name = "deepnorm_residual"
    cases = residual_cases(seed)
    calls = judged_calls_unchanged(name, cases, observations, RESIDUAL_ARGS, "torch")
    for case, observation, y in calls:
        with torch.no_grad():
            expected = deepnorm.deepnorm_residual(*case.args).numpy()
        where, what = f"{name}, on {case.description}", "the output"
        expect_tensor_like(y, expected, where=where, what=what, type_name=observation.type_name)
        compare(
            y,
            expected,
            name=name,
            what="the output",
            case=case,
            mistakes=mistakes.DEEPNORM_RESIDUAL_MISTAKES,
            mistake_args=case.args,
            type_name=observation.type_name,
        )
    return passed(name, [*(case.description for case in cases), "leaves its input x unchanged"])


def check_deepnorm_residual(deepnorm_residual, seed: int = 0) -> None:
    """Check a learner's ``deepnorm_residual(x, sublayer, norm, alpha)`` (torch)."""
    __tracebackhide__ = True
    run_check(
        "check_deepnorm_residual",
        observe_deepnorm_residual,
        judge_deepnorm_residual,
        deepnorm_residual,
        seed,
    )


# ----------------------------------------------------------------------------------------------
# deepnorm_init_(layer, beta): scale ffn.fc1, ffn.fc2, self_attn.v_proj, self_attn.out_proj

INIT_BETAS = (0.25, 0.6)
SCALED_HINT = (
    "DeepNet scales the FFN's weights (ffn.fc1, ffn.fc2) and the attention's value and output "
    "projections (self_attn.v_proj, self_attn.out_proj) by beta, and nothing else."
)


def init_layer(seed: int = 0):
    """A float64 ``LayerParts`` whose every parameter holds recognisable values.

    Weights are seeded draws; so are the biases (away from 0) and the norms' weights (around 1,
    away from it) and biases (away from 0): an initializer that scales, zeroes or resets one of
    the parameters the task leaves alone changes it visibly.
    """
    import torch

    from addnorm_lib.transformer.sublayers import LayerParts

    layer = LayerParts(16, 2, 32).double()
    rng = np.random.default_rng(seed + 41)
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            shape = tuple(parameter.shape)
            if "norm" in name and name.endswith("weight"):
                draw = rng.uniform(1.2, 1.8, shape) * rng.choice([-1.0, 1.0], shape)
            elif name.endswith("bias"):
                draw = rng.uniform(0.1, 0.5, shape) * rng.choice([-1.0, 1.0], shape)
            else:
                draw = rng.normal(0.0, 0.2, shape)
            parameter.copy_(torch.from_numpy(draw))
    return layer


def observe_deepnorm_init(deepnorm_init_, seed: int = 0) -> dict:
    """Run the initializer on a fresh seeded layer per beta; record the state_dict after it."""

    def run(beta):
        layer = init_layer(seed)
        deepnorm_init_(layer, beta)
        return {k: v.detach().numpy().copy() for k, v in layer.state_dict().items()}

    def kept():  # is each parameter still the same object (an optimizer built before holds it)?
        layer = init_layer(seed)
        before = dict(layer.named_parameters())
        deepnorm_init_(layer, INIT_BETAS[0])
        after = dict(layer.named_parameters())
        return {name: after.get(name) is parameter for name, parameter in before.items()}

    def returned():  # the task says: return the layer itself
        import torch

        layer = init_layer(seed)
        result = deepnorm_init_(layer, INIT_BETAS[0])
        if result is layer:
            return {"kind": "the layer", "state": {}}
        if isinstance(result, torch.nn.Module):
            state = {k: v.detach().numpy().copy() for k, v in result.state_dict().items()}
            return {"kind": "another module", "state": state}
        return {"kind": "None" if result is None else type(result).__name__, "state": {}}

    observations = {f"beta={beta}": observe(run, (beta,), {}) for beta in INIT_BETAS}
    observations["same_parameters"] = observe(kept, (), {})
    observations["returned"] = observe(returned, (), {})
    return observations


def _judge_returned(observation) -> None:
    """The initializer must return the layer it scaled in place; a scaled copy is named so."""
    __tracebackhide__ = True
    case = Case(f"a LayerParts(16, 2, 32) layer with beta = {INIT_BETAS[0]}", ())
    returned = judge_call(observation, "deepnorm_init_", case)
    conform(returned, {"kind": str, "state": MapOf(np.ndarray)}, "returned")
    if returned["kind"] == "the layer":
        return
    if returned["kind"] == "another module":
        fail(
            "deepnorm_init_ returned a new module (a copy of the layer?) instead of the layer it "
            "was given. An initializer changes the layer in place, as torch.nn.init's functions "
            "change their tensor: code that holds the layer, or an optimizer that holds its "
            "parameters, never sees a copy.\nHint: scale the given layer's weights with "
            "weight.mul_(beta) under torch.no_grad(), then return that same layer."
        )
    fail(
        f"deepnorm_init_ returned {returned['kind']}; the task asks for the layer it was given "
        "(scaled in place), so that calls can be chained.\nHint: end with `return layer`."
    )


def _scaled_a_copy(state: dict, original: dict, returned) -> bool:
    """Whether the layer came back unchanged while another module was returned."""
    unchanged = all(np.array_equal(np.asarray(state[key]), old) for key, old in original.items())
    other = returned.error is None and isinstance(returned.value, dict)
    return unchanged and other and returned.value.get("kind") == "another module"


def _judge_same_parameters(observation) -> None:
    """Scaling must keep each Parameter object: a new one is unknown to an optimizer made before."""
    __tracebackhide__ = True
    kept = judge_call(observation, "deepnorm_init_", Case("a LayerParts(16, 2, 32) layer", ()))
    conform(kept, MapOf(bool), "same_parameters")
    replaced = sorted(name for name, same in kept.items() if not same)
    if replaced:
        fail(
            f"deepnorm_init_ replaced {', '.join(replaced)} with new Parameter objects: an "
            "optimizer built before it still holds the old ones, and would never train the "
            "scaled weights.\nHint: scale in place, with torch.no_grad(): weight.mul_(beta)."
        )


def _factor(after: np.ndarray, before: np.ndarray) -> float | None:
    """The number c with ``after == c * before`` (to 1e-9), or None if there is none."""
    scale = float(np.vdot(before, after) / np.vdot(before, before))
    return scale if np.allclose(after, scale * before, rtol=1e-9, atol=1e-12) else None


def _correlation(after: np.ndarray, before: np.ndarray) -> float:
    """Pearson correlation of the entries of two arrays of one shape (0 if either is constant)."""
    a, b = after.ravel() - after.mean(), before.ravel() - before.mean()
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator > 0 else 0.0


def _what_scaled_weight_became(key: str, after, before, beta: float, where: str) -> str:
    """The message for a weight DeepNet scales that is not beta times its value: what it is."""
    factor = _factor(after, before)
    fix = "Hint: with torch.no_grad(): weight.mul_(beta), once per weight."
    if factor is not None and np.isclose(factor, 1.0, rtol=1e-9):
        return f"{where}: {key} was not scaled.\nHint: {SCALED_HINT}"
    if factor is not None and np.isclose(factor, 1.0 / beta, rtol=1e-9):
        return (
            f"{where}: {key} was divided by beta; DeepNet multiplies it by beta (< 1), to make "
            "the sublayers' initial updates small."
        )
    if factor is not None and np.isclose(factor, beta**2, rtol=1e-9):
        return (
            f"{where}: {key} was multiplied by beta twice (by beta ** 2 = {beta**2:.4g}): "
            f"scale each weight once.\n{fix}"
        )
    if factor is not None:
        return f"{where}: {key} was multiplied by {factor:.4g}, not by beta = {beta:g}.\n{fix}"
    if abs(_correlation(after, before)) < 0.5:
        return (
            f"{where}: {key} holds new numbers, unrelated to its values before the call (as "
            "when a weight is re-initialized, e.g. with nn.init.xavier_normal_): this exercise "
            f"scales the existing weights in place.\n{fix}"
        )
    return (
        f"{where}: {key} changed, but not to a multiple of its values before the call: scale "
        f"every entry by the same beta.\n{fix}"
    )


def _what_kept_parameter_became(key: str, after, before, beta: float, where: str) -> str:
    """The message for a parameter the task leaves alone that changed: what became of it."""
    factor = _factor(after, before)
    by_beta = factor is not None and np.isclose(factor, beta, rtol=1e-9)
    if by_beta and key in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
        return (
            f"{where}: you scaled {key} by beta. DeepNet leaves the query and key "
            "projections as they are: they only set the attention pattern (through the "
            f"softmax), not the size of the sublayer's output.\nHint: {SCALED_HINT}"
        )
    if by_beta:
        leave = (
            "the norms" if "norm" in key else "the biases" if key.endswith("bias") else "the rest"
        )
        return (
            f"{where}: you scaled {key} by beta. DeepNet scales four weight matrices only; "
            f"{leave} keep their values.\nHint: {SCALED_HINT}"
        )
    if not after.any():
        return (
            f"{where}: you set {key} to zero. The task leaves everything but the four scaled "
            "weights as it is, whatever its value (the check's biases and norms are not 0 or "
            f"1).\nHint: {SCALED_HINT}"
        )
    if np.all(after == 1.0):
        return (
            f"{where}: you set {key} to one. The task leaves everything but the four scaled "
            "weights as it is, whatever its value (the check's biases and norms are not 0 or "
            f"1).\nHint: {SCALED_HINT}"
        )
    return f"{where}: {key} should not change, but it did.\nHint: {SCALED_HINT}"


def _judge_init_state(state: dict, original: dict, beta: float) -> None:
    __tracebackhide__ = True
    from addnorm_lib.reference.deepnorm import DEEPNORM_SCALED

    name = "deepnorm_init_"
    where = f"{name}(layer, beta={beta})"
    conform(state, MapOf(np.ndarray), "state_dict")
    if sorted(state) != sorted(original):
        missing, added = sorted(set(original) - set(state)), sorted(set(state) - set(original))
        fail(
            f"{where} changed which parameters the layer has: "
            + "; ".join(
                f"{label} {', '.join(keys)}"
                for label, keys in (("it no longer has", missing), ("it now has", added))
                if keys
            )
            + ". Scale the existing weights in place; do not add or remove any."
        )
    scaled = {f"{path}.weight" for path in DEEPNORM_SCALED}
    for key, before in original.items():
        after = np.asarray(state[key])
        want = beta if key in scaled else 1.0
        if after.shape == before.shape and np.allclose(after, want * before, rtol=1e-9, atol=0):
            continue
        if after.shape != before.shape:
            fail(f"{where}: {key} changed shape from {before.shape} to {after.shape}.")
        if key in scaled:
            fail(_what_scaled_weight_became(key, after, before, beta, where))
        fail(_what_kept_parameter_became(key, after, before, beta, where))


def judge_deepnorm_init(observations: dict, seed: int = 0) -> str:
    """Compare the recorded state_dicts with the seeded layer scaled by each of :data:`INIT_BETAS`.

    Raises CheckFailed naming the first weight scaled wrongly; else returns the summary.
    """
    __tracebackhide__ = True
    expected = [f"beta={beta}" for beta in INIT_BETAS] + ["same_parameters", "returned"]
    expect_keys("deepnorm_init_", observations, expected)
    original = {k: v.detach().numpy() for k, v in init_layer(seed).state_dict().items()}
    for beta in INIT_BETAS:
        case = Case(f"a LayerParts(16, 2, 32) layer with beta = {beta}", (beta,))
        state = judge_call(observations[f"beta={beta}"], "deepnorm_init_", case)
        conform(state, MapOf(np.ndarray), "state_dict")
        if sorted(state) == sorted(original) and _scaled_a_copy(
            state, original, observations["returned"]
        ):
            _judge_returned(observations["returned"])
        _judge_init_state(state, original, beta)
    _judge_returned(observations["returned"])
    _judge_same_parameters(observations["same_parameters"])
    return passed(
        "deepnorm_init_",
        [
            "scales ffn.fc1, ffn.fc2, self_attn.v_proj and self_attn.out_proj by beta, in place",
            "leaves the query and key projections, the biases and the norms unchanged (each "
            "set away from 0 and 1 before the call)",
            "keeps every Parameter object (an optimizer made before still trains them)",
            "returns the layer it was given",
            f"for beta in {INIT_BETAS}",
        ],
    )


# What only the kernel knows: a record can fail on it, never earn a point by it
UNVERIFIED = {
    "check_deepnorm_init": (
        "deepnorm_init_ keeps every Parameter object of the layer",
        "deepnorm_init_ returns the layer it was given",
    ),
}


def check_deepnorm_init(deepnorm_init_, seed: int = 0) -> None:
    """Check a learner's ``deepnorm_init_(layer, beta)`` on a seeded ``LayerParts``."""
    __tracebackhide__ = True
    run_check(
        "check_deepnorm_init", observe_deepnorm_init, judge_deepnorm_init, deepnorm_init_, seed
    )


JUDGES = {
    "check_deepnorm_constants": judge_deepnorm_constants,
    "check_deepnorm_residual": judge_deepnorm_residual,
    "check_deepnorm_init": judge_deepnorm_init,
}
