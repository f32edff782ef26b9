"""QwenOFT's parallel-decoding head (StarVLA `framework/VLM4A/QwenOFT.py`, `MLP_ActionHeader.py`): `horizon` query
tokens run through the backbone's own layers over the prefix KV, and an MLP-ResNet regresses each query's final
normed hidden state to one action, the whole chunk in one pass (L1 regression: no flow loop, no noise).

In the engine the queries are a continuation of the prefix, like a language task's prompt: they are written in the
row's scratch region past the prefix (cache indices [length, length + horizon), M-RoPE positions from the prefix's
next position), where the prefix's mask never lets any later reader see them; the prefix itself is never written.
"""
from __future__ import annotations

import torch
from torch import nn

from .encoders import MLPResNet
from .starvla_config import StarVLAConfig


class OFTHead(nn.Module):
    """Parameter names: StarVLA's `L1RegressionActionHead` (`model.*`, the MLPResNet)."""

    def __init__(self, config: StarVLAConfig) -> None:
        super().__init__()
        w, d = config.backbone_width, config.oft
        self.dims, self.action_dim = d, config.action_dim
        self.model = MLPResNet(d.num_blocks, w, 2 * w, config.action_dim)

    def query_tokens(self, rows: int, horizon: int, device) -> torch.Tensor:
        return torch.full((rows, horizon), self.dims.query_token, dtype=torch.long, device=device)

    def regress(self, query_hidden: torch.Tensor) -> torch.Tensor:
        """`[B, H, W]` final normed hidden states of the queries -> actions `[B, H, A]` (fp32)."""
        return self.model(query_hidden.to(self.model.fc1.weight.dtype)).float()
