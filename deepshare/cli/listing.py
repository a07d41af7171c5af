"""``deepshare policies`` and ``deepshare clusters``: what the registry and the cluster presets
offer; ``deepshare clusters import`` makes a cluster spec from a switch table or Kubernetes nodes."""

from __future__ import annotations

import argparse
from typing import Any
from pathlib import Path

from rich.console import Console

from deepshare.cli.args import flagged, gpus_per_node, print_line
from deepshare.cli.output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError, one_line, shown
from deepshare.core.topology import Topology, load_topology, preset_names


def cmd_policies(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    from deepshare.policies import PolicyInfo, policy_info, policy_names

    check_outputs({"--json": args.json}, {})
    if args.card is not None:
        return _show_card(args, out)
    rows = []
    for name in policy_names():
        try:
            info = policy_info(name)
        except DeepShareError as exc:  # an installed entry point that does not load: listed, not fatal
            info = PolicyInfo(name, f"cannot load: {exc}", lambda: None, heuristic=False)  # type: ignore[arg-type, return-value]
        rows.append((name, info))
    cards, nameless = _shipped_cards() if any(not info.heuristic for _, info in rows) else ({}, [])
    # A shipped card that cannot be read and names nobody (not YAML at all) belongs to no row: it is
    # said after the table, or as a warning beside the JSON, never left out.
    unnamed = [f"shipped card {card} cannot be read, and no policy name can be read from it: {problem}"
               for card, problem in nameless]
    if args.json:
        doc = [{"name": name, "description": info.description, "heuristic": info.heuristic,
                "takes_argument": info.takes_argument, "card": cards.get(name)} for name, info in rows]
        write_json(args.json, doc, out, "policy list")
        if to_stdout(args.json):
            for line in unnamed:
                print_line(err, f"deepshare: warning: {line}")
            return 0
    table = Table(title="registered policies", header_style="bold")
    table.add_column("name")
    table.add_column("description")
    for name, info in rows:
        card = cards.get(name)
        shipped = f"\nships {card['facts']} (deepshare policies --card {name})" if card else ""
        table.add_row(name, info.description + shipped)
    out.print(table)
    for line in unnamed:
        print_line(out, line)
    return 0


def _check_against(card: Any, weights: Path) -> list[str]:
    """:func:`check_card` with the file's metadata and encoding (rules, information, training
    compared too); a file that does not load is itself the problem."""
    from deepshare.policies.checkpoint import scorer_from_file
    from deepshare.policies.policy_card import check_card

    try:
        _, encoding, metadata = scorer_from_file(weights)
    except DeepShareError as exc:
        return check_card(card, weights) + [f"weights: {exc}"]  # its name and hash compared all the same
    return check_card(card, weights, metadata, encoding)


def _shipped_cards() -> tuple[dict[str, dict[str, object]], list[tuple[str, str]]]:
    """Registered name -> the key facts of the card of the file it loads by default (the cards'
    ``loaded_by``), with ``problem`` set when the card cannot be read or is out of step with its
    weights; and (card file name, problem) of each unreadable card from which no name can be read."""
    from deepshare.policies.checkpoint import DEFAULT_FILES, default_file
    from deepshare.policies.policy_card import card_path, loaded_by_problems, shipped_cards

    found: dict[str, dict[str, object]] = {}
    nameless: list[tuple[str, str]] = []
    by_path: dict[Path, dict[str, object]] = {}
    for path, card in shipped_cards():
        if isinstance(card, DeepShareError):
            found_problem = {"card": path.name, "facts": f"{path.name}: unreadable card ({card})", "problem": str(card)}
            names = _names_in(path)
            for name in names:
                found[name] = found_problem
            if not names:
                nameless.append((path.name, str(card)))
            continue
        weights = path.with_name(card.weights)
        problems = _check_against(card, weights) if weights.exists() else \
            [f"weights: {card.weights} not found", *loaded_by_problems(card, weights)]
        facts = card.facts() + (f" [card out of step: {'; '.join(problems)}]" if problems else "")
        summary = {
            "card": path.name, "weights": card.weights, "kind": card.kind, "what": card.what(), "teacher": card.teacher,
            "information": card.information.describe(), "commit": card.commit, "headline": card.headline(),
            "facts": facts, "problem": "; ".join(problems) or None,
        }
        for name in card.loaded_by:  # two cards claiming a name: the one with a problem is shown, not hidden
            if name not in found or summary["problem"] and not found[name]["problem"]:
                found[name] = summary
        by_path[path] = summary
    for name in DEFAULT_FILES:  # the card of a name's default file that leaves the name out: shown, out of step
        summary = by_path.get(card_path(default_file(name)))
        if name not in found and summary is not None:
            found[name] = summary
    return found, nameless


def _names_in(path: object) -> list[str]:
    """The ``loaded_by`` names an unreadable card still lists, read as plain YAML (best effort)."""
    try:
        from deepshare.core.documents import load_yaml

        raw = load_yaml(Path(str(path)).read_text(), str(path))
        names = raw.get("loaded_by") if isinstance(raw, dict) else None
        return [str(n) for n in names] if isinstance(names, list) else []
    except (DeepShareError, OSError, UnicodeDecodeError):
        return []


def _show_card(args: argparse.Namespace, out: Console) -> int:
    """``--card NAME|NAME=PATH|PATH``: the whole card of the file a name loads, or of a file."""
    from deepshare.policies.checkpoint import DEFAULT_FILES, default_file
    from deepshare.policies.policy_card import (
        CARD_SUFFIX, CHECKED, card_path, card_yaml, loaded_by_problems, loader_problems, read_card, shipped_cards,
    )

    given = args.card
    if not given.strip():  # an unset variable: it would be looked up as a policy named ''
        raise DeepShareError(f"--card {given!r}: an empty name; give a learned policy's name or a policy file's path")
    base, eq, arg = given.partition("=")
    target = Path(arg if eq else given)
    if eq and (not arg.strip() or target.name in ("", "..")):  # no file name: '' was the current folder, a traceback
        raise DeepShareError(f"--card {given!r}: expected NAME=PATH of a policy file, got no file name after '='")
    if eq:
        _check_loader(given, base)  # NAME is a learned policy that loads a file, before any file is read
    card_file: Path | None = None
    if not eq and not (target.is_file() or target.name.endswith(CARD_SUFFIX)):  # a name (a folder named so too)
        nameless: list[DeepShareError] = []  # unreadable shipped cards whose names cannot be read either (not YAML at all)
        claiming: list[Path] = []  # readable shipped cards listing the name; one whose loaded_by is wrong is shown
        readable: list[Path] = []
        for path, card in shipped_cards():
            if isinstance(card, DeepShareError):
                names = _names_in(path)
                if base in names:
                    raise card
                if not names:
                    nameless.append(card)
                continue
            readable.append(path)
            if base in card.loaded_by:
                claiming.append(path)
                if loaded_by_problems(card, path.with_name(card.weights)):
                    card_file = path
                    break
        card_file = card_file or (claiming[0] if claiming else None)
        if card_file is None and base in DEFAULT_FILES and card_path(default_file(base)) in readable:
            card_file = card_path(default_file(base))  # the card of its default file leaves it out: shown, out of step
        if card_file is None:
            from deepshare.policies import policy_info

            info = flagged("--card", policy_info, base)  # an unknown name: the registry's one-line error, after the flag
            if info.heuristic:
                kind = "a heuristic: it has no policy file"
            elif nameless:  # each one's own error: its card may be one of them
                kind = "no readable shipped card names it, and its card may be one that cannot be read: " + \
                    "; ".join(str(problem) for problem in nameless)
            else:
                kind = "it ships no card"
            raise DeepShareError(f"--card {given}: {kind}; give a learned policy's name or a policy file's path")
    elif target.name.endswith(CARD_SUFFIX):
        card_file = target
    else:
        card_file = card_path(target)
        if not target.exists() and not card_file.exists():
            raise DeepShareError(f"--card {given}: file not found")
        if not card_file.exists():
            raise DeepShareError(f"--card {given}: no card ({card_file} not found); "
                                 "`deepshare export-policy` writes a policy file with its card")
    card = read_card(card_file)
    # The file the user named is what is checked; given a card, the weights it names beside it.
    weights = card_file.with_name(card.weights) if target.name.endswith(CARD_SUFFIX) or card_file != card_path(target) else target
    # Both are inputs: --json naming either would replace a policy file or its card with the report.
    check_outputs({"--json": args.json}, {"--card": [str(card_file), str(weights)]})
    if weights.exists():
        problems = _check_against(card, weights)  # weights that do not load are out of step too (exit 1, card shown)
        check = (f"the card matches its weights: {CHECKED}" if not problems else "OUT OF STEP: " + "; ".join(problems))
    else:
        problems = [f"{card.weights} not found", *loaded_by_problems(card, weights)]
        check = f"OUT OF STEP: {card.weights} not found beside the card" + "".join(f"; {p}" for p in problems[1:])
    unfit = loader_problems(card, base) if eq else []  # NAME=PATH: NAME must load the file as the card's kind
    if unfit:
        problems += unfit
        check += f"\n# DOES NOT FIT {base}: " + "; ".join(unfit)
    status = EXIT_CHECK_FAILED if problems else 0  # out of step: a failed check, as `--check` elsewhere
    if args.json:
        doc = {"path": str(card_file), "card": card.model_dump(mode="json"), "problems": problems}
        write_json(args.json, doc, out, "policy card")
        if to_stdout(args.json):
            return status
    print_line(out, f"# {card_file}")
    print_line(out, card_yaml(card).rstrip("\n"))
    print_line(out, f"# {check}")
    return status


def _check_loader(given: str, base: str) -> None:
    """``--card NAME=PATH``'s NAME is a learned policy that loads a policy file (one of
    :data:`~deepshare.policies.policy_card.LOADERS`); else one line naming it. A name that is
    not the package's own is not looked up (``module:Attr`` would be imported)."""
    from deepshare.policies import policy_info
    from deepshare.policies.policy_card import LOADERS, LOADERS_SAID
    from deepshare.policies.registry import is_builtin

    if base in LOADERS:
        return
    why = ""
    if is_builtin(base):
        why = "a heuristic: it loads no policy file" if policy_info(base).heuristic else "its argument is no policy file"
    elif not base.strip():
        why = "no name before '='"
    raise DeepShareError(f"--card {given}: NAME: expected {LOADERS_SAID} (a learned policy that loads a policy file), "
                         f"got {shown(base)}" + (f" ({why})" if why else ""))


EXIT_CHECK_FAILED = 1
"""``policies --card``'s exit status for a card out of step with its weights or the registry, or
whose kind is not the one ``NAME=PATH``'s NAME loads (the card is still printed): 1, as a failed
``--check`` and any runtime failure; 2 stays a usage error."""


def _levels(topology: Topology) -> str:
    """The fabric's levels and their domain counts, lowest first: ``leaf (4) < spine (1)``."""
    fabric = topology.fabric
    return " < ".join(f"{level.name} ({len(fabric.by_level[i])})" for i, level in enumerate(fabric.levels))


def cmd_clusters(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--json": args.json}, {})
    presets = [(name, load_topology(name)) for name in preset_names()]
    if args.json:
        doc = [{"name": name, "nodes": len(t.nodes), "gpus": t.total_gpus, "description": t.describe(),
                "levels": [{"name": level.name, "domains": len(t.fabric.by_level[i])} for i, level in enumerate(t.fabric.levels)]}
               for name, t in presets]
        write_json(args.json, doc, out, "cluster list")
        if to_stdout(args.json):
            return 0
    width = max(10, *(len(name) for name, _ in presets))
    for name, topology in presets:
        print_line(out, f"{name:{width}s} {topology.describe()}; fabric {_levels(topology)}")
    return 0


def cmd_clusters_import(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pathlib import Path

    from deepshare.core.atomic import write_text_atomic
    from deepshare.core.fabric_import import import_cluster
    from deepshare.core.files import TRACE_BYTES, read_input_text

    if args.name is not None and not args.name.strip():  # an unset variable: the file's stem was used silently
        raise DeepShareError(f"--name {args.name!r}: an empty name; give the cluster's name, or leave the flag out "
                             "for TABLE's file name")
    stdin = args.table == "-"
    check_outputs({"--out": args.out}, {} if stdin else {"TABLE": args.table})
    text = read_input_text(args.table, "host table", TRACE_BYTES, allow_stdin=True)  # kubectl JSON can be large
    name = args.name or ("imported" if stdin else Path(args.table).stem) or "imported"
    imported = import_cluster(
        text, args.table, name=name, node_type_options=args.node_type or (), gpus_per_node=args.gpus_per_node,
        oversubscription=args.oversubscription or (), uplink_gbps=args.uplink_gbps or (), levels=args.level or (),
        nvlink=args.nvlink,
    )
    topology = imported.topology
    summary = f"{len(topology.nodes)} nodes, {topology.total_gpus} GPUs; fabric {_levels(topology)}"
    if args.out:
        write_text_atomic(args.out, imported.yaml, "cluster spec")
        print_line(out, f"wrote {one_line(args.out)}: {summary}")
    else:
        print_line(out, imported.yaml.rstrip("\n"))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "policies", "list the registered policies, with what each learned one ships",
                "deepshare policies", "deepshare policies --json -", "deepshare policies --card rl-hybrid",
                details="A learned policy's row ends with the key facts of the card of the file it loads (what it is, "
                "teacher, information model, commit, headline figure); a shipped card that cannot be read and "
                "names no policy is said after the table (with --json -, as a warning on standard error). --card "
                "shows a whole card and checks it against its weights and its loaded_by against what the registry "
                "loads (the line after it says what was compared); with NAME=PATH, NAME must be rl-base, rl-hybrid "
                "or rl-hybrid-preempt and load the file as the card's kind. It exits 1 when they are out of step or "
                "the kind does not fit NAME.")
    add_json_flag(p, "[{name, description, heuristic, takes_argument, card}] (with --card: {path, card, problems})")
    p.add_argument("--card", metavar="NAME|PATH", help="show the whole card of the file NAME loads (rl-hybrid), "
                   "of a policy file (NAME=PATH or PATH) or a card file, checked against its weights "
                   "(exit status 1 when out of step, or when NAME loads files of another kind)")
    p.set_defaults(func=cmd_policies)

    p = command(sub, "clusters", "list the cluster presets, or import a cluster spec (clusters import)",
                "deepshare clusters --json -", "deepshare clusters import topo.csv --out lingjun.yaml")
    add_json_flag(p, "[{name, nodes, gpus, description, levels: [{name, domains}]}]")
    p.set_defaults(func=cmd_clusters)
    csub = p.add_subparsers(dest="clusters_command", metavar="ACTION", required=False)
    p = command(
        csub, "import", "write a cluster spec from a host-to-switch table or kubectl node JSON",
        "deepshare clusters import topo.csv --gpus-per-node 8 --oversubscription PSW=4 --out lingjun.yaml",
        "deepshare clusters import nodes.json --level nvlink_domain=nvidia.com/gpu.clique --nvlink nvlink_domain "
        "--level leaf=topology.kubernetes.io/rack --level spine=example.com/spine --oversubscription leaf=2 --out k8s.yaml",
        details="TABLE is told apart by its content. A CSV switch table (Alibaba Lingjun's topo.csv): a header, "
        "then one row per host: its id, then its switches from the top level down (ip,DSW,PSW,ASW); the "
        "levels are named after the columns. Kubernetes nodes (kubectl get nodes -o json): the levels are "
        "node labels, given lowest first with --level; a node's GPUs are its nvidia.com/gpu capacity. Host ids "
        "and node names become the nodes' exact names; a switch is identified by its path from the top "
        "(names may repeat under different parents). Levels without --oversubscription or --uplink-gbps are "
        "non-blocking. Without --out the spec is printed.",
    )
    p.add_argument("table", metavar="TABLE",
                   help="a CSV switch table (ip,DSW,PSW,ASW) or kubectl get nodes -o json output; - reads standard input")
    p.add_argument("--out", metavar="SPEC.yaml", help="write the spec here (an existing file is replaced); default: print it")
    p.add_argument("--name", metavar="NAME", help="the cluster's name (default: TABLE's file name without its suffix)")
    p.add_argument("--gpus-per-node", type=gpus_per_node, metavar="G",
                   help="GPUs per node (a Kubernetes node's nvidia.com/gpu capacity wins; default 8)")
    p.add_argument("--node-type", action="append", metavar="FIELD=VALUE",
                   help="the nodes' hardware, repeatable: name, gpus, gpu_model, fabric (pcie|nvlink), pcie_switches, "
                   "intra_node_gbps, nvlink_gbps, nic_gbps (the node's total NIC bandwidth); default an 8 x H100 SXM "
                   "node (nvlink_gbps 3600, nic_gbps 3200)")
    p.add_argument("--level", action="append", metavar="NAME=LABEL_KEY",
                   help="Kubernetes nodes only, repeatable, lowest level first: a level and the node label naming its domain")
    p.add_argument("--oversubscription", action="append", metavar="LEVEL=R",
                   help="repeatable: each LEVEL domain's uplink is its nodes' NIC bandwidth over R (2 means 2:1)")
    p.add_argument("--uplink-gbps", action="append", metavar="LEVEL=G",
                   help="repeatable: each LEVEL domain's uplink in Gbit/s (0: non-blocking)")
    p.add_argument("--nvlink", metavar="LEVEL",
                   help="the lowest level's domains are NVLink domains spanning nodes (e.g. GB200 NVL72 racks)")
    p.set_defaults(func=cmd_clusters_import)
