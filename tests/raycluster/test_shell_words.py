"""What a cluster YAML's command lines run, as the shell reads them: the validator's checks that
a node installs this project and the head starts the monitor."""

from __future__ import annotations

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
