"""The candidate-scoring network: one MLP applied to every candidate row (permutation-equivariant).

Training wraps it in an RLlib RLModule (``deepshare.rl.module``); serving and evaluation load its
weights alone with plain torch, so a shipped policy needs neither Ray nor RLlib to decide.
"""

from __future__ import annotations

import torch
from torch import nn

MASKED = torch.finfo(torch.float32).min
"""Score of a masked row: finite (no NaN in entropy terms) and below every real score."""


class CandidateScorer(nn.Module):
    def __init__(self, features: int, hidden: int = 64) -> None:
        super().__init__()
        self.features, self.hidden = features, hidden
        self.trunk = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 1)

    def forward(self, rows: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked logits [B, K], row embeddings [B, K, H]) for rows [B, K, F] and mask [B, K]."""
        embedded = self.trunk(rows)
        logits = self.head(embedded).squeeze(-1).masked_fill(mask <= 0, MASKED)
        return logits, embedded
