"""The BatchNorm chapter's numpy tools compute what torch computes: each norm over its axes, and
training-mode BatchNorm's input gradient in closed form."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from addnorm_lib.experiments.batchnorm_extras import (
    autograd_input_grad,
    batch_norm_dx,
    group_norm,
    instance_norm,
    mode_gap,
    output_noise,
    pad_sequences,
    stale_run,
    standardize_over,
    track_against_torch,
)
from addnorm_lib.reference import norms

N, C, L = 4, 6, 5


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def x():
    return np.random.default_rng(0).normal(2.0, 3.0, size=(N, C, L))  # (N, C, L) float64


def torch_out(module: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def test_standardize_over_matches_each_torch_norm(x):
    cases = {
        (0, 2): nn.BatchNorm1d(C, affine=False, dtype=torch.float64),  # training mode
        (1, 2): nn.LayerNorm((C, L), elementwise_affine=False, dtype=torch.float64),
        (2,): nn.InstanceNorm1d(C, dtype=torch.float64),
    }
    for axes, module in cases.items():
        np.testing.assert_allclose(standardize_over(x, axes), torch_out(module, x), atol=1e-12)
    per_position = F.layer_norm(torch.from_numpy(x).transpose(1, 2), (C,)).transpose(1, 2)
    np.testing.assert_allclose(standardize_over(x, (1,)), per_position.numpy(), atol=1e-12)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_group_norm_matches_torch(x, groups):
    expected = torch_out(nn.GroupNorm(groups, C, dtype=torch.float64), x)
    np.testing.assert_allclose(group_norm(x, groups), expected, atol=1e-12)


def test_group_norm_extremes_are_layer_norm_and_instance_norm(x):
    np.testing.assert_allclose(group_norm(x, 1), standardize_over(x, (1, 2)), atol=1e-12)
    np.testing.assert_allclose(group_norm(x, C), instance_norm(x), atol=1e-12)
    assert np.abs(group_norm(x, 2) - group_norm(x, 1)).max() > 0.01  # the groups matter


def test_group_norm_and_instance_norm_reject_bad_shapes(x):
    with pytest.raises(ValueError, match="do not divide"):
        group_norm(x, 4)
    with pytest.raises(ValueError, match="spatial"):
        instance_norm(x[:, :, 0])


def test_float32_stays_float32(x):
    x32 = x.astype(np.float32)
    assert group_norm(x32, 2).dtype == np.float32 and instance_norm(x32).dtype == np.float32
    dy = np.ones_like(x32)
    assert batch_norm_dx(dy, x32, np.ones(C, dtype=np.float32)).dtype == np.float32


@pytest.mark.parametrize("shape", [(8, C), (N, C, L)])
def test_batch_norm_dx_is_autograd_and_the_library_backward(shape):
    rng = np.random.default_rng(1)
    x, dy = rng.normal(1.0, 2.0, size=shape), rng.normal(size=shape)
    gamma, beta = 1 + 0.5 * rng.normal(size=C), 0.5 * rng.normal(size=C)
    xt = torch.tensor(x, requires_grad=True)
    y = F.batch_norm(xt, None, None, torch.from_numpy(gamma), torch.from_numpy(beta), True)
    y.backward(torch.from_numpy(dy))
    dx = batch_norm_dx(dy, x, gamma)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, norms.batch_norm_backward(dy, x, gamma)[0], atol=1e-12)


def test_batch_norm_dx_couples_the_batch():
    rng = np.random.default_rng(2)
    x, dy, gamma = rng.normal(size=(8, C)), rng.normal(size=(8, C)), np.ones(C)
    bumped = dy.copy()
    bumped[0] += 1.0  # only example 0's upstream gradient changes
    change = np.abs(batch_norm_dx(bumped, x, gamma) - batch_norm_dx(dy, x, gamma))  # (8, C)
    assert (change[1:] > 0).all()  # every other example's gradient moves
    assert np.abs(batch_norm_dx(dy, x, gamma).sum(axis=0)).max() < 1e-12  # columns sum to 0


def test_pad_sequences_and_mask():
    rng = np.random.default_rng(3)
    seqs = [rng.normal(size=(n, 3)) for n in (4, 2)]
    batch, mask = pad_sequences(seqs, 5)
    assert batch.shape == (2, 5, 3) and mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]
    np.testing.assert_array_equal(batch[mask], np.concatenate(seqs))
    assert (batch[~mask] == 0).all()


def test_track_against_torch_agrees_and_catches_the_biased_variance():
    check = track_against_torch(4, 8, 5, np.random.default_rng(0))
    assert max(check.worst.values()) < 1e-12
    assert check.biased_gap > 1e-3 and check.batches_tracked == (4, 4)


def test_autograd_input_grad_of_a_linear_map():
    x, dy = np.ones((2, 3)), np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(autograd_input_grad(lambda t: 2 * t, x, dy), 2 * dy)


def test_output_noise_falls_with_the_batch_size():
    noise = output_noise([2, 8, 64], repeats=100, channels=4, rng=np.random.default_rng(0))
    assert noise.shape == (3,) and noise[0] > noise[1] > noise[2] > 0


def test_stale_run_gap_closes_opens_and_closes_again():
    run = stale_run(0, updates=40, refit=10)
    assert run["gaps"].shape == (41,) and run["gaps"][0] > 1 > 0.2 > run["gaps"][-1]
    assert run["shift_gap"] > 3 * run["gaps"][-1] and run["refit_gap"] < 2 * run["gaps"][-1]


def test_mode_gap_leaves_the_module_in_training_mode():
    bn = nn.BatchNorm1d(4)
    assert mode_gap(bn, torch.randn(32, 4)) > 0 and bn.training
    assert int(bn.num_batches_tracked) == 0
