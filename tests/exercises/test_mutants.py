"""Mutation tests: the graded cells must reject the usual wrong implementations.

Each mutant is the solution notebook with one answer cell edited the way a learner might get it
wrong. It must lose the points of exactly the test cells it should, with a failure message that
names the mistake. Every mutant is graded in this process (tests/inprocess.py: the grader's own
assembling and judging, with the cells executed here); the first mutant of each assignment is
also graded by the grader itself (nbval in a jailed kernel, judged outside it), in one batch, and
must get the same points, cell by cell.
"""

import json
import re
from dataclasses import dataclass

import nbformat
import pytest

from addnorm_lib.grading.judge import Grade
from tests.conftest import GRADE_ANYWHERE, ROOT, run_python
from tests.exercises import task_text_modules as written
from tests.inprocess import grade_in_process, run_cells

pytestmark = pytest.mark.slow

SOLUTIONS = ROOT / "solutions"


@dataclass(frozen=True)
class Mutant:
    name: str
    cell: str  # grade_id of the answer cell to edit
    edits: tuple[tuple[str, str], ...]  # (old, new) replacements; each old must occur
    fails: frozenset[str]  # grade_ids of the test cells that must fail
    phrase: str  # must appear in a failure message
    assignment: str = "layernorm"
    base: str | None = None  # the answer cell's source before the edits; None: the solution's


def forward(name, edits, phrase):
    return Mutant(name, "layer_norm", edits, frozenset({"test_layer_norm"}), phrase)


def backward(name, edits, phrase):
    return Mutant(
        name, "layer_norm_backward", edits, frozenset({"test_layer_norm_backward"}), phrase
    )


def module(name, edits, phrase):
    return Mutant(name, "layer_norm_module", edits, frozenset({"test_layer_norm_module"}), phrase)


TWO_PASS_VAR = "var = (centered**2).mean(axis=-1, keepdims=True)"
MUTANTS = [
    forward("batch axis", (("axis=-1", "axis=0"),), "batch axis"),
    forward("axis 1, right for 2-D only", (("axis=-1", "axis=1"),), "time axis"),
    forward(
        "unbiased variance",
        ((TWO_PASS_VAR, "var = x.var(axis=-1, ddof=1, keepdims=True)"),),
        "unbiased variance",
    ),
    forward(
        "eps outside the square root",
        (("centered / np.sqrt(var + eps)", "centered / (np.sqrt(var) + eps)"),),
        "outside the square root",
    ),
    forward(
        "one-pass variance in float32",
        ((TWO_PASS_VAR, "var = (x**2).mean(axis=-1, keepdims=True) - mean**2"),),
        "E[x^2] - E[x]^2",
    ),
    forward(
        "gamma and beta swapped",
        (("gamma * x_hat + beta", "beta * x_hat + gamma"),),
        "swapped gamma and beta",
    ),
    forward(
        "no affine parameters", (("(gamma * x_hat + beta)", "(x_hat)"),), "without the affine step"
    ),
    forward(
        "modifies its input in place",
        (("centered = x - mean", "x -= mean\n    centered = x"),),
        "in place",
    ),
    forward(
        "broadcasting that only works for 2-D",
        (
            (
                "mean = x.mean(axis=-1, keepdims=True)  # (..., 1)\n    centered = x - mean",
                "mean = x.mean(axis=-1)\n    centered = (x.T - mean).T",
            ),
        ),
        "any number of leading axes",
    ),
    forward(
        "returns float64 for float32 input",
        (("astype(x.dtype, copy=False)", "astype(np.float64)"),),
        "Keep the input's dtype",
    ),
    backward(
        "dx drops the mean term",
        (("        - dx_hat.mean(axis=-1, keepdims=True)\n", ""),),
        "comes from the mean",
    ),
    backward(
        "dx drops the variance term",
        (("        - x_hat * (dx_hat * x_hat).mean(axis=-1, keepdims=True)\n", ""),),
        "comes from the variance",
    ),
    backward("dx forgets gamma", (("dx_hat = dy * gamma", "dx_hat = dy"),), "forgets gamma"),
    backward(
        "dgamma summed over axis 0 only",
        (("dgamma = (dy * x_hat).sum(axis=leading)", "dgamma = (dy * x_hat).sum(axis=0)"),),
        "dgamma has shape",
    ),
    module(
        "torch.var is unbiased by default",
        (
            (
                "var = (centered**2).mean(dim=dims, keepdim=True)",
                "var = x.var(dim=dims, keepdim=True)",
            ),
        ),
        "unbiased variance",
    ),
    module(
        "parameters named gamma and beta",
        (
            ("self.weight", "self.gamma"),
            ("self.bias", "self.beta"),
            ('register_parameter("weight"', 'register_parameter("gamma"'),
            ('register_parameter("bias"', 'register_parameter("beta"'),
        ),
        "state_dict() has keys",
    ),
    module(
        "calls torch's layer_norm",
        (
            (
                "y = centered / torch.sqrt(var + self.eps)",
                "y = torch.nn.functional.layer_norm(x, self.normalized_shape, eps=self.eps)",
            ),
        ),
        "torch's own normalization function",
    ),
    module("ignores its eps argument", (("var + self.eps", "var + 1e-5"),), "eps=0.1"),
    module(
        "normalizes the last axis only",
        (("dims = tuple(range(-len(self.normalized_shape), 0))", "dims = (-1,)"),),
        "normalized_shape=(3, 5)",
    ),
]


def residual(name, cell, edits, fails, phrase):
    return Mutant(name, cell, edits, frozenset(fails), phrase, assignment="residuals")


