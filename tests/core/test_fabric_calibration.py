"""Calibration on fabric uplinks (issue 36): samples of jobs that shared a domain's uplink on
other nodes are read against the cluster's fabric, the fit simulates them as the link model
does, and ``deepshare calibrate --samples --cluster`` fits them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fabric_cases import TWO_LEAVES, TWO_LEAVES_SPEC

from deepshare.cli import main
from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link import LinkContention
from deepshare.core.contention.link.calibrate import Dataset, PairModel, calibrate
from deepshare.core.contention.link.samples import UplinkPair, parse_samples, read_samples, uplink_shares
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Placement
from deepshare.core.workloads import Catalog, ProfileKey

SPEC, TOPO = TWO_LEAVES_SPEC, TWO_LEAVES
A, B = ProfileKey("A", 4, 2), ProfileKey("B", 4, 2)
HEADER = "model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s,link\n"
SAMPLES = HEADER + """A,4,2,,,,3.0,
A,4,2,,,,3.4,
B,4,2,,,,3.5,
A,4,2,B,4,2,2.6,
B,4,2,A,4,2,2.8,
A,4,2,B,4,2,1.6,s0/l0/uplink
A,4,2,B,4,2,1.6,s0/l0/uplink
B,4,2,A,4,2,2.1,s0/l1/uplink
"""


def test_uplink_shares_are_in_nics_of_the_domains_nodes() -> None:
    assert uplink_shares(TOPO) == {"s0/l0/uplink": 0.5, "s0/l1/uplink": 0.5}  # 20 Gbit/s over 40; the spine: 0


def test_rows_naming_an_uplink_become_uplink_cells() -> None:
    samples = read_samples(SAMPLES, "s.csv", uplink_shares(TOPO))
    assert samples.catalog.isolated == {A: pytest.approx(3.2), B: 3.5}
    assert samples.catalog.ratios == {(A, B): pytest.approx(2.6 / 3.2), (B, A): pytest.approx(0.8)}
    assert samples.uplinks == {UplinkPair(A, B, "s0/l0/uplink", 0.5): pytest.approx(0.5),
                               UplinkPair(B, A, "s0/l1/uplink", 0.5): pytest.approx(0.6)}
    plain = HEADER + "A,4,2,,,,3.2,\nA,4,2,B,4,2,1.6,\nB,4,2,,,,3.5,\n"  # an empty link: the jobs shared nodes
    assert parse_samples(plain, "s.csv").ratios == {(A, B): pytest.approx(0.5)}


@pytest.mark.parametrize("row, uplinks, message", [
    ("A,4,2,B,4,2,1.6,s0/l0/uplink", None,
     "s.csv line 5: field 'link': naming an uplink ('s0/l0/uplink') needs the cluster whose fabric has it"),
    ("A,4,2,B,4,2,1.6,s0/l2/uplink", "topo",
     "s.csv line 5: field 'link': expected an uplink of the cluster's fabric (s0/l0/uplink, s0/l1/uplink), "
     "got 's0/l2/uplink'"),
    ("A,4,2,B,2,1,1.6,s0/l0/uplink", "topo",
     "s.csv line 5: field 'co_nodes': a job crossing an uplink spans at least 2 nodes, got 1"),
    ("A,4,2,,,,1.6,s0/l0/uplink", "topo",
     "s.csv line 5: field 'link': expected empty on an isolated row (empty co_* fields), got 's0/l0/uplink'"),
])
def test_bad_uplink_rows_name_line_and_field(row: str, uplinks: str | None, message: str) -> None:
    text = HEADER + "A,4,2,,,,3.2,\nB,4,2,,,,3.5,\nB,2,1,,,,1.0,\n" + row + "\n"
    with pytest.raises(DeepShareError) as caught:
        read_samples(text, "s.csv", uplink_shares(TOPO) if uplinks else None)
    assert str(caught.value).startswith(message)


def _params(model: PairModel) -> np.ndarray:
    """Per model: compute 1 s, NIC 0.5 s (A) or 0.3 s (B), PCIe 0.1 s, overlap 0.5, one sample
    per GPU, latency 1 ms, PCIe coupling 0.1, congestion 1, shape exponents 0; kappa and
    sensitivities 1."""
    rows = [[0.0, np.log(nic), np.log(0.1), 0.0, 0.0, np.log(1e-3), np.log(0.1), 0.0, 0.0, 0.0] for nic in (0.5, 0.3)]
    return np.concatenate([np.array(rows).reshape(-1), np.zeros(model.size - 20)])


def test_an_uplink_cell_is_simulated_as_the_link_model_runs_it() -> None:
    """The fit's uplink cell and the link model on the fabric give the same ratios to the last
    bit: A on a0 + b0 beside B on a1 + b1, sharing only the leaves' uplinks. Sharing their nodes
    instead, the same pair loses far less (the uplink is half a NIC)."""
    pairs = {UplinkPair(A, B, "s0/l0/uplink", 0.5): 0.5, UplinkPair(B, A, "s0/l0/uplink", 0.5): 0.6}
    model = PairModel(Dataset.from_catalog(Catalog({A: 3.2, B: 3.5}, {}), pairs))
    x = _params(model)
    _, ratios = model.predict(x)
    state = LinkContention(model.to_catalog(x, "test")).new_state(TOPO, Catalog({A: 3.2, B: 3.5}, {}))
    state.add(RunningJob("v", "A", 4, Placement.of({0: 2, 2: 2})))
    state.add(RunningJob("w", "B", 4, Placement.of({1: 2, 3: 2})))
    assert ratios.tolist() == pytest.approx([state.ratio("v"), state.ratio("w")], rel=1e-12)
    assert ratios.tolist() == pytest.approx([0.4963, 0.6190], abs=1e-4)
    _, shared_nodes = PairModel(Dataset.from_catalog(Catalog({A: 3.2, B: 3.5}, {(A, B): 0.5, (B, A): 0.6}))).predict(x)
    assert shared_nodes.tolist() == pytest.approx([0.8230, 0.8512], abs=1e-4)


def test_the_fit_uses_the_uplink_cells() -> None:
    """A fit to the samples counts their uplink cells and comes close to them: the fitted link
    model, run on the fabric, gives A beside B across the shared uplink about its measured 0.5."""
    samples = read_samples(SAMPLES, "s.csv", uplink_shares(TOPO))
    result = calibrate(samples, folds=2, starts=1, seed=0)
    assert result.cells == 4  # two that shared nodes, two that shared an uplink
    state = LinkContention(result.catalog).new_state(TOPO, samples.catalog)
    state.add(RunningJob("v", "A", 4, Placement.of({0: 2, 2: 2})))
    state.add(RunningJob("w", "B", 4, Placement.of({1: 2, 3: 2})))
    assert state.ratio("v") == pytest.approx(0.5, abs=0.05)
    assert state.ratio("w") == pytest.approx(0.6, abs=0.05)


def test_calibrate_cli_reads_uplink_rows_with_the_cluster(tmp_path, capsys) -> None:
    # the samples' jobs that shared nodes need room beside each other: the two leaves' nodes with 4 GPUs
    (tmp_path / "spec.yaml").write_text(SPEC.replace("gpus: 2,", "gpus: 4,"))
    (tmp_path / "s.csv").write_text(SAMPLES)
    args = ["calibrate", "--samples", str(tmp_path / "s.csv"), "--folds", "2", "--starts", "1", "--workers", "1"]
    assert main(args) == 2
    assert "s.csv line 7: field 'link': naming an uplink" in capsys.readouterr().err
    assert main([*args, "--cluster", str(tmp_path / "spec.yaml"), "--json", str(tmp_path / "fit.json")]) == 0
    assert json.loads((tmp_path / "fit.json").read_text())["cells"] == 4
    assert main(["calibrate", "--profiles", str(tmp_path), "--cluster", "testbed"]) == 2
    assert "--cluster goes with --samples" in capsys.readouterr().err
