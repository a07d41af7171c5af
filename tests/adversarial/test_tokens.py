"""Tokens that no client could ever send (a line break from a secret file, a space, too short) are
refused where they are configured, in one line before Ray starts, for both services: otherwise
every request would be a silent 401 (the service's token) or fail in ``urllib`` (a client's).
And ``serve`` on a network address warns what it exposes, with or without a token."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.infra.httpauth import check_token
from deepshare.serving.settings import TOKEN_ENV as SERVE_TOKEN_ENV
from deepshare.serving.settings import ServiceSettings

NOT_A_HEADER = "at most 4096 printable ASCII characters without spaces"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("token, why", [
    ("secret-token\n", NOT_A_HEADER),  # kubectl create secret --from-file keeps the newline
    ("two words!", NOT_A_HEADER),
    ("tab\tsecret", NOT_A_HEADER),
    ("é-non-ascii", NOT_A_HEADER),
    ("x" * 4097, NOT_A_HEADER),
    ("seven77", "at least 8 characters, got 7"),
])
def test_check_token_refuses_what_a_header_cannot_carry(token, why):
    with pytest.raises(DeepShareError) as exc:
        check_token(token, "$SOME_TOKEN")
    assert str(exc.value).startswith("$SOME_TOKEN: the token must ") and why in str(exc.value)


def test_check_token_accepts_printable_ascii_from_8_to_4096():
    for token in ("abcdefgh", "x" * 4096, "!#$%&'()*+,-./0123456789:;<=>?@[]^_`{|}~"):
        assert check_token(token, "t") == token


def test_serve_refuses_a_token_with_a_newline_before_ray(capsys, monkeypatch):
    monkeypatch.setenv(SERVE_TOKEN_ENV, "secret-token\n")
    assert main(["serve", "--policy", "fifo+consolidated", "--port", "1"]) == 2
    assert one_error_line(capsys) == f"deepshare: error: ${SERVE_TOKEN_ENV}: the token must be {NOT_A_HEADER}"


def test_serve_config_token_is_checked_by_its_settings():
    """``serve run serve/config.yaml`` takes the token from its args: the same rule, by pydantic."""
    with pytest.raises(ValidationError, match="token"):
        ServiceSettings(token="secret-token\n")
    assert ServiceSettings(token="secret-token").token == "secret-token"


@pytest.mark.parametrize("token", ["s3cr3t-Token-Value\n", "s3cr3t"])
def test_a_refused_serve_token_is_not_repeated_in_the_error(monkeypatch, token):
    """Serve, Ray and stderr print the error; the refused token is commonly the real secret with
    a secret file's trailing newline. It was shown as pydantic's ``input_value=...``."""
    from deepshare.serving.deployment import build_app

    monkeypatch.setenv(SERVE_TOKEN_ENV, token)  # serve run serve/config.yaml: the token from the environment
    with pytest.raises(ValidationError) as from_env:
        build_app({"policy": "fifo+consolidated"})
    with pytest.raises(ValidationError) as from_args:  # or from the config's args
        ServiceSettings.model_validate({"token": token})
    for exc in (from_env, from_args):
        assert "token" in str(exc.value) and "s3cr3t" not in str(exc.value)
    assert "s3cr3t" not in repr(ServiceSettings(token="s3cr3t-Token-Value"))


@pytest.mark.parametrize("source", ["flag", "env"])
def test_scheduler_placement_token_is_checked_before_ray(tmp_path, capsys, monkeypatch, source):
    from deepshare.runtime import service

    monkeypatch.setattr(service, "start_ray", lambda *a, **k: pytest.fail("Ray must not start"))
    monkeypatch.delenv("DEEPSHARE_SCHEDULER_TOKEN", raising=False)
    argv = ["scheduler", "start", "--local", "--port", "0", "--state", str(tmp_path / "s"),
            "--placement-url", "http://127.0.0.1:9"]
    if source == "flag":
        argv += ["--placement-token", "two words!"]
        name = "--placement-token"
    else:
        monkeypatch.setenv(SERVE_TOKEN_ENV, "two words!")
        name = f"${SERVE_TOKEN_ENV}"
    assert main(argv) == 2
    assert one_error_line(capsys) == f"deepshare: error: {name}: the token must be {NOT_A_HEADER}"


def test_scheduler_without_placement_url_ignores_the_serve_token(tmp_path, monkeypatch):
    """``$DEEPSHARE_SERVE_TOKEN`` only matters with ``--placement-url``: a policy run is not refused."""
    from deepshare.cli import scheduler as cli

    monkeypatch.setenv(SERVE_TOKEN_ENV, "two words!")

    class Args:
        placement_url = None
        placement_token = None

    assert cli._placement_token(Args()) is None


@pytest.mark.parametrize("token", [None, "serve-token-123"])
def test_serve_on_a_network_address_warns_in_one_line_what_is_exposed(capsys, monkeypatch, token):
    """Like ``scheduler start``: a non-loopback --host says what it exposes, and whether a token
    guards it, before anything starts (here the port is refused right after: no Ray)."""
    import deepshare.cli.serve as serve_cli

    def refuse(host, port):
        raise DeepShareError(f"--host {host} --port {port}: cannot bind (test)")

    monkeypatch.setattr(serve_cli, "_check_port_free", refuse)
    if token:
        monkeypatch.setenv(SERVE_TOKEN_ENV, token)
    else:
        monkeypatch.delenv(SERVE_TOKEN_ENV, raising=False)
    assert main(["serve", "--policy", "fifo+consolidated", "--host", "0.0.0.0", "--port", "8000"]) == 2
    warning, error = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: --host 0.0.0.0 serves placement decisions to the network, ")
    assert ("token-protected but without TLS" in warning) == bool(token)
    assert (f"WITHOUT a token (set ${SERVE_TOKEN_ENV})" in warning) == (not token)
    assert error == "deepshare: error: --host 0.0.0.0 --port 8000: cannot bind (test)"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
def test_serve_on_loopback_does_not_warn(host):
    from deepshare.cli.serve import exposure_warning

    assert exposure_warning(host, has_token=False) is None


def test_agents_metrics_on_a_network_address_warn_in_one_line_before_ray(capsys, no_ray):
    """The agents' exporter has no token: a non-loopback --metrics-host says what it exposes before
    anything starts, as serve and scheduler start do (here no Ray answers right after)."""
    argv = ["agents", "start", "--address", "127.0.0.1:1", "--metrics-port", "9479", "--metrics-host", "0.0.0.0"]
    assert main(argv) == 2  # no Ray answers there
    warning, error = capsys.readouterr().err.strip().splitlines()
    assert warning == ("warning: --metrics-host 0.0.0.0 serves every node's link and GPU metrics (node names, link and "
                       "GPU load) to the network, without a token or TLS: keep the port behind a firewall or a trusted network")
    assert error.startswith("deepshare: error: --address 127.0.0.1:1: ")


@pytest.mark.parametrize("argv", [["--metrics-port", "9479"], ["--metrics-port", "9479", "--metrics-host", "::1"],
                                  ["--metrics-host", "0.0.0.0"]], ids=["default", "loopback", "no-exporter"])
def test_agents_on_loopback_or_without_exporter_do_not_warn(capsys, argv, no_ray):
    assert main(["agents", "start", "--address", "127.0.0.1:1", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines()[0].startswith("deepshare: error: --address")


def test_serve_metrics_port_is_for_the_private_instance_and_must_be_free(capsys):
    """--metrics-port sets the private Ray instance's metrics agent; both refusals come before Ray starts."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            free = other.getsockname()[1]
        assert main(["serve", "--policy", "fifo+consolidated", "--port", str(free), "--metrics-port", str(busy)]) == 2
        assert one_error_line(capsys) == f"deepshare: error: --metrics-port {busy}: cannot bind (already in use)"
    assert main(["serve", "--policy", "fifo+consolidated", "--port", str(free), "--metrics-port", "8080",
                 "--address", "127.0.0.1:1"]) == 2
    assert "--metrics-port: only for the private Ray instance" in one_error_line(capsys)