BRANCH = "return x + hidden @ W2  # (..., C)"
DX = "return dy + dx_branch, dW1, db1, dW2"
# The stack runs with correct blocks in place of the learner's: a wrong block costs only its test.
FORWARD = {"test_blocks"}
BACKWARD = {"test_blocks_backward"}
RESIDUAL_MUTANTS = [
    residual(
        "relu after the addition",
        "blocks",
        ((BRANCH, "return np.maximum(x + hidden @ W2, 0)"),),
        FORWARD,
        "applies the ReLU after adding the shortcut",
    ),
    residual(
        "shortcut inside the branch",
        "blocks",
        ((BRANCH, "return (x + hidden) @ W2"),),
        FORWARD,
        "added inside the branch instead of around it",
    ),
    residual(
        "missing identity term",
        "blocks_backward",
        ((DX, "return dx_branch, dW1, db1, dW2"),),
        BACKWARD,
        "missing the identity term",
    ),
    residual(
        "W1 not transposed",
        "blocks_backward",
        (("dx = dpre @ W1.T", "dx = dpre @ W1"),),
        BACKWARD,
        "multiplies by W1 instead of its transpose",
    ),
    residual(
        "W2 not transposed",
        "blocks_backward",
        (("dhidden = dy @ W2.T", "dhidden = dy @ W2"),),
        BACKWARD,
        "instead of its transpose",
    ),
    residual(
        "weight gradients for 2-D input only",
        "blocks_backward",
        (("x.reshape(-1, channels).T @ dpre.reshape(-1, width)", "x.T @ dpre"),),
        BACKWARD,
        "reshape(-1, C)",
    ),
    residual(
        "norms in reverse order",
        "stack_gradient_norms",
        (("return np.array(norms[::-1])", "return np.array(norms)"),),
        {"test_stack_gradient_norms"},
        "reverse order",
    ),
]
MUTANTS += RESIDUAL_MUTANTS


def one_cell_mutant(assignment):
    """A maker of mutants of ``assignment`` that each fail exactly one test cell, ``fails``."""

    def make(name, cell, edits, fails, phrase):
        return Mutant(name, cell, edits, frozenset({fails}), phrase, assignment=assignment)

    return make


batchnorm = one_cell_mutant("batchnorm")


BN_UPDATE = "m * var * n / (n - 1)"
BATCHNORM_MUTANTS = [
    batchnorm(
        "biased running variance",
        "batch_norm",
        (("momentum * var * n / (n - 1)", "momentum * var"),),
        "test_batch_norm",
        "biased batch variance",
    ),
    batchnorm(
        "reversed momentum",
        "batch_norm",
        (
            (
                "(1 - momentum) * running_mean + momentum * mean",
                "momentum * running_mean + (1 - momentum) * mean",
            ),
        ),
        "test_batch_norm",
        "momentum points the wrong way",
    ),
    batchnorm(
        "batch statistics in eval",
        "batch_norm",
        (
            (
                "mean, var = running_mean, running_var",
                "mean, var = x.mean(axis=axes), x.var(axis=axes)",
            ),
        ),
        "test_batch_norm",
        "batch's own statistics",
    ),
    batchnorm(
        "normalizes over the feature axis",
        "batch_norm",
        (("axes = (0, *range(2, x.ndim))", "axes = (1,)"),),
        "test_batch_norm",
        "per feature (axis 0)",
    ),
    batchnorm(
        "BatchNorm: one-pass variance",
        "batch_norm",
        (
            (
                "var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)",
                "var = (x**2).mean(axis=axes) - mean**2",
            ),
        ),
        "test_batch_norm",
        "E[x^2] - E[x]^2",
    ),
    batchnorm(
        "BatchNorm: eps outside the square root",
        "batch_norm",
        (("np.sqrt(var.reshape(shape) + eps)", "(np.sqrt(var.reshape(shape)) + eps)"),),
        "test_batch_norm",
        "eps outside the square root",
    ),
    batchnorm(
        "BatchNorm: forgot gamma",
        "batch_norm",
        (("return gamma.reshape(shape) * x_hat + beta", "return x_hat + beta"),),
        "test_batch_norm",
        "You left out gamma",
    ),
    batchnorm(
        "BatchNorm: dgamma from x instead of x_hat",
        "batch_norm_backward",
        (("dgamma = (dy * x_hat).sum(axis=axes)", "dgamma = (dy * x).sum(axis=axes)"),),
        "test_batch_norm_backward",
        "gamma scales the normalized x_hat",
    ),
    batchnorm(
        "backward without the mean term",
        "batch_norm_backward",
        (("dx_hat - mean_term - var_term", "dx_hat - var_term"),),
        "test_batch_norm_backward",
        "the term that comes from the batch mean",
    ),
    batchnorm(
        "BatchNorm1d: momentum=None taken as 0.1",
        "batch_norm_module",
        (("else 1.0 / float(self.num_batches_tracked)", "else 0.1"),),
        "test_batch_norm_module",
        "cumulative moving average",
    ),
    batchnorm(
        "BatchNorm1d: running statistics updated under autograd",
        "batch_norm_module",
        (
            (
                "with torch.no_grad():\n                self.num_batches_tracked",
                "if True:\n                self.num_batches_tracked",
            ),
        ),
        "test_batch_norm_module",
        "grad_fn",
    ),
    batchnorm(
        "mode from torch.is_grad_enabled()",
        "batch_norm_module",
        (
            (
                "if self.training or not self.track_running_stats:",
                "if torch.is_grad_enabled() or not self.track_running_stats:",
            ),
            (
                "if self.training and self.track_running_stats:",
                "if torch.is_grad_enabled() and self.track_running_stats:",
            ),
        ),
        "test_batch_norm_module",
        "torch.is_grad_enabled()",
    ),
    batchnorm(
        "running statistics updated in eval",
        "batch_norm_module",
        (("if self.training and self.track_running_stats:", "if self.track_running_stats:"),),
        "test_batch_norm_module",
        "updates the running estimates in eval mode",
    ),
    batchnorm(
        "running variance unbiased by torch.var's default",
        "batch_norm_module",
        (("var = x.var(dim=axes, unbiased=False)", "var = x.var(dim=axes)"),),
        "test_batch_norm_module",
        "unbiased variance",
    ),
]
MUTANTS += BATCHNORM_MUTANTS


rmsnorm = one_cell_mutant("rmsnorm")


