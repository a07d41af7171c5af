"""Absurdly nested YAML and JSON: every input the CLI parses is one line and exit 2, no traceback.

Parsers and the readers of their output recurse per level of nesting; a config of a few thousand
``[`` ended every command below with a 3,000-line ``RecursionError`` traceback and exit 1
(only the trace readers were guarded). They all read through ``deepshare.core.documents`` now.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.documents import MAX_DEPTH, depth, load_json, load_yaml, values
from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
DEEP = 5000
TOO_DEEP = "nested more than 100 levels deep"


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    found = {
        "deep.yaml": f"a: {nested(DEEP)}\n",
        "deep.json": f'{{"a": {nested(DEEP)}}}\n',
        "spec.yaml": f"name: j\ngpus: 1\nmodel: resnet50\ncommand: [echo]\nenv: {nested(1000)}\n",
        "spec.json": f'{{"name": "j", "gpus": 1, "model": "resnet50", "command": ["echo"], "env": {nested(1000)}}}\n',
    }
    for name, text in found.items():
        (tmp_path / name).write_text(text)
    return {name: tmp_path / name for name in found}


COMMANDS = {
    "submit YAML": ["submit", "{spec.yaml}", "--url", "http://127.0.0.1:9", "--token", "a-long-token"],
    "submit JSON": ["submit", "{spec.json}", "--url", "http://127.0.0.1:9", "--token", "a-long-token"],
    "simulate --cluster": ["simulate", "--trace", str(TRACE), "--policy", "fifo+consolidated", "--cluster", "{deep.yaml}"],
    "simulate --link-params": ["simulate", "--trace", str(TRACE), "--policy", "fifo+consolidated", "--contention", "link",
                               "--link-params", "{deep.json}"],
    "simulate --trace": ["simulate", "--trace", "{deep.json}", "--policy", "fifo+consolidated"],
    "cluster validate": ["cluster", "validate", "{deep.yaml}"],
    "cluster spec": ["cluster", "spec", "{deep.yaml}", "--out", "{out}"],
    "autoscale compare": ["autoscale", "compare", "--config", "{deep.yaml}", "--trace", str(TRACE)],
    "train": ["train", "{deep.yaml}"],
    "imitate": ["imitate", "{deep.yaml}"],
    "tune": ["tune", "{deep.yaml}", "--grid", "ppo.lr=1,2"],
    "evaluate --suite": ["evaluate", "--suite", "{deep.yaml}"],
}


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_deeply_nested_input_is_one_line_and_exit_2(capsys, files, tmp_path, argv):
    out = tmp_path / "out.yaml"
    paths = {f"{{{name}}}": str(path) for name, path in {**files, "out": out}.items()}
    args = [paths.get(a, a) for a in argv]
    rc, _, err = cli(capsys, *args)
    assert rc == 2, err[-2000:]
    source = next(a for a in args if a.startswith(str(tmp_path)) and a != str(out))
    one_error_line(err, source, TOO_DEEP)
    assert not out.exists()  # nothing half-written


def test_a_deeply_nested_grid_value_is_refused_as_the_fields_value(capsys):
    rc, _, err = cli(capsys, "tune", ROOT / "rllib_configs" / "rl_base.yaml", "--grid", f"ppo.lr={nested(DEEP)},0.1")
    assert rc == 2
    one_error_line(err, "ppo.lr")


@pytest.mark.parametrize("load", [load_yaml, load_json])
def test_the_loader_accepts_max_depth_and_refuses_one_more(load):
    assert depth(load(nested(MAX_DEPTH), "f")) == MAX_DEPTH
    with pytest.raises(DeepShareError, match=f"^f: expected a thing, got lists or mappings {TOO_DEEP}$"):
        load(nested(MAX_DEPTH + 1), "f", "a thing")


def test_depth_counts_lists_and_mappings_exactly():
    assert [depth(x) for x in (1, "s", [], {}, [1, {"a": [2]}], {"a": {"b": {"c": None}}})] == [0, 0, 1, 1, 3, 3]


def test_yaml_aliases_cannot_loop_or_explode():
    with pytest.raises(DeepShareError, match=TOO_DEEP):  # a list that contains itself
        load_yaml("a: &x [*x]", "f")
    laughs = "l0: &l0 [" + ", ".join(["x"] * 9) + "]\n" + "".join(
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    import yaml

    assert depth(yaml.safe_load(laughs)) == 11  # 9**10 paths, walked once per node
    assert values(yaml.safe_load(laughs), 10**12) > 9**10  # counted per reference, each node walked once
    with pytest.raises(DeepShareError, match="aliases that stand for more than 100,000 values"):
        load_yaml(laughs, "f")  # every reader downstream would walk all 9**10 of them


def test_a_long_literal_list_is_refused_without_blaming_aliases():
    with pytest.raises(DeepShareError, match="got a document of more than 100,000 values"):
        load_yaml("[" + "1, " * 100_001 + "]", "f")


@pytest.mark.parametrize(
    "load, text, message",
    [
        (load_yaml, "a: [\n  b", "f: not valid YAML (line 2, column 4: expected ',' or ']', but got '<stream end>')"),
        (load_json, '{"a": [', "f line 1 column 8: expected valid JSON, expecting value (truncated or corrupted file?)"),
        (load_json, "hello", "f line 1: expected a JSON document, got text starting 'hello'"),
        (load_json, b"\xff", "f: not valid JSON ('utf-8' codec can't decode byte 0xff in position 0: invalid start byte)"),
    ],
)
def test_syntax_errors_are_one_line_naming_where(load, text, message):
    with pytest.raises(DeepShareError) as info:
        load(text, "f")
    assert str(info.value) == message


@pytest.mark.parametrize("source, text, message", [
    ("c.yaml", "a: 1\nb: 2\na: 3\n", "c.yaml: not valid YAML (line 3, column 1: duplicate key 'a' (give each key once))"),
    ("c.JSON", '{"nodes": [], "nodes": []}', "c.JSON: not valid JSON (line 1, column 15: duplicate key 'nodes' (give each key once))"),
    ("c.json", '{"a": [', "c.json: not valid JSON (line 1, column 8: expected the node content, but found '<stream end>')"),
])
def test_a_file_read_as_yaml_is_named_by_its_kind_in_errors(source, text, message):
    """Readers of 'YAML or JSON' parse both as YAML: a JSON file's error says JSON, not YAML."""
    with pytest.raises(DeepShareError) as info:
        load_yaml(text, source)
    assert str(info.value) == message
