"""Throughput samples recorded on a live cluster, turned into profiles to calibrate from.

The node agents and the live scheduler record what jobs actually achieved. A samples CSV has
one row per measurement::

    model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s
    MoE,4,2,,,,17.1              <- alone (co_* empty)
    MoE,4,2,FSDP,8,4,7.9         <- while FSDP on 8 GPUs over 4 nodes shared its nodes

Rows of the same placement are averaged. A ratio cell (victim, aggressor) is the mean co-located
throughput divided by the victim's mean isolated throughput, so every victim with co-located
rows needs isolated rows too. The result is a profile catalog like the shipped tables.
"""

from __future__ import annotations

import csv
import io
import os
from collections import defaultdict

from deepshare.core.errors import DeepShareError
from deepshare.core.files import TRACE_BYTES, read_input_text
from deepshare.core.workloads import Catalog, ProfileKey

COLUMNS = ("model", "gpus", "nodes", "co_model", "co_gpus", "co_nodes", "samples_per_s")


def _key(row: dict[str, str], prefix: str, where: str) -> ProfileKey:
    model = (row.get(f"{prefix}model") or "").strip()
    try:
        gpus, nodes = int(row[f"{prefix}gpus"]), int(row[f"{prefix}nodes"])
    except (TypeError, ValueError):
        raise DeepShareError(
            f"{where}: fields '{prefix}gpus' and '{prefix}nodes': expected positive integers, "
            f"got {row.get(prefix + 'gpus')!r} and {row.get(prefix + 'nodes')!r}"
        ) from None
    if not model or gpus <= 0 or nodes <= 0 or nodes > gpus:
        raise DeepShareError(f"{where}: expected a model name and 1 <= {prefix}nodes <= {prefix}gpus")
    return ProfileKey(model, gpus, nodes)


def parse_samples(text: str, source: str) -> Catalog:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise DeepShareError(f"{source} line 1: missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}")
    alone: dict[ProfileKey, list[float]] = defaultdict(list)
    shared: dict[tuple[ProfileKey, ProfileKey], list[float]] = defaultdict(list)
    for line, row in enumerate(reader, start=2):
        where = f"{source} line {line}"
        if None in row or any(row[c] is None for c in COLUMNS):
            raise DeepShareError(f"{where}: expected {len(COLUMNS)} fields")
        try:
            value = float(row["samples_per_s"])
        except ValueError:
            raise DeepShareError(f"{where}: field 'samples_per_s': expected a number, got {row['samples_per_s']!r}") from None
        if not 0 < value < float("inf"):
            raise DeepShareError(f"{where}: field 'samples_per_s': expected a positive number, got {value}")
        victim = _key(row, "", where)
        if any((row[c] or "").strip() for c in ("co_model", "co_gpus", "co_nodes")):
            shared[(victim, _key(row, "co_", where))].append(value)
        else:
            alone[victim].append(value)
    if not alone:
        raise DeepShareError(f"{source}: no isolated samples (rows with empty co_* fields)")
    isolated = {k: sum(v) / len(v) for k, v in alone.items()}
    ratios = {}
    for (victim, aggressor), values in shared.items():
        if victim not in isolated:
            raise DeepShareError(f"{source}: {victim} has co-located samples but no isolated ones")
        ratios[(victim, aggressor)] = min(1.0, sum(values) / len(values) / isolated[victim])
    if not ratios:
        raise DeepShareError(f"{source}: no co-located samples (rows with co_model, co_gpus, co_nodes)")
    return Catalog(isolated, ratios)


def load_samples(path: str | os.PathLike[str]) -> Catalog:
    """The samples CSV at ``path`` (a regular file of at most :data:`~deepshare.core.files.TRACE_BYTES`:
    samples are recorded, like a trace) as a catalog."""
    text = read_input_text(path, "samples file", TRACE_BYTES, label=f"--samples {path}", not_found="file not found")
    if not text.strip():
        raise DeepShareError(f"{path}: file is empty, expected samples")
    return parse_samples(text, str(path))
