"""Small blocks in the style of well-known models, built from the course's pieces, and checks.

One builder per row of the models chapter's table ("Which model uses which norm"). Each returns a
:class:`ZooStack`: an optional norm on the embeddings, a few blocks, an optional final norm. Only
the norms and where they sit follow the model; the attention and the FFN are the course's generic
sublayers (:mod:`addnorm_lib.transformer.sublayers`) in every row, and no other detail of the
real models (activations, positional encodings, widths, ...) is modelled.

Every builder has a ``check_*`` function that *measures behaviour*: it runs the model on an input
with forward hooks (:class:`Recorder`) and measures what each sublayer reads and what is added to
the residual stream. A check returns the numbers it measured and raises :class:`ZooCheckError`
(an ``AssertionError``) when the model does not behave as its row says.

The naming trap of ``post_attention_layernorm`` is shown by :class:`LlamaStyleNaming` and
:class:`OutputNormNaming`, told apart by :func:`role_of_post_attention_layernorm`.

All models take ``(B, T, d_model)`` float inputs: the embedding vectors, not token ids.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from addnorm_lib import lookup
from addnorm_lib.reference.deepnorm import DeepNormLayer
from addnorm_lib.reference.placement import PostLNBlock, PreLNBlock
from addnorm_lib.transformer.architectures import (
    OffsetRMSNorm,
    OutputNormBlock,
    ParallelBlock,
    SandwichBlock,
)
from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention

__all__ = [
    "LlamaStyleNaming",
    "OutputNormNaming",
    "Recorder",
    "ZooCheckError",
    "ZooStack",
    "build_bert",
    "build_bloom",
    "build_deepseek_v3",
    "build_gemma",
    "build_glm130b",
    "build_gpt2",
    "build_llama",
    "build_olmo2",
    "build_palm",
    "build_t5",
    "build_transformer_2017",
    "check_bert",
    "check_bloom",
    "check_deepseek_v3",
    "check_gemma",
    "check_glm130b",
    "check_gpt2",
    "check_llama",
    "check_olmo2",
    "check_palm",
    "check_t5",
    "check_transformer_2017",
    "measured_eps",
    "role_of_post_attention_layernorm",
    "sample_input",
    "token_mean",
    "token_rms",
    "token_var",
]

D_MODEL, N_HEAD, D_FF = 32, 4, 64  # default sizes: small enough for a page that builds in seconds
TOL = 1e-3  # how close to 1 (or 0) a normalized statistic must be


class ZooCheckError(AssertionError):
    """A zoo model does not behave as its row of the table says."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ZooCheckError(message)


# --------------------------------------------------------------------------------------------
# Per-token statistics and a forward-hook recorder
# --------------------------------------------------------------------------------------------


def token_rms(x: Tensor) -> Tensor:
    """Root mean square over the last dim: ``(*, C) -> (*)``, in float64."""
    return x.double().pow(2).mean(-1).sqrt()


def token_mean(x: Tensor) -> Tensor:
    """Mean over the last dim: ``(*, C) -> (*)``, in float64."""
    return x.double().mean(-1)


def token_var(x: Tensor) -> Tensor:
    """Biased variance over the last dim, as LayerNorm uses it: ``(*, C) -> (*)``, float64."""
    return x.double().var(-1, unbiased=False)


def _max_dev(t: Tensor, target: float) -> float:
    return float((t - target).abs().max())


def _rms_normalized(x: Tensor) -> bool:
    return _max_dev(token_rms(x), 1.0) < TOL


def _layer_normalized(x: Tensor) -> bool:
    return _max_dev(token_mean(x), 0.0) < TOL and _max_dev(token_var(x), 1.0) < TOL


class Recorder:
    """Record the first input and the output of chosen modules during a forward pass.

    >>> with Recorder({"attn": block.self_attn, "ffn": block.ffn}) as rec:
    ...     block(x)
    >>> rec.inputs["attn"], rec.outputs["ffn"]  # detached copies, (B, T, C)

    A module called more than once keeps its last call. Hooks are removed on exit. A subclass
    whose hooks also take the call's keyword arguments sets ``hook_kwargs``.
    """

    hook_kwargs = False  # hooks take (module, args, output); True: (module, args, kwargs, output)

    def __init__(self, modules: Mapping[str, nn.Module]) -> None:
        self.modules = dict(modules)
        self.inputs: dict[str, Tensor] = {}
        self.outputs: dict[str, Tensor] = {}
        self._handles: list = []

    def __enter__(self) -> Recorder:
        for name, module in self.modules.items():
            hook = self._hook(name)
            self._handles.append(module.register_forward_hook(hook, with_kwargs=self.hook_kwargs))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, name: str):
        def hook(module, inputs, output):
            self.inputs[name] = inputs[0].detach().clone()
            self.outputs[name] = output.detach().clone()

        return hook


