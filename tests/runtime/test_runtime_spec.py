"""The live job spec: every field's validation, file loading, and the CLI's one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.runtime.spec import LiveJobSpec, job_checkpoint_dir, load_spec_file, parse_spec_text, spec_from_json

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runtime"
GOOD = dict(name="a", gpus=2, model="GraphSage", entrypoint="pkg.mod:main", checkpoint_dir="/ckpt")


def test_good_file_resolves_paths_against_the_spec_folder():
    spec = load_spec_file(FIXTURES / "good.yaml")
    assert spec.name == "good" and spec.gpus == 2 and spec.args == ["--steps", "10"]
    assert spec.checkpoint_dir == str((FIXTURES / "ckpt").resolve())
    assert spec.working_dir == str(Path.cwd())
    assert job_checkpoint_dir(spec, "good-3", "0a1b2c3d4e5f") == str((FIXTURES / "ckpt" / "0a1b2c3d4e5f-good-3").resolve())
    assert job_checkpoint_dir(spec, "good-3", None) == str((FIXTURES / "ckpt" / "good-3").resolve())  # journalled before


def test_examples_are_valid():
    examples = sorted((Path(__file__).parents[2] / "examples" / "jobs").glob("*.yaml"))
    assert len(examples) >= 4
    for path in examples:
        spec = load_spec_file(path)
        assert spec.entrypoint == "examples.jobs.ddp_mlp:main"
        assert spec.working_dir == str(Path(__file__).parents[2].resolve())


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gpus": 0}, "gpus: Input should be greater than 0"),
        ({"gpus": "two"}, "gpus: Input should be a valid integer"),
        ({"name": "bad name!"}, "name: Value error, expected 1-63 letters"),
        ({"entrypoint": "no_colon"}, "entrypoint: Value error, expected 'package.module:function'"),
        ({"entrypoint": None}, "give exactly one of entrypoint"),
        ({"command": ["python", "x.py"]}, "give exactly one of entrypoint"),
        ({"model": ""}, "model: String should have at least 1 character"),
        ({"checkpoint_dir": None}, "checkpoint_dir: Input should be a valid string"),
        ({"expected_duration_s": -1}, "expected_duration_s: Input should be greater than 0"),
        ({"total_samples": 0}, "total_samples: Input should be greater than 0"),
        ({"env": {"1BAD": "x"}}, "env: Value error, invalid environment variable name '1BAD'"),
        ({"colour": "red"}, "colour: Extra inputs are not permitted"),
        # a trailing newline: a regex's '$' matched before it (the job then failed at every launch)
        ({"name": "nl\n"}, "name: Value error, expected 1-63 letters"),
        ({"env": {"FOO\n": "x"}}, "env: Value error, invalid environment variable name 'FOO\\n'"),
        ({"entrypoint": "os:getcwd\n"}, "entrypoint: Value error, expected 'package.module:function'"),
    ],
)
def test_bad_fields_are_named(change, message):
    body = {**GOOD, **change}
    with pytest.raises(DeepShareError) as info:
        spec_from_json(body)
    assert message in str(info.value)


def test_missing_fields_are_all_named():
    with pytest.raises(DeepShareError) as info:
        spec_from_json({"name": "x"})
    text = str(info.value)
    for field in ("gpus: Field required", "model: Field required", "checkpoint_dir: Field required"):
        assert field in text


def test_command_job():
    spec = spec_from_json({**GOOD, "entrypoint": None, "command": ["bash", "-c", "true"]})
    assert spec.command == ["bash", "-c", "true"] and spec.entrypoint is None
    with pytest.raises(DeepShareError, match="command: Value error, expected a non-empty list"):
        spec_from_json({**GOOD, "entrypoint": None, "command": []})


def test_yaml_errors_name_the_file():
    with pytest.raises(DeepShareError, match="broken.yaml: not valid YAML"):
        load_spec_file(FIXTURES / "broken.yaml")
    with pytest.raises(DeepShareError, match="list.yaml: expected a mapping"):
        load_spec_file(FIXTURES / "list.yaml")
    with pytest.raises(DeepShareError, match="missing.yaml: cannot read job spec"):
        load_spec_file(FIXTURES / "missing.yaml")
    assert isinstance(parse_spec_text('{"name": "j", "gpus": 1, "model": "DLRM", "command": ["true"],'
                                      ' "checkpoint_dir": "/c"}', "json"), LiveJobSpec)


@pytest.mark.parametrize(
    "fixture, message",
    [
        ("both.yaml", "both.yaml: <root>: Value error, give exactly one of entrypoint"),
        ("zero_gpus.yaml", "zero_gpus.yaml: gpus: Input should be greater than 0"),
        ("broken.yaml", "broken.yaml: not valid YAML"),
    ],
)
def test_cli_submit_bad_spec_is_one_line_exit_2(fixture, message, capsys):
    # The spec is checked before anything is sent: the URL need not answer.
    rc = main(["submit", "--url", "http://127.0.0.1:9", str(FIXTURES / fixture)])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deepshare: error: ") and message in lines[0]
    assert "Traceback" not in captured.err


def test_cli_unreachable_scheduler_is_one_line(capsys):
    rc = main(["jobs", "--url", "http://127.0.0.1:9", "--token", "t" * 12])
    err = capsys.readouterr().err
    assert rc == 2 and "no scheduler answers" in err and len(err.strip().splitlines()) == 1
    rc = main(["jobs", "--url", "localhost:8470", "--token", "t" * 12])
    assert rc == 2 and "expected http://HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:abc", "http://127.0.0.1:99999", "http://", "http://:8470"])
def test_cli_malformed_scheduler_url_is_one_line_and_exit_2(capsys, url):
    """A URL urllib cannot use (a broken IPv6 host, a port that is no number 1..65535, no host)
    was a traceback with exit 1 when the request was built."""
    rc = main(["jobs", "--url", url, "--token", "t" * 12])
    err = capsys.readouterr().err
    assert rc == 2 and "expected http://HOST:PORT" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_scheduler_that_does_not_answer_through_state_names_its_file(tmp_path, capsys):
    """With --state (no --url), the error says where the URL came from, not a flag never given."""
    from deepshare.runtime.statelock import StateLock

    (tmp_path / "scheduler.json").write_text('{"url": "http://127.0.0.1:9", "pid": 1}')
    lock = StateLock(tmp_path).acquire()  # a scheduler holds the folder, and its port does not answer
    try:
        rc = main(["jobs", "--state", str(tmp_path), "--token", "t" * 12])
    finally:
        lock.release()
    err = capsys.readouterr().err
    info = tmp_path / "scheduler.json"
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"deepshare: error: http://127.0.0.1:9 (the URL in {info}, written when the scheduler last started): "
                          "no scheduler answers (")
    assert "--url" not in err


def test_cli_never_sends_its_token_to_the_url_of_a_stopped_scheduler(tmp_path, capsys):
    """A scheduler.json left by a scheduler that stopped (killed, or an older version) names a port
    anyone may bind since: the client sent its token there. With no scheduler holding the state
    folder it refuses, before any connection."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    (tmp_path / "scheduler.json").write_text(f'{{"url": "http://127.0.0.1:{port}", "pid": 1}}')
    try:
        rc = main(["jobs", "--state", str(tmp_path), "--token", "t" * 12])
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing connected
    finally:
        listener.close()
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == (f"deepshare: error: --state {tmp_path}: no scheduler is running on this state folder "
                                       f"({tmp_path / 'scheduler.json'} is from one that has stopped); start it, or give --url")


