"""Policies: MultiTaskPolicy and its language tasks, robot transforms and execution modes."""
from .language import LanguageTask, LanguageUpdate
from .multitask import MultiTaskPolicy
from .robots import ROBOTS, RobotSpec

__all__ = ["LanguageTask", "LanguageUpdate", "MultiTaskPolicy", "ROBOTS", "RobotSpec"]
