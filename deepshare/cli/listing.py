"""``deepshare policies`` and ``deepshare clusters``: what the registry and the cluster presets offer."""

from __future__ import annotations

import argparse

from rich.console import Console

from deepshare.cli.output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError
from deepshare.core.topology import load_topology, preset_names


def cmd_policies(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    from deepshare.policies import PolicyInfo, policy_info, policy_names

    check_outputs({"--json": args.json}, {})
    rows = []
    for name in policy_names():
        try:
            info = policy_info(name)
        except DeepShareError as exc:  # an installed entry point that does not load: listed, not fatal
            info = PolicyInfo(name, f"cannot load: {exc}", lambda: None, heuristic=False)  # type: ignore[arg-type, return-value]
        rows.append((name, info))
    if args.json:
        doc = [{"name": name, "description": info.description, "heuristic": info.heuristic,
                "takes_argument": info.takes_argument} for name, info in rows]
        write_json(args.json, doc, out, "policy list")
        if to_stdout(args.json):
            return 0
    table = Table(title="registered policies", header_style="bold")
    table.add_column("name")
    table.add_column("description")
    for name, info in rows:
        table.add_row(name, info.description)
    out.print(table)
    return 0


def cmd_clusters(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--json": args.json}, {})
    presets = [(name, load_topology(name)) for name in preset_names()]
    if args.json:
        doc = [{"name": name, "nodes": len(t.nodes), "gpus": t.total_gpus, "description": t.describe()} for name, t in presets]
        write_json(args.json, doc, out, "cluster list")
        if to_stdout(args.json):
            return 0
    for name, topology in presets:
        out.print(f"{name:10s} {topology.describe()}", markup=False, highlight=False)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "policies", "list the registered policies", "deepshare policies", "deepshare policies --json -")
    add_json_flag(p, "[{name, description, heuristic, takes_argument}]")
    p.set_defaults(func=cmd_policies)

    p = command(sub, "clusters", "list the cluster presets", "deepshare clusters --json -")
    add_json_flag(p, "[{name, nodes, gpus, description}]")
    p.set_defaults(func=cmd_clusters)
