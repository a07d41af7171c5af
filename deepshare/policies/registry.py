"""Policy registry: name -> factory. Every lookup goes through here; nothing branches on names.

Heuristic names are ``ORDER+PLACEMENT`` (non-preemptive) and ``ORDER+PLACEMENT+preempt``,
e.g. ``las+consolidated`` or ``dlas+contention-aware+preempt``; the non-preemptive ones of the
:data:`BACKFILL_PLACEMENTS` have a ``+backfill`` variant (:mod:`deepshare.policies.backfill`),
their preemptive ones a ``+preempt+fill`` variant (preempt-or-fill,
:class:`~deepshare.policies.heuristic.HeuristicPolicy`'s ``fill``), and each has a ``+migrate`` variant
for the placements of :data:`~deepshare.policies.migrate.MIGRATING_PLACEMENTS` (contention-
triggered migration, :mod:`deepshare.policies.migrate`), e.g. ``srsf+uncontended+preempt+migrate``.
``NAME=ARG`` passes ``ARG`` to factories that take one (the learned policies' checkpoint paths).

Policies from outside the package come through the same three functions
(:mod:`deepshare.policies.plugins`): a ``package.module:ClassOrFactory`` spec anywhere a name
is accepted, and the names of installed entry points in the ``deepshare.policies`` group, which
are listed after the built-ins (a built-in name is never shadowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from deepshare.core.errors import DeepShareError, shown
from deepshare.policies import plugins
from deepshare.policies.base import Policy
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.migrate import MIGRATE_BELOW, MIGRATE_WINDOW_S, MIGRATING_PLACEMENTS, migrating
from deepshare.policies.heuristic_names import heuristic_orders, may_preempt
from deepshare.policies.placement import PLACEMENTS

BACKFILL_PLACEMENTS = ("consolidated", "topo-bestfit", "topo-balanced", "topo-aware")
"""Placements with ``+backfill`` variants (non-preemptive): the fabric suite's anchors, the
artifact's packer, and the contention-aware choice among the fabric's shapes."""


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    description: str
    factory: Callable[..., Policy]
    takes_argument: bool = False
    heuristic: bool = True
    argument_is_file: bool = True
    """Whether ``NAME=ARG``'s argument may name a file (a checkpoint; a plugin's, which may): the
    planner's never does, so ``planner=8`` is no input file even where a file named 8 exists."""


_REGISTRY: dict[str, PolicyInfo] = {}


def register(info: PolicyInfo) -> None:
    if info.name in _REGISTRY:
        raise ValueError(f"policy {info.name!r} registered twice")
    _REGISTRY[info.name] = info


def _register_heuristics() -> None:
    for order_name, (order, order_doc) in heuristic_orders().items():  # tenants' fairness orders too
        for place_name, (place, place_doc) in PLACEMENTS.items():
            for preemptive in (False, True):
                if preemptive and not may_preempt(order_name):
                    continue  # FIFO never ranks a queued job above a running one
                name = f"{order_name}+{place_name}" + ("+preempt" if preemptive else "")
                doc = f"{order_doc}; {place_doc}" + ("; preemptive" if preemptive else "")
                register(
                    PolicyInfo(
                        name,
                        doc,
                        lambda name=name, order=order, place=place, preemptive=preemptive: HeuristicPolicy(
                            name, order, place, preemptive
                        ),
                    )
                )
                if not preemptive and place_name in BACKFILL_PLACEMENTS:
                    register(
                        PolicyInfo(
                            f"{name}+backfill",
                            f"{doc}; backfilling with a reservation (EASY): the first job that does not fit holds "
                            "the earliest start the running jobs' estimated completions give it, and later jobs "
                            "start only if they do not delay it",
                            lambda name=f"{name}+backfill", order=order, place=place: HeuristicPolicy(
                                name, order, place, backfill=True
                            ),
                        )
                    )
                if preemptive and place_name in BACKFILL_PLACEMENTS:
                    register(
                        PolicyInfo(
                            f"{name}+fill",
                            f"{doc}; preempt-or-fill: when the preemptive rule would preempt nothing, the "
                            "non-preemptive greedy decides, so queued jobs outside the order's top set launch where "
                            "they fit",
                            lambda name=f"{name}+fill", order=order, place=place: HeuristicPolicy(
                                name, order, place, preemptive=True, fill=True
                            ),
                        )
                    )
                if place_name in MIGRATING_PLACEMENTS:
                    register(
                        PolicyInfo(
                            f"{name}+migrate",
                            f"{doc}; migrates a job that has run below {MIGRATE_BELOW:g}x its isolated speed for "
                            f"{MIGRATE_WINDOW_S:g} s to a placement predicted faster by enough to pay for the move",
                            lambda name=f"{name}+migrate", order=order, place=place, preemptive=preemptive: migrating(
                                name, HeuristicPolicy(name, order, place, preemptive)
                            ),
                        )
                    )


