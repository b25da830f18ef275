"""The catalogue of known mistakes: its builders without a mistake are the reference, and a
misspelled name is an error, never another variant."""

import numpy as np
import pytest

from addnorm_lib.reference import mistakes, norms


def test_the_batch_norm_builder_without_a_mistake_is_the_reference():
    """The catalogue's variants differ from the reference only where they say they do."""
    rng = np.random.default_rng(1)
    args = (
        rng.normal(size=(5, 3, 4)),
        rng.uniform(0.5, 2, 3),
        rng.normal(size=3),
        rng.normal(size=3),
        rng.uniform(0.5, 2, 3),
    )
    for training in (True, False):
        expected = norms.batch_norm(*args, training, momentum=0.2)
        built = mistakes.batchnorm._batch_norm_variant()(*args, training, 0.2)
        for mine, reference in zip(built, expected, strict=True):
            np.testing.assert_allclose(mine, reference, rtol=1e-12)


def test_the_rms_backward_builder_without_a_mistake_is_the_reference():
    rng = np.random.default_rng(3)
    dy, x, weight = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5)), rng.uniform(1, 2, 5)
    built = mistakes.rmsnorm._rms_backward()(dy, x, weight, 0.1)
    for mine, reference in zip(built, norms.rms_norm_backward(dy, x, weight, 0.1), strict=True):
        np.testing.assert_allclose(mine, reference, rtol=1e-12)


def test_eps_outside_the_root_is_the_papers_placement():
    """The mistake the check names is exactly the library's official-code variant."""
    (mistake,) = [m for m in mistakes.RMS_NORM_MISTAKES if m.name == "eps_outside_root"]
    assert mistake.compute is norms.rms_norm_eps_outside


@pytest.mark.parametrize(
    "variant",
    [
        mistakes.placement._block_variant,
        mistakes.placement._stack_variant,
        mistakes.placement._schedule_variant,
        mistakes.placement._rsqrt_variant,
        mistakes.deepnorm._residual_variant,
    ],
)
def test_a_misspelled_mistake_name_is_an_error_not_another_variant(variant):
    with pytest.raises(ValueError, match=r"the .* mistake must be one of \[.*\], got 'pre_lnn'"):
        variant("pre_lnn")


def test_an_unknown_norm_of_the_backward_builder_is_an_error():
    known = r"the backward dx mistake must be one of \['batch', 'layer'\], got 'lyer'"
    with pytest.raises(ValueError, match=known):
        mistakes._core._backward_dx("lyer")


def test_the_constants_builder_refuses_an_unknown_stack_as_the_reference_does():
    """An unknown stack used to fall through to the decoder's formula."""
    build = mistakes.deepnorm._constants_variant
    with pytest.raises(ValueError, match=r"stack must be one of \('encoder', 'decoder'\)"):
        build("encoder-decoder", 6, 6, "encodr", one_stack_formula=True)
    with pytest.raises(ValueError, match="architecture must be one of"):
        build("encoder-decodr", 6, 6, "encoder", swapped=True)
