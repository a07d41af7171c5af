"""LLM-era job classes: derived link parameters checked by hand, traffic where the parallelism puts
it, and a gang on H100s slowed by a neighbour on an oversubscribed leaf uplink."""

from __future__ import annotations

import logging
from dataclasses import replace
from importlib import resources

import pytest

from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link.llm import LLM_CLASSES, LlmClass, derive
from deepshare.core.contention.link.model import LinkContention
from deepshare.core.contention.link.params import (
    LINE_RATE_EFFICIENCY, REF_NIC_GBPS, REF_PCIE_GBPS, LinkCatalog, default_link_catalog,
)
from deepshare.core.errors import DeepShareError
from deepshare.core.hardware import gpu_speed
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import DERIVED_CLASSES, parse_profiles, default_catalog

LINKS = default_link_catalog()


def _derive(c: LlmClass) -> dict[str, float]:
    return derive(c, REF_NIC_GBPS, REF_PCIE_GBPS, LINE_RATE_EFFICIENCY, congestion=0.0)


def test_llama3_8b_parameters_by_hand():
    p = LINKS.params["llama3-8b"]
    # 6 x 8.03e9 parameters x 8,192 tokens over the TITAN Xp's 12.15 TFLOPS x 45%
    assert p.compute_s == pytest.approx(6 * 8.03e9 * 8192 / (12.15e12 * 0.45), rel=1e-12)
    # FSDP: 3 x 8.03e9 x 2 bytes per node, half of it per ring unit, at 40 Gb/s x 0.7
    assert p.nic_s == pytest.approx(3 * 8.03e9 * 2 / 2 * 8 / (40e9 * 0.7), rel=1e-12)  # 6.8829 s
    # no TP: each GPU forwards its FSDP ring's 3 x 8.03e9 x 2 bytes over NVLink, 14 ring units of 8 GPUs
    assert p.pcie_s == pytest.approx(3 * 8.03e9 * 2 * 8 / (256e9 * 0.7 * 14), rel=1e-12)
    assert p.latency_s == pytest.approx(32 * 3 * 2 * 10e-6)
    assert p.pcie_coupling == 40 / 256
    assert (p.overlap, p.samples_per_gpu, p.nodes_exponent, p.gpus_per_node_exponent) == (0.83, 8192, 0.0, 0.0)
    # on an H100 the step computes in about a second (40% MFU)
    assert p.compute_s / gpu_speed("H100-SXM5-80GB") == pytest.approx(6 * 8.03e9 * 8192 / (989e12 * 0.40))
    assert 0.95 < p.compute_s / gpu_speed("H100-SXM5-80GB") < 1.05


def test_fsdp_moves_one_and_a_half_times_the_all_reduce():
    fsdp = LLM_CLASSES["llama3-8b"]
    dp = replace(fsdp, sharding="dp")
    assert fsdp.gradient_bytes() == pytest.approx(1.5 * dp.gradient_bytes())
    assert dp.gradient_bytes() == pytest.approx(2 * 8.03e9 * 2)


def test_moe_all_to_all_outweighs_data_parallel_of_the_same_size():
    moe = LLM_CLASSES["mixtral-8x7b"]
    # a dense model of the same compute (12.9B parameters, all active), data parallel
    dense = replace(moe, params_b=12.9, moe_layers=0, top_k=0, expert_params_b=0.0, ep=1, active_params_b=0.0)
    assert dense.flops_per_gpu() == moe.flops_per_gpu()
    # 8 GPUs x 4,096 tokens x top-2 x 4,096 hidden x 2 bytes x (dispatch + combine) x (fwd + bwd) x 32 layers
    assert moe.all_to_all_bytes() == 8 * 4096 * 2 * 4096 * 2 * 4 * 32
    assert moe.all_to_all_bytes() > moe.gradient_bytes()
    assert _derive(moe)["nic_s"] > _derive(dense)["nic_s"]
    # the node holds the dense part and 1/8 of the experts
    assert moe.node_params == pytest.approx((46.7 - 45.1 + 45.1 / 8) * 1e9)


