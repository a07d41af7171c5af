"""Contention models: how much co-located jobs slow each other down, by name.

``base`` (the :class:`ContentionModel` / :class:`ContentionState` protocols, :class:`RunningJob`,
:func:`predictor`), ``profiled`` (the measured pairwise table), ``link/`` (bandwidth sharing on
NICs, PCIe/NVLink and rack uplinks, and its calibration); :data:`CONTENTION_MODELS` and
:func:`make_contention` here are the registry the CLI, the simulator and the services use.
``learned`` (a prior corrected online from measured throughputs: what a policy knows under
``--contention-knowledge learned``) and ``world`` (a simulated world that differs from the shipped
parameters, ``--perturb-contention`` / ``--true-params``) build on them.
"""

from __future__ import annotations

from typing import Callable

from deepshare.core.contention.base import ContentionModel, ContentionState, RunningJob, predictor
from deepshare.core.contention.profiled import ProfiledContention, ProfiledState
from deepshare.core.errors import DeepShareError, shown

__all__ = [
    "CONTENTION_MODELS", "ContentionModel", "ContentionState", "ProfiledContention", "ProfiledState",
    "RunningJob", "make_contention", "predictor",
]



def _link(**options: object) -> ContentionModel:
    from deepshare.core.contention.link import LinkContention  # the link model builds on this module

    return LinkContention(**options)  # type: ignore[arg-type]


CONTENTION_MODELS: dict[str, Callable[..., ContentionModel]] = {
    "profiled": ProfiledContention,
    "link": _link,
    "none": lambda: ProfiledContention(floor=1.0, name="none"),
}
"""Name -> factory. ``link`` shares link bandwidth (``deepshare.core.contention.link``); ``none`` is
the contention-free reference (every ratio 1)."""


def make_contention(name: str, **options: object) -> ContentionModel:
    try:
        factory = CONTENTION_MODELS[name]
    except KeyError:
        raise DeepShareError(
            f"--contention: unknown model {shown(name)}; expected one of {', '.join(sorted(CONTENTION_MODELS))}"
        ) from None
    try:
        return factory(**options)
    except TypeError as exc:  # an option the model does not take, or one of the wrong type
        raise DeepShareError(f"--contention {name}: invalid options {options!r} ({exc})") from None