RMSNORM_MUTANTS = [
    rmsnorm(
        "eps outside the root",
        "rms_norm",
        (("x / np.sqrt(mean_square + eps)", "x / (np.sqrt(mean_square) + eps)"),),
        "test_rms_norm",
        "outside the square root",
    ),
    rmsnorm(
        "subtracts the mean",
        "rms_norm",
        (
            (
                "x_hat = x / np.sqrt(mean_square + eps)",
                "x_hat = (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, "
                "keepdims=True) + eps)",
            ),
        ),
        "test_rms_norm",
        "You subtracted the mean",
    ),
    rmsnorm(
        "no weight",
        "rms_norm",
        (("(x_hat * weight)", "(x_hat)"),),
        "test_rms_norm",
        "You left out the weight",
    ),
    rmsnorm(
        "backward treats the RMS as a constant",
        "rms_norm_backward",
        (("(dx_hat - through_rms) / rms", "dx_hat / rms"),),
        "test_rms_norm_backward",
        "treats the RMS as a constant",
    ),
    rmsnorm(
        "no upcast for half precision",
        "rms_norm_module",
        (("x32 = x.float() if half else x", "x32 = x"),),
        "test_rms_norm_module",
        "matches computing the whole norm in float16",
    ),
    rmsnorm(
        "module subtracts the mean",
        "rms_norm_module",
        (
            (
                "        mean_square = (x32 * x32)",
                "        x32 = x32 - x32.mean(dim=dims, keepdim=True)\n"
                "        mean_square = (x32 * x32)",
            ),
        ),
        "test_rms_norm_module",
        "You subtracted the mean",
    ),
]
MUTANTS += RMSNORM_MUTANTS


deepnorm = one_cell_mutant("deepnorm")


DEEPNORM_MUTANTS = [
    deepnorm(
        "encoder-decoder encoder with the one-stack formula",
        "deepnorm_constants",
        (
            (
                "return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)",
                "return (2 * n) ** 0.25, (8 * n) ** -0.25",
            ),
        ),
        "test_deepnorm_constants",
        "you used the one-stack formulas",
    ),
    deepnorm(
        "alpha on the branch",
        "deepnorm_residual",
        (("norm(alpha * x + sublayer(x))", "norm(x + alpha * sublayer(x))"),),
        "test_deepnorm_residual",
        "You multiplied the sublayer's output by alpha",
    ),
    deepnorm(
        "beta on the query and key projections",
        "deepnorm_init",
        (
            (
                "            layer.ffn.fc1,\n",
                "            layer.self_attn.q_proj,\n            layer.self_attn.k_proj,\n"
                "            layer.ffn.fc1,\n",
            ),
        ),
        "test_deepnorm_init",
        "you scaled self_attn.q_proj.weight by beta",
    ),
    deepnorm(
        "scales a copy",
        "deepnorm_init",
        (
            (
                "    with torch.no_grad():\n",
                "    import copy\n\n    layer = copy.deepcopy(layer)\n    with torch.no_grad():\n",
            ),
        ),
        "test_deepnorm_init",
        "returned a new module (a copy of the layer?)",
    ),
]
MUTANTS += DEEPNORM_MUTANTS


placement = one_cell_mutant("placement")


PLACEMENT_MUTANTS = [
    placement(
        "Post-LN block normalizes the sublayer inputs (Pre-LN)",
        "post_ln_block",
        (
            ("x = self.norm1(x + self.self_attn(x))", "x = x + self.self_attn(self.norm1(x))"),
            ("return self.norm2(x + self.ffn(x))", "return x + self.ffn(self.norm2(x))"),
        ),
        "test_post_ln_block",
        "not normalized",
    ),
    placement(
        "Pre-LN block adds to the normalized stream",
        "pre_ln_block",
        (
            (
                "x = x + self.self_attn(self.norm1(x))",
                "x = self.norm1(x) + self.self_attn(self.norm1(x))",
            ),
            (
                "return x + self.ffn(self.norm2(x))",
                "return self.norm2(x) + self.ffn(self.norm2(x))",
            ),
        ),
        "test_pre_ln_block",
        "adds the sublayer's output to the *normalized* stream",
    ),
    placement(
        "stack without its final norm",
        "pre_ln_stack",
        (("return self.norm(x)", "return x"),),
        "test_pre_ln_stack",
        "without the final norm",
    ),
    placement(
        "schedule without the d_model factor",
        "schedules",
        (("return d_model**-0.5 * min(", "return min("),),
        "test_schedules",
        "leaves out the d_model ** -0.5 factor",
    ),
]
MUTANTS += PLACEMENT_MUTANTS


# Calling torch's own norm, by every route a learner might take: each loses the module's points,
# with a message that says so (the checks record the norm ops the module called; the judge reads
# the record).
LN_MATH = "y = centered / torch.sqrt(var + self.eps)"
LN_CLASS = "class LayerNorm(nn.Module):"
RMS_MATH = "y = x32 * torch.rsqrt(mean_square + eps)"
BN_MATH = "y = (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + self.eps)"
CALLS_TORCH = "calls torch's own normalization functions"


def route(name, assignment, edits):
    cells = {"layernorm": "layer_norm_module", "rmsnorm": "rms_norm_module"}
    cell = cells.get(assignment, "batch_norm_module")
    test = f"test_{cell}"
    return Mutant(f"route: {name}", cell, edits, frozenset({test}), CALLS_TORCH, assignment)


