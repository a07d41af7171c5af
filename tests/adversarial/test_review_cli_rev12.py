"""Review rev12 of ``deepshare/cli/``: each test reproduces one confirmed defect (it fails on the
code as reviewed and passes once the defect is fixed). A user error is one ``deepshare: error:``
line naming the flag and what was expected (exit 2, no traceback); no output overwrites an input.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cli_run import cli, one_error_line
from deepshare.policies.checkpoint import shipped


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- 1: policies --card X --json X -------------------------------------------------------------
def _policy_copy(tmp_path: Path) -> tuple[Path, Path]:
    weights = tmp_path / "rl_est_ppo.pt"
    weights.write_bytes(shipped("rl_est_ppo.pt").read_bytes())
    card = tmp_path / "rl_est_ppo.card.yaml"
    card.write_text(shipped("rl_est_ppo.pt").with_name("rl_est_ppo.card.yaml").read_text())
    return weights, card


@pytest.mark.parametrize("given", ["weights", "card"])
@pytest.mark.parametrize("written", ["weights", "card"])
def test_policies_card_json_never_overwrites_the_policy_file_or_its_card(tmp_path, capsys, given, written):
    """``policies --card a.pt --json a.pt`` replaced the policy file with the JSON report (and
    ``--json a.card.yaml`` the card), with rc 0: a trained policy destroyed without a word."""
    files = dict(zip(("weights", "card"), _policy_copy(tmp_path)))
    before = {name: digest(path) for name, path in files.items()}
    rc, out, err = cli(capsys, "policies", "--card", files[given], "--json", files[written])
    assert rc == 2, (out, err)
    one_error_line(err, f"--json {files[written]}", "is the input --card")
    assert {name: digest(path) for name, path in files.items()} == before


def test_policies_card_json_elsewhere_still_writes(tmp_path, capsys):
    weights, _ = _policy_copy(tmp_path)
    rc, _, err = cli(capsys, "policies", "--card", weights, "--json", tmp_path / "card.json")
    assert rc == 0, err
    assert '"card"' in (tmp_path / "card.json").read_text()


# -- 2: calibrate --from-state DIR --tenants T --json T ----------------------------------------
@pytest.mark.parametrize("flag", ["--json", "--out"])
def test_calibrate_from_state_never_overwrites_the_tenants_file(tmp_path, capsys, flag):
    from deepshare.runtime.journal import Journal

    Journal(tmp_path / "state").close()  # an empty journal: a fit of no runs, quick
    tenants = tmp_path / "ten.yaml"
    tenants.write_bytes((Path(__file__).resolve().parents[2] / "deepshare/data/tenants/four-teams.yaml").read_bytes())
    before = digest(tenants)
    rc, out, err = cli(capsys, "calibrate", "--from-state", tmp_path / "state", "--tenants", tenants, flag, tenants)
    assert rc == 2, (out, err)
    one_error_line(err, f"{flag} {tenants}", "is the input --tenants")
    assert digest(tenants) == before


# -- 12: errors name the flag ------------------------------------------------------------------
@pytest.mark.parametrize(("value", "needles"), [
    ("bogus", ("--card: unknown policy 'bogus'",)),
    ("", ("--card '': an empty name",)),
    (" ", ("--card ' ': an empty name",)),
])
def test_policies_card_errors_name_the_flag(tmp_path, capsys, monkeypatch, value, needles):
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(capsys, "policies", "--card", value)
    assert rc == 2
    one_error_line(err, *needles)


def test_policies_card_a_folder_named_like_no_policy_names_the_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    rc, _, err = cli(capsys, "policies", "--card", "adir")
    assert rc == 2
    one_error_line(err, "--card: unknown policy 'adir'")


@pytest.mark.parametrize(("value", "needle"), [
    ("bogus", "--policy: unknown policy 'bogus'"),
    ("srsf+packed=x", "--policy: policy 'srsf+packed' takes no argument"),
])
def test_serve_policy_errors_name_the_flag(capsys, monkeypatch, value, needle):
    """``serve --policy bogus`` said "unknown policy 'bogus'" where simulate says "--policy: ..."."""
    monkeypatch.delenv("DEEPSHARE_SERVE_TOKEN", raising=False)
    rc, _, err = cli(capsys, "serve", "--policy", value)
    assert rc == 2
    one_error_line(err, needle)


# -- 3: an empty NAME= argument, and two names reporting as one in compare -----------------------
TRACE = Path(__file__).resolve().parents[2] / "deepshare/data/traces/deepshare-simulate-trace0.json"


@pytest.mark.parametrize(("name", "needle"), [
    ("rl-base=", "policy 'rl-base=': expected an argument after '='"),
    ("planner=", "policy 'planner=': expected an argument after '='"),
    ("srsf+packed=", "policy 'srsf+packed' takes no argument, got 'srsf+packed='"),
])
def test_an_empty_policy_argument_is_refused(name, needle):
    """``rl-base=`` and ``srsf+packed=`` built the default policy, silently: an unset variable."""
    from deepshare.core.errors import DeepShareError
    from deepshare.policies import make_policy

    with pytest.raises(DeepShareError, match=needle.replace("+", r"\+")):
        make_policy(name)


@pytest.mark.parametrize(("policies", "needle"), [
    ("srsf+packed,srsf+packed=", "--policies: policy 'srsf+packed' takes no argument"),
    ("rl-base=,rl-base", "--policies: policy 'rl-base=': expected an argument after '='"),
    ("rl-base,rl-base=SHIPPED", "--policies: rl-base and rl-base=SHIPPED are the same policy with the same argument"),
])
def test_compare_refuses_two_names_that_keep_one_result(capsys, policies, needle):
    """``compare --policies 'srsf+packed,srsf+packed='`` printed two rows and kept one result in
    its JSON; ``rl-base,rl-base=PATH`` with rl-base's own file is one policy twice."""
    from deepshare.policies import make_policy

    shipped_path = make_policy("rl-base").metadata["checkpoint"]
    rc, out, err = cli(capsys, "compare", "--trace", TRACE, "--policies", policies.replace("SHIPPED", shipped_path),
                       "--json", "-")
    assert rc == 2 and out == ""
    one_error_line(err, needle.replace("SHIPPED", shipped_path))


