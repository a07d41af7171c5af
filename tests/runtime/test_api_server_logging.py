"""The scheduler's HTTP server leaves the host process's logging alone.

uvicorn's default logging set-up (``logging.config.dictConfig``) closes every handler the process
has. absl's handler closes its stream then, and under pytest that stream was once the capture
file: every later test of the worker errored with "I/O operation on closed file". A library
started in-process (:func:`~deepshare.runtime.service.run_scheduler`) must not do that to its host.
"""

from __future__ import annotations

import logging
import logging.config

import pytest

pytest.importorskip("uvicorn")

from deepshare.runtime.service import api_server  # noqa: E402


def test_building_the_server_configures_no_logging_and_closes_no_handler(tmp_path, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("logging.config.dictConfig called")

    monkeypatch.setattr(logging.config, "dictConfig", refuse)
    monkeypatch.setattr(logging.config, "fileConfig", refuse)
    host = logging.FileHandler(tmp_path / "host.log")  # closing it would close its file
    logging.getLogger("a-host-application").addHandler(host)
    try:
        server = api_server(lambda scope, receive, send: None)
        assert server.config.log_config is None
        assert not host.stream.closed
        logging.getLogger("uvicorn.error").warning("through the host's handlers")
        assert logging.getLogger("uvicorn.error").getEffectiveLevel() == logging.WARNING
    finally:
        logging.getLogger("a-host-application").removeHandler(host)
        host.close()
