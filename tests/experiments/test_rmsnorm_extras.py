"""The pRMSNorm measurement in addnorm_lib.experiments.rmsnorm_extras measures what it says."""

import math

import numpy as np
import pytest

from addnorm_lib.experiments.rmsnorm_extras import (
    MEDIAN_ABS_NORMAL,
    partial_count,
    partial_rms_ratio,
    predicted_median_error,
    prms_draws,
    split_common_factor,
)
from addnorm_lib.reference import norms


def test_median_abs_normal_constant():
    # median |Z| solves Phi(m) = 3/4, i.e. erf(m / sqrt 2) = 1/2
    assert math.erf(MEDIAN_ABS_NORMAL / math.sqrt(2)) == pytest.approx(0.5, abs=1e-4)


@pytest.mark.parametrize("p", [1 / 64, 0.1, 1 / 3, 0.5, 1.0])
def test_ratio_is_what_prmsnorm_divides_by(p):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 96)) * np.exp(rng.normal(size=96))  # (R, C)
    w = 1 + 0.2 * rng.normal(size=96)  # (C,)
    full = norms.rms_norm_eps_outside(x, w, eps=0.0)  # (R, C)
    part = norms.partial_rms_norm(x, w, p, eps=0.0)  # (R, C)
    np.testing.assert_allclose(
        full / part, np.broadcast_to(partial_rms_ratio(x, p)[:, None], x.shape), rtol=1e-12
    )


def test_ratio_of_p_one_is_exactly_one_and_k_rounds_up():
    x = np.random.default_rng(2).normal(size=(3, 10))
    assert np.all(partial_rms_ratio(x, 1.0) == 1.0)
    assert partial_count(10, 0.25) == 3 and partial_count(1024, 1 / 16) == 64
    with pytest.raises(ValueError):
        partial_count(10, 0.0)


def test_split_common_factor_removes_a_constant_exactly():
    ratios = np.array([0.5, 2.0, 1.0])
    c, residual = split_common_factor(3.0 * ratios)
    assert c == pytest.approx(3.0)
    np.testing.assert_allclose(residual, [0.5, 1.0, 0.0], atol=1e-15)


def test_prediction_for_equal_scales_is_the_textbook_law():
    for k in (1, 16, 300, 1024):
        expected = MEDIAN_ABS_NORMAL * math.sqrt((1 / k - 1 / 1024) / 2)
        assert predicted_median_error(np.full(1024, 3.0), k) == pytest.approx(expected, abs=1e-12)


def test_prediction_uses_the_effective_number_of_features():
    # two large features outside the first k dominate the full mean square but are never read:
    # the estimate is much worse than for equal scales
    scales = np.ones(1000)
    scales[500:502] = 100.0
    assert predicted_median_error(scales, 100) > 3 * predicted_median_error(np.ones(1000), 100)
    # the same two features inside the first k dominate both mean squares: the ratio barely moves
    scales = np.ones(1000)
    scales[:2] = 100.0
    assert predicted_median_error(scales, 100) < predicted_median_error(np.ones(1000), 100)


def test_draws_follow_the_sampling_law_and_the_factor_is_common():
    out = prms_draws(seeds=[0, 1, 2], n_features=256, n_rows=1500, p_values=[1 / 16, 1 / 4, 1.0])
    assert out["alike"].shape == out["own_pred"].shape == (3, 3)
    np.testing.assert_array_equal(out["k"], [16, 64, 256])
    # p < 1: measured medians within 25% of the law, for both kinds of rows
    np.testing.assert_allclose(out["alike"][:, :2] / out["alike_pred"][:2], 1, atol=0.25)
    np.testing.assert_allclose(out["own_residual"][:, :2] / out["own_pred"][:, :2], 1, atol=0.3)
    assert np.all(np.abs(out["alike_factor"] - 1) < 0.05)  # alike: no common factor to speak of
    assert np.all(out["own_residual"][:, :2] > out["alike"][:, :2])  # unequal scales: worse
    assert np.all(out["own_raw"][:, 2] == 0) and np.all(out["own_factor"][:, 2] == 1)  # p = 1


def test_half_precision_errors_measure_only_the_computation():
    import torch

    from addnorm_lib.experiments.rmsnorm_extras import half_precision_errors
    from addnorm_lib.reference.modules import llama_rms_norm

    gen = torch.Generator().manual_seed(0)
    rows, gain = torch.randn(8, 256, generator=gen), 1 + 0.1 * torch.randn(256, generator=gen)

    def half_math(x, w, eps=1e-6):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w

    methods = {
        "half": half_math,
        "llama": llama_rms_norm,
        "exact": lambda x, w: torch.from_numpy(
            norms.rms_norm(x.double().numpy(), w.double().numpy(), eps=1e-6)
        ),
    }
    scales = [1e-3, 1.0, 1e3]
    errors = half_precision_errors(methods, rows, gain, torch.float16, scales)
    assert set(errors) == set(methods) and all(e.shape == (3,) for e in errors.values())
    assert np.all(errors["exact"] == 0)  # the reference starts from the same rounded inputs
    assert np.all(errors["llama"] < 2 * torch.finfo(torch.float16).eps)  # one rounding
    assert errors["half"][2] > 0.99  # x * x overflows in float16: rows of zeros
