"""The catalog's memos and its unknown-model warning stay bounded however many model names callers
invent: a placement service's catalog is process-wide, and each request may name 15,000 new ones."""

from __future__ import annotations

import logging

from deepshare.core import workloads
from deepshare.core.contention.link.params import default_link_catalog
from deepshare.core.workloads import MEMO_ENTRIES, WARNED_NAMES, Catalog, default_catalog, remember


def _fresh() -> Catalog:
    """A catalog of the shipped profiles with empty memos (the default one is shared)."""
    shipped = default_catalog()
    return Catalog(shipped.isolated, shipped.ratios)


def test_many_new_names_leave_every_memo_bounded_and_answers_unchanged():
    catalog = _fresh()
    names = [f"vgg-{i}" for i in range(MEMO_ENTRIES + 500)]
    for name in names:
        catalog.throughput(name, 2, 2)
        catalog.placement_index(name, 4, 2)
    assert len(catalog._resolved) == MEMO_ENTRIES
    assert len(catalog._thp_by_name) == MEMO_ENTRIES
    assert len(catalog._index_cache) == MEMO_ENTRIES
    assert catalog.resolve(names[0]) == "FSDP"  # forgotten, then resolved again alike
    assert catalog.throughput(names[0], 2, 2) == catalog.throughput("FSDP", 2, 2)


def test_many_gpu_and_node_counts_leave_the_throughput_memo_bounded():
    catalog = _fresh()
    for gpus in range(1, 200):
        for nodes in range(1, 100):
            catalog.throughput("FSDP", gpus, nodes)
    assert len(catalog._thp_cache) == MEMO_ENTRIES


def test_the_link_catalogs_by_name_memo_is_bounded():
    links, catalog = default_link_catalog(), _fresh()
    for i in range(MEMO_ENTRIES + 10):
        links.resolve(f"resnet-{i}", catalog)
    assert len(links._resolved) == MEMO_ENTRIES  # type: ignore[attr-defined]


def test_the_unknown_model_warning_names_each_of_the_first_names_once_then_counts_doublings(caplog):
    catalog = _fresh()
    with caplog.at_level(logging.WARNING, logger="deepshare.core.workloads"):
        for _ in range(2):
            for i in range(WARNED_NAMES):
                catalog.resolve(f"bert-{i}")
        assert len(caplog.records) == WARNED_NAMES  # once per name, the second round from the memo
        caplog.clear()
        for i in range(WARNED_NAMES):  # names not in the memo any more are not warned of twice
            catalog._resolved.pop(f"bert-{i}")
            catalog.resolve(f"bert-{i}")
        assert not caplog.records
        for i in range(15_000):
            catalog.resolve(f"gpt-{i}")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 14  # the 1st, 2nd, 4th, ... 8,192nd name past the first WARNED_NAMES
    assert lines[-1].startswith("8192 more distinct model names not in the catalog got proxies (the latest "
                                "'gpt-8191'")


def test_a_counted_name_the_resolve_memo_forgot_is_not_counted_again(caplog):
    """The resolve memo forgets names whatever asked for them (known names too); the count of
    unknown names past the first ones is of distinct names, not of their resolutions."""
    catalog = _fresh()
    for i in range(WARNED_NAMES):
        catalog.resolve(f"bert-{i}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="deepshare.core.workloads"):
        for _ in range(3):
            for i in range(3):
                catalog._resolved.pop(f"gpt-{i}", None)  # as the oldest of 16,384 lookups would be
                catalog.resolve(f"gpt-{i}")
    lines = [r.getMessage() for r in caplog.records]
    assert catalog._unwarned == 3
    assert [line.split(" more ")[0] for line in lines] == ["1", "2"]  # 9 resolutions, 3 names


def test_past_the_counted_names_bound_the_message_says_what_it_counts(caplog, monkeypatch):
    monkeypatch.setattr(workloads, "COUNTED_NAMES", 4)
    catalog = _fresh()
    with caplog.at_level(logging.WARNING, logger="deepshare.core.workloads"):
        for i in range(WARNED_NAMES + 8):
            catalog.resolve(f"bert-{i}")
    assert len(catalog._counted) == 4
    lines = [r.getMessage() for r in caplog.records][WARNED_NAMES:]
    assert [line.split(" more ")[0] for line in lines] == ["1", "2", "4", "8"]
    assert "counts again" not in lines[2]
    assert lines[3].endswith("(past 4 of them, a name asked again after 4 others counts again)")


def test_remember_drops_the_oldest_entry_at_its_bound():
    memo: dict = {}
    for i in range(5):
        remember(memo, i, str(i), most=3)
    assert memo == {2: "2", 3: "3", 4: "4"}


def test_remember_passes_over_an_eviction_another_thread_won():
    """Two decision threads evicting at the bound pick the same oldest key: the second finds it
    gone. The memo is still a memo, so that is no error."""

    class Raced(dict):
        def __delitem__(self, key):
            super().__delitem__(key)
            raise KeyError(key)  # as if another thread had deleted it first

    memo = Raced({0: "0", 1: "1", 2: "2"})
    remember(memo, 3, "3", most=3)
    assert memo == {1: "1", 2: "2", 3: "3"}
