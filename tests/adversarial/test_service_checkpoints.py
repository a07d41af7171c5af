"""Policy checkpoints are data, not code: a pickle that would run a command is refused by the
library, by the CLI (one line, exit 2) and by ``deepshare serve`` before anything starts, and the
command never runs; the shipped checkpoint still loads with the same weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deepshare.core.errors import DeepShareError
from deepshare.policies import make_policy
from deepshare.policies.checkpoint import FORMAT_VERSION, load_policy_file, shipped


class _RunsCode:
    """Unpickling this calls ``os.system`` (here: touch a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def crafted(tmp_path):
    """A checkpoint shaped like a policy file whose loading would create ``marker``."""
    marker = tmp_path / "marker"
    doc = load_policy_file(shipped())
    doc["metadata"] = {"note": _RunsCode(marker)}
    path = tmp_path / "evil.pt"
    torch.save(doc, path)
    return path, marker


def test_the_crafted_file_really_runs_code_under_a_full_unpickle(crafted, tmp_path):
    """The control: the attack works against torch.load(weights_only=False)."""
    path, marker = crafted
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_library_refuses_a_checkpoint_that_names_code(crafted):
    path, marker = crafted
    with pytest.raises(DeepShareError, match=r"refused: it names Python objects .* could run code"):
        make_policy(f"rl-hybrid={path}")
    assert not marker.exists()


TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


@pytest.mark.slow  # a `deepshare` subprocess per case (imports torch, Ray Serve)
@pytest.mark.parametrize("argv", [["simulate", "--trace", str(TRACE)], ["serve", "--port", "65500"]])
def test_cli_refuses_it_in_one_line_with_exit_2(crafted, argv):
    """``serve`` loads the policy before Ray starts, so it is refused before anything listens."""
    path, marker = crafted
    proc = subprocess.run(
        [sys.executable, "-m", "deepshare", *argv, "--policy", f"rl-base={path}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "refused" in lines[0] and str(path) in lines[0], lines
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_garbage_and_missing_files_are_one_clear_error(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a pickle at all")
    with pytest.raises(DeepShareError, match="not a DeepShare policy file"):
        load_policy_file(junk)
    with pytest.raises(DeepShareError, match="file not found"):
        load_policy_file(tmp_path / "absent.pt")
    with pytest.raises(DeepShareError, match="is a directory"):
        load_policy_file(tmp_path)
    torch.save({"format": FORMAT_VERSION + 1}, tmp_path / "future.pt")
    with pytest.raises(DeepShareError, match="format 1"):
        load_policy_file(tmp_path / "future.pt")


def test_shipped_checkpoint_loads_as_data_with_the_same_weights():
    """The safe loader reads exactly what the trusted full unpickle reads: same decisions."""
    safe = load_policy_file(shipped())
    full = torch.load(shipped(), map_location="cpu", weights_only=False)
    assert safe["state_dict"].keys() == full["state_dict"].keys()
    for key, tensor in full["state_dict"].items():
        assert torch.equal(safe["state_dict"][key], tensor), key
    assert {k: v for k, v in safe.items() if k != "state_dict"} == {k: v for k, v in full.items() if k != "state_dict"}
    assert make_policy("rl-hybrid").name == "rl-hybrid"


def test_an_export_with_odd_metadata_still_loads_as_data(tmp_path):
    """What ``deepshare train`` writes always passes the weights-only loader."""
    import enum

    from deepshare.policies.checkpoint import export_scorer, scorer_from_file
    from deepshare.policies.encoding import FEATURES, EncodingConfig
    from deepshare.policies.scorer_net import CandidateScorer

    class Mode(enum.Enum):
        A = "a"

    net = CandidateScorer(len(FEATURES), 8)
    path = tmp_path / "policy.pt"
    export_scorer(net, EncodingConfig(), path, {"config": tmp_path / "c.yaml", "mode": Mode.A, "grid": (1, [2.5, None])})
    _, _, metadata = scorer_from_file(path)
    assert metadata == {"config": str(tmp_path / "c.yaml"), "mode": "Mode.A", "grid": (1, [2.5, None])}