def test_policies_card_with_an_empty_path_is_one_line(capsys):
    """``policies --card rl-base=`` was a ValueError traceback (the current folder has no name)."""
    rc, _, err = cli(capsys, "policies", "--card", "rl-base=")
    assert rc == 2
    one_error_line(err, "--card 'rl-base=': expected NAME=PATH of a policy file")


# -- 4: tables on a redirected stderr are whole ------------------------------------------------
def test_tables_on_a_redirected_stderr_are_not_cut(capsys):
    """With ``--json -`` the table goes to standard error, which was cut at 80 columns in a log or
    ``2> file`` ("srsf+…" for both rows) while the same table on a piped stdout was whole."""
    names = "srsf+topo-balanced+preempt+fill,srsf+topo-bestfit+preempt+fill"
    rc, out, err = cli(capsys, "compare", "--trace", TRACE, "--policies", names, "--json", "-", "--no-progress")
    assert rc == 0, err
    assert "…" not in err
    for name in names.split(","):
        assert f" {name} " in err


# -- 5: a reader that leaves ends the command quietly ----------------------------------------
FAKE_LOGS = """
import sys, types
import deepshare.cli.scheduler as s
from deepshare.cli import main
class C:
    def logs(self, id, rank, offset):
        text = "x" * 200_000 + "\\n" if offset == 0 else ""
        return types.SimpleNamespace(text=text, next_offset=len(text) if offset == 0 else offset, size=200_001)
    def job(self, id):
        return types.SimpleNamespace(state="finished")
s._client = lambda args: C()
sys.exit(main(["logs", "job-1"]))
"""


