"""Second review of the files commands write (2026-12-06): modes set through the descriptor, an
interrupted pool that cannot hang, SIGTERM under Ray's handler, output folders checked before the
run, empty run-folder paths, another user's run folder, the umask read without changing it, a
hostile learning-curve header and bundled names that are no input files."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "tests" / "fixtures" / "rl" / "tiny.yaml"
SHIPPED_BASE = ROOT / "deepshare" / "data" / "policies" / "rl_est_imitation.pt"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- a written file's mode goes through its descriptor, never through a link put in its place --------


def _secret() -> Path:
    secret = Path("secret_key")
    secret.write_text("key")
    secret.chmod(0o640)  # not 0600, the temporary file's own mode: a mode passed through the link shows
    return secret


def _planting(real_mode_for, folder: Path, secret: Path):
    """``mode_for`` as an attacker's swap in its window: the temporary file becomes a link to ``secret``."""

    def mode_for(target):
        for tmp in folder.glob(f".{Path(target).name[:50]}.*"):
            tmp.unlink()
            tmp.symlink_to(secret.resolve())
        return real_mode_for(target)

    return mode_for


def test_an_atomic_write_never_changes_the_mode_of_a_linked_file(here, monkeypatch):
    import deepshare.core.atomic as atomic

    secret = _secret()
    monkeypatch.setattr(atomic, "mode_for", _planting(atomic.mode_for, here, secret))
    atomic.write_text_atomic("report.json", "{}")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o640 and secret.read_text() == "key"


def test_a_jobs_csv_never_changes_the_mode_of_a_linked_file(here, monkeypatch):
    import deepshare.core.jobs_csv as jobs_csv

    secret = _secret()
    monkeypatch.setattr(jobs_csv, "mode_for", _planting(jobs_csv.mode_for, here, secret))
    jobs_csv.JobsCsvStream("jobs.csv").commit()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o640 and secret.read_text() == "key"


def test_an_exported_policy_never_changes_the_mode_of_a_linked_file(here, capsys, monkeypatch):
    import deepshare.core.atomic as atomic

    secret = _secret()
    monkeypatch.setattr(atomic, "mode_for", _planting(atomic.mode_for, here, secret))
    rc, _, err = cli(capsys, "export-policy", SHIPPED_BASE, "--out", "p.pt", "--kind", "network", "--commit", "abcdef1")
    assert rc == 2  # the file loaded back is the link's target, no policy: refused, and nothing replaced
    one_error_line(err, "p.pt: not a DeepShare policy file")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o640 and secret.read_text() == "key"
    assert not Path("p.pt").exists() and [p.name for p in here.iterdir()] == ["secret_key"]


def test_the_umask_is_read_without_changing_it(monkeypatch):
    from deepshare.core.atomic import current_umask

    if not Path("/proc/self/status").is_file():
        pytest.skip("no /proc here")
    old = os.umask(0o027)
    try:
        def no_umask(_):
            raise AssertionError("os.umask called: another thread's new file would get mode 0666")

        monkeypatch.setattr(os, "umask", no_umask)
        assert current_umask() == 0o027
    finally:
        monkeypatch.undo()
        os.umask(old)


# -- an interrupted pool ends, whatever its workers were doing ----------------------------------------

POOL_SCRIPT = textwrap.dedent("""
    import sys, time
    from concurrent.futures import as_completed
    from deepshare.core.workers import worker_pool

    def big(i):
        return b"x" * (8 << 20)  # a result several pipe buffers long: a worker is killed mid-send

    def sleepy(i):
        time.sleep(3600)

    if __name__ == "__main__":
        for task in (big, sleepy):
            try:
                with worker_pool(2) as pool:
                    futures = [pool.submit(task, i) for i in range(40)]
                    if task is big:
                        for n, future in enumerate(as_completed(futures)):
                            if n == 1:
                                raise KeyboardInterrupt
                    time.sleep(0.5)
                    raise KeyboardInterrupt
            except KeyboardInterrupt:
                print(task.__name__, "left", flush=True)
""")


def test_an_interrupted_pool_ends_and_its_process_exits(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(POOL_SCRIPT)
    # the bound is for a hang (an hour of sleeping workers, or a pipe read for ever), not a timing
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["big", "left", "sleepy", "left"]
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr


# -- SIGTERM ends a command with 143, also once Ray has put its own handler in ------------------------

SIGTERM_SCRIPT = textwrap.dedent("""
    import argparse, signal, sys, time
    import deepshare.cli as cli

    def build_parser():
        parser = argparse.ArgumentParser()

        def slow(args, out, err):
            if sys.argv[1] == "ray":  # what ray.init does: exit with the signal's number
                signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
            print("ready", flush=True)
            time.sleep(60)
            return 0

        parser.set_defaults(func=slow)
        return parser

    cli.build_parser = build_parser
    rc = cli.main([])
    print("handler", "default" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else "other", flush=True)
    sys.exit(rc)
""")


@pytest.mark.parametrize("handler", ["deepshare", "ray"])
def test_sigterm_ends_a_command_with_143_and_puts_the_handler_back(tmp_path, handler):
    script = tmp_path / "term.py"
    script.write_text(SIGTERM_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), handler], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.strip() == "deepshare: terminated" and out.strip() == "handler default"


# -- output folders and run folders ---------------------------------------------------------------


@pytest.mark.parametrize("tenants", [(), ("--tenants", "four-teams")], ids=["no tenants", "tenants"])
def test_a_suites_out_folder_that_cannot_be_made_fails_before_the_run(here, capsys, tenants):
    Path("dangling").symlink_to("nowhere")
    rc, _, err = cli(capsys, "evaluate", "--suite", "tiny", *tenants, "--out", "dangling/sub", "--json", "r.json")
    assert rc == 2
    one_error_line(err, "--out dangling/sub: cannot create the folder")
    assert not Path("r.json").exists()