def test_tensor_parallel_traffic_stays_inside_the_node():
    tp8 = LLM_CLASSES["llama3-70b"]
    tp1 = replace(tp8, tp=1)
    assert _derive(tp8)["nic_s"] == _derive(tp1)["nic_s"]  # nothing more through the NICs
    assert tp8.tensor_bytes_per_gpu() == 8 * 7 * 1024 * 8192 * 2 * 80
    assert _derive(tp8)["pcie_s"] > _derive(tp1)["pcie_s"]
    # an 8-GPU job on one NVLink node: all of it private NVLink, no NIC nor uplink work
    topo = parse_topology(_spec("H100-SXM5-80GB"))
    state = LinkContention().new_state(topo, default_catalog())
    state.add(RunningJob("A", "llama3-70b", 8, Placement.of({0: 8})))
    record = state._jobs["A"]
    names = state.link_names()
    assert record.private > 0
    assert not [names[link] for link in record.links if names[link].endswith(("/nic", "/uplink"))]


def test_pipeline_point_to_point_by_hand():
    c = LLM_CLASSES["gpt3-175b"]
    assert c.pipeline_bytes() == 2 * 8 * 1024 * 7 * 12288 * 2
    assert c.node_params == pytest.approx(175e9 / 8)


def test_every_class_is_in_the_link_catalog_and_resolves_quietly(caplog):
    folder = resources.files("deepshare.data") / "profiles"
    catalog = parse_profiles(  # a fresh catalog: nothing resolved yet
        *((folder / n).read_text(encoding="utf-8") for n in ("isolated_thp.csv", "shared_thp_ratio.csv")))
    assert set(LLM_CLASSES) == set(DERIVED_CLASSES)
    with caplog.at_level(logging.WARNING):
        for name in LLM_CLASSES:
            assert LINKS.resolve(name, catalog) == name
            assert catalog.resolve(name) == DERIVED_CLASSES[name]
    assert caplog.records == []
    assert LINKS.resolve("Llama-3-8B", catalog) == "llama3-8b"  # normalised names too


def test_bad_class_fields_name_the_field():
    with pytest.raises(DeepShareError, match="tp"):
        replace(LLM_CLASSES["llama3-70b"], tp=3)
    with pytest.raises(DeepShareError, match="sharding"):
        replace(LLM_CLASSES["llama3-8b"], sharding="zero9")
    with pytest.raises(DeepShareError, match="top_k"):
        replace(LLM_CLASSES["mixtral-8x7b"], top_k=0)


def test_the_catalog_round_trips_through_json():
    again = LinkCatalog.from_json(LINKS.to_json())
    assert again.params["mixtral-8x7b"] == LINKS.params["mixtral-8x7b"]


# -- a gang on an oversubscribed leaf uplink ------------------------------------------------------
def _spec(gpu_model: str) -> str:
    """Two leaves of two 8-GPU NVLink nodes (400 Gb/s NICs), leaves 2:1 oversubscribed (400 Gb/s up)."""
    return f"""
name: two-leaf
node_types:
  g: {{gpus: 8, gpu_model: "{gpu_model}", fabric: nvlink, pcie_switches: 4, intra_node_gbps: 512, nvlink_gbps: 3600, nic_gbps: 400}}
levels:
  - {{name: leaf, oversubscription: 2}}
  - {{name: spine}}
nodes:
  - {{type: g, count: 2, prefix: a, domains: {{leaf: l0, spine: s0}}}}
  - {{type: g, count: 2, prefix: b, domains: {{leaf: l1, spine: s0}}}}
"""


def _slowed(gpu_model: str) -> tuple[float, float]:
    """Job A's ratio alone and beside B: two 8:8 gangs across the leaves, sharing both uplinks."""
    state = LinkContention().new_state(parse_topology(_spec(gpu_model)), default_catalog())
    state.add(RunningJob("A", "llama3-8b", 16, Placement.of({0: 8, 2: 8})))
    alone = state.ratio("A")
    state.add(RunningJob("B", "llama3-8b", 16, Placement.of({1: 8, 3: 8})))
    return alone, state.ratio("A")


def test_an_h100_gang_beside_a_neighbour_on_a_2_1_uplink_is_slowed_a_titan_xp_one_less():
    h100_alone, h100 = _slowed("H100-SXM5-80GB")
    titan_alone, titan = _slowed("TITAN Xp")
    assert h100_alone == titan_alone == 1.0
    # H100: compute 1.0 s, NIC and uplink work 6.88 x 40/400 = 0.69 s each; the neighbour's
    # traffic stretches the uplink (by 1 + 1.76 x its duty cycle: the fair share and the median
    # congestion 0.76), so the step goes from 1.12 s alone to about 2 s (ratio 0.568).
    assert h100 == pytest.approx(0.568, abs=0.001)
    # TITAN Xp: compute 72 s hides the same 0.69 s of communication almost entirely
    assert titan == pytest.approx(0.99997, abs=1e-5) and titan > h100
