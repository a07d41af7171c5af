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
@pytest.mark.parametrize("kind", ["torch.save", "raw pickle"])
def test_cli_refuses_it_in_one_line_with_exit_2(crafted, raw_pickle, argv, kind):
    """``serve`` loads the policy before Ray starts, so it is refused before anything listens."""
    path, marker = crafted if kind == "torch.save" else raw_pickle
    proc = subprocess.run(
        [sys.executable, "-m", "deepshare", *argv, "--policy", f"rl-base={path}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and ("refused" in lines[0] or kind == "raw pickle") and str(path) in lines[0], lines
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


@pytest.fixture
def raw_pickle(tmp_path):
    """A plain ``pickle.dump`` (protocol 5, not torch's format) of an object that would run code."""
    import pickle

    marker = tmp_path / "marker"
    path = tmp_path / "raw.pkl"
    path.write_bytes(pickle.dumps({"format": FORMAT_VERSION, "note": _RunsCode(marker)}, protocol=5))
    return path, marker


def test_a_raw_pickle_is_refused_without_torchs_warnings(raw_pickle):
    """torch warns (two lines on stderr) about the protocol of a raw pickle before failing; the
    refusal must be the only thing a user sees."""
    import warnings

    path, marker = raw_pickle
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DeepShareError, match="not a DeepShare policy file"):
            load_policy_file(path)
    assert [str(w.message) for w in caught] == [] and not marker.exists()


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


def _edited(tmp_path, name, edit):
    """The shipped file with ``edit(doc)`` applied, saved as ``name``."""
    doc = load_policy_file(shipped())
    edit(doc)
    path = tmp_path / f"{name}.pt"
    torch.save(doc, path)
    return path


def _set(key, value):
    return lambda doc: doc.__setitem__(key, value)


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("no-weights", lambda doc: doc.pop("state_dict"), r"not a DeepShare policy file \(no state_dict\)"),
        ("no-metadata", lambda doc: doc.pop("metadata"), r"\(no metadata\)"),
        ("narrower", _set("hidden", 32), r"state_dict: expected the weights of a 26-feature, 32-wide scorer"),
        ("hidden-text", _set("hidden", "64"), r"hidden: expected an integer in 1..4096, got .64."),
        ("hidden-negative", _set("hidden", -3), r"hidden: expected an integer in 1..4096, got -3"),
        ("metadata-list", _set("metadata", [1]), r"metadata: expected a mapping, got list"),
        ("weights-text", _set("state_dict", "x"), r"state_dict: expected the weights .* got str"),
        ("extra-weight", lambda doc: doc["state_dict"].__setitem__("extra", torch.zeros(1)), r"state_dict: expected the weights"),
        ("complex-weights", lambda doc: doc["state_dict"].__setitem__("head.bias", torch.zeros(1, dtype=torch.complex64)),
         r"state_dict: expected real floating-point tensors"),
        ("fractional-k", lambda doc: doc["encoding"].__setitem__("max_candidates", 2.5),
         r"encoding: max_candidates must be an integer in 2..1024 \(wait \+ one launch at least\), got 2.5"),
    ],
)
def test_a_damaged_policy_file_is_one_error_naming_the_field(tmp_path, name, edit, message):
    """Every key of a policy file is checked before torch sees it: a hand-edited or foreign file
    is one DeepShareError naming the file and the field, never a torch traceback."""
    path = _edited(tmp_path, name, edit)
    with pytest.raises(DeepShareError, match=message) as caught:
        make_policy(f"rl-hybrid={path}")
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
