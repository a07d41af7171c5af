"""Catalog: values equal the shipped CSVs; estimation rules; proxies for unknown models."""

from __future__ import annotations

import csv
import io
import logging
from importlib import resources

import pytest

from deepshare.core.workloads import (
    DEFAULT_PROXY,
    Catalog,
    ProfileKey,
    default_catalog,
    parse_profiles,
)

PROFILES = resources.files("deepshare.data") / "profiles"
MODELS = ("MobileNetV3", "GraphSage", "FSDP", "Transformer-XL", "DLRM", "MoE")


def read_rows(name: str) -> list[list[str]]:
    text = (PROFILES / name).read_text(encoding="utf-8").lstrip("\ufeff")
    return [row for row in csv.reader(io.StringIO(text)) if row]


def csv_isolated() -> dict[tuple[str, int, int], float]:
    out = {}
    for key, value in read_rows("isolated_thp.csv")[1:]:
        model, gpus, nodes = key.split(",")
        out[(model, int(gpus), int(nodes))] = float(value)
    return out


ISO = csv_isolated()


def iso(model: str, gpus: int, nodes: int) -> float:
    return ISO[(model, gpus, nodes)]


def fresh_catalog() -> Catalog:
    """A catalog with empty resolve/warning caches (default_catalog() is shared)."""
    return parse_profiles(
        (PROFILES / "isolated_thp.csv").read_text(encoding="utf-8"),
        (PROFILES / "shared_thp_ratio.csv").read_text(encoding="utf-8"),
    )


def test_catalog_equals_csv_cells():
    cat = default_catalog()
    assert cat.models == MODELS
    assert {(k.model, k.gpus, k.nodes): v for k, v in cat.isolated.items()} == ISO
    assert len(ISO) == 36
    rows = read_rows("shared_thp_ratio.csv")
    header = rows[0][1:]
    assert len(header) == 36 and len(rows) == 37
    for row in rows[1:]:
        for col, cell in zip(header, row[1:]):
            assert cat.ratio(ProfileKey.parse(row[0]), ProfileKey.parse(col)) == float(cell)
    assert len(cat.ratios) == 36 * 36


def test_measured_points_are_returned_as_is():
    cat = default_catalog()
    for (model, gpus, nodes), value in ISO.items():
        assert cat.throughput(model, gpus, nodes) == value


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_one_node_is_best_measured_spread(model, gpus):
    cat = default_catalog()
    measured = [v for (m, g, _), v in ISO.items() if m == model and g == gpus]
    assert cat.throughput(model, gpus, 1) == max(measured)
    assert cat.reference_throughput(model, gpus) == max(measured)


@pytest.mark.parametrize("model", MODELS)
def test_three_nodes_interpolate_between_two_and_four(model):
    cat = default_catalog()
    for gpus in (4, 8):
        expected = iso(model, gpus, 2) + (iso(model, gpus, 4) - iso(model, gpus, 2)) * 0.5
        assert cat.throughput(model, gpus, 3) == pytest.approx(expected, rel=1e-12)
    # 6 nodes for 8 GPUs: between 4 and 8
    expected = iso(model, 8, 4) + (iso(model, 8, 8) - iso(model, 8, 4)) * 0.5
    assert cat.throughput(model, 8, 6) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
def test_beyond_largest_node_count_is_held(model):
    cat = default_catalog()
    assert cat.throughput(model, 8, 16) == iso(model, 8, 8)
    assert cat.throughput(model, 4, 16) == iso(model, 4, 4)
    assert cat.throughput(model, 2, 5) == iso(model, 2, 2)


@pytest.mark.parametrize("model", MODELS)
def test_unmeasured_gpu_counts_scale_linearly_from_nearest(model):
    cat = default_catalog()
    best = {g: max(v for (m, gg, _), v in ISO.items() if m == model and gg == g) for g in (2, 4, 8)}
    # 1 GPU: per-GPU throughput of 2 GPUs
    assert cat.throughput(model, 1, 1) == pytest.approx(best[2] / 2, rel=1e-12)
    assert cat.reference_throughput(model, 1) == pytest.approx(best[2] / 2, rel=1e-12)
    # 16 GPUs: twice the 8-GPU value at the same node count
    assert cat.throughput(model, 16, 1) == pytest.approx(2 * best[8], rel=1e-12)
    assert cat.throughput(model, 16, 2) == pytest.approx(2 * iso(model, 8, 2), rel=1e-12)
    assert cat.throughput(model, 16, 4) == pytest.approx(2 * iso(model, 8, 4), rel=1e-12)
    assert cat.throughput(model, 16, 16) == pytest.approx(2 * iso(model, 8, 8), rel=1e-12)
    # 16 GPUs need 2 testbed nodes: the reference is the 2-node value
    assert cat.reference_throughput(model, 16) == pytest.approx(2 * iso(model, 8, 2), rel=1e-12)
    # ties go to the larger measured count: 3 -> 4, 6 -> 8; 5 -> 4, 7 -> 8
    assert cat.throughput(model, 3, 2) == pytest.approx(iso(model, 4, 2) * 3 / 4, rel=1e-12)
    assert cat.throughput(model, 6, 2) == pytest.approx(iso(model, 8, 2) * 6 / 8, rel=1e-12)
    assert cat.throughput(model, 5, 4) == pytest.approx(iso(model, 4, 4) * 5 / 4, rel=1e-12)
    assert cat.throughput(model, 7, 4) == pytest.approx(iso(model, 8, 4) * 7 / 8, rel=1e-12)
    assert cat.throughput(model, 32, 4) == pytest.approx(iso(model, 8, 4) * 4, rel=1e-12)


