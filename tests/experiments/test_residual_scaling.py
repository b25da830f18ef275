"""The branch rules scale W2 as documented; training runs are seeded, reproducible and per seed."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from addnorm_lib.experiments import residual_scaling as rs


def test_branch_rules_give_the_documented_factors():
    assert rs.branch_scale("unscaled", 30) == 1.0
    assert rs.branch_scale("1/sqrt(L)", 30) == pytest.approx(1 / math.sqrt(30))
    assert rs.branch_scale("zero", 30) == 0.0


def test_an_unknown_rule_or_depth_is_refused():
    with pytest.raises(ValueError, match="unscaled"):
        rs.branch_scale("1/L", 30)
    with pytest.raises(ValueError, match="depth"):
        rs.branch_scale("zero", 0)


def test_teacher_task_is_standardized_and_seeded():
    x, y = rs.teacher_task(256, 8, seed=0)
    assert x.shape == (256, 8) and y.shape == (256, 1)
    assert x.dtype == y.dtype == torch.float32
    assert abs(y.mean().item()) < 1e-6 and abs(y.std().item() - 1) < 1e-6
    x2, y2 = rs.teacher_task(256, 8, seed=0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(y, rs.teacher_task(256, 8, seed=1)[1])


def test_rules_multiply_the_same_draw_of_w2():
    unscaled = rs.seeded_mlp(3, 8, 16, 10, residual=True, rule="unscaled")
    root = rs.seeded_mlp(3, 8, 16, 10, residual=True, rule="1/sqrt(L)")
    for a, b in zip(unscaled.layers, root.layers, strict=True):
        torch.testing.assert_close(b.linear2.weight, a.linear2.weight / math.sqrt(10))
        assert torch.equal(a.linear1.weight, b.linear1.weight)


def test_zero_rule_makes_the_network_its_read_in_and_read_out():
    net = rs.seeded_mlp(0, 8, 16, 20, residual=True, rule="zero")
    x = torch.randn(32, 8)
    assert torch.equal(net(x), net.read_out(net.read_in(x)))


def test_plain_networks_ignore_the_rule():
    a = rs.seeded_mlp(1, 8, 16, 5, rule="zero")
    b = rs.seeded_mlp(1, 8, 16, 5, rule="unscaled")
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_unscaled_relu_branches_blow_the_loss_up_at_initialization():
    # the chapter's finding in small: 30 He blocks grow the stream by about 3^15
    x, y = rs.teacher_task(64, 8)
    losses = {}
    for rule in rs.BRANCH_SCALES:
        net = rs.seeded_mlp(0, 8, 32, 30, residual=True, rule=rule)
        with torch.no_grad():
            losses[rule] = F.mse_loss(net(x), y).item()
    assert losses["unscaled"] > 1e10
    assert losses["1/sqrt(L)"] < 1e3 and losses["zero"] < 1e3


def test_train_regression_reports_the_losses_it_trains_on():
    x, y = rs.teacher_task(64, 4)
    net = rs.seeded_mlp(0, 4, 8, 3, residual=True)
    with torch.no_grad():
        before = F.mse_loss(net(x), y).item()
    curve, initial, final = rs.train_regression(net, x, y, steps=15, minibatch=16)
    assert curve.shape == (15,) and curve.dtype == np.float64
    assert initial == before
    with torch.no_grad():
        assert final == F.mse_loss(net(x), y).item()
    assert final < initial


def test_train_regression_is_the_default_adam_loop():
    # foreach=True is documented as the same update as torch's default loop over parameters
    x, y = rs.teacher_task(64, 4)
    net = rs.seeded_mlp(0, 4, 8, 3, residual=True)
    reference = rs.seeded_mlp(0, 4, 8, 3, residual=True)
    curve, _, _ = rs.train_regression(net, x, y, steps=10, minibatch=16, batch_seed=5)
    opt = torch.optim.Adam(reference.parameters(), lr=1e-3, foreach=False)
    g = torch.Generator().manual_seed(5)
    expected = []
    for _ in range(10):
        idx = torch.randint(0, len(x), (16,), generator=g)
        loss = F.mse_loss(reference(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        expected.append(loss.item())
    np.testing.assert_allclose(curve, expected, rtol=1e-6)
    for p, q in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_train_seeds_stacks_one_reproducible_run_per_seed():
    x, y = rs.teacher_task(64, 4)

    def build(seed):
        return rs.seeded_mlp(seed, 4, 8, 3, residual=True)

    runs = rs.train_seeds(build, [0, 2], x, y, steps=5, minibatch=16)
    assert runs.seeds == (0, 2)
    assert runs.curves.shape == (2, 5) and runs.initial.shape == runs.final.shape == (2,)
    curve, initial, final = rs.train_regression(build(2), x, y, steps=5, minibatch=16, batch_seed=3)
    np.testing.assert_array_equal(runs.curves[1], curve)
    assert runs.initial[1] == initial and runs.final[1] == final
    assert not np.array_equal(runs.curves[0], runs.curves[1])
    with pytest.raises(ValueError, match="seed"):
        rs.train_seeds(build, [], x, y)
