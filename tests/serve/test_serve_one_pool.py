"""The server holds one KV slot pool for every robot (its template policy builds none), and each field of a message
is checked once on the way in (serve/observations.py), not again by the session's act()."""
import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.engine import slots
from oxygen_gym.policies import inputs
from oxygen_gym.serve import observations, wire
from oxygen_gym.serve.server import PolicyServer, ServeConfig
from policy_obs import make_obs


def _template():
    return MultiTaskPolicy.from_pretrained("tiny", robot="libero", decode_budget=2, num_slots=1,
                                           tasks=[LanguageTask("narrate", "Describe it.", max_new_tokens=3)])


def _one_frame(server, obs, **fields):
    """One message through the server's own parse and its session's act (no socket)."""
    from oxygen_gym.serve.batch_loop import SessionEngine, session_policy

    server.engine.register(0)
    session = session_policy(server.template, SessionEngine(server.engine, 0))
    parsed = server._parse(0, session, wire.packb({**obs, **fields}))
    actions, _ = session.act(parsed[2])
    server.engine.unregister(0).result(timeout=60)
    return actions


def test_the_server_builds_one_pool(monkeypatch):
    built = []
    init = slots.SlotPool.__init__

    def counting(self, *a, **kw):
        built.append(self)
        init(self, *a, **kw)

    monkeypatch.setattr(slots.SlotPool, "__init__", counting)
    template = _template()
    server = PolicyServer(template, ServeConfig(max_robots=2))
    try:
        assert built == [server.pool]
        _one_frame(server, make_obs("libero", np.random.default_rng(0)))
        assert built == [server.pool] and not template.pool_built  # a robot's frame ran on the server's pool
        assert server.engine.snapshot()["num_slots"] == server.pool.num_slots
    finally:
        server.close()
        template.close()


def test_each_field_is_checked_once_on_the_server_path(monkeypatch):
    calls = {"images": 0, "observations": 0}
    image, check = inputs.image_uint8_hwc, inputs.check_observation

    def counted_image(img, field):
        calls["images"] += 1
        return image(img, field)

    def counted_check(obs, robot):
        calls["observations"] += 1
        return check(obs, robot)

    monkeypatch.setattr(inputs, "image_uint8_hwc", counted_image)
    monkeypatch.setattr(observations, "image_uint8_hwc", counted_image)
    monkeypatch.setattr(inputs, "check_observation", counted_check)
    from oxygen_gym.policies import observation

    monkeypatch.setattr(observation, "check_observation", counted_check)
    template = _template()
    server = PolicyServer(template, ServeConfig(max_robots=2))
    try:
        obs = make_obs("libero", np.random.default_rng(1))
        served = _one_frame(server, obs, prev_actions=np.zeros((4, 7), np.float32), inference_delay=1)
        assert calls == {"images": 2, "observations": 0}  # two cameras, each converted once; act() checked nothing
        want, _ = template.session(None).act(obs, prev_actions=np.zeros((4, 7), np.float32), inference_delay=1)
        np.testing.assert_allclose(served, want, atol=1e-5)  # the same chunk as act() on the plain dict
        assert calls == {"images": 4, "observations": 1}  # the plain dict is checked by act() itself
    finally:
        server.close()
        template.close()


def test_what_the_server_does_not_check_act_still_refuses_with_its_message():
    from oxygen_gym.policies.inputs import ObservationError
    from oxygen_gym.serve.observations import ObservationKeyError

    template = MultiTaskPolicy.from_pretrained("multi-tiny", robot="libero", num_slots=1)
    server = PolicyServer(template, ServeConfig(max_robots=2))
    try:
        obs = make_obs("libero", np.random.default_rng(2))
        with pytest.raises(ObservationError, match=r"obs\['state'\]: a value of magnitude 1e\+07"):
            _one_frame(server, {**obs, "state": np.full(8, 1e7, np.float32)})
        with pytest.raises(ObservationKeyError, match=r"prev_actions: this policy runs heads \['actions', 'fast', "
                                                      r"'long'\]; pass a dict head -> array"):
            _one_frame(server, obs, prev_actions=np.zeros((4, 7), np.float32), inference_delay=1)
    finally:
        server.close()
        template.close()
