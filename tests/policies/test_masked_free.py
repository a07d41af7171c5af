"""A domain's free GPUs as a :class:`MaskedFree` answer exactly as the masked plain list does
(the strategies' reference), without copying the cluster's list. ``packed`` reads a MaskedFree as
"inside a domain of the job's request" and measures shapes against the request's domains: on
this fabric of equal domains that is the cluster's fewest too (uneven fabrics:
``test_packed_domains.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_cases import TINY_CLOS

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.workloads import default_catalog
from deepshare.policies.fabric_place import candidate_domains, masked
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.masked_free import MaskedFree
from deepshare.policies.placement import PLACEMENTS

FABRIC = TINY_CLOS.fabric
CATALOG = default_catalog()


@settings(max_examples=120, deadline=None)
@given(free=st.lists(st.integers(0, 4), min_size=16, max_size=16), level=st.integers(0, 2), pick=st.integers(0, 7),
       need=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), indexed=st.booleans(),
       request=st.sampled_from([NO_TOPOLOGY, TopologyRequest(slice_size=2, slice_level="nvlink"),
                                TopologyRequest(preferred_level="nvlink")]))
def test_masked_free_answers_as_the_masked_list(free, level, pick, need, indexed, request):
    domains = FABRIC.by_level[level]
    nodes = FABRIC.domains[domains[pick % len(domains)]].nodes
    plain = masked(free, nodes)
    lazy = MaskedFree(FreeIndex(free) if indexed else free, nodes)
    assert list(lazy) == plain and len(lazy) == len(plain) and lazy.total == sum(plain)
    assert [lazy[n] for n in range(-16, 16)] == plain + plain and lazy[2:5] == plain[2:5]
    if request.slice_size is not None and need % request.slice_size:
        return
    assert list(candidate_domains(FABRIC, lazy, need, 2, request)) == list(candidate_domains(FABRIC, plain, need, 2, request))
    v = build_view(TINY_CLOS, CATALOG, make_contention("profiled"), 0.0, free,
                   [KnownJob("j", "FSDP", need, 0.0, 600.0, topology=request)], [])
    for name in ("consolidated", "spread", "packed", "contention-aware", "topo-bestfit", "topo-balanced", "topo-aware"):
        place = PLACEMENTS[name][0]
        assert place(v.queued[0], MaskedFree(free, nodes), v, ()) == place(v.queued[0], list(plain), v, ()), name


def test_masked_free_is_read_only():
    lazy = MaskedFree([4] * 16, (0, 1))
    with pytest.raises(TypeError, match="read-only"):
        lazy[0] = 3
    with pytest.raises(IndexError):
        lazy[16]
