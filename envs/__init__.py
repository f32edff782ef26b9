"""oxygen_gym.envs: real simulators as Gymnasium envs whose observations are the policy's input (docs/api.md), plus the
wrappers and the episode loop that eval and users share. Importing registers the ids; simulators load on first use."""
from __future__ import annotations

from gymnasium.envs.registration import register, registry

from .rendering import use_headless_gl

use_headless_gl()

ENV_IDS = {
    "oxygen_gym/LIBERO-v0": "oxygen_gym.envs.libero:LiberoEnv",
    "oxygen_gym/ALOHA-v0": "oxygen_gym.envs.aloha:AlohaEnv",
    "oxygen_gym/DROID-v0": "oxygen_gym.envs.droid:DroidEnv",
}
for _id, _entry in ENV_IDS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, disable_env_checker=False)

from .episode import EpisodeResult, run_episode  # noqa: E402
from .protocols import ALOHA_PROTOCOL, DROID_PROTOCOL, LIBERO_PROTOCOLS, LiberoProtocol, get_libero_protocol  # noqa: E402
from .video import VideoRecorder  # noqa: E402
from .wrappers import ActionChunkPlayer, NarrationRecorder, PolicyCall, StepTimer, notify_policy_call  # noqa: E402

__all__ = [
    "ENV_IDS", "EpisodeResult", "run_episode", "VideoRecorder", "ActionChunkPlayer", "NarrationRecorder", "StepTimer",
    "PolicyCall", "notify_policy_call", "LIBERO_PROTOCOLS", "LiberoProtocol", "get_libero_protocol",
    "ALOHA_PROTOCOL", "DROID_PROTOCOL",
]
