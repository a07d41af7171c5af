"""``deepshare export-policy``: a policy file and its card, written together from a trained file.

The weights go through :func:`deepshare.policies.checkpoint.policy_file_bytes` with the rules the
flags give, and are loaded back (as the policy of the card's kind) before anything replaces
``--out``; the card (:mod:`deepshare.policies.policy_card`) is written beside them. Each file is
written through a temporary file and a rename, so a reader never sees half of one; the card
names the weights' SHA-256, so a card left out of step with its weights is detected.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from deepshare.cli.args import INTEGER, print_line
from deepshare.cli.help import command
from deepshare.cli.output import check_outputs
from deepshare.core.bounds import MAX_TRAIN_SEED
from deepshare.core.files import resolved, same_file
from deepshare.core.names import CONTROL_CHARACTERS_SAID, has_control_character
from deepshare.core.output_set import OutputSet
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.written import NUMBER

KINDS = ("network", "hybrid", "hybrid-preempt")
HYBRID_KEYS = ("min_ratio", "utilisation_floor", "anchor_streak")
PREEMPT_KEYS = ("min_gain", "min_pressure")
DEFAULT_FIGURES_NOTE = "none measured at export; `deepshare evaluate --suite NAME --json F` then export again with --suite-figures F"


SHARE_KEYS = ("utilisation_floor",)
"""Rule keys that are a share of the cluster's GPUs, in [0, 1]: utilisation never exceeds 1, so a
floor of 5 would make the safety net fire on every decision (the card refuses it too)."""


def _pairs(flag: str, text: str, keys: tuple[str, ...]) -> dict[str, float]:
    """``k=v,k=v`` with ``k`` among ``keys`` and ``v`` a number >= 0 (``anchor_streak``: a whole
    number of launches >= 1; :data:`SHARE_KEYS`: at most 1); else one line naming ``flag`` and the
    key. A value is read only when written as plain ASCII digits (:data:`deepshare.core.written.NUMBER`):
    ``float`` alone reads ``1_0`` as 10 and ``١٠`` as 10, which would be written to the file."""
    from deepshare.policies.checkpoint import anchor_streak, rule_number

    out: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise DeepShareError(f"{flag} {text!r}: expected KEY=VALUE[,KEY=VALUE...] with KEY among {', '.join(keys)}")
        if key not in keys:
            raise DeepShareError(f"{flag}: unknown key {key!r}; expected {', '.join(keys)}")
        if key in out:
            raise DeepShareError(f"{flag}: {key} given twice")
        check = anchor_streak if key == "anchor_streak" else rule_number
        written = value.strip()
        # anything else is refused below, in the key's own words
        number: float | str = float(written) if NUMBER.fullmatch(written) else written
        out[key] = check(f"{flag}: {key}", number)
        if key in SHARE_KEYS and out[key] > 1:
            raise DeepShareError(f"{flag}: {key}: expected a share of the GPUs from 0 to 1, got {written!r}")
    return out


def _heuristic(flag: str, name: str, preemptive: bool | None = None) -> str:
    """A registered heuristic's name (``preemptive``: it must, or must not, end in ``+preempt``)."""
    from deepshare.policies import policy_info

    try:
        info = policy_info(name)
    except DeepShareError:
        info = None
    if info is None or not info.heuristic or info.name != name:
        raise DeepShareError(f"{flag} {name}: not a registered heuristic (`deepshare policies` lists them)")
    if preemptive is not None and name.endswith("+preempt") != preemptive:
        raise DeepShareError(f"{flag} {name}: expected a {'preemptive ' if preemptive else 'non-preemptive '}heuristic")
    return name


