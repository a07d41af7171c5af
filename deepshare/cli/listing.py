"""``deepshare policies`` and ``deepshare clusters``: what the registry and the cluster presets
offer; ``deepshare clusters import`` makes a cluster spec from a switch table or Kubernetes nodes."""

from __future__ import annotations

import argparse

from rich.console import Console

from deepshare.cli.args import gpus_per_node, print_line
from deepshare.cli.output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError
from deepshare.core.topology import Topology, load_topology, preset_names


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
        print_line(out, f"wrote {args.out}: {summary}")
    else:
        print_line(out, imported.yaml.rstrip("\n"))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "policies", "list the registered policies", "deepshare policies", "deepshare policies --json -")
    add_json_flag(p, "[{name, description, heuristic, takes_argument}]")
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
