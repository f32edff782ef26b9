"""VideoRecorder: one annotated mp4 per episode, showing what the policy saw and what it said, and how fast.

Each frame is the camera views side by side over a text panel: the control step, the latency of the policy call
that produced the current action, the action rate, language tokens/s, success, and the latest narration per language
task. Written with imageio-ffmpeg (bundled ffmpeg) and Pillow's built-in font, so nothing outside pip is needed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .wrappers import check_rendered, request_render

PANEL_BG = (20, 20, 20)
TEXT_RGB = (235, 235, 235)
OK_RGB = (90, 220, 110)
BLOCK = 16  # H.264 encoders want frame sides divisible by 16


def camera_row(images: dict[str, np.ndarray], order: Sequence[str] | None = None) -> np.ndarray:
    """The camera views side by side (shorter views padded at the bottom)."""
    names = list(order) if order is not None else list(images)
    views = [np.asarray(images[n], dtype=np.uint8) for n in names]
    h = max(v.shape[0] for v in views)
    return np.concatenate([np.pad(v, ((0, h - v.shape[0]), (0, 0), (0, 0))) for v in views], axis=1)


def _round_up(x: int, m: int = BLOCK) -> int:
    return -(-x // m) * m


def _wrap(text: str, font: ImageFont.FreeTypeFont, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + ([line] if line else [])


class FrameAnnotator:
    """Lays out camera views over a fixed-height text panel; every frame of an episode has the same size."""

    def __init__(self, camera_hw: tuple[int, int], n_cameras: int, text_lines: int = 5, font_size: int | None = None):
        h, w = camera_hw
        self.row_hw = (h, w * n_cameras)
        self.font_size = font_size or max(12, min(24, h // 14))
        self.font = ImageFont.load_default(size=self.font_size)
        self.line_h = int(self.font_size * 1.3)
        self.text_lines = max(2, int(text_lines))
        self.width = _round_up(self.row_hw[1])
        self.height = _round_up(self.row_hw[0] + self.text_lines * self.line_h + 8)
        self.panel_top = self.row_hw[0]

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of every frame."""
        return self.height, self.width

    def status_lines(self, step: int, info: dict[str, Any]) -> list[str]:
        t = info.get("timing") or {}
        fmt = lambda key, spec, unit: f"{t[key]:{spec}}{unit}" if key in t else "-"  # noqa: E731
        return [
            f"step {step} | success: {'yes' if info.get('is_success') else 'no'}",
            f"latency {fmt('policy_ms', '.0f' if t.get('policy_ms', 0) >= 10 else '.1f', ' ms')}"
            f" | {fmt('action_hz', '.1f', ' action Hz')}"
            f" | {fmt('tokens_per_s', '.1f', ' tok/s')}",
        ]

    def compose(self, images: dict[str, np.ndarray], step: int, info: dict[str, Any]) -> np.ndarray:
        row = camera_row(images)
        if row.shape[:2] != self.row_hw:
            raise ValueError(f"camera views changed size mid-episode: {row.shape[:2]} vs {self.row_hw}")
        frame = Image.new("RGB", (self.width, self.height), PANEL_BG)
        frame.paste(Image.fromarray(row), (0, 0))
        draw = ImageDraw.Draw(frame)
        x, y = 6, self.panel_top + 4 - self.line_h
        status = self.status_lines(step, info)
        for i, line in enumerate(status):
            y += self.line_h
            draw.text((x, y), line, font=self.font, fill=OK_RGB if i == 0 and info.get("is_success") else TEXT_RGB)
        budget = self.text_lines - len(status)
        for task, text in sorted((info.get("narration") or {}).items()):
            if budget <= 0:
                break
            lines = _wrap(f"{task}: {text}", self.font, self.width - 2 * x)[:budget]
            for line in lines:
                y += self.line_h
                draw.text((x, y), line, font=self.font, fill=TEXT_RGB)
            budget -= len(lines)
        return np.asarray(frame)


class VideoRecorder(gym.Wrapper):
    """Writes one annotated mp4 per episode into `video_dir`, named after the env's `info["episode_id"]`
    (`<suite>/task<i>/seed<s>/ep<e>` -> `<suite>_task<i>_seed<s>_ep<e>_<success|failure>.mp4`) unless `name` is given.
    Place it outside StepTimer and NarrationRecorder to show their numbers."""

    def __init__(self, env: gym.Env, video_dir: str | os.PathLike, fps: float | None = None, text_lines: int = 5,
                 font_size: int | None = None, name: str | None = None) -> None:
        super().__init__(env)
        self.video_dir = Path(video_dir)
        self.fps = float(fps or env.metadata.get("render_fps") or 20)
        if not self.fps > 0:
            raise ValueError(f"fps must be positive, got {fps!r}")
        self.text_lines, self.font_size, self.name = text_lines, font_size, name
        self.last_path: Path | None = None
        self.frames_written = 0
        self._writer = None
        self._tmp: Path | None = None
        self._annotator: FrameAnnotator | None = None
        self._episode_id = "episode"
        self._success = False
        self._step = 0

    @property
    def frame_size(self) -> tuple[int, int] | None:
        """(height, width) of the frames of the current episode (None before the first reset)."""
        return self._annotator.frame_size if self._annotator else None

    def reset(self, **kwargs):
        self.finish()
        obs, info = self.env.reset(**kwargs)
        self._episode_id = self.name or str(info.get("episode_id", "episode"))
        self._step, self._success = 0, bool(info.get("is_success", False))
        self._start(obs)
        self._write(obs, info)
        return obs, info

    def step(self, action):
        if self._writer is not None:
            request_render(self.env)  # every frame of the video is a consumed observation
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._step += 1
        self._success = bool(info.get("is_success", False))
        if self._writer is not None:
            self._write(obs, info)
            if terminated or truncated:
                self.finish()
        return obs, reward, terminated, truncated, info

    def finish(self) -> Path | None:
        """Close the current episode's file and give it its final name; returns the path (None if nothing open)."""
        if self._writer is None:
            return None
        self._writer.close()
        self._writer = None
        outcome = "success" if self._success else "failure"
        final = self.video_dir / f"{self._episode_id.replace('/', '_')}_{outcome}.mp4"
        os.replace(self._tmp, final)
        self.last_path, self._tmp = final, None
        return final

    def close(self) -> None:
        self.finish()
        super().close()

    def _start(self, obs: dict) -> None:
        import imageio.v2 as imageio

        images = obs["images"]
        first = next(iter(images.values()))
        self._annotator = FrameAnnotator(first.shape[:2], len(images), self.text_lines, self.font_size)
        self.video_dir.mkdir(parents=True, exist_ok=True)
        self._tmp = self.video_dir / f".{self._episode_id.replace('/', '_')}.recording.mp4"
        self._writer = imageio.get_writer(
            self._tmp, format="FFMPEG", fps=self.fps, codec="libx264", quality=7, macro_block_size=BLOCK,
            ffmpeg_log_level="error",
        )
        self.frames_written = 0

    def _write(self, obs: dict, info: dict) -> None:
        check_rendered(info, "VideoRecorder")
        self._writer.append_data(self._annotator.compose(obs["images"], self._step, info))
        self.frames_written += 1