ROUTE_MUTANTS = [
    route(
        "torch.layer_norm",
        "layernorm",
        ((LN_MATH, "y = torch.layer_norm(x, self.normalized_shape, None, None, self.eps)"),),
    ),
    route(
        "torch.ops.aten.native_layer_norm",
        "layernorm",
        (
            (
                LN_MATH,
                "y = torch.ops.aten.native_layer_norm("
                "x, list(self.normalized_shape), None, None, self.eps)[0]",
            ),
        ),
    ),
    route(
        "torch.nn.functional looked up by strings",
        "layernorm",
        (
            (LN_CLASS, "import importlib\n\n\n" + LN_CLASS),
            (
                LN_MATH,
                "functional = importlib.import_module('torch.nn.' + 'functional')\n"
                "        y = getattr(functional, 'layer' + '_norm')("
                "x, self.normalized_shape, eps=self.eps)",
            ),
        ),
    ),
    route(
        "layer_norm imported before the check",
        "layernorm",
        (
            (LN_CLASS, "from torch.nn.functional import layer_norm as _norm\n\n\n" + LN_CLASS),
            (LN_MATH, "y = _norm(x, self.normalized_shape, eps=self.eps)"),
        ),
    ),
    route(
        "an nn.LayerNorm inside",
        "layernorm",
        (
            (
                LN_MATH,
                "y = nn.LayerNorm("
                "self.normalized_shape, eps=self.eps, elementwise_affine=False)(x)",
            ),
        ),
    ),
    route(
        "torch.nn.functional.group_norm",
        "layernorm",
        (
            (
                LN_MATH,
                "rows = x.flatten(x.dim() - len(self.normalized_shape))\n"
                "        y = torch.nn.functional.group_norm("
                "rows.reshape(-1, 1, rows.shape[-1]), 1, eps=self.eps).reshape(x.shape)",
            ),
        ),
    ),
    route(
        "torch.rms_norm",
        "rmsnorm",
        ((RMS_MATH, "y = torch.rms_norm(x32, self.normalized_shape, None, eps)"),),
    ),
    route(
        "torch.ops.aten.rms_norm",
        "rmsnorm",
        ((RMS_MATH, "y = torch.ops.aten.rms_norm(x32, list(self.normalized_shape), None, eps)"),),
    ),
    route(
        "an nn.RMSNorm inside",
        "rmsnorm",
        (
            (
                RMS_MATH,
                "y = nn.RMSNorm(self.normalized_shape, eps=eps, elementwise_affine=False)(x32)",
            ),
        ),
    ),
    route(
        "torch.nn.functional.batch_norm",
        "batchnorm",
        ((BN_MATH, "y = torch.nn.functional.batch_norm(x, mean, var, eps=self.eps)"),),
    ),
    route(
        "torch.ops.aten._native_batch_norm_legit_no_training",
        "batchnorm",
        (
            (
                BN_MATH,
                "y = torch.ops.aten._native_batch_norm_legit_no_training("
                "x, None, None, mean, var, 0.0, self.eps)[0]",
            ),
        ),
    ),
    route(
        "torch.nn.functional.instance_norm",
        "batchnorm",
        (
            (
                BN_MATH,
                "y = torch.nn.functional.instance_norm(x.reshape(x.shape[0], x.shape[1], -1), "
                "mean, var, use_input_stats=False, eps=self.eps).reshape(x.shape)",
            ),
        ),
    ),
]
MUTANTS += ROUTE_MUTANTS


def on_written(name, assignment, base, edits, phrase):
    """A mutant of a module written from the task text alone (no attributes but its parameters):
    its message must name its mistake, never an attribute the task does not ask for."""
    cells = {"layernorm": "layer_norm_module", "rmsnorm": "rms_norm_module"}
    cell = cells.get(assignment, "batch_norm_module")
    fails = frozenset({f"test_{cell}"})
    return Mutant(f"written: {name}", cell, edits, fails, phrase, assignment, base)


WRITTEN_MUTANTS = [
    on_written(
        "LayerNorm, unbiased variance",
        "layernorm",
        written.LAYER_NORM_NO_ATTRIBUTES,
        (
            (
                "(centered.square().mean(-1, keepdim=True) + eps)",
                "(flat.var(-1, keepdim=True) + eps)",
            ),
        ),
        "unbiased variance",
    ),
    on_written(
        "LayerNorm ignores eps",
        "layernorm",
        written.LAYER_NORM_NO_ATTRIBUTES,
        (("+ eps).sqrt()", "+ 1e-5).sqrt()"),),
        "eps=0.1",
    ),
    on_written(
        "LayerNorm, last axis only",
        "layernorm",
        written.LAYER_NORM_NO_ATTRIBUTES,
        (("n, eps = self._how", "n, eps = 1, self._how[1]"),),
        "normalized_shape=(3, 5)",
    ),
    on_written(
        "RMSNorm without the upcast",
        "rmsnorm",
        written.RMS_NORM_NO_ATTRIBUTES,
        (
            ("xc = x.to(torch.float32) if half else x", "xc = x"),
            (
                "eps = torch.finfo(xc.dtype).eps",
                "eps = torch.finfo(torch.float32 if half else x.dtype).eps",
            ),
        ),
        "matches computing the whole norm in float16",
    ),
    on_written(
        "RMSNorm subtracts the mean",
        "rmsnorm",
        written.RMS_NORM_NO_ATTRIBUTES,
        (
            (
                "flat = xc.reshape(*x.shape[: x.dim() - n], -1)",
                "flat = xc.reshape(*x.shape[: x.dim() - n], -1)\n"
                "        flat = flat - flat.mean(-1, keepdim=True)",
            ),
        ),
        "You subtracted the mean",
    ),
    on_written(
        "RMSNorm, eps=None as the input dtype's",
        "rmsnorm",
        written.RMS_NORM_NO_ATTRIBUTES,
        (("eps = torch.finfo(xc.dtype).eps", "eps = torch.finfo(x.dtype).eps"),),
        "with eps=None you used torch.finfo(bfloat16).eps",
    ),
    on_written(
        "RMSNorm, eps=None as 1e-6",
        "rmsnorm",
        written.RMS_NORM_NO_ATTRIBUTES,
        (("eps = torch.finfo(xc.dtype).eps", "eps = 1e-6"),),
        "With eps=None you used a fixed eps of 1e-6",
    ),
    on_written(
        "BatchNorm1d, biased running variance",
        "batchnorm",
        written.BATCH_NORM_NO_ATTRIBUTES,
        (("m * var * n / (n - 1)", "m * var"),),
        "biased batch variance",
    ),
    on_written(
        "BatchNorm1d, momentum=None as 0.1",
        "batchnorm",
        written.BATCH_NORM_NO_ATTRIBUTES,
        (("1 / self.num_batches_tracked.item()", "0.1"),),
        "cumulative moving average",
    ),
    on_written(
        "BatchNorm1d, mode from torch.is_grad_enabled()",
        "batchnorm",
        written.BATCH_NORM_NO_ATTRIBUTES,
        (
            ("if self.training or not tracking:", "if torch.is_grad_enabled() or not tracking:"),
            ("if self.training and tracking:", "if torch.is_grad_enabled() and tracking:"),
        ),
        "torch.is_grad_enabled()",
    ),
]
MUTANTS += WRITTEN_MUTANTS


# ----------------------------------------------------------------------------------------------
# Residuals, DeepNorm and placement (issue 26): degenerate sizes, parameters the initializer must
# leave alone, in-place updates of inputs, and placement mistakes that are named, not "differs".

residuals = one_cell_mutant("residuals")
STACK_FORWARD = """    inputs = []  # h_0, ..., h_{L-1}: each block's input (none if L = 0)
    h = x
    for W1, b1, W2 in params:
        inputs.append(h)
        h = block(h, W1, b1, W2)"""