def sample_input(batch: int = 4, tokens: int = 6, d_model: int = D_MODEL, seed: int = 0) -> Tensor:
    """A ``(B, T, d_model)`` input that no norm leaves unchanged: each token has its own offset
    and scale (means between -2 and 2, spreads between 0.5 and 3)."""
    g = torch.Generator().manual_seed(seed)
    offset = 4 * torch.rand(batch, tokens, 1, generator=g) - 2  # (B, T, 1)
    scale = 0.5 + 2.5 * torch.rand(batch, tokens, 1, generator=g)  # (B, T, 1)
    return offset + scale * torch.randn(batch, tokens, d_model, generator=g)  # (B, T, C)


def measured_eps(norm: nn.Module, d_model: int) -> float:
    """Estimate a norm's ``eps`` from its behaviour, with its weight 1 (or Gemma's 0) and bias 0.

    A row with variance (LayerNorm) or mean square (RMSNorm) ``v`` comes out with mean square
    ``v / (v + eps)``. It feeds rows of ``+-sqrt(v)`` (mean 0, so both statistics equal
    ``v``) for ``v = 1, 1e-1, ..., 1e-16`` in float64, takes the ``v`` whose output mean square
    ``m`` is closest to 1/2, and returns ``v * (1 / m - 1)``.
    """
    norm64 = copy.deepcopy(norm).double()  # a float64 copy: the caller's norm is untouched
    signs = torch.ones(d_model, dtype=torch.float64)
    signs[1::2] = -1  # (C,), mean 0 for even C
    best = None
    with torch.no_grad():
        for k in range(17):
            v = 10.0**-k
            m = float(norm64(signs * v**0.5).pow(2).mean())
            if best is None or abs(m - 0.5) < abs(best[1] - 0.5):
                best = (v, m)
    v, m = best
    return v * (1 / m - 1)


# --------------------------------------------------------------------------------------------
# The container and the builders, one per row
# --------------------------------------------------------------------------------------------


