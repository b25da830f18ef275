"""The depth chapter's seed-spanning checks: dead units, their zero gradient, shifted inputs."""

import pytest
import torch

from addnorm_lib.experiments import depth_checks
from addnorm_lib.experiments.depth import DeepMLP, Probe, set_seed

pytestmark = pytest.mark.usefixtures("one_thread")


def relu_net(depth=3, width=8, in_features=4):
    set_seed(0)
    return DeepMLP(in_features, width, 1, depth, activation="relu", init="he")


def test_dead_units_are_the_units_off_on_every_example():
    net = relu_net()
    with torch.no_grad():
        net.layers[1][0].bias[2] = -1e4  # off whatever it receives
        net.layers[1][0].bias[5] = 1e4  # on whatever it receives
    x = torch.randn(32, 4)
    dead = depth_checks.dead_units(net, x)
    assert dead.shape == (3, 8) and dead.dtype == torch.bool
    assert dead[1, 2] and not dead[1, 5]
    h = net.layers[0](net.read_in(x))  # what layer 1 receives
    z = net.layers[1][0](h)  # (32, 8)
    assert torch.equal(dead[1], (z <= 0).all(dim=0))


def test_a_dead_unit_gets_exactly_zero_gradient_and_keeps_its_weights():
    net = relu_net(depth=4)
    with torch.no_grad():
        net.layers[2][0].bias[:3] = -1e4  # three units of layer 2 dead for good
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    result = depth_checks.train_and_track_dead(net, x, y, lr=1e-2, steps=20)
    assert result["dead_throughout"][2, :3].all()
    assert result["max_dead_row_grad"] == 0.0
    assert result["dead_throughout_unchanged"] and result["revived_with_start_weights"]
    start, end = result["dead_start"], result["dead_end"]
    assert result["revived"] + result["still_dead"] == int(start.sum())
    assert result["newly_dead"] + result["still_dead"] == int(end.sum())


def test_the_chapters_killed_units_revive_when_training_goes_on():
    # the chapter's setting for one seed: one step of size 0.5, then Adam
    set_seed(1)
    net = DeepMLP(8, 64, 1, depth=8, activation="relu", init="he")
    x, y = torch.randn(256, 8), 2 + 3 * torch.randn(256, 1)
    depth_checks.gradient_descent_step(net, x, y, lr=0.5)
    killed = int(depth_checks.dead_units(net, x).sum())
    result = depth_checks.train_and_track_dead(net, x, y, lr=1e-3, steps=100)
    assert killed > 50 and result["revived"] > 0
    assert result["max_dead_row_grad"] == 0.0 and result["dead_throughout_unchanged"]
    assert result["revived_with_start_weights"]


def test_units_that_die_during_adam_training_come_back_with_moved_weights():
    # the chapter's setting for one seed; units killed mid-training still have Adam's momentum
    set_seed(0)
    net = DeepMLP(8, 64, 1, depth=8, activation="relu", init="he")
    x, y = torch.randn(256, 8), 2 + 3 * torch.randn(256, 1)
    depth_checks.gradient_descent_step(net, x, y, lr=0.5)
    result = depth_checks.train_and_track_dead(net, x, y, lr=1e-3, steps=100)
    assert result["died_during"] >= result["died_and_revived"] > 0
    assert result["mid_revivals"] >= result["died_and_revived"]
    assert result["mid_revivals_same_weights"] == 0  # momentum moved every one of them
    assert result["revived_with_start_weights"]  # the units dead at the start: no moments yet
    assert result["max_dead_row_grad"] == 0.0


def test_no_death_during_training_means_no_mid_training_revival():
    net = relu_net(depth=4)
    with torch.no_grad():
        net.layers[2][0].bias[:3] = -1e4  # dead from the start, never a death in training
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    result = depth_checks.train_and_track_dead(net, x, y, lr=1e-9, steps=5)  # nothing flips
    assert result["dead_throughout"][2, :3].all() and result["still_dead"] >= 3
    assert result["died_during"] == result["died_and_revived"] == 0
    assert result["mid_revivals"] == result["mid_revivals_same_weights"] == 0


def test_gradient_descent_step_moves_against_the_gradient():
    net = relu_net(depth=2)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    before = [p.detach().clone() for p in net.parameters()]
    depth_checks.gradient_descent_step(net, x, y, lr=0.1)
    for p, b in zip(net.parameters(), before, strict=True):
        torch.testing.assert_close(p.detach(), b - 0.1 * p.grad)