def test_profile_key_nearest_measured():
    cat = default_catalog()
    assert cat.profile_key("FSDP", 2, 1) == ProfileKey("FSDP", 2, 2)
    assert cat.profile_key("FSDP", 1, 1) == ProfileKey("FSDP", 2, 2)
    assert cat.profile_key("FSDP", 8, 3) == ProfileKey("FSDP", 8, 4)
    assert cat.profile_key("FSDP", 8, 1) == ProfileKey("FSDP", 8, 2)
    assert cat.profile_key("FSDP", 16, 16) == ProfileKey("FSDP", 8, 8)
    assert cat.profile_key("FSDP", 4, 8) == ProfileKey("FSDP", 4, 4)


@pytest.mark.parametrize(
    "name,proxy",
    [("vgg19", "FSDP"), ("resnet50", "MobileNetV3"), ("foo", DEFAULT_PROXY), ("BERT-large", "Transformer-XL")],
)
def test_unknown_models_use_proxies_and_warn_once(name, proxy, caplog):
    cat = fresh_catalog()
    with caplog.at_level(logging.WARNING, logger="deepshare.core.workloads"):
        assert cat.resolve(name) == proxy
        assert cat.resolve(name) == proxy
        assert cat.throughput(name, 4, 2) == cat.throughput(proxy, 4, 2)
        assert cat.reference_throughput(name, 2) == cat.reference_throughput(proxy, 2)
        assert cat.class_of(name) == cat.comm_class[proxy]
        cat.profile_key(name, 2, 2)
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING and name in rec.getMessage()]
    assert len(warnings) == 1
    assert proxy in warnings[0].getMessage()


def test_each_unknown_name_warns_once(caplog):
    cat = fresh_catalog()
    with caplog.at_level(logging.WARNING, logger="deepshare.core.workloads"):
        for _ in range(3):
            for name in ("vgg19", "resnet50", "foo"):
                cat.resolve(name)
    messages = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(messages) == 3
    assert sum("'vgg19'" in m for m in messages) == 1
    assert sum("'resnet50'" in m for m in messages) == 1
    assert sum("'foo'" in m for m in messages) == 1
    assert DEFAULT_PROXY == "Transformer-XL"


def test_known_models_resolve_case_insensitively_without_warning(caplog):
    cat = fresh_catalog()
    with caplog.at_level(logging.WARNING, logger="deepshare.core.workloads"):
        assert cat.resolve("fsdp") == "FSDP"
        assert cat.resolve("MOE") == "MoE"
        assert cat.resolve("Transformer-XL") == "Transformer-XL"
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]


def derived_classes() -> dict[str, str]:
    """The documented rule, computed here straight from the CSV (8-node rows/columns excluded)."""
    rows = read_rows("shared_thp_ratio.csv")
    header = [h.split(",") for h in rows[0][1:]]
    victim: dict[str, list[float]] = {m: [] for m in MODELS}
    aggr: dict[str, list[float]] = {m: [] for m in MODELS}
    for row in rows[1:]:
        vm, _, vn = row[0].split(",")
        for (am, _, an), cell in zip(header, row[1:]):
            if int(vn) < 8 and int(an) < 8:
                victim[vm].append(float(cell))
                aggr[am].append(float(cell))
    out = {}
    for m in MODELS:
        score = (sum(victim[m]) / len(victim[m])) * (sum(aggr[m]) / len(aggr[m]))
        out[m] = "low" if score >= 0.75 else "medium" if score >= 0.6 else "heavy"
    return out


def test_comm_classes_as_derived():
    cat = default_catalog()
    assert cat.comm_class == derived_classes()
    assert cat.comm_class == {
        "MobileNetV3": "low",
        "GraphSage": "low",
        "FSDP": "heavy",
        "Transformer-XL": "heavy",
        "DLRM": "medium",
        "MoE": "heavy",
    }


def test_small_catalog_without_measured_pairs_is_medium():
    k = ProfileKey("Solo", 2, 8)  # only 8-node cells: nothing counts as measured
    cat = Catalog({k: 1.0}, {(k, k): 0.5})
    assert cat.comm_class == {"Solo": "medium"}
    assert cat.resolve("anything") == "Solo"  # proxy not in this catalog: its first model


def test_profile_key_text_round_trip():
    k = ProfileKey.parse("Transformer-XL, 8 ,4")
    assert k == ProfileKey("Transformer-XL", 8, 4)
    assert str(k) == "Transformer-XL,8,4"
