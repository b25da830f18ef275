"""The sublayers reject wrong input shapes and unknown options with clear errors."""

import pytest
import torch

from addnorm_lib.transformer.sublayers import FeedForward, SelfAttention


def test_sublayers_reject_a_wrong_input_shape_clearly():
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, tokens, 8\)"):
        SelfAttention(8, 2)(torch.randn(3, 4))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        SelfAttention(8, 3)


def test_an_unknown_activation_is_refused_with_the_known_names():
    known = r"activation must be one of \['gelu', 'relu'\], got 'gleu'"
    with pytest.raises(ValueError, match=known):
        FeedForward(8, 16, activation="gleu")
