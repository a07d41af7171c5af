"""`compare --tenants` and `evaluate --tenants` print and write fairness beside the JCTs."""

from __future__ import annotations

import json

from cli_run import cli

EQUAL = "queues:\n  - {name: a, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n" \
        "  - {name: b, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n"
TRACE = "job_id,submit_time,model,gpus,duration_s,total_samples,queue,priority\na1,0,resnet50,4,100,,a,\nb1,0,resnet50,4,100,,b,\n"


def _files(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "tenants.yaml").write_text(EQUAL)
    return tmp_path / "t.csv", tmp_path / "tenants.yaml"


def test_compare_prints_and_writes_fairness(tmp_path, capsys):
    trace, tenants = _files(tmp_path)
    out = tmp_path / "c.json"
    rc, stdout, err = cli(capsys, "compare", "--trace", trace, "--policies", "fifo+consolidated,drf+consolidated",
                          "--tenants", tenants, "--cluster", "a100-16", "--no-progress", "--json", out)
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert set(doc["fairness"]) == {"fifo+consolidated", "drf+consolidated"}
    fifo = doc["fairness"]["fifo+consolidated"]
    # the cohort holds 4 GPUs (2 + 2 nominal) of the 16: a1 runs 0-100, b1 waits for it, 100-200.
    # Fair part 16 / 2 = 8 GPUs >= 4, alone 100 s: rho 1 and 2; b's wait 100 s
    assert (fifo["worst_rho"], fifo["share_rho_above_1"], fifo["worst_queue_avg_queue_s"]) == (2.0, 0.5, 100.0)
    assert set(fifo["queues"]) == {"a", "b"}


def test_compare_prints_the_fairness_table(tmp_path, capsys):
    trace, tenants = _files(tmp_path)
    rc, stdout, err = cli(capsys, "compare", "--trace", trace, "--policies", "fifo+consolidated", "--tenants", tenants,
                          "--cluster", "a100-16", "--no-progress")
    assert rc == 0, err
    assert "worst rho" in stdout and "a wait (s)" in stdout


def test_evaluate_adds_fairness_columns_and_json(tmp_path, capsys):
    trace, tenants = _files(tmp_path)
    out = tmp_path / "e.json"
    rc, stdout, err = cli(capsys, "evaluate", "--trace", trace, "--policies", "fifo+consolidated", "--seeds", "1",
                          "--tenants", tenants, "--cluster", "a100-16", "--json", out)
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert doc["results"]["fifo+consolidated"]["worst_rho"] == 2.0
    assert doc["fairness"]["fifo+consolidated"]["0"]["queues"]["a"]["jobs"] == 1
    rc, stdout, err = cli(capsys, "evaluate", "--trace", trace, "--policies", "fifo+consolidated", "--seeds", "1",
                          "--tenants", tenants, "--cluster", "a100-16")
    assert rc == 0 and "worst rho" in stdout


def test_evaluate_without_tenants_has_no_fairness(tmp_path, capsys):
    trace, _ = _files(tmp_path)
    out = tmp_path / "e.json"
    rc, _, err = cli(capsys, "evaluate", "--trace", trace, "--policies", "fifo+consolidated", "--seeds", "1",
                     "--cluster", "a100-16", "--json", out)
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert "fairness" not in doc and "worst_rho" not in doc["results"]["fifo+consolidated"]
