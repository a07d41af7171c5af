"""``--policies``: a name listed twice would run twice and keep one result under its key; it is
refused, as a suite file's repeats are."""

from __future__ import annotations

import pytest
from cli_run import cli, one_error_line


@pytest.mark.parametrize("command", ["compare", "evaluate"])
def test_a_policy_listed_twice_is_refused(capsys, tmp_path, command):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\nj0,0,FSDP,2,600,\n")
    out = tmp_path / "r.json"
    rc, _, err = cli(capsys, command, "--trace", trace, "--policies", "fifo+spread, las+spread,fifo+spread", "--json", out)
    assert rc == 2
    one_error_line(err, "--policies: fifo+spread listed more than once")
    assert not out.exists()