def _flag_rules(args: argparse.Namespace) -> dict[str, Any]:
    """The rule keys the flags set, checked before anything is loaded."""
    from deepshare.policies.anchor import check_anchor

    rules: dict[str, Any] = {}
    if args.hybrid_rules is not None or args.anchor is not None:
        hybrid: dict[str, Any] = _pairs("--hybrid-rules", args.hybrid_rules, HYBRID_KEYS) if args.hybrid_rules is not None else {}
        if args.anchor is not None:
            try:
                hybrid["anchor"] = list(check_anchor(args.anchor.split("+")))
            except ValueError as exc:
                raise DeepShareError(f"--anchor {args.anchor}: expected ORDER+PLACEMENT ({exc})") from None
        rules["hybrid_rules"] = hybrid
    if args.preemptive is not None:
        rules["preemptive"] = _heuristic("--preemptive", args.preemptive, preemptive=True)
    if args.preempt_rules is not None:
        rules["preempt_rules"] = _pairs("--preempt-rules", args.preempt_rules, PREEMPT_KEYS)
    return rules


def _rules(args: argparse.Namespace, metadata: dict[str, Any], flagged: dict[str, Any]) -> dict[str, Any]:
    """The exported file's rule keys: the source's (none with ``--drop-rules``), each replaced by its flags'."""
    from deepshare.policies.policy_card import RULE_KEYS

    rules = {} if args.drop_rules else {k: metadata[k] for k in RULE_KEYS if metadata.get(k) not in (None, {})}
    if args.hybrid_rules is None and "hybrid_rules" in flagged and isinstance(rules.get("hybrid_rules"), dict):
        # --anchor alone replaces the anchor: the source's other keys (its anchor_streak) stay;
        # they were dropped, and the file then decided otherwise than its source without a word
        flagged = {**flagged, "hybrid_rules": {**rules["hybrid_rules"], **flagged["hybrid_rules"]}}
    rules.update(flagged)
    if args.kind == "network" and rules:
        held = ", ".join(sorted(rules))
        raise DeepShareError(f"--kind network: the file would carry {held}, which rl-base ignores; "
                             "export it as --kind hybrid or hybrid-preempt, or add --drop-rules")
    if args.kind == "hybrid" and ("preemptive" in rules or "preempt_rules" in rules):
        raise DeepShareError("--kind hybrid: preemptive and preempt_rules belong to --kind hybrid-preempt (or add --drop-rules)")
    if args.kind == "hybrid-preempt" and "preemptive" not in rules:
        raise DeepShareError("--preemptive: a hybrid-preempt export names the heuristic it defers to (ORDER+PLACEMENT+preempt)")
    return rules


def _teacher(args: argparse.Namespace, metadata: dict[str, Any]) -> str | None:
    """The card's teacher: the source's ``imitates`` (what ``deepshare imitate`` recorded; a
    ``--teacher`` that says otherwise is refused, as the card check would find it out of step),
    else ``--teacher``."""
    from deepshare.policies.policy_card import teacher_problem

    imitates = metadata.get("imitates")
    if isinstance(imitates, str) and imitates:
        if args.teacher is not None and args.teacher != imitates:
            raise DeepShareError(f"--teacher {args.teacher}: {args.source} imitated {imitates} (its metadata's imitates); "
                                 "leave --teacher out")
        problem = teacher_problem(imitates)
        if problem:  # named as the source's, not as the card's teacher field it would become
            raise DeepShareError(f"{args.source}: metadata imitates: {problem}; the card's teacher is what the file imitated")
        return imitates
    if args.teacher is not None:
        return None if args.teacher == "none" else _heuristic("--teacher", args.teacher)
    model = metadata.get("model") if isinstance(metadata.get("model"), dict) else {}
    if model.get("init_from"):
        raise DeepShareError(
            f"--teacher: {args.source} was trained from {model['init_from']} (model.init_from); name the heuristic that "
            "file imitated (--teacher ORDER+PLACEMENT), or --teacher none"
        )
    return None


MAX_SEED = MAX_TRAIN_SEED
"""The largest seed ``deepshare train --seed`` takes: the seeds tried are training seeds."""