INIT_SCALE = "            linear.weight.mul_(beta)"
POST_ATTN = "x = self.norm1(x + self.self_attn(x))  # (B, T, C)"
POST_FFN = "return self.norm2(x + self.ffn(x))"
PRE_ATTN = "x = x + self.self_attn(self.norm1(x))  # (B, T, C)"
PRE_FFN = "return x + self.ffn(self.norm2(x))"
STACK_LOOP = "        for layer in self.layers:\n            x = layer(x)  # (B, T, C)\n"
VASWANI = "return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)"

BLOCKS_MUTANTS = [
    residuals(
        "stack keeps one input too many (fails on an empty stack)",
        "stack_gradient_norms",
        (
            (
                STACK_FORWARD,
                "    inputs = [x]\n    for W1, b1, W2 in params[:-1]:\n"
                "        inputs.append(block(inputs[-1], W1, b1, W2))",
            ),
        ),
        "test_stack_gradient_norms",
        "Your stack fails on an empty stack (L = 0 blocks, params = [])",
    ),
    residuals(
        "residual block adds to x in place",
        "blocks",
        (("return x + hidden @ W2  # (..., C)", "x += hidden @ W2\n    return x"),),
        "test_blocks",
        "residual_block changed its input x in place",
    ),
    residuals(
        "backward adds to dy in place",
        "blocks_backward",
        (
            (
                "return dy + dx_branch, dW1, db1, dW2",
                "dy += dx_branch\n    return dy, dW1, db1, dW2",
            ),
        ),
        "test_blocks_backward",
        "changed its input dy in place",
    ),
    deepnorm(
        "residual step scales x in place",
        "deepnorm_residual",
        (
            (
                "return norm(alpha * x + sublayer(x))",
                "branch = sublayer(x)\n    x.mul_(alpha)\n    return norm(x + branch)",
            ),
        ),
        "test_deepnorm_residual",
        "deepnorm_residual changed its input x in place",
    ),
    deepnorm(
        "initializer scales the biases too",
        "deepnorm_init",
        ((INIT_SCALE, INIT_SCALE + "\n            linear.bias.mul_(beta)"),),
        "test_deepnorm_init",
        "you scaled self_attn.v_proj.bias by beta",
    ),
    deepnorm(
        "initializer zeroes the biases",
        "deepnorm_init",
        ((INIT_SCALE, INIT_SCALE + "\n            linear.bias.zero_()"),),
        "test_deepnorm_init",
        "you set self_attn.v_proj.bias to zero",
    ),
    deepnorm(
        "initializer scales one weight twice",
        "deepnorm_init",
        (("            layer.ffn.fc1,\n", "            layer.ffn.fc1,\n" * 2),),
        "test_deepnorm_init",
        "ffn.fc1.weight was multiplied by beta twice",
    ),
    placement(
        "Post-LN parallel block",
        "post_ln_block",
        (
            (POST_ATTN, "h = self.norm1(x + self.self_attn(x))"),
            (POST_FFN, "return self.norm2(h + self.ffn(x))"),
        ),
        "test_post_ln_block",
        "Your block is a parallel block: the FFN reads the block's input x",
    ),
    placement(
        "Pre-LN parallel block",
        "pre_ln_block",
        (
            (PRE_ATTN, "y = x + self.self_attn(self.norm1(x))"),
            (PRE_FFN, "return y + self.ffn(self.norm2(x))"),
        ),
        "test_pre_ln_block",
        "Your block is a parallel block (as GPT-J's)",
    ),
    placement(
        "Post-LN block without norm1",
        "post_ln_block",
        ((POST_ATTN, "x = x + self.self_attn(x)"),),
        "test_post_ln_block",
        "Your block is missing norm1",
    ),
    placement(
        "Post-LN block without norm2",
        "post_ln_block",
        ((POST_FFN, "return x + self.ffn(x)"),),
        "test_post_ln_block",
        "Your block is missing norm2",
    ),
    placement(
        "Pre-LN block without norm2",
        "pre_ln_block",
        ((PRE_FFN, "return x + self.ffn(x)"),),
        "test_pre_ln_block",
        "Your block is missing norm2",
    ),
    placement(
        "stack skips its last layer",
        "pre_ln_stack",
        (("for layer in self.layers:", "for layer in self.layers[:-1]:"),),
        "test_pre_ln_stack",
        "Your stack skips its last layer",
    ),
    placement(
        "stack applies its norm inside the loop (empty stack)",
        "pre_ln_stack",
        (
            (
                STACK_LOOP + "        return self.norm(x)",
                "        for i, layer in enumerate(self.layers):\n            x = layer(x)\n"
                "            if i == len(self.layers) - 1:\n                x = self.norm(x)\n"
                "        return x",
            ),
        ),
        "test_pre_ln_stack",
        "with no layers (an empty stack) the loop never runs",
    ),
    placement(
        "stack reads its first layer (empty stack)",
        "pre_ln_stack",
        (
            (
                STACK_LOOP,
                "        x = self.layers[0](x)\n        for layer in self.layers[1:]:\n"
                "            x = layer(x)\n",
            ),
        ),
        "test_pre_ln_stack",
        "a stack of no layers, raised IndexError",
    ),
    placement(
        "schedule with d_model ** 0.5",
        "schedules",
        (("return d_model**-0.5 * min(", "return d_model**0.5 * min("),),
        "test_schedules",
        "Your schedule multiplies by d_model ** 0.5",
    ),
    placement(
        "schedule with fractional exponents unparenthesized",
        "schedules",
        ((VASWANI, "return d_model**-1 / 2 * min(step**-1 / 2, step * warmup**-3 / 2)"),),
        "test_schedules",
        "you wrote `d_model ** -1/2` and `step ** -1/2` and `warmup ** -3/2`",
    ),
    placement(
        "schedule with step ** -1/2 only",
        "schedules",
        ((VASWANI, "return d_model**-0.5 * min(step**-1 / 2, step * warmup**-1.5)"),),
        "test_schedules",
        "you wrote `step ** -1/2`, which Python reads as `(step ** -1) / 2`",
    ),
    placement(
        "warm-up schedule with ** 1/2",
        "schedules",
        (("math.sqrt(warmup / step)", "(warmup / step) ** 1 / 2"),),
        "test_schedules",
        "you wrote `(warmup / step) ** 1/2`",
    ),
]
MUTANTS += BLOCKS_MUTANTS
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# Norms (issue 26, second part): low-precision, mixed-dtype and non-contiguous module inputs,
# eps=0, backward passes that are named, numpy answers that call torch's own norms, and advice
# in the language of the code (torch or numpy).

