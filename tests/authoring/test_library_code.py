"""The library-code directive shows a library object's docstring as text and its code fitted."""

import textwrap

import pytest

from addnorm_lib.authoring.cells import WIDTH, ruff_format
from addnorm_lib.authoring.library_code import docstring_nodes, object_source

MODULE = textwrap.dedent(
    '''
    import numpy as np


    def helper(x):
        """A helper."""
        return x


    class Norm:
        """A class."""

        @staticmethod
        def forward(x, weight, eps=1e-5, some_long_keyword_argument=None, another_one=None):
            """Normalize ``x`` (see :func:`helper`).

            Args:
                x: input of shape ``(..., C)``.
            """
            return helper(x) * weight  # scaled
    '''
)


def test_the_object_comes_without_its_docstring_dedented_with_its_decorators():
    code, docstring = object_source(MODULE, "Norm.forward")
    assert code.startswith("@staticmethod\ndef forward(")
    assert '"""' not in code and "return helper(x) * weight  # scaled" in code
    assert docstring.startswith("Normalize ``x``")
    assert object_source(MODULE, "helper") == ("def helper(x):\n    return x", "A helper.")


def test_an_unknown_object_is_named_in_the_error():
    with pytest.raises(ValueError, match="no 'backward'"):
        object_source(MODULE, "Norm.backward")


def test_the_code_is_fitted_to_the_column():
    code, _ = object_source(MODULE, "Norm.forward")
    assert max(map(len, code.split("\n"))) > WIDTH
    fitted = ruff_format(code, WIDTH)
    assert max(map(len, fitted.split("\n"))) <= WIDTH
    assert "some_long_keyword_argument=None" in fitted


def text_of(found) -> str:
    return "\n".join(node.astext() for node in found)


def test_markup_becomes_code_and_emphasis_not_raw_text():
    found = docstring_nodes(
        "Backward of ``layer_norm``; *recomputed* from `x`, like :func:`~pkg.norms.layer_norm`."
    )
    text = text_of(found)
    assert text == "Backward of layer_norm; recomputed from x, like pkg.norms.layer_norm."
    kinds = [type(node).__name__ for node in found[0].children]
    assert kinds.count("literal") == 3 and kinds.count("emphasis") == 1
    for raw in ("``", ":func:", "*", "`"):
        assert raw not in text


def test_sections_become_titled_lists_with_continued_entries():
    found = docstring_nodes(
        """Summary line.

        Args:
            dy: upstream gradient, shape ``(..., C)``,
                the same as x's.
            eps (float): the forward eps.

        Returns:
            The gradients.
        """
    )
    assert [type(n).__name__ for n in found] == [
        "paragraph",
        "paragraph",
        "bullet_list",
        "paragraph",
        "paragraph",
    ]
    assert found[1].astext() == "Args" and found[3].astext() == "Returns"
    entries = [item.astext() for item in found[2].children]
    assert entries == [
        "dy: upstream gradient, shape (..., C), the same as x's.",
        "eps (float): the forward eps.",
    ]
    assert found[2].children[0].children[0].children[0].tagname == "literal"  # the name as code


def test_a_returns_description_runs_on_however_its_lines_break():
    """A Returns section is one description: a line that ends in a colon, or one that starts
    with a word and a colon, does not start a new item mid-sentence."""
    found = docstring_nodes(
        """Summary line.

        Returns:
            ``y`` of shape ``(..., C)`` and dtype ``x.dtype``:
            ``(x - mean) / sqrt(var + eps)``, with mean: the average.

            A second paragraph.
        """
    )
    assert [type(n).__name__ for n in found] == ["paragraph"] * 4
    assert found[1].astext() == "Returns"
    assert found[2].astext() == (
        "y of shape (..., C) and dtype x.dtype: (x - mean) / sqrt(var + eps),"
        " with mean: the average."
    )
    assert found[3].astext() == "A second paragraph."
