"""The chapters' glue helper hands the prose plain Python numbers, which format specs accept."""

import myst_nb
import numpy as np
import pytest

from addnorm_lib.authoring.glue import glue_number, plain_number


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.int64(7), 7),
        (np.float32(0.25), 0.25),
        (np.array(3.5), 3.5),
        (np.array(4), 4),
        (np.bool_(True), 1),
        (2, 2),
        (1.5, 1.5),
    ],
)
def test_numbers_become_plain_python_numbers(value, expected):
    found = plain_number(value)
    assert found == expected and type(found) is type(expected)
    assert f"{found:.2f}" == f"{expected:.2f}"  # what a {glue:} role's format spec does


def test_an_array_of_several_numbers_is_refused():
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        plain_number(np.array([1.0, 2.0]))


def test_glue_number_glues_the_plain_number_without_displaying_it(monkeypatch):
    calls = []
    monkeypatch.setattr(myst_nb, "glue", lambda *args, **kwargs: calls.append((args, kwargs)))
    glue_number("ratio", np.float64(1.25))
    assert calls == [(("ratio", 1.25), {"display": False})]
    assert type(calls[0][0][1]) is float
