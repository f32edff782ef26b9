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
