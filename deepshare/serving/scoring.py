"""The scorer a lone request uses: one observation at a time, with a batch's exact scores.

A lone request (no other request deciding) scores each step alone, three or so forward passes
of a tiny MLP per small request. A :class:`~deepshare.policies.checkpoint.TorchScorer` called on
one observation takes the shortcut of :func:`~deepshare.policies.scorer_net.lone_forward`
(cheaper than ``batch([obs])``, which stacks and splits, and far cheaper than the network's
modules; bit for bit the same scores: ``tests/serving/test_serving_scoring.py`` checks;
``bench/forward_cost.py`` measures a pass inside a large decision); any other batch scorer is
called as a batch of one.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

BatchScorer = Callable[[list[dict[str, np.ndarray]]], list[np.ndarray]]
Scorer = Callable[[dict[str, np.ndarray]], np.ndarray]


def lone_scorer(batch: BatchScorer) -> Scorer:
    """``obs -> batch([obs])[0]``, through the shortcut when ``batch`` is a
    :class:`~deepshare.policies.checkpoint.TorchScorer`'s."""
    from deepshare.policies.checkpoint import TorchScorer

    owner = getattr(batch, "__self__", None)
    if type(owner) is TorchScorer:
        return owner  # called on one observation, it takes the shortcut when its network allows
    return lambda obs: batch([obs])[0]
