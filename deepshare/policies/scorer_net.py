"""The candidate-scoring network: one MLP applied to every candidate row (permutation-equivariant).

Training wraps it in an RLlib RLModule (``deepshare.rl.module``); serving and evaluation load its
weights alone with plain torch, so a shipped policy needs neither Ray nor RLlib to decide.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
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


def lone_forward(net: nn.Module) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``(rows [K, F], mask [K]) -> masked logits [K]`` for one observation, bit-for-bit what
    ``net`` computes for a batch of one, at under a quarter of the cost; None unless ``net`` is a
    :class:`CandidateScorer` with exactly the shipped layers (a changed network only loses the
    shortcut).

    A decision scores each of its steps alone (a 10,000-launch decision: 10,000 passes). Through
    ``net(...)`` each pass stacks a batch and goes through ``nn.Module.__call__`` for every layer,
    about 140 us of which the arithmetic is a fraction; this runs the same kernels on the same
    weights (``addmm`` and ``relu``: what the modules' ``forward`` calls) on a view of the
    observation, with detached weights (no autograd bookkeeping) and the mask applied in numpy
    (the very value ``masked_fill`` writes), about 30 us
    (``tests/serving/test_serving_scoring.py`` checks the scores are identical)."""
    if type(net) is not CandidateScorer:
        return None
    trunk = net.trunk
    shape = [type(layer) for layer in trunk] if isinstance(trunk, nn.Sequential) else None
    if shape != [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU] or type(net.head) is not nn.Linear:
        return None
    # Detached, transposed views of the weights: no autograd bookkeeping without a grad-mode
    # context. ``F.linear`` on a 2-D input with a bias is ``addmm(bias, input, weight.t())``;
    # calling that directly skips linear's own dispatch, and ``relu_`` reuses the buffer addmm
    # just made (the same values as ``relu``).
    (w1, b1), (w2, b2), (w3, b3) = [(m.weight.detach().t(), m.bias.detach()) for m in (trunk[0], trunk[2], net.head)]
    addmm = torch.addmm
    masked = np.float32(MASKED)

    def forward(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
        hidden = addmm(b1, torch.from_numpy(np.ascontiguousarray(rows)), w1)
        hidden = addmm(b2, hidden.relu_(), w2)
        logits = addmm(b3, hidden.relu_(), w3).numpy()[:, 0]  # a fresh buffer: written in place
        logits[~(mask > 0)] = masked  # masked_fill's exact value, without a torch call
        return logits

    return forward
