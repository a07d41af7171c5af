"""A simulated world whose contention differs from the shipped parameters: something to learn.

With the shipped parameters running the simulation, a scheduler that starts from them (the
prior of :mod:`deepshare.core.contention.learned`) already knows everything. ``--perturb-contention
S`` draws each model's *sensitivity* to contention within ``[1 - S, 1 + S]`` around the shipped
one (seeded, one uniform draw per model in sorted name order) and runs the simulation on that:

* ``profiled``: each measured pairwise ratio of a victim of model ``m`` becomes ``ratio ** f_m``
  (the floor and the aggregation over co-runners stay as they are);
* ``link``: every placement sensitivity of model ``m`` (the factor on how much more than a fair
  share it loses when sharing a link) is multiplied by ``f_m`` (:attr:`LinkCatalog.scale`, on
  top of any scale the shipped catalog has); the shipped model's other settings
  (``hardware_scaling``) stay as they are.

``--true-params FILE`` (``link`` only) runs the simulation on a parameter file instead (the
format of ``deepshare calibrate --out``). :func:`shipped_of` is what the scheduler starts from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from deepshare.core.contention.base import ContentionModel, ContentionState
from deepshare.core.contention.profiled import ProfiledContention, ProfiledState
from deepshare.core.errors import DeepShareError
from deepshare.core.topology import Topology
from deepshare.core.workloads import Catalog

MAX_SPREAD = 0.95
"""Largest ``S``: every factor stays positive."""


def perturbation_factors(models: Sequence[str], spread: float, seed: int) -> dict[str, float]:
    """``{model: factor}``: one uniform draw in ``[1 - spread, 1 + spread]`` per model, in sorted
    name order, from ``numpy.random.default_rng(seed)``."""
    if not 0 <= spread <= MAX_SPREAD:
        raise DeepShareError(f"--perturb-contention: expected a spread from 0 to {MAX_SPREAD:g}, got {spread!r}")
    names = sorted(set(models))
    draws = np.random.default_rng(seed).uniform(1.0 - spread, 1.0 + spread, len(names))
    return {name: float(f) for name, f in zip(names, draws)}


@dataclass(frozen=True, eq=False)
class PerturbedContention:
    """``shipped`` with each model's sensitivity scaled by its factor (see the module doc)."""

    shipped: ContentionModel
    """The model the world perturbs: what a scheduler starts from."""
    spread: float
    seed: int = 0
    name: str = ""
    given: tuple[tuple[str, float], ...] = ()
    """Factors to use instead of drawing them (``(model, factor)``; models not named get 1): a
    world a test or a user writes down."""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.shipped.name)
        perturbation_factors((), self.spread, self.seed)  # checks the spread
        if any(not 0 < f < float("inf") for _, f in self.given):
            raise DeepShareError(f"perturbation factors must be positive, got {dict(self.given)}")
        if not isinstance(self.shipped, ProfiledContention) and not hasattr(self.shipped, "link_catalog"):
            raise DeepShareError(f"--perturb-contention: the {self.shipped.name!r} model has no sensitivities to perturb")
        if isinstance(self.shipped, ProfiledContention) and self.shipped.floor >= 1.0:  # `none`: every ratio is 1
            raise DeepShareError(f"--perturb-contention: the {self.shipped.name!r} model predicts no contention "
                                 "(its floor is 1), so a perturbed world would be the same world")

    def describe(self) -> str:
        if self.given:
            return f"{self.name}, sensitivities x " + ", ".join(f"{m} {f:g}" for m, f in self.given)
        return f"{self.name}, sensitivities x U[{1 - self.spread:g}, {1 + self.spread:g}] (seed {self.seed})"

    def factors(self, catalog: Catalog) -> dict[str, float]:
        """Each model's factor (the profiled table's models, or the link catalog's)."""
        if self.given:
            return dict(self.given)
        links = getattr(self.shipped, "link_catalog", None)
        if isinstance(self.shipped, ProfiledContention):
            return perturbation_factors(catalog.models, self.spread, self.seed)
        from deepshare.core.contention.link import default_link_catalog

        return perturbation_factors((links or default_link_catalog()).models, self.spread, self.seed)

    def new_state(self, topology: Topology, catalog: Catalog) -> ContentionState:
        factors = self.factors(catalog)
        if isinstance(self.shipped, ProfiledContention):
            return ProfiledState(self.shipped, _scaled_table(catalog, factors))
        from deepshare.core.contention.link import default_link_catalog

        # The shipped model with its catalog's sensitivity scales multiplied by the factors: every
        # other setting of it (hardware_scaling) stays, and a catalog's own scale is kept under them.
        links = self.shipped.link_catalog or default_link_catalog()  # type: ignore[attr-defined]
        scale = {m: links.scale.get(m, 1.0) * factors.get(m, 1.0) for m in {*links.scale, *factors}}
        return replace(self.shipped, link_catalog=replace(links, scale=scale)).new_state(topology, catalog)  # type: ignore[type-var]


def _scaled_table(catalog: Catalog, factors: dict[str, float]) -> Catalog:
    """A shallow copy of ``catalog`` whose pairwise table raises each victim row to its model's factor."""
    scaled = copy.copy(catalog)
    scaled.ratio_matrix = tuple(  # type: ignore[misc]
        tuple(r ** factors.get(key.model, 1.0) for r in row) for key, row in zip(catalog.keys, catalog.ratio_matrix)
    )
    return scaled


def shipped_of(world: ContentionModel) -> ContentionModel:
    """The model a scheduler starts from in ``world``: what a perturbed world perturbs, else the
    world's own model (its parameters are the shipped ones)."""
    return getattr(world, "shipped", world)


@dataclass(frozen=True, eq=False)
class KnownWorld:
    """The simulation runs ``world`` (``--true-params``); a scheduler starts from ``shipped``."""

    world: ContentionModel
    shipped: ContentionModel
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.world.name)

    def new_state(self, topology: Topology, catalog: Catalog) -> ContentionState:
        return self.world.new_state(topology, catalog)
