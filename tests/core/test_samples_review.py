"""A review of the calibration inputs, each case failing before its fix: samples on 8 nodes or
more were dropped from the fit silently (the testbed tables' rule), so were cells whose
aggressor had no isolated rows and ratio-table keys missing from ``isolated_thp.csv``; ``1_6``
read as 16 GPUs and ``2_0`` as 20 samples/s; a row no set of the cluster's nodes could hold was
fitted; a profile field past the csv module's limit was a traceback."""

from __future__ import annotations

import re

import pytest

from fabric_cases import TWO_LEAVES

from deepshare.core.contention.link.calibrate import Dataset, calibrate
from deepshare.core.contention.link.samples import node_capacity, read_samples
from deepshare.core.errors import DeepShareError
from deepshare.core.workloads import ProfileKey, load_profiles, parse_profiles

HEADER = "model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s\n"
EIGHT_NODES = HEADER + "A,64,8,,,,3000\nB,64,8,,,,2500\nA,64,8,B,64,8,1500\nB,64,8,A,64,8,1200\n"


def test_samples_on_eight_nodes_or_more_are_fitted():
    samples = read_samples(EIGHT_NODES + "A,16,2,,,,1000\nA,16,2,B,64,8,700\n", "s.csv")
    data = Dataset.from_catalog(samples.catalog, samples.uplinks, samples.hardware, testbed=False)
    assert set(data.keys) == {ProfileKey("A", 64, 8), ProfileKey("B", 64, 8), ProfileKey("A", 16, 2)}
    assert len(data.ratio) == 3
    assert calibrate(samples, folds=2, starts=1, seed=0).cells == 3  # it was "no measured keys"


def test_the_testbed_tables_still_leave_their_eight_node_keys_out():
    catalog = parse_profiles(',isol_thp\n"A,2,2",100\n"A,16,8",400\n',
                             ',"A,2,2","A,16,8"\n"A,2,2",0.9,0.8\n"A,16,8",0.7,0.6\n')
    assert Dataset.from_catalog(catalog).keys == (ProfileKey("A", 2, 2),)


@pytest.mark.parametrize("rows, message", [
    ("A,4,2,,,,10\nA,4,2,C,4,2,5\n",
     "s.csv line 3: the aggressor C,4,2 (co_* fields) has no isolated samples"),
    ("A,1_6,2,,,,10\n", "s.csv line 2: fields 'gpus' and 'nodes': expected positive integers (at most 9 "
                        "ASCII digits), got '1_6' and '2'"),
    ("A,16,\u0662,,,,10\n", "s.csv line 2: fields 'gpus' and 'nodes': expected positive integers (at most 9"),
    ("A,4,2,,,,10\nC,2,2,A,4,2,5\n", "s.csv line 3: the victim C,2,2 has no isolated samples"),
    ("A,4,2,,,,10\nA,4,2,A,4,2_0,5\n", "s.csv line 3: fields 'co_gpus' and 'co_nodes': expected positive integers"),
    ("A,16,2,,,,2_0\n", "s.csv line 2: field 'samples_per_s': expected a number, got '2_0'"),
])
def test_bad_sample_rows_are_refused_by_line(rows, message):
    with pytest.raises(DeepShareError, match="^" + re.escape(message)):
        read_samples(HEADER + rows, "s.csv")


@pytest.mark.parametrize("row, fits", [("A,4,2", True), ("A,3,2", True), ("A,5,2", False), ("A,4,4", True),
                                       ("A,5,5", False), ("A,640,2", False)])
def test_a_job_the_clusters_nodes_cannot_hold_is_refused(row, fits):
    capacity = node_capacity(TWO_LEAVES)  # four 2-GPU nodes
    assert capacity == (2, 2, 2, 2)
    text = HEADER + f"{row},,,,10\n"
    if fits:  # the row passes: the next error is the file's, which has no co-located row
        with pytest.raises(DeepShareError, match=r"^s\.csv: no co-located samples"):
            read_samples(text, "s.csv", capacity=capacity)
    else:
        with pytest.raises(DeepShareError, match=r"^s\.csv line 2: fields 'gpus' and 'nodes': \d+ GPUs on \d+ nodes "
                                                 r"do not fit the cluster \(4 nodes; its \d+ largest hold \d+ GPUs\)$"):
            read_samples(text, "s.csv", capacity=capacity)
        with pytest.raises(DeepShareError, match=r"^s\.csv: no co-located samples"):  # no cluster, no check
            read_samples(text, "s.csv")


