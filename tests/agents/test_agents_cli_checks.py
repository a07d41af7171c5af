"""``deepshare agents`` flags checked before any work: ``--json`` (as every command checks its
outputs), ``--metrics-host`` (never empty), and the metrics settings of ``AgentConfig``."""

from __future__ import annotations

import pytest

from deepshare.agents.config import AgentConfig
from test_agents_probes import run_cli  # this folder is on sys.path under pytest


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command samples probes or joins a cluster."""
    from deepshare.agents import deploy, probes

    def work(*_: object, **__: object) -> None:
        raise AssertionError("the command did work before checking --json")

    monkeypatch.setattr(probes, "local_probes", work)
    monkeypatch.setattr(deploy, "connect", work)


@pytest.mark.parametrize("action", ["probe", "status"])
def test_an_empty_json_path_is_refused_before_any_work(action, monkeypatch):
    _no_work(monkeypatch)
    rc, out, err = run_cli(action, "--json", "")
    assert rc == 2 and out == "" and err == "deepshare: error: --json '': an empty path; give --json a file path\n"


@pytest.mark.parametrize("action", ["probe", "status"])
def test_a_json_path_in_a_missing_folder_is_refused_before_any_work_naming_the_flag(action, tmp_path, monkeypatch):
    _no_work(monkeypatch)
    path = tmp_path / "missing" / "out.json"
    rc, out, err = run_cli(action, "--json", str(path))
    assert rc == 2 and out == "" and err.startswith(f"deepshare: error: --json {path}: folder") and "does not exist" in err


@pytest.mark.parametrize("host", ["", "  "])
def test_an_empty_metrics_host_is_refused_by_the_parser(host, capsys):
    rc, _, _ = run_cli("start", "--metrics-port", "0", "--metrics-host", host)
    err = capsys.readouterr().err
    assert rc == 2 and "argument --metrics-host: an empty host binds every interface" in err


@pytest.mark.parametrize("kw", [dict(metrics_port=-1), dict(metrics_port=65536), dict(metrics_port=True),
                                dict(metrics_port=9479.0), dict(metrics_host=""), dict(metrics_host=" ")])
def test_config_checks_the_metrics_settings(kw):
    with pytest.raises(ValueError, match="metrics_"):
        AgentConfig(**kw)


def test_config_takes_a_metrics_endpoint():
    config = AgentConfig(metrics_port=0, metrics_host="0.0.0.0")
    assert (config.metrics_port, config.metrics_host) == (0, "0.0.0.0")
    assert AgentConfig().metrics_port is None and AgentConfig().metrics_host == "127.0.0.1"
