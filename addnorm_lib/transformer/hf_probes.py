"""Behavioural probes of the norms in real Hugging Face ``transformers`` models.

The models chapter's table is generated from these probes. Each row builds the model's own
``transformers`` class from a tiny config (random weights, no download, no network) and asks the
running model where its norms are and what they compute:

- :func:`probe_block`: where each norm of a block sits relative to the residual additions, found
  by hooking the block, its attention, its MLP and its norms and matching the tensors they pass
  on (pre, post, sandwich, output norm, parallel; and the residual's weight, 1 except DeepNorm);
- :func:`probe_norm`: what one norm module computes: does it subtract the mean (LayerNorm) or not
  (RMSNorm), has it a bias, does it scale by ``weight`` or ``1 + weight``, its ``eps`` (read and
  measured), and how it rounds in bfloat16;
- :func:`has_final_norm`, :func:`has_embedding_norm`, :func:`qk_normalized`: perturbation tests
  on the whole model (scale a tensor, see whether the output moves).

:func:`probe_model` runs them all on one model and returns :class:`Findings`; :data:`ROWS` holds
the chapter's rows, each with the published description it is compared with
(:class:`Expected`, compared by :func:`disagreements`).

Every probe works on tensors it records with forward hooks; a module's *name* is used only to
tell the probe which module is the attention, the MLP and the block list (:class:`Anatomy`), and
to report which named norm plays which role.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import transformers
from torch import Tensor, nn

from addnorm_lib.transformer.model_zoo import Recorder, sample_input

__all__ = [
    "COMPARED",
    "FINAL_NOT_STATED",
    "LLAMA_LIKE",
    "ROWS",
    "SOURCED_ROWS",
    "STACK_READING",
    "TABLE_HEAD",
    "TABLE_ORDER",
    "ZOO_ANATOMY",
    "Anatomy",
    "BlockPlacement",
    "Expected",
    "Findings",
    "NormProperties",
    "ProbeError",
    "Row",
    "SourcedRow",
    "StreamSummary",
    "StreamTrace",
    "Tap",
    "block_norms",
    "disagreements",
    "final_norm_changes",
    "find_row",
    "half_precision_matches",
    "half_precision_recipe",
    "has_embedding_norm",
    "has_final_norm",
    "measure_eps",
    "n_compared",
    "norm_words",
    "probe_block",
    "probe_model",
    "probe_norm",
    "probe_row",
    "probe_zoo_block",
    "qk_normalized",
    "read_eps",
    "release_words",
    "sample_ids",
    "submodule",
    "summarize_stream",
    "table_rows",
    "token_rms",
    "trace_stream",
    "where_words",
    "zoo_final_norm",
]

WIDTH, HEADS, FFN, LAYERS, VOCAB = 32, 4, 64, 2, 64  # the tiny configs of every row
SCALE = 8.0  # the factor of the perturbation tests
INVARIANT = 0.05  # a relative change below this (of SCALE - 1 for a linear map) means "invariant"


class ProbeError(AssertionError):
    """A probe could not explain what the model did (no known placement matches)."""


# --------------------------------------------------------------------------------------------
# Where things are: module paths, and a recorder of what modules read and return
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Anatomy:
    """Where a model keeps its blocks, and where a block's two sublayers start and end.

    Paths are dotted attribute paths (``"model.layers"``); the sublayer paths are relative to one
    block. ``attn_in`` is the module whose first input is what the attention reads, ``attn_out``
    the module whose output is what the attention returns before any residual addition (the same
    module in most models; BERT and BLOOM add the residual inside their attention code, so there
    it is the output projection). Likewise ``mlp_in`` / ``mlp_out``. ``stacks`` are the module
    whose output is the stack's last hidden state, one per stack (T5 has an encoder and a
    decoder), each with its block list; ``stacks[0][1]`` is the block list that the block probe
    uses.
    """

    stacks: tuple[tuple[str, str], ...]
    attn_in: str
    attn_out: str
    mlp_in: str
    mlp_out: str

    @property
    def layers(self) -> str:
        """The block list of the first stack."""
        return self.stacks[0][1]


def submodule(model: nn.Module, path: str) -> nn.Module:
    """``model``'s submodule at the dotted ``path`` (``""`` is ``model`` itself)."""
    return model.get_submodule(path) if path else model


def _first_tensor(args: tuple, kwargs: Mapping) -> Tensor | None:
    """The tensor a module was called on: its first positional argument, or ``hidden_states``
    (None if neither is a tensor)."""
    if args and isinstance(args[0], Tensor):
        return args[0]
    for key in ("hidden_states", "x", "input"):
        if isinstance(kwargs.get(key), Tensor):
            return kwargs[key]
    return None


def _output_tensor(output) -> Tensor:
    """The main tensor of a module's output: the output itself, or its first element."""
    return output if isinstance(output, Tensor) else output[0]


def _rows(t: Tensor) -> Tensor:
    """Any ``(..., C)`` tensor as ``(N, C)`` float64 rows, detached (a copy)."""
    return t.detach().reshape(-1, t.shape[-1]).double().clone()


class Tap(Recorder):
    """Record what chosen modules read and return during a forward pass, as ``(N, C)`` rows.

    Use it as ``with Tap({"attn": block.self_attn}) as tap: model(ids)``; then
    ``tap.inputs["attn"]`` and ``tap.outputs["attn"]`` hold the rows.

    A module called more than once keeps its last call (``calls`` counts them). Keyword inputs
    (``hidden_states=...``) are found too. Hooks are removed on exit.
    """

    hook_kwargs = True

    def __init__(self, modules: Mapping[str, nn.Module]) -> None:
        super().__init__(modules)
        self.calls: dict[str, int] = dict.fromkeys(self.modules, 0)

    def _hook(self, name: str):
        def hook(module, args, kwargs, output):
            first = _first_tensor(args, kwargs)
            if first is not None:
                self.inputs[name] = _rows(first)
            self.outputs[name] = _rows(_output_tensor(output))
            self.calls[name] += 1

        return hook


