"""Adversarial review of the files commands write (review of 2026-12-06): inputs that an output
flag must not overwrite, folders reused by a run that must not redirect its writes through a
planted link, the modes of written files, an unusable output found before the work, and SIGTERM
ending a command as Ctrl-C does."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.atomic import mode_for, write_text_atomic
from deepshare.core.errors import DeepShareError
from deepshare.core.files import open_append
from deepshare.core.workers import worker_pool

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
TENANTS = ROOT / "deepshare" / "data" / "tenants" / "four-teams.yaml"
TINY_CONFIG = ROOT / "tests" / "fixtures" / "rl" / "tiny.yaml"
SHIPPED_BASE = ROOT / "deepshare" / "data" / "policies" / "rl_est_imitation.pt"


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- inputs no output may overwrite ------------------------------------------------------------------


def test_a_suite_run_refuses_to_write_over_its_tenants_file(here, capsys):
    shutil.copy(TENANTS, "ten.yaml")
    rc, _, err = cli(capsys, "evaluate", "--suite", "tiny", "--tenants", "ten.yaml", "--json", "ten.yaml")
    assert rc == 2
    one_error_line(err, "--json ten.yaml: is the input --tenants ten.yaml")
    assert Path("ten.yaml").read_bytes() == TENANTS.read_bytes()


def test_a_suite_run_refuses_to_write_over_the_suites_own_tenants_file(here, capsys):
    shutil.copy(TENANTS, "ten2.yaml")
    suite = (ROOT / "deepshare" / "data" / "suites" / "tiny.yaml").read_text()
    Path("s.yaml").write_text(suite + "\ntenants: ten2.yaml\n")
    rc, _, err = cli(capsys, "evaluate", "--suite", "s.yaml", "--json", "ten2.yaml")
    assert rc == 2
    one_error_line(err, "--json ten2.yaml: is the input the suite's tenants ten2.yaml")


def test_a_bundled_suites_name_is_no_input_file():
    from argparse import Namespace

    from deepshare.cli.evaluate import _suite_inputs

    inputs = _suite_inputs(Namespace(suite="tiny", tenants=None))
    assert inputs["--suite"] is None  # `--json tiny` writes a file named tiny, not the bundled suite


def test_calibrate_refuses_to_write_over_its_cluster_spec(here, capsys):
    shutil.copy(ROOT / "deepshare" / "data" / "clusters" / "a100-16.yaml", "cl.yaml")
    Path("s.csv").write_text("x\n")
    for flag in ("--out", "--json"):
        rc, _, err = cli(capsys, "calibrate", "--samples", "s.csv", "--cluster", "cl.yaml", flag, "cl.yaml")
        assert rc == 2
        one_error_line(err, f"{flag} cl.yaml: is the input --cluster cl.yaml")


def test_train_refuses_a_run_folder_whose_policy_is_its_init_from(here, capsys):
    from policy_files import write_policy_file

    Path("run").mkdir()
    write_policy_file(Path("run/policy.pt"), {})  # a width-8 scorer of the default encoding
    Path("cfg.yaml").write_text(TINY_CONFIG.read_text().replace("hidden: 16", "hidden: 8"))
    rc, _, err = cli(capsys, "train", "cfg.yaml", "--out", "run", "--init-from", "run/policy.pt")
    assert rc == 2
    one_error_line(err, "--out run/policy.pt: is the input --init-from", "writing it would destroy the input")


# -- an unusable output is found before the work ----------------------------------------------------


@pytest.mark.parametrize("argv", [
    ("simulate", "--trace", TRACE, "--policy", "las+consolidated", "--json", ""),
    ("simulate", "--trace", TRACE, "--policy", "las+consolidated", "--jobs-csv", ""),
    ("compare", "--trace", TRACE, "--policies", "las+spread", "--json", ""),
    ("evaluate", "--trace", TRACE, "--policies", "las+spread", "--seeds", "1", "--out", ""),
    ("trace", "generate", "--jobs", "5", "--out", ""),
], ids=lambda a: " ".join(map(str, a[:1] + a[-2:-1])))
def test_an_empty_output_path_is_refused_not_ignored(here, capsys, argv):
    rc, stdout, err = cli(capsys, *argv)
    assert rc == 2 and stdout == ""
    one_error_line(err, "an empty path")
    assert list(here.iterdir()) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_output_in_proc_is_refused_before_any_output_is_written(here, capsys):
    rc, _, err = cli(capsys, "simulate", "--trace", TRACE, "--policy", "las+consolidated",
                     "--jobs-csv", "j.csv", "--json", "/proc/self/x.json")
    assert rc == 2
    one_error_line(err, "--json /proc/self/x.json: cannot write output: the path is in the system folder /proc")
    assert not Path("j.csv").exists()


def test_an_output_in_dev_is_refused_so_dev_stdout_is_never_replaced(here, capsys):
    """``/dev/stdout`` redirected to a file is a link to a regular file: the atomic rename would
    have replaced the link itself, for every process of the machine (as root)."""
    rc, _, err = cli(capsys, "simulate", "--trace", TRACE, "--policy", "las+consolidated", "--json", "/dev/stdout")
    assert rc == 2
    one_error_line(err, "the path is in the system folder /dev", "--json - writes to standard output")
    assert os.path.islink("/dev/stdout") or not os.path.lexists("/dev/stdout")


def test_a_folder_no_file_can_be_made_in_is_refused_before_the_work(here, capsys):
    Path("ro").mkdir()
    os.chmod("ro", 0o555)
    try:
        if os.access("ro", os.W_OK):  # root: permission bits do not bind; a read-only folder needs a mount
            pytest.skip("this user writes in any folder")
        rc, _, err = cli(capsys, "simulate", "--trace", TRACE, "--policy", "las+consolidated",
                         "--jobs-csv", "j.csv", "--json", "ro/x.json")
    finally:
        os.chmod("ro", 0o755)
    assert rc == 2 and not Path("j.csv").exists()
    one_error_line(err, "--json ro/x.json: cannot write in folder 'ro'")


def test_evaluate_makes_no_out_folder_when_another_flag_is_wrong(here, capsys):
    rc, _, err = cli(capsys, "evaluate", "--trace", TRACE, "--policies", "las+spread", "--seeds", "1",
                     "--out", "ev/a/b", "--cluster", "nosuch")
    assert rc == 2 and not Path("ev").exists()
    one_error_line(err, "--cluster 'nosuch'")


def test_a_live_experiments_workdir_that_is_a_file_is_one_line(here, capsys, monkeypatch):
    import ray

    # a Ray another test file left running in this worker process is refused first; the folder is
    # what this test is about (nothing starts: the folder fails before the cluster does)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    Path("r.json").write_text("x")
    rc, _, err = cli(capsys, "autoscale", "live", "--workdir", "r.json", "--steps", "1")
    assert rc == 2
    one_error_line(err, "--workdir r.json: cannot make the folder")


# -- no write through a planted link, no inherited mode ----------------------------------------------


def test_appends_refuse_a_planted_link(tmp_path):
    from deepshare.experiments.learning_curve import append_row

    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "suite_curve.csv").symlink_to(victim)
    with pytest.raises(DeepShareError, match="is a symlink, which is not followed"):
        append_row(tmp_path / "suite_curve.csv", {"iteration": 1})
    assert victim.read_text() == "mine\n"
    with open_append(tmp_path / "metrics.csv", "metrics file") as fh:  # a new file is made, then appended to
        fh.write("a\n")
    with open_append(tmp_path / "metrics.csv", "metrics file") as fh:
        fh.write("b\n")
    assert (tmp_path / "metrics.csv").read_text() == "a\nb\n"


def test_a_run_summary_is_written_whole_and_not_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "imitation.json").symlink_to(victim)
    write_text_atomic(tmp_path / "imitation.json", "{}\n", "run summary")  # what imitate and expert iteration call
    assert victim.read_text() == "mine" and (tmp_path / "imitation.json").read_text() == "{}\n"


def test_a_written_file_never_takes_setuid_bits_nor_a_links_targets_mode(here, capsys):
    Path("own.json").write_text("{}")
    os.chmod("own.json", 0o4755)
    Path("attacker.txt").write_text("x")
    os.chmod("attacker.txt", 0o6777)
    os.symlink("attacker.txt", "m.json")
    umask = os.umask(0o022)
    try:
        assert mode_for(Path("own.json")) == 0o755  # its permission bits, never setuid
        assert mode_for(Path("m.json")) == 0o644  # a link's target's mode is not taken
        assert mode_for(Path("new.json")) == 0o644
        rc, _, err = cli(capsys, "simulate", "--trace", TRACE, "--policy", "las+consolidated", "--json", "m.json")
        assert rc == 0, err
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.lstat("m.json").st_mode) == 0o644
    assert stat.S_IMODE(os.stat("attacker.txt").st_mode) == 0o6777 and Path("attacker.txt").read_text() == "x"


def test_export_policy_writes_a_file_as_readable_as_any_output(here, capsys):
    umask = os.umask(0o022)
    try:
        rc, _, err = cli(capsys, "export-policy", SHIPPED_BASE, "--out", "p.pt", "--kind", "network", "--commit", "abcdef1")
    finally:
        os.umask(umask)
    assert rc == 0, err
    assert stat.S_IMODE(os.stat("p.pt").st_mode) == 0o644  # mkstemp's 0600 before


# -- SIGTERM ends a command as Ctrl-C does --------------------------------------------------------------


def test_sigterm_in_a_command_raises_terminated_and_the_handler_is_put_back():
    from deepshare.cli import Terminated, _terminate_as_interrupt

    before = signal.getsignal(signal.SIGTERM)  # another test of this worker may have left Ray's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (it was skipped then): as a fresh process has it
    try:
        assert _terminate_as_interrupt()
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode
    finally:
        signal.signal(signal.SIGTERM, before)


def _sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_an_interrupted_pool_terminates_its_workers():
    workers = []
    with pytest.raises(KeyboardInterrupt):
        with worker_pool(2) as pool:
            pool.submit(_sleep, 60)
            pool.submit(_sleep, 60)
            workers = list(pool._processes.values())  # started with the first task
            time.sleep(0.5)
            raise KeyboardInterrupt  # the caller's Ctrl-C or SIGTERM
    for process in workers:
        process.join(30)  # a test bound, not a timing: they would otherwise sleep 60 s
        assert not process.is_alive()


def test_a_read_only_folder_is_refused_before_the_work(here, capsys, monkeypatch):
    """What a read-only mount answers (root too, whom permission bits do not bind)."""
    import errno

    import deepshare.cli.output as output

    def read_only(*_, **__):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(output.tempfile, "mkstemp", read_only)
    rc, _, err = cli(capsys, "simulate", "--trace", TRACE, "--policy", "las+consolidated", "--json", "x.json")
    assert rc == 2 and not Path("x.json").exists()
    one_error_line(err, "--json x.json: cannot write in folder '.': Read-only file system")


# -- paths with control characters print as one line -------------------------------------------------


def test_one_line_escapes_what_a_terminal_would_act_on():
    from deepshare.core.errors import one_line

    assert one_line("runs/a b/é 中.json") == "runs/a b/é 中.json"
    assert one_line("a\nb\rc\x1b[2Jd\u2028e\tf") == "a\\nb\\rc\\x1b[2Jd\\u2028e\\tf"
    assert one_line("C:\\x\ny") == "C:\\\\x\\ny"  # once escaping, a backslash is doubled


def test_a_written_path_with_a_newline_is_one_wrote_line(here, capsys):
    name = "t\nwrote fake.csv"
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 5, "--rate", 0.01, "--seed", 3, "--out", name)
    assert (rc, err) == (0, "")
    assert Path(name).is_file()  # the path is used as given; only its echo is escaped
    assert out.strip().splitlines() == [out.strip()]
    assert out.startswith("wrote 5 jobs to t\\nwrote fake.csv (span")


def test_an_error_naming_a_path_with_a_newline_or_escape_is_one_line(here, capsys):
    rc, _, err = cli(capsys, "trace", "stats", "missing\n\x1b[31mdeepshare: ok.csv")
    assert rc == 2
    line = one_error_line(err, "missing\\n\\x1b[31mdeepshare: ok.csv")
    assert "\x1b" not in line
