"""The finder of docstrings broken by a line-by-line reflow: it flags the breaks seen in the
exercises (issue 26) and leaves well-wrapped docstrings alone."""

import textwrap

import pytest

from addnorm_lib.authoring import docstrings


def broken(docstring_body: str) -> list[str]:
    """The flagged lines of a function whose docstring is ``docstring_body``."""
    source = 'def f(x):\n    """' + textwrap.dedent(docstring_body).strip("\n") + '\n    """\n'
    return [found.text for found in docstrings.broken_lines(source)]


# What the reflow left in the solutions, each as it was
@pytest.mark.parametrize(
    "body, flagged",
    [
        (
            """Gradients of layer_norm(x, gamma, beta, eps) with respect to x,
    gamma
    and beta.""",
            ["gamma"],
        ),
        (
            """Post-LN: add each sublayer's output to the stream, then normalize
    the
    sum.""",
            ["the"],
        ),
        (
            """BatchNorm.

    Args:
        running_mean, running_var: running estimates, shape (C,); not
        modified.
        training: normalize with batch statistics and update the estimates
        (True), or
            normalize with the running estimates (False).""",
            ["modified.", "(True), or"],
        ),
        (
            """DeepNorm's constants.

    Args:
        num_encoder_layers: N; num_decoder_layers: M (as in
        torch.nn.Transformer).""",
            ["torch.nn.Transformer)."],
        ),
    ],
)
def test_the_breaks_of_the_reflow_are_found(body, flagged):
    assert broken(body) == flagged


@pytest.mark.parametrize(
    "body",
    [
        """LayerNorm over the last axis.

    Args:
        x: array of shape (..., C), float32 or float64.
        gamma, beta: scale and shift, shape (C,).
        training: True to normalize with the batch statistics and update
            the estimates; False to use the running estimates.
        *args, **kwargs: passed on.

    Returns:
        (y, new_mean, new_var): y shaped like x; the
        estimates of shape (C,).
    """,
        """Post-LN: add each sublayer's output to the stream, then
    normalize the sum.""",
        """One line.

    Example:
        y = layer_norm(x)
        y
    """,
        """Ends a sentence.
    Then another.""",
    ],
)
def test_well_wrapped_docstrings_are_left_alone(body):
    assert broken(body) == []


def test_line_numbers_are_the_cells():
    source = (
        'x = 1\n\n\ndef f():\n    """Gradients with respect to x,\n    gamma\n    and beta."""\n'
    )
    (found,) = docstrings.broken_lines(source)
    assert (found.line, found.text) == (6, "gamma")
    assert source.split("\n")[found.line - 1].strip() == "gamma"


def test_code_that_does_not_parse_has_no_docstrings():
    assert docstrings.broken_lines("def f(:\n") == []
