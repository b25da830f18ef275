"""Numbers computed in a chapter, glued into its prose with MyST-NB's ``{glue}`` role."""

import numpy as np


def plain_number(value) -> int | float:
    """``value`` as a plain Python int or float: numpy scalars and 0-d arrays do not format in a
    ``{glue}`` role's format spec (``{glue:}`name:.2f```), Python numbers do.

    Args:
        value: a Python or numpy integer, float or bool, or a 0-d array of one.

    Returns:
        an int for integer (and bool) inputs, a float for everything else.
    """
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ValueError(
                f"only a single number can be glued, got an array of shape {value.shape}"
            )
        value = value.item()
    return int(value) if isinstance(value, int | np.integer | np.bool_) else float(value)


def glue_number(name: str, value) -> None:
    """Glue ``value`` under ``name`` for the prose, without displaying it where it is computed."""
    from myst_nb import glue  # imported here: only a chapter's kernel needs MyST-NB

    glue(name, plain_number(value), display=False)