_register_heuristics()


def _register_learned() -> None:
    from deepshare.policies.checkpoint import learned_policy  # torch is imported only when one is built

    for name, hybrid, doc in (
        ("rl-base", False, "learned policy trained under estimated durations (an exact imitation of bsrsf+uncontended):"
                           " makes every placement decision and may wait"),
        ("rl-hybrid", True, "learned policy (rl-base's network refined by PPO); when it waits, the bsrsf+uncontended"
                            " heuristic's next launch (safety net)"),
    ):
        register(
            PolicyInfo(
                name,
                f"{doc}; shipped checkpoint, or {name}=PATH to a policy.pt from `deepshare train`",
                lambda path=None, name=name, hybrid=hybrid: learned_policy(name, path, hybrid),
                takes_argument=True,
                heuristic=False,
            )
        )

    from deepshare.policies.hybrid_preempt import DEFAULT_PREEMPTIVE, preemptive_hybrid

    register(
        PolicyInfo(
            "rl-hybrid-preempt",
            "rl-hybrid, except that whenever the file's preemptive heuristic (shipped: bsrsf+uncontended+preempt;"
            f" {DEFAULT_PREEMPTIVE} for a file that names none) would preempt, that heuristic's decision (preemptions"
            " and launches) is taken, within the file's gates (shipped: none); shipped checkpoint, or rl-hybrid-preempt=PATH",
            lambda path=None: preemptive_hybrid("rl-hybrid-preempt", path),
            takes_argument=True,
            heuristic=False,
        )
    )


_register_learned()


def _register_planner() -> None:
    from deepshare.policies.planner import Planner, parse_argument

    register(
        PolicyInfo(
            "planner",
            "slow: at each contested decision, rolls each leading heuristic's decision forward over K futures "
            "sampled from what the view allows (belief about remaining work, arrivals like the past), the base "
            "heuristic going on until the known jobs have finished (HORIZON 'end', no sampled arrivals; or HORIZON "
            "seconds, with arrivals sampled from the past), and takes the least jobs-in-system cost; "
            "planner=K[:BUDGET_S[:CONTENTION[:HORIZON]]] (default 8 futures, no budget, profiled contention in the "
            "copies, 'end')",
            lambda arg="": Planner(parse_argument(arg), make_policy),
            takes_argument=True,
            heuristic=False,
            argument_is_file=False,
        )
    )


_register_planner()


def policy_names(heuristics_only: bool = False) -> list[str]:
    """Built-in names (heuristics, then learned), then installed entry points' names."""
    names = [n for n, info in _REGISTRY.items() if info.heuristic or not heuristics_only]
    return names if heuristics_only else names + list(plugins.installed(set(_REGISTRY)))


