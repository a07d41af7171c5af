"""``--host ''`` binds every interface, as 0.0.0.0 does: the service and the scheduler refuse it."""

from __future__ import annotations

import pytest
from cli_run import cli


@pytest.mark.parametrize("argv", [("serve", "--host", ""), ("scheduler", "start", "--host", " ")])
def test_an_empty_host_is_refused_not_bound_to_every_interface(capsys, argv):
    rc, _, err = cli(capsys, *argv)
    assert rc == 2 and "argument --host: an empty host binds every interface" in err