layernorm = one_cell_mutant("layernorm")
CALLS_NORM = "calls torch's own normalization functions"
IN_BFLOAT16 = "matches computing the whole norm in bfloat16"
PROMOTES = "With float32 parameters, `y * self.weight` promotes"
VIEW_REFUSED = ".view() refuses it"
LN_FLAT = "flat = xc.reshape(*x.shape[: x.dim() - n], -1)"
LN_VIEW = "flat = xc.view(-1, x.shape[-1]) if n == 1 else " + LN_FLAT.removeprefix("flat = ")
RMS_EPS = "eps = torch.finfo(x32.dtype).eps if self.eps is None else self.eps"

# BatchNorm on inputs where no two of N, C and L are equal: a per-channel vector broadcast along
# the batch axis, a channels-last result put back in the wrong order, and .view on a transposed
# tensor are each named (issue 26).
MISBROADCAST = "lines it up with the batch axis of (N, C) input"
SCRAMBLED = "before moving the channel axis back"
BN_AXES = "    axes = (0, *range(2, x.ndim))  # batch and length axes: one statistic per channel\n"
BN_CHANNELS_LAST = (
    "    given = x\n"
    "    x = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])  # channels last, (N * L, C)\n"
    "    axes = (0,)\n"
)
BN_RETURN = "    return gamma.reshape(shape) * x_hat + beta.reshape(shape), new_mean, new_var"
BN_BACKWARD_AXES = "    axes = (0, *range(2, x.ndim))\n    shape = (1, -1) + (1,) * (x.ndim - 2)\n"
BN_BACKWARD_CHANNELS_LAST = (
    "    given = x\n"
    "    x = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])  # channels last, (N * L, C)\n"
    "    dy = np.moveaxis(dy, 1, -1).reshape(x.shape)\n"
    "    axes, shape = (0,), (1, -1)\n"
)
BN_BACKWARD_RETURN = "    return inv_std * (dx_hat - mean_term - var_term), dgamma, dbeta"
BN_MODULE_AXES = "        axes = [0, *range(2, x.dim())]  # batch and length axes\n"


def bn_module_channels_last(flatten: str) -> str:
    """The module's first lines computing channels last, (N * L, C), flattened by ``flatten``."""
    return (
        "        given = x.shape\n"
        "        if x.dim() == 3:  # channels last, (N * L, C)\n"
        f"            x = x.transpose(1, 2).{flatten}(-1, x.shape[1])\n"
        "        axes = [0]\n"
    )


