"""The hardware table: GPU labels resolve to a training speed relative to the TITAN Xp, unknown
ones to 1.0, and TITAN Xp / unknown clusters give the link model's results bit for bit."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link.model import LinkContention
from deepshare.core.hardware import GPU_MODELS, REFERENCE, gpu_model_of, gpu_speed, normalise_label, slowest_speed
from deepshare.core.topology import parse_topology, uniform
from deepshare.core.traces import generate, mix_preset
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.experiments.scenario import Scenario, simulate

H100 = 989.0 * 0.40 / (12.15 * 0.45)


@pytest.mark.parametrize("label, key", [
    ("H100-SXM5-80GB", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("H800", "h800"),
    ("H200", "h200"),
    ("B200 (GB200 NVL72)", "gb200"),
    ("B200", "b200"),
    ("A100-SXM4-80GB", "a100"),
    ("A100-SXM4-40GB", "a100"),
    ("A10G", "a10g"),
    ("NVIDIA A10", "a10"),
    ("L4", "l4"),
    ("L40S", "l40s"),
    ("Tesla V100-SXM2-32GB", "v100"),
    ("Tesla V100-PCIE-16GB", "v100-pcie"),
    ("Tesla T4", "t4"),
    ("TITAN Xp", "titan-xp"),
    ("NVIDIA TITAN Xp", "titan-xp"),
    ("RTX 3090", "rtx3090"),
])
def test_labels_resolve_by_normalised_matching(label, key):
    model = gpu_model_of(label)
    assert model is not None and model.key == key


def test_speeds_are_achieved_flops_over_the_titan_xps():
    assert REFERENCE.achieved_tflops == pytest.approx(12.15 * 0.45)
    assert gpu_speed("TITAN Xp") == 1.0
    assert gpu_speed("H100-SXM5-80GB") == pytest.approx(H100)  # 72.35
    assert gpu_speed("A100-SXM4-80GB") == pytest.approx(312 * 0.44 / 5.4675)  # 25.11
    assert gpu_speed("B200 (GB200 NVL72)") == pytest.approx(2500 * 0.40 / 5.4675)  # 182.9
    order = [gpu_speed(x) for x in ("TITAN Xp", "T4", "V100", "A100", "H100 PCIe", "H100", "B200", "GB200")]
    assert order == sorted(order) and len(set(order)) == len(order)


def test_every_row_is_sourced_and_positive():
    keys = [g.key for g in GPU_MODELS]
    assert len(keys) == len(set(keys))
    for g in GPU_MODELS:
        assert g.peak_tflops > 0 and 0 < g.achieved <= 1 and g.source
        assert gpu_model_of(g.key.replace("-", " ")) is g  # each row's own name finds it


def test_unknown_names_compute_at_the_reference_speed_and_are_logged_once(caplog):
    with caplog.at_level(logging.WARNING, logger="deepshare.core.hardware"):
        assert gpu_speed("Acme Custom Accelerator Z9") == 1.0
        assert gpu_speed("Acme Custom Accelerator Z9") == 1.0
        assert gpu_speed("unknown") == 1.0  # the default label: not a warning
    assert [r.getMessage() for r in caplog.records].count(
        "gpu_model 'Acme Custom Accelerator Z9' is not in the hardware table (deepshare/core/hardware.py); "
        "computing at the TITAN Xp reference speed") == 1
    assert len(caplog.records) == 1


def test_a100_is_not_an_a10_nor_l40s_an_l4():
    assert gpu_model_of("A100").key == "a100"
    assert gpu_model_of("L40S").key == "l40s"
    assert normalise_label("NVIDIA-H100_SXM5 (80GB)") == "h100 sxm5 80gb"


def test_the_slowest_gpu_sets_a_mixed_jobs_speed():
    assert slowest_speed(("H100", "A10G", "A100")) == gpu_speed("A10G")
    assert slowest_speed(()) == 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_label_gets_a_finite_positive_speed(label):
    speed = gpu_speed(label)
    assert 0 < speed < 1000
    assert gpu_speed(f"--{label}__") == speed  # separators around a label change nothing


# -- the link model ------------------------------------------------------------------------------
def _spec(gpu_model: str) -> str:
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


def _ratios(topo, contention: LinkContention) -> tuple[float, ...]:
    state = contention.new_state(topo, default_catalog())
    state.add(RunningJob("A", "FSDP", 16, Placement.of({0: 8, 2: 8})))
    state.add(RunningJob("B", "MoE", 16, Placement.of({1: 8, 3: 8})))
    state.add(RunningJob("C", "DLRM", 4, Placement.of({0: 0, 1: 0, 2: 2, 3: 2})))
    return state.ratio("A"), state.ratio("B"), state.ratio("C")


def test_titan_xp_and_unknown_nodes_give_the_results_of_no_scaling_bit_for_bit():
    titan, unknown, h100 = (parse_topology(_spec(m)) for m in ("TITAN Xp", "unknown", "H100-SXM5-80GB"))
    before = _ratios(h100, LinkContention(hardware_scaling=False))
    assert _ratios(titan, LinkContention()) == before
    assert _ratios(unknown, LinkContention()) == before
    assert _ratios(h100, LinkContention()) != before  # the H100s compute 72x faster: comm weighs more
    assert min(_ratios(h100, LinkContention())) < min(before)


def test_a_testbed_simulation_is_unchanged_by_hardware_scaling():
    topo = uniform(4, 8)  # TITAN Xp nodes, as the standard and quick suites' generated clusters
    jobs = generate(30, load=0.9, total_gpus=topo.total_gpus, mix=mix_preset("heavy"), seed=2).jobs
    on, _ = simulate(Scenario(topo, jobs, LinkContention()), "fifo+spread")
    off, _ = simulate(Scenario(topo, jobs, LinkContention(hardware_scaling=False)), "fifo+spread")
    assert on.to_dict() == off.to_dict() and on.records == off.records
    assert on.avg_slowdown > 1.0  # contention is there, and identical
