"""Mutation tests: the graded cells must reject the usual wrong implementations.

Each mutant is the solution notebook with one answer cell edited the way a learner might get it
wrong. It must lose the points of exactly the test cells it should, with a failure message that
names the mistake. Every mutant is graded in this process (tests/inprocess.py: the grader's own
assembling and judging, with the cells executed here); the first mutant of each assignment is
also graded by the grader itself (nbval in a jailed kernel, judged outside it), in one batch, and
must get the same points, cell by cell.
"""

import json
from dataclasses import dataclass

import nbformat
import pytest

from addnorm_lib.grading.judge import Grade
from tests.conftest import GRADE_ANYWHERE, ROOT, run_python
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


def mutate(nb, mutant):
    """A copy of nb with the mutant's edits applied to its answer cell."""
    nb = nbformat.from_dict(nb)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == mutant.cell]
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
    assert [(r["code_index"], r["status"]) for r in records] == [
        (0, "passed"),
        (1, "failed"),
        (2, "passed"),
        (3, "failed"),
    ]
    assert "AssertionError: x is not 3" in records[1]["report"]
    assert "AttributeError" in records[3]["report"]


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
