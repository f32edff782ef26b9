"""CameraGate: render a robosuite env's cameras only for the steps whose observation someone will use.

robosuite samples a camera observable inside `step()`, at the first physics substep of each sampling period
(`robosuite/utils/observables.py`, `Observable.update`), and a second render of a camera in the same state need not
give the same bytes as the first (measured on LIBERO's wrist camera: most pixel values differ). So the gate leaves
the sampling to robosuite: the camera observables stay enabled (their sampling clocks run exactly as before) and only
what their sensor does changes: open, the real sensor renders; closed, it returns a black placeholder of the same
shape. Each camera renders at most once per step, at the moment it always did, so every rendered image is the one an
always-rendering env gives.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .rendering import RenderCount


class _GatedSensor:
    """A robosuite sensor that renders through `real` while the gate is open."""

    def __init__(self, gate: CameraGate, real: Callable, placeholder: np.ndarray) -> None:
        self.gate, self.real, self.placeholder = gate, real, placeholder
        self.__modality__ = real.__modality__  # robosuite's @sensor decorator marks sensors so

    def __call__(self, obs_cache: dict):
        if not self.gate.is_open:
            return self.placeholder
        with self.gate.timing(1):
            return self.real(obs_cache)


class CameraGate(RenderCount):
    """Opens and closes the camera sensors of one robosuite env. `render_s` and `frames` count the real renders
    (seconds, camera images) since the gate was made, for the episode's time split."""

    def __init__(self) -> None:
        super().__init__()
        self.is_open = True

    def install(self, robosuite_env, observables: Sequence[str], shape: tuple[int, ...]) -> None:
        """Wrap each named camera observable's sensor (again after a hard reset, which makes new sensors)."""
        placeholder = np.zeros(shape, np.uint8)
        placeholder.flags.writeable = False
        for name in observables:
            current = robosuite_env._observables[name]._sensor
            if isinstance(current, _GatedSensor) and current.gate is self:
                continue
            # set_sensor calls the sensor once with {} to learn its shape: closed, that is the placeholder's
            was_open, self.is_open = self.is_open, False
            try:
                robosuite_env.modify_observable(name, "sensor", _GatedSensor(self, current, placeholder))
            finally:
                self.is_open = was_open