@contextmanager
def _rescaled(module: nn.Module, factor: float, where: str) -> Iterator[None]:
    """Multiply a module's main input (``where="input"``) or output (``"output"``) by ``factor``
    for the duration of the block. The other inputs and outputs pass unchanged."""

    def pre_hook(mod, args, kwargs):
        if args and isinstance(args[0], Tensor):
            return (args[0] * factor, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"] * factor}

    def post_hook(mod, args, output):
        if isinstance(output, Tensor):
            return output * factor
        return (output[0] * factor, *output[1:])

    if where == "input":
        handle = module.register_forward_pre_hook(pre_hook, with_kwargs=True)
    else:
        handle = module.register_forward_hook(post_hook)
    try:
        yield
    finally:
        handle.remove()


def _run(model: nn.Module, inputs) -> object:
    """``model(**inputs)`` for a dict of keyword inputs, ``model(inputs)`` for a tensor."""
    with torch.no_grad():
        return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def _close(a: Tensor, b: Tensor, tol: float = 1e-5) -> bool:
    """Same shape and equal up to float32 rounding, relative to the size of ``b``."""
    if a.shape != b.shape:
        return False
    return float((a - b).abs().max()) <= tol * (1.0 + float(b.abs().max()))


def _is_norm_class(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def block_norms(block: nn.Module, anatomy: Anatomy) -> dict[str, nn.Module]:
    """The norm modules of a block that are not inside its attention or MLP, by their path.

    A module counts as a norm if its class name says so (``LayerNorm``, ``LlamaRMSNorm``, ...);
    :func:`probe_block` then checks by behaviour that each one is scale-invariant.
    """
    inside = [anatomy.attn_in, anatomy.attn_out, anatomy.mlp_in, anatomy.mlp_out]
    return {
        name: module
        for name, module in block.named_modules()
        if name
        and _is_norm_class(module)
        and not any(name == p or name.startswith(p + ".") for p in inside)
    }


# --------------------------------------------------------------------------------------------
# One norm module: what it computes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NormProperties:
    """What one norm module computes, found by calling it.

    ``kind``: ``"LayerNorm"`` if shifting every feature of a row leaves the output unchanged (it
    subtracts the mean), ``"RMSNorm"`` if not. ``bias``: whether one of its parameters adds to the
    output whatever the input. ``scale``: ``"weight"`` if a zero weight zeroes the output,
    ``"1 + weight"`` if a zero weight leaves the normalized input. ``eps``: measured by
    :func:`measure_eps`; ``eps_attr``: read by :func:`read_eps`. ``half``: how it rounds a
    bfloat16 input (see :func:`half_precision_recipe`). ``scale_invariant``: multiplying the input
    by 8 leaves the output unchanged (every norm must pass this).
    """

    kind: str
    bias: bool
    scale: str
    eps: float
    eps_attr: float | None
    half: str
    scale_invariant: bool


def _test_rows(width: int, seed: int = 0, n: int = 16) -> Tensor:
    """``(n, width)`` float32 rows with their own offsets (-2..2) and spreads (0.5..3)."""
    g = torch.Generator().manual_seed(seed)
    offset = 4 * torch.rand(n, 1, generator=g) - 2  # (n, 1)
    spread = 0.5 + 2.5 * torch.rand(n, 1, generator=g)  # (n, 1)
    return offset + spread * torch.randn(n, width, generator=g)  # (n, width)


def _gain_name(norm: nn.Module) -> str:
    """The name of the norm's multiplicative parameter, found by behaviour on a float32 copy:
    raising it changes each output element by its own amount (raising an additive bias changes
    every element by the same amount whatever the input)."""
    norm = copy.deepcopy(norm).float()
    for name, p in norm.named_parameters():
        if not _is_additive(norm, p):
            return name
    raise ProbeError("the norm has no multiplicative parameter")


def _gain(norm: nn.Module) -> nn.Parameter:
    """The norm's multiplicative parameter (see :func:`_gain_name`)."""
    return norm.get_parameter(_gain_name(norm))


def _is_additive(norm: nn.Module, param: nn.Parameter) -> bool:
    """Whether raising ``param`` by 0.5 shifts the output by the same amount for any input."""
    x1, x2 = _test_rows(param.shape[-1], 1), _test_rows(param.shape[-1], 2)
    with torch.no_grad():
        before = norm(x1), norm(x2)
        param.add_(0.5)
        after = norm(x1), norm(x2)
        param.sub_(0.5)
    d1, d2 = after[0] - before[0], after[1] - before[1]  # (n, C) each
    return _close(d1, d2, 1e-4) and _close(d1, torch.full_like(d1, 0.5), 1e-4)


def _identity_scaled(norm: nn.Module) -> nn.Module:
    """A float32 copy of ``norm`` whose affine part does nothing: the gain set so that it scales
    by 1 (weight 1, or 0 for a ``1 + weight`` norm), every bias 0."""
    norm = copy.deepcopy(norm).float()
    gain = _gain(norm)
    with torch.no_grad():
        for _, p in norm.named_parameters():
            if p is not gain:
                p.zero_()
        gain.fill_(1.0 if _scale_kind(norm) == "weight" else 0.0)
    return norm


def _scale_kind(norm: nn.Module) -> str:
    """``"weight"`` or ``"1 + weight"``: what a zero gain does to the output."""
    norm = copy.deepcopy(norm).float()
    gain = _gain(norm)
    x = _test_rows(gain.shape[-1])
    with torch.no_grad():
        gain.zero_()
        zero = norm(x)
        gain.fill_(1.0)
        one = norm(x)
    if float(zero.abs().max()) < 1e-6:
        return "weight"
    if _close(one, 2 * zero, 1e-4):
        return "1 + weight"
    raise ProbeError("the norm scales by neither its weight nor 1 + its weight")


def read_eps(norm: nn.Module) -> float | None:
    """The ``eps`` a norm module stores (``eps`` or ``variance_epsilon``), or None."""
    for name in ("eps", "variance_epsilon"):
        value = getattr(norm, name, None)
        if isinstance(value, float):
            return value
    return None


def measure_eps(norm: nn.Module, width: int) -> float:
    """A norm's ``eps``, measured from its behaviour in float32.

    A row of mean 0 whose mean square (= variance) is ``v`` comes out of an LN or RMS norm with
    mean square ``v / (v + eps)``, whichever statistic it divides by, as long as ``eps`` sits
    inside the square root. Rows of ``+-sqrt(v)`` are fed for ``v = 1, 10**-0.5, ..., 1e-16``;
    from the ``v`` whose output mean square ``m`` is closest to 1/2, ``eps = v (1/m - 1)``.
    """
    norm = _identity_scaled(norm)
    signs = torch.ones(width)
    signs[1::2] = -1  # (C,), mean 0 for an even width
    best = None
    with torch.no_grad():
        for k in range(33):
            v = 10.0 ** (-k / 2)
            m = float(norm(signs * v**0.5).double().pow(2).mean())
            if best is None or abs(m - 0.5) < abs(best[1] - 0.5):
                best = (v, m)
    v, m = best
    return v * (1 / m - 1)


def half_precision_matches(norm: nn.Module, width: int, seed: int = 3) -> dict[str, float]:
    """How often a norm run in bfloat16 agrees, bit for bit, with two rounding recipes.

    The norm (weight and bias set to random bfloat16 values) runs on ``(64, width)`` bfloat16
    rows. Its output is compared with two recipes built from its own float32 normalization
    ``n`` (affine part switched off): ``"scale after cast"``, ``n`` rounded to bfloat16 and then
    multiplied by the weight in bfloat16 (LLaMA's code), and ``"scale in float32"``, ``n * w +
    b`` in float32 with one rounding at the end (Gemma's code). Returns, for each recipe, the
    fraction of output elements that are exactly equal. ``seed`` draws the weights and rows.
    """
    g = torch.Generator().manual_seed(seed)
    half = copy.deepcopy(norm).to(torch.bfloat16)
    gain = half.get_parameter(_gain_name(norm))
    offset = 1.0 if _scale_kind(norm) == "1 + weight" else 0.0
    with torch.no_grad():
        for p in half.parameters():
            p.copy_((0.5 * torch.randn(p.shape, generator=g)).to(torch.bfloat16))
        x = (3 + 2 * torch.randn(64, width, generator=g)).to(torch.bfloat16)  # (N, C)
        out = half(x)  # (N, C), bfloat16
        n = _identity_scaled(norm)(x.float())  # (N, C), float32 normalization, no affine part
        w = gain.float() + offset  # (C,), float32
        b = sum((p.float() for p in half.parameters() if p is not gain), torch.zeros(width))
        recipes = {
            "scale after cast": n.to(torch.bfloat16) * w.to(torch.bfloat16) + b.to(torch.bfloat16),
            "scale in float32": (n * w + b).to(torch.bfloat16),
        }
    return {name: float((ref == out).float().mean()) for name, ref in recipes.items()}


def half_precision_recipe(norm: nn.Module, width: int) -> str:
    """The recipe of :func:`half_precision_matches` that matches at least 99% of the output
    elements (the first one, if both do), or ``"other"``."""
    matches = half_precision_matches(norm, width)
    return next((name for name, share in matches.items() if share >= 0.99), "other")


def probe_norm(norm: nn.Module, width: int) -> NormProperties:
    """Every property of :class:`NormProperties`, by calling ``norm`` on ``(16, width)`` rows."""
    plain = _identity_scaled(norm)
    x = _test_rows(width)
    with torch.no_grad():
        y = plain(x)
        shifted = plain(x + 5.0)
        scaled = plain(SCALE * x)
    return NormProperties(
        kind="LayerNorm" if _close(shifted, y, 1e-4) else "RMSNorm",
        bias=_has_bias(norm),
        scale=_scale_kind(norm),
        eps=measure_eps(norm, width),
        eps_attr=read_eps(norm),
        half=half_precision_recipe(norm, width),
        scale_invariant=_close(scaled, y, 1e-2),
    )


def _has_bias(norm: nn.Module) -> bool:
    """Whether one of the norm's parameters is additive (tested on a float32 copy)."""
    norm = copy.deepcopy(norm).float()
    return any(_is_additive(norm, p) for p in norm.parameters())


# --------------------------------------------------------------------------------------------
# One block: where its norms sit
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockPlacement:
    """Where a block's norms sit, found by :func:`probe_block`.

    ``kind``: ``"pre"`` (each sublayer reads a norm of the stream, its output is added raw),
    ``"post"`` (the sum is normalized), ``"sandwich"`` (norm before and on the output),
    ``"output"`` (a norm on each sublayer's output, none at the input), ``"parallel"`` (both
    sublayers read the block's input, one sum), or a description of another combination.
    ``roles``: ``(norm path, role)`` for every norm of the block. ``residual_weight``: the
    factor of the stream in a normalized sum ``norm(alpha x + F(x))`` (1 except DeepNorm),
    fitted by least squares and rounded to 4 decimals.
    """

    kind: str
    roles: tuple[tuple[str, str], ...]
    residual_weight: float


@dataclass(frozen=True)
class _Write:
    how: str  # "raw", "output norm" or "after add"
    norm: str | None
    alpha: float = 1.0


def _norm_reading(tap: Tap, norms: list[str], tensor: Tensor) -> str | None:
    """The norm whose recorded input equals ``tensor``, if any."""
    return next((n for n in norms if _close(tap.inputs[n], tensor)), None)


def _norm_producing(tap: Tap, norms: list[str], tensor: Tensor) -> str | None:
    """The norm whose recorded output equals ``tensor``, if any."""
    return next((n for n in norms if _close(tap.outputs[n], tensor)), None)


def _write(tap: Tap, norms: list[str], before: Tensor, out: Tensor, after: Tensor) -> _Write | None:
    """How a sublayer's output ``out`` turned the stream ``before`` into ``after``.

    ``after = before + out`` (raw add), ``before + norm(out)`` (a norm on the output), or
    ``norm(alpha before + out)`` (the sum normalized; alpha fitted by least squares and 1 except
    in DeepNorm). None if none of these holds.
    """
    if _close(after, before + out):
        return _Write("raw", None)
    on_output = _norm_reading(tap, norms, out)
    if on_output and _close(after, before + tap.outputs[on_output]):
        return _Write("output norm", on_output)
    after_add = _norm_producing(tap, norms, after)
    if after_add:
        shortcut = (tap.inputs[after_add] - out).flatten()  # (N*C,), should be alpha * before
        alpha = float(shortcut @ before.flatten() / before.flatten().pow(2).sum())
        if _close(tap.inputs[after_add], alpha * before + out):
            return _Write("after add", after_add, alpha)
    return None


def _with_distinct_norms(model: nn.Module, anatomy: Anatomy, seed: int = 0) -> nn.Module:
    """A copy of ``model`` whose block norms have random parameters (gain and bias moved by
    0.1 times a standard normal draw). At initialization two norms of a block are often equal
    (weight 1, bias 0); reading the same tensor they would return equal tensors, and the probe
    could not tell which one feeds which sublayer. With distinct parameters each output is its
    own."""
    model = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in submodule(model, anatomy.layers):
            for norm in block_norms(block, anatomy).values():
                for p in norm.parameters():
                    p.add_(0.1 * torch.randn(p.shape, generator=g).to(p.dtype))
    return model


def _tap_block(model: nn.Module, anatomy: Anatomy, inputs, index: int) -> tuple[Tap, list[str]]:
    """Run ``model`` with block ``index``, its sublayers and its norms hooked."""
    block = submodule(model, anatomy.layers)[index]
    norms = block_norms(block, anatomy)
    modules = {
        "block": block,
        "attn_in": submodule(block, anatomy.attn_in),
        "attn_out": submodule(block, anatomy.attn_out),
        "mlp_in": submodule(block, anatomy.mlp_in),
        "mlp_out": submodule(block, anatomy.mlp_out),
        **norms,
    }
    with Tap(modules) as tap:
        _run(model, inputs)
    return tap, list(norms)


def _check_norms_scale_invariant(block: nn.Module, norms: list[str], width: int) -> None:
    """Raise :class:`ProbeError` unless scaling its input by 8 leaves each norm's output as it
    was (on test rows of RMS about 1, where ``eps`` does not matter)."""
    x = _test_rows(width)  # (16, C)
    for name in norms:
        with torch.no_grad():
            norm = submodule(block, name)
            if not _close(norm(SCALE * x), norm(x), 1e-2):
                raise ProbeError(f"{name} is called a norm but is not scale-invariant")


def probe_block(model: nn.Module, anatomy: Anatomy, inputs, index: int = 0) -> BlockPlacement:
    """Where the norms of block ``index`` sit, from one forward pass with hooks.

    The block's input ``x`` and output ``y``, what its attention and MLP read and return, and
    every norm's input and output are recorded; then the tensors are matched. A sublayer reads
    the stream raw, or a norm's output whose input is the stream. The MLP reads either the
    block's input ``x`` (a parallel block: then ``y = x + attn + mlp``) or the stream after the
    attention's addition, ``s``; the probe finds the ``s`` for which both additions are explained
    by :func:`_write` (raw, a norm on the output, or a norm after the add). The probe runs on a
    copy whose norms have distinct parameters (:func:`_with_distinct_norms`). Raises
    :class:`ProbeError` if no placement explains the tensors.
    """
    model = _with_distinct_norms(model, anatomy)
    tap, norms = _tap_block(model, anatomy, inputs, index)
    x, y = tap.inputs["block"], tap.outputs["block"]  # (N, C) each
    _check_norms_scale_invariant(submodule(model, anatomy.layers)[index], norms, x.shape[-1])
    a_in, a_out = tap.inputs["attn_in"], tap.outputs["attn_out"]
    m_in, m_out = tap.inputs["mlp_in"], tap.outputs["mlp_out"]
    attn_norm = None if _close(a_in, x) else _norm_producing(tap, norms, a_in)
    if attn_norm is None and not _close(a_in, x):
        raise ProbeError("the attention reads neither the block's input nor a norm of it")
    if attn_norm and not _close(tap.inputs[attn_norm], x):
        raise ProbeError(f"{attn_norm} feeds the attention but does not read the block's input")
    mlp_norm = _norm_producing(tap, norms, m_in)
    mlp_source = tap.inputs[mlp_norm] if mlp_norm else m_in
    roles = {}
    if attn_norm:
        roles[attn_norm] = "before attention"
    if _close(mlp_source, x) and _close(y, x + a_out + m_out):  # both read the block input
        if mlp_norm:
            roles[mlp_norm] = "before MLP, reads the block input"
        shared = attn_norm == mlp_norm
        kind = "parallel, one shared norm" if shared else "parallel, two norms"
        if shared:
            roles[attn_norm] = "before attention and MLP (shared)"
        return BlockPlacement(kind, tuple(sorted(roles.items())), 1.0)
    for s in (mlp_source, m_in):  # the stream between the two sublayers
        w_attn, w_mlp = _write(tap, norms, x, a_out, s), _write(tap, norms, s, m_out, y)
        if w_attn and w_mlp:
            break
    else:
        raise ProbeError("no placement of the norms explains the block's tensors")
    mlp_reads_norm = not _close(m_in, s)
    if mlp_reads_norm:
        roles[mlp_norm] = "before MLP, reads the stream after the attention's add"
    for w, sub in ((w_attn, "attention"), (w_mlp, "MLP")):
        if w.how == "output norm":
            roles[w.norm] = f"on the {sub}'s output, before the add"
        elif w.how == "after add":
            roles[w.norm] = f"after the {sub}'s add (normalizes the stream)"
    reads = (attn_norm is not None, mlp_reads_norm)
    writes = (w_attn.how, w_mlp.how)
    kind = {
        ((True, True), ("raw", "raw")): "pre",
        ((False, False), ("after add", "after add")): "post",
        ((True, True), ("output norm", "output norm")): "sandwich",
        ((False, False), ("output norm", "output norm")): "output",
    }.get((reads, writes))
    if kind is None:
        read_words = ["a norm" if r else "the raw stream" for r in reads]
        kind = (
            f"other: the attention reads {read_words[0]}, the MLP {read_words[1]}; "
            f"the attention's add is {writes[0]}, the MLP's {writes[1]}"
        )
    alpha = w_attn.alpha if w_attn.how == "after add" else 1.0
    return BlockPlacement(kind, tuple(sorted(roles.items())), round(alpha, 4))


# --------------------------------------------------------------------------------------------
# The whole model: perturbation tests
# --------------------------------------------------------------------------------------------


def _relative_change(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _stack_outputs(model: nn.Module, anatomy: Anatomy, inputs) -> list[Tensor]:
    """The last hidden state of every stack, as ``(N, C)`` rows."""
    stacks = {f"s{i}": submodule(model, path) for i, (path, _) in enumerate(anatomy.stacks)}
    with Tap(stacks) as tap:
        _run(model, inputs)
    return [tap.outputs[f"s{i}"] for i in range(len(anatomy.stacks))]


def final_norm_changes(model: nn.Module, anatomy: Anatomy, inputs) -> tuple[float, ...]:
    """How much each stack's output moves when its last block's output is multiplied by 8.

    The relative change ``|new - old| / |old|`` of the stack's last hidden state, one per stack:
    7 if nothing normalizes what the last block returns (the output grows 8-fold), near 0 if a
    norm does (up to its ``eps``).
    """
    base = _stack_outputs(model, anatomy, inputs)
    changes = []
    for i, (_, layers) in enumerate(anatomy.stacks):
        with _rescaled(submodule(model, layers)[-1], SCALE, "output"):
            moved = _stack_outputs(model, anatomy, inputs)[i]
        changes.append(_relative_change(moved, base[i]))
    return tuple(changes)


def has_final_norm(model: nn.Module, anatomy: Anatomy, inputs) -> tuple[bool, ...]:
    """Is there a norm between each stack's last block and its output?

    The last block's output is multiplied by 8 (a forward hook). Without a norm after it the
    stack's output grows 8-fold (relative change 7); through a norm it does not change (relative
    change near 0, up to ``eps``). One answer per stack (:func:`final_norm_changes`).
    """
    changes = final_norm_changes(model, anatomy, inputs)
    return tuple(c < INVARIANT * (SCALE - 1) for c in changes)


def has_embedding_norm(model: nn.Module, anatomy: Anatomy, inputs) -> bool:
    """Is the stream that enters the first block normalized?

    Every embedding table of a copy of the model (token, position, token type) is multiplied by
    8. Without a norm between the embeddings and the first block, the first block's input grows
    8-fold; after a norm it does not change.
    """
    first = {"b": submodule(model, anatomy.layers)[0]}
    with Tap(first) as tap:
        _run(model, inputs)
    scaled = copy.deepcopy(model)
    with torch.no_grad():
        for module in scaled.modules():
            if isinstance(module, nn.Embedding):
                module.weight.mul_(SCALE)
    with Tap({"b": submodule(scaled, anatomy.layers)[0]}) as moved:
        _run(scaled, inputs)
    return _relative_change(moved.inputs["b"], tap.inputs["b"]) < INVARIANT * (SCALE - 1)


def qk_normalized(model: nn.Module, anatomy: Anatomy, inputs, scale: float = 100.0) -> bool:
    """Are the attention's queries and keys normalized (QK-norm)?

    The first block's attention reads its input scaled to RMS 1 per token, then ``scale`` times
    that (biases of a copy set to 0, so that every projection is linear). Without QK-norm the
    attention logits grow by ``scale**2`` and the softmax changes, so the output is not
    ``scale`` times the first one; with the queries and keys normalized, the logits do not move
    and the output is exactly ``scale`` times larger.
    """
    model = copy.deepcopy(model)
    block = submodule(model, anatomy.layers)[0]
    with torch.no_grad():
        for name, p in submodule(block, anatomy.attn_in).named_parameters():
            if name.endswith("bias"):
                p.zero_()

    def unit_rms_input(factor: float):
        def pre_hook(mod, args, kwargs):
            h = _first_tensor(args, kwargs)
            h = factor * h / h.pow(2).mean(-1, keepdim=True).sqrt()  # (B, T, C), RMS = factor
            if args and isinstance(args[0], Tensor):
                return (h, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": h}

        return pre_hook

    outs = []
    for factor in (1.0, scale):
        handle = submodule(block, anatomy.attn_in).register_forward_pre_hook(
            unit_rms_input(factor), with_kwargs=True
        )
        try:
            with Tap({"out": submodule(block, anatomy.attn_out)}) as tap:
                _run(model, inputs)
        finally:
            handle.remove()
        outs.append(tap.outputs["out"])
    return _relative_change(outs[1], scale * outs[0]) < 1e-3


def attention_norms(model: nn.Module, anatomy: Anatomy, inputs) -> tuple[tuple[str, int], ...]:
    """The norms inside the first block's attention that run, with the width they normalize.

    ``(path, width)`` pairs; a width smaller than the model's means the norm works per head.
    """
    block = submodule(model, anatomy.layers)[0]
    attn = submodule(block, anatomy.attn_in)
    norms = {n: m for n, m in attn.named_modules() if n and _is_norm_class(m)}
    with Tap(norms) as tap:
        _run(model, inputs)
    return tuple((n, tap.inputs[n].shape[-1]) for n in norms if tap.calls[n])


# --------------------------------------------------------------------------------------------
# Findings of one model, and the rows of the chapter
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Findings:
    """Everything the probes found about one model (its first block, unless stated).

    ``block``: :attr:`BlockPlacement.kind`, the same for every block (checked). ``norm``,
    ``bias``, ``scale``, ``eps``, ``half``: :class:`NormProperties` of the block's norms (all
    the same, checked); ``eps`` is the measured value and agrees with the stored one (checked).
    ``final_norm``: every stack ends with a norm. ``qk_norm``: ``"none"``, ``"per head"`` or
    ``"all heads"``. ``attention_norms``: the norms inside the attention that ran, with widths.
    """

    block: str
    norm: str
    bias: bool
    scale: str
    eps: float
    half: str
    final_norm: bool
    embedding_norm: bool
    qk_norm: str
    attention_norms: tuple[tuple[str, int], ...]
    roles: tuple[tuple[str, str], ...]
    residual_weight: float
    n_block_norms: int


def probe_model(model: nn.Module, anatomy: Anatomy, inputs) -> Findings:
    """Run every probe on ``model`` (in eval mode) and collect :class:`Findings`."""
    model.eval()
    n_layers = len(submodule(model, anatomy.layers))
    placements = [probe_block(model, anatomy, inputs, i) for i in range(n_layers)]
    if len({p.kind for p in placements}) != 1:
        raise ProbeError(f"the blocks differ: {[p.kind for p in placements]}")
    block = submodule(model, anatomy.layers)[0]
    norms = block_norms(block, anatomy)
    width = _width(model, anatomy, inputs)
    props = {probe_norm(m, width) for m in norms.values()}
    if len(props) != 1:
        raise ProbeError(f"the block's norms differ: {props}")
    (prop,) = props
    if prop.eps_attr is not None and abs(prop.eps / prop.eps_attr - 1) > 0.05:
        raise ProbeError(f"measured eps {prop.eps:.3g}, stored {prop.eps_attr:.3g}")
    inner = attention_norms(model, anatomy, inputs)
    qk = qk_normalized(model, anatomy, inputs)
    per_head = any(w < width for _, w in inner)
    return Findings(
        block=placements[0].kind,
        norm=prop.kind,
        bias=prop.bias,
        scale=prop.scale,
        eps=prop.eps,
        half=prop.half,
        final_norm=all(has_final_norm(model, anatomy, inputs)),
        embedding_norm=has_embedding_norm(model, anatomy, inputs),
        qk_norm=("per head" if per_head else "all heads") if qk else "none",
        attention_norms=inner,
        roles=placements[0].roles,
        residual_weight=placements[0].residual_weight,
        n_block_norms=len(norms),
    )


def _width(model: nn.Module, anatomy: Anatomy, inputs) -> int:
    """The width of the residual stream, read from what the first block receives."""
    with Tap({"b": submodule(model, anatomy.layers)[0]}) as tap:
        _run(model, inputs)
    return tap.inputs["b"].shape[-1]


@dataclass(frozen=True)
class Expected:
    """A row's description, as data: what the probes must find.

    ``None`` means the description does not say (the probe's finding is shown, not compared).
    ``eps`` is the ``transformers`` config class's default (what a model built from the class
    alone gets, and what the probe measures), which is not always the value of a released
    checkpoint. ``release_eps`` is the value that a released checkpoint's configuration or the
    official code uses, where a source confirms one (None otherwise); ``release_eps_source`` says
    where it comes from, or why no value is given. ``source`` says where the rest of the
    description comes from; ``sourced`` is False for a row whose description was read only in the
    ``transformers`` code itself (a guard against a change of that code, not an independent
    check).
    """

    block: str
    norm: str
    final_norm: bool
    embedding_norm: bool = False
    qk_norm: str | None = "none"
    bias: bool | None = None
    scale: str | None = None
    eps: float | None = None
    half: str | None = None
    n_attention_norms: int | None = None
    source: str = ""
    sourced: bool = True
    release_eps: float | None = None
    release_eps_source: str = ""


#: The fields of :class:`Expected` that :func:`disagreements` compares with the findings.
COMPARED = ("block", "norm", "final_norm", "embedding_norm", "qk_norm", "bias", "scale", "eps")
COMPARED += ("half", "n_attention_norms")


def disagreements(found: Findings, expected: Expected) -> list[str]:
    """The fields where the probes' findings contradict the expectation (empty if none).

    ``eps`` agrees within 5%; every other field must be equal. Fields set to None are skipped.
    """
    out = []
    for name in COMPARED:
        want = getattr(expected, name)
        if want is None:
            continue
        got = len(found.attention_norms) if name == "n_attention_norms" else getattr(found, name)
        same = abs(got / want - 1) < 0.05 if name == "eps" else got == want
        if not same:
            out.append(f"{name}: expected {want!r}, probed {got!r}")
    return out


def n_compared(expected: Expected) -> int:
    """How many fields of ``expected`` :func:`disagreements` compares (those not None)."""
    return sum(getattr(expected, name) is not None for name in COMPARED)


@dataclass(frozen=True)
class Row:
    """One row of the chapter's table: a model, how to build its ``transformers`` class from a
    tiny config (``build(layers)``), where its parts are, and its description."""

    model: str
    build: Callable[..., nn.Module]
    anatomy: Anatomy
    expected: Expected
    encoder_decoder: bool = False


def sample_ids(row: Row, seed: int = 0, batch: int = 2, tokens: int = 6) -> dict[str, Tensor]:
    """Keyword inputs for a row's model: random token ids ``(batch, tokens)``, int64."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, tokens), generator=g)  # (B, T)
    if row.encoder_decoder:
        return {"input_ids": ids, "decoder_input_ids": ids}
    return {"input_ids": ids}


def probe_row(row: Row, seed: int = 0) -> tuple[str, Findings]:
    """Build ``row``'s class with ``torch.manual_seed(seed)``, probe it on ids drawn with the
    same seed; returns the class name and the :class:`Findings`."""
    torch.manual_seed(seed)
    model = row.build()
    return type(model).__name__, probe_model(model, row.anatomy, sample_ids(row, seed))


@dataclass
class StreamTrace:
    """What one forward pass showed, block by block, as ``(N, C)`` float64 rows."""

    block_in: list[Tensor]  # the residual stream entering each block
    attn_in: list[Tensor]  # what each block's attention read
    block_out: list[Tensor]  # the stream leaving each block
    output: Tensor  # the stack's output (after its final norm, if it has one)


def trace_stream(model: nn.Module, anatomy: Anatomy, inputs) -> StreamTrace:
    """Run ``model`` once with every block and attention of the first stack hooked."""
    blocks = submodule(model, anatomy.layers)
    modules: dict[str, nn.Module] = {"stack": submodule(model, anatomy.stacks[0][0])}
    for i, block in enumerate(blocks):
        modules |= {f"b{i}": block, f"a{i}": submodule(block, anatomy.attn_in)}
    with Tap(modules) as tap:
        _run(model.eval(), inputs)
    n = range(len(blocks))
    return StreamTrace(
        block_in=[tap.inputs[f"b{i}"] for i in n],
        attn_in=[tap.inputs[f"a{i}"] for i in n],
        block_out=[tap.outputs[f"b{i}"] for i in n],
        output=tap.outputs["stack"],
    )


def token_rms(rows: Tensor) -> Tensor:
    """The root mean square of each row: ``(N, C) -> (N,)``, float64."""
    return rows.double().pow(2).mean(-1).sqrt()


@dataclass(frozen=True)
class StreamSummary:
    """What one :class:`StreamTrace` shows about the residual stream (floats over every token).

    ``read_rms_lo`` / ``read_rms_hi``: the smallest and largest per-token RMS of what the
    attentions read. ``stream_rms_hi``: the largest per-token RMS of the stream after the last
    block. ``output_rms_dev``: the largest ``|RMS - 1|`` of a token of the stack's output.
    ``first_read_mean``: the largest ``|mean|`` of a token that the first attention reads.
    ``first_reads_raw`` / ``all_read_raw``: the first attention (every attention) reads its
    block's input unchanged. ``block_out_dev``: the largest ``|mean| + |variance - 1|`` of a
    token leaving a block (0 when every block ends with a LayerNorm of weight 1 and bias 0).
    """

    read_rms_lo: float
    read_rms_hi: float
    stream_rms_hi: float
    output_rms_dev: float
    first_read_mean: float
    first_reads_raw: bool
    all_read_raw: bool
    block_out_dev: float


def summarize_stream(trace: StreamTrace) -> StreamSummary:
    """The :class:`StreamSummary` of one forward pass."""
    reads = torch.cat([token_rms(h) for h in trace.attn_in])  # (blocks * N,)
    pairs = zip(trace.attn_in, trace.block_in, strict=True)
    out_dev = max(
        float(h.mean(-1).abs().max() + (h.var(-1, unbiased=False) - 1).abs().max())
        for h in trace.block_out  # (N, C) each
    )
    return StreamSummary(
        read_rms_lo=float(reads.min()),
        read_rms_hi=float(reads.max()),
        stream_rms_hi=float(token_rms(trace.block_out[-1]).max()),
        output_rms_dev=float((token_rms(trace.output) - 1).abs().max()),
        first_read_mean=float(trace.attn_in[0].mean(-1).abs().max()),
        first_reads_raw=torch.equal(trace.attn_in[0], trace.block_in[0]),
        all_read_raw=all(torch.equal(a, b) for a, b in pairs),
        block_out_dev=out_dev,
    )


# --------------------------------------------------------------------------------------------
# The rows: tiny configs of the real classes
# --------------------------------------------------------------------------------------------

_IDS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}  # inside the tiny vocabulary


def _decoder(layers: int, **more) -> dict:
    """The config arguments of a LLaMA-like decoder with ``layers`` blocks."""
    return {
        "vocab_size": VOCAB,
        "hidden_size": WIDTH,
        "intermediate_size": FFN,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        **_IDS,
        **more,
    }


def build_gpt2(layers: int = LAYERS) -> transformers.GPT2LMHeadModel:
    """GPT-2's class, tiny (``layers`` blocks of width 32)."""
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=WIDTH, n_layer=layers, n_head=HEADS, n_positions=16, **_IDS
    )
    return transformers.GPT2LMHeadModel(cfg)


def build_bert(layers: int = LAYERS) -> transformers.BertModel:
    """BERT's encoder class, tiny, without the pooler."""
    cfg = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=16,
        pad_token_id=0,
    )
    return transformers.BertModel(cfg, add_pooling_layer=False)


def build_t5(layers: int = LAYERS) -> transformers.T5ForConditionalGeneration:
    """T5's encoder-decoder class, tiny."""
    cfg = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=WIDTH,
        d_kv=WIDTH // HEADS,
        d_ff=FFN,
        num_layers=layers,
        num_heads=HEADS,
        decoder_start_token_id=0,
        **_IDS,
    )
    return transformers.T5ForConditionalGeneration(cfg)


def build_llama(layers: int = LAYERS) -> transformers.LlamaForCausalLM:
    """LLaMA's class, tiny."""
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_decoder(layers)))


