"""Re-export of real-time chunking (the flow-time convention, `Guidance`, `RTCConfig`, the prefix weights), which
lives in oxygen_gym/core/guidance.py, below the engine and the model families both, so that
`from oxygen_gym.engine.rtc import ...` keeps working."""
from oxygen_gym.core.guidance import (
    RTC_METHODS,
    RTC_SCHEDULES,
    Guidance,
    RTCConfig,
    check_guidance,
    guidance_weight,
    guided_velocity,
    prefix_weights,
)

__all__ = [
    "RTC_METHODS",
    "RTC_SCHEDULES",
    "Guidance",
    "RTCConfig",
    "check_guidance",
    "guidance_weight",
    "guided_velocity",
    "prefix_weights",
]
