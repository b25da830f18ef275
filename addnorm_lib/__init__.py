"""Support library of the addnorm course.

- :mod:`addnorm_lib.reference`: the ground truth (numpy norms and their backward passes, torch
  twins of ``torch.nn``'s norms, residual blocks, DeepNorm, placements) and the catalogue of known
  mistakes. Graded kernels cannot import it.
- :mod:`addnorm_lib.checks`: the self-checks that exercises and graded tests call.
- :mod:`addnorm_lib.transformer`: sublayers, other block architectures and the model zoo.
- :mod:`addnorm_lib.experiments`: the chapters' experiments and figures.
- :mod:`addnorm_lib.authoring`: tools for writing the book (``release`` generates ``exercises/``
  from ``solutions/``).
- :mod:`addnorm_lib.grading`: grades notebooks (one, or a folder of them) with nbval,
  tamper-proof.

:func:`lookup` is how the library outside ``reference`` chooses behaviour by name.
"""

from collections.abc import Mapping
from typing import TypeVar

__version__ = "0.1.0"

_Value = TypeVar("_Value")


def lookup(table: Mapping[str, _Value], name: str, what: str) -> _Value:
    """``table[name]``; a ValueError naming ``what`` and the known names for any other name.

    A choice made from a string (an activation, a placement, a layout) must fail loudly on a
    misspelled name, not fall through to another branch.
    """
    if name not in table:
        raise ValueError(f"{what} must be one of {sorted(table)}, got {name!r}")
    return table[name]
