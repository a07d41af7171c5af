"""The policy counts the README and the docs state are the registry's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deepshare.policies.registry import policy_names

ROOT = Path(__file__).resolve().parents[2]
FIFO_WITHOUT_PREEMPTION = ("las", "dlas", "gittins")
"""Orders that decide as fifo without +preempt: no queued job in a simulation has run before."""


def counts() -> tuple[int, int]:
    names = policy_names(heuristics_only=True)
    same_as_fifo = [n for n in names if n.split("+")[0] in FIFO_WITHOUT_PREEMPTION and "+preempt" not in n]
    return len(names), len(names) - len(same_as_fifo)


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/policies.md"])
def test_stated_counts_are_the_registrys(page):
    text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
    registered, distinct = counts()
    stated = [int(n) for n in re.findall(r"(\d+) (?:registered )?heuristic (?:policies|names|s\b)", text)]
    stated += [int(n) for n in re.findall(r"(\d+) registered heuristics", text)]
    assert stated and set(stated) == {registered}, (page, stated, registered)
    assert str(distinct) in re.findall(r"(\d+) distinct", text) or f"**{distinct}" in text, (page, distinct)


def test_the_coincidence_tables_counts_are_the_registrys():
    """docs/policies.md's "Others coincide only on some runs" table counts names per order
    (`srtf+...` (30)) and per fabric placement: each count is the registry's."""
    text = (ROOT / "docs/policies.md").read_text(encoding="utf-8")
    names = policy_names(heuristics_only=True)
    per_order = re.findall(r"^\| `(\w+)\+\.\.\.` \((\d+)", text, flags=re.M)
    assert {order for order, _ in per_order} >= {"bsrsf", "srtf", "drf"}, per_order
    for order, stated in per_order:
        assert int(stated) == sum(n.startswith(order + "+") for n in names), (order, stated)
    topo = re.search(r"`\.\.\.\+topo-aware\.\.\.` \((\d+)\)", text)
    assert topo and int(topo.group(1)) == sum("+topo-" in n for n in names), topo