def test_scheduler_start_flag_errors(capsys):
    for argv, message in [
        (["--local", "--address", "1.2.3.4:6379"], "at most one of --local and --address"),
        (["--nodes", "2"], "--nodes and --gpus-per-node need --local"),
        (["--policy", "las+spread", "--placement-url", "http://x"], "at most one of --policy and --placement-url"),
        (["--policy", "no-such-policy"], "no-such-policy"),
    ]:
        rc = main(["scheduler", "start", *argv])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)


@pytest.mark.parametrize("name", ["token", "scheduler.json", "journal.sqlite"])
@pytest.mark.parametrize("command", ["jobs", "submit"])
def test_cli_json_never_replaces_the_schedulers_state_files(tmp_path, capsys, name, command):
    """``--json`` naming a file of the scheduler's state folder (its token, its URL, its journal)
    is refused before anything is sent or written, and the file is left as it was."""
    state = tmp_path / "s"
    state.mkdir()
    for f in ("token", "scheduler.json", "journal.sqlite"):
        (state / f).write_text(f"original {f}\n")
    target = state / name
    argv = [command, "--state", str(state), "--url", "http://127.0.0.1:9", "--json", str(target)]
    if command == "submit":
        argv.append(str(Path(__file__).resolve().parents[2] / "examples" / "jobs" / "tiny.yaml"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"deepshare: error: --json {target}: is the input --state {target}; "
                   "writing it would destroy the input, choose another path")
    assert target.read_text() == f"original {name}\n"


def test_no_name_pattern_accepts_a_trailing_newline():
    # Python's '$' matches before a final newline; every pattern ends with \Z instead
    from deepshare.agents.exporter import _GPU_GAUGE
    from deepshare.agents.links import _GPU_PCIE
    from deepshare.core import fabric_import
    from deepshare.raycluster.placeholders import PLACEHOLDER
    from deepshare.runtime import learning, localcluster
    from deepshare.runtime.logs import JOB_ID_RE
    from deepshare.runtime.spec import ENTRYPOINT_RE, ENV_KEY_RE, NAME_RE

    for pattern, good in ((NAME_RE, "job"), (ENV_KEY_RE, "FOO"), (ENTRYPOINT_RE, "os:getcwd"), (JOB_ID_RE, "job-1"),
                          (learning._VERSION_FILE, "params-00001.json"), (localcluster._LABEL_NAME, "leaf"),
                          (localcluster._LABEL_PREFIX, "example.com"), (fabric_import._NAME, "leaf0"),
                          (fabric_import._PLAIN, "leaf0"), (_GPU_GAUGE, "gpu0/util"), (_GPU_PCIE, "gpu0/pcie"),
                          (PLACEHOLDER, "YOUR-REGISTRY")):
        assert pattern.match(good), pattern.pattern
        assert not pattern.match(good + "\n"), pattern.pattern
