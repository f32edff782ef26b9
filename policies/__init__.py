"""Policies: MultiTaskPolicy and its language tasks, robot transforms and execution modes."""
from oxygen_gym.engine.rtc import RTCConfig

from .language import LanguageTask, LanguageUpdate
from .multitask import MultiTaskPolicy
from .robots import ROBOTS, RobotSpec

__all__ = ["LanguageTask", "LanguageUpdate", "MultiTaskPolicy", "ROBOTS", "RobotSpec", "RTCConfig"]