def test_a_suites_out_folder_is_made_before_the_run_so_json_can_go_inside(here, monkeypatch):
    import deepshare.cli.suite_tables as suite_tables

    def run_suite(*_, **__):
        assert Path("new/dir").is_dir(), "the run started before --out was made"
        raise KeyboardInterrupt  # enough: the folder was there before the work

    monkeypatch.setattr(suite_tables, "run_suite", run_suite)
    from deepshare.cli import main

    assert main(["evaluate", "--suite", "tiny", "--out", "new/dir", "--json", "new/dir/r.json"]) == 130


@pytest.mark.parametrize("argv, flag", [
    (("train", TINY_CONFIG, "--out", ""), "--out"),
    (("train", TINY_CONFIG, "--resume", ""), "--resume"),
    (("imitate", TINY_CONFIG, "--out", ""), "--out"),
    (("tune", TINY_CONFIG, "--grid", "ppo.lr=0.001,0.01", "--out", ""), "--out"),
    (("calibrate", "--profiles", "", "--json", "x.json"), "--profiles"),
], ids=lambda a: " ".join(map(str, a)) if isinstance(a, tuple) else a)
def test_an_empty_run_folder_is_refused_naming_its_flag(here, capsys, argv, flag):
    rc, _, err = cli(capsys, *argv)
    assert rc == 2
    one_error_line(err, f"{flag} '': an empty path")
    assert not Path("runs").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of another user needs root")
def test_a_run_folder_another_user_planted_in_a_shared_folder_is_refused(here, capsys):
    from deepshare.cli.output import _check_own_folder

    shared = Path("shared")  # as /tmp: anyone creates, only owners delete
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "theirs").mkdir()
    os.chown(shared / "theirs", 4242, 4242)
    Path("mine").mkdir()
    (shared / "link").symlink_to(Path("mine").resolve())
    os.lchown(shared / "link", 4242, 4242)
    for spelled in ("shared/link", "shared/link/", "shared/link/.", "./shared/link"):  # root too
        rc, _, err = cli(capsys, "train", TINY_CONFIG, "--out", spelled)
        assert rc == 2
        one_error_line(err, f"output folder {spelled}: is a link another user (uid 4242) made in the shared folder shared")
    rc, _, err = cli(capsys, "train", TINY_CONFIG, "--out", "shared/link/run")  # through it
    assert rc == 2
    one_error_line(err, "output folder shared/link/run: shared/link is a link another user (uid 4242) made")
    rc, _, err = cli(capsys, "imitate", TINY_CONFIG, "--out", "shared/theirs")
    assert rc == 2
    one_error_line(err, "output folder shared/theirs: is a folder another user (uid 4242) made in the shared folder")
    # elsewhere (a home, a project share, a squashed mount) another owner is no reason to refuse
    elsewhere = Path("project")
    elsewhere.mkdir()
    (elsewhere / "run").mkdir()
    os.chown(elsewhere / "run", 4242, 4242)
    (elsewhere / "link").symlink_to(Path("mine").resolve())
    os.lchown(elsewhere / "link", 4242, 4242)
    _check_own_folder("project/run")
    _check_own_folder("project/link")
    shared_own = shared / "mine"  # this user's own folder in the shared one
    shared_own.mkdir()
    _check_own_folder(str(shared_own))


def test_a_learning_curve_with_a_header_not_utf8_is_one_line(here):
    from deepshare.experiments.learning_curve import append_row

    Path("suite_curve.csv").write_bytes(b"iter\xff,ratio\n1,1.0\n")
    with pytest.raises(DeepShareError, match="suite_curve.csv line 1: cannot read the learning curve's header"):
        append_row(Path("suite_curve.csv"), {"iteration": 2})
    assert Path("suite_curve.csv").read_bytes() == b"iter\xff,ratio\n1,1.0\n"


def test_a_bundled_tenants_name_is_no_input_file(here):
    from argparse import Namespace

    from deepshare.cli.evaluate import _suite_inputs

    Path("four-teams").write_text("x")  # a file of that name: the bundled name is still what is read
    inputs = _suite_inputs(Namespace(suite="tiny", tenants="four-teams"))
    assert inputs["--tenants"] is None
    assert _suite_inputs(Namespace(suite="tiny", tenants="mine.yaml"))["--tenants"] == "mine.yaml"


def test_a_configs_init_from_is_named_as_the_configs(here, capsys):
    from policy_files import write_policy_file

    Path("run").mkdir()
    write_policy_file(Path("run/policy.pt"), {})
    text = TINY_CONFIG.read_text().replace("hidden: 16", "hidden: 8\n  init_from: run/policy.pt")
    Path("cfg.yaml").write_text(text)
    rc, _, err = cli(capsys, "train", "cfg.yaml", "--out", "run")
    assert rc == 2
    one_error_line(err, "--out run/policy.pt: is the input model.init_from")


def test_a_link_planted_for_a_runs_appended_file_is_refused_before_ray_starts(here, capsys, monkeypatch):
    import deepshare.rl.train as rl_train

    def no_ray(*_, **__):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(rl_train, "train", no_ray)
    Path("run").mkdir()
    Path("victim.csv").write_text("mine\n")
    Path("run/metrics.csv").symlink_to(Path("victim.csv").resolve())
    rc, _, err = cli(capsys, "train", TINY_CONFIG, "--out", "run")
    assert rc == 2
    one_error_line(err, "run/metrics.csv: cannot append to the metrics file: is a symlink, which is not followed")
    assert Path("victim.csv").read_text() == "mine\n"
