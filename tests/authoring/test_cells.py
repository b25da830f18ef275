"""What readers see of a page's code cells: the rules, each shown to catch what it is for."""

import textwrap

import pytest

from addnorm_lib.authoring.cells import WIDTH, code_cells, format_page, problems, shown


def page(*cells: str) -> str:
    """A MyST page of the given cell texts (options included), with prose between them."""
    return "# A page\n\nSome prose.\n\n" + "\n\nMore prose.\n\n".join(
        textwrap.dedent(cell).strip("\n") for cell in cells
    )


def cell(source: str, *options: str) -> str:
    header = "\n".join(options)
    body = textwrap.dedent(source).strip("\n")
    return (
        f"```{{code-cell}} ipython3\n{header}\n\n{body}\n```"
        if options
        else (f"```{{code-cell}} ipython3\n{body}\n```")
    )


def test_cells_are_found_with_their_tags_and_source_lines():
    text = page(
        cell("x = 1"),
        cell("glue('x', x)", ":tags: [remove-cell]"),
        "```{code-cell} ipython3\n---\ntags: [hide-input]\nmystnb:\n  figure:\n"
        "    name: fig-a\n---\nplot()\n```",
    )
    found = code_cells(text)
    assert [c.source for c in found] == [["x = 1"], ["glue('x', x)"], ["plot()"]]
    assert [c.tags for c in found] == [set(), {"remove-cell"}, {"hide-input"}]
    assert found[2].options["mystnb"]["figure"]["name"] == "fig-a"
    lines = text.split("\n")
    assert all(lines[c.first : c.last] == c.source for c in found)
    assert [shown(c) for c in found] == [True, False, True]


@pytest.mark.parametrize(
    "line, what",
    [
        ("glue_number('ratio', r)", "a glue call"),
        ("_ = glue('ratio', r)", "a glue call"),
        ("assert r < 1, r", "an assert"),
        ("x = [1, 2]  # fmt" + ": skip", "a formatter pragma"),
        ("print(r); myst_nb.glue('r', r, display=False)", "a glue call"),
        ("if r:\n    assert r", "an assert"),
    ],
)
def test_bookkeeping_in_a_shown_cell_is_named_and_hidden_bookkeeping_is_not(line, what):
    for tags in ("", ":tags: [hide-input]"):  # folded code is still shown
        found = problems(page(cell(f"r = 0.5\n{line}", *([tags] if tags else []))))
        assert [w for _, w in found if what in w], (tags, found)
    for tags in (":tags: [remove-cell]", ":tags: [remove-input]"):
        assert problems(page(cell(f"r = 0.5\n{line}", tags))) == []


def test_bookkeeping_words_inside_strings_and_names_are_not_bookkeeping():
    source = '''
    def check(r):
        """Say whether r is small; no assert here."""
        return r < 1


    assertion_count = 0
    glue_like = "glue('x')"  # glue('x') in a comment is prose
    '''
    assert problems(page(cell(source))) == []


def test_a_line_longer_than_the_column_is_reported_with_its_line_number():
    long = "x = " + "1 + " * 30 + "1"
    text = page(cell(f"y = 2\n{long}"))
    found = problems(text)
    assert len(long) > WIDTH
    assert found == [
        (text.split("\n").index(long) + 1, f"{len(long)} characters (at most {WIDTH} fit)")
    ]
    assert problems(page(cell("x = " + "1" * (WIDTH - 4)))) == []


def test_rst_markup_in_a_docstring_is_reported_but_not_in_code():
    with_rst = 'def f(x):\n    """Like :func:`g`, with ``x`` doubled."""\n    return 2 * x'
    assert [w for _, w in problems(page(cell(with_rst))) if "reStructuredText" in w]
    plain = 'def f(x):\n    """Like g, with x doubled."""\n    return 2 * x'
    assert problems(page(cell(plain))) == []


def test_format_page_fits_shown_cells_and_leaves_hidden_ones_and_prose_alone():
    long_call = "result = some_function(first_argument, second_argument, third_argument, 4444444)"
    hidden = "hidden = some_function(first_argument, second_argument, third_argument, 44444444)"
    assert len(long_call) > WIDTH and len(hidden) > WIDTH
    text = page(cell(long_call), cell(hidden, ":tags: [remove-cell]"))
    new, skipped = format_page(text)
    assert skipped == []
    assert hidden in new and "Some prose." in new and "More prose." in new
    assert long_call not in new
    assert all(len(line) <= WIDTH for c in code_cells(new) if shown(c) for line in c.source)
    assert problems(new) == []


def test_a_cell_ruff_cannot_parse_is_left_as_it_was_and_named():
    magic = "%timeit sum(range(10))"
    text = page(cell(magic))
    new, skipped = format_page(text)
    assert new == text
    assert skipped == [text.split("\n").index(magic) + 1]