def test_shifts_do_what_their_names_say():
    g = torch.Generator().manual_seed(0)
    x = 3 + torch.randn(500, 6, generator=g) * torch.arange(1.0, 7.0)
    feature = depth_checks.shift_inputs(x, "per-feature affine", g)
    a = feature.std(0) / x.std(0)  # (C,) one positive scale per column
    torch.testing.assert_close(feature, x * a + (feature.mean(0) - a * x.mean(0)))
    example = depth_checks.shift_inputs(x, "per-example affine", g)
    a = example.std(1, keepdim=True) / x.std(1, keepdim=True)  # (N, 1) one scale per row
    offset = example.mean(1, keepdim=True) - a * x.mean(1, keepdim=True)
    torch.testing.assert_close(example, x * a + offset)
    mixed = depth_checks.shift_inputs(x, "features mixed", g)
    torch.testing.assert_close(mixed.mean(0), x.mean(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mixed.var(0).sum(), x.var(0).sum(), rtol=1e-4, atol=1e-4)
    assert (mixed.var(0) - x.var(0)).abs().max() > 0.5  # the columns did change
    with pytest.raises(ValueError, match="shift must be one of"):
        depth_checks.shift_inputs(x, "per-token", g)


def test_reestimated_batchnorm_undoes_a_per_feature_affine_change_and_leaves_the_model():
    set_seed(0)
    model = depth_checks.normed_mlp("batch", 5, width=16, depth=2)
    g = torch.Generator().manual_seed(1)
    x = 1 + 2 * torch.randn(1000, 5, generator=g)
    depth_checks.train_regression(model, x, x[:, :1].sin(), steps=20, generator=g)
    stats = (model[0].running_mean.clone(), model[0].running_var.clone())
    shifted = depth_checks.shift_inputs(x, "per-feature affine", g)
    with torch.no_grad():
        out = depth_checks.reestimate_batchnorm(model, x)(x)
        out_shifted = depth_checks.reestimate_batchnorm(model, shifted)(shifted)
        stale = model(shifted)
    assert depth_checks.output_change(out, out_shifted) < 1e-3
    assert depth_checks.output_change(model(x).detach(), stale) > 0.1
    assert not model.training
    assert torch.equal(model[0].running_mean, stats[0])
    assert torch.equal(model[0].running_var, stats[1])


def test_layernorm_network_ignores_a_per_example_offset_and_scale():
    set_seed(0)
    model = depth_checks.normed_mlp("layer", 7).eval()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(200, 7, generator=g)
    with torch.no_grad():
        change = depth_checks.output_change(
            model(x), model(depth_checks.shift_inputs(x, "per-example affine", g))
        )
    assert change < 1e-4


def test_output_change_is_relative_to_the_outputs_spread():
    before = torch.tensor([[0.0], [2.0], [4.0]])
    assert depth_checks.output_change(before, before) == 0.0
    spread = before - before.mean(0)
    assert depth_checks.output_change(before, before + spread) == pytest.approx(1.0)


def test_shift_experiment_shows_which_norm_undoes_which_shift():
    result = depth_checks.shift_experiment(0, n_train=1024, n_test=1024, steps=60)
    change, loss = result["change"], result["loss"]
    assert change["per-feature affine", "BatchNorm, re-estimated"] < 1e-3
    assert change["per-example affine", "LayerNorm"] < 1e-4
    for way in ["BatchNorm, training statistics", "BatchNorm, re-estimated", "LayerNorm"]:
        assert change["features mixed", way] > 0.1
    assert change["per-feature affine", "BatchNorm, training statistics"] > 0.5
    assert loss["re-estimated, shifted"] < loss["training statistics, shifted"] / 5


def test_one_step_failure_leaves_the_first_layer_unchanged():
    result = depth_checks.one_step_failure(0)
    assert result.changed == 0.0
    assert result.grad_first < 1e-12 * result.grad_last
    assert 0 < result.rel_step < torch.finfo(torch.float32).eps / 2


def test_jacobians_by_hand_match_autograd():
    jac_err, prod_err = depth_checks.jacobian_check(3, depth=4, width=5)
    assert jac_err < 1e-14 and prod_err < 1e-12


def test_layer_statistics_are_the_probes_numbers_per_seed():
    stats = depth_checks.layer_statistics("tanh", "xavier", 4, seeds=[0, 1], width=8, batch=16)
    for values in (stats.grad, stats.std, stats.spread, stats.rms):
        assert values.shape == (5, 2)
    set_seed(1)
    net = DeepMLP(16, 8, 1, 4, "tanh", "xavier").double()
    x = torch.randn(16, 16, dtype=torch.float64)
    y = torch.randn(16, 1, dtype=torch.float64)
    with Probe([net.read_in, *net.layers]) as probe:
        torch.nn.functional.mse_loss(net(x), y).backward()
    assert stats.grad[:, 1] == pytest.approx(probe.gradient_norms())
    assert stats.first_to_last()[1] == pytest.approx(stats.grad[0, 1] / stats.grad[-1, 1])
    rms = [float(r.output.pow(2).mean().sqrt()) for r in probe.records.values()]
    assert stats.rms[:, 1] == pytest.approx(rms)


def test_linear_layers_scale_the_gradient_like_s_to_the_depth():
    stats = depth_checks.layer_statistics("identity", "naive", 20, 1.2 / 16, seeds=[0], width=256)
    assert stats.first_to_last()[0] == pytest.approx(1.2**20, rel=0.5)


def test_layer_gain_predicts_the_factor_per_layer():
    gain = depth_checks.layer_gain("tanh", 0.5, 0, depth=10)
    assert gain["measured"] == pytest.approx(gain["predicted"], rel=0.15)
    assert gain["ratio"] == pytest.approx(gain["measured"] ** 10)
    with pytest.raises(ValueError, match="activation must be one of"):
        depth_checks.layer_gain("relu", 0.5, 0, depth=2)


def test_internal_shift_is_zero_without_training_and_positive_with():
    assert depth_checks.internal_shift(0, steps=0)["mean_shift"] == 0.0
    moved = depth_checks.internal_shift(0, steps=5, lr=1e-2)
    assert moved["mean_shift"] > 0.05 and moved["spread_ratio"] > 0


def test_one_step_threshold_is_where_the_first_weight_moves():
    """k is the threshold: a step 0.1% under k * lr moves no first-layer weight, 0.1% over
    moves one. Seed 3's k was found independently (by scanning k in float32) at 1.99e9."""
    k, below, above = depth_checks.one_step_threshold(3)
    assert below == 0 and above >= 1
    assert 1.9e9 < k < 2.1e9
