"""Measurements at initialization of the residual chapter: cosines, collapse, Jacobians, stats."""

import numpy as np
import pytest
import torch

from addnorm_lib.experiments import residuals_init as ri
from addnorm_lib.experiments.residual_scaling import seeded_mlp


def test_pairwise_cosines_of_known_rows():
    same = torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]])
    assert ri.pairwise_cosines(same) == pytest.approx(1.0)
    orthogonal = torch.eye(4)
    assert ri.pairwise_cosines(orthogonal) == pytest.approx(0.0)
    opposite = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert ri.pairwise_cosines(opposite) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="two rows"):
        ri.pairwise_cosines(torch.ones(1, 3))


def test_deep_plain_relu_collapses_and_residual_does_not():
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    plain = ri.collapse_by_layer(seeded_mlp(0, 8, 32, 60), x)
    residual = ri.collapse_by_layer(seeded_mlp(0, 8, 32, 60, residual=True), x)
    assert plain.shape == residual.shape == (61,)
    assert abs(plain[0]) < 0.1 and plain[-1] > 0.99
    assert residual[-1] < 0.8


def test_measure_shapes_and_first_to_last():
    stats = ri.measure("relu", "he", 5, seeds=[0, 1], width=8, in_features=4, batch=16)
    assert stats["grad"].shape == stats["std"].shape == (6, 2)
    np.testing.assert_allclose(ri.first_to_last(stats), stats["grad"][0] / stats["grad"][-1])
    again = ri.measure("relu", "he", 5, seeds=[0, 1], width=8, in_features=4, batch=16)
    np.testing.assert_array_equal(stats["grad"], again["grad"])


def test_stack_jacobian_svals_plain_crushes_residual_keeps():
    plain = ri.stack_jacobian_svals(False, 0, depth=20, width=8)
    residual = ri.stack_jacobian_svals(True, 0, depth=20, width=8)
    assert plain.shape == residual.shape == (8,)
    assert np.all(np.diff(plain) <= 0)  # largest first
    assert plain.max() < 1e-6 and residual.min() > 0.3