def policy_info(name: str) -> PolicyInfo:
    """What ``name`` (``NAME``, ``NAME=ARG`` or ``module:Attribute[=ARG]``) refers to."""
    base = name.split("=", 1)[0]
    if base in _REGISTRY:
        return _REGISTRY[base]
    if plugins.is_import_spec(base):
        return _external_info(base, plugins.load_spec(base))
    ep = plugins.installed(set(_REGISTRY)).get(base)
    if ep is not None:
        return _external_info(base, plugins.load_entry_point(ep), f"entry point {ep.value}")
    raise DeepShareError(
        f"unknown policy {shown(base)}; run `deepshare policies` for the list "
        f"(names look like ORDER+PLACEMENT[+preempt], e.g. las+consolidated, or package.module:ClassOrFactory)"
    )


def is_builtin(name: str) -> bool:
    """Whether ``name`` (without ``=ARG``) is one of the package's own policies, not a plugin."""
    return name in _REGISTRY


def _external_info(name: str, obj: object, source: str = "") -> PolicyInfo:
    """A policy from outside the package: takes an optional ``=ARG``, never counted as a heuristic."""
    fallback = f"user policy {source or name}"
    return PolicyInfo(
        name, plugins.describe(obj, fallback),
        lambda arg="", obj=obj, name=name: plugins.build(obj, name, arg),
        takes_argument=True, heuristic=False,
    )


def make_policy(name: str) -> Policy:
    """Build the policy ``name`` (``NAME``, ``NAME=ARG`` or ``module:Attribute[=ARG]``)."""
    info = policy_info(name)
    base, eq, arg = name.partition("=")
    if eq and not info.takes_argument:
        raise DeepShareError(f"policy {base!r} takes no argument, got {shown(name)}")
    if eq and not arg:  # an unset variable after '=': it silently meant the default
        raise DeepShareError(f"policy {shown(name)}: expected an argument after '='{_argument_form(info)}, got none; "
                             f"leave out '=' for {base}'s default")
    return info.factory(arg) if info.takes_argument and arg else info.factory()


def argument_file(name: str) -> str | None:
    """The file ``NAME=ARG`` may name by its argument: None for no argument or a built-in policy
    whose argument is never a file (the planner's settings); the argument for any other (a
    checkpoint; a plugin's or an unknown name's, which may be one: an unknown name's own error
    comes where it is built)."""
    base, _, arg = name.partition("=")
    if not arg:
        return None
    return arg if not is_builtin(base) or policy_info(base).argument_is_file else None


def policy_identity(name: str, policy: object) -> tuple[object, ...]:
    """What makes two spellings one policy: its registry name (a plugin's spec as typed) and, for a
    built-in, its argument as the policy read it (a checkpoint's resolved file, the default one
    included; the planner's settings), else the argument's text (a file it names resolved): a
    plugin's argument can say more than the file or settings it ends up reading."""
    import os

    from deepshare.policies.planner import Planner

    base, _, arg = name.partition("=")
    info = policy_info(base).name
    if is_builtin(base):  # a plugin's argument may carry more than the file or settings it reads: its text
        metadata = getattr(policy, "metadata", None)
        if isinstance(metadata, dict) and isinstance(metadata.get("checkpoint"), str):
            return info, "checkpoint", os.path.realpath(metadata["checkpoint"])
        if isinstance(policy, Planner):
            return info, "planner", policy.config
    return info, "argument", os.path.realpath(arg) if arg and os.path.isfile(arg) else arg


def _argument_form(info: PolicyInfo) -> str:
    """`` (NAME=FORM)`` as the policy's description spells its argument (``rl-base=PATH``,
    ``planner=K[:BUDGET_S[:CONTENTION[:HORIZON]]]``), for an error message; empty when it does
    not (a plugin's docstring)."""
    import re

    form = re.search(rf"(?<![\w.+-]){re.escape(info.name)}=(\S+)", info.description)
    if not form:
        return ""
    shown = form.group(1).rstrip(".,;")
    while shown and shown[-1] in ")]" and shown.count(shown[-1]) > shown.count("(" if shown[-1] == ")" else "["):
        shown = shown[:-1].rstrip(".,;")  # the prose's closing bracket, not the form's
    return f" ({info.name}={shown})"
