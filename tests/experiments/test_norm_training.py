"""The exercises' last cell: training with a learner's norm next to torch's tells them apart."""

import pytest
import torch
from torch import nn

from addnorm_lib.experiments import norm_training
from addnorm_lib.reference import modules


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        (modules.LayerNorm, nn.LayerNorm),
        (modules.BatchNorm1d, nn.BatchNorm1d),
        (modules.RMSNorm, nn.RMSNorm),
    ],
    ids=["LayerNorm", "BatchNorm1d", "RMSNorm"],
)
def test_a_right_norm_trains_as_torchs_up_to_rounding(mine, theirs):
    said = norm_training.compare_training(mine, theirs)
    assert "the same run up to rounding" in said, said


class FrozenWeight(nn.LayerNorm):
    """Right forward, but its weight is a buffer, not a Parameter: the optimizer never trains it."""

    def __init__(self, features):
        super().__init__(features)
        del self.weight
        self.register_buffer("weight", torch.ones(features))


class NoBias(nn.LayerNorm):
    def forward(self, x):
        return nn.functional.layer_norm(x, self.normalized_shape, self.weight, None, self.eps)


@pytest.mark.parametrize("wrong", [FrozenWeight, NoBias], ids=lambda c: c.__name__)
def test_a_norm_that_trains_differently_is_told_apart(wrong):
    said = norm_training.compare_training(wrong, nn.LayerNorm)
    assert "the runs part ways" in said, said


def test_both_runs_start_from_the_same_weights():
    first = norm_training.small_model(nn.LayerNorm)
    again = norm_training.small_model(modules.LayerNorm)
    for a, b in zip(first.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
