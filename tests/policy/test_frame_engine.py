"""The three engines a policy session drives satisfy one protocol (policies/frame_engine.py `FrameEngine`): the
scheduler of the single-process modes, the `parallel` baseline's workers and the server's adapter onto its loop."""
import inspect

import pytest

from oxygen_gym.engine.parallel import ParallelExecutor
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.policies.frame_engine import FrameEngine
from oxygen_gym.serve.batch_loop import SessionEngine

ENGINES = [FrameScheduler, ParallelExecutor, SessionEngine]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda c: c.__name__)
def test_each_engine_kind_is_a_frame_engine(engine):
    assert issubclass(engine, FrameEngine)
    for name in ("run", "in_flight", "reset"):  # the same call shapes, not only the names
        want = list(inspect.signature(getattr(FrameEngine, name)).parameters)
        got = list(inspect.signature(getattr(engine, name)).parameters)
        assert got == want, (engine.__name__, name, got)


def test_a_class_missing_a_method_is_not_one():
    class NoReset:
        def run(self, frame, k, on_actions=None): ...

        def in_flight(self): ...

    assert not issubclass(NoReset, FrameEngine)


def test_a_policys_engine_and_its_sessions_engines_are_frame_engines():
    from oxygen_gym import MultiTaskPolicy

    with MultiTaskPolicy.from_pretrained("tiny", num_slots=2) as p:
        assert isinstance(p.engine, FrameEngine)