NORMS_MUTANTS = [
    layernorm(
        "layer_norm calls torch's layer_norm",
        "layer_norm",
        (
            (
                "return (gamma * x_hat + beta).astype(x.dtype, copy=False)",
                "t = torch.from_numpy\n    return torch.nn.functional.layer_norm("
                "t(x), x.shape[-1:], t(gamma), t(beta), eps).numpy()",
            ),
        ),
        "test_layer_norm",
        CALLS_NORM,
    ),
    layernorm(
        "backward with the unbiased variance",
        "layer_norm_backward",
        (
            (
                "inv_std = 1.0 / np.sqrt((centered**2).mean(axis=-1, keepdims=True) + eps)",
                "inv_std = 1.0 / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + eps)",
            ),
        ),
        "test_layer_norm_backward",
        "recomputes the variance unbiased",
    ),
    layernorm(
        "LayerNorm computes bfloat16 in bfloat16",
        "layer_norm_module",
        (
            (
                "half = x.dtype in (torch.float16, torch.bfloat16)",
                "half = x.dtype == torch.float16",
            ),
        ),
        "test_layer_norm_module",
        IN_BFLOAT16,
    ),
    layernorm(
        "LayerNorm casts back before the affine step",
        "layer_norm_module",
        (
            (
                "y = centered / torch.sqrt(var + self.eps)",
                "y = (centered / torch.sqrt(var + self.eps)).to(x.dtype)",
            ),
            ("return y.to(x.dtype)", "return y"),
        ),
        "test_layer_norm_module",
        PROMOTES,
    ),
    layernorm(
        "LayerNorm takes eps=0 for the default",
        "layer_norm_module",
        (("var + self.eps", "var + (self.eps or 1e-5)"),),
        "test_layer_norm_module",
        "With eps=0 you used the default eps",
    ),
    Mutant(
        "LayerNorm views a non-contiguous input",
        "layer_norm_module",
        ((LN_FLAT, LN_VIEW),),
        frozenset({"test_layer_norm_module"}),
        VIEW_REFUSED,
        "layernorm",
        written.LAYER_NORM_NO_ATTRIBUTES,
    ),
    rmsnorm(
        "rms_norm calls torch's rms_norm",
        "rms_norm",
        (
            (
                "return (x_hat * weight).astype(x.dtype, copy=False)",
                "t = torch.from_numpy\n    return torch.rms_norm("
                "t(x), x.shape[-1:], t(weight), eps).numpy()",
            ),
        ),
        "test_rms_norm",
        CALLS_NORM,
    ),
    rmsnorm(
        "RMSNorm backward sums where the mean belongs",
        "rms_norm_backward",
        (
            (
                "(dx_hat * x_hat).mean(axis=-1, keepdims=True)",
                "(dx_hat * x_hat).sum(axis=-1, keepdims=True)",
            ),
        ),
        "test_rms_norm_backward",
        "uses a *sum* over the features",
    ),
    rmsnorm(
        "RMSNorm backward with LayerNorm's formula",
        "rms_norm_backward",
        (
            (
                "(dx_hat - through_rms) / rms",
                "(dx_hat - dx_hat.mean(axis=-1, keepdims=True) - through_rms) / rms",
            ),
        ),
        "test_rms_norm_backward",
        "LayerNorm's term through the mean",
    ),
    rmsnorm(
        "RMSNorm backward without eps",
        "rms_norm_backward",
        (
            (
                "rms = np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)",
                "rms = np.sqrt((x * x).mean(axis=-1, keepdims=True))",
            ),
        ),
        "test_rms_norm_backward",
        "leaves eps out of the RMS",
    ),
    rmsnorm(
        "RMSNorm computes bfloat16 in bfloat16, with float32's eps",
        "rms_norm_module",
        (
            (
                "x32 = x.float() if half else x",
                "x32 = x.float() if x.dtype == torch.float16 else x",
            ),
            (
                RMS_EPS,
                RMS_EPS.replace("finfo(x32.dtype)", "finfo(torch.float32 if half else x.dtype)"),
            ),
        ),
        "test_rms_norm_module",
        IN_BFLOAT16,
    ),
    rmsnorm(
        "RMSNorm takes eps=0 for eps=None",
        "rms_norm_module",
        ((RMS_EPS, "eps = self.eps or torch.finfo(x32.dtype).eps"),),
        "test_rms_norm_module",
        "With eps=0 you used the eps of eps=None",
    ),
    Mutant(
        "RMSNorm views a non-contiguous input",
        "rms_norm_module",
        ((LN_FLAT, LN_VIEW),),
        frozenset({"test_rms_norm_module"}),
        VIEW_REFUSED,
        "rmsnorm",
        written.RMS_NORM_NO_ATTRIBUTES,
    ),
    batchnorm(
        "batch_norm calls torch's batch_norm",
        "batch_norm",
        (
            (
                "return gamma.reshape(shape) * x_hat + beta.reshape(shape), new_mean, new_var",
                "t = torch.from_numpy\n    y = torch.nn.functional.batch_norm("
                "t(x), t(mean), t(var), t(gamma), t(beta), eps=eps).numpy()\n"
                "    return y, new_mean, new_var",
            ),
        ),
        "test_batch_norm",
        CALLS_NORM,
    ),
    batchnorm(
        "BatchNorm backward with LayerNorm's axes",
        "batch_norm_backward",
        (("    axes = (0, *range(2, x.ndim))\n", "    axes = (-1,)\n"),),
        "test_batch_norm_backward",
        "LayerNorm's axes",
    ),
    batchnorm(
        "BatchNorm1d computes bfloat16 in bfloat16",
        "batch_norm_module",
        (("if dtype in (torch.float16, torch.bfloat16):", "if dtype == torch.float16:"),),
        "test_batch_norm_module",
        IN_BFLOAT16,
    ),
    batchnorm(
        "BatchNorm1d promotes float16 to float32",
        "batch_norm_module",
        (("return y.to(dtype)", "return y"),),
        "test_batch_norm_module",
        PROMOTES,
    ),
    batchnorm(
        "BatchNorm1d takes eps=0 for the default",
        "batch_norm_module",
        (("num_features, eps, momentum\n", "num_features, eps or 1e-5, momentum\n"),),
        "test_batch_norm_module",
        "With eps=0 you used the default eps",
    ),
    batchnorm(
        "batch_norm broadcasts the statistics along the batch axis",
        "batch_norm",
        (
            (
                "x_hat = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)",
                "x_hat = (x - mean[:, None]) / np.sqrt(var[:, None] + eps)",
            ),
        ),
        "test_batch_norm",
        MISBROADCAST,
    ),
    batchnorm(
        "batch_norm reshapes a channels-last y to x's shape",
        "batch_norm",
        (
            (BN_AXES, BN_CHANNELS_LAST),
            (
                BN_RETURN,
                "    y = gamma.reshape(shape) * x_hat + beta.reshape(shape)  # (N * L, C)\n"
                "    return np.moveaxis(y.reshape(given.shape), -1, 1), new_mean, new_var",
            ),
        ),
        "test_batch_norm",
        SCRAMBLED,
    ),
    batchnorm(
        "BatchNorm backward broadcasts gamma along the batch axis",
        "batch_norm_backward",
        (("dx_hat = dy * gamma.reshape(shape)", "dx_hat = dy * gamma[:, None]"),),
        "test_batch_norm_backward",
        MISBROADCAST,
    ),
    batchnorm(
        "BatchNorm backward reshapes a channels-last dx to x's shape",
        "batch_norm_backward",
        (
            (BN_BACKWARD_AXES, BN_BACKWARD_CHANNELS_LAST),
            (
                BN_BACKWARD_RETURN,
                "    dx = inv_std * (dx_hat - mean_term - var_term)  # (N * L, C)\n"
                "    return np.moveaxis(dx.reshape(given.shape), -1, 1), dgamma, dbeta",
            ),
        ),
        "test_batch_norm_backward",
        SCRAMBLED,
    ),
    batchnorm(
        "BatchNorm1d broadcasts the statistics along the batch axis",
        "batch_norm_module",
        (
            (
                "y = (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + self.eps)",
                "y = (x - mean[:, None]) / torch.sqrt(var[:, None] + self.eps)",
            ),
        ),
        "test_batch_norm_module",
        MISBROADCAST,
    ),
    batchnorm(
        "BatchNorm1d reshapes a channels-last y to x's shape",
        "batch_norm_module",
        (
            (BN_MODULE_AXES, bn_module_channels_last("reshape")),
            (
                "        return y.to(dtype)",
                "        y = y.reshape(given).transpose(1, 2) if len(given) == 3 else y\n"
                "        return y.to(dtype)",
            ),
        ),
        "test_batch_norm_module",
        SCRAMBLED,
    ),
    batchnorm(
        "BatchNorm1d views a transposed input",
        "batch_norm_module",
        (
            (BN_MODULE_AXES, bn_module_channels_last("view")),
            (
                "        return y.to(dtype)",
                "        if len(given) == 3:\n"
                "            y = y.reshape(given[0], given[2], given[1]).transpose(1, 2)\n"
                "        return y.to(dtype)",
            ),
        ),
        "test_batch_norm_module",
        VIEW_REFUSED,
    ),
]
MUTANTS += NORMS_MUTANTS
# (end of the norms block) ---------------------------------------------------------------------


def mutate(nb, mutant):
    """A copy of nb with the mutant's edits applied to its answer cell (to ``mutant.base``, when
    it has one, in place of the cell's own source)."""
    nb = nbformat.from_dict(nb)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == mutant.cell]
    if mutant.base is not None:
        cell.source = mutant.base
    for old, new in mutant.edits:
        assert old in cell.source, f"mutant {mutant.name!r} no longer applies: {old!r} not found"
        cell.source = cell.source.replace(old, new)
    return nb


