"""The auto decode budget's rule on a known cost model (no timing involved)."""
import pytest

from oxygen_gym.engine.budget import AutoBudget, FixedBudget, make_budget


def _trained(target_hz=20.0, fixed=30.0, step=(1, 2.0), **kw):
    b = AutoBudget(target_action_hz=target_hz, horizon=1, **kw)  # horizon 1: frame budget = 1000 / target ms
    b.observe({"prefill": fixed, "denoise": 0.0, "manager": 0.0}, [step[0]] * 3, 3 * step[1])
    return b


def test_k_fills_the_frame_budget():
    b = _trained()  # budget 50 ms, fixed 30 ms, 2 ms per step -> 10 steps
    assert b.choose(1, [100], [0.0]) == 10
    assert b.choose(1, [4], [0.0]) == 4  # never more than any request still needs


def test_unseen_batch_sizes_interpolate_and_extrapolate():
    b = _trained()
    b.observe({"prefill": 30.0}, [9] * 2, 2 * 10.0)  # 10 ms per step at batch 9
    assert b.predict_step_ms(5) == pytest.approx(6.0)
    assert b.predict_step_ms(18) == pytest.approx(20.0)
    assert b.choose(5, [100] * 5, [0.0] * 5) == 3


def test_never_starves():
    b = _trained(fixed=60.0)  # the fixed part alone overruns the budget: k would be 0
    ks = [b.choose(2, [50, 50], [0.0, 0.0]) for _ in range(12)]
    assert 0 in ks and all(k <= 1 for k in ks)
    gaps = [len(run) for run in "".join(str(k) for k in ks).split("1")]
    assert max(gaps) < b.max_idle_frames


def test_deadline_takes_only_what_it_needs_and_counts_misses():
    b = _trained(language_deadline_s=1.0)  # frames of ~50 ms: 20 frames to the deadline
    assert b.choose(1, [40], [0.0]) == 2  # 40 tokens over ~20 frames
    tight = _trained(language_deadline_s=0.1)
    assert tight.choose(1, [100], [0.0]) == 10 and tight.deadline_misses == 1


def test_make_budget_validation():
    assert isinstance(make_budget(3, horizon=10), FixedBudget)
    for bad in (0, -1, 2.5, "fast", True):
        with pytest.raises(ValueError, match="decode_budget"):
            make_budget(bad, horizon=10)
    with pytest.raises(ValueError, match="target_action_hz"):
        make_budget("auto", horizon=10)
