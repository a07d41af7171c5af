"""Range checks of :class:`~deepshare.rl.env.EnvConfig`'s reward, simulation and safety-net
numbers and its contention model, so a bad training YAML is one line naming the field before
Ray starts (a NaN reward scale or an ``ewma_alpha`` of 2 trained on, a ``round_s`` of -5 or an
unknown ``contention`` failed inside an env runner). ``config`` is typed loosely: env.py
imports this module."""

from __future__ import annotations

import math
from typing import Any

from deepshare.core.bounds import MAX_ROUND_S, finite_in
from deepshare.core.contention import CONTENTION_MODELS
from deepshare.core.errors import DeepShareError, shown

_NUMBERS = (  # field, low, high, low_open, what is expected
    ("reward_scale", 0.0, math.inf, True, "a finite number > 0"),
    ("w1", 0.0, math.inf, False, "a finite number >= 0"),
    ("w2", 0.0, math.inf, False, "a finite number >= 0"),
    ("ewma_alpha", 0.0, 1.0, True, "a number above 0 and at most 1"),
    ("hybrid_min_ratio", 0.0, math.inf, False, "a finite number >= 0 (as a policy file's hybrid_rules)"),
    ("hybrid_utilisation_floor", 0.0, 1.0, False, "a share of the GPUs from 0 to 1 (as a policy file's hybrid_rules)"),
)


def check_env_numbers(config: Any) -> None:
    """A DeepShareError ``env config: FIELD: expected ..., got ...`` for the first bad field."""
    for name, low, high, low_open, expected in _NUMBERS:
        value = getattr(config, name)
        if not finite_in(value, low, high, low_open=low_open):
            raise DeepShareError(f"env config: {name}: expected {expected}, got {shown(value)}")
    if config.round_s is not None and not finite_in(config.round_s, 1, MAX_ROUND_S):
        raise DeepShareError(f"env config: round_s: expected seconds from 1 to {MAX_ROUND_S:,.0f} (as --round-s) "
                             f"or null, got {shown(config.round_s)}")
    steps = config.max_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise DeepShareError(f"env config: max_steps: expected an integer >= 1, got {shown(steps)}")
    if config.contention not in CONTENTION_MODELS:
        raise DeepShareError(f"env config: contention: unknown model {shown(config.contention)}; expected one of "
                             f"{', '.join(sorted(CONTENTION_MODELS))}")