def test_mutant_names_are_unique():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


def mutated(mutant):
    solution = nbformat.read(SOLUTIONS / f"{mutant.assignment}.ipynb", as_version=4)
    return mutate(solution, mutant)


def assert_caught(mutant, result):
    """The mutant lost exactly the points of ``mutant.fails``, with a message that names it."""
    assert result.status == "ok", result.reason
    failed = {cell.grade_id for cell in result.cells if cell.status != "passed"}
    assert result.total < result.max_total, f"{mutant.name} kept every point"
    assert failed == mutant.fails, f"{mutant.name}: expected {sorted(mutant.fails)} to fail"
    messages = "\n".join(cell.message for cell in result.cells)
    assert mutant.phrase in messages, messages
    assert not ATTRIBUTE_MESSAGE.search(messages), messages


# What the module checks said about attributes the task never asks for (never again)
ATTRIBUTE_MESSAGE = re.compile(r"\.(normalized_shape|eps|elementwise_affine) should be")


# Right for every input the spec allows, and nothing more: x is (N, C) or (N, C, L).
SPEC_ONLY = [
    ("batch_norm", "axes = (0, *range(2, x.ndim))  #", "axes = (0,) if x.ndim == 2 else (0, 2)  #"),
    ("batch_norm_backward", "axes = (0, *range(2, x.ndim))\n", "axes = (0, 2)[: x.ndim - 1]\n"),
]


def test_a_batchnorm_written_to_the_spec_gets_every_point():
    """The notebook says x is (N, C) or (N, C, L): no graded input is anything else."""
    nb = nbformat.read(SOLUTIONS / "batchnorm.ipynb", as_version=4)
    for grade_id, old, new in SPEC_ONLY:
        (cell,) = [
            c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
        ]
        assert old in cell.source
        cell.source = cell.source.replace(old, new)
    result = grade_in_process(nb, "batchnorm")
    assert result.total == result.max_total, [(c.grade_id, c.message) for c in result.cells]


@pytest.mark.parametrize(
    "module", written.TASK_TEXT_MODULES, ids=lambda m: m.name.replace(" ", "-")
)
def test_a_module_written_from_the_task_text_alone_gets_every_point(module):
    """The module checks read what the task asks for, and nothing else: how a module stores its
    constructor's arguments (an int normalized_shape, eps as variance_epsilon, no attribute at
    all) is the learner's choice."""
    nb = nbformat.read(SOLUTIONS / f"{module.assignment}.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == module.cell]
    cell.source = module.source
    result = grade_in_process(nb, module.assignment)
    assert result.total == result.max_total, [(c.grade_id, c.message) for c in result.cells]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name.replace(" ", "-"))
def test_mutant_loses_points_with_a_specific_message(mutant):
    assert_caught(mutant, grade_in_process(mutated(mutant), mutant.assignment))


def test_in_process_cells_share_a_namespace_and_fail_one_at_a_time():
    """As under nbval --nbval-lax: an exception fails its cell only, and later cells run."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("text"),
            nbformat.v4.new_code_cell("x = 2"),
            nbformat.v4.new_code_cell("assert x == 3, 'x is not 3'"),
            nbformat.v4.new_code_cell("y = x + 1\nprint(y)"),
            nbformat.v4.new_code_cell("y.missing"),
        ]
    )
    records = run_cells(nb)
    assert [(r.code_index, r.status) for r in records] == [
        (0, "passed"),
        (1, "failed"),
        (2, "passed"),
        (3, "failed"),
    ]
    assert "AssertionError: x is not 3" in records[1].report
    assert "AttributeError" in records[3].report


ASSIGNMENTS = sorted(path.stem for path in SOLUTIONS.glob("*.ipynb"))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_in_process_grading_gives_the_solution_every_point_and_the_stubs_none(assignment):
    """The in-process executor is not lenient: it tells a right notebook from an empty one."""
    solution = nbformat.read(SOLUTIONS / f"{assignment}.ipynb", as_version=4)
    stubs = nbformat.read(ROOT / "exercises" / f"{assignment}.ipynb", as_version=4)
    right, empty = grade_in_process(solution, assignment), grade_in_process(stubs, assignment)
    assert right.total == right.max_total > 0, [c.message for c in right.cells]
    assert empty.total == 0 and all(c.status == "failed" for c in empty.cells)


THROUGH_THE_GRADER = list({m.assignment: m for m in reversed(MUTANTS)}.values())  # first of each


@pytest.fixture(scope="module")
def graded_by_the_grader(tmp_path_factory):
    """One batch run of the grader over THROUGH_THE_GRADER: mutant name -> its Grade."""
    folder = tmp_path_factory.mktemp("mutants")
    for n, mutant in enumerate(THROUGH_THE_GRADER):
        nbformat.write(mutated(mutant), folder / f"mutant{n}-{mutant.assignment}.ipynb")
    out = tmp_path_factory.mktemp("graded-mutants")
    options = ["--out", out, "--jobs", 2, *GRADE_ANYWHERE]
    completed = run_python("-m", "addnorm_lib.grading", folder, *options)
    assert completed.returncode == 0, completed.stderr[-3000:]
    grades = json.loads((out / "grades.json").read_text())["grades"]
    by_file = {g["submission"]: Grade.from_dict(g) for g in grades}
    return {
        m.name: by_file[f"mutant{n}-{m.assignment}.ipynb"] for n, m in enumerate(THROUGH_THE_GRADER)
    }


@pytest.mark.parametrize("mutant", THROUGH_THE_GRADER, ids=lambda m: m.assignment)
def test_the_grader_catches_the_mutant_as_the_in_process_run_does(mutant, graded_by_the_grader):
    through_the_grader = graded_by_the_grader[mutant.name]
    assert_caught(mutant, through_the_grader)
    in_process = grade_in_process(mutated(mutant), mutant.assignment)

    def outcome(result):
        return [(c.grade_id, c.points, c.status) for c in result.cells]

    assert outcome(through_the_grader) == outcome(in_process)


def test_one_mutant_of_every_assignment_goes_through_the_grader():
    assert sorted(m.assignment for m in THROUGH_THE_GRADER) == ASSIGNMENTS
