"""Student-t confidence intervals over seed-level success rates, checked by hand."""
import math

import pytest
from oxygen_gym.eval.libero.summary_stats import percentiles, t_interval


def test_ten_seed_rates_against_a_hand_computed_interval():
    rates = [0.96, 0.98, 0.97, 0.99, 0.95, 0.97, 0.98, 0.96, 0.97, 0.97]
    # by hand: mean 0.970; squared deviations sum 12e-4, s^2 = 12e-4 / 9, s = 0.0115470; s/sqrt(10) = 0.00365148;
    # t(0.975, df=9) = 2.262157 (table value 2.262) -> half width 0.0082603
    ci = t_interval(rates)
    assert ci.n == 10
    assert ci.mean == pytest.approx(0.970, abs=1e-12)
    assert ci.sd == pytest.approx(0.0115470, abs=1e-7)
    assert ci.half_width == pytest.approx(0.0082603, abs=1e-6)
    assert (ci.low, ci.high) == pytest.approx((0.9617397, 0.9782603), abs=1e-6)


def test_two_seeds_use_the_wide_t_quantile():
    ci = t_interval([0.0, 1.0])  # s = 0.70711, s/sqrt(2) = 0.5, t(0.975, 1) = 12.7062
    assert ci.half_width == pytest.approx(6.35310, abs=1e-4)
    assert t_interval([0.0, 1.0], confidence=0.90).half_width == pytest.approx(0.5 * 6.31375, abs=1e-4)


def test_one_seed_has_no_interval():
    ci = t_interval([0.8])
    assert ci.mean == 0.8 and ci.low is None and ci.half_width is None
    with pytest.raises(ValueError):
        t_interval([])
    with pytest.raises(ValueError, match="confidence"):
        t_interval([0.1, 0.2], confidence=1.5)


def test_percentiles_skip_missing_values():
    p = percentiles([1.0, None, 2.0, 3.0, float("nan")])
    assert p["p50"] == 2.0 and p["n"] == 3 and math.isclose(p["mean"], 2.0)
    assert percentiles([None]) is None