@pytest.mark.parametrize("argv", [["-m", "deepshare", "--version"], ["-c", FAKE_LOGS]], ids=["version", "logs"])
def test_a_closed_pipe_is_no_traceback(argv):
    """``deepshare --version | true`` and ``deepshare logs ID | head`` printed a BrokenPipeError
    traceback (the write bypassed rich's handling); every other command exits quietly."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader has left before the first write
    try:
        done = subprocess.run([sys.executable, *argv], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[2])
    finally:
        os.close(write)
    assert done.returncode == 1
    assert done.stderr == ""


def test_version_on_a_full_disk_is_one_line():
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "deepshare", "--version"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1
    assert done.stderr == "deepshare: error: cannot write to standard output: No space left on device\n"


# -- 6: names in titles print as one line ------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["simulate", "--policy", "srsf+packed"],
    ["compare", "--policies", "srsf+packed"],
    ["evaluate", "--policies", "srsf+packed", "--seeds", "1"],
])
def test_a_trace_name_with_an_escape_or_newline_prints_as_one_line(tmp_path, capsys, command):
    """A trace named ``evil\\e[31mRED\\nline2.csv`` printed raw in the table title: a terminal
    escape and a forged second line (the policy name in the same title went through one_line)."""
    evil = tmp_path / "evil\x1b[31mRED\nline2.csv"
    evil.write_bytes(TRACE.read_bytes())
    rc, out, err = cli(capsys, *command, "--trace", evil, "--no-progress")
    assert rc == 0, err
    assert "\x1b" not in out + err
    assert "evil\\x1b[31mRED\\nline2.csv" in out


# -- 7: evaluate --out leaves no empty folder when the run is refused ----------------------------
@pytest.mark.parametrize("case", ["bad-job", "no-cluster", "suite-no-cluster"])
def test_evaluate_out_is_not_left_empty_by_a_refused_run(tmp_path, capsys, case):
    """``--out new/deep`` was made before the simulator checked the jobs and before ``--address``
    was tried: the refused run left ``new/`` and ``new/deep/`` empty."""
    trace = tmp_path / "huge.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\nj1,0,DLRM,8,,1e18\nj2,0,DLRM,2,100,\n")
    out_dir = tmp_path / "new" / "deep"
    argv = {
        "bad-job": ["--trace", trace, "--policies", "srsf+packed", "--seeds", "1"],
        "no-cluster": ["--trace", TRACE, "--policies", "srsf+packed", "--seeds", "1", "--address", "127.0.0.1:1"],
        "suite-no-cluster": ["--suite", "tiny", "--address", "127.0.0.1:1"],
    }[case]
    rc, _, err = cli(capsys, "evaluate", *argv, "--out", out_dir)
    assert rc == 2
    one_error_line(err, "total_samples" if case == "bad-job" else "--address 127.0.0.1:1")
    assert not (tmp_path / "new").exists()


def test_evaluate_out_that_existed_is_kept_when_the_run_is_refused(tmp_path, capsys):
    out_dir = tmp_path / "mine"
    out_dir.mkdir()
    rc, _, _ = cli(capsys, "evaluate", "--trace", TRACE, "--policies", "srsf+packed", "--seeds", "1",
                   "--address", "127.0.0.1:1", "--out", out_dir)
    assert rc == 2 and out_dir.is_dir()


# -- 8: the quoting example in --policies' help names real policies -----------------------------
@pytest.mark.parametrize("command", ["compare", "evaluate"])
def test_policies_help_example_names_registered_policies(command):
    """The help suggested ``'fifo,"rl-base=a,b.pt"'``; ``fifo`` is no policy ("unknown policy")."""
    import csv
    import shlex

    from deepshare.cli import build_parser
    from deepshare.policies import policy_info

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    text = next(a.help for a in sub._actions if a.dest == "policies")
    example = shlex.split(text.split("quote an item holding a comma: ", 1)[1])[0]
    items = next(csv.reader([example], skipinitialspace=True, strict=True))
    assert items[1] == "rl-base=a,b.pt"
    for item in items:
        policy_info(item)  # a DeepShareError for an unknown name


# -- 9: flags that would be ignored, and empty values, are refused -----------------------------
@pytest.mark.parametrize(("argv", "needle"), [
    (["simulate", "--trace", TRACE, "--policy", "srsf+packed", "--durations", "exact", "--estimate-error", "3"],
     "--estimate-error goes with --durations estimated"),
    (["compare", "--trace", TRACE, "--policies", "srsf+packed", "--durations", "unknown", "--estimate-error", "0.5"],
     "--estimate-error goes with --durations estimated"),
    (["evaluate", "--trace", TRACE, "--policies", "srsf+packed", "--durations", "exact", "--estimate-error", "1"],
     "--estimate-error goes with --durations estimated"),
    (["simulate", "--trace", TRACE, "--policy", "srsf+packed", "--perturb-seed", "7"],
     "--perturb-seed goes with --perturb-contention"),
    (["simulate", "--trace", TRACE, "--policy", "srsf+packed", "--contention", "none", "--perturb-contention", "0.3"],
     "--perturb-contention: the 'none' model predicts no contention"),
    (["compare", "--trace", TRACE, "--policies", "srsf+packed", "--address", ""], "--address '': an empty address"),
    (["evaluate", "--trace", TRACE, "--policies", "srsf+packed", "--seeds", "1", "--address", " "],
     "--address ' ': an empty address"),
    (["calibrate", "--samples", "samples.csv", "--contention", "link"], "--contention goes with --from-state"),
    (["calibrate", "--samples", "samples.csv", "--cluster", ""], "--cluster '': expected a preset or a cluster spec file"),
    (["calibrate", "--from-state", ""], "--from-state '': an empty path"),
    (["calibrate", "--from-state", "state", "--folds", "3"], "--folds goes with --profiles or --samples"),
    (["calibrate", "--from-state", "state", "--workers", "2"], "--workers goes with --profiles or --samples"),
    (["clusters", "import", "topo.csv", "--name", ""], "--name '': an empty name"),
])
def test_a_flag_that_would_be_ignored_is_refused(tmp_path, capsys, monkeypatch, argv, needle):
    """Each of these ran with rc 0 and dropped the flag (``--estimate-error 3`` with exact
    durations was recorded as null; ``--address ''`` ran locally; ``--from-state ''`` read the
    current folder; ``--name ''`` used the file's stem), or failed with a misleading message."""
    from deepshare.runtime.journal import Journal

    monkeypatch.chdir(tmp_path)
    Journal(tmp_path / "state").close()
    (tmp_path / "samples.csv").write_bytes(TRACE.read_bytes())
    (tmp_path / "topo.csv").write_text("ip,DSW,PSW,ASW\n10.0.0.1,d0,p0,a0\n10.0.0.2,d0,p0,a1\n")
    rc, out, err = cli(capsys, *argv)
    assert rc == 2, (out, err)
    one_error_line(err, needle)


def test_the_flags_still_work_where_they_belong(tmp_path, capsys):
    rc, out, err = cli(capsys, "simulate", "--trace", TRACE, "--policy", "srsf+packed", "--durations", "estimated",
                       "--estimate-error", "0.5", "--perturb-contention", "0.5", "--perturb-seed", "7", "--json", "-",
                       "--no-progress")
    assert rc == 0, err
    import json

    assert json.loads(out)["information"]["estimate_error"] == 0.5


# -- 10: integers in list and FIELD=VALUE flags are ASCII digits ---------------------------------
@pytest.mark.parametrize("seeds", ["0,1_0", "0,\u0663", "\uff11"])
def test_export_policy_seeds_tried_reads_ascii_digits_only(tmp_path, capsys, seeds):
    """``--seeds-tried 0,1_0,٣`` wrote ``seeds_tried: [0, 10, 3]`` in the card (rc 0), where every
    integer flag refuses these forms."""
    rc, _, err = cli(capsys, "export-policy", shipped("rl_base.pt"), "--out", tmp_path / "s.pt", "--kind", "network",
                     "--commit", "abcdef1", "--seeds-tried", seeds)
    assert rc == 2
    one_error_line(err, f"--seeds-tried {seeds!r}: expected integers")
    assert not (tmp_path / "s.pt").exists()


@pytest.mark.parametrize(("flag", "value", "needle"), [
    ("--node-type", "gpus=1_0", "--node-type 'gpus=1_0': expected an integer"),
    ("--node-type", "nic_gbps=\u0663200", "--node-type 'nic_gbps=\u0663200': expected a number"),
    ("--oversubscription", "PSW=2_0", "--oversubscription PSW=2_0: expected a ratio"),
])
def test_clusters_import_numbers_read_ascii_digits_only(tmp_path, capsys, flag, value, needle):
    """``clusters import topo.csv --node-type gpus=1_0`` wrote ``gpus: 10``."""
    topo = tmp_path / "topo.csv"
    topo.write_text("ip,DSW,PSW,ASW\n10.0.0.1,d0,p0,a0\n10.0.0.2,d0,p0,a1\n")
    rc, out, err = cli(capsys, "clusters", "import", topo, flag, value)
    assert rc == 2 and out == ""
    one_error_line(err, needle)


# -- 11: scheduler start's integer flags are bounded; --max-gpus takes its own default ----------
@pytest.mark.parametrize(("argv", "needle"), [
    (["--local", "--nodes", "1000000000"], "--nodes: expected an integer from 1 to 64 nodes"),
    (["--local", "--gpus-per-node", "99999999999999999999999"], "--gpus-per-node: expected an integer from 1 to 1,024"),
    (["--max-gpus", "1" + "0" * 28], "--max-gpus: expected an integer from 0 to"),
])
def test_scheduler_start_integer_flags_are_bounded(capsys, argv, needle):
    """``--local --nodes 1000000000`` was accepted (one Ray node started per iteration). The parser
    only: on the code as reviewed the command itself would start that cluster."""
    from deepshare.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["scheduler", "start", *argv])
    assert exit_.value.code == 2
    assert needle in capsys.readouterr().err.strip().splitlines()[-1]


def test_scheduler_start_max_gpus_takes_its_default():
    """``--max-gpus 0`` ("default: the GPUs up now") was refused as "expected a positive integer"."""
    from deepshare.cli import build_parser

    assert build_parser().parse_args(["scheduler", "start", "--max-gpus", "0"]).max_gpus == 0


# -- second read: F1, --out removes only the folders it made -------------------------------------
def test_evaluate_out_through_a_new_folder_keeps_the_existing_one(tmp_path, capsys, monkeypatch):
    """``--out new/../mine`` (``mine`` an existing empty folder) removed ``mine`` when the run was
    refused and left ``new``: what had been created was judged on the path as typed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    rc, _, err = cli(capsys, "evaluate", "--trace", TRACE, "--policies", "srsf+packed", "--seeds", "1",
                     "--address", "127.0.0.1:1", "--out", "new/../mine")
    assert rc == 2, err
    assert (tmp_path / "mine").is_dir()
    assert not (tmp_path / "new").exists()


def test_make_folder_failing_partway_leaves_no_parents(tmp_path):
    """A name too long at the end failed after ``new/deep`` was made, and left it."""
    from deepshare.cli.output import make_folder
    from deepshare.core.errors import DeepShareError

    with pytest.raises(DeepShareError, match="--out .*: cannot create the folder"):
        make_folder("--out", str(tmp_path / "new" / "deep" / ("x" * 300)))
    assert list(tmp_path.iterdir()) == []
    assert make_folder("--out", str(tmp_path / "a" / ".." / "b" / "c")) == [str(tmp_path / "a"), str(tmp_path / "a/../b"),
                                                                            str(tmp_path / "a/../b/c")]
    assert (tmp_path / "b" / "c").is_dir()


# -- second read: F2, a broken pipe that is not standard output is said --------------------------
def test_a_broken_pipe_other_than_stdout_is_one_error_line(capsys, monkeypatch):
    """A worker's pipe or a socket closed under the command ended it with status 1 and nothing on
    standard error, as if the reader of standard output had left."""
    import multiprocessing

    import deepshare.cli.listing as listing

    def broken(args, out, err):  # type: ignore[no-untyped-def]
        mine, theirs = multiprocessing.Pipe()
        mine.close()
        theirs.send(b"x" * 10)  # BrokenPipeError: the other end is gone, standard output is fine

    monkeypatch.setattr(listing, "cmd_policies", broken)
    rc, out, err = cli(capsys, "policies")
    assert rc == 1 and out == ""
    one_error_line(err, "Broken pipe", "closed its end")


# -- second read: F3, compare labels policies that report as one with their names as typed --------
SMALL = "job_id,submit_time,model,gpus,duration_s,total_samples\nj1,0,ResNet50,4,600,\nj2,10,VGG16,8,900,\nj3,20,BERT,2,300,\n"


@pytest.mark.parametrize("policies", [
    ["planner=2", "planner=4"],
    ["rl-base", "rl-base=SHIPPED"],
    ["srsf+packed", "rl-base=SHIPPED", "rl-base=COPY"],
])
def test_compare_labels_policies_reporting_as_one_with_their_names_as_typed(tmp_path, capsys, policies):
    """``compare --policies planner=2,planner=4`` (and two checkpoints of rl-base) was refused as
    "both report as 'planner'": comparing two settings of one policy is what compare is for."""
    import json

    trace = tmp_path / "t.csv"
    trace.write_text(SMALL)
    copy = tmp_path / "copy.pt"
    copy.write_bytes(shipped("rl_base.pt").read_bytes())
    typed = [p.replace("SHIPPED", str(shipped("rl_base.pt"))).replace("COPY", str(copy)) for p in policies]
    rc, out, err = cli(capsys, "compare", "--trace", trace, "--policies", ",".join(typed), "--json", "-", "--no-progress")
    assert rc == 0, err
    assert list(json.loads(out)["results"]) == typed
    for name in typed:
        assert f" {name} " in err


def test_compare_keys_results_by_reported_name_without_a_collision(tmp_path, capsys):
    import json

    trace = tmp_path / "t.csv"
    trace.write_text(SMALL)
    rc, out, err = cli(capsys, "compare", "--trace", trace, "--policies", f"srsf+packed,rl-base={shipped('rl_base.pt')}",
                       "--json", "-", "--no-progress")
    assert rc == 0, err
    assert list(json.loads(out)["results"]) == ["srsf+packed", "rl-base"]


@pytest.mark.parametrize(("policies", "needle"), [
    ("planner,planner=8", "planner and planner=8 are the same policy"),
    ("rl-base=COPY,rl-base=./copy.pt", "rl-base=COPY and rl-base=./copy.pt are the same policy"),
])
def test_compare_refuses_two_spellings_of_one_policy(tmp_path, capsys, monkeypatch, policies, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(SMALL)
    copy = tmp_path / "copy.pt"
    copy.write_bytes(shipped("rl_base.pt").read_bytes())
    rc, out, err = cli(capsys, "compare", "--trace", "t.csv", "--policies", policies.replace("COPY", str(copy)))
    assert rc == 2 and out == ""
    one_error_line(err, "--policies: " + needle.replace("COPY", str(copy)))


# -- second read: F4, an empty argument's message says what that policy's argument is -------------
@pytest.mark.parametrize(("name", "needle"), [
    ("planner=", "policy 'planner=': expected an argument after '=' (planner=K[:BUDGET_S[:CONTENTION[:HORIZON]]]), got none"),
    ("rl-hybrid-preempt=", "policy 'rl-hybrid-preempt=': expected an argument after '=' (rl-hybrid-preempt=PATH), got none"),
    ("deepshare.policies.registry:make_policy=",
     "policy 'deepshare.policies.registry:make_policy=': expected an argument after '=', got none"),
])
def test_an_empty_policy_argument_names_that_policys_argument(name, needle):
    """Every empty argument was said to be "a learned policy's PATH", the planner's and a plugin's too."""
    from deepshare.core.errors import DeepShareError
    from deepshare.policies import make_policy

    with pytest.raises(DeepShareError) as refused:
        make_policy(name)
    assert needle in str(refused.value)
    assert "learned" not in str(refused.value)


# -- second read: F5, --version with standard output closed; train/tune refuse an empty --address -
def test_version_with_stdout_closed_is_one_line():
    """``deepshare --version >&-`` (sys.stdout is None) was an AttributeError traceback."""
    import shlex
    import subprocess
    import sys

    done = subprocess.run(f"{shlex.quote(sys.executable)} -m deepshare --version >&-", shell=True,
                          stderr=subprocess.PIPE, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1
    assert done.stderr == "deepshare: error: cannot write to standard output: it is closed\n"


@pytest.mark.parametrize("command", ["train", "tune"])
@pytest.mark.parametrize("address", ["", " "])
def test_train_and_tune_refuse_an_empty_address(tmp_path, capsys, monkeypatch, command, address):
    """``train --address ''`` started a local Ray and trained, where compare, evaluate and imitate
    refuse an empty --address (an unset variable). The work itself is replaced: it must not run."""
    import deepshare.rl.train
    import deepshare.rl.tune

    def must_not_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the run started")

    monkeypatch.setattr(deepshare.rl.train, "train", must_not_run)
    monkeypatch.setattr(deepshare.rl.tune, "run_sweep", must_not_run)
    monkeypatch.chdir(tmp_path)
    config = Path(__file__).resolve().parents[2] / "rllib_configs" / "rl_hybrid.yaml"
    extra = ["--grid", "lr=0.001,0.002"] if command == "tune" else []
    rc, out, err = cli(capsys, command, config, *extra, "--address", address)
    assert rc == 2, err
    one_error_line(err, f"--address {address!r}: an empty address")


# -- third read ----------------------------------------------------------------------------------
def test_plugin_variants_on_one_checkpoint_or_planner_settings_are_two_policies(tmp_path, capsys, monkeypatch):
    """A plugin's argument may say more than the file or planner settings it reads
    (``plug:ens=PATH@base`` and ``PATH@hybrid`` load one file two ways): both were refused as one
    policy, in ``evaluate`` too, which ran them before."""
    from deepshare.cli.args import policy_list

    (tmp_path / "plug_third.py").write_text(
        "from deepshare.policies.checkpoint import learned_policy\n"
        "from deepshare.policies.planner import Planner, PlannerConfig\n"
        "from deepshare.policies import make_policy\n"
        "def ens(arg=''):\n"
        "    path, _, how = arg.partition('@')\n"
        "    return learned_policy('ens', path, how == 'hybrid')\n"
        "def plan(arg=''):\n"
        "    return Planner(PlannerConfig(futures=1), lambda n: make_policy(arg or n))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    shipped_file = shipped("rl_base.pt")
    both = [f"plug_third:ens={shipped_file}@base", f"plug_third:ens={shipped_file}@hybrid"]
    assert policy_list(",".join(both)) == both
    plans = ["plug_third:plan=fifo+packed", "plug_third:plan=srsf+packed"]
    assert policy_list(",".join(plans)) == plans


def test_a_refused_out_through_a_sibling_removes_every_empty_folder_it_made(tmp_path):
    """``new/../new2`` with files written into ``new2``: the empty ``new`` stayed (the first
    folder that could not be removed stopped the rest)."""
    from deepshare.cli.output import make_folder
    from deepshare.core.files import remove_empty_folders

    created = make_folder("--out", str(tmp_path / "new" / ".." / "new2"))
    (tmp_path / "new2" / "kept.json").write_text("{}")
    remove_empty_folders(created)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new2"] and (tmp_path / "new2" / "kept.json").is_file()


def test_serve_refuses_an_empty_address(capsys):
    rc, out, err = cli(capsys, "serve", "--address", "")
    assert rc == 2 and out == ""
    one_error_line(err, "--address ''", "an empty address")


@pytest.mark.parametrize("command", ["simulate", "compare", "evaluate"])
def test_an_estimate_error_no_job_draws_with_is_refused(tmp_path, capsys, command):
    """Every job with ``requested_s`` carries its own estimate: ``--estimate-error 0.5`` drew
    nothing, yet the run's JSON recorded the sigma."""
    trace = tmp_path / "requested.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples,requested_s\n"
                     "a,0,ResNet50,2,600,,900\nb,10,BERT,4,1200,,1000\n")
    flag = "--policy" if command == "simulate" else "--policies"
    out_flags = ["--out", str(tmp_path / "ev")] if command == "evaluate" else []
    rc, out, err = cli(capsys, command, "--trace", trace, flag, "srsf+packed", "--durations", "estimated",
                       "--estimate-error", "0.5", *out_flags)
    assert rc == 2 and out == ""
    one_error_line(err, "--estimate-error: every job of the trace has its own estimate (requested_s)")
    assert not (tmp_path / "ev").exists()
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples,requested_s\n"
                     "a,0,ResNet50,2,600,,900\nb,10,BERT,4,1200,,\n")
    rc, out, err = cli(capsys, command, "--trace", trace, flag, "srsf+packed", "--durations", "estimated",
                       "--estimate-error", "0.5", *out_flags)
    assert rc == 0, err  # one job's estimate is drawn
