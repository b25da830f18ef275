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
    known = r"the backward dx mistake must be one of \[.*'layer'\], got 'lyer'"
    with pytest.raises(ValueError, match=known):
        mistakes._core._backward_dx("lyer")


def test_the_constants_builder_refuses_an_unknown_stack_as_the_reference_does():
    """An unknown stack used to fall through to the decoder's formula."""
    build = mistakes.deepnorm._constants_variant
    with pytest.raises(ValueError, match=r"stack must be one of \('encoder', 'decoder'\)"):
        build("encoder-decoder", 6, 6, "encodr", one_stack_formula=True)
    with pytest.raises(ValueError, match="architecture must be one of"):
        build("encoder-decodr", 6, 6, "encoder", swapped=True)


def test_the_eps_none_mistakes_are_rms_norm_with_another_eps():
    """Each names one wrong eps for eps=None: built with float64's eps, it is the reference."""
    rng = np.random.default_rng(4)
    x, weight = rng.normal(size=(2, 3, 8)) * 1e-5, rng.uniform(0.5, 2, 8)
    right = mistakes.rmsnorm._rms_with_eps(np.finfo(np.float64).eps)(x, weight)
    np.testing.assert_allclose(right, norms.rms_norm(x, weight, np.finfo(np.float64).eps))
    for mistake in mistakes.RMS_NORM_DEFAULT_EPS_MISTAKES:
        assert not np.allclose(mistake.compute(x, weight), right, rtol=1e-3), mistake.name


@pytest.mark.parametrize(
    ("norm", "shape"),
    [("layer", (4, 6)), ("layer", (2, 3, 5)), ("batch", (6, 4)), ("batch", (3, 4, 5))],
)
def test_the_backward_builder_without_a_mistake_is_the_reference(norm, shape):
    """Its dx and dgamma are the reference's: a mistake built from it differs only by its slip."""
    rng = np.random.default_rng(5)
    dy, x = rng.normal(size=shape), rng.normal(size=shape)
    gamma = rng.uniform(0.5, 2.0, shape[-1] if norm == "layer" else shape[1])
    reference = norms.layer_norm_backward if norm == "layer" else norms.batch_norm_backward
    expected = reference(dy, x, gamma, 1e-5)
    dx, dgamma, _ = mistakes._core._backward_dx(norm)(dy, x, gamma, 1e-5)
    np.testing.assert_allclose(dx, expected[0], atol=1e-12)
    np.testing.assert_allclose(dgamma, expected[1], atol=1e-12)


def test_the_rms_backward_builder_slips_are_not_the_reference():
    rng = np.random.default_rng(6)
    dy, x, weight = rng.normal(size=(3, 5)), rng.normal(size=(3, 5)), rng.uniform(1, 2, 5)
    expected = norms.rms_norm_backward(dy, x, weight, 0.1)
    for slip in ("use_eps", "sum_of_squares", "term_sum", "mean_term"):
        value = slip != "use_eps"  # use_eps=False leaves eps out; the others switch a slip on
        dx, _ = mistakes.rmsnorm._rms_backward(**{slip: value})(dy, x, weight, 0.1)
        assert not np.allclose(dx, expected[0], rtol=1e-3), slip
