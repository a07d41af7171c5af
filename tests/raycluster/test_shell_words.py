"""What a cluster YAML's command lines run, as the shell reads them: the validator's checks that
a node installs this project and the head starts the monitor."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.raycluster.shell_words import exec_lines, pip_installs, runs, shell_words

MONITOR = ("deepshare", "agents", "start")


@pytest.mark.parametrize("line, expected", [
    ("deepshare agents start --address auto --interval 1", True),
    ("ray start --head; deepshare agents start --address auto", True),
    ("ray start --head && /home/u/.local/bin/deepshare agents start", True),
    ("for i in $(seq 60); do deepshare agents start --address auto && exit 0; sleep 5; done", True),
    ("RAY_ADDRESS=auto nohup deepshare agents start &", True),
    ("python3 -m deepshare agents start --address auto", True),
    ("if true; then deepshare agents start; fi", True),
    ("ray start --head # deepshare agents start --address auto", False),
    ("echo deepshare agents start", False),
    ("echo 'deepshare agents start'", False),
    ("deepshare agents status --address auto", False),
    ("deepshare agents", False),
    ("python3 -m deepshare agents stop", False),
])
def test_runs_finds_a_program_only_where_the_shell_reads_a_command(line, expected):
    assert runs(line, MONITOR, "w") is expected


@pytest.mark.parametrize("line, expected", [
    ('python3 -m pip install -q "ray[default]==2.60.0" && python3 -m pip install -q -e ~/deepshare', True),
    ("pip install deepshare", True),
    ("sudo pip3 install -e /opt/deepshare[rl]", True),
    ("pip install git+https://example.org/deepshare.git", True),
    ("echo pip install deepshare", False),
    ("pip install numpy  # then deepshare", False),
    ("pip install numpy; echo deepshare", False),
    ("pip download deepshare", False),
    ("pip install --prefix=/deepshare numpy", False),
])
def test_pip_installs_reads_the_install_arguments_only(line, expected):
    assert pip_installs(line, "deepshare", "w") is expected


def test_exec_lines_read_a_shells_script_and_an_argv_alike():
    assert exec_lines(["/bin/sh", "-c", "a; b"]) == ["a; b"]
    assert exec_lines(["bash", "-lc", "x"]) == ["x"] and exec_lines(["sh", "-e", "-c", "y"]) == ["y"]
    assert exec_lines(["bash", "script.sh", "-c"]) == ["bash script.sh -c"]  # -c of the script, not the shell
    assert exec_lines(["deepshare", "agents", "start", "--metrics-host", "0.0.0.0"]) == [
        "deepshare agents start --metrics-host 0.0.0.0"]
    assert exec_lines(["sh", "-c"]) == [] and exec_lines([]) == []


def test_an_unbalanced_quote_is_one_error_naming_where():
    with pytest.raises(DeepShareError, match="^w: cannot split"):
        shell_words("echo 'unclosed", "w")


# -- a newline separates commands, as in the shell (review: read as a space, a multi-line
# literal block had only its first line in command position) -------------------------------------
@pytest.mark.parametrize("script, expected", [
    ("ray stop\nray start --head --port=6379\ndeepshare agents start --address auto\n", True),
    ("ray start --head # not here\ndeepshare agents start --address auto", True),  # a comment ends at its line
    ("ray start --head &&\n  deepshare agents start", True),
    ("ray start --head \\\n  --port=6379\ndeepshare agents start", True),
    ("echo \\\ndeepshare agents start", False),  # backslash-newline joins the lines: echo's argument
    ("echo 'a\ndeepshare agents start'", False),  # a quoted newline is the argument's
    ("ray start --head # deepshare agents start\n", False),
])
def test_a_newline_ends_a_command_like_a_semicolon(script, expected):
    assert runs(script, MONITOR, "w") is expected


def test_multi_line_words_split_at_each_unquoted_newline():
    assert shell_words("ray stop\nray start --head # c\n\ndeepshare agents start\n", "w") == [
        "ray", "stop", ";", "ray", "start", "--head", ";", "deepshare", "agents", "start", ";"]
    assert shell_words("echo a#b 'x # y'", "w") == ["echo", "a#b", "x # y"]  # not comments


def test_a_multi_line_local_yaml_validates_with_each_ray_start_read_alone():
    import copy

    import yaml

    from deepshare.raycluster.cluster_yaml import parse_cluster_yaml

    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster_yamls" / "local-onprem.yaml").read_text())
    doc = copy.deepcopy(base)
    doc["head_start_ray_commands"] = ["ray stop\nulimit -c unlimited; ray start --head --port=6379 --num-cpus=0 "
                                      "--num-gpus=0 --autoscaling-config=~/ray_bootstrap_config.yaml\n"
                                      "deepshare agents start --address auto\n"]
    doc["worker_start_ray_commands"] = ["ray stop\n" + base["worker_start_ray_commands"][1] + "\n"]
    (worker,) = parse_cluster_yaml(yaml.safe_dump(doc), "multiline.yaml").workers
    assert worker.gpus == 8
    # the options of a later line's command are not the earlier `ray start`'s
    doc["worker_start_ray_commands"] = [base["worker_start_ray_commands"][1] + "\necho --num-gpus=2"]
    (worker,) = parse_cluster_yaml(yaml.safe_dump(doc), "multiline.yaml").workers
    assert worker.gpus == 8


# -- exec forms as the shell reads its options (review: KubeRay's `bash -lc --` gave the script
# `--`, and `-o pipefail` ended the option scan) ----------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["/bin/bash", "-lc", "--", "S"],  # KubeRay's own container command
    ["bash", "-o", "pipefail", "-c", "S"],
    ["bash", "-eo", "pipefail", "-c", "S"],
    ["bash", "+o", "posix", "-ec", "S"],
    ["bash", "-O", "extglob", "-c", "S"],
    ["bash", "-c", "-e", "S"],
    ["bash", "--login", "-c", "S"],
    ["sh", "-c", "S", "argv0"],
])
def test_exec_lines_finds_the_script_after_any_options(argv):
    assert exec_lines(argv) == ["S"]


def test_exec_lines_without_dash_c_before_the_end_of_options_is_the_argv():
    assert exec_lines(["bash", "-", "-c"]) == ["bash - -c"]  # `-` ends the options: -c is a file
    assert exec_lines(["bash", "-o", "pipefail"]) == ["bash -o pipefail"]


def test_a_kuberay_head_running_the_monitor_through_bash_lc_dashdash_validates():
    import copy

    import yaml

    from deepshare.raycluster.cluster_yaml import parse_cluster_yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster_yamls" / "kuberay-autoscaling.yaml").read_text())
    doc = copy.deepcopy(doc)
    container = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container.pop("lifecycle", None)
    container["command"] = ["/bin/bash", "-lc", "--"]
    container["args"] = ["deepshare agents start --address auto --metrics-port 9479 & ray start --head --block"]
    assert parse_cluster_yaml(yaml.safe_dump(doc), "k.yaml").workers
    container["command"] = ["bash", "-o", "pipefail", "-c"]
    assert parse_cluster_yaml(yaml.safe_dump(doc), "k.yaml").workers


@pytest.mark.parametrize("word, expands", [
    ('--resources={\\"a\\":1,\\"b\\":1}', '{\\"a\\":1,\\"b\\":1}'), ("{a,b}", "{a,b}"), ("{1..3}", "{1..3}"),
    ("x{a,{b,c}}", "{a,{b,c}}"), ("{\"a\",1}", "{\"a\",1}"),
    ("'{a,b}'", None), ('"{a,b}"', None), ("\\{a,b\\}", None), ("${a,b}", None), ("{a}", None),
    ("{a.b}", None), ('{"a":1}', None), ("{a\\,b}", None),
])
def test_brace_expansion_is_found_where_bash_expands_and_only_there(word, expands):
    from deepshare.raycluster.shell_words import brace_expansion

    assert brace_expansion(word) == expands


def test_raw_words_keep_their_quoting():
    from deepshare.raycluster.shell_words import raw_words

    assert raw_words("ray start --resources='{\"a\": 1}' && echo {x,y}\nls # a {b,c} comment\\\n  x \\\n-y") == [
        "ray", "start", "--resources='{\"a\": 1}'", "&", "&", "echo", "{x,y}", ";", "ls", ";", "x", "-y"]
