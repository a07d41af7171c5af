"""The contention score: how much a link's load slows a new transfer, per link and per GPU.

For a link at utilisation ``u`` (clipped to 0..1) the score is ``u / (1 - u)``: in an M/M/1
queue a transfer's expected time is ``1 / (1 - u)`` times its time on an idle link, so the score
is the *extra* delay in units of the idle transfer time (0 idle, 1 at half load, 9 at 90%). It
is capped at :data:`CONTENTION_CAP` because it diverges as ``u -> 1``. A GPU's score is the
maximum over the links its traffic depends on: its own ``gpuK/...`` links (PCIe, NVLink) and
the node-wide ``nic`` and ``pcie`` links; a link without a known utilisation does not count.
"""

from __future__ import annotations

import re
from typing import Mapping

CONTENTION_CAP = 10.0
NODE_WIDE_LINKS = ("nic", "pcie")
_GPU_LINK = re.compile(r"^gpu(\d+)/")


def contention_score(u: float | None) -> float | None:
    """``min(u / (1 - u), CONTENTION_CAP)`` with ``u`` clipped to 0..1; ``None`` for ``None``."""
    if u is None:
        return None
    u = min(max(u, 0.0), 1.0)
    if u >= CONTENTION_CAP / (1.0 + CONTENTION_CAP):
        return CONTENTION_CAP
    return u / (1.0 - u)


def gpu_contention(utilization: Mapping[str, float | None]) -> dict[int, float]:
    """``{gpu index: score}`` for every GPU named in a ``gpuK/...`` link of ``utilization``."""
    shared = [contention_score(utilization.get(link)) for link in NODE_WIDE_LINKS]
    node_wide = max((s for s in shared if s is not None), default=0.0)
    out: dict[int, float] = {}
    for link, u in utilization.items():
        match = _GPU_LINK.match(link)
        if match is None:
            continue
        gpu = int(match.group(1))
        score = contention_score(u)
        out[gpu] = max(out.get(gpu, node_wide), node_wide if score is None else score)
    return dict(sorted(out.items()))