def build_mistral(layers: int = LAYERS) -> transformers.MistralForCausalLM:
    """Mistral's class, tiny."""
    return transformers.MistralForCausalLM(transformers.MistralConfig(**_decoder(layers)))


def build_qwen2(layers: int = LAYERS) -> transformers.Qwen2ForCausalLM:
    """Qwen2's class, tiny."""
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_decoder(layers)))


def build_qwen3(layers: int = LAYERS) -> transformers.Qwen3ForCausalLM:
    """Qwen3's class, tiny."""
    cfg = transformers.Qwen3Config(**_decoder(layers, head_dim=WIDTH // HEADS))
    return transformers.Qwen3ForCausalLM(cfg)


def build_gemma2(layers: int = LAYERS) -> transformers.Gemma2ForCausalLM:
    """Gemma 2's class, tiny."""
    cfg = transformers.Gemma2Config(**_decoder(layers, head_dim=WIDTH // HEADS))
    return transformers.Gemma2ForCausalLM(cfg)


def build_gemma3(layers: int = LAYERS) -> transformers.Gemma3ForCausalLM:
    """Gemma 3's text-only class, tiny."""
    cfg = transformers.Gemma3TextConfig(**_decoder(layers, head_dim=WIDTH // HEADS))
    return transformers.Gemma3ForCausalLM(cfg)


def build_olmo2(layers: int = LAYERS) -> transformers.Olmo2ForCausalLM:
    """OLMo 2's class, tiny."""
    return transformers.Olmo2ForCausalLM(transformers.Olmo2Config(**_decoder(layers)))


def build_gpt_neox(layers: int = LAYERS) -> transformers.GPTNeoXForCausalLM:
    """GPT-NeoX's class, tiny (its default ``use_parallel_residual=True``)."""
    cfg = {k: v for k, v in _decoder(layers).items() if k != "num_key_value_heads"}
    return transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**cfg))


def _opt_config(layers: int, **changes) -> transformers.OPTConfig:
    return transformers.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        word_embed_proj_dim=WIDTH,
        ffn_dim=FFN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        max_position_embeddings=16,
        **_IDS,
        **changes,
    )


def build_opt(layers: int = LAYERS) -> transformers.OPTForCausalLM:
    """OPT's class, tiny, with its default ``do_layer_norm_before=True``."""
    return transformers.OPTForCausalLM(_opt_config(layers))


def build_opt_350m(layers: int = LAYERS) -> transformers.OPTForCausalLM:
    """OPT's class, tiny, in the setting its code names for the 350m model:
    ``do_layer_norm_before=False``."""
    return transformers.OPTForCausalLM(_opt_config(layers, do_layer_norm_before=False))


def build_bloom(layers: int = LAYERS) -> transformers.BloomForCausalLM:
    """BLOOM's class, tiny."""
    cfg = transformers.BloomConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, n_layer=layers, n_head=HEADS
    )
    return transformers.BloomForCausalLM(cfg)


def build_deepseek_v3(layers: int = LAYERS) -> transformers.DeepseekV3ForCausalLM:
    """DeepSeek-V3's class, tiny: low-rank query and key-value projections (rank 16), four
    routed experts; the first block has a dense MLP, the others a mixture of experts."""
    cfg = transformers.DeepseekV3Config(
        **_decoder(layers),
        moe_intermediate_size=16,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_rope_head_dim=4,
        qk_nope_head_dim=4,
        v_head_dim=8,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
    )
    return transformers.DeepseekV3ForCausalLM(cfg)


def _decoder_only(stack: str, layers: str, attn: str = "self_attn", mlp: str = "mlp") -> Anatomy:
    return Anatomy(((stack, layers),), attn, attn, mlp, mlp)


LLAMA_LIKE = _decoder_only("model", "model.layers")
_OPT = Anatomy((("model.decoder", "model.decoder.layers"),), "self_attn", "self_attn", "fc1", "fc2")
_HF_CODE = "transformers code only"

ROWS: list[Row] = [
    Row(
        "GPT-2",
        build_gpt2,
        _decoder_only("transformer", "transformer.h", "attn", "mlp"),
        Expected(
            "pre",
            "LayerNorm",
            True,
            eps=1e-5,
            source="GPT-2 report 2.3; openai/gpt-2 code",
            release_eps=1e-5,
            release_eps_source="openai/gpt-2 code",
        ),
    ),
    Row(
        "BERT",
        build_bert,
        Anatomy(
            (("encoder", "encoder.layer"),),
            "attention.self",
            "attention.output.dense",
            "intermediate",
            "output.dense",
        ),
        Expected(
            "post",
            "LayerNorm",
            False,
            embedding_norm=True,
            eps=1e-12,
            source="google-research/bert modeling.py; transformers BERT",
            release_eps=1e-12,
            release_eps_source="google-research/bert code",
        ),
    ),
    Row(
        "T5",
        build_t5,
        Anatomy(
            (("encoder", "encoder.block"), ("decoder", "decoder.block")),
            "layer.0.SelfAttention",
            "layer.0.SelfAttention",
            "layer.1.DenseReluDense",
            "layer.1.DenseReluDense",
        ),
        Expected(
            "pre", "RMSNorm", True, bias=False, eps=1e-6, source="T5 paper 2.1; transformers T5"
        ),
        encoder_decoder=True,
    ),
    Row(
        "LLaMA",
        build_llama,
        LLAMA_LIKE,
        Expected(
            "pre",
            "RMSNorm",
            True,
            eps=1e-6,
            half="scale after cast",
            source="LLaMA paper 2.2; meta-llama/llama model.py; transformers LLaMA",
            release_eps=1e-5,
            release_eps_source="Llama 2 and 3 releases; Llama 1: not confirmed",
        ),
    ),
    Row(
        "Mistral",
        build_mistral,
        LLAMA_LIKE,
        Expected(
            "pre",
            "RMSNorm",
            True,
            eps=1e-6,
            source="mistral-inference; transformers",
            release_eps_source="Mistral 7B release: not confirmed",
        ),
    ),
    Row(
        "Qwen2",
        build_qwen2,
        LLAMA_LIKE,
        Expected("pre", "RMSNorm", True, eps=1e-6, source=_HF_CODE, sourced=False),
    ),
    Row(
        "Qwen3",
        build_qwen3,
        LLAMA_LIKE,
        Expected("pre", "RMSNorm", True, qk_norm="per head", source=_HF_CODE, sourced=False),
    ),
    Row(
        "Gemma 2",
        build_gemma2,
        LLAMA_LIKE,
        Expected(
            "sandwich",
            "RMSNorm",
            True,
            scale="1 + weight",
            eps=1e-6,
            half="scale in float32",
            source="Gemma 2 report; google/gemma_pytorch; transformers Gemma 2",
            release_eps=1e-6,
            release_eps_source="google/gemma_pytorch code",
        ),
    ),
    Row(
        "Gemma 3",
        build_gemma3,
        LLAMA_LIKE,
        Expected(
            "sandwich",
            "RMSNorm",
            True,
            qk_norm="per head",
            scale="1 + weight",
            eps=1e-6,
            half="scale in float32",
            source="Gemma 3 report 2; google/gemma_pytorch; transformers Gemma 3",
            release_eps=1e-6,
            release_eps_source="google/gemma_pytorch code",
        ),
    ),
    Row(
        "OLMo 2",
        build_olmo2,
        LLAMA_LIKE,
        Expected(
            "output",
            "RMSNorm",
            True,
            qk_norm="all heads",
            bias=False,
            eps=1e-5,
            source="OLMo 2 report 3.3.2; allenai/OLMo config; transformers OLMo 2",
            release_eps=1e-6,
            release_eps_source="OLMo 2 7B and 13B releases",
        ),
    ),
    Row(
        "GPT-NeoX",
        build_gpt_neox,
        _decoder_only("gpt_neox", "gpt_neox.layers", "attention", "mlp"),
        Expected(
            "parallel, two norms",
            "LayerNorm",
            True,
            eps=1e-5,
            source="EleutherAI/gpt-neox 20B config; transformers GPT-NeoX",
            release_eps_source="GPT-NeoX-20B: not in EleutherAI's 20B.yml; release not confirmed",
        ),
    ),
    Row("OPT", build_opt, _OPT, Expected("pre", "LayerNorm", True, source=_HF_CODE, sourced=False)),
    Row(
        "OPT (350m setting)",
        build_opt_350m,
        _OPT,
        Expected("post", "LayerNorm", False, source=_HF_CODE, sourced=False),
    ),
    Row(
        "BLOOM",
        build_bloom,
        Anatomy(
            (("transformer", "transformer.h"),),
            "self_attention",
            "self_attention.dense",
            "mlp",
            "mlp.dense_4h_to_h",
        ),
        Expected(
            "pre",
            "LayerNorm",
            True,
            embedding_norm=True,
            eps=1e-5,
            source=_HF_CODE,
            sourced=False,
        ),
    ),
    Row(
        "DeepSeek-V3",
        build_deepseek_v3,
        LLAMA_LIKE,
        Expected(
            "pre",
            "RMSNorm",
            True,
            qk_norm=None,
            eps=1e-6,
            n_attention_norms=2,
            source="deepseek-ai/DeepSeek-V3 model.py; transformers DeepSeek-V3",
            release_eps=1e-6,
            release_eps_source="deepseek-ai/DeepSeek-V3 code",
        ),
    ),
]


@dataclass(frozen=True)
class SourcedRow:
    """A row of the chapter's table that no probe checks: the model has no ``transformers``
    class, so its description (``norm``, ``where``, ``eps``, as words) comes from its paper or
    its official code alone (``source``)."""

    model: str
    norm: str
    where: str
    eps: str
    source: str


#: The table's rows without a class to probe.
SOURCED_ROWS: list[SourcedRow] = [
    SourcedRow(
        "GPT-1",
        "LayerNorm",
        "post-norm, no final norm",
        "1e-05 (official code)",
        "official code (openai/finetune-transformer-lm)",
    ),
    SourcedRow(
        "GPT-3",
        "LayerNorm",
        "pre-norm, final norm (GPT-2's)",
        "not published",
        "paper, Sec. 2.1 (no code or configuration released)",
    ),
]


#: Where the parts of a course stack (``model_zoo.build_*``) are.
ZOO_ANATOMY = Anatomy((("", "layers"),), "self_attn", "self_attn", "ffn", "ffn")


def probe_zoo_block(build: Callable[..., nn.Module], seed: int = 0, layers: int = 4):
    """Probe the first block of a course stack, for a model without a ``transformers`` class.

    ``build(WIDTH, HEADS, 2 * WIDTH, num_layers=layers)`` runs after ``torch.manual_seed(seed)``
    and the stack reads ``model_zoo.sample_input`` of the same seed, ``(4, 6, WIDTH)`` float32.
    Returns the :class:`BlockPlacement` (its ``residual_weight`` is DeepNorm's alpha).
    """
    torch.manual_seed(seed)
    model = build(WIDTH, HEADS, 2 * WIDTH, num_layers=layers)
    x = sample_input(d_model=WIDTH, seed=seed)  # (B, T, C)
    return probe_block(model, ZOO_ANATOMY, x)


# --------------------------------------------------------------------------------------------
# The chapter's table: findings as words
# --------------------------------------------------------------------------------------------

#: The table's columns.
TABLE_HEAD = ("model", "norm", "where", "eps (class)", "eps (release or code)", "checked by")
#: The table's rows, roughly in order of publication (probed rows, course stacks, sourced rows).
TABLE_ORDER = (
    "Transformer (2017)",
    "GPT-1",
    "BERT",
    "GPT-2",
    "GPT-3",
    "T5",
    "GPT-NeoX",
    "PaLM",
    "OPT",
    "OPT (350m setting)",
    "BLOOM",
    "GLM-130B",
    "LLaMA",
    "Mistral",
    "Qwen2",
    "Qwen3",
    "Gemma 2",
    "Gemma 3",
    "OLMo 2",
    "DeepSeek-V3",
)
_BLOCK_WORDS = {"pre": "pre-norm", "post": "post-norm", "output": "output norms"}
_SHOWN_NAMES = {"LLaMA": "LLaMA 1/2/3"}  # the LLaMA class stands for the three generations


def where_words(f: Findings) -> str:
    """A class's placement findings as a short phrase: ``"pre-norm, final norm"``."""
    words = [_BLOCK_WORDS.get(f.block, f.block)]
    words += ["embedding norm"] * f.embedding_norm
    words += ["final norm" if f.final_norm else "no final norm"]
    if f.qk_norm != "none":
        words.append(f"QK-norm ({f.qk_norm})")
    elif f.attention_norms:
        words.append("norms inside the attention (not QK-norm)")
    return ", ".join(words)


def norm_words(f: Findings) -> str:
    """The norm a class uses: ``"RMSNorm"``, ``"RMSNorm, 1 + w"``, ``"LayerNorm, no bias"``."""
    no_bias = f.norm == "LayerNorm" and not f.bias
    return (
        f.norm + (", no bias" if no_bias else "") + (", 1 + w" if f.scale == "1 + weight" else "")
    )


def release_words(e: Expected) -> str:
    """The released or official ``eps`` with its source, the reason there is none, or a dash."""
    if e.release_eps is None:
        return e.release_eps_source or "–"
    return f"{e.release_eps:.0e} ({e.release_eps_source})"


def zoo_final_norm(build: Callable[..., nn.Module]) -> bool:
    """Whether a course stack (``model_zoo.build_*``) ends with a final norm."""
    model = build(WIDTH, HEADS, 2 * WIDTH, num_layers=1)
    return not isinstance(model.final_norm, nn.Identity)


#: Marks a cell of a course stack's row that is the stack's literal reading of the paper's
#: formula, which the sources read for this course do not settle.
STACK_READING = "‡"
#: The "where" phrase of a course stack whose sources do not say whether it has a final norm.
FINAL_NOT_STATED = "final norm: not stated"
#: Course stacks whose block probe's ``kind`` is such a reading (PaLM's paper writes
#: ``LayerNorm(x)`` twice; the stack reads it as one norm).
_KIND_IS_READING = {"PaLM"}


def table_rows(
    probed: Mapping[str, tuple[str, Findings]],
    stacks: Mapping[str, BlockPlacement],
    final_norms: Mapping[str, bool | None] | None = None,
) -> dict[str, list[str]]:
    """The cells of the chapter's table (:data:`TABLE_HEAD`), one list of strings per model.

    ``probed``: model -> (class name, :class:`Findings`) for every row of :data:`ROWS`;
    ``stacks``: model -> the :class:`BlockPlacement` of its course stack (the 2017 Transformer,
    GLM-130B, PaLM); ``final_norms``: course stack -> whether it ends with a final norm
    (:func:`zoo_final_norm`), added to its "where" as the stack's reading (marked
    :data:`STACK_READING`), or None where the sources do not say, added as
    :data:`FINAL_NOT_STATED`; :data:`SOURCED_ROWS` are added as they are. A row whose description
    was read only in the ``transformers`` code is marked with a dagger.
    """
    rows = {}
    for row in ROWS:
        name, f = probed[row.model]
        shown = _SHOWN_NAMES.get(row.model, row.model) + ("" if row.expected.sourced else " †")
        eps = f"{f.eps:.0e}"
        rows[row.model] = [shown, norm_words(f), where_words(f), eps]
        rows[row.model] += [release_words(row.expected), f"probe: `{name}`"]
    for model, placement in stacks.items():
        norm = "LayerNorm, no bias" if model == "PaLM" else "LayerNorm"
        where = _BLOCK_WORDS.get(placement.kind, placement.kind)
        if model in _KIND_IS_READING:
            where += f" {STACK_READING}"
        if placement.residual_weight != 1:
            where += ", DeepNorm, α = √(2N)"
        if final_norms is not None and model in final_norms:
            if final_norms[model] is None:
                where += f", {FINAL_NOT_STATED}"
            else:
                final = "final norm" if final_norms[model] else "no final norm"
                where += f", {final} {STACK_READING}"
        rows[model] = [model, norm, where, "–", "–", "paper; probe of a course stack"]
    for r in SOURCED_ROWS:
        rows[r.model] = [r.model, r.norm, r.where, "–", r.eps, r.source]
    return rows


def find_row(model: str) -> Row:
    """The row of :data:`ROWS` named ``model``."""
    for row in ROWS:
        if row.model == model:
            return row
    raise KeyError(model)
