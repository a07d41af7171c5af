"""How ``imitate --teacher`` names the rollout planner that labels the states of expert iteration:
the parser the CLI runs, and that a policy card's rebuilt command is checked with."""

from __future__ import annotations

from dataclasses import replace

from deepshare.core.errors import DeepShareError, shown
from deepshare.policies.planner import PlannerConfig, parse_argument

TEACHER_FORM = "planner=K[:BUDGET_S[:CONTENTION[:HORIZON]]]"
"""How ``--teacher`` names the planner."""


def parse_teacher(text: str, candidates: str | None = None) -> PlannerConfig:
    """The planner a ``--teacher`` names: ``planner`` (its defaults) or ``planner=K[:BUDGET_S[:CONTENTION[:HORIZON]]]``;
    ``candidates``: ``A,B,...``, registered heuristics replacing the planner's (the first is the base),
    e.g. non-preemptive ones only, so that every decision is one the rows can express. Each is
    built here, as the planner builds it, so that a name it would refuse (``srsf+packed=3``: the
    heuristics take no argument) is refused before any episode is played. A name that is not one
    of the package's own (``module:Attr``, a plugin's entry point: never a heuristic) is refused
    without being loaded, so that checking a policy card's recorded candidates imports nothing."""
    name, equals, arg = text.partition("=")
    if name != "planner" or (equals and not arg):  # 'planner=' is an unset variable, as the registry reads it
        if name == "planner":
            raise DeepShareError(f"--teacher {shown(text)}: an empty argument after '='; give {TEACHER_FORM} or "
                                 "planner alone for its defaults")
        raise DeepShareError(f"--teacher {shown(text)}: the teacher must be the rollout planner, {TEACHER_FORM} "
                             "(without --teacher the config's anchor heuristic teaches)")
    try:
        config = parse_argument(arg)
    except DeepShareError as exc:
        raise DeepShareError(f"--teacher: {exc}") from None
    if candidates is None:
        return config
    from deepshare.policies.registry import is_builtin, make_policy, policy_info

    names = tuple(n.strip() for n in candidates.split(","))
    for n in names:
        try:  # a plugin (module:Attr, an entry point) is never a heuristic: refused unloaded, importing nothing
            heuristic = is_builtin(n.partition("=")[0]) and policy_info(n).heuristic
        except DeepShareError as exc:
            raise DeepShareError(f"--teacher-candidates: {n!r}: {exc}") from None
        if not heuristic:
            raise DeepShareError(f"--teacher-candidates: {n!r} is not a registered heuristic; expected "
                                 "ORDER+PLACEMENT[+preempt],... e.g. bsrsf+uncontended,srsf+packed")
        try:  # built as the planner builds it: a name the registry knows may still be refused (an argument)
            make_policy(n)
        except DeepShareError as exc:
            raise DeepShareError(f"--teacher-candidates: {n!r}: {exc}") from None
    return replace(config, candidates=names)
