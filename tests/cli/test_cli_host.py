"""``--host ''`` binds every interface, as 0.0.0.0 does: the service and the scheduler refuse it."""

from __future__ import annotations

import pytest
from cli_run import cli


@pytest.mark.parametrize("argv", [("serve", "--host", ""), ("scheduler", "start", "--host", " ")])
def test_an_empty_host_is_refused_not_bound_to_every_interface(capsys, argv):
    rc, _, err = cli(capsys, *argv)
    assert rc == 2 and "argument --host: an empty host binds every interface" in err


@pytest.mark.parametrize("argv", [("serve",), ("scheduler", "start")])
def test_an_ipv6_address_in_brackets_is_taken_without_them(argv):
    """``serve --host [::1]`` (an address as a URL writes it) failed: "cannot bind (Name or
    service not known)"; the scheduler stripped them at bind, the service did not."""
    from deepshare.cli import build_parser

    assert build_parser().parse_args([*argv, "--host", "[::1]"]).host == "::1"
    assert build_parser().parse_args([*argv, "--host", "::1"]).host == "::1"


def test_agents_metrics_host_in_brackets_is_taken_without_them():
    from deepshare.cli import build_parser

    args = build_parser().parse_args(["agents", "start", "--metrics-port", "9100", "--metrics-host", "[::1]"])
    assert args.metrics_host == "::1"


def test_the_service_port_check_binds_an_ipv6_address(capsys):
    import socket

    from deepshare.cli.serve import _check_port_free

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    _check_port_free("::1", 0)  # no error: what --host [::1] reaches now


@pytest.mark.parametrize("argv", [("serve", "--host"), ("scheduler", "start", "--host"),
                                  ("agents", "start", "--metrics-port", "9100", "--metrics-host")])
@pytest.mark.parametrize("host", ["[::1]:8470", "[", "[::1", "::1]", "[[::1]]"])
def test_a_host_with_a_port_or_a_stray_bracket_is_refused(capsys, argv, host):
    """``serve --host [::1]:8470`` warned that the service was exposed to the network, then failed
    with "cannot bind (Name or service not known)"."""
    from deepshare.cli import build_parser

    with pytest.raises(SystemExit) as exited:  # parsed only: nothing is started had it been taken
        build_parser().parse_args([*argv, host])
    assert exited.value.code == 2 and "is not an address: give it alone" in capsys.readouterr().err