def _seeds(text: str | None) -> list[int]:
    if text is None:
        return []
    try:  # ASCII digits only, as every integer flag: int() also reads 1_0 as 10 and other scripts' digits
        seeds = [int(s) if INTEGER.fullmatch(s) else int("not a number") for s in text.split(",")]
    except ValueError:
        raise DeepShareError(f"--seeds-tried {text!r}: expected integers separated by commas, e.g. 0,1,2") from None
    if any(not 0 <= s <= MAX_SEED for s in seeds):
        raise DeepShareError(f"--seeds-tried {text!r}: expected seeds from 0 to {MAX_SEED} (as train --seed)")
    if len(set(seeds)) != len(seeds):
        raise DeepShareError(f"--seeds-tried {text!r}: a seed listed twice")
    return seeds


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that would be ignored or would give the card a text nobody typed, before any
    work: a control character in ``--out``'s file name (the card names the file, and the summary
    line prints it), ``--figures-of`` without ``--suite-figures`` (it names the policy in those
    results), ``--figures-note`` with them (the note says why there are none), a blank
    ``--summary``, ``--figures-note`` or ``--training-command`` (each fell back to its default
    without a word) and a ``--loaded-by`` name given twice."""
    name = Path(args.out).name
    if has_control_character(name):
        raise DeepShareError(f"--out {args.out!r}: expected a file name without {CONTROL_CHARACTERS_SAID}: "
                             "its card names it")
    if args.figures_of is not None and not args.suite_figures:
        raise DeepShareError(f"--figures-of {args.figures_of}: names the policy in --suite-figures results; "
                             "give --suite-figures too, or leave --figures-of out")
    if args.figures_note is not None and args.suite_figures:
        raise DeepShareError("--figures-note: says why no figures are given; with --suite-figures the card has "
                             "figures, so leave --figures-note out")
    for flag, value in (("--summary", args.summary), ("--figures-note", args.figures_note),
                        ("--training-command", args.training_command)):
        if value is not None and not value.strip():
            raise DeepShareError(f"{flag} {value!r}: expected some text (leave {flag} out for the default)")
    seen: set[str] = set()
    for loader in args.loaded_by or ():
        if loader in seen:
            raise DeepShareError(f"--loaded-by {loader}: given twice; give each name once")
        seen.add(loader)


def _check_loaded_by(args: argparse.Namespace) -> None:
    """The card's ``loaded_by`` says what the registry loads (``checkpoint.DEFAULT_FILES``), before
    any work: each ``--loaded-by`` name is a learned policy that loads a shipped file by default,
    loads it as ``--kind``, and loads ``--out`` itself (the shipped file this export replaces) or a
    file of its name (one to copy over it: until then its card is out of step, other weights); and
    ``--out`` being the file a name loads by default needs that name (the card would leave it out)."""
    from deepshare.policies.checkpoint import DEFAULT_FILES, default_file
    from deepshare.policies.policy_card import KIND_LOADER, LOADERS_SAID

    for name in args.loaded_by or ():
        if name not in DEFAULT_FILES:
            raise DeepShareError(f"--loaded-by {name}: expected {LOADERS_SAID} (a learned policy that loads a shipped "
                                 f"file by default), got {name!r}")
        if KIND_LOADER[args.kind] != name:
            raise DeepShareError(f"--loaded-by {name}: {name} does not load a file as --kind {args.kind} "
                                 f"({KIND_LOADER[args.kind]} does)")
        # --out is the file itself, or one of its name to copy over it (written elsewhere first, or
        # into a checkout other than the installed package that runs): its card lists the name
        if not (same_file(args.out, default_file(name)) or Path(args.out).name == DEFAULT_FILES[name]):
            raise DeepShareError(f"--loaded-by {name}: {name} loads {default_file(name)} by default, not --out "
                                 f"{args.out}; leave --loaded-by out (the file loads as {name}=PATH), or name "
                                 f"--out {DEFAULT_FILES[name]} to copy it over the shipped file")
    for kind, name in KIND_LOADER.items():
        if name not in (args.loaded_by or ()) and same_file(args.out, default_file(name)):
            raise DeepShareError(f"--out {args.out}: {name} loads this file by default; give --loaded-by {name} "
                                 f"(with --kind {kind}), or write another file")


def _commit(args: argparse.Namespace) -> tuple[str | None, bool, str | None]:
    """(sha, dirty, note): ``--commit``'s, else the checkout's the package runs from."""
    import re

    if args.commit is not None:
        if not re.fullmatch(r"[0-9a-f]{7,40}", args.commit):
            raise DeepShareError(f"--commit {args.commit!r}: expected a commit sha (7 to 40 lowercase hex digits)")
        return args.commit, False, None
    from deepshare.experiments.provenance import commit

    found = commit()
    if not found:
        return None, False, "exported outside a git checkout (or without git): no commit recorded"
    return str(found["sha"]), bool(found["dirty"]), None


def _judged_as(doc: Any, args: argparse.Namespace) -> list[str]:
    """The names under which a suite may have judged this file: ``NAME=PATH`` entries whose PATH is
    the source or ``--out``, then the ``--loaded-by`` names (a bare registered name measured the
    file it loaded then, which only the exporter can vouch for)."""
    summary = doc.get("summary") if isinstance(doc, dict) else None
    ours = []
    for entry in summary if isinstance(summary, dict) else ():
        _, eq, path = str(entry).partition("=")
        if eq and any(_same_file(path, p) for p in (args.source, args.out)):
            ours.append(str(entry))
    return [*ours, *(args.loaded_by or ())]


def _same_file(a: str, b: str) -> bool:
    try:
        return resolved(a) == resolved(b)
    except OSError:
        return False


def _load_back(path: Path, kind: str) -> dict[str, Any]:
    """Build the policy ``path`` makes as ``kind`` (its rules checked); its metadata."""
    from deepshare.policies.checkpoint import learned_policy
    from deepshare.policies.hybrid_preempt import preemptive_hybrid

    if kind == "hybrid-preempt":
        return dict(preemptive_hybrid("rl-hybrid-preempt", str(path)).learned.metadata)
    return dict(learned_policy("export", path, hybrid=kind == "hybrid").metadata)


def cmd_export_policy(args: argparse.Namespace, out: Console, err: Console) -> int:
    import tempfile

    from pydantic import ValidationError

    from deepshare.core.documents import load_json
    from deepshare.core.files import CONFIG_BYTES, read_input_text
    from deepshare.core.atomic import mode_for
    from deepshare.policies.checkpoint import policy_file_bytes, scorer_from_file
    from deepshare.policies.policy_card import (
        RULE_KEYS, PolicyCard, Rules, card_path, card_problems, card_yaml, figures_from_suite, information_of,
        summary_of, training_of,
    )

    _check_flags(args)
    dest = Path(args.out)
    if dest.suffix != ".pt":
        raise DeepShareError(f"--out {args.out}: expected a file name ending in .pt (its card goes beside it as NAME.card.yaml)")
    card_file = card_path(dest)
    check_outputs({"--out": args.out, "--out (its card)": str(card_file)},
                  {"SRC": args.source, "--suite-figures": args.suite_figures or None})
    for name in args.loaded_by or ():
        from deepshare.policies import policy_info

        try:
            heuristic = policy_info(name).heuristic
        except DeepShareError as exc:
            raise DeepShareError(f"--loaded-by: {exc}") from None
        if heuristic:
            raise DeepShareError(f"--loaded-by {name}: a heuristic loads no policy file")
    _check_loaded_by(args)
    seeds = _seeds(args.seeds_tried)
    flagged = _flag_rules(args)
    if args.teacher not in (None, "none"):
        _heuristic("--teacher", args.teacher)
    commit, dirty, commit_note = _commit(args)

    scorer, encoding, metadata = scorer_from_file(args.source)
    try:
        training = training_of(metadata, args.training_command, seeds)
    except ValidationError as exc:  # the card's training section, validated alone
        raise DeepShareError(f"{card_file}: training: {card_problems(exc)}") from None
    if seeds and training.seed is not None and training.seed not in seeds:
        raise DeepShareError(f"--seeds-tried {args.seeds_tried!r}: must include the file's training seed {training.seed}")
    rules = _rules(args, metadata, flagged)
    teacher = _teacher(args, metadata)
    figures = {}
    for path in args.suite_figures or ():
        doc = load_json(read_input_text(path, "suite results", CONFIG_BYTES), path, "the JSON of `deepshare evaluate --suite`")
        suite, found = figures_from_suite(doc, args.figures_of, path, _judged_as(doc, args))
        if suite in figures:
            raise DeepShareError(f"--suite-figures {path}: suite {suite!r} given twice")
        figures[suite] = found

    exported = {k: v for k, v in metadata.items() if k not in RULE_KEYS}
    exported.update(rules)
    data = policy_file_bytes(scorer.net, encoding, exported)
    folder = dest.parent if str(dest.parent) else Path(".")
    with OutputSet() as outputs:  # the policy file and its card are put in place together, or neither is
        try:
            fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{dest.name[:50]}.", suffix=".tmp")
        except OSError as exc:
            raise DeepShareError(f"--out {args.out}: cannot write there: {exc.strerror or exc}") from None
        tmp = Path(tmp_name)
        outputs.add_written(tmp, dest, "policy file")  # removed on any failure from here on
        try:
            with os.fdopen(fd, "wb") as fh:  # through the descriptor: a link put in the file's place gets nothing
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode_for(dest))  # mkstemp made it 0600; a policy file is as readable as any output
                os.fsync(fh.fileno())
        except OSError as exc:
            raise DeepShareError(f"--out {args.out}: cannot write there: {exc.strerror or exc}") from None
        try:  # the file loads, as the policy its card says, with its rules
            loaded = _load_back(tmp, args.kind)
        except DeepShareError as exc:  # the source's metadata (its rules) is SRC's fault; the file itself, --out's
            raise DeepShareError(str(exc).replace(f"policy checkpoint {tmp}: metadata",
                                                  f"{args.source} (exported as --kind {args.kind}): metadata")
                                 .replace(str(tmp), str(dest))) from None
        try:
            card_rules = Rules.model_validate({k: loaded.get(k) for k in RULE_KEYS})
            card = PolicyCard(
                card=1, weights=dest.name, weights_sha256=hashlib.sha256(data).hexdigest(), loaded_by=list(args.loaded_by or ()),
                kind=args.kind, summary=args.summary or summary_of(args.kind, card_rules), teacher=teacher,
                training=training,
                information=information_of(metadata, {k: getattr(encoding, k, None) for k in ("extra_features", "offer_order")}),
                commit=commit, commit_dirty=dirty, commit_note=commit_note, rules=card_rules, figures=figures,
                figures_note=None if figures else (args.figures_note or DEFAULT_FIGURES_NOTE), notes=args.notes,
            )
        except ValidationError as exc:
            raise DeepShareError(f"{card_file}: {card_problems(exc)}") from None
        # the card is renamed first: killed between the two renames, the new card stands beside the old
        # weights (or none), which `policies --card` reports out of step; new weights without their card passed unseen
        outputs.add_text(card_file, card_yaml(card), "policy card", first=True)
        outputs.commit()
    print_line(out, f"wrote {one_line(str(dest))} and {one_line(str(card_file))}")
    print_line(out, one_line(card.facts()))  # a card's texts may hold a newline; the summary is one line
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(
        sub, "export-policy", "write a policy file with its rules and its card from a trained policy.pt",
        "deepshare export-policy runs/est_ppo_s0/policy.pt --out deepshare/data/policies/rl_est_ppo.pt --kind hybrid "
        "--loaded-by rl-hybrid --anchor bsrsf+uncontended --teacher bsrsf+uncontended --suite-figures runs/suite/loaded.json",
        "deepshare export-policy runs/est_imitate/policy.pt --out my_preempt.pt --kind hybrid-preempt "
        "--preemptive bsrsf+uncontended+preempt --hybrid-rules min_ratio=1.01,utilisation_floor=0",
        details="The weights, encoding and metadata are the source's; its rules (hybrid_rules, preemptive, preempt_rules) "
        "are kept unless --drop-rules, each replaced by the flags that set it. The file is loaded back as the policy "
        "its kind names (network: rl-base, hybrid: rl-hybrid, hybrid-preempt: rl-hybrid-preempt) before --out is "
        "replaced. The card, NAME.card.yaml beside --out, records the names that load it, what it is, its teacher, "
        "training config and command, information model, the commit exported at, its rules and its suite figures; "
        "`deepshare policies --card` shows it.",
    )
    p.add_argument("source", metavar="SRC.pt", help="a policy file from `deepshare train` or `deepshare imitate`")
    p.add_argument("--out", required=True, metavar="DEST.pt", help="the policy file to write (an existing file is replaced), "
                   "and its card beside it as DEST.card.yaml")
    p.add_argument("--kind", required=True, choices=KINDS,
                   help="what the file is: the network alone (rl-base), with its safety net (rl-hybrid), "
                   "or with preemption too (rl-hybrid-preempt)")
    p.add_argument("--loaded-by", action="append", metavar="NAME",
                   help="the name that loads --out by default: rl-base, rl-hybrid or rl-hybrid-preempt, whichever "
                   "loads --kind's files, for the shipped file it loads or a file of that name to copy over it (required "
                   "for the shipped file; each name once)")
    p.add_argument("--hybrid-rules", metavar="KEY=V,...", help="the safety net's thresholds: min_ratio (a number >= 0), "
                   "utilisation_floor (a share from 0 to 1), and anchor_streak (launches one choice of the anchor's row makes, "
                   "1 to 1024); unset keys take the defaults")
    p.add_argument("--anchor", metavar="ORDER+PLACEMENT", help="the heuristic the safety net falls back to (the source's "
                   "other hybrid_rules stay; with --hybrid-rules, the keys that flag sets and this one)")
    p.add_argument("--preemptive", metavar="ORDER+PLACEMENT+preempt", help="the heuristic rl-hybrid-preempt defers to when it preempts")
    p.add_argument("--preempt-rules", metavar="KEY=V,...", help="gates on that deferral: min_gain, min_pressure")
    p.add_argument("--drop-rules", action="store_true", help="start from no rules instead of the source's")
    p.add_argument("--teacher", metavar="HEURISTIC|none", help="the heuristic the network imitated "
                   "(default: the source's `imitates`, which --teacher may not contradict; required when it was "
                   "started from another file)")
    p.add_argument("--training-command", metavar="CMD", help="the command that trained it (default: rebuilt from its metadata, "
                   "every recorded setting as its flag; required when no flag sets one, e.g. a Tune trial's grid values)")
    p.add_argument("--seeds-tried", metavar="S,S,...", help="every training seed of this recipe run (default: the file's seed)")
    p.add_argument("--suite-figures", action="append", metavar="RESULTS.json",
                   help="`deepshare evaluate --suite --json` output to take figures from (repeatable; the first is the headline)")
    p.add_argument("--figures-of", metavar="NAME", help="with --suite-figures: the policy's name in those results (default: its NAME=PATH entry "
                   "naming SRC or --out, a --loaded-by name, or the suite's only learned policy)")
    p.add_argument("--figures-note", metavar="TEXT", help="why no figures are given (without --suite-figures)")
    p.add_argument("--commit", metavar="SHA", help="the commit to record (default: the checkout's the package runs from)")
    p.add_argument("--summary", metavar="TEXT", help="what it is, in a sentence (default: written from its kind and rules)")
    p.add_argument("--notes", metavar="TEXT", help="anything else a reader should know")
    p.set_defaults(func=cmd_export_policy)
