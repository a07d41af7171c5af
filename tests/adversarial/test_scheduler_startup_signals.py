"""A SIGHUP while the scheduler starts (Ray's start takes a while) neither kills it nor is lost.

Its handler was installed only once Ray was up: before, SIGHUP's default action ended the process
with no clean-up (a ``--local`` Ray cluster left running), and a reload asked for meanwhile
(``systemctl reload`` as the scheduler starts) was lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from contextlib import ExitStack

import pytest

from deepshare.runtime import service
from deepshare.runtime.tenancy import LiveTenants

pytestmark = pytest.mark.skipif(not hasattr(__import__("signal"), "SIGHUP"), reason="no SIGHUP on this platform")

STARTUP = textwrap.dedent("""
    import os, signal, sys
    from deepshare.runtime import service
    from deepshare.runtime.service import RuntimeFailure, ServiceConfig, run_scheduler
    from deepshare.policies.registry import make_policy

    def start_ray(config, cleanup, *_):
        cleanup.callback(print, "cleaned up", flush=True)
        os.kill(os.getpid(), signal.SIGHUP)  # as Ray starts
        raise RuntimeFailure("stopped here for the test")

    service.start_ray = start_ray
    before = signal.getsignal(signal.SIGHUP)  # SIG_IGN under nohup
    try:
        run_scheduler(ServiceConfig(state_dir=sys.argv[1], port=0), make_policy("fifo+consolidated"))
    except RuntimeFailure as exc:
        print("survived:", exc, flush=True)
    print("handler back:", signal.getsignal(signal.SIGHUP) == before, flush=True)
""")


def test_a_sighup_during_the_start_neither_kills_it_nor_skips_its_clean_up(tmp_path):
    done = subprocess.run([sys.executable, "-c", STARTUP, str(tmp_path / "state")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines() == ["cleaned up", "survived: stopped here for the test", "handler back: True"]


def test_a_reload_asked_during_the_start_is_made_once_the_handlers_are_in(tmp_path):
    file = tmp_path / "tenants.yaml"
    file.write_text("queues:\n  - {name: a, nominal_gpus: 1}\n")
    tenants = LiveTenants("admin-token-0123456789", file)
    asked = threading.Event()
    asked.set()  # a SIGHUP came while Ray started
    with ExitStack() as cleanup:
        service._install_signals(threading.Event(), tenants, cleanup, asked)
        deadline = time.monotonic() + 30
        while tenants.reloads == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert tenants.reloads == 1


def test_no_reload_without_a_sighup_during_the_start(tmp_path):
    file = tmp_path / "tenants.yaml"
    file.write_text("queues:\n  - {name: a, nominal_gpus: 1}\n")
    tenants = LiveTenants("admin-token-0123456789", file)
    with ExitStack() as cleanup:
        service._install_signals(threading.Event(), tenants, cleanup, threading.Event())
        time.sleep(0.2)
    assert tenants.reloads == 0