@pytest.mark.parametrize("capacity, victim, aggressor, fits", [
    ((2, 2, 2, 2), "A,3,2", "B,3,2", True),  # 6 GPUs on 3 nodes, sharing one
    ((2, 2, 2, 2), "A,4,2", "B,2,2", False),  # A fills both its nodes: nothing left to share
    ((2, 2, 2, 2), "A,4,4", "B,2,2", True),  # A takes one GPU of each node: B shares two of them
    ((2, 2, 2, 2), "A,8,4", "B,1,1", False),  # A fills the cluster
    ((8, 8, 8, 8), "A,4,2", "B,8,4", True),  # B spans every node, sharing A's two
    ((8, 8, 8, 8), "A,30,4", "B,4,2", False),  # 34 GPUs on a cluster of 32
    ((8, 8, 8, 8), "A,16,2", "B,16,2", False),  # 32 GPUs on at most 3 nodes
    ((8, 8, 8, 8), "A,12,2", "B,12,2", True),
    ((8, 2, 2), "A,9,2", "B,2,2", True),  # uneven: 8 + 1 beside 1 + 1 on the shared 2-GPU node
])
def test_two_jobs_that_shared_nodes_must_fit_together(capacity, victim, aggressor, fits):
    text = HEADER + f"{victim},,,,10\n{aggressor},,,,10\n{victim},{aggressor},5\n"
    if fits:
        assert read_samples(text, "s.csv", capacity=capacity).catalog.ratios
    else:
        with pytest.raises(DeepShareError, match=r"^s\.csv line 4: the two jobs \(.*\) cannot run together on the "
                                                 r"cluster's nodes \(\d+ nodes of [\d to]+ GPUs; jobs that share "
                                                 r"nodes share at least one\)$"):
            read_samples(text, "s.csv", capacity=capacity)


def test_two_jobs_across_an_uplink_need_their_nodes_side_by_side(tmp_path, capsys):
    from cli_run import cli, one_error_line
    from fabric_cases import TWO_LEAVES_SPEC

    (tmp_path / "spec.yaml").write_text(TWO_LEAVES_SPEC)
    head = HEADER.strip() + ",link\n"
    (tmp_path / "s.csv").write_text(head + "A,4,2,,,,10,\nB,4,3,,,,10,\nA,4,2,B,4,3,5,s0/l0/uplink\n")
    rc, _, err = cli(capsys, "calibrate", "--samples", tmp_path / "s.csv", "--cluster", tmp_path / "spec.yaml",
                     "--folds", 2, "--starts", 1, "--workers", 1)
    assert rc == 2
    one_error_line(err, "s.csv line 4: the two jobs (A,4,2 and B,4,3) cannot run together on the cluster's nodes "
                        "(4 nodes of 2 GPUs)")


@pytest.mark.parametrize("isolated, ratios, message", [
    (',isol_thp\n"A,2,2",100\n"B,2,2",90\n', ',"A,2,2","Typo,2,2"\n"A,2,2",0.9,0.8\n"B,2,2",0.9,0.8\n',
     "shared_thp_ratio.csv row 1, column 3: aggressor Typo,2,2 is not in isolated_thp.csv"),
    (',isol_thp\n"A,2,2",100\n', ',"A,2,2"\n"A,2,2",0.9\n"Typo,2,2",0.9\n',
     r"shared_thp_ratio.csv row 3 \(Typo,2,2\): the victim is not in isolated_thp.csv"),
    (',isol_thp\n"A,2,2",1_00\n', ',"A,2,2"\n"A,2,2",0.9\n', r"isolated_thp.csv row 2 \(A,2,2\): expected a throughput"),
    (',isol_thp\n"A,2,2",100\n"' + "x" * 200_000 + '",5\n', ',"A,2,2"\n"A,2,2",0.9\n',
     r"isolated_thp.csv row 3: expected CSV, field larger than field limit"),
])
def test_bad_profile_tables_are_one_error_naming_the_row(tmp_path, isolated, ratios, message):
    (tmp_path / "isolated_thp.csv").write_text(isolated)
    (tmp_path / "shared_thp_ratio.csv").write_text(ratios)
    with pytest.raises(DeepShareError, match=f"^{tmp_path}: malformed profiles \\({message}"):
        load_profiles(tmp_path)