class ZooStack(nn.Module):
    """``embed_norm`` (optional), then ``layers`` in order, then ``final_norm`` (optional).

    Input: the embeddings, ``(B, T, C)``; output ``(B, T, C)``. A missing norm is an
    ``nn.Identity``, so every model has the same three attributes for the checks.
    """

    def __init__(
        self,
        layers: list[nn.Module],
        embed_norm: nn.Module | None = None,
        final_norm: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.embed_norm = embed_norm or nn.Identity()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm or nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """The embeddings through the stack: ``(B, T, C) -> (B, T, C)``."""
        x = self.embed_norm(x)  # (B, T, C)
        for layer in self.layers:
            x = layer(x)  # (B, T, C)
        return self.final_norm(x)


def _sublayers(d_model: int, nhead: int, d_ff: int, bias: bool = True):
    return SelfAttention(d_model, nhead, bias=bias), FeedForward(d_model, d_ff, bias=bias)


BlockFactory = Callable[[nn.Module, nn.Module], nn.Module]


def _stack(block: BlockFactory, sizes: tuple[int, int, int, int], **norms) -> ZooStack:
    """A :class:`ZooStack` of ``block(self_attn, ffn)`` layers; ``sizes``: (layers, d_model,
    nhead, d_ff); ``norms``: its ``embed_norm`` and ``final_norm``, if any."""
    num_layers, d_model, nhead, d_ff = sizes
    layers = [block(*_sublayers(d_model, nhead, d_ff)) for _ in range(num_layers)]
    return ZooStack(layers, **norms)


def build_transformer_2017(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """Transformer (2017): Post-LN blocks, ``LN(x + Sublayer(x))``; nothing else."""
    return _stack(lambda a, f: PostLNBlock(a, f, d_model), (num_layers, d_model, nhead, d_ff))


def build_bert(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """BERT: a LayerNorm on the embeddings, then Post-LN blocks; every LayerNorm has eps 1e-12."""
    eps = 1e-12
    return _stack(
        lambda a, f: PostLNBlock(a, f, d_model, layer_norm_eps=eps),
        (num_layers, d_model, nhead, d_ff),
        embed_norm=nn.LayerNorm(d_model, eps=eps),
    )


def build_gpt2(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """GPT-2 / GPT-3: Pre-LN blocks and a final LayerNorm; eps 1e-5."""
    return _stack(
        lambda a, f: PreLNBlock(a, f, d_model, layer_norm_eps=1e-5),
        (num_layers, d_model, nhead, d_ff),
        final_norm=nn.LayerNorm(d_model, eps=1e-5),
    )


def t5_norm(d_model: int) -> nn.Module:
    """T5's norm, RMS-style: no mean subtraction, no bias, eps 1e-6 (``torch.nn.RMSNorm``)."""
    return nn.RMSNorm(d_model, eps=1e-6)


def build_t5(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """T5: pre-norm blocks with an RMS-style norm (:func:`t5_norm`), and a final one."""
    return _stack(
        lambda a, f: PreLNBlock(a, f, d_model, norm=t5_norm),
        (num_layers, d_model, nhead, d_ff),
        final_norm=t5_norm(d_model),
    )


def build_llama(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """LLaMA 1/2/3, Mistral, Qwen2: pre-RMSNorm blocks and a final RMSNorm."""
    return _stack(
        lambda a, f: PreLNBlock(a, f, d_model, norm=nn.RMSNorm),
        (num_layers, d_model, nhead, d_ff),
        final_norm=nn.RMSNorm(d_model),
    )


def build_deepseek_v3(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """DeepSeek-V3, in part: pre-RMSNorm blocks and a final RMSNorm. The RMSNorms inside its
    attention's low-rank projections are not modelled."""
    return _stack(
        lambda a, f: PreLNBlock(a, f, d_model, norm=nn.RMSNorm),
        (num_layers, d_model, nhead, d_ff),
        final_norm=nn.RMSNorm(d_model),
    )


def glm130b_alpha(num_layers: int) -> float:
    """GLM-130B's own DeepNorm residual weight, ``(2N)**(1/2)`` for N layers."""
    return (2 * num_layers) ** 0.5


def build_glm130b(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """GLM-130B: Post-LN with DeepNorm's residual step, ``alpha = (2N)**(1/2)``.

    Only alpha is modelled (no beta scaling of the initialization).
    """
    alpha = glm130b_alpha(num_layers)
    return ZooStack([DeepNormLayer(d_model, nhead, d_ff, alpha=alpha) for _ in range(num_layers)])


def build_gemma(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """Gemma 2/3: "sandwich" blocks, an RMSNorm before and after each sublayer, scaling by
    ``1 + weight`` (:class:`~addnorm_lib.transformer.architectures.OffsetRMSNorm`), and a final
    one."""
    return _stack(
        lambda a, f: SandwichBlock(a, f, d_model, norm=OffsetRMSNorm),
        (num_layers, d_model, nhead, d_ff),
        final_norm=OffsetRMSNorm(d_model),
    )


def build_olmo2(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """OLMo 2: no norm at the sublayers' input; an RMSNorm on each sublayer's output before the
    add, and a final RMSNorm. Its QK-norm is not modelled."""
    return _stack(
        lambda a, f: OutputNormBlock(a, f, d_model, norm=nn.RMSNorm),
        (num_layers, d_model, nhead, d_ff),
        final_norm=nn.RMSNorm(d_model),
    )


def build_bloom(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """BLOOM: a LayerNorm on the embeddings, Pre-LN blocks, a final LayerNorm."""
    return _stack(
        lambda a, f: PreLNBlock(a, f, d_model),
        (num_layers, d_model, nhead, d_ff),
        embed_norm=nn.LayerNorm(d_model),
        final_norm=nn.LayerNorm(d_model),
    )


def build_palm(d_model=D_MODEL, nhead=N_HEAD, d_ff=D_FF, num_layers=2) -> ZooStack:
    """PaLM: parallel blocks ``y = x + MLP(LN(x)) + Attn(LN(x))``, LayerNorms without bias."""
    return _stack(
        lambda a, f: ParallelBlock(a, f, d_model, norm=lambda d: nn.LayerNorm(d, bias=False)),
        (num_layers, d_model, nhead, d_ff),
    )


# --------------------------------------------------------------------------------------------
# Behaviour checks
# --------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """What a forward pass of a :class:`ZooStack` showed, layer by layer (detached, (B, T, C))."""

    embed_in: Tensor  # the model's input
    embed_out: Tensor  # after the embedding norm (the input itself if there is none)
    attn_in: list[Tensor]  # what each layer's attention read
    attn_out: list[Tensor]
    ffn_in: list[Tensor]  # what each layer's FFN read
    ffn_out: list[Tensor]
    layer_in: list[Tensor]
    layer_out: list[Tensor]  # the residual stream after each layer
    final_in: Tensor
    output: Tensor


def trace(model: ZooStack, x: Tensor) -> Trace:
    """Run ``model`` on ``x`` under a :class:`Recorder` and collect a :class:`Trace`."""
    modules: dict[str, nn.Module] = {"embed": model.embed_norm, "final": model.final_norm}
    for i, layer in enumerate(model.layers):
        modules |= {f"layer{i}": layer, f"attn{i}": layer.self_attn, f"ffn{i}": layer.ffn}
    with torch.no_grad(), Recorder(modules) as rec:
        model(x)
    n = range(len(model.layers))
    return Trace(
        embed_in=rec.inputs["embed"],
        embed_out=rec.outputs["embed"],
        attn_in=[rec.inputs[f"attn{i}"] for i in n],
        attn_out=[rec.outputs[f"attn{i}"] for i in n],
        ffn_in=[rec.inputs[f"ffn{i}"] for i in n],
        ffn_out=[rec.outputs[f"ffn{i}"] for i in n],
        layer_in=[rec.inputs[f"layer{i}"] for i in n],
        layer_out=[rec.outputs[f"layer{i}"] for i in n],
        final_in=rec.inputs["final"],
        output=rec.outputs["final"],
    )


def _worst(tensors: list[Tensor], stat: Callable[[Tensor], Tensor], target: float) -> float:
    return max(_max_dev(stat(t), target) for t in tensors)


def _least(tensors: list[Tensor], stat: Callable[[Tensor], Tensor], target: float) -> float:
    """The *largest* deviation from ``target`` in each tensor, minimized over the tensors: a
    value well above zero means no tensor in the list is normalized."""
    return min(_max_dev(stat(t), target) for t in tensors)


def _sublayer_inputs(t: Trace) -> list[Tensor]:
    return t.attn_in + t.ffn_in


# norm kind -> (is a tensor normalized per token?, the statistic that is 1 after the norm)
_NORM_KINDS = {"ln": (_layer_normalized, token_var), "rms": (_rms_normalized, token_rms)}


def _check_pre_norm(t: Trace, kind: str, final: bool | None) -> dict[str, float]:
    """Pre-norm: each sublayer reads a normalized copy; the stream is not normalized; the output
    is normalized (``final=True``), is not (``False``), or is not checked (``None``).

    ``kind`` is ``"ln"`` (LayerNorm: mean 0, variance 1) or ``"rms"`` (RMSNorm: RMS 1).
    """
    normalized, stat = lookup(_NORM_KINDS, kind, "norm kind")
    _expect(
        all(normalized(h) for h in _sublayer_inputs(t)),
        f"a sublayer reads an input that is not {kind.upper()}-normalized per token",
    )
    stream_dev = _least(t.layer_out, token_rms, 1.0)
    _expect(stream_dev > 0.1, "the residual stream is normalized: the norm is not *before* only")
    out_dev = _max_dev(stat(t.output), 1.0)
    if final:
        _expect(normalized(t.output), "the output is not normalized: the final norm is missing")
    elif final is False:
        _expect(out_dev > 0.1, "the output is normalized, but this row has no final norm")
    return {
        "sublayer_input_dev": _worst(_sublayer_inputs(t), stat, 1.0),
        "stream_rms_dev": stream_dev,
        "output_dev": out_dev,
    }


def _check_post_norm(t: Trace) -> dict[str, float]:
    """Post-LN: the first attention reads the raw input, each layer's output is LayerNorm-normalized
    per token, and so is every FFN's input (it comes right after a norm)."""
    _expect(
        torch.equal(t.attn_in[0], t.embed_out),
        "the first attention does not read the raw stream: there is a norm before it",
    )
    _expect(
        all(_layer_normalized(h) for h in t.layer_out + t.ffn_in),
        "a layer's output (or an FFN's input) is not LayerNorm-normalized: the norm is not after "
        "the add",
    )
    return {
        "layer_out_mean_dev": _worst(t.layer_out, token_mean, 0.0),
        "layer_out_var_dev": _worst(t.layer_out, token_var, 1.0),
    }


def check_transformer_2017(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Post-LN: ``LN(x + Sublayer(x))``, checked as in :func:`_check_post_norm`."""
    return _check_post_norm(trace(model, x))


def check_bert(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Post-LN, plus a LayerNorm on the embeddings, with eps 1e-12 (measured by
    :func:`measured_eps` on the embedding norm)."""
    t = trace(model, x)
    _expect(_layer_normalized(t.embed_out), "the embeddings are not LayerNorm-normalized")
    d_model = x.shape[-1]
    eps = measured_eps(model.embed_norm, d_model)
    _expect(abs(eps / 1e-12 - 1) < 0.05, f"the embedding norm's eps is {eps:.3g}, not 1e-12")
    return {
        **_check_post_norm(t),
        "embed_var_dev": _max_dev(token_var(t.embed_out), 1.0),
        "eps": eps,
    }


def check_gpt2(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Pre-LN plus a final LayerNorm with eps 1e-5."""
    out = _check_pre_norm(trace(model, x), "ln", final=True)
    eps = measured_eps(model.final_norm, x.shape[-1])
    _expect(abs(eps / 1e-5 - 1) < 0.05, f"the final norm's eps is {eps:.3g}, not 1e-5")
    return {**out, "eps": eps}


def check_t5(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Pre-norm, RMS-style: unit RMS at each sublayer's input, but not zero mean; the norm has no
    bias and no mean subtraction (a shifted input changes its output); eps 1e-6; a final norm."""
    t = trace(model, x)
    out = _check_pre_norm(t, "rms", final=True)
    mean_left = max(float(token_mean(h).abs().max()) for h in _sublayer_inputs(t))
    _expect(mean_left > 0.1, "the sublayer inputs have zero mean: the norm subtracts the mean")
    norm = model.layers[0].norm1
    _expect(
        not any("bias" in k for k in norm.state_dict()), "the norm has a bias in its state_dict"
    )
    with torch.no_grad():
        shift_change = float((norm(x + 1.0) - norm(x)).abs().max())
    _expect(shift_change > 0.01, "a shifted input gives the same output: the norm re-centres")
    eps = measured_eps(norm, x.shape[-1])
    _expect(abs(eps / 1e-6 - 1) < 0.05, f"the norm's eps is {eps:.3g}, not 1e-6")
    return {**out, "mean_left": mean_left, "shift_change": shift_change, "eps": eps}


def check_llama(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Pre-RMSNorm (unit RMS, not zero mean, at each sublayer input) plus a final RMSNorm."""
    t = trace(model, x)
    out = _check_pre_norm(t, "rms", final=True)
    mean_left = max(float(token_mean(h).abs().max()) for h in _sublayer_inputs(t))
    _expect(mean_left > 0.1, "the sublayer inputs have zero mean: that is LayerNorm, not RMSNorm")
    return {**out, "mean_left": mean_left}


def check_deepseek_v3(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Pre-RMSNorm at each sublayer input; the stream is not normalized; a final norm. (The norms
    inside the attention are not modelled.)"""
    t = trace(model, x)
    _expect(_rms_normalized(t.output), "the output is not normalized: the final norm is missing")
    _expect(
        all(_rms_normalized(h) for h in _sublayer_inputs(t)),
        "a sublayer reads an input that is not RMS-normalized",
    )
    mean_left = max(float(token_mean(h).abs().max()) for h in _sublayer_inputs(t))
    _expect(mean_left > 0.1, "the sublayer inputs have zero mean: that is LayerNorm, not RMSNorm")
    stream_dev = _least(t.layer_out, token_rms, 1.0)
    _expect(stream_dev > 0.1, "the residual stream is normalized")
    return {
        "sublayer_input_dev": _worst(_sublayer_inputs(t), token_rms, 1.0),
        "stream_rms_dev": stream_dev,
    }


def check_glm130b(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Post-LN with DeepNorm: each layer's output is LayerNorm-normalized, and the attention's norm
    reads ``alpha * x + attn(x)`` with ``alpha = (2N)**(1/2)``, alpha measured by least squares."""
    t = trace(model, x)
    _expect(all(_layer_normalized(h) for h in t.layer_out), "a layer's output is not normalized")
    modules = {f"n{i}": layer.attn_norm for i, layer in enumerate(model.layers)}
    with torch.no_grad(), Recorder(modules) as rec:
        model(x)
    norm_in = [rec.inputs[f"n{i}"] for i in range(len(model.layers))]
    alphas = []
    for x_in, a_out, n_in in zip(t.layer_in, t.attn_out, norm_in, strict=True):
        shortcut = (n_in - a_out).double().flatten()
        alphas.append(float(shortcut @ x_in.double().flatten() / x_in.double().pow(2).sum()))
    expected = glm130b_alpha(len(model.layers))
    worst = max(abs(a - expected) for a in alphas)
    _expect(worst < 1e-4 * expected, f"measured alpha {alphas}, expected (2N)^(1/2) = {expected}")
    return {"alpha": alphas[0], "alpha_dev": worst}


def check_gemma(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Sandwich norms scaling by ``1 + weight``: a norm whose weight is zero scales by exactly 1;
    each sublayer reads a unit-RMS input; what is added to the stream has unit RMS per token; a
    final norm."""
    t = trace(model, x)
    _expect(_rms_normalized(t.output), "the output is not normalized: the final norm is missing")
    norm = copy.deepcopy(model.layers[0].pre_attn_norm)
    with torch.no_grad():
        norm.weight.zero_()
        plain = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))  # (B, T, C), unit RMS
        zero_weight_dev = float((norm(x) - plain).abs().max())
        norm.weight.fill_(0.5)
        half_ratio = float((norm(x) / plain).mean())
    _expect(zero_weight_dev < 1e-4, "with its weight at zero the norm does not scale by 1")
    _expect(abs(half_ratio - 1.5) < 1e-4, "with weight 0.5 the norm does not scale by 1.5")
    _expect(
        all(_rms_normalized(h) for h in _sublayer_inputs(t)),
        "a sublayer reads an input that is not RMS-normalized",
    )
    modules = {f"n{i}": layer.pre_ffn_norm for i, layer in enumerate(model.layers)}
    with torch.no_grad(), Recorder(modules) as rec:
        model(x)
    mid = [rec.inputs[f"n{i}"] for i in range(len(model.layers))]  # stream after the attention
    added = [m - a for a, m in zip(t.layer_in, mid, strict=True)]  # the attention's addition
    added += [o - m for m, o in zip(mid, t.layer_out, strict=True)]  # the FFN's addition
    _expect(
        all(_rms_normalized(d) for d in added),
        "what a sublayer adds to the stream is not RMS-normalized: no norm after the sublayer",
    )
    return {
        "zero_weight_dev": zero_weight_dev,
        "half_ratio": half_ratio,
        "added_rms_dev": _worst(added, token_rms, 1.0),
    }


def check_olmo2(model: ZooStack, x: Tensor) -> dict[str, float]:
    """No input norm: the attention reads the raw stream. What each sublayer adds to the stream
    has unit RMS per token: the norm is on the sublayer's output. A final norm."""
    t = trace(model, x)
    _expect(_rms_normalized(t.output), "the output is not normalized: the final norm is missing")
    _expect(
        all(torch.equal(a, s) for a, s in zip(t.attn_in, t.layer_in, strict=True)),
        "the attention does not read the raw stream: there is a norm at its input",
    )
    in_dev = _least(_sublayer_inputs(t), token_rms, 1.0)
    _expect(in_dev > 0.1, "a sublayer input is RMS-normalized")
    added = [f - a for a, f in zip(t.layer_in, t.ffn_in, strict=True)]
    added += [o - f for f, o in zip(t.ffn_in, t.layer_out, strict=True)]
    _expect(
        all(_rms_normalized(d) for d in added),
        "what a sublayer adds to the stream is not RMS-normalized: no norm on its output",
    )
    return {"input_rms_dev": in_dev, "added_rms_dev": _worst(added, token_rms, 1.0)}


def check_bloom(model: ZooStack, x: Tensor) -> dict[str, float]:
    """A LayerNorm on the embeddings, Pre-LN blocks, a final LayerNorm."""
    t = trace(model, x)
    _expect(_layer_normalized(t.embed_out), "the embeddings are not LayerNorm-normalized")
    return {
        **_check_pre_norm(t, "ln", final=True),
        "embed_var_dev": _max_dev(token_var(t.embed_out), 1.0),
    }


def check_palm(model: ZooStack, x: Tensor) -> dict[str, float]:
    """Parallel: attention and FFN read the *same* LayerNorm-normalized input, the layer equals
    ``x + attn(LN(x)) + ffn(LN(x))`` recomputed from its own sublayers, the norm has no bias."""
    t = trace(model, x)
    _expect(
        all(torch.equal(a, f) for a, f in zip(t.attn_in, t.ffn_in, strict=True)),
        "the attention and the FFN read different inputs: the block is not parallel",
    )
    _expect(
        all(_layer_normalized(h) for h in t.attn_in), "the shared input is not LayerNorm-normalized"
    )
    recomputed = [
        s + a + f for s, a, f in zip(t.layer_in, t.attn_out, t.ffn_out, strict=True)
    ]  # (B, T, C) each
    sum_dev = max(float((r - o).abs().max()) for r, o in zip(recomputed, t.layer_out, strict=True))
    _expect(sum_dev < 1e-5, "the layer's output is not x + attn(LN(x)) + ffn(LN(x))")
    for layer in model.layers:
        _expect(not any("bias" in k for k in layer.norm.state_dict()), "the norm has a bias")
    return {"sum_dev": sum_dev}


# --------------------------------------------------------------------------------------------
# The naming trap
# --------------------------------------------------------------------------------------------


class _NamingLayer(nn.Module):
    """Sublayers and two RMSNorms named ``other_norm`` and ``post_attention_layernorm``."""

    def __init__(self, d_model: int = D_MODEL, nhead: int = N_HEAD, d_ff: int = D_FF) -> None:
        super().__init__()
        self.self_attn, self.ffn = _sublayers(d_model, nhead, d_ff)
        self.other_norm = nn.RMSNorm(d_model)
        self.post_attention_layernorm = nn.RMSNorm(d_model)


class LlamaStyleNaming(_NamingLayer):
    """A pre-norm layer named as in LLaMA-style code, where ``post_attention_layernorm`` is the
    norm *before the FFN*::

        x = x + self_attn(other_norm(x))
        x = x + ffn(post_attention_layernorm(x))

    Only ``post_attention_layernorm`` is the real code's name; ``other_norm`` (here the
    attention's input norm) is ours, and is named as in :class:`OutputNormNaming`, so that the
    two layers have the same state_dict keys.
    """

    def forward(self, x: Tensor) -> Tensor:
        """The pre-norm layer above: ``(B, T, C) -> (B, T, C)``."""
        x = x + self.self_attn(self.other_norm(x))  # (B, T, C)
        return x + self.ffn(self.post_attention_layernorm(x))  # (B, T, C)


class OutputNormNaming(_NamingLayer):
    """A layer named as in Gemma 2/3 and OLMo 2, where ``post_attention_layernorm`` normalizes the
    attention's *output* (OLMo 2's placement)::

        x = x + post_attention_layernorm(self_attn(x))
        x = x + other_norm(ffn(x))

    Only ``post_attention_layernorm`` is the real code's name; ``other_norm`` (here the FFN's
    output norm) is ours, named as in :class:`LlamaStyleNaming`.
    """

    def forward(self, x: Tensor) -> Tensor:
        """The output-norm layer above: ``(B, T, C) -> (B, T, C)``."""
        x = x + self.post_attention_layernorm(self.self_attn(x))  # (B, T, C)
        return x + self.other_norm(self.ffn(x))  # (B, T, C)


def role_of_post_attention_layernorm(layer: nn.Module, x: Tensor) -> str:
    """What the layer's ``post_attention_layernorm`` normalizes, found by running it.

    Returns ``"attention output"`` if the norm reads exactly what the attention returned,
    ``"FFN input"`` if its output is exactly what the FFN reads (it is the pre-FFN norm), and
    raises :class:`ZooCheckError` otherwise.
    """
    modules = {"norm": layer.post_attention_layernorm, "attn": layer.self_attn, "ffn": layer.ffn}
    with torch.no_grad(), Recorder(modules) as rec:
        layer(x)
    if torch.equal(rec.inputs["norm"], rec.outputs["attn"]):
        return "attention output"
    if torch.equal(rec.outputs["norm"], rec.inputs["ffn"]):
        return "FFN input"
    raise ZooCheckError(
        "post_attention_layernorm is neither on the attention output nor the FFN input"
    )
