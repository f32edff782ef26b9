import os
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

# Tests check behaviour, not speed: one intra-op thread avoids OpenMP spin-waiting when the two cores are
# shared with simulator subprocesses (measured 10x slower with 2 threads under load).
import torch  # noqa: E402

torch.set_num_threads(1)

FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "lerobot_pi05_tiny"  # lerobot 0.4.4 outputs (README.md there)


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (no GPU on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def lerobot_fixture_dir() -> Path:
    if not (FIXTURE_DIR / "reference.npz").exists():
        pytest.fail(f"lerobot PI05 fixture missing at {FIXTURE_DIR}: it is part of the repository (git checkout it)")
    return FIXTURE_DIR


@pytest.fixture
def graphs_on_cpu(monkeypatch):
    """Graph mode on a CPU: the captured call is the static body itself, run eagerly on every replay (the real
    capture's warm-up runs the body once on whatever the buffers hold). Returns the capture and replay counts."""
    from oxygen_gym.engine import runner as runner_module
    from oxygen_gym.engine.runner import StaticCall

    calls = {"captured": 0, "replayed": 0}

    def capture(self, mempool):
        self.run()
        self.graph = "eager-static"
        calls["captured"] += 1

    def replay(self):
        calls["replayed"] += 1
        return self.run()

    monkeypatch.setattr(runner_module, "use_cuda_graphs", lambda flag, device: True)
    monkeypatch.setattr(runner_module.torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(StaticCall, "capture", capture)
    monkeypatch.setattr(StaticCall, "replay", replay)
    return calls
