"""page_size counts what a reader reads: prose words and shown code lines."""

import pytest

from addnorm_lib.authoring import page_size

PAGE = """---
jupytext:
  text_representation:
    format_name: myst
---

(label-here)=
# A title of four words

Some prose with `inline code` and $x^2$ math {cite:p}`ioffe2015batchnorm`, and a
{term}`glossary term` and a {doc}`link text <other>`.

$$
y = \\frac{x - \\mu}{\\sigma} \\quad \\text{many words in display math}
$$

```{math}
:label: eq-one
z = 1 \\text{ more hidden words}
```

:::{note}
:class: dropdown
Two words.
:::

<!-- a comment the reader never sees -->

```{code-cell} ipython3
a = 1

b = 2
```

```{code-cell} ipython3
:tags: [hide-input]
c = 3
```

```{code-cell} ipython3
:tags: [remove-cell]
hidden = 4
secret = 5
```

```{code-cell} ipython3
---
tags: [remove-input]
---
also_hidden = 6
```

```text
a fenced block is not prose
```
"""


def test_prose_is_the_text_a_reader_reads():
    words = page_size.WORD.findall(page_size.prose(PAGE))
    expected = "A title of four words Some prose with inline code and x 2 math and a "
    expected += "glossary term and a link text Two words"
    assert words == expected.split(" ")
    assert page_size.prose_words(PAGE) == len(words)


def test_shown_code_lines_count_folded_cells_and_not_removed_ones_or_blank_lines():
    assert page_size.shown_code_lines(PAGE) == 3


@pytest.mark.parametrize(
    ("words", "lines", "within"),
    [(3000, 250, True), (3001, 10, False), (10, 251, False)],
)
def test_the_limits_are_inclusive(words, lines, within):
    assert page_size.PageSize("p", words, lines).within_limits is within


def test_the_script_prints_a_row_per_page_and_refuses_a_missing_page(tmp_path, capsys):
    page = tmp_path / "chapter.md"
    page.write_text(PAGE, encoding="utf-8")
    assert page_size.main([str(page)]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == ["chapter", str(page_size.prose_words(PAGE)), "3"]
    assert page_size.main([str(tmp_path / "missing.md")]) == 2
    assert "no such page" in capsys.readouterr().err
