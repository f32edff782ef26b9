"""Demonstrations as model inputs, built with the very functions `policy.act` uses (resize-with-pad, state
normalisation, prompt tokenisation, the task prompt of a language request), so training sees exactly what inference
will feed the model. Everything is preprocessed once into tensors; a batch is then a gather plus augmentation."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from oxygen_gym.model.pi05.config import PI05Config
from oxygen_gym.model.norm_stats import NormStats
from oxygen_gym.model.pi05.prompt import resize_with_pad, tokenize_prompt
from oxygen_gym.model.pi05.training import TrainBatch
from oxygen_gym.policies.language import task_prompt_ids
from oxygen_gym.policies.normalize import Normalizer

from .chunk_cut import predictable_chunk_lengths
from .collect.libero_hdf5 import Demo, demo_names, read_demos
from .image_augment import color_jitter, random_shift

LIBERO_SLOTS = ("base_0_rgb", "left_wrist_0_rgb")
LABELS = ("subtask", "memory")  # the per-step language targets a collection records  # policies/robots/libero_robot.py: libero base -> base, wrist -> left wrist


def data_paths(data: str | Path) -> list[Path]:
    """The collections `--data` names: one folder or file, or several joined by commas (expert demos plus DAgger
    rollouts, say)."""
    parts = [p.strip() for p in str(data).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"--data must name a collection folder, a LIBERO HDF5 file or a LeRobotDataset folder, "
                         f"got {data!r}")
    return [Path(p) for p in parts]


def load_demos(data: str | Path, need: tuple[str, ...] = ()) -> list[Demo]:
    """Every complete demo of every `*_demo.hdf5` file in each folder of `data` (see data_paths), or of one file,
    or of a LeRobotDataset folder (one with meta/info.json)."""
    return [d for collection in load_collections(data, need) for d in collection]


def load_collections(data: str | Path, need: tuple[str, ...] = ()) -> list[list[Demo]]:
    """load_demos, kept apart per collection of `data` (for --data-mix). `need`: the per-step labels (LABELS) the
    caller trains on, which a LeRobotDataset must then have as features (LIBERO HDF5 files keep their old rule:
    missing subtask labels read as empty)."""
    from .lerobot_format import is_lerobot_dataset, read_lerobot

    collections: list[list[Demo]] = []
    for path in data_paths(data):
        if is_lerobot_dataset(path):
            collections.append(read_lerobot(path, need))
            continue
        files = sorted(path.glob("*_demo.hdf5")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise ValueError(f"--data {path}: no *_demo.hdf5 files nor a LeRobotDataset (meta/info.json) (run "
                             f"`oxygen-gym collect libero --out {path}` first)")
        found = [d for f in files for d in read_demos(f, demo_names(f))]
        if not found:
            raise ValueError(f"--data {path}: the files hold no complete demos")
        collections.append(found)
    return collections


def compute_norm_stats(demos: list[Demo]) -> dict[str, NormStats]:
    """Quantile statistics (pi0.5's default normalisation) of the robot state and actions over every step."""
    def stats(x: np.ndarray) -> NormStats:
        x = x.astype(np.float64)
        return NormStats(mean=x.mean(0), std=x.std(0), q01=np.quantile(x, 0.01, axis=0), q99=np.quantile(x, 0.99, axis=0),
                         min=x.min(0), max=x.max(0))
    return {"state": stats(np.concatenate([d.policy_state for d in demos])),
            "actions": stats(np.concatenate([d.actions for d in demos]))}


class DemoDataset:
    """Per-step samples: two camera images (model resolution, uint8), prompt ids (instruction + binned state),
    the next `action_horizon` normalised actions (steps past the episode's end masked out of the loss, and with
    `cut_chunks` the labels the row's frame cannot predict: chunk_cut.py), and a per-step label (`label`:
    "subtask", or "memory" for the memory task's answer) as a language target after the task's prompt."""

    def __init__(self, demos: list[Demo], config: PI05Config, tokenizer, narrate_prompt: str,
                 norm_stats: dict[str, NormStats], progress: bool = True, label: str = "subtask",
                 cut_chunks: bool = True) -> None:
        if tuple(config.image_slots) != LIBERO_SLOTS:
            raise ValueError(f"config.image_slots must be {LIBERO_SLOTS} for LIBERO demos, got {config.image_slots}")
        if label not in LABELS:
            raise ValueError(f"label: {label!r}; expected one of {', '.join(LABELS)}")
        if label == "memory" and any(not d.memory for d in demos):
            bad = next(str(d.attrs.get("episode", "?")) for d in demos if not d.memory)
            raise ValueError(f"--label memory: demo {bad} has no memory labels (collected before they were recorded; "
                             "collect again into a new folder)")
        self.config, self.norm_stats = config, norm_stats
        size, horizon = config.vision.image_size, config.action_horizon
        state_norm, action_norm = (Normalizer("QUANTILES", {"q01": norm_stats[k].q01, "q99": norm_stats[k].q99})
                                   for k in ("state", "actions"))
        task_ids = task_prompt_ids(tokenizer, narrate_prompt)
        n = sum(len(d.frame_steps) for d in demos)
        self.images = torch.empty(n, 2, size, size, 3, dtype=torch.uint8)
        self.tokens = torch.zeros(n, config.max_token_len, dtype=torch.int64)
        self.token_masks = torch.zeros(n, config.max_token_len, dtype=torch.bool)
        self.actions = torch.zeros(n, horizon, config.action_dim)
        self.action_valid = torch.zeros(n, horizon, dtype=torch.bool)
        texts, label_ids = [], {}
        self.targets: list[str] = []  # each row's language target text
        i = 0
        for demo in tqdm(demos, desc="preprocess", unit="demo", disable=not progress):
            language = str(demo.attrs.get("language", ""))
            states = demo.policy_state
            actions = action_norm.normalize(demo.actions)
            kept = (predictable_chunk_lengths(demo.actions, demo.executed_actions, demo.subtasks, horizon)
                    if cut_chunks else np.full(len(demo), horizon))
            for j, s in enumerate(demo.frame_steps.tolist()):  # a row per step with images (Demo.image_steps)
                self.images[i, 0] = torch.from_numpy(np.array(resize_with_pad(demo.agentview[j], size, size)))
                self.images[i, 1] = torch.from_numpy(np.array(resize_with_pad(demo.wrist[j], size, size)))
                ids, mask = tokenize_prompt(tokenizer, language, state_norm.normalize(states[s]), config.max_token_len,
                                            config.discrete_state, config.state_pad_to)
                self.tokens[i], self.token_masks[i] = torch.from_numpy(ids), torch.from_numpy(mask)
                chunk = actions[s : s + horizon]
                self.actions[i, : len(chunk), : chunk.shape[1]] = torch.from_numpy(chunk)
                self.action_valid[i, : min(len(chunk), int(kept[s]))] = True
                target = demo.memory[s] if label == "memory" else demo.subtasks[s]
                if target not in label_ids:
                    label_ids[target] = tokenizer.encode(target) + [tokenizer.eos_id]
                texts.append((task_ids, label_ids[target]))
                self.targets.append(target)
                i += 1
        t_max = max(len(a) + len(b) for a, b in texts)
        self.text = torch.zeros(n, t_max, dtype=torch.int64)
        self.text_loss = torch.zeros(n, t_max, dtype=torch.bool)
        for r, (prompt, target) in enumerate(texts):
            self.text[r, : len(prompt) + len(target)] = torch.tensor(prompt + target)
            self.text_loss[r, len(prompt) : len(prompt) + len(target)] = True
        self.action_dims = demos[0].actions.shape[1]
        self.labels = sorted(label_ids)

    def __len__(self) -> int:
        return self.images.shape[0]

    def batch(self, index: torch.Tensor, generator: torch.Generator | None = None, shift: int = 0,
              jitter: float = 0.0) -> TrainBatch:
        """Rows `index` as a TrainBatch; `shift` > 0 applies a random translation of up to `shift` pixels per image
        (edge-replicated), `jitter` > 0 a colour jitter of that strength (image_augment.py)."""
        imgs = self.images[index].permute(0, 1, 4, 2, 3).float() / 255.0 * 2.0 - 1.0  # [B, 2, 3, S, S]
        if shift > 0:
            imgs = random_shift(imgs, shift, generator)
        if jitter > 0:
            imgs = color_jitter(imgs, jitter, generator)
        b = len(index)
        tok_len = int(self.token_masks[index].sum(1).max())
        text_len = int((self.text[index] != 0).sum(1).max())
        loss_mask = torch.zeros(b, self.config.action_horizon, self.config.action_dim, dtype=torch.bool)
        loss_mask[..., : self.action_dims] = self.action_valid[index][..., None]
        return TrainBatch(
            images=[imgs[:, 0], imgs[:, 1]], image_masks=[torch.ones(b, dtype=torch.bool)] * 2,
            tokens=self.tokens[index, :tok_len], token_masks=self.token_masks[index, :tok_len],
            actions=self.actions[index], action_loss_mask=loss_mask,
            text=self.text[index, :text_len], text_loss_mask=self.text_loss[index, :text_len],
        )

